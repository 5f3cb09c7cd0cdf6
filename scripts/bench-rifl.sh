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
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release
NODES=3

TAG=bench-rifl
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"
mkdir -p "$RESULTS"

log "building release binaries"
cargo build --release -q -p strata -p strata-node
command -v python3 >/dev/null || die "python3 is needed to summarize the JSON results"
BASE_PORT=${BASE_PORT:-$(free_base_port 7600 200 9800 "$NODES" 100)} || die "no free base port found"
describe_machine | tee "$RESULTS/machine.txt" >&2
echo "settings: parts=[$PARTS] runs=$RUNS duration=${DURATION}s keys=$KEYS value_size=$VALUE_SIZE vclients=[$VCLIENTS] vops=$VOPS vsessions=$VSESSIONS lruns=$LRUNS lduration=${LDURATION}s" \
    | tee -a "$RESULTS/machine.txt" >&2

# Stops the cluster start_strata started (the last pid in PIDS) and forgets its data.
stop_strata() {
    local pid=${PIDS[-1]}
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    unset 'PIDS[-1]'
    rm -rf "$STRATA_DATA"
}

# Resident memory (KiB) of every node of the running cluster, space-separated.
node_rss_kib() {
    python3 - "$STRATA_DATA/cluster.json" <<'PY'
import json, sys
rss = []
for n in json.load(open(sys.argv[1]))["nodes"]:
    for line in open(f"/proc/{n['pid']}/status"):
        if line.startswith("VmRSS:"):
            rss.append(line.split()[1])
print(" ".join(rss))
PY
}

common=(--keys "$KEYS" --value-size "$VALUE_SIZE" --dist uniform --quiet)

# ---- (a) overhead: on and off, alternating -----------------------------------------------------
if [[ " $PARTS " == *" a "* ]]; then
start_strata
bench() { "$BIN/strata" bench --endpoints "$ENDPOINTS" "${common[@]}" --warmup "$WARMUP" "$@"; }
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
                bench "${loops[@]}" "${what[@]}" "${flag[@]}" --duration "$DURATION" --seed "$run" --label "$name" \
                    --json "$RESULTS/$name.json" >"$RESULTS/$name.txt" 2>&1 || { cat "$RESULTS/$name.txt" >&2; die "$name failed"; }
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
    "$BIN/strata" bench --endpoints "$ENDPOINTS" "${common[@]}" --clients 4 --sessions $((VSESSIONS / 4)) --pipeline 1 \
        --write-ratio 100 --ops "$VOPS" --warmup 0 "$@" --label "$name" --json "$RESULTS/$name.json" \
        >"$RESULTS/$name.txt" 2>&1 || { cat "$RESULTS/$name.txt" >&2; die "$name failed"; }
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
# The client address of the node that leads `__leases` (waits up to 20 s for an election).
lease_leader() {
    local addr
    for _ in $(seq 100); do
        addr=$("$BIN/strata" status --data-dir "$STRATA_DATA" --json 2>/dev/null | python3 -c '
import json, sys
for n in json.load(sys.stdin):
    if any(s["table"] == "__leases" and s["role"] == "leader" for s in n["shards"]):
        print(n["addr"])' 2>/dev/null) || true
        [ -n "$addr" ] && { echo "$addr"; return 0; }
        sleep 0.2
    done
    return 1
}
# The pid of the node whose client address is $1.
node_pid() {
    python3 - "$STRATA_DATA/cluster.json" "$1" <<'PY'
import json, sys
print(next(n["pid"] for n in json.load(open(sys.argv[1]))["nodes"] if n["client_addr"] == sys.argv[2]))
PY
}
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
    LEADER=$(lease_leader) || die "no node leads __leases (see $RESULTS/strata-up.log)"
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
python3 - "$RESULTS" "$RUNS" "$VCLIENTS" "$PARTS" "$LRUNS" <<'PY' | tee "$RESULTS/summary.md"
import json, statistics, sys
from pathlib import Path
results, runs, vclients, parts = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
lruns = int(sys.argv[5])
def load(name): return json.loads((results / f"{name}.json").read_text())
def med(xs): return statistics.median(xs)
def lat(x, q): return x["latency_us"]["all"][f"{q}_us"]

def overhead():
    print(f"(a) exactly-once on vs off: medians of {runs} alternating runs; latency with 1 closed loop, throughput with 4 x 4 loops x pipeline 16.\n")
    print("| operation | p50 on µs | p50 off µs | p50 on/off | p99 on µs | p99 off µs | ops/s on | ops/s off | throughput on/off | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for op in ["write", "faa"]:
        lt = {m: [load(f"{op}-lat-{m}-r{r}") for r in range(1, runs + 1)] for m in ["on", "off"]}
        tp = {m: [load(f"{op}-tput-{m}-r{r}") for r in range(1, runs + 1)] for m in ["on", "off"]}
        p50 = {m: med([lat(x, "p50") for x in lt[m]]) for m in lt}
        p99 = {m: med([lat(x, "p99") for x in lt[m]]) for m in lt}
        ops = {m: med([x["throughput_ops_s"] for x in tp[m]]) for m in tp}
        errs = sum(x["errors"] for m in ["on", "off"] for x in lt[m] + tp[m])
        # Per-run ratios (each on run beside its off run), then their median.
        r50 = med([lat(a, "p50") / lat(b, "p50") for a, b in zip(lt["on"], lt["off"])])
        rt = med([a["throughput_ops_s"] / b["throughput_ops_s"] for a, b in zip(tp["on"], tp["off"])])
        print(f"| {op} | {p50['on']:.1f} | {p50['off']:.1f} | {r50:.3f} | {p99['on']:.1f} | {p99['off']:.1f} | {ops['on']:.0f} | {ops['off']:.0f} | {rt:.3f} | {errs} |")
    print()

def many_clients():
    off = load("v-off")
    off_rss = statistics.mean(int(x) for x in (results / "v-off.rss").read_text().split())
    print("(b) writes from V simulated clients (RIFL §8.3 Q3), 32 closed loops; memory: mean resident memory of the 3 nodes minus the same load with RIFL off, per client.\n")
    print("| clients | ops/s | p50 µs | p99 µs | p50 vs 1 client | node memory MiB | RIFL memory per client, bytes |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    base = None
    for v in vclients:
        x = load(f"v-{v}")
        rss = statistics.mean(int(k) for k in (results / f"v-{v}.rss").read_text().split())
        base = base or lat(x, "p50")
        print(f"| {int(v):,} | {x['throughput_ops_s']:.0f} | {lat(x, 'p50'):.1f} | {lat(x, 'p99'):.1f} | {lat(x, 'p50') / base:.3f} | {rss / 1024:.0f} | {(rss - off_rss) * 1024 / int(v):.0f} |")
    print(f"| RIFL off | {off['throughput_ops_s']:.0f} | {lat(off, 'p50'):.1f} | {lat(off, 'p99'):.1f} | | {off_rss / 1024:.0f} | |")

def leases():
    print()
    print(f"(c) the lease service (RIFL §8.3 Q4): medians of {lruns} runs; each run's figure in brackets.\n")
    print("| requests | sent to | loops | per second | runs | p50 µs | p99 µs | leader node CPU, cores | bench CPU, cores | errors | rejected | leader moved |")
    print("|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    rates = {}
    for name, what, at, loops in [
        ("renew-lat-leader", "renewals", "the leader", "1"),
        ("renew-lat-follower", "renewals", "a follower (forwarded)", "1"),
        ("renew-tput-leader", "renewals", "the leader", "4 x 4 x 16"),
        ("renew-tput-all", "renewals", "round-robin", "4 x 4 x 16"),
        ("create-lat-leader", "creations", "the leader", "1"),
        ("create-tput-leader", "creations", "the leader", "4 x 4 x 16"),
    ]:
        xs = [load(f"{name}-r{r}") for r in range(1, lruns + 1)]
        ops = [x["throughput_ops_s"] for x in xs]
        rates[name] = med(ops)
        errs = sum(x["errors"] for x in xs)
        rej = sum(x["lease"]["rejected"] for x in xs)
        # A run at the leader whose connection was forwarded when it ended, or at a follower
        # whose was not: the leadership moved during the part.
        moved = sum(1 for x in xs if name.endswith("-leader") and x["lease"]["forwarded_clients"] > 0
                    or name.endswith("-follower") and x["lease"]["forwarded_clients"] == 0)
        each = ", ".join(f"{o:,.0f}" for o in ops)
        # CPU over the whole bench process's life (leases created, warmup, window).
        cpu = [[float(v) for v in (results / f"{name}-r{r}.cpu").read_text().split()] for r in range(1, lruns + 1)]
        node = med([(c1 - c0) / (t1 - t0) for c0, c1, t0, t1, _ in cpu])
        bench = med([b / (t1 - t0) for _, _, t0, t1, b in cpu])
        print(f"| {what} | {at} | {loops} | {med(ops):,.0f} | [{each}] | {med([lat(x, 'p50') for x in xs]):.1f} | {med([lat(x, 'p99') for x in xs]):.1f} | {node:.2f} | {bench:.2f} | {errs} | {rej} | {moved} |")
    need = 1_000_000 / (30 * 60 / 2)
    print(f"\nQ4: 1,000,000 clients, 30-minute leases renewed at half term: {need:,.0f} renewals/s;")
    for name, what in [("renew-tput-leader", "at the leader"), ("renew-tput-all", "round-robin")]:
        print(f"  {100 * need / rates[name]:.3f} % of the measured {rates[name]:,.0f} renewals/s {what};")
    print(f"  paper: {100 * need / 750_000:.3f} % of 750,000 renewals/s (< 0.2 %).")
    print()

if "a" in parts:
    overhead()
if "b" in parts:
    many_clients()
if "c" in parts:
    leases()
PY
log "results in $RESULTS"
