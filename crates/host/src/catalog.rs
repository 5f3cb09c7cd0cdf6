//! The table catalog as data (no files: the runtime stores the bytes [`encode`] makes and hands
//! [`decode`] what it read back).
//!
//! # Catalog [DECISION]
//!
//! `strata table create` sends the definition to every node; each node's host core records it
//! and asks its runtime to store the whole catalog durably (`Storage::Catalog`: a temporary file,
//! fsynced, renamed, directory fsynced, in `strata-node`) before it starts the table's shards.
//! Creation is idempotent for an identical definition and refused for a conflicting one. A
//! replicated catalog is future work.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use strata_log::{DurabilityMode, LogConfig, ReadPolicy, Replication};
use strata_wire::client::{
    validated_table, validators_table, TableDef, TableDurability, TableEngine, TableReads,
    TableReplication, TableTimers, TableTxn, TableValidation, MAX_VALIDATORS, VALIDATORS_SUFFIX,
};
use strata_wire::log::ShardMove;
use strata_wire::NodeId;

/// The most shards a table may have (each is a replica, a WAL and a thread on every node).
pub const MAX_SHARDS: u32 = 64;
/// The longest table name (it names a directory).
pub const MAX_TABLE_NAME: usize = 64;
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
        leaders: Vec::new(),
        txn: TableTxn::None,
        validation: Default::default(),
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
    let mut cfg = LogConfig::with(durability, reads);
    // Only a RIFL table's transactions read what the leader foresees.
    cfg.foresee_writes = def.txn == TableTxn::Rifl;
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
    // A companion validator table is named after its table (`T.validators`, a name no user
    // table can have) and made by the node with it, never asked for on its own.
    let name = match def.validation {
        TableValidation::Validators => validated_table(&def.name).ok_or_else(|| {
            format!("a validator table's name ends in {VALIDATORS_SUFFIX:?}: {:?}", def.name)
        })?,
        _ => def.name.as_str(),
    };
    let name_ok = !name.is_empty()
        && name.len() <= MAX_TABLE_NAME
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && !name.starts_with('-');
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
    if def.txn != TableTxn::None {
        let mode = txn_name(def.txn);
        // Votes and decisions are acknowledged only once applied from entries committed on a
        // majority (the write path of `sync` durability): an `async` or `cad` leader applies
        // before replicating, and a vote it gave could vanish with it — the client would
        // decide `Commit` on a lock nobody holds (rifl.md R-G7). Plain reads of a key must see
        // every decision whose outcome was returned (§5.9): only the leader's applied state
        // holds them all.
        if def.durability != TableDurability::Sync {
            return Err(format!(
                "--txn {mode} needs --durability sync: a prepare's vote must be durable on a majority before it is answered (this table is {})",
                durability_name(def.durability)
            ));
        }
        if def.reads != TableReads::Leader {
            return Err(format!(
                "--txn {mode} needs --reads leader: transactions read the latest decided values, which only the leader is sure to hold (this table reads at {})",
                reads_name(def.reads)
            ));
        }
    }
    match def.validation {
        TableValidation::Server => {}
        _ if def.txn != TableTxn::Kairos => {
            return Err("--validation applies to --txn kairos tables only".into())
        }
        TableValidation::Sharded(v) if v == 0 || v > MAX_VALIDATORS => {
            return Err(format!(
                "--validation sharded:V takes 1 to {MAX_VALIDATORS} validators, not {v}"
            ))
        }
        TableValidation::Sharded(_) | TableValidation::Validators => {}
    }
    if def.leaders.len() > def.shards as usize {
        return Err(format!(
            "{} preferred leaders for {} shard(s): give at most one per shard",
            def.leaders.len(),
            def.shards
        ));
    }
    log_config(def, n).map_err(|e| e.to_string())
}

// ---- the catalog's stored form ----

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
    /// Preferred shard leaders (node ids). Absent from catalogs written before them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    leaders: Vec<u32>,
    /// Shards that moved (rifl.md §5.7): their generation and replicas. A shard not listed
    /// is in generation 0 on every node. Absent from catalogs written before shard moves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    moved: Vec<MovedShard>,
    /// Transactions (`rifl`); absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    txn: Option<String>,
    /// Where a Kairos table validates (`sharded:V`, or `validators` for a companion table);
    /// absent: in its shards (`server`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    validation: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct MovedShard {
    shard: u32,
    generation: u32,
    replicas: Vec<u32>,
}

/// A catalogued table: its definition and where its moved shards live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Catalogued {
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
pub fn txn_name(t: TableTxn) -> &'static str {
    match t {
        TableTxn::None => "none",
        TableTxn::Rifl => "rifl",
        TableTxn::Kairos => "kairos",
    }
}
/// `server`, `sharded:V` or `validators` (the catalog's and the CLI's spelling).
pub fn validation_name(v: TableValidation) -> String {
    match v {
        TableValidation::Server => "server".into(),
        TableValidation::Sharded(n) => format!("sharded:{n}"),
        TableValidation::Validators => "validators".into(),
    }
}

/// The inverse of [`validation_name`] (`None`: not one of them; the bounds of `V` are
/// checked with the rest of the definition).
pub fn parse_validation(s: &str) -> Option<TableValidation> {
    match s {
        "server" => Some(TableValidation::Server),
        "validators" => Some(TableValidation::Validators),
        _ => s.strip_prefix("sharded:")?.parse().ok().map(TableValidation::Sharded),
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
            leaders: d.leaders.iter().map(|n| n.0).collect(),
            txn: (d.txn != TableTxn::None).then(|| txn_name(d.txn).into()),
            validation: (d.validation != TableValidation::Server)
                .then(|| validation_name(d.validation)),
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
            leaders: self.leaders.iter().copied().map(NodeId).collect(),
            txn: match self.txn.as_deref() {
                None | Some("none") => TableTxn::None,
                Some("rifl") => TableTxn::Rifl,
                Some("kairos") => TableTxn::Kairos,
                Some(v) => return Err(bad("transactions", v)),
            },
            validation: match self.validation.as_deref() {
                None => TableValidation::Server,
                Some(v) => parse_validation(v).ok_or_else(|| bad("validation", v))?,
            },
        })
    }
}

/// Reads a stored catalog (empty bytes: no catalog yet). The message names what is wrong.
pub fn decode(bytes: &[u8]) -> Result<Vec<Catalogued>, String> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let file: CatalogFile = serde_json::from_slice(bytes).map_err(|e| format!("corrupt: {e}"))?;
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

/// The stored form of a catalog (pretty JSON, so an operator can read it).
pub fn encode<'a>(tables: impl IntoIterator<Item = &'a Catalogued>) -> Vec<u8> {
    let file = CatalogFile { tables: tables.into_iter().map(CatalogEntry::from_table).collect() };
    serde_json::to_vec_pretty(&file).expect("a catalog serializes")
}

/// A definition in words, for messages: `engine log, durability cad, replication async,
/// reads active-set, timers default, 1 shard(s)`.
pub fn describe(d: &TableDef) -> String {
    let leaders = if d.leaders.is_empty() {
        String::new()
    } else {
        let ids: Vec<String> = d.leaders.iter().map(|n| n.0.to_string()).collect();
        format!(", preferred leaders {}", ids.join(","))
    };
    let txn: std::borrow::Cow<'_, str> = match d.txn {
        TableTxn::None => "".into(),
        TableTxn::Rifl => ", transactions rifl".into(),
        TableTxn::Kairos => match d.validation {
            TableValidation::Server => ", transactions kairos (server-side validation)".into(),
            TableValidation::Sharded(v) => format!(
                ", transactions kairos (sharded validation: {v} validator(s), the shards of {})",
                validators_table(&d.name)
            )
            .into(),
            TableValidation::Validators => format!(
                ", the kairos validators of table {}",
                validated_table(&d.name).unwrap_or("?")
            )
            .into(),
        },
    };
    format!(
        "engine log, durability {}, replication {}, reads {}, timers {}, {} shard(s){leaders}{txn}",
        durability_name(d.durability),
        replication_name(d.replication),
        reads_name(d.reads),
        timers_name(d.timers),
        d.shards
    )
}

/// The preferred leader of `shard` of `def` (its `leaders`, round-robin over the shards).
pub fn preferred_leader(def: &TableDef, shard: u32) -> Option<NodeId> {
    (!def.leaders.is_empty()).then(|| def.leaders[shard as usize % def.leaders.len()])
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    pub(crate) fn def(timers: TableTimers) -> TableDef {
        TableDef {
            name: "t".into(),
            engine: TableEngine::Log,
            durability: TableDurability::Cad,
            replication: TableReplication::Async,
            reads: TableReads::ActiveSet,
            shards: 2,
            timers,
            leaders: Vec::new(),
            txn: TableTxn::None,
            validation: Default::default(),
        }
    }

    #[test]
    fn the_catalog_keeps_timer_presets_and_moved_shards_and_reads_older_catalogs() {
        let moved = BTreeMap::from([(
            1,
            ShardMove { generation: 2, replicas: vec![NodeId(1), NodeId(3)] },
        )]);
        let tables = vec![
            Catalogued {
                def: TableDef { leaders: vec![NodeId(2), NodeId(0)], ..def(TableTimers::Geo) },
                moved,
            },
            Catalogued {
                def: TableDef { name: "d".into(), ..def(TableTimers::Default) },
                moved: BTreeMap::new(),
            },
            Catalogued { def: txn_def("x"), moved: BTreeMap::new() },
        ];
        assert_eq!(decode(&encode(&tables)).unwrap(), tables);
        // A catalog written before timer presets and shard moves existed has no `timers` and
        // no `moved`: the default preset, every shard in generation 0.
        let old = r#"{"tables":[{"name":"t","engine":"log","durability":"cad","replication":"async","reads":"active-set","shards":2}]}"#;
        let defaults = Catalogued { def: def(TableTimers::Default), moved: BTreeMap::new() };
        assert_eq!(decode(old.as_bytes()).unwrap(), vec![defaults]);
        assert_eq!(decode(b"").unwrap(), vec![]);
        assert!(decode(b"{").unwrap_err().starts_with("corrupt"));
    }

    fn txn_def(name: &str) -> TableDef {
        TableDef {
            name: name.into(),
            durability: TableDurability::Sync,
            replication: TableReplication::Sync,
            reads: TableReads::Leader,
            txn: TableTxn::Rifl,
            ..def(TableTimers::Default)
        }
    }

    #[test]
    fn transactional_tables_need_sync_durability_and_leader_reads() {
        assert!(check_table_def(&txn_def("x"), 3).is_ok());
        let cad = TableDef { durability: TableDurability::Cad, ..txn_def("x") };
        assert!(check_table_def(&cad, 3).unwrap_err().contains("--durability sync"));
        let any = TableDef { reads: TableReads::Any, ..txn_def("x") };
        assert!(check_table_def(&any, 3).unwrap_err().contains("--reads leader"));
        assert!(describe(&txn_def("x")).ends_with("transactions rifl"));
    }

    /// Only a RIFL table's plain writes are noted in the leader's foresight: its transactions'
    /// reads wait on them; elsewhere nothing reads the notes.
    #[test]
    fn only_rifl_tables_foresee_plain_writes() {
        assert!(log_config(&txn_def("x"), 3).unwrap().foresee_writes);
        let kairos = TableDef { txn: TableTxn::Kairos, ..txn_def("x") };
        assert!(!log_config(&kairos, 3).unwrap().foresee_writes);
        assert!(!log_config(&def(TableTimers::Default), 3).unwrap().foresee_writes);
    }

    /// A sharded Kairos table's companion: `T.validators`, V shards, at most one preferred
    /// leader per validator; it is valid (only under its reserved name) and the catalog keeps
    /// both tables' validation; V out of 1..=64 and validation without Kairos are refused.
    #[test]
    fn a_sharded_kairos_table_has_a_valid_companion_and_the_catalog_keeps_both() {
        let kairos = |v| TableDef {
            txn: TableTxn::Kairos,
            validation: v,
            leaders: vec![NodeId(1), NodeId(2)],
            ..txn_def("k")
        };
        let t = kairos(TableValidation::Sharded(1));
        let v = t.validators_def().expect("a companion");
        assert_eq!((v.name.as_str(), v.shards, v.leaders.len()), ("k.validators", 1, 1));
        assert_eq!(v.validation, TableValidation::Validators);
        assert!(check_table_def(&t, 3).is_ok() && check_table_def(&v, 3).is_ok());
        let renamed = TableDef { name: "k.v".into(), ..v.clone() };
        assert!(check_table_def(&renamed, 3).is_err(), "only the reserved suffix");
        let user = TableDef { validation: TableValidation::Server, ..v.clone() };
        assert!(check_table_def(&user, 3).unwrap_err().contains("invalid table name"));
        for bad in [0, MAX_VALIDATORS + 1] {
            assert!(check_table_def(&kairos(TableValidation::Sharded(bad)), 3).is_err());
        }
        let rifl = TableDef { validation: TableValidation::Sharded(2), ..txn_def("r") };
        assert!(check_table_def(&rifl, 3).unwrap_err().contains("--txn kairos"));
        assert!(kairos(TableValidation::Server).validators_def().is_none());
        let tables: Vec<Catalogued> =
            [t, v].into_iter().map(|def| Catalogued { def, moved: BTreeMap::new() }).collect();
        assert_eq!(decode(&encode(&tables)).unwrap(), tables);
        assert!(describe(&tables[0].def).contains("1 validator(s), the shards of k.validators"));
        assert!(describe(&tables[1].def).ends_with("the kairos validators of table k"));
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
}
