"""The benchmark scripts' Python side (stdlib only), with scripts/ on PYTHONPATH.

  summary.py  medians, ratios and loading `strata bench` JSON reports: the one place that
              computes them (tests: scripts/benchlib/test_summary.py)
"""
