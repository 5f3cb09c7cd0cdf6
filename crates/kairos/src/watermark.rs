//! Watermarks, client freshness and the garbage-collection threshold (kairos.md §5.9, §9.5,
//! §9.10, §9.11).
//!
//! A client computes its report with [`local_wm`] and [`c_freshness`]; every process that
//! hears reports (clients, validators, primaries) folds them into a [`Watermarks`]: `WM` =
//! min of the reported `local_wm` over the static membership, `ts_GC` = the monotone max of
//! the min reported `c_freshness`.

use std::collections::{BTreeMap, BTreeSet};

use crate::timestamp::Timestamp;

/// §5.9 `local_wm = Timestamp(min(now(), min over incomplete RW txns of T.commit.nanos) - 1,
/// u32::MAX)`: below every RW commit timestamp the client has in flight or will issue later
/// (§5.1 takes every RW timestamp `>= now()`). The caller MUST compute it atomically with
/// issuing and registering commit timestamps (§5.9, first bullet).
pub fn local_wm(now_ns: u64, incomplete_rw: impl IntoIterator<Item = Timestamp>) -> Timestamp {
    let floor = incomplete_rw.into_iter().map(|t| t.nanos).fold(now_ns, u64::min);
    match floor.checked_sub(1) {
        Some(nanos) => Timestamp::new(nanos, u32::MAX),
        None => Timestamp::ZERO,
    }
}

/// §5.9 **\[DECISION\]** (§9.5) `c_freshness = min(wm_view, min fts over cache entries, min fts
/// over the read sets of the client's live transactions)`: a lower bound on every `fts` the
/// client may still put into a validated read set (new fetches get `fts >= wm_view`).
///
/// `read_set_fts` MUST also carry, for every `Get` still in flight, the `wm_view` read before
/// sending it (Strata's addition): its answer joins a read set with `fts >= that`, which can
/// be below the `wm_view` of a report sent meanwhile. Without it a client's `c_freshness`
/// goes back (the simulation found it: `tests/occ_sim.rs` asserts no report regresses); a
/// [`Watermarks`] drops such a report, so it would cost `TooOld` aborts, not safety.
pub fn c_freshness(
    wm_view: Timestamp,
    cache_fts: impl IntoIterator<Item = Timestamp>,
    read_set_fts: impl IntoIterator<Item = Timestamp>,
) -> Timestamp {
    cache_fts.into_iter().chain(read_set_fts).fold(wm_view, Timestamp::min)
}

/// One client's `WatermarkReport` (§4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Report {
    pub seq: u64,
    pub local_wm: Timestamp,
    pub c_freshness: Timestamp,
}

/// What [`Watermarks::on_report`] did with a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportOutcome {
    /// Newer than the client's last: `WM` and `ts_GC` recomputed.
    Applied,
    /// Not newer (a duplicate or reordered report): ignored.
    Old,
    /// From a client outside the static membership: counted and dropped.
    UnknownClient,
    /// Newer, but it moves the client's `local_wm` or `c_freshness` back, which a correct
    /// client never does (§5.9): counted and dropped, so `WM` never decreases.
    Regressed,
}

/// `client_reports`, `WM` and `ts_GC` (§3.2, §3.3, §5.9) over a static client membership.
/// A member that has not reported holds both at `ZERO` (its registration value).
#[derive(Clone, Debug)]
pub struct Watermarks {
    members: BTreeSet<u32>,
    reports: BTreeMap<u32, Report>,
    wm: Timestamp,
    ts_gc: Timestamp,
    /// Reports dropped as `UnknownClient` or `Regressed`.
    pub dropped_reports: u64,
}

impl Watermarks {
    pub fn new(members: impl IntoIterator<Item = u32>) -> Watermarks {
        Watermarks {
            members: members.into_iter().collect(),
            reports: BTreeMap::new(),
            wm: Timestamp::ZERO,
            ts_gc: Timestamp::ZERO,
            dropped_reports: 0,
        }
    }

    /// A restarted validator's `ts_GC` starts at its previous persisted value (§6.4).
    pub fn with_ts_gc_floor(mut self, floor: Timestamp) -> Watermarks {
        self.ts_gc = self.ts_gc.max(floor);
        self
    }

    /// Raises `ts_GC` to at least `floor` (monotone; a lower `floor` changes nothing): the
    /// value another process folded from the reports (a shard leader's, stamped into a log
    /// entry).
    pub fn raise_ts_gc(&mut self, floor: Timestamp) {
        self.ts_gc = self.ts_gc.max(floor);
    }

    /// The global watermark `WM`: every transaction with a commit timestamp `<= WM` has
    /// completed (§0, §9.11).
    pub fn wm(&self) -> Timestamp {
        self.wm
    }

    /// `ts_GC` (§0): monotone.
    pub fn ts_gc(&self) -> Timestamp {
        self.ts_gc
    }

    pub fn members(&self) -> &BTreeSet<u32> {
        &self.members
    }

    pub fn report(&self, client: u32) -> Option<&Report> {
        self.reports.get(&client)
    }

    /// §5.9 "on WatermarkReport": keeps the report if its `seq` is newer, then recomputes
    /// `WM = min local_wm` and `ts_GC = max(ts_GC, min c_freshness)`.
    pub fn on_report(&mut self, client: u32, report: Report) -> ReportOutcome {
        if !self.members.contains(&client) {
            self.dropped_reports += 1;
            return ReportOutcome::UnknownClient;
        }
        if let Some(prev) = self.reports.get(&client) {
            if report.seq <= prev.seq {
                return ReportOutcome::Old;
            }
            if report.local_wm < prev.local_wm || report.c_freshness < prev.c_freshness {
                self.dropped_reports += 1;
                return ReportOutcome::Regressed;
            }
        }
        self.reports.insert(client, report);
        let min_of = |f: fn(&Report) -> Timestamp| {
            self.members
                .iter()
                .map(|c| self.reports.get(c).map_or(Timestamp::ZERO, f))
                .min()
                .unwrap_or(Timestamp::ZERO)
        };
        let wm = min_of(|r| r.local_wm);
        let gc = min_of(|r| r.c_freshness);
        debug_assert!(wm >= self.wm, "monotone reports give a monotone WM");
        self.wm = wm;
        self.ts_gc = self.ts_gc.max(gc);
        ReportOutcome::Applied
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(nanos: u64, node: u32) -> Timestamp {
        Timestamp::new(nanos, node)
    }

    fn report(seq: u64, wm: u64, fr: u64) -> Report {
        Report { seq, local_wm: ts(wm, u32::MAX), c_freshness: ts(fr, 0) }
    }

    #[test]
    fn local_wm_is_just_below_now_and_every_incomplete_commit() {
        assert_eq!(local_wm(100, []), ts(99, u32::MAX));
        assert_eq!(local_wm(100, [ts(150, 1), ts(80, 2)]), ts(79, u32::MAX));
        assert!(local_wm(100, [ts(80, 0)]) < ts(80, 0), "below the smallest, whatever its node");
        assert_eq!(local_wm(0, []), Timestamp::ZERO);
    }

    #[test]
    fn c_freshness_is_the_min_of_the_view_the_cache_and_the_read_sets() {
        assert_eq!(c_freshness(ts(50, 0), [], []), ts(50, 0));
        assert_eq!(c_freshness(ts(50, 0), [ts(60, 1), ts(40, 1)], [ts(45, 2)]), ts(40, 1));
        assert_eq!(c_freshness(ts(50, 0), [ts(60, 1)], [ts(30, 2)]), ts(30, 2));
    }

    #[test]
    fn wm_and_ts_gc_wait_for_every_member_and_never_decrease() {
        let mut w = Watermarks::new([1, 2]);
        assert_eq!(w.on_report(1, report(1, 100, 50)), ReportOutcome::Applied);
        assert_eq!((w.wm(), w.ts_gc()), (Timestamp::ZERO, Timestamp::ZERO), "2 has not reported");
        assert_eq!(w.on_report(2, report(1, 80, 70)), ReportOutcome::Applied);
        assert_eq!((w.wm(), w.ts_gc()), (ts(80, u32::MAX), ts(50, 0)));
        assert_eq!(w.on_report(2, report(1, 90, 90)), ReportOutcome::Old);
        assert_eq!(w.on_report(1, report(2, 200, 40)), ReportOutcome::Regressed);
        assert_eq!(w.on_report(3, report(1, 1, 1)), ReportOutcome::UnknownClient);
        assert_eq!(w.dropped_reports, 2);
        assert_eq!(w.on_report(1, report(3, 200, 60)), ReportOutcome::Applied);
        assert_eq!((w.wm(), w.ts_gc()), (ts(80, u32::MAX), ts(60, 0)));
        let floored = Watermarks::new([1]).with_ts_gc_floor(ts(500, 0));
        assert_eq!(floored.ts_gc(), ts(500, 0));
    }
}
