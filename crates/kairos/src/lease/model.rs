//! The fresh-hit-rate model (kairos.md §5.11, the paper's Equations 1–5).
//!
//! Reads of a key at one client are a Poisson process with mean gap `R`; writes of the key by
//! all clients a Poisson process of rate `lambda = 1 / W`. A lease of length `d` starts at a
//! miss, with a fresh value; `X ~ Exponential(lambda)` is the time from the fetch to the next
//! write. Every quantity is per read, counting the miss that starts each lease, in seconds.
//!
//! Numerics: `1 - exp(-x)` is `-expm1(-x)`, and Equation 4 is evaluated as
//! `d_fresh = d * (1/x - 1/expm1(x))` with `x = lambda * d` (the same function), by its
//! Taylor series `1/2 - x/12 + x^3/720 - x^5/30240` below `x = 1e-2`. That is the spec's "for
//! `lambda*d < 1e-6` use the limits (`d_fresh -> d/2`)", with the first terms past the limit
//! and a threshold where the direct form has lost no more than ~1e-13 to cancellation.
//! `lambda = 0` (a key never written, `W` infinite) and an infinite `d` (a lease that never
//! expires) are exact limits, not NaNs.

/// Below this `x = lambda * d`, `d_fresh / d` comes from its series (see the module doc).
const SERIES_BELOW_X: f64 = 1e-2;

/// A parameter the model cannot take. Fix the input; nothing else will help.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// `R` must be a positive, finite number of seconds.
    #[error("the mean read gap R must be positive and finite, not {0} s")]
    ReadGap(f64),
    /// `W` must be positive; infinite (or unknown) means the key is never written.
    #[error("the mean write gap W must be positive (or infinite: never written), not {0} s")]
    WriteGap(f64),
    /// A lease is zero or more seconds (infinite: it never expires).
    #[error("a lease must be zero or more seconds, not {0} s")]
    Lease(f64),
}

/// The fresh, stale and miss fractions of all reads under one lease (they sum to 1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HitRates {
    /// Reads served from the cache with the latest committed value.
    pub fresh: f64,
    /// Reads served from the cache after a newer write committed (they will abort at
    /// validation: §5.15).
    pub stale: f64,
    /// Reads that went to the server (each starts a lease).
    pub miss: f64,
}

impl HitRates {
    /// Every read served from the cache, fresh or stale.
    pub fn total_hit(&self) -> f64 {
        self.fresh + self.stale
    }
}

/// One key's access pattern at one client: `R` and `lambda = 1/W`, in seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LeaseModel {
    r_s: f64,
    lambda_per_s: f64,
}

impl LeaseModel {
    /// The model of mean read gap `r_s` and mean write gap `w_s` (`None` or infinite: the key
    /// is never written, `lambda = 0`).
    pub fn new(r_s: f64, w_s: Option<f64>) -> Result<LeaseModel, ModelError> {
        if !(r_s > 0.0 && r_s.is_finite()) {
            return Err(ModelError::ReadGap(r_s));
        }
        let lambda_per_s = match w_s {
            None => 0.0,
            Some(w) if w > 0.0 => 1.0 / w, // infinite W: lambda 0
            Some(w) => return Err(ModelError::WriteGap(w)),
        };
        Ok(LeaseModel { r_s, lambda_per_s })
    }

    /// Mean gap between reads, `R`.
    pub fn r_s(&self) -> f64 {
        self.r_s
    }

    /// Write rate, `lambda = 1/W` (0: never written).
    pub fn lambda_per_s(&self) -> f64 {
        self.lambda_per_s
    }

    /// Mean gap between writes, `W`; `None` when the key is never written.
    pub fn w_s(&self) -> Option<f64> {
        (self.lambda_per_s > 0.0).then(|| 1.0 / self.lambda_per_s)
    }

    /// Equation 1: expected hits during one lease, `d / R`.
    pub fn expected_hits(&self, d_s: f64) -> f64 {
        check_lease(d_s);
        d_s / self.r_s
    }

    /// Equation 2: probability that no write arrives during the lease, `exp(-lambda d)`.
    pub fn p_no_write(&self, d_s: f64) -> f64 {
        check_lease(d_s);
        if self.lambda_per_s == 0.0 {
            return 1.0; // also for an infinite lease: 0 * inf is not a probability
        }
        (-self.lambda_per_s * d_s).exp()
    }

    /// Equation 3: probability that a write arrives during the lease ("stale lease period"),
    /// `1 - exp(-lambda d)`.
    pub fn p_write(&self, d_s: f64) -> f64 {
        check_lease(d_s);
        if self.lambda_per_s == 0.0 {
            return 0.0;
        }
        -(-self.lambda_per_s * d_s).exp_m1()
    }

    /// Equation 4: `d_fresh = E[X | X < d]
    /// = (1 - (lambda d + 1) exp(-lambda d)) / (lambda (1 - exp(-lambda d)))`, the expected
    /// fresh part of a lease in which a write arrives. `d/2` as `lambda d -> 0`; `W` for an
    /// infinite lease.
    pub fn d_fresh(&self, d_s: f64) -> f64 {
        check_lease(d_s);
        if d_s.is_infinite() {
            // E[X] = W; a key never written has no stale period (d_fresh is then unused).
            return if self.lambda_per_s > 0.0 { 1.0 / self.lambda_per_s } else { d_s };
        }
        d_s * fresh_fraction_of_stale_period(self.lambda_per_s * d_s)
    }

    /// `HitRate(y) = E[Hits(y)] / (E[Hits(d)] + 1) = (y / R) / (d / R + 1)` (Equation 5): the
    /// hits of `y` seconds of a lease of `d`, per read.
    pub fn hit_rate(&self, y_s: f64, d_s: f64) -> f64 {
        check_lease(d_s);
        (y_s / self.r_s) / (d_s / self.r_s + 1.0)
    }

    /// Equation 5 as written: `P(X > d) HitRate(d) + P(X <= d) HitRate(d_fresh)`, for a finite
    /// lease. [`LeaseModel::fresh_hit_rate`] is the same function in closed form.
    pub fn fresh_hit_rate_eq5(&self, d_s: f64) -> f64 {
        assert!(d_s.is_finite(), "Equation 5 is written for a finite lease, not {d_s} s");
        self.p_no_write(d_s) * self.hit_rate(d_s, d_s)
            + self.p_write(d_s) * self.hit_rate(self.d_fresh(d_s), d_s)
    }

    /// The fresh-hit rate in closed form, `(1 - exp(-d/W)) W / (d + R)`; `d / (d + R)` when
    /// `W` is infinite. (Equation 5 summed: the expected fresh time of a lease is
    /// `E[min(X, d)] = (1 - exp(-lambda d)) / lambda`.)
    pub fn fresh_hit_rate(&self, d_s: f64) -> f64 {
        check_lease(d_s);
        if d_s.is_infinite() {
            // Every read but the first is a hit; after the first write all of them are stale.
            return if self.lambda_per_s > 0.0 { 0.0 } else { 1.0 };
        }
        // (1 - exp(-x)) / lambda = d (1 - exp(-x)) / x, which stays exact as x -> 0.
        let x = self.lambda_per_s * d_s;
        let mean_fresh_time_s = if x == 0.0 { d_s } else { d_s * (-(-x).exp_m1() / x) };
        mean_fresh_time_s / (d_s + self.r_s)
    }

    /// Every read served from the cache, fresh or stale: `d / (d + R)`.
    pub fn total_hit_rate(&self, d_s: f64) -> f64 {
        check_lease(d_s);
        if d_s.is_infinite() {
            return 1.0;
        }
        d_s / (d_s + self.r_s)
    }

    /// Reads that go to the server: `R / (d + R)`.
    pub fn miss_rate(&self, d_s: f64) -> f64 {
        check_lease(d_s);
        self.r_s / (d_s + self.r_s) // 0 for an infinite lease
    }

    /// Cache hits on a value a newer write replaced:
    /// `P(X <= d) ((d - d_fresh) / R) / (d / R + 1)`, which equals
    /// `d / (d + R) - FreshHitRate(d)` (evaluated in the first form: no cancellation when
    /// stale hits are rare).
    pub fn stale_hit_rate(&self, d_s: f64) -> f64 {
        check_lease(d_s);
        if d_s.is_infinite() {
            return 1.0 - self.fresh_hit_rate(d_s);
        }
        self.p_write(d_s) * self.hit_rate(d_s - self.d_fresh(d_s), d_s)
    }

    /// Fresh, stale and miss rates of a lease of `d_s` seconds.
    pub fn rates(&self, d_s: f64) -> HitRates {
        HitRates {
            fresh: self.fresh_hit_rate(d_s),
            stale: self.stale_hit_rate(d_s),
            miss: self.miss_rate(d_s),
        }
    }
}

/// A lease is zero or more seconds, possibly infinite; anything else is a caller's bug.
fn check_lease(d_s: f64) {
    assert!(d_s >= 0.0, "a lease is zero or more seconds, not {d_s}");
}

/// `E[X | X < d] / d` for `X ~ Exponential(lambda)` and `x = lambda d`: `1/x - 1/(e^x - 1)`,
/// from 1/2 at `x = 0` down to 0 as `x -> inf`.
fn fresh_fraction_of_stale_period(x: f64) -> f64 {
    if x < SERIES_BELOW_X {
        // Bernoulli series of 1/x - 1/(e^x - 1); the next term, x^7/1209600, is < 1e-20 here.
        let x2 = x * x;
        0.5 - x / 12.0 + x * x2 / 720.0 - x * x2 * x2 / 30240.0
    } else {
        1.0 / x - 1.0 / x.exp_m1() // e^x overflows to inf past x ~ 709: 1/x, as it should
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: f64 = 1e-3;

    fn model_ms(r_ms: f64, w_ms: f64) -> LeaseModel {
        LeaseModel::new(r_ms * MS, Some(w_ms * MS)).unwrap()
    }

    /// Equation 4 exactly as the spec writes it (fine away from `lambda d -> 0`).
    fn d_fresh_as_written(lambda: f64, d: f64) -> f64 {
        let x = lambda * d;
        (1.0 - (x + 1.0) * (-x).exp()) / (lambda * (1.0 - (-x).exp()))
    }

    #[test]
    fn fresh_and_stale_hit_rates_match_the_reference_lists_of_5_12() {
        // kairos.md §5.12: R = 1 ms, W = 19 ms.
        let m = model_ms(1.0, 19.0);
        let d_ms = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 10.0, 20.0];
        let fresh =
            [0.4871, 0.6328, 0.6938, 0.7214, 0.7327, 0.7350, 0.7319, 0.7255, 0.7068, 0.5890];
        let stale =
            [0.0129, 0.0339, 0.0562, 0.0786, 0.1006, 0.1221, 0.1431, 0.1634, 0.2023, 0.3634];
        for ((d, f), s) in d_ms.iter().zip(fresh).zip(stale) {
            let r = m.rates(d * MS);
            assert!((r.fresh - f).abs() < 1e-4, "FreshHitRate({d} ms) = {} != {f}", r.fresh);
            assert!((m.fresh_hit_rate_eq5(d * MS) - f).abs() < 1e-4, "Eq. 5 at {d} ms");
            assert!((r.stale - s).abs() < 1e-4, "stale rate at {d} ms = {} != {s}", r.stale);
        }
    }

    #[test]
    fn equation_5_equals_the_closed_form_over_a_grid() {
        let values = [1e-9, 1e-7, 1e-5, 1e-4, 3.2e-3, 0.019, 0.16, 1.0, 2.8, 60.0, 1e4];
        for r in values {
            for w in values {
                for d in values.iter().copied().chain([0.0]) {
                    let m = LeaseModel::new(r, Some(w)).unwrap();
                    let (eq5, closed) = (m.fresh_hit_rate_eq5(d), m.fresh_hit_rate(d));
                    assert!(
                        (eq5 - closed).abs() <= 1e-12 * closed.max(1e-300) + 1e-300,
                        "R {r} W {w} d {d}: Eq. 5 {eq5} != closed form {closed}"
                    );
                    let by_hand = -(-d / w).exp_m1() * w / (d + r);
                    assert!((closed - by_hand).abs() <= 1e-12 * by_hand, "R {r} W {w} d {d}");
                }
            }
        }
    }

    proptest! {
        /// kairos.md §7 inv. 9: the closed form equals Equation 5 (to 1e-9 relative), the
        /// rates are probabilities summing to 1, and both stale-rate forms agree.
        #[test]
        fn the_identities_of_5_11_hold(
            log_r in -6.0f64..2.0, log_w in -6.0f64..3.0, log_d in -7.0f64..3.0,
        ) {
            let (r, w, d) = (10f64.powf(log_r), 10f64.powf(log_w), 10f64.powf(log_d));
            let m = LeaseModel::new(r, Some(w)).unwrap();
            let (eq5, closed) = (m.fresh_hit_rate_eq5(d), m.fresh_hit_rate(d));
            prop_assert!((eq5 - closed).abs() <= 1e-9 * closed, "Eq. 5 {} closed {}", eq5, closed);
            let rates = m.rates(d);
            for p in [rates.fresh, rates.stale, rates.miss] {
                prop_assert!((0.0..=1.0).contains(&p), "{:?}", rates);
            }
            prop_assert!((rates.fresh + rates.stale + rates.miss - 1.0).abs() < 1e-12);
            prop_assert!((rates.total_hit() - m.total_hit_rate(d)).abs() < 1e-12);
            prop_assert!((rates.stale - (d / (d + r) - closed)).abs() < 1e-12);
            prop_assert!(m.d_fresh(d) > 0.0 && m.d_fresh(d) <= d / 2.0 * (1.0 + 1e-15));
        }
    }

    #[test]
    fn d_fresh_is_equation_4_and_its_limit_as_lambda_d_goes_to_0() {
        for x in [1e-2, 0.02, 0.1, 0.5, 1.0, 3.0, 10.0, 50.0, 300.0] {
            let (lambda, d) = (1.0 / 0.019, x * 0.019);
            let m = LeaseModel::new(1e-3, Some(0.019)).unwrap();
            let (ours, spec) = (m.d_fresh(d), d_fresh_as_written(lambda, d));
            // The literal form cancels: its numerator ~ x^2/2 carries an error of ~1e-16.
            let tolerance = 1e-13 + 1e-15 / (x * x);
            assert!((ours - spec).abs() <= tolerance * spec, "x {x}: {ours} != {spec}");
        }
        // The definition, E[X | X < d], by Simpson's rule at one point.
        let (lambda, d) = (2.0, 0.7);
        let n = 10_000;
        let h = d / n as f64;
        let (mut num, mut den) = (0.0, 0.0);
        for i in 0..=n {
            let x = i as f64 * h;
            let weight = if i == 0 || i == n {
                1.0
            } else if i % 2 == 1 {
                4.0
            } else {
                2.0
            };
            num += weight * x * lambda * (-lambda * x).exp();
            den += weight * lambda * (-lambda * x).exp();
        }
        let m = LeaseModel::new(1.0, Some(1.0 / lambda)).unwrap();
        assert!((m.d_fresh(d) - num / den).abs() < 1e-12);
        // Around the switch to the series the two forms agree, and both tend to d/2.
        let below = fresh_fraction_of_stale_period(SERIES_BELOW_X * (1.0 - 1e-12));
        let above = fresh_fraction_of_stale_period(SERIES_BELOW_X);
        assert!((below - above).abs() < 1e-13, "{below} {above}");
        assert_eq!(fresh_fraction_of_stale_period(0.0), 0.5);
        assert!((fresh_fraction_of_stale_period(1e-9) - 0.5).abs() < 1e-10);
        // The spec's limit region: lambda d < 1e-6 gives d/2 to within 1e-7 relative.
        let m = LeaseModel::new(1e-3, Some(1e6)).unwrap();
        assert!((m.d_fresh(0.5) / 0.25 - 1.0).abs() < 1e-7);
        assert_eq!(fresh_fraction_of_stale_period(1e6), 1e-6, "e^x overflow: 1/x");
    }

    #[test]
    fn small_lambda_d_stays_accurate_where_the_literal_formulas_cancel() {
        // W = 1e9 s, d = 1 ms: lambda d = 1e-12. The fresh rate is d/(d+R) less a hair.
        let m = LeaseModel::new(1e-3, Some(1e9)).unwrap();
        let (fresh, stale) = (m.fresh_hit_rate(1e-3), m.stale_hit_rate(1e-3));
        assert!((fresh - 0.5).abs() < 1e-12);
        // Stale: P(X <= d) (d - d/2) / (d + R) = 1e-12 * 0.25, with full relative accuracy.
        assert!((stale / 2.5e-13 - 1.0).abs() < 1e-6, "{stale}");
        assert!((m.fresh_hit_rate_eq5(1e-3) - fresh).abs() < 1e-15);
        assert!(m.stale_hit_rate(1e-3) > 0.0);
    }

    #[test]
    fn a_key_never_written_has_only_fresh_hits() {
        for m in [
            LeaseModel::new(1e-3, None).unwrap(),
            LeaseModel::new(1e-3, Some(f64::INFINITY)).unwrap(),
        ] {
            assert_eq!((m.lambda_per_s(), m.w_s()), (0.0, None));
            for d in [0.0, 1e-3, 6e-3, 5.0] {
                let r = m.rates(d);
                assert_eq!(r.fresh, d / (d + 1e-3), "d/(d+R) at {d}");
                assert!((r.fresh - m.fresh_hit_rate_eq5(d)).abs() < 1e-15);
                assert_eq!((r.stale, m.p_write(d), m.p_no_write(d)), (0.0, 0.0, 1.0));
                assert_eq!(m.d_fresh(d), d / 2.0);
            }
            let forever = m.rates(f64::INFINITY);
            assert_eq!((forever.fresh, forever.stale, forever.miss), (1.0, 0.0, 0.0));
        }
        // The W -> infinity limit of the closed form.
        let m = LeaseModel::new(1e-3, Some(1e12)).unwrap();
        assert!((m.fresh_hit_rate(6e-3) - 6.0 / 7.0).abs() < 1e-12);
    }

    #[test]
    fn a_lease_that_never_expires_serves_stale_values_once_a_write_arrives() {
        let m = model_ms(1.0, 19.0);
        let r = m.rates(f64::INFINITY);
        assert_eq!((r.fresh, r.stale, r.miss), (0.0, 1.0, 0.0));
        assert_eq!((m.p_write(f64::INFINITY), m.d_fresh(f64::INFINITY)), (1.0, 0.019));
        // A zero lease: every read misses.
        let r = m.rates(0.0);
        assert_eq!((r.fresh, r.stale, r.miss), (0.0, 0.0, 1.0));
    }

    #[test]
    fn bad_parameters_are_refused() {
        for r in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(LeaseModel::new(r, Some(1.0)), Err(ModelError::ReadGap(_))), "{r}");
        }
        for w in [0.0, -1.0, f64::NAN] {
            assert!(matches!(LeaseModel::new(1.0, Some(w)), Err(ModelError::WriteGap(_))));
        }
    }

    #[test]
    #[should_panic(expected = "a lease is zero or more seconds")]
    fn a_negative_lease_is_a_bug() {
        model_ms(1.0, 19.0).fresh_hit_rate(-1.0);
    }
}
