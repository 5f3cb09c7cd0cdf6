//! Writes the seed corpus (`fuzz/corpus/<target>/seed-*`): one valid encoding of each kind of
//! request and peer message, in the targets' input format (a length byte, then the message),
//! so the fuzzers start from inputs that reach the cores, not only the decoders.
//! Run: `cargo run --example seeds` from `fuzz/`.

use bytes::{Bytes, BytesMut};
use strata_wire::client::{ClientRequest, LinkFault, LogWriteOp, Request};
use strata_wire::log::{LogIndex, LogMessage};
use strata_wire::peer::{KeyRecords, PeerMessage, Write};
use strata_wire::rifl::{ClusterTime, LeaseInfo, Rifl, RpcId};
use strata_wire::{Carstamp, Encode, Llc, NodeId, SessionId};

fn framed(msgs: &[&dyn Encode]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in msgs {
        let mut buf = BytesMut::new();
        m.encode(&mut buf);
        assert!(buf.len() < 256, "a seed message fits a length byte");
        out.push(buf.len() as u8);
        out.extend_from_slice(&buf);
    }
    out
}

fn write(dir: &str, name: &str, bytes: Vec<u8>) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(format!("{dir}/seed-{name}"), bytes).unwrap();
}

fn main() {
    let rifl = Rifl {
        rpc: RpcId { client_id: 5, seq: 1 },
        first_incomplete: 1,
        lease: LeaseInfo {
            client_id: 5,
            expiration: ClusterTime::from_millis(10_000),
            timestamp: ClusterTime::from_millis(1),
        },
    };
    let req = |corr, rifl, body| ClientRequest { corr, rifl, body };
    let s = SessionId { node: NodeId(0), index: 1 };
    let requests = [
        ("open-put", vec![
            req(1, None, Request::OpenSession),
            req(2, Some(rifl), Request::Put { session: s, key: Bytes::from("k"), value: Bytes::from("v") }),
            req(3, None, Request::Get { session: s, key: Bytes::from("k") }),
        ]),
        ("faa-cas", vec![
            req(1, None, Request::OpenSession),
            req(2, Some(rifl), Request::Faa { session: s, key: Bytes::from("c"), delta: 3 }),
            req(3, Some(rifl), Request::Cas { session: s, key: Bytes::from("c"), expected: None, new: Bytes::from("1"), weak: false }),
        ]),
        ("lease", vec![req(1, None, Request::RenewLease { lease_id: 0 }), req(2, None, Request::LeaseInfo { lease_id: 1 })]),
        ("log-write", vec![req(1, Some(rifl), Request::LogWrite { table: "__leases".into(), key: Bytes::from("k"), op: LogWriteOp::Put(Bytes::from("v")), immediate: true })]),
        ("log-read", vec![req(1, None, Request::LogRead { table: "__leases".into(), key: Bytes::from("k"), min_index: None, sharer: false, intent: strata_wire::txn::ReadIntent::Plain })]),
        ("log-read-many", vec![req(1, None, Request::LogReadMany { table: "t".into(), keys: vec![Bytes::from("a"), Bytes::from("b")], min_index: None, intent: strata_wire::txn::ReadIntent::TxnForUpdate { reserver: 7 } }), req(2, None, Request::ReleaseReservations { table: "t".into(), keys: vec![Bytes::from("a")], reserver: 7 })]),
        ("admin", vec![req(1, None, Request::SetFault { peer: Some(NodeId(1)), fault: LinkFault::default() }), req(2, None, Request::ListTables)]),
    ];
    for (name, reqs) in requests {
        let msgs: Vec<&dyn Encode> = reqs.iter().map(|r| r as &dyn Encode).collect();
        write("corpus/client_request", name, framed(&msgs));
    }
    let w = PeerMessage::Write(Write {
        req: 1,
        key: Bytes::from("k"),
        value: Some(Bytes::from("v")),
        cs: Carstamp { llc: Llc { ver: 1, node: NodeId(1) }, pno: 0 },
        rmw_id: None,
        acq: None,
        records: KeyRecords::default(),
    });
    let shard = |msg| PeerMessage::Shard { table: strata_wire::client::table_id("__leases"), shard: 0, generation: 0, msg };
    let peers = [
        ("write", vec![w]),
        ("vote", vec![shard(LogMessage::RequestVote { epoch: 2, last_index: LogIndex::new(1, 1) }), shard(LogMessage::VoteResp { epoch: 2, granted: true })]),
        ("lease", vec![PeerMessage::LeaseQuery { client_id: 5 }, PeerMessage::LeaseRenew { req: 1, lease_id: 0 }]),
    ];
    for (name, msgs) in peers {
        let msgs: Vec<&dyn Encode> = msgs.iter().map(|m| m as &dyn Encode).collect();
        write("corpus/peer_message", name, framed(&msgs));
    }
}
