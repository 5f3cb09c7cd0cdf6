//! Client <-> node messages. Tags are explicit and never reused (`docs/design.md`).
//!
//! Every request carries a per-connection correlation number `corr` that its response echoes;
//! a client may pipeline any number of requests on one connection. Operations of one session
//! are executed, and answered, in the order they arrive.

use bytes::{BufMut, Bytes, BytesMut};

use crate::codec::{
    get_value, put_bool, put_bytes, put_extension_each, put_option, put_seq, put_value, Decode,
    DecodeError, Encode, Reader,
};
use crate::ids::{Carstamp, NodeId, SessionId};
use crate::log::{Expect, LogIndex, ShardMove, Snapshot, WriteOutcome};
use crate::rifl::{LeaseStatus, Rifl};
use crate::txn::{Decision, KairosPrepare, ReadIntent, Timestamp, TxnObject, TxnOp, Vote};

/// Request tags (0x01..=0x3f). Never reuse a retired tag.
pub mod request_tag {
    pub const OPEN_SESSION: u8 = 0x01;
    pub const CLOSE_SESSION: u8 = 0x02;
    pub const GET: u8 = 0x10;
    pub const PUT: u8 = 0x11;
    pub const DELETE: u8 = 0x12;
    pub const RELEASE: u8 = 0x13;
    pub const ACQUIRE: u8 = 0x14;
    pub const FAA: u8 = 0x15;
    pub const CAS: u8 = 0x16;
    /// Log tables (ORCA §4.1 `WriteReq`, `ReadReq`).
    pub const LOG_WRITE: u8 = 0x20;
    pub const LOG_READ: u8 = 0x21;
    /// RIFL's lease service (rifl.md §4.2 `RenewLease`, `GetLeaseInfo`).
    pub const RENEW_LEASE: u8 = 0x22;
    pub const LEASE_INFO: u8 = 0x23;
    /// Shard moves (rifl.md §5.7, admin).
    pub const FREEZE_SHARD: u8 = 0x24;
    pub const ADOPT_SHARD: u8 = 0x25;
    pub const STATUS: u8 = 0x30;
    pub const SET_FAULT: u8 = 0x31;
    /// Table catalog (admin).
    pub const CREATE_TABLE: u8 = 0x32;
    pub const LIST_TABLES: u8 = 0x33;
    /// Keep-alive: answered `Pong` by the node's runtime (a connection idle for the node's
    /// `idle_timeout_ms` is closed; the client library pings an idle connection).
    pub const PING: u8 = 0x34;
    /// Transactions on log tables (rifl.md §4.3 `Prepare`, `Decision`).
    pub const TXN_PREPARE: u8 = 0x26;
    pub const TXN_DECIDE: u8 = 0x27;
    /// Kairos's `WatermarkReport` (kairos.md §4, §5.9), to a shard leader.
    pub const KAIROS_REPORT: u8 = 0x28;
    /// Several keys of one shard of a log table, read at its leader in one step.
    pub const LOG_READ_MANY: u8 = 0x29;
    /// A dropped transaction's reservations of keys of one shard (reads for update).
    pub const RELEASE_RESERVATIONS: u8 = 0x2a;
}

/// Response tags (0x40..=0x7f).
pub mod response_tag {
    pub const SESSION_OPENED: u8 = 0x41;
    pub const SESSION_CLOSED: u8 = 0x42;
    pub const VALUE: u8 = 0x50;
    pub const WRITTEN: u8 = 0x51;
    pub const RMW: u8 = 0x52;
    /// Log tables (ORCA §4.1 `WriteResp`, `ReadResp`).
    pub const LOG_WRITTEN: u8 = 0x53;
    pub const LOG_VALUE: u8 = 0x54;
    pub const LOG_REJECTED: u8 = 0x55;
    /// The lease service's answer (rifl.md §4.2).
    pub const LEASE: u8 = 0x56;
    /// Shard moves (rifl.md §5.7).
    pub const SHARD_FROZEN: u8 = 0x57;
    pub const SHARD_ADOPTED: u8 = 0x58;
    pub const STATUS: u8 = 0x60;
    pub const FAULT_SET: u8 = 0x61;
    pub const TABLE_CREATED: u8 = 0x62;
    pub const TABLES: u8 = 0x63;
    /// A node-initiated message (`Response::Push`), with correlation number 0.
    pub const PUSH: u8 = 0x64;
    /// The answer to `Ping`.
    pub const PONG: u8 = 0x65;
    /// Transactions (rifl.md §4.3): a participant's votes; a decision applied.
    pub const TXN_VOTES: u8 = 0x66;
    pub const TXN_DECIDED: u8 = 0x67;
    /// A Kairos shard leader's `WM` and `ts_GC`, the answer to a `KairosReport`.
    pub const KAIROS_WATERMARKS: u8 = 0x68;
    /// The answer to `LogReadMany`.
    pub const LOG_VALUES: u8 = 0x69;
    /// The answer to `ReleaseReservations`.
    pub const RESERVATIONS_RELEASED: u8 = 0x6a;
    pub const ERROR: u8 = 0x7f;
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientRequest {
    pub corr: u64,
    /// RIFL's envelope (`specs/rifl.md` §4.1): present on every mutating request a client wants
    /// applied exactly once — the RPC id every retry reuses, the client's `first_incomplete`
    /// and its lease. Absent: at-least-once (a retry may apply twice). Reads ignore it. Encoded
    /// right after `corr`, as an option.
    pub rifl: Option<Rifl>,
    pub body: Request,
}

impl ClientRequest {
    /// A request without RIFL's envelope.
    pub fn new(corr: u64, body: Request) -> ClientRequest {
        ClientRequest { corr, rifl: None, body }
    }
}

impl Request {
    /// The session a request names (a session's operation, or closing it).
    pub fn session(&self) -> Option<SessionId> {
        match self {
            Request::CloseSession { session }
            | Request::Get { session, .. }
            | Request::Put { session, .. }
            | Request::Delete { session, .. }
            | Request::Release { session, .. }
            | Request::Acquire { session, .. }
            | Request::Faa { session, .. }
            | Request::Cas { session, .. } => Some(*session),
            _ => None,
        }
    }

    /// Whether this is a linearizable RPC (rifl.md §4.1): one that may change the store, which
    /// RIFL makes exactly-once and whose lease the node checks (§5.5.3).
    pub fn is_linearizable(&self) -> bool {
        matches!(
            self,
            Request::Put { .. }
                | Request::Delete { .. }
                | Request::Release { .. }
                | Request::Faa { .. }
                | Request::Cas { .. }
                | Request::LogWrite { .. }
                | Request::TxnPrepare { .. }
                | Request::TxnDecide { .. }
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Open a session at the node the connection reaches; the node allocates its id.
    OpenSession,
    CloseSession {
        session: SessionId,
    },
    /// Relaxed read (Kite §5.2): served from the local replica.
    Get {
        session: SessionId,
        key: Bytes,
    },
    /// Relaxed write (Kite §5.3): applied locally, broadcast, acknowledged at once.
    Put {
        session: SessionId,
        key: Bytes,
        value: Bytes,
    },
    /// Relaxed delete: a relaxed write of the absent value (a tombstone version).
    Delete {
        session: SessionId,
        key: Bytes,
    },
    /// Release-write (Kite §5.4): every earlier access of the session is visible before it.
    Release {
        session: SessionId,
        key: Bytes,
        value: Bytes,
    },
    /// Acquire-read (Kite §5.5): every later access of the session sees what preceded the
    /// release it reads from.
    Acquire {
        session: SessionId,
        key: Bytes,
    },
    /// Fetch-and-add (Kite §2.2): the counter (`crate::counter`: decimal text, absent = 0)
    /// plus `delta`; a value that is not a counter, or a sum past `u64::MAX`, is kept as it is.
    /// Answered with `Rmw` (the observed value tells which).
    Faa {
        session: SessionId,
        key: Bytes,
        delta: u64,
    },
    /// Compare-and-swap (Kite §2.2): installs `new` iff the value equals `expected` (`None`:
    /// absent). `weak`: may fail at once when the local replica differs. Answered with `Rmw`.
    Cas {
        session: SessionId,
        key: Bytes,
        expected: Option<Bytes>,
        new: Bytes,
        weak: bool,
    },
    /// Node and transport counters, for `strata status`.
    Status,
    /// Keep-alive, answered `Pong` (by the runtime, in order with the connection's replies).
    Ping,
    /// Admin: set the fault layer of this node's outbound links (`None` = every peer).
    SetFault {
        peer: Option<NodeId>,
        fault: LinkFault,
    },
    /// ORCA §2.1/§4.1 `WriteReq` on a log table. The node routes it to the shard
    /// [`shard_of`]`(key)`; only that shard's leader accepts it (`LogRejected(NotLeader)`
    /// otherwise). It must carry RIFL's envelope (`ClientRequest::rifl`): a retry with the same
    /// RPC id is answered with the first outcome from the completion record in the log.
    LogWrite {
        table: String,
        key: Bytes,
        op: LogWriteOp,
        immediate: bool,
    },
    /// ORCA §2.1/§4.1 `ReadReq` on a log table; `min_index` is the session token of §2.3.
    LogRead {
        table: String,
        key: Bytes,
        min_index: Option<LogIndex>,
        /// kairos.md §5.14.2 (explicit invalidation): register this connection as a sharer of
        /// the key at the shard's leader, which pushes `push_topic::KAIROS_INVALIDATE` when a
        /// transaction installs a newer version. A trailing extension, absent when false.
        sharer: bool,
        /// A transaction's read (RIFL tables; [`ReadIntent`]). A second trailing extension
        /// of one byte (`1` a transaction's read, `2` for update; the byte of a former
        /// `foresee` flag), absent for a plain read (then `sharer` is absent too unless set).
        intent: ReadIntent,
    },
    /// Several keys of one shard of a log table ([`shard_of`] must agree for all of them), read
    /// at the shard's leader in one step: one value per key, in this order, each as
    /// [`Request::LogRead`] with the same `min_index` and `intent` would return it (at the
    /// leader). For update, the leader reserves the keys together (docs/design.md, "Reads of
    /// several keys"). At most [`MAX_READ_MANY_KEYS`] keys; not for Kairos tables (their
    /// reads go through the client's cache, key by key).
    LogReadMany {
        table: String,
        keys: Vec<Bytes>,
        min_index: Option<LogIndex>,
        intent: ReadIntent,
    },
    /// A transaction that read `keys` (of one shard of a log table) for update under
    /// `reserver` ([`ReadIntent::TxnForUpdate`]) and will send no prepare: the shard's leader
    /// ends those keys' reservations that are still `reserver`'s, so the reads waiting for
    /// them go on now rather than when the hold lapses (docs/design.md, "Reads for update").
    /// Any node answers [`Response::ReservationsReleased`]; only a leader holds reservations.
    ReleaseReservations {
        table: String,
        keys: Vec<Bytes>,
        reserver: u64,
    },
    /// Admin: add a table to this node's catalog (idempotent for an identical definition).
    CreateTable {
        def: TableDef,
    },
    /// The node's table catalog.
    ListTables,
    /// rifl.md §4.2 `RenewLease`: renew lease `lease_id`, or create one (`0`, or an id whose
    /// lease expired: the answer then names a new id). Served by the leader of the lease
    /// service's log table; any other node answers `LogRejected(NotLeader { hint })`.
    RenewLease {
        lease_id: u64,
    },
    /// rifl.md §4.2 `GetLeaseInfo`: whether `lease_id` is alive (answer `lease_id` 0 if not),
    /// with the service's cluster time. For operators and tests; nodes ask each other over
    /// their peer links.
    LeaseInfo {
        lease_id: u64,
    },
    /// Admin, the first step of a shard move (rifl.md §5.7 steps 1-2): the shard's leader
    /// appends a `Freeze` entry naming `replicas` (the next generation) and, once it is
    /// committed, durable and applied, answers `ShardFrozen` with the final state.
    /// Idempotent for the same `replicas` (an interrupted move is resumed by sending it
    /// again); `NotLeader` at another replica, `Moved` at a node without the shard.
    FreezeShard {
        table: String,
        shard: u32,
        replicas: Vec<NodeId>,
    },
    /// rifl.md §4.3 `Prepare`, to the leader of `table`'s `shard`: this participant's
    /// operations of a transaction (every op's key is in the shard). RIFL's envelope names the
    /// transaction: `rpc = (client, base)`. `read_only`: validate only (§5.8.2 P1: no lock,
    /// no record, no log entry). Answered `TxnVotes`, or `LogRejected` (retry with the same ids).
    TxnPrepare {
        table: String,
        shard: u32,
        read_only: bool,
        all: Vec<TxnObject>,
        ops: Vec<TxnOp>,
        /// A Kairos table's prepare (kairos.md §4 `PrepareReq`): its timestamps and the
        /// versions read. A trailing extension, absent for RIFL.
        kairos: Option<KairosPrepare>,
    },
    /// rifl.md §4.3 `Decision` for these objects (their prepare ids) of the envelope's
    /// transaction. Idempotent; answered `TxnDecided`.
    TxnDecide {
        table: String,
        shard: u32,
        decision: Decision,
        seqs: Vec<u64>,
    },
    /// Kairos's `WatermarkReport{client, report_seq, local_wm, c_freshness}` (kairos.md §4,
    /// §5.9), to the leader of a Kairos table's `shard`: `client` is the reporter's lease id.
    /// Soft state at the leader, idempotent (an older `seq` is ignored); answered
    /// `KairosWatermarks` with the shard's `WM` and `ts_GC`, or `LogRejected(NotLeader)`.
    KairosReport {
        table: String,
        shard: u32,
        client: u64,
        seq: u64,
        local_wm: Timestamp,
        c_freshness: Timestamp,
    },
    /// Admin, the second step (§5.7 steps 3-4), sent to every node: the shard now lives at
    /// `placement`. A node of `placement.replicas` gets `snapshot` (the frozen state), writes
    /// it as the first entry of the new group's log and starts serving it; every other node
    /// stops its replica of the old group and records where the shard went. Idempotent.
    AdoptShard {
        table: String,
        shard: u32,
        placement: ShardMove,
        snapshot: Option<Snapshot>,
    },
}

/// What a log-table write does to its key: the key operations of `LogOp`, evaluated when
/// applied (rifl.md §2.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogWriteOp {
    Put(Bytes),
    Delete,
    /// A conditional put (`Some`) or delete (`None`): `LogOp::Cond`.
    Cond {
        expect: Expect,
        put: Option<Bytes>,
    },
    /// A counter change: `LogOp::Add`.
    Add(i64),
}

impl LogWriteOp {
    /// The value the write stores, if any (what the node's value limit applies to).
    pub fn value(&self) -> Option<&Bytes> {
        match self {
            LogWriteOp::Put(v) | LogWriteOp::Cond { put: Some(v), .. } => Some(v),
            LogWriteOp::Delete | LogWriteOp::Cond { put: None, .. } | LogWriteOp::Add(_) => None,
        }
    }

    /// Bytes the write carries besides its key (an upper bound of what its log entry adds).
    pub fn payload_len(&self) -> usize {
        match self {
            LogWriteOp::Put(v) => v.len(),
            LogWriteOp::Delete | LogWriteOp::Add(_) => 0,
            LogWriteOp::Cond { expect, put } => {
                expect.encoded_len() + put.as_ref().map_or(0, |v| v.len())
            }
        }
    }
}

impl From<LogWriteOp> for crate::log::LogOp {
    fn from(op: LogWriteOp) -> crate::log::LogOp {
        use crate::log::LogOp;
        match op {
            LogWriteOp::Put(v) => LogOp::Put(v),
            LogWriteOp::Delete => LogOp::Delete,
            LogWriteOp::Cond { expect, put } => LogOp::Cond { expect, put },
            LogWriteOp::Add(delta) => LogOp::Add(delta),
        }
    }
}

/// The engine of a table. Only `log` tables are named; the `rc` (Kite) keyspace is the
/// default, tableless one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableEngine {
    Log,
}

/// When a write is acknowledged (ORCA §1.3 `PersistenceMode`, with CAD).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableDurability {
    /// Synchronous: fsynced on a majority before the acknowledgement (group commit).
    Sync,
    /// Asynchronous: persisted in the background; no durability check on reads.
    Async,
    /// Consistency-aware durability: asynchronous writes, reads made durable first.
    Cad,
}

/// How writes replicate before the acknowledgement (ORCA §1.3 `ReplicationMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableReplication {
    /// Buffered on the leader only.
    Async,
    /// Held in the memory of a majority.
    Sync,
}

/// Which nodes serve reads (ORCA §1.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableReads {
    Leader,
    ActiveSet,
    Any,
}

/// The timer preset of a table's shards (ORCA §3.4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TableTimers {
    /// §3.4 defaults (`hb` 30 ms, `mt` 100 ms, `rt` 500 ms): a LAN.
    #[default]
    Default,
    /// §3.4 geo preset (`hb` 25 ms, `mt` 150 ms, `rt` 750 ms): a WAN RTT of about 35 ms.
    Geo,
}

/// A table definition, identical on every node of the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableDef {
    pub name: String,
    pub engine: TableEngine,
    pub durability: TableDurability,
    /// Ignored (always synchronous) for `Sync` durability.
    pub replication: TableReplication,
    pub reads: TableReads,
    pub shards: u32,
    /// Encoded as a trailing extension of `CreateTable` and `Tables` (absent: `Default`).
    pub timers: TableTimers,
    /// Preferred leaders: shard `i`'s is `leaders[i % len]`, which stands first in its
    /// elections (empty: no preference). Extension 2 of `CreateTable` and `Tables`.
    pub leaders: Vec<NodeId>,
    /// Whether the table takes transactions, and how they are made serializable (extension 3
    /// of `CreateTable` and `Tables`; absent: `None`).
    pub txn: TableTxn,
    /// Where a Kairos table's transactions are validated (extension 4 of `CreateTable` and
    /// `Tables`, written only when some table is not `Server`; absent: `Server`).
    pub validation: TableValidation,
}

/// Where a Kairos table's transactions are validated (kairos.md §1.3, §3.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TableValidation {
    /// In each shard's own log (server-side placement, §9.12); also every non-Kairos table.
    #[default]
    Server,
    /// By `V` validators, `validator(key) = hash(key) mod V` (§1.3 "CV", §4): the shards of
    /// the companion table [`validators_table`], created with this one. This table's shards
    /// only replicate the writes (§5.5 `ReplicateReq`).
    Sharded(u32),
    /// This table is a Kairos table's companion: its shards are the validators of the table
    /// [`validated_table`] names (validate-only: no values, only timestamps).
    Validators,
}

/// The most validators of a `--validation sharded:V` table (each is a shard of its companion
/// table, so the shard bound holds for it too).
pub const MAX_VALIDATORS: u32 = 64;

/// The most keys of one [`Request::LogReadMany`] (a client splits longer lists). With the
/// largest values the reply may still exceed the node's frame limit: the node then refuses
/// it as `Invalid`, and the keys are read in smaller requests.
pub const MAX_READ_MANY_KEYS: usize = 64;

/// The suffix of a companion validator table's name (not a character user names may have).
pub const VALIDATORS_SUFFIX: &str = ".validators";

/// The companion table holding the validators of the sharded Kairos table `table`.
pub fn validators_table(table: &str) -> String {
    format!("{table}{VALIDATORS_SUFFIX}")
}

/// The table whose validators the companion table `companion` holds (`None`: not a
/// companion's name).
pub fn validated_table(companion: &str) -> Option<&str> {
    companion.strip_suffix(VALIDATORS_SUFFIX).filter(|t| !t.is_empty())
}

impl TableDef {
    /// A sharded Kairos table's companion (its validators, kairos.md §3.2 "CV"): as durable
    /// and read at the leader as the table (a vote must be durable before it is answered),
    /// one shard per validator, the same timers and preferred leaders (at most one per
    /// validator). `None` for any other table.
    pub fn validators_def(&self) -> Option<TableDef> {
        let TableValidation::Sharded(v) = self.validation else { return None };
        Some(TableDef {
            name: validators_table(&self.name),
            shards: v,
            leaders: self.leaders.iter().copied().take(v as usize).collect(),
            validation: TableValidation::Validators,
            ..self.clone()
        })
    }
}

/// A table's transactions (issue #18: tables opt in at creation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TableTxn {
    /// Single-key operations only.
    #[default]
    None,
    /// RIFL's client-driven two-phase commit with locks (rifl.md §5.8).
    Rifl,
    /// Kairos (kairos.md): OCC on commit timestamps, validated by Algorithm 3 in the shard's
    /// log (server-side validation, §9.12), over RIFL's prepare/decide machinery.
    Kairos,
}

impl TableDef {
    /// The table's number in peer messages: CRC32C of its name. Two names with the same
    /// number cannot coexist in one catalog (the second create is refused).
    pub fn id(&self) -> u32 {
        table_id(&self.name)
    }
}

/// See [`TableDef::id`].
pub fn table_id(name: &str) -> u32 {
    crc32c::crc32c(name.as_bytes())
}

/// The shard of `key` in a table of `shards` shards: `crc32c(key) mod shards`. Stable across
/// versions and platforms (client and node compute it independently; changing it would move
/// keys between shards).
pub fn shard_of(key: &[u8], shards: u32) -> u32 {
    crc32c::crc32c(key) % shards.max(1)
}

/// Why a log-table request was not served (ORCA §2.1 `Error`). Each variant says what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogFailure {
    /// Not the shard's leader (or its lease lapsed). Retry at `hint`, else at another node,
    /// with the same `(client_id, seq)`.
    NotLeader { hint: Option<NodeId> },
    /// A follower without an active-set lease (R2). Retry at another node after ~10 ms.
    NotInActiveSet,
    /// The request waited too long (durability, majority, session token). Outcome unknown for
    /// a write: retry with the same `seq`.
    Timeout,
    /// The shard has no ready leader yet (election, sync phase). Retry shortly.
    Unavailable,
    /// The request is invalid (empty key, seq 0). Do not retry.
    Invalid(String),
    /// The shard moved, or is moving, to `replicas` (rifl.md §5.7 step 4, `UnknownOwner`):
    /// retry there with the same `(client_id, seq)`; the completion record moved too.
    Moved { replicas: Vec<NodeId> },
    /// rifl.md §5.9 `Retry(Locked)`: a transaction holds the key's lock until its decision is
    /// applied. Nothing was done; retry shortly with the same `(client_id, seq)`.
    Locked,
}

/// Faults injected by a node's transport on its outbound link to one peer. The kernel here has
/// no netem, so wide-area delay and lossy or cut links between real processes come from this.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct LinkFault {
    /// Added one-way delay, microseconds.
    pub delay_us: u64,
    /// Uniform random extra delay in `[0, jitter_us]`, microseconds (reorders nothing: a link
    /// stays FIFO, as TCP is).
    pub jitter_us: u64,
    /// Probability of dropping a message, in parts per million.
    pub loss_ppm: u32,
    /// Drop everything.
    pub partitioned: bool,
}

impl LinkFault {
    pub fn is_clear(&self) -> bool {
        *self == LinkFault::default()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientResponse {
    pub corr: u64,
    pub body: Response,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    SessionOpened {
        session: SessionId,
    },
    SessionClosed,
    /// Result of a read: the value (`None` if absent) and the version it belongs to.
    Value {
        value: Option<Bytes>,
        cs: Carstamp,
    },
    /// Result of a write or delete: the version it created.
    Written {
        cs: Carstamp,
    },
    /// Result of an RMW: the value it observed (and its version), the version it created
    /// (`None` for a weak CAS that failed locally), and for a CAS whether it swapped.
    Rmw {
        observed: Option<Bytes>,
        observed_cs: Carstamp,
        written: Option<Carstamp>,
        swapped: bool,
    },
    Status(NodeStatus),
    FaultSet,
    /// The answer to `Ping`.
    Pong,
    Error {
        code: ErrorCode,
        message: String,
    },
    /// ORCA §2.1 `WriteAck`: the index of the write's log entry (the RPC's executing entry)
    /// and what its evaluation returned (rifl.md §5.3: the same for every retry). `outcome`
    /// is a trailing extension, absent when `Done` (an older client reads plain writes).
    LogWritten {
        index: LogIndex,
        outcome: WriteOutcome,
    },
    /// A participant's votes on the objects of a `TxnPrepare`, by prepare id (a participant
    /// may stop at the first `Abort`: objects after it have no vote). `decided`: the prepare
    /// held every object, so the participant applied the decision at once, `Commit` if all
    /// were `Prepared` (§5.8.2 P3), else `Abort`: no decision needs to be sent. (A node that
    /// answers `false` to an aborted one gets the client's `Abort` decision, as before.)
    TxnVotes {
        votes: Vec<(u64, Vote)>,
        decided: bool,
    },
    /// A `TxnDecide` is applied (durably, like a write).
    TxnDecided,
    /// A Kairos shard leader's `WM` (min reported `local_wm` over live reports) and `ts_GC`
    /// (monotone), after folding a `KairosReport` (kairos.md §5.9).
    KairosWatermarks {
        wm: Timestamp,
        ts_gc: Timestamp,
    },
    /// The answer to [`Request::LogReadMany`]: `(value, update_index)` per key, in the
    /// request's order, all served by one leader in one epoch.
    LogValues {
        values: Vec<(Option<Bytes>, LogIndex)>,
        served_by: NodeId,
        epoch: u32,
    },
    /// The answer to [`Request::ReleaseReservations`].
    ReservationsReleased,
    /// ORCA §2.1 `ReadResult`.
    LogValue {
        value: Option<Bytes>,
        update_index: LogIndex,
        served_by: NodeId,
        epoch: u32,
        /// A Kairos table's version timestamp of the value (kairos.md §4 `GetResp.vts`); a
        /// trailing extension, absent for other tables.
        vts: Option<Timestamp>,
        /// A Kairos key's `W` (kairos.md §4 `GetResp.w_mean_ns`, §5.10): the mean gap between
        /// its last committed writes' timestamps, once it has two. A trailing extension after
        /// `vts` (which is then encoded, `ZERO` if absent).
        w_mean_ns: Option<u64>,
    },
    LogRejected(LogFailure),
    /// `created`: false if an identical definition already existed.
    TableCreated {
        created: bool,
    },
    Tables(Vec<TableDef>),
    /// The lease service's answer to `RenewLease` / `LeaseInfo`.
    Lease(LeaseStatus),
    /// `FreezeShard` is done: where the shard goes and its final state, records and
    /// watermarks included (`None`: the shard already lives at `placement`, nothing to
    /// install; the move only has to be announced to nodes that missed it).
    ShardFrozen {
        placement: ShardMove,
        snapshot: Option<Snapshot>,
    },
    /// `AdoptShard` is done (`started`: this node now serves the new group).
    ShardAdopted {
        started: bool,
    },
    /// A message the node sends on its own, not an answer: it travels with correlation
    /// number [`PUSH_CORR`] (no request uses it). `topic` says what it is ([`push_topic`]);
    /// a client ignores topics it does not know.
    Push {
        topic: u32,
        body: Bytes,
    },
}

/// The correlation number of a [`Response::Push`]: clients number their requests from 1.
pub const PUSH_CORR: u64 = 0;

/// What a [`Response::Push`] is about.
pub mod push_topic {
    /// The node is shutting down gracefully and will close this connection: go elsewhere.
    /// The body is the node's id (u32, little-endian).
    pub const NODE_STOPPING: u32 = 1;
    /// kairos.md §5.14.2: a transaction installed a newer version of a key this connection
    /// is a sharer of. The body is a [`super::KairosInvalidate`].
    pub const KAIROS_INVALIDATE: u32 = 2;
    /// kairos.md §5.14.2, (Strata): the shard's leader stopped leading and forgot its
    /// sharers; the connection's cached entries of that shard will not be invalidated any
    /// more. The body is a [`super::KairosInvalidate`] naming the table and shard (no key).
    pub const KAIROS_SHARERS_DROPPED: u32 = 3;
}

/// The body of a Kairos push (`push_topic::KAIROS_INVALIDATE`, `KAIROS_SHARERS_DROPPED`):
/// `Invalidate{key, new_vts}` of kairos.md §4, with the table and shard it belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KairosInvalidate {
    pub table: String,
    pub shard: u32,
    /// The key (empty for `KAIROS_SHARERS_DROPPED`).
    pub key: Bytes,
    /// The key's newly installed version (`ZERO` for `KAIROS_SHARERS_DROPPED`).
    pub new_vts: Timestamp,
}

impl Encode for KairosInvalidate {
    fn encode(&self, out: &mut BytesMut) {
        put_bytes(out, self.table.as_bytes());
        out.put_u32_le(self.shard);
        put_bytes(out, &self.key);
        self.new_vts.encode(out);
    }
}

impl Decode for KairosInvalidate {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(KairosInvalidate {
            table: r.string()?,
            shard: r.u32()?,
            key: r.bytes()?,
            new_vts: Timestamp::decode(r)?,
        })
    }
}

/// The role of a shard replica, as reported by `Status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ShardRole {
    #[default]
    Follower,
    Candidate,
    Leader,
}

/// One log-table shard replica on one node (ORCA §3): role, indexes, durability, active set.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ShardStatus {
    pub table: String,
    pub shard: u32,
    pub role: ShardRole,
    pub leader: Option<NodeId>,
    pub epoch: u32,
    pub last_index: LogIndex,
    pub persisted_index: LogIndex,
    pub applied_index: LogIndex,
    /// DI at the leader, `DI_F` at a follower.
    pub durable_index: LogIndex,
    /// At the leader (active-set reads): the active set, leader first. Empty elsewhere.
    pub active_set: Vec<NodeId>,
    /// A follower holding a valid active-set lease, or a ready leader.
    pub serving: bool,
    /// Reads this replica answered since it started (`LogStats::reads_served`; a read a
    /// follower forwarded counts at the leader that served it). With `reads_made_durable`,
    /// a trailing extension of `NodeStatus` (absent from older nodes: 0).
    pub reads_served: u64,
    /// Reads that found their data not yet durable at the leader and waited for MakeDurable
    /// (ORCA §5.5.1, `LogStats::reads_made_durable`): the reads that triggered durability.
    pub reads_made_durable: u64,
    /// Transaction locks this replica's applied state holds (`LogReplica::locks`): objects
    /// prepared and not yet decided. Extension 3 of `NodeStatus` (absent from older nodes: 0).
    pub locks: u64,
    /// Explicit invalidation (kairos.md §5.14.2) at a Kairos shard's leader: sharer
    /// registrations held now (a key and a connection each) and invalidations pushed since
    /// the node started; both 0 in lease mode (§7 inv. 12). Extension 4 of `NodeStatus`.
    pub kairos_sharers: u64,
    pub kairos_invalidations: u64,
    /// At a RIFL shard's leader since it started leading (`LogStats`): transactions' reads
    /// answered with what a pending transaction will leave, single-participant prepares
    /// answered `Abort` without an entry (the leader's foresight), and reads for update held
    /// back by another's reservation. Extension 5 of `NodeStatus`.
    pub txn_reads_foreseen: u64,
    pub txn_prepares_foreseen_aborted: u64,
    pub txn_reads_held: u64,
}

/// What a node reports about itself.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct NodeStatus {
    pub node: NodeId,
    pub uptime_ms: u64,
    pub keys: u64,
    pub sessions: u64,
    pub pending_writes: u64,
    pub bad_client_frames: u64,
    pub bad_peer_frames: u64,
    /// Kite §5.8: the node's machine epoch (bumped when it learned it missed writes).
    pub machine_epoch: u64,
    /// Barriers (releases, RMWs) completed on the fast path / through a `SLOW_RELEASE`.
    pub barriers_fast: u64,
    pub barriers_slow: u64,
    /// Relaxed accesses served through the slow path (out-of-epoch keys).
    pub slow_path_accesses: u64,
    pub peers: Vec<PeerStatus>,
    /// Every log-table shard replica on this node.
    pub shards: Vec<ShardStatus>,
    /// The client connections and their bounds (extension 2; zero from an older node).
    pub connections: ConnectionStats,
}

/// Client connections of a node and what their bounds did (`docs/design.md`, "Limits and
/// bounds"). Gauges are "now", counters "since the node started".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ConnectionStats {
    /// Client connections open now.
    pub open: u64,
    /// Connections refused at `max_connections` or `max_connections_per_ip`.
    pub refused: u64,
    /// Bytes held for client connections now: input read and not yet answered, replies not
    /// yet written to their sockets.
    pub buffered_bytes: u64,
    /// Connections held back now because their budget (`max_connection_buffer_bytes`) is
    /// spent: the node reads none of their bytes, or admits none of their requests, until
    /// their replies drain (backpressure).
    pub paused: u64,
    /// Connections closed after `idle_timeout_ms` without progress.
    pub closed_idle: u64,
    /// Connections closed because a frame was not completed within `partial_frame_timeout_ms`.
    pub closed_slow_frame: u64,
    /// Requests refused because the connection's role does not allow them (`Forbidden`).
    pub forbidden: u64,
    /// Requests whose RIFL lease no grant could produce (a timestamp far beyond the cluster
    /// clock, an expiration beyond the lease term): refused `BadEnvelope` (issue #17).
    pub invalid_envelopes: u64,
}

impl ConnectionStats {
    fn fields(&self) -> [u64; 8] {
        [
            self.open,
            self.refused,
            self.buffered_bytes,
            self.paused,
            self.closed_idle,
            self.closed_slow_frame,
            self.forbidden,
            self.invalid_envelopes,
        ]
    }

    fn fields_mut(&mut self) -> [&mut u64; 8] {
        [
            &mut self.open,
            &mut self.refused,
            &mut self.buffered_bytes,
            &mut self.paused,
            &mut self.closed_idle,
            &mut self.closed_slow_frame,
            &mut self.forbidden,
            &mut self.invalid_envelopes,
        ]
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PeerStatus {
    pub node: NodeId,
    pub addr: String,
    pub connected: bool,
    pub fault: LinkFault,
    pub messages_sent: u64,
    pub messages_dropped_by_fault: u64,
}

/// Error codes a node returns. Stable numbers; unknown ones decode as `Other`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    /// The request could not be decoded. Fix the client; the connection is closed.
    Malformed,
    /// The frame names another cluster. Point the client at the right endpoints.
    WrongCluster,
    /// The request tag is unknown to this node (older node, newer client).
    UnknownRequest,
    /// The frame exceeds the node's frame limit; the connection is closed.
    FrameTooLarge,
    /// The value exceeds the node's value limit. Split or shrink the value.
    ValueTooLarge,
    /// The key exceeds the node's key limit.
    KeyTooLarge,
    /// The session does not exist at this node (closed, or opened at another node).
    InvalidSession,
    /// The session has too many requests in flight. Wait for completions.
    QueueFull,
    /// The node is shutting down. Retry at another node.
    ShuttingDown,
    /// An argument is out of range.
    InvalidArgument,
    /// RIFL R-G4 `Stale`: a retry of an RPC the client had already acknowledged (its seq is
    /// below the `first_incomplete` the node learned). A client bug; nothing was executed.
    Stale,
    /// RIFL R-G4 `ExpiredLease`: the client's lease expired while the RPC was outstanding;
    /// nothing was executed now, and whether an earlier attempt took effect is unknown.
    ExpiredLease,
    /// RIFL R-D5 `Retry(InProgress)`: another attempt of the same RPC is executing at this
    /// node. Re-send the same RPC id after a short back-off.
    InProgress,
    /// The RIFL envelope breaks the client invariant (`first_incomplete <= seq <
    /// first_incomplete + 512`, non-zero ids; R-D7), or a request that must carry one has none.
    BadEnvelope,
    /// The connection carries no credentials (no client certificate) and the node requires
    /// them. Connect with a client certificate of the cluster's CA (`strata certs client`).
    Unauthenticated,
    /// The connection's role does not allow the request (e.g. a `read` client writing, a
    /// `write` client creating a table). Use credentials with the role the message names.
    Forbidden,
    /// The node refused the connection: it holds its maximum of client connections, in total
    /// (`max_connections`) or from the client's address (`max_connections_per_ip`). Sent with
    /// correlation number 0, then the connection closes. Close idle connections, or connect to
    /// another node.
    TooManyConnections,
    /// The node closed the connection: nothing moved in either direction for its idle
    /// timeout, or a frame was not completed within its partial-frame timeout. Sent with
    /// correlation number 0, then the connection closes. Reconnect (and keep reading replies).
    ConnectionTimedOut,
    /// The node cannot take this request now without growing what it must replicate past its
    /// bound: the key holds as many unacknowledged exactly-once results as its messages can
    /// carry (docs/design.md, "Limits and bounds"). Nothing was done. Retry after a short
    /// back-off; results are collected as their clients acknowledge them.
    Busy,
    Other(u16),
}

impl ErrorCode {
    pub fn to_u16(self) -> u16 {
        match self {
            ErrorCode::Malformed => 1,
            ErrorCode::WrongCluster => 2,
            ErrorCode::UnknownRequest => 3,
            ErrorCode::FrameTooLarge => 4,
            ErrorCode::ValueTooLarge => 5,
            ErrorCode::KeyTooLarge => 6,
            ErrorCode::InvalidSession => 7,
            ErrorCode::QueueFull => 8,
            ErrorCode::ShuttingDown => 9,
            ErrorCode::InvalidArgument => 10,
            ErrorCode::Stale => 11,
            ErrorCode::ExpiredLease => 12,
            ErrorCode::InProgress => 13,
            ErrorCode::BadEnvelope => 14,
            ErrorCode::Unauthenticated => 15,
            ErrorCode::Forbidden => 16,
            ErrorCode::TooManyConnections => 17,
            ErrorCode::ConnectionTimedOut => 18,
            ErrorCode::Busy => 19,
            ErrorCode::Other(c) => c,
        }
    }

    pub fn from_u16(c: u16) -> ErrorCode {
        match c {
            1 => ErrorCode::Malformed,
            2 => ErrorCode::WrongCluster,
            3 => ErrorCode::UnknownRequest,
            4 => ErrorCode::FrameTooLarge,
            5 => ErrorCode::ValueTooLarge,
            6 => ErrorCode::KeyTooLarge,
            7 => ErrorCode::InvalidSession,
            8 => ErrorCode::QueueFull,
            9 => ErrorCode::ShuttingDown,
            10 => ErrorCode::InvalidArgument,
            11 => ErrorCode::Stale,
            12 => ErrorCode::ExpiredLease,
            13 => ErrorCode::InProgress,
            14 => ErrorCode::BadEnvelope,
            15 => ErrorCode::Unauthenticated,
            16 => ErrorCode::Forbidden,
            17 => ErrorCode::TooManyConnections,
            18 => ErrorCode::ConnectionTimedOut,
            19 => ErrorCode::Busy,
            c => ErrorCode::Other(c),
        }
    }
}

// ---- encoding ----

impl Encode for LinkFault {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u64_le(self.delay_us);
        out.put_u64_le(self.jitter_us);
        out.put_u32_le(self.loss_ppm);
        put_bool(out, self.partitioned);
    }
}
impl Decode for LinkFault {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        let fault = LinkFault {
            delay_us: r.u64()?,
            jitter_us: r.u64()?,
            loss_ppm: r.u32()?,
            partitioned: r.bool()?,
        };
        if fault.loss_ppm > 1_000_000 {
            return Err(DecodeError::Invalid { what: "loss_ppm", value: fault.loss_ppm as u64 });
        }
        Ok(fault)
    }
}

impl Encode for ClientRequest {
    fn encode(&self, out: &mut BytesMut) {
        use request_tag::*;
        let tag = match &self.body {
            Request::OpenSession => OPEN_SESSION,
            Request::CloseSession { .. } => CLOSE_SESSION,
            Request::Get { .. } => GET,
            Request::Put { .. } => PUT,
            Request::Delete { .. } => DELETE,
            Request::Release { .. } => RELEASE,
            Request::Acquire { .. } => ACQUIRE,
            Request::Faa { .. } => FAA,
            Request::Cas { .. } => CAS,
            Request::Status => STATUS,
            Request::Ping => PING,
            Request::SetFault { .. } => SET_FAULT,
            Request::LogWrite { .. } => LOG_WRITE,
            Request::LogRead { .. } => LOG_READ,
            Request::LogReadMany { .. } => LOG_READ_MANY,
            Request::ReleaseReservations { .. } => RELEASE_RESERVATIONS,
            Request::CreateTable { .. } => CREATE_TABLE,
            Request::ListTables => LIST_TABLES,
            Request::RenewLease { .. } => RENEW_LEASE,
            Request::LeaseInfo { .. } => LEASE_INFO,
            Request::FreezeShard { .. } => FREEZE_SHARD,
            Request::AdoptShard { .. } => ADOPT_SHARD,
            Request::TxnPrepare { .. } => TXN_PREPARE,
            Request::TxnDecide { .. } => TXN_DECIDE,
            Request::KairosReport { .. } => KAIROS_REPORT,
        };
        out.put_u8(tag);
        out.put_u64_le(self.corr);
        put_option(out, &self.rifl, |o, e| e.encode(o));
        match &self.body {
            Request::OpenSession | Request::Status | Request::ListTables | Request::Ping => {}
            Request::RenewLease { lease_id } | Request::LeaseInfo { lease_id } => {
                out.put_u64_le(*lease_id)
            }
            Request::LogWrite { table, key, op, immediate } => {
                put_bytes(out, table.as_bytes());
                put_bytes(out, key);
                match op {
                    LogWriteOp::Put(v) => {
                        out.put_u8(0);
                        put_bytes(out, v);
                    }
                    LogWriteOp::Delete => out.put_u8(1),
                    LogWriteOp::Cond { expect, put } => {
                        out.put_u8(2);
                        expect.encode(out);
                        put_value(out, put);
                    }
                    LogWriteOp::Add(delta) => {
                        out.put_u8(3);
                        out.put_i64_le(*delta);
                    }
                }
                put_bool(out, *immediate);
            }
            Request::TxnPrepare { table, shard, read_only, all, ops, kairos } => {
                put_bytes(out, table.as_bytes());
                out.put_u32_le(*shard);
                put_bool(out, *read_only);
                put_seq(out, all, |o, x| x.encode(o));
                put_seq(out, ops, |o, x| x.encode(o));
                if let Some(k) = kairos {
                    k.encode(out);
                }
            }
            Request::TxnDecide { table, shard, decision, seqs } => {
                put_bytes(out, table.as_bytes());
                out.put_u32_le(*shard);
                decision.encode(out);
                put_seq(out, seqs, |o, s| o.put_u64_le(*s));
            }
            Request::KairosReport { table, shard, client, seq, local_wm, c_freshness } => {
                put_bytes(out, table.as_bytes());
                out.put_u32_le(*shard);
                out.put_u64_le(*client);
                out.put_u64_le(*seq);
                local_wm.encode(out);
                c_freshness.encode(out);
            }
            Request::LogRead { table, key, min_index, sharer, intent } => {
                put_bytes(out, table.as_bytes());
                put_bytes(out, key);
                put_option(out, min_index, |o, i| i.encode(o));
                if *sharer || intent.foresees() {
                    put_bool(out, *sharer);
                }
                if intent.foresees() {
                    intent.encode(out);
                }
            }
            Request::LogReadMany { table, keys, min_index, intent } => {
                put_bytes(out, table.as_bytes());
                put_seq(out, keys, |o, k| put_bytes(o, k));
                put_option(out, min_index, |o, i| i.encode(o));
                intent.encode(out);
            }
            Request::ReleaseReservations { table, keys, reserver } => {
                put_bytes(out, table.as_bytes());
                put_seq(out, keys, |o, k| put_bytes(o, k));
                out.put_u64_le(*reserver);
            }
            Request::CreateTable { def } => {
                def.encode(out);
                put_table_extension(out, std::slice::from_ref(def));
            }
            Request::CloseSession { session } => session.encode(out),
            Request::Get { session, key }
            | Request::Delete { session, key }
            | Request::Acquire { session, key } => {
                session.encode(out);
                put_bytes(out, key);
            }
            Request::Put { session, key, value } | Request::Release { session, key, value } => {
                session.encode(out);
                put_bytes(out, key);
                put_bytes(out, value);
            }
            Request::Faa { session, key, delta } => {
                session.encode(out);
                put_bytes(out, key);
                out.put_u64_le(*delta);
            }
            Request::Cas { session, key, expected, new, weak } => {
                session.encode(out);
                put_bytes(out, key);
                put_value(out, expected);
                put_bytes(out, new);
                put_bool(out, *weak);
            }
            Request::SetFault { peer, fault } => {
                put_option(out, peer, |o, p| p.encode(o));
                fault.encode(out);
            }
            Request::FreezeShard { table, shard, replicas } => {
                put_bytes(out, table.as_bytes());
                out.put_u32_le(*shard);
                put_seq(out, replicas, |o, n| n.encode(o));
            }
            Request::AdoptShard { table, shard, placement, snapshot } => {
                put_bytes(out, table.as_bytes());
                out.put_u32_le(*shard);
                placement.encode(out);
                put_option(out, snapshot, |o, s| s.encode(o));
            }
        }
    }
}

impl Decode for ClientRequest {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        use request_tag::*;
        let tag = r.u8()?;
        let corr = r.u64()?;
        let rifl = r.option(Rifl::decode)?;
        let body = match tag {
            OPEN_SESSION => Request::OpenSession,
            CLOSE_SESSION => Request::CloseSession { session: SessionId::decode(r)? },
            GET => Request::Get { session: SessionId::decode(r)?, key: r.bytes()? },
            PUT => {
                Request::Put { session: SessionId::decode(r)?, key: r.bytes()?, value: r.bytes()? }
            }
            DELETE => Request::Delete { session: SessionId::decode(r)?, key: r.bytes()? },
            RELEASE => Request::Release {
                session: SessionId::decode(r)?,
                key: r.bytes()?,
                value: r.bytes()?,
            },
            ACQUIRE => Request::Acquire { session: SessionId::decode(r)?, key: r.bytes()? },
            FAA => {
                Request::Faa { session: SessionId::decode(r)?, key: r.bytes()?, delta: r.u64()? }
            }
            CAS => Request::Cas {
                session: SessionId::decode(r)?,
                key: r.bytes()?,
                expected: get_value(r)?,
                new: r.bytes()?,
                weak: r.bool()?,
            },
            STATUS => Request::Status,
            PING => Request::Ping,
            SET_FAULT => {
                Request::SetFault { peer: r.option(NodeId::decode)?, fault: LinkFault::decode(r)? }
            }
            LOG_WRITE => Request::LogWrite {
                table: r.string()?,
                key: r.bytes()?,
                op: match r.u8()? {
                    0 => LogWriteOp::Put(r.bytes()?),
                    1 => LogWriteOp::Delete,
                    2 => LogWriteOp::Cond { expect: Expect::decode(r)?, put: get_value(r)? },
                    3 => LogWriteOp::Add(r.i64()?),
                    v => {
                        return Err(DecodeError::Invalid { what: "log write op", value: v as u64 })
                    }
                },
                immediate: r.bool()?,
            },
            TXN_PREPARE => Request::TxnPrepare {
                table: r.string()?,
                shard: r.u32()?,
                read_only: r.bool()?,
                all: r.seq(TxnObject::decode)?,
                ops: r.seq(TxnOp::decode)?,
                kairos: if r.has_more() { Some(KairosPrepare::decode(r)?) } else { None },
            },
            TXN_DECIDE => Request::TxnDecide {
                table: r.string()?,
                shard: r.u32()?,
                decision: Decision::decode(r)?,
                seqs: r.seq(|r| r.u64())?,
            },
            KAIROS_REPORT => Request::KairosReport {
                table: r.string()?,
                shard: r.u32()?,
                client: r.u64()?,
                seq: r.u64()?,
                local_wm: Timestamp::decode(r)?,
                c_freshness: Timestamp::decode(r)?,
            },
            LOG_READ => Request::LogRead {
                table: r.string()?,
                key: r.bytes()?,
                min_index: r.option(LogIndex::decode)?,
                sharer: if r.has_more() { r.bool()? } else { false },
                intent: match r.has_more() {
                    true => ReadIntent::decode(r)?,
                    false => ReadIntent::Plain,
                },
            },
            LOG_READ_MANY => Request::LogReadMany {
                table: r.string()?,
                keys: r.seq(|r| r.bytes())?,
                min_index: r.option(LogIndex::decode)?,
                intent: ReadIntent::decode(r)?,
            },
            RELEASE_RESERVATIONS => Request::ReleaseReservations {
                table: r.string()?,
                keys: r.seq(|r| r.bytes())?,
                reserver: r.u64()?,
            },
            CREATE_TABLE => {
                let mut def = TableDef::decode(r)?;
                get_table_extension(r, std::slice::from_mut(&mut def))?;
                Request::CreateTable { def }
            }
            LIST_TABLES => Request::ListTables,
            RENEW_LEASE => Request::RenewLease { lease_id: r.u64()? },
            LEASE_INFO => Request::LeaseInfo { lease_id: r.u64()? },
            FREEZE_SHARD => Request::FreezeShard {
                table: r.string()?,
                shard: r.u32()?,
                replicas: r.seq(NodeId::decode)?,
            },
            ADOPT_SHARD => Request::AdoptShard {
                table: r.string()?,
                shard: r.u32()?,
                placement: ShardMove::decode(r)?,
                snapshot: r.option(Snapshot::decode)?,
            },
            tag => return Err(DecodeError::UnknownTag { tag }),
        };
        Ok(ClientRequest { corr, rifl, body })
    }
}

/// Reads only the tag and correlation number of a request payload, so that a node can answer
/// a request it cannot fully decode (unknown tag, bad field) with an error the client can match.
pub fn peek_request_header(payload: &[u8]) -> Option<(u8, u64)> {
    if payload.len() < 9 {
        return None;
    }
    Some((payload[0], u64::from_le_bytes(payload[1..9].try_into().ok()?)))
}

impl Encode for PeerStatus {
    fn encode(&self, out: &mut BytesMut) {
        self.node.encode(out);
        put_bytes(out, self.addr.as_bytes());
        put_bool(out, self.connected);
        self.fault.encode(out);
        out.put_u64_le(self.messages_sent);
        out.put_u64_le(self.messages_dropped_by_fault);
    }
}
impl Decode for PeerStatus {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(PeerStatus {
            node: NodeId::decode(r)?,
            addr: r.string()?,
            connected: r.bool()?,
            fault: LinkFault::decode(r)?,
            messages_sent: r.u64()?,
            messages_dropped_by_fault: r.u64()?,
        })
    }
}

impl Encode for NodeStatus {
    fn encode(&self, out: &mut BytesMut) {
        self.node.encode(out);
        for v in [
            self.uptime_ms,
            self.keys,
            self.sessions,
            self.pending_writes,
            self.bad_client_frames,
            self.bad_peer_frames,
            self.machine_epoch,
            self.barriers_fast,
            self.barriers_slow,
            self.slow_path_accesses,
        ] {
            out.put_u64_le(v);
        }
        put_seq(out, &self.peers, |o, p| p.encode(o));
        put_seq(out, &self.shards, |o, s| s.encode(o));
        // Extension 1: the shards' read counters.
        put_extension_each(out, &self.shards, |o, s| {
            o.put_u64_le(s.reads_served);
            o.put_u64_le(s.reads_made_durable);
        });
        // Extension 2: the connection counters, as a counted list of u64 (later counters are
        // appended; a decoder skips those it does not know).
        put_seq(out, &self.connections.fields(), |o, v| o.put_u64_le(*v));
        // Extension 3: the shards' transaction lock counts.
        put_extension_each(out, &self.shards, |o, s| o.put_u64_le(s.locks));
        // Extension 4: the shards' explicit-invalidation counters.
        put_extension_each(out, &self.shards, |o, s| {
            o.put_u64_le(s.kairos_sharers);
            o.put_u64_le(s.kairos_invalidations);
        });
        // Extension 5: the shards' transaction-read counters.
        put_extension_each(out, &self.shards, |o, s| {
            o.put_u64_le(s.txn_reads_foreseen);
            o.put_u64_le(s.txn_prepares_foreseen_aborted);
            o.put_u64_le(s.txn_reads_held);
        });
    }
}
impl Decode for NodeStatus {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        let mut status = NodeStatus {
            node: NodeId::decode(r)?,
            uptime_ms: r.u64()?,
            keys: r.u64()?,
            sessions: r.u64()?,
            pending_writes: r.u64()?,
            bad_client_frames: r.u64()?,
            bad_peer_frames: r.u64()?,
            machine_epoch: r.u64()?,
            barriers_fast: r.u64()?,
            barriers_slow: r.u64()?,
            slow_path_accesses: r.u64()?,
            peers: r.seq(PeerStatus::decode)?,
            shards: r.seq(ShardStatus::decode)?,
            connections: ConnectionStats::default(),
        };
        r.extension_each(&mut status.shards, |r, s| {
            s.reads_served = r.u64()?;
            s.reads_made_durable = r.u64()?;
            Ok(())
        })?;
        if r.has_more() {
            let values = r.seq(|r| r.u64())?;
            for (field, v) in status.connections.fields_mut().into_iter().zip(values) {
                *field = v;
            }
        }
        r.extension_each(&mut status.shards, |r, s| {
            s.locks = r.u64()?;
            Ok(())
        })?;
        r.extension_each(&mut status.shards, |r, s| {
            s.kairos_sharers = r.u64()?;
            s.kairos_invalidations = r.u64()?;
            Ok(())
        })?;
        r.extension_each(&mut status.shards, |r, s| {
            s.txn_reads_foreseen = r.u64()?;
            s.txn_prepares_foreseen_aborted = r.u64()?;
            s.txn_reads_held = r.u64()?;
            Ok(())
        })?;
        Ok(status)
    }
}

impl Encode for ClientResponse {
    fn encode(&self, out: &mut BytesMut) {
        use response_tag::*;
        let tag = match &self.body {
            Response::SessionOpened { .. } => SESSION_OPENED,
            Response::SessionClosed => SESSION_CLOSED,
            Response::Value { .. } => VALUE,
            Response::Written { .. } => WRITTEN,
            Response::Rmw { .. } => RMW,
            Response::Status(_) => STATUS,
            Response::FaultSet => FAULT_SET,
            Response::Pong => PONG,
            Response::Error { .. } => ERROR,
            Response::LogWritten { .. } => LOG_WRITTEN,
            Response::LogValue { .. } => LOG_VALUE,
            Response::LogValues { .. } => LOG_VALUES,
            Response::ReservationsReleased => RESERVATIONS_RELEASED,
            Response::LogRejected(_) => LOG_REJECTED,
            Response::TableCreated { .. } => TABLE_CREATED,
            Response::Tables(_) => TABLES,
            Response::Lease(_) => LEASE,
            Response::ShardFrozen { .. } => SHARD_FROZEN,
            Response::ShardAdopted { .. } => SHARD_ADOPTED,
            Response::Push { .. } => PUSH,
            Response::TxnVotes { .. } => TXN_VOTES,
            Response::TxnDecided => TXN_DECIDED,
            Response::KairosWatermarks { .. } => KAIROS_WATERMARKS,
        };
        out.put_u8(tag);
        out.put_u64_le(self.corr);
        match &self.body {
            Response::SessionOpened { session } => session.encode(out),
            Response::SessionClosed
            | Response::FaultSet
            | Response::Pong
            | Response::ReservationsReleased => {}
            Response::Value { value, cs } => {
                put_value(out, value);
                cs.encode(out);
            }
            Response::Written { cs } => cs.encode(out),
            Response::Rmw { observed, observed_cs, written, swapped } => {
                put_value(out, observed);
                observed_cs.encode(out);
                put_option(out, written, |o, c| c.encode(o));
                put_bool(out, *swapped);
            }
            Response::Status(s) => s.encode(out),
            Response::Error { code, message } => {
                out.put_u16_le(code.to_u16());
                put_bytes(out, message.as_bytes());
            }
            Response::LogWritten { index, outcome } => {
                index.encode(out);
                if *outcome != WriteOutcome::Done {
                    outcome.encode(out);
                }
            }
            Response::LogValue { value, update_index, served_by, epoch, vts, w_mean_ns } => {
                put_value(out, value);
                update_index.encode(out);
                served_by.encode(out);
                out.put_u32_le(*epoch);
                if vts.is_some() || w_mean_ns.is_some() {
                    vts.unwrap_or(Timestamp::ZERO).encode(out);
                }
                if let Some(w) = w_mean_ns {
                    out.put_u64_le(*w);
                }
            }
            Response::LogValues { values, served_by, epoch } => {
                put_seq(out, values, |o, (v, u)| {
                    put_value(o, v);
                    u.encode(o);
                });
                served_by.encode(out);
                out.put_u32_le(*epoch);
            }
            Response::LogRejected(f) => f.encode(out),
            Response::TableCreated { created } => put_bool(out, *created),
            Response::Lease(status) => status.encode(out),
            Response::ShardFrozen { placement, snapshot } => {
                placement.encode(out);
                put_option(out, snapshot, |o, s| s.encode(o));
            }
            Response::ShardAdopted { started } => put_bool(out, *started),
            Response::TxnVotes { votes, decided } => {
                put_seq(out, votes, |o, (seq, v)| {
                    o.put_u64_le(*seq);
                    v.encode(o);
                });
                put_bool(out, *decided);
            }
            Response::TxnDecided => {}
            Response::KairosWatermarks { wm, ts_gc } => {
                wm.encode(out);
                ts_gc.encode(out);
            }
            Response::Tables(defs) => {
                put_seq(out, defs, |o, d| d.encode(o));
                put_table_extension(out, defs);
            }
            Response::Push { topic, body } => {
                out.put_u32_le(*topic);
                put_bytes(out, body);
            }
        }
    }
}

impl Decode for ClientResponse {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        use response_tag::*;
        let tag = r.u8()?;
        let corr = r.u64()?;
        let body = match tag {
            SESSION_OPENED => Response::SessionOpened { session: SessionId::decode(r)? },
            SESSION_CLOSED => Response::SessionClosed,
            VALUE => Response::Value { value: get_value(r)?, cs: Carstamp::decode(r)? },
            WRITTEN => Response::Written { cs: Carstamp::decode(r)? },
            RMW => Response::Rmw {
                observed: get_value(r)?,
                observed_cs: Carstamp::decode(r)?,
                written: r.option(Carstamp::decode)?,
                swapped: r.bool()?,
            },
            STATUS => Response::Status(NodeStatus::decode(r)?),
            FAULT_SET => Response::FaultSet,
            PONG => Response::Pong,
            RESERVATIONS_RELEASED => Response::ReservationsReleased,
            ERROR => Response::Error { code: ErrorCode::from_u16(r.u16()?), message: r.string()? },
            LOG_WRITTEN => Response::LogWritten {
                index: LogIndex::decode(r)?,
                outcome: if r.has_more() { WriteOutcome::decode(r)? } else { WriteOutcome::Done },
            },
            LOG_VALUE => Response::LogValue {
                value: get_value(r)?,
                update_index: LogIndex::decode(r)?,
                served_by: NodeId::decode(r)?,
                epoch: r.u32()?,
                vts: if r.has_more() { Some(Timestamp::decode(r)?) } else { None },
                w_mean_ns: if r.has_more() { Some(r.u64()?) } else { None },
            },
            LOG_VALUES => Response::LogValues {
                values: r.seq(|r| Ok((get_value(r)?, LogIndex::decode(r)?)))?,
                served_by: NodeId::decode(r)?,
                epoch: r.u32()?,
            },
            LOG_REJECTED => Response::LogRejected(LogFailure::decode(r)?),
            TABLE_CREATED => Response::TableCreated { created: r.bool()? },
            LEASE => Response::Lease(LeaseStatus::decode(r)?),
            SHARD_FROZEN => Response::ShardFrozen {
                placement: ShardMove::decode(r)?,
                snapshot: r.option(Snapshot::decode)?,
            },
            SHARD_ADOPTED => Response::ShardAdopted { started: r.bool()? },
            TXN_VOTES => Response::TxnVotes {
                votes: r.seq(|r| Ok((r.u64()?, Vote::decode(r)?)))?,
                decided: r.bool()?,
            },
            TXN_DECIDED => Response::TxnDecided,
            KAIROS_WATERMARKS => Response::KairosWatermarks {
                wm: Timestamp::decode(r)?,
                ts_gc: Timestamp::decode(r)?,
            },
            TABLES => {
                let mut defs = r.seq(TableDef::decode)?;
                get_table_extension(r, &mut defs)?;
                Response::Tables(defs)
            }
            PUSH => Response::Push { topic: r.u32()?, body: r.bytes()? },
            tag => return Err(DecodeError::UnknownTag { tag }),
        };
        Ok(ClientResponse { corr, body })
    }
}

// ---- log tables ----

/// Stable one-byte codes of the table enums (never renumber).
fn enum_code<T: Copy + PartialEq>(all: &[(T, u8)], v: T) -> u8 {
    all.iter().find(|(x, _)| *x == v).map(|(_, c)| *c).expect("every variant has a code")
}
fn enum_from<T: Copy>(all: &[(T, u8)], c: u8, what: &'static str) -> Result<T, DecodeError> {
    all.iter()
        .find(|(_, x)| *x == c)
        .map(|(v, _)| *v)
        .ok_or(DecodeError::Invalid { what, value: c as u64 })
}
const ENGINES: [(TableEngine, u8); 1] = [(TableEngine::Log, 1)];
const DURABILITIES: [(TableDurability, u8); 3] =
    [(TableDurability::Sync, 1), (TableDurability::Async, 2), (TableDurability::Cad, 3)];
const REPLICATIONS: [(TableReplication, u8); 2] =
    [(TableReplication::Async, 1), (TableReplication::Sync, 2)];
const READS: [(TableReads, u8); 3] =
    [(TableReads::Leader, 1), (TableReads::ActiveSet, 2), (TableReads::Any, 3)];
const ROLES: [(ShardRole, u8); 3] =
    [(ShardRole::Follower, 0), (ShardRole::Candidate, 1), (ShardRole::Leader, 2)];
const TIMERS: [(TableTimers, u8); 2] = [(TableTimers::Default, 1), (TableTimers::Geo, 2)];
const TXNS: [(TableTxn, u8); 3] = [(TableTxn::None, 0), (TableTxn::Rifl, 1), (TableTxn::Kairos, 2)];

/// The fields of the first version; see `Decode for TableDef`.
impl Encode for TableDef {
    fn encode(&self, out: &mut BytesMut) {
        put_bytes(out, self.name.as_bytes());
        out.put_u8(enum_code(&ENGINES, self.engine));
        out.put_u8(enum_code(&DURABILITIES, self.durability));
        out.put_u8(enum_code(&REPLICATIONS, self.replication));
        out.put_u8(enum_code(&READS, self.reads));
        out.put_u32_le(self.shards);
    }
}
/// The fields of the first version of `TableDef`; the later ones travel in the message's
/// trailing extension ([`put_table_extension`]), so a definition from an older client decodes.
impl Decode for TableDef {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(TableDef {
            name: r.string()?,
            engine: enum_from(&ENGINES, r.u8()?, "table engine")?,
            durability: enum_from(&DURABILITIES, r.u8()?, "table durability")?,
            replication: enum_from(&REPLICATIONS, r.u8()?, "table replication")?,
            reads: enum_from(&READS, r.u8()?, "table reads")?,
            shards: r.u32()?,
            timers: TableTimers::Default,
            leaders: Vec::new(),
            txn: TableTxn::None,
            validation: TableValidation::Server,
        })
    }
}

/// The extensions of the messages carrying table definitions: 1, each one's timer preset;
/// 2, each one's preferred leaders; 3, its transactions; 4, where a Kairos table validates.
fn put_table_extension(out: &mut BytesMut, defs: &[TableDef]) {
    put_extension_each(out, defs, |o, d| o.put_u8(enum_code(&TIMERS, d.timers)));
    put_extension_each(out, defs, |o, d| put_seq(o, &d.leaders, |o, n| n.encode(o)));
    // Extension 3 only when some table takes transactions: an older node reads the rest.
    // (Extension 4 needs it before it: a table not validated server-side is a Kairos one.)
    let validation = defs.iter().any(|d| d.validation != TableValidation::Server);
    if validation || defs.iter().any(|d| d.txn != TableTxn::None) {
        put_extension_each(out, defs, |o, d| o.put_u8(enum_code(&TXNS, d.txn)));
    }
    // Extension 4 only when some table is not validated server-side (kairos.md §1.3).
    if validation {
        put_extension_each(out, defs, |o, d| match d.validation {
            TableValidation::Server => o.put_u8(0),
            TableValidation::Sharded(v) => {
                o.put_u8(1);
                o.put_u32_le(v);
            }
            TableValidation::Validators => o.put_u8(2),
        });
    }
}
fn get_table_extension(r: &mut Reader, defs: &mut [TableDef]) -> Result<(), DecodeError> {
    r.extension_each(defs, |r, d| {
        d.timers = enum_from(&TIMERS, r.u8()?, "table timers")?;
        Ok(())
    })?;
    r.extension_each(defs, |r, d| {
        d.leaders = r.seq(NodeId::decode)?;
        Ok(())
    })?;
    r.extension_each(defs, |r, d| {
        d.txn = enum_from(&TXNS, r.u8()?, "table transactions")?;
        Ok(())
    })?;
    r.extension_each(defs, |r, d| {
        d.validation = match r.u8()? {
            0 => TableValidation::Server,
            1 => TableValidation::Sharded(r.u32()?),
            2 => TableValidation::Validators,
            v => return Err(DecodeError::Invalid { what: "table validation", value: v as u64 }),
        };
        Ok(())
    })
}

mod failure_tag {
    pub const NOT_LEADER: u8 = 1;
    pub const NOT_IN_ACTIVE_SET: u8 = 2;
    pub const TIMEOUT: u8 = 3;
    pub const UNAVAILABLE: u8 = 4;
    pub const INVALID: u8 = 5;
    pub const MOVED: u8 = 6;
    pub const LOCKED: u8 = 7;
}

impl Encode for LogFailure {
    fn encode(&self, out: &mut BytesMut) {
        use failure_tag::*;
        match self {
            LogFailure::NotLeader { hint } => {
                out.put_u8(NOT_LEADER);
                put_option(out, hint, |o, n| n.encode(o));
            }
            LogFailure::NotInActiveSet => out.put_u8(NOT_IN_ACTIVE_SET),
            LogFailure::Timeout => out.put_u8(TIMEOUT),
            LogFailure::Unavailable => out.put_u8(UNAVAILABLE),
            LogFailure::Invalid(m) => {
                out.put_u8(INVALID);
                put_bytes(out, m.as_bytes());
            }
            LogFailure::Moved { replicas } => {
                out.put_u8(MOVED);
                put_seq(out, replicas, |o, n| n.encode(o));
            }
            LogFailure::Locked => out.put_u8(LOCKED),
        }
    }
}
impl Decode for LogFailure {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        use failure_tag::*;
        Ok(match r.u8()? {
            NOT_LEADER => LogFailure::NotLeader { hint: r.option(NodeId::decode)? },
            NOT_IN_ACTIVE_SET => LogFailure::NotInActiveSet,
            TIMEOUT => LogFailure::Timeout,
            UNAVAILABLE => LogFailure::Unavailable,
            INVALID => LogFailure::Invalid(r.string()?),
            MOVED => LogFailure::Moved { replicas: r.seq(NodeId::decode)? },
            LOCKED => LogFailure::Locked,
            v => return Err(DecodeError::Invalid { what: "log failure", value: v as u64 }),
        })
    }
}

/// The fields of the first version of `ShardStatus`; the read counters travel in
/// `NodeStatus`'s trailing extension.
impl Encode for ShardStatus {
    fn encode(&self, out: &mut BytesMut) {
        put_bytes(out, self.table.as_bytes());
        out.put_u32_le(self.shard);
        out.put_u8(enum_code(&ROLES, self.role));
        put_option(out, &self.leader, |o, n| n.encode(o));
        out.put_u32_le(self.epoch);
        for i in [self.last_index, self.persisted_index, self.applied_index, self.durable_index] {
            i.encode(out);
        }
        put_seq(out, &self.active_set, |o, n| n.encode(o));
        put_bool(out, self.serving);
    }
}
impl Decode for ShardStatus {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(ShardStatus {
            table: r.string()?,
            shard: r.u32()?,
            role: enum_from(&ROLES, r.u8()?, "shard role")?,
            leader: r.option(NodeId::decode)?,
            epoch: r.u32()?,
            last_index: LogIndex::decode(r)?,
            persisted_index: LogIndex::decode(r)?,
            applied_index: LogIndex::decode(r)?,
            durable_index: LogIndex::decode(r)?,
            active_set: r.seq(NodeId::decode)?,
            serving: r.bool()?,
            // In `NodeStatus`'s extension.
            reads_served: 0,
            reads_made_durable: 0,
            locks: 0,
            kairos_sharers: 0,
            kairos_invalidations: 0,
            txn_reads_foreseen: 0,
            txn_prepares_foreseen_aborted: 0,
            txn_reads_held: 0,
        })
    }
}
