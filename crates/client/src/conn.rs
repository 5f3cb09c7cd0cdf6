//! One connection to one node (TCP, with TLS when `ClientOptions::tls` is set), shared by
//! every session opened on it.
//!
//! Requests are encoded straight into a shared output buffer and a writer task sends whatever
//! has accumulated with one write (opportunistic batching: it never waits to fill a batch).
//! A reader task matches responses to requests by their correlation number. Replies of one
//! session arrive in the order its requests were sent, because the node executes and answers
//! a connection's requests in order (`docs/design.md`, wire format).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::BytesMut;
use strata_tls::{BoxRead, BoxWrite};
use strata_wire::client::{ClientRequest, ClientResponse, ErrorCode, Request, Response, PUSH_CORR};
use strata_wire::{
    decode_frame, decode_message, encode_frame, ClusterId, FrameError, Limits, Rifl,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{broadcast, oneshot, Notify};
use tracing::{debug, warn};

use crate::client::ClientOptions;
use crate::error::ClientError;

/// An idle connection sends a `Ping` after this long (nodes close connections idle for
/// `idle_timeout_ms`, 60 s by default).
const KEEPALIVE_AFTER: Duration = Duration::from_secs(20);

pub(crate) type ReplySlot = oneshot::Receiver<Result<Response, ClientError>>;

/// A user's handle on a connection (held by the `Client` and by each `Session`). The reader
/// and writer tasks hold the `Conn` itself; when the last handle goes, the connection closes.
pub(crate) struct ConnHandle(Arc<Conn>);

impl std::ops::Deref for ConnHandle {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        &self.0
    }
}

impl Drop for ConnHandle {
    fn drop(&mut self) {
        self.0.close();
    }
}

pub(crate) struct Conn {
    pub addr: SocketAddr,
    pub cluster: ClusterId,
    state: Mutex<ConnState>,
    wake_writer: Notify,
    /// Where the node's pushes go (`Response::Push`): the client's subscribers, if any.
    pushes: Option<broadcast::Sender<Push>>,
}

/// A message a node sent on its own (`Response::Push`): `topic` says what it is
/// (`strata_wire::client::push_topic`), `node` is the connection's address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Push {
    pub node: SocketAddr,
    pub topic: u32,
    pub body: bytes::Bytes,
}

struct ConnState {
    /// Encoded frames not yet handed to the socket.
    out: BytesMut,
    pending: HashMap<u64, oneshot::Sender<Result<Response, ClientError>>>,
    next_corr: u64,
    /// Set once the connection is unusable; every later request fails at once with this.
    failed: Option<FailReason>,
    /// The owner asked to close: the writer flushes and shuts the socket.
    closing: bool,
}

#[derive(Clone, Debug)]
enum FailReason {
    Lost,
    /// The node said why it closed the connection (an error with correlation number 0).
    Closed(String),
    WrongCluster(String),
    /// The TLS session failed (the node refused this client's certificate, ...).
    Tls(String),
    /// The node refused the connection itself (e.g. a plain connection to a TLS node).
    Refused(ErrorCode, String),
}

impl FailReason {
    fn error(&self, conn: &Conn) -> ClientError {
        match self {
            FailReason::Lost => ClientError::ConnectionLost { node: conn.addr, reason: None },
            FailReason::Closed(why) => {
                ClientError::ConnectionLost { node: conn.addr, reason: Some(why.clone()) }
            }
            FailReason::WrongCluster(m) => {
                ClientError::WrongCluster { expected: conn.cluster, message: m.clone() }
            }
            FailReason::Tls(m) => ClientError::Tls { node: conn.addr, message: m.clone() },
            FailReason::Refused(code, m) => ClientError::from_code(*code, m.clone(), conn.cluster),
        }
    }
}

/// Why a connection could not be opened.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// Nothing answered (refused, timed out, unreachable).
    Io(std::io::Error),
    /// The TLS handshake failed: the node's certificate is not from the client's CA, or the
    /// node does not speak TLS.
    Tls(String),
}

impl OpenError {
    pub(crate) fn into_client_error(self, node: SocketAddr) -> ClientError {
        match self {
            OpenError::Io(e) => {
                ClientError::Unreachable { tried: node.to_string(), last: e.to_string() }
            }
            OpenError::Tls(message) => ClientError::Tls { node, message },
        }
    }
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Io(e) => e.fmt(f),
            OpenError::Tls(m) => write!(f, "TLS: {m}"),
        }
    }
}

/// TCP, then TLS if `opts` has it; the whole within `opts.connect_timeout`.
async fn dial(addr: SocketAddr, opts: &ClientOptions) -> Result<(BoxRead, BoxWrite), OpenError> {
    let timeout = opts.connect_timeout;
    let tcp = tokio::time::timeout(timeout, TcpStream::connect(addr))
        .await
        .map_err(|_| {
            OpenError::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {timeout:?}"),
            ))
        })?
        .map_err(OpenError::Io)?;
    tcp.set_nodelay(true).map_err(OpenError::Io)?;
    let Some(tls) = &opts.tls else { return Ok(strata_tls::split_tcp(tcp)) };
    match tokio::time::timeout(timeout, tls.connect(tcp)).await {
        Ok(Ok(stream)) => Ok(strata_tls::split(stream)),
        Ok(Err(e)) => Err(OpenError::Tls(strata_tls::tls_failure(&e).unwrap_or(e.to_string()))),
        Err(_) => Err(OpenError::Tls(format!(
            "no TLS handshake within {timeout:?} (does the node run without TLS?)"
        ))),
    }
}

impl Conn {
    /// Dials `addr` (with TLS if `opts.tls`) and starts the reader and writer tasks on the
    /// current tokio runtime.
    pub async fn open(
        addr: SocketAddr,
        opts: &ClientOptions,
    ) -> Result<Arc<ConnHandle>, OpenError> {
        Self::open_with_pushes(addr, opts, None).await
    }

    /// [`Conn::open`], handing the node's pushes to `pushes`.
    pub async fn open_with_pushes(
        addr: SocketAddr,
        opts: &ClientOptions,
        pushes: Option<broadcast::Sender<Push>>,
    ) -> Result<Arc<ConnHandle>, OpenError> {
        let (rd, wr) = dial(addr, opts).await?;
        let conn = Arc::new(Conn {
            addr,
            cluster: opts.cluster,
            state: Mutex::new(ConnState {
                out: BytesMut::with_capacity(16 << 10),
                pending: HashMap::new(),
                next_corr: 1,
                failed: None,
                closing: false,
            }),
            wake_writer: Notify::new(),
            pushes,
        });
        tokio::spawn(run_writer(conn.clone(), wr));
        tokio::spawn(run_reader(conn.clone(), rd));
        Ok(Arc::new(ConnHandle(conn)))
    }

    fn lock(&self) -> MutexGuard<'_, ConnState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn is_usable(&self) -> bool {
        let s = self.lock();
        s.failed.is_none() && !s.closing
    }

    /// Queues a request; the returned slot receives its response. Never blocks.
    pub fn send(&self, body: Request) -> Result<ReplySlot, ClientError> {
        self.send_with(None, body)
    }

    /// [`ConnHandle::send`] with RIFL's envelope (rifl.md §4.1) on the request.
    pub fn send_with(&self, rifl: Option<Rifl>, body: Request) -> Result<ReplySlot, ClientError> {
        let (tx, rx) = oneshot::channel();
        {
            let mut s = self.lock();
            if let Some(f) = &s.failed {
                return Err(f.error(self));
            }
            if s.closing {
                return Err(ClientError::ConnectionLost { node: self.addr, reason: None });
            }
            let corr = s.next_corr;
            s.next_corr += 1;
            encode_frame(&mut s.out, self.cluster, &ClientRequest { corr, rifl, body });
            s.pending.insert(corr, tx);
        }
        self.wake_writer.notify_one();
        Ok(rx)
    }

    /// Sends a request whose answer nobody waits for (closing a dropped session).
    pub fn send_and_forget(&self, body: Request) {
        let _ = self.send(body);
    }

    /// One request, one response.
    pub async fn call(
        &self,
        body: Request,
        timeout: Option<Duration>,
    ) -> Result<Response, ClientError> {
        self.call_with(None, body, timeout).await
    }

    /// [`ConnHandle::call`] with RIFL's envelope on the request.
    pub async fn call_with(
        &self,
        rifl: Option<Rifl>,
        body: Request,
        timeout: Option<Duration>,
    ) -> Result<Response, ClientError> {
        let slot = self.send_with(rifl, body)?;
        await_reply(slot, timeout, self.addr).await
    }

    /// Flushes what is queued and closes the connection.
    pub fn close(&self) {
        self.lock().closing = true;
        self.wake_writer.notify_one();
    }

    /// Marks the connection failed and fails every request in flight.
    fn fail(&self, reason: FailReason) {
        let pending = {
            let mut s = self.lock();
            if s.failed.is_none() {
                s.failed = Some(reason);
            }
            std::mem::take(&mut s.pending)
        };
        let reason = self.lock().failed.clone().expect("just set");
        for (_, tx) in pending {
            let _ = tx.send(Err(reason.error(self)));
        }
        self.wake_writer.notify_one();
    }

    fn complete(&self, resp: ClientResponse) {
        // The node refused the connection itself (a plain connection to a node that requires
        // TLS, a frame of another cluster): every request on it fails with that reason.
        if let (
            PUSH_CORR,
            Response::Error {
                code: code @ (ErrorCode::Unauthenticated | ErrorCode::WrongCluster),
                message,
            },
        ) = (resp.corr, &resp.body)
        {
            self.fail(FailReason::Refused(*code, message.clone()));
            return;
        }
        if let (PUSH_CORR, Response::Push { topic, body }) = (resp.corr, &resp.body) {
            debug!(node = %self.addr, topic, "push from the node");
            if let Some(p) = &self.pushes {
                // No subscriber is fine: a push is a hint, never an answer someone waits for.
                let _ = p.send(Push { node: self.addr, topic: *topic, body: body.clone() });
            }
            return;
        }
        if let (
            PUSH_CORR,
            Response::Error {
                code:
                    code @ (ErrorCode::TooManyConnections
                    | ErrorCode::ConnectionTimedOut
                    | ErrorCode::FrameTooLarge),
                message,
            },
        ) = (resp.corr, &resp.body)
        {
            // The node closes the connection after this (too many connections, idle, a
            // frame too slow): requests in flight fail with its reason.
            warn!(node = %self.addr, ?code, "the node is closing the connection: {message}");
            self.fail(FailReason::Closed(format!("{code:?}: {message}")));
            return;
        }
        let tx = self.lock().pending.remove(&resp.corr);
        match tx {
            Some(tx) => {
                let _ = tx.send(Ok(resp.body));
            }
            None => {
                debug!(node = %self.addr, corr = resp.corr, "reply to no outstanding request; ignored")
            }
        }
    }
}

/// Waits for a reply slot, mapping a dropped slot to a lost connection.
pub(crate) async fn await_reply(
    slot: ReplySlot,
    timeout: Option<Duration>,
    node: SocketAddr,
) -> Result<Response, ClientError> {
    let r = match timeout {
        Some(t) => tokio::time::timeout(t, slot).await.map_err(|_| ClientError::TimedOut(t))?,
        None => slot.await,
    };
    r.unwrap_or(Err(ClientError::ConnectionLost { node, reason: None }))
}

async fn run_writer(conn: Arc<Conn>, mut wr: BoxWrite) {
    let mut spare = BytesMut::with_capacity(16 << 10);
    loop {
        let (batch, stop) = {
            let mut s = conn.lock();
            std::mem::swap(&mut s.out, &mut spare);
            (!spare.is_empty(), s.failed.is_some() || s.closing)
        };
        if batch {
            // A TLS stream holds back what it encrypted until flushed.
            if let Err(e) = async { wr.write_all(&spare).await.and(wr.flush().await) }.await {
                debug!(node = %conn.addr, error = %e, "write failed");
                conn.fail(FailReason::Lost);
                return;
            }
            spare.clear();
            continue; // more may have been queued while writing
        }
        if stop {
            let _ = wr.shutdown().await;
            return;
        }
        // Keep-alive: a node closes a connection that stays idle for its idle timeout (60 s
        // by default), which would end this connection's sessions.
        if tokio::time::timeout(KEEPALIVE_AFTER, conn.wake_writer.notified()).await.is_err() {
            conn.send_and_forget(Request::Ping);
        }
    }
}

async fn run_reader(conn: Arc<Conn>, mut rd: BoxRead) {
    let mut buf = BytesMut::with_capacity(16 << 10);
    // Replies are never larger than what a node may send; the default frame limit bounds them.
    let max_frame = Limits::default().max_frame_bytes;
    loop {
        loop {
            match decode_frame(&mut buf, conn.cluster, max_frame) {
                Ok(None) => break,
                Ok(Some(payload)) => match decode_message::<ClientResponse>(payload) {
                    Ok(resp) => conn.complete(resp),
                    Err(e) => {
                        debug!(node = %conn.addr, error = %e, "undecodable reply; closing the connection");
                        conn.fail(FailReason::Lost);
                        return;
                    }
                },
                Err(FrameError::WrongCluster { got, .. }) => {
                    conn.fail(FailReason::WrongCluster(format!(
                        "{} answers for cluster {got}",
                        conn.addr
                    )));
                    return;
                }
                Err(e) => {
                    debug!(node = %conn.addr, error = %e, "bad reply frame; closing the connection");
                    conn.fail(FailReason::Lost);
                    return;
                }
            }
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 << 10);
        }
        match rd.read_buf(&mut buf).await {
            Ok(0) => {
                conn.fail(FailReason::Lost);
                return;
            }
            Err(e) => {
                // With TLS 1.3 a node refuses a client certificate after the client's side of
                // the handshake is done: the refusal arrives here, as an alert.
                conn.fail(strata_tls::tls_failure(&e).map_or(FailReason::Lost, FailReason::Tls));
                return;
            }
            Ok(_) => {}
        }
    }
}
