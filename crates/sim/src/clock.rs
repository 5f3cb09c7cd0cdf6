//! Per-node virtual clocks with skew.
//!
//! Kite assumes no synchronized clocks (§1.1, §6 "Clocks"): only local monotonic time drives
//! time-outs. Each simulated node therefore sees `now = offset + global * (1 + drift)`: a fixed
//! offset and a small rate error, both drawn from the seed. The mapping is non-decreasing in
//! global time, so every node's clock is monotonic as long as global time is.

use strata_wire::Instant;

/// Rate errors are bounded well below 100%, which keeps the mapping monotonic.
pub const MAX_DRIFT_PPM: i64 = 1_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NodeClock {
    /// Added to global time, nanoseconds.
    pub offset_ns: u64,
    /// Rate error in parts per million, within `±MAX_DRIFT_PPM`.
    pub drift_ppm: i64,
}

impl NodeClock {
    pub const EXACT: NodeClock = NodeClock { offset_ns: 0, drift_ppm: 0 };

    /// The node's reading at global instant `global`.
    pub fn local(&self, global: Instant) -> Instant {
        let g = i128::from(global.0);
        let skewed =
            g + (g * i128::from(self.drift_ppm)).div_euclid(1_000_000) + i128::from(self.offset_ns);
        Instant(skewed.clamp(0, i128::from(u64::MAX)) as u64)
    }

    /// The earliest global instant at which the node's reading is at least `local`: where a
    /// core's deadline (in its own time) falls on the simulator's queue.
    pub fn global_at(&self, local: Instant) -> Instant {
        if self.local(Instant::ZERO) >= local {
            return Instant::ZERO;
        }
        let span = i128::from(local.0 - self.offset_ns.min(local.0));
        let estimate = (span * 1_000_000 / (1_000_000 + i128::from(self.drift_ppm))).max(0) as u64;
        // The estimate is off by at most a few nanoseconds of rounding; walk to the exact spot.
        let mut g = estimate;
        while self.local(Instant(g)) < local {
            g += 1;
        }
        while g > 0 && self.local(Instant(g - 1)) >= local {
            g -= 1;
        }
        Instant(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_core::Prng;

    #[test]
    fn local_is_monotonic_and_global_at_inverts_it() {
        let mut prng = Prng::new(3);
        for drift_ppm in [-MAX_DRIFT_PPM, -7, 0, 13, MAX_DRIFT_PPM] {
            let c = NodeClock { offset_ns: prng.range(0, 1_000_000_000), drift_ppm };
            let mut last = Instant::ZERO;
            for g in (0..5_000_000_000u64).step_by(9_999_991) {
                let l = c.local(Instant(g));
                assert!(l >= last, "clock went back at {g}");
                last = l;
                let back = c.global_at(l);
                assert!(back.0 <= g && c.local(back) >= l);
            }
            assert_eq!(c.global_at(Instant::ZERO), Instant::ZERO);
        }
    }
}
