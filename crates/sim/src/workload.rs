//! Simulated clients: closed-loop sessions issuing relaxed reads, writes and deletes, releases,
//! acquires, fetch-and-adds and strong and weak compare-and-swaps on a small key set, so that
//! sessions conflict (Kite §2.1, §2.2, §5).
//!
//! Once healed (the liveness phase) sessions keep starting RMWs, and every one must complete:
//! the core restarts an RMW's back-off when its key's slot advances, so it is not starved by a
//! stream of fresh RMWs (Kite G6 asks only that contention subside; this is stronger).
//!
//! Keys: data keys `k0..` take every kind but FAA; counter keys `c0..` are written only by FAAs
//! (so the counter checks of Kite §7 prop 7 are exact) and read by reads and acquires. A CAS
//! expects the value its session last saw of the key (or absent), so it succeeds often enough
//! to matter. The mix comes from the seed ([`WorkloadKnobs`]).
//!
//! Each session belongs to one node and talks to it over its own connection (`route`); it keeps
//! at most `depth` operations in flight (§5.1.8 lets relaxed ops pipeline; sync ops block the
//! session at the node, later requests queue there) and waits a think time between issues.
//! Every operation goes into the [`History`] when it is invoked and gets its outcome when its
//! reply arrives. [`request_for`] and [`outcome_of`] are the one place where the history's
//! operation kinds meet the wire.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::Duration;

use bytes::Bytes;
use strata_core::Prng;
use strata_rc::{RcInput, RcReply, Route};
use strata_wire::client::{ClientRequest, ErrorCode, Request, Response};
use strata_wire::{ClusterTime, Instant, LeaseInfo, NodeId, Rifl, RmwId, RpcId, SessionId, WINDOW};

use crate::history::{Attempt, AttemptReply, History, Op, OpKind, Outcome, Value, Witness};
use crate::knobs::WorkloadKnobs;

/// One step of a message-passing pattern (Kite §1.2: producer `W(x); release(f)`, consumer
/// `acquire(f); read(x)`, relay `acquire(x); release(f)` — the K-F2 shape).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Write,
    Release,
    Acquire,
    Read,
}

/// One connection of a client to a node, with the session opened on it. A client whose
/// connection breaks opens another one; the old one stays here so that what its node still
/// answers (or the RMW ids it still uses) is attributed to the right sends.
#[derive(Debug)]
struct Conn {
    client: usize,
    node: NodeId,
    /// Set once the node has answered `OpenSession`.
    session: Option<SessionId>,
    /// The corr of the `OpenSession` request until it is answered.
    opening: Option<u64>,
    next_corr: u64,
    next_pos: u64,
    /// `(corr, index in History::attempts)` of the sends awaiting a reply, oldest first.
    in_flight: VecDeque<(u64, usize)>,
    /// The client gave it up: its replies are lost.
    abandoned: bool,
}

/// The client side of RIFL's RequestTracker (rifl.md §2.3, §5.2; the same logic as
/// `strata_rifl::RequestTracker`, which the simulator does not link): ids from 1, and the
/// smallest one not yet completed.
#[derive(Debug, Default)]
struct Tracker {
    next_seq: u64,
    outstanding: BTreeSet<u64>,
}

impl Tracker {
    fn new_sequence_num(&mut self) -> Option<u64> {
        let seq = self.next_seq.max(1);
        if seq - self.first_incomplete() >= WINDOW {
            return None; // §5.2: blocks; a client keeps at most `depth` (< 512) in flight
        }
        self.next_seq = seq + 1;
        self.outstanding.insert(seq);
        Some(seq)
    }

    fn first_incomplete(&self) -> u64 {
        self.outstanding.first().copied().unwrap_or(self.next_seq.max(1))
    }

    fn rpc_completed(&mut self, seq: u64) {
        self.outstanding.remove(&seq);
    }
}

/// One simulated client: a RIFL client id and its tracker, and a session at one node at a time
/// (Kite §2.1). Its connection breaks when the node crashes or a reply to a mutating request is
/// lost ([`WorkloadKnobs::lost_reply_permille`]); it then opens a session at another live node
/// and re-sends its unanswered requests in order, the mutating ones with the same rpc ids
/// (rifl.md §5.1).
#[derive(Debug)]
pub struct Client {
    /// The node and connection of its current session.
    pub node: NodeId,
    pub route: Route,
    /// Set once the node has answered `OpenSession`.
    pub session: Option<SessionId>,
    /// RIFL client id (rifl.md §0; leases never expire in the simulator).
    pub client_id: u64,
    tracker: Tracker,
    /// Operations sent and not finally answered, oldest first, with their rpc seq (0: a read).
    outstanding: VecDeque<(usize, u64)>,
    issue_scheduled: bool,
    /// Its node crashed and it does not fail over (scripts): it is gone with it (Kite §2.1).
    pub gone: bool,
    /// The last value this session saw or wrote of each key (a CAS expects it).
    last_seen: HashMap<Bytes, Value>,
    /// The rest of a message-passing pattern the session is in the middle of.
    plan: VecDeque<(Step, Bytes)>,
    /// It completed an operation invoked after healing (Kite §7 prop 9).
    pub progressed: bool,
}

/// The lease term of the rc simulator's hosts. Its clients hold no lease from the service:
/// each envelope carries a lease granted at the send's instant for one term (the node's lease
/// check accepts it by its expiration, `LeaseValidator::check`), and no run comes near a term.
pub const SIM_LEASE_TERM: Duration = Duration::from_secs(3600);

/// How long a client waits before sending again after `InProgress` (rifl.md §5.1: back-off).
pub const IN_PROGRESS_BACKOFF: Duration = Duration::from_millis(2);

#[derive(Debug)]
pub struct Workload {
    knobs: WorkloadKnobs,
    prng: Prng,
    /// Draws of the RIFL clients (lost replies, fail-over targets), apart from `prng` so that a
    /// seed's operations do not depend on them.
    retry_prng: Prng,
    keys: Vec<Bytes>,
    counters: Vec<Bytes>,
    pub clients: Vec<Client>,
    /// Every connection ever opened; route `r` is `conns[r - 1]`.
    conns: Vec<Conn>,
    /// Nodes known crashed (fail-over goes elsewhere).
    crashed: Vec<bool>,
    /// Whether clients whose connection breaks fail over to another node (false in scripts:
    /// their sessions die with their node).
    pub failover: bool,
    /// Requests the workload sends on its own (sessions opened, re-sends), for the driver.
    pub outbox: Vec<(NodeId, RcInput)>,
    /// The sends (indices in `History::attempts`) of every operation not finally answered.
    sends: HashMap<usize, Vec<usize>>,
    /// `(when, client, op)`: re-send `op` after an `InProgress` answer.
    pub backoffs: Vec<(Instant, usize, usize)>,
    /// Whether sessions start new operations (false while the network drains).
    pub issuing: bool,
    /// Whether new operations are all reads (`WorkloadKnobs::read_only_after_heal`).
    pub read_only: bool,
    /// Start of the liveness phase, once it has begun.
    pub heal_at: Option<Instant>,
    /// Sessions issue only what a script tells them ([`Workload::issue_scripted`]).
    pub scripted: bool,
    completions: u64,
    /// Connections broken: by a crash, by a lost reply.
    pub failovers: (u64, u64),
}

impl Workload {
    pub fn new(knobs: WorkloadKnobs, nodes: u32, prng: Prng) -> Workload {
        let keys = (0..knobs.keys).map(|k| Bytes::from(format!("k{k}"))).collect();
        let counters = (0..knobs.counters).map(|k| Bytes::from(format!("c{k}"))).collect();
        let homes: Vec<NodeId> =
            (0..nodes).flat_map(|n| (0..knobs.sessions_per_node).map(move |_| NodeId(n))).collect();
        let clients = homes
            .iter()
            .enumerate()
            .map(|(i, &node)| Client {
                node,
                route: i as Route + 1,
                session: None,
                client_id: i as u64 + 1,
                tracker: Tracker::default(),
                outstanding: VecDeque::new(),
                issue_scheduled: false,
                gone: false,
                last_seen: HashMap::new(),
                plan: VecDeque::new(),
                progressed: false,
            })
            .collect();
        let conns =
            homes.iter().enumerate().map(|(client, &node)| Conn::new(client, node)).collect();
        Workload {
            knobs,
            prng,
            retry_prng: Prng::new(0x5249_464c),
            keys,
            counters,
            clients,
            conns,
            crashed: vec![false; nodes as usize],
            failover: true,
            outbox: Vec::new(),
            sends: HashMap::new(),
            backoffs: Vec::new(),
            issuing: true,
            read_only: false,
            heal_at: None,
            scripted: false,
            completions: 0,
            failovers: (0, 0),
        }
    }

    /// Seeds the RIFL clients' own draws.
    pub fn seed_retries(&mut self, seed: u64) {
        self.retry_prng = Prng::new(seed.rotate_left(23) ^ 0x5249_464c_0000_0001);
    }

    /// The `OpenSession` request of client `c` and the node it goes to.
    pub fn open(&mut self, c: usize) -> (NodeId, RcInput) {
        let route = self.clients[c].route;
        let conn = &mut self.conns[route as usize - 1];
        let corr = conn.next_corr;
        conn.next_corr += 1;
        conn.opening = Some(corr);
        let req = ClientRequest::new(corr, Request::OpenSession);
        (conn.node, RcInput::Client { route, req })
    }

    /// Draws client `c`'s next operation, records its invocation, and returns the request and
    /// its node; `None` if the session cannot issue now.
    pub fn issue(
        &mut self,
        c: usize,
        now: Instant,
        history: &mut History,
    ) -> Option<(NodeId, RcInput)> {
        if !self.can_issue(c) || self.scripted {
            return None;
        }
        let session = self.clients[c].session?;
        let pos = self.conns[self.clients[c].route as usize - 1].next_pos;
        // Unique per operation, so a read identifies the write it saw (Kite §7 prop 2).
        let unique = Bytes::from(format!("{session}#{pos}"));
        let (kind, key) = self.draw(c, unique);
        self.invoke(c, kind, key, now, history)
    }

    /// Client `c` invokes `kind` on `key` now, as a script says.
    pub fn issue_scripted(
        &mut self,
        c: usize,
        kind: OpKind,
        key: Bytes,
        now: Instant,
        history: &mut History,
    ) -> Option<(NodeId, RcInput)> {
        let client = &self.clients[c];
        if client.gone || client.session.is_none() {
            return None;
        }
        self.invoke(c, kind, key, now, history)
    }

    fn invoke(
        &mut self,
        c: usize,
        kind: OpKind,
        key: Bytes,
        now: Instant,
        history: &mut History,
    ) -> Option<(NodeId, RcInput)> {
        let client = &mut self.clients[c];
        let session = client.session?;
        // rifl.md §2.2: every mutating request is a linearizable RPC with its own id.
        let seq = if kind.may_write() { client.tracker.new_sequence_num()? } else { 0 };
        let op = history.ops.len();
        let node = client.node;
        client.outstanding.push_back((op, seq));
        history.ops.push(Op {
            session,
            pos: 0,
            node,
            kind,
            key,
            invoke: now,
            outcome: Outcome::Pending,
            relocated: false,
        });
        Some(self.send(c, op, seq, now, history))
    }

    /// Sends (or re-sends) operation `op` of client `c` on its current session.
    fn send(
        &mut self,
        c: usize,
        op: usize,
        seq: u64,
        now: Instant,
        history: &mut History,
    ) -> (NodeId, RcInput) {
        let client = &self.clients[c];
        let route = client.route;
        let session = client.session.expect("sent only on an open session");
        let rifl = (seq > 0).then(|| Rifl {
            rpc: RpcId { client_id: client.client_id, seq },
            first_incomplete: client.tracker.first_incomplete(),
            lease: LeaseInfo {
                client_id: client.client_id,
                expiration: ClusterTime(now.0 + SIM_LEASE_TERM.as_nanos() as u64),
                timestamp: ClusterTime(now.0),
            },
        });
        let conn = &mut self.conns[route as usize - 1];
        let (corr, pos) = (conn.next_corr, conn.next_pos);
        conn.next_corr += 1;
        conn.next_pos += 1;
        conn.in_flight.push_back((corr, history.attempts.len()));
        let o = &mut history.ops[op];
        (o.session, o.pos, o.node) = (session, pos, conn.node);
        self.sends.entry(op).or_default().push(history.attempts.len());
        history.attempts.push(Attempt {
            op,
            rifl,
            session,
            pos,
            node: conn.node,
            sent: now,
            reply: None,
            rmw_id: None,
        });
        let mut req = ClientRequest::new(corr, request_for(session, &o.kind, &o.key));
        req.rifl = rifl;
        (conn.node, RcInput::Client { route, req })
    }
    /// The session's next operation: the next step of its pattern, a new pattern, or one
    /// operation of the seed's mix.
    fn draw(&mut self, c: usize, unique: Bytes) -> (OpKind, Bytes) {
        if self.clients[c].plan.is_empty()
            && !self.read_only
            && self.prng.range(0, 100) < u64::from(self.knobs.pattern_pct)
        {
            self.plan_pattern(c);
        }
        if let Some((step, key)) = self.clients[c].plan.pop_front() {
            let kind = match (step, self.read_only) {
                (Step::Write, false) => OpKind::Write { value: unique },
                (Step::Release, false) => OpKind::Release { value: unique },
                (Step::Acquire, _) => OpKind::Acquire,
                _ => OpKind::Read,
            };
            return (kind, key);
        }
        self.draw_one(c, unique)
    }

    /// A producer, consumer or relay pattern. The first `flags` data keys serve as flags,
    /// released and acquired; the others (all of them, if every key is a flag) as payload,
    /// written; consumers read any data key.
    fn plan_pattern(&mut self, c: usize) {
        let mut plan: Vec<(Step, Bytes)> = Vec::new();
        match self.prng.range(0, 3) {
            0 => {
                for _ in 0..self.prng.range(1, 4) {
                    plan.push((Step::Write, self.payload_key()));
                }
                plan.push((Step::Release, self.flag_key()));
            }
            1 => {
                plan.push((Step::Acquire, self.flag_key()));
                for _ in 0..self.prng.range(1, 4) {
                    plan.push((Step::Read, self.data_key()));
                }
            }
            _ => {
                plan.push((Step::Acquire, self.flag_key()));
                plan.push((Step::Release, self.flag_key()));
            }
        }
        self.clients[c].plan.extend(plan);
    }

    fn flags(&self) -> usize {
        (self.knobs.flags as usize).clamp(1, self.keys.len())
    }

    fn flag_key(&mut self) -> Bytes {
        self.keys[self.prng.range(0, self.flags() as u64) as usize].clone()
    }

    fn data_key(&mut self) -> Bytes {
        self.keys[self.prng.range(0, self.keys.len() as u64) as usize].clone()
    }

    fn payload_key(&mut self) -> Bytes {
        let from = if self.flags() == self.keys.len() { 0 } else { self.flags() };
        self.keys[self.prng.range(from as u64, self.keys.len() as u64) as usize].clone()
    }

    /// One operation of the seed's mix.
    fn draw_one(&mut self, c: usize, unique: Bytes) -> (OpKind, Bytes) {
        let k = &self.knobs;
        let p = &mut self.prng;
        let pct = |p: &mut Prng, x: u32| p.range(0, 100) < u64::from(x);
        let pick =
            |p: &mut Prng, keys: &[Bytes]| keys[p.range(0, keys.len() as u64) as usize].clone();
        // Reads also target the counters when something writes them.
        let readable: Vec<Bytes> = if k.rmw_pct > 0 {
            self.keys.iter().chain(&self.counters).cloned().collect()
        } else {
            self.keys.clone()
        };
        if self.read_only {
            let key = pick(p, &readable);
            return (if pct(p, k.acquire_pct) { OpKind::Acquire } else { OpKind::Read }, key);
        }
        // Kite G6: RMWs complete once contention subsides. New RMWs keep starting after
        // healing: the core restarts its back-off when a key's slot advances, so an RMW that
        // lost a slot competes for the next one on equal terms (without that, seeds 5728, 8008
        // and 9423 starved an RMW for seconds behind a stream of fresh ones).
        if pct(p, k.rmw_pct) {
            if !self.counters.is_empty() && pct(p, k.faa_pct) {
                return (OpKind::Faa { delta: p.range(1, 4) }, pick(p, &self.counters));
            }
            let key = pick(p, &self.keys);
            let expected = if pct(p, 75) {
                self.clients[c].last_seen.get(&key).cloned().unwrap_or(None)
            } else {
                None
            };
            return (OpKind::Cas { expected, new: unique, weak: pct(p, k.weak_cas_pct) }, key);
        }
        if pct(p, k.read_pct) {
            let key = pick(p, &readable);
            return (if pct(p, k.acquire_pct) { OpKind::Acquire } else { OpKind::Read }, key);
        }
        let key = pick(p, &self.keys);
        if pct(p, k.delete_pct) {
            (OpKind::Delete, key)
        } else if pct(p, k.release_pct) {
            (OpKind::Release { value: unique }, key)
        } else {
            (OpKind::Write { value: unique }, key)
        }
    }

    fn can_issue(&self, c: usize) -> bool {
        let client = &self.clients[c];
        self.issuing
            && !self.scripted
            && !client.gone
            && client.session.is_some()
            && client.outstanding.len() < self.knobs.depth as usize
    }

    /// Operations invoked by clients that are not gone and not answered yet.
    pub fn in_flight_live(&self) -> usize {
        self.clients.iter().filter(|c| !c.gone).map(|c| c.outstanding.len()).sum()
    }

    /// Whether every session of a live node completed an operation invoked after healing.
    pub fn all_progressed(&self) -> bool {
        self.clients.iter().all(|c| c.gone || c.session.is_none() || c.progressed)
    }

    /// When client `c` should next issue, if it can and is not already scheduled (closed loop:
    /// a think time after an issue or a reply).
    pub fn next_issue(&mut self, c: usize, now: Instant) -> Option<Instant> {
        if self.clients[c].issue_scheduled || !self.can_issue(c) {
            return None;
        }
        self.clients[c].issue_scheduled = true;
        // Inside a pattern the session hurries (its steps form one hb chain); between
        // operations it thinks.
        let max = if self.clients[c].plan.is_empty() {
            self.knobs.think_max_us
        } else {
            self.knobs.think_min_us
        };
        let think = self.prng.range(self.knobs.think_min_us, max + 1);
        Some(now + Duration::from_micros(think))
    }

    /// Client `c`'s scheduled issue time has come.
    pub fn issue_due(&mut self, c: usize) {
        self.clients[c].issue_scheduled = false;
    }

    /// Its node crashed: every client there fails over (in a script, its session is gone;
    /// in-flight operations stay `Pending`).
    pub fn node_crashed(&mut self, node: NodeId, history: &mut History) {
        if let Some(x) = self.crashed.get_mut(node.0 as usize) {
            *x = true;
        }
        for c in 0..self.clients.len() {
            if self.clients[c].node != node || self.clients[c].gone {
                continue;
            }
            if self.failover {
                self.failovers.0 += 1;
                self.fail_over(c, history);
            } else {
                self.clients[c].gone = true;
            }
        }
    }

    /// Client `c` gives up its connection and opens a session at another live node (rifl.md
    /// §5.1: "maybe another server"); once it is open, the unanswered requests go again.
    fn fail_over(&mut self, c: usize, history: &mut History) {
        let old = self.clients[c].route as usize - 1;
        if !self.conns[old].abandoned {
            self.conns[old].abandoned = true;
            if let Some(s) =
                self.conns[old].session.filter(|_| !self.crashed[self.conns[old].node.0 as usize])
            {
                history.abandoned.push(s);
            }
        }
        let from = self.conns[old].node;
        let live: Vec<NodeId> = (0..self.crashed.len())
            .filter(|&n| !self.crashed[n])
            .map(|n| NodeId(n as u32))
            .filter(|&n| n != from)
            .collect();
        let Some(&node) = live.get(self.retry_prng.range(0, live.len().max(1) as u64) as usize)
        else {
            self.clients[c].gone = true; // nowhere to go (never with a live majority)
            return;
        };
        self.conns.push(Conn::new(c, node));
        let client = &mut self.clients[c];
        (client.node, client.route, client.session) = (node, self.conns.len() as Route, None);
        let open = self.open(c);
        self.outbox.push(open);
    }

    /// The `OpenSession` of a re-opened connection was answered: re-send every unanswered
    /// request of the client, in order, with the same rpc ids and a fresh `first_incomplete`.
    fn resend_all(&mut self, c: usize, now: Instant, history: &mut History) {
        let ops: Vec<(usize, u64)> = self.clients[c].outstanding.iter().copied().collect();
        for (op, seq) in ops {
            let out = self.send(c, op, seq, now, history);
            self.outbox.push(out);
        }
    }

    /// A back-off after `InProgress` ended: send `op` again on the client's current session,
    /// unless a fail-over already did (its latest send is unanswered) or it is answered.
    pub fn backoff_over(&mut self, c: usize, op: usize, now: Instant, history: &mut History) {
        let Some(&(_, seq)) = self.clients[c].outstanding.iter().find(|(o, _)| *o == op) else {
            return;
        };
        if self.clients[c].session.is_none() || self.clients[c].gone {
            return;
        }
        let latest = self.sends.get(&op).and_then(|s| s.last()).map(|&a| &history.attempts[a]);
        if latest.is_some_and(|a| a.reply.is_some()) {
            let out = self.send(c, op, seq, now, history);
            self.outbox.push(out);
        }
    }

    /// Node `id.session.node` sent the first message naming RMW `id`: it belongs to the
    /// session's oldest unanswered send (an RMW blocks its session, Kite §5.1.8 — every earlier
    /// request was answered before it started). Records it; `Err` if that send is no RMW.
    pub fn rmw_started(&mut self, id: RmwId, history: &mut History) -> Result<(), String> {
        let conn = self.conns.iter().find(|k| k.session == Some(id.session));
        let Some(&(_, a)) = conn.and_then(|k| k.in_flight.front()) else {
            return Err(format!("RMW {id:?} started, but its session has nothing in flight"));
        };
        let attempt = &mut history.attempts[a];
        if !history.ops[attempt.op].kind.is_rmw() || attempt.rmw_id.is_some() {
            return Err(format!(
                "RMW {id:?} started, but the session's oldest unanswered send is op {}",
                attempt.op
            ));
        }
        attempt.rmw_id = Some(id);
        Ok(())
    }

    /// Records a reply. Returns the client it belongs to, or a description of what is wrong
    /// with it (an anomaly: a reply nobody asked for).
    pub fn on_reply(
        &mut self,
        now: Instant,
        reply: RcReply,
        history: &mut History,
    ) -> Result<usize, String> {
        let RcReply { route, resp } = reply;
        let Some(conn) = (route as usize).checked_sub(1).and_then(|r| self.conns.get_mut(r)) else {
            return Err(format!("reply on unknown connection {route}: {resp:?}"));
        };
        let c = conn.client;
        if conn.opening == Some(resp.corr) {
            conn.opening = None;
            return match resp.body {
                Response::SessionOpened { session } => {
                    conn.session = Some(session);
                    history.sessions.push(session);
                    if conn.abandoned {
                        history.abandoned.push(session);
                    } else {
                        self.clients[c].session = Some(session);
                        self.resend_all(c, now, history);
                    }
                    Ok(c)
                }
                other => Err(format!("OpenSession on connection {route} answered with {other:?}")),
            };
        }
        // Replies may in principle come out of order; the history keeps the completion order
        // and `check::session::replies_in_session_order` judges it.
        let Some(i) = conn.in_flight.iter().position(|&(corr, _)| corr == resp.corr) else {
            return Err(format!(
                "reply with unknown corr {} on connection {route}: {:?}",
                resp.corr, resp.body
            ));
        };
        let (_, a) = conn.in_flight.remove(i).unwrap_or_default();
        let abandoned = conn.abandoned;
        let op = history.attempts[a].op;
        let mutating = history.attempts[a].rifl.is_some();
        let result = match outcome_of(&history.ops[op].kind, resp.body.clone(), now, 0) {
            Outcome::Done { witness, .. } => Ok(witness),
            _ => Err(match &resp.body {
                Response::Error { code, .. } => format!("{code:?}"),
                other => format!("{other:?}"),
            }),
        };
        let in_progress = matches!(resp.body, Response::Error { code: ErrorCode::InProgress, .. });
        // A lost reply breaks the connection (rifl.md §5.1 "timeout / transport"); the network
        // is calm once healed, and lost replies stop with it.
        let lost = abandoned
            || (mutating
                && self.failover
                && self.heal_at.is_none()
                && self.retry_prng.range(0, 1000) < u64::from(self.knobs.lost_reply_permille));
        history.attempts[a].reply = Some(AttemptReply { at: now, result, lost });
        if abandoned {
            return Ok(c);
        }
        if lost {
            self.failovers.1 += 1;
            self.fail_over(c, history);
            return Ok(c);
        }
        if in_progress && self.failover {
            // Another attempt is executing at this node: try again later (rifl.md §5.1).
            self.backoffs.push((now + IN_PROGRESS_BACKOFF, c, op));
            return Ok(c);
        }
        let client = &mut self.clients[c];
        if let Some(k) = client.outstanding.iter().position(|&(o, _)| o == op) {
            let (_, seq) = client.outstanding.remove(k).unwrap_or_default();
            client.tracker.rpc_completed(seq); // Ok, Stale or another final error
        }
        let order = self.completions;
        self.completions += 1;
        let sends = self.sends.remove(&op).unwrap_or_default();
        let i = op;
        let op = &mut history.ops[op];
        op.outcome = outcome_of(&op.kind, resp.body, now, order);
        // A retried operation answered with a recorded result took effect where it executed,
        // in an earlier session (rifl.md §5.3 S4 `Completed`): the history places it there, at
        // its position in that session's order. Where no version tells, it stays where it was
        // answered.
        if let Some(cs) = op.witness().and_then(|w| w.written).filter(|_| sends.len() > 1) {
            let created = history
                .creations
                .iter()
                .rev()
                .find(|c| c.key == op.key && c.cs == cs)
                .map(|c| c.session);
            let at = sends
                .iter()
                .rev()
                .map(|&a| &history.attempts[a])
                .find(|a| Some(a.session) == created && a.op == i);
            if let Some(a) = at {
                op.relocated = (op.session, op.pos) != (a.session, a.pos);
                (op.session, op.pos, op.node) = (a.session, a.pos, a.node);
            }
        }
        if self.heal_at.is_some_and(|h| op.invoke >= h) && op.witness().is_some() {
            client.progressed = true;
        }
        // What the session now knows of the key: what it wrote, else what it read.
        let seen = op.witness().and_then(|w| match (op.expected_written(), &w.observed) {
            (Some(v), _) if w.written.is_some() => Some(v),
            (_, Some((v, _))) => Some(v.clone()),
            _ => None,
        });
        if let Some(v) = seen {
            client.last_seen.insert(op.key.clone(), v);
        }
        Ok(c)
    }
}

impl Conn {
    fn new(client: usize, node: NodeId) -> Conn {
        Conn {
            client,
            node,
            session: None,
            opening: None,
            next_corr: 0,
            next_pos: 0,
            in_flight: VecDeque::new(),
            abandoned: false,
        }
    }
}

/// The wire request for an operation of the history.
pub fn request_for(session: SessionId, kind: &OpKind, key: &Bytes) -> Request {
    let key = key.clone();
    match kind {
        OpKind::Read => Request::Get { session, key },
        OpKind::Write { value } => Request::Put { session, key, value: value.clone() },
        OpKind::Delete => Request::Delete { session, key },
        OpKind::Release { value } => Request::Release { session, key, value: value.clone() },
        OpKind::Acquire => Request::Acquire { session, key },
        OpKind::Faa { delta } => Request::Faa { session, key, delta: *delta },
        OpKind::Cas { expected, new, weak } => {
            Request::Cas { session, key, expected: expected.clone(), new: new.clone(), weak: *weak }
        }
    }
}

/// The outcome an operation's response means, with its witness (Kite §2.5). A response of the
/// wrong shape is a failure, which the completion checker reports.
pub fn outcome_of(kind: &OpKind, resp: Response, at: Instant, order: u64) -> Outcome {
    let witness = match (kind, resp) {
        (OpKind::Read | OpKind::Acquire, Response::Value { value, cs }) => {
            Witness { observed: Some((value, cs)), written: None, swapped: false }
        }
        (
            OpKind::Write { .. } | OpKind::Delete | OpKind::Release { .. },
            Response::Written { cs },
        ) => Witness { observed: None, written: Some(cs), swapped: false },
        (
            OpKind::Faa { .. } | OpKind::Cas { .. },
            Response::Rmw { observed, observed_cs, written, swapped },
        ) => Witness { observed: Some((observed, observed_cs)), written, swapped },
        (_, Response::Error { code, message }) => {
            return Outcome::Failed { at, order, error: format!("{code:?}: {message}") }
        }
        (kind, other) => {
            return Outcome::Failed {
                at,
                order,
                error: format!("unexpected response to a {}: {other:?}", kind.name()),
            }
        }
    };
    Outcome::Done { at, order, witness }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_wire::client::{ClientResponse, ErrorCode};
    use strata_wire::Carstamp;

    fn knobs(depth: u32) -> WorkloadKnobs {
        WorkloadKnobs {
            sessions_per_node: 2,
            depth,
            keys: 3,
            read_pct: 50,
            delete_pct: 20,
            think_min_us: 1,
            think_max_us: 5,
            read_only_after_heal: false,
            mix: "relaxed",
            acquire_pct: 0,
            release_pct: 0,
            rmw_pct: 0,
            faa_pct: 0,
            weak_cas_pct: 0,
            pattern_pct: 0,
            flags: 1,
            counters: 1,
            lost_reply_permille: 0,
        }
    }

    fn opened(w: &mut Workload, h: &mut History, c: usize) {
        let (node, RcInput::Client { route, req }) = w.open(c) else { panic!() };
        let session = SessionId { node, index: c as u32 };
        let resp = ClientResponse { corr: req.corr, body: Response::SessionOpened { session } };
        assert_eq!(w.on_reply(Instant(0), RcReply { route, resp }, h), Ok(c));
    }

    #[test]
    fn sessions_respect_depth_and_record_outcomes() {
        let mut h = History::default();
        let mut w = Workload::new(knobs(2), 2, Prng::new(5));
        assert_eq!(w.clients.len(), 4);
        assert!(w.issue(0, Instant(1), &mut h).is_none(), "no issue before the session is open");
        opened(&mut w, &mut h, 0);
        assert!(w.next_issue(0, Instant(1)).is_some());
        assert!(w.next_issue(0, Instant(1)).is_none(), "already scheduled");
        w.issue_due(0);
        let first = w.issue(0, Instant(2), &mut h).unwrap();
        assert!(w.issue(0, Instant(2), &mut h).is_some());
        assert!(w.issue(0, Instant(2), &mut h).is_none(), "depth 2 reached");
        let (_, RcInput::Client { route, req }) = first else { panic!() };
        let body = match &h.ops[0].kind {
            OpKind::Read => Response::Value { value: None, cs: Carstamp::ZERO },
            OpKind::Write { .. } | OpKind::Delete => Response::Written { cs: Carstamp::ZERO },
            other => panic!("a relaxed mix drew {other:?}"),
        };
        w.on_reply(
            Instant(3),
            RcReply { route, resp: ClientResponse { corr: req.corr, body } },
            &mut h,
        )
        .unwrap();
        assert!(matches!(h.ops[0].outcome, Outcome::Done { order: 0, .. }));
        assert_eq!(h.ops[1].outcome, Outcome::Pending);
        let bogus = ClientResponse { corr: 99, body: Response::SessionClosed };
        assert!(w.on_reply(Instant(3), RcReply { route, resp: bogus.clone() }, &mut h).is_err());
        assert!(w.on_reply(Instant(3), RcReply { route: 77, resp: bogus }, &mut h).is_err());
        w.failover = false;
        w.node_crashed(NodeId(0), &mut h);
        assert!(w.issue(0, Instant(4), &mut h).is_none(), "sessions die with their node");
    }

    #[test]
    fn sync_mixes_draw_every_kind_and_cas_expects_what_the_session_saw() {
        let mut k = knobs(1);
        (k.acquire_pct, k.release_pct, k.rmw_pct, k.faa_pct, k.weak_cas_pct) = (50, 50, 30, 50, 50);
        let mut w = Workload::new(k, 1, Prng::new(9));
        let mut h = History::default();
        opened(&mut w, &mut h, 0);
        w.clients[0].last_seen.insert(Bytes::from_static(b"k0"), Some(Bytes::from_static(b"seen")));
        let mut names = std::collections::BTreeSet::new();
        for i in 0..400 {
            let (kind, key) = w.draw(0, Bytes::from(format!("u{i}")));
            if let OpKind::Faa { delta } = kind {
                assert!(key.starts_with(b"c") && (1..=3).contains(&delta), "FAAs only on counters");
            }
            if matches!(
                kind,
                OpKind::Write { .. } | OpKind::Delete | OpKind::Release { .. } | OpKind::Cas { .. }
            ) {
                assert!(key.starts_with(b"k"), "counters are written only by FAAs");
            }
            if let OpKind::Cas { expected: Some(e), .. } = &kind {
                assert!(key == "k0" && e == "seen", "{key:?} {e:?}");
            }
            names.insert(kind.name());
        }
        let all = ["acquire", "cas", "delete", "faa", "read", "release", "weak-cas", "write"];
        assert_eq!(names.into_iter().collect::<Vec<_>>(), all);
    }

    #[test]
    fn rmw_and_release_responses_become_witnesses() {
        let cs = Carstamp { llc: strata_wire::Llc { ver: 2, node: NodeId(1) }, pno: 3 };
        let faa = OpKind::Faa { delta: 1 };
        let resp = Response::Rmw {
            observed: None,
            observed_cs: Carstamp::ZERO,
            written: Some(cs),
            swapped: false,
        };
        let Outcome::Done { witness, .. } = outcome_of(&faa, resp, Instant(1), 0) else { panic!() };
        assert_eq!(
            witness,
            Witness { observed: Some((None, Carstamp::ZERO)), written: Some(cs), swapped: false }
        );
        let rel = OpKind::Release { value: Bytes::from_static(b"r") };
        assert!(matches!(
            outcome_of(&rel, Response::Written { cs }, Instant(1), 0),
            Outcome::Done { .. }
        ));
        let wrong = Response::Value { value: None, cs };
        assert!(matches!(outcome_of(&rel, wrong, Instant(1), 0), Outcome::Failed { .. }));
    }

    #[test]
    fn wrong_or_error_responses_are_failures() {
        let err = Response::Error { code: ErrorCode::InvalidSession, message: "gone".into() };
        assert!(matches!(outcome_of(&OpKind::Read, err, Instant(1), 0), Outcome::Failed { .. }));
        let wrong = Response::Written { cs: Carstamp::ZERO };
        assert!(matches!(outcome_of(&OpKind::Read, wrong, Instant(1), 0), Outcome::Failed { .. }));
    }
}
