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
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release

TAG=bench-move
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"
mkdir -p "$RESULTS"

command -v python3 >/dev/null || die "python3 is needed to read the JSON results"
build_and_start_strata
{
    describe_machine
    echo "settings: sizes=[$SIZES] runs=$RUNS duration=${DURATION}s move_at=${MOVE_AT}s clients=$CLIENTS sessions=$SESSIONS value_size=$VALUE_SIZE nodes=$NODES"
} | tee "$RESULTS/machine.txt" >&2

strata() { "$BIN/strata" "$@" --data-dir "$STRATA_DATA"; }

# The node leading shard 0 of table $1, from `strata status --json`.
leader_of() {
    strata status --json | python3 -c '
import json, sys
table = sys.argv[1]
for node in json.load(sys.stdin):
    for s in node.get("shards", []):
        if s["table"] == table and s["shard"] == 0 and s["role"] == "leader":
            print(node["node"]); sys.exit(0)
sys.exit(1)' "$1"
}

for size in $SIZES; do
    for run in $(seq 1 "$RUNS"); do
        t="m$size-r$run"
        log "size $size, run $run: table $t"
        strata table create "$t" --shards 1 >/dev/null
        leader=""
        for _ in $(seq 50); do leader=$(leader_of "$t") && break; sleep 0.1; done
        [ -n "$leader" ] || die "no leader for $t"
        to=$(seq 0 $((NODES - 1)) | grep -vx "$leader" | paste -sd, -)
        wait_quiet
        # The load writes every key once (its preload), then measures; the move starts MOVE_AT
        # seconds into the measured window.
        "$BIN/strata" bench --endpoints "$ENDPOINTS" --table "$t" --keys "$size" --value-size "$VALUE_SIZE" \
            --write-ratio 50 --duration "$DURATION" --warmup 0 --clients "$CLIENTS" --sessions "$SESSIONS" \
            --timeline "$RESULTS/$t-timeline.csv" --json "$RESULTS/$t.json" >/dev/null 2>"$RESULTS/$t-load.log" &
        load=$!
        PIDS+=("$load")
        for _ in $(seq 1200); do grep -q "keys written" "$RESULTS/$t-load.log" && break; sleep 0.1; done
        grep -q "keys written" "$RESULTS/$t-load.log" || die "the load did not finish its preload (see $RESULTS/$t-load.log)"
        sleep "$MOVE_AT"
        strata shard move "$t" 0 --to "$to" --timeout 60 >"$RESULTS/$t-move.txt" 2>&1 || die "move failed: $(cat "$RESULTS/$t-move.txt")"
        log "  $(cat "$RESULTS/$t-move.txt")"
        wait "$load" || die "the load failed during the move (see $RESULTS/$t.json)"
    done
done

python3 - "$RESULTS" "$SIZES" "$RUNS" <<'EOF' | tee "$RESULTS/summary.md"
import csv, json, re, statistics, sys
results, sizes, runs = sys.argv[1], sys.argv[2].split(), int(sys.argv[3])
def move_ms(text):
    m = re.search(r"in ([0-9.]+)(ms|s|µs)", text)
    v = float(m.group(1))
    return {"ms": v, "s": v * 1000, "µs": v / 1000}[m.group(2)]
def longest_gap_ms(path):
    rows = list(csv.reader(open(path)))
    head, rows = rows[0], rows[1:]
    bucket = int(rows[1][0]) - int(rows[0][0]) if len(rows) > 1 else 10
    gap = best = 0
    for r in rows:
        gap = gap + bucket if float(r[-1]) == 0 else 0
        best = max(best, gap)
    return best
print("| keys (asked) | keys moved | records moved | move ms | load errors | p50 µs | p99 µs | max µs | longest gap ms |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for size in sizes:
    rows = []
    for run in range(1, runs + 1):
        t = f"m{size}-r{run}"
        text = open(f"{results}/{t}-move.txt").read()
        keys, records = map(int, re.search(r"(\d+) keys, \d+ clients' watermarks, (\d+) completion records", text).groups())
        rep = json.load(open(f"{results}/{t}.json"))
        lat = rep["latency_us"]["all"]
        rows.append((keys, records, move_ms(text), rep["errors"], lat["p50_us"], lat["p99_us"], lat["max_us"],
                     longest_gap_ms(f"{results}/{t}-timeline.csv")))
    med = [statistics.median(c) for c in zip(*rows)]
    print(f"| {int(size):,} | {int(med[0]):,} | {int(med[1]):,} | {med[2]:.1f} | {int(max(r[3] for r in rows))} | {med[4]:.0f} | {med[5]:.0f} | {med[6]:.0f} | {med[7]:.0f} |")
EOF
log "results in $RESULTS"
