use std::time::Duration;

use strata_wire::{Limits, NodeId};
use thiserror::Error;

use crate::node_set::NodeSet;

/// Configuration of one rc replica. Every replica of a group must agree on `replicas`.
#[derive(Clone, Debug)]
pub struct RcConfig {
    /// This replica.
    pub node: NodeId,
    /// Every replica of the group, this one included.
    pub replicas: Vec<NodeId>,
    /// `T_RETX` (Kite §3.4) for pending writes: first re-send of an unacknowledged write to a
    /// non-acker; re-sends back off exponentially up to `retransmit_max`.
    pub retransmit_after: Duration,
    /// Cap of the pending-write back-off (see `docs/design.md`, departures).
    pub retransmit_max: Duration,
    /// `T_RETX` for protocol rounds (Kite §5.1.3): a round re-sends its request to the nodes
    /// that have not replied this often until it finishes.
    pub round_retransmit: Duration,
    /// `T_REL` (Kite §3.4): how long a barrier waits for every prior write to be acknowledged
    /// by all nodes before it takes the slow path. This is the floor: a barrier waits
    /// `10 x` the smoothed ack round trip (K-D1) when that is longer, up to `release_timeout_max`
    /// (`RcReplica::release_timeout`).
    pub release_timeout: Duration,
    /// Cap of the adaptive `T_REL`; at least `release_timeout` (equal to it: a fixed `T_REL`).
    pub release_timeout_max: Duration,
    /// `B_MIN`, `B_MAX` (Kite §3.4): randomized exponential back-off of a Nacked Paxos attempt.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// Session indexes of this replica start here. A node process picks a fresh base per
    /// incarnation, so that a restarted node never reuses the session ids (and thus RMW ids)
    /// of its previous life (Kite §6, restart).
    pub session_index_base: u32,
    /// Seed of the replica's randomness (Paxos back-off).
    pub seed: u64,
    pub limits: Limits,
    /// Planted bugs for the simulator's canaries; `None` in every real deployment.
    #[cfg(feature = "canaries")]
    pub planted_bug: Option<crate::PlantedBug>,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("replica set must contain this node ({0})")]
    SelfNotReplica(NodeId),
    #[error("node id {0} is too large (ids must be below {max})", max = NodeSet::MAX_NODES)]
    NodeIdTooLarge(NodeId),
    #[error("node id {0} appears twice in the replica set")]
    DuplicateReplica(NodeId),
    #[error("{0} must be positive")]
    ZeroDuration(&'static str),
    #[error("release_timeout_max ({max:?}) must be at least release_timeout ({min:?})")]
    ReleaseTimeoutMaxBelowMin { min: Duration, max: Duration },
}

impl RcConfig {
    /// Defaults sized for loopback: pending writes re-sent after 5 ms backing off to 1 s, rounds
    /// re-sent every 5 ms, `T_REL` = 10 ack round trips within 5 ms to 100 ms, Paxos back-off
    /// 200 µs to 10 ms.
    pub fn new(node: NodeId, replicas: Vec<NodeId>) -> RcConfig {
        RcConfig {
            node,
            replicas,
            retransmit_after: Duration::from_millis(5),
            retransmit_max: Duration::from_secs(1),
            round_retransmit: Duration::from_millis(5),
            release_timeout: Duration::from_millis(5),
            release_timeout_max: Duration::from_millis(100),
            backoff_min: Duration::from_micros(200),
            backoff_max: Duration::from_millis(10),
            session_index_base: 0,
            seed: u64::from(node.0),
            limits: Limits::default(),
            #[cfg(feature = "canaries")]
            planted_bug: None,
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut seen = NodeSet::EMPTY;
        for &r in &self.replicas {
            if r.0 >= NodeSet::MAX_NODES {
                return Err(ConfigError::NodeIdTooLarge(r));
            }
            if seen.contains(r) {
                return Err(ConfigError::DuplicateReplica(r));
            }
            seen.insert(r);
        }
        if !seen.contains(self.node) {
            return Err(ConfigError::SelfNotReplica(self.node));
        }
        for (d, name) in [
            (self.retransmit_after, "retransmit_after"),
            (self.round_retransmit, "round_retransmit"),
            (self.release_timeout, "release_timeout"),
            (self.backoff_min, "backoff_min"),
        ] {
            if d.is_zero() {
                return Err(ConfigError::ZeroDuration(name));
            }
        }
        if self.release_timeout_max < self.release_timeout {
            return Err(ConfigError::ReleaseTimeoutMaxBelowMin {
                min: self.release_timeout,
                max: self.release_timeout_max,
            });
        }
        Ok(())
    }

    /// Quorum size `Q = floor(N/2) + 1` (Kite §0).
    pub fn quorum(&self) -> usize {
        self.replicas.len() / 2 + 1
    }
}
