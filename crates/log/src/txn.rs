//! Transactions at the shard's leader (rifl.md §5.8.2–§5.8.4): prepares, decisions, abort
//! requests and decision records become log entries; their answers come from the applied
//! state once the entry is applied under the table's acknowledgement rule, exactly like a
//! write's (`writes.rs`). What an entry does is decided when it is applied (`state::Kv`), so
//! the leader never answers from anything a new leader could not rebuild.

use bytes::Bytes;
use strata_rifl::Verdict;
use strata_wire::log::{Expect, LogEntry, LogIndex, LogOp};
use strata_wire::rifl::{Rifl, RpcId};
use strata_wire::txn::{
    AbortReason, Decision, DecisionRecord, Prepare, Timestamp, TxnAction, TxnId, Vote,
};
use strata_wire::Instant;

use crate::api::{LogReply, Persist, TxnAnswer, WriteError};
use crate::config::{PlantedBug, WritePath};
use crate::foresight::{Foreseen, Foresight};
use crate::replica::{LogReplica, Role};
use crate::state::vote_given;

/// A transaction request waiting for its entry (or, for a retry, the applied records).
#[derive(Clone, Debug)]
pub(crate) struct PendingTxn {
    pub token: u64,
    pub txn: TxnId,
    pub wait: TxnWait,
    pub index: LogIndex,
    pub deadline: Instant,
}

#[derive(Clone, Debug)]
pub(crate) enum TxnWait {
    /// A prepare or an abort request: answered with the objects' votes.
    Votes { seqs: Vec<u64>, whole: bool, recovery: bool },
    /// A read-only prepare that read a foreseen version (`foresight.rs`): validated once the
    /// entry that writes it is applied.
    Validate(Box<Prepare>),
    /// A single-participant prepare foreseen to conflict with a pending entry: handled again
    /// once that entry is applied, when the conflict is final (`foresight.rs`).
    Reconsider(Box<(Rifl, Prepare)>),
    /// A decision or a decision record: answered `Done`.
    Done,
}

impl LogReplica {
    /// The leader's gate for anything it appends for a client (§5.1 step 1, rifl.md §5.7):
    /// a ready leader under its lease, the shard not moving, room in the epoch's counter.
    pub(crate) fn append_gate(&mut self, now: Instant) -> Result<(), WriteError> {
        let Some(l) = self.leader.as_ref() else {
            return Err(WriteError::NotLeader { hint: self.leader_id });
        };
        if !l.synced || (!l.lease_valid(now) && l.hb_started.contains_key(&1)) {
            return Err(WriteError::Unavailable);
        }
        if !l.lease_valid(now) {
            return Err(WriteError::NotLeader { hint: None });
        }
        if let Some(m) = self.moved_to() {
            return Err(WriteError::Moved { replicas: m.replicas.clone() });
        }
        if l.next_counter >= crate::replica::COUNTER_CEILING {
            self.step_down(now, crate::StepDownReason::CounterExhausted);
            return Err(WriteError::NotLeader { hint: None });
        }
        Ok(())
    }

    pub(crate) fn on_prepare(
        &mut self,
        now: Instant,
        token: u64,
        rifl: Rifl,
        prepare: Prepare,
        read_only: bool,
    ) {
        let reply = |r| LogReply::Txn { token, result: r };
        if let Err(why) = rifl.check() {
            return self.effects.reply.push(reply(Err(WriteError::BadEnvelope(why))));
        }
        if prepare.ops.is_empty() || prepare.ops.iter().any(|o| o.key.is_empty()) {
            let why = "a prepare names at least one object, each with a key";
            return self.effects.reply.push(reply(Err(WriteError::Invalid(why))));
        }
        let txn = prepare.txn;
        if txn.client_id != rifl.rpc.client_id {
            let why = "a prepare's transaction is its envelope's client's";
            return self.effects.reply.push(reply(Err(WriteError::BadEnvelope(why))));
        }
        self.observed_cluster_time = self.observed_cluster_time.max(rifl.lease.timestamp);
        if let Err(e) = self.append_gate(now) {
            return self.effects.reply.push(reply(Err(e)));
        }
        self.release_reservations(&prepare);
        // A Kairos prepare is always appended, read-only or not: validation raises
        // `latest_read` (kairos.md §5.6 step 5), which every replica must hold.
        if read_only && prepare.kairos.is_none() {
            // P1: the applied state decides; nothing is written or remembered. A read of a
            // foreseen version waits for its entry (`foresight.rs`).
            if let Some(index) = self.pending_version_read(&prepare) {
                let (wait, deadline) =
                    (TxnWait::Validate(Box::new(prepare)), now + self.cfg.write_timeout);
                return self.wait_txn(PendingTxn { token, txn, wait, index, deadline });
            }
            let votes = self.validate(&prepare);
            return self.effects.reply.push(reply(Ok(TxnAnswer::Votes { votes, decided: false })));
        }
        let seqs: Vec<u64> = prepare.ops.iter().map(|o| o.seq).collect();
        let wait = TxnWait::Votes { seqs: seqs.clone(), whole: prepare.whole, recovery: false };
        let deadline = now + self.cfg.write_timeout;
        let first = RpcId { client_id: txn.client_id, seq: seqs[0] };
        // A retry whose first object has a record was applied: answer from the records. One
        // whose entry is appended but not applied waits on it.
        let known = match self.kv.rifl().peek(first) {
            Verdict::Stale => return self.effects.reply.push(reply(Err(WriteError::Stale))),
            Verdict::Completed(c) => Some(c.index),
            _ if self.kv.is_expired(txn.client_id) => {
                return self.effects.reply.push(reply(Err(WriteError::ExpiredLease)))
            }
            _ => self.leader.as_ref().and_then(|l| l.inflight.get(&first).copied()),
        };
        let index = match known {
            Some(index) => index,
            None => {
                if rifl.lease.expiration <= self.observed_cluster_time {
                    return self.effects.reply.push(reply(Err(WriteError::Unavailable)));
                }
                let effect = self.foresee(&prepare);
                match effect {
                    ForeseenPrepare::Aborts(votes) => {
                        // Nothing appended, locked or recorded (`foresight.rs`).
                        self.stats.prepares_foreseen_aborted += 1;
                        let answer = TxnAnswer::Votes { votes, decided: true };
                        return self.effects.reply.push(reply(Ok(answer)));
                    }
                    ForeseenPrepare::AbortsAfter(index) => {
                        let wait = TxnWait::Reconsider(Box::new((rifl, prepare)));
                        return self.wait_txn(PendingTxn { token, txn, wait, index, deadline });
                    }
                    _ => {}
                }
                let ack = rifl.first_incomplete - 1;
                let mut prepare = prepare;
                if let Some(k) = prepare.kairos.as_mut() {
                    k.ts_gc = self.kairos_ts_gc_stamp(now);
                }
                let index = self.append_txn_entry(
                    txn.client_id,
                    seqs[0],
                    ack,
                    LogOp::Prepare(Box::new(prepare)),
                );
                let l = self.leader.as_mut().expect("leader");
                l.inflight.entry(first).or_insert(index);
                effect.note(index, &mut l.foresight);
                index
            }
        };
        self.wait_txn(PendingTxn { token, txn, wait, index, deadline });
    }

    /// kairos.md §5.9, Algorithm 3 step 1: the `ts_GC` a Kairos prepare appended now carries,
    /// the leader's (reports heard this term, silent clients dropped) and never below the
    /// applied state's. Applying the entry raises the replicated `ts_GC` to it, so `TooOld`
    /// is decided by the log, alike at every replica (`state::Kv::apply_kairos_prepare`).
    fn kairos_ts_gc_stamp(&mut self, now: Instant) -> Timestamp {
        if self.cfg.planted(PlantedBug::KairosUnstampedTsGc) {
            return Timestamp::ZERO;
        }
        let applied = self.kv.kairos_ts_gc();
        match self.leader.as_mut() {
            Some(l) => {
                l.kairos_reports.expire(now);
                l.kairos_reports.ts_gc().max(applied)
            }
            None => applied,
        }
    }

    /// kairos.md §5.9 "on WatermarkReport" at the shard's leader: fold the report (soft
    /// state, nothing appended) and answer the shard's `WM` and `ts_GC`. A follower answers
    /// `NotLeader`: the client reports to the leader, which stamps the prepares.
    pub(crate) fn on_kairos_report(
        &mut self,
        now: Instant,
        token: u64,
        client: u64,
        seq: u64,
        local_wm: Timestamp,
        c_freshness: Timestamp,
    ) {
        let applied = self.kv.kairos_ts_gc();
        let result = match self.leader.as_mut() {
            None => Err(WriteError::NotLeader { hint: self.leader_id }),
            Some(l) => {
                let r = &mut l.kairos_reports;
                // A late report under an expired lease does not make its client a member
                // again (`kairos_wm`: its report went when the lease expired).
                if !self.kv.is_expired(client) {
                    r.on_report(now, client, seq, local_wm, c_freshness);
                }
                Ok(TxnAnswer::Watermarks { wm: r.wm(now), ts_gc: r.ts_gc().max(applied) })
            }
        };
        self.effects.reply.push(LogReply::Txn { token, result });
    }

    /// What `p`, about to be appended, will do to its keys when applied after every pending
    /// entry (`foresight.rs`): a single-participant RIFL prepare is evaluated as its apply
    /// will (`Kv::apply_prepare`, R-D17) where every key it reaches is foreseeable; any other
    /// prepare changes or locks its keys unforeseeably.
    fn foresee(&self, p: &Prepare) -> ForeseenPrepare {
        let unforeseen = |writes_only: bool| {
            let keys = p.ops.iter().filter(|o| !writes_only || o.action != TxnAction::Read);
            ForeseenPrepare::Unknown(keys.map(|o| o.key.clone()).collect())
        };
        if !p.whole || p.kairos.is_some() {
            return unforeseen(false);
        }
        let (Some(l), applied) = (self.leader.as_ref(), self.kv.applied()) else {
            return unforeseen(false);
        };
        let check_versions = self.cfg.apply_rules().check_versions;
        let mut votes = Vec::new();
        for op in &p.ops {
            let mut pending_writer = None;
            let vote = match l.foresight.get(&op.key, applied) {
                Some(Foreseen::Known { value, version }) => {
                    pending_writer = Some(*version);
                    vote_given(op, (value.as_ref(), *version), false, check_versions)
                }
                // A pending entry changes the key, or a pending decision may release its lock.
                Some(Foreseen::Unknown { .. }) => return unforeseen(true),
                None if self.kv.is_locked(&op.key) => return unforeseen(true),
                None => self.kv.vote_on(op, check_versions),
            };
            votes.push((op.seq, vote));
            if vote != Vote::Prepared {
                // Answered without an entry only if no later input can change the vote: a
                // duplicate of this prepare (one the client sent before and abandoned) may
                // still arrive, and must vote the same. The applied version only grows, so
                // one above the version read is final; a foreseen one is not (its entry may
                // yet be dropped) until that entry applies: the prepare waits for it. A lock
                // or a value condition is never final.
                let conflict = vote == Vote::Abort(AbortReason::Conflict);
                let read = match op.expect {
                    Some(Expect::Version(v)) if conflict => v,
                    _ => return ForeseenPrepare::ChangesNothing,
                };
                return match pending_writer {
                    _ if read < self.kv.get(&op.key).1 => ForeseenPrepare::Aborts(votes),
                    Some(w) if read < w => ForeseenPrepare::AbortsAfter(w),
                    _ => ForeseenPrepare::ChangesNothing,
                };
            }
        }
        let wrong = self.cfg.planted(PlantedBug::TxnForesightWrongValue);
        let writes = p.ops.iter().filter_map(|o| match &o.action {
            TxnAction::Read => None,
            TxnAction::Write(v) if wrong => {
                Some((o.key.clone(), Some([&v[..], b"0"].concat().into())))
            }
            TxnAction::Write(v) => Some((o.key.clone(), Some(v.clone()))),
            TxnAction::Delete => Some((o.key.clone(), None)),
        });
        ForeseenPrepare::Commits(writes.collect())
    }

    /// A prepare naming a key ends its reservation, whoever read it for update: the reads
    /// waiting for it now find what this prepare will leave (`reservations.rs`). Before the
    /// prepare is appended, so they are answered after it, with its effect foreseen.
    fn release_reservations(&mut self, prepare: &Prepare) {
        if let Some(l) = self.leader.as_mut() {
            prepare.ops.iter().for_each(|op| l.reservations.release(&op.key));
        }
    }

    /// The leader forgets what its applied entries foresaw.
    pub(crate) fn forget_foreseen(&mut self) {
        let applied = self.kv.applied();
        if let Some(l) = self.leader.as_mut() {
            l.foresight.forget_applied(applied);
        }
    }

    /// A read-only prepare's newest expected version that a pending entry of this leader's log
    /// writes (read through `foresight.rs`), if any.
    fn pending_version_read(&self, p: &Prepare) -> Option<LogIndex> {
        let (applied, last) = (self.kv.applied(), self.log.last_index());
        let versions = p.ops.iter().filter_map(|o| match o.expect {
            Some(Expect::Version(v)) if v > applied && v <= last => Some(v),
            _ => None,
        });
        versions.max()
    }

    /// §5.8.2 P1, read-only: per object, locked or changed votes `Abort` (stop); else
    /// `Prepared`. From the leader's applied state, which holds every acknowledged entry.
    fn validate(&self, p: &Prepare) -> Vec<(u64, Vote)> {
        let mut votes = Vec::new();
        for op in &p.ops {
            let vote = self.kv.vote_on(op, true);
            votes.push((op.seq, vote));
            if vote != Vote::Prepared {
                break;
            }
        }
        votes
    }

    /// §5.8.3 at the leader: append the decision (idempotent when applied).
    pub(crate) fn on_decide(
        &mut self,
        now: Instant,
        token: u64,
        txn: TxnId,
        decision: Decision,
        seqs: Vec<u64>,
    ) {
        let writes = self.foresee_decide(txn, decision, &seqs);
        let op = LogOp::Decide { txn, decision, seqs };
        let Some(index) = self.append_and_wait(now, token, txn, op, TxnWait::Done) else {
            return;
        };
        let l = self.leader.as_mut().expect("it appended");
        for (key, value) in writes {
            l.foresight.note(key, Foreseen::Known { value, version: index });
        }
    }

    /// What a decision about to be appended will write (`foresight.rs`): a `Commit` applies
    /// each locked write of `seqs` at its own index (`Kv::apply_decide`), so a transaction's
    /// read of such a key is answered with that value as soon as the decision is appended,
    /// instead of waiting for the lock's release until it is applied — on a hot key, one
    /// replicated round less between two transactions (docs/design.md, departures). Not
    /// foreseen: an `Abort` or a read lock (the key keeps its value and version: the read
    /// waits, as before), a Kairos transaction (its reads carry timestamps), and a key a
    /// pending entry already touches (an earlier decision of the same transaction then does
    /// the work; this one applies as a no-op).
    fn foresee_decide(
        &self,
        txn: TxnId,
        decision: Decision,
        seqs: &[u64],
    ) -> Vec<(Bytes, Option<Bytes>)> {
        let Some(l) = self.leader.as_ref() else { return Vec::new() };
        if decision != Decision::Commit || self.kv.is_kairos_txn(txn) {
            return Vec::new();
        }
        let applied = self.kv.applied();
        let wrong = self.cfg.planted(PlantedBug::TxnDecisionForesightWrongValue);
        let locks = seqs.iter().filter_map(|&seq| {
            self.kv.participant().lock_of(RpcId { client_id: txn.client_id, seq })
        });
        locks
            .filter(|lock| l.foresight.get(&lock.key, applied).is_none())
            .filter_map(|lock| match &lock.action {
                TxnAction::Read => None,
                TxnAction::Write(v) if wrong => {
                    Some((lock.key.clone(), Some([&v[..], b"0"].concat().into())))
                }
                TxnAction::Write(v) => Some((lock.key.clone(), Some(v.clone()))),
                TxnAction::Delete => Some((lock.key.clone(), None)),
            })
            .collect()
    }

    /// §5.8.4 RA1-RA3 at the leader: append the abort request; answer the votes it leaves.
    pub(crate) fn on_request_abort(
        &mut self,
        now: Instant,
        token: u64,
        txn: TxnId,
        seqs: Vec<u64>,
    ) {
        let wait = TxnWait::Votes { seqs: seqs.clone(), whole: false, recovery: true };
        self.append_and_wait(now, token, txn, LogOp::RequestAbort { txn, seqs }, wait);
    }

    pub(crate) fn on_record_decision(&mut self, now: Instant, token: u64, record: DecisionRecord) {
        let txn = record.txn;
        self.append_and_wait(now, token, txn, LogOp::Decided(Box::new(record)), TxnWait::Done);
    }

    pub(crate) fn on_resolve(&mut self, now: Instant, token: u64, txn: TxnId) {
        self.append_and_wait(now, token, txn, LogOp::Resolved(txn), TxnWait::Done);
    }

    /// Appends `op` and waits for it to apply; its index, or `None` if it was refused.
    fn append_and_wait(
        &mut self,
        now: Instant,
        token: u64,
        txn: TxnId,
        op: LogOp,
        wait: TxnWait,
    ) -> Option<LogIndex> {
        if let Err(e) = self.append_gate(now) {
            self.effects.reply.push(LogReply::Txn { token, result: Err(e) });
            return None;
        }
        let index = self.append_txn_entry(0, 0, 0, op);
        let deadline = now + self.cfg.write_timeout;
        self.wait_txn(PendingTxn { token, txn, wait, index, deadline });
        Some(index)
    }

    fn append_txn_entry(&mut self, client_id: u64, seq: u64, ack: u64, op: LogOp) -> LogIndex {
        let l = self.leader.as_mut().expect("only a leader appends");
        let index = LogIndex::new(self.epoch, l.next_counter);
        l.next_counter += 1;
        for p in l.progress.values_mut() {
            p.needs_send = true;
        }
        let e = LogEntry { index, key: Bytes::new(), op, client_id, seq, ack, immediate: false };
        self.log.append(e.clone());
        self.persist(Persist::Append(vec![e]));
        index
    }

    fn wait_txn(&mut self, p: PendingTxn) {
        self.leader.as_mut().expect("leader").pending_txns.push(p);
    }

    /// Answers every waiting transaction request whose entry is applied under the write path's
    /// acknowledgement rule (§5.1 step 7), times out the rest.
    pub(crate) fn settle_txns(&mut self, now: Instant) {
        if self.role != Role::Leader {
            return;
        }
        let (applied, commit) = (self.kv.applied(), self.commit);
        let path = self.cfg.durability.write_path();
        let l = self.leader.as_mut().expect("leader");
        if l.pending_txns.is_empty() {
            return;
        }
        let waiting = std::mem::take(&mut l.pending_txns);
        let mut keep = Vec::new();
        for p in waiting {
            let ready = applied >= p.index && (path == WritePath::Async || commit >= p.index);
            if ready {
                if let TxnWait::Reconsider(held) = p.wait {
                    let (rifl, prepare) = *held;
                    self.on_prepare(now, p.token, rifl, prepare, false);
                    continue;
                }
                let result = self.txn_answer(&p);
                self.effects.reply.push(LogReply::Txn { token: p.token, result });
            } else if now >= p.deadline {
                self.effects
                    .reply
                    .push(LogReply::Txn { token: p.token, result: Err(WriteError::Timeout) });
            } else {
                keep.push(p);
            }
        }
        self.leader.as_mut().expect("leader").pending_txns.extend(keep);
    }

    /// The answer of an applied transaction request, from the applied records.
    fn txn_answer(&self, p: &PendingTxn) -> Result<TxnAnswer, WriteError> {
        let (seqs, whole, recovery) = match &p.wait {
            TxnWait::Votes { seqs, whole, recovery } => (seqs, whole, recovery),
            TxnWait::Validate(prepare) => {
                let votes = self.validate(prepare);
                return Ok(TxnAnswer::Votes { votes, decided: false });
            }
            TxnWait::Done | TxnWait::Reconsider(_) => return Ok(TxnAnswer::Done),
        };
        let client_id = p.txn.client_id;
        let mut votes = Vec::new();
        for &seq in seqs {
            let vote = match self.kv.rifl().peek(RpcId { client_id, seq }) {
                Verdict::Stale => return Err(WriteError::Stale),
                Verdict::Completed(c) => match c.outcome {
                    strata_wire::log::WriteOutcome::Voted(v) => v,
                    _ => return Err(WriteError::Invalid("a prepare id names a plain write")),
                },
                // The `TxnAbortWithoutRecord` canary answers the abort it did not record.
                _ if *recovery
                    && self.cfg.planted(crate::config::PlantedBug::TxnAbortWithoutRecord) =>
                {
                    Vote::Abort(AbortReason::Recovered)
                }
                _ if self.kv.is_expired(client_id) => {
                    if *recovery {
                        // A collected client holds no lock here (R-D14): nothing prepared.
                        Vote::Abort(AbortReason::Recovered)
                    } else {
                        return Err(WriteError::ExpiredLease);
                    }
                }
                _ if self.kv.frozen().is_some() => {
                    let replicas =
                        self.kv.frozen().map(|(_, m)| m.replicas.clone()).unwrap_or_default();
                    return Err(WriteError::Moved { replicas });
                }
                // No record after an `Abort` (the participant stopped there).
                _ if !votes.is_empty() => break,
                // The entry applied as a no-op (e.g. a prepare appended after a `Freeze`
                // applied first): retry.
                _ => return Err(WriteError::Timeout),
            };
            votes.push((seq, vote));
            if vote != Vote::Prepared {
                break;
            }
        }
        // A prepare holding every object decided at its apply, either way (`Kv::apply_prepare`).
        let decided = *whole;
        Ok(TxnAnswer::Votes { votes, decided })
    }

    pub(crate) fn txn_deadlines(&self) -> impl Iterator<Item = Instant> + '_ {
        self.leader.iter().flat_map(|l| l.pending_txns.iter().map(|p| p.deadline))
    }

    /// The locks this replica's applied state holds (for the node's `T_TX` timers, §5.8.4).
    pub fn locks(&self) -> impl Iterator<Item = &strata_wire::txn::Lock> {
        self.kv.participant().locks()
    }

    /// Whether the applied state holds a lock or a decision record (cheap: recovery's timers
    /// are armed only then).
    pub fn has_txn_state(&self) -> bool {
        !self.kv.participant().is_empty()
    }

    /// The recovery coordinators' decision records not yet resolved (R-D12).
    pub fn decision_records(&self) -> impl Iterator<Item = &DecisionRecord> {
        self.kv.participant().decisions()
    }

    /// Whether a transaction holds `key`'s lock.
    pub fn is_locked(&self, key: &[u8]) -> bool {
        self.kv.is_locked(key)
    }
}

/// What a prepare about to be appended will do, as the leader foresees it (`foresight.rs`).
enum ForeseenPrepare {
    /// It votes `Abort` whatever its entry would follow (the votes up to that object):
    /// answered without an entry.
    Aborts(Vec<(u64, Vote)>),
    /// It will vote `Abort(Conflict)` once the pending entry at this index, which writes a
    /// key it read at an older version, applies: it waits for that entry, then is considered
    /// again (then final, unless the entry did not apply as foreseen).
    AbortsAfter(LogIndex),
    /// It is foreseen to vote `Abort`, which a dropped earlier entry could still change: it
    /// is appended, and foreseen to change nothing.
    ChangesNothing,
    /// It commits these writes (`None`: a delete).
    Commits(Vec<(Bytes, Option<Bytes>)>),
    /// It changes or locks these keys in a way not foreseen.
    Unknown(Vec<Bytes>),
}

impl ForeseenPrepare {
    /// Records the effect of the prepare appended at `index`.
    fn note(self, index: LogIndex, foresight: &mut Foresight) {
        match self {
            ForeseenPrepare::Aborts(_)
            | ForeseenPrepare::AbortsAfter(_)
            | ForeseenPrepare::ChangesNothing => {}
            ForeseenPrepare::Commits(writes) => {
                for (key, value) in writes {
                    foresight.note(key, Foreseen::Known { value, version: index });
                }
            }
            ForeseenPrepare::Unknown(keys) => {
                for key in keys {
                    foresight.note(key, Foreseen::Unknown { until: index });
                }
            }
        }
    }
}
