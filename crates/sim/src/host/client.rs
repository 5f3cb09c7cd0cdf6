//! Simulated clients of the host simulator, speaking the client wire protocol as the client
//! library does, with the same sans-IO RIFL parts (`ClientLease`, `RequestTracker`):
//!
//! * **writers** write unique keys to a log table, each write retried with the same RPC id
//!   (after a lost reply, a `NotLeader`, a `Moved`) until it is answered; they hold a lease,
//!   renewed in the background, and one of them may pause past its lease term;
//! * the **operator** creates the table at every node and moves a shard (freeze at the leader,
//!   adopt at the new group, then at everyone else), optionally interrupting the move and
//!   running it again later, as `strata shard move` does.
//!
//! Everything the clients saw is recorded in [`ClientLog`] for the checkers.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use strata_rifl::{ClientLease, RequestTracker, WINDOW};
use strata_wire::client::{
    ClientRequest, ClientResponse, ErrorCode, LogFailure, LogWriteOp, Request, Response, TableDef,
};
use strata_wire::log::{LogIndex, ShardMove, Snapshot};
use strata_wire::rifl::{Rifl, RpcId};
use strata_wire::{Instant, NodeId};

use super::cluster::{HostCluster, MailOutcome};

/// A write is retried when unanswered for this long.
const RETRY_AFTER: Duration = Duration::from_millis(250);
/// A client's pace between steps.
const STEP: Duration = Duration::from_millis(10);
/// A writer's think time between two writes (so the writes span the run's faults and moves).
const THINK: Duration = Duration::from_millis(40);

/// What happened to one write RPC, as its client saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Acknowledged at this log index.
    Acked(LogIndex),
    /// `ExpiredLease`: the outcome is unknown (it may have executed before the expiry).
    Unknown,
    /// Any other final error: a protocol bug for this workload (the message).
    Failed(String),
}

/// One write RPC and every answer it got (a retry may be answered more than once).
#[derive(Clone, Debug)]
pub struct WriteRecord {
    pub rpc: RpcId,
    pub table: String,
    pub key: Bytes,
    pub value: Bytes,
    pub answers: Vec<Outcome>,
    /// When it was first sent, and how many times.
    pub first_sent: Instant,
    pub attempts: u32,
    /// When its first answer came back.
    pub answered_at: Option<Instant>,
}

/// Everything the clients saw.
#[derive(Clone, Debug, Default)]
pub struct ClientLog {
    pub writes: Vec<WriteRecord>,
    /// Lease grants received: `(lease id, expiration ns)`.
    pub grants: Vec<(u64, u64)>,
    /// Moves the operator completed: `(table, shard, placement)`.
    pub moves: Vec<(String, u32, ShardMove)>,
    /// Every frozen state a move's freeze returned, as the old group answered it (before any
    /// planted bug): `(table, shard, state)`.
    pub frozen: Vec<(String, u32, Snapshot)>,
    /// Tables the operator created (answered `TableCreated` at every node).
    pub tables_created: u32,
    /// Node-level messages the mailer sent to shard leaders (`strata_host::courier`).
    pub mails: Vec<MailRecord>,
}

/// One node-level echo message: who sent it (node and incarnation: a crash loses the sender's
/// pending messages), to which shard, and what came back.
#[derive(Clone, Debug)]
pub struct MailRecord {
    pub from: usize,
    pub incarnation: u64,
    pub id: u64,
    pub shard: u32,
    pub body: Bytes,
    pub outcome: Option<MailOutcome>,
}

struct Pending {
    corr: u64,
    sent: Instant,
    /// The last answer named the node to retry at (`w.node`): no rotation.
    redirected: bool,
    /// The envelope last sent.
    rifl: Option<Rifl>,
    record: usize,
    seq: u64,
}

/// A writer (module docs).
pub struct Writer {
    index: usize,
    table: String,
    lease: ClientLease,
    tracker: RequestTracker,
    renewing: Option<(u64, Instant)>,
    pending: Option<Pending>,
    node: usize,
    writes_left: u32,
    /// No new write before this instant.
    next_write: Instant,
    /// Until when the client is paused (a GC pause, a laptop lid): it does nothing.
    pub paused_until: Option<Instant>,
}

/// A planted bug in the operator's move, to prove the move checkers can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MovePlant {
    /// The snapshot travels without its items: acknowledged writes vanish.
    LoseItems,
    /// The snapshot travels without its completion records: a retry executes again.
    LoseRecords,
}

/// One shard move the operator runs.
#[derive(Clone, Debug)]
pub struct MovePlan {
    pub shard: u32,
    pub to: Vec<NodeId>,
    pub at: Instant,
    /// Stop after adopting at the first new replica; run the whole move again at this time.
    pub interrupt_until: Option<Instant>,
}

enum OpStep {
    Create { node: usize },
    Freeze,
    Adopt { placement: ShardMove, snapshot: Option<Box<Snapshot>>, order: Vec<usize>, next: usize },
    Idle,
}

/// The operator (module docs).
pub struct Operator {
    index: usize,
    def: TableDef,
    step: OpStep,
    moves: Vec<MovePlan>,
    node: usize,
    corr: u64,
    sent: Option<Instant>,
    pub plant: Option<MovePlant>,
}

/// The clients of one run.
pub struct Clients {
    pub writers: Vec<Writer>,
    pub operator: Operator,
    /// Every this often, each node that is up sends an echo message to a shard's leader.
    pub mail_every: Option<Duration>,
    pub log: ClientLog,
    next_corr: u64,
    /// Every client request in flight: corr -> client index.
    corrs: BTreeMap<u64, usize>,
}

impl Clients {
    pub fn new(
        c: &mut HostCluster,
        def: TableDef,
        writers: usize,
        writes_each: u32,
        moves: Vec<MovePlan>,
    ) -> Clients {
        let n = c.nodes.len();
        let rifl = strata_host::rifl_config(c.lease_term);
        let writers = (0..writers)
            .map(|i| Writer {
                index: i,
                table: def.name.clone(),
                lease: ClientLease::new(rifl.clone()),
                tracker: RequestTracker::new(WINDOW),
                renewing: None,
                pending: None,
                node: i % n,
                writes_left: writes_each,
                next_write: Instant::ZERO,
                paused_until: None,
            })
            .collect::<Vec<_>>();
        let operator = Operator {
            index: writers.len(),
            def,
            step: OpStep::Create { node: 0 },
            moves,
            node: 0,
            corr: 0,
            sent: None,
            plant: None,
        };
        // The writers, the operator, the mailer.
        for i in 0..=writers.len() + 1 {
            c.wake_client_at(i, c.now);
        }
        Clients {
            writers,
            operator,
            mail_every: None,
            log: ClientLog::default(),
            next_corr: 0,
            corrs: BTreeMap::new(),
        }
    }

    /// Whether every write was answered and every move done.
    pub fn done(&self) -> bool {
        self.writers.iter().all(|w| w.writes_left == 0 && w.pending.is_none())
            && matches!(self.operator.step, OpStep::Idle)
            && self.operator.moves.is_empty()
    }

    /// Where each client stands, for a liveness report.
    pub fn describe(&self) -> String {
        let step = match &self.operator.step {
            OpStep::Create { node } => format!("creating the table (at n{node})"),
            OpStep::Freeze => "freezing".into(),
            OpStep::Adopt { next, order, .. } => format!("adopting at {next} of {}", order.len()),
            OpStep::Idle => format!("idle, {} move(s) to go", self.operator.moves.len()),
        };
        let writers: Vec<String> = self
            .writers
            .iter()
            .map(|w| {
                format!(
                    "w{}: {} left, pending {:?}, lease {:?}, renewing {}",
                    w.index,
                    w.writes_left,
                    w.pending.as_ref().map(|p| &self.log.writes[p.record].rpc),
                    w.lease.client_id(),
                    w.renewing.is_some()
                )
            })
            .collect();
        format!("operator {step}; {}", writers.join("; "))
    }

    fn corr(&mut self, client: usize) -> u64 {
        self.next_corr += 1;
        self.corrs.insert(self.next_corr, client);
        self.next_corr
    }

    /// Runs the cluster and the clients until `until`.
    pub fn run(&mut self, c: &mut HostCluster, until: Instant) {
        while c.step(until) {
            for (client, resp) in std::mem::take(&mut c.client_inbox) {
                self.on_reply(c, client, resp);
            }
            for client in std::mem::take(&mut c.client_wakes) {
                self.wake(c, client);
            }
            self.collect_mail(c);
        }
        c.now = c.now.max(until);
    }

    /// The mailer's turn (module docs): every node that is up sends one echo message.
    fn mail(&mut self, c: &mut HostCluster) {
        let Some(every) = self.mail_every else { return };
        if self.log.tables_created == 0 {
            return c.wake_client_at(self.writers.len() + 1, c.now + every);
        }
        let table = self.operator.def.name.clone();
        let shards = self.operator.def.shards;
        for i in 0..c.nodes.len() {
            let shard = (self.log.mails.len() as u32) % shards;
            let body = Bytes::from(format!("m{}", self.log.mails.len()));
            if let Some((id, incarnation)) = c.mail(i, &table, shard, body.clone()) {
                self.log.mails.push(MailRecord {
                    from: i,
                    incarnation,
                    id,
                    shard,
                    body,
                    outcome: None,
                });
            }
        }
        c.wake_client_at(self.writers.len() + 1, c.now + every);
    }

    fn collect_mail(&mut self, c: &mut HostCluster) {
        if self.log.mails.is_empty() {
            return;
        }
        for i in 0..c.nodes.len() {
            for (id, incarnation, outcome) in c.take_mail_results(i) {
                if let Some(m) = self
                    .log
                    .mails
                    .iter_mut()
                    .rev()
                    .find(|m| m.from == i && m.id == id && m.incarnation == incarnation)
                {
                    m.outcome = Some(outcome);
                }
            }
        }
    }

    fn wake(&mut self, c: &mut HostCluster, client: usize) {
        if client == self.writers.len() + 1 {
            return self.mail(c); // the mailer re-arms itself
        }
        if client == self.operator.index {
            self.operator_wake(c);
        } else {
            self.writer_wake(c, client);
        }
        c.wake_client_at(client, c.now + STEP);
    }

    // ---- writers ----

    fn writer_wake(&mut self, c: &mut HostCluster, i: usize) {
        let now = c.now;
        let n = c.nodes.len();
        if self.writers[i].paused_until.is_some_and(|t| now < t) {
            return;
        }
        // Renew (or create) the lease when due, or when a renewal went unanswered.
        let w = &self.writers[i];
        let renew = w.lease.renewal_due(now)
            && w.renewing.is_none_or(|(_, sent)| now.saturating_since(sent) >= RETRY_AFTER);
        if renew {
            let corr = self.corr(i);
            let w = &mut self.writers[i];
            if w.renewing.is_some() {
                w.node = (w.node + 1) % n;
            }
            w.renewing = Some((corr, now));
            let lease_id = w.lease.client_id().unwrap_or(0);
            let req = ClientRequest { corr, rifl: None, body: Request::RenewLease { lease_id } };
            c.send_request(i, w.node, req);
        }
        let w = &self.writers[i];
        match &w.pending {
            Some(p) if now.saturating_since(p.sent) >= RETRY_AFTER => {
                let record = p.record;
                if !p.redirected {
                    // Unanswered: the node may be down; try the next one.
                    self.writers[i].node = (self.writers[i].node + 1) % n;
                }
                self.send_write(c, i, record);
            }
            Some(_) => {}
            None if w.writes_left > 0 && now >= w.next_write && w.lease.usable(now).is_some() => {
                let w = &mut self.writers[i];
                w.next_write = now + THINK;
                let Ok(seq) = w.tracker.new_sequence_num() else { return };
                w.writes_left -= 1;
                let client_id = w.lease.client_id().expect("usable");
                let key = Bytes::from(format!("w{}-{client_id}-{seq}", w.index));
                let value = Bytes::from(format!("v{}-{client_id}-{seq}", w.index));
                self.log.writes.push(WriteRecord {
                    rpc: RpcId { client_id, seq },
                    table: w.table.clone(),
                    key,
                    value,
                    answers: Vec::new(),
                    first_sent: now,
                    attempts: 0,
                    answered_at: None,
                });
                let record = self.log.writes.len() - 1;
                self.writers[i].pending = Some(Pending {
                    corr: 0,
                    sent: now,
                    redirected: false,
                    rifl: None,
                    record,
                    seq,
                });
                self.send_write(c, i, record);
            }
            None => {}
        }
    }

    /// Sends (or re-sends, with the same RPC id) a writer's pending write.
    fn send_write(&mut self, c: &mut HostCluster, i: usize, record: usize) {
        let corr = self.corr(i);
        let w = &mut self.writers[i];
        // A retry carries the last grant even in its danger zone (as the client library does);
        // a write of an older lease id keeps its own envelope (R-D21: it can only end with its
        // recorded result or `ExpiredLease`).
        let Some(lease) = w.lease.last_grant() else { return };
        self.log.writes[record].attempts += 1;
        let r = &self.log.writes[record];
        let p = w.pending.as_mut().expect("a write to send");
        let rifl = match p.rifl {
            Some(old) if old.rpc.client_id != lease.client_id => old,
            _ => Rifl { rpc: r.rpc, first_incomplete: w.tracker.first_incomplete(), lease },
        };
        p.rifl = Some(rifl);
        let body = Request::LogWrite {
            table: r.table.clone(),
            key: r.key.clone(),
            op: LogWriteOp::Put(r.value.clone()),
            immediate: false,
        };
        p.corr = corr;
        p.sent = c.now;
        p.redirected = false;
        c.send_request(i, w.node, ClientRequest { corr, rifl: Some(rifl), body });
    }

    fn on_reply(&mut self, c: &mut HostCluster, client: usize, resp: ClientResponse) {
        let Some(owner) = self.corrs.remove(&resp.corr) else { return };
        debug_assert_eq!(owner, client);
        if client == self.operator.index {
            return self.operator_reply(c, resp);
        }
        let now = c.now;
        let w = &mut self.writers[client];
        if let Some((corr, sent)) = w.renewing {
            if corr == resp.corr {
                w.renewing = None;
                if let Response::Lease(grant) = resp.body {
                    if grant.alive() {
                        self.log.grants.push((grant.lease_id, grant.expiration.as_nanos()));
                        let changed = w.lease.on_grant(sent, grant);
                        if changed && w.pending.is_some() {
                            // R-D21: a new id; the old id's write ends as outcome unknown
                            // when it comes back `ExpiredLease` (it keeps being retried).
                        }
                        if changed {
                            w.tracker = RequestTracker::new(WINDOW);
                        }
                    }
                }
                return;
            }
        }
        let Some(p) = w.pending.as_ref().filter(|p| p.corr == resp.corr) else { return };
        let (record, seq) = (p.record, p.seq);
        let n = c.nodes.len();
        let outcome = match resp.body {
            Response::LogWritten { index, .. } => Some(Outcome::Acked(index)),
            Response::Error { code: ErrorCode::ExpiredLease, .. } => Some(Outcome::Unknown),
            Response::Error { code, message } => {
                Some(Outcome::Failed(format!("{code:?}: {message}")))
            }
            Response::LogRejected(LogFailure::NotLeader { hint: Some(h) }) => {
                w.node = h.0 as usize;
                None
            }
            Response::LogRejected(LogFailure::Moved { replicas }) => {
                w.node = replicas.first().map_or((w.node + 1) % n, |r| r.0 as usize);
                None
            }
            Response::LogRejected(_) => {
                w.node = (w.node + 1) % n;
                None
            }
            other => Some(Outcome::Failed(format!("unexpected answer {other:?}"))),
        };
        match outcome {
            Some(o) => {
                self.log.writes[record].answers.push(o);
                self.log.writes[record].answered_at.get_or_insert(now);
                w.tracker.rpc_completed(seq);
                w.pending = None;
            }
            None => {
                // Retry soon, at the node the answer pointed to.
                if let Some(p) = w.pending.as_mut() {
                    p.sent = Instant(now.0.saturating_sub(RETRY_AFTER.as_nanos() as u64)) + STEP;
                    p.redirected = true;
                }
            }
        }
    }

    // ---- operator ----

    fn operator_send(&mut self, c: &mut HostCluster, body: Request) {
        let corr = self.corr(self.operator.index);
        self.operator.corr = corr;
        self.operator.sent = Some(c.now);
        c.send_request(
            self.operator.index,
            self.operator.node,
            ClientRequest { corr, rifl: None, body },
        );
    }

    fn operator_wake(&mut self, c: &mut HostCluster) {
        let now = c.now;
        let n = c.nodes.len();
        let op = &mut self.operator;
        if op.sent.is_some_and(|s| now.saturating_since(s) < RETRY_AFTER) {
            return; // waiting for an answer
        }
        if op.sent.is_some() {
            op.node = (op.node + 1) % n; // unanswered: try the next node
        }
        match &op.step {
            OpStep::Create { node } => {
                op.node = *node;
                let def = op.def.clone();
                self.operator_send(c, Request::CreateTable { def });
            }
            OpStep::Idle => {
                let due = op.moves.first().is_some_and(|m| m.at <= now);
                if due {
                    op.step = OpStep::Freeze;
                    op.sent = None;
                    self.operator_wake(c);
                }
            }
            OpStep::Freeze => {
                let m = op.moves.first().expect("a move under way").clone();
                let table = op.def.name.clone();
                self.operator_send(
                    c,
                    Request::FreezeShard { table, shard: m.shard, replicas: m.to },
                );
            }
            OpStep::Adopt { placement, snapshot, order, next } => {
                let m = op.moves.first().expect("a move under way");
                let node = order[*next];
                op.node = node;
                let body = Request::AdoptShard {
                    table: op.def.name.clone(),
                    shard: m.shard,
                    placement: placement.clone(),
                    snapshot: snapshot.as_deref().cloned(),
                };
                self.operator_send(c, body);
            }
        }
    }

    fn operator_reply(&mut self, c: &mut HostCluster, resp: ClientResponse) {
        let n = c.nodes.len();
        let op = &mut self.operator;
        if resp.corr != op.corr {
            return;
        }
        op.sent = None;
        match (&mut op.step, resp.body) {
            (OpStep::Create { node }, Response::TableCreated { .. }) => {
                if *node + 1 < n {
                    *node += 1;
                } else {
                    self.log.tables_created += 1;
                    op.step = OpStep::Idle;
                }
            }
            (OpStep::Freeze, Response::ShardFrozen { placement, snapshot }) => {
                if let (Some(s), Some(m)) = (&snapshot, op.moves.first()) {
                    self.log.frozen.push((op.def.name.clone(), m.shard, s.clone()));
                }
                let snapshot = snapshot.map(|mut s| {
                    match op.plant {
                        Some(MovePlant::LoseItems) => s.items.clear(),
                        Some(MovePlant::LoseRecords) => {
                            s.clients.iter_mut().for_each(|c| c.records.clear())
                        }
                        None => {}
                    }
                    s
                });
                // The new group first, then every other node (moves docs, step 2).
                let mut order: Vec<usize> =
                    placement.replicas.iter().map(|r| r.0 as usize).collect();
                order.extend((0..n).filter(|i| !placement.replicas.contains(&NodeId(*i as u32))));
                op.step =
                    OpStep::Adopt { placement, snapshot: snapshot.map(Box::new), order, next: 0 };
            }
            (OpStep::Freeze, Response::LogRejected(LogFailure::NotLeader { hint: Some(h) })) => {
                op.node = h.0 as usize;
            }
            (OpStep::Freeze, Response::LogRejected(_)) => op.node = (op.node + 1) % n,
            (OpStep::Adopt { placement, order, next, .. }, Response::ShardAdopted { .. }) => {
                *next += 1;
                let m = op.moves.first_mut().expect("a move under way");
                let interrupted = m.interrupt_until.take_if(|_| *next == 1);
                if let Some(again) = interrupted {
                    // Interrupted after the first new replica: run it all again later.
                    m.at = again;
                    op.step = OpStep::Idle;
                } else if *next == order.len() {
                    let m = op.moves.remove(0);
                    self.log.moves.push((op.def.name.clone(), m.shard, placement.clone()));
                    op.step = OpStep::Idle;
                }
            }
            // Anything else (an election, a node restarting): ask again after a pause.
            (_, _) => op.sent = Some(c.now),
        }
    }
}
