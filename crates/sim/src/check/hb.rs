//! RC hb-visibility, the load-value axiom of release consistency (Kite G3, §7 props 4 and 5).
//!
//! Kite §1.2: `a ppo b` iff `a ->so b` and `b` is a release or RMW, or `a` an acquire or RMW, or
//! `a` a release and `b` an acquire, or both access the same key (a weak CAS that failed
//! locally is a relaxed read); `w sw a` iff `w` is a release or RMW, `a` an acquire or RMW, and
//! `a` returned exactly `w`'s version; `hb` is the transitive closure of `ppo ∪ sw`. The
//! property: for a write `W` and an operation `o` on the same key with `W hb o`, `obs(o) >=
//! wr(W)` if `o` reads and `wr(o) > wr(W)` if `o` writes. (§7 prop 4's third clause — `R hb W`
//! with `R`'s version written hb-before `R` implies `wr(W) > obs(R)` — follows from these two:
//! the writer `W'` of `obs(R)` has `W' hb W`, so `wr(W) > wr(W') = obs(R)`.) Message passing
//! (prop 5) is the instance with one `sw` edge; its transitive variant, through an
//! acquire -> release chain (the K-F2 counter-example), has two or more; violations say how many
//! release -> acquire hops the offending chain has.
//!
//! The algorithm is the per-session knowledge map of §7 prop 4. For every operation `o`,
//! `H(o)` is, per key, the highest version written by an operation hb-before `o` (and which
//! one). Sessions are processed in session order; each keeps the join of `H(a) ∪ {wr(a)}` over
//! its earlier operations `a` in four accumulators — all of them (what a release or RMW
//! publishes), the acquires and RMWs (ordered before everything later), the releases (ordered
//! before later acquires) and, per key, the operations on that key — so `H(o)` is the join of
//! the accumulators `o`'s class selects, plus, when `o` is an acquire or RMW that returned a
//! release's or RMW's version, the writer's published map. An acquire therefore waits until its
//! writer has been processed; if every session waits, `hb` has a cycle, itself a violation.
//! Operations that never completed but created a version take part as writers (the version was
//! published with everything ppo-before it). Cost: linear in the operations times the keys.

use std::collections::{BTreeMap, HashMap};

use strata_wire::Carstamp;

use super::index::{describe, Index};
use super::Violation;
use crate::history::{History, OpClass};

/// What one key's entry of a knowledge map says: the highest version written hb-before, by
/// which operation, through how many release -> acquire (`sw`) hops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Known {
    cs: Carstamp,
    writer: usize,
    hops: u32,
}

/// A knowledge map: one entry per key of the history (`None`: nothing known).
#[derive(Clone, Debug, Default)]
struct Knowledge(Vec<Option<Known>>);

impl Knowledge {
    fn new(keys: usize) -> Knowledge {
        Knowledge(vec![None; keys])
    }

    fn learn(&mut self, key: usize, k: Known) {
        let e = &mut self.0[key];
        match e {
            Some(old) if old.cs > k.cs || (old.cs == k.cs && old.hops <= k.hops) => {}
            _ => *e = Some(k),
        }
    }

    fn join(&mut self, other: &Knowledge, extra_hops: u32) {
        for (key, k) in other.0.iter().enumerate() {
            if let Some(k) = k {
                self.learn(key, Known { hops: k.hops + extra_hops, ..*k });
            }
        }
    }
}

/// One session's accumulators.
struct SessionKnowledge {
    /// Every earlier operation: what a release or RMW publishes.
    all: Knowledge,
    /// Earlier acquires and RMWs: ordered before every later operation.
    acquires: Knowledge,
    /// Earlier releases: ordered before later acquires (and RMWs).
    releases: Knowledge,
    /// Per key, earlier operations on that key.
    per_key: Vec<Knowledge>,
    /// Next position in the session's operation list.
    next: usize,
}

/// Kite §7 props 4 and 5 (see the module documentation).
pub fn hb_visibility(h: &History) -> Vec<Violation> {
    let idx = Index::new(h);
    let mut key_ids: BTreeMap<&[u8], usize> = BTreeMap::new();
    for op in &h.ops {
        let n = key_ids.len();
        key_ids.entry(&op.key[..]).or_insert(n);
    }
    let nkeys = key_ids.len();
    let sessions: Vec<&Vec<usize>> = idx.sessions.values().collect();
    let mut state: Vec<SessionKnowledge> = sessions
        .iter()
        .map(|_| SessionKnowledge {
            all: Knowledge::new(nkeys),
            acquires: Knowledge::new(nkeys),
            releases: Knowledge::new(nkeys),
            per_key: vec![Knowledge::new(nkeys); nkeys],
            next: 0,
        })
        .collect();
    // What each processed release or RMW published: `H(w) ∪ {wr(w)}`.
    let mut published: HashMap<usize, Knowledge> = HashMap::new();
    let mut out = Vec::new();
    loop {
        let mut progressed = false;
        for (s, ops) in sessions.iter().enumerate() {
            while let Some(&i) = ops.get(state[s].next) {
                let op = &h.ops[i];
                let wr = idx.wr[i];
                let witness = op.witness();
                if witness.is_none() && wr.is_none() {
                    state[s].next += 1; // no effect and no witness: nothing to check or carry
                    continue;
                }
                let class = op.class();
                let obs = witness.and_then(|w| w.observed.as_ref().map(|(_, cs)| *cs));
                // sw: an acquire or RMW that returned a release's or RMW's version.
                let mut source = None;
                if matches!(class, OpClass::Acquire | OpClass::Rmw) {
                    if let Some(w) = obs.and_then(|c| idx.writer_of(&op.key, c)).filter(|&w| w != i)
                    {
                        if matches!(h.ops[w].class(), OpClass::Release | OpClass::Rmw) {
                            match published.get(&w) {
                                Some(p) => source = Some(p),
                                None => break, // wait until the writer has been processed
                            }
                        }
                    }
                }
                let k = key_ids[&op.key[..]];
                let st = &state[s];
                let mut hb = st.acquires.clone();
                hb.join(&st.per_key[k], 0);
                if matches!(class, OpClass::Release | OpClass::Rmw) {
                    hb.join(&st.all, 0);
                }
                if matches!(class, OpClass::Acquire | OpClass::Rmw) {
                    hb.join(&st.releases, 0);
                }
                if let Some(p) = source {
                    hb.join(p, 1);
                }
                if let Some(before) = hb.0[k] {
                    let problem = match (obs, wr) {
                        (Some(o), _) if o < before.cs => Some(format!("observed {o}")),
                        (_, Some(w)) if w <= before.cs => Some(format!("created {w}")),
                        _ => None,
                    };
                    if let Some(problem) = problem {
                        let chain = match before.hops {
                            0 => "in session order".to_string(),
                            1 => "through one release -> acquire (message passing, Kite §7 prop 5)".to_string(),
                            n => format!("through {n} release -> acquire hops (transitive message passing, Kite §7 prop 5, K-F2)"),
                        };
                        out.push(Violation {
                            checker: "hb-visibility",
                            at: op.completed_at().or(Some(op.invoke)),
                            detail: format!(
                                "{} {problem}, older than {} written by {}, which happens-before it {chain}",
                                describe(h, i),
                                before.cs,
                                describe(h, before.writer)
                            ),
                        });
                    }
                }
                if let Some(w) = wr {
                    hb.learn(k, Known { cs: w, writer: i, hops: 0 });
                }
                let st = &mut state[s];
                st.all.join(&hb, 0);
                st.per_key[k].join(&hb, 0);
                match class {
                    OpClass::Acquire | OpClass::Rmw => st.acquires.join(&hb, 0),
                    OpClass::Release => st.releases.join(&hb, 0),
                    OpClass::Relaxed => {}
                }
                if matches!(class, OpClass::Release | OpClass::Rmw) {
                    published.insert(i, hb);
                }
                st.next += 1;
                progressed = true;
            }
        }
        if !progressed {
            break;
        }
    }
    let blocked: Vec<String> = sessions
        .iter()
        .enumerate()
        .filter_map(|(s, ops)| ops.get(state[s].next).map(|&i| describe(h, i)))
        .collect();
    if !blocked.is_empty() {
        out.push(Violation {
            checker: "hb-visibility",
            at: None,
            detail: format!(
                "happens-before has a cycle: every remaining acquire/RMW waits for a release it read from ({})",
                blocked.join("; ")
            ),
        });
    }
    out
}
