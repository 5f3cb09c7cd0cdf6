//! The paper's data-structure workload (Kite §8.3, spec §8.2/§8.3 B5), for `strata bench`:
//! many structures of one kind; each session repeatedly picks one at random and does a
//! push-then-pop pair on it (enqueue-then-dequeue; insert-then-remove of a fresh key).
//!
//! ```no_run
//! # async fn demo(s: &mut strata_client::Session) -> Result<(), strata_ds::DsError> {
//! use strata_ds::{run_workload, Budget, Ctx, DsKind, Layout, Workload};
//! let w = Workload::new(DsKind::Stack, "ds", 5000, Layout::FOUR)?;   // share one per run
//! let mut cx = Ctx::new(s, "ds").await?;                             // one per session
//! let report = run_workload(&w, s, &mut cx, 42, &Budget::pairs(1000)).await?;
//! println!("{} ops, {} CAS failures", report.ops, report.stats.cas_quorum_fail);
//! # Ok(()) }
//! ```
//!
//! Requests per uncontended pair with N fields, from [`Stats`] (pinned by a test; conflicts add
//! retries). "sync" = acquires + CAS; the paper's gain over an all-synchronizing baseline grows
//! as the sync share falls:
//!
//! | kind | relaxed writes | relaxed reads | acquires | CAS | sync share, N = 4 / 32 |
//! |---|---|---|---|---|---|
//! | ts  | N + 1 | N + 2 | 1 | 2 | 3/14 = 0.21 / 3/70 = 0.04 |
//! | msq | N + 1 | N + 3 | 2 | 3 | 5/17 = 0.29 / 5/73 = 0.07 |
//! | hml (empty list) | N + 1 | N + 1 | 3 | 3 | 6/16 = 0.38 / 6/72 = 0.08 |
//!
//! Each pair also checks the paper's invariant: a pop right after one's own push never finds
//! the structure empty (for the list: the fresh key's insert and remove both succeed); a
//! violation ends the run with [`DsError::Invariant`].

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use strata_client::Session;

use crate::error::DsError;
use crate::heap::{Ctx, Layout, Stats};
use crate::list::List;
use crate::queue::Queue;
use crate::stack::Stack;

/// Which structure a workload exercises.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DsKind {
    /// Treiber stack ("ts"): push then pop.
    Stack,
    /// Michael-Scott queue ("msq"): enqueue then dequeue.
    Queue,
    /// Harris-Michael list ("hml"): insert then remove of a fresh key.
    List,
}

impl DsKind {
    pub const ALL: [DsKind; 3] = [DsKind::Stack, DsKind::Queue, DsKind::List];

    /// The paper's abbreviation: `ts`, `msq`, `hml`.
    pub fn short(&self) -> &'static str {
        match self {
            DsKind::Stack => "ts",
            DsKind::Queue => "msq",
            DsKind::List => "hml",
        }
    }
}

impl std::fmt::Display for DsKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.short())
    }
}

impl FromStr for DsKind {
    type Err = String;
    /// `ts`/`stack`, `msq`/`queue`, `hml`/`list`.
    fn from_str(s: &str) -> Result<DsKind, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "ts" | "stack" | "treiber" => Ok(DsKind::Stack),
            "msq" | "queue" | "ms" => Ok(DsKind::Queue),
            "hml" | "list" | "hm" => Ok(DsKind::List),
            other => Err(format!("unknown structure {other:?}: expected ts, msq or hml")),
        }
    }
}

/// A set of structures of one kind, named `0 .. structures-1` under `root`. Build it once and
/// share it (by reference or `Arc`) between the sessions of a run.
#[derive(Clone, Debug)]
pub struct Workload {
    pub kind: DsKind,
    pub root: String,
    pub layout: Layout,
    targets: Targets,
}

#[derive(Clone, Debug)]
enum Targets {
    Stacks(Vec<Stack>),
    Queues(Vec<Queue>),
    Lists(Vec<List>),
}

impl Workload {
    pub fn new(
        kind: DsKind,
        root: &str,
        structures: usize,
        layout: Layout,
    ) -> Result<Workload, DsError> {
        if structures == 0 {
            return Err(DsError::Usage("a workload needs at least one structure".into()));
        }
        let names = (0..structures).map(|i| i.to_string());
        let targets = match kind {
            DsKind::Stack => Targets::Stacks(
                names.map(|n| Stack::new(root, &n, layout)).collect::<Result<_, _>>()?,
            ),
            DsKind::Queue => Targets::Queues(
                names.map(|n| Queue::new(root, &n, layout)).collect::<Result<_, _>>()?,
            ),
            DsKind::List => Targets::Lists(
                names.map(|n| List::new(root, &n, layout)).collect::<Result<_, _>>()?,
            ),
        };
        Ok(Workload { kind, root: root.to_string(), layout, targets })
    }

    pub fn structures(&self) -> usize {
        match &self.targets {
            Targets::Stacks(v) => v.len(),
            Targets::Queues(v) => v.len(),
            Targets::Lists(v) => v.len(),
        }
    }

    /// One push-then-pop pair on structure `i` (2 operations). Errors with
    /// [`DsError::Invariant`] if the second half finds nothing.
    pub async fn pair(&self, i: usize, s: &mut Session, cx: &mut Ctx) -> Result<(), DsError> {
        let unique = cx.unique();
        match &self.targets {
            Targets::Stacks(v) => {
                v[i].push(s, cx, &unique.to_le_bytes()).await?;
                if v[i].pop(s, cx).await?.is_none() {
                    return Err(DsError::Invariant(format!(
                        "stack {i}: a pop right after a push found it empty"
                    )));
                }
            }
            Targets::Queues(v) => {
                v[i].enqueue(s, cx, &unique.to_le_bytes()).await?;
                if v[i].dequeue(s, cx).await?.is_none() {
                    return Err(DsError::Invariant(format!(
                        "queue {i}: a dequeue right after an enqueue found it empty"
                    )));
                }
            }
            Targets::Lists(v) => {
                // A key nobody else uses, spread over the key space so lists stay mixed.
                let k = mix64(unique);
                if !v[i].insert(s, cx, k).await? {
                    return Err(DsError::Invariant(format!(
                        "list {i}: fresh key {k:#x} already present"
                    )));
                }
                if !v[i].remove(s, cx, k).await? {
                    return Err(DsError::Invariant(format!(
                        "list {i}: key {k:#x} vanished before its remove"
                    )));
                }
            }
        }
        Ok(())
    }
}

/// When a run stops: after `max_pairs` pairs, at `deadline`, or when `stop` is set — whichever
/// comes first (checked between pairs).
#[derive(Clone, Debug, Default)]
pub struct Budget {
    pub max_pairs: Option<u64>,
    pub deadline: Option<Instant>,
    pub stop: Option<Arc<AtomicBool>>,
}

impl Budget {
    pub fn pairs(n: u64) -> Budget {
        Budget { max_pairs: Some(n), ..Budget::default() }
    }
    pub fn until(deadline: Instant) -> Budget {
        Budget { deadline: Some(deadline), ..Budget::default() }
    }
    pub fn flag(stop: Arc<AtomicBool>) -> Budget {
        Budget { stop: Some(stop), ..Budget::default() }
    }

    fn done(&self, pairs: u64) -> bool {
        self.max_pairs.is_some_and(|m| pairs >= m)
            || self.deadline.is_some_and(|d| Instant::now() >= d)
            || self.stop.as_ref().is_some_and(|f| f.load(Ordering::Relaxed))
    }
}

/// What one session's run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkloadReport {
    /// Completed pairs.
    pub pairs: u64,
    /// Completed structure operations (`2 * pairs`).
    pub ops: u64,
    pub elapsed: Duration,
    /// What the run's operations did (CAS failures, helps, recycling), as a delta of `cx.stats`.
    pub stats: Stats,
}

/// Runs push-then-pop pairs on structures of `w` picked uniformly at random (seeded by `seed`)
/// on `session`, until `budget` says stop. `cx` must be this session's context under `w.root`.
pub async fn run_workload(
    w: &Workload,
    session: &mut Session,
    cx: &mut Ctx,
    seed: u64,
    budget: &Budget,
) -> Result<WorkloadReport, DsError> {
    if cx.root() != w.root {
        return Err(DsError::Usage(format!(
            "context of root {:?} for a workload under {:?}",
            cx.root(),
            w.root
        )));
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let n = w.structures();
    let start = Instant::now();
    let before = cx.stats;
    let mut pairs = 0;
    while !budget.done(pairs) {
        let i = rng.gen_range(0..n);
        w.pair(i, session, cx).await?;
        pairs += 1;
    }
    Ok(WorkloadReport {
        pairs,
        ops: 2 * pairs,
        elapsed: start.elapsed(),
        stats: cx.stats.since(&before),
    })
}

/// splitmix64's finaliser: a bijection on u64, so distinct inputs give distinct keys.
pub fn mix64(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}
