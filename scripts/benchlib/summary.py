"""Medians, ratios and `strata bench` reports: the one place the benchmark scripts compute them.

Every summary table (tables.py) and chart (charts.py) takes its numbers from here, so a median is
computed one way everywhere: the middle value of the sorted runs, the mean of the two middle ones
for an even count. Missing values (None: a run without that figure) are left out; no value at all
gives None, which `fmt` prints as "-".
"""
import json
import math
import re
from pathlib import Path


def median(xs):
    """The median of the numbers in `xs` (None entries skipped), or None if there are none."""
    s = sorted(x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x)))
    if not s:
        return None
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def mean(xs):
    """The arithmetic mean of `xs` (None entries skipped), or None if there are none."""
    s = [x for x in xs if x is not None]
    return sum(s) / len(s) if s else None


def ratio(a, b):
    """a / b, or None when either is missing or b is 0."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def median_ratio(pairs):
    """The median of the per-pair ratios a / b (each run beside its partner run)."""
    return median(ratio(a, b) for a, b in pairs)


def fmt(x, spec=",.0f"):
    """`x` formatted with `spec`, or "-" when it is missing."""
    return "-" if x is None else format(x, spec)


def load(path):
    """One JSON file."""
    return json.loads(Path(path).read_text())


def runs(results, name):
    """The reports `name-r<N>.json` in `results`, by run number (other files such as
    `name-r1.cpu.json` are not runs)."""
    pat = re.compile(re.escape(name) + r"-r(\d+)\.json$")
    found = []
    for f in Path(results).iterdir():
        m = pat.fullmatch(f.name)
        if m:
            found.append((int(m.group(1)), f))
    return [load(f) for _, f in sorted(found)]


def throughput(reports):
    """Median ops/s of the reports."""
    return median(r["throughput_ops_s"] for r in reports)


def latency(reports, q, cls=None):
    """Median latency quantile `q` ("p50", "p99", "max") in µs over all operations, or over
    the YCSB class `cls` ("read", "update", ...); runs that completed none are skipped."""
    hists = [r["latency_us"]["all"] if cls is None else r["ycsb"][cls] for r in reports]
    return median(h[f"{q}_us"] for h in hists if h["count"] > 0)


def p50_p99(reports, cls=None, scale=1.0, spec=".0f"):
    """"p50 / p99" of the reports (medians), each divided by `scale`; "-" without data."""
    p50, p99 = latency(reports, "p50", cls), latency(reports, "p99", cls)
    if p50 is None:
        return "-"
    return f"{fmt(p50 / scale, spec)} / {fmt(p99 / scale, spec)}"


def errors(reports):
    """Errors summed over the reports."""
    return sum(r["errors"] for r in reports)
