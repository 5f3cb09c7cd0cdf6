//! Transaction recovery (rifl.md §5.8.4, R-D12–R-D15): what finishes a transaction whose
//! client stopped between its prepares and its decisions. A node-level core: the timers watch
//! the locks of the shards this node leads, the coordinator runs at the leader of the
//! transaction's first object's shard, and every message goes through the courier to "the
//! leader of (table, shard)", wherever that is now.
//!
//! * **Timers** (§5.8.4 trigger, R-D15). A lock seen at a shard this node leads gets a
//!   deadline `T_TX` = `per_object` × the transaction's objects; when it passes with the lock
//!   still held, `Start { txn, all }` goes to the leader of `all[0]`'s shard, and the timer is
//!   armed again (a lost message or a dead coordinator triggers again). A new leader arms its
//!   own timers for the locks it finds: locks are replicated state.
//! * **Coordinator** (RC1-RC6). One task per transaction: `RequestAbort` to every
//!   participant (the prepares' own ids: whichever of a prepare and an abort request is
//!   applied first writes the object's one vote), `Stale` from any means the client finished
//!   (RC3); else the decision is `Commit` iff every object voted `Prepared`, written as a
//!   durable decision record in the first object's shard (R-D12) before any decision is sent,
//!   then the decisions, then the record's removal. A node that becomes leader of a shard with
//!   decision records resumes their phase 2, so a coordinator's crash or a leader change
//!   loses nothing; `Start` for a transaction with a record resumes it too.
//! * **Participants** serve `RequestAbort` and `Decide` by appending the entry to their log
//!   and answering once it is applied (`strata_log`'s `txn.rs`).
//!
//! The coordinator never contacts the client (nodes cannot reach clients: a departure from
//! §5.16 step 1 of Kairos, which the RIFL recovery does not need).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use strata_log::{LogRequest, TxnAnswer, WriteError};
use strata_wire::codec::decode_message;
use strata_wire::peer::{LeaderAnswer, PeerMessage};
use strata_wire::rifl::RpcId;
use strata_wire::txn::{
    to_bytes, Decision, DecisionRecord, RecoveryAnswer, RecoveryMail, TxnId, TxnObject, Vote,
};
use strata_wire::{Instant, NodeId};

use crate::courier::{leadership, Courier, Delivered, MailError};
use crate::effects::{HostEffects, ShardKey};
use crate::shards::Shards;

/// The courier service of transaction recovery.
pub const SERVICE_TXN: u16 = 1;
/// How often the timers look at the locks when nothing else is due.
const SCAN: Duration = Duration::from_millis(20);

/// Who waits for a transaction request this node made to one of its shard replicas.
enum Waiter {
    /// A participant's part: answer the courier message `id` of node `from`.
    Mail { from: NodeId, id: u64, epoch: u32 },
    /// A coordinator's own step (its decision record, its removal).
    Task(TxnId),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// RC2: waiting for every participant's votes.
    Votes,
    /// RC4: the decision record is being written.
    Recording,
    /// RC5: the decisions are on their way.
    Deciding,
    /// RC6: the record is being removed.
    Resolving,
}

struct Task {
    /// The first object's shard, which this node leads and which keeps the record.
    home: ShardKey,
    all: Vec<TxnObject>,
    /// The objects' ids by participant shard.
    groups: BTreeMap<ShardKey, Vec<u64>>,
    phase: Phase,
    /// Participants whose answer this phase still waits for.
    waiting: BTreeSet<ShardKey>,
    votes: BTreeMap<u64, Vote>,
    stale: bool,
    decision: Decision,
}

/// The recovery state of one node (module docs).
pub(crate) struct Recovery {
    per_object: Duration,
    timers: BTreeMap<(ShardKey, RpcId), Instant>,
    next_scan: Instant,
    tasks: BTreeMap<TxnId, Task>,
    tokens: BTreeMap<u64, Waiter>,
    /// Courier messages of tasks: id -> (transaction, participant).
    mail: BTreeMap<u64, (TxnId, ShardKey)>,
    /// `Start` messages the timers sent (their answers only need collecting).
    starts: BTreeSet<u64>,
    /// Coordinators started (tasks created), for status and tests.
    pub started: u64,
}

impl Recovery {
    pub fn new(per_object: Duration) -> Recovery {
        Recovery {
            per_object,
            timers: BTreeMap::new(),
            next_scan: Instant::ZERO,
            tasks: BTreeMap::new(),
            tokens: BTreeMap::new(),
            mail: BTreeMap::new(),
            starts: BTreeSet::new(),
            started: 0,
        }
    }

    /// When `tick` next has work: the next scan, while a shard holds locks or decision
    /// records (`active`) or a task runs.
    pub fn deadline(&self, active: bool) -> Option<Instant> {
        (active || !self.tasks.is_empty()).then_some(self.next_scan)
    }

    /// The timers and the resumption of recorded decisions (module docs).
    pub fn tick(
        &mut self,
        now: Instant,
        shards: &mut Shards,
        courier: &mut Courier,
        out: &mut HostEffects,
    ) {
        if now < self.next_scan {
            return;
        }
        self.next_scan = now + SCAN;
        let mut seen = BTreeSet::new();
        let mut fire = Vec::new();
        let mut records = Vec::new();
        for (&sk, s) in &shards.shards {
            if shards.leads_shard(now, sk).is_none() {
                continue;
            }
            for l in s.replica.locks() {
                let key = (sk, RpcId { client_id: l.txn.client_id, seq: l.seq });
                seen.insert(key);
                let t_tx = self.per_object * l.all.len().max(1) as u32;
                let due = self.timers.entry(key).or_insert(now + t_tx);
                if now >= *due {
                    *due = now + t_tx;
                    fire.push((l.txn, l.all.clone()));
                }
            }
            records.extend(s.replica.decision_records().map(|d| (sk, d.clone())));
        }
        self.timers.retain(|k, _| seen.contains(k));
        // The locks come in hash order: sorted, the `Start`s leave in the same order on every
        // run (the simulator replays a seed exactly), and one per transaction.
        fire.sort_by_key(|(txn, _)| *txn);
        fire.dedup_by_key(|(txn, _)| *txn);
        for (txn, all) in fire {
            let Some(first) = all.first() else { continue };
            let Ok(home) = shards.shard_key(&first.table, &first.key) else { continue };
            let body = to_bytes(&RecoveryMail::Start { txn, all });
            self.starts.insert(courier.send(now, home, SERVICE_TXN, body, shards, out));
        }
        for (home, record) in records {
            if !self.tasks.contains_key(&record.txn) {
                self.resume(now, home, record, shards, courier, out);
            }
        }
    }

    /// A courier message for this node as the leader of `sk` (from a peer, or from itself):
    /// the answer now, or `None` when it comes once a log entry is applied.
    #[allow(clippy::too_many_arguments)]
    pub fn on_mail(
        &mut self,
        now: Instant,
        from: NodeId,
        id: u64,
        sk: ShardKey,
        body: &Bytes,
        shards: &mut Shards,
        courier: &mut Courier,
        out: &mut HostEffects,
    ) -> Option<LeaderAnswer> {
        let epoch = match leadership(now, shards, sk) {
            Ok(epoch) => epoch,
            Err(answer) => return Some(answer),
        };
        let Ok(mail) = decode_message::<RecoveryMail>(body.clone()) else {
            return Some(LeaderAnswer::Unknown);
        };
        let waiter = Waiter::Mail { from, id, epoch };
        match mail {
            RecoveryMail::Start { txn, all } => {
                self.start(now, sk, txn, all, shards, courier, out);
                let body = to_bytes(&RecoveryAnswer::Started);
                Some(LeaderAnswer::Delivered { by: shards.me, epoch, body })
            }
            RecoveryMail::RequestAbort { txn, seqs } => {
                let make = |token| LogRequest::RequestAbort { token, txn, seqs };
                let token = shards.request_internal(now, sk, make, out);
                self.tokens.insert(token, waiter);
                None
            }
            RecoveryMail::Decide { txn, decision, seqs } => {
                let make = |token| LogRequest::Decide { token, txn, decision, seqs };
                let token = shards.request_internal(now, sk, make, out);
                self.tokens.insert(token, waiter);
                None
            }
        }
    }

    /// RC1 at the leader of the first object's shard.
    #[allow(clippy::too_many_arguments)]
    fn start(
        &mut self,
        now: Instant,
        home: ShardKey,
        txn: TxnId,
        all: Vec<TxnObject>,
        shards: &mut Shards,
        courier: &mut Courier,
        out: &mut HostEffects,
    ) {
        if self.tasks.contains_key(&txn) {
            return;
        }
        let recorded = shards
            .shards
            .get(&home)
            .and_then(|s| s.replica.decision_records().find(|d| d.txn == txn).cloned());
        if let Some(record) = recorded {
            return self.resume(now, home, record, shards, courier, out);
        }
        let Some(groups) = group(&all, shards) else { return };
        self.started += 1;
        let task = Task {
            home,
            all,
            waiting: groups.keys().copied().collect(),
            groups,
            phase: Phase::Votes,
            votes: BTreeMap::new(),
            stale: false,
            decision: Decision::Abort,
        };
        self.tasks.insert(txn, task);
        self.send_phase(now, txn, shards, courier, out);
    }

    /// RC1 with a durable decision record: straight to phase 2.
    fn resume(
        &mut self,
        now: Instant,
        home: ShardKey,
        record: DecisionRecord,
        shards: &mut Shards,
        courier: &mut Courier,
        out: &mut HostEffects,
    ) {
        let Some(groups) = group(&record.all, shards) else { return };
        let task = Task {
            home,
            all: record.all,
            waiting: groups.keys().copied().collect(),
            groups,
            phase: Phase::Deciding,
            votes: BTreeMap::new(),
            stale: false,
            decision: record.decision,
        };
        self.tasks.insert(record.txn, task);
        self.send_phase(now, record.txn, shards, courier, out);
    }

    /// Sends this phase's message to every participant still waited for.
    fn send_phase(
        &mut self,
        now: Instant,
        txn: TxnId,
        shards: &mut Shards,
        courier: &mut Courier,
        out: &mut HostEffects,
    ) {
        let Some(t) = self.tasks.get(&txn) else { return };
        let waiting: Vec<ShardKey> = t.waiting.iter().copied().collect();
        for sk in waiting {
            self.send_to(now, txn, sk, shards, courier, out);
        }
    }

    /// This phase's message to participant `sk`: the abort request (phase 1) or the decision
    /// (phase 2) for its objects.
    fn send_to(
        &mut self,
        now: Instant,
        txn: TxnId,
        sk: ShardKey,
        shards: &mut Shards,
        courier: &mut Courier,
        out: &mut HostEffects,
    ) {
        let Some(t) = self.tasks.get(&txn) else { return };
        let seqs = t.groups[&sk].clone();
        let mail = match t.phase {
            Phase::Votes => RecoveryMail::RequestAbort { txn, seqs },
            Phase::Deciding => RecoveryMail::Decide { txn, decision: t.decision, seqs },
            Phase::Recording | Phase::Resolving => return,
        };
        let id = courier.send(now, sk, SERVICE_TXN, to_bytes(&mail), shards, out);
        self.mail.insert(id, (txn, sk));
    }

    /// The outcome of a task's courier message. Returns false if the id is not a task's.
    pub fn on_mail_result(
        &mut self,
        now: Instant,
        id: u64,
        result: &Result<Delivered, MailError>,
        shards: &mut Shards,
        courier: &mut Courier,
        out: &mut HostEffects,
    ) -> bool {
        if self.starts.remove(&id) {
            return true;
        }
        let Some((txn, sk)) = self.mail.remove(&id) else { return false };
        let Some(t) = self.tasks.get_mut(&txn) else { return true };
        let answer = result
            .as_ref()
            .ok()
            .and_then(|d| decode_message::<RecoveryAnswer>(d.body.clone()).ok());
        match (t.phase, answer) {
            (Phase::Votes, Some(RecoveryAnswer::Votes(votes))) => {
                t.votes.extend(votes);
                t.waiting.remove(&sk);
            }
            (Phase::Votes, Some(RecoveryAnswer::Stale)) => {
                t.stale = true;
                t.waiting.remove(&sk);
            }
            (Phase::Deciding, Some(RecoveryAnswer::Decided)) => {
                t.waiting.remove(&sk);
            }
            // Not delivered in time, or a confused answer: ask that participant again.
            _ => {
                self.send_to(now, txn, sk, shards, courier, out);
                return true;
            }
        }
        if t.waiting.is_empty() {
            self.advance(now, txn, shards, out);
        }
        true
    }

    /// The next phase of a task whose phase is complete (its next step is a log request here).
    fn advance(&mut self, now: Instant, txn: TxnId, shards: &mut Shards, out: &mut HostEffects) {
        let t = self.tasks.get_mut(&txn).expect("a task");
        match t.phase {
            Phase::Votes if t.stale => {
                // RC3: the client acknowledged the prepares: it decided everywhere itself.
                self.tasks.remove(&txn);
            }
            Phase::Votes => {
                // RC4: `Commit` iff every object voted `Prepared`.
                let all_prepared =
                    t.all.iter().all(|o| t.votes.get(&o.seq) == Some(&Vote::Prepared));
                t.decision = if all_prepared { Decision::Commit } else { Decision::Abort };
                t.phase = Phase::Recording;
                let record = DecisionRecord { txn, all: t.all.clone(), decision: t.decision };
                let make = |token| LogRequest::RecordDecision { token, record };
                let token = shards.request_internal(now, t.home, make, out);
                self.tokens.insert(token, Waiter::Task(txn));
            }
            Phase::Deciding => {
                t.phase = Phase::Resolving;
                let make = |token| LogRequest::Resolve { token, txn };
                let token = shards.request_internal(now, t.home, make, out);
                self.tokens.insert(token, Waiter::Task(txn));
            }
            Phase::Recording | Phase::Resolving => unreachable!("advanced by their shard reply"),
        }
    }

    /// A reply of a shard replica to a request of this module. Returns the courier answer to
    /// send (`(to, id, answer)`), if the request served a message.
    pub fn on_shard_reply(
        &mut self,
        now: Instant,
        token: u64,
        result: Result<TxnAnswer, WriteError>,
        shards: &mut Shards,
        courier: &mut Courier,
        out: &mut HostEffects,
    ) -> Option<(NodeId, u64, LeaderAnswer)> {
        match self.tokens.remove(&token)? {
            Waiter::Mail { from, id, epoch } => {
                let answer = match result {
                    Ok(TxnAnswer::Votes { votes, .. }) => Some(RecoveryAnswer::Votes(votes)),
                    Ok(TxnAnswer::Done) => Some(RecoveryAnswer::Decided),
                    Err(WriteError::Stale) => Some(RecoveryAnswer::Stale),
                    // (Recovery never sends a watermark report.)
                    Ok(TxnAnswer::Watermarks { .. }) => None,
                    // Not applied here (lost leadership, a move, a time-out): the sender's
                    // courier tries again, at whichever node leads then.
                    Err(_) => None,
                };
                let answer = match answer {
                    Some(a) => LeaderAnswer::Delivered { by: shards.me, epoch, body: to_bytes(&a) },
                    None => LeaderAnswer::NotLeader { hint: None },
                };
                Some((from, id, answer))
            }
            Waiter::Task(txn) => {
                let t = self.tasks.get_mut(&txn)?;
                match (t.phase, result) {
                    (Phase::Recording, Ok(_)) => {
                        // RC5: the decision is durable; now the participants.
                        t.phase = Phase::Deciding;
                        t.waiting = t.groups.keys().copied().collect();
                        self.send_phase(now, txn, shards, courier, out);
                    }
                    (Phase::Resolving, Ok(_)) => {
                        self.tasks.remove(&txn);
                    }
                    // This node no longer leads the home shard: whoever does resumes from the
                    // record, or the timers start over.
                    _ => {
                        self.tasks.remove(&txn);
                    }
                }
                None
            }
        }
    }
}

/// The objects' ids by the shard that holds them (`None` if a table is unknown here).
fn group(all: &[TxnObject], shards: &Shards) -> Option<BTreeMap<ShardKey, Vec<u64>>> {
    let mut groups: BTreeMap<ShardKey, Vec<u64>> = BTreeMap::new();
    for o in all {
        let sk = shards.shard_key(&o.table, &o.key).ok()?;
        groups.entry(sk).or_default().push(o.seq);
    }
    Some(groups)
}

/// Sends a courier answer to node `to`'s message `id` (this node's own: straight to its
/// courier).
pub(crate) fn answer_mail(
    now: Instant,
    to: NodeId,
    id: u64,
    answer: LeaderAnswer,
    shards: &Shards,
    courier: &mut Courier,
    out: &mut HostEffects,
) {
    if to == shards.me {
        courier.on_answer(now, id, answer, shards, out);
    } else {
        out.send.push((to, PeerMessage::LeaderAnswer { id, answer }));
    }
}
