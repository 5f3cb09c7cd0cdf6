//! RMW atomicity (Kite G5, §7 prop 7), weak CAS (§7 prop 8) and the FAA counter corollary.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use strata_wire::{Carstamp, RmwId};

use super::index::{describe, Index};
use super::{fmt_key, Violation};
use crate::history::{fmt_value, value_as_u64, Creation, History, OpClass, OpKind, Outcome, Value};

/// `V_k` of Kite §7: every created version of each key, sorted, with `ZERO` (absent) first.
fn versions(h: &History) -> BTreeMap<&[u8], Vec<(Carstamp, &Creation)>> {
    let mut v: BTreeMap<&[u8], Vec<(Carstamp, &Creation)>> = BTreeMap::new();
    for c in &h.creations {
        v.entry(&c.key[..]).or_default().push((c.cs, c));
    }
    for list in v.values_mut() {
        list.sort_by_key(|(cs, _)| *cs);
        list.dedup_by_key(|(cs, _)| *cs); // duplicates are version_uniqueness's to report
    }
    v
}

/// The version immediately below `cs` in `V_k`, with its value (`ZERO` is absent).
fn predecessor(vk: Option<&Vec<(Carstamp, &Creation)>>, cs: Carstamp) -> (Carstamp, Value) {
    vk.and_then(|list| {
        let i = list.partition_point(|(c, _)| *c < cs);
        i.checked_sub(1).map(|j| (list[j].0, list[j].1.value.clone()))
    })
    .unwrap_or((Carstamp::ZERO, None))
}

/// Kite §7 prop 7 for every RMW that created a version (completed, or committed for an owner
/// that crashed): `wr.pno >= 1`; `obs` is the immediate predecessor of `wr` in `V_k`;
/// `value(wr) = f(op, value(obs))`; a CAS reports `swapped` iff the value it observed was the
/// expected one. And §7 prop 8: a weak CAS that created no version failed locally — it
/// reports no swap and a value other than the expected one (props 2 and 3 hold for it as for
/// any read, checked by `no_thin_air` and `session_order`).
pub fn rmw_atomicity(h: &History) -> Vec<Violation> {
    let idx = Index::new(h);
    let vks = versions(h);
    let mut out = Vec::new();
    let mut complain = |checker: &'static str, i: usize, what: String| {
        out.push(Violation {
            checker,
            at: h.ops[i].completed_at().or(Some(h.ops[i].invoke)),
            detail: format!("{} {what}", describe(h, i)),
        })
    };
    for (i, op) in h.ops.iter().enumerate() {
        if !op.kind.is_rmw() {
            continue;
        }
        let w = op.witness();
        if op.class() == OpClass::Relaxed {
            let w = w.expect("only a completed weak CAS is relaxed");
            let (OpKind::Cas { expected, .. }, Some((seen, _))) = (&op.kind, &w.observed) else {
                continue;
            };
            if w.swapped || seen == expected {
                complain(
                    "weak-cas",
                    i,
                    format!(
                        "failed locally (no version) but reported swapped={} with {} observed and {} expected",
                        w.swapped,
                        fmt_value(seen),
                        fmt_value(expected)
                    ),
                );
            }
            continue;
        }
        let Some(wr) = idx.wr[i] else { continue }; // no version: nothing to check
        if wr.pno == 0 {
            complain(
                "rmw-atomicity",
                i,
                format!("created {wr}, a plain version (an RMW's has pno >= 1)"),
            );
            continue;
        }
        let vk = vks.get(&op.key[..]);
        let Some(created) = vk.and_then(|l| l.iter().find(|(c, _)| *c == wr)).map(|(_, c)| *c)
        else {
            continue; // version_uniqueness reports a version nobody created
        };
        let (pred, pred_value) = predecessor(vk, wr);
        let (obs, obs_value) = match w.and_then(|w| w.observed.clone()) {
            Some((v, cs)) => (cs, v),
            // An RMW whose owner crashed after its commit: it read the version below its own.
            None => (pred, pred_value.clone()),
        };
        if obs != pred {
            let between =
                if obs < pred { format!(", but {pred} lies between them") } else { String::new() };
            complain(
                "rmw-atomicity",
                i,
                format!("observed {obs} and created {wr}{between}: not the immediate predecessor"),
            );
            continue;
        }
        let (value, swapped) = op.kind.rmw_apply(&obs_value).expect("an RMW kind");
        if created.value != value {
            complain(
                "rmw-atomicity",
                i,
                format!(
                    "created {wr} = {} over {obs} = {}, but f(op, old) = {}",
                    fmt_value(&created.value),
                    fmt_value(&obs_value),
                    fmt_value(&value)
                ),
            );
        }
        if let Some(w) = w.filter(|w| w.swapped != swapped) {
            complain(
                "rmw-atomicity",
                i,
                format!("reported swapped={} over {}", w.swapped, fmt_value(&obs_value)),
            );
        }
    }
    out
}

/// The corollary of Kite §7 prop 7 for keys written only by FAAs: the old values the FAAs
/// returned are distinct; the newest version holds the sum of the deltas of the FAAs decided in
/// each slot (from the real `COMMIT`s); every acknowledged FAA was decided, in exactly one slot;
/// so the final value is at least the sum of the acknowledged deltas and counts each once.
pub fn faa_counters(h: &History) -> Vec<Violation> {
    let idx = Index::new(h);
    let vks = versions(h);
    let mut out = Vec::new();
    let mut keys: BTreeSet<&Bytes> =
        h.ops.iter().filter(|o| matches!(o.kind, OpKind::Faa { .. })).map(|o| &o.key).collect();
    // Only keys no other kind writes (the workload's counters).
    for op in &h.ops {
        if op.kind.may_write() && !matches!(op.kind, OpKind::Faa { .. }) {
            keys.remove(&op.key);
        }
    }
    for key in keys {
        let mut fail =
            |at, detail: String| out.push(Violation { checker: "faa-counter", at, detail });
        // Distinct old values.
        let mut olds: HashMap<u64, usize> = HashMap::new();
        for (i, op) in h
            .ops
            .iter()
            .enumerate()
            .filter(|(_, o)| o.key == *key && matches!(o.kind, OpKind::Faa { .. }))
        {
            let Some((v, _)) = op.witness().and_then(|w| w.observed.as_ref()) else { continue };
            if let Some(j) = olds.insert(value_as_u64(v), i) {
                fail(
                    op.completed_at(),
                    format!(
                        "{} and {} both returned old value {}",
                        describe(h, j),
                        describe(h, i),
                        value_as_u64(v)
                    ),
                );
            }
        }
        // Decided slots, from the real commits.
        let mut slots: BTreeMap<u32, RmwId> = BTreeMap::new();
        let mut slots_of: HashMap<RmwId, BTreeSet<u32>> = HashMap::new();
        for c in h.commits.iter().filter(|c| c.key == *key && c.is_real()) {
            slots.entry(c.slot).or_insert(c.rmw_id);
            slots_of.entry(c.rmw_id).or_default().insert(c.slot);
        }
        let mut sum: u64 = 0;
        for (slot, id) in &slots {
            match idx.rmw_op.get(id).map(|&i| &h.ops[i].kind) {
                Some(OpKind::Faa { delta }) => sum = sum.wrapping_add(*delta),
                _ => fail(None, format!("slot {slot} of counter {} was decided for {id:?}, which is no FAA of the history", fmt_key(key))),
            }
        }
        let top =
            vks.get(&key[..]).and_then(|l| l.last()).map(|(cs, c)| (*cs, value_as_u64(&c.value)));
        let (top_cs, fin) = top.unwrap_or((Carstamp::ZERO, 0));
        if fin != sum {
            fail(
                None,
                format!(
                    "counter {} ends at {fin} (version {top_cs}) but the FAAs decided in its {} slots add up to {sum}",
                    fmt_key(key),
                    slots.len()
                ),
            );
        }
        let mut acked: u64 = 0;
        for (i, op) in h.ops.iter().enumerate().filter(|(_, o)| o.key == *key) {
            let (OpKind::Faa { delta }, Outcome::Done { witness, .. }) = (&op.kind, &op.outcome)
            else {
                continue;
            };
            if witness.written.is_none() {
                continue;
            }
            acked = acked.wrapping_add(*delta);
            let ids = idx.rmw_of.get(&i).map_or(&[][..], Vec::as_slice);
            let n: usize = ids.iter().filter_map(|id| slots_of.get(id)).map(BTreeSet::len).sum();
            if n != 1 {
                fail(
                    op.completed_at(),
                    format!(
                        "acknowledged {} was decided in {n} slots of {}",
                        describe(h, i),
                        fmt_key(key)
                    ),
                );
            }
        }
        if fin < acked {
            fail(
                None,
                format!(
                    "counter {} ends at {fin}, below the {acked} its acknowledged FAAs add",
                    fmt_key(key)
                ),
            );
        }
    }
    out
}
