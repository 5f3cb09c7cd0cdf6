//! The write path at the leader (ORCA §5.1): append, apply per write path, acknowledge per
//! durability mode, immediate durability (G6); exactly once per RIFL RPC id (rifl.md §5.3).
//!
//! Exactly-once, in two places that never disagree:
//!
//! * At apply time (`state::Kv::apply`), at every replica: an entry whose RPC already has an
//!   applied record, or whose seq is at or below the client's watermark, changes nothing. The
//!   records and watermarks are learned from applied entries only (the entry is the record,
//!   its `ack` field the watermark), so this is the same decision at every replica, whatever
//!   the leader did: a retry appended twice across a leader change executes once.
//! * At the leader, on arrival: `Stale` if the seq is at or below the applied watermark; the
//!   recorded index if the RPC has an applied record (R-G2); waiting on the entry if it is
//!   appended but not applied (`inflight`, leader-only state, gone at step-down); otherwise a
//!   new entry. This only avoids useless appends; correctness rests on the first point.
//!
//! A waiting write is answered from the record once its entry is applied, so every `Ok` of an
//! RPC carries the index of the one entry that executed it.

use bytes::Bytes;
use strata_rifl::Verdict;
use strata_wire::log::{LogEntry, LogIndex, LogOp, ShardMove};
use strata_wire::rifl::{Rifl, RpcId};
use strata_wire::Instant;

use crate::api::{LogEvent, LogReply, Persist, Snapshot, WriteAck, WriteError, WriteOp};
use crate::config::{PlantedBug, WritePath};
use crate::replica::{LogReplica, Role};

/// A write waiting for its acknowledgement rule (§5.1 step 7).
#[derive(Clone, Debug)]
pub(crate) struct PendingWrite {
    pub token: u64,
    pub rpc: RpcId,
    /// The entry waited on: the RPC's own new entry, its applied record, or an appended but
    /// unapplied entry of it.
    pub index: LogIndex,
    pub immediate: bool,
    pub deadline: Instant,
}

/// The largest shard state a move carries (rifl.md §5.7): it travels as one frame (16 MiB
/// limit) and one WAL record (16 MiB limit) with room for their headers.
pub const MAX_MOVE_BYTES: usize = 15 << 20;

/// An upper bound of the encoded size of a write's entry with a key and a value (or a
/// snapshot) of these lengths (`LogEntry::encoded_len` is exact once the entry exists).
fn entry_len(key: usize, value: usize) -> usize {
    64 + key + value
}

/// A `Freeze` waiting for its entry (rifl.md §5.7 step 1).
#[derive(Clone, Debug)]
pub(crate) struct PendingFreeze {
    pub token: u64,
    pub to: ShardMove,
    pub index: LogIndex,
    pub deadline: Instant,
}

impl LogReplica {
    /// Where the shard went, if an applied or appended `Freeze` says so: writes are then
    /// answered `Moved` instead of being appended (§5.7 step 1).
    pub fn moved_to(&self) -> Option<&ShardMove> {
        let appended = self.leader.as_ref().and_then(|l| l.freezing.as_ref());
        self.kv.frozen().or(appended).map(|(_, m)| m)
    }

    /// The frozen state, once a `Freeze` entry is applied here (rifl.md §5.7 step 2): the
    /// same at every replica that applied it.
    pub fn frozen_snapshot(&self) -> Option<Snapshot> {
        self.kv.frozen_snapshot()
    }

    /// rifl.md §5.7 steps 1-2 at the leader: append the `Freeze` entry (with immediate
    /// durability), or wait on the one already appended, and answer with the final state once
    /// it is committed, durable and applied (`settle_writes`).
    pub(crate) fn on_freeze(&mut self, now: Instant, token: u64, to: ShardMove) {
        let reply = |r| LogReply::Frozen { token, result: r };
        let Some(l) = self.leader.as_ref() else {
            self.effects.reply.push(reply(Err(WriteError::NotLeader { hint: self.leader_id })));
            return;
        };
        if !l.synced || !l.lease_valid(now) {
            self.effects.reply.push(reply(Err(WriteError::Unavailable)));
            return;
        }
        let deadline = now + self.cfg.write_timeout;
        let existing = self.kv.frozen().or(l.freezing.as_ref()).cloned();
        let index = match existing {
            Some((index, m)) if m == to => index,
            // Moving elsewhere already: the caller learns where (its move cannot happen).
            Some((_, m)) => {
                self.effects.reply.push(reply(Err(WriteError::Moved { replicas: m.replicas })));
                return;
            }
            // The state travels in one message and one log entry: refuse before freezing a
            // shard that could then never be installed.
            None if self.kv.snapshot_encoded_len() > MAX_MOVE_BYTES
                || entry_len(0, self.kv.snapshot_encoded_len()) > self.cfg.max_entry_bytes() =>
            {
                let why = "the shard's state is above the 15 MiB a move carries (one message, one log entry)";
                self.effects.reply.push(reply(Err(WriteError::Invalid(why))));
                return;
            }
            None => {
                let index = self.append_node_entry(LogOp::Freeze(to.clone()), true);
                self.leader.as_mut().expect("leader").freezing = Some((index, to.clone()));
                self.leader_commit();
                self.apply_ready();
                self.make_durable(now, index);
                index
            }
        };
        let l = self.leader.as_mut().expect("leader");
        l.pending_freezes.push(PendingFreeze { token, to, index, deadline });
    }

    pub(crate) fn on_write(
        &mut self,
        now: Instant,
        token: u64,
        rifl: Rifl,
        key: Bytes,
        op: WriteOp,
        immediate: bool,
    ) {
        let reply = |r| LogReply::Write { token, result: r };
        if key.is_empty() {
            self.effects.reply.push(reply(Err(WriteError::Invalid("empty key"))));
            return;
        }
        // Every accepted write must be able to replicate: its entry has to fit in one peer
        // message (docs/design.md, "Limits and bounds"). The host refuses values and keys
        // beyond the node's limits first (`ValueTooLarge`, `KeyTooLarge`), which a valid node
        // configuration keeps well inside this; this guard holds for any driver.
        if entry_len(key.len(), op.payload_len()) > self.cfg.max_entry_bytes() {
            let why = "the write's log entry is larger than one peer message (max_frame_bytes)";
            self.effects.reply.push(reply(Err(WriteError::Invalid(why))));
            return;
        }
        // rifl.md §5.3 S3: a broken envelope is neither executed nor an acknowledgement.
        if let Err(why) = rifl.check() {
            self.effects.reply.push(reply(Err(WriteError::BadEnvelope(why))));
            return;
        }
        // S1.
        self.observed_cluster_time = self.observed_cluster_time.max(rifl.lease.timestamp);
        // Step 1.
        let Some(l) = self.leader.as_ref() else {
            self.effects.reply.push(reply(Err(WriteError::NotLeader { hint: self.leader_id })));
            return;
        };
        if !l.synced || (!l.lease_valid(now) && l.hb_started.contains_key(&1)) {
            self.effects.reply.push(reply(Err(WriteError::Unavailable)));
            return;
        }
        if !l.lease_valid(now) {
            self.effects.reply.push(reply(Err(WriteError::NotLeader { hint: None })));
            return;
        }
        // rifl.md §5.7: nothing is appended after a `Freeze`; the retry goes to the new group,
        // which has this RPC's record if an earlier attempt executed here.
        if let Some(m) = self.moved_to() {
            let replicas = m.replicas.clone();
            self.effects.reply.push(reply(Err(WriteError::Moved { replicas })));
            return;
        }
        let rpc = rifl.rpc;
        let deadline = now + self.cfg.write_timeout;
        let dedup = !self.cfg.planted(PlantedBug::NoDedup)
            && !self.cfg.planted(PlantedBug::SkipLeaderDedup);
        let l = self.leader.as_mut().expect("leader");
        // Step 2 (rifl.md §5.3 S4): duplicates get the recorded outcome. The verdict comes from
        // the applied records; the leader's in-flight appends stand in for `InProgress`.
        let known = match self.kv.rifl().peek(rpc) {
            _ if !dedup => None,
            Verdict::Stale => {
                self.effects.reply.push(reply(Err(WriteError::Stale)));
                return;
            }
            Verdict::Completed(record) => Some(record.index),
            // rifl.md §5.6: the client's records here were collected after its lease expired.
            _ if self.kv.is_expired(rpc.client_id) => {
                self.effects.reply.push(reply(Err(WriteError::ExpiredLease)));
                return;
            }
            _ => l.inflight.get(&rpc).copied(),
        };
        // rifl.md §5.9: a key locked in the applied state takes no plain write now (an entry
        // would apply as a no-op anyway); the client retries.
        if known.is_none() && self.kv.is_locked(&key) {
            self.effects.reply.push(reply(Err(WriteError::Locked)));
            return;
        }
        if let Some(index) = known {
            // Answered by `settle_writes` under the acknowledgement rule of this request (an
            // immediate-durability retry of an applied write waits for DI to cover it).
            l.pending_writes.push(PendingWrite { token, rpc, index, immediate, deadline });
            return;
        }
        // §5.5.3: the node validated the lease before this core saw the write (and passed the
        // best expiration it knows); this is the core's own guard for a driver that did not.
        // A lease that may have expired is refused as retryable, never executed nor called
        // expired.
        if rifl.lease.expiration <= self.observed_cluster_time {
            self.effects.reply.push(reply(Err(WriteError::Unavailable)));
            return;
        }
        if l.next_counter >= crate::replica::COUNTER_CEILING {
            // 4 billion entries in one epoch: a new election restarts the counter.
            self.step_down(now, crate::StepDownReason::CounterExhausted);
            self.effects.reply.push(reply(Err(WriteError::NotLeader { hint: None })));
            return;
        }
        // Steps 3-4 (and S6: the entry is the completion record).
        let index = LogIndex::new(self.epoch, l.next_counter);
        l.next_counter += 1;
        let e = LogEntry {
            index,
            key,
            op: LogOp::from(op),
            client_id: rpc.client_id,
            seq: rpc.seq,
            ack: rifl.first_incomplete - 1,
            immediate,
        };
        l.inflight.entry(rpc).or_insert(index);
        l.pending_writes.push(PendingWrite { token, rpc, index, immediate, deadline });
        // A plain write's effect is known once applied (`foresight.rs`).
        if self.cfg.foresee_writes {
            l.foresight.note(e.key.clone(), crate::foresight::Foreseen::Unknown { until: index });
        }
        for p in l.progress.values_mut() {
            p.needs_send = true; // step 6: streamed by the replication loop
        }
        self.log.append(e.clone());
        self.persist(Persist::Append(vec![e]));
        // Step 5 (Async: apply now) happens in settle through the commit rule of §5.2.
        if immediate {
            self.leader_commit();
            self.apply_ready();
            self.make_durable(now, index);
        }
    }

    /// rifl.md §5.6 at a ready leader: the lease service confirmed these clients expired.
    /// Their Kairos watermark reports go at once (any leader). Appends one `Expire` entry
    /// naming those this shard holds records or a watermark of; applied, it collects them at
    /// every replica. Returns whether an entry was appended (a
    /// follower, or a leader in its sync phase, does nothing: the next leader's node asks
    /// again when the client shows up).
    pub fn expire_clients(&mut self, now: Instant, clients: &[u64]) -> bool {
        // kairos.md §5.9: membership is the live clients; an expired one's watermark report
        // goes now, whether or not this shard holds anything else of it (`kairos_wm`).
        if let Some(l) = self.leader.as_mut() {
            l.kairos_reports.forget(now, clients.iter().copied());
        }
        let known: Vec<u64> = clients
            .iter()
            .copied()
            .filter(|&c| self.kv.rifl().knows(c) && !self.kv.is_expired(c))
            .collect();
        let ready = self.leader.as_ref().is_some_and(|l| l.synced && l.lease_valid(now));
        if known.is_empty() || !ready || self.moved_to().is_some() {
            return false;
        }
        self.append_node_entry(LogOp::Expire(known), false);
        true
    }

    /// Appends, at the leader, an entry of the node's own (`Expire`, `Freeze`: no key, no RPC
    /// id) for the replication loop to stream; returns its index.
    fn append_node_entry(&mut self, op: LogOp, immediate: bool) -> LogIndex {
        let l = self.leader.as_mut().expect("only a leader appends");
        let index = LogIndex::new(self.epoch, l.next_counter);
        l.next_counter += 1;
        for p in l.progress.values_mut() {
            p.needs_send = true;
        }
        let e = LogEntry { index, key: Bytes::new(), op, client_id: 0, seq: 0, ack: 0, immediate };
        self.log.append(e.clone());
        self.persist(Persist::Append(vec![e]));
        index
    }

    /// Acknowledges every waiting write whose rule is met (§5.1 step 7), times out the rest.
    pub(crate) fn settle_writes(&mut self, now: Instant) {
        if self.role != Role::Leader {
            return;
        }
        let applied = self.kv.applied();
        let commit = self.commit;
        let path = self.cfg.durability.write_path();
        let mut done = Vec::new();
        let mut need_durable = Vec::new();
        let dedup = !self.cfg.planted(PlantedBug::NoDedup);
        let kv = &self.kv;
        let l = self.leader.as_mut().expect("leader");
        let di = l.di;
        l.inflight.retain(|_, idx| *idx > applied);
        l.pending_writes.retain(|w| {
            let ok = if w.immediate {
                di >= w.index && applied >= w.index
            } else {
                match path {
                    WritePath::Async => applied >= w.index,
                    WritePath::SyncRepl | WritePath::Sync => {
                        commit >= w.index && applied >= w.index
                    }
                }
            };
            if ok {
                // The applied record names the entry that executed the RPC: an earlier one if
                // the entry waited on was a duplicate (it is below `w.index`, so the rule holds
                // for it too); `Stale` if the client acknowledged the RPC meanwhile.
                let result = match kv.rifl().peek(w.rpc) {
                    _ if !dedup => Ok(WriteAck { index: w.index, outcome: Default::default() }),
                    Verdict::Completed(record) => Ok(WriteAck::from(record)),
                    Verdict::Stale => Err(WriteError::Stale),
                    // Its entry applied as a no-op: the client's lease had expired (§5.6).
                    _ if kv.is_expired(w.rpc.client_id) => Err(WriteError::ExpiredLease),
                    // Its entry came after a `Freeze` (§5.7): not executed here.
                    _ if kv.frozen().is_some() => Err(WriteError::Moved {
                        replicas: kv.frozen().map(|(_, m)| m.replicas.clone()).unwrap_or_default(),
                    }),
                    // No record, and neither expired nor moved: the key was locked by a
                    // transaction when the entry applied (rifl.md §5.9); nothing was done.
                    _ => Err(WriteError::Locked),
                };
                done.push((w.clone(), result));
                false
            } else if now >= w.deadline {
                done.push((w.clone(), Err(WriteError::Timeout)));
                false
            } else {
                if w.immediate {
                    need_durable.push(w.index);
                }
                true
            }
        });
        let mut frozen: Vec<(u64, Result<Snapshot, WriteError>)> = Vec::new();
        l.pending_freezes.retain(|f| {
            if commit >= f.index && di >= f.index && applied >= f.index {
                // The first applied `Freeze` decides; a different one means another move won.
                let result = match kv.frozen() {
                    Some((_, m)) if *m == f.to => Ok(kv.frozen_snapshot().expect("frozen")),
                    Some((_, m)) => Err(WriteError::Moved { replicas: m.replicas.clone() }),
                    None => Err(WriteError::Timeout),
                };
                frozen.push((f.token, result));
                false
            } else if now >= f.deadline {
                frozen.push((f.token, Err(WriteError::Timeout)));
                false
            } else {
                need_durable.push(f.index);
                true
            }
        });
        for (token, result) in frozen {
            self.effects.reply.push(LogReply::Frozen { token, result });
        }
        for u in need_durable {
            self.make_durable(now, u);
        }
        for (w, result) in done {
            if let Ok(ack) = &result {
                self.stats.writes_acked += 1;
                self.emit(LogEvent::WriteAcked {
                    index: ack.index,
                    client_id: w.rpc.client_id,
                    seq: w.rpc.seq,
                    immediate: w.immediate,
                });
            }
            self.effects.reply.push(LogReply::Write { token: w.token, result });
        }
    }

    pub(crate) fn write_deadlines(&self) -> impl Iterator<Item = Instant> + '_ {
        self.leader.iter().flat_map(|l| {
            l.pending_writes
                .iter()
                .map(|w| w.deadline)
                .chain(l.pending_freezes.iter().map(|f| f.deadline))
        })
    }
}
