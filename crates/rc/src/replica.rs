//! One rc replica: state, input dispatch, the operation engine, and the `Node` contract.
//!
//! Every input is handled in two steps. First the handler updates state: it answers peers,
//! credits pending writes, records round replies and marks the operations it affected as
//! *dirty*. Then [`RcReplica::settle`] advances dirty operations (each operation's `step`
//! re-checks its conditions: level-triggered, so no event can be "missed"), delivers
//! completions in session order and starts the session operations they unblocked.

use std::collections::{BTreeSet, HashMap, HashSet};

use bytes::Bytes;
use strata_core::{DeadlineQueue, Effects, Node, Prng};
use strata_wire::client::{ClientRequest, ClientResponse, ErrorCode, Request, Response};
use strata_wire::peer::{Completion, KeyRecords, PeerMessage, RcResult, Version};
use strata_wire::{Ballot, Carstamp, Instant, Llc, NodeId, Rifl, RmwId, RpcId, SessionId};

use crate::api::{RcEvent, RcInput, RcReply, RcStats, Route};
use crate::barrier::DBit;
use crate::config::{ConfigError, RcConfig};
use crate::es::PendingWrite;
use crate::key_state::KeyState;
use crate::node_set::NodeSet;
use crate::ops::{Op, OpKind};
use crate::records;
use crate::rounds::Rounds;
use crate::session::{is_blocking, request_key, OpId, Queued, Running, Session};

pub type RcEffects = Effects<PeerMessage, RcReply, (), RcEvent>;

pub struct RcReplica {
    pub(crate) cfg: RcConfig,
    /// Every replica but this one.
    pub(crate) peers: Vec<NodeId>,
    pub(crate) peer_set: NodeSet,
    pub(crate) keys: HashMap<Bytes, KeyState>,
    pub(crate) sessions: HashMap<u32, Session>,
    next_session_index: u32,
    /// Latest locally tracked version per key not yet acknowledged by every peer (Kite §5.1.7).
    pub(crate) pending: HashMap<Bytes, PendingWrite>,
    /// When to re-send which pending write: `(key, version)`; stale entries are skipped.
    pub(crate) retransmit: DeadlineQueue<(Bytes, Carstamp)>,
    pub(crate) rounds: Rounds,
    pub(crate) ops: HashMap<OpId, Op>,
    next_op: OpId,
    /// Operations to advance before the input is done.
    pub(crate) dirty: Vec<OpId>,
    /// Operations whose barrier waits for acknowledgements: advanced whenever one arrives.
    pub(crate) barrier_waiters: BTreeSet<OpId>,
    pub(crate) credits_changed: bool,
    /// Operations waiting for an instant (barrier time-out, Paxos back-off).
    pub(crate) op_timers: DeadlineQueue<OpId>,
    /// Sessions whose queue may be able to start an operation.
    to_pump: Vec<u32>,
    /// Kite §3.1: the machine epoch, the delinquency bits, `self_delinquent`, the RMW registry.
    pub(crate) machine_epoch: u64,
    pub(crate) dbits: HashMap<NodeId, DBit>,
    pub(crate) self_delinquent: bool,
    pub(crate) rmw_registry: HashMap<SessionId, u64>,
    /// Kite §5.9 O3: nodes that recently missed a barrier; barriers do not wait `T_REL` for them.
    pub(crate) suspected: NodeSet,
    /// Rule M-1: the local RMWs per key, the first one proposing, the others queued behind it.
    pub(crate) proposers: HashMap<Bytes, std::collections::VecDeque<OpId>>,
    pub(crate) prng: Prng,
    /// Smoothed round trip from sending a version to a peer's ack (scales the pending-write
    /// `T_RETX` and the barrier's `T_REL`, `es::ack_rtts`).
    pub(crate) ack_rtt: Option<std::time::Duration>,
    pub(crate) next_req: u64,
    /// RIFL (rifl.md §3.3), node-level part: per client, the ack watermark learned from its
    /// requests (`first_incomplete - 1`; a request at or below it is `Stale`), and the RPCs
    /// executing here (a second arrival is answered `InProgress`, R-D5). Completion records
    /// themselves live with their keys (`KeyState::records`).
    pub(crate) rifl_acks: HashMap<u64, u64>,
    pub(crate) rifl_running: HashSet<RpcId>,
    /// The largest value ever installed here (never lowered): what a read or RMW reply can
    /// carry at most, for the runtime's reply budget (`RcReplica::largest_value`).
    pub(crate) largest_value: usize,
    /// Keys holding completion records or floors (what `sweep_records` visits), each once:
    /// `KeyState::swept` says whether a key is listed, so listing one costs no hashing.
    rifl_keys: Vec<Bytes>,
    rifl_next_sweep: Instant,
    pub(crate) stats: RcStats,
    pub(crate) effects: RcEffects,
}

impl RcReplica {
    pub fn new(cfg: RcConfig) -> Result<RcReplica, ConfigError> {
        cfg.validate()?;
        let peers: Vec<NodeId> = cfg.replicas.iter().copied().filter(|&n| n != cfg.node).collect();
        Ok(RcReplica {
            peer_set: peers.iter().copied().collect(),
            peers,
            keys: HashMap::new(),
            sessions: HashMap::new(),
            next_session_index: cfg.session_index_base,
            pending: HashMap::new(),
            retransmit: DeadlineQueue::default(),
            rounds: Rounds::default(),
            ops: HashMap::new(),
            next_op: 0,
            dirty: Vec::new(),
            barrier_waiters: BTreeSet::new(),
            credits_changed: false,
            op_timers: DeadlineQueue::default(),
            to_pump: Vec::new(),
            machine_epoch: 0,
            dbits: HashMap::new(),
            self_delinquent: false,
            rmw_registry: HashMap::new(),
            suspected: NodeSet::EMPTY,
            proposers: HashMap::new(),
            prng: Prng::new(cfg.seed),
            ack_rtt: None,
            next_req: 0,
            rifl_acks: HashMap::new(),
            rifl_running: HashSet::new(),
            largest_value: 0,
            rifl_keys: Vec::new(),
            rifl_next_sweep: Instant::ZERO,
            stats: RcStats::default(),
            effects: RcEffects::default(),
            cfg,
        })
    }

    pub fn config(&self) -> &RcConfig {
        &self.cfg
    }

    pub fn stats(&self) -> RcStats {
        RcStats {
            keys: self.keys.len() as u64,
            sessions: self.sessions.len() as u64,
            pending_writes: self.pending.len() as u64,
            machine_epoch: self.machine_epoch,
            ops_in_flight: self.ops.len() as u64,
            release_timeout_us: u64::try_from(self.release_timeout().as_micros())
                .unwrap_or(u64::MAX),
            ..self.stats
        }
    }

    /// The local replica of `key`: its value and version (for tests and convergence checks).
    pub fn local(&self, key: &[u8]) -> (Option<Bytes>, Carstamp) {
        self.keys.get(key).map(|k| (k.value.clone(), k.cs)).unwrap_or((None, Carstamp::ZERO))
    }

    /// Every key this replica holds, with its state (for convergence checks).
    pub fn versions(&self) -> impl Iterator<Item = (&Bytes, &KeyState)> {
        self.keys.iter()
    }

    /// Kite §0: `Q - 1`, the remote replies a quorum round waits for.
    pub(crate) fn remote_quorum(&self) -> usize {
        self.cfg.quorum() - 1
    }

    /// Raises `largest_value` to `value`'s length: called before every install of a value.
    pub(crate) fn note_value(&mut self, value: Option<&Bytes>) {
        self.largest_value = self.largest_value.max(value.map_or(0, |v| v.len()));
    }

    /// The largest value this replica has held: no read or RMW reply carries a longer one
    /// (checked with the invariants). The runtime bounds its reply budget by it: with small
    /// values it need not assume every pending read returns a value of the maximum size.
    pub fn largest_value(&self) -> usize {
        self.largest_value
    }

    pub(crate) fn key_mut(&mut self, key: &Bytes) -> &mut KeyState {
        // A new key gets its own allocation: request bytes are slices of a network read buffer,
        // which a long-lived map key would otherwise pin whole.
        if !self.keys.contains_key(key) {
            self.keys.insert(Bytes::copy_from_slice(key), KeyState::default());
        }
        self.keys.get_mut(key).expect("present")
    }

    /// Records a session's write or obligation for its next barrier (Kite §5.1.6 `P`). Entries
    /// that every peer has acknowledged are pruned now and then, so a session that never
    /// releases keeps only what is still unacknowledged.
    pub(crate) fn note_unresolved(&mut self, sid: SessionId, key: Bytes, cs: Carstamp) {
        let Some(s) = self.sessions.get_mut(&sid.index) else { return };
        s.note_unresolved(key, cs);
        if s.unresolved.len() >= s.prune_at {
            let (pending, peers) = (&self.pending, self.peer_set);
            s.unresolved
                .retain(|k, cs| !crate::es::acked(pending, peers, k, *cs).is_superset(peers));
            s.prune_at = (2 * s.unresolved.len()).max(crate::session::PRUNE_MIN);
        }
    }

    /// Kite §5.8 E3: a relaxed access is fast iff the key is in-epoch.
    pub(crate) fn in_epoch(&self, key: &[u8]) -> bool {
        self.keys.get(key).map_or(0, |k| k.epoch) == self.machine_epoch
    }

    /// Kite §5.1.1 `apply_version` with §5.1.2 `learn_committed`: installs the version if it is
    /// newer; a version `(L, n)` with `n > 0` proves slot `n` was decided with `rmw_id`.
    pub(crate) fn apply(
        &mut self,
        key: &Bytes,
        value: Option<Bytes>,
        cs: Carstamp,
        rmw_id: Option<RmwId>,
    ) -> bool {
        self.note_value(value.as_ref());
        let installed = self.key_mut(key).apply_version(value, cs, rmw_id);
        if cs.pno > 0 {
            if let Some(id) = rmw_id {
                self.learn_committed(key, cs.pno, id);
            }
        }
        installed
    }

    /// Kite §5.1.2: registers the RMW, and advances the key's last committed slot.
    pub(crate) fn learn_committed(&mut self, key: &Bytes, slot: u32, rmw_id: RmwId) {
        self.register(rmw_id);
        self.key_mut(key).learn_slot(slot, rmw_id);
    }

    /// Kite §5.1.2 `register`: `rmw_registry[session] = max(existing, seq)`, so an entry never
    /// decreases (§7 inv. 17); a change is reported.
    pub(crate) fn register(&mut self, id: RmwId) {
        let e = self.rmw_registry.entry(id.session).or_insert(0);
        let prev = *e;
        if id.seq > prev {
            *e = id.seq;
            self.effects.event.push(RcEvent::Registered { id, prev });
        }
    }

    /// Whether the simulator planted `bug` here. Always false in a build without the `canaries`
    /// feature, where every canary branch compiles away.
    #[inline]
    pub(crate) fn planted(&self, bug: crate::PlantedBug) -> bool {
        #[cfg(feature = "canaries")]
        return self.cfg.planted_bug == Some(bug);
        #[cfg(not(feature = "canaries"))]
        {
            let _ = bug;
            false
        }
    }

    pub(crate) fn registry_has(&self, id: RmwId) -> bool {
        self.rmw_registry.get(&id.session).is_some_and(|&s| s >= id.seq)
    }

    /// RIFL on arrival (rifl.md §5.3 S3, S4's `process_ack`): a mutating request's envelope
    /// must keep the client invariant; its `first_incomplete` acknowledges every earlier RPC of
    /// the client. Reads ignore the envelope.
    fn take_envelope(
        &mut self,
        req: &Request,
        rifl: Option<&Rifl>,
    ) -> Result<(), (ErrorCode, String)> {
        let Some(e) = rifl.filter(|_| req.is_linearizable()) else { return Ok(()) };
        e.check().map_err(|why| {
            (ErrorCode::BadEnvelope, format!("RIFL envelope of {}: {why}", e.rpc))
        })?;
        let ack = self.rifl_acks.entry(e.rpc.client_id).or_insert(0);
        *ack = (*ack).max(e.first_incomplete - 1);
        Ok(())
    }

    /// RIFL at the start of a mutating operation (§5.3 S4): `Some` reply if it must not
    /// execute — it completed already (the recorded result, R-G2), the client acknowledged it
    /// (`Stale`), or another attempt is executing here (`InProgress`).
    fn rifl_recorded(&mut self, key: &Bytes, e: &Rifl) -> Option<Response> {
        if e.rpc.seq <= self.rifl_acks.get(&e.rpc.client_id).copied().unwrap_or(0) {
            self.stats.rifl_stale += 1;
            return Some(stale(e.rpc));
        }
        if let Some(reply) = self.recorded_reply(key, Some(e)) {
            return Some(reply);
        }
        let running = !self.rifl_running.is_empty() && self.rifl_running.contains(&e.rpc);
        running.then(|| Response::Error {
            code: ErrorCode::InProgress,
            message: format!("{}: another attempt is executing at this node", e.rpc),
        })
    }

    /// `Busy` if an exactly-once mutation of `key` adding up to `reserve` bytes of records
    /// would take the key's set past its bound (`records::budget`): what this replica
    /// replicates with the key must fit a peer frame. Collected records make room again.
    pub(crate) fn records_full(&mut self, key: &Bytes, reserve: usize) -> Option<Response> {
        let held = self.keys.get(key).map_or(0, |k| k.records.encoded_len());
        let budget = records::budget(&self.cfg.limits, self.cfg.replicas.len());
        if held + reserve <= budget {
            return None;
        }
        self.stats.rifl_busy += 1;
        Some(Response::Error {
            code: ErrorCode::Busy,
            message: format!(
                "the key holds {held} bytes of unacknowledged exactly-once results, at its bound \
                 of {budget}; nothing was done by this attempt, retry after a short back-off"
            ),
        })
    }

    /// What `key`'s completion records say about `rifl`'s RPC (rifl.md §5.4): its recorded
    /// result (R-G2), `Stale` below the client's floor, or `None`: it may execute. Called at
    /// the start of an operation and again wherever a round brought more records (a release's
    /// `READ_TS` replies, a Paxos slot's catch-up).
    pub(crate) fn recorded_reply(&mut self, key: &Bytes, rifl: Option<&Rifl>) -> Option<Response> {
        let e = rifl?;
        if self.planted(crate::PlantedBug::IgnoreCompletionRecords) {
            return None; // CANARY: every retry executes again.
        }
        match records::lookup(&self.keys.get(key)?.records, e.rpc) {
            records::Lookup::Done(result) => {
                self.stats.rifl_duplicates += 1;
                Some(records::response(result))
            }
            records::Lookup::Stale => {
                self.stats.rifl_stale += 1;
                Some(stale(e.rpc))
            }
            records::Lookup::Unknown => None,
        }
    }

    /// Merges completion records received with a version of `key`.
    /// Every record carries its client's acknowledgement watermark: the node learns it (so it
    /// answers `Stale` for anything below, and the sweep can collect records at every key),
    /// and lists the key for the sweep the first time it holds records. One lookup of the key:
    /// this runs for every linearizable write at every replica.
    pub(crate) fn merge_records(&mut self, key: &Bytes, from: &KeyRecords) {
        if from.is_empty() {
            return;
        }
        let k = self.key_mut(key);
        records::merge(&mut k.records, from);
        let unlisted = !k.swept && !k.records.is_empty();
        k.swept |= unlisted;
        if unlisted {
            // Its own copy: `key` may be a slice of a network read buffer.
            self.rifl_keys.push(Bytes::copy_from_slice(key));
        }
        for (client, ack) in
            from.floors.iter().copied().chain(from.done.iter().map(|c| (c.rpc.client_id, c.ack)))
        {
            let known = self.rifl_acks.entry(client).or_insert(0);
            *known = (*known).max(ack);
        }
    }

    /// The completion record of `rifl`'s RPC with `result`, added to `key`'s records; returned
    /// as the one-record delta its version's broadcast carries.
    pub(crate) fn record_completion(
        &mut self,
        key: &Bytes,
        rifl: Option<&Rifl>,
        result: RcResult,
    ) -> KeyRecords {
        let Some(e) = rifl else { return KeyRecords::default() };
        let delta = KeyRecords {
            floors: Vec::new(),
            done: vec![Completion { rpc: e.rpc, ack: e.first_incomplete - 1, result }],
        };
        self.merge_records(key, &delta);
        delta
    }

    /// rifl.md §5.4 `process_ack`, across keys: a record whose client has acknowledged it since
    /// (learned from any request or record of that client) is collected, and so are the
    /// key's floors: the node's watermarks (`rifl_acks`) keep answering `Stale` for them (R-D8's
    /// ack records, kept per node). Run every `RIFL_SWEEP`: a client that never writes a key
    /// again would otherwise leave its record there for good.
    fn sweep_records(&mut self, now: Instant) {
        if now < self.rifl_next_sweep {
            return;
        }
        self.rifl_next_sweep = now + RIFL_SWEEP;
        let acks = &self.rifl_acks;
        let keys = &mut self.keys;
        self.rifl_keys.retain(|key| {
            let Some(k) = keys.get_mut(key) else { return false };
            records::collect_acked(&mut k.records, |client| {
                acks.get(&client).copied().unwrap_or(0)
            });
            k.swept = !k.records.is_empty();
            k.swept
        });
    }

    /// rifl.md §5.6, collection by client death: the lease service confirmed these clients'
    /// leases expired, so their watermarks and their records at every key go (a record of
    /// theirs merged back later from a peer is collected again the same way). The node's
    /// lease check answers their RPCs `ExpiredLease` from now on, never running them.
    /// Records of an RPC executing here stay with it.
    pub fn forget_clients(&mut self, clients: &[u64]) {
        if clients.is_empty() {
            return;
        }
        let running: HashSet<u64> = self.rifl_running.iter().map(|r| r.client_id).collect();
        let gone: HashSet<u64> = clients.iter().copied().filter(|c| !running.contains(c)).collect();
        for c in &gone {
            self.rifl_acks.remove(c);
        }
        let keys = &mut self.keys;
        self.rifl_keys.retain(|key| {
            let Some(k) = keys.get_mut(key) else { return false };
            records::forget_clients(&mut k.records, &gone);
            k.swept = !k.records.is_empty();
            k.swept
        });
        self.stats.rifl_clients_expired += gone.len() as u64;
    }

    fn reply_error(&mut self, route: Route, corr: u64, code: ErrorCode, message: String) {
        self.effects.reply.push(RcReply {
            route,
            resp: ClientResponse { corr, body: Response::Error { code, message } },
        });
    }

    /// Checks that `session` exists and belongs to the connection that names it.
    fn session_ok(&self, route: Route, session: SessionId) -> bool {
        session.node == self.cfg.node
            && self.sessions.get(&session.index).is_some_and(|s| s.route == route)
    }

    // The key and value limits are defined once, in `strata_wire::Limits` (docs/design.md,
    // "Limits and bounds"); log tables check them with the same functions.
    fn check_key(&self, key: &[u8]) -> Result<(), (ErrorCode, String)> {
        self.cfg.limits.check_key(key).map_err(|e| (e.code(), e.to_string()))
    }

    fn check_value(&self, value: &[u8]) -> Result<(), (ErrorCode, String)> {
        self.cfg.limits.check_value(value).map_err(|e| (e.code(), e.to_string()))
    }

    fn validate(&self, req: &Request) -> Result<(), (ErrorCode, String)> {
        if let Some(key) = request_key(req) {
            self.check_key(key)?;
        }
        match req {
            Request::Put { value, .. } | Request::Release { value, .. } => self.check_value(value),
            Request::Cas { expected, new, .. } => {
                self.check_value(new)?;
                expected.as_deref().map_or(Ok(()), |e| self.check_value(e))
            }
            _ => Ok(()),
        }
    }

    fn on_client(&mut self, now: Instant, route: Route, req: ClientRequest) {
        let ClientRequest { corr, body, rifl } = req;
        match body {
            Request::OpenSession => {
                let index = self.next_session_index;
                self.next_session_index = self.next_session_index.wrapping_add(1);
                let session = SessionId { node: self.cfg.node, index };
                self.sessions.insert(index, Session::new(session, route));
                let resp = ClientResponse { corr, body: Response::SessionOpened { session } };
                self.effects.reply.push(RcReply { route, resp });
            }
            Request::CloseSession { session } => {
                if self.session_ok(route, session) {
                    // Kite §6, client crash: operations in flight run to completion; their
                    // results are discarded with the session.
                    self.sessions.remove(&session.index);
                }
                let resp = ClientResponse { corr, body: Response::SessionClosed };
                self.effects.reply.push(RcReply { route, resp });
            }
            Request::Status | Request::SetFault { .. } | Request::Ping => {
                // Answered by the driver, which owns the transport; never routed here.
                let msg = "node-level request routed to the rc core".to_string();
                self.reply_error(route, corr, ErrorCode::InvalidArgument, msg);
            }
            body => {
                let Some(session) = body.session() else { return };
                if !self.session_ok(route, session) {
                    let msg = format!(
                        "session {session} is not open on this connection to {}",
                        self.cfg.node
                    );
                    return self.reply_error(route, corr, ErrorCode::InvalidSession, msg);
                }
                // Validate first: a rejected request has no effect (it still keeps its place in
                // session order, as an error reply).
                let checked =
                    self.validate(&body).and_then(|()| self.take_envelope(&body, rifl.as_ref()));
                let rifl = rifl.filter(|_| body.is_linearizable());
                let s = self.sessions.get_mut(&session.index).expect("checked above");
                let seq = s.next_seq;
                s.next_seq += 1;
                match checked {
                    Ok(()) => s.queue.push_back(Queued { seq, corr, req: body, rifl }),
                    Err((code, message)) => {
                        s.done.insert(
                            seq,
                            ClientResponse { corr, body: Response::Error { code, message } },
                        );
                    }
                }
                self.to_pump.push(session.index);
                self.settle(now);
            }
        }
    }

    /// Starts every queued operation of the session that rule §5.1.8 lets start.
    fn pump_session(&mut self, now: Instant, index: u32) {
        loop {
            let Some(s) = self.sessions.get_mut(&index) else { return };
            match s.queue.front() {
                Some(q) if s.may_start(&q.req) => {}
                _ => break,
            }
            let q = s.queue.pop_front().expect("front exists");
            let sid = s.id;
            let blocking = is_blocking(&q.req);
            let key = request_key(&q.req).cloned().unwrap_or_default();
            let recorded = q.rifl.as_ref().and_then(|e| self.rifl_recorded(&key, e));
            // An RMW's bound is checked when it takes its turn on the key (`step_rmw`): only
            // then is no other local RMW of the key computing a record.
            let writes = matches!(
                q.req,
                Request::Put { .. } | Request::Delete { .. } | Request::Release { .. }
            );
            let full = if recorded.is_none() && writes && q.rifl.is_some() {
                self.records_full(&key, records::reserve(&self.cfg.limits, false))
            } else {
                None
            };
            let started = match recorded.or(full) {
                Some(body) => Started::Done(body),
                None => self.start(now, sid, q.req, q.rifl),
            };
            match started {
                Started::Done(body) => {
                    self.deliver(index, q.seq, ClientResponse { corr: q.corr, body })
                }
                Started::Op(kind) => {
                    let id = self.next_op;
                    self.next_op += 1;
                    if let Some(e) = &q.rifl {
                        self.rifl_running.insert(e.rpc);
                    }
                    let rifl = q.rifl;
                    self.ops.insert(
                        id,
                        Op {
                            session: index,
                            seq: q.seq,
                            corr: q.corr,
                            sid,
                            key: key.clone(),
                            kind,
                            rifl,
                        },
                    );
                    let s = self.sessions.get_mut(&index).expect("still there");
                    s.running.insert(q.seq, Running { op: id, key, blocking });
                    self.dirty.push(id);
                }
            }
        }
        self.flush_session(index);
    }

    /// Starts one operation: completes it at once (fast paths) or returns its state machine.
    fn start(&mut self, now: Instant, sid: SessionId, req: Request, rifl: Option<Rifl>) -> Started {
        match req {
            Request::Get { key, .. } => {
                if self.in_epoch(&key) {
                    let (value, cs) = self.local(&key);
                    Started::Done(Response::Value { value, cs })
                } else {
                    Started::Op(OpKind::slow_read(self.machine_epoch))
                }
            }
            Request::Put { key, value, .. } => {
                self.start_relaxed_write(now, sid, key, Some(value), rifl)
            }
            Request::Delete { key, .. } => self.start_relaxed_write(now, sid, key, None, rifl),
            Request::Release { value, .. } => Started::Op(OpKind::release(value)),
            Request::Acquire { .. } => Started::Op(OpKind::acquire(self.next_acquire_id(sid))),
            Request::Faa { key, delta, .. } => {
                self.start_rmw(sid, key, crate::paxos::RmwOp::Faa { delta })
            }
            Request::Cas { key, expected, new, weak, .. } => {
                self.start_rmw(sid, key, crate::paxos::RmwOp::Cas { expected, new, weak })
            }
            other => unreachable!("not a session operation: {other:?}"),
        }
    }

    fn start_relaxed_write(
        &mut self,
        now: Instant,
        sid: SessionId,
        key: Bytes,
        value: Option<Bytes>,
        rifl: Option<Rifl>,
    ) -> Started {
        if self.in_epoch(&key) {
            let cs = self.relaxed_write_fast(now, sid, key, value, rifl.as_ref());
            Started::Done(Response::Written { cs })
        } else {
            Started::Op(OpKind::slow_write(self.machine_epoch, value))
        }
    }

    pub(crate) fn next_acquire_id(&mut self, sid: SessionId) -> strata_wire::AcquireId {
        let s = self.sessions.get_mut(&sid.index).expect("a started operation's session exists");
        s.acq_seq += 1;
        strata_wire::AcquireId { session: sid, seq: s.acq_seq }
    }

    /// Records a completion and sends every response now reportable in session order.
    fn deliver(&mut self, index: u32, seq: u64, resp: ClientResponse) {
        let Some(s) = self.sessions.get_mut(&index) else { return };
        s.running.remove(&seq);
        s.done.insert(seq, resp);
        self.to_pump.push(index);
    }

    fn flush_session(&mut self, index: u32) {
        let Some(s) = self.sessions.get_mut(&index) else { return };
        let route = s.route;
        let mut out = Vec::new();
        s.take_reportable(&mut out);
        self.effects.reply.extend(out.into_iter().map(|resp| RcReply { route, resp }));
    }

    /// Advances dirty operations, delivers completions and starts what they unblocked, until
    /// nothing changes.
    pub(crate) fn settle(&mut self, now: Instant) {
        loop {
            if std::mem::take(&mut self.credits_changed) {
                self.dirty.extend(self.barrier_waiters.iter().copied());
            }
            if let Some(id) = self.dirty.pop() {
                self.advance(now, id);
                continue;
            }
            if self.to_pump.is_empty() {
                break;
            }
            let mut pump = std::mem::take(&mut self.to_pump);
            pump.sort_unstable();
            pump.dedup();
            for index in pump {
                self.pump_session(now, index);
            }
        }
    }

    fn advance(&mut self, now: Instant, id: OpId) {
        let Some(mut op) = self.ops.remove(&id) else { return };
        match self.step(now, id, &mut op) {
            Some(body) => {
                self.barrier_waiters.remove(&id);
                if let Some(e) = &op.rifl {
                    self.rifl_running.remove(&e.rpc);
                }
                self.deliver(op.session, op.seq, ClientResponse { corr: op.corr, body });
            }
            None => {
                self.ops.insert(id, op);
            }
        }
    }

    /// One step of an operation's state machine; `Some` when it completed with that response.
    fn step(&mut self, now: Instant, id: OpId, op: &mut Op) -> Option<Response> {
        match &mut op.kind {
            OpKind::SlowRead(s) => self.step_slow_read(now, id, &op.key, s),
            OpKind::SlowWrite(s) => {
                self.step_slow_write(now, id, op.sid, &op.key, s, op.rifl.as_ref())
            }
            OpKind::Release(r) => self.step_release(now, id, op.sid, &op.key, r, op.rifl.as_ref()),
            OpKind::Acquire(a) => self.step_acquire(now, id, op.sid, &op.key, a),
            OpKind::Rmw(r) => self.step_rmw(now, id, op.sid, &op.key, r, op.rifl.as_ref()),
        }
    }

    fn on_peer(&mut self, now: Instant, from: NodeId, msg: PeerMessage) {
        // Kite §5.9 O3: a node leaves `suspected` as soon as it is heard from.
        if self.suspected.contains(from) {
            self.suspected.remove(from);
        }
        let (reply_to, key_cs) = match &msg {
            PeerMessage::WriteAck(a) => (Some(a.req), Some((&a.key, a.cs))),
            PeerMessage::ReadTsReply { req, key, cs, .. } => (Some(*req), Some((key, *cs))),
            PeerMessage::ReadReply(r) => (Some(r.req), Some((&r.key, r.cs))),
            PeerMessage::CommitAck { req, key, cs } => (Some(*req), Some((key, *cs))),
            PeerMessage::ProposeReply(r) | PeerMessage::AcceptReply(r) => {
                (Some(r.req), r.current.as_ref().map(|v| (&r.key, v.cs)))
            }
            PeerMessage::SlowReleaseAck { req } => (Some(*req), None),
            _ => (None, None),
        };
        if let Some(req) = reply_to {
            // Kite §5.1.7: any reply showing a version >= a pending write's credits it.
            if let Some((key, cs)) = key_cs {
                let key = key.clone();
                self.credit(now, &key, from, cs);
            }
            if let Some(op) = self.note_reply(req, from, msg) {
                self.dirty.push(op);
            }
            return;
        }
        match msg {
            PeerMessage::Hello { .. } => {} // the transport consumes handshakes
            PeerMessage::Write(w) => self.on_write(now, from, w),
            PeerMessage::ReadTs { req, key } => {
                let (cs, records) = self
                    .keys
                    .get(&key)
                    .map_or((Carstamp::ZERO, KeyRecords::default()), |k| (k.cs, k.records.clone()));
                self.effects.send.push((from, PeerMessage::ReadTsReply { req, key, cs, records }));
            }
            PeerMessage::Read(r) => self.on_read(from, r),
            PeerMessage::SlowRelease { req, dm } => self.on_slow_release(from, req, dm),
            PeerMessage::ResetBit { acq } => self.on_reset_bit(from, acq),
            PeerMessage::Propose(p) => self.on_propose(from, p),
            PeerMessage::Accept(a) => self.on_accept(from, a),
            PeerMessage::Commit(c) => self.on_commit(from, c),
            _ => unreachable!("replies are handled above"),
        }
    }

    /// Whether a peer message is acceptable at all (hostile input is counted and dropped).
    /// Sizes, and the counters a peer sends: a clock, slot or ballot round at the counter's
    /// end would wrap (or panic) at this replica's next increment, and a clock naming no
    /// replica has no owner. [Strata] design.md, "Untrusted input": a forged `Write` at
    /// version `u64::MAX` once made the next local put abort the node.
    fn peer_message_ok(&self, msg: &PeerMessage) -> bool {
        let limits = &self.cfg.limits;
        let key_ok = |k: &Bytes| !k.is_empty() && k.len() <= limits.max_key_bytes;
        let value_ok =
            |v: &Option<Bytes>| v.as_ref().is_none_or(|v| v.len() <= limits.max_value_bytes);
        let llc_ok = |l: &Llc| {
            l.ver < CLOCK_CEILING
                && (l.ver == 0 || self.peer_set.contains(l.node) || l.node == self.cfg.node)
        };
        let cs_ok = |cs: &Carstamp| llc_ok(&cs.llc) && cs.pno < COUNTER_CEILING;
        // An RMW's version (`pno > 0`) names its RMW, a plain one does not (Kite §7 inv. 12:
        // without the id the slot is never learned, and the version sits beyond it).
        let versioned =
            |cs: &Carstamp, id: &Option<RmwId>| cs_ok(cs) && id.is_some() == (cs.pno > 0);
        let version_ok = |v: &Option<Version>| {
            v.as_ref().is_none_or(|v| value_ok(&v.value) && versioned(&v.cs, &v.rmw_id))
        };
        let slot_ok = |slot: u32| slot > 0 && slot < COUNTER_CEILING;
        let ballot_ok = |b: &Ballot| b.round < COUNTER_CEILING;
        match msg {
            PeerMessage::Write(w) => {
                key_ok(&w.key) && value_ok(&w.value) && versioned(&w.cs, &w.rmw_id)
            }
            PeerMessage::WriteAck(a) => cs_ok(&a.cs),
            PeerMessage::Read(r) => key_ok(&r.key) && cs_ok(&r.known_cs),
            PeerMessage::ReadTs { key, .. } => key_ok(key),
            PeerMessage::ReadTsReply { cs, .. } | PeerMessage::CommitAck { cs, .. } => cs_ok(cs),
            PeerMessage::Propose(p) => {
                key_ok(&p.key) && slot_ok(p.slot) && ballot_ok(&p.ballot) && cs_ok(&p.known_cs)
            }
            PeerMessage::Accept(a) => {
                key_ok(&a.key)
                    && slot_ok(a.slot)
                    && ballot_ok(&a.ballot)
                    && value_ok(&a.tuple.value)
                    && llc_ok(&a.tuple.base)
            }
            PeerMessage::Commit(c) => {
                key_ok(&c.key) && slot_ok(c.slot) && value_ok(&c.value) && cs_ok(&c.cs)
            }
            PeerMessage::ReadReply(r) => cs_ok(&r.cs) && version_ok(&r.newer),
            PeerMessage::ProposeReply(r) | PeerMessage::AcceptReply(r) => version_ok(&r.current),
            _ => true,
        }
    }
}

/// A Lamport clock at or above this is never produced (2^62 writes to one key) and is refused
/// from a peer, so `ver + 1` cannot wrap.
const CLOCK_CEILING: u64 = 1 << 62;
/// The same bound for 32-bit counters: RMW slots, `pno`s and ballot rounds.
const COUNTER_CEILING: u32 = 1 << 30;

/// How `start` left an operation.
pub(crate) enum Started {
    Done(Response),
    Op(OpKind),
}

/// How often acknowledged completion records are collected across keys.
const RIFL_SWEEP: std::time::Duration = std::time::Duration::from_secs(1);

fn stale(rpc: RpcId) -> Response {
    Response::Error {
        code: ErrorCode::Stale,
        message: format!("{rpc}: already acknowledged by the client"),
    }
}

impl Node for RcReplica {
    type Request = RcInput;
    type Message = PeerMessage;
    type Reply = RcReply;
    type Persist = ();
    type Event = RcEvent;

    fn id(&self) -> NodeId {
        self.cfg.node
    }

    fn on_client_request(&mut self, now: Instant, input: RcInput) {
        match input {
            RcInput::Client { route, req } => self.on_client(now, route, req),
            RcInput::Disconnected { route } => self.sessions.retain(|_, s| s.route != route),
        }
    }

    fn on_message(&mut self, now: Instant, from: NodeId, msg: PeerMessage) {
        if !self.peer_set.contains(from) || !self.peer_message_ok(&msg) {
            self.stats.bad_peer_messages += 1;
            return;
        }
        self.on_peer(now, from, msg);
        self.settle(now);
    }

    fn on_tick(&mut self, now: Instant) {
        self.sweep_records(now);
        self.retransmit_due(now);
        self.resend_due_rounds(now);
        while let Some(id) = self.op_timers.pop_due(now) {
            self.dirty.push(id);
        }
        self.settle(now);
    }

    fn on_persisted(&mut self, _now: Instant, _upto: u64) {
        // The rc engine keeps no durable state (Kite §6: in-memory, crash-stop).
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let sweep = (!self.rifl_keys.is_empty()).then_some(self.rifl_next_sweep);
        [
            self.retransmit.next_deadline(),
            self.rounds.resend.next_deadline(),
            self.op_timers.next_deadline(),
            sweep,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn poll_effects(&mut self, out: &mut RcEffects) {
        self.effects.move_into(out);
    }

    fn check_invariants(&self) {
        for (key, p) in &self.pending {
            let k = self.keys.get(key).expect("a pending write's key exists locally");
            assert!(k.cs >= p.cs, "local replica of {key:?} is older than its own pending write");
            assert!(
                !p.acked.is_superset(self.peer_set),
                "fully acked pending write of {key:?} was kept"
            );
        }
        assert!(
            self.retransmit.len() >= self.pending.len(),
            "a pending write has no re-send scheduled"
        );
        for (key, k) in &self.keys {
            assert!(
                k.value.as_ref().is_none_or(|v| v.len() <= self.largest_value),
                "key {key:?} holds a value longer than largest_value {}",
                self.largest_value
            );
            // Kite §7 inv. 11 and 12.
            assert!(
                k.epoch <= self.machine_epoch,
                "key {key:?} epoch {} above the machine epoch {}",
                k.epoch,
                self.machine_epoch
            );
            assert!(
                k.cs.pno <= k.lc,
                "key {key:?} version {} beyond its last committed slot {}",
                k.cs,
                k.lc
            );
            assert_eq!(
                k.rmw_id.is_some(),
                k.cs.pno > 0,
                "key {key:?}: an RMW version names its RMW, a plain one does not"
            );
            // Kite §7 inv. 17, local part (§5.1.2, P-DEDUP): every RMW known decided here is
            // registered, so this acceptor acks a proposal for slot `lc + 1` only with the RMW
            // of slot `lc` registered.
            for id in [k.lc_rmw, k.rmw_id].into_iter().flatten() {
                assert!(
                    self.registry_has(id),
                    "key {key:?}: {id:?} is known decided (lc {}) but not registered",
                    k.lc
                );
            }
            assert_eq!(
                k.lc_rmw.is_some(),
                k.lc > 0,
                "key {key:?}: last committed slot {} without its RMW",
                k.lc
            );
            if let Err(e) = records::check(&k.records) {
                panic!("key {key:?}: completion records: {e}");
            }
            assert!(
                k.swept || k.records.is_empty(),
                "key {key:?} holds records the sweep never visits"
            );
        }
        // RIFL: the sweep lists exactly the flagged keys, each once.
        assert_eq!(
            self.keys.values().filter(|k| k.swept).count(),
            self.rifl_keys.len(),
            "sweep flags and sweep list disagree"
        );
        assert!(
            self.rifl_keys.iter().all(|key| self.keys.get(key).is_some_and(|k| k.swept)),
            "a listed key is not flagged"
        );
        // RIFL: an RPC is in progress here only while one of its operations runs.
        let running: HashSet<RpcId> =
            self.ops.values().filter_map(|op| op.rifl.map(|e| e.rpc)).collect();
        assert!(
            self.rifl_running.is_subset(&running),
            "an RPC is marked in progress with no operation running it"
        );
        for s in self.sessions.values() {
            for r in s.running.values() {
                assert!(self.ops.contains_key(&r.op), "session {} runs a vanished operation", s.id);
            }
            assert!(
                s.running.values().filter(|r| r.blocking).count() <= 1,
                "two blocking operations in session {}",
                s.id
            );
        }
        self.check_barriers();
        self.check_dbits();
        for q in self.proposers.values() {
            assert!(!q.is_empty(), "an empty proposer queue was kept");
        }
    }
}
