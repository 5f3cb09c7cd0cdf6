//! The courier: node-level messages addressed to "the leader of (table, shard)", wherever it is.
//!
//! Node-level cores that act for a shard — the recovery coordinator of a transaction (RIFL
//! §5.8), a Kairos validator (kairos.md §5.6), a PoR site's counter service (por.md §5.4) —
//! must reach the node that leads that shard *now*, without knowing it. The courier sends a
//! `ToLeader { id, table, shard, service, body }` to its best guess (the leader its own replica
//! knows of, else a replica of the shard's placement), and follows the answer:
//!
//! * `Delivered { by, epoch, body }`: the ready leader (synced, leader lease held) handled it;
//! * `NotLeader { hint }`: go to the hint at once, or — without one — to the next replica after
//!   `RETRY`;
//! * `Moved { replicas }`: the shard moved (rifl.md §5.7): go to the new replicas;
//! * no answer within `RETRY` (lost, a crashed node): the next replica;
//! * `Unknown` (no such service) or `MAIL_TIMEOUT` without delivery: the message fails.
//!
//! Delivery is **at least once**: a retry after a lost answer can reach the leader again, so a
//! service must be idempotent per `(sender, id)`. A message to a shard this node leads is
//! handled in place, without the network (`local`, served by the host like a peer's). A
//! service may answer at once, or later (the transaction services answer once their log
//! entry is applied). The sender learns the outcome from
//! [`crate::Host::take_mail_results`].

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use strata_wire::peer::{LeaderAnswer, PeerMessage};
use strata_wire::{Instant, NodeId};

use crate::effects::{HostEffects, ShardKey};
use crate::shards::Shards;

/// The echo service: the leader answers with the body it got (a ping of a shard's leader, and
/// the courier's tests).
pub const SERVICE_ECHO: u16 = 0;
/// An unanswered message goes to the next replica after this long.
pub const RETRY: Duration = Duration::from_millis(100);
/// A message not delivered within this long fails (`MailError::Timeout`).
pub const MAIL_TIMEOUT: Duration = Duration::from_secs(5);

/// A delivered message's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivered {
    /// The node that handled it: the shard's ready leader in `epoch`.
    pub by: NodeId,
    pub epoch: u32,
    /// The service's reply.
    pub body: Bytes,
}

/// Why a message was not delivered. Each variant says what the caller should do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MailError {
    /// This node's catalog has no such table or shard: check the name (or wait for the
    /// table's creation to reach this node).
    #[error("no such table or shard")]
    NoSuchShard,
    /// The leader has no such service: a version mismatch between nodes.
    #[error("the leader does not know the service")]
    UnknownService,
    /// No leader answered within `MAIL_TIMEOUT` (no leader elected, the shard's nodes down):
    /// send again later; it may or may not have been handled.
    #[error("no leader answered in time")]
    Timeout,
}

struct Outgoing {
    sk: ShardKey,
    service: u16,
    body: Bytes,
    /// Where it went last, and the replicas to try.
    target: NodeId,
    candidates: Vec<NodeId>,
    tried: usize,
    sent: Instant,
    deadline: Instant,
}

/// Messages this node sent and waits for (module docs).
#[derive(Default)]
pub(crate) struct Courier {
    next_id: u64,
    outgoing: BTreeMap<u64, Outgoing>,
    pub results: Vec<(u64, Result<Delivered, MailError>)>,
    /// Messages to a shard this node leads, for the host to serve like a peer's `ToLeader`
    /// (a service may answer later): `(id, shard, service, body)`.
    pub local: Vec<(u64, ShardKey, u16, Bytes)>,
}

impl Courier {
    /// Sends `body` to `service` at the leader of `sk`; returns the message's id.
    pub fn send(
        &mut self,
        now: Instant,
        sk: ShardKey,
        service: u16,
        body: Bytes,
        shards: &Shards,
        out: &mut HostEffects,
    ) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        let candidates = shards.placement_of(sk).replicas;
        let spread = candidates[id as usize % candidates.len()];
        let target = shards.leader_hint(sk).unwrap_or(spread);
        let deadline = now + MAIL_TIMEOUT;
        let o = Outgoing { sk, service, body, target, candidates, tried: 0, sent: now, deadline };
        self.outgoing.insert(id, o);
        self.transmit(now, id, shards, out);
        id
    }

    /// Sends message `id` to its current target (handling it here when that is this node).
    fn transmit(&mut self, now: Instant, id: u64, shards: &Shards, out: &mut HostEffects) {
        let Some(o) = self.outgoing.get_mut(&id) else { return };
        o.sent = now;
        if o.target == shards.me {
            return self.local.push((id, o.sk, o.service, o.body.clone()));
        }
        let msg = PeerMessage::ToLeader {
            id,
            table: o.sk.0,
            shard: o.sk.1,
            service: o.service,
            body: o.body.clone(),
        };
        out.send.push((o.target, msg));
    }

    /// The answer to message `id` (from a peer, or from this node).
    pub fn on_answer(
        &mut self,
        now: Instant,
        id: u64,
        answer: LeaderAnswer,
        shards: &Shards,
        out: &mut HostEffects,
    ) {
        let Some(o) = self.outgoing.get_mut(&id) else { return }; // answered already
        match answer {
            LeaderAnswer::Delivered { by, epoch, body } => {
                self.outgoing.remove(&id);
                self.results.push((id, Ok(Delivered { by, epoch, body })));
            }
            LeaderAnswer::Unknown => {
                self.outgoing.remove(&id);
                self.results.push((id, Err(MailError::UnknownService)));
            }
            LeaderAnswer::NotLeader { hint: Some(h) } if h != o.target => {
                o.target = h;
                self.transmit(now, id, shards, out);
            }
            // No better guess: the next replica, once `RETRY` has passed (no busy loop while
            // an election runs).
            LeaderAnswer::NotLeader { .. } => o.next_candidate(),
            LeaderAnswer::Moved { replicas } if !replicas.is_empty() => {
                o.candidates = replicas;
                o.tried = 0;
                o.target = o.candidates[0];
                self.transmit(now, id, shards, out);
            }
            LeaderAnswer::Moved { .. } => o.next_candidate(),
        }
    }

    /// Retries and time-outs due at `now`.
    pub fn tick(&mut self, now: Instant, shards: &Shards, out: &mut HostEffects) {
        let expired: Vec<u64> =
            self.outgoing.iter().filter(|(_, o)| now >= o.deadline).map(|(id, _)| *id).collect();
        for id in expired {
            self.outgoing.remove(&id);
            self.results.push((id, Err(MailError::Timeout)));
        }
        let due: Vec<u64> = self
            .outgoing
            .iter()
            .filter(|(_, o)| now >= o.sent + RETRY)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            let o = self.outgoing.get_mut(&id).expect("listed");
            // The leader this node knows of now, else the next replica.
            match shards.leader_hint(o.sk).filter(|h| *h != o.target) {
                Some(h) => o.target = h,
                None => o.next_candidate(),
            }
            self.transmit(now, id, shards, out);
        }
    }

    /// When `tick` next has work.
    pub fn deadline(&self) -> Option<Instant> {
        self.outgoing.values().map(|o| (o.sent + RETRY).min(o.deadline)).min()
    }
}

impl Outgoing {
    fn next_candidate(&mut self) {
        self.tried += 1;
        self.target = self.candidates[self.tried % self.candidates.len()];
    }
}

/// This node's epoch as the ready leader of `sk`, or the answer that sends a message elsewhere.
pub(crate) fn leadership(now: Instant, shards: &Shards, sk: ShardKey) -> Result<u32, LeaderAnswer> {
    if !shards.knows(sk) {
        // Not (yet) in this node's catalog: the table's creation may still be on its way.
        return Err(LeaderAnswer::NotLeader { hint: None });
    }
    match shards.leads_shard(now, sk) {
        Some(epoch) => Ok(epoch),
        None if shards.shards.contains_key(&sk) => Err(LeaderAnswer::NotLeader {
            hint: shards.leader_hint(sk).filter(|h| *h != shards.me),
        }),
        None if shards.opening.contains_key(&sk) => Err(LeaderAnswer::NotLeader { hint: None }),
        None => Err(LeaderAnswer::Moved { replicas: shards.placement_of(sk).replicas }),
    }
}

/// This node's answer to a message for the leader of `sk` of a service answered at once.
pub(crate) fn serve(
    now: Instant,
    shards: &Shards,
    sk: ShardKey,
    service: u16,
    body: &Bytes,
) -> LeaderAnswer {
    match leadership(now, shards, sk) {
        Ok(epoch) => match service {
            SERVICE_ECHO => LeaderAnswer::Delivered { by: shards.me, epoch, body: body.clone() },
            _ => LeaderAnswer::Unknown,
        },
        Err(answer) => answer,
    }
}
