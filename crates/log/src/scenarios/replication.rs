//! §5.3 replication, §5.9 elections in a cluster, §5.10 truncation, §2.1 duplicates.

use super::*;

#[test]
fn election_elects_one_leader_whose_sync_phase_forms_the_active_set() {
    let mut c = Cluster::new(5, orca());
    let l = c.elect();
    let leaders = (0..5).filter(|&i| c.node(i).role() == Role::Leader).count();
    assert_eq!(leaders, 1);
    let noop = LogIndex::new(c.node(l).epoch(), 1);
    assert_eq!(c.node(l).active_set().len(), 4, "as_target = n - 1");
    assert!(c.node(l).durable_index() >= noop);
    assert!(
        c.durable_on(noop) >= 3,
        "the sync phase makes the NoOp durable on a majority"
    );
    assert_eq!(
        c.count_events(|e| matches!(e, LogEvent::SyncPhaseDone { .. })),
        1
    );
    for i in 0..5 {
        if i != l {
            assert!(
                c.node(i).is_serving(c.now) == c.node(l).active_set().contains(&NodeId(i as u32)),
                "n{i}"
            );
        }
    }
    assert_clean(&c);
}

#[test]
fn async_writes_replicate_apply_and_persist_everywhere() {
    let mut c = Cluster::new(5, orca());
    let l = c.elect();
    let a = c.write_ok(l, "a", "1");
    let b = c.write_ok(l, "b", "2");
    c.write_with(l, "a", WriteOp::Delete, false);
    c.run_ms(100);
    for i in 0..5 {
        assert_eq!(
            c.node(i).get(b"b"),
            (Some(Bytes::from_static(b"2")), b),
            "n{i}"
        );
        assert_eq!(c.node(i).get(b"a").0, None, "n{i}: tombstone");
        assert!(c.node(i).get(b"a").1 > a);
        assert_eq!(
            c.node(i).persisted_index(),
            c.node(l).last_index(),
            "n{i}: background flush (§5.4)"
        );
    }
    assert!(
        c.node(l).durable_index() >= b,
        "DI follows the background flushes"
    );
    assert_clean(&c);
}

#[test]
fn duplicate_write_gets_the_recorded_ack() {
    let mut c = Cluster::new(3, orca());
    let l = c.elect();
    let req = |token| LogRequest::Write {
        token,
        client_id: 9,
        seq: 1,
        key: Bytes::from_static(b"k"),
        op: WriteOp::Put(Bytes::from_static(b"v")),
        immediate: false,
    };
    let now = c.now;
    let r = c.nodes[l].replica.as_mut().unwrap();
    r.on_client_request(now, req(1001));
    r.on_client_request(now, req(1002));
    let mut out: LogEffects = Effects::default();
    r.poll_effects(&mut out);
    let idx: Vec<_> = out
        .reply
        .iter()
        .map(|r| match r {
            LogReply::Write { result, .. } => result.clone().unwrap().index,
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(idx.len(), 2);
    assert_eq!(idx[0], idx[1], "the retry is not appended again");
    assert_eq!(r.entries().iter().filter(|e| e.client_id == 9).count(), 1);
}

#[test]
fn follower_truncates_the_divergent_suffix_of_a_deposed_leader() {
    let mut c = Cluster::new(5, orca());
    let old = c.elect();
    c.isolate(old);
    // Async mode: the deposed leader still acknowledges while its lease lasts (G5: may be lost).
    let lost = c.write(old, "x", "lost");
    c.run_ms(5);
    assert!(c.write_result(lost).unwrap().is_ok());
    c.run_ms(4000);
    let new = c.leader().expect("a new leader");
    assert_ne!(new, old);
    c.write_ok(new, "x", "kept");
    c.heal();
    // The isolated node inflated its epoch (no pre-vote): its return may force a new election,
    // which it cannot win (rule (d): its log is less up to date).
    c.run_ms(5000);
    let new = c.leader().expect("a leader");
    assert_ne!(new, old);
    assert!(c.count_events(|e| matches!(e, LogEvent::Truncated { .. })) >= 1);
    assert_eq!(
        c.node(old).entries(),
        c.node(new).entries(),
        "logs converge"
    );
    assert_eq!(c.node(old).get(b"x").0, Some(Bytes::from_static(b"kept")));
    assert_clean(&c);
}

#[test]
fn single_node_group_elects_itself_and_serves_durable_reads() {
    for cfg in [lazy(orca()), LogConfig::cad_only(), LogConfig::strong_zk()] {
        let mut c = Cluster::new(1, cfg);
        let l = c.elect();
        let idx = c.write_ok(l, "k", "v");
        let r = c.read_now(l, "k").unwrap();
        assert_eq!(r.update_index, idx);
        assert_eq!(c.durable_on(idx), 1);
        assert_clean(&c);
    }
}
