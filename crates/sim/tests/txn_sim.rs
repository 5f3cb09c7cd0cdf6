//! The transaction harness (issue #18 item 4): seeded runs on whole hosts with faults — among
//! them a shard move in the middle of transactions and a leader crashed while it prepares, in
//! every run — must be clean, and each planted bug must be caught.

use strata_log::PlantedBug;
use strata_sim::txn::mover::MovePlant;
use strata_sim::txn::{run, TxnReport, TxnSimOptions};

fn summary(r: &TxnReport) -> String {
    let mut s = format!("seed {}: {}", r.seed, r.summary());
    for v in r.violations.iter().take(5) {
        s += &format!("\n  [{}] {}", v.checker, v.detail);
    }
    s
}

/// Every run also moves a shard while transactions hold locks on it (the move carries them,
/// or a recovery's decision record, in most runs) and crashes a shard leader right after it
/// appended a prepare: the scenarios happen by construction, not by chance.
#[test]
fn transaction_runs_with_faults_are_clean() {
    let opts = TxnSimOptions::default();
    let (mut committed, mut carried, mut released) = (0, 0, 0);
    for seed in 0..40 {
        let r = run(seed, &opts);
        assert!(r.violations.is_empty(), "{}", summary(&r));
        assert_eq!(r.moves.len(), 1, "the shard move did not happen: {}", summary(&r));
        assert!(r.prepare_crashes >= 1, "no leader crashed preparing: {}", summary(&r));
        committed += r.committed();
        carried += usize::from(r.moved_locks + r.moved_decisions > 0);
        released += r.foreseen.reservations_released;
    }
    assert!(committed > 1000, "the runs committed only {committed} transactions");
    assert!(carried >= 30, "only {carried} of 40 moves carried a lock or a decision record");
    // Dropped transactions' releases reach their leaders amid the faults (clean above).
    assert!(released >= 20, "only {released} reservations released in 40 runs");
}

/// A move whose frozen state loses its locks and decision records (rifl.md §5.7 step 2
/// broken) is caught: the decisions of the transactions prepared before the freeze find no
/// lock at the new group, so a committed transfer is applied on one side only (atomicity,
/// conservation).
#[test]
fn a_move_that_drops_locks_is_caught() {
    let opts = TxnSimOptions { move_plant: Some(MovePlant::LoseLocks), ..TxnSimOptions::default() };
    let caught = (0..20).map(|seed| run(seed, &opts)).find(|r| !r.violations.is_empty());
    match caught {
        Some(r) => eprintln!("LoseLocks caught: {}", summary(&r)),
        None => panic!("a move that drops its locks was not caught in 20 seeds"),
    }
}

/// Each planted bug is caught by some seed of a short range: lost updates (serializability), a
/// late prepare voting `Prepared` after recovery aborted (agreement, atomicity), reads
/// ignoring locks (strict serializability), the leader's foresight answering a value other
/// than the pending one, for a prepare or a decision (serializability).
/// (`TxnExpireIgnoresLocks` needs a lease to expire
/// under a held lock, which `host_txn.rs` stages step by step.)
#[test]
fn every_transaction_canary_is_caught() {
    let cases = [
        (PlantedBug::TxnSkipVersionCheck, TxnSimOptions::default()),
        (PlantedBug::TxnAbortWithoutRecord, TxnSimOptions::default()),
        (
            PlantedBug::TxnReadsIgnoreLocks,
            TxnSimOptions { faults: false, ..TxnSimOptions::default() },
        ),
        (PlantedBug::TxnForesightWrongValue, TxnSimOptions::default()),
        (PlantedBug::TxnDecisionForesightWrongValue, TxnSimOptions::default()),
    ];
    for (bug, opts) in cases {
        let opts = TxnSimOptions { canary: Some(bug), ..opts };
        let caught = (0..20).map(|seed| run(seed, &opts)).find(|r| !r.violations.is_empty());
        match caught {
            Some(r) => eprintln!("{bug:?} caught: {}", summary(&r)),
            None => panic!("{bug:?} was not caught in 20 seeds"),
        }
    }
}
