//! Strict serializability of transaction histories by a dependency graph, in the style of
//! Adya's phenomena and Elle (issue #18 item 4; rifl.md §7). The first piece of the
//! transaction checkers: a pure function of a [`TxnHistory`], tested on hand-made histories —
//! write skew and a G1c cycle must be flagged, a serial history must pass.
//!
//! Every write installs a version of its key that the history names (the store's own version
//! order: a log table's index), so the version order is known, not inferred. Between
//! committed transactions the graph has an edge
//! * `ww` T1 → T2: T2 installed the version right after T1's, of some key;
//! * `wr` T1 → T2: T2 read a version T1 installed;
//! * `rw` T1 → T2: T1 read a version and T2 installed the next one (an anti-dependency);
//! * `rt` T1 → T2: T1 completed before T2 was invoked (strict serializability).
//!
//! A cycle is a violation, named by its edges (Adya): only `ww` is G0, `ww`/`wr` is G1c, one
//! with `rw` is G2 (write skew is its two-transaction case), one that needs `rt` breaks
//! strict serializability only. Reads that no committed transaction explains are flagged on
//! their own: G1a (a version an aborted transaction wrote) and G1b (a version its writer
//! overwrote in the same transaction).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use bytes::Bytes;
use strata_wire::Instant;

use super::Violation;

/// A version of a key, in the store's version order (0: the initial absence).
pub type Version = u64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnOp {
    /// Read `key` and saw `version` (0: absent, never written).
    Read { key: Bytes, version: Version },
    /// Installed `version` of `key` (if the transaction committed).
    Write { key: Bytes, version: Version },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnOutcome {
    Committed,
    Aborted,
    /// The client never learned the outcome: treated as committed if another transaction read
    /// what it wrote, else left out.
    Unknown,
}

#[derive(Clone, Debug)]
pub struct Txn {
    pub invoked: Instant,
    pub completed: Instant,
    pub outcome: TxnOutcome,
    pub ops: Vec<TxnOp>,
}

#[derive(Clone, Debug, Default)]
pub struct TxnHistory {
    pub txns: Vec<Txn>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Edge {
    Ww,
    Wr,
    Rw,
    Rt,
}

impl fmt::Display for Edge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Edge::Ww => "ww",
            Edge::Wr => "wr",
            Edge::Rw => "rw",
            Edge::Rt => "rt",
        })
    }
}

/// Every violation of strict serializability in `h`.
pub fn check(h: &TxnHistory) -> Vec<Violation> {
    let mut out = Vec::new();
    let writer = writers(h);
    let live: Vec<bool> = (0..h.txns.len()).map(|t| counts(h, &writer, t)).collect();
    aborted_and_intermediate_reads(h, &writer, &live, &mut out);
    let graph = edges(h, &writer, &live);
    for cycle in cycles(h.txns.len(), &graph) {
        let kinds: BTreeSet<Edge> = cycle.iter().map(|&(_, _, e)| e).collect();
        // `cycles` returns a cycle of data edges when the component has one.
        let name = if kinds.contains(&Edge::Rt) {
            "strict-serializability"
        } else if kinds.contains(&Edge::Rw) {
            "G2"
        } else if kinds.contains(&Edge::Wr) {
            "G1c"
        } else {
            "G0"
        };
        let path: Vec<String> = cycle.iter().map(|(a, b, e)| format!("T{a} -{e}-> T{b}")).collect();
        out.push(Violation {
            checker: "txn-serializable",
            at: None,
            detail: format!("{name} cycle: {}", path.join(", ")),
        });
    }
    out
}

/// Who installed each `(key, version)`: the transaction and whether it was that
/// transaction's last write of the key.
fn writers(h: &TxnHistory) -> HashMap<(Bytes, Version), (usize, bool)> {
    let mut w = HashMap::new();
    for (t, txn) in h.txns.iter().enumerate() {
        let mut last: HashMap<&Bytes, Version> = HashMap::new();
        for op in &txn.ops {
            if let TxnOp::Write { key, version } = op {
                last.insert(key, *version);
            }
        }
        for op in &txn.ops {
            if let TxnOp::Write { key, version } = op {
                w.insert((key.clone(), *version), (t, last[key] == *version));
            }
        }
    }
    w
}

/// Whether transaction `t` took effect: committed, or of unknown outcome with a version read
/// by another transaction.
fn counts(h: &TxnHistory, writer: &HashMap<(Bytes, Version), (usize, bool)>, t: usize) -> bool {
    match h.txns[t].outcome {
        TxnOutcome::Committed => true,
        TxnOutcome::Aborted => false,
        TxnOutcome::Unknown => h.txns.iter().enumerate().any(|(u, other)| {
            u != t
                && other.ops.iter().any(|op| match op {
                    TxnOp::Read { key, version } => {
                        writer.get(&(key.clone(), *version)).is_some_and(|&(w, _)| w == t)
                    }
                    TxnOp::Write { .. } => false,
                })
        }),
    }
}

fn aborted_and_intermediate_reads(
    h: &TxnHistory,
    writer: &HashMap<(Bytes, Version), (usize, bool)>,
    live: &[bool],
    out: &mut Vec<Violation>,
) {
    for (t, txn) in h.txns.iter().enumerate().filter(|&(t, _)| live[t]) {
        for op in &txn.ops {
            let TxnOp::Read { key, version } = op else { continue };
            let Some(&(w, last)) = writer.get(&(key.clone(), *version)) else { continue };
            if w == t {
                continue; // its own write
            }
            let phenomenon = match (h.txns[w].outcome, last) {
                (TxnOutcome::Aborted, _) => "G1a: read a version an aborted transaction wrote",
                (_, false) => "G1b: read a version its writer overwrote before it ended",
                _ => continue,
            };
            out.push(Violation {
                checker: "txn-serializable",
                at: Some(txn.completed),
                detail: format!("{phenomenon}: T{t} read {key:?}@{version} of T{w}"),
            });
        }
    }
}

/// The dependency graph among the transactions that took effect: `graph[a]` holds `(b, e)`.
fn edges(
    h: &TxnHistory,
    writer: &HashMap<(Bytes, Version), (usize, bool)>,
    live: &[bool],
) -> Vec<BTreeSet<(usize, Edge)>> {
    let n = h.txns.len();
    let mut graph = vec![BTreeSet::new(); n];
    // Each key's installed versions in order, with their (final) writers.
    let mut order: HashMap<Bytes, BTreeMap<Version, usize>> = HashMap::new();
    for ((key, version), &(t, last)) in writer {
        if live[t] && last {
            order.entry(key.clone()).or_default().insert(*version, t);
        }
    }
    let next_writer = |key: &Bytes, v: Version| {
        order.get(key).and_then(|vs| vs.range(v + 1..).next()).map(|(_, &t)| t)
    };
    for vs in order.values() {
        let mut prev: Option<usize> = None;
        for &t in vs.values() {
            if let Some(p) = prev.filter(|&p| p != t) {
                graph[p].insert((t, Edge::Ww));
            }
            prev = Some(t);
        }
    }
    for (t, txn) in h.txns.iter().enumerate().filter(|&(t, _)| live[t]) {
        for op in &txn.ops {
            let TxnOp::Read { key, version } = op else { continue };
            if let Some(&(w, true)) = writer.get(&(key.clone(), *version)) {
                if w != t && live[w] {
                    graph[w].insert((t, Edge::Wr));
                }
            }
            if let Some(u) = next_writer(key, *version).filter(|&u| u != t) {
                graph[t].insert((u, Edge::Rw));
            }
        }
    }
    // Real time: O(n²), fine for the histories a simulator run produces.
    for (a, ta) in h.txns.iter().enumerate().filter(|&(a, _)| live[a]) {
        for (b, tb) in h.txns.iter().enumerate().filter(|&(b, _)| live[b] && b != a) {
            if ta.completed < tb.invoked {
                graph[a].insert((b, Edge::Rt));
            }
        }
    }
    graph
}

/// One cycle per strongly connected component with more than one transaction (Tarjan's
/// algorithm, iterative: a history's size must not deepen the stack), as `(from, to, edge)`
/// steps, preferring edges other than `rt` so that a cycle is named by its data dependencies
/// when it has any.
fn cycles(n: usize, graph: &[BTreeSet<(usize, Edge)>]) -> Vec<Vec<(usize, usize, Edge)>> {
    let sccs = tarjan(n, graph);
    let mut out = Vec::new();
    for scc in sccs.into_iter().filter(|c| c.len() > 1) {
        let members: BTreeSet<usize> = scc.iter().copied().collect();
        let data_only = find_cycle(&members, graph, false);
        if let Some(c) = data_only.or_else(|| find_cycle(&members, graph, true)) {
            out.push(c);
        }
    }
    out
}

/// A cycle through the component's first member, within the component (breadth-first, so it
/// is a shortest one); `with_rt`: whether real-time edges may be used.
fn find_cycle(
    members: &BTreeSet<usize>,
    graph: &[BTreeSet<(usize, Edge)>],
    with_rt: bool,
) -> Option<Vec<(usize, usize, Edge)>> {
    for &start in members {
        let mut parent: HashMap<usize, (usize, Edge)> = HashMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        while let Some(a) = queue.pop_front() {
            for &(b, e) in &graph[a] {
                if !members.contains(&b) || (!with_rt && e == Edge::Rt) {
                    continue;
                }
                if b == start {
                    let mut path = vec![(a, b, e)];
                    let mut at = a;
                    while at != start {
                        let (p, pe) = parent[&at];
                        path.push((p, at, pe));
                        at = p;
                    }
                    path.reverse();
                    return Some(path);
                }
                if let std::collections::hash_map::Entry::Vacant(v) = parent.entry(b) {
                    v.insert((a, e));
                    queue.push_back(b);
                }
            }
        }
    }
    None
}

fn tarjan(n: usize, graph: &[BTreeSet<(usize, Edge)>]) -> Vec<Vec<usize>> {
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut next = 0;
    let mut out = Vec::new();
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        // (node, its successors, the position reached among them)
        let mut work: Vec<(usize, Vec<usize>, usize)> = Vec::new();
        let succ = |v: usize| graph[v].iter().map(|&(b, _)| b).collect::<Vec<_>>();
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        work.push((root, succ(root), 0));
        while let Some((v, succs, i)) = work.last_mut() {
            let v = *v;
            if *i < succs.len() {
                let w = succs[*i];
                *i += 1;
                if index[w] == usize::MAX {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    work.push((w, succ(w), 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some((parent, _, _)) = work.last() {
                low[*parent] = low[*parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut component = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                out.push(component);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }
    fn r(key: &str, version: Version) -> TxnOp {
        TxnOp::Read { key: k(key), version }
    }
    fn w(key: &str, version: Version) -> TxnOp {
        TxnOp::Write { key: k(key), version }
    }
    fn txn(invoked: u64, completed: u64, ops: Vec<TxnOp>) -> Txn {
        Txn {
            invoked: Instant(invoked),
            completed: Instant(completed),
            outcome: TxnOutcome::Committed,
            ops,
        }
    }
    fn names(h: &TxnHistory) -> Vec<String> {
        check(h).into_iter().map(|v| v.detail.split(':').next().unwrap().to_string()).collect()
    }

    #[test]
    fn a_serial_history_passes() {
        let h = TxnHistory {
            txns: vec![
                txn(0, 10, vec![r("x", 0), w("x", 1)]),
                txn(20, 30, vec![r("x", 1), w("x", 2), w("y", 1)]),
                txn(40, 50, vec![r("x", 2), r("y", 1)]),
            ],
        };
        assert_eq!(check(&h), vec![]);
    }

    /// Write skew: both read x and y at their initial versions, each writes the other key.
    #[test]
    fn write_skew_is_a_g2_cycle() {
        let h = TxnHistory {
            txns: vec![
                txn(0, 10, vec![r("x", 0), r("y", 0), w("x", 1)]),
                txn(0, 10, vec![r("x", 0), r("y", 0), w("y", 1)]),
            ],
        };
        assert_eq!(names(&h), ["G2 cycle"]);
    }

    /// G1c: each reads what the other wrote (circular information flow).
    #[test]
    fn circular_information_flow_is_g1c() {
        let h = TxnHistory {
            txns: vec![
                txn(0, 10, vec![w("x", 1), r("y", 1)]),
                txn(0, 10, vec![w("y", 1), r("x", 1)]),
            ],
        };
        assert_eq!(names(&h), ["G1c cycle"]);
    }

    /// G0: their writes of x and y are ordered one way on x and the other way on y.
    #[test]
    fn interleaved_writes_are_g0() {
        let h = TxnHistory {
            txns: vec![
                txn(0, 10, vec![w("x", 1), w("y", 2)]),
                txn(0, 10, vec![w("x", 2), w("y", 1)]),
            ],
        };
        assert_eq!(names(&h), ["G0 cycle"]);
    }

    /// Serializable but not strictly: T2 starts after T1 ended and still reads the old x.
    #[test]
    fn a_stale_read_after_a_completed_commit_breaks_real_time_order() {
        let h =
            TxnHistory { txns: vec![txn(0, 10, vec![w("x", 1)]), txn(20, 30, vec![r("x", 0)])] };
        assert_eq!(names(&h), ["strict-serializability cycle"]);
    }

    #[test]
    fn aborted_and_intermediate_reads_are_flagged() {
        let mut aborted = txn(0, 10, vec![w("x", 1)]);
        aborted.outcome = TxnOutcome::Aborted;
        let h = TxnHistory {
            txns: vec![
                aborted,
                txn(20, 30, vec![r("x", 1)]),
                txn(40, 50, vec![w("y", 1), w("y", 2)]),
                txn(60, 70, vec![r("y", 1)]),
            ],
        };
        let found = names(&h);
        assert!(found.contains(&"G1a".to_string()), "{found:?}");
        assert!(found.contains(&"G1b".to_string()), "{found:?}");
    }

    /// An unknown outcome counts once someone read its write, and then joins cycles.
    #[test]
    fn an_unknown_outcome_whose_write_was_read_took_effect() {
        let mut unknown = txn(0, 10, vec![r("x", 0), w("y", 1)]);
        unknown.outcome = TxnOutcome::Unknown;
        let skew = txn(0, 10, vec![r("y", 0), w("x", 1)]);
        let h =
            TxnHistory { txns: vec![unknown.clone(), skew.clone(), txn(0, 5, vec![r("y", 1)])] };
        // T0 -rw-> T1 on x, T1 -rw-> T0 on y: write skew through the unknown one.
        assert_eq!(names(&h), ["G2 cycle"]);
        // Nobody saw its write: it is left out, and nothing is wrong.
        let h = TxnHistory { txns: vec![unknown, skew] };
        assert_eq!(check(&h), vec![]);
    }
}
