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
    /// `T_RETX` (Kite §3.4): first re-send of an unacknowledged write to a non-acker.
    pub retransmit_after: Duration,
    /// Re-sends back off exponentially up to this period (see `docs/design.md`, departures).
    pub retransmit_max: Duration,
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
}

impl RcConfig {
    /// Defaults sized for loopback: a re-send after 5 ms, backing off to 1 s.
    pub fn new(node: NodeId, replicas: Vec<NodeId>) -> RcConfig {
        RcConfig {
            node,
            replicas,
            retransmit_after: Duration::from_millis(5),
            retransmit_max: Duration::from_secs(1),
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
        Ok(())
    }
}
