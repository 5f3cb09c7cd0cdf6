//! `strata-logstore`: the persistence adapter of a node's log-table shard replicas.
//!
//! A [`strata_log::LogReplica`] asks for durability through `Persist` effects (`Append`,
//! `Truncate`, `HardState`, `Sync`, each with a token) and learns of it through
//! `on_persisted(upto)`. [`NodeStore`] executes those records for every replica of a node
//! over one [`Wal`](strata_storage::Wal) — each WAL record tagged with its replica
//! ([`ShardTag`], [`Record`]) — and reads them back at restart as one
//! [`RecoveredState`](strata_log::RecoveredState) per replica for `LogReplica::recover`. One
//! flush makes every replica's records durable: group commit across shards ([`node`]).
//! [`legacy`] reads the per-replica directories of earlier versions, for import.
//!
//! # Why a crate of its own
//!
//! The node runtime (real disk, `OsBackend`, a disk thread) and the simulator (`SimBackend`,
//! crashes on command) must run the *same* adapter, or the simulator tests code that never
//! runs. It cannot live in `strata-log` (protocol cores stay free of storage), nor in
//! `strata-storage` (the storage layer knows nothing of the log engine's records), nor in
//! `strata-node` (which pulls in tokio, and the simulator must not). This crate is generic over
//! [`StorageBackend`](strata_storage::StorageBackend) and does no IO of its own: everything
//! goes through the backend, and the caller decides on which thread it runs.

pub mod legacy;
pub mod node;
pub mod record;

pub use node::{NodeStore, StoreBug};
pub use record::{Record, ShardTag};

use strata_storage::{AppendError, FlushError, MetaLoadError, OpenError};
use thiserror::Error;

/// Why the store failed. An IO failure is fatal for every replica of the node: after a failed
/// write or sync the WAL is poisoned (`strata_storage::wal`), and the node must be restarted
/// so that recovery decides from what is durable.
#[derive(Debug, Error)]
pub enum StoreError {
    #[error("cannot open the log: {0}")]
    Open(#[from] OpenError),
    #[error("cannot read the hard state: {0}")]
    MetaLoad(#[from] MetaLoadError),
    #[error("cannot append: {0}")]
    Append(#[from] AppendError),
    #[error("cannot flush: {0}")]
    Flush(#[from] FlushError),
    /// A record on disk does not decode, or contradicts the records before it.
    #[error("corrupt {what}: {detail}")]
    Corrupt { what: &'static str, detail: String },
    /// The WAL holds a snapshot; the log engine does not produce snapshots yet.
    #[error("the log directory holds a snapshot, which this version cannot load")]
    SnapshotUnsupported,
    /// Records for a replica that is not open (a caller bug; nothing was staged).
    #[error("{0} is not open")]
    NotOpen(String),
}

#[cfg(test)]
mod tests;
