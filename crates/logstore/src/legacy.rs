//! Reading a replica directory an earlier version wrote: a WAL of its own (one record per log
//! entry, truncated physically) and a `hard-state` file. A node imports it into its
//! [`NodeStore`](crate::NodeStore) with `install_shard` at the replica's first start, then
//! removes the directory (`strata-node`'s `storage` module).

use bytes::Bytes;
use strata_log::{HardState, LogEntry, RecoveredState};
use strata_storage::{MetaStore, RecoveryReport, StorageBackend, Wal, WalConfig};
use strata_wire::decode_message;

use crate::record::decode_hard_state;
use crate::StoreError;

/// The log and hard state in a replica's own directory, and what reading it repaired.
pub fn read_replica_dir<B: StorageBackend + Clone>(
    backend: B,
) -> Result<(RecoveredState, RecoveryReport), StoreError> {
    let (_, recovered) = Wal::open(backend.clone(), WalConfig::default())?;
    if recovered.snapshot.is_some() {
        return Err(StoreError::SnapshotUnsupported);
    }
    let mut entries = Vec::with_capacity(recovered.records.len());
    for (i, rec) in recovered.records.into_iter().enumerate() {
        let e: LogEntry = decode_message(Bytes::from(rec)).map_err(|e| StoreError::Corrupt {
            what: "log record",
            detail: format!("record {}: {e}", recovered.first_record + i as u64),
        })?;
        entries.push(e);
    }
    let hard_state = match MetaStore::new(backend).load()? {
        Some(blob) => decode_hard_state(&blob)?,
        None => HardState::default(),
    };
    Ok((RecoveredState { hard_state, snapshot: None, entries }, recovered.report))
}
