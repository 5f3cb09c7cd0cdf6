//! Simulation of the log engine (ORCA, `orca.md`): whole [`strata_host::Host`] cores — the
//! same [`strata_log::LogReplica`]s `strata-node` runs, inside the host that pumps them — on
//! the simulator's one cluster loop ([`crate::host::cluster::HostCluster`]: network, clocks,
//! crash-losing disks), with the history checkers of orca.md §7 and the §7 fault-injection
//! harness.
//!
//! * [`cluster`]: the harness over the loop ([`OrcaCluster`]), also the scenario tests' DSL;
//! * [`history`]: what a run records; [`check`]: invariants 1 - 14 over it, and RIFL's
//!   exactly-once invariants (rifl.md §7 inv. 1, 2) for the writes;
//! * [`harness`]: one seeded §7 run (crash/lag states, reads everywhere, healing, liveness)
//!   and its report; `cargo run -p strata-sim -- --engine log --mode orca --seed N`.

pub mod check;
pub mod cluster;
pub mod harness;
pub mod history;

use std::fmt;
use std::str::FromStr;

use strata_log::{LogConfig, Replication};

pub use check::{check_all, AT_MOST_ONCE, MONOTONIC_READS, ORCA_CHECKERS, STABLE_RESULT};
pub use cluster::OrcaCluster;
pub use harness::{run_orca, HarnessOptions, OrcaReport};
pub use history::OrcaHistory;

/// The configurations of orca.md §1.3 the harness runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// ORCA: CAD with active-set reads, asynchronous replication.
    Orca,
    /// ORCA with synchronous replication to a majority's memory.
    OrcaSyncRepl,
    /// CAD durability alone: leader-only reads.
    Cad,
    /// strong-ZK: synchronous durability, leader-only reads.
    Strong,
    /// weak-ZK: asynchronous durability, reads at every node (must break invariant 1).
    Weak,
    /// weak-ZK with synchronous replication (must break invariant 1).
    WeakSyncRepl,
    /// sync-ZK-all: synchronous durability, reads at every node (must break invariant 1).
    SyncAll,
}

impl Mode {
    pub const ALL: [Mode; 7] = [
        Mode::Orca,
        Mode::OrcaSyncRepl,
        Mode::Cad,
        Mode::Strong,
        Mode::Weak,
        Mode::WeakSyncRepl,
        Mode::SyncAll,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Orca => "orca",
            Mode::OrcaSyncRepl => "orca-sync-repl",
            Mode::Cad => "cad",
            Mode::Strong => "strong",
            Mode::Weak => "weak",
            Mode::WeakSyncRepl => "weak-sync-repl",
            Mode::SyncAll => "sync-all",
        }
    }

    pub fn config(self) -> LogConfig {
        match self {
            Mode::Orca => LogConfig::orca(Replication::Async),
            Mode::OrcaSyncRepl => LogConfig::orca(Replication::SyncRepl),
            Mode::Cad => LogConfig::cad_only(),
            Mode::Strong => LogConfig::strong_zk(),
            Mode::Weak => LogConfig::weak_zk(Replication::Async),
            Mode::WeakSyncRepl => LogConfig::weak_zk(Replication::SyncRepl),
            Mode::SyncAll => LogConfig::sync_zk_all(),
        }
    }

    /// The baselines that read anywhere without a check: §7.15 expects non-monotonic reads.
    pub fn is_weak_baseline(self) -> bool {
        matches!(self, Mode::Weak | Mode::WeakSyncRepl | Mode::SyncAll)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        Mode::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
            format!("unknown mode {s:?}; one of {}", names.join(", "))
        })
    }
}

/// The planted bugs of `strata-log` (feature `canaries`) and their CLI names.
pub const LOG_CANARIES: [(&str, strata_log::PlantedBug); 18] = {
    use strata_log::PlantedBug::*;
    [
        ("skip-durability-check", SkipDurabilityCheck),
        ("skip-follower-durability-check", SkipFollowerDurabilityCheck),
        ("serve-outside-active-set", ServeOutsideActiveSet),
        ("lease-anchored-at-receipt", LeaseAnchoredAtReceipt),
        ("no-dedup", NoDedup),
        ("skip-leader-dedup", SkipLeaderDedup),
        ("txn-skip-version-check", TxnSkipVersionCheck),
        ("txn-abort-without-record", TxnAbortWithoutRecord),
        ("txn-expire-ignores-locks", TxnExpireIgnoresLocks),
        ("txn-reads-ignore-locks", TxnReadsIgnoreLocks),
        ("txn-foresight-wrong-value", TxnForesightWrongValue),
        ("txn-decision-foresight-wrong-value", TxnDecisionForesightWrongValue),
        ("kairos-validator-soft-state", KairosValidatorSoftState),
        ("kairos-unstamped-ts-gc", KairosUnstampedTsGc),
        ("kairos-skip-read-prepared-check", KairosSkipReadPreparedCheck),
        ("kairos-skip-stale-check", KairosSkipStaleCheck),
        ("kairos-no-latest-read-update", KairosNoLatestReadUpdate),
        ("kairos-no-timestamp-bump", KairosNoTimestampBump),
    ]
};

/// A planted bug of `strata-log` by CLI name.
pub fn log_canary(name: &str) -> Result<strata_log::PlantedBug, String> {
    LOG_CANARIES.iter().find(|(n, _)| *n == name).map(|(_, b)| *b).ok_or_else(|| {
        let names: Vec<&str> = LOG_CANARIES.iter().map(|(n, _)| *n).collect();
        format!("unknown log canary {name:?}; one of {}", names.join(", "))
    })
}

/// The CLI name of a planted bug of `strata-log`.
pub fn canary_name(b: strata_log::PlantedBug) -> &'static str {
    LOG_CANARIES.iter().find(|(_, x)| *x == b).map_or("?", |(n, _)| n)
}
