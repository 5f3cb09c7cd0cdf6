//! Every checker of orca.md §7 on hand-made histories: each must flag a known-bad history
//! (`DESIGN.md`: a checker that cannot fail proves nothing) and accept its good twin.

use bytes::Bytes;
use strata_log::{LogEntry, LogEvent, LogIndex, LogOp, ReadValue, RpcId, WriteOutcome};
use strata_sim::orca::check::{self, OrcaChecker};
use strata_sim::orca::history::{
    AdditionRecord, Anomaly, DiRecord, ExecutionRecord, FollowerSample, NodeAtServe, OrcaHistory,
    Promises, ReadRecord, RemovalRecord, ServeRecord, Stamped, TruncationRecord, VoteCast,
    WriteOkRecord,
};
use strata_wire::{Instant, NodeId};

fn ix(e: u32, c: u32) -> LogIndex {
    LogIndex::new(e, c)
}

fn put(e: u32, c: u32, key: &str, value: &str) -> LogEntry {
    LogEntry {
        index: ix(e, c),
        key: Bytes::copy_from_slice(key.as_bytes()),
        op: LogOp::Put(Bytes::copy_from_slice(value.as_bytes())),
        client_id: 1,
        seq: u64::from(c),
        ack: 0,
        immediate: false,
    }
}

fn t(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

/// Five nodes, ORCA's promises, `H` = a@(1,1)=1, b@(1,2)=1, a@(1,3)=2.
fn base() -> OrcaHistory {
    OrcaHistory {
        n: 5,
        promises: Promises {
            active_set: true,
            leased_reads: true,
            durable_reads: true,
            sync_writes: false,
        },
        h: vec![put(1, 1, "a", "1"), put(1, 2, "b", "1"), put(1, 3, "a", "2")],
        h_leader: Some(NodeId(0)),
        ..OrcaHistory::default()
    }
}

fn read(
    key: &str,
    invoked: u64,
    completed: u64,
    u: LogIndex,
    value: Option<&str>,
    by: u32,
) -> ReadRecord {
    ReadRecord {
        client: 1,
        key: Bytes::copy_from_slice(key.as_bytes()),
        asked: NodeId(by),
        min_index: None,
        invoked: t(invoked),
        completed: t(completed),
        value: ReadValue {
            value: value.map(|v| Bytes::copy_from_slice(v.as_bytes())),
            update_index: u,
            served_by: NodeId(by),
            epoch: 1,
            vts: Default::default(),
            w_mean_ns: None,
        },
    }
}

fn ev(ms: u64, node: u32, event: LogEvent) -> Stamped {
    Stamped { at: t(ms), node: NodeId(node), event }
}

/// The sync phase of epoch 1 at n0 with active set {0, 1, 2, 3}.
fn synced() -> Stamped {
    ev(
        1,
        0,
        LogEvent::SyncPhaseDone {
            epoch: 1,
            noop: ix(1, 1),
            active_set: (0..4).map(NodeId).collect(),
        },
    )
}

/// A read of `a` at (1,3) served by `by`, with nodes `0..holders` holding it on disk.
fn serve(h: &OrcaHistory, pos: usize, by: u32, holders: u32) -> ServeRecord {
    ServeRecord {
        at: t(10),
        pos,
        served_by: NodeId(by),
        epoch: 1,
        key: Bytes::from_static(b"a"),
        value: Some(Bytes::from_static(b"2")),
        u: ix(1, 3),
        min_index: None,
        applied: ix(1, 3),
        server_was_leader: by == 0,
        server_valid: true,
        nodes: (0..5)
            .map(|n| NodeAtServe {
                node: NodeId(n),
                up: true,
                disk_entry: (n < holders).then(|| h.h[2].clone()),
                applied: ix(1, 3),
            })
            .collect(),
    }
}

fn flags(c: OrcaChecker, h: &OrcaHistory) -> bool {
    !c(h).is_empty()
}

#[test]
fn inv1_monotonic_reads_flags_going_back_across_keys_and_sessions() {
    let mut h = base();
    // r1 reads b at (1,2): its state holds a@(1,1). A later read of a returning ZERO goes back.
    h.reads =
        vec![read("b", 0, 5, ix(1, 2), Some("1"), 1), read("a", 6, 7, LogIndex::ZERO, None, 2)];
    assert!(flags(check::monotonic_reads, &h));
    assert_eq!(check::monotonic_reads(&h)[0].checker, check::MONOTONIC_READS);
    // Returning a@(1,1) is fine: (1,3) is not in state(r1).
    h.reads[1] = read("a", 6, 7, ix(1, 1), Some("1"), 2);
    assert!(!flags(check::monotonic_reads, &h));
    // Same key: a@(1,3) then a@(1,1).
    h.reads =
        vec![read("a", 0, 5, ix(1, 3), Some("2"), 1), read("a", 6, 7, ix(1, 1), Some("1"), 2)];
    assert!(flags(check::monotonic_reads, &h));
    // Concurrent reads (r2 invoked before r1 completed) are not ordered.
    h.reads[1] = read("a", 4, 7, ix(1, 1), Some("1"), 2);
    assert!(!flags(check::monotonic_reads, &h));
    // A read of lost data (not in H) followed by an older version of its key.
    h.reads =
        vec![read("a", 0, 5, ix(1, 4), Some("3"), 1), read("a", 6, 7, ix(1, 3), Some("2"), 2)];
    assert!(flags(check::monotonic_reads, &h));
}

#[test]
fn inv2_served_exists_flags_wrong_values_and_entries_not_in_h() {
    let mut h = base();
    h.reads =
        vec![read("a", 0, 1, ix(1, 3), Some("2"), 0), read("z", 0, 1, LogIndex::ZERO, None, 0)];
    assert!(!flags(check::served_exists, &h));
    h.reads.push(read("a", 0, 1, ix(1, 3), Some("x"), 0));
    assert!(flags(check::served_exists, &h));
    h.reads = vec![read("a", 0, 1, ix(2, 1), Some("2"), 0)];
    assert!(flags(check::served_exists, &h));
    // A retry appended again (seq 3 at (1,4)) is no version of its key: not servable, and
    // reads after it still see (1,3) as the newest version of `a` (inv. 1).
    h.h.push(LogEntry { seq: 3, ..put(1, 4, "a", "2") });
    assert_eq!(h.effective(), vec![true, true, true, false]);
    h.reads = vec![read("a", 0, 1, ix(1, 4), Some("2"), 0)];
    assert!(flags(check::served_exists, &h));
    h.reads =
        vec![read("a", 0, 1, ix(1, 3), Some("2"), 0), read("a", 2, 3, ix(1, 3), Some("2"), 1)];
    assert!(!flags(check::served_exists, &h) && !flags(check::monotonic_reads, &h));
}

#[test]
fn inv3_durable_at_serve_flags_minority_copies_and_members_without_the_entry() {
    let mut h = base();
    h.events = vec![synced()];
    h.serves = vec![serve(&h, 1, 0, 4)];
    assert!(!flags(check::durable_at_serve, &h));
    h.serves = vec![serve(&h, 1, 0, 2)];
    assert!(flags(check::durable_at_serve, &h));
    // A majority holds it, but active-set member n3 does not (R1).
    h.serves = vec![serve(&h, 1, 0, 3)];
    assert!(flags(check::durable_at_serve, &h));
    // Without the promise (weak baselines) nothing is judged.
    h.promises.durable_reads = false;
    assert!(!flags(check::durable_at_serve, &h));
}

#[test]
fn inv4_active_set_reads_flags_non_members_lapsed_leases_and_deposed_leaders() {
    let mut h = base();
    h.events = vec![synced()];
    h.serves = vec![serve(&h, 1, 3, 5)];
    assert!(!flags(check::active_set_reads, &h));
    h.serves = vec![serve(&h, 1, 4, 5)];
    assert!(flags(check::active_set_reads, &h), "n4 is not a member");
    let mut s = serve(&h, 1, 3, 5);
    s.server_valid = false;
    h.serves = vec![s];
    assert!(flags(check::active_set_reads, &h), "expired lease");
    // The leader serves after a candidate of epoch 2 got 3 of 5 votes.
    h.votes = (2..5)
        .map(|v| VoteCast { at: t(5), pos: 1, voter: NodeId(v), candidate: NodeId(2), epoch: 2 })
        .collect();
    h.serves = vec![serve(&h, 2, 0, 5)];
    assert!(flags(check::active_set_reads, &h));
    h.votes.pop();
    assert!(!flags(check::active_set_reads, &h), "two votes are no majority");
}

#[test]
fn inv5_removal_flags_a_removed_follower_that_serves() {
    let mut h = base();
    let removal = RemovalRecord {
        at: t(5),
        pos: 3,
        leader: NodeId(0),
        epoch: 1,
        node: NodeId(3),
        still_serving: false,
    };
    let sample = |pos, serving| FollowerSample {
        at: t(6),
        pos,
        node: NodeId(3),
        epoch: 1,
        di_f: ix(1, 1),
        applied: ix(1, 1),
        serving,
    };
    h.removals = vec![removal.clone()];
    h.followers = vec![sample(2, true), sample(4, false)];
    assert!(!flags(check::removal_after_mark_out, &h));
    h.followers.push(sample(5, true));
    assert!(flags(check::removal_after_mark_out, &h));
    // ... unless it was added again first.
    h.additions = vec![AdditionRecord {
        at: t(6),
        pos: 4,
        epoch: 1,
        node: NodeId(3),
        reported_persisted: ix(1, 1),
        reported_applied: ix(1, 1),
        di: ix(1, 1),
        disk_has_di: true,
    }];
    assert!(!flags(check::removal_after_mark_out, &h));
    h.removals = vec![RemovalRecord { still_serving: true, ..removal }];
    assert!(flags(check::removal_after_mark_out, &h));
}

#[test]
fn inv6_readd_precondition_flags_a_member_added_below_di() {
    let mut h = base();
    let ok = AdditionRecord {
        at: t(6),
        pos: 4,
        epoch: 1,
        node: NodeId(3),
        reported_persisted: ix(1, 2),
        reported_applied: ix(1, 2),
        di: ix(1, 2),
        disk_has_di: true,
    };
    h.additions = vec![ok.clone()];
    assert!(!flags(check::readd_precondition, &h));
    h.additions = vec![AdditionRecord { reported_applied: ix(1, 1), ..ok.clone() }];
    assert!(flags(check::readd_precondition, &h));
    h.additions = vec![AdditionRecord { disk_has_di: false, ..ok }];
    assert!(flags(check::readd_precondition, &h));
}

#[test]
fn inv7_di_sanity_flags_decreasing_unbacked_or_overtaken_di() {
    let mut h = base();
    let di = |pos, c, holders: u32| DiRecord {
        at: t(pos as u64),
        pos,
        leader: NodeId(0),
        epoch: 1,
        di: ix(1, c),
        holders: (0..holders).map(NodeId).collect(),
        members: (0..4).map(|m| (NodeId(m), true, Some(ix(1, 3)))).collect(),
    };
    h.dis = vec![di(1, 1, 4), di(2, 2, 4)];
    let sample = |pos, c| FollowerSample {
        at: t(5),
        pos,
        node: NodeId(1),
        epoch: 1,
        di_f: ix(1, c),
        applied: ix(1, 3),
        serving: true,
    };
    h.followers = vec![sample(3, 2)];
    assert!(!flags(check::di_sanity, &h));
    h.followers = vec![sample(2, 2)];
    assert!(flags(check::di_sanity, &h), "DI_F (1,2) before the leader's DI reached it");
    h.followers.clear();
    h.dis = vec![di(1, 2, 4), di(2, 1, 4)];
    assert!(flags(check::di_sanity, &h), "DI decreased");
    h.dis = vec![di(1, 2, 2)];
    assert!(flags(check::di_sanity, &h), "DI on a minority");
    let mut d = di(1, 2, 4);
    d.members[2].2 = Some(ix(1, 1));
    h.dis = vec![d];
    assert!(flags(check::di_sanity, &h), "DI above a member's applied index");
}

#[test]
fn inv8_active_set_size_flags_a_set_below_a_majority_or_without_the_leader() {
    let mut h = base();
    h.events = vec![synced()];
    assert!(!flags(check::active_set_size, &h));
    h.events.push(ev(2, 0, LogEvent::AsRemoved { epoch: 1, node: NodeId(1), confirmed: true }));
    assert!(!flags(check::active_set_size, &h));
    h.events.push(ev(3, 0, LogEvent::AsRemoved { epoch: 1, node: NodeId(2), confirmed: true }));
    assert!(flags(check::active_set_size, &h));
    h.events = vec![ev(
        1,
        4,
        LogEvent::SyncPhaseDone {
            epoch: 1,
            noop: ix(1, 1),
            active_set: (0..4).map(NodeId).collect(),
        },
    )];
    assert!(flags(check::active_set_size, &h), "leader n4 outside its set");
}

#[test]
fn inv9_elections_flags_bad_votes_double_votes_and_two_leaders() {
    let mut h = base();
    let vote = |candidate_last, own_last| {
        ev(1, 1, LogEvent::VoteGranted { epoch: 2, candidate: NodeId(2), candidate_last, own_last })
    };
    h.events = vec![vote(ix(1, 3), ix(1, 3))];
    assert!(!flags(check::elections, &h));
    h.events = vec![vote(ix(1, 2), ix(1, 3))];
    assert!(flags(check::elections, &h));
    let leader = |n| ev(2, n, LogEvent::BecameLeader { epoch: 2, noop: ix(2, 1) });
    h.events = vec![leader(1), leader(2)];
    assert!(flags(check::elections, &h));
    let cast = |candidate| VoteCast {
        at: t(1),
        pos: 0,
        voter: NodeId(1),
        candidate: NodeId(candidate),
        epoch: 2,
    };
    h.events.clear();
    h.votes = vec![cast(2), cast(2)];
    assert!(!flags(check::elections, &h));
    h.votes = vec![cast(2), cast(3)];
    assert!(flags(check::elections, &h));
}

#[test]
fn inv10_flags_truncating_served_data_but_not_unserved_suffixes() {
    let mut h = base();
    h.events = vec![synced()];
    let mut s = serve(&h, 1, 0, 5);
    s.u = ix(1, 2);
    h.serves = vec![s];
    h.truncations = vec![TruncationRecord {
        at: t(20),
        pos: 2,
        node: NodeId(4),
        removed: vec![ix(1, 3), ix(1, 4)],
    }];
    assert!(!flags(check::no_truncation_of_served, &h));
    h.truncations[0].removed.insert(0, ix(1, 2));
    assert!(flags(check::no_truncation_of_served, &h));
    h.truncations[0].pos = 0;
    assert!(!flags(check::no_truncation_of_served, &h), "truncated before it was served");
}

#[test]
fn inv11_flags_a_lost_immediate_write() {
    let mut h = base();
    let acked = |c, immediate| {
        ev(
            5,
            0,
            LogEvent::WriteAcked { index: ix(1, c), client_id: 1, seq: u64::from(c), immediate },
        )
    };
    h.events = vec![acked(3, true), acked(4, false)];
    assert!(!flags(check::immediate_durability, &h), "a lost unread async write is allowed (G5)");
    h.events.push(acked(5, true));
    assert!(flags(check::immediate_durability, &h));
    h.events = vec![acked(4, false)];
    h.promises.sync_writes = true;
    assert!(flags(check::immediate_durability, &h), "sync durability loses nothing acknowledged");
}

#[test]
fn inv12_log_order_flags_a_served_entry_applied_off_h() {
    let mut h = base();
    h.events = vec![synced()];
    let mut s = serve(&h, 1, 0, 5);
    s.u = ix(1, 3);
    h.serves = vec![s];
    h.final_applied = vec![
        (NodeId(1), Some(vec![ix(1, 1), ix(1, 2), ix(1, 3)])),
        (NodeId(2), Some(vec![ix(1, 1), ix(1, 7)])),
    ];
    assert!(!flags(check::log_order, &h), "a never-served divergent suffix is allowed");
    h.final_applied = vec![(NodeId(1), Some(vec![ix(1, 1), ix(1, 3)]))];
    assert!(flags(check::log_order, &h), "(1,3) applied without (1,2)");
}

#[test]
fn inv13_session_token_flags_a_state_behind_the_token() {
    let mut h = base();
    let mut s = serve(&h, 1, 0, 5);
    s.min_index = Some(ix(1, 3));
    h.serves = vec![s.clone()];
    assert!(!flags(check::session_token, &h));
    s.applied = ix(1, 2);
    h.serves = vec![s];
    assert!(flags(check::session_token, &h));
}

#[test]
fn inv14_liveness_and_driver_anomalies_are_reported() {
    let mut h = base();
    assert!(!flags(check::liveness, &h) && !flags(check::driver, &h));
    h.liveness.push(Anomaly { at: t(1), node: None, what: "no leader".into() });
    h.anomalies.push(Anomaly {
        at: t(1),
        node: Some(NodeId(1)),
        what: "check_invariants failed".into(),
    });
    assert!(flags(check::liveness, &h) && flags(check::driver, &h));
    assert_eq!(check::check_all(&h).len(), 2);
}

#[test]
fn rifl1_at_most_once_flags_a_second_execution_of_an_rpc_at_one_node() {
    let mut h = base();
    let rpc = RpcId { client_id: 1, seq: 1 };
    let exec = |node, c, others: Vec<LogIndex>| ExecutionRecord {
        at: t(5),
        pos: 0,
        node: NodeId(node),
        index: ix(1, c),
        rpc,
        others,
    };
    // The same RPC executed at two nodes, or again after its first entry was truncated: fine.
    h.executions = vec![exec(0, 1, vec![]), exec(1, 1, vec![]), exec(1, 4, vec![])];
    assert!(!flags(check::at_most_once, &h));
    h.executions.push(exec(2, 4, vec![ix(1, 1)]));
    assert!(flags(check::at_most_once, &h));
}

#[test]
fn rifl2_stable_result_flags_two_indexes_for_one_rpc() {
    let mut h = base();
    let ok = |seq, c, delivered| WriteOkRecord {
        at: t(5),
        rpc: RpcId { client_id: 1, seq },
        index: ix(1, c),
        outcome: WriteOutcome::Done,
        delivered,
    };
    // put(1, c, ..) is client 1's seq c.
    h.write_oks = vec![ok(1, 1, false), ok(1, 1, true), ok(2, 2, true), ok(3, 9, true)];
    assert!(!flags(check::stable_result, &h), "a lost entry (1,9) is not this checker's business");
    h.write_oks.push(ok(2, 1, true));
    assert!(flags(check::stable_result, &h), "an Ok naming another RPC's entry");
    h.h.push(LogEntry { seq: 1, ..put(1, 4, "a", "1") }); // seq 1 appended again at (1,4)
    h.write_oks = vec![ok(1, 1, false), ok(1, 4, true)];
    assert!(flags(check::stable_result, &h), "two Oks of one RPC with different entries");
}

/// R-G2 with results: an `Ok` must carry what its one execution returned, evaluated where
/// its entry sits in `H` — an add's value before, a conditional write's rejection.
#[test]
fn rifl2_stable_result_flags_an_outcome_its_execution_did_not_return() {
    let mut h = base();
    let op = |c, key: &str, op| LogEntry { op, ..put(1, c, key, "") };
    let cas = LogOp::Cond {
        expect: strata_log::Expect::Value(Bytes::from_static(b"1")),
        put: Some(Bytes::from_static(b"3")),
    };
    h.h.push(op(4, "a", cas)); // rejected: a holds 2
    h.h.push(op(5, "b", LogOp::Add(5))); // b: 1 -> 6
    let ok = |seq, outcome| WriteOkRecord {
        at: t(5),
        rpc: RpcId { client_id: 1, seq },
        index: ix(1, seq as u32),
        outcome,
        delivered: true,
    };
    h.write_oks = vec![
        ok(4, WriteOutcome::Rejected { current: ix(1, 3) }),
        ok(5, WriteOutcome::Added { old: 1 }),
    ];
    assert!(!flags(check::stable_result, &h));
    h.write_oks.push(ok(5, WriteOutcome::Added { old: 0 }));
    assert!(flags(check::stable_result, &h), "an add's Ok with another value before");
    h.write_oks = vec![ok(4, WriteOutcome::Done)];
    assert!(flags(check::stable_result, &h), "a rejected write reported as done");
}

/// A counter read must show each add once: a replica that executed a retried add twice
/// serves a value no prefix of `H` produces.
#[test]
fn orca2_served_exists_flags_a_counter_added_twice() {
    let mut h = base();
    h.h.push(LogEntry { op: LogOp::Add(5), ..put(1, 4, "b", "") });
    h.h.push(LogEntry { op: LogOp::Add(5), seq: 4, ..put(1, 5, "b", "") }); // a retry
    h.reads = vec![read("b", 10, 11, ix(1, 4), Some("6"), 0)];
    assert!(!flags(check::served_exists, &h));
    h.reads = vec![read("b", 10, 11, ix(1, 5), Some("11"), 0)];
    assert!(flags(check::served_exists, &h), "the retry's entry changes nothing");
    h.reads = vec![read("b", 10, 11, ix(1, 4), Some("11"), 0)];
    assert!(flags(check::served_exists, &h), "a value the add did not write");
}
