# Shared by the benchmark scripts (sourced, not run): the one place that builds, starts and
# stops Strata clusters and the peers (redis-server, etcd, ZooKeeper), waits for them, runs
# `strata bench`, summarizes and plots. Also: logging, cleanup of every process a script
# started, port helpers, CPU accounting and the idle-machine gate.
#
# Summaries and charts: the Python package scripts/benchlib (stdlib only; `benchpy`), whose
# benchlib/summary.py is the one place medians and ratios are computed. Charts are JSON specs
# drawn by `strata-plot` (crates/bench/src/plot.rs, the same code as `strata bench --timeline`).
#
# The sourcing script sets, before sourcing: TAG (its log prefix), and optionally
# QUIET_CORES, QUIET_WAIT, QUIET_BUDGET (see wait_quiet). After sourcing it may append pids to
# PIDS (stopped with SIGCONT + SIGTERM, then SIGKILL after 5 s, on any exit) and to
# CLEANUP_DIRS (removed on exit, after the processes), and use $WORK, a scratch directory
# removed on exit.

log() { printf '[%s] %s\n' "$TAG" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Runs CMD... every 0.1 s until it succeeds, for at most SECONDS; fails if it never did.
# Usage: wait_for SECONDS CMD...
wait_for() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@"; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.1
    done
}

# Stops the given processes: SIGCONT (a paused one must see the signal) and SIGTERM, then
# SIGKILL after 5 s. Usage: stop_pids PID...
stop_pids() {
    local pid
    for pid in "$@"; do kill -CONT "$pid" 2>/dev/null || true; kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "$@"; do
        wait_for 5 eval "! kill -0 $pid 2>/dev/null" || true
        kill -KILL "$pid" 2>/dev/null || true
    done
}

# Forgets PID in PIDS (it was stopped by hand). Usage: forget_pid PID
forget_pid() {
    local keep=() p
    for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
    PIDS=("${keep[@]}")
}

ROOT=${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
BIN=${BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release}

# The benchlib Python package: `benchpy table NAME ARGS...`, `benchpy chart NAME ARGS...`,
# `benchpy cluster QUESTION ARGS...` (scripts/benchlib/__main__.py).
benchpy() { PYTHONPATH="$ROOT/scripts${PYTHONPATH:+:$PYTHONPATH}" python3 -m benchlib "$@"; }
command -v python3 >/dev/null || die "python3 is needed to summarize the JSON results"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/strata-$TAG.XXXXXX")
PIDS=()
CLEANUP_DIRS=("$WORK")
cleanup() {
    local rc=$?
    stop_pids "${PIDS[@]}"
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

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }
port_free() { ! port_open 127.0.0.1 "$1"; }
wait_port() { wait_for "$3" port_open "$1" "$2"; } # host port seconds
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

# Builds the release `strata` and `strata-node` and `strata-plot`; extra cargo flags for
# `strata` may follow (e.g. --features zookeeper). CARGO_BUILD_JOBS limits the build's jobs.
build_strata() {
    log "building release binaries"
    cargo build --release -q -p strata-node
    cargo build --release -q -p strata-bench --bin strata-plot
    cargo build --release -q -p strata "$@"
    "$BIN/strata" bench --help >/dev/null 2>&1 || die "'$BIN/strata bench' does not work"
}

# build_strata, then picks BASE_PORT unless it is set and starts the cluster (start_strata).
build_and_start_strata() {
    build_strata "$@"
    start_strata
}

# Starts `strata up` with NODES nodes on BASE_PORT (the first free from 7600 unless set) in
# $WORK/strata and waits until every node listens; sets ENDPOINTS (comma-separated client
# addresses), STRATA_DATA, STRATA_UP_PID (the supervisor) and STRATA_PIDS (the nodes).
# `start_strata NAME` uses $WORK/NAME and $RESULTS/NAME-up.log instead (a second cluster).
# STRATA_UP_FLAGS (words) go to `strata up` (e.g. --insecure-plaintext). The first cluster
# (NAME strata) becomes every later `strata` command's default data directory
# (STRATA_DATA_DIR), so `strata bench --endpoints ...` finds its TLS credentials there; runs
# against another cluster pass --data-dir.
start_strata() {
    local name=${1:-strata}
    BASE_PORT=${BASE_PORT:-$(free_base_port 7600 200 9800 "$NODES" 100)} || die "no free base port found"
    STRATA_DATA="$WORK/$name"
    [ "$name" = strata ] && export STRATA_DATA_DIR="$STRATA_DATA"
    log "starting: $BIN/strata up --nodes $NODES --base-port $BASE_PORT ${STRATA_UP_FLAGS:-}"
    # shellcheck disable=SC2086 # the flags are words
    "$BIN/strata" up --nodes "$NODES" --data-dir "$STRATA_DATA" --base-port "$BASE_PORT" ${STRATA_UP_FLAGS:-} >"$RESULTS/$name-up.log" 2>&1 &
    STRATA_UP_PID=$!
    PIDS+=("$STRATA_UP_PID")
    ENDPOINTS=""
    local i
    for i in $(seq 0 $((NODES - 1))); do
        ENDPOINTS+="${ENDPOINTS:+,}127.0.0.1:$((BASE_PORT + i))"
        wait_port 127.0.0.1 $((BASE_PORT + i)) 20 || die "strata node $i did not start (see $RESULTS/$name-up.log)"
    done
    wait_for 5 test -f "$STRATA_DATA/cluster.json" || die "strata up wrote no cluster.json (see $RESULTS/$name-up.log)"
    # The node processes are the supervisor's children: their CPU time is the servers'.
    mapfile -t STRATA_PIDS < <(pgrep -P "$STRATA_UP_PID")
    [ "${#STRATA_PIDS[@]}" = "$NODES" ] || die "expected $NODES node processes under strata up, found ${#STRATA_PIDS[@]}"
}

# ---- before/after: a baseline build beside this one ---------------------------------------------
# With BASELINE=REV (a git revision) or BASELINE_BIN=DIR (a directory holding an older build's
# `strata` and `strata-node`), a script also starts a second cluster from that build and runs
# every configuration against both, interleaved, with this build's `strata bench` as the one
# load generator; `summarize ab` prints after/before ratios. BASELINE=REV builds REV once into
# target/baseline/ (a git worktree and its own target directory, reused by later runs).

# Sets BASELINE_BIN from BASELINE (building it if needed); does nothing without either.
build_baseline() {
    [ -n "${BASELINE_BIN:-}" ] && { [ -x "$BASELINE_BIN/strata" ] || die "no strata binary in BASELINE_BIN=$BASELINE_BIN"; return 0; }
    [ -n "${BASELINE:-}" ] || return 0
    local rev dir
    rev=$(git -C "$ROOT" rev-parse --short "$BASELINE^{commit}") || die "BASELINE=$BASELINE is not a revision"
    dir="$ROOT/target/baseline/src-$rev"
    if [ ! -d "$dir" ]; then
        log "checking out the baseline $rev into $dir"
        git -C "$ROOT" worktree add --detach -f "$dir" "$rev" >/dev/null 2>&1 || die "cannot check out $rev"
    fi
    log "building the baseline $rev (release; once)"
    (cd "$dir" && CARGO_TARGET_DIR="$ROOT/target/baseline/target-$rev" cargo build --release -q -p strata -p strata-node) ||
        die "cannot build the baseline $rev"
    BASELINE_BIN="$ROOT/target/baseline/target-$rev/release"
}

# Starts the baseline's cluster (start_strata with BASELINE_BIN, on the next free base port);
# sets BASELINE_ENDPOINTS, BASELINE_DATA and BASELINE_PIDS, and leaves this build's cluster
# variables as they were.
start_baseline() {
    local saved=("$BIN" "${BASE_PORT:-}" "${ENDPOINTS:-}" "${STRATA_DATA:-}" "${STRATA_UP_PID:-}")
    local saved_pids=("${STRATA_PIDS[@]}")
    BIN=$BASELINE_BIN
    BASE_PORT=$(free_base_port $((${BASE_PORT:-7400} + 2 * NODES + 200)) 200 9800 "$NODES" 100) || die "no free base port for the baseline"
    # The baseline gets BASELINE_UP_FLAGS, not this build's flags: a build from before TLS
    # neither knows --insecure-plaintext nor needs it (compare it with TLS=off).
    STRATA_UP_FLAGS=${BASELINE_UP_FLAGS:-} start_strata baseline
    BASELINE_ENDPOINTS=$ENDPOINTS BASELINE_DATA=$STRATA_DATA BASELINE_PIDS=("${STRATA_PIDS[@]}")
    BIN=${saved[0]} BASE_PORT=${saved[1]} ENDPOINTS=${saved[2]} STRATA_DATA=${saved[3]} STRATA_UP_PID=${saved[4]}
    STRATA_PIDS=("${saved_pids[@]}")
}

# Runs CMD... with the cluster variables (BIN, ENDPOINTS, STRATA_DATA, STRATA_PIDS) pointing at
# the baseline's cluster, e.g. `with_baseline create_log_tables "$CONFIGS"`.
with_baseline() {
    local saved=("$BIN" "$ENDPOINTS" "$STRATA_DATA")
    local saved_pids=("${STRATA_PIDS[@]}")
    BIN=$BASELINE_BIN ENDPOINTS=$BASELINE_ENDPOINTS STRATA_DATA=$BASELINE_DATA STRATA_PIDS=("${BASELINE_PIDS[@]}")
    "$@"
    local rc=$?
    BIN=${saved[0]} ENDPOINTS=${saved[1]} STRATA_DATA=${saved[2]} STRATA_PIDS=("${saved_pids[@]}")
    return $rc
}

# ---- TLS on and off: this build with TLS beside the same build without -----------------------
# With TLS=both a script (bench-es.sh, bench-log.sh) also starts this build's cluster with
# `--insecure-plaintext` (the "plain" cluster) and runs every configuration against both,
# interleaved, with one load generator; `summarize ab RESULTS plain TLS plain` prints TLS/plain
# ratios. The plain runs are named `plain-X`.

# Starts the plain cluster (start_strata plain, on the next free base port); sets
# PLAIN_ENDPOINTS, PLAIN_DATA and PLAIN_PIDS, and leaves the TLS cluster's variables as they were.
start_plain() {
    local saved=("${BASE_PORT:-}" "${ENDPOINTS:-}" "${STRATA_DATA:-}" "${STRATA_UP_PID:-}")
    local saved_pids=("${STRATA_PIDS[@]}")
    BASE_PORT=$(free_base_port $((${BASE_PORT:-7400} + 2 * NODES + 200)) 200 9800 "$NODES" 100) || die "no free base port for the plain cluster"
    STRATA_UP_FLAGS=--insecure-plaintext start_strata plain
    PLAIN_ENDPOINTS=$ENDPOINTS PLAIN_DATA=$STRATA_DATA PLAIN_PIDS=("${STRATA_PIDS[@]}")
    BASE_PORT=${saved[0]} ENDPOINTS=${saved[1]} STRATA_DATA=${saved[2]} STRATA_UP_PID=${saved[3]}
    STRATA_PIDS=("${saved_pids[@]}")
}

# Runs CMD... with the cluster variables pointing at the plain cluster (like with_baseline).
with_plain() {
    local saved=("$ENDPOINTS" "$STRATA_DATA")
    local saved_pids=("${STRATA_PIDS[@]}")
    ENDPOINTS=$PLAIN_ENDPOINTS STRATA_DATA=$PLAIN_DATA STRATA_PIDS=("${PLAIN_PIDS[@]}")
    "$@"
    local rc=$?
    ENDPOINTS=${saved[0]} STRATA_DATA=${saved[1]} STRATA_PIDS=("${saved_pids[@]}")
    return $rc
}

# Stops the cluster start_strata started and forgets its data.
stop_strata() {
    stop_pids "$STRATA_UP_PID"
    forget_pid "$STRATA_UP_PID"
    rm -rf "$STRATA_DATA"
}

# `strata CMD ARGS...` against the cluster of start_strata.
strata_cli() { "$BIN/strata" "$@" --data-dir "$STRATA_DATA"; }

# The pid of a node of the running cluster, by index or client address. Usage: node_pid NODE
node_pid() { benchpy cluster pid "$STRATA_DATA/cluster.json" "$1"; }

# Resident memory (KiB) of every node of the running cluster, space-separated.
node_rss_kib() { benchpy cluster rss "$STRATA_DATA/cluster.json"; }

# The node (index) leading SHARD (default: any shard) of TABLE, waiting up to 20 s through an election.
# Usage: table_leader TABLE [SHARD]
table_leader() { wait_for 20 status_says leader "$@"; }

# The client address of the node leading (a shard of) TABLE, waiting like table_leader.
table_leader_addr() { wait_for 20 status_says leader-addr "$1"; }

# One question to `strata status --json` (scripts/benchlib/cluster.py).
status_says() { strata_cli status --json 2>/dev/null | benchpy cluster "$@"; }

# Whether every table named has a leader. Usage: tables_led TABLE...
tables_led() { status_says led "$@"; }

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
    # shellcheck disable=SC2086 # the table names are words
    wait_for 30 tables_led $tables || die "not every table of [$tables] has a leader (see $RESULTS/strata-up.log)"
}

# One `strata bench` run: the flags that follow, labelled NAME, the report in $RESULTS/NAME.json
# and its text in $RESULTS/NAME.txt; stops the script if it fails. Usage: bench_run NAME FLAGS...
bench_run() {
    local name=$1
    shift
    "$BIN/strata" bench "$@" --label "$name" --json "$RESULTS/$name.json" >"$RESULTS/$name.txt" 2>&1 ||
        { cat "$RESULTS/$name.txt" >&2; die "$name failed"; }
}

# One `strata bench` run on a log table, one request at a time per session, with the sourcing
# script's SESSIONS, KEYS, KEY_SIZE, VALUE_SIZE, DURATION and WARMUP and the flags that follow
# (endpoints, workload, clients). Usage: bench_table NAME TABLE SEED FLAGS...
bench_table() {
    local name=$1 table=$2 seed=$3
    shift 3
    bench_run "$name" --table "$table" "$@" --sessions "$SESSIONS" --pipeline 1 --keys "$KEYS" \
        --key-size "$KEY_SIZE" --value-size "$VALUE_SIZE" --duration "$DURATION" --warmup "$WARMUP" --seed "$seed" --quiet
}

# The markdown summary of a script's results: printed and written to $RESULTS/summary.md.
# Usage: summarize NAME ARGS... (scripts/benchlib/tables.py)
summarize() { benchpy table "$@" | tee "$RESULTS/summary.md"; }

# A paired run's table, then exit: TLS=both (TLS/plain) or a baseline (after/before). Returns
# for an unpaired run, whose script prints its own table.
summarize_pair_and_exit() {
    if [ "${TLS:-on}" = both ]; then
        summarize ab "$RESULTS" plain TLS plain
    elif [ -n "${BASELINE_BIN:-}" ]; then
        summarize ab "$RESULTS"
    else
        return 0
    fi
    log "results in $RESULTS"
    exit 0
}

# Draws chart NAME of the results (scripts/benchlib/charts.py) to OUT.png with strata-plot; the
# spec is kept next to it as OUT.json. Usage: plot_chart NAME OUT.png ARGS...
plot_chart() {
    local name=$1 out=$2
    shift 2
    benchpy chart "$name" "$@" >"${out%.png}.json" && "$BIN/strata-plot" "${out%.png}.json" "$out" ||
        log "warning: chart $name not drawn (spec: ${out%.png}.json)"
}

# Pauses process PID (SIGSTOP) AT seconds from now for MS milliseconds (SIGCONT), in the
# background; the pause's start and end (seconds since the call) go to FILE.
# Usage: pause_process_later PID AT MS FILE
pause_process_later() {
    local pid=$1 at=$2 ms=$3 file=$4
    (
        t=$(date +%s.%N)
        sleep "$at"
        t0=$(date +%s.%N)
        kill -STOP "$pid"
        sleep "$(awk -v ms="$ms" 'BEGIN { print ms / 1000 }')"
        kill -CONT "$pid"
        t1=$(date +%s.%N)
        awk -v t="$t" -v a="$t0" -v b="$t1" 'BEGIN { printf "stopped at +%.3fs after launch, continued at +%.3fs (%.0f ms)\n", a - t, b - t, (b - a) * 1000 }'
    ) >"$file" &
    PAUSER_PID=$!
    PIDS+=("$PAUSER_PID")
}

# ---- TLS for the peers (Redis, etcd): the same footing as Strata's default -----------------------
# Strata's links are TLS 1.3 unless started with --insecure-plaintext. With PEER_TLS_DIR set
# (make_peer_certs), start_etcd and start_redis serve TLS only and require a client
# certificate, as Strata's nodes do, and PEER_TLS_FLAGS holds `strata bench`'s flags for them.

# A throwaway CA (ECDSA P-256) and a server and a client certificate from it, both naming
# localhost and 127.0.0.1 (crates/bench/src/peer_tls.rs), with openssl; sets PEER_TLS_DIR and
# PEER_TLS_FLAGS. Usage: make_peer_certs DIR
make_peer_certs() {
    local dir=$1 name
    command -v openssl >/dev/null || apt_install openssl
    mkdir -p "$dir"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -subj "/CN=strata bench peer CA" -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null ||
        die "openssl could not make the peers' CA"
    for name in server client; do
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$name" \
            -keyout "$dir/$name.key" -out "$dir/$name.csr" 2>/dev/null &&
            openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
                -CAcreateserial -days 2 -out "$dir/$name.pem" \
                -extfile <(printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n') \
                2>/dev/null || die "openssl could not issue the peers' $name certificate"
    done
    chmod 600 "$dir"/*.key
    PEER_TLS_DIR=$dir
    PEER_TLS_FLAGS=(--tls-ca "$dir/ca.pem" --tls-cert "$dir/client.pem" --tls-key "$dir/client.key")
}

# Starts a 3-member etcd cluster (NODES members) on loopback from ETCD_PORT (first free from
# 12379: client ports ETCD_PORT+i, peer ports ETCD_PORT+100+i), data under $1 (created), logs in
# $RESULTS/etcd-e<i>.log, and waits until it is healthy; sets ETCD_ENDPOINTS. The members are
# stopped on exit with the script's other processes. With PEER_TLS_DIR, clients and members
# speak TLS and present certificates (`--client-cert-auth`, `--peer-client-cert-auth`).
# Usage: start_etcd DATA_DIR
start_etcd() {
    local dir=$1 initial="" i c p scheme=http tls=()
    if [ -n "${PEER_TLS_DIR:-}" ]; then
        scheme=https
        tls=(--cert-file "$PEER_TLS_DIR/server.pem" --key-file "$PEER_TLS_DIR/server.key"
            --trusted-ca-file "$PEER_TLS_DIR/ca.pem" --client-cert-auth
            --peer-cert-file "$PEER_TLS_DIR/server.pem" --peer-key-file "$PEER_TLS_DIR/server.key"
            --peer-trusted-ca-file "$PEER_TLS_DIR/ca.pem" --peer-client-cert-auth)
    fi
    ETCD_PORT=${ETCD_PORT:-$(free_base_port 12379 10 12579 "$NODES" 100)} || die "no free port for etcd"
    for i in $(seq 0 $((NODES - 1))); do initial+="${initial:+,}e$i=$scheme://127.0.0.1:$((ETCD_PORT + 100 + i))"; done
    ETCD_ENDPOINTS=""
    ETCD_PIDS=()
    for i in $(seq 0 $((NODES - 1))); do
        c=$((ETCD_PORT + i)) p=$((ETCD_PORT + 100 + i))
        etcd --name "e$i" --data-dir "$dir/e$i" \
            --listen-client-urls "$scheme://127.0.0.1:$c" --advertise-client-urls "$scheme://127.0.0.1:$c" \
            --listen-peer-urls "$scheme://127.0.0.1:$p" --initial-advertise-peer-urls "$scheme://127.0.0.1:$p" \
            --initial-cluster "$initial" --initial-cluster-state new --initial-cluster-token strata-bench \
            "${tls[@]}" --log-level warn >"$RESULTS/etcd-e$i.log" 2>&1 &
        PIDS+=($!)
        ETCD_PIDS+=($!)
        ETCD_ENDPOINTS+="${ETCD_ENDPOINTS:+,}127.0.0.1:$c"
    done
    for i in $(seq 0 $((NODES - 1))); do
        wait_port 127.0.0.1 $((ETCD_PORT + i)) 20 || die "etcd member $i did not start (see $RESULTS/etcd-e$i.log)"
    done
    wait_for 20 etcd_healthy || die "etcd is not healthy (see $RESULTS/etcd-e*.log)"
}
# Stops the members start_etcd started (their data stays, under the caller's directory).
stop_etcd() {
    local p
    stop_pids "${ETCD_PIDS[@]}"
    for p in "${ETCD_PIDS[@]}"; do forget_pid "$p"; done
    ETCD_PIDS=()
}
etcd_healthy() {
    local tls=()
    [ -n "${PEER_TLS_DIR:-}" ] &&
        tls=(--cacert "$PEER_TLS_DIR/ca.pem" --cert "$PEER_TLS_DIR/client.pem" --key "$PEER_TLS_DIR/client.key")
    ETCDCTL_API=3 etcdctl --endpoints "$ETCD_ENDPOINTS" "${tls[@]}" endpoint health >/dev/null 2>&1
}

# Starts redis-server on 127.0.0.1:REDIS_PORT without persistence and waits until it listens;
# sets REDIS_PID. Stopped on exit with the script's other processes, or by stop_redis.
# Arguments are more redis-server options, which override these (e.g. `--appendonly yes`).
# With PEER_TLS_DIR the port serves TLS only and requires a client certificate.
start_redis() {
    local port=(--port "$REDIS_PORT")
    [ -n "${PEER_TLS_DIR:-}" ] &&
        port=(--port 0 --tls-port "$REDIS_PORT" --tls-cert-file "$PEER_TLS_DIR/server.pem"
            --tls-key-file "$PEER_TLS_DIR/server.key" --tls-ca-cert-file "$PEER_TLS_DIR/ca.pem"
            --tls-auth-clients yes)
    redis-server "${port[@]}" --bind 127.0.0.1 --save '' --appendonly no --daemonize no "$@" \
        >>"$RESULTS/redis-server.log" 2>&1 &
    REDIS_PID=$!
    PIDS+=("$REDIS_PID")
    wait_port 127.0.0.1 "$REDIS_PORT" 20 || die "redis-server did not start (see $RESULTS/redis-server.log)"
}
stop_redis() {
    stop_pids "$REDIS_PID"
    forget_pid "$REDIS_PID"
    wait_for 20 port_free "$REDIS_PORT" || die "redis-server did not stop"
}

# ZooKeeper 3.8 from the Debian package, started directly with java (no systemd). NODES members:
# member i has client port ZK_PORT+i, quorum port ZK_PORT+100+i, election port ZK_PORT+103+i
# (ZK_PORT: the first free from 12181 unless set). ZK_HEAP (256m) per member; data on tmpfs, or
# under $WORK with ZK_DISK=1. Sets ZK_ENDPOINTS, ZK_CP and ZK_VERSION.
setup_zk() {
    command -v java >/dev/null || die "java is needed to run ZooKeeper (apt-get install default-jre-headless)"
    [ -f /usr/share/java/zookeeper.jar ] || apt_install zookeeper
    # zookeeper.jar's manifest lists its dependencies' jars (Debian's /usr/share/java);
    # slf4j-simple sends ZooKeeper's log (warnings and above) to the member's log file.
    ZK_CP=/usr/share/java/zookeeper.jar
    [ -f /usr/share/java/slf4j-simple.jar ] && ZK_CP+=:/usr/share/java/slf4j-simple.jar
    ZK_VERSION=$(dpkg-query -W -f='${Version}' zookeeper 2>/dev/null || echo unknown)
    ZK_HEAP=${ZK_HEAP:-256m}
    ZK_PORT=${ZK_PORT:-$(free_base_port 12181 10 12481 $((2 * NODES)) 100)} || die "no free ports for zookeeper"
    ZK_ENDPOINTS=""
    local i
    for i in $(seq 0 $((NODES - 1))); do ZK_ENDPOINTS+="${ZK_ENDPOINTS:+,}127.0.0.1:$((ZK_PORT + i))"; done
    ZK_PIDS=()
}

# Whether member $1 (0-based) is serving, as leader or follower (the `srvr` four-letter word).
zk_mode() {
    { exec 3<>"/dev/tcp/127.0.0.1/$((ZK_PORT + $1))" && printf srvr >&3 && timeout 2 cat <&3; } 2>/dev/null |
        sed -n 's/^Mode: //p'
}
zk_has_quorum() {
    local i
    ZK_MODES=$(for i in $(seq 0 $((NODES - 1))); do zk_mode "$i"; done | sort | tr '\n' ' ')
    [ "$ZK_MODES" = "follower follower leader " ]
}

# Starts a fresh ensemble (setup_zk first) with forceSync=$1; waits until it has a leader and
# two followers. Logs in $RESULTS/zk-<sync>-z<i>.log.
start_zk() {
    local sync=$1 dir i m cfg
    if [ "${ZK_DISK:-0}" = 1 ]; then dir="$WORK/zk-$sync"; else dir=$(mktemp -d /dev/shm/strata-bench-zk.XXXXXX); fi
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
    wait_for 30 zk_has_quorum || die "zookeeper has no quorum (modes: $ZK_MODES; see $RESULTS/zk-$sync-z*.log)"
    log "zookeeper (forceSync=$sync) up: $ZK_MODES"
}

# Stops the ensemble start_zk started and removes its data.
stop_zk() {
    local pid
    stop_pids "${ZK_PIDS[@]}"
    for pid in "${ZK_PIDS[@]}"; do forget_pid "$pid"; done
    ZK_PIDS=()
    rm -rf "$ZK_DIR"
}

# Installs Debian packages with apt-get. Usage: apt_install PACKAGE...
apt_install() {
    log "installing $*"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# Installs with apt-get the Debian package of every command that is missing. Arguments are
# COMMAND=PACKAGE pairs. Usage: ensure_commands etcd=etcd-server protoc=protobuf-compiler
ensure_commands() {
    local need=() pair
    for pair in "$@"; do command -v "${pair%%=*}" >/dev/null || need+=("${pair#*=}"); done
    [ "${#need[@]}" -eq 0 ] || apt_install "${need[@]}"
}
