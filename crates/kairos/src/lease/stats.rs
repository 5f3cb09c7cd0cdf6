//! Access statistics (kairos.md §5.10): the mean gap between successive accesses of one key.
//!
//! One type for both means the model needs:
//! * `R` at a client: [`AccessStats::on_access`] on every read of a cacheable key that reaches
//!   step 3 of §5.2 (once per key per transaction), with the client's `now`;
//! * `W` at a primary: [`AccessStats::on_access`] on every committed write of the key, with
//!   `Instant::from_nanos(commit_ts.nanos)` (the gaps are between commit timestamps).

use std::collections::VecDeque;
use std::time::Duration;

use strata_wire::Instant;

use super::STATS_WINDOW;

/// The sliding-window mean of the last [`STATS_WINDOW`] gaps between accesses of one key.
/// Undefined (`None`) until two accesses have been seen.
#[derive(Clone, Debug)]
pub struct AccessStats {
    window: usize,
    /// The last `window` gaps in nanoseconds, oldest first.
    gaps_ns: VecDeque<u64>,
    /// Sum of `gaps_ns`, kept so that `mean` is O(1) (u128: 64 gaps of u64 cannot overflow).
    sum_ns: u128,
    last: Option<Instant>,
}

impl Default for AccessStats {
    fn default() -> AccessStats {
        AccessStats::new()
    }
}

impl AccessStats {
    /// Statistics over the default window of [`STATS_WINDOW`] gaps (§3.5).
    pub fn new() -> AccessStats {
        AccessStats::with_window(STATS_WINDOW)
    }

    /// Statistics over the last `window` gaps (at least 1).
    pub fn with_window(window: usize) -> AccessStats {
        assert!(window >= 1, "a window of at least one gap");
        AccessStats { window, gaps_ns: VecDeque::with_capacity(window), sum_ns: 0, last: None }
    }

    /// An access at `now`: the gap since the previous access (if any) joins the window.
    ///
    /// An access earlier than the previous one (a clock or commit timestamp that went back)
    /// counts as a gap of zero and leaves the previous time in place, so a late event cannot
    /// make the next gap look longer than it was.
    pub fn on_access(&mut self, now: Instant) {
        if let Some(last) = self.last {
            self.push_gap(now.saturating_since(last));
        }
        self.last = Some(self.last.map_or(now, |last| last.max(now)));
    }

    /// Adds one gap measured elsewhere; the oldest leaves a full window.
    pub fn push_gap(&mut self, gap: Duration) {
        let gap_ns = u64::try_from(gap.as_nanos()).unwrap_or(u64::MAX);
        if self.gaps_ns.len() == self.window {
            let oldest = self.gaps_ns.pop_front().expect("a full window is not empty");
            self.sum_ns -= u128::from(oldest);
        }
        self.gaps_ns.push_back(gap_ns);
        self.sum_ns += u128::from(gap_ns);
    }

    /// The mean gap (`R` or `W`), to the nanosecond; `None` with no gap yet (§5.10).
    pub fn mean(&self) -> Option<Duration> {
        let n = self.gaps_ns.len() as u128;
        // Rounded to the nearest nanosecond; a mean never exceeds the largest gap, a u64.
        (n > 0).then(|| Duration::from_nanos(((self.sum_ns + n / 2) / n) as u64))
    }

    /// The mean gap in seconds, unrounded; `None` with no gap yet.
    pub fn mean_s(&self) -> Option<f64> {
        let n = self.gaps_ns.len();
        (n > 0).then(|| self.sum_ns as f64 / n as f64 / 1e9)
    }

    /// Gaps in the window (at most the window's size).
    pub fn samples(&self) -> usize {
        self.gaps_ns.len()
    }

    /// The time of the latest access seen.
    pub fn last_access(&self) -> Option<Instant> {
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: u64) -> Instant {
        Instant::from_millis(x)
    }

    #[test]
    fn the_mean_is_undefined_until_a_second_access() {
        let mut s = AccessStats::new();
        assert_eq!((s.mean(), s.mean_s(), s.samples()), (None, None, 0));
        s.on_access(ms(10));
        assert_eq!((s.mean(), s.samples(), s.last_access()), (None, 0, Some(ms(10))));
        s.on_access(ms(13));
        assert_eq!(s.mean(), Some(Duration::from_millis(3)));
        s.on_access(ms(20));
        assert_eq!(s.mean(), Some(Duration::from_millis(5)));
        assert_eq!(s.mean_s(), Some(0.005));
    }

    #[test]
    fn only_the_last_64_gaps_count() {
        let mut s = AccessStats::new();
        let mut t = 0;
        s.on_access(ms(t));
        // 64 gaps of 100 ms, then 64 of 1 ms: the old ones leave one by one.
        for _ in 0..STATS_WINDOW {
            t += 100;
            s.on_access(ms(t));
        }
        assert_eq!(s.mean(), Some(Duration::from_millis(100)));
        for i in 1..=STATS_WINDOW as u64 {
            t += 1;
            s.on_access(ms(t));
            let expected_ns = ((64 - i) * 100 + i) * 1_000_000 / 64;
            assert_eq!(s.mean(), Some(Duration::from_nanos(expected_ns)), "after {i} short gaps");
        }
        assert_eq!(s.mean(), Some(Duration::from_millis(1)));
        assert_eq!(s.samples(), STATS_WINDOW);
    }

    #[test]
    fn an_access_that_goes_back_in_time_is_a_zero_gap() {
        let mut s = AccessStats::with_window(4);
        s.on_access(ms(10));
        s.on_access(ms(8));
        assert_eq!(s.mean(), Some(Duration::ZERO));
        assert_eq!(s.last_access(), Some(ms(10)));
        s.on_access(ms(14));
        assert_eq!(s.mean(), Some(Duration::from_millis(2)), "gaps 0 and 4");
    }

    #[test]
    fn the_mean_rounds_to_the_nearest_nanosecond() {
        let mut s = AccessStats::with_window(3);
        for gap in [1, 1, 2] {
            s.push_gap(Duration::from_nanos(gap));
        }
        assert_eq!(s.mean(), Some(Duration::from_nanos(1)), "4/3 ns");
        s.push_gap(Duration::from_nanos(2));
        assert_eq!(s.mean(), Some(Duration::from_nanos(2)), "5/3 ns");
        assert!((s.mean_s().unwrap() - 5.0 / 3.0 * 1e-9).abs() < 1e-24);
    }
}
