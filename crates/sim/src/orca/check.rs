//! The checkers of orca.md §7, invariants 1 - 14, each a pure function of an [`OrcaHistory`]
//! (so each can be shown a known-bad history it must flag: `tests/orca_checkers.rs`).
//!
//! Invariant 1 (and 2, 10, 12) is judged in every mode: the weak baselines must be caught
//! breaking it (§7.15). The others are judged where the configuration promises them
//! ([`Promises`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use strata_log::{LogEvent, LogIndex, RpcId};
use strata_wire::log::Evaluation;
use strata_wire::NodeId;

use super::history::{OrcaHistory, Promises};
use crate::check::Violation;

pub type OrcaChecker = fn(&OrcaHistory) -> Vec<Violation>;

/// Every checker, by invariant number.
pub const ORCA_CHECKERS: &[OrcaChecker] = &[
    driver,
    monotonic_reads,
    served_exists,
    durable_at_serve,
    active_set_reads,
    removal_after_mark_out,
    readd_precondition,
    di_sanity,
    active_set_size,
    elections,
    no_truncation_of_served,
    immediate_durability,
    log_order,
    session_token,
    liveness,
    at_most_once,
    stable_result,
];

/// RIFL's invariants on log-table writes (rifl.md §7 inv. 1, 2).
pub const AT_MOST_ONCE: &str = "rifl-1-at-most-once";
pub const STABLE_RESULT: &str = "rifl-2-stable-result";

/// Checker names of invariant 1 (the one the weak baselines must break, §7.15).
pub const MONOTONIC_READS: &str = "orca-1-monotonic-reads";

/// Runs every checker, earliest violation first.
pub fn check_all(h: &OrcaHistory) -> Vec<Violation> {
    let mut all: Vec<Violation> = ORCA_CHECKERS.iter().flat_map(|c| c(h)).collect();
    all.sort_by_key(|v| v.at.unwrap_or(strata_wire::Instant::MAX));
    all
}

fn v(checker: &'static str, at: strata_wire::Instant, detail: String) -> Violation {
    Violation { checker, at: Some(at), detail }
}

fn key(k: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(k))
}

/// A core panicked (in an input handler or `check_invariants`, run after every input).
pub fn driver(h: &OrcaHistory) -> Vec<Violation> {
    h.anomalies
        .iter()
        .map(|a| {
            let who = a.node.map_or(String::new(), |n| format!("{n}: "));
            v("orca-driver", a.at, format!("{who}{}", a.what))
        })
        .collect()
}

/// §7.1 (G2): for reads `r1.completed < r2.invoked`, `r2` returns a version of its key at
/// least as new as the newest version of that key in `state(r1)` (the prefix of `H` up to
/// `r1.u`). A read of an entry not in `H` (lost data) is compared by index with later reads of
/// its key.
pub fn monotonic_reads(h: &OrcaHistory) -> Vec<Violation> {
    // Positions in H of the writes of each key: the entries that created a version of it (a
    // rejected conditional write or a refused add is in H but changed nothing).
    let mut writes: HashMap<&[u8], Vec<usize>> = HashMap::new();
    let evaluations = h.evaluations();
    for (p, e) in h.h.iter().enumerate() {
        if evaluations[p].as_ref().is_some_and(|ev| ev.write.is_some()) {
            writes.entry(&e.key[..]).or_default().push(p);
        }
    }
    let mut by_completed: Vec<usize> = (0..h.reads.len()).collect();
    by_completed.sort_by_key(|&i| h.reads[i].completed);
    // prefix[i]: the read (among the first i completed) whose state reaches furthest into H.
    let mut prefix: Vec<Option<(usize, usize)>> = vec![None];
    for &i in &by_completed {
        let here = h.pos(h.reads[i].value.update_index).map(|p| (p, i));
        let best = match (*prefix.last().expect("seeded"), here) {
            (Some(a), Some(b)) => Some(if b.0 > a.0 { b } else { a }),
            (a, b) => a.or(b),
        };
        prefix.push(best);
    }
    let lost: Vec<usize> = by_completed
        .iter()
        .copied()
        .filter(|&i| {
            let u = h.reads[i].value.update_index;
            u != LogIndex::ZERO && h.pos(u).is_none()
        })
        .collect();
    let mut out = Vec::new();
    for r2 in &h.reads {
        let before = by_completed.partition_point(|&i| h.reads[i].completed < r2.invoked);
        let u2 = r2.value.update_index;
        let p2 = h.pos(u2);
        if let Some((p1, i1)) = prefix[before] {
            let newest = writes
                .get(&r2.key[..])
                .and_then(|ws| ws[..ws.partition_point(|&w| w <= p1)].last().copied());
            if let Some(w) = newest {
                let older = match p2 {
                    Some(p2) => p2 < w,
                    None => u2 < h.h[w].index,
                };
                if older {
                    let r1 = &h.reads[i1];
                    out.push(v(
                        MONOTONIC_READS,
                        r2.completed,
                        format!(
                            "client {} read {} at {} (asked {}) = {} by {}, but a read completed before it was invoked (client {}, {} at {} by {}) saw a state holding version {} of that key",
                            r2.client,
                            key(&r2.key),
                            fmt_t(r2.completed),
                            r2.asked,
                            u2,
                            r2.value.served_by,
                            r1.client,
                            key(&r1.key),
                            r1.value.update_index,
                            r1.value.served_by,
                            h.h[w].index
                        ),
                    ));
                    continue;
                }
            }
        }
        for &i1 in lost.iter().filter(|&&i| h.reads[i].completed < r2.invoked) {
            let r1 = &h.reads[i1];
            if r1.key == r2.key && u2 < r1.value.update_index {
                out.push(v(
                    MONOTONIC_READS,
                    r2.completed,
                    format!(
                        "read of {} returned {} after an earlier read returned {} (since lost from H)",
                        key(&r2.key),
                        u2,
                        r1.value.update_index
                    ),
                ));
                break;
            }
        }
    }
    out
}

fn fmt_t(t: strata_wire::Instant) -> String {
    crate::history::fmt_ms(t.0)
}

/// §7.2: the entry at `r.u` exists in `H`, takes effect (not a duplicate of an RPC,
/// `OrcaHistory::effective`) and writes exactly the returned value (absent keys: the
/// tombstone, or `ZERO` and no value). Also the second half of §7.12: `H` contains every
/// write whose index a read returned.
pub fn served_exists(h: &OrcaHistory) -> Vec<Violation> {
    let evaluations = h.evaluations();
    let mut out = Vec::new();
    for r in &h.reads {
        let u = r.value.update_index;
        let got = &r.value.value;
        if u == LogIndex::ZERO {
            if got.is_some() {
                out.push(v(
                    "orca-2-served-exists",
                    r.completed,
                    format!("read of {} returned a value at ZERO", key(&r.key)),
                ));
            }
            continue;
        }
        let bad = match h.entry(u) {
            None => Some("an entry that is not in H (lost)".to_string()),
            Some(e) => match &evaluations[h.pos(u).expect("in H")] {
                None => Some(
                    "a duplicate entry of an RPC (or a stale one), which changes nothing"
                        .to_string(),
                ),
                Some(Evaluation { write: None, outcome }) => {
                    Some(format!("{:?} there changed nothing ({outcome:?})", e.op))
                }
                Some(Evaluation { write: Some(w), .. }) if e.key != r.key || w != got => Some(
                    format!("{u} but H has {} {:?} there, which wrote {w:?}", key(&e.key), e.op),
                ),
                Some(_) => None,
            },
        };
        if let Some(why) = bad {
            out.push(v(
                "orca-2-served-exists",
                r.completed,
                format!(
                    "read of {} by {} returned {:?} at {u}: {why}",
                    key(&r.key),
                    r.value.served_by,
                    got
                ),
            ));
        }
    }
    out
}

/// The active set of each epoch over time, from `SyncPhaseDone`, `AsAdded` and `AsRemoved`:
/// `(event position, leader, set after the change)`.
struct AsTimeline {
    by_epoch: BTreeMap<u32, Vec<(usize, NodeId, BTreeSet<NodeId>)>>,
}

impl AsTimeline {
    fn new(h: &OrcaHistory) -> AsTimeline {
        let mut by_epoch: BTreeMap<u32, Vec<(usize, NodeId, BTreeSet<NodeId>)>> = BTreeMap::new();
        for (pos, s) in h.events.iter().enumerate() {
            let epoch = match &s.event {
                LogEvent::SyncPhaseDone { epoch, .. }
                | LogEvent::AsAdded { epoch, .. }
                | LogEvent::AsRemoved { epoch, .. } => *epoch,
                _ => continue,
            };
            let list = by_epoch.entry(epoch).or_default();
            let mut set = list.last().map(|l| l.2.clone()).unwrap_or_default();
            match &s.event {
                LogEvent::SyncPhaseDone { active_set, .. } => {
                    set = active_set.iter().copied().collect()
                }
                LogEvent::AsAdded { node, .. } => {
                    set.insert(*node);
                }
                LogEvent::AsRemoved { node, .. } => {
                    set.remove(node);
                }
                _ => unreachable!("filtered above"),
            }
            list.push((pos, s.node, set));
        }
        AsTimeline { by_epoch }
    }

    /// The set of `epoch` just before event position `pos`.
    fn at(&self, epoch: u32, pos: usize) -> Option<&BTreeSet<NodeId>> {
        let list = self.by_epoch.get(&epoch)?;
        let i = list.partition_point(|c| c.0 < pos);
        i.checked_sub(1).map(|i| &list[i].2)
    }
}

/// §7.3 (G3): when a read returns update-index `u`, a majority of nodes hold `H`'s entry `u`
/// on disk; in ORCA mode every active-set member has persisted it and applied `>= u` (R1).
pub fn durable_at_serve(h: &OrcaHistory) -> Vec<Violation> {
    let Promises { durable_reads, active_set, .. } = h.promises;
    if !durable_reads {
        return Vec::new();
    }
    let timeline = AsTimeline::new(h);
    let mut out = Vec::new();
    for s in h.serves.iter().filter(|s| s.u != LogIndex::ZERO) {
        let want = h.entry(s.u);
        let holds = |n: &super::history::NodeAtServe| match (&n.disk_entry, want) {
            (Some(d), Some(w)) => d == w,
            (Some(_), None) => true, // not in H: judged by §7.2
            (None, _) => false,
        };
        let holders = s.nodes.iter().filter(|n| holds(n)).count();
        if holders < h.majority() {
            out.push(v(
                "orca-3-durable-at-serve",
                s.at,
                format!(
                    "{} served {} at {} durable on only {holders} nodes",
                    s.served_by,
                    key(&s.key),
                    s.u
                ),
            ));
        }
        if active_set {
            if let Some(set) = timeline.at(s.epoch, s.pos) {
                for m in set {
                    let Some(n) = s.nodes.iter().find(|n| n.node == *m) else { continue };
                    if !holds(n) || (n.up && n.applied < s.u) {
                        out.push(v(
                            "orca-3-durable-at-serve",
                            s.at,
                            format!(
                                "{} served {} at {} while active-set member {m} had not persisted and applied it (applied {})",
                                s.served_by,
                                key(&s.key),
                                s.u,
                                n.applied
                            ),
                        ));
                    }
                }
            }
        }
    }
    out
}

/// Event position at which some candidate of each epoch had a majority of votes (its own
/// included): from then on no leader of an older epoch may serve (§5.8).
fn vote_majorities(h: &OrcaHistory) -> BTreeMap<u32, usize> {
    let mut votes: HashMap<(u32, NodeId), BTreeSet<NodeId>> = HashMap::new();
    let mut first: BTreeMap<u32, usize> = BTreeMap::new();
    for c in &h.votes {
        let set = votes.entry((c.epoch, c.candidate)).or_default();
        set.insert(c.voter);
        if set.len() >= h.majority() {
            first.entry(c.epoch).or_insert(c.pos);
        }
    }
    first
}

/// §7.4 (R2): a follower serves only while in its leader's active set (Member or Removing) with
/// an unexpired lease; a leader only under its leader lease; nobody once a candidate of a
/// higher epoch holds a majority of votes. Leader-only modes: followers never serve.
pub fn active_set_reads(h: &OrcaHistory) -> Vec<Violation> {
    let Promises { leased_reads, active_set, .. } = h.promises;
    if !leased_reads {
        return Vec::new();
    }
    let timeline = AsTimeline::new(h);
    let majorities = vote_majorities(h);
    let name = "orca-4-active-set-reads";
    let mut out = Vec::new();
    for s in &h.serves {
        if s.server_was_leader {
            if !s.server_valid {
                out.push(v(
                    name,
                    s.at,
                    format!(
                        "leader {} served {} without a valid leader lease",
                        s.served_by,
                        key(&s.key)
                    ),
                ));
            }
        } else if !active_set {
            out.push(v(
                name,
                s.at,
                format!("follower {} served {} under leader-only reads", s.served_by, key(&s.key)),
            ));
        } else {
            match timeline.at(s.epoch, s.pos) {
                Some(set) if set.contains(&s.served_by) => {}
                set => out.push(v(
                    name,
                    s.at,
                    format!(
                        "{} served a read of {} outside the active set {:?} of epoch {}",
                        s.served_by,
                        key(&s.key),
                        set.map(|s| s.iter().map(|n| n.0).collect::<Vec<_>>()),
                        s.epoch
                    ),
                )),
            }
            if !s.server_valid {
                out.push(v(
                    name,
                    s.at,
                    format!(
                        "{} served a read of {} with an expired lease",
                        s.served_by,
                        key(&s.key)
                    ),
                ));
            }
        }
        if let Some((e, _)) = majorities.range(s.epoch + 1..).find(|(_, &p)| p < s.pos) {
            out.push(v(
                name,
                s.at,
                format!(
                    "{} served a read in epoch {} after a candidate of epoch {e} won a majority of votes",
                    s.served_by, s.epoch
                ),
            ));
        }
    }
    out
}

/// §7.5: a follower removed from the active set does not serve from the removal until it is
/// added again.
pub fn removal_after_mark_out(h: &OrcaHistory) -> Vec<Violation> {
    if !h.promises.active_set {
        return Vec::new();
    }
    let name = "orca-5-removal-after-mark-out";
    let mut out = Vec::new();
    for r in &h.removals {
        if r.still_serving {
            out.push(v(
                name,
                r.at,
                format!(
                    "{} removed from the active set of epoch {} while still serving",
                    r.node, r.epoch
                ),
            ));
        }
        let readded = h
            .additions
            .iter()
            .filter(|a| a.node == r.node && a.epoch == r.epoch && a.pos > r.pos)
            .map(|a| a.pos)
            .min()
            .unwrap_or(usize::MAX);
        if let Some(s) = h.followers.iter().find(|s| {
            s.node == r.node && s.epoch == r.epoch && s.serving && s.pos > r.pos && s.pos < readded
        }) {
            out.push(v(
                name,
                s.at,
                format!(
                    "{} serving again in epoch {} after its removal at {}",
                    r.node,
                    r.epoch,
                    fmt_t(r.at)
                ),
            ));
        }
    }
    out
}

/// §7.6: a follower is added only when its reported persisted and applied indexes are `>= DI`
/// (and the DI entry really is on its disk).
pub fn readd_precondition(h: &OrcaHistory) -> Vec<Violation> {
    if !h.promises.active_set {
        return Vec::new();
    }
    h.additions
        .iter()
        .filter(|a| a.reported_persisted < a.di || a.reported_applied < a.di || !a.disk_has_di)
        .map(|a| {
            v(
                "orca-6-readd-precondition",
                a.at,
                format!(
                    "{} added in epoch {} with persisted {} / applied {} (disk holds DI: {}) below DI {}",
                    a.node, a.epoch, a.reported_persisted, a.reported_applied, a.disk_has_di, a.di
                ),
            )
        })
        .collect()
}

/// §7.7: DI never decreases within an epoch; it is on disk on a majority and (ORCA) persisted
/// and applied by every member; a follower's `DI_F` never exceeds its leader's DI; a serving
/// follower has applied `>= DI_F`.
pub fn di_sanity(h: &OrcaHistory) -> Vec<Violation> {
    let name = "orca-7-di-sanity";
    let mut out = Vec::new();
    let mut last: HashMap<u32, LogIndex> = HashMap::new();
    for d in &h.dis {
        if last.get(&d.epoch).is_some_and(|&p| d.di < p) {
            out.push(v(name, d.at, format!("DI of epoch {} decreased to {}", d.epoch, d.di)));
        }
        last.insert(d.epoch, d.di);
        if d.holders.len() < h.majority() {
            out.push(v(
                name,
                d.at,
                format!("DI {} of {} persisted on only {:?}", d.di, d.leader, d.holders),
            ));
        }
        if h.promises.active_set {
            for (m, holds, applied) in &d.members {
                if !holds || applied.is_some_and(|a| a < d.di) {
                    out.push(v(
                        name,
                        d.at,
                        format!(
                            "DI {} above member {m} (persisted: {holds}, applied {applied:?})",
                            d.di
                        ),
                    ));
                }
            }
        }
    }
    // The leader's DI of each epoch over event positions.
    let mut dis: HashMap<u32, Vec<(usize, LogIndex)>> = HashMap::new();
    for d in &h.dis {
        dis.entry(d.epoch).or_default().push((d.pos, d.di));
    }
    for s in &h.followers {
        let leader_di = dis.get(&s.epoch).and_then(|l| {
            let i = l.partition_point(|x| x.0 < s.pos);
            i.checked_sub(1).map(|i| l[i].1)
        });
        if s.di_f > leader_di.unwrap_or(LogIndex::ZERO) {
            out.push(v(
                name,
                s.at,
                format!(
                    "{}: DI_F {} above the leader's DI {:?} of epoch {}",
                    s.node, s.di_f, leader_di, s.epoch
                ),
            ));
        }
        if h.promises.active_set && s.serving && s.applied < s.di_f {
            out.push(v(
                name,
                s.at,
                format!("{} serving with applied {} below DI_F {}", s.node, s.applied, s.di_f),
            ));
        }
    }
    out
}

/// §7.8: the active set always holds the leader and at least a majority.
pub fn active_set_size(h: &OrcaHistory) -> Vec<Violation> {
    if !h.promises.active_set {
        return Vec::new();
    }
    let timeline = AsTimeline::new(h);
    let mut out = Vec::new();
    for (epoch, list) in &timeline.by_epoch {
        for (pos, leader, set) in list {
            if set.len() < h.majority() || !set.contains(leader) {
                out.push(v(
                    "orca-8-active-set-size",
                    h.events[*pos].at,
                    format!(
                        "active set of epoch {epoch} (leader {leader}) became {:?}",
                        set.iter().map(|n| n.0).collect::<Vec<_>>()
                    ),
                ));
            }
        }
    }
    out
}

/// §7.9: no vote for a candidate with a lower last index than the voter's; one leader per
/// epoch; one vote per node and epoch (a candidate votes for itself), across crashes.
pub fn elections(h: &OrcaHistory) -> Vec<Violation> {
    let name = "orca-9-elections";
    let mut out = Vec::new();
    let mut leaders: BTreeMap<u32, BTreeSet<NodeId>> = BTreeMap::new();
    for s in &h.events {
        match &s.event {
            LogEvent::VoteGranted { candidate, candidate_last, own_last, .. }
                if candidate_last < own_last =>
            {
                out.push(v(
                    name,
                    s.at,
                    format!(
                        "{} voted for {candidate} (last {candidate_last}) with own last {own_last}",
                        s.node
                    ),
                ));
            }
            LogEvent::BecameLeader { epoch, .. } => {
                let set = leaders.entry(*epoch).or_default();
                set.insert(s.node);
                if set.len() > 1 {
                    out.push(v(name, s.at, format!("two leaders in epoch {epoch}: {set:?}")));
                }
            }
            _ => {}
        }
    }
    let mut votes: BTreeMap<(NodeId, u32), BTreeSet<NodeId>> = BTreeMap::new();
    for c in &h.votes {
        let set = votes.entry((c.voter, c.epoch)).or_default();
        set.insert(c.candidate);
        if set.len() > 1 {
            out.push(v(
                name,
                c.at,
                format!(
                    "{} voted twice in epoch {} (a candidate votes for itself): {set:?}",
                    c.voter, c.epoch
                ),
            ));
        }
    }
    out
}

/// §7.10: no node truncates an entry of `H` at or before the position in `H` of the largest
/// update-index served so far.
pub fn no_truncation_of_served(h: &OrcaHistory) -> Vec<Violation> {
    let mut serves: Vec<(usize, usize)> =
        h.serves.iter().filter_map(|s| Some((s.pos, h.pos(s.u)?))).collect();
    serves.sort_unstable();
    let mut out = Vec::new();
    for t in &h.truncations {
        let served = serves.iter().take_while(|s| s.0 < t.pos).map(|s| s.1).max();
        let Some(limit) = served else { continue };
        if let Some(x) = t.removed.iter().find(|&&x| h.pos(x).is_some_and(|p| p <= limit)) {
            out.push(v(
                "orca-10-no-truncation-of-served",
                t.at,
                format!(
                    "{} truncated {x} of H, at or before the served {}",
                    t.node, h.h[limit].index
                ),
            ));
        }
    }
    out
}

/// §7.11 (G6): every write acknowledged with immediate durability is in `H`; with sync
/// durability every acknowledged write is.
pub fn immediate_durability(h: &OrcaHistory) -> Vec<Violation> {
    let mut out = Vec::new();
    for s in &h.events {
        if let LogEvent::WriteAcked { index, client_id, seq, immediate } = &s.event {
            if !immediate && !h.promises.sync_writes {
                continue;
            }
            let kept = h.entry(*index).is_some_and(|e| e.client_id == *client_id && e.seq == *seq);
            if !kept {
                let what = if *immediate { "immediate-durability" } else { "sync-durability" };
                out.push(v(
                    "orca-11-immediate-durability",
                    s.at,
                    format!("{what} write {index} acknowledged by {} is not in H", s.node),
                ));
            }
        }
    }
    out
}

/// §7.12 (G1): every node's applied sequence at the end is a prefix of `H` followed only by
/// entries no read ever returned (lost, never-served suffixes). (`H` holding every served
/// index is §7.2.)
pub fn log_order(h: &OrcaHistory) -> Vec<Violation> {
    let served: BTreeSet<LogIndex> = h.serves.iter().map(|s| s.u).collect();
    let at = h.events.last().map_or(strata_wire::Instant::ZERO, |e| e.at);
    let mut out = Vec::new();
    for (node, seq) in &h.final_applied {
        let Some(seq) = seq else { continue };
        let common = seq.iter().zip(&h.h).take_while(|(a, e)| **a == e.index).count();
        if let Some(x) = seq[common..].iter().find(|x| served.contains(x)) {
            out.push(v(
                "orca-12-log-order",
                at,
                format!("{node} applied the served entry {x} outside H's order (diverges after {common} entries)"),
            ));
        }
    }
    out
}

/// §7.13: a read carrying a session token `m` is served from a state with `applied >= m`.
pub fn session_token(h: &OrcaHistory) -> Vec<Violation> {
    h.serves
        .iter()
        .filter(|s| s.min_index.is_some_and(|m| s.applied < m))
        .map(|s| {
            v(
                "orca-13-session-token",
                s.at,
                format!(
                    "{} served {} with applied {} below the token {:?}",
                    s.served_by,
                    key(&s.key),
                    s.applied,
                    s.min_index
                ),
            )
        })
        .collect()
}

/// §7.14: after healing, a leader emerges, writes and reads complete, recovered followers are
/// re-added.
pub fn liveness(h: &OrcaHistory) -> Vec<Violation> {
    h.liveness.iter().map(|a| v("orca-14-liveness", a.at, a.what.clone())).collect()
}

/// rifl.md §7 inv. 1 (at most once), per replica: no node has two entries of one RPC id in
/// effect in its applied state at once. A retry appended twice (across a leader change, or by
/// a leader without the duplicate check) must be skipped at apply time by every replica.
pub fn at_most_once(h: &OrcaHistory) -> Vec<Violation> {
    h.executions
        .iter()
        .filter(|x| !x.others.is_empty())
        .map(|x| {
            let detail = format!(
                "{} executed {} at {} while {:?} of the same RPC was in effect",
                x.node, x.rpc, x.index, x.others
            );
            v(AT_MOST_ONCE, x.at, detail)
        })
        .collect()
}

/// rifl.md §7 inv. 2 (stable result): every `Ok` for one RPC id, delivered or lost, whose
/// index is in `H` names the same entry, and that entry is the RPC's. (An `Ok` whose entry
/// is not in `H` was lost: ORCA's durability checkers judge whether that was allowed.)
pub fn stable_result(h: &OrcaHistory) -> Vec<Violation> {
    let mut first: HashMap<RpcId, LogIndex> = HashMap::new();
    let evaluations = h.evaluations();
    let mut out = Vec::new();
    for ok in &h.write_oks {
        let Some(e) = h.entry(ok.index) else { continue };
        if e.client_id != ok.rpc.client_id || e.seq != ok.rpc.seq {
            let detail = format!(
                "Ok for {} names {}, an entry of c{}#{}",
                ok.rpc, ok.index, e.client_id, e.seq
            );
            out.push(v(STABLE_RESULT, ok.at, detail));
            continue;
        }
        let was = *first.entry(ok.rpc).or_insert(ok.index);
        if was != ok.index {
            let detail = format!("Ok for {} names {} after an Ok naming {}", ok.rpc, ok.index, was);
            out.push(v(STABLE_RESULT, ok.at, detail));
        }
        // R-G2: the result is the one execution's, evaluated where the entry sits in `H`.
        let executed = evaluations[h.pos(ok.index).expect("in H")].as_ref().map(|e| e.outcome);
        if executed.is_some_and(|o| o != ok.outcome) {
            let detail = format!(
                "Ok for {} says {:?}, but its entry {} evaluates to {executed:?} in H",
                ok.rpc, ok.outcome, ok.index
            );
            out.push(v(STABLE_RESULT, ok.at, detail));
        }
    }
    out
}
