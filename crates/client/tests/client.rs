//! The client library against real in-process nodes on loopback.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use strata_client::{blocking, Client, ClientError, ClientOptions, ClusterId, Op, Outcome};
use strata_node::RunningNode;

async fn cluster(n: u32) -> Vec<RunningNode> {
    strata_node::testing::local_cluster(n).await
}

fn opts() -> ClientOptions {
    // Sessions give up re-sending after 2 s: the test of a dead cluster waits that long.
    ClientOptions {
        request_timeout: Some(Duration::from_secs(10)),
        retry_for: Duration::from_secs(2),
        ..ClientOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_at_one_node_is_read_at_another() {
    let nodes = cluster(3).await;
    let a = Client::connect_node(nodes[0].client_addr(), opts()).await.unwrap();
    let b = Client::connect_node(nodes[2].client_addr(), opts()).await.unwrap();
    let mut sa = a.open_session().await.unwrap();
    let mut sb = b.open_session().await.unwrap();
    assert_eq!(sb.get("k").await.unwrap().value, None, "never written reads as absent");
    let cs = sa.put("k", "v1").await.unwrap();
    let start = Instant::now();
    loop {
        let got = sb.get("k").await.unwrap();
        if got.value.as_deref() == Some(&b"v1"[..]) {
            assert_eq!(got.version, cs, "the reader sees the writer's version");
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "write never arrived");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let del = sa.delete("k").await.unwrap();
    assert!(del > cs, "a delete is a newer version");
    assert_eq!(sa.get("k").await.unwrap().value, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_complete_in_session_order() {
    let nodes = cluster(3).await;
    let c = Client::connect(&[nodes[1].client_addr()], opts()).await.unwrap();
    let mut s = c.open_session().await.unwrap();
    let mut ids = Vec::new();
    for i in 0..500u32 {
        ids.push(s.submit(Op::put("counter", i.to_string())).unwrap());
        ids.push(s.submit(Op::get("counter")).unwrap());
    }
    // Consuming one by one: completions come in submission order, and every read sees the
    // write just before it in the session (per-key session order, Kite G2).
    let mut expected = 1;
    let mut last_write = None;
    while let Some((id, r)) = s.next().await {
        assert_eq!(id, expected);
        expected += 1;
        match r.unwrap() {
            Outcome::Written(cs) => last_write = Some(cs),
            Outcome::Value(v) => assert_eq!(Some(v.version), last_write),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(expected, 1001);
    // Waiting for the last of a batch waits for the whole batch.
    let mut last = 0;
    for i in 0..100u32 {
        last = s.submit(Op::put(format!("k{i}"), "x")).unwrap();
    }
    assert!(matches!(s.wait(last).await.unwrap(), Outcome::Written(_)));
    assert_eq!(s.outstanding(), 0, "earlier completions were consumed by the wait");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_typed_and_the_session_survives_them() {
    let nodes = cluster(1).await;
    let c = Client::connect(&[nodes[0].client_addr()], opts()).await.unwrap();
    let mut s = c.open_session().await.unwrap();
    let big = Bytes::from(vec![7u8; (1 << 20) + 1]);
    assert!(matches!(s.put("k", big).await, Err(ClientError::ValueTooLarge(_))));
    assert!(matches!(s.put("", "v").await, Err(ClientError::InvalidKey(_))));
    assert!(matches!(s.put(vec![b'k'; 70 << 10], "v").await, Err(ClientError::InvalidKey(_))));
    s.put("k", "ok").await.unwrap();
    assert_eq!(s.get("k").await.unwrap().value.as_deref(), Some(&b"ok"[..]));
    // In a batch, `wait` reports the first failure among the requests it waited for.
    s.submit(Op::put("a", "1")).unwrap();
    s.submit(Op::put("", "2")).unwrap();
    let last = s.submit(Op::put("b", "3")).unwrap();
    assert!(matches!(s.wait(last).await, Err(ClientError::InvalidKey(_))));
    let err = s.wait(last + 1).await.unwrap_err();
    assert!(matches!(err, ClientError::InvalidArgument(_)), "{err}");
    // The session's in-flight limit is enforced without blocking.
    let limited = ClientOptions { max_in_flight: 2, ..opts() };
    let c2 = Client::connect(&[nodes[0].client_addr()], limited).await.unwrap();
    let mut s2 = c2.open_session().await.unwrap();
    s2.submit(Op::get("k")).unwrap();
    s2.submit(Op::get("k")).unwrap();
    assert!(matches!(s2.submit(Op::get("k")), Err(ClientError::QueueFull(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_errors_say_what_happened() {
    let nodes = cluster(1).await;
    let addr = nodes[0].client_addr();
    let wrong = ClientOptions { cluster: ClusterId(99), ..opts() };
    let c = Client::connect(&[addr], wrong).await.unwrap();
    let err = c.open_session().await.err().expect("refused");
    // The node's answer reveals nothing of its own cluster (issue #17).
    assert!(
        matches!(&err, ClientError::WrongCluster { message, .. } if message == "wrong cluster"),
        "{err}"
    );

    let c = Client::connect(&[addr], opts()).await.unwrap();
    let mut s = c.open_session().await.unwrap();
    s.put("k", "v").await.unwrap();
    for n in nodes {
        n.shutdown().await;
    }
    let err = s.put("k", "w").await.unwrap_err();
    assert!(err.outcome_unknown(), "{err}");
    let err = c.open_session().await.err().expect("nothing to reconnect to");
    assert!(matches!(err, ClientError::Unreachable { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_fails_over_to_a_live_endpoint() {
    let mut nodes = cluster(3).await;
    let endpoints: Vec<SocketAddr> = nodes.iter().map(|n| n.client_addr()).collect();
    // Start at node 0 (first endpoint) by listing it alone first, then all.
    let c = Client::connect(&endpoints, opts()).await.unwrap();
    let first = c.node_addr().unwrap();
    let mut s = c.open_session().await.unwrap();
    s.put("k", "v").await.unwrap();
    let i = endpoints.iter().position(|a| *a == first).unwrap();
    nodes.remove(i).shutdown().await;
    // The session reconnects by itself, to a live node, and carries on (RIFL re-sends).
    let v = s.get("k").await.unwrap();
    assert_ne!(s.node_addr(), first, "the session moved to a live node");
    assert_ne!(c.node_addr().unwrap(), first, "reconnected elsewhere");
    let _ = v;
    let mut s = c.open_session().await.unwrap();
    // The write was broadcast before the node stopped (the cluster was healthy).
    let start = Instant::now();
    while s.get("k").await.unwrap().value.is_none() {
        assert!(start.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[test]
fn the_blocking_wrapper_works_without_a_runtime() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let nodes = rt.block_on(cluster(1));
    let c = blocking::Client::connect(&[nodes[0].client_addr()], opts()).unwrap();
    let mut s = c.open_session().unwrap();
    s.put("k", "v").unwrap();
    assert_eq!(s.get("k").unwrap().value.as_deref(), Some(&b"v"[..]));
    let id = s.submit(Op::delete("k")).unwrap();
    assert!(matches!(s.wait(id).unwrap(), Outcome::Written(_)));
    assert_eq!(s.get("k").unwrap().value, None);
    assert_eq!(c.status().unwrap().keys, 1);
    s.close().unwrap();
    drop(c);
    rt.block_on(async move {
        for n in nodes {
            n.shutdown().await;
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_outlives_its_client_handle_and_the_last_handle_closes_the_connection() {
    let nodes = cluster(1).await;
    let c = Client::connect_node(nodes[0].client_addr(), opts()).await.unwrap();
    let mut s = c.open_session().await.unwrap();
    drop(c);
    s.put("k", "v").await.unwrap();
    let probe = Client::connect_node(nodes[0].client_addr(), opts()).await.unwrap();
    assert_eq!(probe.status().await.unwrap().sessions, 1);
    drop(s);
    let start = Instant::now();
    while probe.status().await.unwrap().sessions != 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "dropping the last handle closes the connection and its sessions"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_acquire_faa_and_cas_through_the_client() {
    let nodes = cluster(3).await;
    let a = Client::connect_node(nodes[0].client_addr(), opts()).await.unwrap();
    let b = Client::connect_node(nodes[2].client_addr(), opts()).await.unwrap();
    let (mut sa, mut sb) = (a.open_session().await.unwrap(), b.open_session().await.unwrap());

    // Producer-consumer (Kite §4.1): relaxed fields, then a release; the acquirer sees them.
    for i in 0..10u32 {
        sa.put(format!("field{i}"), i.to_string()).await.unwrap();
    }
    let rel = sa.release("flag", "go").await.unwrap();
    let got = sb.acquire("flag").await.unwrap();
    assert_eq!(
        (got.value.as_deref(), got.version),
        (Some(&b"go"[..]), rel),
        "an acquire after a release returns it"
    );
    for i in 0..10u32 {
        assert_eq!(
            sb.get(format!("field{i}")).await.unwrap().value,
            Some(Bytes::from(i.to_string()))
        );
    }

    // Fetch-and-add from two nodes, pipelined: every old value distinct, the sum exact.
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push((0, sa.submit(Op::faa("ctr", 1)).unwrap()));
        ids.push((1, sb.submit(Op::faa("ctr", 1)).unwrap()));
    }
    let mut olds = Vec::new();
    for (who, id) in ids {
        let s = if who == 0 { &mut sa } else { &mut sb };
        match s.wait(id).await.unwrap() {
            Outcome::Rmw(r) => olds.push(r.faa_old(1).unwrap()),
            other => panic!("{other:?}"),
        }
    }
    olds.sort_unstable();
    assert_eq!(olds, (0..40).collect::<Vec<u64>>());
    assert_eq!(sa.faa("ctr", 0).await.unwrap(), 40);
    // Counters are decimal text (issue #18): readable as written, and a put makes one.
    assert_eq!(sa.get("ctr").await.unwrap().value.as_deref(), Some(&b"40"[..]));
    sa.put("ten", "10").await.unwrap();
    // (The same session: the FAA's barrier covers the put, Kite §5.6 M2.)
    assert_eq!(sa.faa("ten", 5).await.unwrap(), 10);
    assert_eq!(sa.get("ten").await.unwrap().value.as_deref(), Some(&b"15"[..]));
    // An FAA on something else changes nothing and says why.
    sa.put("name", "alice").await.unwrap();
    match sa.faa("name", 1).await {
        Err(ClientError::InvalidArgument(m)) => assert!(m.contains("not a counter"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(sa.get("name").await.unwrap().value.as_deref(), Some(&b"alice"[..]));
    sa.put("top", u64::MAX.to_string()).await.unwrap();
    assert!(matches!(sa.faa("top", 1).await, Err(ClientError::InvalidArgument(_))));

    // Compare-and-swap as a lock: only the first of two contenders gets it.
    let first = sa.cas("lock", None, "a", false).await.unwrap();
    let second = sb.cas("lock", None, "b", false).await.unwrap();
    assert!(first.swapped && first.written.is_some());
    assert!(!second.swapped);
    assert_eq!(
        second.observed.value.as_deref(),
        Some(&b"a"[..]),
        "a failed CAS reports the value it saw"
    );
    // A weak CAS that fails locally completes without a version.
    let weak = sb.cas("lock", Some(Bytes::from_static(b"zzz")), "b", true).await.unwrap();
    assert!(!weak.swapped && weak.written.is_none());
}

/// A node that shuts down gracefully tells its clients first with a push
/// (`push_topic::NODE_STOPPING`, correlation number 0), which `Client::subscribe_pushes`
/// delivers; the data stays served by the rest of the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_node_pushes_a_notice_to_its_clients() {
    let mut nodes = cluster(3).await;
    let first = nodes[0].client_addr();
    let endpoints: Vec<SocketAddr> = nodes.iter().map(|n| n.client_addr()).collect();
    let client = Client::connect_node(first, opts()).await.unwrap();
    let mut pushes = client.subscribe_pushes();
    let mut s = client.open_session().await.unwrap();
    s.put("k", "v").await.unwrap();
    nodes.remove(0).shutdown().await;
    let push = tokio::time::timeout(Duration::from_secs(5), pushes.recv())
        .await
        .expect("a push before the connection closed")
        .expect("the channel is open");
    assert_eq!(push.node, first);
    assert_eq!(push.topic, strata_client::push_topic::NODE_STOPPING);
    assert_eq!(push.body.as_ref(), 0u32.to_le_bytes(), "the node names itself");
    // The rest of the cluster still serves a client that knows it.
    let other = Client::connect(&endpoints[1..], opts()).await.unwrap();
    assert_eq!(
        other.open_session().await.unwrap().get("k").await.unwrap().value.as_deref(),
        Some(&b"v"[..])
    );
}
