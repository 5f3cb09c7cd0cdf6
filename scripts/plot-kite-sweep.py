#!/usr/bin/env python3
"""Draws the Kite write-ratio sweep (scripts/bench-kite.sh, part (a)) as a PNG.

Usage: plot-kite-sweep.py RESULTS_DIR RUNS "RATIOS" "MODES" OUT.png

Left: throughput (median of RUNS runs) per mode against the write ratio, log scale, like the
Kite paper's Figure 8. Right: each mode's throughput as a fraction of the Eventual Store's at
the same write ratio, with the paper's Kite band (0.69-0.88 of ES) shaded.
"""
import json
import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullLocator  # noqa: E402

LABELS = {"es": "ES (relaxed only)", "abd": "ABD (all acquire/release)", "paxos": "Paxos (writes are RMWs)", "kite": "Kite (5% sync)"}
MARKERS = {"es": "o", "abd": "s", "paxos": "^", "kite": "D"}


def median_throughput(results: Path, runs: int, mode: str, ratio: str) -> float:
    xs = []
    for r in range(1, runs + 1):
        f = results / f"{mode}-w{ratio}-r{r}.json"
        if f.exists():
            xs.append(json.loads(f.read_text())["throughput_ops_s"])
    return statistics.median(xs) if xs else float("nan")


def main() -> None:
    results, runs, ratios, modes, out = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split(), sys.argv[5]
    x = [float(r) for r in ratios]
    tput = {m: [median_throughput(results, runs, m, r) for r in ratios] for m in modes}
    machine = (results / "machine.txt").read_text().splitlines() if (results / "machine.txt").exists() else []
    git = next((l.split(": ", 1)[1] for l in machine if l.startswith("git: ")), "?")

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for m in modes:
        left.plot(x, [t / 1000 for t in tput[m]], marker=MARKERS.get(m, "o"), label=LABELS.get(m, m))
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xticks(x, [f"{r}%" for r in ratios])
    left.xaxis.set_minor_locator(NullLocator())
    left.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    left.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    left.set_xlabel("writes (% of operations)")
    left.set_ylabel("throughput (k ops/s, median)")
    left.set_title("3 nodes, 16 sessions x pipeline 16")
    left.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=8)

    if "es" in tput:
        right.axhspan(0.69, 0.88, color="tab:green", alpha=0.12, label="paper: Kite within 12-31% of ES")
        for m in modes:
            if m == "es":
                continue
            right.plot(x, [a / b for a, b in zip(tput[m], tput["es"])], marker=MARKERS.get(m, "o"), label=LABELS.get(m, m))
        right.set_xscale("log")
        right.set_xticks(x, [f"{r}%" for r in ratios])
        right.xaxis.set_minor_locator(NullLocator())
        right.set_ylim(0, 1.05)
        right.set_xlabel("writes (% of operations)")
        right.set_ylabel("throughput / ES throughput")
        right.set_title("cost of synchronisation")
        right.grid(True, alpha=0.3)
        right.legend(fontsize=8)

    fig.suptitle(f"Strata rc engine: write-ratio sweep (scripts/bench-kite.sh, commit {git}, {runs} runs)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
