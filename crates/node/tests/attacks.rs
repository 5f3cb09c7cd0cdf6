//! Issue 17's attacks on protocol fields, replayed against real nodes on loopback: a client
//! whose RIFL lease carries a timestamp at the clock's end, and a peer that passed
//! authentication but sends a vote at the last epoch and a write at the last version (the
//! test cluster runs plaintext, where a `Hello` naming a peer is what authentication is).
//! Each checks that the nodes stay up, keep their data and answer other clients within a
//! bound; each fails with its guard removed (`LeaseValidator::check`, `LogReplica::
//! message_ok`, `RcReplica::peer_message_ok`; the simulator's `host_attacks` has the same
//! attacks against the host core).

#[macro_use]
mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use strata_wire::client::{table_id, ClientRequest, ErrorCode, Request, Response};
use strata_wire::log::LogMessage;
use strata_wire::peer::{PeerMessage, Write};
use strata_wire::rifl::{ClusterTime, LeaseInfo, LeaseStatus, Rifl, RpcId};
use strata_wire::{Carstamp, Llc, NodeId};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// A lease from the service, through node `conn` (retried while `__leases` elects).
async fn grant(conn: &mut Conn) -> LeaseStatus {
    let start = Instant::now();
    loop {
        if let Response::Lease(g) = conn.call(Request::RenewLease { lease_id: 0 }).await {
            return g;
        }
        assert!(start.elapsed() < DEADLINE, "no lease granted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn envelope(g: &LeaseStatus, seq: u64) -> Rifl {
    Rifl {
        rpc: RpcId { client_id: g.lease_id, seq },
        first_incomplete: seq,
        lease: LeaseInfo {
            client_id: g.lease_id,
            expiration: g.expiration,
            timestamp: g.cluster_time,
        },
    }
}

fn put(s: &Session, key: &str, value: &str) -> Request {
    Request::Put {
        session: s.id,
        key: Bytes::copy_from_slice(key.as_bytes()),
        value: Bytes::copy_from_slice(value.as_bytes()),
    }
}

/// "One request whose RIFL lease carried `timestamp = u64::MAX − 1` was executed; afterwards
/// writes at that node hung for 30 s despite `--timeout 5`, two nodes exchanged lease queries
/// forever, and the node running the lease service aborted with a stack overflow."
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_timestamp_at_the_clocks_end_is_refused_and_writes_go_on() {
    let nodes = cluster(3).await;
    let mut admin = Conn::connect(nodes[0].client_addr()).await;
    let g = grant(&mut admin).await;
    let forged = Rifl {
        rpc: RpcId { client_id: 4242, seq: 1 },
        first_incomplete: 1,
        lease: LeaseInfo {
            client_id: 4242,
            expiration: ClusterTime(u64::MAX),
            timestamp: ClusterTime(u64::MAX - 1),
        },
    };
    for (i, node) in nodes.iter().enumerate() {
        let mut evil = Session::open(node.client_addr()).await;
        let mut req = ClientRequest::new(1, put(&evil, "k", "evil"));
        req.rifl = Some(forged);
        evil.conn.send(&req).await;
        let resp = evil.conn.recv().await.expect("an answer");
        expect_error(&resp, ErrorCode::BadEnvelope);
        // Every node still takes a genuine client's writes at once.
        let mut good = Session::open(node.client_addr()).await;
        let mut req = ClientRequest::new(1, put(&good, "k", "good"));
        req.rifl = Some(envelope(&g, 1 + i as u64));
        let start = Instant::now();
        good.conn.send(&req).await;
        let resp = good.conn.recv().await.expect("an answer");
        assert!(matches!(resp.body, Response::Written { .. }), "n{i}: {resp:?}");
        assert!(start.elapsed() < Duration::from_secs(1), "n{i} held a genuine write");
        assert_eq!(good.get("k").await.as_deref(), Some(&b"good"[..]));
    }
    // No storm of lease questions: the nodes stay quiet and up, and count the refusal.
    for (i, node) in nodes.iter().enumerate() {
        let status = Conn::connect(node.client_addr()).await.status().await;
        assert_eq!(status.node, NodeId(i as u32));
        assert_eq!(status.connections.invalid_envelopes, 1, "n{i}");
    }
}

/// A connection to `node`'s peer port that says it is node `from` (accepted in plaintext:
/// the peer is "authenticated"), then sends `msgs`.
async fn as_peer(peer_addr: std::net::SocketAddr, from: u32, msgs: &[PeerMessage]) -> TcpStream {
    let mut s = TcpStream::connect(peer_addr).await.unwrap();
    let mut bytes = frame(CLUSTER, &PeerMessage::Hello { from: NodeId(from) });
    for m in msgs {
        bytes.extend(frame(CLUSTER, m));
    }
    s.write_all(&bytes).await.unwrap();
    s
}

/// "One forged 25-byte vote response carrying epoch `u32::MAX` for `__leases` made every node
/// persist that epoch: no leader, all writes failing cluster-wide, also after a full
/// restart." And: "a forged version `u64::MAX` followed by one normal put made the node panic
/// and exit."
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_at_the_last_epoch_and_a_write_at_the_last_version_change_nothing() {
    let nodes = cluster(3).await;
    let mut admin = Conn::connect(nodes[0].client_addr()).await;
    grant(&mut admin).await; // the lease service serves
    let vote = PeerMessage::Shard {
        table: table_id("__leases"),
        shard: 0,
        generation: 0,
        msg: LogMessage::VoteResp { epoch: u32::MAX, granted: true },
    };
    let write = PeerMessage::Write(Write {
        req: 1,
        key: Bytes::from_static(b"v"),
        value: Some(Bytes::from_static(b"evil")),
        cs: Carstamp { llc: Llc { ver: u64::MAX, node: NodeId(1) }, pno: 0 },
        rmw_id: None,
        acq: None,
        records: Default::default(),
    });
    let mut held = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let from = (i as u32 + 1) % 3;
        held.push(as_peer(node.peer_addr(), from, &[vote.clone(), write.clone()]).await);
    }
    // The write is counted and dropped everywhere; no node adopted the epoch.
    for (i, node) in nodes.iter().enumerate() {
        let mut c = Conn::connect(node.client_addr()).await;
        eventually!(format!("n{i} counted the forged write"), {
            (c.status().await.bad_peer_frames >= 1).then_some(())
        });
        let status = c.status().await;
        let leases = status.shards.iter().find(|s| s.table == "__leases").expect("__leases");
        assert!(leases.epoch < 1 << 20, "n{i} adopted epoch {}", leases.epoch);
    }
    // Puts after the forged version work, at every node, and the lease service still grants
    // (its group elects and commits as before).
    for node in &nodes {
        let mut s = Session::open(node.client_addr()).await;
        let cs = s.put("v", b"good").await;
        assert!(cs.llc.ver < 1 << 20, "the forged version was never installed: {cs:?}");
        assert_eq!(s.get("v").await.as_deref(), Some(&b"good"[..]));
    }
    let mut c = Conn::connect(nodes[2].client_addr()).await;
    grant(&mut c).await;
    drop(held);
}
