//! The first step of every connection: TLS (or, with `insecure_plaintext`, none), and who is
//! on the other end (`docs/design.md`, "Security model").
//!
//! * A **peer** connection must present a certificate of the cluster's CA naming a node
//!   (`node-<id>`); the reader then accepts only a `Hello` from that node (`transport`). An
//!   outbound link checks that the peer's certificate names the node it dialed.
//! * A **client** connection may present a certificate naming a role; the role goes to the
//!   host with the connection (`Host::on_connected`), which decides what each request needs.
//!   Without TLS every client is `admin`: nothing can be checked.
//!
//! A refused handshake is counted with the bad frames of its kind and closes the connection.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use strata_tls::{BoxRead, BoxWrite, NodeTls};
use strata_wire::client::{ClientResponse, ErrorCode, Response};
use strata_wire::{encode_frame, ClusterId, NodeId, Role};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::{debug, warn};

use crate::shared::Counters;

/// A connection must finish its TLS handshake within this time.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a refused plain client's bytes are read away so that the answer reaches it.
const LINGER: Duration = Duration::from_millis(500);

/// How a node secures its connections: TLS with its credentials, or none.
pub(crate) type Security = Option<Arc<NodeTls>>;

async fn within<T>(
    what: &str,
    f: impl std::future::Future<Output = io::Result<T>>,
) -> io::Result<T> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, f).await.map_err(|_| {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("{what}: no TLS handshake within {HANDSHAKE_TIMEOUT:?}"),
        )
    })?
}

/// Logs a refused handshake: a warning for the first and then every power of two (a flood of
/// them must not flood the log), debug otherwise.
fn note_refused(total: u64, kind: &str, remote: SocketAddr, why: &dyn std::fmt::Display) {
    if total.is_power_of_two() {
        warn!(%remote, error = %why, total, "{kind} connection refused");
    } else {
        debug!(%remote, error = %why, total, "{kind} connection refused");
    }
}

/// What a client connection began with.
enum FirstBytes {
    /// A TLS handshake record (or nothing decisive: the handshake will tell).
    Tls,
    /// Something else, most likely plain Strata frames.
    Plain,
    /// Nothing: the client closed at once (a port probe such as `strata up`'s). Not counted.
    Closed,
}

/// Peeks at the first bytes: a TLS record header is a handshake record (0x16) of version
/// 3.1-3.4. A plain Strata frame starts with its length (little-endian), which reads so only
/// for a first frame of 64 KiB or more: such a client gets no explanation, just a failed
/// handshake.
async fn first_bytes(stream: &TcpStream) -> FirstBytes {
    let mut head = [0u8; 3];
    let deadline = tokio::time::Instant::now() + HANDSHAKE_TIMEOUT;
    loop {
        match tokio::time::timeout_at(deadline, stream.peek(&mut head)).await {
            Ok(Ok(0)) => return FirstBytes::Closed,
            Ok(Ok(n)) if n >= 3 => {
                let tls = head[0] == 0x16 && head[1] == 3 && (1..=4).contains(&head[2]);
                return if tls { FirstBytes::Tls } else { FirstBytes::Plain };
            }
            // Too few bytes yet: the rest is on its way (a handshake record comes whole).
            Ok(Ok(_)) => tokio::time::sleep(Duration::from_millis(5)).await,
            // An error or the deadline: the handshake fails and says why.
            _ => return FirstBytes::Tls,
        }
    }
}

/// An accepted client connection's halves and role, or `None` if its handshake failed
/// (counted in `bad_client_frames`). A client that speaks plain Strata frames to a TLS node is
/// told so, in a plain frame, before the connection closes.
pub(crate) async fn accept_client(
    security: &Security,
    stream: TcpStream,
    remote: SocketAddr,
    counters: &Counters,
    cluster: ClusterId,
) -> Option<(BoxRead, BoxWrite, Option<Role>)> {
    let Some(tls) = security else {
        let (rd, wr) = strata_tls::split_tcp(stream);
        return Some((rd, wr, Some(Role::Admin)));
    };
    match first_bytes(&stream).await {
        FirstBytes::Tls => {}
        FirstBytes::Closed => return None,
        FirstBytes::Plain => {
            note_refused(counters.bad_client(), "client", remote, &"plain frames on a TLS port");
            refuse_plain(stream, cluster).await;
            return None;
        }
    }
    match within("client", tls.accept_client(stream)).await {
        Ok((s, role)) => {
            let (rd, wr) = strata_tls::split(s);
            Some((rd, wr, role))
        }
        Err(e) => {
            note_refused(counters.bad_client(), "client", remote, &e);
            None
        }
    }
}

/// Tells a plain client of a TLS node, in a plain frame (`Unauthenticated`, correlation
/// number 0), that it must use TLS; then closes.
async fn refuse_plain(mut stream: TcpStream, cluster: ClusterId) {
    let mut out = BytesMut::new();
    let body = Response::Error {
        code: ErrorCode::Unauthenticated,
        message: "unauthenticated: this node requires TLS; connect with the cluster's CA \
                  certificate and a client certificate"
            .into(),
    };
    encode_frame(&mut out, cluster, &ClientResponse { corr: 0, body });
    let _ = tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
        stream.write_all(&out).await?;
        stream.shutdown().await
    })
    .await;
    // Closing with the client's bytes unread would reset the connection and could destroy the
    // answer: read them away for a moment first.
    let mut scratch = [0u8; 4096];
    let _ = tokio::time::timeout(LINGER, async {
        while matches!(stream.read(&mut scratch).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// An accepted peer connection's halves and the node its certificate names (`None` without
/// TLS: nothing to check the `Hello` against), or `None` if it was refused (counted in
/// `bad_peer_frames`): no certificate of the CA, or one that names no node.
pub(crate) async fn accept_peer(
    security: &Security,
    stream: TcpStream,
    remote: SocketAddr,
    counters: &Counters,
) -> Option<(BoxRead, BoxWrite, Option<NodeId>)> {
    let Some(tls) = security else {
        let (rd, wr) = strata_tls::split_tcp(stream);
        return Some((rd, wr, None));
    };
    match within("peer", tls.accept_peer(stream)).await {
        Ok((s, Some(node))) => {
            let (rd, wr) = strata_tls::split(s);
            Some((rd, wr, Some(node)))
        }
        Ok((_, None)) => {
            let why = "its certificate names no node (a client's certificate on the peer port?)";
            note_refused(counters.bad_peer(), "peer", remote, &why);
            None
        }
        Err(e) => {
            note_refused(counters.bad_peer(), "peer", remote, &e);
            None
        }
    }
}

/// The halves of an outbound link to `peer`: with TLS, only if its certificate names `peer`.
pub(crate) async fn dial_peer(
    security: &Security,
    peer: NodeId,
    stream: TcpStream,
) -> io::Result<(BoxRead, BoxWrite)> {
    match security {
        None => Ok(strata_tls::split_tcp(stream)),
        Some(tls) => {
            let s = within("peer", tls.connect_peer(peer, stream)).await?;
            Ok(strata_tls::split(s))
        }
    }
}
