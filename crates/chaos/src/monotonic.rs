//! The fault-injection harness of orca.md §7 (the paper's §5.3) over real node processes.
//!
//! A run is a number of *sequences*; each sequence writes one fresh key and walks the cluster
//! through `states` random states, then heals:
//!
//! * every state crashes, restarts and slows nodes as [`crate::schedule`] draws: SIGKILLs of
//!   a minority or of every node, and one *lagging* node with 0.2–2 s of extra delay on every
//!   link into and out of it (the transport's fault layer);
//! * in every configuration's table at once: the next version of the key is inserted through
//!   the leader, read at every running non-lagging node (in random order), then read at the
//!   lagging node;
//! * after the last state, every node is restarted, faults cleared, and the key read at every
//!   node once more.
//!
//! A sequence is *non-monotonic* in a configuration when some read returned an older version
//! than a read that had completed before it was invoked ([`crate::check`]). Reads are single
//! attempts at the chosen node ([`strata_client::Table::try_get_at`]) by handles that never
//! write (no session token): a refusal (`NotInActiveSet`, a time-out, ...) is counted, not
//! retried elsewhere. Leader-only tables are read through the client's leader routing.
//!
//! The fault choices are drawn from the seed; timing is the machine's, so two runs with the
//! same seed make the same choices but need not observe the same reads.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;
use strata_client::{Client, ClientError, ClientOptions, LogFailure, LogRead, Table, TableReads};

use crate::check::{first_non_monotonic, freshness, FreshnessCounts, Observed};
use crate::configs::TableConfig;
use crate::procs::ProcessCluster;
use crate::schedule::{FaultTotals, Schedule};

#[derive(Clone, Debug)]
pub struct HarnessOptions {
    pub sequences: usize,
    /// Cluster states per sequence.
    pub states: usize,
    pub seed: u64,
    pub configs: Vec<TableConfig>,
    /// Extra one-way delay of the lagging node's links, drawn in `[min, max]` ms.
    pub lag_ms: (u64, u64),
}

/// One configuration's totals over the run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ConfigResult {
    pub name: String,
    pub about: String,
    pub sequences: u64,
    /// Sequences with at least one non-monotonic read.
    pub non_monotonic: u64,
    pub writes_acked: u64,
    /// Writes whose call failed: outcome unknown.
    pub writes_unknown: u64,
    pub reads_served: u64,
    /// Reads refused or failed, by reason.
    pub reads_refused: BTreeMap<String, u64>,
    pub lagging_reads: u64,
    pub lagging_refused: u64,
    /// Sequences where the lagging node refused at least one read.
    pub sequences_lagging_refused: u64,
    /// The first non-monotonic pair seen, for the record.
    pub first_violation: Option<String>,
    /// Every served read of a known version, classified against the reads before it and the
    /// writes acknowledged before it (the case studies' classes, §8.2).
    pub freshness: FreshnessCounts,
    /// Sequences where a configuration that promises linearizable reads (sync durability,
    /// leader reads) returned less than an acknowledged write: a lost or invisible write.
    pub stale_sequences: u64,
}

impl ConfigResult {
    /// Adds another cluster's result of the same configuration.
    fn add(&mut self, o: &ConfigResult) {
        self.sequences += o.sequences;
        self.non_monotonic += o.non_monotonic;
        self.writes_acked += o.writes_acked;
        self.writes_unknown += o.writes_unknown;
        self.reads_served += o.reads_served;
        for (k, v) in &o.reads_refused {
            *self.reads_refused.entry(k.clone()).or_default() += v;
        }
        self.lagging_reads += o.lagging_reads;
        self.lagging_refused += o.lagging_refused;
        self.sequences_lagging_refused += o.sequences_lagging_refused;
        if self.first_violation.is_none() {
            self.first_violation.clone_from(&o.first_violation);
        }
        self.freshness.merge(&o.freshness);
        self.stale_sequences += o.stale_sequences;
    }

    pub fn non_monotonic_pct(&self) -> f64 {
        pct(self.non_monotonic, self.sequences)
    }
}

pub fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub sequences: usize,
    pub states: usize,
    pub seed: u64,
    /// Clusters run at once (cluster `c` drew its faults from `seed + c`).
    pub clusters: usize,
    /// Nodes per cluster.
    pub nodes: usize,
    pub elapsed_s: f64,
    pub faults: FaultTotals,
    pub configs: Vec<ConfigResult>,
}

/// What the harness reports after each sequence.
pub struct Progress<'a> {
    pub done: usize,
    pub total: usize,
    pub elapsed: Duration,
    pub configs: &'a [ConfigResult],
}

/// One configuration's table, its handles, and the current sequence's observations.
struct ConfigRun {
    cfg: TableConfig,
    writer: Table,
    /// `readers[i]` reads at node `i`; it never writes, so it carries no session token.
    readers: Vec<Table>,
    reads: Vec<Observed>,
    /// `(acknowledged at, version)` of this sequence's acknowledged writes.
    acked: Vec<(Instant, u64)>,
    unknown: BTreeSet<u64>,
    lagging_refused: bool,
    result: ConfigResult,
}

/// The reads of one state, the same for every configuration.
struct Round<'a> {
    key: &'a Bytes,
    /// The version to insert first, if any.
    write: Option<u64>,
    /// Non-lagging nodes, in reading order.
    order: &'a [usize],
    lagging: Option<usize>,
    state: usize,
}

impl ConfigRun {
    async fn round(&mut self, r: &Round<'_>) {
        if let Some(v) = r.write {
            match self.writer.put(r.key.clone(), v.to_string()).await {
                Ok(_) => {
                    self.result.writes_acked += 1;
                    self.acked.push((Instant::now(), v));
                }
                Err(_) => {
                    self.result.writes_unknown += 1;
                    self.unknown.insert(v);
                }
            }
        }
        for &i in r.order {
            self.read_at(r.key, i, false, r.state).await;
        }
        if let Some(l) = r.lagging {
            self.read_at(r.key, l, true, r.state).await;
        }
    }

    async fn read_at(&mut self, key: &Bytes, node: usize, lagging: bool, state: usize) {
        let invoked = Instant::now();
        let reader = &mut self.readers[node];
        let outcome = if self.cfg.reads == TableReads::Leader {
            reader.get_at(key.clone(), node).await.map(Ok)
        } else {
            reader.try_get_at(key.clone(), node).await
        };
        let completed = Instant::now();
        self.result.lagging_reads += u64::from(lagging);
        match outcome {
            Ok(Ok(read)) => {
                self.result.reads_served += 1;
                self.reads.push(Observed {
                    version: version_of(&read),
                    invoked,
                    completed,
                    node,
                    state,
                    lagging,
                });
            }
            refused => {
                *self.result.reads_refused.entry(refusal(&refused)).or_default() += 1;
                if lagging {
                    self.result.lagging_refused += 1;
                    self.lagging_refused = true;
                }
            }
        }
    }

    /// Checks the sequence just finished and starts the next one.
    fn end_sequence(&mut self) {
        self.result.sequences += 1;
        if let Some(v) = first_non_monotonic(&self.reads, &self.unknown) {
            self.result.non_monotonic += 1;
            self.result
                .first_violation
                .get_or_insert_with(|| format!("sequence {}: {v}", self.result.sequences));
        }
        self.result.sequences_lagging_refused += u64::from(self.lagging_refused);
        let classes = freshness(&self.reads, &self.acked, &self.unknown);
        self.result.freshness.merge(&classes);
        if self.cfg.promises_linearizable_reads() && classes.latest < classes.total() {
            self.result.stale_sequences += 1;
        }
        self.reads.clear();
        self.acked.clear();
        self.unknown.clear();
        self.lagging_refused = false;
    }
}

/// The version a read returned: the writer's number in the value, 0 when absent.
fn version_of(read: &LogRead) -> u64 {
    read.value
        .as_deref()
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn refusal(outcome: &Result<Result<LogRead, LogFailure>, ClientError>) -> String {
    match outcome {
        Ok(Ok(_)) => unreachable!("a served read is not a refusal"),
        Ok(Err(LogFailure::NotLeader { .. })) => "not leader".into(),
        Ok(Err(LogFailure::NotInActiveSet)) => "not in active set".into(),
        Ok(Err(LogFailure::Timeout)) => "timed out at the node".into(),
        Ok(Err(LogFailure::Unavailable)) => "no leader yet".into(),
        Ok(Err(LogFailure::Invalid(m))) => format!("invalid: {m}"),
        Ok(Err(LogFailure::Moved { replicas })) => format!("moved to {replicas:?}"),
        Ok(Err(LogFailure::Locked)) => "locked by a transaction".into(),
        Err(ClientError::TimedOut(_)) => "client time-out".into(),
        Err(ClientError::TableUnavailable { .. }) => "client gave up".into(),
        Err(ClientError::Unreachable { .. } | ClientError::ConnectionLost { .. }) => {
            "connection".into()
        }
        Err(e) => format!("error: {e}"),
    }
}

/// Creates every configuration's table on every node and opens the handles.
async fn open_runs(
    cluster: &ProcessCluster,
    configs: &[TableConfig],
    prefix: &str,
) -> Result<Vec<ConfigRun>, ClientError> {
    let endpoints = cluster.endpoints();
    let write_opts = ClientOptions {
        request_timeout: Some(Duration::from_secs(10)),
        ..ClientOptions::default()
    };
    // A read waits at most the node's read time-out (2 s) for durability; then it is refused.
    let read_opts =
        ClientOptions { request_timeout: Some(Duration::from_secs(3)), ..ClientOptions::default() };
    let mut runs = Vec::new();
    for cfg in configs {
        let def = cfg.table(prefix);
        for &addr in &endpoints {
            Client::connect_node(addr, write_opts.clone()).await?.create_table(def.clone()).await?;
        }
        let writer =
            Client::connect(&endpoints, write_opts.clone()).await?.table(&def.name).await?;
        let reader_client = Client::connect(&endpoints, read_opts.clone()).await?;
        let mut readers = Vec::new();
        for _ in 0..endpoints.len() {
            readers.push(reader_client.table(&def.name).await?);
        }
        runs.push(ConfigRun {
            cfg: *cfg,
            writer,
            readers,
            reads: Vec::new(),
            acked: Vec::new(),
            unknown: BTreeSet::new(),
            lagging_refused: false,
            result: ConfigResult {
                name: cfg.name.into(),
                about: cfg.about.into(),
                ..ConfigResult::default()
            },
        });
    }
    Ok(runs)
}

/// Runs the harness on `clusters` at once (each with all nodes running), splitting the
/// sequences between them: cluster `c` runs its own tables and draws its faults from
/// `seed + c`. Calls `progress` with the totals so far after every sequence of any cluster.
pub async fn run(
    clusters: &mut [ProcessCluster],
    opts: &HarnessOptions,
    progress: impl FnMut(&Progress<'_>),
) -> Result<Report, String> {
    let started = Instant::now();
    let k = clusters.len().max(1);
    let shared = RefCell::new(Totals { per_cluster: vec![Vec::new(); k], done: 0, progress });
    let shares = (0..k).map(|c| opts.sequences / k + usize::from(c < opts.sequences % k));
    let runs = clusters.iter_mut().zip(shares).enumerate().map(|(c, (cluster, sequences))| {
        run_cluster(cluster, c, sequences, opts, started, &shared)
    });
    let faults = futures::future::try_join_all(runs).await?;
    let per_cluster = shared.into_inner().per_cluster;
    Ok(Report {
        sequences: opts.sequences,
        states: opts.states,
        seed: opts.seed,
        clusters: k,
        nodes: clusters.first().map_or(0, ProcessCluster::len),
        elapsed_s: started.elapsed().as_secs_f64(),
        faults: faults.iter().fold(FaultTotals::default(), |a, b| a.plus(b)),
        configs: merged(&per_cluster),
    })
}

/// Every cluster's results so far, and the caller's progress callback.
struct Totals<F> {
    per_cluster: Vec<Vec<ConfigResult>>,
    done: usize,
    progress: F,
}

/// Sums the clusters' results per configuration.
fn merged(per_cluster: &[Vec<ConfigResult>]) -> Vec<ConfigResult> {
    let mut total: Vec<ConfigResult> = Vec::new();
    for results in per_cluster {
        if total.is_empty() {
            total = results.clone();
        } else {
            total.iter_mut().zip(results).for_each(|(t, r)| t.add(r));
        }
    }
    total
}

/// One cluster's share of the sequences.
async fn run_cluster<F: FnMut(&Progress<'_>)>(
    cluster: &mut ProcessCluster,
    c: usize,
    sequences: usize,
    opts: &HarnessOptions,
    started: Instant,
    shared: &RefCell<Totals<F>>,
) -> Result<FaultTotals, String> {
    let seed = opts.seed + c as u64;
    let prefix = format!("mono{seed}_");
    let mut runs = open_runs(cluster, &opts.configs, &prefix)
        .await
        .map_err(|e| format!("cannot create the tables: {e}"))?;
    let mut schedule = Schedule::new(seed, opts.lag_ms);
    for s in 0..sequences {
        let key = Bytes::from(format!("seq-{s}"));
        for state in 0..opts.states {
            let now = schedule.next(cluster).await?;
            let round = Round {
                key: &key,
                write: Some(state as u64 + 1),
                order: &now.others,
                lagging: now.lagging,
                state,
            };
            futures::future::join_all(runs.iter_mut().map(|r| r.round(&round))).await;
        }
        let all = schedule.healed(cluster).await?;
        let round =
            Round { key: &key, write: None, order: &all, lagging: None, state: opts.states };
        futures::future::join_all(runs.iter_mut().map(|r| r.round(&round))).await;
        runs.iter_mut().for_each(ConfigRun::end_sequence);
        let mut totals = shared.borrow_mut();
        totals.per_cluster[c] = runs.iter().map(|r| r.result.clone()).collect();
        totals.done += 1;
        let configs = merged(&totals.per_cluster);
        let p = Progress {
            done: totals.done,
            total: opts.sequences,
            elapsed: started.elapsed(),
            configs: &configs,
        };
        (totals.progress)(&p);
    }
    Ok(schedule.totals)
}
