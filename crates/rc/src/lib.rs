//! The rc engine: Kite's release-consistent, leaderless, fully replicated store
//! (`../shared/specs/kite.md`), as a sans-IO core.
//!
//! * `es`: the Eventual Store — relaxed reads and writes on the fast path (Kite §5.2, §5.3) and
//!   the pending-write records that make replicas converge (§5.1.7);
//! * `abd`: releases and acquires (multi-writer ABD, §5.4, §5.5) and the slow path of relaxed
//!   accesses to out-of-epoch keys (§5.2 R3, §5.3 W3);
//! * `paxos`: fetch-and-add and compare-and-swap through leaderless per-key Paxos (§5.6, §5.7);
//! * `barrier`: the fast/slow-path barrier, delinquency bits and epochs (§5.1.4 - §5.1.6, §5.8);
//! * `records`: RIFL completion records kept with each key, for exactly-once requests
//!   (`specs/rifl.md` R-D23);
//! * `session`, `rounds`, `ops`, `replica`: session order (§5.1.8), rounds with retransmission
//!   (§5.1.3), and the engine that advances operations.
//!
//! Every protocol shares [`key_state::KeyState`].

mod abd;
mod api;
mod barrier;
mod canary;
mod config;
mod es;
pub mod key_state;
mod node_set;
mod ops;
mod paxos;
mod records;
mod replica;
mod rounds;
mod session;

pub use api::{
    BarrierPath, DbitChange, RcEvent, RcInput, RcReply, RcStats, Route, SelfDelinquentChange,
    ValueRound,
};
pub use barrier::RELEASE_TIMEOUT_RTTS;
pub use config::{ConfigError, RcConfig};
pub use node_set::NodeSet;
pub use replica::{RcEffects, RcReplica};

#[cfg(feature = "canaries")]
pub use canary::PlantedBug;
// Without the feature the type still exists, so that canary sites need no `#[cfg]` of their own:
// `RcReplica::planted` is then constant `false` and the branches compile away.
#[cfg(not(feature = "canaries"))]
pub(crate) use canary::PlantedBug;

#[cfg(test)]
mod rifl_scenarios;
#[cfg(test)]
mod scenarios;
#[cfg(test)]
mod testkit;
