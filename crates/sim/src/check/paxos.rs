//! Paxos agreement (Kite §7 inv. 13) from the global commit log: every distinct `COMMIT` any
//! node sent, and every tuple any acceptor accepted.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use strata_wire::{Ballot, Carstamp, NodeId, RmwId};

use super::{fmt_key, Violation};
use crate::history::{fmt_value, CommitSeen, History, Value};

/// Kite §7 inv. 13, first two sentences: per `(key, slot)`, every `COMMIT` carries the same
/// `rmw_id` and every real commit the same `(base, value)`; an `rmw_id` is committed in at most
/// one `(key, slot)`. Also §4 msg 8: a catch-up commit carries a version with `pno` 0 or `slot`.
pub fn paxos_agreement(h: &History) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut first: BTreeMap<(&Bytes, u32), &CommitSeen> = BTreeMap::new();
    let mut real: BTreeMap<(&Bytes, u32), &CommitSeen> = BTreeMap::new();
    let mut slots_of: HashMap<RmwId, (&Bytes, u32, &CommitSeen)> = HashMap::new();
    let mut fail = |c: &CommitSeen, detail: String| {
        out.push(Violation { checker: "paxos-agreement", at: Some(c.at), detail })
    };
    for c in &h.commits {
        let slot = (&c.key, c.slot);
        let f = *first.entry(slot).or_insert(c);
        if f.rmw_id != c.rmw_id {
            fail(
                c,
                format!(
                    "slot {} of {} committed for {:?} by {} and for {:?} by {}",
                    c.slot,
                    fmt_key(&c.key),
                    f.rmw_id,
                    f.from,
                    c.rmw_id,
                    c.from
                ),
            );
        }
        if c.is_real() {
            let r = *real.entry(slot).or_insert(c);
            if (r.cs, &r.value) != (c.cs, &c.value) {
                fail(
                    c,
                    format!(
                        "slot {} of {} committed as {} = {} by {} and as {} = {} by {}",
                        c.slot,
                        fmt_key(&c.key),
                        r.cs,
                        fmt_value(&r.value),
                        r.from,
                        c.cs,
                        fmt_value(&c.value),
                        c.from
                    ),
                );
            }
        } else if c.cs.pno != 0 {
            fail(c, format!("{} sent a catch-up commit for slot {} of {} carrying {}, a version of another slot", c.from, c.slot, fmt_key(&c.key), c.cs));
        }
        let s = *slots_of.entry(c.rmw_id).or_insert((&c.key, c.slot, c));
        if (s.0, s.1) != (&c.key, c.slot) {
            fail(
                c,
                format!(
                    "{:?} committed in slot {} of {} and in slot {} of {} (an RMW taking effect twice)",
                    c.rmw_id,
                    s.1,
                    fmt_key(s.0),
                    c.slot,
                    fmt_key(&c.key)
                ),
            );
        }
    }
    out
}

/// Kite §7 inv. 13, last sentence: every committed tuple was accepted by a quorum at one ballot
/// before the first commit of its slot was sent. (Needs the cluster size: a history that does
/// not record it is not checked.)
pub fn paxos_quorum(h: &History) -> Vec<Violation> {
    if h.nodes == 0 {
        return Vec::new();
    }
    let q = h.quorum();
    /// A slot of a key and the tuple `(rmw_id, base, value)` proposed for it.
    type SlotTuple<'a> = (&'a Bytes, u32, (RmwId, strata_wire::Llc, &'a Value));
    /// Per ballot, who accepted, in record order.
    type ByBallot = BTreeMap<Ballot, Vec<(u64, NodeId)>>;
    let mut accepted: HashMap<SlotTuple<'_>, ByBallot> = HashMap::new();
    for a in &h.acceptances {
        accepted
            .entry((&a.key, a.slot, (a.rmw_id, a.base, &a.value)))
            .or_default()
            .entry(a.ballot)
            .or_default()
            .push((a.seq, a.node));
    }
    let mut done: BTreeSet<(&Bytes, u32)> = BTreeSet::new();
    let mut out = Vec::new();
    for c in h.commits.iter().filter(|c| c.is_real()) {
        if !done.insert((&c.key, c.slot)) {
            continue; // only the first commit of a slot must follow the quorum
        }
        let tuple = (c.rmw_id, c.cs.llc, &c.value);
        let best = accepted
            .get(&(&c.key, c.slot, tuple))
            .map(|by_ballot| {
                by_ballot
                    .iter()
                    .map(|(b, nodes)| {
                        let before: BTreeSet<NodeId> =
                            nodes.iter().filter(|(seq, _)| *seq < c.seq).map(|(_, n)| *n).collect();
                        (before.len(), *b)
                    })
                    .max()
                    .unwrap_or((0, Ballot::ZERO))
            })
            .unwrap_or((0, Ballot::ZERO));
        if best.0 < q {
            out.push(Violation {
                checker: "paxos-quorum",
                at: Some(c.at),
                detail: format!(
                    "{} committed slot {} of {} ({:?}, {}) after only {} acceptor(s) accepted it at one ballot (best {:?}); a quorum is {q}",
                    c.from,
                    c.slot,
                    fmt_key(&c.key),
                    c.rmw_id,
                    Carstamp { llc: c.cs.llc, pno: c.slot },
                    best.0,
                    best.1
                ),
            });
        }
    }
    out
}
