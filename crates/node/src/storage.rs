//! The node's disks: how the driver executes the host's [`Storage`] requests, and its clock.
//!
//! # Shard logs (ORCA §5.4, §9.6)
//!
//! Each shard replica's `Persist` records go, in token order, to the replica's disk thread,
//! which owns a [`ShardStore`] over `Wal<OsBackend>` + `MetaStore` (crate `strata-logstore`, the
//! same adapter the simulator runs over `SimBackend`). The thread takes everything queued,
//! executes it and flushes once; records that arrive while it flushes wait for the next flush
//! (group commit). It reports the highest `Sync`/`HardState` token back to the core task, which
//! hands it to the host (`on_shard_persisted`). Appends stay in the WAL's user-space buffer
//! until a flush, so a SIGKILL loses exactly what a power failure would.
//!
//! Opening a replica's storage (and, for a moved-in shard, writing its first entry) and saving
//! the catalog run synchronously in the core task: they happen at start-up and on rare admin
//! operations (table creation, shard moves).
//!
//! # Layout
//!
//! `<data-dir>/tables/catalog.json` (written to a temporary file, fsynced, renamed, directory
//! fsynced) and `<data-dir>/tables/<table>/shard-<n>` for generation 0 of a shard,
//! `shard-<n>.g<generation>` after a move.
//!
//! # Clock
//!
//! The host runs on `CLOCK_MONOTONIC` (nanoseconds since boot), not on time since process
//! start: a log follower's lease echoes its own ack timestamps (ORCA §5.7.3), and a restarted
//! replica ignores every grant echoing a timestamp before its restart (`LogReplica::recover`),
//! which is only sound if its clock keeps increasing across restarts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use strata_host::ShardId;
use strata_log::{Persist, RecoveredState};
use strata_logstore::ShardStore;
use strata_storage::{OsBackend, WalConfig};
use strata_wire::log::Snapshot;
use strata_wire::Instant;
use tokio::sync::mpsc;
use tokio::time::Instant as TokioInstant;
use tracing::warn;

const CATALOG_FILE: &str = "catalog.json";

/// What a disk thread reports.
#[derive(Debug)]
pub(crate) enum DiskDone {
    /// Every record with a token `<= token` is durable.
    Persisted { shard: ShardId, token: u64 },
    /// The store failed (IO error); the replica stops persisting.
    Failed { shard: ShardId, error: String },
}

type Batch = Vec<(u64, Persist)>;

struct Disk {
    tx: std_mpsc::Sender<Batch>,
    thread: std::thread::JoinHandle<()>,
}

/// Every shard replica's disk thread, and the catalog file. Replicas are filed by `ShardId`,
/// generation included: while a move is adopted, the new group's replica opens (and installs)
/// its storage before the old one retires, and each keeps its own thread and directory.
pub(crate) struct Disks {
    dir: PathBuf,
    disks: BTreeMap<ShardId, Disk>,
    done: mpsc::UnboundedSender<DiskDone>,
}

impl Disks {
    pub fn new(data_dir: &Path, done: mpsc::UnboundedSender<DiskDone>) -> Disks {
        Disks { dir: data_dir.join("tables"), disks: BTreeMap::new(), done }
    }

    /// The stored catalog (empty when there is none yet).
    pub fn load_catalog(&self) -> Result<Vec<u8>, String> {
        let path = self.dir.join(CATALOG_FILE);
        match std::fs::read(&path) {
            Ok(b) => Ok(b),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(format!("cannot read {}: {e}", path.display())),
        }
    }

    /// Replaces the catalog durably and atomically: temporary file, fsync, rename, fsync the
    /// directory. A crash leaves the old catalog or the new one.
    pub fn save_catalog(&self, bytes: &[u8]) -> Result<(), String> {
        use std::io::Write;
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(&self.dir)?;
            let tmp = self.dir.join(format!("{CATALOG_FILE}.tmp"));
            {
                let mut f = std::fs::File::create(&tmp)?;
                f.write_all(bytes)?;
                f.sync_all()?;
            }
            std::fs::rename(&tmp, self.dir.join(CATALOG_FILE))?;
            std::fs::File::open(&self.dir)?.sync_all()
        };
        write().map_err(|e| format!("{}: {e}", self.dir.join(CATALOG_FILE).display()))
    }

    /// A shard replica's directory (module docs, layout).
    fn shard_dir(&self, table: &str, id: ShardId) -> PathBuf {
        let name = match id.generation {
            0 => format!("shard-{}", id.shard),
            g => format!("shard-{}.g{g}", id.shard),
        };
        self.dir.join(table).join(name)
    }

    /// `Storage::Open`: (installs and) opens a replica's storage, reads it back and starts its
    /// disk thread.
    pub fn open(
        &mut self,
        id: ShardId,
        table: &str,
        install: Option<Box<Snapshot>>,
    ) -> Result<RecoveredState, String> {
        let dir = self.shard_dir(table, id);
        if let Some(snapshot) = install {
            write_moved_in(&dir, *snapshot)
                .map_err(|e| format!("cannot write {}: {e}", dir.display()))?;
        }
        let backend =
            OsBackend::open(&dir).map_err(|e| format!("cannot open {}: {e}", dir.display()))?;
        let (store, opened) = ShardStore::open(backend.clone(), backend, WalConfig::default())
            .map_err(|e| e.to_string())?;
        if let Some(t) = &opened.report.torn_tail {
            warn!(table, shard = id.shard, segment = %t.segment, offset = t.offset, dropped_bytes = t.dropped_bytes,
                "repaired a torn log tail (the unsynced end of a flush a crash interrupted)");
        }
        let (tx, rx) = std_mpsc::channel();
        let done = self.done.clone();
        let thread = std::thread::Builder::new()
            .name(format!("disk-{table}-{}", id.shard))
            .spawn(move || run_disk(store, rx, done, id))
            .map_err(|e| format!("cannot start a disk thread: {e}"))?;
        if let Some(old) = self.disks.insert(id, Disk { tx, thread }) {
            // Not expected (the host opens a replica once), but a WAL must never have two
            // writers.
            drop(old.tx);
            let _ = old.thread.join();
        }
        Ok(opened.state)
    }

    /// `Storage::Log`.
    pub fn submit(&mut self, id: ShardId, records: Batch) {
        let Some(disk) = self.disks.get(&id) else { return };
        if disk.tx.send(records).is_err() {
            let _ =
                self.done.send(DiskDone::Failed { shard: id, error: "disk thread gone".into() });
        }
    }

    /// `Storage::Close`: stops the disk thread (unsynced appends are dropped, as in a crash)
    /// and, with `remove`, deletes the replica's directory.
    pub fn close(&mut self, id: ShardId, table: &str, remove: bool) {
        if let Some(disk) = self.disks.remove(&id) {
            drop(disk.tx);
            let _ = disk.thread.join();
        }
        if remove {
            let dir = self.shard_dir(table, id);
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    warn!(table, shard = id.shard, dir = %dir.display(), %e, "cannot remove a retired shard directory");
                }
            }
        }
    }

    /// Stops every disk thread, so that a node restarted in the same process never shares a
    /// WAL; the handles are joined by the caller.
    pub fn close_all(&mut self) -> Vec<std::thread::JoinHandle<()>> {
        std::mem::take(&mut self.disks).into_values().map(|d| d.thread).collect()
    }
}

/// Writes a new group's first log entry into a fresh shard directory, fsynced.
fn write_moved_in(dir: &Path, snapshot: Snapshot) -> Result<(), String> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.to_string()),
    }
    let backend = OsBackend::open(dir).map_err(|e| e.to_string())?;
    ShardStore::install_moved_in(backend.clone(), backend, WalConfig::default(), snapshot)
        .map_err(|e| e.to_string())
}

/// A shard's disk thread: executes batches in order, coalescing whatever queued during the
/// previous flush (group commit), and reports the persisted token.
fn run_disk(
    mut store: ShardStore<OsBackend>,
    rx: std_mpsc::Receiver<Batch>,
    done: mpsc::UnboundedSender<DiskDone>,
    shard: ShardId,
) {
    while let Ok(mut batch) = rx.recv() {
        while let Ok(more) = rx.try_recv() {
            batch.extend(more);
        }
        match store.execute(batch) {
            Ok(Some(token)) => {
                if done.send(DiskDone::Persisted { shard, token }).is_err() {
                    return;
                }
            }
            Ok(None) => {}
            Err(e) => {
                let _ = done.send(DiskDone::Failed { shard, error: e.to_string() });
                return;
            }
        }
    }
}

// ---- clock ----

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC always exists.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The node's one clock: `CLOCK_MONOTONIC` (module docs), tied to tokio's for sleeping.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    origin: TokioInstant,
    origin_ns: u64,
}

impl Clock {
    pub fn new() -> Clock {
        Clock { origin: TokioInstant::now(), origin_ns: monotonic_ns() }
    }
    pub fn now(&self, at: TokioInstant) -> Instant {
        Instant(self.origin_ns + at.saturating_duration_since(self.origin).as_nanos() as u64)
    }
    pub fn to_tokio(self, t: Instant) -> TokioInstant {
        self.origin + Duration::from_nanos(t.0.saturating_sub(self.origin_ns))
    }
    /// Time since the node started.
    pub fn uptime(&self) -> Duration {
        self.origin.elapsed()
    }
}
