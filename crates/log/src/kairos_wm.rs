//! A Kairos table's watermarks at the shard's leader (kairos.md §5.9, §6.2, §6.5): the latest
//! `WatermarkReport` of each client that reported here, `WM` and `ts_GC`.
//!
//! Soft state of the leader's term (kairos.md §3.3: a primary keeps `ts_GC` and
//! `client_reports`): a new leader starts with no report and `ts_GC` at the applied state's.
//! What makes `TooOld` deterministic is not this table but its output: the leader stamps
//! [`Reports::ts_gc`] into every Kairos prepare it appends (`KairosPrepare::ts_gc`), and the
//! replicated state validates against the highest stamp applied (`state::Kv`), so every
//! replica, a replay and the next leader vote alike.
//!
//! Membership is not static (§5.9 assumes it is): a client is a member while its report is
//! fresher than [`REPORT_TIMEOUT`]. A silent client's report is dropped (§6.5 "removed from
//! the membership", here by a timeout rather than an operator); its later transactions may
//! then abort `TooOld`, which is safe: K2 rests on validation (§5.15), not on watermarks.
//! A client whose RIFL lease expired is no live client at all: its report goes as soon as
//! the leader hears the lease service's word ([`Reports::forget`], from
//! `LogReplica::expire_clients`), and a report under a lease an applied `Expire` entry
//! collected is not taken (the replica checks its applied state), so neither a late report
//! nor the next leader brings it back. A client that only reported to a shard gets no
//! `Expire` entry there, so the leader also refuses reports of the clients it forgot for
//! [`REPORT_TIMEOUT`] after: a report of the old lease still in flight does not make it a
//! member again. (Only one in flight for longer, or one reaching the next leader, could hold
//! `ts_GC` back, for at most [`REPORT_TIMEOUT`].)
//!
//! A leader that **succeeds** others (a leader change, a restart, a moved shard's new group)
//! does not know their members: those clients reported to the previous leader, and reach
//! this one within a report period or a redirect. Until every member has had
//! [`REPORT_TIMEOUT`] to report here, the table's membership is incomplete, so `ts_GC` is
//! not raised and `WM` is `ZERO` (§5.9: a member not heard from holds both at its last
//! report). Otherwise the first reports heard would set `ts_GC` above a reporting member's
//! read set (its transactions abort `TooOld`, found by a `T.validators` shard move:
//! `crates/client/tests/kairos_moves.rs`) and `WM` above its incomplete transactions. A
//! shard's first leader (an empty log) has no such members and starts complete.

use std::collections::BTreeMap;
use std::time::Duration;

use strata_wire::txn::Timestamp;
use strata_wire::Instant;

/// How long a report keeps its client in the membership without a newer one: 100 report
/// periods of 10 ms (kairos.md §3.5), so a client that is only slow is not dropped.
pub const REPORT_TIMEOUT: Duration = Duration::from_secs(1);

/// One client's latest report and when the leader heard it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Heard {
    seq: u64,
    local_wm: Timestamp,
    c_freshness: Timestamp,
    at: Instant,
}

/// What [`Reports::on_report`] did with a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportOutcome {
    /// Newer than the client's last live report (or the first): kept.
    Applied,
    /// Not newer (a duplicate or reordered report): ignored, the client's report is not
    /// refreshed.
    Old,
    /// Newer, but moving the client's `local_wm` or `c_freshness` back, which a correct
    /// client never does (§5.9): dropped and counted, so one faulty client cannot move `WM`
    /// back below what it said before.
    Regressed,
    /// From a client whose lease expired, forgotten less than [`REPORT_TIMEOUT`] ago: a late
    /// report, not taken (module docs).
    Forgotten,
}

/// The leader's `client_reports`, `WM` and `ts_GC` for one shard (kairos.md §3.2, §3.3).
#[derive(Clone, Debug, Default)]
pub struct Reports {
    by_client: BTreeMap<u64, Heard>,
    ts_gc: Timestamp,
    /// From then on every member has had [`REPORT_TIMEOUT`] to report here (module docs);
    /// before it, `ts_GC` stays and `WM` is `ZERO`.
    complete_at: Instant,
    /// The clients [`Reports::forget`] dropped, and when: their late reports are refused for
    /// [`REPORT_TIMEOUT`] after.
    forgotten: BTreeMap<u64, Instant>,
    /// Reports dropped as `Regressed`.
    pub dropped: u64,
}

impl Reports {
    /// A leader's table at the start of its term (`now`): no report, `ts_GC` at least
    /// `floor` (the applied state's: `ts_GC` never goes back across leaders). A `successor`
    /// (the shard had a leader before: its log is not empty) waits for the previous
    /// leaders' members (module docs).
    pub fn new(floor: Timestamp, now: Instant, successor: bool) -> Reports {
        let complete_at = if successor { now + REPORT_TIMEOUT } else { now };
        Reports { ts_gc: floor, complete_at, ..Reports::default() }
    }

    /// Whether every member has had [`REPORT_TIMEOUT`] to report to this leader.
    fn complete(&self, now: Instant) -> bool {
        now >= self.complete_at
    }

    /// §5.9 "on WatermarkReport": keeps the report if it is newer than the client's live one,
    /// then raises `ts_GC` to the minimum `c_freshness` of the live reports.
    pub fn on_report(
        &mut self,
        now: Instant,
        client: u64,
        seq: u64,
        local_wm: Timestamp,
        c_freshness: Timestamp,
    ) -> ReportOutcome {
        self.expire(now);
        if self.forgotten.contains_key(&client) {
            return ReportOutcome::Forgotten;
        }
        if let Some(prev) = self.by_client.get(&client) {
            if seq <= prev.seq {
                return ReportOutcome::Old;
            }
            if local_wm < prev.local_wm || c_freshness < prev.c_freshness {
                self.dropped += 1;
                return ReportOutcome::Regressed;
            }
        }
        self.by_client.insert(client, Heard { seq, local_wm, c_freshness, at: now });
        if self.complete(now) {
            self.raise_ts_gc();
        }
        ReportOutcome::Applied
    }

    /// Drops every report not refreshed within [`REPORT_TIMEOUT`] (§6.5). `ts_GC` stays
    /// where it is (monotone); it may rise at the next report, now that the silent client's
    /// `c_freshness` no longer holds it back.
    pub fn expire(&mut self, now: Instant) {
        self.by_client.retain(|_, h| now < h.at + REPORT_TIMEOUT);
        self.forgotten.retain(|_, &mut at| now < at + REPORT_TIMEOUT);
    }

    /// Drops the reports of `clients`, whose leases expired (module docs), at once rather
    /// than after [`REPORT_TIMEOUT`], and refuses their late reports for [`REPORT_TIMEOUT`];
    /// ids without a report here are ignored. `ts_GC` stays where it is (monotone); it may
    /// rise at the next report, as after [`Reports::expire`].
    pub fn forget(&mut self, now: Instant, clients: impl IntoIterator<Item = u64>) {
        for c in clients {
            if self.by_client.remove(&c).is_some() {
                self.forgotten.insert(c, now);
            }
        }
    }

    /// `ts_GC = max(ts_GC, min c_freshness over live reports)` (§5.9; unchanged with none).
    fn raise_ts_gc(&mut self) {
        if let Some(min) = self.by_client.values().map(|h| h.c_freshness).min() {
            self.ts_gc = self.ts_gc.max(min);
        }
    }

    /// `ts_GC`: monotone over the leader's term.
    pub fn ts_gc(&self) -> Timestamp {
        self.ts_gc
    }

    /// `WM = min local_wm` over the live reports (§5.9), `ZERO` with none or while the
    /// membership is incomplete (module docs). Not monotone here (a client that joins may
    /// report a lower one); clients keep `wm_view = max(wm_view, WM)`.
    pub fn wm(&self, now: Instant) -> Timestamp {
        let min = self.by_client.values().map(|h| h.local_wm).min();
        min.filter(|_| self.complete(now)).unwrap_or(Timestamp::ZERO)
    }

    /// The clients whose reports are live (tests, status).
    pub fn live(&self) -> usize {
        self.by_client.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(nanos: u64) -> Timestamp {
        Timestamp::new(nanos, 0)
    }

    fn at_ms(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    #[test]
    fn wm_and_ts_gc_are_the_minimums_of_the_live_reports() {
        let mut r = Reports::new(Timestamp::ZERO, Instant::ZERO, false);
        assert_eq!((r.wm(at_ms(0)), r.ts_gc()), (Timestamp::ZERO, Timestamp::ZERO), "no report");
        assert_eq!(r.on_report(at_ms(0), 1, 1, ts(100), ts(40)), ReportOutcome::Applied);
        assert_eq!(r.on_report(at_ms(1), 2, 1, ts(90), ts(60)), ReportOutcome::Applied);
        assert_eq!((r.wm(at_ms(0)), r.ts_gc()), (ts(90), ts(40)));
        assert_eq!(r.on_report(at_ms(2), 1, 2, ts(120), ts(70)), ReportOutcome::Applied);
        assert_eq!(
            (r.wm(at_ms(0)), r.ts_gc()),
            (ts(90), ts(60)),
            "the other client holds both back"
        );
    }

    #[test]
    fn a_silent_clients_report_expires_and_stops_holding_ts_gc_back() {
        let mut r = Reports::new(Timestamp::ZERO, Instant::ZERO, false);
        r.on_report(at_ms(0), 1, 1, ts(10), ts(5)); // goes silent
        r.on_report(at_ms(0), 2, 1, ts(100), ts(50));
        assert_eq!((r.wm(at_ms(0)), r.ts_gc()), (ts(10), ts(5)));
        let just_before = REPORT_TIMEOUT.as_millis() as u64 - 1;
        r.on_report(at_ms(just_before), 2, 2, ts(200), ts(150));
        assert_eq!((r.live(), r.ts_gc()), (2, ts(5)), "still live one ms before the timeout");
        r.on_report(at_ms(just_before + 1), 2, 3, ts(300), ts(250));
        assert_eq!(r.live(), 1, "client 1 expired");
        assert_eq!((r.wm(at_ms(0)), r.ts_gc()), (ts(300), ts(250)));
        // Once everyone is silent: no member, WM ZERO, ts_GC kept.
        r.expire(at_ms(10_000));
        assert_eq!((r.live(), r.wm(at_ms(0)), r.ts_gc()), (0, Timestamp::ZERO, ts(250)));
        // The silent client comes back with its old marks: a fresh member, ts_GC unmoved.
        assert_eq!(r.on_report(at_ms(10_001), 1, 2, ts(10), ts(5)), ReportOutcome::Applied);
        assert_eq!((r.wm(at_ms(0)), r.ts_gc()), (ts(10), ts(250)));
    }

    #[test]
    fn ts_gc_is_monotone_and_old_or_regressing_reports_change_nothing() {
        let mut r = Reports::new(ts(30), Instant::ZERO, false);
        r.on_report(at_ms(0), 1, 5, ts(100), ts(20));
        assert_eq!(r.ts_gc(), ts(30), "a new leader's floor: never below the applied ts_GC");
        r.on_report(at_ms(1), 1, 6, ts(110), ts(80));
        assert_eq!(r.ts_gc(), ts(80));
        assert_eq!(r.on_report(at_ms(2), 1, 6, ts(200), ts(90)), ReportOutcome::Old);
        assert_eq!(r.on_report(at_ms(2), 1, 4, ts(200), ts(90)), ReportOutcome::Old);
        assert_eq!(r.on_report(at_ms(3), 1, 7, ts(105), ts(90)), ReportOutcome::Regressed);
        assert_eq!(r.on_report(at_ms(3), 1, 8, ts(120), ts(70)), ReportOutcome::Regressed);
        assert_eq!((r.wm(at_ms(0)), r.ts_gc(), r.dropped), (ts(110), ts(80), 2));
        // A second client with older freshness joins: ts_GC does not go back.
        r.on_report(at_ms(4), 2, 1, ts(50), ts(10));
        assert_eq!((r.wm(at_ms(0)), r.ts_gc()), (ts(50), ts(80)));
    }

    /// A client whose lease expired is forgotten at once (module docs): the others' next
    /// report moves `WM` and `ts_GC` past its marks without waiting for the timeout; `ts_GC`
    /// does not go back.
    #[test]
    fn an_expired_clients_report_goes_at_once() {
        let mut r = Reports::new(Timestamp::ZERO, Instant::ZERO, false);
        r.on_report(at_ms(0), 1, 1, ts(10), ts(5));
        r.on_report(at_ms(0), 2, 1, ts(100), ts(50));
        r.on_report(at_ms(0), 3, 1, ts(80), ts(40));
        assert_eq!((r.wm(at_ms(1)), r.ts_gc()), (ts(10), ts(5)));
        r.forget(at_ms(1), [1, 9]); // 9 never reported here
        assert_eq!((r.live(), r.wm(at_ms(1)), r.ts_gc()), (2, ts(80), ts(5)));
        r.on_report(at_ms(2), 2, 2, ts(110), ts(60));
        assert_eq!((r.wm(at_ms(2)), r.ts_gc()), (ts(80), ts(40)), "long before the timeout");
        r.forget(at_ms(3), [3]);
        r.on_report(at_ms(3), 2, 3, ts(120), ts(70));
        assert_eq!((r.live(), r.wm(at_ms(3)), r.ts_gc()), (1, ts(120), ts(70)));
    }

    /// A report of an expired lease still in flight when the leader forgot its client does
    /// not make the client a member again, so it cannot hold `ts_GC` back; the refusal lasts
    /// [`REPORT_TIMEOUT`], and ids that never reported here are not remembered at all.
    #[test]
    fn a_late_report_of_a_forgotten_client_is_refused() {
        let mut r = Reports::new(Timestamp::ZERO, Instant::ZERO, false);
        r.on_report(at_ms(0), 1, 1, ts(10), ts(5));
        r.on_report(at_ms(0), 2, 1, ts(100), ts(50));
        r.forget(at_ms(10), [1, 9]);
        assert_eq!(r.on_report(at_ms(20), 1, 2, ts(20), ts(6)), ReportOutcome::Forgotten);
        r.on_report(at_ms(30), 2, 2, ts(110), ts(60));
        assert_eq!((r.live(), r.wm(at_ms(30)), r.ts_gc()), (1, ts(110), ts(60)));
        assert_eq!(r.on_report(at_ms(30), 9, 1, ts(90), ts(55)), ReportOutcome::Applied);
        let over = 10 + REPORT_TIMEOUT.as_millis() as u64;
        assert_eq!(r.on_report(at_ms(over), 1, 3, ts(200), ts(70)), ReportOutcome::Applied);
    }

    /// A successor (module docs): client 1 holds an old read set (freshness 40) and reaches
    /// the new leader last; client 2's fresh report comes first. For `REPORT_TIMEOUT` the
    /// leader raises no `ts_GC` and answers `WM` `ZERO`; then both are members and `ts_GC`
    /// stops at client 1's freshness. The control: a first leader takes client 2's report
    /// at once, and `ts_GC` passes client 1's read set.
    #[test]
    fn a_successor_waits_for_the_previous_leaders_members_before_raising_ts_gc() {
        let start = at_ms(5_000);
        let after = |ms| start + Duration::from_millis(ms);
        let mut r = Reports::new(ts(30), start, true);
        r.on_report(after(10), 2, 1, ts(1_000), ts(900));
        assert_eq!((r.wm(after(10)), r.ts_gc()), (Timestamp::ZERO, ts(30)), "incomplete");
        r.on_report(after(400), 1, 7, ts(990), ts(40));
        assert_eq!((r.wm(after(400)), r.ts_gc()), (Timestamp::ZERO, ts(30)));
        let complete = REPORT_TIMEOUT.as_millis() as u64;
        assert_eq!(r.wm(after(complete - 1)), Timestamp::ZERO, "one ms before");
        r.on_report(after(complete), 2, 2, ts(1_100), ts(950));
        assert_eq!((r.wm(after(complete)), r.ts_gc()), (ts(990), ts(40)), "both members");

        let mut first = Reports::new(ts(30), start, false);
        first.on_report(after(10), 2, 1, ts(1_000), ts(900));
        assert_eq!((first.wm(after(10)), first.ts_gc()), (ts(1_000), ts(900)));
    }
}
