//! Transactions over log tables (RIFL's client-driven two-phase commit, `specs/rifl.md` §4.3,
//! §5.8): the objects of a transaction, the operations a participant prepares, its votes and
//! the decision. Two-phase commit here says *prepare*, *vote*, *decide*, *decision*, never
//! "commit" (that word belongs to consensus, whose log entries these ride in).
//!
//! A transaction of `n` objects takes a block of `n + 1` consecutive RPC ids of its client
//! (R-D22): the block's first id names the transaction ([`TxnId`]) and object `i` (in
//! `(table, key)` order, §5.8.1 T1) is prepared under id `base + 1 + i`. A prepare is a
//! linearizable RPC whose completion record holds the object's vote; the recovery
//! coordinator's `RequestAbort` uses the same id, so whichever runs first writes the object's
//! one record (§5.8.4).

use bytes::{BufMut, Bytes, BytesMut};

use crate::codec::{put_bytes, put_seq, Decode, DecodeError, Encode, Reader};
use crate::log::{Expect, LogIndex};

/// A Kairos version / commit timestamp (kairos.md §0): `nanos` from the issuing process's
/// clock, `node` (the client's lease id, truncated) breaking ties, so read-write commit
/// timestamps are unique. Ordered lexicographically, `nanos` first (the derived order, by
/// field order). Defined here so that log entries, snapshots and replies can carry it;
/// `strata_kairos::timestamp` re-exports it with the clock that issues it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    pub nanos: u64,
    pub node: u32,
}

impl Timestamp {
    /// The version of every key before its first write (§0: initial load).
    pub const ZERO: Timestamp = Timestamp { nanos: 0, node: 0 };
    /// Above every timestamp a client can issue.
    pub const MAX: Timestamp = Timestamp { nanos: u64::MAX, node: u32::MAX };

    pub const fn new(nanos: u64, node: u32) -> Timestamp {
        Timestamp { nanos, node }
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.nanos, self.node)
    }
}

impl Encode for Timestamp {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u64_le(self.nanos);
        out.put_u32_le(self.node);
    }
}
impl Decode for Timestamp {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Timestamp { nanos: r.u64()?, node: r.u32()? })
    }
}

/// What a Kairos prepare adds to RIFL's (kairos.md §4 `PrepareReq`, server-side validation,
/// §9.12): the transaction's timestamps and, per op of the prepare (same order), the version
/// the transaction read (`None`: not read, a blind write). The participant validates it with
/// Algorithm 3 when its entry is applied, instead of RIFL's lock-and-version rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KairosPrepare {
    pub commit_ts: Timestamp,
    /// `T.freshness` (min `fts` of the whole read set); `None` if it read nothing.
    pub freshness: Option<Timestamp>,
    /// The whole transaction writes nothing (RO, §5.4).
    pub read_only: bool,
    /// Per op of the prepare, in order: the `vts` read.
    pub read_vts: Vec<Option<Timestamp>>,
    /// What the participant does with it (a trailing byte, written only when not `Full`).
    pub role: KairosRole,
    /// The shard leader's `ts_GC` when it appended the prepare's entry (kairos.md §5.9,
    /// Algorithm 3 step 1): every replica validates against it, so `TooOld` is a function of
    /// the log. Set by the leader, never by a client: not part of this type's own encoding
    /// (so not of `TxnPrepare`'s); a log entry carries it under its own tag when non-zero
    /// (17 for a `Full` role, 19 for another).
    pub ts_gc: Timestamp,
}

/// A Kairos participant's part in a prepare (kairos.md §4, §5.5, §5.6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KairosRole {
    /// Server-side validation (§9.12): the shard validates its keys and holds their values.
    #[default]
    Full,
    /// A sharded table's validator (§4 `ValidateReq`, §5.6): Algorithm 3 over the keys read
    /// (with their `vts`) and written (the "will write" flag; no value), no values kept.
    Validate,
    /// A sharded table's data shard (§4 `ReplicateReq`, §5.5): stores the write set and locks
    /// it; validates nothing (no read version slots).
    Replicate,
}

impl KairosPrepare {
    /// The fields; `role`: whether the role's byte follows them (else `Full`).
    pub fn decode_fields(r: &mut Reader, role: bool) -> Result<Self, DecodeError> {
        Ok(KairosPrepare {
            commit_ts: Timestamp::decode(r)?,
            freshness: r.option(Timestamp::decode)?,
            read_only: r.bool()?,
            read_vts: r.seq(|r| r.option(Timestamp::decode))?,
            role: if role { KairosRole::decode(r)? } else { KairosRole::Full },
            ts_gc: Timestamp::ZERO,
        })
    }
}

impl Decode for KairosRole {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(match r.u8()? {
            0 => KairosRole::Full,
            1 => KairosRole::Validate,
            2 => KairosRole::Replicate,
            v => return Err(DecodeError::Invalid { what: "kairos role", value: v as u64 }),
        })
    }
}

/// The role's byte only when it is not `Full`, so a server-side prepare keeps its encoding
/// (a log entry's tag says whether the byte is there: 14 and 17 without, 16 and 19 with).
impl Encode for KairosPrepare {
    fn encode(&self, out: &mut BytesMut) {
        self.commit_ts.encode(out);
        crate::codec::put_option(out, &self.freshness, |o, t| t.encode(o));
        crate::codec::put_bool(out, self.read_only);
        put_seq(out, &self.read_vts, |o, v| crate::codec::put_option(o, v, |o, t| t.encode(o)));
        match self.role {
            KairosRole::Full => {}
            KairosRole::Validate => out.put_u8(1),
            KairosRole::Replicate => out.put_u8(2),
        }
    }
}
/// As the last field of a message: the role's byte, if any, is what is left.
impl Decode for KairosPrepare {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        let mut k = KairosPrepare::decode_fields(r, false)?;
        if r.has_more() {
            k.role = KairosRole::decode(r)?;
        }
        Ok(k)
    }
}

/// One key's Kairos validator state in a snapshot (kairos.md §3.2; the version list is not
/// kept in the log embedding): the latest validated read, the latest committed version (the
/// key's `vts`) and the prepared write, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KairosKey {
    pub key: Bytes,
    pub latest_read: Timestamp,
    pub latest_committed: Timestamp,
    pub prepared_write: Option<(TxnId, Timestamp)>,
}

impl Encode for KairosKey {
    fn encode(&self, out: &mut BytesMut) {
        put_bytes(out, &self.key);
        self.latest_read.encode(out);
        self.latest_committed.encode(out);
        crate::codec::put_option(out, &self.prepared_write, |o, (t, ts)| {
            t.encode(o);
            ts.encode(o);
        });
    }
}
impl Decode for KairosKey {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(KairosKey {
            key: r.bytes()?,
            latest_read: Timestamp::decode(r)?,
            latest_committed: Timestamp::decode(r)?,
            prepared_write: r.option(|r| Ok((TxnId::decode(r)?, Timestamp::decode(r)?)))?,
        })
    }
}

/// A transaction: its client and the first id of its block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct TxnId {
    pub client_id: u64,
    pub base: u64,
}

impl std::fmt::Display for TxnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "t{}.{}", self.client_id, self.base)
    }
}

/// One object of a transaction (§4.3 `all_objects`): where it lives and the id of its prepare.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TxnObject {
    pub table: String,
    pub key: Bytes,
    pub seq: u64,
}

/// What a transaction does to an object once it is decided `Commit`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnAction {
    /// Only read: validated and locked, never written.
    Read,
    Write(Bytes),
    Delete,
}

/// What a read of a transactional log table asks of the shard leader besides the value
/// (docs/design.md, "The leader's foresight" and "Reads for update").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReadIntent {
    /// A plain (ORCA) read.
    #[default]
    Plain,
    /// A transaction's read: the leader may answer with the value and version a pending
    /// single-participant transaction will leave; the reader's prepare validates it.
    Txn,
    /// A transaction's read of a key it means to write (`SELECT … FOR UPDATE`): as [`Txn`],
    /// and the leader holds the key's other for-update reads back until this transaction's
    /// prepare arrives, `reserver` releases the key (`Request::ReleaseReservations`: the
    /// transaction was dropped), or a short hold passes. A scheduling hint, never a lock: the
    /// prepare's version check still decides. `reserver` is the transaction's random
    /// nonzero name; 0 (a client before releases existed) cannot release.
    ///
    /// [`Txn`]: ReadIntent::Txn
    TxnForUpdate { reserver: u64 },
}

impl ReadIntent {
    /// Answered with what the leader's pending transactions will leave (`foresight.rs`).
    pub fn foresees(self) -> bool {
        self != ReadIntent::Plain
    }

    /// Reserves the key at the leader until this transaction's prepare arrives.
    pub fn reserves(self) -> bool {
        matches!(self, ReadIntent::TxnForUpdate { .. })
    }

    /// The wire form: one byte (`0` is never sent on `LogRead`: the extension is then
    /// absent), `1` a transaction's read, `2` for update without a reserver, `3` for update
    /// followed by the reserver (u64).
    pub fn encode(self, out: &mut impl BufMut) {
        match self {
            ReadIntent::Plain => out.put_u8(0),
            ReadIntent::Txn => out.put_u8(1),
            ReadIntent::TxnForUpdate { reserver: 0 } => out.put_u8(2),
            ReadIntent::TxnForUpdate { reserver } => {
                out.put_u8(3);
                out.put_u64_le(reserver);
            }
        }
    }

    pub fn decode(r: &mut Reader) -> Result<ReadIntent, DecodeError> {
        Ok(match r.u8()? {
            0 => ReadIntent::Plain,
            1 => ReadIntent::Txn,
            2 => ReadIntent::TxnForUpdate { reserver: 0 },
            3 => ReadIntent::TxnForUpdate { reserver: r.u64()? },
            v => return Err(DecodeError::Invalid { what: "read intent", value: v as u64 }),
        })
    }
}

/// One operation of a `Prepare` (§4.3 `ops`): the object's key in this participant, its
/// prepare id, the version it must still have (`None`: any, a blind write), and the action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnOp {
    pub key: Bytes,
    pub seq: u64,
    pub expect: Option<Expect>,
    pub action: TxnAction,
}

/// Why an object voted `Abort`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AbortReason {
    /// Another transaction holds the object's lock (transactions never wait: §5.9).
    Locked,
    /// The object's version is not the one the transaction read (`expect` failed).
    Conflict,
    /// The recovery coordinator asked first (`RequestAbort`, §5.8.4): the client was presumed
    /// dead.
    Recovered,
    /// Kairos (kairos.md §5.6 step 2): a read key has a newer committed version.
    Stale,
    /// Kairos (steps 2, 4): another transaction's write of a key is prepared.
    PreparedConflict,
    /// Kairos (step 4): a validated reader of a written key has a timestamp `>=` this one.
    ReadWriteConflict,
    /// Kairos (step 4): a committed write of a written key has a timestamp `>=` this one.
    WriteWriteConflict,
    /// Kairos (step 3, §9.4): the commit timestamp is not above a version read.
    TimestampOrder,
    /// Kairos (step 1): `T.freshness < ts_GC`.
    TooOld,
    /// Kairos (§5.16, §6.4): the validator refused (termination promise, or recovering).
    Refused,
}

impl std::fmt::Display for AbortReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AbortReason::Locked => "an object was locked by another transaction",
            AbortReason::Conflict => "an object changed since it was read",
            AbortReason::Recovered => "recovery decided for a client presumed dead",
            AbortReason::Stale => "a value read has a newer committed version",
            AbortReason::PreparedConflict => "another transaction's write of a key is prepared",
            AbortReason::ReadWriteConflict => "a later transaction read a key written",
            AbortReason::WriteWriteConflict => "a later version of a key written is committed",
            AbortReason::TimestampOrder => "the commit timestamp is not above a version read",
            AbortReason::TooOld => "the values read are older than the validator's history",
            AbortReason::Refused => "the validator refused the transaction",
        })
    }
}

/// A participant's vote on one object (§5.8.2): the result kept in the prepare's record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Vote {
    /// Validated and locked: the object will take the decision.
    Prepared,
    Abort(AbortReason),
}

/// The outcome of a transaction: `Commit` iff every object voted `Prepared`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Decision {
    Commit,
    Abort,
}

impl Decision {
    /// §5.8.1 T5 and §5.8.4 RC4: the decision is a function of the votes.
    pub fn of<'a>(votes: impl IntoIterator<Item = &'a Vote>) -> Decision {
        if votes.into_iter().all(|v| *v == Vote::Prepared) {
            Decision::Commit
        } else {
            Decision::Abort
        }
    }
}

/// A lock a prepared object holds in its participant's replicated state (§5.8.2 P2 c): what
/// the decision will do, and the whole transaction, for the recovery coordinator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lock {
    pub txn: TxnId,
    pub seq: u64,
    pub key: Bytes,
    pub action: TxnAction,
    pub all: Vec<TxnObject>,
    /// The entry that took the lock.
    pub since: LogIndex,
}

/// A participant's entry for one `Prepare` (§5.8.2): the operations on its objects, applied
/// atomically. `whole`: they are every object of the transaction (one participant), so a
/// unanimous `Prepared` decides `Commit` at once (P3, R-D17).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prepare {
    pub txn: TxnId,
    pub all: Vec<TxnObject>,
    pub ops: Vec<TxnOp>,
    pub whole: bool,
    /// A Kairos table's prepare: validated by Algorithm 3 (its own log tag, 14, since the
    /// entry's fields follow it).
    pub kairos: Option<KairosPrepare>,
}

/// RIFL's fields; a Kairos prepare's follow (see `LogEntry`'s tag 14 and `TxnPrepare`'s
/// trailing extension).
impl Encode for Prepare {
    fn encode(&self, out: &mut BytesMut) {
        self.txn.encode(out);
        put_seq(out, &self.all, |o, x| x.encode(o));
        put_seq(out, &self.ops, |o, x| x.encode(o));
        crate::codec::put_bool(out, self.whole);
        if let Some(k) = &self.kairos {
            k.encode(out);
        }
    }
}
impl Prepare {
    /// `kairos`: whether the Kairos fields follow RIFL's; `role`: whether their role byte
    /// follows them.
    pub fn decode_fields(r: &mut Reader, kairos: bool, role: bool) -> Result<Self, DecodeError> {
        Ok(Prepare {
            txn: TxnId::decode(r)?,
            all: r.seq(TxnObject::decode)?,
            ops: r.seq(TxnOp::decode)?,
            whole: r.bool()?,
            kairos: if kairos { Some(KairosPrepare::decode_fields(r, role)?) } else { None },
        })
    }

    /// A Kairos prepare's leader stamp, `ts_gc`, when it is not `ZERO` (a log entry's tag 17,
    /// or 19 with a role, writes it after the Kairos fields).
    pub fn stamped_ts_gc(&self) -> Option<Timestamp> {
        self.kairos.as_ref().map(|k| k.ts_gc).filter(|t| *t != Timestamp::ZERO)
    }
}

/// The durable decision record of a recovery coordinator (R-D12), kept in the shard of the
/// transaction's first object until every decision is acknowledged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecisionRecord {
    pub txn: TxnId,
    pub all: Vec<TxnObject>,
    pub decision: Decision,
}

// ---- encodings ----

mod tag {
    pub const READ: u8 = 0;
    pub const WRITE: u8 = 1;
    pub const DELETE: u8 = 2;
    pub const PREPARED: u8 = 0;
    pub const ABORT_LOCKED: u8 = 1;
    pub const ABORT_CONFLICT: u8 = 2;
    pub const ABORT_RECOVERED: u8 = 3;
    pub const ABORT_STALE: u8 = 4;
    pub const ABORT_PREPARED_CONFLICT: u8 = 5;
    pub const ABORT_READ_WRITE: u8 = 6;
    pub const ABORT_WRITE_WRITE: u8 = 7;
    pub const ABORT_TIMESTAMP_ORDER: u8 = 8;
    pub const ABORT_TOO_OLD: u8 = 9;
    pub const ABORT_REFUSED: u8 = 10;
    pub const COMMIT: u8 = 1;
    pub const ABORT: u8 = 2;
}

impl Encode for TxnId {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u64_le(self.client_id);
        out.put_u64_le(self.base);
    }
}
impl Decode for TxnId {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(TxnId { client_id: r.u64()?, base: r.u64()? })
    }
}

impl Encode for TxnObject {
    fn encode(&self, out: &mut BytesMut) {
        put_bytes(out, self.table.as_bytes());
        put_bytes(out, &self.key);
        out.put_u64_le(self.seq);
    }
}
impl Decode for TxnObject {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(TxnObject { table: r.string()?, key: r.bytes()?, seq: r.u64()? })
    }
}

impl Encode for TxnAction {
    fn encode(&self, out: &mut BytesMut) {
        match self {
            TxnAction::Read => out.put_u8(tag::READ),
            TxnAction::Write(v) => {
                out.put_u8(tag::WRITE);
                put_bytes(out, v);
            }
            TxnAction::Delete => out.put_u8(tag::DELETE),
        }
    }
}
impl Decode for TxnAction {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(match r.u8()? {
            tag::READ => TxnAction::Read,
            tag::WRITE => TxnAction::Write(r.bytes()?),
            tag::DELETE => TxnAction::Delete,
            v => return Err(DecodeError::Invalid { what: "txn action", value: v as u64 }),
        })
    }
}

impl Encode for TxnOp {
    fn encode(&self, out: &mut BytesMut) {
        put_bytes(out, &self.key);
        out.put_u64_le(self.seq);
        crate::codec::put_option(out, &self.expect, |o, e| e.encode(o));
        self.action.encode(out);
    }
}
impl Decode for TxnOp {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(TxnOp {
            key: r.bytes()?,
            seq: r.u64()?,
            expect: r.option(Expect::decode)?,
            action: TxnAction::decode(r)?,
        })
    }
}

impl Encode for Vote {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u8(match self {
            Vote::Prepared => tag::PREPARED,
            Vote::Abort(AbortReason::Locked) => tag::ABORT_LOCKED,
            Vote::Abort(AbortReason::Conflict) => tag::ABORT_CONFLICT,
            Vote::Abort(AbortReason::Recovered) => tag::ABORT_RECOVERED,
            Vote::Abort(AbortReason::Stale) => tag::ABORT_STALE,
            Vote::Abort(AbortReason::PreparedConflict) => tag::ABORT_PREPARED_CONFLICT,
            Vote::Abort(AbortReason::ReadWriteConflict) => tag::ABORT_READ_WRITE,
            Vote::Abort(AbortReason::WriteWriteConflict) => tag::ABORT_WRITE_WRITE,
            Vote::Abort(AbortReason::TimestampOrder) => tag::ABORT_TIMESTAMP_ORDER,
            Vote::Abort(AbortReason::TooOld) => tag::ABORT_TOO_OLD,
            Vote::Abort(AbortReason::Refused) => tag::ABORT_REFUSED,
        })
    }
}
impl Decode for Vote {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(match r.u8()? {
            tag::PREPARED => Vote::Prepared,
            tag::ABORT_LOCKED => Vote::Abort(AbortReason::Locked),
            tag::ABORT_CONFLICT => Vote::Abort(AbortReason::Conflict),
            tag::ABORT_RECOVERED => Vote::Abort(AbortReason::Recovered),
            tag::ABORT_STALE => Vote::Abort(AbortReason::Stale),
            tag::ABORT_PREPARED_CONFLICT => Vote::Abort(AbortReason::PreparedConflict),
            tag::ABORT_READ_WRITE => Vote::Abort(AbortReason::ReadWriteConflict),
            tag::ABORT_WRITE_WRITE => Vote::Abort(AbortReason::WriteWriteConflict),
            tag::ABORT_TIMESTAMP_ORDER => Vote::Abort(AbortReason::TimestampOrder),
            tag::ABORT_TOO_OLD => Vote::Abort(AbortReason::TooOld),
            tag::ABORT_REFUSED => Vote::Abort(AbortReason::Refused),
            v => return Err(DecodeError::Invalid { what: "vote", value: v as u64 }),
        })
    }
}

impl Encode for Decision {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u8(match self {
            Decision::Commit => tag::COMMIT,
            Decision::Abort => tag::ABORT,
        })
    }
}
impl Decode for Decision {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(match r.u8()? {
            tag::COMMIT => Decision::Commit,
            tag::ABORT => Decision::Abort,
            v => return Err(DecodeError::Invalid { what: "decision", value: v as u64 }),
        })
    }
}

impl Encode for Lock {
    fn encode(&self, out: &mut BytesMut) {
        self.txn.encode(out);
        out.put_u64_le(self.seq);
        put_bytes(out, &self.key);
        self.action.encode(out);
        put_seq(out, &self.all, |o, x| x.encode(o));
        self.since.encode(out);
    }
}
impl Decode for Lock {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Lock {
            txn: TxnId::decode(r)?,
            seq: r.u64()?,
            key: r.bytes()?,
            action: TxnAction::decode(r)?,
            all: r.seq(TxnObject::decode)?,
            since: LogIndex::decode(r)?,
        })
    }
}

impl Encode for DecisionRecord {
    fn encode(&self, out: &mut BytesMut) {
        self.txn.encode(out);
        put_seq(out, &self.all, |o, x| x.encode(o));
        self.decision.encode(out);
    }
}
impl Decode for DecisionRecord {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(DecisionRecord {
            txn: TxnId::decode(r)?,
            all: r.seq(TxnObject::decode)?,
            decision: Decision::decode(r)?,
        })
    }
}

/// The courier's transaction-recovery messages between nodes (rifl.md §4.3, §5.8.4): each goes
/// to "the leader of (table, shard)" (`strata_host::courier`, service `SERVICE_TXN`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecoveryMail {
    /// §5.8.4 trigger, to the leader of the first object's shard: a participant's `T_TX`
    /// fired on a lock of `txn`. Answered `Started` at once.
    Start { txn: TxnId, all: Vec<TxnObject> },
    /// RA1-RA3 for the objects `seqs` of `txn` in the receiving shard.
    RequestAbort { txn: TxnId, seqs: Vec<u64> },
    /// RC5: the decision for the objects `seqs` in the receiving shard.
    Decide { txn: TxnId, decision: Decision, seqs: Vec<u64> },
}

/// The answers to [`RecoveryMail`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecoveryAnswer {
    Started,
    /// The objects' votes, up to the first `Abort`.
    Votes(Vec<(u64, Vote)>),
    /// The client acknowledged the objects: it finished the transaction itself (RC3).
    Stale,
    Decided,
}

mod mail_tag {
    pub const START: u8 = 1;
    pub const REQUEST_ABORT: u8 = 2;
    pub const DECIDE: u8 = 3;
    pub const STARTED: u8 = 1;
    pub const VOTES: u8 = 2;
    pub const STALE: u8 = 3;
    pub const DECIDED: u8 = 4;
}

impl Encode for RecoveryMail {
    fn encode(&self, out: &mut BytesMut) {
        match self {
            RecoveryMail::Start { txn, all } => {
                out.put_u8(mail_tag::START);
                txn.encode(out);
                put_seq(out, all, |o, x| x.encode(o));
            }
            RecoveryMail::RequestAbort { txn, seqs } => {
                out.put_u8(mail_tag::REQUEST_ABORT);
                txn.encode(out);
                put_seq(out, seqs, |o, s| o.put_u64_le(*s));
            }
            RecoveryMail::Decide { txn, decision, seqs } => {
                out.put_u8(mail_tag::DECIDE);
                txn.encode(out);
                decision.encode(out);
                put_seq(out, seqs, |o, s| o.put_u64_le(*s));
            }
        }
    }
}
impl Decode for RecoveryMail {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(match r.u8()? {
            mail_tag::START => {
                RecoveryMail::Start { txn: TxnId::decode(r)?, all: r.seq(TxnObject::decode)? }
            }
            mail_tag::REQUEST_ABORT => {
                RecoveryMail::RequestAbort { txn: TxnId::decode(r)?, seqs: r.seq(|r| r.u64())? }
            }
            mail_tag::DECIDE => RecoveryMail::Decide {
                txn: TxnId::decode(r)?,
                decision: Decision::decode(r)?,
                seqs: r.seq(|r| r.u64())?,
            },
            v => return Err(DecodeError::Invalid { what: "recovery mail", value: v as u64 }),
        })
    }
}

impl Encode for RecoveryAnswer {
    fn encode(&self, out: &mut BytesMut) {
        match self {
            RecoveryAnswer::Started => out.put_u8(mail_tag::STARTED),
            RecoveryAnswer::Votes(votes) => {
                out.put_u8(mail_tag::VOTES);
                put_seq(out, votes, |o, (s, v)| {
                    o.put_u64_le(*s);
                    v.encode(o);
                });
            }
            RecoveryAnswer::Stale => out.put_u8(mail_tag::STALE),
            RecoveryAnswer::Decided => out.put_u8(mail_tag::DECIDED),
        }
    }
}
impl Decode for RecoveryAnswer {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(match r.u8()? {
            mail_tag::STARTED => RecoveryAnswer::Started,
            mail_tag::VOTES => RecoveryAnswer::Votes(r.seq(|r| Ok((r.u64()?, Vote::decode(r)?)))?),
            mail_tag::STALE => RecoveryAnswer::Stale,
            mail_tag::DECIDED => RecoveryAnswer::Decided,
            v => return Err(DecodeError::Invalid { what: "recovery answer", value: v as u64 }),
        })
    }
}

/// Encodes a message into its own buffer (a courier body).
pub fn to_bytes<M: Encode>(m: &M) -> bytes::Bytes {
    let mut b = BytesMut::new();
    m.encode(&mut b);
    b.freeze()
}
