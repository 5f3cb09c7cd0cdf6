//! What a run measured, as JSON (serde) and as a small human table (`Display`).

use std::fmt;
use std::net::SocketAddr;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::args::{BenchArgs, Distribution};

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
            mean_us: h.mean() / 1_000.0,
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

/// The result of one benchmark run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    /// `--label`, if given.
    pub label: Option<String>,
    /// `strata` or `redis`.
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
    /// Keys written before measuring, and how long that took.
    pub preloaded_keys: u64,
    pub preload_s: f64,
    /// Unix time (ms) at which measuring began.
    pub started_at_unix_ms: u64,
    /// Version of the benchmark tool.
    pub tool_version: String,
}

impl fmt::Display for BenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = &self.args;
        let dist = match a.dist {
            Distribution::Uniform => "uniform".to_string(),
            Distribution::Zipfian => format!("zipfian θ={}", a.zipf_theta),
        };
        if let Some(l) = &self.label {
            writeln!(f, "{l}")?;
        }
        writeln!(
            f,
            "{} @ {}: {} clients × {} sessions × pipeline {}; {} keys ({dist}), {} B keys, {} B values, {}% writes",
            self.target,
            self.endpoints.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(","),
            a.clients,
            a.sessions,
            a.pipeline,
            a.keys,
            a.key_size,
            a.value_size,
            a.write_ratio
        )?;
        writeln!(
            f,
            "{:.0} ops/s   {} ops in {:.2} s   errors {}   read misses {}",
            self.throughput_ops_s, self.ops, self.duration_s, self.errors, self.read_misses
        )?;
        writeln!(f, "{:<6} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}", "µs", "count", "mean", "p50", "p99", "p99.9", "max")?;
        for (name, l) in
            [("all", &self.latency_us.all), ("read", &self.latency_us.read), ("write", &self.latency_us.write)]
        {
            if l.count == 0 {
                writeln!(f, "{name:<6} {:>10}", 0)?;
                continue;
            }
            writeln!(
                f,
                "{name:<6} {:>10} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
                l.count, l.mean_us, l.p50_us, l.p99_us, l.p999_us, l.max_us
            )?;
        }
        for e in &self.error_samples {
            writeln!(f, "error: {e}")?;
        }
        Ok(())
    }
}
