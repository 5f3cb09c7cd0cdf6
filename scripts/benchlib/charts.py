"""Chart specs for the scripts' plots: `python3 -m benchlib chart NAME ARGS... > spec.json`,
drawn by `strata-plot spec.json out.png` (crates/bench/src/plot.rs, the one plotting path,
which also draws `strata bench --timeline`). The medians come from benchlib.summary.

A spec: {"title", "width", "height", "panels": [panel, ...]} with the panels side by side; a
panel: {"kind": "bars" | "lines", "title", "x_label", "y_label", "weight" (its share of the
width), "categories" (bars: one group per category; lines: the labels of the x ticks), "x"
(lines: the x values), "x_log", "y_log", "y_min", "y_max", "band" ({"from", "to", "label"}: a
shaded horizontal band), "series": [{"label", "values", "marks" (bars: a tick per bar, e.g. the
p99 over a p50 bar), "color" ([r, g, b])}]}. A missing value (null) is not drawn.
"""
import json
from pathlib import Path

from . import kairos
from .summary import latency, ratio, runs, throughput
from .tables import durable_pct, log_runs

LOG_LABELS = {
    "sync": "sync (group commit)",
    "async": "async",
    "cad": "cad (leader reads)",
    "orca": "ORCA (cad + active set)",
    "weak": "weak-ZK (async, any node)",
    "strong": "strong-ZK (sync, leader)",
}


def panel(kind, title, x_label, y_label, series, **extra):
    return dict(kind=kind, title=title, x_label=x_label, y_label=y_label, series=series, **extra)


def log(results, configs, workloads):
    """bench-log.sh: throughput per YCSB workload and configuration (like ORCA's Figure 6), and
    for cad and orca the share of reads that triggered durability (ORCA's Table 2, last row)."""
    configs, workloads = configs.split(), workloads.split()
    left = panel("bars", "Log tables, 3 local nodes, data on disk", "", "throughput (k ops/s, median)",
                 [{"label": LOG_LABELS.get(c, c),
                   "values": [(throughput(log_runs(results, c, w)) or 0) / 1000 for w in workloads]} for c in configs],
                 categories=[f"YCSB {w}" for w in workloads], weight=3)
    durable = [c for c in ("cad", "orca") if c in configs]
    reads = [w for w in workloads if w != "W"]
    right = panel("bars", "Reads that waited for MakeDurable", "", "% of reads that triggered durability",
                  [{"label": LOG_LABELS[c], "values": [durable_pct(log_runs(results, c, w)) for w in reads]} for c in durable],
                  categories=[f"YCSB {w}" for w in reads], weight=2)
    return {"width": 1400, "height": 520, "panels": [left] + ([right] if durable and reads else [])}


GEO_LABELS = {"orca": "ORCA (cad + active set)", "weak": "weak-ZK (async, any node)", "strong": "strong-ZK (sync, leader)"}


def geo(results, configs, cases, wan_ms="17.5"):
    """bench-geo.sh: p50 latency (bars) with the p99 as a tick above each bar, per case and
    table, log scale: like ORCA's Figure 9, the WAN round trips show as the steps."""
    configs, cases = configs.split(), cases.split()
    ms = lambda x: None if x is None else x / 1000
    series = [{"label": GEO_LABELS.get(c, c),
               "values": [ms(latency(runs(results, f"{c}-{k}"), "p50")) for k in cases],
               "marks": [ms(latency(runs(results, f"{c}-{k}"), "p99")) for k in cases]} for c in configs]
    return {"width": 1000, "height": 500, "panels": [panel(
        "bars", f"5 nodes in 3 emulated data centres, {wan_ms} ms one way between them", "",
        "latency, ms (bar: p50, tick: p99)", series, categories=cases, y_log=True)]}


KITE_LABELS = {"es": "ES (relaxed only)", "abd": "ABD (all acquire/release)", "paxos": "Paxos (writes are RMWs)",
               "kite": "Kite (5% sync)"}


def kite_sweep(results, n_runs, ratios, modes):
    """bench-kite.sh part (a): throughput per mode against the write ratio, log-log (like the
    Kite paper's Figure 8), and each mode's throughput as a fraction of the Eventual Store's,
    with the paper's Kite band (0.69-0.88 of ES) shaded."""
    ratios, modes = ratios.split(), modes.split()
    x = [float(r) for r in ratios]
    tput = {m: [throughput(runs(results, f"{m}-w{r}")) for r in ratios] for m in modes}
    labels = [f"{r}%" for r in ratios]
    left = panel("lines", "3 nodes, 16 sessions x pipeline 16", "writes (% of operations)", "throughput (k ops/s, median)",
                 [{"label": KITE_LABELS.get(m, m), "values": [None if t is None else t / 1000 for t in tput[m]]} for m in modes],
                 x=x, categories=labels, x_log=True, y_log=True)
    panels = [left]
    if "es" in tput:
        panels.append(panel("lines", "cost of synchronisation", "writes (% of operations)", "throughput / ES throughput",
                            [{"label": KITE_LABELS.get(m, m), "values": [ratio(a, b) for a, b in zip(tput[m], tput["es"])]}
                             for m in modes if m != "es"],
                            x=x, categories=labels, x_log=True, y_min=0, y_max=1.05,
                            band={"from": 0.69, "to": 0.88, "label": "paper: Kite within 12-31% of ES"}))
    machine = Path(results, "machine.txt")
    lines = machine.read_text().splitlines() if machine.exists() else []
    git = next((line.split(": ", 1)[1] for line in lines if line.startswith("git: ")), "?")
    return {"title": f"Strata rc engine: write-ratio sweep (scripts/bench-kite.sh, commit {git}, {n_runs} runs)",
            "width": 1300, "height": 500, "panels": panels}


def txn(results, participants):
    """bench-txn.sh: commit latency (p50 bars, p99 ticks) by participant count, beside the
    paper's ratios 1 : 1.08 : 1.22 : 1.39 : 1.53 scaled to the one-participant p50."""
    from .tables import txn_commit
    ks = participants.split()
    p50 = [txn_commit(runs(results, f"lat-k{k}"), "p50") for k in ks]
    p99 = [txn_commit(runs(results, f"lat-k{k}"), "p99") for k in ks]
    paper = [1, 1.08, 1.22, 1.39, 1.53]
    scaled = [None if p50[0] is None or i >= len(paper) else p50[0] * paper[i] for i in range(len(ks))]
    return {"width": 900, "height": 480, "panels": [panel(
        "bars", "Commit latency by participants (3 local nodes, sync tables)", "participants", "µs (median of runs)",
        [{"label": "Strata p50 (tick: p99)", "values": p50, "marks": p99},
         {"label": "RIFL paper's ratios x Strata's 1-participant p50", "values": scaled}],
        categories=ks)]}


def txn_systems(results, tls=None):
    """bench-txn.sh part (b): committed transactions per second of every system, per workload
    and read mode (log scale: in-memory Redis and contended etcd are 200x apart); TLS (on or
    off, the script's setting) goes into the title."""
    from .tables import TXN_SYSTEMS
    cases = [(f"{m}{w}", f"{what}, {how}") for m, how in (("", "keys one at a time"), ("many-", "keys in one request"))
             for w, what in (("uni", "uniform"), ("zipf", "contention"))]
    cases = [(p, label) for p, label in cases if runs(results, f"{p}-strata-one")]
    series = [{"label": label, "values": [throughput(runs(results, f"{p}-{name}")) for p, _ in cases]}
              for name, label in TXN_SYSTEMS if any(runs(results, f"{p}-{name}") for p, _ in cases)]
    return {"width": 1300, "height": 520, "panels": [panel(
        "bars", "2-key read-modify-write transactions, 4 clients x 4 sessions (bench-txn.sh part b)"
        + {"on": ", every system over TLS", "off": ", every system on plain TCP"}.get(tls, ""), "",
        "committed transactions/s (median of runs, log scale)", series, categories=[label for _, label in cases],
        y_log=True, y_min=100, y_max=500_000)]}  # headroom above the bars for the legend


def kairos_model(csv_file, r_ms, w_ms):
    """kairos-model.sh (Kairos Fig. 5): fresh and stale hit rates by lease length, the model
    (Equation 5) against the Monte Carlo simulation (§5.13), from `strata txn lease-model
    --sweep`'s CSV."""
    import csv
    rows = list(csv.DictReader(open(csv_file)))
    x = [float(r["d_ms"]) for r in rows]
    col = lambda name: [float(r[name]) if r.get(name) not in (None, "") else None for r in rows]
    return {"width": 900, "height": 520, "panels": [panel(
        "lines", f"Lease length and hit rates, R {r_ms} ms, W {w_ms} ms (Kairos Fig. 5)", "lease d (ms)",
        "share of reads", [
            # The simulation wide and light underneath, the model thin on top: where they agree
            # the model's line runs inside the simulation's.
            {"label": "fresh hits, Monte Carlo (§5.13)", "values": col("mc_fresh"), "color": [255, 187, 120], "width": 9},
            {"label": "fresh hits, model (Eq. 5)", "values": col("model_fresh"), "color": [31, 119, 180], "width": 2},
            {"label": "stale hits, Monte Carlo", "values": col("mc_stale"), "color": [255, 152, 150], "width": 9},
            {"label": "stale hits, model", "values": col("model_stale"), "color": [140, 30, 30], "width": 2},
            {"label": "all hits, model (d / (d + R))", "values": [1 - m for m in col("model_miss")], "color": [100, 100, 100], "width": 1},
        ], x=x, y_min=0.0, y_max=1.0)]}


CHARTS = {"log": log, "geo": geo, "kite-sweep": kite_sweep, "txn": txn, "txn-systems": txn_systems,
          "kairos-model": kairos_model,
          **kairos.CHARTS}


def main(name, args):
    print(json.dumps(CHARTS[name](*args), indent=1))


