//! The checkers of kairos.md §7 over a recorded [`History`]. Each returns the violations it
//! found; each has a canary (a planted bug in `tests/occ_sim.rs`, and a known-bad hand-made
//! history in this module's tests) that it must flag.
//!
//! | checker | §7 | what |
//! |---|---|---|
//! | [`replay`] (a) | inv. 1, 5 | committed transactions replayed in `(T.commit, RW before RO)` order read exactly what they observed; RW commits above every version read |
//! | [`stale_reads`] (b) | inv. 3, K2 | global-time oracle: when a committed `T` was validated at `k`'s validator, no newer committed version of `k` and no other prepared write of `k` existed |
//! | [`version_order`] (c) | inv. 2 | per site and key, installed versions strictly increase and equal the writer's `T.commit`; RW commit timestamps are unique |
//! | [`atomicity`] (d) | inv. 4, K3 | a committed RW transaction's writes are installed at every primary and validator of its keys; an aborted one's nowhere |
//! | [`prepared_exclusivity`] (e) | inv. 8 | per validator and key, the prepared intervals (Commit vote → decision applied) of writers never overlap, and none is left at the end |
//! | [`gc_safety`] (f) | inv. 7 | `WM`, `ts_GC` never decrease; a pruned version is below `ts_GC`; no Commit vote with `T.freshness < ts_GC` or below a version already pruned there |
//! | [`freshness`] (g) | inv. 6 | no committed write of a key has a timestamp in `(vts, fts]` of any read of it |
//! | [`self_invalidation`] (h) | inv. 10 | no cache hit from an entry past its lease end (`lts < now` on the client's clock) |
//! | [`real_time_order`] (i) | inv. 11, K5 | strict mode with clock error within `eps`: a committed `T1` reported before a committed `T2` began precedes it in the serial order (`T1.commit < T2.commit`) |
//! | [`no_server_lease_state`] (j) | inv. 12 | unless the cache policy is explicit invalidation, no primary held a sharer or sent an `Invalidate` |
//!
//! [`check_all`] runs (i) only on strict runs whose recorded clock spread is within `eps`
//! (the invariant's premise); a run outside it may fail (i) by design (K5), which the tests
//! show by calling [`real_time_order`] directly.

use std::collections::BTreeMap;
use std::fmt;

use strata_wire::txn::TxnId;

use super::history::{History, Moment, Site, TxnKind, TxnRecord, ValidationRecord};
use crate::lease::LeasePolicy;
use crate::primary::SharerStats;
use crate::timestamp::Timestamp;
use crate::validator::{Key, Vote};

/// Which checker flagged a violation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Checker {
    Replay,
    StaleRead,
    VersionOrder,
    Atomicity,
    PreparedExclusivity,
    GcSafety,
    Freshness,
    SelfInvalidation,
    RealTimeOrder,
    ServerLeaseState,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub checker: Checker,
    pub what: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.checker, self.what)
    }
}

fn v(checker: Checker, what: String) -> Violation {
    Violation { checker, what }
}

/// Every checker whose premise the run meets ((i) needs strict mode with clock error within
/// `eps`).
pub fn check_all(h: &History) -> Vec<Violation> {
    let mut out = replay(h);
    out.extend(stale_reads(h));
    out.extend(version_order(h));
    out.extend(atomicity(h));
    out.extend(prepared_exclusivity(h));
    out.extend(gc_safety(h));
    out.extend(freshness(h));
    out.extend(self_invalidation(h));
    if h.clocks.strict_within_eps() {
        out.extend(real_time_order(h));
    }
    out.extend(no_server_lease_state(h));
    out
}

/// The position of a committed transaction in K1's serial order.
fn serial_key(t: &TxnRecord) -> (Timestamp, TxnKind) {
    (t.commit_ts, t.kind)
}

/// (i) §7 inv. 11 (K5): for every pair of committed transactions where `T1` was reported to
/// the application before `T2` began (global time), `T1` precedes `T2` in the serial order:
/// `T1.commit < T2.commit`, or equal with `T1` RW and `T2` RO (K1's tie rule). Holds in
/// strict mode when the clock error is within `eps`; any other run may fail it (K5). One
/// violation per late `T2`, naming the latest-ordered `T1` it contradicts.
pub fn real_time_order(h: &History) -> Vec<Violation> {
    let mut done: Vec<(Moment, &TxnRecord)> =
        committed(h).filter_map(|t| Some((t.reported_at?, t))).collect();
    done.sort_by_key(|(at, _)| *at);
    // prefix[i]: the transaction latest in the serial order among the first i + 1 reported.
    let mut prefix: Vec<&TxnRecord> = Vec::with_capacity(done.len());
    for (_, t) in &done {
        let best = match prefix.last() {
            Some(b) if serial_key(b) >= serial_key(t) => *b,
            _ => *t,
        };
        prefix.push(best);
    }
    let mut out = Vec::new();
    for t2 in committed(h) {
        let n = done.partition_point(|(at, _)| *at < t2.begun_at);
        let Some(t1) = n.checked_sub(1).map(|i| prefix[i]) else { continue };
        if serial_key(t1) >= serial_key(t2) {
            out.push(v(
                Checker::RealTimeOrder,
                format!(
                    "{} (client {}, commit {}) was reported at {} ns, before {} (client {}) began \
                     at {} ns, yet {} committed at {}",
                    t1.id,
                    t1.client,
                    t1.commit_ts,
                    t1.reported_at.map_or(0, |m| m.ns),
                    t2.id,
                    t2.client,
                    t2.begun_at.ns,
                    t2.id,
                    t2.commit_ts
                ),
            ));
        }
    }
    out
}

/// (j) §7 inv. 12: in lease mode (and with naive caching or no cache) the primaries keep no
/// sharer lists and send no invalidations: every counter of every primary is zero.
pub fn no_server_lease_state(h: &History) -> Vec<Violation> {
    if h.cache_policy == Some(LeasePolicy::ExplicitInvalidation) {
        return Vec::new();
    }
    let busy = h.sharers.iter().enumerate().filter(|(_, s)| **s != SharerStats::default());
    busy.map(|(shard, s)| {
        v(
            Checker::ServerLeaseState,
            format!(
                "primary {shard} held {} sharer entries (at most {} at once) and sent {} \
                 invalidations under the cache policy {:?}",
                s.registrations, s.max_held, s.invalidations, h.cache_policy
            ),
        )
    })
    .collect()
}

/// Not a checker: the cross-client real-time dependencies a run gave (i) to judge directly —
/// committed `T2` read the version committed `T1` (another client) wrote, and `T1` was
/// reported before `T2` began.
pub fn real_time_reads_from(h: &History) -> u64 {
    let writers: BTreeMap<(&Key, Timestamp), &TxnRecord> = committed(h)
        .flat_map(|t| t.writes.iter().map(move |(k, _)| ((k, t.commit_ts), t)))
        .collect();
    committed(h)
        .flat_map(|t2| t2.reads.iter().map(move |r| (t2, r)))
        .filter(|(t2, r)| {
            writers.get(&(&r.key, r.vts)).is_some_and(|t1| {
                t1.client != t2.client && t1.reported_at.is_some_and(|at| at < t2.begun_at)
            })
        })
        .count() as u64
}

/// (h) §7 inv. 10: no cache hit is served from an entry whose lease ended (`lts < now` on the
/// client's own clock).
pub fn self_invalidation(h: &History) -> Vec<Violation> {
    let hits = h.txns.iter().flat_map(|t| t.reads.iter().map(move |r| (t, r)));
    hits.filter_map(|(t, r)| {
        let (now, lts) = r.lease?;
        (lts < now).then(|| {
            v(
                Checker::SelfInvalidation,
                format!(
                    "client {} served {:?} from its cache at {} ns, past the lease end {} ns",
                    t.client,
                    r.key,
                    now.as_nanos(),
                    lts.as_nanos()
                ),
            )
        })
    })
    .collect()
}

fn committed(h: &History) -> impl Iterator<Item = &TxnRecord> {
    h.txns.iter().filter(|t| t.committed())
}

/// (a) K1: serial replay in commit-timestamp order, RW before RO at equal timestamps, from
/// the initial load (every key absent at `ZERO`).
pub fn replay(h: &History) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut order: Vec<&TxnRecord> = committed(h).collect();
    order.sort_by_key(|t| (t.commit_ts, t.kind));
    let mut store: BTreeMap<Key, (Option<bytes::Bytes>, Timestamp)> = BTreeMap::new();
    for t in order {
        for r in &t.reads {
            let (value, vts) = store.get(&r.key).cloned().unwrap_or((None, Timestamp::ZERO));
            if (&value, vts) != (&r.value, r.vts) {
                out.push(v(
                    Checker::Replay,
                    format!(
                        "{} (commit {}) read {:?} = {:?}@{} but the serial order gives {:?}@{}",
                        t.id, t.commit_ts, r.key, r.value, r.vts, value, vts
                    ),
                ));
            }
            if t.kind == TxnKind::ReadWrite && r.vts >= t.commit_ts {
                out.push(v(
                    Checker::Replay,
                    format!(
                        "RW {} commits at {} not above the version {} of {:?} it read",
                        t.id, t.commit_ts, r.vts, r.key
                    ),
                ));
            }
        }
        for (k, value) in &t.writes {
            store.insert(k.clone(), (value.clone(), t.commit_ts));
        }
    }
    out
}

/// The first validation of each transaction at each validator (a duplicate gets the same
/// recorded vote, and under FIFO links the first answer is the one the coordinator used).
fn first_validations(h: &History) -> BTreeMap<(usize, TxnId), &ValidationRecord> {
    let mut m = BTreeMap::new();
    for r in &h.validations {
        m.entry((r.validator, r.txn)).or_insert(r);
    }
    m
}

fn first_decisions(h: &History) -> BTreeMap<(Site, TxnId), Moment> {
    let mut m = BTreeMap::new();
    for d in &h.decisions {
        m.entry((d.site, d.txn)).or_insert(d.at);
    }
    m
}

/// (b) K2 with an oracle that knows global time: for every committed `T` and read `(k, v)`,
/// at the moment `T` was validated at `k`'s validator, (1) no write of `k` with a timestamp
/// above `v` had its COMMIT logged by its coordinator, and (2) no other transaction's write of
/// `k` was prepared there (Commit vote given, decision not yet applied).
pub fn stale_reads(h: &History) -> Vec<Violation> {
    let mut out = Vec::new();
    let validations = first_validations(h);
    let decisions = first_decisions(h);
    let mut writers: BTreeMap<&Key, Vec<&TxnRecord>> = BTreeMap::new();
    for t in &h.txns {
        for (k, _) in &t.writes {
            writers.entry(k).or_default().push(t);
        }
    }
    for t in committed(h) {
        for r in &t.reads {
            let Some((vk, _)) = h.owners(&r.key) else { continue };
            let Some(tv) = validations.get(&(vk, t.id)).map(|x| x.at) else {
                out.push(v(
                    Checker::StaleRead,
                    format!("{} committed without validating {:?} at validator {vk}", t.id, r.key),
                ));
                continue;
            };
            for w in writers.get(&r.key).into_iter().flatten() {
                if w.id == t.id {
                    continue;
                }
                if w.committed() && w.commit_ts > r.vts && w.decided_at.is_some_and(|d| d < tv) {
                    out.push(v(
                        Checker::StaleRead,
                        format!(
                            "{} read {:?}@{} and committed, but {} had committed {} before the validation",
                            t.id, r.key, r.vts, w.id, w.commit_ts
                        ),
                    ));
                }
                let prepared_from = validations
                    .get(&(vk, w.id))
                    .filter(|x| x.vote == Vote::Commit && x.writes.contains(&r.key))
                    .map(|x| x.at);
                if let Some(pv) = prepared_from {
                    let cleared = decisions.get(&(Site::Validator(vk), w.id));
                    if pv < tv && cleared.is_none_or(|d| *d > tv) {
                        out.push(v(
                            Checker::StaleRead,
                            format!(
                                "{} read {:?} and committed while {}'s write of it was prepared",
                                t.id, r.key, w.id
                            ),
                        ));
                    }
                }
            }
        }
    }
    out
}

/// (c) Version order (§7 inv. 2).
pub fn version_order(h: &History) -> Vec<Violation> {
    let mut out = Vec::new();
    let by_id: BTreeMap<TxnId, &TxnRecord> = h.txns.iter().map(|t| (t.id, t)).collect();
    let mut last: BTreeMap<(Site, &Key), Timestamp> = BTreeMap::new();
    for i in &h.installs {
        if let Some(prev) = last.insert((i.site, &i.key), i.ts) {
            if i.ts <= prev {
                out.push(v(
                    Checker::VersionOrder,
                    format!("{:?} installed {:?}@{} after {}", i.site, i.key, i.ts, prev),
                ));
            }
        }
        match by_id.get(&i.txn) {
            Some(t) if t.commit_ts == i.ts && t.committed() => {}
            _ => out.push(v(
                Checker::VersionOrder,
                format!(
                    "{:?} installed {:?}@{} for {}, not its commit",
                    i.site, i.key, i.ts, i.txn
                ),
            )),
        }
    }
    let mut seen: BTreeMap<Timestamp, TxnId> = BTreeMap::new();
    for t in h.txns.iter().filter(|t| t.kind == TxnKind::ReadWrite && t.outcome.is_some()) {
        if let Some(other) = seen.insert(t.commit_ts, t.id) {
            out.push(v(
                Checker::VersionOrder,
                format!("{} and {} share the RW commit timestamp {}", other, t.id, t.commit_ts),
            ));
        }
    }
    out
}

/// (d) Atomicity (K3, §7 inv. 4). A committed write a primary skipped as superseded counts
/// as applied only if a newer version of the key was installed there before.
pub fn atomicity(h: &History) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut installed: BTreeMap<(TxnId, Site, &Key), Timestamp> = BTreeMap::new();
    for i in &h.installs {
        installed.insert((i.txn, i.site, &i.key), i.ts);
    }
    for s in &h.superseded {
        let newer = h
            .installs
            .iter()
            .any(|i| i.site == s.site && i.key == s.key && i.ts > s.ts && i.at < s.at);
        if newer {
            installed.insert((s.txn, s.site, &s.key), s.ts);
        } else {
            out.push(v(
                Checker::Atomicity,
                format!(
                    "{:?} skipped {}'s {:?}@{} with no newer version",
                    s.site, s.txn, s.key, s.ts
                ),
            ));
        }
    }
    for t in h.txns.iter().filter(|t| t.kind == TxnKind::ReadWrite) {
        for (k, _) in &t.writes {
            let Some((vk, shard)) = h.owners(k) else { continue };
            for site in [Site::Primary(shard), Site::Validator(vk)] {
                let got = installed.get(&(t.id, site, k));
                if t.committed() && got != Some(&t.commit_ts) {
                    out.push(v(
                        Checker::Atomicity,
                        format!("committed {} has no {:?}@{} at {:?}", t.id, k, t.commit_ts, site),
                    ));
                }
                if !t.committed() && got.is_some() {
                    out.push(v(
                        Checker::Atomicity,
                        format!("aborted {} installed {:?} at {:?}", t.id, k, site),
                    ));
                }
            }
        }
    }
    out
}

/// (e) Prepared exclusivity (§7 inv. 8), from votes and decision deliveries.
pub fn prepared_exclusivity(h: &History) -> Vec<Violation> {
    let mut out = Vec::new();
    let decisions = first_decisions(h);
    // Per (validator, key): (prepared from, cleared at, by).
    type Interval = (Moment, Option<Moment>, TxnId);
    let mut intervals: BTreeMap<(usize, &Key), Vec<Interval>> = BTreeMap::new();
    for r in first_validations(h).values().filter(|r| r.vote == Vote::Commit) {
        let end = decisions.get(&(Site::Validator(r.validator), r.txn)).copied();
        for k in &r.writes {
            intervals.entry((r.validator, k)).or_default().push((r.at, end, r.txn));
        }
    }
    for ((val, k), mut list) in intervals {
        list.sort();
        for w in list.windows(2) {
            let (_, end, a) = w[0];
            let (start, _, b) = w[1];
            if end.is_none_or(|e| e > start) {
                out.push(v(
                    Checker::PreparedExclusivity,
                    format!("validator {val}: {a} and {b} both held {k:?} prepared"),
                ));
            }
        }
    }
    for (site, txn) in &h.leftover_prepared {
        out.push(v(
            Checker::PreparedExclusivity,
            format!("{txn} still prepared at {site:?} at the end"),
        ));
    }
    out
}

/// (f) GC safety (§7 inv. 7, §5.9).
pub fn gc_safety(h: &History) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut last: BTreeMap<usize, (Timestamp, Timestamp)> = BTreeMap::new();
    for g in &h.gc_states {
        if let Some((wm, gc)) = last.insert(g.validator, (g.wm, g.ts_gc)) {
            if g.wm < wm || g.ts_gc < gc {
                out.push(v(
                    Checker::GcSafety,
                    format!(
                        "validator {}: WM/ts_GC went back from {wm}/{gc} to {}/{}",
                        g.validator, g.wm, g.ts_gc
                    ),
                ));
            }
        }
    }
    for p in &h.prunes {
        if p.version >= p.ts_gc {
            out.push(v(
                Checker::GcSafety,
                format!(
                    "validator {} pruned {:?}@{} not below ts_GC {}",
                    p.validator, p.key, p.version, p.ts_gc
                ),
            ));
        }
    }
    // Commit votes against ts_GC and against what was already pruned, in event order.
    enum E<'a> {
        Prune(Timestamp),
        Vote(&'a ValidationRecord),
    }
    let mut events: Vec<(usize, Moment, E<'_>)> =
        h.prunes.iter().map(|p| (p.validator, p.at, E::Prune(p.version))).collect();
    events.extend(
        h.validations
            .iter()
            .filter(|r| r.vote == Vote::Commit)
            .map(|r| (r.validator, r.at, E::Vote(r))),
    );
    events.sort_by_key(|(val, at, _)| (*val, *at));
    let mut max_pruned: BTreeMap<usize, Timestamp> = BTreeMap::new();
    for (val, _, e) in events {
        match e {
            E::Prune(version) => {
                let m = max_pruned.entry(val).or_insert(version);
                *m = (*m).max(version);
            }
            E::Vote(r) => {
                let Some(f) = r.freshness else { continue };
                if f < r.ts_gc {
                    out.push(v(
                        Checker::GcSafety,
                        format!(
                            "validator {val} voted Commit for {} with freshness {f} < ts_GC {}",
                            r.txn, r.ts_gc
                        ),
                    ));
                }
                if let Some(m) = max_pruned.get(&val).filter(|m| **m >= f) {
                    out.push(v(
                        Checker::GcSafety,
                        format!(
                            "validator {val} voted Commit for {} (freshness {f}) after pruning {m}",
                            r.txn
                        ),
                    ));
                }
            }
        }
    }
    out
}

/// (g) Freshness soundness (§7 inv. 6): `fts` promises no committed write in `(vts, fts]`.
pub fn freshness(h: &History) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut versions: BTreeMap<&Key, Vec<(Timestamp, TxnId)>> = BTreeMap::new();
    for t in committed(h) {
        for (k, _) in &t.writes {
            versions.entry(k).or_default().push((t.commit_ts, t.id));
        }
    }
    for t in &h.txns {
        for r in &t.reads {
            for (ts, w) in versions.get(&r.key).into_iter().flatten() {
                if r.vts < *ts && *ts <= r.fts {
                    out.push(v(
                        Checker::Freshness,
                        format!(
                            "{} read {:?}@{} with fts {} but {w} committed it at {ts}",
                            t.id, r.key, r.vts, r.fts
                        ),
                    ));
                }
            }
        }
    }
    out
}

/// Not a checker: how many cache hits served a value already superseded (a write of the key
/// with a larger timestamp had its COMMIT logged before the hit). The stale-read oracle
/// requires every transaction that read one to abort.
pub fn stale_cache_hits(h: &History) -> u64 {
    let mut commits: BTreeMap<&Key, Vec<(Timestamp, Moment)>> = BTreeMap::new();
    for t in committed(h) {
        for (k, _) in &t.writes {
            commits.entry(k).or_default().push((t.commit_ts, t.decided_at.expect("decided")));
        }
    }
    let hits = h.txns.iter().flat_map(|t| &t.reads).filter(|r| r.cache_hit);
    hits.filter(|r| {
        commits.get(&r.key).into_iter().flatten().any(|(ts, d)| *ts > r.vts && *d < r.at)
    })
    .count() as u64
}

#[cfg(test)]
mod tests {
    //! Known-bad hand-made histories: each checker must flag its own.
    use bytes::Bytes;

    use super::*;
    use crate::sim::history::*;
    use crate::validator::AbortReason;
    use strata_wire::Instant;

    fn ts(n: u64) -> Timestamp {
        Timestamp::new(n, 0)
    }
    fn k(s: &str) -> Key {
        Bytes::copy_from_slice(s.as_bytes())
    }
    fn id(n: u64) -> TxnId {
        TxnId { client_id: 0, base: n }
    }
    fn at(step: u64) -> Moment {
        Moment { step, ns: step }
    }
    fn txn(
        n: u64,
        commit: u64,
        reads: &[(&str, u64, u64)],
        writes: &[&str],
        decided: u64,
    ) -> TxnRecord {
        TxnRecord {
            id: id(n),
            client: 0,
            kind: if writes.is_empty() { TxnKind::ReadOnly } else { TxnKind::ReadWrite },
            reads: reads
                .iter()
                .map(|(key, vts, fts)| ReadRecord {
                    key: k(key),
                    value: (*vts > 0).then(|| Bytes::from(format!("v{vts}"))),
                    vts: ts(*vts),
                    fts: ts(*fts),
                    cache_hit: false,
                    lease: None,
                    at: at(0),
                })
                .collect(),
            writes: writes
                .iter()
                .map(|w| (k(w), Some(Bytes::from(format!("v{commit}")))))
                .collect(),
            commit_ts: ts(commit),
            freshness: reads.iter().map(|r| ts(r.2)).min(),
            outcome: Some(Outcome::Committed),
            decided_at: Some(at(decided)),
            begun_at: at(0),
            reported_at: Some(at(decided)),
        }
    }
    fn validation(n: u64, step: u64, reads: &[(&str, u64)], writes: &[&str]) -> ValidationRecord {
        ValidationRecord {
            validator: 0,
            txn: id(n),
            at: at(step),
            vote: Vote::Commit,
            freshness: None,
            ts_gc: Timestamp::ZERO,
            reads: reads.iter().map(|(key, v)| (k(key), ts(*v))).collect(),
            writes: writes.iter().map(|w| k(w)).collect(),
        }
    }
    fn install(site: Site, key: &str, t: u64, n: u64, step: u64) -> Install {
        Install { site, key: k(key), ts: ts(t), txn: id(n), at: at(step) }
    }
    fn base() -> History {
        History { placement: vec![(k("x"), 0, 0), (k("y"), 0, 0)], ..History::default() }
    }
    fn only(found: Vec<Violation>, checker: Checker) {
        assert!(!found.is_empty(), "{checker:?} must flag the bad history");
        assert!(found.iter().all(|x| x.checker == checker), "{found:?}");
    }

    /// A correct little history passes every checker.
    #[test]
    fn a_correct_history_passes() {
        let mut h = base();
        h.txns = vec![txn(1, 10, &[], &["x"], 3), txn(2, 20, &[("x", 10, 10)], &["y"], 7)];
        h.validations = vec![validation(1, 1, &[], &["x"]), validation(2, 5, &[("x", 10)], &["y"])];
        h.decisions = vec![
            DecisionApplied { site: Site::Validator(0), txn: id(1), at: at(4) },
            DecisionApplied { site: Site::Primary(0), txn: id(1), at: at(4) },
            DecisionApplied { site: Site::Validator(0), txn: id(2), at: at(8) },
            DecisionApplied { site: Site::Primary(0), txn: id(2), at: at(8) },
        ];
        h.installs = vec![
            install(Site::Validator(0), "x", 10, 1, 4),
            install(Site::Primary(0), "x", 10, 1, 4),
            install(Site::Validator(0), "y", 20, 2, 8),
            install(Site::Primary(0), "y", 20, 2, 8),
        ];
        assert_eq!(check_all(&h), vec![]);
    }

    /// (a) T2 (commit 20) read x's initial value although T1 wrote x at 10.
    #[test]
    fn replay_flags_a_read_that_skips_an_earlier_write() {
        let mut h = base();
        h.txns = vec![txn(1, 10, &[], &["x"], 1), txn(2, 20, &[("x", 0, 0)], &[], 2)];
        only(replay(&h), Checker::Replay);
        // And the K1 tie rule: an RO at the RW's timestamp comes after it.
        h.txns = vec![txn(1, 10, &[], &["x"], 1), txn(2, 10, &[("x", 0, 0)], &[], 2)];
        only(replay(&h), Checker::Replay);
        h.txns[1].reads[0].vts = ts(10);
        h.txns[1].reads[0].value = Some(Bytes::from("v10"));
        assert_eq!(replay(&h), vec![]);
    }

    /// (b) T2 read x@0 and validated at step 5, after T1's commit of x was logged (step 3).
    #[test]
    fn the_oracle_flags_a_committed_stale_read() {
        let mut h = base();
        h.txns = vec![txn(1, 10, &[], &["x"], 3), txn(2, 5, &[("x", 0, 0)], &[], 6)];
        h.validations = vec![validation(1, 1, &[], &["x"]), validation(2, 5, &[("x", 0)], &[])];
        h.decisions = vec![DecisionApplied { site: Site::Validator(0), txn: id(1), at: at(9) }];
        let found = stale_reads(&h);
        assert_eq!(found.len(), 2, "committed before, and still prepared: {found:?}");
        only(found, Checker::StaleRead);
        // Validated before T1 even voted: fine (T2 is serialised first).
        h.validations[1].at = at(0);
        assert_eq!(stale_reads(&h), vec![]);
    }

    /// (c) y installed at 20 then 15, and a version that is no commit timestamp.
    #[test]
    fn version_order_flags_a_version_going_back() {
        let mut h = base();
        h.txns = vec![txn(1, 20, &[], &["y"], 1), txn(2, 15, &[], &["y"], 2)];
        h.installs = vec![
            install(Site::Primary(0), "y", 20, 1, 1),
            install(Site::Primary(0), "y", 15, 2, 2),
        ];
        only(version_order(&h), Checker::VersionOrder);
        h.installs = vec![install(Site::Primary(0), "y", 21, 1, 1)];
        only(version_order(&h), Checker::VersionOrder);
        h.installs = vec![];
        h.txns[1].commit_ts = ts(20);
        only(version_order(&h), Checker::VersionOrder);
    }

    /// (d) A committed write missing at its primary; an aborted one installed.
    #[test]
    fn atomicity_flags_partial_and_aborted_installs() {
        let mut h = base();
        h.txns = vec![txn(1, 10, &[], &["x"], 1)];
        h.installs = vec![install(Site::Validator(0), "x", 10, 1, 2)];
        only(atomicity(&h), Checker::Atomicity);
        h.installs.push(install(Site::Primary(0), "x", 10, 1, 2));
        assert_eq!(atomicity(&h), vec![]);
        h.txns[0].outcome = Some(Outcome::Aborted(vec![Vote::Abort(AbortReason::Refused)]));
        only(atomicity(&h), Checker::Atomicity);
        // A write skipped as superseded needs a newer version installed before.
        h.txns[0].outcome = Some(Outcome::Committed);
        h.installs = vec![install(Site::Validator(0), "x", 10, 1, 2)];
        h.superseded = vec![install(Site::Primary(0), "x", 10, 1, 3)];
        only(atomicity(&h), Checker::Atomicity);
        h.txns.push(txn(2, 12, &[], &["x"], 1));
        h.installs.push(install(Site::Primary(0), "x", 12, 2, 2));
        h.installs.push(install(Site::Validator(0), "x", 12, 2, 2));
        assert_eq!(atomicity(&h), vec![]);
    }

    /// (e) T2's write of x prepared while T1's still was; a prepared write left over.
    #[test]
    fn exclusivity_flags_overlapping_prepared_writes() {
        let mut h = base();
        h.validations = vec![validation(1, 1, &[], &["x"]), validation(2, 2, &[], &["x"])];
        h.decisions = vec![
            DecisionApplied { site: Site::Validator(0), txn: id(1), at: at(3) },
            DecisionApplied { site: Site::Validator(0), txn: id(2), at: at(4) },
        ];
        only(prepared_exclusivity(&h), Checker::PreparedExclusivity);
        h.validations[1].at = at(3);
        assert_eq!(prepared_exclusivity(&h), vec![]);
        h.leftover_prepared.push((Site::Validator(0), id(3)));
        only(prepared_exclusivity(&h), Checker::PreparedExclusivity);
    }

    /// (f) ts_GC going back, a prune at ts_GC, a Commit vote below ts_GC and one below a
    /// pruned version.
    #[test]
    fn gc_safety_flags_each_rule() {
        let gc = |step, wm, gc| GcState { validator: 0, at: at(step), wm: ts(wm), ts_gc: ts(gc) };
        let mut h = base();
        h.gc_states = vec![gc(1, 50, 30), gc(2, 60, 20)];
        only(gc_safety(&h), Checker::GcSafety);
        let mut h = base();
        h.prunes =
            vec![Prune { validator: 0, key: k("x"), version: ts(30), ts_gc: ts(30), at: at(1) }];
        only(gc_safety(&h), Checker::GcSafety);
        let mut h = base();
        let mut r = validation(1, 3, &[("x", 5)], &[]);
        r.freshness = Some(ts(10));
        r.ts_gc = ts(11);
        h.validations = vec![r.clone()];
        only(gc_safety(&h), Checker::GcSafety);
        r.ts_gc = ts(10);
        h.validations = vec![r];
        assert_eq!(gc_safety(&h), vec![]);
        h.prunes =
            vec![Prune { validator: 0, key: k("y"), version: ts(12), ts_gc: ts(13), at: at(2) }];
        only(gc_safety(&h), Checker::GcSafety);
    }

    /// (g) x read at 0 with fts 20, but a committed write of x at 15.
    #[test]
    fn freshness_flags_an_fts_that_promised_too_much() {
        let mut h = base();
        h.txns = vec![txn(1, 15, &[], &["x"], 1), txn(2, 30, &[("x", 0, 20)], &[], 2)];
        h.txns[1].outcome = Some(Outcome::Aborted(vec![]));
        only(freshness(&h), Checker::Freshness);
        h.txns[1].reads[0].fts = ts(14);
        assert_eq!(freshness(&h), vec![]);
    }

    /// (h) a hit at 7 ms from an entry whose lease ended at 6 ms; a hit at its end is fine.
    #[test]
    fn self_invalidation_flags_a_hit_past_the_lease() {
        let mut h = base();
        h.txns = vec![txn(1, 30, &[("x", 0, 0)], &[], 2)];
        h.txns[0].reads[0].cache_hit = true;
        h.txns[0].reads[0].lease = Some((Instant::from_millis(7), Instant::from_millis(6)));
        only(self_invalidation(&h), Checker::SelfInvalidation);
        h.txns[0].reads[0].lease = Some((Instant::from_millis(6), Instant::from_millis(6)));
        assert_eq!(self_invalidation(&h), vec![]);
    }

    /// (i) T1 (commit 30) reported at step 5; T2 began at step 6 and committed at 20. A run
    /// within eps is judged by check_all, one outside is not; T2 beginning at step 5 (before
    /// the report) or committing above 30 is fine, and so is an RO at T1's RW timestamp.
    #[test]
    fn real_time_order_flags_a_later_transaction_ordered_first() {
        let mut h = base();
        h.txns = vec![txn(1, 30, &[], &["x"], 5), txn(2, 20, &[("y", 0, 20)], &[], 7)];
        h.txns[1].begun_at = at(6);
        h.txns[1].client = 1;
        only(real_time_order(&h), Checker::RealTimeOrder);
        let applied = |h: &History| {
            check_all(h).iter().filter(|x| x.checker == Checker::RealTimeOrder).count()
        };
        assert_eq!(applied(&h), 0, "not strict: (i) is not applied");
        h.clocks = Clocks { strict_eps_ns: Some(100), min_error_ns: -50, max_error_ns: 50 };
        assert_eq!(applied(&h), 1);
        h.clocks.max_error_ns = 51;
        assert_eq!(applied(&h), 0, "clock error above eps: the premise fails");
        h.txns[1].begun_at = at(5);
        assert_eq!(real_time_order(&h), vec![]);
        h.txns[1].begun_at = at(6);
        h.txns[1].commit_ts = ts(31);
        assert_eq!(real_time_order(&h), vec![]);
        h.txns[1].commit_ts = ts(30);
        assert_eq!(real_time_order(&h), vec![], "RW before RO at one timestamp");
        h.txns[0].kind = TxnKind::ReadOnly;
        h.txns[0].writes.clear();
        only(real_time_order(&h), Checker::RealTimeOrder);
    }

    /// (j) a primary that held sharers in lease mode; the same counters under EI are fine.
    #[test]
    fn no_server_lease_state_flags_sharers_outside_explicit_invalidation() {
        let mut h = base();
        h.sharers = vec![SharerStats::default(), SharerStats::default()];
        assert_eq!(no_server_lease_state(&h), vec![]);
        h.sharers[1].registrations = 1;
        only(no_server_lease_state(&h), Checker::ServerLeaseState);
        h.cache_policy = Some(LeasePolicy::Fixed(std::time::Duration::from_millis(2)));
        only(no_server_lease_state(&h), Checker::ServerLeaseState);
        h.sharers[1] = SharerStats { registrations: 0, max_held: 0, invalidations: 1 };
        only(no_server_lease_state(&h), Checker::ServerLeaseState);
        h.cache_policy = Some(LeasePolicy::ExplicitInvalidation);
        assert_eq!(no_server_lease_state(&h), vec![]);
    }
}
