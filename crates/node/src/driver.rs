//! The core task: the single owner of the host core. A thin pump (`DESIGN.md`, sans-IO
//! contract): take every queued input, hand it to the host, execute its effects in one place
//! ([`Driver::execute`]), then sleep until the next input or the host's `poll_timeout()`.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use strata_core::Route;
use strata_host::{Host, HostEffects, Storage};
use strata_wire::client::{
    push_topic, ClientRequest, ClientResponse, ConnectionStats, LogFailure, NodeStatus, Request,
    Response, PUSH_CORR,
};
use strata_wire::{ClusterId, SessionId};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant as TokioInstant;
use tracing::{debug, warn};

use crate::shared::{ClientItem, ConnBounds, ConnShared, CoreInput, Counters, WriterMsg};
use crate::storage::{Clock, DiskDone, Disks};
use crate::transport::PeerLink;

/// The core task's maps are looked up several times per request: a fast hasher, randomly
/// seeded (correlation numbers come from clients).
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// A debug build checks the host's invariants once per this many inputs.
const INVARIANT_SAMPLE: u64 = 1024;
/// Inputs taken per wake-up before effects are executed (bounds reply latency under load).
const MAX_INPUTS_PER_BATCH: usize = 1024;
/// A core-loop step (or a timer's lateness) this long is logged: leases (ORCA §5.8, 300 ms) and
/// follower leases (100 ms) cannot survive stalls of this order.
const STALL_WARN: Duration = Duration::from_millis(50);

/// A client connection as the core task sees it: where its replies go, and its budget's
/// ledger (`docs/design.md`, "Limits and bounds").
struct RouteState {
    tx: mpsc::UnboundedSender<WriterMsg>,
    conn: Arc<ConnShared>,
    /// Admitted requests not answered yet, by correlation number: their session and the
    /// bytes charged for them (released by the answer, or when their session closes, which
    /// discards its answers, Kite §6).
    unanswered: HashMap<u64, (Option<SessionId>, usize)>,
    /// Admitted requests whose correlation number was in use already (a broken client).
    reused: Vec<(u64, Option<SessionId>, usize)>,
    /// Items received but not admitted yet (the budget was spent), in arrival order.
    backlog: VecDeque<ClientItem>,
    /// The request bytes of `backlog` (charged by the reader, not admitted by the host).
    backlog_bytes: usize,
    /// What the replies to the requests admitted since the last `execute` may add to the
    /// connection's queue at most (`reply_bound`).
    unflushed: usize,
}

impl RouteState {
    fn answered(&mut self, corr: u64) {
        let Some((_, bytes)) = self.unanswered.remove(&corr) else { return };
        self.conn.release(bytes);
        if let Some(i) = self.reused.iter().position(|r| r.0 == corr) {
            let (_, session, bytes) = self.reused.swap_remove(i);
            self.unanswered.insert(corr, (session, bytes));
        }
    }

    fn admitted(&mut self, corr: u64, session: Option<SessionId>, bytes: usize) {
        match self.unanswered.entry(corr) {
            std::collections::hash_map::Entry::Occupied(_) => {
                self.reused.push((corr, session, bytes))
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert((session, bytes));
            }
        }
    }

    /// `session` closed: its unanswered requests will never be answered.
    fn session_closed(&mut self, session: SessionId) {
        let mut released = 0;
        self.unanswered.retain(|_, (s, bytes)| {
            let gone = *s == Some(session);
            if gone {
                released += *bytes;
            }
            !gone
        });
        self.reused.retain(|(_, s, bytes)| {
            let gone = *s == Some(session);
            if gone {
                released += *bytes;
            }
            !gone
        });
        self.conn.release(released);
    }

    /// Bytes charged for requests admitted and replies queued (not for the backlog).
    fn admitted_charge(&self) -> usize {
        self.conn.charged().saturating_sub(self.backlog_bytes)
    }
}

pub(crate) struct Driver {
    host: Host,
    clock: Clock,
    effects: HostEffects,
    routes: HashMap<Route, RouteState>,
    bounds: ConnBounds,
    /// The connections with requests admitted since the last `execute` (`RouteState::
    /// unflushed` > 0), whose bounds `execute` clears once their replies are charged.
    unflushed: Vec<Route>,
    /// Connections whose admission stopped because their unflushed replies could spend the
    /// budget: pumped again after the batch's effects are executed, so replies are counted
    /// before more is admitted, and the batch is not cut short for every other connection.
    deferred: Vec<Route>,
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
        bounds: ConnBounds,
        stopping: watch::Receiver<bool>,
    ) -> Result<Driver, String> {
        let touched = vec![false; links.len()];
        let mut d = Driver {
            host,
            clock,
            effects: HostEffects::default(),
            routes: HashMap::default(),
            bounds,
            unflushed: Vec::new(),
            deferred: Vec::new(),
            links,
            touched,
            counters,
            disks,
            inputs: 0,
            stopping,
            notified: Default::default(),
        };
        d.execute_checked(TokioInstant::now())?;
        d.disks.kick();
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
            self.pump_deferred(at);
            // Whatever this step logged, to the disk thread in one request.
            self.disks.kick();
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
        self.pump_deferred(at);
        self.disks.kick();
        for route in self.routes.keys().copied().collect::<Vec<_>>() {
            self.notify_stopping(route);
        }
        for link in &self.links {
            link.close();
        }
        if let Some(handle) = self.disks.close_all() {
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
            CoreInput::Connected { route, tx, conn, role } => {
                let state = RouteState {
                    tx,
                    conn,
                    unanswered: HashMap::default(),
                    reused: Vec::new(),
                    backlog: VecDeque::new(),
                    backlog_bytes: 0,
                    unflushed: 0,
                };
                self.routes.insert(route, state);
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
                if let Some(st) = self.routes.get_mut(&route) {
                    for item in items {
                        if let ClientItem::Req(_, bytes) = &item {
                            st.backlog_bytes += bytes;
                        }
                        st.backlog.push_back(item);
                    }
                    self.pump(at, route);
                }
            }
            CoreInput::Resume { route } => self.pump(at, route),
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

    /// Admits the route's items in order while its budget allows (`RouteState`); holds the
    /// rest until the writer reports the replies drained (`CoreInput::Resume`).
    fn pump(&mut self, at: TokioInstant, route: Route) {
        let now = self.clock.now(at);
        loop {
            let Some(st) = self.routes.get_mut(&route) else { return };
            let Some(item) = st.backlog.front() else { return };
            if matches!(item, ClientItem::Req(..))
                && st.admitted_charge() + st.unflushed >= st.conn.budget
            {
                if st.unflushed > 0 {
                    // Count the replies produced so far before deciding: after this batch.
                    if !self.deferred.contains(&route) {
                        self.deferred.push(route);
                    }
                    return;
                }
                // Held until the writer releases bytes; set first, then look again, so a
                // release in between is never missed.
                st.conn.held.store(true, Ordering::SeqCst);
                if st.admitted_charge() >= st.conn.budget {
                    return;
                }
                st.conn.held.store(false, Ordering::SeqCst);
            } else if st.conn.held.load(Ordering::Relaxed) {
                // Admitting again (the budget allows): nothing is held back any more.
                st.conn.held.store(false, Ordering::SeqCst);
            }
            let item = st.backlog.pop_front().expect("checked");
            match item {
                ClientItem::Req(ClientRequest { corr, body: Request::Status, .. }, bytes) => {
                    // The runtime's own request (it owns the transport counters), answered
                    // now: its bytes are not counted in the status it asks for.
                    st.backlog_bytes -= bytes;
                    st.conn.release(bytes);
                    self.execute(at);
                    // Who may ask is the host's decision.
                    let body = match self.host.check_role(route, &Request::Status) {
                        None => Response::Status(self.status(at)),
                        Some(refused) => refused,
                    };
                    self.deliver(route, ClientResponse { corr, body }, false);
                }
                ClientItem::Req(req, bytes) => {
                    st.backlog_bytes -= bytes;
                    // A session's operations: their answers are dropped if the session closes first (not
                    // the close's own answer).
                    let session = req
                        .body
                        .session()
                        .filter(|_| !matches!(req.body, Request::CloseSession { .. }));
                    st.admitted(req.corr, session, bytes);
                    if st.unflushed == 0 {
                        self.unflushed.push(route);
                    }
                    st.unflushed +=
                        reply_bound(&req.body, &self.bounds, self.host.rc().largest_value());
                    let closing = match req.body {
                        Request::CloseSession { session } => Some(session),
                        _ => None,
                    };
                    self.host.on_client_request(now, route, req);
                    if let Some(session) = closing {
                        // Kite §6: the closed session's answers are discarded.
                        if let Some(st) = self.routes.get_mut(&route) {
                            st.session_closed(session);
                        }
                    }
                }
                ClientItem::Reply(resp) => {
                    // In order with the replies the host produced before it.
                    self.execute(at);
                    self.deliver(route, resp, false);
                }
                ClientItem::ReplyAs(cluster, resp) => {
                    self.execute(at);
                    self.deliver_as(route, cluster, resp);
                }
                ClientItem::Close => {
                    self.execute(at);
                    if let Some(st) = self.routes.get(&route) {
                        let _ = st.tx.send(WriterMsg::Close);
                    }
                }
            }
        }
    }

    /// Admits more of the deferred connections' items now that their replies are charged,
    /// executing each round's effects, until no connection is deferred.
    fn pump_deferred(&mut self, at: TokioInstant) {
        while !self.deferred.is_empty() {
            for route in std::mem::take(&mut self.deferred) {
                self.pump(at, route);
            }
            self.execute(at);
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
            connections: ConnectionStats {
                open: self.counters.open_connections.load(Ordering::Relaxed),
                refused: self.counters.refused_connections.load(Ordering::Relaxed),
                buffered_bytes: self.routes.values().map(|r| r.conn.buffered() as u64).sum(),
                paused: self
                    .routes
                    .values()
                    .filter(|r| {
                        r.conn.paused.load(Ordering::Relaxed) || r.conn.held.load(Ordering::Relaxed)
                    })
                    .count() as u64,
                closed_idle: self.counters.closed_idle.load(Ordering::Relaxed),
                closed_slow_frame: self.counters.closed_slow_frame.load(Ordering::Relaxed),
                forbidden: self.host.refused_requests(),
                invalid_envelopes: self.host.invalid_envelopes(),
            },
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
        self.deliver(route, ClientResponse { corr: PUSH_CORR, body }, false);
    }

    /// Queues a reply for the connection's writer, charging it to the connection's budget;
    /// `answers`: it answers the admitted request with its correlation number, whose bytes
    /// are released.
    fn deliver(&mut self, route: Route, resp: ClientResponse, answers: bool) {
        let Some(st) = self.routes.get_mut(&route) else { return };
        if answers {
            st.answered(resp.corr);
        }
        let bytes = reply_len(&resp.body);
        st.conn.charge(bytes);
        // A closed writer means the connection is gone; its Disconnected is on the way.
        if st.tx.send(WriterMsg::Resp(resp, bytes)).is_err() {
            st.conn.release(bytes);
        }
    }

    /// [`Driver::deliver`] for a reply framed with another cluster's id (the answer to a
    /// foreign cluster's frame, which must not reveal this cluster's id).
    fn deliver_as(&mut self, route: Route, cluster: ClusterId, resp: ClientResponse) {
        let Some(st) = self.routes.get_mut(&route) else { return };
        let bytes = reply_len(&resp.body);
        st.conn.charge(bytes);
        if st.tx.send(WriterMsg::RespAs(cluster, resp, bytes)).is_err() {
            st.conn.release(bytes);
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
        // Every reply produced so far is charged below: nothing admitted is unaccounted for.
        for route in self.unflushed.drain(..) {
            if let Some(st) = self.routes.get_mut(&route) {
                st.unflushed = 0;
            }
        }
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
            let mut replies = std::mem::take(&mut self.effects.reply);
            for (route, resp) in replies.drain(..) {
                self.deliver(route, resp, true);
            }
            self.effects.reply = replies;
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
                    Storage::Close { shard, remove, .. } => self.disks.close(shard, remove),
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

/// Header bytes counted for every reply (frame header, tag, corr, fixed fields).
const REPLY_OVERHEAD: usize = 64;

/// The most a request's reply can take: a value for reads and RMWs (for the rc keyspace, no
/// more than the largest value its replica ever held, `rc_largest`: with small values a
/// pipeline of reads is not cut short for replies it cannot produce), a shard's state for a
/// freeze, a little for the rest.
fn reply_bound(req: &Request, bounds: &ConnBounds, rc_largest: usize) -> usize {
    match req {
        Request::Get { .. }
        | Request::Acquire { .. }
        | Request::Faa { .. }
        | Request::Cas { .. } => bounds.max_value_bytes.min(rc_largest) + REPLY_OVERHEAD,
        Request::LogRead { .. } => bounds.max_value_bytes + REPLY_OVERHEAD,
        // Refused by the node beyond a frame (`Shards::on_read_many`).
        Request::LogReadMany { keys, .. } => {
            (keys.len() * (bounds.max_value_bytes + REPLY_OVERHEAD)).min(bounds.max_frame_bytes)
        }
        Request::FreezeShard { .. } => strata_log::MAX_MOVE_BYTES + REPLY_OVERHEAD,
        Request::ListTables => 64 << 10,
        _ => 4 * REPLY_OVERHEAD,
    }
}

/// The bytes a reply is charged to its connection for: about its encoded size.
fn reply_len(resp: &Response) -> usize {
    let value = |v: &Option<bytes::Bytes>| v.as_ref().map_or(0, |v| v.len());
    REPLY_OVERHEAD
        + match resp {
            Response::Value { value: v, .. } | Response::LogValue { value: v, .. } => value(v),
            Response::Rmw { observed, .. } => value(observed),
            Response::LogValues { values, .. } => {
                values.iter().map(|(v, _)| 16 + value(v)).sum::<usize>()
            }
            Response::Error { message, .. } => message.len(),
            Response::Push { body, .. } => body.len(),
            Response::LogRejected(LogFailure::Moved { replicas }) => 4 * replicas.len(),
            Response::Status(s) => {
                s.peers.iter().map(|p| 64 + p.addr.len()).sum::<usize>()
                    + s.shards.iter().map(|sh| 128 + sh.table.len()).sum::<usize>()
            }
            Response::Tables(defs) => {
                defs.iter().map(|d| 64 + d.name.len() + 4 * d.leaders.len()).sum()
            }
            Response::ShardFrozen { snapshot, .. } => snapshot.as_ref().map_or(0, |s| {
                let items: usize = s
                    .items
                    .iter()
                    .map(|(k, v, _)| 24 + k.len() + v.as_ref().map_or(0, |v| v.len()))
                    .sum();
                let clients: usize = s.clients.iter().map(|c| 24 + 16 * c.records.len()).sum();
                items + clients + 8 * s.expired.len()
            }),
            _ => 0,
        }
}

async fn sleep_until_opt(t: Option<TokioInstant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}
