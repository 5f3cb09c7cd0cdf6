//! Transactions over log tables (RIFL's client-driven two-phase commit, `specs/rifl.md` §2.4,
//! §5.8.1): reads go to the keys' shard leaders and are remembered with their versions; writes
//! and deletes are buffered; `commit` prepares every object at its shard's leader in one
//! parallel round and returns the decision, then sends the decisions.
//!
//! * **Ids.** A transaction of `n` objects takes a block of `n + 1` ids of the client's lease
//!   (R-D22); object `i` (in `(table, key)` order) is prepared under `base + 1 + i`, so each
//!   prepare is an exactly-once RPC whose record is the object's vote, and the recovery
//!   coordinator's abort request finds it (§5.8.4).
//! * **Fast paths.** A read-only transaction only validates (P1: no lock, no record); one
//!   whose objects all live in one shard is decided by its prepare (P3, R-D17).
//! * **Decisions** follow the answer (T6-T7): `commit` returns once every vote is in (one
//!   parallel round of prepares, each durable on a majority) and the decisions travel in the
//!   background; [`Transaction::commit_and_sync`] waits for them too (R-D24), which a process
//!   about to exit needs. The block is acknowledged (`rpc_completed`) only after every decision
//!   is (§5.8.1), so the votes outlive them.
//! * **Kairos tables** (`--txn kairos`, kairos.md): the same rounds, ids, records and
//!   recovery; reads remember the value's `vts` and `fts = max(vts, wm)` (§5.2, watermarks
//!   and reports are `kairos_wm`'s), `commit` stamps the transaction with a commit timestamp
//!   (§5.1: RW from the client's clock and lease id, bumped above every version read; RO
//!   `max fts`; the clock, its emulated skew and strict mode are `crate::kairos`'s), and each
//!   participant validates its part with Algorithm 3 when the prepare's entry is applied. A
//!   read-only transaction is validated through the log too (validation raises
//!   `latest_read`) and needs no decision. Reads never wait for prepared writes (§5.3). A
//!   table with sharded validators (`--validation sharded:V`) is prepared at the validators
//!   of its keys and at the data shards of its written keys instead (`txn_sharded`).
//! * **Locks.** A plain read of a key a transaction holds waits at the leader until the
//!   decision is applied, and a plain write is retried by the library until then (§5.9); a
//!   transaction's prepare never waits for one: the object votes `Abort(Locked)` and
//!   `run_txn` retries the whole transaction with back-off.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::future::try_join_all;
use strata_rifl::SequenceError;
use strata_wire::client::{
    shard_of, validators_table, Request, Response, TableDef, TableTxn, TableValidation,
    MAX_READ_MANY_KEYS,
};
use strata_wire::log::{Expect, LogIndex};
use strata_wire::txn::{
    AbortReason, Decision, KairosPrepare, ReadIntent, Timestamp, TxnAction, TxnObject, TxnOp, Vote,
};
use strata_wire::{LeaseInfo, Rifl, RpcId};
use tokio::sync::Notify;

use crate::client::{Client, RiflClient};
use crate::error::ClientError;
use crate::kairos::{CommitInfo, ReadInfo, WriteInfo};
use crate::kairos_cache::CachedRead;
use crate::kairos_wm::{self, Incomplete, TxnFreshness, Watermarks};
use crate::session::unexpected;
use crate::table::Table;
use crate::txn_sharded;

/// What `commit` decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnOutcome {
    /// Every write and delete took effect, atomically, as one step after every read.
    Committed,
    /// Nothing took effect.
    Aborted { reason: AbortReason },
}

/// What the client's transactions share: one lease and its request tracker (the window of
/// 512 ids, R-D22), and a routing handle per table whose connections every transaction uses.
pub(crate) struct TxnShared {
    rifl: Mutex<RiflClient>,
    /// Woken when a block completes (a transaction waiting for room in the window).
    completed: Notify,
    tables: Mutex<HashMap<String, Table>>,
    /// Kairos's watermarks (kairos.md §5.9): incomplete transactions, reports, `wm_view`.
    watermarks: Arc<Watermarks>,
}

impl TxnShared {
    pub(crate) fn new(rifl: RiflClient) -> TxnShared {
        TxnShared {
            rifl: Mutex::new(rifl),
            completed: Notify::new(),
            tables: Mutex::default(),
            watermarks: Arc::default(),
        }
    }

    pub(crate) fn watermarks(&self) -> &Arc<Watermarks> {
        &self.watermarks
    }

    /// The lease this client's reports go under (kairos.md §5.9 `WatermarkReport.client`).
    pub(crate) async fn lease(&self) -> Result<LeaseInfo, ClientError> {
        let keeper = self.rifl().keeper.clone();
        keeper.acquire().await
    }

    fn rifl(&self) -> std::sync::MutexGuard<'_, RiflClient> {
        self.rifl.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// §5.8.1 T2: a block of `n` ids under the current lease, waiting while the window is full.
    async fn block(&self, n: u64) -> Result<(LeaseInfo, u64), ClientError> {
        loop {
            let keeper = self.rifl().keeper.clone();
            let lease = keeper.acquire().await?;
            let notified = self.completed.notified();
            {
                let mut r = self.rifl();
                r.adopt(&lease);
                match r.tracker.new_sequence_block(n) {
                    Ok(base) => return Ok((lease, base)),
                    Err(SequenceError::TooLarge { requested, window }) => {
                        return Err(ClientError::InvalidArgument(format!(
                            "a transaction of {} objects needs {requested} ids; the window is {window} (R-D22)",
                            requested - 1
                        )))
                    }
                    Err(SequenceError::WindowFull { .. }) => {}
                }
            }
            notified.await;
        }
    }

    fn complete(&self, client_id: u64, base: u64) {
        let mut r = self.rifl();
        if r.client_id == client_id {
            r.tracker.rpc_completed(base);
        }
        drop(r);
        self.completed.notify_waiters();
    }

    /// The envelope of the transaction `(client, base)`, with the current `first_incomplete`
    /// and the newest grant of its lease.
    fn envelope(&self, lease: LeaseInfo, base: u64) -> Rifl {
        let r = self.rifl();
        let lease = r.keeper.usable().filter(|l| l.client_id == lease.client_id).unwrap_or(lease);
        let first_incomplete = if r.client_id == lease.client_id {
            r.tracker.first_incomplete().min(base)
        } else {
            base
        };
        Rifl { rpc: RpcId { client_id: lease.client_id, seq: base }, first_incomplete, lease }
    }
}

/// One transaction (rifl.md §2.4). Obtain it with [`Client::transaction`].
pub struct Transaction {
    client: Client,
    /// `(table, key)` -> the value read, its version and (Kairos) its version timestamp.
    reads: BTreeMap<(String, Bytes), (Option<Bytes>, LogIndex, Timestamp)>,
    /// `(table, key)` -> the buffered write (`None`: delete).
    writes: BTreeMap<(String, Bytes), Option<Bytes>>,
    /// Kairos (kairos.md §5.2, §5.9): each read's `fts` and the read set's floor.
    freshness: TxnFreshness,
    /// The reads served by the Kairos cache (`kairos_cache`).
    cache_hits: BTreeSet<(String, Bytes)>,
    /// This transaction's name in its reads for update (random, nonzero): what lets it
    /// release them if it is dropped without a prepare ([`ReadIntent::TxnForUpdate`]).
    reserver: u64,
    /// `(table, shard)` -> the keys read for update there and not yet named by a prepare.
    reserved: BTreeMap<(String, u32), Vec<Bytes>>,
    /// Where the releases run when dropped outside a runtime (a blocking client's).
    runtime: Option<tokio::runtime::Handle>,
}

/// One participant's part: a shard of a table and its operations.
struct Part {
    table: String,
    shard: u32,
    ops: Vec<TxnOp>,
}

impl Transaction {
    pub(crate) fn new(client: Client) -> Transaction {
        Transaction {
            client,
            reads: BTreeMap::new(),
            writes: BTreeMap::new(),
            freshness: TxnFreshness::default(),
            cache_hits: BTreeSet::new(),
            reserver: random_u64().max(1),
            reserved: BTreeMap::new(),
            runtime: None,
        }
    }

    /// Releases run on `runtime` (a blocking client's transaction is dropped outside it).
    pub(crate) fn on_runtime(mut self, runtime: tokio::runtime::Handle) -> Transaction {
        self.runtime = Some(runtime);
        self
    }

    /// The intent of a read of a RIFL table: a transaction's, or for update under this
    /// transaction's name.
    fn intent(&self, for_update: bool) -> ReadIntent {
        match for_update {
            true => ReadIntent::TxnForUpdate { reserver: self.reserver },
            false => ReadIntent::Txn,
        }
    }

    /// Remembers `keys` of `table`'s `shard` as read for update, to release them if this
    /// transaction sends no prepare.
    fn reserved(&mut self, table: &str, shard: u32, keys: impl IntoIterator<Item = Bytes>) {
        self.reserved.entry((table.to_string(), shard)).or_default().extend(keys);
    }

    /// Releases this transaction's reads for update in the background (docs/design.md,
    /// "Reads for update"): the reads of its keys that other transactions make go on now
    /// rather than when the hold lapses. Nothing to do once a prepare named them.
    fn release_reservations(&mut self) {
        if self.reserved.is_empty() {
            return;
        }
        // Without a runtime the holds lapse on their own.
        let Some(runtime) =
            self.runtime.clone().or_else(|| tokio::runtime::Handle::try_current().ok())
        else {
            return;
        };
        let reserved = std::mem::take(&mut self.reserved);
        runtime.spawn(release(self.client.clone(), reserved, self.reserver));
    }

    /// Ends the transaction without committing: nothing it buffered is sent, and the keys it
    /// read for update are released at their shards' leaders before this returns, so other
    /// transactions' reads for update of them go on at once (docs/design.md, "Reads for
    /// update"). Dropping a transaction does the same in the background; a process about to
    /// exit wants this.
    pub async fn rollback(mut self) {
        let reserved = std::mem::take(&mut self.reserved);
        release(self.client.clone(), reserved, self.reserver).await
    }

    /// The value of `key` in `table` as this transaction sees it: its own buffered write, else
    /// what it read before, else the value at the key's shard leader (waiting while a
    /// transaction holds the key), remembered with its version for validation.
    pub async fn read(
        &mut self,
        table: &str,
        key: impl Into<Bytes>,
    ) -> Result<Option<Bytes>, ClientError> {
        self.read_with(table, key, false).await
    }

    /// [`read`](Self::read) of a key this transaction means to write (`SELECT … FOR UPDATE`):
    /// on a RIFL table, the shard leader holds the key's other reads for update back until
    /// this transaction's prepare arrives (or 5 ms pass), and answers them with what it will
    /// leave. Read-modify-write transactions of a hot key then queue instead of reading the
    /// same version and all but one aborting. Only a hint: nothing is locked, the prepare
    /// validates the read as any other. On a Kairos table, the same as `read`.
    ///
    /// The hold lasts from this read to the prepare, so among keys of one shard read the
    /// most contended last, or all together
    /// ([`read_many_for_update`](Self::read_many_for_update)): docs/benchmarks.md measured
    /// 1.39× the committed transactions under zipfian contention with the hottest key read
    /// last. Not across shards: there, a wait for a hot key that another shard's two-phase
    /// commit keeps prepared can outlast the hold of a key read before it.
    pub async fn read_for_update(
        &mut self,
        table: &str,
        key: impl Into<Bytes>,
    ) -> Result<Option<Bytes>, ClientError> {
        self.read_with(table, key, true).await
    }

    /// [`read`](Self::read) of several keys of `table`, with the keys of each shard read in
    /// one request (`MGET`-like): one round trip per shard instead of one per key. The values
    /// come in the order of `keys`.
    pub async fn read_many<K: Into<Bytes>>(
        &mut self,
        table: &str,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<Vec<Option<Bytes>>, ClientError> {
        self.read_many_with(table, keys, false).await
    }

    /// [`read_for_update`](Self::read_for_update) of several keys, a shard's keys in one
    /// request: its leader reserves them together, and the shards are read one after the
    /// other in shard order, so that two transactions never each hold a key the other waits
    /// for (docs/design.md, "Reads of several keys").
    pub async fn read_many_for_update<K: Into<Bytes>>(
        &mut self,
        table: &str,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<Vec<Option<Bytes>>, ClientError> {
        self.read_many_with(table, keys, true).await
    }

    /// [`read_many`](Self::read_many), or with `for_update`
    /// [`read_many_for_update`](Self::read_many_for_update).
    pub async fn read_many_with<K: Into<Bytes>>(
        &mut self,
        table: &str,
        keys: impl IntoIterator<Item = K>,
        for_update: bool,
    ) -> Result<Vec<Option<Bytes>>, ClientError> {
        let keys: Vec<Bytes> = keys.into_iter().map(Into::into).collect();
        let mut t = self.client.txn_table(table).await?;
        // A Kairos table's reads go through the client's cache, key by key.
        if t.def().txn == TableTxn::Kairos {
            let mut values = Vec::with_capacity(keys.len());
            for key in keys {
                values.push(self.read_with(table, key, for_update).await?);
            }
            return Ok(values);
        }
        let mut by_shard: BTreeMap<u32, Vec<Bytes>> = BTreeMap::new();
        for key in &keys {
            let id = (table.to_string(), key.clone());
            let group = by_shard.entry(t.shard_of(key)).or_default();
            if self.known(&id).is_none() && !group.contains(key) {
                group.push(key.clone());
            }
        }
        for group in by_shard.into_values() {
            for chunk in group.chunks(MAX_READ_MANY_KEYS).filter(|c| !c.is_empty()) {
                let intent = self.intent(for_update);
                let reads = match t.get_many_for_txn(chunk.to_vec(), intent).await {
                    // Values too large for one frame together: one key at a time.
                    Err(ClientError::InvalidArgument(_)) if chunk.len() > 1 => {
                        let mut reads = Vec::with_capacity(chunk.len());
                        for key in chunk {
                            reads.push(t.get_for_txn(key.clone(), intent).await?);
                        }
                        reads
                    }
                    reads => reads?,
                };
                if for_update {
                    self.reserved(table, t.shard_of(&chunk[0]), chunk.iter().cloned());
                }
                for (key, r) in chunk.iter().zip(reads) {
                    let id = (table.to_string(), key.clone());
                    self.reads.insert(id, (r.value, r.update_index, r.vts));
                }
            }
        }
        let value = |key: Bytes| self.known(&(table.to_string(), key)).expect("every key was read");
        Ok(keys.into_iter().map(value).collect())
    }

    /// What this transaction already knows of `id`: its buffered write, else its read.
    fn known(&self, id: &(String, Bytes)) -> Option<Option<Bytes>> {
        let read = || self.reads.get(id).map(|(v, _, _)| v.clone());
        self.writes.get(id).cloned().or_else(read)
    }

    /// [`read`](Self::read), or with `for_update` [`read_for_update`](Self::read_for_update):
    /// for callers that decide at run time whether the key will be written.
    pub async fn read_with(
        &mut self,
        table: &str,
        key: impl Into<Bytes>,
        for_update: bool,
    ) -> Result<Option<Bytes>, ClientError> {
        let id = (table.to_string(), key.into());
        if let Some(v) = self.known(&id) {
            return Ok(v);
        }
        let mut t = self.client.txn_table(table).await?;
        let Some(wm) = self.kairos_before_read(&t).await else {
            let r = t.get_for_txn(id.1.clone(), self.intent(for_update)).await?;
            if for_update {
                self.reserved(table, t.shard_of(&id.1), [id.1.clone()]);
            }
            self.reads.insert(id, (r.value.clone(), r.update_index, r.vts));
            return Ok(r.value);
        };
        // kairos.md §5.2 steps 3-4, through the cache if the client has one (`kairos_cache`).
        let r = match self.client.kairos_cache() {
            Some(cache) => cache.read(&mut t, id.1.clone(), wm).await?,
            None => CachedRead::fetched(t.get(id.1.clone()).await?, wm),
        };
        self.freshness.record(id.clone(), r.fts);
        if r.hit {
            self.cache_hits.insert(id.clone());
        }
        self.reads.insert(id, (r.value.clone(), r.update_index, r.vts));
        Ok(r.value)
    }

    /// kairos.md §5.2: for a read of a Kairos table, the `wm_view` read before it is sent.
    /// The table's first read registers this client with its shards first (§5.9: one report
    /// round, awaited, see `kairos_wm`).
    async fn kairos_before_read(&mut self, t: &Table) -> Option<Timestamp> {
        if t.def().txn != TableTxn::Kairos {
            return None;
        }
        if self.kairos_report_to(t.def()) {
            kairos_wm::report_round(&self.client).await;
        }
        Some(self.freshness.before_read(self.client.txns().watermarks()))
    }

    /// kairos.md §5.9: the shards of the Kairos tables this client reads or prepares at get
    /// its reports. True if `table` is new to this client.
    /// A table with sharded validators adds its validators (`T.validators`, V shards): their
    /// prepares are where `TooOld` is decided (§5.6), so their `ts_GC` must be learned at the
    /// registration too.
    fn kairos_report_to(&self, table: &TableDef) -> bool {
        let wm = self.client.txns().watermarks().clone();
        let mut new = wm.use_table(&table.name, table.shards);
        if let TableValidation::Sharded(v) = table.validation {
            new |= wm.use_table(&validators_table(&table.name), v);
        }
        if new {
            kairos_wm::start_reporter(&self.client, &wm);
        }
        new
    }

    /// The `fts` of this transaction's read of `key` in a Kairos table (kairos.md §5.2:
    /// `max(vts, wm)`), `None` if it did not read it. For tests and diagnostics.
    pub fn kairos_fts(&self, table: &str, key: impl Into<Bytes>) -> Option<Timestamp> {
        self.freshness.fts.get(&(table.to_string(), key.into())).copied()
    }

    /// Buffers a write of `key`; nothing is sent before `commit`.
    pub fn write(&mut self, table: &str, key: impl Into<Bytes>, value: impl Into<Bytes>) {
        self.writes.insert((table.to_string(), key.into()), Some(value.into()));
    }

    /// Buffers a delete of `key`.
    pub fn delete(&mut self, table: &str, key: impl Into<Bytes>) {
        self.writes.insert((table.to_string(), key.into()), None);
    }

    /// Decides the transaction (§5.8.1) and returns once every vote is in; the decisions are
    /// sent in the background. `Err` only for what the library cannot hide: the lease expired
    /// (`ExpiredLease`: whether it committed is then decided by recovery, unknown here), a
    /// table unavailable beyond the retry time, or an invalid transaction.
    pub async fn commit(self) -> Result<TxnOutcome, ClientError> {
        Ok(self.run(false).await?.0)
    }

    /// [`Transaction::commit`], and for a committed transaction over Kairos tables what it saw
    /// ([`CommitInfo`]: its commit timestamp, each read's version timestamp, its writes).
    pub async fn commit_detailed(self) -> Result<(TxnOutcome, Option<CommitInfo>), ClientError> {
        let (reads, writes) = self.seen();
        let (outcome, commit_ts) = self.run(false).await?;
        let info = commit_ts
            .filter(|_| outcome == TxnOutcome::Committed)
            .map(|commit_ts| CommitInfo { commit_ts, read_only: writes.is_empty(), reads, writes });
        Ok((outcome, info))
    }

    /// The reads (with their version timestamps) and writes, in `(table, key)` order.
    fn seen(&self) -> (Vec<ReadInfo>, Vec<WriteInfo>) {
        let reads = self.reads.iter().map(|((table, key), (value, _, vts))| ReadInfo {
            table: table.clone(),
            key: key.clone(),
            value: value.clone(),
            vts: *vts,
        });
        let writes = self.writes.iter().map(|((t, k), v)| (t.clone(), k.clone(), v.clone()));
        (reads.collect(), writes.collect())
    }

    /// [`Transaction::commit`], then waits until every participant applied the decision
    /// (R-D24): what a process that exits right after needs, or its locks wait for recovery.
    pub async fn commit_and_sync(self) -> Result<TxnOutcome, ClientError> {
        Ok(self.run(true).await?.0)
    }

    /// The outcome and, for Kairos tables, the commit timestamp.
    async fn run(mut self, sync: bool) -> Result<(TxnOutcome, Option<Timestamp>), ClientError> {
        // T1: every object, in (table, key) order, with its action and expected version.
        let mut objects: BTreeMap<(String, Bytes), (TxnAction, Option<Expect>)> = BTreeMap::new();
        for (id, (_, version, _)) in &self.reads {
            objects.insert(id.clone(), (TxnAction::Read, Some(Expect::Version(*version))));
        }
        for (id, w) in &self.writes {
            let action = w.clone().map_or(TxnAction::Delete, TxnAction::Write);
            let expect = self.reads.get(id).map(|(_, v, _)| Expect::Version(*v));
            objects.insert(id.clone(), (action, expect));
        }
        if objects.is_empty() {
            return Ok((TxnOutcome::Committed, None)); // T0
        }
        let read_only = self.writes.is_empty();
        let kairos = self.kairos_mode(objects.keys().map(|(t, _)| t.as_str())).await?;
        let objects = match kairos {
            true => txn_sharded::kairos_objects(&self.client, objects).await?,
            false => objects,
        };
        let shared = self.client.txns();
        let (lease, base) = shared.block(objects.len() as u64 + 1).await?;
        // kairos.md §5.1, §5.4: the timestamps, once the lease (`node`) is known. An RW
        // transaction is incomplete (§5.9) until its decisions are applied.
        let mut incomplete = None;
        let kairos = kairos.then(|| {
            let vts = self.reads.values().map(|(_, _, t)| *t);
            let fts = self.freshness.fts.values().copied();
            let clock = self.client.kairos_clock();
            let commit_ts = if read_only {
                clock.ro_commit_ts(lease.client_id, fts.clone()) // max fts (strict: and now)
            } else {
                let (ts, guard) = clock.rw_commit_ts(lease.client_id, vts, shared.watermarks());
                incomplete = Some(guard);
                ts
            };
            (commit_ts, fts.min())
        });
        let all: Vec<TxnObject> = objects
            .keys()
            .enumerate()
            .map(|(i, (table, key))| TxnObject {
                table: table.clone(),
                key: key.clone(),
                seq: base + 1 + i as u64,
            })
            .collect();
        let mut parts: BTreeMap<(String, u32), Part> = BTreeMap::new();
        for (obj, (_, (action, expect))) in all.iter().zip(objects) {
            let shards = self.client.txn_def(&obj.table).await?.shards;
            let shard = shard_of(&obj.key, shards);
            let part = parts.entry((obj.table.clone(), shard)).or_insert_with(|| Part {
                table: obj.table.clone(),
                shard,
                ops: Vec::new(),
            });
            // Kairos validates timestamps, not log indexes: no `expect`.
            let expect = if kairos.is_some() { None } else { expect };
            part.ops.push(TxnOp { key: obj.key.clone(), seq: obj.seq, expect, action });
        }
        if kairos.is_some() {
            for (table, _) in parts.keys() {
                self.kairos_report_to(&*self.client.txn_def(table).await?);
            }
        }
        let stamps = kairos.map(|(commit_ts, freshness)| (commit_ts, freshness, read_only));
        let result = self.prepare(&shared, lease, base, read_only, stamps, &all, &parts).await;
        let (votes, decided) = match result {
            // Every participant had a prepare naming its keys: nothing left to release.
            Ok(v) => {
                self.reserved.clear();
                v
            }
            Err(e) => {
                // The block stays outstanding: recovery decides what was prepared, and the
                // prepares' records must outlive it (§5.8.5); a lost lease restarts the ids.
                return Err(e);
            }
        };
        // T5: `Commit` iff every object voted `Prepared` (an object without a vote follows
        // an `Abort` at its participant).
        let prepared = votes.len() == all.len() && votes.values().all(|v| *v == Vote::Prepared);
        let decision = if prepared { Decision::Commit } else { Decision::Abort };
        let outcome = match decision {
            Decision::Commit => TxnOutcome::Committed,
            Decision::Abort => TxnOutcome::Aborted {
                reason: votes
                    .values()
                    .find_map(|v| match v {
                        Vote::Abort(r) => Some(*r),
                        Vote::Prepared => None,
                    })
                    .unwrap_or(AbortReason::Conflict),
            },
        };
        let commit_ts = kairos.map(|(ts, _)| ts);
        // kairos.md §5.5: the cache drops what the votes and the writes made old.
        if let Some(cache) = self.client.kairos_cache().filter(|_| kairos.is_some()) {
            cache.after_decision(decision, &all, &votes, self.writes.keys(), &self.cache_hits);
        }
        if outcome == (TxnOutcome::Aborted { reason: AbortReason::TooOld }) {
            self.on_too_old(&shared).await;
        }
        // K5 (b), §5.5: a strict commit is reported after every decision is acknowledged and
        // the commit wait.
        let strict_wait = commit_ts
            .filter(|_| outcome == TxnOutcome::Committed && self.client.kairos_clock().strict());
        // T7: nothing to decide for a validation or a prepare that decided at once.
        if read_only || (parts.len() == 1 && decided) {
            shared.complete(lease.client_id, base);
        } else {
            let sync = sync || strict_wait.is_some();
            self.decide(&shared, lease, base, decision, parts, sync, incomplete).await?;
        }
        if let Some(ts) = strict_wait {
            self.client.kairos_clock().commit_wait(lease.client_id, ts).await;
        }
        Ok((outcome, commit_ts))
    }

    /// T7: the decisions, awaited if `sync`, else in the background. A Kairos RW transaction
    /// is `incomplete` (§5.9) until they are all applied (or given up on).
    #[allow(clippy::too_many_arguments)]
    async fn decide(
        &self,
        shared: &Arc<TxnShared>,
        lease: LeaseInfo,
        base: u64,
        decision: Decision,
        parts: BTreeMap<(String, u32), Part>,
        sync: bool,
        incomplete: Option<Incomplete>,
    ) -> Result<(), ClientError> {
        let decide = decide_all(self.client.clone(), shared.clone(), lease, base, decision, parts);
        // (Complete, §5.9, once every participant applied the decision, or given up.)
        let decide = async move {
            let r = decide.await;
            drop(incomplete);
            r
        };
        if sync {
            decide.await?;
        } else {
            tokio::spawn(async move {
                if let Err(e) = decide.await {
                    // The locks wait for recovery (`T_TX`); the block stays outstanding.
                    tracing::warn!(error = %e, "a transaction's decisions were not all delivered");
                }
            });
        }
        Ok(())
    }

    /// kairos.md §5.9, §6.5: `TooOld` means this client's reads are older than a shard's
    /// `ts_GC` (its reports were late or dropped). One report round at once brings
    /// `wm_view` up to the shards' `ts_GC`, so a retry's reads are fresh enough; cache
    /// entries below it would abort again.
    async fn on_too_old(&self, shared: &TxnShared) {
        kairos_wm::report_round(&self.client).await;
        kairos_wm::drop_cache_entries_below(&self.client, shared.watermarks().ts_gc());
    }

    /// T3-T4: one prepare per participant, concurrently, each retried with the same ids
    /// until it is answered. Returns the votes by id and whether every participant decided.
    #[allow(clippy::too_many_arguments)]
    async fn prepare(
        &self,
        shared: &Arc<TxnShared>,
        lease: LeaseInfo,
        base: u64,
        read_only: bool,
        kairos: Option<(Timestamp, Option<Timestamp>, bool)>,
        all: &[TxnObject],
        parts: &BTreeMap<(String, u32), Part>,
    ) -> Result<(BTreeMap<u64, Vote>, bool), ClientError> {
        // Polled together in this task: no task spawned (and no future moved) per participant.
        let mut calls = Vec::with_capacity(parts.len());
        for part in parts.values() {
            let mut t = self.client.txn_table(&part.table).await?;
            let (role, reads_from) = txn_sharded::part_role(t.def());
            let vts_of = |table: &str, key: &Bytes| {
                self.reads.get(&(table.to_string(), key.clone())).map(|r| r.2)
            };
            let kairos = kairos.map(|(commit_ts, freshness, read_only)| KairosPrepare {
                commit_ts,
                freshness,
                read_only,
                read_vts: txn_sharded::read_vts(
                    part.ops.iter().map(|o| &o.key),
                    reads_from,
                    vts_of,
                ),
                role,
                ts_gc: Timestamp::ZERO, // the shard's leader stamps its own (kairos.md §5.9)
            });
            let req = Request::TxnPrepare {
                table: part.table.clone(),
                shard: part.shard,
                read_only,
                all: all.to_vec(),
                ops: part.ops.clone(),
                kairos,
            };
            let shard = part.shard;
            calls.push(
                async move { t.leader_call(shard, || shared.envelope(lease, base), req).await },
            );
        }
        let mut votes = BTreeMap::new();
        let mut decided = true;
        for answer in try_join_all(calls).await? {
            match answer {
                Response::TxnVotes { votes: v, decided: d } => {
                    decided &= d;
                    votes.extend(v);
                }
                other => return Err(unexpected(other)),
            }
        }
        Ok((votes, decided))
    }

    /// Whether the transaction's tables are Kairos tables (all of them) or RIFL tables (all
    /// of them): one concurrency control per transaction, since a RIFL participant's vote
    /// and a Kairos participant's do not compose into one serial order.
    async fn kairos_mode<'a>(
        &self,
        tables: impl Iterator<Item = &'a str>,
    ) -> Result<bool, ClientError> {
        let mut mode = None;
        for table in tables {
            let kairos = self.client.txn_def(table).await?.txn == TableTxn::Kairos;
            if mode.is_some_and(|m| m != kairos) {
                return Err(ClientError::InvalidArgument(
                    "a transaction spans either kairos tables or rifl tables, not both".into(),
                ));
            }
            mode = Some(kairos);
        }
        Ok(mode.unwrap_or(false))
    }
}

/// T7: the decision at every participant, retried until each applied it; then the block is
/// acknowledged.
async fn decide_all(
    client: Client,
    shared: Arc<TxnShared>,
    lease: LeaseInfo,
    base: u64,
    decision: Decision,
    parts: BTreeMap<(String, u32), Part>,
) -> Result<(), ClientError> {
    let mut calls = Vec::with_capacity(parts.len());
    for part in parts.into_values() {
        let mut t = client.txn_table(&part.table).await?;
        let shared = &shared;
        let req = Request::TxnDecide {
            table: part.table,
            shard: part.shard,
            decision,
            seqs: part.ops.iter().map(|o| o.seq).collect(),
        };
        calls.push(
            async move { t.leader_call(part.shard, || shared.envelope(lease, base), req).await },
        );
    }
    for answer in try_join_all(calls).await? {
        match answer {
            Response::TxnDecided => {}
            other => return Err(unexpected(other)),
        }
    }
    shared.complete(lease.client_id, base);
    Ok(())
}

/// A transaction body for [`Client::run_txn`]: reads and buffers writes on the transaction
/// it is given, and returns what the caller wants back.
pub type TxnBody<'a, T> = Pin<Box<dyn Future<Output = Result<T, ClientError>> + Send + 'a>>;

/// How [`Client::run_txn`] retries.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    /// Attempts in all (at least 1).
    pub attempts: u32,
    /// The first back-off after an abort; doubled each time, up to `max_backoff`, with
    /// jitter (kairos.md §2: 100 µs to 10 ms).
    pub backoff: Duration,
    pub max_backoff: Duration,
}

impl RetryPolicy {
    /// The pause before attempt `attempt` (0-based; none before the first): `backoff`
    /// doubled per abort up to `max_backoff`, drawn from its upper half so that clients
    /// that collided spread out.
    pub fn pause_before(&self, attempt: u32) -> Duration {
        if attempt == 0 {
            return Duration::ZERO;
        }
        let doublings = (attempt - 1).min(30);
        let pause = self.backoff.saturating_mul(1 << doublings).min(self.max_backoff);
        pause / 2 + pause.mul_f64(rand_unit()) / 2
    }
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            attempts: 20,
            backoff: Duration::from_micros(100),
            max_backoff: Duration::from_millis(10),
        }
    }
}

impl Client {
    /// Starts a transaction over this cluster's transactional log tables (`--txn rifl` or
    /// `--txn kairos`; one kind per transaction).
    pub fn transaction(&self) -> Transaction {
        Transaction::new(self.clone())
    }

    /// Runs `body` in a transaction and commits it, again with back-off while it aborts
    /// (conflicts, locks); returns the body's value from the attempt that committed, or
    /// `TxnAborted` with the last reason once `policy.attempts` aborted.
    pub async fn run_txn<T, F>(&self, policy: RetryPolicy, body: F) -> Result<T, ClientError>
    where
        F: for<'a> FnMut(&'a mut Transaction) -> TxnBody<'a, T>,
    {
        Ok(self.run_txn_detailed(policy, body).await?.0)
    }

    /// [`Client::run_txn`], also returning what the committed attempt saw (Kairos tables:
    /// [`Transaction::commit_detailed`]).
    pub async fn run_txn_detailed<T, F>(
        &self,
        policy: RetryPolicy,
        mut body: F,
    ) -> Result<(T, Option<CommitInfo>), ClientError>
    where
        F: for<'a> FnMut(&'a mut Transaction) -> TxnBody<'a, T>,
    {
        let mut last = AbortReason::Conflict;
        for attempt in 0..policy.attempts.max(1) {
            if attempt > 0 {
                tokio::time::sleep(policy.pause_before(attempt)).await;
            }
            let mut tx = self.transaction();
            let value = body(&mut tx).await?;
            match tx.commit_detailed().await? {
                (TxnOutcome::Committed, info) => return Ok((value, info)),
                (TxnOutcome::Aborted { reason }, _) => last = reason,
            }
        }
        Err(ClientError::TxnAborted { attempts: policy.attempts.max(1), reason: last })
    }

    /// A routing handle on `table` for transactions: its definition from the catalog (once),
    /// refused unless the table takes transactions; connections shared by the client's
    /// transactions.
    pub(crate) async fn txn_table(&self, table: &str) -> Result<Table, ClientError> {
        if let Some(t) = self.cached_txn_table(table, Table::clone) {
            return Ok(t);
        }
        self.load_txn_table(table).await
    }

    /// [`txn_table`](Self::txn_table)'s definition alone, without a handle's copy.
    pub(crate) async fn txn_def(&self, table: &str) -> Result<Arc<TableDef>, ClientError> {
        if let Some(def) = self.cached_txn_table(table, Table::shared_def) {
            return Ok(def);
        }
        Ok(self.load_txn_table(table).await?.shared_def())
    }

    /// `f` of the client's handle on `table`, if it was loaded already.
    fn cached_txn_table<R>(&self, table: &str, f: impl FnOnce(&Table) -> R) -> Option<R> {
        self.txns().tables.lock().unwrap_or_else(|e| e.into_inner()).get(table).map(f)
    }

    async fn load_txn_table(&self, table: &str) -> Result<Table, ClientError> {
        let shared = self.txns();
        let mut t = self.table(table).await?;
        if t.def().txn == TableTxn::None {
            return Err(ClientError::InvalidArgument(format!(
                "table {table:?} does not take transactions (create it with --txn rifl or --txn kairos)"
            )));
        }
        if let Some(cache) = self.kairos_cache().filter(|_| t.def().txn == TableTxn::Kairos) {
            cache.attach(&mut t); // explicit invalidation's pushes
        }
        t.connect_all().await;
        let mut tables = shared.tables.lock().unwrap_or_else(|e| e.into_inner());
        Ok(tables.entry(table.to_string()).or_insert(t).clone())
    }
}

/// Releases `reserver`'s reads for update of `reserved`, a request per shard, in parallel.
async fn release(client: Client, reserved: BTreeMap<(String, u32), Vec<Bytes>>, reserver: u64) {
    let releases = reserved.into_iter().map(|((table, _), keys)| {
        let client = client.clone();
        async move {
            let Ok(mut t) = client.txn_table(&table).await else { return };
            for chunk in keys.chunks(MAX_READ_MANY_KEYS) {
                t.release_reservations(chunk.to_vec(), reserver).await;
            }
        }
    });
    futures::future::join_all(releases).await;
}

impl Drop for Transaction {
    /// A transaction dropped before its prepare (its body failed or returned early) releases
    /// its reads for update.
    fn drop(&mut self) {
        self.release_reservations();
    }
}

/// A number in `[0, 1)` for back-off jitter.
fn rand_unit() -> f64 {
    (random_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// 64 random bits (no randomness crate for this alone): the standard library's randomly
/// keyed hasher over the time.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    );
    h.finish()
}
