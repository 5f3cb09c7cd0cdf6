//! The read paths (ORCA §5.5, §5.11, §2.3): at the leader under its lease with the durability
//! check and MakeDurable, at an active-set follower with `u <= DI_F` (else forwarded to the
//! leader), and the weak policy that serves any applied state.

use std::collections::BTreeMap;

use bytes::Bytes;
use strata_wire::log::{ForwardRead, LogIndex, LogMessage, ReadRelay, ReadValue};
use strata_wire::txn::ReadIntent;
use strata_wire::{Instant, NodeId};

use crate::api::{LogEvent, LogReply, ReadError};
use crate::config::{PlantedBug, ReadPolicy};
use crate::foresight::Foreseen;
use crate::replica::{LogReplica, Role};

/// Who gets the answer of a read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadOrigin {
    Client {
        token: u64,
    },
    /// A client's `ReadMany`: answered with `LogReply::ReadMany`.
    ClientMany {
        token: u64,
    },
    /// A follower forwarded it (§5.5.2 step 5); answered with a `ReadRelay`.
    Forward {
        from: NodeId,
        fwd_id: u64,
    },
}

/// A read waiting at the leader for its session token, for DI (§5.5.1), or for the decision
/// of a transaction that holds its key (rifl.md §5.9).
#[derive(Clone, Debug)]
pub(crate) struct PendingRead {
    pub origin: ReadOrigin,
    /// One key, or a `ReadMany`'s: answered together once every one can be.
    pub keys: Vec<Bytes>,
    pub min_index: Option<LogIndex>,
    pub deadline: Instant,
    /// Counted once in `reads_made_durable`.
    pub waited: bool,
    /// A transaction's read: what a pending transaction will leave answers it (`foresight.rs`);
    /// for update, it waits for the key's reservation and then takes it (`reservations.rs`).
    pub intent: ReadIntent,
    /// Counted once in `reads_held`.
    pub held: bool,
}

/// What one key of a read at the leader answers.
enum Answer {
    /// The applied value, durable (§5.5.1): an ORCA read.
    Applied { value: Option<Bytes>, update_index: LogIndex },
    /// What a pending single-participant transaction will leave (`foresight.rs`).
    Foreseen { value: Option<Bytes>, version: LogIndex },
}

/// Whether one key of a read at the leader can be answered now.
enum KeyState {
    Ready(Answer),
    /// Until the entry its foreseen value depends on applies, or its lock's decision does.
    Wait,
    /// Until the entry at this index is durable (§5.5.1 MakeDurable).
    NotDurable(LogIndex),
}

/// A read waiting at a non-leader for its applied index to reach the session token (§2.3).
#[derive(Clone, Debug)]
pub(crate) struct CatchUp {
    token: u64,
    key: Bytes,
    min_index: LogIndex,
    until: Instant,
}

/// Non-leader read state: catch-up waits and forwarded reads.
#[derive(Clone, Debug, Default)]
pub(crate) struct FollowerReads {
    next_fwd_id: u64,
    /// fwd_id -> (client token, give-up instant).
    forwarded: BTreeMap<u64, (u64, Instant)>,
    catching_up: Vec<CatchUp>,
}

impl LogReplica {
    pub(crate) fn on_read(
        &mut self,
        now: Instant,
        token: u64,
        key: Bytes,
        min_index: Option<LogIndex>,
        intent: ReadIntent,
    ) {
        let origin = ReadOrigin::Client { token };
        // Only the leader foresees; a transaction's read elsewhere is a plain one.
        if self.leader.is_some() && (intent.foresees() || self.cfg.reads != ReadPolicy::Any) {
            return self.leader_read(now, origin, vec![key], min_index, intent);
        }
        if self.cfg.reads == ReadPolicy::Any {
            return self.local_read(now, token, key, min_index);
        }
        if self.cfg.reads == ReadPolicy::Leader {
            return self.finish_read(origin, Err(ReadError::NotLeader { hint: self.leader_id }));
        }
        // §5.5.2 step 1 (R2).
        if !self.is_serving(now) && !self.cfg.planted(PlantedBug::ServeOutsideActiveSet) {
            return self.finish_read(origin, Err(ReadError::NotInActiveSet));
        }
        self.local_read(now, token, key, min_index);
    }

    /// A `ReadMany`: served by the leader only, whatever the table's read policy.
    pub(crate) fn on_read_many(
        &mut self,
        now: Instant,
        token: u64,
        keys: Vec<Bytes>,
        min_index: Option<LogIndex>,
        intent: ReadIntent,
    ) {
        let origin = ReadOrigin::ClientMany { token };
        if self.leader.is_none() {
            return self.finish_read(origin, Err(ReadError::NotLeader { hint: self.leader_id }));
        }
        self.leader_read(now, origin, keys, min_index, intent);
    }

    /// Step 2 of §5.5.2 (session token), then serve or forward.
    fn local_read(&mut self, now: Instant, token: u64, key: Bytes, min_index: Option<LogIndex>) {
        match min_index {
            Some(m) if self.kv.applied() < m => {
                let until = now + self.cfg.catchup_wait;
                self.fwd.catching_up.push(CatchUp { token, key, min_index: m, until });
            }
            _ => self.serve_or_forward(now, token, key, min_index),
        }
    }

    /// §5.5.2 steps 3-5: serve if `u <= DI_F` and still serving, else forward to the leader.
    /// Weak reads (§5.11) serve any applied state.
    fn serve_or_forward(
        &mut self,
        now: Instant,
        token: u64,
        key: Bytes,
        min_index: Option<LogIndex>,
    ) {
        let (value, u) = self.kv.get(&key);
        let ok = match self.cfg.reads {
            ReadPolicy::Any => true,
            _ => {
                let durable = u <= self.lease.di_f
                    || self.cfg.planted(PlantedBug::SkipDurabilityCheck)
                    || self.cfg.planted(PlantedBug::SkipFollowerDurabilityCheck);
                durable
                    && (self.is_serving(now) || self.cfg.planted(PlantedBug::ServeOutsideActiveSet))
            }
        };
        if ok {
            self.serve(ReadOrigin::Client { token }, key, value, u, min_index);
        } else {
            self.forward(now, token, key, min_index);
        }
    }

    fn forward(&mut self, now: Instant, token: u64, key: Bytes, min_index: Option<LogIndex>) {
        let leader = match self.leader_id {
            Some(l) if l != self.id => l,
            _ => return self.finish_read(ReadOrigin::Client { token }, Err(ReadError::Timeout)),
        };
        let fwd_id = self.fwd.next_fwd_id;
        self.fwd.next_fwd_id += 1;
        self.fwd.forwarded.insert(fwd_id, (token, now + self.cfg.read_timeout));
        self.stats.reads_forwarded += 1;
        self.send(
            leader,
            LogMessage::ForwardRead(ForwardRead { epoch: self.epoch, fwd_id, key, min_index }),
        );
    }

    /// Replies and records the audit event (§7).
    fn serve(
        &mut self,
        origin: ReadOrigin,
        key: Bytes,
        value: Option<Bytes>,
        u: LogIndex,
        min_index: Option<LogIndex>,
    ) {
        // rifl.md §5.7: a moved shard's state is stale once the new group takes writes.
        if let Some((_, m)) = self.kv.frozen() {
            let replicas = m.replicas.clone();
            return self.finish_read(origin, Err(ReadError::Moved { replicas }));
        }
        // rifl.md §5.9 (R-D18): a locked key's value may be about to change; the read waits
        // for the decision (the client retries), or it could miss a transaction whose
        // outcome was already returned.
        if self.kv.blocks_reads(&key) && !self.cfg.planted(PlantedBug::TxnReadsIgnoreLocks) {
            return self.finish_read(origin, Err(ReadError::Locked));
        }
        let read = self.read_value(key, Answer::Applied { value, update_index: u }, min_index);
        self.finish_read(origin, Ok(read));
    }

    /// One key's answer as a [`ReadValue`], counted. An applied value is an ORCA read and
    /// records its audit event (§7); a foreseen one is not (the value may never be applied;
    /// the prepare's version check decides), and has no durability check.
    fn read_value(&mut self, key: Bytes, answer: Answer, min_index: Option<LogIndex>) -> ReadValue {
        let (served_by, epoch) = (self.id, self.epoch);
        let (vts, w_mean_ns) = (self.kv.vts(&key), self.kv.w_mean_ns(&key));
        let (value, update_index) = match answer {
            Answer::Foreseen { value, version } => {
                self.stats.reads_foreseen += 1;
                (value, version)
            }
            Answer::Applied { value, update_index } => {
                self.stats.reads_served += 1;
                let applied = self.kv.applied();
                self.emit(LogEvent::ReadServed {
                    key,
                    value: value.clone(),
                    update_index,
                    served_by,
                    epoch,
                    min_index,
                    applied,
                });
                (value, update_index)
            }
        };
        ReadValue { value, update_index, served_by, epoch, vts, w_mean_ns }
    }

    pub(crate) fn finish_read(&mut self, origin: ReadOrigin, result: Result<ReadValue, ReadError>) {
        match origin {
            ReadOrigin::Client { token } => {
                self.effects.reply.push(LogReply::Read { token, result })
            }
            ReadOrigin::ClientMany { token } => {
                let result = result.map(|v| vec![v]);
                self.effects.reply.push(LogReply::ReadMany { token, result })
            }
            ReadOrigin::Forward { from, fwd_id } => {
                let epoch = self.epoch;
                self.send(from, LogMessage::ReadRelay(ReadRelay { epoch, fwd_id, result }));
            }
        }
    }

    /// §5.5.1 at the leader: lease, session token, then the durability check.
    fn leader_read(
        &mut self,
        now: Instant,
        origin: ReadOrigin,
        keys: Vec<Bytes>,
        min_index: Option<LogIndex>,
        intent: ReadIntent,
    ) {
        let deadline = now + self.cfg.read_timeout;
        let l = self.leader.as_mut().expect("leader");
        if !l.synced {
            return self.finish_read(origin, Err(ReadError::Unavailable));
        }
        if !l.lease_valid(now) {
            return self.finish_read(origin, Err(ReadError::NotLeader { hint: None }));
        }
        let (waited, held) = (false, false);
        l.pending_reads.push(PendingRead {
            origin,
            keys,
            min_index,
            deadline,
            waited,
            intent,
            held,
        });
        self.settle_leader_reads(now);
    }

    pub(crate) fn on_forward_read(&mut self, now: Instant, from: NodeId, f: ForwardRead) {
        let origin = ReadOrigin::Forward { from, fwd_id: f.fwd_id };
        if self.leader.is_some() {
            self.leader_read(now, origin, vec![f.key], f.min_index, ReadIntent::Plain);
        } else {
            self.finish_read(origin, Err(ReadError::NotLeader { hint: self.leader_id }));
        }
    }

    pub(crate) fn on_read_relay(&mut self, r: ReadRelay) {
        if let Some((token, _)) = self.fwd.forwarded.remove(&r.fwd_id) {
            self.effects.reply.push(LogReply::Read { token, result: r.result });
        }
    }

    /// Re-evaluates every read waiting at the leader (level-triggered; §5.5.1 step 3 loop).
    pub(crate) fn settle_leader_reads(&mut self, now: Instant) {
        let Some(l) = self.leader.as_mut() else {
            return;
        };
        if l.pending_reads.is_empty() {
            return;
        }
        let reads = std::mem::take(&mut l.pending_reads);
        l.reservations.forget_lapsed(now);
        let lease_ok = l.lease_valid(now);
        let check = self.cfg.durability.checks_durability()
            && !self.cfg.planted(PlantedBug::SkipDurabilityCheck);
        let honour_locks = !self.cfg.planted(PlantedBug::TxnReadsIgnoreLocks);
        let mut keep = Vec::new();
        for mut r in reads {
            if !lease_ok {
                self.finish_read(r.origin, Err(ReadError::NotLeader { hint: None }));
                continue;
            }
            let locked = honour_locks && r.keys.iter().any(|k| self.kv.blocks_reads(k));
            if now >= r.deadline {
                let why = if locked { ReadError::Locked } else { ReadError::Timeout };
                self.finish_read(r.origin, Err(why));
                continue;
            }
            if r.min_index.is_some_and(|m| self.kv.applied() < m) {
                keep.push(r);
                continue;
            }
            if r.intent.reserves() && self.wait_for_reservation(now, &mut r) {
                keep.push(r);
                continue;
            }
            match self.answers(now, &mut r, check, honour_locks) {
                Some(answers) => {
                    self.reserve_for(now, &r);
                    self.answer(r, answers);
                }
                None => keep.push(r),
            }
        }
        self.leader.as_mut().expect("leader").pending_reads.extend(keep);
    }

    /// Every key's answer, or `None` while one of them must wait (all keys are answered in
    /// one step, so a read of several sees one state of the shard).
    fn answers(
        &mut self,
        now: Instant,
        r: &mut PendingRead,
        check: bool,
        honour_locks: bool,
    ) -> Option<Vec<Answer>> {
        let mut answers = Vec::with_capacity(r.keys.len());
        let mut make_durable = None;
        for key in &r.keys {
            match self.key_state(key, r.intent, check, honour_locks) {
                KeyState::Ready(a) => answers.push(a),
                KeyState::Wait => {}
                KeyState::NotDurable(u) => make_durable = make_durable.max(Some(u)),
            }
        }
        if let Some(u) = make_durable {
            if !r.waited {
                r.waited = true;
                self.stats.reads_made_durable += 1;
            }
            self.make_durable(now, u);
        }
        (answers.len() == r.keys.len()).then_some(answers)
    }

    /// One key of a read at the leader: foreseen (a transaction's read), else waiting for a
    /// lock's decision, else the applied value once durable.
    fn key_state(
        &self,
        key: &[u8],
        intent: ReadIntent,
        check: bool,
        honour_locks: bool,
    ) -> KeyState {
        let l = self.leader.as_ref().expect("leader");
        if intent.foresees() {
            match l.foresight.get(key, self.kv.applied()) {
                Some(Foreseen::Known { value, version }) => {
                    let (value, version) = (value.clone(), *version);
                    return KeyState::Ready(Answer::Foreseen { value, version });
                }
                // Known once that entry applies; then the plain path below.
                Some(Foreseen::Unknown { .. }) => return KeyState::Wait,
                None => {}
            }
        }
        // rifl.md §5.9 (R-D18): a locked key's value may be about to change, so the read
        // waits here for the decision and is answered the moment it is applied (the settle
        // loop runs after every input); polling from the client would add up to a timer tick
        // per lock on hot keys. A read still blocked at its deadline answers `Locked`, and
        // the client asks again (the lock outlives `T_TX` only while recovery runs).
        if honour_locks && self.kv.blocks_reads(key) {
            return KeyState::Wait;
        }
        let (value, update_index) = self.kv.get(key);
        if !check || update_index <= l.di {
            KeyState::Ready(Answer::Applied { value, update_index })
        } else {
            KeyState::NotDurable(update_index)
        }
    }

    /// Answers a read at the leader whose every key is ready.
    fn answer(&mut self, r: PendingRead, answers: Vec<Answer>) {
        // rifl.md §5.7: a moved shard's state is stale once the new group takes writes.
        if let Some((_, m)) = self.kv.frozen() {
            let replicas = m.replicas.clone();
            return self.finish_read(r.origin, Err(ReadError::Moved { replicas }));
        }
        let pairs = r.keys.into_iter().zip(answers);
        match r.origin {
            ReadOrigin::ClientMany { token } => {
                let values = pairs.map(|(key, a)| self.read_value(key, a, r.min_index)).collect();
                self.effects.reply.push(LogReply::ReadMany { token, result: Ok(values) })
            }
            origin => {
                for (key, a) in pairs {
                    let value = self.read_value(key, a, r.min_index);
                    self.finish_read(origin, Ok(value));
                }
            }
        }
    }

    /// Whether a read for update must wait for another transaction's reservation of one of
    /// its keys (`reservations.rs`).
    fn wait_for_reservation(&mut self, now: Instant, r: &mut PendingRead) -> bool {
        let l = self.leader.as_ref().expect("leader");
        let held = r.keys.iter().any(|k| l.reservations.held_until(k, now).is_some());
        if held && !r.held {
            r.held = true;
            self.stats.reads_held += 1;
        }
        held
    }

    /// A read for update is answered: its keys' next ones wait for this transaction's prepare.
    /// All of them at once: a transaction never holds one of its keys while waiting for
    /// another's, so two never wait for each other.
    fn reserve_for(&mut self, now: Instant, r: &PendingRead) {
        let hold = self.cfg.txn_read_hold;
        if let ReadIntent::TxnForUpdate { reserver } = r.intent {
            if hold.is_zero() {
                return;
            }
            let l = self.leader.as_mut().expect("leader");
            for key in &r.keys {
                l.reservations.reserve(key.clone(), now + hold, reserver);
            }
        }
    }

    /// A dropped transaction's reads for update (`reservations.rs`): the reads waiting for
    /// its keys go on at once (the settle loop that follows every input answers them).
    pub(crate) fn on_release_reservations(
        &mut self,
        now: Instant,
        token: u64,
        keys: &[Bytes],
        reserver: u64,
    ) {
        if let Some(l) = self.leader.as_mut() {
            let released = keys.iter().filter(|k| l.reservations.release_by(k, reserver)).count();
            self.stats.reservations_released += released as u64;
            self.settle_leader_reads(now);
        }
        self.effects.reply.push(LogReply::ReservationsReleased { token });
    }

    /// Catch-up waits and forwarded reads at a non-leader.
    pub(crate) fn settle_follower_reads(&mut self, now: Instant) {
        let waits = std::mem::take(&mut self.fwd.catching_up);
        for w in waits {
            if self.kv.applied() >= w.min_index {
                if self.cfg.reads == ReadPolicy::ActiveSet
                    && !self.is_serving(now)
                    && !self.cfg.planted(PlantedBug::ServeOutsideActiveSet)
                {
                    self.finish_read(
                        ReadOrigin::Client { token: w.token },
                        Err(ReadError::NotInActiveSet),
                    );
                } else {
                    self.serve_or_forward(now, w.token, w.key, Some(w.min_index));
                }
            } else if now >= w.until {
                self.forward(now, w.token, w.key, Some(w.min_index));
            } else {
                self.fwd.catching_up.push(w);
            }
        }
        let expired: Vec<u64> =
            self.fwd.forwarded.iter().filter(|(_, &(_, d))| now >= d).map(|(&id, _)| id).collect();
        for id in expired {
            let (token, _) = self.fwd.forwarded.remove(&id).expect("present");
            self.finish_read(ReadOrigin::Client { token }, Err(ReadError::Timeout));
        }
    }

    pub(crate) fn follower_read_deadlines(&self) -> impl Iterator<Item = Instant> + '_ {
        self.fwd
            .catching_up
            .iter()
            .map(|w| w.until)
            .chain(self.fwd.forwarded.values().map(|&(_, d)| d))
    }

    /// Each waiting read's deadline and, for one held back by a reservation, the hold's end.
    pub(crate) fn leader_read_deadlines(&self) -> impl Iterator<Item = Instant> + '_ {
        self.leader.iter().flat_map(|l| {
            l.pending_reads.iter().flat_map(|r| {
                let reserves = r.intent.reserves();
                let held = r
                    .keys
                    .iter()
                    .filter(move |_| reserves)
                    .filter_map(|k| l.reservations.held_until(k, self.now));
                std::iter::once(r.deadline).chain(held)
            })
        })
    }

    /// Whether this node is the leader role (for read routing in drivers).
    pub fn is_leader(&self) -> bool {
        self.role == Role::Leader
    }
}
