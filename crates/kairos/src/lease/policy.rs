//! Algorithm 1 (kairos.md §5.12) and the lease policies a client may choose (§5.14).
//!
//! A client computes a lease on every fetch (miss) from the server, from its current `R` for
//! the key and the `W` the server sent with the value; leases are never checked by anyone
//! else, so each client may use its own policy.

use std::time::Duration;

use strata_wire::Instant;

use super::model::LeaseModel;
use super::LeaseLimits;

/// What Algorithm 1 found: the lease with the highest fresh-hit rate among `k R`,
/// `k = 1, 2, ...`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IdealLease {
    /// The lease, `hits_per_lease * R` seconds.
    pub d_s: f64,
    /// `k`: the expected hits per lease.
    pub hits_per_lease: u32,
    /// `FreshHitRate(d)`.
    pub fresh_hit_rate: f64,
}

/// Algorithm 1, `find_ideal_lease_duration(R, lambda)` for the `R` and `lambda` of `model`:
/// the first peak of `FreshHitRate(k R)` over `k = 1, 2, ...` (the rate is unimodal in `d`),
/// stopping after `limits.max_hits_per_lease` or once `k R` passes `limits.max_lease`
/// (§9.9 **\[DECISION\]**, needed when `lambda = 0`: the rate then grows for ever).
///
/// `k = 1` is always tried, so the lease is at least `R` — possibly longer than the cap,
/// which [`LeasePolicy::lease_duration`] applies afterwards, as the spec's pseudocode does.
pub fn find_ideal_lease_duration(model: &LeaseModel, limits: &LeaseLimits) -> IdealLease {
    let r_s = model.r_s();
    let max_lease_s = limits.max_lease.as_secs_f64();
    let mut best = IdealLease { d_s: 0.0, hits_per_lease: 0, fresh_hit_rate: 0.0 };
    let mut k: u32 = 1;
    loop {
        let d_s = f64::from(k) * r_s;
        let rate = model.fresh_hit_rate(d_s);
        if rate < best.fresh_hit_rate {
            break; // passed the peak
        }
        best = IdealLease { d_s, hits_per_lease: k, fresh_hit_rate: rate };
        k += 1;
        if k > limits.max_hits_per_lease || f64::from(k) * r_s > max_lease_s {
            break; // the guards of §3.5
        }
    }
    best
}

/// How long a client may serve a fetched value from its cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseDuration {
    /// Do not cache the value (no statistics yet, or a zero lease).
    DoNotCache,
    /// Serve it until this long after the fetch.
    For(Duration),
    /// Serve it until it is evicted or invalidated (the naive and explicit-invalidation
    /// baselines: `lts = +infinity`).
    NoExpiry,
}

impl LeaseDuration {
    /// The lease's end for a value fetched at `now` (`lts`): `None` if it must not be cached,
    /// `Instant::MAX` if it never expires.
    pub fn lease_end(self, now: Instant) -> Option<Instant> {
        match self {
            LeaseDuration::DoNotCache => None,
            LeaseDuration::For(d) => Some(now + d),
            LeaseDuration::NoExpiry => Some(Instant::MAX),
        }
    }

    /// The lease in seconds, as the model takes it: 0, `d`, or infinity.
    pub fn as_secs_f64(self) -> f64 {
        match self {
            LeaseDuration::DoNotCache => 0.0,
            LeaseDuration::For(d) => d.as_secs_f64(),
            LeaseDuration::NoExpiry => f64::INFINITY,
        }
    }
}

/// A client's rule for sizing leases (kairos.md §5.12, §5.14; Fig. 13 compares them).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LeasePolicy {
    /// Algorithm 1: the lease with the highest expected fresh-hit rate (Kairos).
    Ideal,
    /// `StaticP(x)`: the largest `d` with `P(X <= d) = x`, `d = -W ln(1 - x)`; `MAX_LEASE` when
    /// `W` is unknown. The paper tries `x` in {0.1, 0.2, 0.3, 0.4}.
    StaticP(f64),
    /// `d = W` (`MAX_LEASE` when `W` is unknown).
    Mean,
    /// The same lease for every key.
    Fixed(Duration),
    /// §5.14.1: cache with no expiry; an entry goes only when a transaction that read it
    /// aborts on it (or LRU evicts it).
    Naive,
    /// §5.14.2: cache with no expiry; the primary invalidates sharers after each write.
    ExplicitInvalidation,
}

impl LeasePolicy {
    /// The lease for a value just fetched, given the client's mean read gap `r` for the key
    /// (`None`: no statistics yet) and the mean write gap `w` the server reported (`None`:
    /// never written, or not yet twice). Leases computed from statistics are capped at
    /// `limits.max_lease`; a `Fixed` lease is taken as given.
    ///
    /// A mean of zero (every gap shorter than the clock's nanosecond) counts as 1 ns, so the
    /// model never divides by zero.
    pub fn lease_duration(
        &self,
        r: Option<Duration>,
        w: Option<Duration>,
        limits: &LeaseLimits,
    ) -> LeaseDuration {
        const RESOLUTION: Duration = Duration::from_nanos(1);
        let capped = |d: Duration| match d.min(limits.max_lease) {
            Duration::ZERO => LeaseDuration::DoNotCache,
            d => LeaseDuration::For(d),
        };
        let w_s = w.map(|w| w.max(RESOLUTION).as_secs_f64());
        match *self {
            LeasePolicy::Ideal => {
                // §5.12 [DECISION]: no R statistics yet -> do not cache.
                let Some(r) = r else { return LeaseDuration::DoNotCache };
                let r = r.max(RESOLUTION);
                let model =
                    LeaseModel::new(r.as_secs_f64(), w_s).expect("R and W are at least 1 ns");
                let ideal = find_ideal_lease_duration(&model, limits);
                // d = k R exactly, in nanoseconds (no rounding through f64).
                capped(r.checked_mul(ideal.hits_per_lease).unwrap_or(Duration::MAX))
            }
            LeasePolicy::StaticP(x) => match w_s {
                None => capped(limits.max_lease),
                Some(_) if x.is_nan() || x <= 0.0 => LeaseDuration::DoNotCache,
                Some(_) if x >= 1.0 => capped(limits.max_lease),
                Some(w_s) => capped(seconds(-w_s * (-x).ln_1p(), limits.max_lease)),
            },
            LeasePolicy::Mean => capped(w.unwrap_or(limits.max_lease)),
            LeasePolicy::Fixed(d) if d.is_zero() => LeaseDuration::DoNotCache,
            LeasePolicy::Fixed(d) => LeaseDuration::For(d),
            LeasePolicy::Naive | LeasePolicy::ExplicitInvalidation => LeaseDuration::NoExpiry,
        }
    }
}

/// The names tools use for a policy: `naive`, `ei`, `ideal`, `static:X` (0 < X < 1), `mean`,
/// `fixed:MS` (milliseconds, > 0).
impl std::str::FromStr for LeasePolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let positive = |v: &str, what: &str| {
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x > 0.0)
                .ok_or_else(|| format!("{s}: {what} must be a positive number"))
        };
        match s.split_once(':') {
            None => match s {
                "naive" => Ok(LeasePolicy::Naive),
                "ei" => Ok(LeasePolicy::ExplicitInvalidation),
                "ideal" => Ok(LeasePolicy::Ideal),
                "mean" => Ok(LeasePolicy::Mean),
                _ => Err(format!(
                    "{s}: use naive, ei, ideal, static:X (0 < X < 1), mean or fixed:MS"
                )),
            },
            Some(("static", x)) => match positive(x, "X")? {
                x if x < 1.0 => Ok(LeasePolicy::StaticP(x)),
                _ => Err(format!("{s}: X is a probability, 0 < X < 1")),
            },
            Some(("fixed", ms)) => {
                Ok(LeasePolicy::Fixed(Duration::from_secs_f64(positive(ms, "MS")? / 1000.0)))
            }
            Some(_) => Err(format!("{s}: unknown policy")),
        }
    }
}

impl std::fmt::Display for LeasePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LeasePolicy::Naive => f.write_str("naive"),
            LeasePolicy::ExplicitInvalidation => f.write_str("ei"),
            LeasePolicy::Ideal => f.write_str("ideal"),
            LeasePolicy::StaticP(x) => write!(f, "static:{x}"),
            LeasePolicy::Mean => f.write_str("mean"),
            LeasePolicy::Fixed(d) => write!(f, "fixed:{}", d.as_secs_f64() * 1000.0),
        }
    }
}

/// `s` seconds as a `Duration`, or `max` if it is more than that (or not a number).
fn seconds(s: f64, max: Duration) -> Duration {
    Duration::try_from_secs_f64(s).map_or(max, |d| d.min(max))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: f64 = 1e-3;

    fn ms(x: u64) -> Duration {
        Duration::from_millis(x)
    }

    fn us(x: u64) -> Duration {
        Duration::from_micros(x)
    }

    #[test]
    fn policies_parse_from_and_print_as_their_names() {
        for name in ["naive", "ei", "ideal", "static:0.2", "mean", "fixed:50", "fixed:0.5"] {
            let p: LeasePolicy = name.parse().unwrap();
            assert_eq!(p.to_string(), name);
        }
        assert_eq!("fixed:50".parse(), Ok(LeasePolicy::Fixed(ms(50))));
        for bad in ["", "lru", "static:1", "static:0", "static:x", "fixed:-1", "fixed:inf", "a:b"] {
            assert!(bad.parse::<LeasePolicy>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn algorithm_1_reproduces_the_reference_table_of_5_12() {
        // (R ms, W ms, k, d ms, FreshHitRate), kairos.md §5.12.
        let table = [
            (1.0, 19.0, 6, 6.0, 0.7350),
            (3.2, 160.0, 10, 32.0, 0.8240),
            (0.160, 160.0, 44, 7.04, 0.9566),
            (0.500, 2800.0, 105, 52.5, 0.9813),
            (0.500, 10.0, 6, 3.0, 0.7405),
            (1.0, 1.0, 1, 1.0, 0.3161),
        ];
        for (r, w, k, d, rate) in table {
            let model = LeaseModel::new(r * MS, Some(w * MS)).unwrap();
            let ideal = find_ideal_lease_duration(&model, &LeaseLimits::default());
            let row = format!("R {r} ms, W {w} ms: {ideal:?}");
            assert_eq!(ideal.hits_per_lease, k, "{row}");
            assert!((ideal.d_s - d * MS).abs() < 1e-4 * MS, "{row}");
            assert!((ideal.fresh_hit_rate - rate).abs() < 1e-4, "{row}");
            // The peak: one more or one fewer hit per lease is worse.
            assert!(model.fresh_hit_rate((k + 1) as f64 * r * MS) < ideal.fresh_hit_rate);
            if k > 1 {
                assert!(model.fresh_hit_rate((k - 1) as f64 * r * MS) <= ideal.fresh_hit_rate);
            }
        }
    }

    #[test]
    fn the_ideal_policy_gives_whole_multiples_of_r() {
        let limits = LeaseLimits::default();
        let cases = [
            (us(1000), ms(19), ms(6)),
            (us(3200), ms(160), ms(32)),
            (us(160), ms(160), us(7040)),
            (us(500), ms(2800), us(52_500)),
            (us(500), ms(10), ms(3)),
            (ms(1), ms(1), ms(1)),
        ];
        for (r, w, lease) in cases {
            assert_eq!(
                LeasePolicy::Ideal.lease_duration(Some(r), Some(w), &limits),
                LeaseDuration::For(lease),
                "R {r:?} W {w:?}"
            );
        }
    }

    #[test]
    fn no_read_statistics_means_no_caching_under_the_ideal_policy() {
        let limits = LeaseLimits::default();
        for w in [None, Some(ms(19))] {
            assert_eq!(
                LeasePolicy::Ideal.lease_duration(None, w, &limits),
                LeaseDuration::DoNotCache
            );
        }
    }

    #[test]
    fn a_key_never_written_is_held_until_a_guard_stops_algorithm_1() {
        // lambda = 0: the rate grows with every k. R = 1 ms hits MAX_LEASE (5 s) first...
        let limits = LeaseLimits::default();
        let model = LeaseModel::new(1e-3, None).unwrap();
        let ideal = find_ideal_lease_duration(&model, &limits);
        assert_eq!(ideal.hits_per_lease, 5000);
        assert!((ideal.d_s - 5.0).abs() < 1e-9);
        assert_eq!(
            LeasePolicy::Ideal.lease_duration(Some(ms(1)), None, &limits),
            LeaseDuration::For(ms(5000))
        );
        // ... and R = 10 µs hits MAX_HITS_PER_LEASE: 10,000 hits, 100 ms.
        let model = LeaseModel::new(1e-5, None).unwrap();
        assert_eq!(find_ideal_lease_duration(&model, &limits).hits_per_lease, 10_000);
        assert_eq!(
            LeasePolicy::Ideal.lease_duration(Some(us(10)), None, &limits),
            LeaseDuration::For(ms(100))
        );
        // A read every 2 s with no write: k = 1 and k = 2 fit in 5 s; never more than MAX_LEASE.
        let model = LeaseModel::new(2.0, None).unwrap();
        assert_eq!(find_ideal_lease_duration(&model, &limits).hits_per_lease, 2);
        assert_eq!(
            LeasePolicy::Ideal.lease_duration(Some(ms(2000)), None, &limits),
            LeaseDuration::For(ms(4000))
        );
        // R beyond MAX_LEASE: Algorithm 1 says R, the policy caps it.
        let model = LeaseModel::new(10.0, Some(1e6)).unwrap();
        assert_eq!(find_ideal_lease_duration(&model, &limits).d_s, 10.0);
        assert_eq!(
            LeasePolicy::Ideal.lease_duration(Some(ms(10_000)), Some(ms(1 << 40)), &limits),
            LeaseDuration::For(ms(5000))
        );
    }

    #[test]
    fn zero_means_count_as_one_nanosecond() {
        let limits = LeaseLimits::default();
        // Reads closer than the clock's resolution: R = 1 ns, and the peak is near
        // sqrt(2 R W) = 6.16 µs (where (d - d^2/2W) / (d + R) stops growing).
        let d = LeasePolicy::Ideal.lease_duration(Some(Duration::ZERO), Some(ms(19)), &limits);
        assert_eq!(d, LeaseDuration::For(Duration::from_nanos(6164)));
        // With no write, the 10,000 hits of the guard: 10 µs.
        let d = LeasePolicy::Ideal.lease_duration(Some(Duration::ZERO), None, &limits);
        assert_eq!(d, LeaseDuration::For(Duration::from_nanos(10_000)));
        // Writes that fast: one hit per lease is all there is, and it is rarely fresh.
        let d = LeasePolicy::Ideal.lease_duration(Some(ms(1)), Some(Duration::ZERO), &limits);
        assert_eq!(d, LeaseDuration::For(ms(1)));
    }

    #[test]
    fn the_static_policies_of_5_14_3() {
        let limits = LeaseLimits::default();
        let w = Some(ms(100));
        // P(x): d = -W ln(1 - x); P(X <= d) = x.
        for x in [0.1, 0.2, 0.3, 0.4] {
            let LeaseDuration::For(d) = LeasePolicy::StaticP(x).lease_duration(None, w, &limits)
            else {
                panic!("P({x}) caches")
            };
            let expected = -0.1 * (1.0f64 - x).ln();
            assert!((d.as_secs_f64() - expected).abs() < 1e-9, "P({x}): {d:?}");
            // P(X <= d) = x, to the nanosecond d is rounded to.
            assert!((1.0 - (-d.as_secs_f64() / 0.1).exp() - x).abs() < 1e-7);
        }
        let p =
            |x: f64, w: Option<Duration>| LeasePolicy::StaticP(x).lease_duration(None, w, &limits);
        assert_eq!(p(0.2, None), LeaseDuration::For(ms(5000)), "unknown W: MAX_LEASE");
        assert_eq!(p(0.4, Some(ms(100_000))), LeaseDuration::For(ms(5000)), "capped");
        assert_eq!(p(0.0, w), LeaseDuration::DoNotCache);
        assert_eq!(p(f64::NAN, w), LeaseDuration::DoNotCache);
        assert_eq!(p(1.0, w), LeaseDuration::For(ms(5000)));
        // Mean: d = W.
        let mean = |w| LeasePolicy::Mean.lease_duration(Some(ms(1)), w, &limits);
        assert_eq!(mean(Some(ms(19))), LeaseDuration::For(ms(19)));
        assert_eq!(mean(None), LeaseDuration::For(ms(5000)));
        assert_eq!(mean(Some(ms(60_000))), LeaseDuration::For(ms(5000)));
        assert_eq!(mean(Some(Duration::ZERO)), LeaseDuration::DoNotCache);
        // Fixed: as given, even beyond MAX_LEASE.
        let fixed = |d| LeasePolicy::Fixed(d).lease_duration(None, None, &limits);
        assert_eq!(fixed(ms(7)), LeaseDuration::For(ms(7)));
        assert_eq!(fixed(ms(60_000)), LeaseDuration::For(ms(60_000)));
        assert_eq!(fixed(Duration::ZERO), LeaseDuration::DoNotCache);
    }

    #[test]
    fn the_baselines_never_expire() {
        let limits = LeaseLimits::default();
        for policy in [LeasePolicy::Naive, LeasePolicy::ExplicitInvalidation] {
            for (r, w) in [(None, None), (Some(ms(1)), Some(ms(19)))] {
                let lease = policy.lease_duration(r, w, &limits);
                assert_eq!(lease, LeaseDuration::NoExpiry);
                assert_eq!(lease.lease_end(Instant::from_millis(3)), Some(Instant::MAX));
                assert_eq!(lease.as_secs_f64(), f64::INFINITY);
            }
        }
        let now = Instant::from_millis(3);
        assert_eq!(LeaseDuration::For(ms(6)).lease_end(now), Some(Instant::from_millis(9)));
        assert_eq!(LeaseDuration::DoNotCache.lease_end(now), None);
        assert_eq!(LeaseDuration::DoNotCache.as_secs_f64(), 0.0);
    }

    #[test]
    fn the_guards_are_parameters() {
        let model = LeaseModel::new(1e-3, None).unwrap();
        let small = LeaseLimits { max_hits_per_lease: 7, max_lease: ms(5000) };
        assert_eq!(find_ideal_lease_duration(&model, &small).hits_per_lease, 7);
        let short = LeaseLimits { max_hits_per_lease: 10_000, max_lease: us(3500) };
        assert_eq!(find_ideal_lease_duration(&model, &short).hits_per_lease, 3);
        assert_eq!(
            LeasePolicy::Ideal.lease_duration(Some(ms(1)), None, &short),
            LeaseDuration::For(ms(3))
        );
    }
}
