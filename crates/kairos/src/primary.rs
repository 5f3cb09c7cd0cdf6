//! A reference storage primary (kairos.md §3.3, §5.3, §5.5, §5.7): the latest committed
//! version of each key with its `vts`, the write sets prepared in phase 1, decisions, and the
//! write statistics `W`, and — for the explicit-invalidation baseline only (§5.14.2) — the
//! sharers of each key and the `Invalidate` messages a commit owes them. Replication to
//! backups (§5.8) is left to the integration; this is what the simulation's checkers need,
//! and the rules a real primary must keep.
//!
//! Sharer tracking is **off** unless [`Primary::with_sharer_tracking`] turns it on: in lease
//! mode a primary keeps no per-client state and sends nothing (§1.1, §7 inv. 12);
//! [`Primary::sharer_stats`] counts what it held and sent, so a test can tell.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use strata_wire::txn::{Decision, TxnId};
use strata_wire::Instant;

use crate::lease::AccessStats;
use crate::planted::PlantedBug;
use crate::timestamp::Timestamp;
use crate::validator::Key;

/// A committed version.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Versioned {
    pub value: Option<Bytes>,
    pub vts: Timestamp,
}

/// §4 `GetResp`: the latest committed version (never a prepared one) and `W`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GetResp {
    pub value: Option<Bytes>,
    pub vts: Timestamp,
    pub w_mean: Option<Duration>,
}

/// A write set stored in phase 1 (§3.3 `prepared`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedWrites {
    pub commit_ts: Timestamp,
    pub writes: Vec<(Key, Option<Bytes>)>,
}

/// What a decision did at the primary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrimaryDecideOutcome {
    /// Commit: `installed` became the keys' latest versions; `superseded` were older than
    /// the version already installed (a later writer's decision arrived first) and skipped.
    Committed { installed: Vec<(Key, Timestamp)>, superseded: Vec<(Key, Timestamp)> },
    /// Abort of a prepared write set: dropped.
    Dropped,
    /// Unknown transaction: refused from now on (§5.16), acknowledged.
    Refused,
}

/// §4 `Invalidate{key, new_vts}` to one sharer (EI only, §5.14.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalidate {
    pub client: u32,
    pub key: Key,
    pub new_vts: Timestamp,
}

/// What a primary's sharer tracking held and sent (§7 inv. 12: all zero in lease mode).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SharerStats {
    /// `(key, client)` pairs added to `sharers` (a client already registered for the key
    /// is not counted again).
    pub registrations: u64,
    /// The most pairs held at once.
    pub max_held: u64,
    /// `Invalidate` messages produced.
    pub invalidations: u64,
}

/// One shard's primary.
#[derive(Clone, Debug, Default)]
pub struct Primary {
    data: BTreeMap<Key, Versioned>,
    prepared: BTreeMap<TxnId, PreparedWrites>,
    /// §5.5: the recorded answer of every `ReplicateReq` whose decision has not arrived
    /// (`prepared` holds the `true` ones).
    refused: BTreeSet<TxnId>,
    write_stats: BTreeMap<Key, AccessStats>,
    /// EI only (§3.3 `sharers`): whether `get_for` records sharers.
    track_sharers: bool,
    sharers: BTreeMap<Key, BTreeSet<u32>>,
    held: u64,
    /// Invalidations owed since the last [`Primary::take_invalidations`].
    outbox: Vec<Invalidate>,
    sharer_stats: SharerStats,
}

impl Primary {
    pub fn new() -> Primary {
        Primary::default()
    }

    /// The same primary with sharer tracking on or off (§5.14.2: on for explicit
    /// invalidation only). Every key is taken as cacheable: the caller (the client cache
    /// policy) decides which keys it asks about with [`Primary::get_for`].
    pub fn with_sharer_tracking(mut self, on: bool) -> Primary {
        self.track_sharers = on;
        self
    }

    /// The same primary with a planted bug; [`PlantedBug::PrimaryTracksSharers`] is the
    /// one it has (sharer tracking whatever the configuration says).
    pub fn with_planted_bug(mut self, bug: Option<PlantedBug>) -> Primary {
        if bug == Some(PlantedBug::PrimaryTracksSharers) {
            self.track_sharers = true;
        }
        self
    }

    /// §5.3 with the EI rule: [`Primary::get`], and with sharer tracking on, `client` joins
    /// `sharers[key]`.
    pub fn get_for(&mut self, key: &[u8], client: u32) -> GetResp {
        if self.track_sharers {
            let set = self.sharers.entry(Bytes::copy_from_slice(key)).or_default();
            if set.insert(client) {
                self.held += 1;
                self.sharer_stats.registrations += 1;
                self.sharer_stats.max_held = self.sharer_stats.max_held.max(self.held);
            }
        }
        self.get(key)
    }

    /// The `Invalidate` messages owed since the last call (§5.7, EI: sent after the commit
    /// is applied, asynchronously — the commit does not wait for them).
    pub fn take_invalidations(&mut self) -> Vec<Invalidate> {
        std::mem::take(&mut self.outbox)
    }

    /// The sharer tracking's counters (§7 inv. 12).
    pub fn sharer_stats(&self) -> SharerStats {
        self.sharer_stats
    }

    /// `(key, client)` pairs held now.
    pub fn sharers_held(&self) -> u64 {
        self.held
    }

    /// §5.3: the latest committed version (`None, ZERO` for a key never written) and `W`
    /// (`None` until two writes were seen). A `Get` never waits for prepared writes.
    pub fn get(&self, key: &[u8]) -> GetResp {
        let v = self.data.get(key).cloned().unwrap_or_default();
        GetResp {
            value: v.value,
            vts: v.vts,
            w_mean: self.write_stats.get(key).and_then(AccessStats::mean),
        }
    }

    /// The latest committed version of a key.
    pub fn version(&self, key: &[u8]) -> Versioned {
        self.data.get(key).cloned().unwrap_or_default()
    }

    /// Every committed key with its latest version.
    pub fn data(&self) -> &BTreeMap<Key, Versioned> {
        &self.data
    }

    pub fn prepared(&self) -> &BTreeMap<TxnId, PreparedWrites> {
        &self.prepared
    }

    /// A prepared write of `key`, if one exists (§6.4: what a restarted validator asks).
    pub fn prepared_write_of(&self, key: &[u8]) -> Option<(TxnId, Timestamp)> {
        self.prepared
            .iter()
            .find(|(_, p)| p.writes.iter().any(|(k, _)| &k[..] == key))
            .map(|(t, p)| (*t, p.commit_ts))
    }

    /// §5.5 `ReplicateReq`: store the write set (`ok = true`) unless the transaction was
    /// refused (`false`). A duplicate gets the recorded answer.
    pub fn replicate(
        &mut self,
        txn: TxnId,
        commit_ts: Timestamp,
        writes: Vec<(Key, Option<Bytes>)>,
    ) -> bool {
        if self.refused.contains(&txn) {
            return false;
        }
        self.prepared.entry(txn).or_insert(PreparedWrites { commit_ts, writes });
        true
    }

    /// §5.16: a termination query for a transaction without a stored write set refuses it.
    /// Returns whether the write set is stored.
    pub fn on_status_query(&mut self, txn: TxnId) -> bool {
        if self.prepared.contains_key(&txn) {
            return true;
        }
        self.refused.insert(txn);
        false
    }

    /// §5.7: a Commit installs the prepared writes at their commit timestamp and feeds `W`
    /// with the gap between successive commit timestamps (§5.10); an Abort drops them.
    ///
    /// **Departure** from §5.7's `assert ts > data[k].vts`: with client-side validation the
    /// validator and the primary hear a decision on different channels, so two committed
    /// writers of a key, `A` then `B` (`B` validated after `A`'s decision reached the
    /// validator, so `ts_A < ts_B`), can have their decisions reach the primary in the order
    /// `B`, `A` (the soak found it). `A`'s version is then already superseded in the serial
    /// order and is skipped (Thomas' write rule); a `Get` in between returned an older
    /// version that validation rejects as stale. Equal timestamps of two writers remain a
    /// broken invariant (RW timestamps are unique).
    pub fn decide(&mut self, txn: TxnId, decision: Decision) -> PrimaryDecideOutcome {
        let Some(p) = self.prepared.remove(&txn) else {
            self.refused.insert(txn);
            return PrimaryDecideOutcome::Refused;
        };
        if decision == Decision::Abort {
            return PrimaryDecideOutcome::Dropped;
        }
        let (mut installed, mut superseded) = (Vec::with_capacity(p.writes.len()), Vec::new());
        for (k, value) in p.writes {
            let slot = self.data.entry(k.clone()).or_default();
            assert!(
                p.commit_ts != slot.vts,
                "kairos §7 inv. 2: two writers of {k:?} at {}",
                p.commit_ts
            );
            // A late commit is still a write of the key for W (AccessStats counts an
            // earlier time as a zero gap).
            self.write_stats
                .entry(k.clone())
                .or_default()
                .on_access(Instant::from_nanos(p.commit_ts.nanos));
            if p.commit_ts > slot.vts {
                *slot = Versioned { value, vts: p.commit_ts };
                // EI (§5.7): every sharer hears of the new version; the set is cleared.
                for client in self.sharers.remove(&k).into_iter().flatten() {
                    self.held -= 1;
                    self.sharer_stats.invalidations += 1;
                    self.outbox.push(Invalidate { client, key: k.clone(), new_vts: p.commit_ts });
                }
                installed.push((k, p.commit_ts));
            } else {
                superseded.push((k, p.commit_ts));
            }
        }
        PrimaryDecideOutcome::Committed { installed, superseded }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &str) -> Key {
        Bytes::copy_from_slice(s.as_bytes())
    }

    fn t(n: u64) -> TxnId {
        TxnId { client_id: 1, base: n }
    }

    #[test]
    fn prepared_writes_stay_invisible_until_committed() {
        let mut p = Primary::new();
        assert_eq!(p.get(b"x"), GetResp { value: None, vts: Timestamp::ZERO, w_mean: None });
        assert!(p.replicate(t(1), Timestamp::new(1_000, 1), vec![(k("x"), Some(k("a")))]));
        assert!(
            p.replicate(t(1), Timestamp::new(1_000, 1), vec![]),
            "a duplicate: recorded answer"
        );
        assert_eq!(p.prepared_write_of(b"x"), Some((t(1), Timestamp::new(1_000, 1))));
        assert_eq!(p.get(b"x").vts, Timestamp::ZERO);
        assert_eq!(
            p.decide(t(1), Decision::Commit),
            PrimaryDecideOutcome::Committed {
                installed: vec![(k("x"), Timestamp::new(1_000, 1))],
                superseded: vec![]
            }
        );
        assert_eq!(p.get(b"x").value, Some(k("a")));
        assert!(p.replicate(t(2), Timestamp::new(4_000, 1), vec![(k("x"), None)]));
        assert_eq!(
            p.decide(t(2), Decision::Commit),
            PrimaryDecideOutcome::Committed {
                installed: vec![(k("x"), Timestamp::new(4_000, 1))],
                superseded: vec![]
            }
        );
        assert_eq!(
            p.get(b"x"),
            GetResp {
                value: None,
                vts: Timestamp::new(4_000, 1),
                w_mean: Some(Duration::from_nanos(3_000))
            }
        );
        assert!(p.replicate(t(3), Timestamp::new(9_000, 1), vec![(k("x"), Some(k("c")))]));
        assert_eq!(p.decide(t(3), Decision::Abort), PrimaryDecideOutcome::Dropped);
        assert_eq!(p.get(b"x").vts, Timestamp::new(4_000, 1));
    }

    #[test]
    fn an_unknown_transaction_is_refused() {
        let mut p = Primary::new();
        assert_eq!(p.decide(t(5), Decision::Abort), PrimaryDecideOutcome::Refused);
        assert!(!p.replicate(t(5), Timestamp::new(1, 1), vec![(k("x"), None)]));
        assert!(!p.on_status_query(t(6)));
        assert!(!p.replicate(t(6), Timestamp::new(1, 1), vec![(k("x"), None)]));
    }

    /// The soak's schedule: B (ts 10) decided at the primary before A (ts 5).
    #[test]
    fn a_late_commit_below_the_installed_version_is_superseded() {
        let mut p = Primary::new();
        p.replicate(t(1), Timestamp::new(10, 1), vec![(k("x"), Some(k("b")))]);
        p.replicate(t(2), Timestamp::new(5, 1), vec![(k("x"), Some(k("a"))), (k("y"), None)]);
        p.decide(t(1), Decision::Commit);
        assert_eq!(
            p.decide(t(2), Decision::Commit),
            PrimaryDecideOutcome::Committed {
                installed: vec![(k("y"), Timestamp::new(5, 1))],
                superseded: vec![(k("x"), Timestamp::new(5, 1))],
            }
        );
        assert_eq!(p.version(b"x"), Versioned { value: Some(k("b")), vts: Timestamp::new(10, 1) });
    }

    #[test]
    fn sharers_are_tracked_and_invalidated_only_when_asked_to() {
        let ts = Timestamp::new(10, 1);
        let mut lease = Primary::new();
        lease.get_for(b"x", 3);
        lease.replicate(t(1), ts, vec![(k("x"), None)]);
        lease.decide(t(1), Decision::Commit);
        assert_eq!(lease.sharer_stats(), SharerStats::default());
        assert_eq!(lease.take_invalidations(), vec![]);

        let mut ei = Primary::new().with_sharer_tracking(true);
        ei.get_for(b"x", 3);
        ei.get_for(b"x", 3);
        ei.get_for(b"x", 4);
        ei.get_for(b"y", 3);
        assert_eq!(ei.sharers_held(), 3);
        ei.replicate(t(1), ts, vec![(k("x"), None)]);
        ei.decide(t(1), Decision::Commit);
        assert_eq!(
            ei.take_invalidations(),
            vec![
                Invalidate { client: 3, key: k("x"), new_vts: ts },
                Invalidate { client: 4, key: k("x"), new_vts: ts },
            ]
        );
        assert_eq!(ei.sharers_held(), 1, "x's sharers are cleared, y's stay");
        assert_eq!(
            ei.sharer_stats(),
            SharerStats { registrations: 3, max_held: 3, invalidations: 2 }
        );
        // The canary's primary tracks sharers although nobody asked it to.
        let mut bug = Primary::new().with_planted_bug(Some(PlantedBug::PrimaryTracksSharers));
        bug.get_for(b"x", 1);
        assert_eq!(bug.sharers_held(), 1);
    }

    #[test]
    #[should_panic(expected = "two writers")]
    fn two_writers_at_one_timestamp_are_a_broken_invariant() {
        let mut p = Primary::new();
        p.replicate(t(1), Timestamp::new(10, 1), vec![(k("x"), None)]);
        p.replicate(t(2), Timestamp::new(10, 1), vec![(k("x"), None)]);
        p.decide(t(1), Decision::Commit);
        p.decide(t(2), Decision::Commit);
    }
}
