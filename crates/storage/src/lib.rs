//! Strata's storage layer: a write-ahead log, snapshots and hard state behind a tiny backend
//! trait, and a disk that can crash on command.
//!
//! # Why
//!
//! ORCA (`specs/orca.md`) keeps three things on disk on every node (§3.1): the log, the hard
//! state `current_epoch` / `voted_for` (fsynced before the node acts on them), and optionally a
//! snapshot that lets the log's front go. Its whole point — consistency-aware durability — is
//! to choose *when* to pay for `fsync`, so this crate makes that cost explicit and cheap to
//! batch: [`Wal::append`] only buffers, [`Wal::flush`] persists everything buffered with one
//! write and one sync per segment (group commit, §5.4) and reports the persisted record
//! number. Because un-fsynced records never leave the process (§9.6), killing the process loses
//! exactly what a power failure would, and real-process crash tests are honest.
//!
//! # Pieces
//!
//! * [`StorageBackend`] / [`StorageFile`] ([`backend`]): a directory of named files with POSIX
//!   durability rules. Two implementations: [`OsBackend`] ([`os`]; `fdatasync`, directory
//!   `fsync`, an optional fsync-latency injector, §9.6) and [`SimBackend`] ([`sim`]; in memory,
//!   with crashes that drop or tear everything unsynced, seeded).
//! * [`Wal`] ([`wal`]): numbered opaque records in checksummed frames ([`record`]) in rotating
//!   segments ([`segment`]), truncation for a follower adopting a new leader's log (§5.10),
//!   snapshots ([`snapshot`]) and compaction, and recovery ([`recovery`]) that cuts a torn tail
//!   but refuses to start on corruption anywhere else ([`OpenError`]).
//! * [`MetaStore`] ([`meta`]): the hard-state blob, replaced durably and atomically.
//!
//! Everything is synchronous, single-threaded and `std`-only (plus `crc32c` and `thiserror`):
//! the caller — the node runtime or the simulator — decides where and when it runs, in the
//! sans-IO spirit of `DESIGN.md`.

pub mod backend;
mod error;
pub mod meta;
pub mod os;
mod pending;
pub mod record;
pub mod recovery;
pub mod segment;
pub mod sim;
pub mod snapshot;
pub mod wal;

#[cfg(test)]
mod crash_tests;

pub use backend::{StorageBackend, StorageFile};
pub use error::{
    AppendError, FlushError, MetaLoadError, MetaStoreError, OpenError, SnapshotError, TruncateError,
};
pub use meta::{MetaStore, MAX_META_BYTES};
pub use os::{OsBackend, OsFile};
pub use recovery::{Recovered, RecoveryReport, TornTail};
pub use sim::{SimBackend, SimFile, SimStats};
pub use snapshot::Snapshot;
pub use wal::{Wal, WalConfig};
