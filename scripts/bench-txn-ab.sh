#!/usr/bin/env bash
# Transactions before and after a change (issue #18 item 6): this build beside a baseline,
# every run on a fresh 3-node cluster with a fresh 5-shard `--txn rifl` table, the two builds
# alternating run by run, this build's `strata bench` driving both. Workloads (WORKLOADS):
#   uni   2 keys over 1000 (uniform), 4 clients x 4 sessions
#   zipf  2 keys over 100 (zipfian θ 0.99: contention), 4 x 4
#   one   2 keys in 2 distinct shards, one loop (commit latency)
#   uni1, zipf1  uni and zipf on a 1-shard table (every transaction single-participant)
# Prints the after/before table of `benchpy table ab` (committed/s medians, their ratio, the
# per-run ratios, transaction p50) and writes $RESULTS/summary.md; beside each report,
# NAME-rN.cpu.json holds the nodes' CPU seconds over the run.
#
#   BASELINE=HEAD~1 scripts/bench-txn-ab.sh                    # ~8 minutes on 2 cores
#   BASELINE=HEAD~1 RUNS=2 WORKLOADS=uni scripts/bench-txn-ab.sh
#   BASELINE_BIN=/path/to/older/release scripts/bench-txn-ab.sh
#
# Knobs (environment): BASELINE (a git revision, built once into target/baseline/) or
# BASELINE_BIN (a directory with an older build's `strata`), RUNS (6 per build and workload),
# DURATION (3 s), WARMUP (0.5 s), WORKLOADS ("uni zipf one"), RESULTS, CARGO_TARGET_DIR;
# TMPDIR (where the clusters keep their data: /dev/shm takes the disk out); CLIENT (`this`:
# this build's `strata bench` drives both; `each`: each build drives its own cluster, for a
# change of the client protocol that an older server does not decode); THREADS (1: the load
# generator's threads, `strata bench --threads`, as in bench-txn.sh; with CLIENT=this only).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

RUNS=${RUNS:-6}
DURATION=${DURATION:-3}
WARMUP=${WARMUP:-0.5}
WORKLOADS=${WORKLOADS:-"uni zipf one"}
CLIENT=${CLIENT:-this}
THREADS=${THREADS:-1}
case $CLIENT in this | each) ;; *) echo "CLIENT is 'this' or 'each', not '$CLIENT'" >&2; exit 2 ;; esac
RESULTS=${RESULTS:-${CARGO_TARGET_DIR:-$ROOT/target}/bench-results/txn-ab-$(date +%Y%m%d-%H%M%S)}
NODES=3

TAG=bench-txn-ab
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"
mkdir -p "$RESULTS"

[ -n "${BASELINE:-}${BASELINE_BIN:-}" ] || die "set BASELINE=REV (a git revision) or BASELINE_BIN=DIR"
build_strata
build_baseline
describe_machine | tee "$RESULTS/machine.txt" >&2
echo "settings: runs=$RUNS duration=${DURATION}s workloads=[$WORKLOADS] client=$CLIENT baseline=${BASELINE:-$BASELINE_BIN}" |
    tee -a "$RESULTS/machine.txt" >&2

workload_flags() {
    case $1 in
        uni) echo --table bank --txn-objects 2 --keys 1000 --clients 4 --sessions 4 ;;
        zipf) echo --table bank --txn-objects 2 --keys 100 --dist zipfian --zipf-theta 0.99 --clients 4 --sessions 4 ;;
        one) echo --table bank --txn-objects 2 --txn-spread --keys 1000 --clients 1 --sessions 1 ;;
        uni1) echo --table one --txn-objects 2 --keys 1000 --clients 4 --sessions 4 ;;
        zipf1) echo --table one --txn-objects 2 --keys 100 --dist zipfian --zipf-theta 0.99 --clients 4 --sessions 4 ;;
        *) die "unknown workload '$1' (uni, zipf, one, uni1, zipf1)" ;;
    esac
}

# One run: a fresh cluster of the build in SERVER_BIN, the table, one `strata bench` of this
# build, the nodes' CPU time, the cluster stopped. Usage: one_run NAME SERVER_BIN WORKLOAD RUN
one_run() {
    local name=$1 server_bin=$2 workload=$3 run=$4 own_bin=$BIN s0
    BIN=$server_bin
    unset BASE_PORT
    start_strata
    strata_cli table create bank --txn rifl --shards 5 >/dev/null
    strata_cli table create one --txn rifl --shards 1 >/dev/null
    table_leader bank >/dev/null || die "table bank has no leader"
    table_leader one >/dev/null || die "table one has no leader"
    local threads=()
    [ "$CLIENT" = each ] || { BIN=$own_bin; threads=(--threads "$THREADS"); }
    wait_quiet
    log "run $run: $name"
    s0=$(cpu_seconds "${STRATA_PIDS[@]}")
    # shellcheck disable=SC2046 # the flags are words
    bench_run "$name-r$run" --endpoints "$ENDPOINTS" --workload txn --quiet \
        --warmup "$WARMUP" --duration "$DURATION" --seed "$run" "${threads[@]}" $(workload_flags "$workload")
    awk -v s0="$s0" -v s1="$(cpu_seconds "${STRATA_PIDS[@]}")" \
        'BEGIN { printf "{\"server_cpu_s\": %.2f}\n", s1 - s0 }' >"$RESULTS/$name-r$run.cpu.json"
    stop_strata
    BIN=$own_bin
}

for run in $(seq 1 "$RUNS"); do
    for w in $WORKLOADS; do
        # Alternate which build goes first, so that neither always runs on the warmer machine.
        if [ $((run % 2)) = 1 ]; then
            one_run "$w" "$BIN" "$w" "$run"
            one_run "baseline-$w" "$BASELINE_BIN" "$w" "$run"
        else
            one_run "baseline-$w" "$BASELINE_BIN" "$w" "$run"
            one_run "$w" "$BIN" "$w" "$run"
        fi
    done
done

summarize ab "$RESULTS"
log "results in $RESULTS"
