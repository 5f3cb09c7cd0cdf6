//! A 3-node cluster in one process: writes on one node reach the others; status reports the
//! transport; shutdown is graceful; a busy port is reported clearly.

#[macro_use]
mod common;

use std::time::{Duration, Instant};

use common::*;
use strata_node::StartError;
use strata_wire::client::{push_topic, Response, PUSH_CORR};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_converge_on_a_write() {
    let nodes = cluster(3).await;
    let mut s0 = Session::open(nodes[0].client_addr()).await;
    let cs = s0.put("greeting", b"hello").await;
    assert_eq!(cs.llc.node.0, 0, "the version is created by node 0");
    assert_eq!(
        s0.get("greeting").await.as_deref(),
        Some(&b"hello"[..]),
        "read-your-writes at node 0"
    );

    for node in &nodes[1..] {
        let mut s = Session::open(node.client_addr()).await;
        s.await_value("greeting", b"hello").await;
    }

    // A later write on node 2 overwrites it everywhere (higher carstamp).
    let mut s2 = Session::open(nodes[2].client_addr()).await;
    s2.put("greeting", b"bye").await;
    s0.await_value("greeting", b"bye").await;

    // Every node eventually reports both its peers connected, with messages sent.
    for node in &nodes {
        let mut c = Conn::connect(node.client_addr()).await;
        eventually!("peers connected and pending writes acked", {
            let st = c.status().await;
            (st.peers.len() == 2 && st.peers.iter().all(|p| p.connected) && st.pending_writes == 0)
                .then_some(())
        });
        let st = c.status().await;
        assert_eq!(st.node.0, node.node_id());
        assert_eq!((st.bad_client_frames, st.bad_peer_frames), (0, 0));
        assert!(st.keys >= 1);
    }
    let total_sent: u64 = {
        let mut c = Conn::connect(nodes[0].client_addr()).await;
        c.status().await.peers.iter().map(|p| p.messages_sent).sum()
    };
    assert!(total_sent >= 2, "node 0 sent its write to both peers and acked node 2's");

    let t = Instant::now();
    for n in nodes {
        n.shutdown().await;
    }
    assert!(t.elapsed() < Duration::from_secs(3), "shutdown took {:?}", t.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_client_connections_and_frees_the_ports() {
    let nodes = cluster(1).await;
    let node = nodes.into_iter().next().unwrap();
    let (client_addr, peer_addr) = (node.client_addr(), node.peer_addr());
    let mut s = Session::open(client_addr).await;
    s.put("k", b"v").await;
    node.shutdown().await;
    // First a notice (a push: correlation number 0), then the close.
    let notice = s.conn.recv().await.expect("a notice before the close");
    assert_eq!(notice.corr, PUSH_CORR);
    assert_eq!(
        notice.body,
        Response::Push {
            topic: push_topic::NODE_STOPPING,
            body: bytes::Bytes::from_static(&[0; 4])
        }
    );
    assert!(s.conn.closed_by_node().await, "an open client connection is closed at shutdown");
    // The listeners are gone: the same addresses can be bound again.
    let _c = std::net::TcpListener::bind(client_addr).expect("client port released");
    let _p = std::net::TcpListener::bind(peer_addr).expect("peer port released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_port_is_reported_clearly() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut cfg = config(0, vec![]);
    cfg.client_addr = taken.local_addr().unwrap();
    let err = strata_node::start(cfg).await.expect_err("the port is taken");
    assert!(matches!(err, StartError::Bind { what: "clients", .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("address in use") && msg.contains(&taken.local_addr().unwrap().to_string()),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_a_dead_peer_keeps_serving_and_catches_it_up_later() {
    // Node 1's addresses are reserved but nobody listens until it starts.
    let (c0, p0) = (
        std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
        std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
    );
    let (c1, p1) = (
        std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
        std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
    );
    let (a0, a1) = (p0.local_addr().unwrap(), p1.local_addr().unwrap());
    drop(p1); // connection refused until node 1 is up (the port stays free on loopback in practice)
    let n0 = strata_node::start_with_listeners(
        config(0, vec![strata_node::PeerConfig { id: 1, addr: a1 }]),
        c0,
        p0,
    )
    .await
    .unwrap();
    let mut s0 = Session::open(n0.client_addr()).await;
    s0.put("early", b"1").await;
    let mut c = Conn::connect(n0.client_addr()).await;
    let st = c.status().await;
    assert!(!st.peers[0].connected);
    assert_eq!(st.pending_writes, 1, "unacked while the peer is down");

    let p1 = match std::net::TcpListener::bind(a1) {
        Ok(l) => l,
        Err(_) => return, // someone else took the port meanwhile; nothing to test
    };
    let n1 = strata_node::start_with_listeners(
        config(1, vec![strata_node::PeerConfig { id: 0, addr: a0 }]),
        c1,
        p1,
    )
    .await
    .unwrap();
    let mut s1 = Session::open(n1.client_addr()).await;
    s1.await_value("early", b"1").await;
    eventually!(
        "node 0's pending write acked",
        (c.status().await.pending_writes == 0).then_some(())
    );
    n0.shutdown().await;
    n1.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_writes_are_all_answered_and_replicated() {
    use bytes::Bytes;
    use strata_wire::client::{ClientRequest, Request, Response};
    let nodes = cluster(3).await;
    let mut s0 = Session::open(nodes[0].client_addr()).await;
    const N: u64 = 5_000;
    let mut bytes = Vec::new();
    for i in 0..N {
        let key = Bytes::from(format!("k{}", i % 500));
        let req = ClientRequest::new(
            1_000 + i,
            Request::Put { session: s0.id, key, value: Bytes::from(i.to_string()) },
        );
        bytes.extend(frame(CLUSTER, &req));
    }
    let t = Instant::now();
    s0.conn.send_raw(&bytes).await;
    for i in 0..N {
        let r = s0.conn.recv().await.expect("a response per request");
        assert_eq!(r.corr, 1_000 + i, "responses in request order");
        assert!(matches!(r.body, Response::Written { .. }), "{r:?}");
    }
    let mut s1 = Session::open(nodes[1].client_addr()).await;
    let mut s2 = Session::open(nodes[2].client_addr()).await;
    for k in [0, 250, 499] {
        let want = (N - 500 + k).to_string();
        s1.await_value(&format!("k{k}"), want.as_bytes()).await;
        s2.await_value(&format!("k{k}"), want.as_bytes()).await;
    }
    let mut admin = Conn::connect(nodes[0].client_addr()).await;
    eventually!("every write acked", (admin.status().await.pending_writes == 0).then_some(()));
    eprintln!("{N} pipelined puts answered and replicated in {:?}", t.elapsed());
    for n in nodes {
        n.shutdown().await;
    }
}
