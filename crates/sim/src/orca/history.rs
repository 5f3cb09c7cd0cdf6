//! What an ORCA run records (orca.md §7 "Instrumentation"): every audit event of every core
//! stamped with the global simulated time, every client read with its invocation and
//! completion, and the facts about the whole cluster the driver observed at the instants some
//! invariants are about (a read being served, a member being added or removed, DI advancing,
//! a truncation). Checkers ([`super::check`]) judge it from outside after the run, against the
//! global log `H` reconstructed from the final leader's log after forcing full durability.

use bytes::Bytes;
use std::collections::{HashMap, HashSet};

use strata_log::{LogEntry, LogEvent, LogIndex, LogOp, ReadValue, RpcId, WriteOutcome};
use strata_wire::log::Evaluation;
use strata_wire::{Instant, NodeId};

use strata_log::{DurabilityMode, LogConfig, ReadPolicy};

/// Which §7 invariants a configuration promises, derived from its [`LogConfig`]. Invariant 1
/// (and 2, 10, 12) is checked in every mode: the weak baselines must be caught breaking it
/// (§7.15).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Promises {
    /// Reads at active-set members only (§7.3 second half, §7.4 - §7.8).
    pub active_set: bool,
    /// Reads are served only by a leader under lease or a leased member (§7.4 first half).
    pub leased_reads: bool,
    /// Read data is durable on a majority when served (§7.3): CAD and sync durability.
    pub durable_reads: bool,
    /// Every acknowledged write is durable (sync durability), so none is ever lost (§7.11).
    pub sync_writes: bool,
}

impl Promises {
    pub fn of(cfg: &LogConfig) -> Promises {
        Promises {
            active_set: cfg.reads == ReadPolicy::ActiveSet,
            leased_reads: cfg.reads != ReadPolicy::Any,
            durable_reads: cfg.reads != ReadPolicy::Any
                && matches!(cfg.durability, DurabilityMode::Cad(_) | DurabilityMode::Sync),
            sync_writes: cfg.durability == DurabilityMode::Sync,
        }
    }
}

/// One audit event of one core.
#[derive(Clone, Debug)]
pub struct Stamped {
    /// Global simulated time.
    pub at: Instant,
    pub node: NodeId,
    pub event: LogEvent,
}

/// A client read that was answered with a value (errors are retried and judge nothing).
#[derive(Clone, Debug)]
pub struct ReadRecord {
    pub client: u64,
    pub key: Bytes,
    /// The node the client asked (a follower may forward to the leader).
    pub asked: NodeId,
    pub min_index: Option<LogIndex>,
    pub invoked: Instant,
    pub completed: Instant,
    pub value: ReadValue,
}

/// One node's state when a read was served (§7.3).
#[derive(Clone, Debug)]
pub struct NodeAtServe {
    pub node: NodeId,
    pub up: bool,
    /// The entry at the read's update-index in the node's fsynced log, if any.
    pub disk_entry: Option<LogEntry>,
    pub applied: LogIndex,
}

/// A `ReadServed` event with what the driver saw at that instant (§7.3, §7.4, §7.13).
#[derive(Clone, Debug)]
pub struct ServeRecord {
    pub at: Instant,
    /// How many events were recorded before this (orders it among the events).
    pub pos: usize,
    pub served_by: NodeId,
    pub epoch: u32,
    pub key: Bytes,
    pub value: Option<Bytes>,
    pub u: LogIndex,
    pub min_index: Option<LogIndex>,
    /// The server's applied index when it answered.
    pub applied: LogIndex,
    pub server_was_leader: bool,
    /// Follower: `is_serving` (member with an unexpired lease); leader: ready and under lease.
    pub server_valid: bool,
    pub nodes: Vec<NodeAtServe>,
}

/// A member removed from the active set (§7.5).
#[derive(Clone, Debug)]
pub struct RemovalRecord {
    pub at: Instant,
    /// How many events were recorded before this (orders it among the events).
    pub pos: usize,
    pub leader: NodeId,
    pub epoch: u32,
    pub node: NodeId,
    /// Whether the removed follower was still serving at that instant.
    pub still_serving: bool,
}

/// A member added to the active set (§7.6): the fields of `AsAdded` plus the node's disk.
#[derive(Clone, Debug)]
pub struct AdditionRecord {
    pub at: Instant,
    /// How many events were recorded before this (orders it among the events).
    pub pos: usize,
    pub epoch: u32,
    pub node: NodeId,
    pub reported_persisted: LogIndex,
    pub reported_applied: LogIndex,
    pub di: LogIndex,
    /// The DI entry is in the added node's fsynced log (`true` for DI = ZERO).
    pub disk_has_di: bool,
}

/// The leader's DI advanced (§7.7): who held the DI entry on disk and who had applied it.
#[derive(Clone, Debug)]
pub struct DiRecord {
    pub at: Instant,
    /// How many events were recorded before this (orders it among the events).
    pub pos: usize,
    pub leader: NodeId,
    pub epoch: u32,
    pub di: LogIndex,
    /// Nodes whose fsynced log holds the DI entry.
    pub holders: Vec<NodeId>,
    /// The leader's active set at that instant (ORCA mode), with each member's applied index
    /// (`None` when the member is down: it replays its disk on restart).
    pub members: Vec<(NodeId, bool, Option<LogIndex>)>,
}

/// A follower's `DI_F` changed, or it started or stopped serving (§7.7).
#[derive(Clone, Debug)]
pub struct FollowerSample {
    pub at: Instant,
    /// How many events were recorded before this (orders it among the events).
    pub pos: usize,
    pub node: NodeId,
    pub epoch: u32,
    pub di_f: LogIndex,
    pub applied: LogIndex,
    pub serving: bool,
}

/// Entries a node removed from its log (§7.10).
#[derive(Clone, Debug)]
pub struct TruncationRecord {
    pub at: Instant,
    /// How many events were recorded before this (orders it among the events).
    pub pos: usize,
    pub node: NodeId,
    pub removed: Vec<LogIndex>,
}

/// A vote that left its voter (after its hard state was persisted): a `VoteResp` granting it,
/// or a candidate's `RequestVote` (its vote for itself). A vote decided but lost with a crash
/// before it was persisted never counted (§7.9).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VoteCast {
    pub at: Instant,
    pub pos: usize,
    pub voter: NodeId,
    pub candidate: NodeId,
    pub epoch: u32,
}

/// The driver saw a core panic, or a liveness requirement failed.
#[derive(Clone, Debug)]
pub struct Anomaly {
    pub at: Instant,
    pub node: Option<NodeId>,
    pub what: String,
}

/// A write's mutation took effect at `node` (`LogEvent::Executed`). `others`: the other
/// entries of the same RPC whose mutation is in effect in that node's applied state at that
/// instant (kept across truncations only for the retained prefix, reset by a crash: a restart
/// replays and reports again). Non-empty means the RPC executed twice there.
#[derive(Clone, Debug)]
pub struct ExecutionRecord {
    pub at: Instant,
    pub pos: usize,
    pub node: NodeId,
    pub index: LogIndex,
    pub rpc: RpcId,
    pub others: Vec<LogIndex>,
}

/// An `Ok` answer to a write: the index it names and whether the client got it (the
/// simulator may lose write replies so that clients retry the same RPC id).
#[derive(Clone, Debug)]
pub struct WriteOkRecord {
    pub at: Instant,
    pub rpc: RpcId,
    pub index: LogIndex,
    /// What the leader said the write returned (rifl.md §5.3 S5).
    pub outcome: WriteOutcome,
    pub delivered: bool,
}

/// Everything one run recorded.
#[derive(Clone, Debug, Default)]
pub struct OrcaHistory {
    pub n: usize,
    pub promises: Promises,
    pub events: Vec<Stamped>,
    pub reads: Vec<ReadRecord>,
    pub serves: Vec<ServeRecord>,
    pub removals: Vec<RemovalRecord>,
    pub additions: Vec<AdditionRecord>,
    pub dis: Vec<DiRecord>,
    pub followers: Vec<FollowerSample>,
    pub truncations: Vec<TruncationRecord>,
    pub votes: Vec<VoteCast>,
    /// The faults the run injected (crash, restart, isolate, cut, lag, stall, heal), for traces.
    pub faults: Vec<(Instant, String)>,
    pub anomalies: Vec<Anomaly>,
    /// Liveness (§7.14) failures of the final phase.
    pub liveness: Vec<Anomaly>,
    /// Every `Executed` event (RIFL's effect event, rifl.md §7 inv. 1), with what the node's
    /// applied state held at that instant.
    pub executions: Vec<ExecutionRecord>,
    /// Every `Ok` a leader sent for a write, delivered to the client or lost (rifl.md §7 inv. 2).
    pub write_oks: Vec<WriteOkRecord>,
    /// Each node's applied sequence at the end (`None`: down).
    pub final_applied: Vec<(NodeId, Option<Vec<LogIndex>>)>,
    /// The global log `H`: the final leader's log after forcing full durability (§1.2).
    pub h: Vec<LogEntry>,
    /// Who `H` came from (`None` when no leader emerged and the longest log was used).
    pub h_leader: Option<NodeId>,
}

impl OrcaHistory {
    pub fn majority(&self) -> usize {
        self.n / 2 + 1
    }

    /// `pos_H(u)`: the position of index `u` in `H`.
    pub fn pos(&self, u: LogIndex) -> Option<usize> {
        self.h.binary_search_by_key(&u, |e| e.index).ok()
    }

    /// Per position of `H`: whether the entry changes the state (rifl.md §5.3 as a model of
    /// the apply rule): a write that is not a second entry of an RPC id already in `H` and whose
    /// seq is above its client's watermark learned from the earlier entries. A duplicate (a
    /// retry appended again) is in `H` but is no version of its key.
    pub fn effective(&self) -> Vec<bool> {
        let mut acks: HashMap<u64, u64> = HashMap::new();
        let mut seen: HashSet<(u64, u64)> = HashSet::new();
        self.h
            .iter()
            .map(|e| {
                if e.op == LogOp::NoOp {
                    return false;
                }
                let ack = acks.entry(e.client_id).or_insert(0);
                let fresh = e.seq > *ack && seen.insert((e.client_id, e.seq));
                *ack = (*ack).max(e.ack);
                fresh
            })
            .collect()
    }

    /// The entry of `H` at index `u`.
    pub fn entry(&self, u: LogIndex) -> Option<&LogEntry> {
        self.pos(u).map(|p| &self.h[p])
    }

    /// Per position of `H`: what an effective key operation did when applied, evaluated
    /// against the state the earlier effective entries of `H` left (`LogOp::evaluate`, the
    /// replicas' own definition of conditions and counters); `None` for duplicates and the
    /// node's entries. A replica that executed a duplicate, or evaluated against another
    /// state, serves values this model does not produce.
    pub fn evaluations(&self) -> Vec<Option<Evaluation>> {
        let mut state: HashMap<&[u8], (Option<Bytes>, LogIndex)> = HashMap::new();
        self.h
            .iter()
            .zip(self.effective())
            .map(|(e, effective)| {
                if !effective {
                    return None;
                }
                let (value, version) = state.get(&e.key[..]).cloned().unwrap_or_default();
                let eval = e.op.evaluate(value.as_ref(), version)?;
                if let Some(w) = &eval.write {
                    state.insert(&e.key[..], (w.clone(), e.index));
                }
                Some(eval)
            })
            .collect()
    }
}
