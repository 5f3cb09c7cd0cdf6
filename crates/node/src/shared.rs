//! What the runtime's tasks share: the core task's input type, counters, the task set.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strata_core::Route;
use strata_wire::client::{ClientRequest, ClientResponse};
use strata_wire::peer::PeerMessage;
use strata_wire::{ClusterId, NodeId, Role};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinSet;

/// An input of the core task, the single owner of the protocol core.
#[derive(Debug)]
pub(crate) enum CoreInput {
    /// A client connection opened; replies for `route` go to `tx`, charged to `conn`. `role`:
    /// what its verified credentials allow (`None`: none; `handshake`).
    Connected {
        route: Route,
        tx: mpsc::UnboundedSender<WriterMsg>,
        conn: Arc<ConnShared>,
        role: Option<Role>,
    },
    /// Everything one read produced on a client connection, in arrival order.
    Client { route: Route, items: Vec<ClientItem> },
    /// The connection's replies drained below its budget: go on with the items held back.
    Resume { route: Route },
    /// The client connection is gone: its sessions close.
    Disconnected { route: Route },
    /// Everything one read produced on an inbound peer connection, in arrival order.
    Peer { from: NodeId, msgs: Vec<PeerMessage> },
}

/// One entry of a client connection's input, kept in arrival order so that replies are too.
#[derive(Debug)]
pub(crate) enum ClientItem {
    /// A well-formed request, and the bytes of its frame (charged to the connection until
    /// it is answered).
    Req(ClientRequest, usize),
    /// An error the reader decided on (undecodable frame); sent in order with the others.
    Reply(ClientResponse),
    /// [`ClientItem::Reply`] in a frame of another cluster id: the answer to a frame of a
    /// foreign cluster carries that cluster's id, so it reveals nothing of this one's.
    ReplyAs(ClusterId, ClientResponse),
    /// The stream cannot be trusted any more: flush what is queued and close the connection.
    Close,
}

/// What a client connection's writer task receives.
#[derive(Debug)]
pub(crate) enum WriterMsg {
    /// A reply, and the bytes charged to the connection for it (released once written).
    Resp(ClientResponse, usize),
    /// The same, framed with another cluster id (`ClientItem::ReplyAs`).
    RespAs(ClusterId, ClientResponse, usize),
    /// Write what came before, then close the connection.
    Close,
}

/// Transport counters reported by `Status`.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub bad_client_frames: AtomicU64,
    pub bad_peer_frames: AtomicU64,
    /// Client connections open now (kept by [`ConnLimiter`]).
    pub open_connections: AtomicU64,
    /// Client connections refused at a cap.
    pub refused_connections: AtomicU64,
    /// Client connections closed by the idle timeout (the reader's or the writer's).
    pub closed_idle: AtomicU64,
    /// Client connections closed because a frame did not arrive in time.
    pub closed_slow_frame: AtomicU64,
}

impl Counters {
    pub fn bad_client(&self) -> u64 {
        self.bad_client_frames.fetch_add(1, Ordering::Relaxed) + 1
    }
    pub fn bad_peer(&self) -> u64 {
        self.bad_peer_frames.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// Settings every connection task needs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WireSettings {
    pub node: NodeId,
    pub cluster: ClusterId,
    pub max_frame_bytes: usize,
}

/// The bounds of client connections (node config; `docs/design.md`, "Limits and bounds").
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnBounds {
    pub max_connections: usize,
    pub max_connections_per_ip: usize,
    pub budget_bytes: usize,
    /// `None`: connections are never closed for idleness.
    pub idle_timeout: Option<Duration>,
    pub partial_frame_timeout: Duration,
    /// Replies can be this large (read results): how much a request may add to its
    /// connection's queue before the core task looks at the budget again.
    pub max_value_bytes: usize,
    /// No reply is larger (a read of several keys is refused beyond it).
    pub max_frame_bytes: usize,
}

/// Counts client connections, in total and per IP address, against the caps. A connection
/// holds a [`ConnSlot`]; dropping it gives the slot back.
#[derive(Debug)]
pub(crate) struct ConnLimiter {
    bounds: ConnBounds,
    counters: Arc<Counters>,
    inner: Mutex<LimiterState>,
}

#[derive(Debug, Default)]
struct LimiterState {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// A connection's place under the caps.
#[derive(Debug)]
pub(crate) struct ConnSlot {
    limiter: Arc<ConnLimiter>,
    ip: IpAddr,
}

impl ConnLimiter {
    pub fn new(bounds: ConnBounds, counters: Arc<Counters>) -> Arc<ConnLimiter> {
        Arc::new(ConnLimiter { bounds, counters, inner: Mutex::default() })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LimiterState> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for a connection from `ip`, or why there is none (the message the client gets).
    pub fn try_acquire(self: &Arc<Self>, ip: IpAddr) -> Result<ConnSlot, String> {
        let mut s = self.lock();
        if s.total >= self.bounds.max_connections {
            return Err(format!(
                "too many connections: this node serves at most {} client connections \
                 (max_connections); close idle connections or connect to another node",
                self.bounds.max_connections
            ));
        }
        let here = s.per_ip.entry(ip).or_default();
        if *here >= self.bounds.max_connections_per_ip {
            return Err(format!(
                "too many connections from {ip}: this node serves at most {} client \
                 connections per address (max_connections_per_ip); close idle connections",
                self.bounds.max_connections_per_ip
            ));
        }
        *here += 1;
        s.total += 1;
        self.counters.open_connections.store(s.total as u64, Ordering::Relaxed);
        Ok(ConnSlot { limiter: self.clone(), ip })
    }
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        let mut s = self.limiter.lock();
        s.total -= 1;
        if let Some(n) = s.per_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                s.per_ip.remove(&self.ip);
            }
        }
        self.limiter.counters.open_connections.store(s.total as u64, Ordering::Relaxed);
    }
}

/// What the reader, the writer and the core task share about one client connection: its
/// budget and the bytes charged to it (`docs/design.md`, "Limits and bounds"):
///
/// * the reader charges each request's frame when it hands the request on; the core task
///   releases it when the request is answered (or can never be: its session closed);
/// * the core task charges each reply when it queues it for the writer; the writer releases
///   it once the bytes are in the socket;
/// * the reader reads only while `charged + its buffer` is below the budget, and the core
///   task admits a connection's requests only while `charged` is below it (it holds the rest
///   back, [`ConnShared::held`], until the writer reports the queue drained).
#[derive(Debug)]
pub(crate) struct ConnShared {
    pub budget: usize,
    charged: AtomicUsize,
    /// Bytes in the reader's buffer (frames not handed on yet, a partial frame).
    input: AtomicUsize,
    /// The core task holds requests of this connection back until the budget allows.
    pub held: AtomicBool,
    /// The reader is paused by the budget (for `Status`).
    pub paused: AtomicBool,
    /// Wakes the reader when bytes are released.
    released: Notify,
    /// Set when the connection is torn down at once (the writer gave up on a client that
    /// does not read): the reader stops too.
    aborted: AtomicBool,
    abort: Notify,
    _slot: ConnSlot,
}

impl ConnShared {
    pub fn new(budget: usize, slot: ConnSlot) -> ConnShared {
        ConnShared {
            budget,
            charged: AtomicUsize::new(0),
            input: AtomicUsize::new(0),
            held: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            released: Notify::new(),
            aborted: AtomicBool::new(false),
            abort: Notify::new(),
            _slot: slot,
        }
    }

    pub fn charge(&self, bytes: usize) {
        self.charged.fetch_add(bytes, Ordering::SeqCst);
    }

    /// Gives `bytes` back and wakes the reader.
    pub fn release(&self, bytes: usize) {
        if bytes > 0 {
            let before = self.charged.fetch_sub(bytes, Ordering::SeqCst);
            debug_assert!(before >= bytes, "released more than was charged");
            self.released.notify_one();
        }
    }

    pub fn charged(&self) -> usize {
        self.charged.load(Ordering::SeqCst)
    }

    pub fn set_input(&self, bytes: usize) {
        self.input.store(bytes, Ordering::Relaxed);
    }

    /// Everything this connection holds now (for `Status`).
    pub fn buffered(&self) -> usize {
        self.charged() + self.input.load(Ordering::Relaxed)
    }

    pub fn over_budget(&self) -> bool {
        self.charged() >= self.budget
    }

    /// Waits until some bytes are released (or the connection is aborted).
    pub async fn wait_released(&self) {
        self.released.notified().await
    }

    pub fn abort(&self) {
        self.aborted.store(true, Ordering::SeqCst);
        self.abort.notify_waiters();
        self.released.notify_one();
    }

    pub fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::SeqCst)
    }

    /// Returns once [`ConnShared::abort`] was called.
    pub async fn aborted(&self) {
        loop {
            let notified = self.abort.notified();
            if self.is_aborted() {
                return;
            }
            notified.await;
        }
    }
}

/// Every task of a running node except the core task, so shutdown can wait for them (and abort
/// the ones that do not finish in time).
#[derive(Debug, Default)]
pub(crate) struct Tasks {
    inner: Mutex<TasksInner>,
}

#[derive(Debug, Default)]
struct TasksInner {
    set: JoinSet<()>,
    closed: bool,
}

impl Tasks {
    /// Spawns `fut` on the current runtime, unless shutdown has begun.
    pub fn spawn<F: Future<Output = ()> + Send + 'static>(&self, fut: F) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if g.closed {
            return;
        }
        // Reap finished connection tasks so the set does not grow with every connection ever made.
        while g.set.try_join_next().is_some() {}
        g.set.spawn(fut);
    }

    /// Refuses new tasks and waits up to `grace` for the running ones; aborts the rest.
    /// Returns how many had to be aborted.
    pub async fn close_and_join(&self, grace: Duration) -> usize {
        let mut set = {
            let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            g.closed = true;
            std::mem::take(&mut g.set)
        };
        let joined =
            tokio::time::timeout(grace, async { while set.join_next().await.is_some() {} }).await;
        if joined.is_ok() {
            return 0;
        }
        let left = set.len();
        set.shutdown().await;
        left
    }
}

/// A buffer at least this large, once freed, asks for [`give_back_memory`].
pub(crate) const LARGE_BUFFER_BYTES: usize = 1 << 20;

/// Asks the allocator to return freed memory to the OS soon (coalescing the requests of
/// 100 ms into one). glibc keeps freed heap memory: after its dynamic mmap threshold rose
/// past a frame's size, a connection's large read buffer comes from the heap, and freeing it
/// left the pages resident (the issue: 60 connections that closed with unfinished 15 MiB
/// frames left 870 MB behind). `malloc_trim(0)` releases every free page of every arena.
/// Test: `unfinished_large_frames_are_closed_in_time_and_their_memory_returns`.
pub(crate) fn give_back_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static SCHEDULED: AtomicBool = AtomicBool::new(false);
        if SCHEDULED.swap(true, Ordering::SeqCst) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            SCHEDULED.store(false, Ordering::SeqCst);
            return;
        };
        rt.spawn(async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            SCHEDULED.store(false, Ordering::SeqCst);
            let _ = tokio::task::spawn_blocking(|| {
                // SAFETY: malloc_trim only walks the allocator's own arenas under their locks;
                // it takes no pointer from us and is safe to call from any thread at any time.
                unsafe { libc::malloc_trim(0) };
            })
            .await;
        });
    }
}
