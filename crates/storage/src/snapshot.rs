//! Snapshot files: the state up to a record number, so the log before it can go (ORCA §3.1,
//! "allows log truncation at the front").
//!
//! A snapshot is one [frame](crate::record) in a file named after the last record it includes,
//! `snap-00000000000000000042.snap`; the frame's payload is that number (u64 LE) followed by the
//! caller's bytes, so a renamed file cannot pass for another snapshot. It is written by
//! an atomic replace (temporary file, sync, rename, directory sync), so a snapshot
//! file that exists under its final name is complete, and a damaged one is media corruption.

use std::io;

use crate::backend::{replace_file_atomically, StorageBackend, StorageFile};
use crate::record;
use crate::segment::parse_numbered_name;

const PREFIX: &str = "snap-";
const SUFFIX: &str = ".snap";

/// A snapshot: the caller's state after applying every record up to `last_included`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The last record the snapshot includes; the log continues at `last_included + 1`.
    pub last_included: u64,
    /// The caller's bytes.
    pub data: Vec<u8>,
}

/// The largest snapshot `data` that fits in a frame.
pub(crate) const MAX_SNAPSHOT_BYTES: usize = record::MAX_PAYLOAD_BYTES - 8;

/// The file name of the snapshot that includes records up to `last_included`.
pub(crate) fn snapshot_name(last_included: u64) -> String {
    format!("{PREFIX}{last_included:020}{SUFFIX}")
}

/// The `last_included` of the snapshot file called `name`, if `name` is a snapshot name.
pub(crate) fn parse_snapshot_name(name: &str) -> Option<u64> {
    parse_numbered_name(name, PREFIX, SUFFIX)
}

/// Durably writes the snapshot file (the caller has checked `data.len()`).
pub(crate) fn write_snapshot<B: StorageBackend>(
    backend: &B,
    last_included: u64,
    data: &[u8],
) -> io::Result<()> {
    let mut payload = Vec::with_capacity(8 + data.len());
    payload.extend_from_slice(&last_included.to_le_bytes());
    payload.extend_from_slice(data);
    replace_file_atomically(backend, &snapshot_name(last_included), &record::encode(&payload))
}

/// Reads the snapshot file for `last_included`: `Ok(None)` if it is damaged.
pub(crate) fn read_snapshot<B: StorageBackend>(
    backend: &B,
    last_included: u64,
) -> io::Result<Option<Snapshot>> {
    let bytes = backend.open(&snapshot_name(last_included))?.read_all()?;
    let Some(payload) = record::decode_exact(&bytes) else {
        return Ok(None);
    };
    let Some((number, data)) = payload.split_first_chunk::<8>() else {
        return Ok(None);
    };
    if u64::from_le_bytes(*number) != last_included {
        return Ok(None);
    }
    Ok(Some(Snapshot { last_included, data: data.to_vec() }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SimBackend;

    #[test]
    fn written_snapshot_reads_back() {
        let disk = SimBackend::new();
        write_snapshot(&disk, 42, b"state").unwrap();
        assert_eq!(disk.list().unwrap(), [snapshot_name(42)]);
        assert_eq!(parse_snapshot_name(&snapshot_name(42)), Some(42));
        let snapshot = read_snapshot(&disk, 42).unwrap().unwrap();
        assert_eq!(snapshot, Snapshot { last_included: 42, data: b"state".to_vec() });
    }

    #[test]
    fn a_renamed_snapshot_is_rejected() {
        let disk = SimBackend::new();
        write_snapshot(&disk, 42, b"state").unwrap();
        disk.rename(&snapshot_name(42), &snapshot_name(43)).unwrap();
        assert_eq!(read_snapshot(&disk, 43).unwrap(), None);
    }
}
