//! §5.7 active set: mark-out, revoke, removal, re-addition, slow members, lease anchoring.

use super::*;

#[test]
fn lagging_follower_is_revoked_removed_and_readded_only_after_catching_up() {
    let mut c = Cluster::new(5, orca());
    let l = c.elect();
    let f = follower_in_as(&c, l);
    c.isolate(f);
    c.run_ms(150);
    assert!(!c.node(f).is_serving(c.now), "marked out within mt");
    assert_eq!(c.read_now(f, "k"), Err(ReadError::NotInActiveSet));
    let fid = NodeId(f as u32);
    assert!(c.count_events(|e| matches!(e, LogEvent::AsRevoked { node, reason: RevokeReason::Unresponsive, .. } if *node == fid)) == 1);
    c.run_ms(600);
    assert!(
        c.count_events(
            |e| matches!(e, LogEvent::AsRemoved { node, confirmed: false, .. } if *node == fid)
        ) == 1,
        "removed rt after its last grant"
    );
    // Reads needing durability proceed without it.
    let idx = c.write_ok(l, "k", "v");
    assert_eq!(c.read_now(l, "k").unwrap().update_index, idx);
    for i in 0..30 {
        c.write_ok(l, "k", &format!("v{i}"));
    }
    c.heal();
    c.run_ms(500);
    let added: Vec<_> = c
        .events
        .iter()
        .filter_map(|(_, _, e)| match e {
            LogEvent::AsAdded {
                node,
                persisted,
                applied,
                di,
                ..
            } if *node == fid => Some((*persisted, *applied, *di)),
            _ => None,
        })
        .collect();
    assert!(
        !added.is_empty() || c.node(l).active_set().len() == 4,
        "re-added or the set is full"
    );
    for (p, a, di) in added {
        assert!(p >= di && a >= di, "re-added only once caught up (§5.7.1)");
    }
    c.run_ms(100);
    assert_clean(&c);
}

#[test]
fn slow_disk_member_is_revoked_so_durability_reads_proceed() {
    let mut c = Cluster::new(5, lazy(orca()));
    let l = c.elect();
    let f = follower_in_as(&c, l);
    c.stall_disk(f);
    c.write_ok(l, "k", "v");
    let t = c.read(l, "k");
    c.run_ms(200);
    let r = c
        .read_result(t)
        .expect("served after the slow member left")
        .unwrap();
    assert_eq!(r.value, Some(Bytes::from_static(b"v")));
    let fid = NodeId(f as u32);
    assert!(c.count_events(|e| matches!(e, LogEvent::AsRevoked { node, reason: RevokeReason::Slow, .. } if *node == fid)) == 1);
    assert!(
        c.count_events(
            |e| matches!(e, LogEvent::AsRemoved { node, confirmed: true, .. } if *node == fid)
        ) == 1,
        "removed on its revoke ack"
    );
    assert!(!c.node(f).is_serving(c.now));
    c.unstall_disk(f);
    c.run_ms(300);
    assert_clean(&c);
}

#[test]
fn operator_revoke_removes_a_member_once_it_confirms() {
    let mut c = Cluster::new(5, orca());
    let l = c.elect();
    let f = follower_in_as(&c, l);
    let now = c.now;
    assert!(c.nodes[l]
        .replica
        .as_mut()
        .unwrap()
        .revoke_member(now, NodeId(f as u32)));
    c.drain(l);
    c.run_ms(5);
    let fid = NodeId(f as u32);
    assert!(
        !c.node(l).active_set().contains(&fid),
        "not re-added within rt"
    );
    assert_eq!(
        c.node(l).active_set().len(),
        4,
        "replaced by the caught-up non-member"
    );
    assert!(
        c.count_events(
            |e| matches!(e, LogEvent::AsRemoved { node, confirmed: true, .. } if *node == fid)
        ) == 1
    );
    assert!(!c.node(f).is_serving(c.now));
    assert_eq!(c.read_now(f, "k"), Err(ReadError::NotInActiveSet));
    assert_clean(&c);
}

/// Messages to and from a member become 700 ms late (> rt - mt): delayed grants arrive after
/// the leader removed it (§9.1: the lease must be anchored at the follower's own timestamp).
pub(super) fn delayed_grants(cfg: LogConfig) -> Cluster {
    let mut c = Cluster::new(5, cfg);
    let l = c.elect();
    let f = follower_in_as(&c, l);
    c.write_ok(l, "k", "old");
    c.run_ms(30);
    c.lag(f, Duration::from_millis(700));
    c.run_ms(650);
    c.write_ok(l, "k", "new");
    c.read_now(l, "k").unwrap();
    c.run_ms(1);
    // Reads at f while the late grants trickle in.
    for _ in 0..40 {
        let _ = c.read(f, "k");
        c.run_ms(5);
    }
    c
}

#[test]
fn long_message_delays_never_extend_a_follower_lease() {
    let c = delayed_grants(orca());
    assert_clean(&c);
}

#[test]
fn removal_never_shrinks_the_set_below_a_majority_and_a_replacement_is_added_first() {
    // n = 3, as_target = 2: {leader, f}. Removing f alone would leave 1 < majority 2.
    let mut c = Cluster::new(3, lazy(orca()));
    let l = c.elect();
    let f = follower_in_as(&c, l);
    let g = follower_outside_as(&c, l).expect("one non-member");
    c.isolate(f);
    c.write_ok(l, "k", "v");
    // The read needs durability: it blocks on f until g replaces it (§5.7.4 step 4).
    let t = c.read(l, "k");
    c.run_ms(1000);
    assert!(c.read_result(t).expect("answered").is_ok());
    let set = c.node(l).active_set();
    assert!(
        set.contains(&NodeId(g as u32)) && !set.contains(&NodeId(f as u32)),
        "{set:?}"
    );
    let added = c
        .events
        .iter()
        .position(|(_, _, e)| matches!(e, LogEvent::AsAdded { node, .. } if node.0 as usize == g));
    let removed = c.events.iter().position(
        |(_, _, e)| matches!(e, LogEvent::AsRemoved { node, .. } if node.0 as usize == f),
    );
    assert!(
        added.expect("g added") < removed.expect("f removed"),
        "replacement first"
    );
    assert_clean(&c);
}
