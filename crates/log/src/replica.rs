//! One log replica: its state (ORCA §3), input dispatch, timers, the `Node` contract and the
//! local invariants of §7.
//!
//! Every input is handled in two steps. The handler updates state (appends, records an ack,
//! adopts an epoch, queues a read); then [`LogReplica::settle`] re-evaluates everything that
//! depends on state — the leader lease, the sync phase, commit and apply, the active set, DI,
//! waiting writes and reads, pending sends — so no condition can be "missed" (level-triggered).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use bytes::Bytes;
use strata_core::{Effects, Node, Prng};
use strata_rifl::Verdict;
use strata_wire::log::{AppendEntries, LogEntry, LogIndex, LogMessage, ShardMove};
use strata_wire::rifl::{ClusterTime, RpcId};
use strata_wire::{Instant, NodeId};

use crate::api::{
    LogEvent, LogReply, LogRequest, LogStats, MarkOutReason, Persist, RecoverError, RecoveredState,
    Snapshot, StepDownReason,
};
use crate::config::{majority, LogConfig, ReadPolicy};
use crate::durability::{DiskState, Round};
use crate::reads::{FollowerReads, PendingRead};
use crate::state::{Applied, Kv, Log, Rules};
use crate::writes::{PendingFreeze, PendingWrite};
use crate::ConfigError;

pub type LogEffects = Effects<LogMessage, LogReply, Persist, LogEvent>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Follower,
    Candidate,
    Leader,
}

/// Follower-side read-serving state (ORCA §3.1, second table).
#[derive(Clone, Debug, Default)]
pub(crate) struct FollowerLease {
    /// `DI_F`: the latest DI from the current leader; monotone within an epoch.
    pub di_f: LogIndex,
    pub member: bool,
    /// Serving stops at this instant (local clock).
    pub lease_expiry: Instant,
    /// Grants echoing a timestamp `<=` this are ignored (revokes, restarts).
    pub ignore_grants_upto: u64,
    /// The highest `revoke_echo` processed, confirmed in every ack (§5.7.3).
    pub revoke_ack: Option<u64>,
    pub last_markout: Option<Instant>,
    /// Highest heartbeat round and durability round seen from the current leader (echoed).
    pub hb_round_seen: u64,
    pub round_seen: Option<u64>,
    /// Highest index verified identical to the current leader's log (reported as the ack's
    /// `match_index`, so the leader never counts divergent entries as persisted).
    pub matched: LogIndex,
    /// Whether the last evaluation found this follower serving (for mark-out events).
    pub was_serving: bool,
}

/// Active-set state of one follower at the leader (§3.2 `membership[f]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Membership {
    NotMember,
    Member,
    /// Revoked: receives no grant; still part of DI and rounds until removed (§5.7.4).
    Removing {
        revoke_echo: Option<u64>,
    },
}

/// The leader's view of one follower (§3.2).
#[derive(Clone, Debug)]
pub(crate) struct Progress {
    /// The next message sends the entries after this index (optimistic: pipelined batches).
    pub next_prev: LogIndex,
    /// Highest index known identical to the leader's log.
    pub match_index: LogIndex,
    pub persisted: LogIndex,
    pub applied: LogIndex,
    pub last_ack: Option<Instant>,
    /// When its last ack showed its disk keeping up: `persisted` advanced, or nothing it holds
    /// was left unpersisted. Acks of a follower whose disk stalls keep coming (heartbeat
    /// rounds are acknowledged at once) but stop setting this.
    pub disk_kept_up: Option<Instant>,
    /// `f_ts` of the newest ack (acks with an older one are stale and ignored).
    pub last_f_ts: Option<u64>,
    /// The largest `echo_ts` ever granted: a revoke must cover it (§5.7.4 (i)).
    pub max_echoed: Option<u64>,
    pub revoke_ack: Option<u64>,
    pub acked_hb_round: u64,
    pub membership: Membership,
    pub last_grant: Option<Instant>,
    pub last_slow_revoke: Option<Instant>,
    /// When it was last revoked: not re-added for `rt` after that, so a flapping or slow
    /// member does not bounce in and out of the set.
    pub revoked_at: Option<Instant>,
    /// A flush request to catch this non-member up before adding it (§5.7.1 step 3).
    pub catchup: Option<LogIndex>,
    /// Send this follower a message before the input is done.
    pub needs_send: bool,
}

impl Progress {
    pub fn new(next_prev: LogIndex) -> Progress {
        Progress {
            next_prev,
            match_index: LogIndex::ZERO,
            persisted: LogIndex::ZERO,
            applied: LogIndex::ZERO,
            last_ack: None,
            disk_kept_up: None,
            last_f_ts: None,
            max_echoed: None,
            revoke_ack: None,
            acked_hb_round: 0,
            membership: Membership::NotMember,
            last_grant: None,
            last_slow_revoke: None,
            revoked_at: None,
            catchup: None,
            needs_send: true,
        }
    }

    /// `min(persisted, applied)`: what DI and additions compare with (§3.2, §5.7.1).
    pub fn durable(&self) -> LogIndex {
        self.persisted.min(self.applied)
    }

    pub fn in_active_set(&self) -> bool {
        self.membership != Membership::NotMember
    }
}

/// Leader state, rebuilt at every election (§3.2).
#[derive(Debug)]
pub(crate) struct LeaderState {
    pub next_counter: u32,
    /// The new-epoch entry `(e,1)`.
    pub noop: LogIndex,
    /// The sync phase completed (§5.9 step 4): DI is meaningful, the active set exists.
    pub synced: bool,
    pub progress: BTreeMap<NodeId, Progress>,
    pub di: LogIndex,
    pub round: Option<Round>,
    pub next_round_id: u64,
    pub hb_round: u64,
    /// Send time of each heartbeat round not yet superseded by a majority-acked one (§5.8).
    pub hb_started: BTreeMap<u64, Instant>,
    pub next_hb_at: Instant,
    pub lease_until: Instant,
    pub lease_expired_reported: bool,
    pub pending_writes: Vec<PendingWrite>,
    /// RPCs appended but not yet applied, with their first unapplied entry (§5.1 step 2;
    /// rifl.md's `InProgress`, kept apart from the applied records: leader-only, volatile).
    pub inflight: HashMap<RpcId, LogIndex>,
    pub pending_reads: Vec<PendingRead>,
    /// `Freeze` requests waiting for their entry to be committed, durable and applied.
    pub pending_freezes: Vec<PendingFreeze>,
    /// Transaction requests waiting for their entry (`txn.rs`).
    pub pending_txns: Vec<crate::txn::PendingTxn>,
    /// The `Freeze` entry in this leader's log, once appended (rifl.md §5.7 step 1): no write
    /// is appended after it.
    pub freezing: Option<(LogIndex, ShardMove)>,
    /// A Kairos table's watermark reports (kairos.md §5.9): soft state of the term.
    pub kairos_reports: crate::kairos_wm::Reports,
    /// What this term's pending entries will leave (`foresight.rs`).
    pub foresight: crate::foresight::Foresight,
    /// The keys transactions read for update, waiting for their prepares (`reservations.rs`).
    pub reservations: crate::reservations::Reservations,
}

impl LeaderState {
    pub fn lease_valid(&self, now: Instant) -> bool {
        now < self.lease_until
    }

    pub fn active_set(&self, me: NodeId) -> Vec<NodeId> {
        std::iter::once(me)
            .chain(self.progress.iter().filter(|(_, p)| p.in_active_set()).map(|(&f, _)| f))
            .collect()
    }

    pub fn active_set_len(&self) -> usize {
        1 + self.progress.values().filter(|p| p.in_active_set()).count()
    }
}

pub struct LogReplica {
    pub(crate) cfg: LogConfig,
    pub(crate) id: NodeId,
    /// Every replica but this one.
    pub(crate) peers: Vec<NodeId>,
    pub(crate) n: usize,
    // Durable election state (mirrored here; persisted through `Persist::HardState`).
    pub(crate) epoch: u32,
    pub(crate) voted_for: Option<NodeId>,
    pub(crate) log: Log,
    pub(crate) snapshot: Option<Snapshot>,
    pub(crate) kv: Kv,
    pub(crate) persisted: LogIndex,
    /// Consensus commit index (§5.2).
    pub(crate) commit: LogIndex,
    /// Highest `flush_upto` authorised by the current leader (or, at a leader, its own latest
    /// round target): entries up to it may be applied even if not committed (§5.2, §5.6).
    pub(crate) flush_auth: LogIndex,
    pub(crate) role: Role,
    pub(crate) leader_id: Option<NodeId>,
    pub(crate) last_leader_contact: Instant,
    pub(crate) election_deadline: Instant,
    pub(crate) votes: BTreeSet<NodeId>,
    pub(crate) lease: FollowerLease,
    pub(crate) leader: Option<LeaderState>,
    pub(crate) disk: DiskState,
    pub(crate) fwd: FollowerReads,
    /// rifl.md §3.3 `observed_cluster_time`: the largest lease timestamp seen in write
    /// envelopes (volatile; only the leader's admission of new writes reads it).
    pub(crate) observed_cluster_time: ClusterTime,
    /// The latest `now` seen (inputs are monotone; `poll_timeout` skips deadlines before it).
    pub(crate) now: Instant,
    /// A new group's designated first candidate (`start_new_group`) that has not yet heard
    /// from a leader nor become one: its election timeout is short.
    pub(crate) fresh_group: bool,
    /// A new group's replica that adopted the move without its state (`await_install`): it
    /// does not stand for election while its log is empty.
    pub(crate) awaiting_install: bool,
    /// The shard has a preferred leader (`prefer_leader`): `Some(true)` at it, `Some(false)` at
    /// the other replicas.
    pub(crate) preferred: Option<bool>,
    pub(crate) prng: Prng,
    pub(crate) stats: LogStats,
    pub(crate) effects: LogEffects,
}

impl LogReplica {
    /// A replica with an empty disk.
    pub fn new(
        cfg: LogConfig,
        id: NodeId,
        replicas: &[NodeId],
        now: Instant,
        seed: u64,
    ) -> Result<LogReplica, ConfigError> {
        LogReplica::recover(cfg, id, replicas, RecoveredState::default(), now, seed).map_err(|e| {
            match e {
                RecoverError::Config(c) => c,
                RecoverError::OutOfOrder { .. } => unreachable!("an empty log is in order"),
            }
        })
    }

    /// Restart from what the driver read back from disk (ORCA §5.10): `kv` is rebuilt by
    /// replay, `persisted = applied = commit = last entry on disk`, the node is a follower that
    /// serves nothing until re-added, and `last_leader_contact = now`, so it neither votes nor
    /// stands for election for `ET_min`. `replicas` lists every replica, this one included.
    pub fn recover(
        cfg: LogConfig,
        id: NodeId,
        replicas: &[NodeId],
        state: RecoveredState,
        now: Instant,
        seed: u64,
    ) -> Result<LogReplica, RecoverError> {
        let mut seen = BTreeSet::new();
        for &r in replicas {
            if !seen.insert(r) {
                return Err(ConfigError::DuplicateReplica(r).into());
            }
        }
        if !seen.contains(&id) {
            return Err(ConfigError::SelfNotReplica(id).into());
        }
        cfg.validate(replicas.len())?;
        let base = state.snapshot.as_ref().map_or(LogIndex::ZERO, |s| s.last_included);
        let mut prev = base;
        for e in &state.entries {
            if e.index <= prev {
                return Err(RecoverError::OutOfOrder { prev, at: e.index });
            }
            prev = e.index;
        }
        let log = Log::new(base, state.entries);
        let mut kv = Kv::from_snapshot(state.snapshot.as_ref());
        let rules = cfg.apply_rules();
        let mut effects = LogEffects::default();
        // The replay reports what each entry does, at the replay: some entries may not have
        // been applied before the crash (the replay applies every entry on disk, committed
        // or not, §5.10), and their effects date from now.
        for e in log.entries() {
            apply_and_report(&mut kv, e, rules, &mut effects.event);
        }
        let last = log.last_index();
        // The hard state is fsynced before any entry of its epoch is appended, so it cannot
        // lag the log; `max` only guards against a driver that lost it.
        let epoch = state.hard_state.epoch.max(last.epoch);
        let voted_for = state.hard_state.voted_for.filter(|_| state.hard_state.epoch == epoch);
        let mut prng = Prng::new(seed);
        let election_deadline = now + random_election_timeout(&cfg, &mut prng);
        let flush_interval = cfg.flush_interval;
        Ok(LogReplica {
            peers: replicas.iter().copied().filter(|&r| r != id).collect(),
            n: replicas.len(),
            id,
            epoch,
            voted_for,
            log,
            snapshot: state.snapshot,
            kv,
            persisted: last,
            commit: last,
            flush_auth: last,
            role: Role::Follower,
            leader_id: None,
            last_leader_contact: now,
            election_deadline,
            votes: BTreeSet::new(),
            // Grants echoing a timestamp of a previous incarnation are never honoured.
            lease: FollowerLease { ignore_grants_upto: now.as_nanos(), ..FollowerLease::default() },
            leader: None,
            disk: DiskState::new(now + flush_interval),
            fwd: FollowerReads::default(),
            now,
            fresh_group: false,
            awaiting_install: false,
            preferred: None,
            prng,
            stats: LogStats::default(),
            effects,
            observed_cluster_time: ClusterTime::ZERO,
            cfg,
        })
    }

    // ---- read-only accessors (drivers, status, tests) ----

    pub fn config(&self) -> &LogConfig {
        &self.cfg
    }
    pub fn role(&self) -> Role {
        self.role
    }
    pub fn epoch(&self) -> u32 {
        self.epoch
    }
    pub fn voted_for(&self) -> Option<NodeId> {
        self.voted_for
    }
    pub fn leader_hint(&self) -> Option<NodeId> {
        self.leader_id
    }
    pub fn last_index(&self) -> LogIndex {
        self.log.last_index()
    }
    pub fn persisted_index(&self) -> LogIndex {
        self.persisted
    }
    pub fn applied_index(&self) -> LogIndex {
        self.kv.applied()
    }
    pub fn commit_index(&self) -> LogIndex {
        self.commit
    }
    pub fn entries(&self) -> &[strata_wire::log::LogEntry] {
        self.log.entries()
    }
    /// The applied value and update-index of `key`.
    pub fn get(&self, key: &[u8]) -> (Option<Bytes>, LogIndex) {
        self.kv.get(key)
    }

    /// A Kairos key's version timestamp in the applied state (`ZERO` if never written by a
    /// transaction, and for any other table).
    pub fn vts(&self, key: &[u8]) -> strata_wire::txn::Timestamp {
        self.kv.vts(key)
    }

    /// Visits every applied key that has a value (no tombstones), unordered. For system
    /// tables read whole (the lease service's state), without copying them.
    pub fn for_each_item(&self, f: impl FnMut(&[u8], &[u8])) {
        self.kv.for_each_item(f)
    }
    /// The leader's DI, or this follower's `DI_F`.
    pub fn durable_index(&self) -> LogIndex {
        self.leader.as_ref().map_or(self.lease.di_f, |l| l.di)
    }
    /// A leader that finished its sync phase and holds its lease: it serves and accepts writes.
    pub fn is_ready_leader(&self, now: Instant) -> bool {
        self.leader.as_ref().is_some_and(|l| l.synced && l.lease_valid(now))
    }
    /// The leader's active set (leader first); empty at a follower or before the sync phase.
    pub fn active_set(&self) -> Vec<NodeId> {
        match &self.leader {
            Some(l) if l.synced && self.cfg.reads == ReadPolicy::ActiveSet => l.active_set(self.id),
            _ => Vec::new(),
        }
    }
    /// ORCA §3.1: a follower is serving iff it follows a known leader, the last membership
    /// information said "member", and its lease has not expired.
    pub fn is_serving(&self, now: Instant) -> bool {
        self.role == Role::Follower
            && self.leader_id.is_some()
            && self.lease.member
            && now < self.lease.lease_expiry
    }
    pub fn stats(&self) -> LogStats {
        self.stats
    }
    /// What the applied completion records say about `rpc` (`New`: nothing recorded, not
    /// acknowledged). Identical at every replica that applied the same prefix.
    pub fn write_record(&self, rpc: RpcId) -> Verdict<crate::Completion> {
        self.kv.rifl().peek(rpc)
    }
    /// The ack watermark of `client_id` learned from applied entries (0 if unknown).
    pub fn client_ack(&self, client_id: u64) -> u64 {
        self.kv.rifl().ack_of(client_id)
    }
    /// The applied state as a snapshot (items, RIFL watermarks and records). The core does not
    /// compact its log yet; this is what compaction would keep, and tests recover from it.
    pub fn applied_snapshot(&self) -> Snapshot {
        self.kv.to_snapshot()
    }

    // ---- shared helpers ----

    pub(crate) fn majority(&self) -> usize {
        majority(self.n)
    }

    pub(crate) fn emit(&mut self, e: LogEvent) {
        self.effects.event.push(e);
    }

    /// Every outgoing message goes through here: while a `HardState` record is not yet durable,
    /// messages wait for it (`send_after_persist`), so nothing this node says rests on an epoch
    /// or vote it could forget in a crash (ORCA §3.1: fsynced before acting on it).
    pub(crate) fn send(&mut self, to: NodeId, msg: LogMessage) {
        match self.disk.hard_state_token() {
            Some(t) => self.effects.send_after_persist.push((t, to, msg)),
            None => self.effects.send.push((to, msg)),
        }
    }

    /// rifl.md §5.7: the first start of a moved shard's new replica group, right after its
    /// `Install` entry was written (never at a restart). §5.10 keeps a restarted replica from
    /// voting for `ET_min` because it may have acknowledged a leader it forgot; this replica
    /// has acknowledged no one in this group, so it votes at once. One replica of the group
    /// (`campaign`: the driver picks the first of the placement, so there is no split vote)
    /// also stands for election after a short random delay (up to `ET_min / 10`), again after
    /// each failed attempt, until it hears from a leader or becomes one: the moved shard is
    /// unavailable for about the move, not the move plus an election timeout.
    pub fn start_new_group(&mut self, now: Instant, campaign: bool) {
        self.last_leader_contact = Instant::ZERO;
        if campaign {
            self.fresh_group = true;
            self.reset_election_deadline(now);
        }
    }

    /// rifl.md §5.7 step 3 [FIX]: this replica of a moved shard's new group adopted the move
    /// without the frozen state (an interrupted move run again, whose freeze answered "already
    /// there"), so its log is empty. It must not stand for election until the group's first
    /// entry (`Install`, identical at every replica that installed it) reaches it by
    /// replication: two such empty replicas are a majority of three and could otherwise elect
    /// one of themselves and serve an empty shard. It still votes, for a candidate whose log
    /// holds the entry. Test: `host_sim` seeds 1360 and 1387 (`strata-sim`).
    pub fn await_install(&mut self) {
        self.awaiting_install = self.log.last_index() == LogIndex::ZERO;
    }

    /// The shard's preferred leader is `leader` (a table's `leaders`, issue #16): it draws its
    /// election timeouts from `[ET_min, 9/8 ET_min)` and every other replica from
    /// `[9/8 ET_min, 2 ET_min)`, so whenever the shard has no leader — after the table's
    /// creation, after a failover — the preferred replica stands first and, if it is up and
    /// its log is up to date, wins. No one stands sooner than ET_min after leader contact
    /// (orca §5.9 rule 0): a healthy leader is never disturbed, and leadership does not move
    /// back by itself once the preferred node returns.
    pub fn prefer_leader(&mut self, now: Instant, leader: NodeId) {
        self.preferred = Some(leader == self.id);
        if !self.fresh_group {
            self.reset_election_deadline(now);
        }
    }

    pub(crate) fn reset_election_deadline(&mut self, now: Instant) {
        let min = self.cfg.election_timeout_min.as_nanos() as u64;
        let timeout = if self.fresh_group {
            let tenth = (min / 10).max(1);
            Duration::from_nanos(self.prng.range(tenth / 2, tenth))
        } else {
            match self.preferred {
                Some(true) => Duration::from_nanos(self.prng.range(min, min + min / 8)),
                Some(false) => Duration::from_nanos(self.prng.range(min + min / 8, 2 * min)),
                None => random_election_timeout(&self.cfg, &mut self.prng),
            }
        };
        self.election_deadline = now + timeout;
    }

    /// Applies every held entry up to `max(commit, flush_auth)` (§5.2).
    pub(crate) fn apply_ready(&mut self) {
        let bound = self.commit.max(self.flush_auth);
        let from = self.kv.applied();
        if bound <= from {
            return;
        }
        let mut upto = from;
        let rules = self.cfg.apply_rules();
        for e in self.log.range(from, bound) {
            apply_and_report(&mut self.kv, e, rules, &mut self.effects.event);
            upto = e.index;
        }
        if upto > from {
            self.effects.event.push(LogEvent::Applied { upto });
        }
    }

    /// ORCA §4: a message with a larger epoch makes this node adopt it (durably), become a
    /// follower, stop serving (`member = false`, `DI_F = ZERO`).
    pub(crate) fn adopt_epoch(&mut self, now: Instant, epoch: u32) {
        debug_assert!(epoch > self.epoch);
        if self.role == Role::Leader {
            self.step_down(now, StepDownReason::HigherEpoch);
        }
        self.epoch = epoch;
        self.voted_for = None;
        self.persist(Persist::HardState(self.hard_state()));
        self.role = Role::Follower;
        self.leader_id = None;
        self.votes.clear();
        self.reset_follower_lease(now, MarkOutReason::EpochChange);
    }

    /// §5.7.3 last line: on epoch change, candidacy or restart, `member = false`, `DI_F = ZERO`.
    pub(crate) fn reset_follower_lease(&mut self, now: Instant, reason: MarkOutReason) {
        if self.lease.was_serving {
            self.emit(LogEvent::MarkedOut { epoch: self.epoch, reason });
        }
        let ignore = self.lease.ignore_grants_upto;
        self.lease = FollowerLease {
            ignore_grants_upto: ignore,
            last_markout: Some(now),
            ..FollowerLease::default()
        };
    }

    pub(crate) fn hard_state(&self) -> crate::HardState {
        crate::HardState { epoch: self.epoch, voted_for: self.voted_for }
    }

    /// Re-evaluates everything that depends on state (see the module comment).
    pub(crate) fn settle(&mut self, now: Instant) {
        self.fire_role_timers(now);
        if self.leader.is_some() {
            self.leader_settle(now);
        } else {
            self.follower_settle(now);
        }
        self.background_flush(now);
    }

    /// The time-driven steps due at `now`: a heartbeat round (leader), an election (follower,
    /// candidate). Every input runs them, not only ticks: a driver may deliver inputs after a
    /// deadline passed and before it ticks (the node's core task takes queued inputs first under
    /// load), and `poll_timeout` never reports a deadline at or before the latest input again —
    /// so a deadline an input passed over must be served by that input. (Before this, a loaded
    /// leader skipped heartbeat rounds and lost its lease, and a follower hearing only from
    /// non-leaders never started an election.)
    fn fire_role_timers(&mut self, now: Instant) {
        match self.role {
            Role::Leader => self.heartbeat_if_due(now),
            Role::Follower | Role::Candidate => {
                if now >= self.election_deadline {
                    if self.awaiting_install && self.log.last_index() == LogIndex::ZERO {
                        self.reset_election_deadline(now);
                    } else {
                        self.start_election(now);
                    }
                }
            }
        }
    }

    /// The leader's level-triggered re-evaluation: lease, commit and apply, sync phase,
    /// active set, DI, waiting writes and reads, then the messages they call for. Repeated
    /// while DI or the active set moves, so nothing waits for the next input.
    fn leader_settle(&mut self, now: Instant) {
        self.update_leader_lease();
        if !self.check_leader_lease(now) {
            return self.follower_settle(now);
        }
        for _ in 0..4 {
            self.leader_commit();
            self.apply_ready();
            self.forget_foreseen();
            self.check_sync_phase();
            let mut changed = self.maintain_active_set(now);
            changed |= self.update_di();
            self.settle_writes(now);
            self.settle_txns(now);
            self.settle_leader_reads(now);
            self.settle_follower_reads(now);
            self.leader_commit();
            self.apply_ready();
            changed |= self.update_di();
            if !changed {
                break;
            }
        }
        self.send_pending(now);
    }

    fn leader_deadlines(&self) -> impl Iterator<Item = Instant> + '_ {
        self.lease_deadlines()
            .into_iter()
            .chain(self.active_set_deadlines())
            .chain(self.write_deadlines())
            .chain(self.txn_deadlines())
            .chain(self.leader_read_deadlines())
            .chain(self.follower_read_deadlines())
    }

    fn follower_settle(&mut self, now: Instant) {
        self.settle_follower_reads(now);
        let serving = self.is_serving(now);
        if self.lease.was_serving && !serving && self.lease.member {
            self.emit(LogEvent::MarkedOut {
                epoch: self.epoch,
                reason: MarkOutReason::LeaseExpired,
            });
        }
        self.lease.was_serving = serving;
    }

    /// Whether a peer message is acceptable at all (hostile input is counted and dropped).
    fn message_ok(&self, msg: &LogMessage) -> bool {
        // [Strata] An epoch no election sequence can reach is refused before it is adopted
        // and persisted (design.md, "Untrusted input"): one forged `VoteResp` at `u32::MAX`
        // once stopped every election of the group for good.
        let epoch = msg.epoch();
        if epoch >= EPOCH_CEILING || epoch > self.epoch.saturating_add(MAX_EPOCH_JUMP) {
            return false;
        }
        match msg {
            LogMessage::AppendEntries(m) => {
                let mut prev = m.prev_index;
                m.entries.iter().all(|e| {
                    let ok = e.index > prev && e.index.epoch <= m.epoch && e.index.counter > 0;
                    prev = e.index;
                    ok
                }) && m.flush_upto.is_none_or(|t| t.epoch <= m.epoch)
            }
            _ => true,
        }
    }

    fn reject_stale_append(&mut self, now: Instant, from: NodeId, m: &AppendEntries) {
        let ack = self.ack(now, false, self.log.at_or_below(m.prev_index));
        self.send(from, LogMessage::AppendAck(ack));
    }

    /// Deadlines of the follower/candidate role.
    fn follower_deadlines(&self) -> impl Iterator<Item = Instant> + '_ {
        let lease =
            (self.lease.member && self.lease.was_serving).then_some(self.lease.lease_expiry);
        [Some(self.election_deadline), lease]
            .into_iter()
            .flatten()
            .chain(self.follower_read_deadlines())
    }
}

/// Epochs at or above this are never used: the epoch counter cannot wrap, and a message
/// carrying one is refused (20 years of back-to-back elections at 150 ms do not reach it).
pub const EPOCH_CEILING: u32 = u32::MAX - (1 << 16);
/// The furthest a message's epoch may lead this replica's: 2^24 elections, four weeks of
/// back-to-back elections at 150 ms. A replica cut off longer than that is refused by its
/// group until its storage is re-seeded (design.md, "Untrusted input").
pub const MAX_EPOCH_JUMP: u32 = 1 << 24;
/// A leader steps down when its entry counter reaches this, so a new epoch starts the counter
/// again before it can wrap (room is left for the node's own entries).
pub(crate) const COUNTER_CEILING: u32 = u32::MAX - (1 << 16);

/// Applies `e` to `kv` and reports what it did: the `Executed` audit event of an entry whose
/// mutation took effect (rifl.md §7's effect event), and a transaction entry's events.
pub(crate) fn apply_and_report(
    kv: &mut Kv,
    e: &LogEntry,
    rules: Rules,
    events: &mut Vec<LogEvent>,
) -> Applied {
    let applied = kv.apply_with(e, rules);
    match applied {
        Applied::Executed => {
            events.push(LogEvent::Executed { index: e.index, client_id: e.client_id, seq: e.seq })
        }
        Applied::Txn => events.extend(kv.take_txn_events().into_iter().map(LogEvent::Txn)),
        _ => {}
    }
    applied
}

/// `ET` uniform in `[ET_min, 2 ET_min)` (§3.1 `election_deadline`).
fn random_election_timeout(cfg: &LogConfig, prng: &mut Prng) -> Duration {
    let min = cfg.election_timeout_min.as_nanos() as u64;
    Duration::from_nanos(prng.range(min, 2 * min))
}

impl Node for LogReplica {
    type Request = LogRequest;
    type Message = LogMessage;
    type Reply = LogReply;
    type Persist = Persist;
    type Event = LogEvent;

    fn id(&self) -> NodeId {
        self.id
    }

    fn on_client_request(&mut self, now: Instant, req: LogRequest) {
        self.now = self.now.max(now);
        match req {
            LogRequest::Write { token, rifl, key, op, immediate } => {
                self.on_write(now, token, rifl, key, op, immediate)
            }
            LogRequest::Read { token, key, min_index, intent } => {
                self.on_read(now, token, key, min_index, intent)
            }
            LogRequest::ReadMany { token, keys, min_index, intent } => {
                self.on_read_many(now, token, keys, min_index, intent)
            }
            LogRequest::ReleaseReservations { token, keys, reserver } => {
                self.on_release_reservations(now, token, &keys, reserver)
            }
            LogRequest::Freeze { token, to } => self.on_freeze(now, token, to),
            LogRequest::Prepare { token, rifl, prepare, read_only } => {
                self.on_prepare(now, token, rifl, prepare, read_only)
            }
            LogRequest::Decide { token, txn, decision, seqs } => {
                self.on_decide(now, token, txn, decision, seqs)
            }
            LogRequest::RequestAbort { token, txn, seqs } => {
                self.on_request_abort(now, token, txn, seqs)
            }
            LogRequest::RecordDecision { token, record } => {
                self.on_record_decision(now, token, record)
            }
            LogRequest::Resolve { token, txn } => self.on_resolve(now, token, txn),
            LogRequest::KairosReport { token, client, seq, local_wm, c_freshness } => {
                self.on_kairos_report(now, token, client, seq, local_wm, c_freshness)
            }
        }
        self.settle(now);
    }

    fn on_message(&mut self, now: Instant, from: NodeId, msg: LogMessage) {
        self.now = self.now.max(now);
        if !self.peers.contains(&from) || !self.message_ok(&msg) {
            self.stats.bad_messages += 1;
            return;
        }
        // §5.9 rule 0, checked before anything else: ignore the request, even its higher epoch.
        if let LogMessage::RequestVote { epoch, .. } = msg {
            if self.lease_protected(now) {
                self.emit(LogEvent::VoteRefused {
                    epoch,
                    candidate: from,
                    reason: crate::VoteRefusal::LeaseProtected,
                });
                return;
            }
        }
        if msg.epoch() > self.epoch {
            self.adopt_epoch(now, msg.epoch());
        }
        match msg {
            LogMessage::AppendEntries(m) if m.epoch < self.epoch => {
                self.reject_stale_append(now, from, &m)
            }
            LogMessage::AppendEntries(m) => self.on_append_entries(now, from, m),
            LogMessage::AppendAck(a) if a.epoch == self.epoch => self.on_append_ack(now, from, a),
            LogMessage::AppendAck(_) => {} // from an earlier epoch: stale
            LogMessage::ForwardRead(f) => self.on_forward_read(now, from, f),
            LogMessage::ReadRelay(r) => self.on_read_relay(r),
            LogMessage::RequestVote { epoch, last_index } => {
                self.on_request_vote(now, from, epoch, last_index)
            }
            LogMessage::VoteResp { epoch, granted } => self.on_vote_resp(now, from, epoch, granted),
        }
        self.settle(now);
    }

    fn on_tick(&mut self, now: Instant) {
        self.now = self.now.max(now);
        self.settle(now);
    }

    fn on_persisted(&mut self, now: Instant, upto: u64) {
        self.now = self.now.max(now);
        self.handle_persisted(now, upto);
        self.settle(now);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let flush = self.disk.flush_deadline(self.log.last_index() > self.persisted);
        let role: Box<dyn Iterator<Item = Instant>> = match &self.leader {
            Some(_) => Box::new(self.leader_deadlines()),
            None => Box::new(self.follower_deadlines()),
        };
        // Deadlines at or before the latest input were handled by it (or are blocked on a
        // condition only another input can change): never ask to be woken for them again.
        role.chain(flush).filter(|&d| d > self.now).min()
    }

    fn poll_effects(&mut self, out: &mut LogEffects) {
        self.effects.move_into(out);
    }

    fn check_invariants(&self) {
        self.check_local_invariants();
    }
}
