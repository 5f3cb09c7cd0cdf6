//! `--workload kairos`: Kairos's social-network YCSB variant (kairos.md §8.1) over a
//! `--txn kairos` table, for the §8.3 reproduction (P1 Fig. 8/9a, P2 Fig. 11, P3 Fig. 13).
//!
//! * **Keys** `keys::key(rank, --key-size)`, ranked by popularity: rank 0 is the hottest for
//!   both distributions (the paper's Fig. 9b makes the hottest read key the most written one
//!   too). Exact zipfians ([`ZipfTable`]) of skew `--read-zipf` for the keys of read-only
//!   transactions and `--write-zipf` for those of read-write ones, any skew above 0 (Fig. 9a
//!   goes to 1.2).
//! * **Transactions**: read-only with probability `--ro-pct`, else read-write; `--txn-keys`
//!   distinct keys, read in the order drawn; a read-write transaction writes each key right
//!   after reading it (a `--value-size` value starting with the key's counter plus one). An
//!   aborted attempt is retried with the same keys after the client library's back-off
//!   (`txn::back_off`), until it commits; the transaction is timed from its first attempt.
//! * **Clients**: `--clients` client-library instances, each with its own lease, connections
//!   and (with `--cache`) its own cache, as the paper's client machines; each runs
//!   `--sessions` closed loops (the application threads). Client `c` starts at endpoint
//!   `c mod n`. With `--offered-rate` each loop starts a transaction at most once per
//!   `clients x sessions / rate` seconds (§8.2 Fig. 11's fixed offered load).
//! * **Cache**: the `--cacheable-pct` most popular keys may be cached, in a cache of
//!   `--cache-pct` of the keys per client, under `--cache POLICY`.
//! * **Preload**: every key is written once by blind-write transactions (a Kairos table takes
//!   no plain writes), batched by shard so that each batch is one participant and decides at
//!   its prepare; `--skip-preload` when an earlier run on the same table wrote them.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use strata_client::{Cacheable, Client, ClientOptions, KairosCacheOptions, TxnOutcome};
use strata_wire::client::shard_of;

use crate::args::{BenchArgs, KairosArgs};
use crate::keys::{key, ZipfTable};
use crate::report::BenchReport;
use crate::txn::{self, back_off, join_sessions, strata_txn, Counts, Finished, Reads};
use crate::{session_seed, BenchError};

/// Keys one preload transaction writes (all in one shard).
const PRELOAD_BATCH: usize = 64;
/// Preload transactions in flight per client (each holds `PRELOAD_BATCH + 1` of the lease's
/// 512 ids until it is decided).
const PRELOAD_DEPTH: usize = 4;

/// What a Kairos run did beyond the transaction counts (the report's `kairos`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KairosReport {
    /// `--cache` as given (`none`, `ideal`, `static:0.1`, ...).
    pub cache: String,
    /// Keys that may be cached (the most popular), and each client's capacity in entries.
    pub cacheable_keys: u64,
    pub cache_capacity: usize,
    /// Share of read-only transactions' reads that fall on the cacheable keys, and on as many
    /// of the hottest keys as one cache holds (the distribution's, not measured).
    pub cacheable_read_share: f64,
    pub capacity_read_share: f64,
    /// `--offered-rate`, if any.
    pub offered_rate: Option<f64>,
    /// Committed in the window, by kind.
    pub ro_committed: u64,
    pub rw_committed: u64,
    /// The clients' caches in the window, summed: reads served from the cache, reads of
    /// cacheable keys that fetched, and cached reads found stale by validation (their
    /// transaction aborted). `None` without a cache.
    pub cache_stats: Option<CacheCounts>,
    /// `hits / (hits + misses)`: the share of cacheable reads the cache served.
    pub hit_rate: Option<f64>,
}

/// Counters of one client's cache (or their sum).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheCounts {
    pub hits: u64,
    pub misses: u64,
    pub stale_hits: u64,
}

impl CacheCounts {
    fn since(self, before: CacheCounts) -> CacheCounts {
        CacheCounts {
            hits: self.hits.saturating_sub(before.hits),
            misses: self.misses.saturating_sub(before.misses),
            stale_hits: self.stale_hits.saturating_sub(before.stale_hits),
        }
    }

    fn add(self, o: CacheCounts) -> CacheCounts {
        CacheCounts {
            hits: self.hits + o.hits,
            misses: self.misses + o.misses,
            stale_hits: self.stale_hits + o.stale_hits,
        }
    }

    fn hit_rate(self) -> Option<f64> {
        let reads = self.hits + self.misses;
        (reads > 0).then(|| self.hits as f64 / reads as f64)
    }
}

/// The keys and how transactions draw them.
pub(crate) struct Workload {
    names: Vec<Bytes>,
    read: ZipfTable,
    write: ZipfTable,
    txn_keys: usize,
    ro_pct: f64,
}

impl Workload {
    pub(crate) fn new(args: &BenchArgs) -> Workload {
        let (n, k) = (args.workload.keys(), &args.kairos);
        Workload {
            names: (0..n).map(|i| key(i, args.workload.key_size)).collect(),
            read: ZipfTable::new(n, k.read_zipf),
            write: ZipfTable::new(n, k.write_zipf),
            txn_keys: k.txn_keys.min(n as usize),
            ro_pct: k.ro_pct,
        }
    }

    /// One transaction's kind (read-only?) and its distinct keys, in the order drawn.
    pub(crate) fn draw(&self, rng: &mut StdRng) -> (bool, Vec<Bytes>) {
        let read_only = rng.gen::<f64>() * 100.0 < self.ro_pct;
        let dist = if read_only { &self.read } else { &self.write };
        let mut ranks: Vec<u64> = Vec::with_capacity(self.txn_keys);
        while ranks.len() < self.txn_keys {
            let r = dist.sample(rng);
            if !ranks.contains(&r) {
                ranks.push(r);
            }
        }
        (read_only, ranks.into_iter().map(|r| self.names[r as usize].clone()).collect())
    }
}

/// A value of `size` bytes (at least the digits) starting with the counter `n` in decimal,
/// padded with dots; `txn::counter` reads `n` back.
fn value_of(n: u64, size: usize) -> Bytes {
    let digits = n.to_string();
    let mut v = BytesMut::with_capacity(size.max(digits.len()));
    v.put_slice(digits.as_bytes());
    v.put_bytes(b'.', size.saturating_sub(digits.len()));
    v.freeze()
}

/// The client options of one Kairos client: the run's, with the cache `--cache` asks for,
/// of `capacity` entries, caching the keys of `cacheable` in `table` only.
fn client_options(
    base: ClientOptions,
    k: &KairosArgs,
    table: &str,
    cacheable: &Arc<HashSet<Bytes>>,
    capacity: usize,
) -> ClientOptions {
    let kairos_cache = k.cache.0.map(|policy| {
        let (table, keys) = (table.to_string(), cacheable.clone());
        let cacheable: Cacheable = Arc::new(move |t, key| t == table && keys.contains(key));
        KairosCacheOptions { policy, capacity, cacheable }
    });
    ClientOptions { kairos_cache, ..base }
}

/// A client's cache counters so far (zero without a cache).
fn cache_counts(client: &Client) -> CacheCounts {
    client.kairos_cache_stats().map_or(CacheCounts::default(), |s| CacheCounts {
        hits: s.cache.hits,
        misses: s.cache.misses,
        stale_hits: s.stale_hits,
    })
}

pub(crate) async fn run(
    args: &BenchArgs,
    endpoints: Vec<SocketAddr>,
) -> Result<BenchReport, BenchError> {
    let k = &args.kairos;
    let table = args.conn.table.clone().ok_or_else(|| {
        BenchError::InvalidArgs(
            "--workload kairos needs --table (created with --txn kairos)".into(),
        )
    })?;
    let work = Arc::new(Workload::new(args));
    let (cacheable_keys, capacity) = k.cache_sizes(work.names.len() as u64);
    let cacheable: Arc<HashSet<Bytes>> =
        Arc::new(work.names[..cacheable_keys as usize].iter().cloned().collect());
    let base = args.conn.strata_options()?;
    let mut clients = Vec::with_capacity(args.conn.clients);
    for c in 0..args.conn.clients {
        let mut order = endpoints.clone();
        order.rotate_left(c % endpoints.len());
        let opts = client_options(base.clone(), k, &table, &cacheable, capacity);
        let client = Client::connect(&order, opts).await.map_err(|e| BenchError::Connect {
            target: args.conn.target,
            addr: order[0],
            message: e.to_string(),
        })?;
        clients.push(client);
    }
    let shards = clients[0]
        .table(&table)
        .await
        .map_err(|e| BenchError::InvalidArgs(format!("--table {table}: {e}")))?
        .def()
        .shards;
    let preload_started = Instant::now();
    if !k.skip_preload {
        preload(&clients, &table, &work.names, shards, args.workload.value_size).await?;
    }
    let preload_s = preload_started.elapsed().as_secs_f64();

    let measure_start = Instant::now() + Duration::from_secs_f64(args.run.warmup);
    let end = measure_start + Duration::from_secs_f64(args.run.duration);
    let before = snapshot_at(&clients, measure_start);
    let errors = Arc::new(AtomicU64::new(0));
    let total_sessions = args.total_sessions();
    let interval = k.offered_rate.map(|r| Duration::from_secs_f64(total_sessions as f64 / r));
    let mut tasks = Vec::with_capacity(total_sessions);
    for i in 0..total_sessions {
        let client = clients[i / args.conn.sessions].clone();
        let (work, errors, table) = (work.clone(), errors.clone(), table.clone());
        let mut rng = StdRng::seed_from_u64(session_seed(args.run.seed, i));
        let value_size = args.workload.value_size;
        tasks.push(tokio::spawn(async move {
            let mut counts = Counts::new();
            // Sessions start spread over one interval, not in step.
            let mut next = interval.map(|iv| Instant::now() + iv.mul_f64(rng.gen::<f64>()));
            while Instant::now() < end {
                if let (Some(at), Some(iv)) = (next.as_mut(), interval) {
                    tokio::time::sleep_until((*at).into()).await;
                    *at = (*at + iv).max(Instant::now());
                }
                let (read_only, keys) = work.draw(&mut rng);
                let next_value = move |n: u64| value_of(n + 1, value_size);
                let write = (!read_only).then_some(&next_value as txn::NextValue<'_>);
                let t0 = Instant::now();
                // Kairos validates timestamps: no reads for update (they are plain reads there).
                let result = strata_txn(&client, &table, &keys, write, Reads::default()).await;
                let done = Instant::now();
                match result {
                    Ok(d) if t0 >= measure_start && done <= end => {
                        counts.record(done - t0, d, read_only)
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
    let before = before.await.map_err(|e| BenchError::InvalidArgs(e.to_string()))?;
    let after: Vec<CacheCounts> = clients.iter().map(cache_counts).collect();
    let stats =
        after.iter().zip(&before).fold(CacheCounts::default(), |sum, (a, b)| sum.add(a.since(*b)));
    let cached = k.cache.0.is_some();
    let kairos = KairosReport {
        cache: k.cache.to_string(),
        cacheable_keys,
        cache_capacity: capacity,
        cacheable_read_share: work.read.head_mass(cacheable_keys),
        capacity_read_share: work.read.head_mass(capacity as u64),
        offered_rate: k.offered_rate,
        ro_committed: total.read_only,
        rw_committed: total.committed - total.read_only,
        cache_stats: cached.then_some(stats),
        hit_rate: if cached { stats.hit_rate() } else { None },
    };
    let done = Finished {
        errors: errors.load(Ordering::Relaxed),
        samples,
        preloaded_keys: if k.skip_preload { 0 } else { work.names.len() as u64 },
        preload_s,
    };
    let mut report = txn::report(args, endpoints, total, done, work.txn_keys, false, measure_start);
    report.kairos = Some(kairos);
    Ok(report)
}

/// Every client's cache counters at `at` (the window's start), taken in the background.
fn snapshot_at(clients: &[Client], at: Instant) -> tokio::task::JoinHandle<Vec<CacheCounts>> {
    let clients = clients.to_vec();
    tokio::spawn(async move {
        tokio::time::sleep_until(at.into()).await;
        clients.iter().map(cache_counts).collect()
    })
}

/// Writes every key once (the counter 0): blind-write transactions of up to `PRELOAD_BATCH`
/// keys of one shard, `PRELOAD_DEPTH` in flight per client.
async fn preload(
    clients: &[Client],
    table: &str,
    names: &[Bytes],
    shards: u32,
    value_size: usize,
) -> Result<(), BenchError> {
    let mut by_shard = vec![Vec::new(); shards.max(1) as usize];
    for k in names {
        by_shard[shard_of(k, shards.max(1)) as usize].push(k.clone());
    }
    let batches: Vec<Vec<Bytes>> = by_shard
        .iter()
        .flat_map(|keys| keys.chunks(PRELOAD_BATCH).map(<[Bytes]>::to_vec))
        .collect();
    let batches = Arc::new(batches);
    let loops = clients.len() * PRELOAD_DEPTH;
    let value = value_of(0, value_size);
    let mut tasks = Vec::with_capacity(loops);
    for l in 0..loops {
        let (client, batches) = (clients[l % clients.len()].clone(), batches.clone());
        let (table, value) = (table.to_string(), value.clone());
        tasks.push(tokio::spawn(async move {
            for batch in batches.iter().skip(l).step_by(loops) {
                blind_write(&client, &table, batch, &value).await?;
            }
            Ok::<_, String>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| BenchError::Preload(e.to_string()))?.map_err(BenchError::Preload)?;
    }
    Ok(())
}

/// One transaction writing `value` to every key (no reads), run again until it commits.
async fn blind_write(
    client: &Client,
    table: &str,
    keys: &[Bytes],
    value: &Bytes,
) -> Result<(), String> {
    for attempt in 0.. {
        back_off(attempt).await;
        let mut tx = client.transaction();
        for k in keys {
            tx.write(table, k.clone(), value.clone());
        }
        if tx.commit().await.map_err(|e| e.to_string())? == TxnOutcome::Committed {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::WorkloadKind;
    use crate::txn::counter;

    fn args(keys: u64, ro_pct: f64) -> BenchArgs {
        let mut a = BenchArgs::default();
        a.workload.kind = WorkloadKind::Kairos;
        a.workload.keys = Some(keys);
        a.kairos.ro_pct = ro_pct;
        a
    }

    #[test]
    fn transactions_draw_distinct_keys_of_their_kind() {
        let w = Workload::new(&args(1_000, 90.0));
        let mut rng = StdRng::seed_from_u64(3);
        let (mut ro, mut hot_ro, mut hot_rw, n) = (0, 0, 0, 20_000);
        for _ in 0..n {
            let (read_only, keys) = w.draw(&mut rng);
            assert_eq!(keys.len(), 4);
            let mut dedup = keys.clone();
            dedup.sort();
            dedup.dedup();
            assert_eq!(dedup.len(), 4, "distinct keys: {keys:?}");
            let hot = keys.contains(&w.names[0]) as u32;
            if read_only {
                ro += 1;
                hot_ro += hot;
            } else {
                hot_rw += hot;
            }
        }
        // 90 % read-only, within 5 standard deviations.
        let sd = (n as f64 * 0.9 * 0.1).sqrt();
        assert!((ro as f64 - 0.9 * n as f64).abs() < 5.0 * sd, "{ro} read-only of {n}");
        // The hottest key is far likelier in a read-only transaction (skew 0.99) than in a
        // read-write one (skew 0.5).
        let (p_ro, p_rw) = (hot_ro as f64 / ro as f64, hot_rw as f64 / (n - ro) as f64);
        assert!(p_ro > 2.0 * p_rw, "hottest key in {p_ro:.3} of RO vs {p_rw:.3} of RW");
        // All read-only and all read-write are possible.
        let mut rng = StdRng::seed_from_u64(1);
        assert!((0..100).all(|_| Workload::new(&args(100, 100.0)).draw(&mut rng).0));
        assert!((0..100).all(|_| !Workload::new(&args(100, 0.0)).draw(&mut rng).0));
        // Fewer keys than a transaction wants: all of them.
        assert_eq!(Workload::new(&args(3, 50.0)).draw(&mut rng).1.len(), 3);
    }

    #[test]
    fn values_carry_their_counter_at_the_requested_size() {
        for (n, size) in [(0, 100), (41, 100), (123_456, 3)] {
            let v = value_of(n, size);
            assert_eq!(v.len(), size.max(n.to_string().len()));
            assert_eq!(counter(Some(&v)), n);
        }
        assert_eq!(counter(None), 0);
    }

    #[test]
    fn cache_sizes_follow_the_percentages() {
        let k = KairosArgs::default();
        assert_eq!(k.cache_sizes(200_000), (2_000, 200));
        assert_eq!(k.cache_sizes(100), (1, 1), "at least one of each");
        let none = KairosArgs { cacheable_pct: 0.0, ..KairosArgs::default() };
        assert_eq!(none.cache_sizes(200_000).0, 0);
        let c = CacheCounts { hits: 30, misses: 10, stale_hits: 2 };
        let d = c.since(CacheCounts { hits: 10, misses: 5, stale_hits: 1 });
        assert_eq!(d, CacheCounts { hits: 20, misses: 5, stale_hits: 1 });
        assert_eq!(d.hit_rate(), Some(0.8));
        assert_eq!(CacheCounts::default().hit_rate(), None);
    }
}
