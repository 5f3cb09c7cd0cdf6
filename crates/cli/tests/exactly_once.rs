//! RIFL on real processes (issue #5, item 6; `specs/rifl.md` §7 inv. 1-3): fetch-and-add
//! counters under lost replies, a partitioned client and a SIGKILLed node end exactly at the
//! number of acknowledged increments — and every increment observed a distinct old value, so
//! none was applied twice and none was lost.
//!
//! Faults come from a TCP proxy between a client and its node: it drops a reply by cutting the
//! connection after the node answered (the request took effect; only the answer is lost), and
//! it partitions the client by refusing connections for a while. The negative control runs
//! the same faults with RIFL off and the usual application-level retry: the counter then ends
//! above the acknowledged increments, which shows the faults do provoke duplicates.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use strata_client::{Client, ClientOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A TCP proxy to one node that loses replies and can partition its clients.
struct Proxy {
    addr: SocketAddr,
    /// Every `drop_every`-th reply read from the node is not forwarded: the connection is cut.
    drop_every: u64,
    replies: AtomicU64,
    dropped: AtomicU64,
    partitioned: AtomicBool,
}

impl Proxy {
    async fn start(target: SocketAddr, drop_every: u64) -> Arc<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = Arc::new(Proxy {
            addr: listener.local_addr().unwrap(),
            drop_every,
            replies: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            partitioned: AtomicBool::new(false),
        });
        let p = proxy.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if p.partitioned.load(Ordering::Relaxed) {
                    continue; // dropped at once: the client sees a reset or EOF
                }
                let Ok(node) = TcpStream::connect(target).await else { continue };
                tokio::spawn(p.clone().pump(client, node));
            }
        });
        proxy
    }

    async fn pump(self: Arc<Proxy>, client: TcpStream, node: TcpStream) {
        let _ = (client.set_nodelay(true), node.set_nodelay(true));
        let (mut cr, mut cw) = client.into_split();
        let (mut nr, mut nw) = node.into_split();
        let upstream = async {
            let mut buf = vec![0u8; 64 << 10];
            while let Ok(n @ 1..) = cr.read(&mut buf).await {
                if self.partitioned.load(Ordering::Relaxed) || nw.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        };
        let downstream = async {
            let mut buf = vec![0u8; 64 << 10];
            while let Ok(n @ 1..) = nr.read(&mut buf).await {
                let count = self.replies.fetch_add(1, Ordering::Relaxed) + 1;
                if self.partitioned.load(Ordering::Relaxed) || count % self.drop_every == 0 {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    break; // the node answered; the client never hears it
                }
                if cw.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        };
        // Whichever direction ends first closes both: the client sees its connection break.
        tokio::select! {
            _ = upstream => {},
            _ = downstream => {},
        }
    }
}

const KEY: &str = "ctr";

/// One client's loop of `n` increments. With RIFL on, every call must succeed (retries are
/// transparent); with it off, a failed call is retried in a new session, as applications do
/// without exactly-once support. Returns the old values the acknowledged increments saw.
async fn increments(endpoints: Vec<SocketAddr>, n: usize, exactly_once: bool) -> Vec<u64> {
    let opts = ClientOptions {
        exactly_once,
        retry_for: Duration::from_secs(20),
        request_timeout: Some(Duration::from_secs(30)),
        ..ClientOptions::default()
    };
    let client = Client::connect(&endpoints, opts).await.unwrap();
    let mut session = client.open_session().await.unwrap();
    let mut seen = Vec::with_capacity(n);
    for i in 0..n {
        loop {
            match session.faa(KEY, 1).await {
                Ok(old) => {
                    seen.push(old);
                    break;
                }
                Err(e) if exactly_once => panic!("increment {i}: RIFL must hide the fault, got {e}"),
                Err(e) => {
                    assert!(e.outcome_unknown(), "{e}");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    if let Ok(s) = client.open_session().await {
                        session = s;
                    }
                }
            }
        }
    }
    seen
}

async fn counter(at: SocketAddr) -> u64 {
    let client = Client::connect_node(at, ClientOptions::default()).await.unwrap();
    let v = client.open_session().await.unwrap().acquire(KEY).await.unwrap();
    as_counter(v.value.as_deref())
}

fn as_counter(v: Option<&[u8]>) -> u64 {
    let mut b = [0u8; 8];
    if let Some(v) = v {
        b[..v.len().min(8)].copy_from_slice(&v[..v.len().min(8)]);
    }
    u64::from_le_bytes(b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faa_counters_end_at_the_acknowledged_increments_through_lost_replies_a_partition_and_a_sigkill() {
    const N: usize = 250;
    let up = Up::start(3);
    let (n0, n1, n2) = (up.endpoints[0], up.endpoints[1], up.endpoints[2]);
    // Clients A and B reach node 0 only through lossy proxies (every 20th reply lost); A will
    // also be partitioned. C and D talk to node 1 directly, which dies half-way.
    let (pa, pb) = (Proxy::start(n0, 20).await, Proxy::start(n0, 20).await);
    let a = tokio::spawn(increments(vec![pa.addr], N, true));
    let b = tokio::spawn(increments(vec![pb.addr], N, true));
    let c = tokio::spawn(increments(vec![n1, n2], N, true));
    let d = tokio::spawn(increments(vec![n1, n0], N, true));

    // Half-way through (by the counter), partition client A for 600 ms and SIGKILL node 1.
    let start = std::time::Instant::now();
    while counter(n2).await < (2 * N) as u64 {
        assert!(start.elapsed() < Duration::from_secs(60), "no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    pa.partitioned.store(true, Ordering::Relaxed);
    // SAFETY: a node process of this test's cluster.
    unsafe { libc::kill(up.pids[1], libc::SIGKILL) };
    tokio::time::sleep(Duration::from_millis(600)).await;
    pa.partitioned.store(false, Ordering::Relaxed);

    let mut seen = Vec::new();
    for t in [a, b, c, d] {
        seen.extend(t.await.unwrap());
    }
    let acked = seen.len() as u64;
    assert_eq!(acked, 4 * N as u64, "every increment was acknowledged");
    assert!(pa.dropped.load(Ordering::Relaxed) + pb.dropped.load(Ordering::Relaxed) >= 10, "the proxies lost replies");
    // Exactly once: the counter moved once per acknowledged increment ...
    assert_eq!(counter(n0).await, acked, "duplicate or lost increments");
    // ... and the increments saw every old value once: none repeated, none skipped.
    seen.sort_unstable();
    assert!(seen.iter().copied().eq(0..acked), "old values are not 0..{acked}: {:?}", &seen[..seen.len().min(20)]);
}

/// The negative control: the same lost replies, RIFL off, the usual retry. The counter ends
/// above the acknowledged increments — the faults above do provoke duplicates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_rifl_the_same_lost_replies_apply_increments_twice() {
    const N: usize = 100;
    let up = Up::start(3);
    let proxy = Proxy::start(up.endpoints[0], 20).await;
    let seen = increments(vec![proxy.addr], N, false).await;
    let dropped = proxy.dropped.load(Ordering::Relaxed);
    assert!(dropped >= 3, "the proxy lost {dropped} replies");
    let total = counter(up.endpoints[1]).await;
    assert!(total > seen.len() as u64, "no duplicate although {dropped} replies were lost: the harness has no power");
}
