//! `strata-bench`: the closed-loop load generator behind `strata bench`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), strata_bench::BenchError> {
//! use strata_bench::{BenchArgs, ConnArgs, RunArgs, Target};
//! let args = BenchArgs {
//!     conn: ConnArgs { target: Target::Redis, pipeline: 16, ..ConnArgs::default() },
//!     run: RunArgs { duration: 5.0, ..RunArgs::default() },
//!     ..BenchArgs::default()
//! };
//! let report = strata_bench::run(&args, args.default_endpoints()).await?;
//! println!("{report}");
//! # Ok(()) }
//! ```
//!
//! How a run goes ([`run`]):
//!
//! 1. `--clients` connections, spread round-robin over the endpoints, each with `--sessions`
//!    sessions ([`target`]: Strata through `strata-client`, Redis through [`resp`], etcd through
//!    [`etcd`] with the `etcd` build feature, ZooKeeper through [`zookeeper`] with the
//!    `zookeeper` build feature; all share one connection design, so the harness is the same
//!    on every side);
//! 2. **preload**: every key is written once, split over all sessions, so reads hit;
//! 3. **warmup** (`--warmup` seconds), then the **measured window** (`--duration` seconds or
//!    `--ops` operations). Every session is a closed loop that keeps `--pipeline` requests
//!    outstanding: each completion submits the next request. A request's latency runs from
//!    its submit to its completion; it is recorded (nanoseconds, 3 significant digits) in the
//!    session's own HDR histograms, one for reads and one for writes, merged at the end. In
//!    time mode an operation counts if it was submitted and completed inside the window;
//! 4. live progress once per second on stderr (ops/s and p99 of the last second), unless
//!    `--quiet`; the [`BenchReport`] is returned and, with `--json`, written to a file.
//!
//! The operation mix: each operation is a write (`put`/`SET` of a `--value-size` value) with
//! probability `--write-ratio` %, else a read (`get`/`GET`); its key is drawn uniformly or
//! from a YCSB zipfian ([`keys::Zipfian`]), from a per-session seeded stream.
//!
//! With `--ycsb W|A|B|C|D|F` the mix is a YCSB core workload's (ORCA §8.1): reads, updates
//! (writes of existing keys), inserts (writes of new keys after the last one, D) and
//! read-modify-writes (F: a read, then, once it has answered, a write of the same key in the
//! same session; one operation, timed from the read's submit to the write's completion, so it
//! works alike on every target). D's reads follow YCSB's "latest" distribution
//! ([`keys::Latest`]) over the keys whose inserts have completed ([`keys::InsertCounter`]).
//! Each class has its own histogram, reported as `ycsb` (read, update, insert, rmw).
//!
//! With `--table`, the report also gives the share of reads that triggered durability in the
//! window, from the nodes' shard counters ([`durability`]); `--client-delay-ms` puts the
//! clients at an emulated distance from each node ([`relay`]).
//!
//! `--workload kairos` runs Kairos's social-network transactions on a `--txn kairos` table
//! (kairos.md §8.1), with an optional client cache ([`kairos`]).
//!
//! `--lease-renewals` and `--lease-creations` load RIFL's lease service instead of the keyspace
//! (RIFL §8.3 Q4): closed loops that renew their own lease, or create new ones ([`lease`]).

pub mod args;
mod ds;
mod durability;
pub mod etcd;
pub mod kairos;
pub mod keys;
pub mod lease;
pub mod peer_tls;
pub mod plot;
pub mod relay;
pub mod report;
pub mod resp;
pub mod target;
pub mod timeline;
pub mod txn;
pub mod zookeeper;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use thiserror::Error;

pub use args::{
    BenchArgs, ConnArgs, Distribution, Mix, Mode, OutputArgs, RiflArgs, RmwKind, RunArgs, SyncArgs,
    Target, WorkloadArgs, WorkloadKind, Ycsb, YcsbMix, YcsbWrite, DEFAULT_REDIS_ENDPOINT,
};
pub use lease::LeaseReport;
pub use report::{
    BenchReport, ClassLatencies, DsReport, Latencies, LatencySummary, ReadDurability, YcsbReport,
};

use keys::{InsertCounter, KeyChooser, Latest, Zipfian};
use target::{BenchOp, BenchSession, Connection, Done};

/// A request with no reply after this long counts as failed and ends its session (the same
/// bound for both targets; neither client library applies its own).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Requests in flight per session while preloading.
const PRELOAD_DEPTH: usize = 64;
/// Error messages kept in the report.
const MAX_ERROR_SAMPLES: usize = 5;
/// Cluster id used when `--cluster-id` is not given (the nodes' default too).
pub const DEFAULT_CLUSTER_ID: u64 = 1;
/// Largest latency the histograms hold (larger values are recorded as this).
const MAX_LATENCY_NS: u64 = 60_000_000_000;
/// With `--timeline`, how long after the window a session still waits for its outstanding
/// requests (a paused node's) before abandoning them as errors.
pub const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// Operation classes (index into the per-class histograms).
const RELAXED_READ: usize = 0;
const ACQUIRE: usize = 1;
const RELAXED_WRITE: usize = 2;
const RELEASE: usize = 3;
const RMW: usize = 4;
/// YCSB insert: a write of a new key.
const INSERT: usize = 5;
/// YCSB read-modify-write: a read, then a write of the same key (not Strata's FAA/CAS `RMW`).
const READ_MODIFY_WRITE: usize = 6;
const CLASSES: usize = 7;

/// Why a benchmark could not run. Each variant says what to fix.
#[derive(Debug, Error)]
pub enum BenchError {
    /// A flag is out of range or contradicts another; the message names it.
    #[error("invalid arguments: {0}")]
    InvalidArgs(String),
    /// Nowhere to connect: pass `--endpoints` (or start the local cluster for Strata).
    #[error("no endpoints to benchmark: pass --endpoints ADDR,...")]
    NoEndpoints,
    /// A connection or session could not be opened: is the server running at that address,
    /// and (Strata) is `--cluster-id` right?
    #[error("cannot connect to {target} at {addr}: {message}")]
    Connect { target: Target, addr: SocketAddr, message: String },
    /// Writing the keys before measuring failed: the server is unhealthy or refuses the
    /// writes (e.g. `--value-size` above its limit).
    #[error("preload failed: {0}")]
    Preload(String),
    /// The JSON report could not be written: check the `--json` path.
    #[error("cannot write the JSON report to {path}: {source}")]
    WriteJson { path: PathBuf, source: std::io::Error },
    /// The `--timeline` CSV or PNG could not be written: check the path.
    #[error("cannot write the timeline to {path}: {message}")]
    WriteTimeline { path: PathBuf, message: String },
    /// The `--client-delay-ms` relays could not listen on loopback (out of ports or files?).
    #[error("cannot start the --client-delay-ms relays: {0}")]
    Relay(std::io::Error),
    /// The TLS credentials (`--tls-ca`, `--tls-cert`, `--tls-key`) could not be loaded.
    #[error("TLS credentials: {0}")]
    Credentials(String),
}

/// Runs one benchmark against `endpoints` (if empty: [`BenchArgs::default_endpoints`]). Must
/// be called inside a tokio runtime; sessions run as tasks on it, so a multi-thread runtime
/// spreads the load generator over the cores.
pub async fn run(args: &BenchArgs, endpoints: Vec<SocketAddr>) -> Result<BenchReport, BenchError> {
    args.validate()?;
    let endpoints = if endpoints.is_empty() { args.default_endpoints() } else { endpoints };
    if endpoints.is_empty() {
        return Err(BenchError::NoEndpoints);
    }

    // The sessions connect through the relays (the endpoints themselves without a delay).
    let relays = relay::start(&endpoints, &args.client_delays_ms(endpoints.len())?)
        .map_err(BenchError::Relay)?;
    // The cluster id and TLS of every Strata connection of the run, or Redis' and etcd's TLS.
    let strata = if args.conn.target == Target::Strata {
        args.conn.strata_options()?
    } else {
        strata_client::ClientOptions::default()
    };
    let peer_tls = args.conn.peer_tls()?;
    if args.rifl.lease_renewals || args.rifl.lease_creations {
        let report = lease::run(args, endpoints, &relays.addrs, &strata).await?;
        write_json(args, &report)?;
        return Ok(report);
    }
    if args.workload.kind == WorkloadKind::Txn {
        let report = txn::run(args, relays.addrs.clone()).await?;
        write_json(args, &report)?;
        return Ok(report);
    }
    if args.workload.kind == WorkloadKind::Kairos {
        let report = kairos::run(args, relays.addrs.clone()).await?;
        write_json(args, &report)?;
        return Ok(report);
    }
    let mut conns = Vec::with_capacity(args.conn.clients);
    // ZooKeeper: this run's znodes go under a root of their own (see `zookeeper.rs`).
    let run_id = format!("{:x}-{}", unix_ms_at(Instant::now()), args.run.seed);
    for i in 0..args.conn.clients {
        let home = i % endpoints.len();
        let addr = endpoints[home];
        let conn = match &args.conn.table {
            Some(table) => Connection::connect_table(&relays.addrs, home, &strata, table).await,
            None => {
                Connection::connect(
                    args.conn.target,
                    relays.addrs[home],
                    &strata,
                    peer_tls.as_ref(),
                    &run_id,
                    !args.rifl.no_exactly_once,
                )
                .await
            }
        }
        .map_err(|message| BenchError::Connect {
            target: args.conn.target,
            addr,
            message,
        })?;
        conns.push((addr, conn));
    }
    let mut sessions = Vec::with_capacity(args.total_sessions());
    for (addr, conn) in &conns {
        for _ in 0..args.conn.sessions {
            let s = conn.open_session().await.map_err(|message| BenchError::Connect {
                target: args.conn.target,
                addr: *addr,
                message,
            })?;
            sessions.push(s);
        }
    }

    if let Some(clients) = args.rifl.virtual_clients {
        // Ids of this run's simulated clients: fresh, so that no node holds acknowledgements of
        // an earlier run's clients under the same ids.
        let first = unix_ms_at(Instant::now()).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ args.run.seed;
        let total = sessions.len();
        sessions = sessions
            .into_iter()
            .enumerate()
            .map(|(j, s)| match s {
                BenchSession::Strata(s) => {
                    BenchSession::Virtual(target::VirtualClients::new(s, first, j, total, clients))
                }
                other => other,
            })
            .collect();
    }

    if args.workload.kind != WorkloadKind::Kv {
        let report = ds::run(args, sessions, endpoints).await;
        drop(conns);
        let report = report?;
        write_json(args, &report)?;
        return Ok(report);
    }

    let value = make_value(args.workload.value_size, args.run.seed);
    let preload_started = Instant::now();
    let sessions = preload(sessions, args, &value).await?;
    let preload_s = preload_started.elapsed().as_secs_f64();

    let nodes_of: Vec<usize> =
        (0..sessions.len()).map(|j| (j / args.conn.sessions) % endpoints.len()).collect();
    let measure_start = Instant::now() + Duration::from_secs_f64(args.run.warmup);
    let probe = args.conn.table.as_ref().map(|table| {
        durability::Probe::start(endpoints.clone(), &strata, table.clone(), measure_start.into())
    });
    let (stats, window_end, inserted) = measure(sessions, args, value, measure_start).await;
    let read_durability = match probe {
        Some(p) => p
            .finish()
            .await
            .map_err(|e| eprintln!("strata bench: reads that triggered durability: {e}"))
            .ok(),
        None => None,
    };
    for (_, c) in &conns {
        c.close();
    }

    let mut read = new_histogram();
    let mut write = new_histogram();
    let mut classes: Vec<Histogram<u64>> = (0..CLASSES).map(|_| new_histogram()).collect();
    let (mut read_misses, mut errors, mut last_completion) = (0, 0, None::<Instant>);
    let mut error_samples: Vec<String> = Vec::new();
    let mut per_node: Vec<Vec<u64>> = vec![Vec::new(); endpoints.len()];
    for (j, s) in stats.into_iter().enumerate() {
        read.add(&s.read).expect("same bounds");
        write.add(&s.write).expect("same bounds");
        for (c, h) in classes.iter_mut().zip(&s.classes) {
            c.add(h).expect("same bounds");
        }
        let node = &mut per_node[nodes_of.get(j).copied().unwrap_or(0)];
        if node.len() < s.timeline.len() {
            node.resize(s.timeline.len(), 0);
        }
        for (b, n) in node.iter_mut().zip(&s.timeline) {
            *b += n;
        }
        read_misses += s.read_misses;
        errors += s.errors;
        last_completion = last_completion.max(s.last_measured);
        for e in s.error_samples {
            if error_samples.len() < MAX_ERROR_SAMPLES && !error_samples.contains(&e) {
                error_samples.push(e);
            }
        }
    }
    let duration_s = match window_end {
        Some(end) => (end - measure_start).as_secs_f64(),
        None => last_completion
            .map_or(0.0, |t| t.saturating_duration_since(measure_start).as_secs_f64()),
    };
    let mut all = read.clone();
    all.add(&write).expect("same bounds");
    let ops = all.len();
    let timeline_files = match &args.output.timeline {
        Some(path) => {
            timeline::write(path, &per_node, args.output.timeline_bucket_ms, &timeline_title(args))?
        }
        None => Vec::new(),
    };
    let cl = |i: usize| LatencySummary::from_histogram(&classes[i]);
    let report = BenchReport {
        label: args.output.label.clone(),
        target: args.conn.target,
        endpoints,
        args: args.clone(),
        duration_s,
        ops,
        reads: read.len(),
        writes: write.len(),
        read_misses,
        errors,
        error_samples,
        throughput_ops_s: if duration_s > 0.0 { ops as f64 / duration_s } else { 0.0 },
        latency_us: Latencies {
            all: LatencySummary::from_histogram(&all),
            read: LatencySummary::from_histogram(&read),
            write: LatencySummary::from_histogram(&write),
        },
        mix: args.mix(),
        class_latency_us: ClassLatencies {
            relaxed_read: cl(RELAXED_READ),
            acquire: cl(ACQUIRE),
            relaxed_write: cl(RELAXED_WRITE),
            release: cl(RELEASE),
            rmw: cl(RMW),
        },
        ycsb: args.workload.ycsb.zip(args.ycsb_mix()).map(|(workload, mix)| YcsbReport {
            workload,
            mix,
            distribution: args.dist(),
            inserted_keys: inserted,
            read: cl(RELAXED_READ),
            update: cl(RELAXED_WRITE),
            insert: cl(INSERT),
            rmw: cl(READ_MODIFY_WRITE),
        }),
        timeline_files,
        ds: None,
        read_durability,
        lease: None,
        txn: None,
        kairos: None,
        preloaded_keys: args.workload.keys(),
        preload_s,
        started_at_unix_ms: unix_ms_at(measure_start),
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
    };
    write_json(args, &report)?;
    Ok(report)
}

fn write_json(args: &BenchArgs, report: &BenchReport) -> Result<(), BenchError> {
    if let Some(path) = &args.output.json {
        let text = serde_json::to_string_pretty(report).expect("a report serializes");
        std::fs::write(path, text + "\n")
            .map_err(|source| BenchError::WriteJson { path: path.clone(), source })?;
    }
    Ok(())
}

fn timeline_title(args: &BenchArgs) -> String {
    let mix = args.mix();
    let mut t = match args.workload.ycsb {
        Some(y) => format!("YCSB {y}, {}% writes", args.write_ratio()),
        None => format!("{:?} mode, {}% writes", args.sync.mode, args.write_ratio()),
    };
    if mix.has_sync() {
        t +=
            &format!(" ({}% rel, {}% acq, {}% rmw)", mix.release_pct, mix.acquire_pct, mix.rmw_pct);
    }
    t + &format!(", {} ms buckets", args.output.timeline_bucket_ms)
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).expect("valid bounds")
}

fn unix_ms_at(t: Instant) -> u64 {
    let now_unix = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let ago = Instant::now().saturating_duration_since(t);
    now_unix.saturating_sub(ago).as_millis() as u64
}

/// The value every write carries: printable bytes from the seed (the content does not matter
/// to either system; it is the same for every write so no time goes into making values).
fn make_value(size: usize, seed: u64) -> Bytes {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed_0f7a_1e00);
    (0..size).map(|_| rng.gen_range(b'a'..=b'z')).collect::<Vec<u8>>().into()
}

/// Seed of session `i`'s stream: distinct per session, fixed by `--seed`.
fn session_seed(seed: u64, i: usize) -> u64 {
    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add((i as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03))
}

/// Writes every key once, split over the sessions, `PRELOAD_DEPTH` requests in flight each.
async fn preload(
    sessions: Vec<BenchSession>,
    args: &BenchArgs,
    value: &Bytes,
) -> Result<Vec<BenchSession>, BenchError> {
    let n = sessions.len() as u64;
    let done = Arc::new(AtomicU64::new(0));
    let progress = (!args.output.quiet).then(|| {
        let done = done.clone();
        let total = args.workload.keys();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            loop {
                tick.tick().await;
                let d = done.load(Ordering::Relaxed);
                eprintln!("preload: {d}/{total} keys ({:.0}%)", 100.0 * d as f64 / total as f64);
            }
        })
    });
    let mut tasks = Vec::new();
    for (i, mut s) in sessions.into_iter().enumerate() {
        let (lo, hi) =
            (args.workload.keys() * i as u64 / n, args.workload.keys() * (i as u64 + 1) / n);
        let (key_size, value, done) = (args.workload.key_size, value.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut next = lo;
            let mut outstanding = 0usize;
            while next < hi || outstanding > 0 {
                while next < hi && outstanding < PRELOAD_DEPTH {
                    s.submit(BenchOp::Insert {
                        key: keys::key(next, key_size),
                        value: value.clone(),
                    })?;
                    next += 1;
                    outstanding += 1;
                }
                match tokio::time::timeout(REQUEST_TIMEOUT, s.next()).await {
                    Ok(Some(Ok(_))) => {
                        outstanding -= 1;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(Some(Err(e))) => return Err(e),
                    Ok(None) => return Err("a session lost its requests".to_string()),
                    Err(_) => return Err(format!("no reply within {REQUEST_TIMEOUT:?}")),
                }
            }
            Ok(s)
        }));
    }
    let mut out = Vec::with_capacity(tasks.len());
    let mut failure = None;
    for t in tasks {
        match t.await {
            Ok(Ok(s)) => out.push(s),
            Ok(Err(e)) => failure = failure.or(Some(e)),
            Err(e) => failure = failure.or(Some(format!("preload task failed: {e}"))),
        }
    }
    if let Some(p) = progress {
        p.abort();
    }
    match failure {
        Some(e) => Err(BenchError::Preload(e)),
        None => {
            if !args.output.quiet {
                eprintln!("preload: {} keys written", args.workload.keys());
            }
            Ok(out)
        }
    }
}

/// What the sessions share during the measured phase.
struct Shared {
    measure_start: Instant,
    /// Time mode: the end of the window. Ops mode: `None`.
    end: Option<Instant>,
    /// Ops mode: operations still to submit in the window.
    tickets: Option<AtomicU64>,
    /// Each session samples from its own copy.
    chooser: KeyChooser,
    key_size: usize,
    value: Bytes,
    write_ratio: f64,
    mix: Mix,
    /// `--ycsb`: the mix of reads, updates, inserts and RMWs (replaces `write_ratio` and `mix`).
    ycsb: Option<YcsbMix>,
    /// YCSB inserts: the next key index and the acknowledged ones.
    inserts: InsertCounter,
    pipeline: usize,
    /// `--timeline`: bucket width and count.
    bucket: Option<(Duration, usize)>,
    /// Timeouts count as errors and the session keeps waiting (until the window's end plus
    /// [`DRAIN_GRACE`]) instead of ending: `--timeline` on Strata (whose `next` may be retried).
    keep_waiting: bool,
    /// Completions so far, warmup included (for progress).
    completed: AtomicU64,
    /// Operations recorded in the measured window so far (for progress).
    measured: AtomicU64,
    failed_sessions: AtomicU64,
}

/// One session's measurements.
struct SessionStats {
    read: Histogram<u64>,
    write: Histogram<u64>,
    classes: Vec<Histogram<u64>>,
    /// `--timeline`: completions per bucket of the window.
    timeline: Vec<u64>,
    read_misses: u64,
    errors: u64,
    error_samples: Vec<String>,
    last_measured: Option<Instant>,
}

impl SessionStats {
    fn new(buckets: usize) -> SessionStats {
        SessionStats {
            read: new_histogram(),
            write: new_histogram(),
            classes: (0..CLASSES).map(|_| new_histogram()).collect(),
            timeline: vec![0; buckets],
            read_misses: 0,
            errors: 0,
            error_samples: Vec::new(),
            last_measured: None,
        }
    }
}

/// Runs warmup (until `measure_start`) and the measured window on every session; returns each
/// session's stats, the end of the window (time mode) and the keys inserted.
async fn measure(
    sessions: Vec<BenchSession>,
    args: &BenchArgs,
    value: Bytes,
    measure_start: Instant,
) -> (Vec<SessionStats>, Option<Instant>, u64) {
    let chooser = match args.dist() {
        Distribution::Uniform => KeyChooser::Uniform { n: args.workload.keys() },
        Distribution::Zipfian => {
            KeyChooser::Zipfian(Zipfian::new(args.workload.keys(), args.workload.zipf_theta))
        }
        Distribution::Latest => {
            KeyChooser::Latest(Latest::new(args.workload.keys(), args.workload.zipf_theta))
        }
    };
    let started = Instant::now();
    let end = match args.run.ops {
        Some(_) => None,
        None => Some(measure_start + Duration::from_secs_f64(args.run.duration)),
    };
    let shared = Arc::new(Shared {
        measure_start,
        end,
        tickets: args.run.ops.map(AtomicU64::new),
        chooser,
        key_size: args.workload.key_size,
        value,
        write_ratio: args.write_ratio(),
        mix: args.mix(),
        ycsb: args.ycsb_mix(),
        inserts: InsertCounter::new(args.workload.keys()),
        pipeline: args.conn.pipeline,
        bucket: args.output.timeline.as_ref().map(|_| {
            let w = Duration::from_millis(args.output.timeline_bucket_ms);
            (
                w,
                (args.run.duration * 1000.0 / args.output.timeline_bucket_ms as f64).ceil()
                    as usize,
            )
        }),
        keep_waiting: args.output.timeline.is_some() && args.conn.target == Target::Strata,
        completed: AtomicU64::new(0),
        measured: AtomicU64::new(0),
        failed_sessions: AtomicU64::new(0),
    });
    let n = sessions.len();
    // Per-session histograms of the current second, for the progress line.
    let intervals: Vec<Arc<Mutex<Histogram<u64>>>> = if args.output.quiet {
        Vec::new()
    } else {
        (0..n).map(|_| Arc::new(Mutex::new(new_histogram()))).collect()
    };
    let finished = Arc::new(AtomicBool::new(false));
    let progress = (!args.output.quiet).then(|| {
        tokio::spawn(progress_loop(shared.clone(), intervals.clone(), finished.clone(), started))
    });

    let mut tasks = Vec::with_capacity(n);
    for (i, s) in sessions.into_iter().enumerate() {
        let rng = StdRng::seed_from_u64(session_seed(args.run.seed, i));
        tasks.push(tokio::spawn(drive(s, shared.clone(), rng, intervals.get(i).cloned())));
    }
    let mut stats = Vec::with_capacity(n);
    for t in tasks {
        match t.await {
            Ok(s) => stats.push(s),
            Err(e) => stats.push(SessionStats {
                errors: 1,
                error_samples: vec![format!("session task failed: {e}")],
                ..SessionStats::new(0)
            }),
        }
    }
    finished.store(true, Ordering::Relaxed);
    if let Some(p) = progress {
        p.abort();
    }
    let inserted = shared.inserts.acknowledged() - args.workload.keys();
    (stats, end, inserted)
}

/// The class of the next YCSB operation: insert, update (`RELAXED_WRITE`), read-modify-write
/// or read (`RELAXED_READ`), in the mix's proportions (one draw).
fn ycsb_class<R: Rng + ?Sized>(m: &YcsbMix, rng: &mut R) -> usize {
    let r = rng.gen::<f64>() * 100.0;
    if r < m.insert_pct {
        INSERT
    } else if r < m.insert_pct + m.update_pct {
        RELAXED_WRITE
    } else if r < m.insert_pct + m.update_pct + m.rmw_pct {
        READ_MODIFY_WRITE
    } else {
        RELAXED_READ
    }
}

/// What a completion leads to, besides being recorded.
enum Then {
    Nothing,
    /// The read of a YCSB read-modify-write answered: write this key.
    Write(Bytes),
    /// A YCSB insert of this key index completed: acknowledge it.
    Acknowledge(u64),
}

/// A request in flight.
struct Pending {
    /// When the operation was submitted (an RMW's write: when its read was).
    submitted: Instant,
    class: usize,
    /// Counts for sure (ops mode ticket).
    ticket: bool,
    then: Then,
}

/// One session's closed loop.
async fn drive(
    mut session: BenchSession,
    sh: Arc<Shared>,
    mut rng: StdRng,
    interval: Option<Arc<Mutex<Histogram<u64>>>>,
) -> SessionStats {
    let mut st = SessionStats::new(sh.bucket.map_or(0, |(_, n)| n));
    fn note(st: &mut SessionStats, e: String) {
        st.errors += 1;
        if st.error_samples.len() < MAX_ERROR_SAMPLES && !st.error_samples.contains(&e) {
            st.error_samples.push(e);
        }
    }
    let mut in_flight: VecDeque<Pending> = VecDeque::with_capacity(sh.pipeline);
    let mut chooser = sh.chooser.clone();
    let write_sync = sh.mix.release_pct + sh.mix.rmw_pct;
    let mut stopping = false;
    // An error ends the session: a broken connection fails every later request at once.
    let mut fatal = false;
    loop {
        while !stopping && in_flight.len() < sh.pipeline {
            let now = Instant::now();
            let mut ticket = false;
            if let Some(end) = sh.end {
                if now >= end {
                    stopping = true;
                    break;
                }
            } else if now >= sh.measure_start {
                let tickets = sh.tickets.as_ref().expect("ops mode");
                if tickets
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| t.checked_sub(1))
                    .is_err()
                {
                    stopping = true;
                    break;
                }
                ticket = true;
            }
            if let Some(m) = &sh.ycsb {
                let class = ycsb_class(m, &mut rng);
                let (op, then) = if class == INSERT {
                    let i = sh.inserts.next_index();
                    (
                        BenchOp::Insert { key: keys::key(i, sh.key_size), value: sh.value.clone() },
                        Then::Acknowledge(i),
                    )
                } else {
                    let key =
                        keys::key(chooser.sample(&mut rng, sh.inserts.acknowledged()), sh.key_size);
                    match class {
                        RELAXED_WRITE => {
                            (BenchOp::Write { key, value: sh.value.clone() }, Then::Nothing)
                        }
                        READ_MODIFY_WRITE => (BenchOp::Read { key: key.clone() }, Then::Write(key)),
                        _ => (BenchOp::Read { key }, Then::Nothing),
                    }
                };
                let submitted = Instant::now();
                match session.submit(op) {
                    Ok(()) => in_flight.push_back(Pending { submitted, class, ticket, then }),
                    Err(e) => {
                        note(&mut st, e);
                        stopping = true;
                        fatal = true;
                    }
                }
                continue;
            }
            let key = keys::key(chooser.sample(&mut rng, sh.inserts.acknowledged()), sh.key_size);
            let is_write = sh.write_ratio > 0.0 && rng.gen::<f64>() * 100.0 < sh.write_ratio;
            // Draw again only when a sync class is possible, so the ES stream is unchanged.
            let class = if is_write {
                let r = if write_sync > 0.0 { rng.gen::<f64>() * 100.0 } else { 100.0 };
                if r < sh.mix.rmw_pct {
                    RMW
                } else if r < write_sync {
                    RELEASE
                } else {
                    RELAXED_WRITE
                }
            } else if sh.mix.acquire_pct > 0.0 && rng.gen::<f64>() * 100.0 < sh.mix.acquire_pct {
                ACQUIRE
            } else {
                RELAXED_READ
            };
            let op = match class {
                RELAXED_READ => BenchOp::Read { key },
                ACQUIRE => BenchOp::Acquire { key },
                RELAXED_WRITE => BenchOp::Write { key, value: sh.value.clone() },
                RELEASE => BenchOp::Release { key, value: sh.value.clone() },
                _ => match sh.mix.rmw {
                    args::RmwKind::Faa => BenchOp::Faa { key },
                    args::RmwKind::Cas => BenchOp::Cas { key, value: sh.value.clone() },
                },
            };
            let submitted = Instant::now();
            match session.submit(op) {
                Ok(()) => {
                    in_flight.push_back(Pending { submitted, class, ticket, then: Then::Nothing })
                }
                Err(e) => {
                    note(&mut st, e);
                    stopping = true;
                    fatal = true;
                }
            }
        }
        if in_flight.is_empty() {
            break;
        }
        // With `keep_waiting`, wait at most until the window's end plus the grace period.
        let drain_end = sh.end.filter(|_| sh.keep_waiting).map(|end| end + DRAIN_GRACE);
        let wait = match drain_end {
            Some(d) => REQUEST_TIMEOUT.min(d.saturating_duration_since(Instant::now())),
            None => REQUEST_TIMEOUT,
        };
        let r = tokio::time::timeout(wait, session.next()).await;
        let done_at = Instant::now();
        let r = match r {
            Ok(Some(r)) => r,
            Ok(None) => Err("the session lost track of its requests".to_string()),
            Err(_) => {
                if let Some(d) = drain_end {
                    if done_at < d {
                        // A paused node: the request counts as an error, the session waits on.
                        note(&mut st, format!("no reply within {wait:?} (still waiting)"));
                        continue;
                    }
                    // The window is over: abandon what is outstanding (not a failed session).
                    st.errors += in_flight.len() as u64;
                    note(
                        &mut st,
                        format!(
                            "{} requests unanswered {DRAIN_GRACE:?} after the window",
                            in_flight.len()
                        ),
                    );
                    break;
                }
                // The session is stuck: count what is outstanding as failed and stop.
                st.errors += in_flight.len() as u64;
                note(&mut st, format!("no reply within {REQUEST_TIMEOUT:?}"));
                fatal = true;
                break;
            }
        };
        let Pending { submitted, class, ticket, then } = in_flight.pop_front().expect("in flight");
        let then = match (then, &r) {
            (Then::Write(key), Ok(done)) => {
                // The read of a read-modify-write: now its write, in the same session. It is
                // sent even after the window (it is not measured then) to finish the operation.
                if *done == Done::Miss && submitted >= sh.measure_start {
                    st.read_misses += 1;
                }
                match session.submit(BenchOp::Write { key, value: sh.value.clone() }) {
                    Ok(()) => {
                        in_flight.push_back(Pending {
                            submitted,
                            class,
                            ticket,
                            then: Then::Nothing,
                        });
                        continue;
                    }
                    Err(e) => {
                        note(&mut st, e);
                        stopping = true;
                        fatal = true;
                        continue;
                    }
                }
            }
            (then, _) => then,
        };
        if let (Then::Acknowledge(i), Ok(_)) = (&then, &r) {
            sh.inserts.acknowledge(*i);
        }
        sh.completed.fetch_add(1, Ordering::Relaxed);
        let is_write = class >= RELAXED_WRITE;
        let measured =
            ticket || (submitted >= sh.measure_start && sh.end.is_some_and(|end| done_at <= end));
        match r {
            Ok(done) => {
                let ns = (done_at - submitted).as_nanos().min(MAX_LATENCY_NS as u128) as u64;
                if let Some(h) = &interval {
                    h.lock().unwrap_or_else(|e| e.into_inner()).saturating_record(ns.max(1));
                }
                if let Some((w, _)) = sh.bucket {
                    if let (Some(end), Some(since)) =
                        (sh.end, done_at.checked_duration_since(sh.measure_start))
                    {
                        if done_at <= end {
                            let b = (since.as_nanos() / w.as_nanos()) as usize;
                            if let Some(c) = st.timeline.get_mut(b) {
                                *c += 1;
                            }
                        }
                    }
                }
                if measured {
                    let h = if is_write { &mut st.write } else { &mut st.read };
                    h.saturating_record(ns.max(1));
                    st.classes[class].saturating_record(ns.max(1));
                    st.last_measured = Some(done_at);
                    sh.measured.fetch_add(1, Ordering::Relaxed);
                    if done == Done::Miss {
                        st.read_misses += 1;
                    }
                }
            }
            Err(e) => {
                note(&mut st, e);
                stopping = true;
                fatal = true;
            }
        }
    }
    if fatal {
        sh.failed_sessions.fetch_add(1, Ordering::Relaxed);
    }
    st
}

/// Prints one line per second: phase, ops/s and p99 over the last second.
async fn progress_loop(
    sh: Arc<Shared>,
    intervals: Vec<Arc<Mutex<Histogram<u64>>>>,
    finished: Arc<AtomicBool>,
    started: Instant,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    let mut last_count = 0;
    let mut last_at = Instant::now();
    let mut merged = new_histogram();
    loop {
        tick.tick().await;
        if finished.load(Ordering::Relaxed) {
            return;
        }
        merged.reset();
        for h in &intervals {
            let mut h = h.lock().unwrap_or_else(|e| e.into_inner());
            merged.add(&*h).expect("same bounds");
            h.reset();
        }
        let now = Instant::now();
        let count = sh.completed.load(Ordering::Relaxed);
        let rate = (count - last_count) as f64 / (now - last_at).as_secs_f64();
        // The line describes the second that just ended.
        let phase = if last_at < sh.measure_start { "warmup" } else { "measuring" };
        (last_count, last_at) = (count, now);
        let p99 =
            if merged.is_empty() { 0.0 } else { merged.value_at_quantile(0.99) as f64 / 1_000.0 };
        let failed = sh.failed_sessions.load(Ordering::Relaxed);
        let failed =
            if failed > 0 { format!("  ({failed} sessions failed)") } else { String::new() };
        let measured = sh.measured.load(Ordering::Relaxed);
        eprintln!(
            "[{:>5.1}s] {phase:<9} {rate:>10.0} ops/s  p99 {p99:>8.1} µs  measured {measured} ops{failed}",
            (now - started).as_secs_f64()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::Ycsb;

    #[test]
    fn ycsb_presets_draw_their_proportions() {
        // (workload, expected % of reads, updates, inserts, RMWs)
        let cases = [
            (Ycsb::W, [0.0, 100.0, 0.0, 0.0]),
            (Ycsb::A, [50.0, 50.0, 0.0, 0.0]),
            (Ycsb::B, [95.0, 5.0, 0.0, 0.0]),
            (Ycsb::C, [100.0, 0.0, 0.0, 0.0]),
            (Ycsb::D, [95.0, 0.0, 5.0, 0.0]),
            (Ycsb::F, [50.0, 0.0, 0.0, 50.0]),
        ];
        let total = 200_000u64;
        for (y, expected) in cases {
            let args = BenchArgs {
                workload: WorkloadArgs { ycsb: Some(y), ..WorkloadArgs::default() },
                ..BenchArgs::default()
            };
            let m = args.ycsb_mix().unwrap();
            assert_eq!([m.read_pct, m.update_pct, m.insert_pct, m.rmw_pct], expected, "{y}");
            let mut rng = StdRng::seed_from_u64(42);
            let mut counts = [0u64; CLASSES];
            for _ in 0..total {
                counts[ycsb_class(&m, &mut rng)] += 1;
            }
            let got = [RELAXED_READ, RELAXED_WRITE, INSERT, READ_MODIFY_WRITE]
                .map(|c| 100.0 * counts[c] as f64 / total as f64);
            for (g, e) in got.iter().zip(expected) {
                // A binomial share of 200 000 draws: 4 standard deviations are at most 0.45 points.
                assert!((g - e).abs() < 0.45, "{y}: drew {got:?}, expected {expected:?}");
            }
            assert_eq!(counts.iter().sum::<u64>(), total);
        }
    }
}
