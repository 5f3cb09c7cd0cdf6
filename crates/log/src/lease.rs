//! The leader lease and step-down of deposed leaders (ORCA §5.8).

use strata_wire::Instant;

use crate::api::{LogEvent, StepDownReason};
use crate::replica::LogReplica;

impl LogReplica {
    /// Starts a heartbeat round every `hb` (§5.3 step 3): every follower gets a message.
    pub(crate) fn heartbeat_if_due(&mut self, now: Instant) {
        let hb = self.cfg.heartbeat;
        let Some(l) = self.leader.as_mut() else {
            return;
        };
        if now < l.next_hb_at {
            return;
        }
        l.hb_round += 1;
        l.hb_started.insert(l.hb_round, now);
        l.next_hb_at = now + hb;
        for p in l.progress.values_mut() {
            p.needs_send = true;
        }
    }

    /// §5.8: once a majority (leader included) acked round `h` or later, the lease runs to
    /// `s_h + ST`.
    pub(crate) fn update_leader_lease(&mut self) {
        let maj = self.majority();
        let st = self.cfg.leader_lease;
        let Some(l) = self.leader.as_mut() else {
            return;
        };
        let best = l
            .hb_started
            .iter()
            .filter(|(&h, _)| {
                1 + l.progress.values().filter(|p| p.acked_hb_round >= h).count() >= maj
            })
            .map(|(&h, &s)| (h, s))
            .next_back();
        if let Some((h, s)) = best {
            if s + st > l.lease_until {
                l.lease_until = s + st;
                l.lease_expired_reported = false;
            }
            l.hb_started.retain(|&r, _| r > h);
        }
    }

    /// §5.8: report the lease lapse once; step down after another `ST` without a lease.
    /// Returns false if the node stepped down.
    pub(crate) fn check_leader_lease(&mut self, now: Instant) -> bool {
        let st = self.cfg.leader_lease;
        let epoch = self.epoch;
        let Some(l) = self.leader.as_mut() else {
            return false;
        };
        if now < l.lease_until {
            return true;
        }
        if !l.lease_expired_reported && l.synced {
            l.lease_expired_reported = true;
            let followers = l
                .progress
                .iter()
                .map(|(n, p)| {
                    let age =
                        p.last_ack.map_or(u64::MAX, |t| now.saturating_since(t).as_millis() as u64);
                    format!("{n}:{}/{}@{age}ms", p.acked_hb_round, l.hb_round)
                })
                .collect::<Vec<_>>()
                .join(" ");
            self.emit(LogEvent::LeaderLeaseExpired { epoch, followers });
        }
        let l = self.leader.as_ref().expect("leader");
        if now >= l.lease_until + st {
            self.step_down(now, StepDownReason::LeaseLost);
            return false;
        }
        true
    }

    pub(crate) fn lease_deadlines(&self) -> Vec<Instant> {
        let Some(l) = self.leader.as_ref() else {
            return Vec::new();
        };
        vec![l.next_hb_at, l.lease_until, l.lease_until + self.cfg.leader_lease]
    }
}
