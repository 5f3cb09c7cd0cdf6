//! The client's view of its lease (`specs/rifl.md` §5.5.1): when to renew, when to stop
//! issuing new RPCs, and the `lease_info` every request carries.
//!
//! The term comes from each grant (`expiration - cluster_time`): renew at half of it, stop
//! issuing new RPCs in its last tenth (at most the configured `danger`).
//!
//! Local deadlines are computed from the local time the renewal was *sent*: the grant's term
//! (`expiration - cluster_time`) started no earlier than that, so the estimate errs on the
//! safe side whatever the reply's delay.

use strata_wire::rifl::LeaseInfo;
use strata_wire::Instant;

use crate::config::RiflConfig;
use crate::lease_service::LeaseStatus;

#[derive(Clone, Debug)]
pub struct ClientLease {
    config: RiflConfig,
    grant: Option<LeaseStatus>,
    /// After this local instant the lease may be about to expire (the danger zone): no new RPC.
    valid_until: Instant,
    renew_at: Instant,
}

impl ClientLease {
    pub fn new(config: RiflConfig) -> Self {
        ClientLease { config, grant: None, valid_until: Instant::ZERO, renew_at: Instant::ZERO }
    }

    /// A renewal sent at `sent` was answered with `grant`. Returns true when the id changed
    /// (a first lease, or the old one expired): the caller then fails the old id's unfinished
    /// RPCs as they come back `ExpiredLease` and starts a fresh RequestTracker (R-D21).
    pub fn on_grant(&mut self, sent: Instant, grant: LeaseStatus) -> bool {
        let changed = self.grant.map(|g| g.lease_id) != Some(grant.lease_id);
        let term = std::time::Duration::from_nanos(
            grant.expiration.as_nanos().saturating_sub(grant.cluster_time.as_nanos()),
        );
        // The term is the service's (the client does not configure it): renew at half of it
        // (§3.5), stop new RPCs in its last tenth, at most the configured danger zone.
        let danger = (term / 10).min(self.config.danger);
        self.valid_until = sent + term.saturating_sub(danger);
        self.renew_at = sent + term / 2;
        self.grant = Some(grant);
        changed
    }

    /// The lease id, if a lease was ever granted.
    pub fn client_id(&self) -> Option<u64> {
        self.grant.map(|g| g.lease_id)
    }

    /// What requests carry, while the lease is outside its danger zone; `None` means "renew
    /// first" (§5.5.1: `get_client_id` blocks until a renewal succeeds).
    pub fn usable(&self, now: Instant) -> Option<LeaseInfo> {
        let g = self.grant?;
        (now < self.valid_until).then_some(LeaseInfo {
            client_id: g.lease_id,
            expiration: g.expiration,
            timestamp: g.cluster_time,
        })
    }

    /// What requests carried under the latest grant, whether or not it is still usable (an
    /// unfinished request of an expired lease is retried with it).
    pub fn last_grant(&self) -> Option<LeaseInfo> {
        self.grant.map(|g| LeaseInfo {
            client_id: g.lease_id,
            expiration: g.expiration,
            timestamp: g.cluster_time,
        })
    }

    /// Whether a renewal is due (none granted yet, or half the term passed).
    pub fn renewal_due(&self, now: Instant) -> bool {
        self.grant.is_none() || now >= self.renew_at
    }

    /// When the next renewal is due.
    pub fn renew_at(&self) -> Instant {
        self.renew_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_wire::rifl::ClusterTime;

    #[test]
    fn deadlines_count_from_the_send_time_and_the_danger_zone_stops_new_rpcs() {
        let mut lease = ClientLease::new(RiflConfig::simulation()); // term 10 s, renew at 5 s left, danger 1 s
        assert!(lease.renewal_due(Instant::ZERO));
        assert!(lease.usable(Instant::ZERO).is_none());
        let grant = LeaseStatus {
            lease_id: 4,
            expiration: ClusterTime::from_millis(60_000),
            cluster_time: ClusterTime::from_millis(50_000),
        };
        assert!(lease.on_grant(Instant::from_millis(100), grant));
        let info = lease.usable(Instant::from_millis(9_000)).unwrap();
        assert_eq!(
            (info.client_id, info.expiration, info.timestamp),
            (4, grant.expiration, grant.cluster_time)
        );
        assert!(!lease.renewal_due(Instant::from_millis(5_000)));
        assert!(lease.renewal_due(Instant::from_millis(5_100)));
        assert!(lease.usable(Instant::from_millis(9_100)).is_none(), "in the danger zone");
        assert!(!lease.on_grant(
            Instant::from_millis(5_100),
            LeaseStatus {
                cluster_time: ClusterTime::from_millis(55_000),
                expiration: ClusterTime::from_millis(65_000),
                ..grant
            }
        ));
        assert!(lease.usable(Instant::from_millis(9_100)).is_some());
    }
}
