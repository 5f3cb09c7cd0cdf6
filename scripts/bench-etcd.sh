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
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release
NODES=3

TAG=bench-etcd
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"
mkdir -p "$RESULTS"

# ---- install and build -----------------------------------------------------------------------
ensure_commands etcd=etcd-server etcdctl=etcd-client protoc=protobuf-compiler
command -v python3 >/dev/null || die "python3 is needed to summarize the JSON results"
log "building release binaries (strata with the etcd target)"
cargo build --release -q -p strata-node
cargo build --release -q -p strata --features etcd
BENCH=("$BIN/strata" bench)

# ---- the two clusters -------------------------------------------------------------------------
BASE_PORT=${BASE_PORT:-$(free_base_port 7600 200 9800 "$NODES" 100)} || die "no free base port for strata"
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
    "${BENCH[@]}" --target "$target" --endpoints "$endpoints" "${common[@]}" "$@" --label "$name" \
        --json "$RESULTS/$name.json" >"$RESULTS/$name.txt" 2>&1 || { cat "$RESULTS/$name.txt" >&2; die "$name failed"; }
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
python3 - "$RESULTS" "$RUNS" "$RATIOS" <<'PY' | tee "$RESULTS/summary.md"
import json, statistics, sys
from pathlib import Path
results, runs, ratios = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split()
def reps(name):
    return [json.loads(f.read_text()) for r in range(1, runs + 1) if (f := results / f"{name}-r{r}.json").exists()]
def med(xs): return statistics.median(xs) if xs else float("nan")
def tput(name): return med([x["throughput_ops_s"] for x in reps(name)])
def lat(name, cls="all"):
    xs = reps(name)
    return f'{med([x["latency_us"][cls]["p50_us"] for x in xs]):.0f} / {med([x["latency_us"][cls]["p99_us"] for x in xs]):.0f}'
def errors(name): return sum(x["errors"] for x in reps(name))
print(f"ops/s, median of {runs} runs; p50 / p99 latency of all operations in µs.\n")
print("| workload | etcd ops/s | Strata ops/s | Strata/etcd | etcd p50 / p99 | Strata p50 / p99 | errors (etcd, Strata) |")
print("|---|---:|---:|---:|---:|---:|---:|")
for ratio in ratios:
    e, s = f"etcd-abd-w{ratio}", f"strata-abd-w{ratio}"
    print(f"| {ratio}% writes: etcd put/get vs Strata release/acquire | {tput(e):,.0f} | {tput(s):,.0f} | {tput(s)/tput(e):.2f} | {lat(e)} | {lat(s)} | {errors(e)}, {errors(s)} |")
e, s = "etcd-cas", "strata-cas"
print(f"| CAS only: etcd txn compare-and-put vs Strata strong CAS | {tput(e):,.0f} | {tput(s):,.0f} | {tput(s)/tput(e):.2f} | {lat(e)} | {lat(s)} | {errors(e)}, {errors(s)} |")
print("\nWhat choosing a weaker consistency buys on Strata at the same load (same runs):\n")
print("| writes % | Strata relaxed (es) ops/s | Strata Kite mix ops/s | Strata ABD ops/s | relaxed/etcd | Kite mix/etcd |")
print("|---:|---:|---:|---:|---:|---:|")
for ratio in ratios:
    e = tput(f"etcd-abd-w{ratio}")
    es, kite, abd = tput(f"strata-es-w{ratio}"), tput(f"strata-kite-w{ratio}"), tput(f"strata-abd-w{ratio}")
    print(f"| {ratio} | {es:,.0f} | {kite:,.0f} | {abd:,.0f} | {es/e:.2f} | {kite/e:.2f} |")
PY
log "results in $RESULTS"
