//! The benchmark's settings: command-line flags (`strata bench --help`) and their checks.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use strata_client::LeasePolicy;

use crate::keys::min_key_size;
use crate::peer_tls::PeerTls;
use crate::BenchError;

/// Redis' usual address, used when `--target redis` is given no `--endpoints`.
pub const DEFAULT_REDIS_ENDPOINT: &str = "127.0.0.1:6379";

/// What to benchmark.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// A Strata cluster, through `strata-client` (Eventual Store: relaxed get/put).
    #[default]
    Strata,
    /// A Redis server, through the benchmark's own small RESP2 client (GET/SET).
    Redis,
    /// An etcd cluster, through the v3 gRPC API (needs the `etcd` build feature): every
    /// operation linearizable; acquires are gets, releases puts, CAS a compare-and-put
    /// transaction, FAA refused (see `etcd.rs`).
    Etcd,
    /// A ZooKeeper 3.8 ensemble (needs the `zookeeper` build feature): keys are znodes, reads
    /// getData (served by the connected server: sequentially consistent), writes setData,
    /// inserts create; relaxed operations only (see `zookeeper.rs`).
    Zookeeper,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Target::Strata => "strata",
            Target::Redis => "redis",
            Target::Etcd => "etcd",
            Target::Zookeeper => "zookeeper",
        })
    }
}

/// How keys are chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Distribution {
    /// Every key equally likely.
    #[default]
    Uniform,
    /// YCSB zipfian (not scrambled: key 0 is the hottest), skew set by `--zipf-theta`.
    Zipfian,
    /// YCSB "latest": zipfian over recency, the newest inserted key the hottest (skew
    /// `--zipf-theta`); with inserts (`--ycsb d`) the hot set follows them.
    Latest,
}

impl std::fmt::Display for Distribution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Distribution::Uniform => "uniform",
            Distribution::Zipfian => "zipfian",
            Distribution::Latest => "latest",
        })
    }
}

/// A YCSB core workload preset (`--ycsb`), as in the ORCA paper's evaluation (ORCA §8.1;
/// YCSB's `workloads/workload[abcdf]`; E needs range scans and is not offered).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum Ycsb {
    /// 100% updates (the ORCA paper's write-only workload).
    #[value(name = "w")]
    W,
    /// 50% reads, 50% updates (update heavy).
    #[value(name = "a")]
    A,
    /// 95% reads, 5% updates (read mostly).
    #[value(name = "b")]
    B,
    /// 100% reads.
    #[value(name = "c")]
    C,
    /// 95% reads, 5% inserts of new keys; reads favour the newest keys ("latest").
    #[value(name = "d")]
    D,
    /// 50% reads, 50% read-modify-writes (a read then a write of the same key, one operation).
    #[value(name = "f")]
    F,
}

impl std::fmt::Display for Ycsb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Ycsb::W => "W",
            Ycsb::A => "A",
            Ycsb::B => "B",
            Ycsb::C => "C",
            Ycsb::D => "D",
            Ycsb::F => "F",
        })
    }
}

/// The kind of non-read operation a YCSB workload issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum YcsbWrite {
    /// Overwrite an existing key (YCSB `update`).
    Update,
    /// Write a new key after the last one (YCSB `insert`).
    Insert,
    /// Read a key, then write it (YCSB `readmodifywrite`).
    Rmw,
}

impl Ycsb {
    /// YCSB's proportions: the percentage of operations that are not reads, and what they are.
    pub fn preset(self) -> (f64, YcsbWrite) {
        match self {
            Ycsb::W => (100.0, YcsbWrite::Update),
            Ycsb::A => (50.0, YcsbWrite::Update),
            Ycsb::B => (5.0, YcsbWrite::Update),
            Ycsb::C => (0.0, YcsbWrite::Update),
            Ycsb::D => (5.0, YcsbWrite::Insert),
            Ycsb::F => (50.0, YcsbWrite::Rmw),
        }
    }

    /// YCSB's request distribution: zipfian, except D's latest.
    pub fn distribution(self) -> Distribution {
        if self == Ycsb::D {
            Distribution::Latest
        } else {
            Distribution::Zipfian
        }
    }
}

/// A resolved YCSB operation mix (percentages of all operations, summing to 100).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct YcsbMix {
    pub read_pct: f64,
    pub update_pct: f64,
    pub insert_pct: f64,
    pub rmw_pct: f64,
}

/// A preset operation mix (`--mode`), after the Kite paper's B1 baselines (Kite §8).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Eventual Store: relaxed reads and writes only (every share 0).
    #[default]
    Es,
    /// ABD-only: every read an acquire, every write a release.
    Abd,
    /// Paxos-only: every read an acquire, every write an RMW (`--rmw`, FAA by default).
    Paxos,
    /// Kite's 5% sync: 5% of writes are releases, 5% of reads are acquires.
    Kite,
}

/// Which read-modify-write `--rmw-pct` issues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum RmwKind {
    /// Fetch-and-add of 1.
    #[default]
    Faa,
    /// Strong compare-and-swap that expects the benchmark's value and writes it back.
    Cas,
}

/// What the sessions run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum WorkloadKind {
    /// Key-value operations (the mix above).
    #[default]
    Kv,
    /// Treiber stacks: push-then-pop pairs (`strata-ds`).
    Ts,
    /// Michael-Scott queues: enqueue-then-dequeue pairs.
    Msq,
    /// Harris-Michael lists: insert-then-remove pairs.
    Hml,
    /// Multi-key read-modify-write transactions (`txn.rs`): Strata's on a `--txn rifl`
    /// table (`--table`), or Redis WATCH/MULTI/EXEC.
    Txn,
    /// Kairos's social-network YCSB variant (kairos.md §8.1, `kairos.rs`) on a `--txn
    /// kairos` table (`--table`): read-only and read-write transactions with separate
    /// zipfian popularity, an optional client cache (`--cache`).
    Kairos,
}

/// `--cache`: a Kairos client's cache policy (kairos.md §1.3; §5.12 Algorithm 1, §5.14
/// baselines and static leases): `none` (no inter-transaction cache: Baseline, CV only) or a
/// [`LeasePolicy`] by its name (`naive`, `ei`, `ideal`, `static:X`, `mean`, `fixed:MS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct CachePolicy(pub Option<LeasePolicy>);

impl std::str::FromStr for CachePolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(CachePolicy(None)),
            _ => s
                .parse()
                .map(|p| CachePolicy(Some(p)))
                .map_err(|e| format!("--cache {e} (or none)")),
        }
    }
}

impl std::fmt::Display for CachePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            None => f.write_str("none"),
            Some(p) => p.fmt(f),
        }
    }
}

impl From<CachePolicy> for String {
    fn from(p: CachePolicy) -> String {
        p.to_string()
    }
}

impl TryFrom<String> for CachePolicy {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

/// The resolved operation mix: percentages of reads and writes that synchronize.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Mix {
    /// % of reads that are acquires.
    pub acquire_pct: f64,
    /// % of writes that are releases.
    pub release_pct: f64,
    /// % of writes that are RMWs.
    pub rmw_pct: f64,
    pub rmw: RmwKind,
}

impl Mix {
    /// Whether any operation synchronizes.
    pub fn has_sync(&self) -> bool {
        self.acquire_pct > 0.0 || self.release_pct > 0.0 || self.rmw_pct > 0.0
    }
}

/// `strata bench`: a closed-loop load generator. Every session keeps `--pipeline` requests
/// outstanding; each request's latency is measured from submit to completion and recorded in
/// HDR histograms. Before measuring, every key is written once, so reads hit.
///
/// The flags come in groups, one struct each (flattened: the command line is flat, and so is
/// the report's JSON `args`): what to connect to ([`ConnArgs`]), what each session runs
/// ([`WorkloadArgs`]), which operations synchronize ([`SyncArgs`]), how long and from which
/// seed ([`RunArgs`]), what is written ([`OutputArgs`]) and RIFL's exactly-once and lease
/// options ([`RiflArgs`]). Each group checks its own flags; [`BenchArgs::validate`] then checks
/// the groups against each other.
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BenchArgs {
    #[command(flatten)]
    #[serde(flatten)]
    pub conn: ConnArgs,
    #[command(flatten)]
    #[serde(flatten)]
    pub workload: WorkloadArgs,
    #[command(flatten)]
    #[serde(flatten)]
    pub sync: SyncArgs,
    #[command(flatten)]
    #[serde(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    #[serde(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    #[serde(flatten)]
    pub rifl: RiflArgs,
    #[command(flatten)]
    #[serde(flatten)]
    pub kairos: KairosArgs,
}

/// What to load and how: the target, its endpoints, the connections and sessions.
#[derive(clap::Args, Debug, Clone, PartialEq, Serialize, Deserialize)]
#[command(next_help_heading = "Target and connections")]
pub struct ConnArgs {
    /// What to load: a Strata cluster, a Redis server, an etcd cluster or a ZooKeeper ensemble.
    #[arg(long, value_enum, default_value_t = Target::Strata)]
    pub target: Target,

    /// Addresses to connect to, comma-separated. Strata: client addresses of the nodes
    /// (default: the running local cluster's). Redis: default 127.0.0.1:6379. etcd: client
    /// URLs' host:port, default 127.0.0.1:2379. ZooKeeper: clientPort of each server,
    /// default 127.0.0.1:2181.
    #[arg(long, value_name = "ADDR,...", value_delimiter = ',')]
    pub endpoints: Option<Vec<SocketAddr>>,

    /// Connections (one TCP connection each), spread over the endpoints round-robin.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub clients: usize,

    /// Sessions per connection; each is an independent closed loop.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub sessions: usize,

    /// Requests in flight per session (1: one request at a time).
    #[arg(long, value_name = "D", default_value_t = 1)]
    pub pipeline: usize,

    /// Strata only: load the log table NAME (ORCA; `strata table create`) instead of the
    /// default keyspace. Writes go to the key's shard leader; a session reads at the node its
    /// client connected to, which serves them or forwards them (leader-only tables: at the
    /// leader). One request at a time per session (`--pipeline 1`); reads and writes only.
    #[arg(long, value_name = "NAME")]
    pub table: Option<String>,

    /// Emulated one-way delay, milliseconds, between the clients and each endpoint, in
    /// `--endpoints` order (one value: every endpoint). An in-process relay per endpoint holds
    /// every byte this long in each direction, which places the clients near some nodes and a
    /// WAN away from others (ORCA §8.3 E4, scripts/bench-geo.sh). Status samples skip it.
    #[arg(long, value_name = "MS,...", value_delimiter = ',')]
    pub client_delay_ms: Option<Vec<f64>>,

    /// Strata cluster id the nodes expect (decimal); default: the local cluster's (CLI), else 1.
    #[arg(long, value_name = "ID")]
    pub cluster_id: Option<u64>,

    /// The CA's certificate (PEM); with it the connections use TLS 1.3. Strata: the cluster's
    /// CA; default (`strata bench`): the credentials every command finds in
    /// `<data-dir>/tls`, unless the cluster runs without TLS. Redis and etcd: the CA of
    /// servers whose certificates name `localhost` (default: plain TCP).
    #[arg(long, value_name = "FILE")]
    #[serde(default)]
    pub tls_ca: Option<PathBuf>,
    /// The client certificate (PEM) the connections present. Strata: its role must allow the
    /// workload (write); default: `<data-dir>/tls/client.pem`.
    #[arg(long, value_name = "FILE")]
    #[serde(default)]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE")]
    #[serde(default)]
    pub tls_key: Option<PathBuf>,
    /// Strata only: plain TCP, for a cluster started with `strata up --insecure-plaintext`.
    #[arg(long)]
    #[serde(default)]
    pub insecure_plaintext: bool,
}

impl Default for ConnArgs {
    fn default() -> Self {
        ConnArgs {
            target: Target::Strata,
            endpoints: None,
            clients: 4,
            sessions: 4,
            pipeline: 1,
            table: None,
            client_delay_ms: None,
            cluster_id: None,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            insecure_plaintext: false,
        }
    }
}

impl ConnArgs {
    /// `--tls-cert` and `--tls-key`, which go together.
    fn cert_key(&self) -> Result<Option<(&Path, &Path)>, BenchError> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(c), Some(k)) => Ok(Some((c.as_path(), k.as_path()))),
            (None, None) => Ok(None),
            _ => Err(BenchError::InvalidArgs("--tls-cert and --tls-key go together".into())),
        }
    }

    /// The options every Strata connection of a run starts from: the cluster id, and TLS with
    /// `--tls-ca` (and the client certificate) when given.
    pub fn strata_options(&self) -> Result<strata_client::ClientOptions, BenchError> {
        let tls = match &self.tls_ca {
            None => None,
            Some(ca) => {
                let tls = strata_client::ClientTls::load(ca, self.cert_key()?)
                    .map_err(|e| BenchError::Credentials(e.to_string()))?;
                Some(tls)
            }
        };
        Ok(strata_client::ClientOptions {
            cluster: strata_client::ClusterId(self.cluster_id.unwrap_or(crate::DEFAULT_CLUSTER_ID)),
            tls,
            ..strata_client::ClientOptions::default()
        })
    }

    /// The TLS of a run's Redis or etcd connections: `--tls-ca` (and the client certificate)
    /// when given, else plain TCP; `None` for Strata, whose TLS is in [`Self::strata_options`].
    pub fn peer_tls(&self) -> Result<Option<PeerTls>, BenchError> {
        let Some(ca) = self.tls_ca.as_ref().filter(|_| self.target != Target::Strata) else {
            return Ok(None);
        };
        PeerTls::load(ca, self.cert_key()?).map(Some).map_err(BenchError::Credentials)
    }
}

/// What each session runs: the keys, the values and the read/write mix.
#[derive(clap::Args, Debug, Clone, PartialEq, Serialize, Deserialize)]
#[command(next_help_heading = "Workload")]
pub struct WorkloadArgs {
    /// Number of distinct keys (default 100,000; 200,000 with `--workload kairos`, kairos.md
    /// §8.3 P1).
    #[arg(long, value_name = "N")]
    #[serde(default)]
    pub keys: Option<u64>,

    /// Key size in bytes (`k` + zero-padded index).
    #[arg(long, value_name = "B", default_value_t = 16)]
    pub key_size: usize,

    /// Value size in bytes.
    #[arg(long, value_name = "B", default_value_t = 64)]
    pub value_size: usize,

    /// Key choice; default uniform, or the `--ycsb` preset's (zipfian; latest for d).
    #[arg(long, value_enum)]
    pub dist: Option<Distribution>,

    /// Zipfian skew, in (0, 1); with `--dist zipfian` or `latest`.
    #[arg(long, value_name = "THETA", default_value_t = 0.99)]
    pub zipf_theta: f64,

    /// Percentage of operations that are writes (puts), 0-100; the rest are reads. Default 5.
    /// With `--ycsb`: default the preset's; a value given here replaces the preset's share of
    /// updates, inserts (d) or RMWs (f).
    #[arg(long, value_name = "PERCENT")]
    pub write_ratio: Option<f64>,

    /// YCSB core workload preset (ORCA §8.1): w (100% updates), a (50% reads / 50% updates),
    /// b (95/5), c (100% reads), d (95% reads / 5% inserts, "latest" distribution), f (50%
    /// reads / 50% read-modify-writes). Zipfian θ 0.99 except d. `--write-ratio` and `--dist`
    /// override the preset's share and distribution. Relaxed operations only (`--mode es`).
    #[arg(long, value_enum, value_name = "W|A|B|C|D|F", ignore_case = true)]
    pub ycsb: Option<Ycsb>,

    /// What each session runs: kv operations, or push-then-pop pairs on random data
    /// structures (ts: Treiber stacks, msq: Michael-Scott queues, hml: Harris-Michael lists;
    /// Strata only, `--duration` only).
    #[arg(long = "workload", value_enum, default_value_t = WorkloadKind::Kv)]
    #[serde(rename = "workload")]
    pub kind: WorkloadKind,

    /// Data-structure workloads: number of structures.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub structures: usize,

    /// Data-structure workloads: fields per object (4 or 32, of 32 bytes each).
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub fields: usize,

    /// `--workload txn`: objects each transaction reads and writes.
    #[arg(long, value_name = "K", default_value_t = 2)]
    #[serde(default)]
    pub txn_objects: usize,

    /// `--workload txn`: each object of a transaction in another shard (K participants).
    #[arg(long)]
    #[serde(default)]
    pub txn_spread: bool,

    /// `--workload txn`, Strata: how a transaction reads the keys it is about to write —
    /// `for-update` (`Transaction::read_for_update`: read-modify-writes of a hot key queue at
    /// its leader) or `plain` (`Transaction::read`: optimistic only).
    #[arg(long, value_enum, value_name = "HOW", default_value_t = TxnReads::ForUpdate)]
    #[serde(default)]
    pub txn_reads: TxnReads,

    /// `--workload txn`: read a transaction's keys in one request instead of one after the
    /// other — Strata `Transaction::read_many` (one request per shard, the shards in order),
    /// Redis `WATCH` and `MGET` in one write, etcd one `Txn` of a `Range` per key.
    #[arg(long)]
    #[serde(default)]
    pub txn_read_many: bool,

    /// `--workload txn`: the one order in which every transaction reads its keys (one order
    /// for all, so reads for update never wait for each other in a cycle) — `hot-first` by
    /// popularity rank, the hottest key first (the index order), or `hot-last`, the reverse.
    #[arg(long, value_enum, value_name = "ORDER", default_value_t = TxnKeyOrder::HotFirst)]
    #[serde(default)]
    pub txn_key_order: TxnKeyOrder,
}

/// The order of a transaction's keys (`--txn-key-order`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum TxnKeyOrder {
    #[default]
    HotFirst,
    HotLast,
}

/// How a Strata read-modify-write transaction reads (`--txn-reads`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum TxnReads {
    Plain,
    #[default]
    ForUpdate,
}

impl Default for WorkloadArgs {
    fn default() -> Self {
        WorkloadArgs {
            keys: None,
            key_size: 16,
            value_size: 64,
            dist: None,
            zipf_theta: 0.99,
            write_ratio: None,
            ycsb: None,
            kind: WorkloadKind::Kv,
            structures: 1000,
            fields: 4,
            txn_objects: 2,
            txn_spread: false,
            txn_reads: TxnReads::ForUpdate,
            txn_read_many: false,
            txn_key_order: TxnKeyOrder::HotFirst,
        }
    }
}

/// `--workload kairos`: Kairos's social-network YCSB variant (kairos.md §8.1, §8.3 P1–P3).
/// Keys are ranked by popularity (rank 0 the hottest, the same ranking for reads and writes,
/// as in Fig. 9b where the hottest read key is also the most written); each transaction is
/// read-only with probability `--ro-pct`, drawing `--txn-keys` distinct keys from a zipfian
/// of skew `--read-zipf`, else read-write, drawing them with skew `--write-zipf` and writing
/// each key after reading it.
#[derive(clap::Args, Debug, Clone, PartialEq, Serialize, Deserialize)]
#[command(next_help_heading = "Kairos workload (--workload kairos)")]
#[serde(default)]
pub struct KairosArgs {
    /// Percentage of transactions that are read-only (the rest read then write their keys).
    #[arg(long, value_name = "PERCENT", default_value_t = 90.0)]
    pub ro_pct: f64,

    /// Distinct keys per transaction.
    #[arg(long, value_name = "K", default_value_t = 4)]
    pub txn_keys: usize,

    /// Zipfian skew (any value above 0) of the keys read-only transactions read.
    #[arg(long, value_name = "ALPHA", default_value_t = 0.99)]
    pub read_zipf: f64,

    /// Zipfian skew (above 0) of the keys read-write transactions read and write.
    #[arg(long, value_name = "ALPHA", default_value_t = 0.5)]
    pub write_zipf: f64,

    /// Percentage of the keys that may be cached: the most popular ones by the read
    /// distribution (kairos.md §8.1: the top 1 %).
    #[arg(long, value_name = "PERCENT", default_value_t = 1.0)]
    pub cacheable_pct: f64,

    /// Each client's cache capacity, as a percentage of the keys (LRU; §8.1: 0.1 %).
    #[arg(long, value_name = "PERCENT", default_value_t = 0.1)]
    pub cache_pct: f64,

    /// Each client's cache policy: none (Baseline / CV only), naive, ei (explicit
    /// invalidation), ideal (Algorithm 1 leases), static:X (StaticP(x) leases), mean (lease =
    /// W), fixed:MS (a fixed lease).
    #[arg(long, value_name = "POLICY", default_value = "none")]
    pub cache: CachePolicy,

    /// Offered load, transactions per second over all sessions (kairos.md §8.2 Fig. 11): each
    /// session starts a transaction at most every `clients x sessions / RATE` seconds (its
    /// retries included), and runs closed-loop when it falls behind. Default: closed loops.
    #[arg(long, value_name = "TXN_PER_S")]
    pub offered_rate: Option<f64>,

    /// The keys were written by an earlier run on this table: do not write them again.
    #[arg(long)]
    pub skip_preload: bool,
}

impl Default for KairosArgs {
    fn default() -> Self {
        KairosArgs {
            ro_pct: 90.0,
            txn_keys: 4,
            read_zipf: 0.99,
            write_zipf: 0.5,
            cacheable_pct: 1.0,
            cache_pct: 0.1,
            cache: CachePolicy(None),
            offered_rate: None,
            skip_preload: false,
        }
    }
}

impl KairosArgs {
    /// The Kairos flags on their own.
    pub fn validate(&self) -> Checked {
        check_pct("--ro-pct", Some(self.ro_pct))?;
        check_pct("--cacheable-pct", Some(self.cacheable_pct))?;
        check_pct("--cache-pct", Some(self.cache_pct))?;
        if self.txn_keys == 0 {
            return bad("--txn-keys must be at least 1".into());
        }
        for (flag, a) in [("--read-zipf", self.read_zipf), ("--write-zipf", self.write_zipf)] {
            if !(a > 0.0 && a <= 10.0) {
                return bad(format!("{flag} {a} must be above 0 (and at most 10)"));
            }
        }
        if self.offered_rate.is_some_and(|r| !(r > 0.0 && r.is_finite())) {
            return bad(
                "--offered-rate must be a positive number of transactions per second".into()
            );
        }
        Ok(())
    }

    /// Whether any flag differs from its default (they only mean something to the Kairos
    /// workload).
    fn is_default(&self) -> bool {
        *self == KairosArgs::default()
    }

    /// The cacheable keys (the `--cacheable-pct` most popular of `keys`, at least one when
    /// the share is above 0) and each client's cache capacity in entries (`--cache-pct`, at
    /// least one).
    pub fn cache_sizes(&self, keys: u64) -> (u64, usize) {
        let share = |pct: f64| ((keys as f64 * pct / 100.0).round() as u64).max((pct > 0.0) as u64);
        (share(self.cacheable_pct).min(keys), share(self.cache_pct).max(1) as usize)
    }
}

/// Which operations synchronize (Kite §8 B1): releases, acquires and read-modify-writes.
#[derive(clap::Args, Debug, Clone, PartialEq, Serialize, Deserialize)]
#[command(next_help_heading = "Synchronising operations (Kite)")]
pub struct SyncArgs {
    /// Preset operation mix (Kite §8 B1): es (all relaxed), abd (acquires + releases), paxos
    /// (acquires + RMWs), kite (5% of writes releases, 5% of reads acquires). The
    /// `--*-pct` flags below override the preset's values. Strata only, except es.
    #[arg(long, value_enum, default_value_t = Mode::Es)]
    pub mode: Mode,

    /// Percentage of writes that are releases (0-100); default: the `--mode`'s (es: 0).
    #[arg(long, value_name = "PERCENT")]
    pub release_pct: Option<f64>,

    /// Percentage of reads that are acquires (0-100); default: the `--mode`'s (es: 0).
    #[arg(long, value_name = "PERCENT")]
    pub acquire_pct: Option<f64>,

    /// Percentage of writes that are read-modify-writes (0-100; with `--release-pct` at most
    /// 100 together); default: the `--mode`'s (es: 0).
    #[arg(long, value_name = "PERCENT")]
    pub rmw_pct: Option<f64>,

    /// The read-modify-write `--rmw-pct` issues.
    #[arg(long, value_enum, default_value_t = RmwKind::Faa)]
    pub rmw: RmwKind,
}

impl Default for SyncArgs {
    fn default() -> Self {
        SyncArgs {
            mode: Mode::Es,
            release_pct: None,
            acquire_pct: None,
            rmw_pct: None,
            rmw: RmwKind::Faa,
        }
    }
}

/// How long the load runs, and from which seed.
#[derive(clap::Args, Debug, Clone, PartialEq, Serialize, Deserialize)]
#[command(next_help_heading = "Load shape")]
pub struct RunArgs {
    /// Measure for this many seconds (after the warmup).
    #[arg(long, value_name = "SECS", default_value_t = 10.0, conflicts_with = "ops")]
    pub duration: f64,

    /// Measure exactly this many operations instead of a duration.
    #[arg(long, value_name = "N")]
    pub ops: Option<u64>,

    /// Run the load this many seconds before measuring (not recorded).
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    pub warmup: f64,

    /// Seed of the key and operation choices (each session derives its own stream).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,

    /// The load generator's threads (its tokio runtime's workers; 1: one thread runs every
    /// session). On a machine the servers share, fewer leave them more of it.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    #[serde(default = "default_threads")]
    pub threads: u16,
}

fn default_threads() -> u16 {
    2
}

impl Default for RunArgs {
    fn default() -> Self {
        RunArgs { duration: 10.0, ops: None, warmup: 1.0, seed: 1, threads: default_threads() }
    }
}

/// What the run writes besides the report on stdout.
#[derive(clap::Args, Debug, Clone, PartialEq, Serialize, Deserialize)]
#[command(next_help_heading = "Output")]
pub struct OutputArgs {
    /// Also write the report as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// No live progress on stderr.
    #[arg(long)]
    pub quiet: bool,

    /// A name for this run, copied into the report.
    #[arg(long, value_name = "TEXT")]
    pub label: Option<String>,

    /// Per-node throughput timeline (Kite fig. 11): completions per node (the endpoint a
    /// session's connection goes to) in `--timeline-bucket-ms` buckets over the window, written
    /// as CSV to FILE (`t_ms,node0,...,total`, ops/s) and as a plot to FILE with `.png`.
    /// Requests that time out then count as errors and their session keeps waiting.
    #[arg(long, value_name = "FILE")]
    pub timeline: Option<PathBuf>,

    /// Bucket width of `--timeline`, milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 10)]
    pub timeline_bucket_ms: u64,
}

impl Default for OutputArgs {
    fn default() -> Self {
        OutputArgs { json: None, quiet: false, label: None, timeline: None, timeline_bucket_ms: 10 }
    }
}

/// Exactly-once (RIFL) options: turning it off, many simulated clients, the lease service.
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[command(next_help_heading = "Exactly-once and leases (RIFL)")]
pub struct RiflArgs {
    /// Strata only: send requests without RIFL's envelope (at-least-once, no completion
    /// records), to measure what exactly-once costs side by side (scripts/bench-rifl.sh).
    #[arg(long)]
    pub no_exactly_once: bool,

    /// Strata only: every write comes from one of N simulated clients, each with its own
    /// RIFL client id and sequence numbers (RIFL §8.3 Q3: latency and server memory per
    /// client from 1 to 1,000,000 clients). Needs `--pipeline 1`; relaxed reads and writes.
    #[arg(long, value_name = "N")]
    pub virtual_clients: Option<u64>,

    /// Strata only: load RIFL's lease service instead of the keyspace (RIFL §8.3 Q4). Each
    /// loop (`--clients` × `--sessions`) creates a lease, then renews its own id with
    /// `--pipeline` renewals in flight; a node that does not lead `__leases` forwards them to
    /// the one that does. Reports renewals/s and their latency; `--duration` only.
    #[arg(long, conflicts_with = "lease_creations")]
    #[serde(default)]
    pub lease_renewals: bool,

    /// Strata only: like `--lease-renewals`, but every request creates a new lease (one log
    /// entry in `__leases`, fsynced at a majority: the service's durable path).
    #[arg(long)]
    #[serde(default)]
    pub lease_creations: bool,
}

type Checked = Result<(), BenchError>;

fn bad(m: String) -> Checked {
    Err(BenchError::InvalidArgs(m))
}

fn check_pct(flag: &str, v: Option<f64>) -> Checked {
    match v {
        Some(v) if !(0.0..=100.0).contains(&v) => {
            bad(format!("{flag} {v} is not a percentage in 0-100"))
        }
        _ => Ok(()),
    }
}

impl ConnArgs {
    /// The connection flags on their own.
    pub fn validate(&self) -> Checked {
        if self.clients == 0 || self.sessions == 0 || self.pipeline == 0 {
            return bad("--clients, --sessions and --pipeline must be at least 1".into());
        }
        if self.pipeline > 4096 {
            return bad(format!(
                "--pipeline {} is above the client's limit of 4096 requests per session",
                self.pipeline
            ));
        }
        if let Some(d) = &self.client_delay_ms {
            if d.is_empty() || d.iter().any(|ms| !ms.is_finite() || *ms < 0.0) {
                return bad(format!(
                    "--client-delay-ms {d:?}: give one or more delays of 0 ms or more"
                ));
            }
        }
        if self.target == Target::Zookeeper && (self.tls_ca.is_some() || self.tls_cert.is_some()) {
            return bad(
                "--tls-ca and --tls-cert: the zookeeper target connects over plain TCP only".into(),
            );
        }
        if self.insecure_plaintext && self.target != Target::Strata {
            return bad(format!(
                "--insecure-plaintext is for Strata clusters; {} connects over plain TCP unless given --tls-ca",
                self.target
            ));
        }
        if let Some(name) = &self.table {
            if self.target != Target::Strata {
                return bad(format!(
                    "--table {name}: log tables take plain reads and writes from --target strata (no --mode other than es, no --*-pct, no --workload)"
                ));
            }
            if self.pipeline != 1 {
                return bad(format!(
                    "--table {name} runs one request at a time per session: use --pipeline 1 (and more --sessions)"
                ));
            }
        }
        Ok(())
    }

    /// The endpoints to use when the caller has none: `--endpoints`, else Redis' or etcd's
    /// usual port on 127.0.0.1. Strata's default (the local cluster) is the CLI's to find.
    pub fn default_endpoints(&self) -> Vec<SocketAddr> {
        match (&self.endpoints, self.target) {
            (Some(e), _) => e.clone(),
            (None, Target::Redis) => vec![DEFAULT_REDIS_ENDPOINT.parse().expect("a valid address")],
            (None, Target::Etcd) => vec![crate::etcd::default_endpoint()],
            (None, Target::Zookeeper) => vec![crate::zookeeper::default_endpoint()],
            (None, Target::Strata) => Vec::new(),
        }
    }

    /// `--client-delay-ms` for each of `n` endpoints (none: all 0), or why it does not fit.
    pub fn client_delays_ms(&self, n: usize) -> Result<Vec<f64>, BenchError> {
        match self.client_delay_ms.as_deref() {
            None => Ok(vec![0.0; n]),
            Some([ms]) => Ok(vec![*ms; n]),
            Some(d) if d.len() == n => Ok(d.to_vec()),
            Some(d) => Err(BenchError::InvalidArgs(format!(
                "--client-delay-ms has {} values for {n} endpoints: give one, or one per endpoint",
                d.len()
            ))),
        }
    }

    /// Sessions across all connections.
    pub fn total_sessions(&self) -> usize {
        self.clients * self.sessions
    }
}

impl WorkloadArgs {
    /// The workload flags on their own.
    pub fn validate(&self) -> Checked {
        if self.keys() == 0 {
            return bad("--keys must be at least 1".into());
        }
        let min = min_key_size(self.keys());
        if self.key_size < min {
            return bad(format!(
                "--key-size {} cannot hold {} keys: use at least {min}",
                self.key_size,
                self.keys()
            ));
        }
        check_pct("--write-ratio", self.write_ratio)?;
        if self.dist() != Distribution::Uniform && !(self.zipf_theta > 0.0 && self.zipf_theta < 1.0)
        {
            return bad(format!(
                "--zipf-theta {} must be strictly between 0 and 1",
                self.zipf_theta
            ));
        }
        if self.ycsb.is_some() && self.kind != WorkloadKind::Kv {
            return bad("--ycsb needs --workload kv".into());
        }
        if self.ycsb_mix().is_some_and(|m| m.insert_pct > 0.0) {
            // Inserts write keys past --keys: leave room for ten times as many.
            let need = min_key_size(self.keys().saturating_mul(10));
            if self.key_size < need {
                return bad(format!(
                    "--key-size {} leaves no room for inserted keys after {} keys: use at least {need}",
                    self.key_size,
                    self.keys()
                ));
            }
        }
        if self.kind == WorkloadKind::Txn && self.txn_objects == 0 {
            return bad("--txn-objects must be at least 1".into());
        }
        if !matches!(self.kind, WorkloadKind::Kv | WorkloadKind::Txn | WorkloadKind::Kairos) {
            if self.structures == 0 {
                return bad("--structures must be at least 1".into());
            }
            if self.fields != 4 && self.fields != 32 {
                return bad(format!("--fields {} must be 4 or 32", self.fields));
            }
        }
        Ok(())
    }

    /// `--keys`, else the workload's default: 200,000 for Kairos (kairos.md §8.3 P1), else
    /// 100,000.
    pub fn keys(&self) -> u64 {
        let default = if self.kind == WorkloadKind::Kairos { 200_000 } else { 100_000 };
        self.keys.unwrap_or(default)
    }

    /// Percentage of operations that are writes: `--write-ratio`, else the `--ycsb` preset's
    /// non-read share, else 5.
    pub fn write_ratio(&self) -> f64 {
        self.write_ratio.unwrap_or_else(|| self.ycsb.map_or(5.0, |y| y.preset().0))
    }

    /// The key distribution: `--dist`, else the `--ycsb` preset's, else uniform.
    pub fn dist(&self) -> Distribution {
        self.dist.unwrap_or_else(|| self.ycsb.map_or(Distribution::Uniform, |y| y.distribution()))
    }

    /// With `--ycsb`: the operation mix, the preset's with `--write-ratio` as its non-read
    /// share (of the preset's kind: updates, inserts or RMWs).
    pub fn ycsb_mix(&self) -> Option<YcsbMix> {
        let y = self.ycsb?;
        let w = self.write_ratio();
        let mut m = YcsbMix { read_pct: 100.0 - w, ..YcsbMix::default() };
        match y.preset().1 {
            YcsbWrite::Update => m.update_pct = w,
            YcsbWrite::Insert => m.insert_pct = w,
            YcsbWrite::Rmw => m.rmw_pct = w,
        }
        Some(m)
    }
}

impl SyncArgs {
    /// The synchronising-operation flags on their own.
    pub fn validate(&self) -> Checked {
        check_pct("--release-pct", self.release_pct)?;
        check_pct("--acquire-pct", self.acquire_pct)?;
        check_pct("--rmw-pct", self.rmw_pct)?;
        let mix = self.mix();
        if mix.release_pct + mix.rmw_pct > 100.0 {
            return bad(format!(
                "--release-pct {} plus --rmw-pct {} exceed 100% of the writes",
                mix.release_pct, mix.rmw_pct
            ));
        }
        Ok(())
    }

    /// The operation mix: the `--mode` preset, overridden by any `--*-pct` flag given.
    pub fn mix(&self) -> Mix {
        let (acquire, release, rmw) = match self.mode {
            Mode::Es => (0.0, 0.0, 0.0),
            Mode::Abd => (100.0, 100.0, 0.0),
            Mode::Paxos => (100.0, 0.0, 100.0),
            Mode::Kite => (5.0, 5.0, 0.0),
        };
        Mix {
            acquire_pct: self.acquire_pct.unwrap_or(acquire),
            release_pct: self.release_pct.unwrap_or(release),
            rmw_pct: self.rmw_pct.unwrap_or(rmw),
            rmw: self.rmw,
        }
    }
}

impl RunArgs {
    /// The load-shape flags on their own.
    pub fn validate(&self) -> Checked {
        if self.ops.is_none() && !(self.duration > 0.0 && self.duration.is_finite()) {
            return bad(format!(
                "--duration {} must be a positive number of seconds",
                self.duration
            ));
        }
        if self.ops == Some(0) {
            return bad("--ops must be at least 1".into());
        }
        if !(self.warmup >= 0.0 && self.warmup.is_finite()) {
            return bad(format!("--warmup {} must be zero or more seconds", self.warmup));
        }
        Ok(())
    }
}

impl OutputArgs {
    /// The output flags on their own.
    pub fn validate(&self) -> Checked {
        if self.timeline.is_some() && self.timeline_bucket_ms == 0 {
            return bad("--timeline-bucket-ms must be at least 1".into());
        }
        Ok(())
    }
}

impl RiflArgs {
    /// The RIFL flags on their own.
    pub fn validate(&self) -> Checked {
        if self.lease_renewals && self.lease_creations {
            return bad("--lease-renewals and --lease-creations: choose one".into());
        }
        if self.virtual_clients == Some(0)
            || (self.virtual_clients.is_some() && self.no_exactly_once)
        {
            return bad(VIRTUAL_CLIENTS.into());
        }
        Ok(())
    }

    /// Whether the run loads the lease service instead of the keyspace.
    pub fn leases(&self) -> bool {
        self.lease_renewals || self.lease_creations
    }
}

const VIRTUAL_CLIENTS: &str =
    "--virtual-clients N needs N >= 1, --pipeline 1, the Strata target, no --table and exactly-once on";

impl BenchArgs {
    /// Checks the settings: each group's own flags, then the groups against each other. The
    /// message says which flag to change.
    pub fn validate(&self) -> Checked {
        self.conn.validate()?;
        self.workload.validate()?;
        self.sync.validate()?;
        self.run.validate()?;
        self.output.validate()?;
        self.rifl.validate()?;
        self.kairos.validate()?;
        self.check_target()?;
        self.check_rifl()?;
        self.check_workload()?;
        self.check_timeline()
    }

    /// What the target can run: which mixes, workloads and tables.
    fn check_target(&self) -> Checked {
        let (target, mix) = (self.conn.target, self.mix());
        if target == Target::Redis && mix.has_sync() {
            return bad(format!(
                "--target redis has no releases, acquires or RMWs: use --mode es and no --release-pct, --acquire-pct or --rmw-pct (mode {:?}, releases {}%, acquires {}%, RMWs {}%)",
                self.sync.mode, mix.release_pct, mix.acquire_pct, mix.rmw_pct
            ));
        }
        let txn = self.workload.kind == WorkloadKind::Txn;
        if txn && !matches!(target, Target::Strata | Target::Redis | Target::Etcd) {
            return bad(format!("--workload txn runs against strata, redis or etcd, not {target}"));
        }
        if txn && target == Target::Strata && self.conn.table.is_none() {
            return bad(
                "--workload txn on Strata needs --table, a table created with --txn rifl".into()
            );
        }
        let kairos = self.workload.kind == WorkloadKind::Kairos;
        if kairos && (target != Target::Strata || self.conn.table.is_none()) {
            return bad(
                "--workload kairos runs on Strata with --table, a table created with --txn kairos"
                    .into(),
            );
        }
        if !kairos && !self.kairos.is_default() {
            return bad("--ro-pct, --txn-keys, --read-zipf, --write-zipf, --cacheable-pct, --cache-pct, --cache, --offered-rate and --skip-preload go with --workload kairos".into());
        }
        if let Some(name) = self.conn.table.as_ref().filter(|_| !txn && !kairos) {
            if mix.has_sync() || self.workload.kind != WorkloadKind::Kv {
                return bad(format!(
                    "--table {name}: log tables take plain reads and writes from --target strata (no --mode other than es, no --*-pct, no --workload)"
                ));
            }
        }
        if target == Target::Zookeeper && mix.has_sync() {
            return bad(format!(
                "--target zookeeper runs relaxed reads, updates, inserts and RMWs (--ycsb): use --mode es and no --release-pct, --acquire-pct or --rmw-pct (mode {:?})",
                self.sync.mode
            ));
        }
        if target == Target::Etcd && mix.rmw_pct > 0.0 && mix.rmw == RmwKind::Faa {
            return bad(
                "--target etcd has no fetch-and-add: use --rmw cas (a compare-and-put transaction)"
                    .into(),
            );
        }
        if !matches!(self.workload.kind, WorkloadKind::Kv | WorkloadKind::Txn)
            && target != Target::Strata
        {
            return bad(format!("--workload ts|msq|hml needs --target strata, not {target}"));
        }
        Ok(())
    }

    /// Exactly-once, virtual clients and the lease service against the rest.
    fn check_rifl(&self) -> Checked {
        let (conn, rifl) = (&self.conn, &self.rifl);
        if conn.target == Target::Strata
            && !rifl.no_exactly_once
            && conn.pipeline > strata_wire::WINDOW as usize
        {
            return bad(format!(
                "--pipeline {} exceeds the {} exactly-once writes a session may have unanswered (RIFL's window): lower it, or add --no-exactly-once",
                conn.pipeline,
                strata_wire::WINDOW
            ));
        }
        if rifl.virtual_clients.is_some()
            && (conn.pipeline != 1 || conn.target != Target::Strata || conn.table.is_some())
        {
            return bad(VIRTUAL_CLIENTS.into());
        }
        if rifl.leases()
            && (conn.target != Target::Strata
                || self.run.ops.is_some()
                || conn.table.is_some()
                || rifl.virtual_clients.is_some()
                || self.workload.ycsb.is_some()
                || self.output.timeline.is_some()
                || self.workload.kind != WorkloadKind::Kv
                || self.mix().has_sync())
        {
            return bad("--lease-renewals and --lease-creations load the lease service alone: --target strata, a --duration, no --ops, --table, --virtual-clients, --ycsb, --timeline, --workload or --mode other than es".into());
        }
        Ok(())
    }

    /// The workload against the mix and the load shape.
    fn check_workload(&self) -> Checked {
        if self.workload.ycsb.is_some() && self.mix().has_sync() {
            return bad(format!(
                "--ycsb runs relaxed reads, updates, inserts and read-modify-writes: it does not combine with --mode {:?} or --release-pct, --acquire-pct, --rmw-pct",
                self.sync.mode
            ));
        }
        if self.workload.kind != WorkloadKind::Kv {
            if self.run.ops.is_some() {
                return bad("--workload ts|msq|hml runs for a --duration, not --ops".into());
            }
            if self.output.timeline.is_some() {
                return bad("--timeline works with --workload kv only".into());
            }
        }
        Ok(())
    }

    /// The timeline needs a window to divide into buckets.
    fn check_timeline(&self) -> Checked {
        if self.output.timeline.is_some() && self.run.ops.is_some() {
            return bad("--timeline needs a --duration window, not --ops".into());
        }
        Ok(())
    }

    /// The operation mix: the `--mode` preset, overridden by any `--*-pct` flag given.
    pub fn mix(&self) -> Mix {
        self.sync.mix()
    }

    /// Percentage of operations that are writes (see [`WorkloadArgs::write_ratio`]).
    pub fn write_ratio(&self) -> f64 {
        self.workload.write_ratio()
    }

    /// The key distribution (see [`WorkloadArgs::dist`]).
    pub fn dist(&self) -> Distribution {
        self.workload.dist()
    }

    /// The YCSB operation mix, with `--ycsb` (see [`WorkloadArgs::ycsb_mix`]).
    pub fn ycsb_mix(&self) -> Option<YcsbMix> {
        self.workload.ycsb_mix()
    }

    /// The endpoints to use when the caller has none (see [`ConnArgs::default_endpoints`]).
    pub fn default_endpoints(&self) -> Vec<SocketAddr> {
        self.conn.default_endpoints()
    }

    /// `--client-delay-ms` per endpoint (see [`ConnArgs::client_delays_ms`]).
    pub fn client_delays_ms(&self, n: usize) -> Result<Vec<f64>, BenchError> {
        self.conn.client_delays_ms(n)
    }

    /// Sessions across all connections.
    pub fn total_sessions(&self) -> usize {
        self.conn.total_sessions()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    #[test]
    fn flags_parse_and_defaults_match_default() {
        let cli = Cli::try_parse_from(["bench"]).unwrap();
        assert_eq!(cli.bench, BenchArgs::default());
        let cli = Cli::try_parse_from([
            "bench",
            "--target",
            "redis",
            "--endpoints",
            "127.0.0.1:1,127.0.0.1:2",
            "--write-ratio",
            "2.5",
            "--dist",
            "zipfian",
            "--ops",
            "1000",
            "--pipeline",
            "16",
        ])
        .unwrap();
        let b = cli.bench;
        assert_eq!(b.conn.target, Target::Redis);
        assert_eq!(b.conn.endpoints.as_ref().unwrap().len(), 2);
        assert_eq!(b.write_ratio(), 2.5);
        assert_eq!(b.run.ops, Some(1000));
        assert_eq!(b.conn.pipeline, 16);
        b.validate().unwrap();
        assert!(
            Cli::try_parse_from(["bench", "--ops", "5", "--duration", "3"]).is_err(),
            "one or the other"
        );
        assert!(Cli::try_parse_from(["bench", "--target", "memcached"]).is_err());
        let cli = Cli::try_parse_from(["bench", "--lease-renewals", "--pipeline", "16"]).unwrap();
        assert!(cli.bench.rifl.lease_renewals && !cli.bench.rifl.lease_creations);
        cli.bench.validate().unwrap();
        assert!(
            Cli::try_parse_from(["bench", "--lease-renewals", "--lease-creations"]).is_err(),
            "one or the other"
        );
    }

    #[test]
    fn every_flag_keeps_its_name_and_the_json_stays_flat() {
        use clap::CommandFactory;
        let cmd = Cli::command();
        let mut flags: Vec<String> =
            cmd.get_arguments().filter_map(|a| a.get_long().map(str::to_string)).collect();
        flags.sort();
        let mut want = [
            "acquire-pct",
            "cache",
            "cache-pct",
            "cacheable-pct",
            "client-delay-ms",
            "clients",
            "cluster-id",
            "dist",
            "duration",
            "endpoints",
            "fields",
            "insecure-plaintext",
            "json",
            "key-size",
            "keys",
            "label",
            "lease-creations",
            "lease-renewals",
            "mode",
            "no-exactly-once",
            "offered-rate",
            "ops",
            "pipeline",
            "quiet",
            "read-zipf",
            "release-pct",
            "rmw",
            "rmw-pct",
            "ro-pct",
            "seed",
            "sessions",
            "skip-preload",
            "structures",
            "table",
            "target",
            "threads",
            "timeline",
            "timeline-bucket-ms",
            "tls-ca",
            "tls-cert",
            "tls-key",
            "txn-key-order",
            "txn-keys",
            "txn-objects",
            "txn-read-many",
            "txn-reads",
            "txn-spread",
            "value-size",
            "virtual-clients",
            "warmup",
            "workload",
            "write-ratio",
            "write-zipf",
            "ycsb",
            "zipf-theta",
        ];
        want.sort();
        assert_eq!(flags, want);
        // The report's `args` keeps one flat object with the old field names.
        let json = serde_json::to_value(BenchArgs::default()).unwrap();
        let obj = json.as_object().unwrap();
        assert_eq!(obj.len(), want.len());
        assert_eq!(obj["workload"], "kv");
        assert_eq!(obj["clients"], 4);
        let back: BenchArgs = serde_json::from_value(json).unwrap();
        assert_eq!(back, BenchArgs::default());
    }

    #[test]
    fn each_group_checks_its_own_flags() {
        let conn = ConnArgs { pipeline: 0, ..ConnArgs::default() };
        assert!(conn.validate().unwrap_err().to_string().contains("--pipeline"));
        let w = WorkloadArgs { keys: Some(0), ..WorkloadArgs::default() };
        assert!(w.validate().unwrap_err().to_string().contains("--keys"));
        let s = SyncArgs { rmw_pct: Some(101.0), ..SyncArgs::default() };
        assert!(s.validate().unwrap_err().to_string().contains("--rmw-pct"));
        let r = RunArgs { warmup: -1.0, ..RunArgs::default() };
        assert!(r.validate().unwrap_err().to_string().contains("--warmup"));
        let o = OutputArgs {
            timeline: Some("t.csv".into()),
            timeline_bucket_ms: 0,
            ..OutputArgs::default()
        };
        assert!(o.validate().unwrap_err().to_string().contains("--timeline-bucket-ms"));
        let l = RiflArgs { virtual_clients: Some(0), ..RiflArgs::default() };
        assert!(l.validate().unwrap_err().to_string().contains("--virtual-clients"));
        // A group's flags may be fine alone and wrong together with another's.
        let mut a = BenchArgs::default();
        a.conn.target = Target::Redis;
        a.sync.mode = Mode::Abd;
        a.conn.validate().unwrap();
        a.sync.validate().unwrap();
        assert!(a.validate().unwrap_err().to_string().contains("--target redis"));
    }

    #[test]
    fn validation_names_the_flag_to_fix() {
        let check = |f: fn(&mut BenchArgs), flag: &str| {
            let mut a = BenchArgs::default();
            f(&mut a);
            let e = a.validate().unwrap_err().to_string();
            assert!(e.contains(flag), "{e}");
        };
        check(|a| a.workload.write_ratio = Some(101.0), "--write-ratio");
        check(|a| a.workload.key_size = 3, "--key-size");
        check(|a| a.conn.pipeline = 0, "--pipeline");
        check(
            |a| {
                a.workload.dist = Some(Distribution::Zipfian);
                a.workload.zipf_theta = 1.0
            },
            "--zipf-theta",
        );
        check(|a| a.run.duration = 0.0, "--duration");
        check(|a| a.conn.client_delay_ms = Some(vec![-1.0]), "--client-delay-ms");
        check(|a| a.sync.release_pct = Some(120.0), "--release-pct");
        check(|a| a.sync.acquire_pct = Some(-1.0), "--acquire-pct");
        check(
            |a| {
                a.sync.release_pct = Some(60.0);
                a.sync.rmw_pct = Some(50.0)
            },
            "--rmw-pct",
        );
        check(
            |a| {
                a.output.timeline = Some("t.csv".into());
                a.run.ops = Some(10)
            },
            "--timeline",
        );
        check(
            |a| {
                a.workload.kind = WorkloadKind::Ts;
                a.workload.fields = 8
            },
            "--fields",
        );
        check(
            |a| {
                a.rifl.lease_renewals = true;
                a.conn.target = Target::Redis
            },
            "--lease-renewals",
        );
        check(
            |a| {
                a.rifl.lease_creations = true;
                a.sync.mode = Mode::Abd
            },
            "--lease-creations",
        );
    }

    #[test]
    fn modes_set_the_mix_and_flags_override_them() {
        let mix = |args: &[&str]| {
            let mut v = vec!["bench"];
            v.extend_from_slice(args);
            Cli::try_parse_from(v).unwrap().bench.mix()
        };
        let m = mix(&[]);
        assert!(!m.has_sync());
        assert_eq!((m.acquire_pct, m.release_pct, m.rmw_pct, m.rmw), (0.0, 0.0, 0.0, RmwKind::Faa));
        let m = mix(&["--mode", "abd"]);
        assert_eq!((m.acquire_pct, m.release_pct, m.rmw_pct), (100.0, 100.0, 0.0));
        let m = mix(&["--mode", "paxos", "--rmw", "cas"]);
        assert_eq!(
            (m.acquire_pct, m.release_pct, m.rmw_pct, m.rmw),
            (100.0, 0.0, 100.0, RmwKind::Cas)
        );
        let m = mix(&["--mode", "kite"]);
        assert_eq!((m.acquire_pct, m.release_pct, m.rmw_pct), (5.0, 5.0, 0.0));
        let m = mix(&["--mode", "kite", "--release-pct", "20", "--rmw-pct", "5"]);
        assert_eq!((m.acquire_pct, m.release_pct, m.rmw_pct), (5.0, 20.0, 5.0));
        let m = mix(&["--acquire-pct", "50"]);
        assert_eq!((m.acquire_pct, m.release_pct, m.rmw_pct), (50.0, 0.0, 0.0));
        assert!(Cli::try_parse_from(["bench", "--mode", "zab"]).is_err());
    }

    #[test]
    fn redis_refuses_sync_modes_and_ds_workloads() {
        for mode in [Mode::Abd, Mode::Paxos, Mode::Kite] {
            let a = BenchArgs {
                conn: ConnArgs { target: Target::Redis, ..ConnArgs::default() },
                sync: SyncArgs { mode, ..SyncArgs::default() },
                ..BenchArgs::default()
            };
            let e = a.validate().unwrap_err();
            assert!(
                matches!(e, BenchError::InvalidArgs(_)) && e.to_string().contains("redis"),
                "{e}"
            );
        }
        let a = BenchArgs {
            conn: ConnArgs { target: Target::Redis, ..ConnArgs::default() },
            sync: SyncArgs { acquire_pct: Some(1.0), ..SyncArgs::default() },
            ..BenchArgs::default()
        };
        assert!(matches!(a.validate(), Err(BenchError::InvalidArgs(_))));
        let a = BenchArgs {
            conn: ConnArgs { target: Target::Redis, ..ConnArgs::default() },
            workload: WorkloadArgs { kind: WorkloadKind::Msq, ..WorkloadArgs::default() },
            ..BenchArgs::default()
        };
        assert!(matches!(a.validate(), Err(BenchError::InvalidArgs(_))));
        BenchArgs {
            conn: ConnArgs { target: Target::Redis, ..ConnArgs::default() },
            sync: SyncArgs { mode: Mode::Es, ..SyncArgs::default() },
            ..BenchArgs::default()
        }
        .validate()
        .unwrap();
    }

    #[test]
    fn tls_flags_reach_redis_and_etcd_but_not_zookeeper() {
        let conn = |target, tls_ca: Option<&str>, insecure_plaintext| BenchArgs {
            conn: ConnArgs {
                target,
                tls_ca: tls_ca.map(PathBuf::from),
                insecure_plaintext,
                ..ConnArgs::default()
            },
            ..BenchArgs::default()
        };
        conn(Target::Redis, Some("ca.pem"), false).validate().unwrap();
        conn(Target::Etcd, Some("ca.pem"), false).validate().unwrap();
        let e = conn(Target::Zookeeper, Some("ca.pem"), false).validate().unwrap_err();
        assert!(e.to_string().contains("zookeeper target connects over plain TCP"), "{e}");
        let e = conn(Target::Redis, None, true).validate().unwrap_err();
        assert!(e.to_string().contains("--insecure-plaintext is for Strata"), "{e}");
        // A Redis run with an unreadable CA fails before any connection, naming the file.
        let e =
            conn(Target::Redis, Some("/nonexistent/ca.pem"), false).conn.peer_tls().unwrap_err();
        assert!(matches!(e, BenchError::Credentials(_)) && e.to_string().contains("ca.pem"), "{e}");
        // Strata's credentials are its own options', never loaded as a peer's.
        let strata = conn(Target::Strata, Some("/nonexistent/ca.pem"), false);
        assert!(strata.conn.peer_tls().unwrap().is_none());
    }

    #[test]
    fn the_load_generators_threads_are_one_to_sixty_four() {
        assert_eq!(Cli::try_parse_from(["bench"]).unwrap().bench.run.threads, 2);
        assert_eq!(Cli::try_parse_from(["bench", "--threads", "1"]).unwrap().bench.run.threads, 1);
        for bad in ["0", "65", "two"] {
            let Err(e) = Cli::try_parse_from(["bench", "--threads", bad]) else {
                panic!("--threads {bad} was taken")
            };
            assert!(e.to_string().contains("--threads"), "{bad}: {e}");
        }
    }

    #[test]
    fn client_delays_spread_over_the_endpoints() {
        let cli = Cli::try_parse_from(["bench", "--client-delay-ms", "1,18.5,18.5"]).unwrap();
        assert_eq!(cli.bench.client_delays_ms(3).unwrap(), vec![1.0, 18.5, 18.5]);
        let e = cli.bench.client_delays_ms(2).unwrap_err();
        assert!(e.to_string().contains("--client-delay-ms has 3 values for 2 endpoints"), "{e}");
        let one = BenchArgs {
            conn: ConnArgs { client_delay_ms: Some(vec![2.0]), ..ConnArgs::default() },
            ..BenchArgs::default()
        };
        assert_eq!(one.client_delays_ms(2).unwrap(), vec![2.0, 2.0]);
        assert_eq!(BenchArgs::default().client_delays_ms(2).unwrap(), vec![0.0, 0.0]);
    }

    #[test]
    fn redis_defaults_to_the_usual_port() {
        let a = BenchArgs {
            conn: ConnArgs { target: Target::Redis, ..ConnArgs::default() },
            ..BenchArgs::default()
        };
        assert_eq!(a.default_endpoints(), vec!["127.0.0.1:6379".parse::<SocketAddr>().unwrap()]);
        assert!(BenchArgs::default().default_endpoints().is_empty());
        let a = BenchArgs {
            conn: ConnArgs { target: Target::Etcd, ..ConnArgs::default() },
            ..BenchArgs::default()
        };
        assert_eq!(a.default_endpoints(), vec!["127.0.0.1:2379".parse::<SocketAddr>().unwrap()]);
    }

    #[test]
    fn etcd_takes_linearizable_mixes_and_cas_but_refuses_faa_and_ds_workloads() {
        for mode in [Mode::Es, Mode::Abd, Mode::Kite] {
            BenchArgs {
                conn: ConnArgs { target: Target::Etcd, ..ConnArgs::default() },
                sync: SyncArgs { mode, ..SyncArgs::default() },
                ..BenchArgs::default()
            }
            .validate()
            .unwrap();
        }
        BenchArgs {
            conn: ConnArgs { target: Target::Etcd, ..ConnArgs::default() },
            sync: SyncArgs { mode: Mode::Paxos, rmw: RmwKind::Cas, ..SyncArgs::default() },
            ..BenchArgs::default()
        }
        .validate()
        .unwrap();
        let e = BenchArgs {
            conn: ConnArgs { target: Target::Etcd, ..ConnArgs::default() },
            sync: SyncArgs { mode: Mode::Paxos, ..SyncArgs::default() },
            ..BenchArgs::default()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("fetch-and-add"), "{e}");
        let e = BenchArgs {
            conn: ConnArgs { target: Target::Etcd, ..ConnArgs::default() },
            workload: WorkloadArgs { kind: WorkloadKind::Ts, ..WorkloadArgs::default() },
            ..BenchArgs::default()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("etcd"), "{e}");
    }

    #[test]
    fn ycsb_presets_parse_and_flags_override_them() {
        let args = |a: &[&str]| {
            let mut v = vec!["bench"];
            v.extend_from_slice(a);
            Cli::try_parse_from(v).map(|c| c.bench)
        };
        let d = args(&[]).unwrap();
        assert_eq!(
            (d.workload.ycsb, d.ycsb_mix(), d.dist(), d.write_ratio()),
            (None, None, Distribution::Uniform, 5.0)
        );
        for (flag, y, w, kind, dist) in [
            ("w", Ycsb::W, 100.0, YcsbWrite::Update, Distribution::Zipfian),
            ("A", Ycsb::A, 50.0, YcsbWrite::Update, Distribution::Zipfian),
            ("b", Ycsb::B, 5.0, YcsbWrite::Update, Distribution::Zipfian),
            ("c", Ycsb::C, 0.0, YcsbWrite::Update, Distribution::Zipfian),
            ("D", Ycsb::D, 5.0, YcsbWrite::Insert, Distribution::Latest),
            ("f", Ycsb::F, 50.0, YcsbWrite::Rmw, Distribution::Zipfian),
        ] {
            let a = args(&["--ycsb", flag]).unwrap();
            assert_eq!(a.workload.ycsb, Some(y));
            assert_eq!(
                (a.write_ratio(), a.dist(), a.workload.zipf_theta),
                (w, dist, 0.99),
                "{flag}"
            );
            assert_eq!(y.preset().1, kind);
            let m = a.ycsb_mix().unwrap();
            assert_eq!(m.read_pct + m.update_pct + m.insert_pct + m.rmw_pct, 100.0);
            a.validate().unwrap();
        }
        // Explicit flags override the preset: the non-read share keeps the preset's kind.
        let a = args(&["--ycsb", "d", "--write-ratio", "20", "--dist", "uniform"]).unwrap();
        let m = a.ycsb_mix().unwrap();
        assert_eq!(
            (m.read_pct, m.insert_pct, m.update_pct, a.dist()),
            (80.0, 20.0, 0.0, Distribution::Uniform)
        );
        let a = args(&["--ycsb", "a", "--zipf-theta", "0.5", "--dist", "latest"]).unwrap();
        assert_eq!((a.dist(), a.workload.zipf_theta), (Distribution::Latest, 0.5));
        assert!(args(&["--ycsb", "e"]).is_err(), "E needs range scans");
        // YCSB is relaxed operations only, and inserts need room in the key size.
        let e = args(&["--ycsb", "a", "--mode", "abd"]).unwrap().validate().unwrap_err();
        assert!(e.to_string().contains("--ycsb"), "{e}");
        let e = args(&["--ycsb", "d", "--keys", "1000", "--key-size", "4"])
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("--key-size"), "{e}");
        args(&["--ycsb", "a", "--keys", "1000", "--key-size", "4"]).unwrap().validate().unwrap();
        args(&["--ycsb", "d", "--target", "zookeeper"]).unwrap().validate().unwrap();
    }

    #[test]
    fn zookeeper_takes_relaxed_mixes_only_and_defaults_to_2181() {
        let a = BenchArgs {
            conn: ConnArgs { target: Target::Zookeeper, ..ConnArgs::default() },
            ..BenchArgs::default()
        };
        a.validate().unwrap();
        assert_eq!(a.default_endpoints(), vec!["127.0.0.1:2181".parse::<SocketAddr>().unwrap()]);
        for mode in [Mode::Abd, Mode::Paxos, Mode::Kite] {
            let e = BenchArgs {
                conn: ConnArgs { target: Target::Zookeeper, ..ConnArgs::default() },
                sync: SyncArgs { mode, rmw: RmwKind::Cas, ..SyncArgs::default() },
                ..BenchArgs::default()
            }
            .validate()
            .unwrap_err();
            assert!(e.to_string().contains("zookeeper"), "{e}");
        }
        let e = BenchArgs {
            conn: ConnArgs { target: Target::Zookeeper, ..ConnArgs::default() },
            workload: WorkloadArgs { kind: WorkloadKind::Hml, ..WorkloadArgs::default() },
            ..BenchArgs::default()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("zookeeper"), "{e}");
    }

    #[test]
    fn kairos_flags_parse_check_and_belong_to_the_kairos_workload() {
        let args = |a: &[&str]| {
            let mut v = vec!["bench"];
            v.extend_from_slice(a);
            Cli::try_parse_from(v).map(|c| c.bench)
        };
        let k = args(&["--workload", "kairos", "--table", "t"]).unwrap();
        k.validate().unwrap();
        assert_eq!((k.workload.keys(), k.kairos.clone()), (200_000, KairosArgs::default()));
        assert_eq!(args(&[]).unwrap().workload.keys(), 100_000, "other workloads keep 100k");
        let k = args(&[
            "--workload",
            "kairos",
            "--table",
            "t",
            "--keys",
            "1000",
            "--ro-pct",
            "50",
            "--read-zipf",
            "1.2",
            "--cache",
            "static:0.3",
            "--offered-rate",
            "500",
        ])
        .unwrap();
        k.validate().unwrap();
        assert_eq!(k.workload.keys(), 1000);
        assert_eq!(k.kairos.cache, CachePolicy(Some(LeasePolicy::StaticP(0.3))));
        assert_eq!((k.kairos.read_zipf, k.kairos.offered_rate), (1.2, Some(500.0)));
        // Every policy reads back from its name, also through the JSON report.
        for p in ["none", "naive", "ei", "ideal", "static:0.1", "mean", "fixed:2.5"] {
            let c: CachePolicy = p.parse().unwrap();
            assert_eq!(c.to_string(), p);
            let json = serde_json::to_string(&c).unwrap();
            assert_eq!(serde_json::from_str::<CachePolicy>(&json).unwrap(), c);
        }
        for bad in ["lru", "static:1", "static:0", "static:x", "fixed:-1", "mean:2"] {
            assert!(bad.parse::<CachePolicy>().is_err(), "{bad} accepted");
        }
        let refused = |a: &[&str], needle: &str| {
            let e = args(a).unwrap().validate().unwrap_err().to_string();
            assert!(e.contains(needle), "{a:?}: {e}");
        };
        refused(&["--workload", "kairos"], "--table");
        refused(&["--ro-pct", "50"], "--workload kairos");
        refused(&["--workload", "kairos", "--table", "t", "--ro-pct", "101"], "--ro-pct");
        refused(&["--workload", "kairos", "--table", "t", "--write-zipf", "0"], "--write-zipf");
        refused(&["--workload", "kairos", "--table", "t", "--txn-keys", "0"], "--txn-keys");
        refused(&["--workload", "kairos", "--table", "t", "--offered-rate", "0"], "--offered-rate");
        refused(&["--workload", "kairos", "--target", "redis"], "--workload kairos runs on Strata");
    }
}
