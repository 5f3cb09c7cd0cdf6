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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use strata_host::Audit;
use strata_rc::{RcEvent, RcInput, RcStats};
use strata_wire::peer::{PeerMessage, Tuple};
use strata_wire::{AcquireId, Ballot, Carstamp, Instant, NodeId, RmwId};

use crate::history::{
    Acceptance, Anomaly, BarrierSeen, CommitSeen, Creation, DbitSeen, EpochBump, EpochChange,
    FinalState, History, PromiseSeen, Registration, ReplicaChange, ResetBitSeen,
    SelfDelinquentSeen, SlowReleaseAck, SlowReleaseSeen, Value,
};
use crate::host::cluster::{ClusterOptions, HostCluster, HostNet, Step, Stepped};
use crate::knobs::{Fault, Knobs, Streams};
use crate::net::NetStats;
use crate::workload::{Workload, SIM_LEASE_TERM};

/// The next number of the driver's global record order (`History`, "Records that carry a
/// `seq`"); a free function, so that it borrows only the counter.
fn next_seq(seq: &mut u64) -> u64 {
    *seq += 1;
    *seq
}

/// A run that processes this many events is stuck in a loop; the run stops and says so.
const EVENT_BUDGET: u64 = 20_000_000;

/// The harness's own events, on the cluster's queue (`HostCluster::schedule`).
#[derive(Debug)]
enum Event {
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

/// What the harness keeps of one node besides its host: the last sample of its replica.
#[derive(Default)]
struct Seen {
    /// The replica's state per key at the last sample.
    held: BTreeMap<Bytes, Held>,
    /// The machine epoch at the last sample.
    epoch: u64,
    failure_reported: bool,
    stuck_reported: bool,
    crashed: bool,
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
    /// The nodes, the network and the one event loop (`crate::host::cluster`).
    hosts: HostCluster,
    seen: Vec<Seen>,
    /// The harness's events on the cluster's queue, by token.
    events: BTreeMap<u64, Event>,
    next_token: u64,
    workload: Workload,
    history: History,
    phase: Phase,
    liveness_requested: bool,
    stats: RunStats,
    /// Orders the driver's records globally (`History`, "Records that carry a `seq`").
    seq: u64,
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
        let mut workload = Workload::new(knobs.workload.clone(), knobs.nodes, streams.workload);
        workload.scripted = knobs.script.is_some();
        // Scripts address sessions by client number: there, a session dies with its node.
        workload.failover = !workload.scripted;
        workload.seed_retries(knobs.seed);
        let n = knobs.nodes as usize;
        let mut net = HostNet::matrix(vec![vec![0; n]; n], 0, 0.0, 0, 0.0);
        net.links = knobs.net.clone();
        let k = knobs.clone();
        let tune = move |i: usize, cfg: &mut strata_host::HostConfig| {
            let rc = &mut cfg.rc;
            rc.retransmit_after = Duration::from_micros(k.retransmit_after_us);
            rc.retransmit_max = Duration::from_micros(k.retransmit_max_us);
            rc.round_retransmit = Duration::from_micros(k.round_retransmit_us);
            rc.release_timeout = Duration::from_micros(k.release_timeout_us);
            rc.release_timeout_max = Duration::from_micros(k.release_timeout_max_us);
            rc.backoff_min = Duration::from_micros(k.backoff_min_us);
            rc.backoff_max = Duration::from_micros(k.backoff_max_us);
            rc.seed = k.seed.rotate_left(17) ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            rc.planted_bug = k.canary;
        };
        let mut hosts = HostCluster::with(ClusterOptions {
            nodes: n,
            net,
            seed: knobs.seed ^ 0x686f_7374,
            net_prng: Some(streams.net),
            clocks: Some(knobs.clocks.clone()),
            start: Instant::ZERO,
            lease_term: SIM_LEASE_TERM,
            shard_rate_limit: None,
            observe: true,
            tune: Some(Box::new(tune)),
            catalog: Vec::new(),
        });
        if let Some(rule) = knobs.script.as_ref().and_then(|s| s.drop) {
            hosts.drop_rule = Some((Instant(rule.until_ns), rule.drops));
        }
        let history = History { nodes: knobs.nodes, ..History::default() };
        Cluster {
            seen: (0..n).map(|_| Seen::default()).collect(),
            knobs,
            hosts,
            events: BTreeMap::new(),
            next_token: 0,
            workload,
            history,
            phase: Phase::Safety,
            liveness_requested: false,
            stats: RunStats::default(),
            seq: 0,
            commits_seen: HashSet::new(),
            rmw_versions: HashMap::new(),
            slow_releases: HashMap::new(),
            reset_bits: HashSet::new(),
            rmw_ids: HashSet::new(),
            new_rmw_ids: Vec::new(),
            drain_started: Instant::ZERO,
        }
    }

    fn now(&self) -> Instant {
        self.hosts.now
    }

    /// Puts `event` on the cluster's queue at `at`.
    fn at(&mut self, at: Instant, event: Event) {
        self.next_token += 1;
        self.events.insert(self.next_token, event);
        self.hosts.schedule(at, self.next_token);
    }

    /// Runs every phase to the end and returns what happened.
    pub fn run(mut self) -> (History, RunStats) {
        for sf in self.knobs.faults.clone() {
            self.at(Instant(sf.at_ns), Event::Fault(sf.fault));
        }
        self.at(Instant(self.knobs.safety_ns), Event::StartLiveness);
        if let Some(script) = &self.knobs.script {
            let due: Vec<u64> = script.ops.iter().map(|s| s.at_ns).collect();
            for (op, at_ns) in due.into_iter().enumerate() {
                self.at(Instant(at_ns), Event::Scripted { op });
            }
        }
        for c in 0..self.workload.clients.len() {
            let (node, input) = self.workload.open(c);
            self.input(node, input);
        }
        while let Some(at) = self.hosts.next_at() {
            // The queue never goes back in time, so neither does any node's clock.
            assert!(at >= self.now(), "event queue went back in time");
            let Some(stepped) = self.hosts.next(at) else { break };
            self.stats.events += 1;
            match stepped {
                Stepped::Quiet => {}
                Stepped::Node(step) => self.after_step(step),
                Stepped::Harness(token) => {
                    let event = self.events.remove(&token).expect("each token is scheduled once");
                    self.handle(event);
                }
            }
            if self.phase == Phase::Done {
                break;
            }
            if self.stats.events >= EVENT_BUDGET {
                let what =
                    format!("event budget of {EVENT_BUDGET} exhausted: the run does not quiesce");
                self.history.anomalies.push(Anomaly { at: self.now(), node: None, what });
                break;
            }
        }
        self.finish()
    }

    fn handle(&mut self, event: Event) {
        let now = self.now();
        match event {
            Event::Issue { client } => self.issue(client),
            Event::Resend { client, op } => {
                self.workload.backoff_over(client, op, now, &mut self.history);
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
                    now,
                    &mut self.history,
                ) {
                    self.input(node, input);
                }
            }
            Event::Fault(fault) => self.fault(fault),
            Event::Heal { links } => self.hosts.net.heal_links(&links),
            Event::Resume { node } => self.resume(node),
            Event::StartLiveness => self.start_liveness(),
            Event::StopClients => {
                // Kite §7 prop 9: every live session must show progress after healing; a
                // session blocked behind a barrier time-out or a Paxos back-off gets more time.
                let heal = self.history.heal_at.unwrap_or(now);
                if !self.workload.all_progressed()
                    && now.0 < heal.0 + self.knobs.liveness_ns + LIVENESS_CAP_NS
                {
                    self.at(now + Duration::from_nanos(EXTEND_STEP_NS), Event::StopClients);
                    return;
                }
                self.phase = Phase::Drain;
                self.workload.issuing = false;
                self.drain_started = now;
                self.at(now + Duration::from_nanos(self.knobs.drain_ns), Event::End);
            }
            Event::End => {
                // Operations still in flight at live nodes get more time, up to a cap; the
                // completion checker reports whatever is left.
                let busy = self.workload.in_flight_live() > 0;
                if busy && now.0 < self.drain_started.0 + self.knobs.drain_ns + DRAIN_CAP_NS {
                    self.at(now + Duration::from_nanos(EXTEND_STEP_NS), Event::End);
                    return;
                }
                self.phase = Phase::Done;
            }
        }
    }

    fn issue(&mut self, client: usize) {
        self.workload.issue_due(client);
        if let Some((node, input)) = self.workload.issue(client, self.now(), &mut self.history) {
            self.input(node, input);
        }
        self.schedule_issue(client);
        let cap_reached = self.history.ops.len() as u64 >= self.knobs.safety_max_ops;
        if self.phase == Phase::Safety && cap_reached && !self.liveness_requested {
            self.liveness_requested = true;
            self.at(self.now(), Event::StartLiveness);
        }
    }

    fn schedule_issue(&mut self, client: usize) {
        if let Some(at) = self.workload.next_issue(client, self.now()) {
            self.at(at, Event::Issue { client });
        }
    }

    /// Faults strike only during the safety phase; a heal or resume scheduled later is harmless.
    fn fault(&mut self, fault: Fault) {
        if self.phase != Phase::Safety {
            return;
        }
        match fault {
            Fault::Partition { links, heal_ns, .. } => {
                self.hosts.net.cut_links(&links);
                self.at(Instant(heal_ns), Event::Heal { links });
            }
            Fault::Pause { node, resume_ns } => {
                let i = node.0 as usize;
                if self.hosts.is_up(i) && !self.hosts.is_paused(i) {
                    self.hosts.pause(i);
                    self.at(Instant(resume_ns), Event::Resume { node });
                }
            }
            Fault::Crash { node } => self.crash(node),
        }
    }

    fn crash(&mut self, node: NodeId) {
        let i = node.0 as usize;
        if let Some(host) = &self.hosts.nodes[i].host {
            self.stats.add_core(&host.rc().stats());
        }
        self.hosts.crash(i);
        self.crashed(node);
    }

    /// The node is gone for good (crashed by the schedule, or by a panic).
    fn crashed(&mut self, node: NodeId) {
        let seen = &mut self.seen[node.0 as usize];
        if std::mem::replace(&mut seen.crashed, true) {
            return;
        }
        self.workload.node_crashed(node, &mut self.history);
        self.flush_workload();
    }

    /// Sends what the workload sent on its own (sessions re-opened, re-sends) and arms its
    /// back-offs.
    fn flush_workload(&mut self) {
        for (at, client, op) in std::mem::take(&mut self.workload.backoffs) {
            self.at(at, Event::Resend { client, op });
        }
        for (node, input) in std::mem::take(&mut self.workload.outbox) {
            self.input(node, input);
        }
    }

    /// A paused node processes what queued up, in arrival order (Kite §6, wake-up step 3).
    fn resume(&mut self, node: NodeId) {
        let mut backlog = self.hosts.resume(node.0 as usize);
        // One input at a time, each recorded before the next runs.
        while let Some(step) = self.hosts.replay(&mut backlog) {
            if let Some(step) = step {
                self.after_step(step);
            }
        }
    }

    fn start_liveness(&mut self) {
        if self.phase != Phase::Safety {
            return;
        }
        let now = self.now();
        self.phase = Phase::Liveness;
        self.history.heal_at = Some(now);
        self.workload.heal_at = Some(now);
        self.hosts.calm();
        self.workload.read_only = self.knobs.workload.read_only_after_heal;
        for i in 0..self.knobs.nodes {
            self.resume(NodeId(i));
        }
        self.at(now + Duration::from_nanos(self.knobs.liveness_ns), Event::StopClients);
    }

    /// Hands a client's input to a node: processed now if it is up, queued if paused, lost
    /// if crashed.
    fn input(&mut self, node: NodeId, input: RcInput) {
        let i = node.0 as usize;
        let step = match input {
            RcInput::Client { route, req } => self.hosts.client_input(i, route, req),
            RcInput::Disconnected { route } => self.hosts.disconnect(i, route),
        };
        if let Some(step) = step {
            self.after_step(step);
        }
    }

    /// Everything the contract asks of the driver after one input to one host: the record
    /// order of one step (`History`) is the core's events, the sampled state, the sends.
    fn after_step(&mut self, step: Step) {
        let node = NodeId(step.node as u32);
        self.report_failures(node);
        // The log shards' events (the `__leases` table's) are the ORCA harness's business.
        let mut events: Vec<RcEvent> = step
            .audit
            .into_iter()
            .filter_map(|a| match a {
                Audit::Rc(e) => Some(e),
                Audit::Log { .. } => None,
            })
            .collect();
        self.record_events(node, &mut events);
        self.sample(node);
        self.observe(node, &step.sends, events, step.replies);
        // What the replies made the clients send (re-opened sessions, re-sends), after this
        // step is complete.
        self.flush_workload();
    }

    /// A host that panicked (crashed), broke an invariant (reported once; it keeps running so
    /// the checkers see the consequences) or whose timer would not move past a tick.
    fn report_failures(&mut self, node: NodeId) {
        let i = node.0 as usize;
        let now = self.now();
        let n = &self.hosts.nodes[i];
        if let Some(f) = &n.failure {
            if !std::mem::replace(&mut self.seen[i].failure_reported, true) {
                let what = f.clone();
                self.history.anomalies.push(Anomaly { at: now, node: Some(node), what });
            }
        }
        if n.host.is_none() {
            self.crashed(node);
        }
        for (j, at) in std::mem::take(&mut self.hosts.stuck) {
            if !std::mem::replace(&mut self.seen[j].stuck_reported, true) {
                let what = format!("poll_timeout did not move past a tick at {at:?}");
                let node = Some(NodeId(j as u32));
                self.history.anomalies.push(Anomaly { at, node, what });
            }
        }
    }

    /// Records the core's events of this step for the checkers of Kite §7 inv. 14 - 17, in the
    /// order it emitted them; `VersionCreated` stays in `effects` for `execute` (a commit sent
    /// in this step creates an RMW's version before its owner's event reports it).
    fn record_events(&mut self, node: NodeId, events: &mut Vec<RcEvent>) {
        let (at, step) = (self.now(), self.hosts.inputs);
        for event in std::mem::take(events) {
            if matches!(event, RcEvent::VersionCreated { .. }) {
                events.push(event);
                continue;
            }
            let seq = next_seq(&mut self.seq);
            let h = &mut self.history;
            match event {
                RcEvent::VersionCreated { .. } => unreachable!("kept for `observe` above"),
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
        let now = self.now();
        let step = self.hosts.inputs;
        let n = &mut self.seen[node.0 as usize];
        let Some(host) = self.hosts.nodes[node.0 as usize].host.as_ref() else { return };
        let core = host.rc();
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
                self.history.anomalies.push(Anomaly { at: now, node: Some(node), what });
            }
            n.epoch = epoch;
            let seq = next_seq(&mut self.seq);
            self.history.epochs.push(EpochChange { seq, step, at: now, node, epoch });
        }
        for (key, new) in changed {
            let old = n.held.insert(key.clone(), new.clone()).unwrap_or_default();
            if new.epoch < old.epoch {
                let what = format!(
                    "key {:?} epoch went back from {} to {} (Kite §7 inv. 11)",
                    key, old.epoch, new.epoch
                );
                self.history.anomalies.push(Anomaly { at: now, node: Some(node), what });
            }
            if (&new.value, new.cs, new.lc) != (&old.value, old.cs, old.lc) {
                let (value, cs, lc) = (new.value.clone(), new.cs, new.lc);
                let seq = next_seq(&mut self.seq);
                self.history.replica_changes.push(ReplicaChange {
                    seq,
                    at: now,
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
                        at: now,
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
                    at: self.now(),
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
                        at: self.now(),
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
                    at: self.now(),
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
                        SlowReleaseAck { seq: next_seq(&mut self.seq), at: self.now(), node: from };
                    self.history.slow_releases[i].acks.push(ack);
                }
            }
            PeerMessage::ResetBit { acq } if self.reset_bits.insert(*acq) => {
                let reset =
                    ResetBitSeen { seq: next_seq(&mut self.seq), at: self.now(), from, acq: *acq };
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

    /// What the step sent and replied, in the order the checkers need: the sends (a commit
    /// creates its RMW version before the owner's event reports it), the version creations,
    /// the replies to the workload, then the RMWs that started.
    fn observe(
        &mut self,
        node: NodeId,
        sends: &[(NodeId, PeerMessage)],
        events: Vec<RcEvent>,
        replies: Vec<(strata_core::Route, strata_wire::client::ClientResponse)>,
    ) {
        let now = self.now();
        for (to, msg) in sends {
            self.observe_send(node, *to, msg);
        }
        // `record_events` left only the version creations.
        for event in events {
            if let RcEvent::VersionCreated { session, key, cs, value } = event {
                let c = Creation { at: now, node, session, key, cs, value, rmw_id: None };
                if cs.pno > 0 {
                    self.record_rmw_version(c);
                } else {
                    self.history.creations.push(c);
                }
            }
        }
        let mut replied = Vec::new();
        for (route, resp) in replies {
            let reply = strata_rc::RcReply { route, resp };
            match self.workload.on_reply(now, reply, &mut self.history) {
                Ok(client) => replied.push(client),
                Err(what) => {
                    self.history.anomalies.push(Anomaly { at: now, node: Some(node), what })
                }
            }
        }
        // After the replies: an RMW starts only once every earlier request of its session was
        // answered, possibly in this very step.
        for id in std::mem::take(&mut self.new_rmw_ids) {
            if let Err(what) = self.workload.rmw_started(id, &mut self.history) {
                self.history.anomalies.push(Anomaly { at: now, node: Some(node), what });
            }
        }
        for client in replied {
            self.schedule_issue(client);
        }
    }

    fn finish(mut self) -> (History, RunStats) {
        let mut fin = FinalState::default();
        for (i, n) in self.hosts.nodes.iter().enumerate() {
            let id = NodeId(i as u32);
            match &n.host {
                Some(host) => {
                    let core = host.rc();
                    fin.live.push(id);
                    self.stats.add_core(&core.stats());
                    let held = core
                        .versions()
                        .map(|(k, ks)| (k.clone(), (ks.value.clone(), ks.cs)))
                        .collect();
                    fin.replicas.insert(id, held);
                    fin.pending_writes.insert(id, core.stats().pending_writes);
                }
                None => fin.crashed.push(id),
            }
        }
        self.history.final_state = Some(fin);
        self.stats.net = self.hosts.net.stats;
        self.stats.end_ns = self.now().0;
        (self.history, self.stats)
    }
}
