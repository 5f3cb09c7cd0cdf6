//! The exactly-once checker (`check::rifl`, rifl.md §7 inv. 1, 2, 5, 8) on hand-made
//! histories: a correct retry it must accept, and known-bad ones it must flag (`DESIGN.md`:
//! every checker has a canary; the planted one is `ignore-completion-records`, `tests/swarm.rs`).

use bytes::Bytes;
use strata_sim::check::rifl::{exactly_once, exactly_once_plain};
use strata_sim::check::Violation;
use strata_sim::history::{
    Attempt, AttemptReply, CommitSeen, Creation, History, Op, OpKind, Outcome, Witness,
};
use strata_wire::{
    Carstamp, ClusterTime, Instant, LeaseInfo, Llc, NodeId, Rifl, RmwId, RpcId, SessionId,
};

fn sess(node: u32, index: u32) -> SessionId {
    SessionId { node: NodeId(node), index }
}

fn envelope(seq: u64, first_incomplete: u64) -> Rifl {
    let lease =
        LeaseInfo { client_id: 1, expiration: ClusterTime(u64::MAX), timestamp: ClusterTime(0) };
    Rifl { rpc: RpcId { client_id: 1, seq }, first_incomplete, lease }
}

fn num(n: u64) -> Option<Bytes> {
    Some(strata_wire::counter::encode(n))
}

fn written(cs: Carstamp) -> Witness {
    Witness { observed: None, written: Some(cs), swapped: false }
}

fn plain(ver: u64, node: u32) -> Carstamp {
    Carstamp { llc: Llc { ver, node: NodeId(node) }, pno: 0 }
}

fn reply(at: u64, result: Result<Witness, String>, lost: bool) -> Option<AttemptReply> {
    Some(AttemptReply { at: Instant(at), result, lost })
}

/// One operation and its sends: `(session, envelope, reply, rmw id)`.
fn op(
    h: &mut History,
    kind: OpKind,
    key: &str,
    outcome: Outcome,
    sends: Vec<(SessionId, Rifl, Option<AttemptReply>, Option<RmwId>)>,
) -> usize {
    let i = h.ops.len();
    let last = sends.last().expect("one send at least").0;
    h.ops.push(Op {
        session: last,
        pos: 0,
        node: last.node,
        kind,
        key: Bytes::copy_from_slice(key.as_bytes()),
        invoke: Instant(1),
        outcome,
        relocated: false,
    });
    for (n, (session, e, reply, rmw_id)) in sends.into_iter().enumerate() {
        h.attempts.push(Attempt {
            op: i,
            rifl: Some(e),
            session,
            pos: 0,
            node: session.node,
            sent: Instant(1 + n as u64),
            reply,
            rmw_id,
        });
    }
    i
}

fn create(
    h: &mut History,
    s: SessionId,
    key: &str,
    cs: Carstamp,
    value: Option<Bytes>,
    rmw_id: Option<RmwId>,
) {
    h.creations.push(Creation {
        at: Instant(5),
        node: s.node,
        session: s,
        key: Bytes::copy_from_slice(key.as_bytes()),
        cs,
        value,
        rmw_id,
    });
}

fn commit(h: &mut History, key: &str, slot: u32, id: RmwId, value: Option<Bytes>) {
    let cs = Carstamp { llc: Llc::ZERO, pno: slot };
    let seq = h.commits.len() as u64;
    h.commits.push(CommitSeen {
        seq,
        at: Instant(5),
        from: id.session.node,
        key: Bytes::copy_from_slice(key.as_bytes()),
        slot,
        rmw_id: id,
        value: value.clone(),
        cs,
    });
    create(h, id.session, key, cs, value, Some(id));
}

fn done(at: u64, w: Witness) -> Outcome {
    Outcome::Done { at: Instant(at), order: at, witness: w }
}

fn flags(found: Vec<Violation>, needle: &str) {
    assert!(found.iter().any(|v| v.detail.contains(needle)), "expected {needle:?} in {found:#?}");
}

/// A write whose reply was lost, re-sent at another node and answered from its record; an FAA
/// retried the same way.
fn good() -> History {
    let mut h = History::default();
    let (a, b) = (sess(0, 0), sess(1, 0));
    let v = Bytes::from_static(b"n0/s0#0");
    let cs = plain(1, 0);
    create(&mut h, a, "k", cs, Some(v.clone()), None);
    let sends = vec![
        (a, envelope(1, 1), reply(5, Ok(written(cs)), true), None),
        (b, envelope(1, 1), reply(9, Ok(written(cs)), false), None),
    ];
    op(&mut h, OpKind::Write { value: v }, "k", done(9, written(cs)), sends);
    let id = RmwId { session: a, seq: 1 };
    commit(&mut h, "c", 1, id, num(3));
    let w = Witness {
        observed: Some((None, Carstamp::ZERO)),
        written: Some(Carstamp { llc: Llc::ZERO, pno: 1 }),
        swapped: false,
    };
    let sends = vec![
        (a, envelope(2, 1), reply(6, Ok(w.clone()), true), Some(id)),
        (b, envelope(2, 2), reply(10, Ok(w.clone()), false), None),
    ];
    op(&mut h, OpKind::Faa { delta: 3 }, "c", done(10, w), sends);
    h
}

#[test]
fn a_retry_answered_from_its_record_is_one_effect() {
    let h = good();
    assert_eq!(exactly_once(&h), vec![]);
    assert_eq!(exactly_once_plain(&h), vec![]);
}

#[test]
fn an_faa_executed_by_two_sends_is_flagged_and_its_counter_counts_it_twice() {
    let mut h = good();
    // The retry found no record and ran Paxos again: a second slot, the counter at 6.
    let again = RmwId { session: sess(1, 0), seq: 1 };
    commit(&mut h, "c", 2, again, num(6));
    h.attempts[3].rmw_id = Some(again);
    let w2 = Witness {
        observed: Some((num(3), Carstamp { llc: Llc::ZERO, pno: 1 })),
        written: Some(Carstamp { llc: Llc::ZERO, pno: 2 }),
        swapped: false,
    };
    h.attempts[3].reply = reply(10, Ok(w2.clone()), false);
    h.ops[1].outcome = done(10, w2);
    let found = exactly_once(&h);
    flags(found.clone(), "took effect 2 times");
    flags(found.clone(), "answered differently");
    flags(found, "ends at 6, but the 1 FAAs that took effect add 3");
}

#[test]
fn a_plain_write_executed_twice_is_flagged_as_plain() {
    let mut h = good();
    let v = Bytes::from_static(b"n0/s0#0");
    create(&mut h, sess(1, 0), "k", plain(1, 1), Some(v), None);
    h.attempts[1].reply = reply(9, Ok(written(plain(1, 1))), false);
    let found = exactly_once_plain(&h);
    flags(found.clone(), "took effect 2 times: version 1.0.0, version 1.1.0");
    flags(found, "answered differently");
    assert_eq!(exactly_once(&h), vec![], "plain writes are the other checker's");
}

#[test]
fn stale_for_an_unacknowledged_rpc_and_envelopes_outside_the_window_are_flagged() {
    let mut h = good();
    h.attempts[3].reply = reply(10, Err("Stale".into()), false);
    h.ops[1].outcome =
        Outcome::Failed { at: Instant(10), order: 10, error: "Stale: acknowledged".into() };
    flags(exactly_once(&h), "answered Stale by n1 although its client never acknowledged it");
    let mut h = good();
    h.attempts[3].rifl = Some(envelope(2, 3));
    flags(exactly_once(&h), "first_incomplete is 0 or above seq");
    let mut h = good();
    h.attempts[3].rifl = Some(envelope(600, 2));
    h.attempts[2].rifl = Some(envelope(600, 2));
    flags(exactly_once(&h), "beyond the window");
}
