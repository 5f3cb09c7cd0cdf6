//! [`SimBackend`]: an in-memory disk that can crash.
//!
//! Killing a process does not drop the OS page cache, so a real-process test cannot show what a
//! power failure leaves behind (ORCA §9.6). This disk can. It keeps, for every file and for the
//! directory, a *durable image* and the list of operations applied since the last sync (the
//! *live image* is the durable one with those operations applied):
//!
//! * a file's writes and length changes become durable at [`StorageFile::sync`];
//! * `create`, `rename` and `remove` become durable at [`StorageBackend::sync_dir`] — all
//!   together, a deliberately simple model of a directory;
//! * [`SimBackend::crash`] throws every unsynced operation away;
//! * [`SimBackend::crash_torn`] instead keeps, for each file and for the directory
//!   independently, a seeded random prefix of its unsynced operations, and may tear the first
//!   operation it does not keep if that is a write: either a prefix of its bytes reaches the
//!   disk, or — as on a real disk, which persists sectors and pages in no particular order —
//!   a random subset of its 16-byte sectors does; and half the time the file size reached the
//!   disk while the missing bytes did not, so they read as zeros. That covers the classic torn
//!   tail, a write persisted out of order, and a directory entry that reached the disk before
//!   the data it names;
//! * [`SimBackend::fail_after`] cuts the power after a number of mutating operations, so a test
//!   can crash *inside* a WAL operation, between two of its writes or syncs.
//!
//! Handles opened before a crash are stale afterwards and fail every operation. All randomness
//! comes from the seed passed to [`SimBackend::crash_torn`]; there is no global state, so a
//! failing case replays exactly.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::backend::{check_name, StorageBackend, StorageFile};

/// A crashable in-memory directory. Clones share the same disk, so a test keeps one clone to
/// crash it while the [`Wal`](crate::Wal) owns another.
#[derive(Debug, Clone, Default)]
pub struct SimBackend {
    disk: Arc<Mutex<Disk>>,
}

/// Counters of the operations a [`SimBackend`] has executed (for tests of group commit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimStats {
    /// `write_at` calls.
    pub writes: u64,
    /// `StorageFile::sync` calls.
    pub file_syncs: u64,
    /// `sync_dir` calls.
    pub dir_syncs: u64,
}

impl SimBackend {
    /// An empty disk.
    pub fn new() -> Self {
        Self::default()
    }

    /// Power failure: every unsynced operation is lost. Restores the power after
    /// [`fail_after`](Self::fail_after).
    pub fn crash(&self) {
        self.disk().crash(None);
    }

    /// Power failure that tears unsynced data: each file and the directory keep a random prefix
    /// of their unsynced operations, drawn from `seed`, the next write possibly cut short.
    pub fn crash_torn(&self, seed: u64) {
        self.disk().crash(Some(&mut SplitMix64(seed)));
    }

    /// Cuts the power after `ops` more mutating operations (write, set_len, sync, create,
    /// rename, remove, sync_dir): from then on every operation fails until the next crash.
    pub fn fail_after(&self, ops: u64) {
        self.disk().power = Power::OnFor(ops);
    }

    /// The live content of file `name`, including unsynced writes.
    pub fn live_contents(&self, name: &str) -> Option<Vec<u8>> {
        let disk = self.disk();
        let inode = disk.dir.live.get(name)?;
        Some(disk.files[inode].live.clone())
    }

    /// How many operations of each kind have run.
    pub fn stats(&self) -> SimStats {
        self.disk().stats
    }

    fn disk(&self) -> MutexGuard<'_, Disk> {
        self.disk.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl StorageBackend for SimBackend {
    type File = SimFile;

    fn open(&self, name: &str) -> io::Result<SimFile> {
        check_name(name)?;
        let disk = self.disk();
        disk.check_power()?;
        let inode = *disk.dir.live.get(name).ok_or_else(|| not_found(name))?;
        Ok(SimFile { disk: Arc::clone(&self.disk), inode, generation: disk.generation })
    }

    fn create(&self, name: &str) -> io::Result<SimFile> {
        check_name(name)?;
        let mut disk = self.disk();
        disk.spend_power()?;
        let inode = disk.next_inode;
        disk.next_inode += 1;
        disk.files.insert(inode, Journaled::default());
        disk.dir.apply(DirOp::Link(name.to_owned(), inode));
        Ok(SimFile { disk: Arc::clone(&self.disk), inode, generation: disk.generation })
    }

    fn list(&self) -> io::Result<Vec<String>> {
        let disk = self.disk();
        disk.check_power()?;
        Ok(disk.dir.live.keys().cloned().collect())
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        check_name(name)?;
        let mut disk = self.disk();
        disk.spend_power()?;
        if !disk.dir.live.contains_key(name) {
            return Err(not_found(name));
        }
        disk.dir.apply(DirOp::Unlink(name.to_owned()));
        Ok(())
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        check_name(from)?;
        check_name(to)?;
        let mut disk = self.disk();
        disk.spend_power()?;
        if !disk.dir.live.contains_key(from) {
            return Err(not_found(from));
        }
        disk.dir.apply(DirOp::Rename(from.to_owned(), to.to_owned()));
        Ok(())
    }

    fn sync_dir(&self) -> io::Result<()> {
        let mut disk = self.disk();
        disk.spend_power()?;
        disk.stats.dir_syncs += 1;
        disk.dir.sync();
        Ok(())
    }
}

/// An open file of a [`SimBackend`].
#[derive(Debug)]
pub struct SimFile {
    disk: Arc<Mutex<Disk>>,
    inode: u64,
    /// The crash generation the handle was opened in; later generations make it stale.
    generation: u64,
}

impl SimFile {
    /// Runs `f` on this file's journal, after checking the handle and spending power if the
    /// operation mutates.
    fn with_file<T>(
        &self,
        mutates: bool,
        f: impl FnOnce(&mut Journaled<Vec<u8>, FileOp>, &mut SimStats) -> io::Result<T>,
    ) -> io::Result<T> {
        let mut disk = self.disk.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if disk.generation != self.generation {
            return Err(io::Error::other("stale handle: the disk crashed"));
        }
        if mutates {
            disk.spend_power()?;
        } else {
            disk.check_power()?;
        }
        let Disk { files, stats, .. } = &mut *disk;
        f(files.get_mut(&self.inode).expect("an open handle keeps its inode"), stats)
    }
}

impl StorageFile for SimFile {
    fn len(&self) -> io::Result<u64> {
        self.with_file(false, |file, _| Ok(file.live.len() as u64))
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.with_file(false, |file, _| {
            let start = usize::try_from(offset).unwrap_or(usize::MAX);
            let source = start
                .checked_add(buf.len())
                .and_then(|end| file.live.get(start..end))
                .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end"))?;
            buf.copy_from_slice(source);
            Ok(())
        })
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.with_file(true, |file, stats| {
            stats.writes += 1;
            file.apply(FileOp::Write { offset: to_usize(offset)?, data: data.to_vec() });
            Ok(())
        })
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.with_file(true, |file, _| {
            file.apply(FileOp::SetLen(to_usize(len)?));
            Ok(())
        })
    }

    fn sync(&mut self) -> io::Result<()> {
        self.with_file(true, |file, stats| {
            stats.file_syncs += 1;
            file.sync();
            Ok(())
        })
    }
}

#[derive(Debug, Default)]
struct Disk {
    /// Bumped by every crash; handles of older generations are stale.
    generation: u64,
    dir: Journaled<BTreeMap<String, u64>, DirOp>,
    files: HashMap<u64, Journaled<Vec<u8>, FileOp>>,
    next_inode: u64,
    power: Power,
    stats: SimStats,
}

impl Disk {
    fn crash(&mut self, mut tear: Option<&mut SplitMix64>) {
        self.dir.crash(tear.as_deref_mut());
        let linked: Vec<u64> = self.dir.durable.values().copied().collect();
        self.files.retain(|inode, _| linked.contains(inode));
        // Files in a deterministic order, so a seed replays exactly.
        let mut inodes: Vec<u64> = self.files.keys().copied().collect();
        inodes.sort_unstable();
        for inode in inodes {
            self.files.get_mut(&inode).expect("listed").crash(tear.as_deref_mut());
        }
        self.generation += 1;
        self.power = Power::On;
    }

    fn check_power(&self) -> io::Result<()> {
        match self.power {
            Power::Off => Err(io::Error::other("simulated power loss")),
            Power::On | Power::OnFor(_) => Ok(()),
        }
    }

    fn spend_power(&mut self) -> io::Result<()> {
        self.check_power()?;
        if let Power::OnFor(ops) = self.power {
            self.power = if ops == 0 { Power::Off } else { Power::OnFor(ops - 1) };
            self.check_power()?;
        }
        Ok(())
    }
}

#[derive(Debug, Default, Clone, Copy)]
enum Power {
    #[default]
    On,
    /// This many more mutating operations succeed.
    OnFor(u64),
    Off,
}

/// A file or the directory: the durable image, the live image and the operations between them.
#[derive(Debug)]
struct Journaled<S, Op> {
    durable: S,
    live: S,
    unsynced: Vec<Op>,
}

impl<S: Default, Op> Default for Journaled<S, Op> {
    fn default() -> Self {
        Self { durable: S::default(), live: S::default(), unsynced: Vec::new() }
    }
}

trait Operation<S>: Sized {
    fn apply_to(&self, state: &mut S);
    /// What reaches the disk if a crash interrupts this operation half-way, if anything.
    fn torn(&self, _rng: &mut SplitMix64) -> Option<Self> {
        None
    }
}

impl<S: Clone, Op: Operation<S>> Journaled<S, Op> {
    fn apply(&mut self, op: Op) {
        op.apply_to(&mut self.live);
        self.unsynced.push(op);
    }

    fn sync(&mut self) {
        self.durable = self.live.clone();
        self.unsynced.clear();
    }

    fn crash(&mut self, tear: Option<&mut SplitMix64>) {
        let unsynced = std::mem::take(&mut self.unsynced);
        if let Some(rng) = tear {
            let kept = rng.below(unsynced.len() as u64 + 1) as usize;
            for op in &unsynced[..kept] {
                op.apply_to(&mut self.durable);
            }
            if let Some(torn) = unsynced.get(kept).and_then(|op| op.torn(rng)) {
                torn.apply_to(&mut self.durable);
            }
        }
        self.live = self.durable.clone();
    }
}

#[derive(Debug)]
enum FileOp {
    Write {
        offset: usize,
        data: Vec<u8>,
    },
    SetLen(usize),
    /// What reaches the disk of a write torn out of order: some of its sectors, and the file
    /// length (zero-extended) up to `min_len`.
    Scattered {
        pieces: Vec<(usize, Vec<u8>)>,
        min_len: usize,
    },
}

/// The unit in which a write torn out of order reaches the disk (small, so that the small
/// records of tests are split; real disks use 512-byte sectors or 4 KiB pages).
const TORN_SECTOR_BYTES: usize = 16;

impl Operation<Vec<u8>> for FileOp {
    fn apply_to(&self, bytes: &mut Vec<u8>) {
        match self {
            FileOp::Write { offset, data } => {
                let end = offset + data.len();
                if bytes.len() < end {
                    bytes.resize(end, 0);
                }
                bytes[*offset..end].copy_from_slice(data);
            }
            FileOp::SetLen(len) => bytes.resize(*len, 0),
            FileOp::Scattered { pieces, min_len } => {
                for (offset, data) in pieces {
                    FileOp::Write { offset: *offset, data: data.clone() }.apply_to(bytes);
                }
                if bytes.len() < *min_len {
                    bytes.resize(*min_len, 0);
                }
            }
        }
    }

    fn torn(&self, rng: &mut SplitMix64) -> Option<Self> {
        let FileOp::Write { offset, data } = self else {
            return None;
        };
        let size_reached_disk = rng.below(2) == 0;
        if rng.below(2) == 0 {
            // A prefix of the bytes; perhaps the new file size too, the rest reading as zeros.
            let kept = rng.below(data.len() as u64) as usize;
            let mut torn = data[..kept].to_vec();
            if size_reached_disk {
                torn.resize(data.len(), 0);
            }
            return Some(FileOp::Write { offset: *offset, data: torn });
        }
        // Sectors in any order: each independently reached the disk or did not.
        let pieces = data
            .chunks(TORN_SECTOR_BYTES)
            .enumerate()
            .filter(|_| rng.below(2) == 0)
            .map(|(i, sector)| (offset + i * TORN_SECTOR_BYTES, sector.to_vec()))
            .collect();
        let min_len = if size_reached_disk { offset + data.len() } else { 0 };
        Some(FileOp::Scattered { pieces, min_len })
    }
}

#[derive(Debug)]
enum DirOp {
    Link(String, u64),
    Rename(String, String),
    Unlink(String),
}

impl Operation<BTreeMap<String, u64>> for DirOp {
    fn apply_to(&self, names: &mut BTreeMap<String, u64>) {
        match self {
            DirOp::Link(name, inode) => {
                names.insert(name.clone(), *inode);
            }
            DirOp::Rename(from, to) => {
                if let Some(inode) = names.remove(from) {
                    names.insert(to.clone(), inode);
                }
            }
            DirOp::Unlink(name) => {
                names.remove(name);
            }
        }
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, seeded, good enough to pick crash outcomes.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform-ish in `0..n` (0 when `n == 0`).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

fn not_found(name: &str) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("no file named {name:?}"))
}

fn to_usize(n: u64) -> io::Result<usize> {
    usize::try_from(n).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_file(disk: &SimBackend, name: &str, bytes: &[u8]) -> SimFile {
        let mut file = disk.create(name).unwrap();
        file.write_at(0, bytes).unwrap();
        file
    }

    #[test]
    fn unsynced_writes_and_names_vanish_in_a_crash() {
        let disk = SimBackend::new();
        let mut file = write_file(&disk, "a", b"hello");
        disk.sync_dir().unwrap();
        file.sync().unwrap();
        file.write_at(5, b" world").unwrap();
        write_file(&disk, "b", b"x").sync().unwrap();
        assert_eq!(disk.live_contents("a").unwrap(), b"hello world");

        disk.crash();
        assert_eq!(disk.live_contents("a").unwrap(), b"hello");
        assert_eq!(disk.list().unwrap(), ["a"], "b's name was never synced");
    }

    #[test]
    fn rename_and_remove_are_durable_only_after_sync_dir() {
        let disk = SimBackend::new();
        write_file(&disk, "a", b"1").sync().unwrap();
        write_file(&disk, "b", b"2").sync().unwrap();
        disk.sync_dir().unwrap();
        disk.rename("a", "c").unwrap();
        disk.remove("b").unwrap();
        assert_eq!(disk.list().unwrap(), ["c"]);
        disk.crash();
        assert_eq!(disk.list().unwrap(), ["a", "b"]);

        disk.rename("a", "c").unwrap();
        disk.sync_dir().unwrap();
        disk.crash();
        assert_eq!(disk.list().unwrap(), ["b", "c"]);
        assert_eq!(disk.live_contents("c").unwrap(), b"1");
    }

    #[test]
    fn torn_crash_keeps_a_prefix_of_the_unsynced_writes() {
        let mut torn_somewhere = false;
        for seed in 0..200 {
            let disk = SimBackend::new();
            let mut file = write_file(&disk, "f", b"durable.");
            file.sync().unwrap();
            disk.sync_dir().unwrap();
            file.write_at(8, b"first.").unwrap();
            file.write_at(14, b"second.").unwrap();
            disk.crash_torn(seed);

            let after = disk.live_contents("f").unwrap();
            let full = b"durable.first.second.";
            assert!(after.len() <= full.len() && after.starts_with(b"durable."), "seed {seed}");
            // Every byte is either what was written there or a zero of a torn write.
            for (i, byte) in after.iter().enumerate() {
                assert!(*byte == full[i] || *byte == 0, "seed {seed}: {after:?}");
            }
            torn_somewhere |= after.len() != 8 && after.len() != 14 && after.len() != full.len();
        }
        assert!(torn_somewhere, "some seed tears a write");
    }

    #[test]
    fn torn_crash_can_persist_a_write_out_of_order() {
        let data: Vec<u8> = (1..=64).collect();
        let out_of_order = (0..200).any(|seed| {
            let disk = SimBackend::new();
            let mut file = write_file(&disk, "f", b"");
            file.sync().unwrap();
            disk.sync_dir().unwrap();
            file.write_at(0, &data).unwrap();
            disk.crash_torn(seed);
            let after = disk.live_contents("f").unwrap();
            // A missing (zero) sector with a persisted one after it.
            let first_missing = after.iter().position(|&byte| byte == 0);
            first_missing.is_some_and(|at| after[at..].iter().any(|&byte| byte != 0))
        });
        assert!(out_of_order, "some seed persists a later sector without an earlier one");
    }

    #[test]
    fn stale_handles_fail_after_a_crash() {
        let disk = SimBackend::new();
        let mut file = write_file(&disk, "f", b"x");
        disk.crash();
        assert!(file.write_at(0, b"y").is_err());
        assert!(file.len().is_err());
    }

    #[test]
    fn power_cut_fails_every_later_operation_until_the_crash() {
        let disk = SimBackend::new();
        disk.fail_after(2);
        let mut file = write_file(&disk, "f", b"x"); // create + write
        assert!(file.sync().is_err());
        assert!(disk.list().is_err());
        disk.crash();
        assert!(disk.list().unwrap().is_empty());
        write_file(&disk, "g", b"y").sync().unwrap();
    }

    #[test]
    fn read_past_the_end_is_unexpected_eof() {
        let disk = SimBackend::new();
        let file = write_file(&disk, "f", b"abc");
        let mut buf = [0; 4];
        assert_eq!(file.read_at(0, &mut buf).unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(file.read_all().unwrap(), b"abc");
    }
}
