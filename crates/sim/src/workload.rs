//! Simulated clients: closed-loop sessions issuing relaxed reads, writes and deletes on a small
//! key set, so that sessions conflict (Kite §2.1, §2.2, §5.2, §5.3).
//!
//! Each session belongs to one node and talks to it over its own connection (`route`); it keeps
//! at most `depth` operations in flight (§5.1.8 lets relaxed ops pipeline) and waits a think
//! time between issues. Every operation goes into the [`History`] when it is invoked and gets
//! its outcome when its reply arrives. [`request_for`] and [`outcome_of`] are the one place
//! where the history's operation kinds meet the wire: a new protocol adds its arms there.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use strata_core::Prng;
use strata_rc::{RcInput, RcReply, Route};
use strata_wire::client::{ClientRequest, Request, Response};
use strata_wire::{Instant, NodeId, SessionId};

use crate::history::{History, Op, OpKind, Outcome, Witness};
use crate::knobs::WorkloadKnobs;

/// One simulated session and its connection.
#[derive(Debug)]
pub struct Client {
    pub node: NodeId,
    pub route: Route,
    /// Set once the node has answered `OpenSession`.
    pub session: Option<SessionId>,
    next_corr: u64,
    next_pos: u64,
    /// `(corr, index in History::ops)` of the requests awaiting a reply, oldest first.
    in_flight: VecDeque<(u64, usize)>,
    /// The corr of the `OpenSession` request until it is answered.
    opening: Option<u64>,
    issue_scheduled: bool,
    /// Its node crashed: the session is gone with it (Kite §2.1).
    pub gone: bool,
}

#[derive(Debug)]
pub struct Workload {
    knobs: WorkloadKnobs,
    prng: Prng,
    keys: Vec<Bytes>,
    pub clients: Vec<Client>,
    /// Whether sessions start new operations (false while the network drains).
    pub issuing: bool,
    /// Whether new operations are all reads (`WorkloadKnobs::read_only_after_heal`).
    pub read_only: bool,
    completions: u64,
}

impl Workload {
    pub fn new(knobs: WorkloadKnobs, nodes: u32, prng: Prng) -> Workload {
        let keys = (0..knobs.keys).map(|k| Bytes::from(format!("k{k}"))).collect();
        let clients = (0..nodes)
            .flat_map(|n| (0..knobs.sessions_per_node).map(move |_| NodeId(n)))
            .enumerate()
            .map(|(i, node)| Client {
                node,
                route: i as Route + 1,
                session: None,
                next_corr: 0,
                next_pos: 0,
                in_flight: VecDeque::new(),
                opening: None,
                issue_scheduled: false,
                gone: false,
            })
            .collect();
        Workload { knobs, prng, keys, clients, issuing: true, read_only: false, completions: 0 }
    }

    /// The `OpenSession` request of client `c` and the node it goes to.
    pub fn open(&mut self, c: usize) -> (NodeId, RcInput) {
        let client = &mut self.clients[c];
        let corr = client.next_corr;
        client.next_corr += 1;
        client.opening = Some(corr);
        let req = ClientRequest { corr, body: Request::OpenSession };
        (client.node, RcInput::Client { route: client.route, req })
    }

    /// Draws client `c`'s next operation, records its invocation, and returns the request and
    /// its node; `None` if the session cannot issue now.
    pub fn issue(&mut self, c: usize, now: Instant, history: &mut History) -> Option<(NodeId, RcInput)> {
        if !self.can_issue(c) {
            return None;
        }
        let key = self.keys[self.prng.range(0, self.keys.len() as u64) as usize].clone();
        let client = &self.clients[c];
        let session = client.session?;
        let pos = client.next_pos;
        let kind = if self.prng.range(0, 100) < u64::from(self.knobs.read_pct) || self.read_only {
            OpKind::Read
        } else if self.prng.range(0, 100) < u64::from(self.knobs.delete_pct) {
            OpKind::Delete
        } else {
            // Unique per operation, so a read identifies the write it saw (Kite §7 prop 2).
            OpKind::Write { value: Bytes::from(format!("{session}#{pos}")) }
        };
        let client = &mut self.clients[c];
        let corr = client.next_corr;
        client.next_corr += 1;
        client.next_pos += 1;
        client.in_flight.push_back((corr, history.ops.len()));
        let req = ClientRequest { corr, body: request_for(session, &kind, &key) };
        history.ops.push(Op { session, pos, node: client.node, kind, key, invoke: now, outcome: Outcome::Pending });
        Some((client.node, RcInput::Client { route: client.route, req }))
    }

    fn can_issue(&self, c: usize) -> bool {
        let client = &self.clients[c];
        self.issuing && !client.gone && client.session.is_some() && client.in_flight.len() < self.knobs.depth as usize
    }

    /// When client `c` should next issue, if it can and is not already scheduled (closed loop:
    /// a think time after an issue or a reply).
    pub fn next_issue(&mut self, c: usize, now: Instant) -> Option<Instant> {
        if self.clients[c].issue_scheduled || !self.can_issue(c) {
            return None;
        }
        self.clients[c].issue_scheduled = true;
        let think = self.prng.range(self.knobs.think_min_us, self.knobs.think_max_us + 1);
        Some(now + Duration::from_micros(think))
    }

    /// Client `c`'s scheduled issue time has come.
    pub fn issue_due(&mut self, c: usize) {
        self.clients[c].issue_scheduled = false;
    }

    /// Its node crashed: every session there is gone; in-flight operations stay `Pending`.
    pub fn node_crashed(&mut self, node: NodeId) {
        for c in self.clients.iter_mut().filter(|c| c.node == node) {
            c.gone = true;
        }
    }

    /// Records a reply. Returns the client it belongs to, or a description of what is wrong
    /// with it (an anomaly: a reply nobody asked for).
    pub fn on_reply(&mut self, now: Instant, reply: RcReply, history: &mut History) -> Result<usize, String> {
        let RcReply { route, resp } = reply;
        let Some(c) = self.clients.iter().position(|c| c.route == route) else {
            return Err(format!("reply on unknown connection {route}: {resp:?}"));
        };
        let client = &mut self.clients[c];
        if client.opening == Some(resp.corr) {
            client.opening = None;
            return match resp.body {
                Response::SessionOpened { session } => {
                    client.session = Some(session);
                    history.sessions.push(session);
                    Ok(c)
                }
                other => Err(format!("OpenSession on connection {route} answered with {other:?}")),
            };
        }
        // Replies may in principle come out of order; the history keeps the completion order
        // and `check::session::replies_in_session_order` judges it.
        let Some(i) = client.in_flight.iter().position(|&(corr, _)| corr == resp.corr) else {
            return Err(format!("reply with unknown corr {} on connection {route}: {:?}", resp.corr, resp.body));
        };
        let (_, op) = client.in_flight.remove(i).unwrap_or_default();
        let order = self.completions;
        self.completions += 1;
        let op = &mut history.ops[op];
        op.outcome = outcome_of(&op.kind, resp.body, now, order);
        Ok(c)
    }
}

/// The wire request for an operation of the history.
pub fn request_for(session: SessionId, kind: &OpKind, key: &Bytes) -> Request {
    let key = key.clone();
    match kind {
        OpKind::Read => Request::Get { session, key },
        OpKind::Write { value } => Request::Put { session, key, value: value.clone() },
        OpKind::Delete => Request::Delete { session, key },
    }
}

/// The outcome an operation's response means, with its witness (Kite §2.5). A response of the
/// wrong shape is a failure, which the completion checker reports.
pub fn outcome_of(kind: &OpKind, resp: Response, at: Instant, order: u64) -> Outcome {
    let witness = match (kind, resp) {
        (OpKind::Read, Response::Value { value, cs }) => Witness { observed: Some((value, cs)), written: None },
        (OpKind::Write { .. } | OpKind::Delete, Response::Written { cs }) => Witness { observed: None, written: Some(cs) },
        (_, Response::Error { code, message }) => {
            return Outcome::Failed { at, order, error: format!("{code:?}: {message}") }
        }
        (kind, other) => {
            return Outcome::Failed { at, order, error: format!("unexpected response to a {}: {other:?}", kind.name()) }
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
        WorkloadKnobs { sessions_per_node: 2, depth, keys: 3, read_pct: 50, delete_pct: 20, think_min_us: 1, think_max_us: 5, read_only_after_heal: false }
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
            _ => Response::Written { cs: Carstamp::ZERO },
        };
        w.on_reply(Instant(3), RcReply { route, resp: ClientResponse { corr: req.corr, body } }, &mut h).unwrap();
        assert!(matches!(h.ops[0].outcome, Outcome::Done { order: 0, .. }));
        assert_eq!(h.ops[1].outcome, Outcome::Pending);
        let bogus = ClientResponse { corr: 99, body: Response::SessionClosed };
        assert!(w.on_reply(Instant(3), RcReply { route, resp: bogus.clone() }, &mut h).is_err());
        assert!(w.on_reply(Instant(3), RcReply { route: 77, resp: bogus }, &mut h).is_err());
        w.node_crashed(NodeId(0));
        assert!(w.issue(0, Instant(4), &mut h).is_none(), "sessions die with their node");
    }

    #[test]
    fn wrong_or_error_responses_are_failures() {
        let err = Response::Error { code: ErrorCode::InvalidSession, message: "gone".into() };
        assert!(matches!(outcome_of(&OpKind::Read, err, Instant(1), 0), Outcome::Failed { .. }));
        let wrong = Response::Written { cs: Carstamp::ZERO };
        assert!(matches!(outcome_of(&OpKind::Read, wrong, Instant(1), 0), Outcome::Failed { .. }));
    }
}
