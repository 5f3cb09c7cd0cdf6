//! `--workload txn`: multi-key read-modify-write transactions (issue #18 item 6, RIFL §8.3).
//! Every session runs a closed loop of transactions, each reading `--txn-objects` counters and
//! writing each back plus one, retried until it commits, after the client library's back-off
//! (`RetryPolicy::default().pause_before`, what `run_txn` waits; the same for both targets);
//! the report counts committed transactions and the attempts that aborted, by reason, and
//! times each transaction from its first attempt's start to the commit's answer, each
//! successful commit alone (Strata: `commit()`, one parallel round of prepares; Redis:
//! `MULTI`…`EXEC`) and each attempt's reads.
//!
//! * **Strata** (`--target strata --table T`, a table created with `--txn rifl`): the client
//!   library's transactions. With `--txn-spread` the objects of a transaction are in distinct
//!   shards, so `--txn-objects K` means K participants (RIFL §8.3 Q5, Q6).
//! * **Redis** (`--target redis`): `WATCH` the keys, `GET` them, then `MULTI`, a `SET` of each
//!   and `EXEC` in one write (as client libraries send a queued transaction); a nil `EXEC` (a
//!   watched key changed) is an abort. One connection per session, as WATCH is per
//!   connection.
//! * **etcd** (`--target etcd`, a build with `--features etcd`): a linearizable `Range` of
//!   each key for its value and `mod_revision`, then one `Txn` that puts every key if every
//!   `mod_revision` is unchanged (etcd's multi-key compare-and-put); a failed compare is an
//!   abort. One gRPC channel per session.
//!
//! With `--txn-read-many` every target reads a transaction's keys in one request instead of
//! one after the other: Strata `Transaction::read_many[_for_update]` (one `LogReadMany` per
//! shard), Redis `WATCH` and one `MGET` in one write, etcd one `Txn` of a `Range` per key.
//!
//! Keys are drawn uniformly or from the YCSB zipfian (`--dist zipfian`, θ `--zipf-theta`) over
//! `--keys` keys, distinct within a transaction; they start at 0.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use strata_client::{AbortReason, Client, RetryPolicy, TxnOutcome};
use strata_wire::client::shard_of;

use crate::args::{BenchArgs, Distribution, TxnKeyOrder, TxnReads};
use crate::etcd::EtcdConn;
use crate::keys::Zipfian;
use crate::peer_tls::PeerTls;
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
    /// Every attempt's reads (Strata: waiting while another transaction holds a key).
    #[serde(default)]
    pub read_us: LatencySummary,
    /// Aborted attempts by reason.
    #[serde(default)]
    pub aborts: BTreeMap<String, u64>,
}

/// The keys a session may draw: all of them, or by shard (for `--txn-spread`).
struct Keys {
    names: Vec<Bytes>,
    by_shard: Vec<Vec<usize>>,
    zipf: Option<Zipfian>,
    /// The order of a transaction's keys (`--txn-key-order`): by index, which for a zipfian
    /// draw is the popularity rank.
    order: TxnKeyOrder,
}

impl Keys {
    fn new(args: &BenchArgs, shards: u32) -> Keys {
        let n = args.workload.keys().max(1);
        let names: Vec<Bytes> = (0..n).map(|i| Bytes::from(format!("txk{i}"))).collect();
        let mut by_shard = vec![Vec::new(); shards.max(1) as usize];
        for (i, k) in names.iter().enumerate() {
            by_shard[shard_of(k, shards.max(1)) as usize].push(i);
        }
        let zipf = (args.workload.dist() == Distribution::Zipfian)
            .then(|| Zipfian::new(n, args.workload.zipf_theta));
        Keys { names, by_shard, zipf, order: args.workload.txn_key_order }
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
        match self.order {
            TxnKeyOrder::HotFirst => out.sort_unstable(),
            TxnKeyOrder::HotLast => out.sort_unstable_by(|a, b| b.cmp(a)),
        }
        out.into_iter().map(|i| self.names[i].clone()).collect()
    }
}

/// One session's counts and latencies (whole transactions, commits alone, reads).
pub(crate) struct Counts {
    pub committed: u64,
    /// Of `committed`, the read-only transactions (`--workload kairos`).
    pub read_only: u64,
    pub aborted: u64,
    pub hist: Histogram<u64>,
    pub commit: Histogram<u64>,
    pub reads: Histogram<u64>,
    pub aborts: BTreeMap<String, u64>,
}

impl Counts {
    pub fn new() -> Counts {
        let h = || Histogram::new(3).expect("histogram");
        Counts {
            committed: 0,
            read_only: 0,
            aborted: 0,
            hist: h(),
            commit: h(),
            reads: h(),
            aborts: BTreeMap::new(),
        }
    }

    /// A transaction that committed in the window after `took` from its first attempt.
    pub fn record(&mut self, took: Duration, d: Done, read_only: bool) {
        let _ = self.hist.record((took.as_nanos() as u64).max(1));
        self.read_only += u64::from(read_only);
        self.count(d);
    }

    fn count(&mut self, d: Done) {
        self.committed += 1;
        self.aborted += d.aborts.len() as u64;
        let _ = self.commit.record((d.commit.as_nanos() as u64).max(1));
        for r in d.reads {
            let _ = self.reads.record((r.as_nanos() as u64).max(1));
        }
        for a in d.aborts {
            *self.aborts.entry(a).or_default() += 1;
        }
    }

    pub fn add(&mut self, c: Counts) {
        self.committed += c.committed;
        self.read_only += c.read_only;
        self.aborted += c.aborted;
        self.hist.add(c.hist).expect("same bounds");
        self.commit.add(c.commit).expect("same bounds");
        self.reads.add(c.reads).expect("same bounds");
        for (a, n) in c.aborts {
            *self.aborts.entry(a).or_default() += n;
        }
    }
}

/// What one transaction took: why each aborted attempt aborted, every attempt's reads, and
/// its successful commit.
#[derive(Default)]
pub(crate) struct Done {
    pub aborts: Vec<String>,
    pub reads: Vec<Duration>,
    pub commit: Duration,
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
        Target::Etcd => (None, 1),
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
        _ => return Err(invalid("--workload txn runs against strata, redis or etcd")),
    };
    if spread && objects as u32 > shards {
        return Err(invalid("--txn-spread needs at least --txn-objects shards"));
    }
    let peer_tls = args.conn.peer_tls()?;
    let keys = Arc::new(Keys::new(args, shards));
    preload(args, &client, peer_tls.as_ref(), &endpoints, &keys).await?;
    let started = Instant::now();
    let measure_start = started + Duration::from_secs_f64(args.run.warmup);
    let end = measure_start + Duration::from_secs_f64(args.run.duration);
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..args.total_sessions() {
        let seed = session_seed(args.run.seed, i);
        let (keys, errors) = (keys.clone(), errors.clone());
        let table = args.conn.table.clone().unwrap_or_default();
        let reads = Reads {
            for_update: args.workload.txn_reads == TxnReads::ForUpdate,
            together: args.workload.txn_read_many,
        };
        let addr = endpoints[i % endpoints.len()];
        let (client, peer_tls) = (client.clone(), peer_tls.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut counts = Counts::new();
            let session =
                Session::open(target, client, peer_tls.as_ref(), table, reads, addr).await?;
            while Instant::now() < end {
                let picked = keys.pick(&mut rng, objects, spread);
                let t0 = Instant::now();
                let done_txn = session.txn(&picked).await;
                let done = Instant::now();
                match done_txn {
                    Ok(d) if t0 >= measure_start && done <= end => {
                        counts.record(done.duration_since(t0), d, false)
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
    let (total, samples) = join_sessions(tasks).await;
    let errors = errors.load(Ordering::Relaxed);
    let done =
        Finished { errors, samples, preloaded_keys: keys.names.len() as u64, preload_s: 0.0 };
    Ok(report(args, endpoints, total, done, objects, spread, measure_start))
}

/// Every session's counts summed, and the first few errors of the sessions that failed.
pub(crate) async fn join_sessions(
    tasks: Vec<tokio::task::JoinHandle<Result<Counts, String>>>,
) -> (Counts, Vec<String>) {
    let mut total = Counts::new();
    let mut samples = Vec::new();
    for t in tasks {
        match t.await {
            Ok(Ok(c)) => total.add(c),
            Ok(Err(e)) if samples.len() < MAX_ERROR_SAMPLES => samples.push(e),
            Err(e) if samples.len() < MAX_ERROR_SAMPLES => samples.push(e.to_string()),
            _ => {}
        }
    }
    (total, samples)
}

/// How a transaction run ended besides its counts: errors (whole run), the first few error
/// messages, and the preload.
pub(crate) struct Finished {
    pub errors: u64,
    pub samples: Vec<String>,
    pub preloaded_keys: u64,
    pub preload_s: f64,
}

/// The report of a transaction run (`--workload txn` or `kairos`): the window's counts as
/// `txn`, committed transactions as the `ops`.
pub(crate) fn report(
    args: &BenchArgs,
    endpoints: Vec<SocketAddr>,
    total: Counts,
    done: Finished,
    objects: usize,
    spread: bool,
    measure_start: Instant,
) -> BenchReport {
    let (committed, aborted) = (total.committed, total.aborted);
    let duration_s = args.run.duration;
    let per_s = committed as f64 / duration_s.max(1e-9);
    BenchReport {
        label: args.output.label.clone(),
        target: args.conn.target,
        endpoints,
        args: args.clone(),
        duration_s,
        ops: committed,
        reads: committed * objects as u64,
        writes: committed * objects as u64,
        read_misses: 0,
        errors: done.errors,
        error_samples: done.samples,
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
            read_us: LatencySummary::from_histogram(&total.reads),
            aborts: total.aborts,
        }),
        kairos: None,
        preloaded_keys: done.preloaded_keys,
        preload_s: done.preload_s,
        started_at_unix_ms: unix_ms_at(measure_start),
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
    }
}

/// Every key set to 0.
async fn preload(
    args: &BenchArgs,
    client: &Option<Client>,
    peer_tls: Option<&PeerTls>,
    endpoints: &[SocketAddr],
    keys: &Keys,
) -> Result<(), BenchError> {
    // A write refused or lost is the server's (exit: failed); a connection that cannot be
    // opened, the address's or the credentials' (exit: unreachable).
    let fail = BenchError::Preload;
    let (target, addr) = (args.conn.target, endpoints[0]);
    let unreachable = |message: String| BenchError::Connect { target, addr, message };
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
        None if target == Target::Etcd => {
            let e = EtcdConn::connect(addr, peer_tls).await.map_err(unreachable)?;
            for k in &keys.names {
                e.put(k, b"0").await.map_err(fail)?;
            }
        }
        None => {
            let r = RedisConn::connect(addr, Duration::from_secs(2), peer_tls)
                .await
                .map_err(|e| unreachable(e.to_string()))?;
            for k in &keys.names {
                let slot = r.send(&[b"SET", k, b"0"]).map_err(|e| fail(e.to_string()))?;
                await_reply(slot, r.addr()).await.map_err(|e| fail(e.to_string()))?;
            }
            r.close();
        }
    }
    Ok(())
}

/// How a transaction reads its keys (`--txn-reads`, `--txn-read-many`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Reads {
    /// Strata: a key it writes is read for update.
    pub for_update: bool,
    /// In one request (per shard), not one key after the other.
    pub together: bool,
}

/// One closed-loop session's connection to the system under test.
enum Session {
    Strata { client: Client, table: String, reads: Reads },
    Redis(Arc<RedisConn>, Reads),
    Etcd(EtcdConn, Reads),
}

impl Session {
    async fn open(
        target: Target,
        client: Option<Client>,
        peer_tls: Option<&PeerTls>,
        table: String,
        reads: Reads,
        addr: SocketAddr,
    ) -> Result<Session, String> {
        Ok(match (target, client) {
            (Target::Strata, Some(client)) => Session::Strata { client, table, reads },
            (Target::Etcd, _) => Session::Etcd(EtcdConn::connect(addr, peer_tls).await?, reads),
            _ => Session::Redis(
                RedisConn::connect(addr, Duration::from_secs(2), peer_tls)
                    .await
                    .map_err(|e| e.to_string())?,
                reads,
            ),
        })
    }

    /// One read-modify-write transaction of `keys`, retried until it commits.
    async fn txn(&self, keys: &[Bytes]) -> Result<Done, String> {
        match self {
            Session::Strata { client, table, reads } => {
                let increment = |n: u64| Bytes::from((n + 1).to_string());
                strata_txn(client, table, keys, Some(&increment), *reads).await
            }
            Session::Redis(r, reads) => redis_txn(r, keys, reads.together).await,
            Session::Etcd(e, reads) => etcd_txn(e, keys, reads.together).await,
        }
    }
}

/// The counter a value starts with (its leading decimal digits; 0 without any).
pub(crate) fn counter(v: Option<&[u8]>) -> u64 {
    let v = v.unwrap_or_default();
    let digits = v.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&v[..digits]).ok().and_then(|d| d.parse().ok()).unwrap_or(0)
}

/// The pause before another attempt of an aborted transaction: the client library's.
pub(crate) async fn back_off(attempt: u32) {
    if attempt > 0 {
        tokio::time::sleep(RetryPolicy::default().pause_before(attempt)).await;
    }
}

/// What a read-write transaction writes to a key whose counter ([`counter`]) it read.
pub(crate) type NextValue<'a> = &'a (dyn Fn(u64) -> Bytes + Sync);

/// One Strata transaction, run again until it commits: it reads `keys` in order and, with
/// `next`, writes each key's next value after reading it (else it is read-only); with
/// `reads.for_update`, a key it writes is read for update (`Transaction::read_for_update`),
/// with `reads.together` all in one `read_many` (one request per shard).
pub(crate) async fn strata_txn(
    client: &Client,
    table: &str,
    keys: &[Bytes],
    next: Option<NextValue<'_>>,
    reads: Reads,
) -> Result<Done, String> {
    let mut done = Done::default();
    let for_update = reads.for_update && next.is_some();
    for attempt in 0.. {
        back_off(attempt).await;
        let mut tx = client.transaction();
        let t = Instant::now();
        let values = match reads.together {
            true => tx.read_many_with(table, keys.iter().cloned(), for_update).await,
            false => {
                let mut values = Vec::with_capacity(keys.len());
                for k in keys {
                    let v = tx.read_with(table, k.clone(), for_update).await;
                    values.push(v.map_err(|e| e.to_string())?);
                }
                Ok(values)
            }
        };
        let values = values.map_err(|e| e.to_string())?;
        if let Some(next) = next {
            for (k, v) in keys.iter().zip(values) {
                tx.write(table, k.clone(), next(counter(v.as_deref())));
            }
        }
        done.reads.push(t.elapsed());
        let t = Instant::now();
        match tx.commit().await.map_err(|e| e.to_string())? {
            TxnOutcome::Committed => {
                done.commit = t.elapsed();
                break;
            }
            TxnOutcome::Aborted { reason } => done.aborts.push(abort_name(reason).into()),
        }
    }
    Ok(done)
}

pub(crate) fn abort_name(reason: AbortReason) -> &'static str {
    match reason {
        AbortReason::Locked => "locked",
        AbortReason::Conflict => "conflict",
        AbortReason::Recovered => "recovered",
        AbortReason::Stale => "stale",
        AbortReason::PreparedConflict => "prepared-conflict",
        AbortReason::ReadWriteConflict => "read-write-conflict",
        AbortReason::WriteWriteConflict => "write-write-conflict",
        AbortReason::TimestampOrder => "timestamp-order",
        AbortReason::TooOld => "too-old",
        AbortReason::Refused => "refused",
    }
}

/// One etcd transaction: linearizable reads of the keys with their `mod_revision`s, then one
/// `Txn` that puts every key if no revision changed; retried until it runs.
/// `together`: the reads in one `Txn` of a `Range` per key.
async fn etcd_txn(e: &EtcdConn, keys: &[Bytes], together: bool) -> Result<Done, String> {
    let mut done = Done::default();
    for attempt in 0.. {
        back_off(attempt).await;
        let t = Instant::now();
        let mut read = Vec::with_capacity(keys.len());
        let mut writes = Vec::with_capacity(keys.len());
        let versioned = match together {
            true => e.read_many_versioned(keys).await?,
            false => {
                let mut versioned = Vec::with_capacity(keys.len());
                for k in keys {
                    versioned.push(e.read_versioned(k).await?);
                }
                versioned
            }
        };
        for (k, (value, rev)) in keys.iter().zip(versioned) {
            read.push((&k[..], rev));
            writes.push((&k[..], (counter(value.as_deref()) + 1).to_string().into_bytes()));
        }
        done.reads.push(t.elapsed());
        let t = Instant::now();
        if e.put_if_unchanged(&read, &writes).await? {
            done.commit = t.elapsed();
            break;
        }
        done.aborts.push("revision changed".into());
    }
    Ok(done)
}

/// One Redis optimistic transaction (`WATCH`/`MULTI`/`EXEC`), retried until `EXEC` runs: the
/// attempts whose `EXEC` was refused. `together`: `WATCH` and one `MGET` in one write.
async fn redis_txn(r: &RedisConn, keys: &[Bytes], together: bool) -> Result<Done, String> {
    let call = |args: &[&[u8]]| {
        let slot = r.send(args).map_err(|e| e.to_string());
        async move { await_reply(slot?, r.addr()).await.map_err(|e| e.to_string()) }
    };
    let mut done = Done::default();
    for attempt in 0.. {
        back_off(attempt).await;
        let t = Instant::now();
        let mut watch: Vec<&[u8]> = vec![b"WATCH"];
        watch.extend(keys.iter().map(|k| &k[..]));
        let values = match together {
            true => redis_mget(r, &watch, keys).await?,
            false => {
                call(&watch).await?;
                let mut values = Vec::with_capacity(keys.len());
                for k in keys {
                    values.push(match call(&[b"GET", k]).await? {
                        Reply::Bulk(v) => counter(v.as_deref()),
                        other => return Err(format!("GET: {other:?}")),
                    });
                }
                values
            }
        };
        done.reads.push(t.elapsed());
        let t = Instant::now();
        // `MULTI`, the `SET`s and `EXEC` in one write, as client libraries send a queued
        // transaction (redis-py's `pipeline().execute()`): one round trip.
        let sent = |args: &[&[u8]]| r.send(args).map_err(|e| e.to_string());
        let mut queued = vec![sent(&[b"MULTI"])?];
        for (k, n) in keys.iter().zip(values) {
            let v = (n + 1).to_string();
            queued.push(sent(&[b"SET", k, v.as_bytes()])?);
        }
        let exec = sent(&[b"EXEC"])?;
        for slot in queued {
            if let Reply::Error(e) = await_reply(slot, r.addr()).await.map_err(|e| e.to_string())? {
                return Err(format!("MULTI: {}", String::from_utf8_lossy(&e)));
            }
        }
        match await_reply(exec, r.addr()).await.map_err(|e| e.to_string())? {
            Reply::Array(Some(_)) => {
                done.commit = t.elapsed();
                break;
            }
            Reply::Array(None) | Reply::Bulk(None) => {
                done.aborts.push("watched key changed".into())
            }
            other => return Err(format!("EXEC: {other:?}")),
        }
    }
    Ok(done)
}

/// `WATCH` (`watch`: the command and the keys) and an `MGET` of `keys` sent in one write, as
/// a client library pipelines them: one round trip. The keys' counters, in order.
async fn redis_mget(r: &RedisConn, watch: &[&[u8]], keys: &[Bytes]) -> Result<Vec<u64>, String> {
    let sent = |args: &[&[u8]]| r.send(args).map_err(|e| e.to_string());
    let watched = sent(watch)?;
    let mut mget: Vec<&[u8]> = vec![b"MGET"];
    mget.extend(keys.iter().map(|k| &k[..]));
    let got = sent(&mget)?;
    await_reply(watched, r.addr()).await.map_err(|e| e.to_string())?;
    match await_reply(got, r.addr()).await.map_err(|e| e.to_string())? {
        Reply::Array(Some(values)) if values.len() == keys.len() => values
            .into_iter()
            .map(|v| match v {
                Reply::Bulk(v) => Ok(counter(v.as_deref())),
                other => Err(format!("MGET: {other:?}")),
            })
            .collect(),
        other => Err(format!("MGET: {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(order: TxnKeyOrder) -> Keys {
        let mut args = BenchArgs::default();
        args.workload.keys = Some(100);
        args.workload.dist = Some(Distribution::Zipfian);
        args.workload.txn_key_order = order;
        Keys::new(&args, 1)
    }

    /// Every transaction reads its keys in one order: by popularity rank, the hottest first
    /// or last (`--txn-key-order`).
    #[test]
    fn a_transactions_keys_come_in_the_chosen_order() {
        let rank = |k: &Bytes| std::str::from_utf8(&k[3..]).unwrap().parse::<usize>().unwrap();
        for (order, ascending) in [(TxnKeyOrder::HotFirst, true), (TxnKeyOrder::HotLast, false)] {
            let keys = keys(order);
            let mut rng = StdRng::seed_from_u64(7);
            for _ in 0..200 {
                let ranks: Vec<usize> = keys.pick(&mut rng, 3, false).iter().map(rank).collect();
                let sorted = ranks.windows(2).all(|w| (w[0] < w[1]) == ascending);
                assert!(sorted, "{order:?}: {ranks:?}");
            }
        }
    }
}
