//! What a run measured, as JSON (serde) and as a small human table (`Display`).

use std::fmt;
use std::net::SocketAddr;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::args::{BenchArgs, Distribution, Mix, Ycsb, YcsbMix};

/// Latencies of one kind of operation, in microseconds (recorded in nanoseconds, HDR
/// histogram with 3 significant digits).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Operations recorded.
    pub count: u64,
    pub mean_us: f64,
    pub min_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

impl LatencySummary {
    pub fn from_histogram(h: &Histogram<u64>) -> LatencySummary {
        if h.is_empty() {
            return LatencySummary::default();
        }
        let us = |ns: u64| ns as f64 / 1_000.0;
        LatencySummary {
            count: h.len(),
            // Whole nanoseconds: short decimals parse back exactly from the JSON.
            mean_us: h.mean().round() / 1_000.0,
            min_us: us(h.min()),
            p50_us: us(h.value_at_quantile(0.50)),
            p90_us: us(h.value_at_quantile(0.90)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            max_us: us(h.max()),
        }
    }
}

/// Latencies of all operations and per kind.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Latencies {
    pub all: LatencySummary,
    pub read: LatencySummary,
    pub write: LatencySummary,
}

/// Latencies per operation class (Kite §2.2: relaxed reads and writes, acquires, releases,
/// read-modify-writes).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassLatencies {
    pub relaxed_read: LatencySummary,
    pub acquire: LatencySummary,
    pub relaxed_write: LatencySummary,
    pub release: LatencySummary,
    pub rmw: LatencySummary,
}

impl ClassLatencies {
    pub fn rows(&self) -> [(&'static str, &LatencySummary); 5] {
        [
            ("rlx-rd", &self.relaxed_read),
            ("acq", &self.acquire),
            ("rlx-wr", &self.relaxed_write),
            ("rel", &self.release),
            ("rmw", &self.rmw),
        ]
    }
}

/// A YCSB workload's (`--ycsb`) operation mix and latencies per operation class.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct YcsbReport {
    pub workload: Ycsb,
    /// The resolved proportions (the preset, `--write-ratio` overriding its non-read share).
    pub mix: YcsbMix,
    /// The request distribution (`--dist`, else the preset's).
    pub distribution: Distribution,
    /// New keys written by inserts (whole run, warmup included).
    pub inserted_keys: u64,
    pub read: LatencySummary,
    pub update: LatencySummary,
    pub insert: LatencySummary,
    /// Read-modify-writes: from the read's submit to the write's completion.
    pub rmw: LatencySummary,
}

impl YcsbReport {
    pub fn rows(&self) -> [(&'static str, &LatencySummary); 4] {
        [
            ("read", &self.read),
            ("update", &self.update),
            ("insert", &self.insert),
            ("rmw", &self.rmw),
        ]
    }
}

/// What a data-structure workload (`--workload ts|msq|hml`) did, summed over the sessions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DsReport {
    /// `ts`, `msq` or `hml`.
    pub kind: String,
    pub fields: usize,
    pub structures: usize,
    /// Push-then-pop pairs completed in the window, and per second.
    pub pairs: u64,
    pub pairs_s: f64,
    /// Structure operations (2 per pair).
    pub structure_ops: u64,
    /// Store requests issued (every class, failed CAS included); the report's `ops`.
    pub requests: u64,
    pub relaxed_reads: u64,
    pub relaxed_writes: u64,
    pub acquires: u64,
    pub releases: u64,
    pub cas: u64,
    pub cas_local_fail: u64,
    pub cas_quorum_fail: u64,
    pub helps: u64,
    /// Share of requests that synchronize (acquires, releases, CAS): the paper's "sync-per".
    pub sync_share: f64,
    /// Requests per pair.
    pub requests_per_pair: f64,
}

/// `--table`: reads that triggered durability in the measured window (ORCA §8.2, Table 2's
/// last column), from the table's shard counters summed over every node (`durability.rs`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReadDurability {
    /// Reads the table's replicas served in the window (a forwarded read counts once).
    pub reads_served: u64,
    /// Of those, reads whose data was not yet durable at the leader, which made it durable
    /// before answering (ORCA §5.5.1, MakeDurable).
    pub reads_made_durable: u64,
    /// `100 * reads_made_durable / reads_served`, in [0, 100]; `None` when no read was served.
    pub pct: Option<f64>,
}

impl ReadDurability {
    pub fn new(reads_served: u64, reads_made_durable: u64) -> ReadDurability {
        // A read is counted as made durable when it starts waiting and as served when it is
        // answered: at the window's edges the two counts can differ by the reads in flight.
        let pct = (reads_served > 0)
            .then(|| (100.0 * reads_made_durable as f64 / reads_served as f64).min(100.0));
        ReadDurability { reads_served, reads_made_durable, pct }
    }
}

/// The result of one benchmark run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    /// `--label`, if given.
    pub label: Option<String>,
    /// `strata`, `redis`, `etcd` or `zookeeper`.
    pub target: crate::Target,
    /// Where the connections went.
    pub endpoints: Vec<SocketAddr>,
    /// The settings of the run.
    pub args: BenchArgs,
    /// Measured window, seconds (warmup excluded): `--duration`, or with `--ops` the time
    /// until the last measured operation completed.
    pub duration_s: f64,
    /// Operations that completed successfully in the window.
    pub ops: u64,
    pub reads: u64,
    pub writes: u64,
    /// Reads that found no value (preloaded keys should always be found).
    pub read_misses: u64,
    /// Failed operations, whole run (warmup included). Not in the latencies.
    pub errors: u64,
    /// The first few error messages.
    pub error_samples: Vec<String>,
    /// `ops / duration_s`.
    pub throughput_ops_s: f64,
    pub latency_us: Latencies,
    /// The operation mix (`--mode` and the `--*-pct` flags, resolved).
    #[serde(default)]
    pub mix: Mix,
    /// Latencies (and counts) per operation class.
    #[serde(default)]
    pub class_latency_us: ClassLatencies,
    /// `--ycsb`: the workload, its mix and latencies per YCSB operation class.
    #[serde(default)]
    pub ycsb: Option<YcsbReport>,
    /// `--timeline`: the CSV and PNG written.
    #[serde(default)]
    pub timeline_files: Vec<std::path::PathBuf>,
    /// `--workload ts|msq|hml`: the data-structure results (then `ops` counts requests and
    /// there are no latencies).
    #[serde(default)]
    pub ds: Option<DsReport>,
    /// `--table`: the reads that triggered durability (`None` if a node's status could not be
    /// read; the run says why on stderr).
    #[serde(default)]
    pub read_durability: Option<ReadDurability>,
    /// `--lease-renewals` / `--lease-creations`: the lease service's run (then `ops` counts
    /// granted renewals or creations, and `latency_us.all` is theirs).
    #[serde(default)]
    pub lease: Option<crate::lease::LeaseReport>,
    /// `--workload txn`: transactions committed and attempts aborted.
    #[serde(default)]
    pub txn: Option<crate::txn::TxnReport>,
    /// `--workload kairos`: the transactions by kind and the clients' caches (with `txn`).
    #[serde(default)]
    pub kairos: Option<crate::kairos::KairosReport>,
    /// Keys written before measuring, and how long that took.
    pub preloaded_keys: u64,
    pub preload_s: f64,
    /// Unix time (ms) at which measuring began.
    pub started_at_unix_ms: u64,
    /// Version of the benchmark tool.
    pub tool_version: String,
}

impl BenchReport {
    fn fmt_txn(
        &self,
        f: &mut fmt::Formatter<'_>,
        t: &crate::txn::TxnReport,
        dist: &str,
    ) -> fmt::Result {
        let a = &self.args;
        writeln!(
            f,
            "{} transactions @ {}: {} clients × {} sessions; {} objects each{} over {} keys ({dist})",
            self.target,
            self.endpoints.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(","),
            a.conn.clients,
            a.conn.sessions,
            t.objects,
            if t.spread { " in distinct shards" } else { "" },
            a.workload.keys(),
        )?;
        writeln!(
            f,
            "{:.0} committed/s   {} committed in {:.2} s   {} aborted attempts ({:.2} per commit)   errors {}",
            t.committed_s,
            t.committed,
            self.duration_s,
            t.aborted_attempts,
            t.aborted_attempts as f64 / t.committed.max(1) as f64,
            self.errors
        )?;
        writeln!(
            f,
            "{:<11} {:>10} {:>9} {:>9} {:>9} {:>9}",
            "µs", "count", "mean", "p50", "p99", "max"
        )?;
        for (name, l) in [("transaction", &self.latency_us.all), ("commit", &t.commit_us)] {
            writeln!(
                f,
                "{name:<11} {:>10} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
                l.count, l.mean_us, l.p50_us, l.p99_us, l.max_us
            )?;
        }
        if let Some(k) = &self.kairos {
            Self::fmt_kairos(f, k, a)?;
        }
        for e in &self.error_samples {
            writeln!(f, "error: {e}")?;
        }
        Ok(())
    }

    fn fmt_kairos(
        f: &mut fmt::Formatter<'_>,
        k: &crate::kairos::KairosReport,
        a: &BenchArgs,
    ) -> fmt::Result {
        let kk = &a.kairos;
        writeln!(
            f,
            "kairos: {}% read-only; committed {} read-only, {} read-write{}",
            kk.ro_pct,
            k.ro_committed,
            k.rw_committed,
            k.offered_rate.map_or(String::new(), |r| format!("; offered {r:.0} txn/s")),
        )?;
        write!(
            f,
            "cache {}: {} cacheable keys ({:.1}% of RO reads), {} entries per client ({:.1}% of RO reads)",
            k.cache,
            k.cacheable_keys,
            100.0 * k.cacheable_read_share,
            k.cache_capacity,
            100.0 * k.capacity_read_share
        )?;
        match (&k.cache_stats, k.hit_rate) {
            (Some(s), rate) => writeln!(
                f,
                "; {} hits, {} misses (hit rate {}), {} stale hits",
                s.hits,
                s.misses,
                rate.map_or("-".into(), |r| format!("{:.1}%", 100.0 * r)),
                s.stale_hits
            ),
            (None, _) => writeln!(f),
        }
    }
}

impl fmt::Display for BenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = &self.args;
        let dist = match a.dist() {
            Distribution::Uniform => "uniform".to_string(),
            d => format!("{d} θ={}", a.workload.zipf_theta),
        };
        if let Some(l) = &self.label {
            writeln!(f, "{l}")?;
        }
        if let Some(l) = &self.lease {
            return self.fmt_lease(f, l);
        }
        if let Some(t) = &self.txn {
            let dist = match &self.kairos {
                Some(_) => format!(
                    "zipfian {} for read-only, {} for read-write transactions",
                    a.kairos.read_zipf, a.kairos.write_zipf
                ),
                None => dist,
            };
            return self.fmt_txn(f, t, &dist);
        }
        writeln!(
            f,
            "{} @ {}: {} clients × {} sessions × pipeline {}; {} keys ({dist}), {} B keys, {} B values, {}% writes",
            self.target,
            self.endpoints.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(","),
            a.conn.clients,
            a.conn.sessions,
            a.conn.pipeline,
            a.workload.keys(),
            a.workload.key_size,
            a.workload.value_size,
            a.write_ratio()
        )?;
        if let Some(d) = &self.ds {
            writeln!(
                f,
                "workload {}-{} on {} structures: {:.0} pairs/s ({} pairs), {:.0} requests/s ({} requests in {:.2} s, {:.1} per pair)",
                d.kind, d.fields, d.structures, d.pairs_s, d.pairs, self.throughput_ops_s, d.requests, self.duration_s, d.requests_per_pair
            )?;
            writeln!(
                f,
                "sync share {:.3}: {} relaxed reads, {} relaxed writes, {} acquires, {} releases, {} CAS ({} failed locally, {} at a quorum), {} helps; errors {}",
                d.sync_share, d.relaxed_reads, d.relaxed_writes, d.acquires, d.releases, d.cas, d.cas_local_fail, d.cas_quorum_fail, d.helps, self.errors
            )?;
            for e in &self.error_samples {
                writeln!(f, "error: {e}")?;
            }
            return Ok(());
        }
        if self.mix.has_sync() {
            writeln!(
                f,
                "mode {:?}: {}% of reads acquires, {}% of writes releases, {}% of writes RMWs ({:?})",
                a.sync.mode, self.mix.acquire_pct, self.mix.release_pct, self.mix.rmw_pct, self.mix.rmw
            )?;
        }
        if let Some(y) = &self.ycsb {
            writeln!(
                f,
                "YCSB {}: {}% reads, {}% updates, {}% inserts, {}% read-modify-writes; {} keys inserted",
                y.workload, y.mix.read_pct, y.mix.update_pct, y.mix.insert_pct, y.mix.rmw_pct, y.inserted_keys
            )?;
        }
        writeln!(
            f,
            "{:.0} ops/s   {} ops in {:.2} s   errors {}   read misses {}",
            self.throughput_ops_s, self.ops, self.duration_s, self.errors, self.read_misses
        )?;
        if let Some(d) = &self.read_durability {
            let pct = d.pct.map_or("-".to_string(), |p| format!("{p:.2}%"));
            writeln!(
                f,
                "reads that triggered durability: {pct} ({} of {} reads served by the table's replicas)",
                d.reads_made_durable, d.reads_served
            )?;
        }
        writeln!(
            f,
            "{:<6} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "µs", "count", "mean", "p50", "p99", "p99.9", "max"
        )?;
        let mut rows = vec![
            ("all", &self.latency_us.all),
            ("read", &self.latency_us.read),
            ("write", &self.latency_us.write),
        ];
        if self.mix.has_sync() {
            rows.extend(self.class_latency_us.rows().into_iter().filter(|(_, l)| l.count > 0));
        }
        if let Some(y) = &self.ycsb {
            // YCSB's classes instead of reads and writes (an RMW is one of the writes).
            rows.truncate(1);
            rows.extend(y.rows());
        }
        for (name, l) in rows {
            latency_row(f, name, l)?;
        }
        for e in &self.error_samples {
            writeln!(f, "error: {e}")?;
        }
        for p in &self.timeline_files {
            writeln!(f, "timeline: {}", p.display())?;
        }
        Ok(())
    }
}

fn latency_row(f: &mut fmt::Formatter<'_>, name: &str, l: &LatencySummary) -> fmt::Result {
    if l.count == 0 {
        return writeln!(f, "{name:<6} {:>10}", 0);
    }
    writeln!(
        f,
        "{name:<6} {:>10} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
        l.count, l.mean_us, l.p50_us, l.p99_us, l.p999_us, l.max_us
    )
}

impl BenchReport {
    /// The report of a lease run (`--lease-renewals` / `--lease-creations`).
    fn fmt_lease(&self, f: &mut fmt::Formatter<'_>, l: &crate::lease::LeaseReport) -> fmt::Result {
        let a = &self.args;
        writeln!(
            f,
            "{} @ {}: lease {}, {} clients × {} sessions × pipeline {}",
            self.target,
            self.endpoints.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(","),
            l.kind,
            a.conn.clients,
            a.conn.sessions,
            a.conn.pipeline
        )?;
        let leader =
            l.service_leader.map_or("not among the endpoints".to_string(), |e| e.to_string());
        writeln!(
            f,
            "__leases leader {leader}; {} of {} clients forwarded; {} leases held; {} rejected (retried); {} new ids",
            l.forwarded_clients, a.conn.clients, l.leases, l.rejected, l.new_ids
        )?;
        writeln!(
            f,
            "{:.0} {}/s   {} in {:.2} s   errors {}",
            self.throughput_ops_s, l.kind, self.ops, self.duration_s, self.errors
        )?;
        writeln!(
            f,
            "{:<6} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "µs", "count", "mean", "p50", "p99", "p99.9", "max"
        )?;
        latency_row(
            f,
            if l.kind == "creations" { "create" } else { "renew" },
            &self.latency_us.all,
        )?;
        for e in &self.error_samples {
            writeln!(f, "error: {e}")?;
        }
        Ok(())
    }
}
