//! The transaction harness (issue #18 item 4): whole hosts (`HostCluster`) with a transactional
//! table of several shards, clients running transfers, read-only transactions and plain reads
//! over the wire protocol, and faults — lost and duplicated messages, nodes crashed at random
//! and restarted, a client that crashes after its first prepare, one that pauses past `T_TX`
//! — then healing and recovery. Two faults happen in every faulty run by construction, not by
//! chance:
//!
//! * **a shard move in the middle of transactions** ([`mover`]): an operator moves a shard of
//!   the table to another replica set (every node but one, often leaving out its leader), as
//!   `strata shard move` does, freezing the moment the shard's leader has applied a
//!   `Prepared` vote (or, in a quarter of the runs, holds a recovery coordinator's decision
//!   record), so the frozen state (`LogOp::Install`) carries locks, votes and decision
//!   records to the new group; the clients and the coordinators follow `Moved` answers there
//!   with the same RPC ids (`client` docs);
//! * **a participant's leader crashed while it prepares** (`Preparing`): twice a run, when a
//!   shard leader appends a `Prepare` entry, it crashes at once (the entry unsynced, perhaps
//!   already sent to followers) or a little later while the entry is still unapplied and
//!   unanswered, and restarts later; the client retries the prepare (same ids) at whoever
//!   leads next.
//!
//! The checkers ([`check`]) judge what the clients saw and what every replica applied (its
//! audit events, and the locks a move or a restart installed without events):
//! strict serializability (the dependency-graph checker of `check::txn`), atomicity, decision
//! agreement, lock exclusivity, no lock left, conservation of the total, and the replicas'
//! own invariants (a lock's vote outlives it, §7 inv. 14), each with a canary
//! (`strata_log::PlantedBug::Txn*`; a move that loses its locks, [`mover::MovePlant`]). The
//! report counts the moves, what they carried and the targeted crashes.
//!
//! **Kairos** ([`TxnMode`]): the same harness on a Kairos table (kairos.md), validated by its
//! shards (`KairosServer`, §9.12) or by the shards of its companion `bank.validators`
//! (`KairosSharded(V)`, `--validation sharded:V`). The accounts are written by one blind-write
//! transaction (a Kairos table refuses plain writes); the clients stamp their transactions
//! with commit timestamps from clocks with emulated offsets and drifts, read with `fts`, and
//! report their watermarks ([`kairos`]); a third client stalls between its reads and its
//! prepares past the leaders' report timeout (its reads must then be `TooOld`). The shard
//! move moves a data shard or, with sharded validators, half the time a validator shard. The
//! Kairos checkers ([`kcheck`], kairos.md §7) replace the dependency graph with K1's serial
//! replay in commit-timestamp order, K2's global-time oracle, version order and GC safety
//! (`strata_kairos::sim::check`'s, over the replicas' events), the rest is [`check`]'s.

pub mod check;
pub mod client;
pub mod kairos;
pub mod kcheck;
pub mod mover;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use strata_core::Prng;
use strata_host::catalog::{self, Catalogued};
use strata_host::Audit;
use strata_log::{LogEvent, Persist, PlantedBug, Role, TxnEvent};
use strata_wire::client::{
    shard_of, table_id, validators_table, ClientRequest, ClientResponse, LogFailure, LogWriteOp,
    Request, Response, TableDef, TableDurability, TableEngine, TableReads, TableReplication,
    TableTimers, TableTxn, TableValidation,
};
use strata_wire::log::{LogIndex, LogOp, ShardMove};
use strata_wire::rifl::{LeaseInfo, LeaseStatus, Rifl, RpcId};
use strata_wire::txn::{
    Decision, KairosRole, ReadIntent, Timestamp, TxnAction, TxnId, TxnObject, TxnOp, Vote,
};
use strata_wire::Instant;

use crate::check::Violation;
use crate::host::{ClusterOptions, HostCluster, HostNet, Step, Stepped};
use client::{ClientFault, TxnClient, TxnRecord};
use kairos::{KairosSide, Skew};
use mover::Mover;

pub const TABLE: &str = "bank";
pub const SHARDS: u32 = 3;
pub const NODES: usize = 3;
pub const ACCOUNTS: usize = 6;
pub const INITIAL: u64 = 10;

/// Which concurrency control the table runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TxnMode {
    /// RIFL's locks and versions (rifl.md §5.8).
    #[default]
    Rifl,
    /// Kairos, validated in the table's own shards (kairos.md §9.12, `--validation server`).
    KairosServer,
    /// Kairos, validated by the `V` shards of `bank.validators` (`--validation sharded:V`).
    KairosSharded(u32),
}

impl TxnMode {
    pub fn is_kairos(self) -> bool {
        self != TxnMode::Rifl
    }
}

/// A participant: the index of its table in the run's [`Layout`], and its shard.
pub type Part = (usize, u32);

/// A run's tables: the data table (index 0), then, with sharded validators, its validator
/// table (index 1).
#[derive(Clone, Debug)]
pub struct Layout {
    pub mode: TxnMode,
    tables: Vec<(String, u32)>,
}

impl Layout {
    pub fn new(mode: TxnMode) -> Layout {
        let mut tables = vec![(TABLE.to_string(), SHARDS)];
        if let TxnMode::KairosSharded(v) = mode {
            tables.push((validators_table(TABLE), v));
        }
        Layout { mode, tables }
    }

    /// The tables' definitions, as the catalog holds them.
    pub fn defs(&self) -> Vec<TableDef> {
        let (txn, validation) = match self.mode {
            TxnMode::Rifl => return vec![table_def(SHARDS)],
            TxnMode::KairosServer => (TableTxn::Kairos, TableValidation::Server),
            TxnMode::KairosSharded(v) => (TableTxn::Kairos, TableValidation::Sharded(v)),
        };
        let def = TableDef { txn, validation, ..table_def(SHARDS) };
        std::iter::once(def.clone()).chain(def.validators_def()).collect()
    }

    pub fn len(&self) -> usize {
        self.tables.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    pub fn name(&self, table: usize) -> &str {
        &self.tables[table].0
    }

    pub fn shards(&self, table: usize) -> u32 {
        self.tables[table].1
    }

    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.tables.iter().position(|(n, _)| n == name)
    }

    /// The table with this id (`ShardId::table`).
    pub fn index_of_id(&self, id: u32) -> Option<usize> {
        self.tables.iter().position(|(n, _)| table_id(n) == id)
    }

    /// `key`'s participant in `table`.
    pub fn part(&self, table: usize, key: &[u8]) -> Part {
        (table, shard_of(key, self.shards(table)))
    }

    /// Every shard of every table.
    pub fn parts(&self) -> Vec<Part> {
        (0..self.len()).flat_map(|t| (0..self.shards(t)).map(move |s| (t, s))).collect()
    }

    pub fn sharded(&self) -> bool {
        matches!(self.mode, TxnMode::KairosSharded(_))
    }

    /// The table whose shards validate (kairos.md §5.6): the validators', or the data's.
    pub fn validating(&self) -> usize {
        usize::from(self.sharded())
    }

    /// What a Kairos prepare at `table` does (kairos.md §4, §9.12).
    pub fn role(&self, table: usize) -> KairosRole {
        match (self.sharded(), table) {
            (false, _) => KairosRole::Full,
            (true, 0) => KairosRole::Replicate,
            (true, _) => KairosRole::Validate,
        }
    }
}

/// One run's knobs.
#[derive(Clone, Debug)]
pub struct TxnSimOptions {
    pub clients: usize,
    pub txns_per_client: u32,
    pub canary: Option<PlantedBug>,
    /// Node crashes, message loss and the clients' own faults.
    pub faults: bool,
    /// `T_TX` per object.
    pub t_tx: Duration,
    pub lease_term: Duration,
    /// How long the pausing client sleeps after its first prepare (`None`: 8 `T_TX`).
    pub pause: Option<Duration>,
    /// With `faults`: move a shard to another replica set while transactions hold locks on it.
    pub move_shard: bool,
    /// A planted bug in that move (its canary).
    pub move_plant: Option<mover::MovePlant>,
    /// With `faults`: this many times, crash a shard leader right after it appended a
    /// prepare, before the prepare is applied and answered (then restart it).
    pub prepare_crashes: u32,
    /// The table's concurrency control.
    pub mode: TxnMode,
    /// Kairos: clients' clocks with emulated offsets and drifts ([`Skew::draw`]).
    pub skew: bool,
    /// Kairos, with `skew`: these clock errors, client `i` taking entry `i` modulo their
    /// number, instead of drawn ones.
    pub skews: Vec<Skew>,
    /// Kairos, with `faults`: how long at most the stalling client stops between its reads
    /// and its prepares (zero: no such client; [`ClientFault::StallBeforePrepare`]).
    pub stall: Duration,
    /// Kairos: a bug planted in every client (`strata_kairos::PlantedBug`: see
    /// [`KairosSide`]); the `KairosNoTimestampBump` canary plants `NoTimestampBump` itself.
    pub client_bug: Option<strata_kairos::PlantedBug>,
    /// Kairos: the clients cache what their transactions read, with leases from this policy
    /// (`None`: no cache; see [`KairosSide`]), room for every account.
    pub cache: Option<strata_kairos::LeasePolicy>,
    /// Kairos: strict mode with this `eps` (K5; see [`KairosSide`]). `kairos-real-time-order`
    /// judges the run when the clients' clocks stay within `eps` of each other.
    pub strict_eps: Option<Duration>,
}

impl Default for TxnSimOptions {
    fn default() -> TxnSimOptions {
        TxnSimOptions {
            clients: 4,
            txns_per_client: 25,
            canary: None,
            faults: true,
            t_tx: strata_host::TXN_TIMEOUT_PER_OBJECT,
            lease_term: Duration::from_secs(10),
            pause: None,
            move_shard: true,
            move_plant: None,
            prepare_crashes: 2,
            mode: TxnMode::Rifl,
            skew: true,
            skews: Vec::new(),
            stall: Duration::from_secs(6),
            client_bug: None,
            cache: None,
            strict_eps: None,
        }
    }
}

impl TxnSimOptions {
    /// The defaults on a Kairos table.
    pub fn kairos(mode: TxnMode) -> TxnSimOptions {
        TxnSimOptions { mode, ..TxnSimOptions::default() }
    }

    /// Kairos strict mode with `eps` (K5), the clients' clocks within `eps` of each other
    /// ([`Skew::within`]) so that `kairos-real-time-order` judges the run.
    pub fn strict(mode: TxnMode, eps: Duration) -> TxnSimOptions {
        TxnSimOptions { strict_eps: Some(eps), skews: Skew::within(eps), ..Self::kairos(mode) }
    }
}

/// What every replica's transaction entries did, in the order each node applied them.
#[derive(Clone, Debug)]
pub enum Applied {
    Event {
        node: usize,
        /// The table's index in the run's [`Layout`].
        table: usize,
        shard: u32,
        event: TxnEvent,
        /// When it was applied (global time).
        at: Instant,
    },
    /// The node restarted: its replicas rebuild their state by replaying their logs.
    Restarted { node: usize },
    /// The locks the node's replica of `shard` holds from here on, `(key, txn, seq)`, when its
    /// state was replaced without events: a shard move adopted at the node (the new group's
    /// replica starts from the frozen state; a node out of the group hosts the shard no more:
    /// none), and a restart of a moved-in replica (its replay starts from the `Install` entry,
    /// whose locks no event reports; the entries after it report their own).
    Locks { node: usize, table: usize, shard: u32, locks: Vec<(Bytes, TxnId, u64)> },
}

/// What a Kairos run records besides the replicas' events: what the GC-safety and
/// version-order checkers compare them with (`kcheck`).
#[derive(Clone, Debug, Default)]
pub struct KairosTrace {
    /// The setup transaction: its id, commit timestamp and when it was decided.
    pub setup: Option<(TxnId, Timestamp, Instant)>,
    /// Every leader's answer to a watermark report: `(part, the leader (node, epoch), when,
    /// ts_GC)`. (A node and an epoch name one leader's term: a moved shard's new group
    /// starts above the old group's epochs, and a node hosts one replica of a shard.)
    pub announced: Vec<(Part, (usize, u32), Instant, Timestamp)>,
    /// The last `ts_GC` announced per participant.
    pub last_ts_gc: BTreeMap<Part, Timestamp>,
    /// When, and at which node, each Kairos prepare entry was appended by the leader of its
    /// epoch.
    pub appended: BTreeMap<(Part, LogIndex), (usize, Instant)>,
    /// Every account's final version timestamp, read at its leader with `final_values`.
    pub final_vts: Vec<(Bytes, Timestamp)>,
    /// Each client's clock error.
    pub skews: Vec<Skew>,
    /// Strict mode's `eps` (`TxnSimOptions::strict_eps`).
    pub strict_eps: Option<Duration>,
    /// When the clients started (their drift counts from then).
    pub clients_start: Instant,
}

impl KairosTrace {
    /// Records a step's report answers (the client's report in flight says which shard;
    /// the answering leader's replica says which epoch) and its leader's own appends of
    /// Kairos prepares.
    fn observe(&mut self, c: &HostCluster, step: &Step, layout: &Layout, clients: &[TxnClient]) {
        let Some(h) = c.nodes[step.node].host.as_ref() else { return };
        let leading = |part: Part| {
            h.shard_replica(layout.name(part.0), part.1).filter(|r| r.role() == Role::Leader)
        };
        for (route, resp) in &step.replies {
            let Response::KairosWatermarks { ts_gc, .. } = resp.body else { continue };
            let client = clients.get(*route as usize);
            let Some(part) = client.and_then(|cl| cl.report_part(resp.corr)) else { continue };
            if let Some(r) = leading(part) {
                self.announced.push((part, (step.node, r.epoch()), c.now, ts_gc));
                self.last_ts_gc.insert(part, ts_gc);
            }
        }
        for (id, records) in &step.persists {
            let Some(table) = layout.index_of_id(id.table) else { continue };
            let part = (table, id.shard);
            let Some(r) = leading(part) else { continue };
            let kairos_prepare = |e: &&strata_log::LogEntry| {
                e.index.epoch == r.epoch()
                    && matches!(&e.op, LogOp::Prepare(p) if p.kairos.is_some())
            };
            for (_, p) in records {
                let Persist::Append(es) = p else { continue };
                for e in es.iter().filter(kairos_prepare) {
                    self.appended.entry((part, e.index)).or_insert((step.node, c.now));
                }
            }
        }
    }
}

/// What the harness records of every step: the replicas' transaction events and, on a Kairos
/// table, its [`KairosTrace`].
struct Recorder {
    layout: Layout,
    applied: Vec<Applied>,
    kairos: Option<KairosTrace>,
    /// A restart's replay applies every entry on the replica's disk, committed or not (orca
    /// §5.10), and reports their events then. They are held here, with the replay's time,
    /// until the replica applies anything more (it then holds a committed prefix beyond
    /// them), and dropped where a new leader's log replaces them (`Truncated`), where the
    /// replica's state is replaced (a move), or at its next restart.
    replayed: BTreeMap<(usize, Part), Vec<(TxnEvent, Instant)>>,
}

/// Where recorded events come from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// Entries the replica applied as they committed.
    Applied,
    /// A restart's replay of the replica's disk log (`Recorder::replayed`).
    Replay,
}

/// One run's result.
#[derive(Debug)]
pub struct TxnReport {
    pub seed: u64,
    pub layout: Layout,
    /// Whether the run had faults (the freshness checker needs a run without).
    pub faults: bool,
    pub records: Vec<TxnRecord>,
    /// The initial puts: `(key, version)`.
    pub setup: Vec<(Bytes, LogIndex)>,
    pub applied: Vec<Applied>,
    /// Every account's final value, read at its leader after healing.
    pub final_values: Vec<(Bytes, Option<Bytes>)>,
    /// Locks held by any replica after healing and recovery.
    pub locks_left: usize,
    /// What the leaders' foresight and reservations did (live replicas at the end).
    pub foreseen: LeaderReads,
    /// Reads of several keys in one request the clients had answered.
    pub reads_together: u64,
    /// Transfers the clients dropped after their reads for update (reservations released).
    pub dropped: u64,
    /// Panics and broken invariants of the hosts.
    pub failures: Vec<String>,
    /// Shard moves finished: `(table, shard, where it went)`.
    pub moves: Vec<(String, u32, ShardMove)>,
    /// Locks, and recovery coordinators' decision records, that the moves' frozen states
    /// carried to the new groups.
    pub moved_locks: usize,
    pub moved_decisions: usize,
    /// Leaders crashed with a prepare appended but not yet applied (the targeted fault).
    pub prepare_crashes: usize,
    /// Random node crashes.
    pub crashes: usize,
    pub end: Instant,
    /// Kairos: the rest of what its checkers judge.
    pub kairos: Option<KairosTrace>,
    pub violations: Vec<Violation>,
}

/// The live replicas' foresight and reservation counters, summed (a crash resets a
/// replica's): evidence that a run exercised them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaderReads {
    /// Transaction reads answered from a leader's foresight.
    pub reads_foreseen: u64,
    /// Prepares a leader answered `Abort` without an entry.
    pub prepares_foreseen_aborted: u64,
    /// Reads for update held back by a reservation.
    pub reads_held: u64,
    /// Reservations a dropped transaction released.
    pub reservations_released: u64,
}

impl LeaderReads {
    fn add(self, s: strata_log::LogStats) -> LeaderReads {
        self.plus(LeaderReads {
            reads_foreseen: s.reads_foreseen,
            prepares_foreseen_aborted: s.prepares_foreseen_aborted,
            reads_held: s.reads_held,
            reservations_released: s.reservations_released,
        })
    }

    fn plus(self, o: LeaderReads) -> LeaderReads {
        LeaderReads {
            reads_foreseen: self.reads_foreseen + o.reads_foreseen,
            prepares_foreseen_aborted: self.prepares_foreseen_aborted + o.prepares_foreseen_aborted,
            reads_held: self.reads_held + o.reads_held,
            reservations_released: self.reservations_released + o.reservations_released,
        }
    }
}

impl TxnReport {
    pub fn committed(&self) -> usize {
        self.records
            .iter()
            .filter(|r| r.txn.is_some() && r.outcome == client::Known::Committed)
            .count()
    }
    pub fn aborted(&self) -> usize {
        self.records.iter().filter(|r| r.outcome == client::Known::Aborted).count()
    }

    /// One line of what the run did: its records and outcomes, locks left, moves and what
    /// they carried, crashes, and on a Kairos table [`TxnReport::kairos_summary`].
    pub fn summary(&self) -> String {
        format!(
            "{} — {} transactions and reads, {} committed, {} aborted, {} locks left; {} move(s) \
             carrying {} lock(s) and {} decision record(s), {} leader(s) crashed preparing, {} \
             other crash(es); foreseen: {} read(s), {} abort(s); {} read(s) for update held; {} \
             read(s) of several keys; {} dropped before their prepare, {} reservation(s) \
             released{}",
            if self.violations.is_empty() { "ok" } else { "FAILED" },
            self.records.len(),
            self.committed(),
            self.aborted(),
            self.locks_left,
            self.moves.len(),
            self.moved_locks,
            self.moved_decisions,
            self.prepare_crashes,
            self.crashes,
            self.foreseen.reads_foreseen,
            self.foreseen.prepares_foreseen_aborted,
            self.foreseen.reads_held,
            self.reads_together,
            self.dropped,
            self.foreseen.reservations_released,
            self.kairos_summary()
        )
    }

    /// On a Kairos table: the moved table, its abort reasons and the clocks' offsets (empty
    /// otherwise).
    pub fn kairos_summary(&self) -> String {
        use strata_wire::txn::AbortReason::*;
        let Some(k) = &self.kairos else { return String::new() };
        let moved: Vec<&str> = self.moves.iter().map(|(t, _, _)| t.as_str()).collect();
        let offsets: Vec<String> =
            k.skews.iter().map(|s| format!("{}us", s.offset_ns / 1_000)).collect();
        let reasons = [
            ("stale", Stale),
            ("prepared", PreparedConflict),
            ("rw", ReadWriteConflict),
            ("ww", WriteWriteConflict),
            ("ts-order", TimestampOrder),
            ("too-old", TooOld),
            ("recovered", Recovered),
        ];
        let aborts: Vec<String> =
            reasons.iter().map(|(n, r)| format!("{n} {}", self.aborted_for(*r))).collect();
        format!(
            "; moved {moved:?}; aborts by vote: {}; clock offsets {}",
            aborts.join(", "),
            offsets.join(" ")
        )
    }

    /// Transactions that received a vote of `Abort(reason)`.
    pub fn aborted_for(&self, reason: strata_wire::txn::AbortReason) -> usize {
        let voted = |r: &&TxnRecord| r.votes.iter().any(|(_, v)| *v == Vote::Abort(reason));
        self.records.iter().filter(voted).count()
    }
}

/// A transactional table like the harness's (`sync`, leader reads) with `shards` shards.
pub fn table_def(shards: u32) -> TableDef {
    TableDef {
        name: TABLE.into(),
        engine: TableEngine::Log,
        durability: TableDurability::Sync,
        replication: TableReplication::Sync,
        reads: TableReads::Leader,
        shards,
        timers: TableTimers::Default,
        leaders: Vec::new(),
        txn: TableTxn::Rifl,
        validation: Default::default(),
    }
}

pub fn accounts() -> Vec<Bytes> {
    (0..ACCOUNTS).map(|i| Bytes::from(format!("acct{i}"))).collect()
}

/// Runs one seeded transaction run and checks it.
pub fn run(seed: u64, opts: &TxnSimOptions) -> TxnReport {
    let mut rng = Prng::new(seed ^ 0x0074_786e_5f73_696d);
    let layout = Layout::new(opts.mode);
    let kairos_mode = opts.mode.is_kairos();
    let defs = layout.defs();
    let tables: Vec<Catalogued> =
        defs.iter().map(|def| Catalogued { def: def.clone(), moved: Default::default() }).collect();
    let catalog = catalog::encode(&tables);
    let (loss, client_loss) = if opts.faults { (0.01, 0.01) } else { (0.0, 0.0) };
    let mut net = HostNet::matrix(vec![vec![300; NODES]; NODES], 100, loss, 200, client_loss);
    if opts.faults {
        net.links.dup = 0.01;
    }
    let (canary, t_tx) = (opts.canary, opts.t_tx);
    // A canary is planted in every table of the run (a Kairos validator's in whichever
    // validates).
    let overrides: Vec<(String, strata_log::LogConfig)> = defs
        .iter()
        .map(|def| {
            let mut cfg = catalog::log_config(def, NODES).expect("a valid table");
            cfg.planted_bug = canary;
            (def.name.clone(), cfg)
        })
        .collect();
    let tune: crate::host::Tune = Box::new(move |_, cfg| {
        cfg.txn_timeout_per_object = t_tx;
        if canary.is_some() {
            cfg.log_overrides.extend(overrides.iter().cloned());
        }
    });
    let mut c = HostCluster::with(ClusterOptions {
        nodes: NODES,
        net,
        seed,
        net_prng: None,
        clocks: None,
        start: Instant(1_000_000_000),
        lease_term: opts.lease_term,
        shard_rate_limit: None,
        observe: true,
        tune: Some(tune),
        catalog,
    });
    let mut rec = Recorder {
        layout: layout.clone(),
        applied: Vec::new(),
        kairos: kairos_mode.then(KairosTrace::default),
        replayed: BTreeMap::new(),
    };
    run_for(&mut c, Duration::from_secs(3), &mut rec);
    let setup_client = opts.clients;
    let lease0 = lease(&mut c, setup_client, &mut rec);
    let mut setup = Vec::new();
    if kairos_mode {
        let done = kairos_setup(&mut c, setup_client, &lease0, &mut rec);
        rec.kairos.as_mut().expect("kairos").setup = Some(done);
    } else {
        for (i, key) in accounts().into_iter().enumerate() {
            let rifl = envelope(&lease0, i as u64 + 1);
            let body = Request::LogWrite {
                table: TABLE.into(),
                key: key.clone(),
                op: LogWriteOp::Put(Bytes::from(INITIAL.to_string())),
                immediate: false,
            };
            match call_leader(&mut c, setup_client, Some(rifl), body, &mut rec) {
                Response::LogWritten { index, .. } => setup.push((key, index)),
                other => panic!("seed {seed}: setup write: {other:?}"),
            }
        }
    }
    // Kairos clocks (their own random stream, so the draws below are unchanged).
    let mut krng = Prng::new(seed ^ 0x006b_6169_726f_7300);
    if let Some(k) = rec.kairos.as_mut() {
        (k.strict_eps, k.clients_start) = (opts.strict_eps, c.now);
    }
    // The `KairosNoTimestampBump` canary's client half.
    let client_bug = match canary {
        Some(PlantedBug::KairosNoTimestampBump) => Some(strata_kairos::PlantedBug::NoTimestampBump),
        _ => opts.client_bug,
    };
    // The clients, two of them with a fault of their own (three on a Kairos table).
    let mut clients: Vec<TxnClient> = (0..opts.clients)
        .map(|i| {
            let fault = match (opts.faults, i) {
                (true, 0) if rng.chance(0.5) => Some(ClientFault::CrashAfterPrepare),
                (true, 1) => {
                    Some(ClientFault::PauseAfterPrepare(opts.pause.unwrap_or(opts.t_tx * 8)))
                }
                (true, 2) if kairos_mode && !opts.stall.is_zero() => {
                    Some(ClientFault::StallBeforePrepare(opts.stall))
                }
                _ => None,
            };
            let g = lease(&mut c, i, &mut rec);
            let txns = if matches!(fault, Some(ClientFault::CrashAfterPrepare)) {
                3
            } else {
                opts.txns_per_client
            };
            let renew = opts.lease_term / 4;
            let kairos = kairos_mode.then(|| {
                let skew = match (opts.skew, opts.skews.len()) {
                    (false, _) => Skew::NONE,
                    (true, 0) => Skew::draw(&mut krng),
                    (true, n) => opts.skews[i % n],
                };
                rec.kairos.as_mut().expect("kairos").skews.push(skew);
                let cache = opts.cache.map(|policy| (policy, ACCOUNTS));
                let strict = opts.strict_eps;
                KairosSide::new(g.lease_id as u32, skew, c.now, &layout, client_bug, cache, strict)
            });
            let keys = accounts();
            TxnClient::new(i, &layout, keys, NODES, g, txns, fault, renew, rng.fork(), kairos)
        })
        .collect();
    for cl in &mut clients {
        let now = c.now;
        cl.poll(&mut c, now);
    }
    // Node faults: crash a node now and then, restart it a little later.
    const CRASH: u64 = 1 << 32;
    const RESTART: u64 = 2 << 32;
    const CRASH_PREPARING: u64 = 4 << 32;
    let mut crashes = 0;
    if opts.faults {
        let mut at = c.now;
        for _ in 0..rng.range(1, 4) {
            at += Duration::from_millis(rng.range(100, 1500));
            let node = rng.range(0, NODES as u64);
            c.schedule(at, CRASH | node);
            c.schedule(at + Duration::from_millis(rng.range(200, 900)), RESTART | node);
        }
    }
    // The scenarios' own draws, so the draws above stay what they were.
    let mut frng = Prng::new(seed ^ 0x6d6f_7665_7363_656e);
    // A shard move while transactions hold locks on it (`mover` docs).
    let mut mover = (opts.faults && opts.move_shard).then(|| {
        // A shard that holds accounts (one of the three may hold none).
        let account = frng.range(0, ACCOUNTS as u64) as usize;
        // Decision records exist while recovery runs: early on, for the transactions of the
        // crashing and the pausing client.
        let want_decision = frng.chance(0.25);
        let from =
            c.now + Duration::from_millis(if want_decision { 0 } else { frng.range(200, 1500) });
        let without_leader = frng.chance(0.5);
        let pick = frng.next_u64();
        // With sharded validators, half the moves move a validator shard.
        let table = if layout.sharded() && frng.chance(0.5) { 1 } else { 0 };
        let (_, shard) = layout.part(table, &accounts()[account]);
        let client = opts.clients + 1;
        let name = layout.name(table);
        let mut m =
            Mover::new(&mut c, client, name, shard, from, want_decision, without_leader, pick);
        m.plant = opts.move_plant;
        (table, m)
    });
    // Leaders crashed in the middle of a prepare (`Preparing` docs).
    let mut preparing = Preparing {
        left: if opts.faults { opts.prepare_crashes } else { 0 },
        next_at: c.now + Duration::from_millis(frng.range(20, 500)),
        waiting: None,
        crashes: 0,
    };
    let deadline = c.now + Duration::from_secs(60);
    // Kairos: the clients start once all of them registered (`TxnClient::open`).
    let mut gated = kairos_mode;
    let busy = |clients: &[TxnClient], mover: &Option<(usize, Mover)>| {
        !clients.iter().all(TxnClient::finished)
            || mover.as_ref().is_some_and(|(_, m)| !m.finished())
    };
    while c.now < deadline && busy(&clients, &mover) {
        let Some(stepped) = c.next(deadline) else { break };
        match stepped {
            Stepped::Node(step) => {
                if let Some((_, m)) = mover.as_mut() {
                    m.watch(&mut c, &step);
                }
                if let Some((node, part, index)) = preparing.due(&c, &step, &layout) {
                    if frng.chance(0.5) {
                        preparing.crash(&mut c, node, &mut frng, RESTART);
                    } else {
                        // A little later: replicated, perhaps persisted, but not yet applied.
                        let at = c.now + Duration::from_micros(frng.range(100, 1500));
                        preparing.waiting = Some((node, part, index, c.incarnation(node)));
                        c.schedule(at, CRASH_PREPARING);
                    }
                }
                let (node, adopted) = (step.node, adopted(&step));
                observe(&mut c, step, &mut rec, &clients);
                if let Some((table, m)) = mover.as_ref().filter(|_| adopted) {
                    record_adopted(&c, node, (*table, m.shard), &mut rec);
                }
            }
            Stepped::Harness(CRASH_PREPARING) => {
                if let Some((node, part, index, incarnation)) = preparing.waiting.take() {
                    let unapplied = c.incarnation(node) == incarnation
                        && all_up(&c)
                        && c.nodes[node]
                            .host
                            .as_ref()
                            .and_then(|h| h.shard_replica(layout.name(part.0), part.1))
                            .is_some_and(|r| r.role() == Role::Leader && r.applied_index() < index);
                    if unapplied {
                        preparing.crash(&mut c, node, &mut frng, RESTART);
                    }
                }
            }
            Stepped::Harness(token) if token & CRASH != 0 => {
                let node = (token & 0xffff) as usize;
                if all_up(&c) {
                    c.crash(node);
                    crashes += 1;
                }
            }
            Stepped::Harness(token) if token & RESTART != 0 => {
                let node = (token & 0xffff) as usize;
                if !c.is_up(node) {
                    restart(&mut c, node, &mut rec);
                }
            }
            _ => {}
        }
        let now = c.now;
        if gated && clients.iter().all(|cl| cl.registered(now)) {
            gated = false;
            clients.iter_mut().for_each(TxnClient::open);
        }
        if let Some(k) = rec.kairos.as_ref() {
            wake_stalled(&mut clients, k, now);
        }
        for (client, resp) in std::mem::take(&mut c.client_inbox) {
            if let Some(cl) = clients.get_mut(client) {
                cl.on_response(&mut c, now, resp);
            } else if let Some((_, m)) = mover.as_mut().filter(|(_, m)| m.client == client) {
                m.on_response(&mut c, resp);
            }
        }
        for client in std::mem::take(&mut c.client_wakes) {
            if let Some(cl) = clients.get_mut(client) {
                cl.poll(&mut c, now);
            } else if let Some((_, m)) = mover.as_mut().filter(|(_, m)| m.client == client) {
                m.poll(&mut c);
            }
        }
    }
    let unfinished_move = mover.as_ref().filter(|(_, m)| !m.finished()).map(|(_, m)| m.describe());
    // Heal: every node up, no loss; then time for recovery to finish what clients left.
    for i in 0..NODES {
        if !c.is_up(i) {
            restart(&mut c, i, &mut rec);
        }
    }
    c.calm();
    let end = c.now;
    for cl in &mut clients {
        cl.abandon(end);
    }
    // Recovery needs `T_TX` per object (two at most here), then a few round trips.
    run_for(&mut c, Duration::from_secs(3) + opts.t_tx * 4, &mut rec);
    let finals: Vec<(Bytes, Option<Bytes>, Timestamp)> = accounts()
        .into_iter()
        .map(|key| {
            let body = Request::LogRead {
                table: TABLE.into(),
                key: key.clone(),
                min_index: None,
                sharer: false,
                intent: ReadIntent::Plain,
            };
            match call_leader(&mut c, setup_client, None, body, &mut rec) {
                Response::LogValue { value, vts, .. } => (key, value, vts.unwrap_or_default()),
                other => {
                    let unreadable = Bytes::from(format!("unreadable: {other:?}"));
                    (key, Some(unreadable), Timestamp::ZERO)
                }
            }
        })
        .collect();
    if let Some(k) = rec.kairos.as_mut() {
        k.final_vts = finals.iter().map(|(k, _, vts)| (k.clone(), *vts)).collect();
    }
    let final_values = finals.into_iter().map(|(k, v, _)| (k, v)).collect();
    let locks_left = (0..NODES)
        .filter_map(|i| {
            c.operate(i, |h, _| {
                layout
                    .parts()
                    .into_iter()
                    .filter_map(|(t, s)| h.shard_replica(layout.name(t), s))
                    .map(|r| r.locks().count())
                    .sum::<usize>()
            })
        })
        .map(|(n, _)| n)
        .sum();
    // The live replicas' foresight and reservation counters (a crash resets a replica's):
    // evidence that the run exercised them (`strata_log`'s foresight and reservations).
    let foreseen = (0..NODES)
        .filter_map(|i| {
            c.operate(i, |h, _| {
                let stats = layout
                    .parts()
                    .into_iter()
                    .filter_map(|(t, s)| h.shard_replica(layout.name(t), s))
                    .map(|r| r.stats());
                stats.fold(LeaderReads::default(), LeaderReads::add)
            })
        })
        .fold(LeaderReads::default(), |sum, (node, _)| sum.plus(node));
    let failures = c.nodes.iter().filter_map(|n| n.failure.clone()).collect();
    let frozen = mover.as_ref().and_then(|(_, m)| m.frozen.as_ref());
    let moves = mover
        .iter()
        .filter_map(|(t, m)| Some((layout.name(*t).to_string(), m.shard, m.done.clone()?)))
        .collect();
    let reads_together = clients.iter().map(|cl| cl.reads_together).sum();
    let dropped = clients.iter().map(|cl| cl.dropped).sum();
    let mut report = TxnReport {
        seed,
        layout,
        faults: opts.faults,
        records: clients.into_iter().flat_map(|cl| cl.done).collect(),
        setup,
        applied: rec.applied,
        final_values,
        locks_left,
        foreseen,
        reads_together,
        dropped,
        failures,
        moves,
        moved_locks: frozen.map_or(0, |s| s.locks.len()),
        moved_decisions: frozen.map_or(0, |s| s.decisions.len()),
        prepare_crashes: preparing.crashes,
        crashes,
        end,
        kairos: rec.kairos,
        violations: Vec::new(),
    };
    report.violations = check::check_all(&report);
    if let Some(m) = unfinished_move {
        report.violations.push(Violation {
            checker: "txn-move-finished",
            at: None,
            detail: format!("the shard move did not finish within the run: {m}"),
        });
    }
    report
}

/// Wakes a client stalled before its prepares ([`ClientFault::StallBeforePrepare`]) once
/// every shard that will validate its reads last announced a `ts_GC` above their freshness:
/// its prepare then meets the `TooOld` check by construction, not by chance (a leader
/// change or a member holding `ts_GC` back may still let it through, rightly).
fn wake_stalled(clients: &mut [TxnClient], k: &KairosTrace, now: Instant) {
    for cl in clients.iter_mut() {
        let Some((freshness, parts)) = cl.stalled() else { continue };
        let passed = |p: &Part| k.last_ts_gc.get(p).is_some_and(|gc| *gc > freshness);
        if parts.iter().all(passed) {
            cl.wake(now);
        }
    }
}

/// The accounts' initial values on a Kairos table (which refuses plain writes): one
/// blind-write transaction of every account, prepared at every participant's leader, then
/// decided everywhere (kairos.md §5.4 objects, [`kairos::objects`]). Its prepares go one
/// after the other, so a lost message can outlast `T_TX` and let recovery abort it: then it
/// runs again under a new block of ids. Returns its id, commit timestamp and when it was
/// decided.
fn kairos_setup(
    c: &mut HostCluster,
    client: usize,
    g: &LeaseStatus,
    rec: &mut Recorder,
) -> (TxnId, Timestamp, Instant) {
    let layout = rec.layout.clone();
    let value = TxnAction::Write(Bytes::from(INITIAL.to_string()));
    let writes = accounts().into_iter().map(|k| (k, (value.clone(), None))).collect();
    let objects = kairos::objects(&layout, &writes);
    let block = objects.len() as u64 + 1;
    for attempt in 0..10 {
        let base = 1 + attempt * block;
        let all: Vec<TxnObject> = objects
            .iter()
            .enumerate()
            .map(|(i, o)| TxnObject {
                table: layout.name(o.table).to_string(),
                key: o.key.clone(),
                seq: base + 1 + i as u64,
            })
            .collect();
        let mut parts: BTreeMap<Part, Vec<TxnOp>> = BTreeMap::new();
        for (o, obj) in objects.iter().zip(&all) {
            let (key, action) = (o.key.clone(), o.action.clone());
            let op = TxnOp { key, seq: obj.seq, expect: None, action };
            parts.entry(layout.part(o.table, &o.key)).or_default().push(op);
        }
        let commit_ts = Timestamp::new(c.now.as_nanos(), g.lease_id as u32);
        let (mut prepared, mut decided) = (true, true);
        for (&(table, shard), ops) in &parts {
            let vts = vec![None; ops.len()];
            let kairos = kairos::prepare_fields(&layout, table, (commit_ts, None), false, vts);
            let body = Request::TxnPrepare {
                table: layout.name(table).to_string(),
                shard,
                read_only: false,
                all: all.clone(),
                ops: ops.clone(),
                kairos: Some(kairos),
            };
            match call_leader(c, client, Some(envelope(g, base)), body, rec) {
                Response::TxnVotes { votes, decided: d } => {
                    prepared &= votes.iter().all(|(_, v)| *v == Vote::Prepared);
                    decided &= d;
                }
                other => panic!("the setup transaction's prepare at {table}/{shard}: {other:?}"),
            }
        }
        let decision = if prepared { Decision::Commit } else { Decision::Abort };
        let decided_at = c.now;
        if parts.len() > 1 || !decided {
            for (&(table, shard), ops) in &parts {
                let seqs = ops.iter().map(|o| o.seq).collect();
                let table = layout.name(table).to_string();
                let body = Request::TxnDecide { table, shard, decision, seqs };
                match call_leader(c, client, Some(envelope(g, base)), body, rec) {
                    Response::TxnDecided => {}
                    other => panic!("the setup transaction's decision at {shard}: {other:?}"),
                }
            }
        }
        if prepared {
            return (TxnId { client_id: g.lease_id, base }, commit_ts, decided_at);
        }
    }
    panic!("the setup transaction aborted ten times");
}

/// Whether the step adopted a shard move (answered `ShardAdopted`: the node replaced its
/// replica in this step).
fn adopted(step: &crate::host::Step) -> bool {
    step.replies.iter().any(|(_, r)| matches!(r.body, Response::ShardAdopted { .. }))
}

fn all_up(c: &HostCluster) -> bool {
    (0..NODES).all(|i| c.is_up(i))
}

/// The targeted fault: a participant's leader crashes in the middle of a prepare — right after
/// it appended the `Prepare` entry (its disk has not synced it; the followers may have it), or
/// a little later while the entry is still unapplied, so unanswered — and restarts later.
/// Armed `left` times, each from `next_at` on, when every node is up.
struct Preparing {
    left: u32,
    next_at: Instant,
    /// A crash scheduled a little later: `(node, participant, the entry's index,
    /// incarnation)`.
    waiting: Option<(usize, Part, LogIndex, u64)>,
    crashes: usize,
}

impl Preparing {
    /// Whether `step` is a leader appending a prepare while the fault is armed: `(node,
    /// participant, the entry's index)`.
    fn due(
        &self,
        c: &HostCluster,
        step: &Step,
        layout: &Layout,
    ) -> Option<(usize, Part, LogIndex)> {
        if self.left == 0 || self.waiting.is_some() || c.now < self.next_at || !all_up(c) {
            return None;
        }
        let r = c.nodes[step.node].host.as_ref()?;
        step.persists.iter().find_map(|(id, records)| {
            let table = layout.index_of_id(id.table)?;
            let replica = r.shard_replica(layout.name(table), id.shard)?;
            if replica.role() != Role::Leader {
                return None;
            }
            // The leader's own append (in its epoch), not a follower's copy.
            let own = |e: &&strata_log::LogEntry| {
                matches!(e.op, LogOp::Prepare(_)) && e.index.epoch == replica.epoch()
            };
            records.iter().find_map(|(_, p)| match p {
                Persist::Append(es) => {
                    es.iter().find(own).map(|e| (step.node, (table, id.shard), e.index))
                }
                _ => None,
            })
        })
    }

    fn crash(&mut self, c: &mut HostCluster, node: usize, rng: &mut Prng, restart: u64) {
        c.crash(node);
        self.crashes += 1;
        self.left -= 1;
        let up = c.now + Duration::from_millis(rng.range(200, 900));
        c.schedule(up, restart | node as u64);
        self.next_at = up + Duration::from_millis(rng.range(50, 500));
    }
}

/// Records a step (its transaction events; on a Kairos table, its [`KairosTrace`]) and sends
/// its replies on to the clients.
fn observe(c: &mut HostCluster, step: Step, rec: &mut Recorder, clients: &[TxnClient]) {
    observe_from(c, step, rec, clients, Origin::Applied);
}

fn observe_from(
    c: &mut HostCluster,
    step: Step,
    rec: &mut Recorder,
    clients: &[TxnClient],
    origin: Origin,
) {
    if let Some(k) = rec.kairos.as_mut() {
        k.observe(c, &step, &rec.layout, clients);
    }
    c.send_replies(step.replies);
    rec.record(step.node, c.now, step.audit, origin);
}

/// [`Applied::Locks`] of `node`'s replica of `part` now (after a move's adoption).
fn record_adopted(c: &HostCluster, node: usize, (table, shard): Part, rec: &mut Recorder) {
    let Some(h) = c.nodes[node].host.as_ref() else { return };
    let locks = h
        .shard_replica(rec.layout.name(table), shard)
        .map(|r| r.locks().map(|l| (l.key.clone(), l.txn, l.seq)).collect())
        .unwrap_or_default();
    rec.replayed.remove(&(node, (table, shard)));
    rec.applied.push(Applied::Locks { node, table, shard, locks });
}

impl Recorder {
    fn record(&mut self, node: usize, at: Instant, audit: Vec<Audit>, origin: Origin) {
        for a in audit {
            let Audit::Log { table, shard, event } = a else { continue };
            let Some(table) = self.layout.index_of(&table) else { continue };
            let replica = (node, (table, shard));
            match event {
                LogEvent::Txn(event) if origin == Origin::Replay => {
                    self.replayed.entry(replica).or_default().push((event, at));
                }
                LogEvent::Txn(event) => {
                    self.confirm_replayed(replica);
                    self.applied.push(Applied::Event { node, table, shard, event, at });
                }
                LogEvent::Applied { .. } => self.confirm_replayed(replica),
                LogEvent::Truncated { after, .. } => {
                    if let Some(held) = self.replayed.get_mut(&replica) {
                        held.retain(|(e, _)| e.index() <= after);
                    }
                }
                _ => {}
            }
        }
    }

    /// The replica applied past its replay: the replayed entries it kept are committed.
    fn confirm_replayed(&mut self, replica: (usize, Part)) {
        let (node, (table, shard)) = replica;
        for (event, at) in self.replayed.remove(&replica).unwrap_or_default() {
            self.applied.push(Applied::Event { node, table, shard, event, at });
        }
    }

    fn restarted(&mut self, node: usize) {
        self.replayed.retain(|(n, _), _| *n != node);
        self.applied.push(Applied::Restarted { node });
    }
}

fn restart(c: &mut HostCluster, node: usize, rec: &mut Recorder) {
    rec.restarted(node);
    let step = c.start(node);
    // A moved-in replica's log starts with its `Install` entry: its locks come first.
    for (table, shard) in rec.layout.parts() {
        let name = rec.layout.name(table);
        let r = c.nodes[node].host.as_ref().and_then(|h| h.shard_replica(name, shard));
        if let Some(LogOp::Install(s)) = r.and_then(|r| r.entries().first()).map(|e| &e.op) {
            let locks = s.locks.iter().map(|l| (l.key.clone(), l.txn, l.seq)).collect();
            rec.applied.push(Applied::Locks { node, table, shard, locks });
        }
    }
    if let Some(step) = step {
        observe_from(c, step, rec, &[], Origin::Replay);
    }
}

fn run_for(c: &mut HostCluster, d: Duration, rec: &mut Recorder) {
    let until = c.now + d;
    while let Some(stepped) = c.next(until) {
        if let Stepped::Node(step) = stepped {
            observe(c, step, rec, &[]);
        }
        c.client_inbox.clear();
        c.client_wakes.clear();
    }
    c.now = c.now.max(until);
}

fn envelope(g: &LeaseStatus, seq: u64) -> Rifl {
    Rifl {
        rpc: RpcId { client_id: g.lease_id, seq },
        first_incomplete: seq,
        lease: LeaseInfo {
            client_id: g.lease_id,
            expiration: g.expiration,
            timestamp: g.cluster_time,
        },
    }
}

/// Sends `body` from `client` to `node` and runs until its answer (`None`: none within 1 s).
fn call(
    c: &mut HostCluster,
    client: usize,
    node: usize,
    rifl: Option<Rifl>,
    body: Request,
    rec: &mut Recorder,
) -> Option<Response> {
    let corr = c.inputs | (1 << 62);
    c.send_request(client, node, ClientRequest { corr, rifl, body });
    let until = c.now + Duration::from_secs(1);
    while c.now < until {
        if let Some(i) = c.client_inbox.iter().position(|(cl, r)| *cl == client && r.corr == corr) {
            let (_, ClientResponse { body, .. }) = c.client_inbox.remove(i);
            return Some(body);
        }
        match c.next(until) {
            Some(Stepped::Node(step)) => observe(c, step, rec, &[]),
            Some(_) => {}
            None => break,
        }
    }
    None
}

/// `body` to the leader of its shard, trying every node (the replicas a `Moved` answer names,
/// once one does), for up to 20 s.
fn call_leader(
    c: &mut HostCluster,
    client: usize,
    rifl: Option<Rifl>,
    body: Request,
    rec: &mut Recorder,
) -> Response {
    let until = c.now + Duration::from_secs(20);
    let mut candidates: Vec<usize> = (0..NODES).collect();
    let mut node = 0;
    let mut last = None;
    while c.now < until {
        match call(c, client, node, rifl, body.clone(), rec) {
            Some(Response::LogRejected(LogFailure::Moved { replicas })) if !replicas.is_empty() => {
                candidates = replicas.iter().map(|r| r.0 as usize).collect();
                let at = candidates.iter().position(|&r| r == node);
                node = candidates[at.map_or(0, |i| (i + 1) % candidates.len())];
            }
            Some(Response::LogRejected(
                LogFailure::NotLeader { .. }
                | LogFailure::Unavailable
                | LogFailure::Timeout
                | LogFailure::Locked,
            ))
            | None => {
                let at = candidates.iter().position(|&r| r == node);
                node = candidates[at.map_or(0, |i| (i + 1) % candidates.len())];
                let later = c.now + Duration::from_millis(20);
                run_for(c, later.saturating_since(c.now), rec);
            }
            Some(r) => return r,
        }
        last = Some(node);
    }
    panic!("no leader answered {body:?} (last at n{last:?})");
}

fn lease(c: &mut HostCluster, client: usize, rec: &mut Recorder) -> LeaseStatus {
    let mut last = None;
    for _ in 0..50 {
        for node in 0..NODES {
            match call(c, client, node, None, Request::RenewLease { lease_id: 0 }, rec) {
                Some(Response::Lease(g)) => return g,
                other => last = other,
            }
        }
        run_for(c, Duration::from_millis(100), rec);
    }
    panic!("no lease granted (last answer {last:?})");
}
