//! Planted bugs (`PlantedBug`): the simulator turns one on with `RcConfig::planted_bug` (the
//! `canaries` feature) to prove that its checkers can fail.

/// Bugs the simulator plants on purpose, to prove its checkers can fail (canaries); the
/// simulator's `--canary NAME` takes [`PlantedBug::name`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlantedBug {
    /// A replica applies a received write even when its version is older than the one it
    /// holds (last arrival wins): breaks G1, per-key session order and convergence.
    ApplyOlderWrites,
    /// Kite issue #3 canary (a): a barrier that timed out proceeds without publishing its
    /// DM-set, so a delinquent replica never learns it missed writes.
    SkipSlowRelease,
    /// Canary (b): Paxos decides on the proposer's own accept alone, without a quorum.
    AcceptWithoutQuorum,
    /// Canary (c): acquires register no obligation (the K-F2 fix turned off).
    NoAcquireObligation,
    /// Kite §7 inv. 14 canary: a timed-out barrier publishes its DM-set without first waiting
    /// for every prior write to reach a quorum (the K-F1 fix turned off).
    SlowReleaseBeforeQuorum,
    /// Kite §7 inv. 15 canary: a `RESET_BIT` from `m` sets `dbit[m]` back to `Up` whatever it
    /// holds — no check that its acquire is a recorded owner (the atomic reset of §5.7.5 off).
    ResetWithoutOwner,
    /// Kite §7 inv. 16 canary: `acquire_finish` consumes `self_delinquent` without counting it
    /// as a detection, so the flag is cleared with no epoch increment.
    ClearSelfDelinquentWithoutBump,
    /// Kite §7 inv. 17 canary: a received `COMMIT` advances the key's last committed slot
    /// without registering its RMW (§5.1.2's "any update of `lc` also registers `lc_rmw`" off).
    CommitWithoutRegistering,
    /// RIFL canary (rifl.md §7 inv. 1): a retry never consults the key's completion records,
    /// so a retried request whose first attempt took effect executes again.
    IgnoreCompletionRecords,
}

impl PlantedBug {
    pub const ALL: [PlantedBug; 9] = [
        PlantedBug::ApplyOlderWrites,
        PlantedBug::SkipSlowRelease,
        PlantedBug::AcceptWithoutQuorum,
        PlantedBug::NoAcquireObligation,
        PlantedBug::SlowReleaseBeforeQuorum,
        PlantedBug::ResetWithoutOwner,
        PlantedBug::ClearSelfDelinquentWithoutBump,
        PlantedBug::CommitWithoutRegistering,
        PlantedBug::IgnoreCompletionRecords,
    ];

    /// The bug's name on the simulator's command line.
    pub fn name(self) -> &'static str {
        match self {
            PlantedBug::ApplyOlderWrites => "apply-older-writes",
            PlantedBug::SkipSlowRelease => "skip-slow-release",
            PlantedBug::AcceptWithoutQuorum => "accept-without-quorum",
            PlantedBug::NoAcquireObligation => "no-acquire-obligation",
            PlantedBug::SlowReleaseBeforeQuorum => "slow-release-before-quorum",
            PlantedBug::ResetWithoutOwner => "reset-without-owner",
            PlantedBug::ClearSelfDelinquentWithoutBump => "clear-self-delinquent-without-bump",
            PlantedBug::CommitWithoutRegistering => "commit-without-registering",
            PlantedBug::IgnoreCompletionRecords => "ignore-completion-records",
        }
    }
}

impl std::fmt::Display for PlantedBug {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for PlantedBug {
    type Err = String;
    fn from_str(s: &str) -> Result<PlantedBug, String> {
        PlantedBug::ALL.into_iter().find(|c| c.name() == s).ok_or_else(|| {
            let names: Vec<_> = PlantedBug::ALL.iter().map(|c| c.name()).collect();
            format!("unknown canary {s:?} (known: {})", names.join(", "))
        })
    }
}
