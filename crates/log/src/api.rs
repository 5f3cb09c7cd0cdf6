//! What goes in and out of a log replica core: client requests and replies, persist records,
//! recovered state, audit events and counters.

use bytes::Bytes;
use strata_wire::log::{LogEntry, LogIndex, ShardMove};
use strata_wire::rifl::Rifl;
use strata_wire::txn::{Decision, DecisionRecord, Prepare, ReadIntent, Timestamp, TxnId, Vote};
use strata_wire::NodeId;
use thiserror::Error;

pub use strata_wire::log::{ClientRecords, ReadError, ReadValue, Snapshot};

/// A client operation routed to this shard replica by the driver. `token` is the driver's own
/// number: the reply carries it back so the driver can route it to the right connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogRequest {
    /// ORCA §2.1 `put`/`delete`, a linearizable RPC of RIFL (rifl.md §4.1, §5.3): `rifl.rpc`
    /// names the write, and a retry with the same id is answered with the first outcome (its
    /// log index) without executing again; `first_incomplete` acknowledges the client's
    /// earlier writes.
    Write {
        token: u64,
        rifl: Rifl,
        key: Bytes,
        op: WriteOp,
        immediate: bool,
    },
    /// ORCA §2.1 `get`; `min_index` is the session token of §2.3 (the client's last write index).
    Read {
        token: u64,
        key: Bytes,
        min_index: Option<LogIndex>,
        /// A transaction's read, at the leader: answered with what a pending
        /// single-participant transaction will leave, if one will (`foresight.rs`); for
        /// update, it reserves the key (`reservations.rs`).
        intent: ReadIntent,
    },
    /// Several keys of this shard read at once, at the leader only: answered when every key
    /// can be answered, with one value per key in the same order (docs/design.md, "Reads of
    /// several keys"). For update, the keys are reserved together, so two transactions that
    /// read each other's keys never hold one each and wait for the other.
    ReadMany {
        token: u64,
        keys: Vec<Bytes>,
        min_index: Option<LogIndex>,
        intent: ReadIntent,
    },
    /// A dropped transaction's reads for update under `reserver` (`reservations.rs`): at the
    /// leader, each of `keys` still reserved by `reserver` is free again. Answered
    /// `ReservationsReleased` by any replica (only a leader holds reservations).
    ReleaseReservations {
        token: u64,
        keys: Vec<Bytes>,
        reserver: u64,
    },
    /// rifl.md §5.7 steps 1-2, at the leader: freeze the shard for a move to `to`. Answered
    /// with the final state once the `Freeze` entry is committed, durable at a majority and
    /// applied (so every replica that serves reads has applied it too: it answers `Moved`).
    /// Idempotent for the same `to`.
    Freeze {
        token: u64,
        to: ShardMove,
    },
    /// rifl.md §5.8.2 at the leader: prepare this participant's objects of a transaction
    /// (`rifl.rpc` names it: `(client, base)`). `read_only`: validate against the applied
    /// state only (P1: no entry, no lock, no record). Answered with the votes once the entry
    /// is applied under the table's acknowledgement rule.
    Prepare {
        token: u64,
        rifl: Rifl,
        prepare: Prepare,
        read_only: bool,
    },
    /// §5.8.3: apply `decision` to these objects of `txn` (idempotent, no record).
    Decide {
        token: u64,
        txn: TxnId,
        decision: Decision,
        seqs: Vec<u64>,
    },
    /// §5.8.4 RA1-RA3, from a recovery coordinator: record `Abort` for each object without a
    /// vote, and answer every object's vote (`Stale` if the client acknowledged them).
    RequestAbort {
        token: u64,
        txn: TxnId,
        seqs: Vec<u64>,
    },
    /// §5.8.4 RC4 / RC6 (R-D12): a recovery coordinator's durable decision record, and its
    /// removal once every decision is acknowledged. Answered `Done` once durable.
    RecordDecision {
        token: u64,
        record: DecisionRecord,
    },
    Resolve {
        token: u64,
        txn: TxnId,
    },
    /// kairos.md §5.9 `WatermarkReport` of client `client` (its lease id), at the leader of a
    /// Kairos table's shard: soft state (`kairos_wm`), no log entry. Answered
    /// `TxnAnswer::Watermarks` with the shard's `WM` and `ts_GC`, or `NotLeader`.
    KairosReport {
        token: u64,
        client: u64,
        seq: u64,
        local_wm: Timestamp,
        c_freshness: Timestamp,
    },
}

impl LogRequest {
    pub fn token(&self) -> u64 {
        match self {
            LogRequest::Write { token, .. }
            | LogRequest::Read { token, .. }
            | LogRequest::ReadMany { token, .. }
            | LogRequest::ReleaseReservations { token, .. }
            | LogRequest::Freeze { token, .. }
            | LogRequest::Prepare { token, .. }
            | LogRequest::Decide { token, .. }
            | LogRequest::RequestAbort { token, .. }
            | LogRequest::RecordDecision { token, .. }
            | LogRequest::Resolve { token, .. }
            | LogRequest::KairosReport { token, .. } => *token,
        }
    }
}

/// What a transaction request returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnAnswer {
    /// The objects' votes in order, up to the first `Abort` (rifl.md §5.8.2). `decided`: the
    /// prepare held every object, so its decision is applied: `Commit` if all were
    /// `Prepared` (P3), else `Abort` (docs/design.md, departures).
    Votes { votes: Vec<(u64, Vote)>, decided: bool },
    /// A decision, a decision record or its removal is applied and durable.
    Done,
    /// The answer to a `KairosReport`: the shard's `WM` and `ts_GC` (kairos.md §5.9).
    Watermarks { wm: Timestamp, ts_gc: Timestamp },
}

/// What a write does to its key: the client's operation, evaluated when its entry is applied.
pub use strata_wire::client::LogWriteOp as WriteOp;
pub use strata_wire::log::{Completion, Expect, WriteOutcome};

/// ORCA §2.1 `WriteAck`: the index of the write's log entry (the next session token) and
/// what its evaluation returned (rifl.md §5.3 S5): the RPC's completion record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteAck {
    pub index: LogIndex,
    pub outcome: WriteOutcome,
}

impl From<Completion> for WriteAck {
    fn from(c: Completion) -> WriteAck {
        WriteAck { index: c.index, outcome: c.outcome }
    }
}

/// Why a write was not acknowledged. Each variant says what the caller should do.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum WriteError {
    /// This node is not the leader, or its leader lease lapsed. Retry at `hint` (or another
    /// node) with the same RPC id: if the write was already appended it may still be applied,
    /// and its completion record then answers the retry with its index.
    #[error("not the leader (hint: {hint:?})")]
    NotLeader { hint: Option<NodeId> },
    /// The leader is starting its epoch (sync phase), or the envelope's lease expiration is
    /// not beyond the cluster time this core observed (the node's lease check, which asks the
    /// lease service, runs before the core and passes the expiration it confirmed, so this is
    /// only the core's own guard: the write is neither executed nor refused as
    /// `ExpiredLease`). Retry shortly, same id.
    #[error("leader not ready")]
    Unavailable,
    /// The write waited `write_timeout` (a majority or a durability round did not answer).
    /// Outcome unknown: retry with the same RPC id.
    #[error("write timed out")]
    Timeout,
    /// RIFL `Stale` (rifl.md §5.3 S4, §7 inv. 5): the seq is at or below the client's ack
    /// watermark, i.e. the client had acknowledged this RPC. Nothing was executed. A client
    /// bug or a very late duplicate: do not retry.
    #[error("stale: the client had acknowledged this RPC")]
    Stale,
    /// The RIFL envelope breaks the client invariant (`Rifl::check`, R-D7): ids 0, a lease of
    /// another client, `first_incomplete` above seq or the seq beyond the window. Not
    /// executed and not used as an acknowledgement. Do not retry.
    #[error("bad RIFL envelope: {0}")]
    BadEnvelope(&'static str),
    /// The request is malformed (empty key). Do not retry.
    #[error("invalid write: {0}")]
    Invalid(&'static str),
    /// RIFL `ExpiredLease` (rifl.md R-G4, §5.6): the client's lease expired and its records
    /// in this shard were collected (an applied `Expire` entry names it); nothing was
    /// executed now, and whether an earlier attempt took effect is unknown. Do not retry.
    #[error("the client's lease expired")]
    ExpiredLease,
    /// The shard moved, or is moving, to `replicas` (rifl.md §5.7 step 4): nothing was
    /// executed here; retry there with the same RPC id (its record, if any, moved too).
    #[error("the shard moved to {replicas:?}")]
    Moved { replicas: Vec<NodeId> },
    /// rifl.md §5.9 `Retry(Locked)`: a transaction holds the key's lock. Nothing was done
    /// and nothing recorded: retry shortly with the same RPC id.
    #[error("the key is locked by a transaction")]
    Locked,
}

/// A reply for the driver to route by `token`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogReply {
    Write {
        token: u64,
        result: Result<WriteAck, WriteError>,
    },
    Read {
        token: u64,
        result: Result<ReadValue, ReadError>,
    },
    /// The answer to `LogRequest::ReadMany`: a value per key, in the request's order.
    ReadMany {
        token: u64,
        result: Result<Vec<ReadValue>, ReadError>,
    },
    /// The answer to `LogRequest::ReleaseReservations`.
    ReservationsReleased {
        token: u64,
    },
    /// The answer to `LogRequest::Freeze`: the shard's final state.
    Frozen {
        token: u64,
        result: Result<Snapshot, WriteError>,
    },
    /// The answer to a transaction request.
    Txn {
        token: u64,
        result: Result<TxnAnswer, WriteError>,
    },
}

impl LogReply {
    pub fn token(&self) -> u64 {
        match self {
            LogReply::Write { token, .. }
            | LogReply::Read { token, .. }
            | LogReply::ReadMany { token, .. }
            | LogReply::ReservationsReleased { token }
            | LogReply::Frozen { token, .. }
            | LogReply::Txn { token, .. } => *token,
        }
    }
}

/// The durable election state (ORCA §3.1): `current_epoch` and the vote given in it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HardState {
    pub epoch: u32,
    pub voted_for: Option<NodeId>,
}

/// A record the driver must persist. Tokens increase; `Node::on_persisted(now, upto)` tells the
/// core that **every** record with a token `<= upto` is durable (fsynced). The driver executes
/// the records in token order:
///
/// * `Append(entries)`: add the entries to the end of the log, in a user-space buffer only.
///   They must NOT reach the OS (no `write`) before the next `Sync`, so that killing the process
///   loses them exactly as a power failure would (ORCA §9.6).
/// * `Truncate { after }`: remove every entry with an index `> after`, from the buffer and, if
///   already written, from the file. It becomes durable with the next `Sync`.
/// * `HardState`: write and fsync the election state, replacing the previous one. Messages in
///   `send_after_persist` with this token leave only after that (votes, ORCA §3.1).
/// * `Sync`: write the buffered appends and truncations and fsync once (one `fdatasync`
///   covering all of them — group commit), then report the token.
///
/// Since `upto` acknowledges a prefix, a driver reports a `HardState` or `Sync` token only
/// once every earlier record is durable as well; it never reports an `Append` or `Truncate`
/// on its own (it may report the latest `Sync`/`HardState` token at or after it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Persist {
    Append(Vec<LogEntry>),
    Truncate { after: LogIndex },
    HardState(HardState),
    Sync,
}

/// What a driver read back from disk after a (re)start: only fsynced data (ORCA §5.10).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveredState {
    pub hard_state: HardState,
    pub snapshot: Option<Snapshot>,
    /// The log after the snapshot, in order.
    pub entries: Vec<LogEntry>,
}

impl RecoveredState {
    /// The disk of a replica of a moved shard's new group (rifl.md §5.7 step 3), written
    /// before the replica starts: one `Install` entry at `(E, 1)`, `E` one above the frozen
    /// group's `Freeze` entry's epoch, so every index of the new group is above every index
    /// the old group answered (clients' session tokens stay valid), and the recorded indexes
    /// in `snapshot` (answers to retries) are below them. Every new replica writes the same
    /// entry, so it is committed from the start.
    pub fn moved_in(snapshot: Snapshot) -> RecoveredState {
        let epoch = snapshot.last_included.epoch + 1;
        RecoveredState {
            hard_state: HardState { epoch, voted_for: None },
            snapshot: None,
            entries: vec![LogEntry {
                index: LogIndex::new(epoch, 1),
                key: Bytes::new(),
                op: strata_wire::log::LogOp::Install(Box::new(snapshot)),
                client_id: 0,
                seq: 0,
                ack: 0,
                immediate: true,
            }],
        }
    }
}

/// Why a recovered state was refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RecoverError {
    #[error(transparent)]
    Config(#[from] crate::ConfigError),
    /// The on-disk log is corrupt: indexes must strictly increase after the snapshot.
    #[error("log entry {at} does not follow {prev}")]
    OutOfOrder { prev: LogIndex, at: LogIndex },
}

/// Why a voter refused a vote (ORCA §5.9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VoteRefusal {
    /// Rule 0: the voter is a leader under lease or heard from its leader within `ET_min`; the
    /// request was ignored entirely (even its higher epoch).
    LeaseProtected,
    StaleEpoch,
    AlreadyVoted,
    /// Rule (d): the voter's last index is above the candidate's.
    LessUpToDate,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepDownReason {
    /// A message carried a higher epoch.
    HigherEpoch,
    /// No majority acknowledged a heartbeat round for `ST` past the lease (§5.8).
    LeaseLost,
    /// The epoch's entry counter is near its end: a new election starts a new epoch.
    CounterExhausted,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RevokeReason {
    /// No ack for more than `mt` (§5.7.2, §5.7.4 (a)).
    Unresponsive,
    /// A durability round waited on this member alone for `slow_threshold` (§9.5).
    Slow,
    /// An operator asked for it (§5.7.4 (c)).
    Operator,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkOutReason {
    /// `now >= lease_expiry` (§5.7.3).
    LeaseExpired,
    /// The leader sent `member = false`.
    NotMember,
    /// The leader revoked the lease (`revoke_echo`).
    Revoked,
    /// A new epoch, a candidacy or a restart (§5.7.3 last line).
    EpochChange,
}

/// The audit log of ORCA §7, one event per fact. Cheap to emit: keys and values are shared
/// `Bytes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogEvent {
    /// An fsync completed: `persisted_index` is now `index`.
    Persisted {
        index: LogIndex,
    },
    /// Entries up to `upto` were applied to the key-value state.
    Applied {
        upto: LogIndex,
    },
    /// The divergent suffix `(after, removed_upto]` was dropped (§5.10).
    Truncated {
        after: LogIndex,
        removed_upto: LogIndex,
    },
    ElectionStarted {
        epoch: u32,
        last_index: LogIndex,
    },
    VoteGranted {
        epoch: u32,
        candidate: NodeId,
        candidate_last: LogIndex,
        own_last: LogIndex,
    },
    VoteRefused {
        epoch: u32,
        candidate: NodeId,
        reason: VoteRefusal,
    },
    BecameLeader {
        epoch: u32,
        noop: LogIndex,
    },
    /// The new-epoch entry is persisted and applied on a majority; the active set is formed.
    SyncPhaseDone {
        epoch: u32,
        noop: LogIndex,
        active_set: Vec<NodeId>,
    },
    SteppedDown {
        epoch: u32,
        reason: StepDownReason,
    },
    /// The leader's DI advanced.
    DurableIndex {
        epoch: u32,
        di: LogIndex,
    },
    DurabilityRound {
        epoch: u32,
        id: u64,
        target: LogIndex,
    },
    AsAdded {
        epoch: u32,
        node: NodeId,
        persisted: LogIndex,
        applied: LogIndex,
        di: LogIndex,
    },
    AsRevoked {
        epoch: u32,
        node: NodeId,
        reason: RevokeReason,
        revoke_echo: Option<u64>,
    },
    /// `confirmed`: removed on the follower's revoke ack, else `rt` after the last grant.
    AsRemoved {
        epoch: u32,
        node: NodeId,
        confirmed: bool,
    },
    GrantSent {
        epoch: u32,
        to: NodeId,
        echo_ts: u64,
    },
    /// A follower stopped serving.
    MarkedOut {
        epoch: u32,
        reason: MarkOutReason,
    },
    LeaderLeaseExpired {
        epoch: u32,
        /// Per follower: `node:acked_round/last_round@ms_since_last_ack` (diagnostics: which
        /// acks were missing).
        followers: String,
    },
    ReadServed {
        key: Bytes,
        value: Option<Bytes>,
        update_index: LogIndex,
        served_by: NodeId,
        epoch: u32,
        min_index: Option<LogIndex>,
        applied: LogIndex,
    },
    WriteAcked {
        index: LogIndex,
        client_id: u64,
        seq: u64,
        immediate: bool,
    },
    /// The mutation of the write at `index` took effect in this replica's applied state (not a
    /// duplicate, not stale): RIFL's effect event (rifl.md §7 inv. 1). Emitted when applying,
    /// also by the replay of a restart and the rebuild after a truncation, so an observer can
    /// tell which entries are effective at this replica.
    Executed {
        index: LogIndex,
        client_id: u64,
        seq: u64,
    },
    /// A transaction entry voted or decided an object here (also at replay).
    Txn(crate::state::TxnEvent),
}

/// Counters a replica keeps about itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogStats {
    /// Peer messages dropped as hostile or malformed.
    pub bad_messages: u64,
    pub elections_started: u64,
    pub reads_served: u64,
    pub reads_forwarded: u64,
    /// Reads whose durability check failed at the leader and that waited for MakeDurable.
    pub reads_made_durable: u64,
    pub durability_rounds: u64,
    pub flushes: u64,
    pub writes_acked: u64,
    /// Transaction reads answered from the leader's foresight (`foresight.rs`).
    pub reads_foreseen: u64,
    /// Reads for update that waited for another's prepare (`reservations.rs`).
    pub reads_held: u64,
    /// Reservations their dropped transaction released (`LogRequest::ReleaseReservations`).
    pub reservations_released: u64,
    /// Single-participant prepares answered `Abort` without an entry (`foresight.rs`).
    pub prepares_foreseen_aborted: u64,
}
