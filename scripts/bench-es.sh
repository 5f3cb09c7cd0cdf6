#!/usr/bin/env bash
# Eventual Store (Kite §5.2/5.3 relaxed get/put) against Redis, side by side, same load
# generator (`strata bench`), same machine. See docs/benchmarks.md for what it measures.
#
#   scripts/bench-es.sh                      # everything, ~15 minutes on 2 cores
#   RUNS=1 DURATION=2 RATIOS="5 50" scripts/bench-es.sh   # a quick look
#   BASELINE=3bd5ef2 RUNS=3 DURATION=3 RATIOS="5 50" scripts/bench-es.sh   # after/before a change
#   TLS=both RUNS=5 DURATION=3 RATIOS="5 50" scripts/bench-es.sh   # what TLS costs: TLS/plain
#
# Knobs (environment): RUNS (5), DURATION (5 s), WARMUP (1 s), CLIENTS (4), SESSIONS (4),
# DEPTH (16: the pipelined setting; pipeline 1 is always run too), KEYS (100000),
# KEY_SIZE (16), VALUE_SIZE (64), RATIOS ("1 5 20 50 100"), BASE_PORT (7400),
# REDIS_PORT (6399), RESULTS (results directory), CARGO_TARGET_DIR; QUIET_CORES (0.1),
# QUIET_WAIT (60 s), QUIET_BUDGET (600 s): how idle the machine must be before each run, and how
# long to wait for it (see wait_quiet). BASELINE=REV or BASELINE_BIN=DIR: run an older build's
# cluster beside this one instead of Redis, and print after/before ratios (scripts/bench-lib.sh).
# TLS: on (default: `strata up`'s TLS, the client presenting its admin certificate), off (the
# cluster runs --insecure-plaintext), or both: a plain cluster of this build beside the TLS one
# instead of Redis, every run on both, interleaved, and TLS/plain ratios (scripts/bench-lib.sh).
#
# It builds release binaries, installs redis-server/redis-tools with apt-get if missing,
# starts a 3-node Strata cluster and a Redis server, runs every configuration RUNS times
# (Strata and Redis interleaved), runs redis-benchmark for reference, stops everything it
# started, and prints a markdown table of medians (also in $RESULTS/summary.md).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

RUNS=${RUNS:-5}
DURATION=${DURATION:-5}
WARMUP=${WARMUP:-1}
CLIENTS=${CLIENTS:-4}
SESSIONS=${SESSIONS:-4}
DEPTH=${DEPTH:-16}
KEYS=${KEYS:-100000}
KEY_SIZE=${KEY_SIZE:-16}
VALUE_SIZE=${VALUE_SIZE:-64}
RATIOS=${RATIOS:-"1 5 20 50 100"}
BASE_PORT=${BASE_PORT:-7400}
REDIS_PORT=${REDIS_PORT:-6399}
RESULTS=${RESULTS:-${CARGO_TARGET_DIR:-$ROOT/target}/bench-results/es-$(date +%Y%m%d-%H%M%S)}
QUIET_WAIT=${QUIET_WAIT:-60}
QUIET_BUDGET=${QUIET_BUDGET:-600}
NODES=3
TLS=${TLS:-on}
case $TLS in on | off | both) ;; *) echo "TLS=$TLS: use on, off or both" >&2; exit 2 ;; esac

TAG=bench-es
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"
mkdir -p "$RESULTS"

# ---- (a) build; redis (or the baseline) -----------------------------------------------------------
build_strata
build_baseline
if [ "$TLS" = both ]; then
    TARGETS="strata plain"
elif [ -n "${BASELINE_BIN:-}" ]; then
    TARGETS="strata baseline"
else
    TARGETS="strata redis"
fi
[ "$TLS" = off ] && STRATA_UP_FLAGS=--insecure-plaintext
[ "$TARGETS" = "strata redis" ] && ensure_commands redis-server=redis-server redis-benchmark=redis-tools

# ---- (b) a 3-node Strata cluster and redis-server (or the baseline's cluster) ---------------------
start_strata
case $TARGETS in
    "strata plain") start_plain ;;
    "strata baseline") start_baseline ;;
    *) start_redis ;;
esac

# ---- machine and settings ---------------------------------------------------------------------
{
    describe_machine
    echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
    echo "kernel: $(uname -r)"
    echo "tls: $TLS"
    case $TARGETS in
        "strata plain") echo "beside: this build with --insecure-plaintext" ;;
        "strata baseline") echo "baseline: $BASELINE_BIN ${BASELINE:-}" ;;
        *) echo "redis: $(redis-server --version)" ;;
    esac
    echo "driver: $BIN/strata bench"
    echo "settings: clients=$CLIENTS sessions=$SESSIONS depth=1,$DEPTH keys=$KEYS key_size=$KEY_SIZE value_size=$VALUE_SIZE duration=${DURATION}s warmup=${WARMUP}s runs=$RUNS ratios=[$RATIOS]"
} | tee "$RESULTS/machine.txt" >&2

# ---- (e) the runs -----------------------------------------------------------------------------
common=(--clients "$CLIENTS" --sessions "$SESSIONS" --keys "$KEYS" --key-size "$KEY_SIZE"
    --value-size "$VALUE_SIZE" --dist uniform --duration "$DURATION" --warmup "$WARMUP" --quiet)
total=$((2 * $(wc -w <<<"$RATIOS") * RUNS * $(wc -w <<<"$TARGETS")))
n=0
for depth in 1 "$DEPTH"; do
    for ratio in $RATIOS; do
        for run in $(seq 1 "$RUNS"); do
            for target in $TARGETS; do
                n=$((n + 1))
                name="$target-w$ratio-p$depth-r$run"
                # --data-dir: where `strata bench` finds the cluster's TLS credentials (or
                # learns it is plain).
                case $target in
                    strata) ep=$ENDPOINTS servers=("${STRATA_PIDS[@]}") kind=strata data=$STRATA_DATA ;;
                    plain) ep=$PLAIN_ENDPOINTS servers=("${PLAIN_PIDS[@]}") kind=strata data=$PLAIN_DATA ;;
                    baseline) ep=$BASELINE_ENDPOINTS servers=("${BASELINE_PIDS[@]}") kind=strata data=$BASELINE_DATA ;;
                    redis) ep=127.0.0.1:$REDIS_PORT servers=("$REDIS_PID") kind=redis data=$STRATA_DATA ;;
                esac
                log "($n/$total) $name"
                wait_quiet
                before=$(cpu_seconds "${servers[@]}")
                busy_before=$(machine_busy_seconds)
                start_ns=$(date +%s%N)
                # `time` reports the load generator's own CPU (TIMEFORMAT: user system).
                { TIMEFORMAT='%U %S'; time bench_run "$name" --target "$kind" --endpoints "$ep" --data-dir "$data" "${common[@]}" \
                    --pipeline "$depth" --write-ratio "$ratio" --seed "$run"; } 2>"$WORK/time"
                wall=$(( ($(date +%s%N) - start_ns) / 1000000 ))
                after=$(cpu_seconds "${servers[@]}")
                busy_after=$(machine_busy_seconds)
                # Whole invocation (connect, preload, warmup, window): CPU seconds of the
                # servers, of the load generator, and of everything else on the machine.
                read -r bu bs <"$WORK/time"
                awk -v wall="$wall" -v s0="$before" -v s1="$after" -v bu="$bu" -v bs="$bs" \
                    -v m0="$busy_before" -v m1="$busy_after" -v load="$(cut -d' ' -f1 /proc/loadavg)" 'BEGIN {
                        server = s1 - s0; bench = bu + bs; other = (m1 - m0) - server - bench
                        if (other < 0) other = 0
                        printf "{\"wall_s\": %.3f, \"server_cpu_s\": %.2f, \"bench_cpu_s\": %.2f, \"other_cpu_s\": %.2f, \"loadavg_1m\": %s}\n",
                            wall / 1000, server, bench, other, load
                    }' >"$RESULTS/$name.cpu.json"
            done
        done
    done
done

# ---- (g) the table ----------------------------------------------------------------------------
summarize_pair_and_exit

# redis-benchmark for reference: the same connection count and key space, its own client.
conns=$((CLIENTS * SESSIONS))
for p in 1 "$DEPTH"; do
    wait_quiet
    log "redis-benchmark -P $p"
    redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -t get,set -n 500000 -c "$conns" -d "$VALUE_SIZE" \
        -r "$KEYS" -P "$p" --csv -q >"$RESULTS/redis-benchmark-P$p.csv"
done

# ---- (g) the table ----------------------------------------------------------------------------
summarize es "$RESULTS" "$RUNS" "$DEPTH" "$RATIOS"
log "results in $RESULTS"
