"""The benchmark scripts' Python side (stdlib only), run as `python3 -m benchlib COMMAND ...`
with scripts/ on PYTHONPATH (scripts/bench-lib.sh's `benchpy` does that).

  summary.py  medians, ratios and loading `strata bench` JSON reports: the one place that
              computes them (tests: scripts/benchlib/test_summary.py)
  tables.py   each bench-*.sh script's markdown summary
  charts.py   chart specs (JSON) for `strata-plot`, the one plotting path (crates/bench/src/plot.rs)
  cluster.py  questions about a running cluster: `strata status --json`, cluster.json
"""
