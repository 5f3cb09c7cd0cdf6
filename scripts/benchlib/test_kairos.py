"""Known answers for benchlib.kairos (bench-kairos.sh's tables): python3 -m unittest discover -s
scripts -p 'test_*.py'."""
import io
import json
import tempfile
import unittest
from contextlib import redirect_stdout
from pathlib import Path

from benchlib import kairos


def report(tput, hit_rate=None):
    return {"throughput_ops_s": tput, "errors": 0,
            "latency_us": {"all": {"count": 1, "p50_us": 10, "p99_us": 20}},
            "txn": {"committed": 100, "aborted_attempts": 5, "aborts": {"stale": 5},
                    "commit_us": {"count": 1, "p50_us": 7}},
            "kairos": {"hit_rate": hit_rate, "cache_stats": None}}


class KairosTablesTest(unittest.TestCase):
    def test_the_knee_is_the_first_peak(self):
        self.assertEqual(kairos.knee([10, 15, 20, 25], [5, 9, 9, 4]), (15, 9))
        self.assertEqual(kairos.knee([10, 15], [None, 3]), (15, 3))
        self.assertIsNone(kairos.knee([10], [None]))

    def test_goal_lines_say_met_or_not(self):
        self.assertIn("met", kairos.goal_line("x", 2.6, 2.5))
        self.assertIn("NOT met", kairos.goal_line("x", 2.4, 2.5))
        self.assertIn("not measured", kairos.goal_line("x", None, 2.5))

    def test_shared_points_and_goals_come_from_fig8(self):
        with tempfile.TemporaryDirectory() as d:
            for name, t in [("f8-baseline-ro90", 100.0), ("f8-ideal-ro90", 300.0), ("f9-ideal-z1.2", 500.0),
                            ("f11-ei-c10", 50.0), ("f11-ei-c20", 80.0), ("f11-ei-c30", 60.0),
                            ("f11-ideal-c10", 50.0), ("f11-ideal-c20", 90.0), ("f11-ideal-c30", 130.0)]:
                Path(d, f"{name}-r1.json").write_text(json.dumps(report(t, 0.5)))
            # Fig. 9a's 0.99 and Fig. 13's ideal are Fig. 8's 90 % point.
            self.assertEqual(kairos.fig9_runs(d, "ideal", "0.99")[0]["throughput_ops_s"], 300.0)
            self.assertEqual(kairos.fig9_runs(d, "ideal", "1.2")[0]["throughput_ops_s"], 500.0)
            self.assertEqual(kairos.fig13_runs(d, "ideal")[0]["throughput_ops_s"], 300.0)
            self.assertEqual(kairos.fig9_runs(d, "ideal", "0.8"), [])
            goals = kairos.fig11_goals(d, ["10", "20", "30"])
            # EI peaks at 20 clients (80/s); leases there: 90/s = 1.125x; their peak, 30, is 1.5x 20.
            self.assertIn("EI's knee (20 clients)", goals[0])
            self.assertIn("1.12", goals[0])
            self.assertIn("NOT met", goals[0])
            self.assertIn("**1.50×**", goals[1])
            out = io.StringIO()
            with redirect_stdout(out):
                kairos.table(d, "1", "baseline ideal", "90", "0.99 1.2", "", "10 20 30", "8 9a 11")
            text = out.getvalue()
            self.assertIn("| 90 | 100 | 300 | 3.00 |", text)
            self.assertIn("lease caching (Ideal) / Baseline at 90 % read-only: **3.00×** (goal ≥ 2.5×): met", text)
            self.assertIn("Kairos / Baseline at 90 % read-only: not measured", text)

class HotSpotBoundsTest(unittest.TestCase):
    def test_uniform_keys_spread_evenly_and_the_loads_add_up(self):
        # No skew: the busiest server is any one, a fifth of the draws (plus rank 0's 1/keys).
        self.assertAlmostEqual(kairos.hottest_share(1000, 0.0, 5), 0.2 + 0.8 / 1000)
        b = kairos.hot_spot_bounds(keys=10**6, read_zipf=0.0, write_zipf=0.0, rate=100.0)
        touch = 1 - 0.8 ** 4  # a transaction of 4 keys touches a given server of 5
        validate = 0.9 * touch + 0.1 * 2 * touch
        self.assertAlmostEqual(b["all hits"][0], validate, places=4)
        self.assertAlmostEqual(b["baseline"][0], 4 * 0.2 + validate, places=4)
        self.assertAlmostEqual(b["baseline"][1], 100.0 / (4 * 0.2 + validate), places=2)

    def test_skew_hurts_the_baseline_most(self):
        flat = kairos.hot_spot_bounds(keys=20_000, read_zipf=0.8)
        steep = kairos.hot_spot_bounds(keys=20_000, read_zipf=1.2)
        self.assertLess(steep["baseline"][1], flat["baseline"][1])
        gain = lambda b: b["all hits"][1] / b["baseline"][1]
        self.assertGreater(gain(steep), gain(flat))
        for b in (flat, steep):  # CV only lies between the two
            self.assertLess(b["baseline"][1], b["cv"][1])
            self.assertLessEqual(b["cv"][1], b["all hits"][1])


if __name__ == "__main__":
    unittest.main()
