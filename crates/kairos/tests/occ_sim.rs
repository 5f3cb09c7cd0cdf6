//! The Kairos OCC simulation (kairos.md §7 inv. 1–8, 10–12) at every clock-skew level of
//! §9.3 and with every cache policy of §1.3, strict mode (K5) within and beyond its clock
//! bound, and the canaries: each planted bug must be flagged by its checker.
//!
//! Longer soak: `KAIROS_SOAK_SEEDS=2000 cargo test -p strata-kairos --release --test occ_sim
//! -- --ignored soak`.

use std::collections::BTreeSet;
use std::time::Duration;

use strata_kairos::sim::check::{
    check_all, real_time_order, real_time_reads_from, stale_cache_hits, Checker, Violation,
};
use strata_kairos::sim::{run, Placement, SimConfig, SimRun, Skew};
use strata_kairos::{LeasePolicy, PlantedBug};

fn checked(config: SimConfig) -> (SimRun, Vec<Violation>) {
    let run = run(config);
    let violations = check_all(&run.history);
    (run, violations)
}

/// Seeds per skew level in `cargo test` (3 configurations each).
const SEEDS: u64 = 100;

fn configs(seed: u64, skew: Skew) -> [SimConfig; 4] {
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
    let mut no_cache = base.clone();
    no_cache.cache = None;
    no_cache.placement = Placement::Sharded { validators: 2 };
    no_cache.strict = seed.is_multiple_of(2);
    // The other policies of §1.3 in turn, with validation as their fallback.
    let mut other = base;
    other.cache = Some(
        [LeasePolicy::Ideal, LeasePolicy::Naive, LeasePolicy::ExplicitInvalidation]
            [(seed % 3) as usize],
    );
    if seed % 2 == 1 {
        other.placement = Placement::Sharded { validators: 3 };
    }
    [server_side, sharded, no_cache, other]
}

/// §7 inv. 1–8, 10, 12 hold at offsets 0, ±400 µs, ±10 ms, ±1 s with drift up to 1000 ppm,
/// server-side and sharded validation, with no cache, fixed and ideal leases, naive caching
/// and explicit invalidation (and inv. 11 on the strict runs whose clocks stayed within eps).
#[test]
fn every_checker_passes_at_every_skew() {
    for (level, skew) in Skew::LEVELS.iter().enumerate() {
        let (mut committed, mut aborted, mut hits, mut stale, mut pruned) = (0, 0, 0, 0, 0);
        let mut real_time_judged = 0;
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
                real_time_judged += u32::from(run.history.clocks.strict_within_eps());
            }
        }
        eprintln!(
            "skew {skew:?}: {committed} committed, {aborted} aborted, {hits} cache hits of which \
             {stale} stale, {pruned} versions pruned; {real_time_judged} strict runs within eps \
             (judged by (i))"
        );
        assert!(pruned > 100, "ts_GC advances and versions are pruned");
        assert!(committed > 1000 && aborted > 50, "the workload both commits and conflicts");
        assert!(stale > 10, "the lease cache serves stale values (and the oracle saw none commit)");
    }
}

/// Strict mode with clocks within eps over several values of eps, the premise of §7 inv. 11:
/// offsets within ±0.4 eps and drift within 50 ppm (the runs last well under a second, so
/// drift adds at most a few µs to each clock) — and each run's recorded spread is asserted
/// to be within eps, so [`check_all`] applies the real-time checker (i) to every one.
#[test]
fn strict_mode_keeps_real_time_order_when_clock_error_is_within_eps() {
    for eps_ns in [100_000, 1_000_000, 5_000_000] {
        let (mut committed, mut waits, mut reads_from, mut ordered_pairs) = (0, 0, 0, 0);
        for seed in 0..SEEDS / 4 {
            let config = strict_within_eps(seed * 7 + eps_ns, eps_ns);
            let label = format!("eps {eps_ns} seed {} {:?}", config.seed, config.cache);
            let (run, violations) = checked(config);
            let clocks = run.history.clocks;
            assert!(clocks.strict_within_eps(), "{label}: clock spread {} ns", clocks.spread_ns());
            assert!(
                violations.is_empty(),
                "{label}: {:#?}",
                &violations[..violations.len().min(5)]
            );
            committed += run.stats.committed;
            waits += run.stats.commit_waits;
            reads_from += real_time_reads_from(&run.history);
            ordered_pairs += committed_pairs_in_real_time_order(&run);
        }
        eprintln!(
            "strict, eps {eps_ns} ns: {committed} committed ({waits} after a commit wait), \
             {ordered_pairs} real-time-ordered pairs across clients, {reads_from} of them \
             reads of the other's write"
        );
        assert!(waits > 200, "commits wait");
        assert!(reads_from > 50, "clients read what others wrote after it was reported");
    }
}

/// Strict mode, one of the sweep's configurations (by seed), clocks within `eps`.
fn strict_within_eps(seed: u64, eps_ns: u64) -> SimConfig {
    let skew = Skew { max_offset_ns: eps_ns * 2 / 5, max_drift_ppm: 50 };
    let mut config = configs(seed, skew)[(seed % 4) as usize].clone();
    config.strict = true;
    config.eps_ns = eps_ns;
    config
}

/// Committed pairs on different clients with `T1` reported before `T2` began: what (i)
/// constrains.
fn committed_pairs_in_real_time_order(run: &SimRun) -> u64 {
    let done: Vec<_> = run.history.txns.iter().filter(|t| t.committed()).collect();
    let mut n = 0;
    for t1 in &done {
        for t2 in &done {
            if t1.client != t2.client && t1.reported_at.is_some_and(|r| r < t2.begun_at) {
                n += 1;
            }
        }
    }
    n
}

/// Seeds until [`real_time_order`] flags a run of `config(seed)`; the run must pass every
/// other checker. Returns the first violation.
fn real_time_violation(what: &str, config: impl Fn(u64) -> SimConfig) -> Violation {
    for seed in 0..40 {
        let (run, violations) = checked(config(seed));
        assert!(
            violations.is_empty(),
            "{what} seed {seed}: {:?}",
            &violations[..violations.len().min(3)]
        );
        if let Some(v) = real_time_order(&run.history).into_iter().next() {
            eprintln!("{what}: real-time order broken at seed {seed}: {v}");
            return v;
        }
    }
    panic!("{what}: real-time order never broken in 40 seeds");
}

/// The negative test of §7 inv. 11: strict mode with clock error far above eps (±10 ms
/// offsets, eps = 100 µs) is expected to be able to break real-time order — a transaction
/// begun after another was reported, on a slower clock, takes a smaller timestamp. K1–K3
/// (every other checker) still hold.
#[test]
fn strict_mode_with_clock_error_above_eps_can_break_real_time_order() {
    real_time_violation("strict, ±10 ms, eps 100 µs", |seed| {
        let mut c = SimConfig::small(seed, Skew { max_offset_ns: 10_000_000, max_drift_ppm: 0 });
        c.strict = true;
        c.eps_ns = 100_000;
        c
    });
}

/// K5's reason for strict mode: without it, even with perfect clocks, an RO transaction
/// takes `max fts`, a timestamp in the past, and lands before a transaction that was
/// reported before it began.
#[test]
fn without_strict_mode_real_time_order_breaks_even_with_perfect_clocks() {
    real_time_violation("not strict, no skew", |seed| SimConfig::small(seed, Skew::NONE));
}

/// Canary for (i): strict mode without the commit wait, clocks within eps (eps = 2 ms,
/// offsets ±0.8 ms): a commit reported at once can be followed by a transaction on a
/// slower clock that takes a smaller timestamp.
#[test]
fn canary_strict_mode_without_the_commit_wait_is_caught_by_the_real_time_checker() {
    let found =
        caught(PlantedBug::NoCommitWait, Skew { max_offset_ns: 800_000, max_drift_ppm: 0 }, |c| {
            c.strict = true;
            c.eps_ns = 2_000_000;
        });
    assert!(found.contains(&Checker::RealTimeOrder), "{found:?}");
}

/// §7 inv. 12 and the EI baseline (§5.14.2): only explicit invalidation makes primaries hold
/// sharers and send invalidations; with no cache, leases (fixed, ideal) and naive caching
/// the counters stay zero (checker (j) in [`check_all`]). Every policy passes every checker.
#[test]
fn only_explicit_invalidation_keeps_state_at_the_primaries() {
    let policies = [
        None,
        Some(LeasePolicy::Fixed(Duration::from_millis(2))),
        Some(LeasePolicy::Ideal),
        Some(LeasePolicy::Naive),
        Some(LeasePolicy::ExplicitInvalidation),
    ];
    for policy in policies {
        let (mut registrations, mut sent, mut received, mut hits, mut stale, mut committed) =
            (0, 0, 0, 0, 0, 0);
        for seed in 0..20 {
            let mut config = SimConfig::small(seed, Skew::PTP);
            config.cache = policy;
            let (run, violations) = checked(config);
            assert!(
                violations.is_empty(),
                "{policy:?} seed {seed}: {:?}",
                &violations[..violations.len().min(3)]
            );
            registrations += run.history.sharers.iter().map(|s| s.registrations).sum::<u64>();
            sent += run.history.sharers.iter().map(|s| s.invalidations).sum::<u64>();
            received += run.stats.invalidations_received;
            hits += run.stats.cache_hits;
            stale += stale_cache_hits(&run.history);
            committed += run.stats.committed;
        }
        eprintln!(
            "{policy:?}: {committed} committed, {hits} cache hits ({stale} stale), \
             {registrations} sharer entries, {sent} invalidations sent, {received} received"
        );
        if policy == Some(LeasePolicy::ExplicitInvalidation) {
            assert!(registrations > 100 && sent > 100, "the counters count");
            assert_eq!(sent, received, "every invalidation is delivered");
        } else {
            assert_eq!((registrations, sent, received), (0, 0, 0));
        }
        if policy.is_some() {
            assert!(hits > 100, "{policy:?} caches");
        }
    }
}

/// Canary for (j): a primary that tracks sharers (and invalidates them) under a lease policy.
#[test]
fn canary_a_primary_tracking_sharers_in_lease_mode_is_caught() {
    let found = caught(PlantedBug::PrimaryTracksSharers, Skew::NONE, |_| {});
    assert_eq!(found, BTreeSet::from([Checker::ServerLeaseState]));
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

/// Without step 2's version check, reads of overwritten versions (stale cache hits above
/// all) commit.
#[test]
fn canary_no_stale_check_is_caught_by_the_stale_read_oracle() {
    let found = caught(PlantedBug::SkipStaleCheck, Skew::NONE, |_| {});
    assert!(found.contains(&Checker::StaleRead), "{found:?}");
}

/// A cache that forgets to self-invalidate serves entries past their lease (§7 inv. 10).
#[test]
fn canary_a_cache_serving_past_its_lease_is_caught_by_the_self_invalidation_checker() {
    let found = caught(PlantedBug::CacheServesPastLease, Skew::NONE, |c| {
        c.cache = Some(LeasePolicy::Fixed(Duration::from_millis(2)))
    });
    assert!(found.contains(&Checker::SelfInvalidation), "{found:?}");
}

#[test]
fn canary_no_latest_read_update_is_caught_by_the_replay() {
    let found = caught(PlantedBug::NoLatestReadUpdate, Skew::NONE, |c| c.cache = None);
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
    let found = caught(PlantedBug::GcUnsafe, Skew::NONE, |c| {
        c.cache = Some(LeasePolicy::Fixed(Duration::from_millis(20)))
    });
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

/// A longer soak: `KAIROS_SOAK_SEEDS` seeds (default 500) per skew level and configuration,
/// and as many strict runs within eps (100 µs and 1 ms).
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
    for seed in 0..seeds {
        for eps_ns in [100_000, 1_000_000] {
            let mut config = strict_within_eps(2_000_000 + seed, eps_ns);
            config.txns_per_client = 60;
            let label = format!("strict eps {eps_ns} seed {}", config.seed);
            let Ok((run, violations)) = std::panic::catch_unwind(|| checked(config)) else {
                panic!("{label}: an assertion failed (above)");
            };
            assert!(run.history.clocks.strict_within_eps(), "{label}: clocks beyond eps");
            assert!(
                violations.is_empty(),
                "{label}: {:#?}",
                &violations[..violations.len().min(5)]
            );
            runs += 1;
        }
    }
    eprintln!("soak: {runs} runs, no violation");
}
