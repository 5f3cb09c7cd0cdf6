//! Keys and how they are chosen: fixed-size keys derived from an index, and uniform or
//! zipfian choice of the index.

use bytes::{BufMut, Bytes, BytesMut};
use rand::Rng;

/// Digits needed to write `n` in decimal.
fn digits(mut n: u64) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

/// Smallest key size that can hold `keys` distinct keys: a `k` and the zero-padded index.
pub fn min_key_size(keys: u64) -> usize {
    1 + digits(keys.saturating_sub(1))
}

/// The key of index `i`: `k` followed by `i` in decimal, zero-padded to exactly `size` bytes
/// (`k0000000000000042` for size 16). Deterministic, so every run and every target uses the
/// same keys. The caller checks `size >= min_key_size(keys)`.
pub fn key(i: u64, size: usize) -> Bytes {
    let d = digits(i);
    debug_assert!(size > d, "key size {size} too small for index {i}");
    let mut out = BytesMut::with_capacity(size);
    out.put_u8(b'k');
    out.put_bytes(b'0', size.saturating_sub(1 + d));
    let mut buf = [0u8; 20];
    let mut n = i;
    for slot in buf[..d].iter_mut().rev() {
        *slot = b'0' + (n % 10) as u8;
        n /= 10;
    }
    out.put_slice(&buf[..d]);
    out.freeze()
}

/// `sum_{i=1..n} 1 / i^theta`.
pub fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

/// The zipfian generator of YCSB (`ZipfianGenerator`, after Gray et al., "Quickly generating
/// billion-record synthetic databases", SIGMOD 1994): index `i` in `[0, n)` is drawn with
/// probability close to `(1 / (i + 1)^theta) / zeta(n, theta)`. Exact for indexes 0 and 1, a
/// closed-form approximation for the rest (checked by
/// `zipfian_frequencies_follow_the_power_law`).
///
/// **Not scrambled**: index 0 is the hottest key, index 1 the next, and so on. YCSB's
/// `ScrambledZipfianGenerator` hashes the rank to spread hot keys over a range-partitioned
/// key space; Strata's rc tables and Redis are hash-based and fully replicated, so where the
/// hot keys sit does not matter, and the plain ranks keep the statistics testable.
#[derive(Clone, Debug)]
pub struct Zipfian {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    /// `1 + 0.5^theta`: below it (times `zetan`), index 1.
    half_pow_theta: f64,
}

impl Zipfian {
    /// `n >= 1` items, `0 < theta < 1` (YCSB's default is 0.99). Computing `zeta(n)` takes
    /// O(n): about a millisecond per million keys.
    pub fn new(n: u64, theta: f64) -> Zipfian {
        assert!(n >= 1, "zipfian over no items");
        assert!(theta > 0.0 && theta < 1.0, "zipfian theta must be in (0, 1), got {theta}");
        let zetan = zeta(n, theta);
        let zeta2 = zeta(2.min(n), theta);
        let eta = if n <= 2 { 0.0 } else { (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan) };
        Zipfian { n, theta, alpha: 1.0 / (1.0 - theta), zetan, eta, half_pow_theta: 1.0 + 0.5f64.powf(theta) }
    }

    pub fn items(&self) -> u64 {
        self.n
    }

    pub fn theta(&self) -> f64 {
        self.theta
    }

    /// The exact probability of index `i` under the power law this generator approximates.
    pub fn probability(&self, i: u64) -> f64 {
        1.0 / ((i + 1) as f64).powf(self.theta) / self.zetan
    }

    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        let u: f64 = rng.gen();
        let uz = u * self.zetan;
        if uz < 1.0 || self.n == 1 {
            return 0;
        }
        if uz < self.half_pow_theta || self.n == 2 {
            return 1;
        }
        let i = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        i.min(self.n - 1)
    }
}

/// How the benchmark picks the key of each operation.
#[derive(Clone, Debug)]
pub enum KeyChooser {
    Uniform { n: u64 },
    Zipfian(Zipfian),
}

impl KeyChooser {
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        match self {
            KeyChooser::Uniform { n } => rng.gen_range(0..*n),
            KeyChooser::Zipfian(z) => z.sample(rng),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn keys_are_fixed_size_distinct_and_zero_padded() {
        assert_eq!(&key(42, 16)[..], b"k000000000000042");
        assert_eq!(&key(0, 2)[..], b"k0");
        assert_eq!(&key(9_999, 5)[..], b"k9999");
        assert_eq!(min_key_size(1), 2);
        assert_eq!(min_key_size(10), 2);
        assert_eq!(min_key_size(11), 3);
        assert_eq!(min_key_size(100_000), 6);
        let mut seen = std::collections::HashSet::new();
        for i in 0..2_000 {
            let k = key(i, 8);
            assert_eq!(k.len(), 8);
            assert!(seen.insert(k));
        }
    }

    /// Chi-square statistic of observed counts against expected probabilities.
    fn chi_square(counts: &[u64], probs: &[f64], total: u64) -> f64 {
        counts
            .iter()
            .zip(probs)
            .map(|(&c, &p)| {
                let e = p * total as f64;
                (c as f64 - e).powi(2) / e
            })
            .sum()
    }

    #[test]
    fn uniform_choice_is_uniform() {
        let mut rng = StdRng::seed_from_u64(7);
        let k = KeyChooser::Uniform { n: 20 };
        let total = 200_000;
        let mut counts = vec![0u64; 20];
        for _ in 0..total {
            counts[k.sample(&mut rng) as usize] += 1;
        }
        // 19 degrees of freedom: P(chi2 > 43.8) = 0.001.
        let chi2 = chi_square(&counts, &[1.0 / 20.0; 20], total);
        assert!(chi2 < 43.8, "chi2 = {chi2}, counts {counts:?}");
    }

    /// The exact distribution the YCSB algorithm draws from, by inverting its formula:
    /// index `i >= 2` is drawn for the `u` with `i <= n (1 - eta (1 - u))^alpha < i + 1`.
    fn algorithm_probabilities(z: &Zipfian) -> Vec<f64> {
        let n = z.n as usize;
        let u_of = |x: f64| 1.0 - (1.0 - (x / z.n as f64).powf(1.0 / z.alpha)) / z.eta;
        let t2 = z.half_pow_theta / z.zetan;
        let mut p = vec![0.0; n];
        p[0] = 1.0 / z.zetan;
        p[1] = t2 - p[0];
        for (i, slot) in p.iter_mut().enumerate() {
            let (lo, hi) = (u_of(i as f64).max(t2), u_of(i as f64 + 1.0).min(1.0));
            if hi > lo {
                *slot += hi - lo;
            }
        }
        p
    }

    /// Buckets: index 0, index 1, then doubling ranges [2, 4), [4, 8), ...
    fn buckets(n: usize) -> Vec<(usize, usize)> {
        let mut b = vec![(0, 1), (1, 2)];
        let mut lo = 2;
        while lo < n {
            let hi = (2 * lo).min(n);
            b.push((lo, hi));
            lo = hi;
        }
        b
    }

    #[test]
    fn zipfian_frequencies_follow_the_power_law() {
        let n = 1_000u64;
        let z = Zipfian::new(n, 0.99);
        let mut rng = StdRng::seed_from_u64(11);
        let total = 400_000u64;
        let mut counts = vec![0u64; n as usize];
        for _ in 0..total {
            let i = z.sample(&mut rng);
            assert!(i < n);
            counts[i as usize] += 1;
        }
        let exact = algorithm_probabilities(&z);
        assert!((exact.iter().sum::<f64>() - 1.0).abs() < 1e-9, "the inversion covers [0, 1)");
        let bucket_counts: Vec<u64> = buckets(n as usize).iter().map(|&(lo, hi)| counts[lo..hi].iter().sum()).collect();
        let bucket_exact: Vec<f64> = buckets(n as usize).iter().map(|&(lo, hi)| exact[lo..hi].iter().sum()).collect();
        let bucket_law: Vec<f64> =
            buckets(n as usize).iter().map(|&(lo, hi)| (lo..hi).map(|i| z.probability(i as u64)).sum()).collect();

        // 1. The sampler draws from the algorithm's distribution: chi-square over the 11
        //    buckets (10 degrees of freedom: P(chi2 > 29.6) = 0.001).
        let chi2 = chi_square(&bucket_counts, &bucket_exact, total);
        assert!(chi2 < 29.6, "chi2 = {chi2}: counts {bucket_counts:?} vs {bucket_exact:?}");

        // 2. That distribution is the power law: exact for indexes 0 and 1, within 15 % for
        //    every doubling bucket (the closed form is an approximation, worst near index 2).
        for (i, (&e, &l)) in bucket_exact.iter().zip(&bucket_law).enumerate() {
            let tolerance = if i < 2 { 1e-12 } else { 0.15 * l };
            assert!((e - l).abs() <= tolerance, "bucket {i}: algorithm {e:.4} vs power law {l:.4}");
        }

        // 3. And the skew is what YCSB users expect: ~38-40 % of accesses on the 10 hottest
        //    of 1000 keys, far more than on the coldest 500.
        let freq = |r: std::ops::Range<usize>| counts[r].iter().sum::<u64>() as f64 / total as f64;
        let top10 = freq(0..10);
        let law_top10: f64 = (0..10).map(|i| z.probability(i)).sum();
        assert!((top10 - law_top10).abs() < 0.03, "top10 {top10} vs {law_top10}");
        assert!(top10 > 2.0 * freq(500..1000), "top10 {top10} vs bottom 500 {}", freq(500..1000));
    }

    #[test]
    fn zipfian_is_deterministic_for_a_seed_and_covers_tiny_key_spaces() {
        let z = Zipfian::new(100_000, 0.99);
        let a: Vec<u64> = (0..100).scan(StdRng::seed_from_u64(3), |r, _| Some(z.sample(r))).collect();
        let b: Vec<u64> = (0..100).scan(StdRng::seed_from_u64(3), |r, _| Some(z.sample(r))).collect();
        assert_eq!(a, b);
        for n in 1..=3 {
            let z = Zipfian::new(n, 0.5);
            let mut rng = StdRng::seed_from_u64(n);
            let mut seen = vec![false; n as usize];
            for _ in 0..1_000 {
                seen[z.sample(&mut rng) as usize] = true;
            }
            assert!(seen.iter().all(|&s| s), "n = {n}: every index is drawn");
        }
    }
}
