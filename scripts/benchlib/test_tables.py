"""Known answers for benchlib.tables: python3 -m unittest discover -s scripts -p 'test_*.py'."""
import contextlib
import io
import json
import tempfile
import unittest
from pathlib import Path

from benchlib import tables


def txn_report(committed_s, order):
    """A `strata bench --workload txn` report with what `tables.txn` reads."""
    hist = {"count": 10, "p50_us": 100, "p99_us": 200}
    return {"throughput_ops_s": committed_s, "args": {"txn_key_order": order},
            "latency_us": {"all": hist},
            "txn": {"committed": 10, "aborted_attempts": 0, "aborts": {}, "commit_us": hist}}


class TxnTableTest(unittest.TestCase):
    def table(self, order):
        with tempfile.TemporaryDirectory() as d:
            names = ["lat-k1", "tput-k1"] + [f"{w}-{s}" for w in ("uni", "zipf") for s, _ in tables.TXN_SYSTEMS]
            for name in names:
                Path(d, f"{name}-r1.json").write_text(json.dumps(txn_report(1000.0, order)))
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                tables.txn(d, 1, "1", 2)
            return out.getvalue()

    def test_the_contended_workloads_heading_names_the_order_of_the_reads(self):
        for order, words in (("hot-first", "the hottest first"), ("hot-last", "the hottest last")):
            out = self.table(order)
            contended = [l for l in out.splitlines() if "zipfian" in l]
            self.assertEqual(len(contended), 1, out)
            self.assertIn(words, contended[0])
            uniform = [l for l in out.splitlines() if "keys uniform" in l]
            self.assertNotIn("hottest", uniform[0], "uniform keys have no hot ones")


if __name__ == "__main__":
    unittest.main()
