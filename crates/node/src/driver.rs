//! The core task: the single owner of the protocol core. A thin pump (`DESIGN.md`, sans-IO
//! contract): take every queued input, call the core, drain its effects, route replies to client
//! writers and messages to peer links, then sleep until the next input or `poll_timeout()`.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use strata_core::Node;
use strata_rc::{RcEffects, RcInput, RcReplica, Route};
use strata_wire::client::{
    ClientRequest, ClientResponse, ErrorCode, NodeStatus, Request, Response,
};
use strata_wire::{Instant, NodeId};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant as TokioInstant;
use tracing::{debug, info, warn};

use crate::leases::{is_linearizable, Leases, Released};
use crate::shared::{ClientItem, CoreInput, Counters, WriterMsg};
use crate::tables::{DiskDone, Outbox, Tables};
use crate::transport::PeerLink;
use strata_wire::peer::PeerMessage;

/// A debug build checks the core's invariants once per this many flushes.
const INVARIANT_SAMPLE: u64 = 1024;
/// Inputs taken per wake-up before effects are flushed (bounds reply latency under load).
const MAX_INPUTS_PER_BATCH: usize = 1024;
/// A core-loop step (or a timer's lateness) this long is logged: leases (ORCA §5.8, 300 ms) and
/// follower leases (100 ms) cannot survive stalls of this order.
const STALL_WARN: Duration = Duration::from_millis(50);

pub(crate) struct Driver {
    core: RcReplica,
    /// `Instant(0)` of the core's clock.
    origin: TokioInstant,
    effects: RcEffects,
    routes: HashMap<Route, mpsc::UnboundedSender<WriterMsg>>,
    links: Vec<Arc<PeerLink>>,
    /// Which links got messages in this flush (parallel to `links`).
    touched: Vec<bool>,
    counters: Arc<Counters>,
    flushes: u64,
    /// The log tables' shard replicas (pumped by this same task: see `tables`).
    tables: Tables,
    outbox: Outbox,
    /// RIFL's lease check and, at the `__leases` leader, the lease service (`leases`).
    leases: Leases,
}

impl Driver {
    pub fn new(
        core: RcReplica,
        origin: TokioInstant,
        links: Vec<Arc<PeerLink>>,
        counters: Arc<Counters>,
        tables: Tables,
        leases: Leases,
    ) -> Driver {
        let touched = vec![false; links.len()];
        Driver {
            core,
            origin,
            effects: RcEffects::default(),
            routes: HashMap::new(),
            links,
            touched,
            counters,
            flushes: 0,
            tables,
            outbox: Outbox::default(),
            leases,
        }
    }

    fn now(&self, at: TokioInstant) -> Instant {
        Instant(at.saturating_duration_since(self.origin).as_nanos().min(u64::MAX as u128) as u64)
    }

    fn deadline(&self) -> Option<TokioInstant> {
        let rc = self.core.poll_timeout().map(|t| self.origin + Duration::from_nanos(t.0));
        let leases = Some(self.origin + Duration::from_nanos(self.leases.deadline().0));
        [rc, self.tables.deadline(), leases].into_iter().flatten().min()
    }

    pub async fn run(
        mut self,
        mut rx: mpsc::Receiver<CoreInput>,
        mut disk_rx: mpsc::UnboundedReceiver<DiskDone>,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            let deadline = self.deadline();
            let woke;
            tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => break,
                done = disk_rx.recv() => {
                    woke = TokioInstant::now();
                    if let Some(done) = done {
                        let at = woke;
                        self.tables.on_disk(at, done, &mut self.outbox);
                        while let Ok(done) = disk_rx.try_recv() {
                            self.tables.on_disk(at, done, &mut self.outbox);
                        }
                    }
                }
                input = rx.recv() => {
                    woke = TokioInstant::now();
                    let Some(input) = input else { break };
                    let at = woke;
                    self.handle(at, input);
                    for _ in 1..MAX_INPUTS_PER_BATCH {
                        match rx.try_recv() {
                            Ok(input) => self.handle(at, input),
                            Err(_) => break,
                        }
                    }
                }
                _ = sleep_until_opt(deadline) => {
                    woke = TokioInstant::now();
                    let late = deadline.map_or(Duration::ZERO, |d| woke.saturating_duration_since(d));
                    if late >= STALL_WARN {
                        warn!(late_ms = late.as_millis() as u64, "core task woke late for a timer (CPU starvation?)");
                    }
                }
            }
            self.tick_if_due();
            let busy = woke.elapsed();
            if busy >= STALL_WARN {
                warn!(
                    busy_ms = busy.as_millis() as u64,
                    "core task busy in one step: timers and other inputs waited"
                );
            }
        }
        // Shutdown: the listeners and readers are stopping; answer what already arrived.
        let at = TokioInstant::now();
        while let Ok(input) = rx.try_recv() {
            self.handle(at, input);
        }
        self.flush(at);
        for link in &self.links {
            link.close();
        }
        for handle in self.tables.close() {
            let _ = tokio::task::spawn_blocking(move || handle.join()).await;
        }
        // Dropping the senders lets every client writer flush and close its connection.
        self.routes.clear();
        debug!("core task stopped");
    }

    fn tick_if_due(&mut self) {
        let at = TokioInstant::now();
        let now = self.now(at);
        if self.core.poll_timeout().is_some_and(|t| t <= now) {
            self.core.on_tick(now);
        }
        self.tables.tick(at, &mut self.outbox);
        if self.leases.deadline() <= now {
            self.leases.tick(at, now, &mut self.tables, &mut self.outbox);
            self.take_local_answers(at);
        }
        self.flush(at);
    }

    /// Answers the lease service at this node gave to this node's own questions.
    fn take_local_answers(&mut self, at: TokioInstant) {
        loop {
            let answers = self.leases.take_local();
            if answers.is_empty() {
                return;
            }
            let now = self.now(at);
            for (client, status) in answers {
                let released = self.leases.on_answer(now, client, &status);
                self.release(at, released);
            }
        }
    }

    /// After an answer about a lease: collect expired clients' records, run held RPCs again.
    fn release(&mut self, at: TokioInstant, released: Released) {
        self.core.forget_clients(&released.expired);
        self.tables.expire_clients(at, &released.expired, &mut self.outbox);
        for (route, req) in released.requests {
            self.on_request(at, route, req);
        }
    }

    fn handle(&mut self, at: TokioInstant, input: CoreInput) {
        let now = self.now(at);
        match input {
            CoreInput::Connected { route, tx } => {
                self.routes.insert(route, tx);
            }
            CoreInput::Disconnected { route } => {
                self.routes.remove(&route);
                self.core.on_client_request(now, RcInput::Disconnected { route });
            }
            CoreInput::Client { route, items } => {
                for item in items {
                    match item {
                        ClientItem::Req(req) => self.on_request(at, route, req),
                        ClientItem::Reply(resp) => {
                            // In order with the replies the core produced before it.
                            self.flush(at);
                            self.send_to(route, WriterMsg::Resp(resp));
                        }
                        ClientItem::Close => {
                            self.flush(at);
                            self.send_to(route, WriterMsg::Close);
                        }
                    }
                }
            }
            CoreInput::Peer { from, msgs } => {
                for msg in msgs {
                    match msg {
                        PeerMessage::Shard { table, shard, generation, msg } => self
                            .tables
                            .on_peer(at, from, table, shard, generation, msg, &mut self.outbox),
                        PeerMessage::LeaseQuery { client_id } => {
                            self.leases.on_query(now, from, client_id, &mut self.outbox)
                        }
                        PeerMessage::LeaseRenew { req, lease_id } => self.leases.on_forwarded(
                            at,
                            now,
                            from,
                            req,
                            lease_id,
                            &mut self.tables,
                            &mut self.outbox,
                        ),
                        PeerMessage::LeaseRenewed { req, grant } => {
                            self.leases.on_renewed(req, grant, &mut self.outbox)
                        }
                        PeerMessage::LeaseAnswer { client_id, status } => {
                            let released = self.leases.on_answer(now, client_id, &status);
                            self.release(at, released);
                        }
                        msg => self.core.on_message(now, from, msg),
                    }
                }
            }
        }
    }

    fn on_request(&mut self, at: TokioInstant, route: Route, req: ClientRequest) {
        // rifl.md §5.5.3: every linearizable RPC's lease is checked before an engine sees it.
        let req = if req.rifl.is_some() && is_linearizable(&req.body) {
            let now = self.now(at);
            match self.leases.admit(now, route, req, &self.tables, &mut self.outbox) {
                Some(req) => req,
                None => return self.take_local_answers(at),
            }
        } else {
            req
        };
        let ClientRequest { corr, rifl, body } = req;
        match body {
            // Node-level requests are the runtime's: it owns the transport.
            Request::Status => {
                self.flush(at);
                let status = self.status(at);
                self.send_to(
                    route,
                    WriterMsg::Resp(ClientResponse { corr, body: Response::Status(status) }),
                );
            }
            Request::SetFault { peer, fault } => {
                self.flush(at);
                let body = self.set_fault(peer, fault);
                self.send_to(route, WriterMsg::Resp(ClientResponse { corr, body }));
            }
            // Log tables: routed to the shard replicas.
            Request::LogWrite { table, key, op, immediate } => {
                // Without RIFL's envelope the write is refused as `BadEnvelope`.
                self.tables.on_write(
                    at,
                    route,
                    corr,
                    &table,
                    key,
                    op,
                    rifl,
                    immediate,
                    &mut self.outbox,
                )
            }
            Request::LogRead { table, key, min_index } => {
                self.tables.on_read(at, route, corr, &table, key, min_index, &mut self.outbox)
            }
            Request::CreateTable { def } => {
                self.flush(at);
                let body = self.tables.create(def);
                self.send_to(route, WriterMsg::Resp(ClientResponse { corr, body }));
            }
            Request::RenewLease { .. } | Request::LeaseInfo { .. } => {
                let now = self.now(at);
                self.leases.on_request(
                    at,
                    now,
                    route,
                    corr,
                    &body,
                    &mut self.tables,
                    &mut self.outbox,
                );
            }
            Request::FreezeShard { table, shard, replicas } => {
                self.tables.freeze(at, route, corr, &table, shard, replicas, &mut self.outbox)
            }
            Request::AdoptShard { table, shard, placement, snapshot } => {
                self.flush(at);
                let body = self.tables.adopt(&table, shard, placement, snapshot, &mut self.outbox);
                self.send_to(route, WriterMsg::Resp(ClientResponse { corr, body }));
            }
            Request::ListTables => {
                self.flush(at);
                let body = Response::Tables(self.tables.list());
                self.send_to(route, WriterMsg::Resp(ClientResponse { corr, body }));
            }
            body => {
                let now = self.now(at);
                self.core.on_client_request(
                    now,
                    RcInput::Client { route, req: ClientRequest { corr, rifl, body } },
                );
            }
        }
    }

    fn set_fault(
        &mut self,
        peer: Option<NodeId>,
        fault: strata_wire::client::LinkFault,
    ) -> Response {
        match peer {
            None => {
                for link in &self.links {
                    link.set_fault(fault);
                }
            }
            Some(p) => match self.links.iter().find(|l| l.id == p) {
                Some(link) => link.set_fault(fault),
                None => {
                    let known: Vec<String> = self.links.iter().map(|l| l.id.to_string()).collect();
                    return Response::Error {
                        code: ErrorCode::InvalidArgument,
                        message: format!(
                            "{p} is not a peer of {} (peers: {})",
                            self.core.id(),
                            known.join(", ")
                        ),
                    };
                }
            },
        }
        info!(peer = ?peer.map(|p| p.0), ?fault, "link fault set");
        Response::FaultSet
    }

    fn status(&self, at: TokioInstant) -> NodeStatus {
        let s = self.core.stats();
        NodeStatus {
            node: self.core.id(),
            uptime_ms: self.origin.elapsed().as_millis() as u64,
            keys: s.keys,
            sessions: s.sessions,
            pending_writes: s.pending_writes,
            bad_client_frames: self.counters.bad_client_frames.load(Ordering::Relaxed),
            // Frames the transport dropped plus messages the core refused (unknown sender, ...).
            bad_peer_frames: self.counters.bad_peer_frames.load(Ordering::Relaxed)
                + s.bad_peer_messages,
            shards: self.tables.status(at),
            machine_epoch: s.machine_epoch,
            barriers_fast: s.barriers_fast,
            barriers_slow: s.barriers_slow,
            slow_path_accesses: s.slow_path_accesses,
            peers: self.links.iter().map(|l| l.status()).collect(),
        }
    }

    fn send_to(&self, route: Route, msg: WriterMsg) {
        if let Some(tx) = self.routes.get(&route) {
            // A closed writer means the connection is gone; its Disconnected is on the way.
            let _ = tx.send(msg);
        }
    }

    /// Executes the core's pending effects.
    fn flush(&mut self, at: TokioInstant) {
        self.flush_tables(at);
        self.core.poll_effects(&mut self.effects);
        if self.effects.is_empty() {
            return;
        }
        // The rc engine keeps no durable state (Kite §6); a core that persists needs the disk
        // path (issue: storage) before it can run here.
        assert!(
            self.effects.persist.is_empty() && self.effects.send_after_persist.is_empty(),
            "the node runtime has no storage path yet, but the core asked to persist"
        );
        for (to, msg) in self.effects.send.drain(..) {
            match self.links.iter().position(|l| l.id == to) {
                Some(i) => {
                    self.links[i].push(at, msg);
                    self.touched[i] = true;
                }
                None => debug!(to = %to, "core sent to a node that is not a peer; dropped"),
            }
        }
        for (i, t) in self.touched.iter_mut().enumerate() {
            if std::mem::take(t) {
                self.links[i].wake();
            }
        }
        for reply in self.effects.reply.drain(..) {
            if let Some(tx) = self.routes.get(&reply.route) {
                let _ = tx.send(WriterMsg::Resp(reply.resp));
            }
        }
        self.effects.event.clear();
        // The simulator checks invariants after every input; here a debug build samples them,
        // since the check walks every key.
        self.flushes = self.flushes.wrapping_add(1);
        if cfg!(debug_assertions) && self.flushes.is_multiple_of(INVARIANT_SAMPLE) {
            self.core.check_invariants();
        }
    }
}

impl Driver {
    /// Sends what the log shards produced: peer messages through the same links (and fault
    /// layer) as the rc engine's, replies to their connections.
    fn flush_tables(&mut self, at: TokioInstant) {
        let written = std::mem::take(&mut self.outbox.internal);
        if !written.is_empty() {
            let now = self.now(at);
            for (token, result) in written {
                self.leases.on_written(at, now, token, result, &mut self.tables, &mut self.outbox);
            }
        }
        for (to, msg) in self.outbox.peers.drain(..) {
            match self.links.iter().position(|l| l.id == to) {
                Some(i) => {
                    self.links[i].push(at, msg);
                    self.touched[i] = true;
                }
                None => debug!(to = %to, "shard sent to a node that is not a peer; dropped"),
            }
        }
        for (i, t) in self.touched.iter_mut().enumerate() {
            if std::mem::take(t) {
                self.links[i].wake();
            }
        }
        for (route, resp) in self.outbox.replies.drain(..) {
            if let Some(tx) = self.routes.get(&route) {
                let _ = tx.send(WriterMsg::Resp(resp));
            }
        }
    }
}

async fn sleep_until_opt(t: Option<TokioInstant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}
