//! Issue #17, items 1, 2 and 6: with TLS, a peer is the node its certificate names and a
//! client may do what its certificate's role allows. Every attack of the issue is replayed
//! here against real nodes on loopback, and each must leave the data as it was.

#[macro_use]
mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use strata_node::RunningNode;
use strata_tls::gen::{Ca, DEFAULT_CERT_DAYS};
use strata_tls::{ClientTls, NodeTls};
use strata_wire::client::{ErrorCode, LinkFault, Request, Response, TableDef};
use strata_wire::log::ShardMove;
use strata_wire::peer::{PeerMessage, Write};
use strata_wire::{Carstamp, Llc, NodeId, Role, SessionId};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// A cluster's TLS directory (`strata up`'s layout) with a reader and a writer certificate.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new(nodes: u32) -> Pki {
        let dir = temp_dir("tls");
        let ids: Vec<NodeId> = (0..nodes).map(NodeId).collect();
        strata_tls::gen::init_dir(&dir, &ids).unwrap();
        let ca = Ca::load(&dir).unwrap();
        for (role, name) in [(Role::Read, "reader"), (Role::Write, "writer")] {
            ca.issue_client(role, name, DEFAULT_CERT_DAYS).unwrap().write(&dir, name).unwrap();
        }
        Pki { dir }
    }

    fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A client presenting `name`'s certificate (`client` is the admin's).
    fn client(&self, name: &str) -> ClientTls {
        let (c, k) = (self.dir.join(format!("{name}.pem")), self.dir.join(format!("{name}.key")));
        ClientTls::load(&self.ca(), Some((&c, &k))).unwrap()
    }

    /// A client without a certificate.
    fn anonymous(&self) -> ClientTls {
        ClientTls::load(&self.ca(), None).unwrap()
    }

    /// Node `id`'s credentials, to play that node against the others.
    fn node(&self, id: u32) -> NodeTls {
        let f = |n: String| self.dir.join(n);
        NodeTls::load(
            NodeId(id),
            &self.ca(),
            &f(format!("node-{id}.pem")),
            &f(format!("node-{id}.key")),
        )
        .unwrap()
    }

    async fn cluster(&self, n: u32) -> Vec<RunningNode> {
        let dir: &Path = &self.dir;
        strata_node::testing::local_cluster_with(n, |c| strata_node::testing::use_tls(c, dir)).await
    }
}

/// A relaxed write as node `from` would send it, with a carstamp far above any real one.
fn forged_write(key: &str, value: &str, from: u32) -> PeerMessage {
    PeerMessage::Write(Write {
        req: 1,
        key: Bytes::copy_from_slice(key.as_bytes()),
        value: Some(Bytes::copy_from_slice(value.as_bytes())),
        cs: Carstamp { llc: Llc { ver: 1 << 40, node: NodeId(from) }, pno: 0 },
        rmw_id: None,
        acq: None,
        records: Default::default(),
    })
}

/// Hello from `claimed`, then a forged write of `key`.
fn forged_peer_frames(claimed: u32, key: &str, value: &str) -> Vec<u8> {
    let mut bytes = frame(CLUSTER, &PeerMessage::Hello { from: NodeId(claimed) });
    bytes.extend(frame(CLUSTER, &forged_write(key, value, claimed)));
    bytes
}

/// Whether the node closed `s` (EOF, reset or a failed TLS read) within the deadline.
async fn closed_by_node<S: AsyncRead + Unpin>(s: &mut S) -> bool {
    let mut buf = [0u8; 256];
    tokio::time::timeout(DEADLINE, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

async fn send<S: AsyncWrite + Unpin>(s: &mut S, bytes: &[u8]) {
    // The node may already have closed the connection: what matters is what it applied.
    let _ = s.write_all(bytes).await;
    let _ = s.flush().await;
}

/// A TLS cluster of 3 where node 0 holds `k = good`: a session and an admin connection at
/// node 0, and its count of bad peer frames so far.
async fn cluster_with_a_key(pki: &Pki) -> (Vec<strata_node::RunningNode>, Session, Conn, u64) {
    let nodes = pki.cluster(3).await;
    let addr = nodes[0].client_addr();
    let mut s = Session::open_on(Conn::connect_tls(addr, &pki.client("client")).await).await;
    s.put("k", b"good").await;
    let mut admin = Conn::connect_tls(addr, &pki.client("client")).await;
    let bad_before = admin.status().await.bad_peer_frames;
    (nodes, s, admin, bad_before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_peer_frames_without_a_node_certificate_are_refused() {
    let pki = Pki::new(3);
    let (nodes, mut s, mut admin, bad_before) = cluster_with_a_key(&pki).await;
    let n0 = &nodes[0];

    // 1. The issue's attack as it was: plain TCP, a Hello naming a configured node, a write.
    let mut plain = TcpStream::connect(n0.peer_addr()).await.unwrap();
    send(&mut plain, &forged_peer_frames(1, "k", "forged-plain")).await;
    assert!(closed_by_node(&mut plain).await, "a peer connection without TLS is refused");

    // 2. TLS without a certificate.
    let tcp = TcpStream::connect(n0.peer_addr()).await.unwrap();
    if let Ok(mut tls) = pki.anonymous().connect(tcp).await {
        send(&mut tls, &forged_peer_frames(1, "k", "forged-anonymous")).await;
        assert!(closed_by_node(&mut tls).await, "a peer without a certificate is refused");
    }

    // 3. TLS with a certificate of the cluster's CA that names no node: the admin client's.
    let tcp = TcpStream::connect(n0.peer_addr()).await.unwrap();
    if let Ok(mut tls) = pki.client("client").connect(tcp).await {
        send(&mut tls, &forged_peer_frames(1, "k", "forged-client-cert")).await;
        assert!(closed_by_node(&mut tls).await, "a client certificate does not make a peer");
    }

    // Each refused and counted; the node is up and its data intact.
    eventually!(
        "three refused peer connections counted",
        (admin.status().await.bad_peer_frames >= bad_before + 3).then_some(())
    );
    assert_eq!(s.get("k").await.as_deref(), Some(&b"good"[..]), "no forged write was applied");
    // The real peers still replicate: a write at node 0 reaches node 2.
    s.put("k2", b"replicated").await;
    let mut s2 =
        Session::open_on(Conn::connect_tls(nodes[2].client_addr(), &pki.client("client")).await)
            .await;
    s2.await_value("k2", b"replicated").await;
    assert_eq!(s2.get("k").await.as_deref(), Some(&b"good"[..]));
    for n in nodes {
        tokio::time::timeout(Duration::from_secs(5), n.shutdown()).await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_whose_certificate_names_another_node_than_its_hello_is_refused() {
    let pki = Pki::new(3);
    let (nodes, mut s, mut admin, bad_before) = cluster_with_a_key(&pki).await;
    let n0 = &nodes[0];
    let node2 = pki.node(2);

    // Node 2's certificate, a Hello claiming node 1: refused, nothing applied.
    let tcp = TcpStream::connect(n0.peer_addr()).await.unwrap();
    let mut liar = node2.connect_peer(NodeId(0), tcp).await.expect("node 2's certificate is valid");
    send(&mut liar, &forged_peer_frames(1, "k", "forged-as-node-1")).await;
    assert!(closed_by_node(&mut liar).await, "a Hello that disagrees with the certificate");
    eventually!(
        "the refused hello counted",
        (admin.status().await.bad_peer_frames > bad_before).then_some(())
    );

    // The same certificate with a Hello that agrees is a peer (so the refusal above was the
    // disagreement, not the test's TLS): its write of another key arrives.
    let tcp = TcpStream::connect(n0.peer_addr()).await.unwrap();
    let mut honest = node2.connect_peer(NodeId(0), tcp).await.unwrap();
    send(&mut honest, &forged_peer_frames(2, "from-2", "as-node-2")).await;
    s.await_value("from-2", b"as-node-2").await;
    assert_eq!(s.get("k").await.as_deref(), Some(&b"good"[..]), "the lie was never applied");
    drop(honest);
    for n in nodes {
        tokio::time::timeout(Duration::from_secs(5), n.shutdown()).await.expect("shutdown");
    }
}

fn put(session: SessionId, key: &str, value: &str) -> Request {
    Request::Put {
        session,
        key: Bytes::from(key.to_string()),
        value: Bytes::from(value.to_string()),
    }
}

/// Every request of the issue's client-side attacks: writes, faults, tables, a shard move
/// and an adoption carrying a made-up placement.
fn attacks(session: SessionId) -> Vec<(&'static str, Request, Role)> {
    let table = TableDef {
        name: "stolen".into(),
        engine: strata_wire::client::TableEngine::Log,
        durability: strata_wire::client::TableDurability::Sync,
        replication: strata_wire::client::TableReplication::Sync,
        reads: strata_wire::client::TableReads::Leader,
        shards: 1,
        timers: Default::default(),
        leaders: Vec::new(),
        txn: Default::default(),
        validation: Default::default(),
    };
    vec![
        ("put", put(session, "k", "overwritten"), Role::Write),
        ("delete", Request::Delete { session, key: Bytes::from("k") }, Role::Write),
        ("partition", Request::SetFault { peer: None, fault: partition() }, Role::Admin),
        ("create table", Request::CreateTable { def: table }, Role::Admin),
        (
            "freeze shard",
            Request::FreezeShard { table: "t".into(), shard: 0, replicas: vec![NodeId(0)] },
            Role::Admin,
        ),
        (
            "adopt shard",
            Request::AdoptShard {
                table: "t".into(),
                shard: 0,
                placement: ShardMove { generation: 9, replicas: vec![NodeId(0)] },
                snapshot: Some(Default::default()),
            },
            Role::Admin,
        ),
    ]
}

fn partition() -> LinkFault {
    LinkFault { partitioned: true, ..LinkFault::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_may_do_what_their_certificates_role_allows_and_nothing_else() {
    let pki = Pki::new(1);
    let nodes = pki.cluster(1).await;
    let addr = nodes[0].client_addr();
    let mut admin = Session::open_on(Conn::connect_tls(addr, &pki.client("client")).await).await;
    admin.put("k", b"good").await;
    let sid = admin.id;

    // No certificate: nothing at all, not even a session or a status.
    let mut anon = Conn::connect_tls(addr, &pki.anonymous()).await;
    for req in [Request::OpenSession, Request::Status] {
        match anon.call(req).await {
            Response::Error { code: ErrorCode::Unauthenticated, message } => {
                assert!(message.contains("client certificate"), "{message}")
            }
            other => panic!("an anonymous client got {other:?}"),
        }
    }
    for (what, req, _) in attacks(sid) {
        match anon.call(req).await {
            Response::Error { code: ErrorCode::Unauthenticated, .. } => {}
            other => panic!("anonymous {what}: {other:?}"),
        }
    }

    // Each role: refused (Forbidden, naming the role needed) above its level, served at it.
    for (name, role) in [("reader", Role::Read), ("writer", Role::Write)] {
        let mut s = Session::open_on(Conn::connect_tls(addr, &pki.client(name)).await).await;
        assert_eq!(s.get("k").await.as_deref(), Some(&b"good"[..]), "{name} reads");
        for (what, req, needed) in attacks(s.id) {
            let r = s.conn.call(req).await;
            if role >= needed {
                continue;
            }
            match r {
                Response::Error { code: ErrorCode::Forbidden, message } => {
                    assert!(message.contains(&format!("needs the {needed} role")), "{message}");
                }
                other => panic!("{name} ({role}) {what}: {other:?}"),
            }
        }
        assert!(s.conn.call(Request::Status).await.is_status(), "{name} may see status");
    }
    // The writer's put and delete went through; put the value back as the writer.
    let mut w = Session::open_on(Conn::connect_tls(addr, &pki.client("writer")).await).await;
    assert_eq!(w.get("k").await, None, "the writer deleted k (after its put)");
    w.put("k", b"good").await;

    // Nothing an anonymous or read client sent took effect; the refusals are counted.
    let status = admin.conn.status().await;
    assert!(status.peers.iter().all(|p| p.fault.is_clear()), "no fault was set");
    assert!(status.connections.forbidden >= 2, "{:?}", status.connections);
    assert_eq!(admin.conn.call(Request::ListTables).await, Response::Tables(Vec::new()));

    // The admin may do it all.
    admin.conn.set_fault(None, LinkFault::default()).await;
    let created = admin.conn.call(attacks(sid).swap_remove(3).1).await;
    assert_eq!(created, Response::TableCreated { created: true });
    for n in nodes {
        tokio::time::timeout(Duration::from_secs(5), n.shutdown()).await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_client_of_a_tls_node_is_told_to_use_tls() {
    let pki = Pki::new(1);
    let nodes = pki.cluster(1).await;
    let mut plain = Conn::connect(nodes[0].client_addr()).await;
    plain.send(&strata_wire::client::ClientRequest::new(1, Request::OpenSession)).await;
    let resp = plain.recv().await.expect("an answer before the close");
    let message = expect_error(&resp, ErrorCode::Unauthenticated);
    assert!(message.contains("requires TLS"), "{message}");
    assert!(plain.closed_by_node().await);
    for n in nodes {
        tokio::time::timeout(Duration::from_secs(5), n.shutdown()).await.expect("shutdown");
    }
}

trait IsStatus {
    fn is_status(&self) -> bool;
}

impl IsStatus for Response {
    fn is_status(&self) -> bool {
        matches!(self, Response::Status(_))
    }
}
