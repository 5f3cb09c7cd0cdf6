//! Every knob of a swarm run, drawn from one `u64` seed (`DESIGN.md`, testing layer 3).
//!
//! The seed feeds a root [`Prng`]; knobs, network and workload each draw from their own fork
//! ([`Streams`]), so adding a draw in one place does not reshuffle the others.

use std::fmt;

use strata_core::Prng;
use strata_wire::peer::PeerMessage;
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

/// A planted bug in the rc core, to prove the checkers can fail (`DESIGN.md`: every checker has
/// a canary): the core's own list (`strata_rc::PlantedBug`, with its names for `--canary`). A
/// canary may also bias the knobs of a seed towards the conditions its bug needs
/// ([`Knobs::draw`]; the report shows the result).
pub use strata_rc::PlantedBug as Canary;

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
    /// Sessions only read (relaxed reads and acquires) once healed, so the final state is made
    /// of the versions written under faults and the convergence checker judges how those spread.
    pub read_only_after_heal: bool,
    /// The synchronisation mix (Kite §8.2 "5% sync" and heavier), named for the report.
    pub mix: &'static str,
    /// Percent of reads that are acquires.
    pub acquire_pct: u32,
    /// Percent of writes (deletes excepted) that are releases.
    pub release_pct: u32,
    /// Percent of all operations that are RMWs.
    pub rmw_pct: u32,
    /// Percent of RMWs that are FAAs (on the counter keys); the rest are CASes on data keys.
    pub faa_pct: u32,
    /// Percent of CASes that are weak.
    pub weak_cas_pct: u32,
    /// Percent of a session's issues that start a message-passing pattern (producer
    /// `W..; release`, consumer `acquire; R..`, relay `acquire; release`) instead of one op.
    pub pattern_pct: u32,
    /// How many of the data keys patterns use as flags (the first ones).
    pub flags: u32,
    /// Counter keys `c0..`: only FAAs write them (Kite §7 prop 7 corollary); reads and
    /// acquires may read them.
    pub counters: u32,
    /// Per mille of the replies to mutating requests lost during the safety phase: the client
    /// takes its connection for broken, opens a session at another node and re-sends its
    /// unanswered requests with the same RIFL ids (rifl.md §5.1).
    pub lost_reply_permille: u32,
}

impl WorkloadKnobs {
    /// A relaxed-only workload (no synchronisation), as before Kite's sync operations.
    pub fn relaxed_only(mut self) -> WorkloadKnobs {
        self.mix = "relaxed";
        self.pattern_pct = 0;
        self.acquire_pct = 0;
        self.release_pct = 0;
        self.rmw_pct = 0;
        self
    }
}

/// A synchronisation mix: `(name, weight, acquire %, release %, rmw %)`.
const MIXES: [(&str, u64, u32, u32, u32); 5] = [
    ("relaxed", 10, 0, 0, 0),
    ("kite-5%", 35, 5, 5, 1),
    ("mixed", 25, 20, 20, 5),
    ("sync-heavy", 20, 50, 50, 20),
    ("all-sync", 10, 100, 100, 40),
];

/// A scripted scenario instead of random sessions: named operations at given instants, and
/// an optional rule that loses chosen messages (e.g. Kite §9 K-F2's "J's copy is delayed").
#[derive(Clone, Debug, PartialEq)]
pub struct Script {
    pub name: &'static str,
    pub ops: Vec<ScriptedOp>,
    pub drop: Option<DropRule>,
}

/// Client `client` (clients are numbered node by node, `sessions_per_node` each) invokes
/// `kind` on `key` at `at_ns`.
#[derive(Clone, Debug, PartialEq)]
pub struct ScriptedOp {
    pub at_ns: u64,
    pub client: usize,
    pub key: &'static str,
    pub kind: crate::history::OpKind,
}

/// Loses every message `drops(from, to, msg)` selects until `until_ns`.
#[derive(Clone, Copy)]
pub struct DropRule {
    pub name: &'static str,
    pub until_ns: u64,
    pub drops: fn(NodeId, NodeId, &PeerMessage) -> bool,
}

impl PartialEq for DropRule {
    fn eq(&self, other: &DropRule) -> bool {
        self.name == other.name && self.until_ns == other.until_ns
    }
}

impl fmt::Debug for DropRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DropRule({} until {})", self.name, fmt_ms(self.until_ns))
    }
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
    /// The rc core's `T_RETX` for pending writes and its back-off cap (Kite §3.4;
    /// `docs/design.md`).
    pub retransmit_after_us: u64,
    pub retransmit_max_us: u64,
    /// `T_RETX` of protocol rounds (Kite §5.1.3).
    pub round_retransmit_us: u64,
    /// `T_REL` (Kite §3.4, K-D1): at least 10 x the round trip, or tiny to force slow paths.
    /// The core's floor: it waits 10 smoothed ack round trips when that is longer...
    pub release_timeout_us: u64,
    /// ...up to this cap (`RcConfig::release_timeout_max`); equal to `release_timeout_us` where
    /// a seed or canary needs `T_REL` exactly as drawn (tiny ones, to force slow paths).
    pub release_timeout_max_us: u64,
    /// `B_MIN`, `B_MAX` of the Paxos back-off (Kite §3.4).
    pub backoff_min_us: u64,
    pub backoff_max_us: u64,
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
    /// What the canary changed in the drawn knobs, for the report.
    pub canary_profile: Option<&'static str>,
    /// Scripted sessions instead of random ones (scenario tests).
    pub script: Option<Script>,
}

const MS: u64 = 1_000_000;

impl Knobs {
    /// Draws every knob from `seed`; a canary then biases some of them (from its own stream,
    /// so the other knobs stay those of the seed).
    pub fn draw(seed: u64, canary: Option<Canary>) -> Knobs {
        let mut streams = Streams::new(seed);
        let p = &mut streams.knobs;
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
            loss: rate_or_zero(p, 0.25, 0.25),
            dup: rate_or_zero(p, 0.4, 0.15),
            reorder: rate_or_zero(p, 0.4, 0.2),
            reorder_extra_max_us: p.range(1_000, 20_001),
        };
        let retransmit_after_us = p.range(500, 5_001);
        let retransmit_max_us = retransmit_after_us * p.range(4, 41);
        let think_min_us = p.range(50, 1_001);
        let mut workload = WorkloadKnobs {
            sessions_per_node: p.range(1, 5) as u32,
            depth: p.range(1, 4) as u32,
            keys: p.range(1, 9) as u32,
            read_pct: p.range(10, 81) as u32,
            delete_pct: p.range(0, 31) as u32,
            think_min_us,
            think_max_us: think_min_us + p.range(0, 3_001),
            read_only_after_heal: p.chance(0.5),
            mix: "relaxed",
            acquire_pct: 0,
            release_pct: 0,
            rmw_pct: 0,
            faa_pct: 0,
            weak_cas_pct: 0,
            pattern_pct: 0,
            flags: 1,
            counters: 0,
            lost_reply_permille: 0,
        };
        let safety_ns = p.range(100, 501) * MS;
        let liveness_ns = p.range(50, 151) * MS;
        let faults = draw_faults(p, nodes, safety_ns);
        // Knobs added with Kite's synchronisation come from their own stream, so the knobs
        // above stay what they were for every seed.
        let mut q = streams.knobs.fork();
        let total: u64 = MIXES.iter().map(|m| m.1).sum();
        let mut pick = q.range(0, total);
        let mut mix = MIXES[0];
        for m in MIXES {
            if pick < m.1 {
                mix = m;
                break;
            }
            pick -= m.1;
        }
        workload.mix = mix.0;
        workload.acquire_pct = mix.2;
        workload.release_pct = mix.3;
        workload.rmw_pct = mix.4;
        workload.faa_pct = q.range(20, 81) as u32;
        workload.weak_cas_pct = q.range(0, 61) as u32;
        workload.counters = q.range(1, 3) as u32;
        let rtt_us = 2 * net.delay_max_us;
        // Kite §3.4 / K-D1: T_REL >= 10 x RTT; a quarter of the seeds get a tiny one, which
        // sends most barriers down the slow path (safety must not depend on it). The tiny ones
        // stay fixed (the adaptive T_REL, 10 ack round trips, would lift them out of the slow
        // path); the others may grow to 4 x the drawn value with the ack round trip. No draw:
        // the knobs after this one stay those of the seed.
        let tiny = q.chance(0.25);
        let release_timeout_us =
            if tiny { q.range(20, rtt_us.max(21)) } else { rtt_us * q.range(10, 21) };
        let release_timeout_max_us = if tiny { release_timeout_us } else { 4 * release_timeout_us };
        let round_retransmit_us = q.range(rtt_us.max(200), 4 * rtt_us.max(200) + 1);
        let backoff_min_us = (2 * rtt_us * q.range(50, 201) / 100).max(50);
        let backoff_max_us = backoff_min_us * q.range(8, 33);
        if workload.acquire_pct > 0 {
            workload.pattern_pct = q.range(0, 41) as u32;
        }
        workload.flags = (workload.keys / 3).max(1);
        let mut knobs = Knobs {
            seed,
            nodes,
            clocks,
            net,
            retransmit_after_us,
            retransmit_max_us,
            round_retransmit_us,
            release_timeout_us,
            release_timeout_max_us,
            backoff_min_us,
            backoff_max_us,
            workload,
            safety_ns,
            safety_max_ops: 4_000,
            liveness_ns,
            drain_ns: 0,
            faults,
            canary,
            canary_profile: None,
            script: None,
        };
        // Lost replies (RIFL retries) from a stream of their own: the knobs above stay those of
        // the seed. Two thirds of the seeds lose 0.2% - 3% of the replies to mutating requests;
        // node crashes make the others retry too.
        let mut r = Prng::new(seed.rotate_left(41) ^ 0x7269_666c);
        if r.chance(2.0 / 3.0) {
            knobs.workload.lost_reply_permille = r.range(2, 31) as u32;
        }
        if let Some(c) = canary {
            knobs.apply_canary_profile(c, &mut q);
        }
        knobs.drain_ns = knobs.default_drain_ns();
        knobs
    }

    /// A calm cluster for hand-written scenarios: exact clocks, 100-200 µs one-way delays, no
    /// loss, no faults, `T_REL` 3 ms (15 x the worst round trip) adaptive up to the core's
    /// default cap (100 ms), one session per node running a relaxed-only mix with 1 ms think
    /// times. Tests adjust what they need.
    pub fn calm(seed: u64, nodes: u32) -> Knobs {
        let mut k = Knobs {
            seed,
            nodes,
            clocks: vec![NodeClock::EXACT; nodes as usize],
            net: NetKnobs {
                delay_min_us: 100,
                delay_max_us: 200,
                loss: 0.0,
                dup: 0.0,
                reorder: 0.0,
                reorder_extra_max_us: 0,
            },
            retransmit_after_us: 5_000,
            retransmit_max_us: 20_000,
            round_retransmit_us: 1_000,
            release_timeout_us: 3_000,
            release_timeout_max_us: 100_000,
            backoff_min_us: 400,
            backoff_max_us: 12_800,
            workload: WorkloadKnobs {
                sessions_per_node: 1,
                depth: 1,
                keys: 4,
                read_pct: 50,
                delete_pct: 0,
                think_min_us: 1_000,
                think_max_us: 1_000,
                read_only_after_heal: false,
                mix: "relaxed",
                acquire_pct: 0,
                release_pct: 0,
                rmw_pct: 0,
                faa_pct: 0,
                weak_cas_pct: 0,
                pattern_pct: 0,
                flags: 1,
                counters: 0,
                lost_reply_permille: 0,
            },
            safety_ns: 100 * MS,
            safety_max_ops: u64::MAX,
            liveness_ns: 20 * MS,
            drain_ns: 0,
            faults: Vec::new(),
            canary: None,
            canary_profile: None,
            script: None,
        };
        k.drain_ns = k.default_drain_ns();
        k
    }

    /// Long enough for every pending write to be re-sent at the back-off cap a few times and
    /// every copy to land (Kite §5.1.7: re-sent until acked), and for a barrier to time out and
    /// a Paxos attempt to back off a few times. (The driver extends the drain while operations
    /// are still in flight, up to a cap.)
    pub fn default_drain_ns(&self) -> u64 {
        4 * self.retransmit_max_us * 1_000
            + 4 * self.net.max_flight().as_nanos() as u64
            + 2 * self.release_timeout_max_us * 1_000
            + 4 * self.backoff_max_us * 1_000
            + 50 * MS
    }

    /// The round trip the protocol time-outs are scaled by.
    pub fn rtt_us(&self) -> u64 {
        2 * self.net.delay_max_us
    }

    /// Lossy links and pending writes re-sent only after many round trips: a replica that
    /// missed a write keeps missing it for a while.
    fn slow_resends(&mut self, q: &mut Prng) {
        self.safety_ns = self.safety_ns.max(q.range(600, 1_001) * MS);
        self.safety_max_ops = 12_000;
        self.net.loss = self.net.loss.max(0.05 + q.unit() * 0.15);
        self.retransmit_after_us = self.retransmit_after_us.max(10 * self.rtt_us());
        self.retransmit_max_us = self.retransmit_max_us.max(self.retransmit_after_us * 4);
    }

    /// A series of one-way cuts between random pairs, each 40-80 round trips long, through
    /// most of the safety phase: while cut, the second node misses every write of the first
    /// and both keep working with the rest of the cluster.
    fn one_way_cuts(&mut self, q: &mut Prng) {
        let rtt_ns = self.rtt_us() * 1_000;
        let mut at_ns = q.range(5, 20) * MS;
        while at_ns < self.safety_ns * 8 / 10 {
            let from = NodeId(q.range(0, u64::from(self.nodes)) as u32);
            let to = NodeId((from.0 + q.range(1, u64::from(self.nodes)) as u32) % self.nodes);
            let heal_ns = at_ns + q.range(40, 81) * rtt_ns;
            let label = format!("one-way cuts [{from}->{to}]");
            self.faults.push(ScheduledFault {
                at_ns,
                fault: Fault::Partition { links: vec![(from, to)], heal_ns, label },
            });
            at_ns = heal_ns + q.range(5, 30) * rtt_ns;
        }
        self.faults.sort_by_key(|f| f.at_ns);
    }

    /// Biases a seed's knobs towards what the canary's bug needs to show.
    fn apply_canary_profile(&mut self, canary: Canary, q: &mut Prng) {
        if canary == Canary::SkipSlowRelease {
            self.slow_resends(q);
            self.one_way_cuts(q);
        } else if canary == Canary::NoAcquireObligation {
            self.safety_ns = self.safety_ns.max(q.range(600, 1_001) * MS);
            self.safety_max_ops = 12_000;
            // K-F2's shape: K's release reaches a quorum but not J (a short one-way cut
            // K -> J), and no barrier publishes a DM-set naming J (which would make J
            // refresh everything): no node fails, and T_REL outlasts a cut and a re-send.
            self.faults.clear();
            // N = 3, as in K-F2: one replica outside each quorum.
            self.nodes = 3;
            self.clocks.truncate(3);
            self.net.loss = q.unit() * 0.03;
            self.net.delay_max_us = self.net.delay_max_us.min(self.net.delay_min_us + 800);
            self.net.reorder_extra_max_us = self.net.reorder_extra_max_us.min(2_000);
            let rtt = self.rtt_us();
            self.retransmit_after_us = 5 * rtt;
            self.retransmit_max_us = 20 * rtt;
            self.release_timeout_us = 200 * rtt;
            self.release_timeout_max_us = self.release_timeout_us;
            self.one_way_cuts(q);
        }
        let rtt = self.rtt_us();
        let w = &mut self.workload;
        let profile = match canary {
            // Caught under any seed's knobs often enough (`tests/swarm.rs`).
            Canary::ApplyOlderWrites
            | Canary::SlowReleaseBeforeQuorum
            | Canary::ResetWithoutOwner
            | Canary::ClearSelfDelinquentWithoutBump
            | Canary::CommitWithoutRegistering => return,
            Canary::IgnoreCompletionRecords => {
                // Retries must happen on every seed, not only where a node crashes.
                w.lost_reply_permille = q.range(50, 151) as u32;
                // RMWs, whose exactly-once the rc engine keeps (plain writes: `check::rifl`).
                if w.rmw_pct < 20 {
                    w.mix = "sync-heavy";
                    (w.acquire_pct, w.release_pct, w.rmw_pct) = (30, 30, 20);
                }
                "lost replies: 5-15% of the replies to mutating requests; >= 20% RMWs"
            }
            Canary::SkipSlowRelease => {
                // Barriers must go slow (tiny T_REL, lost acks) and a replica must miss a
                // write for longer than a release -> acquire -> read chain takes.
                self.release_timeout_us = q.range(20, 200);
                self.release_timeout_max_us = self.release_timeout_us; // fixed: ack RTTs would lift it
                w.mix = "mixed";
                w.acquire_pct = 20;
                w.release_pct = 20;
                w.rmw_pct = 0;
                w.delete_pct = 0;
                w.read_pct = q.range(40, 71) as u32;
                w.pattern_pct = 90;
                w.keys = q.range(4, 10) as u32;
                w.flags = (w.keys / 3).max(1);
                w.sessions_per_node = q.range(1, 3) as u32;
                w.think_min_us = q.range(20, 200);
                w.think_max_us = w.think_min_us + q.range(0, 500);
                "tiny T_REL, loss 5-20%, writes re-sent after >= 10 RTT, one-way cuts, 90% message-passing patterns on 4-9 keys"
            }
            Canary::AcceptWithoutQuorum => {
                w.mix = "sync-heavy";
                w.acquire_pct = 30;
                w.release_pct = 30;
                w.rmw_pct = 50;
                w.keys = w.keys.clamp(1, 3);
                w.sessions_per_node = w.sessions_per_node.max(2);
                "50% RMWs on 1-3 keys, >= 2 sessions per node"
            }
            Canary::NoAcquireObligation => {
                // K-F2: a release reaches a quorum but not J; I acquires it and releases a flag
                // with nothing else pending; J acquires the flag and reads locally.
                w.mix = "sync-heavy";
                w.acquire_pct = 50;
                w.release_pct = 100;
                w.rmw_pct = 0;
                w.delete_pct = 0;
                w.read_pct = q.range(40, 71) as u32;
                w.pattern_pct = 90;
                w.keys = q.range(2, 4) as u32;
                w.flags = w.keys;
                w.sessions_per_node = q.range(1, 3) as u32;
                w.think_min_us = q.range(20, 200);
                w.think_max_us = w.think_min_us + q.range(2, 20) * rtt;
                "3 nodes, short one-way cuts, no other fault, loss < 3%, delays <= 0.8ms apart, T_REL 200 RTT, every write a release, 90% message-passing patterns on 2-3 flag keys, sessions think between patterns"
            }
        };
        self.canary_profile = Some(profile);
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
            let links =
                a.iter().flat_map(|&x| b.iter().flat_map(move |&y| [(x, y), (y, x)])).collect();
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
            let label =
                links.iter().map(|(x, y)| format!("{x}->{y}")).collect::<Vec<_>>().join(" ");
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
        writeln!(
            f,
            "  rc core     writes re-sent after {}us backing off to {}us; rounds re-sent every {}us; T_REL {}us{}{}; Paxos back-off {}..{}us",
            self.retransmit_after_us,
            self.retransmit_max_us,
            self.round_retransmit_us,
            self.release_timeout_us,
            if self.release_timeout_max_us > self.release_timeout_us {
                format!(" (10 ack RTTs, up to {}us)", self.release_timeout_max_us)
            } else {
                String::new()
            },
            if self.release_timeout_us < self.rtt_us() { " (below the RTT: slow paths)" } else { "" },
            self.backoff_min_us,
            self.backoff_max_us
        )?;
        writeln!(
            f,
            "  workload    {} sessions/node, depth {}, {} keys + {} counters, {}% reads, {}% of writes are deletes, think {}..{}us{}; {} per mille of mutating replies lost (RIFL retries)",
            w.sessions_per_node,
            w.depth,
            w.keys,
            w.counters,
            w.read_pct,
            w.delete_pct,
            w.think_min_us,
            w.think_max_us,
            if w.read_only_after_heal { ", only reads once healed" } else { "" },
            w.lost_reply_permille
        )?;
        writeln!(
            f,
            "  sync mix    {}: {}% of reads acquire, {}% of writes release, {}% RMWs ({}% FAA, CAS {}% weak), {}% message-passing patterns ({} flag keys)",
            w.mix, w.acquire_pct, w.release_pct, w.rmw_pct, w.faa_pct, w.weak_cas_pct, w.pattern_pct, w.flags
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
                Fault::Partition { heal_ns, label, .. } => {
                    format!("partition {label} until {}", fmt_ms(*heal_ns))
                }
                Fault::Pause { node, resume_ns } => {
                    format!("pause {node} until {}", fmt_ms(*resume_ns))
                }
                Fault::Crash { node } => format!("crash {node}"),
            };
            writeln!(f, "    at {:>11}  {what}", fmt_ms(sf.at_ns))?;
        }
        if let Some(script) = &self.script {
            writeln!(
                f,
                "  script      {} ({} ops){}",
                script.name,
                script.ops.len(),
                script.drop.map_or(String::new(), |d| format!(", losing {d:?}"))
            )?;
        }
        write!(f, "  canary      {}", self.canary.map_or("none", Canary::name))?;
        if let Some(p) = self.canary_profile {
            write!(f, " (profile: {p})")?;
        }
        Ok(())
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
            let crashes =
                k.faults.iter().filter(|f| matches!(f.fault, Fault::Crash { .. })).count();
            assert!(crashes as u32 <= k.max_crashes(), "seed {seed}: crashes a majority");
            assert!(k.faults.iter().all(|f| f.at_ns < k.safety_ns));
            assert!(k.faults.windows(2).all(|w| w[0].at_ns <= w[1].at_ns));
            let rtt = k.rtt_us();
            assert!(
                k.release_timeout_us >= 10 * rtt || k.release_timeout_us < rtt.max(21),
                "seed {seed}: T_REL {}",
                k.release_timeout_us
            );
            let fixed = k.release_timeout_us < rtt.max(21);
            assert_eq!(
                k.release_timeout_max_us,
                if fixed { k.release_timeout_us } else { 4 * k.release_timeout_us },
                "seed {seed}"
            );
            let c = Knobs::draw(seed, Some(Canary::SkipSlowRelease));
            assert_eq!(
                c.release_timeout_max_us, c.release_timeout_us,
                "seed {seed}: the canary's tiny T_REL stays fixed"
            );
            assert!(k.backoff_min_us <= k.backoff_max_us && k.round_retransmit_us > 0);
            // A canary biases the sync knobs but keeps the seed's cluster and network delays.
            let c = Knobs::draw(seed, Some(Canary::AcceptWithoutQuorum));
            assert_eq!(
                (c.nodes, &c.faults, c.net.delay_max_us),
                (k.nodes, &k.faults, k.net.delay_max_us)
            );
        }
        let mixes: std::collections::BTreeSet<_> =
            (0..200).map(|s| Knobs::draw(s, None).workload.mix).collect();
        assert_eq!(mixes.len(), MIXES.len(), "{mixes:?}");
    }

    #[test]
    fn canary_names_parse() {
        for c in Canary::ALL {
            assert_eq!(c.name().parse::<Canary>(), Ok(c));
        }
        assert_eq!("apply-older-writes".parse::<Canary>(), Ok(Canary::ApplyOlderWrites));
        assert!("nope".parse::<Canary>().is_err());
        let shown = Knobs::draw(7, Some(Canary::ApplyOlderWrites)).to_string();
        assert!(shown.starts_with("seed 7\n") && shown.contains("canary      apply-older-writes"));
    }
}
