//! The core task: the single owner of the host core. A thin pump (`DESIGN.md`, sans-IO
//! contract): take every queued input, hand it to the host, execute its effects in one place
//! ([`Driver::execute`]), then sleep until the next input or the host's `poll_timeout()`.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use strata_core::Route;
use strata_host::{Host, HostEffects, Storage};
use strata_wire::client::{
    push_topic, ClientRequest, ClientResponse, NodeStatus, Request, Response, PUSH_CORR,
};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant as TokioInstant;
use tracing::{debug, warn};

use crate::shared::{ClientItem, CoreInput, Counters, WriterMsg};
use crate::storage::{Clock, DiskDone, Disks};
use crate::transport::PeerLink;

/// A debug build checks the host's invariants once per this many inputs.
const INVARIANT_SAMPLE: u64 = 1024;
/// Inputs taken per wake-up before effects are executed (bounds reply latency under load).
const MAX_INPUTS_PER_BATCH: usize = 1024;
/// A core-loop step (or a timer's lateness) this long is logged: leases (ORCA §5.8, 300 ms) and
/// follower leases (100 ms) cannot survive stalls of this order.
const STALL_WARN: Duration = Duration::from_millis(50);

pub(crate) struct Driver {
    host: Host,
    clock: Clock,
    effects: HostEffects,
    routes: HashMap<Route, mpsc::UnboundedSender<WriterMsg>>,
    links: Vec<Arc<PeerLink>>,
    /// Which links got messages in this execution (parallel to `links`).
    touched: Vec<bool>,
    counters: Arc<Counters>,
    disks: Disks,
    inputs: u64,
    /// Set when the node stops (`notify_stopping`), and the connections told so.
    stopping: watch::Receiver<bool>,
    notified: std::collections::BTreeSet<Route>,
}

impl Driver {
    /// A driver for `host`; executes its first effects (opening every shard replica's
    /// storage) before it returns, and fails if a replica cannot start.
    pub fn start(
        host: Host,
        clock: Clock,
        links: Vec<Arc<PeerLink>>,
        counters: Arc<Counters>,
        disks: Disks,
        stopping: watch::Receiver<bool>,
    ) -> Result<Driver, String> {
        let touched = vec![false; links.len()];
        let mut d = Driver {
            host,
            clock,
            effects: HostEffects::default(),
            routes: HashMap::new(),
            links,
            touched,
            counters,
            disks,
            inputs: 0,
            stopping,
            notified: Default::default(),
        };
        d.execute_checked(TokioInstant::now())?;
        Ok(d)
    }

    fn deadline(&self) -> Option<TokioInstant> {
        self.host.poll_timeout().map(|t| self.clock.to_tokio(t))
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
                        self.on_disk(woke, done);
                        while let Ok(done) = disk_rx.try_recv() {
                            self.on_disk(woke, done);
                        }
                    }
                }
                input = rx.recv() => {
                    woke = TokioInstant::now();
                    let Some(input) = input else { break };
                    self.handle(woke, input);
                    for _ in 1..MAX_INPUTS_PER_BATCH {
                        match rx.try_recv() {
                            Ok(input) => self.handle(woke, input),
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
            let at = TokioInstant::now();
            self.host.on_tick(self.clock.now(at));
            self.execute(at);
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
        self.execute(at);
        for route in self.routes.keys().copied().collect::<Vec<_>>() {
            self.notify_stopping(route);
        }
        for link in &self.links {
            link.close();
        }
        for handle in self.disks.close_all() {
            let _ = tokio::task::spawn_blocking(move || handle.join()).await;
        }
        // Dropping the senders lets every client writer flush and close its connection.
        self.routes.clear();
        debug!("core task stopped");
    }

    fn on_disk(&mut self, at: TokioInstant, done: DiskDone) {
        let now = self.clock.now(at);
        match done {
            DiskDone::Persisted { shard, token } => self.host.on_shard_persisted(now, shard, token),
            DiskDone::Failed { shard, error } => self.host.on_shard_failed(shard, &error),
        }
    }

    fn handle(&mut self, at: TokioInstant, input: CoreInput) {
        let now = self.clock.now(at);
        self.inputs = self.inputs.wrapping_add(1);
        match input {
            CoreInput::Connected { route, tx, role } => {
                self.routes.insert(route, tx);
                self.host.on_connected(route, role);
            }
            CoreInput::Disconnected { route } => {
                if *self.stopping.borrow() {
                    // The reader stopped because the node is stopping: its writer still
                    // delivers the notice before it closes.
                    self.notify_stopping(route);
                }
                self.routes.remove(&route);
                self.host.on_disconnected(now, route);
            }
            CoreInput::Client { route, items } => {
                for item in items {
                    match item {
                        ClientItem::Req(ClientRequest { corr, body: Request::Status, .. }) => {
                            // The runtime's own request: it owns the transport counters. Who
                            // may ask is the host's decision.
                            self.execute(at);
                            let body = match self.host.check_role(route, &Request::Status) {
                                None => Response::Status(self.status(at)),
                                Some(refused) => refused,
                            };
                            self.send_to(route, WriterMsg::Resp(ClientResponse { corr, body }));
                        }
                        ClientItem::Req(req) => self.host.on_client_request(now, route, req),
                        ClientItem::Reply(resp) => {
                            // In order with the replies the host produced before it.
                            self.execute(at);
                            self.send_to(route, WriterMsg::Resp(resp));
                        }
                        ClientItem::ReplyAs(cluster, resp) => {
                            self.execute(at);
                            self.send_to(route, WriterMsg::RespAs(cluster, resp));
                        }
                        ClientItem::Close => {
                            self.execute(at);
                            self.send_to(route, WriterMsg::Close);
                        }
                    }
                }
            }
            CoreInput::Peer { from, msgs } => {
                for msg in msgs {
                    self.host.on_peer_message(now, from, msg);
                }
            }
        }
        // The simulator checks invariants after every input; here a debug build samples them,
        // since the rc check walks every key.
        if cfg!(debug_assertions) && self.inputs.is_multiple_of(INVARIANT_SAMPLE) {
            self.host.check_invariants();
        }
    }

    fn status(&self, at: TokioInstant) -> NodeStatus {
        let (s, shards, _unroutable) = self.host.status(self.clock.now(at));
        NodeStatus {
            node: self.host.id(),
            uptime_ms: self.clock.uptime().as_millis() as u64,
            keys: s.keys,
            sessions: s.sessions,
            pending_writes: s.pending_writes,
            bad_client_frames: self.counters.bad_client_frames.load(Ordering::Relaxed),
            // Frames the transport dropped plus messages the rc engine refused (unknown sender, ...).
            bad_peer_frames: self.counters.bad_peer_frames.load(Ordering::Relaxed)
                + s.bad_peer_messages,
            shards,
            machine_epoch: s.machine_epoch,
            barriers_fast: s.barriers_fast,
            barriers_slow: s.barriers_slow,
            slow_path_accesses: s.slow_path_accesses,
            peers: self.links.iter().map(|l| l.status()).collect(),
        }
    }

    /// Tells a client the node is shutting down (a push, `push_topic::NODE_STOPPING`): its
    /// library can move to another node before the connection drops. Sent once per connection,
    /// when its reader stops or at the end of the shutdown, whichever comes first.
    fn notify_stopping(&mut self, route: Route) {
        if !self.notified.insert(route) {
            return;
        }
        let body = Response::Push {
            topic: push_topic::NODE_STOPPING,
            body: bytes::Bytes::copy_from_slice(&self.host.id().0.to_le_bytes()),
        };
        self.send_to(route, WriterMsg::Resp(ClientResponse { corr: PUSH_CORR, body }));
    }

    fn send_to(&self, route: Route, msg: WriterMsg) {
        if let Some(tx) = self.routes.get(&route) {
            // A closed writer means the connection is gone; its Disconnected is on the way.
            let _ = tx.send(msg);
        }
    }

    /// Executes the host's effects, the only place the server does (`DESIGN.md`): messages to
    /// the peer links, replies to the connections, faults to the links, storage requests to
    /// the disks. Synchronous storage answers go straight back to the host, whose new effects
    /// are executed in turn until none are left.
    fn execute(&mut self, at: TokioInstant) {
        if let Err(e) = self.execute_checked(at) {
            tracing::error!(error = %e, "a shard replica could not start");
        }
    }

    /// [`Driver::execute`], returning the first failure to open a shard replica.
    fn execute_checked(&mut self, at: TokioInstant) -> Result<(), String> {
        let mut first_error = Ok(());
        loop {
            self.host.poll_effects(&mut self.effects);
            if self.effects.is_empty() {
                return first_error;
            }
            for (to, msg) in self.effects.send.drain(..) {
                match self.links.iter().position(|l| l.id == to) {
                    Some(i) => {
                        self.links[i].push(at, msg);
                        self.touched[i] = true;
                    }
                    None => debug!(to = %to, "the host sent to a node that is not a peer; dropped"),
                }
            }
            for (i, t) in self.touched.iter_mut().enumerate() {
                if std::mem::take(t) {
                    self.links[i].wake();
                }
            }
            for (route, resp) in self.effects.reply.drain(..) {
                if let Some(tx) = self.routes.get(&route) {
                    let _ = tx.send(WriterMsg::Resp(resp));
                }
            }
            for (peer, fault) in self.effects.fault.drain(..) {
                for link in self.links.iter().filter(|l| peer.is_none_or(|p| p == l.id)) {
                    link.set_fault(fault);
                }
            }
            let storage = std::mem::take(&mut self.effects.storage);
            for request in storage {
                match request {
                    Storage::Log { shard, records } => self.disks.submit(shard, records),
                    Storage::Open { shard, table, install } => {
                        let result = self.disks.open(shard, &table, install);
                        let now = self.clock.now(TokioInstant::now());
                        let opened = self.host.on_shard_opened(now, shard, result);
                        if first_error.is_ok() {
                            first_error = opened;
                        }
                    }
                    Storage::Close { shard, table, remove } => {
                        self.disks.close(shard, &table, remove)
                    }
                    Storage::Catalog { token, bytes } => {
                        let result = self.disks.save_catalog(&bytes);
                        let now = self.clock.now(TokioInstant::now());
                        self.host.on_catalog_saved(now, token, result);
                    }
                }
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
