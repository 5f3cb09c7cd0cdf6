//! Key and value limits in log tables, and replication within the peer frame limit (issue #17
//! item 5; `docs/design.md`, "Limits and bounds"), on three in-process nodes. The issue: a
//! value just under 16 MiB was accepted by a log table's leader, its replication message was
//! then too large to send, and the shard took no further writes until a restart.
//!
//! Every wait is on a condition (status polled), never a fixed sleep.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use strata_client::{
    Client, ClientError, ClientOptions, LinkFault, LogIndex, NodeId, ShardRole, ShardStatus,
    TableDef, TableDurability, TableEngine, TableReads, TableReplication, TableTimers,
};
use strata_node::{NodeConfig, RunningNode};

/// A sync table (acknowledged once fsynced on a majority: a write that cannot replicate is
/// never acknowledged), one shard, reads at any node, node 0 preferred as its leader.
fn sync_table() -> TableDef {
    TableDef {
        name: "t".into(),
        engine: TableEngine::Log,
        durability: TableDurability::Sync,
        replication: TableReplication::Sync,
        reads: TableReads::Any,
        shards: 1,
        timers: TableTimers::Default,
        leaders: vec![NodeId(0)],
        txn: Default::default(),
        validation: Default::default(),
    }
}

fn opts() -> ClientOptions {
    ClientOptions { request_timeout: Some(Duration::from_secs(8)), ..ClientOptions::default() }
}

async fn cluster(tune: impl Fn(&mut NodeConfig)) -> (Vec<SocketAddr>, Vec<RunningNode>) {
    let nodes = strata_node::testing::local_cluster_with(3, tune).await;
    let endpoints: Vec<SocketAddr> = nodes.iter().map(|n| n.client_addr()).collect();
    for &addr in &endpoints {
        let c = Client::connect_node(addr, opts()).await.unwrap();
        c.create_table(sync_table()).await.unwrap();
    }
    (endpoints, nodes)
}

/// Each node's replica of `t` shard 0, in endpoint order (polled until `cond` holds).
async fn wait_replicas(
    endpoints: &[SocketAddr],
    what: &str,
    cond: impl Fn(&[ShardStatus]) -> bool,
) -> Vec<ShardStatus> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let mut shards = Vec::new();
        for &addr in endpoints {
            if let Ok(c) = Client::connect_node(addr, opts()).await {
                if let Ok(s) = c.status().await {
                    shards.extend(s.shards.into_iter().filter(|s| s.table == "t"));
                }
            }
        }
        if shards.len() == endpoints.len() && cond(&shards) {
            return shards;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}; last: {shards:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn applied_everywhere(upto: LogIndex) -> impl Fn(&[ShardStatus]) -> bool {
    move |s| s.iter().all(|r| r.applied_index >= upto)
}

/// Item 6 (d): an oversized log-table value (and key) is refused with `ValueTooLarge`
/// (`KeyTooLarge`) and changes nothing; the shard keeps taking writes; and a maximal accepted
/// write (1 MiB value, 64 KiB key) replicates to all three replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_table_values_beyond_the_limit_are_refused_and_the_shard_keeps_taking_writes() {
    let (endpoints, nodes) = cluster(|_| {}).await;
    let client = Client::connect(&endpoints, opts()).await.unwrap();
    let mut t = client.table("t").await.unwrap();
    let first = t.put("before", "ok").await.unwrap();

    // The value: just under the 16 MiB frame limit, so the frame itself is accepted.
    let huge = Bytes::from(vec![3u8; (16 << 20) - (4 << 10)]);
    match t.put("huge", huge).await {
        Err(ClientError::ValueTooLarge(m)) => assert!(m.contains("1048576"), "{m}"),
        other => panic!("expected ValueTooLarge, got {other:?}"),
    }
    let over = Bytes::from(vec![3u8; (1 << 20) + 1]);
    assert!(matches!(t.put("over", over).await, Err(ClientError::ValueTooLarge(_))));
    let long_key = Bytes::from(vec![b'k'; (64 << 10) + 1]);
    match t.put(long_key.clone(), "v").await {
        Err(ClientError::InvalidKey(m)) => assert!(m.contains("65537"), "{m}"),
        other => panic!("expected KeyTooLarge, got {other:?}"),
    }
    match t.get(long_key).await {
        Err(ClientError::InvalidKey(_)) => {}
        other => panic!("a read of a key beyond the limit: expected KeyTooLarge, got {other:?}"),
    }

    // The shard keeps taking writes, and the largest accepted write replicates everywhere.
    let max_key = Bytes::from(vec![b'm'; 64 << 10]);
    let max_value = Bytes::from(vec![9u8; 1 << 20]);
    let big = t.put(max_key.clone(), max_value.clone()).await.unwrap();
    let after = t.put("after", "ok").await.unwrap();
    assert!(first < big && big < after);
    wait_replicas(
        &endpoints,
        "every replica to apply the maximal write",
        applied_everywhere(after),
    )
    .await;
    for node in 0..endpoints.len() {
        let r = t.get_at(max_key.clone(), node).await.unwrap();
        assert_eq!(r.value.as_ref(), Some(&max_value), "at node {node}");
        assert_eq!(r.served_by, NodeId(node as u32), "served by the replica asked");
    }
    assert!(t.get("huge").await.unwrap().value.is_none(), "the refused write changed nothing");
    for n in nodes {
        n.shutdown().await;
    }
}

/// With a small frame limit (320 KiB frames, 240 KiB values), a follower cut off while six
/// maximal values are written catches up after healing: the leader sends them in several
/// messages, each within the frame limit. (With batches bounded only by `max_batch_bytes`,
/// 1 MiB, the catch-up batch was larger than a frame, the transport dropped it every time,
/// and the follower never caught up.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maximal_values_replicate_in_messages_within_the_frame_limit() {
    let (endpoints, nodes) = cluster(|c| {
        c.max_frame_bytes = 320 << 10;
        c.max_value_bytes = 240 << 10;
    })
    .await;
    let client = Client::connect(&endpoints, opts()).await.unwrap();
    let mut t = client.table("t").await.unwrap();
    t.put("first", "ok").await.unwrap();
    wait_replicas(&endpoints, "node 0 to lead", |s| {
        s[0].role == ShardRole::Leader && s.iter().all(|r| r.leader == Some(NodeId(0)))
    })
    .await;
    // Cut node 2 off both ways.
    let cut = LinkFault { partitioned: true, ..LinkFault::default() };
    for (i, &addr) in endpoints.iter().enumerate() {
        let c = Client::connect_node(addr, opts()).await.unwrap();
        c.set_fault(if i == 2 { None } else { Some(NodeId(2)) }, cut).await.unwrap();
    }
    let value = Bytes::from(vec![5u8; 240 << 10]);
    let mut last = LogIndex::ZERO;
    for i in 0..6 {
        last = t.put(format!("v{i}"), value.clone()).await.unwrap();
    }
    for &addr in &endpoints {
        let c = Client::connect_node(addr, opts()).await.unwrap();
        c.set_fault(None, LinkFault::default()).await.unwrap();
    }
    wait_replicas(&endpoints, "node 2 to catch up", applied_everywhere(last)).await;
    assert_eq!(t.get_at("v5", 2).await.unwrap().value.as_ref(), Some(&value));
    for n in nodes {
        n.shutdown().await;
    }
}
