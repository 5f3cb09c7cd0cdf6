//! Convergence after healing (`docs/design.md`, invariants of the Eventual Store).
//!
//! What the Eventual Store guarantees, precisely. A node re-sends each of its own writes until
//! every peer has acknowledged a version at least as new (Kite §5.1.7), but a receiver does not
//! forward what it received. So after the liveness phase (links healed, no loss, time to
//! re-send):
//!
//! 1. every live replica holds, for every key, at least the highest version created by a node
//!    that is still live (its creator keeps re-sending it) — [`convergence`];
//! 2. all live replicas hold the same value and version of every key — [`convergence`] — except
//!    when the highest version any of them holds was created by a node that crashed and reached
//!    only some of them: nobody re-sends it, and Kite §1.2 ("Not guaranteed") promises nothing
//!    for such replicas until an acquire or slow-path access refreshes them, which the Eventual
//!    Store alone does not do. Those keys are reported by [`orphaned_divergence`] as notes
//!    (violations under `--strict-convergence`).

use std::collections::BTreeSet;

use bytes::Bytes;
use strata_wire::{Carstamp, NodeId};

use super::{fmt_key, Created, Violation};
use crate::history::{fmt_value, Creation, History, Value};

/// What the live replicas hold of one key at the end.
struct KeySurvey<'h> {
    key: Bytes,
    /// The highest version of the key created by a node that is live at the end.
    required: Option<&'h Creation>,
    held: Vec<(NodeId, Value, Carstamp)>,
    /// Whether the highest held version was created by a crashed node.
    top_is_orphan: bool,
}

impl KeySurvey<'_> {
    fn agree(&self) -> bool {
        self.held.windows(2).all(|w| (&w[0].1, w[0].2) == (&w[1].1, w[1].2))
    }

    fn describe(&self) -> String {
        let held: Vec<String> =
            self.held.iter().map(|(n, v, cs)| format!("{n} {cs} {}", fmt_value(v))).collect();
        format!("live replicas of {} disagree: {}", fmt_key(&self.key), held.join("; "))
    }
}

fn survey(h: &History) -> Vec<KeySurvey<'_>> {
    let Some(fin) = &h.final_state else { return Vec::new() };
    let live: BTreeSet<NodeId> = fin.live.iter().copied().collect();
    let created = Created::new(h);
    let mut keys: BTreeSet<Bytes> = h.creations.iter().map(|c| c.key.clone()).collect();
    keys.extend(fin.replicas.values().flat_map(|r| r.keys().cloned()));
    keys.into_iter()
        .map(|key| {
            let required = h
                .creations
                .iter()
                .filter(|c| c.key == key && live.contains(&c.node))
                .max_by_key(|c| c.cs);
            let held: Vec<(NodeId, Value, Carstamp)> = fin
                .live
                .iter()
                .map(|n| {
                    let (v, cs) = fin
                        .replicas
                        .get(n)
                        .and_then(|r| r.get(&key))
                        .cloned()
                        .unwrap_or((None, Carstamp::ZERO));
                    (*n, v, cs)
                })
                .collect();
            let top = held.iter().map(|(_, _, cs)| *cs).max().unwrap_or(Carstamp::ZERO);
            let top_is_orphan = created.get(&key, top).is_some_and(|c| !live.contains(&c.node));
            KeySurvey { key, required, held, top_is_orphan }
        })
        .collect()
}

/// Items 1 and 2 of the module documentation.
pub fn convergence(h: &History) -> Vec<Violation> {
    let mut out = Vec::new();
    for s in survey(h) {
        if let Some(req) = s.required {
            for (n, _, cs) in s.held.iter().filter(|(_, _, cs)| *cs < req.cs) {
                out.push(Violation {
                    checker: "convergence",
                    at: None,
                    detail: format!(
                        "{n} holds {cs} of {}, below {} created by live {} ({}) at {}",
                        fmt_key(&s.key),
                        req.cs,
                        req.node,
                        req.session,
                        crate::history::fmt_ms(req.at.0)
                    ),
                });
            }
        }
        if !s.agree() && !s.top_is_orphan {
            out.push(Violation { checker: "convergence", at: None, detail: s.describe() });
        }
    }
    out
}

/// Keys whose live replicas disagree only because the newest version came from a crashed node
/// and reached some of them (item 2's exception).
pub fn orphaned_divergence(h: &History) -> Vec<Violation> {
    survey(h)
        .into_iter()
        .filter(|s| !s.agree() && s.top_is_orphan)
        .map(|s| Violation {
            checker: "orphaned-divergence",
            at: None,
            detail: format!("{} (the newest was created by a crashed node)", s.describe()),
        })
        .collect()
}
