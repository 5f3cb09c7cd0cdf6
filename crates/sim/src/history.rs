//! What a run records, for the checkers to judge from outside (Kite §7, preamble): every client
//! operation with its session position, times and witnesses (§2.5), every version creation
//! (the §2.5 recorder), every change of a replica's state, the driver's anomalies, and the
//! final state of the live replicas.
//!
//! Everything here is plain data with `Hash`, so a run's whole history hashes to one number
//! (the determinism test compares it across runs of one seed).

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use bytes::Bytes;
use strata_wire::{Carstamp, Instant, NodeId, SessionId};

/// A key's value: `None` is the absent value (never written, or deleted — `docs/design.md`).
pub type Value = Option<Bytes>;

/// What an operation asks for. The enum grows with the protocols the simulator drives
/// (ABD acquires/releases, Paxos RMWs); checkers reason through [`OpKind::written_value`] and
/// [`OpKind::reads`], so a new kind only has to say whether it reads and what it writes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// Relaxed read (Kite §5.2).
    Read,
    /// Relaxed write (Kite §5.3).
    Write { value: Bytes },
    /// Relaxed delete: a relaxed write of the absent value, a tombstone (`docs/design.md`).
    Delete,
}

impl OpKind {
    pub fn name(&self) -> &'static str {
        match self {
            OpKind::Read => "read",
            OpKind::Write { .. } => "write",
            OpKind::Delete => "delete",
        }
    }

    /// Whether the operation returns a version it observed (`obs` in Kite §7).
    pub fn reads(&self) -> bool {
        matches!(self, OpKind::Read)
    }

    /// The value the operation installs if it creates a version (`wr` in Kite §7).
    pub fn written_value(&self) -> Option<Value> {
        match self {
            OpKind::Read => None,
            OpKind::Write { value } => Some(Some(value.clone())),
            OpKind::Delete => Some(None),
        }
    }
}

/// The test-hook witness of a completed operation (Kite §2.5).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Witness {
    /// The value and version returned by a read-type operation.
    pub observed: Option<(Value, Carstamp)>,
    /// The version created by a write-type operation.
    pub written: Option<Carstamp>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Never answered: its node crashed, or the run ended first (Kite §7: kept as incomplete).
    Pending,
    /// `order` numbers every completion of the run, so reply order can be checked (§2.3).
    Done { at: Instant, order: u64, witness: Witness },
    /// The node answered with an error (the workload only sends valid requests).
    Failed { at: Instant, order: u64, error: String },
}

/// One client operation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Op {
    pub session: SessionId,
    /// Position in session order (`->so`), from 0.
    pub pos: u64,
    pub node: NodeId,
    pub kind: OpKind,
    pub key: Bytes,
    /// Global virtual time of invocation.
    pub invoke: Instant,
    pub outcome: Outcome,
}

impl Op {
    pub fn witness(&self) -> Option<&Witness> {
        match &self.outcome {
            Outcome::Done { witness, .. } => Some(witness),
            _ => None,
        }
    }

    pub fn completed_at(&self) -> Option<Instant> {
        match &self.outcome {
            Outcome::Done { at, .. } | Outcome::Failed { at, .. } => Some(*at),
            Outcome::Pending => None,
        }
    }
}

/// A version creation reported by a core (`RcEvent::VersionCreated`, Kite §2.5).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Creation {
    pub at: Instant,
    pub node: NodeId,
    pub session: SessionId,
    pub key: Bytes,
    pub cs: Carstamp,
    pub value: Value,
}

/// A replica's `(value, cs)` for a key changed during one input (sampled after every input).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReplicaChange {
    pub at: Instant,
    pub node: NodeId,
    pub key: Bytes,
    pub value: Value,
    pub cs: Carstamp,
}

/// Something the driver saw that is wrong whatever the history says: a core's
/// `check_invariants` or input handler panicked, a reply nobody asked for, a stuck timer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Anomaly {
    pub at: Instant,
    pub node: Option<NodeId>,
    pub what: String,
}

/// The replicas at the end of the run.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct FinalState {
    /// Nodes alive at the end (paused nodes were resumed by the liveness phase).
    pub live: Vec<NodeId>,
    pub crashed: Vec<NodeId>,
    /// Every key each live replica holds.
    pub replicas: BTreeMap<NodeId, BTreeMap<Bytes, (Value, Carstamp)>>,
    /// Writes each live replica still re-sends because some peer has not acknowledged them
    /// (Kite §5.1.7 `PendingWrite`).
    pub pending_writes: BTreeMap<NodeId, u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct History {
    pub ops: Vec<Op>,
    pub creations: Vec<Creation>,
    pub replica_changes: Vec<ReplicaChange>,
    /// Every session that was opened, with its node.
    pub sessions: Vec<SessionId>,
    pub anomalies: Vec<Anomaly>,
    /// Start of the liveness phase: faults healed, loss stopped (Kite §7 prop 9, `T_heal`).
    pub heal_at: Option<Instant>,
    pub final_state: Option<FinalState>,
}

impl History {
    /// A stable 64-bit digest of the whole history (FNV-1a over the derived `Hash`), equal for
    /// two runs of one seed on one platform.
    pub fn digest(&self) -> u64 {
        digest_of(self)
    }
}

/// A stable 64-bit digest of anything hashable (FNV-1a).
pub fn digest_of<T: Hash + ?Sized>(t: &T) -> u64 {
    let mut h = Fnv64::default();
    t.hash(&mut h);
    h.finish()
}

/// FNV-1a: unlike `DefaultHasher`, its output is specified, so digests stay comparable across
/// toolchains.
struct Fnv64(u64);

impl Default for Fnv64 {
    fn default() -> Self {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv64 {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Formats a virtual instant or duration in nanoseconds as milliseconds, for reports.
pub fn fmt_ms(ns: u64) -> String {
    format!("{}.{:03}ms", ns / 1_000_000, (ns / 1_000) % 1_000)
}

/// `[value]` or `absent`, for reports.
pub fn fmt_value(v: &Value) -> String {
    match v {
        Some(b) => format!("{:?}", String::from_utf8_lossy(b)),
        None => "absent".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_is_stable_and_sensitive() {
        let mut h = History::default();
        let a = h.digest();
        assert_eq!(a, History::default().digest());
        h.heal_at = Some(Instant(1));
        assert_ne!(a, h.digest());
    }

    #[test]
    fn kinds_say_what_they_read_and_write() {
        assert!(OpKind::Read.reads() && OpKind::Read.written_value().is_none());
        assert_eq!(OpKind::Delete.written_value(), Some(None));
        let w = OpKind::Write { value: Bytes::from_static(b"v") };
        assert_eq!(w.written_value(), Some(Some(Bytes::from_static(b"v"))));
        assert_eq!(fmt_ms(1_234_567), "1.234ms");
    }
}
