//! Timestamps (kairos.md §0, §3.1, §5.1, §9.3): the physical-clock timestamps that order
//! Kairos transactions, a client's monotone clock, and the commit timestamps a client issues.
//!
//! Time is an input: [`ClientClock::now`] takes the process's physical reading (in the
//! simulator, the global time plus an emulated drift) and adds the emulated offset of §9.3.

/// A version / commit timestamp (§0): `nanos` from the issuing process's clock, `node` (the
/// client id) breaking ties, so read-write commit timestamps are unique. Defined in
/// `strata-wire` (log entries, snapshots and replies carry it).
pub use strata_wire::txn::Timestamp;

/// A client's protocol clock (§3.1 `clock`, §9.3): `now() = max(last + 1 ns, physical +
/// offset)`, strictly increasing whatever the physical input does, plus the RW commit
/// timestamps it issued (`last_issued_ts`).
#[derive(Clone, Debug)]
pub struct ClientClock {
    client_id: u32,
    /// The emulated offset of §9.3 (0 in production: the physical clock is the clock).
    offset_ns: i64,
    last_ns: Option<u64>,
    last_issued: Option<Timestamp>,
}

impl ClientClock {
    pub fn new(client_id: u32, offset_ns: i64) -> ClientClock {
        ClientClock { client_id, offset_ns, last_ns: None, last_issued: None }
    }

    pub fn client_id(&self) -> u32 {
        self.client_id
    }

    /// §3.1: the next reading, `max(last + 1 ns, physical_ns + offset)` (saturating at the
    /// ends of `u64`).
    pub fn now(&mut self, physical_ns: u64) -> u64 {
        let shifted = (i128::from(physical_ns) + i128::from(self.offset_ns))
            .clamp(0, i128::from(u64::MAX)) as u64;
        let now = match self.last_ns {
            Some(last) => shifted.max(last.saturating_add(1)),
            None => shifted,
        };
        self.last_ns = Some(now);
        now
    }

    /// The last reading returned, without advancing.
    pub fn last_now(&self) -> Option<u64> {
        self.last_ns
    }

    /// The last RW commit timestamp issued.
    pub fn last_issued(&self) -> Option<Timestamp> {
        self.last_issued
    }

    /// §5.1 RW commit timestamp:
    /// `Timestamp(max(now(), max read vts.nanos + 1, last_issued.nanos + 1), client_id)`, then `last_issued = T.commit`. The two extra terms are the spec's
    /// **\[DECISION\]** (§9.4): they keep `T.commit` above every version read (K1 when a writer
    /// with a fast clock stamped a version "in the future") and unique per client.
    pub fn rw_commit_ts(
        &mut self,
        physical_ns: u64,
        read_vts: impl IntoIterator<Item = Timestamp>,
    ) -> Timestamp {
        let mut nanos = self.now(physical_ns);
        for vts in read_vts {
            nanos = nanos.max(vts.nanos.saturating_add(1));
        }
        if let Some(last) = self.last_issued {
            nanos = nanos.max(last.nanos.saturating_add(1));
        }
        debug_assert!(self.last_issued.is_none_or(|last| nanos > last.nanos), "unique per client");
        self.issue(nanos)
    }

    /// The paper's RW commit timestamp, `T.commit = t_current`, without §5.1's bump: only the
    /// `NoTimestampBump` canary uses it. Still unique per client (the clock is strictly
    /// monotone), but possibly below an earlier bumped one.
    pub fn rw_commit_ts_unbumped(&mut self, physical_ns: u64) -> Timestamp {
        let nanos = self.now(physical_ns);
        self.issue(nanos)
    }

    fn issue(&mut self, nanos: u64) -> Timestamp {
        let ts = Timestamp::new(nanos, self.client_id);
        self.last_issued = Some(ts);
        ts
    }

    /// §5.1 RO commit timestamp: `max fts` over the read set; strict mode (K5)
    /// `max(that, Timestamp(now(), client_id))`. `None` for an empty read set outside strict
    /// mode (§5.4 step 1: such a transaction commits at `ZERO` without validation).
    pub fn ro_commit_ts(
        &mut self,
        read_fts: impl IntoIterator<Item = Timestamp>,
        strict_physical_ns: Option<u64>,
    ) -> Option<Timestamp> {
        let max_fts = read_fts.into_iter().max();
        match strict_physical_ns {
            None => max_fts,
            Some(physical) => {
                let now = Timestamp::new(self.now(physical), self.client_id);
                Some(max_fts.map_or(now, |f| f.max(now)))
            }
        }
    }
}

/// §9.3: the physical reading of a clock that runs `drift_ppm` parts per million fast (slow
/// if negative) since `start_ns`: `base + (base - start) * ppm / 1e6`. The offset is
/// [`ClientClock`]'s, which also makes the readings monotone. Saturates at the ends of `u64`.
pub fn drifted_ns(base_ns: u64, start_ns: u64, drift_ppm: i64) -> u64 {
    let elapsed = i128::from(base_ns) - i128::from(start_ns);
    let drift = elapsed * i128::from(drift_ppm) / 1_000_000;
    (i128::from(base_ns) + drift).clamp(0, i128::from(u64::MAX)) as u64
}

/// K5 commit wait (kairos.md §1.2, §5.5): how long, in base time, until a clock that reads
/// `now_ns` and runs `drift_ppm` fast reaches `until_ns` (0 if it already did; at least 1 ns
/// otherwise, rounded up so that one wait is enough unless the clock was set back).
pub fn base_ns_until(now_ns: u64, until_ns: u64, drift_ppm: i64) -> u64 {
    if now_ns >= until_ns {
        return 0;
    }
    let rate = (1_000_000 + i128::from(drift_ppm)).max(1) as u128;
    let base = (u128::from(until_ns - now_ns) * 1_000_000).div_ceil(rate);
    base.clamp(1, u128::from(u64::MAX)) as u64
}

/// K5 (kairos.md §1.2, §5.5): the clock reading at which a strict transaction committed at
/// `commit` may be reported, `T.commit.nanos + 2 eps`.
pub fn commit_wait_until(commit: Timestamp, eps_ns: u64) -> u64 {
    commit.nanos.saturating_add(eps_ns.saturating_mul(2))
}

/// §5.1 `T.freshness = min fts` over the read set; `None` (no `TooOld` check) if it is empty.
pub fn freshness(read_fts: impl IntoIterator<Item = Timestamp>) -> Option<Timestamp> {
    read_fts.into_iter().min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ts(nanos: u64, node: u32) -> Timestamp {
        Timestamp::new(nanos, node)
    }

    #[test]
    fn timestamps_order_by_nanos_then_node() {
        assert!(ts(1, 9) < ts(2, 0));
        assert!(ts(2, 0) < ts(2, 1));
        assert_eq!(Timestamp::ZERO, Timestamp::default());
        assert!(Timestamp::ZERO < ts(0, 1));
        assert!(ts(u64::MAX, u32::MAX - 1) < Timestamp::MAX);
        assert_eq!(ts(5, 3).to_string(), "5@3");
    }

    #[test]
    fn drift_scales_the_time_elapsed_since_the_start() {
        assert_eq!(drifted_ns(1_000, 1_000, 500), 1_000, "no drift at the start");
        assert_eq!(drifted_ns(2_001_000, 1_000, 500), 2_002_000, "+500 ppm of 2 ms");
        assert_eq!(drifted_ns(2_001_000, 1_000, -1000), 1_999_000, "-1000 ppm of 2 ms");
        assert_eq!(drifted_ns(5, 0, -2_000_000), 0, "saturates at zero");
    }

    #[test]
    fn the_commit_wait_lasts_until_a_drifting_clock_reaches_t_commit_plus_two_eps() {
        let until = commit_wait_until(ts(1_000, 4), 100);
        assert_eq!(until, 1_200);
        assert_eq!(base_ns_until(1_200, until, 0), 0, "reached");
        assert_eq!(base_ns_until(1_000, until, 0), 200);
        // A clock running 1000 ppm slow needs a little more base time, rounded up.
        let wait = base_ns_until(1_000, until, -1000);
        assert_eq!(wait, 201);
        assert!(drifted_ns(wait, 0, -1000) >= 200, "one wait is enough");
        assert_eq!(base_ns_until(1_000, until, 1000), 200, "a fast clock: 199.8 rounded up");
    }

    #[test]
    fn the_clock_adds_its_offset_and_never_repeats_or_goes_back() {
        let mut c = ClientClock::new(7, -400_000);
        assert_eq!(c.now(1_000_000), 600_000);
        assert_eq!(c.now(1_000_000), 600_001, "same physical reading: +1 ns");
        assert_eq!(c.now(500_000), 600_002, "physical time went back");
        assert_eq!(c.now(2_000_000), 1_600_000);
        let mut early = ClientClock::new(1, -1_000_000_000);
        assert_eq!(early.now(5), 0, "saturates at zero");
        assert_eq!(early.now(5), 1);
    }

    #[test]
    fn rw_commit_timestamps_bump_above_reads_and_the_last_issued() {
        let mut c = ClientClock::new(3, 0);
        // The clock is ahead of everything read.
        assert_eq!(c.rw_commit_ts(100, [ts(50, 1)]), ts(100, 3));
        // A version read "from the future" (a writer with a fast clock): vts + 1.
        assert_eq!(c.rw_commit_ts(200, [ts(50, 1), ts(900, 2)]), ts(901, 3));
        // The clock is behind the last issued timestamp: last + 1.
        assert_eq!(c.rw_commit_ts(300, []), ts(902, 3));
        assert_eq!(c.last_issued(), Some(ts(902, 3)));
        // Unbumped (the canary's): just now().
        assert_eq!(c.rw_commit_ts_unbumped(300), ts(301, 3), "the clock read 300 already");
    }

    #[test]
    fn ro_timestamps_are_max_fts_or_now_in_strict_mode() {
        let mut c = ClientClock::new(4, 0);
        assert_eq!(c.ro_commit_ts([ts(10, 1), ts(30, 2), ts(20, 0)], None), Some(ts(30, 2)));
        assert_eq!(c.ro_commit_ts([], None), None);
        assert_eq!(c.ro_commit_ts([ts(10, 1)], Some(100)), Some(ts(100, 4)));
        assert_eq!(c.ro_commit_ts([ts(1000, 1)], Some(101)), Some(ts(1000, 1)));
        assert_eq!(c.ro_commit_ts([], Some(102)), Some(ts(102, 4)));
        assert_eq!(freshness([ts(10, 1), ts(3, 9), ts(20, 0)]), Some(ts(3, 9)));
        assert_eq!(freshness([]), None);
    }

    proptest! {
        /// §5.1: every RW timestamp a client issues is above every version it read and above
        /// every timestamp it issued before, whatever its physical clock does.
        #[test]
        fn rw_timestamps_are_unique_and_above_reads(
            offset in -1_000_000_000i64..1_000_000_000,
            steps in proptest::collection::vec((0u64..2_000_000_000, proptest::collection::vec(0u64..3_000_000_000, 0..4)), 1..40),
        ) {
            let mut c = ClientClock::new(2, offset);
            let mut last: Option<Timestamp> = None;
            let mut last_now = None;
            for (physical, reads) in steps {
                let reads: Vec<Timestamp> = reads.into_iter().map(|n| ts(n, 1)).collect();
                let t = c.rw_commit_ts(physical, reads.iter().copied());
                prop_assert!(reads.iter().all(|r| *r < t));
                prop_assert!(last.is_none_or(|l| l < t));
                prop_assert_eq!(t.node, 2);
                let now = c.now(physical);
                prop_assert!(last_now.is_none_or(|l| l < now));
                last_now = Some(now);
                last = Some(t);
            }
        }
    }
}
