//! Session-order properties: per-key session order (G2, Kite §7 prop 3) and completions
//! reported in session order (Kite §2.3, §5.1.8 rule 5).

use std::collections::BTreeMap;

use bytes::Bytes;
use strata_wire::{Carstamp, SessionId};

use super::{fmt_key, Violation};
use crate::history::{History, Op, Outcome};

/// Each session's operations in session order.
fn by_session(h: &History) -> BTreeMap<SessionId, Vec<&Op>> {
    let mut sessions: BTreeMap<SessionId, Vec<&Op>> = BTreeMap::new();
    for op in &h.ops {
        sessions.entry(op.session).or_default().push(op);
    }
    for ops in sessions.values_mut() {
        ops.sort_by_key(|op| op.pos);
    }
    sessions
}

/// G2, Kite §7 prop 3: within a session, on one key, with `c(a)` = the version `a` created if it
/// writes, else the one it observed: a later read observes `>= c(a)`, a later write creates
/// `> c(a)`, for every earlier `a` (so a read after the session's own write returns that write
/// or a later version). Operations without an outcome carry no witness and are skipped.
pub fn session_order(h: &History) -> Vec<Violation> {
    let mut out = Vec::new();
    for ops in by_session(h).values() {
        // Per key: the highest version the session has seen or made so far, and by which op.
        let mut floor: BTreeMap<&Bytes, (Carstamp, &Op)> = BTreeMap::new();
        for &op in ops {
            let Some(w) = op.witness() else { continue };
            if let Some(&(f, earlier)) = floor.get(&op.key) {
                let mut complain = |what: String| {
                    out.push(Violation {
                        checker: "session-order",
                        at: op.completed_at(),
                        detail: format!(
                            "{} #{} ({} of {}) {what}, which its earlier #{} ({}) saw or made",
                            op.session,
                            op.pos,
                            op.kind.name(),
                            fmt_key(&op.key),
                            earlier.pos,
                            earlier.kind.name()
                        ),
                    })
                };
                match (&w.observed, w.written) {
                    (Some((_, obs)), _) if *obs < f => {
                        complain(format!("observed {obs}, older than {f}"))
                    }
                    (_, Some(wr)) if wr <= f => {
                        complain(format!("created {wr}, not newer than {f}"))
                    }
                    _ => {}
                }
            }
            let mine = w.written.into_iter().chain(w.observed.as_ref().map(|(_, cs)| *cs)).max();
            if let Some(cs) = mine {
                let entry = floor.entry(&op.key).or_insert((cs, op));
                if cs > entry.0 {
                    *entry = (cs, op);
                }
            }
        }
    }
    out
}

/// Kite §2.3 and §5.1.8 rule 5: a session's completions come back in session order — each
/// completes after every earlier one, and nothing completes after an earlier operation that
/// never did. A relocated operation (placed where it took effect, answered in a later
/// session) is skipped: its reply in this session was lost, and its completion order is the
/// later session's (seed 914 flagged one such pair before).
pub fn replies_in_session_order(h: &History) -> Vec<Violation> {
    let mut out = Vec::new();
    for ops in by_session(h).values() {
        let mut last: Option<(u64, &Op)> = None;
        let mut pending: Option<&Op> = None;
        for &op in ops.iter().filter(|op| !op.relocated) {
            let order = match &op.outcome {
                Outcome::Pending => {
                    pending = pending.or(Some(op));
                    continue;
                }
                Outcome::Done { order, .. } | Outcome::Failed { order, .. } => *order,
            };
            let problem = if let Some(p) = pending {
                Some(format!("completed although the earlier #{} never did", p.pos))
            } else {
                last.filter(|(o, _)| order < *o)
                    .map(|(_, e)| format!("completed before the earlier #{}", e.pos))
            };
            if let Some(problem) = problem {
                out.push(Violation {
                    checker: "reply-order",
                    at: op.completed_at(),
                    detail: format!("{} #{} ({}) {problem}", op.session, op.pos, op.kind.name()),
                });
            }
            last = Some((order, op));
        }
    }
    out
}
