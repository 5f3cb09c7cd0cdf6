#!/usr/bin/env python3
"""Draws the geo-latency runs (scripts/bench-geo.sh) as a PNG.

Usage: plot-geo.py RESULTS_DIR RUNS "CONFIGS" "CASES" OUT.png

p50 latency (bars, median of RUNS runs) with the p99 as a tick above each bar, per case and
table, on a log scale: like ORCA's Figure 9, the WAN round trips show as the steps.
"""
import json
import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LABELS = {"orca": "ORCA (cad + active set)", "weak": "weak-ZK (async, any node)", "strong": "strong-ZK (sync, leader)"}


def latency(results: Path, runs: int, cfg: str, case: str, q: str) -> float:
    xs = []
    for r in range(1, runs + 1):
        f = results / f"{cfg}-{case}-r{r}.json"
        if f.exists():
            xs.append(json.loads(f.read_text())["latency_us"]["all"][q] / 1000)
    return statistics.median(xs) if xs else float("nan")


def main() -> None:
    results, runs, configs, cases, out = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split(), sys.argv[5]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(configs)
    for i, cfg in enumerate(configs):
        xs = [x + (i - (len(configs) - 1) / 2) * width for x in range(len(cases))]
        p50 = [latency(results, runs, cfg, c, "p50_us") for c in cases]
        p99 = [latency(results, runs, cfg, c, "p99_us") for c in cases]
        bars = ax.bar(xs, p50, width, label=LABELS.get(cfg, cfg))
        ax.scatter(xs, p99, marker="_", s=300, linewidths=2, color="black")
    ax.set_yscale("log")
    ax.set_xticks(range(len(cases)), cases)
    ax.set_ylabel("latency, ms (bar: p50, tick: p99)")
    ax.set_title("5 nodes in 3 emulated data centres, 17.5 ms one way between them")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"plot: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
