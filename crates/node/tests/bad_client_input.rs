//! Hostile or broken client input (issue item 10, server side): every case gets a clear error
//! code, is counted in `bad_client_frames`, leaves the node serving, and loses no data.

#[macro_use]
mod common;

use bytes::{BufMut, Bytes, BytesMut};
use common::*;
use strata_node::RunningNode;
use strata_wire::client::{request_tag, ClientRequest, ErrorCode, Request, Response};
use strata_wire::ClusterId;

/// A single node holding `k = v`, written before any bad input arrives.
async fn node_with_data() -> (RunningNode, Session) {
    let node = cluster(1).await.pop().unwrap();
    let mut s = Session::open(node.client_addr()).await;
    s.put("k", b"v").await;
    (node, s)
}

/// The node still serves well-formed requests (on a new connection) and `k = v` is intact.
async fn assert_healthy(node: &RunningNode, bad_frames: u64) {
    let mut s = Session::open(node.client_addr()).await;
    assert_eq!(s.get("k").await.as_deref(), Some(&b"v"[..]), "previously written data is intact");
    s.put("k2", b"after").await;
    assert_eq!(s.get("k2").await.as_deref(), Some(&b"after"[..]));
    assert_eq!(s.conn.status().await.bad_client_frames, bad_frames);
}

/// A request payload: tag, corr, then `rest`.
fn payload(tag: u8, corr: u64, rest: &[u8]) -> Raw {
    let mut v = vec![tag];
    v.extend_from_slice(&corr.to_le_bytes());
    v.extend_from_slice(rest);
    Raw(v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_payload_gets_malformed_with_its_corr_and_the_connection_lives_on() {
    let (node, mut s) = node_with_data().await;
    // A PUT whose fields stop half-way through the session id.
    s.conn.send_raw(&frame(CLUSTER, &payload(request_tag::PUT, 41, &[1, 2, 3]))).await;
    let resp = s.conn.recv().await.expect("an answer, not a hang-up");
    assert_eq!(resp.corr, 41, "the error echoes the request's correlation number");
    let msg = expect_error(&resp, ErrorCode::Malformed);
    assert!(msg.contains("truncated"), "{msg}");
    // A payload too short to carry a correlation number is answered with corr 0.
    s.conn.send_raw(&frame(CLUSTER, &Raw(vec![request_tag::GET, 1]))).await;
    let resp = s.conn.recv().await.unwrap();
    assert_eq!(resp.corr, 0);
    expect_error(&resp, ErrorCode::Malformed);
    // Trailing bytes after a valid request are malformed too.
    let mut b = BytesMut::new();
    strata_wire::Encode::encode(
        &ClientRequest { corr: 43, rifl: None, body: Request::Status },
        &mut b,
    );
    b.put_u8(0xaa);
    s.conn.send_raw(&frame(CLUSTER, &Raw(b.to_vec()))).await;
    expect_error(&s.conn.recv().await.unwrap(), ErrorCode::Malformed);
    // Same connection, same session: still works.
    assert_eq!(s.get("k").await.as_deref(), Some(&b"v"[..]));
    assert_healthy(&node, 3).await;
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checksum_mismatch_gets_malformed_and_the_connection_lives_on() {
    let (node, mut s) = node_with_data().await;
    let mut f = frame(CLUSTER, &ClientRequest { corr: 5, rifl: None, body: Request::Status });
    let last = f.len() - 1;
    f[last] ^= 0xff;
    s.conn.send_raw(&f).await;
    let msg = expect_error(&s.conn.recv().await.unwrap(), ErrorCode::Malformed);
    assert!(msg.contains("checksum"), "{msg}");
    assert_eq!(s.get("k").await.as_deref(), Some(&b"v"[..]));
    assert_healthy(&node, 1).await;
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_cluster_gets_wrong_cluster_and_the_connection_is_closed() {
    let (node, _s) = node_with_data().await;
    let mut c = Conn::connect(node.client_addr()).await;
    let other = ClusterId(0xbad);
    c.send_raw(&frame(other, &ClientRequest { corr: 9, rifl: None, body: Request::OpenSession }))
        .await;
    // Issue #17: a client of another cluster learns nothing about this one, not even its id:
    // the answer is framed with the client's own cluster id and says only "wrong cluster".
    c.cluster = other;
    let msg = expect_error(&c.recv().await.unwrap(), ErrorCode::WrongCluster);
    assert_eq!(msg, "wrong cluster");
    assert!(c.closed_by_node().await, "a client of another cluster is refused");
    assert_healthy(&node, 1).await;
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_tag_gets_unknown_request_with_its_corr() {
    let (node, mut s) = node_with_data().await;
    // 0x3e is in the request range but unassigned; 0x81 is a peer tag sent to the client port.
    s.conn.send_raw(&frame(CLUSTER, &payload(0x3e, 77, b"future fields"))).await;
    let resp = s.conn.recv().await.unwrap();
    assert_eq!(resp.corr, 77);
    let msg = expect_error(&resp, ErrorCode::UnknownRequest);
    assert!(msg.contains("0x3e"), "{msg}");
    s.conn.send_raw(&frame(CLUSTER, &payload(0x81, 78, &[]))).await;
    let resp = s.conn.recv().await.unwrap();
    assert_eq!(resp.corr, 78);
    expect_error(&resp, ErrorCode::UnknownRequest);
    assert_eq!(s.get("k").await.as_deref(), Some(&b"v"[..]), "the connection lives on");
    assert_healthy(&node, 2).await;
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_frame_gets_frame_too_large_and_the_connection_is_closed() {
    let (node, _s) = node_with_data().await;
    let mut c = Conn::connect(node.client_addr()).await;
    // A length prefix just beyond the 16 MiB default limit, and some of the "body" after it:
    // the node must answer without reading (or allocating) the announced 16 MiB.
    let mut f = Vec::new();
    f.extend_from_slice(&((16u32 << 20) - 3).to_le_bytes());
    f.extend_from_slice(&[0u8; 4096]);
    c.send_raw(&f).await;
    let msg = expect_error(&c.recv().await.unwrap(), ErrorCode::FrameTooLarge);
    assert!(msg.contains("16777217") && msg.contains("16777216"), "{msg}");
    assert!(c.closed_by_node().await, "frame boundaries are lost: the connection is closed");

    // A length prefix too small to hold a frame header: malformed, also fatal.
    let mut c = Conn::connect(node.client_addr()).await;
    c.send_raw(&3u32.to_le_bytes()).await;
    expect_error(&c.recv().await.unwrap(), ErrorCode::Malformed);
    assert!(c.closed_by_node().await);
    assert_healthy(&node, 2).await;
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_value_gets_value_too_large_and_writes_nothing() {
    let (node, mut s) = node_with_data().await;
    let big = Bytes::from(vec![7u8; (1 << 20) + 1]);
    let r = s
        .conn
        .call(Request::Put { session: s.id, key: Bytes::from_static(b"k"), value: big })
        .await;
    match r {
        Response::Error { code: ErrorCode::ValueTooLarge, message } => {
            assert!(message.contains("1048577"), "{message}")
        }
        other => panic!("expected ValueTooLarge, got {other:?}"),
    }
    // Exactly at the limit is fine (on another key, so `k` stays as it was).
    let ok = Bytes::from(vec![7u8; 1 << 20]);
    let r = s
        .conn
        .call(Request::Put { session: s.id, key: Bytes::from_static(b"big"), value: ok })
        .await;
    assert!(matches!(r, Response::Written { .. }), "{r:?}");
    assert_eq!(s.get("k").await.as_deref(), Some(&b"v"[..]), "the rejected write had no effect");
    // An oversized value is a well-formed frame: not counted as a bad frame.
    assert_healthy(&node, 0).await;
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_good_and_bad_requests_are_answered_in_order() {
    let (node, mut s) = node_with_data().await;
    let mut bytes = frame(
        CLUSTER,
        &ClientRequest {
            corr: 100,
            rifl: None,
            body: Request::Get { session: s.id, key: Bytes::from_static(b"k") },
        },
    );
    bytes.extend(frame(CLUSTER, &payload(0x3d, 101, &[])));
    bytes.extend(frame(CLUSTER, &ClientRequest { corr: 102, rifl: None, body: Request::Status }));
    // Oversized-length garbage last: everything before it is still answered, then the close.
    bytes.extend_from_slice(&u32::MAX.to_le_bytes());
    s.conn.send_raw(&bytes).await;
    let corrs: Vec<u64> = [
        s.conn.recv().await.unwrap(),
        s.conn.recv().await.unwrap(),
        s.conn.recv().await.unwrap(),
        s.conn.recv().await.unwrap(),
    ]
    .iter()
    .map(|r| r.corr)
    .collect();
    assert_eq!(corrs, vec![100, 101, 102, 0]);
    assert!(s.conn.closed_by_node().await);
    assert_healthy(&node, 2).await;
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_garbage_never_takes_the_node_down() {
    let (node, _s) = node_with_data().await;
    let mut seed = 0x1234_5678_9abc_def0u64;
    for round in 0..20 {
        let mut c = Conn::connect(node.client_addr()).await;
        let mut g = Vec::new();
        for _ in 0..(64 + round * 37) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            g.push(seed as u8);
        }
        c.send_raw(&g).await;
        // Whatever the node says (if anything) it says with valid frames, then it closes or waits.
        drop(c);
    }
    let mut c = Conn::connect(node.client_addr()).await;
    assert!(c.status().await.bad_client_frames >= 1);
    let mut s = Session::open(node.client_addr()).await;
    assert_eq!(s.get("k").await.as_deref(), Some(&b"v"[..]));
    node.shutdown().await;
}
