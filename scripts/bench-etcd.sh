#!/usr/bin/env bash
# Strata's synchronising operations against etcd's linearizable ones, side by side, one load
# generator (`strata bench`), one machine (Kite issue #3, item 7):
#  (a) linearizable put/get: Strata release/acquire (`--mode abd`, ABD) vs etcd Put/Range;
#      for reference, Strata's relaxed ops (`--mode es`) and the Kite mix (`--mode kite`);
#  (b) compare-and-swap: Strata strong CAS (per-key Paxos, `--mode paxos --rmw cas`) vs an etcd
#      transaction `if value == v then put`, every operation a CAS.
# Both systems run 3 members on loopback and face the same clients x sessions x pipeline.
# etcd fsyncs its WAL on every commit while Strata's rc engine keeps its replicas in memory, so
# by default etcd's data directories are on tmpfs (/dev/shm: fsync costs nothing), which
# compares replication protocols rather than disks; ETCD_DISK=1 puts them on disk instead.
#
#   scripts/bench-etcd.sh                         # ~6 minutes on 2 cores
#   RUNS=1 DURATION=1 scripts/bench-etcd.sh       # a quick look
#
# Knobs (environment): RUNS (3), DURATION (3 s), WARMUP (0.5 s), CLIENTS (4), SESSIONS (4),
# DEPTH (1: requests in flight per session), KEYS (10000), KEY_SIZE (16), VALUE_SIZE (32),
# RATIOS ("5 50": write % for part (a)), ETCD_DISK (0), BASE_PORT (first free from 7600),
# ETCD_PORT (first free from 12379), RESULTS, CARGO_TARGET_DIR; QUIET_CORES, QUIET_WAIT,
# QUIET_BUDGET (the idle-machine gate, scripts/bench-lib.sh).
#
# It installs etcd-server and protobuf-compiler with apt-get if missing (the etcd target of
# `strata bench` is built with `--features etcd`, which needs protoc), builds release binaries,
# starts both clusters, runs every configuration RUNS times (Strata and etcd interleaved),
# stops everything it started and prints a markdown table of medians and ratios (also in
# $RESULTS/summary.md). See docs/benchmarks.md, "Release consistency (Kite)".
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

RUNS=${RUNS:-3}
DURATION=${DURATION:-3}
WARMUP=${WARMUP:-0.5}
CLIENTS=${CLIENTS:-4}
SESSIONS=${SESSIONS:-4}
DEPTH=${DEPTH:-1}
KEYS=${KEYS:-10000}
KEY_SIZE=${KEY_SIZE:-16}
VALUE_SIZE=${VALUE_SIZE:-32}
RATIOS=${RATIOS:-"5 50"}
ETCD_DISK=${ETCD_DISK:-0}
RESULTS=${RESULTS:-${CARGO_TARGET_DIR:-$ROOT/target}/bench-results/etcd-$(date +%Y%m%d-%H%M%S)}
NODES=3

TAG=bench-etcd
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"
mkdir -p "$RESULTS"

# ---- install and build -----------------------------------------------------------------------
ensure_commands etcd=etcd-server etcdctl=etcd-client protoc=protobuf-compiler
build_strata --features etcd # the etcd target of `strata bench`

# ---- the two clusters -------------------------------------------------------------------------
start_strata

if [ "$ETCD_DISK" = 1 ]; then ETCD_DIR="$WORK/etcd"; else ETCD_DIR=$(mktemp -d /dev/shm/strata-bench-etcd.XXXXXX); fi
CLEANUP_DIRS+=("$ETCD_DIR")
start_etcd "$ETCD_DIR"

{
    describe_machine
    echo "etcd: $(etcd --version | head -1), data on $([ "$ETCD_DISK" = 1 ] && echo disk || echo tmpfs)"
    echo "settings: clients=$CLIENTS sessions=$SESSIONS depth=$DEPTH keys=$KEYS key_size=$KEY_SIZE value_size=$VALUE_SIZE duration=${DURATION}s warmup=${WARMUP}s runs=$RUNS ratios=[$RATIOS] strata=$ENDPOINTS etcd=$ETCD_ENDPOINTS"
} | tee "$RESULTS/machine.txt" >&2

common=(--clients "$CLIENTS" --sessions "$SESSIONS" --pipeline "$DEPTH" --keys "$KEYS" --key-size "$KEY_SIZE"
    --value-size "$VALUE_SIZE" --dist uniform --warmup "$WARMUP" --duration "$DURATION" --quiet)

# One configuration: NAME TARGET ENDPOINTS FLAGS...
run_one() {
    local name=$1 target=$2 endpoints=$3
    shift 3
    log "($n/$total) $name"
    wait_quiet
    bench_run "$name" --target "$target" --endpoints "$endpoints" "${common[@]}" "$@"
}

total=$(( RUNS * ($(wc -w <<<"$RATIOS") * 4 + 2) ))
n=0
for run in $(seq 1 "$RUNS"); do
    for ratio in $RATIOS; do
        for cfg in "etcd abd" "strata abd" "strata es" "strata kite"; do
            set -- $cfg
            n=$((n + 1))
            eps=$([ "$1" = etcd ] && echo "$ETCD_ENDPOINTS" || echo "$ENDPOINTS")
            run_one "$1-$2-w$ratio-r$run" "$1" "$eps" --mode "$2" --write-ratio "$ratio" --seed "$run"
        done
    done
    for target in etcd strata; do
        n=$((n + 1))
        eps=$([ "$target" = etcd ] && echo "$ETCD_ENDPOINTS" || echo "$ENDPOINTS")
        run_one "$target-cas-r$run" "$target" "$eps" --mode paxos --rmw cas --write-ratio 100 --seed "$run"
    done
done

# ---- tables ------------------------------------------------------------------------------------
summarize etcd "$RESULTS" "$RUNS" "$RATIOS"
log "results in $RESULTS"
