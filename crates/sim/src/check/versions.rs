//! Version uniqueness and no thin-air values (Kite §7 props 1 and 2).

use std::collections::HashMap;

use super::index::Index;
use super::{fmt_key, Created, Violation};
use crate::history::{fmt_value, History, OpClass};

/// Kite §7 prop 1: every creation has a distinct `(key, carstamp)`; a plain write or release
/// (`pno == 0`) is stamped with its creator's id and a clock of at least 1 (§0, §5.3, §5.4); an
/// RMW version (`pno >= 1`) was carried by a real `COMMIT`; and every completed write, release
/// or RMW reports exactly one version, equal to a creation by its own session with the value it
/// wrote (for an RMW, `f(op, value(obs))`, and committed under its own `RmwId`). A weak CAS that
/// failed locally creates nothing (§2.2).
pub fn version_uniqueness(h: &History) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut seen = HashMap::new();
    for c in &h.creations {
        if let Some(first) = seen.insert((&c.key[..], c.cs), c) {
            out.push(Violation {
                checker: "version-uniqueness",
                at: Some(c.at),
                detail: format!(
                    "version {} of {} created twice: by {} with {} and by {} with {}",
                    c.cs,
                    fmt_key(&c.key),
                    first.session,
                    fmt_value(&first.value),
                    c.session,
                    fmt_value(&c.value)
                ),
            });
        }
        if c.cs.pno == 0 && (c.cs.llc.node != c.node || c.cs.llc.ver == 0) {
            out.push(Violation {
                checker: "version-uniqueness",
                at: Some(c.at),
                detail: format!(
                    "plain write by {} on {} created {}, not stamped ((ver >= 1, {}), 0)",
                    c.node,
                    fmt_key(&c.key),
                    c.cs,
                    c.node
                ),
            });
        }
        if c.cs.pno > 0 && c.rmw_id.is_none() {
            out.push(Violation {
                checker: "version-uniqueness",
                at: Some(c.at),
                detail: format!(
                    "RMW version {} of {} reported by {}, but no COMMIT ever carried it",
                    c.cs,
                    fmt_key(&c.key),
                    c.session
                ),
            });
        }
    }
    let created = Created::new(h);
    let idx = Index::new(h);
    for (i, op) in h.ops.iter().enumerate() {
        let Some(w) = op.witness() else { continue };
        if !op.kind.may_write() || op.class() == OpClass::Relaxed && op.kind.is_rmw() {
            continue;
        }
        let Some(cs) = w.written else {
            out.push(Violation {
                checker: "version-uniqueness",
                at: op.completed_at(),
                detail: format!(
                    "{} #{} ({} of {}) completed without reporting the version it created",
                    op.session,
                    op.pos,
                    op.kind.name(),
                    fmt_key(&op.key)
                ),
            });
            continue;
        };
        let expected = op.expected_written();
        let problem = match created.get(&op.key, cs) {
            None => Some(format!("no creation event for {cs}")),
            Some(c) if !idx.sent_in(i, c.session) => {
                Some(format!("{cs} was created by {}", c.session))
            }
            Some(c) if expected.as_ref().is_some_and(|e| *e != c.value) => Some(format!(
                "{cs} was created with {}, not {}",
                fmt_value(&c.value),
                fmt_value(expected.as_ref().expect("checked"))
            )),
            Some(c) if c.rmw_id.is_some_and(|id| idx.rmw_op.get(&id) != Some(&i)) => Some(format!(
                "{cs} was committed for {:?}, another operation",
                c.rmw_id.expect("checked")
            )),
            Some(_) => None,
        };
        if let Some(problem) = problem {
            out.push(Violation {
                checker: "version-uniqueness",
                at: op.completed_at(),
                detail: format!(
                    "{} #{} ({} of {}) reported {cs}, but {problem}",
                    op.session,
                    op.pos,
                    op.kind.name(),
                    fmt_key(&op.key)
                ),
            });
        }
    }
    out
}

/// Kite §7 prop 2: every version a read, acquire or RMW returns was created (or is `ZERO` with
/// the absent value), and the value returned is the one created with that version.
pub fn no_thin_air(h: &History) -> Vec<Violation> {
    let created = Created::new(h);
    let mut out = Vec::new();
    for op in h.ops.iter().filter(|op| op.kind.reads()) {
        let Some(w) = op.witness() else { continue };
        let problem = match &w.observed {
            None => Some("completed without reporting the version it read".to_string()),
            Some((value, cs)) => created.thin_air(&op.key, value, *cs),
        };
        if let Some(problem) = problem {
            out.push(Violation {
                checker: "no-thin-air",
                at: op.completed_at(),
                detail: format!(
                    "{} #{} ({} of {}): {problem}",
                    op.session,
                    op.pos,
                    op.kind.name(),
                    fmt_key(&op.key)
                ),
            });
        }
    }
    out
}
