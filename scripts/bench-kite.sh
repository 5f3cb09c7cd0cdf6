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
# RESULTS (results directory), TIMELINE (docs/kite-timeline.csv; its PNG is drawn by `strata
# bench --timeline`), SWEEP_PNG (docs/kite-sweep.png, drawn by strata-plot), CARGO_TARGET_DIR;
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
NODES=3

TAG=bench-kite
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"
mkdir -p "$RESULTS"

# ---- build; a 3-node cluster on a free base port ------------------------------------------------
build_and_start_strata
NODE2_PID=$(node_pid 2)

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
            bench_run "$name" "${common[@]}" --mode "$mode" --pipeline "$DEPTH" --write-ratio "$ratio" \
                --duration "$DURATION" --seed "$run"
        done
    done
done

# ---- (b) timeline with a paused node -----------------------------------------------------------
log "timeline: kite mode, 5% writes, ${TL_DURATION}s; SIGSTOP node 2 (pid $NODE2_PID) for ${PAUSE_MS} ms at ~${PAUSE_AT}s"
wait_quiet
# The nodes' counters around the run show what the post-wake transition is made of.
strata_cli status --json >"$RESULTS/status-before-timeline.json"
bench_run timeline "${common[@]}" --mode kite --pipeline "$DEPTH" --write-ratio 5 --duration "$TL_DURATION" \
    --timeline "$TIMELINE" &
BENCH_PID=$!
# The window starts after connecting, preloading (KEYS keys: well under 0.5 s) and the warmup;
# the pause comes PAUSE_AT after that, give or take the preload's length (the CSV shows where).
pause_process_later "$NODE2_PID" "$(awk -v w="$WARMUP" -v a="$PAUSE_AT" 'BEGIN { print 0.5 + w + a }')" "$PAUSE_MS" "$RESULTS/pause.txt"
wait "$BENCH_PID" || die "timeline run failed"
wait "$PAUSER_PID" || true
strata_cli status --json >"$RESULTS/status-after-timeline.json"
cat "$RESULTS/pause.txt" >&2

# ---- (c) data-structure workloads --------------------------------------------------------------
for kind in ts msq hml; do
    for fields in 4 32; do
        name="ds-$kind-$fields"
        log "$name"
        wait_quiet
        bench_run "$name" "${common[@]}" --workload "$kind" --fields "$fields" --structures "$STRUCTURES" \
            --duration "$DS_DURATION"
    done
done

# ---- tables ------------------------------------------------------------------------------------
summarize kite "$RESULTS" "$RUNS" "$RATIOS" "$MODES" "$DEPTH"
plot_chart kite-sweep "${SWEEP_PNG:-$ROOT/docs/kite-sweep.png}" "$RESULTS" "$RUNS" "$RATIOS" "$MODES"
log "results in $RESULTS"
