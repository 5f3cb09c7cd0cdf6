//! §5.10 restart from disk: replay, snapshots, rejoining.

use super::*;

#[test]
fn recovery_rebuilds_state_from_disk_and_serves_nothing_until_readded() {
    let mut del = entry(2, 1);
    del.op = LogOp::Delete;
    del.key = Bytes::from_static(b"gone");
    del.seq = 3;
    let r = recovered(vec![entry(1, 1), entry(1, 2), del], 2);
    assert_eq!(r.role(), Role::Follower);
    assert_eq!(
        r.get(b"k"),
        (Some(Bytes::from_static(b"v")), LogIndex::new(1, 2))
    );
    assert_eq!(r.get(b"gone"), (None, LogIndex::new(2, 1)));
    assert_eq!(
        (r.persisted_index(), r.applied_index()),
        (LogIndex::new(2, 1), LogIndex::new(2, 1))
    );
    assert!(!r.is_serving(Instant::from_millis(2)));
    assert_eq!(r.durable_index(), LogIndex::ZERO);
    let ids = [NodeId(0), NodeId(1), NodeId(2)];
    let bad = RecoveredState {
        entries: vec![entry(1, 2), entry(1, 1)],
        ..Default::default()
    };
    assert!(LogReplica::recover(orca(), NodeId(0), &ids, bad, Instant::ZERO, 1).is_err());
}

#[test]
fn restarted_follower_recovers_and_rejoins() {
    let mut c = Cluster::new(5, orca());
    let l = c.elect();
    let f = follower_in_as(&c, l);
    c.write_ok(l, "k", "v");
    c.run_ms(30);
    c.crash(f);
    c.run_ms(700);
    c.restart(f);
    assert_eq!(
        c.node(f).get(b"k").0,
        Some(Bytes::from_static(b"v")),
        "replayed from disk"
    );
    c.run_ms(1500);
    c.write_ok(l, "k", "w");
    c.run_ms(100);
    assert_eq!(c.node(f).get(b"k").0, Some(Bytes::from_static(b"w")));
    assert_clean(&c);
}

#[test]
fn recovery_from_a_snapshot_and_the_log_after_it() {
    let ids = [NodeId(0), NodeId(1), NodeId(2)];
    let snapshot = crate::api::Snapshot {
        last_included: LogIndex::new(1, 5),
        items: vec![(
            Bytes::from_static(b"a"),
            Some(Bytes::from_static(b"1")),
            LogIndex::new(1, 3),
        )],
        dedup: vec![(1, 5, LogIndex::new(1, 5))],
    };
    let mut next = entry(2, 1);
    next.seq = 6;
    let state = RecoveredState {
        hard_state: HardState {
            epoch: 2,
            voted_for: Some(NodeId(1)),
        },
        snapshot: Some(snapshot),
        entries: vec![next],
    };
    let r =
        LogReplica::recover(orca(), NodeId(0), &ids, state, Instant::from_millis(1), 3).unwrap();
    assert_eq!(
        r.get(b"a"),
        (Some(Bytes::from_static(b"1")), LogIndex::new(1, 3))
    );
    assert_eq!(r.get(b"k").1, LogIndex::new(2, 1));
    assert_eq!(
        (r.applied_index(), r.last_index(), r.voted_for()),
        (LogIndex::new(2, 1), LogIndex::new(2, 1), Some(NodeId(1)))
    );
    // An entry that does not follow the snapshot is refused.
    let bad = RecoveredState {
        snapshot: Some(crate::api::Snapshot {
            last_included: LogIndex::new(2, 2),
            ..Default::default()
        }),
        entries: vec![entry(2, 1)],
        ..Default::default()
    };
    assert!(matches!(
        LogReplica::recover(orca(), NodeId(0), &ids, bad, Instant::ZERO, 1),
        Err(crate::api::RecoverError::OutOfOrder { .. })
    ));
}
