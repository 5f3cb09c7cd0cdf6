#!/usr/bin/env bash
# YCSB workloads (ORCA §8: W, A, B, C, D, F) against a 3-member ZooKeeper 3.8 ensemble and a
# 3-node Strata cluster's log tables, side by side, one load generator (`strata bench --ycsb`),
# one machine (ORCA §8.3 E3).
# ZooKeeper is the ORCA paper's baseline: its reads are served by the server a session is
# connected to (sequentially consistent, the paper's "weak-ZK" reads), its writes go through
# the leader's atomic broadcast (Zab) and, with zookeeper.forceSync=yes (ZooKeeper's default),
# are fsynced to the transaction log before they are acknowledged. The ensemble runs twice:
# forceSync=yes and forceSync=no.
#
# Strata's side is one log table per configuration of STRATA_CONFIGS (`log_table_flags` in
# scripts/bench-lib.sh; default sync, cad and orca), loaded with `strata bench --table`. Both
# sides run one request at a time per session (log tables take --pipeline 1).
#
# Then, unless ETCD=0, a 3-member etcd cluster (Debian etcd-server; Raft, every write fsynced
# by a majority, reads linearizable) gets the same workloads (`--target etcd`): etcd is what
# ORCA's strong-ZK is, as a product. Its data is where ZooKeeper's is.
#
# fsync only costs something on a real disk: by default ZooKeeper's data directories are on
# tmpfs (/dev/shm), which compares replication protocols rather than disks, and forceSync
# yes/no then differ little; ZK_DISK=1 puts them under $WORK (TMPDIR, on disk) instead.
#
#   scripts/bench-zk.sh                                          # ~20 minutes on 2 cores
#   RUNS=1 DURATION=1 WORKLOADS="A D F" scripts/bench-zk.sh     # a quick look
#
# Knobs (environment): RUNS (3), DURATION (3 s), WARMUP (0.5 s), CLIENTS (4), SESSIONS (4),
# KEYS (10000), KEY_SIZE (16), VALUE_SIZE (32), WORKLOADS ("W A B C D F"), SYNCS ("yes no": the
# forceSync settings), ZK_DISK (0), ZK_HEAP (256m per member), ZK_JIT_WARMUP (5 s of unrecorded
# load on a fresh ensemble: the JVMs run 2-3x slower until the JIT has compiled the hot paths),
# STRATA_CONFIGS ("sync cad orca"), REPLICATION ("async", the cad and orca tables'), ETCD (1),
# BASE_PORT (first free from 7600), ZK_PORT (first free from 12181), ETCD_PORT (first free from
# 12379), RESULTS, CARGO_TARGET_DIR; KEEP_LOGS=1 keeps Strata's node logs;
# QUIET_CORES, QUIET_WAIT, QUIET_BUDGET (the idle-machine gate, scripts/bench-lib.sh).
#
# It installs the Debian package `zookeeper` with apt-get if missing (java must be on the
# machine), builds release binaries (`strata` with `--features zookeeper`), starts the Strata
# cluster and, for each forceSync setting, a fresh ZooKeeper ensemble (QuorumPeerMain started
# directly with java, no systemd); runs every workload RUNS times on each (interleaved: ZooKeeper
# forceSync=yes and each Strata table during the first ensemble; ZooKeeper forceSync=no during
# the second),
# stops everything it started and prints a markdown table of medians and ratios (also in
# $RESULTS/summary.md). Each ZooKeeper run writes its keys under a znode of its own.
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
SYNCS=${SYNCS:-"yes no"}
ZK_DISK=${ZK_DISK:-0}
ZK_JIT_WARMUP=${ZK_JIT_WARMUP:-5}
# Strata's side: one log table per configuration (scripts/bench-lib.sh, log_table_flags).
STRATA_CONFIGS=${STRATA_CONFIGS:-"sync cad orca"}
# etcd 3 (Debian etcd-server) with the same load after the ZooKeeper runs; ETCD=0 skips it.
ETCD=${ETCD:-1}
RESULTS=${RESULTS:-${CARGO_TARGET_DIR:-$ROOT/target}/bench-results/zk-$(date +%Y%m%d-%H%M%S)}
NODES=3

TAG=bench-zk
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"
mkdir -p "$RESULTS"

# ---- install and build -----------------------------------------------------------------------
setup_zk # installs the Debian package zookeeper if missing
[ "$ETCD" = 1 ] && ensure_commands etcd=etcd-server etcdctl=etcd-client protoc=protobuf-compiler

# ---- the clusters ------------------------------------------------------------------------------
# The zookeeper (and etcd) targets of `strata bench`.
build_and_start_strata --features "zookeeper$([ "$ETCD" = 1 ] && echo " etcd")"
create_log_tables "$STRATA_CONFIGS"

{
    describe_machine
    echo "zookeeper: ${ZK_VERSION:-3.8} ($(java -version 2>&1 | head -1)), heap $ZK_HEAP per member, data on $([ "$ZK_DISK" = 1 ] && echo "disk ($WORK)" || echo tmpfs), forceSync: $SYNCS"
    echo "strata: log tables [$STRATA_CONFIGS], replication ${REPLICATION:-async}, data on disk ($WORK)"
    if [ "$ETCD" = 1 ]; then echo "etcd: $(etcd --version | head -1), 3 members, data on $([ "$ZK_DISK" = 1 ] && echo disk || echo tmpfs), after the ZooKeeper runs"; fi
    echo "settings: clients=$CLIENTS sessions=$SESSIONS (pipeline 1) keys=$KEYS key_size=$KEY_SIZE value_size=$VALUE_SIZE duration=${DURATION}s warmup=${WARMUP}s runs=$RUNS workloads=[$WORKLOADS] strata=$ENDPOINTS zookeeper=$ZK_ENDPOINTS"
} | tee "$RESULTS/machine.txt" >&2

common=(--clients "$CLIENTS" --sessions "$SESSIONS" --pipeline 1 --keys "$KEYS" --key-size "$KEY_SIZE"
    --value-size "$VALUE_SIZE" --warmup "$WARMUP" --duration "$DURATION" --quiet)

# One configuration: NAME TARGET ENDPOINTS FLAGS...
run_one() {
    local name=$1 target=$2 endpoints=$3
    shift 3
    n=$((n + 1))
    log "($n/$total) $name"
    wait_quiet
    bench_run "$name" --target "$target" --endpoints "$endpoints" "${common[@]}" "$@"
}

nw=$(wc -w <<<"$WORKLOADS")
total=$((RUNS * nw * ($(wc -w <<<"$SYNCS") + $(wc -w <<<"$STRATA_CONFIGS") + ETCD)))
n=0
first=1
for sync in $SYNCS; do
    start_zk "$sync"
    if [ "$ZK_JIT_WARMUP" != 0 ]; then
        log "warming up the ZooKeeper JVMs for ${ZK_JIT_WARMUP}s (not recorded)"
        "$BIN/strata" bench --target zookeeper --endpoints "$ZK_ENDPOINTS" --clients "$CLIENTS" --sessions "$SESSIONS" \
            --keys "$KEYS" --key-size "$KEY_SIZE" --value-size "$VALUE_SIZE" --ycsb a --warmup 0 --duration "$ZK_JIT_WARMUP" --quiet >"$RESULTS/zk-fs$sync-jit-warmup.txt" 2>&1 || die "the warm-up run failed (see $RESULTS/zk-fs$sync-jit-warmup.txt)"
    fi
    for run in $(seq 1 "$RUNS"); do
        for w in $WORKLOADS; do
            run_one "zk-fs$sync-$w-r$run" zookeeper "$ZK_ENDPOINTS" --ycsb "$w" --seed "$run"
            if [ "$first" = 1 ]; then
                for cfg in $STRATA_CONFIGS; do
                    run_one "strata-$cfg-$w-r$run" strata "$ENDPOINTS" --ycsb "$w" --seed "$run" --table "l-$cfg"
                done
            fi
        done
    done
    stop_zk
    first=0
done
if [ "$ETCD" = 1 ]; then
    # Its data where ZooKeeper's was: tmpfs, or the disk with ZK_DISK=1.
    if [ "$ZK_DISK" = 1 ]; then ETCD_DIR="$WORK/etcd"; else ETCD_DIR=$(mktemp -d /dev/shm/strata-bench-etcd.XXXXXX); fi
    CLEANUP_DIRS+=("$ETCD_DIR")
    start_etcd "$ETCD_DIR"
    log "etcd $(etcd --version | head -1 | awk '{print $3}') at $ETCD_ENDPOINTS"
    for run in $(seq 1 "$RUNS"); do
        for w in $WORKLOADS; do
            run_one "etcd-$w-r$run" etcd "$ETCD_ENDPOINTS" --ycsb "$w" --seed "$run"
        done
    done
fi

# ---- tables ------------------------------------------------------------------------------------
summarize zk "$RESULTS" "$RUNS" "$WORKLOADS" "$SYNCS" "$STRATA_CONFIGS"
log "results in $RESULTS"
