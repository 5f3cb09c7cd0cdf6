//! The transaction harness's checkers on a Kairos table (kairos.md §7), from what the clients
//! saw and what every replica applied. The §7 checkers are `strata_kairos::sim::check`'s, run
//! on a `History` built here from the run ([`history`]):
//!
//! | checker | §7 | what, in this harness |
//! |---|---|---|
//! | `kairos-k1-serial-order` | inv. 1, 5 (K1) | committed transactions (the setup's blind writes first) replayed in `(T.commit, RW before RO)` order read exactly the `(value, vts)` they saw; RW `T.commit` above every version read (`check::replay`) |
//! | `kairos-k2-stale-read` | inv. 3 (K2) | global-time oracle: when a committed transaction's read of `k` was first validated at any replica of `k`'s validator shard, no write of `k` above the version read had been decided `Commit` by its client (or applied, for one recovery decided) and no other transaction's write of `k` was prepared there (its vote applied, its decision not) (`check::stale_reads`) |
//! | `kairos-version-order` | inv. 2 | at every replica (each incarnation on its own, a restart replays), the `Commit` decisions of a key install strictly increasing commit timestamps; RW timestamps are unique (`check::version_order`); every account's final `vts` and value are its last committed write's |
//! | `kairos-gc-safety` | inv. 7 | no `Prepared` vote for a prepare whose `T.freshness` is below the `ts_GC` its leader had announced (to any client, in the same term) before appending it; `ts_GC` never goes back within a leader's term (`check::gc_safety`); and such a prepare is not validated past step 1 (no `Stale`, `ReadWriteConflict`, `WriteWriteConflict` or `TimestampOrder` vote either: Algorithm 3 checks `TooOld` first) |
//! | `kairos-freshness` | inv. 6 | runs without faults only (a crash, a leader change or a silent client legitimately lets `WM` pass a write in flight, design.md "watermarks"): no committed write in `(vts, fts]` of a read (`check::freshness`) |
//! | `kairos-self-invalidation` | inv. 10 | with a client cache (`TxnSimOptions::cache`): no read was served from an entry past its lease end on the client's own clock (`check::self_invalidation`); a stale hit is K2's to catch |
//! | `kairos-plain-read` | — | a plain read returned a committed version: the value a committed transaction wrote at that `vts` |
//! | `kairos-vote-agreement` | — | every replica (and every replay) records the same vote for a prepare's object: votes are a function of the log |
//!
//! and atomicity, decision agreement, lock exclusivity, no lock left, conservation and the
//! replicas' invariants from [`super::check`].
//!
//! Moments: a `Moment` is the global time (`step` = `ns`), so two events at the same
//! nanosecond are never "before" one another: the oracles only flag what certainly happened
//! first. A validation is the first application, at any replica, of the prepare's entry:
//! entries apply in log order everywhere, so a validation first applied after another entry
//! was applied somewhere comes after it in the log.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use strata_kairos::sim::check::{self as kairos_check, Checker};
use strata_kairos::sim::history::{
    Clocks, DecisionApplied, GcState, History, Install, Moment, Outcome, ReadRecord, Site, TxnKind,
    TxnRecord as KTxn, ValidationRecord,
};
use strata_kairos::validator::{AbortReason as KAbort, Vote as KVote};
use strata_log::TxnEvent;
use strata_wire::log::LogIndex;
use strata_wire::txn::{AbortReason, Decision, Timestamp, TxnId, Vote};
use strata_wire::Instant;

use super::check::{self, v};
use super::client::Known;
use super::{accounts, Applied, KairosTrace, Part, TxnReport, INITIAL};
use crate::check::Violation;

/// Every Kairos checker of a run (module docs).
pub fn check_all(r: &TxnReport) -> Vec<Violation> {
    let h = history(r);
    let mut found = kairos_check::replay(&h);
    found.extend(kairos_check::stale_reads(&h));
    found.extend(kairos_check::version_order(&h));
    found.extend(kairos_check::gc_safety(&h));
    found.extend(kairos_check::self_invalidation(&h));
    if h.clocks.strict_within_eps() {
        found.extend(kairos_check::real_time_order(&h));
    }
    if !r.faults {
        found.extend(kairos_check::freshness(&h));
    }
    let mut out: Vec<Violation> = found.into_iter().map(|x| v(name(x.checker), x.what)).collect();
    out.extend(step_one_first(r));
    out.extend(final_versions(r, &h));
    out.extend(plain_reads(r, &h));
    out.extend(vote_agreement(r));
    for c in [
        check::atomicity,
        check::agreement,
        check::lock_exclusivity,
        check::no_lock_left,
        check::conservation,
        check::replicas,
    ] {
        out.extend(c(r));
    }
    out
}

/// The clients' cache hits in a run, and how many of them served a value already
/// superseded (`strata_kairos::sim::check::stale_cache_hits`): validation must have aborted
/// every transaction that read one.
pub fn cache_hits(r: &TxnReport) -> (usize, u64) {
    let hits = r.records.iter().flat_map(|x| &x.reads).filter(|x| x.hit.is_some()).count();
    (hits, kairos_check::stale_cache_hits(&history(r)))
}

fn name(c: Checker) -> &'static str {
    match c {
        Checker::Replay => "kairos-k1-serial-order",
        Checker::StaleRead => "kairos-k2-stale-read",
        Checker::VersionOrder => "kairos-version-order",
        Checker::GcSafety => "kairos-gc-safety",
        Checker::Freshness => "kairos-freshness",
        Checker::SelfInvalidation => "kairos-self-invalidation",
        Checker::RealTimeOrder => "kairos-real-time-order",
        _ => "kairos-other",
    }
}

fn moment(t: Instant) -> Moment {
    Moment { step: t.as_nanos(), ns: t.as_nanos() }
}

/// What the replicas' events say, gathered in one pass.
#[derive(Default)]
struct Events {
    /// The first vote applied per `(part, txn)`: when, its entry, the vote.
    first_vote: BTreeMap<(Part, TxnId), (Instant, LogIndex, Vote)>,
    /// The first decision applied per transaction, and the first `Commit`.
    first_decided: BTreeMap<TxnId, Instant>,
    committed: BTreeSet<TxnId>,
    /// Transactions with an `Abort` vote anywhere (recovery's included).
    abort_voted: BTreeSet<TxnId>,
}

fn events(r: &TxnReport) -> Events {
    let mut e = Events::default();
    for a in &r.applied {
        let Applied::Event { table, shard, event, at, .. } = a else { continue };
        match event {
            TxnEvent::Voted { index, txn, vote, key, .. } => {
                if key.is_some() {
                    e.first_vote.entry(((*table, *shard), *txn)).or_insert((*at, *index, *vote));
                }
                if *vote != Vote::Prepared {
                    e.abort_voted.insert(*txn);
                }
            }
            TxnEvent::Decided { txn, decision, .. } => {
                e.first_decided.entry(*txn).or_insert(*at);
                if *decision == Decision::Commit {
                    e.committed.insert(*txn);
                }
            }
        }
    }
    e
}

/// A transaction as the checkers see it: a client's, with its outcome resolved from the
/// replicas when the client did not know it, or the setup's.
struct View {
    txn: KTxn,
    writes: Vec<Bytes>,
}

fn views(r: &TxnReport, trace: &KairosTrace, e: &Events) -> Vec<View> {
    let mut out = Vec::new();
    if let Some((id, ts, at)) = trace.setup {
        let writes: Vec<Bytes> = accounts();
        let value = Some(Bytes::from(INITIAL.to_string()));
        out.push(View {
            txn: KTxn {
                id,
                client: u32::MAX,
                kind: TxnKind::ReadWrite,
                reads: Vec::new(),
                writes: writes.iter().map(|k| (k.clone(), value.clone())).collect(),
                commit_ts: ts,
                freshness: None,
                outcome: Some(Outcome::Committed),
                decided_at: Some(moment(at)),
                begun_at: moment(Instant::ZERO),
                reported_at: Some(moment(at)),
            },
            writes,
        });
    }
    for rec in &r.records {
        let (Some(id), Some(stamp)) = (rec.txn, rec.kairos) else { continue };
        let outcome = match rec.outcome {
            Known::Committed => Some(Outcome::Committed),
            Known::Aborted => Some(Outcome::Aborted(Vec::new())),
            Known::Unknown if e.committed.contains(&id) => Some(Outcome::Committed),
            Known::Unknown if e.first_decided.contains_key(&id) || e.abort_voted.contains(&id) => {
                Some(Outcome::Aborted(Vec::new()))
            }
            Known::Unknown => None,
        };
        let decided_at = match rec.outcome {
            Known::Unknown => e.first_decided.get(&id).copied(),
            _ => Some(rec.completed),
        };
        let reads = rec
            .reads
            .iter()
            .map(|r| ReadRecord {
                key: r.key.clone(),
                value: r.value.clone(),
                vts: r.vts,
                fts: r.fts,
                cache_hit: r.hit.is_some(),
                lease: r.hit,
                at: moment(r.at),
            })
            .collect();
        let kind = if stamp.read_only { TxnKind::ReadOnly } else { TxnKind::ReadWrite };
        out.push(View {
            txn: KTxn {
                id,
                client: rec.client as u32,
                kind,
                reads,
                writes: rec.writes.iter().map(|(k, v)| (k.clone(), Some(v.clone()))).collect(),
                commit_ts: stamp.commit_ts,
                freshness: stamp.freshness,
                outcome,
                decided_at: decided_at.map(moment),
                begun_at: moment(rec.invoked),
                // An unknown outcome was never reported to the application.
                reported_at: (rec.outcome != Known::Unknown).then(|| moment(rec.reported)),
            },
            writes: rec.writes.iter().map(|(k, _)| k.clone()).collect(),
        });
    }
    out
}

/// The validator index of a participant in the `History`: the validating table's shard is
/// its own (the placement's), another table's a number of its own, so GC safety judges its
/// prepares too without mixing them into the validators' records.
fn validator_id(r: &TxnReport, (table, shard): Part) -> usize {
    if table == r.layout.validating() {
        shard as usize
    } else {
        1_000 * (table + 1) + shard as usize
    }
}

/// The highest `ts_GC` the leader that appended the entry at `index` of `part` announced in
/// its term before it appended that entry (`ZERO`: none, or the append was not seen).
fn announced_before(trace: &KairosTrace, part: Part, index: LogIndex) -> Timestamp {
    let Some(&(node, appended)) = trace.appended.get(&(part, index)) else {
        return Timestamp::ZERO;
    };
    let term = (node, index.epoch);
    trace
        .announced
        .iter()
        .filter(|(p, leader, at, _)| *p == part && *leader == term && *at < appended)
        .map(|(.., ts_gc)| *ts_gc)
        .max()
        .unwrap_or(Timestamp::ZERO)
}

/// The run as `strata_kairos::sim::history` records a simulation (module docs).
pub fn history(r: &TxnReport) -> History {
    let trace = r.kairos.as_ref().expect("a Kairos run records its trace");
    let layout = &r.layout;
    let validating = layout.validating();
    let e = events(r);
    let views = views(r, trace, &e);
    let by_id: BTreeMap<TxnId, &View> = views.iter().map(|w| (w.txn.id, w)).collect();
    let placement = accounts()
        .into_iter()
        .map(|k| {
            let (vk, shard) = (layout.part(validating, &k).1, layout.part(0, &k).1);
            (k, vk as usize, shard as usize)
        })
        .collect();
    let mut validations = Vec::new();
    for (&(part, txn), &(at, index, vote)) in &e.first_vote {
        let Some(w) = by_id.get(&txn) else { continue };
        let owned = |k: &Bytes| layout.part(part.0, k) == part;
        // (Another table's participant, a data shard, validates no read.)
        let reads = w.txn.reads.iter().filter(|r| part.0 == validating && owned(&r.key));
        validations.push(ValidationRecord {
            validator: validator_id(r, part),
            txn,
            at: moment(at),
            // (Only Commit or not matters to the checkers; the wire vote carries no key.)
            vote: if vote == Vote::Prepared {
                KVote::Commit
            } else {
                KVote::Abort(KAbort::Refused)
            },
            freshness: w.txn.freshness,
            ts_gc: announced_before(trace, part, index),
            reads: reads.map(|r| (r.key.clone(), r.vts)).collect(),
            writes: w.writes.iter().filter(|k| owned(k)).cloned().collect(),
        });
    }
    let (decisions, installs) = decisions_and_installs(r, &by_id);
    // Each leader term's announcements, as one "validator" whose `ts_GC` must not go back.
    let mut terms: BTreeMap<(Part, (usize, u32)), usize> = BTreeMap::new();
    let gc_states = trace
        .announced
        .iter()
        .map(|&(part, leader, at, ts_gc)| {
            let n = terms.len();
            let validator = *terms.entry((part, leader)).or_insert(n);
            GcState { validator, at: moment(at), wm: Timestamp::ZERO, ts_gc }
        })
        .collect();
    History {
        placement,
        txns: views.into_iter().map(|w| w.txn).collect(),
        validations,
        decisions,
        installs,
        gc_states,
        clocks: clocks(trace, r.end),
        ..History::default()
    }
}

/// The clients' clock errors over the run (offset, and drift from their start until `end`),
/// and strict mode's `eps`: what K5's checker needs to know whether it applies.
fn clocks(trace: &KairosTrace, end: Instant) -> Clocks {
    let elapsed_ns = end.saturating_since(trace.clients_start).as_nanos() as i64;
    let errors = trace.skews.iter().flat_map(|s| {
        let drifted = s.offset_ns + s.drift_ppm * elapsed_ns / 1_000_000;
        [s.offset_ns, drifted]
    });
    let (min, max) = errors.fold((0, 0), |(lo, hi), e| (e.min(lo), e.max(hi)));
    Clocks {
        strict_eps_ns: trace.strict_eps.map(|eps| eps.as_nanos() as u64),
        min_error_ns: min,
        max_error_ns: max,
    }
}

/// Decisions applied (per logical site: the validating table's shard, the data table's
/// shard) and versions installed (per replica incarnation: a restart or a move replaces the
/// replica's state, which then replays or starts from the installed state).
fn decisions_and_installs(
    r: &TxnReport,
    by_id: &BTreeMap<TxnId, &View>,
) -> (Vec<DecisionApplied>, Vec<Install>) {
    let validating = r.layout.validating();
    let mut generation: BTreeMap<(usize, usize, u32), u64> = BTreeMap::new();
    let mut sites: BTreeMap<(usize, usize, u32, u64), usize> = BTreeMap::new();
    let (mut decisions, mut installs) = (Vec::new(), Vec::new());
    for a in &r.applied {
        match a {
            Applied::Restarted { node } => {
                for (table, shard) in r.layout.parts() {
                    *generation.entry((*node, table, shard)).or_default() += 1;
                }
            }
            Applied::Locks { node, table, shard, .. } => {
                *generation.entry((*node, *table, *shard)).or_default() += 1;
            }
            Applied::Event { node, table, shard, event, at } => {
                let TxnEvent::Decided { txn, key, decision, .. } = event else { continue };
                if *table == validating {
                    let site = Site::Validator(*shard as usize);
                    decisions.push(DecisionApplied { site, txn: *txn, at: moment(*at) });
                }
                if *table == 0 {
                    let site = Site::Primary(*shard as usize);
                    decisions.push(DecisionApplied { site, txn: *txn, at: moment(*at) });
                }
                let Some(w) = by_id.get(txn).filter(|_| *decision == Decision::Commit) else {
                    continue;
                };
                let g = generation.get(&(*node, *table, *shard)).copied().unwrap_or(0);
                let n = sites.len();
                let id = *sites.entry((*node, *table, *shard, g)).or_insert(n);
                let site = if *table == 0 { Site::Primary(id) } else { Site::Validator(id) };
                installs.push(Install {
                    site,
                    key: key.clone(),
                    ts: w.txn.commit_ts,
                    txn: *txn,
                    at: moment(*at),
                });
            }
        }
    }
    (decisions, installs)
}

/// §7 inv. 7 with Algorithm 3's order (§5.6: step 1 before steps 2-4): a prepare whose
/// freshness is below the `ts_GC` its leader announced before appending it votes `TooOld`,
/// or what the log decides before validating (`PreparedConflict` on a locked key,
/// `Refused`) — never a vote of steps 2-5. (A long-stalled transaction's reads are usually
/// overwritten: without `TooOld` it would vote `Stale`, which `check::gc_safety`, judging
/// `Commit` votes only, cannot see.)
fn step_one_first(r: &TxnReport) -> Vec<Violation> {
    let trace = r.kairos.as_ref().expect("a Kairos run");
    let freshness: BTreeMap<TxnId, Timestamp> =
        r.records.iter().filter_map(|rec| Some((rec.txn?, rec.kairos?.freshness?))).collect();
    let e = events(r);
    let mut out = Vec::new();
    for (&(part, txn), &(_, index, vote)) in &e.first_vote {
        let Some(&f) = freshness.get(&txn) else { continue };
        let gc = announced_before(trace, part, index);
        let validated = matches!(
            vote,
            Vote::Prepared
                | Vote::Abort(
                    AbortReason::Stale
                        | AbortReason::ReadWriteConflict
                        | AbortReason::WriteWriteConflict
                        | AbortReason::TimestampOrder
                )
        );
        if f < gc && validated {
            let table = r.layout.name(part.0);
            out.push(v(
                "kairos-gc-safety",
                format!(
                    "{table}/{}: {txn} (freshness {f}) voted {vote:?}, past step 1, after its \
                     leader announced ts_GC {gc}",
                    part.1
                ),
            ));
        }
    }
    out
}

/// The committed versions of every key, `(key, vts) -> value`.
fn versions(h: &History) -> BTreeMap<(Bytes, Timestamp), Option<Bytes>> {
    let committed = h.txns.iter().filter(|t| t.committed());
    committed
        .flat_map(|t| t.writes.iter().map(move |(k, v)| ((k.clone(), t.commit_ts), v.clone())))
        .collect()
}

/// §7 inv. 2, "each equals the writer's `T.commit`": every account's final version is its
/// last committed write, at that write's commit timestamp.
fn final_versions(r: &TxnReport, h: &History) -> Vec<Violation> {
    let trace = r.kairos.as_ref().expect("a Kairos run");
    let versions = versions(h);
    let mut out = Vec::new();
    for ((key, value), (_, vts)) in r.final_values.iter().zip(&trace.final_vts) {
        let last = versions.range((key.clone(), Timestamp::ZERO)..=(key.clone(), Timestamp::MAX));
        let want = last.last().map(|((_, ts), v)| (*ts, v.clone()));
        if want != Some((*vts, value.clone())) {
            out.push(v(
                "kairos-version-order",
                format!("{key:?} ends at {value:?}@{vts}; its last committed write is {want:?}"),
            ));
        }
    }
    out
}

/// A plain read (or a follow-up read) returned a committed version.
fn plain_reads(r: &TxnReport, h: &History) -> Vec<Violation> {
    let versions = versions(h);
    let plain = r.records.iter().filter(|rec| rec.txn.is_none());
    let reads = plain.flat_map(|rec| rec.reads.iter().map(move |read| (rec.client, read)));
    reads
        .filter(|(_, read)| versions.get(&(read.key.clone(), read.vts)) != Some(&read.value))
        .map(|(client, read)| {
            v(
                "kairos-plain-read",
                format!(
                    "client {client} read {:?} = {:?}@{}, which no committed transaction wrote",
                    read.key, read.value, read.vts
                ),
            )
        })
        .collect()
}

/// Every replica, and every replay, records the same vote for each object (votes are a
/// function of the log; a replica that validated against other state diverges here).
fn vote_agreement(r: &TxnReport) -> Vec<Violation> {
    let mut votes: BTreeMap<(usize, u32, TxnId, u64), BTreeSet<String>> = BTreeMap::new();
    for a in &r.applied {
        if let Applied::Event {
            table, shard, event: TxnEvent::Voted { txn, seq, vote, .. }, ..
        } = a
        {
            votes.entry((*table, *shard, *txn, *seq)).or_default().insert(format!("{vote:?}"));
        }
    }
    votes
        .into_iter()
        .filter(|(_, vs)| vs.len() > 1)
        .map(|((table, shard, txn, seq), vs)| {
            let table = r.layout.name(table);
            v(
                "kairos-vote-agreement",
                format!("{table}/{shard}: {txn}'s object {seq} was voted {vs:?} by its replicas"),
            )
        })
        .collect()
}
