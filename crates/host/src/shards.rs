//! The log tables of one node: the catalog in memory and one [`LogReplica`] per shard replica
//! this node hosts (generation 0 of every shard lives on every node; a moved shard only on its
//! placement's replicas, rifl.md §5.7).
//!
//! Every shard is pumped by the host, not by a task of its own: the cores are cheap state
//! machines and the expensive part, `fdatasync`, runs wherever the runtime executes
//! [`Storage::Log`] (a disk thread per shard in `strata-node`, so a flush never blocks the
//! host). A shard's `send_after_persist` messages are held here until the runtime reports their
//! token durable (ORCA §3.1: a vote leaves only after the vote is stored).

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use strata_core::{Node, Route};
use strata_log::{
    LogEffects, LogEvent, LogReplica, LogReply, LogRequest, ReadError, RecoveredState, Role,
    TxnAnswer, TxnEvent, WriteAck, WriteError, WriteOp,
};
use strata_wire::client::{
    shard_of, ClientResponse, ErrorCode, LogFailure, LogWriteOp, Response, ShardRole, ShardStatus,
    TableDef, TableTxn, TableValidation, MAX_READ_MANY_KEYS,
};
use strata_wire::log::{Expect, LogIndex, LogMessage, ReadValue, ShardMove};
use strata_wire::peer::PeerMessage;
use strata_wire::txn::{Decision, ReadIntent};
use strata_wire::{Instant, LimitError, Limits, NodeId, Rifl, FRAME_SLACK_BYTES};
use tracing::{debug, error, info, warn};

use crate::catalog::{
    check_table_def, describe, log_config, preferred_leader, Catalogued, SYSTEM_PREFIX,
};
use crate::effects::{Audit, HostEffects, ShardId, ShardKey, Storage};
use crate::rate::{takes_a_token, Admission, Queued, RateLimit};
use crate::sharers::Sharers;

/// A client's `LogRead` (`Request::LogRead`'s fields after the table).
pub(crate) struct ReadReq {
    pub key: Bytes,
    pub min_index: Option<LogIndex>,
    /// kairos.md §5.14.2: register the connection as a sharer of the key (Kairos tables).
    pub sharer: bool,
    /// A transaction's read of a RIFL table (`strata_log`'s foresight and reservations).
    pub intent: ReadIntent,
}

/// A running shard replica.
pub(crate) struct Shard {
    pub table: String,
    pub id: ShardId,
    pub replica: LogReplica,
    effects: LogEffects,
    /// `send_after_persist` messages waiting for their token.
    held: Vec<(u64, NodeId, LogMessage)>,
    /// Client requests waiting for the core's reply: token -> (connection, corr).
    pub waiting: BTreeMap<u64, (Route, u64)>,
    /// The storage failed: the replica persists nothing more and makes no progress.
    failed: bool,
}

/// A catalogued table.
pub(crate) struct TableEntry {
    pub def: TableDef,
    pub id: u32,
    /// Shards that moved (rifl.md §5.7); the others are in generation 0 on every node.
    pub moved: BTreeMap<u32, ShardMove>,
}

impl TableEntry {
    /// Where `shard` lives: its moved placement, else generation 0 on every node.
    pub fn placement(&self, shard: u32, all: &[NodeId]) -> ShardMove {
        self.moved
            .get(&shard)
            .cloned()
            .unwrap_or_else(|| ShardMove { generation: 0, replicas: all.to_vec() })
    }

    pub fn catalogued(&self) -> Catalogued {
        Catalogued { def: self.def.clone(), moved: self.moved.clone() }
    }
}

/// Why a shard's storage is being opened, and what to do once it is.
pub(crate) enum Opening {
    /// Start the replica from what was read back: at start-up, or (`created`) for a table
    /// created just now, whose replicas have never acknowledged anything.
    Start { placement: ShardMove, created: bool },
    /// A shard move adopted here (`moves`): the catalog is saved next.
    Adopt,
}

/// Every log table of this node (module docs).
pub(crate) struct Shards {
    pub me: NodeId,
    /// Every node of the cluster, sorted.
    pub nodes: Vec<NodeId>,
    seed: u64,
    pub tables: BTreeMap<String, TableEntry>,
    pub shards: BTreeMap<ShardKey, Shard>,
    /// Replicas whose storage is being opened.
    pub opening: BTreeMap<ShardKey, (ShardId, Opening)>,
    next_token: u64,
    /// Shard messages for a table, shard or generation this node does not have.
    pub unroutable_messages: u64,
    /// Tokens of the node's own writes (their replies go to `internal`).
    internal_tokens: BTreeSet<u64>,
    /// Replies to the node's own writes ([`Shards::write_internal`]), by token.
    pub internal: Vec<(u64, Result<WriteAck, WriteError>)>,
    /// Replies to the node's own transaction requests ([`Shards::request_internal`]).
    pub internal_txn: Vec<(u64, Result<TxnAnswer, WriteError>)>,
    /// The optional service-rate limit of the shards this node leads (`rate`).
    rate: Option<RateLimit>,
    /// The node's key, value and frame limits: client keys and values are checked against
    /// them at the edge, and every shard replica's messages fit in one frame.
    pub(crate) limits: Limits,
    /// Emit every replica's events as [`Audit::Log`] (`HostConfig::audit`).
    pub audit: bool,
    /// `HostConfig::log_overrides`.
    pub log_overrides: BTreeMap<String, strata_log::LogConfig>,
    /// `HostConfig::txn_read_hold`, for the tables without an override.
    pub txn_read_hold: std::time::Duration,
    /// Explicit invalidation's sharers of the Kairos shards this node leads (`sharers`).
    pub sharers: Sharers,
}

impl Shards {
    pub fn new(
        me: NodeId,
        mut nodes: Vec<NodeId>,
        seed: u64,
        rate_limit: Option<u32>,
        limits: Limits,
    ) -> Shards {
        nodes.sort();
        Shards {
            me,
            nodes,
            seed,
            tables: BTreeMap::new(),
            shards: BTreeMap::new(),
            opening: BTreeMap::new(),
            next_token: 1,
            unroutable_messages: 0,
            internal_tokens: BTreeSet::new(),
            internal: Vec::new(),
            internal_txn: Vec::new(),
            rate: rate_limit.map(RateLimit::new),
            limits,
            audit: false,
            log_overrides: BTreeMap::new(),
            txn_read_hold: strata_log::TXN_READ_HOLD,
            sharers: Sharers::default(),
        }
    }

    /// Records `table` and opens the replicas this node hosts of each of its shards
    /// (`created`: the table is being created now, not reopened).
    pub fn start_table(&mut self, table: Catalogued, created: bool, out: &mut HostEffects) {
        let id = table.def.id();
        let entry = TableEntry { id, def: table.def, moved: table.moved };
        for shard in 0..entry.def.shards {
            let placement = entry.placement(shard, &self.nodes);
            if placement.replicas.contains(&self.me) {
                let sid = ShardId { table: id, shard, generation: placement.generation };
                let why = Opening::Start { placement, created };
                self.open(sid, &entry.def.name, None, why, out);
            }
        }
        self.tables.insert(entry.def.name.clone(), entry);
    }

    pub fn open(
        &mut self,
        id: ShardId,
        table: &str,
        install: Option<Box<strata_wire::log::Snapshot>>,
        why: Opening,
        out: &mut HostEffects,
    ) {
        self.opening.insert(id.key(), (id, why));
        out.storage.push(Storage::Open { shard: id, table: table.to_string(), install });
    }

    /// Starts a replica from the state its storage gave back (`created`: of a table created
    /// just now), and drains what its start produced (the recovered entries it re-applied),
    /// so those effects belong to this input, not to the next one that reaches the shard.
    pub fn start_replica(
        &mut self,
        now: Instant,
        id: ShardId,
        placement: &ShardMove,
        state: RecoveredState,
        created: bool,
        out: &mut HostEffects,
    ) -> Result<(), String> {
        let def = self
            .tables
            .values()
            .find(|t| t.id == id.table)
            .map(|t| t.def.clone())
            .ok_or_else(|| format!("shard {id:?} of no catalogued table"))?;
        let n = placement.replicas.len();
        let mut cfg = match self.log_overrides.get(&def.name) {
            Some(cfg) => cfg.validate(n).map(|()| cfg.clone()),
            None => log_config(&def, n)
                .map(|cfg| strata_log::LogConfig { txn_read_hold: self.txn_read_hold, ..cfg }),
        }
        .map_err(|e| format!("table {} shard {}: {e}", def.name, id.shard))?;
        // Replication messages are packed to fit the peer frame limit (issue #17 item 5).
        cfg.max_message_bytes = self.limits.max_frame_bytes;
        info!(
            table = %def.name,
            shard = id.shard,
            generation = id.generation,
            entries = state.entries.len(),
            epoch = state.hard_state.epoch,
            last = %state.entries.last().map_or(LogIndex::ZERO, |e| e.index),
            "shard replica started from its storage"
        );
        let seed = self.seed
            ^ (u64::from(id.table) << 32)
            ^ u64::from(id.shard)
            ^ (u64::from(id.generation) << 16);
        let empty = state.entries.is_empty();
        let mut replica = LogReplica::recover(cfg, self.me, &placement.replicas, state, now, seed)
            .map_err(|e| format!("table {} shard {}: {e}", def.name, id.shard))?;
        if id.generation > 0 && empty {
            // A moved-in replica without the moved state waits for it (LogReplica::await_install).
            replica.await_install();
        }
        if let Some(leader) =
            preferred_leader(&def, id.shard).filter(|l| placement.replicas.contains(l))
        {
            replica.prefer_leader(now, leader);
            if created && empty {
                // A new table's replicas have acknowledged nothing (like a moved shard's new
                // group, orca §5.10 departure): they vote at once and the preferred one stands
                // within ET_min/10, so it leads however far apart the nodes created the table.
                replica.start_new_group(now, leader == self.me);
            }
        }
        self.shards.insert(
            id.key(),
            Shard {
                table: def.name,
                id,
                replica,
                effects: Default::default(),
                held: Vec::new(),
                waiting: BTreeMap::new(),
                failed: false,
            },
        );
        self.drain(id.key(), out);
        Ok(())
    }

    /// Checks a new definition: `Ok(None)` to create it, `Ok(Some(reply))` when it exists
    /// already (an identical definition is harmless), `Err` when it is refused.
    pub fn check_create(&self, def: &TableDef) -> Result<Option<Response>, String> {
        if def.validation == TableValidation::Validators {
            return Err(format!(
                "{}: a validator table is created with its kairos table (--validation sharded:V)",
                def.name
            ));
        }
        let done = self.check_create_one(def)?;
        // A sharded Kairos table's validators (kairos.md §3.2 "CV") are the shards of a
        // companion table, created with it in one catalog change.
        match def.validators_def() {
            Some(companion) => match (done, self.check_create_one(&companion)?) {
                (Some(done), Some(_)) => Ok(Some(done)),
                (None, None) => Ok(None),
                _ => Err(format!(
                    "table {} and its validator table {} are not both there",
                    def.name, companion.name
                )),
            },
            None => Ok(done),
        }
    }

    /// [`Shards::check_create`] for one definition.
    fn check_create_one(&self, def: &TableDef) -> Result<Option<Response>, String> {
        check_table_def(def, self.nodes.len())?;
        if let Some(n) = def.leaders.iter().find(|n| !self.nodes.contains(n)) {
            let all: Vec<String> = self.nodes.iter().map(|n| n.to_string()).collect();
            return Err(format!(
                "preferred leader {n} is not a node of the cluster ({})",
                all.join(", ")
            ));
        }
        if let Some(t) = self.tables.get(&def.name) {
            return if t.def == *def {
                Ok(Some(Response::TableCreated { created: false }))
            } else {
                Err(format!(
                    "table {} already exists with another definition ({})",
                    def.name,
                    describe(&t.def)
                ))
            };
        }
        if let Some(t) = self.tables.values().find(|t| t.id == def.id()) {
            return Err(format!(
                "table name {} collides with table {} (same id); pick another name",
                def.name, t.def.name
            ));
        }
        Ok(None)
    }

    /// The catalog as it is now, with `change` added (each replacing the table of its name).
    pub fn catalog_with(&self, change: &[Catalogued]) -> Vec<Catalogued> {
        let mut tables: Vec<Catalogued> = self
            .tables
            .values()
            .filter(|t| !t.def.name.starts_with(SYSTEM_PREFIX))
            .filter(|t| change.iter().all(|x| x.def.name != t.def.name))
            .map(TableEntry::catalogued)
            .collect();
        tables.extend(change.iter().cloned());
        tables
    }

    pub fn list(&self) -> Vec<TableDef> {
        self.tables
            .values()
            .map(|t| t.def.clone())
            .filter(|d| !d.name.starts_with(SYSTEM_PREFIX))
            .collect()
    }

    #[allow(clippy::result_large_err)] // built once per unknown-table request
    pub(crate) fn shard_key(&self, table: &str, key: &[u8]) -> Result<ShardKey, Response> {
        match self.tables.get(table) {
            Some(t) => Ok((t.id, shard_of(key, t.def.shards))),
            None => Err(Response::Error {
                code: ErrorCode::InvalidArgument,
                message: format!(
                    "no table named {table:?} on this node (create it with `strata table create`)"
                ),
            }),
        }
    }

    /// A client's `LogWrite`; the reply comes through `out` (now or later).
    #[allow(clippy::too_many_arguments)]
    pub fn on_write(
        &mut self,
        now: Instant,
        route: Route,
        corr: u64,
        table: &str,
        key: Bytes,
        op: LogWriteOp,
        rifl: Option<Rifl>,
        immediate: bool,
        out: &mut HostEffects,
    ) {
        // The client edge: the same key and value limits as the rc keyspace (`Limits`), so a
        // write this node accepts always fits in one replication message (issue #17 item 5:
        // a value just under the frame limit used to be appended, then could not be sent, and
        // the shard took no further writes). Test: `log_table_values_beyond_the_limit_are_
        // refused_and_the_shard_keeps_taking_writes` (crates/node/tests/bounds.rs).
        let value = op.value().map_or(&[][..], |v| &v[..]);
        let expected = match &op {
            LogWriteOp::Cond { expect: Expect::Value(v), .. } => &v[..],
            _ => &[],
        };
        let checked = self
            .limits
            .check_key(&key)
            .and_then(|()| self.limits.check_value(value))
            .and_then(|()| self.limits.check_value(expected));
        if let Err(e) = checked {
            return out.reply.push((route, ClientResponse { corr, body: limit_error(table, &e) }));
        }
        // A log write is a linearizable RPC (rifl.md §4.1): without RIFL's envelope it cannot
        // be made exactly-once, so it is refused as `BadEnvelope` (not retried by clients).
        let Some(rifl) = rifl else {
            let body = Response::Error {
                code: ErrorCode::BadEnvelope,
                message: "a log write needs RIFL's envelope (rpc id, first_incomplete, lease)"
                    .to_string(),
            };
            return out.reply.push((route, ClientResponse { corr, body }));
        };
        if table.starts_with(SYSTEM_PREFIX) {
            let body = Response::Error {
                code: ErrorCode::InvalidArgument,
                message: format!("table {table:?} is a system table: only the node writes it"),
            };
            return out.reply.push((route, ClientResponse { corr, body }));
        }
        // A Kairos table's versions are commit timestamps given by validation (kairos.md §0
        // `vts`): a plain write would have none, and would bypass validation. Refused.
        if self
            .tables
            .get(table)
            .is_some_and(|t| t.def.txn == strata_wire::client::TableTxn::Kairos)
        {
            let body = Response::Error {
                code: ErrorCode::InvalidArgument,
                message: format!(
                    "table {table:?} is a kairos table: its keys are written by transactions only (strata txn, client.transaction())"
                ),
            };
            return out.reply.push((route, ClientResponse { corr, body }));
        }
        let sk = match self.shard_key(table, &key) {
            Ok(k) => k,
            Err(body) => return out.reply.push((route, ClientResponse { corr, body })),
        };
        let token = self.take_token();
        let req = LogRequest::Write { token, rifl, key, op, immediate };
        self.request(now, sk, route, corr, req, out);
    }

    /// A client's `LogRead`; the reply comes through `out` (now or later).
    #[allow(clippy::too_many_arguments)]
    pub fn on_read(
        &mut self,
        now: Instant,
        route: Route,
        corr: u64,
        table: &str,
        read: ReadReq,
        out: &mut HostEffects,
    ) {
        let ReadReq { key, min_index, sharer, intent } = read;
        if let Err(e) = self.limits.check_key(&key) {
            return out.reply.push((route, ClientResponse { corr, body: limit_error(table, &e) }));
        }
        let sk = match self.shard_key(table, &key) {
            Ok(k) => k,
            Err(body) => return out.reply.push((route, ClientResponse { corr, body })),
        };
        let token = self.take_token();
        // kairos.md §5.3 "EI: add the requesting client to sharers[key]" — for Kairos
        // tables only, and only when the client asks (§7 inv. 12: none in lease mode).
        if sharer && self.tables.get(table).is_some_and(|t| t.def.txn == TableTxn::Kairos) {
            self.sharers.expect(token, route, key.clone());
        }
        let req = LogRequest::Read { token, key, min_index, intent };
        self.request(now, sk, route, corr, req, out);
    }

    /// A client's `LogReadMany`: every key must be in one shard of a log table that is not a
    /// Kairos table (whose reads go through the client's cache); the reply comes through `out`.
    #[allow(clippy::too_many_arguments)]
    pub fn on_read_many(
        &mut self,
        now: Instant,
        route: Route,
        corr: u64,
        table: &str,
        keys: Vec<Bytes>,
        min_index: Option<LogIndex>,
        intent: ReadIntent,
        out: &mut HostEffects,
    ) {
        if self.tables.get(table).is_some_and(|t| t.def.txn == TableTxn::Kairos) {
            let message = format!("table {table:?} is a kairos table: read its keys one at a time (each read goes through the client's cache)");
            let body = Response::Error { code: ErrorCode::InvalidArgument, message };
            return out.reply.push((route, ClientResponse { corr, body }));
        }
        let read = |token, keys| LogRequest::ReadMany { token, keys, min_index, intent };
        self.request_on_keys(now, route, corr, table, keys, read, out);
    }

    /// A request on `keys` of one shard of `table` (`shard_of_keys`), made by `make` from its
    /// token and the keys, to that shard's replica here; the reply, or the refusal, through
    /// `out`. (A client's `ReleaseReservations` is one: its shard's leader releases the keys.)
    #[allow(clippy::too_many_arguments)]
    pub fn request_on_keys(
        &mut self,
        now: Instant,
        route: Route,
        corr: u64,
        table: &str,
        keys: Vec<Bytes>,
        make: impl FnOnce(u64, Vec<Bytes>) -> LogRequest,
        out: &mut HostEffects,
    ) {
        match self.shard_of_keys(table, &keys) {
            Ok(sk) => {
                let req = make(self.take_token(), keys);
                self.request(now, sk, route, corr, req, out)
            }
            Err(body) => out.reply.push((route, ClientResponse { corr, body })),
        }
    }

    /// The one shard of `keys` (1 to `MAX_READ_MANY_KEYS` keys of `table`, all in one shard,
    /// as the client groups them), or the error to answer.
    #[allow(clippy::result_large_err)] // built once per refused request, as `shard_key`'s
    fn shard_of_keys(&self, table: &str, keys: &[Bytes]) -> Result<ShardKey, Response> {
        let refuse =
            |message: String| Response::Error { code: ErrorCode::InvalidArgument, message };
        if keys.is_empty() || keys.len() > MAX_READ_MANY_KEYS {
            let n = keys.len();
            return Err(refuse(format!(
                "a request of several keys names 1 to {MAX_READ_MANY_KEYS} keys, not {n}"
            )));
        }
        if let Some(e) = keys.iter().find_map(|k| self.limits.check_key(k).err()) {
            return Err(limit_error(table, &e));
        }
        let sk = self.shard_key(table, &keys[0])?;
        if keys[1..].iter().any(|k| self.shard_key(table, k).ok() != Some(sk)) {
            return Err(refuse(format!("the keys of one request of table {table:?} must be in one shard (the client groups them by shard)")));
        }
        Ok(sk)
    }

    pub fn take_token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }

    pub fn request(
        &mut self,
        now: Instant,
        sk: ShardKey,
        route: Route,
        corr: u64,
        req: LogRequest,
        out: &mut HostEffects,
    ) {
        let Some(s) = self.shards.get_mut(&sk) else {
            let body = if self.opening.contains_key(&sk) {
                // Its storage is being opened (a new table, an adopted move): retry shortly.
                Response::LogRejected(LogFailure::Unavailable)
            } else {
                // rifl.md §5.7 step 4 (`UnknownOwner`): the shard lives elsewhere.
                Response::LogRejected(LogFailure::Moved {
                    replicas: self.placement_of(sk).replicas,
                })
            };
            return out.reply.push((route, ClientResponse { corr, body }));
        };
        // The service-rate limit applies to the shards this node leads (module `rate`).
        let leads = s.replica.role() == Role::Leader;
        if let Some(rate) = self.rate.as_mut().filter(|_| leads && takes_a_token(&req)) {
            match rate.admit(now, sk, Queued { route, corr, req }) {
                Admission::Now(q) => return self.dispatch(now, sk, q, out),
                Admission::Queued => return,
                Admission::Full(q) => {
                    let body = Response::LogRejected(LogFailure::Unavailable);
                    return out.reply.push((q.route, ClientResponse { corr: q.corr, body }));
                }
            }
        }
        self.dispatch(now, sk, Queued { route, corr, req }, out);
    }

    /// Hands a client request to its shard replica (or answers where the shard went).
    fn dispatch(&mut self, now: Instant, sk: ShardKey, q: Queued, out: &mut HostEffects) {
        let Some(s) = self.shards.get_mut(&sk) else {
            let body = Response::LogRejected(LogFailure::Moved {
                replicas: self.placement_of(sk).replicas,
            });
            return out.reply.push((q.route, ClientResponse { corr: q.corr, body }));
        };
        s.waiting.insert(q.req.token(), (q.route, q.corr));
        s.replica.on_client_request(now, q.req);
        self.drain(sk, out);
    }

    /// Where the shard `sk` lives, by this node's catalog.
    pub fn placement_of(&self, sk: ShardKey) -> ShardMove {
        let t = self
            .tables
            .values()
            .find(|t| t.id == sk.0)
            .expect("a shard key names a catalogued table");
        t.placement(sk.1, &self.nodes)
    }

    pub fn on_peer(
        &mut self,
        now: Instant,
        from: NodeId,
        id: ShardId,
        msg: LogMessage,
        out: &mut HostEffects,
    ) {
        // A message of another generation of the shard (a retired group, or a new one this
        // node has not adopted yet) must not reach this replica (rifl.md §5.7).
        let Some(s) = self.shards.get_mut(&id.key()).filter(|s| s.id == id) else {
            self.unroutable_messages += 1;
            debug!(?id, from = %from, "shard message for a table, shard or generation this node does not have; dropped");
            return;
        };
        s.replica.on_message(now, from, msg);
        self.drain(id.key(), out);
    }

    /// The runtime made every record of `id` with a token `<= upto` durable.
    pub fn on_persisted(&mut self, now: Instant, id: ShardId, upto: u64, out: &mut HostEffects) {
        let Some(s) = self.shards.get_mut(&id.key()).filter(|s| s.id == id) else {
            return; // a retired replica's last report
        };
        s.replica.on_persisted(now, upto);
        let mut ready = Vec::new();
        s.held.retain(|(t, to, msg)| {
            let due = *t <= upto;
            if due {
                ready.push((*to, msg.clone()));
            }
            !due
        });
        for (to, msg) in ready {
            out.send.push((to, shard_message(id, msg)));
        }
        self.drain(id.key(), out);
    }

    /// The runtime's storage of `id` failed: the replica stops persisting.
    pub fn on_failed(&mut self, id: ShardId, error: &str) {
        if let Some(s) = self.shards.get_mut(&id.key()).filter(|s| s.id == id) {
            error!(table = %s.table, shard = id.shard, %error, "shard storage failed; the shard stops making progress (restart the node)");
            s.failed = true;
        }
    }

    /// The earliest deadline of any shard (or of a request waiting for the rate limit).
    pub fn deadline(&self) -> Option<Instant> {
        let rate = self.rate.as_ref().and_then(RateLimit::deadline);
        self.shards.values().filter_map(|s| s.replica.poll_timeout()).chain(rate).min()
    }

    /// Ticks every shard whose deadline has passed, and serves the requests whose rate-limit
    /// token has come.
    pub fn tick(&mut self, now: Instant, out: &mut HostEffects) {
        let released = self.rate.as_mut().map(|r| r.release(now)).unwrap_or_default();
        for (sk, q) in released {
            self.dispatch(now, sk, q, out);
        }
        let due: Vec<ShardKey> = self
            .shards
            .iter()
            .filter(|(_, s)| s.replica.poll_timeout().is_some_and(|t| t <= now))
            .map(|(k, _)| *k)
            .collect();
        for k in due {
            self.shards.get_mut(&k).expect("listed").replica.on_tick(now);
            self.drain(k, out);
        }
    }

    /// Executes a shard's effects: messages out (or held for their persist token), persist
    /// records to storage, replies to their connections (or to `internal`).
    pub fn drain(&mut self, key: ShardKey, out: &mut HostEffects) {
        let s = self.shards.get_mut(&key).expect("shard exists");
        s.replica.poll_effects(&mut s.effects);
        let id = s.id;
        let fx = &mut s.effects;
        for (to, msg) in fx.send.drain(..) {
            out.send.push((to, shard_message(id, msg)));
        }
        s.held.append(&mut fx.send_after_persist);
        if !fx.persist.is_empty() && !s.failed {
            out.storage.push(Storage::Log { shard: id, records: fx.persist.drain(..).collect() });
        }
        fx.persist.clear();
        for reply in fx.reply.drain(..) {
            if self.internal_tokens.remove(&reply.token()) {
                match reply {
                    LogReply::Write { token, result } => self.internal.push((token, result)),
                    LogReply::Txn { token, result } => self.internal_txn.push((token, result)),
                    _ => {}
                }
                continue;
            }
            let Some((route, corr)) = s.waiting.remove(&reply.token()) else {
                continue;
            };
            if let LogReply::Read { token, result } = &reply {
                // Registered only where the leader served the value (its sharers, §5.14.2).
                let vts = result.as_ref().ok().filter(|v| v.served_by == self.me).map(|v| v.vts);
                self.sharers.on_read_reply(*token, key, route, vts);
            }
            let body = match reply {
                LogReply::Frozen { result: Ok(snapshot), .. } => Response::ShardFrozen {
                    placement: s
                        .replica
                        .moved_to()
                        .cloned()
                        .expect("a frozen shard knows where it goes"),
                    snapshot: Some(snapshot),
                },
                // The leader refused: a `Freeze` to other nodes came first.
                LogReply::Frozen { result: Err(WriteError::Moved { replicas }), .. } => {
                    let ids: Vec<String> = replicas.iter().map(|n| n.0.to_string()).collect();
                    Response::Error {
                        code: ErrorCode::InvalidArgument,
                        message: format!(
                            "table {} shard {} is already moving to nodes {}: finish that move first (`strata shard move {} {} --to {}`)",
                            s.table, id.shard, ids.join(","), s.table, id.shard, ids.join(",")
                        ),
                    }
                }
                // The values must fit one frame (`MAX_READ_MANY_KEYS` of the largest would not).
                LogReply::ReadMany { result: Ok(values), .. }
                    if reply_bytes(&values) + FRAME_SLACK_BYTES > self.limits.max_frame_bytes =>
                {
                    Response::LogRejected(LogFailure::Invalid(format!(
                        "the values of these {} keys exceed a frame of {} bytes: read them in smaller groups",
                        values.len(),
                        self.limits.max_frame_bytes
                    )))
                }
                reply => reply_body(reply),
            };
            out.reply.push((route, ClientResponse { corr, body }));
        }
        for event in fx.event.drain(..) {
            // kairos.md §5.7 "EI: send Invalidate{k, ts} to every client in sharers[k]".
            if let LogEvent::Txn(TxnEvent::Decided { key: k, decision: Decision::Commit, .. }) =
                &event
            {
                let vts = s.replica.vts(k);
                let pushed = self.sharers.on_installed(&s.table, key, k, vts, out);
                if let Some(rate) = self.rate.as_mut().filter(|_| pushed > 0) {
                    rate.charge(key, pushed);
                }
            }
            log_event(&s.table, id.shard, &event);
            if self.audit {
                out.audit.push(Audit::Log { table: s.table.clone(), shard: id.shard, event });
            }
        }
        // Sharers are the leader's soft state (`sharers`): gone when it stops leading.
        if s.replica.role() != Role::Leader && self.sharers.has_shard(key) {
            self.sharers.drop_shard(&s.table, key, out);
        }
    }

    fn system_shard(&self, table: &str) -> Option<&Shard> {
        self.shards.get(&(self.tables.get(table)?.id, 0))
    }

    /// Whether this node leads `table`'s shard 0, has applied every committed entry and
    /// holds its leader lease (so its applied state is the table's and it may write).
    pub fn leads(&self, now: Instant, table: &str) -> Option<u32> {
        self.leads_shard(now, (self.tables.get(table)?.id, 0))
    }

    /// The leader `table`'s shard 0 knows of (itself if it leads).
    pub fn leader_of(&self, table: &str) -> Option<NodeId> {
        self.leader_hint((self.tables.get(table)?.id, 0))
    }

    /// Whether this node's replica of `sk` is the ready leader (synced, every committed entry
    /// applied, leader lease held): its epoch.
    pub fn leads_shard(&self, now: Instant, sk: ShardKey) -> Option<u32> {
        let s = self.shards.get(&sk)?;
        (!s.failed && s.replica.is_ready_leader(now)).then(|| s.replica.epoch())
    }

    /// The leader this node's replica of `sk` knows of (itself if it leads).
    pub fn leader_hint(&self, sk: ShardKey) -> Option<NodeId> {
        let r = &self.shards.get(&sk)?.replica;
        if r.role() == Role::Leader {
            Some(self.me)
        } else {
            r.leader_hint()
        }
    }

    /// The shard `shard` of the table `name`, if the catalog has them.
    pub fn shard_key_of(&self, name: &str, shard: u32) -> Option<ShardKey> {
        self.tables.get(name).filter(|t| shard < t.def.shards).map(|t| (t.id, shard))
    }

    /// Whether the catalog has the table with id `table` and it has `shard`.
    pub fn knows(&self, sk: ShardKey) -> bool {
        self.tables.values().any(|t| t.id == sk.0 && sk.1 < t.def.shards)
    }

    /// Visits every live key and value of `table`'s shard 0, as applied here.
    pub fn scan(&self, table: &str, f: impl FnMut(&[u8], &[u8])) {
        if let Some(s) = self.system_shard(table) {
            s.replica.for_each_item(f);
        }
    }

    /// The node's own write to `table`'s shard 0 (a system table); the reply comes back in
    /// `internal` with the returned token.
    pub fn write_internal(
        &mut self,
        now: Instant,
        table: &str,
        rifl: Rifl,
        key: Bytes,
        op: WriteOp,
        out: &mut HostEffects,
    ) -> u64 {
        let token = self.take_token();
        let Some(sk) = self.tables.get(table).map(|t| (t.id, 0)) else {
            self.internal.push((token, Err(WriteError::Invalid("no such system table"))));
            return token;
        };
        let Some(s) = self.shards.get_mut(&sk) else {
            self.internal.push((token, Err(WriteError::Unavailable)));
            return token;
        };
        self.internal_tokens.insert(token);
        s.replica
            .on_client_request(now, LogRequest::Write { token, rifl, key, op, immediate: false });
        self.drain(sk, out);
        token
    }

    /// Whether some replica here holds a lock or a decision record (recovery's timers watch).
    pub fn has_txn_state(&self) -> bool {
        self.shards.values().any(|s| s.replica.has_txn_state())
    }

    /// The node's own transaction request to its replica of `sk` (the recovery coordinator's,
    /// rifl.md §5.8.4): `make` builds it with the token its reply comes back with, in
    /// `internal_txn`. Not rate-limited: recovery frees keys.
    pub fn request_internal(
        &mut self,
        now: Instant,
        sk: ShardKey,
        make: impl FnOnce(u64) -> LogRequest,
        out: &mut HostEffects,
    ) -> u64 {
        let token = self.take_token();
        let Some(s) = self.shards.get_mut(&sk) else {
            self.internal_txn.push((token, Err(WriteError::NotLeader { hint: None })));
            return token;
        };
        self.internal_tokens.insert(token);
        s.replica.on_client_request(now, make(token));
        self.drain(sk, out);
        token
    }

    /// rifl.md §5.6: the lease service confirmed these clients expired. Every shard this node
    /// leads appends an `Expire` entry for those it holds records of.
    pub fn expire_clients(&mut self, now: Instant, clients: &[u64], out: &mut HostEffects) {
        if clients.is_empty() {
            return;
        }
        let led: Vec<ShardKey> = self
            .shards
            .iter()
            .filter(|(_, s)| s.replica.role() == Role::Leader)
            .map(|(k, _)| *k)
            .collect();
        for k in led {
            let s = self.shards.get_mut(&k).expect("listed");
            if s.replica.expire_clients(now, clients) {
                info!(table = %s.table, shard = k.1, clients = clients.len(), "collecting the records of clients whose lease expired");
                self.drain(k, out);
            }
        }
    }

    pub fn status(&self, now: Instant) -> Vec<ShardStatus> {
        self.shards
            .values()
            .map(|s| {
                let r = &s.replica;
                let role = match r.role() {
                    Role::Follower => ShardRole::Follower,
                    Role::Candidate => ShardRole::Candidate,
                    Role::Leader => ShardRole::Leader,
                };
                let leader = if r.role() == Role::Leader { Some(self.me) } else { r.leader_hint() };
                ShardStatus {
                    table: s.table.clone(),
                    shard: s.id.shard,
                    role,
                    leader,
                    epoch: r.epoch(),
                    last_index: r.last_index(),
                    persisted_index: r.persisted_index(),
                    applied_index: r.applied_index(),
                    durable_index: r.durable_index(),
                    active_set: r.active_set(),
                    serving: !s.failed && (r.is_ready_leader(now) || r.is_serving(now)),
                    reads_served: r.stats().reads_served,
                    reads_made_durable: r.stats().reads_made_durable,
                    locks: r.locks().count() as u64,
                    kairos_sharers: self.sharers.count(s.id.key()),
                    kairos_invalidations: self.sharers.invalidations_sent(s.id.key()),
                    txn_reads_foreseen: r.stats().reads_foreseen,
                    txn_prepares_foreseen_aborted: r.stats().prepares_foreseen_aborted,
                    txn_reads_held: r.stats().reads_held,
                }
            })
            .collect()
    }

    /// Every running replica's invariants, and the catalog's: a hosted replica is of its
    /// shard's current generation and this node is in its placement.
    pub fn check_invariants(&self) {
        for (key, s) in &self.shards {
            s.replica.check_invariants();
            assert_eq!(s.id.key(), *key, "a shard is filed under its own key");
            let placement = self.placement_of(*key);
            assert_eq!(
                (s.id.generation, placement.replicas.contains(&self.me)),
                (placement.generation, true),
                "{}/{}: a hosted replica is of the catalogued generation and placement",
                s.table,
                key.1
            );
        }
    }
}

fn shard_message(id: ShardId, msg: LogMessage) -> PeerMessage {
    PeerMessage::Shard { table: id.table, shard: id.shard, generation: id.generation, msg }
}

/// About the encoded size of a `LogValues` reply's values.
fn reply_bytes(values: &[ReadValue]) -> usize {
    values.iter().map(|v| 32 + v.value.as_ref().map_or(0, |b| b.len())).sum()
}

/// The refusal of a key or value beyond the node's limits (`KeyTooLarge`, `ValueTooLarge`, or
/// `InvalidArgument` for an empty key), as the rc keyspace answers it.
fn limit_error(table: &str, e: &LimitError) -> Response {
    Response::Error { code: e.code(), message: format!("table {table}: {e}") }
}

pub(crate) fn reply_body(reply: LogReply) -> Response {
    match reply {
        LogReply::Write { result: Ok(ack), .. } => {
            Response::LogWritten { index: ack.index, outcome: ack.outcome }
        }
        LogReply::Write { result: Err(e), .. } => write_error_body(e),
        LogReply::Read { result: Ok(v), .. } => Response::LogValue {
            value: v.value,
            update_index: v.update_index,
            served_by: v.served_by,
            epoch: v.epoch,
            // Only a Kairos table's keys have a timestamp (absent: `ZERO`).
            vts: (v.vts != strata_wire::txn::Timestamp::ZERO).then_some(v.vts),
            w_mean_ns: v.w_mean_ns,
        },
        LogReply::ReadMany { result: Ok(values), .. } => Response::LogValues {
            served_by: values.first().map_or(NodeId(0), |v| v.served_by),
            epoch: values.first().map_or(0, |v| v.epoch),
            values: values.into_iter().map(|v| (v.value, v.update_index)).collect(),
        },
        LogReply::ReservationsReleased { .. } => Response::ReservationsReleased,
        LogReply::Read { result: Err(e), .. } | LogReply::ReadMany { result: Err(e), .. } => {
            Response::LogRejected(match e {
                ReadError::NotLeader { hint } => LogFailure::NotLeader { hint },
                ReadError::NotInActiveSet => LogFailure::NotInActiveSet,
                ReadError::Timeout => LogFailure::Timeout,
                ReadError::Unavailable => LogFailure::Unavailable,
                ReadError::Moved { replicas } => LogFailure::Moved { replicas },
                ReadError::Locked => LogFailure::Locked,
            })
        }
        LogReply::Txn { result: Ok(TxnAnswer::Votes { votes, decided }), .. } => {
            Response::TxnVotes { votes, decided }
        }
        LogReply::Txn { result: Ok(TxnAnswer::Done), .. } => Response::TxnDecided,
        LogReply::Txn { result: Ok(TxnAnswer::Watermarks { wm, ts_gc }), .. } => {
            Response::KairosWatermarks { wm, ts_gc }
        }
        LogReply::Txn { result: Err(e), .. } => write_error_body(e),
        LogReply::Frozen { result: Err(e), .. } => write_error_body(e),
        // Answered in `drain`, which knows the placement the snapshot goes to.
        LogReply::Frozen { result: Ok(_), .. } => {
            unreachable!("a freeze is answered by the move code")
        }
    }
}

/// RIFL's verdicts are `Response::Error`s a client must not retry (rifl.md §5.3 S3, S4): a
/// broken envelope is `BadEnvelope` (not `LogRejected(Invalid)`, so a client can tell a RIFL
/// protocol error from a bad key); the rest are the engine's retryable or invalid refusals.
fn write_error_body(e: WriteError) -> Response {
    Response::LogRejected(match e {
        WriteError::Stale => {
            return Response::Error {
                code: ErrorCode::Stale,
                message:
                    "the client had acknowledged this write (seq at or below its first_incomplete)"
                        .to_string(),
            }
        }
        WriteError::BadEnvelope(m) => {
            return Response::Error { code: ErrorCode::BadEnvelope, message: m.to_string() }
        }
        WriteError::ExpiredLease => {
            return Response::Error {
                code: ErrorCode::ExpiredLease,
                message: "the client's lease expired and its records in this shard were collected; outcome of its unfinished writes unknown".to_string(),
            }
        }
        WriteError::NotLeader { hint } => LogFailure::NotLeader { hint },
        WriteError::Unavailable => LogFailure::Unavailable,
        WriteError::Timeout => LogFailure::Timeout,
        WriteError::Invalid(m) => LogFailure::Invalid(m.to_string()),
        WriteError::Moved { replicas } => LogFailure::Moved { replicas },
        WriteError::Locked => LogFailure::Locked,
    })
}

/// The audit events worth a log line; the rest (per read, per grant) would flood it.
fn log_event(table: &str, shard: u32, ev: &LogEvent) {
    match ev {
        LogEvent::BecameLeader { epoch, noop } => {
            info!(table, shard, epoch, noop = %noop, "became leader")
        }
        LogEvent::SyncPhaseDone { epoch, active_set, .. } => {
            let set: Vec<String> = active_set.iter().map(|n| n.to_string()).collect();
            info!(table, shard, epoch, active_set = %set.join(","), "leader ready (sync phase done)")
        }
        LogEvent::LeaderLeaseExpired { epoch, followers } => {
            warn!(table, shard, epoch, %followers, "leader lease lapsed: no majority acked a recent heartbeat round")
        }
        LogEvent::SteppedDown { epoch, reason } => {
            info!(table, shard, epoch, ?reason, "stepped down")
        }
        LogEvent::ElectionStarted { epoch, last_index } => {
            debug!(table, shard, epoch, last = %last_index, "election started")
        }
        LogEvent::Truncated { after, removed_upto } => {
            info!(table, shard, after = %after, removed_upto = %removed_upto, "truncated a divergent log suffix")
        }
        LogEvent::AsAdded { node, .. } => debug!(table, shard, node = %node, "active set: added"),
        LogEvent::AsRemoved { node, .. } => {
            info!(table, shard, node = %node, "active set: removed")
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rifl_verdicts_are_final_errors_and_the_rest_stay_retryable_refusals() {
        let code = |e| match reply_body(LogReply::Write { token: 1, result: Err(e) }) {
            Response::Error { code, .. } => Some(code),
            _ => None,
        };
        assert_eq!(code(WriteError::Stale), Some(ErrorCode::Stale));
        assert_eq!(code(WriteError::BadEnvelope("seq 0")), Some(ErrorCode::BadEnvelope));
        assert!(matches!(
            reply_body(LogReply::Write { token: 1, result: Err(WriteError::Unavailable) }),
            Response::LogRejected(LogFailure::Unavailable)
        ));
    }
}
