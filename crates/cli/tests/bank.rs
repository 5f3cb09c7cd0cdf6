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

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::bank::*;
use common::*;
use strata_client::{Client, ClientOptions, Table};
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

// ---- stopped `strata txn` processes ----

/// A `strata txn` process; killed if still running when dropped (a failed test leaves no
/// stopped process behind).
struct TxnProcess {
    child: Child,
}

impl TxnProcess {
    fn spawn(data_dir: &Path, input: &str) -> TxnProcess {
        let mut child = Command::new(STRATA)
            .args(["txn", "--table", TABLE])
            .arg("--data-dir")
            .arg(data_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Closing standard input lets it start: it reads every line first.
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        TxnProcess { child }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: signalling the process this test spawned (not yet reaped: `wait` reaps it).
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, sig) }, 0);
    }

    /// Its exit code, standard output and standard error, once it exited.
    async fn wait(&mut self, within: Duration) -> (Option<i32>, String, String) {
        let deadline = Instant::now() + within;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "`strata txn` did not exit within {within:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let (mut out, mut err) = (String::new(), String::new());
        self.child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        self.child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        (status.code(), out, err)
    }
}

impl Drop for TxnProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// How long the shards' leaders must keep a stopped process's locks for them to have waited
/// for recovery: its own decisions, had it sent them before it stopped, land within a few
/// milliseconds; recovery starts `T_TX` = 100 ms (two objects) after a leader noticed them.
const RECOVERY_EVIDENCE: Duration = Duration::from_millis(50);

/// One stopped `strata txn` process.
#[derive(Debug)]
struct Pause {
    transfer: Transfer,
    delay: Duration,
    /// While it was stopped: the largest number of locks seen on all replicas, and on the
    /// shards' leaders; the last time (since the stop) a leader still held some, and when
    /// every replica was free of them again.
    locks_seen: u64,
    leader_locks_seen: u64,
    leaders_locked_for: Option<Duration>,
    unlocked_after: Option<Duration>,
    /// Whether the transfer had taken effect (the two balances moved) once no replica held
    /// its locks, the process still stopped.
    took_effect: bool,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Pause {
    /// Stopped between its prepares and its decisions: a shard's leader held its locks.
    fn held_locks(&self) -> bool {
        self.leader_locks_seen > 0
    }

    /// Held them until recovery decided (see `RECOVERY_EVIDENCE`).
    fn recovered(&self) -> bool {
        self.leaders_locked_for.is_some_and(|d| d >= RECOVERY_EVIDENCE)
    }

    /// Whether the transaction was decided while the process was stopped: by recovery or by
    /// its own decisions on their way (locks seen), or before the stop (it took effect).
    fn decided_while_stopped(&self) -> bool {
        self.locks_seen > 0 || self.took_effect
    }

    fn committed(&self) -> bool {
        self.code == Some(0) && self.stdout == "committed\n"
    }

    fn aborted(&self) -> bool {
        self.code == Some(8) && self.stdout.starts_with("aborted: ")
    }
}

/// When to stop the next `strata txn` process. A process reaches its prepares a few
/// milliseconds after it starts and decides a few milliseconds later (timings of this
/// machine and build): a delay drawn from 0-40 ms rarely falls between. The first
/// attempts draw from 0-40 ms; then the aim moves later after a process stopped before its
/// prepares, earlier after one stopped after them (decided by itself), by a step halved at
/// each change of direction, and draws within ±3 ms of it (always within 0-40 ms).
struct Aim {
    at_ms: f64,
    step_ms: f64,
    last_later: Option<bool>,
    attempts: usize,
}

impl Aim {
    const UNIFORM: usize = 2;

    fn new() -> Aim {
        Aim { at_ms: 20.0, step_ms: 8.0, last_later: None, attempts: 0 }
    }

    fn delay(&mut self, rng: &mut Rng) -> Duration {
        self.attempts += 1;
        if self.attempts <= Aim::UNIFORM {
            return Duration::from_micros(rng.below(40_001));
        }
        let jitter = rng.below(6_001) as f64 / 1000.0 - 3.0;
        Duration::from_secs_f64((self.at_ms + jitter).clamp(0.0, 40.0) / 1000.0)
    }

    fn learn(&mut self, p: &Pause) {
        if p.recovered() {
            return;
        }
        // Before its prepares: nothing locked, nothing took effect.
        let later = !p.held_locks() && !p.took_effect;
        let at = p.delay.as_secs_f64() * 1000.0;
        if self.attempts <= Aim::UNIFORM {
            self.at_ms = at;
        }
        if self.last_later.is_some_and(|l| l != later) {
            self.step_ms = (self.step_ms / 2.0).max(0.5);
        }
        let step = if later { self.step_ms } else { -self.step_ms };
        self.at_ms = (self.at_ms + step).clamp(0.0, 40.0);
        self.last_later = Some(later);
    }
}

struct Bank<'a> {
    up: &'a Up,
    table: Table,
    shard_of: Vec<u32>,
    gate: Arc<RwLock<()>>,
    aim: Aim,
}

/// Runs one transfer in a `strata txn` process and SIGSTOPs it shortly after it started (see
/// the module docs).
async fn pause_one(bank: &mut Bank<'_>, rng: &mut Rng) -> Pause {
    let endpoints = bank.up.endpoints.clone();
    let quiet_gate = bank.gate.write().await;
    // The in-process transfers are paused; their last decisions are applied everywhere.
    BANK.wait_quiet(&endpoints, Duration::from_secs(15)).await;
    let before = read_balances(&mut bank.table, ACCOUNTS).await;
    let amount = 1 + rng.below(MAX_AMOUNT);
    let sources: Vec<usize> = (0..ACCOUNTS).filter(|&a| before[a] >= amount).collect();
    let from = rng.pick(&sources);
    let targets: Vec<usize> =
        (0..ACCOUNTS).filter(|&a| bank.shard_of[a] != bank.shard_of[from]).collect();
    let to = rng.pick(&targets);
    let transfer = Transfer { from, to, amount };
    let mut moved = before.clone();
    moved[from] -= amount;
    moved[to] += amount;
    let delay = bank.aim.delay(rng);
    let input = format!("add {} -{amount}\nadd {} {amount}\n", acct(from), acct(to));
    let started = Instant::now();
    let mut proc = TxnProcess::spawn(&bank.up.data_dir, &input);
    tokio::time::sleep_until((started + delay).into()).await;
    proc.signal(libc::SIGSTOP);
    let stopped = Instant::now();
    // Watch the locks: none within 60 ms (a prepare already sent lands within that too), or
    // until every replica is free of them again — recovery decides while the process is
    // stopped, unless its decisions were already on their way.
    let (mut locks_seen, mut leader_locks_seen, mut leaders_locked_for) = (0, 0, None);
    let unlocked_after = loop {
        let sts = statuses(&endpoints).await;
        let at = stopped.elapsed();
        let (all, leaders) = BANK.lock_totals(&sts);
        locks_seen = locks_seen.max(all);
        leader_locks_seen = leader_locks_seen.max(leaders);
        if leaders > 0 {
            leaders_locked_for = Some(at);
        }
        if locks_seen == 0 && at >= Duration::from_millis(60) {
            break None;
        }
        if locks_seen > 0 && BANK.quiet(&sts) {
            break Some(at);
        }
        assert!(
            at < Duration::from_secs(15),
            "{transfer:?} stopped: locks (node, shard, role, locks) still held after {at:?}: {:?}",
            BANK.locked(&sts)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    // No transaction holds a lock now and no other runs: the balances show whether the
    // transfer took effect (all of it, or none).
    let now = read_balances(&mut bank.table, ACCOUNTS).await;
    let took_effect = if now == moved {
        true
    } else if now == before {
        false
    } else {
        panic!("{transfer:?} stopped: the balances are {now:?}, neither {before:?} (no effect) nor {moved:?} (its effect)")
    };
    // The in-process transfers run again, then the process resumes.
    drop(quiet_gate);
    proc.signal(libc::SIGCONT);
    let (code, stdout, stderr) = proc.wait(Duration::from_secs(30)).await;
    let pause = Pause {
        transfer,
        delay,
        locks_seen,
        leader_locks_seen,
        leaders_locked_for,
        unlocked_after,
        took_effect,
        code,
        stdout,
        stderr,
    };
    if pause.decided_while_stopped() {
        // A resumed client reports the outcome recovery (or its own decisions) applied.
        if took_effect {
            assert!(pause.committed(), "the transfer took effect, the client says: {pause:?}");
        } else {
            assert!(pause.aborted(), "the transfer was aborted, the client says: {pause:?}");
        }
    } else {
        // Stopped before its prepares: it ran after the resume, decided as usual.
        assert!(pause.committed() || pause.aborted(), "{pause:?}");
    }
    bank.aim.learn(&pause);
    pause
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bank_transfers_keep_every_balance_under_leader_kills_and_stopped_clients() {
    let t0 = Instant::now();
    let mut rng = Rng::from_env();
    let up = Up::start_with(3, &[PLAIN]);
    let mut restarted = Restarted(Vec::new());
    let endpoints = up.endpoints.clone();
    let mut pids = up.pids.clone();
    let out = up.strata(&["table", "create", TABLE, "--txn", "rifl", "--shards", "3"]);
    assert!(out.status.success(), "table create: {}{}", stdout(&out), stderr(&out));
    for shard in 0..SHARDS {
        BANK.wait_leader(&endpoints, shard, 1, Duration::from_secs(15)).await;
    }
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
    let mut bank = Bank { up: &up, table, shard_of: shard_of.clone(), gate, aim: Aim::new() };
    let mut pauses: Vec<Pause> = Vec::new();
    let mut kills = Vec::new();
    let first = rng.below(u64::from(SHARDS)) as u32;
    let kill_shards: [u32; KILLS] =
        [first, (first + 1 + rng.below(u64::from(SHARDS) - 1) as u32) % SHARDS];
    let report = |p: &Pause, t0: Instant| {
        eprintln!(
            "[{:?}] strata txn {:?} stopped after {:?}: {} locks seen ({} at leaders, still {:?} after the stop), all gone after {:?}{}; it printed {:?} (exit {:?}){}",
            t0.elapsed(),
            p.transfer,
            p.delay,
            p.locks_seen,
            p.leader_locks_seen,
            p.leaders_locked_for,
            p.unlocked_after,
            match (p.decided_while_stopped(), p.took_effect, p.recovered()) {
                (true, true, true) => ": recovery committed",
                (true, false, true) => ": recovery aborted",
                (true, true, false) => ": committed before or while stopped",
                (true, false, false) => ": aborted while stopped",
                (false, _, _) => ": undecided while stopped",
            },
            p.stdout.trim_end(),
            p.code,
            if p.stderr.is_empty() { String::new() } else { format!(", stderr {:?}", p.stderr) }
        )
    };
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
    while pauses.len() < MAX_PAUSES && !pauses.iter().any(Pause::recovered) {
        let p = pause_one(&mut bank, &mut rng).await;
        report(&p, t0);
        pauses.push(p);
    }
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
