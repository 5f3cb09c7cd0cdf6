//! The whole server in the simulator (`strata_sim::host`): log-table writes, lease renewal and
//! expiry, table creation and shard moves (some interrupted and run again) through the same
//! `strata-host` code the node runs, under seeded loss, crashes and restarts, with checkers and
//! their canaries. A failure prints the seed: `cargo run -p strata-sim -- --engine host --seed N`.

use strata_sim::host::{run_host, HostKnobs, HostReport, MovePlant};

const SEEDS: std::ops::RangeInclusive<u64> = 1..=48;

fn run(seed: u64, plant: Option<MovePlant>) -> HostReport {
    run_host(&HostKnobs { plant, ..HostKnobs::from_seed(seed) })
}

#[test]
fn host_sim_seeded_runs_keep_acknowledged_writes_stable_results_and_inv9_across_crashes_leases_and_moves(
) {
    let (mut crashes, mut expiries, mut renewals, mut interrupted, mut moves) = (0, 0, 0, 0, 0);
    let mut shapes = std::collections::BTreeSet::new();
    for seed in SEEDS {
        let knobs = HostKnobs::from_seed(seed);
        let r = run_host(&knobs);
        assert!(r.ok(), "seed {seed}: {:#?}\nreplay: {}", r.violations, r.repro());
        assert_eq!(r.log.tables_created, 1, "seed {seed}: the table was created at every node");
        crashes += r.crashes;
        expiries += r.expire_entries;
        renewals += r.renewals;
        moves += r.log.moves.len();
        interrupted += usize::from(knobs.moves[0].interrupt_until.is_some());
        shapes.insert((knobs.nodes, format!("{:?}", knobs.durability)));
    }
    // The seed range exercises every path the issue names, not just the happy one.
    let n = SEEDS.count();
    assert_eq!(moves, n, "every run finished its shard move");
    assert!(interrupted >= 5, "interrupted moves run again: {interrupted}");
    assert!(crashes >= 20, "crashes and restarts: {crashes}");
    assert!(
        expiries >= 5,
        "leases expired and records were collected (Expire entries): {expiries}"
    );
    assert!(renewals >= 10 * n, "leases were renewed: {renewals}");
    assert_eq!(shapes.len(), 6, "3 and 5 nodes, every durability: {shapes:?}");
}

#[test]
fn host_sim_the_same_seed_replays_the_same_run() {
    for seed in [3, 9] {
        let a = run(seed, None);
        let b = run(seed, None);
        let answers = |r: &HostReport| {
            r.log.writes.iter().map(|w| (w.rpc, w.answers.clone())).collect::<Vec<_>>()
        };
        assert_eq!(answers(&a), answers(&b), "seed {seed}");
        assert_eq!(a.log.grants, b.log.grants, "seed {seed}");
    }
}

/// Canary: a move whose snapshot loses its items loses what it froze (and, in a `sync` table,
/// acknowledged writes), and the checkers say so in every run that wrote before its move.
#[test]
fn host_sim_canary_a_move_that_drops_the_items_is_flagged() {
    let mut with_writes = 0;
    for seed in 1..=10 {
        let r = run(seed, Some(MovePlant::LoseItems));
        if r.log.frozen.iter().all(|(_, _, s)| s.items.is_empty()) {
            continue; // nothing was written to the shard before it moved: nothing to lose
        }
        with_writes += 1;
        assert!(
            r.violations.iter().any(|v| v.contains("was frozen at")),
            "seed {seed}: the items lost by the move went unnoticed: {:?}",
            r.violations
        );
        if HostKnobs::from_seed(seed).durability == strata_wire::client::TableDurability::Sync
            && r.acked_before_move > 0
        {
            assert!(
                r.violations.iter().any(|v| v.starts_with("acknowledged write")),
                "seed {seed}"
            );
        }
    }
    assert!(with_writes >= 7, "too few runs wrote before their move: {with_writes}");
}

/// Canary: a node log whose recovery forgets the replicas' hard state (epoch and vote) is
/// flagged by the reopen check (what the store recovers is exactly what it synced) in the runs
/// where a crashed node restarts after voting or adopting an epoch (28 of the 29 seeds of
/// `SEEDS` that crash a node).
#[test]
fn host_sim_canary_a_node_log_that_forgets_the_hard_state_is_flagged() {
    let crashed: Vec<u64> =
        SEEDS.filter(|&s| !HostKnobs::from_seed(s).crashes.is_empty()).collect();
    let flagged: Vec<u64> = crashed
        .iter()
        .copied()
        .filter(|&seed| {
            let store_bug = Some(strata_logstore::StoreBug::ForgetHardState);
            run_host(&HostKnobs { store_bug, ..HostKnobs::from_seed(seed) })
                .violations
                .iter()
                .any(|v| v.contains("the log store recovered"))
        })
        .collect();
    // A node that restarts before any of its replicas voted or adopted an epoch recovers the
    // default hard state either way (seed 5): nine in ten is the bar.
    assert!(
        crashed.len() >= 5 && flagged.len() * 10 >= crashed.len() * 9,
        "a node log that forgets the hard state went unnoticed: flagged {flagged:?} of {crashed:?}"
    );
}

/// Canary: a move whose snapshot loses the completion records lets a retry that crosses the
/// move execute again (the seeds with a reply blackout around the freeze have such retries),
/// and it is flagged.
#[test]
fn host_sim_canary_a_move_that_drops_the_records_is_flagged() {
    let blackout: Vec<u64> =
        SEEDS.filter(|&s| HostKnobs::from_seed(s).net.reply_blackout.is_some()).collect();
    let flagged: Vec<u64> = blackout
        .iter()
        .copied()
        .filter(|&seed| {
            run(seed, Some(MovePlant::LoseRecords))
                .violations
                .iter()
                .any(|v| v.contains("executed again"))
        })
        .collect();
    assert!(
        flagged.len() * 3 >= blackout.len(),
        "a retry executed twice after a move without records went unnoticed: flagged {flagged:?} of {blackout:?}"
    );
}

/// Regression (found by this simulator): an interrupted move run again, whose freeze a new
/// replica answered "already there", lets the other new replicas adopt without the state; two
/// such empty replicas are a majority of three and elected one of themselves, serving an empty
/// shard. They now wait for the `Install` entry before standing (`LogReplica::await_install`).
#[test]
fn host_sim_an_interrupted_move_run_again_keeps_the_frozen_state() {
    for seed in [1360, 1387] {
        let knobs = HostKnobs::from_seed(seed);
        assert!(knobs.moves[0].interrupt_until.is_some(), "seed {seed} interrupts its move");
        let r = run_host(&knobs);
        assert!(r.ok(), "seed {seed}: {:#?}", r.violations);
        assert!(r.log.frozen.iter().any(|(_, _, s)| !s.items.is_empty()), "seed {seed} moved data");
    }
}

/// The optional service-rate limit per shard leader (`shard_rate_limit`): with 20 writes/s per
/// leader, one shard's writes are acknowledged no faster than that (after the burst), and
/// without it the same run is several times faster.
#[test]
fn host_sim_a_rate_limited_shard_leader_serves_at_its_rate() {
    let span = |limit: Option<u32>| {
        let base = HostKnobs::from_seed(3);
        // No loss: a lost reply's retry would stretch the free run (this is about rate).
        let net = strata_sim::host::HostNet::matrix(
            base.net.delay_us.clone(),
            base.net.links.delay_max_us,
            0.0,
            base.net.client_delay_us,
            0.0,
        );
        let knobs = HostKnobs {
            net,
            crashes: vec![],
            pause_at_ms: None,
            moves: vec![],
            shards: 1,
            writes_each: 30,
            shard_rate_limit: limit,
            ..base
        };
        let r = run_host(&knobs);
        assert!(r.ok(), "{:#?}", r.violations);
        let mut acks: Vec<u64> =
            r.log.writes.iter().filter_map(|w| w.answered_at).map(|t| t.0).collect();
        acks.sort_unstable();
        assert_eq!(acks.len(), 90, "every write answered");
        std::time::Duration::from_nanos(acks[acks.len() - 1] - acks[0])
    };
    let limited = span(Some(20));
    let free = span(None);
    // 90 writes at 20/s after a burst of 2: at least (90 - 2) / 20 s = 4.4 s.
    assert!(limited.as_secs_f64() >= 4.3, "limited run too fast: {limited:?}");
    assert!(
        free.as_secs_f64() * 2.0 < limited.as_secs_f64(),
        "free {free:?} vs limited {limited:?}"
    );
}

/// The courier (`strata_host::courier`): node-level messages addressed to "the leader of
/// (table, shard)" reach it across crashes, leader changes, lost messages and shard moves; at
/// most one node answers as a shard's leader per epoch; nearly all are delivered.
#[test]
fn host_sim_node_level_messages_reach_the_shard_leader_under_faults_and_moves() {
    let (mut sent, mut delivered) = (0, 0);
    for seed in 1..=12 {
        let knobs = HostKnobs { mail_every_ms: Some(100), ..HostKnobs::from_seed(seed) };
        let r = run_host(&knobs);
        assert!(r.ok(), "seed {seed}: {:#?}", r.violations);
        sent += r.log.mails.len();
        delivered += r.log.mails.iter().filter(|m| matches!(m.outcome, Some(Ok(_)))).count();
    }
    eprintln!("courier: {delivered} of {sent} messages delivered over 12 seeds");
    assert!(sent > 1000, "messages sent: {sent}");
    assert!(delivered * 100 >= sent * 90, "delivered {delivered} of {sent}");
}

/// Preferred shard leaders (`strata table create --leaders`): the preferred replica of each
/// shard stands first in its elections, so it leads once the table is created and the cluster
/// has settled; without a preference the leaders fall where the elections put them.
#[test]
fn host_sim_preferred_leaders_lead_their_shards() {
    let mut placed = 0;
    let mut by_chance = 0;
    let seeds = 1..=10;
    for seed in seeds.clone() {
        let base = HostKnobs::from_seed(seed);
        let n = base.nodes as u32;
        let want = [strata_wire::NodeId(n - 1), strata_wire::NodeId(n - 2)];
        let quiet = HostKnobs { crashes: vec![], pause_at_ms: None, moves: vec![], ..base };
        let r = run_host(&HostKnobs { preferred_leaders: want.to_vec(), ..quiet.clone() });
        assert!(r.ok(), "seed {seed}: {:#?}", r.violations);
        let matches = |leaders: &[Option<usize>]| {
            leaders.iter().zip(want).all(|(l, w)| *l == Some(w.0 as usize))
        };
        placed += usize::from(matches(&r.final_leaders));
        by_chance += usize::from(matches(&run_host(&quiet).final_leaders));
    }
    eprintln!(
        "preferred leaders: placed in {placed} of 10 runs, {by_chance} of 10 without a preference"
    );
    assert!(placed >= 9, "the preferred nodes led both shards in {placed} of 10 runs");
    assert!(by_chance < placed, "without a preference: {by_chance} of 10 by chance");
}
