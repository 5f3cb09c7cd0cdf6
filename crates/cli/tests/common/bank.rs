//! Helpers of the bank tests (`bank.rs`: RIFL, `kairos_bank.rs`: Kairos): accounts,
//! reproducible random choices, what the nodes report about a table's shards (leaders,
//! locks, applied indexes), and leader kills with restarts.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use strata_client::{
    Client, ClientError, ClientOptions, CommitInfo, NodeId, NodeStatus, RetryPolicy, ShardRole,
    ShardStatus, Table, Transaction,
};
use tokio::net::TcpStream;
use tokio::sync::RwLock;

use super::{alive, restart_node, stderr, stdout, Restarted, Up};

pub fn acct(a: usize) -> String {
    format!("acct{a}")
}

/// SplitMix64: the tests' random choices, reproducible from the seed they print.
pub struct Rng(pub u64);

impl Rng {
    /// Seeded from `STRATA_BANK_SEED` if set, else from the clock; prints the seed so that
    /// a run's choices can be repeated.
    pub fn from_env() -> Rng {
        let seed = std::env::var("STRATA_BANK_SEED").ok().and_then(|s| s.parse().ok());
        let seed = seed.unwrap_or_else(|| {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            now.unwrap().as_nanos() as u64
        });
        eprintln!("STRATA_BANK_SEED={seed}");
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len() as u64) as usize]
    }
}

/// One committed transfer.
#[derive(Clone, Copy, Debug)]
pub struct Transfer {
    pub from: usize,
    pub to: usize,
    pub amount: u64,
}

#[derive(Default)]
pub struct Counters {
    pub committed: AtomicUsize,
    /// The source held less than the amount: the body wrote nothing.
    pub skipped: AtomicUsize,
    /// Attempts that aborted (conflicts, locks) and were run again by `run_txn`.
    pub aborted_attempts: AtomicU64,
    /// Transfers whose every attempt aborted (nothing took effect).
    pub gave_up: AtomicUsize,
    /// Transfers between `run_txn`'s call and its return.
    pub in_flight: AtomicUsize,
}

pub fn balance(v: Option<Bytes>, a: usize) -> u64 {
    let v = v.unwrap_or_else(|| panic!("{} is absent", acct(a)));
    std::str::from_utf8(&v)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{} holds {v:?}, not a balance", acct(a)))
}

pub async fn wait_committed(counters: &Counters, n: usize, within: Duration) {
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

/// A node's status, or `None` if it does not answer soon (killed, restarting).
pub async fn node_status(addr: SocketAddr) -> Option<NodeStatus> {
    let o = ClientOptions {
        connect_timeout: Duration::from_millis(500),
        request_timeout: Some(Duration::from_secs(1)),
        ..ClientOptions::default()
    };
    let ask = async { Client::connect_node(addr, o).await.ok()?.status().await.ok() };
    tokio::time::timeout(Duration::from_secs(2), ask).await.ok().flatten()
}

/// Every node's status; node `i` is endpoint `i` (`strata up` numbers them so).
pub async fn statuses(endpoints: &[SocketAddr]) -> Vec<Option<NodeStatus>> {
    let mut out = Vec::new();
    for &e in endpoints {
        out.push(node_status(e).await);
    }
    out
}

/// One committed transfer, with what its transaction saw (Kairos tables; `None` on RIFL
/// tables).
#[derive(Clone, Debug)]
pub struct Committed {
    /// The `TransferTask::task` that ran it.
    pub task: usize,
    pub transfer: Transfer,
    pub info: Option<CommitInfo>,
    /// When `run_txn` was called, and when it returned (K5's real-time order).
    pub began: Instant,
    pub reported: Instant,
}

/// One in-process client's transfers (`transfers`): where, how, and what it records.
pub struct TransferTask {
    pub task: usize,
    pub endpoints: Vec<SocketAddr>,
    pub opts: ClientOptions,
    pub table: &'static str,
    pub accounts: usize,
    pub max_amount: u64,
    pub seed: u64,
    /// Held for reading around each transfer: a writer pauses the transfers.
    pub gate: Arc<RwLock<()>>,
    pub stop: Arc<AtomicBool>,
    pub log: Arc<Mutex<Vec<Committed>>>,
    pub counters: Arc<Counters>,
}

/// One in-process client's transfers, one at a time, until `stop`: each moves a random
/// amount between two random accounts with `run_txn` (reading both balances and writing
/// both; nothing if the source holds too little); every committed one is recorded.
pub async fn transfers(t: TransferTask) {
    let TransferTask { task, table, gate, stop, log, counters, .. } = t;
    let client = Client::connect(&t.endpoints, t.opts).await.unwrap();
    let mut rng = Rng(t.seed);
    let policy = RetryPolicy {
        attempts: 200,
        backoff: Duration::from_micros(100),
        max_backoff: Duration::from_millis(20),
    };
    while !stop.load(Ordering::Relaxed) {
        let from = rng.below(t.accounts as u64) as usize;
        let mut to = rng.below(t.accounts as u64 - 1) as usize;
        if to >= from {
            to += 1;
        }
        let amount = 1 + rng.below(t.max_amount);
        let attempts = Arc::new(AtomicU64::new(0));
        let result = {
            let _open = gate.read().await;
            counters.in_flight.fetch_add(1, Ordering::Relaxed);
            let tries = attempts.clone();
            let began = Instant::now();
            let r = client
                .run_txn_detailed(policy, move |tx| {
                    tries.fetch_add(1, Ordering::Relaxed);
                    // Odd tasks read for update (leader reservations under the same faults).
                    Box::pin(transfer(tx, table, from, to, amount, task % 2 == 1))
                })
                .await;
            counters.in_flight.fetch_sub(1, Ordering::Relaxed);
            r.map(|(moved, info)| (moved, info, began, Instant::now()))
        };
        let attempts = attempts.load(Ordering::Relaxed);
        match result {
            Ok((true, info, began, reported)) => {
                log.lock().unwrap().push(Committed { task, transfer: Transfer { from, to, amount }, info, began, reported });
                counters.committed.fetch_add(1, Ordering::Relaxed);
                counters.aborted_attempts.fetch_add(attempts - 1, Ordering::Relaxed);
            }
            Ok((false, ..)) => {
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

/// The body of a transfer of `amount` from account `from` to account `to` of `table`: reads
/// both balances (`for_update`: read for update) and writes both; writes nothing if
/// the source holds too little (`false`).
async fn transfer(
    tx: &mut Transaction,
    table: &str,
    from: usize,
    to: usize,
    amount: u64,
    for_update: bool,
) -> Result<bool, ClientError> {
    let mine = balance(tx.read_with(table, acct(from), for_update).await?, from);
    if mine < amount {
        return Ok(false);
    }
    let theirs = balance(tx.read_with(table, acct(to), for_update).await?, to);
    tx.write(table, acct(from), (mine - amount).to_string());
    tx.write(table, acct(to), (theirs + amount).to_string());
    Ok(true)
}

// ---- what the nodes report ----

/// A table and its shard count, whose replicas the helpers below look at.
#[derive(Clone, Copy, Debug)]
pub struct Sharded {
    pub table: &'static str,
    pub shards: u32,
}

impl Sharded {
    /// Three plaintext node processes with this table created (`--txn TXN`, its shards) and
    /// a leader for each of its shards: the banks' start.
    pub async fn start_bank(&self, txn: &str) -> Up {
        let up = Up::start_with(3, &[super::PLAIN]);
        let shards = self.shards.to_string();
        let out = up.strata(&["table", "create", self.table, "--txn", txn, "--shards", &shards]);
        assert!(out.status.success(), "table create: {}{}", stdout(&out), stderr(&out));
        for shard in 0..self.shards {
            self.wait_leader(&up.endpoints, shard, 1, Duration::from_secs(15)).await;
        }
        up
    }

    /// `strata status --json` lists every replica of the table (three per shard), none
    /// holding a lock.
    pub fn assert_no_locks_in_status(&self, up: &Up) {
        let out = up.strata(&["status", "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let nodes: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        let replicas: Vec<&serde_json::Value> = nodes
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|n| n["shards"].as_array().unwrap())
            .filter(|s| s["table"] == self.table)
            .collect();
        assert_eq!(replicas.len(), 3 * self.shards as usize, "{nodes:#}");
        assert!(replicas.iter().all(|s| s["locks"] == 0), "{replicas:#?}");
    }

    pub fn view<'s>(&self, status: &'s Option<NodeStatus>, shard: u32) -> Option<&'s ShardStatus> {
        status.as_ref()?.shards.iter().find(|s| s.table == self.table && s.shard == shard)
    }

    /// The shard's leader as the nodes see it: a node that says it leads, in the highest epoch any
    /// leader claims, which some other node also names as its leader in that epoch (a majority of
    /// three with itself).
    pub fn leader_of(&self, sts: &[Option<NodeStatus>], shard: u32) -> Option<(usize, u32)> {
        let (i, epoch) = sts
            .iter()
            .enumerate()
            .filter_map(|(i, st)| {
                self.view(st, shard).filter(|s| s.role == ShardRole::Leader).map(|s| (i, s.epoch))
            })
            .max_by_key(|&(_, e)| e)?;
        let followers = sts
            .iter()
            .enumerate()
            .filter(|&(j, st)| {
                j != i
                    && self
                        .view(st, shard)
                        .is_some_and(|s| s.leader == Some(NodeId(i as u32)) && s.epoch == epoch)
            })
            .count();
        (followers >= 1).then_some((i, epoch))
    }

    /// Polls until `shard` has a leader in epoch `at_least` or a later one.
    pub async fn wait_leader(
        &self,
        endpoints: &[SocketAddr],
        shard: u32,
        at_least: u32,
        within: Duration,
    ) -> (usize, u32) {
        let deadline = Instant::now() + within;
        loop {
            let sts = statuses(endpoints).await;
            if let Some(l) = self.leader_of(&sts, shard).filter(|&(_, e)| e >= at_least) {
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
    pub fn locked(&self, sts: &[Option<NodeStatus>]) -> Vec<(usize, u32, ShardRole, u64)> {
        let mut out = Vec::new();
        for (i, st) in sts.iter().enumerate() {
            for s in st.iter().flat_map(|st| &st.shards) {
                if s.table == self.table && s.locks > 0 {
                    out.push((i, s.shard, s.role, s.locks));
                }
            }
        }
        out
    }

    /// The locks all replicas hold, and those the shards' leaders hold.
    pub fn lock_totals(&self, sts: &[Option<NodeStatus>]) -> (u64, u64) {
        let l = self.locked(sts);
        let leaders = l.iter().filter(|r| r.2 == ShardRole::Leader).map(|r| r.3).sum();
        (l.iter().map(|r| r.3).sum(), leaders)
    }

    /// Whether every node answers, with every shard of the bank and no lock on any.
    pub fn quiet(&self, sts: &[Option<NodeStatus>]) -> bool {
        sts.iter()
            .all(|st| (0..self.shards).all(|sh| self.view(st, sh).is_some_and(|s| s.locks == 0)))
    }

    /// Polls until every replica of every shard reports no lock (transactions decided
    /// everywhere); returns how long that took.
    pub async fn wait_quiet(&self, endpoints: &[SocketAddr], within: Duration) -> Duration {
        let start = Instant::now();
        loop {
            let sts = statuses(endpoints).await;
            if self.quiet(&sts) {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < within,
                "locks still held (node, shard, locks) after {within:?}: {:?}; nodes answering: {:?}",
                self.locked(&sts),
                sts.iter().map(Option::is_some).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Polls until node `i`'s replicas have applied what the other nodes had applied when it
    /// was called.
    pub async fn wait_caught_up(&self, endpoints: &[SocketAddr], i: usize, within: Duration) {
        let deadline = Instant::now() + within;
        let sts = statuses(endpoints).await;
        let targets: Vec<_> = (0..self.shards)
            .map(|sh| {
                sts.iter()
                    .enumerate()
                    .filter(|&(j, _)| j != i)
                    .filter_map(|(_, st)| self.view(st, sh).map(|s| s.applied_index))
                    .max()
                    .expect("another node answers")
            })
            .collect();
        loop {
            let st = node_status(endpoints[i]).await;
            let behind: Vec<u32> = (0..self.shards)
                .filter(|&sh| {
                    self.view(&st, sh).is_none_or(|s| s.applied_index < targets[sh as usize])
                })
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
}

/// What every account holds after `committed` (in any order: sums only), from `initial` each.
pub fn expected_balances(initial: u64, accounts: usize, committed: &[Transfer]) -> Vec<i64> {
    let mut expected = vec![initial as i64; accounts];
    for t in committed {
        expected[t.from] -= t.amount as i64;
        expected[t.to] += t.amount as i64;
    }
    expected
}

pub async fn read_balances(table: &mut Table, accounts: usize) -> Vec<u64> {
    let mut out = Vec::new();
    for a in 0..accounts {
        out.push(balance(table.get(acct(a)).await.unwrap().value, a));
    }
    out
}

// ---- leader kills ----

pub struct Kill {
    pub shard: u32,
    pub node: usize,
    pub epoch: u32,
    pub in_flight: usize,
    pub new_leader: usize,
    pub new_epoch: u32,
    /// From the kill to a new leader seen, and to the restarted node caught up.
    pub failed_over: Duration,
    pub caught_up: Duration,
}

impl Sharded {
    /// Sends `signal` to the leader of `shard` (`SIGKILL`: a crash; `SIGTERM`: a graceful
    /// stop), waits for the next leader and for the process to be gone, restarts the node from
    /// its directory and waits until it caught up.
    pub async fn kill_leader(
        &self,
        up: &Up,
        pids: &mut [i32],
        restarted: &mut Restarted,
        shard: u32,
        signal: i32,
        counters: &Counters,
    ) -> Kill {
        let endpoints = &up.endpoints;
        let (victim, epoch) = self.wait_leader(endpoints, shard, 1, Duration::from_secs(10)).await;
        let in_flight = counters.in_flight.load(Ordering::Relaxed);
        let at = Instant::now();
        // SAFETY: a node process of this test's cluster (started by `strata up` or by this test).
        assert_eq!(unsafe { libc::kill(pids[victim], signal) }, 0);
        let (new_leader, new_epoch) =
            self.wait_leader(endpoints, shard, epoch + 1, Duration::from_secs(15)).await;
        assert_ne!(new_leader, victim);
        let failed_over = at.elapsed();
        // A stopping node may still hold its ports: restart it once it is gone.
        let deadline = Instant::now() + Duration::from_secs(15);
        while alive(pids[victim]) {
            assert!(Instant::now() < deadline, "n{victim} did not stop after signal {signal}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        up.outlive_supervisor();
        let child = restart_node(&up.data_dir, victim);
        pids[victim] = child.id() as i32;
        restarted.0.push(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(endpoints[victim]).await.is_err() {
            assert!(Instant::now() < deadline, "restarted n{victim} does not listen");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.wait_caught_up(endpoints, victim, Duration::from_secs(15)).await;
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
}
