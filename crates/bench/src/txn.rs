//! `--workload txn`: multi-key read-modify-write transactions (issue #18 item 6, RIFL §8.3).
//! Every session runs a closed loop of transactions, each reading `--txn-objects` counters and
//! writing each back plus one, retried until it commits (a new attempt right away, as
//! `run_txn` does); the report counts committed transactions and the attempts that aborted,
//! and times each transaction from its first attempt's start to the commit's answer, and each
//! successful commit alone (Strata: `commit()`, one parallel round of prepares; Redis:
//! `MULTI`…`EXEC`).
//!
//! * **Strata** (`--target strata --table T`, a table created with `--txn rifl`): the client
//!   library's transactions. With `--txn-spread` the objects of a transaction are in distinct
//!   shards, so `--txn-objects K` means K participants (RIFL §8.3 Q5, Q6).
//! * **Redis** (`--target redis`): `WATCH` the keys, `GET` them, `MULTI`, `SET` them, `EXEC`;
//!   a nil `EXEC` (a watched key changed) is an abort. One connection per session, as WATCH
//!   is per connection.
//!
//! Keys are drawn uniformly or from the YCSB zipfian (`--dist zipfian`, θ `--zipf-theta`) over
//! `--keys` keys, distinct within a transaction; they start at 0.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use strata_client::{Client, TxnOutcome};
use strata_wire::client::shard_of;

use crate::args::{BenchArgs, Distribution};
use crate::keys::Zipfian;
use crate::report::{BenchReport, Latencies, LatencySummary};
use crate::resp::{await_reply, RedisConn, Reply};
use crate::{session_seed, unix_ms_at, BenchError, Target, MAX_ERROR_SAMPLES};

/// What a transaction run did (the report's `txn`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TxnReport {
    /// Objects per transaction (participants, with `spread`).
    pub objects: usize,
    pub spread: bool,
    /// Transactions committed in the window.
    pub committed: u64,
    /// Attempts that aborted (conflicts, locks) in the window.
    pub aborted_attempts: u64,
    pub committed_s: f64,
    /// The successful commits alone.
    pub commit_us: LatencySummary,
}

/// The keys a session may draw: all of them, or by shard (for `--txn-spread`).
struct Keys {
    names: Vec<Bytes>,
    by_shard: Vec<Vec<usize>>,
    zipf: Option<Zipfian>,
}

impl Keys {
    fn new(args: &BenchArgs, shards: u32) -> Keys {
        let n = args.workload.keys.max(1);
        let names: Vec<Bytes> = (0..n).map(|i| Bytes::from(format!("txk{i}"))).collect();
        let mut by_shard = vec![Vec::new(); shards.max(1) as usize];
        for (i, k) in names.iter().enumerate() {
            by_shard[shard_of(k, shards.max(1)) as usize].push(i);
        }
        let zipf = (args.workload.dist() == Distribution::Zipfian)
            .then(|| Zipfian::new(n, args.workload.zipf_theta));
        Keys { names, by_shard, zipf }
    }

    fn draw(&self, rng: &mut StdRng) -> usize {
        match &self.zipf {
            Some(z) => z.sample(rng) as usize % self.names.len(),
            None => rng.gen_range(0..self.names.len()),
        }
    }

    /// `k` distinct keys; with `spread`, each in another shard.
    fn pick(&self, rng: &mut StdRng, k: usize, spread: bool) -> Vec<Bytes> {
        let mut out: Vec<usize> = Vec::with_capacity(k);
        if spread {
            let mut shards: Vec<usize> = (0..self.by_shard.len()).collect();
            for i in 0..k.min(shards.len()) {
                let j = rng.gen_range(i..shards.len());
                shards.swap(i, j);
                let keys = &self.by_shard[shards[i]];
                out.push(keys[rng.gen_range(0..keys.len())]);
            }
        } else {
            while out.len() < k.min(self.names.len()) {
                let i = self.draw(rng);
                if !out.contains(&i) {
                    out.push(i);
                }
            }
        }
        out.sort_unstable();
        out.into_iter().map(|i| self.names[i].clone()).collect()
    }
}

/// One session's counts and latencies (whole transactions, commits alone).
struct Counts {
    committed: u64,
    aborted: u64,
    hist: Histogram<u64>,
    commit: Histogram<u64>,
}

impl Counts {
    fn new() -> Counts {
        let h = || Histogram::new(3).expect("histogram");
        Counts { committed: 0, aborted: 0, hist: h(), commit: h() }
    }
}

/// What one transaction took: aborted attempts, and its successful commit's duration.
struct Done {
    aborted: u64,
    commit: Duration,
}

pub(crate) async fn run(
    args: &BenchArgs,
    endpoints: Vec<SocketAddr>,
) -> Result<BenchReport, BenchError> {
    let objects = args.workload.txn_objects.max(1);
    let spread = args.workload.txn_spread;
    let target = args.conn.target;
    let invalid = |m: &str| BenchError::InvalidArgs(m.to_string());
    let (client, shards) = match target {
        Target::Strata => {
            let table = args.conn.table.as_deref().ok_or_else(|| {
                invalid("--workload txn on Strata needs --table (a table created with --txn rifl)")
            })?;
            let client =
                Client::connect(&endpoints, args.conn.strata_options()?).await.map_err(|e| {
                    BenchError::Connect { target, addr: endpoints[0], message: e.to_string() }
                })?;
            let shards =
                client.table(table).await.map_err(|e| invalid(&e.to_string()))?.def().shards;
            (Some(client), shards)
        }
        Target::Redis => (None, 1),
        _ => return Err(invalid("--workload txn runs against strata or redis")),
    };
    if spread && objects as u32 > shards {
        return Err(invalid("--txn-spread needs at least --txn-objects shards"));
    }
    let keys = Arc::new(Keys::new(args, shards));
    preload(args, &client, &endpoints, &keys).await?;
    let started = Instant::now();
    let measure_start = started + Duration::from_secs_f64(args.run.warmup);
    let end = measure_start + Duration::from_secs_f64(args.run.duration);
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..args.total_sessions() {
        let seed = session_seed(args.run.seed, i);
        let (keys, errors) = (keys.clone(), errors.clone());
        let table = args.conn.table.clone().unwrap_or_default();
        let addr = endpoints[i % endpoints.len()];
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut counts = Counts::new();
            let redis = match client {
                Some(_) => None,
                None => Some(
                    RedisConn::connect(addr, Duration::from_secs(2))
                        .await
                        .map_err(|e| e.to_string())?,
                ),
            };
            while Instant::now() < end {
                let picked = keys.pick(&mut rng, objects, spread);
                let t0 = Instant::now();
                let done_txn = match (&client, &redis) {
                    (Some(c), _) => strata_txn(c, &table, &picked).await,
                    (None, Some(r)) => redis_txn(r, &picked).await,
                    _ => unreachable!("one target"),
                };
                let done = Instant::now();
                match done_txn {
                    Ok(d) if t0 >= measure_start && done <= end => {
                        counts.committed += 1;
                        counts.aborted += d.aborted;
                        let ns = done.duration_since(t0).as_nanos() as u64;
                        let _ = counts.hist.record(ns.max(1));
                        let _ = counts.commit.record((d.commit.as_nanos() as u64).max(1));
                    }
                    Ok(_) => {}
                    Err(e) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        return Err(e);
                    }
                }
            }
            Ok::<_, String>(counts)
        }));
    }
    let mut total = Counts::new();
    let mut samples = Vec::new();
    for t in tasks {
        match t.await {
            Ok(Ok(c)) => {
                total.committed += c.committed;
                total.aborted += c.aborted;
                total.hist.add(c.hist).expect("same bounds");
                total.commit.add(c.commit).expect("same bounds");
            }
            Ok(Err(e)) if samples.len() < MAX_ERROR_SAMPLES => samples.push(e),
            Err(e) if samples.len() < MAX_ERROR_SAMPLES => samples.push(e.to_string()),
            _ => {}
        }
    }
    let (committed, aborted) = (total.committed, total.aborted);
    let duration_s = args.run.duration;
    let per_s = committed as f64 / duration_s.max(1e-9);
    Ok(BenchReport {
        label: args.output.label.clone(),
        target,
        endpoints,
        args: args.clone(),
        duration_s,
        ops: committed,
        reads: committed * objects as u64,
        writes: committed * objects as u64,
        read_misses: 0,
        errors: errors.load(Ordering::Relaxed),
        error_samples: samples,
        throughput_ops_s: per_s,
        latency_us: Latencies {
            all: LatencySummary::from_histogram(&total.hist),
            ..Latencies::default()
        },
        mix: Default::default(),
        class_latency_us: Default::default(),
        ycsb: None,
        timeline_files: Vec::new(),
        ds: None,
        read_durability: None,
        lease: None,
        txn: Some(TxnReport {
            objects,
            spread,
            committed,
            aborted_attempts: aborted,
            committed_s: per_s,
            commit_us: LatencySummary::from_histogram(&total.commit),
        }),
        preloaded_keys: keys.names.len() as u64,
        preload_s: 0.0,
        started_at_unix_ms: unix_ms_at(measure_start),
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
    })
}

/// Every key set to 0.
async fn preload(
    args: &BenchArgs,
    client: &Option<Client>,
    endpoints: &[SocketAddr],
    keys: &Keys,
) -> Result<(), BenchError> {
    let fail = |e: String| BenchError::InvalidArgs(format!("preload: {e}"));
    match client {
        Some(c) => {
            let mut t = c
                .table(args.conn.table.as_deref().unwrap_or_default())
                .await
                .map_err(|e| fail(e.to_string()))?;
            for k in &keys.names {
                t.put(k.clone(), "0").await.map_err(|e| fail(e.to_string()))?;
            }
        }
        None => {
            let r = RedisConn::connect(endpoints[0], Duration::from_secs(2))
                .await
                .map_err(|e| fail(e.to_string()))?;
            for k in &keys.names {
                let slot = r.send(&[b"SET", k, b"0"]).map_err(|e| fail(e.to_string()))?;
                await_reply(slot, r.addr()).await.map_err(|e| fail(e.to_string()))?;
            }
            r.close();
        }
    }
    Ok(())
}

fn counter(v: Option<&[u8]>) -> u64 {
    v.and_then(|v| std::str::from_utf8(v).ok()?.parse().ok()).unwrap_or(0)
}

/// One Strata transaction, run again at once until it commits (no back-off: the measured
/// loop retries as fast as it can, like the Redis loop).
async fn strata_txn(client: &Client, table: &str, keys: &[Bytes]) -> Result<Done, String> {
    let mut aborted = 0;
    loop {
        let mut tx = client.transaction();
        for k in keys {
            let n = counter(tx.read(table, k.clone()).await.map_err(|e| e.to_string())?.as_deref());
            tx.write(table, k.clone(), (n + 1).to_string());
        }
        let t = Instant::now();
        match tx.commit().await.map_err(|e| e.to_string())? {
            TxnOutcome::Committed => return Ok(Done { aborted, commit: t.elapsed() }),
            TxnOutcome::Aborted { .. } => aborted += 1,
        }
    }
}

/// One Redis optimistic transaction (`WATCH`/`MULTI`/`EXEC`), retried until `EXEC` runs: the
/// attempts whose `EXEC` was refused.
async fn redis_txn(r: &RedisConn, keys: &[Bytes]) -> Result<Done, String> {
    let call = |args: &[&[u8]]| {
        let slot = r.send(args).map_err(|e| e.to_string());
        async move { await_reply(slot?, r.addr()).await.map_err(|e| e.to_string()) }
    };
    let mut aborted = 0;
    loop {
        let mut watch: Vec<&[u8]> = vec![b"WATCH"];
        watch.extend(keys.iter().map(|k| &k[..]));
        call(&watch).await?;
        let mut values = Vec::with_capacity(keys.len());
        for k in keys {
            values.push(match call(&[b"GET", k]).await? {
                Reply::Bulk(v) => counter(v.as_deref()),
                other => return Err(format!("GET: {other:?}")),
            });
        }
        let t = Instant::now();
        call(&[b"MULTI"]).await?;
        for (k, n) in keys.iter().zip(values) {
            let v = (n + 1).to_string();
            call(&[b"SET", k, v.as_bytes()]).await?;
        }
        match call(&[b"EXEC"]).await? {
            Reply::Array(Some(_)) => return Ok(Done { aborted, commit: t.elapsed() }),
            Reply::Array(None) | Reply::Bulk(None) => aborted += 1,
            other => return Err(format!("EXEC: {other:?}")),
        }
    }
}
