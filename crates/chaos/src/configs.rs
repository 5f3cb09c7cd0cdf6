//! The log-table configurations a harness compares (orca.md §5.11 and §8.2): the same fault
//! sequence is applied to one table of each, side by side in one cluster.

use strata_client::{TableDef, TableDurability, TableEngine, TableReads, TableReplication};

/// One configuration: a log table definition under a name of the paper's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableConfig {
    pub name: &'static str,
    pub durability: TableDurability,
    pub replication: TableReplication,
    pub reads: TableReads,
    pub about: &'static str,
}

use TableDurability as D;
use TableReads as R;
use TableReplication as Rp;

/// Every configuration, ORCA first.
pub const CONFIGS: &[TableConfig] = &[
    TableConfig {
        name: "orca",
        durability: D::Cad,
        replication: Rp::Async,
        reads: R::ActiveSet,
        about: "cad durability, active-set reads (async replication)",
    },
    TableConfig {
        name: "orca-sr",
        durability: D::Cad,
        replication: Rp::Sync,
        reads: R::ActiveSet,
        about: "cad durability, active-set reads (sync replication)",
    },
    TableConfig {
        name: "strong",
        durability: D::Sync,
        replication: Rp::Sync,
        reads: R::Leader,
        about: "strong-ZK: sync durability, leader reads",
    },
    TableConfig {
        name: "weak",
        durability: D::Async,
        replication: Rp::Async,
        reads: R::Any,
        about: "weak-ZK: async replication and persistence, reads anywhere",
    },
    TableConfig {
        name: "weak-sr",
        durability: D::Async,
        replication: Rp::Sync,
        reads: R::Any,
        about: "weak-ZK: sync replication, async persistence, reads anywhere",
    },
    TableConfig {
        name: "sync-all",
        durability: D::Sync,
        replication: Rp::Sync,
        reads: R::Any,
        about: "sync-ZK-all: sync durability, reads anywhere without a check",
    },
];

impl TableConfig {
    /// The table of this configuration (named `<prefix><name>`, one shard).
    pub fn table(&self, prefix: &str) -> TableDef {
        TableDef {
            name: format!("{prefix}{}", self.name),
            engine: TableEngine::Log,
            durability: self.durability,
            replication: self.replication,
            reads: self.reads,
            shards: 1,
            timers: Default::default(),
            leaders: Vec::new(),
            txn: Default::default(),
            validation: Default::default(),
        }
    }

    /// Whether the configuration promises cross-client monotonic reads (G2): every read is
    /// checked for durability, or served by the leader of a sync table.
    pub fn promises_monotonic_reads(&self) -> bool {
        self.reads != TableReads::Any
    }

    /// Whether every read returns at least every write acknowledged before it was invoked:
    /// sync durability and reads at the leader (strong-ZK).
    pub fn promises_linearizable_reads(&self) -> bool {
        self.reads == TableReads::Leader && self.durability == TableDurability::Sync
    }

    /// Looks up configurations by name; `Err` names the first unknown one.
    pub fn parse_list(names: &str) -> Result<Vec<TableConfig>, String> {
        names
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(|n| {
                CONFIGS.iter().find(|c| c.name == n).copied().ok_or_else(|| {
                    let known: Vec<&str> = CONFIGS.iter().map(|c| c.name).collect();
                    format!("unknown configuration `{n}` (known: {})", known.join(", "))
                })
            })
            .collect()
    }
}
