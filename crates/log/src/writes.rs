//! The write path at the leader (ORCA §5.1): append, apply per write path, acknowledge per
//! durability mode, immediate durability (G6), the replicated duplicate filter (§2.1).

use bytes::Bytes;
use strata_wire::log::{LogEntry, LogIndex, LogOp};
use strata_wire::Instant;

use crate::api::{LogEvent, LogReply, Persist, WriteAck, WriteError, WriteOp};
use crate::config::WritePath;
use crate::replica::{LogReplica, Role};

/// A write waiting for its acknowledgement rule (§5.1 step 7).
#[derive(Clone, Debug)]
pub(crate) struct PendingWrite {
    pub token: u64,
    pub client_id: u64,
    pub seq: u64,
    pub index: LogIndex,
    pub immediate: bool,
    pub deadline: Instant,
}

impl LogReplica {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_write(
        &mut self,
        now: Instant,
        token: u64,
        client_id: u64,
        seq: u64,
        key: Bytes,
        op: WriteOp,
        immediate: bool,
    ) {
        let reply = |r| LogReply::Write { token, result: r };
        if key.is_empty() || seq == 0 || client_id == 0 {
            self.effects.reply.push(reply(Err(WriteError::Invalid(
                "empty key, client id 0 or seq 0",
            ))));
            return;
        }
        // Step 1.
        let Some(l) = self.leader.as_ref() else {
            self.effects.reply.push(reply(Err(WriteError::NotLeader {
                hint: self.leader_id,
            })));
            return;
        };
        if !l.synced || (!l.lease_valid(now) && l.hb_started.contains_key(&1)) {
            self.effects.reply.push(reply(Err(WriteError::Unavailable)));
            return;
        }
        if !l.lease_valid(now) {
            self.effects
                .reply
                .push(reply(Err(WriteError::NotLeader { hint: None })));
            return;
        }
        // Step 2: duplicates get the recorded outcome.
        if let Some((s, idx)) = self.kv.dedup(client_id) {
            if s >= seq {
                self.effects.reply.push(reply(Ok(WriteAck { index: idx })));
                return;
            }
        }
        let deadline = now + self.cfg.write_timeout;
        let l = self.leader.as_mut().expect("leader");
        if let Some(&index) = l.inflight.get(&(client_id, seq)) {
            l.pending_writes.push(PendingWrite {
                token,
                client_id,
                seq,
                index,
                immediate,
                deadline,
            });
            return;
        }
        // Steps 3-4.
        let index = LogIndex::new(self.epoch, l.next_counter);
        l.next_counter += 1;
        let op = match op {
            WriteOp::Put(v) => LogOp::Put(v),
            WriteOp::Delete => LogOp::Delete,
        };
        let e = LogEntry {
            index,
            key,
            op,
            client_id,
            seq,
            immediate,
        };
        l.inflight.insert((client_id, seq), index);
        l.pending_writes.push(PendingWrite {
            token,
            client_id,
            seq,
            index,
            immediate,
            deadline,
        });
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
                done.push((w.clone(), Ok(WriteAck { index: w.index })));
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
        for u in need_durable {
            self.make_durable(now, u);
        }
        for (w, result) in done {
            if let Ok(ack) = &result {
                self.stats.writes_acked += 1;
                self.emit(LogEvent::WriteAcked {
                    index: ack.index,
                    client_id: w.client_id,
                    seq: w.seq,
                    immediate: w.immediate,
                });
            }
            self.effects.reply.push(LogReply::Write {
                token: w.token,
                result,
            });
        }
    }

    pub(crate) fn write_deadlines(&self) -> impl Iterator<Item = Instant> + '_ {
        self.leader
            .iter()
            .flat_map(|l| l.pending_writes.iter().map(|w| w.deadline))
    }
}
