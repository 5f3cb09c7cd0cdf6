#!/usr/bin/env python3
"""Draws the log engine's YCSB runs (scripts/bench-log.sh) as a PNG.

Usage: plot-log.py RESULTS_DIR RUNS "CONFIGS" "WORKLOADS" OUT.png

Left: throughput per workload and configuration (median of RUNS runs), like ORCA's Figure 6.
Right: for cad and orca, the share of reads that triggered durability (waited for MakeDurable at
the leader), per workload, like the last row of ORCA's Table 2.
"""
import json
import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LABELS = {
    "sync": "sync (group commit)",
    "async": "async",
    "cad": "cad (leader reads)",
    "orca": "ORCA (cad + active set)",
    "weak": "weak-ZK (async, any node)",
    "strong": "strong-ZK (sync, leader)",
}


def runs_of(results: Path, runs: int, cfg: str, w: str) -> list:
    out = []
    for r in range(1, runs + 1):
        f = results / f"{cfg}-{w}-r{r}.json"
        if f.exists():
            out.append(json.loads(f.read_text()))
    return out


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def main() -> None:
    results, runs, configs, workloads, out = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split(), sys.argv[5]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    width = 0.8 / len(configs)
    for i, cfg in enumerate(configs):
        ys = [median([d["throughput_ops_s"] for d in runs_of(results, runs, cfg, w)]) / 1000 for w in workloads]
        left.bar([x + (i - (len(configs) - 1) / 2) * width for x in range(len(workloads))], ys, width, label=LABELS.get(cfg, cfg))
    left.set_xticks(range(len(workloads)), [f"YCSB {w}" for w in workloads])
    left.set_ylabel("throughput (k ops/s, median)")
    left.set_title("Log tables, 3 local nodes, data on disk")
    left.legend(fontsize=8, ncol=2)
    left.grid(axis="y", alpha=0.3)

    durable = [c for c in ("cad", "orca") if c in configs]
    read_workloads = [w for w in workloads if w != "W"]
    width = 0.8 / max(len(durable), 1)
    for i, cfg in enumerate(durable):
        ys = []
        for w in read_workloads:
            pcts = [d["read_durability"]["pct"] for d in runs_of(results, runs, cfg, w) if d.get("read_durability")]
            ys.append(median(pcts))
        right.bar([x + (i - (len(durable) - 1) / 2) * width for x in range(len(read_workloads))], ys, width, label=LABELS[cfg])
    right.set_xticks(range(len(read_workloads)), [f"YCSB {w}" for w in read_workloads])
    right.set_ylabel("% of reads that triggered durability")
    right.set_title("Reads that waited for MakeDurable")
    right.legend(fontsize=8)
    right.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"plot: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
