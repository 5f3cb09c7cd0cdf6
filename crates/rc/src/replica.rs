//! One rc replica: state, input dispatch, sessions, and the `Node` contract.

use std::collections::HashMap;

use bytes::Bytes;
use strata_core::{DeadlineQueue, Effects, Node};
use strata_wire::client::{ClientRequest, ClientResponse, ErrorCode, Request, Response};
use strata_wire::peer::PeerMessage;
use strata_wire::{Carstamp, Instant, NodeId, SessionId};

use crate::api::{RcEvent, RcInput, RcReply, RcStats, Route};
use crate::config::{ConfigError, RcConfig};
use crate::es::PendingWrite;
use crate::key_state::KeyState;
use crate::node_set::NodeSet;

pub type RcEffects = Effects<PeerMessage, RcReply, (), RcEvent>;

/// A session at its node (Kite §3.3). Relaxed operations of the Eventual Store complete in the
/// same step that starts them, so executing requests in arrival order is session order; the
/// blocking rules of §5.1.8 arrive with releases and acquires.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) route: Route,
}

pub struct RcReplica {
    pub(crate) cfg: RcConfig,
    /// Every replica but this one.
    pub(crate) peers: Vec<NodeId>,
    pub(crate) peer_set: NodeSet,
    pub(crate) keys: HashMap<Bytes, KeyState>,
    pub(crate) sessions: HashMap<u32, Session>,
    next_session_index: u32,
    /// Latest locally created write per key not yet acknowledged by every peer (Kite §5.1.7).
    pub(crate) pending: HashMap<Bytes, PendingWrite>,
    /// When to re-send which pending write: `(key, version)`; stale entries are skipped.
    pub(crate) retransmit: DeadlineQueue<(Bytes, Carstamp)>,
    pub(crate) next_req: u64,
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
            cfg,
            keys: HashMap::new(),
            sessions: HashMap::new(),
            next_session_index: 0,
            pending: HashMap::new(),
            retransmit: DeadlineQueue::default(),
            next_req: 0,
            stats: RcStats::default(),
            effects: RcEffects::default(),
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
            ..self.stats
        }
    }

    /// The local replica of `key`: its value and version (for tests and convergence checks).
    pub fn local(&self, key: &[u8]) -> (Option<Bytes>, Carstamp) {
        self.keys.get(key).map(|k| (k.value.clone(), k.cs)).unwrap_or((None, Carstamp::ZERO))
    }

    /// Every key this replica holds, with its version (for convergence checks).
    pub fn versions(&self) -> impl Iterator<Item = (&Bytes, &KeyState)> {
        self.keys.iter()
    }

    pub(crate) fn reply(&mut self, route: Route, corr: u64, body: Response) {
        self.effects.reply.push(RcReply { route, resp: ClientResponse { corr, body } });
    }

    fn reply_error(&mut self, route: Route, corr: u64, code: ErrorCode, message: String) {
        self.reply(route, corr, Response::Error { code, message });
    }

    /// Checks that `session` exists and belongs to the connection that names it.
    fn session_ok(&self, route: Route, session: SessionId) -> bool {
        session.node == self.cfg.node && self.sessions.get(&session.index).is_some_and(|s| s.route == route)
    }

    fn check_key(&self, key: &[u8]) -> Result<(), (ErrorCode, String)> {
        if key.is_empty() {
            return Err((ErrorCode::InvalidArgument, "keys must not be empty".into()));
        }
        if key.len() > self.cfg.limits.max_key_bytes {
            return Err((
                ErrorCode::KeyTooLarge,
                format!("key of {} bytes exceeds the limit of {} bytes", key.len(), self.cfg.limits.max_key_bytes),
            ));
        }
        Ok(())
    }

    fn check_value(&self, value: &[u8]) -> Result<(), (ErrorCode, String)> {
        if value.len() > self.cfg.limits.max_value_bytes {
            return Err((
                ErrorCode::ValueTooLarge,
                format!(
                    "value of {} bytes exceeds the limit of {} bytes",
                    value.len(),
                    self.cfg.limits.max_value_bytes
                ),
            ));
        }
        Ok(())
    }

    fn on_client(&mut self, now: Instant, route: Route, req: ClientRequest) {
        let ClientRequest { corr, body } = req;
        // Validate the session and arguments first: a rejected request has no effect.
        let session = match &body {
            Request::CloseSession { session }
            | Request::Get { session, .. }
            | Request::Put { session, .. }
            | Request::Delete { session, .. } => Some(*session),
            _ => None,
        };
        if let Some(s) = session {
            if !self.session_ok(route, s) {
                let msg = format!("session {s} is not open on this connection to {}", self.cfg.node);
                return self.reply_error(route, corr, ErrorCode::InvalidSession, msg);
            }
        }
        let checked = match &body {
            Request::Get { key, .. } | Request::Delete { key, .. } => self.check_key(key),
            Request::Put { key, value, .. } => self.check_key(key).and_then(|()| self.check_value(value)),
            _ => Ok(()),
        };
        if let Err((code, msg)) = checked {
            return self.reply_error(route, corr, code, msg);
        }
        match body {
            Request::OpenSession => {
                let index = self.next_session_index;
                self.next_session_index = self.next_session_index.wrapping_add(1);
                self.sessions.insert(index, Session { route });
                let session = SessionId { node: self.cfg.node, index };
                self.reply(route, corr, Response::SessionOpened { session });
            }
            Request::CloseSession { session } => {
                self.sessions.remove(&session.index);
                self.reply(route, corr, Response::SessionClosed);
            }
            Request::Get { key, .. } => {
                let (value, cs) = self.relaxed_read(&key);
                self.reply(route, corr, Response::Value { value, cs });
            }
            Request::Put { session, key, value } => {
                let cs = self.relaxed_write(now, session, key, Some(value));
                self.reply(route, corr, Response::Written { cs });
            }
            Request::Delete { session, key } => {
                let cs = self.relaxed_write(now, session, key, None);
                self.reply(route, corr, Response::Written { cs });
            }
            Request::Release { .. } | Request::Acquire { .. } | Request::Faa { .. } | Request::Cas { .. } => {
                // Issue #3 brings ABD and per-key Paxos; until then these are refused plainly.
                let msg = "release, acquire, fetch-and-add and compare-and-swap are not served by this node version".to_string();
                self.reply_error(route, corr, ErrorCode::UnknownRequest, msg);
            }
            Request::Status | Request::SetFault { .. } => {
                // Answered by the driver, which owns the transport; never routed here.
                let msg = "node-level request routed to the rc core".to_string();
                self.reply_error(route, corr, ErrorCode::InvalidArgument, msg);
            }
        }
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
        if !self.peer_set.contains(from) {
            self.stats.bad_peer_messages += 1;
            return;
        }
        match msg {
            // The transport consumes the handshake; a stray one is harmless.
            PeerMessage::Hello { .. } => {}
            PeerMessage::Write(w) => self.on_write(now, from, w),
            PeerMessage::WriteAck(a) => self.on_write_ack(from, a),
            // The synchronisation protocols (ABD, Paxos, barriers; issue #3) are not served by
            // this build yet: no node of it sends these, so one arriving is counted and dropped.
            _ => self.stats.bad_peer_messages += 1,
        }
    }

    fn on_tick(&mut self, now: Instant) {
        self.retransmit_due(now);
    }

    fn on_persisted(&mut self, _now: Instant, _upto: u64) {
        // The rc engine keeps no durable state (Kite §6: in-memory, crash-stop).
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.retransmit.next_deadline()
    }

    fn poll_effects(&mut self, out: &mut RcEffects) {
        self.effects.move_into(out);
    }

    fn check_invariants(&self) {
        for (key, p) in &self.pending {
            let k = self.keys.get(key).expect("a pending write's key exists locally");
            assert!(k.cs >= p.cs, "local replica of {key:?} is older than its own pending write");
            assert!(!p.acked.is_superset(self.peer_set), "fully acked pending write of {key:?} was kept");
        }
        assert!(self.retransmit.len() >= self.pending.len(), "a pending write has no re-send scheduled");
    }
}
