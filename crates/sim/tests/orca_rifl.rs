//! Exactly-once writes in log tables (rifl.md §5.3, §7 inv. 1 - 3; `strata_log` `writes`
//! module): cluster scenarios on the simulator's driver — retries across leader changes, a
//! retry appended twice, stale duplicates after a restart of every node — and the §7 harness
//! with the `NoDedup` canary (caught by the exactly-once checkers on most seeds, the same seeds
//! clean without it) and `SkipLeaderDedup` (the apply-time filter alone keeps every checker
//! quiet). Single-core unit tests of the same rules are in `crates/log/src/core_tests.rs`.

use bytes::Bytes;
use strata_log::{
    LogConfig, LogIndex, PlantedBug, Replication, RpcId, WriteAck, WriteError, WriteOp,
};
use strata_sim::orca::{
    run_orca, HarnessOptions, Mode, OrcaCluster, OrcaReport, AT_MOST_ONCE, STABLE_RESULT,
};

fn orca() -> LogConfig {
    LogConfig::orca(Replication::Async)
}

fn assert_clean(c: &mut OrcaCluster) {
    let l = c.leader();
    c.finish(l);
    let v = c.violations();
    assert!(v.is_empty(), "violations: {v:#?}");
}

fn put(v: &str) -> WriteOp {
    WriteOp::Put(Bytes::copy_from_slice(v.as_bytes()))
}

/// Writes and waits for the answer; panics unless it is `Ok`.
fn ok(c: &mut OrcaCluster, t: u64) -> WriteAck {
    c.wait_reply(t);
    c.write_result(t).expect("answered").expect("ok")
}

/// How many entries of `rpc` node `i`'s log holds.
fn entries_of(c: &OrcaCluster, i: usize, rpc: RpcId) -> usize {
    c.node(i).entries().iter().filter(|e| e.client_id == rpc.client_id && e.seq == rpc.seq).count()
}

/// The indexes of `rpc` whose mutation took effect at node `i` (over the whole run, replays
/// after restarts included).
fn executed_at(c: &OrcaCluster, i: usize, rpc: RpcId) -> Vec<LogIndex> {
    let me = c.ids[i];
    let mut idx: Vec<LogIndex> = c
        .history
        .executions
        .iter()
        .filter(|x| x.node == me && x.rpc == rpc)
        .map(|x| x.index)
        .collect();
    idx.sort_unstable();
    idx.dedup();
    idx
}

#[test]
fn a_retry_after_a_leader_change_finds_the_record_at_the_new_leader() {
    let mut c = OrcaCluster::new(5, orca());
    let l = c.elect();
    let t = c.write_as(7, l, "k", put("a"), false);
    let first = ok(&mut c, t);
    let rpc = c.write_rpc(t).unwrap();
    c.run_ms(200); // replicated and applied everywhere
    c.crash(l);
    let l2 = c.elect();
    assert_ne!(l2, l);
    let last = c.node(l2).last_index();
    let t2 = c.retry_write(t, l2);
    assert_eq!(ok(&mut c, t2), first, "the new leader answers from the replicated record");
    assert_eq!(c.node(l2).last_index(), last, "nothing appended");
    assert_eq!(entries_of(&c, l2, rpc), 1);
    c.restart(l);
    c.run_ms(300);
    assert_clean(&mut c);
}

#[test]
fn a_retry_appended_twice_across_a_leader_change_executes_once_at_every_replica() {
    // The leader skips its duplicate check, so the retry is appended again: the apply-time
    // filter must skip it at every replica, including the old leader after its restart.
    let mut cfg = orca();
    cfg.planted_bug = Some(PlantedBug::SkipLeaderDedup);
    let mut c = OrcaCluster::new(5, cfg);
    let l = c.elect();
    c.write_reply_loss = 1.0; // the client never hears about `a`
    let ta = c.write_as(7, l, "k", put("a"), false);
    c.run_ms(50);
    c.write_reply_loss = 0.0;
    let rpc = c.write_rpc(ta).unwrap();
    assert!(c.unanswered(rpc));
    let tb = c.write_as(7, l, "k", put("b"), false);
    let b = ok(&mut c, tb);
    c.run_ms(200);
    c.crash(l);
    let l2 = c.elect();
    let ta2 = c.retry_write(ta, l2);
    let a = ok(&mut c, ta2);
    assert!(a.index < b.index, "answered with the first entry's index, not the new one");
    assert_eq!(entries_of(&c, l2, rpc), 2, "appended again");
    c.restart(l);
    c.run_ms(500);
    for i in 0..5 {
        assert_eq!(
            c.node(i).get(b"k"),
            (Some(Bytes::from_static(b"b")), b.index),
            "n{i}: `a` did not run again"
        );
        assert_eq!(entries_of(&c, i, rpc), 2, "n{i}");
        assert_eq!(executed_at(&c, i, rpc), vec![a.index], "n{i}");
    }
    assert_clean(&mut c);
}

#[test]
fn a_stale_retry_is_refused_also_after_every_node_restarted() {
    let mut c = OrcaCluster::new(3, orca());
    let l = c.elect();
    let ta = c.write_as(7, l, "k", put("a"), false);
    ok(&mut c, ta);
    // The next write carries first_incomplete = 2: seq 1 is acknowledged.
    let tb = c.write_as(7, l, "k", put("b"), false);
    let b = ok(&mut c, tb);
    let t = c.retry_write(ta, l);
    c.wait_reply(t);
    assert_eq!(c.write_result(t), Some(Err(WriteError::Stale)));
    // A write with immediate durability makes everything durable, then every node restarts.
    let tz = c.write_as(8, l, "z", put("z"), true);
    ok(&mut c, tz);
    c.run_ms(200);
    for i in 0..3 {
        c.crash(i);
    }
    for i in 0..3 {
        c.restart(i);
    }
    let l = c.elect();
    assert_eq!(c.node(l).client_ack(7), 1, "the watermark came back with the replay");
    let t = c.retry_write(ta, l);
    c.wait_reply(t);
    assert_eq!(c.write_result(t), Some(Err(WriteError::Stale)));
    let t = c.retry_write(tb, l);
    assert_eq!(ok(&mut c, t), b, "the record of seq 2 came back too");
    assert_clean(&mut c);
}

#[test]
fn a_retry_while_the_first_attempt_waits_shares_its_entry() {
    let mut c = OrcaCluster::new(3, LogConfig::strong_zk());
    let l = c.elect();
    let t1 = c.write_as(7, l, "k", put("a"), false);
    let t2 = c.retry_write(t1, l);
    assert!(c.write_result(t1).is_none(), "sync durability: waits for the fsync");
    let (a, b) = (ok(&mut c, t1), ok(&mut c, t2));
    assert_eq!(a, b);
    assert_eq!(entries_of(&c, l, c.write_rpc(t1).unwrap()), 1);
    assert_clean(&mut c);
}

const SEEDS: std::ops::Range<u64> = 0..20;

fn caught(r: &OrcaReport) -> bool {
    r.violations.iter().any(|v| v.checker == AT_MOST_ONCE || v.checker == STABLE_RESULT)
}

#[test]
fn the_no_dedup_canary_is_caught_on_most_seeds_and_the_same_seeds_pass_without_it() {
    for mode in [Mode::Orca, Mode::Strong] {
        let opts =
            HarnessOptions { canary: Some(PlantedBug::NoDedup), ..HarnessOptions::default() };
        let hits: Vec<u64> = SEEDS.filter(|&s| caught(&run_orca(mode, s, &opts))).collect();
        eprintln!("NoDedup in {mode}: caught in {} of {} seeds", hits.len(), SEEDS.count());
        assert!(
            hits.len() * 4 >= SEEDS.count() * 3,
            "{mode}: only {} of {} seeds caught",
            hits.len(),
            SEEDS.count()
        );
        for s in SEEDS {
            let r = run_orca(mode, s, &HarnessOptions::default());
            assert!(r.passed(), "{mode} seed {s} fails without the bug:\n{}", r.render(10));
        }
    }
}

#[test]
fn the_apply_time_filter_alone_keeps_every_checker_quiet() {
    // The leader appends every retry; replicas must still execute each RPC once.
    let opts =
        HarnessOptions { canary: Some(PlantedBug::SkipLeaderDedup), ..HarnessOptions::default() };
    let mut appended_twice = 0;
    for mode in [Mode::Orca, Mode::Strong] {
        for s in SEEDS {
            let r = run_orca(mode, s, &opts);
            assert!(r.passed(), "{mode} seed {s}:\n{}", r.render(10));
            let mut ids: Vec<(u64, u64)> = r
                .history
                .h
                .iter()
                .filter(|e| e.client_id != 0)
                .map(|e| (e.client_id, e.seq))
                .collect();
            let n = ids.len();
            ids.sort_unstable();
            ids.dedup();
            appended_twice += n - ids.len();
        }
    }
    eprintln!("{appended_twice} retries appended twice in H");
    assert!(appended_twice >= 20, "the harness must produce duplicates for this to mean anything");
}

/// rifl.md §5.7 steps 1-2 across a leader change: the leader is crashed at several moments
/// after it appended the `Freeze` (isolated so it never replicated, mid-way, after the
/// commit), and the
/// admin asks the next leader again. Then: one final state, the same at every replica that
/// applied a freeze; every acknowledged write is in it (its record, or a watermark covering
/// it); a write in flight at the freeze either executed before it (its record is in the state,
/// where the new group answers its retry) or never executes here; nothing
/// executes after the freeze, and new writes are answered `Moved`.
#[test]
fn a_freeze_across_a_leader_change_freezes_one_final_state() {
    use strata_log::Snapshot;
    use strata_wire::log::ShardMove;
    use strata_wire::NodeId;
    // The next group: nodes of the cluster (a host refuses a move to nodes it does not know).
    let to = ShardMove { generation: 1, replicas: vec![NodeId(3), NodeId(4)] };
    // Whether the crashed leader's `Freeze` survived (or the next leader appended its own).
    let mut survived = Vec::new();
    // Write paths whose acknowledgement survives a leader crash (under `Async` an acknowledged
    // write may be lost with its leader, freeze or not: ORCA §5.1).
    let configs = [LogConfig::orca(Replication::SyncRepl), LogConfig::strong_zk()];
    let cases = [(true, 0), (false, 0), (false, 1), (false, 3), (false, 10), (false, 60)];
    for (cfg, (isolated, crash_after_ms)) in
        configs.iter().flat_map(|c| cases.iter().map(move |k| (c.clone(), *k)))
    {
        let mut c = OrcaCluster::new(5, cfg);
        let l = c.elect();
        let first_epoch = c.node(l).epoch();
        let mut acked = Vec::new();
        for k in 0..12u64 {
            let t = c.write_as(1 + k % 3, l, &format!("k{}", k % 4), put(&format!("v{k}")), false);
            acked.push((c.write_rpc(t).unwrap(), ok(&mut c, t).index));
        }
        let inflight: Vec<u64> =
            (0..3u64).map(|k| c.write_as(10 + k, l, "x", put(&format!("x{k}")), false)).collect();
        if isolated {
            c.isolate(l); // its `Freeze` never leaves it
        }
        c.freeze(l, to.replicas.clone());
        c.run_ms(crash_after_ms);
        c.crash(l);
        let l2 = c.elect();
        let snap: Snapshot = (0..200)
            .find_map(|_| {
                let t = c.freeze(l2, to.replicas.clone());
                c.wait_reply(t);
                match c.freeze_result(t) {
                    Some(Ok(s)) => Some(s),
                    Some(Err(
                        WriteError::Unavailable
                        | WriteError::Timeout
                        | WriteError::NotLeader { .. },
                    ))
                    | None => {
                        c.run_ms(10);
                        None
                    }
                    Some(Err(e)) => panic!("freeze refused: {e}"),
                }
            })
            .expect("the new leader freezes the shard");
        survived.push(snap.last_included.epoch == first_epoch);
        let moved = Err(WriteError::Moved { replicas: to.replicas.clone() });
        let late = c.write_as(1, l2, "k0", put("late"), false);
        c.wait_reply(late);
        assert_eq!(c.write_result(late), Some(moved.clone()), "a write after the freeze");
        // Acknowledged writes are in the state: a record at their index, or acknowledged.
        let in_state = |rpc: RpcId, index: Option<LogIndex>| {
            snap.clients.iter().find(|r| r.client_id == rpc.client_id).is_some_and(|r| {
                r.ack >= rpc.seq
                    || r.records
                        .iter()
                        .any(|&(s, i)| s == rpc.seq && index.is_none_or(|x| x == i.index))
            })
        };
        for &(rpc, index) in &acked {
            assert!(in_state(rpc, Some(index)), "crash after {crash_after_ms} ms: acknowledged {rpc:?} at {index} is not in the frozen state");
        }
        for t in inflight {
            let rpc = c.write_rpc(t).unwrap();
            let r = c.retry_write(t, l2);
            c.wait_reply(r);
            match c.write_result(r).expect("answered") {
                Ok(ack) => {
                    assert!(
                        ack.index < snap.last_included && in_state(rpc, Some(ack.index)),
                        "{rpc:?} answered {ack:?} outside the state"
                    )
                }
                // Sent on to the new group: there its record answers it if it executed here
                // (in the log every replica agrees on, before the freeze).
                e if e == moved => {
                    let executed = c.node(l2).entries().iter().any(|e| {
                        e.client_id == rpc.client_id
                            && e.seq == rpc.seq
                            && e.index < snap.last_included
                    });
                    assert_eq!(
                        executed,
                        in_state(rpc, None),
                        "{rpc:?}: executed here iff its record is in the state"
                    );
                }
                e => panic!("in-flight {rpc:?} after the freeze: {e:?}"),
            }
        }
        c.heal();
        c.restart(l);
        c.run_ms(1500);
        let frozen: Vec<Snapshot> =
            (0..c.n()).filter_map(|i| c.node(i).frozen_snapshot()).collect();
        assert!(frozen.len() >= 3, "a majority applied the freeze");
        assert!(
            frozen.iter().all(|s| *s == snap),
            "crash after {crash_after_ms} ms: replicas froze different states"
        );
        assert!(
            c.history.executions.iter().all(|x| x.index < snap.last_included),
            "a write executed after the freeze"
        );
        assert_clean(&mut c);
    }
    assert!(
        survived.contains(&true) && survived.contains(&false),
        "both cases covered: {survived:?}"
    );
}
