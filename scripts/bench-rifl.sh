#!/usr/bin/env bash
# What exactly-once (RIFL) costs in Strata, with `strata bench` on 3-node clusters:
#  (a) RIFL §8.3 Q1/Q2: relaxed writes and fetch-and-adds with exactly-once on and off, side by
#      side in alternating runs — latency with one closed loop, throughput with 16 loops
#      pipelined — medians of RUNS runs and the on/off ratios;
#  (b) RIFL §8.3 Q3: writes from V simulated clients (each its own RIFL id and sequence numbers,
#      `--virtual-clients V`) for V in VCLIENTS: median and tail latency per V, and the node
#      memory per client — each node's resident memory after VOPS writes, minus the same load
#      with RIFL off, divided by V (a fresh cluster per run, so nothing else differs);
#  (c) RIFL §8.3 Q4: the lease service's rate (`strata bench --lease-renewals`): renewals of
#      existing leases sent to the `__leases` leader's node and round-robin over the nodes
#      (forwarded by the others), one closed loop for latency and 4 x 4 loops x pipeline 16 for
#      throughput; then lease creations (`--lease-creations`, one fsynced log entry each) at
#      the leader, a fresh cluster per run; medians of LRUNS runs, the CPU the leader's node and
#      the bench used, and what 1M clients renewing at half a 30-minute term would use of the
#      measured rate.
# See docs/benchmarks.md, "Exactly-once (RIFL)".
#
#   scripts/bench-rifl.sh                                  # ~17 minutes on 2 cores
#   RUNS=1 VCLIENTS="1 1000" VOPS=100000 scripts/bench-rifl.sh   # a quick look
#   PARTS=c scripts/bench-rifl.sh                                 # the lease service only, ~5 minutes
#
# Knobs (environment): PARTS ("a b c": which parts run; the summary shows what ran), RUNS (5), DURATION (3 s), WARMUP (0.5 s), KEYS (20000), VALUE_SIZE (100),
# VCLIENTS ("1 1000 100000 1000000"), VOPS (1000000), VSESSIONS (32), LRUNS (3), LDURATION (10 s), BASE_PORT (first free from
# 7600), RESULTS (results directory), CARGO_TARGET_DIR; QUIET_CORES (0.1), QUIET_WAIT (5 s),
# QUIET_BUDGET (60 s): the idle-machine gate (wait_quiet, scripts/bench-lib.sh).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

PARTS=${PARTS:-a b c}
RUNS=${RUNS:-5}
DURATION=${DURATION:-3}
WARMUP=${WARMUP:-0.5}
KEYS=${KEYS:-20000}
VALUE_SIZE=${VALUE_SIZE:-100}
VCLIENTS=${VCLIENTS:-"1 1000 100000 1000000"}
VOPS=${VOPS:-1000000}
VSESSIONS=${VSESSIONS:-32}
LRUNS=${LRUNS:-3}
LDURATION=${LDURATION:-10}
RESULTS=${RESULTS:-${CARGO_TARGET_DIR:-$ROOT/target}/bench-results/rifl-$(date +%Y%m%d-%H%M%S)}
NODES=3

TAG=bench-rifl
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"
mkdir -p "$RESULTS"

build_strata
describe_machine | tee "$RESULTS/machine.txt" >&2
echo "settings: parts=[$PARTS] runs=$RUNS duration=${DURATION}s keys=$KEYS value_size=$VALUE_SIZE vclients=[$VCLIENTS] vops=$VOPS vsessions=$VSESSIONS lruns=$LRUNS lduration=${LDURATION}s" \
    | tee -a "$RESULTS/machine.txt" >&2

common=(--keys "$KEYS" --value-size "$VALUE_SIZE" --dist uniform --quiet)

# ---- (a) overhead: on and off, alternating -----------------------------------------------------
if [[ " $PARTS " == *" a "* ]]; then
start_strata
n=0
total=$((RUNS * 8))
for run in $(seq 1 "$RUNS"); do
    for rifl in on off; do
        flag=()
        [ "$rifl" = off ] && flag=(--no-exactly-once)
        for shape in lat tput; do
            case $shape in
                lat) loops=(--clients 1 --sessions 1 --pipeline 1) ;;
                tput) loops=(--clients 4 --sessions 4 --pipeline 16) ;;
            esac
            for op in write faa; do
                n=$((n + 1))
                name="$op-$shape-$rifl-r$run"
                log "($n/$total) $name"
                what=(--write-ratio 100)
                [ "$op" = faa ] && what=(--write-ratio 100 --rmw-pct 100 --rmw faa)
                wait_quiet
                bench_run "$name" --endpoints "$ENDPOINTS" "${common[@]}" --warmup "$WARMUP" "${loops[@]}" "${what[@]}" \
                    "${flag[@]}" --duration "$DURATION" --seed "$run"
            done
        done
    done
done
stop_strata
fi

# ---- (b) many clients: latency and memory per client --------------------------------------------
vrun() { # name, extra flags...
    local name=$1
    shift
    start_strata
    wait_quiet
    log "$name: $VOPS writes"
    bench_run "$name" --endpoints "$ENDPOINTS" "${common[@]}" --clients 4 --sessions $((VSESSIONS / 4)) --pipeline 1 \
        --write-ratio 100 --ops "$VOPS" --warmup 0 "$@"
    sleep 2 # let the nodes settle (acks, the records' sweep)
    node_rss_kib >"$RESULTS/$name.rss"
    stop_strata
}
if [[ " $PARTS " == *" b "* ]]; then
    vrun "v-off" --no-exactly-once
    for v in $VCLIENTS; do
        vrun "v-$v" --virtual-clients "$v"
    done
fi

# ---- (c) the lease service: renewals and creations (RIFL §8.3 Q4) -------------------------------
# Runs one lease bench; $name.cpu gets the CPU seconds the leader's node and the bench used
# and the wall time of the whole run (leases created, warmup and window).
lbench() { # name, endpoints, flags...
    local name=$1 at=$2 c0 c1 t0 t1 bpid
    shift 2
    wait_quiet
    log "$name ($at)"
    c0=$(cpu_seconds "$LEADER_PID")
    t0=$(date +%s.%N)
    "$BIN/strata" bench --endpoints "$at" --quiet --warmup "$WARMUP" --duration "$LDURATION" "$@" --label "$name" \
        --json "$RESULTS/$name.json" >"$RESULTS/$name.txt" 2>&1 &
    bpid=$!
    # The bench's own CPU, sampled just before it exits (its connections end with the window).
    local bcpu=0
    while kill -0 "$bpid" 2>/dev/null; do bcpu=$(cpu_seconds "$bpid" 2>/dev/null || echo "$bcpu"); sleep 0.2; done
    wait "$bpid" || { cat "$RESULTS/$name.txt" >&2; die "$name failed"; }
    t1=$(date +%s.%N)
    c1=$(cpu_seconds "$LEADER_PID")
    echo "$c0 $c1 $t0 $t1 $bcpu" >"$RESULTS/$name.cpu"
}
# Starts a cluster and sets LEADER (the `__leases` leader's client address), its LEADER_PID and
# FOLLOWER (another node's address).
start_lease_cluster() {
    start_strata
    LEADER=$(table_leader_addr __leases) || die "no node leads __leases (see $RESULTS/strata-up.log)"
    FOLLOWER=$(tr , '\n' <<<"$ENDPOINTS" | grep -v -x -m1 "$LEADER")
    LEADER_PID=$(node_pid "$LEADER")
    log "__leases leader $LEADER (pid $LEADER_PID); follower $FOLLOWER"
}
if [[ " $PARTS " == *" c "* ]]; then
    one=(--clients 1 --sessions 1 --pipeline 1)
    many=(--clients 4 --sessions 4 --pipeline 16)
    # Renewals: one cluster, 16 leases (one per loop) renewed over and over.
    start_lease_cluster
    for run in $(seq 1 "$LRUNS"); do
        lbench "renew-lat-leader-r$run" "$LEADER" --lease-renewals "${one[@]}"
        lbench "renew-lat-follower-r$run" "$FOLLOWER" --lease-renewals "${one[@]}"
        lbench "renew-tput-leader-r$run" "$LEADER" --lease-renewals "${many[@]}"
        lbench "renew-tput-all-r$run" "$ENDPOINTS" --lease-renewals "${many[@]}"
    done
    stop_strata
    # Creations: a fresh cluster per run. A throughput run leaves ~400,000 live leases, and a
    # service holding ~900,000 lost its leader for good (docs/benchmarks.md, Q4).
    for run in $(seq 1 "$LRUNS"); do
        start_lease_cluster
        lbench "create-lat-leader-r$run" "$LEADER" --lease-creations "${one[@]}"
        lbench "create-tput-leader-r$run" "$LEADER" --lease-creations "${many[@]}"
        stop_strata
    done
fi

# ---- tables --------------------------------------------------------------------------------------
summarize rifl "$RESULTS" "$RUNS" "$VCLIENTS" "$PARTS" "$LRUNS"
log "results in $RESULTS"
