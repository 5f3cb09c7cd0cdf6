//! Liveness (G6, Kite §7 prop 9): after healing, with every live node connected and delays
//! bounded, every operation submitted to a session on a live node completes, every such
//! session keeps making progress, and the re-sending of writes settles.

use std::collections::BTreeSet;

use strata_wire::NodeId;

use super::{fmt_key, Violation};
use crate::history::{History, Outcome};

pub fn completion(h: &History) -> Vec<Violation> {
    let mut out = Vec::new();
    let live: Option<BTreeSet<NodeId>> =
        h.final_state.as_ref().map(|f| f.live.iter().copied().collect());
    for op in &h.ops {
        let problem = match &op.outcome {
            // The workload only sends valid requests: any error is a failure of the node.
            Outcome::Failed { error, .. } => format!("failed: {error}"),
            Outcome::Pending if live.as_ref().is_some_and(|l| l.contains(&op.node)) => {
                "never completed although its node is live and the network healed".to_string()
            }
            _ => continue,
        };
        out.push(Violation {
            checker: "liveness",
            at: op.completed_at().or(Some(op.invoke)),
            detail: format!(
                "{} #{} ({} of {}) {problem}",
                op.session,
                op.pos,
                op.kind.name(),
                fmt_key(&op.key)
            ),
        });
    }
    let (Some(heal), Some(live)) = (h.heal_at, live) else { return out };
    // A session its client gave up (a lost reply, rifl.md §5.1) owes nothing.
    for s in h.sessions.iter().filter(|s| live.contains(&s.node) && !h.abandoned.contains(s)) {
        let progressed =
            h.ops.iter().any(|op| op.session == *s && op.invoke >= heal && op.witness().is_some());
        if !progressed {
            out.push(Violation {
                checker: "liveness",
                at: None,
                detail: format!(
                    "session {s} on live {} completed no operation after healing",
                    s.node
                ),
            });
        }
    }
    out
}

/// Kite §5.1.7: a pending write is re-sent until every peer acknowledged it, then dropped. With
/// no node crashed, the drained network must leave no pending write behind. (A crashed peer
/// never acknowledges, so its writes' records rightly stay; this check then says nothing.)
pub fn quiescence(h: &History) -> Vec<Violation> {
    let Some(fin) = h.final_state.as_ref().filter(|f| f.crashed.is_empty()) else {
        return Vec::new();
    };
    fin.pending_writes
        .iter()
        .filter(|(_, &n)| n > 0)
        .map(|(node, n)| Violation {
            checker: "quiescence",
            at: None,
            detail: format!("{node} still re-sends {n} write(s) after the network healed and drained, with every peer alive"),
        })
        .collect()
}
