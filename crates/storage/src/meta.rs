//! [`MetaStore`]: a tiny blob replaced durably and atomically.
//!
//! ORCA §3.1 requires `current_epoch` to be fsynced before a node acts on it and `voted_for`
//! before the vote is sent; §4: adopting a larger epoch persists it first. The caller encodes
//! those fields into a few bytes and calls [`MetaStore::store`]; when it returns, the new value
//! survives any crash, and a crash during the call leaves the old value or the new one — never
//! a mix, never nothing. The file `hard-state` holds one checksummed [frame](crate::record),
//! replaced atomically (write `hard-state.tmp`, sync, rename, sync the
//! directory).

use std::io;

use crate::backend::{replace_file_atomically, StorageBackend, StorageFile};
use crate::error::{MetaLoadError, MetaStoreError};
use crate::record;

/// The file the blob lives in.
pub(crate) const META_NAME: &str = "hard-state";

/// The largest blob [`MetaStore::store`] accepts: hard state is a few dozen bytes, and a
/// larger blob is a caller bug this limit surfaces early.
pub const MAX_META_BYTES: usize = 64 * 1024;

/// Durable, atomically replaced hard state (ORCA §3.1: `current_epoch`, `voted_for`).
#[derive(Debug)]
pub struct MetaStore<B> {
    backend: B,
}

impl<B: StorageBackend> MetaStore<B> {
    /// A store in `backend`'s directory. Nothing is read until [`load`](Self::load).
    pub fn new(backend: B) -> Self {
        Self { backend }
    }

    /// The blob of the last completed [`store`](Self::store), or `None` if there never was one.
    pub fn load(&self) -> Result<Option<Vec<u8>>, MetaLoadError> {
        let file = match self.backend.open(META_NAME) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(MetaLoadError::Io(error)),
        };
        let bytes = file.read_all()?;
        let payload = record::decode_exact(&bytes).ok_or(MetaLoadError::Corrupt)?;
        Ok(Some(payload.to_vec()))
    }

    /// Durably replaces the blob. On `Ok` the new blob survives any crash; on `Err` either the
    /// old or the new one is stored, so the caller must not act on the new one.
    pub fn store(&mut self, blob: &[u8]) -> Result<(), MetaStoreError> {
        if blob.len() > MAX_META_BYTES {
            return Err(MetaStoreError::TooLarge { blob_bytes: blob.len() });
        }
        replace_file_atomically(&self.backend, META_NAME, &record::encode(blob))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SimBackend;

    #[test]
    fn load_returns_the_last_stored_blob_across_crashes() {
        let disk = SimBackend::new();
        let mut meta = MetaStore::new(disk.clone());
        assert_eq!(meta.load().unwrap(), None);
        meta.store(b"epoch 1").unwrap();
        meta.store(b"epoch 2, voted for 3").unwrap();
        disk.crash();
        assert_eq!(MetaStore::new(disk.clone()).load().unwrap().unwrap(), b"epoch 2, voted for 3");
    }

    #[test]
    fn a_crash_inside_store_leaves_the_old_blob_or_the_new_one() {
        let mut outcomes = [false, false];
        for ops in 0..8 {
            for seed in 0..20 {
                let disk = SimBackend::new();
                let mut meta = MetaStore::new(disk.clone());
                meta.store(b"old").unwrap();
                disk.fail_after(ops);
                let stored = meta.store(b"new").is_ok();
                disk.crash_torn(seed);
                let loaded = MetaStore::new(disk.clone()).load().unwrap().unwrap();
                assert!(loaded == b"old" || loaded == b"new", "ops {ops} seed {seed}");
                if stored {
                    assert_eq!(loaded, b"new", "a completed store is durable");
                }
                outcomes[usize::from(loaded == b"new")] = true;
            }
        }
        assert_eq!(outcomes, [true, true], "both outcomes occur");
    }

    #[test]
    fn oversized_blob_is_rejected() {
        let mut meta = MetaStore::new(SimBackend::new());
        let error = meta.store(&vec![0; MAX_META_BYTES + 1]).unwrap_err();
        assert!(matches!(error, MetaStoreError::TooLarge { .. }));
    }
}
