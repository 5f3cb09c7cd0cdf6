//! `strata txn` processes SIGSTOPped in the middle of a transfer (the bank tests: `bank.rs`
//! on a RIFL table, `kairos_bank.rs` on a Kairos table; the table decides the mode). A process
//! stopped between its prepares and its decisions holds its locks until the shards' recovery
//! (rifl.md §5.8.4, `T_TX`; Kairos runs on the same machinery) decides its transaction; once
//! no replica holds locks the balances show the outcome, which the resumed process must
//! print. See `pause_one`.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use strata_client::{Table, Timestamp};
use tokio::sync::RwLock;

use super::bank::{acct, read_balances, statuses, Rng, Sharded, Transfer};
use super::{Up, STRATA};

/// A `strata txn` process; killed if still running when dropped (a failed test leaves no
/// stopped process behind).
pub struct TxnProcess {
    child: Child,
}

impl TxnProcess {
    pub fn spawn(data_dir: &Path, table: &str, input: &str) -> TxnProcess {
        let mut child = Command::new(STRATA)
            .args(["txn", "--table", table])
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

    pub fn signal(&self, sig: i32) {
        // SAFETY: signalling the process this test spawned (not yet reaped: `wait` reaps it).
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, sig) }, 0);
    }

    /// Its exit code, standard output and standard error, once it exited.
    pub async fn wait(&mut self, within: Duration) -> (Option<i32>, String, String) {
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
pub const RECOVERY_EVIDENCE: Duration = Duration::from_millis(50);

/// One-way delay added between the nodes while processes are stopped: it widens the window
/// between a process's prepares and its decisions (a prepare's replication round) from about
/// a millisecond, which 20 or 30 aimed stops missed once in a few runs (the Kairos bank, then
/// the RIFL bank under CI's load), to over 10 ms. See `set_peer_delay`.
pub const STOP_PHASE_PEER_DELAY_MS: &str = "5";

/// `strata fault` on every node's links to its peers (three nodes): `delay_ms` one way, or
/// cleared.
pub fn set_peer_delay(up: &Up, delay_ms: Option<&str>) {
    for node in 0..3 {
        let node = node.to_string();
        let out = match delay_ms {
            Some(ms) => up.strata(&["fault", "--node", &node, "--delay-ms", ms]),
            None => up.strata(&["fault", "--node", &node, "--clear"]),
        };
        assert!(
            out.status.success(),
            "strata fault: {}{}",
            super::stdout(&out),
            super::stderr(&out)
        );
    }
}

/// An account's value and version timestamp (Kairos; `ZERO` on other tables).
pub type Version = (Bytes, Timestamp);

/// One stopped `strata txn` process.
#[derive(Debug)]
pub struct Pause {
    pub transfer: Transfer,
    pub delay: Duration,
    /// While it was stopped: the largest number of locks seen on all replicas, and on the
    /// shards' leaders; the last time (since the stop) a leader still held some, and when
    /// every replica was free of them again.
    pub locks_seen: u64,
    pub leader_locks_seen: u64,
    pub leaders_locked_for: Option<Duration>,
    pub unlocked_after: Option<Duration>,
    /// Whether the transfer had taken effect (the two balances moved) once no replica held
    /// its locks, the process still stopped.
    pub took_effect: bool,
    /// The source's and the target's versions when the process started (what it read: no
    /// other transaction wrote them meanwhile), and — with `Resume::Alone` — once it exited
    /// (what it wrote, if it committed).
    pub read: [Version; 2],
    pub after_exit: Option<[Version; 2]>,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Pause {
    /// Stopped between its prepares and its decisions: a shard's leader held its locks.
    pub fn held_locks(&self) -> bool {
        self.leader_locks_seen > 0
    }

    /// Held them until recovery decided (see `RECOVERY_EVIDENCE`).
    pub fn recovered(&self) -> bool {
        self.leaders_locked_for.is_some_and(|d| d >= RECOVERY_EVIDENCE)
    }

    /// Whether the transaction was decided while the process was stopped: by recovery or by
    /// its own decisions on their way (locks seen), or before the stop (it took effect).
    pub fn decided_while_stopped(&self) -> bool {
        self.locks_seen > 0 || self.took_effect
    }

    pub fn committed(&self) -> bool {
        self.code == Some(0) && self.stdout == "committed\n"
    }

    pub fn aborted(&self) -> bool {
        self.code == Some(8) && self.stdout.starts_with("aborted: ")
    }

    /// One line for the test's log.
    pub fn describe(&self) -> String {
        format!(
            "strata txn {:?} stopped after {:?}: {} locks seen ({} at leaders, still {:?} after the stop), all gone after {:?}{}; it printed {:?} (exit {:?}){}",
            self.transfer,
            self.delay,
            self.locks_seen,
            self.leader_locks_seen,
            self.leaders_locked_for,
            self.unlocked_after,
            match (self.decided_while_stopped(), self.took_effect, self.recovered()) {
                (true, true, true) => ": recovery committed",
                (true, false, true) => ": recovery aborted",
                (true, true, false) => ": committed before or while stopped",
                (true, false, false) => ": aborted while stopped",
                (false, _, _) => ": undecided while stopped",
            },
            self.stdout.trim_end(),
            self.code,
            if self.stderr.is_empty() { String::new() } else { format!(", stderr {:?}", self.stderr) }
        )
    }
}

/// When to stop the next `strata txn` process. A process reaches its prepares a few
/// milliseconds after it starts and decides a few milliseconds later (timings of this
/// machine and build; later with `STOP_PHASE_PEER_DELAY_MS` on the peer links): a delay
/// drawn from 0-60 ms rarely falls between. The first attempts draw from 0-60 ms; then the
/// aim moves later after a process stopped before its prepares, earlier after one stopped
/// after them (decided by itself), by a step halved at each change of direction, and draws
/// within ±3 ms of it (always within 0-60 ms). A change of the peer delay moves the window:
/// start a new `Aim` then.
pub struct Aim {
    at_ms: f64,
    step_ms: f64,
    last_later: Option<bool>,
    attempts: usize,
}

impl Aim {
    const UNIFORM: usize = 2;
    const LATEST_MS: f64 = 60.0;

    pub fn new() -> Aim {
        Aim { at_ms: 20.0, step_ms: 8.0, last_later: None, attempts: 0 }
    }

    fn delay(&mut self, rng: &mut Rng) -> Duration {
        self.attempts += 1;
        if self.attempts <= Aim::UNIFORM {
            return Duration::from_micros(rng.below(Aim::LATEST_MS as u64 * 1000 + 1));
        }
        let jitter = rng.below(6_001) as f64 / 1000.0 - 3.0;
        Duration::from_secs_f64((self.at_ms + jitter).clamp(0.0, Aim::LATEST_MS) / 1000.0)
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
        self.at_ms = (self.at_ms + step).clamp(0.0, Aim::LATEST_MS);
        self.last_later = Some(later);
    }
}

/// When the in-process transfers run again after a stopped process's transaction was
/// observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resume {
    /// Before the process resumes: its late messages meet concurrent transfers (RIFL bank).
    AmidTransfers,
    /// Once it exited: nothing else wrote its accounts, so their versions afterwards are what
    /// it wrote (Kairos bank: its writes go into the history the checker reads).
    Alone,
}

/// A bank's accounts, and what `pause_one` needs to run a transfer in a `strata txn` process.
pub struct StoppedTxns<'a> {
    pub up: &'a Up,
    pub bank: Sharded,
    pub table: Table,
    pub accounts: usize,
    pub max_amount: u64,
    pub shard_of: Vec<u32>,
    /// The in-process transfers' gate (`TransferTask::gate`).
    pub gate: Arc<RwLock<()>>,
    pub aim: Aim,
    pub resume: Resume,
}

impl StoppedTxns<'_> {
    /// The versions of accounts `a` and `b`, read at their leaders.
    async fn versions(&mut self, a: usize, b: usize) -> [Version; 2] {
        let mut out = Vec::new();
        for x in [a, b] {
            let r = self.table.get(acct(x)).await.unwrap();
            out.push((r.value.unwrap_or_else(|| panic!("{} is absent", acct(x))), r.vts));
        }
        out.try_into().unwrap()
    }
}

/// Runs one transfer between accounts of two shards in a `strata txn` process and SIGSTOPs
/// it shortly after it started (`Aim`). If a shard's leader then reports transaction locks,
/// the process stopped between its prepares and its decisions; locks the leaders still hold
/// `RECOVERY_EVIDENCE` after the stop waited for recovery. Once no replica holds locks, the
/// two balances show whether the transfer took effect, and once resumed (SIGCONT) the process
/// must print that outcome (`committed`, or `aborted: …` with exit code 8) — also when it was
/// decided before the stop; one stopped before its prepares runs on after the resume. While a
/// process is being stopped, observed and recovered, the in-process transfers wait (and their
/// earlier transactions' locks are gone before it starts), so that every lock seen is the
/// stopped process's; they run again as `StoppedTxns::resume` says.
pub async fn pause_one(s: &mut StoppedTxns<'_>, rng: &mut Rng) -> Pause {
    let (bank, endpoints, gate) = (s.bank, s.up.endpoints.clone(), s.gate.clone());
    let quiet_gate = gate.write().await;
    // The in-process transfers are paused; their last decisions are applied everywhere.
    bank.wait_quiet(&endpoints, Duration::from_secs(15)).await;
    let before = read_balances(&mut s.table, s.accounts).await;
    let amount = 1 + rng.below(s.max_amount);
    let sources: Vec<usize> = (0..s.accounts).filter(|&a| before[a] >= amount).collect();
    let from = rng.pick(&sources);
    let targets: Vec<usize> =
        (0..s.accounts).filter(|&a| s.shard_of[a] != s.shard_of[from]).collect();
    let to = rng.pick(&targets);
    let transfer = Transfer { from, to, amount };
    let read = s.versions(from, to).await;
    let mut moved = before.clone();
    moved[from] -= amount;
    moved[to] += amount;
    let delay = s.aim.delay(rng);
    let input = format!("add {} -{amount}\nadd {} {amount}\n", acct(from), acct(to));
    let started = Instant::now();
    let mut proc = TxnProcess::spawn(&s.up.data_dir, bank.table, &input);
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
        let (all, leaders) = bank.lock_totals(&sts);
        locks_seen = locks_seen.max(all);
        leader_locks_seen = leader_locks_seen.max(leaders);
        if leaders > 0 {
            leaders_locked_for = Some(at);
        }
        if locks_seen == 0 && at >= Duration::from_millis(60) {
            break None;
        }
        if locks_seen > 0 && bank.quiet(&sts) {
            break Some(at);
        }
        assert!(
            at < Duration::from_secs(15),
            "{transfer:?} stopped: locks (node, shard, role, locks) still held after {at:?}: {:?}",
            bank.locked(&sts)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    // No transaction holds a lock now and no other runs: the balances show whether the
    // transfer took effect (all of it, or none).
    let now = read_balances(&mut s.table, s.accounts).await;
    let took_effect = effect(&transfer, &now, &before, &moved);
    let quiet_gate = match s.resume {
        Resume::AmidTransfers => {
            drop(quiet_gate);
            None
        }
        Resume::Alone => Some(quiet_gate),
    };
    proc.signal(libc::SIGCONT);
    let (code, stdout, stderr) = proc.wait(Duration::from_secs(30)).await;
    // `strata txn` waits until its decisions are applied everywhere before it exits.
    let after_exit = match quiet_gate {
        Some(_) => Some(s.versions(from, to).await),
        None => None,
    };
    drop(quiet_gate);
    let pause = Pause {
        transfer,
        delay,
        locks_seen,
        leader_locks_seen,
        leaders_locked_for,
        unlocked_after,
        took_effect,
        read,
        after_exit,
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
    if let Some(after) = &pause.after_exit {
        // Alone, the transfer took effect iff the process says it committed.
        let want = if pause.committed() { &moved } else { &before };
        let values: Vec<String> =
            after.iter().map(|(v, _)| String::from_utf8_lossy(v).into_owned()).collect();
        assert_eq!(
            values,
            [want[from].to_string(), want[to].to_string()],
            "{pause:?}: its accounts went from {:?} to {after:?}",
            pause.read
        );
    }
    s.aim.learn(&pause);
    pause
}

/// Whether `transfer` took effect, given the balances `now`, `before` it ran, and `moved` by
/// it; anything else (half of it) fails the test.
fn effect(transfer: &Transfer, now: &[u64], before: &[u64], moved: &[u64]) -> bool {
    if now == moved {
        true
    } else if now == before {
        false
    } else {
        panic!("{transfer:?} stopped: the balances are {now:?}, neither {before:?} (no effect) nor {moved:?} (its effect)")
    }
}
