//! Version uniqueness and no thin-air values (Kite §7 props 1 and 2).

use std::collections::HashMap;

use super::{fmt_key, Created, Violation};
use crate::history::{fmt_value, History};

/// Kite §7 prop 1: every creation has a distinct `(key, carstamp)`; a plain write (`pno == 0`)
/// is stamped with its creator's id and a clock of at least 1 (§0, §5.3); and every completed
/// write reports exactly one version, equal to a creation by its own session with its value.
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
                detail: format!("plain write by {} on {} created {}, not stamped ((ver >= 1, {}), 0)", c.node, fmt_key(&c.key), c.cs, c.node),
            });
        }
    }
    let created = Created::new(h);
    for op in &h.ops {
        let (Some(w), Some(expected)) = (op.witness(), op.kind.written_value()) else { continue };
        let Some(cs) = w.written else {
            out.push(Violation {
                checker: "version-uniqueness",
                at: op.completed_at(),
                detail: format!("{} #{} ({} of {}) completed without reporting the version it created", op.session, op.pos, op.kind.name(), fmt_key(&op.key)),
            });
            continue;
        };
        let problem = match created.get(&op.key, cs) {
            None => Some(format!("no creation event for {cs}")),
            Some(c) if c.session != op.session => Some(format!("{cs} was created by {}", c.session)),
            Some(c) if c.value != expected => Some(format!("{cs} was created with {}, not {}", fmt_value(&c.value), fmt_value(&expected))),
            Some(_) => None,
        };
        if let Some(problem) = problem {
            out.push(Violation {
                checker: "version-uniqueness",
                at: op.completed_at(),
                detail: format!("{} #{} ({} of {}) reported {cs}, but {problem}", op.session, op.pos, op.kind.name(), fmt_key(&op.key)),
            });
        }
    }
    out
}

/// Kite §7 prop 2: every version a read returns was created (or is `ZERO` with the absent
/// value), and the value returned is the one created with that version.
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
                detail: format!("{} #{} ({} of {}): {problem}", op.session, op.pos, op.kind.name(), fmt_key(&op.key)),
            });
        }
    }
    out
}

