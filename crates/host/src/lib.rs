//! `strata-host`: the host core, one sans-IO state machine per server process (`DESIGN.md`,
//! "The sans-IO contract"). It composes everything a Strata node decides:
//!
//! * the rc replica (Kite, `strata-rc`), which owns the default keyspace;
//! * the log tables ([`shards`]): the catalog as data ([`catalog`]) and one `LogReplica` per
//!   shard replica the node hosts, their persist records and held messages;
//! * RIFL's lease check and, at the `__leases` leader, the lease service ([`leases`]);
//! * shard moves ([`moves`]): freeze at the leader, adopt everywhere, as storage steps;
//! * the courier ([`courier`]): node-level messages addressed to "the leader of (table,
//!   shard)", redirected and retried until that node handles them;
//! * who may do what ([`auth`]): each request's required role, checked against the role the
//!   runtime attached to the connection ([`Host::on_connected`]).
//!
//! Time arrives as `now` (one clock for every part), randomness as a seed in [`HostConfig`],
//! and everything the host wants done leaves as [`HostEffects`]: peer messages, client replies,
//! storage requests tagged by their owner ([`Storage`]: a shard's log records, opening and
//! closing a shard's storage, the catalog) and transport faults. Storage requests are answered
//! by inputs (`on_shard_opened`, `on_shard_persisted`, `on_catalog_saved`). The server runtime
//! (`strata-node`) and the simulator (`strata-sim`) both drive this type, each executing its
//! effects in one place, so the node-level code the simulator tests is the code that runs.

pub mod auth;
pub mod catalog;
pub mod courier;
mod effects;
pub mod leases;
mod moves;
mod rate;
mod recovery;
mod shards;
mod sharers;
mod txn;

use std::time::Duration;

use strata_core::{Node, Route};
use strata_log::RecoveredState;
use strata_rc::{RcConfig, RcEffects, RcInput, RcReplica, RcStats};
use strata_rifl::RiflConfig;
use strata_wire::client::{
    ClientRequest, ClientResponse, ErrorCode, Request, Response, ShardStatus,
};
use strata_wire::peer::PeerMessage;
use strata_wire::{Instant, NodeId, Role};
use tracing::{error, info};

pub use effects::{Audit, HostEffects, ShardId, ShardKey, Storage};

use catalog::{describe, lease_table_def, Catalogued};
use courier::{Courier, Delivered, MailError};
use leases::{Leases, Released};
use moves::Adoption;
use shards::{Opening, Shards};

/// What a host is configured with.
#[derive(Clone, Debug)]
pub struct HostConfig {
    /// The rc replica's configuration; its `node` and `replicas` are this node and every node
    /// of the cluster (log-table shards start on all of them).
    pub rc: RcConfig,
    pub rifl: RiflConfig,
    /// Seeds every shard replica (mixed with the shard's id and generation).
    pub seed: u64,
    /// An optional service-rate limit, in requests per second, for each shard this node
    /// leads (a token bucket; `None`: unlimited). For benchmarks that must show hot spots on a
    /// small machine.
    pub shard_rate_limit: Option<u32>,
    /// Emit the parts' audit events as [`HostEffects::audit`] (the simulator's checkers read
    /// them); off in a server.
    pub audit: bool,
    /// Log-table configurations that replace the one derived from the table's definition
    /// (`catalog::log_config`) when its shards start, by table name: for the simulator's
    /// scenarios, which run ORCA's presets, timer changes and planted bugs (orca.md §1.3,
    /// §7) on whole hosts. Empty in a server.
    pub log_overrides: std::collections::BTreeMap<String, strata_log::LogConfig>,
    /// Transaction recovery's `T_TX` per object of a transaction (rifl.md R-D15: RAMCloud's
    /// 50 ms): a lock held this long times the transaction's objects starts recovery.
    pub txn_timeout_per_object: std::time::Duration,
    /// How long a transaction's read for update holds the key's other reads for update back
    /// at its shard's leader (`LogConfig::txn_read_hold`; [`TXN_READ_HOLD`] by default; zero:
    /// not at all), for every table whose configuration is not overridden.
    pub txn_read_hold: std::time::Duration,
}

pub use strata_log::TXN_READ_HOLD;

/// RAMCloud's `T_TX` per object (rifl.md R-D15).
pub const TXN_TIMEOUT_PER_OBJECT: std::time::Duration = std::time::Duration::from_millis(50);

/// Why a host could not be built. Each variant says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The rc replica refused its configuration (the replica set).
    #[error("invalid replica set: {0}")]
    Rc(#[from] strata_rc::ConfigError),
    /// The stored catalog does not decode or holds an invalid table (restore it from a
    /// replica, or remove the table's entry).
    #[error("catalog: {0}")]
    Catalog(String),
}

/// A catalog change waiting for its `Storage::Catalog` (one at a time: each save carries the
/// whole catalog, so two in flight could undo each other).
enum Change {
    Create {
        def: strata_wire::client::TableDef,
        route: Route,
        corr: u64,
    },
    /// (Boxed: an adoption carries the moved snapshot, much larger than a `Create`.)
    Adopt(Box<Adoption>),
}

/// The host core (crate docs).
pub struct Host {
    me: NodeId,
    rc: RcReplica,
    rc_effects: RcEffects,
    audit: bool,
    shards: Shards,
    leases: Leases,
    /// Node-level messages to shard leaders (`courier`).
    courier: Courier,
    /// Transaction recovery: `T_TX` timers and coordinators (`recovery`).
    recovery: recovery::Recovery,
    out: HostEffects,
    /// The catalog change under way, and its save's token once asked for.
    change: Option<(Option<u64>, Change)>,
    next_catalog_token: u64,
    /// The role of each client connection that has one ([`Host::on_connected`]); a
    /// connection absent here has no credentials and may send nothing (`auth`).
    roles: std::collections::BTreeMap<Route, Role>,
    /// Client requests refused by the role check (`auth::authorize`).
    refused_requests: u64,
}

impl Host {
    /// A host from its configuration and the stored catalog (`b""` when there is none). Its
    /// first effects open the storage of every shard replica it hosts: the runtime answers
    /// each with [`Host::on_shard_opened`] before the host serves those shards.
    pub fn new(cfg: HostConfig, stored_catalog: &[u8]) -> Result<Host, HostError> {
        let me = cfg.rc.node;
        let (nodes, limits) = (cfg.rc.replicas.clone(), cfg.rc.limits);
        let rc = RcReplica::new(cfg.rc).map_err(HostError::Rc)?;
        let catalog = catalog::decode(stored_catalog).map_err(HostError::Catalog)?;
        let mut shards = Shards::new(me, nodes, cfg.seed, cfg.shard_rate_limit, limits);
        shards.audit = cfg.audit;
        shards.log_overrides = cfg.log_overrides;
        shards.txn_read_hold = cfg.txn_read_hold;
        let mut out = HostEffects::default();
        shards.start_table(
            Catalogued { def: lease_table_def(), moved: Default::default() },
            false,
            &mut out,
        );
        for table in catalog {
            catalog::check_table_def(&table.def, shards.nodes.len()).map_err(HostError::Catalog)?;
            shards.start_table(table, false, &mut out);
        }
        Ok(Host {
            me,
            rc,
            rc_effects: RcEffects::default(),
            audit: cfg.audit,
            shards,
            leases: Leases::new(me, cfg.rifl),
            courier: Courier::default(),
            recovery: recovery::Recovery::new(cfg.txn_timeout_per_object),
            out,
            change: None,
            next_catalog_token: 0,
            roles: Default::default(),
            refused_requests: 0,
        })
    }

    pub fn id(&self) -> NodeId {
        self.me
    }

    // ---- inputs ----

    /// Connection `route` opened with `role`: what its verified credentials allow (`None`: it
    /// has none, and may send nothing). The runtime reports it before the connection's first
    /// request.
    pub fn on_connected(&mut self, route: Route, role: Option<Role>) {
        match role {
            Some(role) => self.roles.insert(route, role),
            None => self.roles.remove(&route),
        };
    }

    /// A decoded client request on connection `route`. `Status` is the runtime's (it owns the
    /// transport counters): it asks [`Host::check_role`], then [`Host::status`] for the
    /// protocol part.
    pub fn on_client_request(&mut self, now: Instant, route: Route, req: ClientRequest) {
        if let Some(body) = self.check_role(route, &req.body) {
            // After the replies the rc engine produced before it, like every node-level reply.
            self.drain_rc();
            self.out.reply.push((route, ClientResponse { corr: req.corr, body }));
            return;
        }
        self.request(now, route, req);
        self.settle(now);
    }

    /// The refusal if connection `route` may not send `req` (`auth::authorize` against the
    /// connection's role; counted in [`Host::refused_requests`]), `None` if it may.
    pub fn check_role(&mut self, route: Route, req: &Request) -> Option<Response> {
        let (code, message) = auth::authorize(self.roles.get(&route).copied(), req).err()?;
        self.refused_requests += 1;
        Some(Response::Error { code, message })
    }

    /// Client requests refused so far because the connection's role does not allow them.
    pub fn refused_requests(&self) -> u64 {
        self.refused_requests
    }

    /// Linearizable requests refused because their RIFL lease is one no grant produces
    /// (`BadEnvelope`; rifl.md §5.5.3, issue #17).
    pub fn invalid_envelopes(&self) -> u64 {
        self.leases.invalid_envelopes
    }

    /// Connection `route` is gone: its rc sessions close (Kite §6, client crash).
    pub fn on_disconnected(&mut self, now: Instant, route: Route) {
        self.roles.remove(&route);
        self.shards.sharers.on_disconnected(route);
        self.rc.on_client_request(now, RcInput::Disconnected { route });
    }

    pub fn on_peer_message(&mut self, now: Instant, from: NodeId, msg: PeerMessage) {
        match msg {
            PeerMessage::Shard { table, shard, generation, msg } => {
                let id = ShardId { table, shard, generation };
                self.shards.on_peer(now, from, id, msg, &mut self.out)
            }
            PeerMessage::LeaseQuery { client_id } => {
                self.leases.on_query(now, from, client_id, &mut self.out)
            }
            PeerMessage::LeaseRenew { req, lease_id } => {
                self.leases.on_forwarded(now, from, req, lease_id, &mut self.shards, &mut self.out)
            }
            PeerMessage::LeaseRenewed { req, grant } => {
                self.leases.on_renewed(req, grant, &mut self.out)
            }
            PeerMessage::LeaseAnswer { client_id, status } => {
                let released = self.leases.on_answer(now, client_id, &status);
                self.release(now, released);
            }
            PeerMessage::ToLeader { id, table, shard, service, body } => {
                self.serve_mail(now, from, id, (table, shard), service, &body)
            }
            PeerMessage::LeaderAnswer { id, answer } => {
                self.courier.on_answer(now, id, answer, &self.shards, &mut self.out)
            }
            msg => self.rc.on_message(now, from, msg),
        }
        self.settle(now);
    }

    /// Runs whatever is due at `now` (a tick with nothing due does nothing).
    pub fn on_tick(&mut self, now: Instant) {
        if self.rc.poll_timeout().is_some_and(|t| t <= now) {
            self.rc.on_tick(now);
        }
        self.shards.tick(now, &mut self.out);
        if self.leases.deadline() <= now {
            self.leases.tick(now, &mut self.shards, &mut self.out);
        }
        if self.courier.deadline().is_some_and(|t| t <= now) {
            self.courier.tick(now, &self.shards, &mut self.out);
        }
        if self.recovery_deadline().is_some_and(|t| t <= now) {
            self.recovery.tick(now, &mut self.shards, &mut self.courier, &mut self.out);
        }
        self.settle(now);
    }

    fn recovery_deadline(&self) -> Option<Instant> {
        self.recovery.deadline(self.shards.has_txn_state())
    }

    /// A courier message for the leader of `sk`, from `from` (this node's own too): served
    /// now, or — a transaction service — once its log entry is applied.
    fn serve_mail(
        &mut self,
        now: Instant,
        from: NodeId,
        id: u64,
        sk: ShardKey,
        service: u16,
        body: &bytes::Bytes,
    ) {
        let answer = if service == recovery::SERVICE_TXN {
            let (shards, courier, out) = (&mut self.shards, &mut self.courier, &mut self.out);
            self.recovery.on_mail(now, from, id, sk, body, shards, courier, out)
        } else {
            Some(courier::serve(now, &self.shards, sk, service, body))
        };
        if let Some(answer) = answer {
            recovery::answer_mail(
                now,
                from,
                id,
                answer,
                &self.shards,
                &mut self.courier,
                &mut self.out,
            );
        }
    }

    /// ORCA §5.7.4 (c): an operator revokes `node`'s active-set lease at this node's replica
    /// of `table`'s `shard` (before maintenance). False if that replica is not a leader with
    /// an active set or `node` is not a member; removal then follows the usual rule
    /// (confirmation or `rt`, never below a majority).
    pub fn revoke_shard_member(
        &mut self,
        now: Instant,
        table: &str,
        shard: u32,
        node: NodeId,
    ) -> bool {
        let Some(sk) = self.shards.shard_key_of(table, shard) else { return false };
        let Some(s) = self.shards.shards.get_mut(&sk) else { return false };
        let revoked = s.replica.revoke_member(now, node);
        self.shards.drain(sk, &mut self.out);
        self.settle(now);
        revoked
    }

    /// Sends `body` to `service` at whichever node leads `table`'s `shard` (`courier`): the
    /// message's id, whose outcome [`Host::take_mail_results`] gives later.
    pub fn send_to_leader(
        &mut self,
        now: Instant,
        table: &str,
        shard: u32,
        service: u16,
        body: bytes::Bytes,
    ) -> Result<u64, MailError> {
        let sk = self.shards.shard_key_of(table, shard).ok_or(MailError::NoSuchShard)?;
        let id = self.courier.send(now, sk, service, body, &self.shards, &mut self.out);
        self.settle(now);
        Ok(id)
    }

    /// The outcomes of messages sent with [`Host::send_to_leader`], by id, since the last call.
    pub fn take_mail_results(&mut self) -> Vec<(u64, Result<Delivered, MailError>)> {
        std::mem::take(&mut self.courier.results)
    }

    /// The answer to `Storage::Open`. `Err` is returned too (with the shard named), so a
    /// runtime can refuse to start when a shard's storage cannot be read.
    pub fn on_shard_opened(
        &mut self,
        now: Instant,
        id: ShardId,
        result: Result<RecoveredState, String>,
    ) -> Result<(), String> {
        let Some((opened, why)) = self.shards.opening.remove(&id.key()) else {
            return Ok(()); // not asked for
        };
        assert_eq!(opened, id, "the runtime answers the open it was asked for");
        let table = self.table_name(id);
        let result = result.map_err(|e| format!("table {table} shard {}: {e}", id.shard));
        let outcome = match why {
            Opening::Start { placement, created } => match result {
                Ok(state) => {
                    self.shards.start_replica(now, id, &placement, state, created, &mut self.out)
                }
                Err(e) => Err(e),
            },
            Opening::Adopt => self.adopt_opened(id, result),
        };
        if let Err(e) = &outcome {
            error!(error = %e, "a shard replica could not start; it serves nothing until the node restarts");
        }
        self.settle(now);
        outcome
    }

    /// The answer to `Storage::Log`: every record of `id` with a token `<= upto` is durable.
    pub fn on_shard_persisted(&mut self, now: Instant, id: ShardId, upto: u64) {
        self.shards.on_persisted(now, id, upto, &mut self.out);
        self.settle(now);
    }

    /// `Storage::Log` failed for `id`: the replica stops (its storage is poisoned).
    pub fn on_shard_failed(&mut self, id: ShardId, error: &str) {
        self.shards.on_failed(id, error);
    }

    /// The answer to `Storage::Catalog { token, .. }`.
    pub fn on_catalog_saved(&mut self, now: Instant, token: u64, result: Result<(), String>) {
        let Some((Some(t), _)) = &self.change else { return };
        if *t != token {
            return;
        }
        let (_, change) = self.change.take().expect("checked");
        let saved = result.map_err(|e| Response::Error {
            code: ErrorCode::Other(100),
            message: format!("cannot save the catalog: {e}"),
        });
        match change {
            Change::Create { def, route, corr } => {
                let body = saved.map_or_else(
                    |e| e,
                    |()| {
                        for new in created_tables(&def) {
                            let (name, definition) = (&new.def.name, describe(&new.def));
                            info!(table = %name, definition = %definition, "table created");
                            self.shards.start_table(new, true, &mut self.out);
                        }
                        Response::TableCreated { created: true }
                    },
                );
                self.out.reply.push((route, ClientResponse { corr, body }));
            }
            Change::Adopt(a) => {
                let (route, corr) = (a.route, a.corr);
                let body = match saved {
                    Ok(()) => self.shards.finish_adopt(now, *a, &mut self.out),
                    Err(e) => {
                        self.discard_adoption(&a);
                        e
                    }
                };
                self.out.reply.push((route, ClientResponse { corr, body }));
            }
        }
        self.settle(now);
    }

    // ---- outputs ----

    /// The next instant at which `on_tick` has work to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.rc.poll_timeout(),
            self.shards.deadline(),
            Some(self.leases.deadline()),
            self.courier.deadline(),
            self.recovery_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Moves every pending effect into `out` (appending).
    pub fn poll_effects(&mut self, out: &mut HostEffects) {
        self.drain_rc();
        self.out.move_into(out);
    }

    /// The protocol part of `Status`; the runtime adds its transport counters.
    pub fn status(&self, now: Instant) -> (RcStats, Vec<ShardStatus>, u64) {
        (self.rc.stats(), self.shards.status(now), self.shards.unroutable_messages)
    }

    /// Read-only access to the rc replica, for the simulator's checkers (they sample its keys
    /// after every input) and for tests.
    pub fn rc(&self) -> &RcReplica {
        &self.rc
    }

    /// Read-only access to this node's replica of `table`'s `shard`, for the simulator's
    /// checkers and for tests.
    pub fn shard_replica(&self, table: &str, shard: u32) -> Option<&strata_log::LogReplica> {
        let id = self.shards.tables.get(table)?.id;
        self.shards.shards.get(&(id, shard)).map(|s| &s.replica)
    }

    /// Asserts every part's invariants: run after every input in the simulator, sampled in
    /// a debug server (the rc check walks every key).
    pub fn check_invariants(&self) {
        self.rc.check_invariants();
        self.shards.check_invariants();
        if let Some((_, Change::Adopt(a))) = &self.change {
            assert_eq!(
                a.member,
                a.placement.replicas.contains(&self.me),
                "an adoption knows whether this node is in the new group"
            );
        }
    }

    // ---- routing ----

    fn request(&mut self, now: Instant, route: Route, req: ClientRequest) {
        // rifl.md §5.5.3: every linearizable RPC's lease is checked before an engine sees it.
        let req = if req.rifl.is_some() && req.body.is_linearizable() {
            match self.leases.admit(now, route, req, &self.shards, &mut self.out) {
                Some(req) => req,
                None => return,
            }
        } else {
            req
        };
        let ClientRequest { corr, rifl, body } = req;
        if !is_rc_request(&body) {
            // A node-level reply goes after the replies the rc engine produced before it.
            self.drain_rc();
        }
        let reply =
            |out: &mut HostEffects, body| out.reply.push((route, ClientResponse { corr, body }));
        match body {
            Request::SetFault { peer, fault } => {
                let body = self.set_fault(peer, fault);
                reply(&mut self.out, body)
            }
            // Log tables: routed to the shard replicas.
            Request::LogWrite { table, key, op, immediate } => {
                // Without RIFL's envelope the write is refused as `BadEnvelope`.
                self.shards.on_write(
                    now,
                    route,
                    corr,
                    &table,
                    key,
                    op,
                    rifl,
                    immediate,
                    &mut self.out,
                )
            }
            Request::LogRead { table, key, min_index, sharer, intent } => {
                let read = shards::ReadReq { key, min_index, sharer, intent };
                self.shards.on_read(now, route, corr, &table, read, &mut self.out)
            }
            Request::LogReadMany { table, keys, min_index, intent } => {
                let out = &mut self.out;
                self.shards.on_read_many(now, route, corr, &table, keys, min_index, intent, out)
            }
            Request::ReleaseReservations { table, keys, reserver } => {
                let release = |token, keys| strata_log::LogRequest::ReleaseReservations {
                    token,
                    keys,
                    reserver,
                };
                let out = &mut self.out;
                self.shards.request_on_keys(now, route, corr, &table, keys, release, out)
            }
            Request::TxnPrepare { table, shard, read_only, all, ops, kairos } => {
                let out = &mut self.out;
                let p = crate::txn::PrepareReq { read_only, all, ops, kairos };
                self.shards.on_txn_prepare(now, route, corr, rifl, &table, shard, p, out)
            }
            Request::TxnDecide { table, shard, decision, seqs } => {
                let out = &mut self.out;
                self.shards
                    .on_txn_decide(now, route, corr, rifl, &table, shard, decision, seqs, out)
            }
            Request::KairosReport { table, shard, client, seq, local_wm, c_freshness } => {
                let r = crate::txn::Report { client, seq, local_wm, c_freshness };
                self.shards.on_kairos_report(now, route, corr, &table, shard, r, &mut self.out)
            }
            Request::CreateTable { def } => self.create_table(route, corr, def),
            Request::RenewLease { .. } | Request::LeaseInfo { .. } => {
                self.leases.on_request(now, route, corr, &body, &mut self.shards, &mut self.out)
            }
            Request::FreezeShard { table, shard, replicas } => {
                self.shards.freeze(now, route, corr, &table, shard, replicas, &mut self.out)
            }
            Request::AdoptShard { table, shard, placement, snapshot } => {
                if let Some(busy) = self.busy() {
                    return reply(&mut self.out, busy);
                }
                match self.shards.adopt(
                    route,
                    corr,
                    &table,
                    shard,
                    placement,
                    snapshot,
                    &mut self.out,
                ) {
                    Ok(body) => reply(&mut self.out, body),
                    Err(adoption) => {
                        let member = adoption.member;
                        self.change = Some((None, Change::Adopt(Box::new(adoption))));
                        if !member {
                            self.save_catalog();
                        }
                    }
                }
            }
            Request::ListTables => reply(&mut self.out, Response::Tables(self.shards.list())),
            body => {
                let req = ClientRequest { corr, rifl, body };
                self.rc.on_client_request(now, RcInput::Client { route, req })
            }
        }
    }

    /// The refusal while another catalog change is under way.
    fn busy(&self) -> Option<Response> {
        self.change.as_ref().map(|_| Response::Error {
            code: ErrorCode::Other(100),
            message: "another table change is in progress on this node; try again".into(),
        })
    }

    fn create_table(&mut self, route: Route, corr: u64, def: strata_wire::client::TableDef) {
        let body = match self.shards.check_create(&def) {
            Err(message) => Response::Error { code: ErrorCode::InvalidArgument, message },
            Ok(Some(done)) => done,
            Ok(None) => match self.busy() {
                Some(busy) => busy,
                None => {
                    self.change = Some((None, Change::Create { def, route, corr }));
                    return self.save_catalog();
                }
            },
        };
        self.out.reply.push((route, ClientResponse { corr, body }));
    }

    /// Asks for the catalog with the pending change to be stored.
    fn save_catalog(&mut self) {
        let Some((token, change)) = &mut self.change else { return };
        let entries = match change {
            Change::Create { def, .. } => created_tables(def),
            Change::Adopt(a) => {
                let t = &self.shards.tables[&a.table];
                let mut entry = t.catalogued();
                entry.moved.insert(a.new.shard, a.placement.clone());
                vec![entry]
            }
        };
        self.next_catalog_token += 1;
        *token = Some(self.next_catalog_token);
        let bytes = catalog::encode(&self.shards.catalog_with(&entries));
        self.out.storage.push(Storage::Catalog { token: self.next_catalog_token, bytes });
    }

    /// A new replica's storage opened for an adoption (moves, step 2.1): save the catalog.
    fn adopt_opened(
        &mut self,
        id: ShardId,
        result: Result<RecoveredState, String>,
    ) -> Result<(), String> {
        let Some((None, Change::Adopt(a))) = &mut self.change else {
            return Err(format!("shard {id:?} opened for an adoption that is not under way"));
        };
        match result {
            Ok(state) => {
                a.state = Some(state);
                self.save_catalog();
                Ok(())
            }
            Err(e) => {
                let Some((_, Change::Adopt(a))) = self.change.take() else { unreachable!() };
                self.discard_adoption(&a);
                let body = Response::Error { code: ErrorCode::Other(100), message: e.clone() };
                self.out.reply.push((a.route, ClientResponse { corr: a.corr, body }));
                Err(e)
            }
        }
    }

    /// An adoption failed before the catalog named it: close the new replica's storage.
    fn discard_adoption(&mut self, a: &Adoption) {
        if a.member {
            self.out.storage.push(Storage::Close {
                shard: a.new,
                table: a.table.clone(),
                remove: false,
            });
        }
    }

    fn table_name(&self, id: ShardId) -> String {
        self.shards
            .tables
            .values()
            .find(|t| t.id == id.table)
            .map_or_else(|| format!("#{}", id.table), |t| t.def.name.clone())
    }

    fn set_fault(
        &mut self,
        peer: Option<NodeId>,
        fault: strata_wire::client::LinkFault,
    ) -> Response {
        if let Some(p) = peer.filter(|p| *p == self.me || !self.shards.nodes.contains(p)) {
            let known: Vec<String> = self
                .shards
                .nodes
                .iter()
                .filter(|n| **n != self.me)
                .map(|n| n.to_string())
                .collect();
            return Response::Error {
                code: ErrorCode::InvalidArgument,
                message: format!("{p} is not a peer of {} (peers: {})", self.me, known.join(", ")),
            };
        }
        info!(peer = ?peer.map(|p| p.0), ?fault, "link fault set");
        self.out.fault.push((peer, fault));
        Response::FaultSet
    }

    // ---- internal hand-offs ----

    /// Runs what one part's step produced for another until nothing is left: the log's answers
    /// to the lease service's writes, and the service's answers to this node's own questions.
    fn settle(&mut self, now: Instant) {
        loop {
            let written = std::mem::take(&mut self.shards.internal);
            let answers = self.leases.take_local();
            let txn_replies = std::mem::take(&mut self.shards.internal_txn);
            let local_mail = std::mem::take(&mut self.courier.local);
            let mail_results = self.take_recovery_results(now);
            if written.is_empty()
                && answers.is_empty()
                && txn_replies.is_empty()
                && local_mail.is_empty()
                && !mail_results
            {
                return;
            }
            for (token, result) in txn_replies {
                let (shards, courier, out) = (&mut self.shards, &mut self.courier, &mut self.out);
                if let Some((to, id, answer)) =
                    self.recovery.on_shard_reply(now, token, result, shards, courier, out)
                {
                    recovery::answer_mail(now, to, id, answer, shards, courier, out);
                }
            }
            for (id, sk, service, body) in local_mail {
                self.serve_mail(now, self.me, id, sk, service, &body);
            }
            for (token, result) in written {
                self.leases.on_written(now, token, result, &mut self.shards, &mut self.out);
            }
            for (client, status) in answers {
                let released = self.leases.on_answer(now, client, &status);
                self.release(now, released);
            }
        }
    }

    /// Hands the courier's results of recovery's messages to it (the rest stay for
    /// [`Host::take_mail_results`]); whether there were any.
    fn take_recovery_results(&mut self, now: Instant) -> bool {
        let results = std::mem::take(&mut self.courier.results);
        let mut handled = false;
        for (id, result) in results {
            let (shards, courier, out) = (&mut self.shards, &mut self.courier, &mut self.out);
            if self.recovery.on_mail_result(now, id, &result, shards, courier, out) {
                handled = true;
            } else {
                self.courier.results.push((id, result));
            }
        }
        handled
    }

    /// After an answer about a lease: collect expired clients' records, run held RPCs again.
    fn release(&mut self, now: Instant, released: Released) {
        self.rc.forget_clients(&released.expired);
        self.shards.expire_clients(now, &released.expired, &mut self.out);
        for (route, req) in released.requests {
            self.request(now, route, req);
        }
    }

    /// Moves the rc replica's effects into the host's, so replies keep their order.
    fn drain_rc(&mut self) {
        self.rc.poll_effects(&mut self.rc_effects);
        let fx = &mut self.rc_effects;
        // The rc engine keeps no durable state (Kite §6).
        assert!(
            fx.persist.is_empty() && fx.send_after_persist.is_empty(),
            "the rc engine asked to persist, but it has no storage path"
        );
        self.out.send.append(&mut fx.send);
        self.out.reply.extend(fx.reply.drain(..).map(|r| (r.route, r.resp)));
        if self.audit {
            self.out.audit.extend(fx.event.drain(..).map(Audit::Rc));
        } else {
            fx.event.clear();
        }
    }
}

/// Whether the rc engine answers `req` (the default keyspace and its sessions).
fn is_rc_request(req: &Request) -> bool {
    !matches!(
        req,
        Request::SetFault { .. }
            | Request::LogWrite { .. }
            | Request::LogRead { .. }
            | Request::LogReadMany { .. }
            | Request::ReleaseReservations { .. }
            | Request::TxnPrepare { .. }
            | Request::TxnDecide { .. }
            | Request::KairosReport { .. }
            | Request::CreateTable { .. }
            | Request::RenewLease { .. }
            | Request::LeaseInfo { .. }
            | Request::FreezeShard { .. }
            | Request::AdoptShard { .. }
            | Request::ListTables
    )
}

/// RIFL's parameters for a cluster whose leases last `term` (re-exported for the runtime's
/// configuration).
pub fn rifl_config(term: Duration) -> RiflConfig {
    leases::rifl_config(term)
}

/// The tables a `CreateTable` of `def` makes, in one catalog change: the table and, for a
/// sharded Kairos table, its companion validator table (kairos.md §3.2 "CV").
fn created_tables(def: &strata_wire::client::TableDef) -> Vec<Catalogued> {
    std::iter::once(def.clone())
        .chain(def.validators_def())
        .map(|def| Catalogued { def, moved: Default::default() })
        .collect()
}

#[cfg(test)]
mod tests {
    use strata_log::{DurabilityMode, LogConfig, LogEvent, Replication};
    use strata_wire::client::{
        TableDef, TableDurability, TableEngine, TableReads, TableReplication, TableTimers,
    };

    use super::*;

    /// A one-node host with table `t` whose configuration `HostConfig::log_overrides`
    /// replaces, run alone (storage answered at once) until `t`'s replica leads: the host and
    /// every audit event it emitted.
    fn run_alone(audit: bool) -> (Host, Vec<Audit>) {
        let (host, audits, _) = run_alone_until_leader(audit);
        (host, audits)
    }

    /// [`run_alone`], and the time `t`'s replica became a ready leader.
    fn run_alone_until_leader(audit: bool) -> (Host, Vec<Audit>, Instant) {
        let me = NodeId(0);
        let mut over = LogConfig::orca(Replication::SyncRepl);
        over.flush_interval = Duration::from_millis(7);
        let def = TableDef {
            name: "t".to_string(),
            engine: TableEngine::Log,
            durability: TableDurability::Sync,
            replication: TableReplication::Async,
            reads: TableReads::Leader,
            shards: 1,
            timers: TableTimers::Default,
            leaders: Vec::new(),
            txn: Default::default(),
            validation: Default::default(),
        };
        let stored = catalog::encode([&Catalogued { def, moved: Default::default() }]);
        let cfg = HostConfig {
            rc: RcConfig::new(me, vec![me]),
            rifl: rifl_config(Duration::from_secs(10)),
            seed: 1,
            shard_rate_limit: None,
            audit,
            log_overrides: [("t".to_string(), over)].into(),
            txn_timeout_per_object: TXN_TIMEOUT_PER_OBJECT,
            txn_read_hold: TXN_READ_HOLD,
        };
        let mut host = Host::new(cfg, &stored).expect("starts");
        let (mut now, mut out, mut audits) =
            (Instant::from_millis(1), HostEffects::default(), Vec::new());
        for _ in 0..10_000 {
            host.poll_effects(&mut out);
            audits.append(&mut out.audit);
            for s in std::mem::take(&mut out.storage) {
                match s {
                    Storage::Open { shard, .. } => {
                        host.on_shard_opened(now, shard, Ok(RecoveredState::default())).unwrap()
                    }
                    Storage::Log { shard, records } => {
                        let last = records.iter().map(|(t, _)| *t).max().expect("a record");
                        host.on_shard_persisted(now, shard, last);
                    }
                    Storage::Catalog { token, .. } => host.on_catalog_saved(now, token, Ok(())),
                    Storage::Close { .. } => {}
                }
            }
            if host.shard_replica("t", 0).is_some_and(|r| r.is_ready_leader(now)) {
                break;
            }
            now = host.poll_timeout().map_or(now, |t| t.max(now));
            host.on_tick(now);
        }
        (host, audits, now)
    }

    /// `LogReadMany` answers every key of a shard at its leader, in the order asked; an empty
    /// or too long list and an unknown table are refused, with the reason.
    #[test]
    fn a_read_of_several_keys_answers_in_order_and_refuses_what_it_cannot_serve() {
        use strata_wire::client::{ErrorCode, MAX_READ_MANY_KEYS};
        use strata_wire::log::LogIndex;
        use strata_wire::txn::ReadIntent;
        let (mut host, _, now) = run_alone_until_leader(false);
        host.on_connected(1, Some(Role::Read));
        let mut ask = |corr: u64, table: &str, n: usize| {
            let keys = (0..n).map(|i| bytes::Bytes::from(format!("k{i}"))).collect();
            let body = Request::LogReadMany {
                table: table.to_string(),
                keys,
                min_index: None,
                intent: ReadIntent::TxnForUpdate { reserver: 9 },
            };
            host.on_client_request(now, 1, ClientRequest::new(corr, body));
            let mut out = HostEffects::default();
            host.poll_effects(&mut out);
            let reply = out.reply.into_iter().find(|(_, r)| r.corr == corr);
            reply.expect("answered at once").1.body
        };
        match ask(1, "t", 3) {
            Response::LogValues { values, served_by, .. } => {
                assert_eq!(values.len(), 3);
                assert!(values.iter().all(|(v, u)| v.is_none() && *u == LogIndex::ZERO));
                assert_eq!(served_by, NodeId(0));
            }
            other => panic!("not the values: {other:?}"),
        }
        let refused = |body: Response, why: &str| match body {
            Response::Error { code: ErrorCode::InvalidArgument, message } => {
                assert!(message.contains(why), "{message}")
            }
            other => panic!("not refused: {other:?}"),
        };
        refused(ask(2, "t", 0), "1 to 64 keys, not 0");
        refused(ask(3, "t", MAX_READ_MANY_KEYS + 1), "not 65");
        refused(ask(4, "nope", 2), "no table named");
    }

    /// A dropped transaction's `ReleaseReservations` reaches its keys' shard leader: the
    /// read for update held back by its reservation is answered at once, the clock unmoved.
    #[test]
    fn a_release_of_reservations_lets_the_held_read_go_on() {
        use strata_wire::txn::ReadIntent;
        let (mut host, _, now) = run_alone_until_leader(false);
        host.on_connected(1, Some(Role::Read));
        let keys = vec![bytes::Bytes::from("a"), bytes::Bytes::from("b")];
        let read = |reserver| Request::LogReadMany {
            table: "t".to_string(),
            keys: keys.clone(),
            min_index: None,
            intent: ReadIntent::TxnForUpdate { reserver },
        };
        let mut send = |corr: u64, body: Request| {
            host.on_client_request(now, 1, ClientRequest::new(corr, body));
            let mut out = HostEffects::default();
            host.poll_effects(&mut out);
            out.reply.into_iter().map(|(_, r)| (r.corr, r.body)).collect::<Vec<_>>()
        };
        assert!(matches!(&send(1, read(7))[..], [(1, Response::LogValues { .. })]));
        assert!(send(2, read(8)).is_empty(), "held back by transaction 7's reservation");
        let release =
            Request::ReleaseReservations { table: "t".into(), keys: keys.clone(), reserver: 7 };
        let replies = send(3, release);
        assert!(replies.contains(&(3, Response::ReservationsReleased)), "{replies:?}");
        assert!(
            replies
                .iter()
                .any(|(corr, body)| *corr == 2 && matches!(body, Response::LogValues { .. })),
            "the held read is answered with the release: {replies:?}"
        );
        let empty = Request::ReleaseReservations { table: "t".into(), keys: vec![], reserver: 7 };
        assert!(matches!(&send(4, empty)[..], [(4, Response::Error { .. })]));
    }

    #[test]
    fn a_log_override_replaces_the_tables_configuration_and_audit_tags_log_events() {
        let (host, audits) = run_alone(true);
        let r = host.shard_replica("t", 0).expect("t runs");
        // The definition says sync durability; the override's CAD with replication to a
        // majority's memory and its flush interval are what the replica runs.
        assert_eq!(r.config().durability, DurabilityMode::Cad(Replication::SyncRepl));
        assert_eq!(r.config().flush_interval, Duration::from_millis(7));
        let led = |table: &str| {
            audits.iter().any(|a| {
                matches!(a, Audit::Log { table: t, shard: 0, event: LogEvent::BecameLeader { .. } } if t == table)
            })
        };
        assert!(led("t") && led(catalog::LEASE_TABLE), "every table's events, tagged: {audits:?}");
        let (_, silent) = run_alone(false);
        assert!(silent.is_empty(), "no audit events without HostConfig::audit");
    }
}
