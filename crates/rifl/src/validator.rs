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
    /// The lease fields are ones no grant produces (an expiration more than a term past its
    /// timestamp, or a timestamp ahead of the service's clock): refuse the RPC as a bad
    /// envelope; nothing of it is observed or kept (design.md, "Untrusted input").
    Invalid(&'static str),
}

/// How far an envelope's timestamp may lead the observed cluster clock before the node asks
/// the service instead of believing it. A genuine timestamp was handed out by the service, so
/// right after an answer it is never ahead; the slack covers a new service leader starting up
/// to `safe_interval` (3 s) past the last persisted safe time.
pub const MAX_AHEAD: Duration = Duration::from_secs(5);

#[derive(Clone, Debug)]
pub struct LeaseValidator {
    margin_ns: u64,
    /// A grant's expiration is its cluster time plus at most this (`LEASE_TERM`).
    term_ns: u64,
    query_retry: Duration,
    observed: ClusterTime,
    /// When the service last answered (the observed clock was then fresh).
    answered_at: Option<Instant>,
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
            term_ns: config.lease_term.as_nanos() as u64,
            query_retry,
            observed: ClusterTime::ZERO,
            answered_at: None,
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

    /// §5.5.3 `check_alive` for an RPC carrying `lease`, arriving at `now`.
    ///
    /// [Strata] The envelope's fields are the client's word (rifl.md assumes honest clients):
    /// they are bounded before they move any state. A grant lasts at most a term past its
    /// timestamp; a timestamp more than [`MAX_AHEAD`] beyond the observed clock is not
    /// observed but asked about (the service's answer brings the clock up to date), and is
    /// refused if it is still ahead right after an answer. Without this one envelope with a
    /// timestamp near `u64::MAX` made every lease look expired at the node, forever.
    pub fn check(&mut self, lease: &LeaseInfo, now: Instant) -> LeaseCheck {
        let granted_for = lease.expiration.as_nanos().saturating_sub(lease.timestamp.as_nanos());
        if granted_for > self.term_ns {
            return LeaseCheck::Invalid(
                "the lease expires more than a lease term after its timestamp",
            );
        }
        let ahead = lease.timestamp.as_nanos().saturating_sub(self.observed.as_nanos());
        if ahead > MAX_AHEAD.as_nanos() as u64 {
            let fresh =
                self.answered_at.is_some_and(|at| now.saturating_since(at) < self.query_retry);
            return if fresh {
                LeaseCheck::Invalid("the lease timestamp is ahead of the lease service's clock")
            } else {
                LeaseCheck::Ask
            };
        }
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
        self.answered_at = Some(now);
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
    /// The service tells `v` (about another client) that the cluster clock reads `ms`: how a
    /// node's observed clock catches up by more than `MAX_AHEAD`.
    fn clock(v: &mut LeaseValidator, ms: u64) {
        let other = LeaseStatus { lease_id: 99, expiration: ct(ms + 10_000), cluster_time: ct(ms) };
        v.on_status(99, &other, at(0));
    }

    #[test]
    fn a_lease_behind_the_observed_clock_is_asked_about_and_expired_only_when_the_service_says_so()
    {
        let mut v = LeaseValidator::new(&RiflConfig::simulation(), Duration::from_millis(100));
        assert_eq!(
            v.check(&lease(1, 10_000, 0), at(0)),
            LeaseCheck::Alive { expiration: ct(10_000) }
        );
        // Another client's envelope moves the clock past client 1's expiration.
        assert_eq!(
            {
                clock(&mut v, 20_000);
                v.check(&lease(2, 30_000, 20_000), at(0))
            },
            LeaseCheck::Alive { expiration: ct(30_000) }
        );
        assert_eq!(v.check(&lease(1, 10_000, 0), at(0)), LeaseCheck::Ask);
        assert!(v.should_ask(1, at(0)));
        assert!(!v.should_ask(1, at(50)), "one question in flight per client");
        assert!(v.should_ask(1, at(150)), "asked again when unanswered");
        // The service renewed it meanwhile: alive, and no more questions while the hint holds.
        let renewed = LeaseStatus { lease_id: 1, expiration: ct(40_000), cluster_time: ct(21_000) };
        assert!(!v.on_status(1, &renewed, at(200)));
        assert_eq!(
            v.check(&lease(1, 10_000, 0), at(0)),
            LeaseCheck::Alive { expiration: ct(40_000) },
            "carries the confirmed expiration on"
        );
        // Later the service says expired: from then on, ExpiredLease.
        assert_eq!(
            {
                clock(&mut v, 50_000);
                v.check(&lease(2, 60_000, 50_000), at(0))
            },
            LeaseCheck::Alive { expiration: ct(60_000) }
        );
        assert_eq!(v.check(&lease(1, 10_000, 0), at(0)), LeaseCheck::Ask);
        let gone =
            LeaseStatus { lease_id: 0, expiration: ClusterTime::ZERO, cluster_time: ct(51_000) };
        assert!(v.on_status(1, &gone, at(300)));
        assert_eq!(v.check(&lease(1, 10_000, 0), at(0)), LeaseCheck::Expired);
        assert_eq!(
            v.observed_cluster_time(),
            ct(51_000),
            "the clock rose to the service's time first"
        );
    }

    #[test]
    fn a_lease_past_its_expiration_but_not_yet_dropped_is_asked_about_at_the_retry_pace() {
        let mut v = LeaseValidator::new(&RiflConfig::simulation(), Duration::from_millis(100));
        {
            clock(&mut v, 50_000);
            v.check(&lease(2, 60_000, 50_000), at(0))
        };
        assert_eq!(v.check(&lease(1, 10_000, 0), at(0)), LeaseCheck::Ask);
        assert!(v.should_ask(1, at(0)));
        let dying = LeaseStatus { lease_id: 1, expiration: ct(10_000), cluster_time: ct(51_000) };
        assert!(!v.on_status(1, &dying, at(10)), "alive until its Drop is durable");
        assert_eq!(v.check(&lease(1, 10_000, 0), at(0)), LeaseCheck::Ask);
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
        v.check(&lease(1, 10_000, 0), at(0));
        clock(&mut v, 30_000);
        v.check(&lease(2, 40_000, 30_000), at(0));
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
        assert_eq!(v.tracked_clients(), 2, "clients 2 and 99 (the clock's)");
        assert_eq!(v.check(&lease(1, 10_000, 0), at(0)), LeaseCheck::Expired);
        v.cleaner(at(3200));
        assert_eq!(
            v.check(&lease(1, 10_000, 0), at(0)),
            LeaseCheck::Ask,
            "forgotten expiry: asked again, never run"
        );
    }

    #[test]
    fn a_lease_longer_than_a_term_is_invalid_and_moves_nothing() {
        let mut v = LeaseValidator::new(&RiflConfig::simulation(), Duration::from_millis(100));
        // The simulation term is 10 s: a grant at 1 s expires at 11 s at the latest.
        assert!(matches!(v.check(&lease(1, 11_001, 1_000), at(0)), LeaseCheck::Invalid(_)));
        assert_eq!(v.observed_cluster_time(), ClusterTime::ZERO, "nothing observed");
        assert_eq!(v.tracked_clients(), 0, "nothing kept");
        assert_eq!(
            v.check(&lease(1, 11_000, 1_000), at(0)),
            LeaseCheck::Alive { expiration: ct(11_000) }
        );
    }

    #[test]
    fn a_timestamp_far_ahead_is_asked_about_and_refused_if_the_service_clock_is_behind_it() {
        let mut v = LeaseValidator::new(&RiflConfig::simulation(), Duration::from_millis(100));
        let forged = LeaseInfo {
            client_id: 1,
            expiration: ClusterTime(u64::MAX),
            timestamp: ClusterTime(u64::MAX - 1),
        };
        assert_eq!(v.check(&forged, at(0)), LeaseCheck::Ask, "not believed, not observed");
        assert_eq!(v.observed_cluster_time(), ClusterTime::ZERO);
        assert!(v.should_ask(1, at(0)));
        let answer = LeaseStatus { lease_id: 1, expiration: ct(12_000), cluster_time: ct(2_000) };
        v.on_status(1, &answer, at(10));
        assert!(matches!(v.check(&forged, at(10)), LeaseCheck::Invalid(_)));
        assert_eq!(v.observed_cluster_time(), ct(2_000), "the service's time, not the forged one");
        // Another client's genuine lease is unaffected.
        assert_eq!(
            v.check(&lease(2, 12_000, 2_000), at(10)),
            LeaseCheck::Alive { expiration: ct(12_000) }
        );
        // Long after the answer, a timestamp ahead of the stale clock is asked about again.
        assert_eq!(v.check(&lease(3, 40_000, 30_000), at(10_000)), LeaseCheck::Ask);
    }
}
