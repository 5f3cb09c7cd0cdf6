//! Configuration of one log replica: durability mode, read policy, timers (ORCA §1.3, §3.4).

use std::time::Duration;

use strata_wire::NodeId;
use thiserror::Error;

/// The default of [`LogConfig::txn_read_hold`]: a transaction's reads and its prepare's
/// arrival, a few round trips, while its other reads may wait on other keys' holds. With
/// 2 ms, a loaded 1-shard table saw holds lapse (0.1-0.3 aborted attempts per commit on a hot
/// key); with 5 ms, none (docs/benchmarks.md, "Reads for update").
pub const TXN_READ_HOLD: Duration = Duration::from_millis(5);

/// How writes replicate before they are acknowledged, inside CAD (ORCA §1.3 `ReplicationMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replication {
    /// The leader acknowledges once the entry is in its memory and applied.
    Async,
    /// The leader acknowledges once a majority (itself included) holds the entry in memory.
    SyncRepl,
}

/// When a write is acknowledged and whether reads check durability (ORCA §1.3, §5.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DurabilityMode {
    /// Synchronous durability: acknowledged once a majority has fsynced it (group commit) and
    /// the leader applied it. Every applied entry is durable, so reads need no check.
    Sync,
    /// The paper's first baseline (ZooKeeper with `forceSync` off): replicate synchronously to a
    /// majority's memory, persist lazily. No durability check.
    SyncRepl,
    /// The paper's second baseline: the leader applies and acknowledges at once, replicates and
    /// persists in the background. No durability check.
    Async,
    /// Consistency-aware durability: the given write path, plus the check `u <= DI` on every
    /// read, made true on demand by MakeDurable (§5.5).
    Cad(Replication),
}

impl DurabilityMode {
    pub(crate) fn write_path(self) -> WritePath {
        match self {
            DurabilityMode::Sync => WritePath::Sync,
            DurabilityMode::SyncRepl | DurabilityMode::Cad(Replication::SyncRepl) => {
                WritePath::SyncRepl
            }
            DurabilityMode::Async | DurabilityMode::Cad(Replication::Async) => WritePath::Async,
        }
    }

    pub fn checks_durability(self) -> bool {
        matches!(self, DurabilityMode::Cad(_))
    }
}

/// The three write paths of §5.1 step 5/7.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WritePath {
    Async,
    SyncRepl,
    Sync,
}

/// Which nodes serve reads (ORCA §1.3, §5.11).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadPolicy {
    /// Only the leader, under its leader lease.
    Leader,
    /// ORCA: the leader and every follower holding an active-set lease (R2).
    ActiveSet,
    /// Weak: any node, from its applied state, no check (weak-ZK, sync-ZK-all).
    Any,
}

/// Bugs the canary tests plant on purpose, to prove the scenario checks can fail. They take
/// effect only with the `canaries` feature (which adds `LogConfig::planted_bug`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlantedBug {
    /// A serving follower answers reads without the durability check `u <= DI_F` (§5.5.2 step 4).
    SkipFollowerDurabilityCheck,
    /// Every node (leader included) answers reads without the durability check `u <= DI`.
    SkipDurabilityCheck,
    /// A follower serves reads although it holds no valid active-set lease (breaks R2).
    ServeOutsideActiveSet,
    /// A follower's lease runs from the *receipt* of a grant (`now + mt`) instead of from its own
    /// echoed timestamp: the variant §9.1 forbids.
    LeaseAnchoredAtReceipt,
    /// No RIFL duplicate check: the leader appends every retry again and applying executes
    /// every entry (breaks exactly-once, rifl.md §7 inv. 1 and 2).
    NoDedup,
    /// The leader appends every retry again, but applying still skips duplicates: not a bug
    /// that breaks an invariant, a stress of the apply-time filter (every replica must still
    /// execute each RPC once, and every `Ok` name the executing entry).
    SkipLeaderDedup,
    /// Transactions (rifl.md §5.8.2): a prepare ignores the version the transaction read
    /// (lost updates: a dependency cycle).
    TxnSkipVersionCheck,
    /// §5.8.4 RA2: an abort request votes `Abort` without recording it, so a late prepare of
    /// the same object still votes `Prepared` (the client and recovery decide differently).
    TxnAbortWithoutRecord,
    /// R-D14: an `Expire` collects a client that still holds locks (its votes vanish).
    TxnExpireIgnoresLocks,
    /// §5.9 (R-D18): plain reads ignore locks (a read after a commit returned can miss it).
    TxnReadsIgnoreLocks,
    /// `foresight.rs`: a transaction's read of a key a pending prepare writes is answered
    /// with another value than the one written, at the right version, so the reader's
    /// prepare validates a read nobody wrote (serializability, conservation).
    TxnForesightWrongValue,
    /// `foresight.rs` for decisions: a transaction's read of a key a pending `Commit`
    /// decision writes is answered with another value than the locked one, at the right
    /// version (serializability, conservation).
    TxnDecisionForesightWrongValue,
    /// kairos.md §6.4 without its rebuild: a new leader starts from an empty Kairos
    /// validator, as if the validator's state were soft (a validator that forgot a committed
    /// write lets a stale read commit: breaks K2).
    KairosValidatorSoftState,
    /// kairos.md §5.9: the leader folds reports into `ts_GC` but does not stamp it into the
    /// prepares it appends, so the replicated validator's `ts_GC` stays `ZERO` and `TooOld`
    /// never fires.
    KairosUnstampedTsGc,
    /// kairos.md §5.6 step 2 without the `prepared_write` check of a read key (the embedded
    /// validator's `strata_kairos::PlantedBug::SkipReadPreparedCheck`, and the log's own
    /// refusal of a prepare touching a locked key, for read ops): a transaction that read a
    /// key while another's write of it is prepared still commits (breaks K2).
    KairosSkipReadPreparedCheck,
    /// kairos.md §5.6 step 2 without the version check of a read key (the embedded
    /// validator's `strata_kairos::PlantedBug::SkipStaleCheck`): a transaction that read an
    /// overwritten version, such as a stale cache hit, still commits (breaks K2).
    KairosSkipStaleCheck,
    /// kairos.md §5.6 step 5 without `latest_read = max(latest_read, T.commit)`
    /// (`strata_kairos::PlantedBug::NoLatestReadUpdate`): a later writer with a smaller
    /// timestamp slips under a committed reader (breaks K1).
    KairosNoLatestReadUpdate,
    /// kairos.md §5.6 step 3 skipped (`strata_kairos::PlantedBug::NoTimestampBump`). The
    /// other half of that bug, clients taking `T.commit = now()` without §5.1's bump, is the
    /// client's: the seeded transaction harness's clients play it when this is planted.
    /// Under skew a client with a slow clock then commits below a version it read (K1).
    KairosNoTimestampBump,
}

/// Configuration of one log replica. Every replica of a shard group must use the same values.
#[derive(Clone, Debug)]
pub struct LogConfig {
    pub durability: DurabilityMode,
    pub reads: ReadPolicy,
    /// Desired active-set size, leader included (§3.4 `as_target`); `None` = `n - 1`, at least a
    /// majority.
    pub as_target: Option<usize>,
    /// `hb`: heartbeat round period (§3.4, §9.1: 50 ms).
    pub heartbeat: Duration,
    /// `mt`: a follower's lease lasts `mt` from its own echoed ack timestamp (§5.7.3).
    pub mark_out_timeout: Duration,
    /// `rt`: the leader removes an unconfirmed revoked member `rt` after its last grant (§5.7.4).
    pub removal_timeout: Duration,
    /// `ST`: leader lease length from the send time of a majority-acked heartbeat round (§5.8).
    pub leader_lease: Duration,
    /// `ET_min`: election timeouts are drawn from `[ET_min, 2 ET_min)`; voters ignore vote
    /// requests for `ET_min` after leader contact (§5.9 rule 0).
    pub election_timeout_min: Duration,
    /// Background fsync period (§5.4, §9.8).
    pub flush_interval: Duration,
    /// A member that alone delays a durability round this long is revoked (§9.5); `None` never.
    pub slow_threshold: Option<Duration>,
    /// How long a follower waits for its applied index to reach a session token (§2.3).
    pub catchup_wait: Duration,
    pub read_timeout: Duration,
    /// How long a write that waits (SyncRepl, Sync, immediate durability) may wait before the
    /// client is told `Timeout` (outcome unknown; retry with the same `seq`).
    pub write_timeout: Duration,
    /// How long a transaction's read for update holds back the key's other reads for update
    /// at the leader, waiting for its prepare (`reservations.rs`); zero: not at all.
    pub txn_read_hold: Duration,
    /// Whether plain writes note their keys in the leader's foresight (`foresight.rs`):
    /// needed where transactions read with a `ReadIntent` (RIFL tables), a cost elsewhere.
    pub foresee_writes: bool,
    /// Replication batch bounds (§5.3: 256 entries or 1 MiB of encoded entries).
    pub max_batch_entries: usize,
    pub max_batch_bytes: usize,
    /// The peer frame limit (the node's `max_frame_bytes`): an `AppendEntries` never exceeds
    /// it, whatever `max_batch_bytes` says, and a write whose entry could not fit in one is
    /// refused (`WriteError::Invalid`), so every accepted write can replicate
    /// (docs/design.md, "Limits and bounds").
    pub max_message_bytes: usize,
    /// Planted bug for canary tests; `None` in every real deployment.
    #[cfg(feature = "canaries")]
    pub planted_bug: Option<PlantedBug>,
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("the replica set must contain this node ({0})")]
    SelfNotReplica(NodeId),
    #[error("node id {0} appears twice in the replica set")]
    DuplicateReplica(NodeId),
    #[error("active-set reads need the durability check: use DurabilityMode::Cad")]
    ActiveSetNeedsCad,
    #[error("the durability check needs leader or active-set reads (weak reads skip it)")]
    CadWithWeakReads,
    #[error("as_target {target} must be between the majority {majority} and n = {n}")]
    AsTargetOutOfRange { target: usize, majority: usize, n: usize },
    #[error("{0} must be positive")]
    ZeroDuration(&'static str),
    #[error("timer constraint violated: {0}")]
    Timing(&'static str),
}

impl LogConfig {
    /// ORCA (§1.3 first row): CAD with active-set reads; §3.4 default timers.
    pub fn orca(replication: Replication) -> LogConfig {
        LogConfig::with(DurabilityMode::Cad(replication), ReadPolicy::ActiveSet)
    }

    /// CAD durability layer alone: leader-only reads, DI = majority-persisted (§3.2).
    pub fn cad_only() -> LogConfig {
        LogConfig::with(DurabilityMode::Cad(Replication::Async), ReadPolicy::Leader)
    }

    /// weak-ZK: asynchronous durability, reads at every node without a check.
    pub fn weak_zk(replication: Replication) -> LogConfig {
        let durability = match replication {
            Replication::Async => DurabilityMode::Async,
            Replication::SyncRepl => DurabilityMode::SyncRepl,
        };
        LogConfig::with(durability, ReadPolicy::Any)
    }

    /// Asynchronous durability with leader-only reads (the paper's Table 2 async baseline).
    pub fn async_leader() -> LogConfig {
        LogConfig::with(DurabilityMode::Async, ReadPolicy::Leader)
    }

    /// strong-ZK: synchronous durability, leader-only reads.
    pub fn strong_zk() -> LogConfig {
        LogConfig::with(DurabilityMode::Sync, ReadPolicy::Leader)
    }

    /// sync-ZK-all: synchronous durability, reads at every node without a check.
    pub fn sync_zk_all() -> LogConfig {
        LogConfig::with(DurabilityMode::Sync, ReadPolicy::Any)
    }

    pub fn with(durability: DurabilityMode, reads: ReadPolicy) -> LogConfig {
        LogConfig {
            durability,
            reads,
            as_target: None,
            // §3.4 says 50 ms; a lease renewed by heartbeats must outlive two periods (below).
            heartbeat: Duration::from_millis(30),
            mark_out_timeout: Duration::from_millis(100),
            removal_timeout: Duration::from_millis(500),
            leader_lease: Duration::from_millis(300),
            election_timeout_min: Duration::from_millis(1000),
            flush_interval: Duration::from_millis(10),
            slow_threshold: Some(Duration::from_millis(50)),
            catchup_wait: Duration::from_millis(20),
            read_timeout: Duration::from_secs(2),
            write_timeout: Duration::from_secs(2),
            txn_read_hold: TXN_READ_HOLD,
            foresee_writes: true,
            max_batch_entries: 256,
            max_batch_bytes: 1 << 20,
            max_message_bytes: strata_wire::DEFAULT_MAX_FRAME_BYTES,
            #[cfg(feature = "canaries")]
            planted_bug: None,
        }
    }

    /// The geo preset of §3.4 (WAN RTT about 35 ms): `hb` 25 ms, `mt` 150 ms, `rt` 750 ms.
    pub fn geo(mut self) -> LogConfig {
        self.heartbeat = Duration::from_millis(25);
        self.mark_out_timeout = Duration::from_millis(150);
        self.removal_timeout = Duration::from_millis(750);
        self
    }

    /// Checks the mode combination and the timer constraints of §3.4 and §5.8 for `n` replicas.
    pub fn validate(&self, n: usize) -> Result<(), ConfigError> {
        match (self.reads, self.durability.checks_durability()) {
            (ReadPolicy::ActiveSet, false) => return Err(ConfigError::ActiveSetNeedsCad),
            (ReadPolicy::Any, true) => return Err(ConfigError::CadWithWeakReads),
            _ => {}
        }
        let target = self.active_set_target(n);
        if target < majority(n) || target > n {
            return Err(ConfigError::AsTargetOutOfRange { target, majority: majority(n), n });
        }
        for (d, name) in [
            (self.heartbeat, "heartbeat"),
            (self.mark_out_timeout, "mark_out_timeout"),
            (self.removal_timeout, "removal_timeout"),
            (self.leader_lease, "leader_lease"),
            (self.election_timeout_min, "election_timeout_min"),
            (self.flush_interval, "flush_interval"),
            (self.read_timeout, "read_timeout"),
            (self.write_timeout, "write_timeout"),
        ] {
            if d.is_zero() {
                return Err(ConfigError::ZeroDuration(name));
            }
        }
        if self.max_batch_entries == 0 {
            return Err(ConfigError::Timing("max_batch_entries must be positive"));
        }
        if self.max_message_bytes < strata_wire::FRAME_SLACK_BYTES {
            return Err(ConfigError::Timing(
                "max_message_bytes must leave room for a key and the message headers",
            ));
        }
        // §3.4 asks `mt > hb + RTT`. That is not enough: a grant echoes the follower's
        // timestamp from its newest ack the leader has, which answered the *previous*
        // heartbeat, so the lease it gives ends `mt` after a moment about one period before the
        // grant was sent, and the next grant arrives one period later still. With `mt = 2 hb`
        // every lease of an idle cluster lapsed whenever one delay exceeded the one before (the
        // simulator: 296 mark-outs in 10 s of a healthy 5-node cluster). So `mt > 2 hb` is
        // required, and `hb` defaults to 30 ms (docs/design.md, departures).
        if self.mark_out_timeout <= self.heartbeat * 2 {
            return Err(ConfigError::Timing("mt must exceed 2 hb"));
        }
        // §5.7.4 (ii): the leader may drop a member only after its lease expired for sure.
        if !with_drift_margin(self.removal_timeout, self.mark_out_timeout) {
            return Err(ConfigError::Timing("rt (1 - rho) must exceed mt (1 + rho)"));
        }
        // §5.8: no new leader before the old one stopped serving and its grants expired.
        if !with_drift_margin(self.election_timeout_min, self.leader_lease + self.mark_out_timeout)
        {
            return Err(ConfigError::Timing("ET_min (1 - rho) must exceed (ST + mt)(1 + rho)"));
        }
        Ok(())
    }

    /// The largest encoded entry one `AppendEntries` can carry (`max_message_bytes` less the
    /// frame, shard envelope and message headers).
    pub fn max_entry_bytes(&self) -> usize {
        self.max_message_bytes.saturating_sub(strata_wire::log::APPEND_ENTRIES_OVERHEAD_BYTES)
    }

    pub(crate) fn active_set_target(&self, n: usize) -> usize {
        self.as_target.unwrap_or_else(|| n.saturating_sub(1).max(majority(n)))
    }

    /// Whether `bug` is planted (always false without the `canaries` feature).
    /// How applying entries behaves (the correct rules, unless a canary plants a bug).
    pub(crate) fn apply_rules(&self) -> crate::state::Rules {
        crate::state::Rules {
            dedup: !self.planted(PlantedBug::NoDedup),
            check_versions: !self.planted(PlantedBug::TxnSkipVersionCheck),
            abort_records: !self.planted(PlantedBug::TxnAbortWithoutRecord),
            protect_holders: !self.planted(PlantedBug::TxnExpireIgnoresLocks),
            kairos_bug: self.kairos_bug(),
        }
    }

    /// The embedded Kairos validator's planted bug, if one of its canaries is planted.
    fn kairos_bug(&self) -> Option<strata_kairos::PlantedBug> {
        use strata_kairos::PlantedBug as K;
        [
            (PlantedBug::KairosSkipReadPreparedCheck, K::SkipReadPreparedCheck),
            (PlantedBug::KairosSkipStaleCheck, K::SkipStaleCheck),
            (PlantedBug::KairosNoLatestReadUpdate, K::NoLatestReadUpdate),
            (PlantedBug::KairosNoTimestampBump, K::NoTimestampBump),
        ]
        .into_iter()
        .find(|(bug, _)| self.planted(*bug))
        .map(|(_, k)| k)
    }

    pub(crate) fn planted(&self, bug: PlantedBug) -> bool {
        #[cfg(feature = "canaries")]
        return self.planted_bug == Some(bug);
        #[cfg(not(feature = "canaries"))]
        {
            let _ = bug;
            false
        }
    }
}

/// `floor(n/2) + 1` (ORCA §0).
pub(crate) fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// `long (1 - rho) > short (1 + rho) + slack` with the paper's drift bound `rho = 3e-5`, doubled,
/// and a 1 ms slack (§3.4).
fn with_drift_margin(long: Duration, short: Duration) -> bool {
    const RHO: f64 = 6e-5;
    long.as_secs_f64() * (1.0 - RHO) > short.as_secs_f64() * (1.0 + RHO) + 0.001
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_validate_and_bad_combinations_are_refused() {
        for cfg in [
            LogConfig::orca(Replication::Async),
            LogConfig::orca(Replication::SyncRepl),
            LogConfig::cad_only(),
            LogConfig::weak_zk(Replication::Async),
            LogConfig::strong_zk(),
            LogConfig::sync_zk_all(),
            LogConfig::async_leader(),
            LogConfig::orca(Replication::Async).geo(),
        ] {
            assert_eq!(cfg.validate(5), Ok(()), "{cfg:?}");
        }
        assert_eq!(
            LogConfig::with(DurabilityMode::Async, ReadPolicy::ActiveSet).validate(5),
            Err(ConfigError::ActiveSetNeedsCad)
        );
        let mut c = LogConfig::orca(Replication::Async);
        c.as_target = Some(2);
        assert!(matches!(c.validate(5), Err(ConfigError::AsTargetOutOfRange { .. })));
        let mut c = LogConfig::orca(Replication::Async);
        c.removal_timeout = c.mark_out_timeout;
        assert!(matches!(c.validate(5), Err(ConfigError::Timing(_))));
        let mut c = LogConfig::orca(Replication::Async);
        c.election_timeout_min = Duration::from_millis(400);
        assert!(matches!(c.validate(5), Err(ConfigError::Timing(_))));
        assert_eq!(LogConfig::orca(Replication::Async).active_set_target(5), 4);
        assert_eq!(LogConfig::orca(Replication::Async).active_set_target(3), 2);
    }
}
