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
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use strata_client::{
    Client, ClientError, ClientOptions, NodeId, NodeStatus, RetryPolicy, ShardRole, ShardStatus,
    Table,
};
use tokio::net::TcpStream;
use tokio::sync::RwLock;

const TABLE: &str = "bank";
const SHARDS: u32 = 3;
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

fn acct(a: usize) -> String {
    format!("acct{a}")
}

fn opts() -> ClientOptions {
    ClientOptions {
        retry_for: Duration::from_secs(30),
        request_timeout: Some(Duration::from_secs(30)),
        ..ClientOptions::default()
    }
}

/// SplitMix64: the test's random choices, reproducible from the seed it prints.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len() as u64) as usize]
    }
}

/// One committed transfer.
#[derive(Clone, Copy, Debug)]
struct Transfer {
    from: usize,
    to: usize,
    amount: u64,
}

#[derive(Default)]
struct Counters {
    committed: AtomicUsize,
    /// The source held less than the amount: the body wrote nothing.
    skipped: AtomicUsize,
    /// Attempts that aborted (conflicts, locks) and were run again by `run_txn`.
    aborted_attempts: AtomicU64,
    /// Transfers whose every attempt aborted (nothing took effect).
    gave_up: AtomicUsize,
    /// Transfers between `run_txn`'s call and its return.
    in_flight: AtomicUsize,
}

fn balance(v: Option<Bytes>, a: usize) -> u64 {
    let v = v.unwrap_or_else(|| panic!("{} is absent", acct(a)));
    std::str::from_utf8(&v)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{} holds {v:?}, not a balance", acct(a)))
}

/// One in-process client's transfers, one at a time, until `stop`.
#[allow(clippy::too_many_arguments)]
async fn transfers(
    task: usize,
    endpoints: Vec<SocketAddr>,
    seed: u64,
    gate: Arc<RwLock<()>>,
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<Vec<Transfer>>>,
    counters: Arc<Counters>,
) {
    let client = Client::connect(&endpoints, opts()).await.unwrap();
    let mut rng = Rng(seed);
    let policy = RetryPolicy {
        attempts: 200,
        backoff: Duration::from_micros(100),
        max_backoff: Duration::from_millis(20),
    };
    while !stop.load(Ordering::Relaxed) {
        let from = rng.below(ACCOUNTS as u64) as usize;
        let mut to = rng.below(ACCOUNTS as u64 - 1) as usize;
        if to >= from {
            to += 1;
        }
        let amount = 1 + rng.below(MAX_AMOUNT);
        let attempts = Arc::new(AtomicU64::new(0));
        let result = {
            let _open = gate.read().await;
            counters.in_flight.fetch_add(1, Ordering::Relaxed);
            let tries = attempts.clone();
            let r = client
                .run_txn(policy, move |tx| {
                    let tries = tries.clone();
                    Box::pin(async move {
                        tries.fetch_add(1, Ordering::Relaxed);
                        let mine = balance(tx.read(TABLE, acct(from)).await?, from);
                        if mine < amount {
                            return Ok(false);
                        }
                        let theirs = balance(tx.read(TABLE, acct(to)).await?, to);
                        tx.write(TABLE, acct(from), (mine - amount).to_string());
                        tx.write(TABLE, acct(to), (theirs + amount).to_string());
                        Ok(true)
                    })
                })
                .await;
            counters.in_flight.fetch_sub(1, Ordering::Relaxed);
            r
        };
        let attempts = attempts.load(Ordering::Relaxed);
        match result {
            Ok(true) => {
                log.lock().unwrap().push(Transfer { from, to, amount });
                counters.committed.fetch_add(1, Ordering::Relaxed);
                counters.aborted_attempts.fetch_add(attempts - 1, Ordering::Relaxed);
            }
            Ok(false) => {
                counters.skipped.fetch_add(1, Ordering::Relaxed);
                counters.aborted_attempts.fetch_add(attempts - 1, Ordering::Relaxed);
            }
            Err(ClientError::TxnAborted { .. }) => {
                counters.gave_up.fetch_add(1, Ordering::Relaxed);
                counters.aborted_attempts.fetch_add(attempts, Ordering::Relaxed);
            }
            Err(e) => panic!(
                "task {task}: transfer of {amount} from {} to {}: the library must hide the faults, got {e}",
                acct(from),
                acct(to)
            ),
        }
    }
}

async fn wait_committed(counters: &Counters, n: usize, within: Duration) {
    let deadline = Instant::now() + within;
    while counters.committed.load(Ordering::Relaxed) < n {
        assert!(
            Instant::now() < deadline,
            "no progress: {} of {n} transfers committed within {within:?}",
            counters.committed.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

// ---- what the nodes report ----

/// A node's status, or `None` if it does not answer soon (killed, restarting).
async fn node_status(addr: SocketAddr) -> Option<NodeStatus> {
    let o = ClientOptions {
        connect_timeout: Duration::from_millis(500),
        request_timeout: Some(Duration::from_secs(1)),
        ..ClientOptions::default()
    };
    let ask = async { Client::connect_node(addr, o).await.ok()?.status().await.ok() };
    tokio::time::timeout(Duration::from_secs(2), ask).await.ok().flatten()
}

/// Every node's status; node `i` is endpoint `i` (`strata up` numbers them so).
async fn statuses(endpoints: &[SocketAddr]) -> Vec<Option<NodeStatus>> {
    let mut out = Vec::new();
    for &e in endpoints {
        out.push(node_status(e).await);
    }
    out
}

fn view(status: &Option<NodeStatus>, shard: u32) -> Option<&ShardStatus> {
    status.as_ref()?.shards.iter().find(|s| s.table == TABLE && s.shard == shard)
}

/// The shard's leader as the nodes see it: a node that says it leads, in the highest epoch any
/// leader claims, which some other node also names as its leader in that epoch (a majority of
/// three with itself).
fn leader_of(sts: &[Option<NodeStatus>], shard: u32) -> Option<(usize, u32)> {
    let (i, epoch) = sts
        .iter()
        .enumerate()
        .filter_map(|(i, st)| {
            view(st, shard).filter(|s| s.role == ShardRole::Leader).map(|s| (i, s.epoch))
        })
        .max_by_key(|&(_, e)| e)?;
    let followers = sts
        .iter()
        .enumerate()
        .filter(|&(j, st)| {
            j != i
                && view(st, shard)
                    .is_some_and(|s| s.leader == Some(NodeId(i as u32)) && s.epoch == epoch)
        })
        .count();
    (followers >= 1).then_some((i, epoch))
}

/// Polls until `shard` has a leader in epoch `at_least` or a later one.
async fn wait_leader(
    endpoints: &[SocketAddr],
    shard: u32,
    at_least: u32,
    within: Duration,
) -> (usize, u32) {
    let deadline = Instant::now() + within;
    loop {
        let sts = statuses(endpoints).await;
        if let Some(l) = leader_of(&sts, shard).filter(|&(_, e)| e >= at_least) {
            return l;
        }
        assert!(
            Instant::now() < deadline,
            "shard {shard}: no leader of epoch {at_least} or later within {within:?}: {sts:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The bank's replicas that hold locks: `(node, shard, role, locks)`.
fn locked(sts: &[Option<NodeStatus>]) -> Vec<(usize, u32, ShardRole, u64)> {
    let mut out = Vec::new();
    for (i, st) in sts.iter().enumerate() {
        for s in st.iter().flat_map(|st| &st.shards) {
            if s.table == TABLE && s.locks > 0 {
                out.push((i, s.shard, s.role, s.locks));
            }
        }
    }
    out
}

/// The locks all replicas hold, and those the shards' leaders hold.
fn lock_totals(sts: &[Option<NodeStatus>]) -> (u64, u64) {
    let l = locked(sts);
    let leaders = l.iter().filter(|r| r.2 == ShardRole::Leader).map(|r| r.3).sum();
    (l.iter().map(|r| r.3).sum(), leaders)
}

/// Whether every node answers, with every shard of the bank and no lock on any.
fn quiet(sts: &[Option<NodeStatus>]) -> bool {
    sts.iter().all(|st| (0..SHARDS).all(|sh| view(st, sh).is_some_and(|s| s.locks == 0)))
}

/// Polls until every replica of every shard reports no lock (transactions decided
/// everywhere); returns how long that took.
async fn wait_quiet(endpoints: &[SocketAddr], within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let sts = statuses(endpoints).await;
        if quiet(&sts) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "locks still held (node, shard, locks) after {within:?}: {:?}; nodes answering: {:?}",
            locked(&sts),
            sts.iter().map(Option::is_some).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls until node `i`'s replicas have applied what the other nodes had applied when it
/// was called.
async fn wait_caught_up(endpoints: &[SocketAddr], i: usize, within: Duration) {
    let deadline = Instant::now() + within;
    let sts = statuses(endpoints).await;
    let targets: Vec<_> = (0..SHARDS)
        .map(|sh| {
            sts.iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .filter_map(|(_, st)| view(st, sh).map(|s| s.applied_index))
                .max()
                .expect("another node answers")
        })
        .collect();
    loop {
        let st = node_status(endpoints[i]).await;
        let behind: Vec<u32> = (0..SHARDS)
            .filter(|&sh| view(&st, sh).is_none_or(|s| s.applied_index < targets[sh as usize]))
            .collect();
        if behind.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "restarted n{i} did not catch up on shards {behind:?} within {within:?}: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn read_balances(table: &mut Table) -> Vec<u64> {
    let mut out = Vec::new();
    for a in 0..ACCOUNTS {
        out.push(balance(table.get(acct(a)).await.unwrap().value, a));
    }
    out
}

// ---- leader kills ----

struct Kill {
    shard: u32,
    node: usize,
    epoch: u32,
    in_flight: usize,
    new_leader: usize,
    new_epoch: u32,
    /// From the kill to a new leader seen, and to the restarted node caught up.
    failed_over: Duration,
    caught_up: Duration,
}

/// SIGKILLs the leader of `shard`, waits for the next one, restarts the node from its
/// directory and waits until it caught up.
async fn kill_leader(
    up: &Up,
    pids: &mut [i32],
    restarted: &mut Restarted,
    shard: u32,
    counters: &Counters,
) -> Kill {
    let endpoints = &up.endpoints;
    let (victim, epoch) = wait_leader(endpoints, shard, 1, Duration::from_secs(10)).await;
    let in_flight = counters.in_flight.load(Ordering::Relaxed);
    let at = Instant::now();
    // SAFETY: a node process of this test's cluster (started by `strata up` or by this test).
    assert_eq!(unsafe { libc::kill(pids[victim], libc::SIGKILL) }, 0);
    let (new_leader, new_epoch) =
        wait_leader(endpoints, shard, epoch + 1, Duration::from_secs(15)).await;
    assert_ne!(new_leader, victim);
    let failed_over = at.elapsed();
    let child = restart_node(&up.data_dir, victim);
    pids[victim] = child.id() as i32;
    restarted.0.push(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(endpoints[victim]).await.is_err() {
        assert!(Instant::now() < deadline, "restarted n{victim} does not listen");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_caught_up(endpoints, victim, Duration::from_secs(15)).await;
    Kill {
        shard,
        node: victim,
        epoch,
        in_flight,
        new_leader,
        new_epoch,
        failed_over,
        caught_up: at.elapsed(),
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
    wait_quiet(&endpoints, Duration::from_secs(15)).await;
    let before = read_balances(&mut bank.table).await;
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
        let (all, leaders) = lock_totals(&sts);
        locks_seen = locks_seen.max(all);
        leader_locks_seen = leader_locks_seen.max(leaders);
        if leaders > 0 {
            leaders_locked_for = Some(at);
        }
        if locks_seen == 0 && at >= Duration::from_millis(60) {
            break None;
        }
        if locks_seen > 0 && quiet(&sts) {
            break Some(at);
        }
        assert!(
            at < Duration::from_secs(15),
            "{transfer:?} stopped: locks (node, shard, role, locks) still held after {at:?}: {:?}",
            locked(&sts)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    // No transaction holds a lock now and no other runs: the balances show whether the
    // transfer took effect (all of it, or none).
    let now = read_balances(&mut bank.table).await;
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
    let seed =
        std::env::var("STRATA_BANK_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
                as u64
        });
    eprintln!("STRATA_BANK_SEED={seed}");
    let mut rng = Rng(seed);
    let up = Up::start_with(3, &[PLAIN]);
    let mut restarted = Restarted(Vec::new());
    let endpoints = up.endpoints.clone();
    let mut pids = up.pids.clone();
    let out = up.strata(&["table", "create", TABLE, "--txn", "rifl", "--shards", "3"]);
    assert!(out.status.success(), "table create: {}{}", stdout(&out), stderr(&out));
    for shard in 0..SHARDS {
        wait_leader(&endpoints, shard, 1, Duration::from_secs(15)).await;
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
            tokio::spawn(transfers(i, endpoints.clone(), rng.next(), gate, stop, log, counters))
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
            let k = kill_leader(&up, &mut pids, &mut restarted, shard, &counters).await;
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
    let settled = wait_quiet(&endpoints, Duration::from_secs(15)).await;
    let mut committed: Vec<Transfer> = log.lock().unwrap().clone();
    let in_process = committed.len();
    committed.extend(pauses.iter().filter(|p| p.committed()).map(|p| p.transfer));
    // (The list is not in the order the transfers took effect: sums only.)
    let mut expected = vec![INITIAL as i64; ACCOUNTS];
    for t in &committed {
        expected[t.from] -= t.amount as i64;
        expected[t.to] += t.amount as i64;
    }
    let balances = read_balances(&mut bank.table).await;
    let total: u64 = balances.iter().sum();
    assert_eq!(total, INITIAL * ACCOUNTS as u64, "money created or destroyed: {balances:?}");
    let as_i64: Vec<i64> = balances.iter().map(|&b| b as i64).collect();
    assert_eq!(
        as_i64,
        expected,
        "the balances (left) differ from what the {} committed transfers ({in_process} in-process) say; the stopped processes: {pauses:#?}",
        committed.len()
    );
    // `strata status --json` shows no lock on any replica.
    let out = up.strata(&["status", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let nodes: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let replicas: Vec<&serde_json::Value> = nodes
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|n| n["shards"].as_array().unwrap())
        .filter(|s| s["table"] == TABLE)
        .collect();
    assert_eq!(replicas.len(), 3 * SHARDS as usize, "{nodes:#}");
    assert!(replicas.iter().all(|s| s["locks"] == 0), "{replicas:#?}");
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
