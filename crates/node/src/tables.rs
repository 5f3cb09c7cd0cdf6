//! Log tables in the node: the table catalog, and one [`LogReplica`] per shard of every log
//! table (the replicas of a shard are all the nodes of the cluster), each with its disk thread.
//!
//! # One task for every shard
//!
//! Every shard replica is pumped by the node's single core task (the one that also owns the rc
//! core), not by a task of its own. The cores are cheap state machines and the expensive part —
//! `fdatasync` — runs on per-shard disk threads, so a core task is never blocked on IO; on a
//! 2-core machine more tasks would only add hand-offs. With one task, a client connection's
//! requests reach every shard through the channel that already exists, replies and peer
//! messages use the same routes and links as the rc engine, and there are no cross-task locks.
//! If one day a shard's CPU work must scale over cores, a shard moves to its own task behind
//! the same `Tables` interface.
//!
//! # Disk path (ORCA §5.4, §9.6)
//!
//! A shard's `Persist` records go, in token order, to its disk thread, which owns a
//! [`ShardStore`] over `Wal<OsBackend>` + `MetaStore` (crate `strata-logstore`, shared with the
//! simulator). The thread takes everything queued, executes it and flushes once; records that
//! arrive while it flushes wait for the next flush (group commit). It reports the highest
//! `Sync`/`HardState` token back to the core task, which calls `on_persisted` and releases the
//! `send_after_persist` messages it held. Appends stay in the WAL's user-space buffer until a
//! flush, so a SIGKILL loses exactly what a power failure would.
//!
//! # Clock
//!
//! Log replicas run on `CLOCK_MONOTONIC` (nanoseconds since boot), not on time since process
//! start: a follower's lease echoes its own ack timestamps (ORCA §5.7.3), and a restarted
//! replica ignores every grant echoing a timestamp before its restart (`LogReplica::recover`),
//! which is only sound if its clock keeps increasing across restarts.
//!
//! # Catalog [DECISION]
//!
//! `strata table create` sends the definition to every node; each node persists its catalog
//! (`<data-dir>/tables/catalog.json`, written to a temporary file, fsynced, renamed, directory
//! fsynced) and starts the shards. Creation is idempotent for an identical definition and
//! refused for a conflicting one. A replicated catalog is future work.

mod moves;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use strata_core::{Effects, Node};
use strata_log::{
    DurabilityMode, LogConfig, LogEvent, LogReplica, LogReply, LogRequest, Persist, ReadError,
    ReadPolicy, Replication, Role, WriteError, WriteOp,
};
use strata_logstore::ShardStore;
use strata_rc::Route;
use strata_storage::{OsBackend, WalConfig};
use strata_wire::client::{
    shard_of, ClientResponse, ErrorCode, LogFailure, LogWriteOp, Response, ShardRole, ShardStatus,
    TableDef, TableDurability, TableEngine, TableReads, TableReplication, TableTimers,
};
use strata_wire::log::{LogMessage, ShardMove};
use strata_wire::peer::PeerMessage;
use strata_wire::{Instant, NodeId, Rifl};
use tokio::sync::mpsc;
use tokio::time::Instant as TokioInstant;
use tracing::{debug, error, info, warn};

/// The most shards a table may have (each is a replica, a WAL and a thread on every node).
pub const MAX_SHARDS: u32 = 64;
/// The longest table name (it names a directory).
pub const MAX_TABLE_NAME: usize = 64;
const CATALOG_FILE: &str = "catalog.json";
/// Names of system tables start with this; users cannot create such tables.
pub const SYSTEM_PREFIX: &str = "__";
/// The log table holding RIFL's lease service (rifl.md R-D1: its durable state replicated by
/// the store's own consensus; the service runs at the table's leader). Every node has it from
/// its first start; it is not in the catalog file.
pub const LEASE_TABLE: &str = "__leases";

/// The lease table's definition: one shard, every command fsynced at a majority before the
/// service acts on it (§5.5.2: "after the write is durable"), reads at the leader.
pub fn lease_table_def() -> TableDef {
    TableDef {
        name: LEASE_TABLE.to_string(),
        engine: TableEngine::Log,
        durability: TableDurability::Sync,
        replication: TableReplication::Sync,
        reads: TableReads::Leader,
        shards: 1,
        timers: TableTimers::Default,
    }
}

/// The log engine's configuration for a table on a cluster of `n` nodes, or the core's own
/// [`strata_log::ConfigError`] when the combination is invalid (e.g. active-set reads without
/// CAD).
pub fn log_config(def: &TableDef, n: usize) -> Result<LogConfig, strata_log::ConfigError> {
    let durability = match (def.durability, def.replication) {
        (TableDurability::Sync, _) => DurabilityMode::Sync,
        (TableDurability::Async, TableReplication::Async) => DurabilityMode::Async,
        (TableDurability::Async, TableReplication::Sync) => DurabilityMode::SyncRepl,
        (TableDurability::Cad, TableReplication::Async) => DurabilityMode::Cad(Replication::Async),
        (TableDurability::Cad, TableReplication::Sync) => {
            DurabilityMode::Cad(Replication::SyncRepl)
        }
    };
    let reads = match def.reads {
        TableReads::Leader => ReadPolicy::Leader,
        TableReads::ActiveSet => ReadPolicy::ActiveSet,
        TableReads::Any => ReadPolicy::Any,
    };
    let cfg = LogConfig::with(durability, reads);
    let cfg = match def.timers {
        TableTimers::Default => cfg,
        // §3.4 geo preset, for a WAN RTT of about 35 ms (§8.3 E4, scripts/bench-geo.sh).
        TableTimers::Geo => cfg.geo(),
    };
    cfg.validate(n)?;
    Ok(cfg)
}

/// Checks a definition before it enters a catalog; the message says what is wrong.
pub fn check_table_def(def: &TableDef, n: usize) -> Result<LogConfig, String> {
    let name_ok = !def.name.is_empty()
        && def.name.len() <= MAX_TABLE_NAME
        && def.name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && !def.name.starts_with('-');
    if !name_ok {
        return Err(format!(
            "invalid table name {:?}: use 1-{MAX_TABLE_NAME} letters, digits, '_' or '-'",
            def.name
        ));
    }
    if def.name.starts_with(SYSTEM_PREFIX) {
        return Err(format!(
            "invalid table name {:?}: names starting with {SYSTEM_PREFIX:?} are reserved for system tables",
            def.name
        ));
    }
    if def.shards == 0 || def.shards > MAX_SHARDS {
        return Err(format!("a table has 1 to {MAX_SHARDS} shards, not {}", def.shards));
    }
    log_config(def, n).map_err(|e| e.to_string())
}

// ---- catalog file ----

#[derive(Serialize, Deserialize)]
struct CatalogFile {
    tables: Vec<CatalogEntry>,
}

#[derive(Serialize, Deserialize)]
struct CatalogEntry {
    name: String,
    engine: String,
    durability: String,
    replication: String,
    reads: String,
    shards: u32,
    /// Absent from catalogs written before timer presets existed.
    #[serde(default = "default_timers_name")]
    timers: String,
    /// Shards that moved (rifl.md §5.7): their generation and replicas. A shard not listed
    /// is in generation 0 on every node. Absent from catalogs written before shard moves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    moved: Vec<MovedShard>,
}

#[derive(Serialize, Deserialize)]
struct MovedShard {
    shard: u32,
    generation: u32,
    replicas: Vec<u32>,
}

/// A catalogued table: its definition and where its moved shards live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Catalogued {
    pub def: TableDef,
    /// Shards that moved, by shard; the others are in generation 0 on every node.
    pub moved: BTreeMap<u32, ShardMove>,
}

fn default_timers_name() -> String {
    timers_name(TableTimers::Default).into()
}

pub fn durability_name(d: TableDurability) -> &'static str {
    match d {
        TableDurability::Sync => "sync",
        TableDurability::Async => "async",
        TableDurability::Cad => "cad",
    }
}
pub fn replication_name(r: TableReplication) -> &'static str {
    match r {
        TableReplication::Sync => "sync",
        TableReplication::Async => "async",
    }
}
pub fn reads_name(r: TableReads) -> &'static str {
    match r {
        TableReads::Leader => "leader",
        TableReads::ActiveSet => "active-set",
        TableReads::Any => "any",
    }
}
pub fn timers_name(t: TableTimers) -> &'static str {
    match t {
        TableTimers::Default => "default",
        TableTimers::Geo => "geo",
    }
}

impl CatalogEntry {
    fn from_table(t: &Catalogued) -> CatalogEntry {
        CatalogEntry {
            moved: t
                .moved
                .iter()
                .map(|(&shard, m)| MovedShard {
                    shard,
                    generation: m.generation,
                    replicas: m.replicas.iter().map(|n| n.0).collect(),
                })
                .collect(),
            ..CatalogEntry::from_def(&t.def)
        }
    }

    fn from_def(d: &TableDef) -> CatalogEntry {
        CatalogEntry {
            moved: Vec::new(),
            name: d.name.clone(),
            engine: "log".into(),
            durability: durability_name(d.durability).into(),
            replication: replication_name(d.replication).into(),
            reads: reads_name(d.reads).into(),
            shards: d.shards,
            timers: timers_name(d.timers).into(),
        }
    }

    fn to_def(&self) -> Result<TableDef, String> {
        let bad = |what: &str, v: &str| format!("table {}: unknown {what} {v:?}", self.name);
        Ok(TableDef {
            name: self.name.clone(),
            engine: match self.engine.as_str() {
                "log" => TableEngine::Log,
                v => return Err(bad("engine", v)),
            },
            durability: match self.durability.as_str() {
                "sync" => TableDurability::Sync,
                "async" => TableDurability::Async,
                "cad" => TableDurability::Cad,
                v => return Err(bad("durability", v)),
            },
            replication: match self.replication.as_str() {
                "sync" => TableReplication::Sync,
                "async" => TableReplication::Async,
                v => return Err(bad("replication", v)),
            },
            reads: match self.reads.as_str() {
                "leader" => TableReads::Leader,
                "active-set" => TableReads::ActiveSet,
                "any" => TableReads::Any,
                v => return Err(bad("reads", v)),
            },
            shards: self.shards,
            timers: match self.timers.as_str() {
                "default" => TableTimers::Default,
                "geo" => TableTimers::Geo,
                v => return Err(bad("timers", v)),
            },
        })
    }
}

fn load_catalog(dir: &Path) -> Result<Vec<Catalogued>, String> {
    let path = dir.join(CATALOG_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let file: CatalogFile =
        serde_json::from_str(&text).map_err(|e| format!("{} is corrupt: {e}", path.display()))?;
    file.tables
        .iter()
        .map(|e| {
            let moved = e
                .moved
                .iter()
                .map(|m| {
                    let replicas = m.replicas.iter().copied().map(NodeId).collect();
                    (m.shard, ShardMove { generation: m.generation, replicas })
                })
                .collect();
            Ok(Catalogued { def: e.to_def()?, moved })
        })
        .collect()
}

/// Replaces the catalog durably and atomically: temporary file, fsync, rename, fsync the
/// directory. A crash leaves the old catalog or the new one.
fn save_catalog<'a>(
    dir: &Path,
    tables: impl IntoIterator<Item = &'a Catalogued>,
) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    let file = CatalogFile { tables: tables.into_iter().map(CatalogEntry::from_table).collect() };
    let text = serde_json::to_string_pretty(&file).expect("serializable");
    let tmp = dir.join(format!("{CATALOG_FILE}.tmp"));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, dir.join(CATALOG_FILE))?;
    std::fs::File::open(dir)?.sync_all()
}

// ---- clock ----

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC always exists.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The log replicas' clock: `CLOCK_MONOTONIC` (see the module docs), tied to tokio's clock.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LogClock {
    origin: TokioInstant,
    origin_ns: u64,
}

impl LogClock {
    pub fn new() -> LogClock {
        LogClock { origin: TokioInstant::now(), origin_ns: monotonic_ns() }
    }
    pub fn now(&self, at: TokioInstant) -> Instant {
        Instant(self.origin_ns + at.saturating_duration_since(self.origin).as_nanos() as u64)
    }
    pub fn to_tokio(self, t: Instant) -> TokioInstant {
        self.origin + Duration::from_nanos(t.0.saturating_sub(self.origin_ns))
    }
}

// ---- shards ----

/// A shard's key: `(table id, shard)`.
pub(crate) type ShardKey = (u32, u32);

/// What a disk thread reports. `generation` tells a retired replica's last report (after a
/// move) from one of the shard's current replica: tokens are per replica.
#[derive(Debug)]
pub(crate) enum DiskDone {
    /// Every record with a token `<= token` is durable.
    Persisted { key: ShardKey, generation: u32, token: u64 },
    /// The store failed (IO error); the shard stops persisting and will not make progress.
    Failed { key: ShardKey, generation: u32, error: String },
}

type Batch = Vec<(u64, Persist)>;

struct Shard {
    table: String,
    shard: u32,
    /// The replica group this replica belongs to (0 at creation, +1 per move).
    generation: u32,
    replica: LogReplica,
    effects: strata_log::LogEffects,
    /// `send_after_persist` messages waiting for their token.
    held: Vec<(u64, NodeId, LogMessage)>,
    /// Client requests waiting for the core's reply: token -> (connection, corr).
    waiting: HashMap<u64, (Route, u64)>,
    disk: Option<std_mpsc::Sender<Batch>>,
    /// The disk thread (joined when the replica retires after a move, or at close).
    thread: Option<std::thread::JoinHandle<()>>,
    failed: bool,
}

/// What the tables want the driver to send.
#[derive(Default)]
pub(crate) struct Outbox {
    pub peers: Vec<(NodeId, PeerMessage)>,
    pub replies: Vec<(Route, ClientResponse)>,
    /// Replies to the node's own writes ([`Tables::write_internal`]), by token.
    pub internal: Vec<(u64, Result<strata_log::WriteAck, WriteError>)>,
}

struct TableEntry {
    def: TableDef,
    id: u32,
    /// Shards that moved (rifl.md §5.7); the others are in generation 0 on every node.
    moved: BTreeMap<u32, ShardMove>,
}

impl TableEntry {
    /// Where `shard` lives: its moved placement, else generation 0 on every node.
    fn placement(&self, shard: u32, all: &[NodeId]) -> ShardMove {
        self.moved
            .get(&shard)
            .cloned()
            .unwrap_or_else(|| ShardMove { generation: 0, replicas: all.to_vec() })
    }

    fn catalogued(&self) -> Catalogued {
        Catalogued { def: self.def.clone(), moved: self.moved.clone() }
    }
}

/// Every log table of this node (module docs).
pub(crate) struct Tables {
    me: NodeId,
    replicas: Vec<NodeId>,
    dir: PathBuf,
    clock: LogClock,
    seed: u64,
    tables: BTreeMap<String, TableEntry>,
    shards: BTreeMap<ShardKey, Shard>,
    next_token: u64,
    disk_done: mpsc::UnboundedSender<DiskDone>,
    /// Shard messages for a table or shard this node does not have.
    pub unroutable_messages: u64,
    drains: u64,
    /// Tokens of the node's own writes (their replies go to `Outbox::internal`).
    internal: std::collections::HashSet<u64>,
}

impl Tables {
    /// Loads the catalog from `<data_dir>/tables` and recovers every shard from its directory.
    pub fn open(
        me: NodeId,
        mut replicas: Vec<NodeId>,
        data_dir: &Path,
        seed: u64,
        disk_done: mpsc::UnboundedSender<DiskDone>,
    ) -> Result<Tables, String> {
        replicas.sort();
        let dir = data_dir.join("tables");
        let catalog = load_catalog(&dir)?;
        let mut t = Tables {
            me,
            replicas,
            dir,
            clock: LogClock::new(),
            seed,
            tables: BTreeMap::new(),
            shards: BTreeMap::new(),
            next_token: 1,
            disk_done,
            unroutable_messages: 0,
            drains: 0,
            internal: std::collections::HashSet::new(),
        };
        t.start_table(Catalogued { def: lease_table_def(), moved: BTreeMap::new() })?;
        for table in catalog {
            check_table_def(&table.def, t.replicas.len()).map_err(|e| format!("catalog: {e}"))?;
            t.start_table(table)?;
        }
        Ok(t)
    }

    /// Starts the replicas this node hosts of every shard of `table` (rifl.md §5.7: a moved
    /// shard lives only at its placement's replicas).
    fn start_table(&mut self, table: Catalogued) -> Result<(), String> {
        let id = table.def.id();
        let entry = TableEntry { id, def: table.def, moved: table.moved };
        for shard in 0..entry.def.shards {
            let placement = entry.placement(shard, &self.replicas);
            if placement.replicas.contains(&self.me) {
                self.start_shard(&entry.def, shard, &placement)?;
            }
        }
        self.tables.insert(entry.def.name.clone(), entry);
        Ok(())
    }

    /// A shard replica's directory: `shard-<n>` in generation 0, `shard-<n>.g<generation>`
    /// after a move (a fresh log; the old generation's is removed once the move is adopted).
    fn shard_dir(&self, table: &str, shard: u32, generation: u32) -> PathBuf {
        let name = match generation {
            0 => format!("shard-{shard}"),
            g => format!("shard-{shard}.g{g}"),
        };
        self.dir.join(table).join(name)
    }

    /// Opens a shard replica's directory, recovers the core from it and starts its disk thread.
    fn start_shard(
        &mut self,
        def: &TableDef,
        shard: u32,
        placement: &ShardMove,
    ) -> Result<(), String> {
        let cfg = log_config(def, placement.replicas.len())
            .map_err(|e| format!("table {} shard {shard}: {e}", def.name))?;
        let id = def.id();
        let now = self.clock.now(TokioInstant::now());
        let dir = self.shard_dir(&def.name, shard, placement.generation);
        let backend =
            OsBackend::open(&dir).map_err(|e| format!("cannot open {}: {e}", dir.display()))?;
        let (store, opened) = ShardStore::open(backend.clone(), backend, WalConfig::default())
            .map_err(|e| format!("table {} shard {shard}: {e}", def.name))?;
        if let Some(t) = &opened.report.torn_tail {
            warn!(table = %def.name, shard, segment = %t.segment, offset = t.offset, dropped_bytes = t.dropped_bytes,
                "repaired a torn log tail (the unsynced end of a flush a crash interrupted)");
        }
        info!(
            table = %def.name,
            shard,
            generation = placement.generation,
            entries = opened.state.entries.len(),
            epoch = opened.state.hard_state.epoch,
            last = %opened.state.entries.last().map_or(strata_log::LogIndex::ZERO, |e| e.index),
            "shard opened from its directory"
        );
        let seed = self.seed
            ^ (u64::from(id) << 32)
            ^ u64::from(shard)
            ^ (u64::from(placement.generation) << 16);
        let replica =
            LogReplica::recover(cfg, self.me, &placement.replicas, opened.state, now, seed)
                .map_err(|e| format!("table {} shard {shard}: {e}", def.name))?;
        let (tx, rx) = std_mpsc::channel();
        let done = self.disk_done.clone();
        let key = (id, shard);
        let generation = placement.generation;
        let handle = std::thread::Builder::new()
            .name(format!("disk-{}-{shard}", def.name))
            .spawn(move || run_disk(store, rx, done, key, generation))
            .map_err(|e| format!("cannot start a disk thread: {e}"))?;
        self.shards.insert(
            key,
            Shard {
                table: def.name.clone(),
                shard,
                generation: placement.generation,
                replica,
                effects: Effects::default(),
                held: Vec::new(),
                waiting: HashMap::new(),
                disk: Some(tx),
                thread: Some(handle),
                failed: false,
            },
        );
        Ok(())
    }

    /// `CreateTable`: idempotent for an identical definition, refused for a conflicting one.
    pub fn create(&mut self, def: TableDef) -> Response {
        let invalid =
            |message: String| Response::Error { code: ErrorCode::InvalidArgument, message };
        if let Err(m) = check_table_def(&def, self.replicas.len()) {
            return invalid(m);
        }
        if let Some(t) = self.tables.get(&def.name) {
            return if t.def == def {
                Response::TableCreated { created: false }
            } else {
                invalid(format!(
                    "table {} already exists with another definition ({})",
                    def.name,
                    describe(&t.def)
                ))
            };
        }
        if let Some(t) = self.tables.values().find(|t| t.id == def.id()) {
            return invalid(format!(
                "table name {} collides with table {} (same id); pick another name",
                def.name, t.def.name
            ));
        }
        let new = Catalogued { def: def.clone(), moved: BTreeMap::new() };
        // Synchronous file IO in the core task: table creation is a rare admin operation.
        if let Err(e) = self.save_catalog_with(Some(&new)) {
            return Response::Error {
                code: ErrorCode::Other(100),
                message: format!("cannot save the catalog: {e}"),
            };
        }
        info!(table = %def.name, definition = %describe(&def), "table created");
        match self.start_table(new) {
            Ok(()) => Response::TableCreated { created: true },
            Err(e) => Response::Error { code: ErrorCode::Other(100), message: e },
        }
    }

    /// Writes the catalog: every user table as it is now, `extra` added (or replacing the
    /// table of the same name).
    fn save_catalog_with(&self, extra: Option<&Catalogued>) -> std::io::Result<()> {
        let mut tables: Vec<Catalogued> = self
            .tables
            .values()
            .filter(|t| !t.def.name.starts_with(SYSTEM_PREFIX))
            .filter(|t| extra.is_none_or(|x| x.def.name != t.def.name))
            .map(TableEntry::catalogued)
            .collect();
        tables.extend(extra.cloned());
        save_catalog(&self.dir, &tables)
    }

    pub fn list(&self) -> Vec<TableDef> {
        self.tables
            .values()
            .map(|t| t.def.clone())
            .filter(|d| !d.name.starts_with(SYSTEM_PREFIX))
            .collect()
    }

    #[allow(clippy::result_large_err)] // built once per unknown-table request
    fn shard_key(&self, table: &str, key: &[u8]) -> Result<ShardKey, Response> {
        match self.tables.get(table) {
            Some(t) => Ok((t.id, shard_of(key, t.def.shards))),
            None => Err(Response::Error {
                code: ErrorCode::InvalidArgument,
                message: format!(
                    "no table named {table:?} on this node (create it with `strata table create`)"
                ),
            }),
        }
    }

    /// A client's `LogWrite`/`LogRead`; the reply comes through the outbox (now or later).
    #[allow(clippy::too_many_arguments)]
    pub fn on_write(
        &mut self,
        at: TokioInstant,
        route: Route,
        corr: u64,
        table: &str,
        key: bytes::Bytes,
        op: LogWriteOp,
        rifl: Option<Rifl>,
        immediate: bool,
        out: &mut Outbox,
    ) {
        // A log write is a linearizable RPC (rifl.md §4.1): without RIFL's envelope it cannot
        // be made exactly-once, so it is refused as `BadEnvelope` (not retried by clients).
        let Some(rifl) = rifl else {
            let body = Response::Error {
                code: ErrorCode::BadEnvelope,
                message: "a log write needs RIFL's envelope (rpc id, first_incomplete, lease)"
                    .to_string(),
            };
            return out.replies.push((route, ClientResponse { corr, body }));
        };
        if table.starts_with(SYSTEM_PREFIX) {
            let body = Response::Error {
                code: ErrorCode::InvalidArgument,
                message: format!("table {table:?} is a system table: only the node writes it"),
            };
            return out.replies.push((route, ClientResponse { corr, body }));
        }
        let sk = match self.shard_key(table, &key) {
            Ok(k) => k,
            Err(body) => return out.replies.push((route, ClientResponse { corr, body })),
        };
        let token = self.take_token();
        let op = match op {
            LogWriteOp::Put(v) => WriteOp::Put(v),
            LogWriteOp::Delete => WriteOp::Delete,
        };
        let req = LogRequest::Write { token, rifl, key, op, immediate };
        self.request(at, sk, route, corr, req, out);
    }

    #[allow(clippy::too_many_arguments)]
    pub fn on_read(
        &mut self,
        at: TokioInstant,
        route: Route,
        corr: u64,
        table: &str,
        key: bytes::Bytes,
        min_index: Option<strata_log::LogIndex>,
        out: &mut Outbox,
    ) {
        let sk = match self.shard_key(table, &key) {
            Ok(k) => k,
            Err(body) => return out.replies.push((route, ClientResponse { corr, body })),
        };
        let token = self.take_token();
        self.request(at, sk, route, corr, LogRequest::Read { token, key, min_index }, out);
    }

    fn take_token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }

    fn request(
        &mut self,
        at: TokioInstant,
        sk: ShardKey,
        route: Route,
        corr: u64,
        req: LogRequest,
        out: &mut Outbox,
    ) {
        let now = self.clock.now(at);
        let Some(s) = self.shards.get_mut(&sk) else {
            // rifl.md §5.7 step 4 (`UnknownOwner`): the shard lives elsewhere.
            let body = Response::LogRejected(LogFailure::Moved {
                replicas: self.placement_of(sk).replicas,
            });
            return out.replies.push((route, ClientResponse { corr, body }));
        };
        s.waiting.insert(req.token(), (route, corr));
        s.replica.on_client_request(now, req);
        self.drain(sk, out);
    }

    /// Where the shard `sk` lives, by this node's catalog.
    fn placement_of(&self, sk: ShardKey) -> ShardMove {
        let t = self
            .tables
            .values()
            .find(|t| t.id == sk.0)
            .expect("a shard key names a catalogued table");
        t.placement(sk.1, &self.replicas)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn on_peer(
        &mut self,
        at: TokioInstant,
        from: NodeId,
        table: u32,
        shard: u32,
        generation: u32,
        msg: LogMessage,
        out: &mut Outbox,
    ) {
        let now = self.clock.now(at);
        // A message of another generation of the shard (a retired group, or a new one this
        // node has not adopted yet) must not reach this replica (rifl.md §5.7).
        let Some(s) = self.shards.get_mut(&(table, shard)).filter(|s| s.generation == generation)
        else {
            self.unroutable_messages += 1;
            debug!(table, shard, generation, from = %from, "shard message for a table, shard or generation this node does not have; dropped");
            return;
        };
        s.replica.on_message(now, from, msg);
        self.drain((table, shard), out);
    }

    pub fn on_disk(&mut self, at: TokioInstant, done: DiskDone, out: &mut Outbox) {
        let now = self.clock.now(at);
        match done {
            DiskDone::Persisted { key, generation, token } => {
                let Some(s) = self.shards.get_mut(&key).filter(|s| s.generation == generation)
                else {
                    return;
                };
                s.replica.on_persisted(now, token);
                let (ready, held): (Vec<_>, Vec<_>) =
                    std::mem::take(&mut s.held).into_iter().partition(|(t, _, _)| *t <= token);
                s.held = held;
                for (_, to, msg) in ready {
                    out.peers.push((
                        to,
                        PeerMessage::Shard {
                            table: key.0,
                            shard: key.1,
                            generation: s.generation,
                            msg,
                        },
                    ));
                }
                self.drain(key, out);
            }
            DiskDone::Failed { key, generation, error } => {
                if let Some(s) = self.shards.get_mut(&key).filter(|s| s.generation == generation) {
                    error!(table = %s.table, shard = s.shard, %error, "shard storage failed; the shard stops making progress (restart the node)");
                    s.failed = true;
                    s.disk = None;
                }
            }
        }
    }

    /// The earliest deadline of any shard.
    pub fn deadline(&self) -> Option<TokioInstant> {
        self.shards
            .values()
            .filter_map(|s| s.replica.poll_timeout())
            .min()
            .map(|t| self.clock.to_tokio(t))
    }

    /// Ticks every shard whose deadline has passed.
    pub fn tick(&mut self, at: TokioInstant, out: &mut Outbox) {
        let now = self.clock.now(at);
        let due: Vec<ShardKey> = self
            .shards
            .iter()
            .filter(|(_, s)| s.replica.poll_timeout().is_some_and(|t| t <= now))
            .map(|(k, _)| *k)
            .collect();
        for k in due {
            self.shards.get_mut(&k).expect("listed").replica.on_tick(now);
            self.drain(k, out);
        }
    }

    /// Executes a shard's effects: messages to the outbox (or held for their persist token),
    /// persist records to the disk thread, replies to their connections.
    fn drain(&mut self, key: ShardKey, out: &mut Outbox) {
        self.drains = self.drains.wrapping_add(1);
        let check = cfg!(debug_assertions) && self.drains & 255 == 0;
        let s = self.shards.get_mut(&key).expect("shard exists");
        s.replica.poll_effects(&mut s.effects);
        if check {
            s.replica.check_invariants();
        }
        let fx = &mut s.effects;
        for (to, msg) in fx.send.drain(..) {
            out.peers.push((
                to,
                PeerMessage::Shard { table: key.0, shard: key.1, generation: s.generation, msg },
            ));
        }
        s.held.append(&mut fx.send_after_persist);
        if !fx.persist.is_empty() {
            let batch: Batch = fx.persist.drain(..).collect();
            if let Some(tx) = &s.disk {
                if tx.send(batch).is_err() {
                    s.disk = None;
                }
            }
        }
        for reply in fx.reply.drain(..) {
            if self.internal.remove(&reply.token()) {
                if let LogReply::Write { token, result } = reply {
                    out.internal.push((token, result));
                }
                continue;
            }
            let Some((route, corr)) = s.waiting.remove(&reply.token()) else {
                continue;
            };
            let body = match reply {
                LogReply::Frozen { result: Ok(snapshot), .. } => Response::ShardFrozen {
                    placement: s
                        .replica
                        .moved_to()
                        .cloned()
                        .expect("a frozen shard knows where it goes"),
                    snapshot: Some(snapshot),
                },
                // The leader refused: a `Freeze` to other nodes came first.
                LogReply::Frozen { result: Err(WriteError::Moved { replicas }), .. } => {
                    let ids: Vec<String> = replicas.iter().map(|n| n.0.to_string()).collect();
                    Response::Error {
                        code: ErrorCode::InvalidArgument,
                        message: format!(
                            "table {} shard {} is already moving to nodes {}: finish that move first (`strata shard move {} {} --to {}`)",
                            s.table, s.shard, ids.join(","), s.table, s.shard, ids.join(",")
                        ),
                    }
                }
                reply => reply_body(reply),
            };
            out.replies.push((route, ClientResponse { corr, body }));
        }
        for ev in fx.event.drain(..) {
            log_event(&s.table, s.shard, &ev);
        }
    }

    fn system_shard(&self, table: &str) -> Option<&Shard> {
        self.shards.get(&(self.tables.get(table)?.id, 0))
    }

    /// Whether this node leads `table`'s shard 0, has applied every committed entry and
    /// holds its leader lease (so its applied state is the table's and it may write).
    pub fn leads(&self, at: TokioInstant, table: &str) -> Option<u32> {
        let s = self.system_shard(table)?;
        (!s.failed && s.replica.is_ready_leader(self.clock.now(at))).then(|| s.replica.epoch())
    }

    /// The leader `table`'s shard 0 knows of (itself if it leads).
    pub fn leader_of(&self, table: &str) -> Option<NodeId> {
        let r = &self.system_shard(table)?.replica;
        if r.role() == Role::Leader {
            Some(self.me)
        } else {
            r.leader_hint()
        }
    }

    /// Visits every live key and value of `table`'s shard 0, as applied here.
    pub fn scan(&self, table: &str, f: impl FnMut(&[u8], &[u8])) {
        if let Some(s) = self.system_shard(table) {
            s.replica.for_each_item(f);
        }
    }

    /// The node's own write to `table`'s shard 0 (a system table); the reply comes back in
    /// `Outbox::internal` with the returned token.
    pub fn write_internal(
        &mut self,
        at: TokioInstant,
        table: &str,
        rifl: Rifl,
        key: bytes::Bytes,
        op: WriteOp,
        out: &mut Outbox,
    ) -> u64 {
        let token = self.take_token();
        let Some(t) = self.tables.get(table) else {
            out.internal.push((token, Err(WriteError::Invalid("no such system table"))));
            return token;
        };
        let sk = (t.id, 0);
        self.internal.insert(token);
        let now = self.clock.now(at);
        let s = self.shards.get_mut(&sk).expect("a catalogued table has all its shards");
        s.replica
            .on_client_request(now, LogRequest::Write { token, rifl, key, op, immediate: false });
        self.drain(sk, out);
        token
    }

    /// rifl.md §5.6: the lease service confirmed these clients expired. Every shard this node
    /// leads appends an `Expire` entry for those it holds records of (`LogReplica::expire_clients`).
    pub fn expire_clients(&mut self, at: TokioInstant, clients: &[u64], out: &mut Outbox) {
        if clients.is_empty() {
            return;
        }
        let now = self.clock.now(at);
        let led: Vec<ShardKey> = self
            .shards
            .iter()
            .filter(|(_, s)| s.replica.role() == Role::Leader)
            .map(|(k, _)| *k)
            .collect();
        for k in led {
            let s = self.shards.get_mut(&k).expect("listed");
            if s.replica.expire_clients(now, clients) {
                info!(table = %s.table, shard = s.shard, clients = clients.len(), "collecting the records of clients whose lease expired");
                self.drain(k, out);
            }
        }
    }

    pub fn status(&self, at: TokioInstant) -> Vec<ShardStatus> {
        let now = self.clock.now(at);
        self.shards
            .values()
            .map(|s| {
                let r = &s.replica;
                let role = match r.role() {
                    Role::Follower => ShardRole::Follower,
                    Role::Candidate => ShardRole::Candidate,
                    Role::Leader => ShardRole::Leader,
                };
                let leader = if r.role() == Role::Leader { Some(self.me) } else { r.leader_hint() };
                ShardStatus {
                    table: s.table.clone(),
                    shard: s.shard,
                    role,
                    leader,
                    epoch: r.epoch(),
                    last_index: r.last_index(),
                    persisted_index: r.persisted_index(),
                    applied_index: r.applied_index(),
                    durable_index: r.durable_index(),
                    active_set: r.active_set(),
                    serving: !s.failed && (r.is_ready_leader(now) || r.is_serving(now)),
                    reads_served: r.stats().reads_served,
                    reads_made_durable: r.stats().reads_made_durable,
                }
            })
            .collect()
    }

    /// Stops every disk thread (buffered, unsynced appends are dropped, as in a crash) and
    /// waits for them, so that a node restarted in the same process never shares a WAL.
    pub fn close(&mut self) -> Vec<std::thread::JoinHandle<()>> {
        self.shards
            .values_mut()
            .filter_map(|s| {
                s.disk = None;
                s.thread.take()
            })
            .collect()
    }
}

/// A definition in words, for messages: `engine log, durability cad, replication async,
/// reads active-set, timers default, 1 shard(s)`.
pub fn describe(d: &TableDef) -> String {
    format!(
        "engine log, durability {}, replication {}, reads {}, timers {}, {} shard(s)",
        durability_name(d.durability),
        replication_name(d.replication),
        reads_name(d.reads),
        timers_name(d.timers),
        d.shards
    )
}

fn reply_body(reply: LogReply) -> Response {
    match reply {
        LogReply::Write { result: Ok(ack), .. } => Response::LogWritten { index: ack.index },
        LogReply::Write { result: Err(e), .. } => write_error_body(e),
        LogReply::Read { result: Ok(v), .. } => Response::LogValue {
            value: v.value,
            update_index: v.update_index,
            served_by: v.served_by,
            epoch: v.epoch,
        },
        LogReply::Read { result: Err(e), .. } => Response::LogRejected(match e {
            ReadError::NotLeader { hint } => LogFailure::NotLeader { hint },
            ReadError::NotInActiveSet => LogFailure::NotInActiveSet,
            ReadError::Timeout => LogFailure::Timeout,
            ReadError::Unavailable => LogFailure::Unavailable,
            ReadError::Moved { replicas } => LogFailure::Moved { replicas },
        }),
        LogReply::Frozen { result: Err(e), .. } => write_error_body(e),
        // Answered in `drain`, which knows the placement the snapshot goes to.
        LogReply::Frozen { result: Ok(_), .. } => {
            unreachable!("a freeze is answered by the move code")
        }
    }
}

/// RIFL's verdicts are `Response::Error`s a client must not retry (rifl.md §5.3 S3, S4): a
/// broken envelope is `BadEnvelope` (not `LogRejected(Invalid)`, so a client can tell a RIFL
/// protocol error from a bad key); the rest are the engine's retryable or invalid refusals.
fn write_error_body(e: WriteError) -> Response {
    Response::LogRejected(match e {
        WriteError::Stale => {
            return Response::Error {
                code: ErrorCode::Stale,
                message: "the client had acknowledged this write (seq at or below its first_incomplete)".to_string(),
            }
        }
        WriteError::BadEnvelope(m) => {
            return Response::Error {
                code: ErrorCode::BadEnvelope,
                message: m.to_string(),
            }
        }
        WriteError::ExpiredLease => {
            return Response::Error {
                code: ErrorCode::ExpiredLease,
                message: "the client's lease expired and its records in this shard were collected; outcome of its unfinished writes unknown".to_string(),
            }
        }
        WriteError::NotLeader { hint } => LogFailure::NotLeader { hint },
        WriteError::Unavailable => LogFailure::Unavailable,
        WriteError::Timeout => LogFailure::Timeout,
        WriteError::Invalid(m) => LogFailure::Invalid(m.to_string()),
        WriteError::Moved { replicas } => LogFailure::Moved { replicas },
    })
}

/// The audit events worth a log line; the rest (per read, per grant) would flood it.
fn log_event(table: &str, shard: u32, ev: &LogEvent) {
    match ev {
        LogEvent::BecameLeader { epoch, noop } => {
            info!(table, shard, epoch, noop = %noop, "became leader")
        }
        LogEvent::SyncPhaseDone { epoch, active_set, .. } => {
            let set: Vec<String> = active_set.iter().map(|n| n.to_string()).collect();
            info!(table, shard, epoch, active_set = %set.join(","), "leader ready (sync phase done)")
        }
        LogEvent::LeaderLeaseExpired { epoch, followers } => {
            warn!(table, shard, epoch, %followers, "leader lease lapsed: no majority acked a recent heartbeat round")
        }
        LogEvent::SteppedDown { epoch, reason } => {
            info!(table, shard, epoch, ?reason, "stepped down")
        }
        LogEvent::ElectionStarted { epoch, last_index } => {
            debug!(table, shard, epoch, last = %last_index, "election started")
        }
        LogEvent::Truncated { after, removed_upto } => {
            info!(table, shard, after = %after, removed_upto = %removed_upto, "truncated a divergent log suffix")
        }
        LogEvent::AsAdded { node, .. } => debug!(table, shard, node = %node, "active set: added"),
        LogEvent::AsRemoved { node, .. } => {
            info!(table, shard, node = %node, "active set: removed")
        }
        _ => {}
    }
}

/// A shard's disk thread: executes batches in order, coalescing whatever queued during the
/// previous flush (group commit), and reports the persisted token.
fn run_disk(
    mut store: ShardStore<OsBackend>,
    rx: std_mpsc::Receiver<Batch>,
    done: mpsc::UnboundedSender<DiskDone>,
    key: ShardKey,
    generation: u32,
) {
    while let Ok(mut batch) = rx.recv() {
        while let Ok(more) = rx.try_recv() {
            batch.extend(more);
        }
        match store.execute(batch) {
            Ok(Some(token)) => {
                if done.send(DiskDone::Persisted { key, generation, token }).is_err() {
                    return;
                }
            }
            Ok(None) => {}
            Err(e) => {
                let _ = done.send(DiskDone::Failed { key, generation, error: e.to_string() });
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(timers: TableTimers) -> TableDef {
        TableDef {
            name: "t".into(),
            engine: TableEngine::Log,
            durability: TableDurability::Cad,
            replication: TableReplication::Async,
            reads: TableReads::ActiveSet,
            shards: 2,
            timers,
        }
    }

    #[test]
    fn the_catalog_keeps_timer_presets_and_moved_shards_and_reads_older_catalogs() {
        let dir = std::env::temp_dir().join(format!("strata-catalog-{}", std::process::id()));
        let moved = BTreeMap::from([(
            1,
            ShardMove { generation: 2, replicas: vec![NodeId(1), NodeId(3)] },
        )]);
        let tables = vec![
            Catalogued { def: def(TableTimers::Geo), moved },
            Catalogued {
                def: TableDef { name: "d".into(), ..def(TableTimers::Default) },
                moved: BTreeMap::new(),
            },
        ];
        save_catalog(&dir, &tables).unwrap();
        assert_eq!(load_catalog(&dir).unwrap(), tables);
        // A catalog written before timer presets and shard moves existed has no `timers` and
        // no `moved`: the default preset, every shard in generation 0.
        let old = r#"{"tables":[{"name":"t","engine":"log","durability":"cad","replication":"async","reads":"active-set","shards":2}]}"#;
        std::fs::write(dir.join(CATALOG_FILE), old).unwrap();
        let defaults = Catalogued { def: def(TableTimers::Default), moved: BTreeMap::new() };
        assert_eq!(load_catalog(&dir).unwrap(), vec![defaults]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_geo_preset_sets_the_geo_timers() {
        let geo = log_config(&def(TableTimers::Geo), 5).unwrap();
        let lan = log_config(&def(TableTimers::Default), 5).unwrap();
        assert_eq!(
            (geo.heartbeat, geo.mark_out_timeout, geo.removal_timeout),
            (Duration::from_millis(25), Duration::from_millis(150), Duration::from_millis(750)),
            "ORCA §3.4 geo preset"
        );
        assert_eq!(lan.mark_out_timeout, Duration::from_millis(100));
        assert!(describe(&def(TableTimers::Geo)).contains("timers geo"));
    }

    #[test]
    fn rifl_verdicts_are_final_errors_and_the_rest_stay_retryable_refusals() {
        let code = |e| match reply_body(LogReply::Write { token: 1, result: Err(e) }) {
            Response::Error { code, .. } => Some(code),
            _ => None,
        };
        assert_eq!(code(WriteError::Stale), Some(ErrorCode::Stale));
        assert_eq!(code(WriteError::BadEnvelope("seq 0")), Some(ErrorCode::BadEnvelope));
        assert!(matches!(
            reply_body(LogReply::Write { token: 1, result: Err(WriteError::Unavailable) }),
            Response::LogRejected(LogFailure::Unavailable)
        ));
    }
}
