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
//! | value beyond `max_value_bytes` | `ValueTooLarge` (from the core) | kept |
//!
//! Each of the first six is counted in `bad_client_frames`, and so is a refused TLS handshake
//! (`handshake`). A request the connection's role does not allow is answered `Unauthenticated`
//! or `Forbidden` by the host (`strata_host::auth`); the connection is kept.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use strata_core::Route;
use strata_tls::{BoxRead, BoxWrite};
use strata_wire::client::{
    peek_request_header, request_tag, ClientRequest, ClientResponse, ErrorCode, Response,
};
use strata_wire::{decode_frame, decode_message, encode_frame, DecodeError, FrameError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tracing::{debug, warn};

use crate::handshake::{self, Security};
use crate::shared::{ClientItem, CoreInput, Counters, Tasks, WireSettings, WriterMsg};

/// Responses are written once this many bytes are buffered, even if more are ready.
const MAX_WRITE_BYTES: usize = 1 << 20;
/// After a fatal framing error, how long the reader keeps draining the socket so that the
/// error reply is not destroyed by a reset (closing with unread data sends RST).
const LINGER: Duration = Duration::from_millis(500);

/// Accepts client connections until shutdown.
pub(crate) async fn run_client_acceptor(
    listener: TcpListener,
    wire: WireSettings,
    core_tx: mpsc::Sender<CoreInput>,
    counters: Arc<Counters>,
    tasks: Arc<Tasks>,
    mut stop: watch::Receiver<bool>,
    security: Security,
) {
    let mut next_route: Route = 1;
    loop {
        let accepted = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, remote)) => {
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
                // The TLS handshake runs in the connection's task, not in this loop.
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
                    // Registered before the reader sends anything: channel order does the rest.
                    if core_tx.send(CoreInput::Connected { route, tx, role }).await.is_err() {
                        return;
                    }
                    debug!(route, %remote, role = ?role.map(|r| r.name()), "client connected");
                    tasks_c.spawn(run_writer(wr, rx, wire));
                    run_reader(rd, remote, route, wire, core_tx, counters, stop).await;
                });
            }
            Err(e) => {
                warn!(error = %e, "accepting a client connection failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    debug!("client listener closed");
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

async fn run_reader(
    mut rd: BoxRead,
    remote: SocketAddr,
    route: Route,
    wire: WireSettings,
    core_tx: mpsc::Sender<CoreInput>,
    counters: Arc<Counters>,
    mut stop: watch::Receiver<bool>,
) {
    let mut buf = BytesMut::with_capacity(16 << 10);
    let mut bad_here = 0u64;
    let mut fatal = false;
    'conn: loop {
        let mut items = Vec::new();
        loop {
            match decode_frame(&mut buf, wire.cluster, wire.max_frame_bytes) {
                Ok(None) => break,
                Ok(Some(payload)) => match decode_message::<ClientRequest>(payload.clone()) {
                    Ok(req) => items.push(ClientItem::Req(req)),
                    Err(e) => {
                        let resp = decode_error_reply(&payload, &e);
                        note_bad(&counters, &mut bad_here, route, remote, &e);
                        items.push(ClientItem::Reply(resp));
                    }
                },
                Err(e) => {
                    note_bad(&counters, &mut bad_here, route, remote, &e);
                    let (code, message, close) = frame_error_reply(&e);
                    let resp = ClientResponse { corr: 0, body: Response::Error { code, message } };
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
        if !items.is_empty() && core_tx.send(CoreInput::Client { route, items }).await.is_err() {
            break 'conn; // the core task has stopped
        }
        if fatal {
            break 'conn;
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 << 10);
        }
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break 'conn,
            r = rd.read_buf(&mut buf) => match r {
                Ok(0) => break 'conn,
                Ok(_) => {}
                Err(e) => {
                    debug!(route, %remote, error = %e, "client read failed");
                    break 'conn;
                }
            },
        }
    }
    let _ = core_tx.send(CoreInput::Disconnected { route }).await;
    if fatal {
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
    debug!(route, %remote, "client disconnected");
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

async fn run_writer(
    mut wr: BoxWrite,
    mut rx: mpsc::UnboundedReceiver<WriterMsg>,
    wire: WireSettings,
) {
    let mut buf = BytesMut::with_capacity(16 << 10);
    let mut close = false;
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some(m) = next.take() {
            match m {
                WriterMsg::Resp(resp) => encode_frame(&mut buf, wire.cluster, &resp),
                WriterMsg::RespAs(cluster, resp) => encode_frame(&mut buf, cluster, &resp),
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
            // A TLS stream holds back what it encrypted until flushed.
            if wr.write_all(&buf).await.is_err() || wr.flush().await.is_err() {
                return;
            }
            buf.clear();
        }
        if close {
            break;
        }
    }
    let _ = wr.shutdown().await;
}
