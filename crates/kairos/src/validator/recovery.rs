//! Rebuilding a validator's state after a restart (kairos.md §6.4 **\[DECISION\]**).
//!
//! Validator state is soft. A restarted instance votes Abort (`Recovering`) until every
//! client has answered with (a) the largest commit timestamp it issued and (b) its in-flight
//! transactions that this validator had voted Commit for; the largest (a) becomes the
//! `read_floor`, the default `latest_read` of every key, so a writer that could slip under a
//! lost read timestamp aborts. A key's `latest_committed` (and a prepared write of it) is
//! rebuilt lazily from its primary on first touch: until then, requests touching it vote
//! `Recovering` and the key is listed by [`Validator::take_keys_to_rebuild`].
//!
//! In the server-side placement (§9.12) the validator lives in the shard's replicated state
//! and its snapshots, so this path is for client-side validators only.

use std::collections::BTreeSet;

use strata_wire::txn::TxnId;

use super::{AbortReason, Key, Pending, ValidateReq, Validator, Vote};
use crate::timestamp::Timestamp;
use crate::watermark::Watermarks;

#[derive(Clone, Debug)]
pub(super) struct Recovery {
    awaiting: BTreeSet<u32>,
    rebuilt: BTreeSet<Key>,
    to_rebuild: BTreeSet<Key>,
}

/// A Commit vote of this validator that a client still has in flight (§6.4 (b)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveredVote {
    pub txn: TxnId,
    pub commit_ts: Timestamp,
    /// The keys of this validator it read and wrote.
    pub reads: Vec<Key>,
    pub writes: Vec<Key>,
}

impl Validator {
    /// A validator restarted with no state but its persisted `ts_GC` (if any).
    pub fn restarted(clients: impl IntoIterator<Item = u32>, ts_gc_floor: Timestamp) -> Validator {
        let mut v = Validator::new(clients);
        let awaiting = v.watermarks.members().clone();
        v.watermarks = Watermarks::new(awaiting.iter().copied()).with_ts_gc_floor(ts_gc_floor);
        v.recovery =
            Some(Recovery { awaiting, rebuilt: BTreeSet::new(), to_rebuild: BTreeSet::new() });
        v
    }

    /// Whether some client has not answered yet (every vote is Abort until then).
    pub fn is_recovering(&self) -> bool {
        self.recovery.as_ref().is_some_and(|r| !r.awaiting.is_empty())
    }

    /// The `read_floor` (the default `latest_read`).
    pub fn read_floor(&self) -> Timestamp {
        self.read_floor
    }

    /// §6.4: a client's answer: the largest commit timestamp it issued and its in-flight
    /// transactions with a Commit vote from this validator, reinstalled as pending with their
    /// `latest_read` and `prepared_write`.
    pub fn on_recovery_answer(
        &mut self,
        client: u32,
        max_issued: Option<Timestamp>,
        votes: Vec<RecoveredVote>,
    ) {
        let Some(r) = self.recovery.as_mut() else { return };
        if !r.awaiting.remove(&client) {
            return; // a duplicate, or not a member
        }
        if let Some(ts) = max_issued {
            self.read_floor = self.read_floor.max(ts);
        }
        let floor = self.read_floor;
        for s in self.keys.values_mut() {
            s.latest_read = s.latest_read.max(floor);
        }
        for v in votes {
            for k in &v.reads {
                let s = self.key_mut(k);
                s.latest_read = s.latest_read.max(v.commit_ts);
            }
            let mut writes = Vec::new();
            for k in &v.writes {
                let s = self.key_mut(k);
                if s.prepared_write.is_none() {
                    s.prepared_write = Some((v.txn, v.commit_ts));
                    writes.push(k.clone());
                }
            }
            self.pending.insert(
                v.txn,
                Pending { reads: v.reads, writes, commit_ts: v.commit_ts, vote: Vote::Commit },
            );
        }
    }

    /// §6.4 first bullet: the primary's answer for `key`: its current `vts` and the prepared
    /// write it holds, if any (treated as `prepared_write` until §5.16 resolves it).
    pub fn rebuild_key(&mut self, key: Key, vts: Timestamp, prepared: Option<(TxnId, Timestamp)>) {
        let ts_gc = self.ts_gc();
        let Some(r) = self.recovery.as_mut() else { return };
        r.to_rebuild.remove(&key);
        if !r.rebuilt.insert(key.clone()) {
            return; // rebuilt already: the live state is newer than the primary's answer
        }
        let s = self.key_mut(&key);
        s.latest_committed = s.latest_committed.max(vts);
        if s.versions.is_empty() && vts >= ts_gc && vts > Timestamp::ZERO {
            s.versions.push(vts);
        }
        if let (None, Some((txn, ts))) = (s.prepared_write, prepared) {
            s.prepared_write = Some((txn, ts));
            let p = self.pending.entry(txn).or_insert_with(|| Pending {
                reads: Vec::new(),
                writes: Vec::new(),
                commit_ts: ts,
                vote: Vote::Commit,
            });
            if !p.writes.contains(&key) {
                p.writes.push(key);
            }
        }
    }

    /// Keys a request touched before they were rebuilt: ask their primaries.
    pub fn take_keys_to_rebuild(&mut self) -> Vec<Key> {
        self.recovery
            .as_mut()
            .map(|r| std::mem::take(&mut r.to_rebuild).into_iter().collect())
            .unwrap_or_default()
    }

    /// `Some(Recovering)` while the state to judge `req` is missing.
    pub(super) fn recovery_blocks(&mut self, req: &ValidateReq) -> Option<AbortReason> {
        let r = self.recovery.as_mut()?;
        let mut missing = false;
        for k in req.reads.iter().map(|(k, _)| k).chain(&req.writes) {
            if !r.rebuilt.contains(k) {
                r.to_rebuild.insert(k.clone());
                missing = true;
            }
        }
        (missing || !r.awaiting.is_empty()).then_some(AbortReason::Recovering)
    }
}
