//! The barrier invariant (Kite §7 inv. 14, §5.1.6), from outside: what each replica held
//! (`History::replica_changes`) and the `SLOW_RELEASE`s and acks on the wire, at the moment a
//! release's value round or an RMW's own `ACCEPT` first left its node (`History::barriers`).

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use strata_wire::{Carstamp, NodeId};

use super::{fmt_key, fmt_nodes, Violation};
use crate::history::{BarrierPath, BarrierSeen, History, SlowReleaseSeen, ValueRound};

/// Kite §7 inv. 14: when a release's value-round `WRITE` (or an RMW's own `ACCEPT`) is first
/// sent, every prior write of the session (§5.1.6 `P`: its writes and acquire obligations) is
/// held by all nodes (B3); or it is held by a quorum and a quorum acked a `SLOW_RELEASE` whose
/// DM-set names every node that did not hold it, sent after the quorum held it (B4, K-F1).
/// The barrier's own account says only which path it took and which `SLOW_RELEASE` it sent;
/// who held what, and who acked, is read from the replicas' states and the wire. (Needs the
/// cluster size: a history that does not record it is not checked.)
pub fn barrier_invariant(h: &History) -> Vec<Violation> {
    if h.nodes == 0 {
        return Vec::new();
    }
    let held = Holdings::new(h);
    let slow: HashMap<(NodeId, u64), &SlowReleaseSeen> =
        h.slow_releases.iter().map(|sr| ((sr.from, sr.req), sr)).collect();
    let mut out = Vec::new();
    for b in &h.barriers {
        let problems = match b.path {
            BarrierPath::Fast => fast_problems(h, &held, b),
            BarrierPath::Slow { req, .. } => match slow.get(&(b.node, req)) {
                Some(sr) => slow_problems(h, &held, b, sr),
                None => {
                    vec![format!("passed by SLOW_RELEASE round {req}, which never left the node")]
                }
            },
        };
        out.extend(problems.into_iter().map(|p| Violation {
            checker: "barrier",
            at: Some(b.at),
            detail: format!(
                "{}'s {} on {} let its value out, but {p}",
                b.session,
                round_name(b.round),
                fmt_key(&b.key)
            ),
        }));
    }
    out
}

/// B3: every prior write is held by every node when the value leaves.
fn fast_problems(h: &History, held: &Holdings<'_>, b: &BarrierSeen) -> Vec<String> {
    b.prior
        .iter()
        .filter_map(|(key, cs)| {
            let missing = held.lacking(h, key, *cs, b.seq);
            (!missing.is_empty()).then(|| {
                format!(
                    "its barrier passed fast while {} did not hold {cs} of {}",
                    fmt_nodes(&missing),
                    fmt_key(key)
                )
            })
        })
        .collect()
}

/// B4: when the `SLOW_RELEASE` left, every prior write was held by a quorum (B4.a, K-F1) and
/// every node that did not hold it was in the DM-set (B4.b); a quorum — the sender and `Q - 1`
/// ackers — knew the DM-set before the value left (B4.d).
fn slow_problems(
    h: &History,
    held: &Holdings<'_>,
    b: &BarrierSeen,
    sr: &SlowReleaseSeen,
) -> Vec<String> {
    let q = h.quorum();
    let mut problems = Vec::new();
    for (key, cs) in &b.prior {
        let missing = held.lacking(h, key, *cs, sr.seq);
        let holders = h.nodes as usize - missing.len();
        if holders < q {
            problems.push(format!(
                "its SLOW_RELEASE (round {}) left when only {holders} node(s) held {cs} of {}, below a quorum of {q} (K-F1)",
                sr.req,
                fmt_key(key)
            ));
        }
        let uncovered: Vec<NodeId> = missing.into_iter().filter(|n| !sr.names(*n)).collect();
        if !uncovered.is_empty() {
            problems.push(format!(
                "its SLOW_RELEASE (round {}) left out of the DM-set {}, which did not hold {cs} of {}",
                sr.req,
                fmt_nodes(&uncovered),
                fmt_key(key)
            ));
        }
    }
    let acked = sr.acks.iter().filter(|a| a.seq < b.seq).count();
    if acked + 1 < q {
        problems.push(format!("only {acked} node(s) had acked its SLOW_RELEASE (round {}); a quorum is {q} with the sender", sr.req));
    }
    problems
}

fn round_name(round: ValueRound) -> &'static str {
    match round {
        ValueRound::Write { .. } => "release",
        ValueRound::Accept { .. } => "RMW",
    }
}

/// What each replica held, as the record order (`seq`) went: per node and key, the highest
/// version held so far after each change.
struct Holdings<'h> {
    /// `(node, key)` -> `(seq, highest cs held up to and including that record)`, by `seq`.
    by_replica: BTreeMap<(NodeId, &'h Bytes), Vec<(u64, Carstamp)>>,
}

impl<'h> Holdings<'h> {
    fn new(h: &'h History) -> Holdings<'h> {
        let mut by_replica: BTreeMap<(NodeId, &Bytes), Vec<(u64, Carstamp)>> = BTreeMap::new();
        for ch in &h.replica_changes {
            let changes = by_replica.entry((ch.node, &ch.key)).or_default();
            let highest = changes.last().map_or(ch.cs, |&(_, cs)| cs.max(ch.cs));
            changes.push((ch.seq, highest));
        }
        Holdings { by_replica }
    }

    /// Whether `node` held a version of `key` at least `cs` before record `seq`. (A replica
    /// never goes back, `replica_monotonic`; the running maximum keeps this a binary search.)
    fn held_before(&self, node: NodeId, key: &Bytes, cs: Carstamp, seq: u64) -> bool {
        let Some(changes) = self.by_replica.get(&(node, key)) else { return cs == Carstamp::ZERO };
        let before = changes.partition_point(|&(s, _)| s < seq);
        cs == Carstamp::ZERO || before > 0 && changes[before - 1].1 >= cs
    }

    /// The nodes that did not hold `cs` of `key` before record `seq`.
    fn lacking(&self, h: &History, key: &Bytes, cs: Carstamp, seq: u64) -> Vec<NodeId> {
        (0..h.nodes).map(NodeId).filter(|&n| !self.held_before(n, key, cs, seq)).collect()
    }
}
