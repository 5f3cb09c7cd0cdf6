//! Hostile or broken peer input: counted in `bad_peer_frames`, dropped, never a crash; a good
//! message after bad ones on the same connection is still applied (and acknowledged).

#[macro_use]
mod common;

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use common::*;
use strata_node::PeerConfig;
use strata_wire::peer::{peer_tag, PeerMessage, Write};
use strata_wire::{decode_frame, decode_message, Carstamp, ClusterId, Llc, NodeId};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn write_msg(key: &str, value: &str, ver: u64) -> PeerMessage {
    PeerMessage::Write(Write {
        req: ver,
        key: Bytes::copy_from_slice(key.as_bytes()),
        value: Some(Bytes::copy_from_slice(value.as_bytes())),
        cs: Carstamp { llc: Llc { ver, node: NodeId(1) }, pno: 0 },
        rmw_id: None,
        acq: None,
        records: Default::default(),
    })
}

/// Reads until the node closes the connection; panics if it keeps it open.
async fn assert_closed_by_node(s: &mut TcpStream) {
    let mut buf = [0u8; 256];
    let r = tokio::time::timeout(DEADLINE, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(r.is_ok(), "the node kept a bad peer connection open");
}

async fn bad_peer_frames(c: &mut Conn) -> u64 {
    c.status().await.bad_peer_frames
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_peer_frames_are_counted_and_dropped() {
    // Node 0's peers 1 and 2 are played by this test.
    let fake1 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let fake2 = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let peers = vec![
        PeerConfig { id: 1, addr: fake1.local_addr().unwrap() },
        PeerConfig { id: 2, addr: fake2.local_addr().unwrap() },
    ];
    let (cl, pl) = (
        std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
        std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
    );
    let node = strata_node::start_with_listeners(config(0, peers), cl, pl).await.unwrap();
    let mut admin = Conn::connect(node.client_addr()).await;
    let mut s = Session::open(node.client_addr()).await;

    // ---- one connection: a valid hello, then bad frames of every non-fatal kind ----
    let mut a = TcpStream::connect(node.peer_addr()).await.unwrap();
    let mut bytes = frame(CLUSTER, &PeerMessage::Hello { from: NodeId(1) });
    let mut corrupt = frame(CLUSTER, &write_msg("x", "corrupt", 5));
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0x55;
    bytes.extend(corrupt); // 1: checksum
    bytes.extend(frame(ClusterId(77), &write_msg("x", "foreign", 5))); // 2: wrong cluster
    bytes.extend(frame(CLUSTER, &Raw(vec![0xfe, 1, 2, 3]))); // 3: unknown tag
    bytes.extend(frame(CLUSTER, &Raw(vec![peer_tag::WRITE, 1, 2]))); // 4: truncated fields
    bytes.extend(frame(CLUSTER, &write_msg("", "empty key", 5))); // 5: refused by the core
    bytes.extend(frame(CLUSTER, &write_msg("pk", "from-1", 100))); // good
    a.write_all(&bytes).await.unwrap();

    s.await_value("pk", b"from-1").await;
    eventually!("five bad frames counted", (bad_peer_frames(&mut admin).await == 5).then_some(()));
    assert_eq!(s.get("x").await, None, "no bad frame had an effect");

    // The same connection still delivers.
    a.write_all(&frame(CLUSTER, &write_msg("pk2", "still-open", 101))).await.unwrap();
    s.await_value("pk2", b"still-open").await;

    // A length prefix beyond the limit is fatal for that connection only.
    a.write_all(&u32::MAX.to_le_bytes()).await.unwrap();
    assert_closed_by_node(&mut a).await;
    assert_eq!(bad_peer_frames(&mut admin).await, 6);

    // ---- handshakes that are refused: each counted, each connection closed ----
    let refused: Vec<(&str, Vec<u8>)> = vec![
        ("no hello first", frame(CLUSTER, &write_msg("y", "no-hello", 7))),
        ("hello from an unknown node", frame(CLUSTER, &PeerMessage::Hello { from: NodeId(9) })),
        ("hello from itself", frame(CLUSTER, &PeerMessage::Hello { from: NodeId(0) })),
        (
            "hello from another cluster",
            frame(ClusterId(2), &PeerMessage::Hello { from: NodeId(1) }),
        ),
        ("garbage", vec![0x10, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]),
    ];
    for (i, (what, bytes)) in refused.iter().enumerate() {
        let mut c = TcpStream::connect(node.peer_addr()).await.unwrap();
        c.write_all(bytes).await.unwrap();
        // Whatever follows a refused handshake is never applied.
        let _ = c.write_all(&frame(CLUSTER, &write_msg("y", "after-refusal", 8))).await;
        assert_closed_by_node(&mut c).await;
        assert_eq!(bad_peer_frames(&mut admin).await, 7 + i as u64, "{what}");
    }
    assert_eq!(s.get("y").await, None);

    // ---- node 0 acknowledged the good writes to "node 1" over its own outbound link ----
    let (mut out, _) = tokio::time::timeout(DEADLINE, fake1.accept()).await.unwrap().unwrap();
    let mut buf = BytesMut::new();
    let mut acked = Vec::new();
    let mut hello = None;
    tokio::time::timeout(DEADLINE, async {
        loop {
            while let Some(p) = decode_frame(&mut buf, CLUSTER, 1 << 20).unwrap() {
                match decode_message::<PeerMessage>(p).unwrap() {
                    PeerMessage::Hello { from } => hello = Some(from),
                    PeerMessage::WriteAck(ack) => acked.push((ack.key, ack.cs.llc.ver)),
                    other => panic!("unexpected {other:?}"),
                }
            }
            if acked.len() >= 2 {
                break;
            }
            assert!(out.read_buf(&mut buf).await.unwrap() > 0);
        }
    })
    .await
    .expect("acks from node 0");
    assert_eq!(hello, Some(NodeId(0)), "an outbound link opens with Hello from its node");
    assert_eq!(acked, vec![(Bytes::from_static(b"pk"), 100), (Bytes::from_static(b"pk2"), 101)]);

    // ---- and the node still serves clients ----
    s.put("k", b"v").await;
    assert_eq!(s.get("k").await.as_deref(), Some(&b"v"[..]));
    assert_eq!(admin.status().await.bad_client_frames, 0);
    tokio::time::timeout(Duration::from_secs(5), node.shutdown()).await.expect("shutdown in time");
}
