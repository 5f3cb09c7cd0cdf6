//! Persistence bookkeeping and the durable index (ORCA §3.2, §5.4, §5.5.3).
//!
//! The core never touches a disk: it emits `Persist` records with increasing tokens and learns
//! from `on_persisted(upto)` which prefix is fsynced. Only `Sync` records move
//! `persisted_index` (a `HardState` is reported on its own and proves nothing about entries
//! appended after it). One flush runs at a time; requests during a flush are served by the next
//! one (group commit, §5.4).

use strata_wire::log::{LogIndex, LogMessage};
use strata_wire::Instant;

use crate::api::{LogEvent, Persist};
use crate::config::{ReadPolicy, WritePath};
use crate::replica::{LogReplica, Progress, Role};

/// Disk-side state of one replica.
#[derive(Debug)]
pub(crate) struct DiskState {
    next_token: u64,
    /// The highest token reported durable.
    acked: u64,
    /// The latest `HardState` record; messages wait for it (`send_after_persist`).
    hard_state: Option<u64>,
    /// The flush in flight: its `Sync` token and the last index it covers.
    flush: Option<(u64, LogIndex)>,
    /// Another flush was asked for while one was running.
    flush_wanted: bool,
    /// Next periodic flush (§5.4).
    next_flush_at: Instant,
}

impl DiskState {
    pub fn new(next_flush_at: Instant) -> DiskState {
        DiskState {
            next_token: 1,
            acked: 0,
            hard_state: None,
            flush: None,
            flush_wanted: false,
            next_flush_at,
        }
    }

    /// The token of a `HardState` record not yet durable, if any.
    pub fn hard_state_token(&self) -> Option<u64> {
        self.hard_state.filter(|&t| t > self.acked)
    }

    /// When the periodic flush is due, if there is something to flush.
    pub fn flush_deadline(&self, needs: bool) -> Option<Instant> {
        needs.then_some(self.next_flush_at)
    }

    /// A truncation after `after` makes an in-flight flush cover at most `after`.
    pub fn clamp_flush(&mut self, after: LogIndex) {
        if let Some((_, covered)) = &mut self.flush {
            *covered = (*covered).min(after);
        }
    }
}

/// A make-durable round (§5.5.3): every active-set member (or, without an active set, a
/// majority) must persist and apply up to `target`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Round {
    pub id: u64,
    pub target: LogIndex,
    pub started: Instant,
}

impl LogReplica {
    /// Emits a persist record and returns its token.
    pub(crate) fn persist(&mut self, p: Persist) -> u64 {
        let token = self.disk.next_token;
        self.disk.next_token += 1;
        if matches!(p, Persist::HardState(_)) {
            self.disk.hard_state = Some(token);
        }
        self.effects.persist.push((token, p));
        token
    }

    /// Asks for an fsync of everything appended so far (one at a time: group commit).
    pub(crate) fn request_flush(&mut self) {
        if self.disk.flush.is_some() {
            self.disk.flush_wanted = true;
            return;
        }
        let last = self.log.last_index();
        if last <= self.persisted {
            return;
        }
        let token = self.persist(Persist::Sync);
        self.disk.flush = Some((token, last));
        self.stats.flushes += 1;
    }

    /// `on_persisted`: a flush completion advances `persisted_index` (§5.4); a follower then
    /// tells its leader at once so DI can advance.
    pub(crate) fn handle_persisted(&mut self, now: Instant, upto: u64) {
        if upto >= self.disk.next_token {
            self.stats.bad_messages += 1; // a driver reporting a token never issued
            return;
        }
        self.disk.acked = self.disk.acked.max(upto);
        let Some((token, covered)) = self.disk.flush else {
            return;
        };
        if token > upto {
            return;
        }
        self.disk.flush = None;
        let covered = covered.min(self.log.last_index());
        if covered > self.persisted {
            self.persisted = covered;
            self.emit(LogEvent::Persisted { index: covered });
        }
        if std::mem::take(&mut self.disk.flush_wanted) || self.sync_flush_now(now) {
            self.request_flush();
        }
        if self.role == Role::Follower {
            if let Some(leader) = self.leader_id {
                let ack = self.ack(now, true, self.log.last_index());
                self.send(leader, LogMessage::AppendAck(ack));
            }
        }
    }

    /// Whether the flush in flight, or the one queued behind it, covers the last entry: its
    /// completion then acknowledges it (§5.4).
    pub(crate) fn flush_covers_last(&self) -> bool {
        self.disk
            .flush
            .is_some_and(|(_, covered)| covered >= self.log.last_index() || self.disk.flush_wanted)
    }

    /// Periodic background flush (§5.4); in Sync mode every append is flushed at once instead
    /// (`sync_flush_now`).
    pub(crate) fn background_flush(&mut self, now: Instant) {
        let needs = self.log.last_index() > self.persisted;
        if needs && self.sync_flush_now(now) {
            self.request_flush();
        }
        if now >= self.disk.next_flush_at {
            if needs {
                self.request_flush();
            }
            self.disk.next_flush_at = now + self.cfg.flush_interval;
        }
    }

    /// Whether Sync persistence flushes new entries at once here. A leader whose followers
    /// make a majority on their own does not: their fsynced copies commit the entries (§5.2
    /// counts any majority), and its own copy goes with the periodic flush (§5.4) — one
    /// `fdatasync` fewer per round of the group (docs/design.md, departures). A follower
    /// counts only while its acks show its disk keeping up within a heartbeat period; a
    /// silent one, or one whose acks keep coming while its disk stalls, does not. Should fewer
    /// than a majority count, the leader's disk is needed for the majority, and it flushes at
    /// once again.
    pub(crate) fn sync_flush_now(&self, now: Instant) -> bool {
        if !self.sync_writes() {
            return false;
        }
        let Some(l) = self.leader.as_ref() else {
            return true;
        };
        let hb = self.cfg.heartbeat;
        let keeps_up =
            |p: &&Progress| p.disk_kept_up.is_some_and(|t| now.saturating_since(t) <= hb);
        l.progress.values().filter(keeps_up).count() < self.majority()
    }

    pub(crate) fn sync_writes(&self) -> bool {
        self.cfg.durability.write_path() == WritePath::Sync
    }

    /// ORCA mode: DI is the min over the active set; otherwise the majority-persisted index.
    pub(crate) fn orca_mode(&self) -> bool {
        self.cfg.reads == ReadPolicy::ActiveSet
    }

    /// The DI formula of §3.2 (leader only, after its sync phase).
    pub(crate) fn di_formula(&self) -> LogIndex {
        let l = self.leader.as_ref().expect("leader");
        let own = self.persisted.min(self.kv.applied());
        if self.orca_mode() {
            l.progress
                .values()
                .filter(|p| p.in_active_set())
                .map(|p| p.durable())
                .fold(own, LogIndex::min)
        } else {
            let mut v: Vec<LogIndex> =
                l.progress.values().map(|p| p.persisted).chain([self.persisted]).collect();
            v.sort_unstable_by(|a, b| b.cmp(a));
            v[self.majority() - 1].min(self.kv.applied())
        }
    }

    /// Recomputes DI; when it advances, every follower that serves reads hears it at once
    /// (§5.5.3 step 6: "so their local checks start passing"). Where only the leader serves
    /// reads no follower checks anything against DI, and the new DI and commit index ride on
    /// the next `AppendEntries` (at most a heartbeat later): under load, one message per
    /// follower per round instead of two, and their acks (docs/design.md, departures).
    /// Returns whether it advanced.
    pub(crate) fn update_di(&mut self) -> bool {
        let synced = self.leader.as_ref().is_some_and(|l| l.synced);
        if !synced {
            return false;
        }
        let new = self.di_formula();
        let epoch = self.epoch;
        let l = self.leader.as_mut().expect("leader");
        // §3.2: DI never decreases within an epoch; the membership rules make the formula
        // monotone, and this asserts it.
        assert!(new >= l.di, "DI decreased from {} to {}", l.di, new);
        if new <= l.di {
            return false;
        }
        l.di = new;
        if l.round.is_some_and(|r| r.target <= new) {
            l.round = None;
        }
        if self.cfg.reads != ReadPolicy::Leader {
            for p in l.progress.values_mut() {
                p.needs_send = true;
            }
        }
        self.emit(LogEvent::DurableIndex { epoch, di: new });
        true
    }

    /// MakeDurable(u) (§5.5.3): start a round flushing everything appended so far, unless DI
    /// already covers `u` or a round with a target `>= u` is running.
    pub(crate) fn make_durable(&mut self, now: Instant, u: LogIndex) {
        let last = self.log.last_index();
        let epoch = self.epoch;
        let orca = self.orca_mode();
        let l = self.leader.as_mut().expect("leader");
        if l.di >= u || l.round.is_some_and(|r| r.target >= u) {
            return;
        }
        let id = l.next_round_id;
        l.next_round_id += 1;
        l.round = Some(Round { id, target: last, started: now });
        for p in l.progress.values_mut() {
            if !orca || p.in_active_set() {
                p.needs_send = true;
            }
        }
        self.stats.durability_rounds += 1;
        self.emit(LogEvent::DurabilityRound { epoch, id, target: last });
        // Step 4: flush locally and (SyncRepl) apply up to the target. In Sync mode the leader
        // applies only what a majority has fsynced (§5.2): reads there have no durability check
        // (§5.11 strong-ZK), so applying ahead of the majority would serve data a crash can
        // lose. The simulator found it: an immediate write in strong mode let the leader serve
        // entries that were later lost (strata-sim, orca_scenarios, strong + immediate writes).
        if !self.sync_writes() {
            self.flush_auth = self.flush_auth.max(last);
            self.apply_ready();
        }
        self.request_flush();
    }
}
