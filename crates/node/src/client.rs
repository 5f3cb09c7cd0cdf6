//! Client connections: a reader task that decodes frames into requests for the core task, and
//! a writer task that coalesces every ready response into one write.
//!
//! Bad input never takes the node down and always gets an answer the client can act on:
//!
//! | input | reply | connection |
//! |---|---|---|
//! | length prefix beyond `max_frame_bytes` | `FrameTooLarge` | closed (frame boundaries are lost) |
//! | length prefix too small for a header | `Malformed` | closed |
//! | checksum mismatch | `Malformed` | kept |
//! | foreign cluster id | `WrongCluster` ("wrong cluster", framed with the client's cluster id: this node's is not revealed) | closed (the client is pointed at the wrong cluster) |
//! | unknown request tag | `UnknownRequest`, echoing the request's `corr` | kept |
//! | known tag, undecodable fields | `Malformed`, echoing `corr` when the header is intact | kept |
//! | value beyond `max_value_bytes`, key beyond 64 KiB | `ValueTooLarge`, `KeyTooLarge` (from the host, rc keyspace and log tables alike) | kept |
//!
//! Each of the first six is counted in `bad_client_frames`, and so is a refused TLS handshake
//! (`handshake`). A request the connection's role does not allow is answered `Unauthenticated`
//! or `Forbidden` by the host (`strata_host::auth`); the connection is kept.
//!
//! Bounds (issue #17; `docs/design.md`, "Limits and bounds"; node config):
//!
//! | bound | what happens | counted in `Status` |
//! |---|---|---|
//! | `max_connections`, `max_connections_per_ip` | a connection over a cap gets `TooManyConnections` (corr 0) and is closed | `refused` |
//! | `max_connection_buffer_bytes` | requests read and not answered plus replies not written are charged to the connection ([`ConnShared`]); at the budget the reader stops reading and the core task admits nothing more of it until replies drain | `buffered_bytes`, `paused` |
//! | `partial_frame_timeout_ms` | a frame not whole within it (while the node reads): `ConnectionTimedOut` (corr 0), closed | `closed_slow_frame` |
//! | `idle_timeout_ms` | nothing read, nothing in flight, nothing to write for it: `ConnectionTimedOut`, closed; a reply write that makes no progress for it: closed at once, queue dropped | `closed_idle` |
//!
//! Every frame that may be kept (a write's key and value) is copied out of the read buffer
//! before it is decoded, so a value kept in the store never pins a read buffer; the buffer is
//! reused (and shrunk once empty). Requests nothing keeps are decoded in place
//! (`own_unless_transient`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use strata_core::Route;
use strata_tls::{BoxRead, BoxWrite};
use strata_wire::client::{
    peek_request_header, request_tag, ClientRequest, ClientResponse, ErrorCode, Request, Response,
};
use strata_wire::{
    decode_frame, decode_message, encode_frame, DecodeError, FrameError, FRAME_HEADER_BYTES,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant as TokioInstant;
use tracing::{debug, info, warn};

use crate::handshake::{self, Security};
use crate::shared::{
    give_back_memory, ClientItem, ConnBounds, ConnLimiter, ConnShared, CoreInput, Counters, Tasks,
    WireSettings, WriterMsg, LARGE_BUFFER_BYTES,
};

/// Responses are written once this many bytes are buffered, even if more are ready.
const MAX_WRITE_BYTES: usize = 1 << 20;
/// After a fatal framing error, how long the reader keeps draining the socket so that the
/// error reply is not destroyed by a reset (closing with unread data sends RST).
const LINGER: Duration = Duration::from_millis(500);
/// A connection's read buffer starts at this size, and goes back to it once empty after
/// holding a large frame, so an idle connection keeps no large buffer.
const READ_BUFFER_BYTES: usize = 16 << 10;
/// Requests handed to the core task in one batch at most (the core task looks at the
/// connection's budget between batches).
const MAX_BATCH_ITEMS: usize = 256;
/// Refused connections being answered at once; beyond this a refused connection is closed
/// without an answer (a flood of them costs nothing but the accept).
const MAX_REFUSING: usize = 64;

/// Accepts client connections until shutdown, up to the caps of `bounds`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run_client_acceptor(
    listener: TcpListener,
    wire: WireSettings,
    bounds: ConnBounds,
    core_tx: mpsc::Sender<CoreInput>,
    counters: Arc<Counters>,
    tasks: Arc<Tasks>,
    mut stop: watch::Receiver<bool>,
    security: Security,
) {
    let limiter = ConnLimiter::new(bounds, counters.clone());
    let refusing = Arc::new(AtomicUsize::new(0));
    let mut next_route: Route = 1;
    loop {
        let accepted = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, remote)) => {
                let slot = match limiter.try_acquire(remote.ip()) {
                    Ok(slot) => slot,
                    Err(why) => {
                        let n = counters.refused_connections.fetch_add(1, Ordering::Relaxed) + 1;
                        if n.is_power_of_two() {
                            warn!(%remote, refused = n, "{why}");
                        } else {
                            debug!(%remote, refused = n, "{why}");
                        }
                        if refusing.fetch_add(1, Ordering::Relaxed) < MAX_REFUSING {
                            let refusing = refusing.clone();
                            tasks.spawn(async move {
                                refuse(stream, wire, why).await;
                                refusing.fetch_sub(1, Ordering::Relaxed);
                            });
                        } else {
                            refusing.fetch_sub(1, Ordering::Relaxed);
                        }
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let route = next_route;
                next_route += 1;
                let (security, core_tx, counters, stop, tasks_c) = (
                    security.clone(),
                    core_tx.clone(),
                    counters.clone(),
                    stop.clone(),
                    tasks.clone(),
                );
                // The TLS handshake runs in the connection's task, not in this loop; the
                // connection holds its slot from here (a slow handshake counts against the cap).
                tasks.spawn(async move {
                    let Some((rd, wr, role)) = handshake::accept_client(
                        &security,
                        stream,
                        remote,
                        &counters,
                        wire.cluster,
                    )
                    .await
                    else {
                        return;
                    };
                    let (tx, rx) = mpsc::unbounded_channel();
                    let conn = Arc::new(ConnShared::new(bounds.budget_bytes, slot));
                    // Registered before the reader sends anything: channel order does the rest.
                    let connected = CoreInput::Connected { route, tx, conn: conn.clone(), role };
                    if core_tx.send(connected).await.is_err() {
                        return;
                    }
                    debug!(route, %remote, role = ?role.map(|r| r.name()), "client connected");
                    tasks_c.spawn(run_writer(
                        wr,
                        rx,
                        wire,
                        route,
                        bounds,
                        conn.clone(),
                        core_tx.clone(),
                        counters.clone(),
                    ));
                    run_reader(rd, remote, route, wire, bounds, conn, core_tx, counters, stop)
                        .await;
                });
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                warn!(error = %e, "accepting a client connection failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    debug!("client listener closed");
}

/// Answers a connection over a cap with `TooManyConnections` (correlation number 0) and
/// closes it, reading (and dropping) what the client sent meanwhile for a moment, so that a
/// reset does not destroy the answer.
async fn refuse(mut stream: TcpStream, wire: WireSettings, why: String) {
    let mut b = BytesMut::new();
    let body = Response::Error { code: ErrorCode::TooManyConnections, message: why };
    encode_frame(&mut b, wire.cluster, &ClientResponse { corr: 0, body });
    let _ = tokio::time::timeout(LINGER, async {
        if stream.write_all(&b).await.is_ok() && stream.shutdown().await.is_ok() {
            let mut scratch = [0u8; 1024];
            while matches!(stream.read(&mut scratch).await, Ok(n) if n > 0) {}
        }
    })
    .await;
}

/// What to do with a frame-level error: the reply, and whether the connection must close.
fn frame_error_reply(e: &FrameError) -> (ErrorCode, String, bool) {
    match e {
        FrameError::BadLength { len, max } if len > max => (
            ErrorCode::FrameTooLarge,
            format!("frame of {len} bytes exceeds the limit of {max} bytes"),
            true,
        ),
        FrameError::BadLength { len, .. } => (
            ErrorCode::Malformed,
            format!("frame length {len} is too small to hold a frame header"),
            true,
        ),
        FrameError::Checksum => {
            (ErrorCode::Malformed, "frame checksum mismatch; frame dropped".into(), false)
        }
        // Only "wrong": a client of another cluster learns nothing about this one (issue #17).
        FrameError::WrongCluster { .. } => (ErrorCode::WrongCluster, "wrong cluster".into(), true),
    }
}

fn is_known_request_tag(tag: u8) -> bool {
    use request_tag::*;
    matches!(
        tag,
        OPEN_SESSION
            | CLOSE_SESSION
            | GET
            | PUT
            | DELETE
            | RELEASE
            | ACQUIRE
            | FAA
            | CAS
            | STATUS
            | SET_FAULT
            | LOG_WRITE
            | LOG_READ
            | CREATE_TABLE
            | LIST_TABLES
    )
}

/// The reply to a frame whose payload does not decode as a request.
fn decode_error_reply(payload: &Bytes, e: &DecodeError) -> ClientResponse {
    let corr = peek_request_header(payload).map(|(_, corr)| corr).unwrap_or(0);
    let tag = payload.first().copied();
    let unknown = matches!(e, DecodeError::UnknownTag { .. })
        || tag.is_some_and(|t| !is_known_request_tag(t));
    let (code, message) = match (unknown, tag) {
        (true, Some(t)) => (ErrorCode::UnknownRequest, format!("unknown request tag {t:#04x}")),
        _ => (ErrorCode::Malformed, format!("malformed request: {e}")),
    };
    ClientResponse { corr, body: Response::Error { code, message } }
}

/// Why a reader stopped reading.
enum Stop {
    /// The client closed, the node stops, the core task is gone, or the writer gave up.
    Done,
    /// A framing error: the error reply is queued; drain for a moment before closing.
    Fatal,
    /// A bound closed the connection (idle, slow frame): the notice is queued.
    Bound,
}

/// A request that nothing keeps (a read, a ping, a session or lease look-up) is decoded in
/// place: it holds the read buffer only until it is answered. Any other gets a copy of its
/// own, so that a key or value kept in a store never pins a read buffer (and the buffer can
/// be reused at once). A copy per request is an allocation per request, freed on another
/// thread: for reads, the bulk of most workloads, it is worth avoiding.
fn own_unless_transient(payload: Bytes) -> Bytes {
    use strata_wire::client::request_tag::*;
    match payload.first() {
        Some(
            &(GET | LOG_READ | PING | STATUS | LIST_TABLES | LEASE_INFO | OPEN_SESSION
            | CLOSE_SESSION),
        ) => payload,
        _ => Bytes::copy_from_slice(&payload),
    }
}

/// The bytes a complete frame of `buf` still needs (or its header), `None` if `buf` is empty.
fn frame_remaining(buf: &[u8]) -> Option<usize> {
    match buf.len() {
        0 => None,
        n @ 1..=3 => Some(4 - n),
        n => {
            let body = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes")) as usize;
            Some((4 + body).saturating_sub(n))
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_reader(
    mut rd: BoxRead,
    remote: SocketAddr,
    route: Route,
    wire: WireSettings,
    bounds: ConnBounds,
    conn: Arc<ConnShared>,
    core_tx: mpsc::Sender<CoreInput>,
    counters: Arc<Counters>,
    mut stop: watch::Receiver<bool>,
) {
    let mut buf = BytesMut::with_capacity(READ_BUFFER_BYTES);
    let mut bad_here = 0u64;
    let mut last_read = TokioInstant::now();
    // When the partial frame at the front of `buf` began to arrive (or reading resumed).
    let mut frame_started: Option<TokioInstant> = None;
    // One timer for both bounds, kept across reads and moved only when a deadline comes
    // earlier than it is set for; when it fires, the bounds are checked against their current
    // deadlines. A timer per read (registered and dropped for every request) is a cost every
    // request would pay, for a bound that almost never fires.
    let mut bound_timer = Box::pin(tokio::time::sleep_until(TokioInstant::now()));
    let mut armed: Option<TokioInstant> = None;
    let why = 'conn: loop {
        // Hand on every whole frame in the buffer, in batches.
        let mut fatal = false;
        let mut consumed = 0usize;
        loop {
            let mut items = Vec::new();
            let mut charged = 0usize;
            while items.len() < MAX_BATCH_ITEMS {
                match decode_frame(&mut buf, wire.cluster, wire.max_frame_bytes) {
                    Ok(None) => break,
                    Ok(Some(payload)) => {
                        consumed += 1;
                        let frame_bytes = payload.len() + FRAME_HEADER_BYTES;
                        let payload = own_unless_transient(payload);
                        match decode_message::<ClientRequest>(payload.clone()) {
                            Ok(ClientRequest { corr, body: Request::Ping, .. }) => {
                                let pong = ClientResponse { corr, body: Response::Pong };
                                items.push(ClientItem::Reply(pong));
                            }
                            Ok(req) => {
                                charged += frame_bytes;
                                items.push(ClientItem::Req(req, frame_bytes));
                            }
                            Err(e) => {
                                let resp = decode_error_reply(&payload, &e);
                                note_bad(&counters, &mut bad_here, route, remote, &e);
                                items.push(ClientItem::Reply(resp));
                            }
                        }
                    }
                    Err(e) => {
                        note_bad(&counters, &mut bad_here, route, remote, &e);
                        let (code, message, close) = frame_error_reply(&e);
                        let resp =
                            ClientResponse { corr: 0, body: Response::Error { code, message } };
                        items.push(match e {
                            // Framed with the client's own cluster id: the header, like the
                            // message, says nothing about this cluster (issue #17).
                            FrameError::WrongCluster { got, .. } => ClientItem::ReplyAs(got, resp),
                            _ => ClientItem::Reply(resp),
                        });
                        if close {
                            items.push(ClientItem::Close);
                            fatal = true;
                            break;
                        }
                    }
                }
            }
            if items.is_empty() {
                break;
            }
            conn.charge(charged);
            conn.set_input(buf.len());
            if core_tx.send(CoreInput::Client { route, items }).await.is_err() {
                break 'conn Stop::Done; // the core task has stopped
            }
            if fatal {
                break 'conn Stop::Fatal;
            }
        }
        conn.set_input(buf.len());
        let now = TokioInstant::now();
        if buf.is_empty() {
            frame_started = None;
            if buf.capacity() > 16 * READ_BUFFER_BYTES {
                // A large frame passed through: give its buffer back.
                let large = buf.capacity() >= LARGE_BUFFER_BYTES;
                buf = BytesMut::with_capacity(READ_BUFFER_BYTES);
                if large {
                    give_back_memory();
                }
            }
        } else if consumed > 0 || frame_started.is_none() {
            frame_started = Some(now);
        }
        // Backpressure: read only while the connection's budget allows; a frame larger than
        // the budget is still read whole when nothing else is charged (so any frame within
        // max_frame_bytes can arrive).
        let used = conn.charged() + buf.len();
        let partial = frame_remaining(&buf);
        let room = if used < conn.budget {
            conn.budget - used
        } else if let (Some(rest), 0) = (partial, conn.charged()) {
            rest
        } else {
            conn.paused.store(true, Ordering::Relaxed);
            let stopping = tokio::select! {
                _ = stop.wait_for(|s| *s) => true,
                _ = conn.wait_released() => false,
            };
            if stopping {
                break 'conn Stop::Done;
            }
            conn.paused.store(false, Ordering::Relaxed);
            if conn.is_aborted() {
                break 'conn Stop::Done;
            }
            // The client was not to blame for the pause: its frame's clock starts again.
            if frame_started.is_some() {
                frame_started = Some(TokioInstant::now());
            }
            last_read = TokioInstant::now();
            continue 'conn;
        };
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(READ_BUFFER_BYTES);
        }
        let room = room.max(4096);
        // Idle: nothing read for the timeout, nothing unanswered, nothing left to write.
        let idle_at = bounds.idle_timeout.map(|t| last_read + t);
        let frame_due = frame_started.map(|t| t + bounds.partial_frame_timeout);
        if let Some(due) = frame_due.into_iter().chain(idle_at).min() {
            if armed.is_none_or(|at| at > due) {
                bound_timer.as_mut().reset(due);
                armed = Some(due);
            }
        }
        let mut limited = (&mut buf).limit(room);
        enum Woke {
            Read(std::io::Result<usize>),
            SlowFrame,
            Idle,
            Stop,
            Early,
        }
        // Biased, the read first: when bytes are there, nothing else is polled (or registered).
        let woke = tokio::select! {
            biased;
            r = rd.read_buf(&mut limited) => Woke::Read(r),
            _ = stop.wait_for(|s| *s) => Woke::Stop,
            _ = conn.aborted() => Woke::Stop,
            _ = &mut bound_timer, if armed.is_some() => {
                armed = None;
                let now = TokioInstant::now();
                if frame_due.is_some_and(|d| d <= now) {
                    Woke::SlowFrame
                } else if idle_at.is_some_and(|d| d <= now) {
                    Woke::Idle
                } else {
                    Woke::Early
                }
            }
        };
        match woke {
            // The timer was set for a deadline that has moved since: set it again.
            Woke::Early => continue 'conn,
            Woke::Stop | Woke::Read(Ok(0)) => break 'conn Stop::Done,
            Woke::Read(Ok(_)) => last_read = TokioInstant::now(),
            Woke::Read(Err(e)) => {
                debug!(route, %remote, error = %e, "client read failed");
                break 'conn Stop::Done;
            }
            Woke::SlowFrame => {
                let rest = partial.unwrap_or(0);
                let n = counters.closed_slow_frame.fetch_add(1, Ordering::Relaxed) + 1;
                info!(route, %remote, missing = rest, closed = n, "closing a client connection: a frame did not arrive within the partial-frame timeout");
                let message = format!(
                    "a frame was not completed within {:?} (partial_frame_timeout_ms): {} bytes received, {rest} missing; closing",
                    bounds.partial_frame_timeout,
                    buf.len()
                );
                let sent = send_notice(&core_tx, route, message).await;
                break 'conn if sent { Stop::Bound } else { Stop::Done };
            }
            Woke::Idle => {
                if conn.charged() > 0 || !buf.is_empty() {
                    // Waiting for an answer, a write, or a frame (the other bounds' business).
                    last_read = TokioInstant::now();
                    continue 'conn;
                }
                let n = counters.closed_idle.fetch_add(1, Ordering::Relaxed) + 1;
                debug!(route, %remote, closed = n, "closing an idle client connection");
                let message = format!(
                    "idle for {:?} (idle_timeout_ms); closing",
                    bounds.idle_timeout.unwrap_or_default()
                );
                let sent = send_notice(&core_tx, route, message).await;
                break 'conn if sent { Stop::Bound } else { Stop::Done };
            }
        }
    };
    // Nothing of this connection is buffered here any more.
    let large = buf.capacity() >= LARGE_BUFFER_BYTES;
    drop(buf);
    conn.set_input(0);
    if large {
        give_back_memory();
    }
    let _ = core_tx.send(CoreInput::Disconnected { route }).await;
    if matches!(why, Stop::Fatal | Stop::Bound) {
        // Drain (and discard) what the client is still sending for a moment, so that our
        // error reply reaches it before the connection is torn down.
        let mut scratch = vec![0u8; 16 << 10];
        let _ = tokio::time::timeout(LINGER, async {
            loop {
                match rd.read(&mut scratch).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        })
        .await;
    }
    if matches!(why, Stop::Bound) {
        // A client that does not read must not keep the writer (and its queue) alive.
        conn.abort();
    }
    debug!(route, %remote, "client disconnected");
}

/// Queues a `ConnectionTimedOut` notice (correlation number 0) and the close behind the
/// connection's replies. False if the core task is gone.
async fn send_notice(core_tx: &mpsc::Sender<CoreInput>, route: Route, message: String) -> bool {
    let body = Response::Error { code: ErrorCode::ConnectionTimedOut, message };
    let items = vec![ClientItem::Reply(ClientResponse { corr: 0, body }), ClientItem::Close];
    core_tx.send(CoreInput::Client { route, items }).await.is_ok()
}

fn note_bad(
    counters: &Counters,
    bad_here: &mut u64,
    route: Route,
    remote: SocketAddr,
    e: &dyn std::fmt::Display,
) {
    let total = counters.bad_client();
    *bad_here += 1;
    // Rate-limited: the first bad frame of a connection is a warning, later ones are debug.
    if *bad_here == 1 {
        warn!(route, %remote, error = %e, total, "bad client frame");
    } else {
        debug!(route, %remote, error = %e, total, "bad client frame");
    }
}

/// Writes the connection's replies, releasing their charge once they are in the socket. A
/// write that makes no progress for the idle timeout means the client does not read: the
/// writer gives up, drops what is queued and aborts the connection.
#[allow(clippy::too_many_arguments)]
async fn run_writer(
    mut wr: BoxWrite,
    mut rx: mpsc::UnboundedReceiver<WriterMsg>,
    wire: WireSettings,
    route: Route,
    bounds: ConnBounds,
    conn: Arc<ConnShared>,
    core_tx: mpsc::Sender<CoreInput>,
    counters: Arc<Counters>,
) {
    let mut buf = BytesMut::with_capacity(16 << 10);
    let mut close = false;
    loop {
        let first = tokio::select! {
            biased;
            m = rx.recv() => m,
            _ = conn.aborted() => None,
        };
        let Some(first) = first else { break };
        let mut next = Some(first);
        let mut charged = 0usize;
        while let Some(m) = next.take() {
            match m {
                WriterMsg::Resp(resp, bytes) => {
                    encode_frame(&mut buf, wire.cluster, &resp);
                    charged += bytes;
                }
                WriterMsg::RespAs(cluster, resp, bytes) => {
                    encode_frame(&mut buf, cluster, &resp);
                    charged += bytes;
                }
                WriterMsg::Close => {
                    close = true;
                    break;
                }
            }
            if buf.len() >= MAX_WRITE_BYTES {
                break;
            }
            next = rx.try_recv().ok();
        }
        if !buf.is_empty() {
            match write_with_progress(&mut wr, &buf, bounds.idle_timeout, &conn).await {
                Ok(()) => {}
                Err(stalled) => {
                    if stalled {
                        let n = counters.closed_idle.fetch_add(1, Ordering::Relaxed) + 1;
                        info!(route, closed = n, "closing a client connection that does not read its replies (idle timeout)");
                    }
                    // The client is gone (or never reads): the reader must not wait for
                    // this writer to release bytes.
                    conn.abort();
                    return;
                }
            }
            buf.clear();
            if buf.capacity() > 2 * MAX_WRITE_BYTES {
                buf = BytesMut::with_capacity(16 << 10);
                give_back_memory();
            }
        }
        conn.release(charged);
        // The core task held requests back for this connection's budget: go on.
        if !conn.over_budget() && conn.held.swap(false, Ordering::SeqCst) {
            let _ = core_tx.send(CoreInput::Resume { route }).await;
        }
        if close {
            break;
        }
    }
    let _ = wr.shutdown().await;
}

/// Writes `buf` whole. `Err(true)`: no byte could be written for `idle` (the client does not
/// read); `Err(false)`: the socket failed or the connection was aborted.
async fn write_with_progress(
    wr: &mut BoxWrite,
    mut buf: &[u8],
    idle: Option<Duration>,
    conn: &ConnShared,
) -> Result<(), bool> {
    while !buf.is_empty() {
        let write = wr.write(buf);
        // Biased, the write first: a write the socket takes at once polls nothing else.
        let n = tokio::select! {
            biased;
            r = async {
                match idle {
                    Some(t) => tokio::time::timeout(t, write).await.map_err(|_| true),
                    None => Ok(write.await),
                }
            } => r?,
            _ = conn.aborted() => return Err(false),
        };
        match n {
            Ok(0) | Err(_) => return Err(false),
            Ok(n) => buf = &buf[n..],
        }
    }
    // A TLS stream holds back what it encrypted until flushed; the same progress rule.
    let flush = wr.flush();
    let flushed = tokio::select! {
        biased;
        r = async {
            match idle {
                Some(t) => tokio::time::timeout(t, flush).await.map_err(|_| true),
                None => Ok(flush.await),
            }
        } => r?,
        _ = conn.aborted() => return Err(false),
    };
    flushed.map_err(|_| false)
}
