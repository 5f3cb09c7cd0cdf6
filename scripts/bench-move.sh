#!/usr/bin/env bash
# Shard moves (rifl.md §5.7, `strata shard move`): how long a move takes and what clients see
# while it happens. For each SIZE in SIZES, on a 4-node cluster: a fresh one-shard `cad` table
# (active-set reads) gets SIZE keys (the load's preload writes each once); then the load, 50 %
# reads / 50 % writes in closed loops, runs for DURATION s, and MOVE_AT s into it the shard
# moves to the three nodes other than its leader, the whole state (keys, completion records,
# watermarks) travelling with it. Repeated RUNS times per size (a fresh table each time).
#
# Reported per size (medians over the runs): the move's wall time as `strata shard move`
# measures it, the keys and completion records it carried, the load's errors (0 expected:
# clients follow `Moved` with the same RPC ids), its p50 / p99 / max latency, and the longest
# stretch without a single completion in the load's timeline (10 ms buckets): the
# unavailability a client sees.
#
#   scripts/bench-move.sh                        # ~3 minutes on 2 cores
#   RUNS=1 SIZES=10000 scripts/bench-move.sh     # a quick look
#
# Knobs (environment): SIZES ("1000 10000 100000"), RUNS (3), DURATION (6 s), MOVE_AT (2 s),
# CLIENTS (4), SESSIONS (4), VALUE_SIZE (64), BASE_PORT (first free from 7600), RESULTS,
# CARGO_TARGET_DIR; QUIET_CORES, QUIET_WAIT, QUIET_BUDGET (scripts/bench-lib.sh); KEEP_LOGS=1.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

SIZES=${SIZES:-"1000 10000 100000"}
RUNS=${RUNS:-3}
DURATION=${DURATION:-6}
MOVE_AT=${MOVE_AT:-2}
CLIENTS=${CLIENTS:-4}
SESSIONS=${SESSIONS:-4}
VALUE_SIZE=${VALUE_SIZE:-64}
NODES=4
RESULTS=${RESULTS:-${CARGO_TARGET_DIR:-$ROOT/target}/bench-results/move-$(date +%Y%m%d-%H%M%S)}

TAG=bench-move
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"
mkdir -p "$RESULTS"

build_and_start_strata
{
    describe_machine
    echo "settings: sizes=[$SIZES] runs=$RUNS duration=${DURATION}s move_at=${MOVE_AT}s clients=$CLIENTS sessions=$SESSIONS value_size=$VALUE_SIZE nodes=$NODES"
} | tee "$RESULTS/machine.txt" >&2

for size in $SIZES; do
    for run in $(seq 1 "$RUNS"); do
        t="m$size-r$run"
        log "size $size, run $run: table $t"
        strata_cli table create "$t" --shards 1 >/dev/null
        leader=$(table_leader "$t" 0) || die "no leader for $t"
        to=$(seq 0 $((NODES - 1)) | grep -vx "$leader" | paste -sd, -)
        wait_quiet
        # The load writes every key once (its preload), then measures; the move starts MOVE_AT
        # seconds into the measured window.
        "$BIN/strata" bench --endpoints "$ENDPOINTS" --table "$t" --keys "$size" --value-size "$VALUE_SIZE" \
            --write-ratio 50 --duration "$DURATION" --warmup 0 --clients "$CLIENTS" --sessions "$SESSIONS" \
            --timeline "$RESULTS/$t-timeline.csv" --json "$RESULTS/$t.json" >/dev/null 2>"$RESULTS/$t-load.log" &
        load=$!
        PIDS+=("$load")
        wait_for 120 grep -q "keys written" "$RESULTS/$t-load.log" || die "the load did not finish its preload (see $RESULTS/$t-load.log)"
        sleep "$MOVE_AT"
        strata_cli shard move "$t" 0 --to "$to" --timeout 60 >"$RESULTS/$t-move.txt" 2>&1 || die "move failed: $(cat "$RESULTS/$t-move.txt")"
        log "  $(cat "$RESULTS/$t-move.txt")"
        wait "$load" || die "the load failed during the move (see $RESULTS/$t.json)"
    done
done

summarize move "$RESULTS" "$SIZES" "$RUNS"
log "results in $RESULTS"
