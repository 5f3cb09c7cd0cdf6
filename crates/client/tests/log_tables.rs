//! Log tables through the client library, on three in-process nodes on loopback: catalog
//! create/list (idempotent, conflicts refused), writes routed to the shard leader, reads at a
//! follower of the active set, immediate durability, status (leader, DI, active set), and a
//! node restarted from its directory that recovers its synced entries and rejoins.
//!
//! Every wait is on a condition (status polled), never a fixed sleep.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use strata_client::{
    Client, ClientError, ClientOptions, LogIndex, NodeId, ShardRole, ShardStatus, TableDef,
    TableDurability, TableReads, TableValidation, WriteOpts,
};
use strata_node::RunningNode;

/// Polls every node's status until `cond` holds for the shards of `table` shard 0 (one entry
/// per node that answered, in node order).
async fn wait_shards(
    endpoints: &[SocketAddr],
    what: &str,
    within: Duration,
    cond: impl Fn(&[ShardStatus]) -> bool,
) -> Vec<ShardStatus> {
    let deadline = Instant::now() + within;
    loop {
        let mut shards = Vec::new();
        for &addr in endpoints {
            if let Ok(c) = Client::connect_node(addr, opts()).await {
                if let Ok(s) = c.status().await {
                    shards.extend(s.shards.into_iter().filter(|s| s.table == "t" && s.shard == 0));
                }
            }
        }
        if cond(&shards) {
            return shards;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}; last: {shards:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_table_writes_reads_status_and_a_restarted_node_rejoins() {
    let (cfgs, mut nodes) = cluster().await;
    let endpoints: Vec<SocketAddr> = cfgs.iter().map(|c| c.client_addr).collect();

    // Catalog: every node accepts; a repeat is idempotent; a conflicting one is refused.
    let def = cad_table("t", 1);
    for &addr in &endpoints {
        let c = Client::connect_node(addr, opts()).await.unwrap();
        assert!(c.create_table(def.clone()).await.unwrap(), "created at {addr}");
        assert!(!c.create_table(def.clone()).await.unwrap(), "identical definition: idempotent");
        let conflicting = TableDef { shards: 2, ..def.clone() };
        let e = c.create_table(conflicting).await.unwrap_err();
        assert!(
            matches!(e, ClientError::InvalidArgument(ref m) if m.contains("another definition")),
            "{e}"
        );
        let bad =
            TableDef { name: "bad".into(), durability: TableDurability::Async, ..def.clone() };
        let e = c.create_table(bad).await.unwrap_err();
        assert!(e.to_string().contains("active-set reads need the durability check"), "{e}");
        assert_eq!(c.list_tables().await.unwrap(), vec![def.clone()]);
    }

    let client = Client::connect(&endpoints, opts()).await.unwrap();
    assert!(matches!(client.table("nope").await, Err(ClientError::NoSuchTable(_))));
    let mut t = client.table("t").await.unwrap();

    // Writes find the leader (NotLeader hints, round-robin) and reads return them.
    let i1 = t.put("a", "1").await.unwrap();
    assert_eq!(
        t.last_write_index(0),
        Some(i1),
        "the session token follows the acknowledged writes"
    );
    let r = t.get("a").await.unwrap();
    assert_eq!(r.value.as_deref(), Some(&b"1"[..]));
    assert_eq!(r.update_index, i1);
    let i2 = t.delete("a").await.unwrap();
    assert!(i2 > i1);
    assert_eq!(t.get("a").await.unwrap().value, None);
    // Immediate durability: acknowledged only once durable, so DI already covers it.
    let i3 = t.put_with("b", "2", WriteOpts { immediate: true }).await.unwrap();
    let shards = wait_shards(
        &endpoints,
        "a ready leader with an active set",
        Duration::from_secs(10),
        |s| leader_of(s).is_some_and(|l| l.active_set.len() >= 2 && l.durable_index >= i3),
    )
    .await;
    let leader = leader_of(&shards).unwrap().clone();
    assert_eq!(leader.active_set[0], leader.leader.unwrap(), "the leader heads its active set");
    assert!(leader.persisted_index >= i3 && leader.applied_index >= i3);

    // Follower read: an active-set follower serves a durable key itself.
    let follower = leader.active_set[1];
    wait_shards(
        &endpoints,
        "the follower to serve with DI_F covering the write",
        Duration::from_secs(10),
        |s| {
            s.iter().any(|f| {
                f.role == ShardRole::Follower
                    && f.serving
                    && f.durable_index >= i3
                    && f.leader == leader.leader
            }) && s.len() == 3
        },
    )
    .await;
    let fidx = cfgs.iter().position(|c| NodeId(c.node_id) == follower).unwrap();
    let mut served_by_follower = false;
    for _ in 0..50 {
        let r = t.get_at("b", fidx).await.unwrap();
        assert_eq!(r.value.as_deref(), Some(&b"2"[..]));
        assert_eq!(r.update_index, i3);
        if r.served_by == follower {
            served_by_follower = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(served_by_follower, "a read sent to active-set follower {follower} was served there");

    // Restart one follower from its directory: it recovers its synced entries and rejoins.
    let victim = cfgs.iter().position(|c| Some(NodeId(c.node_id)) != leader.leader).unwrap();
    let victim_addr = [endpoints[victim]];
    wait_shards(
        &victim_addr,
        "the victim to persist the immediate write",
        Duration::from_secs(10),
        |s| s.first().is_some_and(|v| v.persisted_index >= i3),
    )
    .await;
    nodes[victim].take().unwrap().shutdown().await;
    let i4 = t.put("c", "3").await.unwrap(); // the two others are a majority
    nodes[victim] = Some(strata_node::start(cfgs[victim].clone()).await.unwrap());
    let s =
        wait_shards(&victim_addr, "the restarted node to answer", Duration::from_secs(5), |s| {
            !s.is_empty()
        })
        .await;
    assert!(s[0].persisted_index >= i3, "recovered its synced entries from disk: {:?}", s[0]);
    let s = wait_shards(
        &victim_addr,
        "the restarted node to recover and rejoin",
        Duration::from_secs(15),
        |s| {
            s.first().is_some_and(|v| {
                v.persisted_index >= i4 && v.applied_index >= i4 && v.leader.is_some()
            })
        },
    )
    .await;
    assert_eq!(s[0].role, ShardRole::Follower);
    let r = t.get_at("c", victim).await.unwrap();
    assert_eq!(r.value.as_deref(), Some(&b"3"[..]));
    assert!(r.update_index >= LogIndex::new(1, 1));

    for n in nodes.into_iter().flatten() {
        n.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_spread_over_shards_and_every_shard_serves() {
    let (cfgs, nodes) = cluster().await;
    let endpoints: Vec<SocketAddr> = cfgs.iter().map(|c| c.client_addr).collect();
    let def = TableDef {
        durability: TableDurability::Sync,
        reads: TableReads::Leader,
        ..cad_table("s", 3)
    };
    for &addr in &endpoints {
        Client::connect_node(addr, opts()).await.unwrap().create_table(def.clone()).await.unwrap();
    }
    let client = Client::connect(&endpoints, opts()).await.unwrap();
    let mut t = client.table("s").await.unwrap();
    let mut used = [false; 3];
    for i in 0..12 {
        let k = format!("key{i}");
        used[t.shard_of(k.as_bytes()) as usize] = true;
        t.put(k.clone(), format!("v{i}")).await.unwrap();
    }
    assert_eq!(used, [true; 3], "twelve keys cover the three shards");
    for i in 0..12 {
        let r = t.get(format!("key{i}")).await.unwrap();
        assert_eq!(r.value, Some(format!("v{i}").into()));
    }
    for n in nodes.into_iter().flatten() {
        n.shutdown().await;
    }
}

/// Shard messages travel through the peer transport's fault layer: cutting the leader off
/// (both directions) moves leadership to the majority side; after healing, the old leader
/// follows and catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_is_replaced_and_catches_up_after_healing() {
    use strata_client::LinkFault;
    let (cfgs, nodes) = cluster().await;
    let endpoints: Vec<SocketAddr> = cfgs.iter().map(|c| c.client_addr).collect();
    for &addr in &endpoints {
        let c = Client::connect_node(addr, opts()).await.unwrap();
        c.create_table(cad_table("t", 1)).await.unwrap();
    }
    let client = Client::connect(&endpoints, opts()).await.unwrap();
    let mut t = client.table("t").await.unwrap();
    t.put("x", "before").await.unwrap();
    let shards = wait_shards(&endpoints, "a ready leader", Duration::from_secs(10), |s| {
        leader_of(s).is_some()
    })
    .await;
    let old = leader_of(&shards).unwrap().leader.unwrap();
    let old_idx = cfgs.iter().position(|c| NodeId(c.node_id) == old).unwrap();
    let cut = LinkFault { partitioned: true, ..LinkFault::default() };
    for (i, &addr) in endpoints.iter().enumerate() {
        let c = Client::connect_node(addr, opts()).await.unwrap();
        let peer = if i == old_idx { None } else { Some(old) };
        c.set_fault(peer, cut).await.unwrap();
    }
    let others: Vec<SocketAddr> =
        endpoints.iter().enumerate().filter(|(i, _)| *i != old_idx).map(|(_, a)| *a).collect();
    let s =
        wait_shards(&others, "a new leader on the majority side", Duration::from_secs(15), |s| {
            leader_of(s).is_some_and(|l| l.leader != Some(old))
        })
        .await;
    let new_epoch = leader_of(&s).unwrap().epoch;
    let i = t.put("x", "after").await.unwrap();
    assert!(i.epoch >= new_epoch, "written in the new leader's epoch: {i}");
    for &addr in &endpoints {
        Client::connect_node(addr, opts())
            .await
            .unwrap()
            .set_fault(None, LinkFault::default())
            .await
            .unwrap();
    }
    let old_addr = [endpoints[old_idx]];
    wait_shards(&old_addr, "the old leader to follow and catch up", Duration::from_secs(15), |s| {
        s.first().is_some_and(|o| o.role == ShardRole::Follower && o.applied_index >= i)
    })
    .await;
    assert_eq!(t.get("x").await.unwrap().value.as_deref(), Some(&b"after"[..]));
    for n in nodes.into_iter().flatten() {
        n.shutdown().await;
    }
}

/// Log commands with results (issue #18 item 1, rifl.md §2.1): compare-and-swap, writes
/// conditional on absence or on the version a read returned, and fetch-and-add on decimal
/// counters. A failed condition is an answer (`Rejected` with the key's version); a refused
/// add is `InvalidArgument` and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_writes_cas_and_counters_on_a_log_table() {
    use strata_client::{Conditional, Expect};
    let (_nodes, endpoints) = cluster_with(&[cad_table("t", 2)]).await;
    let client = Client::connect(&endpoints, opts()).await.unwrap();
    let mut t = client.table("t").await.unwrap();

    // Create-only, then a swap on the value, then one that finds another value.
    let created = match t.cas("lock", None, "alice").await.unwrap() {
        Conditional::Applied { version } => version,
        r => panic!("an absent key takes a create: {r:?}"),
    };
    assert_eq!(
        t.cas("lock", None, "bob").await.unwrap(),
        Conditional::Rejected { current: created },
        "the rejection names the version found"
    );
    let swapped = t.cas("lock", Some("alice".into()), "bob").await.unwrap();
    assert!(matches!(swapped, Conditional::Applied { version } if version > created));
    assert!(matches!(
        t.cas("lock", Some("alice".into()), "carol").await.unwrap(),
        Conditional::Rejected { .. }
    ));
    assert_eq!(t.get("lock").await.unwrap().value.as_deref(), Some(&b"bob"[..]));

    // Optimistic update on a read's version: the second writer with the same version loses.
    let read = t.get("lock").await.unwrap();
    let expect = Expect::Version(read.update_index);
    assert!(matches!(
        t.put_if("lock", "dave", expect.clone()).await.unwrap(),
        Conditional::Applied { .. }
    ));
    assert!(matches!(
        t.put_if("lock", "erin", expect.clone()).await.unwrap(),
        Conditional::Rejected { .. }
    ));
    assert!(matches!(t.delete_if("lock", expect).await.unwrap(), Conditional::Rejected { .. }));
    let now = t.get("lock").await.unwrap();
    assert_eq!(now.value.as_deref(), Some(&b"dave"[..]));
    let gone = t.delete_if("lock", Expect::Version(now.update_index)).await.unwrap();
    assert!(matches!(gone, Conditional::Applied { .. }));
    assert_eq!(t.get("lock").await.unwrap().value, None);

    // Counters: decimal text, absent = 0, negative changes, refusals leave them unchanged.
    assert_eq!(t.faa("hits", 10).await.unwrap(), 0);
    assert_eq!(t.faa("hits", -3).await.unwrap(), 10);
    assert_eq!(t.get("hits").await.unwrap().value.as_deref(), Some(&b"7"[..]));
    let e = t.faa("hits", -8).await.unwrap_err();
    assert!(matches!(e, ClientError::InvalidArgument(ref m) if m.contains("0..=")), "{e}");
    t.put("name", "alice").await.unwrap();
    let e = t.faa("name", 1).await.unwrap_err();
    assert!(matches!(e, ClientError::InvalidArgument(ref m) if m.contains("not a counter")), "{e}");
    assert_eq!(t.get("name").await.unwrap().value.as_deref(), Some(&b"alice"[..]));
    assert_eq!(t.faa("hits", 1).await.unwrap(), 7);
}

/// Transactions (issue #18 item 2, rifl.md §5.8): across two shards, atomic; a conflicting
/// transaction aborts with nothing done; the read-only and single-shard paths; a plain read of
/// a key a transaction holds waits for the decision; `run_txn` retries aborted attempts; a
/// table without `--txn` refuses transactions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_across_shards_are_atomic_and_conflicts_abort() {
    use strata_client::{AbortReason, RetryPolicy, TxnOutcome};
    let (_nodes, endpoints) = cluster_with(&[txn_table("bank", 2), cad_table("plain", 1)]).await;
    let client = Client::connect(&endpoints, opts()).await.unwrap();
    let mut bank = client.table("bank").await.unwrap();
    // Two keys in different shards.
    let (a, b) = (
        "alice",
        (0..)
            .map(|i| format!("bob{i}"))
            .find(|k| bank.shard_of(k.as_bytes()) != bank.shard_of(b"alice"))
            .unwrap(),
    );
    bank.put(a, "100").await.unwrap();
    bank.put(b.clone(), "0").await.unwrap();

    // A transfer: read both, write both; committed atomically.
    let mut tx = client.transaction();
    let x: u64 =
        std::str::from_utf8(&tx.read("bank", a).await.unwrap().unwrap()).unwrap().parse().unwrap();
    let y: u64 = std::str::from_utf8(&tx.read("bank", b.clone()).await.unwrap().unwrap())
        .unwrap()
        .parse()
        .unwrap();
    tx.write("bank", a, (x - 30).to_string());
    tx.write("bank", b.clone(), (y + 30).to_string());
    assert_eq!(tx.commit_and_sync().await.unwrap(), TxnOutcome::Committed);
    assert_eq!(bank.get(a).await.unwrap().value.as_deref(), Some(&b"70"[..]));
    assert_eq!(bank.get(b.clone()).await.unwrap().value.as_deref(), Some(&b"30"[..]));

    // A transaction that read a value someone changed since aborts, and changes nothing.
    let mut stale = client.transaction();
    stale.read("bank", a).await.unwrap();
    bank.put(a, "71").await.unwrap();
    stale.write("bank", b.clone(), "999");
    stale.write("bank", a, "0");
    assert_eq!(
        stale.commit_and_sync().await.unwrap(),
        TxnOutcome::Aborted { reason: AbortReason::Conflict }
    );
    assert_eq!(bank.get(b.clone()).await.unwrap().value.as_deref(), Some(&b"30"[..]));
    assert_eq!(bank.get(a).await.unwrap().value.as_deref(), Some(&b"71"[..]));

    // Read-only: validates; one shard: decided by the prepare; a delete.
    let mut ro = client.transaction();
    ro.read("bank", a).await.unwrap();
    ro.read("bank", b.clone()).await.unwrap();
    assert_eq!(ro.commit().await.unwrap(), TxnOutcome::Committed);
    let mut one = client.transaction();
    one.read("bank", a).await.unwrap();
    one.delete("bank", a);
    assert_eq!(one.commit().await.unwrap(), TxnOutcome::Committed);
    assert_eq!(bank.get(a).await.unwrap().value, None);

    // `commit` returns before the decisions: a read right after still sees the transaction's
    // writes (it waits for the lock's decision, §5.9).
    for i in 0..20 {
        let mut tx = client.transaction();
        tx.write("bank", a, format!("{i}"));
        tx.write("bank", b.clone(), format!("{i}"));
        assert_eq!(tx.commit().await.unwrap(), TxnOutcome::Committed);
        assert_eq!(bank.get(a).await.unwrap().value.as_deref(), Some(format!("{i}").as_bytes()));
        assert_eq!(
            bank.get(b.clone()).await.unwrap().value.as_deref(),
            Some(format!("{i}").as_bytes())
        );
    }

    // Concurrent increments of one counter through run_txn: every one lands exactly once.
    bank.put("counter", "0").await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                client
                    .run_txn(RetryPolicy { attempts: 1000, ..RetryPolicy::default() }, |tx| {
                        Box::pin(async move {
                            let v = tx.read("bank", "counter").await?.unwrap();
                            let n: u64 = std::str::from_utf8(&v).unwrap().parse().unwrap();
                            tx.write("bank", "counter", (n + 1).to_string());
                            Ok(())
                        })
                    })
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(bank.get("counter").await.unwrap().value.as_deref(), Some(&b"40"[..]));

    // Tables opt in.
    let mut tx = client.transaction();
    tx.write("plain", "k", "v");
    let e = tx.commit().await.unwrap_err();
    assert!(e.to_string().contains("does not take transactions"), "{e}");
}

/// Three nodes with the Kairos table `def` (`kbank`) and a RIFL table `rbank`.
async fn kairos_cluster(def: TableDef) -> (Vec<Option<RunningNode>>, Vec<SocketAddr>) {
    cluster_with(&[def, txn_table("rbank", 1)]).await
}

/// Waits until every Kairos shard `client` reports to has answered a `ts_GC` above `ts`
/// (each shard decides `TooOld` by its own, kairos.md §5.9).
async fn eventually_ts_gc_above(client: &Client, ts: strata_client::Timestamp) {
    eventually("every shard's ts_GC above the timestamp", Duration::from_secs(10), || {
        let views = client.kairos_shard_ts_gc();
        !views.is_empty() && views.iter().all(|(_, _, ts_gc)| *ts_gc > ts)
    })
    .await;
}

/// Kairos watermarks (issue #19 item 3, kairos.md §5.2, §5.9, §6.5) between real nodes and
/// clients: once a client's reports come back with the shards' `WM`, a read's `fts` is above
/// the value's `vts` (and a read-only transaction at it commits). A client that stops
/// reporting while it holds a read set keeps `ts_GC` below that read set until the leader
/// drops its report (1 s); then the other client's freshness moves `ts_GC` above it, the
/// silent client's commit aborts `TooOld`, and its retry (after the one report round a
/// `TooOld` triggers) commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kairos_watermarks_raise_freshness_and_a_silent_clients_old_reads_abort_too_old() {
    kairos_watermark_scenario(kairos_table("kbank", 2)).await;
}

/// The same with sharded validators (`--validation sharded:3`): `TooOld` is decided by the
/// validator of `x` (a shard of `kbank.validators`, kairos.md §5.6), which learns `ts_GC`
/// from the reports the clients send to the validators they read through and prepare at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kairos_watermarks_and_too_old_with_sharded_validators() {
    let def = TableDef { validation: TableValidation::Sharded(3), ..kairos_table("kbank", 2) };
    kairos_watermark_scenario(def).await;
}

/// The watermark scenario above over the Kairos table `def` (`kbank`).
async fn kairos_watermark_scenario(def: TableDef) {
    use strata_client::{AbortReason, Timestamp, TxnOutcome};
    let (_nodes, endpoints) = kairos_cluster(def).await;
    let other = Client::connect(&endpoints, opts()).await.unwrap();
    let silent = Client::connect(&endpoints, opts()).await.unwrap();
    let mut bank = other.table("kbank").await.unwrap();
    let mut init = other.transaction();
    init.write("kbank", "x", "1");
    assert_eq!(init.commit_and_sync().await.unwrap(), TxnOutcome::Committed);
    let vts = bank.get("x").await.unwrap().vts;

    // Reports flow (the writer's prepare made `other` report to x's shard): `wm_view`
    // passes the version, and a read's `fts = max(vts, wm)` is above it.
    eventually("wm_view above x's version", Duration::from_secs(5), || {
        other.kairos_watermarks().0 > vts
    })
    .await;
    let mut ro = other.transaction();
    ro.read("kbank", "x").await.unwrap();
    let fts = ro.kairos_fts("kbank", "x").unwrap();
    assert!(fts > vts, "fts {fts} not above vts {vts}");
    assert_eq!(ro.commit().await.unwrap(), TxnOutcome::Committed, "an RO at max fts");

    // The silent client reads once (its reports start), then stops reporting and holds a
    // read set while the other client's freshness advances.
    let mut warm = silent.transaction();
    warm.read("kbank", "x").await.unwrap();
    drop(warm);
    eventually("the silent client's first answers", Duration::from_secs(5), || {
        silent.kairos_watermarks().0 > Timestamp::ZERO
    })
    .await;
    silent.pause_kairos_reports(true);
    let mut old = silent.transaction();
    old.read("kbank", "x").await.unwrap();
    let old_fts = old.kairos_fts("kbank", "x").unwrap();
    // Until then a read-only transaction over such reads commits: the silent client's last
    // report holds `ts_GC` below them at every shard that decides on x (with sharded
    // validators, x's validator: it got the report because the client registered with the
    // validators at its first read of the table).
    let mut held = silent.transaction();
    held.read("kbank", "x").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(held.commit().await.unwrap(), TxnOutcome::Committed, "an RO under its report");
    // Its report holds ts_GC at or below old_fts until the leader drops it (1 s); after
    // that the other client's c_freshness moves ts_GC above.
    // Every shard `other` reports to (x's deciding shard among them: its own, or with
    // sharded validators its validator) answers a `ts_GC` above them.
    eventually_ts_gc_above(&other, old_fts).await;
    old.write("kbank", "x", "2");
    assert_eq!(
        old.commit_and_sync().await.unwrap(),
        TxnOutcome::Aborted { reason: AbortReason::TooOld }
    );
    assert_eq!(bank.get("x").await.unwrap().value.as_deref(), Some(&b"1"[..]), "nothing done");
    // The abort brought the silent client's view up to ts_GC: its retry commits.
    assert!(silent.kairos_watermarks().1 > old_fts, "the TooOld round told it ts_GC");
    let mut retry = silent.transaction();
    retry.read("kbank", "x").await.unwrap();
    assert!(retry.kairos_fts("kbank", "x").unwrap() > old_fts);
    retry.write("kbank", "x", "3");
    assert_eq!(retry.commit_and_sync().await.unwrap(), TxnOutcome::Committed);
    assert_eq!(bank.get("x").await.unwrap().value.as_deref(), Some(&b"3"[..]));
}

/// Kairos tables (issue #19 items 1-2, kairos.md, server-side validation): the same
/// transaction API over the same prepare/decide rounds, validated by Algorithm 3 when each
/// prepare's entry applies. A transfer across two shards commits and is visible with the
/// keys' versions at its commit timestamp; a transaction that read a value changed since
/// aborts `Stale`; a read-only one commits; concurrent `run_txn` increments of one counter
/// all land exactly once; plain writes are refused; rifl and kairos tables do not mix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kairos_transactions_validate_in_the_shards_logs() {
    kairos_scenarios(kairos_table("kbank", 2)).await;
}

/// Kairos with sharded validators (`--validation sharded:3`, kairos.md §1.3 "CV", §4): the
/// same scenarios, each transaction prepared at the validators of its keys (the shards of
/// `kbank.validators`) and at the data shards of its written keys. The validators are a
/// table of three shards created with `kbank`; a validator keeps a key's timestamps, not its
/// value, and after the decisions its `latest_committed` is the data's `vts`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kairos_transactions_with_sharded_validators() {
    let def = TableDef { validation: TableValidation::Sharded(3), ..kairos_table("kbank", 2) };
    let (client, _nodes) = kairos_scenarios(def).await;
    let tables = client.list_tables().await.unwrap();
    let v = tables.iter().find(|d| d.name == "kbank.validators").expect("the validator table");
    assert_eq!((v.shards, v.validation), (3, TableValidation::Validators));
    let (mut data, mut validators) =
        (client.table("kbank").await.unwrap(), client.table("kbank.validators").await.unwrap());
    let (d, v) = (data.get("counter").await.unwrap(), validators.get("counter").await.unwrap());
    assert_eq!(v.value, None, "a validator keeps no values");
    assert!(d.vts > strata_client::Timestamp::ZERO && v.vts == d.vts, "{d:?} {v:?}");
}

/// The Kairos client scenarios over the table `def` (named `kbank`, two shards) and a RIFL
/// table `rbank`; returns the client and the nodes (alive while held).
async fn kairos_scenarios(def: TableDef) -> (Client, Vec<Option<RunningNode>>) {
    use strata_client::{AbortReason, RetryPolicy, TxnOutcome};
    let (nodes, endpoints) = kairos_cluster(def).await;
    let client = Client::connect(&endpoints, opts()).await.unwrap();
    let mut bank = client.table("kbank").await.unwrap();
    let (a, b) = (
        "alice",
        (0..)
            .map(|i| format!("bob{i}"))
            .find(|k| bank.shard_of(k.as_bytes()) != bank.shard_of(b"alice"))
            .unwrap(),
    );
    let num = |v: Option<bytes::Bytes>| -> u64 {
        std::str::from_utf8(&v.unwrap()).unwrap().parse().unwrap()
    };

    // Plain writes are refused: a Kairos key's version is a commit timestamp.
    let e = bank.put(a, "1").await.unwrap_err();
    assert!(e.to_string().contains("kairos table"), "{e}");

    // Blind writes create the accounts; reads return them with their versions.
    let mut init = client.transaction();
    init.write("kbank", a, "100");
    init.write("kbank", b.clone(), "0");
    assert_eq!(init.commit_and_sync().await.unwrap(), TxnOutcome::Committed);
    let ra = bank.get(a).await.unwrap();
    assert_eq!(ra.value.as_deref(), Some(&b"100"[..]));
    assert!(ra.vts > strata_client::Timestamp::ZERO, "a version at the commit timestamp");
    assert_eq!(bank.get(b.clone()).await.unwrap().vts, ra.vts, "one timestamp per transaction");

    // A transfer across the two shards.
    let mut tx = client.transaction();
    let x = num(tx.read("kbank", a).await.unwrap());
    let y = num(tx.read("kbank", b.clone()).await.unwrap());
    tx.write("kbank", a, (x - 30).to_string());
    tx.write("kbank", b.clone(), (y + 30).to_string());
    assert_eq!(tx.commit_and_sync().await.unwrap(), TxnOutcome::Committed);
    let (ra2, rb2) = (bank.get(a).await.unwrap(), bank.get(b.clone()).await.unwrap());
    assert_eq!((ra2.value.as_deref(), rb2.value.as_deref()), (Some(&b"70"[..]), Some(&b"30"[..])));
    assert!(ra2.vts > ra.vts && ra2.vts == rb2.vts);

    // A transaction that read a value changed since aborts (Stale) and changes nothing.
    let mut stale = client.transaction();
    stale.read("kbank", a).await.unwrap();
    let mut change = client.transaction();
    change.write("kbank", a, "71");
    assert_eq!(change.commit_and_sync().await.unwrap(), TxnOutcome::Committed);
    stale.write("kbank", b.clone(), "999");
    stale.write("kbank", a, "0");
    assert_eq!(
        stale.commit_and_sync().await.unwrap(),
        TxnOutcome::Aborted { reason: AbortReason::Stale }
    );
    assert_eq!(bank.get(b.clone()).await.unwrap().value.as_deref(), Some(&b"30"[..]));
    assert_eq!(bank.get(a).await.unwrap().value.as_deref(), Some(&b"71"[..]));

    // A read-only transaction commits (validated through the logs, no decision to send).
    let mut ro = client.transaction();
    ro.read("kbank", a).await.unwrap();
    ro.read("kbank", b.clone()).await.unwrap();
    assert_eq!(ro.commit().await.unwrap(), TxnOutcome::Committed);

    // Concurrent increments of one counter through run_txn: every one lands exactly once.
    let mut init = client.transaction();
    init.write("kbank", "counter", "0");
    assert_eq!(init.commit_and_sync().await.unwrap(), TxnOutcome::Committed);
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                client
                    .run_txn(RetryPolicy { attempts: 1000, ..RetryPolicy::default() }, |tx| {
                        Box::pin(async move {
                            let v = tx.read("kbank", "counter").await?.unwrap();
                            let n: u64 = std::str::from_utf8(&v).unwrap().parse().unwrap();
                            tx.write("kbank", "counter", (n + 1).to_string());
                            Ok(())
                        })
                    })
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // `commit` returns before the decisions, and a Kairos read does not wait for them
    // (kairos.md §5.3): wait for the last one to apply.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = bank.get("counter").await.unwrap().value;
        if v.as_deref() == Some(&b"40"[..]) {
            break;
        }
        assert!(Instant::now() < deadline, "counter at {v:?}, not 40");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // One kind of table per transaction.
    let mut mixed = client.transaction();
    mixed.read("kbank", a).await.unwrap();
    mixed.write("rbank", "k", "v");
    let e = mixed.commit().await.unwrap_err();
    assert!(e.to_string().contains("not both"), "{e}");
    (client, nodes)
}

/// Strict mode (K5, kairos.md §1.2, §5.1, §5.5) with emulated clock offsets within `eps`
/// (a spread of `eps`: +eps/2 and -eps/2): a writer whose clock runs ahead commits a
/// transfer and is answered only after the commit wait; a read-only transaction a client
/// whose clock lags starts afterwards observes the transfer and is ordered after it
/// (`T2.commit > T1.commit`), also when it reads only a key the transfer did not write. The
/// control: the same read-only transaction outside strict mode takes `max fts`, a timestamp
/// before the transfer's, which is what strict mode exists to prevent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kairos_strict_mode_orders_transactions_by_real_time_under_clock_offsets() {
    use strata_client::{KairosOptions, TxnOutcome};
    let (_nodes, endpoints) = cluster_with(&[kairos_table("strict", 2)]).await;
    let eps = Duration::from_millis(20);
    let half = eps.as_nanos() as i64 / 2;
    let with_clock = |offset_ns: i64, strict: bool| ClientOptions {
        kairos: KairosOptions {
            clock_offset_ns: offset_ns,
            clock_drift_ppm: 0,
            strict_eps: strict.then_some(eps),
        },
        ..opts()
    };
    let ahead = Client::connect(&endpoints, with_clock(half, true)).await.unwrap();
    let behind = Client::connect(&endpoints, with_clock(-half, true)).await.unwrap();
    let lax = Client::connect(&endpoints, with_clock(-half, false)).await.unwrap();

    let mut init = ahead.transaction();
    init.write("strict", "a", "100");
    init.write("strict", "b", "0");
    init.write("strict", "other", "1");
    let (outcome, _) = init.commit_detailed().await.unwrap();
    assert_eq!(outcome, TxnOutcome::Committed);
    // The control's client learns the watermarks now, before T1, and then stops reporting:
    // its later reads take `fts = max(vts, wm)` with this `wm` (kairos.md §5.2), which is
    // below T1. (A client still reporting would learn a `WM` past T1 within the commit
    // wait, and its RO at `max fts` would land after T1 by the watermarks alone.)
    let mut warm = lax.transaction();
    warm.read("strict", "other").await.unwrap();
    drop(warm);
    lax.pause_kairos_reports(true);

    // T1: a transfer by the client whose clock is ahead; reported after the commit wait.
    let mut t1 = ahead.transaction();
    t1.read("strict", "a").await.unwrap();
    t1.read("strict", "b").await.unwrap();
    t1.write("strict", "a", "60");
    t1.write("strict", "b", "40");
    let started = Instant::now();
    let (outcome, info) = t1.commit_detailed().await.unwrap();
    let waited = started.elapsed();
    assert_eq!(outcome, TxnOutcome::Committed);
    let t1 = info.expect("a committed Kairos transaction says what it saw").commit_ts;
    assert!(waited >= 2 * eps, "reported after {waited:?}, before the commit wait of 2 eps");

    // T2, begun after T1 was reported: a strict RO at the lagging client.
    let mut t2 = behind.transaction();
    let b = t2.read("strict", "b").await.unwrap();
    let other = t2.read("strict", "other").await.unwrap();
    let (outcome, info) = t2.commit_detailed().await.unwrap();
    assert_eq!(outcome, TxnOutcome::Committed);
    let info = info.unwrap();
    assert!(info.read_only);
    assert_eq!((b.as_deref(), other.as_deref()), (Some(&b"40"[..]), Some(&b"1"[..])));
    assert!(info.commit_ts > t1, "K5: {} began after {t1} was reported", info.commit_ts);
    let read_b = info.reads.iter().find(|r| &r.key[..] == b"b").unwrap();
    assert_eq!(read_b.vts, t1, "it read T1's version of b");

    // Reading only a key T1 did not write: strict mode still orders it after T1 ...
    let mut t3 = behind.transaction();
    t3.read("strict", "other").await.unwrap();
    let t3 = t3.commit_detailed().await.unwrap().1.unwrap().commit_ts;
    assert!(t3 > t1, "K5: {t3} began after {t1} was reported");
    // ... the control without strict mode does not (RO at `max fts`, in T1's past: its
    // `wm` predates T1).
    let mut t4 = lax.transaction();
    t4.read("strict", "other").await.unwrap();
    let t4 = t4.commit_detailed().await.unwrap().1.unwrap().commit_ts;
    assert!(t4 < t1, "not strict: RO at max fts {t4}, before {t1}");
}

/// The blocking API of transactions (issue #18 item 3): threads without a runtime move units
/// between two shards with `run_txn`; a transaction that read a value changed since aborts;
/// the total holds, and every transfer landed exactly once.
#[test]
fn blocking_transactions_from_threads_keep_the_total() {
    use strata_client::{blocking, AbortReason, RetryPolicy, TxnOutcome};
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build();
    let rt = rt.unwrap();
    let (cfgs, _nodes) = rt.block_on(cluster());
    let endpoints: Vec<SocketAddr> = cfgs.iter().map(|c| c.client_addr).collect();
    rt.block_on(async {
        for &addr in &endpoints {
            let c = Client::connect_node(addr, opts()).await.unwrap();
            c.create_table(txn_table("bank", 2)).await.unwrap();
        }
    });
    let client = blocking::Client::connect(&endpoints, opts()).unwrap();
    let shards = 2;
    let (a, b) = (
        "alice".to_string(),
        (0..)
            .map(|i| format!("bob{i}"))
            .find(|k| {
                strata_wire::client::shard_of(k.as_bytes(), shards)
                    != strata_wire::client::shard_of(b"alice", shards)
            })
            .unwrap(),
    );
    let mut tx = client.transaction();
    tx.write("bank", a.clone(), "50");
    tx.write("bank", b.clone(), "50");
    assert_eq!(tx.commit_and_sync().unwrap(), TxnOutcome::Committed);
    let number = |v: Option<bytes::Bytes>| -> i64 {
        std::str::from_utf8(&v.expect("a balance")).unwrap().parse().unwrap()
    };

    // Two threads, 10 transfers each, one from a to b and the other back, by `amount`.
    let policy = RetryPolicy { attempts: 1000, ..RetryPolicy::default() };
    std::thread::scope(|s| {
        for (from, to, amount) in [(&a, &b, 3), (&b, &a, 1)] {
            let client = &client;
            s.spawn(move || {
                for _ in 0..10 {
                    client
                        .run_txn(policy, |tx| {
                            let x = number(tx.read("bank", from.clone())?);
                            let y = number(tx.read("bank", to.clone())?);
                            tx.write("bank", from.clone(), (x - amount).to_string());
                            tx.write("bank", to.clone(), (y + amount).to_string());
                            Ok(())
                        })
                        .unwrap();
                }
            });
        }
    });

    // A stale read aborts and changes nothing.
    let mut stale = client.transaction();
    let seen = number(stale.read("bank", a.clone()).unwrap());
    let mut other = client.transaction();
    other.write("bank", a.clone(), (seen + 100).to_string());
    assert_eq!(other.commit_and_sync().unwrap(), TxnOutcome::Committed);
    stale.write("bank", a.clone(), "0");
    assert_eq!(
        stale.commit_and_sync().unwrap(),
        TxnOutcome::Aborted { reason: AbortReason::Conflict }
    );

    let mut check = client.transaction();
    let (x, y) = (number(check.read("bank", a).unwrap()), number(check.read("bank", b).unwrap()));
    assert_eq!(check.commit().unwrap(), TxnOutcome::Committed);
    assert_eq!((x, y), (50 - 30 + 10 + 100, 50 + 30 - 10), "every transfer exactly once");
}

/// The blocking API's detailed commits (issue #19): on a Kairos table, `commit_detailed` and
/// `run_txn_detailed` return what the committed transaction saw, as the async API does: its
/// commit timestamp, each read's `(table, key, value, vts)` with the `vts` the writer's
/// commit timestamp, its writes, and whether it was read-only (an RO's timestamp is at or
/// above every `vts` it read). An aborted transaction and one over a RIFL table have none.
#[test]
fn blocking_detailed_commits_report_kairos_timestamps() {
    use strata_client::{blocking, AbortReason, ReadInfo, RetryPolicy, TxnOutcome};
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build();
    let rt = rt.unwrap();
    let (_nodes, endpoints) = rt.block_on(kairos_cluster(kairos_table("kbank", 2)));
    let client = blocking::Client::connect(&endpoints, opts()).unwrap();
    let bytes = |s: &str| bytes::Bytes::copy_from_slice(s.as_bytes());

    let mut init = client.transaction();
    init.write("kbank", "a", "1");
    init.write("kbank", "b", "2");
    let (outcome, info) = init.commit_detailed().unwrap();
    assert_eq!(outcome, TxnOutcome::Committed);
    let init = info.expect("a committed Kairos transaction has its commit info");
    assert!(!init.read_only && init.reads.is_empty());
    let write = |k: &str, v: &str| ("kbank".to_string(), bytes(k), Some(bytes(v)));
    assert_eq!(init.writes, vec![write("a", "1"), write("b", "2")]);

    // A transfer through `run_txn_detailed`: an attempt that read before the decisions
    // applied aborts (the prepared or newer version), so the committed one read at init's
    // timestamp.
    let policy = RetryPolicy { attempts: 1000, ..RetryPolicy::default() };
    let number = |v: Option<bytes::Bytes>| -> u64 {
        std::str::from_utf8(&v.expect("a balance")).unwrap().parse().unwrap()
    };
    let (sum, rw) = client
        .run_txn_detailed(policy, |tx| {
            let (x, y) = (number(tx.read("kbank", "a")?), number(tx.read("kbank", "b")?));
            tx.write("kbank", "a", (x + 1).to_string());
            tx.write("kbank", "b", (y - 1).to_string());
            Ok(x + y)
        })
        .unwrap();
    assert_eq!(sum, 3);
    let rw = rw.expect("commit info");
    let read = |key: &str, value: &str, vts| ReadInfo {
        table: "kbank".into(),
        key: bytes(key),
        value: Some(bytes(value)),
        vts,
    };
    assert_eq!(rw.reads, vec![read("a", "1", init.commit_ts), read("b", "2", init.commit_ts)]);
    assert!(!rw.read_only && rw.commit_ts > init.commit_ts, "{rw:?} after {init:?}");
    assert_eq!(rw.writes, vec![write("a", "2"), write("b", "1")]);

    // A read-only transaction: at or above every version it read.
    let (_, ro) = client.run_txn_detailed(policy, |tx| tx.read("kbank", "a")).unwrap();
    let ro = ro.expect("commit info");
    assert!(ro.read_only && ro.writes.is_empty());
    assert_eq!(ro.reads, vec![read("a", "2", rw.commit_ts)]);
    assert!(ro.commit_ts >= rw.commit_ts, "{ro:?}");

    // An aborted transaction has no commit info.
    let mut stale = client.transaction();
    stale.read("kbank", "a").unwrap();
    let mut change = client.transaction();
    change.write("kbank", "a", "9");
    assert_eq!(change.commit_and_sync().unwrap(), TxnOutcome::Committed);
    stale.write("kbank", "b", "0");
    let (outcome, info) = stale.commit_detailed().unwrap();
    assert_eq!((outcome, info), (TxnOutcome::Aborted { reason: AbortReason::Stale }, None));

    // Nor has one over a RIFL table (no timestamps there).
    let mut tx = client.transaction();
    tx.write("rbank", "k", "v");
    assert_eq!(tx.commit_detailed().unwrap(), (TxnOutcome::Committed, None));
}

/// Reads served by `table`'s shard-0 leader so far.
async fn leader_reads(endpoints: &[SocketAddr], table: &str) -> u64 {
    leader_of(&table_shards(endpoints, table).await).expect("a leader").reads_served
}

/// The Kairos client cache under self-invalidating leases (kairos.md §5.2, §5.5, §5.10,
/// §5.12, §7 inv. 3, 10, 12), on three in-process nodes. With `Fixed(60 s)` a second
/// transaction's read of a hot key is a hit and the leader serves no read for it; a value
/// made stale by another client's commit is still served from the cache, and both an RW and
/// an RO transaction that read it abort `Stale` (no stale read commits), the entry is dropped
/// and the retry reads the new value and commits. A `Fixed(300 ms)` lease expires and the
/// next read fetches again. `W` appears after a key's second commit and `Ideal` then caches
/// it. The servers keep no sharer state and push nothing in lease mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kairos_cache_serves_hot_keys_and_validation_rejects_its_stale_hits() {
    kairos_cache_scenario(kairos_table("kc", 1)).await;
}

/// The same with sharded validators (`sharded:2`): reads (and the cache's fetches) go to the
/// data shard, whose `W` the cache uses; a stale hit is refused by the key's validator, whose
/// object (`kc.validators`, key) names the cached key of `kc`, so the entry is dropped and
/// counted as a stale hit as in server-side validation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kairos_cache_with_sharded_validators() {
    let def = TableDef { validation: TableValidation::Sharded(2), ..kairos_table("kc", 1) };
    kairos_cache_scenario(def).await;
}

/// The cache scenario above over the Kairos table `def` (`kc`, one data shard).
async fn kairos_cache_scenario(def: TableDef) {
    use strata_client::{AbortReason, LeasePolicy, TxnOutcome};
    let (_nodes, endpoints) = cluster_with(std::slice::from_ref(&def)).await;
    let writer = Client::connect(&endpoints, opts()).await.unwrap();
    assert_eq!(writer.kairos_cache_stats(), None, "no cache unless asked for");
    put_txn(&writer, "kc", "hot", "1").await;
    let reader = caching_client(&endpoints, LeasePolicy::Fixed(Duration::from_secs(60))).await;
    let stats = || reader.kairos_cache_stats().unwrap();

    // A miss fetches and caches; the next transaction's read is a hit: no read reaches
    // the leader.
    assert_eq!(read_txn(&reader, "kc", "hot", None).await.1, TxnOutcome::Committed);
    assert_eq!((stats().cache.hits, stats().cache.misses), (0, 1));
    let served = leader_reads(&endpoints, "kc").await;
    let (v, outcome) = read_txn(&reader, "kc", "hot", None).await;
    assert_eq!((v.as_deref(), outcome), (Some(&b"1"[..]), TxnOutcome::Committed));
    assert_eq!((stats().cache.hits, stats().cache.misses), (1, 1));
    assert_eq!(leader_reads(&endpoints, "kc").await, served, "a hit sends no read");

    // Another client's commit makes the cached value stale: the hit still serves "1", and
    // validation aborts the RW transaction that read it (§5.15); the entry is dropped.
    put_txn(&writer, "kc", "hot", "2").await;
    let (v, outcome) = read_txn(&reader, "kc", "hot", Some(("other", "x"))).await;
    assert_eq!(v.as_deref(), Some(&b"1"[..]), "a stale hit");
    assert_eq!(outcome, TxnOutcome::Aborted { reason: AbortReason::Stale });
    assert_eq!((stats().stale_hits, stats().cache.dropped), (1, 1));
    let (v, outcome) = read_txn(&reader, "kc", "hot", Some(("other", "y"))).await;
    assert_eq!((v.as_deref(), outcome), (Some(&b"2"[..]), TxnOutcome::Committed));
    assert_eq!((stats().cache.hits, stats().cache.misses), (2, 2));
    // The same for a read-only transaction.
    put_txn(&writer, "kc", "hot", "3").await;
    let (v, outcome) = read_txn(&reader, "kc", "hot", None).await;
    assert_eq!(v.as_deref(), Some(&b"2"[..]));
    assert_eq!(outcome, TxnOutcome::Aborted { reason: AbortReason::Stale });
    assert_eq!(read_txn(&reader, "kc", "hot", None).await.0.as_deref(), Some(&b"3"[..]));
    assert_eq!(stats().stale_hits, 2);
    // A commit drops the keys it wrote (§5.5): the reader's own write of a cached key.
    assert_eq!(read_txn(&reader, "kc", "other", None).await.0.as_deref(), Some(&b"y"[..]));
    let before = stats().cache;
    put_txn(&reader, "kc", "other", "z").await;
    assert_eq!(read_txn(&reader, "kc", "other", None).await.0.as_deref(), Some(&b"z"[..]));
    let after = stats().cache;
    assert_eq!((after.dropped, after.misses), (before.dropped + 1, before.misses + 1));

    // Self-invalidation (§7 inv. 10): a 300 ms lease is served, then fetched again.
    let short = caching_client(&endpoints, LeasePolicy::Fixed(Duration::from_millis(300))).await;
    read_txn(&short, "kc", "hot", None).await;
    read_txn(&short, "kc", "hot", None).await;
    assert_eq!(short.kairos_cache_stats().unwrap().cache.hits, 1);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let served = leader_reads(&endpoints, "kc").await;
    read_txn(&short, "kc", "hot", None).await;
    let s = short.kairos_cache_stats().unwrap().cache;
    assert_eq!((s.hits, s.expired), (1, 1), "{s:?}");
    assert_eq!(leader_reads(&endpoints, "kc").await, served + 1, "an expired lease fetches");

    // §5.10: W after a key's second commit (commit timestamps at least 20 ms apart).
    let mut table = writer.table("kc").await.unwrap();
    put_txn(&writer, "kc", "warm", "1").await;
    assert_eq!(table.get("warm").await.unwrap().w_mean_ns, None, "one write, no gap");
    tokio::time::sleep(Duration::from_millis(20)).await;
    put_txn(&writer, "kc", "warm", "2").await;
    let w = table.get("warm").await.unwrap().w_mean_ns.expect("W after two commits");
    assert!(w >= 20_000_000, "W = {w} ns");
    // Ideal (Algorithm 1): no R yet, no caching; reads a few ms apart give R, and the
    // lease the model gives for (R, W) is finite and serves hits.
    let ideal = caching_client(&endpoints, LeasePolicy::Ideal).await;
    for _ in 0..20 {
        read_txn(&ideal, "kc", "warm", None).await;
    }
    let s = ideal.kairos_cache_stats().unwrap().cache;
    assert!(s.hits > 0 && s.misses >= 2, "{s:?}");
    let lease = LeasePolicy::Ideal.lease_duration(
        Some(Duration::from_millis(2)),
        Some(Duration::from_nanos(w)),
        &Default::default(),
    );
    assert!(
        matches!(lease, strata_client::LeaseDuration::For(d) if d < Duration::from_secs(5)),
        "{lease:?}"
    );

    // §7 inv. 12: lease mode keeps no sharer state and pushes nothing.
    for s in table_shards(&endpoints, "kc").await {
        assert_eq!((s.kairos_sharers, s.kairos_invalidations), (0, 0), "{s:?}");
    }
}

/// The cache and the watermarks (kairos.md §5.2, §5.5 \[DECISION\], §5.9) on three in-process
/// nodes: an entry keeps the `fts = max(vts, wm)` of its fetch, above the version once the
/// reader's `wm_view` passed it, and a hit reads at that `fts`; while the reader reports,
/// its cache's smallest `fts` holds `ts_GC` back (`c_freshness`), so a hit 1.5 s later still
/// commits; once its reports stop and expire, the other client's freshness moves `ts_GC`
/// past the entry, a transaction reading the hit aborts `TooOld`, the entry (`fts < ts_GC`)
/// is dropped, and the retry fetches again and commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kairos_cache_entries_keep_their_fts_hold_ts_gc_and_go_after_too_old() {
    kairos_cache_watermark_scenario(kairos_table("kw", 1)).await;
}

/// The same with sharded validators (`sharded:2`): `TooOld` is the validators'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kairos_cache_and_watermarks_with_sharded_validators() {
    let def = TableDef { validation: TableValidation::Sharded(2), ..kairos_table("kw", 1) };
    kairos_cache_watermark_scenario(def).await;
}

async fn kairos_cache_watermark_scenario(def: TableDef) {
    use strata_client::{AbortReason, LeasePolicy, TxnOutcome};
    let (_nodes, endpoints) = cluster_with(std::slice::from_ref(&def)).await;
    let writer = Client::connect(&endpoints, opts()).await.unwrap();
    put_txn(&writer, "kw", "hot", "1").await;
    let vts = writer.table("kw").await.unwrap().get("hot").await.unwrap().vts;
    let reader = caching_client(&endpoints, LeasePolicy::Fixed(Duration::from_secs(60))).await;
    let stats = || reader.kairos_cache_stats().unwrap().cache;
    // The reader registers (a first read of another key) and its view passes the version.
    read_txn(&reader, "kw", "cold", None).await;
    eventually("the reader's wm_view above hot's version", Duration::from_secs(5), || {
        reader.kairos_watermarks().0 > vts
    })
    .await;

    // A miss caches fts = max(vts, wm) > vts; a hit reads at the entry's fts.
    let mut miss = reader.transaction();
    miss.read("kw", "hot").await.unwrap();
    let fts = miss.kairos_fts("kw", "hot").unwrap();
    assert!(fts > vts, "fts {fts} of the fetch not above vts {vts}");
    assert_eq!(miss.commit().await.unwrap(), TxnOutcome::Committed);
    // 1.5 s of reports (beyond the leaders' 1 s expiry): the entry holds ts_GC at its fts.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut hit = reader.transaction();
    hit.read("kw", "hot").await.unwrap();
    assert_eq!(hit.kairos_fts("kw", "hot"), Some(fts), "a hit reads at its fetch's fts");
    hit.write("kw", "a", "1");
    assert_eq!(hit.commit_and_sync().await.unwrap(), TxnOutcome::Committed, "held ts_GC");
    assert_eq!(stats().hits, 1);

    // The reader goes silent; its report expires and ts_GC passes the entry: TooOld, and
    // the entry goes.
    reader.pause_kairos_reports(true);
    eventually_ts_gc_above(&writer, fts).await;
    let dropped = stats().dropped;
    let (v, outcome) = read_txn(&reader, "kw", "hot", Some(("b", "1"))).await;
    assert_eq!(v.as_deref(), Some(&b"1"[..]));
    assert_eq!(outcome, TxnOutcome::Aborted { reason: AbortReason::TooOld });
    // Both entries (hot and cold, fetched before the silence) are below ts_GC now.
    assert_eq!((stats().hits, stats().dropped), (2, dropped + 2), "dropped below ts_GC");
    let misses = stats().misses;
    let (_, outcome) = read_txn(&reader, "kw", "hot", Some(("b", "2"))).await;
    assert_eq!((outcome, stats().misses), (TxnOutcome::Committed, misses + 1), "fetched again");
}

/// §5.5 with two cached keys in one participant: a shard's answer stops at its first abort,
/// so the `Stale` vote comes on the participant's first object ("a") while the stale entry is
/// the second ("b"). The abort must drop "b" too: the retry reads the new value and commits
/// (dropping only "a" left "b" stale and the transaction aborting on every retry).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_entry_behind_another_key_of_its_participant_is_dropped() {
    use strata_client::{AbortReason, LeasePolicy, TxnOutcome};
    let (_nodes, endpoints) = cluster_with(&[kairos_table("kp", 1)]).await;
    let writer = Client::connect(&endpoints, opts()).await.unwrap();
    put_txn(&writer, "kp", "a", "1").await;
    put_txn(&writer, "kp", "b", "1").await;
    let reader = caching_client(&endpoints, LeasePolicy::Fixed(Duration::from_secs(60))).await;
    let both = || async {
        let mut tx = reader.transaction();
        let a = tx.read("kp", "a").await.unwrap();
        let b = tx.read("kp", "b").await.unwrap();
        (a, b, tx.commit_and_sync().await.unwrap())
    };
    assert_eq!(both().await.2, TxnOutcome::Committed);
    put_txn(&writer, "kp", "b", "2").await;
    let (_, b, outcome) = both().await;
    assert_eq!(
        (b.as_deref(), outcome),
        (Some(&b"1"[..]), TxnOutcome::Aborted { reason: AbortReason::Stale })
    );
    let (_, b, outcome) = both().await;
    assert_eq!(
        (b.as_deref(), outcome),
        (Some(&b"2"[..]), TxnOutcome::Committed),
        "the retry reads b again"
    );
    assert_eq!(reader.kairos_cache_stats().unwrap().stale_hits, 1);
}

/// Explicit invalidation across a shard move (kairos.md §5.14.2, rifl.md §5.7), on four
/// in-process nodes: the shard of a cached key moves to the three nodes other than its
/// leader, whose retired replica tells its sharer that no invalidation will come from it any
/// more (the entry is dropped); the next read registers at the new group's leader, whose
/// commits invalidate it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_shards_sharers_are_told_and_register_again_at_the_new_group() {
    use strata_client::{LeasePolicy, TxnOutcome};
    let def = kairos_table("km", 1);
    let (_nodes, endpoints) = cluster_of_with(4, std::slice::from_ref(&def)).await;
    let writer = Client::connect(&endpoints, opts()).await.unwrap();
    put_txn(&writer, "km", "hot", "1").await;
    let reader = caching_client(&endpoints, LeasePolicy::ExplicitInvalidation).await;
    let stats = || reader.kairos_cache_stats().unwrap();
    read_txn(&reader, "km", "hot", None).await;
    let from =
        leader_of(&table_shards(&endpoints, "km").await).and_then(|l| l.leader).expect("a leader");
    let to: Vec<NodeId> = (0..4).map(NodeId).filter(|&n| n != from).collect();
    writer.move_shard("km", 0, to.clone()).await.unwrap();
    eventually("the retired leader's push", Duration::from_secs(10), || stats().orphaned == 1)
        .await;

    let (v, outcome) = read_txn(&reader, "km", "hot", None).await;
    assert_eq!((v.as_deref(), outcome), (Some(&b"1"[..]), TxnOutcome::Committed));
    put_txn(&writer, "km", "hot", "2").await;
    eventually("the new leader's invalidation", Duration::from_secs(10), || {
        stats().invalidations == 1
    })
    .await;
    let (v, outcome) = read_txn(&reader, "km", "hot", None).await;
    assert_eq!((v.as_deref(), outcome), (Some(&b"2"[..]), TxnOutcome::Committed));
    assert_eq!(stats().stale_hits, 0);
}

/// Explicit invalidation (kairos.md §5.14.2), on three in-process nodes: a cached key's
/// reader is registered as a sharer at the leader; another client's commit pushes an
/// invalidation that drops the entry (waited for), and the next read fetches the new value;
/// the sharer set is cleared by the push and refilled by the fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_invalidation_pushes_drop_cached_entries() {
    use strata_client::{LeasePolicy, TxnOutcome};
    let (_nodes, endpoints) = cluster_with(&[kairos_table("ke", 1)]).await;
    let writer = Client::connect(&endpoints, opts()).await.unwrap();
    put_txn(&writer, "ke", "hot", "1").await;
    let reader = caching_client(&endpoints, LeasePolicy::ExplicitInvalidation).await;
    let stats = || reader.kairos_cache_stats().unwrap();
    read_txn(&reader, "ke", "hot", None).await;
    let leader = |shards: Vec<ShardStatus>| leader_of(&shards).cloned().expect("a leader");
    assert_eq!(leader(table_shards(&endpoints, "ke").await).kairos_sharers, 1);
    let (v, outcome) = read_txn(&reader, "ke", "hot", None).await;
    assert_eq!((v.as_deref(), outcome), (Some(&b"1"[..]), TxnOutcome::Committed));
    assert_eq!(stats().cache.hits, 1);

    put_txn(&writer, "ke", "hot", "2").await;
    eventually("the invalidation", Duration::from_secs(10), || stats().invalidations == 1).await;
    assert_eq!(stats().cache.dropped, 1);
    let l = leader(table_shards(&endpoints, "ke").await);
    assert_eq!((l.kairos_sharers, l.kairos_invalidations), (0, 1));
    let (v, outcome) = read_txn(&reader, "ke", "hot", None).await;
    assert_eq!((v.as_deref(), outcome), (Some(&b"2"[..]), TxnOutcome::Committed));
    assert_eq!((stats().cache.hits, stats().cache.misses, stats().stale_hits), (1, 2, 0));
    assert_eq!(leader(table_shards(&endpoints, "ke").await).kairos_sharers, 1);
}

/// Reads for update through the client library and the node runtime: tasks of two clients
/// increment one counter concurrently, each reading it for update; every increment lands
/// exactly once, and the shard's leader reports reads it held back for another's prepare
/// (`strata status --json`'s `txn_reads_held`), answered with what that prepare wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_for_update_queue_increments_of_one_key() {
    use strata_client::RetryPolicy;
    const TASKS: u64 = 8;
    const EACH: u64 = 15;
    let (_nodes, endpoints) = cluster_with(&[txn_table("ctr", 1)]).await;
    let clients = [
        Client::connect(&endpoints, opts()).await.unwrap(),
        Client::connect(&endpoints, opts()).await.unwrap(),
    ];
    clients[0].table("ctr").await.unwrap().put("c", "0").await.unwrap();
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let client = clients[i as usize % 2].clone();
            tokio::spawn(async move {
                let policy = RetryPolicy { attempts: 1_000, ..RetryPolicy::default() };
                for _ in 0..EACH {
                    client
                        .run_txn(policy, |tx| {
                            Box::pin(async move {
                                let v = tx.read_for_update("ctr", "c").await?.unwrap();
                                let n: u64 = std::str::from_utf8(&v).unwrap().parse().unwrap();
                                tx.write("ctr", "c", (n + 1).to_string());
                                Ok(())
                            })
                        })
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let v = clients[0].table("ctr").await.unwrap().get("c").await.unwrap().value;
    assert_eq!(v.as_deref(), Some((TASKS * EACH).to_string().as_bytes()));
    let shards = table_shards(&endpoints, "ctr").await;
    let leader = leader_of(&shards).expect("a leader");
    assert!(leader.txn_reads_held > 0, "no read for update was held: {leader:?}");
    assert!(leader.txn_reads_foreseen > 0, "none read a pending prepare's value: {leader:?}");
}

/// A transaction dropped after its read for update releases the key: the next read for update
/// of it is answered at once, not when the hold lapses (3 s on these nodes) — through the
/// async API, through the blocking one (dropped in a thread without a runtime), and with
/// an explicit `rollback`. The
/// control: a transaction that is never dropped (forgotten) holds the key for the hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_transaction_releases_its_reads_for_update() {
    const HOLD: Duration = Duration::from_secs(3);
    let tune = |cfg: &mut strata_node::NodeConfig| cfg.txn_read_hold_ms = HOLD.as_millis() as u64;
    let (_nodes, endpoints) = cluster_of_with_tuned(3, &[txn_table("ctr", 1)], tune).await;
    let client = Client::connect(&endpoints, opts()).await.unwrap();
    client.table("ctr").await.unwrap().put("c", "0").await.unwrap();
    // A read for update of `c`, and how long it waited.
    let reserve = |client: Client| async move {
        let start = Instant::now();
        let mut tx = client.transaction();
        tx.read_for_update("ctr", "c").await.unwrap();
        (tx, start.elapsed())
    };
    let (first, _) = reserve(client.clone()).await;
    std::mem::forget(first);
    let (second, waited) = reserve(client.clone()).await;
    assert!(waited >= HOLD - Duration::from_millis(200), "not held back: {waited:?}");
    drop(second);
    let (third, waited) = reserve(client.clone()).await;
    assert!(waited < HOLD / 3, "the dropped transaction's key was held {waited:?}");
    drop(third);
    let blocking_endpoints = endpoints.clone();
    tokio::task::spawn_blocking(move || {
        let c = strata_client::blocking::Client::connect(&blocking_endpoints, opts()).unwrap();
        let mut tx = c.transaction();
        tx.read_for_update("ctr", "c").unwrap();
        drop(tx);
        // Kept until the release was sent: it runs on this client's runtime.
        std::thread::sleep(Duration::from_millis(300));
    })
    .await
    .unwrap();
    let (fifth, waited) = reserve(client.clone()).await;
    assert!(waited < HOLD / 3, "the blocking transaction's key was held {waited:?}");
    // A rollback has released the key when it returns.
    fifth.rollback().await;
    let (_, waited) = reserve(client.clone()).await;
    assert!(waited < HOLD / 3, "the rolled-back transaction's key was held {waited:?}");
}

/// Runs `tasks` on tasks of their own, all at once, and waits for every one.
async fn run_concurrently<F>(tasks: impl IntoIterator<Item = F>)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let handles: Vec<_> = tasks.into_iter().map(tokio::spawn).collect();
    for h in handles {
        h.await.unwrap();
    }
}

/// A decimal value read by a transaction.
fn number(v: &Option<bytes::Bytes>) -> i64 {
    std::str::from_utf8(v.as_deref().expect("a value")).unwrap().parse().unwrap()
}

/// Reads of several keys through the client library: a shard's keys in one `LogReadMany`.
/// Tasks move amounts between accounts over three shards, each reading the transfer's
/// accounts for update together; the total never changes, and a plain `read_many` returns
/// what reading the keys one by one returns, in the order asked, with the transaction's own
/// writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_several_keys_move_amounts_between_shards() {
    use strata_client::RetryPolicy;
    const ACCOUNTS: u64 = 6;
    let (_nodes, endpoints) = cluster_with(&[txn_table("bank", 3)]).await;
    let client = Client::connect(&endpoints, opts()).await.unwrap();
    let account = |i: u64| format!("acct{i}");
    let mut t = client.table("bank").await.unwrap();
    for i in 0..ACCOUNTS {
        t.put(account(i), "100").await.unwrap();
    }
    let transfers = (0..6).map(|i| {
        let client = client.clone();
        async move {
            let policy = RetryPolicy { attempts: 1_000, ..RetryPolicy::default() };
            for j in 0..10 {
                let from = account((i + j) % ACCOUNTS);
                let to = account((i + 2 * j + 1) % ACCOUNTS);
                if from == to {
                    continue;
                }
                let transfer = client.run_txn(policy, |tx| {
                    let (from, to) = (from.clone(), to.clone());
                    Box::pin(async move {
                        let v = tx.read_many_for_update("bank", [from.clone(), to.clone()]).await?;
                        tx.write("bank", from, (number(&v[0]) - 7).to_string());
                        tx.write("bank", to, (number(&v[1]) + 7).to_string());
                        Ok(())
                    })
                });
                transfer.await.unwrap();
            }
        }
    });
    run_concurrently(transfers).await;
    let keys: Vec<String> = (0..ACCOUNTS).rev().map(account).collect();
    let mut tx = client.transaction();
    tx.write("bank", account(0), "written");
    let asked = keys.iter().cloned().chain(["absent".to_string()]);
    let many = tx.read_many("bank", asked).await.unwrap();
    assert_eq!(many.len(), keys.len() + 1);
    assert_eq!(many.last(), Some(&None), "an absent key reads as None");
    let own = many[keys.len() - 1].as_deref();
    assert_eq!(own, Some(&b"written"[..]), "the transaction's own write");
    let mut total = 0;
    for (key, value) in keys.iter().zip(&many) {
        let stored = t.get(key.clone()).await.unwrap().value;
        if key != &account(0) {
            assert_eq!(value, &stored, "{key}");
        }
        total += number(&stored);
    }
    assert_eq!(total, 100 * ACCOUNTS as i64, "transfers conserve the total");
}
