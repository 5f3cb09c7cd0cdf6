//! The Kairos OCC simulation (kairos.md §7 inv. 1–8) at every clock-skew level of §9.3, and
//! the canaries: each planted bug must be flagged by its checker.
//!
//! Longer soak: `KAIROS_SOAK_SEEDS=2000 cargo test -p strata-kairos --release --test occ_sim
//! -- --ignored soak`.

use std::collections::BTreeSet;
use std::time::Duration;

use strata_kairos::sim::check::{check_all, stale_cache_hits, Checker, Violation};
use strata_kairos::sim::{run, Placement, SimConfig, SimRun, Skew};
use strata_kairos::PlantedBug;

fn checked(config: SimConfig) -> (SimRun, Vec<Violation>) {
    let run = run(config);
    let violations = check_all(&run.history);
    (run, violations)
}

/// Seeds per skew level in `cargo test` (3 configurations each).
const SEEDS: u64 = 100;

fn configs(seed: u64, skew: Skew) -> [SimConfig; 3] {
    let base = {
        let mut c = SimConfig::small(seed, skew);
        c.clients = 3 + (seed % 4) as u32;
        c.keys = 6 + (seed % 10) as u32;
        c
    };
    let server_side = base.clone();
    let mut sharded = base.clone();
    sharded.placement = Placement::Sharded { validators: 3 };
    sharded.shards = 2;
    let mut no_cache = base;
    no_cache.lease = None;
    no_cache.placement = Placement::Sharded { validators: 2 };
    no_cache.strict = seed.is_multiple_of(2);
    [server_side, sharded, no_cache]
}

/// §7 inv. 1–8 hold at offsets 0, ±400 µs, ±10 ms, ±1 s with drift up to 1000 ppm, server-side
/// and sharded validation, with and without a lease cache.
#[test]
fn every_checker_passes_at_every_skew() {
    for (level, skew) in Skew::LEVELS.iter().enumerate() {
        let (mut committed, mut aborted, mut hits, mut stale, mut pruned) = (0, 0, 0, 0, 0);
        for seed in 0..SEEDS {
            for config in configs(seed * 31 + level as u64, *skew) {
                let label = format!("seed {} skew {skew:?} {:?}", config.seed, config.placement);
                let (run, violations) = checked(config);
                assert!(
                    violations.is_empty(),
                    "{label}: {:#?}",
                    &violations[..violations.len().min(5)]
                );
                assert_eq!(
                    run.stats.regressed_reports, 0,
                    "{label}: a correct client's reports only grow"
                );
                committed += run.stats.committed;
                aborted += run.stats.aborted;
                hits += run.stats.cache_hits;
                stale += stale_cache_hits(&run.history);
                pruned += run.history.prunes.len();
            }
        }
        eprintln!(
            "skew {skew:?}: {committed} committed, {aborted} aborted, {hits} cache hits of which \
             {stale} stale, {pruned} versions pruned"
        );
        assert!(pruned > 100, "ts_GC advances and versions are pruned");
        assert!(committed > 1000 && aborted > 50, "the workload both commits and conflicts");
        assert!(stale > 10, "the lease cache serves stale values (and the oracle saw none commit)");
    }
}

/// A run is a function of its seed.
#[test]
fn a_seed_reproduces_its_run() {
    let a = run(SimConfig::small(7, Skew::PTP));
    let b = run(SimConfig::small(7, Skew::PTP));
    assert_eq!(a.stats, b.stats);
    assert_eq!(a.history.txns, b.history.txns);
}

/// Runs seeds until the bug is flagged; returns the checkers that flagged it on the first
/// seed that did.
fn caught(bug: PlantedBug, skew: Skew, tweak: impl Fn(&mut SimConfig)) -> BTreeSet<Checker> {
    for seed in 0..40 {
        let mut config = SimConfig::small(seed, skew);
        config.planted_bug = Some(bug);
        tweak(&mut config);
        let (_, violations) = checked(config);
        if !violations.is_empty() {
            eprintln!("{bug:?} caught at seed {seed}: {}", violations[0]);
            return violations.iter().map(|v| v.checker).collect();
        }
    }
    panic!("{bug:?} was never caught");
}

#[test]
fn canary_no_read_prepared_check_is_caught_by_the_stale_read_oracle() {
    let found = caught(PlantedBug::SkipReadPreparedCheck, Skew::NONE, |_| {});
    assert!(found.contains(&Checker::StaleRead), "{found:?}");
}

/// A cache that forgets to self-invalidate serves entries past their lease (§7 inv. 10).
#[test]
fn canary_a_cache_serving_past_its_lease_is_caught_by_the_self_invalidation_checker() {
    let found = caught(PlantedBug::CacheServesPastLease, Skew::NONE, |c| {
        c.lease = Some(Duration::from_millis(2))
    });
    assert!(found.contains(&Checker::SelfInvalidation), "{found:?}");
}

#[test]
fn canary_no_latest_read_update_is_caught_by_the_replay() {
    let found = caught(PlantedBug::NoLatestReadUpdate, Skew::NONE, |c| c.lease = None);
    assert!(found.contains(&Checker::Replay), "{found:?}");
}

/// Without the bump and without step 3 (which would otherwise abort every such writer and
/// hide the bug), a slow-clocked writer commits below a version it read.
#[test]
fn canary_no_timestamp_bump_under_skew_is_caught_by_the_replay() {
    let skew = Skew { max_offset_ns: 10_000_000, max_drift_ppm: 0 };
    let found = caught(PlantedBug::NoTimestampBump, skew, |_| {});
    assert!(found.contains(&Checker::Replay), "{found:?}");
}

/// The control: without the bump but with step 3, nothing breaks; writers that read a
/// version from a faster clock abort with `TimestampOrder` instead (K4).
#[test]
fn without_the_bump_step_3_alone_keeps_k1_at_the_price_of_aborts() {
    let skew = Skew { max_offset_ns: 10_000_000, max_drift_ppm: 0 };
    let (mut with_bump, mut without) = (0, 0);
    for seed in 0..20 {
        let mut config = SimConfig::small(seed, skew);
        let (run_ok, violations) = checked(config.clone());
        assert!(violations.is_empty());
        config.planted_bug = Some(PlantedBug::ClientSkipsTimestampBump);
        let (run_bug, violations) = checked(config);
        assert!(violations.is_empty(), "seed {seed}: {:?}", &violations[..violations.len().min(3)]);
        with_bump += run_ok.stats.abort_votes.get("timestamp-order").copied().unwrap_or(0);
        without += run_bug.stats.abort_votes.get("timestamp-order").copied().unwrap_or(0);
    }
    eprintln!("TimestampOrder votes at ±10 ms: {with_bump} with the bump, {without} without");
    assert!(without > with_bump + 20, "{with_bump} vs {without}");
}

#[test]
fn canary_gc_at_the_watermark_without_too_old_is_caught_by_the_gc_checker() {
    let found =
        caught(PlantedBug::GcUnsafe, Skew::NONE, |c| c.lease = Some(Duration::from_millis(20)));
    assert!(found.contains(&Checker::GcSafety), "{found:?}");
}

#[test]
fn canary_local_wm_ignoring_in_flight_commits_is_caught_by_the_freshness_checker() {
    let found = caught(PlantedBug::LocalWmIgnoresInFlight, Skew::NONE, |_| {});
    assert!(found.contains(&Checker::Freshness), "{found:?}");
}

#[test]
fn canary_a_primary_losing_commits_is_caught_by_the_atomicity_checker() {
    let found = caught(PlantedBug::PrimaryLosesCommit, Skew::NONE, |_| {});
    assert!(found.contains(&Checker::Atomicity), "{found:?}");
}

/// A longer soak: `KAIROS_SOAK_SEEDS` seeds (default 500) per skew level and placement.
#[test]
#[ignore]
fn soak() {
    let seeds: u64 =
        std::env::var("KAIROS_SOAK_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(500);
    let mut runs = 0;
    for skew in Skew::LEVELS {
        for seed in 0..seeds {
            for mut config in configs(1_000_000 + seed, skew) {
                config.txns_per_client = 60;
                let label = format!("seed {} skew {skew:?} {:?}", config.seed, config.placement);
                let Ok((_, violations)) = std::panic::catch_unwind(|| checked(config)) else {
                    panic!("{label}: an assertion failed (above)");
                };
                assert!(
                    violations.is_empty(),
                    "{label}: {:#?}",
                    &violations[..violations.len().min(5)]
                );
                runs += 1;
            }
        }
    }
    eprintln!("soak: {runs} runs, no violation");
}
