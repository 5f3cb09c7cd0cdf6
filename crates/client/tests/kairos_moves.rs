//! A shard of a Kairos table's validators moves to another replica group mid-run (issue #19,
//! kairos.md §1.3 "CV", §5.6, §5.15; rifl.md §5.7): `kbank --txn kairos --validation
//! sharded:2` on four in-process nodes, its validators the two shards of `kbank.validators`,
//! each first on all four nodes. Shard `S` of the validators (the one validating `acct0`)
//! moves to the three nodes other than its leader with the ordinary `Client::move_shard`
//! while three clients transfer between eight accounts and a fourth audits them with
//! read-only transactions. Then:
//!
//! * **every transaction was decided**: each commit returned `Committed` or `Aborted` with a
//!   reason (no error, none lost across the move), some transfers committed through the
//!   moved validator after the move, and no lock is left at any replica;
//! * **totals are conserved**: every committed audit sums to the total, and at the end every
//!   account holds its initial balance plus its committed transfers (a stale read that
//!   committed would show as a lost update);
//! * **no stale read commits across the move**: transactions that read a key `S` validates
//!   before the move, whose value another transaction overwrote before it validates, abort
//!   `Stale` when they commit after it: read-write and read-only, a key written before (the
//!   moved `latest_committed` judges it), a key that did not exist when read (`vts` zero), a
//!   key overwritten after the move (the new group's own decision), and a client's cached
//!   entry served after the move (a hit of the old value);
//! * **the moved validator keeps validating**: of two transactions that read one of its keys,
//!   the second to commit aborts, and the key's `latest_committed`, served by the new group,
//!   is the data's `vts`.
//!
//! Canary: the same move losing the validator state on the way (`MovePlant::LoseKairos`)
//! lets the transaction that read the key at its zero version commit — a lost update the
//! checks above flag.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use strata_client::{
    AbortReason, Client, ClientError, LeasePolicy, MovePlant, NodeId, TableDef, TableValidation,
    TxnOutcome,
};

const TABLE: &str = "kbank";
const VALIDATORS: &str = "kbank.validators";
const NODES: u32 = 4;
const ACCOUNTS: usize = 8;
const INITIAL: i64 = 100;
/// Transfers committed before the move, and again after it before the clients stop.
const BETWEEN: usize = 12;
const TRANSFER_CLIENTS: u64 = 3;
/// A transfer client's pause between transactions: the load leaves the audits (eight reads
/// each) a chance to commit.
const PACE: Duration = Duration::from_millis(5);
const WITHIN: Duration = Duration::from_secs(20);

fn account(i: usize) -> String {
    format!("acct{i}")
}

fn number(v: Option<Bytes>) -> i64 {
    std::str::from_utf8(&v.expect("a balance")).unwrap().parse().unwrap()
}

/// What the clients did, for the checks at the end.
#[derive(Default)]
struct Ledger {
    /// Committed transfers `(from, to, amount)`, in the order their commits returned.
    committed: Vec<(usize, usize, i64)>,
    /// `committed.len()` when the move finished.
    at_move: Option<usize>,
    /// Transfers committed after the move with an account the moved validator owns.
    through_moved: usize,
    /// Aborted attempts by reason.
    aborted: BTreeMap<String, usize>,
    /// Committed audits (and of them after the move), and the sums of those that were not
    /// the total.
    audits: usize,
    audits_after_move: usize,
    bad_audits: Vec<i64>,
}

impl Ledger {
    /// A transfer's outcome; `moving`: it has an account the moved validator owns.
    fn transfer(&mut self, transfer: (usize, usize, i64), moving: bool, outcome: TxnOutcome) {
        match outcome {
            TxnOutcome::Committed => {
                self.committed.push(transfer);
                self.through_moved += usize::from(self.at_move.is_some() && moving);
            }
            TxnOutcome::Aborted { reason } => self.abort(format!("{reason:?}")),
        }
    }

    /// An audit's outcome and the sum it read.
    fn audit(&mut self, sum: i64, outcome: TxnOutcome) {
        match outcome {
            TxnOutcome::Committed => {
                self.audits += 1;
                self.audits_after_move += usize::from(self.at_move.is_some());
                if sum != INITIAL * ACCOUNTS as i64 {
                    self.bad_audits.push(sum);
                }
            }
            TxnOutcome::Aborted { reason } => self.abort(format!("audit {reason:?}")),
        }
    }

    fn abort(&mut self, reason: String) {
        *self.aborted.entry(reason).or_default() += 1;
    }
}

type Shared = Arc<Mutex<Ledger>>;

fn ledger(l: &Shared) -> std::sync::MutexGuard<'_, Ledger> {
    l.lock().unwrap()
}

/// The keys `kbank.validators` shard `shard` validates: `name` followed by the first number
/// that lands there.
fn owned_key(validators: &strata_client::Table, name: &str, shard: u32) -> String {
    (0..)
        .map(|i| format!("{name}{i}"))
        .find(|k| validators.shard_of(k.as_bytes()) == shard)
        .unwrap()
}

/// One transfer client: random transfers between the accounts, each committed (and its
/// decisions applied) or aborted with a reason, until `stop`. `owned[i]`: account `i` is
/// validated by the shard that moves.
async fn transfers(
    client: Client,
    seed: u64,
    owned: Vec<bool>,
    book: Shared,
    stop: Arc<AtomicBool>,
) {
    let mut rng = seed;
    while !stop.load(Ordering::Relaxed) {
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let from = (rng >> 33) as usize % ACCOUNTS;
        let to = (from + 1 + (rng >> 45) as usize % (ACCOUNTS - 1)) % ACCOUNTS;
        let amount = 1 + (rng >> 20) as i64 % 5;
        let mut tx = client.transaction();
        let read = |e: ClientError| -> Option<Bytes> {
            panic!("transfer {from} -> {to}: a read failed: {e}")
        };
        let x = number(tx.read(TABLE, account(from)).await.unwrap_or_else(read));
        let y = number(tx.read(TABLE, account(to)).await.unwrap_or_else(read));
        tx.write(TABLE, account(from), (x - amount).to_string());
        tx.write(TABLE, account(to), (y + amount).to_string());
        let outcome = tx.commit_and_sync().await;
        let outcome = outcome.unwrap_or_else(|e| panic!("transfer {from} -> {to} undecided: {e}"));
        ledger(&book).transfer((from, to, amount), owned[from] || owned[to], outcome);
        tokio::time::sleep(PACE).await;
    }
}

/// The audit client: read-only transactions over every account until `stop`; each one
/// committed must sum to the total.
async fn audits(client: Client, book: Shared, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let mut tx = client.transaction();
        let mut sum = 0;
        for i in 0..ACCOUNTS {
            sum += number(tx.read(TABLE, account(i)).await.expect("an audit's read"));
        }
        let outcome = tx.commit().await.unwrap_or_else(|e| panic!("an audit undecided: {e}"));
        ledger(&book).audit(sum, outcome);
    }
}

/// Polls `cond` over the ledger every 10 ms until it holds, for up to [`WITHIN`].
async fn wait_ledger(book: &Shared, what: &str, cond: impl Fn(&Ledger) -> bool) {
    eventually(what, WITHIN, || cond(&ledger(book))).await;
}

/// The node leading `kbank.validators` shard `shard`.
async fn validator_leader(endpoints: &[SocketAddr], shard: u32) -> NodeId {
    let deadline = Instant::now() + WITHIN;
    loop {
        let replicas = shard_replicas(endpoints, VALIDATORS, shard).await;
        if let Some(l) = leader_of(&replicas).and_then(|l| l.leader) {
            return l;
        }
        assert!(Instant::now() < deadline, "no leader of {VALIDATORS} {shard}: {replicas:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until no replica of any shard of the two tables holds a lock.
async fn wait_no_locks(endpoints: &[SocketAddr]) {
    let deadline = Instant::now() + WITHIN;
    loop {
        let mut held = Vec::new();
        for (table, shards) in [(TABLE, 2), (VALIDATORS, 2)] {
            for shard in 0..shards {
                let replicas = shard_replicas(endpoints, table, shard).await;
                held.extend(replicas.into_iter().filter(|r| r.locks > 0));
            }
        }
        if held.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "locks left: {held:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What the scenario saw.
struct Observed {
    /// Each probe's name and how its commit after the move ended.
    probes: Vec<(&'static str, TxnOutcome)>,
    /// The conflicting pair on a key of the moved validator: the first's and second's outcome.
    pair: (TxnOutcome, TxnOutcome),
}

/// The scenario of the module docs; `plant` is the canary's move, and `load` runs the
/// transfer and audit clients around it (the canary runs the probes alone).
async fn validator_move(plant: Option<MovePlant>, load: bool) -> Observed {
    let def = TableDef { validation: TableValidation::Sharded(2), ..kairos_table(TABLE, 2) };
    let (_nodes, endpoints) = cluster_of_with(NODES, &[def]).await;
    let client = Client::connect(&endpoints, opts()).await.unwrap();
    let validators = client.table(VALIDATORS).await.unwrap();
    let moving = validators.shard_of(account(0).as_bytes());
    let owned: Vec<bool> =
        (0..ACCOUNTS).map(|i| validators.shard_of(account(i).as_bytes()) == moving).collect();
    let key = |name| owned_key(&validators, name, moving);
    let (old, new, late, cached, pair) =
        (key("old"), key("new"), key("late"), key("cached"), key("pair"));

    let mut init = client.transaction();
    for i in 0..ACCOUNTS {
        init.write(TABLE, account(i), INITIAL.to_string());
    }
    for k in [&old, &late, &cached, &pair] {
        init.write(TABLE, k.clone(), "0");
    }
    assert_eq!(init.commit_and_sync().await.unwrap(), TxnOutcome::Committed);
    // A client whose cache holds `cached` (its lease lasts the whole test).
    let caching = caching_client(&endpoints, LeasePolicy::Fixed(Duration::from_secs(60))).await;
    assert_eq!(read_txn(&caching, TABLE, &cached, None).await.1, TxnOutcome::Committed);

    let book = Shared::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    if load {
        for seed in 0..TRANSFER_CLIENTS {
            let c = Client::connect(&endpoints, opts()).await.unwrap();
            workers.push(tokio::spawn(transfers(
                c,
                seed,
                owned.clone(),
                book.clone(),
                stop.clone(),
            )));
        }
        let c = Client::connect(&endpoints, opts()).await.unwrap();
        workers.push(tokio::spawn(audits(c, book.clone(), stop.clone())));
        wait_ledger(&book, "transfers and an audit before the move", |l| {
            l.committed.len() >= BETWEEN && l.audits >= 1
        })
        .await;
    }

    // Reads of keys the moving validator owns; each will be overwritten before its
    // transaction validates.
    let mut old_rw = client.transaction();
    let mut old_ro = client.transaction();
    let mut new_rw = client.transaction();
    let mut late_rw = client.transaction();
    assert_eq!(old_rw.read(TABLE, old.clone()).await.unwrap().as_deref(), Some(&b"0"[..]));
    assert_eq!(old_ro.read(TABLE, old.clone()).await.unwrap().as_deref(), Some(&b"0"[..]));
    assert_eq!(new_rw.read(TABLE, new.clone()).await.unwrap(), None, "not written yet");
    assert_eq!(late_rw.read(TABLE, late.clone()).await.unwrap().as_deref(), Some(&b"0"[..]));
    let mut overwrite = client.transaction();
    for k in [&old, &new, &cached] {
        overwrite.write(TABLE, k.clone(), "1");
    }
    assert_eq!(overwrite.commit_and_sync().await.unwrap(), TxnOutcome::Committed);

    // The move, to the nodes other than the shard's leader.
    let from = validator_leader(&endpoints, moving).await;
    let to: Vec<NodeId> = (0..NODES).map(NodeId).filter(|&n| n != from).collect();
    let report = client.move_shard_planted(VALIDATORS, moving, to.clone(), plant).await.unwrap();
    assert_eq!(report.placement.replicas, to);
    let moved = report.moved.expect("the state moved");
    // A validator keeps timestamps, not values: its keys travel as Kairos state.
    assert!(moved.keys == 0 && moved.kairos_keys >= 5, "the validator's keys moved: {moved:?}");
    {
        let mut l = ledger(&book);
        l.at_move = Some(l.committed.len());
    }
    let left = Client::connect_node(endpoints[from.0 as usize], opts()).await.unwrap();
    let left = left.status().await.unwrap().shards;
    assert!(
        !left.iter().any(|s| s.table == VALIDATORS && s.shard == moving),
        "{from} still hosts the moved validator"
    );
    let mut overwrite = client.transaction();
    overwrite.write(TABLE, late.clone(), "1");
    assert_eq!(overwrite.commit_and_sync().await.unwrap(), TxnOutcome::Committed);

    // The probes commit after the move (the RW ones as read-modify-writes of their key).
    let mut probes = Vec::new();
    for (name, mut tx, k) in
        [("old_rw", old_rw, &old), ("new_rw", new_rw, &new), ("late_rw", late_rw, &late)]
    {
        tx.write(TABLE, k.clone(), "2");
        probes.push((name, tx.commit_and_sync().await.unwrap()));
    }
    probes.push(("old_ro", old_ro.commit_and_sync().await.unwrap()));
    let hits = caching.kairos_cache_stats().unwrap().cache.hits;
    let (v, outcome) = read_txn(&caching, TABLE, &cached, Some((&cached, "2"))).await;
    assert_eq!(v.as_deref(), Some(&b"0"[..]), "the cached value, overwritten since");
    assert_eq!(caching.kairos_cache_stats().unwrap().cache.hits, hits + 1, "a hit");
    probes.push(("cached_rw", outcome));

    // A conflicting pair on a key of the moved validator: the second to commit aborts.
    let other = Client::connect(&endpoints, opts()).await.unwrap();
    let (mut first, mut second) = (client.transaction(), other.transaction());
    first.read(TABLE, pair.clone()).await.unwrap();
    second.read(TABLE, pair.clone()).await.unwrap();
    first.write(TABLE, pair.clone(), "1");
    second.write(TABLE, pair.clone(), "2");
    let first = first.commit_and_sync().await.unwrap();
    let second = second.commit_and_sync().await.unwrap();
    if first == TxnOutcome::Committed {
        // The moved validator installed the commit: its `latest_committed` is the data's
        // `vts`, and the new group serves it.
        let (mut data, mut vals) = (client.table(TABLE).await.unwrap(), validators.clone());
        let (d, v) = (data.get(pair.clone()).await.unwrap(), vals.get(pair.clone()).await.unwrap());
        assert_eq!(d.value.as_deref(), Some(&b"1"[..]));
        assert!(v.vts == d.vts && to.contains(&v.served_by), "{d:?} {v:?}");
    }

    if load {
        wait_ledger(&book, "transfers through the moved validator", |l| {
            let after = l.committed.len() - l.at_move.unwrap();
            after >= BETWEEN && l.through_moved >= 1 && l.audits_after_move >= 1
        })
        .await;
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            w.await.expect("a client finished without error");
        }
        check_balances(&client, &book).await;
        wait_no_locks(&endpoints).await;
    }
    Observed { probes, pair: (first, second) }
}

/// The totals and the balances (module docs), once the clients stopped.
async fn check_balances(client: &Client, book: &Shared) {
    let l = std::mem::take(&mut *ledger(book));
    assert!(
        l.audits >= 1 && l.bad_audits.is_empty(),
        "audits {}, wrong sums {:?}",
        l.audits,
        l.bad_audits
    );
    let mut expect = vec![INITIAL; ACCOUNTS];
    for &(from, to, amount) in &l.committed {
        expect[from] -= amount;
        expect[to] += amount;
    }
    let balances = client
        .run_txn(strata_client::RetryPolicy { attempts: 1000, ..Default::default() }, |tx| {
            Box::pin(async move {
                let mut b = Vec::new();
                for i in 0..ACCOUNTS {
                    b.push(number(tx.read(TABLE, account(i)).await?));
                }
                Ok(b)
            })
        })
        .await
        .unwrap();
    assert_eq!(balances.iter().sum::<i64>(), INITIAL * ACCOUNTS as i64, "the total");
    assert_eq!(balances, expect, "each account: initial plus its committed transfers");
    eprintln!(
        "{} transfers committed ({} after the move, {} through the moved validator), {} audits ({} after the move); aborts: {:?}",
        l.committed.len(),
        l.committed.len() - l.at_move.unwrap(),
        l.through_moved,
        l.audits,
        l.audits_after_move,
        l.aborted
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_validator_shard_keeps_validating_and_no_stale_read_commits() {
    let seen = validator_move(None, true).await;
    let stale = TxnOutcome::Aborted { reason: AbortReason::Stale };
    for (name, outcome) in seen.probes {
        assert_eq!(outcome, stale, "{name}: a read overwritten before it validated");
    }
    assert_eq!(seen.pair, (TxnOutcome::Committed, stale), "the conflicting pair");
}

/// The canary: a move that loses the validator state lets `new_rw` — which read its key
/// before another transaction created it — commit its stale read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_a_move_that_loses_the_validator_state_commits_a_stale_read() {
    let seen = validator_move(Some(MovePlant::LoseKairos), false).await;
    let new_rw = seen.probes.iter().find(|(name, _)| *name == "new_rw").unwrap().1;
    assert_eq!(
        new_rw,
        TxnOutcome::Committed,
        "without its state the new group took the stale read"
    );
}
