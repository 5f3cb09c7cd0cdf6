//! The whole server in the simulator: N [`strata_host::Host`] cores — the rc replica, the
//! log-table shards, the RIFL lease service, shard moves and the catalog, the same code
//! `strata-node` runs — under seeded faults, with simulated clients and checkers.
//!
//! * [`cluster`]: the driver ([`HostCluster`]): network with a per-link delay matrix, clocks,
//!   disks (`strata-logstore` over `SimBackend`), crashes, one place that executes effects;
//! * [`client`]: writers with leases and the operator that creates tables and moves shards;
//! * [`check`]: acknowledged writes survive, stable results, RIFL §7 inv. 9 across moves.
//!
//! One seed draws every knob of a run ([`HostKnobs::from_seed`]): a safety phase with message
//! loss, crashes and restarts of random nodes, a writer paused past its lease, and a shard
//! move (possibly interrupted and run again), then a liveness phase that heals everything and
//! requires every write and move to finish. `cargo run -p strata-sim -- --engine host --seed N`
//! replays one.

pub mod check;
pub mod client;
pub mod cluster;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use strata_core::Prng;
use strata_wire::client::{
    shard_of, TableDef, TableDurability, TableEngine, TableReads, TableReplication, TableTimers,
};
use strata_wire::log::LogOp;
use strata_wire::{Instant, NodeId};

pub use client::{ClientLog, MovePlan, MovePlant};
pub use cluster::{ClusterOptions, HostCluster, HostNet, Step, Stepped, Tune};

use check::{FinalShard, FinalTable};
use client::{Clients, Outcome};

/// Everything one run does, drawn from its seed.
#[derive(Clone, Debug)]
pub struct HostKnobs {
    pub seed: u64,
    pub nodes: usize,
    pub writers: usize,
    pub writes_each: u32,
    pub durability: TableDurability,
    pub shards: u32,
    pub net: HostNet,
    pub lease_term: Duration,
    /// `(node, crash at, restart at)`, in ms from the start.
    pub crashes: Vec<(usize, u64, u64)>,
    /// Writer 0 pauses from this ms for 1.5 lease terms (its lease expires).
    pub pause_at_ms: Option<u64>,
    pub moves: Vec<MovePlan>,
    /// The safety phase's length; the liveness phase follows.
    pub safety_ms: u64,
    pub plant: Option<MovePlant>,
    /// A bug planted in every node's log store (`strata_logstore::StoreBug`).
    pub store_bug: Option<strata_logstore::StoreBug>,
    /// Every host's service-rate limit per shard leader (requests/s).
    pub shard_rate_limit: Option<u32>,
    /// The table's preferred shard leaders (`TableDef::leaders`); none by default.
    pub preferred_leaders: Vec<NodeId>,
    /// Every this many ms, each node that is up sends a node-level echo message to a shard's
    /// leader (`strata_host::courier`); off by default (it would change every seed's network
    /// draws).
    pub mail_every_ms: Option<u64>,
}

fn at_ms(ms: u64) -> Instant {
    Instant(1_000_000_000 + ms * 1_000_000)
}

impl HostKnobs {
    pub fn from_seed(seed: u64) -> HostKnobs {
        let mut p = Prng::new(seed ^ 0x6f73_7400);
        let nodes = if p.chance(0.5) { 3 } else { 5 };
        // A matrix of one-way delays: every pair of nodes its own (0.2 - 5 ms).
        let mut delay_us = vec![vec![0; nodes]; nodes];
        for (i, j) in (0..nodes).flat_map(|i| (i + 1..nodes).map(move |j| (i, j))) {
            let d = p.range(200, 5_000);
            delay_us[i][j] = d;
            delay_us[j][i] = d;
        }
        let jitter_us = p.range(0, 500);
        let loss = [0.0, 0.01, 0.05][p.range(0, 3) as usize];
        let client_delay_us = p.range(100, 1_000);
        let client_loss = [0.0, 0.02, 0.05][p.range(0, 3) as usize];
        let net = HostNet::matrix(delay_us, jitter_us, loss, client_delay_us, client_loss);
        let safety_ms = 6_000;
        let crashes = (0..p.range(0, 3))
            .map(|_| {
                let at = p.range(500, safety_ms - 1_000);
                (p.range(0, nodes as u64) as usize, at, at + p.range(200, 1_500))
            })
            .collect();
        let durability = [TableDurability::Cad, TableDurability::Sync, TableDurability::Async]
            [p.range(0, 3) as usize];
        let mut to: Vec<NodeId> = (0..nodes as u32).map(NodeId).collect();
        // Move to a majority-sized subset (a different set from today's).
        while to.len() > nodes / 2 + 1 {
            let i = p.range(0, to.len() as u64) as usize;
            to.remove(i);
        }
        let move_at = p.range(2_000, 3_500);
        let interrupt_until = p.chance(0.3).then(|| at_ms(move_at + p.range(300, 1_500)));
        let mut net = net;
        if p.chance(0.5) {
            // Writes answered just before the freeze lose their replies: they are retried
            // after the move, at the new group, which answers them from the moved records.
            net.reply_blackout = Some((at_ms(move_at - 300), at_ms(move_at + 400)));
        }
        HostKnobs {
            seed,
            nodes,
            writers: 3,
            writes_each: 80,
            durability,
            shards: 2,
            net,
            lease_term: Duration::from_secs(2),
            crashes,
            pause_at_ms: p.chance(0.5).then(|| p.range(500, 3_000)),
            moves: vec![MovePlan {
                shard: p.range(0, 2) as u32,
                to,
                at: at_ms(move_at),
                interrupt_until,
            }],
            safety_ms,
            plant: None,
            store_bug: None,
            shard_rate_limit: None,
            mail_every_ms: None,
            preferred_leaders: Vec::new(),
        }
    }

    fn table(&self) -> TableDef {
        let reads = if self.durability == TableDurability::Cad {
            TableReads::ActiveSet
        } else {
            TableReads::Leader
        };
        TableDef {
            name: "t".into(),
            engine: TableEngine::Log,
            durability: self.durability,
            replication: TableReplication::Async,
            reads,
            shards: self.shards,
            timers: TableTimers::Default,
            leaders: self.preferred_leaders.clone(),
            txn: Default::default(),
            validation: Default::default(),
        }
    }
}

/// What a run produced.
#[derive(Debug)]
pub struct HostReport {
    pub seed: u64,
    pub violations: Vec<String>,
    pub log: ClientLog,
    /// `Expire` entries in the final logs (the lease expiry path ran).
    pub expire_entries: usize,
    /// Lease grants that renewed a lease already held (same id, later expiration).
    pub renewals: usize,
    pub crashes: usize,
    /// Writes acknowledged by a moved shard's old group (below the new group's first index).
    pub acked_before_move: usize,
    /// Each shard's leader at the end (the node whose replica leads in the highest epoch).
    pub final_leaders: Vec<Option<usize>>,
}

impl HostReport {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }

    pub fn repro(&self) -> String {
        format!("cargo run -p strata-sim -- --engine host --seed {}", self.seed)
    }
}

/// Runs one seed end to end (module docs).
pub fn run_host(knobs: &HostKnobs) -> HostReport {
    let mut c = HostCluster::new(
        knobs.nodes,
        knobs.net.clone(),
        knobs.lease_term,
        knobs.seed,
        knobs.shard_rate_limit,
    );
    let mut clients =
        Clients::new(&mut c, knobs.table(), knobs.writers, knobs.writes_each, knobs.moves.clone());
    clients.operator.plant = knobs.plant;
    c.store_bug = knobs.store_bug;
    clients.mail_every = knobs.mail_every_ms.map(Duration::from_millis);

    // Safety phase: faults as drawn, in time order.
    let mut faults: Vec<(u64, usize, bool)> = Vec::new();
    for &(node, down, up) in &knobs.crashes {
        faults.push((down, node, false));
        faults.push((up, node, true));
    }
    faults.sort();
    let mut paused = knobs.pause_at_ms;
    for (ms, node, up) in faults {
        if let Some(p) = paused.filter(|p| *p <= ms) {
            clients.run(&mut c, at_ms(p));
            let pause = knobs.lease_term * 3 / 2;
            clients.writers[0].paused_until = Some(at_ms(p) + pause);
            paused = None;
        }
        clients.run(&mut c, at_ms(ms));
        match (up, c.is_up(node)) {
            (false, true) => c.crash(node),
            (true, false) => {
                c.start(node);
            }
            _ => {}
        }
    }
    if let Some(p) = paused {
        clients.run(&mut c, at_ms(p));
        clients.writers[0].paused_until = Some(at_ms(p) + knobs.lease_term * 3 / 2);
    }
    clients.run(&mut c, at_ms(knobs.safety_ms));

    // Liveness phase: every node up, no loss, no cut; everything must finish.
    for i in 0..knobs.nodes {
        if !c.is_up(i) {
            c.start(i);
        }
    }
    c.calm();
    let deadline = knobs.safety_ms + 30_000;
    let mut t = knobs.safety_ms;
    while !clients.done() && t < deadline {
        t += 500;
        clients.run(&mut c, at_ms(t));
    }
    // Let replication and durability settle before reading the final state; the mailer stops,
    // and every message it sent gets its outcome (delivered, or timed out).
    let settle_ms = if clients.mail_every.take().is_some() {
        strata_host::courier::MAIL_TIMEOUT.as_millis() as u64 + 500
    } else {
        2_000
    };
    clients.run(&mut c, at_ms(t + settle_ms));

    let mut violations = Vec::new();
    if !clients.done() {
        violations.push(format!(
            "liveness: not every write and move finished within {deadline} ms: {}",
            clients.describe()
        ));
    }
    for (i, n) in c.nodes.iter().enumerate() {
        if let Some(f) = &n.failure {
            violations.push(format!("n{i} failed: {f}"));
        }
    }
    violations.extend(c.open_failures.iter().cloned());
    violations.extend(check::mail_reached_the_leader(&clients.log, |i, inc| {
        c.is_up(i) && c.incarnation(i) == inc
    }));
    let tables = final_tables(&c, &knobs.table());
    if knobs.durability == TableDurability::Sync {
        violations.extend(check::acked_writes_survive(&clients.log, &tables));
    }
    violations.extend(check::frozen_state_survives(&clients.log, &tables));
    violations.extend(check::stable_results(&clients.log));
    for (name, t) in &tables {
        for (i, s) in t.shards.iter().enumerate() {
            violations.extend(check::moved_items_not_executed_again(name, i, s));
        }
    }
    violations.extend(check::no_failed_answers(&clients.log));
    let mut expire_entries = 0;
    for (name, t) in &tables {
        for (i, s) in t.shards.iter().enumerate() {
            violations.extend(check::no_execution_after_expiry(name, i, s));
            expire_entries += s.log.iter().filter(|e| matches!(e.op, LogOp::Expire(_))).count();
        }
    }
    let mut renewals = 0;
    let mut last: BTreeMap<u64, u64> = BTreeMap::new();
    for &(id, exp) in &clients.log.grants {
        if last.insert(id, exp).is_some_and(|prev| exp > prev) {
            renewals += 1;
        }
    }
    let acked_before_move = clients
        .log
        .writes
        .iter()
        .filter(|w| {
            let Some(Outcome::Acked(at)) = w.answers.first() else { return false };
            let t = &tables[&w.table];
            let shard = &t.shards[shard_of(&w.key, t.shards.len() as u32) as usize];
            shard.log.first().is_some_and(|e| matches!(e.op, LogOp::Install(_)) && *at < e.index)
        })
        .count();
    let final_leaders = (0..knobs.shards)
        .map(|shard| {
            (0..c.nodes.len())
                .filter_map(|i| {
                    let r = c.nodes[i].host.as_ref()?.shard_replica("t", shard)?;
                    (r.role() == strata_log::Role::Leader).then(|| (r.epoch(), i))
                })
                .max()
                .map(|(_, i)| i)
        })
        .collect();
    HostReport {
        final_leaders,
        acked_before_move,
        seed: knobs.seed,
        violations,
        log: clients.log,
        expire_entries,
        renewals,
        crashes: knobs.crashes.len(),
    }
}

/// Each shard's state at the live replica that applied the most.
fn final_tables(c: &HostCluster, def: &TableDef) -> BTreeMap<String, FinalTable> {
    let mut t = FinalTable::default();
    for shard in 0..def.shards {
        let best = c
            .nodes
            .iter()
            .filter_map(|n| n.host.as_ref()?.shard_replica(&def.name, shard))
            .max_by_key(|r| r.applied_index());
        let mut s = FinalShard::default();
        if let Some(r) = best {
            let mut keys: Vec<Bytes> = Vec::new();
            r.for_each_item(|k, _| keys.push(Bytes::copy_from_slice(k)));
            for k in keys {
                let (v, at) = r.get(&k);
                s.items.insert(k, (v, at));
            }
            s.log = r.entries().to_vec();
        }
        t.shards.push(s);
    }
    BTreeMap::from([(def.name.clone(), t)])
}
