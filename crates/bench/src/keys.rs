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
        let eta = if n <= 2 {
            0.0
        } else {
            (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan)
        };
        Zipfian {
            n,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta,
            half_pow_theta: 1.0 + 0.5f64.powf(theta),
        }
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

impl Zipfian {
    /// Extends the generator to `n >= items()` items, as YCSB's `ZipfianGenerator.nextLong`
    /// does when the item count grows: `zeta(n)` incrementally (O(new items)), then `eta`.
    pub fn grow_to(&mut self, n: u64) {
        if n <= self.n {
            return;
        }
        self.zetan += ((self.n + 1)..=n).map(|i| 1.0 / (i as f64).powf(self.theta)).sum::<f64>();
        self.n = n;
        let zeta2 = zeta(2, self.theta);
        self.eta = (1.0 - (2.0 / n as f64).powf(1.0 - self.theta)) / (1.0 - zeta2 / self.zetan);
    }
}

/// An exact zipfian over ranks `[0, n)` for any skew `theta > 0`: rank `i` with probability
/// `(1 / (i + 1)^theta) / zeta(n, theta)`, drawn by binary search in the cumulative table
/// (8 bytes per rank, built once in O(n)). Kairos's workload (kairos.md §8.1, Fig. 9a) needs
/// skews of 1.1 and 1.2, where YCSB's closed form ([`Zipfian`], `theta < 1`) does not apply.
/// Not scrambled: rank 0 is the hottest.
#[derive(Clone, Debug)]
pub struct ZipfTable {
    theta: f64,
    /// `cdf[i]`: the probability of a rank `<= i`; the last is exactly 1.
    cdf: Vec<f64>,
}

impl ZipfTable {
    pub fn new(n: u64, theta: f64) -> ZipfTable {
        assert!(n >= 1, "zipfian over no items");
        assert!(theta > 0.0 && theta.is_finite(), "zipfian theta must be positive, got {theta}");
        let mut cdf = Vec::with_capacity(n as usize);
        let mut sum = 0.0;
        for i in 1..=n {
            sum += 1.0 / (i as f64).powf(theta);
            cdf.push(sum);
        }
        for c in &mut cdf {
            *c /= sum;
        }
        *cdf.last_mut().expect("n >= 1") = 1.0;
        ZipfTable { theta, cdf }
    }

    pub fn items(&self) -> u64 {
        self.cdf.len() as u64
    }

    pub fn theta(&self) -> f64 {
        self.theta
    }

    /// The probability of rank `i`.
    pub fn probability(&self, i: u64) -> f64 {
        let i = i as usize;
        self.cdf[i] - if i == 0 { 0.0 } else { self.cdf[i - 1] }
    }

    /// The probability of a rank below `k`: the share of draws the `k` hottest ranks get.
    pub fn head_mass(&self, k: u64) -> f64 {
        match k {
            0 => 0.0,
            k => self.cdf[(k.min(self.items()) - 1) as usize],
        }
    }

    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        let u: f64 = rng.gen();
        (self.cdf.partition_point(|&c| c <= u) as u64).min(self.items() - 1)
    }
}

/// YCSB's "latest" distribution (`SkewedLatestGenerator`): a zipfian over recency, so that
/// the newest of `n` keys is the hottest, the one before it next, and so on: index
/// `n - 1 - zipfian(n)`. `n` is the count of keys whose insert has completed (YCSB's
/// `AcknowledgedCounterGenerator`, here [`InsertCounter::acknowledged`]) and grows as inserts
/// complete; the zipfian grows with it (checked by `latest_favours_the_newest_keys`).
#[derive(Clone, Debug)]
pub struct Latest {
    zipf: Zipfian,
}

impl Latest {
    /// Over the `n >= 1` keys that exist at the start.
    pub fn new(n: u64, theta: f64) -> Latest {
        Latest { zipf: Zipfian::new(n, theta) }
    }

    /// An index in `[0, n)`, the newest (`n - 1`) the most likely.
    pub fn sample<R: Rng + ?Sized>(&mut self, n: u64, rng: &mut R) -> u64 {
        self.zipf.grow_to(n);
        let n = n.max(1).min(self.zipf.items());
        n - 1 - self.zipf.sample(rng).min(n - 1)
    }
}

/// The indexes of inserted keys (YCSB's insert key sequence and its
/// `AcknowledgedCounterGenerator`): inserts take the next index after the preloaded keys;
/// `acknowledged` is the count of keys below which every insert has completed, so reads never
/// choose a key whose insert is still in flight.
#[derive(Debug)]
pub struct InsertCounter {
    next: std::sync::atomic::AtomicU64,
    acknowledged: std::sync::atomic::AtomicU64,
    /// Completed inserts above `acknowledged`.
    early: std::sync::Mutex<std::collections::BTreeSet<u64>>,
}

impl InsertCounter {
    /// After `preloaded` keys (indexes `0..preloaded`).
    pub fn new(preloaded: u64) -> InsertCounter {
        InsertCounter {
            next: preloaded.into(),
            acknowledged: preloaded.into(),
            early: Default::default(),
        }
    }

    /// The index of the next key to insert.
    pub fn next_index(&self) -> u64 {
        self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// Every key below this count exists.
    pub fn acknowledged(&self) -> u64 {
        self.acknowledged.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The insert of `index` completed.
    pub fn acknowledge(&self, index: u64) {
        let mut early = self.early.lock().unwrap_or_else(|e| e.into_inner());
        early.insert(index);
        let mut limit = self.acknowledged.load(std::sync::atomic::Ordering::Acquire);
        while early.remove(&limit) {
            limit += 1;
        }
        self.acknowledged.store(limit, std::sync::atomic::Ordering::Release);
    }
}

/// How the benchmark picks the key of each operation. Each session keeps its own copy
/// ([`Latest`] grows with the inserts).
#[derive(Clone, Debug)]
pub enum KeyChooser {
    Uniform { n: u64 },
    Zipfian(Zipfian),
    Latest(Latest),
}

impl KeyChooser {
    /// An index; `existing` is the count of keys that exist now (the preloaded ones plus the
    /// acknowledged inserts). Uniform and zipfian choose among the preloaded keys only.
    pub fn sample<R: Rng + ?Sized>(&mut self, rng: &mut R, existing: u64) -> u64 {
        match self {
            KeyChooser::Uniform { n } => rng.gen_range(0..*n),
            KeyChooser::Zipfian(z) => z.sample(rng),
            KeyChooser::Latest(l) => l.sample(existing, rng),
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
        let mut k = KeyChooser::Uniform { n: 20 };
        let total = 200_000;
        let mut counts = vec![0u64; 20];
        for _ in 0..total {
            counts[k.sample(&mut rng, 20) as usize] += 1;
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
        let bucket_counts: Vec<u64> =
            buckets(n as usize).iter().map(|&(lo, hi)| counts[lo..hi].iter().sum()).collect();
        let bucket_exact: Vec<f64> =
            buckets(n as usize).iter().map(|&(lo, hi)| exact[lo..hi].iter().sum()).collect();
        let bucket_law: Vec<f64> = buckets(n as usize)
            .iter()
            .map(|&(lo, hi)| (lo..hi).map(|i| z.probability(i as u64)).sum())
            .collect();

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
    fn the_zipf_table_draws_the_power_law_at_any_skew() {
        let n = 1_000u64;
        for theta in [0.5, 0.99, 1.2] {
            let z = ZipfTable::new(n, theta);
            assert!((z.probability(0) - 1.0 / zeta(n, theta)).abs() < 1e-12);
            assert!((z.head_mass(n) - 1.0).abs() < 1e-12 && z.head_mass(0) == 0.0);
            let mut rng = StdRng::seed_from_u64(5);
            let total = 200_000u64;
            let mut counts = vec![0u64; n as usize];
            for _ in 0..total {
                counts[z.sample(&mut rng) as usize] += 1;
            }
            let bs = buckets(n as usize);
            let observed: Vec<u64> =
                bs.iter().map(|&(lo, hi)| counts[lo..hi].iter().sum()).collect();
            let expected = |t: &ZipfTable| -> Vec<f64> {
                bs.iter().map(|&(lo, hi)| (lo..hi).map(|i| t.probability(i as u64)).sum()).collect()
            };
            // 10 degrees of freedom: P(chi2 > 29.6) = 0.001.
            let chi2 = chi_square(&observed, &expected(&z), total);
            assert!(chi2 < 29.6, "theta {theta}: chi2 = {chi2}");
            // Canary: the same counts against a slightly different skew are rejected.
            let other = ZipfTable::new(n, theta + 0.05);
            let chi2 = chi_square(&observed, &expected(&other), total);
            assert!(
                chi2 > 29.6,
                "theta {theta}: a skew of {} fits too (chi2 = {chi2})",
                theta + 0.05
            );
        }
        let one = ZipfTable::new(1, 1.1);
        assert_eq!(one.sample(&mut StdRng::seed_from_u64(1)), 0);
    }

    #[test]
    fn zipfian_is_deterministic_for_a_seed_and_covers_tiny_key_spaces() {
        let z = Zipfian::new(100_000, 0.99);
        let a: Vec<u64> =
            (0..100).scan(StdRng::seed_from_u64(3), |r, _| Some(z.sample(r))).collect();
        let b: Vec<u64> =
            (0..100).scan(StdRng::seed_from_u64(3), |r, _| Some(z.sample(r))).collect();
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

    #[test]
    fn a_grown_zipfian_is_the_zipfian_of_the_larger_count() {
        let mut grown = Zipfian::new(1_000, 0.99);
        grown.grow_to(1_500);
        let fresh = Zipfian::new(1_500, 0.99);
        assert_eq!(grown.items(), 1_500);
        assert!((grown.zetan - fresh.zetan).abs() < 1e-9 && (grown.eta - fresh.eta).abs() < 1e-12);
        let a: Vec<u64> =
            (0..200).scan(StdRng::seed_from_u64(5), |r, _| Some(grown.sample(r))).collect();
        let b: Vec<u64> =
            (0..200).scan(StdRng::seed_from_u64(5), |r, _| Some(fresh.sample(r))).collect();
        assert_eq!(a, b);
    }

    #[test]
    fn latest_favours_the_newest_keys() {
        let n = 1_000u64;
        let mut l = Latest::new(n, 0.99);
        let z = Zipfian::new(n, 0.99);
        let mut rng = StdRng::seed_from_u64(13);
        let total = 200_000u64;
        let mut counts = vec![0u64; n as usize];
        for _ in 0..total {
            let i = l.sample(n, &mut rng);
            assert!(i < n);
            counts[i as usize] += 1;
        }
        // The newest key is the hottest, with the zipfian's rank-0 probability; the 10 newest
        // take what the 10 hottest of a zipfian take (~39 %), the 500 oldest far less.
        let freq = |r: std::ops::Range<usize>| counts[r].iter().sum::<u64>() as f64 / total as f64;
        assert_eq!(counts.iter().enumerate().max_by_key(|(_, &c)| c).unwrap().0, n as usize - 1);
        assert!((freq(999..1000) - z.probability(0)).abs() < 0.01, "newest {}", freq(999..1000));
        let law_top10: f64 = (0..10).map(|i| z.probability(i)).sum();
        assert!(
            (freq(990..1000) - law_top10).abs() < 0.03,
            "10 newest {} vs {law_top10}",
            freq(990..1000)
        );
        assert!(
            freq(990..1000) > 2.0 * freq(0..500),
            "newest {} vs oldest 500 {}",
            freq(990..1000),
            freq(0..500)
        );

        // As keys are inserted the hot spot moves to them: after 100 more keys, the 10 newest
        // (indexes 1090..1100) are hot and the formerly newest (990..1000) have cooled down.
        let mut counts = vec![0u64; 1_100];
        for _ in 0..total {
            counts[l.sample(1_100, &mut rng) as usize] += 1;
        }
        let freq = |r: std::ops::Range<usize>| counts[r].iter().sum::<u64>() as f64 / total as f64;
        assert!(freq(1090..1100) > 0.3, "new newest {}", freq(1090..1100));
        assert!(freq(990..1000) < 0.05, "old newest {}", freq(990..1000));
    }

    #[test]
    fn the_insert_counter_acknowledges_only_contiguous_inserts() {
        let c = InsertCounter::new(10);
        let (a, b, d) = (c.next_index(), c.next_index(), c.next_index());
        assert_eq!((a, b, d), (10, 11, 12));
        c.acknowledge(11);
        assert_eq!(c.acknowledged(), 10, "10 is still in flight");
        c.acknowledge(10);
        assert_eq!(c.acknowledged(), 12);
        c.acknowledge(12);
        assert_eq!(c.acknowledged(), 13);
    }
}
