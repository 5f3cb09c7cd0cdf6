//! Scenario tests of the log engine (ORCA), one or more per mechanism (orca.md §5), on the
//! simulator's driver ([`OrcaCluster`]). Each ends by running every §7 checker and asserting
//! it found nothing; the canary scenarios plant a bug of `strata-log` and assert the relevant
//! checker catches it, and the weak baseline must be caught going back in time (§7.15).

use std::time::Duration;

use bytes::Bytes;
use strata_log::{
    LogConfig, LogEvent, LogIndex, PlantedBug, ReadError, Replication, RevokeReason, Role,
    StepDownReason, VoteRefusal, WriteOp,
};
use strata_sim::orca::OrcaCluster;
use strata_wire::NodeId;

fn orca() -> LogConfig {
    LogConfig::orca(Replication::Async)
}

/// No background flush during the test: durability comes only from reads, rounds, the sync
/// phase or immediate writes.
fn lazy(mut cfg: LogConfig) -> LogConfig {
    cfg.flush_interval = Duration::from_secs(30);
    cfg
}

/// Takes `H` from the current leader (or the longest log) and runs every §7 checker.
fn violations(c: &mut OrcaCluster) -> Vec<strata_sim::Violation> {
    let l = c.leader();
    c.finish(l);
    c.violations()
}

fn assert_clean(c: &mut OrcaCluster) {
    let v = violations(c);
    assert!(v.is_empty(), "violations: {v:#?}");
}

fn assert_caught(c: &mut OrcaCluster, checker: &str) {
    let v = violations(c);
    assert!(v.iter().any(|v| v.checker == checker), "{checker} found nothing in {v:#?}");
}

fn follower_in_as(c: &OrcaCluster, l: usize) -> usize {
    let set = c.node(l).active_set();
    set.iter().map(|n| n.0 as usize).find(|&f| f != l).expect("a follower in the active set")
}

fn follower_outside_as(c: &OrcaCluster, l: usize) -> Option<usize> {
    let set = c.node(l).active_set();
    (0..c.n()).find(|&f| f != l && !set.contains(&NodeId(f as u32)))
}

#[test]
fn lagging_follower_is_revoked_removed_and_readded_only_after_catching_up() {
    let mut c = OrcaCluster::new(5, orca());
    let l = c.elect();
    let f = follower_in_as(&c, l);
    c.isolate(f);
    c.run_ms(150);
    assert!(!c.node(f).is_serving(c.now), "marked out within mt");
    assert_eq!(c.read_now(f, "k"), Err(ReadError::NotInActiveSet));
    let fid = NodeId(f as u32);
    assert!(
        c.count_events(
            |e| matches!(e, LogEvent::AsRevoked { node, reason: RevokeReason::Unresponsive, .. } if *node == fid)
        ) == 1
    );
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
        .events()
        .filter_map(|s| match &s.event {
            LogEvent::AsAdded { node, persisted, applied, di, .. } if *node == fid => {
                Some((*persisted, *applied, *di))
            }
            _ => None,
        })
        .collect();
    assert!(!added.is_empty() || c.node(l).active_set().len() == 4, "re-added or the set is full");
    for (p, a, di) in added {
        assert!(p >= di && a >= di, "re-added only once caught up (§5.7.1)");
    }
    c.run_ms(100);
    assert_clean(&mut c);
}

#[test]
fn slow_disk_member_is_revoked_so_durability_reads_proceed() {
    let mut c = OrcaCluster::new(5, lazy(orca()));
    let l = c.elect();
    let f = follower_in_as(&c, l);
    c.stall_disk(f);
    c.write_ok(l, "k", "v");
    let t = c.read(l, "k");
    c.run_ms(200);
    let r = c.read_result(t).expect("served after the slow member left").unwrap();
    assert_eq!(r.value, Some(Bytes::from_static(b"v")));
    let fid = NodeId(f as u32);
    assert!(
        c.count_events(|e| matches!(e, LogEvent::AsRevoked { node, reason: RevokeReason::Slow, .. } if *node == fid))
            == 1
    );
    assert!(
        c.count_events(
            |e| matches!(e, LogEvent::AsRemoved { node, confirmed: true, .. } if *node == fid)
        ) == 1,
        "removed on its revoke ack"
    );
    assert!(!c.node(f).is_serving(c.now));
    c.unstall_disk(f);
    c.run_ms(300);
    assert_clean(&mut c);
}

#[test]
fn operator_revoke_removes_a_member_once_it_confirms() {
    let mut c = OrcaCluster::new(5, orca());
    let l = c.elect();
    let f = follower_in_as(&c, l);
    assert!(c.revoke_member(l, f));
    c.run_ms(5);
    let fid = NodeId(f as u32);
    assert!(!c.node(l).active_set().contains(&fid), "not re-added within rt");
    assert_eq!(c.node(l).active_set().len(), 4, "replaced by the caught-up non-member");
    assert!(
        c.count_events(
            |e| matches!(e, LogEvent::AsRemoved { node, confirmed: true, .. } if *node == fid)
        ) == 1
    );
    assert!(!c.node(f).is_serving(c.now));
    assert_eq!(c.read_now(f, "k"), Err(ReadError::NotInActiveSet));
    assert_clean(&mut c);
}

/// Messages to and from a member become 700 ms late (> rt - mt): delayed grants arrive after
/// the leader removed it (§9.1: the lease must be anchored at the follower's own timestamp).
fn delayed_grants(cfg: LogConfig) -> OrcaCluster {
    let mut c = OrcaCluster::new(5, cfg);
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
    let mut c = delayed_grants(orca());
    assert_clean(&mut c);
}

#[test]
fn removal_never_shrinks_the_set_below_a_majority_and_a_replacement_is_added_first() {
    // n = 3, as_target = 2: {leader, f}. Removing f alone would leave 1 < majority 2.
    let mut c = OrcaCluster::new(3, lazy(orca()));
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
    assert!(set.contains(&NodeId(g as u32)) && !set.contains(&NodeId(f as u32)), "{set:?}");
    let added = c
        .events()
        .position(|s| matches!(&s.event, LogEvent::AsAdded { node, .. } if node.0 as usize == g));
    let removed = c
        .events()
        .position(|s| matches!(&s.event, LogEvent::AsRemoved { node, .. } if node.0 as usize == f));
    assert!(added.expect("g added") < removed.expect("f removed"), "replacement first");
    assert_clean(&mut c);
}

#[test]
fn deposed_leader_stops_serving_reads_when_its_lease_ends() {
    let mut c = OrcaCluster::new(5, orca());
    let old = c.elect();
    c.write_ok(old, "k", "v");
    c.run_ms(20);
    c.isolate(old);
    assert!(c.read_now(old, "k").is_ok(), "still under lease");
    c.run_ms(400);
    assert_eq!(c.read_now(old, "k"), Err(ReadError::NotLeader { hint: None }));
    for i in 0..5 {
        assert!(!c.node(i).is_serving(c.now), "n{i}: leases of the old leader expired");
    }
    c.run_ms(4000);
    let new = c.leader().expect("new leader");
    assert_ne!(new, old);
    let expired_at = c
        .events()
        .find(|s| {
            s.node.0 as usize == old && matches!(s.event, LogEvent::LeaderLeaseExpired { .. })
        })
        .expect("lease expired")
        .at;
    let elected_at = c
        .events()
        .find(|s| s.node.0 as usize == new && matches!(s.event, LogEvent::BecameLeader { .. }))
        .expect("elected")
        .at;
    assert!(
        expired_at < elected_at,
        "the old leader stopped serving before a new one existed (§5.8)"
    );
    assert!(
        c.count_events(|e| matches!(
            e,
            LogEvent::SteppedDown { reason: StepDownReason::LeaseLost, .. }
        )) >= 1
    );
    assert_eq!(c.read_now(new, "k").unwrap().value, Some(Bytes::from_static(b"v")));
    assert_clean(&mut c);
}

#[test]
fn candidate_with_a_shorter_log_loses_the_election_in_a_cluster() {
    let mut c = OrcaCluster::new(3, orca());
    let l = c.elect();
    let behind = (l + 1) % 3;
    c.isolate(behind);
    c.write_ok(l, "k", "v1");
    c.run_ms(50);
    c.crash(l);
    c.heal();
    // Only the up-to-date follower can win (rule (d)); the lagging one is refused.
    c.run_ms(5000);
    let new = c.leader().expect("leader");
    assert_ne!(new, behind);
    assert!(
        c.count_events(|e| matches!(
            e,
            LogEvent::VoteRefused { reason: VoteRefusal::LessUpToDate, .. }
        )) >= 1
            || c.node(new).epoch() == c.node(behind).epoch()
    );
    assert_eq!(c.node(new).get(b"k").0, Some(Bytes::from_static(b"v1")));
}

#[test]
fn cad_write_is_not_durable_until_read_and_the_read_makes_it_durable() {
    let mut c = OrcaCluster::new(5, lazy(orca()));
    let l = c.elect();
    let idx = c.write_ok(l, "k", "v");
    c.run_ms(50);
    assert_eq!(c.durable_on(idx), 0, "CAD: the write path does not fsync");
    let r = c.read_now(l, "k").unwrap();
    assert_eq!((r.value, r.update_index), (Some(Bytes::from_static(b"v")), idx));
    assert!(c.durable_on(idx) >= 4, "the read made it durable on every AS member (R1)");
    assert_eq!(c.node(l).stats().reads_made_durable, 1);
    // Later reads pass the check at once: no second round.
    c.read_now(l, "k").unwrap();
    assert_eq!(c.node(l).stats().durability_rounds, 1);
    assert_clean(&mut c);
}

#[test]
fn cad_only_read_at_the_leader_makes_the_write_durable_on_a_majority() {
    let mut c = OrcaCluster::new(5, lazy(LogConfig::cad_only()));
    let l = c.elect();
    let idx = c.write_ok(l, "k", "v");
    c.run_ms(20);
    assert_eq!(c.durable_on(idx), 0);
    let f = (l + 1) % 5;
    assert_eq!(c.read_now(f, "k"), Err(ReadError::NotLeader { hint: Some(NodeId(l as u32)) }));
    let r = c.read_now(l, "k").unwrap();
    assert_eq!(r.update_index, idx);
    assert!(c.durable_on(idx) >= 3);
    assert_clean(&mut c);
}

#[test]
fn follower_in_the_active_set_serves_a_read_only_once_the_item_is_durable() {
    let mut c = OrcaCluster::new(5, lazy(orca()));
    let l = c.elect();
    let f = follower_in_as(&c, l);
    let idx = c.write_ok(l, "k", "v");
    c.run_ms(5);
    assert_eq!(c.node(f).get(b"k").1, idx, "replicated and applied at the follower");
    let r = c.read_now(f, "k").unwrap();
    assert_eq!(r.served_by, NodeId(l as u32), "not durable: forwarded to the leader");
    assert_eq!(c.node(f).stats().reads_forwarded, 1);
    c.run_ms(5);
    let r = c.read_now(f, "k").unwrap();
    assert_eq!(
        (r.served_by, r.update_index),
        (NodeId(f as u32), idx),
        "now durable: served locally"
    );
    assert_clean(&mut c);
}

#[test]
fn session_token_read_at_a_follower_sees_the_clients_write() {
    let mut c = OrcaCluster::new(5, orca());
    let l = c.elect();
    let f = follower_in_as(&c, l);
    let idx = c.write_ok(l, "k", "v");
    // Immediately: the entry is still on the wire to the follower.
    let t = c.read_with(f, "k", Some(idx));
    c.wait_reply(t);
    let r = c.read_result(t).unwrap().unwrap();
    assert!(r.update_index >= idx);
    assert_clean(&mut c);
}

#[test]
fn follower_outside_the_active_set_refuses_reads() {
    let mut c = OrcaCluster::new(5, orca());
    let l = c.elect();
    let out = follower_outside_as(&c, l).expect("as_target 4 of 5");
    assert_eq!(c.read_now(out, "k"), Err(ReadError::NotInActiveSet));
}

/// Reads `a`, then crashes every node (losing unsynced entries), restarts, reads again.
fn crash_all_after_read(cfg: LogConfig) -> OrcaCluster {
    let mut c = OrcaCluster::new(5, lazy(cfg));
    let l = c.elect();
    c.write_ok(l, "a", "1");
    let read = c.read_now(l, "a").unwrap();
    assert_eq!(read.value, Some(Bytes::from_static(b"1")));
    c.write_ok(l, "b", "unread");
    c.run_ms(2);
    for i in 0..5 {
        c.crash(i);
    }
    c.run_ms(10);
    for i in 0..5 {
        c.restart(i);
    }
    let l = c.elect();
    // G2 is judged by the checkers (the canaries and baselines expect violations).
    let _ = c.read_now(l, "a");
    c
}

#[test]
fn crashed_and_restarted_cluster_never_loses_a_read_value() {
    for cfg in [orca(), LogConfig::orca(Replication::SyncRepl), LogConfig::cad_only()] {
        let mut c = crash_all_after_read(cfg);
        let l = c.leader().unwrap();
        assert_eq!(c.read_now(l, "a").unwrap().value, Some(Bytes::from_static(b"1")));
        assert_clean(&mut c);
    }
}

#[test]
fn weak_baseline_loses_a_read_value_and_the_checker_sees_it() {
    // §7.15: the harness must be able to find violations in the weak modes.
    let mut c = crash_all_after_read(LogConfig::weak_zk(Replication::Async));
    assert_caught(&mut c, "orca-1-monotonic-reads");
}

#[test]
fn weak_policy_serves_any_applied_state_at_every_node() {
    // §5.11 weak-ZK: no active set, no check; a lagging follower serves its old value.
    let mut c = OrcaCluster::new(5, LogConfig::weak_zk(Replication::Async));
    let l = c.elect();
    let f = (l + 1) % 5;
    let old = c.write_ok(l, "k", "old");
    c.run_ms(5);
    c.isolate(f);
    c.write_ok(l, "k", "new");
    let r = c.read_now(f, "k").unwrap();
    assert_eq!((r.served_by, r.update_index), (NodeId(f as u32), old));
    assert_eq!(c.node(f).stats().reads_forwarded, 0);
}

#[test]
fn restarted_follower_recovers_and_rejoins() {
    let mut c = OrcaCluster::new(5, orca());
    let l = c.elect();
    let f = follower_in_as(&c, l);
    c.write_ok(l, "k", "v");
    c.run_ms(30);
    c.crash(f);
    c.run_ms(700);
    c.restart(f);
    assert_eq!(c.node(f).get(b"k").0, Some(Bytes::from_static(b"v")), "replayed from disk");
    c.run_ms(1500);
    c.write_ok(l, "k", "w");
    c.run_ms(100);
    assert_eq!(c.node(f).get(b"k").0, Some(Bytes::from_static(b"w")));
    assert_clean(&mut c);
}

#[test]
fn election_elects_one_leader_whose_sync_phase_forms_the_active_set() {
    let mut c = OrcaCluster::new(5, orca());
    let l = c.elect();
    let leaders = (0..5).filter(|&i| c.node(i).role() == Role::Leader).count();
    assert_eq!(leaders, 1);
    let noop = LogIndex::new(c.node(l).epoch(), 1);
    assert_eq!(c.node(l).active_set().len(), 4, "as_target = n - 1");
    assert!(c.node(l).durable_index() >= noop);
    assert!(c.durable_on(noop) >= 3, "the sync phase makes the NoOp durable on a majority");
    assert_eq!(c.count_events(|e| matches!(e, LogEvent::SyncPhaseDone { .. })), 1);
    for i in 0..5 {
        if i != l {
            assert!(
                c.node(i).is_serving(c.now) == c.node(l).active_set().contains(&NodeId(i as u32)),
                "n{i}"
            );
        }
    }
    assert_clean(&mut c);
}

#[test]
fn async_writes_replicate_apply_and_persist_everywhere() {
    let mut c = OrcaCluster::new(5, orca());
    let l = c.elect();
    let a = c.write_ok(l, "a", "1");
    let b = c.write_ok(l, "b", "2");
    c.write_with(l, "a", WriteOp::Delete, false);
    c.run_ms(100);
    for i in 0..5 {
        assert_eq!(c.node(i).get(b"b"), (Some(Bytes::from_static(b"2")), b), "n{i}");
        assert_eq!(c.node(i).get(b"a").0, None, "n{i}: tombstone");
        assert!(c.node(i).get(b"a").1 > a);
        assert_eq!(
            c.node(i).persisted_index(),
            c.node(l).last_index(),
            "n{i}: background flush (§5.4)"
        );
    }
    assert!(c.node(l).durable_index() >= b, "DI follows the background flushes");
    assert_clean(&mut c);
}

#[test]
fn duplicate_write_gets_the_recorded_ack() {
    let mut c = OrcaCluster::new(3, orca());
    let l = c.elect();
    // The same RPC id twice at the same instant, before anything else runs (a client's retry
    // racing its first attempt; rifl.md §5.3).
    let first = c.write_as(9, l, "k", WriteOp::Put(Bytes::from_static(b"v")), false);
    let retry = c.retry_write(first, l);
    c.run_ms(5);
    let idx: Vec<_> = [first, retry]
        .iter()
        .map(|&t| c.write_result(t).expect("answered").expect("acknowledged").index)
        .collect();
    assert_eq!(idx[0], idx[1], "the retry is not appended again");
    assert_eq!(c.node(l).entries().iter().filter(|e| e.client_id == 9).count(), 1);
}

#[test]
fn follower_truncates_the_divergent_suffix_of_a_deposed_leader() {
    let mut c = OrcaCluster::new(5, orca());
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
    assert_eq!(c.node(old).entries(), c.node(new).entries(), "logs converge");
    assert_eq!(c.node(old).get(b"x").0, Some(Bytes::from_static(b"kept")));
    assert_clean(&mut c);
}

#[test]
fn single_node_group_elects_itself_and_serves_durable_reads() {
    for cfg in [lazy(orca()), LogConfig::cad_only(), LogConfig::strong_zk()] {
        let mut c = OrcaCluster::new(1, cfg);
        let l = c.elect();
        let idx = c.write_ok(l, "k", "v");
        let r = c.read_now(l, "k").unwrap();
        assert_eq!(r.update_index, idx);
        assert_eq!(c.durable_on(idx), 1);
        assert_clean(&mut c);
    }
}

#[test]
fn sync_mode_acks_only_after_a_majority_fsynced() {
    let mut c = OrcaCluster::new(5, LogConfig::strong_zk());
    let l = c.elect();
    let t = c.write(l, "k", "v");
    while c.write_result(t).is_none() {
        c.run_for(Duration::from_micros(100));
    }
    let idx = c.write_result(t).unwrap().unwrap().index;
    assert!(c.durable_on(idx) >= 3, "acked with {} copies on disk", c.durable_on(idx));
}

/// Peer messages per write over `writes` sequential writes at the leader of a fresh 3-node
/// cluster of `cfg`.
fn peer_messages_per_write(cfg: LogConfig, writes: usize) -> f64 {
    let mut c = OrcaCluster::new(3, cfg);
    let l = c.elect();
    c.write_ok(l, "warm", "up");
    c.run_ms(50);
    let before = c.net().stats.sent;
    for i in 0..writes {
        c.write_ok(l, &format!("k{i}"), "v");
    }
    let sent = c.net().stats.sent - before;
    assert_clean(&mut c);
    sent as f64 / writes as f64
}

/// In Sync persistence a follower acknowledges new entries once, after their fsync (§5.3 step
/// 7, §5.6), and where only the leader serves reads a new DI rides on the next
/// `AppendEntries` instead of a heartbeat of its own (docs/design.md, departures): a write is
/// an `AppendEntries` and one ack per follower. With reads at every node (sync-ZK-all) the
/// followers still hear each new DI at once, and ack that too.
#[test]
fn a_sync_write_costs_one_message_and_one_ack_per_follower() {
    let leader_reads = peer_messages_per_write(LogConfig::strong_zk(), 50);
    let any_reads = peer_messages_per_write(LogConfig::sync_zk_all(), 50);
    assert!(leader_reads <= 5.0, "{leader_reads} peer messages per write, leader reads");
    assert!(any_reads >= 8.0, "{any_reads} peer messages per write, reads everywhere");
}

/// In Sync persistence a leader whose followers answer leaves its own fsync to the periodic
/// flush: the followers' fsynced copies make the majority (docs/design.md, departures). With
/// one follower cut off the leader's disk is needed for a majority, and it flushes each write
/// at once again: writes still commit well within a periodic flush interval.
#[test]
fn a_sync_leader_flushes_at_once_only_when_its_disk_is_needed_for_a_majority() {
    let mut c = OrcaCluster::new(3, LogConfig::strong_zk());
    let l = c.elect();
    c.write_ok(l, "warm", "up");
    c.run_ms(50);
    let flushes = |c: &OrcaCluster| (0..3).map(|i| c.node(i).stats().flushes).collect::<Vec<_>>();
    let before = flushes(&c);
    let start = c.local(l);
    for i in 0..50 {
        c.write_ok(l, &format!("k{i}"), "v");
    }
    let elapsed_ms = c.local(l).saturating_since(start).as_millis() as u64;
    let after = flushes(&c);
    let periodic = elapsed_ms / 10 + 2; // one per `flush_interval` (10 ms), and the edges
    for i in 0..3 {
        let n = after[i] - before[i];
        if i == l {
            assert!(n <= periodic, "the leader flushed {n} times in {elapsed_ms} ms");
        } else {
            assert!(n >= 40, "follower {i} flushed only {n} times for 50 writes");
        }
    }

    let f = (0..3).find(|&f| f != l).expect("a follower");
    c.isolate(f);
    c.run_ms(100); // past a heartbeat period without its acks
    leader_flushes_each_write_at_once(&mut c, l, "with a follower cut off");
    c.heal();
    c.run_ms(100);
    assert_clean(&mut c);
}

/// Ten writes at leader `l`, each committed well within a periodic flush interval (10 ms)
/// because the leader flushes each one at once itself (`when`: the circumstance, for the
/// messages).
fn leader_flushes_each_write_at_once(c: &mut OrcaCluster, l: usize, when: &str) {
    let before = c.node(l).stats().flushes;
    for i in 0..10 {
        let start = c.local(l);
        c.write_ok(l, &format!("j{i}"), "v");
        let took = c.local(l).saturating_since(start);
        assert!(took < Duration::from_millis(5), "a write took {took:?} {when}");
    }
    assert!(c.node(l).stats().flushes - before >= 10, "the leader flushes each write itself");
}

/// A follower whose disk stalls while its heartbeat acks keep coming counts no more than a
/// silent one: its acks show entries received but not persisted, so within a heartbeat period
/// the leader's own disk is needed for a majority again, and it flushes each write at once
/// instead of leaving it to the periodic flush.
#[test]
fn a_follower_with_a_stalled_disk_does_not_count_towards_skipping_the_leaders_fsync() {
    let mut c = OrcaCluster::new(3, LogConfig::strong_zk());
    let l = c.elect();
    c.write_ok(l, "warm", "up");
    c.run_ms(50);
    let f = (0..3).find(|&f| f != l).expect("a follower");
    c.stall_disk(f);
    c.write(l, "stalled", "v"); // received by f, never persisted there
    c.run_ms(100); // past a heartbeat period of acks without progress on f's disk
    leader_flushes_each_write_at_once(&mut c, l, "beside a stalled disk");
    assert_eq!(c.leader(), Some(l), "the stalled follower's heartbeat acks keep the lease");
    c.unstall_disk(f);
    c.run_ms(100);
    assert_clean(&mut c);
}

/// Acks that wait for a follower's fsync never hold up the leader's lease: with both
/// followers' disks stalled for 2 s under a stream of writes, every heartbeat round is still
/// acknowledged at once, and the leader keeps serving reads of what was committed before.
#[test]
fn a_stalled_follower_disk_does_not_starve_the_leader_lease() {
    let mut c = OrcaCluster::new(3, LogConfig::strong_zk());
    let l = c.elect();
    c.write_ok(l, "k", "before");
    for f in (0..3).filter(|&f| f != l) {
        c.stall_disk(f);
    }
    for i in 0..200 {
        c.write(l, &format!("w{i}"), "v"); // waits for fsyncs that cannot happen yet
        c.run_ms(10);
        if i % 20 == 19 {
            let r = c.read_now(l, "k").expect("the leader still serves reads");
            assert_eq!(r.value, Some(Bytes::from_static(b"before")));
        }
    }
    assert_eq!(c.leader(), Some(l), "no election while the disks stalled");
    for f in (0..3).filter(|&f| f != l) {
        c.unstall_disk(f);
    }
    c.run_ms(100);
    assert_clean(&mut c);
}

#[test]
fn syncrepl_acks_after_a_majority_holds_it_in_memory() {
    let mut c = OrcaCluster::new(5, lazy(LogConfig::orca(Replication::SyncRepl)));
    let l = c.elect();
    let t = c.write(l, "k", "v");
    c.run_for(Duration::from_micros(600));
    assert!(c.write_result(t).is_none(), "not before a majority acked");
    c.run_ms(3);
    let idx = c.write_result(t).unwrap().unwrap().index;
    assert_eq!(c.durable_on(idx), 0, "SyncRepl persists lazily");
    let holders = (0..5).filter(|&i| c.node(i).entries().iter().any(|e| e.index == idx)).count();
    assert!(holders >= 3);
}

#[test]
fn immediate_durability_write_is_durable_on_a_majority_when_acked() {
    let mut c = OrcaCluster::new(5, lazy(orca()));
    let l = c.elect();
    let t = c.write_with(l, "k", WriteOp::Put(Bytes::from_static(b"v")), true);
    while c.write_result(t).is_none() {
        c.run_for(Duration::from_micros(100));
    }
    let idx = c.write_result(t).unwrap().unwrap().index;
    assert!(c.durable_on(idx) >= 4, "durable on every active-set member (G6)");
}

#[test]
fn syncrepl_followers_apply_only_committed_or_flush_authorised_entries() {
    // §9.9: in SyncRepl mode a follower applies up to max(commit, flush_upto) it received.
    let mut c = OrcaCluster::new(5, lazy(LogConfig::orca(Replication::SyncRepl)));
    let l = c.elect();
    let f = follower_in_as(&c, l);
    let t = c.write(l, "k", "v");
    c.run_for(Duration::from_micros(600)); // the entry reached the followers, no commit yet
    let idx = c.node(l).last_index();
    assert!(c.node(f).entries().iter().any(|e| e.index == idx));
    assert!(c.node(f).applied_index() < idx, "not applied before commit");
    c.run_ms(5);
    assert!(c.write_result(t).unwrap().is_ok());
    c.run_ms(60);
    assert_eq!(c.node(f).applied_index(), idx, "applied once the commit index arrived");
    assert_clean(&mut c);
}

fn planted(mut cfg: LogConfig, bug: PlantedBug) -> LogConfig {
    cfg.planted_bug = Some(bug);
    cfg
}

#[test]
fn canary_reads_without_the_durability_check_are_caught() {
    let mut c = crash_all_after_read(planted(orca(), PlantedBug::SkipDurabilityCheck));
    assert_caught(&mut c, "orca-3-durable-at-serve");
    assert_caught(&mut c, "orca-1-monotonic-reads");
}

#[test]
fn canary_follower_reads_without_the_durability_check_are_caught() {
    let mut c = OrcaCluster::new(5, lazy(planted(orca(), PlantedBug::SkipFollowerDurabilityCheck)));
    let l = c.elect();
    let f = follower_in_as(&c, l);
    c.write_ok(l, "k", "v");
    c.run_ms(5);
    c.read_now(f, "k").unwrap();
    assert_caught(&mut c, "orca-3-durable-at-serve");
}

#[test]
fn canary_follower_serving_outside_the_active_set_is_caught() {
    let mut c = OrcaCluster::new(5, planted(orca(), PlantedBug::ServeOutsideActiveSet));
    let l = c.elect();
    let f = follower_in_as(&c, l);
    c.write_ok(l, "k", "old");
    c.run_ms(30);
    c.read_now(f, "k").unwrap();
    c.isolate(f);
    c.run_ms(800); // revoked and removed
    c.write_ok(l, "k", "new");
    c.read_now(l, "k").unwrap();
    c.run_ms(1);
    // The isolated, removed follower still answers with its stale state.
    let _ = c.read_now(f, "k");
    assert_caught(&mut c, "orca-4-active-set-reads");
    assert_caught(&mut c, "orca-1-monotonic-reads");
}

#[test]
fn canary_lease_anchored_at_receipt_is_caught_with_long_delays() {
    let mut c = delayed_grants(planted(orca(), PlantedBug::LeaseAnchoredAtReceipt));
    assert_caught(&mut c, "orca-4-active-set-reads");
}

/// In strong mode (sync durability, reads unchecked because "every applied entry is durable"),
/// an immediate-durability write runs MakeDurable; the leader must still apply only what a
/// majority fsynced (strata-log `durability.rs`, found by this test: the leader used to apply
/// everything appended and serve it). With every follower's disk stalled, a read of `k` returns
/// the absent value, never the unfsynced write.
#[test]
fn strong_mode_serves_only_majority_fsynced_entries_even_with_immediate_writes() {
    let mut c = OrcaCluster::new(5, LogConfig::strong_zk());
    let l = c.elect();
    for f in (0..5).filter(|&f| f != l) {
        c.stall_disk(f);
    }
    c.write(l, "k", "v"); // waits for a majority fsync that cannot happen yet
    c.write_with(l, "j", WriteOp::Put(Bytes::from_static(b"w")), true);
    let t = c.read(l, "k");
    c.run_ms(5);
    if let Some(Ok(r)) = c.read_result(t) {
        assert!(
            r.update_index == LogIndex::ZERO || c.durable_on(r.update_index) >= 3,
            "served {} from {} copies",
            r.update_index,
            c.durable_on(r.update_index)
        );
    }
    for f in (0..5).filter(|&f| f != l) {
        c.unstall_disk(f);
    }
    c.run_ms(100);
    assert_clean(&mut c);
}

/// A healthy, idle cluster with jittery delays keeps every member's lease: grants echo the
/// timestamp of the ack to the previous heartbeat, so `mt` must cover two heartbeat periods
/// (`LogConfig::validate`, docs/design.md departures). With `hb = 50 ms`, `mt = 100 ms` this
/// cluster saw hundreds of mark-outs in 10 s.
#[test]
fn an_idle_healthy_cluster_keeps_its_follower_leases_under_delay_jitter() {
    let net = strata_sim::net::NetKnobs {
        delay_min_us: 400,
        delay_max_us: 1600,
        loss: 0.0,
        dup: 0.0,
        reorder: 0.0,
        reorder_extra_max_us: 0,
    };
    let mut c = OrcaCluster::with_net(5, orca(), net, strata_core::Prng::new(11));
    c.elect();
    c.run_ms(1_000); // the active set fills
    let before = c.count_events(|e| matches!(e, LogEvent::MarkedOut { .. }));
    c.run_ms(10_000);
    let lapses = c.count_events(|e| matches!(e, LogEvent::MarkedOut { .. })) - before;
    assert_eq!(lapses, 0, "{lapses} follower leases lapsed in 10 s of a healthy, idle cluster");
    assert_clean(&mut c);
}

/// A runtime whose ticks run late while inputs keep arriving (the node's core task takes
/// queued inputs first under load) must not cost a healthy leader its lease, nor starve a
/// follower's election. Regression: every input must fire the heartbeat and election deadlines
/// it passes over (`docs/design.md`, log engine); without that, this leader skipped its
/// heartbeat rounds and stepped down (LeaseLost) within the first second.
#[test]
fn a_loaded_runtime_that_ticks_late_keeps_its_leader() {
    let mut c = OrcaCluster::new(3, orca());
    let l = c.elect();
    c.tick_lateness = Duration::from_millis(20);
    for k in 0..2000 {
        c.write(l, &format!("k{}", k % 50), "v"); // a write every 2 ms for 4 s
        c.run_ms(2);
    }
    let lost = c.count_events(|e| {
        matches!(e, LogEvent::SteppedDown { reason: StepDownReason::LeaseLost, .. })
    });
    assert_eq!(lost, 0, "the leader lost its lease under late ticks");
    assert_eq!(c.leader(), Some(l));
    // With the leader gone, the followers hear nothing but each other: their elections must
    // still start although ticks stay late.
    c.crash(l);
    c.run_ms(5000);
    assert!(c.leader().is_some_and(|n| n != l), "no new leader with late ticks");
    assert_clean(&mut c);
}
