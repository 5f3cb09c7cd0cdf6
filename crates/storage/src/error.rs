//! One error enum per operation. Each variant says what the caller (or the operator) should do.

use std::io;

use thiserror::Error;

/// [`Wal::open`](crate::Wal::open) failed. Every variant except `Io` and `InvalidConfig` means
/// the directory holds damage that a crash cannot explain, so acknowledged records may be gone:
/// the WAL refuses to start rather than silently serve a shorter log.
#[derive(Debug, Error)]
pub enum OpenError {
    /// The configuration is unusable. Fix it; nothing on disk was touched.
    #[error("invalid WAL configuration: {0}")]
    InvalidConfig(&'static str),

    /// Listing, reading or repairing files failed. Check the disk (space, permissions, kernel
    /// log) and restart; recovery is idempotent.
    #[error("storage I/O failed while opening the log: {0}")]
    Io(#[from] io::Error),

    /// A record is damaged (bad checksum, or a number out of place) and a record of a later
    /// flush follows it, or it sits in a segment that is not the last one: media corruption,
    /// not a torn write. Do not delete the damaged file to
    /// get the node up — that silently drops acknowledged records. Move the directory aside and
    /// let the node rejoin empty, catching up from the other replicas (or restore a backup).
    #[error("corrupt record in {segment} at byte {offset}: data that was acknowledged is damaged")]
    CorruptRecord {
        /// The segment file.
        segment: String,
        /// Byte offset of the bad record in it.
        offset: u64,
    },

    /// Segment names are not contiguous: `segment` should have started at
    /// `expected_first_record` (a segment is missing or a foreign file was copied in). Same
    /// remedy as [`OpenError::CorruptRecord`]; if a segment file was moved away, put it back.
    #[error(
        "segment {segment} should start at record {expected_first_record}: records are missing"
    )]
    SegmentOutOfSequence {
        /// The segment file that does not follow its predecessor.
        segment: String,
        /// The record number its name should carry.
        expected_first_record: u64,
    },

    /// The first segment starts after the record following the snapshot, so the records in
    /// between are missing. Same remedy as [`OpenError::CorruptRecord`].
    #[error("the snapshot ends at record {snapshot_last_included} but the log starts at record {first_record}")]
    MissingRecordsAfterSnapshot {
        /// The newest snapshot's last included record (0 without a snapshot).
        snapshot_last_included: u64,
        /// The first record of the oldest segment.
        first_record: u64,
    },

    /// The newest snapshot file fails its checksum. Snapshots are renamed into place only once
    /// complete, so this is media corruption. Same remedy as [`OpenError::CorruptRecord`].
    #[error("snapshot file {name} is damaged")]
    CorruptSnapshot {
        /// The snapshot file.
        name: String,
    },
}

/// [`Wal::append`](crate::Wal::append) refused a record; nothing was buffered.
#[derive(Debug, Error)]
pub enum AppendError {
    /// The payload exceeds [`WalConfig::max_record_bytes`](crate::WalConfig::max_record_bytes).
    /// Reject the request that produced it (or split it); do not retry as is.
    #[error("record of {record_bytes} bytes exceeds the limit of {max_record_bytes}")]
    TooLarge {
        /// The payload's length.
        record_bytes: usize,
        /// The configured limit.
        max_record_bytes: usize,
    },

    /// An earlier disk operation failed, so the WAL no longer knows what is on disk. Drop the
    /// WAL and reopen it (in practice: restart the node); recovery decides from what is durable.
    #[error("the WAL is poisoned by an earlier I/O failure; reopen it")]
    Poisoned,
}

/// [`Wal::flush`](crate::Wal::flush) failed. Records it was writing may or may not be durable.
#[derive(Debug, Error)]
pub enum FlushError {
    /// A write or sync failed (after a failed fsync the kernel may have dropped the dirty
    /// pages, so retrying proves nothing). The WAL is now poisoned: restart the node and let
    /// recovery decide; never report the records as persisted.
    #[error("flushing the log failed: {0}")]
    Io(#[from] io::Error),

    /// An earlier disk operation failed. Reopen the WAL (restart the node).
    #[error("the WAL is poisoned by an earlier I/O failure; reopen it")]
    Poisoned,
}

/// [`Wal::truncate_after`](crate::Wal::truncate_after) failed.
#[derive(Debug, Error)]
pub enum TruncateError {
    /// The truncation point lies inside the snapshot, whose records were applied and cannot be
    /// taken back. A caller bug: a node never truncates below what it applied (ORCA §5.10).
    #[error("cannot truncate after record {record}: the snapshot includes records up to {snapshot_last_included}")]
    BelowSnapshot {
        /// The requested truncation point.
        record: u64,
        /// The snapshot's last included record.
        snapshot_last_included: u64,
    },

    /// Removing or shortening a segment failed. The WAL is now poisoned: restart the node;
    /// after recovery the log is a prefix of the log before the truncation, possibly longer
    /// than the truncation point, so truncate again.
    #[error("truncating the log failed: {0}")]
    Io(#[from] io::Error),

    /// An earlier disk operation failed. Reopen the WAL (restart the node).
    #[error("the WAL is poisoned by an earlier I/O failure; reopen it")]
    Poisoned,
}

/// [`Wal::install_snapshot`](crate::Wal::install_snapshot) failed.
#[derive(Debug, Error)]
pub enum SnapshotError {
    /// The snapshot does not go beyond the installed one (or includes no record at all).
    /// Discard it; the installed snapshot already covers it.
    #[error("snapshot up to record {last_included} is not newer than the installed one (up to {current_last_included})")]
    Stale {
        /// The offered snapshot's last included record.
        last_included: u64,
        /// The installed snapshot's (0 without one).
        current_last_included: u64,
    },

    /// The snapshot is larger than a frame can hold (4 GiB). Shrink the state or split it.
    #[error("snapshot of {data_bytes} bytes is too large")]
    TooLarge {
        /// The offered snapshot's length.
        data_bytes: usize,
    },

    /// Writing the snapshot or compacting the log failed. The WAL is now poisoned: restart the
    /// node; recovery finds either the old snapshot or the new one, with the log intact.
    #[error("installing the snapshot failed: {0}")]
    Io(#[from] io::Error),

    /// An earlier disk operation failed. Reopen the WAL (restart the node).
    #[error("the WAL is poisoned by an earlier I/O failure; reopen it")]
    Poisoned,
}

/// [`MetaStore::load`](crate::MetaStore::load) failed.
#[derive(Debug, Error)]
pub enum MetaLoadError {
    /// Reading the file failed. Check the disk and restart.
    #[error("reading the hard state failed: {0}")]
    Io(#[from] io::Error),

    /// The hard-state file fails its checksum. It is replaced atomically, so this is media
    /// corruption. The node must not guess its epoch or vote (it could vote twice in an
    /// epoch): move the directory aside and let the node rejoin empty.
    #[error("the hard-state file is damaged")]
    Corrupt,
}

/// [`MetaStore::store`](crate::MetaStore::store) failed: the old blob or the new one is stored,
/// so do not act on the new one.
#[derive(Debug, Error)]
pub enum MetaStoreError {
    /// The blob exceeds [`MAX_META_BYTES`](crate::MAX_META_BYTES): a caller bug.
    #[error("hard-state blob of {blob_bytes} bytes is too large")]
    TooLarge {
        /// The blob's length.
        blob_bytes: usize,
    },

    /// Writing, syncing or renaming failed. Retry, or restart the node.
    #[error("storing the hard state failed: {0}")]
    Io(#[from] io::Error),
}
