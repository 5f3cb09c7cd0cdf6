//! The checkers of Kite's synchronisation operations on hand-made histories: a good one each
//! must accept, and known-bad ones each must flag — the canary of each checker (`DESIGN.md`: a
//! checker that cannot fail proves nothing).

use std::collections::BTreeMap;

use bytes::Bytes;
use strata_rc::NodeSet;
use strata_sim::check::{
    self, barrier, delinquency, hb, linearizability, paxos, registry, replica, rmw, versions,
    Violation,
};
use strata_sim::history::{
    Acceptance, BarrierPath, BarrierSeen, CommitSeen, Creation, DbitChange, DbitSeen, EpochBump,
    EpochChange, History, Op, OpKind, Outcome, PromiseSeen, Registration, ReplicaChange,
    ResetBitSeen, SelfDelinquentChange, SelfDelinquentSeen, SlowReleaseAck, SlowReleaseSeen, Value,
    ValueRound, Witness,
};
use strata_wire::{AcquireId, Ballot, Carstamp, Instant, Llc, NodeId, RmwId, SessionId};

fn sess(node: u32) -> SessionId {
    SessionId { node: NodeId(node), index: 0 }
}

/// A plain version `((ver, node), 0)`.
fn cs(ver: u64, node: u32) -> Carstamp {
    Carstamp { llc: Llc { ver, node: NodeId(node) }, pno: 0 }
}

/// The version of slot `slot` on base `((ver, node))`.
fn rcs(ver: u64, node: u32, slot: u32) -> Carstamp {
    Carstamp { llc: Llc { ver, node: NodeId(node) }, pno: slot }
}

fn val(s: &str) -> Value {
    Some(Bytes::copy_from_slice(s.as_bytes()))
}

fn num(n: u64) -> Value {
    Some(strata_wire::counter::encode(n))
}

fn key(k: &str) -> Bytes {
    Bytes::copy_from_slice(k.as_bytes())
}

fn at(ms: u64) -> Instant {
    Instant(ms * 1_000_000)
}

fn reads(v: Value, c: Carstamp) -> Witness {
    Witness { observed: Some((v, c)), written: None, swapped: false }
}

fn writes(c: Carstamp) -> Witness {
    Witness { observed: None, written: Some(c), swapped: false }
}

fn rmw_w(obs: (Value, Carstamp), wr: Carstamp, swapped: bool) -> Witness {
    Witness { observed: Some(obs), written: Some(wr), swapped }
}

/// Builds histories with explicit invocation and response times (milliseconds).
struct B {
    h: History,
    pos: BTreeMap<SessionId, u64>,
    rmws: BTreeMap<SessionId, u64>,
    order: u64,
    seq: u64,
}

impl B {
    fn new(nodes: u32) -> B {
        B {
            h: History { nodes, ..History::default() },
            pos: BTreeMap::new(),
            rmws: BTreeMap::new(),
            order: 0,
            seq: 0,
        }
    }

    /// An operation invoked at `inv`, answered at `resp` with `w` (pending if `None`).
    fn op(
        &mut self,
        s: SessionId,
        kind: OpKind,
        k: &str,
        inv: u64,
        done: Option<(u64, Witness)>,
    ) -> &mut Self {
        let pos = self.pos.entry(s).or_insert(0);
        let p = *pos;
        *pos += 1;
        let outcome = match done {
            Some((resp, witness)) => {
                self.order += 1;
                Outcome::Done { at: at(resp), order: self.order, witness }
            }
            None => Outcome::Pending,
        };
        self.h.ops.push(Op {
            session: s,
            pos: p,
            node: s.node,
            kind,
            key: key(k),
            invoke: at(inv),
            outcome,
            relocated: false,
        });
        self
    }

    fn create(&mut self, s: SessionId, k: &str, v: Value, c: Carstamp, when: u64) -> &mut Self {
        self.h.creations.push(Creation {
            at: at(when),
            node: s.node,
            session: s,
            key: key(k),
            cs: c,
            value: v,
            rmw_id: None,
        });
        self
    }

    /// A completed relaxed write or release that created `c` at its start.
    #[allow(clippy::too_many_arguments)]
    fn put(
        &mut self,
        s: SessionId,
        k: &str,
        v: &str,
        c: Carstamp,
        inv: u64,
        resp: u64,
        release: bool,
    ) -> &mut Self {
        self.create(s, k, val(v), c, inv);
        let value = Bytes::copy_from_slice(v.as_bytes());
        let kind = if release { OpKind::Release { value } } else { OpKind::Write { value } };
        self.op(s, kind, k, inv, Some((resp, writes(c))))
    }

    fn write(
        &mut self,
        s: SessionId,
        k: &str,
        v: &str,
        c: Carstamp,
        inv: u64,
        resp: u64,
    ) -> &mut Self {
        self.put(s, k, v, c, inv, resp, false)
    }

    fn release(
        &mut self,
        s: SessionId,
        k: &str,
        v: &str,
        c: Carstamp,
        inv: u64,
        resp: u64,
    ) -> &mut Self {
        self.put(s, k, v, c, inv, resp, true)
    }

    fn read(
        &mut self,
        s: SessionId,
        k: &str,
        v: Value,
        c: Carstamp,
        inv: u64,
        resp: u64,
    ) -> &mut Self {
        self.op(s, OpKind::Read, k, inv, Some((resp, reads(v, c))))
    }

    fn acquire(
        &mut self,
        s: SessionId,
        k: &str,
        v: Value,
        c: Carstamp,
        inv: u64,
        resp: u64,
    ) -> &mut Self {
        self.op(s, OpKind::Acquire, k, inv, Some((resp, reads(v, c))))
    }

    /// The next `RmwId` of session `s`.
    fn next_rmw(&mut self, s: SessionId) -> RmwId {
        let n = self.rmws.entry(s).or_insert(0);
        *n += 1;
        RmwId { session: s, seq: *n }
    }

    /// A real commit of `slot` sent by `from`, after a quorum accepted it at one ballot; its
    /// version becomes a creation of the RMW's owner, and the quorum registers the RMW.
    fn commit(
        &mut self,
        from: u32,
        k: &str,
        id: RmwId,
        v: Value,
        c: Carstamp,
        when: u64,
    ) -> &mut Self {
        let q = self.h.quorum() as u32;
        for n in 0..q {
            self.accept(
                n,
                k,
                c.pno,
                Ballot { round: 1, node: NodeId(from) },
                id,
                c.llc,
                v.clone(),
                when,
            );
        }
        self.commit_only(from, k, c.pno, id, v.clone(), c, when);
        for n in 0..q {
            self.register(n, id, when);
        }
        let s = id.session;
        self.h.creations.push(Creation {
            at: at(when),
            node: s.node,
            session: s,
            key: key(k),
            cs: c,
            value: v,
            rmw_id: Some(id),
        });
        self
    }

    #[allow(clippy::too_many_arguments)]
    fn commit_only(
        &mut self,
        from: u32,
        k: &str,
        slot: u32,
        id: RmwId,
        v: Value,
        c: Carstamp,
        when: u64,
    ) -> &mut Self {
        self.seq += 1;
        self.h.commits.push(CommitSeen {
            seq: self.seq,
            at: at(when),
            from: NodeId(from),
            key: key(k),
            slot,
            rmw_id: id,
            value: v,
            cs: c,
        });
        self
    }

    #[allow(clippy::too_many_arguments)]
    fn accept(
        &mut self,
        node: u32,
        k: &str,
        slot: u32,
        ballot: Ballot,
        id: RmwId,
        base: Llc,
        v: Value,
        when: u64,
    ) -> &mut Self {
        self.seq += 1;
        self.h.acceptances.push(Acceptance {
            seq: self.seq,
            at: at(when),
            node: NodeId(node),
            key: key(k),
            slot,
            ballot,
            rmw_id: id,
            base,
            value: v,
        });
        self
    }

    /// A completed RMW: committed by its own node, then answered.
    #[allow(clippy::too_many_arguments)]
    fn rmw(
        &mut self,
        s: SessionId,
        kind: OpKind,
        k: &str,
        obs: (Value, Carstamp),
        wr: Carstamp,
        new: Value,
        swapped: bool,
        inv: u64,
        resp: u64,
    ) -> &mut Self {
        let id = self.next_rmw(s);
        self.commit(s.node.0, k, id, new, wr, inv);
        self.op(s, kind, k, inv, Some((resp, rmw_w(obs, wr, swapped))))
    }

    #[allow(clippy::too_many_arguments)]
    fn faa(
        &mut self,
        s: SessionId,
        k: &str,
        delta: u64,
        old: (u64, Carstamp),
        wr: Carstamp,
        inv: u64,
        resp: u64,
    ) -> &mut Self {
        let obs = (if old.1 == Carstamp::ZERO { None } else { num(old.0) }, old.1);
        self.rmw(s, OpKind::Faa { delta }, k, obs, wr, num(old.0 + delta), false, inv, resp)
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// `node` registers `id` (Kite §5.1.2), continuing from its last registration of the session.
    fn register(&mut self, node: u32, id: RmwId, when: u64) -> &mut Self {
        let mine = |r: &&Registration| r.node == NodeId(node) && r.id.session == id.session;
        let prev = self.h.registrations.iter().filter(mine).map(|r| r.id.seq).max().unwrap_or(0);
        let seq = self.next_seq();
        self.h.registrations.push(Registration { seq, at: at(when), node: NodeId(node), id, prev });
        self
    }

    /// Acceptor `node` acks a proposal for `slot` of `k` (Kite §5.7.6).
    fn promise(&mut self, node: u32, k: &str, slot: u32, when: u64) -> &mut Self {
        let (seq, ballot) = (self.next_seq(), Ballot { round: 1, node: NodeId(node) });
        self.h.promises.push(PromiseSeen {
            seq,
            at: at(when),
            node: NodeId(node),
            key: key(k),
            slot,
            ballot,
        });
        self
    }

    /// Session `s`'s release of `k` lets its value out, its barrier having covered `prior`.
    fn barrier(
        &mut self,
        s: SessionId,
        k: &str,
        prior: &[(&str, Carstamp)],
        path: BarrierPath,
        when: u64,
    ) -> &mut Self {
        let seq = self.next_seq();
        let prior = prior.iter().map(|(pk, c)| (key(pk), *c)).collect();
        let round = ValueRound::Write { cs: cs(9, s.node.0) };
        self.h.barriers.push(BarrierSeen {
            seq,
            at: at(when),
            node: s.node,
            session: s,
            key: key(k),
            round,
            prior,
            path,
        });
        self
    }

    /// `from` sends `SLOW_RELEASE` round `req` naming `dm`; `ackers` ack it, in order.
    fn slow_release(
        &mut self,
        from: u32,
        req: u64,
        dm: &[u32],
        ackers: &[u32],
        when: u64,
    ) -> &mut Self {
        let seq = self.next_seq();
        let dm = nodes(dm).bits();
        let acks = ackers
            .iter()
            .map(|&n| SlowReleaseAck { seq: self.next_seq(), at: at(when), node: NodeId(n) })
            .collect();
        self.h.slow_releases.push(SlowReleaseSeen {
            seq,
            at: at(when),
            from: NodeId(from),
            req,
            dm,
            acks,
        });
        self
    }

    fn dbit(&mut self, node: u32, peer: u32, change: DbitChange, when: u64) -> &mut Self {
        let seq = self.next_seq();
        self.h.dbits.push(DbitSeen {
            seq,
            at: at(when),
            node: NodeId(node),
            peer: NodeId(peer),
            change,
        });
        self
    }

    fn reset_bit(&mut self, acq: AcquireId, when: u64) -> &mut Self {
        let seq = self.next_seq();
        self.h.reset_bits.push(ResetBitSeen { seq, at: at(when), from: acq.session.node, acq });
        self
    }

    /// Input number `step` of `acq`'s node increments its machine epoch to `epoch`: the core's
    /// report and, if `sampled`, the epoch the driver samples after the step.
    fn bump(
        &mut self,
        acq: AcquireId,
        epoch: u64,
        step: u64,
        sampled: bool,
        when: u64,
    ) -> &mut Self {
        let node = acq.session.node;
        let seq = self.next_seq();
        self.h.epoch_bumps.push(EpochBump { seq, step, at: at(when), node, acq, epoch });
        if sampled {
            let seq = self.next_seq();
            self.h.epochs.push(EpochChange { seq, step, at: at(when), node, epoch });
        }
        self
    }

    fn self_delinquent(
        &mut self,
        node: u32,
        change: SelfDelinquentChange,
        step: u64,
        when: u64,
    ) -> &mut Self {
        let seq = self.next_seq();
        self.h.self_delinquency.push(SelfDelinquentSeen {
            seq,
            step,
            at: at(when),
            node: NodeId(node),
            change,
        });
        self
    }

    fn replica(
        &mut self,
        node: u32,
        k: &str,
        v: Value,
        c: Carstamp,
        lc: u32,
        when: u64,
    ) -> &mut Self {
        self.seq += 1;
        self.h.replica_changes.push(ReplicaChange {
            seq: self.seq,
            at: at(when),
            node: NodeId(node),
            key: key(k),
            value: v,
            cs: c,
            lc,
        });
        self
    }
}

#[track_caller]
fn flags(found: Vec<Violation>, checker: &str, needle: &str) {
    assert!(!found.is_empty(), "{checker} must flag this history ({needle})");
    assert!(found.iter().all(|v| v.checker == checker), "{found:?}");
    assert!(
        found.iter().any(|v| v.detail.contains(needle)),
        "no violation mentions {needle:?}: {found:?}"
    );
}

#[track_caller]
fn clean(found: Vec<Violation>) {
    assert!(found.is_empty(), "unexpected violations: {found:?}");
}

// ---- a correct history touching every sync kind ----

/// n0 writes x and releases f; n1 acquires f and reads x, then runs FAAs with n2 on a
/// counter; n2 swaps a lock by strong CAS, and a weak CAS on n1 fails locally.
fn good() -> B {
    let (a, b, c) = (sess(0), sess(1), sess(2));
    let mut h = B::new(3);
    h.write(a, "x", "x1", cs(1, 0), 1, 1)
        .release(a, "f", "f1", cs(1, 0), 2, 4)
        .acquire(b, "f", val("f1"), cs(1, 0), 5, 6)
        .read(b, "x", val("x1"), cs(1, 0), 7, 7)
        .faa(b, "c", 2, (0, Carstamp::ZERO), rcs(0, 0, 1), 8, 9)
        .faa(c, "c", 3, (2, rcs(0, 0, 1)), rcs(0, 0, 2), 10, 11)
        .rmw(
            c,
            OpKind::Cas { expected: None, new: key("c"), weak: false },
            "lock",
            (None, Carstamp::ZERO),
            rcs(0, 0, 1),
            val("c"),
            true,
            12,
            13,
        );
    // A weak CAS on a stale replica of n1 fails locally: a relaxed read, no version.
    let weak = OpKind::Cas { expected: Some(key("old")), new: key("b"), weak: true };
    h.op(b, weak, "lock", 14, Some((14, reads(None, Carstamp::ZERO))));
    h.acquire(b, "lock", val("c"), rcs(0, 0, 1), 15, 16);
    h.replica(1, "c", num(5), rcs(0, 0, 2), 2, 11);
    h.h.sessions = vec![a, b, c];
    h
}

#[test]
fn every_checker_accepts_a_correct_history_with_sync_operations() {
    let h = good().h;
    let found: Vec<Violation> = check::run_checkers(&h, check::CHECKERS)
        .into_iter()
        .filter(|v| v.checker != "liveness" && v.checker != "convergence")
        .collect();
    clean(found);
}

// ---- linearizability (G4, §7 prop 6) ----

#[test]
fn linearizability_flags_an_acquire_missing_a_completed_release() {
    let mut h = good();
    // n2's release of f completes at 20; n1's acquire invoked at 21 returns the older f1.
    h.release(sess(2), "f", "f2", cs(2, 2), 18, 20).acquire(
        sess(1),
        "f",
        val("f1"),
        cs(1, 0),
        21,
        22,
    );
    flags(
        linearizability::sync_linearizability(&h.h),
        "linearizability",
        "completed before it was invoked with 2.2.0",
    );
}

#[test]
fn linearizability_flags_a_sync_write_ordered_below_an_earlier_one() {
    let mut h = good();
    h.release(sess(2), "f", "f2", cs(3, 2), 18, 20).release(sess(1), "f", "f3", cs(2, 1), 21, 22);
    flags(
        linearizability::sync_linearizability(&h.h),
        "linearizability",
        "created 2.1.0 of key \"f\"",
    );
}

#[test]
fn linearizability_flags_reading_from_the_future() {
    let mut h = good();
    h.acquire(sess(1), "g", val("g1"), cs(1, 2), 18, 19);
    h.create(sess(2), "g", val("g1"), cs(1, 2), 25).op(
        sess(2),
        OpKind::Release { value: key("g1") },
        "g",
        25,
        Some((26, writes(cs(1, 2)))),
    );
    flags(
        linearizability::sync_linearizability(&h.h),
        "linearizability",
        "reading from the future",
    );
}

#[test]
fn linearizability_allows_overlapping_sync_ops_and_stale_relaxed_reads() {
    let mut h = good();
    // Overlapping: the acquire may see the old or the new version.
    h.release(sess(2), "f", "f2", cs(2, 2), 18, 22).acquire(
        sess(1),
        "f",
        val("f1"),
        cs(1, 0),
        19,
        21,
    );
    // A relaxed read after a release may be stale (RC_Lin orders sync ops only).
    h.read(sess(1), "f", val("f1"), cs(1, 0), 30, 30);
    clean(linearizability::sync_linearizability(&h.h));
}

#[test]
fn linearizability_counts_an_incomplete_writer_that_created_a_version() {
    let mut h = good();
    // n2's release never completed but its version exists; an acquire that completed
    // before it was invoked saw 1.0.0, so its version must be above that: 0.5 is not.
    h.acquire(sess(1), "f", val("f1"), cs(1, 0), 18, 19);
    h.create(
        sess(2),
        "f",
        val("late"),
        Carstamp { llc: Llc { ver: 0, node: NodeId(2) }, pno: 0 },
        21,
    );
    h.op(sess(2), OpKind::Release { value: key("late") }, "f", 20, None);
    flags(
        linearizability::sync_linearizability(&h.h),
        "linearizability",
        "n2/s0 #2 (release of key \"f\") created 0.2.0",
    );
}

// ---- hb-visibility (G3, §7 props 4 and 5) ----

#[test]
fn hb_flags_message_passing_with_a_stale_read() {
    let mut h = good();
    h.write(sess(0), "y", "y1", cs(1, 0), 20, 20)
        .release(sess(0), "f", "f2", cs(2, 0), 21, 23)
        .acquire(sess(2), "f", val("f2"), cs(2, 0), 24, 25)
        .read(sess(2), "y", None, Carstamp::ZERO, 26, 26);
    flags(hb::hb_visibility(&h.h), "hb-visibility", "observed 0.0.0, older than 1.0.0 written by n0/s0 #2 (write of key \"y\"), which happens-before it through one release -> acquire");
}

#[test]
fn hb_flags_the_transitive_k_f2_chain() {
    // Kite §9 K-F2: K releases x; I acquires x and releases f; J acquires f and reads x.
    let (k, i, j) = (sess(0), sess(1), sess(2));
    let mut h = B::new(3);
    h.release(k, "x", "x1", cs(1, 0), 1, 2)
        .acquire(i, "x", val("x1"), cs(1, 0), 3, 4)
        .release(i, "f", "f1", cs(1, 1), 5, 6)
        .acquire(j, "f", val("f1"), cs(1, 1), 7, 8);
    let good = h.h.clone();
    h.read(j, "x", None, Carstamp::ZERO, 9, 9);
    flags(
        hb::hb_visibility(&h.h),
        "hb-visibility",
        "through 2 release -> acquire hops (transitive message passing",
    );
    let mut ok = B { h: good, ..B::new(3) };
    ok.pos = [(k, 1), (i, 2), (j, 1)].into_iter().collect();
    ok.read(j, "x", val("x1"), cs(1, 0), 9, 9);
    clean(hb::hb_visibility(&ok.h));
}

#[test]
fn hb_flags_a_write_ordered_below_a_write_that_happens_before_it() {
    let mut h = good();
    // n1 acquired f1 (after n0 wrote x = 1.0.0): its write of x must be above 1.0.0.
    h.write(sess(1), "x", "x2", cs(0, 1), 20, 20);
    flags(hb::hb_visibility(&h.h), "hb-visibility", "created 0.1.0, older than 1.0.0");
}

#[test]
fn hb_flags_an_rmw_as_synchronisation() {
    // n0 writes y, then FAA (acts as a release); n1's FAA reads it (acts as an acquire), then
    // reads y: it must see n0's write.
    let (a, b) = (sess(0), sess(1));
    let mut h = B::new(3);
    h.write(a, "y", "y1", cs(1, 0), 1, 1)
        .faa(a, "c", 1, (0, Carstamp::ZERO), rcs(0, 0, 1), 2, 3)
        .faa(b, "c", 1, (1, rcs(0, 0, 1)), rcs(0, 0, 2), 4, 5)
        .read(b, "y", None, Carstamp::ZERO, 6, 6);
    flags(hb::hb_visibility(&h.h), "hb-visibility", "through one release -> acquire");
}

#[test]
fn hb_does_not_order_what_rc_leaves_unordered() {
    let (a, b) = (sess(0), sess(1));
    let mut h = B::new(3);
    h.release(a, "f", "f1", cs(1, 0), 1, 2)
        // Release -> relaxed write of another key: not ordered, may be missed.
        .write(a, "y", "y1", cs(1, 0), 3, 3)
        .acquire(b, "f", val("f1"), cs(1, 0), 4, 5)
        .read(b, "y", None, Carstamp::ZERO, 6, 6)
        // Relaxed read before an acquire of another key: not ordered either.
        .write(a, "z", "z1", cs(2, 0), 7, 7)
        .release(a, "g", "g1", cs(3, 0), 8, 9)
        .read(b, "z", None, Carstamp::ZERO, 10, 10)
        .acquire(b, "g", val("g1"), cs(3, 0), 11, 12);
    // A weak CAS that fails locally reads like a relaxed read: it synchronises with nothing.
    h.write(a, "w", "w1", cs(4, 0), 13, 13).release(a, "h", "h1", cs(5, 0), 14, 15);
    let weak = OpKind::Cas { expected: None, new: key("b"), weak: true };
    h.op(b, weak, "h", 16, Some((16, reads(val("h1"), cs(5, 0)))));
    h.read(b, "w", None, Carstamp::ZERO, 17, 17);
    clean(hb::hb_visibility(&h.h));
}

#[test]
fn hb_flags_a_cycle() {
    // Each acquire returns the release that follows the other's acquire.
    let (a, b) = (sess(0), sess(1));
    let mut h = B::new(3);
    h.acquire(a, "g", val("g1"), cs(1, 1), 1, 2)
        .release(a, "f", "f1", cs(1, 0), 3, 4)
        .acquire(b, "f", val("f1"), cs(1, 0), 1, 2)
        .release(b, "g", "g1", cs(1, 1), 3, 4);
    flags(hb::hb_visibility(&h.h), "hb-visibility", "happens-before has a cycle");
}

// ---- RMW atomicity (G5, §7 prop 7), weak CAS (prop 8), FAA counters ----

#[test]
fn rmw_atomicity_flags_a_version_between_what_an_rmw_read_and_wrote() {
    let mut h = good();
    // n0's FAA read ZERO but wrote slot 3, above slots 1 and 2.
    h.faa(sess(0), "c", 1, (0, Carstamp::ZERO), rcs(0, 0, 3), 20, 21);
    let found = rmw::rmw_atomicity(&h.h);
    flags(found, "rmw-atomicity", "observed 0.0.0 and created 0.0.3, but 0.0.2 lies between them");
}

#[test]
fn rmw_atomicity_flags_a_wrong_new_value_a_plain_version_and_a_false_swap() {
    let mut h = good();
    let id = h.next_rmw(sess(0));
    h.commit(0, "c", id, num(99), rcs(0, 0, 3), 20);
    h.op(
        sess(0),
        OpKind::Faa { delta: 1 },
        "c",
        20,
        Some((21, rmw_w((num(5), rcs(0, 0, 2)), rcs(0, 0, 3), false))),
    );
    flags(rmw::rmw_atomicity(&h.h), "rmw-atomicity", "but f(op, old) =");

    let mut h = good();
    h.create(sess(0), "k", num(1), cs(1, 0), 20);
    h.op(
        sess(0),
        OpKind::Faa { delta: 1 },
        "k",
        20,
        Some((21, rmw_w((None, Carstamp::ZERO), cs(1, 0), false))),
    );
    flags(rmw::rmw_atomicity(&h.h), "rmw-atomicity", "a plain version");

    let mut h = good();
    let cas = OpKind::Cas { expected: Some(key("nope")), new: key("n"), weak: false };
    // The lock held "c": a CAS expecting "nope" must fail (keep "c") and say so.
    h.rmw(sess(1), cas, "lock", (val("c"), rcs(0, 0, 1)), rcs(0, 0, 2), val("c"), true, 20, 21);
    flags(rmw::rmw_atomicity(&h.h), "rmw-atomicity", "reported swapped=true");
}

#[test]
fn rmw_atomicity_checks_an_rmw_committed_for_a_crashed_owner() {
    let mut h = good();
    // n0's FAA of 4 never completed, but a helper committed slot 3 with 9 (5 + 4 expected).
    let id = h.next_rmw(sess(0));
    h.commit(1, "c", id, num(10), rcs(0, 0, 3), 20);
    h.op(sess(0), OpKind::Faa { delta: 4 }, "c", 19, None);
    flags(rmw::rmw_atomicity(&h.h), "rmw-atomicity", "created 0.0.3 = ");
    let mut ok = good();
    let id = ok.next_rmw(sess(0));
    ok.commit(1, "c", id, num(9), rcs(0, 0, 3), 20);
    ok.op(sess(0), OpKind::Faa { delta: 4 }, "c", 19, None);
    clean(rmw::rmw_atomicity(&ok.h));
    clean(rmw::faa_counters(&ok.h));
}

#[test]
fn weak_cas_flags_a_local_failure_that_claims_a_swap_or_matched() {
    let mut h = good();
    let weak = OpKind::Cas { expected: val("v"), new: key("n"), weak: true };
    h.op(
        sess(1),
        weak.clone(),
        "lock",
        20,
        Some((
            20,
            Witness { observed: Some((val("c"), rcs(0, 0, 1))), written: None, swapped: true },
        )),
    );
    flags(rmw::rmw_atomicity(&h.h), "weak-cas", "reported swapped=true");
    let mut h = good();
    h.op(sess(1), weak, "lock", 20, Some((20, reads(val("v"), rcs(0, 0, 1)))));
    flags(rmw::rmw_atomicity(&h.h), "weak-cas", "\"v\" observed and \"v\" expected");
}

#[test]
fn faa_counters_flag_duplicate_old_values_lost_and_double_counted_faas() {
    let mut h = good();
    // Another FAA also returns old value 2.
    h.faa(sess(0), "c", 1, (2, rcs(0, 0, 1)), rcs(0, 0, 3), 20, 21);
    flags(rmw::faa_counters(&h.h), "faa-counter", "both returned old value 2");

    let mut h = good();
    // An acknowledged FAA that no slot decided.
    h.op(
        sess(0),
        OpKind::Faa { delta: 1 },
        "c",
        20,
        Some((21, rmw_w((num(5), rcs(0, 0, 2)), rcs(0, 0, 3), false))),
    );
    flags(rmw::faa_counters(&h.h), "faa-counter", "was decided in 0 slots");

    let mut h = good();
    // n1's FAA of 2 (the session's first RMW) decided again in slot 3: counted twice.
    let twice = RmwId { session: sess(1), seq: 1 };
    h.commit(2, "c", twice, num(7), rcs(0, 0, 3), 20);
    flags(rmw::faa_counters(&h.h), "faa-counter", "was decided in 2 slots");

    let mut h = good();
    // The newest version disagrees with the deltas.
    let id = h.next_rmw(sess(0));
    h.commit(0, "c", id, num(50), rcs(0, 0, 3), 20);
    h.op(sess(0), OpKind::Faa { delta: 1 }, "c", 20, None);
    flags(rmw::faa_counters(&h.h), "faa-counter", "ends at 50");
}

// ---- Paxos agreement (§7 inv. 13) ----

#[test]
fn paxos_agreement_flags_split_slots_and_rmws_taking_effect_twice() {
    let mut h = good();
    let other = RmwId { session: sess(0), seq: 9 };
    h.commit_only(0, "c", 2, other, num(6), rcs(0, 0, 2), 20);
    flags(paxos::paxos_agreement(&h.h), "paxos-agreement", "slot 2 of key \"c\" committed for");

    let mut h = good();
    let id = RmwId { session: sess(2), seq: 1 };
    h.commit_only(0, "c", 2, id, num(6), rcs(0, 0, 2), 20);
    flags(paxos::paxos_agreement(&h.h), "paxos-agreement", "committed as 0.0.2 = ");

    let mut h = good();
    h.commit_only(0, "c", 3, id, num(8), rcs(0, 0, 3), 20);
    flags(paxos::paxos_agreement(&h.h), "paxos-agreement", "an RMW taking effect twice");

    let mut h = good();
    // A catch-up commit carries the sender's version: plain, or the slot's own.
    h.commit_only(2, "c", 2, id, num(5), cs(4, 2), 20);
    clean(paxos::paxos_agreement(&h.h));
    h.commit_only(2, "c", 2, id, num(2), rcs(0, 0, 1), 21);
    flags(paxos::paxos_agreement(&h.h), "paxos-agreement", "a version of another slot");
}

#[test]
fn paxos_quorum_flags_a_commit_without_a_quorum_of_accepts_at_one_ballot() {
    let mut h = good();
    let id = h.next_rmw(sess(0));
    let base = Llc::ZERO;
    h.accept(0, "c", 3, Ballot { round: 1, node: NodeId(0) }, id, base, num(6), 20);
    h.accept(1, "c", 3, Ballot { round: 2, node: NodeId(0) }, id, base, num(6), 20);
    h.commit_only(0, "c", 3, id, num(6), rcs(0, 0, 3), 21);
    // Accepted after the commit: too late.
    h.accept(2, "c", 3, Ballot { round: 1, node: NodeId(0) }, id, base, num(6), 22);
    flags(paxos::paxos_quorum(&h.h), "paxos-quorum", "after only 1 acceptor(s) accepted it");
    clean(paxos::paxos_quorum(&good().h));
}

// ---- commit floor (§7 inv. 12) and uniqueness of RMW versions (§7 prop 1) ----

#[test]
fn commit_floor_flags_replicas_behind_their_last_committed_slot() {
    let mut h = good();
    h.replica(0, "c", num(2), rcs(0, 0, 1), 2, 12);
    flags(
        replica::replica_commit_floor(&h.h),
        "commit-floor",
        "holds 0.0.1 although its last committed slot is 2",
    );
    let mut h = good();
    h.replica(0, "c", None, Carstamp::ZERO, 2, 12);
    flags(
        replica::replica_commit_floor(&h.h),
        "commit-floor",
        "below 0.0.2, the version of its last committed slot 2",
    );
    let mut h = good();
    h.replica(1, "c", num(5), rcs(0, 0, 2), 1, 12);
    flags(replica::replica_commit_floor(&h.h), "commit-floor", "went back from 2 to 1");
    let mut h = good();
    h.replica(1, "c", num(5), cs(9, 1), 7, 12);
    flags(replica::replica_commit_floor(&h.h), "commit-floor", "no node ever committed it");
}

#[test]
fn version_uniqueness_flags_an_rmw_claiming_anothers_commit_or_an_uncommitted_version() {
    let mut h = good();
    // n0's FAA reports slot 2, which was committed for n2's FAA.
    h.op(
        sess(0),
        OpKind::Faa { delta: 3 },
        "c",
        20,
        Some((21, rmw_w((num(2), rcs(0, 0, 1)), rcs(0, 0, 2), false))),
    );
    flags(versions::version_uniqueness(&h.h), "version-uniqueness", "was created by n2/s0");
    let mut h = good();
    h.create(sess(0), "q", num(1), rcs(0, 0, 1), 20);
    flags(versions::version_uniqueness(&h.h), "version-uniqueness", "no COMMIT ever carried it");
}

// ---- state invariants (§7 inv. 14 - 17) ----

fn acq(node: u32, seq: u64) -> AcquireId {
    AcquireId { session: sess(node), seq }
}

/// N = 3: n0's session wrote x = 1.0.0, held by `holders` (n0 first).
fn x_held_by(holders: &[u32]) -> B {
    let mut h = B::new(3);
    for &n in holders {
        h.replica(n, "x", val("x1"), cs(1, 0), 0, 1);
    }
    h
}

fn nodes(ids: &[u32]) -> NodeSet {
    ids.iter().map(|&n| NodeId(n)).collect()
}

/// A slow pass through `SLOW_RELEASE` round 7 of n0 naming `dm`, acked by n1.
fn slow(dm: &[u32]) -> BarrierPath {
    BarrierPath::Slow { req: 7, dm: nodes(dm), acked: nodes(&[1]) }
}

#[test]
fn barrier_flags_a_fast_pass_over_a_write_some_node_lacks() {
    let mut h = x_held_by(&[0, 1, 2]);
    h.barrier(sess(0), "f", &[("x", cs(1, 0))], BarrierPath::Fast, 2);
    clean(barrier::barrier_invariant(&h.h));
    let mut h = x_held_by(&[0, 1]);
    h.barrier(sess(0), "f", &[("x", cs(1, 0))], BarrierPath::Fast, 2);
    flags(barrier::barrier_invariant(&h.h), "barrier", "n0/s0's release on key \"f\" let its value out, but its barrier passed fast while [n2] did not hold 1.0.0 of key \"x\"");
}

#[test]
fn barrier_flags_a_dm_set_published_early_or_short_and_a_value_out_before_a_quorum_knew_it() {
    // Good (B4): x at a quorum {n0, n1}, then SLOW_RELEASE {n2} acked by n1, then the value.
    let mut h = x_held_by(&[0, 1]);
    h.slow_release(0, 7, &[2], &[1], 2).barrier(sess(0), "f", &[("x", cs(1, 0))], slow(&[2]), 3);
    clean(barrier::barrier_invariant(&h.h));
    // K-F1 off: the DM-set leaves while only n0 holds x; n1 gets x before the value leaves.
    let mut h = x_held_by(&[0]);
    h.slow_release(0, 7, &[1, 2], &[1], 2).replica(1, "x", val("x1"), cs(1, 0), 0, 3);
    h.barrier(sess(0), "f", &[("x", cs(1, 0))], slow(&[1, 2]), 4);
    flags(
        barrier::barrier_invariant(&h.h),
        "barrier",
        "left when only 1 node(s) held 1.0.0 of key \"x\", below a quorum of 2 (K-F1)",
    );
    // The DM-set leaves out n2, which lacks x.
    let mut h = x_held_by(&[0, 1]);
    h.slow_release(0, 7, &[], &[1], 2).barrier(sess(0), "f", &[("x", cs(1, 0))], slow(&[]), 3);
    flags(
        barrier::barrier_invariant(&h.h),
        "barrier",
        "left out of the DM-set [n2], which did not hold 1.0.0",
    );
    // Nobody acked the SLOW_RELEASE (or it was never sent) when the value left.
    let mut h = x_held_by(&[0, 1]);
    h.slow_release(0, 7, &[2], &[], 2).barrier(sess(0), "f", &[("x", cs(1, 0))], slow(&[2]), 3);
    flags(
        barrier::barrier_invariant(&h.h),
        "barrier",
        "only 0 node(s) had acked its SLOW_RELEASE (round 7)",
    );
    let mut h = x_held_by(&[0, 1]);
    h.barrier(sess(0), "f", &[("x", cs(1, 0))], slow(&[2]), 3);
    flags(
        barrier::barrier_invariant(&h.h),
        "barrier",
        "SLOW_RELEASE round 7, which never left the node",
    );
}

/// n0's bit for n1 goes down (n2's DM-set), an acquire of n1 observes it, and n1 bumps its
/// epoch (sampled or not) and resets the bit.
fn reset_by_owner(sampled: bool) -> B {
    let mut h = B::new(3);
    h.dbit(0, 1, DbitChange::Down { from: NodeId(2), req: 1 }, 1).dbit(
        0,
        1,
        DbitChange::Owner { acq: acq(1, 5) },
        2,
    );
    h.bump(acq(1, 5), 1, 10, sampled, 3).reset_bit(acq(1, 5), 3);
    h.dbit(0, 1, DbitChange::Up { acq: acq(1, 5), owners: vec![acq(1, 5)] }, 4);
    h
}

#[test]
fn reset_safety_flags_a_reset_by_a_non_owner_or_without_an_epoch_increment() {
    clean(delinquency::reset_safety(&reset_by_owner(true).h));
    // The increment the core reported does not show in the sampled epoch.
    flags(
        delinquency::reset_safety(&reset_by_owner(false).h),
        "reset-safety",
        "reported an epoch increment to 1 its machine epoch does not show",
    );
    // A down bit nobody observed.
    let mut h = B::new(3);
    h.dbit(0, 1, DbitChange::Down { from: NodeId(2), req: 1 }, 1)
        .bump(acq(1, 5), 1, 10, true, 2)
        .reset_bit(acq(1, 5), 2);
    h.dbit(0, 1, DbitChange::Up { acq: acq(1, 5), owners: vec![] }, 3);
    flags(
        delinquency::reset_safety(&h.h),
        "reset-safety",
        "n0 set dbit[n1] back to up for acquire n1/s0#5, but the bit was down",
    );
    // A SLOW_RELEASE naming n1 came in between the observation and the reset (§5.7.5).
    let mut h = B::new(3);
    h.dbit(0, 1, DbitChange::Down { from: NodeId(2), req: 1 }, 1).dbit(
        0,
        1,
        DbitChange::Owner { acq: acq(1, 5) },
        2,
    );
    h.dbit(0, 1, DbitChange::Down { from: NodeId(2), req: 2 }, 3)
        .bump(acq(1, 5), 1, 10, true, 4)
        .reset_bit(acq(1, 5), 4);
    h.dbit(0, 1, DbitChange::Up { acq: acq(1, 5), owners: vec![] }, 5);
    flags(delinquency::reset_safety(&h.h), "reset-safety", "the bit was down");
    // Another acquire of the session replaced the owner.
    let mut h = B::new(3);
    h.dbit(0, 1, DbitChange::Down { from: NodeId(2), req: 1 }, 1).dbit(
        0,
        1,
        DbitChange::Owner { acq: acq(1, 5) },
        2,
    );
    h.dbit(0, 1, DbitChange::Owner { acq: acq(1, 6) }, 3)
        .bump(acq(1, 5), 1, 10, true, 4)
        .reset_bit(acq(1, 5), 4);
    h.dbit(0, 1, DbitChange::Up { acq: acq(1, 5), owners: vec![acq(1, 6)] }, 5);
    flags(
        delinquency::reset_safety(&h.h),
        "reset-safety",
        "not a recorded owner (owners [n1/s0#6]",
    );
    // The owner's node sent the RESET_BIT without incrementing its epoch (§5.8 E5).
    let mut h = B::new(3);
    h.dbit(0, 1, DbitChange::Down { from: NodeId(2), req: 1 }, 1).dbit(
        0,
        1,
        DbitChange::Owner { acq: acq(1, 5) },
        2,
    );
    h.reset_bit(acq(1, 5), 3).dbit(
        0,
        1,
        DbitChange::Up { acq: acq(1, 5), owners: vec![acq(1, 5)] },
        4,
    );
    flags(
        delinquency::reset_safety(&h.h),
        "reset-safety",
        "without first incrementing its machine epoch",
    );
}

#[test]
fn self_delinquency_flags_a_clear_outside_an_epoch_increment_step() {
    let mut h = B::new(3);
    h.self_delinquent(1, SelfDelinquentChange::Set { from: NodeId(0), req: 3 }, 4, 1);
    h.self_delinquent(1, SelfDelinquentChange::Cleared { acq: acq(1, 2) }, 9, 2).bump(
        acq(1, 2),
        1,
        9,
        true,
        2,
    );
    clean(delinquency::self_delinquency(&h.h));
    h.self_delinquent(1, SelfDelinquentChange::Set { from: NodeId(0), req: 4 }, 12, 3);
    h.self_delinquent(1, SelfDelinquentChange::Cleared { acq: acq(1, 3) }, 13, 4);
    flags(
        delinquency::self_delinquency(&h.h),
        "self-delinquency",
        "n1 cleared self_delinquent for acquire n1/s0#3 without incrementing",
    );
}

#[test]
fn registry_flags_an_entry_going_down() {
    let mut h = good();
    h.register(2, RmwId { session: sess(1), seq: 2 }, 20);
    clean(registry::registry_monotonic(&h.h));
    let seq = h.next_seq();
    h.h.registrations.push(Registration {
        seq,
        at: at(21),
        node: NodeId(2),
        id: RmwId { session: sess(1), seq: 1 },
        prev: 2,
    });
    flags(
        registry::registry_monotonic(&h.h),
        "registry",
        "n2's rmw_registry[n1/s0] went from 2 to 1",
    );
}

#[test]
fn registry_flags_an_ack_or_a_decision_of_the_next_slot_without_the_rmw_registered() {
    // In `good`, slot 1 of "c" is n1's FAA, registered by n0 and n1 when committed.
    let mut h = good();
    h.promise(1, "c", 3, 20);
    clean(registry::registry_quorum(&h.h));
    h.promise(2, "c", 2, 21);
    flags(
        registry::registry_quorum(&h.h),
        "registry",
        "n2 acked a proposal for slot 2 of key \"c\"",
    );
    // Slot 2 of "d" is decided while only its committer registered slot 1's RMW.
    let mut h = good();
    let (x, y) = (h.next_rmw(sess(0)), h.next_rmw(sess(0)));
    h.commit_only(0, "d", 1, x, num(1), rcs(0, 0, 1), 20).register(0, x, 20);
    h.commit_only(0, "d", 2, y, num(2), rcs(0, 0, 2), 21);
    flags(
        registry::registry_quorum(&h.h),
        "registry",
        "n0 committed slot 2 of key \"d\" when only 1 node(s) had registered",
    );
}
