//! Hand-written simulated scenarios (Kite §7 prop 10, §9 K-F2, and the canaries that random
//! swarms hit only rarely): the same cores, driver and checkers as the swarm, with knobs and
//! operations chosen by the test.

use bytes::Bytes;
use strata_sim::history::{fmt_ms, OpClass, OpKind};
use strata_sim::knobs::{DropRule, Fault, ScheduledFault, Script, ScriptedOp};
use strata_sim::{run_knobs, Canary, Knobs, RunOptions, RunReport};
use strata_wire::peer::PeerMessage;
use strata_wire::NodeId;

const MS: u64 = 1_000_000;

fn failure(report: &RunReport) -> String {
    format!("\n{}", report.render(10))
}

fn op(at_ms: u64, client: usize, key: &'static str, kind: OpKind) -> ScriptedOp {
    ScriptedOp { at_ns: at_ms * MS, client, key, kind }
}

fn b(s: &'static str) -> Bytes {
    Bytes::from_static(s.as_bytes())
}

/// Kite §9 K-F2 with N = 3 (K = n0, I = n1, J = n2): K releases x, and J's copies of x are lost
/// (every `WRITE` of x to J, until healing); I acquires x and releases f; J acquires f and
/// reads x. RC requires J to read K's x.
fn kf2(canary: Option<Canary>) -> Knobs {
    fn x_to_j(_: NodeId, to: NodeId, m: &PeerMessage) -> bool {
        to == NodeId(2) && matches!(m, PeerMessage::Write(w) if w.key == "x")
    }
    let mut k = Knobs::calm(1, 3);
    k.canary = canary;
    k.script = Some(Script {
        name: "K-F2",
        ops: vec![
            op(1, 0, "x", OpKind::Release { value: b("x1") }),
            op(20, 1, "x", OpKind::Acquire),
            op(40, 1, "f", OpKind::Release { value: b("f1") }),
            op(60, 2, "f", OpKind::Acquire),
            op(80, 2, "x", OpKind::Read),
            // Every session shows progress after healing (Kite §7 prop 9).
            op(110, 0, "x", OpKind::Read),
            op(110, 1, "x", OpKind::Read),
            op(110, 2, "x", OpKind::Read),
        ],
        drop: Some(DropRule { name: "WRITEs of x to n2", until_ns: 100 * MS, drops: x_to_j }),
    });
    k
}

#[test]
fn kf2_the_acquire_obligation_carries_visibility_through_a_second_release() {
    let report = run_knobs(kf2(None), &RunOptions::default());
    assert!(report.passed(), "{}", failure(&report));
    let h = &report.history;
    let read = h
        .ops
        .iter()
        .find(|o| o.session.node == NodeId(2) && o.kind == OpKind::Read)
        .expect("J's read");
    let (value, _) = read.witness().and_then(|w| w.observed.clone()).expect("J's read completed");
    assert_eq!(value, Some(b("x1")), "J reads K's x");
    assert!(
        report.stats.barriers_slow >= 1 && report.stats.epoch_bumps >= 1,
        "I's release went slow, J bumped its epoch"
    );
    assert!(report.stats.net.dropped_rule > 0);
}

#[test]
fn canary_no_acquire_obligation_is_caught_as_transitive_message_passing() {
    let opts = RunOptions { canary: Some(Canary::NoAcquireObligation), ..RunOptions::default() };
    let report = run_knobs(kf2(Some(Canary::NoAcquireObligation)), &opts);
    assert!(!report.passed(), "the K-F2 gap went unnoticed:{}", failure(&report));
    let hb: Vec<_> = report.violations.iter().filter(|v| v.checker == "hb-visibility").collect();
    assert!(
        hb.iter().any(|v| v.detail.contains("n2/s0 #1 (read of key \"x\") observed 0.0.0")
            && v.detail.contains("2 release -> acquire hops")),
        "{}",
        failure(&report)
    );
}

/// Message passing with a replica that missed the data (Kite §7 prop 5, §5.1.6 B4): n0 writes x
/// and releases f while n2 loses every `WRITE` of x; the barrier times out and publishes
/// DM = {n2}; n2 acquires f and reads x. With the slow release, n2 learns it is delinquent and
/// reads x through the slow path; without it (the canary), n2 reads a stale x.
fn message_passing_with_a_delinquent_reader(canary: Option<Canary>) -> Knobs {
    fn x_to_n2(_: NodeId, to: NodeId, m: &PeerMessage) -> bool {
        to == NodeId(2) && matches!(m, PeerMessage::Write(w) if w.key == "x")
    }
    let mut k = Knobs::calm(2, 3);
    k.canary = canary;
    k.script = Some(Script {
        name: "message passing, reader misses the data",
        ops: vec![
            op(1, 0, "x", OpKind::Write { value: b("x1") }),
            op(2, 0, "f", OpKind::Release { value: b("f1") }),
            op(30, 2, "f", OpKind::Acquire),
            op(50, 2, "x", OpKind::Read),
            op(110, 0, "x", OpKind::Read),
            op(110, 1, "x", OpKind::Read),
            op(110, 2, "x", OpKind::Read),
        ],
        drop: Some(DropRule { name: "WRITEs of x to n2", until_ns: 100 * MS, drops: x_to_n2 }),
    });
    k
}

#[test]
fn message_passing_reaches_a_delinquent_reader_through_the_slow_release() {
    let report = run_knobs(message_passing_with_a_delinquent_reader(None), &RunOptions::default());
    assert!(report.passed(), "{}", failure(&report));
    assert!(report.stats.barriers_slow >= 1 && report.stats.epoch_bumps >= 1);
}

#[test]
fn canary_skip_slow_release_is_caught_as_message_passing() {
    let c = Some(Canary::SkipSlowRelease);
    let report = run_knobs(
        message_passing_with_a_delinquent_reader(c),
        &RunOptions { canary: c, ..RunOptions::default() },
    );
    assert!(!report.passed(), "the stale read went unnoticed:{}", failure(&report));
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.checker == "hb-visibility" && v.detail.contains("one release -> acquire")),
        "{}",
        failure(&report)
    );
}

/// Kite §7 prop 10 (the paper's failure study, §8.2 fig. 11): 5 nodes under a 5%-write,
/// 5%-sync workload; n2 sleeps for 400 ms. (a) Every checker passes. (b) While n2 sleeps, each
/// other node keeps completing operations, never pausing longer than `T_REL` plus a few round
/// trips (one barrier time-out, then O3 skips n2). (c) After waking, n2's first acquire or RMW
/// invoked once a DM-set naming it had reached a quorum completes only after n2 bumped its
/// machine epoch.
#[test]
fn a_replica_paused_for_400ms_stalls_nobody_and_learns_it_is_delinquent() {
    const PAUSED: NodeId = NodeId(2);
    let (pause_at, resume_at) = (50 * MS, 450 * MS);
    let mut k = Knobs::calm(3, 5);
    k.release_timeout_us = 4_000; // 10 x the worst round trip (2 x 200 µs)
    let w = &mut k.workload;
    w.sessions_per_node = 4;
    w.depth = 2;
    w.keys = 24;
    w.counters = 1;
    w.read_pct = 95;
    w.acquire_pct = 5;
    w.release_pct = 5;
    w.rmw_pct = 1;
    w.faa_pct = 50;
    w.weak_cas_pct = 50;
    w.mix = "kite-5%";
    w.think_min_us = 50;
    w.think_max_us = 200;
    k.safety_ns = 550 * MS;
    k.liveness_ns = 50 * MS;
    k.faults = vec![ScheduledFault {
        at_ns: pause_at,
        fault: Fault::Pause { node: PAUSED, resume_ns: resume_at },
    }];
    k.drain_ns = k.default_drain_ns();
    let t_rel = k.release_timeout_us * 1_000;
    let rtt = k.rtt_us() * 1_000;
    let report = run_knobs(k, &RunOptions::default());
    // (a)
    assert!(report.passed(), "{}", failure(&report));
    let h = &report.history;
    assert!(
        report.stats.barriers_slow >= 1,
        "some release timed out on the sleeper:{}",
        failure(&report)
    );

    // (b) The longest stretch without a completion at each live node, while n2 sleeps.
    let allowed = t_rel + 5 * rtt;
    let mut gaps = Vec::new();
    for n in (0..5).map(NodeId).filter(|&n| n != PAUSED) {
        let mut done: Vec<u64> = h
            .ops
            .iter()
            .filter(|o| o.node == n)
            .filter_map(|o| o.witness().and(o.completed_at()))
            .map(|t| t.0)
            .filter(|&t| (pause_at..resume_at).contains(&t))
            .collect();
        done.push(pause_at);
        done.push(resume_at);
        done.sort_unstable();
        let gap = done.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
        assert!(
            done.len() > 1_000,
            "{n} completed only {} operations during the pause",
            done.len() - 2
        );
        assert!(
            gap <= allowed,
            "{n} completed nothing for {} during the pause (allowed {})",
            fmt_ms(gap),
            fmt_ms(allowed)
        );
        gaps.push(format!("{n}: {} ops, longest gap {}", done.len() - 2, fmt_ms(gap)));
    }
    let asleep = h
        .ops
        .iter()
        .filter(|o| o.node == PAUSED)
        .filter_map(|o| o.completed_at())
        .filter(|t| (pause_at + MS..resume_at).contains(&t.0));
    assert_eq!(asleep.count(), 0, "the sleeper completed operations while asleep");

    // (c) The first DM-set naming n2 known to a quorum, and n2's first acquire/RMW after it.
    let q = h.quorum();
    let known = h
        .slow_releases
        .iter()
        .filter(|sr| sr.names(PAUSED))
        .filter_map(|sr| sr.quorum_at(q))
        .filter(|t| (pause_at..resume_at).contains(&t.0))
        .min()
        .expect("a release put n2 in a DM-set while it slept");
    let first = h
        .ops
        .iter()
        .filter(|o| {
            o.node == PAUSED
                && o.invoke >= known
                && matches!(o.class(), OpClass::Acquire | OpClass::Rmw)
        })
        .filter_map(|o| o.completed_at().map(|t| (t, o)))
        .min_by_key(|(t, _)| *t)
        .expect("n2 completed an acquire or RMW after waking");
    let bumped =
        h.epochs.iter().any(|e| e.node == PAUSED && e.at.0 >= resume_at && e.at <= first.0);
    eprintln!(
        "paused n2 for 400ms: {}; DM-set at a quorum at {}, n2's first acquire/RMW after it done at {}; {} slow barriers",
        gaps.join("; "),
        fmt_ms(known.0),
        fmt_ms(first.0 .0),
        report.stats.barriers_slow
    );
    assert!(
        bumped,
        "n2's first acquire/RMW after the DM-set ({} #{}, done at {}) completed before any epoch bump:{}",
        first.1.session,
        first.1.pos,
        fmt_ms(first.0 .0),
        failure(&report)
    );
}
