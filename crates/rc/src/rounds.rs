//! Protocol rounds (Kite §5.1.3): send a request to every peer, collect one reply per sender,
//! re-send to the silent ones every `T_RETX` until the operation ends the round. Replies to
//! finished or unknown rounds are dropped (after they credited pending writes, §5.1.7).

use std::collections::HashMap;

use strata_core::DeadlineQueue;
use strata_wire::peer::PeerMessage;
use strata_wire::{Instant, NodeId};

use crate::node_set::NodeSet;
use crate::replica::RcReplica;
use crate::session::OpId;

#[derive(Debug)]
pub(crate) struct Round {
    pub op: OpId,
    /// The request, re-sent verbatim.
    pub msg: PeerMessage,
    pub replied: NodeSet,
    /// One reply per sender, in arrival order.
    pub replies: Vec<(NodeId, PeerMessage)>,
}

#[derive(Debug, Default)]
pub(crate) struct Rounds {
    pub live: HashMap<u64, Round>,
    pub resend: DeadlineQueue<u64>,
}

impl RcReplica {
    /// Starts a round for `op`: `make(req)` builds the request, sent to every peer.
    pub(crate) fn start_round(
        &mut self,
        now: Instant,
        op: OpId,
        make: impl FnOnce(u64) -> PeerMessage,
    ) -> u64 {
        let req = self.next_req();
        let msg = make(req);
        self.broadcast(&msg);
        self.rounds
            .live
            .insert(req, Round { op, msg, replied: NodeSet::EMPTY, replies: Vec::new() });
        self.rounds.resend.push(now + self.cfg.round_retransmit, req);
        req
    }

    /// Replies so far of a live round.
    pub(crate) fn round_replies(&self, req: u64) -> usize {
        self.rounds.live.get(&req).map_or(0, |r| r.replies.len())
    }

    /// Ends a round and hands back its replies.
    pub(crate) fn end_round(&mut self, req: u64) -> Vec<(NodeId, PeerMessage)> {
        self.rounds.live.remove(&req).map(|r| r.replies).unwrap_or_default()
    }

    /// Records a reply to round `req`; returns the round's operation if the reply is new.
    pub(crate) fn note_reply(&mut self, req: u64, from: NodeId, msg: PeerMessage) -> Option<OpId> {
        let r = self.rounds.live.get_mut(&req)?;
        if r.replied.contains(from) {
            return None; // a duplicate counts once
        }
        r.replied.insert(from);
        r.replies.push((from, msg));
        Some(r.op)
    }

    pub(crate) fn resend_due_rounds(&mut self, now: Instant) {
        while let Some(req) = self.rounds.resend.pop_due(now) {
            let Some(r) = self.rounds.live.get(&req) else { continue };
            let (msg, replied) = (r.msg.clone(), r.replied);
            for &p in &self.peers {
                if !replied.contains(p) {
                    self.effects.send.push((p, msg.clone()));
                    self.stats.rounds_retransmitted += 1;
                }
            }
            self.rounds.resend.push(now + self.cfg.round_retransmit, req);
        }
    }

    pub(crate) fn broadcast(&mut self, msg: &PeerMessage) {
        for &p in &self.peers {
            self.effects.send.push((p, msg.clone()));
        }
    }
}
