//! The active set and leases (ORCA §5.7): grants echoing the follower's own timestamp, the
//! follower lease, two-step mark-out and removal, slow-member revoke, re-add after catch-up,
//! and rules R1 (DI over the set, in `durability`) and R2 (`is_serving`).

use strata_wire::log::{Grant, LogIndex};
use strata_wire::{Instant, NodeId};

use crate::api::{LogEvent, RevokeReason};
use crate::config::PlantedBug;
use crate::replica::{LogReplica, Membership};

impl LogReplica {
    /// §5.7.2: the grant embedded in the next message to `f`.
    pub(crate) fn grant_for(&mut self, now: Instant, f: NodeId) -> Grant {
        let epoch = self.epoch;
        let Some(l) = self.leader.as_mut() else {
            return Grant::default();
        };
        let lease_ok = l.synced && l.lease_valid(now);
        let p = l.progress.get_mut(&f).expect("follower");
        match p.membership {
            Membership::Member if lease_ok && p.last_f_ts.is_some() => {
                let ts = p.last_f_ts.expect("checked");
                p.last_grant = Some(now);
                p.max_echoed = p.max_echoed.max(Some(ts));
                self.effects.event.push(LogEvent::GrantSent { epoch, to: f, echo_ts: ts });
                Grant { member: true, echo_ts: Some(ts), revoke_echo: None }
            }
            Membership::Removing { revoke_echo } => {
                Grant { member: false, echo_ts: None, revoke_echo }
            }
            _ => Grant::default(),
        }
    }

    /// §5.7.3: the follower side of a grant.
    pub(crate) fn process_grant(&mut self, now: Instant, g: Grant) {
        if g.member {
            let Some(t) = g.echo_ts else { return };
            if t <= self.lease.ignore_grants_upto {
                return;
            }
            self.lease.member = true;
            // Anchored at the follower's own send time of the ack the grant answers (§9.1).
            let expiry = if self.cfg.planted(PlantedBug::LeaseAnchoredAtReceipt) {
                now + self.cfg.mark_out_timeout
            } else {
                Instant::from_nanos(t) + self.cfg.mark_out_timeout
            };
            self.lease.lease_expiry = self.lease.lease_expiry.max(expiry);
        } else {
            if self.lease.member {
                let reason = if g.revoke_echo.is_some() {
                    crate::MarkOutReason::Revoked
                } else {
                    crate::MarkOutReason::NotMember
                };
                if self.is_serving(now) {
                    self.emit(LogEvent::MarkedOut { epoch: self.epoch, reason });
                }
            }
            self.lease.member = false;
            self.lease.was_serving = false;
            self.lease.last_markout = Some(now);
            if let Some(e) = g.revoke_echo {
                self.lease.ignore_grants_upto = self.lease.ignore_grants_upto.max(e);
                self.lease.revoke_ack = self.lease.revoke_ack.max(Some(e));
            }
        }
    }

    /// §5.7.4 (c): an operator revokes `node`'s lease (e.g. before maintenance). Returns false
    /// if this node is not a leader with an active set or `node` is not a member. Removal then
    /// follows the usual rule (confirmation or `rt`, never below a majority).
    pub fn revoke_member(&mut self, now: Instant, node: NodeId) -> bool {
        self.now = self.now.max(now);
        let member = self.orca_mode()
            && self.leader.as_ref().is_some_and(|l| {
                l.progress.get(&node).is_some_and(|p| p.membership == Membership::Member)
            });
        if member {
            self.revoke(node, RevokeReason::Operator, now);
            self.settle(now);
        }
        member
    }

    /// §5.7.4 Revoke(f): no more grants; `f` stays in DI and rounds until removed.
    fn revoke(&mut self, f: NodeId, reason: RevokeReason, now: Instant) {
        let epoch = self.epoch;
        let l = self.leader.as_mut().expect("leader");
        let p = l.progress.get_mut(&f).expect("follower");
        let revoke_echo = p.last_f_ts.max(p.max_echoed);
        p.membership = Membership::Removing { revoke_echo };
        p.revoked_at = Some(now);
        p.needs_send = true;
        if reason == RevokeReason::Slow {
            p.last_slow_revoke = Some(now);
        }
        self.emit(LogEvent::AsRevoked { epoch, node: f, reason, revoke_echo });
    }

    /// Revoke unresponsive and slow members, remove revoked ones when safe, add caught-up
    /// followers (§5.7.1, §5.7.4, §9.5). Returns whether the set changed.
    pub(crate) fn maintain_active_set(&mut self, now: Instant) -> bool {
        if !self.orca_mode() || !self.leader.as_ref().is_some_and(|l| l.synced) {
            return false;
        }
        let (mt, rt) = (self.cfg.mark_out_timeout, self.cfg.removal_timeout);
        let maj = self.majority();
        let target = self.cfg.active_set_target(self.n);
        let epoch = self.epoch;
        let mut changed = false;
        // (a) unresponsive members (§5.7.2 last paragraph).
        let l = self.leader.as_ref().expect("leader");
        let silent: Vec<NodeId> = l
            .progress
            .iter()
            .filter(|(_, p)| {
                p.membership == Membership::Member
                    && p.last_ack.is_none_or(|t| now.saturating_since(t) > mt)
            })
            .map(|(&f, _)| f)
            .collect();
        for f in silent {
            self.revoke(f, RevokeReason::Unresponsive, now);
            changed = true;
        }
        // (b) slow members of a durability round (§9.5).
        if let Some(threshold) = self.cfg.slow_threshold {
            let l = self.leader.as_ref().expect("leader");
            if let Some(r) = l.round.filter(|r| now.saturating_since(r.started) >= threshold) {
                let members: Vec<(NodeId, bool)> = l
                    .progress
                    .iter()
                    .filter(|(_, p)| p.membership == Membership::Member)
                    .map(|(&f, p)| (f, p.durable() >= r.target))
                    .collect();
                let own_done = self.persisted.min(self.kv.applied()) >= r.target;
                let slow: Vec<NodeId> =
                    members.iter().filter(|(_, done)| !done).map(|&(f, _)| f).collect();
                let all_others_done = own_done && slow.len() < members.len();
                let mut remaining = l.active_set_len();
                let recent: Vec<bool> = slow
                    .iter()
                    .map(|f| {
                        l.progress[f].last_slow_revoke.is_some_and(|t| now.saturating_since(t) < rt)
                    })
                    .collect();
                for (f, recent) in slow.into_iter().zip(recent) {
                    if all_others_done && !recent && remaining > maj {
                        remaining -= 1;
                        self.revoke(f, RevokeReason::Slow, now);
                        changed = true;
                    }
                }
            }
        }
        // Removal (§5.7.4 step 3), never below a majority.
        let l = self.leader.as_mut().expect("leader");
        let mut as_len = l.active_set_len();
        let mut removed = Vec::new();
        for (&f, p) in l.progress.iter_mut() {
            let Membership::Removing { revoke_echo } = p.membership else {
                continue;
            };
            let confirmed = matches!((p.revoke_ack, revoke_echo), (Some(a), Some(e)) if a >= e);
            let expired = p.last_grant.is_none_or(|g| now >= g + rt);
            if (confirmed || expired) && as_len > maj {
                p.membership = Membership::NotMember;
                as_len -= 1;
                removed.push((f, confirmed));
            }
        }
        for (node, confirmed) in removed {
            self.emit(LogEvent::AsRemoved { epoch, node, confirmed });
            changed = true;
        }
        // Addition (§5.7.1): reachable, persisted and applied >= DI; else ask it to catch up.
        loop {
            let l = self.leader.as_mut().expect("leader");
            let members =
                1 + l.progress.values().filter(|p| p.membership == Membership::Member).count();
            if members >= target {
                break;
            }
            let di = l.di;
            // A follower joining during a durability round must not hold it up (it would be
            // waited for at once): it must also hold the round's target. This keeps a slow
            // member that was just revoked from being re-added and blocking the round again.
            let need = l.round.map_or(di, |r| r.target.max(di));
            let mut best: Option<(LogIndex, NodeId)> = None;
            for (&f, p) in l.progress.iter_mut() {
                let reachable = p.last_ack.is_some_and(|t| now.saturating_since(t) <= mt);
                let held_off = p.revoked_at.is_some_and(|t| now.saturating_since(t) < rt);
                if p.membership != Membership::NotMember || !reachable || held_off {
                    continue;
                }
                if p.persisted >= need && p.applied >= need {
                    if best.is_none_or(|(b, _)| p.persisted > b) {
                        best = Some((p.persisted, f));
                    }
                } else {
                    let want = need.max(p.match_index);
                    if p.catchup.is_none_or(|c| c < want) {
                        p.catchup = Some(want);
                        p.needs_send = true;
                    }
                }
            }
            let Some((_, f)) = best else { break };
            let p = l.progress.get_mut(&f).expect("follower");
            p.membership = Membership::Member;
            p.catchup = None;
            p.needs_send = true; // the grant follows the addition (§5.7.1 last paragraph)
            let (persisted, applied) = (p.persisted, p.applied);
            self.emit(LogEvent::AsAdded { epoch, node: f, persisted, applied, di });
            changed = true;
        }
        changed
    }

    /// Instants at which the active set needs re-evaluation.
    pub(crate) fn active_set_deadlines(&self) -> Vec<Instant> {
        let mut out = Vec::new();
        let Some(l) = self.leader.as_ref() else {
            return out;
        };
        if !self.orca_mode() {
            return out;
        }
        let (mt, rt) = (self.cfg.mark_out_timeout, self.cfg.removal_timeout);
        for p in l.progress.values() {
            match p.membership {
                Membership::Member => {
                    out.extend(p.last_ack.map(|t| t + mt + std::time::Duration::from_nanos(1)))
                }
                Membership::Removing { .. } => out.extend(p.last_grant.map(|g| g + rt)),
                Membership::NotMember => out.extend(p.revoked_at.map(|t| t + rt)),
            }
        }
        if let (Some(r), Some(th)) = (l.round, self.cfg.slow_threshold) {
            out.push(r.started + th);
        }
        out
    }
}
