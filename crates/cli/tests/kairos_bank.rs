//! A Kairos bank with real processes (issue #19 item 6): transactions move money between
//! accounts of a Kairos table (`--txn kairos`, server-side validation, 3 shards on 3 node
//! processes) from clients whose clocks are skewed and drift, while shard leaders — each the
//! validator of its shard's keys — are stopped and restarted; no money is created or
//! destroyed, and no committed transaction read a stale value.
//!
//! * Four in-process clients transfer with `run_txn_detailed` (as in `bank.rs`), with clock
//!   offsets −10 ms, +10 ms, 0 and +3 ms and drifts of +50, −50, 0 and +100 ppm
//!   (`ClientOptions::kairos`, kairos.md §9.3). The last one runs in strict mode (K5).
//! * An audit client runs read-only transactions over every account, in strict mode: each
//!   committed audit must sum to the total.
//! * Three times a shard's leader (its validator: with server-side validation the validator
//!   state lives in the shard's log, kairos.md §9.12) is stopped with transfers in flight and
//!   its node restarted from its directory once a new leader is seen: twice by SIGKILL (a
//!   crash), once by SIGTERM (a graceful stop, the node's `NODE_STOPPING` push and shutdown).
//! * Then `strata txn` processes (the real clock, not strict) each move money between
//!   accounts of two shards and are SIGSTOPped shortly after they start
//!   (`common::stopped_txn::pause_one`, as in `bank.rs`) until one of them held its locks
//!   until recovery (`T_TX`) decided its transaction: the balances, read once no replica holds
//!   a lock, show whether it took effect, and the resumed process must print that outcome.
//!   The in-process transfers wait until the process exited (`Resume::Alone`), so the
//!   versions of its two accounts then are what it wrote: a committed one goes into the
//!   history below with the versions it read when it started and those it wrote.
//! * At the end: the total is conserved, every account holds the initial balance plus its
//!   committed transfers (the stopped processes' included), every replica reports no lock, and [`check_history`] finds no
//!   stale read in the recorded commit infos (every read of a committed transaction returned
//!   the version current at its commit timestamp; versions of a key strictly increase; every
//!   RW commit timestamp is above the versions it read); every account's final version is the
//!   last committed write; and strict transactions are in real-time order (K5).
//!
//! `STRATA_BANK_SEED=N` repeats a run's random choices (the processes' timing still varies).

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::bank::*;
use common::stopped_txn::*;
use common::*;
use strata_client::{
    Client, ClientError, ClientOptions, CommitInfo, KairosOptions, ReadInfo, RetryPolicy,
    Timestamp, WriteInfo,
};
use tokio::sync::RwLock;

const TABLE: &str = "kbank";
const SHARDS: u32 = 3;
const BANK: Sharded = Sharded { table: TABLE, shards: SHARDS };
const ACCOUNTS: usize = 12;
const INITIAL: u64 = 100;
const MAX_AMOUNT: u64 = 20;
/// Each transfer client's clock: offset (ms), drift (ppm), strict mode.
const CLOCKS: [(i64, i32, bool); 4] =
    [(-10, 50, false), (10, -50, false), (0, 0, false), (3, 100, true)];
/// The audit client's clock (strict).
const AUDIT_CLOCK: (i64, i32, bool) = (0, 0, true);
/// Strict mode's bound on clock error. The strict clients' clocks differ by 3 ms plus under
/// 10 ms of drift over a minute: within `eps` (docs/design.md: the spread).
const EPS: Duration = Duration::from_millis(10);
/// Transfers committed before the first event, between events and after the last.
const BETWEEN: usize = 15;
/// Audits committed by the end, and the attempts of one before the transfers are paused.
const MIN_AUDITS: usize = 4;
const AUDIT_ATTEMPTS: u32 = 20;
/// `strata txn` processes stopped: at least this many, and more (up to `MAX_PAUSES`) until
/// one of them held its locks until recovery decided.
const MIN_PAUSES: usize = 2;
const MAX_PAUSES: usize = 20;

fn opts((offset_ms, drift_ppm, strict): (i64, i32, bool)) -> ClientOptions {
    ClientOptions {
        retry_for: Duration::from_secs(30),
        request_timeout: Some(Duration::from_secs(30)),
        kairos: KairosOptions {
            clock_offset_ns: offset_ms * 1_000_000,
            clock_drift_ppm: drift_ppm,
            strict_eps: strict.then_some(EPS),
        },
        ..ClientOptions::default()
    }
}

/// Polls `cond` every 10 ms until it holds; panics with `what` after `within`.
async fn eventually_async(what: &str, within: Duration, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out after {within:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ---- the oracle ----

/// What a committed transaction of the history is: its commit info, and for strict ones
/// when it began and when it was reported (K5).
#[derive(Clone, Debug)]
struct Recorded {
    info: CommitInfo,
    strict: Option<(Instant, Instant)>,
}

/// What [`check_history`] verified.
#[derive(Debug, Default, PartialEq, Eq)]
struct Checked {
    txns: usize,
    reads: usize,
    versions: usize,
}

/// kairos.md §7 inv. 1-3, 5 over committed transactions only (server-side reads cannot be
/// "cached", so every read is checked against the serial order): per key, the committed
/// writes ordered by commit timestamp; a read of `k` by `T` must have returned exactly the
/// version current at `T.commit` — the last write of `k` below `T.commit` (RO: at or below,
/// an RO at an RW's timestamp being ordered after it, K1), or the initial `ZERO` version —
/// with that write's value; two writes of a key at one timestamp are an error (versions
/// strictly increase), and an RW transaction's commit timestamp is above every version it
/// read.
fn check_history(txns: &[CommitInfo]) -> Result<Checked, String> {
    type Key = (String, Bytes);
    let mut versions: BTreeMap<Key, BTreeMap<Timestamp, Option<Bytes>>> = BTreeMap::new();
    for t in txns {
        for (table, key, value) in &t.writes {
            let id = (table.clone(), key.clone());
            if versions.entry(id).or_default().insert(t.commit_ts, value.clone()).is_some() {
                return Err(format!(
                    "two writes of {key:?} at {}: versions must strictly increase",
                    t.commit_ts
                ));
            }
        }
    }
    let mut checked = Checked { txns: txns.len(), ..Checked::default() };
    checked.versions = versions.values().map(BTreeMap::len).sum();
    for t in txns {
        for r in &t.reads {
            if !t.read_only && r.vts >= t.commit_ts {
                return Err(format!(
                    "RW at {} read {:?} at {}: not above it",
                    t.commit_ts, r.key, r.vts
                ));
            }
            let history = versions.get(&(r.table.clone(), r.key.clone()));
            let current = history.and_then(|h| {
                let below =
                    if t.read_only { h.range(..=t.commit_ts) } else { h.range(..t.commit_ts) };
                below.last()
            });
            let (vts, value) = current.map_or((Timestamp::ZERO, None), |(ts, v)| (*ts, v.clone()));
            if (r.vts, &r.value) != (vts, &value) {
                return Err(format!(
                    "stale read: the {} transaction at {} read {:?} = {:?} at {}, but the version current at its commit timestamp is {:?} at {vts}",
                    if t.read_only { "RO" } else { "RW" },
                    t.commit_ts,
                    r.key,
                    r.value,
                    r.vts,
                    value
                ));
            }
            checked.reads += 1;
        }
    }
    Ok(checked)
}

/// K5 (kairos.md §7 inv. 11) among strict transactions: one reported before another began
/// has the smaller commit timestamp. Returns the pairs compared.
fn check_real_time_order(recorded: &[Recorded]) -> Result<usize, String> {
    let mut strict: Vec<(Instant, Instant, Timestamp)> = recorded
        .iter()
        .filter_map(|r| r.strict.map(|(began, reported)| (began, reported, r.info.commit_ts)))
        .collect();
    strict.sort_by_key(|s| s.1);
    let mut pairs = 0;
    for (i, &(_, reported, t1)) in strict.iter().enumerate() {
        for &(began, _, t2) in &strict[i + 1..] {
            if began > reported {
                pairs += 1;
                if t2 <= t1 {
                    return Err(format!("K5: {t2} began after {t1} was reported"));
                }
            }
        }
    }
    Ok(pairs)
}

// ---- audits ----

/// Audits so far: committed among the transfers, and committed with the transfers paused.
#[derive(Default)]
struct Audits {
    contended: AtomicUsize,
    gated: AtomicUsize,
    /// Held by the test while it stops a leader (with transfers in flight): an audit does not
    /// pause the transfers meanwhile.
    no_pause: tokio::sync::Mutex<()>,
}

impl Audits {
    fn done(&self) -> usize {
        self.contended.load(Ordering::Relaxed) + self.gated.load(Ordering::Relaxed)
    }
}

/// Read-only audits in strict mode until `stop`: every account in one transaction, whose sum
/// must be the total; each committed audit is recorded. An audit reads all twelve accounts,
/// so concurrent transfers often make it stale: after `AUDIT_ATTEMPTS` aborted attempts it
/// runs again with the transfers paused (`gate`), so audits make progress.
async fn audits(
    endpoints: Vec<std::net::SocketAddr>,
    gate: Arc<RwLock<()>>,
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<Vec<Recorded>>>,
    done: Arc<Audits>,
) {
    let client = Client::connect(&endpoints, opts(AUDIT_CLOCK)).await.unwrap();
    let policy = RetryPolicy { attempts: AUDIT_ATTEMPTS, ..RetryPolicy::default() };
    while !stop.load(Ordering::Relaxed) {
        let began = Instant::now();
        let (sum, info) = match audit(&client, policy).await {
            Ok(r) => {
                done.contended.fetch_add(1, Ordering::Relaxed);
                r
            }
            Err(ClientError::TxnAborted { .. }) => {
                let _allowed = done.no_pause.lock().await;
                let _paused = gate.write().await;
                done.gated.fetch_add(1, Ordering::Relaxed);
                audit(&client, policy).await.expect("an audit alone commits")
            }
            Err(e) => panic!("audit: the library must hide the faults, got {e}"),
        };
        let info = info.expect("a committed Kairos transaction says what it saw");
        assert!(info.read_only);
        assert_eq!(sum, INITIAL * ACCOUNTS as u64, "audit at {}: {:?}", info.commit_ts, info.reads);
        log.lock().unwrap().push(Recorded { info, strict: Some((began, Instant::now())) });
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One audit: the sum of every account, and what the committed attempt saw.
async fn audit(
    client: &Client,
    policy: RetryPolicy,
) -> Result<(u64, Option<CommitInfo>), ClientError> {
    client
        .run_txn_detailed(policy, |tx| {
            Box::pin(async move {
                let mut sum = 0;
                for a in 0..ACCOUNTS {
                    sum += balance(tx.read(TABLE, acct(a)).await?, a);
                }
                Ok(sum)
            })
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kairos_bank_keeps_every_balance_and_commits_no_stale_read_under_skew_and_leader_restarts()
{
    let t0 = Instant::now();
    let mut rng = Rng::from_env();
    let up = BANK.start_bank("kairos").await;
    let mut restarted = Restarted(Vec::new());
    let endpoints = up.endpoints.clone();
    let mut pids = up.pids.clone();
    let client = Client::connect(&endpoints, opts((0, 0, false))).await.unwrap();
    let mut table = client.table(TABLE).await.unwrap();
    let shard_of: Vec<u32> = (0..ACCOUNTS).map(|a| table.shard_of(acct(a).as_bytes())).collect();
    // A Kairos table's keys are written by transactions only: the accounts by one.
    let mut init = client.transaction();
    for a in 0..ACCOUNTS {
        init.write(TABLE, acct(a), INITIAL.to_string());
    }
    let (outcome, info) = init.commit_detailed().await.unwrap();
    assert_eq!(outcome, strata_client::TxnOutcome::Committed);
    let history = Arc::new(Mutex::new(vec![Recorded { info: info.unwrap(), strict: None }]));
    // Its decisions travel in the background, and a Kairos read does not wait for them
    // (kairos.md §5.3): wait until every account reads.
    let deadline = Instant::now() + Duration::from_secs(10);
    for a in 0..ACCOUNTS {
        while table.get(acct(a)).await.unwrap().value.is_none() {
            assert!(Instant::now() < deadline, "{} not written", acct(a));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    eprintln!("[{:?}] cluster up, {ACCOUNTS} accounts on shards {shard_of:?}", t0.elapsed());

    let gate = Arc::new(RwLock::new(()));
    let stop = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(Vec::new()));
    let counters = Arc::new(Counters::default());
    let tasks: Vec<_> = CLOCKS
        .iter()
        .enumerate()
        .map(|(i, &clock)| {
            tokio::spawn(transfers(TransferTask {
                task: i,
                endpoints: endpoints.clone(),
                opts: opts(clock),
                table: TABLE,
                accounts: ACCOUNTS,
                max_amount: MAX_AMOUNT,
                seed: rng.next(),
                gate: gate.clone(),
                stop: stop.clone(),
                log: log.clone(),
                counters: counters.clone(),
            }))
        })
        .collect();
    let audited = Arc::new(Audits::default());
    let auditor = tokio::spawn(audits(
        endpoints.clone(),
        gate.clone(),
        stop.clone(),
        history.clone(),
        audited.clone(),
    ));

    // Two crashes and a graceful stop of shard leaders, on three different shards in a seeded
    // order.
    let first = rng.below(u64::from(SHARDS)) as u32;
    let second = (first + 1 + rng.below(u64::from(SHARDS) - 1) as u32) % SHARDS;
    let third = 3 - first - second;
    let mut kills = Vec::new();
    for (shard, signal) in [(first, libc::SIGKILL), (second, libc::SIGKILL), (third, libc::SIGTERM)]
    {
        let n = counters.committed.load(Ordering::Relaxed);
        wait_committed(&counters, n + BETWEEN, Duration::from_secs(30)).await;
        let no_pause = audited.no_pause.lock().await;
        eventually_async("a transfer in flight", Duration::from_secs(10), || {
            counters.in_flight.load(Ordering::Relaxed) >= 1
        })
        .await;
        let k = BANK.kill_leader(&up, &mut pids, &mut restarted, shard, signal, &counters).await;
        drop(no_pause);
        eprintln!(
            "[{:?}] {} n{}, leader of shard {} in epoch {} with {} transfers in flight; n{} led in epoch {} after {:?}; n{} restarted and caught up after {:?}",
            t0.elapsed(),
            if signal == libc::SIGKILL { "killed" } else { "stopped (SIGTERM)" },
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
        assert!(k.in_flight >= 1, "no transfer was in flight at the stop");
        kills.push(k);
    }
    let pauses = stop_txn_processes(&up, &client, &shard_of, &gate, &mut rng, t0).await;
    let n = counters.committed.load(Ordering::Relaxed);
    wait_committed(&counters, n + BETWEEN, Duration::from_secs(30)).await;
    eventually_async("audits", Duration::from_secs(30), || audited.done() >= MIN_AUDITS).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    auditor.await.unwrap();
    let audits_done = audited.done();
    let transfers_done = t0.elapsed();

    // Every transaction decided everywhere; every account holds what the transfers say.
    let settled = BANK.wait_quiet(&endpoints, Duration::from_secs(15)).await;
    let committed: Vec<Committed> = log.lock().unwrap().clone();
    let committed_pauses: Vec<&Pause> = pauses.iter().filter(|p| p.committed()).collect();
    let mut transfers: Vec<Transfer> = committed.iter().map(|c| c.transfer).collect();
    transfers.extend(committed_pauses.iter().map(|p| p.transfer));
    let expected = expected_balances(INITIAL, ACCOUNTS, &transfers);
    let balances = read_balances(&mut table, ACCOUNTS).await;
    let total: u64 = balances.iter().sum();
    assert_eq!(total, INITIAL * ACCOUNTS as u64, "money created or destroyed: {balances:?}");
    let as_i64: Vec<i64> = balances.iter().map(|&b| b as i64).collect();
    assert_eq!(
        as_i64,
        expected,
        "the balances (left) differ from what the {} committed transfers say",
        transfers.len()
    );
    BANK.assert_no_locks_in_status(&up);

    // No stale read committed, and strict transactions in real-time order.
    let mut recorded = history.lock().unwrap().clone();
    for c in &committed {
        let info = c.info.clone().expect("a committed Kairos transfer says what it saw");
        let strict = CLOCKS[c.task].2.then_some((c.began, c.reported));
        recorded.push(Recorded { info, strict });
    }
    for p in &committed_pauses {
        recorded.push(Recorded { info: pause_commit_info(p), strict: None });
    }
    let infos: Vec<CommitInfo> = recorded.iter().map(|r| r.info.clone()).collect();
    let checked = check_history(&infos).unwrap_or_else(|e| panic!("{e}"));
    // The last committed write of each account is what its leader holds, at that version.
    for a in 0..ACCOUNTS {
        let r = table.get(acct(a)).await.unwrap();
        let last = infos
            .iter()
            .filter(|t| t.writes.iter().any(|(_, k, _)| k[..] == *acct(a).as_bytes()))
            .map(|t| t.commit_ts)
            .max();
        assert_eq!(Some(r.vts), last, "{}: its version is not its last committed write", acct(a));
    }
    let pairs = check_real_time_order(&recorded).unwrap_or_else(|e| panic!("{e}"));
    assert!(pairs >= 1, "no strict transaction began after another was reported");
    let recovered: Vec<&Pause> = pauses.iter().filter(|p| p.recovered()).collect();
    let recovery_committed = recovered.iter().filter(|p| p.took_effect).count();

    eprintln!(
        "kairos bank: {} transfers committed, {} skipped (source too low), {} aborted attempts retried, {} given up; {audits_done} audits ({} with the transfers paused); {} leader stops ({} transfers in flight); {} strata txn processes stopped, {} held locks, {} until recovery decided (committed {recovery_committed}), {} committed in all; history: {checked:?}, {pairs} strict pairs in real-time order; total {total}; transfers took {transfers_done:?}, settled {settled:?} later, {:?} in all",
        transfers.len(),
        counters.skipped.load(Ordering::Relaxed),
        counters.aborted_attempts.load(Ordering::Relaxed),
        counters.gave_up.load(Ordering::Relaxed),
        audited.gated.load(Ordering::Relaxed),
        kills.len(),
        kills.iter().map(|k| k.in_flight).sum::<usize>(),
        pauses.len(),
        pauses.iter().filter(|p| p.held_locks()).count(),
        recovered.len(),
        committed_pauses.len(),
        t0.elapsed()
    );
    drop(restarted);
}

// ---- stopped `strata txn` processes ----

/// Stops `strata txn` transfers (`pause_one`) until at least `MIN_PAUSES` ran and one held its
/// locks until recovery decided (at most `MAX_PAUSES`); the in-process transfers and the
/// audits run between them.
async fn stop_txn_processes(
    up: &Up,
    client: &Client,
    shard_of: &[u32],
    gate: &Arc<RwLock<()>>,
    rng: &mut Rng,
    t0: Instant,
) -> Vec<Pause> {
    let mut stopped = StoppedTxns {
        up,
        bank: BANK,
        table: client.table(TABLE).await.unwrap(),
        accounts: ACCOUNTS,
        max_amount: MAX_AMOUNT,
        shard_of: shard_of.to_vec(),
        gate: gate.clone(),
        aim: Aim::new(),
        resume: Resume::Alone,
    };
    set_peer_delay(up, Some(STOP_PHASE_PEER_DELAY_MS));
    let mut pauses: Vec<Pause> = Vec::new();
    while pauses.len() < MIN_PAUSES
        || (pauses.len() < MAX_PAUSES && !pauses.iter().any(Pause::recovered))
    {
        let p = pause_one(&mut stopped, rng).await;
        eprintln!("[{:?}] {}", t0.elapsed(), p.describe());
        pauses.push(p);
    }
    set_peer_delay(up, None);
    let held = pauses.iter().filter(|p| p.held_locks()).count();
    assert!(
        pauses.iter().any(Pause::recovered),
        "none of {} stopped `strata txn` processes held its locks until recovery ({held} held some while its decisions were on their way)",
        pauses.len()
    );
    pauses
}

/// A stopped process's committed transfer as the history checker sees it: it read its two
/// accounts at the versions they had when it started and wrote both at its commit timestamp,
/// which their versions carry once it exited (`Resume::Alone`: nothing else wrote them).
fn pause_commit_info(p: &Pause) -> CommitInfo {
    let after = p.after_exit.as_ref().expect("Resume::Alone reads the versions after the exit");
    assert_eq!(after[0].1, after[1].1, "{p:?}: one transaction's writes at two timestamps");
    let keys = [acct(p.transfer.from), acct(p.transfer.to)].map(Bytes::from);
    let reads = keys.iter().zip(&p.read).map(|(key, (value, vts))| ReadInfo {
        table: TABLE.into(),
        key: key.clone(),
        value: Some(value.clone()),
        vts: *vts,
    });
    let writes =
        keys.iter().zip(after).map(|(key, (v, _))| (TABLE.into(), key.clone(), Some(v.clone())));
    txn(after[0].1, reads.collect(), writes.collect())
}

// ---- the checkers' canaries ----

fn ts(nanos: u64, node: u32) -> Timestamp {
    Timestamp::new(nanos, node)
}

fn write(key: &str, value: &str) -> WriteInfo {
    (TABLE.into(), Bytes::from(key.to_string()), Some(Bytes::from(value.to_string())))
}

fn read(key: &str, value: Option<&str>, vts: Timestamp) -> ReadInfo {
    ReadInfo {
        table: TABLE.into(),
        key: Bytes::from(key.to_string()),
        value: value.map(|v| Bytes::from(v.to_string())),
        vts,
    }
}

fn txn(commit_ts: Timestamp, reads: Vec<ReadInfo>, writes: Vec<WriteInfo>) -> CommitInfo {
    CommitInfo { commit_ts, read_only: writes.is_empty(), reads, writes }
}

/// A history of two writers of `k` (at 10 and 20) and readers that saw the right versions:
/// the checker accepts it, then flags each planted fault.
#[test]
fn the_history_checker_flags_stale_reads_and_repeated_versions() {
    let good = vec![
        txn(ts(10, 1), vec![read("k", None, Timestamp::ZERO)], vec![write("k", "a")]),
        txn(ts(20, 2), vec![read("k", Some("a"), ts(10, 1))], vec![write("k", "b")]),
        // RO at exactly the writer's timestamp is ordered after it (K1).
        txn(ts(20, 2), vec![read("k", Some("b"), ts(20, 2))], vec![]),
        txn(ts(15, 3), vec![read("k", Some("a"), ts(10, 1))], vec![]),
    ];
    let ok = check_history(&good).unwrap();
    assert_eq!(ok, Checked { txns: 4, reads: 4, versions: 2 });

    // The canary: an RW committed at 30 that read k's version 10, superseded at 20.
    let mut stale = good.clone();
    stale.push(txn(ts(30, 4), vec![read("k", Some("a"), ts(10, 1))], vec![write("j", "x")]));
    assert!(check_history(&stale).unwrap_err().contains("stale read"));
    // An RO whose timestamp is past a write it did not see.
    let mut stale_ro = good.clone();
    stale_ro.push(txn(ts(25, 5), vec![read("k", Some("a"), ts(10, 1))], vec![]));
    assert!(check_history(&stale_ro).unwrap_err().contains("stale read"));
    // The right version with the wrong value.
    let mut wrong_value = good.clone();
    wrong_value.push(txn(ts(25, 5), vec![read("k", Some("a"), ts(20, 2))], vec![]));
    assert!(check_history(&wrong_value).unwrap_err().contains("stale read"));
    // Two writes of k at one timestamp.
    let mut twice = good.clone();
    twice.push(txn(ts(20, 2), vec![], vec![write("k", "c")]));
    assert!(check_history(&twice).unwrap_err().contains("strictly increase"));
    // An RW not above a version it read.
    let mut order = good;
    order.push(txn(ts(20, 2), vec![read("k", Some("b"), ts(20, 2))], vec![write("j", "y")]));
    assert!(check_history(&order).unwrap_err().contains("not above"));
}

/// K5's checker accepts strict transactions in real-time order and flags one that began
/// after another was reported with a smaller commit timestamp.
#[test]
fn the_real_time_checker_flags_an_inversion() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let strict = |c: u64, began: u64, reported: u64| Recorded {
        info: txn(ts(c, 1), vec![], vec![]),
        strict: Some((at(began), at(reported))),
    };
    let good = vec![strict(100, 0, 10), strict(200, 20, 30), strict(150, 5, 40)];
    assert_eq!(check_real_time_order(&good), Ok(1));
    let mut inverted = good;
    inverted.push(strict(120, 35, 50));
    assert!(check_real_time_order(&inverted).unwrap_err().contains("K5"));
}
