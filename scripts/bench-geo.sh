#!/usr/bin/env bash
# Geo-distributed latency (ORCA §8.2 "Geo-distributed", §8.3 E4): a local 5-node cluster whose
# nodes sit in three emulated data centres, 2/2/1 (no data centre holds a majority), with
# WAN_MS (17.5 ms) one way on every link between data centres, and clients LOCAL_MS (1 ms) one
# way from the nodes of their own data centre and LOCAL_MS + WAN_MS from the others.
#   nodes <-> nodes    `strata fault --node I --peer J --delay-ms WAN_MS`, on both directions of
#                      every inter-DC link (the node's fault layer; the kernel has no netem)
#   clients <-> nodes  `strata bench --client-delay-ms`: an in-process relay per node
# Three log tables with the geo timer preset (`--timers geo`: hb 25 ms, mt 150 ms, rt 750 ms,
# ORCA §3.4), the paper's three systems (`log_table_flags` in scripts/bench-lib.sh):
#   orca    cad + active-set reads
#   weak    weak-ZK: async durability, reads at any node
#   strong  strong-ZK: sync durability, reads at the leader
# Before each run it finds the table's leader L and a follower F in another data centre, and
# measures, with the clients in L's data centre or in F's:
#   read-leader     reads (YCSB C), clients near L, reading at L
#   read-follower   reads (YCSB C), clients near F, reading at F (strong: at L, across the WAN)
#   write-leader    writes (YCSB W), clients near L
#   write-follower  writes (YCSB W), clients near F (every write crosses the WAN to L)
# and prints the median p50 / p99 latencies of RUNS runs and the ratios strong/orca, strong/weak
# and orca/weak per case (paper: reads near followers and writes near the leader ~14x lower for
# ORCA than strong-ZK, writes near followers ~2x lower; ORCA close to weak-ZK). A run during
# which the leader changed (leases lapse on an overloaded machine) is flagged in the summary.
#
#   scripts/bench-geo.sh                                 # ~5 minutes on 2 cores
#   RUNS=1 DURATION=1 WARMUP=0.5 scripts/bench-geo.sh    # a quick look
#
# Knobs (environment): RUNS (3), DURATION (3 s), WARMUP (1 s), SESSIONS (8: one client
# connection per run, all its sessions at the same node), KEYS (200: every run preloads them,
# across the WAN for the clients near F), KEY_SIZE (16), VALUE_SIZE (32), WAN_MS (17.5),
# LOCAL_MS (1), DCS ("0 0 1 1 2": the data centre of node 0, 1, ...; its length is the number of
# nodes), CONFIGS ("orca weak strong"), BASE_PORT (first free from 7600), RESULTS, PLOT
# ($RESULTS/geo-latency.png, drawn by strata-plot), CARGO_TARGET_DIR; QUIET_CORES, QUIET_WAIT, QUIET_BUDGET (scripts/bench-lib.sh); KEEP_LOGS=1
# keeps the nodes' logs in $RESULTS/node-logs.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

RUNS=${RUNS:-3}
DURATION=${DURATION:-3}
WARMUP=${WARMUP:-1}
SESSIONS=${SESSIONS:-8}
KEYS=${KEYS:-200}
KEY_SIZE=${KEY_SIZE:-16}
VALUE_SIZE=${VALUE_SIZE:-32}
WAN_MS=${WAN_MS:-17.5}
LOCAL_MS=${LOCAL_MS:-1}
DCS=${DCS:-"0 0 1 1 2"}
CONFIGS=${CONFIGS:-"orca weak strong"}
read -r -a DC <<<"$DCS"
NODES=${#DC[@]}
RESULTS=${RESULTS:-${CARGO_TARGET_DIR:-$ROOT/target}/bench-results/geo-$(date +%Y%m%d-%H%M%S)}
CASES="read-leader read-follower write-leader write-follower"

TAG=bench-geo
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"
mkdir -p "$RESULTS"

build_and_start_strata

# ---- the WAN: a delay on both directions of every link between two data centres ----------------
for i in $(seq 0 $((NODES - 1))); do
    for j in $(seq 0 $((NODES - 1))); do
        [ "${DC[$i]}" = "${DC[$j]}" ] && continue
        strata_cli fault --node "$i" --peer "$j" --delay-ms "$WAN_MS" >>"$RESULTS/faults.log" 2>&1 ||
            { cat "$RESULTS/faults.log" >&2; die "cannot set the delay of link $i -> $j"; }
    done
done

# The node leading table $1 (its only shard); waits through an election.
leader_of() { table_leader "$1" || die "table $1 has no leader"; }

# Waits (at most 30 s) until the leaders of every table stayed the same for 2 s: a new table's
# first elections can run into each other over the WAN.
wait_stable_leaders() {
    local now last="" stable=0 cfg
    for _ in $(seq 60); do
        now=$(for cfg in $CONFIGS; do leader_of "l-$cfg"; done | tr '\n' ' ')
        if [ "$now" = "$last" ]; then stable=$((stable + 1)); else stable=0; fi
        [ "$stable" -ge 4 ] && return 0
        last=$now
        sleep 0.5
    done
    log "warning: the leaders did not settle ($now)"
}

# A node in another data centre than node $1.
remote_of() {
    local i
    for i in $(seq 0 $((NODES - 1))); do
        [ "${DC[$i]}" != "${DC[$1]}" ] && { echo "$i"; return 0; }
    done
    die "every node is in the data centre of node $1: give DCS at least two data centres"
}

# `strata bench` flags placing its one client in the data centre of node $1 and reading at it:
# the endpoints with node $1 first (the client's home), and each one's one-way delay.
placement() {
    local home=$1 i eps="" delays=""
    for i in "$home" $(seq 0 $((NODES - 1))); do
        [ "$i" = "$home" ] && [ -n "$eps" ] && continue
        eps+="${eps:+,}127.0.0.1:$((BASE_PORT + i))"
        if [ "${DC[$i]}" = "${DC[$home]}" ]; then
            delays+="${delays:+,}$LOCAL_MS"
        else
            delays+="${delays:+,}$(awk -v l="$LOCAL_MS" -v w="$WAN_MS" 'BEGIN { print l + w }')"
        fi
    done
    echo "--endpoints $eps --client-delay-ms $delays"
}

create_log_tables "$CONFIGS" --timers geo
wait_stable_leaders

{
    describe_machine
    echo "data: $(df -h "$WORK" | tail -1 | awk '{print $1, $6}') (fsync on this device)"
    echo "placement: node data centres [$DCS]; WAN ${WAN_MS} ms one way between data centres, clients ${LOCAL_MS} ms from their own"
    echo "settings: 1 client x $SESSIONS sessions (pipeline 1) keys=$KEYS key_size=$KEY_SIZE value_size=$VALUE_SIZE duration=${DURATION}s warmup=${WARMUP}s runs=$RUNS configs=[$CONFIGS] timers=geo"
} | tee "$RESULTS/machine.txt" >&2

total=$((RUNS * 4 * $(wc -w <<<"$CONFIGS")))
n=0
for run in $(seq 1 "$RUNS"); do
    for cfg in $CONFIGS; do
        for c in $CASES; do
            n=$((n + 1))
            name="$cfg-$c-r$run"
            leader=$(leader_of "l-$cfg")
            case $c in
                *-leader) home=$leader ;;
                *-follower) home=$(remote_of "$leader") ;;
            esac
            case $c in
                read-*) ycsb=c ;;
                write-*) ycsb=w ;;
            esac
            log "($n/$total) $name (leader $leader, clients near node $home)"
            wait_quiet
            # shellcheck disable=SC2046 # placement prints flags
            bench_table "$name" "l-$cfg" "$run" $(placement "$home") --ycsb "$ycsb" --clients 1
            after=$(leader_of "l-$cfg")
            echo "$name: leader $leader (dc ${DC[$leader]}), clients near node $home (dc ${DC[$home]}), leader after $after" >>"$RESULTS/placement.txt"
            # A leader change moves the WAN within the run (an overloaded machine: leases lapse).
            if [ "$after" != "$leader" ]; then
                log "warning: l-$cfg changed leader during $name ($leader -> $after)"
                touch "$RESULTS/$name.leader-changed"
            fi
        done
    done
done
strata_cli status --json >"$RESULTS/status-after.json" 2>/dev/null || true

summarize geo "$RESULTS" "$CONFIGS" "$CASES"
log "results in $RESULTS"
plot_chart geo "${PLOT:-$RESULTS/geo-latency.png}" "$RESULTS" "$CONFIGS" "$CASES" "$WAN_MS"
