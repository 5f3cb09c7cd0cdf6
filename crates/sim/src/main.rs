//! `strata-sim`: run one seeded swarm run, or a sweep of seeds, and exit non-zero on a
//! violation.
//!
//! ```text
//! cargo run -p strata-sim -- --seed 7
//! cargo run -p strata-sim -- --seeds 0..100
//! cargo run -p strata-sim -- --count 1000 --start 5000
//! cargo run -p strata-sim -- --seed 7 --canary apply-older-writes
//! cargo run -p strata-sim -- --count 100 --canary skip-slow-release
//! cargo run -p strata-sim -- --engine log --mode orca --seed 7
//! cargo run -p strata-sim -- --engine log --mode weak --count 500
//! cargo run -p strata-sim -- --engine log --mode orca --count 50 --log-canary skip-durability-check
//! cargo run -p strata-sim -- --engine host --seed 7
//! cargo run -p strata-sim -- --engine host --count 200
//! cargo run -p strata-sim -- --engine txn --count 300
//! cargo run -p strata-sim -- --engine txn --txn-mode kairos-sharded:3 --cache ideal --count 100
//! cargo run -p strata-sim -- --engine txn --txn-mode kairos --strict-eps 20 --seed 1001
//! ```
//!
//! `--engine host` runs the whole server (`strata_sim::host`: `strata-host` cores with their
//! log shards, lease service, shard moves and catalog over simulated disks) under the seed's
//! crashes, loss, a lease-expiring pause and a shard move, and checks what the clients saw.
//!
//! `--engine log` runs the ORCA fault-injection harness of orca.md §7 (`strata_sim::orca`) in
//! one `--mode`: `orca`, `orca-sync-repl`, `cad`, `strong`, `weak`, `weak-sync-repl`,
//! `sync-all`. The weak modes are expected to fail (§7.15): a sweep reports how many seeds
//! showed non-monotonic reads.
//!
//! Canaries: `apply-older-writes`, `skip-slow-release`, `accept-without-quorum`,
//! `no-acquire-obligation`, and one per state invariant of Kite §7 inv. 14 - 17:
//! `slow-release-before-quorum`, `reset-without-owner`, `clear-self-delinquent-without-bump`,
//! `commit-without-registering`, and RIFL's `ignore-completion-records` (every retry executes
//! again; caught by `check::rifl`) (`strata_rc::PlantedBug`); a canary may bias the seed's knobs
//! towards what its bug needs, and the report shows how.

use std::ops::Range;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{ArgGroup, Parser};
use strata_log::LogEvent;
use strata_sim::orca::{log_canary, run_orca, HarnessOptions, Mode};
use strata_sim::{run_seed, Canary, RunOptions};

#[derive(Parser, Debug)]
#[command(
    name = "strata-sim",
    about = "Deterministic swarm simulation of Strata's rc engine (relaxed, release/acquire and RMW operations) and log engine (ORCA, --engine log), with history checkers"
)]
#[command(group(ArgGroup::new("which").required(true).args(["seed", "seeds", "count"])))]
struct Args {
    /// Run this one seed and print its knobs, summary and first violations.
    #[arg(long)]
    seed: Option<u64>,
    /// Run a range of seeds: `A..B` (B excluded) or `A..=B`.
    #[arg(long, value_parser = parse_range)]
    seeds: Option<Range<u64>>,
    /// Run this many seeds, from `--start`.
    #[arg(long)]
    count: Option<u64>,
    #[arg(long, default_value_t = 0, requires = "count")]
    start: u64,
    /// Plant a bug in every replica: the checkers must catch it (e.g. `skip-slow-release`; an
    /// unknown name lists every canary).
    #[arg(long)]
    canary: Option<Canary>,
    /// Also count divergence caused by a crashed node's partially delivered write (which the
    /// Eventual Store does not repair, Kite §1.2) as a violation.
    #[arg(long)]
    strict_convergence: bool,
    /// Also count a plain write, delete or release that a RIFL retry executed a second time
    /// (a gap of the rc engine, shown as a note otherwise) as a violation.
    #[arg(long)]
    strict_rifl: bool,
    /// Which engine to simulate: `rc` (Kite, the default), `log` (ORCA), `host` (the whole
    /// server: log shards, leases, shard moves, catalog) or `txn` (transactions on whole
    /// hosts: RIFL's two-phase commit and its recovery; `--log-canary txn-…` plants a bug).
    #[arg(long, default_value = "rc", value_parser = ["rc", "log", "host", "txn"])]
    engine: String,
    /// Log engine: the configuration (orca, orca-sync-repl, cad, strong, weak, weak-sync-repl,
    /// sync-all).
    #[arg(long, default_value = "orca")]
    mode: Mode,
    /// Log engine: cluster states per run.
    #[arg(long, default_value_t = 12)]
    states: usize,
    /// Log and txn engines: plant a bug of `strata-log` (skip-durability-check,
    /// skip-follower-durability-check, serve-outside-active-set, lease-anchored-at-receipt,
    /// no-dedup, skip-leader-dedup; txn-skip-version-check, txn-abort-without-record,
    /// txn-expire-ignores-locks, txn-reads-ignore-locks).
    #[arg(long, value_parser = log_canary)]
    log_canary: Option<strata_log::PlantedBug>,
    /// Txn engine: the table's concurrency control, `rifl`, `kairos` (validated in its
    /// shards) or `kairos-sharded:V` (V validator shards); Kairos canaries: kairos-….
    #[arg(long, default_value = "rifl", value_parser = parse_txn_mode)]
    txn_mode: strata_sim::txn::TxnMode,
    /// Txn engine, Kairos modes: the clients cache what their transactions read, with leases
    /// of this policy (naive, ideal, static:X, mean, fixed:MS; `ei` needs the leaders'
    /// invalidation pushes, which the harness's clients do not take).
    #[arg(long, value_parser = parse_cache)]
    cache: Option<strata_kairos::LeasePolicy>,
    /// Txn engine, Kairos modes: strict mode (K5) with this `eps` in milliseconds, the
    /// clients' clocks within `eps` of each other so that real-time order is checked.
    #[arg(long, value_name = "MS", value_parser = parse_eps)]
    strict_eps: Option<Duration>,
    /// Log engine, with `--seed`: print the injected faults, then the protocol events of this
    /// window of simulated milliseconds (`A..B`), without grants, applies and fsyncs.
    #[arg(long, value_parser = parse_range)]
    trace: Option<Range<u64>>,
    /// How many violations to print per failing seed.
    #[arg(long, default_value_t = 10)]
    max_violations: usize,
}

fn parse_txn_mode(s: &str) -> Result<strata_sim::txn::TxnMode, String> {
    use strata_sim::txn::TxnMode;
    match s {
        "rifl" => Ok(TxnMode::Rifl),
        "kairos" => Ok(TxnMode::KairosServer),
        _ => match s.strip_prefix("kairos-sharded:").map(str::parse::<u32>) {
            Some(Ok(v)) if (1..=64).contains(&v) => Ok(TxnMode::KairosSharded(v)),
            _ => Err(format!("expected rifl, kairos or kairos-sharded:V (1..=64), got {s:?}")),
        },
    }
}

fn parse_cache(s: &str) -> Result<strata_kairos::LeasePolicy, String> {
    match s.parse()? {
        strata_kairos::LeasePolicy::ExplicitInvalidation => Err(
            "ei: the harness's clients take no invalidation pushes (use naive, ideal, static:X, mean or fixed:MS)".into(),
        ),
        p => Ok(p),
    }
}

fn parse_eps(s: &str) -> Result<Duration, String> {
    match s.parse::<u64>() {
        Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err(format!("expected a positive number of milliseconds, got {s:?}")),
    }
}

fn parse_range(s: &str) -> Result<Range<u64>, String> {
    let bad = || format!("expected A..B or A..=B, got {s:?}");
    let (a, b) = s.split_once("..").ok_or_else(bad)?;
    let start = a.trim().parse::<u64>().map_err(|_| bad())?;
    let end = match b.strip_prefix('=') {
        Some(b) => b.trim().parse::<u64>().map_err(|_| bad())?.checked_add(1).ok_or_else(bad)?,
        None => b.trim().parse::<u64>().map_err(|_| bad())?,
    };
    if end <= start {
        return Err(format!("empty seed range {s:?}"));
    }
    Ok(start..end)
}

fn main() -> ExitCode {
    let args = Args::parse();
    match args.engine.as_str() {
        "log" => return main_log(&args),
        "host" => return main_host(&args),
        "txn" => return main_txn(&args),
        _ => {}
    }
    let opts = RunOptions {
        canary: args.canary,
        strict_convergence: args.strict_convergence,
        strict_rifl: args.strict_rifl,
    };
    if let Some(seed) = args.seed {
        let report = run_seed(seed, &opts);
        println!("{}", report.render(args.max_violations));
        return if report.passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE };
    }
    let seeds = match (args.seeds, args.count) {
        (Some(r), _) => r,
        (None, Some(count)) => args.start..args.start.saturating_add(count),
        (None, None) => unreachable!("clap requires one of --seed, --seeds, --count"),
    };
    let started = Instant::now();
    let mut failed = Vec::new();
    let mut notes = 0;
    let total = seeds.end - seeds.start;
    for seed in seeds {
        let report = run_seed(seed, &opts);
        println!("{}", report.one_line());
        notes += report.notes.len();
        if !report.passed() {
            if failed.is_empty() {
                println!("{}\n", report.render(args.max_violations));
            }
            failed.push(report.repro());
        }
    }
    sweep_outcome(&failed, total, &format!(", {notes} notes"), started)
}

/// The last lines of a sweep (how many seeds failed, and how to replay each) and its exit code.
fn sweep_outcome(failed: &[String], total: u64, extra: &str, started: Instant) -> ExitCode {
    println!(
        "{} of {total} seeds failed{extra}, in {:.1}s",
        failed.len(),
        started.elapsed().as_secs_f64()
    );
    for repro in failed {
        println!("  reproduce: {repro}");
    }
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `--engine host`: one whole-server run, or a sweep.
fn main_txn(args: &Args) -> ExitCode {
    use strata_sim::txn::{run, TxnSimOptions};
    let seeds = match (args.seed, &args.seeds, args.count) {
        (Some(s), _, _) => s..s + 1,
        (None, Some(r), _) => r.clone(),
        (None, None, Some(count)) => args.start..args.start.saturating_add(count),
        (None, None, None) => unreachable!("clap requires one of --seed, --seeds, --count"),
    };
    let kairos = !matches!(args.txn_mode, strata_sim::txn::TxnMode::Rifl);
    if !kairos && (args.cache.is_some() || args.strict_eps.is_some()) {
        eprintln!(
            "--cache and --strict-eps go with a Kairos --txn-mode (kairos, kairos-sharded:V)"
        );
        return ExitCode::from(2);
    }
    let base = match args.strict_eps {
        Some(eps) => TxnSimOptions::strict(args.txn_mode, eps),
        None => TxnSimOptions::kairos(args.txn_mode),
    };
    let opts = TxnSimOptions { canary: args.log_canary, cache: args.cache, ..base };
    let started = Instant::now();
    let mut failed = Vec::new();
    for seed in seeds.clone() {
        let r = run(seed, &opts);
        println!("seed {seed}: {}", r.summary());
        for v in r.violations.iter().take(args.max_violations) {
            println!("  {v}");
        }
        if !r.violations.is_empty() {
            failed.push(seed);
        }
    }
    println!(
        "engine txn: {} of {} seeds failed in {:.1?}{}",
        failed.len(),
        seeds.end - seeds.start,
        started.elapsed(),
        failed.first().map_or(String::new(), |s| format!(
            "; reproduce: cargo run -p strata-sim -- --engine txn --seed {s}{}{}{}{}",
            args.log_canary.map_or(String::new(), |b| format!(
                " --log-canary {}",
                strata_sim::orca::canary_name(b)
            )),
            match args.txn_mode {
                strata_sim::txn::TxnMode::Rifl => String::new(),
                strata_sim::txn::TxnMode::KairosServer => " --txn-mode kairos".into(),
                strata_sim::txn::TxnMode::KairosSharded(v) =>
                    format!(" --txn-mode kairos-sharded:{v}"),
            },
            args.cache.map_or(String::new(), |p| format!(" --cache {p}")),
            args.strict_eps.map_or(String::new(), |e| format!(" --strict-eps {}", e.as_millis())),
        ))
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn main_host(args: &Args) -> ExitCode {
    use strata_sim::host::{run_host, HostKnobs};
    let seeds = match (args.seed, &args.seeds, args.count) {
        (Some(s), _, _) => s..s + 1,
        (None, Some(r), _) => r.clone(),
        (None, None, Some(count)) => args.start..args.start.saturating_add(count),
        (None, None, None) => unreachable!("clap requires one of --seed, --seeds, --count"),
    };
    let started = Instant::now();
    let mut failed = Vec::new();
    for seed in seeds.clone() {
        let knobs = HostKnobs::from_seed(seed);
        let r = run_host(&knobs);
        println!(
            "seed {seed}: {} — {} nodes, {:?}, {} crash(es), {} write(s), {} renewal(s), {} Expire entr(ies), {} move(s){}",
            if r.ok() { "ok" } else { "FAILED" },
            knobs.nodes,
            knobs.durability,
            r.crashes,
            r.log.writes.len(),
            r.renewals,
            r.expire_entries,
            r.log.moves.len(),
            if knobs.moves[0].interrupt_until.is_some() { " (interrupted, run again)" } else { "" },
        );
        for v in r.violations.iter().take(args.max_violations) {
            println!("  {v}");
        }
        if !r.ok() {
            failed.push(r.repro());
        }
    }
    sweep_outcome(&failed, seeds.end - seeds.start, "", started)
}

/// `--engine log`: one ORCA harness run, or a sweep with a per-checker tally.
fn main_log(args: &Args) -> ExitCode {
    let opts = HarnessOptions { states: args.states, canary: args.log_canary };
    if let Some(seed) = args.seed {
        let report = run_orca(args.mode, seed, &opts);
        if let Some(window) = &args.trace {
            for (at, what) in
                report.history.faults.iter().filter(|f| window.contains(&(f.0 .0 / 1_000_000)))
            {
                println!("{:>10.3}ms fault: {what}", at.0 as f64 / 1e6);
            }
            for s in &report.history.events {
                let ms = s.at.0 / 1_000_000;
                let noisy = matches!(
                    s.event,
                    LogEvent::GrantSent { .. }
                        | LogEvent::Applied { .. }
                        | LogEvent::Persisted { .. }
                );
                if window.contains(&ms) && !noisy {
                    println!("{:>10.3}ms {} {:?}", s.at.0 as f64 / 1e6, s.node, s.event);
                }
            }
        }
        println!("{}", report.render(args.max_violations));
        return if report.passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE };
    }
    let seeds = match (args.seeds.clone(), args.count) {
        (Some(r), _) => r,
        (None, Some(count)) => args.start..args.start.saturating_add(count),
        (None, None) => unreachable!("clap requires one of --seed, --seeds, --count"),
    };
    let started = Instant::now();
    let total = seeds.end - seeds.start;
    let (mut failed, mut non_monotonic) = (Vec::new(), 0u64);
    let mut by_checker = std::collections::BTreeMap::new();
    for seed in seeds {
        let report = run_orca(args.mode, seed, &opts);
        println!("{}", report.one_line());
        if report.monotonic_violations() > 0 {
            non_monotonic += 1;
        }
        for (c, _) in report.violations_by_checker() {
            *by_checker.entry(c).or_insert(0u64) += 1;
        }
        if !report.passed() {
            if failed.is_empty() {
                println!("{}\n", report.render(args.max_violations));
            }
            failed.push(report.repro());
        }
    }
    println!(
        "mode {}: {} of {total} seeds failed, {non_monotonic} with non-monotonic reads (inv. 1), in {:.1}s",
        args.mode,
        failed.len(),
        started.elapsed().as_secs_f64()
    );
    println!("seeds failing each checker: {by_checker:?}");
    for repro in failed.iter().take(20) {
        println!("  reproduce: {repro}");
    }
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn ranges_parse_and_the_cli_is_consistent() {
        assert_eq!(parse_range("3..7"), Ok(3..7));
        assert_eq!(parse_range("3..=7"), Ok(3..8));
        assert!(
            parse_range("7..3").is_err()
                && parse_range("x").is_err()
                && parse_range("1..").is_err()
        );
        Args::command().debug_assert();
        let a =
            Args::try_parse_from(["strata-sim", "--seed", "9", "--canary", "apply-older-writes"])
                .unwrap();
        assert_eq!((a.seed, a.canary), (Some(9), Some(Canary::ApplyOlderWrites)));
        assert!(
            Args::try_parse_from(["strata-sim"]).is_err(),
            "one of --seed/--seeds/--count is required"
        );
        assert!(Args::try_parse_from(["strata-sim", "--seed", "1", "--canary", "nope"]).is_err());
        let a = Args::try_parse_from([
            "strata-sim",
            "--engine",
            "log",
            "--mode",
            "sync-all",
            "--count",
            "3",
        ])
        .unwrap();
        assert_eq!((a.engine.as_str(), a.mode, a.count), ("log", Mode::SyncAll, Some(3)));
        assert!(Args::try_parse_from([
            "strata-sim",
            "--engine",
            "log",
            "--mode",
            "nope",
            "--seed",
            "1"
        ])
        .is_err());
        assert!(Args::try_parse_from([
            "strata-sim",
            "--log-canary",
            "skip-durability-check",
            "--seed",
            "1"
        ])
        .is_ok());
        for c in Canary::ALL {
            let a =
                Args::try_parse_from(["strata-sim", "--seed", "1", "--canary", c.name()]).unwrap();
            assert_eq!(a.canary, Some(c));
        }
    }
}
