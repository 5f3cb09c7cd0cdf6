//! The simulated cluster: N `RcReplica` cores (the same code `strata-node` runs, `DESIGN.md`
//! "The sans-IO contract") driven by one event queue of `(global time, seq, event)`.
//!
//! The driver owns time, the network, the fault schedule and the clients; the cores only see
//! inputs with their own skewed `now`. After every input the driver runs the core's
//! `check_invariants`, drains its effects (sends go through the [`Network`], replies to the
//! clients, version-creation events into the history), samples the replica's state for the G1
//! checker, and re-arms the core's single timer at `poll_timeout`.
//!
//! Phases (`DESIGN.md`, testing layer 3; Kite §7 prop 9): a *safety* phase with every fault;
//! then *liveness*: partitions healed, paused nodes resumed, loss stopped, clients still
//! issuing (they must progress: the phase lasts `liveness_ns`, and longer — up to a cap —
//! until every live session has completed an operation invoked after healing); then *drain*:
//! clients stop, the network quiesces (`drain_ns`, extended up to a cap while operations are in
//! flight), and the final replica states are recorded for the convergence checker.
//!
//! Besides replies and `VersionCreated` events, the driver records what the checkers of Kite §7
//! need from the wire and the replicas' state: every distinct `COMMIT` sent (the global commit
//! log, inv. 12/13; the first real commit of a slot is the RMW version's creation, since the
//! owner reports it only at M10), every acceptor's accepted tuple (inv. 13), `SLOW_RELEASE`s
//! and their acks (prop 10), machine-epoch changes, and each replica's `lc`; and, for the state
//! invariants 14 - 17, the cores' barrier, delinquency-bit, `self_delinquent`, epoch-increment,
//! registry and promise events and the `RESET_BIT`s sent. Records that take part in those
//! checks carry a global `seq` (their order, see [`History`]) and, where "the same atomic step"
//! matters, the driver's input number `step`.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use strata_core::{DeadlineQueue, Node};
use strata_rc::{RcConfig, RcEffects, RcEvent, RcInput, RcReplica, RcStats};
use strata_wire::peer::{PeerMessage, Tuple};
use strata_wire::{AcquireId, Ballot, Carstamp, Instant, NodeId, RmwId};

use crate::clock::NodeClock;
use crate::guard::guarded;
use crate::history::{
    Acceptance, Anomaly, BarrierSeen, CommitSeen, Creation, DbitSeen, EpochBump, EpochChange,
    FinalState, History, PromiseSeen, Registration, ReplicaChange, ResetBitSeen,
    SelfDelinquentSeen, SlowReleaseAck, SlowReleaseSeen, Value,
};
use crate::knobs::{Fault, Knobs, Streams};
use crate::net::{NetStats, Network};
use crate::workload::Workload;

/// The next number of the driver's global record order (`History`, "Records that carry a
/// `seq`"); a free function, so that it borrows only the counter.
fn next_seq(seq: &mut u64) -> u64 {
    *seq += 1;
    *seq
}

/// A run that processes this many events is stuck in a loop; the run stops and says so.
const EVENT_BUDGET: u64 = 20_000_000;

#[derive(Debug)]
// Messages dominate the queue; boxing them would allocate once per delivery.
#[allow(clippy::large_enum_variant)]
enum Event {
    Deliver {
        from: NodeId,
        to: NodeId,
        msg: PeerMessage,
    },
    /// The node's armed tick; stale unless it is still the armed one.
    Timer {
        node: NodeId,
    },
    Issue {
        client: usize,
    },
    /// Client `client` re-sends operation `op` after an `InProgress` back-off (rifl.md §5.1).
    Resend {
        client: usize,
        op: usize,
    },
    /// The script's operation number `op` is due.
    Scripted {
        op: usize,
    },
    Fault(Fault),
    Heal {
        links: Vec<(NodeId, NodeId)>,
    },
    Resume {
        node: NodeId,
    },
    StartLiveness,
    StopClients,
    End,
}

/// An input as the driver queues it for a paused node.
#[derive(Debug)]
enum NodeInput {
    Client(RcInput),
    Peer { from: NodeId, msg: PeerMessage },
    Tick,
}

#[derive(Debug)]
enum NodeState {
    Up,
    /// Inputs wait here, in arrival order, until the node resumes.
    Paused {
        inbox: VecDeque<NodeInput>,
    },
    Crashed,
}

struct SimNode {
    id: NodeId,
    /// `None` once crashed: the state is lost for good.
    core: Option<RcReplica>,
    state: NodeState,
    clock: NodeClock,
    /// The last `now` given to the core, so its clock never runs backwards.
    last_local: Instant,
    /// Global instant of the armed tick.
    timer: Option<Instant>,
    /// The replica's state per key at the last sample.
    held: BTreeMap<Bytes, Held>,
    /// The machine epoch at the last sample.
    epoch: u64,
    invariants_failed: bool,
    stuck_reported: bool,
}

/// What the driver samples of one key of one replica after every input.
#[derive(Clone, Debug, PartialEq, Default)]
struct Held {
    value: Value,
    cs: Carstamp,
    lc: u32,
    epoch: u64,
    accepted: Option<(Ballot, Tuple)>,
}

/// Limits of the adaptive phase ends: how often to look again, and for how long at most.
const EXTEND_STEP_NS: u64 = 20_000_000;
const LIVENESS_CAP_NS: u64 = 3_000_000_000;
const DRAIN_CAP_NS: u64 = 10_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Safety,
    Liveness,
    Drain,
    Done,
}

/// Counters of one run, besides the history.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RunStats {
    pub net: NetStats,
    pub events: u64,
    /// Writes re-sent by the cores (`RcStats::writes_retransmitted`, crashed nodes included).
    pub retransmissions: u64,
    /// Sums over every replica (crashed ones up to their crash) of the cores' counters.
    pub rounds_retransmitted: u64,
    pub barriers_fast: u64,
    pub barriers_slow: u64,
    pub slow_path_accesses: u64,
    pub paxos_nacks: u64,
    pub epoch_bumps: u64,
    pub end_ns: u64,
}

impl RunStats {
    fn add_core(&mut self, s: &RcStats) {
        self.retransmissions += s.writes_retransmitted;
        self.rounds_retransmitted += s.rounds_retransmitted;
        self.barriers_fast += s.barriers_fast;
        self.barriers_slow += s.barriers_slow;
        self.slow_path_accesses += s.slow_path_accesses;
        self.paxos_nacks += s.paxos_nacks;
        self.epoch_bumps += s.machine_epoch;
    }
}

pub struct Cluster {
    knobs: Knobs,
    now: Instant,
    queue: DeadlineQueue<Event>,
    nodes: Vec<SimNode>,
    net: Network,
    workload: Workload,
    history: History,
    phase: Phase,
    liveness_requested: bool,
    effects: RcEffects,
    stats: RunStats,
    /// Orders the driver's records globally (`History`, "Records that carry a `seq`").
    seq: u64,
    /// Numbers the inputs given to the cores: one input is one atomic step (Kite K-D18).
    steps: u64,
    /// Distinct commits already recorded: `(key, slot, rmw_id, cs, value)`.
    commits_seen: HashSet<(Bytes, u32, RmwId, Carstamp, Value)>,
    /// RMW versions already in `history.creations`, by `(key, cs)`.
    rmw_versions: HashMap<(Bytes, Carstamp), usize>,
    /// `SLOW_RELEASE`s by `(sender, req)`: index in `history.slow_releases`.
    slow_releases: HashMap<(NodeId, u64), usize>,
    /// `RESET_BIT`s already recorded (a broadcast, or a second one, is recorded once).
    reset_bits: HashSet<AcquireId>,
    /// RMW ids some owner has sent (`Workload::rmw_started`), and those first seen in this step.
    rmw_ids: HashSet<RmwId>,
    new_rmw_ids: Vec<RmwId>,
    drain_started: Instant,
}

impl Cluster {
    pub fn new(knobs: Knobs) -> Cluster {
        let streams = Streams::new(knobs.seed);
        let net = Network::new(knobs.net.clone(), streams.net);
        let mut workload = Workload::new(knobs.workload.clone(), knobs.nodes, streams.workload);
        workload.scripted = knobs.script.is_some();
        // Scripts address sessions by client number: there, a session dies with its node.
        workload.failover = !workload.scripted;
        workload.seed_retries(knobs.seed);
        let replicas: Vec<NodeId> = (0..knobs.nodes).map(NodeId).collect();
        let nodes = replicas
            .iter()
            .map(|&id| {
                let mut cfg = RcConfig::new(id, replicas.clone());
                cfg.retransmit_after = Duration::from_micros(knobs.retransmit_after_us);
                cfg.retransmit_max = Duration::from_micros(knobs.retransmit_max_us);
                cfg.round_retransmit = Duration::from_micros(knobs.round_retransmit_us);
                cfg.release_timeout = Duration::from_micros(knobs.release_timeout_us);
                cfg.release_timeout_max = Duration::from_micros(knobs.release_timeout_max_us);
                cfg.backoff_min = Duration::from_micros(knobs.backoff_min_us);
                cfg.backoff_max = Duration::from_micros(knobs.backoff_max_us);
                cfg.seed = knobs.seed.rotate_left(17)
                    ^ (u64::from(id.0) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                cfg.planted_bug = knobs.canary;
                SimNode {
                    id,
                    core: Some(
                        RcReplica::new(cfg).expect("dense ids 0..N form a valid replica set"),
                    ),
                    state: NodeState::Up,
                    clock: knobs.clocks[id.0 as usize],
                    last_local: Instant::ZERO,
                    timer: None,
                    held: BTreeMap::new(),
                    epoch: 0,
                    invariants_failed: false,
                    stuck_reported: false,
                }
            })
            .collect();
        let history = History { nodes: knobs.nodes, ..History::default() };
        Cluster {
            knobs,
            now: Instant::ZERO,
            queue: DeadlineQueue::default(),
            nodes,
            net,
            workload,
            history,
            phase: Phase::Safety,
            liveness_requested: false,
            effects: RcEffects::default(),
            stats: RunStats::default(),
            seq: 0,
            steps: 0,
            commits_seen: HashSet::new(),
            rmw_versions: HashMap::new(),
            slow_releases: HashMap::new(),
            reset_bits: HashSet::new(),
            rmw_ids: HashSet::new(),
            new_rmw_ids: Vec::new(),
            drain_started: Instant::ZERO,
        }
    }

    /// Runs every phase to the end and returns what happened.
    pub fn run(mut self) -> (History, RunStats) {
        for sf in self.knobs.faults.clone() {
            self.queue.push(Instant(sf.at_ns), Event::Fault(sf.fault));
        }
        self.queue.push(Instant(self.knobs.safety_ns), Event::StartLiveness);
        if let Some(script) = &self.knobs.script {
            for (op, s) in script.ops.iter().enumerate() {
                self.queue.push(Instant(s.at_ns), Event::Scripted { op });
            }
        }
        for c in 0..self.workload.clients.len() {
            let (node, input) = self.workload.open(c);
            self.input(node, NodeInput::Client(input));
        }
        while let Some(at) = self.queue.next_deadline() {
            // The queue never goes back in time, so neither does any node's clock.
            assert!(at >= self.now, "event queue went back in time");
            self.now = at;
            let Some(event) = self.queue.pop_due(at) else { break };
            self.stats.events += 1;
            self.handle(event);
            if self.phase == Phase::Done {
                break;
            }
            if self.stats.events >= EVENT_BUDGET {
                let what =
                    format!("event budget of {EVENT_BUDGET} exhausted: the run does not quiesce");
                self.history.anomalies.push(Anomaly { at: self.now, node: None, what });
                break;
            }
        }
        self.finish()
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Deliver { from, to, msg } => self.deliver(from, to, msg),
            Event::Timer { node } => {
                let n = &mut self.nodes[node.0 as usize];
                if n.timer == Some(self.now) && matches!(n.state, NodeState::Up) {
                    n.timer = None;
                    self.step(node, NodeInput::Tick);
                }
            }
            Event::Issue { client } => self.issue(client),
            Event::Resend { client, op } => {
                self.workload.backoff_over(client, op, self.now, &mut self.history);
                self.flush_workload();
            }
            Event::Scripted { op } => {
                let s = self.knobs.script.as_ref().expect("scripted events come from a script").ops
                    [op]
                    .clone();
                if let Some((node, input)) = self.workload.issue_scripted(
                    s.client,
                    s.kind,
                    Bytes::from_static(s.key.as_bytes()),
                    self.now,
                    &mut self.history,
                ) {
                    self.input(node, NodeInput::Client(input));
                }
            }
            Event::Fault(fault) => self.fault(fault),
            Event::Heal { links } => self.net.heal_links(&links),
            Event::Resume { node } => self.resume(node),
            Event::StartLiveness => self.start_liveness(),
            Event::StopClients => {
                // Kite §7 prop 9: every live session must show progress after healing; a
                // session blocked behind a barrier time-out or a Paxos back-off gets more time.
                let heal = self.history.heal_at.unwrap_or(self.now);
                if !self.workload.all_progressed()
                    && self.now.0 < heal.0 + self.knobs.liveness_ns + LIVENESS_CAP_NS
                {
                    self.queue
                        .push(self.now + Duration::from_nanos(EXTEND_STEP_NS), Event::StopClients);
                    return;
                }
                self.phase = Phase::Drain;
                self.workload.issuing = false;
                self.drain_started = self.now;
                self.queue.push(self.now + Duration::from_nanos(self.knobs.drain_ns), Event::End);
            }
            Event::End => {
                // Operations still in flight at live nodes get more time, up to a cap; the
                // completion checker reports whatever is left.
                let busy = self.workload.in_flight_live() > 0;
                if busy && self.now.0 < self.drain_started.0 + self.knobs.drain_ns + DRAIN_CAP_NS {
                    self.queue.push(self.now + Duration::from_nanos(EXTEND_STEP_NS), Event::End);
                    return;
                }
                self.phase = Phase::Done;
            }
        }
    }

    fn deliver(&mut self, from: NodeId, to: NodeId, msg: PeerMessage) {
        if matches!(self.nodes[to.0 as usize].state, NodeState::Crashed) {
            self.net.stats.dropped_dead += 1;
        } else if self.net.admits(from, to) {
            self.net.stats.delivered += 1;
            self.input(to, NodeInput::Peer { from, msg });
        }
    }

    fn issue(&mut self, client: usize) {
        self.workload.issue_due(client);
        if let Some((node, input)) = self.workload.issue(client, self.now, &mut self.history) {
            self.input(node, NodeInput::Client(input));
        }
        self.schedule_issue(client);
        let cap_reached = self.history.ops.len() as u64 >= self.knobs.safety_max_ops;
        if self.phase == Phase::Safety && cap_reached && !self.liveness_requested {
            self.liveness_requested = true;
            self.queue.push(self.now, Event::StartLiveness);
        }
    }

    fn schedule_issue(&mut self, client: usize) {
        if let Some(at) = self.workload.next_issue(client, self.now) {
            self.queue.push(at, Event::Issue { client });
        }
    }

    /// Faults strike only during the safety phase; a heal or resume scheduled later is harmless.
    fn fault(&mut self, fault: Fault) {
        if self.phase != Phase::Safety {
            return;
        }
        match fault {
            Fault::Partition { links, heal_ns, .. } => {
                self.net.cut_links(&links);
                self.queue.push(Instant(heal_ns), Event::Heal { links });
            }
            Fault::Pause { node, resume_ns } => {
                let n = &mut self.nodes[node.0 as usize];
                if matches!(n.state, NodeState::Up) {
                    n.state = NodeState::Paused { inbox: VecDeque::new() };
                    n.timer = None; // ticks wait too; `resume` re-arms
                    self.queue.push(Instant(resume_ns), Event::Resume { node });
                }
            }
            Fault::Crash { node } => self.crash(node),
        }
    }

    fn crash(&mut self, node: NodeId) {
        let n = &mut self.nodes[node.0 as usize];
        if let Some(core) = n.core.take() {
            self.stats.add_core(&core.stats());
        }
        n.state = NodeState::Crashed;
        n.timer = None;
        self.workload.node_crashed(node, &mut self.history);
        self.flush_workload();
    }

    /// Sends what the workload sent on its own (sessions re-opened, re-sends) and arms its
    /// back-offs.
    fn flush_workload(&mut self) {
        for (at, client, op) in std::mem::take(&mut self.workload.backoffs) {
            self.queue.push(at, Event::Resend { client, op });
        }
        for (node, input) in std::mem::take(&mut self.workload.outbox) {
            self.input(node, NodeInput::Client(input));
        }
    }

    /// A paused node processes what queued up, in arrival order (Kite §6, wake-up step 3).
    fn resume(&mut self, node: NodeId) {
        let n = &mut self.nodes[node.0 as usize];
        let NodeState::Paused { inbox } = std::mem::replace(&mut n.state, NodeState::Up) else {
            return;
        };
        for input in inbox {
            self.step(node, input);
        }
        self.rearm(node, false);
    }

    fn start_liveness(&mut self) {
        if self.phase != Phase::Safety {
            return;
        }
        self.phase = Phase::Liveness;
        self.history.heal_at = Some(self.now);
        self.workload.heal_at = Some(self.now);
        self.net.calm();
        self.workload.read_only = self.knobs.workload.read_only_after_heal;
        for i in 0..self.nodes.len() {
            self.resume(NodeId(i as u32));
        }
        self.queue
            .push(self.now + Duration::from_nanos(self.knobs.liveness_ns), Event::StopClients);
    }

    /// Hands an input to a node: processed now if it is up, queued if paused, lost if crashed.
    fn input(&mut self, node: NodeId, input: NodeInput) {
        match &mut self.nodes[node.0 as usize].state {
            NodeState::Up => self.step(node, input),
            NodeState::Paused { inbox } => inbox.push_back(input),
            NodeState::Crashed => {}
        }
    }

    /// One input to one core, then everything the contract asks of the driver after it.
    fn step(&mut self, node: NodeId, input: NodeInput) {
        let now = self.now;
        let n = &mut self.nodes[node.0 as usize];
        let Some(core) = n.core.as_mut() else { return };
        let local = n.clock.local(now).max(n.last_local);
        n.last_local = local;
        let is_tick = matches!(input, NodeInput::Tick);
        self.steps += 1;
        let handled = guarded(|| match input {
            NodeInput::Client(req) => core.on_client_request(local, req),
            NodeInput::Peer { from, msg } => core.on_message(local, from, msg),
            NodeInput::Tick => core.on_tick(local),
        });
        if let Err(panic) = handled {
            // A panicking input handler leaves the core torn: treat it as a crash, loudly.
            let what = format!("core panicked while handling an input: {panic}");
            self.history.anomalies.push(Anomaly { at: now, node: Some(node), what });
            return self.crash(node);
        }
        if !n.invariants_failed {
            if let Err(panic) = guarded(|| core.check_invariants()) {
                // Reported once; the node keeps running so the checkers see the consequences.
                n.invariants_failed = true;
                let what = format!("check_invariants failed: {panic}");
                self.history.anomalies.push(Anomaly { at: now, node: Some(node), what });
            }
        }
        let mut effects = std::mem::take(&mut self.effects);
        core.poll_effects(&mut effects);
        // The record order of one step (`History`): the core's events, the sampled state, sends.
        self.record_events(node, &mut effects);
        self.sample(node);
        self.execute(node, &mut effects);
        self.effects = effects;
        self.rearm(node, is_tick);
        // What the replies made the clients send (re-opened sessions, re-sends), after this
        // step is complete.
        self.flush_workload();
    }

    /// Records the core's events of this step for the checkers of Kite §7 inv. 14 - 17, in the
    /// order it emitted them; `VersionCreated` stays in `effects` for `execute` (a commit sent
    /// in this step creates an RMW's version before its owner's event reports it).
    fn record_events(&mut self, node: NodeId, effects: &mut RcEffects) {
        let (at, step) = (self.now, self.steps);
        for event in std::mem::take(&mut effects.event) {
            if matches!(event, RcEvent::VersionCreated { .. }) {
                effects.event.push(event);
                continue;
            }
            let seq = next_seq(&mut self.seq);
            let h = &mut self.history;
            match event {
                RcEvent::VersionCreated { .. } => unreachable!("kept for `execute` above"),
                RcEvent::BarrierPassed { session, key, round, prior, path } => {
                    h.barriers.push(BarrierSeen { seq, at, node, session, key, round, prior, path })
                }
                RcEvent::DbitChanged { peer, change } => {
                    h.dbits.push(DbitSeen { seq, at, node, peer, change })
                }
                RcEvent::SelfDelinquent { change } => {
                    h.self_delinquency.push(SelfDelinquentSeen { seq, step, at, node, change })
                }
                RcEvent::EpochBumped { acq, epoch } => {
                    h.epoch_bumps.push(EpochBump { seq, step, at, node, acq, epoch })
                }
                RcEvent::Registered { id, prev } => {
                    h.registrations.push(Registration { seq, at, node, id, prev })
                }
                RcEvent::Promised { key, slot, ballot } => {
                    h.promises.push(PromiseSeen { seq, at, node, key, slot, ballot })
                }
            }
        }
    }

    /// Records every key whose `(value, cs)` or `lc` changed at this replica (for the G1 and
    /// commit-floor checkers, Kite §7 inv. 12), every new accepted tuple (inv. 13) and machine
    /// epoch change; reports an epoch going back (inv. 11) as an anomaly. Keys are visited in
    /// order, so the history is deterministic.
    fn sample(&mut self, node: NodeId) {
        let n = &mut self.nodes[node.0 as usize];
        let Some(core) = n.core.as_ref() else { return };
        let mut changed: Vec<(Bytes, Held)> = core
            .versions()
            .filter(|(key, ks)| {
                !matches!(n.held.get(*key), Some(h) if h.cs == ks.cs && h.lc == ks.lc && h.epoch == ks.epoch && h.accepted == ks.accepted && h.value == ks.value)
            })
            .map(|(key, ks)| {
                let held =
                    Held { value: ks.value.clone(), cs: ks.cs, lc: ks.lc, epoch: ks.epoch, accepted: ks.accepted.clone() };
                (key.clone(), held)
            })
            .collect();
        if core.versions().count() < n.held.len() {
            // A key vanished: report it as dropping back to the initial version.
            let vanished: Vec<Bytes> = n
                .held
                .keys()
                .filter(|k| core.versions().all(|(key, _)| key != *k))
                .cloned()
                .collect();
            changed.extend(vanished.into_iter().map(|k| (k, Held::default())));
        }
        changed.sort_by(|a, b| a.0.cmp(&b.0));
        let epoch = core.stats().machine_epoch;
        if epoch != n.epoch {
            if epoch < n.epoch {
                let what = format!(
                    "machine epoch went back from {} to {epoch} (Kite §7 inv. 11)",
                    n.epoch
                );
                self.history.anomalies.push(Anomaly { at: self.now, node: Some(node), what });
            }
            n.epoch = epoch;
            let seq = next_seq(&mut self.seq);
            self.history.epochs.push(EpochChange {
                seq,
                step: self.steps,
                at: self.now,
                node,
                epoch,
            });
        }
        for (key, new) in changed {
            let old = n.held.insert(key.clone(), new.clone()).unwrap_or_default();
            if new.epoch < old.epoch {
                let what = format!(
                    "key {:?} epoch went back from {} to {} (Kite §7 inv. 11)",
                    key, old.epoch, new.epoch
                );
                self.history.anomalies.push(Anomaly { at: self.now, node: Some(node), what });
            }
            if (&new.value, new.cs, new.lc) != (&old.value, old.cs, old.lc) {
                let (value, cs, lc) = (new.value.clone(), new.cs, new.lc);
                let seq = next_seq(&mut self.seq);
                self.history.replica_changes.push(ReplicaChange {
                    seq,
                    at: self.now,
                    node,
                    key: key.clone(),
                    value,
                    cs,
                    lc,
                });
            }
            if let Some((ballot, t)) = &new.accepted {
                if new.accepted != old.accepted || new.lc != old.lc {
                    let seq = next_seq(&mut self.seq);
                    self.history.acceptances.push(Acceptance {
                        seq,
                        at: self.now,
                        node,
                        key,
                        slot: new.lc + 1,
                        ballot: *ballot,
                        rmw_id: t.rmw_id,
                        base: t.base,
                        value: t.value.clone(),
                    });
                }
            }
        }
    }

    /// Records a message a node sends, for the checkers: commits (and the RMW versions they
    /// create), slow releases and their acks.
    fn observe_send(&mut self, from: NodeId, to: NodeId, msg: &PeerMessage) {
        let rmw_id = match msg {
            PeerMessage::Propose(p) => Some(p.rmw_id),
            PeerMessage::Accept(a) => Some(a.tuple.rmw_id),
            PeerMessage::Commit(c) => Some(c.rmw_id),
            _ => None,
        };
        if let Some(id) = rmw_id.filter(|id| id.session.node == from) {
            if self.rmw_ids.insert(id) {
                self.new_rmw_ids.push(id);
            }
        }
        match msg {
            PeerMessage::Commit(c) => {
                let id = (c.key.clone(), c.slot, c.rmw_id, c.cs, c.value.clone());
                if self.commits_seen.contains(&id) {
                    return;
                }
                self.commits_seen.insert(id);
                let seen = CommitSeen {
                    seq: next_seq(&mut self.seq),
                    at: self.now,
                    from,
                    key: c.key.clone(),
                    slot: c.slot,
                    rmw_id: c.rmw_id,
                    value: c.value.clone(),
                    cs: c.cs,
                };
                if seen.is_real() && seen.slot > 0 {
                    let session = c.rmw_id.session;
                    self.record_rmw_version(Creation {
                        at: self.now,
                        node: session.node,
                        session,
                        key: c.key.clone(),
                        cs: c.cs,
                        value: c.value.clone(),
                        rmw_id: Some(c.rmw_id),
                    });
                }
                self.history.commits.push(seen);
            }
            PeerMessage::SlowRelease { req, dm }
                if !self.slow_releases.contains_key(&(from, *req)) =>
            {
                self.slow_releases.insert((from, *req), self.history.slow_releases.len());
                let sr = SlowReleaseSeen {
                    seq: next_seq(&mut self.seq),
                    at: self.now,
                    from,
                    req: *req,
                    dm: *dm,
                    acks: Vec::new(),
                };
                self.history.slow_releases.push(sr);
            }
            PeerMessage::SlowReleaseAck { req } => {
                let Some(&i) = self.slow_releases.get(&(to, *req)) else { return };
                if self.history.slow_releases[i].acks.iter().all(|a| a.node != from) {
                    let ack =
                        SlowReleaseAck { seq: next_seq(&mut self.seq), at: self.now, node: from };
                    self.history.slow_releases[i].acks.push(ack);
                }
            }
            PeerMessage::ResetBit { acq } if self.reset_bits.insert(*acq) => {
                let reset =
                    ResetBitSeen { seq: next_seq(&mut self.seq), at: self.now, from, acq: *acq };
                self.history.reset_bits.push(reset);
            }
            _ => {}
        }
    }

    /// An RMW version is recorded once, from its first real commit or its owner's event,
    /// whichever comes first; a second report that disagrees is kept too, so that the
    /// uniqueness checker sees the clash.
    fn record_rmw_version(&mut self, c: Creation) {
        let id = (c.key.clone(), c.cs);
        if let Some(&i) = self.rmw_versions.get(&id) {
            let first = &mut self.history.creations[i];
            if first.value == c.value && first.session == c.session {
                first.rmw_id = first.rmw_id.or(c.rmw_id);
                return;
            }
        } else {
            self.rmw_versions.insert(id, self.history.creations.len());
        }
        self.history.creations.push(c);
    }

    fn execute(&mut self, node: NodeId, effects: &mut RcEffects) {
        // Sends first: a commit creates its RMW version before the owner's event reports it.
        for (to, msg) in &effects.send {
            self.observe_send(node, *to, msg);
        }
        // `record_events` left only the version creations.
        for event in effects.event.drain(..) {
            if let RcEvent::VersionCreated { session, key, cs, value } = event {
                let c = Creation { at: self.now, node, session, key, cs, value, rmw_id: None };
                if cs.pno > 0 {
                    self.record_rmw_version(c);
                } else {
                    self.history.creations.push(c);
                }
            }
        }
        let mut replied = Vec::new();
        for reply in effects.reply.drain(..) {
            match self.workload.on_reply(self.now, reply, &mut self.history) {
                Ok(client) => replied.push(client),
                Err(what) => {
                    self.history.anomalies.push(Anomaly { at: self.now, node: Some(node), what })
                }
            }
        }
        // After the replies: an RMW starts only once every earlier request of its session was
        // answered, possibly in this very step.
        for id in std::mem::take(&mut self.new_rmw_ids) {
            if let Err(what) = self.workload.rmw_started(id, &mut self.history) {
                self.history.anomalies.push(Anomaly { at: self.now, node: Some(node), what });
            }
        }
        for client in replied {
            self.schedule_issue(client);
        }
        for (to, msg) in effects.send.drain(..) {
            if to == node || to.0 >= self.knobs.nodes {
                let what = format!("core sent a message to {to}, which is not a peer");
                self.history.anomalies.push(Anomaly { at: self.now, node: Some(node), what });
                continue;
            }
            if let Some(rule) = self.knobs.script.as_ref().and_then(|s| s.drop) {
                if self.now.0 < rule.until_ns && (rule.drops)(node, to, &msg) {
                    self.net.stats.dropped_rule += 1;
                    continue;
                }
            }
            for at in self.net.transmit(self.now, node, to) {
                self.queue.push(at, Event::Deliver { from: node, to, msg: msg.clone() });
            }
        }
        if !effects.persist.is_empty() || !effects.send_after_persist.is_empty() {
            // The rc engine is in memory (Kite §6); a simulated disk arrives with the first
            // core that persists.
            effects.persist.clear();
            effects.send_after_persist.clear();
            let what = "core asked to persist, which the simulator does not model yet".to_string();
            self.history.anomalies.push(Anomaly { at: self.now, node: Some(node), what });
        }
    }

    /// Arms the node's single timer at the core's `poll_timeout`, mapped through its clock.
    fn rearm(&mut self, node: NodeId, after_tick: bool) {
        let now = self.now;
        let n = &mut self.nodes[node.0 as usize];
        if !matches!(n.state, NodeState::Up) {
            return;
        }
        let Some(deadline) = n.core.as_ref().and_then(|c| c.poll_timeout()) else {
            n.timer = None;
            return;
        };
        let mut at = n.clock.global_at(deadline).max(now);
        if after_tick && at <= now {
            // A tick at the deadline must consume it (`Node::on_tick`); otherwise the run would
            // spin at one instant.
            if !n.stuck_reported {
                n.stuck_reported = true;
                let what = format!(
                    "poll_timeout still {deadline:?} after a tick at local {:?}",
                    n.last_local
                );
                self.history.anomalies.push(Anomaly { at: now, node: Some(node), what });
            }
            at = now + Duration::from_millis(1);
        }
        if n.timer != Some(at) {
            n.timer = Some(at);
            self.queue.push(at, Event::Timer { node });
        }
    }

    fn finish(mut self) -> (History, RunStats) {
        let mut fin = FinalState::default();
        for n in &self.nodes {
            match &n.core {
                Some(core) => {
                    fin.live.push(n.id);
                    self.stats.add_core(&core.stats());
                    let held = core
                        .versions()
                        .map(|(k, ks)| (k.clone(), (ks.value.clone(), ks.cs)))
                        .collect();
                    fin.replicas.insert(n.id, held);
                    fin.pending_writes.insert(n.id, core.stats().pending_writes);
                }
                None => fin.crashed.push(n.id),
            }
        }
        self.history.final_state = Some(fin);
        self.stats.net = self.net.stats;
        self.stats.end_ns = self.now.0;
        (self.history, self.stats)
    }
}
