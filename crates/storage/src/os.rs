//! [`OsBackend`]: the real disk, through `std::fs`.
//!
//! `sync` is `fdatasync` ([`File::sync_data`]) and `sync_dir` is `fsync` on the directory, so
//! the backend keeps exactly the promises of [`StorageBackend`]. Optionally every sync sleeps a
//! fixed time afterwards: ORCA §9.6's fsync-latency injector, which makes a tmpfs or a fast
//! NVMe disk behave like the SSD the paper measured, so that durability costs show up in
//! benchmarks.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::backend::{check_name, StorageBackend, StorageFile};

/// A directory on the local file system.
#[derive(Debug, Clone)]
pub struct OsBackend {
    dir: PathBuf,
    sync_delay: Duration,
}

impl OsBackend {
    /// Uses the directory `dir`, creating it (and its parents) if missing. A directory it
    /// creates is made durable (its parent is synced), so files synced into it later cannot
    /// vanish with it in a crash.
    pub fn open(dir: impl Into<PathBuf>) -> io::Result<Self> {
        let dir = dir.into();
        if !dir.is_dir() {
            fs::create_dir_all(&dir)?;
            if let Some(parent) = dir.parent().filter(|parent| !parent.as_os_str().is_empty()) {
                File::open(parent)?.sync_all()?;
            }
        }
        Ok(Self { dir, sync_delay: Duration::ZERO })
    }

    /// Sleeps `delay` after every file and directory sync (ORCA §9.6 fsync-latency injector).
    pub fn with_sync_delay(mut self, delay: Duration) -> Self {
        self.sync_delay = delay;
        self
    }

    /// The directory this backend stores its files in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, name: &str) -> io::Result<PathBuf> {
        check_name(name)?;
        Ok(self.dir.join(name))
    }
}

impl StorageBackend for OsBackend {
    type File = OsFile;

    fn open(&self, name: &str) -> io::Result<OsFile> {
        let file = OpenOptions::new().read(true).write(true).open(self.path(name)?)?;
        Ok(OsFile { file, sync_delay: self.sync_delay })
    }

    fn create(&self, name: &str) -> io::Result<OsFile> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(self.path(name)?)?;
        Ok(OsFile { file, sync_delay: self.sync_delay })
    }

    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            if !entry.file_type()?.is_file() {
                continue;
            }
            let name = entry.file_name().into_string().map_err(|name| {
                io::Error::new(io::ErrorKind::InvalidData, format!("non-UTF-8 file name {name:?}"))
            })?;
            names.push(name);
        }
        Ok(names)
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        fs::remove_file(self.path(name)?)
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        fs::rename(self.path(from)?, self.path(to)?)
    }

    fn sync_dir(&self) -> io::Result<()> {
        File::open(&self.dir)?.sync_all()?;
        sleep_after_sync(self.sync_delay);
        Ok(())
    }
}

/// An open file of an [`OsBackend`].
#[derive(Debug)]
pub struct OsFile {
    file: File,
    sync_delay: Duration,
}

impl StorageFile for OsFile {
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, offset)
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()?;
        sleep_after_sync(self.sync_delay);
        Ok(())
    }
}

fn sleep_after_sync(delay: Duration) {
    if !delay.is_zero() {
        std::thread::sleep(delay);
    }
}
