//! The transaction harness (issue #18 item 4): seeded runs on whole hosts with faults must be
//! clean, and each planted bug must be caught.

use strata_log::PlantedBug;
use strata_sim::txn::{run, TxnReport, TxnSimOptions};

fn summary(r: &TxnReport) -> String {
    let mut s = format!(
        "seed {}: {} records, {} committed, {} aborted, {} locks left",
        r.seed,
        r.records.len(),
        r.committed(),
        r.aborted(),
        r.locks_left
    );
    for v in r.violations.iter().take(5) {
        s += &format!("\n  [{}] {}", v.checker, v.detail);
    }
    s
}

#[test]
fn transaction_runs_with_faults_are_clean() {
    let opts = TxnSimOptions::default();
    let mut committed = 0;
    for seed in 0..40 {
        let r = run(seed, &opts);
        assert!(r.violations.is_empty(), "{}", summary(&r));
        committed += r.committed();
    }
    assert!(committed > 1000, "the runs committed only {committed} transactions");
}

/// Each planted bug is caught by some seed of a short range: lost updates (serializability), a
/// late prepare voting `Prepared` after recovery aborted (agreement, atomicity), reads
/// ignoring locks (strict serializability). (`TxnExpireIgnoresLocks` needs a lease to expire
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
