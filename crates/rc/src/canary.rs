//! Planted bugs (`PlantedBug`): the simulator turns one on with `RcConfig::planted_bug` (the
//! `canaries` feature) to prove that its checkers can fail.

/// Bugs the simulator plants on purpose, to prove its checkers can fail (canaries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
