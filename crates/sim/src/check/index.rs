//! Who created which version: the link from the versions of a history (`V_k`, Kite §7) back to
//! the operations that created them, shared by the checkers that reason about `wr(o)`.
//!
//! A completed operation names its version in its witness. An operation that never completed
//! (its node crashed, Kite §7 preamble: "incomplete") may still have created one: a plain write
//! or release is then found by its session, key and value (a session runs at most one
//! operation per key at a time, Kite §5.1.8 rule 3), an RMW by its `RmwId` — the `n`-th RMW of
//! a session that did not fail locally has sequence number `n` (Kite §3.2), and its version's
//! first `COMMIT` names it.

use std::collections::{BTreeMap, HashMap};

use strata_wire::{Carstamp, RmwId, SessionId};

use crate::history::{History, OpKind, Outcome};

pub(crate) struct Index<'h> {
    /// `(key, cs)` -> the operation (index in `History::ops`) that created it.
    pub writer: HashMap<(&'h [u8], Carstamp), usize>,
    /// The `RmwId` the core gave each RMW operation, both ways.
    pub rmw_op: HashMap<RmwId, usize>,
    pub rmw_of: HashMap<usize, RmwId>,
    /// Per operation: the version it created (witness, or found through the creations).
    pub wr: Vec<Option<Carstamp>>,
    /// Each session's operations in session order.
    pub sessions: BTreeMap<SessionId, Vec<usize>>,
}

impl<'h> Index<'h> {
    pub fn new(h: &'h History) -> Index<'h> {
        let mut sessions: BTreeMap<SessionId, Vec<usize>> = BTreeMap::new();
        for (i, op) in h.ops.iter().enumerate() {
            sessions.entry(op.session).or_default().push(i);
        }
        for ops in sessions.values_mut() {
            ops.sort_by_key(|&i| h.ops[i].pos);
        }
        let mut rmw_op = HashMap::new();
        for (s, ops) in &sessions {
            let mut seq = 0;
            for &i in ops {
                let op = &h.ops[i];
                if !op.kind.is_rmw() {
                    continue;
                }
                let failed_locally = matches!(&op.outcome, Outcome::Done { witness, .. }
                    if witness.written.is_none() && matches!(op.kind, OpKind::Cas { weak: true, .. }));
                if failed_locally || matches!(op.outcome, Outcome::Failed { .. }) {
                    continue;
                }
                seq += 1;
                rmw_op.insert(RmwId { session: *s, seq }, i);
            }
        }
        let mut wr: Vec<Option<Carstamp>> = h.ops.iter().map(|op| op.witness().and_then(|w| w.written)).collect();
        let mut writer = HashMap::new();
        for (i, op) in h.ops.iter().enumerate() {
            if let Some(cs) = wr[i] {
                writer.entry((&op.key[..], cs)).or_insert(i);
            }
        }
        for c in &h.creations {
            if writer.contains_key(&(&c.key[..], c.cs)) {
                continue;
            }
            let found = match c.rmw_id {
                Some(id) => rmw_op.get(&id).copied().filter(|&i| h.ops[i].key == c.key && wr[i].is_none()),
                None => sessions.get(&c.session).and_then(|ops| {
                    ops.iter().copied().find(|&i| {
                        let op = &h.ops[i];
                        let shape = match op.kind.written_value() {
                            Some(v) => c.cs.pno == 0 && v == c.value,
                            None => op.kind.is_rmw() && c.cs.pno > 0,
                        };
                        op.key == c.key && matches!(op.outcome, Outcome::Pending) && wr[i].is_none() && shape
                    })
                }),
            };
            if let Some(i) = found {
                wr[i] = Some(c.cs);
                writer.insert((&c.key[..], c.cs), i);
            }
        }
        let rmw_of = rmw_op.iter().map(|(id, &i)| (i, *id)).collect();
        Index { writer, rmw_op, rmw_of, wr, sessions }
    }

    pub fn writer_of(&self, key: &[u8], cs: Carstamp) -> Option<usize> {
        self.writer.get(&(key, cs)).copied()
    }
}

/// `n0/s1 #4 (release of key "k0")`, for reports.
pub(crate) fn describe(h: &History, i: usize) -> String {
    let op = &h.ops[i];
    format!("{} #{} ({} of {})", op.session, op.pos, op.kind.name(), super::fmt_key(&op.key))
}
