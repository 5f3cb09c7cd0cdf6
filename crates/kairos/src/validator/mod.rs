//! The validator (kairos.md §3.2, §5.6 Algorithm 3, §5.9, §5.16, §6.4): per-key timestamps
//! and prepared writes, votes, decisions, `ts_GC` and version pruning.
//!
//! A plain deterministic state machine, meant to be embedded later in a shard's replicated
//! state machine (server-side validation, §9.12) or run by a client-side validator: `Clone`,
//! no IO, no clock, only `BTreeMap`/`BTreeSet` so that nothing it outputs depends on hash
//! order. Every input is one method, executed atomically (§3.2 last paragraph); outputs are
//! the returned votes plus [`ValidatorEvent`]s drained by [`Validator::take_events`].

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use strata_wire::txn::{Decision, TxnId};

use crate::planted::PlantedBug;
use crate::timestamp::Timestamp;
use crate::watermark::{Report, ReportOutcome, Watermarks};

mod recovery;
#[cfg(test)]
mod tests;

pub use recovery::RecoveredVote;

/// A key (the store's keys are byte strings).
pub type Key = Bytes;

/// Why a validator voted Abort (§2 reasons; the application retries the transaction).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AbortReason {
    /// A read key has a newer committed version than the one read (step 2).
    Stale { key: Key },
    /// Another transaction's write of the key is prepared (steps 2 and 4).
    PreparedConflict { key: Key },
    /// A committed reader of the key has a timestamp `>=` this writer's (step 4).
    ReadWriteConflict { key: Key },
    /// A committed write of the key has a timestamp `>=` this writer's (step 4).
    WriteWriteConflict { key: Key },
    /// An RW transaction's timestamp is not above a version it read (step 3, §9.4).
    TimestampOrder { key: Key },
    /// `T.freshness < ts_GC`: not enough history to validate (step 1); carries `ts_GC`.
    TooOld { ts_gc: Timestamp },
    /// The validator promised the termination protocol to vote Abort (§5.16, step 0).
    Refused,
    /// (Strata) A restarted validator that has not rebuilt its state yet (§6.4 "vote Abort
    /// for every transaction until all clients have answered", and keys not yet rebuilt).
    Recovering,
}

/// A validator's vote (§4 `ValidateResp`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Vote {
    Commit,
    Abort(AbortReason),
}

/// A `ValidateReq` (§4) as the validator sees it: only the keys it owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidateReq {
    pub txn: TxnId,
    pub commit_ts: Timestamp,
    /// `T.freshness` (min `fts` of the whole read set); `None` if the read set is empty.
    pub freshness: Option<Timestamp>,
    /// The whole transaction writes nothing. A request that says so but carries writes is
    /// validated as RW (step 3 applies): the conservative reading of a malformed request.
    pub read_only: bool,
    /// `(key, vts read)` for the owned keys of the read set.
    pub reads: Vec<(Key, Timestamp)>,
    /// The owned keys of the write set.
    pub writes: Vec<Key>,
}

impl ValidateReq {
    fn is_rw(&self) -> bool {
        !self.read_only || !self.writes.is_empty()
    }
}

/// Per-key state (§3.2). A key with no entry has the defaults (`latest_read` = the
/// validator's `read_floor`, §6.4).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyState {
    /// Highest commit timestamp of a transaction that read the key and passed validation.
    pub latest_read: Timestamp,
    /// The transaction whose write of the key passed validation and awaits its decision.
    pub prepared_write: Option<(TxnId, Timestamp)>,
    /// Commit timestamp of the last committed write (the key's current `vts`).
    pub latest_committed: Timestamp,
    /// Committed version timestamps `>= ts_GC`, ascending (§3.2, §9.6).
    pub versions: Vec<Timestamp>,
}

/// A validated transaction awaiting its decision, with the vote given (§3.2 `pending`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    pub reads: Vec<Key>,
    pub writes: Vec<Key>,
    pub commit_ts: Timestamp,
    pub vote: Vote,
}

/// What a `Decision` did (§5.6 "Decision handling").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecideOutcome {
    /// The transaction was pending: its prepared writes were cleared (and installed on
    /// Commit).
    Applied,
    /// Unknown here: recorded as refused, so a late `ValidateReq` is refused. Ack anyway.
    Refused,
}

/// The answer to a `TxnStatusQuery` (§5.16).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnStatus {
    /// Phase 1 had not arrived: the validator now promises to vote Abort.
    Refused,
    /// The recorded vote of a pending transaction.
    Voted(Vote),
}

/// What the caller must record or act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValidatorEvent {
    /// A committed write became the key's latest version.
    Installed { key: Key, ts: Timestamp, txn: TxnId },
    /// A version left `versions` because it is below `ts_GC` (§5.9).
    Pruned { key: Key, version: Timestamp, ts_gc: Timestamp },
}

/// Counters of input the validator refused to act on (hostile or buggy peers: counted and
/// dropped, never a panic).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ValidatorCounters {
    /// A Commit decision for a transaction this validator voted Abort for.
    pub commit_against_abort_vote: u64,
    /// A decision whose timestamp differs from the validated one (the validated one is used).
    pub decision_ts_mismatch: u64,
    /// Decisions for transactions never validated here (now refused).
    pub refused: u64,
}

/// One validator: Algorithm 3 over the keys it owns.
#[derive(Clone, Debug)]
pub struct Validator {
    keys: BTreeMap<Key, KeyState>,
    pending: BTreeMap<TxnId, Pending>,
    refused: BTreeSet<TxnId>,
    watermarks: Watermarks,
    /// The default `latest_read` of a key without an entry (§6.4; `ZERO` unless restarted).
    read_floor: Timestamp,
    recovery: Option<recovery::Recovery>,
    planted_bug: Option<PlantedBug>,
    /// Whether committed versions are appended to `versions` (off in a shard's log, where
    /// nothing reads them and, until watermarks prune them, they would only grow).
    keep_versions: bool,
    events: Vec<ValidatorEvent>,
    pub counters: ValidatorCounters,
}

impl Validator {
    /// A fresh validator for a static client membership (§5.9).
    pub fn new(clients: impl IntoIterator<Item = u32>) -> Validator {
        Validator {
            keys: BTreeMap::new(),
            pending: BTreeMap::new(),
            refused: BTreeSet::new(),
            watermarks: Watermarks::new(clients),
            read_floor: Timestamp::ZERO,
            recovery: None,
            planted_bug: None,
            keep_versions: true,
            events: Vec::new(),
            counters: ValidatorCounters::default(),
        }
    }

    /// A validator that keeps no version list (§3.2 `versions` is for the optional relaxed
    /// RO mode and audits only): the embedding in a shard's log, where `ts_GC` does not
    /// advance yet and the list would grow with every write.
    pub fn without_version_history(mut self) -> Validator {
        self.keep_versions = false;
        self
    }

    /// The key's latest committed version (its `vts`; `ZERO` if never written), without
    /// cloning its state.
    pub fn latest_committed(&self, key: &[u8]) -> Timestamp {
        self.keys.get(key).map_or(Timestamp::ZERO, |s| s.latest_committed)
    }

    /// Whether a transaction's write of `key` is prepared here.
    pub fn is_prepared(&self, key: &[u8]) -> bool {
        self.keys.get(key).is_some_and(|s| s.prepared_write.is_some())
    }

    /// Every key's state (ascending keys): a snapshot's form. Versions and `pending` are
    /// not included: a shard's log keeps no versions, and its only pending transactions
    /// are those holding prepared writes, rebuilt by [`Validator::from_keys`].
    pub fn key_states(&self) -> impl Iterator<Item = (&Key, &KeyState)> {
        self.keys.iter()
    }

    /// A validator without version history holding these key states; every prepared write
    /// becomes a pending Commit vote of its transaction (the decision will clear and
    /// install it). Reads of pending transactions are not needed after validation.
    pub fn from_keys(
        keys: impl IntoIterator<Item = (Key, Timestamp, Timestamp, Option<(TxnId, Timestamp)>)>,
    ) -> Validator {
        let mut v = Validator::new([]).without_version_history();
        for (key, latest_read, latest_committed, prepared_write) in keys {
            if let Some((txn, ts)) = prepared_write {
                let p = v.pending.entry(txn).or_insert_with(|| Pending {
                    reads: Vec::new(),
                    writes: Vec::new(),
                    commit_ts: ts,
                    vote: Vote::Commit,
                });
                p.writes.push(key.clone());
            }
            let state =
                KeyState { latest_read, prepared_write, latest_committed, versions: Vec::new() };
            v.keys.insert(key, state);
        }
        v
    }

    /// Drops a pending transaction that holds no prepared write here (an Abort vote, or a
    /// Commit vote on reads only): nothing waits for its decision. Its vote is the caller's
    /// to remember (a shard's log keeps it as the prepare's completion record).
    pub fn forget(&mut self, txn: TxnId) {
        let holds =
            self.pending.get(&txn).is_some_and(|p| p.vote == Vote::Commit && !p.writes.is_empty());
        if !holds {
            self.pending.remove(&txn);
        }
    }

    /// The canaries' switch ([`PlantedBug`]); never set outside tests.
    pub fn with_planted_bug(mut self, bug: Option<PlantedBug>) -> Validator {
        self.planted_bug = bug;
        self
    }

    /// [`Validator::with_planted_bug`] in place: a shard's log sets its canary before each
    /// validation, since its validator is rebuilt from snapshots without one.
    pub fn set_planted_bug(&mut self, bug: Option<PlantedBug>) {
        self.planted_bug = bug;
    }

    fn bug(&self, b: PlantedBug) -> bool {
        self.planted_bug == Some(b)
    }

    /// A key's state (defaults if it has none).
    pub fn key(&self, key: &[u8]) -> KeyState {
        self.keys.get(key).cloned().unwrap_or_else(|| self.default_key())
    }

    fn default_key(&self) -> KeyState {
        KeyState { latest_read: self.read_floor, ..KeyState::default() }
    }

    fn key_mut(&mut self, key: &Key) -> &mut KeyState {
        let default = self.default_key();
        self.keys.entry(key.clone()).or_insert(default)
    }

    pub fn pending(&self) -> &BTreeMap<TxnId, Pending> {
        &self.pending
    }

    pub fn is_refused(&self, txn: TxnId) -> bool {
        self.refused.contains(&txn)
    }

    pub fn wm(&self) -> Timestamp {
        self.watermarks.wm()
    }

    pub fn ts_gc(&self) -> Timestamp {
        self.watermarks.ts_gc()
    }

    pub fn watermarks(&self) -> &Watermarks {
        &self.watermarks
    }

    /// Keys with a prepared write, with the transaction holding it.
    pub fn prepared_writes(&self) -> impl Iterator<Item = (&Key, TxnId)> {
        self.keys.iter().filter_map(|(k, s)| s.prepared_write.map(|(t, _)| (k, t)))
    }

    /// Drains what happened since the last call.
    pub fn take_events(&mut self) -> Vec<ValidatorEvent> {
        std::mem::take(&mut self.events)
    }

    /// §5.6 `validate(txn)`, Algorithm 3 step by step. A vote is recorded (Commit and, a
    /// Strata **\[DECISION\]**, Abort too) so that a duplicate gets the same answer and a
    /// termination query the vote; an Abort vote changes no per-key state.
    pub fn validate(&mut self, req: &ValidateReq) -> Vote {
        // Step 0: the termination protocol's promise, then duplicates.
        if self.refused.contains(&req.txn) {
            return Vote::Abort(AbortReason::Refused);
        }
        if let Some(p) = self.pending.get(&req.txn) {
            return p.vote.clone();
        }
        if let Some(reason) = self.recovery_blocks(req) {
            return Vote::Abort(reason); // not recorded: the state is not there to judge
        }
        let vote = match self.check(req) {
            Ok(()) => {
                self.accept(req);
                Vote::Commit
            }
            Err(reason) => Vote::Abort(reason),
        };
        // Each key once (a malformed request may repeat one; the checks are idempotent).
        let mut writes = req.writes.clone();
        writes.sort();
        writes.dedup();
        self.pending.insert(
            req.txn,
            Pending {
                reads: req.reads.iter().map(|(k, _)| k.clone()).collect(),
                writes,
                commit_ts: req.commit_ts,
                vote: vote.clone(),
            },
        );
        vote
    }

    /// Steps 1–4: the checks, in the spec's order; the first failure is the vote.
    fn check(&self, req: &ValidateReq) -> Result<(), AbortReason> {
        let ts_gc = self.ts_gc();
        // Step 1: `TooOld` (the `GcUnsafe` canary skips it).
        if let Some(f) = req.freshness {
            if f < ts_gc && !self.bug(PlantedBug::GcUnsafe) {
                return Err(AbortReason::TooOld { ts_gc });
            }
        }
        // Step 2: every read must still be the latest committed version, with no other
        // transaction's write prepared (K2, §5.15).
        for (k, v) in &req.reads {
            let s = self.key(k);
            if let Some((other, _)) = s.prepared_write {
                if other != req.txn && !self.bug(PlantedBug::SkipReadPreparedCheck) {
                    return Err(AbortReason::PreparedConflict { key: k.clone() });
                }
            }
            if s.latest_committed != *v && !self.bug(PlantedBug::SkipStaleCheck) {
                return Err(AbortReason::Stale { key: k.clone() });
            }
        }
        // Step 3 [DECISION] (§9.4): an RW transaction commits strictly above what it read.
        if req.is_rw() && !self.bug(PlantedBug::NoTimestampBump) {
            for (k, v) in &req.reads {
                if *v >= req.commit_ts {
                    return Err(AbortReason::TimestampOrder { key: k.clone() });
                }
            }
        }
        // Step 4: the new version must follow every validated read and committed write.
        let new_version = req.commit_ts;
        for k in &req.writes {
            let s = self.key(k);
            if s.prepared_write.is_some() {
                return Err(AbortReason::PreparedConflict { key: k.clone() });
            }
            if s.latest_read >= new_version {
                return Err(AbortReason::ReadWriteConflict { key: k.clone() });
            }
            if s.latest_committed >= new_version {
                return Err(AbortReason::WriteWriteConflict { key: k.clone() });
            }
        }
        Ok(())
    }

    /// Step 5: record the reads (`max`, §9.2: RO timestamps can be older than an earlier
    /// reader's) and prepare the writes.
    fn accept(&mut self, req: &ValidateReq) {
        let no_read_update = self.bug(PlantedBug::NoLatestReadUpdate);
        for (k, _) in &req.reads {
            let s = self.key_mut(k);
            if !no_read_update {
                s.latest_read = s.latest_read.max(req.commit_ts);
            }
        }
        for k in &req.writes {
            let s = self.key_mut(k);
            s.prepared_write = Some((req.txn, req.commit_ts));
        }
    }

    /// §5.6 "on Decision(txn, d, ts)". Unknown transactions are refused (§5.16). The
    /// validated timestamp is the one installed (a different `ts` is counted and ignored);
    /// a Commit for a transaction this validator voted Abort for is counted and installs
    /// nothing. `latest_read` is never rolled back.
    pub fn decide(&mut self, txn: TxnId, decision: Decision, ts: Timestamp) -> DecideOutcome {
        let Some(p) = self.pending.remove(&txn) else {
            self.refused.insert(txn);
            self.counters.refused += 1;
            return DecideOutcome::Refused;
        };
        if ts != p.commit_ts {
            self.counters.decision_ts_mismatch += 1;
        }
        if p.vote != Vote::Commit {
            if decision == Decision::Commit {
                self.counters.commit_against_abort_vote += 1;
            }
            return DecideOutcome::Applied;
        }
        let ts_gc = self.ts_gc();
        let keep_versions = self.keep_versions;
        for k in &p.writes {
            let s = self.key_mut(k);
            if s.prepared_write.is_some_and(|(t, _)| t == txn) {
                s.prepared_write = None;
            }
            if decision == Decision::Commit {
                // Prepared exclusivity (§7 inv. 8) and step 4 make this hold: nothing else
                // could commit the key while `txn` held it prepared.
                assert!(
                    p.commit_ts > s.latest_committed,
                    "kairos §5.6: version order of {k:?}: {} after {}",
                    p.commit_ts,
                    s.latest_committed
                );
                s.latest_committed = p.commit_ts;
                let pruned = p.commit_ts < ts_gc;
                if !pruned && keep_versions {
                    s.versions.push(p.commit_ts);
                }
                self.events.push(ValidatorEvent::Installed {
                    key: k.clone(),
                    ts: p.commit_ts,
                    txn,
                });
                if pruned {
                    self.events.push(ValidatorEvent::Pruned {
                        key: k.clone(),
                        version: p.commit_ts,
                        ts_gc,
                    });
                }
            }
        }
        DecideOutcome::Applied
    }

    /// §5.16: a participant asks what this validator knows of `txn`. Unknown: refused from
    /// now on.
    pub fn on_status_query(&mut self, txn: TxnId) -> TxnStatus {
        if let Some(p) = self.pending.get(&txn) {
            return TxnStatus::Voted(p.vote.clone());
        }
        self.refused.insert(txn);
        TxnStatus::Refused
    }

    /// §5.9 "on WatermarkReport": updates `WM` and `ts_GC` and prunes `versions` below
    /// `ts_GC` (keeping `latest_committed`, `latest_read`, `prepared_write`).
    pub fn on_report(&mut self, client: u32, report: Report) -> ReportOutcome {
        let before = self.ts_gc();
        let outcome = self.watermarks.on_report(client, report);
        self.prune_if_raised(before);
        outcome
    }

    /// Raises `ts_GC` to at least `floor` (monotone) and prunes as a report would. For an
    /// embedding where the reports are heard elsewhere and `ts_GC` reaches the validator as
    /// an input: a shard's log, whose leader folds the reports and stamps its `ts_GC` into
    /// each prepare entry, so every replica validates against the same value (§5.9, §6.5).
    pub fn raise_ts_gc(&mut self, floor: Timestamp) {
        let before = self.ts_gc();
        self.watermarks.raise_ts_gc(floor);
        self.prune_if_raised(before);
    }

    /// §5.9: prunes `versions` below `ts_GC` if it rose above `before`.
    fn prune_if_raised(&mut self, before: Timestamp) {
        let ts_gc = self.ts_gc();
        if ts_gc > before {
            for (k, s) in &mut self.keys {
                let keep = s.versions.partition_point(|v| *v < ts_gc);
                for version in s.versions.drain(..keep) {
                    self.events.push(ValidatorEvent::Pruned { key: k.clone(), version, ts_gc });
                }
            }
        }
    }

    /// The structural invariants (DESIGN.md `check_invariants`), run after every input by the
    /// simulation: every prepared write belongs to a pending Commit vote that writes the key,
    /// and each such pending write holds its key (prepared exclusivity, §7 inv. 8); versions
    /// ascend, end at `latest_committed` and lie at or above `ts_GC`.
    pub fn check_invariants(&self) {
        for (k, s) in &self.keys {
            if let Some((t, ts)) = s.prepared_write {
                let p = self.pending.get(&t).expect("a prepared write has a pending vote");
                assert!(p.vote == Vote::Commit && p.commit_ts == ts && p.writes.contains(k));
            }
            assert!(s.versions.windows(2).all(|w| w[0] < w[1]), "versions ascend: {k:?}");
            if let Some(last) = s.versions.last() {
                assert_eq!(*last, s.latest_committed, "the last version is the latest: {k:?}");
            }
            assert!(s.versions.first().is_none_or(|v| *v >= self.ts_gc()), "pruned: {k:?}");
        }
        for (t, p) in &self.pending {
            if p.vote == Vote::Commit {
                for k in &p.writes {
                    let held = self.keys.get(k).and_then(|s| s.prepared_write);
                    assert_eq!(held, Some((*t, p.commit_ts)), "{t} holds {k:?}");
                }
            }
        }
    }
}
