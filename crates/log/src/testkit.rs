//! A tiny deterministic driver for tests: N replicas, a timed message queue, a simulated disk
//! per node (a durable log and hard state plus the records not yet synced), and crashes that
//! lose everything not fsynced (ORCA §9.6). It executes the cores' effects exactly as a real
//! driver must: records in token order, `send_after_persist` only after its token, one timer.
//!
//! It also checks, as reads happen, the global properties the scenarios rely on (§7): a read
//! is durable on a majority when served (G3), a follower serves only while in the leader's
//! active set (R2), and reads of a key never go back in time (G2, same key).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use bytes::Bytes;
use strata_core::{Effects, Node};
use strata_wire::log::{LogEntry, LogIndex, LogMessage};
use strata_wire::{Instant, NodeId};

use crate::api::{
    HardState, LogEvent, LogReply, LogRequest, Persist, ReadError, ReadValue, RecoveredState,
    WriteAck, WriteError, WriteOp,
};
use crate::config::{majority, LogConfig, ReadPolicy};
use crate::replica::{LogEffects, LogReplica};

enum Ev {
    Deliver {
        from: usize,
        to: usize,
        msg: LogMessage,
    },
    DiskDone {
        node: usize,
        incarnation: u64,
        token: u64,
    },
}

#[derive(Default)]
pub(crate) struct SimDisk {
    /// What survives a crash.
    pub durable: Vec<LogEntry>,
    pub hard: HardState,
    /// Records issued but not yet covered by a completed sync.
    pending: Vec<(u64, Persist)>,
}

pub(crate) struct SimNode {
    pub replica: Option<LogReplica>,
    pub disk: SimDisk,
    incarnation: u64,
    /// `send_after_persist` messages waiting for their token.
    held: Vec<(u64, NodeId, LogMessage)>,
    pub disk_stalled: bool,
    stalled: Vec<u64>,
}

struct ReadRecord {
    key: Bytes,
    invoked: Instant,
    completed: Instant,
    u: LogIndex,
    value: Option<Bytes>,
}

pub(crate) struct Cluster {
    pub now: Instant,
    pub cfg: LogConfig,
    pub ids: Vec<NodeId>,
    pub nodes: Vec<SimNode>,
    queue: BTreeMap<(Instant, u64), Ev>,
    seq: u64,
    pub latency: Duration,
    pub disk_latency: Duration,
    /// Each node's clock runs ahead of the global clock by a fixed offset: the protocol may
    /// compare instants of one clock only (§0 clocks; leases echo the follower's own time).
    clock_offset: Vec<Duration>,
    /// Each node's clock rate error in parts per million (bounded drift `rho`, §0).
    drift_ppm: Vec<i64>,
    /// Directed links that drop everything.
    blocked: BTreeSet<(usize, usize)>,
    /// Extra one-way delay per directed link (a lagging node).
    extra_delay: HashMap<(usize, usize), Duration>,
    next_token: u64,
    next_seq: u64,
    invoked: HashMap<u64, (usize, Bytes, Instant)>,
    pub replies: HashMap<u64, (Instant, LogReply)>,
    pub events: Vec<(Instant, usize, LogEvent)>,
    reads: Vec<ReadRecord>,
    pub violations: Vec<String>,
    leader_epochs: BTreeSet<u32>,
}

impl Cluster {
    pub fn new(n: usize, cfg: LogConfig) -> Cluster {
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
            })
            .collect();
        Cluster {
            now,
            cfg,
            ids,
            nodes,
            queue: BTreeMap::new(),
            seq: 0,
            clock_offset: vec![Duration::ZERO; n],
            drift_ppm: vec![0; n],
            latency: Duration::from_micros(500),
            disk_latency: Duration::from_millis(1),
            blocked: BTreeSet::new(),
            extra_delay: HashMap::new(),
            next_token: 1,
            next_seq: 1,
            invoked: HashMap::new(),
            replies: HashMap::new(),
            events: Vec::new(),
            reads: Vec::new(),
            violations: Vec::new(),
            leader_epochs: BTreeSet::new(),
        }
    }

    /// Gives every node a clock offset drawn from `[0, max)` and a rate error within
    /// `±ppm` parts per million.
    pub fn skew_clocks(&mut self, rng: &mut strata_core::Prng, max: Duration, ppm: i64) {
        for i in 0..self.n() {
            self.clock_offset[i] = Duration::from_nanos(rng.range(0, max.as_nanos() as u64));
            self.drift_ppm[i] = rng.range(0, 2 * ppm as u64 + 1) as i64 - ppm;
        }
    }

    /// Node `i`'s local clock at global instant `g`.
    fn local_at(&self, i: usize, g: Instant) -> Instant {
        let t = g.as_nanos() as i128;
        let drifted = t + t * self.drift_ppm[i] as i128 / 1_000_000;
        Instant::from_nanos(drifted as u64) + self.clock_offset[i]
    }

    /// Node `i`'s local clock.
    pub fn local(&self, i: usize) -> Instant {
        self.local_at(i, self.now)
    }

    /// Node `i`'s next deadline on the global clock (the first global instant at which its
    /// local clock has reached the deadline).
    fn deadline(&self, i: usize) -> Option<Instant> {
        let d = self.nodes[i].replica.as_ref()?.poll_timeout()?;
        let off = self.clock_offset[i].as_nanos() as i128;
        let local = (d.as_nanos() as i128 - off).max(0);
        let mut g = (local * 1_000_000 / (1_000_000 + self.drift_ppm[i] as i128)).max(0) as u64;
        while self.local_at(i, Instant::from_nanos(g)) < d {
            g += 1;
        }
        Some(Instant::from_nanos(g))
    }

    pub fn n(&self) -> usize {
        self.nodes.len()
    }

    pub fn node(&self, i: usize) -> &LogReplica {
        self.nodes[i].replica.as_ref().expect("node is up")
    }

    fn schedule(&mut self, at: Instant, ev: Ev) {
        self.seq += 1;
        self.queue.insert((at, self.seq), ev);
    }

    fn post(&mut self, from: usize, to: NodeId, msg: LogMessage) {
        let to = to.0 as usize;
        if self.blocked.contains(&(from, to)) {
            return;
        }
        let delay = self.latency
            + self
                .extra_delay
                .get(&(from, to))
                .copied()
                .unwrap_or_default();
        self.schedule(self.now + delay, Ev::Deliver { from, to, msg });
    }

    /// Executes one node's effects, then checks its invariants.
    pub fn drain(&mut self, i: usize) {
        let mut out: LogEffects = Effects::default();
        let Some(r) = self.nodes[i].replica.as_mut() else {
            return;
        };
        r.poll_effects(&mut out);
        r.check_invariants();
        for (to, msg) in out.send {
            self.post(i, to, msg);
        }
        self.nodes[i].held.extend(out.send_after_persist);
        for (token, p) in out.persist {
            let barrier = matches!(p, Persist::Sync | Persist::HardState(_));
            self.nodes[i].disk.pending.push((token, p));
            if barrier {
                if self.nodes[i].disk_stalled {
                    self.nodes[i].stalled.push(token);
                } else {
                    let incarnation = self.nodes[i].incarnation;
                    self.schedule(
                        self.now + self.disk_latency,
                        Ev::DiskDone {
                            node: i,
                            incarnation,
                            token,
                        },
                    );
                }
            }
        }
        for e in out.event {
            self.check_event(i, &e);
            self.events.push((self.now, i, e));
        }
        for r in out.reply {
            self.on_reply(r);
        }
    }

    fn disk_done(&mut self, i: usize, token: u64) {
        let node = &mut self.nodes[i];
        let (done, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut node.disk.pending)
            .into_iter()
            .partition(|(t, _)| *t <= token);
        node.disk.pending = rest;
        for (_, p) in done {
            match p {
                Persist::Append(es) => {
                    for e in es {
                        assert!(
                            node.disk.durable.last().is_none_or(|l| l.index < e.index),
                            "disk appends in order"
                        );
                        node.disk.durable.push(e);
                    }
                }
                Persist::Truncate { after } => node.disk.durable.retain(|e| e.index <= after),
                Persist::HardState(h) => node.disk.hard = h,
                Persist::Sync => {}
            }
        }
        let now = self.local(i);
        let node = &mut self.nodes[i];
        node.replica.as_mut().expect("up").on_persisted(now, token);
        let (ready, held): (Vec<_>, Vec<_>) = std::mem::take(&mut node.held)
            .into_iter()
            .partition(|(t, _, _)| *t <= token);
        node.held = held;
        for (_, to, msg) in ready {
            self.post(i, to, msg);
        }
        self.drain(i);
    }

    fn step_event(&mut self, ev: Ev) {
        match ev {
            Ev::Deliver { from, to, msg } => {
                let now = self.local(to);
                let Some(r) = self.nodes[to].replica.as_mut() else {
                    return;
                };
                r.on_message(now, self.ids[from], msg);
                self.drain(to);
            }
            Ev::DiskDone {
                node,
                incarnation,
                token,
            } => {
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
        loop {
            let next_ev = self.queue.keys().next().map(|k| k.0);
            let next_timer = (0..self.n()).filter_map(|i| self.deadline(i)).min();
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
            self.now = self.now.max(t);
            if next_ev.is_some_and(|e| e <= t) {
                let key = *self.queue.keys().next().expect("event");
                let ev = self.queue.remove(&key).expect("event");
                self.step_event(ev);
            } else {
                for i in 0..self.n() {
                    let due = self.deadline(i).is_some_and(|d| d <= self.now);
                    if due {
                        let now = self.local(i);
                        self.nodes[i].replica.as_mut().expect("up").on_tick(now);
                        self.drain(i);
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
        let node = &mut self.nodes[i];
        node.replica = None;
        node.incarnation += 1;
        node.disk.pending.clear();
        node.held.clear();
        node.stalled.clear();
    }

    pub fn restart(&mut self, i: usize) {
        let now = self.local(i);
        let node = &mut self.nodes[i];
        let state = RecoveredState {
            hard_state: node.disk.hard,
            snapshot: None,
            entries: node.disk.durable.clone(),
        };
        let seed = 1000 + i as u64 + 7919 * node.incarnation;
        node.replica = Some(
            LogReplica::recover(self.cfg.clone(), self.ids[i], &self.ids, state, now, seed)
                .expect("recover"),
        );
        self.drain(i);
    }

    pub fn isolate(&mut self, i: usize) {
        for j in 0..self.n() {
            if j != i {
                self.blocked.insert((i, j));
                self.blocked.insert((j, i));
            }
        }
    }

    pub fn heal(&mut self) {
        self.blocked.clear();
        self.extra_delay.clear();
    }

    /// Adds `d` of one-way delay on every link to and from `i`.
    pub fn lag(&mut self, i: usize, d: Duration) {
        for j in 0..self.n() {
            if j != i {
                self.extra_delay.insert((i, j), d);
                self.extra_delay.insert((j, i), d);
            }
        }
    }

    pub fn stall_disk(&mut self, i: usize) {
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
                Ev::DiskDone {
                    node: i,
                    incarnation,
                    token,
                },
            );
        }
    }

    // ---- clients ----

    fn request(&mut self, i: usize, req: LogRequest) -> u64 {
        let now = self.local(i);
        let r = self.nodes[i].replica.as_mut().expect("node is up");
        r.on_client_request(now, req);
        self.drain(i);
        // `drain` above may already have recorded the reply.
        self.next_token - 1
    }

    pub fn write_with(&mut self, i: usize, key: &str, op: WriteOp, immediate: bool) -> u64 {
        let token = self.next_token;
        self.next_token += 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        let key = Bytes::copy_from_slice(key.as_bytes());
        self.request(
            i,
            LogRequest::Write {
                token,
                client_id: 1,
                seq,
                key,
                op,
                immediate,
            },
        )
    }

    pub fn write(&mut self, i: usize, key: &str, value: &str) -> u64 {
        self.write_with(
            i,
            key,
            WriteOp::Put(Bytes::copy_from_slice(value.as_bytes())),
            false,
        )
    }

    pub fn read_with(&mut self, i: usize, key: &str, min_index: Option<LogIndex>) -> u64 {
        let token = self.next_token;
        self.next_token += 1;
        let key = Bytes::copy_from_slice(key.as_bytes());
        self.invoked.insert(token, (i, key.clone(), self.now));
        self.request(
            i,
            LogRequest::Read {
                token,
                key,
                min_index,
            },
        )
    }

    pub fn read(&mut self, i: usize, key: &str) -> u64 {
        self.read_with(i, key, None)
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

    /// Writes at `i` and runs until the reply; panics if it is not `Ok`.
    pub fn write_ok(&mut self, i: usize, key: &str, value: &str) -> LogIndex {
        let t = self.write(i, key, value);
        for _ in 0..400 {
            if self.replies.contains_key(&t) {
                break;
            }
            self.run_ms(1);
        }
        self.write_result(t)
            .expect("write answered")
            .expect("write ok")
            .index
    }

    /// Reads at `i` and runs until the reply (at most `read_timeout` plus a margin).
    pub fn read_now(&mut self, i: usize, key: &str) -> Result<ReadValue, ReadError> {
        let t = self.read(i, key);
        self.wait_reply(t);
        self.read_result(t).expect("read answered")
    }

    pub fn wait_reply(&mut self, t: u64) {
        for _ in 0..3000 {
            if self.replies.contains_key(&t) {
                return;
            }
            self.run_ms(1);
        }
    }

    /// The node that is a ready leader (synced, under lease), if any.
    pub fn leader(&self) -> Option<usize> {
        (0..self.n())
            .filter(|&i| {
                self.nodes[i]
                    .replica
                    .as_ref()
                    .is_some_and(|r| r.is_ready_leader(self.local(i)))
            })
            .max_by_key(|&i| self.node(i).epoch())
    }

    /// Runs until a ready leader exists (bounded); returns it.
    pub fn elect(&mut self) -> usize {
        for _ in 0..200 {
            if let Some(l) = self.leader() {
                // Let the active set form and leases be granted.
                self.run_ms(120);
                return self.leader().unwrap_or(l);
            }
            self.run_ms(50);
        }
        panic!("no leader elected by {:?}", self.now);
    }

    /// How many nodes hold entry `u` on disk.
    pub fn durable_on(&self, u: LogIndex) -> usize {
        self.nodes
            .iter()
            .filter(|n| n.disk.durable.iter().any(|e| e.index == u))
            .count()
    }

    pub fn count_events(&self, f: impl Fn(&LogEvent) -> bool) -> usize {
        self.events.iter().filter(|(_, _, e)| f(e)).count()
    }

    // ---- global checks ----

    /// §7.5, §7.6, §7.9: removal only after mark-out, re-addition only when caught up, votes
    /// only for logs at least as up to date, one leader per epoch.
    fn check_membership_and_votes(&mut self, e: &LogEvent) {
        match e {
            LogEvent::AsRemoved { node, .. } => {
                let f = node.0 as usize;
                let local = self.local(f);
                if self.nodes[f]
                    .replica
                    .as_ref()
                    .is_some_and(|r| r.is_serving(local))
                {
                    self.violations.push(format!(
                        "{:?}: {node} removed while still serving",
                        self.now
                    ));
                }
            }
            LogEvent::AsAdded {
                node,
                persisted,
                applied,
                di,
                ..
            } if persisted < di || applied < di => {
                self.violations
                    .push(format!("{:?}: {node} added below DI {di}", self.now));
            }
            LogEvent::VoteGranted {
                candidate_last,
                own_last,
                candidate,
                ..
            } if candidate_last < own_last => {
                self.violations.push(format!(
                    "{:?}: vote for {candidate} with a shorter log",
                    self.now
                ));
            }
            LogEvent::BecameLeader { epoch, .. } if !self.leader_epochs.insert(*epoch) => {
                self.violations
                    .push(format!("{:?}: two leaders in epoch {epoch}", self.now));
            }
            _ => {}
        }
    }

    fn check_event(&mut self, i: usize, e: &LogEvent) {
        self.check_membership_and_votes(e);
        let LogEvent::ReadServed {
            update_index: u,
            served_by,
            epoch,
            ..
        } = e
        else {
            return;
        };
        if !self.cfg.durability.checks_durability() {
            return; // baselines: no durability promise, the G2 checker judges them
        }
        // G3 / §7.3: durable on a majority at serve time.
        if *u != LogIndex::ZERO && self.durable_on(*u) < majority(self.n()) {
            self.violations.push(format!(
                "{:?}: read at n{i} served {u} durable on only {} nodes",
                self.now,
                self.durable_on(*u)
            ));
        }
        // R2 / §7.4: a follower serves only while in its leader's active set.
        if self.cfg.reads == ReadPolicy::ActiveSet {
            let leader = self
                .nodes
                .iter()
                .filter_map(|n| n.replica.as_ref())
                .find(|r| r.is_leader() && r.epoch() == *epoch);
            if let Some(l) = leader {
                let set = l.active_set();
                if l.id() != *served_by && !set.contains(served_by) {
                    self.violations.push(format!(
                        "{:?}: {served_by} served a read outside the active set {set:?}",
                        self.now
                    ));
                }
                // §7.3 in ORCA mode: every active-set member holds `u` on disk (R1).
                for m in set {
                    let disk = &self.nodes[m.0 as usize].disk.durable;
                    if *u != LogIndex::ZERO && !disk.iter().any(|e| e.index == *u) {
                        self.violations.push(format!(
                            "{:?}: read of {u} served while member {m} has not persisted it",
                            self.now
                        ));
                    }
                }
            }
        }
    }

    fn on_reply(&mut self, r: LogReply) {
        let token = r.token();
        if let LogReply::Read { result: Ok(v), .. } = &r {
            if let Some((_, key, invoked)) = self.invoked.get(&token).cloned() {
                // G2 (same key): not older than any read of the key completed before invocation.
                for prev in self
                    .reads
                    .iter()
                    .filter(|p| p.key == key && p.completed < invoked)
                {
                    if v.update_index < prev.u {
                        self.violations.push(format!(
                            "{:?}: non-monotonic read of {:?}: {} after {} (completed {:?})",
                            self.now, key, v.update_index, prev.u, prev.completed
                        ));
                    }
                }
                self.reads.push(ReadRecord {
                    key,
                    invoked,
                    completed: self.now,
                    u: v.update_index,
                    value: v.value.clone(),
                });
            }
        }
        self.replies.insert(token, (self.now, r));
    }

    /// The checks of §7 that need the final history `H` (the log of `leader`, taken after the
    /// run): every served entry exists in `H` with the returned value (§7.2), G2 across keys
    /// (§7.1), and every immediate-durability write is in `H` (§7.11).
    pub fn check_history(&mut self, leader: usize) {
        let h: Vec<LogEntry> = self.node(leader).entries().to_vec();
        let pos = |u: LogIndex| h.binary_search_by_key(&u, |e| e.index);
        let mut writes: HashMap<Bytes, Vec<LogIndex>> = HashMap::new();
        for e in &h {
            if e.op != strata_wire::log::LogOp::NoOp {
                writes.entry(e.key.clone()).or_default().push(e.index);
            }
        }
        let mut out = Vec::new();
        for r in &self.reads {
            if r.u == LogIndex::ZERO {
                continue;
            }
            match pos(r.u) {
                Ok(p) => {
                    let e = &h[p];
                    let v = match &e.op {
                        strata_wire::log::LogOp::Put(v) => Some(v.clone()),
                        _ => None,
                    };
                    if e.key != r.key || v != r.value {
                        out.push(format!(
                            "read of {:?} returned {:?} at {} but H has {:?}",
                            r.key, r.value, r.u, e
                        ));
                    }
                }
                Err(_) => out.push(format!(
                    "read of {:?} at {} served an entry not in H",
                    r.key, r.u
                )),
            }
        }
        for r1 in &self.reads {
            for r2 in self.reads.iter().filter(|r2| r1.completed < r2.invoked) {
                let Some(ws) = writes.get(&r2.key) else {
                    continue;
                };
                // The newest write of r2's key contained in state(r1).
                let newest = ws.iter().take_while(|&&w| w <= r1.u).last();
                if let Some(&w) = newest {
                    if r2.u < w {
                        out.push(format!(
                            "G2: read of {:?} returned {} after a read whose state held {}",
                            r2.key, r2.u, w
                        ));
                    }
                }
            }
        }
        for (_, _, e) in &self.events {
            if let LogEvent::WriteAcked {
                index,
                immediate: true,
                ..
            } = e
            {
                if pos(*index).is_err() {
                    out.push(format!("G6: immediate write {index} lost"));
                }
            }
        }
        self.violations.extend(out);
    }
}
