//! The client library against TLS nodes (issue #17): the admin certificate `strata up` makes
//! does everything; a read-only, an anonymous and a plain client get clear, typed refusals at
//! once (never a retry loop); a client of another CA is told its TLS failed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use strata_client::{
    Client, ClientError, ClientOptions, ClientTls, LinkFault, TableDef, TableDurability,
    TableEngine, TableReads, TableReplication,
};
use strata_node::RunningNode;
use strata_tls::gen::{Ca, DEFAULT_CERT_DAYS};
use strata_wire::{NodeId, Role};

/// A TLS directory laid out like `strata up`'s, with a reader's certificate besides.
fn pki(nodes: u32) -> PathBuf {
    let dir = strata_node::testing::temp_dir("client-tls");
    let ids: Vec<NodeId> = (0..nodes).map(NodeId).collect();
    strata_tls::gen::init_dir(&dir, &ids).unwrap();
    let ca = Ca::load(&dir).unwrap();
    ca.issue_client(Role::Read, "reader", DEFAULT_CERT_DAYS)
        .unwrap()
        .write(&dir, "reader")
        .unwrap();
    dir
}

async fn cluster(n: u32, dir: &Path) -> Vec<RunningNode> {
    strata_node::testing::local_cluster_with(n, |c| strata_node::testing::use_tls(c, dir)).await
}

fn opts(tls: Option<ClientTls>) -> ClientOptions {
    ClientOptions {
        request_timeout: Some(Duration::from_secs(10)),
        retry_for: Duration::from_secs(5),
        tls,
        ..ClientOptions::default()
    }
}

fn reader(dir: &Path) -> ClientTls {
    let (c, k) = (dir.join("reader.pem"), dir.join("reader.key"));
    ClientTls::load(&dir.join("ca.pem"), Some((&c, &k))).unwrap()
}

fn table_def() -> TableDef {
    TableDef {
        name: "t".into(),
        engine: TableEngine::Log,
        durability: TableDurability::Sync,
        replication: TableReplication::Sync,
        reads: TableReads::Leader,
        shards: 1,
        timers: Default::default(),
        leaders: Vec::new(),
        txn: Default::default(),
        validation: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_certificate_does_everything_and_a_reader_only_reads() {
    let dir = pki(1);
    let nodes = cluster(1, &dir).await;
    let addr = nodes[0].client_addr();

    // What `strata up` made: the CA and the admin client certificate, found by directory.
    let admin =
        Client::connect_node(addr, opts(Some(ClientTls::from_dir(&dir).unwrap()))).await.unwrap();
    let mut s = admin.open_session().await.unwrap();
    s.put("k", "v").await.unwrap();
    assert!(admin.create_table(table_def()).await.unwrap());
    admin.set_fault(None, LinkFault::default()).await.unwrap();
    admin.status().await.unwrap();

    let r = Client::connect_node(addr, opts(Some(reader(&dir)))).await.unwrap();
    let mut rs = r.open_session().await.unwrap();
    assert_eq!(rs.get("k").await.unwrap().value.as_deref(), Some(&b"v"[..]));
    let started = Instant::now();
    match rs.put("k", "overwritten").await {
        Err(ClientError::Forbidden(m)) => assert!(m.contains("write role"), "{m}"),
        other => panic!("a reader's put: {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(3), "a refusal is final, not retried");
    match r.create_table(TableDef { name: "u".into(), ..table_def() }).await {
        Err(e @ ClientError::Forbidden(_)) => assert!(e.is_denied() && !e.outcome_unknown()),
        other => panic!("a reader's create_table: {other:?}"),
    }
    let partition = LinkFault { partitioned: true, ..LinkFault::default() };
    assert!(matches!(r.set_fault(None, partition).await, Err(ClientError::Forbidden(_))));
    let mut t = r.table("t").await.expect("a reader lists tables");
    assert!(matches!(t.put("tk", "tv").await, Err(ClientError::Forbidden(_))));
    assert_eq!(s.get("k").await.unwrap().value.as_deref(), Some(&b"v"[..]), "nothing changed");
    assert_eq!(admin.list_tables().await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_plain_and_foreign_clients_are_told_why_they_are_refused() {
    let dir = pki(1);
    let nodes = cluster(1, &dir).await;
    let addr = nodes[0].client_addr();

    let anonymous = ClientTls::load(&dir.join("ca.pem"), None).unwrap();
    let c = Client::connect_node(addr, opts(Some(anonymous))).await.unwrap();
    match c.open_session().await {
        Err(ClientError::Unauthenticated(m)) => assert!(m.contains("client certificate"), "{m}"),
        other => panic!("an anonymous session: {:?}", other.map(|_| ())),
    }

    let plain = Client::connect_node(addr, opts(None)).await.unwrap();
    match plain.open_session().await {
        Err(ClientError::Unauthenticated(m)) => assert!(m.contains("requires TLS"), "{m}"),
        other => panic!("a plain session: {:?}", other.map(|_| ())),
    }

    let other = pki(1);
    match Client::connect_node(addr, opts(Some(ClientTls::from_dir(&other).unwrap()))).await {
        Err(ClientError::Tls { node, message }) => {
            assert_eq!(node, addr);
            assert!(message.contains("certificate"), "{message}");
        }
        Err(e) => panic!("a client of another CA: {e}"),
        Ok(_) => panic!("a client of another CA connected"),
    }
    assert!(matches!(
        ClientTls::from_dir(&dir.join("nowhere")).map_err(ClientError::from),
        Err(ClientError::Credentials(_))
    ));
}
