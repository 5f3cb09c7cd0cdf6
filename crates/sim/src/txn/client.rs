//! A simulated transaction client, speaking the wire protocol as `strata_client::txn` does:
//! reads at the keys' shard leaders (waiting while a key is locked), one prepare per
//! participant in parallel under a block of RPC ids, the decision from the votes, decisions
//! in parallel, the block acknowledged after them. It runs transfers between two accounts
//! (read both, move one unit if the source has it), read-only transactions and plain reads,
//! and records what it saw for the checkers. Faults of its own: it may crash for good, or pause
//! past `T_TX`, right after its first prepare is answered.
//!
//! Routing follows shard moves as the client library's tables do (rifl.md §5.7 step 4): a
//! `Moved { replicas }` answer names the shard's new group, and the request (the same RPC id)
//! goes to those replicas in turn from then on; a `NotLeader` hint goes to the hinted node.
//!
//! On a Kairos table ([`super::TxnMode`]) the same rounds carry Kairos's timestamps and
//! objects, and the client reports its watermarks ([`super::kairos`]); reads never wait for
//! a prepared write there (kairos.md §5.3), and one more fault of its own: it may stall, its
//! reports stopped, between its reads and its prepares.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use strata_core::Prng;
use strata_rifl::{RequestTracker, WINDOW};
use strata_wire::client::{ClientRequest, ClientResponse, LogFailure, Request, Response};
use strata_wire::log::{Expect, LogIndex};
use strata_wire::rifl::{LeaseInfo, LeaseStatus, Rifl, RpcId};
use strata_wire::txn::{
    AbortReason, Decision, ReadIntent, Timestamp, TxnAction, TxnId, TxnObject, TxnOp, Vote,
};
use strata_wire::Instant;

use super::kairos::{self, KairosSide};
use super::{Layout, Part};
use crate::host::HostCluster;

/// An unanswered request is sent again (to the next node) after this long.
const RETRY_AFTER: Duration = Duration::from_millis(150);
/// A client's pace: how often it looks at its requests.
const STEP: Duration = Duration::from_millis(5);
/// The share of RIFL transfers dropped after their reads for update (`drop_transaction`).
const DROP_CHANCE: f64 = 0.05;

/// What the client knew of a transaction's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Known {
    Committed,
    Aborted,
    /// The client crashed (or the run ended) before it decided.
    Unknown,
}

/// One read as its client saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    pub key: Bytes,
    pub value: Option<Bytes>,
    /// The value's log index (its RIFL version).
    pub version: LogIndex,
    /// Kairos: the value's version timestamp (`ZERO` elsewhere) and the read's `fts`
    /// (kairos.md §5.2).
    pub vts: Timestamp,
    pub fts: Timestamp,
    /// When the answer arrived.
    pub at: Instant,
    /// Kairos: a cache hit's client clock reading and its entry's lease end (kairos.md §7
    /// inv. 10); `None` for a read fetched from the shard.
    pub hit: Option<(Instant, Instant)>,
}

/// A Kairos transaction's timestamps (kairos.md §5.1), once it prepares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub commit_ts: Timestamp,
    pub freshness: Option<Timestamp>,
    pub read_only: bool,
}

/// One transaction (or plain read) as its client saw it.
#[derive(Clone, Debug)]
pub struct TxnRecord {
    pub client: usize,
    /// `None` for a plain read.
    pub txn: Option<TxnId>,
    pub invoked: Instant,
    /// When it ended; for a transaction with a known outcome, when the client decided.
    pub completed: Instant,
    pub outcome: Known,
    pub reads: Vec<Read>,
    /// `(key, value)` of every write.
    pub writes: Vec<(Bytes, Bytes)>,
    /// Every vote the client received.
    pub votes: Vec<(u64, Vote)>,
    /// An answer the workload does not expect (a protocol failure), if one ended it.
    pub failure: Option<String>,
    /// Kairos: the timestamps it prepared with.
    pub kairos: Option<Stamp>,
    /// When the outcome was reported to the application: `completed`, except for a strict
    /// Kairos commit, reported after its commit wait (K5).
    pub reported: Instant,
}

impl TxnRecord {
    fn new(client: usize, invoked: Instant) -> TxnRecord {
        TxnRecord {
            client,
            txn: None,
            invoked,
            completed: invoked,
            outcome: Known::Unknown,
            reads: Vec::new(),
            writes: Vec::new(),
            votes: Vec::new(),
            failure: None,
            kairos: None,
            reported: invoked,
        }
    }
}

/// A fault the client plays on itself once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientFault {
    /// Stops for good once its first prepare is answered (a coordinator crash).
    CrashAfterPrepare,
    /// Sleeps this long once its first prepare is answered, then carries on.
    PauseAfterPrepare(Duration),
    /// Kairos: stops between its first transaction's reads and its prepares, its watermark
    /// reports stopped too, so leaders drop its report and `ts_GC` can pass its reads
    /// (kairos.md §6.5): its prepare must then vote `TooOld` (§5.6 step 1). For at most this
    /// long; the harness wakes it once its validators announced a `ts_GC` above its reads
    /// ([`TxnClient::stalled`]).
    StallBeforePrepare(Duration),
}

enum Phase {
    Think,
    Read {
        keys: Vec<Bytes>,
        next: usize,
        /// Kairos: `wm_view` when the read was sent (kairos.md §5.2).
        wm: Timestamp,
    },
    /// Between the last read and the prepares: the application computes (0-5 ms), which
    /// leaves room for other transactions to change what it read.
    Compute,
    Prepare {
        waiting: BTreeMap<Part, ()>,
    },
    Decide {
        waiting: BTreeMap<Part, ()>,
    },
    /// Kairos strict mode: committed, not reported before the commit wait (K5).
    CommitWait,
    Crashed,
    Finished,
}

struct Pending {
    corr: u64,
    node: usize,
    /// When it is sent again if unanswered.
    due: Instant,
    /// A refusal chose the node to send it to next (else a time-out rotates).
    chosen: bool,
    rifl: Option<Rifl>,
    body: Request,
}

/// The transaction being run.
struct Current {
    record: TxnRecord,
    base: u64,
    objects: Vec<TxnObject>,
    /// By participant: its ops.
    parts: BTreeMap<Part, Vec<TxnOp>>,
    read_only: bool,
    plain: bool,
    /// Every participant answered `decided` (its prepare held every object and decided at once).
    decided: bool,
}

pub struct TxnClient {
    pub index: usize,
    keys: Vec<Bytes>,
    layout: Layout,
    nodes: usize,
    lease: LeaseStatus,
    tracker: RequestTracker,
    rng: Prng,
    phase: Phase,
    current: Option<Current>,
    /// Requests in flight, by the participant (or key's shard, for reads) they are for.
    pending: BTreeMap<Part, Pending>,
    leader: BTreeMap<Part, usize>,
    /// The replicas of each shard a `Moved` answer named (module docs); every node otherwise.
    placement: BTreeMap<Part, Vec<usize>>,
    txns_left: u32,
    next_corr: u64,
    fault: Option<ClientFault>,
    sleep_until: Option<Instant>,
    /// The sleep is a fault's (a stopped process): no watermark reports either.
    stopped: bool,
    /// The sleep is [`ClientFault::StallBeforePrepare`]'s.
    stalled: bool,
    /// Answers that arrived while the client slept: a paused process reads them on waking.
    deferred: Vec<ClientResponse>,
    /// The lease is renewed this often (a quarter of its term), as the client library does;
    /// the renewal in flight, if any.
    renew_every: Duration,
    next_renew: Instant,
    renewal: Option<Pending>,
    /// A plain read of a key the last transaction wrote, sent as soon as its commit returned,
    /// while its decisions are on their way (what an application does next): it must see the
    /// write (§5.9: it waits for the decision).
    follow: Option<(Pending, TxnRecord)>,
    /// On a Kairos table: the clock, watermarks and reports.
    kairos: Option<KairosSide>,
    /// Kairos: no transaction before the harness says every client has registered
    /// ([`TxnClient::open`]).
    gated: bool,
    pub done: Vec<TxnRecord>,
    /// Reads of several keys answered (`LogReadMany`).
    pub reads_together: u64,
    /// Transfers given up after their reads for update, before any prepare (as an
    /// application drops a transaction): their reservations released.
    pub dropped: u64,
}

impl TxnClient {
    /// Client `index` of `layout`'s tables (`kairos`: on a Kairos table).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        index: usize,
        layout: &Layout,
        keys: Vec<Bytes>,
        nodes: usize,
        lease: LeaseStatus,
        txns: u32,
        fault: Option<ClientFault>,
        renew_every: Duration,
        rng: Prng,
        kairos: Option<KairosSide>,
    ) -> TxnClient {
        TxnClient {
            index,
            keys,
            layout: layout.clone(),
            nodes,
            lease,
            tracker: RequestTracker::new(WINDOW),
            rng,
            phase: Phase::Think,
            current: None,
            pending: BTreeMap::new(),
            leader: BTreeMap::new(),
            placement: BTreeMap::new(),
            txns_left: txns,
            next_corr: (index as u64 + 1) << 40,
            fault,
            sleep_until: None,
            stopped: false,
            stalled: false,
            deferred: Vec::new(),
            renew_every,
            next_renew: Instant::ZERO,
            renewal: None,
            follow: None,
            gated: kairos.is_some(),
            kairos,
            done: Vec::new(),
            reads_together: 0,
            dropped: 0,
        }
    }

    /// While the client stalls before its prepares ([`ClientFault::StallBeforePrepare`]):
    /// its read set's freshness and the participants that will validate it.
    pub fn stalled(&self) -> Option<(Timestamp, Vec<Part>)> {
        let cur = self.current.as_ref().filter(|_| self.stalled)?;
        let freshness = cur.record.reads.iter().map(|r| r.fts).min()?;
        let validating = self.layout.validating();
        let parts = cur.record.reads.iter().map(|r| self.layout.part(validating, &r.key));
        Some((freshness, parts.collect()))
    }

    /// Ends a stall before its time (the harness: its validators' `ts_GC` passed its reads).
    pub fn wake(&mut self, now: Instant) {
        if self.stalled {
            self.sleep_until = Some(now);
        }
    }

    /// Kairos: whether every shard answered this client's reports (or it waited long enough).
    pub fn registered(&self, now: Instant) -> bool {
        self.kairos.as_ref().is_none_or(|k| k.registered(now))
    }

    /// Kairos: transactions may start (every client registered: the spec's static membership,
    /// so that no client's transaction commits below a `WM` that did not know it).
    pub fn open(&mut self) {
        self.gated = false;
        if let Some(k) = self.kairos.as_mut() {
            k.listen();
        }
    }

    /// The shard a watermark report in flight (correlation id `corr`) went to.
    pub fn report_part(&self, corr: u64) -> Option<Part> {
        Some(self.kairos.as_ref()?.report_target(corr)?.0)
    }

    pub fn finished(&self) -> bool {
        matches!(self.phase, Phase::Finished | Phase::Crashed)
    }

    /// The transaction under way when the run ends: recorded with an unknown outcome (a
    /// strict commit still in its commit wait keeps its outcome, never reported).
    pub fn abandon(&mut self, now: Instant) {
        if let Some(mut cur) = self.current.take() {
            if matches!(self.phase, Phase::CommitWait) {
                cur.record.reported = now;
                self.done.push(cur.record);
            } else if !cur.plain && !matches!(self.phase, Phase::Read { .. } | Phase::Think) {
                (cur.record.completed, cur.record.reported) = (now, now);
                cur.record.outcome = Known::Unknown;
                self.done.push(cur.record);
            }
        }
    }

    /// Periodic work: start the next transaction, resend what waited too long.
    pub fn poll(&mut self, c: &mut HostCluster, now: Instant) {
        if self.finished() {
            return;
        }
        c.wake_client_at(self.index, now + STEP);
        if self.sleep_until.is_some_and(|t| now < t) {
            if !self.stopped {
                self.report(c, now);
            }
            return;
        }
        self.sleep_until = None;
        self.stopped = false;
        self.stalled = false;
        for resp in std::mem::take(&mut self.deferred) {
            self.on_response(c, now, resp);
        }
        self.renew(c, now);
        self.report(c, now);
        match self.phase {
            Phase::Think => return self.start(c, now),
            Phase::Compute => return self.prepare(c, now),
            Phase::Prepare { .. } => self.decide_if_voted(c, now),
            Phase::CommitWait => return self.finish(now),
            _ => {}
        }
        let stale: Vec<Part> =
            self.pending.iter().filter(|(_, p)| now >= p.due).map(|(s, _)| *s).collect();
        for part in stale {
            self.resend(c, now, part);
        }
        let due = self.follow.as_ref().filter(|(p, _)| now >= p.due);
        if let Some(next) =
            due.map(|(p, _)| self.after(part_of_body(&self.layout, &p.body), p.node))
        {
            let (p, _) = self.follow.as_mut().expect("due");
            p.node = next;
            p.due = now + RETRY_AFTER;
            self.next_corr += 1;
            p.corr = self.next_corr;
            let req = ClientRequest { corr: p.corr, rifl: None, body: p.body.clone() };
            c.send_request(self.index, p.node, req);
        }
    }

    fn start(&mut self, c: &mut HostCluster, now: Instant) {
        if self.txns_left == 0 {
            self.phase = Phase::Finished;
            return;
        }
        if self.gated {
            return; // kairos.md §5.9: not before every client's first reports were heard
        }
        self.txns_left -= 1;
        let pick =
            |rng: &mut Prng, keys: &[Bytes]| keys[rng.range(0, keys.len() as u64) as usize].clone();
        let (keys, plain, witness) = match self.rng.range(0, 10) {
            0..=5 => {
                let a = pick(&mut self.rng, &self.keys);
                let mut b = pick(&mut self.rng, &self.keys);
                while b == a {
                    b = pick(&mut self.rng, &self.keys);
                }
                let mut keys = vec![a, b];
                // Kairos: half the transfers also read a third account they do not write (a
                // witness, as a guard or a rate would be), so a read-write transaction's
                // reads are not all its writes (kairos.md §5.6 steps 2-3, §7 inv. 5).
                let witness = self.kairos.is_some() && self.rng.chance(0.5);
                if witness {
                    let mut c = pick(&mut self.rng, &self.keys);
                    while keys.contains(&c) {
                        c = pick(&mut self.rng, &self.keys);
                    }
                    keys.push(c);
                }
                (keys, false, witness)
            }
            6..=7 => {
                let mut ks: Vec<Bytes> = (0..3).map(|_| pick(&mut self.rng, &self.keys)).collect();
                ks.sort();
                ks.dedup();
                (ks, false, false)
            }
            _ => (vec![pick(&mut self.rng, &self.keys)], true, false),
        };
        let record = TxnRecord::new(self.index, now);
        let transfer = !plain && (keys.len() == 2 || witness);
        if let Some(k) = self.kairos.as_mut().filter(|_| !plain) {
            k.begin_reads();
        }
        self.current = Some(Current {
            record,
            base: 0,
            objects: Vec::new(),
            parts: BTreeMap::new(),
            read_only: !transfer,
            plain,
            decided: true,
        });
        self.phase = Phase::Read { keys, next: 0, wm: Timestamp::ZERO };
        self.read_next(c, now);
    }

    /// Sends the next read, unless the Kairos cache serves it (module docs of `kairos`).
    fn read_next(&mut self, c: &mut HostCluster, now: Instant) {
        let view = self.kairos.as_ref().map_or(Timestamp::ZERO, KairosSide::wm_view);
        let plain = self.current.as_ref().is_some_and(|cur| cur.plain);
        let writes = self.current.as_ref().is_some_and(|cur| !cur.read_only);
        let reserver = self.current.as_ref().map_or(0, |cur| self.reserver(cur));
        let Phase::Read { keys, next, wm } = &mut self.phase else { return };
        *wm = view;
        let key = keys[*next].clone();
        // Plain reads are not validated: never from the cache.
        let hit = self.kairos.as_mut().filter(|_| !plain).and_then(|k| k.cached(&key, now));
        if let Some((e, clock)) = hit {
            let read = Read {
                key,
                value: e.value,
                version: LogIndex::ZERO,
                vts: e.vts,
                fts: e.fts,
                at: now,
                hit: Some((clock, e.lts)),
            };
            return self.on_read(c, now, read);
        }
        // A transaction's read of a RIFL table may see a pending transaction's value, as the
        // client library's does (`strata_log`'s foresight); its prepare validates it. A
        // transfer writes what it reads: it reads for update (`strata_log`'s reservations).
        let intent = match (plain || self.kairos.is_some(), writes) {
            (true, _) => ReadIntent::Plain,
            (false, true) => ReadIntent::TxnForUpdate { reserver },
            (false, false) => ReadIntent::Txn,
        };
        // Half the time, a RIFL transaction's keys left to read that are all in one shard
        // are read in one request (`LogReadMany`, as `Transaction::read_many` sends them).
        let rest = &keys[*next..];
        let part = self.layout.part(0, &key);
        let one_shard = rest.len() > 1 && rest.iter().all(|k| self.layout.part(0, k) == part);
        let body = match one_shard && self.kairos.is_none() && self.rng.chance(0.5) {
            true => Request::LogReadMany {
                table: self.layout.name(0).to_string(),
                keys: rest.to_vec(),
                min_index: None,
                intent,
            },
            false => self.read_body(key, intent),
        };
        self.send(c, now, part, None, body);
    }

    fn read_body(&self, key: Bytes, intent: ReadIntent) -> Request {
        let table = self.layout.name(0).to_string();
        Request::LogRead { table, key, min_index: None, sharer: false, intent }
    }

    fn envelope(&self, base: u64) -> Rifl {
        let g = &self.lease;
        Rifl {
            rpc: RpcId { client_id: g.lease_id, seq: base },
            first_incomplete: self.tracker.first_incomplete().min(base),
            lease: LeaseInfo {
                client_id: g.lease_id,
                expiration: g.expiration,
                timestamp: g.cluster_time,
            },
        }
    }

    fn send(
        &mut self,
        c: &mut HostCluster,
        now: Instant,
        part: Part,
        rifl: Option<Rifl>,
        body: Request,
    ) {
        let node = self.node_for(part);
        self.next_corr += 1;
        let p = Pending {
            corr: self.next_corr,
            node,
            due: now + RETRY_AFTER,
            chosen: false,
            rifl,
            body,
        };
        c.send_request(
            self.index,
            node,
            ClientRequest { corr: p.corr, rifl: p.rifl, body: p.body.clone() },
        );
        self.pending.insert(part, p);
    }

    /// Where a new request for `part` goes: its leader if known, else one of its replicas.
    fn node_for(&mut self, part: Part) -> usize {
        match self.leader.get(&part) {
            Some(&node) => node,
            None => {
                let at = self.placement.get(&part);
                let i = self.rng.range(0, at.map_or(self.nodes, Vec::len) as u64) as usize;
                at.map_or(i, |rs| rs[i])
            }
        }
    }

    fn resend(&mut self, c: &mut HostCluster, now: Instant, part: Part) {
        self.next_corr += 1;
        let corr = self.next_corr;
        let next = self.after(part, self.pending[&part].node);
        let p = self.pending.get_mut(&part).expect("pending");
        if !p.chosen {
            // Unanswered in time (lost, a crashed node): the next node.
            p.node = next;
        }
        p.chosen = false;
        p.corr = corr;
        p.due = now + RETRY_AFTER;
        c.send_request(
            self.index,
            p.node,
            ClientRequest { corr, rifl: p.rifl, body: p.body.clone() },
        );
    }

    /// rifl.md §5.5.1: renew the lease in the background (the answer's cluster time is what
    /// the next envelopes carry, so the nodes see time pass).
    fn renew(&mut self, c: &mut HostCluster, now: Instant) {
        match &mut self.renewal {
            Some(p) if now >= p.due => {
                p.node = (p.node + 1) % self.nodes;
                p.due = now + RETRY_AFTER;
                self.next_corr += 1;
                p.corr = self.next_corr;
                let req = ClientRequest { corr: p.corr, rifl: None, body: p.body.clone() };
                c.send_request(self.index, p.node, req);
            }
            None if now >= self.next_renew => {
                self.next_corr += 1;
                let body = Request::RenewLease { lease_id: self.lease.lease_id };
                let node = self.rng.range(0, self.nodes as u64) as usize;
                let due = now + RETRY_AFTER;
                let p =
                    Pending { corr: self.next_corr, node, due, chosen: false, rifl: None, body };
                let req = ClientRequest { corr: p.corr, rifl: None, body: p.body.clone() };
                c.send_request(self.index, node, req);
                self.renewal = Some(p);
            }
            _ => {}
        }
    }

    /// kairos.md §5.9: a round of watermark reports, if one is due (module docs of
    /// [`super::kairos`]); each to its shard's leader if known, else to one of its replicas.
    fn report(&mut self, c: &mut HostCluster, now: Instant) {
        let Some(k) = self.kairos.as_mut() else { return };
        for (part, body) in k.due_reports(now, self.lease.lease_id) {
            let node = self.node_for(part);
            self.next_corr += 1;
            let corr = self.next_corr;
            c.send_request(self.index, node, ClientRequest { corr, rifl: None, body });
            self.kairos.as_mut().expect("kairos").sent(corr, part, node);
        }
    }

    /// A leader's answer to a report, or a refusal that says where the shard's leader is.
    fn on_report_answer(&mut self, part: Part, node: usize, resp: ClientResponse) {
        let Some(k) = self.kairos.as_mut() else { return };
        match resp.body {
            Response::KairosWatermarks { wm, ts_gc } => {
                k.on_watermarks(resp.corr, wm, ts_gc);
                self.leader.insert(part, node);
            }
            Response::LogRejected(f) => {
                k.on_refused(resp.corr);
                self.leader.remove(&part);
                let hinted = matches!(f, LogFailure::NotLeader { hint: Some(_) });
                let next = self.redirect(part, node, f);
                if hinted {
                    self.leader.insert(part, next);
                }
            }
            _ => {
                k.on_refused(resp.corr);
            }
        }
    }

    pub fn on_response(&mut self, c: &mut HostCluster, now: Instant, resp: ClientResponse) {
        if self.sleep_until.is_some_and(|t| now < t) {
            return self.deferred.push(resp);
        }
        if let Some((part, node)) = self.kairos.as_ref().and_then(|k| k.report_target(resp.corr)) {
            return self.on_report_answer(part, node, resp);
        }
        if self.renewal.as_ref().is_some_and(|p| p.corr == resp.corr) {
            match resp.body {
                // The same id renewed; a new id (the old one expired) starts its own seqs (R-D21).
                Response::Lease(g) if g.lease_id != 0 => {
                    if g.lease_id != self.lease.lease_id {
                        self.tracker = RequestTracker::new(WINDOW);
                    }
                    self.lease = g;
                    self.renewal = None;
                    self.next_renew = now + self.renew_every;
                }
                // Another node at the next poll.
                _ => {
                    if let Some(p) = self.renewal.as_mut() {
                        p.due = now;
                    }
                }
            }
            return;
        }
        if self.follow.as_ref().is_some_and(|(p, _)| p.corr == resp.corr) {
            return self.on_follow(c, now, resp);
        }
        let Some((&part, _)) = self.pending.iter().find(|(_, p)| p.corr == resp.corr) else {
            return;
        };
        if matches!(self.phase, Phase::Crashed) {
            return;
        }
        match resp.body {
            Response::LogRejected(f) => {
                let node = self.pending[&part].node;
                let next = self.redirect(part, node, f);
                let p = self.pending.get_mut(&part).expect("found");
                p.node = next;
                // Resent at the next poll (to the node chosen above).
                p.due = now;
                p.chosen = true;
                self.leader.remove(&part);
            }
            Response::LogValue { value, update_index, vts, w_mean_ns, .. } => {
                let p = self.pending.remove(&part).expect("found");
                self.leader.insert(part, p.node);
                let Phase::Read { keys, next, wm } = &self.phase else { return };
                let (key, wm) = (keys[*next].clone(), *wm);
                let vts = vts.unwrap_or(Timestamp::ZERO);
                // kairos.md §5.2: `fts = max(vts, wm)`, `wm` the view before the read was sent.
                let fts = match self.kairos.as_mut() {
                    Some(k) => k.fetched(key.clone(), value.clone(), vts, wm, w_mean_ns, now),
                    None => vts.max(wm),
                };
                let read = Read { key, value, version: update_index, vts, fts, at: now, hit: None };
                self.on_read(c, now, read);
            }
            Response::LogValues { values, .. } => {
                let p = self.pending.remove(&part).expect("found");
                self.leader.insert(part, p.node);
                self.reads_together += 1;
                let n = values.len();
                for (i, (value, version)) in values.into_iter().enumerate() {
                    let Phase::Read { keys, next, .. } = &mut self.phase else { return };
                    let key = keys[*next].clone();
                    let vts = Timestamp::ZERO;
                    let read = Read { key, value, version, vts, fts: vts, at: now, hit: None };
                    if i + 1 == n {
                        return self.on_read(c, now, read);
                    }
                    *next += 1;
                    self.current.as_mut().expect("a transaction").record.reads.push(read);
                }
            }
            Response::TxnVotes { votes, decided } => {
                let p = self.pending.remove(&part).expect("found");
                self.leader.insert(part, p.node);
                self.on_votes(c, now, part, votes, decided);
            }
            Response::TxnDecided => {
                let p = self.pending.remove(&part).expect("found");
                self.leader.insert(part, p.node);
                if let Phase::Decide { waiting } = &mut self.phase {
                    waiting.remove(&part);
                    if waiting.is_empty() {
                        let base = self.current.as_ref().map_or(0, |cur| cur.base);
                        self.tracker.rpc_completed(base);
                        self.finish(now);
                    }
                }
            }
            other => {
                // Anything else is a protocol failure for this workload: recorded (the
                // transaction's outcome stays unknown) and the client moves on.
                self.pending.remove(&part);
                if let Some(cur) = self.current.as_mut() {
                    cur.record.outcome = Known::Unknown;
                    cur.record.failure = Some(format!("{other:?}"));
                }
                self.finish(now);
            }
        }
    }

    fn on_read(&mut self, c: &mut HostCluster, now: Instant, read: Read) {
        let Phase::Read { keys, next, .. } = &mut self.phase else { return };
        *next += 1;
        let more = *next < keys.len();
        let cur = self.current.as_mut().expect("a transaction");
        cur.record.reads.push(read);
        if more {
            return self.read_next(c, now);
        }
        if cur.plain {
            cur.record.outcome = Known::Committed;
            return self.finish(now);
        }
        self.phase = Phase::Compute;
        self.sleep_until = Some(now + Duration::from_micros(self.rng.range(0, 5_000)));
        if let Some(ClientFault::StallBeforePrepare(d)) = self.fault {
            self.fault = None;
            self.sleep_until = Some(now + d);
            (self.stopped, self.stalled) = (true, true);
        }
    }

    /// The transaction is given up before its prepare (`Transaction` dropped): a transfer of
    /// a RIFL table releases the keys it read for update, one request per shard to the
    /// leader that answered (fire and forget, as the library's; the answer is ignored).
    fn drop_transaction(&mut self, c: &mut HostCluster) {
        let Some(cur) = self.current.take() else { return };
        self.phase = Phase::Think;
        if cur.read_only || cur.plain || self.kairos.is_some() {
            return;
        }
        self.dropped += 1;
        let mut by_part: BTreeMap<Part, Vec<Bytes>> = BTreeMap::new();
        for r in &cur.record.reads {
            by_part.entry(self.layout.part(0, &r.key)).or_default().push(r.key.clone());
        }
        for (part, keys) in by_part {
            let table = self.layout.name(0).to_string();
            let body = Request::ReleaseReservations { table, keys, reserver: self.reserver(&cur) };
            let node = self.node_for(part);
            self.next_corr += 1;
            c.send_request(
                self.index,
                node,
                ClientRequest { corr: self.next_corr, rifl: None, body },
            );
        }
    }

    /// The name a transaction's reads for update carry: its start time and client, unique
    /// among this run's transactions.
    fn reserver(&self, cur: &Current) -> u64 {
        (cur.record.invoked.as_nanos() << 8 | self.index as u64).max(1)
    }

    /// §5.8.1 T1-T3.
    fn prepare(&mut self, c: &mut HostCluster, now: Instant) {
        // One transfer in twenty is dropped after its reads, as an application gives up.
        let transfer = self.current.as_ref().is_some_and(|cur| !cur.read_only && !cur.plain);
        if transfer && self.kairos.is_none() && self.rng.chance(DROP_CHANCE) {
            return self.drop_transaction(c);
        }
        let cur = self.current.as_mut().expect("a transaction");
        let balance = |v: &Option<Bytes>| -> u64 {
            v.as_ref().and_then(|v| std::str::from_utf8(v).ok()?.parse().ok()).unwrap_or(0)
        };
        let mut actions: BTreeMap<Bytes, (TxnAction, &Read)> = BTreeMap::new();
        for r in &cur.record.reads {
            actions.insert(r.key.clone(), (TxnAction::Read, r));
        }
        if !cur.read_only {
            let (a, va) = (&cur.record.reads[0].key, &cur.record.reads[0].value);
            let (b, vb) = (&cur.record.reads[1].key, &cur.record.reads[1].value);
            if balance(va) > 0 {
                let (na, nb) = ((balance(va) - 1).to_string(), (balance(vb) + 1).to_string());
                actions.get_mut(a).expect("read").0 = TxnAction::Write(Bytes::from(na.clone()));
                actions.get_mut(b).expect("read").0 = TxnAction::Write(Bytes::from(nb.clone()));
                cur.record.writes =
                    vec![(a.clone(), Bytes::from(na)), (b.clone(), Bytes::from(nb))];
            } else {
                cur.read_only = true;
            }
        }
        let objects = match self.kairos.is_some() {
            // Kairos validates timestamps, not log indexes: no `expect`.
            true => {
                let vts = |(k, (a, r)): (&Bytes, &(TxnAction, &Read))| {
                    (k.clone(), (a.clone(), Some(r.vts)))
                };
                let actions = actions.iter().map(vts).collect();
                let objects = kairos::objects(&self.layout, &actions).into_iter();
                objects.map(|o| (o.table, o.key, o.action, None, o.read_vts)).collect()
            }
            false => {
                let rifl = |(k, (a, r)): (Bytes, (TxnAction, &Read))| {
                    (0, k, a, Some(Expect::Version(r.version)), None)
                };
                actions.into_iter().map(rifl).collect::<Vec<_>>()
            }
        };
        let n = objects.len() as u64;
        let Ok(base) = self.tracker.new_sequence_block(n + 1) else {
            // The window is full of transactions whose decisions are unacknowledged.
            return self.drop_transaction(c);
        };
        cur.base = base;
        cur.record.txn = Some(TxnId { client_id: self.lease.lease_id, base });
        let read_only = cur.read_only;
        let stamp = self.kairos.as_mut().map(|k| {
            let reads: Vec<(Timestamp, Timestamp)> =
                cur.record.reads.iter().map(|r| (r.vts, r.fts)).collect();
            k.stamp(now, read_only, &reads)
        });
        cur.record.kairos = stamp.map(|(commit_ts, freshness)| super::client::Stamp {
            commit_ts,
            freshness,
            read_only,
        });
        let mut read_vts: BTreeMap<Part, Vec<Option<Timestamp>>> = BTreeMap::new();
        for (i, (table, key, action, expect, vts)) in objects.into_iter().enumerate() {
            let seq = base + 1 + i as u64;
            let name = self.layout.name(table).to_string();
            cur.objects.push(TxnObject { table: name, key: key.clone(), seq });
            let part = self.layout.part(table, &key);
            cur.parts.entry(part).or_default().push(TxnOp { key, seq, expect, action });
            read_vts.entry(part).or_default().push(vts);
        }
        let all = cur.objects.clone();
        let parts = cur.parts.clone();
        self.phase = Phase::Prepare { waiting: parts.keys().map(|&s| (s, ())).collect() };
        let rifl = self.envelope(base);
        for (part, ops) in parts {
            let kairos = stamp.map(|stamp| {
                let vts = read_vts.remove(&part).unwrap_or_default();
                kairos::prepare_fields(&self.layout, part.0, stamp, read_only, vts)
            });
            let body = Request::TxnPrepare {
                table: self.layout.name(part.0).to_string(),
                shard: part.1,
                read_only,
                all: all.clone(),
                ops,
                kairos,
            };
            self.send(c, now, part, Some(rifl), body);
        }
    }

    fn on_votes(
        &mut self,
        c: &mut HostCluster,
        now: Instant,
        part: Part,
        votes: Vec<(u64, Vote)>,
        decided: bool,
    ) {
        let Phase::Prepare { waiting } = &mut self.phase else { return };
        waiting.remove(&part);
        let cur = self.current.as_mut().expect("a transaction");
        cur.record.votes.extend(votes);
        cur.decided &= decided;
        match self.fault.take() {
            Some(ClientFault::CrashAfterPrepare) => {
                self.phase = Phase::Crashed;
                self.pending.clear();
                return;
            }
            // The process stops here; on waking it reads what arrived and decides.
            Some(ClientFault::PauseAfterPrepare(d)) => {
                self.sleep_until = Some(now + d);
                self.stopped = true;
                return;
            }
            // (Not yet: it stalls before a prepare.)
            Some(f @ ClientFault::StallBeforePrepare(_)) => self.fault = Some(f),
            None => {}
        }
        self.decide_if_voted(c, now);
    }

    /// §5.8.1 T5-T7 once every participant voted.
    fn decide_if_voted(&mut self, c: &mut HostCluster, now: Instant) {
        let Phase::Prepare { waiting } = &self.phase else { return };
        if !waiting.is_empty() {
            return;
        }
        let cur = self.current.as_mut().expect("a transaction");
        let prepared = cur.record.votes.len() == cur.objects.len()
            && cur.record.votes.iter().all(|(_, v)| *v == Vote::Prepared);
        let decision = if prepared { Decision::Commit } else { Decision::Abort };
        cur.record.outcome = if prepared { Known::Committed } else { Known::Aborted };
        cur.record.completed = now;
        // kairos.md §5.9, §6.5: reads older than a shard's `ts_GC`; a report round at once
        // brings `wm_view` up, so the next transaction's reads are fresh enough.
        let too_old = cur.record.votes.iter().any(|(_, v)| *v == Vote::Abort(AbortReason::TooOld));
        if let Some(k) = self.kairos.as_mut() {
            k.end_reads();
            if too_old {
                k.report_soon(now);
            }
            let votes: BTreeMap<u64, Vote> = cur.record.votes.iter().copied().collect();
            let objects = cur.objects.iter().map(|o| (o.seq, &o.key));
            let written = cur.record.writes.iter().map(|(key, _)| key);
            k.after_decision(prepared, objects, &votes, written);
        }
        if cur.read_only || (cur.parts.len() == 1 && cur.decided) {
            let base = cur.base;
            self.tracker.rpc_completed(base);
            return self.finish(now);
        }
        let (base, parts) = (cur.base, cur.parts.clone());
        let written = cur.record.writes.first().map(|(k, _)| k.clone()).filter(|_| prepared);
        let rifl = self.envelope(base);
        self.phase = Phase::Decide { waiting: parts.keys().map(|&s| (s, ())).collect() };
        for (part, ops) in parts {
            let seqs = ops.iter().map(|o| o.seq).collect();
            let table = self.layout.name(part.0).to_string();
            let body = Request::TxnDecide { table, shard: part.1, decision, seqs };
            self.send(c, now, part, Some(rifl), body);
        }
        if let Some(key) = written.filter(|_| self.follow.is_none() && self.rng.chance(0.5)) {
            self.follow_up(c, now, key);
        }
    }

    fn on_follow(&mut self, c: &mut HostCluster, now: Instant, resp: ClientResponse) {
        let Some((p, rec)) = self.follow.as_mut() else { return };
        match resp.body {
            Response::LogValue { value, update_index, vts, .. } => {
                let key = match &p.body {
                    Request::LogRead { key, .. } => key.clone(),
                    _ => unreachable!("a follow-up is a read"),
                };
                let (version, vts) = (update_index, vts.unwrap_or(Timestamp::ZERO));
                rec.reads.push(Read { key, value, version, vts, fts: vts, at: now, hit: None });
                (rec.completed, rec.reported) = (now, now);
                rec.outcome = Known::Committed;
                let (_, rec) = self.follow.take().expect("present");
                self.done.push(rec);
            }
            // Locked (the decision is on its way), not the leader, moved: again, shortly.
            Response::LogRejected(f) => {
                let (part, node) = (part_of_body(&self.layout, &p.body), p.node);
                let next = self.redirect(part, node, f);
                let Some((p, _)) = self.follow.as_mut() else { return };
                p.node = next;
                self.next_corr += 1;
                p.corr = self.next_corr;
                p.due = now + RETRY_AFTER;
                let req = ClientRequest { corr: p.corr, rifl: None, body: p.body.clone() };
                c.send_request(self.index, p.node, req);
            }
            _ => self.follow = None,
        }
    }

    /// The node after `node` among the replicas of `part` (every node, unless a move named
    /// others): where a request goes when its node does not answer.
    fn after(&self, part: Part, node: usize) -> usize {
        match self.placement.get(&part) {
            Some(rs) => {
                rs.iter().position(|&r| r == node).map_or(rs[0], |i| rs[(i + 1) % rs.len()])
            }
            None => (node + 1) % self.nodes,
        }
    }

    /// The node to send a request for `part` to after node `node` refused it with `f`: the
    /// hinted leader, the same node while a key is locked (the decision is on its way), the
    /// next of the new replicas after a move (which are remembered), else the next node.
    fn redirect(&mut self, part: Part, node: usize, f: LogFailure) -> usize {
        match f {
            LogFailure::NotLeader { hint: Some(h) }
                if (h.0 as usize) < self.nodes && h.0 as usize != node =>
            {
                h.0 as usize
            }
            LogFailure::Locked => node,
            LogFailure::Moved { replicas } => {
                let to: Vec<usize> =
                    replicas.iter().map(|r| r.0 as usize).filter(|&r| r < self.nodes).collect();
                if !to.is_empty() {
                    self.placement.insert(part, to);
                }
                self.after(part, node)
            }
            _ => self.after(part, node),
        }
    }

    /// Sends the follow-up read of `key` (module docs of `follow`).
    fn follow_up(&mut self, c: &mut HostCluster, now: Instant, key: Bytes) {
        let part = self.layout.part(0, &key);
        let first = self.placement.get(&part).map_or(0, |rs| rs[0]);
        let node = self.leader.get(&part).copied().unwrap_or(first);
        self.next_corr += 1;
        let body = self.read_body(key, ReadIntent::Plain);
        let p = Pending {
            corr: self.next_corr,
            node,
            due: now + RETRY_AFTER,
            chosen: false,
            rifl: None,
            body,
        };
        c.send_request(
            self.index,
            node,
            ClientRequest { corr: p.corr, rifl: None, body: p.body.clone() },
        );
        // Invoked after the commit returned (at `now`): strictly later, for real-time order.
        let after = now + Duration::from_nanos(1);
        self.follow = Some((p, TxnRecord::new(self.index, after)));
    }

    fn finish(&mut self, now: Instant) {
        let commit = self.current.as_ref().filter(|cur| cur.record.outcome == Known::Committed);
        let commit_ts = commit.and_then(|cur| cur.record.kairos).map(|s| s.commit_ts);
        if let (Some(k), Some(ts)) = (self.kairos.as_mut(), commit_ts) {
            if k.commit_wait(now, ts) {
                self.pending.clear();
                self.phase = Phase::CommitWait; // polled until the clock passes it
                return;
            }
        }
        if let Some(k) = self.kairos.as_mut() {
            k.complete(); // §5.9: every decision applied (or none to send)
        }
        if let Some(mut cur) = self.current.take() {
            if cur.record.outcome == Known::Unknown || cur.plain {
                cur.record.completed = now;
            }
            cur.record.reported = now.max(cur.record.completed);
            self.done.push(cur.record);
        }
        self.pending.clear();
        self.phase = Phase::Think;
        let think = Duration::from_millis(self.rng.range(0, 20));
        self.sleep_until = Some(now + think);
    }
}

/// The participant a request is for (a read's: its key's shard of the data table).
fn part_of_body(layout: &Layout, body: &Request) -> Part {
    match body {
        Request::LogRead { key, .. } => layout.part(0, key),
        Request::LogReadMany { keys, .. } => layout.part(0, &keys[0]),
        Request::TxnPrepare { table, shard, .. } | Request::TxnDecide { table, shard, .. } => {
            (layout.index_of(table).unwrap_or(0), *shard)
        }
        _ => (0, 0),
    }
}
