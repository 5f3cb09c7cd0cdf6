//! Node configuration: a TOML file, command-line overrides, and their validation.
//!
//! Precedence: a flag beats the config file, which beats the built-in default. `--peer` flags,
//! when any is given, replace the file's whole `peers` list (they are not merged).

use std::collections::HashSet;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

/// Default frame limit (`strata_wire::Limits::default()`, where the limits are defined).
pub const DEFAULT_MAX_FRAME_BYTES: usize = strata_wire::DEFAULT_MAX_FRAME_BYTES;
/// Default value limit (`strata_wire::Limits::default()`).
pub const DEFAULT_MAX_VALUE_BYTES: usize = strata_wire::DEFAULT_MAX_VALUE_BYTES;
/// Default cap of client connections per node. Each costs two tasks and its buffers; 4096
/// leaves a default `ulimit -n` of 65536 room for peers, WAL segments and shard directories.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// Default cap of client connections from one IP address: one misbehaving host (or a leaking
/// connection pool) cannot take every slot; 256 is far above what one client library opens.
pub const DEFAULT_MAX_CONNECTIONS_PER_IP: usize = 256;
/// Default budget of one client connection: request bytes read and not yet answered plus
/// reply bytes not yet written. 8 MiB keeps a pipelined stream of 1 MiB values flowing (eight
/// in flight) while 4096 connections stay within 32 GiB in the worst case.
pub const DEFAULT_MAX_CONNECTION_BUFFER_BYTES: usize = 8 << 20;
/// The smallest budget accepted: room for a few requests and replies.
pub const MIN_CONNECTION_BUFFER_BYTES: usize = 64 << 10;
/// Default idle timeout: a connection with nothing in flight that moves no byte in either
/// direction for this long is closed. The client library pings an idle connection every 20 s.
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 60_000;
/// Default partial-frame timeout: a frame must arrive whole within this time of its first
/// byte (a 16 MiB frame needs 1.6 MB/s), so an unfinished frame cannot hold memory for long.
pub const DEFAULT_PARTIAL_FRAME_TIMEOUT_MS: u64 = 10_000;
/// Default first re-send of an unacknowledged write (Kite §3.4 `T_RETX`).
pub const DEFAULT_RETRANSMIT_MS: u64 = 5;
/// Default `T_REL` (Kite §3.4): how long a release waits for all acks before the slow path.
/// The paper uses ~1 ms on RDMA; a loaded loopback machine needs more headroom.
pub const DEFAULT_RELEASE_TIMEOUT_MS: u64 = 5;
/// Default cap of the adaptive `T_REL`: a release waits 10 smoothed ack round trips (Kite
/// K-D1), at least `release_timeout_ms` and at most this.
pub const DEFAULT_RELEASE_TIMEOUT_MAX_MS: u64 = 100;
/// Default RIFL `LEASE_TERM` (rifl.md §3.5: 30 minutes, RAMCloud's).
pub const DEFAULT_LEASE_TERM_MS: u64 = 30 * 60 * 1000;
/// Default `T_TX` per object (rifl.md R-D15, RAMCloud's 50 ms): a transaction lock held this
/// long times the transaction's objects starts recovery.
pub const DEFAULT_TXN_TIMEOUT_PER_OBJECT_MS: u64 = 50;
/// `txn_read_hold_ms`: the log core's default hold (`strata_log::TXN_READ_HOLD`).
pub const DEFAULT_TXN_READ_HOLD_MS: u64 = strata_log::TXN_READ_HOLD.as_millis() as u64;
/// The longest `txn_read_hold_ms` accepted.
pub const MAX_TXN_READ_HOLD_MS: u64 = 10_000;
/// Default threads of a node's runtime: TLS and connections in parallel with the core task.
pub const DEFAULT_RUNTIME_THREADS: usize = 2;
/// The most runtime threads accepted (the core is one task; more only adds wake-ups).
pub const MAX_RUNTIME_THREADS: usize = 64;
/// The shortest lease term accepted: a lease must outlive several renewal round trips.
pub const MIN_LEASE_TERM_MS: u64 = 200;
/// Default cluster id.
pub const DEFAULT_CLUSTER_ID: u64 = 1;
/// Room a frame needs beside its value: the largest key (64 KiB) plus headers.
pub const FRAME_SLACK_BYTES: usize = strata_wire::FRAME_SLACK_BYTES;
/// Node ids must be below this (the rc engine keeps replica sets as a 64-bit mask).
pub const MAX_NODE_ID: u32 = 63;

/// Everything one `strata-node` process needs to know.
///
/// ```toml
/// node_id = 0
/// cluster_id = 1
/// client_addr = "127.0.0.1:7000"
/// peer_addr = "127.0.0.1:7100"
/// data_dir = "data/n0"
///
/// # Limits and bounds, with their defaults (docs/design.md, "Limits and bounds"):
/// # max_frame_bytes = 16777216
/// # max_value_bytes = 1048576
/// # max_connections = 4096
/// # max_connections_per_ip = 256
/// # max_connection_buffer_bytes = 8388608
/// # idle_timeout_ms = 60000
/// # partial_frame_timeout_ms = 10000
///
/// [[peers]]
/// id = 1
/// addr = "127.0.0.1:7101"
///
/// [tls]                    # or, on a trusted machine only: insecure_plaintext = true
/// ca = "tls/ca.pem"
/// cert = "tls/node-0.pem"
/// key = "tls/node-0.key"
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// This replica's id, `0..=63`, unique in the cluster.
    pub node_id: u32,
    /// Every frame carries it; frames of another cluster are refused. In TOML an integer, or a
    /// string (`"0x..."` hex or decimal) for ids above `i64::MAX`.
    #[serde(
        default = "default_cluster_id",
        serialize_with = "ser_cluster_id",
        deserialize_with = "de_cluster_id"
    )]
    pub cluster_id: u64,
    /// Where clients connect (port 0: any free port, see `RunningNode::client_addr`).
    pub client_addr: SocketAddr,
    /// Where the other replicas connect.
    pub peer_addr: SocketAddr,
    /// The other replicas and their peer addresses; the replica set is this node plus these.
    #[serde(default)]
    pub peers: Vec<PeerConfig>,
    /// Directory for this node's files (created at start).
    pub data_dir: PathBuf,
    /// `T_RETX`: first re-send of an unacknowledged write, milliseconds.
    #[serde(default = "default_retransmit_ms")]
    pub retransmit_ms: u64,
    /// `T_REL`: how long a release (or RMW) waits for every earlier write of its session to be
    /// acknowledged by all replicas before it takes the slow path, milliseconds.
    /// It is the floor: a release waits 10 smoothed ack round trips (Kite K-D1) when that is
    /// longer, up to `release_timeout_max_ms`.
    #[serde(default = "default_release_timeout_ms")]
    pub release_timeout_ms: u64,
    /// Cap of the adaptive `T_REL`, milliseconds; at least `release_timeout_ms` (equal: fixed).
    #[serde(default = "default_release_timeout_max_ms")]
    pub release_timeout_max_ms: u64,
    /// RIFL `LEASE_TERM` (rifl.md §3.5, §5.5) granted by the lease service when this node
    /// serves it, milliseconds. Every node of a cluster should use the same value.
    #[serde(default = "default_lease_term_ms")]
    pub lease_term_ms: u64,
    /// An optional service-rate limit for every log-table shard this node leads, in requests
    /// per second (a token bucket with a burst of a tenth of a second; requests over it wait
    /// in order). Unset: unlimited. For benchmarks that must show hot spots on a small machine.
    #[serde(default)]
    pub shard_rate_limit: Option<u32>,
    /// `T_TX` per object, milliseconds (rifl.md R-D15; default 50): a transaction lock this
    /// node's shard leaders hold for this long times the transaction's objects starts
    /// recovery, which aborts the transaction unless every object already voted. Raise it
    /// where a client's prepares can reach their shards far apart (a heavily loaded machine).
    #[serde(default = "default_txn_timeout_per_object_ms")]
    pub txn_timeout_per_object_ms: u64,
    /// How long a transaction's read for update holds the key's other reads for update back
    /// at its shard's leader, waiting for the transaction's prepare (docs/design.md, "Reads
    /// for update"), milliseconds (default 5; 0: reads for update are plain transaction
    /// reads). Longer keeps read-modify-writes of a hot key queued when their transactions
    /// read other keys slowly; a transaction that never prepares (a crashed client) holds a
    /// key back this long.
    #[serde(default = "default_txn_read_hold_ms")]
    pub txn_read_hold_ms: u64,
    /// Largest frame accepted from a client or peer, header included.
    #[serde(default = "default_max_frame_bytes")]
    pub max_frame_bytes: usize,
    /// Largest value a write may carry, in the rc keyspace and in log tables (keys: 64 KiB).
    /// At most `max_frame_bytes` less 65 KiB, so the largest write fits in one frame.
    #[serde(default = "default_max_value_bytes")]
    pub max_value_bytes: usize,
    /// Most client connections open at once; more are refused with `TooManyConnections`.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Most client connections open at once from one IP address (refused likewise).
    #[serde(default = "default_max_connections_per_ip")]
    pub max_connections_per_ip: usize,
    /// Budget of one client connection: request bytes read and not yet answered plus reply
    /// bytes not yet written. Once spent, the node stops reading the connection (TCP
    /// backpressure) until replies drain. One frame larger than the budget is still read when
    /// nothing else is buffered.
    #[serde(default = "default_max_connection_buffer_bytes")]
    pub max_connection_buffer_bytes: usize,
    /// A client connection with nothing in flight that moves no byte in either direction for
    /// this long is closed (`ConnectionTimedOut`), milliseconds; 0: never.
    #[serde(default = "default_idle_timeout_ms")]
    pub idle_timeout_ms: u64,
    /// A frame must arrive whole within this time of its first byte, else the connection is
    /// closed (`ConnectionTimedOut`), milliseconds.
    #[serde(default = "default_partial_frame_timeout_ms")]
    pub partial_frame_timeout_ms: u64,
    /// Threads of the node's runtime (sockets, TLS, timers, the core task; the disk has a
    /// thread of its own). 1 runs everything on one thread, which costs the fewest wake-ups
    /// and is what `strata up` gives each of its nodes, since they share one machine; a node
    /// with a machine to itself gains from 2 or more (TLS and connections in parallel).
    #[serde(default = "default_runtime_threads")]
    pub runtime_threads: usize,
    /// Log line format (`RUST_LOG` chooses the level; default `info`).
    #[serde(default)]
    pub log_format: LogFormat,
    // ---- security (docs/design.md, "Security model") ----
    /// TLS credentials: peer links use mutual TLS (a peer is the node its certificate names),
    /// client connections TLS, with the role a client certificate names. Exactly one of this
    /// and `insecure_plaintext` must be set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsFiles>,
    /// No TLS: peers are not authenticated and every client may do everything (admin). Only
    /// for a trusted machine (tests, benchmarks measuring TLS's cost).
    #[serde(default)]
    pub insecure_plaintext: bool,
}

/// A node's TLS files, PEM (`strata certs` makes them; `strata up` in `<data-dir>/tls`).
///
/// ```toml
/// [tls]
/// ca = "tls/ca.pem"        # the cluster CA's certificate
/// cert = "tls/node-0.pem"  # this node's certificate: names `node-<node_id>`
/// key = "tls/node-0.key"
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Another replica of the group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerConfig {
    pub id: u32,
    /// Its peer listen address.
    pub addr: SocketAddr,
}

impl FromStr for PeerConfig {
    type Err = String;
    /// `ID=ADDR`, e.g. `1=127.0.0.1:7101`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (id, addr) = s.split_once('=').ok_or_else(|| format!("expected ID=ADDR, got {s:?}"))?;
        let id = id.trim().parse::<u32>().map_err(|e| format!("bad peer id {id:?}: {e}"))?;
        let addr = addr
            .trim()
            .parse::<SocketAddr>()
            .map_err(|e| format!("bad peer address {addr:?}: {e}"))?;
        Ok(PeerConfig { id, addr })
    }
}

impl fmt::Display for PeerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.id, self.addr)
    }
}

/// Log line format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

fn default_cluster_id() -> u64 {
    DEFAULT_CLUSTER_ID
}
fn default_retransmit_ms() -> u64 {
    DEFAULT_RETRANSMIT_MS
}
fn default_release_timeout_ms() -> u64 {
    DEFAULT_RELEASE_TIMEOUT_MS
}
fn default_release_timeout_max_ms() -> u64 {
    DEFAULT_RELEASE_TIMEOUT_MAX_MS
}
fn default_lease_term_ms() -> u64 {
    DEFAULT_LEASE_TERM_MS
}
/// `--runtime-threads`: 1 to [`MAX_RUNTIME_THREADS`], refused by the parser otherwise.
pub fn runtime_threads_parser() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::new().range(1..=MAX_RUNTIME_THREADS as u64)
}

fn default_runtime_threads() -> usize {
    DEFAULT_RUNTIME_THREADS
}
fn default_txn_timeout_per_object_ms() -> u64 {
    DEFAULT_TXN_TIMEOUT_PER_OBJECT_MS
}
fn default_txn_read_hold_ms() -> u64 {
    DEFAULT_TXN_READ_HOLD_MS
}
fn default_max_frame_bytes() -> usize {
    DEFAULT_MAX_FRAME_BYTES
}
fn default_max_value_bytes() -> usize {
    DEFAULT_MAX_VALUE_BYTES
}
fn default_max_connections() -> usize {
    DEFAULT_MAX_CONNECTIONS
}
fn default_max_connections_per_ip() -> usize {
    DEFAULT_MAX_CONNECTIONS_PER_IP
}
fn default_max_connection_buffer_bytes() -> usize {
    DEFAULT_MAX_CONNECTION_BUFFER_BYTES
}
fn default_idle_timeout_ms() -> u64 {
    DEFAULT_IDLE_TIMEOUT_MS
}
fn default_partial_frame_timeout_ms() -> u64 {
    DEFAULT_PARTIAL_FRAME_TIMEOUT_MS
}

/// Parses a cluster id: decimal, or hex with a `0x` prefix.
pub fn parse_cluster_id(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => t.parse::<u64>(),
    };
    r.map_err(|e| format!("bad cluster id {s:?}: {e}"))
}

// TOML integers are i64: ids above i64::MAX are written as hex strings.
fn ser_cluster_id<S: Serializer>(id: &u64, s: S) -> Result<S::Ok, S::Error> {
    match i64::try_from(*id) {
        Ok(v) => s.serialize_i64(v),
        Err(_) => s.serialize_str(&format!("{id:#x}")),
    }
}

fn de_cluster_id<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Int(i64),
        Str(String),
    }
    match Raw::deserialize(d)? {
        Raw::Int(v) => u64::try_from(v)
            .map_err(|_| serde::de::Error::custom(format!("cluster id {v} is negative"))),
        Raw::Str(s) => parse_cluster_id(&s).map_err(serde::de::Error::custom),
    }
}

/// Why a configuration is unusable. Every message says what to fix.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The config file could not be read: check the path and permissions.
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    /// The config file is not valid TOML, has an unknown key, or a value of the wrong type.
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    /// A required setting is neither in the file nor on the command line.
    #[error("missing {what}: pass {flag} or set `{key}` in the config file")]
    Missing { what: &'static str, flag: &'static str, key: &'static str },
    #[error("node id {0} is too large: node ids must be in 0..={MAX_NODE_ID}")]
    NodeIdTooLarge(u32),
    /// The peer list must name the *other* replicas only.
    #[error("the peer list contains this node's own id {0}; list only the other replicas")]
    PeerIsSelf(u32),
    #[error("peer id {0} appears more than once in the peer list")]
    DuplicatePeer(u32),
    #[error("peer address {0} appears more than once in the peer list")]
    DuplicatePeerAddr(SocketAddr),
    #[error("client_addr and peer_addr are both {0}; they must differ")]
    SameAddress(SocketAddr),
    /// A numeric setting is out of range.
    #[error("invalid {what}: {why}")]
    Invalid { what: &'static str, why: String },
    /// Neither TLS credentials nor plaintext were chosen.
    #[error(
        "no TLS credentials: pass --tls-ca, --tls-cert and --tls-key (or set [tls] in the config \
         file; `strata certs` makes them), or --insecure-plaintext on a trusted machine"
    )]
    NoTls,
}

impl Default for NodeConfig {
    /// A single node on loopback: node 0, clients on `127.0.0.1:7000`, peers on `127.0.0.1:7100`.
    fn default() -> Self {
        NodeConfig {
            node_id: 0,
            cluster_id: DEFAULT_CLUSTER_ID,
            client_addr: SocketAddr::from(([127, 0, 0, 1], 7000)),
            peer_addr: SocketAddr::from(([127, 0, 0, 1], 7100)),
            peers: Vec::new(),
            data_dir: PathBuf::from("strata-data/n0"),
            retransmit_ms: DEFAULT_RETRANSMIT_MS,
            release_timeout_ms: DEFAULT_RELEASE_TIMEOUT_MS,
            release_timeout_max_ms: DEFAULT_RELEASE_TIMEOUT_MAX_MS,
            lease_term_ms: DEFAULT_LEASE_TERM_MS,
            shard_rate_limit: None,
            runtime_threads: DEFAULT_RUNTIME_THREADS,
            txn_timeout_per_object_ms: DEFAULT_TXN_TIMEOUT_PER_OBJECT_MS,
            txn_read_hold_ms: DEFAULT_TXN_READ_HOLD_MS,
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_ip: DEFAULT_MAX_CONNECTIONS_PER_IP,
            max_connection_buffer_bytes: DEFAULT_MAX_CONNECTION_BUFFER_BYTES,
            idle_timeout_ms: DEFAULT_IDLE_TIMEOUT_MS,
            partial_frame_timeout_ms: DEFAULT_PARTIAL_FRAME_TIMEOUT_MS,
            log_format: LogFormat::Text,
            tls: None,
            insecure_plaintext: false,
        }
    }
}

impl NodeConfig {
    /// Parses a complete configuration from TOML and validates it.
    pub fn from_toml(text: &str) -> Result<NodeConfig, ConfigError> {
        let cfg: NodeConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: PathBuf::from("<string>"),
            message: e.message().to_string(),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads, parses and validates a complete configuration file.
    pub fn load(path: &Path) -> Result<NodeConfig, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.into(), source })?;
        let cfg: NodeConfig = toml::from_str(&text)
            .map_err(|e| ConfigError::Parse { path: path.into(), message: e.to_string() })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The configuration as a TOML document that [`NodeConfig::from_toml`] reads back.
    pub fn to_toml(&self) -> String {
        // Every field is a plain value or an array of plain tables, and cluster ids beyond
        // i64::MAX are written as strings, so serialization cannot fail.
        toml::to_string_pretty(self).expect("NodeConfig always serializes to TOML")
    }

    /// The ids of every replica of the group, this node first.
    pub fn replica_ids(&self) -> Vec<u32> {
        std::iter::once(self.node_id).chain(self.peers.iter().map(|p| p.id)).collect()
    }

    /// Checks everything that can be checked without touching the network.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.node_id > MAX_NODE_ID {
            return Err(ConfigError::NodeIdTooLarge(self.node_id));
        }
        let mut ids = HashSet::new();
        let mut addrs = HashSet::new();
        for p in &self.peers {
            if p.id == self.node_id {
                return Err(ConfigError::PeerIsSelf(p.id));
            }
            if p.id > MAX_NODE_ID {
                return Err(ConfigError::NodeIdTooLarge(p.id));
            }
            if !ids.insert(p.id) {
                return Err(ConfigError::DuplicatePeer(p.id));
            }
            if !addrs.insert(p.addr) {
                return Err(ConfigError::DuplicatePeerAddr(p.addr));
            }
        }
        if self.client_addr == self.peer_addr && self.client_addr.port() != 0 {
            return Err(ConfigError::SameAddress(self.client_addr));
        }
        if self.retransmit_ms == 0 {
            return Err(ConfigError::Invalid {
                what: "retransmit_ms",
                why: "must be at least 1".into(),
            });
        }
        if self.release_timeout_ms == 0 {
            return Err(ConfigError::Invalid {
                what: "release_timeout_ms",
                why: "must be at least 1".into(),
            });
        }
        if self.release_timeout_max_ms < self.release_timeout_ms {
            return Err(ConfigError::Invalid {
                what: "release_timeout_max_ms",
                why: format!(
                    "{} is below release_timeout_ms ({}); raise it to at least that (equal: a fixed T_REL)",
                    self.release_timeout_max_ms, self.release_timeout_ms
                ),
            });
        }
        if self.max_frame_bytes > u32::MAX as usize {
            return Err(ConfigError::Invalid {
                what: "max_frame_bytes",
                why: format!(
                    "{} exceeds the wire format's limit of {}",
                    self.max_frame_bytes,
                    u32::MAX
                ),
            });
        }
        if self.lease_term_ms < MIN_LEASE_TERM_MS {
            return Err(ConfigError::Invalid {
                what: "lease_term_ms",
                why: format!(
                    "{} is below the minimum of {MIN_LEASE_TERM_MS} ms",
                    self.lease_term_ms
                ),
            });
        }
        if self.txn_timeout_per_object_ms == 0 {
            return Err(ConfigError::Invalid {
                what: "txn_timeout_per_object_ms",
                why: "0 ms would start recovery for every transaction at its first prepare".into(),
            });
        }
        if self.txn_read_hold_ms > MAX_TXN_READ_HOLD_MS {
            return Err(ConfigError::Invalid {
                what: "txn_read_hold_ms",
                why: format!(
                    "{} ms is above {MAX_TXN_READ_HOLD_MS} ms: a transaction that never prepares would hold its keys' other reads for update back that long",
                    self.txn_read_hold_ms
                ),
            });
        }
        if !(1..=MAX_RUNTIME_THREADS).contains(&self.runtime_threads) {
            return Err(ConfigError::Invalid {
                what: "runtime_threads",
                why: format!("{} is not between 1 and {MAX_RUNTIME_THREADS}", self.runtime_threads),
            });
        }
        if self.shard_rate_limit == Some(0) {
            return Err(ConfigError::Invalid {
                what: "shard_rate_limit",
                why: "0 requests per second would serve nothing; leave it unset for no limit"
                    .into(),
            });
        }
        match (&self.tls, self.insecure_plaintext) {
            (None, false) => return Err(ConfigError::NoTls),
            (Some(_), true) => {
                return Err(ConfigError::Invalid {
                    what: "insecure_plaintext",
                    why: "TLS credentials are set too; choose one".into(),
                })
            }
            _ => {}
        }
        // A value travels in one frame together with its key (up to 64 KiB) and headers, on
        // the client link and in a log table's replication message.
        if self.max_value_bytes == 0
            || self.max_value_bytes.saturating_add(FRAME_SLACK_BYTES) > self.max_frame_bytes
        {
            return Err(ConfigError::Invalid {
                what: "max_value_bytes",
                why: format!(
                    "{} must be at least 1 and leave {} bytes of max_frame_bytes ({}) for the key and headers",
                    self.max_value_bytes, FRAME_SLACK_BYTES, self.max_frame_bytes
                ),
            });
        }
        if self.max_connections == 0 {
            return Err(ConfigError::Invalid {
                what: "max_connections",
                why: "0 connections would serve no client".into(),
            });
        }
        if self.max_connections_per_ip == 0 || self.max_connections_per_ip > self.max_connections {
            return Err(ConfigError::Invalid {
                what: "max_connections_per_ip",
                why: format!(
                    "{} must be at least 1 and at most max_connections ({})",
                    self.max_connections_per_ip, self.max_connections
                ),
            });
        }
        if self.max_connection_buffer_bytes < MIN_CONNECTION_BUFFER_BYTES {
            return Err(ConfigError::Invalid {
                what: "max_connection_buffer_bytes",
                why: format!(
                    "{} is below the minimum of {MIN_CONNECTION_BUFFER_BYTES}",
                    self.max_connection_buffer_bytes
                ),
            });
        }
        if self.partial_frame_timeout_ms == 0 {
            return Err(ConfigError::Invalid {
                what: "partial_frame_timeout_ms",
                why: "must be at least 1 (a frame needs time to arrive)".into(),
            });
        }
        Ok(())
    }
}

/// Command-line arguments of a node (used by `strata-node` and `strata node`).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct NodeArgs {
    /// TOML config file; flags override its settings.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// This replica's id (0..=63).
    #[arg(long, value_name = "ID")]
    pub node_id: Option<u32>,
    /// Cluster id (decimal or 0x-hex); default 1.
    #[arg(long, value_name = "ID", value_parser = parse_cluster_id)]
    pub cluster_id: Option<u64>,
    /// Address to listen on for clients.
    #[arg(long, value_name = "ADDR")]
    pub client_addr: Option<SocketAddr>,
    /// Address to listen on for the other replicas.
    #[arg(long, value_name = "ADDR")]
    pub peer_addr: Option<SocketAddr>,
    /// Another replica, as ID=ADDR (its peer address). Repeat for each; replaces the file's list.
    #[arg(long = "peer", value_name = "ID=ADDR")]
    pub peers: Vec<PeerConfig>,
    /// Directory for this node's files; default `strata-data/n<ID>`.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Log format.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
    /// `T_REL` in milliseconds: how long a release waits for all acks before the slow path.
    #[arg(long, value_name = "MS")]
    pub release_timeout_ms: Option<u64>,
    /// Cap of the adaptive `T_REL` in milliseconds (a release waits 10 ack round trips, at least
    /// `--release-timeout-ms`, at most this).
    #[arg(long, value_name = "MS")]
    pub release_timeout_max_ms: Option<u64>,
    /// RIFL lease term in milliseconds (default 30 minutes): a client whose lease is not
    /// renewed for this long loses it, and its unfinished requests end as "outcome unknown".
    #[arg(long, value_name = "MS")]
    pub lease_term_ms: Option<u64>,
    /// Service-rate limit of every log-table shard this node leads, requests per second
    /// (default: unlimited).
    #[arg(long, value_name = "PER_S")]
    pub shard_rate_limit: Option<u32>,
    /// Threads of the node's runtime (default 2; 1: everything on one thread, the fewest
    /// wake-ups, best when several nodes share a machine).
    #[arg(long, value_name = "N", value_parser = runtime_threads_parser())]
    pub runtime_threads: Option<usize>,
    /// `T_TX` per object in milliseconds (default 50): how long a transaction lock is held
    /// before recovery finishes the transaction, times its objects.
    #[arg(long, value_name = "MS")]
    pub txn_timeout_per_object_ms: Option<u64>,
    /// How long a transaction's read for update holds the key's other reads for update back,
    /// waiting for its prepare, in milliseconds (default 5; 0: no hold).
    #[arg(long, value_name = "MS")]
    pub txn_read_hold_ms: Option<u64>,
    /// The cluster CA's certificate (PEM): peers and client certificates must chain to it.
    #[arg(long, value_name = "FILE", requires_all = ["tls_cert", "tls_key"])]
    pub tls_ca: Option<PathBuf>,
    /// This node's certificate (PEM), naming `node-<ID>` (`strata certs node`).
    #[arg(long, value_name = "FILE", requires_all = ["tls_ca", "tls_key"])]
    pub tls_cert: Option<PathBuf>,
    /// This node's private key (PEM).
    #[arg(long, value_name = "FILE", requires_all = ["tls_ca", "tls_cert"])]
    pub tls_key: Option<PathBuf>,
    /// Run without TLS: peers are not authenticated and every client is admin. Only on a
    /// trusted machine.
    #[arg(long, conflicts_with_all = ["tls_ca", "tls_cert", "tls_key"])]
    pub insecure_plaintext: bool,
}

/// A config file in which every setting is optional, so that flags can supply the rest.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PartialConfig {
    node_id: Option<u32>,
    #[serde(default, deserialize_with = "de_opt_cluster_id")]
    cluster_id: Option<u64>,
    client_addr: Option<SocketAddr>,
    peer_addr: Option<SocketAddr>,
    peers: Option<Vec<PeerConfig>>,
    data_dir: Option<PathBuf>,
    retransmit_ms: Option<u64>,
    release_timeout_ms: Option<u64>,
    release_timeout_max_ms: Option<u64>,
    lease_term_ms: Option<u64>,
    shard_rate_limit: Option<u32>,
    runtime_threads: Option<usize>,
    txn_timeout_per_object_ms: Option<u64>,
    txn_read_hold_ms: Option<u64>,
    max_frame_bytes: Option<usize>,
    max_value_bytes: Option<usize>,
    max_connections: Option<usize>,
    max_connections_per_ip: Option<usize>,
    max_connection_buffer_bytes: Option<usize>,
    idle_timeout_ms: Option<u64>,
    partial_frame_timeout_ms: Option<u64>,
    log_format: Option<LogFormat>,
    tls: Option<TlsFiles>,
    insecure_plaintext: Option<bool>,
}

fn de_opt_cluster_id<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    de_cluster_id(d).map(Some)
}

impl NodeArgs {
    /// Merges the config file (if any) with the flags, fills defaults, and validates.
    pub fn resolve(&self) -> Result<NodeConfig, ConfigError> {
        let file = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|source| ConfigError::Read { path: path.clone(), source })?;
                toml::from_str::<PartialConfig>(&text).map_err(|e| ConfigError::Parse {
                    path: path.clone(),
                    message: e.to_string(),
                })?
            }
            None => PartialConfig::default(),
        };
        let node_id = self.node_id.or(file.node_id).ok_or(ConfigError::Missing {
            what: "node id",
            flag: "--node-id",
            key: "node_id",
        })?;
        let client_addr = self.client_addr.or(file.client_addr).ok_or(ConfigError::Missing {
            what: "client listen address",
            flag: "--client-addr",
            key: "client_addr",
        })?;
        let peer_addr = self.peer_addr.or(file.peer_addr).ok_or(ConfigError::Missing {
            what: "peer listen address",
            flag: "--peer-addr",
            key: "peer_addr",
        })?;
        let peers =
            if self.peers.is_empty() { file.peers.unwrap_or_default() } else { self.peers.clone() };
        let release_timeout_ms = self
            .release_timeout_ms
            .or(file.release_timeout_ms)
            .unwrap_or(DEFAULT_RELEASE_TIMEOUT_MS);
        let cfg = NodeConfig {
            node_id,
            cluster_id: self.cluster_id.or(file.cluster_id).unwrap_or(DEFAULT_CLUSTER_ID),
            client_addr,
            peer_addr,
            peers,
            data_dir: self
                .data_dir
                .clone()
                .or(file.data_dir)
                .unwrap_or_else(|| PathBuf::from(format!("strata-data/n{node_id}"))),
            retransmit_ms: file.retransmit_ms.unwrap_or(DEFAULT_RETRANSMIT_MS),
            release_timeout_ms,
            // Unset, the cap rises with a floor set above the default cap (a fixed T_REL).
            release_timeout_max_ms: self
                .release_timeout_max_ms
                .or(file.release_timeout_max_ms)
                .unwrap_or(DEFAULT_RELEASE_TIMEOUT_MAX_MS.max(release_timeout_ms)),
            lease_term_ms: self
                .lease_term_ms
                .or(file.lease_term_ms)
                .unwrap_or(DEFAULT_LEASE_TERM_MS),
            shard_rate_limit: self.shard_rate_limit.or(file.shard_rate_limit),
            runtime_threads: self
                .runtime_threads
                .or(file.runtime_threads)
                .unwrap_or(DEFAULT_RUNTIME_THREADS),
            txn_timeout_per_object_ms: self
                .txn_timeout_per_object_ms
                .or(file.txn_timeout_per_object_ms)
                .unwrap_or(DEFAULT_TXN_TIMEOUT_PER_OBJECT_MS),
            txn_read_hold_ms: self
                .txn_read_hold_ms
                .or(file.txn_read_hold_ms)
                .unwrap_or(DEFAULT_TXN_READ_HOLD_MS),
            max_frame_bytes: file.max_frame_bytes.unwrap_or(DEFAULT_MAX_FRAME_BYTES),
            max_value_bytes: file.max_value_bytes.unwrap_or(DEFAULT_MAX_VALUE_BYTES),
            max_connections: file.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS),
            max_connections_per_ip: file
                .max_connections_per_ip
                .unwrap_or(DEFAULT_MAX_CONNECTIONS_PER_IP),
            max_connection_buffer_bytes: file
                .max_connection_buffer_bytes
                .unwrap_or(DEFAULT_MAX_CONNECTION_BUFFER_BYTES),
            idle_timeout_ms: file.idle_timeout_ms.unwrap_or(DEFAULT_IDLE_TIMEOUT_MS),
            partial_frame_timeout_ms: file
                .partial_frame_timeout_ms
                .unwrap_or(DEFAULT_PARTIAL_FRAME_TIMEOUT_MS),
            log_format: self.log_format.or(file.log_format).unwrap_or_default(),
            tls: None,
            insecure_plaintext: false,
        };
        // Flags beat the file: the three TLS flags replace its [tls], --insecure-plaintext
        // drops it.
        let cfg = match (&self.tls_ca, &self.tls_cert, &self.tls_key) {
            (Some(ca), Some(cert), Some(key)) => NodeConfig {
                tls: Some(TlsFiles { ca: ca.clone(), cert: cert.clone(), key: key.clone() }),
                ..cfg
            },
            _ if self.insecure_plaintext => NodeConfig { insecure_plaintext: true, ..cfg },
            _ => NodeConfig {
                tls: file.tls,
                insecure_plaintext: file.insecure_plaintext.unwrap_or(false),
                ..cfg
            },
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three_node() -> NodeConfig {
        NodeConfig {
            node_id: 0,
            client_addr: "127.0.0.1:7000".parse().unwrap(),
            peer_addr: "127.0.0.1:7100".parse().unwrap(),
            peers: vec![
                PeerConfig { id: 1, addr: "127.0.0.1:7101".parse().unwrap() },
                PeerConfig { id: 2, addr: "127.0.0.1:7102".parse().unwrap() },
            ],
            data_dir: "d/n0".into(),
            tls: Some(TlsFiles {
                ca: "tls/ca.pem".into(),
                cert: "tls/node-0.pem".into(),
                key: "tls/node-0.key".into(),
            }),
            ..NodeConfig::default()
        }
    }

    #[test]
    fn toml_round_trip() {
        let cfg = three_node();
        let text = cfg.to_toml();
        assert_eq!(NodeConfig::from_toml(&text).unwrap(), cfg, "{text}");
        let big = NodeConfig { cluster_id: u64::MAX, log_format: LogFormat::Json, ..cfg };
        assert_eq!(NodeConfig::from_toml(&big.to_toml()).unwrap(), big);
    }

    #[test]
    fn minimal_toml_gets_defaults_and_unknown_keys_are_refused() {
        let text = "node_id = 2\nclient_addr = \"127.0.0.1:1\"\npeer_addr = \"127.0.0.1:2\"\ndata_dir = \"x\"\n";
        let err = NodeConfig::from_toml(text).unwrap_err();
        assert!(matches!(err, ConfigError::NoTls), "TLS or an explicit plaintext: {err}");
        let text = &format!("{text}insecure_plaintext = true\n");
        let cfg = NodeConfig::from_toml(text).unwrap();
        assert_eq!(cfg.cluster_id, 1);
        assert_eq!(cfg.retransmit_ms, 5);
        assert_eq!((cfg.release_timeout_ms, cfg.release_timeout_max_ms), (5, 100));
        assert_eq!(cfg.max_frame_bytes, 16 << 20);
        assert_eq!(cfg.max_value_bytes, 1 << 20);
        assert_eq!((cfg.max_connections, cfg.max_connections_per_ip), (4096, 256));
        assert_eq!(cfg.max_connection_buffer_bytes, 8 << 20);
        assert_eq!((cfg.idle_timeout_ms, cfg.partial_frame_timeout_ms), (60_000, 10_000));
        assert_eq!(cfg.log_format, LogFormat::Text);
        assert_eq!(cfg.txn_timeout_per_object_ms, 50, "T_TX per object: RAMCloud's 50 ms");
        assert_eq!(cfg.txn_read_hold_ms, 5, "the log core's hold");
        assert_eq!(cfg.runtime_threads, 2);
        let bounds = "max_connections = 10\nmax_connections_per_ip = 2\nidle_timeout_ms = 0\n";
        let cfg = NodeConfig::from_toml(&format!("{text}{bounds}")).unwrap();
        assert_eq!(
            (cfg.max_connections, cfg.max_connections_per_ip, cfg.idle_timeout_ms),
            (10, 2, 0)
        );
        let err = NodeConfig::from_toml(&format!("{text}colour = \"blue\"\n")).unwrap_err();
        assert!(err.to_string().contains("colour"), "{err}");
        let err = NodeConfig::from_toml(&format!("{text}cluster_id = \"0x10\"\n")).unwrap();
        assert_eq!(err.cluster_id, 16);
    }

    #[test]
    fn validation_errors_are_specific() {
        let mut c = three_node();
        c.peers.push(PeerConfig { id: 0, addr: "127.0.0.1:7199".parse().unwrap() });
        assert!(matches!(c.validate(), Err(ConfigError::PeerIsSelf(0))));
        let mut c = three_node();
        c.peers.push(PeerConfig { id: 1, addr: "127.0.0.1:7199".parse().unwrap() });
        assert!(matches!(c.validate(), Err(ConfigError::DuplicatePeer(1))));
        let mut c = three_node();
        c.node_id = 64;
        assert!(matches!(c.validate(), Err(ConfigError::NodeIdTooLarge(64))));
        let mut c = three_node();
        c.peer_addr = c.client_addr;
        assert!(matches!(c.validate(), Err(ConfigError::SameAddress(_))));
        let mut c = three_node();
        c.max_value_bytes = c.max_frame_bytes;
        assert!(matches!(c.validate(), Err(ConfigError::Invalid { what: "max_value_bytes", .. })));
        let mut c = three_node();
        c.release_timeout_ms = 20;
        c.release_timeout_max_ms = 10;
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Invalid { what: "release_timeout_max_ms", .. })
        ));
        c.release_timeout_max_ms = 20;
        assert!(c.validate().is_ok(), "a cap equal to the floor: a fixed T_REL");
        let invalid = |f: fn(&mut NodeConfig)| {
            let mut c = three_node();
            f(&mut c);
            match c.validate() {
                Err(ConfigError::Invalid { what, .. }) => what,
                other => panic!("expected Invalid, got {other:?}"),
            }
        };
        assert_eq!(invalid(|c| c.max_connections = 0), "max_connections");
        assert_eq!(invalid(|c| c.max_connections_per_ip = 0), "max_connections_per_ip");
        assert_eq!(invalid(|c| c.max_connections_per_ip = 5000), "max_connections_per_ip");
        assert_eq!(
            invalid(|c| c.max_connection_buffer_bytes = 1000),
            "max_connection_buffer_bytes"
        );
        assert_eq!(invalid(|c| c.partial_frame_timeout_ms = 0), "partial_frame_timeout_ms");
        assert_eq!(invalid(|c| c.txn_timeout_per_object_ms = 0), "txn_timeout_per_object_ms");
        assert_eq!(invalid(|c| c.txn_read_hold_ms = 10_001), "txn_read_hold_ms");
        let mut no_hold = three_node();
        no_hold.txn_read_hold_ms = 0;
        assert!(no_hold.validate().is_ok(), "0: reads for update reserve nothing");
        assert_eq!(invalid(|c| c.runtime_threads = 0), "runtime_threads");
        assert_eq!(invalid(|c| c.runtime_threads = MAX_RUNTIME_THREADS + 1), "runtime_threads");
    }

    #[test]
    fn flags_override_the_file_and_missing_settings_are_named() {
        let dir = std::env::temp_dir().join(format!("strata-node-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("n.toml");
        std::fs::write(&path, three_node().to_toml()).unwrap();
        let args = NodeArgs {
            config: Some(path.clone()),
            node_id: Some(1),
            peers: vec!["0=127.0.0.1:7100".parse().unwrap(), "2=127.0.0.1:7102".parse().unwrap()],
            cluster_id: Some(9),
            txn_timeout_per_object_ms: Some(400),
            txn_read_hold_ms: Some(20),
            runtime_threads: Some(1),
            ..NodeArgs::default()
        };
        let cfg = args.resolve().unwrap();
        assert_eq!((cfg.node_id, cfg.cluster_id, cfg.peers.len()), (1, 9, 2));
        assert_eq!(cfg.runtime_threads, 1, "the flag over the file's 2");
        assert_eq!(cfg.txn_timeout_per_object_ms, 400, "the flag over the file's 50");
        assert_eq!(cfg.txn_read_hold_ms, 20, "the flag over the file's 5");
        assert_eq!(cfg.client_addr, "127.0.0.1:7000".parse().unwrap(), "kept from the file");
        assert_eq!((cfg.release_timeout_ms, cfg.release_timeout_max_ms), (5, 100));
        // The file sets release_timeout_max_ms (100); a second file leaves it out.
        let no_cap = dir.join("no-cap.toml");
        let text: String = three_node()
            .to_toml()
            .lines()
            .filter(|l| !l.starts_with("release_timeout_max_ms"))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(&no_cap, text).unwrap();
        let t_rel = |file: &Path, floor, cap| {
            let args = NodeArgs {
                config: Some(file.to_path_buf()),
                release_timeout_ms: floor,
                release_timeout_max_ms: cap,
                ..NodeArgs { node_id: Some(1), peers: args.peers.clone(), ..NodeArgs::default() }
            };
            args.resolve().map(|c| (c.release_timeout_ms, c.release_timeout_max_ms))
        };
        assert_eq!(t_rel(&path, Some(2), Some(50)).unwrap(), (2, 50));
        assert_eq!(t_rel(&no_cap, None, None).unwrap(), (5, 100));
        assert_eq!(
            t_rel(&no_cap, Some(300), None).unwrap(),
            (300, 300),
            "an unset cap follows a higher floor"
        );
        let err = t_rel(&path, Some(300), None).unwrap_err();
        assert!(
            err.to_string().contains("release_timeout_max_ms"),
            "the file's cap is below the flag's floor: {err}"
        );
        assert!(t_rel(&path, Some(30), Some(20)).is_err());
        // The file's peer list contains node 1 itself, so without --peer this is refused.
        let args = NodeArgs { config: Some(path.clone()), node_id: Some(1), ..NodeArgs::default() };
        assert!(matches!(args.resolve(), Err(ConfigError::PeerIsSelf(1))));
        let err = NodeArgs::default().resolve().unwrap_err();
        assert!(err.to_string().contains("--node-id"), "{err}");
        let err = NodeArgs { node_id: Some(0), ..NodeArgs::default() }.resolve().unwrap_err();
        assert!(err.to_string().contains("--client-addr"), "{err}");
        std::fs::write(&path, "node_id = 0\nbogus = 1\n").unwrap();
        let err = NodeArgs { config: Some(path), ..NodeArgs::default() }.resolve().unwrap_err();
        assert!(
            matches!(err, ConfigError::Parse { .. }) && err.to_string().contains("bogus"),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn tls_comes_from_the_flags_or_the_file_and_plaintext_must_be_asked_for() {
        let base = NodeArgs {
            node_id: Some(0),
            client_addr: Some("127.0.0.1:7000".parse().unwrap()),
            peer_addr: Some("127.0.0.1:7100".parse().unwrap()),
            ..NodeArgs::default()
        };
        assert!(matches!(base.resolve(), Err(ConfigError::NoTls)));
        let plain = NodeArgs { insecure_plaintext: true, ..base.clone() }.resolve().unwrap();
        assert!(plain.insecure_plaintext && plain.tls.is_none());
        let tls = NodeArgs {
            tls_ca: Some("ca.pem".into()),
            tls_cert: Some("n0.pem".into()),
            tls_key: Some("n0.key".into()),
            ..base.clone()
        }
        .resolve()
        .unwrap();
        assert_eq!(tls.tls.map(|t| t.cert), Some(PathBuf::from("n0.pem")));
        let both = NodeConfig { insecure_plaintext: true, ..three_node() };
        assert!(matches!(
            both.validate(),
            Err(ConfigError::Invalid { what: "insecure_plaintext", .. })
        ));
    }

    #[test]
    fn runtime_threads_out_of_range_is_refused_by_the_flag_parser() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: NodeArgs,
        }
        let parse = |n: &str| {
            <Cli as clap::Parser>::try_parse_from(["strata-node", "--runtime-threads", n])
                .map(|c| c.args.runtime_threads)
        };
        assert_eq!(parse("1").unwrap(), Some(1));
        assert_eq!(parse("64").unwrap(), Some(64));
        for bad in ["0", "65", "-1", "many"] {
            assert!(parse(bad).is_err(), "--runtime-threads {bad}");
        }
    }

    #[test]
    fn peer_flag_parses() {
        assert_eq!(
            "3=10.0.0.1:9".parse::<PeerConfig>().unwrap(),
            PeerConfig { id: 3, addr: "10.0.0.1:9".parse().unwrap() }
        );
        assert!("3:10.0.0.1:9".parse::<PeerConfig>().is_err());
        assert!("x=10.0.0.1:9".parse::<PeerConfig>().is_err());
    }
}
