//! Shard moves with real processes (issue #5 item 4, `specs/rifl.md` §5.7, R-G1 "across data
//! migration"): a write whose reply was lost before `strata shard move` is retried after it,
//! with the same RPC id, and is answered from its completion record, which moved with the
//! shard — it does not execute a second time.
//!
//! The sharp case is RIFL's own example of why a retried idempotent write is not harmless: a
//! client's `put k v1` executes in the old replica group, its reply is lost; another client
//! then writes `k = v2`; the shard moves to other nodes; the first client's retry reaches the
//! new group. Executed again it would put `v1` back over `v2` (a write seen twice); answered
//! from its record it returns `v1`'s original index and `k` stays `v2`.
//!
//! While the shard moves, two more writers write keys of their own through proxies that lose
//! every 5th reply: every write is acknowledged (the clients follow `Moved` with the same RPC
//! ids), and every acknowledged write is in the moved shard at the index it was acknowledged
//! with (nothing lost, nothing re-executed under a new index).
//!
//! Canary: the same scenario with a move that drops the completion records on the way
//! (`MovePlant::LoseRecords`) must show the double execution: the retry gets a new
//! index and `k` goes back to `v1`.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::proxy::Proxy;
use common::*;
use strata_client::{Client, ClientOptions, LogIndex, MovePlant, NodeId, ShardRole, Table};

const KEY: &str = "k";

fn opts(timeout: Duration) -> ClientOptions {
    ClientOptions { request_timeout: Some(timeout), ..ClientOptions::default() }
}

async fn table(endpoints: &[SocketAddr], name: &str, timeout: Duration) -> Table {
    Client::connect(endpoints, opts(timeout)).await.unwrap().table(name).await.unwrap()
}

/// The node leading `table`'s shard 0, by a majority of the nodes' status.
async fn leader_of(endpoints: &[SocketAddr], name: &str) -> NodeId {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut votes: BTreeMap<u32, usize> = BTreeMap::new();
        for &addr in endpoints {
            let Ok(c) = Client::connect_node(addr, opts(Duration::from_secs(2))).await else {
                continue;
            };
            let Ok(s) = c.status().await else { continue };
            for sh in s.shards.iter().filter(|sh| sh.table == name && sh.shard == 0) {
                if let Some(l) = sh.leader.filter(|_| sh.role != ShardRole::Candidate) {
                    *votes.entry(l.0).or_default() += 1;
                }
            }
        }
        if let Some((&l, _)) = votes.iter().find(|(_, &n)| n * 2 > endpoints.len()) {
            return NodeId(l);
        }
        assert!(
            Instant::now() < deadline,
            "no leader of {name} agreed on by a majority: {votes:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A writer of its own keys `{name}:{i}` through lossy proxies, until told to stop; returns
/// every acknowledged write `(key, value, index)`.
async fn writer(
    endpoints: Vec<SocketAddr>,
    table_name: String,
    name: String,
    stop: Arc<AtomicBool>,
) -> Vec<(String, String, LogIndex)> {
    let mut t = table(&endpoints, &table_name, Duration::from_secs(60)).await;
    let mut acked = Vec::new();
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let (key, value) = (format!("{name}:{i}"), format!("{name}-value-{i}"));
        let index = t
            .put(key.clone(), value.clone())
            .await
            .unwrap_or_else(|e| panic!("{name}'s write {i} failed: {e}"));
        acked.push((key, value, index));
        i += 1;
    }
    acked
}

/// What the scenario saw.
struct Outcome {
    /// Where `v1` was applied in the old group (as a reader saw it before the move).
    v1_index: LogIndex,
    /// `v2`'s acknowledged index.
    v2_index: LogIndex,
    /// The answer the retried `put k v1` finally got after the move.
    retry_answer: LogIndex,
    /// `k` read after everything.
    final_value: Option<String>,
    final_index: LogIndex,
    /// The nodes the shard moved to, and the leader it moved away from.
    moved_to: Vec<NodeId>,
    old_leader: NodeId,
    /// A write acknowledged by the new group.
    after_move: LogIndex,
    /// Writes of the background writers, acknowledged across the move.
    background: Vec<(String, String, LogIndex)>,
}

/// Runs the scenario of the module docs on `table_name`; `lose_records` plants the canary.
async fn put_retried_across_a_move(up: &Up, table_name: &str, lose_records: bool) -> Outcome {
    let out = up.strata(&["table", "create", table_name, "--shards", "1"]);
    assert!(out.status.success(), "table create: {}", stderr(&out));
    // Every route of the first client goes through a proxy that can lose replies.
    let mut proxies = Vec::new();
    for &addr in &up.endpoints {
        proxies.push(Proxy::start(addr, u64::MAX).await);
    }
    let proxied: Vec<SocketAddr> = proxies.iter().map(|p| p.addr).collect();
    let mut first = table(&proxied, table_name, Duration::from_secs(90)).await;
    first.put("warm-up", "x").await.unwrap(); // its lease and the leader are known now
    let mut second = table(&up.endpoints, table_name, Duration::from_secs(30)).await;

    // Background writers through proxies that lose every 5th reply.
    let mut lossy = Vec::new();
    for &addr in &up.endpoints {
        lossy.push(Proxy::start(addr, 5).await);
    }
    let lossy_addrs: Vec<SocketAddr> = lossy.iter().map(|p| p.addr).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            tokio::spawn(writer(
                lossy_addrs.clone(),
                table_name.to_string(),
                format!("w{w}"),
                stop.clone(),
            ))
        })
        .collect();

    // `put k v1` executes; its replies (and those of its retries) are lost.
    for p in &proxies {
        p.lose_replies.store(true, Ordering::Relaxed);
    }
    let retried = tokio::spawn(async move { first.put(KEY, "v1").await });
    let deadline = Instant::now() + Duration::from_secs(30);
    let v1_index = loop {
        let r = second.get(KEY).await.unwrap();
        if r.value.as_deref() == Some(b"v1".as_slice()) {
            break r.update_index;
        }
        assert!(Instant::now() < deadline, "put k v1 never executed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let v2_index = second.put(KEY, "v2").await.unwrap();
    assert!(v2_index > v1_index);
    assert!(!retried.is_finished(), "the first client heard back although every reply was lost");

    // Move the shard to the nodes other than its leader.
    let leader = leader_of(&up.endpoints, table_name).await;
    let to: Vec<NodeId> =
        (0..up.endpoints.len() as u32).map(NodeId).filter(|&n| n != leader).collect();
    if lose_records {
        let admin = Client::connect(&up.endpoints, opts(Duration::from_secs(30))).await.unwrap();
        admin
            .move_shard_planted(table_name, 0, to.clone(), Some(MovePlant::LoseRecords))
            .await
            .unwrap();
    } else {
        let list: Vec<String> = to.iter().map(|n| n.0.to_string()).collect();
        let out = up.strata(&["shard", "move", table_name, "0", "--to", &list.join(",")]);
        assert!(out.status.success(), "strata shard move: {}", stderr(&out));
        assert!(stdout(&out).contains("moved to nodes"), "{}", stdout(&out));
    }
    // The old leader holds no replica of the shard any more.
    let status =
        Client::connect_node(up.endpoints[leader.0 as usize], opts(Duration::from_secs(5)))
            .await
            .unwrap()
            .status()
            .await
            .unwrap();
    assert!(
        !status.shards.iter().any(|s| s.table == table_name),
        "the old leader still hosts the shard"
    );

    // The retry now reaches the new group.
    for p in &proxies {
        p.lose_replies.store(false, Ordering::Relaxed);
    }
    let retry_answer = retried.await.unwrap().expect("the retried put is answered after the move");
    assert!(proxies.iter().map(|p| p.dropped.load(Ordering::Relaxed)).sum::<u64>() >= 1);

    // A few more background writes in the new group, then stop.
    let after = second.put("after-move", "y").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let mut background = Vec::new();
    for w in writers {
        background.extend(w.await.unwrap());
    }
    let r = second.get(KEY).await.unwrap();
    Outcome {
        v1_index,
        v2_index,
        retry_answer,
        final_value: r.value.map(|v| String::from_utf8_lossy(&v).into_owned()),
        final_index: r.update_index,
        after_move: after,
        moved_to: to,
        old_leader: leader,
        background,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_retried_after_a_shard_move_is_answered_from_its_moved_record() {
    let mut up = Up::start_with(4, &[PLAIN]);
    let o = put_retried_across_a_move(&up, "moving", false).await;
    assert_eq!(
        o.retry_answer, o.v1_index,
        "the retried put k v1 was executed again after the move (answered {} instead of its first index {})",
        o.retry_answer, o.v1_index
    );
    assert_eq!(
        (o.final_value.as_deref(), o.final_index),
        (Some("v2"), o.v2_index),
        "k must keep the later write v2; v1 came back: the retry executed twice"
    );
    // Only the new group exists now, and its indexes are above the old group's: the answer
    // was the old group's record, found in the new group.
    assert!(
        o.after_move.epoch > o.v2_index.epoch,
        "the new group numbers its entries above the old group's"
    );
    // Background writes across the move: all acknowledged, all present at their index.
    assert!(
        o.background.len() >= 10,
        "the writers made progress across the move: {}",
        o.background.len()
    );
    let mut reader = table(&up.endpoints, "moving", Duration::from_secs(30)).await;
    let mut before = 0;
    for (key, value, index) in &o.background {
        let r = reader.get(key.clone()).await.unwrap();
        assert_eq!(
            (r.value.as_deref(), r.update_index),
            (Some(value.as_bytes()), *index),
            "{key}: an acknowledged write is missing or moved to another index"
        );
        before += usize::from(index.epoch <= o.v1_index.epoch);
    }
    assert!(
        before >= 1 && before < o.background.len(),
        "writes acknowledged on both sides of the move ({before} of {} before)",
        o.background.len()
    );

    // The command: running the move again only re-announces it; bad targets are refused
    // before anything freezes; a system table does not move.
    let here: Vec<String> = o.moved_to.iter().map(|n| n.0.to_string()).collect();
    let again = up.strata(&["shard", "move", "moving", "0", "--to", &here.join(",")]);
    assert!(
        again.status.success() && stdout(&again).contains("already on nodes"),
        "{}{}",
        stdout(&again),
        stderr(&again)
    );
    for (args, expect) in [
        (vec!["shard", "move", "moving", "0", "--to", "1,9"], "not a node of this cluster"),
        (vec!["shard", "move", "moving", "3", "--to", "1"], "shards 0 to 0"),
        (vec!["shard", "move", "moving", "0", "--to", "1,1"], "distinct nodes"),
        (vec!["shard", "move", "__leases", "0", "--to", "1"], "system table"),
    ] {
        let out = up.strata(&args);
        assert!(
            !out.status.success() && stderr(&out).contains(expect),
            "{args:?}: {}{}",
            stdout(&out),
            stderr(&out)
        );
    }
    let r = reader.get(KEY).await.unwrap();
    assert_eq!(r.value.as_deref(), Some(b"v2".as_slice()), "refused moves change nothing");

    // A power cut of the whole cluster: every node restarts from its directory with the moved
    // placement and the new group's log. Everything read above was made durable by the read
    // (cad), so all of it is still there, at the same indexes, and served by the new group.
    up.crash_and_restart();
    let mut reader = table(&up.endpoints, "moving", Duration::from_secs(30)).await;
    let r = reader.get(KEY).await.unwrap();
    assert_eq!(
        (r.value.as_deref(), r.update_index),
        (Some(b"v2".as_slice()), o.v2_index),
        "k after the restart"
    );
    assert_ne!(r.served_by, o.old_leader, "the old leader holds no replica any more");
    for (key, value, index) in &o.background {
        let r = reader.get(key.clone()).await.unwrap();
        assert_eq!(
            (r.value.as_deref(), r.update_index),
            (Some(value.as_bytes()), *index),
            "{key} after the restart"
        );
    }
}

/// The canary: a move that loses the completion records lets the retry execute again, and the
/// checks above see it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_a_move_that_loses_the_records_executes_the_retry_twice() {
    let up = Up::start_with(4, &[PLAIN]);
    let o = put_retried_across_a_move(&up, "canary", true).await;
    assert_ne!(
        o.retry_answer, o.v1_index,
        "without its record the retry should have executed again"
    );
    assert!(o.retry_answer > o.v2_index, "the second execution comes after v2, in the new group");
    assert_eq!(o.final_value.as_deref(), Some("v1"), "the double execution put v1 back over v2");
}

/// A move with a node down is refused before anything freezes. An interrupted move is
/// finished by running it again. One new replica misses the install
/// (it is not told to adopt, as if unreachable): the move reports it, the new group runs on
/// the other two (a majority) and takes writes, and the nodes outside the new group keep their
/// frozen copies (they answer `Moved`). Run again, the move completes: the missed replica
/// installs the frozen state or, if the new group answered first, starts from an empty log,
/// and catches up from its leader; every other node retires its copy. Nothing written before or between the runs is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_move_is_finished_by_running_it_again() {
    let up = Up::start_with(4, &[PLAIN]);
    // Reads at any node (no active set), so the caught-up replica can be read directly.
    let out = up.strata(&[
        "table",
        "create",
        "resumed",
        "--shards",
        "1",
        "--durability",
        "async",
        "--reads",
        "any",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut t = table(&up.endpoints, "resumed", Duration::from_secs(30)).await;
    let mut written = Vec::new();
    for i in 0..20 {
        let (k, v) = (format!("k{i}"), format!("v{i}"));
        written.push((k.clone(), v.clone(), t.put(k, v).await.unwrap()));
    }
    // A node that does not answer: the move is refused before anything freezes.
    // SAFETY: a node process this test started (resumed right after).
    // SAFETY: kill(2) on a pid this test started; no memory is touched.
    unsafe { libc::kill(up.pids[0], libc::SIGSTOP) };
    let refused = up.strata(&["shard", "move", "resumed", "0", "--to", "1,2,3", "--timeout", "2"]);
    // SAFETY: kill(2) on a pid this test started; no memory is touched.
    unsafe { libc::kill(up.pids[0], libc::SIGCONT) };
    assert!(
        !refused.status.success() && stderr(&refused).contains("needs every node up"),
        "{}",
        stderr(&refused)
    );
    let (k, v) = ("after-refusal".to_string(), "still writable".to_string());
    written.push((k.clone(), v.clone(), t.put(k, v).await.expect("the shard was not frozen")));

    let to = vec![NodeId(1), NodeId(2), NodeId(3)];
    let admin = Client::connect(&up.endpoints, opts(Duration::from_secs(30))).await.unwrap();
    let err = admin
        .move_shard_planted("resumed", 0, to.clone(), Some(MovePlant::SkipNode(NodeId(3))))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not installed at every new replica"), "{err}");
    // Between the runs: the new group (nodes 1 and 2) takes writes; node 0 still holds its
    // frozen copy.
    for i in 20..30 {
        let (k, v) = (format!("k{i}"), format!("v{i}"));
        written.push((k.clone(), v.clone(), t.put(k, v).await.unwrap()));
    }
    let hosts = |addr| async move {
        let c = Client::connect_node(addr, opts(Duration::from_secs(5))).await.unwrap();
        c.status().await.unwrap().shards.into_iter().find(|s| s.table == "resumed")
    };
    assert!(
        hosts(up.endpoints[0]).await.is_some(),
        "node 0 keeps its copy until every new replica has the state"
    );

    let out = up.strata(&["shard", "move", "resumed", "0", "--to", "1,2,3"]);
    // Either a node of the new group answers "already there" (node 3 then joins from an empty
    // log), or the frozen old group, still under its leader lease, answers with the frozen
    // state again (node 3 installs it): both finish the move.
    assert!(
        out.status.success() && stdout(&out).contains("nodes 1,2,3"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let left = hosts(up.endpoints[0]).await;
    assert!(left.is_none(), "node 0 retired its copy: {left:?}; {}", stdout(&out));
    // Node 3 catches up from the group's leader and serves every write.
    let last = written.last().unwrap().2;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = hosts(up.endpoints[3]).await.expect("node 3 hosts the shard");
        if s.applied_index >= last {
            break;
        }
        assert!(Instant::now() < deadline, "node 3 did not catch up: {s:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for (k, v, index) in &written {
        let deadline = Instant::now() + Duration::from_secs(10);
        let r = loop {
            match t.try_get_at(k.clone(), 3).await.unwrap() {
                Ok(r) => break r,
                Err(f) => {
                    if Instant::now() >= deadline {
                        let mut all = Vec::new();
                        for &a in &up.endpoints {
                            all.push(hosts(a).await);
                        }
                        panic!("node 3 does not serve {k}: {f:?}; shard status at every node: {all:#?}");
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        assert_eq!(
            (r.value.as_deref(), r.update_index, r.served_by),
            (Some(v.as_bytes()), *index, NodeId(3)),
            "{k}"
        );
    }
}
