//! Every checker on hand-made histories: a good one it must accept, and known-bad ones it must
//! flag (`DESIGN.md`: a checker that cannot fail proves nothing).

use std::collections::BTreeMap;

use bytes::Bytes;
use strata_sim::check::{self, completion, convergence, replica, session, versions, Violation};
use strata_sim::history::{
    Anomaly, Creation, FinalState, History, Op, OpKind, Outcome, ReplicaChange, Value, Witness,
};
use strata_wire::{Carstamp, Instant, Llc, NodeId, SessionId};

fn sess(node: u32, index: u32) -> SessionId {
    SessionId { node: NodeId(node), index }
}

fn cs(ver: u64, node: u32) -> Carstamp {
    Carstamp { llc: Llc { ver, node: NodeId(node) }, pno: 0 }
}

fn val(s: &str) -> Value {
    Some(Bytes::copy_from_slice(s.as_bytes()))
}

fn key(k: &str) -> Bytes {
    Bytes::copy_from_slice(k.as_bytes())
}

/// What one live replica holds at the end: `(key, value, cs)`.
type Held<'a> = &'a [(&'a str, Value, Carstamp)];

/// Builds histories one event at a time; times and completion orders advance by themselves.
#[derive(Default)]
struct Builder {
    h: History,
    clock: u64,
    next_pos: BTreeMap<SessionId, u64>,
}

impl Builder {
    fn tick(&mut self) -> Instant {
        self.clock += 1_000;
        Instant(self.clock)
    }

    fn op(&mut self, s: SessionId, kind: OpKind, k: &str, outcome: Option<Witness>) -> &mut Self {
        let pos = self.next_pos.entry(s).or_insert(0);
        let p = *pos;
        *pos += 1;
        let invoke = self.tick();
        let order = self.h.ops.len() as u64;
        let outcome = match outcome {
            Some(witness) => Outcome::Done { at: self.tick(), order, witness },
            None => Outcome::Pending,
        };
        self.h.ops.push(Op {
            session: s,
            pos: p,
            node: s.node,
            kind,
            key: key(k),
            invoke,
            outcome,
            relocated: false,
        });
        self
    }

    /// A completed write (or delete, for `None`) with its creation event.
    fn write(&mut self, s: SessionId, k: &str, v: Value, c: Carstamp) -> &mut Self {
        self.create(s, k, v.clone(), c);
        let kind = match v {
            Some(value) => OpKind::Write { value },
            None => OpKind::Delete,
        };
        self.op(s, kind, k, Some(Witness { observed: None, written: Some(c), swapped: false }))
    }

    fn create(&mut self, s: SessionId, k: &str, v: Value, c: Carstamp) -> &mut Self {
        let at = self.tick();
        self.h.creations.push(Creation {
            at,
            node: s.node,
            session: s,
            key: key(k),
            cs: c,
            value: v,
            rmw_id: None,
        });
        self
    }

    fn read(&mut self, s: SessionId, k: &str, v: Value, c: Carstamp) -> &mut Self {
        self.op(
            s,
            OpKind::Read,
            k,
            Some(Witness { observed: Some((v, c)), written: None, swapped: false }),
        )
    }

    fn held(&mut self, node: u32, k: &str, v: Value, c: Carstamp) -> &mut Self {
        let at = self.tick();
        let seq = self.h.replica_changes.len() as u64 + 1;
        self.h.replica_changes.push(ReplicaChange {
            seq,
            at,
            node: NodeId(node),
            key: key(k),
            value: v,
            cs: c,
            lc: 0,
        });
        self
    }

    fn finish(&mut self, live: &[(u32, Held<'_>)], crashed: &[u32]) -> &mut Self {
        let mut fin = FinalState::default();
        for (n, keys) in live {
            fin.live.push(NodeId(*n));
            let held = keys.iter().map(|(k, v, c)| (key(k), (v.clone(), *c))).collect();
            fin.replicas.insert(NodeId(*n), held);
        }
        fin.crashed = crashed.iter().map(|&n| NodeId(n)).collect();
        self.h.final_state = Some(fin);
        self
    }
}

#[track_caller]
fn assert_flags(found: Vec<Violation>, checker: &str, needle: &str) {
    assert!(!found.is_empty(), "{checker} must flag this history ({needle})");
    assert!(found.iter().all(|v| v.checker == checker), "{found:?}");
    assert!(
        found.iter().any(|v| v.detail.contains(needle)),
        "no violation mentions {needle:?}: {found:?}"
    );
}

#[track_caller]
fn assert_clean(found: Vec<Violation>) {
    assert!(found.is_empty(), "unexpected violations: {found:?}");
}

/// A correct history of two sessions on two nodes, used as the baseline for every checker.
fn good() -> Builder {
    let (a, b) = (sess(0, 0), sess(1, 0));
    let mut h = Builder::default();
    h.read(a, "x", None, Carstamp::ZERO)
        .write(a, "x", val("a1"), cs(1, 0))
        .held(0, "x", val("a1"), cs(1, 0))
        .read(a, "x", val("a1"), cs(1, 0))
        .write(b, "x", val("b1"), cs(2, 1))
        .held(1, "x", val("b1"), cs(2, 1))
        .held(0, "x", val("b1"), cs(2, 1))
        .read(a, "x", val("b1"), cs(2, 1))
        .write(a, "x", None, cs(3, 0))
        .held(0, "x", None, cs(3, 0))
        .held(1, "x", None, cs(3, 0))
        .read(b, "x", None, cs(3, 0))
        .write(b, "y", val("b2"), cs(1, 1))
        .held(1, "y", val("b2"), cs(1, 1))
        .held(0, "y", val("b2"), cs(1, 1));
    h.h.sessions = vec![a, b];
    h.h.heal_at = Some(Instant(0));
    let x = ("x", None, cs(3, 0));
    let y = ("y", val("b2"), cs(1, 1));
    h.finish(&[(0, &[x.clone(), y.clone()]), (1, &[x, y])], &[]);
    h
}

#[test]
fn every_checker_accepts_a_correct_history() {
    let h = good().h;
    assert_clean(check::run_checkers(&h, check::CHECKERS));
    assert_clean(check::run_checkers(&h, check::NOTES));
}

#[test]
fn version_uniqueness_flags_a_carstamp_created_twice() {
    let mut b = good();
    b.create(sess(1, 0), "x", val("other"), cs(2, 1));
    assert_flags(versions::version_uniqueness(&b.h), "version-uniqueness", "created twice");
}

#[test]
fn version_uniqueness_flags_a_write_without_its_creation() {
    let mut b = good();
    let w = Witness { observed: None, written: Some(cs(9, 0)), swapped: false };
    b.op(sess(0, 0), OpKind::Write { value: Bytes::from_static(b"ghost") }, "x", Some(w));
    assert_flags(versions::version_uniqueness(&b.h), "version-uniqueness", "no creation event");
}

#[test]
fn version_uniqueness_flags_a_write_claiming_anothers_version_or_value() {
    let mut b = good();
    // Session 0 reports the version session 1 created.
    let w = Witness { observed: None, written: Some(cs(2, 1)), swapped: false };
    b.op(sess(0, 0), OpKind::Write { value: Bytes::from_static(b"b1") }, "x", Some(w));
    assert_flags(versions::version_uniqueness(&b.h), "version-uniqueness", "was created by n1/s0");
    let mut b = good();
    b.create(sess(0, 0), "z", val("real"), cs(1, 0));
    let w = Witness { observed: None, written: Some(cs(1, 0)), swapped: false };
    b.op(sess(0, 0), OpKind::Write { value: Bytes::from_static(b"claimed") }, "z", Some(w));
    assert_flags(
        versions::version_uniqueness(&b.h),
        "version-uniqueness",
        "was created with \"real\"",
    );
}

#[test]
fn version_uniqueness_flags_a_plain_write_stamped_with_another_node() {
    let mut b = good();
    b.write(sess(0, 0), "z", val("v"), cs(4, 1));
    assert_flags(versions::version_uniqueness(&b.h), "version-uniqueness", "not stamped");
}

#[test]
fn version_uniqueness_flags_a_write_that_reports_no_version() {
    let mut b = good();
    b.op(sess(0, 0), OpKind::Delete, "x", Some(Witness::default()));
    assert_flags(versions::version_uniqueness(&b.h), "version-uniqueness", "without reporting");
}

#[test]
fn no_thin_air_flags_uncreated_versions_and_wrong_values() {
    let mut b = good();
    b.read(sess(1, 0), "x", val("never"), cs(7, 1));
    assert_flags(versions::no_thin_air(&b.h), "no-thin-air", "never created");
    let mut b = good();
    b.read(sess(1, 0), "x", val("a1-but-wrong"), cs(1, 0));
    assert_flags(versions::no_thin_air(&b.h), "no-thin-air", "was created with \"a1\"");
    let mut b = good();
    b.read(sess(1, 0), "fresh", val("something"), Carstamp::ZERO);
    assert_flags(versions::no_thin_air(&b.h), "no-thin-air", "at the initial version");
    let mut b = good();
    b.read(sess(1, 0), "x", val("tombstone-has-no-value"), cs(3, 0));
    assert_flags(versions::no_thin_air(&b.h), "no-thin-air", "created with absent");
}

#[test]
fn session_order_flags_a_read_older_than_the_sessions_own_write() {
    let mut b = good();
    // Session 0 wrote 3.0.0 on x; reading 2.1.0 afterwards goes back.
    b.read(sess(0, 0), "x", val("b1"), cs(2, 1));
    assert_flags(session::session_order(&b.h), "session-order", "observed 2.1.0, older than 3.0.0");
}

#[test]
fn session_order_flags_reads_going_backwards_and_writes_not_above_what_was_seen() {
    let s = sess(2, 0);
    let mut b = good();
    b.read(s, "x", None, cs(3, 0)).read(s, "x", val("a1"), cs(1, 0));
    assert_flags(
        session::session_order(&b.h),
        "session-order",
        "observed 1.0.0, older than 3.0.0, which its earlier #0 (read) saw or made",
    );
    let mut b = good();
    b.read(s, "x", None, cs(3, 0));
    b.write(s, "x", val("stale"), cs(2, 2));
    assert_flags(
        session::session_order(&b.h),
        "session-order",
        "created 2.2.0, not newer than 3.0.0",
    );
}

#[test]
fn session_order_does_not_relate_other_keys_or_sessions() {
    let mut b = good();
    // Older versions of another key, or seen by another session, are allowed (Kite §1.2).
    b.read(sess(0, 0), "y", None, Carstamp::ZERO).read(sess(3, 0), "x", val("a1"), cs(1, 0));
    assert_clean(session::session_order(&b.h));
}

#[test]
fn replies_in_session_order_flags_overtaking_and_completion_after_a_lost_op() {
    let mut b = good();
    // Swap the completion orders of session 0's first two operations.
    let (i, j) = (0, 1);
    let take = |o: &Outcome| match o {
        Outcome::Done { order, .. } => *order,
        _ => unreachable!(),
    };
    let (oi, oj) = (take(&b.h.ops[i].outcome), take(&b.h.ops[j].outcome));
    for (idx, new) in [(i, oj), (j, oi)] {
        if let Outcome::Done { order, .. } = &mut b.h.ops[idx].outcome {
            *order = new;
        }
    }
    assert_flags(
        session::replies_in_session_order(&b.h),
        "reply-order",
        "completed before the earlier #0",
    );
    let mut b = good();
    b.op(sess(0, 0), OpKind::Read, "x", None).read(sess(0, 0), "x", None, cs(3, 0));
    assert_flags(
        session::replies_in_session_order(&b.h),
        "reply-order",
        "the earlier #5 never did",
    ); // The same swap where the first operation was relocated (it took effect here, its reply
       // was lost, and it was answered later in another session, seed 914): not this session's
       // reply order.
    let mut b = good();
    let (oi, oj) = (take(&b.h.ops[i].outcome), take(&b.h.ops[j].outcome));
    for (idx, new) in [(i, oj), (j, oi)] {
        if let Outcome::Done { order, .. } = &mut b.h.ops[idx].outcome {
            *order = new;
        }
    }
    b.h.ops[i].relocated = true;
    assert_clean(session::replies_in_session_order(&b.h));
}

#[test]
fn replica_monotonic_flags_a_replica_going_back_or_changing_a_versions_value() {
    let mut b = good();
    b.held(1, "x", val("a1"), cs(1, 0));
    assert_flags(
        replica::replica_monotonic(&b.h),
        "replica-monotonic",
        "went back from 3.0.0 to 1.0.0",
    );
    let mut b = good();
    b.held(1, "y", val("b2-changed"), cs(1, 1));
    assert_flags(
        replica::replica_monotonic(&b.h),
        "replica-monotonic",
        "changed value at version 1.1.0",
    );
}

#[test]
fn replica_holds_created_versions_flags_thin_air_state() {
    let mut b = good();
    b.held(1, "x", val("from nowhere"), cs(8, 1));
    assert_flags(
        replica::replica_holds_created_versions(&b.h),
        "replica-thin-air",
        "never created",
    );
}

#[test]
fn convergence_flags_a_replica_missing_a_live_nodes_write() {
    let mut b = good();
    let stale: Held<'_> = &[("x", val("b1"), cs(2, 1)), ("y", val("b2"), cs(1, 1))];
    let fresh: Held<'_> = &[("x", None, cs(3, 0)), ("y", val("b2"), cs(1, 1))];
    b.finish(&[(0, fresh), (1, stale)], &[]);
    let found = convergence::convergence(&b.h);
    assert_flags(
        found.clone(),
        "convergence",
        "n1 holds 2.1.0 of key \"x\", below 3.0.0 created by live n0",
    );
    assert!(found.iter().any(|v| v.detail.contains("disagree")));
}

#[test]
fn convergence_flags_a_key_missing_at_one_replica() {
    let mut b = good();
    let both: Held<'_> = &[("x", None, cs(3, 0)), ("y", val("b2"), cs(1, 1))];
    let only_x: Held<'_> = &[("x", None, cs(3, 0))];
    b.finish(&[(0, both), (1, only_x)], &[]);
    assert_flags(convergence::convergence(&b.h), "convergence", "n1 holds 0.0.0 of key \"y\"");
}

#[test]
fn convergence_excuses_only_a_crashed_nodes_partially_delivered_write() {
    // n2 wrote y = "c" at 5.2.0, reached n0 only, then crashed: nobody re-sends it.
    let mut b = good();
    b.write(sess(2, 0), "y", val("c"), cs(5, 2));
    let x = ("x", None, cs(3, 0));
    let got: Held<'_> = &[x.clone(), ("y", val("c"), cs(5, 2))];
    let missed: Held<'_> = &[x, ("y", val("b2"), cs(1, 1))];
    b.finish(&[(0, got), (1, missed)], &[2]);
    assert_clean(convergence::convergence(&b.h));
    assert_flags(
        convergence::orphaned_divergence(&b.h),
        "orphaned-divergence",
        "created by a crashed node",
    );
    // The same divergence with n2 alive is a real violation: n2 must re-send until acked.
    let fin = b.h.final_state.as_mut().unwrap();
    fin.crashed.clear();
    fin.live.push(NodeId(2));
    fin.replicas.insert(NodeId(2), fin.replicas[&NodeId(0)].clone());
    assert_flags(convergence::convergence(&b.h), "convergence", "below 5.2.0 created by live n2");
    assert_clean(convergence::orphaned_divergence(&b.h));
}

#[test]
fn completion_flags_lost_and_failed_ops_and_stalled_sessions() {
    let mut b = good();
    b.op(sess(1, 0), OpKind::Read, "x", None);
    assert_flags(
        completion::completion(&b.h),
        "liveness",
        "never completed although its node is live",
    );
    // A pending op of a crashed node's session is expected (Kite §6: its outcome is unknown).
    let mut b = good();
    b.op(sess(2, 0), OpKind::Read, "x", None);
    b.h.final_state.as_mut().unwrap().crashed.push(NodeId(2));
    assert_clean(completion::completion(&b.h));
    let mut b = good();
    let at = b.tick();
    b.h.ops.push(Op {
        session: sess(0, 0),
        pos: 99,
        node: NodeId(0),
        kind: OpKind::Read,
        key: key("x"),
        invoke: at,
        outcome: Outcome::Failed { at, order: 99, error: "InvalidSession: gone".into() },
        relocated: false,
    });
    assert_flags(completion::completion(&b.h), "liveness", "failed: InvalidSession");
    let mut b = good();
    b.h.heal_at = Some(Instant(u64::MAX / 2));
    assert_flags(completion::completion(&b.h), "liveness", "completed no operation after healing");
}

#[test]
fn quiescence_flags_writes_still_pending_when_every_node_lives() {
    let mut b = good();
    b.h.final_state.as_mut().unwrap().pending_writes.insert(NodeId(1), 2);
    assert_flags(completion::quiescence(&b.h), "quiescence", "n1 still re-sends 2 write(s)");
    // With a crashed peer, records waiting for its ack stay forever, as they should.
    b.h.final_state.as_mut().unwrap().crashed.push(NodeId(2));
    assert_clean(completion::quiescence(&b.h));
}

#[test]
fn driver_anomalies_are_violations() {
    let mut b = good();
    b.h.anomalies.push(Anomaly {
        at: Instant(5),
        node: Some(NodeId(1)),
        what: "check_invariants failed: boom".into(),
    });
    assert_flags(check::driver_anomalies(&b.h), "driver", "n1: check_invariants failed: boom");
}

#[test]
fn run_checkers_orders_violations_by_time() {
    let mut b = good();
    b.h.anomalies.push(Anomaly { at: Instant(9_000_000), node: None, what: "late".into() });
    b.h.anomalies.push(Anomaly { at: Instant(1), node: None, what: "early".into() });
    b.held(1, "x", val("a1"), cs(1, 0));
    let all = check::run_checkers(&b.h, check::CHECKERS);
    assert!(all.len() >= 3);
    assert!(all
        .windows(2)
        .all(|w| w[0].at.unwrap_or(Instant::MAX) <= w[1].at.unwrap_or(Instant::MAX)));
    assert_eq!(all[0].detail, "early");
}
