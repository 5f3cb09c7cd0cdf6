//! Fault harnesses over real Strata node processes (DESIGN.md's process layer of testing):
//! start a cluster of `strata node` processes, SIGKILL and restart them, slow their links with
//! the transport's fault layer, drive clients through the real client library, and check what
//! the clients observed.
//!
//! * [`procs`]: the process cluster (spawn, SIGKILL, restart, lag, heal).
//! * [`check`]: the checks over what clients observed (monotonic reads, freshness classes).
//! * [`configs`]: the log-table configurations compared side by side.
//! * [`schedule`]: the random cluster states (crashes, restarts, a lagging node).
//! * [`monotonic`]: ORCA's fault-injection harness (orca.md §7, the paper's §5.3).
//! * [`cases`]: the paper's case studies (location tracking, a Retwis-like timeline).
//!
//! `strata chaos --help` runs them; docs/faults.md has the results.

pub mod cases;
pub mod check;
pub mod configs;
pub mod monotonic;
pub mod procs;
pub mod schedule;

pub use configs::{TableConfig, CONFIGS};
pub use procs::ProcessCluster;
