//! Elections (ORCA §5.9): epochs, votes persisted before they are sent, rule 0 (lease
//! protection), rule (d) (no vote for a less up-to-date log), the new leader's NoOp and sync
//! phase, and stepping down (§5.8).

use std::collections::{BTreeMap, HashMap};

use strata_wire::log::{LogEntry, LogIndex, LogMessage, LogOp};
use strata_wire::rifl::RpcId;
use strata_wire::{Instant, NodeId};

use crate::api::{
    LogEvent, LogReply, MarkOutReason, Persist, ReadError, StepDownReason, VoteRefusal, WriteError,
};
use crate::replica::{LeaderState, LogReplica, Progress, Role};

impl LogReplica {
    /// Rule 0: a leader under lease, or a node that heard from a leader (or restarted) within
    /// `ET_min`, ignores vote requests entirely.
    pub(crate) fn lease_protected(&self, now: Instant) -> bool {
        match &self.leader {
            Some(l) => l.lease_valid(now),
            None => now.saturating_since(self.last_leader_contact) < self.cfg.election_timeout_min,
        }
    }

    /// Candidate step 1-2: new epoch, vote for self (persisted before the requests leave).
    pub(crate) fn start_election(&mut self, now: Instant) {
        if self.epoch >= crate::replica::EPOCH_CEILING - 1 {
            // Only a store written before epochs were bounded gets here: the group cannot
            // elect without wrapping, so it stays without a leader (re-seed this replica).
            self.reset_election_deadline(now);
            self.stats.bad_messages += 1;
            return;
        }
        self.epoch += 1;
        self.voted_for = Some(self.id);
        self.persist(Persist::HardState(self.hard_state()));
        self.role = Role::Candidate;
        self.leader_id = None;
        self.reset_follower_lease(now, MarkOutReason::EpochChange);
        self.votes.clear();
        self.votes.insert(self.id);
        self.reset_election_deadline(now);
        self.stats.elections_started += 1;
        let last_index = self.log.last_index();
        self.emit(LogEvent::ElectionStarted { epoch: self.epoch, last_index });
        for f in self.peers.clone() {
            self.send(f, LogMessage::RequestVote { epoch: self.epoch, last_index });
        }
        if self.votes.len() >= self.majority() {
            self.become_leader(now);
        }
    }

    /// Voter (rule 0 was checked and a higher epoch adopted by the caller).
    pub(crate) fn on_request_vote(
        &mut self,
        now: Instant,
        from: NodeId,
        epoch: u32,
        cand_last: LogIndex,
    ) {
        let own_last = self.log.last_index();
        let refusal = if epoch < self.epoch {
            Some(VoteRefusal::StaleEpoch)
        } else if self.voted_for.is_some_and(|v| v != from) {
            Some(VoteRefusal::AlreadyVoted)
        } else if own_last > cand_last {
            Some(VoteRefusal::LessUpToDate) // rule (d)
        } else {
            None
        };
        match refusal {
            Some(reason) => {
                self.emit(LogEvent::VoteRefused { epoch, candidate: from, reason });
                self.send(from, LogMessage::VoteResp { epoch: self.epoch, granted: false });
            }
            None => {
                if self.voted_for != Some(from) {
                    self.voted_for = Some(from);
                    self.persist(Persist::HardState(self.hard_state()));
                }
                self.reset_election_deadline(now);
                self.emit(LogEvent::VoteGranted {
                    epoch,
                    candidate: from,
                    candidate_last: cand_last,
                    own_last,
                });
                // `send` holds the reply until the vote is fsynced.
                self.send(from, LogMessage::VoteResp { epoch: self.epoch, granted: true });
            }
        }
    }

    pub(crate) fn on_vote_resp(&mut self, now: Instant, from: NodeId, epoch: u32, granted: bool) {
        if self.role != Role::Candidate || epoch != self.epoch || !granted {
            return;
        }
        self.votes.insert(from);
        if self.votes.len() >= self.majority() {
            self.become_leader(now);
        }
    }

    /// Sync phase step 1: append the NoOp `(e,1)`, start replicating with `flush_upto = (e,1)`.
    fn become_leader(&mut self, now: Instant) {
        if self.cfg.planted(crate::config::PlantedBug::KairosValidatorSoftState) {
            self.kv.forget_validator();
        }
        self.fresh_group = false;
        let epoch = self.epoch;
        let noop = LogIndex::new(epoch, 1);
        let last = self.log.last_index();
        self.role = Role::Leader;
        self.leader_id = Some(self.id);
        self.votes.clear();
        // §5.1 step 2: appended-but-unapplied writes are answered, not appended again. The
        // first entry of an RPC is the one that will execute (`Kv::apply`).
        let mut inflight: HashMap<RpcId, LogIndex> = HashMap::new();
        let mut freezing = None;
        for e in self.log.after(self.kv.applied()) {
            if let LogOp::Freeze(m) = &e.op {
                freezing.get_or_insert((e.index, m.clone()));
            }
            if e.op != LogOp::NoOp {
                let rpc = RpcId { client_id: e.client_id, seq: e.seq };
                inflight.entry(rpc).or_insert(e.index);
            }
        }
        let progress: BTreeMap<NodeId, Progress> =
            self.peers.iter().map(|&f| (f, Progress::new(last))).collect();
        self.leader = Some(LeaderState {
            next_counter: 2,
            noop,
            synced: false,
            progress,
            di: LogIndex::ZERO,
            round: None,
            next_round_id: 1,
            hb_round: 0,
            hb_started: BTreeMap::new(),
            next_hb_at: now,
            lease_until: now,
            lease_expired_reported: false,
            pending_writes: Vec::new(),
            inflight,
            pending_reads: Vec::new(),
            pending_freezes: Vec::new(),
            pending_txns: Vec::new(),
            freezing,
            // Not the shard's first leader unless its log is empty (kairos_wm's docs).
            kairos_reports: crate::kairos_wm::Reports::new(
                self.kv.kairos_ts_gc(),
                now,
                last != LogIndex::ZERO,
            ),
            foresight: Default::default(),
            reservations: Default::default(),
        });
        let e = LogEntry {
            index: noop,
            key: bytes::Bytes::new(),
            op: LogOp::NoOp,
            client_id: 0,
            seq: 0,
            ack: 0,
            immediate: false,
        };
        self.log.append(e.clone());
        self.persist(Persist::Append(vec![e]));
        // Everything up to the NoOp may be applied: the sync phase makes it durable (step 3).
        self.flush_auth = self.flush_auth.max(noop);
        self.request_flush();
        self.emit(LogEvent::BecameLeader { epoch, noop });
        self.heartbeat_if_due(now);
    }

    /// Sync phase steps 3-4: once a majority (leader included) persisted and applied `(e,1)`,
    /// form the active set and set DI = `(e,1)`.
    pub(crate) fn check_sync_phase(&mut self) {
        let maj = self.majority();
        let own_ok = self.persisted.min(self.kv.applied())
            >= self.leader.as_ref().map_or(LogIndex::ZERO, |l| l.noop);
        let orca = self.orca_mode();
        let target = self.cfg.active_set_target(self.n);
        let epoch = self.epoch;
        let Some(l) = self.leader.as_mut() else {
            return;
        };
        if l.synced || !own_ok {
            return;
        }
        let mut ready: Vec<(LogIndex, NodeId)> = l
            .progress
            .iter()
            .filter(|(_, p)| p.durable() >= l.noop)
            .map(|(&f, p)| (p.persisted, f))
            .collect();
        if 1 + ready.len() < maj {
            return;
        }
        l.synced = true;
        l.di = l.noop;
        if orca {
            // §9.14: the most advanced followers first, trimmed to `as_target`.
            ready.sort_unstable_by(|a, b| b.cmp(a));
            for &(_, f) in ready.iter().take(target - 1) {
                l.progress.get_mut(&f).expect("follower").membership =
                    crate::replica::Membership::Member;
            }
        }
        for p in l.progress.values_mut() {
            p.needs_send = true;
        }
        let noop = l.noop;
        let active_set = if orca { l.active_set(self.id) } else { Vec::new() };
        self.emit(LogEvent::SyncPhaseDone { epoch, noop, active_set });
        self.emit(LogEvent::DurableIndex { epoch, di: noop });
    }

    /// Leaves the leader role (§5.8): pending client operations are told to go elsewhere.
    pub(crate) fn step_down(&mut self, now: Instant, reason: StepDownReason) {
        let Some(l) = self.leader.take() else { return };
        self.role = Role::Follower;
        self.leader_id = None;
        self.reset_election_deadline(now);
        self.emit(LogEvent::SteppedDown { epoch: self.epoch, reason });
        for w in l.pending_writes {
            self.effects.reply.push(LogReply::Write {
                token: w.token,
                result: Err(WriteError::NotLeader { hint: None }),
            });
        }
        for f in l.pending_freezes {
            self.effects.reply.push(LogReply::Frozen {
                token: f.token,
                result: Err(WriteError::NotLeader { hint: None }),
            });
        }
        for r in l.pending_reads {
            self.finish_read(r.origin, Err(ReadError::NotLeader { hint: None }));
        }
        for t in l.pending_txns {
            self.effects.reply.push(LogReply::Txn {
                token: t.token,
                result: Err(WriteError::NotLeader { hint: None }),
            });
        }
    }
}
