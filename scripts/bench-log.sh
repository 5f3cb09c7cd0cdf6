#!/usr/bin/env bash
# The log engine's durability layers side by side (ORCA §8, the paper's Table 2 / Figure 6):
# YCSB workloads against log tables of one local Strata cluster. The configurations
# (`log_table_flags` in scripts/bench-lib.sh):
#   sync, async, cad   differ only in durability, all with reads at the leader (the durability
#                      layer alone: the paper's Table 2);
#   orca, weak         the paper's system comparison (§8.2 "ORCA system"): cad + active-set reads,
#                      and weak-ZK (async durability, reads at any node, no check);
#   strong             strong-ZK (sync durability, leader reads) is the sync table's definition,
#                      so it is not in the default list: orca/strong then uses the sync runs.
# The data directories are on disk ($TMPDIR), so fsync costs what the disk makes it cost.
#
# The summary (also $RESULTS/summary.md) gives ops/s (median of RUNS), the ratios cad/sync,
# cad/async, orca/strong, orca/weak and orca/cad per workload, p50/p99 latencies, and for cad
# and orca the share of reads that triggered durability: `strata bench --table` reads it from
# the nodes' shard counters (reads that waited for MakeDurable at the leader / reads served,
# ORCA §5.5.1, over the measured window).
#
#   scripts/bench-log.sh                                  # ~10 minutes on 2 cores
#   RUNS=1 DURATION=1 WORKLOADS="W A" scripts/bench-log.sh   # a quick look
#
# Knobs (environment): RUNS (3), DURATION (3 s), WARMUP (0.5 s), CLIENTS (4), SESSIONS (4)
# (one request at a time per session: log tables take --pipeline 1), KEYS (10000), KEY_SIZE (16),
# VALUE_SIZE (32), WORKLOADS ("W A B C D F"), CONFIGS ("sync async cad orca weak"; or strong),
# NODES (3), REPLICATION ("async": the async, cad, orca and weak tables' replication; "sync"
# replicates synchronously and persists lazily, the paper's other async baseline), BASE_PORT (first free from 7600),
# RESULTS, PLOT ($RESULTS/log-ycsb.png: throughput and durability share, drawn with matplotlib,
# installed with pip if missing), CARGO_TARGET_DIR; QUIET_CORES, QUIET_WAIT, QUIET_BUDGET
# (scripts/bench-lib.sh); KEEP_LOGS=1 keeps the nodes' logs in $RESULTS/node-logs.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

RUNS=${RUNS:-3}
DURATION=${DURATION:-3}
WARMUP=${WARMUP:-0.5}
CLIENTS=${CLIENTS:-4}
SESSIONS=${SESSIONS:-4}
KEYS=${KEYS:-10000}
KEY_SIZE=${KEY_SIZE:-16}
VALUE_SIZE=${VALUE_SIZE:-32}
WORKLOADS=${WORKLOADS:-"W A B C D F"}
CONFIGS=${CONFIGS:-"sync async cad orca weak"}
REPLICATION=${REPLICATION:-async}
NODES=${NODES:-3}
RESULTS=${RESULTS:-${CARGO_TARGET_DIR:-$ROOT/target}/bench-results/log-$(date +%Y%m%d-%H%M%S)}
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release

TAG=bench-log
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"
mkdir -p "$RESULTS"

command -v python3 >/dev/null || die "python3 is needed to summarize the JSON results"
build_and_start_strata
create_log_tables "$CONFIGS"

{
    describe_machine
    echo "data: $(df -h "$WORK" | tail -1 | awk '{print $1, $6}') (fsync on this device)"
    echo "settings: clients=$CLIENTS sessions=$SESSIONS (pipeline 1) keys=$KEYS key_size=$KEY_SIZE value_size=$VALUE_SIZE duration=${DURATION}s warmup=${WARMUP}s runs=$RUNS workloads=[$WORKLOADS] configs=[$CONFIGS] replication=$REPLICATION nodes=$NODES"
} | tee "$RESULTS/machine.txt" >&2

total=$((RUNS * $(wc -w <<<"$WORKLOADS") * $(wc -w <<<"$CONFIGS")))
n=0
for run in $(seq 1 "$RUNS"); do
    for w in $WORKLOADS; do
        for cfg in $CONFIGS; do
            n=$((n + 1))
            name="$cfg-$w-r$run"
            log "($n/$total) $name"
            wait_quiet
            bench_table "$name" "l-$cfg" "$run" --endpoints "$ENDPOINTS" --ycsb "$w" --clients "$CLIENTS"
        done
    done
done
"$BIN/strata" status --json --data-dir "$STRATA_DATA" >"$RESULTS/status-after.json" 2>/dev/null || true

python3 - "$RESULTS" "$CONFIGS" "$WORKLOADS" <<'EOF' | tee "$RESULTS/summary.md"
import json, glob, os, statistics, sys
results, configs, workloads = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
# strong-ZK is the sync table's definition (sync durability, leader reads): without runs of
# its own, `strong` is the sync table's.
SAME = {"strong": "sync"}
RATIOS = [("cad", "sync"), ("cad", "async"), ("orca", "strong"), ("orca", "weak"), ("orca", "cad")]
def med(xs):
    return statistics.median(xs) if xs else None
def cell(cfg, w):
    runs = [json.load(open(f)) for f in glob.glob(os.path.join(results, f"{cfg}-{w}-r*.json"))]
    if not runs:
        return cell(SAME[cfg], w) if cfg in SAME else None
    return {
        "ops": med([r["throughput_ops_s"] for r in runs]),
        "p50": med([r["latency_us"]["all"]["p50_us"] for r in runs]),
        "p99": med([r["latency_us"]["all"]["p99_us"] for r in runs]),
        # % of reads that waited for MakeDurable (None: no reads, or not a log-table run).
        "durable_pct": med([p for r in runs if (p := (r.get("read_durability") or {}).get("pct")) is not None]),
        "errors": sum(r["errors"] for r in runs),
        "n": len(runs),
    }
shown = configs + [c for c in SAME if c not in configs and SAME[c] in configs]
cells = {(c, w): cell(c, w) for c in shown for w in workloads}
n = max((v["n"] for v in cells.values() if v), default=0)
ratios = [(a, b) for a, b in RATIOS if a in shown and b in shown]
def ratio(a, b, w):
    x, y = cells[(a, w)], cells[(b, w)]
    return f"{x['ops'] / y['ops']:.2f}" if x and y and y["ops"] else "-"
print(f"YCSB against log tables: ops/s, median of {n} runs; p50 / p99 latency in µs.")
if any(c not in configs for c in shown):
    print("orca/strong: strong-ZK is the sync table (same definition: sync durability, leader reads).")
print()
print("| workload | " + " | ".join(configs) + " | " + " | ".join(f"{a}/{b}" for a, b in ratios) + " | errors |")
print("|---|" + "---:|" * (len(configs) + len(ratios) + 1))
for w in workloads:
    row = [f"{cells[(c, w)]['ops']:,.0f}" if cells[(c, w)] else "-" for c in configs]
    errors = sum(cells[(c, w)]["errors"] for c in configs if cells[(c, w)])
    print(f"| {w} | " + " | ".join(row) + " | " + " | ".join(ratio(a, b, w) for a, b in ratios) + f" | {errors} |")
print("\n| workload | " + " | ".join(f"{c} p50 / p99" for c in configs) + " |")
print("|---|" + "---:|" * len(configs))
for w in workloads:
    print(f"| {w} | " + " | ".join(f"{cells[(c, w)]['p50']:.0f} / {cells[(c, w)]['p99']:.0f}" if cells[(c, w)] else "-" for c in configs) + " |")
made_durable = [c for c in ("cad", "orca") if c in configs]
if made_durable:
    print("\n% of reads that triggered durability (waited for MakeDurable at the leader; median of the runs):\n")
    print("| workload | " + " | ".join(made_durable) + " |")
    print("|---|" + "---:|" * len(made_durable))
    for w in workloads:
        pcts = [cells[(c, w)] and cells[(c, w)]["durable_pct"] for c in made_durable]
        print(f"| {w} | " + " | ".join(f"{p:.2f}" if p is not None else "-" for p in pcts) + " |")
EOF
log "results in $RESULTS"
PLOT=${PLOT:-$RESULTS/log-ycsb.png}
if python3 -c 'import matplotlib' 2>/dev/null || pip install -q matplotlib >/dev/null 2>&1; then
    python3 "$ROOT/scripts/plot-log.py" "$RESULTS" "$RUNS" "$CONFIGS" "$WORKLOADS" "$PLOT" >&2
else
    log "matplotlib is not available (pip install matplotlib): no plot"
fi
