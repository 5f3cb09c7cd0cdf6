//! `strata-logstore`: the persistence adapter of a log-table shard replica.
//!
//! A [`strata_log::LogReplica`] asks for durability through `Persist` effects (`Append`,
//! `Truncate`, `HardState`, `Sync`, each with a token) and learns of it through
//! `on_persisted(upto)`. [`ShardStore`] executes those records over a [`Wal`] (log entries,
//! encoded with the wire codec, one WAL record per entry) and a [`MetaStore`] (the hard
//! state), and reads both back at restart as a [`RecoveredState`] for `LogReplica::recover`.
//!
//! # Why a crate of its own
//!
//! The node runtime (real disk, `OsBackend`, a disk thread) and the simulator (`SimBackend`,
//! crashes on command) must run the *same* adapter, or the simulator tests code that never
//! runs. It cannot live in `strata-log` (protocol cores stay free of storage), nor in
//! `strata-storage` (the storage layer knows nothing of the log engine's records), nor in
//! `strata-node` (which pulls in tokio, and the simulator must not). This crate is generic over
//! [`StorageBackend`] and does no IO of its own: everything goes through the backend, and
//! the caller decides on which thread it runs.
//!
//! # Mapping
//!
//! WAL records are numbered 1, 2, 3, … without gaps; ORCA indexes `(epoch, counter)` are not
//! (a new epoch restarts the counter, a truncation removes a suffix). The store keeps the
//! index of every record it holds (`indexes[r - 1 - base]` for record `r`), so
//! `Truncate { after }` becomes `Wal::truncate_after(last record with index <= after)`.
//!
//! # Group commit
//!
//! [`ShardStore::execute`] takes a whole batch of records — everything the core asked for
//! since the last flush — buffers the appends, applies truncations, and then, if the batch
//! holds any `Sync` or `HardState`, stores the hard state and flushes the WAL once (one write
//! and one `fdatasync`), returning the highest such token. A driver that keeps calling it with
//! whatever accumulated while the previous flush ran gets group commit for free.

use bytes::{Bytes, BytesMut};
use strata_log::{HardState, LogEntry, LogIndex, Persist, RecoveredState};
use strata_storage::{
    AppendError, FlushError, MetaLoadError, MetaStore, MetaStoreError, OpenError, RecoveryReport,
    StorageBackend, TruncateError, Wal, WalConfig,
};
use strata_wire::{decode_message, Encode, NodeId};
use thiserror::Error;

/// Why the store failed. Every variant is fatal for the shard replica: after a failed write or
/// sync the WAL is poisoned (`strata_storage::wal`), and the replica must be restarted so that
/// recovery decides from what is durable.
#[derive(Debug, Error)]
pub enum StoreError {
    #[error("cannot open the log: {0}")]
    Open(#[from] OpenError),
    #[error("cannot read the hard state: {0}")]
    MetaLoad(#[from] MetaLoadError),
    #[error("cannot store the hard state: {0}")]
    MetaStore(#[from] MetaStoreError),
    #[error("cannot append: {0}")]
    Append(#[from] AppendError),
    #[error("cannot flush: {0}")]
    Flush(#[from] FlushError),
    #[error("cannot truncate: {0}")]
    Truncate(#[from] TruncateError),
    /// A record on disk does not decode as a log entry, or the hard state is malformed.
    #[error("corrupt {what}: {detail}")]
    Corrupt { what: &'static str, detail: String },
    /// The WAL holds a snapshot; the log engine does not produce snapshots yet.
    #[error("the log directory holds a snapshot, which this version cannot load")]
    SnapshotUnsupported,
}

/// What [`ShardStore::open`] read back.
#[derive(Debug)]
pub struct Opened {
    /// For `LogReplica::recover`.
    pub state: RecoveredState,
    /// What WAL recovery repaired (a torn tail after a crash is normal; log it).
    pub report: RecoveryReport,
}

/// One shard replica's durable state: its log and its hard state (module docs).
pub struct ShardStore<B: StorageBackend> {
    wal: Wal<B>,
    meta: MetaStore<B>,
    /// The record number before `indexes[0]`.
    base: u64,
    /// The ORCA index of every record after `base`, buffered or on disk.
    indexes: Vec<LogIndex>,
    scratch: BytesMut,
}

impl<B: StorageBackend> ShardStore<B> {
    /// Opens (recovering) the log in `wal_backend` and the hard state in `meta_backend` (they
    /// may be the same directory: the file names do not collide).
    pub fn open(
        wal_backend: B,
        meta_backend: B,
        config: WalConfig,
    ) -> Result<(Self, Opened), StoreError> {
        let (wal, recovered) = Wal::open(wal_backend, config)?;
        if recovered.snapshot.is_some() {
            return Err(StoreError::SnapshotUnsupported);
        }
        let mut entries = Vec::with_capacity(recovered.records.len());
        for (i, rec) in recovered.records.into_iter().enumerate() {
            let e: LogEntry =
                decode_message(Bytes::from(rec)).map_err(|e| StoreError::Corrupt {
                    what: "log record",
                    detail: format!("record {}: {e}", recovered.first_record + i as u64),
                })?;
            entries.push(e);
        }
        let meta = MetaStore::new(meta_backend);
        let hard_state = match meta.load()? {
            Some(blob) => decode_hard_state(&blob)?,
            None => HardState::default(),
        };
        let store = ShardStore {
            wal,
            meta,
            base: recovered.first_record - 1,
            indexes: entries.iter().map(|e| e.index).collect(),
            scratch: BytesMut::new(),
        };
        let state = RecoveredState { hard_state, snapshot: None, entries };
        Ok((store, Opened { state, report: recovered.report }))
    }

    /// Writes a moved-in shard's first log entry into an empty store (rifl.md §5.7 step 3,
    /// `RecoveredState::moved_in`), fsynced. The caller gives it a fresh directory: the
    /// runtime removes the old one first, the simulator starts a new disk.
    pub fn install_moved_in(
        wal_backend: B,
        meta_backend: B,
        config: WalConfig,
        snapshot: strata_log::Snapshot,
    ) -> Result<(), StoreError> {
        let (mut store, opened) = ShardStore::open(wal_backend, meta_backend, config)?;
        assert!(
            opened.state.entries.is_empty(),
            "a moved-in shard is installed into an empty store"
        );
        let state = RecoveredState::moved_in(snapshot);
        let batch = vec![
            (1, Persist::HardState(state.hard_state)),
            (2, Persist::Append(state.entries)),
            (3, Persist::Sync),
        ];
        let done = store.execute(batch)?;
        assert_eq!(done, Some(3), "a batch ending in Sync is durable when execute returns");
        Ok(())
    }

    /// Executes a batch of records in token order (module docs, group commit). Returns the
    /// token to report with `on_persisted`: the highest `Sync`/`HardState` token of the batch,
    /// once everything up to it is durable; `None` if the batch holds neither (its appends stay
    /// buffered for the next flush, as `Persist` requires).
    pub fn execute(
        &mut self,
        batch: impl IntoIterator<Item = (u64, Persist)>,
    ) -> Result<Option<u64>, StoreError> {
        let mut barrier = None;
        let mut hard = None;
        for (token, record) in batch {
            match record {
                Persist::Append(entries) => {
                    for e in entries {
                        assert!(
                            self.indexes.last().is_none_or(|&l| l < e.index),
                            "appends in index order"
                        );
                        self.scratch.clear();
                        e.encode(&mut self.scratch);
                        let r = self.wal.append(&self.scratch)?;
                        self.indexes.push(e.index);
                        assert_eq!(
                            r,
                            self.base + self.indexes.len() as u64,
                            "record numbers follow the indexes"
                        );
                    }
                }
                Persist::Truncate { after } => {
                    let keep = self.indexes.partition_point(|&i| i <= after);
                    if keep < self.indexes.len() {
                        self.wal.truncate_after(self.base + keep as u64)?;
                        self.indexes.truncate(keep);
                    }
                }
                Persist::HardState(h) => {
                    hard = Some(h);
                    barrier = Some(token);
                }
                Persist::Sync => barrier = Some(token),
            }
        }
        if barrier.is_some() {
            // The hard state first: an epoch may run ahead of the log (recovery takes the
            // larger of the two), and a vote must be durable before the message it guards.
            if let Some(h) = hard {
                self.meta.store(&encode_hard_state(h))?;
            }
            self.wal.flush()?;
        }
        Ok(barrier)
    }

    /// The index of the last entry that survives a crash now.
    pub fn persisted_index(&self) -> LogIndex {
        let n = self.wal.persisted_record().saturating_sub(self.base) as usize;
        n.checked_sub(1).map_or(LogIndex::ZERO, |i| self.indexes[i])
    }

    /// The index of the last entry held (buffered or durable).
    pub fn last_index(&self) -> LogIndex {
        self.indexes.last().copied().unwrap_or(LogIndex::ZERO)
    }
}

/// `epoch u32 LE`, then `voted_for` as `0` or `1` + node id `u32 LE`.
fn encode_hard_state(h: HardState) -> Vec<u8> {
    let mut v = h.epoch.to_le_bytes().to_vec();
    match h.voted_for {
        Some(n) => {
            v.push(1);
            v.extend_from_slice(&n.0.to_le_bytes());
        }
        None => v.push(0),
    }
    v
}

fn decode_hard_state(b: &[u8]) -> Result<HardState, StoreError> {
    let bad = || StoreError::Corrupt {
        what: "hard state",
        detail: format!("{} bytes: {b:02x?}", b.len()),
    };
    let epoch = u32::from_le_bytes(b.get(0..4).ok_or_else(bad)?.try_into().expect("4 bytes"));
    let voted_for = match (b.get(4), b.len()) {
        (Some(0), 5) => None,
        (Some(1), 9) => Some(NodeId(u32::from_le_bytes(b[5..9].try_into().expect("4 bytes")))),
        _ => return Err(bad()),
    };
    Ok(HardState { epoch, voted_for })
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_log::LogOp;
    use strata_storage::SimBackend;

    fn entry(epoch: u32, counter: u32, v: &str) -> LogEntry {
        LogEntry {
            index: LogIndex::new(epoch, counter),
            key: Bytes::from_static(b"k"),
            op: LogOp::Put(Bytes::copy_from_slice(v.as_bytes())),
            client_id: 1,
            seq: u64::from(counter),
            ack: 0,
            immediate: false,
        }
    }

    fn open(disk: &SimBackend) -> (ShardStore<SimBackend>, Opened) {
        ShardStore::open(disk.clone(), disk.clone(), WalConfig::default()).expect("open")
    }

    #[test]
    fn synced_entries_and_hard_state_survive_a_crash_and_unsynced_ones_do_not() {
        let disk = SimBackend::new();
        let (mut s, o) = open(&disk);
        assert_eq!(o.state, RecoveredState::default());
        let hs = HardState { epoch: 2, voted_for: Some(NodeId(1)) };
        assert_eq!(s.execute([(1, Persist::HardState(hs))]).unwrap(), Some(1));
        assert_eq!(
            s.execute([(2, Persist::Append(vec![entry(2, 1, "a"), entry(2, 2, "b")]))]).unwrap(),
            None
        );
        assert_eq!(s.persisted_index(), LogIndex::ZERO);
        assert_eq!(
            s.execute([(3, Persist::Sync), (4, Persist::Append(vec![entry(2, 3, "c")]))]).unwrap(),
            Some(3)
        );
        assert_eq!(s.persisted_index(), LogIndex::new(2, 3), "the whole batch is flushed");
        s.execute([(5, Persist::Append(vec![entry(2, 4, "lost")]))]).unwrap();
        assert_eq!(s.last_index(), LogIndex::new(2, 4));
        drop(s);
        disk.crash();
        let (_, o) = open(&disk);
        assert_eq!(o.state.hard_state, hs);
        let idx: Vec<_> = o.state.entries.iter().map(|e| e.index).collect();
        assert_eq!(idx, [LogIndex::new(2, 1), LogIndex::new(2, 2), LogIndex::new(2, 3)]);
        assert_eq!(o.state.entries[1], entry(2, 2, "b"));
    }

    #[test]
    fn truncation_maps_indexes_to_records_across_epochs_and_restarts() {
        let disk = SimBackend::new();
        let (mut s, _) = open(&disk);
        let es = vec![entry(1, 1, "a"), entry(1, 2, "b"), entry(1, 3, "c")];
        s.execute([(1, Persist::Append(es)), (2, Persist::Sync)]).unwrap();
        // A new leader's log diverges after (1,1): drop (1,2), (1,3) and continue in epoch 3.
        s.execute([
            (3, Persist::Truncate { after: LogIndex::new(1, 1) }),
            (4, Persist::Append(vec![entry(3, 1, "x")])),
            (5, Persist::Sync),
        ])
        .unwrap();
        drop(s);
        disk.crash();
        let (mut s, o) = open(&disk);
        let idx: Vec<_> = o.state.entries.iter().map(|e| e.index).collect();
        assert_eq!(idx, [LogIndex::new(1, 1), LogIndex::new(3, 1)]);
        // Truncating buffered entries after a restart maps onto the recovered numbering.
        s.execute([(1, Persist::Append(vec![entry(3, 2, "y"), entry(3, 3, "z")]))]).unwrap();
        s.execute([(2, Persist::Truncate { after: LogIndex::new(3, 2) }), (3, Persist::Sync)])
            .unwrap();
        drop(s);
        let (_, o) = open(&disk);
        let idx: Vec<_> = o.state.entries.iter().map(|e| e.index).collect();
        assert_eq!(idx, [LogIndex::new(1, 1), LogIndex::new(3, 1), LogIndex::new(3, 2)]);
    }

    #[test]
    fn hard_state_encoding_round_trips_and_rejects_garbage() {
        for h in [HardState::default(), HardState { epoch: 7, voted_for: Some(NodeId(4)) }] {
            assert_eq!(decode_hard_state(&encode_hard_state(h)).unwrap(), h);
        }
        assert!(decode_hard_state(&[1, 2]).is_err());
        assert!(decode_hard_state(&[1, 0, 0, 0, 2]).is_err());
    }
}
