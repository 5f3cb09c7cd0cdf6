//! §5.8 leader lease and deposed leaders, §5.9 votes (rule 0, rule (d), persisted votes).

use super::*;

#[test]
fn deposed_leader_stops_serving_reads_when_its_lease_ends() {
    let mut c = Cluster::new(5, orca());
    let old = c.elect();
    c.write_ok(old, "k", "v");
    c.run_ms(20);
    c.isolate(old);
    assert!(c.read_now(old, "k").is_ok(), "still under lease");
    c.run_ms(400);
    assert_eq!(
        c.read_now(old, "k"),
        Err(ReadError::NotLeader { hint: None })
    );
    for i in 0..5 {
        assert!(
            !c.node(i).is_serving(c.now),
            "n{i}: leases of the old leader expired"
        );
    }
    c.run_ms(4000);
    let new = c.leader().expect("new leader");
    assert_ne!(new, old);
    let expired_at = c
        .events
        .iter()
        .find(|(_, n, e)| *n == old && matches!(e, LogEvent::LeaderLeaseExpired { .. }))
        .expect("lease expired")
        .0;
    let elected_at = c
        .events
        .iter()
        .find(|(_, n, e)| *n == new && matches!(e, LogEvent::BecameLeader { .. }))
        .expect("elected")
        .0;
    assert!(
        expired_at < elected_at,
        "the old leader stopped serving before a new one existed (§5.8)"
    );
    assert!(
        c.count_events(|e| matches!(
            e,
            LogEvent::SteppedDown {
                reason: StepDownReason::LeaseLost,
                ..
            }
        )) >= 1
    );
    assert_eq!(
        c.read_now(new, "k").unwrap().value,
        Some(Bytes::from_static(b"v"))
    );
    assert_clean(&c);
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
fn candidate_with_a_shorter_log_loses_the_election_in_a_cluster() {
    let mut c = Cluster::new(3, orca());
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
            LogEvent::VoteRefused {
                reason: VoteRefusal::LessUpToDate,
                ..
            }
        )) >= 1
            || c.node(new).epoch() == c.node(behind).epoch()
    );
    assert_eq!(c.node(new).get(b"k").0, Some(Bytes::from_static(b"v1")));
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
