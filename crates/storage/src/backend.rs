//! The storage backend: a flat directory of named files, and nothing more.
//!
//! Everything durable in Strata (log segments, snapshots, hard state) goes through this trait,
//! so the same [`Wal`](crate::Wal) runs on a real disk ([`OsBackend`](crate::OsBackend)) and
//! on a crashable in-memory disk ([`SimBackend`](crate::SimBackend)) whose crashes the tests
//! control. The trait is deliberately POSIX-shaped, including POSIX's durability rules, because
//! the code above it must be correct on a real disk:
//!
//! * bytes written to a file survive a crash only after [`StorageFile::sync`] (`fdatasync`);
//! * a [`create`](StorageBackend::create), [`rename`](StorageBackend::rename) or
//!   [`remove`](StorageBackend::remove) survives a crash only after
//!   [`sync_dir`](StorageBackend::sync_dir) (`fsync` on the directory);
//! * before that, either outcome may be what a crash leaves behind, and unsynced writes may be
//!   torn (only a prefix reaching the disk).

use std::io;

/// A directory of named files. Names are plain file names: non-empty, no `/`, not `.` or `..`.
pub trait StorageBackend {
    /// An open file of this backend.
    type File: StorageFile;

    /// Opens an existing file for reading and writing. A missing file is an
    /// [`io::ErrorKind::NotFound`] error.
    fn open(&self, name: &str) -> io::Result<Self::File>;

    /// Creates a new, empty file under `name`, replacing any file of that name. The new name is
    /// durable after [`sync_dir`](Self::sync_dir), its content after [`StorageFile::sync`].
    fn create(&self, name: &str) -> io::Result<Self::File>;

    /// The names of all files in the directory, in no particular order.
    fn list(&self) -> io::Result<Vec<String>>;

    /// Removes a file; durable after [`sync_dir`](Self::sync_dir).
    fn remove(&self, name: &str) -> io::Result<()>;

    /// Atomically renames `from` to `to`, replacing any file named `to`; durable after
    /// [`sync_dir`](Self::sync_dir). A crash leaves either the old or the new name, never both
    /// missing.
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;

    /// Makes every earlier `create`, `rename` and `remove` in this directory durable.
    fn sync_dir(&self) -> io::Result<()>;
}

/// An open file: positional reads and writes, length changes, and `fdatasync`.
pub trait StorageFile {
    /// The current length in bytes (including unsynced writes).
    fn len(&self) -> io::Result<u64>;

    /// Whether the file is empty.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Fills `buf` from `offset`; reading past the end is an [`io::ErrorKind::UnexpectedEof`]
    /// error.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;

    /// Writes all of `data` at `offset`, extending the file if needed (a gap reads as zeros).
    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()>;

    /// Truncates or zero-extends the file to `len` bytes.
    fn set_len(&mut self, len: u64) -> io::Result<()>;

    /// Makes every earlier write and length change of this file durable (`fdatasync`).
    fn sync(&mut self) -> io::Result<()>;

    /// Reads the whole file.
    fn read_all(&self) -> io::Result<Vec<u8>> {
        let len = usize::try_from(self.len()?)
            .map_err(|_| io::Error::new(io::ErrorKind::OutOfMemory, "file larger than memory"))?;
        let mut bytes = vec![0; len];
        self.read_at(0, &mut bytes)?;
        Ok(bytes)
    }
}

/// Durably and atomically replaces the file `name` with `bytes`: write a temporary file, sync
/// it, rename it over `name`, sync the directory. A crash at any point leaves either the old
/// content or the new one under `name` (and perhaps a stale `<name>.tmp`, which the next call
/// replaces).
pub(crate) fn replace_file_atomically<B: StorageBackend>(
    backend: &B,
    name: &str,
    bytes: &[u8],
) -> io::Result<()> {
    let temp = temp_name(name);
    let mut file = backend.create(&temp)?;
    file.write_at(0, bytes)?;
    file.sync()?;
    backend.rename(&temp, name)?;
    backend.sync_dir()
}

/// The temporary name [`replace_file_atomically`] writes before renaming.
pub(crate) fn temp_name(name: &str) -> String {
    format!("{name}.tmp")
}

/// Rejects names that are not plain file names, so no backend ever leaves its directory.
pub(crate) fn check_name(name: &str) -> io::Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a plain file name: {name:?}"),
        ));
    }
    Ok(())
}
