//! The etcd target: the reference for linearizable operations (Kite issue #3, item 7).
//!
//! etcd's only consistency is linearizable, so the comparison maps Strata's synchronising
//! operations onto etcd's ordinary ones, each through the official v3 gRPC API (the
//! `etcd-client` crate) so that etcd is measured through the client its users run:
//!
//! | bench op | Strata | etcd |
//! |---|---|---|
//! | read, acquire | relaxed get / acquire (ABD) | `Range`, linearizable (etcd's default) |
//! | write, insert, release | relaxed put / release (ABD) | `Put` |
//! | CAS | strong CAS (per-key Paxos) | `Txn { if value(key) == v then Put(key, v) }` |
//! | FAA | per-key Paxos | refused: etcd has no fetch-and-add |
//! | `--workload txn` | a transaction (RIFL 2PC) | `Range` each key, then `Txn { if mod_revision(k) == r for every k then Put every k }` |
//!
//! etcd has no sessions; as with Redis, a bench session keeps its own FIFO of outstanding
//! requests, here each a task on the shared HTTP/2 channel, and yields completions in
//! submission order. The gRPC stack needs `protoc` to build, so it sits behind the `etcd`
//! cargo feature (off by default: `cargo test --workspace` stays free of it); without the
//! feature, connecting fails with the command that builds it. With `--tls-ca` the channel is
//! HTTPS (gRPC's own rustls, `crate::peer_tls`), presenting `--tls-cert` when given.

use std::net::SocketAddr;

/// etcd's usual client address, used when `--target etcd` is given no `--endpoints`.
pub const DEFAULT_ETCD_ENDPOINT: &str = "127.0.0.1:2379";

/// What a build without the `etcd` feature answers.
pub const NOT_BUILT: &str = "this strata was built without the etcd target: rebuild with \
     `cargo build --release -p strata --features etcd` (needs protoc: `apt-get install protobuf-compiler`)";

#[cfg(feature = "etcd")]
pub use with_grpc::{EtcdConn, EtcdSession};

#[cfg(not(feature = "etcd"))]
pub use without_grpc::{EtcdConn, EtcdSession};

#[cfg(feature = "etcd")]
mod with_grpc {
    use std::collections::VecDeque;
    use std::net::SocketAddr;

    use bytes::Bytes;
    use etcd_client::{
        Certificate, Client, Compare, CompareOp, ConnectOptions, Identity, TlsOptions, Txn, TxnOp,
        TxnOpResponse,
    };
    use tokio::task::JoinHandle;

    use crate::peer_tls::{PeerTls, PEER_SERVER_NAME};
    use crate::target::{BenchOp, Done, CONNECT_TIMEOUT};

    /// One gRPC channel to one etcd member (boxed: the client is large, and enums of
    /// connections hold it beside small ones).
    pub struct EtcdConn {
        client: Box<Client>,
    }

    impl EtcdConn {
        pub async fn connect(addr: SocketAddr, tls: Option<&PeerTls>) -> Result<EtcdConn, String> {
            let mut opts = ConnectOptions::new().with_connect_timeout(CONNECT_TIMEOUT);
            let scheme = match tls {
                None => "http",
                Some(t) => {
                    opts = opts.with_tls(tls_options(t));
                    "https"
                }
            };
            Client::connect([format!("{scheme}://{addr}")], Some(opts))
                .await
                .map(|client| EtcdConn { client: Box::new(client) })
                .map_err(|e| format!("cannot connect to etcd at {addr}: {e}"))
        }

        pub fn open_session(&self) -> EtcdSession {
            EtcdSession { client: self.client.clone(), in_flight: VecDeque::new() }
        }
    }

    /// gRPC's TLS settings from the run's PEM (the gRPC stack builds its own rustls client).
    fn tls_options(t: &PeerTls) -> TlsOptions {
        let o = TlsOptions::new()
            .ca_certificate(Certificate::from_pem(&t.ca_pem))
            .domain_name(PEER_SERVER_NAME);
        match &t.identity_pem {
            Some((cert, key)) => o.identity(Identity::from_pem(cert, key)),
            None => o,
        }
    }

    impl EtcdConn {
        /// A linearizable read of `key`: its value and `mod_revision` (0: absent).
        pub async fn read_versioned(&self, key: &[u8]) -> Result<(Option<Vec<u8>>, i64), String> {
            let r = self.client.kv_client().get(key, None).await.map_err(|e| e.to_string())?;
            Ok(match r.kvs().first() {
                Some(kv) => (Some(kv.value().to_vec()), kv.mod_revision()),
                None => (None, 0),
            })
        }

        /// [`read_versioned`](Self::read_versioned) of every key in one `Txn` of `Range`s
        /// (one round trip, linearizable as a `Range`).
        pub async fn read_many_versioned(
            &self,
            keys: &[Bytes],
        ) -> Result<Vec<(Option<Vec<u8>>, i64)>, String> {
            let gets = keys.iter().map(|k| TxnOp::get(&k[..], None)).collect::<Vec<_>>();
            let r = self.client.kv_client().txn(Txn::new().and_then(gets)).await;
            let r = r.map_err(|e| e.to_string())?;
            r.op_responses()
                .into_iter()
                .map(|op| match op {
                    TxnOpResponse::Get(g) => Ok(match g.kvs().first() {
                        Some(kv) => (Some(kv.value().to_vec()), kv.mod_revision()),
                        None => (None, 0),
                    }),
                    _ => Err("a Txn of Ranges answered something else".to_string()),
                })
                .collect()
        }

        /// etcd's multi-key compare-and-put: every write if every key's `mod_revision` is
        /// still the one read (0: still absent); whether it ran.
        pub async fn put_if_unchanged(
            &self,
            read: &[(&[u8], i64)],
            writes: &[(&[u8], Vec<u8>)],
        ) -> Result<bool, String> {
            let txn = Txn::new()
                .when(
                    read.iter()
                        .map(|(k, rev)| Compare::mod_revision(*k, CompareOp::Equal, *rev))
                        .collect::<Vec<_>>(),
                )
                .and_then(
                    writes.iter().map(|(k, v)| TxnOp::put(*k, v.clone(), None)).collect::<Vec<_>>(),
                );
            let r = self.client.kv_client().txn(txn).await.map_err(|e| e.to_string())?;
            Ok(r.succeeded())
        }

        /// `key` set to `value` (the transaction workload's preload).
        pub async fn put(&self, key: &[u8], value: &[u8]) -> Result<(), String> {
            self.client.kv_client().put(key, value, None).await.map_err(|e| e.to_string())?;
            Ok(())
        }
    }

    /// A closed-loop session: its outstanding requests, oldest first.
    pub struct EtcdSession {
        client: Box<Client>,
        in_flight: VecDeque<JoinHandle<Result<Done, String>>>,
    }

    impl EtcdSession {
        pub fn submit(&mut self, op: BenchOp) -> Result<(), String> {
            let mut kv = self.client.kv_client();
            let task = match op {
                BenchOp::Read { key } | BenchOp::Acquire { key } => tokio::spawn(async move {
                    let r = kv.get(key.to_vec(), None).await.map_err(|e| e.to_string())?;
                    Ok(if r.kvs().is_empty() { Done::Miss } else { Done::Hit })
                }),
                BenchOp::Write { key, value }
                | BenchOp::Insert { key, value }
                | BenchOp::Release { key, value } => tokio::spawn(async move {
                    kv.put(key.to_vec(), value.to_vec(), None).await.map_err(|e| e.to_string())?;
                    Ok(Done::Written)
                }),
                BenchOp::Cas { key, value } => tokio::spawn(async move {
                    let txn = Txn::new()
                        .when([Compare::value(key.to_vec(), CompareOp::Equal, value.to_vec())])
                        .and_then([TxnOp::put(key.to_vec(), value.to_vec(), None)]);
                    kv.txn(txn).await.map_err(|e| e.to_string())?;
                    Ok(Done::Rmw)
                }),
                BenchOp::Faa { .. } => {
                    return Err("etcd has no fetch-and-add: use --rmw cas".to_string())
                }
            };
            self.in_flight.push_back(task);
            Ok(())
        }

        pub async fn next(&mut self) -> Option<Result<Done, String>> {
            let task = self.in_flight.pop_front()?;
            Some(task.await.unwrap_or_else(|e| Err(format!("etcd request task failed: {e}"))))
        }
    }
}

#[cfg(not(feature = "etcd"))]
mod without_grpc {
    use std::net::SocketAddr;

    use bytes::Bytes;

    use crate::peer_tls::PeerTls;
    use crate::target::{BenchOp, Done};

    /// Never constructed: without the `etcd` feature, [`EtcdConn::connect`] always fails.
    pub enum EtcdConn {}

    /// Never constructed.
    pub enum EtcdSession {}

    impl EtcdConn {
        pub async fn connect(
            _addr: SocketAddr,
            _tls: Option<&PeerTls>,
        ) -> Result<EtcdConn, String> {
            Err(super::NOT_BUILT.to_string())
        }

        pub fn open_session(&self) -> EtcdSession {
            match *self {}
        }

        pub async fn read_versioned(&self, _key: &[u8]) -> Result<(Option<Vec<u8>>, i64), String> {
            match *self {}
        }

        pub async fn read_many_versioned(
            &self,
            _keys: &[Bytes],
        ) -> Result<Vec<(Option<Vec<u8>>, i64)>, String> {
            match *self {}
        }

        pub async fn put_if_unchanged(
            &self,
            _read: &[(&[u8], i64)],
            _writes: &[(&[u8], Vec<u8>)],
        ) -> Result<bool, String> {
            match *self {}
        }

        pub async fn put(&self, _key: &[u8], _value: &[u8]) -> Result<(), String> {
            match *self {}
        }
    }

    impl EtcdSession {
        pub fn submit(&mut self, _op: BenchOp) -> Result<(), String> {
            match *self {}
        }

        pub async fn next(&mut self) -> Option<Result<Done, String>> {
            match *self {}
        }
    }
}

/// Parses the default endpoint (a constant, so this cannot fail).
pub fn default_endpoint() -> SocketAddr {
    DEFAULT_ETCD_ENDPOINT.parse().expect("a valid address")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(not(feature = "etcd"))]
    #[tokio::test]
    async fn a_build_without_the_feature_says_how_to_get_it() {
        let e = EtcdConn::connect(default_endpoint(), None)
            .await
            .err()
            .expect("no connection without gRPC");
        assert!(e.contains("--features etcd") && e.contains("protoc"), "{e}");
    }

    #[cfg(feature = "etcd")]
    #[tokio::test]
    async fn an_unreachable_member_is_a_connect_error_naming_it() {
        // Port 9 (discard) on loopback: nothing listens there in a test sandbox.
        let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let Err(e) = EtcdConn::connect(addr, None).await else { panic!("connected to nothing") };
        assert!(e.contains("127.0.0.1:9"), "{e}");
    }
}
