#!/usr/bin/env bash
# Transactions (issue #18 item 6, RIFL §8.3 Q5/Q6): `strata bench --workload txn`.
#  (a) commit latency and throughput by participant count: transactions that read and write
#      K counters in K distinct shards of a 5-shard `--txn rifl` table, K = 1..5; one loop for
#      latency, 4 clients x 4 sessions for throughput;
#  (b) contention: the same read-modify-write of CONTENDED keys, zipfian θ 0.99 over KEYS
#      keys, Strata against Redis WATCH/MULTI/EXEC with the same clients and sessions.
#      (etcd's `txn` is not measured yet: the bench's etcd target has no multi-key
#      compare-and-put transaction.)
#
#   scripts/bench-txn.sh                       # ~5 minutes on 2 cores
#   RUNS=1 DURATION=1 scripts/bench-txn.sh     # a quick look
#
# Knobs (environment): RUNS (3), DURATION (3 s), WARMUP (0.5 s), PARTICIPANTS ("1 2 3 4 5"),
# KEYS (1000: part a; 100: part b), CONTENDED (2), REDIS (1: also part b against Redis; it
# installs redis-server with apt-get if missing), RESULTS, CARGO_TARGET_DIR; QUIET_* (the
# idle-machine gate, scripts/bench-lib.sh). Prints a markdown table (also in
# $RESULTS/summary.md) and draws $RESULTS/txn-participants.png. See docs/benchmarks.md.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

RUNS=${RUNS:-3}
DURATION=${DURATION:-3}
WARMUP=${WARMUP:-0.5}
PARTICIPANTS=${PARTICIPANTS:-"1 2 3 4 5"}
KEYS=${KEYS:-1000}
ZKEYS=${ZKEYS:-100}
CONTENDED=${CONTENDED:-2}
REDIS=${REDIS:-1}
RESULTS=${RESULTS:-${CARGO_TARGET_DIR:-$ROOT/target}/bench-results/txn-$(date +%Y%m%d-%H%M%S)}
REDIS_PORT=${REDIS_PORT:-6399}
NODES=3

TAG=bench-txn
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"
mkdir -p "$RESULTS"

[ "$REDIS" = 1 ] && ensure_commands redis-server=redis-server
build_strata
describe_machine | tee "$RESULTS/machine.txt" >&2
echo "settings: runs=$RUNS duration=${DURATION}s participants=[$PARTICIPANTS] keys=$KEYS zkeys=$ZKEYS contended=$CONTENDED" \
    | tee -a "$RESULTS/machine.txt" >&2

start_strata
strata_cli table create bank --txn rifl --shards 5 >&2
table_leader bank >/dev/null || die "table bank has no leader"
txn=(--workload txn --table bank --quiet --warmup "$WARMUP" --duration "$DURATION")
for run in $(seq 1 "$RUNS"); do
    for k in $PARTICIPANTS; do
        wait_quiet
        log "run $run: $k participant(s)"
        bench_run "lat-k$k-r$run" --endpoints "$ENDPOINTS" "${txn[@]}" --txn-objects "$k" --txn-spread \
            --keys "$KEYS" --clients 1 --sessions 1 --seed "$run"
        bench_run "tput-k$k-r$run" --endpoints "$ENDPOINTS" "${txn[@]}" --txn-objects "$k" --txn-spread \
            --keys "$KEYS" --clients 4 --sessions 4 --seed "$run"
    done
    wait_quiet
    log "run $run: contention, Strata"
    bench_run "zipf-strata-r$run" --endpoints "$ENDPOINTS" "${txn[@]}" --txn-objects "$CONTENDED" \
        --keys "$ZKEYS" --dist zipfian --zipf-theta 0.99 --clients 4 --sessions 4 --seed "$run"
done
stop_strata

if [ "$REDIS" = 1 ]; then
    start_redis
    for run in $(seq 1 "$RUNS"); do
        wait_quiet
        log "run $run: contention, Redis"
        bench_run "zipf-redis-r$run" --target redis --endpoints "127.0.0.1:$REDIS_PORT" --workload txn --quiet \
            --warmup "$WARMUP" --duration "$DURATION" --txn-objects "$CONTENDED" --keys "$ZKEYS" --dist zipfian \
            --zipf-theta 0.99 --clients 4 --sessions 4 --seed "$run"
    done
fi

summarize txn "$RESULTS" "$RUNS" "$PARTICIPANTS" "$CONTENDED"
plot_chart txn "$RESULTS/txn-participants.png" "$RESULTS" "$PARTICIPANTS"
log "results in $RESULTS"
