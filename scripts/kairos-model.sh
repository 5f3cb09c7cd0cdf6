#!/usr/bin/env bash
# Kairos's lease model against its Monte Carlo simulation (issue #19 item 7, Fig. 5; kairos.md
# §5.11–5.13): `strata txn lease-model --sweep` evaluates Equation 5 and simulates N reads
# for leases of R to 20 R, and the chart draws both. No cluster: the model and the simulator
# are pure functions (crates/kairos).
#
#   scripts/kairos-model.sh                      # R 1 ms, W 19 ms (the paper's Fig. 5), N 2M, ~1 minute
#   R_MS=0.5 W_MS=10 N=200000 scripts/kairos-model.sh
#
# Knobs (environment): R_MS (1), W_MS (19), N (2000000 reads per lease), SEED (1), RESULTS,
# CARGO_TARGET_DIR. Prints the ideal lease, the largest model–simulation difference, and draws
# $RESULTS/kairos-model.png. See docs/benchmarks.md, "Kairos: the lease model".
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

R_MS=${R_MS:-1}
W_MS=${W_MS:-19}
N=${N:-2000000}
SEED=${SEED:-1}
RESULTS=${RESULTS:-${CARGO_TARGET_DIR:-$ROOT/target}/bench-results/kairos-model-$(date +%Y%m%d-%H%M%S)}

TAG=kairos-model
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"
mkdir -p "$RESULTS"

log "building release binaries"
cargo build --release -q -p strata
cargo build --release -q -p strata-bench --bin strata-plot
"$BIN/strata" txn lease-model --r-ms "$R_MS" --w-ms "$W_MS" >"$RESULTS/ideal.txt"
head -1 "$RESULTS/ideal.txt"
log "sweeping leases of R to 20 R, $N simulated reads each"
"$BIN/strata" txn lease-model --r-ms "$R_MS" --w-ms "$W_MS" --sweep --monte-carlo "$N" --seed "$SEED" \
    >"$RESULTS/sweep.csv"
python3 - "$RESULTS/sweep.csv" <<'PY' | tee "$RESULTS/summary.md"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
worst = max(rows, key=lambda r: abs(float(r["model_fresh"]) - float(r["mc_fresh"])))
gap = lambda r, k: abs(float(r[f"model_{k}"]) - float(r[f"mc_{k}"]))
print(f"{len(rows)} leases; largest |model - Monte Carlo|: fresh {max(gap(r, 'fresh') for r in rows):.4f} "
      f"(at d = {worst['d_ms']} ms), stale {max(gap(r, 'stale') for r in rows):.4f}, "
      f"miss {max(gap(r, 'miss') for r in rows):.4f}")
PY
plot_chart kairos-model "$RESULTS/kairos-model.png" "$RESULTS/sweep.csv" "$R_MS" "$W_MS"
log "results in $RESULTS"
