//! The Monte Carlo simulator that checks the model (kairos.md §5.13, the paper's Fig. 5).
//!
//! One key, one client: reads arrive as a Poisson process of mean gap `R`, writes as one of
//! mean gap `W`; a read inside the lease is a hit — stale if a write came after the fetch —
//! and any other read is a miss that fetches and starts a lease of `d`. Exactly the spec's
//! pseudocode, with every draw from a `strata_core::Prng` seeded by the caller: a seed
//! reproduces a run bit for bit.
//!
//! For Poisson arrivals the model of §5.11 is exact (renewal-reward: a lease cycle is one miss
//! plus `d/R` expected hits, of which `E[min(X, d)]/R` are fresh), so the two agree to
//! sampling error: at `N = 2,000,000` the largest difference over the 132 `(R, W, d)` points
//! of `tests/model_vs_monte_carlo.rs` is 0.27 % absolute (the spec allows 2 %).

use strata_core::Prng;

use super::model::{HitRates, ModelError};

/// What a run counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MonteCarloResult {
    pub reads: u64,
    pub fresh: u64,
    pub stale: u64,
    pub miss: u64,
}

impl MonteCarloResult {
    /// The fractions of all reads, comparable with [`super::LeaseModel::rates`].
    pub fn rates(&self) -> HitRates {
        let n = self.reads.max(1) as f64;
        HitRates {
            fresh: self.fresh as f64 / n,
            stale: self.stale as f64 / n,
            miss: self.miss as f64 / n,
        }
    }
}

/// Runs `reads` reads of one key with mean read gap `r_s`, mean write gap `w_s` (`None` or
/// infinite: never written) and lease `d_s` (infinite: never expires), all in seconds, with
/// every random draw from `Prng::new(seed)`.
pub fn simulate(
    r_s: f64,
    w_s: Option<f64>,
    d_s: f64,
    reads: u64,
    seed: u64,
) -> Result<MonteCarloResult, ModelError> {
    if !(r_s > 0.0 && r_s.is_finite()) {
        return Err(ModelError::ReadGap(r_s));
    }
    let w_s = match w_s {
        None => f64::INFINITY,
        Some(w) if w > 0.0 => w,
        Some(w) => return Err(ModelError::WriteGap(w)),
    };
    if d_s.is_nan() || d_s < 0.0 {
        return Err(ModelError::Lease(d_s));
    }
    let mut prng = Prng::new(seed);
    let mut result = MonteCarloResult { reads, fresh: 0, stale: 0, miss: 0 };
    // kairos.md §5.13, line by line.
    let mut t = 0.0;
    let mut next_write = exp(&mut prng, w_s);
    let mut last_write = f64::NEG_INFINITY;
    let mut cached = false;
    let mut fetch_time = 0.0;
    let mut lease_end = f64::NEG_INFINITY;
    for _ in 0..reads {
        t += exp(&mut prng, r_s); // next read
        while next_write <= t {
            last_write = next_write;
            next_write += exp(&mut prng, w_s);
        }
        if cached && t <= lease_end {
            if last_write > fetch_time {
                result.stale += 1;
            } else {
                result.fresh += 1;
            }
        } else {
            result.miss += 1;
            cached = true;
            fetch_time = t;
            lease_end = t + d_s;
        }
    }
    Ok(result)
}

/// A draw from the exponential distribution of mean `mean` (infinite: never), by inversion.
fn exp(prng: &mut Prng, mean: f64) -> f64 {
    if mean.is_infinite() {
        return f64::INFINITY;
    }
    // unit() is in [0, 1): 1 - u is in (0, 1], so the logarithm is finite.
    -mean * (1.0 - prng.unit()).ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_reproduces_a_run_and_another_seed_differs() {
        let run = |seed| simulate(1e-3, Some(19e-3), 6e-3, 20_000, seed).unwrap();
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
        let r = run(7);
        assert_eq!(r.fresh + r.stale + r.miss, 20_000);
    }

    #[test]
    fn the_edges_count_what_they_should() {
        // A zero lease: every read misses (the next read comes strictly later, almost surely).
        let r = simulate(1e-3, Some(19e-3), 0.0, 10_000, 1).unwrap();
        assert_eq!((r.fresh, r.stale, r.miss), (0, 0, 10_000));
        // Never written: no stale hit, ever.
        let r = simulate(1e-3, None, 6e-3, 10_000, 1).unwrap();
        assert_eq!(r.stale, 0);
        assert!(r.fresh > 0);
        // A lease that never expires: one miss, then hits (stale after the first write).
        let r = simulate(1e-3, Some(19e-3), f64::INFINITY, 10_000, 1).unwrap();
        assert_eq!(r.miss, 1);
        assert!(r.stale > 9_900, "{r:?}");
    }

    #[test]
    fn bad_parameters_are_refused() {
        assert_eq!(simulate(0.0, None, 1.0, 1, 1), Err(ModelError::ReadGap(0.0)));
        assert_eq!(simulate(1.0, Some(-1.0), 1.0, 1, 1), Err(ModelError::WriteGap(-1.0)));
        assert!(matches!(simulate(1.0, None, f64::NAN, 1, 1), Err(ModelError::Lease(_))));
        assert_eq!(simulate(1.0, None, -1.0, 1, 1), Err(ModelError::Lease(-1.0)));
    }
}
