//! Read-modify-writes through leaderless per-key Paxos (Kite §5.6 proposer, §5.7.6 - §5.7.8
//! acceptor). One slot per RMW on a key; the registry of committed RMW ids makes an RMW take
//! effect in at most one slot (P-DEDUP); an RMW computes its outcome at most once per slot
//! (P-ONCE-PER-SLOT); a helper re-proposes an accepted tuple unchanged.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use strata_wire::client::Response;
use strata_wire::peer::{
    Accept, Commit, Completion, KeyRecords, PaxosOutcome, PaxosReply, PeerMessage, Propose,
    RcResult, Tuple,
};
use strata_wire::{counter, AcquireId, Ballot, Carstamp, Instant, NodeId, Rifl, RmwId, SessionId};

use crate::api::{RcEvent, ValueRound};
use crate::barrier::Barrier;
use crate::node_set::NodeSet;
use crate::ops::OpKind;
use crate::replica::{RcReplica, Started};
use crate::session::OpId;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RmwOp {
    Faa { delta: u64 },
    Cas { expected: Option<Bytes>, new: Bytes, weak: bool },
}

/// What an RMW computed for one slot: the tuple it proposes and the result it will return.
#[derive(Clone, Debug)]
pub(crate) struct Computed {
    tuple: Tuple,
    observed: Option<Bytes>,
    observed_cs: Carstamp,
    swapped: bool,
}

#[derive(Debug)]
pub(crate) struct Rmw {
    op: RmwOp,
    rmw_id: RmwId,
    acq: AcquireId,
    detected: bool,
    backoff: Duration,
    /// The slot `backoff` grew in; a later slot starts again from `B_MIN` (fairness, see
    /// `docs/design.md`: without it an RMW that backed off long starves behind fresh ones).
    backoff_slot: u32,
    last_round: u32,
    /// P-ONCE-PER-SLOT: the outcome computed for each slot tried.
    my: HashMap<u32, Computed>,
    /// The last slot in which this RMW sent its own tuple in an accept.
    own_slot: Option<u32>,
    barrier: Barrier,
    phase: Phase,
}

#[derive(Debug)]
enum Phase {
    /// Rule M-1: queued behind another local RMW on the key.
    WaitTurn,
    Attempt,
    Proposing {
        req: u64,
        slot: u32,
        ballot: Ballot,
        local: PaxosOutcome,
    },
    /// M5: an own tuple waits for the barrier before it leaves the node.
    Accept {
        slot: u32,
        ballot: Ballot,
        tuple: Tuple,
        helping: bool,
    },
    Accepting {
        req: u64,
        slot: u32,
        ballot: Ballot,
        tuple: Tuple,
        helping: bool,
        local: PaxosOutcome,
    },
    Committing {
        req: u64,
        slot: u32,
        tuple: Tuple,
        helping: bool,
    },
    Sleeping {
        until: Instant,
    },
}

impl Rmw {
    /// The RMW's barrier, and whether its own tuple has left the node (M6) — for the local
    /// check of Kite §7 inv. 14.
    pub(crate) fn barrier_state(&self) -> (&Barrier, bool) {
        (&self.barrier, self.own_slot.is_some())
    }
}

impl RmwOp {
    /// `f(op, old)`: the new value and whether a CAS swapped. A failed CAS keeps the value,
    /// and so does an FAA on a value that is not a counter or that would overflow
    /// (`strata_wire::counter`: decimal text; the client tells the failure from what it
    /// observed).
    fn apply(&self, old: &Option<Bytes>) -> (Option<Bytes>, bool) {
        match self {
            RmwOp::Faa { delta } => match counter::add(old.as_deref(), *delta) {
                Ok(n) => (Some(counter::encode(n)), false),
                Err(_) => (old.clone(), false),
            },
            RmwOp::Cas { expected, new, .. } => {
                if old == expected {
                    (Some(new.clone()), true)
                } else {
                    (old.clone(), false)
                }
            }
        }
    }
}

impl RcReplica {
    /// M0 - M1.
    pub(crate) fn start_rmw(&mut self, sid: SessionId, key: Bytes, op: RmwOp) -> Started {
        if let RmwOp::Cas { expected, weak: true, .. } = &op {
            let (value, cs) = self.local(&key);
            if &value != expected {
                // M0: a weak CAS that fails locally is a relaxed read: no barrier, no version.
                return Started::Done(Response::Rmw {
                    observed: value,
                    observed_cs: cs,
                    written: None,
                    swapped: false,
                });
            }
        }
        let acq = self.next_acquire_id(sid);
        let s = self.sessions.get_mut(&sid.index).expect("a started operation's session exists");
        s.rmw_seq += 1;
        let rmw_id = RmwId { session: sid, seq: s.rmw_seq };
        Started::Op(OpKind::Rmw(Box::new(Rmw {
            op,
            rmw_id,
            acq,
            detected: false,
            backoff: self.cfg.backoff_min,
            backoff_slot: 0,
            last_round: 0,
            my: HashMap::new(),
            own_slot: None,
            barrier: Barrier::default(),
            phase: Phase::WaitTurn,
        })))
    }

    pub(crate) fn step_rmw(
        &mut self,
        now: Instant,
        id: OpId,
        sid: SessionId,
        key: &Bytes,
        r: &mut Rmw,
        rifl: Option<&Rifl>,
    ) -> Option<Response> {
        loop {
            if !matches!(r.phase, Phase::WaitTurn) {
                // M2: the barrier runs concurrently with the propose phase (O1).
                self.step_barrier(now, id, sid, &mut r.barrier);
            }
            match std::mem::replace(&mut r.phase, Phase::Attempt) {
                Phase::WaitTurn => {
                    let q = self.proposers.entry(key.clone()).or_default();
                    if !q.contains(&id) {
                        q.push_back(id);
                    }
                    if q.front() != Some(&id) {
                        r.phase = Phase::WaitTurn;
                        return None;
                    }
                    r.phase = Phase::Attempt;
                }
                Phase::Attempt => {
                    if self.registry_has(r.rmw_id) {
                        self.commit_own_elsewhere(now, id, key, r); // M9
                        continue;
                    }
                    // RIFL: another attempt of this RPC (a retry at another node) was decided
                    // in an earlier slot; its record came with the slot (`crate::records`).
                    if let Some(reply) = self.recorded_reply(key, rifl) {
                        return Some(self.finish_rmw_unexecuted(id, key, r, reply));
                    }
                    // Bounds (docs/design.md): refused only before it computed anything, so no
                    // tuple of this RMW exists that a helper could still decide.
                    let fresh = r.my.is_empty() && r.own_slot.is_none();
                    if fresh && rifl.is_some() {
                        let reserve = crate::records::reserve(&self.cfg.limits, true);
                        if let Some(busy) = self.records_full(key, reserve) {
                            return Some(self.finish_rmw_unexecuted(id, key, r, busy));
                        }
                    }
                    // M3.
                    let node = self.cfg.node;
                    let k = self.key_mut(key);
                    let slot = k.lc + 1;
                    let ballot = Ballot { round: k.promised.round.max(r.last_round) + 1, node };
                    let known_cs = k.cs;
                    if slot > r.backoff_slot {
                        r.backoff = self.cfg.backoff_min;
                        r.backoff_slot = slot;
                    }
                    let local = self.acceptor_propose(key, slot, ballot, r.rmw_id);
                    let (key2, rmw_id, acq) = (key.clone(), r.rmw_id, r.acq);
                    let req = self.start_round(now, id, |req| {
                        PeerMessage::Propose(Propose {
                            req,
                            key: key2,
                            slot,
                            ballot,
                            rmw_id,
                            known_cs,
                            acq,
                        })
                    });
                    r.phase = Phase::Proposing { req, slot, ballot, local };
                }
                Phase::Proposing { req, slot, ballot, local } => {
                    if self.round_replies(req) < self.remote_quorum() {
                        r.phase = Phase::Proposing { req, slot, ballot, local };
                        return None;
                    }
                    let outcomes = self.absorb(key, req, local, r);
                    // M4.
                    match verdict(&outcomes, self.cfg.quorum()) {
                        Verdict::RmwCommitted => self.commit_own_elsewhere(now, id, key, r),
                        Verdict::Retry(how) => self.retry(now, id, key, &outcomes, r, how),
                        Verdict::Quorum => {
                            // M4.e: help the highest accepted tuple, or propose our own.
                            let accepted = outcomes
                                .iter()
                                .filter_map(|(_, o)| match o {
                                    PaxosOutcome::AlreadyAccepted { ballot, tuple } => {
                                        Some((*ballot, tuple))
                                    }
                                    _ => None,
                                })
                                .max_by_key(|(b, _)| *b);
                            let (tuple, helping) = match accepted {
                                Some((_, t)) => (t.clone(), t.rmw_id != r.rmw_id),
                                None => {
                                    // The round may have brought the slots (and records) this
                                    // node had missed: look again before computing.
                                    if let Some(reply) = self.recorded_reply(key, rifl) {
                                        return Some(self.finish_rmw_unexecuted(id, key, r, reply));
                                    }
                                    (self.compute_once(key, slot, r, rifl).tuple, false)
                                }
                            };
                            r.phase = Phase::Accept { slot, ballot, tuple, helping };
                        }
                    }
                }
                Phase::Accept { slot, ballot, tuple, helping } => {
                    // M5: no own value leaves the node before the barrier (all -> RMW).
                    if !helping && !r.barrier.passed() {
                        r.phase = Phase::Accept { slot, ballot, tuple, helping };
                        return None;
                    }
                    // M6.
                    let local = self.acceptor_accept(key, slot, ballot, &tuple);
                    if !helping {
                        r.own_slot = Some(slot);
                        self.report_barrier(
                            sid,
                            key,
                            ValueRound::Accept { rmw_id: r.rmw_id },
                            &mut r.barrier,
                        );
                    }
                    let (key2, t2, acq) = (key.clone(), tuple.clone(), r.acq);
                    let req = self.start_round(now, id, |req| {
                        PeerMessage::Accept(Accept { req, key: key2, slot, ballot, tuple: t2, acq })
                    });
                    r.phase = Phase::Accepting { req, slot, ballot, tuple, helping, local };
                }
                Phase::Accepting { req, slot, ballot, tuple, helping, local } => {
                    if self.planted(crate::PlantedBug::AcceptWithoutQuorum) {
                        // CANARY: decide on the local accept alone.
                        self.end_round(req);
                        self.begin_commit(now, id, key, slot, tuple, helping, r);
                        continue;
                    }
                    if self.round_replies(req) < self.remote_quorum() {
                        r.phase = Phase::Accepting { req, slot, ballot, tuple, helping, local };
                        return None;
                    }
                    let outcomes = self.absorb(key, req, local, r);
                    // M7.
                    match verdict(&outcomes, self.cfg.quorum()) {
                        Verdict::RmwCommitted if tuple.rmw_id == r.rmw_id => {
                            self.commit_own_elsewhere(now, id, key, r)
                        }
                        Verdict::RmwCommitted => r.phase = Phase::Attempt, // the helped RMW is done
                        Verdict::Retry(how) => self.retry(now, id, key, &outcomes, r, how),
                        Verdict::Quorum => self.begin_commit(now, id, key, slot, tuple, helping, r), // M8
                    }
                }
                Phase::Committing { req, slot, tuple, helping } => {
                    if self.round_replies(req) < self.remote_quorum() {
                        r.phase = Phase::Committing { req, slot, tuple, helping };
                        return None;
                    }
                    let acked: NodeSet = self.end_round(req).iter().map(|(n, _)| *n).collect();
                    if helping {
                        r.phase = Phase::Attempt; // the next slot
                        continue;
                    }
                    return Some(self.finish_rmw(now, id, sid, key, slot, tuple, acked, r));
                }
                Phase::Sleeping { until } => {
                    if now < until {
                        r.phase = Phase::Sleeping { until };
                        return None;
                    }
                    r.phase = Phase::Attempt;
                }
            }
        }
    }

    /// Ends a Paxos round and absorbs its replies: newer versions are applied and decided slots
    /// learned (M4, M7). Returns every outcome, the local one first.
    fn absorb(
        &mut self,
        key: &Bytes,
        req: u64,
        local: PaxosOutcome,
        r: &mut Rmw,
    ) -> Vec<(NodeId, PaxosOutcome)> {
        let mut outcomes = vec![(self.cfg.node, local)];
        for (n, m) in self.end_round(req) {
            let (PeerMessage::ProposeReply(p) | PeerMessage::AcceptReply(p)) = m else { continue };
            r.detected |= p.delinquent;
            if let Some(v) = p.current {
                self.apply(key, v.value, v.cs, v.rmw_id);
                self.merge_records(key, &v.records);
            }
            if let PaxosOutcome::SlotTooSmall { lc, lc_rmw: Some(lc_rmw) } = &p.outcome {
                self.learn_committed(key, *lc, *lc_rmw);
            }
            outcomes.push((n, p.outcome));
        }
        outcomes
    }

    /// P-ONCE-PER-SLOT: computes the RMW on the replica's current value the first time this
    /// slot is tried, and reuses that outcome for every later ballot of the slot.
    fn compute_once(
        &mut self,
        key: &Bytes,
        slot: u32,
        r: &mut Rmw,
        rifl: Option<&Rifl>,
    ) -> Computed {
        if let Some(c) = r.my.get(&slot) {
            return c.clone();
        }
        let (value, cs) = self.local(key);
        let (new_value, swapped) = r.op.apply(&value);
        // rifl.md §5.3 S6: the completion record is part of the proposed outcome, so it is
        // decided (and learned) in the same slot as the mutation.
        let written = Carstamp { llc: cs.llc, pno: slot };
        let record = rifl.map(|e| Completion {
            rpc: e.rpc,
            ack: e.first_incomplete - 1,
            result: RcResult::Rmw {
                observed: value.clone(),
                observed_cs: cs,
                written: Some(written),
                swapped,
            },
        });
        let c = Computed {
            tuple: Tuple { rmw_id: r.rmw_id, base: cs.llc, value: new_value, record },
            observed: value,
            observed_cs: cs,
            swapped,
        };
        r.my.insert(slot, c.clone());
        c
    }

    /// M4.b - d / M7.b - d.
    fn retry(
        &mut self,
        now: Instant,
        id: OpId,
        key: &Bytes,
        outcomes: &[(NodeId, PaxosOutcome)],
        r: &mut Rmw,
        how: Retry,
    ) {
        match how {
            Retry::SlotTaken => r.phase = Phase::Attempt,
            Retry::Nacked(promised) => self.back_off(now, id, r, promised),
            Retry::Lagging => self.catch_up(now, id, key, outcomes, r),
        }
    }

    /// M4.c / M7.c: randomized exponential back-off before the next attempt.
    fn back_off(&mut self, now: Instant, id: OpId, r: &mut Rmw, promised: Ballot) {
        self.stats.paxos_nacks += 1;
        r.last_round = r.last_round.max(promised.round);
        let wait = Duration::from_nanos(self.prng.range(0, r.backoff.as_nanos() as u64 + 1));
        r.backoff = (r.backoff * 2).min(self.cfg.backoff_max);
        self.sleep(now, id, r, wait);
    }

    /// M4.d / M7.d: some acceptors lag behind this node's last committed slot; send them the
    /// commit they missed and try again after `T_RETX`.
    fn catch_up(
        &mut self,
        now: Instant,
        id: OpId,
        key: &Bytes,
        outcomes: &[(NodeId, PaxosOutcome)],
        r: &mut Rmw,
    ) {
        let k = self.key_mut(key);
        if let Some(lc_rmw) = k.lc_rmw {
            let (slot, value, cs, records) = (k.lc, k.value.clone(), k.cs, k.records.clone());
            let req = self.next_req();
            let msg = PeerMessage::Commit(Commit {
                req,
                key: key.clone(),
                slot,
                rmw_id: lc_rmw,
                value,
                cs,
                records,
            });
            for (n, o) in outcomes {
                if matches!(o, PaxosOutcome::SlotTooHigh { .. }) {
                    self.effects.send.push((*n, msg.clone()));
                }
            }
        }
        let wait = self.cfg.round_retransmit;
        self.sleep(now, id, r, wait);
    }

    fn sleep(&mut self, now: Instant, id: OpId, r: &mut Rmw, wait: Duration) {
        let until = now + wait;
        self.op_timers.push(until, id);
        r.phase = Phase::Sleeping { until };
    }

    /// M8: the slot is decided with `tuple`; install it, learn it, tell everyone.
    #[allow(clippy::too_many_arguments)]
    fn begin_commit(
        &mut self,
        now: Instant,
        id: OpId,
        key: &Bytes,
        slot: u32,
        tuple: Tuple,
        helping: bool,
        r: &mut Rmw,
    ) {
        let cs = Carstamp { llc: tuple.base, pno: slot };
        self.apply(key, tuple.value.clone(), cs, Some(tuple.rmw_id));
        self.learn_committed(key, slot, tuple.rmw_id);
        // The learners get the key's whole record set, this slot's record included, so that
        // they know the records of every slot up to this one (`crate::records`).
        if let Some(c) = &tuple.record {
            self.merge_records(key, &KeyRecords { floors: Vec::new(), done: vec![c.clone()] });
        }
        let records = self.key_mut(key).records.clone();
        let (key2, rmw_id, value) = (key.clone(), tuple.rmw_id, tuple.value.clone());
        let req = self.start_round(now, id, |req| {
            PeerMessage::Commit(Commit { req, key: key2, slot, rmw_id, value, cs, records })
        });
        r.phase = Phase::Committing { req, slot, tuple, helping };
    }

    /// M9: the RMW was decided by a helper, in the last slot where it sent its own accept
    /// (P-DEDUP). Re-commit it with the outcome computed for that slot [DECISION K-D7].
    fn commit_own_elsewhere(&mut self, now: Instant, id: OpId, key: &Bytes, r: &mut Rmw) {
        let slot = r
            .own_slot
            .expect("P-DEDUP: an RMW is decided only in a slot where it sent its own accept");
        let tuple =
            r.my.get(&slot).expect("the outcome of a slot it accepted was computed").tuple.clone();
        self.begin_commit(now, id, key, slot, tuple, false, r);
    }

    #[allow(clippy::too_many_arguments)]
    fn finish_rmw(
        &mut self,
        now: Instant,
        id: OpId,
        sid: SessionId,
        key: &Bytes,
        slot: u32,
        tuple: Tuple,
        acked: NodeSet,
        r: &mut Rmw,
    ) -> Response {
        self.leave_proposers(id, key);
        let cs = Carstamp { llc: tuple.base, pno: slot };
        let c = r.my.get(&slot).expect("an own slot was computed").clone();
        self.effects.event.push(RcEvent::VersionCreated {
            session: sid,
            key: key.clone(),
            cs,
            value: tuple.value.clone(),
        });
        self.track(now, key.clone(), tuple.value, cs, Some(r.rmw_id), acked);
        self.note_unresolved(sid, key.clone(), cs);
        self.acquire_finish(r.detected, r.acq);
        Response::Rmw {
            observed: c.observed,
            observed_cs: c.observed_cs,
            written: Some(cs),
            swapped: c.swapped,
        }
    }

    /// M10: let the next local RMW on the key propose.
    fn leave_proposers(&mut self, id: OpId, key: &Bytes) {
        if let Some(q) = self.proposers.get_mut(key) {
            q.retain(|&o| o != id);
            match q.front() {
                Some(&next) => self.dirty.push(next),
                None => {
                    self.proposers.remove(key);
                }
            }
        }
    }

    /// Ends an RMW that creates nothing: its RPC was executed by an earlier attempt (RIFL: the
    /// reply is that attempt's result, or `Stale`), or its key's records are at their bound
    /// (`Busy`). Its detections still count (`acquire_finish`).
    fn finish_rmw_unexecuted(
        &mut self,
        id: OpId,
        key: &Bytes,
        r: &mut Rmw,
        reply: Response,
    ) -> Response {
        self.leave_proposers(id, key);
        self.acquire_finish(r.detected, r.acq);
        reply
    }

    // ---- acceptor (Kite §5.7.6 - §5.7.8) ----

    /// The checks both acceptor handlers make before acting (§5.7.6, §5.7.7): `Some` outcome
    /// if the request cannot be acted on for slot `lc + 1` at ballot `b`.
    fn acceptor_refusal(
        &mut self,
        key: &Bytes,
        slot: u32,
        b: Ballot,
        rmw_id: RmwId,
    ) -> Option<PaxosOutcome> {
        if self.registry_has(rmw_id) {
            return Some(PaxosOutcome::RmwCommitted);
        }
        let k = self.key_mut(key);
        if slot <= k.lc {
            Some(PaxosOutcome::SlotTooSmall { lc: k.lc, lc_rmw: k.lc_rmw })
        } else if slot > k.lc + 1 {
            Some(PaxosOutcome::SlotTooHigh { lc: k.lc })
        } else if b < k.promised {
            Some(PaxosOutcome::Nack { promised: k.promised })
        } else {
            None
        }
    }

    /// The propose handler's decision, without the delinquency check and the reply's version.
    fn acceptor_propose(
        &mut self,
        key: &Bytes,
        slot: u32,
        b: Ballot,
        rmw_id: RmwId,
    ) -> PaxosOutcome {
        if let Some(refused) = self.acceptor_refusal(key, slot, b, rmw_id) {
            return refused;
        }
        let k = self.key_mut(key);
        k.promised = b; // b == promised is a retransmission: re-ack
        let outcome = match &k.accepted {
            Some((ballot, tuple)) => {
                PaxosOutcome::AlreadyAccepted { ballot: *ballot, tuple: tuple.clone() }
            }
            None => PaxosOutcome::Ack,
        };
        // Kite §7 inv. 17: an ack for slot `lc + 1` (P-DEDUP's "before any acceptor acks").
        self.effects.event.push(RcEvent::Promised { key: key.clone(), slot, ballot: b });
        outcome
    }

    fn acceptor_accept(
        &mut self,
        key: &Bytes,
        slot: u32,
        b: Ballot,
        tuple: &Tuple,
    ) -> PaxosOutcome {
        if let Some(refused) = self.acceptor_refusal(key, slot, b, tuple.rmw_id) {
            return refused;
        }
        let k = self.key_mut(key);
        k.promised = b;
        k.accepted = Some((b, tuple.clone()));
        PaxosOutcome::Ack
    }

    /// An acceptor's reply: the outcome, the version when newer than the proposer's (always
    /// for SlotTooSmall), and the delinquency check, run after the key read (K-F3).
    fn paxos_reply(
        &mut self,
        from: NodeId,
        req: u64,
        key: Bytes,
        outcome: PaxosOutcome,
        known_cs: Option<Carstamp>,
        acq: AcquireId,
    ) -> PaxosReply {
        let k = self.key_mut(&key);
        let newer = known_cs.is_some_and(|c| k.cs > c);
        let current =
            (newer || matches!(outcome, PaxosOutcome::SlotTooSmall { .. })).then(|| k.version());
        let delinquent = self.dcheck(from, acq);
        PaxosReply { req, key, outcome, current, delinquent }
    }

    pub(crate) fn on_propose(&mut self, from: NodeId, p: Propose) {
        let outcome = self.acceptor_propose(&p.key, p.slot, p.ballot, p.rmw_id);
        let reply = self.paxos_reply(from, p.req, p.key, outcome, Some(p.known_cs), p.acq);
        self.effects.send.push((from, PeerMessage::ProposeReply(reply)));
    }

    pub(crate) fn on_accept(&mut self, from: NodeId, a: Accept) {
        let outcome = self.acceptor_accept(&a.key, a.slot, a.ballot, &a.tuple);
        // An accept carries no `known_cs`: only SlotTooSmall returns the version.
        let reply = self.paxos_reply(from, a.req, a.key, outcome, None, a.acq);
        self.effects.send.push((from, PeerMessage::AcceptReply(reply)));
    }

    /// Kite §5.7.8: a real commit or a catch-up; either way slot `slot` was decided with `rmw_id`.
    pub(crate) fn on_commit(&mut self, from: NodeId, c: Commit) {
        if self.planted(crate::PlantedBug::CommitWithoutRegistering) {
            // CANARY: the key learns the slot (and version), the registry never hears of it.
            self.note_value(c.value.as_ref());
            let k = self.key_mut(&c.key);
            k.apply_version(c.value, c.cs, (c.cs.pno > 0).then_some(c.rmw_id));
            k.learn_slot(c.slot, c.rmw_id);
        } else {
            self.apply(&c.key, c.value, c.cs, (c.cs.pno > 0).then_some(c.rmw_id));
            self.learn_committed(&c.key, c.slot, c.rmw_id);
        }
        self.merge_records(&c.key, &c.records);
        let held = self.local(&c.key).1;
        self.effects.send.push((from, PeerMessage::CommitAck { req: c.req, key: c.key, cs: held }));
    }
}

/// What a round of Paxos replies (the local one included) decides, in the priority order of
/// Kite §5.6 M4 / M7 (shared by both phases; only what a quorum or a committed RMW leads to
/// differs between them).
enum Verdict {
    /// a. Some acceptor has the RMW in its registry.
    RmwCommitted,
    /// b - d. Try again: at once, after a back-off, or after catching laggards up.
    Retry(Retry),
    /// e. A quorum acked.
    Quorum,
}

enum Retry {
    /// b. The slot was decided meanwhile (`lc` advanced).
    SlotTaken,
    /// c. A higher ballot was promised.
    Nacked(Ballot),
    /// d. Fewer than a quorum acked because some acceptors lag (`SlotTooHigh`).
    Lagging,
}

fn verdict(outcomes: &[(NodeId, PaxosOutcome)], quorum: usize) -> Verdict {
    if outcomes.iter().any(|(_, o)| *o == PaxosOutcome::RmwCommitted) {
        Verdict::RmwCommitted
    } else if outcomes.iter().any(|(_, o)| matches!(o, PaxosOutcome::SlotTooSmall { .. })) {
        Verdict::Retry(Retry::SlotTaken)
    } else if let Some(promised) = max_nack(outcomes) {
        Verdict::Retry(Retry::Nacked(promised))
    } else if count_acks(outcomes) < quorum {
        Verdict::Retry(Retry::Lagging)
    } else {
        Verdict::Quorum
    }
}

fn max_nack(outcomes: &[(NodeId, PaxosOutcome)]) -> Option<Ballot> {
    outcomes
        .iter()
        .filter_map(|(_, o)| match o {
            PaxosOutcome::Nack { promised } => Some(*promised),
            _ => None,
        })
        .max()
}

fn count_acks(outcomes: &[(NodeId, PaxosOutcome)]) -> usize {
    outcomes
        .iter()
        .filter(|(_, o)| matches!(o, PaxosOutcome::Ack | PaxosOutcome::AlreadyAccepted { .. }))
        .count()
}
