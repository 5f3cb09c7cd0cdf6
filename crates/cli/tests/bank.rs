//! A bank with real processes (issue #18 item 5): transactions move money between accounts of
//! a transactional table (`--txn rifl`, 3 shards on 3 nodes) while shard leaders are SIGKILLed
//! and restarted, and while `strata txn` clients are SIGSTOPped in the middle of their
//! two-phase commit; money is neither created nor destroyed, and every account holds exactly
//! what the committed transfers say.
//!
//! * Four in-process clients (`strata_client`) transfer a random amount between two random
//!   accounts with `run_txn`, each transfer reading both balances and writing both (a transfer
//!   whose source holds too little writes nothing). Every committed transfer is recorded.
//! * Twice, the leader of a shard of `bank` is SIGKILLed with transfers in flight; once a new
//!   leader is seen, the node is restarted from its directory and catches up.
//! * Several times, a `strata txn` process moves money between accounts of two different
//!   shards (`add A -x`, `add B x`) and is SIGSTOPped 0-40 ms after it started (aimed, see
//!   `Aim`). If a shard's leader then reports transaction locks (`Status`'s `locks`), the
//!   process stopped between its prepares and its decisions; locks the leaders still hold 50 ms
//!   after the stop waited for recovery (`T_TX`). Once no replica holds locks, the two balances
//!   show whether the transfer took effect, and once resumed (SIGCONT) the process must print
//!   that outcome (`committed`, or `aborted: …` with exit code 8) — also when it was decided
//!   before the stop; one stopped before its prepares runs on after the resume. While a
//!   process is being stopped, observed and recovered, the in-process transfers wait (and
//!   their earlier transactions' locks are gone before it starts), so that every lock seen is
//!   the stopped process's; they run again before it resumes. At least one stopped process
//!   must have held its locks until recovery decided.
//! * At the end every account, read at its leader, equals 100 + what it received − what it
//!   sent in the committed transfers (in-process ones, and `strata txn` ones that printed
//!   `committed`), the total is unchanged, and every replica of every shard reports no lock.
//!
//! `STRATA_BANK_SEED=N` repeats a run's random choices (the processes' timing still varies).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::bank::*;
use common::stopped_txn::*;
use common::*;
use strata_client::{Client, ClientOptions};
use tokio::sync::RwLock;

const TABLE: &str = "bank";
const SHARDS: u32 = 3;
const BANK: Sharded = Sharded { table: TABLE, shards: SHARDS };
const ACCOUNTS: usize = 12;
const INITIAL: u64 = 100;
const MAX_AMOUNT: u64 = 20;
const TRANSFER_TASKS: usize = 4;
const KILLS: usize = 2;
/// Transfers committed before the first event, and between events.
const BETWEEN: usize = 15;
/// `strata txn` processes stopped: at least this many, and more (up to `MAX_PAUSES`) until
/// one of them held its locks until recovery decided.
const MIN_PAUSES: usize = 6;
const MAX_PAUSES: usize = 30;

fn opts() -> ClientOptions {
    ClientOptions {
        retry_for: Duration::from_secs(30),
        request_timeout: Some(Duration::from_secs(30)),
        ..ClientOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bank_transfers_keep_every_balance_under_leader_kills_and_stopped_clients() {
    let t0 = Instant::now();
    let mut rng = Rng::from_env();
    let up = BANK.start_bank("rifl").await;
    let mut restarted = Restarted(Vec::new());
    let endpoints = up.endpoints.clone();
    let mut pids = up.pids.clone();
    let client = Client::connect(&endpoints, opts()).await.unwrap();
    let mut table = client.table(TABLE).await.unwrap();
    let shard_of: Vec<u32> = (0..ACCOUNTS).map(|a| table.shard_of(acct(a).as_bytes())).collect();
    for sh in 0..SHARDS {
        let n = shard_of.iter().filter(|&&s| s == sh).count();
        assert!(n >= 2, "shard {sh} holds {n} accounts: {shard_of:?}");
    }
    for a in 0..ACCOUNTS {
        table.put(acct(a), INITIAL.to_string()).await.unwrap();
    }
    eprintln!("[{:?}] cluster up, {ACCOUNTS} accounts on shards {shard_of:?}", t0.elapsed());

    let gate = Arc::new(RwLock::new(()));
    let stop = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(Vec::new()));
    let counters = Arc::new(Counters::default());
    let tasks: Vec<_> = (0..TRANSFER_TASKS)
        .map(|i| {
            let (gate, stop, log, counters) =
                (gate.clone(), stop.clone(), log.clone(), counters.clone());
            tokio::spawn(transfers(TransferTask {
                task: i,
                endpoints: endpoints.clone(),
                opts: opts(),
                table: TABLE,
                accounts: ACCOUNTS,
                max_amount: MAX_AMOUNT,
                seed: rng.next(),
                gate,
                stop,
                log,
                counters,
            }))
        })
        .collect();

    // Two stopped clients, a kill; two more, another kill; two more, and more until one of the
    // stopped clients held locks.
    let mut bank = StoppedTxns {
        up: &up,
        bank: BANK,
        table,
        accounts: ACCOUNTS,
        max_amount: MAX_AMOUNT,
        shard_of: shard_of.clone(),
        gate,
        aim: Aim::new(),
        resume: Resume::AmidTransfers,
    };
    let mut pauses: Vec<Pause> = Vec::new();
    let mut kills = Vec::new();
    let first = rng.below(u64::from(SHARDS)) as u32;
    let kill_shards: [u32; KILLS] =
        [first, (first + 1 + rng.below(u64::from(SHARDS) - 1) as u32) % SHARDS];
    let report = |p: &Pause, t0: Instant| eprintln!("[{:?}] {}", t0.elapsed(), p.describe());
    for kill in kill_shards.into_iter().map(Some).chain([None]) {
        let n = counters.committed.load(Ordering::Relaxed);
        wait_committed(&counters, n + BETWEEN, Duration::from_secs(30)).await;
        for _ in 0..MIN_PAUSES / (KILLS + 1) {
            let p = pause_one(&mut bank, &mut rng).await;
            report(&p, t0);
            pauses.push(p);
        }
        if let Some(shard) = kill {
            let n = counters.committed.load(Ordering::Relaxed);
            wait_committed(&counters, n + BETWEEN, Duration::from_secs(30)).await;
            let k = BANK
                .kill_leader(&up, &mut pids, &mut restarted, shard, libc::SIGKILL, &counters)
                .await;
            eprintln!(
                "[{:?}] killed n{}, leader of shard {} in epoch {} with {} transfers in flight; n{} led in epoch {} after {:?}; n{} restarted and caught up after {:?}",
                t0.elapsed(),
                k.node,
                k.shard,
                k.epoch,
                k.in_flight,
                k.new_leader,
                k.new_epoch,
                k.failed_over,
                k.node,
                k.caught_up
            );
            assert!(k.in_flight >= 1, "no transfer was in flight at the kill");
            kills.push(k);
        }
    }
    // Until one stop lands between a process's prepares and its decisions, the peer links
    // carry `STOP_PHASE_PEER_DELAY_MS`, which widens that window.
    set_peer_delay(&up, Some(STOP_PHASE_PEER_DELAY_MS));
    // The delay moves the window later, and what the aim learned without it (a step shrunk
    // to a millisecond, pointing early) climbed to it too slowly for MAX_PAUSES once (the
    // stops crept from 2 to 28 ms): learn it afresh.
    bank.aim = Aim::new();
    while pauses.len() < MAX_PAUSES && !pauses.iter().any(Pause::recovered) {
        let p = pause_one(&mut bank, &mut rng).await;
        report(&p, t0);
        pauses.push(p);
    }
    set_peer_delay(&up, None);
    let held = pauses.iter().filter(|p| p.held_locks()).count();
    let recovered: Vec<&Pause> = pauses.iter().filter(|p| p.recovered()).collect();
    assert!(
        !recovered.is_empty(),
        "none of {} stopped `strata txn` processes held its locks until recovery ({held} held some while its decisions were on their way)",
        pauses.len()
    );
    let n = counters.committed.load(Ordering::Relaxed);
    wait_committed(&counters, n + BETWEEN, Duration::from_secs(30)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let transfers_done = t0.elapsed();

    // Every transaction decided everywhere (the in-process clients send their last decisions
    // in the background); then every account holds what the committed transfers say.
    let settled = BANK.wait_quiet(&endpoints, Duration::from_secs(15)).await;
    let mut committed: Vec<Transfer> = log.lock().unwrap().iter().map(|c| c.transfer).collect();
    let in_process = committed.len();
    committed.extend(pauses.iter().filter(|p| p.committed()).map(|p| p.transfer));
    let expected = expected_balances(INITIAL, ACCOUNTS, &committed);
    let balances = read_balances(&mut bank.table, ACCOUNTS).await;
    let total: u64 = balances.iter().sum();
    assert_eq!(total, INITIAL * ACCOUNTS as u64, "money created or destroyed: {balances:?}");
    let as_i64: Vec<i64> = balances.iter().map(|&b| b as i64).collect();
    assert_eq!(
        as_i64,
        expected,
        "the balances (left) differ from what the {} committed transfers ({in_process} in-process) say; the stopped processes: {pauses:#?}",
        committed.len()
    );
    BANK.assert_no_locks_in_status(&up);
    let text = stdout(&up.strata(&["status"]));
    assert!(text.lines().any(|l| l.contains("made_dur") && l.ends_with("locks")), "{text}");

    let recovery_committed = recovered.iter().filter(|p| p.took_effect).count();
    let cli_committed = committed.len() - in_process;
    eprintln!(
        "bank: {} transfers committed ({in_process} in-process, {cli_committed} by strata txn), {} skipped (source too low), {} aborted attempts retried, {} given up; {} leader kills ({} transfers in flight); {} strata txn processes stopped, {held} held locks, {} until recovery decided (committed {recovery_committed}, aborted {}); total {total}; transfers took {transfers_done:?}, settled {settled:?} later, {:?} in all",
        committed.len(),
        counters.skipped.load(Ordering::Relaxed),
        counters.aborted_attempts.load(Ordering::Relaxed),
        counters.gave_up.load(Ordering::Relaxed),
        kills.len(),
        kills.iter().map(|k| k.in_flight).sum::<usize>(),
        pauses.len(),
        recovered.len(),
        recovered.len() - recovery_committed,
        t0.elapsed()
    );
    drop(restarted);
}
