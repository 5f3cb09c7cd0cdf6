//! A small RESP2 client for the Redis target: `GET`, `SET`, `DEL`, pipelined.
//!
//! Written by hand on purpose: a full Redis client crate would bring its own connection
//! handling, buffering and pipelining policy, and the comparison would then measure two load
//! generators instead of two servers. This one mirrors `strata-client`'s connection exactly —
//! one TCP connection per client (TLS with `--tls-ca`), shared by its sessions; requests are
//! encoded into one output buffer that a writer task flushes with one `write` (opportunistic
//! batching, `TCP_NODELAY`); a reader task completes requests in order — so both targets face
//! the same harness.
//!
//! RESP2 answers a connection's commands in order, so a FIFO of waiters replaces the
//! correlation numbers Strata's protocol carries. The waiter is queued under the same lock
//! that appends the command's bytes, which keeps the two orders identical.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use strata_tls::{BoxRead, BoxWrite};
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Notify};

use crate::peer_tls::{PeerTls, PEER_SERVER_NAME};

/// Largest bulk string or array this client accepts (Redis' own `proto-max-bulk-len` default
/// is 512 MiB); a larger length header means the stream is garbage.
pub const MAX_BULK_BYTES: usize = 512 << 20;
/// Largest array length accepted, for the same reason.
pub const MAX_ARRAY_LEN: usize = 1 << 24;
/// Deepest nesting of arrays accepted (a reply to GET/SET/DEL has none).
pub const MAX_DEPTH: usize = 8;

/// One RESP2 reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`
    Simple(Bytes),
    /// `-ERR ...`: the server refused the command.
    Error(Bytes),
    /// `:1`
    Integer(i64),
    /// `$3\r\nfoo`, or `$-1` (nil) as `None`.
    Bulk(Option<Bytes>),
    /// `*2\r\n...`, or `*-1` (nil) as `None`.
    Array(Option<Vec<Reply>>),
}

/// The byte stream is not RESP2: the connection cannot be used any more.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RespError {
    /// The first byte of a reply is not one of `+ - : $ *`.
    #[error("unknown reply type byte {0:#04x}")]
    BadType(u8),
    /// A length or integer field is not a decimal number.
    #[error("bad number {0:?}")]
    BadNumber(String),
    /// A bulk string or array length is negative (other than -1) or above the limit.
    #[error("bad length {0}")]
    BadLength(i64),
    /// A line or bulk string is not terminated by CRLF.
    #[error("missing CRLF terminator")]
    MissingCrlf,
    /// Arrays nested deeper than [`MAX_DEPTH`].
    #[error("arrays nested too deeply")]
    TooDeep,
}

/// Parses one reply at the start of `buf`. `Ok(None)`: the reply is not complete yet (read
/// more and call again with the longer buffer); `Ok(Some((reply, n)))`: the reply took `n`
/// bytes. Never panics, whatever `buf` holds.
pub fn parse(buf: &[u8]) -> Result<Option<(Reply, usize)>, RespError> {
    parse_at(buf, 0, 0)
}

fn parse_at(buf: &[u8], pos: usize, depth: usize) -> Result<Option<(Reply, usize)>, RespError> {
    let Some(&tag) = buf.get(pos) else { return Ok(None) };
    if !matches!(tag, b'+' | b'-' | b':' | b'$' | b'*') {
        return Err(RespError::BadType(tag));
    }
    let Some((line, after)) = line_at(buf, pos + 1)? else { return Ok(None) };
    match tag {
        b'+' => Ok(Some((Reply::Simple(Bytes::copy_from_slice(line)), after))),
        b'-' => Ok(Some((Reply::Error(Bytes::copy_from_slice(line)), after))),
        b':' => Ok(Some((Reply::Integer(number(line)?), after))),
        b'$' => {
            let len = number(line)?;
            if len == -1 {
                return Ok(Some((Reply::Bulk(None), after)));
            }
            if len < 0 || len as u64 > MAX_BULK_BYTES as u64 {
                return Err(RespError::BadLength(len));
            }
            let len = len as usize;
            let end = after + len;
            if buf.len() < end + 2 {
                // Not all there yet; but a wrong byte where the CRLF must be is already fatal.
                if buf.len() > end && buf[end] != b'\r'
                    || buf.len() > end + 1 && buf[end + 1] != b'\n'
                {
                    return Err(RespError::MissingCrlf);
                }
                return Ok(None);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err(RespError::MissingCrlf);
            }
            Ok(Some((Reply::Bulk(Some(Bytes::copy_from_slice(&buf[after..end]))), end + 2)))
        }
        _ => {
            let len = number(line)?;
            if len == -1 {
                return Ok(Some((Reply::Array(None), after)));
            }
            if len < 0 || len as u64 > MAX_ARRAY_LEN as u64 {
                return Err(RespError::BadLength(len));
            }
            if depth + 1 > MAX_DEPTH {
                return Err(RespError::TooDeep);
            }
            // Do not trust the header for the allocation: every element takes >= 3 bytes.
            let mut items =
                Vec::with_capacity((len as usize).min(buf.len().saturating_sub(after) / 3 + 1));
            let mut at = after;
            for _ in 0..len {
                match parse_at(buf, at, depth + 1)? {
                    Some((item, next)) => {
                        items.push(item);
                        at = next;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Reply::Array(Some(items)), at)))
        }
    }
}

/// The line starting at `pos` without its CRLF, and the position after the CRLF.
fn line_at(buf: &[u8], pos: usize) -> Result<Option<(&[u8], usize)>, RespError> {
    let rest = buf.get(pos..).unwrap_or(&[]);
    match rest.iter().position(|&b| b == b'\r' || b == b'\n') {
        None => Ok(None),
        Some(i) if rest[i] == b'\n' => Err(RespError::MissingCrlf),
        Some(i) => match rest.get(i + 1) {
            None => Ok(None),
            Some(b'\n') => Ok(Some((&rest[..i], pos + i + 2))),
            Some(_) => Err(RespError::MissingCrlf),
        },
    }
}

fn number(line: &[u8]) -> Result<i64, RespError> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| RespError::BadNumber(String::from_utf8_lossy(line).into_owned()))
}

/// Appends a command as a RESP array of bulk strings.
pub fn encode_command(out: &mut BytesMut, args: &[&[u8]]) {
    use std::fmt::Write;
    let _ = write!(out, "*{}\r\n", args.len());
    for a in args {
        let _ = write!(out, "${}\r\n", a.len());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// Why a Redis command failed.
#[derive(Clone, Debug, Error)]
pub enum RedisError {
    /// The connection broke (or sent bytes that are not RESP2); the outcome of commands in
    /// flight is unknown. Reconnect.
    #[error("connection to redis at {addr} lost: {why}")]
    ConnectionLost { addr: SocketAddr, why: String },
    /// The server answered `-ERR ...`.
    #[error("redis error: {0}")]
    Server(String),
    /// The server answered with a reply type the command never returns.
    #[error("unexpected redis reply: {0}")]
    Unexpected(String),
}

type Slot = oneshot::Receiver<Result<Reply, RedisError>>;

/// One TCP connection to a Redis server, shared by the sessions opened on it.
pub struct RedisConn {
    addr: SocketAddr,
    state: Mutex<ConnState>,
    wake_writer: Notify,
}

struct ConnState {
    out: BytesMut,
    waiters: VecDeque<oneshot::Sender<Result<Reply, RedisError>>>,
    failed: Option<String>,
    closing: bool,
}

impl RedisConn {
    /// Dials `addr` (within `timeout`; with `tls`, the handshake too) and starts its reader
    /// and writer tasks.
    pub async fn connect(
        addr: SocketAddr,
        timeout: Duration,
        tls: Option<&PeerTls>,
    ) -> std::io::Result<Arc<RedisConn>> {
        let dial = async {
            let stream = TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            match tls {
                None => Ok(strata_tls::split_tcp(stream)),
                Some(t) => {
                    let stream = t.client.connect_to(PEER_SERVER_NAME, stream).await?;
                    Ok::<_, std::io::Error>(strata_tls::split(stream))
                }
            }
        };
        let (rd, wr) = tokio::time::timeout(timeout, dial).await.map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {timeout:?}"),
            )
        })??;
        let conn = Arc::new(RedisConn {
            addr,
            state: Mutex::new(ConnState {
                out: BytesMut::with_capacity(16 << 10),
                waiters: VecDeque::new(),
                failed: None,
                closing: false,
            }),
            wake_writer: Notify::new(),
        });
        tokio::spawn(run_writer(conn.clone(), wr));
        tokio::spawn(run_reader(conn.clone(), rd));
        Ok(conn)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn lock(&self) -> MutexGuard<'_, ConnState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a command; never blocks. The slot receives its reply.
    pub fn send(&self, args: &[&[u8]]) -> Result<Slot, RedisError> {
        let (tx, rx) = oneshot::channel();
        {
            let mut s = self.lock();
            if let Some(why) = &s.failed {
                return Err(RedisError::ConnectionLost { addr: self.addr, why: why.clone() });
            }
            if s.closing {
                return Err(RedisError::ConnectionLost { addr: self.addr, why: "closed".into() });
            }
            encode_command(&mut s.out, args);
            s.waiters.push_back(tx);
        }
        self.wake_writer.notify_one();
        Ok(rx)
    }

    /// Flushes what is queued and closes the connection.
    pub fn close(&self) {
        self.lock().closing = true;
        self.wake_writer.notify_one();
    }

    fn fail(&self, why: String) {
        let waiters = {
            let mut s = self.lock();
            if s.failed.is_none() {
                s.failed = Some(why);
            }
            std::mem::take(&mut s.waiters)
        };
        let why = self.lock().failed.clone().unwrap_or_default();
        for tx in waiters {
            let _ = tx.send(Err(RedisError::ConnectionLost { addr: self.addr, why: why.clone() }));
        }
        self.wake_writer.notify_one();
    }
}

async fn run_writer(conn: Arc<RedisConn>, mut wr: BoxWrite) {
    let mut spare = BytesMut::with_capacity(16 << 10);
    loop {
        let (batch, stop) = {
            let mut s = conn.lock();
            std::mem::swap(&mut s.out, &mut spare);
            (!spare.is_empty(), s.failed.is_some() || s.closing)
        };
        if batch {
            if let Err(e) = wr.write_all(&spare).await {
                conn.fail(format!("write failed: {e}"));
                return;
            }
            spare.clear();
            continue;
        }
        if stop {
            let _ = wr.shutdown().await;
            return;
        }
        conn.wake_writer.notified().await;
    }
}

async fn run_reader(conn: Arc<RedisConn>, mut rd: BoxRead) {
    let mut buf = BytesMut::with_capacity(16 << 10);
    loop {
        loop {
            match parse(&buf) {
                Ok(None) => break,
                Ok(Some((reply, n))) => {
                    buf.advance(n);
                    let tx = conn.lock().waiters.pop_front();
                    match tx {
                        Some(tx) => {
                            let _ = tx.send(Ok(reply));
                        }
                        None => {
                            conn.fail("a reply to no outstanding command".into());
                            return;
                        }
                    }
                }
                Err(e) => {
                    conn.fail(format!("not RESP2: {e}"));
                    return;
                }
            }
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 << 10);
        }
        match rd.read_buf(&mut buf).await {
            Ok(0) => {
                conn.fail("closed by the server".into());
                return;
            }
            Err(e) => {
                conn.fail(format!("read failed: {e}"));
                return;
            }
            Ok(_) => {}
        }
    }
}

/// Waits for a command's reply.
pub async fn await_reply(slot: Slot, addr: SocketAddr) -> Result<Reply, RedisError> {
    match slot.await {
        Ok(Ok(Reply::Error(e))) => {
            Err(RedisError::Server(String::from_utf8_lossy(&e).into_owned()))
        }
        Ok(r) => r,
        Err(_) => Err(RedisError::ConnectionLost { addr, why: "connection task stopped".into() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn parses_each_reply_type() {
        assert_eq!(parse(b"+OK\r\n").unwrap(), Some((Reply::Simple(b("OK")), 5)));
        assert_eq!(parse(b"-ERR no\r\n").unwrap(), Some((Reply::Error(b("ERR no")), 9)));
        assert_eq!(parse(b":-42\r\n").unwrap(), Some((Reply::Integer(-42), 6)));
        assert_eq!(parse(b"$3\r\nfoo\r\n").unwrap(), Some((Reply::Bulk(Some(b("foo"))), 9)));
        assert_eq!(parse(b"$-1\r\n").unwrap(), Some((Reply::Bulk(None), 5)));
        assert_eq!(parse(b"$0\r\n\r\n").unwrap(), Some((Reply::Bulk(Some(Bytes::new())), 6)));
        assert_eq!(parse(b"*-1\r\n").unwrap(), Some((Reply::Array(None), 5)));
        assert_eq!(parse(b"*0\r\n").unwrap(), Some((Reply::Array(Some(vec![])), 4)));
        assert_eq!(
            parse(b"*2\r\n:1\r\n*1\r\n$1\r\nx\r\n").unwrap(),
            Some((
                Reply::Array(Some(vec![
                    Reply::Integer(1),
                    Reply::Array(Some(vec![Reply::Bulk(Some(b("x")))]))
                ])),
                19
            ))
        );
    }

    #[test]
    fn binary_bulk_payloads_may_hold_crlf() {
        let wire = b"$4\r\n\r\n\r\n\r\n";
        assert_eq!(
            parse(wire).unwrap(),
            Some((Reply::Bulk(Some(Bytes::from_static(b"\r\n\r\n"))), 10))
        );
    }

    #[test]
    fn every_prefix_of_a_valid_stream_is_incomplete_not_an_error() {
        let wire: &[u8] = b"*3\r\n$5\r\nhello\r\n:7\r\n$-1\r\n";
        for cut in 0..wire.len() {
            assert_eq!(parse(&wire[..cut]).unwrap(), None, "prefix of {cut} bytes");
        }
        assert_eq!(parse(wire).unwrap().unwrap().1, wire.len());
        // CR of a line terminator at the very end of the buffer: wait for the LF.
        assert_eq!(parse(b"+OK\r").unwrap(), None);
        assert_eq!(parse(b"$3\r\nfoo\r").unwrap(), None);
    }

    #[test]
    fn several_replies_in_one_buffer_are_consumed_one_at_a_time() {
        let mut buf = BytesMut::from(&b"+OK\r\n$2\r\nhi\r\n:0\r\n+O"[..]);
        let mut got = Vec::new();
        while let Some((r, n)) = parse(&buf).unwrap() {
            got.push(r);
            buf.advance(n);
        }
        assert_eq!(
            got,
            vec![Reply::Simple(b("OK")), Reply::Bulk(Some(b("hi"))), Reply::Integer(0)]
        );
        assert_eq!(&buf[..], b"+O", "the partial reply stays in the buffer");
    }

    #[test]
    fn garbage_is_an_error_never_a_panic() {
        assert_eq!(parse(b"?x\r\n"), Err(RespError::BadType(b'?')));
        assert_eq!(parse(b":12a\r\n"), Err(RespError::BadNumber("12a".into())));
        assert_eq!(parse(b":\r\n"), Err(RespError::BadNumber("".into())));
        assert_eq!(parse(b"$-2\r\n"), Err(RespError::BadLength(-2)));
        assert_eq!(parse(b"$99999999999\r\n"), Err(RespError::BadLength(99_999_999_999)));
        assert_eq!(parse(b"*-5\r\n"), Err(RespError::BadLength(-5)));
        assert_eq!(parse(b"$3\r\nfooXY"), Err(RespError::MissingCrlf));
        assert_eq!(parse(b"$3\r\nfoo\rX"), Err(RespError::MissingCrlf));
        assert_eq!(
            parse(b"$3\r\nfooX"),
            Err(RespError::MissingCrlf),
            "a wrong byte is fatal before the rest arrives"
        );
        assert_eq!(parse(b"+OK\n"), Err(RespError::MissingCrlf), "bare LF");
        assert_eq!(parse(b"+OK\rX\r\n"), Err(RespError::MissingCrlf), "bare CR");
        assert_eq!(parse(b"*9223372036854775807\r\n"), Err(RespError::BadLength(i64::MAX)));
        let deep = "*1\r\n".repeat(MAX_DEPTH + 1) + ":1\r\n";
        assert_eq!(parse(deep.as_bytes()), Err(RespError::TooDeep));
        // A huge array header with few bytes behind it must not allocate the header's size.
        assert_eq!(parse(b"*16000000\r\n:1\r\n").unwrap(), None);
        // Every byte value as a type byte and as a one-byte tail: no panic.
        for x in 0..=255u8 {
            let _ = parse(&[x]);
            let _ = parse(&[b'$', b'1', b'\r', b'\n', x, b'\r']);
            let _ = parse(&[b'*', b'1', b'\r', b'\n', x]);
        }
    }

    #[test]
    fn commands_encode_as_arrays_of_bulk_strings() {
        let mut out = BytesMut::new();
        encode_command(&mut out, &[b"SET", b"k1", b""]);
        encode_command(&mut out, &[b"GET", b"k1"]);
        assert_eq!(
            &out[..],
            &b"*3\r\n$3\r\nSET\r\n$2\r\nk1\r\n$0\r\n\r\n*2\r\n$3\r\nGET\r\n$2\r\nk1\r\n"[..]
        );
    }

    /// A fake server that answers a pipeline of commands with replies split into tiny
    /// writes: the connection's reader must reassemble them and complete in order.
    #[tokio::test]
    async fn a_pipelined_connection_completes_commands_in_order() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            let expect = b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n".len() * 3;
            while got.len() < expect {
                let n = s.read(&mut buf).await.unwrap();
                assert!(n > 0);
                got.extend_from_slice(&buf[..n]);
            }
            for byte in b"$1\r\nx\r\n$-1\r\n-ERR nope\r\n" {
                s.write_all(&[*byte]).await.unwrap();
                s.flush().await.unwrap();
            }
            // Then close: further commands fail as a lost connection.
        });
        let conn = RedisConn::connect(addr, Duration::from_secs(2), None).await.unwrap();
        let slots: Vec<_> = (0..3).map(|_| conn.send(&[b"GET", b"a"]).unwrap()).collect();
        let mut replies = Vec::new();
        for s in slots {
            replies.push(await_reply(s, addr).await);
        }
        assert_eq!(replies[0].as_ref().unwrap(), &Reply::Bulk(Some(b("x"))));
        assert_eq!(replies[1].as_ref().unwrap(), &Reply::Bulk(None));
        assert!(matches!(&replies[2], Err(RedisError::Server(m)) if m == "ERR nope"));
        server.await.unwrap();
        let late = conn.send(&[b"GET", b"a"]);
        let r = match late {
            Ok(slot) => await_reply(slot, addr).await,
            Err(e) => Err(e),
        };
        assert!(matches!(r, Err(RedisError::ConnectionLost { .. })), "{r:?}");
    }

    /// A CA and two server certificates from it, one naming `localhost` (what the peers'
    /// certificates name) and one naming another host, and a client certificate; PEM files in
    /// a temporary directory.
    struct PeerCerts {
        dir: tempfile::TempDir,
        ca: rcgen::Certificate,
        server: (rcgen::Certificate, rcgen::KeyPair),
        wrong_name: (rcgen::Certificate, rcgen::KeyPair),
    }

    impl PeerCerts {
        fn new() -> PeerCerts {
            use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
            let ca_key = KeyPair::generate().unwrap();
            let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
            ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            let ca = ca_params.self_signed(&ca_key).unwrap();
            let issuer = Issuer::new(ca_params, ca_key);
            let leaf = |name: &str| {
                let key = KeyPair::generate().unwrap();
                let cert = CertificateParams::new(vec![name.to_string()])
                    .unwrap()
                    .signed_by(&key, &issuer)
                    .unwrap();
                (cert, key)
            };
            let (server, wrong_name, client) =
                (leaf(PEER_SERVER_NAME), leaf("elsewhere.example"), leaf("client"));
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
            std::fs::write(dir.path().join("client.pem"), client.0.pem()).unwrap();
            std::fs::write(dir.path().join("client.key"), client.1.serialize_pem()).unwrap();
            PeerCerts { dir, ca, server, wrong_name }
        }

        fn client_tls(&self) -> PeerTls {
            let p = |f: &str| self.dir.path().join(f);
            PeerTls::load(&p("ca.pem"), Some((&p("client.pem"), &p("client.key")))).unwrap()
        }

        /// A one-connection TLS server presenting `cert` and requiring a client certificate of
        /// the CA: answers one `GET` with `$1 x`; returns whether the handshake succeeded.
        async fn serve_once(
            &self,
            (cert, key): &(rcgen::Certificate, rcgen::KeyPair),
        ) -> (SocketAddr, tokio::task::JoinHandle<bool>) {
            use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut roots = rustls::RootCertStore::empty();
            roots.add(CertificateDer::from(self.ca.der().to_vec())).unwrap();
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider.clone(),
            )
            .build()
            .unwrap();
            let config = rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_client_cert_verifier(verifier)
                .with_single_cert(
                    vec![CertificateDer::from(cert.der().to_vec())],
                    PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
                )
                .unwrap();
            let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let server = tokio::spawn(async move {
                let (tcp, _) = listener.accept().await.unwrap();
                let Ok(mut s) = acceptor.accept(tcp).await else { return false };
                let mut buf = [0u8; 64];
                let want = b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n".len();
                let mut got = 0;
                while got < want {
                    match s.read(&mut buf[got..]).await {
                        Ok(0) | Err(_) => return true,
                        Ok(n) => got += n,
                    }
                }
                s.write_all(b"$1\r\nx\r\n").await.unwrap();
                s.flush().await.unwrap();
                true
            });
            (addr, server)
        }
    }

    /// `--tls-ca` for Redis: the connection is TLS, presents the client certificate (the
    /// server requires one) and checks that the server's certificate names `localhost`.
    #[tokio::test]
    async fn a_tls_connection_presents_its_certificate_and_checks_the_servers_name() {
        let certs = PeerCerts::new();
        let tls = certs.client_tls();
        let (addr, server) = certs.serve_once(&certs.server).await;
        let conn = RedisConn::connect(addr, Duration::from_secs(2), Some(&tls)).await.unwrap();
        let reply = await_reply(conn.send(&[b"GET", b"a"]).unwrap(), addr).await;
        assert_eq!(reply.unwrap(), Reply::Bulk(Some(b("x"))));
        assert!(server.await.unwrap(), "the server saw a TLS handshake with a client certificate");

        // The canary: the same CA, but a certificate for another name, is refused.
        let (addr, _server) = certs.serve_once(&certs.wrong_name).await;
        let refused = RedisConn::connect(addr, Duration::from_secs(2), Some(&tls)).await;
        let why = refused.err().expect("a server certificate for another name is refused");
        assert!(why.to_string().contains("certificate"), "{why}");

        // And a plain-TCP client cannot talk to it.
        let (addr, server) = certs.serve_once(&certs.server).await;
        let plain = RedisConn::connect(addr, Duration::from_secs(2), None).await.unwrap();
        let reply = await_reply(plain.send(&[b"GET", b"a"]).unwrap(), addr).await;
        assert!(reply.is_err(), "{reply:?}");
        assert!(!server.await.unwrap(), "no TLS handshake from a plain client");
    }
}
