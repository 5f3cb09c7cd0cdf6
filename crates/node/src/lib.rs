//! `strata-node`: the server runtime. A thin tokio pump around the sans-IO host core
//! (`DESIGN.md`, "The sans-IO contract"): sockets, disks, timers and one clock live here; every
//! decision that changes protocol state lives in `strata-host` and the engines it composes.
//!
//! Tasks of a running node:
//!
//! * the **core task** (`driver`) owns the [`strata_host::Host`] and the clock; it takes inputs
//!   from one channel, hands them to the host, executes its effects in one place (peer
//!   messages, replies, link faults, storage requests), and sleeps until the next input or
//!   `poll_timeout()`;
//! * per log-table shard replica a **disk thread** executing the replica's `Persist` records
//!   over its WAL with group commit (`strata-logstore`, [`storage`]);
//! * per client connection a reader and a writer (`client`);
//! * per peer an outbound sender with the fault layer (`transport`, [`fault`]), and a reader
//!   per inbound peer connection;
//! * two accept loops.
//!
//! Start a node with [`start`] (or [`run_blocking`] from a `main`), stop it with
//! [`RunningNode::shutdown`].

mod client;
pub mod config;
mod driver;
pub mod fault;
mod handshake;
mod shared;
mod storage;
pub mod testing;
mod transport;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use strata_host::{Host, HostConfig};
use strata_rc::RcConfig;
use strata_wire::{ClusterId, Limits, NodeId};
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

pub use config::{
    runtime_threads_parser, ConfigError, LogFormat, NodeArgs, NodeConfig, PeerConfig, TlsFiles,
};

use shared::{ConnBounds, Counters, Tasks, WireSettings};
use transport::PeerLink;

/// Capacity of the core task's input channel (batches of messages): readers wait when it is
/// full, which pushes back on clients and peers through TCP flow control.
const CORE_CHANNEL: usize = 1024;
/// How long shutdown waits for connection tasks to flush before aborting them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// Why a node could not start. Each variant says what to fix.
#[derive(Debug, Error)]
pub enum StartError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A listen address could not be bound (in use, not local, no permission).
    #[error("cannot listen for {what} on {addr}: {source}{hint}")]
    Bind { what: &'static str, addr: SocketAddr, source: std::io::Error, hint: &'static str },
    /// The data directory could not be created.
    #[error("cannot create data directory {path}: {source}")]
    DataDir { path: PathBuf, source: std::io::Error },
    /// The host core refused its configuration or the stored catalog.
    #[error(transparent)]
    Host(#[from] strata_host::HostError),
    /// The table catalog or a shard's log could not be loaded (the message names the file).
    #[error("cannot load the log tables: {0}")]
    Tables(String),
    /// The TLS credentials could not be loaded (the message names the file and what to fix).
    #[error("TLS: {0}")]
    Tls(#[from] strata_tls::TlsError),
    /// The tokio runtime or the signal handlers could not be set up.
    #[error("cannot set up the runtime: {0}")]
    Runtime(std::io::Error),
    /// The node started but stopped abnormally (the protocol core panicked: a bug; the log
    /// has the details).
    #[error("the node failed: {0}")]
    Failed(String),
}

fn bind_error(what: &'static str, addr: SocketAddr, source: std::io::Error) -> StartError {
    let hint = match source.kind() {
        std::io::ErrorKind::AddrInUse => {
            " (address in use: another process listens there; stop it or pick another port)"
        }
        std::io::ErrorKind::AddrNotAvailable => " (this machine has no such address)",
        std::io::ErrorKind::PermissionDenied => {
            " (permission denied: ports below 1024 need privileges)"
        }
        _ => "",
    };
    StartError::Bind { what, addr, source, hint }
}

/// Binds both listeners and starts the node. Port 0 picks a free port: ask
/// [`RunningNode::client_addr`] / [`RunningNode::peer_addr`] for the bound addresses.
pub async fn start(cfg: NodeConfig) -> Result<RunningNode, StartError> {
    cfg.validate()?;
    let client = TcpListener::bind(cfg.client_addr)
        .await
        .map_err(|e| bind_error("clients", cfg.client_addr, e))?;
    let peer = TcpListener::bind(cfg.peer_addr)
        .await
        .map_err(|e| bind_error("peers", cfg.peer_addr, e))?;
    start_on(cfg, client, peer).await
}

/// Starts the node on listeners the caller bound already (tests bind every node's listeners
/// first, on port 0, so that each node's peer list holds real addresses with no race). The
/// config's `client_addr` / `peer_addr` are ignored.
pub async fn start_with_listeners(
    cfg: NodeConfig,
    client: std::net::TcpListener,
    peer: std::net::TcpListener,
) -> Result<RunningNode, StartError> {
    cfg.validate()?;
    let wrap = |l: std::net::TcpListener, what: &'static str| -> Result<TcpListener, StartError> {
        let addr = l.local_addr().map_err(|e| bind_error(what, cfg.client_addr, e))?;
        l.set_nonblocking(true).map_err(|e| bind_error(what, addr, e))?;
        TcpListener::from_std(l).map_err(|e| bind_error(what, addr, e))
    };
    let client = wrap(client, "clients")?;
    let peer = wrap(peer, "peers")?;
    start_on(cfg, client, peer).await
}

async fn start_on(
    cfg: NodeConfig,
    client: TcpListener,
    peer: TcpListener,
) -> Result<RunningNode, StartError> {
    std::fs::create_dir_all(&cfg.data_dir)
        .map_err(|source| StartError::DataDir { path: cfg.data_dir.clone(), source })?;
    let client_addr = client.local_addr().map_err(|e| bind_error("clients", cfg.client_addr, e))?;
    let peer_addr = peer.local_addr().map_err(|e| bind_error("peers", cfg.peer_addr, e))?;

    let node = NodeId(cfg.node_id);
    let mut rc = RcConfig::new(node, cfg.replica_ids().into_iter().map(NodeId).collect());
    rc.retransmit_after = Duration::from_millis(cfg.retransmit_ms);
    rc.round_retransmit = Duration::from_millis(cfg.retransmit_ms);
    rc.release_timeout = Duration::from_millis(cfg.release_timeout_ms);
    rc.release_timeout_max = Duration::from_millis(cfg.release_timeout_max_ms);
    // A fresh session-id range and seed per incarnation: a restarted node never reuses the
    // session (hence RMW) ids of its previous life (Kite §6, restart).
    let incarnation = incarnation_nonce();
    rc.session_index_base = (incarnation >> 32) as u32;
    rc.seed = incarnation;
    rc.limits = Limits {
        max_frame_bytes: cfg.max_frame_bytes,
        max_value_bytes: cfg.max_value_bytes,
        ..Limits::default()
    };
    let (disk_tx, disk_rx) = mpsc::unbounded_channel();
    let disks = storage::Disks::new(&cfg.data_dir, disk_tx);
    let catalog = disks.load_catalog().map_err(StartError::Tables)?;
    let rifl = strata_host::rifl_config(Duration::from_millis(cfg.lease_term_ms));
    let host_cfg = HostConfig {
        rc,
        rifl,
        seed: incarnation,
        shard_rate_limit: cfg.shard_rate_limit,
        audit: false,
        log_overrides: Default::default(),
        txn_timeout_per_object: Duration::from_millis(cfg.txn_timeout_per_object_ms),
        txn_read_hold: Duration::from_millis(cfg.txn_read_hold_ms),
    };
    let host = Host::new(host_cfg, &catalog)?;

    // TLS first: a node with unusable credentials must not start at all.
    let security = match &cfg.tls {
        Some(f) => Some(Arc::new(strata_tls::NodeTls::load(node, &f.ca, &f.cert, &f.key)?)),
        None => {
            warn!("TLS is off (insecure_plaintext): peers are not authenticated and every client is admin");
            None
        }
    };
    let wire = WireSettings {
        node,
        cluster: ClusterId(cfg.cluster_id),
        max_frame_bytes: cfg.max_frame_bytes,
    };
    let bounds = ConnBounds {
        max_connections: cfg.max_connections,
        max_connections_per_ip: cfg.max_connections_per_ip,
        budget_bytes: cfg.max_connection_buffer_bytes,
        idle_timeout: (cfg.idle_timeout_ms > 0).then(|| Duration::from_millis(cfg.idle_timeout_ms)),
        partial_frame_timeout: Duration::from_millis(cfg.partial_frame_timeout_ms),
        max_value_bytes: cfg.max_value_bytes,
        max_frame_bytes: cfg.max_frame_bytes,
    };
    let counters = Arc::new(Counters::default());
    let tasks = Arc::new(Tasks::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let (core_tx, core_rx) = mpsc::channel(CORE_CHANNEL);
    let links: Vec<Arc<PeerLink>> =
        cfg.peers.iter().map(|p| Arc::new(PeerLink::new(NodeId(p.id), p.addr))).collect();
    let peer_ids = Arc::new(links.iter().map(|l| l.id).collect::<Vec<_>>());

    let driver = driver::Driver::start(
        host,
        storage::Clock::new(),
        links.clone(),
        counters.clone(),
        disks,
        bounds,
        stop_rx.clone(),
    )
    .map_err(StartError::Tables)?;
    let core_task = tokio::spawn(driver.run(core_rx, disk_rx, stop_rx.clone()));
    for link in &links {
        tasks.spawn(transport::run_sender(link.clone(), wire, security.clone()));
    }
    tasks.spawn(transport::run_peer_acceptor(
        peer,
        wire,
        peer_ids,
        core_tx.clone(),
        counters.clone(),
        tasks.clone(),
        stop_rx.clone(),
        security.clone(),
    ));
    tasks.spawn(client::run_client_acceptor(
        client,
        wire,
        bounds,
        core_tx,
        counters,
        tasks.clone(),
        stop_rx,
        security.clone(),
    ));

    let peers: Vec<String> = cfg.peers.iter().map(|p| p.to_string()).collect();
    info!(
        node = cfg.node_id,
        cluster = %wire.cluster,
        client = %client_addr,
        peer = %peer_addr,
        peers = %peers.join(","),
        data_dir = %cfg.data_dir.display(),
        tls = security.is_some(),
        "node started"
    );
    Ok(RunningNode {
        node_id: cfg.node_id,
        client_addr,
        peer_addr,
        stop: Arc::new(stop_tx),
        core_task: Some(core_task),
        tasks,
    })
}

/// A number that differs between starts of a node: wall-clock nanoseconds mixed with the pid.
fn incarnation_nonce() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut x = nanos ^ (u64::from(std::process::id()) << 17);
    // splitmix64 finaliser: spreads the bits so nearby starts land far apart.
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Stops a running node from anywhere (a signal handler, another task). Cheap to clone.
#[derive(Clone, Debug)]
pub struct StopHandle(Arc<watch::Sender<bool>>);

impl StopHandle {
    /// Begins a graceful shutdown; [`RunningNode::wait`] returns once it is done.
    pub fn stop(&self) {
        self.0.send_replace(true);
    }
}

/// A started node. Dropping it without [`RunningNode::shutdown`] also stops it (without waiting).
#[derive(Debug)]
pub struct RunningNode {
    node_id: u32,
    client_addr: SocketAddr,
    peer_addr: SocketAddr,
    stop: Arc<watch::Sender<bool>>,
    core_task: Option<JoinHandle<()>>,
    tasks: Arc<Tasks>,
}

impl RunningNode {
    pub fn node_id(&self) -> u32 {
        self.node_id
    }

    /// The bound client address (the real port when the config asked for port 0).
    pub fn client_addr(&self) -> SocketAddr {
        self.client_addr
    }

    /// The bound peer address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer_addr
    }

    pub fn stop_handle(&self) -> StopHandle {
        StopHandle(self.stop.clone())
    }

    /// Stops accepting, answers what already arrived, lets writers flush, closes everything.
    pub async fn shutdown(self) {
        self.stop.send_replace(true);
        self.wait().await;
    }

    /// Runs until the node is stopped (a [`StopHandle`], or the core task ending), then
    /// completes the graceful shutdown.
    pub async fn wait(self) {
        let _ = self.wait_inner().await;
    }

    /// [`RunningNode::wait`], reporting whether the core task failed (panicked).
    async fn wait_inner(mut self) -> Result<(), String> {
        let mut failure = None;
        let mut core_task = self.core_task.take().expect("core task present until wait");
        let mut stop = self.stop.subscribe();
        let mut core_done = false;
        tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => {}
            r = &mut core_task => {
                core_done = true;
                match r {
                    Err(e) => {
                        error!(error = %e, "core task failed; stopping the node");
                        failure = Some(e.to_string());
                    }
                    // It stops by itself only when asked to (a race with the branch above).
                    Ok(()) if *self.stop.borrow() => {}
                    Ok(()) => {
                        error!("core task ended unexpectedly; stopping the node");
                        failure = Some("the core task ended unexpectedly".into());
                    }
                }
            }
        }
        info!(node = self.node_id, "shutting down");
        self.stop.send_replace(true);
        if !core_done {
            match tokio::time::timeout(SHUTDOWN_GRACE, &mut core_task).await {
                Ok(Err(e)) => {
                    error!(error = %e, "core task failed during shutdown");
                    failure = Some(e.to_string());
                }
                Ok(Ok(())) => {}
                Err(_) => {
                    warn!("core task did not stop in time; aborting it");
                    core_task.abort();
                }
            }
        }
        let aborted = self.tasks.close_and_join(SHUTDOWN_GRACE).await;
        if aborted > 0 {
            warn!(aborted, "some connection tasks did not finish in time and were aborted");
        }
        info!(node = self.node_id, "node stopped");
        failure.map_or(Ok(()), Err)
    }
}

impl Drop for RunningNode {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

/// Initialises `tracing` for a node process: `RUST_LOG` chooses the level (default `info`).
/// Does nothing if a subscriber is already installed.
pub fn init_tracing(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// Runs a node in the calling thread until SIGTERM or SIGINT (Ctrl-C), then shuts it down
/// gracefully. Sets up logging and a small tokio runtime.
pub fn run_blocking(cfg: NodeConfig) -> Result<(), StartError> {
    init_tracing(cfg.log_format);
    // One thread: every task on the calling thread, no cross-thread wake-ups.
    let mut builder = match cfg.runtime_threads {
        1 => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(n);
            b
        }
    };
    let rt =
        builder.thread_name("strata-node").enable_all().build().map_err(StartError::Runtime)?;
    rt.block_on(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).map_err(StartError::Runtime)?;
        let mut int = signal(SignalKind::interrupt()).map_err(StartError::Runtime)?;
        let node = start(cfg).await?;
        let stopper = node.stop_handle();
        tokio::spawn(async move {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            info!(signal = name, "signal received");
            stopper.stop();
        });
        node.wait_inner().await.map_err(StartError::Failed)
    })
}
