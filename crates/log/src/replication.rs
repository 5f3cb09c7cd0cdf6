//! Replication (ORCA §5.2, §5.3, §5.6, §5.10): the leader's per-follower send loop, the
//! follower's consistency check, truncation of divergent suffixes, acks, commit and apply.

use strata_wire::log::{AppendAck, AppendEntries, LogIndex, LogMessage};
use strata_wire::{Instant, NodeId};

use crate::api::{LogEvent, Persist};
use crate::config::WritePath;
use crate::replica::{LogReplica, Role};
use crate::state::Kv;

impl LogReplica {
    /// The follower's ack (§4.2 `AppendAck`). `last_index`: on failure, where the leader backs
    /// up to.
    pub(crate) fn ack(&self, now: Instant, success: bool, last_index: LogIndex) -> AppendAck {
        AppendAck {
            epoch: self.epoch,
            success,
            last_index,
            match_index: self.lease.matched.min(self.log.last_index()),
            persisted_index: self.persisted,
            applied_index: self.kv.applied(),
            hb_round: self.lease.hb_round_seen,
            round_id: self.lease.round_seen,
            f_ts: now.as_nanos(),
            serving: self.is_serving(now),
            revoke_ack: self.lease.revoke_ack,
        }
    }

    /// Follower on `AppendEntries` from the leader of `current_epoch` (§5.3, §5.6).
    pub(crate) fn on_append_entries(&mut self, now: Instant, from: NodeId, m: AppendEntries) {
        if self.role == Role::Leader {
            // Two leaders in one epoch cannot exist: hostile or corrupt input.
            self.stats.bad_messages += 1;
            return;
        }
        if self.role == Role::Candidate {
            self.role = Role::Follower; // §5.9 candidate step 4
            self.votes.clear();
        }
        // Step 1.
        self.leader_id = Some(from);
        self.last_leader_contact = now;
        self.fresh_group = false;
        self.reset_election_deadline(now);
        let new_hb_round = m.hb_round > self.lease.hb_round_seen;
        self.lease.hb_round_seen = self.lease.hb_round_seen.max(m.hb_round);
        if m.round_id.is_some() {
            self.lease.round_seen = self.lease.round_seen.max(m.round_id);
        }
        // Step 2: log consistency.
        if !self.log.contains(m.prev_index) || m.prev_index < self.log.base() {
            self.lease.di_f = self.lease.di_f.max(m.durable_index);
            self.process_grant(now, m.grant);
            let ack = self.ack(now, false, self.log.at_or_below(m.prev_index));
            self.send(from, LogMessage::AppendAck(ack));
            return;
        }
        // Step 3: append, skipping what we hold, truncating a divergent suffix.
        let mut prev = m.prev_index;
        let mut appended = Vec::new();
        for e in m.entries {
            if self.log.contains(e.index) {
                prev = e.index;
                continue;
            }
            if self.log.last_index() > prev {
                if !appended.is_empty() {
                    self.persist(Persist::Append(std::mem::take(&mut appended)));
                }
                self.truncate_after(prev);
            }
            prev = e.index;
            self.log.append(e.clone());
            appended.push(e);
        }
        let brought_entries = !appended.is_empty();
        if brought_entries {
            self.persist(Persist::Append(appended));
        }
        let match_pt = prev;
        self.lease.matched = self.lease.matched.max(match_pt);
        // Step 4: commit and apply (§5.2); a flush_upto authorises applying up to it (§5.6).
        self.commit = self.commit.max(m.commit_index.min(match_pt));
        let mut flush_now = false;
        if let Some(t) = m.flush_upto {
            if match_pt >= t {
                self.flush_auth = self.flush_auth.max(t);
                flush_now = self.persisted < t;
            }
        }
        self.apply_ready();
        // Step 5.
        self.lease.di_f = self.lease.di_f.max(m.durable_index);
        // Step 6.
        self.process_grant(now, m.grant);
        // Step 7 (§5.6): fsync the whole mem_log; the completion sends another ack (§5.4).
        if flush_now || self.sync_writes() {
            self.request_flush();
        }
        // Step 8. In Sync persistence the ack that counts for new entries is the one after
        // their fsync (§5.6: "fsync before acking"), which the flush's completion sends
        // (§5.4); acknowledging their arrival as well would be a second message per round
        // that moves nothing at the leader. A new heartbeat round is acknowledged at once all
        // the same: the leader's lease (§5.8) must never wait on a follower's disk.
        let flush_acks = brought_entries && self.sync_writes() && self.flush_covers_last();
        if new_hb_round || !flush_acks {
            let ack = self.ack(now, true, self.log.last_index());
            self.send(from, LogMessage::AppendAck(ack));
        }
    }

    /// §5.10: drop the divergent suffix after `after` from memory and disk; indexes fall back;
    /// if applied entries were removed, rebuild `kv` by replaying the retained log.
    pub(crate) fn truncate_after(&mut self, after: LogIndex) {
        let Some(removed_upto) = self.log.truncate_after(after) else {
            return;
        };
        self.persist(Persist::Truncate { after });
        self.disk.clamp_flush(after);
        self.persisted = self.persisted.min(after);
        self.commit = self.commit.min(after);
        self.flush_auth = self.flush_auth.min(after);
        self.lease.matched = self.lease.matched.min(after);
        if self.kv.applied() > after {
            // The records and watermarks are rebuilt with the items: they are a function of
            // the applied prefix (rifl.md R-D23, `state::Kv`).
            let rules = self.cfg.apply_rules();
            let mut kv = Kv::from_snapshot(self.snapshot.as_ref());
            let mut events = Vec::new();
            for e in self.log.entries() {
                if e.index > kv.applied() {
                    crate::replica::apply_and_report(&mut kv, e, rules, &mut events);
                }
            }
            // Every kept entry was applied, and its transaction events reported, before.
            self.effects
                .event
                .extend(events.into_iter().filter(|e| !matches!(e, LogEvent::Txn(_))));
            self.kv = kv;
        }
        self.emit(LogEvent::Truncated { after, removed_upto });
    }

    /// Leader on an `AppendAck` of its epoch (§5.3 step 2, §5.7, §5.8).
    pub(crate) fn on_append_ack(&mut self, now: Instant, from: NodeId, a: AppendAck) {
        let last = self.log.last_index();
        let Some(l) = self.leader.as_mut() else {
            return;
        };
        let back = self.log.at_or_below(a.last_index);
        let Some(p) = l.progress.get_mut(&from) else {
            return;
        };
        p.last_ack = Some(now);
        p.last_f_ts = p.last_f_ts.max(Some(a.f_ts));
        p.acked_hb_round = p.acked_hb_round.max(a.hb_round);
        p.revoke_ack = p.revoke_ack.max(a.revoke_ack);
        // Only entries identical to the leader's log count (`match_index` of the ack).
        let matched = a.match_index.min(last);
        p.match_index = p.match_index.max(matched);
        let persisted = a.persisted_index.min(matched);
        if persisted > p.persisted || a.persisted_index >= a.match_index {
            p.disk_kept_up = Some(now);
        }
        p.persisted = p.persisted.max(persisted);
        p.applied = p.applied.max(a.applied_index.min(matched));
        if a.success {
            p.next_prev = p.next_prev.max(p.match_index);
        } else if back < p.next_prev {
            // Raft back-off by index (the follower may also have lost unsynced entries).
            p.next_prev = back;
            p.needs_send = true;
        }
        if p.next_prev < last {
            p.needs_send = true;
        }
        self.update_leader_lease();
    }

    /// The leader's commit index per write path (§5.2).
    pub(crate) fn leader_commit(&mut self) {
        let last = self.log.last_index();
        let maj = self.majority();
        let Some(l) = self.leader.as_ref() else {
            return;
        };
        let candidate = match self.cfg.durability.write_path() {
            WritePath::Async => last,
            WritePath::SyncRepl => {
                kth_largest(l.progress.values().map(|p| p.match_index).chain([last]), maj)
            }
            WritePath::Sync => {
                kth_largest(l.progress.values().map(|p| p.persisted).chain([self.persisted]), maj)
            }
        };
        // Raft's rule: count replicas only for entries of the current epoch.
        if candidate.epoch == self.epoch && candidate > self.commit {
            self.commit = candidate;
        }
    }

    /// Sends every follower marked `needs_send` its next message (§5.3 step 1).
    pub(crate) fn send_pending(&mut self, now: Instant) {
        let targets: Vec<NodeId> = match &self.leader {
            Some(l) => l.progress.iter().filter(|(_, p)| p.needs_send).map(|(&f, _)| f).collect(),
            None => return,
        };
        for f in targets {
            self.send_append(now, f);
        }
    }

    /// One `AppendEntries` to `f`: the entries after its `next_prev` (bounded batch), commit
    /// index, DI, the flush request it still needs, the heartbeat round and its grant.
    pub(crate) fn send_append(&mut self, now: Instant, f: NodeId) {
        let grant = self.grant_for(now, f);
        let (max_entries, max_bytes) = (self.cfg.max_batch_entries, self.cfg.max_batch_bytes);
        let max_entry_bytes = self.cfg.max_entry_bytes();
        let orca = self.orca_mode();
        let epoch = self.epoch;
        let commit = self.commit;
        let l = self.leader.as_mut().expect("leader");
        let p = l.progress.get_mut(&f).expect("follower");
        p.needs_send = false;
        let prev_index = p.next_prev;
        // Entries are packed by their exact encoded size, and never beyond the peer frame
        // limit: a batch that exceeds it would be dropped by the transport (and re-sent, and
        // dropped...), so the shard would stop (issue #17). Writes whose entry alone cannot
        // fit are refused at the leader (`writes.rs`), so the first entry always fits.
        // Test: `batches_split_at_the_peer_frame_limit`.
        let max_bytes = max_bytes.min(max_entry_bytes);
        let mut entries = Vec::new();
        let mut bytes = 0usize;
        for e in self.log.after(prev_index) {
            let size = e.encoded_len();
            if entries.len() >= max_entries || (!entries.is_empty() && bytes + size > max_bytes) {
                p.needs_send = true; // more to send after this batch
                break;
            }
            bytes += size;
            entries.push(e.clone());
        }
        if let Some(e) = entries.last() {
            p.next_prev = e.index;
        }
        // Flush requests: the sync phase (§5.9 step 3), a durability round (§5.5.3 step 5) or a
        // catch-up before adding (§5.7.1 step 3).
        let (flush_upto, round_id) = if !l.synced {
            (Some(l.noop), None)
        } else if let Some(r) =
            l.round.filter(|r| (!orca || p.in_active_set()) && p.durable() < r.target)
        {
            (Some(r.target), Some(r.id))
        } else {
            (p.catchup.filter(|&t| p.durable() < t), None)
        };
        let msg = AppendEntries {
            epoch,
            prev_index,
            entries,
            commit_index: commit,
            durable_index: l.di,
            flush_upto,
            round_id,
            hb_round: l.hb_round,
            grant,
        };
        self.send(f, LogMessage::AppendEntries(msg));
    }
}

/// The `k`-th largest value (1-based), `ZERO` if there are fewer.
pub(crate) fn kth_largest(it: impl Iterator<Item = LogIndex>, k: usize) -> LogIndex {
    let mut v: Vec<LogIndex> = it.collect();
    v.sort_unstable_by(|a, b| b.cmp(a));
    v.get(k.saturating_sub(1)).copied().unwrap_or(LogIndex::ZERO)
}
