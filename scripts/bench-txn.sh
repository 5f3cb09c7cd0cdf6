#!/usr/bin/env bash
# Transactions (issue #18 item 6, RIFL §8.3 Q5/Q6): `strata bench --workload txn`.
#  (a) commit latency and throughput by participant count: transactions that read and write
#      K counters in K distinct shards of a 5-shard `--txn rifl` table, K = 1..5; one loop for
#      latency, 4 clients x 4 sessions for throughput;
#  (b) the same read-modify-write of CONTENDED keys, 4 clients x 4 sessions, against etcd's
#      `txn` (Range each key, then one Txn: put every key if every mod_revision is unchanged)
#      and Redis WATCH/MULTI/EXEC, side by side: keys uniform over KEYS, and under
#      contention (zipfian θ 0.99 over ZKEYS keys); Strata twice: on the 5-shard table (most
#      transactions two-participant 2PC) and on a 1-shard table (one replicated log, as etcd:
#      every transaction single-participant, RIFL R-D17). Every system retries an aborted attempt
#      after the client library's back-off. Strata's transactional tables and etcd fsync
#      every commit on a majority, both on the same disk (under this script's work
#      directory); Redis runs twice: in memory as usual, and with `appendfsync always`
#      (durable on one node). Every workload of part (b) runs twice in a row (READS): the
#      keys read one after the other, and read in one request (`--txn-read-many`: Strata
#      `Transaction::read_many_for_update`, one request per shard; Redis `WATCH` and `MGET` in
#      one write; etcd one `Txn` of `Range`s) — runs `many-*`.
#  Every system on the same transport (TLS): TLS=on (the default) runs Strata as `strata up`
#  starts it (TLS 1.3 on every link) and etcd and Redis over TLS too, with client
#  certificates required (clients and etcd's members; certificates from a throwaway CA,
#  make_peer_certs in scripts/bench-lib.sh); TLS=off runs every system on plain TCP (Strata
#  with --insecure-plaintext).
#
#   scripts/bench-txn.sh                       # ~10 minutes on 2 cores (RUNS=5: 15)
#   RUNS=1 DURATION=1 scripts/bench-txn.sh     # a quick look
#   TLS=off scripts/bench-txn.sh               # every system on plain TCP
#
# Knobs (environment): RUNS (3), DURATION (3 s), WARMUP (0.5 s), PARTICIPANTS ("1 2 3 4 5"),
# KEYS (1000), ZKEYS (100), CONTENDED (2), READS ("each many"), TLS (on), THREADS (1: the load
# generator's threads, `strata bench --threads`, the same for every system), KEY_ORDER
# (hot-first: the order of a transaction's reads, `--txn-key-order`, for every system), ETCD (1), REDIS (1) (each also part b against
# that system; missing etcd-server, protobuf-compiler or redis-server are installed with
# apt-get, and `strata` is built with `--features etcd`), RESULTS, CARGO_TARGET_DIR;
# QUIET_* (the idle-machine gate, scripts/bench-lib.sh). Prints markdown tables (also in
# $RESULTS/summary.md) and draws $RESULTS/txn-participants.png and txn-systems.png. See docs/benchmarks.md.
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
READS=${READS:-"each many"}
REDIS=${REDIS:-1}
ETCD=${ETCD:-1}
TLS=${TLS:-on}
THREADS=${THREADS:-1}
KEY_ORDER=${KEY_ORDER:-hot-first}
RESULTS=${RESULTS:-${CARGO_TARGET_DIR:-$ROOT/target}/bench-results/txn-$(date +%Y%m%d-%H%M%S)}
REDIS_PORT=${REDIS_PORT:-6399}
NODES=3

TAG=bench-txn
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"
mkdir -p "$RESULTS"

[ "$REDIS" = 1 ] && ensure_commands redis-server=redis-server
features=()
if [ "$ETCD" = 1 ]; then
    ensure_commands etcd=etcd-server etcdctl=etcd-client protoc=protobuf-compiler
    features=(--features etcd) # the etcd target of `strata bench`
fi
build_strata "${features[@]}"
describe_machine | tee "$RESULTS/machine.txt" >&2
echo "settings: runs=$RUNS duration=${DURATION}s participants=[$PARTICIPANTS] keys=$KEYS zkeys=$ZKEYS contended=$CONTENDED reads=[$READS] tls=$TLS threads=$THREADS key_order=$KEY_ORDER etcd=$ETCD redis=$REDIS" \
    | tee -a "$RESULTS/machine.txt" >&2
# The peers' flags for `strata bench` (their TLS credentials, or nothing).
PEER_TLS_FLAGS=()
case "$TLS" in
    on) make_peer_certs "$WORK/peer-tls" ;;
    off) STRATA_UP_FLAGS="${STRATA_UP_FLAGS:-} --insecure-plaintext" ;;
    *) die "TLS=$TLS: use on (every system over TLS) or off (every system on plain TCP)" ;;
esac

start_strata
strata_cli table create bank --txn rifl --shards 5 >&2
strata_cli table create one --txn rifl --shards 1 >&2
table_leader bank >/dev/null || die "table bank has no leader"
table_leader one >/dev/null || die "table one has no leader"
common=(--workload txn --quiet --warmup "$WARMUP" --duration "$DURATION" --threads "$THREADS" --txn-key-order "$KEY_ORDER")
txn=("${common[@]}" --table bank)
# Part (b)'s two workloads, for every system: NAME and its bench flags.
uniform=(--txn-objects "$CONTENDED" --keys "$KEYS" --clients 4 --sessions 4)
zipf=(--txn-objects "$CONTENDED" --keys "$ZKEYS" --dist zipfian --zipf-theta 0.99 --clients 4 --sessions 4)
# Runs part (b) against SYSTEM with the given target flags: `both SYSTEM RUN FLAGS...`; each
# workload once per READS mode, back to back (`many-*`: --txn-read-many).
both() {
    local system=$1 run=$2 reads
    shift 2
    for workload in uni zipf; do
        for reads in $READS; do
            local name=$workload-$system-r$run flags=()
            [ "$reads" = many ] && name=many-$name flags=(--txn-read-many)
            wait_quiet
            log "run $run: $workload, $system, reads: $reads"
            if [ "$workload" = uni ]; then
                bench_run "$name" "$@" "${uniform[@]}" "${flags[@]}" --seed "$run"
            else
                bench_run "$name" "$@" "${zipf[@]}" "${flags[@]}" --seed "$run"
            fi
        done
    done
}
for run in $(seq 1 "$RUNS"); do
    for k in $PARTICIPANTS; do
        wait_quiet
        log "run $run: $k participant(s)"
        bench_run "lat-k$k-r$run" --endpoints "$ENDPOINTS" "${txn[@]}" --txn-objects "$k" --txn-spread \
            --keys "$KEYS" --clients 1 --sessions 1 --seed "$run"
        bench_run "tput-k$k-r$run" --endpoints "$ENDPOINTS" "${txn[@]}" --txn-objects "$k" --txn-spread \
            --keys "$KEYS" --clients 4 --sessions 4 --seed "$run"
    done
    both strata "$run" --endpoints "$ENDPOINTS" "${txn[@]}"
    both strata-one "$run" --endpoints "$ENDPOINTS" "${common[@]}" --table one
done
stop_strata

if [ "$ETCD" = 1 ]; then
    start_etcd "$WORK/etcd"
    for run in $(seq 1 "$RUNS"); do
        both etcd "$run" --target etcd --endpoints "$ETCD_ENDPOINTS" "${common[@]}" "${PEER_TLS_FLAGS[@]}"
    done
    stop_etcd
fi
if [ "$REDIS" = 1 ]; then
    start_redis
    for run in $(seq 1 "$RUNS"); do
        both redis "$run" --target redis --endpoints "127.0.0.1:$REDIS_PORT" "${common[@]}" "${PEER_TLS_FLAGS[@]}"
    done
    stop_redis
    start_redis --appendonly yes --appendfsync always --dir "$WORK"
    for run in $(seq 1 "$RUNS"); do
        both redis-aof "$run" --target redis --endpoints "127.0.0.1:$REDIS_PORT" "${common[@]}" "${PEER_TLS_FLAGS[@]}"
    done
    stop_redis
fi

summarize txn "$RESULTS" "$RUNS" "$PARTICIPANTS" "$CONTENDED" "$TLS"
plot_chart txn "$RESULTS/txn-participants.png" "$RESULTS" "$PARTICIPANTS"
plot_chart txn-systems "$RESULTS/txn-systems.png" "$RESULTS" "$TLS"
log "results in $RESULTS"
