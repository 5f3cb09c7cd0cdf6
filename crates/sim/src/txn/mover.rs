//! The transaction harness's operator: it moves one shard of the table to another replica set
//! while transfers run, as `strata shard move` does (`strata_host::moves`): freeze at the
//! shard's leader, then adopt at every node of the new group, then at every other node, each
//! step sent again until answered (both are idempotent).
//!
//! The move happens in the middle of transactions by construction, not by chance: from its
//! start time on, the operator watches the harness's steps and freezes the moment the shard's
//! leader applies a `Prepared` vote (the lock is taken; the client has not even received the
//! vote, so its decision comes after the freeze) — or, in a quarter of the runs, the moment
//! the leader holds a recovery coordinator's decision record (phase 2 of recovery is under
//! way). The frozen state then carries the lock (the record) to the new group, whose leader
//! must take the decision (finish the recovery) that the clients and coordinators send after
//! they are told `Moved`. If nothing of the kind happens for a while, it freezes anyway.

use std::time::Duration;

use strata_host::Audit;
use strata_log::{LogEvent, TxnEvent};
use strata_wire::client::{ClientRequest, ClientResponse, LogFailure, Request, Response};
use strata_wire::log::{ShardMove, Snapshot};
use strata_wire::txn::Vote;
use strata_wire::{Instant, NodeId};

use crate::host::HostCluster;

/// An unanswered step is sent again (to the next node, for the freeze) after this long.
const RETRY_AFTER: Duration = Duration::from_millis(150);
/// How long the operator waits for a decision record before settling for a lock.
const DECISION_PATIENCE: Duration = Duration::from_secs(2);
/// How long it waits in all before freezing anyway (a shard may go without a leader for
/// seconds after crashes: elections wait `ET_min` = 1 s, and votes can split).
const PATIENCE: Duration = Duration::from_secs(6);
/// The pause before asking again after a refusal (an election, a node starting).
const BACKOFF: Duration = Duration::from_millis(5);

/// A planted bug in the move, to prove the checkers see what a move must carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MovePlant {
    /// The frozen state travels without its locks and decision records (rifl.md §5.7 step 2
    /// broken): a prepared object's decision finds no lock at the new group and is dropped.
    LoseLocks,
}

enum Step {
    /// Watching the steps from `from` on (module docs).
    Waiting {
        from: Instant,
    },
    Freeze {
        to: Vec<NodeId>,
    },
    Adopt {
        placement: ShardMove,
        /// (Boxed: a whole shard's state, much larger than the other steps.)
        snapshot: Option<Box<Snapshot>>,
        order: Vec<usize>,
        next: usize,
    },
    Done,
}

/// The operator (module docs).
pub struct Mover {
    /// Its client index on the cluster's client links.
    pub client: usize,
    table: String,
    pub shard: u32,
    nodes: usize,
    /// Leave the shard's current leader out of the new group (else a random node).
    without_leader: bool,
    /// Wait for a decision record rather than a lock (module docs).
    want_decision: bool,
    pick: u64,
    step: Step,
    node: usize,
    corr: u64,
    sent: Option<Instant>,
    /// The wake-up armed (one at a time).
    wake_at: Option<Instant>,
    /// The state the freeze returned (what the new group installs).
    pub frozen: Option<Snapshot>,
    /// Where the shard went, once every node adopted it.
    pub done: Option<ShardMove>,
    pub plant: Option<MovePlant>,
}

impl Mover {
    /// A move of `shard` of `table`, frozen from `from` on (module docs), to every node but
    /// one: the leader at the freeze if `without_leader`, else node `pick % nodes`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        c: &mut HostCluster,
        client: usize,
        table: &str,
        shard: u32,
        from: Instant,
        want_decision: bool,
        without_leader: bool,
        pick: u64,
    ) -> Mover {
        let give_up = from + PATIENCE;
        c.wake_client_at(client, give_up);
        Mover {
            client,
            table: table.to_string(),
            shard,
            nodes: c.nodes.len(),
            without_leader,
            want_decision,
            pick,
            step: Step::Waiting { from },
            node: 0,
            corr: (client as u64 + 1) << 40,
            sent: None,
            wake_at: Some(give_up),
            frozen: None,
            done: None,
            plant: None,
        }
    }

    pub fn finished(&self) -> bool {
        matches!(self.step, Step::Done)
    }

    /// Where the move stands, for a liveness report.
    pub fn describe(&self) -> String {
        match &self.step {
            Step::Waiting { from, .. } => {
                format!("waiting to move shard {} from {from:?}", self.shard)
            }
            Step::Freeze { to } => {
                format!("freezing shard {} for {to:?} at n{}", self.shard, self.node)
            }
            Step::Adopt { next, order, .. } => {
                format!("adopting shard {} at {next} of {} nodes", self.shard, order.len())
            }
            Step::Done => format!("moved shard {}", self.shard),
        }
    }

    fn wake(&mut self, c: &mut HostCluster, at: Instant) {
        if self.wake_at.is_none_or(|w| w > at || w < c.now) {
            self.wake_at = Some(at);
            c.wake_client_at(self.client, at);
        }
    }

    fn send(&mut self, c: &mut HostCluster, body: Request) {
        self.corr += 1;
        self.sent = Some(c.now);
        c.send_request(self.client, self.node, ClientRequest { corr: self.corr, rifl: None, body });
    }

    /// The operator's turn (its wake-up).
    pub fn poll(&mut self, c: &mut HostCluster) {
        let now = c.now;
        if self.wake_at.is_some_and(|w| w <= now) {
            self.wake_at = None;
        }
        match &self.step {
            Step::Done => return,
            // Nothing to freeze over came (module docs): freeze anyway.
            Step::Waiting { from } if now >= *from + PATIENCE => {
                self.start(leader_of(c, &self.table, self.shard))
            }
            Step::Waiting { .. } => return,
            _ => {}
        }
        self.wake(c, now + RETRY_AFTER);
        if self.sent.is_some_and(|s| now.saturating_since(s) < RETRY_AFTER) {
            return; // waiting for an answer
        }
        match &self.step {
            Step::Freeze { to } => {
                if self.sent.is_some() {
                    self.node = (self.node + 1) % self.nodes; // unanswered: the next node
                }
                let body = Request::FreezeShard {
                    table: self.table.clone(),
                    shard: self.shard,
                    replicas: to.clone(),
                };
                self.send(c, body);
            }
            Step::Adopt { placement, snapshot, order, next } => {
                // Unanswered (a node down): the same node again, until it answers.
                self.node = order[*next];
                let body = Request::AdoptShard {
                    table: self.table.clone(),
                    shard: self.shard,
                    placement: placement.clone(),
                    snapshot: snapshot.as_deref().cloned(),
                };
                self.send(c, body);
            }
            Step::Waiting { .. } | Step::Done => {}
        }
    }

    /// Looks at a step of the harness while waiting (module docs): freezes now if it was the
    /// shard's leader applying a `Prepared` vote (or holding a decision record, if wanted).
    pub fn watch(&mut self, c: &mut HostCluster, step: &crate::host::Step) {
        let Step::Waiting { from } = self.step else { return };
        if c.now < from {
            return;
        }
        let Some(r) =
            c.nodes[step.node].host.as_ref().and_then(|h| h.shard_replica(&self.table, self.shard))
        else {
            return;
        };
        // A ready leader (one just elected, not yet synced, would refuse the freeze).
        if !r.is_ready_leader(c.local(step.node)) {
            return;
        }
        let ready = if self.want_decision && c.now < from + DECISION_PATIENCE {
            r.decision_records().next().is_some()
        } else {
            let voted = step.audit.iter().any(|a| {
                matches!(a, Audit::Log { table, shard, event: LogEvent::Txn(TxnEvent::Voted { vote: Vote::Prepared, key: Some(_), .. }) }
                    if *table == self.table && *shard == self.shard)
            });
            voted && r.locks().next().is_some()
        };
        if ready {
            self.start(Some(step.node));
            self.poll(c);
        }
    }

    /// Chooses the new group and starts the freeze at `leader`.
    fn start(&mut self, leader: Option<usize>) {
        let out = match leader.filter(|_| self.without_leader) {
            Some(l) => l,
            None => (self.pick % self.nodes as u64) as usize,
        };
        let to = (0..self.nodes).filter(|&i| i != out).map(|i| NodeId(i as u32)).collect();
        self.node = leader.unwrap_or(0);
        self.step = Step::Freeze { to };
        self.sent = None;
    }

    pub fn on_response(&mut self, c: &mut HostCluster, resp: ClientResponse) {
        if resp.corr != self.corr {
            return;
        }
        self.sent = None;
        let n = self.nodes;
        match (&mut self.step, resp.body) {
            (Step::Freeze { .. }, Response::ShardFrozen { placement, snapshot }) => {
                self.frozen = snapshot.clone();
                let snapshot = snapshot.map(|mut s| {
                    if self.plant == Some(MovePlant::LoseLocks) {
                        s.locks.clear();
                        s.decisions.clear();
                    }
                    s
                });
                // The new group first, then every other node (`strata_host::moves`, step 2).
                let mut order: Vec<usize> =
                    placement.replicas.iter().map(|r| r.0 as usize).collect();
                order.extend((0..n).filter(|i| !placement.replicas.contains(&NodeId(*i as u32))));
                let snapshot = snapshot.map(Box::new);
                self.step = Step::Adopt { placement, snapshot, order, next: 0 };
            }
            (
                Step::Freeze { .. },
                Response::LogRejected(LogFailure::NotLeader { hint: Some(h) }),
            ) if (h.0 as usize) < n => {
                self.node = h.0 as usize;
                return self.wake(c, c.now + BACKOFF);
            }
            // The leader is not ready yet (just elected): the same node, shortly.
            (Step::Freeze { .. }, Response::LogRejected(LogFailure::Unavailable)) => {
                return self.wake(c, c.now + BACKOFF);
            }
            (Step::Freeze { .. }, Response::LogRejected(_)) => {
                self.node = (self.node + 1) % n;
                return self.wake(c, c.now + BACKOFF);
            }
            (Step::Adopt { placement, order, next, .. }, Response::ShardAdopted { .. }) => {
                *next += 1;
                if *next == order.len() {
                    self.done = Some(placement.clone());
                    self.step = Step::Done;
                    return;
                }
            }
            // Anything else (an election, a node restarting): again after a pause.
            _ => {
                self.sent = Some(c.now);
                return;
            }
        }
        // The next step at once.
        self.poll(c);
    }
}

/// The node whose replica of `table`'s `shard` leads in the highest epoch (`None`: none does).
pub fn leader_of(c: &HostCluster, table: &str, shard: u32) -> Option<usize> {
    (0..c.nodes.len())
        .filter_map(|i| {
            let r = c.nodes[i].host.as_ref()?.shard_replica(table, shard)?;
            (r.role() == strata_log::Role::Leader).then(|| (r.epoch(), i))
        })
        .max()
        .map(|(_, i)| i)
}
