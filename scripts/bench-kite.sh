#!/usr/bin/env bash
# Release consistency (Kite) on a 3-node Strata cluster, with `strata bench`:
#  (a) B1 sweep (Kite §8.3): write ratio x mode (es, abd, paxos, kite), pipelined, RUNS runs each,
#      medians, and the ratios Kite/ES, ABD/ES, Paxos/ES;
#  (b) B4-style timeline (Kite fig. 11): kite mode, 5% writes; node 2 is SIGSTOPped for PAUSE_MS
#      about 1 s into the window, then SIGCONTed; per-node CSV + PNG into docs/kite-timeline.*;
#  (c) data-structure workloads (ts, msq, hml) with 4 and 32 fields, one run each.
# See docs/benchmarks.md, "Release consistency (Kite)".
#
#   scripts/bench-kite.sh                         # ~6 minutes on 2 cores
#   RUNS=1 DURATION=1 RATIOS="5 50" scripts/bench-kite.sh   # a quick look
#
# Knobs (environment): RUNS (3), DURATION (2 s), WARMUP (0.5 s), CLIENTS (4), SESSIONS (4),
# DEPTH (16), KEYS (20000), KEY_SIZE (16), VALUE_SIZE (32), RATIOS ("1 5 20 50 100"),
# MODES ("es abd paxos kite"), TL_DURATION (3 s), PAUSE_AT (1.0 s into the window),
# PAUSE_MS (400), DS_DURATION (2 s), STRUCTURES (1000), BASE_PORT (first free from 7600),
# RESULTS (results directory), TIMELINE (docs/kite-timeline.csv), SWEEP_PNG (docs/kite-sweep.png,
# drawn with matplotlib, installed with pip if missing), CARGO_TARGET_DIR;
# QUIET_CORES (0.1), QUIET_WAIT (5 s), QUIET_BUDGET (60 s): the idle-machine gate (wait_quiet,
# scripts/bench-lib.sh).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

RUNS=${RUNS:-3}
DURATION=${DURATION:-2}
WARMUP=${WARMUP:-0.5}
CLIENTS=${CLIENTS:-4}
SESSIONS=${SESSIONS:-4}
DEPTH=${DEPTH:-16}
KEYS=${KEYS:-20000}
KEY_SIZE=${KEY_SIZE:-16}
VALUE_SIZE=${VALUE_SIZE:-32}
RATIOS=${RATIOS:-"1 5 20 50 100"}
MODES=${MODES:-"es abd paxos kite"}
TL_DURATION=${TL_DURATION:-3}
PAUSE_AT=${PAUSE_AT:-1.0}
PAUSE_MS=${PAUSE_MS:-400}
DS_DURATION=${DS_DURATION:-2}
STRUCTURES=${STRUCTURES:-1000}
RESULTS=${RESULTS:-${CARGO_TARGET_DIR:-$ROOT/target}/bench-results/kite-$(date +%Y%m%d-%H%M%S)}
TIMELINE=${TIMELINE:-$ROOT/docs/kite-timeline.csv}
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release
NODES=3

TAG=bench-kite
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"
mkdir -p "$RESULTS"

# ---- build -----------------------------------------------------------------------------------
log "building release binaries"
cargo build --release -q -p strata -p strata-node
BENCH=("$BIN/strata" bench)
command -v python3 >/dev/null || die "python3 is needed to summarize the JSON results"

# ---- a 3-node cluster on a free base port ----------------------------------------------------
BASE_PORT=${BASE_PORT:-$(free_base_port 7600 200 9800 "$NODES" 100)} || die "no free base port found"
start_strata
NODE2_PID=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["nodes"][2]["pid"])' "$STRATA_DATA/cluster.json")

{
    describe_machine
    echo "settings: clients=$CLIENTS sessions=$SESSIONS depth=$DEPTH keys=$KEYS key_size=$KEY_SIZE value_size=$VALUE_SIZE duration=${DURATION}s warmup=${WARMUP}s runs=$RUNS ratios=[$RATIOS] modes=[$MODES] base_port=$BASE_PORT"
} | tee "$RESULTS/machine.txt" >&2

common=(--endpoints "$ENDPOINTS" --clients "$CLIENTS" --sessions "$SESSIONS" --keys "$KEYS" --key-size "$KEY_SIZE"
    --value-size "$VALUE_SIZE" --dist uniform --warmup "$WARMUP" --quiet)

# ---- (a) B1 sweep ----------------------------------------------------------------------------
total=$(( $(wc -w <<<"$RATIOS") * $(wc -w <<<"$MODES") * RUNS ))
n=0
for run in $(seq 1 "$RUNS"); do
    for ratio in $RATIOS; do
        for mode in $MODES; do
            n=$((n + 1))
            name="$mode-w$ratio-r$run"
            log "($n/$total) $name"
            wait_quiet
            "${BENCH[@]}" "${common[@]}" --mode "$mode" --pipeline "$DEPTH" --write-ratio "$ratio" --duration "$DURATION" \
                --seed "$run" --label "$name" --json "$RESULTS/$name.json" >"$RESULTS/$name.txt" 2>&1 \
                || { cat "$RESULTS/$name.txt" >&2; die "$name failed"; }
        done
    done
done

# ---- (b) timeline with a paused node -----------------------------------------------------------
log "timeline: kite mode, 5% writes, ${TL_DURATION}s; SIGSTOP node 2 (pid $NODE2_PID) for ${PAUSE_MS} ms at ~${PAUSE_AT}s"
wait_quiet
# The nodes' counters around the run show what the post-wake transition is made of.
"$BIN/strata" status --json --data-dir "$STRATA_DATA" >"$RESULTS/status-before-timeline.json"
"${BENCH[@]}" "${common[@]}" --mode kite --pipeline "$DEPTH" --write-ratio 5 --duration "$TL_DURATION" \
    --timeline "$TIMELINE" --label timeline --json "$RESULTS/timeline.json" >"$RESULTS/timeline.txt" 2>&1 &
BENCH_PID=$!
# The window starts after connecting, preloading (KEYS keys: well under 0.5 s) and the warmup;
# the pause comes PAUSE_AT after that, give or take the preload's length (the CSV shows where).
python3 - "$RESULTS/timeline.json" "$WARMUP" "$PAUSE_AT" "$PAUSE_MS" "$NODE2_PID" "$BENCH_PID" <<'PY' >"$RESULTS/pause.txt"
import os, signal, sys, time
_, _, warmup, at, ms, pid, bench = sys.argv
start = time.time()
time.sleep(0.5 + float(warmup) + float(at))
t0 = time.time()
os.kill(int(pid), signal.SIGSTOP)
time.sleep(int(ms) / 1000)
os.kill(int(pid), signal.SIGCONT)
t1 = time.time()
print(f"stopped at +{t0 - start:.3f}s after launch, continued at +{t1 - start:.3f}s ({(t1 - t0) * 1000:.0f} ms)")
PY
wait "$BENCH_PID" || { cat "$RESULTS/timeline.txt" >&2; die "timeline run failed"; }
"$BIN/strata" status --json --data-dir "$STRATA_DATA" >"$RESULTS/status-after-timeline.json"
cat "$RESULTS/pause.txt" >&2

# ---- (c) data-structure workloads --------------------------------------------------------------
for kind in ts msq hml; do
    for fields in 4 32; do
        name="ds-$kind-$fields"
        log "$name"
        wait_quiet
        "${BENCH[@]}" "${common[@]}" --workload "$kind" --fields "$fields" --structures "$STRUCTURES" \
            --duration "$DS_DURATION" --label "$name" --json "$RESULTS/$name.json" >"$RESULTS/$name.txt" 2>&1 \
            || { cat "$RESULTS/$name.txt" >&2; die "$name failed"; }
    done
done

# ---- tables ------------------------------------------------------------------------------------
python3 - "$RESULTS" "$RUNS" "$RATIOS" "$MODES" <<'EOF2' | tee "$RESULTS/summary.md"
import csv, json, statistics, sys
from pathlib import Path
results, runs, ratios, modes = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
def reps(mode, ratio):
    return [json.loads(f.read_text()) for r in range(1, runs + 1) if (f := results / f"{mode}-w{ratio}-r{r}.json").exists()]
def med(xs): return statistics.median(xs) if xs else float("nan")
print(f"B1: ops/s, median of {runs} runs (pipeline 16); p50 / p99 latency of all operations in µs.\n")
print("| writes % | " + " | ".join(f"{m} ops/s" for m in modes) + " | Kite/ES | ABD/ES | Paxos/ES | Paxos/ABD | errors |")
print("|---:|" + "---:|" * (len(modes) + 5))
for ratio in ratios:
    t = {m: med([x["throughput_ops_s"] for x in reps(m, ratio)]) for m in modes}
    errs = sum(x["errors"] for m in modes for x in reps(m, ratio))
    r = lambda a, b: f"{t[a] / t[b]:.2f}" if a in t and b in t else "?"
    print(f"| {ratio} | " + " | ".join(f"{t[m]:,.0f}" for m in modes) + f" | {r('kite','es')} | {r('abd','es')} | {r('paxos','es')} | {r('paxos','abd')} | {errs} |")
print("\nLatency p50 / p99 (µs, medians):\n")
print("| writes % | " + " | ".join(modes) + " |")
print("|---:|" + "---:|" * len(modes))
for ratio in ratios:
    cells = []
    for m in modes:
        xs = reps(m, ratio)
        cells.append(f'{med([x["latency_us"]["all"]["p50_us"] for x in xs]):.0f} / {med([x["latency_us"]["all"]["p99_us"] for x in xs]):.0f}')
    print(f"| {ratio} | " + " | ".join(cells) + " |")
print("\nKite mode, per class (median p50 / p99 µs, and share of operations), by write ratio:\n")
print("| writes % | relaxed read | acquire | relaxed write | release |")
print("|---:|---:|---:|---:|---:|")
for ratio in ratios:
    xs = reps("kite", ratio)
    if not xs: continue
    cells = []
    for c in ["relaxed_read", "acquire", "relaxed_write", "release"]:
        cnt = med([x["class_latency_us"][c]["count"] / max(x["ops"], 1) for x in xs])
        if cnt == 0: cells.append("-"); continue
        cells.append(f'{med([x["class_latency_us"][c]["p50_us"] for x in xs]):.0f} / {med([x["class_latency_us"][c]["p99_us"] for x in xs]):.0f} ({100*cnt:.1f}%)')
    print(f"| {ratio} | " + " | ".join(cells) + " |")
tl = results / "timeline.json"
if tl.exists():
    x = json.loads(tl.read_text())
    print(f"\nTimeline run: {x['throughput_ops_s']:,.0f} ops/s over {x['duration_s']:.1f} s, errors {x['errors']}, files {x['timeline_files']}")
    rows = list(csv.DictReader(open(x["timeline_files"][0])))
    nodes = [k for k in rows[0] if k.startswith("node")]
    totals = [float(r["total"]) for r in rows]
    low = [r for r in rows if float(r["node2"]) == 0]
    print(f"buckets: {len(rows)}; buckets with node2 = 0: {len(low)}"
          + (f" (t_ms {low[0]['t_ms']}..{low[-1]['t_ms']})" if low else ""))
    if low:
        a, b = int(low[0]["t_ms"]), int(low[-1]["t_ms"])
        before = [r for r in rows if 100 <= int(r["t_ms"]) < a - 50]
        during = [r for r in rows if a + 50 <= int(r["t_ms"]) <= b - 50]
        after = [r for r in rows if int(r["t_ms"]) > b + 100]
        def avg(rs, k): return statistics.mean(float(r[k]) for r in rs) if rs else float("nan")
        print("\n| period | " + " | ".join(nodes) + " | total |")
        print("|---|" + "---:|" * (len(nodes) + 1))
        for name, rs in [("before (100 ms .. pause - 50 ms)", before), ("paused (+50 ms .. end - 50 ms)", during), ("after (end + 100 ms ..)", after)]:
            print(f"| {name} | " + " | ".join(f"{avg(rs, k):,.0f}" for k in nodes) + f" | {avg(rs, 'total'):,.0f} |")
        # the deepest dip of the live nodes' total around the start of the pause
        live = [sum(float(r[k]) for k in nodes if k != "node2") for r in rows]
        i0 = max(0, rows.index(low[0]) - 2)
        seg = live[i0:i0 + 15]
        print(f"\nlive nodes (node0+node1) in the first 150 ms of the pause, per 10 ms bucket: {', '.join(f'{v:,.0f}' for v in seg)}")
    sb, sa = results / "status-before-timeline.json", results / "status-after-timeline.json"
    if sb.exists() and sa.exists():
        before = {n["node"]: n for n in json.loads(sb.read_text()) if n.get("up")}
        after = {n["node"]: n for n in json.loads(sa.read_text()) if n.get("up")}
        print("\nCounters over the timeline run (after - before):\n")
        print("| node | machine epoch | slow releases | slow-path relaxed accesses |")
        print("|---:|---:|---:|---:|")
        for n in sorted(after):
            b, a = before.get(n, {}), after[n]
            d = lambda k: a.get(k, 0) - b.get(k, 0)
            print(f"| {n} | {b.get('machine_epoch', '?')} -> {a['machine_epoch']} | {d('barriers_slow'):,} | {d('slow_path_accesses'):,} |")
print("\nData-structure workloads (push-then-pop pairs on random structures):\n")
print("| workload | pairs/s | requests/s | requests/pair | sync share | CAS failed locally / at a quorum | errors |")
print("|---|---:|---:|---:|---:|---:|---:|")
for kind in ["ts", "msq", "hml"]:
    for fields in [4, 32]:
        f = results / f"ds-{kind}-{fields}.json"
        if not f.exists(): continue
        x = json.loads(f.read_text()); d = x["ds"]
        print(f"| {kind}-{fields} | {d['pairs_s']:,.0f} | {x['throughput_ops_s']:,.0f} | {d['requests_per_pair']:.1f} | {d['sync_share']:.3f} | {d['cas_local_fail']} / {d['cas_quorum_fail']} | {x['errors']} |")
EOF2
SWEEP_PNG=${SWEEP_PNG:-$ROOT/docs/kite-sweep.png}
if python3 -c 'import matplotlib' 2>/dev/null || pip install -q matplotlib >/dev/null 2>&1; then
    python3 "$ROOT/scripts/plot-kite-sweep.py" "$RESULTS" "$RUNS" "$RATIOS" "$MODES" "$SWEEP_PNG" >&2
else
    log "matplotlib is not available (pip install matplotlib): no sweep plot"
fi
log "results in $RESULTS"
