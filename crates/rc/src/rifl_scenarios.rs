//! Scenario tests of RIFL in the rc engine (`specs/rifl.md` §5.3, R-D23): a retry of a
//! linearizable RPC — at the same node or at another one, after the first attempt completed or
//! while it is still under way — never takes effect a second time and gets the first result.

use bytes::Bytes;
use strata_wire::client::{ErrorCode, Request, Response};
use strata_wire::peer::PeerMessage;
use strata_wire::NodeId;

use crate::testkit::{b, envelope, Net};

fn counter(net: &mut Net, node: usize, key: &str) -> u64 {
    let s = net.open(node);
    match net.call(node, Request::Acquire { session: s, key: b(key) }) {
        Response::Value { value, .. } => value_as_u64(value.as_deref()),
        other => panic!("{other:?}"),
    }
}

fn faa(session: strata_wire::SessionId, key: &str) -> Request {
    Request::Faa { session, key: b(key), delta: 1 }
}

fn error_code(r: Response) -> ErrorCode {
    match r {
        Response::Error { code, .. } => code,
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn rifl_rc_a_retried_faa_at_another_node_learns_the_record_through_paxos_and_adds_once() {
    let mut net = Net::new(3, |_| {});
    let s0 = net.open(0);
    // Node 1 never hears of the first attempt: it misses the accept, the commit and their
    // retransmissions (a quorum of 0 and 2 decides).
    let blind_1 = |_: NodeId, to: NodeId, m: &PeerMessage| {
        !(to == NodeId(1) && matches!(m, PeerMessage::Accept(_) | PeerMessage::Commit(_)))
    };
    // The first attempt completes with a quorum of 0 and 2.
    let first = net.call_rifl_filtered(0, Some(envelope(5, 1, 1)), faa(s0, "c"), blind_1);
    assert!(matches!(first, Response::Rmw { swapped: false, written: Some(_), .. }), "{first:?}");
    assert!(
        net.nodes[1].keys.get(&b("c")).is_none_or(|k| k.records.is_empty()),
        "node 1 must not know the record yet"
    );
    // The reply was lost; the client retries the same RPC at node 1, in a new session.
    let s1 = net.open(1);
    let retry = net.call_rifl(1, envelope(5, 1, 1), faa(s1, "c"));
    assert_eq!(retry, first, "the retry gets the first attempt's result");
    assert!(net.nodes[1].stats().rifl_duplicates >= 1);
    // The client's next increment sees exactly one earlier one.
    match net.call_rifl(1, envelope(5, 2, 2), faa(s1, "c")) {
        Response::Rmw { observed, .. } => assert_eq!(value_as_u64(observed.as_deref()), 1),
        other => panic!("{other:?}"),
    }
    assert_eq!(counter(&mut net, 2, "c"), 2);
}

#[test]
fn rifl_rc_two_nodes_racing_on_the_same_faa_apply_it_once_and_agree_on_its_result() {
    let mut net = Net::new(3, |_| {});
    let s0 = net.open(0);
    // Node 0's accepts never leave it: its attempt cannot be decided by itself.
    let no_accepts_from_0 = |from: NodeId, _: NodeId, m: &PeerMessage| {
        !(from == NodeId(0) && matches!(m, PeerMessage::Accept(_)))
    };
    let first = net.submit_rifl(0, Some(envelope(9, 1, 1)), faa(s0, "c"));
    for _ in 0..20 {
        net.advance_filtered(std::time::Duration::from_micros(500), no_accepts_from_0);
    }
    assert!(net.take(0, first).is_none(), "the first attempt is stuck");
    // The client gives up on node 0 (connection lost) and retries at node 1 while node 0 sleeps.
    net.paused[0] = true;
    let s1 = net.open(1);
    let retry = net.submit_rifl(1, Some(envelope(9, 1, 1)), faa(s1, "c"));
    let retried = net.run_until(1, retry);
    // Node 0 wakes up: its own attempt must find the record, not add a second time.
    net.paused[0] = false;
    let original = net.run_until(0, first);
    assert_eq!(original, retried, "both attempts answer with the one execution's result");
    assert_eq!(counter(&mut net, 2, "c"), 1, "one increment, not two");
}

#[test]
fn rifl_rc_a_retried_release_finds_its_record_in_the_read_ts_round() {
    let mut net = Net::new(3, |_| {});
    let s0 = net.open(0);
    // Node 1 never receives the release's value round (a quorum of 0 and 2 completes it).
    let blind_1 = |_: NodeId, to: NodeId, m: &PeerMessage| {
        !(to == NodeId(1) && matches!(m, PeerMessage::Write(_)))
    };
    let release = Request::Release { session: s0, key: b("flag"), value: b("v1") };
    let first = net.call_rifl_filtered(0, Some(envelope(3, 1, 1)), release, blind_1);
    let s1 = net.open(1);
    let retry = net.call_rifl(
        1,
        envelope(3, 1, 1),
        Request::Release { session: s1, key: b("flag"), value: b("v1") },
    );
    assert_eq!(retry, first, "same version: the retry wrote nothing");
    let (_, cs) = net.nodes[2].local(b"flag");
    assert_eq!(Response::Written { cs }, first, "no second version anywhere");
}

#[test]
fn rifl_rc_a_retried_relaxed_write_returns_its_version_and_an_acknowledged_one_is_stale() {
    let mut net = Net::new(3, |_| {});
    let s = net.open(0);
    let put = |v: &str| Request::Put {
        session: s,
        key: b("k"),
        value: Bytes::copy_from_slice(v.as_bytes()),
    };
    let first = net.call_rifl(0, envelope(4, 1, 1), put("a"));
    let again = net.call_rifl(0, envelope(4, 1, 1), put("a"));
    assert_eq!(first, again);
    // Another client wrote meanwhile; the retry of client 4's write must not overwrite it.
    let other = net.open(0);
    net.call_rifl(
        0,
        envelope(8, 1, 1),
        Request::Put { session: other, key: b("k"), value: b("b") },
    );
    net.deliver();
    assert_eq!(net.call_rifl(0, envelope(4, 1, 1), put("a")), first);
    assert_eq!(net.nodes[1].local(b"k").0, Some(b("b")), "the retry did not write again");
    // Client 4's next request acknowledges seq 1: a late duplicate of it is refused.
    net.call_rifl(0, envelope(4, 2, 2), put("c"));
    assert_eq!(error_code(net.call_rifl(0, envelope(4, 1, 1), put("a"))), ErrorCode::Stale);
    net.deliver();
    let at_2 = net.open(2);
    let late = net.call_rifl(
        2,
        envelope(4, 1, 1),
        Request::Put { session: at_2, key: b("k"), value: b("a") },
    );
    assert_eq!(
        error_code(late),
        ErrorCode::Stale,
        "node 2 learned the ack from the record that carried it"
    );
}

#[test]
fn rifl_rc_a_second_attempt_while_the_first_runs_is_told_in_progress_and_bad_envelopes_are_refused()
{
    let mut net = Net::new(3, |_| {});
    let (s, t) = (net.open(0), net.open(0));
    let rel = |session| Request::Release { session, key: b("x"), value: b("1") };
    let first = net.submit_rifl(0, Some(envelope(2, 1, 1)), rel(s));
    // Nothing is delivered: the first attempt is still running when the second arrives.
    let second = net.submit_rifl(0, Some(envelope(2, 1, 1)), rel(t));
    assert_eq!(error_code(net.take(0, second).expect("answered at once")), ErrorCode::InProgress);
    assert!(matches!(net.run_until(0, first), Response::Written { .. }));
    // first_incomplete above seq, and seq beyond the window of 512.
    for e in [envelope(2, 5, 6), envelope(2, 600, 1)] {
        assert_eq!(error_code(net.call_rifl(0, e, rel(t))), ErrorCode::BadEnvelope);
    }
}

#[test]
fn rifl_rc_the_sweep_collects_records_a_client_acknowledged_at_keys_it_never_writes_again() {
    let mut net = Net::new(3, |_| {});
    let s = net.open(0);
    for (seq, key) in [(1, "a"), (2, "b"), (3, "c")] {
        net.call_rifl(
            0,
            envelope(6, seq, seq),
            Request::Put { session: s, key: b(key), value: b("v") },
        );
    }
    net.deliver();
    // Seq 3's envelope acknowledged 1 and 2; after a sweep only c's record is left, everywhere.
    net.advance(std::time::Duration::from_millis(1100));
    for node in &net.nodes {
        let live = |k: &str| node.keys.get(&b(k)).map_or(0, |k| k.records.done.len());
        assert_eq!((live("a"), live("b"), live("c")), (0, 0, 1));
    }
    let at_1 = net.open(1);
    let late = net.call_rifl(
        1,
        envelope(6, 1, 1),
        Request::Put { session: at_1, key: b("a"), value: b("v") },
    );
    assert_eq!(
        error_code(late),
        ErrorCode::Stale,
        "a late duplicate after the collection is refused"
    );
}

/// Bounds (docs/design.md, "Limits and bounds"): failed CAS records hold the large value
/// they observed, and clients that do not acknowledge them leave them on the key. The node
/// refuses the next exactly-once CAS and put on the key with `Busy` (nothing done) before the
/// set could outgrow a peer frame, never sends a message beyond the frame limit, and takes
/// the key's mutations again once the records are acknowledged and collected.
#[test]
fn rifl_rc_a_key_full_of_unacknowledged_results_refuses_more_until_they_are_collected() {
    use strata_wire::{Encode, Limits, FRAME_SLACK_BYTES};
    let limits = Limits {
        max_value_bytes: 4096,
        max_frame_bytes: FRAME_SLACK_BYTES + 2 * 4096 + 4 * 20_000,
        ..Limits::default()
    };
    let mut net = Net::new(3, |cfg| cfg.limits = limits);
    let s = net.open(0);
    let big = Bytes::from(vec![7u8; 4000]);
    net.call(0, Request::Put { session: s, key: b("k"), value: big.clone() });
    let mut largest = 0;
    let mut measure = |_: NodeId, _: NodeId, m: &PeerMessage| {
        let mut buf = bytes::BytesMut::new();
        m.encode(&mut buf);
        largest = largest.max(buf.len());
        true
    };
    let cas = |session| Request::Cas {
        session,
        key: b("k"),
        expected: Some(b("other")),
        new: b("mine"),
        weak: false,
    };
    // Clients 1, 2, ... each fail one CAS and never acknowledge it.
    let mut refused = None;
    for client in 1..=10u64 {
        let r = net.call_rifl_filtered(0, Some(envelope(client, 1, 1)), cas(s), &mut measure);
        match r {
            Response::Rmw { swapped: false, observed: Some(v), .. } => assert_eq!(v, big),
            Response::Error { code: ErrorCode::Busy, .. } => {
                refused = Some(client);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    let refused = refused.expect("the key's records reach their bound within 10 clients");
    assert!(refused > 2, "the bound leaves room for a few large records (refused at {refused})");
    // A put's record is small: it still fits, until many unacknowledged ones fill the rest.
    let put = || Request::Put { session: s, key: b("k"), value: b("v") };
    let puts_taken = (100..1100u64)
        .take_while(|&c| {
            let r = net.call_rifl_filtered(0, Some(envelope(c, 1, 1)), put(), &mut measure);
            !matches!(r, Response::Error { code: ErrorCode::Busy, .. })
        })
        .count();
    assert!((1..1000).contains(&puts_taken), "puts fill the rest, then are refused: {puts_taken}");
    assert!(net.nodes[0].stats().rifl_busy >= 2);
    let k = &net.nodes[0].keys[&b("k")];
    assert!(k.records.encoded_len() <= super::records::budget(&limits, 3));
    // The clients acknowledge their CAS and puts (their next mutation's envelope says so); the
    // sweep collects them.
    for client in (1..refused).chain(100..101 + puts_taken as u64) {
        let s = net.open(0);
        let next = Request::Put { session: s, key: b("x"), value: b("v") };
        net.call_rifl(0, envelope(client, 2, 2), next);
    }
    net.advance(std::time::Duration::from_millis(1100));
    let again = net.call_rifl_filtered(0, Some(envelope(refused, 1, 1)), cas(s), &mut measure);
    assert!(matches!(again, Response::Rmw { swapped: false, .. }), "{again:?}");
    assert!(largest <= limits.max_frame_bytes, "{largest} bytes in one peer message");
}

/// A counter's value (decimal text, `strata_wire::counter`).
fn value_as_u64(v: Option<&[u8]>) -> u64 {
    strata_wire::counter::parse(v).expect("a counter")
}
