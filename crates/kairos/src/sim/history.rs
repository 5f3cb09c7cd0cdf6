//! What the simulation records (kairos.md §7, "Test harness"), with the global simulated
//! time: every transaction (reads with versions, `fts` and whether each was a cache hit,
//! writes, timestamps, outcome and decision time), every vote, decision applied, version
//! installed and pruned, and every watermark state; per transaction also when it began and
//! when its outcome was reported to the application (K5); per run the clock error the
//! clients actually had, the cache policy and the primaries' sharer counters (§7 inv. 11,
//! 12). The checkers read only this.

use bytes::Bytes;
use strata_wire::txn::TxnId;
use strata_wire::Instant;

use crate::lease::LeasePolicy;
use crate::primary::SharerStats;
use crate::timestamp::Timestamp;
use crate::validator::{Key, Vote};

/// A point of the global order of simulated events: `step` orders (unique, increasing),
/// `ns` is the global time, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Moment {
    pub step: u64,
    pub ns: u64,
}

/// Where a version lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Site {
    Validator(usize),
    Primary(usize),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TxnKind {
    /// Ordered first among equal commit timestamps (K1).
    ReadWrite,
    ReadOnly,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Committed,
    /// The votes that were not Commit (empty: a primary refused the write set).
    Aborted(Vec<Vote>),
}

/// One read of the read set (reads of the transaction's own writes are not recorded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadRecord {
    pub key: Key,
    pub value: Option<Bytes>,
    pub vts: Timestamp,
    pub fts: Timestamp,
    pub cache_hit: bool,
    /// A cache hit's client clock reading and the entry's lease end (§7 inv. 10).
    pub lease: Option<(Instant, Instant)>,
    pub at: Moment,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnRecord {
    pub id: TxnId,
    pub client: u32,
    pub kind: TxnKind,
    pub reads: Vec<ReadRecord>,
    pub writes: Vec<(Key, Option<Bytes>)>,
    pub commit_ts: Timestamp,
    pub freshness: Option<Timestamp>,
    /// `None` while undecided (a run always decides every transaction).
    pub outcome: Option<Outcome>,
    /// When the coordinator logged the decision.
    pub decided_at: Option<Moment>,
    /// When the transaction began (the application's `begin`).
    pub begun_at: Moment,
    /// When the outcome was reported to the application (§5.5): at the decision by default
    /// and for aborts; in strict mode, a commit after every `DecisionAck` **and** the commit
    /// wait (the client's clock past `T.commit + 2 eps`, K5).
    pub reported_at: Option<Moment>,
}

impl TxnRecord {
    pub fn committed(&self) -> bool {
        self.outcome == Some(Outcome::Committed)
    }
}

/// One `validate` call at a validator (duplicates included).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidationRecord {
    pub validator: usize,
    pub txn: TxnId,
    pub at: Moment,
    pub vote: Vote,
    pub freshness: Option<Timestamp>,
    /// The validator's `ts_GC` when it voted.
    pub ts_gc: Timestamp,
    pub reads: Vec<(Key, Timestamp)>,
    pub writes: Vec<Key>,
}

/// A decision delivered to a participant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecisionApplied {
    pub site: Site,
    pub txn: TxnId,
    pub at: Moment,
}

/// A version installed as a key's latest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Install {
    pub site: Site,
    pub key: Key,
    pub ts: Timestamp,
    pub txn: TxnId,
    pub at: Moment,
}

/// A version dropped from a validator's `versions`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prune {
    pub validator: usize,
    pub key: Key,
    pub version: Timestamp,
    pub ts_gc: Timestamp,
    pub at: Moment,
}

/// A validator's `WM` and `ts_GC` after a report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GcState {
    pub validator: usize,
    pub at: Moment,
    pub wm: Timestamp,
    pub ts_gc: Timestamp,
}

/// The clocks of a run, for §7 inv. 11: every client reading's error against global time
/// (`reading - global`), as the smallest and largest seen, and strict mode's `eps`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Clocks {
    /// `Some(eps_ns)` in strict mode (K5).
    pub strict_eps_ns: Option<u64>,
    pub min_error_ns: i64,
    pub max_error_ns: i64,
}

impl Clocks {
    /// The largest difference between two client clocks at any moment is at most this.
    pub fn spread_ns(&self) -> u64 {
        self.max_error_ns.abs_diff(self.min_error_ns)
    }

    /// Strict mode with the clocks within its bound (spread `<= eps`, as offsets within
    /// `±eps/2` give): §7 inv. 11 must hold.
    pub fn strict_within_eps(&self) -> bool {
        self.strict_eps_ns.is_some_and(|eps| self.spread_ns() <= eps)
    }
}

/// A whole run.
#[derive(Clone, Debug, Default)]
pub struct History {
    /// Owner of each key: `(validator, shard)`.
    pub placement: Vec<(Key, usize, usize)>,
    pub txns: Vec<TxnRecord>,
    pub validations: Vec<ValidationRecord>,
    pub decisions: Vec<DecisionApplied>,
    pub installs: Vec<Install>,
    /// Committed writes a primary skipped because a newer version was already installed.
    pub superseded: Vec<Install>,
    pub prunes: Vec<Prune>,
    pub gc_states: Vec<GcState>,
    /// Prepared writes still held when the run ended (liveness of §7 inv. 8).
    pub leftover_prepared: Vec<(Site, TxnId)>,
    pub clocks: Clocks,
    /// The clients' cache policy (`None`: no cache).
    pub cache_policy: Option<LeasePolicy>,
    /// Every primary's sharer counters at the end (§7 inv. 12), by shard.
    pub sharers: Vec<SharerStats>,
}

impl History {
    /// `(validator, shard)` of a key.
    pub fn owners(&self, key: &[u8]) -> Option<(usize, usize)> {
        self.placement.iter().find(|(k, _, _)| &k[..] == key).map(|(_, v, s)| (*v, *s))
    }
}
