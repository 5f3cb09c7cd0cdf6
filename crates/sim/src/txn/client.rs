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

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use strata_core::Prng;
use strata_rifl::{RequestTracker, WINDOW};
use strata_wire::client::{shard_of, ClientRequest, ClientResponse, LogFailure, Request, Response};
use strata_wire::log::{Expect, LogIndex};
use strata_wire::rifl::{LeaseInfo, LeaseStatus, Rifl, RpcId};
use strata_wire::txn::{Decision, TxnAction, TxnId, TxnObject, TxnOp, Vote};
use strata_wire::Instant;

use crate::host::HostCluster;

/// An unanswered request is sent again (to the next node) after this long.
const RETRY_AFTER: Duration = Duration::from_millis(150);
/// A client's pace: how often it looks at its requests.
const STEP: Duration = Duration::from_millis(5);

/// What the client knew of a transaction's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Known {
    Committed,
    Aborted,
    /// The client crashed (or the run ended) before it decided.
    Unknown,
}

/// One transaction (or plain read) as its client saw it.
#[derive(Clone, Debug)]
pub struct TxnRecord {
    pub client: usize,
    /// `None` for a plain read.
    pub txn: Option<TxnId>,
    pub invoked: Instant,
    pub completed: Instant,
    pub outcome: Known,
    /// `(key, value, version)` of every read.
    pub reads: Vec<(Bytes, Option<Bytes>, LogIndex)>,
    /// `(key, value)` of every write.
    pub writes: Vec<(Bytes, Bytes)>,
    /// Every vote the client received.
    pub votes: Vec<(u64, Vote)>,
    /// An answer the workload does not expect (a protocol failure), if one ended it.
    pub failure: Option<String>,
}

/// A fault the client plays on itself once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientFault {
    /// Stops for good once its first prepare is answered (a coordinator crash).
    CrashAfterPrepare,
    /// Sleeps this long once its first prepare is answered, then carries on.
    PauseAfterPrepare(Duration),
}

enum Phase {
    Think,
    Read {
        keys: Vec<Bytes>,
        next: usize,
    },
    /// Between the last read and the prepares: the application computes (0-5 ms), which
    /// leaves room for other transactions to change what it read.
    Compute,
    Prepare {
        waiting: BTreeMap<u32, ()>,
    },
    Decide {
        waiting: BTreeMap<u32, ()>,
    },
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
    /// By participant shard: its ops.
    parts: BTreeMap<u32, Vec<TxnOp>>,
    read_only: bool,
    plain: bool,
    /// Every participant answered `decided` (its prepare applied `Commit` at once).
    decided: bool,
}

pub struct TxnClient {
    pub index: usize,
    keys: Vec<Bytes>,
    shards: u32,
    table: String,
    nodes: usize,
    lease: LeaseStatus,
    tracker: RequestTracker,
    rng: Prng,
    phase: Phase,
    current: Option<Current>,
    /// Requests in flight, by the shard (or key shard for reads) they are for.
    pending: BTreeMap<u32, Pending>,
    leader: BTreeMap<u32, usize>,
    /// The replicas of each shard a `Moved` answer named (module docs); every node otherwise.
    placement: BTreeMap<u32, Vec<usize>>,
    txns_left: u32,
    next_corr: u64,
    fault: Option<ClientFault>,
    sleep_until: Option<Instant>,
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
    pub done: Vec<TxnRecord>,
}

impl TxnClient {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        index: usize,
        table: &str,
        keys: Vec<Bytes>,
        shards: u32,
        nodes: usize,
        lease: LeaseStatus,
        txns: u32,
        fault: Option<ClientFault>,
        renew_every: Duration,
        rng: Prng,
    ) -> TxnClient {
        TxnClient {
            index,
            keys,
            shards,
            table: table.to_string(),
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
            deferred: Vec::new(),
            renew_every,
            next_renew: Instant::ZERO,
            renewal: None,
            follow: None,
            done: Vec::new(),
        }
    }

    pub fn finished(&self) -> bool {
        matches!(self.phase, Phase::Finished | Phase::Crashed)
    }

    /// The transaction under way when the run ends: recorded with an unknown outcome.
    pub fn abandon(&mut self, now: Instant) {
        if let Some(mut cur) = self.current.take() {
            if !cur.plain && !matches!(self.phase, Phase::Read { .. } | Phase::Think) {
                cur.record.completed = now;
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
            return;
        }
        self.sleep_until = None;
        for resp in std::mem::take(&mut self.deferred) {
            self.on_response(c, now, resp);
        }
        self.renew(c, now);
        match self.phase {
            Phase::Think => return self.start(c, now),
            Phase::Compute => return self.prepare(c, now),
            Phase::Prepare { .. } => self.decide_if_voted(c, now),
            _ => {}
        }
        let stale: Vec<u32> =
            self.pending.iter().filter(|(_, p)| now >= p.due).map(|(s, _)| *s).collect();
        for shard in stale {
            self.resend(c, now, shard);
        }
        let due = self.follow.as_ref().filter(|(p, _)| now >= p.due);
        if let Some(next) =
            due.map(|(p, _)| self.after(shard_of_body(&p.body, self.shards), p.node))
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
        self.txns_left -= 1;
        let pick =
            |rng: &mut Prng, keys: &[Bytes]| keys[rng.range(0, keys.len() as u64) as usize].clone();
        let (keys, plain) = match self.rng.range(0, 10) {
            0..=5 => {
                let a = pick(&mut self.rng, &self.keys);
                let mut b = pick(&mut self.rng, &self.keys);
                while b == a {
                    b = pick(&mut self.rng, &self.keys);
                }
                (vec![a, b], false)
            }
            6..=7 => {
                let mut ks: Vec<Bytes> = (0..3).map(|_| pick(&mut self.rng, &self.keys)).collect();
                ks.sort();
                ks.dedup();
                (ks, false)
            }
            _ => (vec![pick(&mut self.rng, &self.keys)], true),
        };
        let record = TxnRecord {
            client: self.index,
            txn: None,
            invoked: now,
            completed: now,
            outcome: Known::Unknown,
            reads: Vec::new(),
            writes: Vec::new(),
            votes: Vec::new(),
            failure: None,
        };
        let transfer = !plain && keys.len() == 2;
        self.current = Some(Current {
            record,
            base: 0,
            objects: Vec::new(),
            parts: BTreeMap::new(),
            read_only: !transfer,
            plain,
            decided: true,
        });
        self.phase = Phase::Read { keys, next: 0 };
        self.read_next(c, now);
    }

    fn read_next(&mut self, c: &mut HostCluster, now: Instant) {
        let Phase::Read { keys, next } = &self.phase else { return };
        let key = keys[*next].clone();
        let shard = shard_of(&key, self.shards);
        let body =
            Request::LogRead { table: self.table.clone(), key, min_index: None, sharer: false };
        self.send(c, now, shard, None, body);
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
        shard: u32,
        rifl: Option<Rifl>,
        body: Request,
    ) {
        let node = match self.leader.get(&shard) {
            Some(&node) => node,
            None => {
                let at = self.placement.get(&shard);
                let i = self.rng.range(0, at.map_or(self.nodes, Vec::len) as u64) as usize;
                at.map_or(i, |rs| rs[i])
            }
        };
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
        self.pending.insert(shard, p);
    }

    fn resend(&mut self, c: &mut HostCluster, now: Instant, shard: u32) {
        self.next_corr += 1;
        let corr = self.next_corr;
        let next = self.after(shard, self.pending[&shard].node);
        let p = self.pending.get_mut(&shard).expect("pending");
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

    pub fn on_response(&mut self, c: &mut HostCluster, now: Instant, resp: ClientResponse) {
        if self.sleep_until.is_some_and(|t| now < t) {
            return self.deferred.push(resp);
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
        let Some((&shard, _)) = self.pending.iter().find(|(_, p)| p.corr == resp.corr) else {
            return;
        };
        if matches!(self.phase, Phase::Crashed) {
            return;
        }
        match resp.body {
            Response::LogRejected(f) => {
                let node = self.pending[&shard].node;
                let next = self.redirect(shard, node, f);
                let p = self.pending.get_mut(&shard).expect("found");
                p.node = next;
                // Resent at the next poll (to the node chosen above).
                p.due = now;
                p.chosen = true;
                self.leader.remove(&shard);
            }
            Response::LogValue { value, update_index, .. } => {
                let p = self.pending.remove(&shard).expect("found");
                self.leader.insert(shard, p.node);
                self.on_read(c, now, value, update_index);
            }
            Response::TxnVotes { votes, decided } => {
                let p = self.pending.remove(&shard).expect("found");
                self.leader.insert(shard, p.node);
                self.on_votes(c, now, shard, votes, decided);
            }
            Response::TxnDecided => {
                let p = self.pending.remove(&shard).expect("found");
                self.leader.insert(shard, p.node);
                if let Phase::Decide { waiting } = &mut self.phase {
                    waiting.remove(&shard);
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
                self.pending.remove(&shard);
                if let Some(cur) = self.current.as_mut() {
                    cur.record.outcome = Known::Unknown;
                    cur.record.failure = Some(format!("{other:?}"));
                }
                self.finish(now);
            }
        }
    }

    fn on_read(
        &mut self,
        c: &mut HostCluster,
        now: Instant,
        value: Option<Bytes>,
        version: LogIndex,
    ) {
        let Phase::Read { keys, next } = &mut self.phase else { return };
        let key = keys[*next].clone();
        *next += 1;
        let more = *next < keys.len();
        let cur = self.current.as_mut().expect("a transaction");
        cur.record.reads.push((key, value, version));
        if more {
            return self.read_next(c, now);
        }
        if cur.plain {
            cur.record.outcome = Known::Committed;
            return self.finish(now);
        }
        self.phase = Phase::Compute;
        self.sleep_until = Some(now + Duration::from_micros(self.rng.range(0, 5_000)));
    }

    /// §5.8.1 T1-T3.
    fn prepare(&mut self, c: &mut HostCluster, now: Instant) {
        let cur = self.current.as_mut().expect("a transaction");
        let balance = |v: &Option<Bytes>| -> u64 {
            v.as_ref().and_then(|v| std::str::from_utf8(v).ok()?.parse().ok()).unwrap_or(0)
        };
        let mut actions: BTreeMap<Bytes, (TxnAction, LogIndex)> = BTreeMap::new();
        for (k, _, version) in &cur.record.reads {
            actions.insert(k.clone(), (TxnAction::Read, *version));
        }
        if !cur.read_only {
            let (a, va, _) = cur.record.reads[0].clone();
            let (b, vb, _) = cur.record.reads[1].clone();
            if balance(&va) > 0 {
                let (na, nb) = ((balance(&va) - 1).to_string(), (balance(&vb) + 1).to_string());
                actions.get_mut(&a).expect("read").0 = TxnAction::Write(Bytes::from(na.clone()));
                actions.get_mut(&b).expect("read").0 = TxnAction::Write(Bytes::from(nb.clone()));
                cur.record.writes = vec![(a, Bytes::from(na)), (b, Bytes::from(nb))];
            } else {
                cur.read_only = true;
            }
        }
        let n = actions.len() as u64;
        let Ok(base) = self.tracker.new_sequence_block(n + 1) else {
            // The window is full of transactions whose decisions are unacknowledged.
            self.phase = Phase::Think;
            self.current = None;
            return;
        };
        cur.base = base;
        cur.record.txn = Some(TxnId { client_id: self.lease.lease_id, base });
        cur.objects = actions
            .keys()
            .enumerate()
            .map(|(i, k)| TxnObject {
                table: self.table.clone(),
                key: k.clone(),
                seq: base + 1 + i as u64,
            })
            .collect();
        for (o, (_, (action, version))) in cur.objects.iter().zip(actions) {
            let op = TxnOp {
                key: o.key.clone(),
                seq: o.seq,
                expect: Some(Expect::Version(version)),
                action,
            };
            cur.parts.entry(shard_of(&o.key, self.shards)).or_default().push(op);
        }
        let read_only = cur.read_only;
        let all = cur.objects.clone();
        let parts = cur.parts.clone();
        self.phase = Phase::Prepare { waiting: parts.keys().map(|&s| (s, ())).collect() };
        let rifl = self.envelope(base);
        for (shard, ops) in parts {
            let body = Request::TxnPrepare {
                table: self.table.clone(),
                shard,
                read_only,
                all: all.clone(),
                ops,
                kairos: None,
            };
            self.send(c, now, shard, Some(rifl), body);
        }
    }

    fn on_votes(
        &mut self,
        c: &mut HostCluster,
        now: Instant,
        shard: u32,
        votes: Vec<(u64, Vote)>,
        decided: bool,
    ) {
        let Phase::Prepare { waiting } = &mut self.phase else { return };
        waiting.remove(&shard);
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
                return;
            }
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
        if cur.read_only || (cur.parts.len() == 1 && cur.decided) {
            let base = cur.base;
            self.tracker.rpc_completed(base);
            return self.finish(now);
        }
        let (base, parts) = (cur.base, cur.parts.clone());
        let written = cur.record.writes.first().map(|(k, _)| k.clone()).filter(|_| prepared);
        let rifl = self.envelope(base);
        self.phase = Phase::Decide { waiting: parts.keys().map(|&s| (s, ())).collect() };
        for (shard, ops) in parts {
            let seqs = ops.iter().map(|o| o.seq).collect();
            let body = Request::TxnDecide { table: self.table.clone(), shard, decision, seqs };
            self.send(c, now, shard, Some(rifl), body);
        }
        if let Some(key) = written.filter(|_| self.follow.is_none() && self.rng.chance(0.5)) {
            self.follow_up(c, now, key);
        }
    }

    fn on_follow(&mut self, c: &mut HostCluster, now: Instant, resp: ClientResponse) {
        let Some((p, rec)) = self.follow.as_mut() else { return };
        match resp.body {
            Response::LogValue { value, update_index, .. } => {
                let key = match &p.body {
                    Request::LogRead { key, .. } => key.clone(),
                    _ => unreachable!("a follow-up is a read"),
                };
                rec.reads.push((key, value, update_index));
                rec.completed = now;
                rec.outcome = Known::Committed;
                let (_, rec) = self.follow.take().expect("present");
                self.done.push(rec);
            }
            // Locked (the decision is on its way), not the leader, moved: again, shortly.
            Response::LogRejected(f) => {
                let (shard, node) = (shard_of_body(&p.body, self.shards), p.node);
                let next = self.redirect(shard, node, f);
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

    /// The node after `node` among the replicas of `shard` (every node, unless a move named
    /// others): where a request goes when its node does not answer.
    fn after(&self, shard: u32, node: usize) -> usize {
        match self.placement.get(&shard) {
            Some(rs) => {
                rs.iter().position(|&r| r == node).map_or(rs[0], |i| rs[(i + 1) % rs.len()])
            }
            None => (node + 1) % self.nodes,
        }
    }

    /// The node to send a request for `shard` to after node `node` refused it with `f`: the
    /// hinted leader, the same node while a key is locked (the decision is on its way), the
    /// next of the new replicas after a move (which are remembered), else the next node.
    fn redirect(&mut self, shard: u32, node: usize, f: LogFailure) -> usize {
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
                    self.placement.insert(shard, to);
                }
                self.after(shard, node)
            }
            _ => self.after(shard, node),
        }
    }

    /// Sends the follow-up read of `key` (module docs of `follow`).
    fn follow_up(&mut self, c: &mut HostCluster, now: Instant, key: Bytes) {
        let shard = shard_of(&key, self.shards);
        let first = self.placement.get(&shard).map_or(0, |rs| rs[0]);
        let node = self.leader.get(&shard).copied().unwrap_or(first);
        self.next_corr += 1;
        let body =
            Request::LogRead { table: self.table.clone(), key, min_index: None, sharer: false };
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
        let rec = TxnRecord {
            client: self.index,
            txn: None,
            invoked: after,
            completed: after,
            outcome: Known::Unknown,
            reads: Vec::new(),
            writes: Vec::new(),
            votes: Vec::new(),
            failure: None,
        };
        self.follow = Some((p, rec));
    }

    fn finish(&mut self, now: Instant) {
        if let Some(mut cur) = self.current.take() {
            if cur.record.outcome == Known::Unknown || cur.plain {
                cur.record.completed = now;
            }
            self.done.push(cur.record);
        }
        self.pending.clear();
        self.phase = Phase::Think;
        let think = Duration::from_millis(self.rng.range(0, 20));
        self.sleep_until = Some(now + think);
    }
}

/// The shard a request is for (of a table of `shards` shards).
fn shard_of_body(body: &Request, shards: u32) -> u32 {
    match body {
        Request::LogRead { key, .. } => shard_of(key, shards),
        Request::TxnPrepare { shard, .. } | Request::TxnDecide { shard, .. } => *shard,
        _ => 0,
    }
}
