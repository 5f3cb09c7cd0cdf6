//! The transaction harness's checkers (rifl.md §7 inv. 10-14, 12 through `check::txn`), each a
//! function of a [`TxnReport`]: what the clients saw and what every replica applied. On a
//! Kairos table [`super::kcheck`] replaces the dependency graph and uses the others, which
//! then judge every table of the run (a sharded table's validators too) and take a lock
//! only for a key a transaction writes (Kairos reads lock nothing, kairos.md §5.6).

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use strata_log::TxnEvent;
use strata_wire::log::LogIndex;
use strata_wire::txn::{Decision, TxnId, Vote};

use super::client::{Known, TxnRecord};
use super::{Applied, TxnReport, ACCOUNTS, INITIAL};
use crate::check::txn::{self as dsg, Txn, TxnHistory, TxnOp, TxnOutcome};
use crate::check::Violation;

pub type TxnChecker = fn(&TxnReport) -> Vec<Violation>;

/// Every checker of this harness.
pub const TXN_CHECKERS: &[TxnChecker] =
    &[serializable, atomicity, agreement, lock_exclusivity, no_lock_left, conservation, replicas];

pub fn check_all(r: &TxnReport) -> Vec<Violation> {
    if r.layout.mode.is_kairos() {
        return super::kcheck::check_all(r);
    }
    TXN_CHECKERS.iter().flat_map(|c| c(r)).collect()
}

pub(super) fn v(checker: &'static str, detail: String) -> Violation {
    Violation { checker, at: None, detail }
}

fn version(i: LogIndex) -> dsg::Version {
    (u64::from(i.epoch) << 32) | u64::from(i.counter)
}

/// Per transaction, per key, the decision and its index (the version a `Commit` installed).
pub(super) type Decided = BTreeMap<TxnId, BTreeMap<Bytes, (Decision, LogIndex)>>;

/// What the replicas of table `table` decided ([`Decided`]). Every replica applies the same
/// entries; the first event seen stands for all (the agreement checker compares them).
pub(super) fn decided_in(r: &TxnReport, table: usize) -> Decided {
    let mut out: Decided = BTreeMap::new();
    for a in &r.applied {
        if let Applied::Event {
            table: t,
            event: TxnEvent::Decided { index, txn, key, decision, .. },
            ..
        } = a
        {
            if *t == table {
                out.entry(*txn).or_default().entry(key.clone()).or_insert((*decision, *index));
            }
        }
    }
    out
}

/// What the data table's replicas decided.
fn decided(r: &TxnReport) -> Decided {
    decided_in(r, 0)
}

/// The transaction's outcome: the client's, else what the replicas applied.
pub(super) fn outcome(
    rec: &TxnRecord,
    decided: &BTreeMap<TxnId, BTreeMap<Bytes, (Decision, LogIndex)>>,
) -> Known {
    match (rec.outcome, rec.txn.and_then(|t| decided.get(&t))) {
        (Known::Unknown, Some(d)) if d.values().any(|(x, _)| *x == Decision::Commit) => {
            Known::Committed
        }
        (Known::Unknown, Some(_)) => Known::Aborted,
        (k, _) => k,
    }
}

/// rifl.md §7 inv. 12: committed transactions, plain reads and the initial puts are strictly
/// serializable (the dependency graph of `check::txn`, versions from the replicas).
pub fn serializable(r: &TxnReport) -> Vec<Violation> {
    let decided = decided(r);
    let mut h = TxnHistory::default();
    h.txns.push(Txn {
        invoked: strata_wire::Instant::ZERO,
        completed: strata_wire::Instant::ZERO,
        outcome: TxnOutcome::Committed,
        ops: r
            .setup
            .iter()
            .map(|(k, i)| TxnOp::Write { key: k.clone(), version: version(*i) })
            .collect(),
    });
    for rec in &r.records {
        let mut ops: Vec<TxnOp> = rec
            .reads
            .iter()
            .map(|r| TxnOp::Read { key: r.key.clone(), version: version(r.version) })
            .collect();
        let known = outcome(rec, &decided);
        if known == Known::Committed {
            let applied = rec.txn.and_then(|t| decided.get(&t));
            for (k, _) in &rec.writes {
                // A missing decision is the atomicity checker's to report.
                if let Some(&(Decision::Commit, i)) = applied.and_then(|d| d.get(k)) {
                    ops.push(TxnOp::Write { key: k.clone(), version: version(i) });
                }
            }
        }
        let outcome = match known {
            Known::Committed => TxnOutcome::Committed,
            Known::Aborted => TxnOutcome::Aborted,
            Known::Unknown => TxnOutcome::Unknown,
        };
        let completed = if known == Known::Unknown { r.end } else { rec.completed };
        h.txns.push(Txn { invoked: rec.invoked, completed, outcome, ops });
    }
    dsg::check(&h)
}

/// §7 inv. 10: a committed transaction's writes all took effect, an aborted one's none (in
/// every table of the run: with sharded validators, a written key's validator object is
/// decided too).
pub fn atomicity(r: &TxnReport) -> Vec<Violation> {
    (0..r.layout.len()).flat_map(|t| atomicity_in(r, t)).collect()
}

fn atomicity_in(r: &TxnReport, table: usize) -> Vec<Violation> {
    let decided = decided_in(r, table);
    let mut out = Vec::new();
    for rec in r.records.iter().filter(|rec| !rec.writes.is_empty()) {
        let Some(txn) = rec.txn else { continue };
        let applied = decided.get(&txn);
        let committed: BTreeSet<&Bytes> = applied
            .map(|d| {
                d.iter().filter(|(_, (x, _))| *x == Decision::Commit).map(|(k, _)| k).collect()
            })
            .unwrap_or_default();
        let written: BTreeSet<&Bytes> = rec.writes.iter().map(|(k, _)| k).collect();
        let bad = match outcome(rec, &decided) {
            Known::Committed => committed != written,
            Known::Aborted => !committed.is_empty(),
            Known::Unknown => !committed.is_empty() && committed != written,
        };
        if bad {
            out.push(v(
                "txn-10-atomicity",
                format!(
                    "{txn} ({:?} at the client) wrote {written:?}; Commit applied to \
                     {committed:?} in {}",
                    rec.outcome,
                    r.layout.name(table)
                ),
            ));
        }
    }
    out
}

/// §7 inv. 11: every decision applied for a transaction, at any replica and for any object, is
/// the same, and is the outcome its client reported.
pub fn agreement(r: &TxnReport) -> Vec<Violation> {
    let mut seen: BTreeMap<TxnId, BTreeSet<Decision>> = BTreeMap::new();
    for a in &r.applied {
        if let Applied::Event { event: TxnEvent::Decided { txn, decision, .. }, .. } = a {
            seen.entry(*txn).or_default().insert(*decision);
        }
    }
    let mut out = Vec::new();
    for (txn, ds) in &seen {
        if ds.len() > 1 {
            out.push(v("txn-11-agreement", format!("{txn}: decisions {ds:?} applied")));
        }
    }
    for rec in &r.records {
        let (Some(txn), Some(ds)) = (rec.txn, rec.txn.and_then(|t| seen.get(&t))) else { continue };
        let want = match rec.outcome {
            Known::Committed => Decision::Commit,
            Known::Aborted => Decision::Abort,
            Known::Unknown => continue,
        };
        if ds.iter().any(|d| *d != want) {
            out.push(v(
                "txn-11-agreement",
                format!("{txn}: the client said {want:?}, replicas applied {ds:?}"),
            ));
        }
    }
    out
}

/// §7 inv. 13: at each replica, at most one lock per key at any time (a `Prepared` vote on a
/// key another transaction holds is a second lock). A Kairos read takes no lock: there only
/// a key the transaction writes is locked.
pub fn lock_exclusivity(r: &TxnReport) -> Vec<Violation> {
    let writes: BTreeMap<TxnId, BTreeSet<&Bytes>> = r
        .records
        .iter()
        .filter_map(|rec| Some((rec.txn?, rec.writes.iter().map(|(k, _)| k).collect())))
        .collect();
    let kairos = r.layout.mode.is_kairos();
    // (A transaction without a record, the Kairos setup, writes every key it names.)
    let locks_key =
        |txn: &TxnId, key: &Bytes| !kairos || writes.get(txn).is_none_or(|w| w.contains(key));
    let mut locks: BTreeMap<(usize, usize, u32, Bytes), (TxnId, u64)> = BTreeMap::new();
    let mut out = Vec::new();
    for a in &r.applied {
        match a {
            Applied::Restarted { node } => locks.retain(|(n, _, _, _), _| n != node),
            // The replica's state was replaced (a move, a replay from an installed state).
            Applied::Locks { node, table, shard, locks: held } => {
                locks.retain(|(n, t, s, _), _| (n, t, s) != (node, table, shard));
                for (key, txn, seq) in held {
                    locks.insert((*node, *table, *shard, key.clone()), (*txn, *seq));
                }
            }
            Applied::Event { node, table, shard, event, .. } => match event {
                TxnEvent::Voted { txn, seq, key: Some(key), vote: Vote::Prepared, .. }
                    if locks_key(txn, key) =>
                {
                    let slot = (*node, *table, *shard, key.clone());
                    if let Some(holder) = locks.get(&slot).filter(|h| **h != (*txn, *seq)) {
                        out.push(v(
                            "txn-13-lock-exclusivity",
                            format!(
                                "n{node} shard {shard}: {txn} locked {key:?} held by {}",
                                holder.0
                            ),
                        ));
                    }
                    locks.insert(slot, (*txn, *seq));
                }
                TxnEvent::Decided { key, .. } => {
                    locks.remove(&(*node, *table, *shard, key.clone()));
                }
                _ => {}
            },
        }
    }
    out
}

/// §7 inv. 13 (release): once the cluster is healthy, recovery leaves no lock behind.
pub fn no_lock_left(r: &TxnReport) -> Vec<Violation> {
    if r.locks_left == 0 {
        return Vec::new();
    }
    vec![v(
        "txn-13-no-lock-left",
        format!("{} locks held after healing and recovery", r.locks_left),
    )]
}

/// Transfers move money: the accounts' total never changes.
pub fn conservation(r: &TxnReport) -> Vec<Violation> {
    let values: Vec<Option<u64>> = r
        .final_values
        .iter()
        .map(|(_, v)| v.as_ref().and_then(|v| std::str::from_utf8(v).ok()?.parse().ok()))
        .collect();
    let total: u64 = values.iter().flatten().sum();
    if values.iter().all(Option::is_some) && total == INITIAL * ACCOUNTS as u64 {
        return Vec::new();
    }
    vec![v("txn-conservation", format!("final accounts {:?}: total {total}", r.final_values))]
}

/// The hosts' own checks after every input: no panic, every invariant (among them §7 inv. 14:
/// each lock's `Prepared` record exists while the lock does).
pub fn replicas(r: &TxnReport) -> Vec<Violation> {
    r.failures.iter().map(|f| v("txn-14-replica-invariants", f.clone())).collect()
}
