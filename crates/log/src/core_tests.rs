//! Unit tests of one replica core driven by hand (no cluster): vote rules (§5.9 rule 0, rule
//! (d), one persisted vote per epoch), persist tokens, and recovery from disk (§5.10). The
//! cluster scenarios, the §7 swarm and the canaries run on the simulator's driver in
//! `strata-sim` (`crates/sim/tests/orca_*.rs`).

use bytes::Bytes;
use strata_core::{Effects, Node};
use strata_wire::log::{Completion, LogEntry, LogIndex, LogMessage, LogOp, ReadError, ShardMove};
use strata_wire::{Instant, NodeId};

use crate::api::{
    HardState, LogEvent, LogReply, LogRequest, Persist, RecoveredState, TxnAnswer, VoteRefusal,
    WriteAck, WriteError, WriteOp,
};
use crate::config::{LogConfig, Replication};
use crate::replica::{LogEffects, LogReplica, Role};
use strata_rifl::Verdict;
use strata_wire::rifl::{ClusterTime, LeaseInfo, Rifl, RpcId};
use strata_wire::txn::{ReadIntent, Timestamp};

fn orca() -> LogConfig {
    LogConfig::orca(Replication::Async)
}

use crate::state::test_entry as entry;

fn recovered(entries: Vec<LogEntry>, epoch: u32) -> LogReplica {
    let ids = [NodeId(0), NodeId(1), NodeId(2)];
    let state = RecoveredState {
        hard_state: HardState { epoch, voted_for: None },
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
        LogMessage::RequestVote { epoch: 2, last_index: LogIndex::new(1, 2) },
    );
    assert_eq!(r.epoch(), 1);
    r.poll_effects(&mut out);
    assert!(out.send.is_empty() && out.send_after_persist.is_empty());
    assert!(out
        .event
        .iter()
        .any(|e| matches!(e, LogEvent::VoteRefused { reason: VoteRefusal::LeaseProtected, .. })));
    // Rule (d): a candidate whose last index is lower is refused.
    out.clear();
    // Right when rule 0's protection ends (ET_min after the restart at 1 ms), before the
    // replica's own election deadline (drawn from [ET_min, 2 ET_min) after it).
    let later = Instant::from_millis(1001);
    r.on_message(
        later,
        NodeId(1),
        LogMessage::RequestVote { epoch: 2, last_index: LogIndex::new(1, 1) },
    );
    r.poll_effects(&mut out);
    assert!(out
        .event
        .iter()
        .any(|e| matches!(e, LogEvent::VoteRefused { reason: VoteRefusal::LessUpToDate, .. })));
    assert_eq!(r.voted_for(), None);
    // An up-to-date candidate gets the vote, sent only after the vote is persisted.
    out.clear();
    r.on_message(
        later,
        NodeId(2),
        LogMessage::RequestVote { epoch: 2, last_index: LogIndex::new(1, 2) },
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
        LogMessage::RequestVote { epoch: 2, last_index: LogIndex::new(1, 9) },
    );
    r.poll_effects(&mut out);
    assert!(out
        .event
        .iter()
        .any(|e| matches!(e, LogEvent::VoteRefused { reason: VoteRefusal::AlreadyVoted, .. })));
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
    assert_eq!(r.get(b"k"), (Some(Bytes::from_static(b"v")), LogIndex::new(1, 2)));
    assert_eq!(r.get(b"gone"), (None, LogIndex::new(2, 1)));
    assert_eq!(
        (r.persisted_index(), r.applied_index()),
        (LogIndex::new(2, 1), LogIndex::new(2, 1))
    );
    assert!(!r.is_serving(Instant::from_millis(2)));
    assert_eq!(r.durable_index(), LogIndex::ZERO);
    let ids = [NodeId(0), NodeId(1), NodeId(2)];
    let bad = RecoveredState { entries: vec![entry(1, 2), entry(1, 1)], ..Default::default() };
    assert!(LogReplica::recover(orca(), NodeId(0), &ids, bad, Instant::ZERO, 1).is_err());
}

/// A replay may apply entries the replica never applied before its crash (it applies every
/// entry on disk, §5.10): their transaction events are reported by the replay, not held back
/// until the replica next applies a transaction entry, which would misdate them.
#[test]
fn recovery_reports_the_replayed_transaction_entries_events_at_once() {
    use strata_wire::txn::{Prepare, TxnAction, TxnId, TxnObject, TxnOp};
    let txn = TxnId { client_id: 7, base: 1 };
    let key = Bytes::from_static(b"k");
    let prepare = Prepare {
        txn,
        all: vec![TxnObject { table: "t".into(), key: key.clone(), seq: 1 }],
        ops: vec![TxnOp { key, seq: 1, expect: None, action: TxnAction::Write(Bytes::new()) }],
        whole: false,
        kairos: None,
    };
    let mut e = entry(1, 2);
    (e.op, e.key, e.client_id, e.seq) = (LogOp::Prepare(Box::new(prepare)), Bytes::new(), 7, 0);
    let mut r = recovered(vec![entry(1, 1), e], 1);
    let mut out: LogEffects = Effects::default();
    r.poll_effects(&mut out);
    let voted: Vec<_> = out
        .event
        .iter()
        .filter_map(|e| match e {
            LogEvent::Txn(t) => Some(t.index()),
            _ => None,
        })
        .collect();
    assert_eq!(voted, [LogIndex::new(1, 2)]);
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
        clients: vec![crate::api::ClientRecords {
            client_id: 1,
            ack: 4,
            records: vec![(5, Completion::done(LogIndex::new(1, 5)))],
        }],
        expired: vec![9],
        ..Default::default()
    };
    let mut next = entry(2, 1);
    next.seq = 6;
    let state = RecoveredState {
        hard_state: HardState { epoch: 2, voted_for: Some(NodeId(1)) },
        snapshot: Some(snapshot),
        entries: vec![next],
    };
    let r =
        LogReplica::recover(orca(), NodeId(0), &ids, state, Instant::from_millis(1), 3).unwrap();
    assert_eq!(r.get(b"a"), (Some(Bytes::from_static(b"1")), LogIndex::new(1, 3)));
    assert_eq!(r.get(b"k").1, LogIndex::new(2, 1));
    // The snapshot's watermark and record survive, and the entry after it adds its record.
    let rpc = |seq| RpcId { client_id: 1, seq };
    assert_eq!(r.write_record(rpc(4)), Verdict::Stale);
    assert_eq!(r.write_record(rpc(5)), Verdict::Completed(Completion::done(LogIndex::new(1, 5))));
    assert_eq!(r.write_record(rpc(6)), Verdict::Completed(Completion::done(LogIndex::new(2, 1))));
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
    let (token, _) = out
        .persist
        .iter()
        .find(|(_, p)| matches!(p, Persist::HardState(_)))
        .expect("vote for itself persisted");
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

// ---- exactly-once writes (rifl.md §5.3, R-D23) on one core ----
//
// A one-replica group: the leader is its own majority, so every rule of the write path runs
// without a network. Cluster scenarios (leader changes, retries across them) are in
// `strata-sim` (`crates/sim/tests/orca_rifl.rs`).

/// Drives a core: each step runs `f`, then makes every persist record durable at once.
struct Solo {
    r: LogReplica,
    now: Instant,
    out: LogEffects,
    replies: Vec<LogReply>,
    events: Vec<LogEvent>,
    /// While set, persist records stay unsynced (a slow disk); `release` syncs them.
    hold: bool,
    unsynced: Option<u64>,
    next_token: u64,
}

impl Solo {
    fn new(state: RecoveredState) -> Solo {
        let now = Instant::from_millis(1);
        let r = LogReplica::recover(orca(), NodeId(0), &[NodeId(0)], state, now, 9).unwrap();
        let mut s = Solo {
            r,
            now,
            out: Effects::default(),
            replies: Vec::new(),
            events: Vec::new(),
            hold: false,
            unsynced: None,
            next_token: 1,
        };
        s.drain();
        for _ in 0..5000 {
            if s.r.is_ready_leader(s.now) {
                return s;
            }
            s.advance(1);
        }
        panic!("a one-replica group elects itself");
    }

    /// A one-replica group under Sync durability: nothing applies before its fsync, so a held
    /// disk keeps entries appended and pending.
    fn sync() -> Solo {
        let mut s = Solo::new(RecoveredState::default());
        let now = Instant::from_millis(1);
        let (config, me, state) = (LogConfig::strong_zk(), NodeId(0), RecoveredState::default());
        s.r = LogReplica::recover(config, me, &[me], state, now, 9).unwrap();
        s.now = now;
        for _ in 0..5000 {
            if s.r.is_ready_leader(s.now) {
                return s;
            }
            s.advance(1);
        }
        panic!("a one-replica group elects itself");
    }

    fn drain(&mut self) {
        self.r.poll_effects(&mut self.out);
        let last = self.out.persist.iter().map(|(t, _)| *t).max();
        self.replies.append(&mut self.out.reply);
        self.events.append(&mut self.out.event);
        self.out.clear();
        self.unsynced = self.unsynced.max(last);
        if !self.hold {
            self.release();
        }
    }

    fn release(&mut self) {
        self.hold = false;
        if let Some(t) = self.unsynced.take() {
            self.r.on_persisted(self.now, t);
            self.drain();
        }
    }

    fn advance(&mut self, ms: u64) {
        self.now += std::time::Duration::from_millis(ms);
        self.r.on_tick(self.now);
        self.drain();
        self.r.check_invariants();
    }

    /// Sends a write with this envelope; returns its reply, if one came before `advance`.
    fn write(&mut self, rifl: Rifl, value: &'static str) -> Option<Result<WriteAck, WriteError>> {
        let token = self.next_token;
        self.next_token += 1;
        let req = LogRequest::Write {
            token,
            rifl,
            key: Bytes::from_static(b"k"),
            op: WriteOp::Put(Bytes::from_static(value.as_bytes())),
            immediate: false,
        };
        self.r.on_client_request(self.now, req);
        self.drain();
        self.r.check_invariants();
        self.reply(token)
    }

    fn reply(&self, token: u64) -> Option<Result<WriteAck, WriteError>> {
        self.replies.iter().find_map(|r| match r {
            LogReply::Write { token: t, result } if *t == token => Some(result.clone()),
            _ => None,
        })
    }

    fn executed(&self) -> Vec<(LogIndex, u64)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                LogEvent::Executed { index, seq, .. } => Some((*index, *seq)),
                _ => None,
            })
            .collect()
    }

    /// What a restart would read back: every entry (all were made durable).
    fn disk(&self) -> RecoveredState {
        RecoveredState {
            hard_state: self.r.hard_state(),
            snapshot: None,
            entries: self.r.entries().to_vec(),
        }
    }
}

fn env(seq: u64, first_incomplete: u64) -> Rifl {
    Rifl {
        rpc: RpcId { client_id: 7, seq },
        first_incomplete,
        lease: LeaseInfo {
            client_id: 7,
            expiration: ClusterTime(u64::MAX),
            timestamp: ClusterTime(1),
        },
    }
}

fn writes_of(r: &LogReplica, seq: u64) -> usize {
    r.entries().iter().filter(|e| e.client_id == 7 && e.seq == seq).count()
}

#[test]
fn a_retry_after_apply_gets_the_same_index_and_appends_nothing() {
    let mut s = Solo::new(RecoveredState::default());
    let first = s.write(env(1, 1), "a").expect("async: acked at once").unwrap();
    let last = s.r.last_index();
    let again = s.write(env(1, 1), "a").expect("answered from the record").unwrap();
    assert_eq!(again, first);
    assert_eq!(s.r.last_index(), last, "no new entry");
    assert_eq!(writes_of(&s.r, 1), 1);
    assert_eq!(s.r.write_record(env(1, 1).rpc), Verdict::Completed(Completion::done(first.index)));
    assert_eq!(s.executed(), vec![(first.index, 1)]);
}

#[test]
fn a_retry_while_in_flight_waits_for_the_first_entry() {
    // Sync durability: a write is answered once its entry is fsynced, so with the disk held a
    // retry arrives while the first attempt is in flight.
    let mut s = Solo::sync();
    s.hold = true;
    assert_eq!(s.write(env(1, 1), "a"), None, "waits for the fsync");
    assert_eq!(s.write(env(1, 1), "a"), None, "the retry waits too");
    assert_eq!(writes_of(&s.r, 1), 1, "the retry is not appended again");
    s.release();
    let (a, b) = (s.reply(1), s.reply(2));
    assert!(matches!(a, Some(Ok(_))), "{a:?}");
    assert_eq!(a, b, "both answers carry the same index");
    assert_eq!(s.executed().iter().filter(|(_, q)| *q == 1).count(), 1);
}

#[test]
fn a_stale_retry_is_refused_after_a_later_write_acknowledged_it() {
    let mut s = Solo::new(RecoveredState::default());
    s.write(env(1, 1), "a").unwrap().unwrap();
    let second = s.write(env(2, 2), "b").unwrap().unwrap();
    assert_eq!(s.r.client_ack(7), 1, "learned from the applied entry of seq 2");
    let last = s.r.last_index();
    assert_eq!(s.write(env(1, 1), "a"), Some(Err(WriteError::Stale)));
    assert_eq!(s.r.last_index(), last, "nothing appended");
    assert_eq!(s.r.get(b"k").1, second.index);
    // An RPC never seen but below the watermark is stale too (it can only be a duplicate).
    assert_eq!(s.r.write_record(env(1, 1).rpc), Verdict::Stale);
}

#[test]
fn records_and_watermarks_survive_a_restart_and_a_snapshot() {
    let mut s = Solo::new(RecoveredState::default());
    let a = s.write(env(1, 1), "a").unwrap().unwrap();
    let b = s.write(env(2, 1), "b").unwrap().unwrap();
    let c = s.write(env(3, 3), "c").unwrap().unwrap(); // acknowledges 1 and 2
    let _ = (a, b);
    let disk = s.disk();
    let snapshot = s.r.applied_snapshot();
    // Replay of the log.
    let mut t = Solo::new(disk);
    assert_eq!(t.r.client_ack(7), 2);
    assert_eq!(t.write(env(2, 1), "b"), Some(Err(WriteError::Stale)), "the watermark survived");
    assert_eq!(t.write(env(3, 3), "c"), Some(Ok(c)), "the record survived");
    assert_eq!(writes_of(&t.r, 3), 1);
    // The replay reports the same effective entries as the first run.
    let first: Vec<u64> = s.executed().iter().map(|(_, q)| *q).collect();
    let replayed: Vec<u64> = t.executed().iter().map(|(_, q)| *q).collect();
    assert_eq!(first, vec![1, 2, 3]);
    assert_eq!(replayed, first);
    // Recovery from the applied snapshot alone (no log after it).
    let state = RecoveredState {
        hard_state: s.r.hard_state(),
        snapshot: Some(snapshot),
        entries: Vec::new(),
    };
    let mut u = Solo::new(state);
    assert_eq!(u.r.client_ack(7), 2);
    assert_eq!(u.write(env(1, 1), "a"), Some(Err(WriteError::Stale)));
    assert_eq!(u.write(env(3, 3), "c"), Some(Ok(c)));
}

#[test]
fn the_same_rpc_appended_twice_executes_once_at_replay_and_at_a_follower() {
    let put = |epoch, counter, seq, v: &'static str| LogEntry {
        index: LogIndex::new(epoch, counter),
        key: Bytes::from_static(b"k"),
        op: LogOp::Put(Bytes::from_static(v.as_bytes())),
        client_id: 7,
        seq,
        ack: 0,
        immediate: false,
    };
    let noop = |epoch| LogEntry { op: LogOp::NoOp, client_id: 0, seq: 0, ..put(epoch, 1, 0, "") };
    // Epoch 1 wrote seq 1; a leader of epoch 2 appended seq 1 again (as a leader that skipped
    // the duplicate check would) after another write.
    let log = vec![noop(1), put(1, 2, 1, "a"), noop(2), put(2, 2, 2, "b"), put(2, 3, 1, "a")];
    let r = recovered(log.clone(), 2);
    assert_eq!(r.get(b"k"), (Some(Bytes::from_static(b"b")), LogIndex::new(2, 2)));
    assert_eq!(
        r.write_record(RpcId { client_id: 7, seq: 1 }),
        Verdict::Completed(Completion::done(LogIndex::new(1, 2)))
    );
    // A follower that receives the entries from the leader decides the same.
    let mut f = recovered(log[..2].to_vec(), 1);
    let mut out: LogEffects = Effects::default();
    f.poll_effects(&mut out);
    out.clear();
    f.on_message(
        Instant::from_millis(3000),
        NodeId(1),
        LogMessage::AppendEntries(strata_wire::log::AppendEntries {
            epoch: 2,
            prev_index: LogIndex::new(1, 2),
            entries: log[2..].to_vec(),
            commit_index: LogIndex::new(2, 3),
            durable_index: LogIndex::ZERO,
            flush_upto: None,
            round_id: None,
            hb_round: 1,
            grant: Default::default(),
        }),
    );
    f.poll_effects(&mut out);
    assert_eq!(f.applied_index(), LogIndex::new(2, 3));
    assert_eq!(f.get(b"k"), r.get(b"k"));
    let executed: Vec<LogIndex> = out
        .event
        .iter()
        .filter_map(|e| match e {
            LogEvent::Executed { index, .. } => Some(*index),
            _ => None,
        })
        .collect();
    assert_eq!(executed, vec![LogIndex::new(2, 2)], "the second entry of seq 1 changes nothing");
}

#[test]
fn envelope_violations_and_doubtful_leases_are_refused_without_effect() {
    let mut s = Solo::new(RecoveredState::default());
    let last = s.r.last_index();
    for (e, what) in [
        (env(5, 6), "first_incomplete above seq"),
        (env(600, 1), "beyond the window"),
        (Rifl { rpc: RpcId { client_id: 0, seq: 1 }, ..env(1, 1) }, "client id 0"),
        (
            Rifl { lease: LeaseInfo { client_id: 8, ..env(1, 1).lease }, ..env(1, 1) },
            "another client's lease",
        ),
    ] {
        assert!(matches!(s.write(e, "x"), Some(Err(WriteError::BadEnvelope(_)))), "{what}");
    }
    assert_eq!(s.r.last_index(), last);
    assert_eq!(s.r.client_ack(7), 0, "a refused envelope acknowledges nothing");
    // A lease whose expiration is not beyond the observed cluster time: retryable, not run.
    let mut expired = env(1, 1);
    expired.lease.expiration = ClusterTime(50);
    expired.lease.timestamp = ClusterTime(60);
    assert_eq!(s.write(expired, "x"), Some(Err(WriteError::Unavailable)));
    assert_eq!(s.r.last_index(), last);
    // The same RPC with a renewed lease executes.
    assert!(matches!(s.write(env(1, 1), "x"), Some(Ok(_))));
    // ...and a duplicate of a completed RPC is answered even with an old lease (§5.4).
    assert!(matches!(s.write(expired, "x"), Some(Ok(_))));
}

// ---- shard moves (rifl.md §5.7) ----

impl Solo {
    fn freeze(&mut self, to: &ShardMove) -> Option<Result<crate::api::Snapshot, WriteError>> {
        let token = self.next_token;
        self.next_token += 1;
        self.r.on_client_request(self.now, LogRequest::Freeze { token, to: to.clone() });
        self.drain();
        self.r.check_invariants();
        self.replies.iter().find_map(|r| match r {
            LogReply::Frozen { token: t, result } if *t == token => Some(result.clone()),
            _ => None,
        })
    }

    fn read(&mut self) -> Option<Result<crate::api::ReadValue, ReadError>> {
        let token = self.next_token;
        self.next_token += 1;
        self.r.on_client_request(
            self.now,
            LogRequest::Read {
                token,
                key: Bytes::from_static(b"k"),
                min_index: None,
                intent: strata_wire::txn::ReadIntent::Plain,
            },
        );
        self.drain();
        self.replies.iter().find_map(|r| match r {
            LogReply::Read { token: t, result } if *t == token => Some(result.clone()),
            _ => None,
        })
    }
}

#[test]
fn a_moved_shard_takes_its_records_and_watermarks_along() {
    let mut s = Solo::new(RecoveredState::default());
    let a = s.write(env(1, 1), "a").unwrap().unwrap();
    let b = s.write(env(2, 2), "b").unwrap().unwrap(); // acknowledges seq 1
    let to = ShardMove { generation: 1, replicas: vec![NodeId(4)] };
    let snapshot = s.freeze(&to).expect("answered").expect("frozen");
    assert!(snapshot.last_included > b.index);
    assert_eq!(snapshot.clients.len(), 1);
    assert_eq!(
        (snapshot.clients[0].ack, snapshot.clients[0].records.clone()),
        (1, vec![(2, Completion::done(b.index))])
    );
    // Idempotent for the same destination; another destination learns where the shard goes.
    assert_eq!(s.freeze(&to), Some(Ok(snapshot.clone())));
    let elsewhere = ShardMove { generation: 1, replicas: vec![NodeId(5)] };
    assert_eq!(s.freeze(&elsewhere), Some(Err(WriteError::Moved { replicas: vec![NodeId(4)] })));
    // The old group executes nothing more and serves no read: the new group owns the key.
    let last = s.r.last_index();
    let moved = Some(Err(WriteError::Moved { replicas: vec![NodeId(4)] }));
    assert_eq!(s.write(env(3, 3), "c"), moved);
    assert_eq!(s.write(env(2, 2), "b"), moved, "a retry goes to the new group too");
    assert_eq!(s.r.last_index(), last, "nothing appended after the freeze");
    assert_eq!(s.read(), Some(Err(ReadError::Moved { replicas: vec![NodeId(4)] })));
    // The new group starts from the frozen state.
    let mut t = Solo::new(RecoveredState::moved_in(snapshot));
    assert_eq!(t.r.get(b"k"), (Some(Bytes::from_static(b"b")), b.index));
    assert_eq!(t.write(env(2, 2), "b"), Some(Ok(b)), "the retry finds its record after the move");
    assert_eq!(t.write(env(1, 1), "a"), Some(Err(WriteError::Stale)), "the watermark moved too");
    let c = t.write(env(3, 3), "c").unwrap().unwrap();
    assert!(
        c.index > b.index && c.index.epoch > a.index.epoch + 1,
        "new indexes are above the old group's"
    );
    assert_eq!(
        t.executed().iter().map(|(_, q)| *q).collect::<Vec<_>>(),
        vec![3],
        "only the new write executed"
    );
    // The new group's disk replays to the same state.
    let u = Solo::new(t.disk());
    assert_eq!(u.r.get(b"k"), t.r.get(b"k"));
    assert_eq!(u.r.write_record(env(3, 3).rpc), Verdict::Completed(Completion::done(c.index)));
    assert_eq!(u.r.write_record(env(2, 2).rpc), Verdict::Stale, "seq 3 acknowledged seq 2");
}

/// Kairos watermarks at a shard's leader (kairos.md §5.9, `kairos_wm`'s docs): a shard's
/// first leader takes reports at once; a leader that succeeds others — restarted from its
/// log, or a moved shard's new group — answers `WM` `ZERO` and raises no `ts_GC` until every
/// member of its predecessors has had `REPORT_TIMEOUT` to report to it.
#[test]
fn only_a_shards_first_leader_raises_kairos_watermarks_from_its_first_reports() {
    use crate::kairos_wm::REPORT_TIMEOUT;
    let ts = |n| Timestamp::new(n, 0);
    let mut s = Solo::new(RecoveredState::default());
    assert_eq!(s.report(7, 1, ts(100), ts(50)), (ts(100), ts(50)), "the first leader");
    s.write(env(1, 1), "a").unwrap().unwrap();
    let restarted = Solo::new(s.disk());
    let to = ShardMove { generation: 1, replicas: vec![NodeId(4)] };
    let moved = Solo::new(RecoveredState::moved_in(s.freeze(&to).unwrap().unwrap()));
    for (what, mut t) in [("restarted", restarted), ("moved in", moved)] {
        assert_eq!(t.report(7, 2, ts(200), ts(150)), (Timestamp::ZERO, ts(0)), "{what}");
        t.advance(REPORT_TIMEOUT.as_millis() as u64);
        assert_eq!(t.report(7, 3, ts(300), ts(250)), (ts(300), ts(250)), "{what}, complete");
    }
}

/// kairos.md §5.9, membership is the live clients: once the lease service says leases
/// expired, the leader drops their watermark reports at once — of a client that wrote here
/// (an `Expire` entry collects it, and a late report under its lease is not taken) and of
/// one that only reported — so `WM` and `ts_GC` follow the other client at its next report,
/// long before `REPORT_TIMEOUT`.
#[test]
fn an_expired_clients_watermark_report_goes_at_once() {
    let ts = |n| Timestamp::new(n, 0);
    let mut s = Solo::new(RecoveredState::default());
    s.write(env(1, 1), "a").unwrap().unwrap(); // client 7 holds a record here
    assert_eq!(s.report(7, 1, ts(100), ts(50)), (ts(100), ts(50)));
    assert_eq!(s.report(8, 1, ts(300), ts(250)), (ts(100), ts(50)));
    assert_eq!(s.report(9, 1, ts(200), ts(150)), (ts(100), ts(50)), "9 only reports");
    let now = s.now;
    assert!(s.r.expire_clients(now, &[7, 9]), "an Expire entry for 7");
    s.advance(1);
    assert_eq!(s.write(env(2, 2), "b"), Some(Err(WriteError::ExpiredLease)), "7 collected");
    assert_eq!(s.report(8, 2, ts(310), ts(260)), (ts(310), ts(260)), "7 and 9 are gone");
    let late = s.report(7, 2, ts(100), ts(50));
    assert_eq!(late, (ts(310), ts(260)), "a late report under 7's expired lease");
}

impl Solo {
    /// `client`'s Kairos watermark report: the leader's answer `(WM, ts_GC)`.
    fn report(
        &mut self,
        client: u64,
        seq: u64,
        local_wm: Timestamp,
        c_freshness: Timestamp,
    ) -> (Timestamp, Timestamp) {
        let token = self.next_token;
        self.next_token += 1;
        let req = LogRequest::KairosReport { token, client, seq, local_wm, c_freshness };
        self.r.on_client_request(self.now, req);
        self.drain();
        self.replies
            .iter()
            .find_map(|r| match r {
                LogReply::Txn { token: t, result: Ok(TxnAnswer::Watermarks { wm, ts_gc }) }
                    if *t == token =>
                {
                    Some((*wm, *ts_gc))
                }
                _ => None,
            })
            .expect("a report is answered at once")
    }
}

#[test]
fn a_write_appended_before_the_freeze_applies_and_one_after_it_does_not() {
    // Entries of a deposed leader after a `Freeze` change nothing at replay.
    let put = |counter, seq| LogEntry {
        index: LogIndex::new(1, counter),
        key: Bytes::from_static(b"k"),
        op: LogOp::Put(Bytes::from(format!("v{seq}"))),
        client_id: 7,
        seq,
        ack: 0,
        immediate: false,
    };
    let freeze = LogEntry {
        op: LogOp::Freeze(ShardMove { generation: 1, replicas: vec![NodeId(1)] }),
        client_id: 0,
        seq: 0,
        ..put(3, 0)
    };
    let r = recovered(vec![put(1, 1), put(2, 2), freeze, put(4, 3)], 1);
    assert_eq!(r.get(b"k"), (Some(Bytes::from_static(b"v2")), LogIndex::new(1, 2)));
    assert_eq!(r.write_record(RpcId { client_id: 7, seq: 3 }), Verdict::New);
}

#[test]
fn a_shard_too_large_to_move_is_refused_before_it_freezes() {
    let mut s = Solo::new(RecoveredState::default());
    let big: &'static str = Box::leak("x".repeat(1 << 20).into_boxed_str());
    for seq in 1..=16 {
        let token = s.next_token;
        s.next_token += 1;
        let key = Bytes::from(format!("k{seq}"));
        let op = WriteOp::Put(Bytes::from_static(big.as_bytes()));
        s.r.on_client_request(
            s.now,
            LogRequest::Write { token, rifl: env(seq, seq), key, op, immediate: false },
        );
        s.drain();
        assert!(matches!(s.reply(token), Some(Ok(_))));
    }
    let to = ShardMove { generation: 1, replicas: vec![NodeId(4)] };
    assert!(matches!(s.freeze(&to), Some(Err(WriteError::Invalid(_)))));
    assert!(s.r.moved_to().is_none(), "not frozen");
    assert!(matches!(s.write(env(17, 17), "still writable"), Some(Ok(_))));
}

/// rifl.md §7 inv. 9 across a move: a client the old group collected as expired stays
/// expired in the new group (the expired set travels with the state).
#[test]
fn a_client_expired_before_a_move_stays_expired_after_it() {
    let mut s = Solo::new(RecoveredState::default());
    assert!(matches!(s.write(env(1, 1), "a"), Some(Ok(_))));
    let now = s.now;
    assert!(s.r.expire_clients(now, &[7]));
    s.drain();
    s.advance(10);
    let to = ShardMove { generation: 1, replicas: vec![NodeId(4)] };
    let snapshot = s.freeze(&to).expect("answered").expect("frozen");
    assert_eq!(snapshot.expired, vec![7]);
    let mut t = Solo::new(RecoveredState::moved_in(snapshot));
    assert_eq!(t.write(env(2, 2), "b"), Some(Err(WriteError::ExpiredLease)));
    assert!(t.executed().is_empty(), "nothing executed for the expired client");
}

/// The instant of the first election a replica starts, ticking it at each of its own deadlines
/// up to `within` after `now`.
fn first_election(
    r: &mut LogReplica,
    now: Instant,
    within: std::time::Duration,
) -> Option<Instant> {
    let mut out: LogEffects = Effects::default();
    while let Some(t) = r.poll_timeout().filter(|t| *t <= now + within) {
        r.on_tick(t);
        r.poll_effects(&mut out);
        if out.event.iter().any(|e| matches!(e, LogEvent::ElectionStarted { .. })) {
            return Some(t);
        }
        out.clear();
    }
    None
}

/// rifl.md §5.7 step 3 [FIX]: a new-group replica that adopted the move without its state
/// (an empty log) never stands for election; one that holds the `Install` entry does.
#[test]
fn a_moved_in_replica_without_the_state_does_not_stand_for_election() {
    let ids = [NodeId(0), NodeId(1), NodeId(2)];
    let start = Instant::from_millis(1);
    let empty = || {
        LogReplica::recover(orca(), NodeId(0), &ids, RecoveredState::default(), start, 5).unwrap()
    };
    let mut waiting = empty();
    waiting.await_install();
    let long = std::time::Duration::from_secs(5);
    assert_eq!(first_election(&mut waiting, start, long), None, "no election with an empty log");
    let mut normal = empty();
    assert!(first_election(&mut normal, start, long).is_some(), "without the rule it stands");
}

/// Preferred leaders (`LogReplica::prefer_leader`): the preferred replica's first election
/// comes before every other replica's, and never sooner than ET_min.
#[test]
fn the_preferred_replica_stands_first_and_not_before_et_min() {
    let ids = [NodeId(0), NodeId(1), NodeId(2)];
    let start = Instant::from_millis(1);
    let et_min = orca().election_timeout_min;
    for seed in 0..20 {
        let at = |me: u32| {
            let mut r = LogReplica::recover(
                orca(),
                NodeId(me),
                &ids,
                RecoveredState::default(),
                start,
                seed,
            )
            .unwrap();
            r.prefer_leader(start, NodeId(1));
            first_election(&mut r, start, et_min * 3).expect("it stands eventually")
        };
        let (preferred, others) = (at(1), [at(0), at(2)]);
        assert!(preferred >= start + et_min, "seed {seed}: not before ET_min");
        assert!(others.iter().all(|o| *o > preferred), "seed {seed}: {preferred:?} vs {others:?}");
    }
}

/// Issue 17: one forged `VoteResp` at epoch `u32::MAX` used to be adopted and persisted by
/// every replica (no election could follow without wrapping). Epochs at the ceiling, or
/// further ahead than `MAX_EPOCH_JUMP`, are counted and dropped; nothing is persisted.
#[test]
fn an_impossible_epoch_from_a_peer_is_dropped_without_effect() {
    use crate::replica::{EPOCH_CEILING, MAX_EPOCH_JUMP};
    let mut r = recovered(vec![entry(1, 1)], 1);
    let mut out: LogEffects = Effects::default();
    let now = Instant::from_millis(10);
    for epoch in [u32::MAX, EPOCH_CEILING, 1 + MAX_EPOCH_JUMP + 1] {
        r.on_message(now, NodeId(1), LogMessage::VoteResp { epoch, granted: true });
        r.on_message(
            now,
            NodeId(1),
            LogMessage::RequestVote { epoch, last_index: LogIndex::new(9, 9) },
        );
    }
    r.poll_effects(&mut out);
    assert_eq!(r.stats().bad_messages, 6);
    assert_eq!(r.epoch(), 1, "no epoch adopted");
    assert!(out.persist.is_empty() && out.send.is_empty() && out.send_after_persist.is_empty());
    // A genuine jump (a replica that missed elections) is adopted as before.
    r.on_message(
        now,
        NodeId(1),
        LogMessage::VoteResp { epoch: 1 + MAX_EPOCH_JUMP, granted: false },
    );
    assert_eq!(r.epoch(), 1 + MAX_EPOCH_JUMP);
}

// ---- the peer frame limit (issue #17 item 5) ----

/// A leader packs `AppendEntries` by the entries' encoded sizes and never past the peer frame
/// limit, however large `max_batch_bytes` is: several maximal entries travel in several
/// messages, each of which fits in one frame, and all of them arrive in order. (Before, a
/// batch was bounded only by `max_batch_bytes` with an estimated size, so a node configured
/// with a frame limit below 1 MiB sent batches its transport dropped, and the shard stopped.)
#[test]
fn batches_split_at_the_peer_frame_limit() {
    use strata_wire::peer::PeerMessage;
    let max_message = 300 << 10;
    let mut cfg = orca();
    cfg.max_message_bytes = max_message;
    let value = Bytes::from(vec![7u8; 100 << 10]);
    let mut log = vec![LogEntry { op: LogOp::NoOp, ..entry(1, 1) }];
    for counter in 2..=9 {
        log.push(LogEntry { op: LogOp::Put(value.clone()), ..entry(1, counter) });
    }
    let last = LogIndex::new(1, 9);
    let ids = [NodeId(0), NodeId(1), NodeId(2)];
    let state = RecoveredState {
        hard_state: HardState { epoch: 1, voted_for: None },
        snapshot: None,
        entries: log,
    };
    let mut r =
        LogReplica::recover(cfg, NodeId(0), &ids, state, Instant::from_millis(1), 5).unwrap();
    let mut out: LogEffects = Effects::default();
    // Elect it (as in `deadlines_passed_over_by_inputs_fire_without_a_tick`).
    let mut now = Instant::from_millis(2_100);
    r.on_tick(now);
    r.poll_effects(&mut out);
    let (token, _) = *out.persist.iter().find(|(_, p)| matches!(p, Persist::HardState(_))).unwrap();
    r.on_persisted(now, token);
    r.on_message(now, NodeId(1), LogMessage::VoteResp { epoch: 2, granted: true });
    assert_eq!(r.role(), Role::Leader);
    r.poll_effects(&mut out);
    out.clear();
    let ack = |success: bool, at: LogIndex| {
        LogMessage::AppendAck(strata_wire::log::AppendAck {
            epoch: 2,
            success,
            last_index: at,
            match_index: if success { at } else { LogIndex::ZERO },
            persisted_index: if success { at } else { LogIndex::ZERO },
            applied_index: if success { at } else { LogIndex::ZERO },
            hb_round: 0,
            round_id: None,
            f_ts: 0,
            serving: false,
            revoke_ack: None,
        })
    };
    // Node 1 holds nothing: the leader backs up and sends it the whole log, batch by batch.
    r.on_message(now, NodeId(1), ack(false, LogIndex::ZERO));
    let mut received = Vec::new();
    let mut messages = 0;
    for _ in 0..100 {
        r.poll_effects(&mut out);
        let sends: Vec<_> = out
            .send
            .drain(..)
            .filter_map(|(to, m)| match m {
                LogMessage::AppendEntries(a) if to == NodeId(1) && !a.entries.is_empty() => Some(a),
                _ => None,
            })
            .collect();
        out.clear();
        let Some(a) = sends.into_iter().next() else { break };
        messages += 1;
        let mut frame = bytes::BytesMut::new();
        let wrapped = PeerMessage::Shard {
            table: 1,
            shard: 0,
            generation: 0,
            msg: LogMessage::AppendEntries(a.clone()),
        };
        strata_wire::encode_frame(&mut frame, strata_wire::ClusterId(1), &wrapped);
        assert!(
            frame.len() <= max_message,
            "an AppendEntries of {} entries takes {} bytes, above the {max_message}-byte frame limit",
            a.entries.len(),
            frame.len()
        );
        let upto = a.entries.last().unwrap().index;
        received.extend(a.entries.into_iter().map(|e| e.index));
        now += std::time::Duration::from_millis(1);
        r.on_message(now, NodeId(1), ack(true, upto));
    }
    // The whole log, in order: the old epoch's entries, then the new leader's NoOp.
    let mut expected: Vec<LogIndex> = (1..=9).map(|c| LogIndex::new(1, c)).collect();
    expected.push(LogIndex::new(2, 1));
    assert_eq!(received, expected, "every entry, in order");
    assert!(received.contains(&last));
    assert!(messages >= 4, "eight 100 KiB entries need several 300 KiB messages, got {messages}");
}

/// The core refuses a write whose entry could never fit in one peer message (its own guard
/// behind the host's `ValueTooLarge`), so a write it accepts can always replicate.
#[test]
fn a_write_larger_than_one_peer_message_is_refused() {
    let mut s = Solo::new(RecoveredState::default());
    let max_entry = s.r.config().max_entry_bytes();
    let token = 99;
    let too_big = Bytes::from(vec![1u8; max_entry]);
    s.r.on_client_request(
        s.now,
        LogRequest::Write {
            token,
            rifl: env(1, 1),
            key: Bytes::from_static(b"k"),
            op: WriteOp::Put(too_big),
            immediate: false,
        },
    );
    s.drain();
    assert!(matches!(s.reply(token), Some(Err(WriteError::Invalid(_)))), "{:?}", s.reply(token));
    assert!(s.r.entries().iter().all(|e| e.client_id != 7), "nothing was appended");
    // The refusal acknowledged nothing: the same RPC with a value that fits is written.
    assert!(s.write(env(1, 1), "small").expect("async: acked at once").is_ok());
    assert_eq!(writes_of(&s.r, 1), 1);
}

/// What a replica just sent and asked to persist: the `persisted_index` of every ack, and the
/// token of a `Sync`, if any.
fn acks_and_flush(r: &mut LogReplica) -> (Vec<LogIndex>, Option<u64>) {
    let mut out: LogEffects = Effects::default();
    r.poll_effects(&mut out);
    let acks = out
        .send
        .iter()
        .filter_map(|(_, m)| match m {
            LogMessage::AppendAck(a) => Some(a.persisted_index),
            _ => None,
        })
        .collect();
    let sync = out.persist.iter().find(|(_, p)| matches!(p, Persist::Sync)).map(|(t, _)| *t);
    (acks, sync)
}

/// A Sync-persistence follower acknowledges new entries once, when their fsync completes
/// (§5.3 step 7, §5.6), not also on arrival; a message opening a new heartbeat round is
/// acknowledged at once all the same, so the leader's lease never waits on this disk (§5.8).
#[test]
fn a_sync_follower_acks_entries_after_their_fsync_and_heartbeat_rounds_at_once() {
    use strata_wire::log::{AppendEntries, Grant};
    let ids = [NodeId(0), NodeId(1), NodeId(2)];
    let hard_state = HardState { epoch: 1, voted_for: None };
    let empty = RecoveredState { hard_state, snapshot: None, entries: vec![] };
    let now = Instant::from_millis(1);
    let mut r =
        LogReplica::recover(LogConfig::strong_zk(), NodeId(0), &ids, empty, now, 5).unwrap();
    let deliver = |r: &mut LogReplica, counter: u32, hb_round: u64| {
        let m = AppendEntries {
            epoch: 1,
            prev_index: if counter == 1 { LogIndex::ZERO } else { LogIndex::new(1, counter - 1) },
            entries: vec![entry(1, counter)],
            commit_index: LogIndex::ZERO,
            durable_index: LogIndex::ZERO,
            flush_upto: None,
            round_id: None,
            hb_round,
            grant: Grant { member: false, echo_ts: None, revoke_echo: None },
        };
        r.on_message(now, NodeId(1), LogMessage::AppendEntries(m));
        acks_and_flush(r)
    };
    // A new heartbeat round: acknowledged on arrival, and its flush starts.
    let (acks, first_flush) = deliver(&mut r, 1, 1);
    assert_eq!(acks, vec![LogIndex::ZERO]);
    let first_flush = first_flush.expect("Sync persistence flushes at once");
    // More entries in the same round while the flush runs: no ack until a flush covers them.
    let (acks, none) = deliver(&mut r, 2, 1);
    assert!(acks.is_empty() && none.is_none(), "acked {acks:?} before the fsync");
    // The first flush completes: its ack, and the flush of entry 2 starts.
    r.on_persisted(now, first_flush);
    let (acks, second_flush) = acks_and_flush(&mut r);
    assert_eq!(acks, vec![LogIndex::new(1, 1)]);
    assert!(second_flush.is_some());
    // A new heartbeat round while that flush runs (a slow disk): acknowledged at once.
    let (acks, _) = deliver(&mut r, 3, 2);
    assert_eq!(acks, vec![LogIndex::new(1, 1)]);
}

// ---- the leader's foresight (`foresight.rs`) ----

impl Solo {
    /// A read of `k`; `foresee`: a transaction's.
    fn read_k(&mut self, foresee: bool) -> Option<Result<crate::api::ReadValue, ReadError>> {
        let intent = if foresee { ReadIntent::Txn } else { ReadIntent::Plain };
        let token = self.send_read_k(intent);
        self.read_reply(token)
    }

    /// Sends a read of `k` with `intent`; returns its token.
    fn send_read_k(&mut self, intent: ReadIntent) -> u64 {
        let token = self.next_token;
        self.next_token += 1;
        let key = Bytes::from_static(b"k");
        self.r
            .on_client_request(self.now, LogRequest::Read { token, key, min_index: None, intent });
        self.drain();
        token
    }

    fn read_reply(&self, token: u64) -> Option<Result<crate::api::ReadValue, ReadError>> {
        self.replies.iter().find_map(|r| match r {
            LogReply::Read { token: t, result } if *t == token => Some(result.clone()),
            _ => None,
        })
    }

    /// A prepare of client 7's transaction `base` on `k` expecting `version`: a single-participant
    /// read-modify-write writing `value`, or (`None`) a read-only validation. Returns its token.
    fn prepare_k(&mut self, base: u64, version: LogIndex, value: Option<&'static str>) -> u64 {
        self.prepare_k_with(base, version, value, true)
    }

    /// [`prepare_k`](Self::prepare_k); with `whole` false, one participant of a transaction
    /// over several shards (its lock waits for a decision).
    fn prepare_k_with(
        &mut self,
        base: u64,
        version: LogIndex,
        value: Option<&'static str>,
        whole: bool,
    ) -> u64 {
        use strata_wire::log::Expect;
        use strata_wire::txn::{Prepare, TxnAction, TxnId, TxnObject, TxnOp};
        let token = self.next_token;
        self.next_token += 1;
        let key = Bytes::from_static(b"k");
        let action = value.map_or(TxnAction::Read, |v| TxnAction::Write(Bytes::from(v)));
        let op =
            TxnOp { key: key.clone(), seq: base, expect: Some(Expect::Version(version)), action };
        let prepare = Prepare {
            txn: TxnId { client_id: 7, base },
            all: vec![TxnObject { table: "t".into(), key, seq: base }],
            ops: vec![op],
            whole,
            kairos: None,
        };
        let (rifl, read_only) = (env(base, 2), value.is_none());
        self.r.on_client_request(self.now, LogRequest::Prepare { token, rifl, prepare, read_only });
        self.drain();
        self.r.check_invariants();
        token
    }

    /// The decision of client 7's transaction `base` on `k`; returns its token.
    fn decide_k(&mut self, base: u64, decision: strata_wire::txn::Decision) -> u64 {
        use strata_wire::txn::TxnId;
        let token = self.next_token;
        self.next_token += 1;
        let txn = TxnId { client_id: 7, base };
        let request = LogRequest::Decide { token, txn, decision, seqs: vec![base] };
        self.r.on_client_request(self.now, request);
        self.drain();
        self.r.check_invariants();
        token
    }

    fn txn_reply(&self, token: u64) -> Option<Result<TxnAnswer, WriteError>> {
        self.replies.iter().find_map(|r| match r {
            LogReply::Txn { token: t, result } if *t == token => Some(result.clone()),
            _ => None,
        })
    }
}

/// A read of a key locked by a participant's prepare waits for the decision; a `Commit`
/// answers it once appended, with the value and version its apply will leave (`foresight.rs`),
/// an `Abort` only once applied. A plain read waits for the apply either way.
#[test]
fn a_transaction_read_of_a_locked_key_sees_what_a_pending_commit_decision_will_leave() {
    use strata_wire::txn::{Decision, Vote};
    let mut s = Solo::sync();
    assert!(matches!(s.write(env(1, 1), "a"), Some(Ok(_))));
    let v0 = s.read_k(false).unwrap().unwrap().update_index;
    let p1 = s.prepare_k_with(2, v0, Some("b"), false);
    let voted = Some(Ok(TxnAnswer::Votes { votes: vec![(2, Vote::Prepared)], decided: false }));
    assert_eq!(s.txn_reply(p1), voted, "locked, waiting for the decision");
    let waiting = s.send_read_k(ReadIntent::Txn);
    assert_eq!(s.read_reply(waiting), None, "the lock holds the read back");
    // The disk stalls: the decision is appended, not applied.
    s.hold = true;
    let d1 = s.decide_k(2, Decision::Commit);
    let v1 = s.r.last_index();
    assert_eq!(s.txn_reply(d1), None, "waits for its fsync");
    let foreseen = s.read_reply(waiting).expect("answered at the append").unwrap();
    assert_eq!((foreseen.value.as_deref(), foreseen.update_index), (Some(&b"b"[..]), v1));
    let plain = s.send_read_k(ReadIntent::Plain);
    assert_eq!(s.read_reply(plain), None, "a plain read still waits for the apply");
    s.release();
    assert!(s.txn_reply(d1).is_some());
    let applied = s.read_reply(plain).unwrap().unwrap();
    assert_eq!((applied.value.as_deref(), applied.update_index), (Some(&b"b"[..]), v1));

    // An `Abort` leaves the key as it was: the read waits until the decision applies.
    let p2 = s.prepare_k_with(3, v1, Some("c"), false);
    assert!(s.txn_reply(p2).is_some());
    let waiting = s.send_read_k(ReadIntent::Txn);
    s.hold = true;
    s.decide_k(3, Decision::Abort);
    assert_eq!(s.read_reply(waiting), None, "an abort is not foreseen");
    s.release();
    let after = s.read_reply(waiting).expect("answered at the apply").unwrap();
    assert_eq!((after.value.as_deref(), after.update_index), (Some(&b"b"[..]), v1));
}

#[test]
fn a_transaction_read_sees_what_a_pending_single_participant_prepare_will_leave() {
    use strata_wire::txn::{AbortReason, Vote};
    let mut s = Solo::sync();
    assert!(matches!(s.write(env(1, 1), "a"), Some(Ok(_))));
    let v0 = s.read_k(false).unwrap().unwrap().update_index;
    // The disk stalls: a read-modify-write of `k` is appended, not applied.
    s.hold = true;
    let p1 = s.prepare_k(2, v0, Some("b"));
    assert_eq!(s.txn_reply(p1), None, "waits for its fsync");
    let v1 = s.r.last_index();
    // A plain read answers the applied value; a transaction's read what the prepare leaves.
    let plain = s.read_k(false).unwrap().unwrap();
    assert_eq!((plain.value.as_deref(), plain.update_index), (Some(&b"a"[..]), v0));
    let foreseen = s.read_k(true).unwrap().unwrap();
    assert_eq!((foreseen.value.as_deref(), foreseen.update_index), (Some(&b"b"[..]), v1));
    assert_eq!(s.r.stats().reads_foreseen, 1);
    // A prepare that read the value before waits, unappended: that `b`'s entry applies is only
    // foreseen (a new leader could drop it), so its `Conflict` is final only once it has.
    let stale = s.prepare_k(3, v0, Some("x"));
    assert_eq!((s.txn_reply(stale), s.r.last_index()), (None, v1));
    // A read-only validation of the foreseen version waits for its entry instead of voting
    // `Conflict` against the applied state; a prepare that read it is appended behind it.
    let ro = s.prepare_k(4, v1, None);
    let p2 = s.prepare_k(5, v1, Some("c"));
    assert_eq!((s.txn_reply(ro), s.txn_reply(p2)), (None, None));
    s.release();
    let votes = |seq| vec![(seq, Vote::Prepared)];
    assert_eq!(s.txn_reply(p1), Some(Ok(TxnAnswer::Votes { votes: votes(2), decided: true })));
    let conflict = |seq| vec![(seq, Vote::Abort(AbortReason::Conflict))];
    let stale_reply = Some(Ok(TxnAnswer::Votes { votes: conflict(3), decided: true }));
    assert_eq!(s.txn_reply(stale), stale_reply);
    let ro_reply = Some(Ok(TxnAnswer::Votes { votes: votes(4), decided: false }));
    assert_eq!(s.txn_reply(ro), ro_reply, "validated once `b`'s entry applied");
    let p2_reply = Some(Ok(TxnAnswer::Votes { votes: votes(5), decided: true }));
    assert_eq!(s.txn_reply(p2), p2_reply, "its read of the foreseen version validates");
    assert_eq!(s.r.stats().prepares_foreseen_aborted, 1, "the stale one, without an entry");
    // Once the applied version is past the one read, the `Conflict` is final: answered at
    // once, with no entry.
    let last = s.r.last_index();
    let late = s.prepare_k(6, v1, Some("y"));
    let late_reply = Some(Ok(TxnAnswer::Votes { votes: conflict(6), decided: true }));
    assert_eq!((s.txn_reply(late), s.r.last_index()), (late_reply, last));
    assert_eq!(s.r.stats().prepares_foreseen_aborted, 2);
    assert_eq!(s.read_k(false).unwrap().unwrap().value.as_deref(), Some(&b"c"[..]));
}

#[test]
fn a_plain_write_pending_on_the_key_makes_a_transaction_read_wait_for_it() {
    let mut s = Solo::sync();
    assert!(matches!(s.write(env(1, 1), "a"), Some(Ok(_))));
    s.hold = true;
    assert_eq!(s.write(env(2, 2), "b"), None, "pending");
    // Its effect is not foreseen (a plain write is evaluated at apply): the read waits.
    assert_eq!(s.read_k(true), None);
    s.release();
    let read = s.replies.iter().rev().find_map(|r| match r {
        LogReply::Read { result, .. } => Some(result.clone()),
        _ => None,
    });
    assert_eq!(read.unwrap().unwrap().value.as_deref(), Some(&b"b"[..]));
    assert_eq!(s.r.stats().reads_foreseen, 0);
}

// ---- reads for update (`reservations.rs`) ----

/// A read for update holds the key's next read for update back until a prepare naming the
/// key arrives, and that read is then answered with what the prepare will leave: the two
/// read-modify-writes queue instead of both reading `a` and one aborting. A plain
/// transaction read ignores the reservation.
#[test]
fn a_read_for_update_waits_for_the_prepare_of_the_one_before_it() {
    use strata_wire::txn::Vote;
    let mut s = Solo::sync();
    assert!(matches!(s.write(env(1, 1), "a"), Some(Ok(_))));
    let first = s.send_read_k(ReadIntent::TxnForUpdate { reserver: 1 });
    let v0 = s.read_reply(first).unwrap().unwrap().update_index;
    let second = s.send_read_k(ReadIntent::TxnForUpdate { reserver: 2 });
    assert_eq!(s.read_reply(second), None, "held back by the first one's reservation");
    assert_eq!(s.r.stats().reads_held, 1);
    let plain_txn_read = s.read_k(true).unwrap().unwrap();
    assert_eq!(plain_txn_read.update_index, v0, "a transaction's plain read is not held");
    // The first transaction's prepare arrives (its fsync held): the second read is answered
    // with the value it will leave, and the second prepare, reading it, commits after it.
    s.hold = true;
    let p1 = s.prepare_k(2, v0, Some("b"));
    let v1 = s.r.last_index();
    let read = s.read_reply(second).expect("answered at the prepare's arrival").unwrap();
    assert_eq!((read.value.as_deref(), read.update_index), (Some(&b"b"[..]), v1));
    let p2 = s.prepare_k(3, v1, Some("c"));
    s.release();
    let votes =
        |seq| Some(Ok(TxnAnswer::Votes { votes: vec![(seq, Vote::Prepared)], decided: true }));
    assert_eq!((s.txn_reply(p1), s.txn_reply(p2)), (votes(2), votes(3)));
    assert_eq!(s.read_k(false).unwrap().unwrap().value.as_deref(), Some(&b"c"[..]));
}

/// A reservation whose prepare never comes (the transaction was given up, or reads another
/// key the waiting one holds) lapses after `txn_read_hold`, and the held read is answered
/// then, woken by the core's own deadline.
#[test]
fn a_reservation_without_a_prepare_lapses_after_the_hold() {
    let mut s = Solo::sync();
    assert!(matches!(s.write(env(1, 1), "a"), Some(Ok(_))));
    let hold = s.r.config().txn_read_hold;
    let first = s.send_read_k(ReadIntent::TxnForUpdate { reserver: 1 });
    assert!(s.read_reply(first).is_some());
    let held_at = s.now;
    let held = s.send_read_k(ReadIntent::TxnForUpdate { reserver: 2 });
    assert_eq!(s.read_reply(held), None);
    // Only the core's own deadlines move time on.
    while s.read_reply(held).is_none() {
        let wake = s.r.poll_timeout().expect("a deadline");
        assert!(wake <= held_at + hold, "the hold's end is a deadline, at {wake:?}");
        s.now = wake;
        s.r.on_tick(wake);
        s.drain();
    }
    assert_eq!(s.now, held_at + hold, "answered when the hold ended");
    assert_eq!(s.read_reply(held).unwrap().unwrap().value.as_deref(), Some(&b"a"[..]));
}

/// A transaction dropped after its read for update releases the key (`reserver` names it):
/// the read held back by its reservation is answered at once, not when the hold ends. A
/// release by another transaction, or after the key was reserved again, frees nothing.
#[test]
fn a_dropped_transaction_releases_its_reservation() {
    let mut s = Solo::sync();
    assert!(matches!(s.write(env(1, 1), "a"), Some(Ok(_))));
    let first = s.send_read_k(ReadIntent::TxnForUpdate { reserver: 7 });
    assert!(s.read_reply(first).is_some());
    let held = s.send_read_k(ReadIntent::TxnForUpdate { reserver: 8 });
    assert_eq!(s.release_reservations(&["k"], 9), 1, "answered, whatever it releases");
    assert_eq!(s.read_reply(held), None, "another transaction's release frees nothing");
    s.release_reservations(&["k"], 7);
    let read = s.read_reply(held).expect("answered at the release, the clock unmoved");
    assert_eq!(read.unwrap().value.as_deref(), Some(&b"a"[..]));
    // The key is reserved by the second reader now: the first one's late release is void.
    let third = s.send_read_k(ReadIntent::TxnForUpdate { reserver: 10 });
    s.release_reservations(&["k"], 7);
    assert_eq!(s.read_reply(third), None, "still the second reader's");
}

// ---- reads of several keys (`LogRequest::ReadMany`) ----

impl Solo {
    /// Releases `reserver`'s reservations of `keys`; returns how many answers came.
    fn release_reservations(&mut self, keys: &[&'static str], reserver: u64) -> usize {
        let token = self.next_token;
        self.next_token += 1;
        let keys = keys.iter().map(|k| Bytes::from_static(k.as_bytes())).collect();
        let req = LogRequest::ReleaseReservations { token, keys, reserver };
        self.r.on_client_request(self.now, req);
        self.drain();
        let answered =
            |r: &&LogReply| matches!(r, LogReply::ReservationsReleased { token: t } if *t == token);
        self.replies.iter().filter(answered).count()
    }

    /// Sends a read of `keys` with `intent`; returns its token.
    fn send_read_many(&mut self, keys: &[&'static str], intent: ReadIntent) -> u64 {
        let token = self.next_token;
        self.next_token += 1;
        let keys = keys.iter().map(|k| Bytes::from_static(k.as_bytes())).collect();
        let req = LogRequest::ReadMany { token, keys, min_index: None, intent };
        self.r.on_client_request(self.now, req);
        self.drain();
        token
    }

    fn read_many_reply(&self, token: u64) -> Option<Result<Vec<crate::api::ReadValue>, ReadError>> {
        self.replies.iter().find_map(|r| match r {
            LogReply::ReadMany { token: t, result } if *t == token => Some(result.clone()),
            _ => None,
        })
    }
}

/// A read of several keys answers each in the request's order, a transaction's with what a
/// pending transaction will leave, and a key never written as absent.
#[test]
fn a_read_of_several_keys_answers_each_in_order() {
    let mut s = Solo::sync();
    assert!(matches!(s.write(env(1, 1), "a"), Some(Ok(_))));
    let token = s.send_read_many(&["absent", "k"], ReadIntent::Plain);
    let values = s.read_many_reply(token).expect("answered").expect("served");
    let got: Vec<_> = values.iter().map(|v| v.value.as_deref()).collect();
    assert_eq!(got, vec![None, Some(&b"a"[..])]);
    assert_eq!(values[0].update_index, LogIndex::ZERO);
    // A pending single-participant transaction's value answers a transaction's read.
    let v0 = values[1].update_index;
    s.hold = true;
    s.prepare_k(2, v0, Some("b"));
    let pending = s.r.last_index();
    let token = s.send_read_many(&["k", "absent"], ReadIntent::Txn);
    let values = s.read_many_reply(token).expect("foreseen at once").expect("served");
    assert_eq!((values[0].value.as_deref(), values[0].update_index), (Some(&b"b"[..]), pending));
    // A plain read answers what is applied: the pending transaction is not decided yet.
    let plain = s.send_read_many(&["absent", "k"], ReadIntent::Plain);
    let values = s.read_many_reply(plain).expect("answered").expect("served");
    assert_eq!(values[1].value.as_deref(), Some(&b"a"[..]));
    s.release();
    let plain = s.send_read_many(&["absent", "k"], ReadIntent::Plain);
    let values = s.read_many_reply(plain).expect("answered").expect("served");
    assert_eq!(values[1].value.as_deref(), Some(&b"b"[..]));
}

/// Reads for update of several keys take their reservations together: one that waits for a
/// key holds none of the others, so a transaction reading those others first goes on (with
/// reads of one key at a time, each holding one key and waiting for the other's, both would
/// wait out the hold).
#[test]
fn reads_for_update_of_several_keys_reserve_them_together() {
    let mut s = Solo::sync();
    assert!(matches!(s.write(env(1, 1), "a"), Some(Ok(_))));
    let first = s.send_read_k(ReadIntent::TxnForUpdate { reserver: 1 }); // reserves "k"
    assert!(s.read_reply(first).is_some());
    let both = s.send_read_many(&["j", "k"], ReadIntent::TxnForUpdate { reserver: 2 });
    assert_eq!(s.read_many_reply(both), None, "held back by the reservation of k");
    let j = s.send_read_many(&["j"], ReadIntent::TxnForUpdate { reserver: 3 });
    assert!(s.read_many_reply(j).is_some(), "j is not reserved by a read still waiting");
    // The first transaction's prepare releases k; j stays reserved by the second read of j.
    let v0 = s.read_reply(first).unwrap().unwrap().update_index;
    s.prepare_k(2, v0, Some("b"));
    assert_eq!(s.read_many_reply(both), None, "j is reserved now");
    let hold = s.r.config().txn_read_hold;
    s.now += hold;
    s.r.on_tick(s.now);
    s.drain();
    let values = s.read_many_reply(both).expect("answered once j's hold lapsed").expect("served");
    assert_eq!(values[1].value.as_deref(), Some(&b"b"[..]));
}
