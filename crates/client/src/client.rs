//! The entry point: a handle on a cluster that opens sessions at one of its nodes.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strata_rifl::RequestTracker;
use strata_wire::client::{LinkFault, NodeStatus, Request, Response, TableDef};
use strata_wire::{ClusterId, LeaseInfo, NodeId, Rifl, RpcId, SessionId, WINDOW};

use tokio::sync::broadcast;

use crate::conn::{Conn, ConnHandle, OpenError, Push};

/// Pushes a slow subscriber may fall behind by before it misses the oldest ones.
const PUSH_BACKLOG: usize = 256;
use crate::error::ClientError;
use crate::lease::LeaseKeeper;
use crate::session::{unexpected, Session};
use crate::table::Table;

/// How a client connects and how long it waits.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// The cluster the endpoints belong to; a node of another cluster is refused.
    pub cluster: ClusterId,
    /// How long one connection attempt may take before the next endpoint is tried.
    pub connect_timeout: Duration,
    /// How long a request may wait for its reply; `None` waits forever (Kite §2.4: operations
    /// wait until the protocol can make progress). A timed-out request may still take effect.
    pub request_timeout: Option<Duration>,
    /// Requests one session may have outstanding before `submit` fails with `QueueFull`.
    pub max_in_flight: usize,
    /// RIFL (`specs/rifl.md`): every mutating request carries an RPC id, and a session whose
    /// connection breaks reconnects (to the same node if it is up, else another) and re-sends
    /// its unanswered requests with the same ids, so that each takes effect exactly once.
    /// `false`: at-least-once requests without envelopes, and a broken connection fails the
    /// session (for measuring RIFL's cost).
    pub exactly_once: bool,
    /// How long a session keeps reconnecting and re-sending after its connection broke before
    /// it gives up with `ConnectionLost` (outcome unknown).
    pub retry_for: Duration,
    /// TLS: the cluster's CA (every node must present a certificate of it) and, optionally,
    /// this client's certificate, whose role decides what it may do
    /// (`strata_tls::ClientTls::from_dir("strata-data/tls")` loads what `strata up` made).
    /// `None`: plain TCP, for nodes started with `--insecure-plaintext`.
    pub tls: Option<strata_tls::ClientTls>,
    /// Kairos tables (kairos.md): the emulated clock offset and drift, and strict mode.
    pub kairos: crate::kairos::KairosOptions,
    /// Kairos tables (kairos.md §5.2, §5.14): a cache of cacheable keys shared by this
    /// client's transactions, and its lease policy. `None` (the default): no cache.
    pub kairos_cache: Option<crate::KairosCacheOptions>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            cluster: ClusterId(1),
            connect_timeout: Duration::from_secs(2),
            request_timeout: None,
            max_in_flight: 4096,
            exactly_once: true,
            retry_for: Duration::from_secs(30),
            tls: None,
            kairos: crate::kairos::KairosOptions::default(),
            kairos_cache: None,
        }
    }
}

/// A handle on a cluster. Cheap to share (`Arc<Client>`); sessions it opens are bound to the
/// node it is connected to, and keep the connection open after the client is dropped. If the
/// connection breaks, the next `open_session` reconnects — to the next reachable endpoint if
/// the node is down.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
}

/// What a client and its sessions share: the endpoints and the current connection.
pub(crate) struct Shared {
    pub(crate) endpoints: Vec<SocketAddr>,
    pub(crate) opts: ClientOptions,
    conn: Mutex<Option<Arc<ConnHandle>>>,
    /// The nodes' pushes on the sessions' connection (`Client::subscribe_pushes`).
    pushes: broadcast::Sender<Push>,
    /// Where the next connection attempt starts in `endpoints`.
    cursor: AtomicUsize,
    /// The transactions' lease, window and routing (`txn`), made on first use.
    txns: std::sync::OnceLock<Arc<crate::txn::TxnShared>>,
    /// Kairos's client clock (kairos.md §3.1), started with the client (§9.3 drift).
    pub(crate) kairos_clock: crate::kairos::KairosClock,
    /// The Kairos cache of `opts.kairos_cache` (`kairos_cache`), made on first use.
    kairos_cache: std::sync::OnceLock<Option<Arc<crate::kairos_cache::KairosCache>>>,
}

/// The client side of RIFL (rifl.md §3.1): a lease (its id is the RIFL client id) and a
/// RequestTracker. Each [`Session`] is one RIFL client: its requests complete in session
/// order, so its `first_incomplete` advances with every completion, and one slow session does
/// not hold back the window of another (a client-wide window would stall every session behind
/// the slowest). The lease is created on the first mutating request and renewed in the
/// background (`lease`).
pub(crate) struct RiflClient {
    pub(crate) keeper: Arc<LeaseKeeper>,
    /// The lease id the tracker's sequence numbers belong to; 0 before the first lease.
    pub(crate) client_id: u64,
    pub(crate) tracker: RequestTracker,
}

impl RiflClient {
    pub(crate) fn new(keeper: Arc<LeaseKeeper>) -> RiflClient {
        RiflClient { keeper, client_id: 0, tracker: RequestTracker::new(WINDOW) }
    }

    /// Takes the lease's id as the client id. A different id than before means the old lease
    /// expired (R-D21): a fresh RequestTracker starts at seq 1 for the new id.
    pub(crate) fn adopt(&mut self, lease: &LeaseInfo) {
        if lease.client_id != self.client_id {
            if self.client_id != 0 {
                self.tracker = RequestTracker::new(WINDOW);
            }
            self.client_id = lease.client_id;
        }
    }

    /// The envelope of `seq` under `lease` (the current one), with the current
    /// `first_incomplete` (re-sent on every retry).
    pub(crate) fn envelope(&self, seq: u64, lease: LeaseInfo) -> Rifl {
        Rifl {
            rpc: RpcId { client_id: lease.client_id, seq },
            first_incomplete: self.tracker.first_incomplete().min(seq),
            lease,
        }
    }
}

impl Client {
    /// Connects to one of `endpoints` (any node serves every operation), trying them in turn
    /// from a starting point that differs between clients, so that clients spread over nodes.
    pub async fn connect(
        endpoints: &[SocketAddr],
        opts: ClientOptions,
    ) -> Result<Client, ClientError> {
        if endpoints.is_empty() {
            return Err(ClientError::NoEndpoints);
        }
        static SPREAD: AtomicUsize = AtomicUsize::new(0);
        let start =
            (std::process::id() as usize).wrapping_add(SPREAD.fetch_add(1, Ordering::Relaxed));
        let client = Client {
            shared: Arc::new(Shared::new(endpoints.to_vec(), opts, start % endpoints.len())),
        };
        client.shared.connection().await?;
        Ok(client)
    }

    /// The messages nodes send on their own (`Response::Push`) on this client's sessions'
    /// connection: for now `push_topic::NODE_STOPPING` (the node is shutting down: the client
    /// reconnects elsewhere on its next request); cache invalidations and watches will use
    /// the same channel. Subscribe before the event: pushes are not kept.
    pub fn subscribe_pushes(&self) -> broadcast::Receiver<Push> {
        self.shared.pushes.subscribe()
    }

    /// Connects to exactly this node.
    pub async fn connect_node(
        addr: SocketAddr,
        opts: ClientOptions,
    ) -> Result<Client, ClientError> {
        let client = Client { shared: Arc::new(Shared::new(vec![addr], opts, 0)) };
        client.shared.connection().await?;
        Ok(client)
    }

    /// A handle that does not keep the client alive (its background tasks hold one).
    pub(crate) fn downgrade(&self) -> std::sync::Weak<Shared> {
        Arc::downgrade(&self.shared)
    }

    pub(crate) fn upgrade(weak: &std::sync::Weak<Shared>) -> Option<Client> {
        weak.upgrade().map(|shared| Client { shared })
    }

    /// Kairos (kairos.md §5.9): this client's `wm_view` and the highest `ts_GC` a shard
    /// leader answered its watermark reports with. For tests and diagnostics.
    pub fn kairos_watermarks(&self) -> (strata_wire::txn::Timestamp, strata_wire::txn::Timestamp) {
        let wm = self.txns().watermarks().clone();
        (wm.wm_view(), wm.ts_gc())
    }

    /// Kairos (kairos.md §5.9): the last `ts_GC` each Kairos shard's leader answered this
    /// client's reports with, as `(table, shard, ts_GC)` (validator shards under their
    /// companion table's name). A shard decides `TooOld` by its own `ts_GC`, so this is what
    /// to wait on to know that one has passed a timestamp. For tests and diagnostics.
    pub fn kairos_shard_ts_gc(&self) -> Vec<(String, u32, strata_wire::txn::Timestamp)> {
        self.txns().watermarks().shard_ts_gc()
    }

    /// Test-only: stops (`true`) or resumes the periodic Kairos watermark reports, as a client
    /// gone silent (kairos.md §6.5). A `TooOld` abort still sends one report round.
    #[doc(hidden)]
    pub fn pause_kairos_reports(&self, paused: bool) {
        self.txns().watermarks().set_paused(paused);
    }

    /// The transactions' shared state (one lease for all of this client's transactions).
    pub(crate) fn txns(&self) -> Arc<crate::txn::TxnShared> {
        let s = &self.shared;
        s.txns
            .get_or_init(|| {
                let keeper = LeaseKeeper::new(s.endpoints.clone(), s.opts.clone());
                Arc::new(crate::txn::TxnShared::new(RiflClient::new(keeper)))
            })
            .clone()
    }

    /// Kairos's client clock (kairos.md §3.1).
    pub(crate) fn kairos_clock(&self) -> &crate::kairos::KairosClock {
        &self.shared.kairos_clock
    }

    /// The Kairos cache, if `ClientOptions::kairos_cache` asks for one (made on first use,
    /// on the caller's runtime).
    pub(crate) fn kairos_cache(&self) -> Option<Arc<crate::kairos_cache::KairosCache>> {
        let s = &self.shared;
        let make = |o: &crate::KairosCacheOptions| {
            Arc::new(crate::kairos_cache::KairosCache::new(o.clone()))
        };
        s.kairos_cache.get_or_init(|| s.opts.kairos_cache.as_ref().map(make)).clone()
    }

    /// What the Kairos cache did so far (`None` without one): hits, misses, stale hits caught
    /// by validation, invalidations received.
    pub fn kairos_cache_stats(&self) -> Option<crate::KairosCacheStats> {
        self.kairos_cache().map(|c| c.stats())
    }

    pub fn options(&self) -> &ClientOptions {
        &self.shared.opts
    }

    /// The node this client is (or was last) connected to.
    pub fn node_addr(&self) -> Option<SocketAddr> {
        self.shared.conn.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|c| c.addr)
    }

    /// Opens a new session at the connected node.
    pub async fn open_session(&self) -> Result<Session, ClientError> {
        let (conn, id) = self.shared.open_session().await?;
        Ok(Session::new(self.shared.clone(), conn, id))
    }

    pub(crate) async fn connection(&self) -> Result<Arc<ConnHandle>, ClientError> {
        self.shared.connection().await
    }

    /// The endpoints this client was given.
    pub fn endpoints(&self) -> &[SocketAddr] {
        &self.shared.endpoints
    }

    /// The connected node's view of itself: keys, sessions, peers, counters.
    pub async fn status(&self) -> Result<NodeStatus, ClientError> {
        let conn = self.connection().await?;
        match conn.call(Request::Status, self.shared.opts.request_timeout).await? {
            Response::Status(s) => Ok(s),
            other => Err(unexpected(other)),
        }
    }

    /// Admin: sets the fault layer of the connected node's outbound link to `peer` (every
    /// peer if `None`). `LinkFault::default()` clears it.
    pub async fn set_fault(
        &self,
        peer: Option<NodeId>,
        fault: LinkFault,
    ) -> Result<(), ClientError> {
        let conn = self.connection().await?;
        match conn.call(Request::SetFault { peer, fault }, self.shared.opts.request_timeout).await?
        {
            Response::FaultSet => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Adds a table to the connected node's catalog. `Ok(false)`: an identical definition
    /// existed already. Every node must be told (the CLI's `strata table create` does that):
    /// the catalog is not replicated yet.
    pub async fn create_table(&self, def: TableDef) -> Result<bool, ClientError> {
        let conn = self.connection().await?;
        match conn.call(Request::CreateTable { def }, self.shared.opts.request_timeout).await? {
            Response::TableCreated { created } => Ok(created),
            other => Err(unexpected(other)),
        }
    }

    /// The connected node's table catalog.
    pub async fn list_tables(&self) -> Result<Vec<TableDef>, ClientError> {
        let conn = self.connection().await?;
        match conn.call(Request::ListTables, self.shared.opts.request_timeout).await? {
            Response::Tables(defs) => Ok(defs),
            other => Err(unexpected(other)),
        }
    }

    /// A handle on the log table `name` (its definition is read from the connected node). The
    /// handle talks to every endpoint of this client: writes to the key's shard leader, reads
    /// where they are sent ([`Table`]).
    pub async fn table(&self, name: &str) -> Result<Table, ClientError> {
        let def = self
            .list_tables()
            .await?
            .into_iter()
            .find(|d| d.name == name)
            .ok_or_else(|| ClientError::NoSuchTable(name.to_string()))?;
        Ok(Table::new(def, &self.shared.endpoints, self.shared.opts.clone()))
    }
}

impl Shared {
    fn new(endpoints: Vec<SocketAddr>, opts: ClientOptions, cursor: usize) -> Shared {
        let (pushes, _) = broadcast::channel(PUSH_BACKLOG);
        Shared {
            endpoints,
            kairos_clock: crate::kairos::KairosClock::new(opts.kairos),
            opts,
            conn: Mutex::new(None),
            pushes,
            cursor: AtomicUsize::new(cursor),
            txns: std::sync::OnceLock::new(),
            kairos_cache: std::sync::OnceLock::new(),
        }
    }

    /// The current connection, or a new one to the first reachable endpoint — starting with
    /// the node last connected to, so that a session's retries go back to the node that may
    /// still be executing its requests (rifl.md R-D5) while that node is up.
    pub(crate) async fn connection(&self) -> Result<Arc<ConnHandle>, ClientError> {
        if let Some(c) = self.conn.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            if c.is_usable() {
                return Ok(c.clone());
            }
        }
        let n = self.endpoints.len();
        let start = self.cursor.load(Ordering::Relaxed);
        let mut last = String::new();
        let mut tls_failure = None;
        for i in 0..n {
            let addr = self.endpoints[(start + i) % n];
            let pushes = Some(self.pushes.clone());
            match Conn::open_with_pushes(addr, &self.opts, pushes).await {
                Ok(conn) => {
                    self.cursor.store((start + i) % n, Ordering::Relaxed);
                    let mut slot = self.conn.lock().unwrap_or_else(|e| e.into_inner());
                    // Another task may have reconnected meanwhile; keep one connection.
                    if let Some(c) = slot.as_ref().filter(|c| c.is_usable()) {
                        return Ok(c.clone()); // dropping `conn` closes it
                    }
                    *slot = Some(conn.clone());
                    return Ok(conn);
                }
                Err(OpenError::Tls(message)) => {
                    last = format!("{addr}: TLS: {message}");
                    tls_failure = Some(ClientError::Tls { node: addr, message });
                }
                Err(e) => last = format!("{addr}: {e}"),
            }
        }
        // A node that answered but whose TLS failed says more than the ones that did not.
        if let Some(e) = tls_failure {
            return Err(e);
        }
        let tried: Vec<String> = self.endpoints.iter().map(|a| a.to_string()).collect();
        Err(ClientError::Unreachable { tried: tried.join(", "), last })
    }

    /// Opens a session at the current (or a new) connection.
    pub(crate) async fn open_session(&self) -> Result<(Arc<ConnHandle>, SessionId), ClientError> {
        let conn = self.connection().await?;
        match conn.call(Request::OpenSession, self.opts.request_timeout).await? {
            Response::SessionOpened { session } => Ok((conn, session)),
            other => Err(unexpected(other)),
        }
    }
}
