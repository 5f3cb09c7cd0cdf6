//! Node <-> node messages of the log engine (ORCA, `specs/orca.md` §4.2). Tags 0x90..=0x9f,
//! explicit and never reused (the rc engine's peer messages own 0x80..=0x8f).
//!
//! The sender of every message is the transport's peer (`Node::on_message(from, ..)`), so the
//! spec's `from`, `leader_id` and `candidate_id` fields are not repeated in the payload; shard
//! routing is the driver's job too. Every message carries the sender's `epoch` (§4: a receiver
//! adopts a larger epoch; a smaller one is answered with a rejection carrying its own).

use bytes::{BufMut, Bytes, BytesMut};
use thiserror::Error;

use crate::codec::{
    get_value, put_bool, put_bytes, put_option, put_seq, put_value, Decode, DecodeError, Encode,
    Reader,
};
use crate::ids::NodeId;
use crate::txn::{
    Decision, DecisionRecord, KairosKey, KairosRole, Lock, Prepare, Timestamp, TxnId, Vote,
};

pub mod log_tag {
    pub const APPEND_ENTRIES: u8 = 0x90;
    pub const APPEND_ACK: u8 = 0x91;
    pub const FORWARD_READ: u8 = 0x92;
    pub const READ_RELAY: u8 = 0x93;
    pub const REQUEST_VOTE: u8 = 0x94;
    pub const VOTE_RESP: u8 = 0x95;
}

/// A log position, ORCA §0: `(epoch, counter)` ordered lexicographically (the derived `Ord`
/// compares `epoch` first). A leader of epoch `e` numbers its entries `(e,1), (e,2), ...`, so an
/// index names one entry cluster-wide: at most one leader per epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct LogIndex {
    pub epoch: u32,
    pub counter: u32,
}

impl LogIndex {
    pub const ZERO: LogIndex = LogIndex { epoch: 0, counter: 0 };

    pub const fn new(epoch: u32, counter: u32) -> LogIndex {
        LogIndex { epoch, counter }
    }
}

impl std::fmt::Display for LogIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "({},{})", self.epoch, self.counter)
    }
}

/// What a log entry does to the key-value state (ORCA §3.1 `log_file`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogOp {
    Put(Bytes),
    Delete,
    /// A new leader's first entry `(e,1)` (§5.9 sync phase); changes nothing but the applied index.
    NoOp,
    /// RIFL §5.6, collection by client death: the lease service confirmed these clients'
    /// leases expired. Applying it drops their completion records and watermarks, and every
    /// later entry of theirs changes nothing (`ExpiredLease`): the same at every replica.
    /// Appended by the leader; `key` empty, `client_id = seq = ack = 0`.
    Expire(Vec<u64>),
    /// rifl.md §5.7 step 1, the start of a shard move: the shard's state is final at this
    /// entry. Every later write or `Expire` entry changes nothing, every write and read is
    /// answered `Moved` to the new replica set, and the state as of this entry (its records
    /// and watermarks included) is what the new replicas install. Appended by the leader on
    /// `strata shard move`; `key` empty, `client_id = seq = ack = 0`.
    Freeze(ShardMove),
    /// rifl.md §5.7 step 3: the first entry of a shard's new replica group, identical at every
    /// new replica (each writes it locally before serving): applying it replaces the empty
    /// state with the moved one, completion records and watermarks included, so a retry sent
    /// after the move finds its record here.
    Install(Box<Snapshot>),
    /// A conditional put (`put: Some`) or delete (`None`), rifl.md §2.1 `conditional_write`
    /// and R-D20: evaluated when applied, against the key's state at that point of the log;
    /// if `expect` does not hold nothing changes and the outcome is `Rejected` (a result,
    /// recorded and returned to every retry). Compare-and-swap is `Cond { Value(old), new }`.
    Cond {
        expect: Expect,
        put: Option<Bytes>,
    },
    /// rifl.md §2.1 `increment` on a counter (`crate::counter`, decimal text): evaluated when
    /// applied; the outcome carries the value before. A value that is not a counter, or a
    /// change leaving `0..=u64::MAX`, changes nothing and says why.
    Add(i64),
    /// rifl.md §5.8.2: a participant prepares its objects of a transaction. Applying it votes
    /// per object (its RPC record, unless one exists: then that vote stands), from applied
    /// state only — locked: `Abort(Locked)`; another version: `Abort(Conflict)`; else
    /// `Prepared` and the object is locked. `client_id` is the transaction's, `seq` 0, `ack`
    /// the prepare's watermark.
    Prepare(Box<Prepare>),
    /// §5.8.3: the decision for these objects of `txn`: each lock of theirs is released,
    /// after applying its action on `Commit`. Idempotent (a missing lock: nothing to do); no
    /// record. `client_id = seq = ack = 0`.
    Decide {
        txn: TxnId,
        decision: Decision,
        seqs: Vec<u64>,
    },
    /// §5.8.4 RA2: the recovery coordinator's abort request, under the prepares' own ids:
    /// each object without a record gets `Abort(Recovered)`; one with a record keeps its vote.
    /// No lease check, no acknowledgement learned (R-D13). `client_id = seq = ack = 0`.
    RequestAbort {
        txn: TxnId,
        seqs: Vec<u64>,
    },
    /// §5.8.4 RC4, R-D12: a recovery coordinator's durable decision, in the shard of the
    /// transaction's first object, so a new coordinator resumes phase 2 from it.
    Decided(Box<DecisionRecord>),
    /// RC6: every decision of `txn` was acknowledged; its decision record goes.
    Resolved(TxnId),
}

/// The condition of a conditional write (rifl.md R-D20: `Absent` or `Version(v)`, and the
/// value for compare-and-swap). Unconditional writes are `LogOp::Put`/`Delete`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// The key has no value (never written, or deleted).
    Absent,
    /// The key holds exactly these bytes.
    Value(Bytes),
    /// The key's version is this one: the `update_index` a read returned (`ZERO` for a key
    /// never written). Versions never repeat for a key, across deletes and shard moves, since
    /// log indexes strictly increase (a moved shard's new group starts a higher epoch).
    Version(LogIndex),
}

impl Expect {
    pub fn holds(&self, value: Option<&Bytes>, version: LogIndex) -> bool {
        match self {
            Expect::Absent => value.is_none(),
            Expect::Value(v) => value == Some(v),
            Expect::Version(x) => *x == version,
        }
    }
}

/// What evaluating a write returned (rifl.md §5.3 S5): the RPC's result. It is kept in the
/// completion record with the entry's index and every retry is answered with it (R-G2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The write took effect: a put or delete, or a conditional one whose condition held.
    #[default]
    Done,
    /// A conditional write whose condition did not hold: nothing changed; `current` is the
    /// version it found.
    Rejected { current: LogIndex },
    /// An `Add` took effect: the counter held `old` (it now holds `old + delta`).
    Added { old: u64 },
    /// An `Add` on a value that is not a counter: nothing changed.
    NotCounter,
    /// An `Add` that would leave `0..=u64::MAX`: nothing changed.
    OutOfRange,
    /// A transaction's object was prepared (its lock taken) or refused: the prepare's vote.
    Voted(Vote),
}

/// What a key operation does when applied to a key holding `value` at `version`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evaluation {
    /// `None`: the key is unchanged; `Some(None)`: deleted; `Some(Some(v))`: set to `v`.
    pub write: Option<Option<Bytes>>,
    pub outcome: WriteOutcome,
}

impl LogOp {
    /// The one definition of what a key operation does, shared by the replicas (which apply
    /// it) and the simulator's checkers (which replay it). `None` for the node's own entries
    /// (`NoOp`, `Expire`, `Freeze`, `Install`), which name no key.
    pub fn evaluate(&self, value: Option<&Bytes>, version: LogIndex) -> Option<Evaluation> {
        let done = |write| Evaluation { write: Some(write), outcome: WriteOutcome::Done };
        Some(match self {
            LogOp::Put(v) => done(Some(v.clone())),
            LogOp::Delete => done(None),
            LogOp::Cond { expect, put } if expect.holds(value, version) => done(put.clone()),
            LogOp::Cond { .. } => {
                Evaluation { write: None, outcome: WriteOutcome::Rejected { current: version } }
            }
            LogOp::Add(delta) => match crate::counter::change(value.map(|v| &v[..]), *delta) {
                Ok((old, new)) => Evaluation {
                    write: Some(Some(crate::counter::encode(new))),
                    outcome: WriteOutcome::Added { old },
                },
                Err(crate::counter::CounterError::NotACounter) => {
                    Evaluation { write: None, outcome: WriteOutcome::NotCounter }
                }
                Err(_) => Evaluation { write: None, outcome: WriteOutcome::OutOfRange },
            },
            LogOp::NoOp
            | LogOp::Expire(_)
            | LogOp::Freeze(_)
            | LogOp::Install(_)
            | LogOp::Prepare(_)
            | LogOp::Decide { .. }
            | LogOp::RequestAbort { .. }
            | LogOp::Decided(_)
            | LogOp::Resolved(_) => return None,
        })
    }

    /// Whether this is a client's write of one key (it carries an RPC id).
    pub fn is_key_op(&self) -> bool {
        matches!(self, LogOp::Put(_) | LogOp::Delete | LogOp::Cond { .. } | LogOp::Add(_))
    }
}

/// Where a shard goes (rifl.md §5.7): its new replica group's generation and members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardMove {
    /// The generation the new group runs; the frozen group's is one less.
    pub generation: u32,
    pub replicas: Vec<NodeId>,
}

/// The applied state of a shard's log prefix: items, RIFL's records and watermarks, and the
/// collected clients. Carried by `LogOp::Install` when a shard moves; a recovery input too.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The last entry the snapshot covers; the log continues after it.
    pub last_included: LogIndex,
    /// `(key, value or tombstone, update index)`.
    pub items: Vec<(Bytes, Option<Bytes>, LogIndex)>,
    /// RIFL's state of the applied prefix, by client id: watermarks and live records.
    pub clients: Vec<ClientRecords>,
    /// Clients whose leases expired (applied `Expire` entries): their entries change nothing.
    pub expired: Vec<u64>,
    /// Transactions' locks (rifl.md §5.8.2): prepared objects waiting for their decision.
    pub locks: Vec<Lock>,
    /// Recovery coordinators' decision records not yet resolved (R-D12).
    pub decisions: Vec<DecisionRecord>,
    /// A Kairos table's validator state, per key (kairos.md §3.2): written only when not
    /// empty (`Install` then takes tag 15; a standalone snapshot has it as a trailing
    /// section), so a RIFL or plain table's snapshot keeps its old encoding.
    pub kairos: Vec<KairosKey>,
}

/// One client's RIFL state in a snapshot (rifl.md §3.3, R-D8): the ack watermark, which must
/// survive even when no record is left (a late duplicate is then `Stale`), and the completion
/// records of applied, unacknowledged writes as `(seq, record)`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientRecords {
    pub client_id: u64,
    pub ack: u64,
    pub records: Vec<(u64, Completion)>,
}

/// A write's completion record (rifl.md §3.4): the index of the entry that executed it and
/// what its evaluation returned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    pub index: LogIndex,
    pub outcome: WriteOutcome,
}

impl Completion {
    /// The record of a write that took effect unconditionally (a put or delete).
    pub const fn done(index: LogIndex) -> Completion {
        Completion { index, outcome: WriteOutcome::Done }
    }
}

/// One log entry. A write's entry is also its RIFL completion record (rifl.md §3.4, §5.3 S6,
/// R-D23): `(client_id, seq)` is the RPC id, `ack` the watermark its envelope carried
/// (`first_incomplete - 1`) and the result is the entry's own `index`. So the record is durable
/// and replicated in the same step as the mutation, and every replica rebuilds the same
/// records and watermarks by applying the log. A `NoOp` has `client_id = seq = ack = 0`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    pub index: LogIndex,
    pub key: Bytes,
    pub op: LogOp,
    pub client_id: u64,
    pub seq: u64,
    /// `first_incomplete - 1` of the executing request: every seq of this client at or below
    /// it is acknowledged (rifl.md R-D7); learned by replicas when the entry is applied.
    pub ack: u64,
    /// Written with immediate durability (G6).
    pub immediate: bool,
}

/// Active-set lease information embedded in every `AppendEntries` (§4.2, §5.7.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Grant {
    pub member: bool,
    /// With `member`: the follower's own timestamp from the newest ack the leader received;
    /// the follower's lease runs to `echo_ts + mt` on its own clock (§5.7.3).
    pub echo_ts: Option<u64>,
    /// Without `member`: revoke every grant echoing a timestamp `<=` this (§5.7.4).
    pub revoke_echo: Option<u64>,
}

/// Leader -> follower: entries after `prev_index`, or a heartbeat when `entries` is empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppendEntries {
    pub epoch: u32,
    pub prev_index: LogIndex,
    pub entries: Vec<LogEntry>,
    pub commit_index: LogIndex,
    /// The leader's DI; the follower keeps the maximum as `DI_F` (§5.3 step 5).
    pub durable_index: LogIndex,
    /// Fsync (and apply) at least up to this index, then ack (§5.6).
    pub flush_upto: Option<LogIndex>,
    /// The make-durable round this flush belongs to (§5.5.3), echoed in acks.
    pub round_id: Option<u64>,
    /// Heartbeat round for the leader lease (§5.8), echoed in acks.
    pub hb_round: u64,
    pub grant: Grant,
}

/// Follower -> leader. Also sent unsolicited after every background flush (§5.4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppendAck {
    pub epoch: u32,
    pub success: bool,
    /// On success: the follower's last index. On failure: the largest index the follower holds
    /// that is `<=` the rejected `prev_index` (the leader backs up to it, §5.3 step 2).
    pub last_index: LogIndex,
    /// The highest index up to which the follower's log is known identical to the leader's
    /// (the last entry of the acknowledged message). Not in the spec's table: see the departures.
    pub match_index: LogIndex,
    pub persisted_index: LogIndex,
    pub applied_index: LogIndex,
    pub hb_round: u64,
    pub round_id: Option<u64>,
    /// The follower's monotonic clock when it sent this ack (echoed in grants, §5.7.3).
    pub f_ts: u64,
    pub serving: bool,
    pub revoke_ack: Option<u64>,
}

/// Follower -> leader: a read the follower could not serve (§5.5.2 step 5, or a session token
/// it could not meet in `catchup_wait`). The leader answers with `ReadRelay` to the sender.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardRead {
    pub epoch: u32,
    /// The follower's number for this forward; the relay echoes it.
    pub fwd_id: u64,
    pub key: Bytes,
    pub min_index: Option<LogIndex>,
}

/// A read served with the guarantees of §1.2 (ORCA §2.1 `ReadResult`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadValue {
    /// `None`: the key is absent (never written, or deleted).
    pub value: Option<Bytes>,
    /// Index of the entry that produced this value (`ZERO` for a key never written).
    pub update_index: LogIndex,
    pub served_by: NodeId,
    pub epoch: u32,
    /// A Kairos table's version timestamp of the value (kairos.md §0 `vts`; `ZERO` for any
    /// other table). A trailing extension of `ReadRelay`, absent when `ZERO` (and no `W`).
    pub vts: Timestamp,
    /// A Kairos key's `W` in nanoseconds (kairos.md §4 `GetResp.w_mean_ns`, §5.10); a
    /// trailing extension after `vts`.
    pub w_mean_ns: Option<u64>,
}

/// Why a read was not served (ORCA §2.1 `Error`). Each variant says what the caller should do.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ReadError {
    /// This node is not the leader (leader-only reads) or has lost its leader lease. Retry at
    /// `hint`, or at another node if there is none.
    #[error("not the leader (hint: {hint:?})")]
    NotLeader { hint: Option<NodeId> },
    /// This follower holds no valid active-set lease (R2). Retry at another node after a short
    /// back-off (default 10 ms).
    #[error("not in the active set")]
    NotInActiveSet,
    /// The read waited `read_timeout` (durability, session token, or a forward). Retry.
    #[error("read timed out")]
    Timeout,
    /// The leader is still starting its epoch (sync phase) or no leader is known. Retry soon.
    #[error("unavailable")]
    Unavailable,
    /// The shard moved (rifl.md §5.7 step 4, `UnknownOwner`): retry at one of `replicas`.
    #[error("the shard moved to {replicas:?}")]
    Moved { replicas: Vec<NodeId> },
    /// rifl.md §5.9 (R-D18): a transaction holds the key's lock until its decision is applied;
    /// the value may be about to change. Retry shortly.
    #[error("locked by a transaction")]
    Locked,
}

/// Leader -> follower: the answer to a `ForwardRead`, relayed unchanged to the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadRelay {
    pub epoch: u32,
    pub fwd_id: u64,
    pub result: Result<ReadValue, ReadError>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogMessage {
    AppendEntries(AppendEntries),
    AppendAck(AppendAck),
    ForwardRead(ForwardRead),
    ReadRelay(ReadRelay),
    /// `last_index`: the candidate's last log entry (memory), for vote rule (d).
    RequestVote {
        epoch: u32,
        last_index: LogIndex,
    },
    VoteResp {
        epoch: u32,
        granted: bool,
    },
}

impl LogMessage {
    pub fn epoch(&self) -> u32 {
        match self {
            LogMessage::AppendEntries(m) => m.epoch,
            LogMessage::AppendAck(m) => m.epoch,
            LogMessage::ForwardRead(m) => m.epoch,
            LogMessage::ReadRelay(m) => m.epoch,
            LogMessage::RequestVote { epoch, .. } | LogMessage::VoteResp { epoch, .. } => *epoch,
        }
    }
}

// ---- encoding ----

impl Encode for LogIndex {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u32_le(self.epoch);
        out.put_u32_le(self.counter);
    }
}
impl Decode for LogIndex {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(LogIndex { epoch: r.u32()?, counter: r.u32()? })
    }
}

mod op_tag {
    pub const PUT: u8 = 0;
    pub const DELETE: u8 = 1;
    pub const NOOP: u8 = 2;
    pub const EXPIRE: u8 = 3;
    pub const FREEZE: u8 = 4;
    /// `Install` before completion records carried outcomes (no outcome section): decoded
    /// with every outcome `Done`, which is all those records could hold.
    pub const INSTALL: u8 = 5;
    pub const COND: u8 = 6;
    pub const ADD: u8 = 7;
    /// `Install` with the snapshot's outcome section and the transactions' locks and decision
    /// records.
    pub const INSTALL_WITH_OUTCOMES: u8 = 8;
    pub const PREPARE: u8 = 9;
    pub const DECIDE: u8 = 10;
    pub const REQUEST_ABORT: u8 = 11;
    pub const DECIDED: u8 = 12;
    pub const RESOLVED: u8 = 13;
    /// A Kairos prepare: `Prepare`'s fields, then `KairosPrepare`'s.
    pub const PREPARE_KAIROS: u8 = 14;
    /// `Install` (as tag 8) followed by the Kairos validator section.
    pub const INSTALL_WITH_KAIROS: u8 = 15;
    /// A sharded Kairos table's prepare (validator or data shard): as tag 14, then the
    /// role's byte (`KairosPrepare::role`).
    pub const PREPARE_KAIROS_ROLE: u8 = 16;
}

mod expect_tag {
    pub const ABSENT: u8 = 0;
    pub const VALUE: u8 = 1;
    pub const VERSION: u8 = 2;
}

mod outcome_tag {
    pub const DONE: u8 = 0;
    pub const REJECTED: u8 = 1;
    pub const ADDED: u8 = 2;
    pub const NOT_COUNTER: u8 = 3;
    pub const OUT_OF_RANGE: u8 = 4;
    pub const VOTED: u8 = 5;
}

impl Encode for Expect {
    fn encode(&self, out: &mut BytesMut) {
        match self {
            Expect::Absent => out.put_u8(expect_tag::ABSENT),
            Expect::Value(v) => {
                out.put_u8(expect_tag::VALUE);
                put_bytes(out, v);
            }
            Expect::Version(x) => {
                out.put_u8(expect_tag::VERSION);
                x.encode(out);
            }
        }
    }
}
impl Decode for Expect {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(match r.u8()? {
            expect_tag::ABSENT => Expect::Absent,
            expect_tag::VALUE => Expect::Value(r.bytes()?),
            expect_tag::VERSION => Expect::Version(LogIndex::decode(r)?),
            v => return Err(DecodeError::Invalid { what: "expect", value: v as u64 }),
        })
    }
}

impl Expect {
    /// The exact size of the encoding.
    pub fn encoded_len(&self) -> usize {
        1 + match self {
            Expect::Absent => 0,
            Expect::Value(v) => 4 + v.len(),
            Expect::Version(_) => 8,
        }
    }
}

impl Encode for WriteOutcome {
    fn encode(&self, out: &mut BytesMut) {
        match self {
            WriteOutcome::Done => out.put_u8(outcome_tag::DONE),
            WriteOutcome::Rejected { current } => {
                out.put_u8(outcome_tag::REJECTED);
                current.encode(out);
            }
            WriteOutcome::Added { old } => {
                out.put_u8(outcome_tag::ADDED);
                out.put_u64_le(*old);
            }
            WriteOutcome::NotCounter => out.put_u8(outcome_tag::NOT_COUNTER),
            WriteOutcome::OutOfRange => out.put_u8(outcome_tag::OUT_OF_RANGE),
            WriteOutcome::Voted(v) => {
                out.put_u8(outcome_tag::VOTED);
                v.encode(out);
            }
        }
    }
}
impl Decode for WriteOutcome {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(match r.u8()? {
            outcome_tag::DONE => WriteOutcome::Done,
            outcome_tag::REJECTED => WriteOutcome::Rejected { current: LogIndex::decode(r)? },
            outcome_tag::ADDED => WriteOutcome::Added { old: r.u64()? },
            outcome_tag::NOT_COUNTER => WriteOutcome::NotCounter,
            outcome_tag::OUT_OF_RANGE => WriteOutcome::OutOfRange,
            outcome_tag::VOTED => WriteOutcome::Voted(Vote::decode(r)?),
            v => return Err(DecodeError::Invalid { what: "write outcome", value: v as u64 }),
        })
    }
}

impl WriteOutcome {
    /// The exact size of the encoding.
    pub fn encoded_len(&self) -> usize {
        1 + match self {
            WriteOutcome::Rejected { .. } | WriteOutcome::Added { .. } => 8,
            WriteOutcome::Voted(_) => 1,
            _ => 0,
        }
    }
}

/// Bytes of an `AppendEntries` peer frame besides its entries: the frame header, the shard
/// envelope (`PeerMessage::Shard`) and the message's own fields with every option present
/// (107 bytes today; `append_entries_overhead_bounds_the_frame` checks it). A leader packs
/// entries into one message only while their [`LogEntry::encoded_len`]s and this stay within
/// the peer frame limit.
pub const APPEND_ENTRIES_OVERHEAD_BYTES: usize = 128;

impl LogEntry {
    /// The fields of a transaction entry's op, after its tag.
    fn op_payload(&self, out: &mut BytesMut) {
        match &self.op {
            LogOp::Prepare(p) => p.encode(out),
            LogOp::Decide { txn, decision, seqs } => {
                txn.encode(out);
                decision.encode(out);
                put_seq(out, seqs, |o, s| o.put_u64_le(*s));
            }
            LogOp::RequestAbort { txn, seqs } => {
                txn.encode(out);
                put_seq(out, seqs, |o, s| o.put_u64_le(*s));
            }
            LogOp::Decided(d) => d.encode(out),
            LogOp::Resolved(txn) => txn.encode(out),
            _ => unreachable!("only transaction entries"),
        }
    }

    /// The exact size of this entry's encoding (inside an `AppendEntries` or a WAL record).
    pub fn encoded_len(&self) -> usize {
        // index, key length, op tag, client id, seq, ack, immediate
        const FIXED: usize = 8 + 4 + 1 + 8 + 8 + 8 + 1;
        let op = match &self.op {
            LogOp::Put(v) => 4 + v.len(),
            LogOp::Delete | LogOp::NoOp => 0,
            LogOp::Expire(clients) => 4 + 8 * clients.len(),
            LogOp::Freeze(m) => 4 + 4 + 4 * m.replicas.len(),
            LogOp::Install(snapshot) => {
                // Rare (one per shard move) and bounded by the move limit: measure it.
                let mut b = BytesMut::new();
                snapshot.encode(&mut b);
                b.len()
            }
            LogOp::Cond { expect, put } => {
                expect.encoded_len() + 1 + put.as_ref().map_or(0, |v| 4 + v.len())
            }
            LogOp::Add(_) => 8,
            LogOp::Prepare(_)
            | LogOp::Decide { .. }
            | LogOp::RequestAbort { .. }
            | LogOp::Decided(_) => {
                // Transaction entries are small and few: measure them.
                let mut b = BytesMut::new();
                self.op_payload(&mut b);
                b.len()
            }
            LogOp::Resolved(_) => 16,
        };
        FIXED + self.key.len() + op
    }
}

impl Encode for LogEntry {
    fn encode(&self, out: &mut BytesMut) {
        self.index.encode(out);
        put_bytes(out, &self.key);
        match &self.op {
            LogOp::Put(v) => {
                out.put_u8(op_tag::PUT);
                put_bytes(out, v);
            }
            LogOp::Delete => out.put_u8(op_tag::DELETE),
            LogOp::NoOp => out.put_u8(op_tag::NOOP),
            LogOp::Expire(clients) => {
                out.put_u8(op_tag::EXPIRE);
                put_seq(out, clients, |o, c| o.put_u64_le(*c));
            }
            LogOp::Freeze(m) => {
                out.put_u8(op_tag::FREEZE);
                m.encode(out);
            }
            LogOp::Install(snapshot) => {
                out.put_u8(if snapshot.kairos.is_empty() {
                    op_tag::INSTALL_WITH_OUTCOMES
                } else {
                    op_tag::INSTALL_WITH_KAIROS
                });
                snapshot.encode(out);
            }
            LogOp::Cond { expect, put } => {
                out.put_u8(op_tag::COND);
                expect.encode(out);
                put_value(out, put);
            }
            LogOp::Add(delta) => {
                out.put_u8(op_tag::ADD);
                out.put_i64_le(*delta);
            }
            LogOp::Prepare(_)
            | LogOp::Decide { .. }
            | LogOp::RequestAbort { .. }
            | LogOp::Decided(_)
            | LogOp::Resolved(_) => {
                out.put_u8(match &self.op {
                    LogOp::Prepare(p) => match &p.kairos {
                        None => op_tag::PREPARE,
                        Some(k) if k.role == KairosRole::Full => op_tag::PREPARE_KAIROS,
                        Some(_) => op_tag::PREPARE_KAIROS_ROLE,
                    },
                    LogOp::Decide { .. } => op_tag::DECIDE,
                    LogOp::RequestAbort { .. } => op_tag::REQUEST_ABORT,
                    LogOp::Decided(_) => op_tag::DECIDED,
                    _ => op_tag::RESOLVED,
                });
                self.op_payload(out);
            }
        }
        out.put_u64_le(self.client_id);
        out.put_u64_le(self.seq);
        out.put_u64_le(self.ack);
        put_bool(out, self.immediate);
    }
}
impl Decode for LogEntry {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        let index = LogIndex::decode(r)?;
        let key = r.bytes()?;
        let op = match r.u8()? {
            op_tag::PUT => LogOp::Put(r.bytes()?),
            op_tag::DELETE => LogOp::Delete,
            op_tag::NOOP => LogOp::NoOp,
            op_tag::EXPIRE => LogOp::Expire(r.seq(|r| r.u64())?),
            op_tag::FREEZE => LogOp::Freeze(ShardMove::decode(r)?),
            op_tag::INSTALL => LogOp::Install(Box::new(Snapshot::decode_fields(r, false, false)?)),
            op_tag::INSTALL_WITH_OUTCOMES => {
                LogOp::Install(Box::new(Snapshot::decode_fields(r, true, false)?))
            }
            op_tag::INSTALL_WITH_KAIROS => {
                LogOp::Install(Box::new(Snapshot::decode_fields(r, true, true)?))
            }
            op_tag::COND => LogOp::Cond { expect: Expect::decode(r)?, put: get_value(r)? },
            op_tag::ADD => LogOp::Add(r.i64()?),
            op_tag::PREPARE => LogOp::Prepare(Box::new(Prepare::decode_fields(r, false, false)?)),
            op_tag::PREPARE_KAIROS => {
                LogOp::Prepare(Box::new(Prepare::decode_fields(r, true, false)?))
            }
            op_tag::PREPARE_KAIROS_ROLE => {
                LogOp::Prepare(Box::new(Prepare::decode_fields(r, true, true)?))
            }
            op_tag::DECIDE => LogOp::Decide {
                txn: TxnId::decode(r)?,
                decision: Decision::decode(r)?,
                seqs: r.seq(|r| r.u64())?,
            },
            op_tag::REQUEST_ABORT => {
                LogOp::RequestAbort { txn: TxnId::decode(r)?, seqs: r.seq(|r| r.u64())? }
            }
            op_tag::DECIDED => LogOp::Decided(Box::new(DecisionRecord::decode(r)?)),
            op_tag::RESOLVED => LogOp::Resolved(TxnId::decode(r)?),
            v => return Err(DecodeError::Invalid { what: "log op", value: v as u64 }),
        };
        Ok(LogEntry {
            index,
            key,
            op,
            client_id: r.u64()?,
            seq: r.u64()?,
            ack: r.u64()?,
            immediate: r.bool()?,
        })
    }
}

impl Encode for ShardMove {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u32_le(self.generation);
        put_seq(out, &self.replicas, |o, n| n.encode(o));
    }
}
impl Decode for ShardMove {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(ShardMove { generation: r.u32()?, replicas: r.seq(NodeId::decode)? })
    }
}

impl Encode for Snapshot {
    fn encode(&self, out: &mut BytesMut) {
        self.last_included.encode(out);
        put_seq(out, &self.items, |o, (k, v, u)| {
            put_bytes(o, k);
            put_value(o, v);
            u.encode(o);
        });
        put_seq(out, &self.clients, |o, c| {
            o.put_u64_le(c.client_id);
            o.put_u64_le(c.ack);
            put_seq(o, &c.records, |o, (seq, record)| {
                o.put_u64_le(*seq);
                record.index.encode(o);
            });
        });
        put_seq(out, &self.expired, |o, c| o.put_u64_le(*c));
        // The outcome section (added with conditional writes): every record's outcome, client
        // by client, in the order above. Nested in an `Install` entry, which is followed by
        // the entry's own fields, so it is not a trailing extension: `Install` got a new tag.
        put_seq(out, &self.clients, |o, c| put_seq(o, &c.records, |o, (_, r)| r.outcome.encode(o)));
        // Then the transactions' state (same section, same tag).
        put_seq(out, &self.locks, |o, l| l.encode(o));
        put_seq(out, &self.decisions, |o, d| d.encode(o));
        // A Kairos table's validator section, only when there is one (see the field).
        if !self.kairos.is_empty() {
            put_seq(out, &self.kairos, |o, k| k.encode(o));
        }
    }
}
/// A standalone snapshot (the last field of `ShardFrozen` and `AdoptShard`): the Kairos
/// section is trailing.
impl Decode for Snapshot {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        let mut s = Snapshot::decode_fields(r, true, false)?;
        if r.has_more() {
            s.kairos = r.seq(KairosKey::decode)?;
        }
        Ok(s)
    }
}

impl Snapshot {
    /// `outcomes`: whether the outcome section follows (see `encode`); without it (an
    /// `Install` entry written before outcomes existed) every record is `Done`.
    /// `kairos`: whether the Kairos section follows (an `Install` with tag 15).
    fn decode_fields(
        r: &mut Reader,
        outcomes: bool,
        kairos: bool,
    ) -> Result<Snapshot, DecodeError> {
        let mut s = Snapshot {
            last_included: LogIndex::decode(r)?,
            items: r.seq(|r| Ok((r.bytes()?, get_value(r)?, LogIndex::decode(r)?)))?,
            clients: r.seq(|r| {
                Ok(ClientRecords {
                    client_id: r.u64()?,
                    ack: r.u64()?,
                    records: r.seq(|r| {
                        let seq = r.u64()?;
                        let index = LogIndex::decode(r)?;
                        Ok((seq, Completion { index, outcome: WriteOutcome::Done }))
                    })?,
                })
            })?,
            expired: r.seq(|r| r.u64())?,
            locks: Vec::new(),
            decisions: Vec::new(),
            kairos: Vec::new(),
        };
        if outcomes {
            let mismatch =
                |n: usize| DecodeError::Invalid { what: "outcome count", value: n as u64 };
            let n = r.u32()? as usize;
            if n != s.clients.len() {
                return Err(mismatch(n));
            }
            for c in &mut s.clients {
                let n = r.u32()? as usize;
                if n != c.records.len() {
                    return Err(mismatch(n));
                }
                for (_, record) in &mut c.records {
                    record.outcome = WriteOutcome::decode(r)?;
                }
            }
            s.locks = r.seq(Lock::decode)?;
            s.decisions = r.seq(DecisionRecord::decode)?;
        }
        if kairos {
            s.kairos = r.seq(KairosKey::decode)?;
        }
        Ok(s)
    }
}

impl Encode for Grant {
    fn encode(&self, out: &mut BytesMut) {
        put_bool(out, self.member);
        put_option(out, &self.echo_ts, |o, t| o.put_u64_le(*t));
        put_option(out, &self.revoke_echo, |o, t| o.put_u64_le(*t));
    }
}
impl Decode for Grant {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Grant {
            member: r.bool()?,
            echo_ts: r.option(|r| r.u64())?,
            revoke_echo: r.option(|r| r.u64())?,
        })
    }
}

mod read_tag {
    pub const OK: u8 = 0;
    pub const NOT_LEADER: u8 = 1;
    pub const NOT_IN_ACTIVE_SET: u8 = 2;
    pub const TIMEOUT: u8 = 3;
    pub const UNAVAILABLE: u8 = 4;
    pub const MOVED: u8 = 5;
    pub const LOCKED: u8 = 6;
}

fn put_read_result(out: &mut BytesMut, r: &Result<ReadValue, ReadError>) {
    use read_tag::*;
    match r {
        Ok(v) => {
            out.put_u8(OK);
            put_value(out, &v.value);
            v.update_index.encode(out);
            v.served_by.encode(out);
            out.put_u32_le(v.epoch);
            if v.vts != Timestamp::ZERO || v.w_mean_ns.is_some() {
                v.vts.encode(out);
            }
            if let Some(w) = v.w_mean_ns {
                out.put_u64_le(w);
            }
        }
        Err(ReadError::NotLeader { hint }) => {
            out.put_u8(NOT_LEADER);
            put_option(out, hint, |o, n| n.encode(o));
        }
        Err(ReadError::NotInActiveSet) => out.put_u8(NOT_IN_ACTIVE_SET),
        Err(ReadError::Timeout) => out.put_u8(TIMEOUT),
        Err(ReadError::Unavailable) => out.put_u8(UNAVAILABLE),
        Err(ReadError::Moved { replicas }) => {
            out.put_u8(MOVED);
            put_seq(out, replicas, |o, n| n.encode(o));
        }
        Err(ReadError::Locked) => out.put_u8(LOCKED),
    }
}

fn get_read_result(r: &mut Reader) -> Result<Result<ReadValue, ReadError>, DecodeError> {
    use read_tag::*;
    Ok(match r.u8()? {
        OK => Ok(ReadValue {
            value: get_value(r)?,
            update_index: LogIndex::decode(r)?,
            served_by: NodeId::decode(r)?,
            epoch: r.u32()?,
            vts: if r.has_more() { Timestamp::decode(r)? } else { Timestamp::ZERO },
            w_mean_ns: if r.has_more() { Some(r.u64()?) } else { None },
        }),
        NOT_LEADER => Err(ReadError::NotLeader { hint: r.option(NodeId::decode)? }),
        NOT_IN_ACTIVE_SET => Err(ReadError::NotInActiveSet),
        TIMEOUT => Err(ReadError::Timeout),
        UNAVAILABLE => Err(ReadError::Unavailable),
        MOVED => Err(ReadError::Moved { replicas: r.seq(NodeId::decode)? }),
        LOCKED => Err(ReadError::Locked),
        v => return Err(DecodeError::Invalid { what: "read result", value: v as u64 }),
    })
}

impl Encode for LogMessage {
    fn encode(&self, out: &mut BytesMut) {
        use log_tag::*;
        match self {
            LogMessage::AppendEntries(m) => {
                out.put_u8(APPEND_ENTRIES);
                out.put_u32_le(m.epoch);
                m.prev_index.encode(out);
                put_seq(out, &m.entries, |o, e| e.encode(o));
                m.commit_index.encode(out);
                m.durable_index.encode(out);
                put_option(out, &m.flush_upto, |o, i| i.encode(o));
                put_option(out, &m.round_id, |o, id| o.put_u64_le(*id));
                out.put_u64_le(m.hb_round);
                m.grant.encode(out);
            }
            LogMessage::AppendAck(m) => {
                out.put_u8(APPEND_ACK);
                out.put_u32_le(m.epoch);
                put_bool(out, m.success);
                m.last_index.encode(out);
                m.match_index.encode(out);
                m.persisted_index.encode(out);
                m.applied_index.encode(out);
                out.put_u64_le(m.hb_round);
                put_option(out, &m.round_id, |o, id| o.put_u64_le(*id));
                out.put_u64_le(m.f_ts);
                put_bool(out, m.serving);
                put_option(out, &m.revoke_ack, |o, t| o.put_u64_le(*t));
            }
            LogMessage::ForwardRead(m) => {
                out.put_u8(FORWARD_READ);
                out.put_u32_le(m.epoch);
                out.put_u64_le(m.fwd_id);
                put_bytes(out, &m.key);
                put_option(out, &m.min_index, |o, i| i.encode(o));
            }
            LogMessage::ReadRelay(m) => {
                out.put_u8(READ_RELAY);
                out.put_u32_le(m.epoch);
                out.put_u64_le(m.fwd_id);
                put_read_result(out, &m.result);
            }
            LogMessage::RequestVote { epoch, last_index } => {
                out.put_u8(REQUEST_VOTE);
                out.put_u32_le(*epoch);
                last_index.encode(out);
            }
            LogMessage::VoteResp { epoch, granted } => {
                out.put_u8(VOTE_RESP);
                out.put_u32_le(*epoch);
                put_bool(out, *granted);
            }
        }
    }
}

impl Decode for LogMessage {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        use log_tag::*;
        Ok(match r.u8()? {
            APPEND_ENTRIES => LogMessage::AppendEntries(AppendEntries {
                epoch: r.u32()?,
                prev_index: LogIndex::decode(r)?,
                entries: r.seq(LogEntry::decode)?,
                commit_index: LogIndex::decode(r)?,
                durable_index: LogIndex::decode(r)?,
                flush_upto: r.option(LogIndex::decode)?,
                round_id: r.option(|r| r.u64())?,
                hb_round: r.u64()?,
                grant: Grant::decode(r)?,
            }),
            APPEND_ACK => LogMessage::AppendAck(AppendAck {
                epoch: r.u32()?,
                success: r.bool()?,
                last_index: LogIndex::decode(r)?,
                match_index: LogIndex::decode(r)?,
                persisted_index: LogIndex::decode(r)?,
                applied_index: LogIndex::decode(r)?,
                hb_round: r.u64()?,
                round_id: r.option(|r| r.u64())?,
                f_ts: r.u64()?,
                serving: r.bool()?,
                revoke_ack: r.option(|r| r.u64())?,
            }),
            FORWARD_READ => LogMessage::ForwardRead(ForwardRead {
                epoch: r.u32()?,
                fwd_id: r.u64()?,
                key: r.bytes()?,
                min_index: r.option(LogIndex::decode)?,
            }),
            READ_RELAY => LogMessage::ReadRelay(ReadRelay {
                epoch: r.u32()?,
                fwd_id: r.u64()?,
                result: get_read_result(r)?,
            }),
            REQUEST_VOTE => {
                LogMessage::RequestVote { epoch: r.u32()?, last_index: LogIndex::decode(r)? }
            }
            VOTE_RESP => LogMessage::VoteResp { epoch: r.u32()?, granted: r.bool()? },
            tag => return Err(DecodeError::UnknownTag { tag }),
        })
    }
}
