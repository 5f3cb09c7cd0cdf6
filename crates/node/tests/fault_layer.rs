//! The transport's fault layer, switched at run time with the `SetFault` admin request:
//! partitions hold writes back until healed, delays delay convergence, loss is survived by
//! re-sending.

#[macro_use]
mod common;

use std::time::{Duration, Instant};

use common::*;
use strata_wire::client::{ErrorCode, LinkFault, Request, Response};
use strata_wire::NodeId;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_holds_writes_back_until_it_heals() {
    let nodes = cluster(3).await;
    let mut admin0 = Conn::connect(nodes[0].client_addr()).await;
    let mut s0 = Session::open(nodes[0].client_addr()).await;
    let mut s1 = Session::open(nodes[1].client_addr()).await;
    let mut s2 = Session::open(nodes[2].client_addr()).await;
    // Links up and working before the fault.
    s0.put("before", b"1").await;
    s1.await_value("before", b"1").await;

    admin0.set_fault(None, LinkFault { partitioned: true, ..LinkFault::default() }).await;
    s0.put("k", b"partitioned").await;
    assert_eq!(
        s0.get("k").await.as_deref(),
        Some(&b"partitioned"[..]),
        "the minority side still writes locally"
    );
    // Node 0 keeps re-sending (5 ms, 10 ms, ...); nothing gets through for as long as we look.
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        assert_eq!(s1.get("k").await, None, "node 1 saw a write across the partition");
        assert_eq!(s2.get("k").await, None, "node 2 saw a write across the partition");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let st = admin0.status().await;
    assert_eq!(st.pending_writes, 1);
    for p in &st.peers {
        assert!(p.fault.partitioned, "status reports the fault");
        assert!(
            p.messages_dropped_by_fault >= 2,
            "the first send and re-sends were dropped: {p:?}"
        );
    }

    admin0.set_fault(None, LinkFault::default()).await;
    s1.await_value("k", b"partitioned").await;
    s2.await_value("k", b"partitioned").await;
    eventually!(
        "the write acked by both peers",
        (admin0.status().await.pending_writes == 0).then_some(())
    );
    assert!(admin0.status().await.peers.iter().all(|p| p.fault.is_clear()));
    for n in nodes {
        n.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_peer_partition_leaves_the_other_link_alone() {
    let nodes = cluster(3).await;
    let mut admin0 = Conn::connect(nodes[0].client_addr()).await;
    let mut s0 = Session::open(nodes[0].client_addr()).await;
    let mut s1 = Session::open(nodes[1].client_addr()).await;
    let mut s2 = Session::open(nodes[2].client_addr()).await;
    admin0.set_fault(Some(1), LinkFault { partitioned: true, ..LinkFault::default() }).await;
    s0.put("k", b"v").await;
    s2.await_value("k", b"v").await;
    assert_eq!(s1.get("k").await, None);
    let st = admin0.status().await;
    let p1 = st.peers.iter().find(|p| p.node == NodeId(1)).unwrap();
    let p2 = st.peers.iter().find(|p| p.node == NodeId(2)).unwrap();
    assert!(p1.fault.partitioned && !p2.fault.partitioned);
    assert_eq!(p2.messages_dropped_by_fault, 0);

    // An unknown peer is refused with a clear error; nothing changes.
    match admin0
        .call(Request::SetFault { peer: Some(NodeId(7)), fault: LinkFault::default() })
        .await
    {
        Response::Error { code: ErrorCode::InvalidArgument, message } => {
            assert!(message.contains("n7"), "{message}")
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    admin0.set_fault(Some(1), LinkFault::default()).await;
    s1.await_value("k", b"v").await;
    for n in nodes {
        n.shutdown().await;
    }
}

/// Polls both sessions until each sees `key = value`; returns when each first saw it.
async fn convergence_times(
    a: &mut Session,
    b: &mut Session,
    key: &str,
    value: &[u8],
    start: Instant,
) -> (Duration, Duration) {
    let (mut ta, mut tb) = (None, None);
    while ta.is_none() || tb.is_none() {
        assert!(start.elapsed() < DEADLINE, "no convergence");
        if ta.is_none() && a.get(key).await.as_deref() == Some(value) {
            ta = Some(start.elapsed());
        }
        if tb.is_none() && b.get(key).await.as_deref() == Some(value) {
            tb = Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    (ta.unwrap(), tb.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delay_fault_measurably_delays_convergence() {
    let nodes = cluster(3).await;
    let mut admin0 = Conn::connect(nodes[0].client_addr()).await;
    let mut s0 = Session::open(nodes[0].client_addr()).await;
    let mut s1 = Session::open(nodes[1].client_addr()).await;
    let mut s2 = Session::open(nodes[2].client_addr()).await;

    // Baseline: no fault.
    let start = Instant::now();
    s0.put("base", b"1").await;
    let (b1, b2) = convergence_times(&mut s1, &mut s2, "base", b"1", start).await;

    // 250 ms (plus up to 20 ms jitter) on node 0's link to node 1 only.
    let delay = Duration::from_millis(250);
    admin0
        .set_fault(
            Some(1),
            LinkFault { delay_us: 250_000, jitter_us: 20_000, ..LinkFault::default() },
        )
        .await;
    let start = Instant::now();
    s0.put("slow", b"2").await;
    let (t1, t2) = convergence_times(&mut s1, &mut s2, "slow", b"2", start).await;
    assert!(t1 >= delay, "the delayed link delivered after {t1:?}");
    assert!(t2 < t1, "the undelayed link (node 2, {t2:?}) is faster than the delayed one ({t1:?})");
    assert!(b1 < delay && b2 < delay, "baseline {b1:?} / {b2:?}");
    // The delay holds messages back; it loses none.
    let st = admin0.status().await;
    assert!(st.peers.iter().all(|p| p.messages_dropped_by_fault == 0), "{st:?}");
    for n in nodes {
        n.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_loss_is_survived_by_resending() {
    let nodes = cluster(3).await;
    let mut admin0 = Conn::connect(nodes[0].client_addr()).await;
    let mut s0 = Session::open(nodes[0].client_addr()).await;
    let mut s1 = Session::open(nodes[1].client_addr()).await;
    let mut s2 = Session::open(nodes[2].client_addr()).await;
    admin0.set_fault(None, LinkFault { loss_ppm: 500_000, ..LinkFault::default() }).await;
    for i in 0..30 {
        s0.put(&format!("k{i}"), format!("v{i}").as_bytes()).await;
    }
    for i in 0..30 {
        s1.await_value(&format!("k{i}"), format!("v{i}").as_bytes()).await;
        s2.await_value(&format!("k{i}"), format!("v{i}").as_bytes()).await;
    }
    let st = admin0.status().await;
    let dropped: u64 = st.peers.iter().map(|p| p.messages_dropped_by_fault).sum();
    assert!(dropped > 0, "half of 60 first sends should have been lost: {st:?}");
    assert_eq!(st.peers[0].fault.loss_ppm, 500_000);
    for n in nodes {
        n.shutdown().await;
    }
}
