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
ZK_HEAP=${ZK_HEAP:-256m}
ZK_JIT_WARMUP=${ZK_JIT_WARMUP:-5}
# Strata's side: one log table per configuration (scripts/bench-lib.sh, log_table_flags).
STRATA_CONFIGS=${STRATA_CONFIGS:-"sync cad orca"}
# etcd 3 (Debian etcd-server) with the same load after the ZooKeeper runs; ETCD=0 skips it.
ETCD=${ETCD:-1}
RESULTS=${RESULTS:-${CARGO_TARGET_DIR:-$ROOT/target}/bench-results/zk-$(date +%Y%m%d-%H%M%S)}
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release
NODES=3

TAG=bench-zk
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"
mkdir -p "$RESULTS"

# ---- install and build -----------------------------------------------------------------------
command -v java >/dev/null || die "java is needed to run ZooKeeper (apt-get install default-jre-headless)"
if [ ! -f /usr/share/java/zookeeper.jar ]; then
    log "installing zookeeper"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper >/dev/null
fi
[ "$ETCD" = 1 ] && ensure_commands etcd=etcd-server etcdctl=etcd-client protoc=protobuf-compiler
command -v python3 >/dev/null || die "python3 is needed to summarize the JSON results"
BENCH=("$BIN/strata" bench)

# zookeeper.jar's manifest lists its dependencies' jars (Debian's /usr/share/java); slf4j-simple
# sends ZooKeeper's log (warnings and above) to stderr, i.e. to the member's log file.
ZK_CP=/usr/share/java/zookeeper.jar
[ -f /usr/share/java/slf4j-simple.jar ] && ZK_CP+=:/usr/share/java/slf4j-simple.jar
ZK_VERSION=$(dpkg-query -W -f='${Version}' zookeeper 2>/dev/null || echo unknown)

# ---- the clusters ------------------------------------------------------------------------------
# The zookeeper (and etcd) targets of `strata bench`.
build_and_start_strata --features "zookeeper$([ "$ETCD" = 1 ] && echo " etcd")"
create_log_tables "$STRATA_CONFIGS"

# Member i: client port ZK_PORT+i, quorum port ZK_PORT+100+i, election port ZK_PORT+103+i.
ZK_PORT=${ZK_PORT:-$(free_base_port 12181 10 12481 $((2 * NODES)) 100)} || die "no free ports for zookeeper"
ZK_ENDPOINTS=""
for i in $(seq 0 $((NODES - 1))); do ZK_ENDPOINTS+="${ZK_ENDPOINTS:+,}127.0.0.1:$((ZK_PORT + i))"; done
ZK_PIDS=()

# Whether member $1 (0-based) is serving, as leader or follower (the `srvr` four-letter word).
zk_mode() {
    { exec 3<>"/dev/tcp/127.0.0.1/$((ZK_PORT + $1))" && printf srvr >&3 && timeout 2 cat <&3; } 2>/dev/null |
        sed -n 's/^Mode: //p'
}

# Starts a fresh ensemble with forceSync=$1; waits until it has a leader and two followers.
start_zk() {
    local sync=$1 dir i m cfg
    if [ "$ZK_DISK" = 1 ]; then dir="$WORK/zk-$sync"; else dir=$(mktemp -d /dev/shm/strata-bench-zk.XXXXXX); fi
    CLEANUP_DIRS+=("$dir")
    ZK_DIR=$dir
    for i in $(seq 0 $((NODES - 1))); do
        mkdir -p "$dir/z$i"
        echo $((i + 1)) >"$dir/z$i/myid"
        cfg="$dir/z$i.cfg"
        {
            echo "tickTime=500"
            echo "initLimit=20"
            echo "syncLimit=10"
            echo "dataDir=$dir/z$i"
            echo "clientPortAddress=127.0.0.1"
            echo "clientPort=$((ZK_PORT + i))"
            echo "maxClientCnxns=0"
            echo "admin.enableServer=false"
            echo "4lw.commands.whitelist=srvr,ruok"
            echo "autopurge.purgeInterval=0"
            for m in $(seq 0 $((NODES - 1))); do
                echo "server.$((m + 1))=127.0.0.1:$((ZK_PORT + 100 + m)):$((ZK_PORT + 103 + m))"
            done
        } >"$cfg"
        java -Xms"$ZK_HEAP" -Xmx"$ZK_HEAP" -Dzookeeper.forceSync="$sync" -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
            -cp "$ZK_CP" org.apache.zookeeper.server.quorum.QuorumPeerMain "$cfg" >"$RESULTS/zk-$sync-z$i.log" 2>&1 &
        ZK_PIDS+=($!)
        PIDS+=($!)
    done
    for i in $(seq 0 $((NODES - 1))); do
        wait_port 127.0.0.1 $((ZK_PORT + i)) 30 || die "zookeeper member $i did not start (see $RESULTS/zk-$sync-z$i.log)"
    done
    local modes
    for _ in $(seq 150); do
        modes=$(for i in $(seq 0 $((NODES - 1))); do zk_mode "$i"; done | sort | tr '\n' ' ')
        [ "$modes" = "follower follower leader " ] && { log "zookeeper (forceSync=$sync) up: $modes"; return 0; }
        sleep 0.2
    done
    die "zookeeper has no quorum (modes: $modes; see $RESULTS/zk-$sync-z*.log)"
}

stop_zk() {
    local pid
    for pid in "${ZK_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${ZK_PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    done
    ZK_PIDS=()
    rm -rf "$ZK_DIR"
}

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
    "${BENCH[@]}" --target "$target" --endpoints "$endpoints" "${common[@]}" "$@" --label "$name" \
        --json "$RESULTS/$name.json" >"$RESULTS/$name.txt" 2>&1 || { cat "$RESULTS/$name.txt" >&2; die "$name failed"; }
}

nw=$(wc -w <<<"$WORKLOADS")
total=$((RUNS * nw * ($(wc -w <<<"$SYNCS") + $(wc -w <<<"$STRATA_CONFIGS") + ETCD)))
n=0
first=1
for sync in $SYNCS; do
    start_zk "$sync"
    if [ "$ZK_JIT_WARMUP" != 0 ]; then
        log "warming up the ZooKeeper JVMs for ${ZK_JIT_WARMUP}s (not recorded)"
        "${BENCH[@]}" --target zookeeper --endpoints "$ZK_ENDPOINTS" --clients "$CLIENTS" --sessions "$SESSIONS" \
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
python3 - "$RESULTS" "$RUNS" "$WORKLOADS" "$SYNCS" "$STRATA_CONFIGS" <<'PY' | tee "$RESULTS/summary.md"
import json, statistics, sys
from pathlib import Path
results, runs, workloads, syncs, configs = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split(), sys.argv[5].split()
def reps(name):
    return [json.loads(f.read_text()) for r in range(1, runs + 1) if (f := results / f"{name}-r{r}.json").exists()]
def med(xs): return statistics.median(xs) if xs else float("nan")
def tput(name): return med([x["throughput_ops_s"] for x in reps(name)])
def lat(name, cls=None):
    xs = reps(name)
    pick = (lambda x: x["latency_us"]["all"]) if cls is None else (lambda x: x["ycsb"][cls])
    xs = [x for x in xs if pick(x)["count"] > 0]
    if not xs: return "-"
    return f'{med([pick(x)["p50_us"] for x in xs]):.0f} / {med([pick(x)["p99_us"] for x in xs]):.0f}'
def errors(name): return sum(x["errors"] for x in reps(name))
def ratio(a, b): return f"{a / b:.2f}" if b > 0 else "-"
mix = {"W": "100% update", "A": "50% read, 50% update", "B": "95% read, 5% update", "C": "100% read",
       "D": "95% read, 5% insert (latest)", "F": "50% read, 50% RMW"}
zk = lambda s, w: f"zk-fs{s}-{w}"
st = lambda c, w: f"strata-{c}-{w}"
# Every system of the run: (column name, its result files' name for a workload).
systems = [(f"ZK fs={s}", lambda w, s=s: zk(s, w)) for s in syncs] + [(f"Strata {c}", lambda w, c=c: st(c, w)) for c in configs]
others = [(f"ZK fs={s}", lambda w, s=s: zk(s, w)) for s in syncs]
if reps(f"etcd-{workloads[0]}"):
    systems.append(("etcd", lambda w: f"etcd-{w}"))
    others.append(("etcd", lambda w: f"etcd-{w}"))
print(f"ops/s, median of {runs} runs. ZooKeeper forceSync={'/'.join(syncs)}; Strata log tables {', '.join(configs)}.\n")
print("| workload | " + " | ".join(n for n, _ in systems) + " | errors (" + ", ".join(n for n, _ in systems) + ") |")
print("|---" + "|---:" * (len(systems) + 1) + "|")
for w in workloads:
    row = [f"{w}: {mix.get(w, w)}"] + [f"{tput(f(w)):,.0f}" for _, f in systems]
    row += [", ".join(str(errors(f(w))) for _, f in systems)]
    print("| " + " | ".join(row) + " |")
print("\nThroughput ratios, Strata table / " + " and ".join(n for n, _ in others) + ":\n")
pairs = [(c, o) for c in configs for o in others]
print("| workload | " + " | ".join(f"{c}/{n}" for c, (n, _) in pairs) + " |")
print("|---" + "|---:" * len(pairs) + "|")
for w in workloads:
    print(f"| {w} | " + " | ".join(ratio(tput(st(c, w)), tput(f(w))) for c, (_, f) in pairs) + " |")
print("\np50 / p99 latency per operation class, µs (median over the runs):\n")
print("| workload | class | " + " | ".join(n for n, _ in systems) + " |")
print("|---|---" + "|---:" * len(systems) + "|")
for w in workloads:
    for cls in ["read", "update", "insert", "rmw"]:
        cells = [lat(f(w), cls) for _, f in systems]
        if all(c == "-" for c in cells): continue
        print(f"| {w} | {cls} | " + " | ".join(cells) + " |")
PY
log "results in $RESULTS"
