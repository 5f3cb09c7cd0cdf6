//! The log engine: ORCA's leader-based replicated log with consistency-aware durability and
//! cross-client monotonic reads from an active set of leased followers
//! (`../shared/specs/orca.md`), as a deterministic sans-IO core, one [`LogReplica`] per shard
//! replica.
//!
//! * `election`: Raft-style elections over ZooKeeper-style `(epoch, counter)` indexes, vote
//!   rule 0 (lease protection) and rule (d), the new leader's NoOp and sync phase (§5.9);
//! * `replication`: the leader's send loop, the follower's consistency check and truncation,
//!   acks, commit and apply (§5.2, §5.3, §5.10);
//! * `durability`: persist tokens, background and on-demand flushes, DI (both definitions of
//!   §3.2) and MakeDurable rounds (§5.4, §5.5.3);
//! * `active_set`: membership, grants, the follower lease anchored at its own echoed timestamp,
//!   two-step mark-out and removal, slow-member revoke, re-add after catch-up (§5.7);
//! * `lease`: the leader lease from majority-acked heartbeat rounds and step-down (§5.8);
//! * `reads`, `writes`: the client paths (§5.1, §5.5.1, §5.5.2, §2.3); writes are RIFL's
//!   linearizable RPCs, exactly once (`writes` module docs, rifl.md §5.3);
//! * `foresight`, `reservations`: the leader's soft state for transactions' reads (what its
//!   pending entries will leave; the keys read for update);
//! * `replica`: state, dispatch of inputs, timers, the `Node` contract;
//! * `invariants`: the local state invariants of §7 behind `check_invariants`;
//! * `kairos_wm`: a Kairos table's watermark reports, `WM` and `ts_GC` at the leader
//!   (kairos.md §5.9), the `ts_GC` it stamps into prepares;
//! * `state`: the in-memory log and the applied key-value state (pure data);
//! * `core_tests` (tests only): one core driven by hand (votes, persist tokens, recovery).
//!   The cluster scenarios, the §7 fault-injection harness, the history checkers of §7 and
//!   the canaries run the same cores in `strata-sim` (`strata_sim::orca`).
//!
//! Why not raft-rs: ORCA's messages carry what raft-rs messages cannot — the durable index,
//! `flush_upto` and round ids, grants that echo the follower's own timestamp, separate
//! persisted and applied indexes in acks — and its vote rule 0 must ignore even a higher epoch
//! while a lease protects the current leader, which raft-rs's term handling does not allow.

mod active_set;
mod api;
mod config;
mod durability;
mod election;
mod foresight;
mod invariants;
pub mod kairos_wm;
mod lease;
mod participant;
mod reads;
mod replica;
mod replication;
mod reservations;
mod state;
mod txn;
mod writes;

pub use api::{
    ClientRecords, Completion, Expect, HardState, LogEvent, LogReply, LogRequest, LogStats,
    MarkOutReason, Persist, ReadError, ReadValue, RecoverError, RecoveredState, RevokeReason,
    Snapshot, StepDownReason, TxnAnswer, VoteRefusal, WriteAck, WriteError, WriteOp, WriteOutcome,
};
pub use config::{
    ConfigError, DurabilityMode, LogConfig, PlantedBug, ReadPolicy, Replication, TXN_READ_HOLD,
};
pub use replica::{LogEffects, LogReplica, Role};
pub use state::TxnEvent;
pub use strata_rifl::Verdict;
pub use strata_wire::log::{LogEntry, LogIndex, LogMessage, LogOp};
pub use strata_wire::rifl::{ClusterTime, LeaseInfo, Rifl, RpcId};
pub use writes::MAX_MOVE_BYTES;

#[cfg(test)]
mod core_tests;
