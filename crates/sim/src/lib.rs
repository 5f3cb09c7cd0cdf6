//! `strata-sim`: a deterministic simulator that runs the same sans-IO cores as `strata-node`
//! on a simulated network, clock and fault schedule, records a history and checks it
//! (`DESIGN.md`, testing layers 3 and 4; Kite §7).
//!
//! * [`knobs`]: everything a run does, drawn from one `u64` seed;
//! * [`net`], [`clock`]: lossy, duplicating, reordering, partitionable links; skewed clocks;
//! * [`cluster`]: the event loop driving N `RcReplica` cores through safety, liveness and drain;
//! * [`workload`]: closed-loop client sessions issuing relaxed, release/acquire and RMW
//!   operations (or a script);
//! * [`history`]: what a run records; [`check`]: the checkers over it;
//! * [`run`]: one seed end to end, with its report;
//! * [`orca`]: the same for the log engine (ORCA): driver, history, §7 checkers, harness;
//! * [`host`]: the whole server (`strata-host`: rc, log shards, leases, moves, catalog) under
//!   seeded faults, with `strata-logstore` over `SimBackend` as its disks.

pub mod check;
pub mod clock;
pub mod cluster;
mod guard;
pub mod history;
pub mod host;
pub mod knobs;
pub mod net;
pub mod orca;
pub mod run;
pub mod txn;
pub mod workload;

pub use check::Violation;
pub use history::History;
pub use knobs::{Canary, Knobs};
pub use run::{run_knobs, run_seed, RunOptions, RunReport};
