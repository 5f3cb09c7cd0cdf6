//! `strata chaos`: fault harnesses over real node processes that this command starts itself
//! (SIGKILL, restart, lagging links), checking what clients observe. See crates/chaos and
//! docs/faults.md.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use strata_chaos::cases::{self, App, CaseOptions, CaseReport};
use strata_chaos::check::FreshnessCounts;
use strata_chaos::monotonic::{self, pct, HarnessOptions, Progress, Report};
use strata_chaos::{ProcessCluster, TableConfig, CONFIGS};

use crate::exit::{self, Failure};

#[derive(Subcommand, Debug)]
pub enum ChaosCommand {
    /// ORCA's fault-injection harness (orca.md §7): random sequences of crashes, restarts and
    /// a lagging node over 5 node processes; every state inserts through the leader, reads at
    /// the other nodes, then at the lagging one; reports the share of sequences with a
    /// non-monotonic read per table configuration. Exit 1 if a configuration that promises
    /// monotonic reads (orca, orca-sr, strong) showed one, or strong returned less than an
    /// acknowledged write.
    Monotonic {
        /// Number of sequences (the spec asks for at least 500).
        #[arg(long, default_value_t = 500)]
        sequences: usize,
        /// Cluster states per sequence.
        #[arg(long, default_value_t = 3)]
        states: usize,
        /// Clusters to run at once, each with its own nodes and a share of the sequences
        /// (cluster c draws its faults from seed + c). The harness mostly waits on timers
        /// (elections, leases, lagging links), so clusters in parallel finish sooner.
        #[arg(long, default_value_t = 1)]
        clusters: usize,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// The paper's case studies under the same faults: location tracking or a Retwis-like
    /// timeline; reports the share of inconsistent / consistent-old / latest reads per table
    /// configuration. Exit 1 if orca, orca-sr or strong served an inconsistent read, or a
    /// timeline naming a post of its own epoch that then read as absent. (A post of an
    /// earlier epoch is counted, not a broken promise: async and cad durability may lose a
    /// write nobody read in a leader change, ORCA G5.)
    Case {
        #[arg(value_enum)]
        app: AppArg,
        /// Cluster states (then one healed state).
        #[arg(long, default_value_t = 40)]
        states: usize,
        /// How long each state lasts, ms.
        #[arg(long, default_value_t = 2000)]
        state_ms: u64,
        /// Users (locations, or timelines).
        #[arg(long, default_value_t = 8)]
        users: u64,
        /// Reading clients per configuration (each configuration also has one writer).
        #[arg(long, default_value_t = 4)]
        readers: usize,
        #[command(flatten)]
        common: CommonArgs,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum AppArg {
    Location,
    Retwis,
}

/// The cluster, the faults and the output, for every harness.
#[derive(Args, Debug)]
pub struct CommonArgs {
    /// Seed of the fault choices (and the clients' choices).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Configurations to run side by side, comma-separated.
    #[arg(long, default_value = "orca,orca-sr,strong,weak,weak-sr,sync-all")]
    configs: String,
    /// Lagging node's extra one-way link delay, ms: MIN-MAX.
    #[arg(long, default_value = "200-2000", value_parser = parse_range)]
    lag_ms: (u64, u64),
    /// Node processes (a majority must stay up: at most 2 are killed at once).
    #[arg(long, default_value_t = 5)]
    nodes: usize,
    /// Where the nodes keep their data (on disk, so fsync costs what it costs); default: a
    /// fresh directory under the system's temporary directory, removed after a clean run.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// First port: nodes listen on BASE+i (clients) and BASE+100+i (peers); default: free.
    #[arg(long)]
    base_port: Option<u16>,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let (lo, hi) = s.split_once('-').ok_or("expected MIN-MAX, e.g. 200-2000")?;
    let lo: u64 = lo.trim().parse().map_err(|e| format!("{e}"))?;
    let hi: u64 = hi.trim().parse().map_err(|e| format!("{e}"))?;
    if lo > hi {
        return Err(format!("{lo} > {hi}"));
    }
    Ok((lo, hi))
}

pub fn run(command: ChaosCommand) -> Result<i32, Failure> {
    match command {
        ChaosCommand::Monotonic { sequences, states, clusters, common } => {
            if sequences == 0 || states == 0 || clusters == 0 || clusters > sequences {
                return Err(Failure::new(
                    exit::USAGE,
                    "need at least one sequence and one state, and 1 to SEQUENCES clusters",
                ));
            }
            let every = (sequences / 50).max(1);
            with_clusters(&common, clusters, |cluster, configs, rt| {
                let opts = HarnessOptions {
                    sequences,
                    states,
                    seed: common.seed,
                    configs,
                    lag_ms: common.lag_ms,
                };
                let report = rt.block_on(monotonic::run(cluster, &opts, |p| {
                    if p.done % every == 0 || p.done == p.total {
                        eprintln!("{}", progress_line(p));
                    }
                }))?;
                print!("{}", render_monotonic(&report));
                let broken = report
                    .configs
                    .iter()
                    .filter(|c| (c.non_monotonic > 0 && promises(&c.name)) || c.stale_sequences > 0)
                    .map(|c| c.name.clone())
                    .collect();
                Ok((serde_json::to_value(&report).expect("the report serializes"), broken))
            })
        }
        ChaosCommand::Case { app, states, state_ms, users, readers, common } => {
            if readers == 0 || users <= 3 {
                return Err(Failure::new(exit::USAGE, "need at least one reader and 4 users"));
            }
            let app = match app {
                AppArg::Location => App::Location,
                AppArg::Retwis => App::Retwis,
            };
            with_clusters(&common, 1, |clusters, configs, rt| {
                let opts = CaseOptions {
                    app,
                    states,
                    state: Duration::from_millis(state_ms),
                    seed: common.seed,
                    configs,
                    lag_ms: common.lag_ms,
                    users,
                    readers,
                };
                let report = rt.block_on(cases::run(&mut clusters[0], &opts, |done, total| {
                    eprintln!("[{done:>3}/{total}] states done");
                }))?;
                print!("{}", render_case(&report));
                let broken = report
                    .configs
                    .iter()
                    .filter(|c| {
                        (c.freshness.inconsistent + c.missing_same_epoch) > 0 && promises(&c.name)
                    })
                    .map(|c| c.name.clone())
                    .collect();
                Ok((serde_json::to_value(&report).expect("the report serializes"), broken))
            })
        }
    }
}

/// The JSON report, and the configurations that broke a promise.
type Outcome = Result<(serde_json::Value, Vec<String>), String>;

/// Starts `k` clusters (cluster `c`'s data in `<data-dir>/cluster<c>`), runs `harness`,
/// writes the JSON, removes a temporary data directory after a clean run, and turns broken
/// promises into exit 1.
fn with_clusters(
    common: &CommonArgs,
    k: usize,
    harness: impl FnOnce(&mut [ProcessCluster], Vec<TableConfig>, &tokio::runtime::Runtime) -> Outcome,
) -> Result<i32, Failure> {
    let configs =
        TableConfig::parse_list(&common.configs).map_err(|e| Failure::new(exit::USAGE, e))?;
    if configs.is_empty() || common.nodes < 3 {
        return Err(Failure::new(exit::USAGE, "need at least one configuration and 3 nodes"));
    }
    let strata = std::env::current_exe()
        .map_err(|e| Failure::new(exit::FAILED, format!("cannot find the strata binary: {e}")))?;
    let (dir, temporary) = match &common.data_dir {
        Some(d) => (d.clone(), false),
        None => (std::env::temp_dir().join(format!("strata-chaos-{}", std::process::id())), true),
    };
    eprintln!(
        "strata chaos: {k} x {} nodes (data in {}), seed {}, lagging links +{}-{} ms, configurations: {}",
        common.nodes,
        dir.display(),
        common.seed,
        common.lag_ms.0,
        common.lag_ms.1,
        configs.iter().map(|c| c.name).collect::<Vec<_>>().join(", ")
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::new(exit::FAILED, format!("cannot start the runtime: {e}")))?;
    let mut clusters = Vec::new();
    for c in 0..k {
        let base = match common.base_port {
            Some(b) => b + 200 * c as u16,
            None => strata_chaos::procs::free_base_port(common.nodes as u16).ok_or_else(|| {
                Failure::new(exit::FAILED, "no free port range found; pass --base-port")
            })?,
        };
        let cluster = rt
            .block_on(ProcessCluster::start(
                &strata,
                &dir.join(format!("cluster{c}")),
                common.nodes,
                base,
            ))
            .map_err(|e| Failure::new(exit::FAILED, format!("cannot start the nodes: {e}")))?;
        clusters.push(cluster);
    }
    let (json, broken) = harness(&mut clusters, configs, &rt)
        .map_err(|e| Failure::new(exit::FAILED, format!("{e} (node logs in {})", dir.display())))?;
    drop(clusters);
    if let Some(path) = &common.json {
        let text = serde_json::to_string_pretty(&json).expect("JSON values serialize");
        std::fs::write(path, text + "\n").map_err(|e| {
            Failure::new(exit::FAILED, format!("cannot write {}: {e}", path.display()))
        })?;
    }
    if !broken.is_empty() {
        return Err(Failure::new(
            exit::FAILED,
            format!(
                "broken promises in {} (node logs kept in {})",
                broken.join(", "),
                dir.display()
            ),
        ));
    }
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(exit::OK)
}

/// Whether configuration `name` promises cross-client monotonic reads.
fn promises(name: &str) -> bool {
    CONFIGS.iter().any(|c| c.name == name && c.promises_monotonic_reads())
}

fn progress_line(p: &Progress<'_>) -> String {
    let per: Vec<String> =
        p.configs.iter().map(|c| format!("{} {}", c.name, c.non_monotonic)).collect();
    format!(
        "[{:>4}/{} {:>5.0}s] non-monotonic sequences: {}",
        p.done,
        p.total,
        p.elapsed.as_secs_f64(),
        per.join(", ")
    )
}

/// `inconsistent / old / latest` as percentages of the classified reads.
fn classes(f: &FreshnessCounts) -> String {
    let t = f.total();
    format!(
        "{:>5.1} /{:>5.1} /{:>5.1}",
        pct(f.inconsistent, t),
        pct(f.consistent_old, t),
        pct(f.latest, t)
    )
}

fn render_monotonic(r: &Report) -> String {
    let mut out = format!(
        "{} sequences x {} states on {} clusters of {} nodes, seed {}, {:.0} s ({} SIGKILLs, {} of all nodes at once)\n\n",
        r.sequences, r.states, r.clusters, r.nodes, r.seed, r.elapsed_s, r.faults.kills, r.faults.whole_cluster_crashes
    );
    out += &format!(
        "{:<9} {:>15} {:>8} {:>7} {:>8} {:>16} {:>20}  refusals\n",
        "config",
        "non-monotonic",
        "reads",
        "writes",
        "unknown",
        "lagging refused",
        "incons/old/latest %"
    );
    for c in &r.configs {
        let refusals: Vec<String> =
            c.reads_refused.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        out += &format!(
            "{:<9} {:>7} {:>6.1}% {:>8} {:>7} {:>8} {:>6} ({:>5.1}%) {:>20}  {}\n",
            c.name,
            c.non_monotonic,
            c.non_monotonic_pct(),
            c.reads_served,
            c.writes_acked,
            c.writes_unknown,
            c.sequences_lagging_refused,
            pct(c.sequences_lagging_refused, c.sequences),
            classes(&c.freshness),
            refusals.join(", ")
        );
    }
    for c in r.configs.iter().filter(|c| c.stale_sequences > 0) {
        out += &format!(
            "{}: {} sequences returned less than an acknowledged write\n",
            c.name, c.stale_sequences
        );
    }
    for c in r.configs.iter().filter(|c| c.first_violation.is_some()) {
        out += &format!(
            "first violation in {}: {}\n",
            c.name,
            c.first_violation.as_deref().unwrap_or("")
        );
    }
    out
}

fn render_case(r: &CaseReport) -> String {
    let app = serde_json::to_value(r.app)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default();
    let mut out = format!(
        "{app}: {} states of {} ms over {} nodes, seed {}, {:.0} s ({} SIGKILLs, {} of all nodes at once)\n\n",
        r.states, r.state_ms, r.nodes, r.seed, r.elapsed_s, r.faults.kills, r.faults.whole_cluster_crashes
    );
    out += &format!(
        "{:<9} {:>20} {:>10} {:>10} {:>12} {:>12} {:>8} {:>8} {:>11}\n",
        "config",
        "incons/old/latest %",
        "app reads",
        "app writes",
        "store reads",
        "store writes",
        "failed",
        "missing",
        "same epoch"
    );
    for c in &r.configs {
        out += &format!(
            "{:<9} {:>20} {:>10} {:>10} {:>12} {:>12} {:>8} {:>8} {:>11}\n",
            c.name,
            classes(&c.freshness),
            c.app_reads,
            c.app_writes,
            c.store_reads,
            c.store_writes,
            c.reads_failed + c.writes_unknown,
            c.missing_posts,
            c.missing_same_epoch
        );
    }
    for c in r.configs.iter().filter(|c| c.first_missing.is_some()) {
        out += &format!(
            "first missing post in {}: {}\n",
            c.name,
            c.first_missing.as_deref().unwrap_or("")
        );
    }
    out
}
