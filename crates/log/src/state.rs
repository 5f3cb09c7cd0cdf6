//! The in-memory log (`mem_log`) and the applied key-value state with RIFL's completion
//! records (ORCA §3.1, rifl.md §5.3). Pure data structures: no protocol decisions here.

use std::collections::{BTreeSet, HashMap};

use bytes::Bytes;
use strata_kairos::lease::AccessStats;
use strata_kairos::validator::{self as kv_validator, ValidateReq, Validator};
use strata_rifl::{ResultTracker, RiflConfig, RpcId, Verdict};
use strata_wire::log::{Completion, LogEntry, LogIndex, LogOp, ShardMove, WriteOutcome};
use strata_wire::txn::{
    AbortReason, Decision, KairosKey, KairosPrepare, KairosRole, Lock, Prepare, Timestamp,
    TxnAction, TxnId, TxnOp, Vote,
};

use crate::participant::Participant;

use crate::api::{ClientRecords, Snapshot};

/// The log after an optional snapshot. Indexes strictly increase but are not contiguous across
/// epochs, so positions are found by binary search.
#[derive(Clone, Debug, Default)]
pub(crate) struct Log {
    /// The snapshot's last index (`ZERO` without one): the log "contains" it.
    base: LogIndex,
    entries: Vec<LogEntry>,
}

impl Log {
    pub fn new(base: LogIndex, entries: Vec<LogEntry>) -> Log {
        Log { base, entries }
    }

    pub fn last_index(&self) -> LogIndex {
        self.entries.last().map_or(self.base, |e| e.index)
    }

    pub fn base(&self) -> LogIndex {
        self.base
    }

    pub fn entries(&self) -> &[LogEntry] {
        &self.entries
    }

    /// Where `idx` is (`Ok`) or would go (`Err`). Nearly every lookup is near the end (an
    /// append's `prev_index`, what a follower has not yet acknowledged, what was committed
    /// but not applied), so the last [`Log::TAIL`] entries are searched first: a search over
    /// the whole log touches a cache line per step, and the log only grows.
    fn position(&self, idx: LogIndex) -> Result<usize, usize> {
        let tail = self.entries.len().saturating_sub(Self::TAIL);
        match self.entries.get(tail) {
            Some(first) if first.index <= idx => self.entries[tail..]
                .binary_search_by_key(&idx, |e| e.index)
                .map(|p| p + tail)
                .map_err(|p| p + tail),
            _ => self.entries[..tail].binary_search_by_key(&idx, |e| e.index),
        }
    }

    /// How many of the last entries [`Log::position`] searches first.
    const TAIL: usize = 64;

    /// Whether the log holds an entry at `idx` (the snapshot base and `ZERO` count).
    pub fn contains(&self, idx: LogIndex) -> bool {
        idx == LogIndex::ZERO || idx == self.base || self.position(idx).is_ok()
    }

    /// The largest index held that is `<= idx` (the base if none): where a leader backs up to.
    pub fn at_or_below(&self, idx: LogIndex) -> LogIndex {
        match self.position(idx) {
            Ok(p) => self.entries[p].index,
            Err(0) => self.base.min(idx),
            Err(p) => self.entries[p - 1].index,
        }
    }

    /// Entries with index in `(after, ..]`.
    pub fn after(&self, after: LogIndex) -> &[LogEntry] {
        let start = match self.position(after) {
            Ok(p) => p + 1,
            Err(p) => p,
        };
        &self.entries[start..]
    }

    /// Entries with index in `(after, upto]`.
    pub fn range(&self, after: LogIndex, upto: LogIndex) -> impl Iterator<Item = &LogEntry> {
        self.after(after).iter().take_while(move |e| e.index <= upto)
    }

    pub fn append(&mut self, e: LogEntry) {
        assert!(
            e.index > self.last_index(),
            "log indexes strictly increase: {} after {}",
            e.index,
            self.last_index()
        );
        self.entries.push(e);
    }

    /// Removes every entry after `after`; returns the last removed index, if any.
    pub fn truncate_after(&mut self, after: LogIndex) -> Option<LogIndex> {
        assert!(after >= self.base, "cannot truncate into the snapshot");
        let removed = self.entries.last().map(|e| e.index).filter(|&l| l > after);
        let keep = self.after(LogIndex::ZERO).len() - self.after(after).len();
        self.entries.truncate(keep);
        removed
    }
}

/// One key's applied state. A delete leaves a tombstone carrying its index (§3.1 [DECISION],
/// §9.10: never collected).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Item {
    pub value: Option<Bytes>,
    pub update_index: LogIndex,
}

/// What applying one entry did (for the `Executed` audit event and the tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Applied {
    /// A `NoOp`: only the applied index moved.
    NoOp,
    /// The write's mutation took effect; its entry is now the RPC's completion record.
    Executed,
    /// An earlier applied entry of the same RPC is its completion record: nothing changed but
    /// the watermark (a retry appended twice, e.g. across a leader change).
    Duplicate,
    /// The client had acknowledged this seq before the entry was applied (rifl.md §7 inv. 5):
    /// a very late duplicate, which must not execute.
    Stale,
    /// The client's lease had expired (an `Expire` entry named it before): its records are
    /// gone, so the entry must not execute (§7 inv. 9).
    Expired,
    /// An applied `Freeze` came first: the shard moved (rifl.md §5.7), so the entry must not
    /// execute here; the write is answered `Moved` and retried at the new replicas.
    Moved,
    /// rifl.md §5.9: the key is locked by a transaction; the write did nothing and left no
    /// record (`abort_in_progress`), so its retry executes once the lock is released.
    Locked,
    /// A transaction entry (prepare, decision, abort request, decision record): what it did
    /// is in `Kv::take_txn_events`.
    Txn,
}

/// [`Kv::vote_on`]'s rule over a key's state: its value and version, and whether a
/// transaction holds it. The leader's foresight (`foresight.rs`) applies it to the state its
/// pending entries leave.
pub(crate) fn vote_given(
    op: &strata_wire::txn::TxnOp,
    (value, version): (Option<&Bytes>, LogIndex),
    locked: bool,
    check_versions: bool,
) -> Vote {
    if locked {
        Vote::Abort(AbortReason::Locked)
    } else if check_versions && op.expect.as_ref().is_some_and(|x| !x.holds(value, version)) {
        Vote::Abort(AbortReason::Conflict)
    } else {
        Vote::Prepared
    }
}

/// How applying behaves: every rule on and no bug planted, but under a canary
/// (`LogConfig::apply_rules`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rules {
    /// The RIFL duplicate filter (`NoDedup` turns it off).
    pub dedup: bool,
    /// A prepare checks the version the transaction read.
    pub check_versions: bool,
    /// An abort request records the `Abort` votes it gives.
    pub abort_records: bool,
    /// `Expire` spares clients holding locks (R-D14).
    pub protect_holders: bool,
    /// A bug planted in the embedded Kairos validator (`None`: Algorithm 3 as specified).
    pub kairos_bug: Option<strata_kairos::PlantedBug>,
}

#[cfg(test)]
impl Rules {
    pub const CORRECT: Rules = Rules {
        dedup: true,
        check_versions: true,
        abort_records: true,
        protect_holders: true,
        kairos_bug: None,
    };
}

/// What a transaction entry did at this replica (audit, rifl.md §7 inv. 10-14).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnEvent {
    /// An object's prepare (or abort request) recorded this vote; `Prepared` took the lock.
    Voted { index: LogIndex, txn: TxnId, seq: u64, key: Option<Bytes>, vote: Vote },
    /// A decision released an object's lock (applying its action on `Commit`).
    Decided { index: LogIndex, txn: TxnId, seq: u64, key: Bytes, decision: Decision },
}

impl TxnEvent {
    /// The index of the entry that did it.
    pub fn index(&self) -> LogIndex {
        match self {
            TxnEvent::Voted { index, .. } | TxnEvent::Decided { index, .. } => *index,
        }
    }
}

/// The applied state: items, RIFL's completion records and watermarks, the applied index.
///
/// Exactly-once (rifl.md §5.3 S6, §5.4, R-D23): a write's log entry is its completion record,
/// so `rifl` is fed only from applied entries (`recover_record(rpc, entry.ack, entry.index)`)
/// and the decision "duplicate, skip the mutation" reads only `rifl`. Both are therefore a
/// function of the applied prefix of the log, identical at every replica, after a restart's
/// replay and after a truncation's rebuild. Nothing here is "in progress": the leader's
/// appended-but-unapplied writes are its own `inflight` map, dropped when it steps down.
#[derive(Clone, Debug)]
pub(crate) struct Kv {
    items: HashMap<Bytes, Item>,
    /// Per client: the ack watermark learned from applied entries (R-D7), and the index of
    /// each applied, unacknowledged RPC. Records at or below the watermark are dropped (§5.6);
    /// the watermark stays, so a late duplicate is `Stale` (R-D8). Entries are durable and
    /// replayed, so no separate ack record is needed.
    rifl: ResultTracker<Completion>,
    /// Clients named by applied `Expire` entries (§5.6): their entries apply as no-ops. Lease
    /// ids are never reused, so this only grows (8 bytes per expired client that wrote here).
    expired: BTreeSet<u64>,
    /// rifl.md §5.7: the applied `Freeze` entry's index and where the shard went. From it on
    /// the state is final: later write and `Expire` entries change nothing.
    frozen: Option<(LogIndex, ShardMove)>,
    /// Transactions' locks and decision records (rifl.md §5.8).
    txn: Participant,
    /// What transaction entries did since the replica last took them.
    txn_events: Vec<TxnEvent>,
    /// A Kairos table's validator (kairos.md §3.2, server-side placement, §9.12): per key
    /// `latest_read`, `latest_committed` (the key's `vts`) and the prepared write, fed only
    /// by applied entries. Empty for any other table.
    kairos: Validator,
    /// kairos.md §3.3 `write_stats`, §5.10: per Kairos key that has a value, the gaps between
    /// the commit timestamps its Commit decisions installed (`W`, sent with every read).
    /// Fed only by applied decisions, so every replica that applied the same entries agrees;
    /// soft state: not in snapshots (a replica started from one begins without `W`).
    write_stats: HashMap<Bytes, AccessStats>,
    applied: LogIndex,
}

fn empty_validator() -> Validator {
    Validator::new([]).without_version_history()
}

impl Default for Kv {
    fn default() -> Kv {
        Kv {
            items: HashMap::new(),
            rifl: ResultTracker::new(&RiflConfig::default()),
            expired: BTreeSet::new(),
            frozen: None,
            txn: Participant::default(),
            txn_events: Vec::new(),
            kairos: empty_validator(),
            write_stats: HashMap::new(),
            applied: LogIndex::ZERO,
        }
    }
}

impl Kv {
    pub fn from_snapshot(s: Option<&Snapshot>) -> Kv {
        let Some(s) = s else { return Kv::default() };
        let mut kv = Kv {
            items: s
                .items
                .iter()
                .map(|(k, v, u)| (k.clone(), Item { value: v.clone(), update_index: *u }))
                .collect(),
            applied: s.last_included,
            expired: s.expired.iter().copied().collect(),
            txn: Participant::from_parts(&s.locks, &s.decisions),
            kairos: Validator::from_keys(
                s.kairos
                    .iter()
                    .map(|k| (k.key.clone(), k.latest_read, k.latest_committed, k.prepared_write)),
            ),
            ..Kv::default()
        };
        kv.kairos.raise_ts_gc(s.kairos_ts_gc);
        for c in &s.clients {
            kv.rifl.recover_ack(c.client_id, c.ack);
            for &(seq, record) in &c.records {
                let rpc = RpcId { client_id: c.client_id, seq };
                kv.rifl.recover_record(rpc, c.ack, record);
            }
        }
        kv
    }

    /// The applied state as a snapshot (items sorted by key, clients by id).
    pub fn to_snapshot(&self) -> Snapshot {
        let mut items: Vec<(Bytes, Option<Bytes>, LogIndex)> =
            self.items.iter().map(|(k, i)| (k.clone(), i.value.clone(), i.update_index)).collect();
        items.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let clients = self
            .rifl
            .completed_records()
            .into_iter()
            .map(|(client_id, ack, records)| ClientRecords { client_id, ack, records })
            .collect();
        let (locks, decisions) = self.txn.to_parts();
        Snapshot {
            last_included: self.applied,
            items,
            clients,
            expired: self.expired.iter().copied().collect(),
            locks,
            decisions,
            kairos: self.kairos_keys(),
            kairos_ts_gc: self.kairos.ts_gc(),
        }
    }

    /// The validator's per-key state, by key (a snapshot's Kairos section).
    fn kairos_keys(&self) -> Vec<KairosKey> {
        self.kairos
            .key_states()
            .map(|(k, s)| KairosKey {
                key: k.clone(),
                latest_read: s.latest_read,
                latest_committed: s.latest_committed,
                prepared_write: s.prepared_write,
            })
            .collect()
    }

    pub fn applied(&self) -> LogIndex {
        self.applied
    }

    /// The completion records and watermarks of applied writes.
    pub fn rifl(&self) -> &ResultTracker<Completion> {
        &self.rifl
    }

    /// The applied `Freeze` entry's index and move, if the shard is moving or moved away.
    pub fn frozen(&self) -> Option<&(LogIndex, ShardMove)> {
        self.frozen.as_ref()
    }

    /// The state a moved shard's new replicas install (rifl.md §5.7 step 2): everything
    /// applied up to the `Freeze` entry, which is all there is, since nothing after it changes
    /// the state. `None` before a `Freeze` is applied.
    pub fn frozen_snapshot(&self) -> Option<Snapshot> {
        let &(at, _) = self.frozen.as_ref()?;
        Some(Snapshot { last_included: at, ..self.to_snapshot() })
    }

    /// The encoded size of `to_snapshot()` (`strata_wire` encoding), counted without building it.
    pub fn snapshot_encoded_len(&self) -> usize {
        let items: usize = self
            .items
            .iter()
            .map(|(k, i)| 4 + k.len() + 1 + i.value.as_ref().map_or(0, |v| 4 + v.len()) + 8)
            .sum();
        let records = self.rifl.completed_records();
        let clients: usize = records.iter().map(|(_, _, r)| 8 + 8 + 4 + r.len() * 16).sum();
        let outcomes: usize = records
            .iter()
            .map(|(_, _, r)| 4 + r.iter().map(|(_, c)| c.outcome.encoded_len()).sum::<usize>())
            .sum();
        let txn = {
            use strata_wire::Encode;
            let mut b = bytes::BytesMut::new();
            let (locks, decisions) = self.txn.to_parts();
            strata_wire::codec::put_seq(&mut b, &locks, |o, l| l.encode(o));
            strata_wire::codec::put_seq(&mut b, &decisions, |o, d| d.encode(o));
            let kairos = self.kairos_keys();
            let ts_gc = self.kairos.ts_gc();
            if !kairos.is_empty() || ts_gc != Timestamp::ZERO {
                strata_wire::codec::put_seq(&mut b, &kairos, |o, k| k.encode(o));
            }
            if ts_gc != Timestamp::ZERO {
                ts_gc.encode(&mut b);
            }
            b.len()
        };
        8 + 4 + items + 4 + clients + 4 + 8 * self.expired.len() + 4 + outcomes + txn
    }

    /// Whether an applied `Expire` entry named `client_id`.
    pub fn is_expired(&self, client_id: u64) -> bool {
        self.expired.contains(&client_id)
    }

    /// ORCA §5.2: applying sets the key's value and update-index, the RPC's completion record,
    /// and the applied index. A key operation is evaluated here, against the state this
    /// prefix of the log left (`LogOp::evaluate`: conditions, counters), so its outcome is the
    /// same at every replica and becomes the completion record with the entry's index. `NoOp`
    /// moves only the applied index. `dedup = false` is the `NoDedup` canary: every entry
    /// executes.
    #[cfg(test)]
    pub fn apply(&mut self, e: &LogEntry, dedup: bool) -> Applied {
        self.apply_with(e, Rules { dedup, ..Rules::CORRECT })
    }

    /// [`Kv::apply`] under `rules` (the canaries' planted bugs).
    pub fn apply_with(&mut self, e: &LogEntry, rules: Rules) -> Applied {
        let dedup = rules.dedup;
        assert!(
            e.index > self.applied,
            "entries apply in log order: {} after {}",
            e.index,
            self.applied
        );
        self.applied = e.index;
        match &e.op {
            LogOp::NoOp => return Applied::NoOp,
            // A moved shard's state is final (§5.7 step 1): the leader refuses writes once it
            // appended the `Freeze`, and an entry a leader appended before learning of it
            // (a deposed one, or one whose `Freeze` is not applied yet) is answered `Moved`.
            op if self.frozen.is_some() && !matches!(op, LogOp::Install(_)) => {
                return Applied::Moved
            }
            LogOp::Freeze(m) => {
                self.frozen = Some((e.index, m.clone()));
                return Applied::NoOp;
            }
            // §5.7 step 3: the new group's first entry; the state it replaces is empty.
            LogOp::Install(snapshot) => {
                let applied = self.applied;
                *self = Kv::from_snapshot(Some(snapshot));
                self.applied = applied;
                return Applied::NoOp;
            }
            LogOp::Expire(clients) => {
                // R-D14: a client holding a lock here, or whose transaction a coordinator
                // recovers here, keeps its records (the votes recovery reads).
                let protect = rules.protect_holders;
                for &c in clients.iter().filter(|&&c| !(protect && self.txn.protects(c))) {
                    self.rifl.remove_client(c);
                    self.expired.insert(c);
                }
                return Applied::NoOp;
            }
            LogOp::Prepare(p) => return self.apply_prepare(e, p, rules),
            LogOp::Decide { txn, decision, seqs } => {
                return self.apply_decide(e.index, *txn, *decision, seqs)
            }
            LogOp::RequestAbort { txn, seqs } => {
                return self.apply_request_abort(e.index, *txn, seqs, rules)
            }
            LogOp::Decided(d) => {
                self.txn.record_decision((**d).clone());
                return Applied::Txn;
            }
            LogOp::Resolved(txn) => {
                self.txn.resolve(*txn);
                return Applied::Txn;
            }
            LogOp::Put(_) | LogOp::Delete | LogOp::Cond { .. } | LogOp::Add(_) => {}
        }
        let rpc = RpcId { client_id: e.client_id, seq: e.seq };
        if dedup && self.expired.contains(&rpc.client_id) {
            return Applied::Expired;
        }
        // Decided from applied records only (the module comment). The entry's own ack is
        // below its seq (`Rifl::check` at the leader), so it never makes the entry stale.
        let duplicate = match self.rifl.peek(rpc) {
            _ if !dedup => None,
            Verdict::Stale => Some(Applied::Stale),
            Verdict::Completed(_) => Some(Applied::Duplicate),
            _ => None,
        };
        let ack = self.txn.ack_bound(rpc.client_id, e.ack);
        if let Some(outcome) = duplicate {
            // Learns the entry's ack; the first record of the RPC stays.
            self.rifl.recover_ack(rpc.client_id, ack);
            return outcome;
        }
        // rifl.md §5.9: a locked key takes no plain write until the decision.
        if self.txn.is_locked(&e.key) {
            self.rifl.recover_ack(rpc.client_id, ack);
            return Applied::Locked;
        }
        let (value, version) = self.get(&e.key);
        let eval = e.op.evaluate(value.as_ref(), version).expect("a key operation");
        self.rifl.recover_record(rpc, ack, Completion { index: e.index, outcome: eval.outcome });
        if let Some(value) = eval.write {
            // Own allocation: entry bytes may be slices of a large network buffer.
            let key = Bytes::copy_from_slice(&e.key);
            self.items.insert(key, Item { value, update_index: e.index });
        }
        Applied::Executed
    }

    /// One object's vote (§5.8.2): the completion record of its prepare's RPC id, its lock
    /// when `lock`, and the audit event. Both modes (RIFL, Kairos) record votes here.
    fn record_vote(
        &mut self,
        index: LogIndex,
        p: &Prepare,
        op: &TxnOp,
        ack: u64,
        vote: Vote,
        lock: bool,
    ) {
        let rpc = RpcId { client_id: p.txn.client_id, seq: op.seq };
        self.rifl.recover_record(
            rpc,
            ack,
            Completion { index, outcome: WriteOutcome::Voted(vote) },
        );
        if lock {
            self.txn.lock(Lock {
                txn: p.txn,
                seq: op.seq,
                key: Bytes::copy_from_slice(&op.key),
                action: op.action.clone(),
                all: p.all.clone(),
                since: index,
            });
        }
        let key = Some(op.key.clone());
        self.txn_events.push(TxnEvent::Voted { index, txn: p.txn, seq: op.seq, key, vote });
    }

    /// rifl.md §5.8.2 P2-P3: votes per object, in order, from applied state; stops at the
    /// first `Abort` (the objects after it get no record: the client aborts anyway, and a
    /// recovery's abort request records `Abort` for them). A prepare holding every object of
    /// the transaction whose votes are all `Prepared` applies `Commit` at once.
    fn apply_prepare(&mut self, e: &LogEntry, p: &Prepare, rules: Rules) -> Applied {
        if let Some(k) = &p.kairos {
            return self.apply_kairos_prepare(e, p, k, rules);
        }
        let dedup = rules.dedup;
        let client_id = p.txn.client_id;
        if dedup && self.expired.contains(&client_id) {
            return Applied::Expired;
        }
        let ack = self.txn.ack_bound(client_id, e.ack);
        self.rifl.recover_ack(client_id, ack);
        let mut unanimous = true;
        for op in &p.ops {
            let rpc = RpcId { client_id, seq: op.seq };
            let vote = match self.rifl.peek(rpc) {
                Verdict::Stale => return Applied::Stale,
                // A retry: the recorded vote stands.
                Verdict::Completed(c) if dedup => match c.outcome {
                    WriteOutcome::Voted(v) => v,
                    _ => Vote::Abort(AbortReason::Conflict),
                },
                _ => {
                    let vote = self.vote_on(op, rules.check_versions);
                    self.record_vote(e.index, p, op, ack, vote, vote == Vote::Prepared);
                    vote
                }
            };
            if vote != Vote::Prepared {
                unanimous = false;
                break;
            }
        }
        if p.whole {
            // R-D17: a prepare holding every object decides at once. An `Abort` vote decides
            // too (departure, docs/design.md): the transaction has no other participant, so
            // nothing but `Abort` can follow, and the locks its earlier objects took go now
            // instead of after a decision round.
            let decision = if unanimous { Decision::Commit } else { Decision::Abort };
            let seqs: Vec<u64> = p.ops.iter().map(|o| o.seq).collect();
            self.apply_decide(e.index, p.txn, decision, &seqs);
        }
        Applied::Txn
    }

    /// kairos.md §5.6 at apply time (server-side validation, §9.12): the prepare's ops are
    /// validated together by Algorithm 3, from applied state only, so every replica, a
    /// replay and a new leader give the same vote. Every op records that vote as its
    /// completion record (a retry, or an abort request after it, finds it; one recorded
    /// before it, by an abort request, makes this a retry that validates nothing). A Commit
    /// vote locks the written objects (the validator's `prepared_write` as RIFL's lock, so
    /// `T_TX`, recovery and record protection work unchanged); reads take no lock, their
    /// `latest_read` is raised. A prepare holding every object decides at once, as RIFL's.
    ///
    /// The prepare's role (a sharded table's, §4): a validator (`Validate`) validates the
    /// same way but its locks carry no value, so a decision installs only the keys'
    /// `latest_committed`; a data shard (`Replicate`, §5.5 `ReplicateReq`) validates no read
    /// (it gets none) and votes `Prepared` unless a written key is held — the same step 4
    /// over the writes alone, whose `latest_committed` check keeps its versions growing.
    fn apply_kairos_prepare(
        &mut self,
        e: &LogEntry,
        p: &Prepare,
        k: &KairosPrepare,
        rules: Rules,
    ) -> Applied {
        // kairos.md §5.9: the leader's `ts_GC` when it appended the entry, whatever the entry
        // then does (an entry applies alike everywhere, so every replica holds the same
        // `ts_GC`); Algorithm 3 step 1 checks the freshness against it below.
        self.kairos.raise_ts_gc(k.ts_gc);
        let client_id = p.txn.client_id;
        if rules.dedup && self.expired.contains(&client_id) {
            return Applied::Expired;
        }
        let ack = self.txn.ack_bound(client_id, e.ack);
        self.rifl.recover_ack(client_id, ack);
        for op in &p.ops {
            match self.rifl.peek(RpcId { client_id, seq: op.seq }) {
                Verdict::Stale => return Applied::Stale,
                Verdict::Completed(_) if rules.dedup => return Applied::Txn,
                _ => {}
            }
        }
        // The `KairosSkipReadPreparedCheck` canary skips every check of a read key against a
        // prepared write: Algorithm 3's step 2 and this lock check, which would catch it too.
        let skip_reads = rules.kairos_bug == Some(strata_kairos::PlantedBug::SkipReadPreparedCheck);
        let checked = |op: &&TxnOp| !(skip_reads && op.action == TxnAction::Read);
        let vote = if k.read_vts.len() != p.ops.len() || !role_fits(k, &p.ops) {
            Vote::Abort(AbortReason::Refused) // malformed (the host refuses it before)
        } else if p.ops.iter().filter(checked).any(|op| self.txn.is_locked(&op.key)) {
            // A lock the validator no longer holds prepared: a client's decision named only
            // some of its objects (the rest wait for recovery). Never two locks on a key.
            Vote::Abort(AbortReason::PreparedConflict)
        } else if self.kairos.pending().contains_key(&p.txn) {
            // A second prepare of one transaction in this shard (an honest client sends
            // one): its writes would be locked without being validated.
            Vote::Abort(AbortReason::Refused)
        } else {
            let req = ValidateReq {
                txn: p.txn,
                commit_ts: k.commit_ts,
                freshness: k.freshness,
                read_only: k.read_only,
                reads: p
                    .ops
                    .iter()
                    .zip(&k.read_vts)
                    .filter_map(|(op, v)| v.map(|v| (Bytes::copy_from_slice(&op.key), v)))
                    .collect(),
                writes: p
                    .ops
                    .iter()
                    .filter(|op| op.action != TxnAction::Read)
                    .map(|op| Bytes::copy_from_slice(&op.key))
                    .collect(),
            };
            self.kairos.set_planted_bug(rules.kairos_bug);
            let vote = wire_vote(self.kairos.validate(&req));
            // Nothing waits for the decision of an Abort vote or of reads only.
            self.kairos.forget(p.txn);
            vote
        };
        for op in &p.ops {
            // (A key named twice by one prepare is locked once.)
            let lock = vote == Vote::Prepared
                && op.action != TxnAction::Read
                && !self.txn.is_locked(&op.key);
            // A validator's lock holds the key for the decision and installs no value.
            let op = match k.role {
                KairosRole::Validate => &TxnOp { action: TxnAction::Read, ..op.clone() },
                KairosRole::Full | KairosRole::Replicate => op,
            };
            self.record_vote(e.index, p, op, ack, vote, lock);
        }
        if p.whole && vote == Vote::Prepared {
            let seqs: Vec<u64> = p.ops.iter().map(|o| o.seq).collect();
            self.apply_decide(e.index, p.txn, Decision::Commit, &seqs);
        }
        Applied::Txn
    }

    /// A Kairos table's replicated `ts_GC` (kairos.md §5.9): the highest leader stamp of an
    /// applied prepare (`ZERO` before any).
    pub fn kairos_ts_gc(&self) -> Timestamp {
        self.kairos.ts_gc()
    }

    /// A Kairos key's version timestamp (`ZERO` if never written by a transaction).
    pub fn vts(&self, key: &[u8]) -> Timestamp {
        self.kairos.latest_committed(key)
    }

    /// A Kairos key's `W` (kairos.md §5.10): the mean gap between the commit timestamps of
    /// its last 64 committed writes, in nanoseconds; `None` before its second.
    pub fn w_mean_ns(&self, key: &[u8]) -> Option<u64> {
        let mean = self.write_stats.get(key)?.mean()?;
        Some(u64::try_from(mean.as_nanos()).unwrap_or(u64::MAX))
    }

    /// kairos.md §5.7 "update write_stats[k]": a Commit decision installed `ts` as `key`'s
    /// version, with a value (`Some`) or a delete. A deleted key's statistics go, so only
    /// keys with a value hold any (memory bounded by the data).
    fn record_kairos_write(&mut self, key: &Bytes, ts: Timestamp, has_value: bool) {
        if !has_value {
            self.write_stats.remove(key);
            return;
        }
        let at = strata_wire::Instant::from_nanos(ts.nanos);
        self.write_stats.entry(key.clone()).or_default().on_access(at);
    }

    /// Whether a plain read of `key` must wait for a decision: RIFL's locks block reads
    /// (§5.9), a Kairos prepared write does not (kairos.md §5.3: a `Get` never waits; the
    /// latest committed version is returned and validation judges it).
    pub fn blocks_reads(&self, key: &[u8]) -> bool {
        self.txn.is_locked(key) && !self.kairos.is_prepared(key)
    }

    /// The `KairosValidatorSoftState` canary: the validator's state is dropped (what §6.4's
    /// restart would lose, never rebuilt). Nothing correct calls it.
    pub(crate) fn forget_validator(&mut self) {
        self.kairos = empty_validator();
    }

    /// The Kairos validator (tests).
    #[cfg(test)]
    pub fn validator(&self) -> &Validator {
        &self.kairos
    }

    /// rifl.md §5.8.2 P1/P2 b, the one vote rule of a prepare and of a read-only validation:
    /// `Abort(Locked)` if a transaction holds the key, `Abort(Conflict)` if it is no longer at
    /// the version the transaction read (`check_versions = false` is the
    /// `TxnSkipVersionCheck` canary), else `Prepared`.
    pub fn vote_on(&self, op: &strata_wire::txn::TxnOp, check_versions: bool) -> Vote {
        let (value, version) = self.get(&op.key);
        let locked = self.txn.is_locked(&op.key);
        vote_given(op, (value.as_ref(), version), locked, check_versions)
    }

    /// rifl.md §5.8.3 D2-D4: each object of `seqs` still locked by `txn` takes the decision.
    fn apply_decide(
        &mut self,
        index: LogIndex,
        txn: TxnId,
        decision: Decision,
        seqs: &[u64],
    ) -> Applied {
        // Kairos (§5.6 "on Decision"): the validator clears the prepared writes and, on
        // Commit, installs the validated commit timestamp as the keys' `vts`; then the locks
        // apply the writes below, as RIFL's do.
        let kairos_ts = self.kairos.pending().get(&txn).map(|p| p.commit_ts);
        if let Some(ts) = kairos_ts {
            self.kairos.decide(txn, decision, ts);
            self.kairos.take_events();
        }
        for &seq in seqs {
            let Some(l) = self.txn.unlock(RpcId { client_id: txn.client_id, seq }) else {
                continue; // decided before: idempotent
            };
            if decision == Decision::Commit {
                let value = match &l.action {
                    TxnAction::Read => None,
                    TxnAction::Write(v) => Some(Some(v.clone())),
                    TxnAction::Delete => Some(None),
                };
                if let Some(value) = value {
                    if let Some(ts) = kairos_ts {
                        self.record_kairos_write(&l.key, ts, value.is_some());
                    }
                    self.items.insert(l.key.clone(), Item { value, update_index: index });
                }
            }
            self.txn_events.push(TxnEvent::Decided { index, txn, seq, key: l.key, decision });
        }
        Applied::Txn
    }

    /// rifl.md §5.8.4 RA2: an object without a record gets `Abort(Recovered)` under its
    /// prepare's id; a recorded vote stands. No acknowledgement is learned (R-D13), and a
    /// collected client gets no new record (its prepare cannot run any more: `Expired`).
    fn apply_request_abort(
        &mut self,
        index: LogIndex,
        txn: TxnId,
        seqs: &[u64],
        rules: Rules,
    ) -> Applied {
        if self.expired.contains(&txn.client_id) || !rules.abort_records {
            return Applied::Txn;
        }
        for &seq in seqs {
            let rpc = RpcId { client_id: txn.client_id, seq };
            if let Verdict::New = self.rifl.peek(rpc) {
                let vote = Vote::Abort(AbortReason::Recovered);
                let record = Completion { index, outcome: WriteOutcome::Voted(vote) };
                self.rifl.recover_record(rpc, 0, record);
                self.txn_events.push(TxnEvent::Voted { index, txn, seq, key: None, vote });
            }
        }
        Applied::Txn
    }

    /// Whether a transaction holds `key`'s lock (§5.9: plain reads and writes retry).
    pub fn is_locked(&self, key: &[u8]) -> bool {
        self.txn.is_locked(key)
    }

    /// Whether `txn` is a Kairos transaction with writes prepared at this shard's validator.
    pub fn is_kairos_txn(&self, txn: TxnId) -> bool {
        self.kairos.pending().contains_key(&txn)
    }

    /// The transactions' state: locks and decision records.
    pub fn participant(&self) -> &Participant {
        &self.txn
    }

    /// Each lock's prepare still has its `Prepared` record (rifl.md §7 inv. 13, 14); the
    /// Kairos validator waits only for transactions holding prepared writes, each write held
    /// under that transaction's lock (kairos.md §7 inv. 8, with RIFL's lock as its carrier).
    pub fn check_txn(&self) -> Result<(), String> {
        self.txn.check()?;
        for (txn, p) in self.kairos.pending() {
            if p.vote != kv_validator::Vote::Commit || p.writes.is_empty() {
                return Err(format!("kairos: {txn} is pending without prepared writes"));
            }
            for k in &p.writes {
                if self.txn.lock_on(k).map(|l| l.txn) != Some(*txn) {
                    return Err(format!("kairos: {txn}'s prepared write of {k:?} has no lock"));
                }
            }
        }
        for l in self.txn.locks() {
            let rpc = RpcId { client_id: l.txn.client_id, seq: l.seq };
            match self.rifl.peek(rpc) {
                Verdict::Completed(Completion {
                    outcome: WriteOutcome::Voted(Vote::Prepared),
                    ..
                }) => {}
                v => {
                    return Err(format!(
                        "the lock of {:?} by {rpc} has no Prepared record: {v:?}",
                        l.key
                    ))
                }
            }
        }
        Ok(())
    }

    /// What transaction entries did since the last call.
    pub fn take_txn_events(&mut self) -> Vec<TxnEvent> {
        std::mem::take(&mut self.txn_events)
    }

    /// Visits every key that has a value, with it (unordered).
    pub fn for_each_item(&self, mut f: impl FnMut(&[u8], &[u8])) {
        for (k, i) in &self.items {
            if let Some(v) = &i.value {
                f(k, v);
            }
        }
    }

    /// `(value, update_index)`; an absent key has `(None, ZERO)` (§5.5.1 step 3).
    pub fn get(&self, key: &[u8]) -> (Option<Bytes>, LogIndex) {
        self.items.get(key).map_or((None, LogIndex::ZERO), |i| (i.value.clone(), i.update_index))
    }
}

/// Whether a Kairos prepare fits its role: a data shard's (`Replicate`) writes only, with
/// no read versions (kairos.md §4 `ReplicateReq`: the write set). The host refuses the rest
/// before; an entry that does not fit votes `Refused`.
fn role_fits(k: &KairosPrepare, ops: &[TxnOp]) -> bool {
    k.role != KairosRole::Replicate
        || (k.read_vts.iter().all(Option::is_none)
            && ops.iter().all(|o| o.action != TxnAction::Read))
}

/// A Kairos vote as a participant's vote on each object (the same record machinery as RIFL's).
fn wire_vote(v: kv_validator::Vote) -> Vote {
    use kv_validator::AbortReason as K;
    match v {
        kv_validator::Vote::Commit => Vote::Prepared,
        kv_validator::Vote::Abort(r) => Vote::Abort(match r {
            K::Stale { .. } => AbortReason::Stale,
            K::PreparedConflict { .. } => AbortReason::PreparedConflict,
            K::ReadWriteConflict { .. } => AbortReason::ReadWriteConflict,
            K::WriteWriteConflict { .. } => AbortReason::WriteWriteConflict,
            K::TimestampOrder { .. } => AbortReason::TimestampOrder,
            K::TooOld { .. } => AbortReason::TooOld,
            K::Refused | K::Recovering => AbortReason::Refused,
        }),
    }
}

/// A test entry: `k = v` at `(epoch, counter)`, from client 1 with `seq = counter`, ack 0.
#[cfg(test)]
pub(crate) fn test_entry(epoch: u32, counter: u32) -> LogEntry {
    LogEntry {
        index: LogIndex::new(epoch, counter),
        key: Bytes::from_static(b"k"),
        op: LogOp::Put(Bytes::from_static(b"v")),
        client_id: 1,
        seq: counter as u64,
        ack: 0,
        immediate: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use test_entry as e;

    #[test]
    fn positions_back_up_and_truncate_across_epochs() {
        let mut log = Log::new(LogIndex::ZERO, vec![e(1, 1), e(1, 2), e(2, 1), e(3, 1)]);
        assert!(
            log.contains(LogIndex::new(2, 1))
                && !log.contains(LogIndex::new(2, 2))
                && log.contains(LogIndex::ZERO)
        );
        assert_eq!(log.at_or_below(LogIndex::new(2, 7)), LogIndex::new(2, 1));
        assert_eq!(log.at_or_below(LogIndex::new(0, 5)), LogIndex::ZERO);
        assert_eq!(log.after(LogIndex::new(1, 2)).len(), 2);
        assert_eq!(log.after(LogIndex::new(1, 3)).len(), 2, "an index between entries");
        assert_eq!(log.range(LogIndex::ZERO, LogIndex::new(2, 1)).count(), 3);
        assert_eq!(log.truncate_after(LogIndex::new(1, 2)), Some(LogIndex::new(3, 1)));
        assert_eq!(log.last_index(), LogIndex::new(1, 2));
        assert_eq!(log.truncate_after(LogIndex::new(1, 2)), None);
    }

    #[test]
    fn positions_agree_with_a_search_of_the_whole_log() {
        // Three epochs, the second starting inside the searched-first tail.
        let entries: Vec<LogEntry> = (1..=100)
            .map(|c| e(1, c))
            .chain((1..=30).map(|c| e(2, c)))
            .chain((5..=40).map(|c| e(4, c)))
            .collect();
        let log = Log::new(LogIndex::ZERO, entries.clone());
        for epoch in 0..=5 {
            for counter in 0..=110 {
                let idx = LogIndex::new(epoch, counter);
                let whole = entries.binary_search_by_key(&idx, |e| e.index);
                assert_eq!(log.position(idx), whole, "{idx}");
            }
        }
        assert_eq!(Log::default().position(LogIndex::new(1, 1)), Err(0));
    }

    #[test]
    fn deletes_leave_tombstones_and_entries_are_completion_records() {
        let mut kv = Kv::default();
        assert_eq!(kv.apply(&e(1, 1), true), Applied::Executed);
        kv.apply(&LogEntry { op: LogOp::Delete, ..e(1, 2) }, true);
        assert_eq!(kv.get(b"k"), (None, LogIndex::new(1, 2)));
        assert_eq!(kv.get(b"absent"), (None, LogIndex::ZERO));
        let rpc = |seq| RpcId { client_id: 1, seq };
        assert_eq!(
            kv.rifl().peek(rpc(2)),
            Verdict::Completed(Completion::done(LogIndex::new(1, 2)))
        );
        let noop = LogEntry { op: LogOp::NoOp, client_id: 0, seq: 0, ..e(2, 1) };
        assert_eq!(kv.apply(&noop, true), Applied::NoOp);
        assert_eq!(kv.applied(), LogIndex::new(2, 1));
        assert_eq!(kv.get(b"k").1, LogIndex::new(1, 2));
    }

    #[test]
    fn conditional_writes_and_counters_are_evaluated_when_applied_and_their_outcome_recorded() {
        use strata_wire::log::{Expect, WriteOutcome};
        let op = |counter, seq, op| LogEntry { op, seq, ..e(1, counter) };
        let record = |kv: &Kv, seq| match kv.rifl().peek(RpcId { client_id: 1, seq }) {
            Verdict::Completed(c) => c,
            v => panic!("no record: {v:?}"),
        };
        let b = |s: &'static str| Bytes::from_static(s.as_bytes());
        let mut kv = Kv::default();
        // Put-if-absent on an absent key holds; again, it is rejected with the version found.
        let put_if_absent = || LogOp::Cond { expect: Expect::Absent, put: Some(b("1")) };
        assert_eq!(kv.apply(&op(1, 1, put_if_absent()), true), Applied::Executed);
        assert_eq!(kv.get(b"k"), (Some(b("1")), LogIndex::new(1, 1)));
        assert_eq!(kv.apply(&op(2, 2, put_if_absent()), true), Applied::Executed);
        assert_eq!(
            record(&kv, 2).outcome,
            WriteOutcome::Rejected { current: LogIndex::new(1, 1) },
            "a failed condition is a result, and changes nothing"
        );
        assert_eq!(kv.get(b"k").1, LogIndex::new(1, 1));
        // Add on a counter; the outcome carries the value before.
        assert_eq!(kv.apply(&op(3, 3, LogOp::Add(41)), true), Applied::Executed);
        assert_eq!(
            record(&kv, 3),
            Completion { index: LogIndex::new(1, 3), outcome: WriteOutcome::Added { old: 1 } }
        );
        assert_eq!(kv.get(b"k").0, Some(b("42")));
        // Compare-and-swap on the value; on the version a reader saw; delete-if.
        let cas = LogOp::Cond { expect: Expect::Value(b("42")), put: Some(b("x")) };
        kv.apply(&op(4, 4, cas), true);
        assert_eq!(record(&kv, 4).outcome, WriteOutcome::Done);
        let stale_version = LogOp::Cond { expect: Expect::Version(LogIndex::new(1, 3)), put: None };
        kv.apply(&op(5, 5, stale_version), true);
        assert_eq!(record(&kv, 5).outcome, WriteOutcome::Rejected { current: LogIndex::new(1, 4) });
        // Add on text, and below zero: nothing changes.
        kv.apply(&op(6, 6, LogOp::Add(1)), true);
        assert_eq!(record(&kv, 6).outcome, WriteOutcome::NotCounter);
        let version = LogOp::Cond { expect: Expect::Version(LogIndex::new(1, 4)), put: None };
        kv.apply(&op(7, 7, version), true);
        assert_eq!(kv.get(b"k"), (None, LogIndex::new(1, 7)), "deleted at the version it saw");
        kv.apply(&op(8, 8, LogOp::Add(-1)), true);
        assert_eq!(record(&kv, 8).outcome, WriteOutcome::OutOfRange);
        assert_eq!(kv.get(b"k"), (None, LogIndex::new(1, 7)));
        // A second entry of RPC 3 (appended again by a new leader) does not add again, and
        // its record still says what the first execution returned (R-G1, R-G2).
        assert_eq!(kv.apply(&op(9, 3, LogOp::Add(41)), true), Applied::Duplicate);
        assert_eq!(kv.get(b"k").0, None);
        assert_eq!(record(&kv, 3).outcome, WriteOutcome::Added { old: 1 });
        // Outcomes travel with a moved shard.
        let back = Kv::from_snapshot(Some(&kv.to_snapshot()));
        for seq in 1..=8 {
            assert_eq!(record(&back, seq), record(&kv, seq));
        }
    }

    mod txn {
        use super::*;
        use strata_wire::log::Expect;
        use strata_wire::txn::{TxnObject, TxnOp};

        const T: TxnId = TxnId { client_id: 7, base: 10 };

        fn b(s: &'static str) -> Bytes {
            Bytes::from_static(s.as_bytes())
        }

        fn op(key: &'static str, seq: u64, expect: Option<Expect>, action: TxnAction) -> TxnOp {
            TxnOp { key: b(key), seq, expect, action }
        }

        fn prepare(counter: u32, txn: TxnId, ops: Vec<TxnOp>, whole: bool, ack: u64) -> LogEntry {
            let all = ops
                .iter()
                .map(|o| TxnObject { table: "t".into(), key: o.key.clone(), seq: o.seq })
                .collect();
            LogEntry {
                op: LogOp::Prepare(Box::new(Prepare { txn, all, ops, whole, kairos: None })),
                key: Bytes::new(),
                client_id: txn.client_id,
                seq: 0,
                ack,
                ..e(1, counter)
            }
        }

        fn node_entry(counter: u32, op: LogOp) -> LogEntry {
            LogEntry { op, key: Bytes::new(), client_id: 0, seq: 0, ack: 0, ..e(1, counter) }
        }

        fn vote(kv: &Kv, client_id: u64, seq: u64) -> Option<Vote> {
            match kv.rifl().peek(RpcId { client_id, seq }) {
                Verdict::Completed(Completion { outcome: WriteOutcome::Voted(v), .. }) => Some(v),
                _ => None,
            }
        }

        fn put(
            counter: u32,
            client_id: u64,
            seq: u64,
            key: &'static str,
            v: &'static str,
        ) -> LogEntry {
            LogEntry { key: b(key), op: LogOp::Put(b(v)), client_id, seq, ack: 0, ..e(1, counter) }
        }

        #[test]
        fn prepared_objects_are_locked_until_the_decision_which_applies_the_writes() {
            let mut kv = Kv::default();
            kv.apply(&put(1, 1, 1, "a", "0"), true);
            let read_a = Some(Expect::Version(LogIndex::new(1, 1)));
            let ops = vec![
                op("a", 11, read_a, TxnAction::Write(b("1"))),
                op("b", 12, Some(Expect::Absent), TxnAction::Write(b("2"))),
            ];
            assert_eq!(kv.apply(&prepare(2, T, ops, false, 9), true), Applied::Txn);
            assert_eq!(
                (vote(&kv, 7, 11), vote(&kv, 7, 12)),
                (Some(Vote::Prepared), Some(Vote::Prepared))
            );
            assert!(kv.is_locked(b"a") && kv.is_locked(b"b"));
            assert_eq!(kv.take_txn_events().len(), 2);
            // §5.9: a plain write waits (no record: its retry executes later).
            assert_eq!(kv.apply(&put(3, 2, 1, "a", "x"), true), Applied::Locked);
            assert!(matches!(kv.rifl().peek(RpcId { client_id: 2, seq: 1 }), Verdict::New));
            // Another transaction votes Abort(Locked) and stops: its second object gets no vote.
            let other = TxnId { client_id: 8, base: 1 };
            let ops = vec![op("b", 2, None, TxnAction::Read), op("c", 3, None, TxnAction::Delete)];
            kv.apply(&prepare(4, other, ops, false, 0), true);
            assert_eq!(
                (vote(&kv, 8, 2), vote(&kv, 8, 3)),
                (Some(Vote::Abort(AbortReason::Locked)), None)
            );
            kv.check_txn().unwrap();
            // The decision: both writes at the decision's index, locks gone; idempotent.
            let decide = LogOp::Decide { txn: T, decision: Decision::Commit, seqs: vec![11, 12] };
            kv.apply(&node_entry(5, decide.clone()), true);
            assert_eq!(kv.get(b"a"), (Some(b("1")), LogIndex::new(1, 5)));
            assert_eq!(kv.get(b"b"), (Some(b("2")), LogIndex::new(1, 5)));
            assert!(!kv.is_locked(b"a") && !kv.is_locked(b"b"));
            kv.apply(&node_entry(6, decide), true);
            assert_eq!(kv.get(b"a").1, LogIndex::new(1, 5), "a second decision changes nothing");
            assert_eq!(kv.apply(&put(7, 2, 1, "a", "x"), true), Applied::Executed, "the retry");
            // Votes stay until the client acknowledges the block.
            assert_eq!(vote(&kv, 7, 11), Some(Vote::Prepared));
            kv.check_txn().unwrap();
        }

        #[test]
        fn a_changed_version_aborts_and_an_abort_decision_releases_without_writing() {
            let mut kv = Kv::default();
            kv.apply(&put(1, 1, 1, "a", "0"), true);
            let ops = vec![
                op("b", 11, None, TxnAction::Write(b("2"))),
                op("a", 12, Some(Expect::Version(LogIndex::new(0, 9))), TxnAction::Read),
            ];
            kv.apply(&prepare(2, T, ops, false, 9), true);
            assert_eq!(vote(&kv, 7, 11), Some(Vote::Prepared));
            assert_eq!(vote(&kv, 7, 12), Some(Vote::Abort(AbortReason::Conflict)));
            let decide = LogOp::Decide { txn: T, decision: Decision::Abort, seqs: vec![11, 12] };
            kv.apply(&node_entry(3, decide), true);
            assert_eq!(kv.get(b"b"), (None, LogIndex::ZERO));
            assert!(!kv.is_locked(b"b"));
        }

        #[test]
        fn a_prepare_holding_every_object_decides_at_once() {
            let mut kv = Kv::default();
            let ops = vec![
                op("a", 11, None, TxnAction::Write(b("1"))),
                op("b", 12, None, TxnAction::Delete),
            ];
            kv.apply(&prepare(1, T, ops.clone(), true, 9), true);
            assert_eq!(kv.get(b"a"), (Some(b("1")), LogIndex::new(1, 1)));
            assert_eq!(kv.get(b"b"), (None, LogIndex::new(1, 1)), "a tombstone at the prepare");
            assert!(!kv.is_locked(b"a"));
            assert_eq!(vote(&kv, 7, 12), Some(Vote::Prepared), "R-D17: the records say Prepared");
            // Its retry, appended again, changes nothing.
            kv.apply(&put(2, 1, 1, "a", "z"), true);
            kv.apply(&prepare(3, T, ops, true, 9), true);
            assert_eq!(kv.get(b"a").0, Some(b("z")));
        }

        #[test]
        fn a_prepare_holding_every_object_that_votes_abort_releases_its_locks_at_once() {
            let mut kv = Kv::default();
            kv.apply(&put(1, 1, 1, "b", "0"), true);
            // `a` votes Prepared (and locks), then `b` conflicts: its version moved on.
            let ops = vec![
                op("a", 11, None, TxnAction::Write(b("1"))),
                op("b", 12, Some(Expect::Absent), TxnAction::Write(b("2"))),
            ];
            kv.apply(&prepare(2, T, ops, true, 9), true);
            assert_eq!(vote(&kv, 7, 11), Some(Vote::Prepared));
            assert_eq!(vote(&kv, 7, 12), Some(Vote::Abort(AbortReason::Conflict)));
            assert!(!kv.is_locked(b"a"), "no decision round holds the lock");
            assert_eq!(kv.get(b"a"), (None, LogIndex::ZERO), "and nothing was written");
            let decided: Vec<_> = kv
                .take_txn_events()
                .into_iter()
                .filter_map(|e| match e {
                    TxnEvent::Decided { seq, decision, .. } => Some((seq, decision)),
                    TxnEvent::Voted { .. } => None,
                })
                .collect();
            assert_eq!(decided, [(11, Decision::Abort)]);
        }

        #[test]
        fn an_abort_request_first_makes_the_late_prepare_abort() {
            let mut kv = Kv::default();
            let ra = LogOp::RequestAbort { txn: T, seqs: vec![11, 12] };
            kv.apply(&node_entry(1, ra), true);
            let recovered = Some(Vote::Abort(AbortReason::Recovered));
            assert_eq!((vote(&kv, 7, 11), vote(&kv, 7, 12)), (recovered, recovered));
            // The paused client's prepare arrives: its records stand, nothing is locked.
            let ops = vec![op("a", 11, None, TxnAction::Write(b("1")))];
            kv.apply(&prepare(2, T, ops, false, 9), true);
            assert_eq!(vote(&kv, 7, 11), recovered);
            assert!(!kv.is_locked(b"a"));
            // And the other way round: a prepared vote stands against a later abort request.
            let t2 = TxnId { client_id: 7, base: 20 };
            kv.apply(&prepare(3, t2, vec![op("c", 21, None, TxnAction::Read)], false, 19), true);
            kv.apply(&node_entry(4, LogOp::RequestAbort { txn: t2, seqs: vec![21] }), true);
            assert_eq!(vote(&kv, 7, 21), Some(Vote::Prepared));
        }

        #[test]
        fn locks_protect_their_records_from_early_acks_and_lease_expiry_and_travel_with_a_move() {
            let mut kv = Kv::default();
            kv.apply(&prepare(1, T, vec![op("a", 11, None, TxnAction::Delete)], false, 9), true);
            // A client acknowledging past its locked prepare (a bug, or hostile) and an expiry.
            kv.apply(&LogEntry { ack: 39, ..put(2, 7, 40, "z", "1") }, true);
            kv.apply(&node_entry(3, LogOp::Expire(vec![7])), true);
            assert_eq!(vote(&kv, 7, 11), Some(Vote::Prepared));
            assert!(!kv.is_expired(7), "R-D14: a lock holder is not collected");
            kv.check_txn().unwrap();
            let back = Kv::from_snapshot(Some(&kv.to_snapshot()));
            assert!(back.is_locked(b"a"));
            back.check_txn().unwrap();
            let rec = DecisionRecordFor::commit();
            kv.apply(&node_entry(4, LogOp::Decided(Box::new(rec.clone()))), true);
            assert!(kv.participant().protects(9), "a coordinator's client stays protected");
            let back = Kv::from_snapshot(Some(&kv.to_snapshot()));
            assert_eq!(
                back.participant().decisions().cloned().collect::<Vec<_>>(),
                vec![rec.clone()]
            );
            kv.apply(&node_entry(5, LogOp::Resolved(rec.txn)), true);
            assert!(!kv.participant().protects(9));
            let mut buf = bytes::BytesMut::new();
            strata_wire::Encode::encode(&kv.to_snapshot(), &mut buf);
            assert_eq!(kv.snapshot_encoded_len(), buf.len());
        }

        mod kairos {
            use super::*;
            use strata_wire::txn::{KairosPrepare, Timestamp};

            fn ts(nanos: u64, node: u32) -> Timestamp {
                Timestamp::new(nanos, node)
            }

            /// A Kairos prepare of `txn` at `counter`: `ops` as `(key, seq, vts read, action)`.
            fn kprepare(
                counter: u32,
                txn: TxnId,
                commit_ts: Timestamp,
                ops: Vec<(&'static str, u64, Option<Timestamp>, TxnAction)>,
                whole: bool,
            ) -> LogEntry {
                kprepare_as(KairosRole::Full, counter, txn, commit_ts, ops, whole)
            }

            /// [`kprepare`] in a sharded table's `role` (validator or data shard).
            fn kprepare_as(
                role: KairosRole,
                counter: u32,
                txn: TxnId,
                commit_ts: Timestamp,
                ops: Vec<(&'static str, u64, Option<Timestamp>, TxnAction)>,
                whole: bool,
            ) -> LogEntry {
                let read_vts: Vec<Option<Timestamp>> = ops.iter().map(|o| o.2).collect();
                let read_only = ops.iter().all(|o| o.3 == TxnAction::Read);
                let ops = ops.into_iter().map(|(k, seq, _, a)| op(k, seq, None, a)).collect();
                let mut e = prepare(counter, txn, ops, whole, txn.base);
                let LogOp::Prepare(p) = &mut e.op else { unreachable!() };
                p.kairos = Some(KairosPrepare {
                    commit_ts,
                    freshness: read_vts.iter().flatten().min().copied(),
                    read_only,
                    read_vts,
                    role,
                    ts_gc: Timestamp::ZERO,
                });
                e
            }

            fn decide(counter: u32, txn: TxnId, decision: Decision, seqs: Vec<u64>) -> LogEntry {
                node_entry(counter, LogOp::Decide { txn, decision, seqs })
            }

            const T1: TxnId = TxnId { client_id: 7, base: 10 };
            const T2: TxnId = TxnId { client_id: 8, base: 20 };
            const T3: TxnId = TxnId { client_id: 9, base: 30 };

            /// T1 writes `a` (and `b`) at `(100, 7)`, decided Commit: `a`'s vts is T1's
            /// timestamp.
            fn committed_a() -> Kv {
                let mut kv = Kv::default();
                let w = TxnAction::Write(b("1"));
                let e = kprepare(
                    1,
                    T1,
                    ts(100, 7),
                    vec![("a", 11, Some(Timestamp::ZERO), w.clone()), ("b", 12, None, w)],
                    false,
                );
                assert_eq!(kv.apply(&e, true), Applied::Txn);
                assert_eq!(
                    (vote(&kv, 7, 11), vote(&kv, 7, 12)),
                    (Some(Vote::Prepared), Some(Vote::Prepared))
                );
                assert!(kv.is_locked(b"a") && kv.is_locked(b"b"), "prepared writes hold locks");
                assert!(!kv.blocks_reads(b"a"), "kairos §5.3: a Get never waits");
                assert_eq!(kv.vts(b"a"), Timestamp::ZERO, "not installed before the decision");
                kv.check_txn().unwrap();
                kv.validator().check_invariants();
                kv.apply(&decide(2, T1, Decision::Commit, vec![11, 12]), true);
                kv
            }

            /// kairos.md §5.10: `W` is the mean gap between the commit timestamps installed
            /// (none after one write), from applied decisions only; an aborted write adds no
            /// gap; a delete drops the key's statistics; a snapshot does not carry them.
            #[test]
            fn write_statistics_follow_the_commit_timestamps_decisions_install() {
                let mut kv = committed_a(); // a at 100
                assert_eq!(kv.w_mean_ns(b"a"), None, "one write: no gap yet");
                let w = |v: &'static str| TxnAction::Write(b(v));
                let write_a = |kv: &mut Kv, n: u32, txn: TxnId, at: u64, read: Timestamp, d| {
                    let seq = txn.base + 1;
                    let e = kprepare(
                        n,
                        txn,
                        ts(at, txn.client_id as u32),
                        vec![("a", seq, Some(read), w("x"))],
                        false,
                    );
                    kv.apply(&e, true);
                    kv.apply(&decide(n + 1, txn, d, vec![seq]), true);
                };
                write_a(&mut kv, 3, T2, 300, ts(100, 7), Decision::Commit); // gap 200
                assert_eq!(kv.w_mean_ns(b"a"), Some(200));
                write_a(&mut kv, 5, T3, 350, ts(300, 8), Decision::Abort); // no gap
                assert_eq!(kv.w_mean_ns(b"a"), Some(200));
                const T4: TxnId = TxnId { client_id: 10, base: 40 };
                write_a(&mut kv, 7, T4, 700, ts(300, 8), Decision::Commit); // gap 400
                assert_eq!(kv.w_mean_ns(b"a"), Some(300));
                assert_eq!(kv.w_mean_ns(b"b"), None, "b was written once");
                assert_eq!(Kv::from_snapshot(Some(&kv.to_snapshot())).w_mean_ns(b"a"), None);
                const T5: TxnId = TxnId { client_id: 11, base: 50 };
                let e = kprepare(
                    9,
                    T5,
                    ts(900, 11),
                    vec![("a", 51, Some(ts(700, 10)), TxnAction::Delete)],
                    false,
                );
                kv.apply(&e, true);
                kv.apply(&decide(10, T5, Decision::Commit, vec![51]), true);
                assert_eq!(kv.w_mean_ns(b"a"), None, "a deleted key keeps no statistics");
            }

            #[test]
            fn a_commit_vote_prepares_and_the_decision_installs_values_at_the_commit_timestamp() {
                let kv = committed_a();
                assert_eq!(kv.get(b"a").0, Some(b("1")));
                assert_eq!(kv.vts(b"a"), ts(100, 7));
                assert_eq!(kv.vts(b"b"), ts(100, 7));
                assert!(!kv.is_locked(b"a") && !kv.is_locked(b"b"));
                assert!(kv.validator().pending().is_empty());
                assert_eq!(kv.validator().key(b"a").latest_read, ts(100, 7));
                kv.check_txn().unwrap();
                kv.validator().check_invariants();
            }

            /// A sharded table's validator (kairos.md §4 `ValidateReq`, §5.6): Algorithm 3
            /// over the keys read and the "will write" flags; its locks carry no value, so a
            /// decision installs only `latest_committed`.
            #[test]
            fn a_validator_validates_and_its_decision_installs_only_the_timestamp() {
                let mut kv = Kv::default();
                let v = KairosRole::Validate;
                let (will_write, read) = (TxnAction::Delete, TxnAction::Read);
                let ops = vec![("a", 11, None, will_write.clone()), ("b", 12, None, read.clone())];
                kv.apply(&kprepare_as(v, 1, T1, ts(100, 7), ops, false), true);
                assert_eq!(vote(&kv, 7, 11), Some(Vote::Prepared));
                assert!(kv.is_locked(b"a") && !kv.is_locked(b"b"), "a will-write flag locks");
                kv.check_txn().unwrap();
                // A reader of the prepared key conflicts; a writer too.
                let r = vec![("a", 21, Some(Timestamp::ZERO), read.clone())];
                kv.apply(&kprepare_as(v, 2, T2, ts(200, 8), r, false), true);
                assert_eq!(vote(&kv, 8, 21), Some(Vote::Abort(AbortReason::PreparedConflict)));
                kv.apply(&decide(3, T1, Decision::Commit, vec![11, 12]), true);
                assert_eq!(kv.vts(b"a"), ts(100, 7), "the validator's latest_committed");
                assert_eq!(kv.get(b"a"), (None, LogIndex::ZERO), "no value, no item");
                assert!(!kv.is_locked(b"a"));
                // It validates: a read of the version before is stale now, of this one not.
                let stale = vec![("a", 31, Some(Timestamp::ZERO), read.clone())];
                kv.apply(&kprepare_as(v, 4, T3, ts(300, 9), stale, false), true);
                assert_eq!(vote(&kv, 9, 31), Some(Vote::Abort(AbortReason::Stale)));
                let t4 = TxnId { client_id: 10, base: 40 };
                let fresh = vec![("a", 41, Some(ts(100, 7)), will_write)];
                kv.apply(&kprepare_as(v, 5, t4, ts(400, 10), fresh, false), true);
                assert_eq!(vote(&kv, 10, 41), Some(Vote::Prepared));
                // Its state travels in snapshots like a server-side shard's.
                let back = Kv::from_snapshot(Some(&kv.to_snapshot()));
                assert_eq!(back.validator().key(b"a"), kv.validator().key(b"a"));
                back.check_txn().unwrap();
                kv.check_txn().unwrap();
                kv.validator().check_invariants();
            }

            /// A sharded table's data shard (kairos.md §4 `ReplicateReq`, §5.5): it stores
            /// and locks the write set, votes `Prepared` unless a key is held, and the
            /// decision installs the values at the commit timestamp (§5.7).
            #[test]
            fn a_data_shard_replicates_writes_and_installs_them_at_the_commit_timestamp() {
                let mut kv = Kv::default();
                let r = KairosRole::Replicate;
                let w = |v| vec![("a", 0, None, TxnAction::Write(b(v)))];
                let with_seq = |mut ops: Vec<(&'static str, u64, Option<Timestamp>, TxnAction)>,
                                seq| {
                    ops[0].1 = seq;
                    ops
                };
                kv.apply(&kprepare_as(r, 1, T1, ts(100, 7), with_seq(w("1"), 11), false), true);
                assert_eq!(vote(&kv, 7, 11), Some(Vote::Prepared));
                assert!(kv.is_locked(b"a") && !kv.blocks_reads(b"a"), "§5.3: reads never wait");
                // Held by T1: another writer votes PreparedConflict (locked by another txn).
                kv.apply(&kprepare_as(r, 2, T2, ts(200, 8), with_seq(w("2"), 21), false), true);
                assert_eq!(vote(&kv, 8, 21), Some(Vote::Abort(AbortReason::PreparedConflict)));
                kv.apply(&decide(3, T1, Decision::Commit, vec![11]), true);
                assert_eq!((kv.get(b"a").0, kv.vts(b"a")), (Some(b("1")), ts(100, 7)));
                // A write below the installed version would move it back: refused (the
                // validators never let one through, a hostile client could).
                kv.apply(&kprepare_as(r, 4, T3, ts(50, 9), with_seq(w("3"), 31), false), true);
                assert_eq!(vote(&kv, 9, 31), Some(Vote::Abort(AbortReason::WriteWriteConflict)));
                // A data shard validates no read: a prepare carrying one is refused.
                let t4 = TxnId { client_id: 10, base: 40 };
                let read = vec![("a", 41, Some(ts(100, 7)), TxnAction::Write(b("4")))];
                kv.apply(&kprepare_as(r, 5, t4, ts(400, 10), read, false), true);
                assert_eq!(vote(&kv, 10, 41), Some(Vote::Abort(AbortReason::Refused)));
                let t5 = TxnId { client_id: 11, base: 50 };
                let read_op = vec![("a", 51, None, TxnAction::Read)];
                kv.apply(&kprepare_as(r, 6, t5, ts(500, 11), read_op, false), true);
                assert_eq!(vote(&kv, 11, 51), Some(Vote::Abort(AbortReason::Refused)));
                assert_eq!((kv.get(b"a").0, kv.vts(b"a")), (Some(b("1")), ts(100, 7)));
                assert!(!kv.is_locked(b"a"));
                kv.check_txn().unwrap();
                kv.validator().check_invariants();
            }

            #[test]
            fn a_read_of_a_superseded_version_votes_stale_and_changes_nothing() {
                let mut kv = committed_a();
                let w = TxnAction::Write(b("2"));
                let e =
                    kprepare(3, T2, ts(200, 8), vec![("a", 21, Some(Timestamp::ZERO), w)], false);
                kv.apply(&e, true);
                assert_eq!(vote(&kv, 8, 21), Some(Vote::Abort(AbortReason::Stale)));
                assert!(!kv.is_locked(b"a"));
                assert!(kv.validator().pending().is_empty(), "an abort vote is forgotten");
                assert_eq!(kv.validator().key(b"a").latest_read, ts(100, 7), "unchanged");
            }

            #[test]
            fn a_prepared_write_makes_readers_and_writers_vote_prepared_conflict() {
                let mut kv = committed_a();
                let w = TxnAction::Write(b("2"));
                kv.apply(
                    &kprepare(3, T2, ts(200, 8), vec![("a", 21, Some(ts(100, 7)), w)], false),
                    true,
                );
                assert_eq!(vote(&kv, 8, 21), Some(Vote::Prepared));
                let read = kprepare(
                    4,
                    T3,
                    ts(300, 9),
                    vec![("a", 31, Some(ts(100, 7)), TxnAction::Read)],
                    false,
                );
                kv.apply(&read, true);
                assert_eq!(vote(&kv, 9, 31), Some(Vote::Abort(AbortReason::PreparedConflict)));
                let t4 = TxnId { client_id: 10, base: 40 };
                kv.apply(
                    &kprepare(5, t4, ts(400, 10), vec![("a", 41, None, TxnAction::Delete)], false),
                    true,
                );
                assert_eq!(vote(&kv, 10, 41), Some(Vote::Abort(AbortReason::PreparedConflict)));
                // The abort decision releases the write, installing nothing.
                kv.apply(&decide(6, T2, Decision::Abort, vec![21]), true);
                assert_eq!((kv.get(b"a").0, kv.vts(b"a")), (Some(b("1")), ts(100, 7)));
                assert!(!kv.is_locked(b"a"));
                kv.check_txn().unwrap();
                kv.validator().check_invariants();
            }

            #[test]
            fn a_commit_timestamp_not_above_a_version_read_votes_timestamp_order() {
                let mut kv = committed_a();
                let w = TxnAction::Write(b("2"));
                kv.apply(
                    &kprepare(3, T2, ts(50, 8), vec![("a", 21, Some(ts(100, 7)), w)], false),
                    true,
                );
                assert_eq!(vote(&kv, 8, 21), Some(Vote::Abort(AbortReason::TimestampOrder)));
            }

            #[test]
            fn a_read_only_validation_raises_latest_read_so_an_older_writer_aborts() {
                let mut kv = committed_a();
                let read = kprepare(
                    3,
                    T3,
                    ts(500, 9),
                    vec![("a", 31, Some(ts(100, 7)), TxnAction::Read)],
                    false,
                );
                kv.apply(&read, true);
                assert_eq!(vote(&kv, 9, 31), Some(Vote::Prepared));
                assert!(!kv.is_locked(b"a"), "reads take no lock");
                assert!(kv.validator().pending().is_empty(), "nothing waits for its decision");
                assert_eq!(kv.validator().key(b"a").latest_read, ts(500, 9));
                let blind = kprepare(
                    4,
                    T2,
                    ts(400, 8),
                    vec![("a", 21, None, TxnAction::Write(b("x")))],
                    false,
                );
                kv.apply(&blind, true);
                assert_eq!(vote(&kv, 8, 21), Some(Vote::Abort(AbortReason::ReadWriteConflict)));
            }

            #[test]
            fn a_duplicate_prepare_gets_the_same_vote_and_validates_nothing() {
                let mut kv = committed_a();
                let w = TxnAction::Write(b("2"));
                let e = kprepare(3, T2, ts(200, 8), vec![("a", 21, Some(ts(100, 7)), w)], false);
                kv.apply(&e, true);
                // Appended again (a retry across a leader change): the record stands; a
                // second validation would have voted PreparedConflict against itself.
                kv.apply(&LogEntry { index: LogIndex::new(1, 4), ..e }, true);
                assert_eq!(vote(&kv, 8, 21), Some(Vote::Prepared));
                kv.check_txn().unwrap();
                kv.validator().check_invariants();
                // An abort request after it finds the record too; the decision still applies.
                kv.apply(&node_entry(5, LogOp::RequestAbort { txn: T2, seqs: vec![21] }), true);
                assert_eq!(vote(&kv, 8, 21), Some(Vote::Prepared));
                kv.apply(&decide(6, T2, Decision::Commit, vec![21]), true);
                assert_eq!(kv.vts(b"a"), ts(200, 8));
                assert_eq!(kv.get(b"a").0, Some(b("2")));
            }

            #[test]
            fn an_abort_request_first_makes_the_late_prepare_validate_nothing() {
                let mut kv = Kv::default();
                kv.apply(&node_entry(1, LogOp::RequestAbort { txn: T2, seqs: vec![21] }), true);
                let w = TxnAction::Write(b("2"));
                kv.apply(&kprepare(2, T2, ts(200, 8), vec![("a", 21, None, w)], false), true);
                assert_eq!(vote(&kv, 8, 21), Some(Vote::Abort(AbortReason::Recovered)));
                assert!(!kv.is_locked(b"a") && !kv.validator().is_prepared(b"a"));
            }

            #[test]
            fn a_prepare_holding_every_object_decides_at_once_with_its_timestamp() {
                let mut kv = Kv::default();
                let w = TxnAction::Write(b("1"));
                kv.apply(&kprepare(1, T1, ts(100, 7), vec![("a", 11, None, w)], true), true);
                assert_eq!((kv.get(b"a").0, kv.vts(b"a")), (Some(b("1")), ts(100, 7)));
                assert!(!kv.is_locked(b"a"));
                assert!(kv.validator().pending().is_empty());
            }

            #[test]
            fn hostile_prepares_and_partial_decisions_never_lock_a_key_twice() {
                let mut kv = Kv::default();
                let w = TxnAction::Write(b("1"));
                // One object named twice: locked once.
                let twice = vec![("a", 11, None, w.clone()), ("a", 11, None, w.clone())];
                kv.apply(&kprepare(1, T1, ts(100, 7), twice, false), true);
                assert_eq!(vote(&kv, 7, 11), Some(Vote::Prepared));
                kv.check_txn().unwrap();
                // A decision naming only some objects: the validator is decided, the other
                // lock stays (for recovery); a writer of that key aborts instead of locking it
                // again.
                let two = vec![("b", 21, None, w.clone()), ("c", 22, None, w.clone())];
                kv.apply(&kprepare(2, T2, ts(200, 8), two, false), true);
                kv.apply(&decide(3, T2, Decision::Commit, vec![21]), true);
                assert!(kv.is_locked(b"c") && !kv.validator().is_prepared(b"c"));
                kv.apply(
                    &kprepare(4, T3, ts(300, 9), vec![("c", 31, None, w.clone())], false),
                    true,
                );
                assert_eq!(vote(&kv, 9, 31), Some(Vote::Abort(AbortReason::PreparedConflict)));
                // A second prepare of a transaction holding prepared writes here is refused.
                kv.apply(&kprepare(5, T1, ts(100, 7), vec![("d", 13, None, w)], false), true);
                assert_eq!(vote(&kv, 7, 13), Some(Vote::Abort(AbortReason::Refused)));
                assert!(!kv.is_locked(b"d"));
                kv.check_txn().unwrap();
                // Recovery's decision releases it later, writing the value.
                kv.apply(&decide(6, T2, Decision::Commit, vec![21, 22]), true);
                assert_eq!((kv.get(b"c").0, kv.vts(b"c")), (Some(b("1")), ts(200, 8)));
                assert!(!kv.is_locked(b"c"));
            }

            #[test]
            fn the_validator_state_and_versions_travel_in_snapshots() {
                let mut kv = committed_a();
                let w = TxnAction::Write(b("2"));
                kv.apply(
                    &kprepare(3, T2, ts(200, 8), vec![("a", 21, Some(ts(100, 7)), w)], false),
                    true,
                );
                let read = kprepare(
                    4,
                    T3,
                    ts(300, 9),
                    vec![("b", 31, Some(ts(100, 7)), TxnAction::Read)],
                    false,
                );
                kv.apply(&read, true);
                let snap = kv.to_snapshot();
                let mut buf = bytes::BytesMut::new();
                strata_wire::Encode::encode(&snap, &mut buf);
                assert_eq!(kv.snapshot_encoded_len(), buf.len());
                // Through an `Install` entry's encoding (tag 15) and back.
                let install = node_entry(5, LogOp::Install(Box::new(snap.clone())));
                let mut ebuf = bytes::BytesMut::new();
                strata_wire::Encode::encode(&install, &mut ebuf);
                let back_entry: LogEntry = strata_wire::Decode::decode(
                    &mut strata_wire::codec::Reader::new(ebuf.freeze()),
                )
                .unwrap();
                assert_eq!(back_entry, install);
                let mut back = Kv::from_snapshot(Some(&snap));
                assert_eq!(back.vts(b"a"), ts(100, 7));
                assert!(back.validator().is_prepared(b"a") && back.is_locked(b"a"));
                assert_eq!(back.validator().key(b"b").latest_read, ts(300, 9));
                back.validator().check_invariants();
                back.check_txn().unwrap();
                // The restored prepared write takes its decision as before the move.
                back.apply(&decide(6, T2, Decision::Commit, vec![21]), true);
                assert_eq!((back.get(b"a").0, back.vts(b"a")), (Some(b("2")), ts(200, 8)));
                assert!(!back.validator().is_prepared(b"a"));
            }

            /// `e` (a Kairos prepare) as the leader stamps it with its `ts_GC`.
            fn stamped(mut e: LogEntry, ts_gc: Timestamp) -> LogEntry {
                let LogOp::Prepare(p) = &mut e.op else { unreachable!() };
                p.kairos.as_mut().expect("a kairos prepare").ts_gc = ts_gc;
                e
            }

            /// kairos.md §5.9, Algorithm 3 step 1: a prepare whose freshness is below the
            /// `ts_GC` its leader stamped votes `TooOld` on every replica (each applies the
            /// same entries) and changes nothing; one at the stamp passes.
            #[test]
            fn a_prepare_older_than_the_stamped_ts_gc_votes_too_old_and_changes_nothing() {
                let replicas = [committed_a(), committed_a()];
                for mut kv in replicas {
                    let before = kv.validator().key(b"a");
                    let w = TxnAction::Write(b("2"));
                    // Read `a` at its current version (100, 7), but `ts_GC` is 150 now.
                    let old =
                        kprepare(3, T2, ts(200, 8), vec![("a", 21, Some(ts(100, 7)), w)], true);
                    assert_eq!(kv.apply(&stamped(old, ts(150, 0)), true), Applied::Txn);
                    assert_eq!(vote(&kv, 8, 21), Some(Vote::Abort(AbortReason::TooOld)));
                    assert_eq!(kv.kairos_ts_gc(), ts(150, 0));
                    assert_eq!(kv.validator().key(b"a"), before, "an abort vote changes no key");
                    assert!(!kv.is_locked(b"a") && kv.get(b"a").0 == Some(b("1")));
                    // A later prepare stamped lower (an older leader's) does not lower it, and
                    // its freshness is judged against 150 still.
                    let r = TxnAction::Read;
                    let ro =
                        kprepare(4, T3, ts(140, 9), vec![("a", 31, Some(ts(100, 7)), r)], true);
                    kv.apply(&stamped(ro, ts(120, 0)), true);
                    assert_eq!(vote(&kv, 9, 31), Some(Vote::Abort(AbortReason::TooOld)));
                    assert_eq!(kv.kairos_ts_gc(), ts(150, 0), "monotone");
                    kv.validator().check_invariants();
                    kv.check_txn().unwrap();
                }
                // Freshness at the stamp passes (the check is `freshness < ts_GC`).
                let mut kv = committed_a();
                let mut fresh = kprepare(
                    3,
                    T2,
                    ts(200, 8),
                    vec![("a", 21, Some(ts(100, 7)), TxnAction::Read)],
                    true,
                );
                let LogOp::Prepare(p) = &mut fresh.op else { unreachable!() };
                p.kairos.as_mut().unwrap().freshness = Some(ts(150, 0));
                kv.apply(&stamped(fresh, ts(150, 0)), true);
                assert_eq!(vote(&kv, 8, 21), Some(Vote::Prepared));
            }

            /// The replicated `ts_GC` travels in snapshots and `Install` entries (tag 18), so a
            /// moved or restored shard keeps refusing what its old replicas refused.
            #[test]
            fn the_ts_gc_travels_in_snapshots() {
                let mut kv = committed_a();
                let r = TxnAction::Read;
                let e = kprepare(3, T2, ts(200, 8), vec![("b", 21, Some(ts(100, 7)), r)], true);
                kv.apply(&stamped(e, ts(90, 0)), true);
                assert_eq!(vote(&kv, 8, 21), Some(Vote::Prepared));
                let snap = kv.to_snapshot();
                assert_eq!(snap.kairos_ts_gc, ts(90, 0));
                let mut buf = bytes::BytesMut::new();
                strata_wire::Encode::encode(&snap, &mut buf);
                assert_eq!(kv.snapshot_encoded_len(), buf.len());
                let install = node_entry(4, LogOp::Install(Box::new(snap.clone())));
                let mut ebuf = bytes::BytesMut::new();
                strata_wire::Encode::encode(&install, &mut ebuf);
                let back_entry: LogEntry = strata_wire::Decode::decode(
                    &mut strata_wire::codec::Reader::new(ebuf.freeze()),
                )
                .unwrap();
                assert_eq!(back_entry, install);
                let mut back = Kv::from_snapshot(Some(&snap));
                assert_eq!(back.kairos_ts_gc(), ts(90, 0));
                // An unstamped prepare (ZERO) after the restore is still judged against 90.
                let old = kprepare(
                    5,
                    T3,
                    ts(300, 9),
                    vec![("a", 31, Some(ts(80, 0)), TxnAction::Read)],
                    true,
                );
                back.apply(&old, true);
                assert_eq!(vote(&back, 9, 31), Some(Vote::Abort(AbortReason::TooOld)));
            }
        }

        struct DecisionRecordFor;
        impl DecisionRecordFor {
            fn commit() -> strata_wire::txn::DecisionRecord {
                strata_wire::txn::DecisionRecord {
                    txn: TxnId { client_id: 9, base: 1 },
                    all: vec![TxnObject { table: "t".into(), key: b("q"), seq: 2 }],
                    decision: Decision::Commit,
                }
            }
        }
    }

    #[test]
    fn the_snapshot_size_is_counted_exactly_without_building_it() {
        use strata_wire::Encode;
        let mut kv = Kv::default();
        for (i, key) in ["a", "bb", "ccc"].iter().enumerate() {
            let i = i as u32 + 1;
            kv.apply(
                &LogEntry {
                    key: Bytes::from_static(key.as_bytes()),
                    client_id: u64::from(i),
                    seq: 1,
                    ..e(1, i)
                },
                true,
            );
        }
        kv.apply(&LogEntry { op: LogOp::Delete, ..e(1, 4) }, true);
        kv.apply(&LogEntry { op: LogOp::Add(1), seq: 2, ..e(1, 6) }, true);
        kv.apply(
            &LogEntry {
                op: LogOp::Expire(vec![9]),
                key: Bytes::new(),
                client_id: 0,
                seq: 0,
                ..e(1, 7)
            },
            true,
        );
        let mut buf = bytes::BytesMut::new();
        kv.to_snapshot().encode(&mut buf);
        assert_eq!(kv.snapshot_encoded_len(), buf.len());
    }

    #[test]
    fn an_expire_entry_collects_a_client_and_its_later_entries_change_nothing() {
        let put = |counter, client_id, seq, v: &'static str| LogEntry {
            op: LogOp::Put(Bytes::from_static(v.as_bytes())),
            client_id,
            seq,
            ..e(1, counter)
        };
        let mut kv = Kv::default();
        assert_eq!(kv.apply(&put(1, 1, 1, "a"), true), Applied::Executed);
        assert_eq!(kv.apply(&put(2, 2, 1, "b"), true), Applied::Executed);
        let expire = LogEntry {
            op: LogOp::Expire(vec![1]),
            client_id: 0,
            seq: 0,
            key: Bytes::new(),
            ..e(1, 3)
        };
        assert_eq!(kv.apply(&expire, true), Applied::NoOp);
        assert!(
            !kv.rifl().knows(1) && kv.is_expired(1),
            "client 1's records and watermark are gone"
        );
        assert!(kv.rifl().knows(2), "client 2 keeps its record");
        // A retry of client 1's write, appended after the expiry: no effect anywhere.
        assert_eq!(kv.apply(&put(4, 1, 1, "a"), true), Applied::Expired);
        assert_eq!(kv.get(b"k"), (Some(Bytes::from_static(b"b")), LogIndex::new(1, 2)));
        // Replicas recovering from a snapshot decide the same.
        let back = Kv::from_snapshot(Some(&kv.to_snapshot()));
        assert!(back.is_expired(1) && !back.rifl().knows(1));
    }

    #[test]
    fn a_second_entry_of_an_rpc_changes_nothing_and_an_acknowledged_one_is_stale() {
        let put = |epoch, counter, seq, ack, v: &'static str| LogEntry {
            op: LogOp::Put(Bytes::from_static(v.as_bytes())),
            seq,
            ack,
            ..e(epoch, counter)
        };
        let mut kv = Kv::default();
        assert_eq!(kv.apply(&put(1, 1, 1, 0, "a"), true), Applied::Executed);
        assert_eq!(kv.apply(&put(1, 2, 2, 0, "b"), true), Applied::Executed);
        // seq 1 again (appended again by a new leader): the first entry stays its record.
        assert_eq!(kv.apply(&put(2, 1, 1, 0, "a"), true), Applied::Duplicate);
        assert_eq!(kv.get(b"k"), (Some(Bytes::from_static(b"b")), LogIndex::new(1, 2)));
        let rpc = |seq| RpcId { client_id: 1, seq };
        assert_eq!(
            kv.rifl().peek(rpc(1)),
            Verdict::Completed(Completion::done(LogIndex::new(1, 1)))
        );
        // seq 3 acknowledges 1 and 2: their records go, the watermark stays.
        assert_eq!(kv.apply(&put(2, 2, 3, 2, "c"), true), Applied::Executed);
        assert_eq!(kv.rifl().peek(rpc(1)), Verdict::Stale);
        assert_eq!(kv.rifl().ack_of(1), 2);
        assert_eq!(kv.apply(&put(2, 3, 2, 0, "b"), true), Applied::Stale);
        assert_eq!(kv.get(b"k"), (Some(Bytes::from_static(b"c")), LogIndex::new(2, 2)));
        // Without the filter (the NoDedup canary) the duplicate executes.
        assert_eq!(kv.apply(&put(2, 4, 3, 2, "c"), false), Applied::Executed);
        // The snapshot carries the watermark and the live record.
        let back = Kv::from_snapshot(Some(&kv.to_snapshot()));
        assert_eq!(back.rifl().ack_of(1), 2);
        assert_eq!(
            back.rifl().peek(rpc(3)),
            Verdict::Completed(Completion::done(LogIndex::new(2, 2)))
        );
        assert_eq!(back.get(b"k"), kv.get(b"k"));
        kv.rifl().check_invariants().unwrap();
    }
}
