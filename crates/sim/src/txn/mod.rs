//! The transaction harness (issue #18 item 4): whole hosts (`HostCluster`) with a transactional
//! table of several shards, clients running transfers, read-only transactions and plain reads
//! over the wire protocol, and faults — lost and duplicated messages, nodes crashed at random
//! and restarted, a client that crashes after its first prepare, one that pauses past `T_TX`
//! — then healing and recovery. Two faults happen in every faulty run by construction, not by
//! chance:
//!
//! * **a shard move in the middle of transactions** ([`mover`]): an operator moves a shard of
//!   the table to another replica set (every node but one, often leaving out its leader), as
//!   `strata shard move` does, freezing the moment the shard's leader has applied a
//!   `Prepared` vote (or, in a quarter of the runs, holds a recovery coordinator's decision
//!   record), so the frozen state (`LogOp::Install`) carries locks, votes and decision
//!   records to the new group; the clients and the coordinators follow `Moved` answers there
//!   with the same RPC ids (`client` docs);
//! * **a participant's leader crashed while it prepares** (`Preparing`): twice a run, when a
//!   shard leader appends a `Prepare` entry, it crashes at once (the entry unsynced, perhaps
//!   already sent to followers) or a little later while the entry is still unapplied and
//!   unanswered, and restarts later; the client retries the prepare (same ids) at whoever
//!   leads next.
//!
//! The checkers ([`check`]) judge what the clients saw and what every replica applied (its
//! audit events, and the locks a move or a restart installed without events):
//! strict serializability (the dependency-graph checker of `check::txn`), atomicity, decision
//! agreement, lock exclusivity, no lock left, conservation of the total, and the replicas'
//! own invariants (a lock's vote outlives it, §7 inv. 14), each with a canary
//! (`strata_log::PlantedBug::Txn*`; a move that loses its locks, [`mover::MovePlant`]). The
//! report counts the moves, what they carried and the targeted crashes.

pub mod check;
pub mod client;
pub mod mover;

use std::time::Duration;

use bytes::Bytes;
use strata_core::Prng;
use strata_host::catalog::{self, Catalogued};
use strata_host::Audit;
use strata_log::{LogEvent, Persist, PlantedBug, Role, TxnEvent};
use strata_wire::client::{
    shard_of, ClientRequest, ClientResponse, LogFailure, LogWriteOp, Request, Response, TableDef,
    TableDurability, TableEngine, TableReads, TableReplication, TableTimers, TableTxn,
};
use strata_wire::log::{LogIndex, LogOp, ShardMove};
use strata_wire::rifl::{LeaseInfo, LeaseStatus, Rifl, RpcId};
use strata_wire::txn::TxnId;
use strata_wire::Instant;

use crate::check::Violation;
use crate::host::{ClusterOptions, HostCluster, HostNet, Stepped};
use client::{ClientFault, TxnClient, TxnRecord};
use mover::Mover;

pub const TABLE: &str = "bank";
pub const SHARDS: u32 = 3;
pub const NODES: usize = 3;
pub const ACCOUNTS: usize = 6;
pub const INITIAL: u64 = 10;

/// One run's knobs.
#[derive(Clone, Debug)]
pub struct TxnSimOptions {
    pub clients: usize,
    pub txns_per_client: u32,
    pub canary: Option<PlantedBug>,
    /// Node crashes, message loss and the clients' own faults.
    pub faults: bool,
    /// `T_TX` per object.
    pub t_tx: Duration,
    pub lease_term: Duration,
    /// How long the pausing client sleeps after its first prepare (`None`: 8 `T_TX`).
    pub pause: Option<Duration>,
    /// With `faults`: move a shard to another replica set while transactions hold locks on it.
    pub move_shard: bool,
    /// A planted bug in that move (its canary).
    pub move_plant: Option<mover::MovePlant>,
    /// With `faults`: this many times, crash a shard leader right after it appended a
    /// prepare, before the prepare is applied and answered (then restart it).
    pub prepare_crashes: u32,
}

impl Default for TxnSimOptions {
    fn default() -> TxnSimOptions {
        TxnSimOptions {
            clients: 4,
            txns_per_client: 25,
            canary: None,
            faults: true,
            t_tx: strata_host::TXN_TIMEOUT_PER_OBJECT,
            lease_term: Duration::from_secs(10),
            pause: None,
            move_shard: true,
            move_plant: None,
            prepare_crashes: 2,
        }
    }
}

/// What every replica's transaction entries did, in the order each node applied them.
#[derive(Clone, Debug)]
pub enum Applied {
    Event {
        node: usize,
        shard: u32,
        event: TxnEvent,
    },
    /// The node restarted: its replicas rebuild their state by replaying their logs.
    Restarted {
        node: usize,
    },
    /// The locks the node's replica of `shard` holds from here on, `(key, txn, seq)`, when its
    /// state was replaced without events: a shard move adopted at the node (the new group's
    /// replica starts from the frozen state; a node out of the group hosts the shard no more:
    /// none), and a restart of a moved-in replica (its replay starts from the `Install` entry,
    /// whose locks no event reports; the entries after it report their own).
    Locks {
        node: usize,
        shard: u32,
        locks: Vec<(Bytes, TxnId, u64)>,
    },
}

/// One run's result.
#[derive(Debug)]
pub struct TxnReport {
    pub seed: u64,
    pub records: Vec<TxnRecord>,
    /// The initial puts: `(key, version)`.
    pub setup: Vec<(Bytes, LogIndex)>,
    pub applied: Vec<Applied>,
    /// Every account's final value, read at its leader after healing.
    pub final_values: Vec<(Bytes, Option<Bytes>)>,
    /// Locks held by any replica after healing and recovery.
    pub locks_left: usize,
    /// Panics and broken invariants of the hosts.
    pub failures: Vec<String>,
    /// Shard moves finished: `(shard, where it went)`.
    pub moves: Vec<(u32, ShardMove)>,
    /// Locks, and recovery coordinators' decision records, that the moves' frozen states
    /// carried to the new groups.
    pub moved_locks: usize,
    pub moved_decisions: usize,
    /// Leaders crashed with a prepare appended but not yet applied (the targeted fault).
    pub prepare_crashes: usize,
    /// Random node crashes.
    pub crashes: usize,
    pub end: Instant,
    pub violations: Vec<Violation>,
}

impl TxnReport {
    pub fn committed(&self) -> usize {
        self.records
            .iter()
            .filter(|r| r.txn.is_some() && r.outcome == client::Known::Committed)
            .count()
    }
    pub fn aborted(&self) -> usize {
        self.records.iter().filter(|r| r.outcome == client::Known::Aborted).count()
    }
}

/// A transactional table like the harness's (`sync`, leader reads) with `shards` shards.
pub fn table_def(shards: u32) -> TableDef {
    TableDef {
        name: TABLE.into(),
        engine: TableEngine::Log,
        durability: TableDurability::Sync,
        replication: TableReplication::Sync,
        reads: TableReads::Leader,
        shards,
        timers: TableTimers::Default,
        leaders: Vec::new(),
        txn: TableTxn::Rifl,
        validation: Default::default(),
    }
}

pub fn accounts() -> Vec<Bytes> {
    (0..ACCOUNTS).map(|i| Bytes::from(format!("acct{i}"))).collect()
}

/// Runs one seeded transaction run and checks it.
pub fn run(seed: u64, opts: &TxnSimOptions) -> TxnReport {
    let mut rng = Prng::new(seed ^ 0x0074_786e_5f73_696d);
    let def = table_def(SHARDS);
    let catalog = catalog::encode(&[Catalogued { def: def.clone(), moved: Default::default() }]);
    let (loss, client_loss) = if opts.faults { (0.01, 0.01) } else { (0.0, 0.0) };
    let mut net = HostNet::matrix(vec![vec![300; NODES]; NODES], 100, loss, 200, client_loss);
    if opts.faults {
        net.links.dup = 0.01;
    }
    let (canary, t_tx) = (opts.canary, opts.t_tx);
    let over = {
        let mut cfg = catalog::log_config(&def, NODES).expect("a valid table");
        cfg.planted_bug = canary;
        cfg
    };
    let tune: crate::host::Tune = Box::new(move |_, cfg| {
        cfg.txn_timeout_per_object = t_tx;
        if canary.is_some() {
            cfg.log_overrides.insert(TABLE.to_string(), over.clone());
        }
    });
    let mut c = HostCluster::with(ClusterOptions {
        nodes: NODES,
        net,
        seed,
        net_prng: None,
        clocks: None,
        start: Instant(1_000_000_000),
        lease_term: opts.lease_term,
        shard_rate_limit: None,
        observe: true,
        tune: Some(tune),
        catalog,
    });
    let mut applied = Vec::new();
    run_for(&mut c, Duration::from_secs(3), &mut applied);
    let setup_client = opts.clients;
    let lease0 = lease(&mut c, setup_client, &mut applied);
    let mut setup = Vec::new();
    for (i, key) in accounts().into_iter().enumerate() {
        let rifl = envelope(&lease0, i as u64 + 1);
        let body = Request::LogWrite {
            table: TABLE.into(),
            key: key.clone(),
            op: LogWriteOp::Put(Bytes::from(INITIAL.to_string())),
            immediate: false,
        };
        match call_leader(&mut c, setup_client, Some(rifl), body, &mut applied) {
            Response::LogWritten { index, .. } => setup.push((key, index)),
            other => panic!("seed {seed}: setup write: {other:?}"),
        }
    }
    // The clients, two of them with a fault of their own.
    let mut clients: Vec<TxnClient> = (0..opts.clients)
        .map(|i| {
            let fault = match (opts.faults, i) {
                (true, 0) if rng.chance(0.5) => Some(ClientFault::CrashAfterPrepare),
                (true, 1) => {
                    Some(ClientFault::PauseAfterPrepare(opts.pause.unwrap_or(opts.t_tx * 8)))
                }
                _ => None,
            };
            let g = lease(&mut c, i, &mut applied);
            let txns = if matches!(fault, Some(ClientFault::CrashAfterPrepare)) {
                3
            } else {
                opts.txns_per_client
            };
            let renew = opts.lease_term / 4;
            TxnClient::new(i, TABLE, accounts(), SHARDS, NODES, g, txns, fault, renew, rng.fork())
        })
        .collect();
    for cl in &mut clients {
        let now = c.now;
        cl.poll(&mut c, now);
    }
    // Node faults: crash a node now and then, restart it a little later.
    const CRASH: u64 = 1 << 32;
    const RESTART: u64 = 2 << 32;
    const CRASH_PREPARING: u64 = 4 << 32;
    let mut crashes = 0;
    if opts.faults {
        let mut at = c.now;
        for _ in 0..rng.range(1, 4) {
            at += Duration::from_millis(rng.range(100, 1500));
            let node = rng.range(0, NODES as u64);
            c.schedule(at, CRASH | node);
            c.schedule(at + Duration::from_millis(rng.range(200, 900)), RESTART | node);
        }
    }
    // The scenarios' own draws, so the draws above stay what they were.
    let mut frng = Prng::new(seed ^ 0x6d6f_7665_7363_656e);
    // A shard move while transactions hold locks on it (`mover` docs).
    let mut mover = (opts.faults && opts.move_shard).then(|| {
        // A shard that holds accounts (one of the three may hold none).
        let shard = shard_of(&accounts()[frng.range(0, ACCOUNTS as u64) as usize], SHARDS);
        // Decision records exist while recovery runs: early on, for the transactions of the
        // crashing and the pausing client.
        let want_decision = frng.chance(0.25);
        let from =
            c.now + Duration::from_millis(if want_decision { 0 } else { frng.range(200, 1500) });
        let without_leader = frng.chance(0.5);
        let pick = frng.next_u64();
        let client = opts.clients + 1;
        let mut m =
            Mover::new(&mut c, client, TABLE, shard, from, want_decision, without_leader, pick);
        m.plant = opts.move_plant;
        m
    });
    // Leaders crashed in the middle of a prepare (`Preparing` docs).
    let mut preparing = Preparing {
        left: if opts.faults { opts.prepare_crashes } else { 0 },
        next_at: c.now + Duration::from_millis(frng.range(20, 500)),
        waiting: None,
        crashes: 0,
    };
    let deadline = c.now + Duration::from_secs(60);
    let busy = |clients: &[TxnClient], mover: &Option<Mover>| {
        !clients.iter().all(TxnClient::finished) || mover.as_ref().is_some_and(|m| !m.finished())
    };
    while c.now < deadline && busy(&clients, &mover) {
        let Some(stepped) = c.next(deadline) else { break };
        match stepped {
            Stepped::Node(step) => {
                if let Some(m) = mover.as_mut() {
                    m.watch(&mut c, &step);
                }
                if let Some((node, shard, index)) = preparing.due(&c, &step) {
                    if frng.chance(0.5) {
                        preparing.crash(&mut c, node, &mut frng, RESTART);
                    } else {
                        // A little later: replicated, perhaps persisted, but not yet applied.
                        let at = c.now + Duration::from_micros(frng.range(100, 1500));
                        preparing.waiting = Some((node, shard, index, c.incarnation(node)));
                        c.schedule(at, CRASH_PREPARING);
                    }
                }
                let (node, adopted) = (step.node, adopted(&step));
                observe(&mut c, step, &mut applied);
                if let Some(m) = mover.as_ref().filter(|_| adopted) {
                    record_adopted(&c, node, m.shard, &mut applied);
                }
            }
            Stepped::Harness(CRASH_PREPARING) => {
                if let Some((node, shard, index, incarnation)) = preparing.waiting.take() {
                    let unapplied = c.incarnation(node) == incarnation
                        && all_up(&c)
                        && c.nodes[node]
                            .host
                            .as_ref()
                            .and_then(|h| h.shard_replica(TABLE, shard))
                            .is_some_and(|r| r.role() == Role::Leader && r.applied_index() < index);
                    if unapplied {
                        preparing.crash(&mut c, node, &mut frng, RESTART);
                    }
                }
            }
            Stepped::Harness(token) if token & CRASH != 0 => {
                let node = (token & 0xffff) as usize;
                if all_up(&c) {
                    c.crash(node);
                    crashes += 1;
                }
            }
            Stepped::Harness(token) if token & RESTART != 0 => {
                let node = (token & 0xffff) as usize;
                if !c.is_up(node) {
                    restart(&mut c, node, &mut applied);
                }
            }
            _ => {}
        }
        let now = c.now;
        for (client, resp) in std::mem::take(&mut c.client_inbox) {
            if let Some(cl) = clients.get_mut(client) {
                cl.on_response(&mut c, now, resp);
            } else if let Some(m) = mover.as_mut().filter(|m| m.client == client) {
                m.on_response(&mut c, resp);
            }
        }
        for client in std::mem::take(&mut c.client_wakes) {
            if let Some(cl) = clients.get_mut(client) {
                cl.poll(&mut c, now);
            } else if let Some(m) = mover.as_mut().filter(|m| m.client == client) {
                m.poll(&mut c);
            }
        }
    }
    let unfinished_move = mover.as_ref().filter(|m| !m.finished()).map(Mover::describe);
    // Heal: every node up, no loss; then time for recovery to finish what clients left.
    for i in 0..NODES {
        if !c.is_up(i) {
            restart(&mut c, i, &mut applied);
        }
    }
    c.calm();
    let end = c.now;
    for cl in &mut clients {
        cl.abandon(end);
    }
    // Recovery needs `T_TX` per object (two at most here), then a few round trips.
    run_for(&mut c, Duration::from_secs(3) + opts.t_tx * 4, &mut applied);
    let final_values = accounts()
        .into_iter()
        .map(|key| {
            let body = Request::LogRead {
                table: TABLE.into(),
                key: key.clone(),
                min_index: None,
                sharer: false,
            };
            match call_leader(&mut c, setup_client, None, body, &mut applied) {
                Response::LogValue { value, .. } => (key, value),
                other => (key, Some(Bytes::from(format!("unreadable: {other:?}")))),
            }
        })
        .collect();
    let locks_left = (0..NODES)
        .filter_map(|i| {
            c.operate(i, |h, _| {
                (0..SHARDS)
                    .filter_map(|s| h.shard_replica(TABLE, s))
                    .map(|r| r.locks().count())
                    .sum::<usize>()
            })
        })
        .map(|(n, _)| n)
        .sum();
    let failures = c.nodes.iter().filter_map(|n| n.failure.clone()).collect();
    let frozen = mover.as_ref().and_then(|m| m.frozen.as_ref());
    let moves = mover.iter().filter_map(|m| Some((m.shard, m.done.clone()?))).collect();
    let mut report = TxnReport {
        seed,
        records: clients.into_iter().flat_map(|cl| cl.done).collect(),
        setup,
        applied,
        final_values,
        locks_left,
        failures,
        moves,
        moved_locks: frozen.map_or(0, |s| s.locks.len()),
        moved_decisions: frozen.map_or(0, |s| s.decisions.len()),
        prepare_crashes: preparing.crashes,
        crashes,
        end,
        violations: Vec::new(),
    };
    report.violations = check::check_all(&report);
    if let Some(m) = unfinished_move {
        report.violations.push(Violation {
            checker: "txn-move-finished",
            at: None,
            detail: format!("the shard move did not finish within the run: {m}"),
        });
    }
    report
}

/// Whether the step adopted a shard move (answered `ShardAdopted`: the node replaced its
/// replica in this step).
fn adopted(step: &crate::host::Step) -> bool {
    step.replies.iter().any(|(_, r)| matches!(r.body, Response::ShardAdopted { .. }))
}

fn all_up(c: &HostCluster) -> bool {
    (0..NODES).all(|i| c.is_up(i))
}

/// The targeted fault: a participant's leader crashes in the middle of a prepare — right after
/// it appended the `Prepare` entry (its disk has not synced it; the followers may have it), or
/// a little later while the entry is still unapplied, so unanswered — and restarts later.
/// Armed `left` times, each from `next_at` on, when every node is up.
struct Preparing {
    left: u32,
    next_at: Instant,
    /// A crash scheduled a little later: `(node, shard, the entry's index, incarnation)`.
    waiting: Option<(usize, u32, LogIndex, u64)>,
    crashes: usize,
}

impl Preparing {
    /// Whether `step` is a leader appending a prepare while the fault is armed: `(node,
    /// shard, the entry's index)`.
    fn due(&self, c: &HostCluster, step: &crate::host::Step) -> Option<(usize, u32, LogIndex)> {
        if self.left == 0 || self.waiting.is_some() || c.now < self.next_at || !all_up(c) {
            return None;
        }
        let r = c.nodes[step.node].host.as_ref()?;
        step.persists.iter().find_map(|(id, records)| {
            let replica = r.shard_replica(TABLE, id.shard)?;
            if replica.role() != Role::Leader {
                return None;
            }
            // The leader's own append (in its epoch), not a follower's copy.
            let own = |e: &&strata_log::LogEntry| {
                matches!(e.op, LogOp::Prepare(_)) && e.index.epoch == replica.epoch()
            };
            records.iter().find_map(|(_, p)| match p {
                Persist::Append(es) => es.iter().find(own).map(|e| (step.node, id.shard, e.index)),
                _ => None,
            })
        })
    }

    fn crash(&mut self, c: &mut HostCluster, node: usize, rng: &mut Prng, restart: u64) {
        c.crash(node);
        self.crashes += 1;
        self.left -= 1;
        let up = c.now + Duration::from_millis(rng.range(200, 900));
        c.schedule(up, restart | node as u64);
        self.next_at = up + Duration::from_millis(rng.range(50, 500));
    }
}

/// Records a step's transaction events and sends its replies on to the clients.
fn observe(c: &mut HostCluster, step: crate::host::Step, applied: &mut Vec<Applied>) {
    c.send_replies(step.replies);
    record(step.node, step.audit, applied);
}

/// [`Applied::Locks`] of `node`'s replica of `shard` now (after a move's adoption).
fn record_adopted(c: &HostCluster, node: usize, shard: u32, applied: &mut Vec<Applied>) {
    let Some(h) = c.nodes[node].host.as_ref() else { return };
    let locks = h
        .shard_replica(TABLE, shard)
        .map(|r| r.locks().map(|l| (l.key.clone(), l.txn, l.seq)).collect())
        .unwrap_or_default();
    applied.push(Applied::Locks { node, shard, locks });
}

fn record(node: usize, audit: Vec<Audit>, applied: &mut Vec<Applied>) {
    for a in audit {
        if let Audit::Log { table, shard, event: LogEvent::Txn(event) } = a {
            if table == TABLE {
                applied.push(Applied::Event { node, shard, event });
            }
        }
    }
}

fn restart(c: &mut HostCluster, node: usize, applied: &mut Vec<Applied>) {
    applied.push(Applied::Restarted { node });
    let step = c.start(node);
    // A moved-in replica's log starts with its `Install` entry: its locks come first.
    for shard in 0..SHARDS {
        let r = c.nodes[node].host.as_ref().and_then(|h| h.shard_replica(TABLE, shard));
        if let Some(LogOp::Install(s)) = r.and_then(|r| r.entries().first()).map(|e| &e.op) {
            let locks = s.locks.iter().map(|l| (l.key.clone(), l.txn, l.seq)).collect();
            applied.push(Applied::Locks { node, shard, locks });
        }
    }
    if let Some(step) = step {
        observe(c, step, applied);
    }
}

fn run_for(c: &mut HostCluster, d: Duration, applied: &mut Vec<Applied>) {
    let until = c.now + d;
    while let Some(stepped) = c.next(until) {
        if let Stepped::Node(step) = stepped {
            observe(c, step, applied);
        }
        c.client_inbox.clear();
        c.client_wakes.clear();
    }
    c.now = c.now.max(until);
}

fn envelope(g: &LeaseStatus, seq: u64) -> Rifl {
    Rifl {
        rpc: RpcId { client_id: g.lease_id, seq },
        first_incomplete: seq,
        lease: LeaseInfo {
            client_id: g.lease_id,
            expiration: g.expiration,
            timestamp: g.cluster_time,
        },
    }
}

/// Sends `body` from `client` to `node` and runs until its answer (`None`: none within 1 s).
fn call(
    c: &mut HostCluster,
    client: usize,
    node: usize,
    rifl: Option<Rifl>,
    body: Request,
    applied: &mut Vec<Applied>,
) -> Option<Response> {
    let corr = c.inputs | (1 << 62);
    c.send_request(client, node, ClientRequest { corr, rifl, body });
    let until = c.now + Duration::from_secs(1);
    while c.now < until {
        if let Some(i) = c.client_inbox.iter().position(|(cl, r)| *cl == client && r.corr == corr) {
            let (_, ClientResponse { body, .. }) = c.client_inbox.remove(i);
            return Some(body);
        }
        match c.next(until) {
            Some(Stepped::Node(step)) => observe(c, step, applied),
            Some(_) => {}
            None => break,
        }
    }
    None
}

/// `body` to the leader of its shard, trying every node (the replicas a `Moved` answer names,
/// once one does), for up to 20 s.
fn call_leader(
    c: &mut HostCluster,
    client: usize,
    rifl: Option<Rifl>,
    body: Request,
    applied: &mut Vec<Applied>,
) -> Response {
    let until = c.now + Duration::from_secs(20);
    let mut candidates: Vec<usize> = (0..NODES).collect();
    let mut node = 0;
    let mut last = None;
    while c.now < until {
        match call(c, client, node, rifl, body.clone(), applied) {
            Some(Response::LogRejected(LogFailure::Moved { replicas })) if !replicas.is_empty() => {
                candidates = replicas.iter().map(|r| r.0 as usize).collect();
                let at = candidates.iter().position(|&r| r == node);
                node = candidates[at.map_or(0, |i| (i + 1) % candidates.len())];
            }
            Some(Response::LogRejected(
                LogFailure::NotLeader { .. }
                | LogFailure::Unavailable
                | LogFailure::Timeout
                | LogFailure::Locked,
            ))
            | None => {
                let at = candidates.iter().position(|&r| r == node);
                node = candidates[at.map_or(0, |i| (i + 1) % candidates.len())];
                let later = c.now + Duration::from_millis(20);
                run_for(c, later.saturating_since(c.now), applied);
            }
            Some(r) => return r,
        }
        last = Some(node);
    }
    panic!("no leader answered {body:?} (last at n{last:?})");
}

fn lease(c: &mut HostCluster, client: usize, applied: &mut Vec<Applied>) -> LeaseStatus {
    let mut last = None;
    for _ in 0..50 {
        for node in 0..NODES {
            match call(c, client, node, None, Request::RenewLease { lease_id: 0 }, applied) {
                Some(Response::Lease(g)) => return g,
                other => last = other,
            }
        }
        run_for(c, Duration::from_millis(100), applied);
    }
    panic!("no lease granted (last answer {last:?})");
}
