//! A deterministic simulation of Kairos transactions (kairos.md §5.1–§5.9, §7, §9.3), no
//! network: clients with emulated clock offsets and drift run transactions over validators
//! and storage primaries through simulated FIFO links with random delays, every choice drawn
//! from one seeded `strata_core::Prng`. The [`history::History`] it records is judged by the
//! checkers of [`check`].
//!
//! Two placements: server-side (one validator per shard, validating the shard's keys, §9.12)
//! and sharded (`V` validators by key hash). An optional client cache (§1.3) creates stale
//! reads; its [`LeasePolicy`] is one of
//!
//! * a lease policy: `Fixed(d)` (§5.14.3), `Ideal` (Algorithm 1 from the client's read
//!   statistics `R` and the `W` the primary sends with every `GetResp`), `StaticP`, `Mean`
//!   — leases on the client's own clock, no server-side state;
//! * `Naive` (§5.14.1): no expiry, dropped only by the abort and commit rules;
//! * `ExplicitInvalidation` (§5.14.2): no expiry; the primaries record sharers on every
//!   `Get` and, after applying a committed write, send `Invalidate{key, new_vts}` to each
//!   (asynchronously), and the client calls [`Cache::invalidate`].
//!
//! Validation is the fallback of every policy: stale reads never commit.
//!
//! **Strict mode** (`strict`, K5): RO transactions take `T.commit = max(max fts, now)`, and
//! a committed transaction is reported to the application only after every `DecisionAck`
//! and after the client's clock passes `T.commit + 2 eps` (`eps_ns`): the client waits in
//! simulated time and starts its next transaction only then. Every transaction records
//! when it began and when it was reported; the run records the clock error the clients
//! really had ([`history::Clocks`]), so the real-time checker applies exactly when the
//! error was within `eps`.
//!
//! Reports (§5.9) go to every validator and client, so `WM`, `fts` and `ts_GC` move as in a
//! real run.
//!
//! Not simulated: message loss and retries, failures (§5.16, §6), backups; every key is
//! cacheable.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use strata_core::Prng;
use strata_wire::txn::{Decision, TxnId};
use strata_wire::Instant;

use crate::cache::{AbortHint, Cache, Lookup};
use crate::lease::{LeaseLimits, LeasePolicy};
use crate::placement::owner;
use crate::planted::PlantedBug;
use crate::primary::{GetResp, Invalidate, Primary, PrimaryDecideOutcome};
use crate::timestamp::{
    base_ns_until, commit_wait_until, drifted_ns, freshness, ClientClock, Timestamp,
};
use crate::validator::{AbortReason, Key, ValidateReq, Validator, ValidatorEvent, Vote};
use crate::watermark::{self, Report, ReportOutcome, Watermarks};

pub mod check;
pub mod history;

use history::{
    Clocks, DecisionApplied, GcState, History, Install, Moment, Outcome, Prune, ReadRecord, Site,
    TxnKind, TxnRecord, ValidationRecord,
};

/// The global time the simulation starts at, so that clocks set 1 s behind stay positive.
const START_NS: u64 = 10_000_000_000;

/// Where validation runs (§1.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// One validator per shard, owning the shard's keys (§9.12).
    ServerSide,
    /// `validators` validators, `validator(key) = hash(key) mod V` (§4).
    Sharded { validators: usize },
}

/// Clock skew of §9.3: each client's offset uniform in `±max_offset_ns`, drift uniform in
/// `±max_drift_ppm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Skew {
    pub max_offset_ns: u64,
    pub max_drift_ppm: u64,
}

impl Skew {
    pub const NONE: Skew = Skew { max_offset_ns: 0, max_drift_ppm: 0 };
    /// §3.5 default: the paper's average skew.
    pub const PTP: Skew = Skew { max_offset_ns: 400_000, max_drift_ppm: 0 };
    /// The correctness levels of §7 inv. 1, each with drift up to 1000 ppm.
    pub const LEVELS: [Skew; 4] = [
        Skew { max_offset_ns: 0, max_drift_ppm: 1000 },
        Skew { max_offset_ns: 400_000, max_drift_ppm: 1000 },
        Skew { max_offset_ns: 10_000_000, max_drift_ppm: 1000 },
        Skew { max_offset_ns: 1_000_000_000, max_drift_ppm: 1000 },
    ];
}

#[derive(Clone, Debug)]
pub struct SimConfig {
    pub seed: u64,
    pub clients: u32,
    pub keys: u32,
    pub shards: usize,
    pub placement: Placement,
    pub skew: Skew,
    pub txns_per_client: u32,
    /// Share of read-only transactions.
    pub ro_fraction: f64,
    /// Keys per transaction: 1 ..= this.
    pub max_keys_per_txn: u32,
    /// The client cache's policy (§1.3); `None`: no cache. `ExplicitInvalidation` also
    /// turns on the primaries' sharer tracking.
    pub cache: Option<LeasePolicy>,
    /// One-way delay of every message, uniform in `[lo, hi]` ns; links are FIFO.
    pub delay_ns: (u64, u64),
    /// Chance that a `ValidateReq`, `ReplicateReq` or `Decision` is delivered twice.
    pub duplicate_chance: f64,
    pub report_period_ns: u64,
    /// Pause between a client's transactions, uniform in `[0, think_ns]`.
    pub think_ns: u64,
    /// Strict mode (K5): RO timestamps `max(max fts, now)` and the commit wait.
    pub strict: bool,
    /// Strict mode's bound on clock error: a commit is reported once the client's clock
    /// passes `T.commit + 2 eps`.
    pub eps_ns: u64,
    pub planted_bug: Option<PlantedBug>,
}

impl SimConfig {
    /// A small, contended configuration: 4 clients, 12 keys, 2 shards, server-side
    /// validation, 2 ms leases, 30 transactions per client.
    pub fn small(seed: u64, skew: Skew) -> SimConfig {
        SimConfig {
            seed,
            clients: 4,
            keys: 12,
            shards: 2,
            placement: Placement::ServerSide,
            skew,
            txns_per_client: 30,
            ro_fraction: 0.5,
            max_keys_per_txn: 3,
            cache: Some(LeasePolicy::Fixed(std::time::Duration::from_millis(2))),
            delay_ns: (20_000, 500_000),
            duplicate_chance: 0.05,
            report_period_ns: 1_000_000,
            think_ns: 200_000,
            strict: false,
            eps_ns: 400_000,
            planted_bug: None,
        }
    }

    fn validators(&self) -> usize {
        match self.placement {
            Placement::ServerSide => self.shards,
            Placement::Sharded { validators } => validators,
        }
    }
}

/// Counts of one run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    pub committed: u64,
    pub aborted: u64,
    /// Abort votes by reason name.
    pub abort_votes: BTreeMap<&'static str, u64>,
    pub cache_hits: u64,
    /// Reads served by a primary.
    pub fetches: u64,
    /// Reports a validator or client dropped as `Regressed` (0 for a correct client).
    pub regressed_reports: u64,
    /// `Invalidate` messages clients received (EI).
    pub invalidations_received: u64,
    /// Committed transactions that went through the commit wait (strict mode; the wait
    /// ends at once if the clock already passed `T.commit + 2 eps`).
    pub commit_waits: u64,
    pub final_ts_gc: Vec<Timestamp>,
    pub final_wm: Vec<Timestamp>,
    pub sim_time_ns: u64,
}

/// A finished run.
#[derive(Clone, Debug)]
pub struct SimRun {
    pub history: History,
    pub stats: SimStats,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Node {
    Client(u32),
    Validator(usize),
    Primary(usize),
}

#[derive(Clone, Debug)]
enum Msg {
    Get { key: Key },
    GetResp { key: Key, resp: GetResp },
    Validate(ValidateReq),
    VoteResp { txn: TxnId, vote: Vote },
    Replicate { txn: TxnId, commit_ts: Timestamp, writes: Vec<(Key, Option<Bytes>)> },
    ReplicateResp { txn: TxnId, ok: bool },
    Decision { txn: TxnId, decision: Decision, ts: Timestamp },
    DecisionAck { txn: TxnId },
    Report { client: u32, report: Report },
    Invalidate { key: Key, new_vts: Timestamp },
}

#[derive(Clone, Debug)]
enum Event {
    Deliver {
        from: Node,
        to: Node,
        msg: Msg,
    },
    Begin(u32),
    Report(u32),
    /// Strict mode: client, transaction record, the clock reading to wait for.
    CommitWait {
        client: u32,
        record: usize,
        until_ns: u64,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    Reading,
    Voting,
    Deciding,
}

#[derive(Clone, Debug)]
struct ActiveTxn {
    record: usize,
    /// Keys to read, in order, then keys to write.
    to_read: Vec<Key>,
    next_read: usize,
    to_write: Vec<Key>,
    /// `wm_view` when the outstanding `Get` was sent (§5.2 step 4), while one is.
    get_wm: Option<Timestamp>,
    phase: Phase,
    awaiting: BTreeSet<Node>,
    votes: Vec<Vote>,
    replicated_ok: bool,
    participants: BTreeSet<Node>,
}

#[derive(Clone, Debug)]
struct Client {
    clock: ClientClock,
    drift_ppm: i64,
    /// The client library's cache ([`crate::cache`]) with the configured policy, or of
    /// capacity 0.
    cache: Cache<Timestamp>,
    watermarks: Watermarks,
    wm_view: Timestamp,
    report_seq: u64,
    started: u32,
    txn: Option<ActiveTxn>,
    incomplete_rw: BTreeMap<TxnId, Timestamp>,
}

struct Sim {
    config: SimConfig,
    prng: Prng,
    now: u64,
    step: u64,
    queue: BTreeMap<(u64, u64), Event>,
    seq: u64,
    links: BTreeMap<(Node, Node), u64>,
    clients: Vec<Client>,
    validators: Vec<Validator>,
    primaries: Vec<Primary>,
    keys: Vec<Key>,
    history: History,
    stats: SimStats,
    active_clients: u32,
    clocks: Clocks,
}

/// Runs one simulation to the end (every transaction decided and completed).
pub fn run(config: SimConfig) -> SimRun {
    let mut prng = Prng::new(config.seed);
    let members: Vec<u32> = (0..config.clients).collect();
    let v = config.validators();
    let keys: Vec<Key> = (0..config.keys).map(|i| Bytes::from(format!("k{i}"))).collect();
    let placement = keys
        .iter()
        .map(|k| {
            let shard = owner(k, config.shards);
            let validator = match config.placement {
                Placement::ServerSide => shard,
                Placement::Sharded { validators } => owner(k, validators),
            };
            (k.clone(), validator, shard)
        })
        .collect();
    let clients = members
        .iter()
        .map(|&id| {
            let span = config.skew.max_offset_ns as i64;
            let offset = prng.range(0, 2 * span as u64 + 1) as i64 - span;
            let d = config.skew.max_drift_ppm as i64;
            let drift_ppm = prng.range(0, 2 * d as u64 + 1) as i64 - d;
            Client {
                clock: ClientClock::new(id, offset),
                drift_ppm,
                cache: match config.cache {
                    Some(policy) => Cache::new(policy, LeaseLimits::default(), usize::MAX)
                        .with_planted(config.planted_bug),
                    None => Cache::new(LeasePolicy::Naive, LeaseLimits::default(), 0),
                },
                watermarks: Watermarks::new(members.iter().copied()),
                wm_view: Timestamp::ZERO,
                report_seq: 0,
                started: 0,
                txn: None,
                incomplete_rw: BTreeMap::new(),
            }
        })
        .collect();
    let cache_policy = config.cache;
    let clocks = Clocks {
        strict_eps_ns: config.strict.then_some(config.eps_ns),
        min_error_ns: i64::MAX,
        max_error_ns: i64::MIN,
    };
    let mut sim = Sim {
        validators: (0..v)
            .map(|_| Validator::new(members.iter().copied()).with_planted_bug(config.planted_bug))
            .collect(),
        primaries: (0..config.shards)
            .map(|_| {
                Primary::new()
                    .with_sharer_tracking(config.cache == Some(LeasePolicy::ExplicitInvalidation))
                    .with_planted_bug(config.planted_bug)
            })
            .collect(),
        active_clients: config.clients,
        config,
        prng,
        now: START_NS,
        step: 0,
        queue: BTreeMap::new(),
        seq: 0,
        links: BTreeMap::new(),
        clients,
        keys,
        history: History { placement, cache_policy, ..History::default() },
        stats: SimStats::default(),
        clocks,
    };
    for c in 0..sim.config.clients {
        let think = sim.prng.range(0, sim.config.think_ns + 1);
        sim.schedule(START_NS + think, Event::Begin(c));
        let phase = sim.prng.range(0, sim.config.report_period_ns + 1);
        sim.schedule(START_NS + phase, Event::Report(c));
    }
    while let Some(((at, _), event)) = sim.queue.pop_first() {
        sim.now = at;
        sim.step += 1;
        sim.handle(event);
    }
    sim.finish()
}

impl Sim {
    fn moment(&self) -> Moment {
        Moment { step: self.step, ns: self.now }
    }

    fn schedule(&mut self, at: u64, event: Event) {
        self.seq += 1;
        self.queue.insert((at, self.seq), event);
    }

    /// Sends over the FIFO link `from -> to` (§4: reliable FIFO channels).
    fn send(&mut self, from: Node, to: Node, msg: Msg) {
        let (lo, hi) = self.config.delay_ns;
        let mut at = self.now + self.prng.range(lo, hi + 1);
        let last = self.links.entry((from, to)).or_insert(0);
        at = at.max(*last);
        *last = at;
        self.schedule(at, Event::Deliver { from, to, msg });
    }

    /// Sends, and with `duplicate_chance` sends the same message again (a retry).
    fn send_maybe_twice(&mut self, from: Node, to: Node, msg: Msg) {
        if self.prng.chance(self.config.duplicate_chance) {
            self.send(from, to, msg.clone());
        }
        self.send(from, to, msg);
    }

    /// The client's physical clock (§9.3): global time plus its drift since the start.
    fn physical(&self, c: u32) -> u64 {
        drifted_ns(self.now, START_NS, self.clients[c as usize].drift_ppm)
    }

    fn client_now(&mut self, c: u32) -> u64 {
        let physical = self.physical(c);
        let now = self.clients[c as usize].clock.now(physical);
        self.note_clock(now);
        now
    }

    /// Records a client clock reading's error against global time (§7 inv. 11).
    fn note_clock(&mut self, reading: u64) {
        let error = reading as i64 - self.now as i64;
        self.clocks.min_error_ns = self.clocks.min_error_ns.min(error);
        self.clocks.max_error_ns = self.clocks.max_error_ns.max(error);
    }

    fn owners(&self, key: &[u8]) -> (usize, usize) {
        self.history.owners(key).expect("a simulated key")
    }

    fn bug(&self, b: PlantedBug) -> bool {
        self.config.planted_bug == Some(b)
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Begin(c) => self.begin(c),
            Event::Report(c) => self.report(c),
            Event::CommitWait { client, record, until_ns } => {
                self.commit_wait(client, record, until_ns)
            }
            Event::Deliver { from, to, msg } => match to {
                Node::Client(c) => self.at_client(c, from, msg),
                Node::Validator(v) => self.at_validator(v, from, msg),
                Node::Primary(p) => self.at_primary(p, from, msg),
            },
        }
    }

    // ---- clients ----

    fn pick_key(&mut self) -> Key {
        // Skewed towards the first keys (u^2), so some keys are hot.
        let u = self.prng.unit();
        let i = ((u * u) * f64::from(self.config.keys)) as usize;
        self.keys[i.min(self.keys.len() - 1)].clone()
    }

    fn begin(&mut self, c: u32) {
        let client = &mut self.clients[c as usize];
        if client.started == self.config.txns_per_client {
            self.active_clients -= 1;
            return;
        }
        client.started += 1;
        let id = TxnId { client_id: u64::from(c), base: u64::from(client.started) };
        let n = self.prng.range(1, u64::from(self.config.max_keys_per_txn) + 1) as usize;
        let mut chosen: Vec<Key> = Vec::new();
        while chosen.len() < n {
            let k = self.pick_key();
            if !chosen.contains(&k) {
                chosen.push(k);
            }
        }
        let read_only = self.prng.chance(self.config.ro_fraction);
        let (mut to_read, mut to_write) = (Vec::new(), Vec::new());
        for k in chosen {
            if read_only {
                to_read.push(k);
                continue;
            }
            let (r, w) = (self.prng.chance(0.7), self.prng.chance(0.5));
            if r || !w {
                to_read.push(k.clone());
            }
            if w {
                to_write.push(k);
            }
        }
        if !read_only && to_write.is_empty() {
            to_write.push(to_read.last().expect("at least one key").clone());
        }
        self.history.txns.push(TxnRecord {
            id,
            client: c,
            kind: if to_write.is_empty() { TxnKind::ReadOnly } else { TxnKind::ReadWrite },
            reads: Vec::new(),
            writes: Vec::new(),
            commit_ts: Timestamp::ZERO,
            freshness: None,
            outcome: None,
            decided_at: None,
            begun_at: self.moment(),
            reported_at: None,
        });
        self.clients[c as usize].txn = Some(ActiveTxn {
            record: self.history.txns.len() - 1,
            to_read,
            next_read: 0,
            to_write,
            get_wm: None,
            phase: Phase::Reading,
            awaiting: BTreeSet::new(),
            votes: Vec::new(),
            replicated_ok: true,
            participants: BTreeSet::new(),
        });
        self.continue_reads(c);
    }

    /// §5.2 Algorithm 2 for the next reads: cache hits at once, a miss sends a `Get`.
    fn continue_reads(&mut self, c: u32) {
        loop {
            let t = self.clients[c as usize].txn.as_ref().expect("a transaction");
            let Some(key) = t.to_read.get(t.next_read).cloned() else { break };
            let now = self.client_now(c);
            let at = self.moment();
            let caching = self.config.cache.is_some();
            let client = &mut self.clients[c as usize];
            if caching {
                // §5.10: `R` counts each transaction's first read of a cacheable key.
                client.cache.record_read(&key, Instant::from_nanos(now));
            }
            match client.cache.lookup(&key, Instant::from_nanos(now)) {
                Lookup::Hit(e) => {
                    let read = ReadRecord {
                        key,
                        value: e.value.clone(),
                        vts: e.vts,
                        fts: e.fts,
                        cache_hit: true,
                        lease: Some((Instant::from_nanos(now), e.lts)),
                        at,
                    };
                    let t = client.txn.as_mut().expect("a transaction");
                    t.next_read += 1;
                    self.history.txns[t.record].reads.push(read);
                    self.stats.cache_hits += 1;
                }
                Lookup::Miss => {
                    // Absent, or past its lease (self-invalidation: the cache dropped it).
                    let t = client.txn.as_mut().expect("a transaction");
                    t.get_wm = Some(client.wm_view); // read the view BEFORE sending the Get
                    let shard = self.owners(&key).1;
                    self.send(Node::Client(c), Node::Primary(shard), Msg::Get { key });
                    return;
                }
            }
        }
        self.commit(c);
    }

    fn on_get_resp(&mut self, c: u32, key: Key, resp: GetResp) {
        self.stats.fetches += 1;
        let now = self.client_now(c);
        let at = self.moment();
        let client = &mut self.clients[c as usize];
        let t = client.txn.as_mut().expect("a transaction");
        assert_eq!(t.phase, Phase::Reading);
        let wm = t.get_wm.take().expect("a Get outstanding");
        t.next_read += 1;
        let record = t.record;
        let fetched = Instant::from_nanos(now);
        let fts = client
            .cache
            .on_fetch(key.clone(), resp.value.clone(), resp.vts, wm, resp.w_mean, fetched)
            .fts;
        self.history.txns[record].reads.push(ReadRecord {
            key,
            value: resp.value,
            vts: resp.vts,
            fts,
            cache_hit: false,
            lease: None,
            at,
        });
        self.continue_reads(c);
    }

    /// §5.4 and phase 1 of §5.5.
    fn commit(&mut self, c: u32) {
        let physical = self.physical(c);
        let unbumped =
            self.bug(PlantedBug::NoTimestampBump) || self.bug(PlantedBug::ClientSkipsTimestampBump);
        let strict = self.config.strict;
        let client = &mut self.clients[c as usize];
        let t = client.txn.as_mut().expect("a transaction");
        let rec = &mut self.history.txns[t.record];
        for k in &t.to_write {
            rec.writes.push((
                k.clone(),
                Some(Bytes::from(format!("{}:{}", rec.id, String::from_utf8_lossy(k)))),
            ));
        }
        rec.freshness = freshness(rec.reads.iter().map(|r| r.fts));
        rec.commit_ts = match rec.kind {
            TxnKind::ReadOnly => client
                .clock
                .ro_commit_ts(rec.reads.iter().map(|r| r.fts), strict.then_some(physical))
                .expect("a read-only transaction read something"),
            TxnKind::ReadWrite if unbumped => client.clock.rw_commit_ts_unbumped(physical),
            TxnKind::ReadWrite => {
                client.clock.rw_commit_ts(physical, rec.reads.iter().map(|r| r.vts))
            }
        };
        if rec.kind == TxnKind::ReadWrite {
            // Issued and registered in one step (§5.9, first bullet).
            client.incomplete_rw.insert(rec.id, rec.commit_ts);
        }
        t.phase = Phase::Voting;
        let rec = rec.clone();
        if let Some(reading) = client.clock.last_now() {
            self.note_clock(reading);
        }
        let mut per_validator: BTreeMap<usize, ValidateReq> = BTreeMap::new();
        let mut per_primary: BTreeMap<usize, Vec<(Key, Option<Bytes>)>> = BTreeMap::new();
        let blank = |txn| ValidateReq {
            txn,
            commit_ts: rec.commit_ts,
            freshness: rec.freshness,
            read_only: rec.kind == TxnKind::ReadOnly,
            reads: Vec::new(),
            writes: Vec::new(),
        };
        for r in &rec.reads {
            let v = self.owners(&r.key).0;
            per_validator
                .entry(v)
                .or_insert_with(|| blank(rec.id))
                .reads
                .push((r.key.clone(), r.vts));
        }
        for (k, value) in &rec.writes {
            let (v, s) = self.owners(k);
            per_validator.entry(v).or_insert_with(|| blank(rec.id)).writes.push(k.clone());
            per_primary.entry(s).or_default().push((k.clone(), value.clone()));
        }
        let t = self.clients[c as usize].txn.as_mut().expect("a transaction");
        t.awaiting = per_validator
            .keys()
            .map(|v| Node::Validator(*v))
            .chain(per_primary.keys().map(|p| Node::Primary(*p)))
            .collect();
        t.participants = t.awaiting.clone();
        for (v, req) in per_validator {
            self.send_maybe_twice(Node::Client(c), Node::Validator(v), Msg::Validate(req));
        }
        for (p, writes) in per_primary {
            let msg = Msg::Replicate { txn: rec.id, commit_ts: rec.commit_ts, writes };
            self.send_maybe_twice(Node::Client(c), Node::Primary(p), msg);
        }
    }

    fn at_client(&mut self, c: u32, from: Node, msg: Msg) {
        match msg {
            Msg::GetResp { key, resp } => self.on_get_resp(c, key, resp),
            Msg::VoteResp { txn, vote } => self.on_phase1_answer(c, from, txn, Some(vote), true),
            Msg::ReplicateResp { txn, ok } => self.on_phase1_answer(c, from, txn, None, ok),
            Msg::DecisionAck { txn } => self.on_decision_ack(c, from, txn),
            Msg::Invalidate { key, new_vts } => {
                // §5.14.2: drop the entry if it is older than the new version.
                self.stats.invalidations_received += 1;
                self.clients[c as usize].cache.invalidate(&key, new_vts);
            }
            Msg::Report { client, report } => {
                let cl = &mut self.clients[c as usize];
                if cl.watermarks.on_report(client, report) == ReportOutcome::Regressed {
                    self.stats.regressed_reports += 1;
                }
                cl.wm_view = cl.wm_view.max(cl.watermarks.wm());
            }
            other => unreachable!("a client got {other:?}"),
        }
    }

    fn on_phase1_answer(&mut self, c: u32, from: Node, txn: TxnId, vote: Option<Vote>, ok: bool) {
        let at = self.moment();
        let Some(t) = self.clients[c as usize].txn.as_mut() else { return };
        if self.history.txns[t.record].id != txn
            || t.phase != Phase::Voting
            || !t.awaiting.remove(&from)
        {
            return; // the answer to a duplicate
        }
        if let Some(v) = vote {
            t.votes.push(v);
        }
        t.replicated_ok &= ok;
        if !t.awaiting.is_empty() {
            return;
        }
        // Decide and log (§5.5), then phase 2.
        let commit = t.replicated_ok && t.votes.iter().all(|v| *v == Vote::Commit);
        let decision = if commit { Decision::Commit } else { Decision::Abort };
        let rec = &mut self.history.txns[t.record];
        rec.outcome = Some(if commit {
            Outcome::Committed
        } else {
            Outcome::Aborted(t.votes.iter().filter(|v| **v != Vote::Commit).cloned().collect())
        });
        rec.decided_at = Some(at);
        if !(commit && self.config.strict) {
            // §5.5: reported as soon as the decision is logged (strict mode: a commit waits).
            rec.reported_at = Some(at);
        }
        let (ts, writes) = (rec.commit_ts, rec.writes.clone());
        if commit {
            self.stats.committed += 1;
        } else {
            self.stats.aborted += 1;
        }
        t.phase = Phase::Deciding;
        t.awaiting = t.participants.clone();
        let votes = t.votes.clone();
        let participants = t.participants.clone();
        let client = &mut self.clients[c as usize];
        if !commit {
            client.incomplete_rw.remove(&txn); // an aborted transaction is complete (§9.11)
        }
        // Cache upkeep after the decision (§5.5 [DECISION]s).
        client.cache.on_abort(votes.iter().filter_map(|v| match v {
            Vote::Abort(AbortReason::Stale { key } | AbortReason::PreparedConflict { key }) => {
                Some(AbortHint::Stale(key))
            }
            Vote::Abort(AbortReason::TooOld { ts_gc }) => Some(AbortHint::TooOld(*ts_gc)),
            _ => None,
        }));
        if commit {
            client.cache.on_commit(writes.iter().map(|(k, _)| &k[..]));
        }
        for p in participants {
            if let (Node::Primary(0), true) =
                (p, commit && self.bug(PlantedBug::PrimaryLosesCommit))
            {
                // The canary's lossy link: acknowledged, never applied.
                self.send(p, Node::Client(c), Msg::DecisionAck { txn });
                continue;
            }
            self.send_maybe_twice(Node::Client(c), p, Msg::Decision { txn, decision, ts });
        }
    }

    fn on_decision_ack(&mut self, c: u32, from: Node, txn: TxnId) {
        let Some(t) = self.clients[c as usize].txn.as_mut() else { return };
        if self.history.txns[t.record].id != txn
            || t.phase != Phase::Deciding
            || !t.awaiting.remove(&from)
        {
            return;
        }
        if !t.awaiting.is_empty() {
            return;
        }
        // Complete (§9.11): every participant applied the decision.
        let record = t.record;
        let client = &mut self.clients[c as usize];
        client.incomplete_rw.remove(&txn);
        client.txn = None;
        let rec = &self.history.txns[record];
        if rec.reported_at.is_some() {
            self.next_txn(c);
        } else if self.bug(PlantedBug::NoCommitWait) {
            self.history.txns[record].reported_at = Some(self.moment());
            self.next_txn(c);
        } else {
            // Strict mode (K5 (b)): the commit wait, on the client's own clock.
            self.stats.commit_waits += 1;
            let until_ns = commit_wait_until(rec.commit_ts, self.config.eps_ns);
            self.commit_wait(c, record, until_ns);
        }
    }

    /// Strict mode: report the commit once the client's clock reads `until_ns`, else wait
    /// (in simulated time) until it should and look again.
    fn commit_wait(&mut self, c: u32, record: usize, until_ns: u64) {
        let now = self.client_now(c);
        if now >= until_ns {
            self.history.txns[record].reported_at = Some(self.moment());
            self.next_txn(c);
            return;
        }
        // The clock runs at 1 + drift of global time.
        let at = self.now + base_ns_until(now, until_ns, self.clients[c as usize].drift_ppm);
        self.schedule(at, Event::CommitWait { client: c, record, until_ns });
    }

    /// The think time, then the client's next transaction.
    fn next_txn(&mut self, c: u32) {
        let think = self.prng.range(0, self.config.think_ns + 1);
        self.schedule(self.now + think, Event::Begin(c));
    }

    /// §5.9: the client's report, to every validator and client.
    fn report(&mut self, c: u32) {
        if self.active_clients == 0 {
            return;
        }
        let now = self.client_now(c);
        let ignore_in_flight = self.bug(PlantedBug::LocalWmIgnoresInFlight);
        let centiman = self.bug(PlantedBug::GcUnsafe);
        let client = &mut self.clients[c as usize];
        let local_wm = if ignore_in_flight {
            watermark::local_wm(now, [])
        } else {
            watermark::local_wm(now, client.incomplete_rw.values().copied())
        };
        let live_reads: Vec<Timestamp> = client
            .txn
            .as_ref()
            // The read set, and the `fts` floor of a fetch still in flight: its answer joins
            // the read set after this report (Strata's addition to §5.9).
            .map(|t| {
                self.history.txns[t.record].reads.iter().map(|r| r.fts).chain(t.get_wm).collect()
            })
            .unwrap_or_default();
        let c_freshness = if centiman {
            client.wm_view
        } else {
            watermark::c_freshness(client.wm_view, client.cache.min_fts(), live_reads)
        };
        client.report_seq += 1;
        let report = Report { seq: client.report_seq, local_wm, c_freshness };
        for v in 0..self.validators.len() {
            self.send(Node::Client(c), Node::Validator(v), Msg::Report { client: c, report });
        }
        for other in 0..self.config.clients {
            self.send(Node::Client(c), Node::Client(other), Msg::Report { client: c, report });
        }
        let next = self.now + self.config.report_period_ns;
        self.schedule(next, Event::Report(c));
    }

    // ---- validators and primaries ----

    fn at_validator(&mut self, v: usize, from: Node, msg: Msg) {
        let at = self.moment();
        match msg {
            Msg::Validate(req) => {
                let ts_gc = self.validators[v].ts_gc();
                let vote = self.validators[v].validate(&req);
                if let Vote::Abort(r) = &vote {
                    *self.stats.abort_votes.entry(reason_name(r)).or_default() += 1;
                }
                self.history.validations.push(ValidationRecord {
                    validator: v,
                    txn: req.txn,
                    at,
                    vote: vote.clone(),
                    freshness: req.freshness,
                    ts_gc,
                    reads: req.reads.clone(),
                    writes: req.writes.clone(),
                });
                self.send(Node::Validator(v), from, Msg::VoteResp { txn: req.txn, vote });
            }
            Msg::Decision { txn, decision, ts } => {
                self.validators[v].decide(txn, decision, ts);
                self.history.decisions.push(DecisionApplied { site: Site::Validator(v), txn, at });
                self.send(Node::Validator(v), from, Msg::DecisionAck { txn });
            }
            Msg::Report { client, report } => {
                if self.validators[v].on_report(client, report) == ReportOutcome::Regressed {
                    self.stats.regressed_reports += 1;
                }
                let (wm, ts_gc) = (self.validators[v].wm(), self.validators[v].ts_gc());
                self.history.gc_states.push(GcState { validator: v, at, wm, ts_gc });
            }
            other => unreachable!("a validator got {other:?}"),
        }
        for e in self.validators[v].take_events() {
            match e {
                ValidatorEvent::Installed { key, ts, txn } => self.history.installs.push(Install {
                    site: Site::Validator(v),
                    key,
                    ts,
                    txn,
                    at,
                }),
                ValidatorEvent::Pruned { key, version, ts_gc } => {
                    self.history.prunes.push(Prune { validator: v, key, version, ts_gc, at })
                }
            }
        }
        self.validators[v].check_invariants();
    }

    fn at_primary(&mut self, p: usize, from: Node, msg: Msg) {
        let at = self.moment();
        match msg {
            Msg::Get { key } => {
                let Node::Client(c) = from else { unreachable!("a Get from {from:?}") };
                let resp = self.primaries[p].get_for(&key, c);
                self.send(Node::Primary(p), from, Msg::GetResp { key, resp });
            }
            Msg::Replicate { txn, commit_ts, writes } => {
                let ok = self.primaries[p].replicate(txn, commit_ts, writes);
                self.send(Node::Primary(p), from, Msg::ReplicateResp { txn, ok });
            }
            Msg::Decision { txn, decision, .. } => {
                if let PrimaryDecideOutcome::Committed { installed, superseded } =
                    self.primaries[p].decide(txn, decision)
                {
                    let site = Site::Primary(p);
                    for (key, ts) in installed {
                        self.history.installs.push(Install { site, key, ts, txn, at });
                    }
                    for (key, ts) in superseded {
                        self.history.superseded.push(Install { site, key, ts, txn, at });
                    }
                }
                self.history.decisions.push(DecisionApplied { site: Site::Primary(p), txn, at });
                self.send(Node::Primary(p), from, Msg::DecisionAck { txn });
                // EI (§5.7): after the commit is applied, not waited for.
                for Invalidate { client, key, new_vts } in self.primaries[p].take_invalidations() {
                    let msg = Msg::Invalidate { key, new_vts };
                    self.send(Node::Primary(p), Node::Client(client), msg);
                }
            }
            other => unreachable!("a primary got {other:?}"),
        }
    }

    fn finish(mut self) -> SimRun {
        for (i, v) in self.validators.iter().enumerate() {
            for (_, txn) in v.prepared_writes() {
                self.history.leftover_prepared.push((Site::Validator(i), txn));
            }
            self.stats.final_ts_gc.push(v.ts_gc());
            self.stats.final_wm.push(v.wm());
        }
        for (i, p) in self.primaries.iter().enumerate() {
            for txn in p.prepared().keys() {
                self.history.leftover_prepared.push((Site::Primary(i), *txn));
            }
            self.history.sharers.push(p.sharer_stats());
        }
        self.history.clocks = self.clocks;
        self.stats.sim_time_ns = self.now - START_NS;
        SimRun { history: self.history, stats: self.stats }
    }
}

/// A short name of an abort reason, for statistics.
pub fn reason_name(r: &AbortReason) -> &'static str {
    match r {
        AbortReason::Stale { .. } => "stale",
        AbortReason::PreparedConflict { .. } => "prepared",
        AbortReason::ReadWriteConflict { .. } => "read-write",
        AbortReason::WriteWriteConflict { .. } => "write-write",
        AbortReason::TimestampOrder { .. } => "timestamp-order",
        AbortReason::TooOld { .. } => "too-old",
        AbortReason::Refused => "refused",
        AbortReason::Recovering => "recovering",
    }
}
