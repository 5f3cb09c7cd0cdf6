#!/usr/bin/env bash
# Kairos evaluation (issue #19 item 7; kairos.md §8.3 P1–P3): `strata bench --workload kairos`
# (kairos.md §8.1's social-network YCSB variant) against the §1.3 configurations, on 3 local
# nodes with a service-rate limit per shard leader (so the shard holding the hot keys
# saturates as on its own machine), 0.5 ms one way between the clients and every node and
# between the nodes.
#
#   Baseline  a 5-shard Kairos table, validation in the shards (server-side), no client cache
#   CV only   a 5-shard Kairos table with `--validation sharded:5`, no cache
#   Naive     server-side validation, naive cache (no lease, §5.14.1)
#   EI        server-side validation, explicit invalidation (§5.14.2)
#   Ideal     server-side validation, leases from Algorithm 1 (§5.12)
#   Kairos    sharded validation and Algorithm 1 leases
#
# Figures: 8 (throughput vs read-only %), 9a (vs read skew), 11 (EI vs ideal leases as clients
# grow at a fixed offered load: `--offered-rate`, each session paced), 13 (static leases
# StaticP(x) and Mean vs ideal). A configuration this build cannot run (no client cache, no
# sharded validators) is left out and said so.
#
#   scripts/bench-kairos.sh                          # every figure, ~20 minutes on 2 cores
#   RUNS=1 DURATION=1 FIGS=8 scripts/bench-kairos.sh # a quick look
#
# Knobs (environment): RUNS (3), DURATION (2 s), WARMUP (1 s), FIGS ("8 13 9a 11"), CONFIGS
# ("baseline cv naive ei ideal kairos"), CLIENTS (10), SESSIONS (4 per client), KEYS (200000),
# VALUE_SIZE (100), RATE_LIMIT (shard-rate-limit, requests/s per shard leader; 300),
# CLIENT_DELAY_MS (0.5), PEER_DELAY_MS (0.5), RO_PCTS ("50 70 90 99"), READ_ZIPFS ("0.8 0.9
# 0.99 1.1 1.2"), STATICS ("0.1 0.2 0.3 0.4"), FIG11_CLIENTS ("10 15 20 25 30"), FIG11_RATE
# (offered txn/s in all, 200: about what EI and Ideal serve at 10 clients), RESULTS, CARGO_TARGET_DIR; QUIET_* (scripts/bench-lib.sh). Prints
# markdown tables (also in $RESULTS/summary.md) and draws $RESULTS/kairos-fig*.png (copy them
# to docs/). See docs/benchmarks.md.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

RUNS=${RUNS:-3}
DURATION=${DURATION:-2}
WARMUP=${WARMUP:-1}
FIGS=${FIGS:-"8 13 9a 11"}
CONFIGS=${CONFIGS:-"baseline cv naive ei ideal kairos"}
CLIENTS=${CLIENTS:-10}
SESSIONS=${SESSIONS:-4}
KEYS=${KEYS:-200000}
VALUE_SIZE=${VALUE_SIZE:-100}
RATE_LIMIT=${RATE_LIMIT:-300}
CLIENT_DELAY_MS=${CLIENT_DELAY_MS:-0.5}
PEER_DELAY_MS=${PEER_DELAY_MS:-0.5}
RO_PCTS=${RO_PCTS:-"50 70 90 99"}
READ_ZIPFS=${READ_ZIPFS:-"0.8 0.9 0.99 1.1 1.2"}
STATICS=${STATICS:-"0.1 0.2 0.3 0.4"}
FIG11_CLIENTS=${FIG11_CLIENTS:-"10 15 20 25 30"}
FIG11_RATE=${FIG11_RATE:-200}
QUIET_WAIT=${QUIET_WAIT:-2}
RESULTS=${RESULTS:-${CARGO_TARGET_DIR:-$ROOT/target}/bench-results/kairos-$(date +%Y%m%d-%H%M%S)}
NODES=3

TAG=bench-kairos
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"
mkdir -p "$RESULTS"

build_strata
describe_machine | tee "$RESULTS/machine.txt" >&2
STRATA_UP_FLAGS="--shard-rate-limit $RATE_LIMIT" start_strata

# ---- 0.5 ms one way between the nodes (their fault layer; the clients' side is the bench's) ----
for i in $(seq 0 $((NODES - 1))); do
    strata_cli fault --node "$i" --delay-ms "$PEER_DELAY_MS" >>"$RESULTS/faults.log" 2>&1 ||
        { cat "$RESULTS/faults.log" >&2; die "cannot delay node $i's links"; }
done

# ---- the tables: server-side validation, and sharded validators if this build has them -------
strata_cli table create srv --txn kairos --shards 5 >>"$RESULTS/tables.log" 2>&1 ||
    { cat "$RESULTS/tables.log" >&2; die "cannot create table srv"; }
TABLES=srv
if strata_cli table create cv --txn kairos --shards 5 --validation sharded:5 >>"$RESULTS/tables.log" 2>&1; then
    TABLES="srv cv"
else
    log "this build has no sharded validators (see $RESULTS/tables.log): no CV-only or Kairos runs"
    CONFIGS=$(tr ' ' '\n' <<<"$CONFIGS" | grep -vx -e cv -e kairos | tr '\n' ' ')
fi
# shellcheck disable=SC2086 # the table names are words
wait_for 30 tables_led $TABLES || die "not every table of [$TABLES] has a leader"

common=(--workload kairos --endpoints "$ENDPOINTS" --client-delay-ms "$CLIENT_DELAY_MS" --keys "$KEYS"
    --value-size "$VALUE_SIZE" --quiet)
# Every key written once per table (not measured; its report is preload-TABLE.json).
for t in $TABLES; do
    log "preloading $KEYS keys into $t"
    bench_run "preload-$t" "${common[@]}" --table "$t" --clients "$CLIENTS" --sessions 1 --duration 0.5 --warmup 0
done

# The table and cache flags of configuration $1.
config_flags() {
    case $1 in
        baseline) echo "--table srv --cache none" ;;
        cv) echo "--table cv --cache none" ;;
        naive) echo "--table srv --cache naive" ;;
        ei) echo "--table srv --cache ei" ;;
        ideal) echo "--table srv --cache ideal" ;;
        kairos) echo "--table cv --cache ideal" ;;
        static:* | mean) echo "--table srv --cache $1" ;;
        *) die "unknown configuration $1" ;;
    esac
}

# Whether this build's client library has the cache: a tiny run with a lease policy.
if ! "$BIN/strata" bench "${common[@]}" --table srv --cache ideal --skip-preload --clients 1 --sessions 1 \
    --duration 0.2 --warmup 0 >"$RESULTS/cache-probe.txt" 2>&1; then
    log "this build's client library has no Kairos cache (see $RESULTS/cache-probe.txt): no cached configurations"
    CONFIGS=$(tr ' ' '\n' <<<"$CONFIGS" | grep -vx -e naive -e ei -e ideal -e kairos | tr '\n' ' ')
    STATICS="" FIGS=$(tr ' ' '\n' <<<"$FIGS" | grep -vx -e 11 -e 13 | tr '\n' ' ')
fi
echo "settings: runs=$RUNS duration=${DURATION}s warmup=${WARMUP}s figs=[$FIGS] configs=[$CONFIGS] clients=$CLIENTS sessions=$SESSIONS keys=$KEYS value=${VALUE_SIZE}B shard-rate-limit=${RATE_LIMIT}/s client-delay=${CLIENT_DELAY_MS}ms peer-delay=${PEER_DELAY_MS}ms fig11-rate=$FIG11_RATE" |
    tee -a "$RESULTS/machine.txt" >&2

# One measured point: `point NAME CONFIG FLAGS...`, RUNS runs named NAME-rN. Beside each report,
# NAME-rN.cpu.json: the nodes' CPU seconds and the whole machine's (every process, the load
# generator and anything else running included) over the invocation, to tell a saturated
# machine from a saturated rate limit.
point() {
    local name=$1 cfg=$2 run s0 m0 t0
    shift 2
    for run in $(seq 1 "$RUNS"); do
        wait_quiet
        log "run $run: $name"
        s0=$(cpu_seconds "${STRATA_PIDS[@]}") m0=$(machine_busy_seconds) t0=$(date +%s%N)
        # shellcheck disable=SC2046 # the flags are words
        bench_run "$name-r$run" "${common[@]}" $(config_flags "$cfg") --skip-preload --clients "$CLIENTS" \
            --sessions "$SESSIONS" --duration "$DURATION" --warmup "$WARMUP" --seed "$run" "$@"
        awk -v s0="$s0" -v s1="$(cpu_seconds "${STRATA_PIDS[@]}")" -v m0="$m0" -v m1="$(machine_busy_seconds)" \
            -v ns="$(($(date +%s%N) - t0))" 'BEGIN {
                printf "{\"wall_s\": %.3f, \"server_cpu_s\": %.2f, \"machine_cpu_s\": %.2f}\n", ns / 1e9, s1 - s0, m1 - m0
            }' >"$RESULTS/$name-r$run.cpu.json"
    done
}

for fig in $FIGS; do
    case $fig in
        8) for ro in $RO_PCTS; do for c in $CONFIGS; do point "f8-$c-ro$ro" "$c" --ro-pct "$ro"; done; done ;;
        # The default skew (0.99, 90 % read-only) is Fig. 8's point at 90 %.
        9a) for z in $READ_ZIPFS; do
            for c in $CONFIGS; do
                [ "$z" = 0.99 ] && [[ " $FIGS " == *" 8 "* ]] && [[ " $RO_PCTS " == *" 90 "* ]] && continue
                point "f9-$c-z$z" "$c" --read-zipf "$z"
            done
        done ;;
        11) for n in $FIG11_CLIENTS; do
            for c in ei ideal; do
                CLIENTS=$n point "f11-$c-c$n" "$c" --offered-rate "$FIG11_RATE"
            done
        done ;;
        # Ideal leases at the defaults are Fig. 8's point at 90 %.
        13) for s in $STATICS; do point "f13-static$s" "static:$s"; done
            point "f13-mean" mean
            [[ " $FIGS " == *" 8 "* ]] && [[ " $RO_PCTS " == *" 90 "* ]] && [[ " $CONFIGS " == *" ideal "* ]] ||
                point "f8-ideal-ro90" ideal ;;
        *) die "unknown figure $fig (8, 9a, 11, 13)" ;;
    esac
done
stop_strata

args=("$RESULTS" "$RUNS" "$CONFIGS" "$RO_PCTS" "$READ_ZIPFS" "$STATICS" "$FIG11_CLIENTS" "$FIGS")
summarize kairos "${args[@]}"
for fig in $FIGS; do
    plot_chart "kairos-fig$fig" "$RESULTS/kairos-fig$fig.png" "${args[@]}"
done
log "results in $RESULTS"
