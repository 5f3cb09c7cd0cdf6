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
    let later = Instant::from_millis(1500);
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
