# Shared by the benchmark scripts (sourced, not run): logging, cleanup of every process a
# script started, port helpers, CPU accounting and the idle-machine gate.
#
# The sourcing script sets, before sourcing: TAG (its log prefix), and optionally
# QUIET_CORES, QUIET_WAIT, QUIET_BUDGET (see wait_quiet). After sourcing it may append pids to
# PIDS (stopped with SIGCONT + SIGTERM, then SIGKILL after 5 s, on any exit) and to
# CLEANUP_DIRS (removed on exit, after the processes), and use $WORK, a scratch directory
# removed on exit.

log() { printf '[%s] %s\n' "$TAG" "$*" >&2; }
die() { log "error: $*"; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/strata-$TAG.XXXXXX")
PIDS=()
CLEANUP_DIRS=("$WORK")
cleanup() {
    local rc=$?
    for pid in "${PIDS[@]}"; do kill -CONT "$pid" 2>/dev/null || true; kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    done
    # A failed run (or any, with KEEP_LOGS=1) keeps the nodes' logs next to its results.
    if { [ "$rc" -ne 0 ] || [ -n "${KEEP_LOGS:-}" ]; } && [ -n "${RESULTS:-}" ] && [ -d "$WORK/strata" ]; then
        mkdir -p "$RESULTS/node-logs"
        for f in "$WORK"/strata/n*/node.log; do [ -f "$f" ] && cp "$f" "$RESULTS/node-logs/$(basename "$(dirname "$f")").log"; done
        log "node logs kept in $RESULTS/node-logs"
    fi
    rm -rf "${CLEANUP_DIRS[@]}"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_port() { # host port seconds
    local deadline=$((SECONDS + $3))
    until (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.1
    done
}
# The first base port from FROM (step STEP, up to TO) whose COUNT ports, and the COUNT ports
# OFFSET above them, are all free. Usage: free_base_port FROM STEP TO COUNT OFFSET
free_base_port() {
    local p i ok
    for p in $(seq "$1" "$2" "$3"); do
        ok=1
        for i in $(seq 0 $(($4 - 1))); do port_free $((p + i)) && port_free $((p + $5 + i)) || ok=0; done
        [ "$ok" = 1 ] && { echo "$p"; return 0; }
    done
    return 1
}

# CPU time (user + system, seconds) consumed so far by the given processes.
CLK_TCK=$(getconf CLK_TCK)
cpu_seconds() {
    local ticks=0 p
    for p in "$@"; do
        # Fields 14 and 15 of /proc/PID/stat (after the parenthesised command name).
        ticks=$((ticks + $(sed 's/^.*) //' "/proc/$p/stat" | awk '{print $12 + $13}')))
    done
    echo "$ticks $CLK_TCK" | awk '{printf "%.2f", $1 / $2}'
}

# CPU time (seconds) the whole machine spent busy so far, every process included: what is not
# ours during a run is other load on the machine (the benchmark is only as good as its quiet).
machine_busy_seconds() {
    awk -v tck="$CLK_TCK" '/^cpu / {printf "%.2f", ($2 + $3 + $4 + $7 + $8 + $9) / tck}' /proc/stat
}

# Other work on the machine (builds, tests) distorts every number: before each run, wait until
# the machine is idle (below QUIET_CORES busy over one second, our idle servers included), for
# at most QUIET_WAIT seconds per run and QUIET_BUDGET seconds in all; then run anyway.
QUIET_CORES=${QUIET_CORES:-0.1}
QUIET_WAIT=${QUIET_WAIT:-5}
QUIET_BUDGET=${QUIET_BUDGET:-60}
QUIET_BUDGET_LEFT=$QUIET_BUDGET
wait_quiet() {
    local waited=0 a b
    while :; do
        a=$(machine_busy_seconds)
        sleep 1
        b=$(machine_busy_seconds)
        awk -v a="$a" -v b="$b" -v q="$QUIET_CORES" 'BEGIN { exit !(b - a < q) }' && return 0
        waited=$((waited + 1))
        QUIET_BUDGET_LEFT=$((QUIET_BUDGET_LEFT - 1))
        if [ "$waited" -ge "$QUIET_WAIT" ] || [ "$QUIET_BUDGET_LEFT" -le 0 ]; then
            log "the machine is busy ($(cut -d' ' -f1 /proc/loadavg) load); running anyway"
            return 0
        fi
        [ $((waited % 10)) = 1 ] && log "waiting for the machine to be idle"
    done
}

# What the results were measured on, for the results directory.
describe_machine() {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty)')"
    echo "nproc: $(nproc)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "loadavg at start: $(cat /proc/loadavg)"
}

# Builds the release `strata` and `strata-node` (extra cargo flags may follow, e.g. --features
# zookeeper), picks BASE_PORT unless it is set, and starts the cluster (start_strata).
build_and_start_strata() {
    log "building release binaries"
    cargo build --release -q -p strata-node
    cargo build --release -q -p strata "$@"
    BASE_PORT=${BASE_PORT:-$(free_base_port 7600 200 9800 "$NODES" 100)} || die "no free base port found"
    start_strata
}

# Starts `strata up` with NODES nodes on BASE_PORT in $WORK/strata and waits until every node
# listens; sets ENDPOINTS (comma-separated client addresses) and STRATA_DATA.
start_strata() {
    STRATA_DATA="$WORK/strata"
    log "starting: strata up --nodes $NODES --base-port $BASE_PORT"
    "$BIN/strata" up --nodes "$NODES" --data-dir "$STRATA_DATA" --base-port "$BASE_PORT" >"$RESULTS/strata-up.log" 2>&1 &
    PIDS+=($!)
    ENDPOINTS=""
    local i
    for i in $(seq 0 $((NODES - 1))); do
        ENDPOINTS+="${ENDPOINTS:+,}127.0.0.1:$((BASE_PORT + i))"
        wait_port 127.0.0.1 $((BASE_PORT + i)) 20 || die "strata node $i did not start (see $RESULTS/strata-up.log)"
    done
    for _ in $(seq 50); do [ -f "$STRATA_DATA/cluster.json" ] && return 0; sleep 0.1; done
    die "strata up wrote no cluster.json (see $RESULTS/strata-up.log)"
}

# `strata table create` flags of a log-table configuration (ORCA §1.3, §8.2), by name:
#   sync    writes acknowledged once fsynced on a majority (group commit), reads at the leader
#   async   acknowledged once applied at the leader, persisted in the background; leader reads
#   cad     async's write path; a read first makes the data it returns durable; leader reads
#   orca    cad + active-set reads (leased followers serve durable data)
#   weak    weak-ZK: async durability, reads at any node without a check
#   strong  strong-ZK: sync durability, reads at the leader (the same definition as sync)
# REPLICATION (default async) is the async, cad, orca and weak tables' replication.
log_table_flags() {
    local repl=${REPLICATION:-async}
    case $1 in
        sync | strong) echo "--durability sync --reads leader" ;;
        async) echo "--durability async --replication $repl --reads leader" ;;
        cad) echo "--durability cad --replication $repl --reads leader" ;;
        orca) echo "--durability cad --replication $repl --reads active-set" ;;
        weak) echo "--durability async --replication $repl --reads any" ;;
        *) die "unknown log-table configuration $1 (sync, async, cad, orca, weak, strong)" ;;
    esac
}

# Creates the log table l-CFG for every configuration CFG in $1 on the cluster of
# start_strata, with the extra `strata table create` flags that follow (e.g. --timers geo), and
# waits until each has a leader. Usage: create_log_tables "CFG ..." [FLAGS...]
create_log_tables() {
    local cfgs=$1 cfg tables=""
    shift
    for cfg in $cfgs; do
        # shellcheck disable=SC2046 # the flags are words
        "$BIN/strata" table create "l-$cfg" --engine log $(log_table_flags "$cfg") "$@" --data-dir "$STRATA_DATA" \
            >>"$RESULTS/tables.log" 2>&1 || { cat "$RESULTS/tables.log" >&2; die "cannot create table l-$cfg"; }
        tables+="${tables:+ }l-$cfg"
    done
    for _ in $(seq 150); do
        "$BIN/strata" status --json --data-dir "$STRATA_DATA" 2>/dev/null | python3 -c '
import json, sys
led = {s["table"] for n in json.load(sys.stdin) for s in n.get("shards", []) if s.get("role") == "leader"}
sys.exit(0 if set(sys.argv[1].split()) <= led else 1)' "$tables" && return 0
        sleep 0.2
    done
    die "not every table of [$tables] has a leader (see $RESULTS/strata-up.log)"
}

# One `strata bench` run on a log table, one request at a time per session, with the sourcing
# script's SESSIONS, KEYS, KEY_SIZE, VALUE_SIZE, DURATION and WARMUP and the flags that follow
# (endpoints, workload, clients); the report goes to $RESULTS/NAME.json and NAME.txt.
# Usage: bench_table NAME TABLE SEED FLAGS...
bench_table() {
    local name=$1 table=$2 seed=$3
    shift 3
    "$BIN/strata" bench --table "$table" "$@" --sessions "$SESSIONS" --pipeline 1 --keys "$KEYS" \
        --key-size "$KEY_SIZE" --value-size "$VALUE_SIZE" --duration "$DURATION" --warmup "$WARMUP" --seed "$seed" \
        --quiet --label "$name" --json "$RESULTS/$name.json" >"$RESULTS/$name.txt" 2>&1 ||
        { cat "$RESULTS/$name.txt" >&2; die "$name failed"; }
}

# Starts a 3-member etcd cluster (NODES members) on loopback from ETCD_PORT (first free from
# 12379: client ports ETCD_PORT+i, peer ports ETCD_PORT+100+i), data under $1 (created), logs in
# $RESULTS/etcd-e<i>.log, and waits until it is healthy; sets ETCD_ENDPOINTS. The members are
# stopped on exit with the script's other processes. Usage: start_etcd DATA_DIR
start_etcd() {
    local dir=$1 initial="" i c p
    ETCD_PORT=${ETCD_PORT:-$(free_base_port 12379 10 12579 "$NODES" 100)} || die "no free port for etcd"
    for i in $(seq 0 $((NODES - 1))); do initial+="${initial:+,}e$i=http://127.0.0.1:$((ETCD_PORT + 100 + i))"; done
    ETCD_ENDPOINTS=""
    for i in $(seq 0 $((NODES - 1))); do
        c=$((ETCD_PORT + i)) p=$((ETCD_PORT + 100 + i))
        etcd --name "e$i" --data-dir "$dir/e$i" \
            --listen-client-urls "http://127.0.0.1:$c" --advertise-client-urls "http://127.0.0.1:$c" \
            --listen-peer-urls "http://127.0.0.1:$p" --initial-advertise-peer-urls "http://127.0.0.1:$p" \
            --initial-cluster "$initial" --initial-cluster-state new --initial-cluster-token strata-bench \
            --log-level warn >"$RESULTS/etcd-e$i.log" 2>&1 &
        PIDS+=($!)
        ETCD_ENDPOINTS+="${ETCD_ENDPOINTS:+,}127.0.0.1:$c"
    done
    for i in $(seq 0 $((NODES - 1))); do
        wait_port 127.0.0.1 $((ETCD_PORT + i)) 20 || die "etcd member $i did not start (see $RESULTS/etcd-e$i.log)"
    done
    for _ in $(seq 100); do
        ETCDCTL_API=3 etcdctl --endpoints "$ETCD_ENDPOINTS" endpoint health >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    die "etcd is not healthy (see $RESULTS/etcd-e*.log)"
}

# Installs with apt-get the Debian package of every command that is missing. Arguments are
# COMMAND=PACKAGE pairs. Usage: ensure_commands etcd=etcd-server protoc=protobuf-compiler
ensure_commands() {
    local need=() pair
    for pair in "$@"; do command -v "${pair%%=*}" >/dev/null || need+=("${pair#*=}"); done
    [ "${#need[@]}" -eq 0 ] && return 0
    log "installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
}
