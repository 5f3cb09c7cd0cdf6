//! The rc engine: Kite's release-consistent, leaderless, fully replicated store
//! (`../shared/specs/kite.md`), as a sans-IO core.
//!
//! Implemented so far: the Eventual Store (relaxed reads and writes, Kite §5.2, §5.3 fast path):
//! per-key Lamport clocks `<version, node_id>`, writes applied locally and broadcast to every
//! replica, reads served locally, per-key sequential consistency within a session, and
//! convergence through acknowledged, re-sent writes (§5.1.7). ABD releases/acquires, per-key
//! Paxos RMWs and barriers sit beside it and share [`key_state::KeyState`].

mod api;
mod config;
mod es;
pub mod key_state;
mod node_set;
mod replica;

pub use api::{RcEvent, RcInput, RcReply, RcStats, Route};
pub use config::{ConfigError, RcConfig};
pub use node_set::NodeSet;
pub use replica::{RcEffects, RcReplica};

/// Bugs the simulator plants on purpose, to prove its checkers can fail (canaries).
#[cfg(feature = "canaries")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlantedBug {
    /// A replica applies a received write even when its version is older than the one it
    /// holds (last arrival wins): breaks G1, per-key session order and convergence.
    ApplyOlderWrites,
}
