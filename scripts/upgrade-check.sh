#!/usr/bin/env bash
# Upgrading from an older build keeps the data: the older build's 3-node cluster creates a
# 3-shard transactional log table and writes to it (puts, a counter, a transaction), then
# stops; this build starts on the same data directories, must read every value back, take
# new writes and keep them across another restart. The log-table layout changed in 3d23f95
# (one WAL per node instead of one per shard replica; old directories are imported at the
# first start):
#
#   BASELINE=1ecc006 scripts/upgrade-check.sh      # builds 1ecc006 once into target/baseline/
#   BASELINE_BIN=/path/to/older/release scripts/upgrade-check.sh
#
# Knobs (environment): BASELINE (a git revision) or BASELINE_BIN (a directory with an older
# build's `strata` and `strata-node`), KEYS (20), CARGO_TARGET_DIR.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
KEYS=${KEYS:-20}
NODES=3
TAG=upgrade-check
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"
RESULTS=${RESULTS:-$WORK/results}
mkdir -p "$RESULTS"

[ -n "${BASELINE:-}${BASELINE_BIN:-}" ] || die "set BASELINE=REV (a git revision) or BASELINE_BIN=DIR"
log "building this build (release)"
cargo build --release -q -p strata -p strata-node
build_baseline
THIS_BIN=$BIN

expect() { # KEY VALUE
    local got
    got=$(strata_cli get --table acc "$1") || die "get $1 failed"
    [ "$got" = "$2" ] || die "$1 reads '$got', expected '$2'"
}

# Stops the cluster and keeps its data (stop_strata would remove it).
stop_keeping_data() {
    stop_pids "$STRATA_UP_PID"
    forget_pid "$STRATA_UP_PID"
    unset BASE_PORT
}

BIN=$BASELINE_BIN
start_strata
log "older build ($BASELINE_BIN): writing"
strata_cli table create acc --engine log --durability sync --shards 3 --txn rifl >/dev/null
table_leader acc >/dev/null || die "table acc has no leader"
for i in $(seq 1 "$KEYS"); do strata_cli put --table acc "k$i" "v$i" >/dev/null; done
strata_cli faa --table acc ctr 7 >/dev/null
printf 'add a 10\nadd b 5\n' | strata_cli txn --table acc >/dev/null
stop_keeping_data

BIN=$THIS_BIN
start_strata
log "this build: reading the older build's data"
table_leader acc >/dev/null || die "table acc has no leader after the upgrade"
for i in $(seq 1 "$KEYS"); do expect "k$i" "v$i"; done
expect ctr 7
expect a 10
expect b 5
strata_cli put --table acc new yes >/dev/null
printf 'add a 1\nadd b 1\n' | strata_cli txn --table acc >/dev/null
stop_keeping_data

start_strata
log "this build, restarted: reading everything again"
table_leader acc >/dev/null || die "table acc has no leader after the restart"
for i in $(seq 1 "$KEYS"); do expect "k$i" "v$i"; done
expect new yes
expect a 11
expect b 6
log "ok: $((KEYS + 3)) values written by the older build read back, and new writes survive a restart"
