//! The commands that talk to a running cluster: get, put, del, status, fault.

use std::io::Write;

use bytes::Bytes;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use strata_client::{
    Client, ClientError, ClientOptions, ClusterId, LinkFault, NodeId, NodeStatus, ShardRole,
    ShardStatus, TableDef, TableDurability, TableEngine, TableReads, TableReplication,
};
use strata_host::catalog::{
    check_table_def, describe, durability_name, parse_validation, reads_name, replication_name,
    timers_name, txn_name, validation_name,
};
use strata_wire::client::{TableTimers, TableTxn, TableValidation, MAX_VALIDATORS};

use crate::cluster_file::ClusterFile;
use crate::exit::{
    Failure, DENIED, FAILED, NOT_FOUND, NOT_SWAPPED, OK, OUTCOME_UNKNOWN, UNREACHABLE, USAGE,
};

/// Which cluster to talk to. By default: the one `strata up` runs from `--data-dir`.
#[derive(clap::Args, Debug, Clone)]
pub struct Target {
    /// Client addresses of the nodes, comma-separated; default: read from the cluster file
    /// that `strata up` wrote into --data-dir.
    #[arg(long, global = true, value_delimiter = ',', value_name = "ADDR,...")]
    pub endpoints: Vec<SocketAddr>,
    /// Data directory of the `strata up` cluster.
    #[arg(long, global = true, env = "STRATA_DATA_DIR", default_value = "strata-data")]
    pub data_dir: PathBuf,
    /// Cluster id; default: the cluster file's, else 1.
    #[arg(long, global = true)]
    pub cluster_id: Option<u64>,
    /// Seconds to wait for an answer before giving up (exit code 5: outcome unknown).
    #[arg(long, global = true, default_value_t = 10.0)]
    pub timeout: f64,
    #[command(flatten)]
    pub tls: crate::credentials::TlsArgs,
}

impl Target {
    /// The endpoints and cluster id to use.
    pub fn resolve(&self) -> Result<(Vec<SocketAddr>, ClusterId), Failure> {
        if !self.endpoints.is_empty() {
            return Ok((self.endpoints.clone(), ClusterId(self.cluster_id.unwrap_or(1))));
        }
        let file = ClusterFile::read(&self.data_dir)?;
        Ok((file.endpoints(), ClusterId(self.cluster_id.unwrap_or(file.cluster_id))))
    }

    /// How to connect: timeouts, and TLS with the credentials `credentials` finds.
    fn options(&self, cluster: ClusterId) -> Result<ClientOptions, Failure> {
        let timeout = Duration::from_secs_f64(self.timeout.max(0.001));
        let tls = self.tls.resolve(&self.data_dir)?.map(|p| p.load()).transpose()?;
        Ok(ClientOptions {
            cluster,
            request_timeout: Some(timeout),
            connect_timeout: timeout.min(Duration::from_secs(2)),
            tls,
            ..ClientOptions::default()
        })
    }

    pub(crate) async fn client(&self) -> Result<Client, Failure> {
        let (endpoints, cluster) = self.resolve()?;
        Ok(Client::connect(&endpoints, self.options(cluster)?).await?)
    }
}

pub async fn get(
    target: &Target,
    key: String,
    acquire: bool,
    show_version: bool,
    raw: bool,
) -> Result<i32, Failure> {
    let client = target.client().await?;
    let mut s = client.open_session().await?;
    let v = if acquire { s.acquire(key.clone()).await? } else { s.get(key.clone()).await? };
    if show_version {
        eprintln!("version {}", v.version);
    }
    print_value(&key, v.value, raw)
}

/// Prints a read's value on stdout (exit 0), or says the key has none (exit 3). On a
/// terminal, a value that is not printable text is escaped unless `raw` (issue #18: binary
/// never goes to a terminal as it is); to a pipe or a file, the bytes go as they are.
/// A value as written to standard output: as it is to a pipe or file, or when it is printable
/// text; escaped (`\xNN`, `\n`, ...) on a terminal otherwise.
pub fn displayable(value: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() || is_printable(value) {
        std::borrow::Cow::Borrowed(value)
    } else {
        std::borrow::Cow::Owned(value.escape_ascii().to_string().into_bytes())
    }
}

fn print_value(key: &str, value: Option<bytes::Bytes>, raw: bool) -> Result<i32, Failure> {
    match value {
        Some(value) => {
            let mut out = std::io::stdout().lock();
            let bytes =
                if raw { std::borrow::Cow::Borrowed(&value[..]) } else { displayable(&value) };
            out.write_all(&bytes)
                .and_then(|()| out.write_all(b"\n"))
                .map_err(|e| Failure::new(FAILED, e.to_string()))?;
            Ok(OK)
        }
        None => {
            eprintln!("{key}: not found");
            Ok(NOT_FOUND)
        }
    }
}

/// Text a terminal shows as it is: UTF-8 without control characters other than tab.
fn is_printable(value: &[u8]) -> bool {
    std::str::from_utf8(value).is_ok_and(|s| s.chars().all(|c| c == '\t' || !c.is_control()))
}

/// A `put`'s value: the argument, or the bytes of `--value-file` (`-`: standard input).
pub fn read_value(value: Option<String>, file: Option<PathBuf>) -> Result<Bytes, Failure> {
    use std::io::Read;
    match (value, file) {
        (Some(v), None) => Ok(Bytes::from(v)),
        (None, Some(path)) if path.as_os_str() == "-" => {
            let mut buf = Vec::new();
            std::io::stdin().read_to_end(&mut buf).map_err(|e| {
                Failure::new(FAILED, format!("cannot read the value from stdin: {e}"))
            })?;
            Ok(Bytes::from(buf))
        }
        (None, Some(path)) => std::fs::read(&path).map(Bytes::from).map_err(|e| {
            Failure::new(FAILED, format!("cannot read the value file {}: {e}", path.display()))
        }),
        _ => Err(Failure::new(USAGE, "give VALUE or --value-file PATH (`-`: stdin), not both")),
    }
}

pub async fn put(
    target: &Target,
    key: String,
    value: Bytes,
    release: bool,
    show_version: bool,
) -> Result<i32, Failure> {
    let client = target.client().await?;
    let mut s = client.open_session().await?;
    let cs = if release { s.release(key, value).await? } else { s.put(key, value).await? };
    if show_version {
        eprintln!("version {cs}");
    }
    Ok(OK)
}

pub async fn del(target: &Target, key: String, show_version: bool) -> Result<i32, Failure> {
    let client = target.client().await?;
    let mut s = client.open_session().await?;
    let cs = s.delete(key).await?;
    if show_version {
        eprintln!("version {cs}");
    }
    Ok(OK)
}

pub async fn faa(
    target: &Target,
    key: String,
    delta: u64,
    show_version: bool,
    repeat: u64,
) -> Result<i32, Failure> {
    let client = target.client().await?;
    let mut s = client.open_session().await?;
    let mut unknown = 0u64;
    for _ in 0..repeat {
        let r = match s.call(strata_client::Op::faa(key.clone(), delta)).await {
            Ok(strata_client::Outcome::Rmw(r)) => r,
            Ok(other) => return Err(Failure::new(FAILED, format!("unexpected reply {other:?}"))),
            // With --repeat, an unknown outcome is reported and the run goes on.
            Err(e @ ClientError::ExpiredLease(_)) if repeat > 1 => {
                eprintln!("outcome unknown: {e}");
                println!("?");
                unknown += 1;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if show_version {
            eprintln!(
                "read version {}, wrote version {}",
                r.observed.version,
                r.written.map_or("-".into(), |c| c.to_string())
            );
        }
        println!("{}", r.faa_old(delta)?);
    }
    Ok(if unknown > 0 { OUTCOME_UNKNOWN } else { OK })
}

/// Splits `strata cas` positionals: KEY EXPECTED NEW, or KEY NEW with --expect-absent.
pub fn cas_args(
    args: Vec<String>,
    expect_absent: bool,
) -> Result<(String, Option<Bytes>, String), Failure> {
    match (expect_absent, <[String; 2]>::try_from(args.clone()), <[String; 3]>::try_from(args)) {
        (true, Ok([key, new]), _) => Ok((key, None, new)),
        (false, _, Ok([key, expected, new])) => Ok((key, Some(Bytes::from(expected)), new)),
        (true, _, _) => Err(Failure::new(USAGE, "with --expect-absent, give KEY NEW")),
        (false, _, _) => {
            Err(Failure::new(USAGE, "give KEY EXPECTED NEW (or KEY NEW with --expect-absent)"))
        }
    }
}

pub async fn cas(
    target: &Target,
    key: String,
    expected: Option<Bytes>,
    new: String,
    weak: bool,
    show_version: bool,
) -> Result<i32, Failure> {
    let client = target.client().await?;
    let mut s = client.open_session().await?;
    let r = s.cas(key, expected, new, weak).await?;
    if show_version {
        eprintln!(
            "read version {}, wrote version {}",
            r.observed.version,
            r.written.map_or("-".into(), |c| c.to_string())
        );
    }
    println!("{}", if r.swapped { "swapped" } else { "not swapped" });
    match &r.observed.value {
        Some(v) => println!("seen: {}", String::from_utf8_lossy(v)),
        None => println!("seen: (absent)"),
    }
    Ok(if r.swapped { OK } else { NOT_SWAPPED })
}

/// Asks every node for its status. Exit 0 if all answer, 1 if some are down, 4 if none is up.
pub async fn status(target: &Target, json: bool) -> Result<i32, Failure> {
    let (endpoints, cluster) = target.resolve()?;
    let opts = target.options(cluster)?;
    let mut rows: Vec<(SocketAddr, Result<NodeStatus, String>)> = Vec::new();
    let mut denied = 0;
    for addr in endpoints {
        let r = match Client::connect_node(addr, opts.clone()).await {
            Ok(c) => c.status().await,
            Err(e) => Err(e),
        };
        denied += usize::from(r.as_ref().is_err_and(ClientError::is_denied));
        rows.push((addr, r.map_err(|e| e.to_string())));
    }
    if json {
        let v: Vec<serde_json::Value> = rows.iter().map(|(a, r)| status_json(*a, r)).collect();
        println!("{}", serde_json::to_string_pretty(&v).expect("json"));
    } else {
        print_status(&rows);
    }
    let up = rows.iter().filter(|(_, r)| r.is_ok()).count();
    Ok(if up == rows.len() {
        OK
    } else if denied == rows.len() {
        DENIED
    } else if up == 0 {
        UNREACHABLE
    } else {
        FAILED
    })
}

fn print_status(rows: &[(SocketAddr, Result<NodeStatus, String>)]) {
    print_nodes(rows);
    let shards: Vec<(&ShardStatus, NodeId)> = rows
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok())
        .flat_map(|s| s.shards.iter().map(move |sh| (sh, s.node)))
        .collect();
    if shards.is_empty() {
        return;
    }
    println!();
    // `reads`: served by this replica; `made_dur`: of those, reads that waited for MakeDurable
    // at the leader (ORCA §5.5.1), the reads that triggered durability; `locks`: transaction
    // locks the replica's applied state holds (prepared, not yet decided).
    println!(
        "{:<16} {:>5} {:>4}  {:<9} {:>6} {:>5} {:>11} {:>11} {:>11} {:>11}  {:<10} {:<7} {:>10} {:>9} {:>6}",
        "table", "shard", "node", "role", "leader", "epoch", "last", "persisted", "applied", "durable", "active_set",
        "serving", "reads", "made_dur", "locks"
    );
    let mut shards = shards;
    shards.sort_by(|a, b| (&a.0.table, a.0.shard, a.1).cmp(&(&b.0.table, b.0.shard, b.1)));
    for (sh, node) in shards {
        println!(
            "{:<16} {:>5} {:>4}  {:<9} {:>6} {:>5} {:>11} {:>11} {:>11} {:>11}  {:<10} {:<7} {:>10} {:>9} {:>6}",
            sh.table,
            sh.shard,
            node.0,
            role_name(sh.role),
            sh.leader.map_or("-".to_string(), |l| l.0.to_string()),
            sh.epoch,
            sh.last_index.to_string(),
            sh.persisted_index.to_string(),
            sh.applied_index.to_string(),
            sh.durable_index.to_string(),
            if sh.active_set.is_empty() { "-".to_string() } else { node_list(&sh.active_set) },
            if sh.serving { "yes" } else { "no" },
            sh.reads_served,
            sh.reads_made_durable,
            sh.locks,
        );
    }
}

fn role_name(r: ShardRole) -> &'static str {
    match r {
        ShardRole::Follower => "follower",
        ShardRole::Candidate => "candidate",
        ShardRole::Leader => "leader",
    }
}

fn node_list(nodes: &[NodeId]) -> String {
    nodes.iter().map(|n| n.0.to_string()).collect::<Vec<_>>().join(",")
}

fn shard_json(sh: &ShardStatus) -> serde_json::Value {
    serde_json::json!({
        "table": sh.table,
        "shard": sh.shard,
        "role": role_name(sh.role),
        "leader": sh.leader.map(|l| l.0),
        "epoch": sh.epoch,
        "last_index": sh.last_index.to_string(),
        "persisted_index": sh.persisted_index.to_string(),
        "applied_index": sh.applied_index.to_string(),
        "durable_index": sh.durable_index.to_string(),
        "active_set": sh.active_set.iter().map(|n| n.0).collect::<Vec<_>>(),
        "serving": sh.serving,
        "reads_served": sh.reads_served,
        "reads_made_durable": sh.reads_made_durable,
        "locks": sh.locks,
        "txn_reads_foreseen": sh.txn_reads_foreseen,
        "txn_prepares_foreseen_aborted": sh.txn_prepares_foreseen_aborted,
        "txn_reads_held": sh.txn_reads_held,
    })
}

fn print_nodes(rows: &[(SocketAddr, Result<NodeStatus, String>)]) {
    // `conns`: client connections open; `refused`: refused at a cap; `buf_kib`: what the
    // node holds for client connections (requests unanswered, replies unwritten).
    println!(
        "{:<5} {:<22} {:>9} {:>8} {:>8} {:>8} {:>9} {:>9} {:>6} {:>13} {:>6} {:>8} {:>8}  peers (connected/total)",
        "node",
        "clients",
        "uptime_s",
        "keys",
        "sessions",
        "pending",
        "bad_cli",
        "bad_peer",
        "epoch",
        "barriers f/s",
        "conns",
        "refused",
        "buf_kib"
    );
    for (addr, r) in rows {
        match r {
            Ok(s) => {
                let connected = s.peers.iter().filter(|p| p.connected).count();
                let faults: Vec<String> = s
                    .peers
                    .iter()
                    .filter(|p| !p.fault.is_clear())
                    .map(|p| format!("{}:{}", p.node, describe_fault(&p.fault)))
                    .collect();
                println!(
                    "{:<5} {:<22} {:>9} {:>8} {:>8} {:>8} {:>9} {:>9} {:>6} {:>13} {:>6} {:>8} {:>8}  {}/{}{}",
                    s.node.0,
                    addr.to_string(),
                    s.uptime_ms / 1000,
                    s.keys,
                    s.sessions,
                    s.pending_writes,
                    s.bad_client_frames,
                    s.bad_peer_frames,
                    s.machine_epoch,
                    format!("{}/{}", s.barriers_fast, s.barriers_slow),
                    s.connections.open,
                    s.connections.refused,
                    s.connections.buffered_bytes.div_ceil(1024),
                    connected,
                    s.peers.len(),
                    if faults.is_empty() {
                        String::new()
                    } else {
                        format!("  faults: {}", faults.join(" "))
                    }
                );
            }
            Err(e) => println!("{:<5} {:<22} DOWN: {e}", "?", addr.to_string()),
        }
    }
}

fn status_json(addr: SocketAddr, r: &Result<NodeStatus, String>) -> serde_json::Value {
    match r {
        Ok(s) => serde_json::json!({
            "addr": addr.to_string(),
            "up": true,
            "node": s.node.0,
            "uptime_ms": s.uptime_ms,
            "keys": s.keys,
            "sessions": s.sessions,
            "pending_writes": s.pending_writes,
            "bad_client_frames": s.bad_client_frames,
            "bad_peer_frames": s.bad_peer_frames,
            "machine_epoch": s.machine_epoch,
            "barriers_fast": s.barriers_fast,
            "barriers_slow": s.barriers_slow,
            "slow_path_accesses": s.slow_path_accesses,
            "connections": {
                "open": s.connections.open,
                "refused": s.connections.refused,
                "buffered_bytes": s.connections.buffered_bytes,
                "paused": s.connections.paused,
                "closed_idle": s.connections.closed_idle,
                "closed_slow_frame": s.connections.closed_slow_frame,
                "forbidden": s.connections.forbidden,
                "invalid_envelopes": s.connections.invalid_envelopes,
            },
            "peers": s.peers.iter().map(|p| serde_json::json!({
                "node": p.node.0,
                "addr": p.addr,
                "connected": p.connected,
                "fault": describe_fault(&p.fault),
                "messages_sent": p.messages_sent,
                "messages_dropped_by_fault": p.messages_dropped_by_fault,
            })).collect::<Vec<_>>(),
            "shards": s.shards.iter().map(shard_json).collect::<Vec<_>>(),
        }),
        Err(e) => serde_json::json!({ "addr": addr.to_string(), "up": false, "error": e }),
    }
}

fn describe_fault(f: &LinkFault) -> String {
    if f.is_clear() {
        return "none".into();
    }
    let mut parts = Vec::new();
    if f.partitioned {
        parts.push("partitioned".to_string());
    }
    if f.delay_us > 0 || f.jitter_us > 0 {
        parts.push(format!("delay={}us+{}us", f.delay_us, f.jitter_us));
    }
    if f.loss_ppm > 0 {
        parts.push(format!("loss={}%", f64::from(f.loss_ppm) / 10_000.0));
    }
    parts.join(",")
}

/// `strata fault`: set or clear the fault layer of one node's outbound links.
#[derive(clap::Args, Debug, Clone)]
pub struct FaultArgs {
    /// The node whose outbound links change (its id in the cluster file).
    #[arg(long)]
    pub node: u32,
    /// Only the link to this peer; default: every peer of the node.
    #[arg(long)]
    pub peer: Option<u32>,
    /// Added one-way delay, milliseconds (fractions allowed).
    #[arg(long, default_value_t = 0.0)]
    pub delay_ms: f64,
    /// Random extra delay in [0, JITTER], milliseconds.
    #[arg(long, default_value_t = 0.0)]
    pub jitter_ms: f64,
    /// Percentage of messages dropped, 0-100.
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Drop every message (a one-way cut; set it on both nodes for a full partition).
    #[arg(long)]
    pub partition: bool,
    /// Remove every fault (the default when no fault flag is given).
    #[arg(long, conflicts_with_all = ["delay_ms", "jitter_ms", "loss", "partition"])]
    pub clear: bool,
}

pub async fn fault(target: &Target, args: &FaultArgs) -> Result<i32, Failure> {
    if !(0.0..=100.0).contains(&args.loss) || args.delay_ms < 0.0 || args.jitter_ms < 0.0 {
        return Err(Failure::new(
            FAILED,
            "--loss must be within 0-100 and delays must not be negative",
        ));
    }
    let addr = node_addr(target, args.node)?;
    let (_, cluster) =
        target.resolve().unwrap_or((Vec::new(), ClusterId(target.cluster_id.unwrap_or(1))));
    let fault = LinkFault {
        delay_us: (args.delay_ms * 1000.0) as u64,
        jitter_us: (args.jitter_ms * 1000.0) as u64,
        loss_ppm: (args.loss * 10_000.0) as u32,
        partitioned: args.partition,
    };
    let client = Client::connect_node(addr, target.options(cluster)?).await?;
    client.set_fault(args.peer.map(NodeId), fault).await?;
    let to = args.peer.map_or("every peer".to_string(), |p| format!("node {p}"));
    println!("node {} → {to}: {}", args.node, describe_fault(&fault));
    Ok(OK)
}

/// The client address of node `id`: from the cluster file, or `--endpoints` in id order.
fn node_addr(target: &Target, id: u32) -> Result<SocketAddr, Failure> {
    if !target.endpoints.is_empty() {
        return target.endpoints.get(id as usize).copied().ok_or_else(|| {
            Failure::new(
                FAILED,
                format!(
                    "--node {id}: only {} endpoints given (listed in node-id order)",
                    target.endpoints.len()
                ),
            )
        });
    }
    let file = ClusterFile::read(&target.data_dir)?;
    file.nodes.iter().find(|n| n.id == id).map(|n| n.client_addr).ok_or_else(|| {
        Failure::new(
            FAILED,
            format!("the cluster has no node {id} (nodes 0..{})", file.nodes.len()),
        )
    })
}

// ---- log tables ----

#[derive(clap::Subcommand, Debug, Clone)]
// Parsed once per process: the size of the variants does not matter.
#[allow(clippy::large_enum_variant)]
pub enum TableCommand {
    /// Create a table on every node of the cluster (each node persists it in its catalog and
    /// starts one replica per shard). Idempotent for an identical definition; fails, naming the
    /// nodes, unless every node accepted it.
    Create(CreateArgs),
    /// List the tables of the cluster (as one node's catalog has them).
    List,
}

#[derive(clap::Args, Debug, Clone)]
pub struct CreateArgs {
    pub name: String,
    /// The table's engine (only `log`: the Kite keyspace is the default, tableless one).
    #[arg(long, value_parser = ["log"], default_value = "log")]
    pub engine: String,
    /// When writes are acknowledged: `sync` (fsynced on a majority), `async` (persisted in the
    /// background), `cad` (asynchronous, made durable before any read returns it). Default
    /// `cad` (`sync` with --txn rifl).
    #[arg(long, value_parser = ["sync", "async", "cad"])]
    pub durability: Option<String>,
    /// How writes replicate before the acknowledgement: `async` buffers on the leader only,
    /// `sync` waits for a majority's memory. Default `async` (`sync` for sync durability).
    #[arg(long, value_parser = ["sync", "async"])]
    pub replication: Option<String>,
    /// Which nodes serve reads: `leader`, `active-set` (leased followers too, ORCA) or `any`
    /// (no durability check). Default `active-set` (`leader` with --txn rifl).
    #[arg(long, value_parser = ["leader", "active-set", "any"])]
    pub reads: Option<String>,
    #[arg(long, default_value_t = 1)]
    pub shards: u32,
    /// Timer preset of the shards (ORCA §3.4): `default` (heartbeat 30 ms, mark-out 100 ms,
    /// removal 500 ms) for a LAN, `geo` (25 / 150 / 750 ms) for a WAN RTT of about 35 ms.
    #[arg(long, value_parser = ["default", "geo"], default_value = "default")]
    pub timers: String,
    /// Preferred shard leaders, node ids separated by commas: shard i's is the (i mod count)-th;
    /// it stands first in its shard's elections, so it leads after the table's creation and
    /// usually after a failover (default: no preference).
    #[arg(long, value_name = "ID,...", value_delimiter = ',')]
    pub leaders: Vec<u32>,
    /// Transactions: `rifl` (RIFL's two-phase commit with locks, `strata txn`) or `kairos`
    /// (OCC on commit timestamps, validated in the shards' logs; its keys are written by
    /// transactions only); they need `sync` durability and `leader` reads (the defaults with
    /// them). Default `none`.
    #[arg(long, value_parser = ["none", "rifl", "kairos"], default_value = "none")]
    pub txn: String,
    /// Where a `--txn kairos` table's transactions are validated: `server` (in each shard's
    /// log, kairos.md §9.12; the default) or `sharded:V` (V validators, `hash(key) mod V`,
    /// kairos.md §1.3: the shards of a companion table `NAME.validators` made with it, placed
    /// and replicated like any table's; the table's own shards then only replicate writes).
    #[arg(long, value_name = "server|sharded:V")]
    pub validation: Option<String>,
}

impl CreateArgs {
    pub fn to_def(&self) -> Result<TableDef, Failure> {
        let txn = match self.txn.as_str() {
            "rifl" => TableTxn::Rifl,
            "kairos" => TableTxn::Kairos,
            _ => TableTxn::None,
        };
        let validation = match (txn, self.validation.as_deref()) {
            (_, None) => TableValidation::Server,
            (TableTxn::Kairos, Some(v)) => match parse_validation(v) {
                Some(TableValidation::Validators) | None => {
                    return Err(Failure::new(
                        USAGE,
                        format!("--validation {v:?}: expected server or sharded:V (V validators, 1 to {MAX_VALIDATORS})"),
                    ))
                }
                Some(v) => v,
            },
            (_, Some(_)) => {
                return Err(Failure::new(USAGE, "--validation applies to --txn kairos tables only"))
            }
        };
        let transactional = txn != TableTxn::None;
        let durability = match self.durability.as_deref() {
            Some("sync") => TableDurability::Sync,
            Some("async") => TableDurability::Async,
            None if transactional => TableDurability::Sync,
            _ => TableDurability::Cad,
        };
        let replication = match (durability, self.replication.as_deref()) {
            (TableDurability::Sync, Some("async")) => {
                return Err(Failure::new(
                    USAGE,
                    "sync durability replicates synchronously: drop --replication async",
                ))
            }
            (TableDurability::Sync, _) | (_, Some("sync")) => TableReplication::Sync,
            _ => TableReplication::Async,
        };
        let reads = match self.reads.as_deref() {
            Some("leader") => TableReads::Leader,
            Some("any") => TableReads::Any,
            None if transactional => TableReads::Leader,
            _ => TableReads::ActiveSet,
        };
        let timers = if self.timers == "geo" { TableTimers::Geo } else { TableTimers::Default };
        Ok(TableDef {
            name: self.name.clone(),
            engine: TableEngine::Log,
            durability,
            replication,
            reads,
            shards: self.shards,
            timers,
            leaders: self.leaders.iter().copied().map(NodeId).collect(),
            txn,
            validation,
        })
    }
}

pub async fn table(target: &Target, command: TableCommand) -> Result<i32, Failure> {
    match command {
        TableCommand::Create(args) => table_create(target, &args).await,
        TableCommand::List => table_list(target).await,
    }
}

/// [DECISION] The CLI sends the definition to every node of the cluster file; the command
/// succeeds only if all of them accepted it (the catalog is not replicated yet).
async fn table_create(target: &Target, args: &CreateArgs) -> Result<i32, Failure> {
    let def = args.to_def()?;
    let (endpoints, cluster) = target.resolve()?;
    check_table_def(&def, endpoints.len())
        .map_err(|m| Failure::new(USAGE, format!("table {}: {m}", def.name)))?;
    let opts = target.options(cluster)?;
    let mut failed = Vec::new();
    let mut unreachable = 0;
    let mut denied = Vec::new();
    for addr in &endpoints {
        let r = match Client::connect_node(*addr, opts.clone()).await {
            Ok(c) => c.create_table(def.clone()).await,
            Err(e) => {
                unreachable += 1;
                Err(e)
            }
        };
        match r {
            Ok(true) => println!("{addr}: created"),
            Ok(false) => println!("{addr}: already exists (identical)"),
            Err(e) => {
                println!("{addr}: FAILED: {e}");
                if e.is_denied() {
                    denied.push(Failure::from(e));
                }
                failed.push(addr.to_string());
            }
        }
    }
    if failed.is_empty() {
        println!("table {}: {} on {} node(s)", def.name, describe(&def), endpoints.len());
        return Ok(OK);
    }
    let code = if unreachable == endpoints.len() {
        UNREACHABLE
    } else if denied.len() == endpoints.len() {
        // Every node refused the credentials: say why, as every command does.
        return Err(denied.swap_remove(0));
    } else {
        FAILED
    };
    Err(Failure::new(
        code,
        format!(
            "table {} was not created on every node; failed on: {}",
            def.name,
            failed.join(", ")
        ),
    ))
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum ShardCommand {
    /// Move a shard of a log table to other nodes (rifl.md §5.7): its keys move with their
    /// completion records, so a write retried after the move is answered from its record,
    /// never executed twice. The shard's leader freezes it (writes and reads wait, answered
    /// "moved"), then every node adopts the new placement. Every node must be up; if the move
    /// is interrupted, run it again to finish it.
    Move {
        /// The log table.
        table: String,
        /// The shard number (0 to shards - 1; `strata status` lists them).
        shard: u32,
        /// The node ids that will hold the shard, comma-separated (e.g. `--to 1,2,3`).
        #[arg(long, value_delimiter = ',', required = true, value_name = "ID,...")]
        to: Vec<u32>,
    },
}

pub async fn shard(target: &Target, command: ShardCommand) -> Result<i32, Failure> {
    match command {
        ShardCommand::Move { table, shard, to } => {
            let client = target.client().await?;
            let replicas: Vec<NodeId> = to.into_iter().map(NodeId).collect();
            let started = std::time::Instant::now();
            let report = client.move_shard(&table, shard, replicas).await?;
            let nodes: Vec<String> =
                report.placement.replicas.iter().map(|n| n.0.to_string()).collect();
            match report.moved {
                Some(m) => println!(
                    "table {table} shard {shard}: moved to nodes {} (generation {}) in {:.2?}: {} keys, {} clients' watermarks, {} completion records{}",
                    nodes.join(","),
                    report.placement.generation,
                    started.elapsed(),
                    m.keys,
                    m.clients,
                    m.records,
                    match m.kairos_keys {
                        0 => String::new(),
                        n => format!(", {n} keys' Kairos validator state"),
                    }
                ),
                None => println!(
                    "table {table} shard {shard}: already on nodes {} (generation {}); every node knows",
                    nodes.join(","),
                    report.placement.generation
                ),
            }
            Ok(OK)
        }
    }
}

async fn table_list(target: &Target) -> Result<i32, Failure> {
    let client = target.client().await?;
    let defs = client.list_tables().await?;
    println!(
        "{:<20} {:<6} {:<10} {:<11} {:<10} {:>6} {:<7} {:<6} {:<11} leaders",
        "name",
        "engine",
        "durability",
        "replication",
        "reads",
        "shards",
        "timers",
        "txn",
        "validation"
    );
    for d in defs {
        let leaders: Vec<String> = d.leaders.iter().map(|n| n.0.to_string()).collect();
        // Where a Kairos table validates (`server`, `sharded:V`, or `validators` for the
        // companion table holding a sharded table's validators).
        let validation = match d.txn {
            TableTxn::Kairos => validation_name(d.validation),
            _ => "-".to_string(),
        };
        println!(
            "{:<20} {:<6} {:<10} {:<11} {:<10} {:>6} {:<7} {:<6} {:<11} {}",
            d.name,
            "log",
            durability_name(d.durability),
            replication_name(d.replication),
            reads_name(d.reads),
            d.shards,
            timers_name(d.timers),
            txn_name(d.txn),
            validation,
            if leaders.is_empty() { "-".to_string() } else { leaders.join(",") }
        );
    }
    Ok(OK)
}

pub async fn table_get(
    target: &Target,
    table: String,
    key: String,
    show_version: bool,
    raw: bool,
) -> Result<i32, Failure> {
    let client = target.client().await?;
    let mut t = client.table(&table).await?;
    let r = t.get(key.clone()).await?;
    if show_version {
        eprintln!(
            "update index {} (served by node {}, epoch {})",
            r.update_index, r.served_by.0, r.epoch
        );
    }
    print_value(&key, r.value, raw)
}
