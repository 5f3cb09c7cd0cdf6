#!/usr/bin/env bash
# The log engine's durability layers side by side (ORCA §8, the paper's Table 2 / Figure 6):
# YCSB workloads against three log tables of one local Strata cluster that differ only in
# durability, all with reads at the leader (the durability layer alone):
#   sync   writes acknowledged once fsynced on a majority (group commit)
#   async  writes acknowledged once applied at the leader, persisted in the background
#   cad    async's write path; a read first makes the data it returns durable on a majority
# plus the whole ORCA configuration (cad + active-set reads) when CONFIGS includes `orca`.
# The data directories are on disk ($TMPDIR), so fsync costs what the disk makes it cost.
#
#   scripts/bench-log.sh                                  # ~8 minutes on 2 cores
#   RUNS=1 DURATION=1 WORKLOADS="W A" scripts/bench-log.sh   # a quick look
#
# Knobs (environment): RUNS (3), DURATION (3 s), WARMUP (0.5 s), CLIENTS (4), SESSIONS (4)
# (one request at a time per session: log tables take --pipeline 1), KEYS (10000), KEY_SIZE (16),
# VALUE_SIZE (32), WORKLOADS ("W A B C D F"), CONFIGS ("sync async cad orca"), NODES (3),
# REPLICATION ("async": the async and cad tables' replication; "sync" replicates synchronously
# and persists lazily, the paper's other async baseline), BASE_PORT (first free from 7600),
# RESULTS, CARGO_TARGET_DIR; QUIET_CORES, QUIET_WAIT, QUIET_BUDGET (scripts/bench-lib.sh).
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
CONFIGS=${CONFIGS:-"sync async cad orca"}
REPLICATION=${REPLICATION:-async}
NODES=${NODES:-3}
RESULTS=${RESULTS:-${CARGO_TARGET_DIR:-$ROOT/target}/bench-results/log-$(date +%Y%m%d-%H%M%S)}
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release

TAG=bench-log
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"
mkdir -p "$RESULTS"

command -v python3 >/dev/null || die "python3 is needed to summarize the JSON results"
log "building release binaries"
cargo build --release -q -p strata -p strata-node

BASE_PORT=${BASE_PORT:-$(free_base_port 7600 200 9800 "$NODES" 100)} || die "no free base port found"
start_strata
STRATA=("$BIN/strata")
DATA=(--data-dir "$STRATA_DATA")

# The table of each configuration: NAME -> `strata table create` flags.
table_flags() {
    case $1 in
        sync) echo "--durability sync --reads leader" ;;
        async) echo "--durability async --replication $REPLICATION --reads leader" ;;
        cad) echo "--durability cad --replication $REPLICATION --reads leader" ;;
        orca) echo "--durability cad --replication $REPLICATION --reads active-set" ;;
        *) die "unknown configuration $1 (sync, async, cad, orca)" ;;
    esac
}
for cfg in $CONFIGS; do
    # shellcheck disable=SC2046
    "${STRATA[@]}" table create "l-$cfg" --engine log $(table_flags "$cfg") "${DATA[@]}" >>"$RESULTS/tables.log" 2>&1 ||
        { cat "$RESULTS/tables.log" >&2; die "cannot create table l-$cfg"; }
done
# Every shard needs a leader before the first run.
for _ in $(seq 100); do
    leaders=$("${STRATA[@]}" status --json "${DATA[@]}" | python3 -c 'import json,sys; print(sum(1 for n in json.load(sys.stdin) for s in n.get("shards",[]) if s.get("role")=="leader"))' 2>/dev/null || echo 0)
    [ "$leaders" -ge "$(wc -w <<<"$CONFIGS")" ] && break
    sleep 0.2
done

{
    describe_machine
    echo "data: $(df -h "$WORK" | tail -1 | awk '{print $1, $6}') (fsync on this device)"
    echo "settings: clients=$CLIENTS sessions=$SESSIONS (pipeline 1) keys=$KEYS key_size=$KEY_SIZE value_size=$VALUE_SIZE duration=${DURATION}s warmup=${WARMUP}s runs=$RUNS workloads=[$WORKLOADS] configs=[$CONFIGS] replication=$REPLICATION nodes=$NODES"
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
            "$BIN/strata" bench --endpoints "$ENDPOINTS" --table "l-$cfg" --ycsb "$w" --clients "$CLIENTS" \
                --sessions "$SESSIONS" --pipeline 1 --keys "$KEYS" --key-size "$KEY_SIZE" --value-size "$VALUE_SIZE" \
                --duration "$DURATION" --warmup "$WARMUP" --seed "$run" --quiet --label "$name" \
                --json "$RESULTS/$name.json" >"$RESULTS/$name.txt" 2>&1 || { cat "$RESULTS/$name.txt" >&2; die "$name failed"; }
        done
    done
done
"${STRATA[@]}" status --json "${DATA[@]}" >"$RESULTS/status-after.json" 2>/dev/null || true

python3 - "$RESULTS" "$CONFIGS" "$WORKLOADS" <<'EOF' | tee "$RESULTS/summary.md"
import json, glob, os, statistics, sys
results, configs, workloads = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def cell(cfg, w):
    runs = [json.load(open(f)) for f in glob.glob(os.path.join(results, f"{cfg}-{w}-r*.json"))]
    if not runs:
        return None
    return {
        "ops": statistics.median(r["throughput_ops_s"] for r in runs),
        "p50": statistics.median(r["latency_us"]["all"]["p50_us"] for r in runs),
        "p99": statistics.median(r["latency_us"]["all"]["p99_us"] for r in runs),
        "errors": sum(r["errors"] for r in runs),
        "n": len(runs),
    }
cells = {(c, w): cell(c, w) for c in configs for w in workloads}
n = max((v["n"] for v in cells.values() if v), default=0)
print(f"YCSB against log tables: ops/s, median of {n} runs; p50 / p99 latency in µs.\n")
print("| workload | " + " | ".join(configs) + " | " + " | ".join(f"cad/{c}" for c in configs if c != "cad") + " | errors |")
print("|---|" + "---:|" * (2 * len(configs)) + "")
for w in workloads:
    row = [f"{cells[(c, w)]['ops']:,.0f}" if cells[(c, w)] else "-" for c in configs]
    cad = cells.get(("cad", w))
    ratios = [f"{cad['ops'] / cells[(c, w)]['ops']:.2f}" if cad and cells[(c, w)] else "-" for c in configs if c != "cad"]
    errors = sum(cells[(c, w)]["errors"] for c in configs if cells[(c, w)])
    print(f"| {w} | " + " | ".join(row) + " | " + " | ".join(ratios) + f" | {errors} |")
print("\n| workload | " + " | ".join(f"{c} p50 / p99" for c in configs) + " |")
print("|---|" + "---:|" * len(configs))
for w in workloads:
    print(f"| {w} | " + " | ".join(f"{cells[(c, w)]['p50']:.0f} / {cells[(c, w)]['p99']:.0f}" if cells[(c, w)] else "-" for c in configs) + " |")
EOF
log "results in $RESULTS"
