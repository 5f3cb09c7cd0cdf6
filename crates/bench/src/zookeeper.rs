//! The ZooKeeper target: the baseline of the ORCA paper's evaluation (ORCA §8: YCSB against
//! "strong-ZK" and "weak-ZK"), for Strata's `log` engine.
//!
//! Keys map to znodes, one per key, under a root of the run's own
//! (`/strata-bench/run-<unix ms hex>-<seed>/<key>`: keys that are letters, digits, `_` and `-`
//! as they are, others in hex, see [`znode_name`]), so that a run never finds the znodes of an
//! earlier one (an insert would fail with `NodeExists`). The root is made by every connection
//! (`mkdir -p`, idempotent); znodes are not deleted afterwards (10 000 keys of 32 B cost the
//! ensemble a few MB of heap; restart it between long series).
//!
//! | bench op | ZooKeeper |
//! |---|---|
//! | read | `getData`, answered by the server the session is connected to from its own copy: **sequentially consistent**, not linearizable (a linearizable read needs a `sync` first), i.e. ORCA's "weak-ZK" reads |
//! | write (update) | `setData` (any version), through the leader's atomic broadcast (Zab) |
//! | insert, preload | `create` (persistent; if the znode exists, `setData`) |
//! | read-modify-write | the generator's: `getData`, then `setData` once it answered (unconditional, like YCSB's) |
//! | acquire, release, FAA, CAS | refused by the arguments (`--mode es` only) |
//!
//! Each bench connection is one ZooKeeper session (one TCP connection) to exactly one server,
//! so `--clients` are spread over the `--endpoints` like the other targets. ZooKeeper answers a
//! session's requests in order; bench sessions on a connection share it, each with its own FIFO
//! of reply futures. Whether writes reach the disk before they are acknowledged is the server's
//! `zookeeper.forceSync` (scripts/bench-zk.sh runs both).
//!
//! The client is `zookeeper-client` (crates.io, 0.11, MIT), chosen because it is written from
//! scratch in async Rust (no C library to build, so `cargo build --features zookeeper` needs
//! nothing installed), speaks the protocol of current servers (3.5+ `create2`, 3.6+
//! persistent watches, the ZooKeeper 3.8 of Debian 12 included), runs on tokio (its `tokio`
//! feature spawns its session task on the caller's runtime; its sockets use `async-io`'s
//! reactor thread), and queues a request when its future is created rather than when it is
//! polled, which is what a pipelined session needs. It is recent (0.11.2 needs Rust 1.76) and
//! its README claims an API set up to date with the Java client's. (`zookeeper-async` and `tokio-zookeeper` were the other async
//! candidates.) It sits behind the `zookeeper` cargo feature (off by default: the default
//! build and CI stay free of it); without the feature, connecting fails with the command that
//! builds it.

use std::net::SocketAddr;

/// ZooKeeper's usual client port, used when `--target zookeeper` is given no `--endpoints`.
pub const DEFAULT_ZOOKEEPER_ENDPOINT: &str = "127.0.0.1:2181";

/// Parent of every run's root.
pub const ROOT: &str = "/strata-bench";

/// What a build without the `zookeeper` feature answers.
pub const NOT_BUILT: &str = "this strata was built without the zookeeper target: rebuild with \
     `cargo build --release -p strata --features zookeeper`";

#[cfg(feature = "zookeeper")]
pub use with_client::{ZkConn, ZkSession};

#[cfg(not(feature = "zookeeper"))]
pub use without_client::{ZkConn, ZkSession};

/// The root of run `run_id`'s znodes.
pub fn run_root(run_id: &str) -> String {
    format!("{ROOT}/run-{run_id}")
}

/// A key as a znode name: as it is when it is only ASCII letters, digits, `_` and `-` (the
/// benchmark's own keys, `k000…42`), else `x` and its bytes in hex (no `/`, no `.`/`..`, no
/// control characters, which ZooKeeper refuses in paths).
pub fn znode_name(key: &[u8]) -> String {
    if !key.is_empty() && key.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-')
    {
        return String::from_utf8_lossy(key).into_owned();
    }
    let mut s = String::with_capacity(1 + 2 * key.len());
    s.push('x');
    for b in key {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// The znode of `key` under `root`.
pub fn znode_path(root: &str, key: &[u8]) -> String {
    format!("{root}/{}", znode_name(key))
}

#[cfg(feature = "zookeeper")]
mod with_client {
    use std::collections::VecDeque;
    use std::future::Future;
    use std::net::SocketAddr;
    use std::pin::Pin;
    use std::time::Duration;

    use zookeeper_client as zk;

    use crate::target::{BenchOp, Done, CONNECT_TIMEOUT};

    /// The session timeout asked of the servers: long enough that a busy 2-core machine does
    /// not expire sessions mid-run.
    const SESSION_TIMEOUT: Duration = Duration::from_secs(20);

    /// A reply the session waits for.
    type Reply = Pin<Box<dyn Future<Output = Result<Done, String>> + Send>>;

    fn persistent() -> zk::CreateOptions<'static> {
        zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
    }

    /// One ZooKeeper session to one server.
    pub struct ZkConn {
        client: zk::Client,
        root: String,
        addr: SocketAddr,
    }

    impl ZkConn {
        pub async fn connect(addr: SocketAddr, run_id: &str) -> Result<ZkConn, String> {
            // Only this server (a one-host connect string), and fail rather than retry it
            // forever: the benchmark must know where its load goes.
            let server = addr.to_string();
            let connect = zk::Client::connector()
                .with_session_timeout(SESSION_TIMEOUT)
                .with_fail_eagerly()
                .connect(&server);
            let client = match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => return Err(format!("cannot connect to zookeeper at {addr}: {e}")),
                Err(_) => {
                    return Err(format!(
                    "cannot connect to zookeeper at {addr}: no session within {CONNECT_TIMEOUT:?}"
                ))
                }
            };
            let root = super::run_root(run_id);
            client
                .mkdir(&root, &persistent())
                .await
                .map_err(|e| format!("cannot create {root} on zookeeper at {addr}: {e}"))?;
            Ok(ZkConn { client, root, addr })
        }

        pub fn open_session(&self) -> ZkSession {
            ZkSession {
                client: self.client.clone(),
                root: self.root.clone(),
                in_flight: VecDeque::new(),
            }
        }

        pub fn addr(&self) -> SocketAddr {
            self.addr
        }
    }

    /// A closed-loop session: its outstanding replies, oldest first.
    pub struct ZkSession {
        client: zk::Client,
        root: String,
        in_flight: VecDeque<Reply>,
    }

    impl ZkSession {
        pub fn submit(&mut self, op: BenchOp) -> Result<(), String> {
            let reply: Reply = match op {
                BenchOp::Read { key } => {
                    // Sent now (the client queues a request when its future is made).
                    let get = self.client.get_data(&super::znode_path(&self.root, &key));
                    Box::pin(async move {
                        match get.await {
                            Ok(_) => Ok(Done::Hit),
                            Err(zk::Error::NoNode) => Ok(Done::Miss),
                            Err(e) => Err(format!("getData: {e}")),
                        }
                    })
                }
                BenchOp::Write { key, value } => {
                    let set =
                        self.client.set_data(&super::znode_path(&self.root, &key), &value, None);
                    Box::pin(async move {
                        set.await.map(|_| Done::Written).map_err(|e| format!("setData: {e}"))
                    })
                }
                BenchOp::Insert { key, value } => {
                    // `create` borrows the client and the path, so it runs as a task (sent at
                    // once, so inserts pipeline like the rest).
                    let (client, path) = (self.client.clone(), super::znode_path(&self.root, &key));
                    let task = tokio::spawn(async move {
                        match client.create(&path, &value, &persistent()).await {
                            Ok(_) => Ok(Done::Written),
                            Err(zk::Error::NodeExists) => client
                                .set_data(&path, &value, None)
                                .await
                                .map(|_| Done::Written)
                                .map_err(|e| format!("setData after create found {path}: {e}")),
                            Err(e) => Err(format!("create {path}: {e}")),
                        }
                    });
                    Box::pin(async move {
                        task.await
                            .unwrap_or_else(|e| Err(format!("zookeeper create task failed: {e}")))
                    })
                }
                BenchOp::Acquire { .. }
                | BenchOp::Release { .. }
                | BenchOp::Faa { .. }
                | BenchOp::Cas { .. } => {
                    return Err("zookeeper runs relaxed reads, writes and inserts only".to_string())
                }
            };
            self.in_flight.push_back(reply);
            Ok(())
        }

        pub async fn next(&mut self) -> Option<Result<Done, String>> {
            Some(self.in_flight.pop_front()?.await)
        }
    }
}

#[cfg(not(feature = "zookeeper"))]
mod without_client {
    use std::net::SocketAddr;

    use crate::target::{BenchOp, Done};

    /// Never constructed: without the `zookeeper` feature, [`ZkConn::connect`] always fails.
    pub enum ZkConn {}

    /// Never constructed.
    pub enum ZkSession {}

    impl ZkConn {
        pub async fn connect(_addr: SocketAddr, _run_id: &str) -> Result<ZkConn, String> {
            Err(super::NOT_BUILT.to_string())
        }

        pub fn open_session(&self) -> ZkSession {
            match *self {}
        }
    }

    impl ZkSession {
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
    DEFAULT_ZOOKEEPER_ENDPOINT.parse().expect("a valid address")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_become_safe_znode_names() {
        assert_eq!(
            znode_path("/strata-bench/run-1", b"k000000000042"),
            "/strata-bench/run-1/k000000000042"
        );
        assert_eq!(znode_name(b"a/b"), "x612f62");
        assert_eq!(znode_name(b".."), "x2e2e");
        assert_eq!(znode_name(b""), "x");
        assert_eq!(run_root("18c-1"), "/strata-bench/run-18c-1");
    }

    #[cfg(not(feature = "zookeeper"))]
    #[tokio::test]
    async fn a_build_without_the_feature_says_how_to_get_it() {
        let e = ZkConn::connect(default_endpoint(), "t")
            .await
            .err()
            .expect("no connection without the client");
        assert!(e.contains("--features zookeeper"), "{e}");
    }

    #[cfg(not(feature = "zookeeper"))]
    #[tokio::test]
    async fn run_reports_the_missing_feature_as_a_connect_error() {
        let args = crate::BenchArgs {
            conn: crate::ConnArgs {
                target: crate::Target::Zookeeper,
                ..crate::ConnArgs::default()
            },
            output: crate::OutputArgs { quiet: true, ..crate::OutputArgs::default() },
            ..crate::BenchArgs::default()
        };
        let e = crate::run(&args, Vec::new()).await.unwrap_err();
        assert!(matches!(e, crate::BenchError::Connect { .. }), "{e}");
        assert!(
            e.to_string().contains("--features zookeeper") && e.to_string().contains("2181"),
            "{e}"
        );
    }

    #[cfg(feature = "zookeeper")]
    #[tokio::test]
    async fn an_unreachable_server_is_a_connect_error_naming_it() {
        // Port 9 (discard) on loopback: nothing listens there in a test sandbox.
        let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let Err(e) = ZkConn::connect(addr, "t").await else { panic!("connected to nothing") };
        assert!(e.contains("127.0.0.1:9"), "{e}");
    }

    /// Against a real ensemble when `STRATA_BENCH_ZK=host:port,...` names one (skipped
    /// otherwise; scripts/bench-zk.sh is the end-to-end run).
    #[cfg(feature = "zookeeper")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ycsb_against_a_real_ensemble_if_one_is_given() {
        let Ok(eps) = std::env::var("STRATA_BENCH_ZK") else {
            return;
        };
        let endpoints: Vec<SocketAddr> = eps.split(',').map(|e| e.parse().unwrap()).collect();
        for y in [crate::Ycsb::D, crate::Ycsb::F] {
            let args = crate::BenchArgs {
                conn: crate::ConnArgs {
                    target: crate::Target::Zookeeper,
                    clients: 3,
                    ..crate::ConnArgs::default()
                },
                workload: crate::WorkloadArgs {
                    ycsb: Some(y),
                    keys: 300,
                    ..crate::WorkloadArgs::default()
                },
                run: crate::RunArgs { duration: 0.5, warmup: 0.1, ..crate::RunArgs::default() },
                output: crate::OutputArgs { quiet: true, ..crate::OutputArgs::default() },
                ..crate::BenchArgs::default()
            };
            let r = crate::run(&args, endpoints.clone()).await.unwrap();
            assert_eq!((r.errors, r.read_misses), (0, 0), "{r}");
            let ycsb = r.ycsb.as_ref().unwrap();
            assert!(ycsb.read.count > 0 && ycsb.insert.count + ycsb.rmw.count > 0, "{r}");
        }
    }
}
