//! Named scenarios of the rc engine (`DESIGN.md` testing layer 2), each a hand-made run of the
//! spec's rules through the deterministic `testkit` network.

use std::collections::HashSet;

use bytes::Bytes;
use strata_wire::client::{Request, Response};
use strata_wire::peer::PeerMessage;
use strata_wire::{Carstamp, NodeId};

use crate::testkit::{b, Net};

fn written(r: Response) -> Carstamp {
    match r {
        Response::Written { cs } => cs,
        other => panic!("{other:?}"),
    }
}

fn value(r: Response) -> Option<Bytes> {
    match r {
        Response::Value { value, .. } => value,
        other => panic!("{other:?}"),
    }
}

#[test]
fn rc_release_then_acquire_elsewhere_sees_the_release_and_prior_writes() {
    let mut net = Net::new(3, |_| {});
    let p = net.open(0);
    let c = net.open(2);
    for i in 0..5 {
        net.call(
            0,
            Request::Put { session: p, key: b(&format!("field{i}")), value: b(&format!("v{i}")) },
        );
    }
    let rel =
        written(net.call(0, Request::Release { session: p, key: b("flag"), value: b("ready") }));
    let got = net.call(2, Request::Acquire { session: c, key: b("flag") });
    assert_eq!(got, Response::Value { value: Some(b("ready")), cs: rel });
    for i in 0..5 {
        let v = value(net.call(2, Request::Get { session: c, key: b(&format!("field{i}")) }));
        assert_eq!(
            v,
            Some(b(&format!("v{i}"))),
            "producer-consumer: fields before the release are visible"
        );
    }
    assert_eq!(
        net.nodes[0].stats().barriers_fast,
        1,
        "a healthy cluster releases on the fast path"
    );
}

#[test]
fn rc_release_with_one_replica_asleep_takes_the_slow_path_and_the_sleeper_catches_up() {
    let mut net = Net::new(3, |_| {});
    let p = net.open(0);
    let s = net.open(2);
    net.paused[2] = true;
    net.call(0, Request::Put { session: p, key: b("x"), value: b("1") });
    net.call(0, Request::Release { session: p, key: b("f"), value: b("1") });
    assert_eq!(net.nodes[0].stats().barriers_slow, 1, "the release published a DM-set");
    // The sleeper lost every message sent to it while asleep.
    net.wire.retain(|(_, to, _)| *to != NodeId(2));
    net.paused[2] = false;
    let f = value(net.call(2, Request::Acquire { session: s, key: b("f") }));
    assert_eq!(f, Some(b("1")));
    assert_eq!(
        net.nodes[2].stats().machine_epoch,
        1,
        "its acquire learned it is delinquent and bumped the epoch"
    );
    let x = value(net.call(2, Request::Get { session: s, key: b("x") }));
    assert_eq!(x, Some(b("1")), "the out-of-epoch key is read through the slow path");
    assert!(net.nodes[2].stats().slow_path_accesses >= 1);
    // Once refreshed, the key is served locally again.
    let before = net.nodes[2].stats().slow_path_accesses;
    value(net.call(2, Request::Get { session: s, key: b("x") }));
    assert_eq!(net.nodes[2].stats().slow_path_accesses, before);
}

#[test]
fn rc_concurrent_fetch_and_adds_from_every_node_sum_exactly() {
    let mut net = Net::new(3, |_| {});
    let mut pending = Vec::new();
    for node in 0..3 {
        for _ in 0..3 {
            let s = net.open(node);
            for _ in 0..5 {
                pending.push((
                    node,
                    net.submit(node, Request::Faa { session: s, key: b("ctr"), delta: 1 }),
                ));
            }
        }
    }
    let mut olds = HashSet::new();
    for (node, corr) in pending {
        match net.run_until(node, corr) {
            Response::Rmw { observed, written: Some(w), .. } => {
                assert!(w.pno > 0, "an RMW version names its Paxos slot");
                assert!(
                    olds.insert(value_as_u64(observed.as_deref())),
                    "every FAA returns a distinct old value"
                );
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(olds, (0..45).collect::<HashSet<u64>>());
    let s = net.open(1);
    let v = value(net.call(1, Request::Acquire { session: s, key: b("ctr") }));
    assert_eq!(value_as_u64(v.as_deref()), 45);
}

#[test]
fn rc_of_two_strong_cases_from_the_same_value_exactly_one_swaps() {
    let mut net = Net::new(3, |_| {});
    let (a, c) = (net.open(0), net.open(1));
    let ra = net.submit(
        0,
        Request::Cas { session: a, key: b("lock"), expected: None, new: b("a"), weak: false },
    );
    let rc = net.submit(
        1,
        Request::Cas { session: c, key: b("lock"), expected: None, new: b("c"), weak: false },
    );
    let outcomes: Vec<bool> = [(0, ra), (1, rc)]
        .into_iter()
        .map(|(n, corr)| match net.run_until(n, corr) {
            Response::Rmw { swapped, written: Some(_), .. } => swapped,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(outcomes.iter().filter(|s| **s).count(), 1, "{outcomes:?}");
}

#[test]
fn rc_weak_cas_that_fails_locally_sends_nothing_and_creates_no_version() {
    let mut net = Net::new(3, |_| {});
    let s = net.open(0);
    net.call(0, Request::Put { session: s, key: b("k"), value: b("v") });
    net.deliver();
    let corr = net.submit(
        0,
        Request::Cas {
            session: s,
            key: b("k"),
            expected: Some(b("other")),
            new: b("w"),
            weak: true,
        },
    );
    assert!(net.wire.is_empty(), "no message for a local failure");
    match net.take(0, corr) {
        Some(Response::Rmw { swapped: false, written: None, observed, .. }) => {
            assert_eq!(observed, Some(b("v")))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn rc_a_lost_rmw_reply_never_applies_it_twice() {
    // Every message is duplicated: replies and requests arrive twice; the counter still moves
    // by exactly one per FAA (idempotent handlers, registry).
    let mut net = Net::new(3, |_| {});
    let s = net.open(0);
    for _ in 0..10 {
        let corr = net.submit(0, Request::Faa { session: s, key: b("c"), delta: 1 });
        let dup: Vec<_> = net.wire.iter().cloned().collect();
        net.wire.extend(dup);
        net.run_until(0, corr);
    }
    let v = value(net.call(0, Request::Acquire { session: s, key: b("c") }));
    assert_eq!(value_as_u64(v.as_deref()), 10);
}

/// Kite §9 K-F2 (N = 3: K = 0, I = 1, J = 2). K releases x, acked by K and I only (J never gets
/// x's writes); I acquires x, then releases f; J acquires f, then reads x. RC requires the new x.
fn kf2_scenario(net: &mut Net) -> Option<Bytes> {
    let (k, i, j) = (net.open(0), net.open(1), net.open(2));
    // For the whole scenario J never receives x by WRITE (its copy is "delayed").
    let keep = |_: NodeId, to: NodeId, m: &PeerMessage| {
        !(to == NodeId(2) && matches!(m, PeerMessage::Write(w) if w.key == b("x")))
    };
    written(net.call_filtered(
        0,
        Request::Release { session: k, key: b("x"), value: b("1") },
        keep,
    ));
    assert_eq!(
        value(net.call_filtered(1, Request::Acquire { session: i, key: b("x") }, keep)),
        Some(b("1"))
    );
    net.call_filtered(1, Request::Release { session: i, key: b("f"), value: b("1") }, keep);
    assert_eq!(
        value(net.call_filtered(2, Request::Acquire { session: j, key: b("f") }, keep)),
        Some(b("1"))
    );
    value(net.call_filtered(2, Request::Get { session: j, key: b("x") }, keep))
}

#[test]
fn rc_kf2_an_acquire_obligation_carries_visibility_through_a_second_release() {
    let mut net = Net::new(3, |_| {});
    assert_eq!(
        kf2_scenario(&mut net),
        Some(b("1")),
        "the obligation made I's release slow; J refreshed x"
    );
}

#[cfg(feature = "canaries")]
#[test]
fn canary_kf2_without_the_fix_j_reads_a_stale_x() {
    let mut net = Net::new(3, |c| c.planted_bug = Some(crate::PlantedBug::NoAcquireObligation));
    assert_eq!(
        kf2_scenario(&mut net),
        None,
        "without K-F2, J's relaxed read misses x (the bug the fix prevents)"
    );
}

#[cfg(feature = "canaries")]
#[test]
fn canary_a_release_that_skips_the_slow_release_leaves_the_sleeper_stale() {
    let mut net = Net::new(3, |c| c.planted_bug = Some(crate::PlantedBug::SkipSlowRelease));
    let p = net.open(0);
    let s = net.open(2);
    net.paused[2] = true;
    net.call(0, Request::Put { session: p, key: b("x"), value: b("1") });
    net.call(0, Request::Release { session: p, key: b("f"), value: b("1") });
    net.wire.retain(|(_, to, _)| *to != NodeId(2));
    net.paused[2] = false;
    // Acquire f at node 2, keeping x's retransmissions away from it, as if still delayed.
    let keep = |_: NodeId, to: NodeId, m: &PeerMessage| {
        !(to == NodeId(2) && matches!(m, PeerMessage::Write(w) if w.key == b("x")))
    };
    assert_eq!(
        value(net.call_filtered(2, Request::Acquire { session: s, key: b("f") }, keep)),
        Some(b("1"))
    );
    assert_eq!(net.nodes[2].stats().machine_epoch, 0, "nobody told the sleeper");
    let x = value(net.call(2, Request::Get { session: s, key: b("x") }));
    assert_eq!(
        x, None,
        "a stale relaxed read after the acquire: the RC violation the slow release prevents"
    );
}

/// Issue 17: a forged `Write` at clock `u64::MAX` used to be installed, and the next local put
/// (`ver + 1`) aborted the node. Counters at their end, clocks naming no replica and RMW
/// versions without their RMW are counted and dropped; the key keeps working.
#[test]
fn rc_forged_writes_at_the_counters_end_are_dropped_and_puts_go_on() {
    use strata_core::Node;
    use strata_wire::peer::{KeyRecords, Write};
    use strata_wire::Llc;
    let mut net = Net::new(3, |_| {});
    let s = net.open(0);
    let forged = |ver, node, pno| {
        PeerMessage::Write(Write {
            req: 1,
            key: b("k"),
            value: Some(b("evil")),
            cs: Carstamp { llc: Llc { ver, node: NodeId(node) }, pno },
            rmw_id: None,
            acq: None,
            records: KeyRecords::default(),
        })
    };
    let now = strata_wire::Instant::from_millis(1);
    net.nodes[0].on_message(now, NodeId(1), forged(u64::MAX, 1, 0));
    net.nodes[0].on_message(now, NodeId(1), forged(5, 42, 0));
    // Found by the `peer_message` fuzz target: an RMW version without its RMW id.
    net.nodes[0].on_message(now, NodeId(1), forged(5, 1, 7));
    assert_eq!(net.nodes[0].stats().bad_peer_messages, 3);
    let cs = written(net.call(0, Request::Put { session: s, key: b("k"), value: b("good") }));
    assert_eq!(cs.llc.ver, 1, "the forged versions were never installed");
    assert_eq!(value(net.call(0, Request::Get { session: s, key: b("k") })), Some(b("good")));
}

/// A counter's value (decimal text, `strata_wire::counter`).
fn value_as_u64(v: Option<&[u8]>) -> u64 {
    strata_wire::counter::parse(v).expect("a counter")
}
