//! Unit tests of one replica core driven by hand (no cluster): vote rules (§5.9 rule 0, rule
//! (d), one persisted vote per epoch), persist tokens, and recovery from disk (§5.10). The
//! cluster scenarios, the §7 swarm and the canaries run on the simulator's driver in
//! `strata-sim` (`crates/sim/tests/orca_*.rs`).

use bytes::Bytes;
use strata_core::{Effects, Node};
use strata_wire::log::{LogEntry, LogIndex, LogMessage, LogOp};
use strata_wire::{Instant, NodeId};

use crate::api::{HardState, LogEvent, Persist, RecoveredState, VoteRefusal};
use crate::config::{LogConfig, Replication};
use crate::replica::{LogEffects, LogReplica, Role};

fn orca() -> LogConfig {
    LogConfig::orca(Replication::Async)
}

use crate::state::test_entry as entry;

fn recovered(entries: Vec<LogEntry>, epoch: u32) -> LogReplica {
    let ids = [NodeId(0), NodeId(1), NodeId(2)];
    let state = RecoveredState {
        hard_state: HardState {
            epoch,
            voted_for: None,
        },
        snapshot: None,
        entries,
    };
    LogReplica::recover(orca(), NodeId(0), &ids, state, Instant::from_millis(1), 5).unwrap()
}

#[test]
fn candidate_with_a_shorter_log_is_refused_and_rule_0_protects_recent_leaders() {
    let mut r = recovered(vec![entry(1, 1), entry(1, 2)], 1);
    let mut out: LogEffects = Effects::default();
    // Rule 0: within ET_min of the restart the request is ignored, even its epoch.
    r.on_message(
        Instant::from_millis(500),
        NodeId(1),
        LogMessage::RequestVote {
            epoch: 2,
            last_index: LogIndex::new(1, 2),
        },
    );
    assert_eq!(r.epoch(), 1);
    r.poll_effects(&mut out);
    assert!(out.send.is_empty() && out.send_after_persist.is_empty());
    assert!(out.event.iter().any(|e| matches!(
        e,
        LogEvent::VoteRefused {
            reason: VoteRefusal::LeaseProtected,
            ..
        }
    )));
    // Rule (d): a candidate whose last index is lower is refused.
    out.clear();
    // Right when rule 0's protection ends (ET_min after the restart at 1 ms), before the
    // replica's own election deadline (drawn from [ET_min, 2 ET_min) after it).
    let later = Instant::from_millis(1001);
    r.on_message(
        later,
        NodeId(1),
        LogMessage::RequestVote {
            epoch: 2,
            last_index: LogIndex::new(1, 1),
        },
    );
    r.poll_effects(&mut out);
    assert!(out.event.iter().any(|e| matches!(
        e,
        LogEvent::VoteRefused {
            reason: VoteRefusal::LessUpToDate,
            ..
        }
    )));
    assert_eq!(r.voted_for(), None);
    // An up-to-date candidate gets the vote, sent only after the vote is persisted.
    out.clear();
    r.on_message(
        later,
        NodeId(2),
        LogMessage::RequestVote {
            epoch: 2,
            last_index: LogIndex::new(1, 2),
        },
    );
    r.poll_effects(&mut out);
    assert_eq!(r.voted_for(), Some(NodeId(2)));
    let (token, _) = out
        .persist
        .iter()
        .find(|(_, p)| matches!(p, Persist::HardState(h) if h.voted_for == Some(NodeId(2))))
        .expect("vote persisted");
    assert!(out.send.is_empty());
    assert!(
        matches!(out.send_after_persist.as_slice(), [(t, NodeId(2), LogMessage::VoteResp { granted: true, .. })] if t == token)
    );
    // At most one vote per epoch.
    out.clear();
    r.on_message(
        later,
        NodeId(1),
        LogMessage::RequestVote {
            epoch: 2,
            last_index: LogIndex::new(1, 9),
        },
    );
    r.poll_effects(&mut out);
    assert!(out.event.iter().any(|e| matches!(
        e,
        LogEvent::VoteRefused {
            reason: VoteRefusal::AlreadyVoted,
            ..
        }
    )));
}

#[test]
fn persist_tokens_drive_the_persisted_index_and_votes_wait_for_their_hard_state() {
    let mut r = recovered(vec![entry(1, 1)], 1);
    let mut out: LogEffects = Effects::default();
    // Election: epoch 2, vote for self persisted before any RequestVote leaves.
    r.on_tick(Instant::from_millis(5000));
    r.poll_effects(&mut out);
    assert_eq!(r.role(), Role::Candidate);
    let hs = out
        .persist
        .iter()
        .find(|(_, p)| matches!(p, Persist::HardState(h) if h.epoch == 2))
        .expect("vote persisted")
        .0;
    assert!(
        out.send.is_empty()
            && out
                .send_after_persist
                .iter()
                .all(|(t, _, m)| *t == hs && matches!(m, LogMessage::RequestVote { .. }))
    );
    // A token never issued is hostile input: counted, ignored.
    r.on_persisted(Instant::from_millis(5001), 999);
    assert_eq!(r.stats().bad_messages, 1);
    r.on_persisted(Instant::from_millis(5001), hs);
    assert_eq!(r.persisted_index(), LogIndex::new(1, 1));
}

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

/// Sends of `out` that are `AppendEntries`, as (to, hb_round).
fn heartbeats(out: &LogEffects) -> Vec<(NodeId, u64)> {
    let held = out.send_after_persist.iter().map(|(_, to, m)| (to, m));
    out.send
        .iter()
        .map(|(to, m)| (to, m))
        .chain(held)
        .filter_map(|(to, m)| match m {
            LogMessage::AppendEntries(a) => Some((*to, a.hb_round)),
            _ => None,
        })
        .collect()
}

/// Regression (found by `scripts/bench-log.sh`: leaders of loaded tables lost their lease every
/// few seconds): a deadline that passes while inputs keep arriving is served by those inputs.
/// The node's core task takes queued inputs before ticking, and `poll_timeout` never reports a
/// deadline at or before the latest input again, so a leader fed only acks must still start
/// heartbeat rounds, and a follower fed only stray messages must still start its election.
#[test]
fn deadlines_passed_over_by_inputs_fire_without_a_tick() {
    let mut r = recovered(vec![entry(1, 1)], 1);
    let mut out: LogEffects = Effects::default();
    let stray = |epoch: u32, hb_round: u64| {
        LogMessage::AppendAck(strata_wire::log::AppendAck {
            epoch,
            success: true,
            last_index: LogIndex::new(1, 1),
            match_index: LogIndex::new(1, 1),
            persisted_index: LogIndex::new(1, 1),
            applied_index: LogIndex::new(1, 1),
            hb_round,
            round_id: None,
            f_ts: 0,
            serving: false,
            revoke_ack: None,
        })
    };
    // A follower past its election deadline (at most 2 ET_min after the restart) that hears
    // only a stale ack becomes a candidate.
    let mut now = Instant::from_millis(2_100);
    r.on_message(now, NodeId(1), stray(0, 0));
    assert_eq!(r.role(), Role::Candidate, "the election deadline passed during an input");
    r.poll_effects(&mut out);
    let (token, _) = out.persist.iter().find(|(_, p)| matches!(p, Persist::HardState(_))).expect("vote for itself persisted");
    r.on_persisted(now, *token);
    r.on_message(now, NodeId(1), LogMessage::VoteResp { epoch: 2, granted: true });
    assert_eq!(r.role(), Role::Leader);
    out.clear();
    // A leader fed acks every 40 ms (hb = 30 ms) and never ticked keeps starting rounds.
    let mut rounds = vec![0];
    for _ in 0..10 {
        now += std::time::Duration::from_millis(40);
        r.on_message(now, NodeId(1), stray(2, *rounds.last().unwrap()));
        r.poll_effects(&mut out);
        rounds.extend(heartbeats(&out).into_iter().map(|(_, h)| h));
        out.clear();
    }
    rounds.dedup();
    assert!(rounds.len() > 10, "one heartbeat round per 40 ms input, without ticks: {rounds:?}");
    assert_eq!(r.role(), Role::Leader, "the acked rounds keep the lease");
}
