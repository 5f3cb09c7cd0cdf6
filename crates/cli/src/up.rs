//! `strata up`: a local cluster of node processes on loopback, supervised in the foreground.
//!
//! Each node is this same executable run as `strata node …`, so a fresh machine needs
//! nothing but `cargo run`. Nodes live in their own process group (Ctrl-C reaches only the
//! supervisor, which then stops them in order) and die with the supervisor if it is killed
//! (`PR_SET_PDEATHSIG`), so no orphan keeps a port busy.
//!
//! TLS by default: the first start makes a development CA, a certificate per node and an
//! admin client certificate in `<data-dir>/tls` (`strata_tls::gen::init_dir`, keys 0600), and
//! every later command finds them there the way it finds the endpoints. `--insecure-plaintext`
//! runs the nodes without TLS (and the cluster file says so).

use std::fs::OpenOptions;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::cluster_file::{process_alive, ClusterFile, NodeEntry};
use crate::exit::{Failure, FAILED, OK};

/// How long nodes get to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// How long nodes get to stop after SIGTERM before they are killed.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Offset between a node's client port and its peer port.
pub const PEER_PORT_OFFSET: u16 = 100;

#[derive(clap::Args, Debug, Clone)]
pub struct UpArgs {
    /// Number of nodes (replicas).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=9))]
    pub nodes: u32,
    /// Directory for the nodes' files, logs and the cluster file the other commands read.
    #[arg(long, env = "STRATA_DATA_DIR", default_value = "strata-data")]
    pub data_dir: PathBuf,
    /// Node i listens for clients on BASE_PORT+i and for peers on BASE_PORT+100+i.
    #[arg(long, default_value_t = 7000)]
    pub base_port: u16,
    /// Address every node listens on.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    pub host: IpAddr,
    /// Cluster id (every frame carries it).
    #[arg(long, default_value_t = 1)]
    pub cluster_id: u64,
    /// RIFL lease term of the cluster's lease service, in milliseconds (default: the node's,
    /// 30 minutes). A client cut off or paused for longer loses its lease: its unfinished
    /// requests end as "outcome unknown".
    #[arg(long, value_name = "MS")]
    pub lease_term_ms: Option<u64>,
    /// Service-rate limit of every log-table shard leader, requests per second (default:
    /// unlimited): for benchmarks that must show hot spots on a small machine.
    #[arg(long, value_name = "PER_S")]
    pub shard_rate_limit: Option<u32>,
    /// Threads of each node's runtime (`strata node --runtime-threads`). Default 1: the nodes
    /// share this machine, and one thread each wakes the fewest threads per request.
    #[arg(long, value_name = "N", default_value_t = 1,
        value_parser = strata_node::runtime_threads_parser())]
    pub runtime_threads: usize,
    /// How long a transaction's read for update holds the key's other reads for update back,
    /// waiting for its prepare (`strata node --txn-read-hold-ms`; default: the node's, 5 ms).
    #[arg(long, value_name = "MS")]
    pub txn_read_hold_ms: Option<u64>,
    /// No TLS: peer links are not authenticated and every client may do everything. Only on a
    /// trusted machine (e.g. to measure what TLS costs). Default: TLS, with certificates made
    /// in <data-dir>/tls.
    #[arg(long)]
    pub insecure_plaintext: bool,
}

struct Supervised {
    entry: NodeEntry,
    child: Child,
    exited: Option<ExitStatus>,
}

pub fn run(args: UpArgs) -> Result<i32, Failure> {
    let exe = std::env::current_exe()
        .map_err(|e| Failure::new(FAILED, format!("cannot find the strata executable: {e}")))?;
    std::fs::create_dir_all(&args.data_dir).map_err(|e| {
        Failure::new(
            FAILED,
            format!("cannot create data directory {}: {e}", args.data_dir.display()),
        )
    })?;
    refuse_if_running(&args.data_dir)?;
    let plan = plan(&args)?;
    check_ports_free(&plan)?;
    if !args.insecure_plaintext {
        let ids: Vec<strata_wire::NodeId> =
            plan.iter().map(|n| strata_wire::NodeId(n.id)).collect();
        let report = strata_tls::gen::init_dir(&tls_dir(&args.data_dir), &ids)
            .map_err(|e| Failure::new(FAILED, format!("cannot make the TLS certificates: {e}")))?;
        for f in report.created {
            eprintln!("made {}", f.display());
        }
    }

    // Signals first, so a Ctrl-C during start-up still stops what was started.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::new(FAILED, e.to_string()))?;
    let mut signals =
        rt.block_on(async { Signals::new() }).map_err(|e| Failure::new(FAILED, e.to_string()))?;

    let mut nodes = Vec::new();
    for entry in &plan {
        match spawn(&exe, &args, entry, &plan) {
            Ok(child) => {
                let entry = NodeEntry { pid: child.id(), ..entry.clone() };
                nodes.push(Supervised { entry, child, exited: None });
            }
            Err(e) => {
                stop_all(&mut nodes);
                return Err(Failure::new(FAILED, format!("cannot start node {}: {e}", entry.id)));
            }
        }
    }
    if let Err(f) = wait_ready(&mut nodes, &rt, &mut signals) {
        stop_all(&mut nodes);
        return Err(f);
    }
    let file = ClusterFile {
        cluster_id: args.cluster_id,
        supervisor_pid: std::process::id(),
        nodes: nodes.iter().map(|n| n.entry.clone()).collect(),
        tls: !args.insecure_plaintext,
    };
    if let Err(e) = file.write(&args.data_dir) {
        stop_all(&mut nodes);
        return Err(Failure::new(FAILED, format!("cannot write the cluster file: {e}")));
    }
    print_banner(&args, &nodes);

    // Supervise until a signal, or until every node has gone.
    let code = rt.block_on(async {
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        loop {
            tokio::select! {
                name = signals.recv() => {
                    eprintln!("\n{name} received: stopping {} node(s)…", nodes.iter().filter(|n| n.exited.is_none()).count());
                    return OK;
                }
                _ = tick.tick() => {
                    reap(&mut nodes);
                    if nodes.iter().all(|n| n.exited.is_some()) {
                        eprintln!("every node has exited; stopping");
                        return FAILED;
                    }
                }
            }
        }
    });
    stop_all(&mut nodes);
    let _ = std::fs::remove_file(ClusterFile::path(&args.data_dir));
    eprintln!("cluster stopped");
    Ok(code)
}

fn refuse_if_running(data_dir: &Path) -> Result<(), Failure> {
    if let Ok(file) = ClusterFile::read(data_dir) {
        if process_alive(file.supervisor_pid) {
            return Err(Failure::new(
                FAILED,
                format!(
                    "a cluster is already running from {} (strata up, pid {}); stop it with Ctrl-C in its terminal, or use another --data-dir",
                    data_dir.display(),
                    file.supervisor_pid
                ),
            ));
        }
        // A stale file from a supervisor that was killed: its nodes died with it.
        let _ = std::fs::remove_file(ClusterFile::path(data_dir));
    }
    Ok(())
}

fn plan(args: &UpArgs) -> Result<Vec<NodeEntry>, Failure> {
    let highest = u32::from(args.base_port) + u32::from(PEER_PORT_OFFSET) + args.nodes;
    if highest > u32::from(u16::MAX) {
        return Err(Failure::new(
            FAILED,
            format!("--base-port {} is too high for {} nodes", args.base_port, args.nodes),
        ));
    }
    Ok((0..args.nodes)
        .map(|i| {
            let port = args.base_port + i as u16;
            NodeEntry {
                id: i,
                client_addr: SocketAddr::new(args.host, port),
                peer_addr: SocketAddr::new(args.host, port + PEER_PORT_OFFSET),
                pid: 0,
                log: node_dir(&args.data_dir, i).join("node.log"),
            }
        })
        .collect())
}

fn node_dir(data_dir: &Path, id: u32) -> PathBuf {
    data_dir.join(format!("n{id}"))
}

/// Where the cluster's CA and certificates live.
fn tls_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("tls")
}

fn check_ports_free(plan: &[NodeEntry]) -> Result<(), Failure> {
    for n in plan {
        for addr in [n.client_addr, n.peer_addr] {
            if let Err(e) = TcpListener::bind(addr) {
                return Err(Failure::new(
                    FAILED,
                    format!("cannot listen on {addr} for node {}: {e}\nhint: another process uses the port; pass --base-port", n.id),
                ));
            }
        }
    }
    Ok(())
}

fn spawn(exe: &Path, args: &UpArgs, me: &NodeEntry, plan: &[NodeEntry]) -> std::io::Result<Child> {
    let dir = node_dir(&args.data_dir, me.id);
    std::fs::create_dir_all(&dir)?;
    let log = OpenOptions::new().create(true).append(true).open(&me.log)?;
    let mut cmd = Command::new(exe);
    cmd.arg("node")
        .args(["--node-id", &me.id.to_string()])
        .args(["--cluster-id", &args.cluster_id.to_string()])
        .args(["--client-addr", &me.client_addr.to_string()])
        .args(["--peer-addr", &me.peer_addr.to_string()])
        .arg("--data-dir")
        .arg(&dir);
    for p in plan.iter().filter(|p| p.id != me.id) {
        cmd.args(["--peer", &format!("{}={}", p.id, p.peer_addr)]);
    }
    if let Some(ms) = args.lease_term_ms {
        cmd.args(["--lease-term-ms", &ms.to_string()]);
    }
    if let Some(r) = args.shard_rate_limit {
        cmd.args(["--shard-rate-limit", &r.to_string()]);
    }
    cmd.args(["--runtime-threads", &args.runtime_threads.to_string()]);
    if let Some(ms) = args.txn_read_hold_ms {
        cmd.args(["--txn-read-hold-ms", &ms.to_string()]);
    }
    if args.insecure_plaintext {
        cmd.arg("--insecure-plaintext");
    } else {
        use strata_tls::files;
        let tls = tls_dir(&args.data_dir);
        cmd.arg("--tls-ca")
            .arg(tls.join(files::CA_CERT))
            .arg("--tls-cert")
            .arg(tls.join(files::node_cert(me.id)))
            .arg("--tls-key")
            .arg(tls.join(files::node_key(me.id)));
    }
    cmd.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log).process_group(0);
    // SAFETY: prctl is async-signal-safe; it only asks the kernel to SIGTERM the child when
    // this (parent) thread exits, so a killed supervisor leaves no orphan nodes behind.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
}

fn wait_ready(
    nodes: &mut [Supervised],
    rt: &tokio::runtime::Runtime,
    signals: &mut Signals,
) -> Result<(), Failure> {
    let start = Instant::now();
    let mut ready = vec![false; nodes.len()];
    while !ready.iter().all(|r| *r) {
        for (i, n) in nodes.iter_mut().enumerate() {
            if let Ok(Some(status)) = n.child.try_wait() {
                return Err(Failure::new(
                    FAILED,
                    format!(
                        "node {} exited during start-up ({status}); its log says:\n{}",
                        n.entry.id,
                        tail(&n.entry.log, 10)
                    ),
                ));
            }
            ready[i] = ready[i]
                || TcpStream::connect_timeout(&n.entry.client_addr, Duration::from_millis(200))
                    .is_ok();
        }
        if start.elapsed() > START_TIMEOUT {
            return Err(Failure::new(
                FAILED,
                format!("nodes did not start listening within {START_TIMEOUT:?}; see their logs"),
            ));
        }
        let interrupted = rt.block_on(async {
            tokio::select! {
                _ = signals.recv() => true,
                _ = tokio::time::sleep(Duration::from_millis(50)) => false,
            }
        });
        if interrupted {
            return Err(Failure::new(FAILED, "interrupted during start-up"));
        }
    }
    Ok(())
}

fn print_banner(args: &UpArgs, nodes: &[Supervised]) {
    println!(
        "Strata cluster {:#x} is up: {} node(s), data in {}",
        args.cluster_id,
        nodes.len(),
        args.data_dir.display()
    );
    for n in nodes {
        let e = &n.entry;
        println!(
            "  node {}  clients {}  peers {}  pid {}  log {}",
            e.id,
            e.client_addr,
            e.peer_addr,
            e.pid,
            e.log.display()
        );
    }
    if args.insecure_plaintext {
        println!(
            "TLS: off (--insecure-plaintext): peers are not authenticated, every client is admin"
        );
    } else {
        let dir = tls_dir(&args.data_dir);
        println!(
            "TLS: on; CA and certificates in {} (the CLI presents client.pem, role admin; `strata certs client` issues more)",
            dir.display()
        );
    }
    let endpoints: Vec<String> = nodes.iter().map(|n| n.entry.client_addr.to_string()).collect();
    println!("endpoints: {}", endpoints.join(","));
    println!("Try, in another terminal:  strata put greeting hello  &&  strata get greeting");
    println!("Press Ctrl-C to stop every node.");
}

/// Notes nodes that exited on their own.
fn reap(nodes: &mut [Supervised]) {
    for n in nodes.iter_mut().filter(|n| n.exited.is_none()) {
        if let Ok(Some(status)) = n.child.try_wait() {
            n.exited = Some(status);
            eprintln!(
                "node {} (pid {}) exited: {status}; the others keep serving. Last log lines:\n{}",
                n.entry.id,
                n.entry.pid,
                tail(&n.entry.log, 5)
            );
        }
    }
}

/// SIGTERM to every live node, then SIGKILL to those still alive after the grace period.
fn stop_all(nodes: &mut [Supervised]) {
    for n in nodes.iter().filter(|n| n.exited.is_none()) {
        // SAFETY: signalling a child we spawned and have not reaped.
        unsafe { libc::kill(n.entry.pid as libc::pid_t, libc::SIGTERM) };
    }
    let deadline = Instant::now() + STOP_GRACE;
    for n in nodes.iter_mut().filter(|n| n.exited.is_none()) {
        loop {
            match n.child.try_wait() {
                Ok(Some(status)) => {
                    n.exited = Some(status);
                    break;
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    eprintln!("node {} did not stop within {STOP_GRACE:?}; killing it", n.entry.id);
                    let _ = n.child.kill();
                    n.exited = n.child.wait().ok();
                    break;
                }
            }
        }
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..]
        .iter()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// SIGINT and SIGTERM as one stream.
struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
        })
    }

    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.int.recv() => "SIGINT",
            _ = self.term.recv() => "SIGTERM",
        }
    }
}
