//! Lease validation at a storage node (`specs/rifl.md` §5.5.3, §5.6), for a node whose
//! completion records live in its engines (per key in rc tables, per log entry in log tables)
//! rather than in one [`crate::ResultTracker`]: the node checks every linearizable RPC's lease
//! here, before an engine sees it.
//!
//! * `observed_cluster_time` rises with every envelope's timestamp and every answer of the
//!   lease service (§5.5.3: before any state of a client is deleted).
//! * A lease whose expiration (or the best expiration the service confirmed) is beyond the
//!   observed time plus the margin is alive: no message. Otherwise the node asks the service
//!   ([`LeaseCheck::Ask`]) and holds the RPC until the answer; one question per client is in
//!   flight at a time, repeated after `query_retry` if unanswered.
//! * Only the service's "expired" makes a client expired here (§5.5.3: a server declares
//!   `Expired` only after the lease server confirmed it). From then on the client's RPCs get
//!   `ExpiredLease`, and its completion records may be collected (§5.6), which the node does
//!   in its engines for the ids [`LeaseValidator::on_status`] reports.
//! * The cleaner (§5.6, every `cleaner_period`) asks about every client whose best known
//!   expiration is behind the observed clock: a client that went away is confirmed expired
//!   and its records are collected, bounding the node's state by the live clients.

use std::collections::HashMap;
use std::time::Duration;

use strata_wire::rifl::{ClusterTime, LeaseInfo, LeaseStatus};
use strata_wire::Instant;

use crate::config::RiflConfig;

/// What to do with an arriving linearizable RPC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseCheck {
    /// The lease is alive by the observed clock: run the RPC. `expiration` is the best one
    /// known (the envelope's, or a later one the service confirmed): the RPC should carry it
    /// on, so a check further in agrees.
    Alive { expiration: ClusterTime },
    /// The lease may have expired: hold the RPC until the service answers
    /// ([`LeaseValidator::on_status`]), then check again. Send a query when
    /// [`LeaseValidator::should_ask`] says so.
    Ask,
    /// The service confirmed the lease expired: reply `ExpiredLease` (the outcome of the
    /// client's unfinished RPCs is unknown to it, R-G4).
    Expired,
}

#[derive(Clone, Debug)]
pub struct LeaseValidator {
    margin_ns: u64,
    query_retry: Duration,
    observed: ClusterTime,
    /// Per client: the largest expiration seen in its envelopes or confirmed by the service.
    hints: HashMap<u64, ClusterTime>,
    /// Clients the service confirmed expired, with when this node learned it (forgotten
    /// after `cleaner_period`: a later RPC of the client is then asked about again).
    expired: HashMap<u64, Instant>,
    /// Questions in flight: client -> when asked.
    asking: HashMap<u64, Instant>,
    cleaner_period: Duration,
    next_clean: Instant,
}

impl LeaseValidator {
    pub fn new(config: &RiflConfig, query_retry: Duration) -> Self {
        LeaseValidator {
            margin_ns: config.validation_margin.as_nanos() as u64,
            query_retry,
            observed: ClusterTime::ZERO,
            hints: HashMap::new(),
            expired: HashMap::new(),
            asking: HashMap::new(),
            cleaner_period: config.cleaner_period,
            next_clean: Instant::ZERO + config.cleaner_period,
        }
    }

    pub fn observed_cluster_time(&self) -> ClusterTime {
        self.observed
    }

    fn observe(&mut self, t: ClusterTime) {
        self.observed = self.observed.max(t);
    }

    /// §5.5.3 `check_alive` for an RPC carrying `lease`.
    pub fn check(&mut self, lease: &LeaseInfo) -> LeaseCheck {
        self.observe(lease.timestamp);
        if self.expired.contains_key(&lease.client_id) {
            return LeaseCheck::Expired;
        }
        let limit = self.observed.saturating_add_nanos(self.margin_ns);
        let hint = self.hints.entry(lease.client_id).or_insert(ClusterTime::ZERO);
        *hint = (*hint).max(lease.expiration);
        if *hint > limit {
            LeaseCheck::Alive { expiration: *hint }
        } else {
            LeaseCheck::Ask
        }
    }

    /// Whether to send a question about `client_id` now (none in flight, or the last one is
    /// older than `query_retry`); records it as sent.
    pub fn should_ask(&mut self, client_id: u64, now: Instant) -> bool {
        match self.asking.get(&client_id) {
            Some(&at) if now.saturating_since(at) < self.query_retry => false,
            _ => {
                self.asking.insert(client_id, now);
                true
            }
        }
    }

    /// The service's answer about `client_id`. Returns true when it says expired: the node
    /// then collects the client's completion records (§5.6) — the observed clock has already
    /// risen to the service's time, so any later RPC of the client is asked about again.
    pub fn on_status(&mut self, client_id: u64, status: &LeaseStatus, now: Instant) -> bool {
        self.observe(status.cluster_time);
        self.asking.remove(&client_id);
        if status.alive() {
            let hint = self.hints.entry(client_id).or_insert(ClusterTime::ZERO);
            *hint = (*hint).max(status.expiration);
            if status.expiration <= status.cluster_time {
                // Past its expiration, not yet dropped durably: it will be expired, never
                // renewed. Ask again only after `query_retry`, not at once in a loop.
                self.asking.insert(client_id, now);
            }
            false
        } else {
            self.hints.remove(&client_id);
            self.expired.insert(client_id, now);
            true
        }
    }

    /// §5.6 cleaner, due every `cleaner_period`: the clients to ask about (best known
    /// expiration not beyond the observed clock, no question asked within `query_retry`: an
    /// unanswered one, or one answered "alive, but past its expiration"; send each through
    /// [`LeaseValidator::should_ask`]). Forgets expiries older than a period. Sorted, for
    /// deterministic simulation.
    pub fn cleaner(&mut self, now: Instant) -> Vec<u64> {
        if now < self.next_clean {
            return Vec::new();
        }
        self.next_clean = now + self.cleaner_period;
        let period = self.cleaner_period;
        self.expired.retain(|_, &mut at| now.saturating_since(at) < period);
        let observed = self.observed;
        let retry = self.query_retry;
        let asked_lately =
            |id: &u64| self.asking.get(id).is_some_and(|&at| now.saturating_since(at) < retry);
        let mut ids: Vec<u64> = self
            .hints
            .iter()
            .filter(|&(id, &exp)| exp <= observed && !asked_lately(id))
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// When [`LeaseValidator::cleaner`] next has work.
    pub fn next_clean(&self) -> Instant {
        self.next_clean
    }

    /// Clients this node tracks (for `strata status` and memory accounting).
    pub fn tracked_clients(&self) -> usize {
        self.hints.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ct(ms: u64) -> ClusterTime {
        ClusterTime::from_millis(ms)
    }
    fn lease(id: u64, exp: u64, ts: u64) -> LeaseInfo {
        LeaseInfo { client_id: id, expiration: ct(exp), timestamp: ct(ts) }
    }
    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    #[test]
    fn a_lease_behind_the_observed_clock_is_asked_about_and_expired_only_when_the_service_says_so()
    {
        let mut v = LeaseValidator::new(&RiflConfig::simulation(), Duration::from_millis(100));
        assert_eq!(v.check(&lease(1, 10_000, 0)), LeaseCheck::Alive { expiration: ct(10_000) });
        // Another client's envelope moves the clock past client 1's expiration.
        assert_eq!(
            v.check(&lease(2, 30_000, 20_000)),
            LeaseCheck::Alive { expiration: ct(30_000) }
        );
        assert_eq!(v.check(&lease(1, 10_000, 0)), LeaseCheck::Ask);
        assert!(v.should_ask(1, at(0)));
        assert!(!v.should_ask(1, at(50)), "one question in flight per client");
        assert!(v.should_ask(1, at(150)), "asked again when unanswered");
        // The service renewed it meanwhile: alive, and no more questions while the hint holds.
        let renewed = LeaseStatus { lease_id: 1, expiration: ct(40_000), cluster_time: ct(21_000) };
        assert!(!v.on_status(1, &renewed, at(200)));
        assert_eq!(
            v.check(&lease(1, 10_000, 0)),
            LeaseCheck::Alive { expiration: ct(40_000) },
            "carries the confirmed expiration on"
        );
        // Later the service says expired: from then on, ExpiredLease.
        assert_eq!(
            v.check(&lease(2, 90_000, 50_000)),
            LeaseCheck::Alive { expiration: ct(90_000) }
        );
        assert_eq!(v.check(&lease(1, 10_000, 0)), LeaseCheck::Ask);
        let gone =
            LeaseStatus { lease_id: 0, expiration: ClusterTime::ZERO, cluster_time: ct(51_000) };
        assert!(v.on_status(1, &gone, at(300)));
        assert_eq!(v.check(&lease(1, 10_000, 0)), LeaseCheck::Expired);
        assert_eq!(
            v.observed_cluster_time(),
            ct(51_000),
            "the clock rose to the service's time first"
        );
    }

    #[test]
    fn a_lease_past_its_expiration_but_not_yet_dropped_is_asked_about_at_the_retry_pace() {
        let mut v = LeaseValidator::new(&RiflConfig::simulation(), Duration::from_millis(100));
        v.check(&lease(2, 90_000, 50_000));
        assert_eq!(v.check(&lease(1, 10_000, 0)), LeaseCheck::Ask);
        assert!(v.should_ask(1, at(0)));
        let dying = LeaseStatus { lease_id: 1, expiration: ct(10_000), cluster_time: ct(51_000) };
        assert!(!v.on_status(1, &dying, at(10)), "alive until its Drop is durable");
        assert_eq!(v.check(&lease(1, 10_000, 0)), LeaseCheck::Ask);
        assert!(!v.should_ask(1, at(20)), "not again at once");
        // The cleaner lists it again once the retry time passed, and the service then says
        // expired (its Drop became durable).
        assert_eq!(v.cleaner(at(1000)), vec![1]);
        assert!(v.should_ask(1, at(1000)));
        let gone =
            LeaseStatus { lease_id: 0, expiration: ClusterTime::ZERO, cluster_time: ct(52_000) };
        assert!(v.on_status(1, &gone, at(1010)));
    }

    #[test]
    fn the_cleaner_asks_about_clients_behind_the_clock_and_forgets_old_expiries() {
        let cfg = RiflConfig::simulation(); // cleaner every 1 s
        let mut v = LeaseValidator::new(&cfg, Duration::from_millis(100));
        v.check(&lease(1, 10_000, 0));
        v.check(&lease(2, 60_000, 30_000));
        assert!(v.cleaner(at(500)).is_empty(), "not due yet");
        assert_eq!(v.cleaner(at(1000)), vec![1], "client 2 is alive by the clock");
        assert!(v.should_ask(1, at(1000)));
        assert!(v.cleaner(at(1500)).is_empty());
        assert_eq!(
            v.cleaner(at(2000)),
            vec![1],
            "unanswered for longer than query_retry: asked again"
        );
        let gone =
            LeaseStatus { lease_id: 0, expiration: ClusterTime::ZERO, cluster_time: ct(31_000) };
        assert!(v.on_status(1, &gone, at(2100)));
        assert_eq!(v.tracked_clients(), 1);
        assert_eq!(v.check(&lease(1, 10_000, 0)), LeaseCheck::Expired);
        v.cleaner(at(3200));
        assert_eq!(
            v.check(&lease(1, 10_000, 0)),
            LeaseCheck::Ask,
            "forgotten expiry: asked again, never run"
        );
    }
}
