//! Canaries: planted bugs (`canaries` feature) the scenarios and the swarm must catch.

use super::active_set::delayed_grants;
use super::reads::crash_all_after_read;
use super::swarm::swarm;
use super::*;
use crate::config::PlantedBug;

fn planted(mut cfg: LogConfig, bug: PlantedBug) -> LogConfig {
    cfg.planted_bug = Some(bug);
    cfg
}

#[test]
fn canary_reads_without_the_durability_check_are_caught() {
    let c = crash_all_after_read(planted(orca(), PlantedBug::SkipDurabilityCheck));
    assert!(
        c.violations.iter().any(|v| v.contains("durable on only")),
        "{:?}",
        c.violations
    );
    assert!(
        c.violations.iter().any(|v| v.contains("non-monotonic")),
        "{:?}",
        c.violations
    );
}

#[test]
fn canary_follower_reads_without_the_durability_check_are_caught() {
    let mut c = Cluster::new(
        5,
        lazy(planted(orca(), PlantedBug::SkipFollowerDurabilityCheck)),
    );
    let l = c.elect();
    let f = follower_in_as(&c, l);
    c.write_ok(l, "k", "v");
    c.run_ms(5);
    c.read_now(f, "k").unwrap();
    assert!(
        c.violations.iter().any(|v| v.contains("durable on only")),
        "{:?}",
        c.violations
    );
}

#[test]
fn canary_follower_serving_outside_the_active_set_is_caught() {
    let mut c = Cluster::new(5, planted(orca(), PlantedBug::ServeOutsideActiveSet));
    let l = c.elect();
    let f = follower_in_as(&c, l);
    c.write_ok(l, "k", "old");
    c.run_ms(30);
    c.read_now(f, "k").unwrap();
    c.isolate(f);
    c.run_ms(800); // revoked and removed
    c.write_ok(l, "k", "new");
    c.read_now(l, "k").unwrap();
    c.run_ms(1);
    // The isolated, removed follower still answers with its stale state.
    let _ = c.read_now(f, "k");
    assert!(
        c.violations
            .iter()
            .any(|v| v.contains("outside the active set")),
        "{:?}",
        c.violations
    );
    assert!(
        c.violations.iter().any(|v| v.contains("non-monotonic")),
        "{:?}",
        c.violations
    );
}

#[test]
fn canary_swarm_catches_every_planted_bug() {
    for bug in [
        PlantedBug::SkipDurabilityCheck,
        PlantedBug::SkipFollowerDurabilityCheck,
        PlantedBug::ServeOutsideActiveSet,
    ] {
        let found =
            (0..12).any(|seed| !swarm(planted(orca(), bug), seed, 12).violations.is_empty());
        assert!(found, "{bug:?} not caught by the swarm");
    }
}

#[test]
fn canary_lease_anchored_at_receipt_is_caught_with_long_delays() {
    let c = delayed_grants(planted(orca(), PlantedBug::LeaseAnchoredAtReceipt));
    assert!(
        c.violations
            .iter()
            .any(|v| v.contains("outside the active set")),
        "{:?}",
        c.violations
    );
}
