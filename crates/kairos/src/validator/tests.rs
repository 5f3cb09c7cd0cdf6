//! Algorithm 3 branch by branch (kairos.md §5.6), decisions, GC and recovery.

use proptest::prelude::*;

use super::*;

fn ts(nanos: u64, node: u32) -> Timestamp {
    Timestamp::new(nanos, node)
}

fn k(name: &str) -> Key {
    Bytes::copy_from_slice(name.as_bytes())
}

fn txn(n: u64) -> TxnId {
    TxnId { client_id: n % 4, base: n }
}

fn req(n: u64, commit: Timestamp, reads: &[(&str, Timestamp)], writes: &[&str]) -> ValidateReq {
    ValidateReq {
        txn: txn(n),
        commit_ts: commit,
        freshness: reads.iter().map(|(_, v)| *v).min(),
        read_only: writes.is_empty(),
        reads: reads.iter().map(|(key, v)| (k(key), *v)).collect(),
        writes: writes.iter().map(|key| k(key)).collect(),
    }
}

fn abort(reason: AbortReason) -> Vote {
    Vote::Abort(reason)
}

/// A validator where `x` was written at 10 by txn 100 (committed) and nothing else happened.
fn with_x_at_10() -> Validator {
    let mut v = Validator::new(0..4);
    assert_eq!(v.validate(&req(100, ts(10, 0), &[], &["x"])), Vote::Commit);
    assert_eq!(v.decide(txn(100), Decision::Commit, ts(10, 0)), DecideOutcome::Applied);
    v.check_invariants();
    v
}

#[test]
fn a_fresh_read_and_write_commit_and_update_the_key_state() {
    let mut v = with_x_at_10();
    assert_eq!(v.validate(&req(1, ts(20, 1), &[("x", ts(10, 0))], &["x"])), Vote::Commit);
    let s = v.key(b"x");
    assert_eq!(s.latest_read, ts(20, 1));
    assert_eq!(s.prepared_write, Some((txn(1), ts(20, 1))));
    assert_eq!(v.decide(txn(1), Decision::Commit, ts(20, 1)), DecideOutcome::Applied);
    let s = v.key(b"x");
    assert_eq!((s.latest_committed, s.prepared_write), (ts(20, 1), None));
    assert_eq!(s.versions, vec![ts(10, 0), ts(20, 1)]);
    let events = v.take_events();
    assert!(events.contains(&ValidatorEvent::Installed {
        key: k("x"),
        ts: ts(20, 1),
        txn: txn(1)
    }));
    v.check_invariants();
}

#[test]
fn step_0_a_refused_transaction_and_duplicates_get_the_recorded_vote() {
    let mut v = with_x_at_10();
    // A decision for an unknown transaction refuses it (§5.16): a late validate aborts.
    assert_eq!(v.decide(txn(7), Decision::Abort, ts(5, 0)), DecideOutcome::Refused);
    assert_eq!(
        v.validate(&req(7, ts(30, 3), &[("x", ts(10, 0))], &[])),
        abort(AbortReason::Refused)
    );
    // A termination query for an unknown transaction refuses it too.
    assert_eq!(v.on_status_query(txn(8)), TxnStatus::Refused);
    assert_eq!(v.validate(&req(8, ts(30, 0), &[], &["y"])), abort(AbortReason::Refused));
    // Duplicates: the recorded Commit, even though the state now says PreparedConflict.
    let r = req(1, ts(20, 1), &[("x", ts(10, 0))], &["x"]);
    assert_eq!(v.validate(&r), Vote::Commit);
    assert_eq!(v.validate(&r), Vote::Commit);
    assert_eq!(v.on_status_query(txn(1)), TxnStatus::Voted(Vote::Commit));
    // ... and the recorded Abort, even after the conflict is gone.
    let stale = req(2, ts(25, 2), &[("x", ts(10, 0))], &[]);
    assert_eq!(v.validate(&stale), abort(AbortReason::PreparedConflict { key: k("x") }));
    v.decide(txn(1), Decision::Abort, ts(20, 1));
    assert_eq!(v.validate(&stale), abort(AbortReason::PreparedConflict { key: k("x") }));
    v.check_invariants();
}

#[test]
fn step_1_too_old_when_freshness_is_below_ts_gc() {
    let mut v = with_x_at_10();
    for c in 0..4 {
        let r = Report { seq: 1, local_wm: ts(100, u32::MAX), c_freshness: ts(50, 0) };
        assert_eq!(v.on_report(c, r), ReportOutcome::Applied);
    }
    assert_eq!(v.ts_gc(), ts(50, 0));
    let mut old = req(1, ts(60, 1), &[("x", ts(10, 0))], &[]);
    old.freshness = Some(ts(49, 0));
    assert_eq!(v.validate(&old), abort(AbortReason::TooOld { ts_gc: ts(50, 0) }));
    let mut fresh = req(2, ts(60, 1), &[("x", ts(10, 0))], &[]);
    fresh.freshness = Some(ts(50, 0));
    assert_eq!(v.validate(&fresh), Vote::Commit, "freshness == ts_GC is enough");
    // No read set, no freshness, no check.
    assert_eq!(v.validate(&req(3, ts(70, 1), &[], &["y"])), Vote::Commit);
}

#[test]
fn step_2_prepared_conflict_on_a_read_key_comes_before_staleness() {
    let mut v = with_x_at_10();
    assert_eq!(v.validate(&req(1, ts(20, 1), &[], &["x"])), Vote::Commit);
    // A reader of the current version, while a write is prepared: PreparedConflict.
    let before = v.key(b"x");
    assert_eq!(
        v.validate(&req(2, ts(15, 2), &[("x", ts(10, 0))], &[])),
        abort(AbortReason::PreparedConflict { key: k("x") })
    );
    // A stale reader too: the prepared check is first.
    assert_eq!(
        v.validate(&req(3, ts(15, 2), &[("x", ts(5, 0))], &[])),
        abort(AbortReason::PreparedConflict { key: k("x") })
    );
    assert_eq!(v.key(b"x"), before, "an Abort vote changes no per-key state");
}

#[test]
fn step_2_stale_when_the_version_read_is_not_the_latest_committed() {
    let mut v = with_x_at_10();
    assert_eq!(
        v.validate(&req(1, ts(20, 1), &[("x", Timestamp::ZERO)], &[])),
        abort(AbortReason::Stale { key: k("x") })
    );
    // A version from the future (not installed here) is stale too.
    assert_eq!(
        v.validate(&req(2, ts(20, 1), &[("x", ts(11, 0))], &[])),
        abort(AbortReason::Stale { key: k("x") })
    );
    // A key never written reads at ZERO.
    assert_eq!(v.validate(&req(3, ts(20, 1), &[("y", Timestamp::ZERO)], &[])), Vote::Commit);
}

#[test]
fn step_2_a_transaction_may_hold_the_prepared_write_of_its_own_read_key() {
    // Only reachable after a restart (§6.4): the primary reports txn 1's write of x
    // prepared, and txn 1's own validate arrives.
    let mut v = Validator::restarted(0..1, Timestamp::ZERO);
    v.on_recovery_answer(0, Some(ts(5, 0)), vec![]);
    v.rebuild_key(k("x"), ts(3, 0), Some((txn(1), ts(20, 1))));
    assert_eq!(v.validate(&req(1, ts(20, 1), &[("x", ts(3, 0))], &[])), Vote::Commit, "pending");
    let mut v = Validator::restarted(0..1, Timestamp::ZERO);
    v.on_recovery_answer(0, None, vec![]);
    v.rebuild_key(k("x"), ts(3, 0), Some((txn(9), ts(20, 1))));
    assert_eq!(
        v.validate(&req(1, ts(30, 1), &[("x", ts(3, 0))], &[])),
        abort(AbortReason::PreparedConflict { key: k("x") })
    );
}

#[test]
fn step_3_an_rw_transaction_must_commit_above_every_version_it_read() {
    let mut v = with_x_at_10();
    // A writer (of y) with a slow clock that read x@10 and stamped itself at 10 or below.
    assert_eq!(
        v.validate(&req(1, ts(10, 0), &[("x", ts(10, 0))], &["y"])),
        abort(AbortReason::TimestampOrder { key: k("x") })
    );
    assert_eq!(
        v.validate(&req(2, ts(9, 5), &[("x", ts(10, 0))], &["y"])),
        abort(AbortReason::TimestampOrder { key: k("x") })
    );
    // The part of an RW transaction whose writes live elsewhere: still RW.
    let mut part = req(3, ts(9, 5), &[("x", ts(10, 0))], &[]);
    part.read_only = false;
    assert_eq!(v.validate(&part), abort(AbortReason::TimestampOrder { key: k("x") }));
    // RO transactions have no such check (their timestamp is max fts, possibly == vts).
    assert_eq!(v.validate(&req(4, ts(10, 0), &[("x", ts(10, 0))], &[])), Vote::Commit);
    assert_eq!(v.validate(&req(5, ts(11, 0), &[("x", ts(10, 0))], &["y"])), Vote::Commit);
}

#[test]
fn step_4_prepared_read_and_write_conflicts_of_a_written_key() {
    let mut v = with_x_at_10();
    // PreparedConflict: another writer holds x.
    assert_eq!(v.validate(&req(1, ts(20, 1), &[], &["x"])), Vote::Commit);
    assert_eq!(
        v.validate(&req(2, ts(30, 2), &[], &["x"])),
        abort(AbortReason::PreparedConflict { key: k("x") })
    );
    v.decide(txn(1), Decision::Abort, ts(20, 1));
    // ReadWriteConflict: a reader validated at 25 (>= new version 25, and > 24).
    assert_eq!(v.validate(&req(3, ts(25, 3), &[("x", ts(10, 0))], &[])), Vote::Commit);
    assert_eq!(
        v.validate(&req(4, ts(25, 3), &[], &["x"])),
        abort(AbortReason::ReadWriteConflict { key: k("x") })
    );
    assert_eq!(
        v.validate(&req(5, ts(24, 0), &[], &["x"])),
        abort(AbortReason::ReadWriteConflict { key: k("x") })
    );
    // WriteWriteConflict: the latest committed write is at 10; latest_read is 25 so use a
    // fresh key y committed at 40 with no reader.
    assert_eq!(v.validate(&req(6, ts(40, 1), &[], &["y"])), Vote::Commit);
    v.decide(txn(6), Decision::Commit, ts(40, 1));
    assert_eq!(
        v.validate(&req(7, ts(40, 1), &[], &["y"])),
        abort(AbortReason::WriteWriteConflict { key: k("y") })
    );
    assert_eq!(
        v.validate(&req(8, ts(39, 9), &[], &["y"])),
        abort(AbortReason::WriteWriteConflict { key: k("y") })
    );
    assert_eq!(v.validate(&req(9, ts(40, 2), &[], &["y"])), Vote::Commit, "above by the node");
    v.check_invariants();
}

#[test]
fn step_5_latest_read_is_the_max_and_survives_an_abort() {
    let mut v = with_x_at_10();
    assert_eq!(v.validate(&req(1, ts(50, 1), &[("x", ts(10, 0))], &[])), Vote::Commit);
    // An RO transaction with an older timestamp (max fts in the past) does not lower it.
    assert_eq!(v.validate(&req(2, ts(20, 2), &[("x", ts(10, 0))], &[])), Vote::Commit);
    assert_eq!(v.key(b"x").latest_read, ts(50, 1));
    // An RW transaction that read x and aborts later: latest_read stays (§5.6 last line).
    assert_eq!(v.validate(&req(3, ts(60, 3), &[("x", ts(10, 0))], &["x"])), Vote::Commit);
    v.decide(txn(3), Decision::Abort, ts(60, 3));
    let s = v.key(b"x");
    assert_eq!((s.latest_read, s.prepared_write, s.latest_committed), (ts(60, 3), None, ts(10, 0)));
    v.check_invariants();
}

#[test]
fn the_first_failing_read_or_write_names_the_key() {
    let mut v = with_x_at_10();
    let r = req(1, ts(20, 1), &[("a", Timestamp::ZERO), ("x", ts(3, 0))], &["b"]);
    assert_eq!(v.validate(&r), abort(AbortReason::Stale { key: k("x") }));
}

#[test]
fn a_commit_for_an_abort_vote_or_a_different_timestamp_is_counted() {
    let mut v = with_x_at_10();
    assert_eq!(
        v.validate(&req(1, ts(5, 1), &[], &["x"])),
        abort(AbortReason::WriteWriteConflict { key: k("x") })
    );
    assert_eq!(v.decide(txn(1), Decision::Commit, ts(5, 1)), DecideOutcome::Applied);
    assert_eq!(v.key(b"x").latest_committed, ts(10, 0), "nothing installed");
    assert_eq!(v.validate(&req(2, ts(20, 1), &[], &["x"])), Vote::Commit);
    v.decide(txn(2), Decision::Commit, ts(99, 0));
    assert_eq!(v.key(b"x").latest_committed, ts(20, 1), "the validated timestamp");
    assert_eq!(v.counters.commit_against_abort_vote, 1);
    assert_eq!(v.counters.decision_ts_mismatch, 1);
}

#[test]
fn versions_below_ts_gc_are_pruned_but_the_latest_stays() {
    let mut v = Validator::new([0]);
    for (n, t) in [(1, 10), (2, 20), (3, 30)] {
        assert_eq!(v.validate(&req(n, ts(t, 0), &[], &["x"])), Vote::Commit);
        v.decide(txn(n), Decision::Commit, ts(t, 0));
    }
    v.take_events();
    v.on_report(0, Report { seq: 1, local_wm: ts(40, 0), c_freshness: ts(25, 0) });
    assert_eq!(v.key(b"x").versions, vec![ts(30, 0)]);
    let pruned: Vec<_> = v.take_events();
    assert_eq!(
        pruned,
        vec![
            ValidatorEvent::Pruned { key: k("x"), version: ts(10, 0), ts_gc: ts(25, 0) },
            ValidatorEvent::Pruned { key: k("x"), version: ts(20, 0), ts_gc: ts(25, 0) },
        ]
    );
    v.on_report(0, Report { seq: 2, local_wm: ts(50, 0), c_freshness: ts(35, 0) });
    let s = v.key(b"x");
    assert_eq!((s.versions.clone(), s.latest_committed), (vec![], ts(30, 0)));
    v.check_invariants();
}

#[test]
fn a_raised_ts_gc_is_monotone_prunes_and_makes_older_reads_too_old() {
    let mut v = Validator::new([]);
    for (n, t) in [(1, 10), (2, 20)] {
        assert_eq!(v.validate(&req(n, ts(t, 0), &[], &["x"])), Vote::Commit);
        v.decide(txn(n), Decision::Commit, ts(t, 0));
    }
    v.raise_ts_gc(ts(15, 0));
    assert_eq!(v.ts_gc(), ts(15, 0));
    assert_eq!(v.key(b"x").versions, vec![ts(20, 0)], "pruned below the raised ts_GC");
    v.raise_ts_gc(ts(12, 0));
    assert_eq!(v.ts_gc(), ts(15, 0), "a lower floor changes nothing");
    let mut old = req(3, ts(30, 1), &[("x", ts(20, 0))], &[]);
    old.freshness = Some(ts(14, 0));
    assert_eq!(v.validate(&old), abort(AbortReason::TooOld { ts_gc: ts(15, 0) }));
    v.check_invariants();
}

#[test]
fn a_restarted_validator_votes_abort_until_rebuilt_and_keeps_the_read_floor() {
    let mut v = Validator::restarted([0, 1], ts(7, 0));
    assert_eq!(v.ts_gc(), ts(7, 0));
    let r = req(1, ts(100, 0), &[("x", ts(10, 0))], &["y"]);
    assert_eq!(v.validate(&r), abort(AbortReason::Recovering));
    assert_eq!(v.take_keys_to_rebuild(), vec![k("x"), k("y")]);
    v.on_recovery_answer(0, Some(ts(80, 0)), vec![]);
    let held = RecoveredVote {
        txn: txn(5),
        commit_ts: ts(90, 1),
        reads: vec![k("z")],
        writes: vec![k("w")],
    };
    v.on_recovery_answer(1, Some(ts(90, 1)), vec![held]);
    assert!(!v.is_recovering());
    assert_eq!(v.read_floor(), ts(90, 1));
    v.rebuild_key(k("x"), ts(10, 0), None);
    v.rebuild_key(k("y"), ts(0, 0), None);
    v.rebuild_key(k("w"), ts(3, 0), None);
    v.check_invariants();
    // A writer below the floor aborts (a lost read timestamp may be that high).
    assert_eq!(
        v.validate(&req(2, ts(85, 0), &[], &["y"])),
        abort(AbortReason::ReadWriteConflict { key: k("y") })
    );
    assert_eq!(v.validate(&r), Vote::Commit);
    // The reinstalled vote holds w until its decision.
    assert_eq!(
        v.validate(&req(3, ts(200, 0), &[], &["w"])),
        abort(AbortReason::PreparedConflict { key: k("w") })
    );
    v.decide(txn(5), Decision::Commit, ts(90, 1));
    assert_eq!(v.key(b"w").latest_committed, ts(90, 1));
    v.check_invariants();
}

/// One input of the random sequences below.
#[derive(Clone, Debug)]
enum Op {
    Validate { n: u64, commit: u64, reads: Vec<(u8, u64)>, writes: Vec<u8> },
    Decide { n: u64, commit: bool },
    Report { client: u32, wm: u64, fresh: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..12, 1u64..60, proptest::collection::vec((0u8..3, 0u64..60), 0..3), proptest::collection::vec(0u8..3, 0..3))
            .prop_map(|(n, commit, reads, writes)| Op::Validate { n, commit, reads, writes }),
        3 => (0u64..12, any::<bool>()).prop_map(|(n, commit)| Op::Decide { n, commit }),
        1 => (0u32..2, 0u64..60, 0u64..60).prop_map(|(client, wm, fresh)| Op::Report { client, wm, fresh }),
    ]
}

proptest! {
    /// Whatever arrives: the structural invariants hold after every input, an Abort vote
    /// changes no per-key state, a Commit vote obeys every rule of Algorithm 3, versions only
    /// grow, and `ts_GC` never decreases.
    #[test]
    fn random_inputs_keep_the_validator_invariants(ops in proptest::collection::vec(op(), 1..80)) {
        let mut v = Validator::new([0, 1]);
        let mut seqs = [0u64; 2];
        let mut last_gc = v.ts_gc();
        for op in ops {
            match op {
                Op::Validate { n, commit, reads, writes } => {
                    let name = |i: u8| ["a", "b", "c"][i as usize];
                    let reads: Vec<_> = reads.iter().map(|(key, vts)| (name(*key), ts(*vts, 0))).collect();
                    let writes: Vec<_> = writes.iter().map(|w| name(*w)).collect();
                    let r = req(n, ts(commit, (n % 3) as u32), &reads, &writes);
                    let before: Vec<KeyState> = ["a", "b", "c"].iter().map(|x| v.key(x.as_bytes())).collect();
                    let known = v.pending().contains_key(&txn(n)) || v.is_refused(txn(n));
                    let vote = v.validate(&r);
                    let after: Vec<KeyState> = ["a", "b", "c"].iter().map(|x| v.key(x.as_bytes())).collect();
                    if vote != Vote::Commit || known {
                        prop_assert_eq!(&before, &after);
                    } else {
                        for (key, vts) in &r.reads {
                            let i = ["a", "b", "c"].iter().position(|x| x.as_bytes() == &key[..]).unwrap();
                            prop_assert_eq!(before[i].latest_committed, *vts);
                            prop_assert!(before[i].prepared_write.is_none_or(|(t, _)| t == r.txn));
                            prop_assert!(after[i].latest_read >= r.commit_ts);
                            if !r.writes.is_empty() { prop_assert!(*vts < r.commit_ts); }
                        }
                        for key in &r.writes {
                            let i = ["a", "b", "c"].iter().position(|x| x.as_bytes() == &key[..]).unwrap();
                            prop_assert!(before[i].latest_read < r.commit_ts);
                            prop_assert!(before[i].latest_committed < r.commit_ts);
                        }
                    }
                }
                Op::Decide { n, commit } => {
                    let d = if commit { Decision::Commit } else { Decision::Abort };
                    let commit_ts = v.pending().get(&txn(n)).map_or(Timestamp::ZERO, |p| p.commit_ts);
                    let before: Vec<KeyState> = ["a", "b", "c"].iter().map(|x| v.key(x.as_bytes())).collect();
                    v.decide(txn(n), d, commit_ts);
                    for (i, x) in ["a", "b", "c"].iter().enumerate() {
                        let after = v.key(x.as_bytes());
                        prop_assert!(after.latest_committed >= before[i].latest_committed);
                        prop_assert!(after.latest_read >= before[i].latest_read);
                    }
                }
                Op::Report { client, wm, fresh } => {
                    seqs[client as usize] += 1;
                    let prev = v.watermarks().report(client).copied();
                    let r = Report {
                        seq: seqs[client as usize],
                        local_wm: ts(wm, 0).max(prev.map_or(Timestamp::ZERO, |p| p.local_wm)),
                        c_freshness: ts(fresh, 0).max(prev.map_or(Timestamp::ZERO, |p| p.c_freshness)),
                    };
                    v.on_report(client, r);
                    prop_assert!(v.ts_gc() >= last_gc);
                    last_gc = v.ts_gc();
                }
            }
            v.check_invariants();
        }
    }
}
