#!/usr/bin/env bash
# The log engine's durability layers side by side (ORCA §8, the paper's Table 2 / Figure 6):
# YCSB workloads against log tables of one local Strata cluster. The configurations
# (`log_table_flags` in scripts/bench-lib.sh):
#   sync, async, cad   differ only in durability, all with reads at the leader (the durability
#                      layer alone: the paper's Table 2);
#   orca, weak         the paper's system comparison (§8.2 "ORCA system"): cad + active-set reads,
#                      and weak-ZK (async durability, reads at any node, no check);
#   strong             strong-ZK (sync durability, leader reads) is the sync table's definition,
#                      so it is not in the default list: orca/strong then uses the sync runs.
# The data directories are on disk ($TMPDIR), so fsync costs what the disk makes it cost.
#
# The summary (also $RESULTS/summary.md) gives ops/s (median of RUNS), the ratios cad/sync,
# cad/async, orca/strong, orca/weak and orca/cad per workload, p50/p99 latencies, and for cad
# and orca the share of reads that triggered durability: `strata bench --table` reads it from
# the nodes' shard counters (reads that waited for MakeDurable at the leader / reads served,
# ORCA §5.5.1, over the measured window).
#
#   scripts/bench-log.sh                                  # ~10 minutes on 2 cores
#   RUNS=1 DURATION=1 WORKLOADS="W A" scripts/bench-log.sh   # a quick look
#   BASELINE=3bd5ef2 RUNS=3 DURATION=2 WORKLOADS="W A" CONFIGS="sync cad" scripts/bench-log.sh
#                                                         # after/before a change, side by side
#   TLS=both RUNS=3 DURATION=2 WORKLOADS="W A" CONFIGS="sync cad" scripts/bench-log.sh
#                                                         # what TLS costs: TLS/plain
#
# Knobs (environment): RUNS (3), DURATION (3 s), WARMUP (0.5 s), CLIENTS (4), SESSIONS (4)
# (one request at a time per session: log tables take --pipeline 1), KEYS (10000), KEY_SIZE (16),
# VALUE_SIZE (32), WORKLOADS ("W A B C D F"), CONFIGS ("sync async cad orca weak"; or strong),
# NODES (3), REPLICATION ("async": the async, cad, orca and weak tables' replication; "sync"
# replicates synchronously and persists lazily, the paper's other async baseline), BASE_PORT (first free from 7600),
# RESULTS, PLOT ($RESULTS/log-ycsb.png: throughput and durability share, drawn by strata-plot),
# CARGO_TARGET_DIR; QUIET_CORES, QUIET_WAIT, QUIET_BUDGET
# (scripts/bench-lib.sh); KEEP_LOGS=1 keeps the nodes' logs in $RESULTS/node-logs;
# BASELINE=REV or BASELINE_BIN=DIR: run an older build's cluster beside this one, every run on
# both, and print after/before ratios (scripts/bench-lib.sh). TLS: on (default), off (the
# cluster runs --insecure-plaintext), or both: a plain cluster of this build beside the TLS one,
# every run on both, interleaved, and TLS/plain ratios (scripts/bench-lib.sh).
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
CONFIGS=${CONFIGS:-"sync async cad orca weak"}
REPLICATION=${REPLICATION:-async}
NODES=${NODES:-3}
TLS=${TLS:-on}
case $TLS in on | off | both) ;; *) echo "TLS=$TLS: use on, off or both" >&2; exit 2 ;; esac
[ "$TLS" = off ] && STRATA_UP_FLAGS=--insecure-plaintext
RESULTS=${RESULTS:-${CARGO_TARGET_DIR:-$ROOT/target}/bench-results/log-$(date +%Y%m%d-%H%M%S)}

TAG=bench-log
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"
mkdir -p "$RESULTS"

build_and_start_strata
create_log_tables "$CONFIGS"
build_baseline
if [ -n "${BASELINE_BIN:-}" ]; then
    start_baseline
    with_baseline create_log_tables "$CONFIGS"
fi
if [ "$TLS" = both ]; then
    start_plain
    with_plain create_log_tables "$CONFIGS"
fi

{
    describe_machine
    echo "data: $(df -h "$WORK" | tail -1 | awk '{print $1, $6}') (fsync on this device)"
    echo "settings: clients=$CLIENTS sessions=$SESSIONS (pipeline 1) keys=$KEYS key_size=$KEY_SIZE value_size=$VALUE_SIZE duration=${DURATION}s warmup=${WARMUP}s runs=$RUNS workloads=[$WORKLOADS] configs=[$CONFIGS] replication=$REPLICATION nodes=$NODES tls=$TLS"
} | tee "$RESULTS/machine.txt" >&2

total=$((RUNS * $(wc -w <<<"$WORKLOADS") * $(wc -w <<<"$CONFIGS")))
n=0
for run in $(seq 1 "$RUNS"); do
    for w in $WORKLOADS; do
        for cfg in $CONFIGS; do
            n=$((n + 1))
            name="$cfg-$w-r$run"
            log "($n/$total) $name"
            wait_quiet
            bench_table "$name" "l-$cfg" "$run" --endpoints "$ENDPOINTS" --data-dir "$STRATA_DATA" --ycsb "$w" --clients "$CLIENTS"
            if [ -n "${BASELINE_BIN:-}" ]; then
                log "($n/$total) baseline-$name"
                wait_quiet
                bench_table "baseline-$name" "l-$cfg" "$run" --endpoints "$BASELINE_ENDPOINTS" --data-dir "$BASELINE_DATA" --ycsb "$w" --clients "$CLIENTS"
            fi
            if [ "$TLS" = both ]; then
                log "($n/$total) plain-$name"
                wait_quiet
                bench_table "plain-$name" "l-$cfg" "$run" --endpoints "$PLAIN_ENDPOINTS" --data-dir "$PLAIN_DATA" --ycsb "$w" --clients "$CLIENTS"
            fi
        done
    done
done
strata_cli status --json >"$RESULTS/status-after.json" 2>/dev/null || true

summarize_pair_and_exit
summarize log "$RESULTS" "$CONFIGS" "$WORKLOADS"
log "results in $RESULTS"
plot_chart log "${PLOT:-$RESULTS/log-ycsb.png}" "$RESULTS" "$CONFIGS" "$WORKLOADS"
