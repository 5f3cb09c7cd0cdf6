//! Linearizability of synchronisation operations (Kite G4, §7 prop 6), by the carstamp-witness
//! reduction, and "no reading from the future" for every read.
//!
//! # Why the reduction is exact
//!
//! Kite makes the version order of a key explicit: every version has a unique carstamp (G1,
//! checked by `version_uniqueness`), every read returns a created version with its value
//! (`no_thin_air`), and G4 requires sync operations to take effect in carstamp order. Let the
//! *effect* `eff(o)` of a sync op be `wr(o)` if it wrote, else `obs(o)`. Given those two
//! checked properties and RMW atomicity (`rmw_atomicity`: `obs(o)` is the immediate predecessor
//! of `wr(o)`, `value(wr) = f(op, value(obs))`), the sync operations of one key are linearizable
//! iff
//!
//! 1. for sync ops `a`, `b` with `resp(a) < inv(b)`: `eff(b) >= eff(a)`, strictly if `b` writes;
//! 2. no operation returns a version that did not exist yet when it responded (the version's
//!    creation is at or before `resp(o)`, hence its writer was invoked before `resp(o)`).
//!
//! *If*: order the operations by `eff`, a writer before the readers of its version, readers of
//! one version by invocation time. Each read then sits after the writer of the version it
//! returns and before the next writer (its value is that version's, by `no_thin_air`), and each
//! RMW reads the version just before its own (atomicity), so the order satisfies the sequential
//! specification of a register with FAA and CAS. It respects real time: if `resp(a) < inv(b)`,
//! (1) puts `b` at a larger effect, or at the same one with `b` a reader — after `a` if `a` is
//! the writer (writers precede their readers) or if both read (`inv(a) < inv(b)`). Writers that
//! are not sync operations (relaxed writes) only provide versions: RC_Lin orders sync
//! operations among themselves, and (2) keeps anyone from reading a version before it exists.
//! Incomplete operations that created a version take part as writers with `resp = ∞`.
//!
//! *Only if*: Kite fixes the linearization order of writers to the carstamp order (G1, G4), and
//! reads identify their version exactly by carstamp, so a linearization consistent with the
//! witnesses must order operations by effect; (1) and (2) are then exactly real-time
//! consistency. (A generic checker such as Wing–Gong or Porcupine searches over write orders
//! because values may not identify writes; here the witnesses do, so no search is needed.)
//!
//! "A completed release is observed by every acquire invoked after it completed" is the
//! instance of (1) with `a` a release and `b` an acquire.

use std::collections::BTreeMap;

use strata_wire::{Carstamp, Instant};

use super::index::{describe, Index};
use super::{fmt_key, Created, Violation};
use crate::history::{History, OpClass, Outcome};

/// One sync operation of a key, as the reduction sees it.
struct Entry {
    op: usize,
    inv: Instant,
    /// `None`: never completed (it created a version, or it would not be here).
    resp: Option<Instant>,
    eff: Carstamp,
    writes: bool,
}

/// Kite §7 prop 6, conditions (1) and (2) of the module documentation, per key.
pub fn sync_linearizability(h: &History) -> Vec<Violation> {
    let idx = Index::new(h);
    let mut by_key: BTreeMap<&[u8], Vec<Entry>> = BTreeMap::new();
    for (i, op) in h.ops.iter().enumerate() {
        if !op.class().is_sync() {
            continue;
        }
        let entry = match &op.outcome {
            Outcome::Done { at, witness, .. } => {
                let (eff, writes) = match (witness.written, &witness.observed) {
                    (Some(wr), _) => (wr, true),
                    (None, Some((_, obs))) => (*obs, false),
                    (None, None) => continue, // reported by version_uniqueness / no_thin_air
                };
                Entry { op: i, inv: op.invoke, resp: Some(*at), eff, writes }
            }
            Outcome::Pending => match idx.wr[i] {
                Some(wr) => Entry { op: i, inv: op.invoke, resp: None, eff: wr, writes: true },
                None => continue,
            },
            Outcome::Failed { .. } => continue,
        };
        by_key.entry(&op.key[..]).or_default().push(entry);
    }
    let mut out = Vec::new();
    for (key, entries) in by_key {
        // Completed operations by response time; each `b` compares with the largest effect
        // among those that responded before it was invoked.
        let mut done: Vec<&Entry> = entries.iter().filter(|e| e.resp.is_some()).collect();
        done.sort_by_key(|e| e.resp);
        let mut order: Vec<&Entry> = entries.iter().collect();
        order.sort_by_key(|e| e.inv);
        let mut next = 0;
        let mut best: Option<&Entry> = None;
        for b in order {
            while next < done.len() && done[next].resp.is_some_and(|r| r < b.inv) {
                if best.is_none_or(|m| done[next].eff > m.eff) {
                    best = Some(done[next]);
                }
                next += 1;
            }
            let Some(a) = best else { continue };
            let bad = if b.writes { b.eff <= a.eff } else { b.eff < a.eff };
            if bad {
                let verb = if b.writes { "created" } else { "observed" };
                let need = if b.writes { "above" } else { "at least" };
                out.push(Violation {
                    checker: "linearizability",
                    at: h.ops[b.op].completed_at().or(Some(b.inv)),
                    detail: format!(
                        "{} {verb} {} of {}, but {} completed before it was invoked with {} ({} required {need} that)",
                        describe(h, b.op),
                        b.eff,
                        fmt_key(key),
                        describe(h, a.op),
                        a.eff,
                        if b.writes { "a write is" } else { "a read is" },
                    ),
                });
            }
        }
    }
    out.extend(no_future_reads(h, &idx));
    out
}

/// Condition (2): every version returned existed when the operation responded; for sync
/// operations, its writer was invoked before (Kite §7 prop 6, second sentence). Checked for
/// relaxed reads too: no replica can hold a version before it is created.
fn no_future_reads(h: &History, idx: &Index<'_>) -> Vec<Violation> {
    let created = Created::new(h);
    let mut out = Vec::new();
    for (i, op) in h.ops.iter().enumerate() {
        let (Some(w), Some(resp)) = (op.witness(), op.completed_at()) else { continue };
        let Some((_, obs)) = &w.observed else { continue };
        if *obs == Carstamp::ZERO || w.written == Some(*obs) {
            continue;
        }
        let Some(c) = created.get(&op.key, *obs) else { continue }; // no_thin_air reports it
        let writer_late = op.class() != OpClass::Relaxed
            && idx.writer_of(&op.key, *obs).is_some_and(|wi| h.ops[wi].invoke >= resp);
        if c.at > resp || writer_late {
            out.push(Violation {
                checker: "linearizability",
                at: Some(resp),
                detail: format!(
                    "{} returned {obs}, which {} created only at {} (reading from the future)",
                    describe(h, i),
                    c.session,
                    crate::history::fmt_ms(c.at.0)
                ),
            });
        }
    }
    out
}
