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
pub use strata_rc::{BarrierPath, DbitChange, SelfDelinquentChange, ValueRound};
use strata_wire::{
    AcquireId, Ballot, Carstamp, Instant, Llc, NodeId, Rifl, RmwId, RpcId, SessionId,
};

/// A key's value: `None` is the absent value (never written, or deleted — `docs/design.md`).
pub type Value = Option<Bytes>;

/// What an operation asks for (Kite §2.2, with the project's byte keys and absent values).
/// Checkers reason through [`OpKind::reads`], [`OpKind::may_write`], [`Op::class`] and
/// [`Op::expected_written`], so a new kind only has to say whether it reads, what it writes and
/// which RC class it belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// Relaxed read (Kite §5.2).
    Read,
    /// Relaxed write (Kite §5.3).
    Write { value: Bytes },
    /// Relaxed delete: a relaxed write of the absent value, a tombstone (`docs/design.md`).
    Delete,
    /// Release-write (Kite §5.4, multi-writer ABD).
    Release { value: Bytes },
    /// Acquire-read (Kite §5.5).
    Acquire,
    /// Fetch-and-add (Kite §2.2): returns the old value; absent reads as 0 (`docs/design.md`).
    Faa { delta: u64 },
    /// Compare-and-swap (Kite §2.2); `weak` may fail locally, and then is a relaxed read.
    Cas { expected: Value, new: Bytes, weak: bool },
}

/// The RC class of an operation as it executed (Kite §0 "sync op", §1.2 `ppo`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpClass {
    /// Relaxed read or write, or a weak CAS that failed locally.
    Relaxed,
    Release,
    Acquire,
    Rmw,
}

impl OpClass {
    /// Releases, acquires and RMWs (Kite §0).
    pub fn is_sync(self) -> bool {
        self != OpClass::Relaxed
    }
}

impl OpKind {
    pub fn name(&self) -> &'static str {
        match self {
            OpKind::Read => "read",
            OpKind::Write { .. } => "write",
            OpKind::Delete => "delete",
            OpKind::Release { .. } => "release",
            OpKind::Acquire => "acquire",
            OpKind::Faa { .. } => "faa",
            OpKind::Cas { weak: false, .. } => "cas",
            OpKind::Cas { weak: true, .. } => "weak-cas",
        }
    }

    /// Whether the operation returns a version it observed (`obs` in Kite §7).
    pub fn reads(&self) -> bool {
        matches!(self, OpKind::Read | OpKind::Acquire | OpKind::Faa { .. } | OpKind::Cas { .. })
    }

    /// Whether the operation may create a version (`wr` in Kite §7). A weak CAS that fails
    /// locally does not (Kite §2.2).
    pub fn may_write(&self) -> bool {
        !matches!(self, OpKind::Read | OpKind::Acquire)
    }

    pub fn is_rmw(&self) -> bool {
        matches!(self, OpKind::Faa { .. } | OpKind::Cas { .. })
    }

    /// The value a plain write, delete or release installs; `None` for other kinds.
    pub fn written_value(&self) -> Option<Value> {
        match self {
            OpKind::Write { value } | OpKind::Release { value } => Some(Some(value.clone())),
            OpKind::Delete => Some(None),
            _ => None,
        }
    }

    /// `f(op, old)` of an RMW (Kite §2.2, §5.6): the value it installs over `old`, and whether
    /// a CAS swapped. A failed CAS installs the old value again. `None` for non-RMW kinds.
    pub fn rmw_apply(&self, old: &Value) -> Option<(Value, bool)> {
        match self {
            OpKind::Faa { delta } => match strata_wire::counter::add(old.as_deref(), *delta) {
                Ok(n) => Some((Some(strata_wire::counter::encode(n)), false)),
                Err(_) => Some((old.clone(), false)),
            },
            OpKind::Cas { expected, new, .. } => {
                if old == expected {
                    Some((Some(new.clone()), true))
                } else {
                    Some((old.clone(), false))
                }
            }
            _ => None,
        }
    }
}

/// A counter's value: decimal text, absent = 0 (`strata_wire::counter`, a departure from
/// Kite's K-D9 in `docs/design.md`). Counter keys are written only by FAAs, so anything else
/// is a broken replica: it reads as `u64::MAX`, which no checker's expectation matches.
pub fn value_as_u64(v: &Value) -> u64 {
    strata_wire::counter::parse(v.as_deref()).unwrap_or(u64::MAX)
}

/// The test-hook witness of a completed operation (Kite §2.5).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Witness {
    /// The value and version returned by a read-type operation.
    pub observed: Option<(Value, Carstamp)>,
    /// The version created by a write-type operation.
    pub written: Option<Carstamp>,
    /// A CAS swapped (Kite §2.2, `Response::Rmw::swapped`); false for every other kind.
    pub swapped: bool,
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
    /// `session` and `pos` are those of an earlier attempt, where the operation took effect
    /// (its reply there was lost); it was answered in a later session, at another position,
    /// so its completion order says nothing about this session's reply order.
    pub relocated: bool,
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

    /// The RC class the operation executed as: a weak CAS that completed without creating a
    /// version failed locally and is a relaxed read (Kite §2.2, §1.2 `ppo`); an incomplete
    /// weak CAS counts as an RMW (it can only have created a version by running Paxos).
    pub fn class(&self) -> OpClass {
        match &self.kind {
            OpKind::Read | OpKind::Write { .. } | OpKind::Delete => OpClass::Relaxed,
            OpKind::Release { .. } => OpClass::Release,
            OpKind::Acquire => OpClass::Acquire,
            OpKind::Faa { .. } | OpKind::Cas { weak: false, .. } => OpClass::Rmw,
            OpKind::Cas { weak: true, .. } => match self.witness() {
                Some(w) if w.written.is_none() => OpClass::Relaxed,
                _ => OpClass::Rmw,
            },
        }
    }

    /// The value the operation's version must hold, if it completed and created one: the
    /// written value of a plain write or release, `f(op, value(obs))` of an RMW.
    pub fn expected_written(&self) -> Option<Value> {
        if let Some(v) = self.kind.written_value() {
            return Some(v);
        }
        let (value, _) = self.witness()?.observed.as_ref()?;
        self.kind.rmw_apply(value).map(|(v, _)| v)
    }
}

/// One send of an operation (rifl.md §7 preamble: "every response instance"). An operation is
/// sent once, and again — with the same RIFL rpc id — in a new session when its connection
/// breaks (the node crashed, or a reply was lost) or after an `InProgress` answer (rifl.md
/// §5.1). The [`Op`] stays one operation: invoked at its first send, completed by the reply
/// its client received last; its `session`, `pos` and `node` are those of its latest send.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Attempt {
    /// Index in `History::ops`.
    pub op: usize,
    /// The envelope it carried (mutating operations only).
    pub rifl: Option<Rifl>,
    pub session: SessionId,
    /// Position in that session's order.
    pub pos: u64,
    pub node: NodeId,
    pub sent: Instant,
    /// What the node answered, if it did.
    pub reply: Option<AttemptReply>,
    /// The RMW id this attempt executed under, if it started Paxos (the driver learns it from
    /// the first message of the owner carrying a new id of the session: an RMW blocks its
    /// session, so it is the session's oldest unanswered attempt, Kite §5.1.8).
    pub rmw_id: Option<RmwId>,
}

impl Attempt {
    pub fn rpc(&self) -> Option<RpcId> {
        self.rifl.map(|e| e.rpc)
    }
}

/// A node's answer to one attempt: a result (as the witness it means) or an error code.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AttemptReply {
    pub at: Instant,
    pub result: Result<Witness, String>,
    /// The client never saw it: lost on the way, or its connection was already given up.
    pub lost: bool,
}

/// A version creation (Kite §2.5): reported by a core (`RcEvent::VersionCreated`), or, for an
/// RMW's version, seen in the first real `COMMIT` of its slot (the owner reports the version
/// only when it finishes, M10, so an RMW whose owner crashed after someone committed it exists
/// only in the commits).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Creation {
    pub at: Instant,
    /// The creating operation's node (for an RMW: its owner's, whoever committed it).
    pub node: NodeId,
    pub session: SessionId,
    pub key: Bytes,
    pub cs: Carstamp,
    pub value: Value,
    /// The RMW the version belongs to, when it was learnt from a `COMMIT`.
    pub rmw_id: Option<RmwId>,
}

/// A replica's `(value, cs)` or last committed slot of a key changed during one input
/// (sampled after every input).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReplicaChange {
    /// Global order of the driver's records (see [`History`]).
    pub seq: u64,
    pub at: Instant,
    pub node: NodeId,
    pub key: Bytes,
    pub value: Value,
    pub cs: Carstamp,
    /// `k.lc`, the last Paxos slot the replica knows decided (Kite §3.2).
    pub lc: u32,
}

/// A distinct `COMMIT` some node sent (Kite §4 msg 8): a real commit if `cs.pno == slot`, a
/// catch-up otherwise. Identical copies (broadcasts, re-sends) are recorded once.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CommitSeen {
    /// Global order of the driver's records, to compare with [`Acceptance::seq`].
    pub seq: u64,
    pub at: Instant,
    pub from: NodeId,
    pub key: Bytes,
    pub slot: u32,
    pub rmw_id: RmwId,
    pub value: Value,
    pub cs: Carstamp,
}

impl CommitSeen {
    /// A real commit carries the slot's own version `(base, slot)` (Kite §4 msg 8).
    pub fn is_real(&self) -> bool {
        self.cs.pno == self.slot
    }
}

/// An acceptor's `accepted` changed (Kite §5.7.7): `node` accepted `(rmw_id, base, value)` for
/// `slot` at `ballot` (sampled after every input).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Acceptance {
    pub seq: u64,
    pub at: Instant,
    pub node: NodeId,
    pub key: Bytes,
    pub slot: u32,
    pub ballot: Ballot,
    pub rmw_id: RmwId,
    pub base: Llc,
    pub value: Value,
}

/// A `SLOW_RELEASE` (Kite §5.1.6 B4.d) and the nodes that acknowledged it, i.e. that had set
/// their delinquency bits for `dm` (§5.7.4: the ack leaves only after the bits are set).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SlowReleaseSeen {
    /// When it was first sent.
    pub seq: u64,
    pub at: Instant,
    pub from: NodeId,
    pub req: u64,
    /// Bit `i` = node `i`.
    pub dm: u64,
    /// First acknowledgement sent by each node, in order.
    pub acks: Vec<SlowReleaseAck>,
}

/// The first `SLOW_RELEASE_ACK` a node sent for one `SLOW_RELEASE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SlowReleaseAck {
    pub seq: u64,
    pub at: Instant,
    pub node: NodeId,
}

impl SlowReleaseSeen {
    pub fn names(&self, node: NodeId) -> bool {
        node.0 < 64 && self.dm & (1 << node.0) != 0
    }

    /// The ack that made a quorum (the sender, which sets its bits first, and `quorum - 1`
    /// ackers) know the DM-set.
    pub fn quorum_ack(&self, quorum: usize) -> Option<&SlowReleaseAck> {
        self.acks.get(quorum.checked_sub(2)?)
    }

    /// When a quorum knew the DM-set.
    pub fn quorum_at(&self, quorum: usize) -> Option<Instant> {
        self.quorum_ack(quorum).map(|a| a.at)
    }
}

/// A node's machine epoch changed (Kite §5.8; `RcStats::machine_epoch`), sampled after the
/// input (`step`) that changed it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EpochChange {
    pub seq: u64,
    /// The driver's number of the input (one atomic step of one core, Kite K-D18).
    pub step: u64,
    pub at: Instant,
    pub node: NodeId,
    pub epoch: u64,
}

/// Kite §7 inv. 14 (`RcEvent::BarrierPassed`): `node`'s release or RMW of `session` on `key`
/// sent its first value-carrying message (`round`) in this step; its barrier had covered
/// `prior` and passed by `path`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BarrierSeen {
    pub seq: u64,
    pub at: Instant,
    pub node: NodeId,
    pub session: SessionId,
    pub key: Bytes,
    pub round: ValueRound,
    pub prior: Vec<(Bytes, Carstamp)>,
    pub path: BarrierPath,
}

/// Kite §7 inv. 15 (`RcEvent::DbitChanged`): `node`'s delinquency bit for `peer` changed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DbitSeen {
    pub seq: u64,
    pub at: Instant,
    pub node: NodeId,
    pub peer: NodeId,
    pub change: DbitChange,
}

/// A `RESET_BIT { acq }` (Kite §5.7.5), first sent by `from` (a broadcast is recorded once).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ResetBitSeen {
    pub seq: u64,
    pub at: Instant,
    pub from: NodeId,
    pub acq: AcquireId,
}

/// Kite §5.1.5 (`RcEvent::EpochBumped`): acquire `acq` of `node` incremented the machine epoch
/// to `epoch` in input `step`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EpochBump {
    pub seq: u64,
    pub step: u64,
    pub at: Instant,
    pub node: NodeId,
    pub acq: AcquireId,
    pub epoch: u64,
}

/// Kite §7 inv. 16 (`RcEvent::SelfDelinquent`): `node`'s `self_delinquent` flag changed in
/// input `step`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SelfDelinquentSeen {
    pub seq: u64,
    pub step: u64,
    pub at: Instant,
    pub node: NodeId,
    pub change: SelfDelinquentChange,
}

/// Kite §7 inv. 17 (`RcEvent::Registered`): `node`'s `rmw_registry[id.session]` went from
/// `prev` to `id.seq`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Registration {
    pub seq: u64,
    pub at: Instant,
    pub node: NodeId,
    pub id: RmwId,
    pub prev: u64,
}

/// Kite §7 inv. 17 (`RcEvent::Promised`): acceptor `node` acknowledged a proposal for `slot`
/// of `key` at `ballot`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PromiseSeen {
    pub seq: u64,
    pub at: Instant,
    pub node: NodeId,
    pub key: Bytes,
    pub slot: u32,
    pub ballot: Ballot,
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

/// Records that carry a `seq` are globally ordered by it: the driver numbers them as it makes
/// them. Within one input of one core (an atomic step) the order is: the core's events other
/// than `VersionCreated`, in the order the core emitted them; then the state sampled after the
/// input (machine epoch, replica changes, acceptances); then the messages it sent (commits, slow
/// releases and their acks, resets). So "before `seq` s" is "visible to, or caused before, the
/// step that made record s".
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct History {
    /// Cluster size (0 in hand-made histories that do not care).
    pub nodes: u32,
    pub ops: Vec<Op>,
    pub creations: Vec<Creation>,
    pub replica_changes: Vec<ReplicaChange>,
    /// Every distinct `COMMIT` sent: the global commit log of Kite §7 inv. 12 and 13.
    pub commits: Vec<CommitSeen>,
    /// Every change of an acceptor's accepted tuple (Kite §7 inv. 13, last clause).
    pub acceptances: Vec<Acceptance>,
    pub slow_releases: Vec<SlowReleaseSeen>,
    pub epochs: Vec<EpochChange>,
    /// Kite §7 inv. 14 - 17: what the cores reported of their barriers, delinquency bits,
    /// `self_delinquent`, epoch increments, registries and promises, and the `RESET_BIT`s sent.
    pub barriers: Vec<BarrierSeen>,
    pub dbits: Vec<DbitSeen>,
    pub reset_bits: Vec<ResetBitSeen>,
    pub epoch_bumps: Vec<EpochBump>,
    pub self_delinquency: Vec<SelfDelinquentSeen>,
    pub registrations: Vec<Registration>,
    pub promises: Vec<PromiseSeen>,
    /// Every session that was opened, with its node.
    pub sessions: Vec<SessionId>,
    /// Sessions whose client gave up their connection (a lost reply) while the node lived on:
    /// nothing is asked of them any more.
    pub abandoned: Vec<SessionId>,
    /// Every send of every operation, in order (empty in hand-made histories that have one send
    /// per operation).
    pub attempts: Vec<Attempt>,
    pub anomalies: Vec<Anomaly>,
    /// Start of the liveness phase: faults healed, loss stopped (Kite §7 prop 9, `T_heal`).
    pub heal_at: Option<Instant>,
    pub final_state: Option<FinalState>,
}

impl History {
    /// Kite §0: `Q = floor(N/2) + 1`.
    pub fn quorum(&self) -> usize {
        self.nodes as usize / 2 + 1
    }

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
        assert!(
            OpKind::Read.reads()
                && OpKind::Read.written_value().is_none()
                && !OpKind::Read.may_write()
        );
        assert_eq!(OpKind::Delete.written_value(), Some(None));
        let w = OpKind::Write { value: Bytes::from_static(b"v") };
        assert_eq!(w.written_value(), Some(Some(Bytes::from_static(b"v"))));
        assert!(OpKind::Acquire.reads() && !OpKind::Acquire.may_write());
        let faa = OpKind::Faa { delta: 3 };
        assert!(faa.reads() && faa.may_write() && faa.written_value().is_none());
        let two = Some(Bytes::from_static(b"2"));
        assert_eq!(faa.rmw_apply(&two), Some((Some(Bytes::from_static(b"5")), false)));
        assert_eq!(faa.rmw_apply(&None), Some((Some(Bytes::from_static(b"3")), false)));
        let text = Some(Bytes::from_static(b"two"));
        assert_eq!(faa.rmw_apply(&text), Some((text.clone(), false)), "not a counter: unchanged");
        let cas = OpKind::Cas { expected: None, new: Bytes::from_static(b"n"), weak: false };
        assert_eq!(cas.rmw_apply(&None), Some((Some(Bytes::from_static(b"n")), true)));
        assert_eq!(cas.rmw_apply(&two), Some((two.clone(), false)), "a failed CAS keeps the value");
        assert_eq!(fmt_ms(1_234_567), "1.234ms");
    }

    #[test]
    fn a_weak_cas_that_failed_locally_is_a_relaxed_read() {
        let kind = OpKind::Cas { expected: None, new: Bytes::from_static(b"n"), weak: true };
        let done = |written| Outcome::Done {
            at: Instant(2),
            order: 0,
            witness: Witness { observed: Some((None, Carstamp::ZERO)), written, swapped: false },
        };
        let mut op = Op {
            session: SessionId::default(),
            pos: 0,
            node: NodeId(0),
            kind,
            key: Bytes::new(),
            invoke: Instant(1),
            outcome: done(None),
            relocated: false,
        };
        assert_eq!(op.class(), OpClass::Relaxed);
        op.outcome = done(Some(Carstamp { llc: Llc::ZERO, pno: 1 }));
        assert_eq!(op.class(), OpClass::Rmw);
        assert_eq!(op.expected_written(), Some(Some(Bytes::from_static(b"n"))));
        op.outcome = Outcome::Pending;
        assert_eq!(op.class(), OpClass::Rmw);
    }
}
