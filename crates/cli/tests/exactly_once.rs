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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::proxy::Proxy;
use common::*;
use strata_client::{Client, ClientOptions};

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
                Err(e) if exactly_once => {
                    panic!("increment {i}: RIFL must hide the fault, got {e}")
                }
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
    strata_wire::counter::parse(v).expect("the key holds a counter")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faa_counters_end_at_the_acknowledged_increments_through_lost_replies_a_partition_and_a_sigkill(
) {
    const N: usize = 250;
    let up = Up::start_with(3, &[PLAIN]);
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
    // SAFETY: kill(2) on a pid this test started; no memory is touched.
    unsafe { libc::kill(up.pids[1], libc::SIGKILL) };
    tokio::time::sleep(Duration::from_millis(600)).await;
    pa.partitioned.store(false, Ordering::Relaxed);

    let mut seen = Vec::new();
    for t in [a, b, c, d] {
        seen.extend(t.await.unwrap());
    }
    let acked = seen.len() as u64;
    assert_eq!(acked, 4 * N as u64, "every increment was acknowledged");
    assert!(
        pa.dropped.load(Ordering::Relaxed) + pb.dropped.load(Ordering::Relaxed) >= 10,
        "the proxies lost replies"
    );
    // Exactly once: the counter moved once per acknowledged increment ...
    assert_eq!(counter(n0).await, acked, "duplicate or lost increments");
    // ... and the increments saw every old value once: none repeated, none skipped.
    seen.sort_unstable();
    assert!(
        seen.iter().copied().eq(0..acked),
        "old values are not 0..{acked}: {:?}",
        &seen[..seen.len().min(20)]
    );
}

/// The negative control: the same lost replies, RIFL off, the usual retry. The counter ends
/// above the acknowledged increments — the faults above do provoke duplicates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_rifl_the_same_lost_replies_apply_increments_twice() {
    const N: usize = 100;
    let up = Up::start_with(3, &[PLAIN]);
    let proxy = Proxy::start(up.endpoints[0], 20).await;
    let seen = increments(vec![proxy.addr], N, false).await;
    let dropped = proxy.dropped.load(Ordering::Relaxed);
    assert!(dropped >= 3, "the proxy lost {dropped} replies");
    let total = counter(up.endpoints[1]).await;
    assert!(
        total > seen.len() as u64,
        "no duplicate although {dropped} replies were lost: the harness has no power"
    );
}

/// One client's loop of increments that carries on after `ExpiredLease` (R-G4: the outcome of
/// that increment is unknown; the session goes on under a new lease): `n` of them, and then
/// more until `stop` is set. Returns the old values of the acknowledged increments and how
/// many ended "outcome unknown".
async fn increments_through_lease_loss(
    endpoints: Vec<SocketAddr>,
    n: usize,
    stop: Arc<AtomicBool>,
) -> (Vec<u64>, u64) {
    let opts = ClientOptions {
        retry_for: Duration::from_secs(20),
        request_timeout: Some(Duration::from_secs(30)),
        ..ClientOptions::default()
    };
    let client = Client::connect(&endpoints, opts).await.unwrap();
    let mut session = client.open_session().await.unwrap();
    let (mut seen, mut unknown) = (Vec::with_capacity(n), 0);
    let mut ids = std::collections::BTreeSet::new();
    let mut i = 0;
    while i < n || !stop.load(Ordering::Relaxed) {
        match session.faa(KEY, 1).await {
            Ok(old) => seen.push(old),
            Err(strata_client::ClientError::ExpiredLease(_)) => unknown += 1,
            Err(e) => panic!("increment {i}: only ExpiredLease may surface, got {e}"),
        }
        ids.insert(session.client_id());
        i += 1;
        if i >= n {
            tokio::time::sleep(Duration::from_millis(10)).await; // keep the clock moving, lightly
        }
    }
    assert!(
        ids.len() >= 2 || unknown == 0,
        "an expired lease must be replaced by a new one: ids {ids:?}"
    );
    (seen, unknown)
}

/// rifl.md R-G4, R-D21, §7 inv. 9 with real processes: a client cut off from the cluster for
/// 2.5 lease terms (its renewals fail, as if it were paused) loses its lease. The increment it
/// had in flight ends as "outcome unknown" (`ExpiredLease`) — never re-executed silently — and
/// the session carries on under a new lease id. Two clients keep the cluster clock moving at
/// the node (a node learns cluster time from its clients' envelopes: with no other traffic it
/// would have no reason to doubt the old lease, and would rightly run the retry). The
/// counter ends between the acknowledged increments and those plus the unknown ones, and the
/// acknowledged increments saw distinct old values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cut_off_past_its_lease_gets_outcome_unknown_and_never_a_duplicate() {
    const N: usize = 150;
    const TERM_MS: u64 = 2000;
    let up = Up::start_with(3, &["--lease-term-ms", &TERM_MS.to_string(), PLAIN]);
    let n0 = up.endpoints[0];
    // Replies are never dropped by this proxy; it only cuts the client off.
    let proxy = Proxy::start(n0, u64::MAX).await;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(true));
    let cut = tokio::spawn(increments_through_lease_loss(vec![proxy.addr], N, done));
    let others: Vec<_> = (0..2)
        .map(|_| tokio::spawn(increments_through_lease_loss(vec![n0], N, stop.clone())))
        .collect();

    let start = std::time::Instant::now();
    while counter(up.endpoints[1]).await < (N / 2) as u64 {
        assert!(start.elapsed() < Duration::from_secs(60), "no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.partitioned.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(TERM_MS * 5 / 2)).await;
    proxy.partitioned.store(false, Ordering::Relaxed);

    let (mut seen, unknown) = cut.await.unwrap();
    stop.store(true, Ordering::Relaxed);
    assert!(unknown >= 1, "the cut-off client's lease expired with an increment in flight, yet nothing ended as outcome unknown");
    let mut unknown_total = unknown;
    for t in others {
        let (s, u) = t.await.unwrap();
        seen.extend(s);
        unknown_total += u;
    }
    let acked = seen.len() as u64;
    let total = counter(up.endpoints[2]).await;
    assert!(
        (acked..=acked + unknown_total).contains(&total),
        "counter {total} outside [{acked}, {acked} + {unknown_total} unknown]: a duplicate or a lost increment"
    );
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(
        seen.len() as u64,
        acked,
        "two acknowledged increments saw the same old value: one was applied twice"
    );
}

/// rifl.md §5.5.1, R-D21 with a real client process: `strata faa --repeat` is SIGSTOPped for
/// 2.5 lease terms mid-run and resumed. Its lease expires meanwhile and the nodes collect it;
/// on waking, the process finds its lease in the danger zone, gets a new one and goes on.
/// Every increment takes effect exactly once: the counter ends at the increments the process
/// and a second client saw acknowledged (plus at most the ones it reported unknown, `?`), and
/// the old values are distinct.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_process_paused_past_its_lease_resumes_under_a_new_lease_exactly_once() {
    const TERM_MS: u64 = 2000;
    let up = Up::start_with(3, &["--lease-term-ms", &TERM_MS.to_string(), PLAIN]);
    let n0 = up.endpoints[0];
    // A second client keeps the node's cluster clock moving while the first one sleeps.
    let stop = Arc::new(AtomicBool::new(false));
    let other = tokio::spawn(increments_through_lease_loss(vec![n0], 0, stop.clone()));
    let child = std::process::Command::new(STRATA)
        .args(["faa", KEY, "1", "--repeat", "300", "--endpoints", &n0.to_string(), PLAIN])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let start = std::time::Instant::now();
    while counter(up.endpoints[1]).await < 60 {
        assert!(start.elapsed() < Duration::from_secs(60), "no progress");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // SAFETY: the client process this test started.
    // SAFETY: kill(2) on a pid this test started; no memory is touched.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    tokio::time::sleep(Duration::from_millis(TERM_MS * 5 / 2)).await;
    // SAFETY: kill(2) on a pid this test started; no memory is touched.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()).await.unwrap();
    stop.store(true, Ordering::Relaxed);
    let (mut seen, other_unknown) = other.await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        300,
        "one line per increment; stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let unknown = lines.iter().filter(|l| **l == "?").count() as u64 + other_unknown;
    seen.extend(lines.iter().filter(|l| **l != "?").map(|l| l.parse::<u64>().unwrap()));
    let acked = seen.len() as u64;
    let total = counter(up.endpoints[2]).await;
    assert!(
        (acked..=acked + unknown).contains(&total),
        "counter {total} outside [{acked}, {acked} + {unknown}]"
    );
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len() as u64, acked, "two acknowledged increments saw the same old value");
    // The pause outlived the lease: the service drops it, and a node's cleaner (every term/10,
    // once the clock its clients show passed the expiration) collects the client.
    let collected = || {
        (0..3).any(|i| {
            std::fs::read_to_string(up.data_dir.join(format!("n{i}/node.log")))
                .unwrap_or_default()
                .contains("client lease expired")
        })
    };
    let start = std::time::Instant::now();
    while !collected() {
        assert!(
            start.elapsed() < Duration::from_millis(TERM_MS * 3),
            "no node collected the expired client"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
