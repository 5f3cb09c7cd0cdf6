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
    /// (An RMW retried in another session has one id per send that started Paxos.)
    pub rmw_of: HashMap<usize, Vec<RmwId>>,
    /// Per operation: the version it created (witness, or found through the creations).
    pub wr: Vec<Option<Carstamp>>,
    /// Each session's operations in session order.
    pub sessions: BTreeMap<SessionId, Vec<usize>>,
    /// Operations sent in each session, whether or not it is their latest.
    pub attempted: BTreeMap<SessionId, Vec<usize>>,
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
        // Every session an operation was sent in (its latest one is `op.session`; a retried
        // operation's version may have been created in an earlier one, rifl.md §5.1).
        let mut attempted: BTreeMap<SessionId, Vec<usize>> = BTreeMap::new();
        for a in &h.attempts {
            let ops = attempted.entry(a.session).or_default();
            if !ops.contains(&a.op) {
                ops.push(a.op);
            }
        }
        for (s, ops) in &sessions {
            let list = attempted.entry(*s).or_default();
            for &i in ops {
                if !list.contains(&i) {
                    list.push(i);
                }
            }
        }
        let mut rmw_op = HashMap::new();
        // A driver's history says which send executed under which RMW id; a hand-made one
        // numbers each session's RMWs in session order.
        for a in h.attempts.iter().filter(|a| a.rmw_id.is_some()) {
            rmw_op.insert(a.rmw_id.expect("filtered"), a.op);
        }
        for (s, ops) in sessions.iter().filter(|_| h.attempts.is_empty()) {
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
        let mut wr: Vec<Option<Carstamp>> =
            h.ops.iter().map(|op| op.witness().and_then(|w| w.written)).collect();
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
                Some(id) => {
                    rmw_op.get(&id).copied().filter(|&i| h.ops[i].key == c.key && wr[i].is_none())
                }
                None => attempted.get(&c.session).and_then(|ops| {
                    ops.iter().copied().find(|&i| {
                        let op = &h.ops[i];
                        let shape = match op.kind.written_value() {
                            Some(v) => c.cs.pno == 0 && v == c.value,
                            None => op.kind.is_rmw() && c.cs.pno > 0,
                        };
                        op.key == c.key
                            && matches!(op.outcome, Outcome::Pending)
                            && wr[i].is_none()
                            && shape
                    })
                }),
            };
            if let Some(i) = found {
                wr[i] = Some(c.cs);
                writer.insert((&c.key[..], c.cs), i);
            }
        }
        // A retried RMW may have started under one id per send (rifl.md §5.1).
        let mut rmw_of: HashMap<usize, Vec<RmwId>> = HashMap::new();
        for (id, &i) in &rmw_op {
            rmw_of.entry(i).or_default().push(*id);
        }
        for ids in rmw_of.values_mut() {
            ids.sort();
        }
        Index { writer, rmw_op, rmw_of, wr, sessions, attempted }
    }

    /// Whether operation `i` was sent in session `s`.
    pub fn sent_in(&self, i: usize, s: SessionId) -> bool {
        self.attempted.get(&s).is_some_and(|ops| ops.contains(&i))
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
