//! The RMW registry (Kite §7 inv. 17, §5.1.2, §5.6 P-DEDUP), from the cores' reports of every
//! registry change (`History::registrations`) and acceptor ack (`History::promises`), and the
//! global commit log.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use strata_wire::{NodeId, RmwId, SessionId};

use super::{fmt_key, Violation};
use crate::history::{CommitSeen, History, PromiseSeen};

/// Kite §7 inv. 17, first half: a registry entry never decreases. Each report must continue
/// from the last one of its `(node, session)` (a gap would hide a change) and go up.
pub fn registry_monotonic(h: &History) -> Vec<Violation> {
    let mut last: HashMap<(NodeId, SessionId), u64> = HashMap::new();
    let mut out = Vec::new();
    for r in &h.registrations {
        let prev = last.insert((r.node, r.id.session), r.id.seq).unwrap_or(0);
        if r.prev != prev || r.id.seq <= prev {
            out.push(Violation {
                checker: "registry",
                at: Some(r.at),
                detail: format!(
                    "{}'s rmw_registry[{}] went from {} to {} (last seen {prev})",
                    r.node, r.id.session, r.prev, r.id.seq
                ),
            });
        }
    }
    out
}

/// Kite §7 inv. 17, second half, as P-DEDUP (§5.6) uses it: for every RMW `X` decided in slot
/// `t` of a key (the commit log), (a) every acceptor that acks a proposal for slot `t + 1` has
/// `X` registered by then (it acts only on slot `lc + 1`, and every change of `lc` registers
/// `lc_rmw`, §5.1.2), and (b) when slot `t + 1` is decided (its first commit), a quorum has `X`
/// registered — so every later propose of `X` meets it (§5.6 M4.a).
///
/// §7's wording, "a quorum has it registered at the moment the first acceptor acks a proposal
/// for slot `t + 1`", is stronger than the protocol guarantees when `N >= 4`: a node that
/// learns slot `t` from a `COMMIT` may propose slot `t + 1` at once, and its own ack can come
/// while fewer than a quorum — as few as itself and the committer — have `X` registered
/// ([`first_ack_quorum_shortfalls`]). The safety argument needs the quorum only by the time slot
/// `t + 1` can be decided, which is (b).
/// (Needs the cluster size: a history that does not record it is not checked.)
pub fn registry_quorum(h: &History) -> Vec<Violation> {
    if h.nodes == 0 {
        return Vec::new();
    }
    let (registered, decided) = (Registered::new(h), Decided::new(h));
    let mut out = unregistered_acks(&registered, &decided, &h.promises);
    out.extend(decisions_before_a_quorum_registered(h, &registered, &decided));
    out
}

/// (a): an acceptor acks slot `t + 1` only with slot `t`'s RMW registered.
fn unregistered_acks(
    registered: &Registered,
    decided: &Decided<'_>,
    promises: &[PromiseSeen],
) -> Vec<Violation> {
    let unregistered = promises.iter().filter_map(|p| {
        let x = decided.before(&p.key, p.slot)?;
        (!registered.at(x, p.node, p.seq)).then_some((p, x))
    });
    unregistered
        .map(|(p, x)| Violation {
            checker: "registry",
            at: Some(p.at),
            detail: format!(
                "{} acked a proposal for slot {} of {} ({:?}) without {x:?}, decided in slot {}, registered",
                p.node,
                p.slot,
                fmt_key(&p.key),
                p.ballot,
                p.slot - 1
            ),
        })
        .collect()
}

/// (b): slot `t + 1` is decided only once a quorum has slot `t`'s RMW registered.
fn decisions_before_a_quorum_registered(
    h: &History,
    registered: &Registered,
    decided: &Decided<'_>,
) -> Vec<Violation> {
    let q = h.quorum();
    let short = decided.first_commit.iter().filter_map(|(&(key, slot), c)| {
        let x = decided.before(key, slot)?;
        let holders = registered.nodes_at(h, x, c.seq);
        (holders < q).then_some((c, x, holders))
    });
    short
        .map(|(c, x, holders)| Violation {
            checker: "registry",
            at: Some(c.at),
            detail: format!(
                "{} committed slot {} of {} when only {holders} node(s) had registered {x:?}, decided in slot {}; a quorum is {q}",
                c.from,
                c.slot,
                fmt_key(&c.key),
                c.slot - 1
            ),
        })
        .collect()
}

/// §7 inv. 17's literal second half: the first ack of a proposal for slot `t + 1` comes when a
/// quorum has slot `t`'s RMW registered. Not among [`super::CHECKERS`]: the protocol does not
/// promise it (see [`registry_quorum`]); `tests/swarm.rs` pins a seed that shows the gap.
pub fn first_ack_quorum_shortfalls(h: &History) -> Vec<Violation> {
    if h.nodes == 0 {
        return Vec::new();
    }
    let q = h.quorum();
    let registered = Registered::new(h);
    let decided = Decided::new(h);
    let mut first_promise: BTreeMap<(&Bytes, u32), &PromiseSeen> = BTreeMap::new();
    for p in &h.promises {
        first_promise.entry((&p.key, p.slot)).or_insert(p);
    }
    let mut out = Vec::new();
    for ((key, slot), p) in first_promise {
        let Some(x) = decided.before(key, slot) else { continue };
        let holders = registered.nodes_at(h, x, p.seq);
        if holders < q {
            out.push(Violation {
                checker: "registry-first-ack",
                at: Some(p.at),
                detail: format!(
                    "{} acked the first proposal for slot {slot} of {} when only {holders} node(s) had registered {x:?}; a quorum is {q}",
                    p.node,
                    fmt_key(key)
                ),
            });
        }
    }
    out
}

/// The decided slots of the commit log (every commit of a slot names one RMW,
/// `paxos_agreement`).
struct Decided<'h> {
    /// The first commit of every decided `(key, slot)`.
    first_commit: BTreeMap<(&'h Bytes, u32), &'h CommitSeen>,
}

impl<'h> Decided<'h> {
    fn new(h: &'h History) -> Decided<'h> {
        let mut first_commit = BTreeMap::new();
        for c in &h.commits {
            first_commit.entry((&c.key, c.slot)).or_insert(c);
        }
        Decided { first_commit }
    }

    /// The RMW decided in the slot before `slot` of `key`, if the log knows it.
    fn before(&self, key: &'h Bytes, slot: u32) -> Option<RmwId> {
        let t = slot.checked_sub(1)?;
        self.first_commit.get(&(key, t)).map(|c| c.rmw_id)
    }
}

/// Each node's registry entry of each session as the record order went.
struct Registered {
    /// `(session, node)` -> `(seq, entry)`, by `seq`; entries go up (`registry_monotonic`).
    by_entry: HashMap<(SessionId, NodeId), Vec<(u64, u64)>>,
}

impl Registered {
    fn new(h: &History) -> Registered {
        let mut by_entry: HashMap<(SessionId, NodeId), Vec<(u64, u64)>> = HashMap::new();
        for r in &h.registrations {
            by_entry.entry((r.id.session, r.node)).or_default().push((r.seq, r.id.seq));
        }
        Registered { by_entry }
    }

    /// Whether `node` had `x` registered (an entry `>= x.seq` for its session) before record
    /// `seq`.
    fn at(&self, x: RmwId, node: NodeId, seq: u64) -> bool {
        let entries = self.by_entry.get(&(x.session, node)).map_or(&[][..], Vec::as_slice);
        entries.iter().take_while(|&&(s, _)| s < seq).any(|&(_, e)| e >= x.seq)
    }

    /// How many nodes had `x` registered before record `seq`.
    fn nodes_at(&self, h: &History, x: RmwId, seq: u64) -> usize {
        (0..h.nodes).map(NodeId).filter(|&n| self.at(x, n, seq)).count()
    }
}
