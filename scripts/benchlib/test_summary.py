"""Known answers for benchlib.summary: python3 -m unittest discover -s scripts -p 'test_*.py'
(or, from scripts/, python3 -m unittest benchlib.test_summary)."""
import json
import tempfile
import unittest
from pathlib import Path

from benchlib import summary


class MedianTest(unittest.TestCase):
    def test_odd_count_is_the_middle_value(self):
        self.assertEqual(summary.median([5, 1, 3]), 3)

    def test_even_count_is_the_mean_of_the_two_middle_values(self):
        # Not 2 (the lower middle), not 3 (the upper), not 4.5 (the mean of all).
        self.assertEqual(summary.median([10, 1, 2, 3]), 2.5)
        self.assertEqual(summary.median([4.0, 1.0]), 2.5)

    def test_missing_values_are_skipped_and_nothing_gives_none(self):
        self.assertEqual(summary.median([None, 7, float("nan"), 9]), 8)
        self.assertIsNone(summary.median([]))
        self.assertIsNone(summary.median([None]))
        self.assertEqual(summary.fmt(summary.median([])), "-")


class RatioTest(unittest.TestCase):
    def test_ratio_and_its_missing_cases(self):
        self.assertEqual(summary.ratio(30, 12), 2.5)
        self.assertIsNone(summary.ratio(1, 0))
        self.assertIsNone(summary.ratio(None, 2))
        self.assertEqual(summary.fmt(summary.ratio(1, 3), ".2f"), "0.33")

    def test_median_of_per_run_ratios_is_not_the_ratio_of_medians(self):
        pairs = [(2, 1), (3, 3), (100, 10)]
        self.assertEqual(summary.median_ratio(pairs), 2)
        self.assertNotEqual(summary.median_ratio(pairs), summary.ratio(3, 3))


class ReportsTest(unittest.TestCase):
    def test_runs_are_loaded_by_run_number_and_medians_taken(self):
        with tempfile.TemporaryDirectory() as d:
            for run, ops, p50 in [(1, 100.0, 10), (2, 300.0, 30), (10, 200.0, 20), (3, 400.0, 40)]:
                rep = {"throughput_ops_s": ops, "errors": run,
                       "latency_us": {"all": {"count": 1, "p50_us": p50, "p99_us": 2 * p50}}}
                Path(d, f"es-w5-r{run}.json").write_text(json.dumps(rep))
            Path(d, "es-w5-r1.cpu.json").write_text("{}")  # not a run
            Path(d, "es-w50-r1.json").write_text("{}")  # another configuration
            reps = summary.runs(d, "es-w5")
            self.assertEqual([r["errors"] for r in reps], [1, 2, 3, 10])
            self.assertEqual(summary.throughput(reps), 250.0)
            self.assertEqual(summary.p50_p99(reps), "25 / 50")
            self.assertEqual(summary.errors(reps), 16)


if __name__ == "__main__":
    unittest.main()
