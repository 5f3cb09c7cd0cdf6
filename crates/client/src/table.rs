//! Log tables (ORCA, `specs/orca.md` §2): a [`Table`] handle routes each key to its shard,
//! writes to the shard's leader and reads to a chosen node, and keeps the session token.
//!
//! * **Shards.** A key lives in shard `crc32c(key) mod shards` ([`strata_wire::client::shard_of`]),
//!   computed identically by the client and every node.
//! * **Writes** go to the node believed to lead the key's shard. `NotLeader { hint }` moves
//!   them to the hinted node, or round-robin without a hint; every retry carries the same
//!   `(client_id, seq)`, so the shard's replicated duplicate filter applies it at most once
//!   (§2.1). Followers do not proxy writes (§2.1 [DECISION]).
//! * **Reads** go to a node of the caller's choice ([`Table::get_at`]) or round-robin
//!   ([`Table::get`]); leader-only tables start at the believed leader. `NotInActiveSet` moves
//!   the read to the next node after a 10 ms back-off (§2.1).
//! * **Session token** (§2.3): the handle keeps `last_write_index` per shard — the largest
//!   index of its own acknowledged writes — and sends it as the reads' `min_index`, so a read
//!   never misses the handle's own acknowledged writes, whichever node serves it.
//!
//! A `Table` is a session: `&mut self` calls, one at a time. Open one per concurrent user.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use strata_wire::client::{
    shard_of, ErrorCode, LogFailure, LogWriteOp, Request, Response, TableDef,
};
use strata_wire::counter;
use strata_wire::log::{Expect, LogIndex, WriteOutcome};
use strata_wire::txn::{ReadIntent, Timestamp};
use strata_wire::{NodeId, Rifl, RpcId};
use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::client::ClientOptions;
use crate::conn::{Conn, ConnHandle, Push};
use crate::error::ClientError;
use crate::lease::LeaseKeeper;
use crate::session::unexpected;

/// Back-off before retrying at another node (§2.1: 10 ms after `NotInActiveSet`).
const RETRY_BACKOFF: Duration = Duration::from_millis(10);
/// Back-off before retrying a key a transaction holds (rifl.md §5.9): a write answered
/// `Locked`, whose decision usually follows within a round trip, or a read that waited at the
/// leader for the whole read timeout (a lock recovery has not released yet).
const LOCK_BACKOFF: Duration = Duration::from_millis(1);
/// How long a call retries when the client options set no request timeout.
const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(10);
/// How long a release of reads for update waits for its answer (`release_reservations`): past
/// the longest hold it would end, it has nothing left to save.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(1);

/// Options of one write (ORCA §2.1 `WriteOpts`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteOpts {
    /// Acknowledge only once the write is durable on a majority (and every active-set member):
    /// it is then never lost (G6).
    pub immediate: bool,
}

/// What a write returned: the index of the one entry that executed it (its version, for a
/// write that took effect) and its outcome (rifl.md §5.3 S5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    pub index: LogIndex,
    pub outcome: WriteOutcome,
}

/// The answer to a conditional write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conditional {
    /// The condition held: the write took effect and created this version.
    Applied { version: LogIndex },
    /// The condition did not hold: nothing changed; the key's version was `current`.
    Rejected { current: LogIndex },
}

/// A read's result (ORCA §2.1 `ReadResult`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRead {
    /// `None`: the key is absent (never written, or deleted).
    pub value: Option<Bytes>,
    /// The index of the write that produced this value (`ZERO` for a key never written).
    pub update_index: LogIndex,
    pub served_by: NodeId,
    pub epoch: u32,
    /// A Kairos table's version timestamp of the value (kairos.md §0 `vts`; `ZERO` for a key
    /// never written by a transaction, and for any other table).
    pub vts: Timestamp,
    /// A Kairos key's `W` (kairos.md §5.10): the mean gap between its last committed
    /// writes' timestamps, in nanoseconds, once it has two; `None` otherwise.
    pub w_mean_ns: Option<u64>,
}

#[derive(Clone)]
struct NodeSlot {
    addr: SocketAddr,
    conn: Option<Arc<ConnHandle>>,
    /// Learned from the node's status when first connected.
    id: Option<NodeId>,
}

/// A handle on one log table (module docs). Obtain it with [`crate::Client::table`]. A clone
/// shares the connections and the lease, and keeps its own session token and leader guesses.
#[derive(Clone)]
pub struct Table {
    /// Shared by the handle's clones: a transaction clones a handle per request it sends
    /// concurrently, so a clone copies no strings.
    def: Arc<TableDef>,
    opts: Arc<ClientOptions>,
    nodes: Vec<NodeSlot>,
    /// Per shard: the endpoint believed to lead it, shared by the handle's clones.
    leader: LeaderHints,
    /// Per shard: the session token (§2.3).
    last_write: Vec<Option<LogIndex>>,
    /// The handle's RIFL lease (its id is the client id of its writes).
    keeper: Arc<LeaseKeeper>,
    /// The lease id `next_seq` counts under (0 before the first write).
    client_id: u64,
    next_seq: u64,
    cursor: usize,
    /// Where the connections this handle opens send the nodes' pushes (the Kairos cache's
    /// invalidations, kairos.md §5.14.2); `None`: dropped.
    pushes: Option<broadcast::Sender<Push>>,
}

/// What went wrong at the last attempt, for the error returned once retries run out.
enum LastFailure {
    Unknown(ClientError),
    Refused(LogFailure),
}

impl Table {
    pub(crate) fn new(def: TableDef, endpoints: &[SocketAddr], opts: ClientOptions) -> Table {
        static SPREAD: AtomicUsize = AtomicUsize::new(0);
        let spread =
            (std::process::id() as usize).wrapping_add(SPREAD.fetch_add(1, Ordering::Relaxed));
        let shards = def.shards.max(1) as usize;
        Table {
            nodes: endpoints.iter().map(|&addr| NodeSlot { addr, conn: None, id: None }).collect(),
            leader: LeaderHints::new(shards),
            last_write: vec![None; shards],
            cursor: spread % endpoints.len().max(1),
            keeper: LeaseKeeper::new(endpoints.to_vec(), opts.clone()),
            def: Arc::new(def),
            opts: Arc::new(opts),
            client_id: 0,
            next_seq: 0,
            pushes: None,
        }
    }

    /// The connections this handle opens from now on hand the nodes' pushes to `pushes`.
    pub(crate) fn set_pushes(&mut self, pushes: broadcast::Sender<Push>) {
        self.pushes = Some(pushes);
    }

    /// The connection to the endpoint believed to lead `shard`, if open.
    pub(crate) fn leader_conn(&self, shard: u32) -> Option<Arc<ConnHandle>> {
        let i = self.leader.get(shard as usize)?;
        self.nodes[i].conn.clone()
    }

    /// [`Table::get`] at the believed leader, asking it to register this connection as a
    /// sharer of `key` (kairos.md §5.14.2: a Kairos table's explicit invalidation).
    pub(crate) async fn get_sharing(&mut self, key: Bytes) -> Result<LogRead, ClientError> {
        let shard = self.shard_of(&key) as usize;
        let start = self.leader.get(shard).unwrap_or(self.cursor);
        self.read(key, start, ReadKind::Sharer).await
    }

    /// [`Table::get`] for a transaction of a RIFL table, at the believed leader, which may
    /// answer with the value a pending single-participant transaction will leave: the
    /// transaction's prepare validates the version either way (docs/design.md, departures).
    /// `intent` [`ReadIntent::TxnForUpdate`]: the transaction means to write the key, and the
    /// leader holds the key's other reads for update back until this one's prepare arrives.
    pub(crate) async fn get_for_txn(
        &mut self,
        key: Bytes,
        intent: ReadIntent,
    ) -> Result<LogRead, ClientError> {
        let shard = self.shard_of(&key) as usize;
        let start = self.leader.get(shard).unwrap_or(self.cursor);
        self.read(key, start, ReadKind::Txn(intent)).await
    }

    /// Ends `reserver`'s reservations of `keys` (of one shard) at the shard's leader as last
    /// seen: one attempt, no retry. A release that is lost, or reaches a node that is no
    /// longer the leader (a new leader holds no reservations), costs only the hold.
    pub(crate) async fn release_reservations(&mut self, keys: Vec<Bytes>, reserver: u64) {
        let Some(target) = keys.first().and_then(|k| self.leader.get(self.shard_of(k) as usize))
        else {
            return;
        };
        let req = Request::ReleaseReservations { table: self.def.name.clone(), keys, reserver };
        let _ = self.call(target, None, req, Instant::now() + RELEASE_TIMEOUT).await;
    }

    pub fn def(&self) -> &TableDef {
        &self.def
    }

    /// The definition, shared with the handle (no copy).
    pub(crate) fn shared_def(&self) -> Arc<TableDef> {
        self.def.clone()
    }

    /// The shard of `key`.
    pub fn shard_of(&self, key: &[u8]) -> u32 {
        shard_of(key, self.def.shards)
    }

    /// The session token of `shard`: the largest index of this handle's acknowledged writes.
    pub fn last_write_index(&self, shard: u32) -> Option<LogIndex> {
        self.last_write.get(shard as usize).copied().flatten()
    }

    /// This handle's client id (writes are identified by `(client_id, seq)`).
    pub fn client_id(&self) -> u64 {
        self.client_id
    }

    pub async fn put(
        &mut self,
        key: impl Into<Bytes>,
        value: impl Into<Bytes>,
    ) -> Result<LogIndex, ClientError> {
        self.put_with(key, value, WriteOpts::default()).await
    }

    pub async fn put_with(
        &mut self,
        key: impl Into<Bytes>,
        value: impl Into<Bytes>,
        opts: WriteOpts,
    ) -> Result<LogIndex, ClientError> {
        self.write(key.into(), LogWriteOp::Put(value.into()), opts).await
    }

    pub async fn delete(&mut self, key: impl Into<Bytes>) -> Result<LogIndex, ClientError> {
        self.delete_with(key, WriteOpts::default()).await
    }

    pub async fn delete_with(
        &mut self,
        key: impl Into<Bytes>,
        opts: WriteOpts,
    ) -> Result<LogIndex, ClientError> {
        self.write(key.into(), LogWriteOp::Delete, opts).await
    }

    /// rifl.md §2.1 `conditional_write`: puts `value` iff `expect` holds when the write is
    /// applied (`Expect::Version(read.update_index)`: unchanged since that read;
    /// `Expect::Absent`: create only). A rejection is an answer, not an error, and a retry
    /// after a lost reply gets the same one: it executes once (R-G1, R-G2).
    pub async fn put_if(
        &mut self,
        key: impl Into<Bytes>,
        value: impl Into<Bytes>,
        expect: Expect,
    ) -> Result<Conditional, ClientError> {
        let op = LogWriteOp::Cond { expect, put: Some(value.into()) };
        self.conditional(key.into(), op).await
    }

    /// A delete that happens iff `expect` holds (see [`Table::put_if`]).
    pub async fn delete_if(
        &mut self,
        key: impl Into<Bytes>,
        expect: Expect,
    ) -> Result<Conditional, ClientError> {
        self.conditional(key.into(), LogWriteOp::Cond { expect, put: None }).await
    }

    /// Compare-and-swap: installs `new` iff the key holds `expected` (`None`: is absent).
    pub async fn cas(
        &mut self,
        key: impl Into<Bytes>,
        expected: Option<Bytes>,
        new: impl Into<Bytes>,
    ) -> Result<Conditional, ClientError> {
        let expect = expected.map_or(Expect::Absent, Expect::Value);
        self.put_if(key, new, expect).await
    }

    /// Fetch-and-add on a counter (decimal text, absent = 0; `strata_wire::counter`), exactly
    /// once: returns the value before. A value that is not a counter, or a change leaving
    /// `0..=u64::MAX`, changes nothing and is `InvalidArgument`.
    pub async fn faa(&mut self, key: impl Into<Bytes>, delta: i64) -> Result<u64, ClientError> {
        let written =
            self.write_op(key.into(), LogWriteOp::Add(delta), WriteOpts::default()).await?;
        match written.outcome {
            WriteOutcome::Added { old } => Ok(old),
            WriteOutcome::NotCounter => Err(ClientError::InvalidArgument(format!(
                "fetch-and-add: {}",
                counter::CounterError::NotACounter
            ))),
            WriteOutcome::OutOfRange => Err(ClientError::InvalidArgument(format!(
                "fetch-and-add of {delta}: the counter would leave 0..={}",
                u64::MAX
            ))),
            other => Err(ClientError::UnexpectedReply(format!("outcome {other:?} of an add"))),
        }
    }

    async fn conditional(
        &mut self,
        key: Bytes,
        op: LogWriteOp,
    ) -> Result<Conditional, ClientError> {
        let written = self.write_op(key, op, WriteOpts::default()).await?;
        match written.outcome {
            WriteOutcome::Done => Ok(Conditional::Applied { version: written.index }),
            WriteOutcome::Rejected { current } => Ok(Conditional::Rejected { current }),
            other => Err(ClientError::UnexpectedReply(format!(
                "outcome {other:?} of a conditional write"
            ))),
        }
    }

    /// Any key operation, with the entry that executed it and what it returned.
    pub async fn write_op(
        &mut self,
        key: impl Into<Bytes>,
        op: LogWriteOp,
        opts: WriteOpts,
    ) -> Result<Written, ClientError> {
        self.write_outcome(key.into(), op, opts).await
    }

    /// Reads `key` at a node picked round-robin (the believed leader for leader-only tables).
    pub async fn get(&mut self, key: impl Into<Bytes>) -> Result<LogRead, ClientError> {
        let key = key.into();
        let shard = self.shard_of(&key) as usize;
        let start = match self.def.reads {
            strata_wire::client::TableReads::Leader => {
                self.leader.get(shard).unwrap_or(self.cursor)
            }
            _ => {
                self.cursor = (self.cursor + 1) % self.nodes.len();
                self.cursor
            }
        };
        self.read(key, start, ReadKind::Plain).await
    }

    /// Reads `key` starting at endpoint `node` (an index into the client's endpoints); if that
    /// node cannot serve it, the read moves on like [`Table::get`].
    pub async fn get_at(
        &mut self,
        key: impl Into<Bytes>,
        node: usize,
    ) -> Result<LogRead, ClientError> {
        self.read(key.into(), node % self.nodes.len(), ReadKind::Plain).await
    }

    /// One attempt to read `key` at endpoint `node`, without retries or moving elsewhere: the
    /// node's refusal (`NotInActiveSet`, `NotLeader`, ...) comes back as `Ok(Err(failure))`.
    /// For callers that must know what one particular node serves, e.g. a fault harness
    /// reading at a lagging follower (§7).
    pub async fn try_get_at(
        &mut self,
        key: impl Into<Bytes>,
        node: usize,
    ) -> Result<Result<LogRead, LogFailure>, ClientError> {
        let key = key.into();
        let shard = self.shard_of(&key) as usize;
        let node = node % self.nodes.len();
        let req = Request::LogRead {
            table: self.def.name.clone(),
            key,
            min_index: self.last_write[shard],
            sharer: false,
            intent: ReadIntent::Plain,
        };
        let deadline = Instant::now() + self.retry_for();
        match self.call(node, None, req, deadline).await {
            Ok(Response::LogRejected(LogFailure::Invalid(m))) => {
                Err(ClientError::InvalidArgument(m))
            }
            Ok(Response::LogRejected(f)) => Ok(Err(f)),
            Ok(reply) => self.served(shard, node, reply).map(Ok),
            Err(e) => {
                if retryable(&e) {
                    self.drop_conn(node);
                }
                Err(e)
            }
        }
    }

    /// A `LogValue` reply of endpoint `node` as a [`LogRead`]. Only the leader serves a
    /// leader-only table: remember it, so the next read (and write) of the shard goes there
    /// first instead of being redirected (a read-only session never learns it from a write).
    fn served(
        &mut self,
        shard: usize,
        node: usize,
        reply: Response,
    ) -> Result<LogRead, ClientError> {
        match reply {
            Response::LogValue { value, update_index, served_by, epoch, vts, w_mean_ns } => {
                if self.def.reads == strata_wire::client::TableReads::Leader {
                    self.leader.set(shard, Some(node));
                }
                let vts = vts.unwrap_or(Timestamp::ZERO);
                Ok(LogRead { value, update_index, served_by, epoch, vts, w_mean_ns })
            }
            other => Err(unexpected(other)),
        }
    }

    fn retry_for(&self) -> Duration {
        self.opts.request_timeout.unwrap_or(DEFAULT_RETRY_FOR)
    }

    fn next(&self, i: usize) -> usize {
        (i + 1) % self.nodes.len()
    }

    async fn write(
        &mut self,
        key: Bytes,
        op: LogWriteOp,
        opts: WriteOpts,
    ) -> Result<LogIndex, ClientError> {
        Ok(self.write_outcome(key, op, opts).await?.index)
    }

    async fn write_outcome(
        &mut self,
        key: Bytes,
        op: LogWriteOp,
        opts: WriteOpts,
    ) -> Result<Written, ClientError> {
        let shard = self.shard_of(&key);
        // rifl.md §5.1 C1: the lease (created on first use); a new id restarts the seqs (R-D21).
        let lease = self.keeper.acquire().await?;
        if lease.client_id != self.client_id {
            self.client_id = lease.client_id;
            self.next_seq = 0;
        }
        self.next_seq += 1;
        let seq = self.next_seq;
        let keeper = self.keeper.clone();
        let envelope = move || {
            // The latest grant of the same lease (renewed in the background meanwhile); if the
            // lease changed, this write keeps the one it started with: the node then answers
            // from its record or `ExpiredLease` (outcome unknown).
            let lease = keeper.usable().filter(|l| l.client_id == lease.client_id).unwrap_or(lease);
            // One write at a time per handle: every earlier one has its answer.
            Rifl { rpc: RpcId { client_id: lease.client_id, seq }, first_incomplete: seq, lease }
        };
        let req =
            Request::LogWrite { table: self.def.name.clone(), key, op, immediate: opts.immediate };
        match self.leader_call(shard, envelope, req).await? {
            Response::LogWritten { index, outcome } => {
                let token = &mut self.last_write[shard as usize];
                *token = Some(token.map_or(index, |t| t.max(index)));
                Ok(Written { index, outcome })
            }
            other => Err(unexpected(other)),
        }
    }

    /// Sends `req` to the leader of `shard` until it answers with anything but a transient
    /// refusal (rifl.md §2.2 step 4): `NotLeader` follows the hint, `Moved` the new replicas,
    /// a broken connection the next node; an election, a slow majority or a transaction's
    /// lock (§5.9 `Retry(Locked)`) waits a little at the same node. Every attempt carries a
    /// fresh `envelope()` of the same RPC id. RIFL's final verdicts (`Stale`, `BadEnvelope`)
    /// and `Invalid` are errors.
    pub(crate) async fn leader_call(
        &mut self,
        shard: u32,
        envelope: impl Fn() -> Rifl,
        req: Request,
    ) -> Result<Response, ClientError> {
        self.leader_call_with(shard, || Some(envelope()), req).await
    }

    /// [`Table::leader_call`] for a request with or without RIFL's envelope (a Kairos
    /// watermark report has none: it is soft state, not an RPC to execute once).
    pub(crate) async fn leader_call_with(
        &mut self,
        shard: u32,
        envelope: impl Fn() -> Option<Rifl>,
        req: Request,
    ) -> Result<Response, ClientError> {
        let shard = shard as usize;
        let deadline = Instant::now() + self.retry_for();
        let mut target = self.leader.get(shard).unwrap_or(self.cursor);
        let mut last;
        let mut moved_tries = 0;
        loop {
            let backoff;
            match self.call(target, envelope(), req.clone(), deadline).await {
                Ok(Response::LogRejected(LogFailure::Invalid(m))) => {
                    return Err(ClientError::InvalidArgument(m))
                }
                // RIFL's verdicts (rifl.md §5.3 S3, S4): `Stale` (this seq was acknowledged) and
                // `BadEnvelope` are final; retrying the same envelope cannot succeed.
                Ok(Response::Error {
                    code: code @ (ErrorCode::Stale | ErrorCode::BadEnvelope),
                    message,
                }) => return Err(ClientError::Protocol { code, message }),
                Ok(Response::LogRejected(f)) => {
                    match &f {
                        LogFailure::NotLeader { hint } => {
                            self.leader.set(shard, None);
                            let hinted = match hint {
                                Some(h) => self.index_of(*h, deadline).await,
                                None => None,
                            };
                            backoff = hinted.is_none_or(|h| h == target).then_some(RETRY_BACKOFF);
                            target = hinted.unwrap_or_else(|| self.next(target));
                        }
                        // rifl.md §5.7 step 4: the shard moved; the same RPC id goes to the
                        // new replicas, where its record is if it executed before the move.
                        LogFailure::Moved { replicas } => {
                            self.leader.set(shard, None);
                            moved_tries += 1;
                            target = self
                                .moved_target(replicas, moved_tries, deadline)
                                .await
                                .unwrap_or_else(|| self.next(target));
                            backoff = Some(RETRY_BACKOFF);
                        }
                        // The leader answered: a decision is on its way.
                        LogFailure::Locked => {
                            self.leader.set(shard, Some(target));
                            backoff = Some(LOCK_BACKOFF);
                        }
                        // Election or sync phase, or a slow majority: the same node, shortly.
                        _ => backoff = Some(RETRY_BACKOFF),
                    }
                    last = LastFailure::Refused(f);
                }
                Ok(reply) => {
                    self.leader.set(shard, Some(target));
                    return Ok(reply);
                }
                Err(e) if retryable(&e) => {
                    self.drop_conn(target);
                    self.leader.set(shard, None);
                    target = self.next(target);
                    backoff = Some(RETRY_BACKOFF);
                    last = LastFailure::Unknown(e);
                }
                Err(e) => return Err(e),
            }
            if Instant::now() >= deadline {
                return Err(self.give_up(last));
            }
            if let Some(pause) = backoff {
                tokio::time::sleep(pause).await;
            }
        }
    }

    async fn read(
        &mut self,
        key: Bytes,
        start: usize,
        kind: ReadKind,
    ) -> Result<LogRead, ClientError> {
        let shard = self.shard_of(&key) as usize;
        let (target, reply) = self
            .read_reply(start, |t: &Table| Request::LogRead {
                table: t.def.name.clone(),
                key: key.clone(),
                min_index: t.last_write[shard],
                sharer: kind == ReadKind::Sharer,
                intent: match kind {
                    ReadKind::Txn(intent) => intent,
                    ReadKind::Plain | ReadKind::Sharer => ReadIntent::Plain,
                },
            })
            .await?;
        self.served(shard, target, reply)
    }

    /// Reads `keys`, all of one shard, at its leader in one request (`LogReadMany`), for a
    /// transaction of a RIFL table: what [`Table::get_for_txn`] returns for each, in order.
    /// For update, the leader reserves them together.
    pub(crate) async fn get_many_for_txn(
        &mut self,
        keys: Vec<Bytes>,
        intent: ReadIntent,
    ) -> Result<Vec<LogRead>, ClientError> {
        let shard = self.shard_of(&keys[0]) as usize;
        let start = self.leader.get(shard).unwrap_or(self.cursor);
        let (target, reply) = self
            .read_reply(start, |t: &Table| Request::LogReadMany {
                table: t.def.name.clone(),
                keys: keys.clone(),
                min_index: t.last_write[shard],
                intent,
            })
            .await?;
        match reply {
            Response::LogValues { values, served_by, epoch } if values.len() == keys.len() => {
                self.leader.set(shard, Some(target));
                let read = |(value, update_index)| LogRead {
                    value,
                    update_index,
                    served_by,
                    epoch,
                    vts: Timestamp::ZERO,
                    w_mean_ns: None,
                };
                Ok(values.into_iter().map(read).collect())
            }
            other => Err(unexpected(other)),
        }
    }

    /// Sends the read `request` builds (again on every retry: the session token may move) to
    /// the replicas from endpoint `start` on until one serves it: that endpoint and its
    /// `LogValue` or `LogValues`.
    async fn read_reply(
        &mut self,
        start: usize,
        request: impl Fn(&Table) -> Request,
    ) -> Result<(usize, Response), ClientError> {
        let deadline = Instant::now() + self.retry_for();
        let mut target = start;
        let mut last;
        let mut moved_tries = 0;
        loop {
            let req = request(self);
            let mut backoff = true;
            match self.call(target, None, req, deadline).await {
                Ok(reply @ (Response::LogValue { .. } | Response::LogValues { .. })) => {
                    return Ok((target, reply))
                }
                Ok(Response::LogRejected(LogFailure::Invalid(m))) => {
                    return Err(ClientError::InvalidArgument(m))
                }
                Ok(Response::LogRejected(f)) => {
                    target = match &f {
                        LogFailure::NotLeader { hint: Some(h) } => {
                            match self.index_of(*h, deadline).await {
                                Some(i) if i != target => {
                                    backoff = false;
                                    i
                                }
                                _ => self.next(target),
                            }
                        }
                        LogFailure::Moved { replicas } => {
                            moved_tries += 1;
                            self.moved_target(replicas, moved_tries, deadline)
                                .await
                                .unwrap_or_else(|| self.next(target))
                        }
                        // rifl.md §5.9 (R-D18): the key's decision is on its way; this node
                        // serves the key (as its leader, for transactional tables).
                        LogFailure::Locked => {
                            tokio::time::sleep(LOCK_BACKOFF).await;
                            backoff = false;
                            target
                        }
                        _ => self.next(target),
                    };
                    last = LastFailure::Refused(f);
                }
                Ok(other) => return Err(unexpected(other)),
                Err(e) if retryable(&e) => {
                    self.drop_conn(target);
                    target = self.next(target);
                    last = LastFailure::Unknown(e);
                }
                Err(e) => return Err(e),
            }
            if Instant::now() >= deadline {
                return Err(self.give_up(last));
            }
            if backoff {
                tokio::time::sleep(RETRY_BACKOFF).await;
            }
        }
    }

    fn give_up(&self, last: LastFailure) -> ClientError {
        match last {
            LastFailure::Refused(f) => ClientError::TableUnavailable {
                table: self.def.name.clone(),
                last: format!("{f:?}"),
                waited: self.retry_for(),
            },
            LastFailure::Unknown(ClientError::Unreachable { tried, last }) => {
                ClientError::Unreachable { tried, last }
            }
            LastFailure::Unknown(_) => ClientError::TimedOut(self.retry_for()),
        }
    }

    /// One request to endpoint `i`, bounded by `deadline`.
    async fn call(
        &mut self,
        i: usize,
        rifl: Option<Rifl>,
        req: Request,
        deadline: Instant,
    ) -> Result<Response, ClientError> {
        let conn = self.conn(i).await?;
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        conn.call_with(rifl, req, Some(left)).await
    }

    /// The connection to endpoint `i` (opened, and the node's id learned, on first use).
    async fn conn(&mut self, i: usize) -> Result<Arc<ConnHandle>, ClientError> {
        if let Some(c) = self.nodes[i].conn.as_ref().filter(|c| c.is_usable()) {
            return Ok(c.clone());
        }
        // Boxed: the handshake's state is large, and every request's future would carry it.
        Box::pin(self.open_conn(i)).await
    }

    /// Opens the connection to endpoint `i`, learning the node's id on first use.
    async fn open_conn(&mut self, i: usize) -> Result<Arc<ConnHandle>, ClientError> {
        let addr = self.nodes[i].addr;
        let conn = Conn::open_with_pushes(addr, &self.opts, self.pushes.clone())
            .await
            .map_err(|e| e.into_client_error(addr))?;
        if self.nodes[i].id.is_none() {
            match conn.call(Request::Status, Some(self.opts.connect_timeout)).await? {
                Response::Status(s) => self.nodes[i].id = Some(s.node),
                other => return Err(unexpected(other)),
            }
        }
        self.nodes[i].conn = Some(conn.clone());
        Ok(conn)
    }

    fn drop_conn(&mut self, i: usize) {
        self.nodes[i].conn = None;
    }

    /// Opens a connection to every endpoint that answers (clones made after share them).
    pub(crate) async fn connect_all(&mut self) {
        for i in 0..self.nodes.len() {
            let _ = self.conn(i).await;
        }
    }

    /// The endpoint of node `id`, connecting to endpoints whose id is still unknown to learn it.
    /// The endpoint to try after the `tries`-th `Moved { replicas }`: the replicas in turn
    /// (any of them forwards to the new group's leader with a `NotLeader` hint).
    async fn moved_target(
        &mut self,
        replicas: &[NodeId],
        tries: usize,
        deadline: Instant,
    ) -> Option<usize> {
        let id = *replicas.get(tries % replicas.len().max(1))?;
        self.index_of(id, deadline).await
    }

    async fn index_of(&mut self, id: NodeId, deadline: Instant) -> Option<usize> {
        if let Some(i) = self.nodes.iter().position(|n| n.id == Some(id)) {
            return Some(i);
        }
        for i in 0..self.nodes.len() {
            if self.nodes[i].id.is_none() && Instant::now() < deadline {
                let _ = self.conn(i).await;
                if self.nodes[i].id == Some(id) {
                    return Some(i);
                }
            }
        }
        None
    }
}

/// Errors after which another node (or the same one, later) may succeed.
fn retryable(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::ConnectionLost { .. }
            | ClientError::Unreachable { .. }
            | ClientError::TimedOut(_)
            | ClientError::ShuttingDown(_)
    )
}

/// What a read asks of the node besides the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadKind {
    Plain,
    /// Register this connection as a sharer of the key (kairos.md §5.14.2).
    Sharer,
    /// A RIFL transaction's read: a pending transaction's value may answer it.
    Txn(ReadIntent),
}

/// The endpoint believed to lead each shard (an index into the handle's endpoints). Shared
/// by a handle's clones: the client's transactions each work on a clone of one cached
/// handle, and what one learns (a `NotLeader` hint, a leader's answer) the next starts from,
/// instead of asking a follower first every time.
#[derive(Clone, Debug)]
struct LeaderHints(Arc<[AtomicUsize]>);

impl LeaderHints {
    const UNKNOWN: usize = usize::MAX;

    fn new(shards: usize) -> LeaderHints {
        LeaderHints((0..shards).map(|_| AtomicUsize::new(Self::UNKNOWN)).collect())
    }

    fn get(&self, shard: usize) -> Option<usize> {
        let i = self.0.get(shard)?.load(Ordering::Relaxed);
        (i != Self::UNKNOWN).then_some(i)
    }

    fn set(&self, shard: usize, node: Option<usize>) {
        if let Some(slot) = self.0.get(shard) {
            slot.store(node.unwrap_or(Self::UNKNOWN), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::LeaderHints;

    #[test]
    fn a_clone_learns_what_another_clone_learned_of_the_leaders() {
        let cached = LeaderHints::new(2);
        let one_transaction = cached.clone();
        one_transaction.set(1, Some(2));
        let next_transaction = cached.clone();
        assert_eq!((next_transaction.get(0), next_transaction.get(1)), (None, Some(2)));
        next_transaction.set(1, None); // a `NotLeader` without a hint
        assert_eq!(cached.get(1), None);
        assert_eq!(cached.get(7), None, "a shard the table does not have");
    }
}
