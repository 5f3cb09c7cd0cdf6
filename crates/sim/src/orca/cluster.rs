//! The ORCA harness: N whole [`Host`](strata_host::Host) cores on the simulator's one cluster
//! loop, [`HostCluster`] — its lossy, duplicating, reordering, partitionable network, skewed and
//! drifting [`NodeClock`]s, and the server's own log store (`strata-logstore` over a
//! `SimBackend`) that loses every record not yet synced on a crash (orca.md §9.6). Every host
//! runs its rc replica and the `__leases` table too; the scenario's table [`TABLE`] (one shard,
//! on every node) runs the [`LogConfig`] under test, given to the hosts as a
//! `HostConfig::log_overrides` entry. `HostCluster` executes every effect (persist records in
//! token order, `send_after_persist` only after its token is durable, one timer per node) and
//! checks every host's invariants after every input; this harness only watches: with
//! `observe` on, each input's [`Step`] — the shard's audit events, the peer messages, the
//! persist records, the replies — is recorded before the next event runs.
//!
//! Clients sit beside the node they ask (their requests are handled at once, replies arrive
//! when emitted) and speak the client protocol: `LogWrite` with RIFL's envelope, `LogRead`,
//! `FreezeShard`. Their leases outlive any run ([`CLIENT_LEASE`]): lease expiry is the host
//! harness's subject (`crate::host`), not the log engine's.
//!
//! It records the [`OrcaHistory`] the checkers judge: every audit event of the table stamped
//! with the global time, client reads, and the cluster-wide facts at the instants invariants
//! speak of.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use bytes::Bytes;
use strata_core::{Prng, Route};
use strata_host::catalog::{encode, Catalogued};
use strata_host::Audit;
use strata_log::{
    LogConfig, LogEntry, LogEvent, LogIndex, LogMessage, LogReplica, LogReply, Persist, ReadError,
    ReadValue, Role, Snapshot, WriteAck, WriteError, WriteOp,
};
use strata_wire::client::{
    table_id, ClientRequest, ClientResponse, ErrorCode, LogFailure, Request, Response, TableDef,
    TableDurability, TableEngine, TableReads, TableReplication, TableTimers,
};
use strata_wire::peer::PeerMessage;
use strata_wire::rifl::{ClusterTime, LeaseInfo, Rifl, RpcId};
use strata_wire::{Instant, NodeId};

use super::history::{
    AdditionRecord, Anomaly, DiRecord, ExecutionRecord, FollowerSample, NodeAtServe, OrcaHistory,
    Promises, ReadRecord, RemovalRecord, ServeRecord, Stamped, TruncationRecord, VoteCast,
    WriteOkRecord,
};
use crate::clock::NodeClock;
use crate::host::cluster::{ClusterOptions, HostCluster, HostNet, Step, Stepped};
use crate::net::NetKnobs;

/// The scenario's table: one shard, on every node.
pub const TABLE: &str = "orca";

/// The hosts' lease term: the clients' leases (granted for this long from cluster time zero)
/// stay alive through any run, so the lease check of rifl.md §5.5.3 admits every write.
pub const CLIENT_LEASE: Duration = Duration::from_secs(30 * 24 * 3600);

/// What the harness follows of one node, beside its host.
#[derive(Default)]
struct Watch {
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
    /// The host's failure is in the history.
    failure_reported: bool,
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

/// What a request token asked for (its reply is decoded accordingly).
#[derive(Clone, Copy)]
enum Asked {
    Write,
    Read,
    Freeze,
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
    /// The one cluster loop, which runs the hosts and executes their effects.
    pub hc: HostCluster,
    /// Global simulated time (the loop's).
    pub now: Instant,
    pub cfg: LogConfig,
    pub ids: Vec<NodeId>,
    watch: Vec<Watch>,
    table: u32,
    /// How the loop was built, to build it again with skewed clocks.
    knobs: NetKnobs,
    net_prng: Prng,
    /// Timers fire up to this late (uniform), while messages and disk completions keep being
    /// delivered on time: a loaded runtime whose core task takes queued inputs before it ticks
    /// (the node's does). Zero: every timer fires at its deadline, before later inputs.
    pub tick_lateness: Duration,
    next_token: u64,
    asked: HashMap<u64, Asked>,
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

/// The catalog every node starts with: [`TABLE`], one shard on every node. Its definition's
/// own configuration is replaced by the scenario's (`HostConfig::log_overrides`).
fn catalog() -> Vec<u8> {
    let def = TableDef {
        name: TABLE.to_string(),
        engine: TableEngine::Log,
        durability: TableDurability::Cad,
        replication: TableReplication::Async,
        reads: TableReads::ActiveSet,
        shards: 1,
        timers: TableTimers::Default,
        leaders: Vec::new(),
        txn: Default::default(),
        validation: Default::default(),
    };
    encode([&Catalogued { def, moved: BTreeMap::new() }])
}

/// The loop of `n` hosts for a scenario: no base delay per link (the knobs' random delay is
/// the whole one-way delay), a 1 ms disk, hosts seeded the same for every run (the harness's
/// seed draws the network and the clocks), and [`TABLE`] running `cfg` everywhere.
fn build(
    n: usize,
    cfg: &LogConfig,
    knobs: &NetKnobs,
    prng: &Prng,
    clocks: Vec<NodeClock>,
) -> HostCluster {
    let mut net = HostNet::uniform(n, 0);
    net.links = knobs.clone();
    let table_cfg = cfg.clone();
    let mut hc = HostCluster::with(ClusterOptions {
        nodes: n,
        net,
        seed: 1000,
        net_prng: Some(prng.clone()),
        clocks: Some(clocks),
        start: Instant::from_millis(1),
        lease_term: CLIENT_LEASE,
        shard_rate_limit: None,
        observe: true,
        tune: Some(Box::new(move |_, h| {
            h.log_overrides.insert(TABLE.to_string(), table_cfg.clone());
        })),
        catalog: catalog(),
    });
    hc.disk_latency = Duration::from_millis(1);
    hc
}

impl OrcaCluster {
    /// `n` fresh replicas on a quiet network with exact clocks.
    pub fn new(n: usize, cfg: LogConfig) -> OrcaCluster {
        OrcaCluster::with_net(n, cfg, quiet_net(), Prng::new(7))
    }

    pub fn with_net(n: usize, cfg: LogConfig, net: NetKnobs, prng: Prng) -> OrcaCluster {
        let ids: Vec<NodeId> = (0..n as u32).map(NodeId).collect();
        let hc = build(n, &cfg, &net, &prng, vec![NodeClock::EXACT; n]);
        let history = OrcaHistory { n, promises: Promises::of(&cfg), ..OrcaHistory::default() };
        let mut c = OrcaCluster {
            now: hc.now,
            hc,
            cfg,
            ids,
            watch: (0..n).map(|_| Watch::default()).collect(),
            table: table_id(TABLE),
            knobs: net,
            net_prng: prng,
            tick_lateness: Duration::ZERO,
            next_token: 1,
            asked: HashMap::new(),
            clients: HashMap::new(),
            writes: HashMap::new(),
            answers: HashMap::new(),
            write_reply_loss: 0.0,
            loss_rng: Prng::new(13),
            invoked: HashMap::new(),
            replies: HashMap::new(),
            history,
        };
        c.check_started();
        c
    }

    /// Every node must run the table's shard from the start (a configuration the host refuses
    /// is a broken scenario, not a finding).
    fn check_started(&mut self) {
        assert!(self.hc.open_failures.is_empty(), "the table opens: {:?}", self.hc.open_failures);
        for i in 0..self.n() {
            assert!(self.replica(i).is_some(), "n{i} runs {TABLE}'s shard");
        }
    }

    /// Gives every node a clock offset drawn from `[0, max)` and a rate error within `±ppm`,
    /// and starts the cluster afresh at their readings. Call it before running anything.
    pub fn skew_clocks(&mut self, rng: &mut Prng, max: Duration, ppm: i64) {
        assert!(self.history.events.is_empty(), "skew clocks before the run");
        let clocks = (0..self.n())
            .map(|_| {
                let offset_ns = rng.range(0, max.as_nanos() as u64);
                let drift_ppm = rng.range(0, 2 * ppm as u64 + 1) as i64 - ppm;
                NodeClock { offset_ns, drift_ppm }
            })
            .collect();
        self.hc = build(self.n(), &self.cfg, &self.knobs, &self.net_prng, clocks);
        self.now = self.hc.now;
        self.check_started();
    }

    /// Node `i`'s local clock now.
    pub fn local(&self, i: usize) -> Instant {
        self.hc.local(i)
    }

    pub fn n(&self) -> usize {
        self.ids.len()
    }

    /// Node `i`'s replica of the table's shard, if the node is up.
    fn replica(&self, i: usize) -> Option<&LogReplica> {
        self.hc.nodes[i].host.as_ref()?.shard_replica(TABLE, 0)
    }

    pub fn is_up(&self, i: usize) -> bool {
        self.replica(i).is_some()
    }

    pub fn node(&self, i: usize) -> &LogReplica {
        self.replica(i).expect("node is up")
    }

    /// The network between the nodes.
    pub fn net(&mut self) -> &mut crate::net::Network {
        &mut self.hc.net
    }

    pub fn violations(&self) -> Vec<crate::check::Violation> {
        super::check::check_all(&self.history)
    }

    /// Node `i`'s synced copy of entry `u`.
    fn disk_entry(&self, i: usize, u: LogIndex) -> Option<&LogEntry> {
        let (es, _) = self.hc.synced_log(i, self.table, 0)?;
        es.binary_search_by_key(&u, |e| e.index).ok().map(|p| &es[p])
    }

    /// Runs events and timers until `now + d`.
    pub fn run_for(&mut self, d: Duration) {
        self.hc.tick_lateness = self.tick_lateness;
        let end = self.hc.now + d;
        while let Some(stepped) = self.hc.next(end) {
            self.now = self.hc.now;
            if let Stepped::Node(step) = stepped {
                self.record_step(step);
            }
        }
        self.hc.now = self.hc.now.max(end);
        self.now = self.hc.now;
    }

    pub fn run_ms(&mut self, ms: u64) {
        self.run_for(Duration::from_millis(ms));
    }

    // ---- faults ----

    /// Loses volatile state and every record not yet synced (§9.6).
    pub fn crash(&mut self, i: usize) {
        self.history.faults.push((self.now, format!("crash n{i}")));
        self.hc.crash(i);
        let w = &mut self.watch[i];
        w.executed.clear();
        w.sample = None;
    }

    /// Restarts a crashed node from its disk (§5.10). Does nothing if it is up.
    pub fn restart(&mut self, i: usize) {
        if self.hc.is_up(i) {
            return;
        }
        self.history.faults.push((self.now, format!("restart n{i}")));
        let synced = self.hc.synced_log(i, self.table, 0).map(|(es, _)| es.to_vec());
        let w = &mut self.watch[i];
        w.shadow = synced.unwrap_or_default();
        w.applied = w.shadow.iter().map(|e| e.index).collect();
        if let Some(step) = self.hc.start(i) {
            self.record_step(step);
        }
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
        self.hc.net.cut_links(&links);
    }

    /// Cuts the directed link `from -> to` only.
    pub fn cut(&mut self, from: usize, to: usize) {
        self.history.faults.push((self.now, format!("cut n{from} -> n{to}")));
        self.hc.net.cut_links(&[(self.ids[from], self.ids[to])]);
    }

    /// Heals every partition and removes every injected link delay.
    pub fn heal(&mut self) {
        self.history.faults.push((self.now, "heal".to_string()));
        self.hc.heal();
    }

    /// Adds `d` of one-way delay on every link to and from `i` (a lagging node).
    pub fn lag(&mut self, i: usize, d: Duration) {
        self.history.faults.push((self.now, format!("lag n{i} by {d:?}")));
        self.hc.lag(i, d);
    }

    /// Holds every fsync of node `i` until [`OrcaCluster::unstall_disk`].
    pub fn stall_disk(&mut self, i: usize) {
        self.history.faults.push((self.now, format!("stall disk n{i}")));
        self.hc.stall_disk(i);
    }

    pub fn unstall_disk(&mut self, i: usize) {
        self.hc.unstall_disk(i);
    }

    /// ORCA §5.7.4 (c): an operator at node `l` revokes member `f`'s active-set lease
    /// (`Host::revoke_shard_member`); false if refused or the node is down.
    pub fn revoke_member(&mut self, l: usize, f: usize) -> bool {
        let node = self.ids[f];
        let Some((revoked, step)) =
            self.hc.operate(l, |h, now| h.revoke_shard_member(now, TABLE, 0, node))
        else {
            return false;
        };
        if let Some(step) = step {
            self.record_step(step);
        }
        revoked
    }

    // ---- clients (beside the node they ask: replies arrive when emitted) ----

    fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token - 1
    }

    /// Client `client`'s request to node `i`, on a connection of its own.
    fn request(
        &mut self,
        client: u64,
        i: usize,
        token: u64,
        asked: Asked,
        rifl: Option<Rifl>,
        body: Request,
    ) {
        self.asked.insert(token, asked);
        let req = ClientRequest { corr: token, rifl, body };
        if let Some(step) = self.hc.client_input(i, client as Route, req) {
            self.record_step(step);
        }
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
                expiration: ClusterTime(CLIENT_LEASE.as_nanos() as u64),
                timestamp: ClusterTime::ZERO,
            },
        };
        let body = Request::LogWrite {
            table: TABLE.to_string(),
            key: w.key.clone(),
            op: w.op.clone(),
            immediate: w.immediate,
        };
        self.writes.insert(token, w);
        self.request(rpc.client_id, i, token, Asked::Write, Some(rifl), body);
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
        let body = Request::LogRead {
            table: TABLE.to_string(),
            key,
            min_index,
            sharer: false,
            intent: strata_wire::txn::ReadIntent::Plain,
        };
        self.request(client, i, token, Asked::Read, None, body);
        token
    }

    pub fn read_with(&mut self, i: usize, key: &str, min_index: Option<LogIndex>) -> u64 {
        self.read_as(1, i, key, min_index)
    }

    pub fn read(&mut self, i: usize, key: &str) -> u64 {
        self.read_with(i, key, None)
    }

    /// rifl.md §5.7 step 1: asks node `i` to freeze the shard for a move to `replicas` (an
    /// admin's `FreezeShard`); returns the reply token.
    pub fn freeze(&mut self, i: usize, replicas: Vec<NodeId>) -> u64 {
        let token = self.token();
        let body = Request::FreezeShard { table: TABLE.to_string(), shard: 0, replicas };
        self.request(0, i, token, Asked::Freeze, None, body);
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
            .filter(|&i| self.replica(i).is_some_and(|r| r.is_ready_leader(self.local(i))))
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
        (0..self.n()).filter(|&i| self.disk_entry(i, u).is_some()).count()
    }

    pub fn events(&self) -> impl Iterator<Item = &Stamped> {
        self.history.events.iter()
    }

    pub fn count_events(&self, f: impl Fn(&LogEvent) -> bool) -> usize {
        self.history.events.iter().filter(|s| f(&s.event)).count()
    }

    // ---- recording ----

    /// Records what one input to node `step.node` did, in the order the old driver saw it:
    /// the votes it sent, its log's persist records, its events, its replies, then a sample of
    /// its follower state. Everything of the other tables (`__leases`) and of the rc replica
    /// is not this harness's.
    fn record_step(&mut self, step: Step) {
        let i = step.node;
        self.note_failures(i);
        for (to, msg) in &step.sends {
            if let PeerMessage::Shard { table, msg, .. } = msg {
                if *table == self.table {
                    self.note_vote(i, *to, msg);
                }
            }
        }
        for (shard, records) in &step.persists {
            if shard.table == self.table {
                for (_, p) in records {
                    self.shadow_persist(i, p);
                }
            }
        }
        for a in step.audit {
            if let Audit::Log { table, event, .. } = a {
                if table == TABLE {
                    self.record_event(i, event);
                }
            }
        }
        for (_, resp) in step.replies {
            self.on_reply(resp);
        }
        self.sample_follower(i);
    }

    /// A host's panic or broken invariant, a failed storage open and a timer that did not
    /// move: anomalies, each reported once.
    fn note_failures(&mut self, i: usize) {
        if !self.watch[i].failure_reported {
            if let Some(what) = self.hc.nodes[i].failure.clone() {
                self.watch[i].failure_reported = true;
                self.history.anomalies.push(Anomaly {
                    at: self.now,
                    node: Some(self.ids[i]),
                    what,
                });
            }
        }
        for what in std::mem::take(&mut self.hc.open_failures) {
            self.history.anomalies.push(Anomaly { at: self.now, node: None, what });
        }
        for (j, at) in std::mem::take(&mut self.hc.stuck) {
            let what = "poll_timeout does not advance after on_tick".to_string();
            self.history.anomalies.push(Anomaly { at, node: Some(self.ids[j]), what });
        }
    }

    fn note_vote(&mut self, from: usize, to: NodeId, msg: &LogMessage) {
        let cast = match msg {
            LogMessage::RequestVote { epoch, .. } => Some((self.ids[from], *epoch)),
            LogMessage::VoteResp { epoch, granted: true } => Some((to, *epoch)),
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
    }

    /// Follows the core's log through its persist records (§7.10, §7.12).
    fn shadow_persist(&mut self, i: usize, p: &Persist) {
        let node = &mut self.watch[i];
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

    fn record_event(&mut self, i: usize, e: LogEvent) {
        let pos = self.history.events.len();
        let at = self.now;
        let me = self.ids[i];
        match &e {
            LogEvent::Applied { upto } => {
                let node = &mut self.watch[i];
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
                    match (server < self.n()).then(|| self.replica(server)).flatten() {
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
                        disk_entry: self.disk_entry(j, *update_index).cloned(),
                        applied: self.replica(j).map_or(LogIndex::ZERO, |r| r.applied_index()),
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
                let node = &mut self.watch[i];
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
                let still_serving = self.replica(f).is_some_and(|r| r.is_serving(self.local(f)));
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
                let disk_has_di = *di == LogIndex::ZERO || self.disk_entry(f, *di) == want.as_ref();
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
                let holds = |j: usize| self.disk_entry(j, *di) == want.as_ref();
                let holders = (0..self.n()).filter(|&j| holds(j)).map(|j| self.ids[j]).collect();
                let members = self
                    .node(i)
                    .active_set()
                    .into_iter()
                    .map(|m| {
                        let j = m.0 as usize;
                        (m, holds(j), self.replica(j).map(|r| r.applied_index()))
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
        let Some(r) = self.replica(i) else { return };
        if r.role() == Role::Leader {
            self.watch[i].sample = None;
            return;
        }
        let (epoch, di_f, applied, serving) =
            (r.epoch(), r.durable_index(), r.applied_index(), r.is_serving(local));
        let s = Some((epoch, di_f, serving, applied >= di_f));
        if self.watch[i].sample != s {
            self.watch[i].sample = s;
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

    fn on_reply(&mut self, resp: ClientResponse) {
        let token = resp.corr;
        let Some(&asked) = self.asked.get(&token) else { return };
        let r = decode_reply(token, asked, resp.body);
        if let (LogReply::Write { result, .. }, Some(w)) = (&r, self.writes.get(&token)) {
            let rpc = w.rpc;
            let lost = self.write_reply_loss > 0.0 && self.loss_rng.chance(self.write_reply_loss);
            if let Ok(ack) = result {
                let at = self.now;
                self.history.write_oks.push(WriteOkRecord {
                    at,
                    rpc,
                    index: ack.index,
                    outcome: ack.outcome,
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
            .map(|i| (self.ids[i], self.is_up(i).then(|| self.watch[i].applied.clone())))
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

/// The engine's reply a client protocol response stands for (`strata_host::shards`
/// `reply_body`, inverted): what the scenarios and checkers judge. Messages of refusals the
/// engine words itself are not carried back.
fn decode_reply(token: u64, asked: Asked, body: Response) -> LogReply {
    let write_error = |body: Response| match body {
        Response::LogRejected(f) => match f {
            LogFailure::NotLeader { hint } => WriteError::NotLeader { hint },
            LogFailure::Unavailable => WriteError::Unavailable,
            LogFailure::Timeout => WriteError::Timeout,
            LogFailure::Moved { replicas } => WriteError::Moved { replicas },
            LogFailure::Locked => WriteError::Locked,
            LogFailure::NotInActiveSet | LogFailure::Invalid(_) => {
                WriteError::Invalid("refused as invalid")
            }
        },
        Response::Error { code: ErrorCode::Stale, .. } => WriteError::Stale,
        Response::Error { code: ErrorCode::ExpiredLease, .. } => WriteError::ExpiredLease,
        Response::Error { code: ErrorCode::BadEnvelope, .. } => {
            WriteError::BadEnvelope("refused as a bad envelope")
        }
        _ => WriteError::Invalid("an unexpected response"),
    };
    match asked {
        Asked::Write => LogReply::Write {
            token,
            result: match body {
                Response::LogWritten { index, outcome } => Ok(WriteAck { index, outcome }),
                other => Err(write_error(other)),
            },
        },
        Asked::Read => LogReply::Read {
            token,
            result: match body {
                Response::LogValue { value, update_index, served_by, epoch, vts, w_mean_ns } => {
                    let vts = vts.unwrap_or_default();
                    Ok(ReadValue { value, update_index, served_by, epoch, vts, w_mean_ns })
                }
                Response::LogRejected(f) => Err(match f {
                    LogFailure::NotLeader { hint } => ReadError::NotLeader { hint },
                    LogFailure::NotInActiveSet => ReadError::NotInActiveSet,
                    LogFailure::Timeout => ReadError::Timeout,
                    LogFailure::Moved { replicas } => ReadError::Moved { replicas },
                    LogFailure::Locked => ReadError::Locked,
                    LogFailure::Unavailable | LogFailure::Invalid(_) => ReadError::Unavailable,
                }),
                _ => Err(ReadError::Unavailable),
            },
        },
        Asked::Freeze => LogReply::Frozen {
            token,
            result: match body {
                Response::ShardFrozen { snapshot: Some(s), .. } => Ok(s),
                Response::ShardFrozen { snapshot: None, .. } => {
                    Err(WriteError::Invalid("the shard is already there"))
                }
                other => Err(write_error(other)),
            },
        },
    }
}
