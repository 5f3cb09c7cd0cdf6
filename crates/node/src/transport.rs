//! Peer transport: one outbound connection per peer for sending, inbound connections for
//! receiving, and the fault layer in between the core and the socket.
//!
//! * Outbound: a sender task per peer dials it (capped exponential backoff), opens with
//!   `Hello { from }`, and then writes whatever the core queued. Opportunistic batching
//!   (Kite §4 notes, §6.4 of the paper): each wake-up drains everything that is ready into one
//!   buffer and writes it with one call; it never waits to fill a batch.
//! * While a peer is unreachable (or slow), its queue is bounded and the oldest messages are
//!   dropped first: every rc round re-sends (Kite §5.1.3), and the core task never blocks.
//! * Inbound: the first frame must be `Hello` from a configured peer — with TLS, from the node
//!   the connection's certificate names (`handshake`), whatever else it claims. Later bad
//!   frames (checksum, foreign cluster, undecodable) are counted and dropped; a bad length
//!   prefix closes the connection (frame boundaries are lost).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use strata_wire::client::{LinkFault, PeerStatus};
use strata_wire::peer::PeerMessage;
use strata_wire::{decode_frame, decode_message, encode_frame, NodeId};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant as TokioInstant;
use tracing::{debug, info, warn};

use crate::fault::{FaultLayer, Verdict};
use crate::handshake::{self, Security};
use crate::shared::{CoreInput, Counters, Tasks, WireSettings};
use strata_tls::BoxRead;

/// Messages kept for one peer while it is unreachable or slow; beyond this the oldest go.
pub(crate) const PEER_QUEUE_LIMIT: usize = 64 * 1024;
/// A batch is written once it reaches this size, even if more is ready.
const MAX_BATCH_BYTES: usize = 1 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// An inbound peer connection must say who it is within this time.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest first frame of an inbound peer connection (a `Hello` takes 21 bytes).
const MAX_HELLO_FRAME_BYTES: usize = 1024;
const BACKOFF_MIN: Duration = Duration::from_millis(20);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The outbound link to one peer, shared by the core task (which queues) and its sender task.
#[derive(Debug)]
pub(crate) struct PeerLink {
    pub id: NodeId,
    pub addr: SocketAddr,
    state: Mutex<LinkState>,
    notify: Notify,
    connected: AtomicBool,
    sent: AtomicU64,
    dropped_by_fault: AtomicU64,
    dropped_overflow: AtomicU64,
}

#[derive(Debug, Default)]
struct LinkState {
    queue: VecDeque<(TokioInstant, PeerMessage)>,
    fault: LinkFault,
    /// The core task has stopped: send what is ready, then exit.
    closed: bool,
}

impl PeerLink {
    pub fn new(id: NodeId, addr: SocketAddr) -> PeerLink {
        PeerLink {
            id,
            addr,
            state: Mutex::new(LinkState::default()),
            notify: Notify::new(),
            connected: AtomicBool::new(false),
            sent: AtomicU64::new(0),
            dropped_by_fault: AtomicU64::new(0),
            dropped_overflow: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LinkState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a message (never blocks). Call [`PeerLink::wake`] once after a batch of pushes.
    pub fn push(&self, at: TokioInstant, msg: PeerMessage) {
        let mut s = self.lock();
        if s.closed {
            return;
        }
        s.queue.push_back((at, msg));
        if s.queue.len() > PEER_QUEUE_LIMIT {
            s.queue.pop_front();
            let n = self.dropped_overflow.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                warn!(peer = %self.id, dropped = n, "peer queue full, dropping oldest messages");
            }
        }
    }

    pub fn wake(&self) {
        self.notify.notify_one();
    }

    pub fn set_fault(&self, fault: LinkFault) {
        self.lock().fault = fault;
        self.wake();
    }

    pub fn fault(&self) -> LinkFault {
        self.lock().fault
    }

    /// No more messages will come: the sender flushes what is ready and exits.
    pub fn close(&self) {
        self.lock().closed = true;
        self.wake();
    }

    pub fn status(&self) -> PeerStatus {
        PeerStatus {
            node: self.id,
            addr: self.addr.to_string(),
            connected: self.connected.load(Ordering::Relaxed),
            fault: self.fault(),
            messages_sent: self.sent.load(Ordering::Relaxed),
            messages_dropped_by_fault: self.dropped_by_fault.load(Ordering::Relaxed),
        }
    }
}

/// The sender task of one outbound link.
pub(crate) async fn run_sender(link: Arc<PeerLink>, wire: WireSettings, security: Security) {
    let seed = (u64::from(wire.node.0) << 32) ^ u64::from(link.id.0) ^ 0x5eed_fa17;
    let mut fault_layer: FaultLayer<TokioInstant> = FaultLayer::new(seed);
    // Admitted messages waiting for their due time (FIFO, due times non-decreasing).
    let mut delayed: VecDeque<(TokioInstant, PeerMessage)> = VecDeque::new();
    let mut ready: Vec<(TokioInstant, PeerMessage)> = Vec::new();
    let mut buf = BytesMut::with_capacity(64 << 10);
    let mut scratch = [0u8; 64];
    let mut backoff = BACKOFF_MIN;
    let mut failures: u32 = 0;

    'outer: loop {
        // ---- (re)connect ----
        let (mut rd, mut wr) = loop {
            if link.lock().closed {
                break 'outer;
            }
            let attempt = tokio::time::timeout(CONNECT_TIMEOUT, async {
                let s = TcpStream::connect(link.addr).await?;
                let _ = s.set_nodelay(true);
                handshake::dial_peer(&security, link.id, s).await
            });
            let res = tokio::select! {
                r = attempt => r,
                _ = wait_closed(&link) => break 'outer,
            };
            match res
                .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))
                .and_then(|r| r)
            {
                Ok((rd, mut wr)) => {
                    buf.clear();
                    encode_frame(&mut buf, wire.cluster, &PeerMessage::Hello { from: wire.node });
                    match async { wr.write_all(&buf).await.and(wr.flush().await) }.await {
                        Ok(()) => {
                            buf.clear();
                            break (rd, wr);
                        }
                        Err(e) => {
                            debug!(peer = %link.id, addr = %link.addr, error = %e, "hello failed")
                        }
                    }
                }
                Err(e) => {
                    failures += 1;
                    if failures == 1 {
                        info!(peer = %link.id, addr = %link.addr, error = %e, "peer unreachable, retrying");
                    } else {
                        debug!(peer = %link.id, addr = %link.addr, error = %e, attempt = failures, "connect failed");
                    }
                }
            }
            let until = TokioInstant::now() + backoff;
            backoff = (backoff * 2).min(BACKOFF_MAX);
            tokio::select! {
                _ = tokio::time::sleep_until(until) => {}
                _ = wait_closed(&link) => break 'outer,
            }
        };
        info!(peer = %link.id, addr = %link.addr, "outbound peer link up");
        link.connected.store(true, Ordering::Relaxed);
        backoff = BACKOFF_MIN;
        failures = 0;

        // ---- send loop ----
        loop {
            let (fault, closed) = {
                let mut s = link.lock();
                ready.extend(s.queue.drain(..));
                (s.fault, s.closed)
            };
            for (at, msg) in ready.drain(..) {
                match fault_layer.admit(&fault, at) {
                    Verdict::Drop => {
                        link.dropped_by_fault.fetch_add(1, Ordering::Relaxed);
                    }
                    Verdict::SendAt(due) => delayed.push_back((due, msg)),
                }
            }
            // A partition set while messages were held back cuts them too.
            if fault.partitioned && !delayed.is_empty() {
                link.dropped_by_fault.fetch_add(delayed.len() as u64, Ordering::Relaxed);
                delayed.clear();
            }
            let now = TokioInstant::now();
            let mut count = 0u64;
            while delayed.front().is_some_and(|(due, _)| *due <= now) && buf.len() < MAX_BATCH_BYTES
            {
                let (_, msg) = delayed.pop_front().expect("front exists");
                let start = buf.len();
                encode_frame(&mut buf, wire.cluster, &msg);
                if buf.len() - start > wire.max_frame_bytes {
                    // The peer would close the connection on it; the core's limits should
                    // make this impossible, so it is loud.
                    warn!(peer = %link.id, bytes = buf.len() - start, "dropping a peer message larger than the frame limit");
                    buf.truncate(start);
                    continue;
                }
                count += 1;
            }
            if !buf.is_empty() {
                // A TLS stream holds back what it encrypted until flushed.
                let res = async { wr.write_all(&buf).await.and(wr.flush().await) }.await;
                buf.clear();
                if let Err(e) = res {
                    info!(peer = %link.id, error = %e, "outbound peer link down (write failed)");
                    link.connected.store(false, Ordering::Relaxed);
                    continue 'outer;
                }
                link.sent.fetch_add(count, Ordering::Relaxed);
                if delayed.front().is_some_and(|(due, _)| *due <= TokioInstant::now()) {
                    continue; // the batch was capped; more is ready
                }
            }
            if closed {
                // Shutdown: what was ready has been written; held-back messages are dropped
                // like any in-flight message of a dying node.
                let _ = wr.shutdown().await;
                link.connected.store(false, Ordering::Relaxed);
                break 'outer;
            }
            let next_due = delayed.front().map(|(due, _)| *due);
            tokio::select! {
                _ = link.notify.notified() => {}
                _ = sleep_until_opt(next_due) => {}
                // The peer never writes on this connection: a read returns only at EOF or error.
                r = rd.read(&mut scratch) => {
                    if matches!(r, Ok(0) | Err(_)) {
                        info!(peer = %link.id, "outbound peer link down (closed by peer)");
                        link.connected.store(false, Ordering::Relaxed);
                        continue 'outer;
                    }
                }
            }
        }
    }
    link.connected.store(false, Ordering::Relaxed);
    debug!(peer = %link.id, "peer sender stopped");
}

async fn sleep_until_opt(t: Option<TokioInstant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Returns once the link is closed. Consumes wake-ups meant for the send loop, which is fine:
/// it is only used while not connected, and the send loop re-reads the queue on connect.
async fn wait_closed(link: &PeerLink) {
    loop {
        if link.lock().closed {
            return;
        }
        link.notify.notified().await;
    }
}

/// Accepts inbound peer connections until shutdown.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run_peer_acceptor(
    listener: TcpListener,
    wire: WireSettings,
    peers: Arc<Vec<NodeId>>,
    core_tx: mpsc::Sender<CoreInput>,
    counters: Arc<Counters>,
    tasks: Arc<Tasks>,
    mut stop: watch::Receiver<bool>,
    security: Security,
) {
    loop {
        let accepted = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, remote)) => {
                let _ = stream.set_nodelay(true);
                let (security, peers, core_tx, counters, stop) = (
                    security.clone(),
                    peers.clone(),
                    core_tx.clone(),
                    counters.clone(),
                    stop.clone(),
                );
                tasks.spawn(async move {
                    let Some((rd, wr, cert_node)) =
                        handshake::accept_peer(&security, stream, remote, &counters).await
                    else {
                        return;
                    };
                    run_peer_reader(rd, remote, cert_node, wire, peers, core_tx, counters, stop)
                        .await;
                    // Held until the reader ends: closing it would tell the peer the link is
                    // down (its sender watches for EOF).
                    drop(wr);
                });
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                warn!(error = %e, "accepting a peer connection failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    debug!("peer listener closed");
}

/// Reads one inbound peer connection and feeds its messages to the core task. `cert_node`:
/// the node its TLS certificate names (`None` without TLS), the only one its `Hello` may name.
#[allow(clippy::too_many_arguments)]
async fn run_peer_reader(
    mut stream: BoxRead,
    remote: SocketAddr,
    cert_node: Option<NodeId>,
    wire: WireSettings,
    peers: Arc<Vec<NodeId>>,
    core_tx: mpsc::Sender<CoreInput>,
    counters: Arc<Counters>,
    mut stop: watch::Receiver<bool>,
) {
    let mut buf = BytesMut::with_capacity(64 << 10);
    let mut from: Option<NodeId> = None;
    let hello_deadline = TokioInstant::now() + HELLO_TIMEOUT;
    let mut bad_here = 0u64;
    let mut note_bad = |what: &dyn std::fmt::Display, from: Option<NodeId>| {
        let total = counters.bad_peer();
        bad_here += 1;
        // Rate-limited: the first bad frame of a connection is a warning, the rest are debug.
        if bad_here == 1 {
            warn!(%remote, peer = ?from.map(|n| n.0), error = %what, total, "bad peer frame dropped");
        } else {
            debug!(%remote, peer = ?from.map(|n| n.0), error = %what, total, "bad peer frame dropped");
        }
    };
    'conn: loop {
        let mut msgs = Vec::new();
        loop {
            // Before its `Hello` a connection is nobody's: its first frame may not be large
            // (an unknown client cannot make the node buffer a whole frame, issue #17).
            let max = if from.is_some() { wire.max_frame_bytes } else { MAX_HELLO_FRAME_BYTES };
            match decode_frame(&mut buf, wire.cluster, max) {
                Ok(None) => break,
                Ok(Some(payload)) => match (decode_message::<PeerMessage>(payload), from) {
                    (Ok(PeerMessage::Hello { from: f }), None) => {
                        if !peers.contains(&f) {
                            note_bad(
                                &format_args!("hello from {f}, which is not a configured peer"),
                                None,
                            );
                            break 'conn;
                        }
                        // A peer is who its certificate says, not what its Hello claims.
                        if let Some(c) = cert_node.filter(|c| *c != f) {
                            note_bad(
                                &format_args!("hello from {f}, but the TLS certificate names {c}"),
                                None,
                            );
                            break 'conn;
                        }
                        info!(peer = %f, %remote, "inbound peer link up");
                        from = Some(f);
                    }
                    (Ok(_), None) => {
                        note_bad(&"first frame is not a hello", None);
                        break 'conn;
                    }
                    // A repeated handshake carries nothing.
                    (Ok(PeerMessage::Hello { .. }), Some(_)) => {}
                    (Ok(msg), Some(_)) => msgs.push(msg),
                    (Err(e), f) => {
                        note_bad(&e, f);
                        if f.is_none() {
                            break 'conn;
                        }
                    }
                },
                Err(e) => {
                    note_bad(&e, from);
                    if e.is_fatal() || from.is_none() {
                        break 'conn;
                    }
                }
            }
        }
        if let (Some(f), false) = (from, msgs.is_empty()) {
            if core_tx.send(CoreInput::Peer { from: f, msgs }).await.is_err() {
                break 'conn; // the core task has stopped
            }
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(64 << 10);
        }
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break 'conn,
            _ = tokio::time::sleep_until(hello_deadline), if from.is_none() => {
                debug!(%remote, "no hello in time; closing");
                break 'conn;
            }
            r = stream.read_buf(&mut buf) => match r {
                Ok(0) => break 'conn,
                Ok(_) => {}
                Err(e) => {
                    debug!(%remote, error = %e, "peer read failed");
                    break 'conn;
                }
            },
        }
    }
    if let Some(f) = from {
        info!(peer = %f, %remote, "inbound peer link down");
    }
}
