//! Planted bugs (DESIGN.md, "every checker has a canary"): each variant breaks one rule of
//! the protocol so that the simulation's checkers ([`crate::sim::check`]) must flag it. Off
//! (`None`) everywhere except the canary tests. Like `strata_log::PlantedBug`.

/// A deliberate bug, named by the rule it breaks and the checker that must catch it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlantedBug {
    /// Algorithm 3 step 2 without the `prepared_write` check of a read key (§5.6): a
    /// transaction that read `k` while a write of `k` is prepared still commits. Caught by the
    /// stale-read oracle (K2, checker (b)).
    SkipReadPreparedCheck,
    /// Algorithm 3 step 2 without the version check of a read key (§5.6): a transaction that
    /// read an overwritten version — a stale cache hit, above all — still commits. Caught by
    /// the stale-read oracle (K2, checker (b)) and the replay (K1).
    SkipStaleCheck,
    /// Algorithm 3 step 5 without `latest_read = max(latest_read, T.commit)`: a later writer
    /// with a smaller timestamp slips under a committed reader. Caught by the replay (K1,
    /// checker (a)).
    NoLatestReadUpdate,
    /// Clients take `T.commit = now()` (no §5.1 bump) **and** validators skip step 3 of
    /// Algorithm 3. Both are needed: step 3 alone aborts every RW transaction whose timestamp
    /// is not above a version it read, so without the bump the validator hides the bug (and
    /// only the abort rate rises, K4). Under skew a client with a slow clock then commits
    /// below a version it read. Caught by the replay (K1, checker (a)).
    NoTimestampBump,
    /// Clients take `T.commit = now()` (no §5.1 bump) but validators keep step 3. Not a bug
    /// that breaks an invariant (§5.1: "an implementation that omits the bump is still
    /// safe, only abort-prone"): the control that shows step 3 alone keeps K1 under skew, at
    /// the price of `TimestampOrder` aborts (K4).
    ClientSkipsTimestampBump,
    /// Clients report `c_freshness = wm_view` (Centiman's `ts_GC ≈ WM`, ignoring cached and
    /// in-flight reads) **and** validators skip step 1 (`TooOld`). Caught by the GC checker
    /// (checker (f): a Commit vote below `ts_GC`, or with pruned history it depended on).
    GcUnsafe,
    /// Clients compute `local_wm` from `now()` alone, ignoring their incomplete RW
    /// transactions (§5.9): `WM` passes commits still in flight, so `fts` promises too much.
    /// Caught by the freshness checker (§7 inv. 6, checker (g)).
    LocalWmIgnoresInFlight,
    /// The client cache serves an entry past its lease end (`lts`), as a cache that forgot
    /// to self-invalidate would. Caught by the self-invalidation checker (§7 inv. 10,
    /// checker (h)); the stale reads it serves are caught by validation, not by it.
    CacheServesPastLease,
    /// Strict mode reports a commit after the `DecisionAck`s without the commit wait (K5
    /// (b)): with clock error within `eps`, a transaction that begins after the report on a
    /// slower clock can still take a smaller timestamp. Caught by the real-time checker
    /// (§7 inv. 11, checker (i)).
    NoCommitWait,
    /// The storage primary records sharers and sends `Invalidate`s (§5.14.2) although the
    /// clients run a lease policy: the server-side state leases exist to avoid. Caught by
    /// the no-server-lease-state checker (§7 inv. 12, checker (j)); nothing else notices,
    /// as an invalidation only drops cache entries early.
    PrimaryTracksSharers,
    /// The simulated network loses COMMIT decisions to one storage primary (acknowledged but
    /// never applied): a harness bug, for the atomicity checker (K3, checker (d)).
    PrimaryLosesCommit,
}
