//! Every knob of a swarm run, drawn from one `u64` seed (`DESIGN.md`, testing layer 3).
//!
//! The seed feeds a root [`Prng`]; knobs, network and workload each draw from their own fork
//! ([`Streams`]), so adding a draw in one place does not reshuffle the others.

use std::fmt;
use std::str::FromStr;

use strata_core::Prng;
use strata_rc::PlantedBug;
use strata_wire::NodeId;

use crate::clock::{NodeClock, MAX_DRIFT_PPM};
use crate::history::fmt_ms;
use crate::net::NetKnobs;

/// The independent generators one seed feeds.
pub struct Streams {
    pub knobs: Prng,
    pub net: Prng,
    pub workload: Prng,
}

impl Streams {
    pub fn new(seed: u64) -> Streams {
        let mut root = Prng::new(seed);
        Streams { knobs: root.fork(), net: root.fork(), workload: root.fork() }
    }
}

/// A planted bug in the cores, to prove the checkers can fail (`DESIGN.md`: every checker has a
/// canary).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Canary {
    /// `strata_rc::PlantedBug::ApplyOlderWrites`: a replica applies any received write, even
    /// an older one (breaks G1, G2 and convergence).
    ApplyOlderWrites,
}

impl Canary {
    pub const ALL: [Canary; 1] = [Canary::ApplyOlderWrites];

    pub fn name(self) -> &'static str {
        match self {
            Canary::ApplyOlderWrites => "apply-older-writes",
        }
    }

    pub fn planted_bug(self) -> PlantedBug {
        match self {
            Canary::ApplyOlderWrites => PlantedBug::ApplyOlderWrites,
        }
    }
}

impl FromStr for Canary {
    type Err = String;
    fn from_str(s: &str) -> Result<Canary, String> {
        Canary::ALL.into_iter().find(|c| c.name() == s).ok_or_else(|| {
            let names: Vec<_> = Canary::ALL.iter().map(|c| c.name()).collect();
            format!("unknown canary {s:?} (known: {})", names.join(", "))
        })
    }
}

/// The simulated clients (Kite §2: sessions bound to one node, relaxed ops on a small key set
/// so that sessions conflict).
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadKnobs {
    pub sessions_per_node: u32,
    /// Operations a session keeps in flight (Kite §5.1.8: relaxed ops may be pipelined).
    pub depth: u32,
    pub keys: u32,
    /// Percent of operations that read; the rest write.
    pub read_pct: u32,
    /// Percent of writes that are deletes.
    pub delete_pct: u32,
    /// Think time between a session's operations, uniform in `[think_min_us, think_max_us]`.
    pub think_min_us: u64,
    pub think_max_us: u64,
    /// Sessions only read once healed, so the final state is made of the versions written
    /// under faults and the convergence checker judges how those spread.
    pub read_only_after_heal: bool,
}

/// A fault and when it strikes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduledFault {
    pub at_ns: u64,
    pub fault: Fault,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Cut directed links until `heal_ns` (or the liveness phase, whichever comes first).
    Partition { links: Vec<(NodeId, NodeId)>, heal_ns: u64, label: String },
    /// SIGSTOP-like: the node stops processing inputs and ticks, keeps its state, and its
    /// inputs queue up until it resumes (Kite §6, "a replica paused").
    Pause { node: NodeId, resume_ns: u64 },
    /// Crash-stop: the node and its state are gone for good (Kite §6).
    Crash { node: NodeId },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Knobs {
    pub seed: u64,
    pub nodes: u32,
    pub clocks: Vec<NodeClock>,
    pub net: NetKnobs,
    /// The rc core's `T_RETX` and its back-off cap (Kite §3.4; `docs/design.md`).
    pub retransmit_after_us: u64,
    pub retransmit_max_us: u64,
    pub workload: WorkloadKnobs,
    /// The safety phase ends at this time or after this many operations, whichever is first.
    pub safety_ns: u64,
    pub safety_max_ops: u64,
    /// After healing, clients keep issuing for this long (liveness: they must progress)...
    pub liveness_ns: u64,
    /// ...then stop, and the network gets this long to quiesce before the final checks.
    pub drain_ns: u64,
    pub faults: Vec<ScheduledFault>,
    pub canary: Option<Canary>,
}

const MS: u64 = 1_000_000;

impl Knobs {
    /// Draws every knob from `seed`.
    pub fn draw(seed: u64, canary: Option<Canary>) -> Knobs {
        let mut p = Streams::new(seed).knobs;
        let nodes = p.range(3, 8) as u32;
        let clocks = (0..nodes)
            .map(|_| NodeClock {
                offset_ns: p.range(0, 2_000 * MS),
                drift_ppm: p.range(0, 2 * MAX_DRIFT_PPM as u64 + 1) as i64 - MAX_DRIFT_PPM,
            })
            .collect();
        let delay_min_us = p.range(20, 501);
        let net = NetKnobs {
            delay_min_us,
            delay_max_us: delay_min_us + p.range(0, 5_001),
            loss: rate_or_zero(&mut p, 0.25, 0.25),
            dup: rate_or_zero(&mut p, 0.4, 0.15),
            reorder: rate_or_zero(&mut p, 0.4, 0.2),
            reorder_extra_max_us: p.range(1_000, 20_001),
        };
        let retransmit_after_us = p.range(500, 5_001);
        let retransmit_max_us = retransmit_after_us * p.range(4, 41);
        let think_min_us = p.range(50, 1_001);
        let workload = WorkloadKnobs {
            sessions_per_node: p.range(1, 5) as u32,
            depth: p.range(1, 4) as u32,
            keys: p.range(1, 9) as u32,
            read_pct: p.range(10, 81) as u32,
            delete_pct: p.range(0, 31) as u32,
            think_min_us,
            think_max_us: think_min_us + p.range(0, 3_001),
            read_only_after_heal: p.chance(0.5),
        };
        let safety_ns = p.range(100, 501) * MS;
        let liveness_ns = p.range(50, 151) * MS;
        // Long enough for every pending write to be re-sent at the back-off cap a few times
        // and every copy to land (Kite §5.1.7: re-sent until acked).
        let drain_ns = 4 * retransmit_max_us * 1_000 + 4 * net.max_flight().as_nanos() as u64 + 50 * MS;
        let faults = draw_faults(&mut p, nodes, safety_ns);
        Knobs {
            seed,
            nodes,
            clocks,
            net,
            retransmit_after_us,
            retransmit_max_us,
            workload,
            safety_ns,
            safety_max_ops: 4_000,
            liveness_ns,
            drain_ns,
            faults,
            canary,
        }
    }

    /// The most nodes that may crash: a minority (Kite §6, G6 needs a live majority).
    pub fn max_crashes(&self) -> u32 {
        (self.nodes - 1) / 2
    }

}

/// Zero with probability `p_zero`, else uniform in `[0, max)`: some seeds get a clean network.
fn rate_or_zero(p: &mut Prng, p_zero: f64, max: f64) -> f64 {
    if p.chance(p_zero) {
        0.0
    } else {
        p.unit() * max
    }
}

fn draw_faults(p: &mut Prng, nodes: u32, safety_ns: u64) -> Vec<ScheduledFault> {
    let ids: Vec<NodeId> = (0..nodes).map(NodeId).collect();
    let mut faults = Vec::new();
    for _ in 0..p.range(0, 4) {
        let at_ns = p.range(0, safety_ns);
        let heal_ns = at_ns + p.range(5 * MS, safety_ns / 2 + 5 * MS + 1);
        let (links, label) = draw_partition(p, &ids);
        faults.push(ScheduledFault { at_ns, fault: Fault::Partition { links, heal_ns, label } });
    }
    for _ in 0..p.range(0, 3) {
        let at_ns = p.range(0, safety_ns);
        let node = ids[p.range(0, nodes as u64) as usize];
        let resume_ns = at_ns + p.range(5 * MS, 300 * MS + 1);
        faults.push(ScheduledFault { at_ns, fault: Fault::Pause { node, resume_ns } });
    }
    // Crash at most a minority, and none in half of the runs.
    let crashes = if p.chance(0.5) { 0 } else { p.range(1, u64::from((nodes - 1) / 2) + 1) };
    let mut candidates = ids.clone();
    for _ in 0..crashes {
        let node = candidates.swap_remove(p.range(0, candidates.len() as u64) as usize);
        faults.push(ScheduledFault { at_ns: p.range(0, safety_ns), fault: Fault::Crash { node } });
    }
    faults.sort_by_key(|f| f.at_ns);
    faults
}

/// One partition: one node isolated, a split into two sides, or a random set of one-way cuts.
fn draw_partition(p: &mut Prng, ids: &[NodeId]) -> (Vec<(NodeId, NodeId)>, String) {
    let n = ids.len() as u64;
    match p.range(0, 3) {
        0 | 1 => {
            let mut side: Vec<NodeId> = ids.to_vec();
            // Fisher-Yates with the seeded generator, then the first `k` form one side.
            for i in (1..side.len()).rev() {
                side.swap(i, p.range(0, i as u64 + 1) as usize);
            }
            let k = if p.chance(0.5) { 1 } else { p.range(1, n / 2 + 1) as usize };
            let (a, b) = side.split_at(k);
            let (mut a, mut b) = (a.to_vec(), b.to_vec());
            a.sort();
            b.sort();
            let links = a.iter().flat_map(|&x| b.iter().flat_map(move |&y| [(x, y), (y, x)])).collect();
            (links, format!("{} | {}", fmt_nodes(&a), fmt_nodes(&b)))
        }
        _ => {
            let mut links = Vec::new();
            for &x in ids {
                for &y in ids {
                    if x != y && p.chance(0.3) {
                        links.push((x, y));
                    }
                }
            }
            let label = links.iter().map(|(x, y)| format!("{x}->{y}")).collect::<Vec<_>>().join(" ");
            (links, format!("one-way cuts [{label}]"))
        }
    }
}

fn fmt_nodes(ns: &[NodeId]) -> String {
    format!("{{{}}}", ns.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(","))
}

impl fmt::Display for Knobs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = &self.workload;
        let net = &self.net;
        writeln!(f, "seed {}", self.seed)?;
        writeln!(f, "  nodes       {} (at most {} may crash)", self.nodes, self.max_crashes())?;
        let clocks: Vec<String> = self
            .clocks
            .iter()
            .enumerate()
            .map(|(i, c)| format!("n{i} +{} {:+}ppm", fmt_ms(c.offset_ns), c.drift_ppm))
            .collect();
        writeln!(f, "  clocks      {}", clocks.join(", "))?;
        writeln!(
            f,
            "  network     delay {}..{}us, loss {:.1}%, dup {:.1}%, reorder {:.1}% (+0..{}us)",
            net.delay_min_us,
            net.delay_max_us,
            net.loss * 100.0,
            net.dup * 100.0,
            net.reorder * 100.0,
            net.reorder_extra_max_us
        )?;
        writeln!(f, "  rc core     retransmit after {}us, backing off to {}us", self.retransmit_after_us, self.retransmit_max_us)?;
        writeln!(
            f,
            "  workload    {} sessions/node, depth {}, {} keys, {}% reads, {}% of writes are deletes, think {}..{}us{}",
            w.sessions_per_node,
            w.depth,
            w.keys,
            w.read_pct,
            w.delete_pct,
            w.think_min_us,
            w.think_max_us,
            if w.read_only_after_heal { ", only reads once healed" } else { "" }
        )?;
        writeln!(
            f,
            "  phases      safety {} (or {} ops), liveness {}, drain {}",
            fmt_ms(self.safety_ns),
            self.safety_max_ops,
            fmt_ms(self.liveness_ns),
            fmt_ms(self.drain_ns)
        )?;
        if self.faults.is_empty() {
            writeln!(f, "  faults      none")?;
        } else {
            writeln!(f, "  faults")?;
        }
        for sf in &self.faults {
            let what = match &sf.fault {
                Fault::Partition { heal_ns, label, .. } => format!("partition {label} until {}", fmt_ms(*heal_ns)),
                Fault::Pause { node, resume_ns } => format!("pause {node} until {}", fmt_ms(*resume_ns)),
                Fault::Crash { node } => format!("crash {node}"),
            };
            writeln!(f, "    at {:>11}  {what}", fmt_ms(sf.at_ns))?;
        }
        write!(f, "  canary      {}", self.canary.map_or("none", Canary::name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_deterministic_and_within_bounds() {
        for seed in 0..200 {
            let k = Knobs::draw(seed, None);
            assert_eq!(k, Knobs::draw(seed, None));
            assert!((3..=7).contains(&k.nodes));
            assert_eq!(k.clocks.len(), k.nodes as usize);
            assert!(k.net.delay_min_us <= k.net.delay_max_us);
            let crashes = k.faults.iter().filter(|f| matches!(f.fault, Fault::Crash { .. })).count();
            assert!(crashes as u32 <= k.max_crashes(), "seed {seed}: crashes a majority");
            assert!(k.faults.iter().all(|f| f.at_ns < k.safety_ns));
            assert!(k.faults.windows(2).all(|w| w[0].at_ns <= w[1].at_ns));
        }
    }

    #[test]
    fn canary_names_parse() {
        assert_eq!("apply-older-writes".parse::<Canary>(), Ok(Canary::ApplyOlderWrites));
        assert!("nope".parse::<Canary>().is_err());
        let shown = Knobs::draw(7, Some(Canary::ApplyOlderWrites)).to_string();
        assert!(shown.starts_with("seed 7\n") && shown.contains("canary      apply-older-writes"));
    }
}
