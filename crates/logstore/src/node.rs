//! [`NodeStore`]: every shard replica of a node in one write-ahead log.
//!
//! # Why one log per node
//!
//! A node hosts a replica of many shards, and each replica's `Sync` used to cost an
//! `fdatasync` of its own log; several logs syncing at once cost 2.6× as much per sync as one
//! (`cargo run --release -p strata-storage --example wal_sync -- --files 6`,
//! docs/benchmarks.md "WAL flushes"). With one log, a flush makes every replica's records
//! durable with one write and one sync: group commit across shards (ORCA §5.4 applied to the
//! node rather than the replica; docs/design.md, departures).
//!
//! # How
//!
//! Every WAL record names its replica ([`ShardTag`]) and is one of [`Record`]: an entry, a
//! truncation, the hard state, or a reset. Truncation is logical — a record saying which
//! entries are gone — because one replica cannot cut a log the others share; so is removal
//! (`Reset`). Recovery reads the whole log once and replays each replica's records in order
//! ([`NodeStore::open`]); a replica then takes its state with [`NodeStore::open_shard`].
//! Hard state lives in the log too: a flush that holds it makes it durable, in order with the
//! entries around it, and costs no file replacement.
//!
//! # Group commit
//!
//! [`NodeStore::stage`] buffers one replica's batch of `Persist` records and returns its
//! barrier (the highest `Sync`/`HardState` token), [`NodeStore::flush`] persists everything
//! staged, for every replica, with one write and one sync. A driver that stages whatever every
//! replica asked for since the last flush, flushes once, and then reports each barrier gets
//! group commit across the node. Staged appends never reach the OS before a flush (`Persist`,
//! ORCA §9.6); a flush may persist a replica's appends before that replica asked for a `Sync`,
//! which is only earlier durability than it asked for (it learns of it at its next barrier).

use std::collections::{BTreeMap, BTreeSet};

use bytes::{Bytes, BytesMut};
use strata_log::{LogIndex, Persist, RecoveredState};
use strata_storage::{RecoveryReport, StorageBackend, Wal, WalConfig};

use crate::record::{Record, ShardTag};
use crate::StoreError;

/// Bugs a simulator plants to show its checks of the store would catch them (every checker
/// has a canary, DESIGN.md). Never set in production.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreBug {
    /// Recovery ignores the `HardState` records: a restarted replica forgets its epoch and
    /// vote.
    ForgetHardState,
}

/// One node's log: every shard replica's entries and hard state (module docs).
pub struct NodeStore<B: StorageBackend + Clone> {
    backend: B,
    config: WalConfig,
    wal: Wal<B>,
    /// What the log held at open for replicas not opened since.
    recovered: States,
    /// Open replicas, each with a bound on its last entry's index (appends must exceed it).
    open: BTreeMap<ShardTag, LogIndex>,
    /// Replicas closed since the log was read: reopening one reads the log again.
    closed: BTreeSet<ShardTag>,
    scratch: BytesMut,
    planted: Option<StoreBug>,
}

impl<B: StorageBackend + Clone> NodeStore<B> {
    /// Opens (recovering) the node's log in `backend`'s directory and replays it per replica.
    pub fn open(backend: B, config: WalConfig) -> Result<(Self, RecoveryReport), StoreError> {
        Self::open_planted(backend, config, None)
    }

    /// [`open`](Self::open) with a planted bug (simulator canaries only).
    pub fn open_planted(
        backend: B,
        config: WalConfig,
        planted: Option<StoreBug>,
    ) -> Result<(Self, RecoveryReport), StoreError> {
        let (wal, recovered, report) = read(&backend, &config, planted)?;
        let store = NodeStore {
            backend,
            config,
            wal,
            recovered,
            open: BTreeMap::new(),
            closed: BTreeSet::new(),
            scratch: BytesMut::new(),
            planted,
        };
        Ok((store, report))
    }

    /// The replicas the log holds a state for that no one opened yet.
    pub fn unopened(&self) -> impl Iterator<Item = &ShardTag> {
        self.recovered.keys()
    }

    /// Starts taking `tag`'s records and returns what is durable of it: its log and hard
    /// state as of the last flush (empty for a replica the log never saw, or one removed).
    pub fn open_shard(&mut self, tag: &ShardTag) -> Result<RecoveredState, StoreError> {
        if self.closed.remove(tag) {
            // Its records kept arriving until it closed; the state read at open is stale.
            self.reread()?;
        }
        let state = self.recovered.remove(tag).unwrap_or_default();
        let last = state.entries.last().map_or(LogIndex::ZERO, |e| e.index);
        self.open.insert(tag.clone(), last);
        Ok(state)
    }

    /// Replaces whatever the log holds of `tag` with `state` (a moved-in shard's first entry,
    /// rifl.md §5.7 step 3; a log imported from an earlier version), durably, and opens it.
    pub fn install_shard(
        &mut self,
        tag: &ShardTag,
        state: RecoveredState,
    ) -> Result<RecoveredState, StoreError> {
        if state.snapshot.is_some() {
            return Err(StoreError::SnapshotUnsupported);
        }
        self.recovered.remove(tag);
        self.closed.remove(tag);
        self.append(tag, &Record::Reset)?;
        self.append(tag, &Record::HardState(state.hard_state))?;
        let last = state.entries.last().map_or(LogIndex::ZERO, |e| e.index);
        for e in &state.entries {
            self.append(tag, &Record::Entry(e.clone()))?;
        }
        self.flush()?;
        self.open.insert(tag.clone(), last);
        Ok(state)
    }

    /// Stops taking `tag`'s records. What was staged stays staged (a later flush may persist
    /// it: earlier durability, never a gap).
    pub fn close_shard(&mut self, tag: &ShardTag) {
        if self.open.remove(tag).is_some() {
            self.closed.insert(tag.clone());
        }
    }

    /// Forgets `tag` durably (a retired generation after a move): a `Reset`, flushed.
    pub fn remove_shard(&mut self, tag: &ShardTag) -> Result<(), StoreError> {
        self.open.remove(tag);
        self.closed.remove(tag);
        self.recovered.remove(tag);
        self.append(tag, &Record::Reset)?;
        self.flush()
    }

    /// Buffers one replica's batch, in token order, and returns its barrier: the highest
    /// `Sync`/`HardState` token, to be reported once a [`flush`](Self::flush) returns (module
    /// docs, group commit). `None` if the batch holds neither.
    pub fn stage(
        &mut self,
        tag: &ShardTag,
        batch: impl IntoIterator<Item = (u64, Persist)>,
    ) -> Result<Option<u64>, StoreError> {
        if !self.open.contains_key(tag) {
            return Err(StoreError::NotOpen(tag.to_string()));
        }
        let mut barrier = None;
        for (token, record) in batch {
            match record {
                Persist::Append(entries) => {
                    for e in entries {
                        let last = self.open.get_mut(tag).expect("checked open");
                        assert!(
                            *last < e.index,
                            "appends in index order: {} after {last}",
                            e.index
                        );
                        *last = e.index;
                        self.append(tag, &Record::Entry(e))?;
                    }
                }
                Persist::Truncate { after } => {
                    let last = self.open.get_mut(tag).expect("checked open");
                    if *last > after {
                        *last = after;
                        self.append(tag, &Record::Truncate(after))?;
                    }
                }
                Persist::HardState(h) => {
                    self.append(tag, &Record::HardState(h))?;
                    barrier = Some(token);
                }
                Persist::Sync => barrier = Some(token),
            }
        }
        Ok(barrier)
    }

    /// Makes everything staged durable, for every replica: one write and one sync.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        self.wal.flush()?;
        Ok(())
    }

    /// [`stage`](Self::stage), then [`flush`](Self::flush) if the batch holds a barrier.
    pub fn execute(
        &mut self,
        tag: &ShardTag,
        batch: impl IntoIterator<Item = (u64, Persist)>,
    ) -> Result<Option<u64>, StoreError> {
        let barrier = self.stage(tag, batch)?;
        if barrier.is_some() {
            self.flush()?;
        }
        Ok(barrier)
    }

    fn append(&mut self, tag: &ShardTag, record: &Record) -> Result<(), StoreError> {
        self.scratch.clear();
        record.encode(tag, &mut self.scratch);
        self.wal.append(&self.scratch)?;
        Ok(())
    }

    /// Flushes, then reads the log again from disk (the rare reopening of a closed replica).
    fn reread(&mut self) -> Result<(), StoreError> {
        self.flush()?;
        let (wal, mut recovered, _) = read(&self.backend, &self.config, self.planted)?;
        // Only closed replicas need the fresh state; the open ones own theirs.
        recovered.retain(|tag, _| !self.open.contains_key(tag));
        // The old handle wrote nothing since the flush; the new one continues the log.
        self.wal = wal;
        self.recovered = recovered;
        Ok(())
    }
}

/// Every replica's state, as replayed from the log.
type States = BTreeMap<ShardTag, RecoveredState>;

/// Opens the WAL and replays its records per replica (module docs).
fn read<B: StorageBackend + Clone>(
    backend: &B,
    config: &WalConfig,
    planted: Option<StoreBug>,
) -> Result<(Wal<B>, States, RecoveryReport), StoreError> {
    let (wal, recovered) = Wal::open(backend.clone(), config.clone())?;
    if recovered.snapshot.is_some() {
        return Err(StoreError::SnapshotUnsupported);
    }
    let mut states = States::new();
    for (i, bytes) in recovered.records.into_iter().enumerate() {
        let number = recovered.first_record + i as u64;
        let (tag, record) = Record::decode(Bytes::from(bytes), number)?;
        if record == Record::Reset {
            states.remove(&tag);
            continue;
        }
        let state = states.entry(tag).or_default();
        match record {
            Record::Entry(e) => {
                if let Some(last) = state.entries.last().filter(|last| last.index >= e.index) {
                    return Err(StoreError::Corrupt {
                        what: "node log",
                        detail: format!(
                            "record {number}: entry {} follows entry {}",
                            e.index, last.index
                        ),
                    });
                }
                state.entries.push(e);
            }
            Record::Truncate(after) => {
                let keep = state.entries.partition_point(|e| e.index <= after);
                state.entries.truncate(keep);
            }
            Record::HardState(_) if planted == Some(StoreBug::ForgetHardState) => {}
            Record::HardState(h) => state.hard_state = h,
            Record::Reset => unreachable!("handled above"),
        }
    }
    Ok((wal, states, recovered.report))
}
