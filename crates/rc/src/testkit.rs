//! A tiny deterministic network for scenario tests of the rc engine (`DESIGN.md` testing
//! layer 2): replicas exchange messages through per-destination queues that tests deliver,
//! drop or hold back; time moves only when a test says so. (`strata-sim` is the full
//! simulator; this is for named, hand-written scenarios.)

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use strata_core::Node;
use strata_wire::client::{ClientRequest, Request, Response};
use strata_wire::peer::PeerMessage;
use strata_wire::{ClusterTime, Instant, LeaseInfo, NodeId, Rifl, RpcId, SessionId};

use crate::{RcConfig, RcEffects, RcInput, RcReplica};

pub(crate) struct Net {
    pub nodes: Vec<RcReplica>,
    /// In flight: (from, to, message).
    pub wire: VecDeque<(NodeId, NodeId, PeerMessage)>,
    /// Nodes that receive nothing and run nothing (paused, like SIGSTOP): their messages wait.
    pub paused: Vec<bool>,
    pub now: Instant,
    /// Replies per node: (corr, response).
    pub replies: Vec<Vec<(u64, Response)>>,
    next_corr: u64,
}

impl Net {
    pub fn new(n: u32, tune: impl Fn(&mut RcConfig)) -> Net {
        let ids: Vec<NodeId> = (0..n).map(NodeId).collect();
        let nodes = ids
            .iter()
            .map(|&id| {
                let mut cfg = RcConfig::new(id, ids.clone());
                tune(&mut cfg);
                RcReplica::new(cfg).unwrap()
            })
            .collect();
        Net {
            nodes,
            wire: VecDeque::new(),
            paused: vec![false; n as usize],
            now: Instant(0),
            replies: vec![Vec::new(); n as usize],
            next_corr: 0,
        }
    }

    fn drain(&mut self, i: usize) {
        let mut out = RcEffects::default();
        self.nodes[i].poll_effects(&mut out);
        let from = NodeId(i as u32);
        for (to, m) in out.send {
            self.wire.push_back((from, to, m));
        }
        for r in out.reply {
            self.replies[i].push((r.resp.corr, r.resp.body));
        }
        self.nodes[i].check_invariants();
    }

    pub fn submit(&mut self, node: usize, body: Request) -> u64 {
        self.submit_rifl(node, None, body)
    }

    /// `submit` with RIFL's envelope on the request.
    pub fn submit_rifl(&mut self, node: usize, rifl: Option<Rifl>, body: Request) -> u64 {
        self.next_corr += 1;
        let corr = self.next_corr;
        let req = ClientRequest { corr, rifl, body };
        self.nodes[node].on_client_request(self.now, RcInput::Client { route: 1, req });
        self.drain(node);
        corr
    }

    pub fn open(&mut self, node: usize) -> SessionId {
        let corr = self.submit(node, Request::OpenSession);
        match self.take(node, corr) {
            Some(Response::SessionOpened { session }) => session,
            other => panic!("{other:?}"),
        }
    }

    /// The reply to `corr` at `node`, if it has arrived.
    pub fn take(&mut self, node: usize, corr: u64) -> Option<Response> {
        let i = self.replies[node].iter().position(|(c, _)| *c == corr)?;
        Some(self.replies[node].remove(i).1)
    }

    /// Delivers every message in flight (and those they cause) to unpaused nodes; messages to
    /// paused nodes stay queued. `keep` decides per message whether it is delivered or lost.
    pub fn deliver_filtered(&mut self, mut keep: impl FnMut(NodeId, NodeId, &PeerMessage) -> bool) {
        let mut held = VecDeque::new();
        while let Some((from, to, m)) = self.wire.pop_front() {
            if self.paused[to.0 as usize] || self.paused[from.0 as usize] {
                held.push_back((from, to, m));
                continue;
            }
            if !keep(from, to, &m) {
                continue;
            }
            self.nodes[to.0 as usize].on_message(self.now, from, m);
            self.drain(to.0 as usize);
        }
        self.wire = held;
    }

    pub fn deliver(&mut self) {
        self.deliver_filtered(|_, _, _| true);
    }

    /// Advances time, ticking every unpaused node, and delivers what that caused.
    pub fn advance(&mut self, by: Duration) {
        self.advance_filtered(by, |_, _, _| true);
    }

    /// `advance`, losing the messages `keep` refuses.
    pub fn advance_filtered(
        &mut self,
        by: Duration,
        keep: impl FnMut(NodeId, NodeId, &PeerMessage) -> bool,
    ) {
        self.now += by;
        for i in 0..self.nodes.len() {
            if !self.paused[i] {
                self.nodes[i].on_tick(self.now);
                self.drain(i);
            }
        }
        self.deliver_filtered(keep);
    }

    /// Runs `body` at `node` until it is answered, losing the messages `keep` refuses.
    pub fn call_filtered(
        &mut self,
        node: usize,
        body: Request,
        keep: impl FnMut(NodeId, NodeId, &PeerMessage) -> bool,
    ) -> Response {
        self.call_rifl_filtered(node, None, body, keep)
    }

    /// `call_filtered` with RIFL's envelope.
    pub fn call_rifl_filtered(
        &mut self,
        node: usize,
        rifl: Option<Rifl>,
        body: Request,
        mut keep: impl FnMut(NodeId, NodeId, &PeerMessage) -> bool,
    ) -> Response {
        let corr = self.submit_rifl(node, rifl, body);
        for _ in 0..10_000 {
            self.deliver_filtered(&mut keep);
            if let Some(r) = self.take(node, corr) {
                return r;
            }
            self.advance_filtered(Duration::from_micros(500), &mut keep);
        }
        panic!("request {corr} at node {node} never completed");
    }

    /// Runs until `corr` at `node` is answered (advancing time in small steps), or panics.
    pub fn run_until(&mut self, node: usize, corr: u64) -> Response {
        for _ in 0..10_000 {
            self.deliver();
            if let Some(r) = self.take(node, corr) {
                return r;
            }
            self.advance(Duration::from_micros(500));
        }
        panic!("request {corr} at node {node} never completed");
    }

    pub fn call(&mut self, node: usize, body: Request) -> Response {
        let corr = self.submit(node, body);
        self.run_until(node, corr)
    }

    /// `call` with RIFL's envelope.
    pub fn call_rifl(&mut self, node: usize, rifl: Rifl, body: Request) -> Response {
        let corr = self.submit_rifl(node, Some(rifl), body);
        self.run_until(node, corr)
    }
}

/// RIFL's envelope of RPC `seq` of client `client` whose oldest unanswered RPC is
/// `first_incomplete`, with a lease that never expires.
pub(crate) fn envelope(client: u64, seq: u64, first_incomplete: u64) -> Rifl {
    Rifl {
        rpc: RpcId { client_id: client, seq },
        first_incomplete,
        lease: LeaseInfo {
            client_id: client,
            expiration: ClusterTime(u64::MAX),
            timestamp: ClusterTime::ZERO,
        },
    }
}

pub(crate) fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}
