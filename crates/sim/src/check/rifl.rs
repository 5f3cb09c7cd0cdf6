//! RIFL's exactly-once guarantees, judged from outside (`specs/rifl.md` §7 inv. 1, 2, 5, 8).
//!
//! The clients send every mutating request with an envelope and re-send it with the same rpc
//! id when a connection breaks (`workload`); the history keeps every send ([`Attempt`]) with
//! the node's answer, delivered or lost. An *effect* of an rpc is a version it created: a plain
//! version (`VersionCreated`) made by one of its sends, or the version of a Paxos slot decided
//! for an RMW id one of its sends executed under (the first real `COMMIT` of the slot).
//!
//! * inv. 1, at most once: every rpc has at most one effect; on a key only FAAs write (the
//!   workload's counters) the newest version holds the sum of the deltas of the FAAs that took
//!   effect, each counted once, and every acknowledged FAA took effect;
//! * inv. 2, stable result: every `Ok` answer to an rpc — lost or delivered — is the same;
//! * inv. 5, stale rejection: `Stale` only for an rpc its client had acknowledged, i.e. whose
//!   final answer it had received before (a client never re-sends an acknowledged rpc);
//! * inv. 8, window: every envelope keeps `first_incomplete <= seq < first_incomplete + 512`
//!   (`Rifl::check`), and one rpc id names one operation.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use strata_wire::{Carstamp, RpcId};

use super::index::{describe, Index};
use super::{fmt_key, Violation};
use crate::history::{value_as_u64, Attempt, History, OpKind, Outcome};

const NAME: &str = "exactly-once";

/// What made an effect: a plain version (by its carstamp) or a decided RMW id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Effect {
    Version(Carstamp),
    Rmw(strata_wire::RmwId, u32),
}

/// Inv. 1, 2, 5, 8 for RMWs (FAA, CAS), and inv. 5 and 8 for every rpc.
pub fn exactly_once(h: &History) -> Vec<Violation> {
    check(h, true)
}

/// Inv. 1 and 2 for plain writes, deletes and releases. The rc engine does not keep them yet
/// (a retry at a node its first execution's version has not reached executes again), so a
/// swarm shows these as notes, and as violations with `--strict-rifl`.
pub fn exactly_once_plain(h: &History) -> Vec<Violation> {
    check(h, false)
}

/// `rmw`: judge RMW operations (and what concerns every rpc); else plain ones only.
fn check(h: &History, rmw: bool) -> Vec<Violation> {
    let mut out = Vec::new();
    let name = if rmw { NAME } else { "exactly-once-plain" };
    let mut fail = |at, detail: String| out.push(Violation { checker: name, at, detail });
    let judged = |i: usize| h.ops[i].kind.is_rmw() == rmw;
    // Sends by rpc id, and the one operation each id names.
    let mut by_rpc: BTreeMap<RpcId, Vec<&Attempt>> = BTreeMap::new();
    for a in &h.attempts {
        let Some(e) = a.rifl else { continue };
        if let Err(why) = if rmw { e.check() } else { Ok(()) } {
            fail(
                Some(a.sent),
                format!(
                    "{} sent {} with first_incomplete {}: {why} (inv. 8)",
                    describe(h, a.op),
                    e.rpc,
                    e.first_incomplete
                ),
            );
        }
        by_rpc.entry(e.rpc).or_default().push(a);
    }
    let mut rpc_of: HashMap<usize, RpcId> = HashMap::new();
    for (rpc, sends) in &by_rpc {
        let ops: BTreeSet<usize> = sends.iter().map(|a| a.op).collect();
        rpc_of.insert(sends[0].op, *rpc);
        if !(judged(sends[0].op) || rmw && ops.len() > 1) {
            continue;
        }
        if ops.len() > 1 {
            let names: Vec<String> = ops.iter().map(|&i| describe(h, i)).collect();
            fail(
                Some(sends[0].sent),
                format!("rpc {rpc} names {} operations: {}", ops.len(), names.join(", ")),
            );
        }
        // Inv. 2: one result, whoever answered. A weak CAS that failed locally is a relaxed
        // read (Kite §5.6 M0): no effect, no record, a retry reads again.
        let local_fail = |w: &crate::history::Witness| {
            matches!(h.ops[sends[0].op].kind, OpKind::Cas { weak: true, .. }) && w.written.is_none()
        };
        let oks: Vec<(&Attempt, _)> = sends
            .iter()
            .filter_map(|a| a.reply.as_ref().and_then(|r| r.result.as_ref().ok()).map(|w| (*a, w)))
            .filter(|(_, w)| !local_fail(w))
            .collect();
        if let Some((first, w)) = oks.first() {
            if let Some((other, x)) = oks.iter().find(|(_, x)| x != w) {
                fail(
                    other.reply.as_ref().map(|r| r.at),
                    format!(
                        "rpc {rpc} ({}) answered differently: {w:?} by {} at {} but {x:?} by {} at {} (inv. 2)",
                        describe(h, first.op),
                        first.session,
                        first.node,
                        other.session,
                        other.node
                    ),
                );
            }
        }
        // Inv. 5: Stale only once the client had its final answer.
        for a in sends.iter().filter(|_| rmw) {
            let Some(r) =
                a.reply.as_ref().filter(|r| r.result.as_ref().is_err_and(|e| e == "Stale"))
            else {
                continue;
            };
            let acked = matches!(h.ops[a.op].outcome, Outcome::Done { at, .. } if at < r.at);
            if !acked {
                fail(Some(r.at), format!("rpc {rpc} ({}) was answered Stale by {} although its client never acknowledged it (inv. 5)", describe(h, a.op), a.node));
            }
        }
    }
    // Inv. 1: effects per operation.
    let idx = Index::new(h);
    let mut effects: BTreeMap<usize, BTreeSet<Effect>> = BTreeMap::new();
    let mut by_value: HashMap<(&[u8], Bytes), usize> = HashMap::new();
    for (i, op) in h.ops.iter().enumerate() {
        if let Some(Some(v)) = op.kind.written_value() {
            by_value.insert((&op.key[..], v), i);
        }
    }
    for c in h.creations.iter().filter(|c| c.cs.pno == 0) {
        let op = match &c.value {
            // Written values are unique per operation (the workload's `session#pos`).
            Some(v) => by_value.get(&(&c.key[..], v.clone())).copied(),
            // A delete: the one delete of the key being sent in the creating session then.
            None => {
                let live: BTreeSet<usize> = h
                    .attempts
                    .iter()
                    .filter(|a| {
                        a.session == c.session
                            && a.sent <= c.at
                            && a.reply.as_ref().is_none_or(|r| r.at >= c.at)
                    })
                    .map(|a| a.op)
                    .filter(|&i| h.ops[i].key == c.key && h.ops[i].kind == OpKind::Delete)
                    .collect();
                (live.len() == 1).then(|| *live.first().expect("one"))
            }
        };
        if let Some(i) = op.filter(|i| rpc_of.contains_key(i)) {
            effects.entry(i).or_default().insert(Effect::Version(c.cs));
        }
    }
    let mut slots: BTreeMap<(&[u8], u32), strata_wire::RmwId> = BTreeMap::new();
    for c in h.commits.iter().filter(|c| c.is_real() && c.slot > 0) {
        slots.entry((&c.key[..], c.slot)).or_insert(c.rmw_id);
    }
    for (&(_, slot), id) in &slots {
        if let Some(&i) = idx.rmw_op.get(id).filter(|i| rpc_of.contains_key(i)) {
            effects.entry(i).or_default().insert(Effect::Rmw(*id, slot));
        }
    }
    for (&i, e) in effects.iter().filter(|(&i, _)| judged(i)) {
        if e.len() > 1 {
            let sends = by_rpc.get(&rpc_of[&i]).map_or(0, Vec::len);
            let what: Vec<String> = e
                .iter()
                .map(|e| match e {
                    Effect::Version(cs) => format!("version {cs}"),
                    Effect::Rmw(id, slot) => format!("slot {slot} for {}#{}", id.session, id.seq),
                })
                .collect();
            let op = &h.ops[i];
            fail(
                op.completed_at().or(Some(op.invoke)),
                format!(
                    "rpc {} ({}, sent {sends} times) took effect {} times: {} (inv. 1)",
                    rpc_of[&i],
                    describe(h, i),
                    e.len(),
                    what.join(", ")
                ),
            );
        }
    }
    // Inv. 1 on counters: the newest value counts every FAA that took effect, once.
    let mut counters: BTreeSet<&[u8]> =
        h.ops.iter().filter(|o| matches!(o.kind, OpKind::Faa { .. })).map(|o| &o.key[..]).collect();
    for op in h.ops.iter().filter(|o| o.kind.may_write() && !matches!(o.kind, OpKind::Faa { .. })) {
        counters.remove(&op.key[..]);
    }
    // Only counters every increment of which was a linearizable RPC.
    for (i, op) in h
        .ops
        .iter()
        .enumerate()
        .filter(|(i, o)| matches!(o.kind, OpKind::Faa { .. }) && !rpc_of.contains_key(i))
    {
        let _ = i;
        counters.remove(&op.key[..]);
    }
    for key in counters.into_iter().filter(|_| rmw) {
        let top = h.creations.iter().filter(|c| c.key == key).max_by_key(|c| c.cs);
        let fin = top.map_or(0, |c| value_as_u64(&c.value));
        let (mut sum, mut took, mut missing) = (0u64, 0usize, Vec::new());
        for (i, op) in
            h.ops.iter().enumerate().filter(|(i, o)| o.key == key && rpc_of.contains_key(i))
        {
            let OpKind::Faa { delta } = op.kind else { continue };
            if effects.get(&i).is_some_and(|e| !e.is_empty()) {
                sum = sum.wrapping_add(delta);
                took += 1;
            } else if op.witness().is_some_and(|w| w.written.is_some()) {
                missing.push(describe(h, i));
            }
        }
        if fin != sum {
            fail(None, format!("counter {} ends at {fin}, but the {took} FAAs that took effect add {sum}, each counted once (inv. 1)", fmt_key(key)));
        }
        if !missing.is_empty() {
            fail(
                None,
                format!(
                    "counter {}: acknowledged {} never took effect",
                    fmt_key(key),
                    missing.join(", ")
                ),
            );
        }
    }
    out
}
