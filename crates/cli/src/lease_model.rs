//! `strata txn lease-model`: Kairos's lease model for one key (kairos.md §5.11 – §5.13), with
//! no cluster: the ideal lease Algorithm 1 picks for a mean read gap `R` and a mean write gap
//! `W`, its hits per lease and fresh-hit rate, and the fresh / stale / miss rates of leases
//! around it — optionally beside the Monte Carlo simulator's (`--monte-carlo N`). `--sweep`
//! prints the data of the paper's Fig. 5 as CSV: model and simulation for `d = R, 2R, ..., 20R`.

use std::fmt::Write as _;

use strata_kairos::{
    find_ideal_lease_duration, monte_carlo, HitRates, IdealLease, LeaseLimits, LeaseModel,
};

use crate::exit::{Failure, OK, USAGE};

/// Reads per lease that `--sweep` simulates unless `--monte-carlo` says otherwise (kairos.md §7
/// inv. 9's N).
const SWEEP_READS: u64 = 2_000_000;
/// `--sweep` covers `d = R, 2R, ..., SWEEP_MAX_K * R`.
const SWEEP_MAX_K: u32 = 20;

// A heading of their own: the cluster flags of `strata txn` are global, so they are listed
// (and accepted, unused) here too.
#[derive(clap::Args, Debug)]
#[command(next_help_heading = "Lease model")]
pub struct LeaseModelArgs {
    /// Mean time between one client's reads of the key (R), in milliseconds.
    #[arg(long, value_name = "MS", allow_negative_numbers = true, value_parser = read_gap_ms)]
    pub r_ms: f64,
    /// Mean time between committed writes of the key by all clients (W), in milliseconds;
    /// `inf` for a key that is never written.
    #[arg(long, value_name = "MS", allow_negative_numbers = true, value_parser = write_gap_ms)]
    pub w_ms: f64,
    /// Also run the Monte Carlo simulator (kairos.md §5.13) with N reads at each lease and
    /// print its fractions beside the model's.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub monte_carlo: Option<u64>,
    /// Seed of the simulation (every lease is simulated from it: common random numbers).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print CSV for Fig. 5: model and simulation (2,000,000 reads per lease unless
    /// --monte-carlo) at d = R, 2R, ..., 20R.
    #[arg(long, conflicts_with = "json")]
    pub sweep: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

fn read_gap_ms(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x > 0.0 && x.is_finite() => Ok(x),
        _ => Err("R must be a positive, finite number of milliseconds".into()),
    }
}

fn write_gap_ms(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x > 0.0 => Ok(x),
        _ => Err("W must be a positive number of milliseconds (or inf: never written)".into()),
    }
}

/// One lease's rates, and the simulator's if it ran.
struct Row {
    hits_per_lease: u32,
    d_s: f64,
    model: HitRates,
    simulated: Option<HitRates>,
}

pub fn run(args: LeaseModelArgs) -> Result<i32, Failure> {
    let w_s = args.w_ms.is_finite().then_some(args.w_ms / 1e3);
    let model =
        LeaseModel::new(args.r_ms / 1e3, w_s).map_err(|e| Failure::new(USAGE, e.to_string()))?;
    let limits = LeaseLimits::default();
    let ideal = find_ideal_lease_duration(&model, &limits);
    let (ks, reads) = if args.sweep {
        ((1..=SWEEP_MAX_K).collect(), Some(args.monte_carlo.unwrap_or(SWEEP_READS)))
    } else {
        (around(ideal.hits_per_lease), args.monte_carlo)
    };
    let rows = ks
        .into_iter()
        .map(|k| row(&model, k, reads, args.seed))
        .collect::<Result<Vec<_>, Failure>>()?;
    let out = if args.sweep {
        csv(&rows)
    } else if args.json {
        json(&args, &limits, &ideal, &rows, reads)
    } else {
        text(&args, &limits, &ideal, &rows, reads)
    };
    print!("{out}");
    Ok(OK)
}

/// Hits per lease to show around the ideal `k`: 1, a quarter, half, three quarters, `k`, one
/// and a half, twice and three times it.
fn around(k: u32) -> Vec<u32> {
    let mut ks: Vec<u32> = [0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0]
        .iter()
        .map(|f| ((f64::from(k) * f).round() as u32).max(1))
        .collect();
    ks.dedup();
    ks
}

fn row(model: &LeaseModel, k: u32, reads: Option<u64>, seed: u64) -> Result<Row, Failure> {
    let d_s = f64::from(k) * model.r_s();
    let simulated = match reads {
        None => None,
        Some(n) => Some(
            monte_carlo::simulate(model.r_s(), model.w_s(), d_s, n, seed)
                .map_err(|e| Failure::new(USAGE, e.to_string()))?
                .rates(),
        ),
    };
    Ok(Row { hits_per_lease: k, d_s, model: model.rates(d_s), simulated })
}

/// Milliseconds with up to 4 decimals, trailing zeros dropped: 6, 7.04, 52.5.
fn ms(s: f64) -> String {
    if s.is_infinite() {
        return "inf".into();
    }
    let text = format!("{:.4}", s * 1e3);
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn text(
    args: &LeaseModelArgs,
    limits: &LeaseLimits,
    ideal: &IdealLease,
    rows: &[Row],
    reads: Option<u64>,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "R {} ms, W {} ms: ideal lease {} ms, {} hits per lease, fresh-hit rate {:.4}",
        ms(args.r_ms / 1e3),
        ms(args.w_ms / 1e3),
        ms(ideal.d_s),
        ideal.hits_per_lease,
        ideal.fresh_hit_rate
    );
    if ideal.d_s > limits.max_lease.as_secs_f64() {
        let _ = writeln!(out, "(a client caps it at {} ms)", ms(limits.max_lease.as_secs_f64()));
    }
    out.push('\n');
    let _ = write!(
        out,
        "{:>10}  {:>5}  {:>6}  {:>6}  {:>6}",
        "d (ms)", "hits", "fresh", "stale", "miss"
    );
    if reads.is_some() {
        let _ = write!(out, "  {:>9}  {:>9}  {:>9}", "sim fresh", "sim stale", "sim miss");
    }
    out.push('\n');
    let mut largest: f64 = 0.0;
    for r in rows {
        let _ = write!(
            out,
            "{:>10}  {:>5}  {:.4}  {:.4}  {:.4}",
            ms(r.d_s),
            r.hits_per_lease,
            r.model.fresh,
            r.model.stale,
            r.model.miss
        );
        if let Some(s) = r.simulated {
            let _ = write!(out, "  {:>9.4}  {:>9.4}  {:>9.4}", s.fresh, s.stale, s.miss);
            largest = largest.max(difference(&r.model, &s));
        }
        if r.hits_per_lease == ideal.hits_per_lease {
            out.push_str("  <- ideal");
        }
        out.push('\n');
    }
    if let Some(n) = reads {
        let _ = writeln!(
            out,
            "\nsimulated {n} reads per lease (seed {}); largest |model - simulated|: {largest:.4}",
            args.seed
        );
    }
    out
}

/// The largest of the fresh, stale and miss differences.
fn difference(a: &HitRates, b: &HitRates) -> f64 {
    (a.fresh - b.fresh).abs().max((a.stale - b.stale).abs()).max((a.miss - b.miss).abs())
}

fn json(
    args: &LeaseModelArgs,
    limits: &LeaseLimits,
    ideal: &IdealLease,
    rows: &[Row],
    reads: Option<u64>,
) -> String {
    let rates =
        |h: &HitRates| serde_json::json!({"fresh": h.fresh, "stale": h.stale, "miss": h.miss});
    let rows: Vec<_> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "lease_ms": r.d_s * 1e3,
                "hits_per_lease": r.hits_per_lease,
                "model": rates(&r.model),
                "monte_carlo": r.simulated.as_ref().map(rates),
            })
        })
        .collect();
    let value = serde_json::json!({
        "r_ms": args.r_ms,
        // JSON has no infinity: null is "never written".
        "w_ms": args.w_ms.is_finite().then_some(args.w_ms),
        "ideal": {
            "lease_ms": ideal.d_s * 1e3,
            "hits_per_lease": ideal.hits_per_lease,
            "fresh_hit_rate": ideal.fresh_hit_rate,
            "max_lease_ms": limits.max_lease.as_secs_f64() * 1e3,
        },
        "monte_carlo": reads.map(|n| serde_json::json!({"reads_per_lease": n, "seed": args.seed})),
        "rows": rows,
    });
    format!("{}\n", serde_json::to_string_pretty(&value).expect("JSON values serialize"))
}

fn csv(rows: &[Row]) -> String {
    let mut out = String::from(
        "d_ms,hits_per_lease,model_fresh,model_stale,model_miss,mc_fresh,mc_stale,mc_miss\n",
    );
    for r in rows {
        let s = r.simulated.expect("a sweep simulates every lease");
        let _ = writeln!(
            out,
            "{},{},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6}",
            ms(r.d_s),
            r.hits_per_lease,
            r.model.fresh,
            r.model.stale,
            r.model.miss,
            s.fresh,
            s.stale,
            s.miss
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_brackets_the_ideal_lease() {
        assert_eq!(around(6), vec![1, 2, 3, 5, 6, 9, 12, 18]);
        assert_eq!(around(1), vec![1, 2, 3]);
        assert_eq!(around(105), vec![1, 26, 53, 79, 105, 158, 210, 315]);
    }

    #[test]
    fn milliseconds_print_without_trailing_zeros() {
        assert_eq!(ms(0.006), "6");
        assert_eq!(ms(44.0 * 0.160e-3), "7.04");
        assert_eq!(ms(0.0525), "52.5");
        assert_eq!(ms(f64::INFINITY), "inf");
    }

    #[test]
    fn gaps_must_be_positive() {
        for bad in ["0", "-1", "nan", "x", "inf"] {
            assert!(read_gap_ms(bad).is_err(), "R {bad}");
        }
        for bad in ["0", "-1", "nan", "x"] {
            assert!(write_gap_ms(bad).is_err(), "W {bad}");
        }
        assert_eq!((read_gap_ms("0.5"), write_gap_ms("inf")), (Ok(0.5), Ok(f64::INFINITY)));
    }
}
