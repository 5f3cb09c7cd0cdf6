//! The ORCA driver: N [`LogReplica`] cores on the simulator's lossy, duplicating, reordering,
//! partitionable [`Network`], each with a skewed, drifting [`NodeClock`] and the server's own
//! log store (`strata-logstore` over a `SimBackend`) that loses every record not yet synced on
//! a crash (orca.md §9.6). It executes the cores'
//! effects exactly as `strata-node` must: persist records in token order, `send_after_persist`
//! only after its token is durable, one timer per node. Every input runs under
//! [`guarded`](crate::guard::guarded) and is followed by `check_invariants`.
//!
//! It records the [`OrcaHistory`] the checkers judge: every audit event stamped with the
//! global time, client reads, and the cluster-wide facts at the instants invariants speak of.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use bytes::Bytes;
use strata_core::{Effects, Node, Prng};
use strata_log::{
    HardState, LogConfig, LogEffects, LogEntry, LogEvent, LogIndex, LogMessage, LogReplica,
    LogReply, LogRequest, Persist, ReadError, ReadValue, RecoveredState, Role, Snapshot, WriteAck,
    WriteError, WriteOp,
};
use strata_logstore::ShardStore;
use strata_storage::{SimBackend, WalConfig};
use strata_wire::rifl::{ClusterTime, LeaseInfo, Rifl, RpcId};
use strata_wire::{Instant, NodeId};

use super::history::{
    AdditionRecord, Anomaly, DiRecord, ExecutionRecord, FollowerSample, NodeAtServe, OrcaHistory,
    Promises, ReadRecord, RemovalRecord, ServeRecord, Stamped, TruncationRecord, VoteCast,
    WriteOkRecord,
};
use crate::clock::NodeClock;
use crate::guard::guarded;
use crate::net::{NetKnobs, Network};

enum Ev {
    Deliver { from: usize, to: usize, msg: LogMessage },
    DiskDone { node: usize, incarnation: u64, token: u64 },
}

/// One node's disk: the server's own persistence adapter, a `strata-logstore` [`ShardStore`]
/// over a [`SimBackend`] that loses every unsynced write on a crash (orca.md §9.6). Records
/// wait in `pending` for the disk's latency, then run through the store like a disk thread's
/// batch; `durable` is the index of what the store has synced, kept for the checkers'
/// look-ups, and every restart checks that the store's recovery reads back exactly that.
pub struct SimDisk {
    backend: SimBackend,
    /// Open while the node is up.
    store: Option<ShardStore<SimBackend>>,
    pub durable: Vec<LogEntry>,
    pub hard: HardState,
    pending: Vec<(u64, Persist)>,
}

impl Default for SimDisk {
    fn default() -> Self {
        let backend = SimBackend::new();
        let (store, _) = ShardStore::open(backend.clone(), backend.clone(), WalConfig::default())
            .expect("an empty simulated disk opens");
        SimDisk {
            backend,
            store: Some(store),
            durable: Vec::new(),
            hard: HardState::default(),
            pending: Vec::new(),
        }
    }
}

impl SimDisk {
    /// The fsynced entry at index `u`.
    pub fn entry(&self, u: LogIndex) -> Option<&LogEntry> {
        self.durable.binary_search_by_key(&u, |e| e.index).ok().map(|i| &self.durable[i])
    }

    /// Makes every pending record with a token `<= token` durable through the store.
    fn complete(&mut self, token: u64) {
        let (done, rest): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.pending).into_iter().partition(|(t, _)| *t <= token);
        self.pending = rest;
        if done.is_empty() {
            return; // an earlier completion covered it
        }
        for (_, p) in &done {
            match p {
                Persist::Append(es) => {
                    for e in es {
                        assert!(
                            self.durable.last().is_none_or(|l| l.index < e.index),
                            "disk appends in order"
                        );
                        self.durable.push(e.clone());
                    }
                }
                Persist::Truncate { after } => self.durable.retain(|e| e.index <= *after),
                Persist::HardState(h) => self.hard = *h,
                Persist::Sync => {}
            }
        }
        let store = self.store.as_mut().expect("a running node's disk is open");
        let synced = store.execute(done).expect("the simulated disk does not fail");
        assert!(
            synced.is_some_and(|t| t <= token),
            "a completed batch holds its barrier: {synced:?}"
        );
    }

    /// Power failure: the unsynced records are lost, the store closes.
    fn crash(&mut self) {
        self.pending.clear();
        self.store = None;
        self.backend.crash();
    }

    /// Reopens the store after a crash: what its recovery reads back, which must be exactly the
    /// synced records (`Err` says how it differs).
    fn reopen(&mut self) -> Result<RecoveredState, String> {
        let (store, opened) =
            ShardStore::open(self.backend.clone(), self.backend.clone(), WalConfig::default())
                .map_err(|e| format!("the log store does not reopen: {e}"))?;
        self.store = Some(store);
        let state = opened.state;
        if state.entries != self.durable || state.hard_state != self.hard {
            return Err(format!(
                "the log store recovered {} entries and {:?}, but {} entries and {:?} were synced",
                state.entries.len(),
                state.hard_state,
                self.durable.len(),
                self.hard
            ));
        }
        Ok(state)
    }
}

pub struct SimNode {
    pub replica: Option<LogReplica>,
    pub disk: SimDisk,
    incarnation: u64,
    held: Vec<(u64, NodeId, LogMessage)>,
    pub disk_stalled: bool,
    stalled: Vec<u64>,
    /// The core's log as its persist records describe it (buffered or not): tells which
    /// entries a truncation removes and which entries an `Applied` covers.
    shadow: Vec<LogEntry>,
    /// Indexes of the applied entries, in order (§7.12).
    applied: Vec<LogIndex>,
    /// The entries whose mutation is in effect in the applied state, with their RPC
    /// (`Executed` events; truncations drop the removed suffix, a crash clears it).
    executed: BTreeMap<LogIndex, RpcId>,
    /// The last follower sample `(epoch, DI_F, serving, applied >= DI_F)` (§7.7).
    sample: Option<(u32, LogIndex, bool, bool)>,
    invariants_failed: bool,
}

/// One client's RIFL request tracker (rifl.md §5.2), as the simulated clients need it: seqs
/// from 1, and the unanswered ones, whose smallest is the `first_incomplete` every request
/// carries. A write is answered by `Ok` or a final error; a retryable error or a lost reply
/// leaves it unanswered (the harness retries it with the same seq).
#[derive(Default)]
struct SimClient {
    next_seq: u64,
    unanswered: BTreeSet<u64>,
}

/// A write as sent (every retry re-sends it with the same RPC id).
#[derive(Clone)]
struct WriteInvocation {
    rpc: RpcId,
    key: Bytes,
    op: WriteOp,
    immediate: bool,
}

struct Invocation {
    client: u64,
    node: usize,
    key: Bytes,
    min_index: Option<LogIndex>,
    at: Instant,
}

/// Network behaviour of a cluster: the simulator's knobs. The default is a fixed 500 µs
/// one-way delay without loss, duplication or reordering (scenario tests).
pub fn quiet_net() -> NetKnobs {
    NetKnobs {
        delay_min_us: 500,
        delay_max_us: 500,
        loss: 0.0,
        dup: 0.0,
        reorder: 0.0,
        reorder_extra_max_us: 0,
    }
}

pub struct OrcaCluster {
    /// Global simulated time.
    pub now: Instant,
    pub cfg: LogConfig,
    pub ids: Vec<NodeId>,
    pub nodes: Vec<SimNode>,
    queue: BTreeMap<(Instant, u64), Ev>,
    seq: u64,
    pub net: Network,
    pub disk_latency: Duration,
    /// Timers fire up to this late (uniform), while messages and disk completions keep being
    /// delivered on time: a loaded runtime whose core task takes queued inputs before it ticks
    /// (the node's does). Zero: every timer fires at its deadline, before later inputs.
    pub tick_lateness: Duration,
    /// Per node: the deadline last seen and the drawn time its tick fires.
    late_ticks: Vec<Option<(Instant, Instant)>>,
    tick_rng: Prng,
    clocks: Vec<NodeClock>,
    /// Extra one-way delay per directed link (a lagging node).
    extra_delay: HashMap<(usize, usize), Duration>,
    next_token: u64,
    clients: HashMap<u64, SimClient>,
    writes: HashMap<u64, WriteInvocation>,
    /// The final answer each write's client received (`Ok` or a non-retryable error).
    answers: HashMap<RpcId, Result<WriteAck, WriteError>>,
    /// Probability that a write's reply is lost on its way to the client, which then retries
    /// the same RPC id (rifl.md §6). Zero: every reply arrives.
    pub write_reply_loss: f64,
    loss_rng: Prng,
    invoked: HashMap<u64, Invocation>,
    pub replies: HashMap<u64, (Instant, LogReply)>,
    pub history: OrcaHistory,
}

impl OrcaCluster {
    /// `n` fresh replicas on a quiet network with exact clocks.
    pub fn new(n: usize, cfg: LogConfig) -> OrcaCluster {
        OrcaCluster::with_net(n, cfg, quiet_net(), Prng::new(7))
    }

    pub fn with_net(n: usize, cfg: LogConfig, net: NetKnobs, prng: Prng) -> OrcaCluster {
        let ids: Vec<NodeId> = (0..n as u32).map(NodeId).collect();
        let now = Instant::from_millis(1);
        let nodes = (0..n)
            .map(|i| SimNode {
                replica: Some(
                    LogReplica::new(cfg.clone(), ids[i], &ids, now, 1000 + i as u64)
                        .expect("valid config"),
                ),
                disk: SimDisk::default(),
                incarnation: 0,
                held: Vec::new(),
                disk_stalled: false,
                stalled: Vec::new(),
                shadow: Vec::new(),
                applied: Vec::new(),
                executed: BTreeMap::new(),
                sample: None,
                invariants_failed: false,
            })
            .collect();
        let history = OrcaHistory { n, promises: Promises::of(&cfg), ..OrcaHistory::default() };
        OrcaCluster {
            now,
            cfg,
            ids,
            nodes,
            queue: BTreeMap::new(),
            seq: 0,
            net: Network::new(net, prng),
            disk_latency: Duration::from_millis(1),
            tick_lateness: Duration::ZERO,
            late_ticks: vec![None; n],
            tick_rng: Prng::new(11),
            clocks: vec![NodeClock::EXACT; n],
            extra_delay: HashMap::new(),
            next_token: 1,
            clients: HashMap::new(),
            writes: HashMap::new(),
            answers: HashMap::new(),
            write_reply_loss: 0.0,
            loss_rng: Prng::new(13),
            invoked: HashMap::new(),
            replies: HashMap::new(),
            history,
        }
    }

    /// Gives every node a clock offset drawn from `[0, max)` and a rate error within `±ppm`,
    /// and starts its core afresh at its own reading. Call it before running anything.
    pub fn skew_clocks(&mut self, rng: &mut Prng, max: Duration, ppm: i64) {
        assert!(
            self.history.events.is_empty() && self.queue.is_empty(),
            "skew clocks before the run"
        );
        for i in 0..self.n() {
            let c = &mut self.clocks[i];
            c.offset_ns = rng.range(0, max.as_nanos() as u64);
            c.drift_ppm = rng.range(0, 2 * ppm as u64 + 1) as i64 - ppm;
            let r = LogReplica::new(
                self.cfg.clone(),
                self.ids[i],
                &self.ids,
                self.local(i),
                1000 + i as u64,
            );
            self.nodes[i].replica = Some(r.expect("valid config"));
        }
    }

    /// Node `i`'s local clock now.
    pub fn local(&self, i: usize) -> Instant {
        self.clocks[i].local(self.now)
    }

    fn deadline(&self, i: usize) -> Option<Instant> {
        let d = self.nodes[i].replica.as_ref()?.poll_timeout()?;
        Some(self.clocks[i].global_at(d))
    }

    /// When node `i`'s next tick fires: its deadline, plus a lateness drawn once per deadline
    /// when `tick_lateness` is set.
    fn tick_at(&mut self, i: usize) -> Option<Instant> {
        let d = self.deadline(i)?;
        if self.tick_lateness.is_zero() {
            return Some(d);
        }
        match self.late_ticks[i] {
            Some((seen, at)) if seen == d => Some(at),
            _ => {
                let at = d + Duration::from_nanos(
                    self.tick_rng.range(0, self.tick_lateness.as_nanos() as u64 + 1),
                );
                self.late_ticks[i] = Some((d, at));
                Some(at)
            }
        }
    }

    pub fn n(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_up(&self, i: usize) -> bool {
        self.nodes[i].replica.is_some()
    }

    pub fn node(&self, i: usize) -> &LogReplica {
        self.nodes[i].replica.as_ref().expect("node is up")
    }

    /// Runs `f` on node `i`'s core (an operator action), then executes its effects.
    pub fn with_node<R>(&mut self, i: usize, f: impl FnOnce(&mut LogReplica, Instant) -> R) -> R {
        let local = self.local(i);
        let r = f(self.nodes[i].replica.as_mut().expect("node is up"), local);
        self.drain(i);
        r
    }

    pub fn violations(&self) -> Vec<crate::check::Violation> {
        super::check::check_all(&self.history)
    }

    fn schedule(&mut self, at: Instant, ev: Ev) {
        self.seq += 1;
        self.queue.insert((at, self.seq), ev);
    }

    fn post(&mut self, from: usize, to: NodeId, msg: LogMessage) {
        let cast = match msg {
            LogMessage::RequestVote { epoch, .. } => Some((self.ids[from], epoch)),
            LogMessage::VoteResp { epoch, granted: true } => Some((to, epoch)),
            _ => None,
        };
        if let Some((candidate, epoch)) = cast {
            let voter = self.ids[from];
            if !self
                .history
                .votes
                .iter()
                .any(|v| v.voter == voter && v.candidate == candidate && v.epoch == epoch)
            {
                let pos = self.history.events.len();
                self.history.votes.push(VoteCast { at: self.now, pos, voter, candidate, epoch });
            }
        }
        let to = to.0 as usize;
        let extra = self.extra_delay.get(&(from, to)).copied().unwrap_or_default();
        for at in self.net.transmit(self.now, self.ids[from], self.ids[to]) {
            self.schedule(at + extra, Ev::Deliver { from, to, msg: msg.clone() });
        }
    }

    /// Runs one input on node `i` under the panic guard; a panic crashes the node.
    fn input(&mut self, i: usize, f: impl FnOnce(&mut LogReplica, Instant)) {
        let local = self.local(i);
        let Some(r) = self.nodes[i].replica.as_mut() else { return };
        if let Err(panic) = guarded(|| f(r, local)) {
            self.history.anomalies.push(Anomaly {
                at: self.now,
                node: Some(self.ids[i]),
                what: format!("core panicked while handling an input: {panic}"),
            });
            self.crash(i);
            return;
        }
        self.drain(i);
    }

    /// Executes node `i`'s effects, checks its invariants, records what it did.
    pub fn drain(&mut self, i: usize) {
        let mut out: LogEffects = Effects::default();
        let Some(r) = self.nodes[i].replica.as_mut() else { return };
        r.poll_effects(&mut out);
        if !self.nodes[i].invariants_failed {
            let r = self.nodes[i].replica.as_ref().expect("up");
            if let Err(panic) = guarded(|| r.check_invariants()) {
                self.nodes[i].invariants_failed = true;
                let what = format!("check_invariants failed: {panic}");
                self.history.anomalies.push(Anomaly {
                    at: self.now,
                    node: Some(self.ids[i]),
                    what,
                });
            }
        }
        for (to, msg) in out.send {
            self.post(i, to, msg);
        }
        self.nodes[i].held.extend(out.send_after_persist);
        for (token, p) in out.persist {
            self.shadow_persist(i, &p);
            let barrier = matches!(p, Persist::Sync | Persist::HardState(_));
            self.nodes[i].disk.pending.push((token, p));
            if barrier {
                if self.nodes[i].disk_stalled {
                    self.nodes[i].stalled.push(token);
                } else {
                    let incarnation = self.nodes[i].incarnation;
                    self.schedule(
                        self.now + self.disk_latency,
                        Ev::DiskDone { node: i, incarnation, token },
                    );
                }
            }
        }
        for e in out.event {
            self.record_event(i, e);
        }
        for r in out.reply {
            self.on_reply(r);
        }
        self.sample_follower(i);
    }

    /// Follows the core's log through its persist records (§7.10, §7.12).
    fn shadow_persist(&mut self, i: usize, p: &Persist) {
        let node = &mut self.nodes[i];
        match p {
            Persist::Append(es) => node.shadow.extend(es.iter().cloned()),
            Persist::Truncate { after } => {
                let keep = node.shadow.partition_point(|e| e.index <= *after);
                let removed: Vec<LogIndex> = node.shadow.drain(keep..).map(|e| e.index).collect();
                node.applied.retain(|x| x <= after);
                node.executed.retain(|x, _| x <= after);
                if !removed.is_empty() {
                    let pos = self.history.events.len();
                    self.history.truncations.push(TruncationRecord {
                        at: self.now,
                        pos,
                        node: self.ids[i],
                        removed,
                    });
                }
            }
            Persist::HardState(_) | Persist::Sync => {}
        }
    }

    fn disk_done(&mut self, i: usize, token: u64) {
        let node = &mut self.nodes[i];
        node.disk.complete(token);
        let (ready, held): (Vec<_>, Vec<_>) =
            std::mem::take(&mut node.held).into_iter().partition(|(t, _, _)| *t <= token);
        node.held = held;
        self.input(i, |r, now| r.on_persisted(now, token));
        if self.nodes[i].replica.is_some() {
            for (_, to, msg) in ready {
                self.post(i, to, msg);
            }
        }
    }

    fn step_event(&mut self, ev: Ev) {
        match ev {
            Ev::Deliver { from, to, msg } => {
                if self.nodes[to].replica.is_none() {
                    self.net.stats.dropped_dead += 1;
                    return;
                }
                if !self.net.admits(self.ids[from], self.ids[to]) {
                    return;
                }
                self.net.stats.delivered += 1;
                let from_id = self.ids[from];
                self.input(to, |r, now| r.on_message(now, from_id, msg));
            }
            Ev::DiskDone { node, incarnation, token } => {
                if self.nodes[node].incarnation == incarnation && self.nodes[node].replica.is_some()
                {
                    self.disk_done(node, token);
                }
            }
        }
    }

    /// Runs events and timers until `now + d`.
    pub fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        let mut spins = 0u32;
        loop {
            let next_ev = self.queue.keys().next().map(|k| k.0);
            let next_timer = (0..self.n()).filter_map(|i| self.tick_at(i)).min();
            let t = match (next_ev, next_timer) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(t) => t,
                    None => break,
                },
            };
            if t > end {
                break;
            }
            spins = if t <= self.now { spins + 1 } else { 0 };
            self.now = self.now.max(t);
            if next_ev.is_some_and(|e| e <= t) {
                let key = *self.queue.keys().next().expect("event");
                let ev = self.queue.remove(&key).expect("event");
                self.step_event(ev);
            } else {
                for i in 0..self.n() {
                    if self.tick_at(i).is_some_and(|d| d <= self.now) {
                        if spins > 10_000 {
                            // A timer that never advances would stall the simulation.
                            let what = "poll_timeout does not advance after on_tick".to_string();
                            self.history.anomalies.push(Anomaly {
                                at: self.now,
                                node: Some(self.ids[i]),
                                what,
                            });
                            self.crash(i);
                            continue;
                        }
                        self.input(i, |r, now| r.on_tick(now));
                    }
                }
            }
        }
        self.now = self.now.max(end);
    }

    pub fn run_ms(&mut self, ms: u64) {
        self.run_for(Duration::from_millis(ms));
    }

    // ---- faults ----

    /// Loses volatile state and every record not yet synced (§9.6).
    pub fn crash(&mut self, i: usize) {
        self.history.faults.push((self.now, format!("crash n{i}")));
        let node = &mut self.nodes[i];
        node.replica = None;
        node.incarnation += 1;
        node.disk.crash();
        node.held.clear();
        node.stalled.clear();
        node.executed.clear();
        node.sample = None;
    }

    /// Restarts a crashed node from its disk (§5.10). Does nothing if it is up.
    pub fn restart(&mut self, i: usize) {
        if self.nodes[i].replica.is_some() {
            return;
        }
        self.history.faults.push((self.now, format!("restart n{i}")));
        let now = self.local(i);
        let node = &mut self.nodes[i];
        let state = match node.disk.reopen() {
            Ok(state) => state,
            Err(what) => {
                self.history.anomalies.push(Anomaly {
                    at: self.now,
                    node: Some(self.ids[i]),
                    what,
                });
                return;
            }
        };
        node.shadow = node.disk.durable.clone();
        node.applied = node.shadow.iter().map(|e| e.index).collect();
        let seed = 1000 + i as u64 + 7919 * node.incarnation;
        match LogReplica::recover(self.cfg.clone(), self.ids[i], &self.ids, state, now, seed) {
            Ok(r) => node.replica = Some(r),
            Err(e) => {
                let what = format!("restart from disk refused: {e}");
                self.history.anomalies.push(Anomaly {
                    at: self.now,
                    node: Some(self.ids[i]),
                    what,
                });
                return;
            }
        }
        self.drain(i);
    }

    fn links(&self, i: usize) -> Vec<(NodeId, NodeId)> {
        (0..self.n())
            .filter(|&j| j != i)
            .flat_map(|j| [(self.ids[i], self.ids[j]), (self.ids[j], self.ids[i])])
            .collect()
    }

    /// Cuts every link to and from `i`.
    pub fn isolate(&mut self, i: usize) {
        self.history.faults.push((self.now, format!("isolate n{i}")));
        let links = self.links(i);
        self.net.cut_links(&links);
    }

    /// Cuts the directed link `from -> to` only.
    pub fn cut(&mut self, from: usize, to: usize) {
        self.history.faults.push((self.now, format!("cut n{from} -> n{to}")));
        self.net.cut_links(&[(self.ids[from], self.ids[to])]);
    }

    /// Heals every partition and removes every injected link delay.
    pub fn heal(&mut self) {
        self.history.faults.push((self.now, "heal".to_string()));
        self.net.heal_all();
        self.extra_delay.clear();
    }

    /// Adds `d` of one-way delay on every link to and from `i` (a lagging node).
    pub fn lag(&mut self, i: usize, d: Duration) {
        self.history.faults.push((self.now, format!("lag n{i} by {d:?}")));
        for j in (0..self.n()).filter(|&j| j != i) {
            self.extra_delay.insert((i, j), d);
            self.extra_delay.insert((j, i), d);
        }
    }

    /// Holds every fsync of node `i` until [`OrcaCluster::unstall_disk`].
    pub fn stall_disk(&mut self, i: usize) {
        self.history.faults.push((self.now, format!("stall disk n{i}")));
        self.nodes[i].disk_stalled = true;
    }

    pub fn unstall_disk(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        node.disk_stalled = false;
        let tokens = std::mem::take(&mut node.stalled);
        let incarnation = node.incarnation;
        for token in tokens {
            self.schedule(
                self.now + self.disk_latency,
                Ev::DiskDone { node: i, incarnation, token },
            );
        }
    }

    // ---- clients (co-located with the node they ask: replies arrive when emitted) ----

    fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token - 1
    }

    /// A write by `client` at node `i`, with the client's next `seq`; returns the reply token.
    pub fn write_as(
        &mut self,
        client: u64,
        i: usize,
        key: &str,
        op: WriteOp,
        immediate: bool,
    ) -> u64 {
        let c = self.clients.entry(client).or_default();
        c.next_seq += 1;
        c.unanswered.insert(c.next_seq);
        let rpc = RpcId { client_id: client, seq: c.next_seq };
        let key = Bytes::copy_from_slice(key.as_bytes());
        self.send_write(i, WriteInvocation { rpc, key, op, immediate })
    }

    /// Sends the write of `token` again, with the same RPC id, at node `i` (after a retryable
    /// error, a timeout or a lost reply); returns the new reply token.
    pub fn retry_write(&mut self, token: u64, i: usize) -> u64 {
        let w = self.writes.get(&token).expect("a write token").clone();
        self.send_write(i, w)
    }

    /// The RPC id of the write of `token`.
    pub fn write_rpc(&self, token: u64) -> Option<RpcId> {
        self.writes.get(&token).map(|w| w.rpc)
    }

    /// The final answer the client of `rpc` received, whichever attempt brought it.
    pub fn write_answer(&self, rpc: RpcId) -> Option<Result<WriteAck, WriteError>> {
        self.answers.get(&rpc).cloned()
    }

    /// Whether the client of this RPC id still waits for its answer.
    pub fn unanswered(&self, rpc: RpcId) -> bool {
        self.clients.get(&rpc.client_id).is_some_and(|c| c.unanswered.contains(&rpc.seq))
    }

    fn send_write(&mut self, i: usize, w: WriteInvocation) -> u64 {
        let token = self.token();
        let rpc = w.rpc;
        let first_incomplete =
            self.clients[&rpc.client_id].unanswered.first().copied().unwrap_or(rpc.seq);
        let rifl = Rifl {
            rpc,
            first_incomplete,
            lease: LeaseInfo {
                client_id: rpc.client_id,
                expiration: ClusterTime(u64::MAX),
                timestamp: ClusterTime::ZERO,
            },
        };
        let (key, op, immediate) = (w.key.clone(), w.op.clone(), w.immediate);
        self.writes.insert(token, w);
        self.input(i, |r, now| {
            r.on_client_request(now, LogRequest::Write { token, rifl, key, op, immediate })
        });
        token
    }

    pub fn write_with(&mut self, i: usize, key: &str, op: WriteOp, immediate: bool) -> u64 {
        self.write_as(1, i, key, op, immediate)
    }

    pub fn write(&mut self, i: usize, key: &str, value: &str) -> u64 {
        self.write_with(i, key, WriteOp::Put(Bytes::copy_from_slice(value.as_bytes())), false)
    }

    /// A read by `client` at node `i`; returns the reply token.
    pub fn read_as(
        &mut self,
        client: u64,
        i: usize,
        key: &str,
        min_index: Option<LogIndex>,
    ) -> u64 {
        let token = self.token();
        let key = Bytes::copy_from_slice(key.as_bytes());
        self.invoked.insert(
            token,
            Invocation { client, node: i, key: key.clone(), min_index, at: self.now },
        );
        self.input(i, |r, now| {
            r.on_client_request(now, LogRequest::Read { token, key, min_index })
        });
        token
    }

    pub fn read_with(&mut self, i: usize, key: &str, min_index: Option<LogIndex>) -> u64 {
        self.read_as(1, i, key, min_index)
    }

    pub fn read(&mut self, i: usize, key: &str) -> u64 {
        self.read_with(i, key, None)
    }

    /// rifl.md §5.7 step 1: asks node `i` to freeze the shard for a move to `to`; returns the
    /// reply token.
    pub fn freeze(&mut self, i: usize, to: strata_wire::log::ShardMove) -> u64 {
        let token = self.token();
        self.input(i, |r, now| r.on_client_request(now, LogRequest::Freeze { token, to }));
        token
    }

    pub fn freeze_result(&self, token: u64) -> Option<Result<Snapshot, WriteError>> {
        match self.replies.get(&token) {
            Some((_, LogReply::Frozen { result, .. })) => Some(result.clone()),
            _ => None,
        }
    }

    pub fn write_result(&self, token: u64) -> Option<Result<WriteAck, WriteError>> {
        match self.replies.get(&token) {
            Some((_, LogReply::Write { result, .. })) => Some(result.clone()),
            _ => None,
        }
    }

    pub fn read_result(&self, token: u64) -> Option<Result<ReadValue, ReadError>> {
        match self.replies.get(&token) {
            Some((_, LogReply::Read { result, .. })) => Some(result.clone()),
            _ => None,
        }
    }

    /// Runs until reply `t` arrived (at most 3 s).
    pub fn wait_reply(&mut self, t: u64) {
        for _ in 0..3000 {
            if self.replies.contains_key(&t) {
                return;
            }
            self.run_ms(1);
        }
    }

    /// Writes at `i` and runs until the reply; panics if it is not `Ok`.
    pub fn write_ok(&mut self, i: usize, key: &str, value: &str) -> LogIndex {
        let t = self.write(i, key, value);
        self.wait_reply(t);
        self.write_result(t).expect("write answered").expect("write ok").index
    }

    /// Reads at `i` and runs until the reply.
    pub fn read_now(&mut self, i: usize, key: &str) -> Result<ReadValue, ReadError> {
        let t = self.read(i, key);
        self.wait_reply(t);
        self.read_result(t).expect("read answered")
    }

    /// The ready leader (synced, under lease) of the highest epoch, if any.
    pub fn leader(&self) -> Option<usize> {
        (0..self.n())
            .filter(|&i| {
                self.nodes[i].replica.as_ref().is_some_and(|r| r.is_ready_leader(self.local(i)))
            })
            .max_by_key(|&i| self.node(i).epoch())
    }

    /// Runs until a ready leader exists (at most `max_ms`), then lets its active set form.
    pub fn try_elect(&mut self, max_ms: u64) -> Option<usize> {
        for _ in 0..max_ms / 50 {
            if let Some(l) = self.leader() {
                self.run_ms(120);
                return self.leader().or(Some(l));
            }
            self.run_ms(50);
        }
        None
    }

    /// [`OrcaCluster::try_elect`] for 10 s, or panics.
    pub fn elect(&mut self) -> usize {
        self.try_elect(10_000).unwrap_or_else(|| panic!("no leader elected by {:?}", self.now))
    }

    /// How many nodes hold entry `u` on disk.
    pub fn durable_on(&self, u: LogIndex) -> usize {
        self.nodes.iter().filter(|n| n.disk.entry(u).is_some()).count()
    }

    pub fn events(&self) -> impl Iterator<Item = &Stamped> {
        self.history.events.iter()
    }

    pub fn count_events(&self, f: impl Fn(&LogEvent) -> bool) -> usize {
        self.history.events.iter().filter(|s| f(&s.event)).count()
    }

    // ---- recording ----

    fn record_event(&mut self, i: usize, e: LogEvent) {
        let pos = self.history.events.len();
        let at = self.now;
        let me = self.ids[i];
        match &e {
            LogEvent::Applied { upto } => {
                let node = &mut self.nodes[i];
                let last = node.applied.last().copied().unwrap_or(LogIndex::ZERO);
                let from = node.shadow.partition_point(|e| e.index <= last);
                let to = node.shadow.partition_point(|e| e.index <= *upto);
                let newly: Vec<LogIndex> =
                    node.shadow[from..to.max(from)].iter().map(|e| e.index).collect();
                node.applied.extend(newly);
            }
            LogEvent::ReadServed {
                key,
                value,
                update_index,
                served_by,
                epoch,
                min_index,
                applied,
            } => {
                let server = served_by.0 as usize;
                let (was_leader, valid) =
                    match self.nodes.get(server).and_then(|n| n.replica.as_ref()) {
                        Some(r) if r.role() == Role::Leader => {
                            (true, r.is_ready_leader(self.local(server)))
                        }
                        Some(r) => (false, r.is_serving(self.local(server))),
                        None => (false, false),
                    };
                let nodes = (0..self.n())
                    .map(|j| NodeAtServe {
                        node: self.ids[j],
                        up: self.is_up(j),
                        disk_entry: self.nodes[j].disk.entry(*update_index).cloned(),
                        applied: self.nodes[j]
                            .replica
                            .as_ref()
                            .map_or(LogIndex::ZERO, |r| r.applied_index()),
                    })
                    .collect();
                self.history.serves.push(ServeRecord {
                    at,
                    pos,
                    served_by: *served_by,
                    epoch: *epoch,
                    key: key.clone(),
                    value: value.clone(),
                    u: *update_index,
                    min_index: *min_index,
                    applied: *applied,
                    server_was_leader: was_leader,
                    server_valid: valid,
                    nodes,
                });
            }
            LogEvent::Executed { index, client_id, seq } => {
                let rpc = RpcId { client_id: *client_id, seq: *seq };
                let node = &mut self.nodes[i];
                let others = node
                    .executed
                    .iter()
                    .filter(|(x, r)| **r == rpc && *x != index)
                    .map(|(x, _)| *x)
                    .collect();
                node.executed.insert(*index, rpc);
                self.history.executions.push(ExecutionRecord {
                    at,
                    pos,
                    node: me,
                    index: *index,
                    rpc,
                    others,
                });
            }
            LogEvent::AsRemoved { epoch, node, .. } => {
                let f = node.0 as usize;
                let still_serving =
                    self.nodes[f].replica.as_ref().is_some_and(|r| r.is_serving(self.local(f)));
                self.history.removals.push(RemovalRecord {
                    at,
                    pos,
                    leader: me,
                    epoch: *epoch,
                    node: *node,
                    still_serving,
                });
            }
            LogEvent::AsAdded { epoch, node, persisted, applied, di } => {
                let f = node.0 as usize;
                let want = self.leader_entry(i, *di);
                let disk_has_di =
                    *di == LogIndex::ZERO || self.nodes[f].disk.entry(*di) == want.as_ref();
                self.history.additions.push(AdditionRecord {
                    at,
                    pos,
                    epoch: *epoch,
                    node: *node,
                    reported_persisted: *persisted,
                    reported_applied: *applied,
                    di: *di,
                    disk_has_di,
                });
            }
            LogEvent::DurableIndex { epoch, di } => {
                let want = self.leader_entry(i, *di);
                let holds = |j: usize| self.nodes[j].disk.entry(*di) == want.as_ref();
                let holders = (0..self.n()).filter(|&j| holds(j)).map(|j| self.ids[j]).collect();
                let members = self
                    .node(i)
                    .active_set()
                    .into_iter()
                    .map(|m| {
                        let j = m.0 as usize;
                        (m, holds(j), self.nodes[j].replica.as_ref().map(|r| r.applied_index()))
                    })
                    .collect();
                self.history.dis.push(DiRecord {
                    at,
                    pos,
                    leader: me,
                    epoch: *epoch,
                    di: *di,
                    holders,
                    members,
                });
            }
            _ => {}
        }
        self.history.events.push(Stamped { at, node: me, event: e });
    }

    /// Leader `i`'s entry at `u` (memory log).
    fn leader_entry(&self, i: usize, u: LogIndex) -> Option<LogEntry> {
        let es = self.node(i).entries();
        es.binary_search_by_key(&u, |e| e.index).ok().map(|p| es[p].clone())
    }

    /// Records a follower's `DI_F` / serving state when it changes (§7.5, §7.7).
    fn sample_follower(&mut self, i: usize) {
        let local = self.local(i);
        let Some(r) = self.nodes[i].replica.as_ref() else { return };
        if r.role() == Role::Leader {
            self.nodes[i].sample = None;
            return;
        }
        let (epoch, di_f, applied, serving) =
            (r.epoch(), r.durable_index(), r.applied_index(), r.is_serving(local));
        let s = Some((epoch, di_f, serving, applied >= di_f));
        if self.nodes[i].sample != s {
            self.nodes[i].sample = s;
            let pos = self.history.events.len();
            self.history.followers.push(FollowerSample {
                at: self.now,
                pos,
                node: self.ids[i],
                epoch,
                di_f,
                applied,
                serving,
            });
        }
    }

    fn on_reply(&mut self, r: LogReply) {
        let token = r.token();
        if let (LogReply::Write { result, .. }, Some(w)) = (&r, self.writes.get(&token)) {
            let rpc = w.rpc;
            let lost = self.write_reply_loss > 0.0 && self.loss_rng.chance(self.write_reply_loss);
            if let Ok(ack) = result {
                let at = self.now;
                self.history.write_oks.push(WriteOkRecord {
                    at,
                    rpc,
                    index: ack.index,
                    delivered: !lost,
                });
            }
            if lost {
                return;
            }
            let retryable = matches!(
                result,
                Err(WriteError::NotLeader { .. } | WriteError::Unavailable | WriteError::Timeout)
            );
            if !retryable {
                if let Some(c) = self.clients.get_mut(&rpc.client_id) {
                    c.unanswered.remove(&rpc.seq);
                }
                self.answers.entry(rpc).or_insert_with(|| result.clone());
            }
        }
        if let LogReply::Read { result: Ok(v), .. } = &r {
            if let Some(inv) = self.invoked.get(&token) {
                self.history.reads.push(ReadRecord {
                    client: inv.client,
                    key: inv.key.clone(),
                    asked: self.ids[inv.node],
                    min_index: inv.min_index,
                    invoked: inv.at,
                    completed: self.now,
                    value: v.clone(),
                });
            }
        }
        self.replies.insert(token, (self.now, r));
    }

    /// Ends the run: records every node's applied sequence and takes `H` from `leader`'s log
    /// (or, without a leader, from the longest log of a live node).
    pub fn finish(&mut self, leader: Option<usize>) {
        self.history.final_applied = (0..self.n())
            .map(|i| (self.ids[i], self.is_up(i).then(|| self.nodes[i].applied.clone())))
            .collect();
        let source = leader.or_else(|| {
            (0..self.n()).filter(|&i| self.is_up(i)).max_by_key(|&i| self.node(i).last_index())
        });
        if let Some(s) = source {
            self.history.h = self.node(s).entries().to_vec();
        }
        self.history.h_leader = leader.map(|l| self.ids[l]);
    }
}
