//! Helpers for the in-process node tests: start clusters on loopback port 0, and talk to nodes
//! over raw TCP with the wire codec (no client library, so the tests see exactly the bytes).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use strata_node::RunningNode;
use strata_wire::client::{
    ClientRequest, ClientResponse, ErrorCode, LinkFault, NodeStatus, Request, Response,
};
use strata_wire::{
    decode_frame, decode_message, encode_frame, Carstamp, ClusterId, Encode, NodeId, SessionId,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// A connection's byte stream: plain TCP or TLS.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

pub const CLUSTER: ClusterId = ClusterId(1);
/// Every wait in these tests is a poll against this deadline, never a fixed sleep.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// A payload written verbatim into a frame (for hand-made, possibly invalid messages).
pub struct Raw(pub Vec<u8>);

impl Encode for Raw {
    fn encode(&self, out: &mut BytesMut) {
        out.put_slice(&self.0);
    }
}

/// One frame holding `msg`, for `cluster`.
pub fn frame<M: Encode + ?Sized>(cluster: ClusterId, msg: &M) -> Vec<u8> {
    let mut b = BytesMut::new();
    encode_frame(&mut b, cluster, msg);
    b.to_vec()
}

#[allow(unused_imports)]
pub use strata_node::testing::{temp_dir, test_config as config};

/// Starts `n` nodes that know each other (`strata_node::testing::local_cluster`).
pub async fn cluster(n: u32) -> Vec<RunningNode> {
    strata_node::testing::local_cluster(n).await
}

/// Polls an (async) expression yielding `Option<T>` until it is `Some`, or panics at the
/// deadline. A macro, so the expression may borrow the test's connections.
#[allow(unused_macros)]
macro_rules! eventually {
    ($what:expr, $body:expr) => {{
        let start = std::time::Instant::now();
        loop {
            if let Some(v) = $body {
                break v;
            }
            assert!(start.elapsed() < $crate::common::DEADLINE, "timed out waiting for {}", $what);
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }};
}

/// A raw client connection.
pub struct Conn {
    pub stream: Box<dyn Stream>,
    buf: BytesMut,
    next_corr: u64,
    pub cluster: ClusterId,
}

impl Conn {
    pub async fn connect(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        Conn::from_stream(stream)
    }

    /// A connection the caller opened (from a chosen address, or with raw bytes sent).
    pub fn from_stream(stream: TcpStream) -> Conn {
        Conn { stream: Box::new(stream), buf: BytesMut::new(), next_corr: 1, cluster: CLUSTER }
    }

    /// A connection over TLS with `tls`'s credentials (a node's client port).
    pub async fn connect_tls(addr: SocketAddr, tls: &strata_tls::ClientTls) -> Conn {
        let stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let stream = tls.connect(stream).await.expect("TLS handshake with the node");
        Conn { stream: Box::new(stream), buf: BytesMut::new(), next_corr: 1, cluster: CLUSTER }
    }

    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
        self.stream.flush().await.unwrap();
    }

    pub async fn send(&mut self, req: &ClientRequest) {
        let f = frame(self.cluster, req);
        self.send_raw(&f).await;
    }

    /// The next response, or `None` if the node closed the connection.
    pub async fn recv(&mut self) -> Option<ClientResponse> {
        let read = async {
            loop {
                if let Some(payload) = decode_frame(&mut self.buf, self.cluster, 64 << 20)
                    .expect("node sent a bad frame")
                {
                    return Some(
                        decode_message::<ClientResponse>(payload)
                            .expect("node sent an undecodable response"),
                    );
                }
                match self.stream.read_buf(&mut self.buf).await {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                }
            }
        };
        tokio::time::timeout(DEADLINE, read).await.expect("timed out waiting for a response")
    }

    /// Whether the node closed the connection (EOF or reset) with nothing more to say.
    pub async fn closed_by_node(&mut self) -> bool {
        self.recv().await.is_none()
    }

    pub async fn call(&mut self, body: Request) -> Response {
        let corr = self.next_corr;
        self.next_corr += 1;
        self.send(&ClientRequest::new(corr, body)).await;
        let resp = self.recv().await.expect("connection closed while waiting for a response");
        assert_eq!(resp.corr, corr, "responses come back in order on one connection");
        resp.body
    }

    pub async fn status(&mut self) -> NodeStatus {
        match self.call(Request::Status).await {
            Response::Status(s) => s,
            other => panic!("expected a status, got {other:?}"),
        }
    }

    pub async fn set_fault(&mut self, peer: Option<u32>, fault: LinkFault) {
        let r = self.call(Request::SetFault { peer: peer.map(NodeId), fault }).await;
        assert_eq!(r, Response::FaultSet);
    }
}

/// A connection with an open session.
pub struct Session {
    pub conn: Conn,
    pub id: SessionId,
}

impl Session {
    pub async fn open(addr: SocketAddr) -> Session {
        Session::open_on(Conn::connect(addr).await).await
    }

    /// A session on `conn` (e.g. a TLS connection).
    pub async fn open_on(mut conn: Conn) -> Session {
        match conn.call(Request::OpenSession).await {
            Response::SessionOpened { session } => Session { conn, id: session },
            other => panic!("expected a session, got {other:?}"),
        }
    }

    pub async fn put(&mut self, key: &str, value: &[u8]) -> Carstamp {
        let req = Request::Put {
            session: self.id,
            key: Bytes::copy_from_slice(key.as_bytes()),
            value: Bytes::copy_from_slice(value),
        };
        match self.conn.call(req).await {
            Response::Written { cs } => cs,
            other => panic!("put failed: {other:?}"),
        }
    }

    pub async fn get(&mut self, key: &str) -> Option<Bytes> {
        let req = Request::Get { session: self.id, key: Bytes::copy_from_slice(key.as_bytes()) };
        match self.conn.call(req).await {
            Response::Value { value, .. } => value,
            other => panic!("get failed: {other:?}"),
        }
    }

    /// Polls until `key` reads `value` here.
    pub async fn await_value(&mut self, key: &str, value: &[u8]) {
        let start = Instant::now();
        loop {
            if self.get(key).await.as_deref() == Some(value) {
                return;
            }
            assert!(start.elapsed() < DEADLINE, "{key} never became {value:?} at {}", self.id.node);
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// Asserts `resp` is an error with `code` and returns its message.
pub fn expect_error(resp: &ClientResponse, code: ErrorCode) -> String {
    match &resp.body {
        Response::Error { code: c, message } => {
            assert_eq!(*c, code, "wrong error code (message: {message})");
            message.clone()
        }
        other => panic!("expected error {code:?}, got {other:?}"),
    }
}
