//! The node's disks: how the driver executes the host's [`Storage`] requests, and its clock.
//!
//! # Shard logs (ORCA §5.4, §9.6)
//!
//! Every log-table shard replica of the node writes to **one** log, a [`NodeStore`] over
//! `Wal<OsBackend>` (crate `strata-logstore`, the same adapter the simulator runs over
//! `SimBackend`), owned by the node's disk thread. The thread takes everything queued — any
//! replica's `Persist` records, in token order per replica — stages it, flushes once (one
//! write, one `fdatasync` for every replica), and reports each replica's highest
//! `Sync`/`HardState` token to the core task, which hands it to the host
//! (`on_shard_persisted`). Records that arrive while it flushes wait for the next flush: group
//! commit across the node's shards. Appends stay in the WAL's user-space buffer until a
//! flush, so a SIGKILL loses exactly what a power failure would. The core task hands over
//! what one of its steps produced in one request ([`Disks::kick`]): the thread is woken once
//! per step, not once per replica's batch (a wake-up is a futex call and a context switch),
//! and only if it sleeps ([`Inbox`]: a mutex-guarded queue and a condition variable, which
//! took a fifth fewer futex calls and context switches per transaction than a channel).
//!
//! Opening a replica (and, for a moved-in shard, writing its first entry) also goes through
//! the thread, in order with the records before it; the core task waits for the answer. Those
//! and saving the catalog happen at start-up and on rare admin operations (table creation,
//! shard moves). An IO error poisons the log and fails every replica of the node.
//!
//! # Layout
//!
//! `<data-dir>/wal/` holds the node's log (segments named by their first record,
//! `strata_storage::segment`); `<data-dir>/tables/catalog.json` the catalog (written to a
//! temporary file, fsynced, renamed, directory fsynced). Versions before the shared log kept a
//! log per replica in `<data-dir>/tables/<table>/shard-<n>[.g<generation>]`: a replica that
//! finds its old directory imports it into the node log at its first start and removes it.
//!
//! # Clock
//!
//! The host runs on `CLOCK_MONOTONIC` (nanoseconds since boot), not on time since process
//! start: a log follower's lease echoes its own ack timestamps (ORCA §5.7.3), and a restarted
//! replica ignores every grant echoing a timestamp before its restart (`LogReplica::recover`),
//! which is only sound if its clock keeps increasing across restarts.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use strata_host::ShardId;
use strata_log::{Persist, RecoveredState};
use strata_logstore::legacy::read_replica_dir;
use strata_logstore::{NodeStore, ShardTag, StoreError};
use strata_storage::{OsBackend, RecoveryReport, WalConfig};
use strata_wire::log::Snapshot;
use strata_wire::Instant;
use tokio::sync::mpsc;
use tokio::time::Instant as TokioInstant;
use tracing::{info, warn};

const CATALOG_FILE: &str = "catalog.json";

/// At most this many requests are staged before a flush, so a steady stream of arrivals
/// cannot postpone the flush the first of them waits for.
const MAX_JOBS_PER_FLUSH: usize = 1024;

/// What the disk thread reports.
#[derive(Debug)]
pub(crate) enum DiskDone {
    /// Every record with a token `<= token` is durable.
    Persisted { shard: ShardId, token: u64 },
    /// The store failed (IO error); the replica stops persisting.
    Failed { shard: ShardId, error: String },
}

type Batch = Vec<(u64, Persist)>;

/// A request to the disk thread.
enum Job {
    /// Replicas' records, each replica's in token order.
    Log(Vec<(ShardId, Batch)>),
    /// Opens a replica, first replacing what the log holds of it with `install` if given.
    Open {
        shard: ShardId,
        tag: ShardTag,
        install: Option<Box<RecoveredState>>,
        reply: std_mpsc::SyncSender<Result<RecoveredState, String>>,
    },
    Close {
        shard: ShardId,
        remove: bool,
    },
}

struct DiskThread {
    inbox: Arc<Inbox>,
    thread: std::thread::JoinHandle<()>,
}

/// The disk thread's requests, in order. The thread is woken (one futex call) only when it
/// sleeps for want of work; a channel's waker bookkeeping cost several futex calls and
/// context switches per group-commit round, each a hypervisor exit on a virtual machine.
#[derive(Default)]
struct Inbox {
    state: Mutex<InboxState>,
    wake: Condvar,
}

#[derive(Default)]
struct InboxState {
    jobs: VecDeque<Job>,
    /// The thread waits on `wake`.
    asleep: bool,
    /// The sender is gone: the thread ends once `jobs` is empty.
    closed: bool,
    /// The thread ended (an IO error): jobs are refused, and those queued were dropped (an
    /// `Open` waiting for its answer learns it from its dropped reply channel).
    stopped: bool,
}

impl Inbox {
    fn lock(&self) -> MutexGuard<'_, InboxState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `job`; gives it back if the thread has ended.
    fn push(&self, job: Job) -> Result<(), Job> {
        let mut s = self.lock();
        if s.stopped {
            return Err(job);
        }
        s.jobs.push_back(job);
        let wake = std::mem::take(&mut s.asleep);
        drop(s); // woken after the unlock, the thread does not block on the lock at once
        if wake {
            self.wake.notify_one();
        }
        Ok(())
    }

    /// The thread ended: drops what is queued and refuses what comes.
    fn stop(&self) {
        let dropped = {
            let mut s = self.lock();
            s.stopped = true;
            std::mem::take(&mut s.jobs)
        };
        drop(dropped);
    }

    fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_one();
    }

    /// The next round: at least one job, at most `max`, in order; `None` once closed and
    /// drained.
    fn take(&self, max: usize) -> Option<Vec<Job>> {
        let mut s = self.lock();
        while s.jobs.is_empty() {
            if s.closed {
                return None;
            }
            s.asleep = true;
            s = self.wake.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.asleep = false;
        let n = s.jobs.len().min(max);
        Some(s.jobs.drain(..n).collect())
    }
}

/// The node's disk thread, its open replicas, and the catalog file. Replicas are filed by
/// `ShardId`, generation included: while a move is adopted, the new group's replica opens
/// (and installs) its log before the old one retires.
pub(crate) struct Disks {
    data_dir: PathBuf,
    /// Started by the first replica that opens.
    thread: Option<DiskThread>,
    open: BTreeSet<ShardId>,
    /// Records submitted since the last [`Disks::kick`].
    queued: Vec<(ShardId, Batch)>,
    done: mpsc::UnboundedSender<DiskDone>,
}

impl Disks {
    pub fn new(data_dir: &Path, done: mpsc::UnboundedSender<DiskDone>) -> Disks {
        Disks {
            data_dir: data_dir.to_path_buf(),
            thread: None,
            open: BTreeSet::new(),
            queued: Vec::new(),
            done,
        }
    }

    fn tables_dir(&self) -> PathBuf {
        self.data_dir.join("tables")
    }

    /// The stored catalog (empty when there is none yet).
    pub fn load_catalog(&self) -> Result<Vec<u8>, String> {
        let path = self.tables_dir().join(CATALOG_FILE);
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
        let dir = self.tables_dir();
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(&dir)?;
            let tmp = dir.join(format!("{CATALOG_FILE}.tmp"));
            {
                let mut f = std::fs::File::create(&tmp)?;
                f.write_all(bytes)?;
                f.sync_all()?;
            }
            std::fs::rename(&tmp, dir.join(CATALOG_FILE))?;
            std::fs::File::open(&dir)?.sync_all()
        };
        write().map_err(|e| format!("{}: {e}", dir.join(CATALOG_FILE).display()))
    }

    /// Where an earlier version kept a replica's own log (module docs, layout).
    fn legacy_dir(&self, table: &str, id: ShardId) -> PathBuf {
        let name = match id.generation {
            0 => format!("shard-{}", id.shard),
            g => format!("shard-{}.g{g}", id.shard),
        };
        self.tables_dir().join(table).join(name)
    }

    /// `Storage::Open`: opens a replica's log (installing a moved-in shard's first entry, or
    /// importing an earlier version's directory, first) and reads it back.
    pub fn open(
        &mut self,
        id: ShardId,
        table: &str,
        install: Option<Box<Snapshot>>,
    ) -> Result<RecoveredState, String> {
        let legacy = self.legacy_dir(table, id);
        let has_legacy = legacy.is_dir();
        let install = match install {
            Some(snapshot) => Some(Box::new(RecoveredState::moved_in(*snapshot))),
            None if has_legacy => Some(Box::new(import_legacy(&legacy, table, id)?)),
            None => None,
        };
        let tag = ShardTag::new(table, id.shard, id.generation);
        self.kick(); // in order with the records before it
        let thread = self.thread()?;
        let (reply, answer) = std_mpsc::sync_channel(1);
        let gone = || "the node's disk thread stopped (an earlier IO error)".to_string();
        thread.inbox.push(Job::Open { shard: id, tag, install, reply }).map_err(|_| gone())?;
        let state = answer.recv().map_err(|_| gone())??;
        if has_legacy {
            // Imported (or superseded by the moved-in state) and durable in the node log.
            remove_dir(&legacy).map_err(|e| format!("cannot remove {}: {e}", legacy.display()))?;
        }
        self.open.insert(id);
        Ok(state)
    }

    /// The disk thread, started (the node log opened and read) on first use.
    fn thread(&mut self) -> Result<&DiskThread, String> {
        if self.thread.is_none() {
            let dir = self.data_dir.join("wal");
            let backend =
                OsBackend::open(&dir).map_err(|e| format!("cannot open {}: {e}", dir.display()))?;
            let (store, report) = NodeStore::open(backend, WalConfig::default())
                .map_err(|e| format!("{}: {e}", dir.display()))?;
            warn_repaired(&report, "the node log");
            let inbox = Arc::new(Inbox::default());
            let (jobs, done) = (inbox.clone(), self.done.clone());
            let thread = std::thread::Builder::new()
                .name("disk".into())
                .spawn(move || {
                    run_disk(store, &jobs, done);
                    jobs.stop();
                })
                .map_err(|e| format!("cannot start the disk thread: {e}"))?;
            self.thread = Some(DiskThread { inbox, thread });
        }
        Ok(self.thread.as_ref().expect("just started"))
    }

    /// `Storage::Log`: queued until [`Disks::kick`].
    pub fn submit(&mut self, id: ShardId, records: Batch) {
        if self.thread.is_some() && self.open.contains(&id) {
            self.queued.push((id, records));
        }
    }

    /// Hands every record submitted since the last kick to the disk thread, in one request.
    /// The driver calls it at the end of each step of its loop.
    pub fn kick(&mut self) {
        if self.queued.is_empty() {
            return;
        }
        let Some(thread) = &self.thread else { return };
        let batches = std::mem::take(&mut self.queued);
        if let Err(Job::Log(batches)) = thread.inbox.push(Job::Log(batches)) {
            for (shard, _) in batches {
                let error = "disk thread gone".into();
                let _ = self.done.send(DiskDone::Failed { shard, error });
            }
        }
    }

    /// `Storage::Close`: the replica's records end here (what is staged may still be flushed
    /// with others'); with `remove`, its log is forgotten durably.
    pub fn close(&mut self, id: ShardId, remove: bool) {
        if self.open.remove(&id) {
            self.kick(); // its last records first
            if let Some(thread) = &self.thread {
                let _ = thread.inbox.push(Job::Close { shard: id, remove });
            }
        }
    }

    /// Stops the disk thread (what is staged and unflushed is dropped, as in a crash), so that
    /// a node restarted in the same process never shares a WAL; the handle is joined by the
    /// caller.
    pub fn close_all(&mut self) -> Option<std::thread::JoinHandle<()>> {
        self.open.clear();
        self.queued.clear();
        self.thread.take().map(|t| {
            t.inbox.close();
            t.thread
        })
    }
}

impl Drop for Disks {
    /// Lets the disk thread end once it has done what is queued (as a dropped channel did).
    fn drop(&mut self) {
        if let Some(t) = &self.thread {
            t.inbox.close();
        }
    }
}

/// Reads a replica directory an earlier version wrote, for import into the node log.
fn import_legacy(dir: &Path, table: &str, id: ShardId) -> Result<RecoveredState, String> {
    let backend =
        OsBackend::open(dir).map_err(|e| format!("cannot open {}: {e}", dir.display()))?;
    let (state, report) =
        read_replica_dir(backend).map_err(|e| format!("{}: {e}", dir.display()))?;
    warn_repaired(&report, &dir.display().to_string());
    info!(table, shard = id.shard, entries = state.entries.len(), dir = %dir.display(),
        "importing a replica's log from an earlier version's layout into the node log");
    Ok(state)
}

fn warn_repaired(report: &RecoveryReport, what: &str) {
    if let Some(t) = &report.torn_tail {
        warn!(log = what, segment = %t.segment, offset = t.offset, dropped_bytes = t.dropped_bytes,
            "repaired a torn log tail (the unsynced end of a flush a crash interrupted)");
    }
}

/// Removes an imported replica directory, and its table's directory once no replica of the
/// table is left in it, and makes the removal durable (the parents fsynced).
fn remove_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::remove_dir_all(dir)?;
    let Some(table_dir) = dir.parent() else { return Ok(()) };
    // Fails, harmlessly, while another replica's directory is still there.
    if std::fs::remove_dir(table_dir).is_ok() {
        if let Some(tables) = table_dir.parent() {
            std::fs::File::open(tables)?.sync_all()?;
        }
        return Ok(());
    }
    std::fs::File::open(table_dir)?.sync_all()
}

/// The node's disk thread: stages whatever queued since the last flush, flushes once, and
/// reports each replica's barrier (module docs, group commit). An IO error fails every open
/// replica and stops the thread.
fn run_disk(mut store: NodeStore<OsBackend>, inbox: &Inbox, done: mpsc::UnboundedSender<DiskDone>) {
    let mut tags: BTreeMap<ShardId, ShardTag> = BTreeMap::new();
    let mut barriers: BTreeMap<ShardId, u64> = BTreeMap::new();
    while let Some(round) = inbox.take(MAX_JOBS_PER_FLUSH) {
        let mut result = Ok(());
        for job in round {
            result = run_job(&mut store, &mut tags, &mut barriers, job);
            if result.is_err() {
                break;
            }
        }
        if result.is_ok() && !barriers.is_empty() {
            result = store.flush().map_err(|e| e.to_string());
        }
        if let Err(error) = result {
            for &shard in tags.keys() {
                let _ = done.send(DiskDone::Failed { shard, error: error.clone() });
            }
            return;
        }
        for (shard, token) in std::mem::take(&mut barriers) {
            if done.send(DiskDone::Persisted { shard, token }).is_err() {
                return;
            }
        }
    }
}

/// One request of a round; `Err` is an IO error (fatal for the node's log).
fn run_job(
    store: &mut NodeStore<OsBackend>,
    tags: &mut BTreeMap<ShardId, ShardTag>,
    barriers: &mut BTreeMap<ShardId, u64>,
    job: Job,
) -> Result<(), String> {
    let fatal = |e: StoreError| e.to_string();
    match job {
        Job::Log(batches) => {
            for (shard, records) in batches {
                let Some(tag) = tags.get(&shard) else { continue };
                if let Some(token) = store.stage(tag, records).map_err(fatal)? {
                    barriers.insert(shard, token);
                }
            }
        }
        Job::Open { shard, tag, install, reply } => {
            let opened = match install {
                Some(state) => store.install_shard(&tag, *state),
                None => store.open_shard(&tag),
            };
            match opened {
                Ok(state) => {
                    tags.insert(shard, tag);
                    let _ = reply.send(Ok(state));
                }
                Err(e) => {
                    let error = format!("{tag}: {e}");
                    let _ = reply.send(Err(error.clone()));
                    return Err(error);
                }
            }
        }
        Job::Close { shard, remove } => {
            barriers.remove(&shard);
            if let Some(tag) = tags.remove(&shard) {
                if remove {
                    store.remove_shard(&tag).map_err(fatal)?;
                } else {
                    store.close_shard(&tag);
                }
            }
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use strata_log::{HardState, LogEntry, LogIndex, LogOp};
    use strata_storage::{MetaStore, Wal};
    use strata_wire::{Encode, NodeId};

    fn entry(counter: u32) -> LogEntry {
        LogEntry {
            index: LogIndex::new(1, counter),
            key: Bytes::from_static(b"k"),
            op: LogOp::Put(Bytes::from(counter.to_string())),
            client_id: 1,
            seq: u64::from(counter),
            ack: 0,
            immediate: false,
        }
    }

    fn id(shard: u32) -> ShardId {
        ShardId { table: 9, shard, generation: 0 }
    }

    fn closes(round: Vec<Job>) -> Vec<u32> {
        round
            .into_iter()
            .map(|j| match j {
                Job::Close { shard, .. } => shard.shard,
                _ => panic!("only closes were queued"),
            })
            .collect()
    }

    #[test]
    fn the_inbox_hands_over_jobs_in_order_and_ends_once_drained() {
        let inbox = Arc::new(Inbox::default());
        for n in 0..5 {
            inbox.push(Job::Close { shard: id(n), remove: false }).map_err(|_| ()).unwrap();
        }
        assert_eq!(closes(inbox.take(3).unwrap()), [0, 1, 2]);
        // A sleeping thread is woken by the next job.
        assert_eq!(closes(inbox.take(3).unwrap()), [3, 4]);
        let waiter = {
            let inbox = inbox.clone();
            std::thread::spawn(move || inbox.take(8).map(closes))
        };
        while !inbox.lock().asleep {
            std::thread::yield_now();
        }
        inbox.push(Job::Close { shard: id(7), remove: false }).map_err(|_| ()).unwrap();
        assert_eq!(waiter.join().unwrap(), Some(vec![7]));
        // Closed by the sender: what is queued is still handed over, then the end.
        inbox.push(Job::Close { shard: id(8), remove: false }).map_err(|_| ()).unwrap();
        inbox.close();
        assert_eq!(closes(inbox.take(8).unwrap()), [8]);
        assert!(inbox.take(8).is_none());
    }

    #[test]
    fn an_ended_disk_thread_refuses_jobs_and_drops_an_open_waiting_for_its_answer() {
        let inbox = Inbox::default();
        let (reply, answer) = std_mpsc::sync_channel(1);
        let tag = ShardTag::new("t", 0, 0);
        let open = Job::Open { shard: id(0), tag, install: None, reply };
        inbox.push(open).map_err(|_| ()).unwrap();
        inbox.stop();
        assert!(answer.recv().is_err(), "the waiting opener learns the thread is gone");
        assert!(inbox.push(Job::Close { shard: id(1), remove: false }).is_err());
    }

    /// Every report the disk thread sends until `want` replicas reported a token.
    fn persisted(rx: &mut mpsc::UnboundedReceiver<DiskDone>, want: usize) -> BTreeMap<u32, u64> {
        let mut got = BTreeMap::new();
        while got.len() < want {
            match rx.blocking_recv().expect("the disk thread reports") {
                DiskDone::Persisted { shard, token } => got.insert(shard.shard, token),
                DiskDone::Failed { error, .. } => panic!("{error}"),
            };
        }
        got
    }

    fn stop(mut disks: Disks) {
        disks.close_all().expect("a disk thread").join().expect("joins");
    }

    #[test]
    fn every_replica_of_the_node_persists_through_one_log_and_reads_back_after_a_restart() {
        let dir = crate::testing::temp_dir("disks");
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut disks = Disks::new(&dir, tx.clone());
        for shard in 0..3 {
            assert_eq!(disks.open(id(shard), "t", None).unwrap(), RecoveredState::default());
            let records = vec![(1, Persist::Append(vec![entry(1), entry(2)])), (2, Persist::Sync)];
            disks.submit(id(shard), records);
        }
        disks.kick();
        assert_eq!(persisted(&mut rx, 3), BTreeMap::from([(0, 2), (1, 2), (2, 2)]));
        disks.close(id(1), true);
        disks.submit(id(2), vec![(3, Persist::Append(vec![entry(3)]))]); // never synced
        disks.kick();
        stop(disks);
        assert!(dir.join("wal").is_dir() && !dir.join("tables").exists(), "one log per node");
        let mut disks = Disks::new(&dir, tx);
        assert_eq!(disks.open(id(0), "t", None).unwrap().entries, [entry(1), entry(2)]);
        assert_eq!(disks.open(id(1), "t", None).unwrap(), RecoveredState::default(), "removed");
        assert_eq!(disks.open(id(2), "t", None).unwrap().entries, [entry(1), entry(2)]);
        stop(disks);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_replica_directory_of_an_earlier_version_is_imported_once_and_removed() {
        let dir = crate::testing::temp_dir("legacy");
        let (tx, mut rx) = mpsc::unbounded_channel();
        let disks = Disks::new(&dir, tx.clone());
        let legacy = disks.legacy_dir("t", id(0));
        let backend = OsBackend::open(&legacy).unwrap();
        let (mut wal, _) = Wal::open(backend.clone(), WalConfig::default()).unwrap();
        let mut buf = bytes::BytesMut::new();
        for e in [entry(1), entry(2)] {
            buf.clear();
            e.encode(&mut buf);
            wal.append(&buf).unwrap();
        }
        wal.flush().unwrap();
        let hs = HardState { epoch: 1, voted_for: Some(NodeId(2)) };
        MetaStore::new(backend).store(&[1, 0, 0, 0, 1, 2, 0, 0, 0]).unwrap();
        drop(wal);

        let mut disks = disks;
        let got = disks.open(id(0), "t", None).unwrap();
        assert_eq!((got.hard_state, got.entries.clone()), (hs, vec![entry(1), entry(2)]));
        assert!(!legacy.exists(), "the old directory is gone once imported");
        assert!(!legacy.parent().unwrap().exists(), "and its table's, empty");
        disks.submit(id(0), vec![(1, Persist::Append(vec![entry(3)])), (2, Persist::Sync)]);
        disks.kick();
        assert_eq!(persisted(&mut rx, 1), BTreeMap::from([(0, 2)]));
        stop(disks);
        let mut disks = Disks::new(&dir, tx);
        let got = disks.open(id(0), "t", None).unwrap();
        assert_eq!((got.hard_state, got.entries), (hs, vec![entry(1), entry(2), entry(3)]));
        stop(disks);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
