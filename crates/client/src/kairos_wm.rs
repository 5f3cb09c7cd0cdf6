//! Kairos watermarks at the client (kairos.md §5.2, §5.9, §3.5): the client's incomplete
//! read-write transactions and live read sets, its `WatermarkReport`s to the leaders of the
//! Kairos shards it used, and its view of their `WM` and `ts_GC`.
//!
//! * **Incomplete RW transactions.** A commit timestamp is issued and registered here in one
//!   step under the client clock's lock (`KairosClock::rw_commit_ts`), and `local_wm` is
//!   computed under the same lock (`KairosClock::marks`): §5.9's first bullet, or a
//!   transaction that read the clock just before a report but registered just after it could
//!   commit below the reported watermark. A transaction stays incomplete until every
//!   participant applied its decision ([`Incomplete`] is dropped then), or the client gave up
//!   on delivering it (recovery finishes it; safe, since K2 rests on validation, §5.15).
//! * **Freshness.** A read remembers `fts = max(vts, wm)`, `wm` the view read *before*
//!   sending it (§5.2). A transaction's reads register, at its first read, the view of that
//!   moment as a floor below every `fts` it will hold ([`LiveReads`]); `c_freshness = min(
//!   wm_view, the floors of live read sets, min fts of the cache)` (§5.9, with Strata's
//!   in-flight reads: the floor is taken before the read is sent).
//! * **Reports.** Every [`REPORT_PERIOD`] a background task sends `KairosReport{lease id,
//!   seq, local_wm, c_freshness}` to the leader of every shard of each Kairos table this
//!   client read or prepared at; each answer raises `wm_view` to the shard's `WM` and `ts_GC`.
//!   Before its first read of a table, a client runs one report round and waits for it
//!   (§5.9's registration): its first reads then get `fts >= ts_GC` of the table's shards,
//!   instead of aborting `TooOld` for reading below what other clients already reported.
//!   `ts_GC` is below some client's reported `c_freshness`, itself below a `WM` some leader
//!   announced, so it is as sound a watermark as `WM` (§5.2's note); taking it lets a client
//!   that was told `TooOld` read fresh enough to pass next time.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use strata_kairos::watermark::{c_freshness, local_wm};
use strata_wire::client::{Request, Response};
use strata_wire::txn::Timestamp;
use tokio::task::JoinSet;

use crate::client::{Client, Shared};

/// kairos.md §3.5: a report every 10 ms (the paper's "every 10,000 transactions" bound is
/// not used: at 10 ms no client of this library runs 10,000 transactions in between).
pub const REPORT_PERIOD: Duration = Duration::from_millis(10);

/// How long one report round waits for the leaders' answers: a shard that does not answer
/// (an election, a dead node) must not hold back the other shards' reports.
const ROUND_TIMEOUT: Duration = Duration::from_millis(200);

/// The client's watermark state, shared by its transactions and its reporter.
#[derive(Default)]
pub(crate) struct Watermarks {
    state: Mutex<State>,
    /// Whether the reporter task runs.
    started: AtomicBool,
    /// Test-only: the periodic reports are not sent (a client gone silent, §6.5).
    paused: AtomicBool,
}

#[derive(Default)]
struct State {
    /// §3.1 `wm_view`: the highest `WM` (or `ts_GC`) a leader answered.
    wm_view: Timestamp,
    /// The highest `ts_GC` a leader answered.
    ts_gc: Timestamp,
    /// The last `ts_GC` each shard's leader answered (diagnostics; tests wait on it).
    shard_ts_gc: BTreeMap<(String, u32), Timestamp>,
    next_id: u64,
    /// Incomplete RW transactions: their commit timestamps.
    incomplete: BTreeMap<u64, Timestamp>,
    /// Live read sets: the `wm_view` before their first read.
    live_reads: BTreeMap<u64, Timestamp>,
    /// `(table, shard)` of every Kairos shard used: where the reports go.
    shards: BTreeSet<(String, u32)>,
    seq: u64,
}

/// One report, computed atomically with the issue of commit timestamps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Marks {
    pub seq: u64,
    pub local_wm: Timestamp,
    pub c_freshness: Timestamp,
}

impl Watermarks {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// §5.9 bullet 1: registers an issued RW commit timestamp as incomplete. The caller holds
    /// the client clock's lock, which [`Watermarks::marks`]'s caller holds too.
    pub(crate) fn register_incomplete(self: &Arc<Self>, commit_ts: Timestamp) -> Incomplete {
        let mut s = self.lock();
        s.next_id += 1;
        let id = s.next_id;
        s.incomplete.insert(id, commit_ts);
        Incomplete { wm: self.clone(), id }
    }

    /// A transaction's first Kairos read: its floor is the current `wm_view`, read and
    /// registered in one step (a report computed meanwhile sees either the floor or an older
    /// `wm_view`, never neither).
    pub(crate) fn begin_reads(self: &Arc<Self>) -> LiveReads {
        let mut s = self.lock();
        s.next_id += 1;
        let id = s.next_id;
        let floor = s.wm_view;
        s.live_reads.insert(id, floor);
        LiveReads { wm: self.clone(), id }
    }

    /// §5.2 `wm = wm_view`, read before a read is sent.
    pub(crate) fn wm_view(&self) -> Timestamp {
        self.lock().wm_view
    }

    /// The highest `ts_GC` heard from a leader.
    pub(crate) fn ts_gc(&self) -> Timestamp {
        self.lock().ts_gc
    }

    /// Adds every shard of `table` to those reported to; true if the table is new.
    pub(crate) fn use_table(&self, table: &str, shards: u32) -> bool {
        let mut s = self.lock();
        let mut new = false;
        for shard in 0..shards {
            new |= s.shards.insert((table.to_string(), shard));
        }
        new
    }

    /// §5.9 the report: `now_ns` is a reading of the client clock taken under its lock, which
    /// the caller still holds (so no commit timestamp is issued in between). `cache_fts`
    /// reads the cache's smallest `fts` after the read-set floors: an entry a transaction
    /// cached after that reading was read under a floor still registered then (a floor goes
    /// only when its transaction ends, after its reads).
    pub(crate) fn marks(
        &self,
        now_ns: u64,
        cache_fts: impl FnOnce() -> Option<Timestamp>,
    ) -> Marks {
        let mut s = self.lock();
        s.seq += 1;
        let local_wm = local_wm(now_ns, s.incomplete.values().copied());
        let floors: Vec<Timestamp> = s.live_reads.values().copied().collect();
        let c_freshness = c_freshness(s.wm_view, cache_fts(), floors);
        Marks { seq: s.seq, local_wm, c_freshness }
    }

    /// The last `ts_GC` each shard's leader answered, by `(table, shard)`.
    pub(crate) fn shard_ts_gc(&self) -> Vec<(String, u32, Timestamp)> {
        self.lock().shard_ts_gc.iter().map(|((t, s), ts)| (t.clone(), *s, *ts)).collect()
    }

    /// The answer of `shard`'s leader: `wm_view = max(wm_view, WM, ts_GC)` (§5.9; `ts_GC`
    /// see the module docs).
    fn on_answer(&self, shard: (String, u32), wm: Timestamp, ts_gc: Timestamp) {
        let mut s = self.lock();
        s.wm_view = s.wm_view.max(wm).max(ts_gc);
        s.ts_gc = s.ts_gc.max(ts_gc);
        s.shard_ts_gc.insert(shard, ts_gc);
    }

    fn shards(&self) -> Vec<(String, u32)> {
        self.lock().shards.iter().cloned().collect()
    }

    /// Test-only switch: stops (or resumes) the periodic reports.
    pub(crate) fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::Relaxed);
    }
}

/// kairos.md §5.9 `min fts over cache entries`: the client cache's contribution to
/// `c_freshness` (`None`: no cache, or an empty one).
fn cache_fts(client: &Client) -> Option<Timestamp> {
    client.kairos_cache().and_then(|c| c.min_fts())
}

/// kairos.md §5.5 \[DECISION\], §6.5, after a `TooOld` abort: the cache entries with
/// `fts < ts_gc` would abort again; they go.
pub(crate) fn drop_cache_entries_below(client: &Client, ts_gc: Timestamp) {
    if let Some(cache) = client.kairos_cache() {
        cache.drop_below(ts_gc);
    }
}

/// An incomplete RW transaction (§5.9): complete when dropped.
pub(crate) struct Incomplete {
    wm: Arc<Watermarks>,
    id: u64,
}

impl Drop for Incomplete {
    fn drop(&mut self) {
        self.wm.lock().incomplete.remove(&self.id);
    }
}

/// A live read set's floor (§5.9): gone when dropped (the transaction ended).
pub(crate) struct LiveReads {
    wm: Arc<Watermarks>,
    id: u64,
}

impl Drop for LiveReads {
    fn drop(&mut self) {
        self.wm.lock().live_reads.remove(&self.id);
    }
}

/// What a transaction keeps for Kairos freshness: the `fts` of each read and its read set's
/// floor while it lives.
#[derive(Default)]
pub(crate) struct TxnFreshness {
    pub fts: BTreeMap<(String, bytes::Bytes), Timestamp>,
    live: Option<LiveReads>,
}

impl TxnFreshness {
    /// §5.2: before a read of a Kairos table is sent, the `wm_view` it will be judged by
    /// (registering the read set's floor at the first read).
    pub(crate) fn before_read(&mut self, wm: &Arc<Watermarks>) -> Timestamp {
        self.live.get_or_insert_with(|| wm.begin_reads());
        wm.wm_view()
    }

    /// A read's §5.2 `fts = max(vts, wm)` (`CachedRead::fts`: a cache hit's is its fetch's).
    pub(crate) fn record(&mut self, id: (String, bytes::Bytes), fts: Timestamp) {
        self.fts.insert(id, fts);
    }
}

/// Starts the reporter of `client` once (at its first Kairos shard).
pub(crate) fn start_reporter(client: &Client, wm: &Arc<Watermarks>) {
    if wm.started.swap(true, Ordering::AcqRel) {
        return;
    }
    let weak = client.downgrade();
    let wm = Arc::downgrade(wm);
    tokio::spawn(report_loop(weak, wm));
}

/// Every [`REPORT_PERIOD`], a report round, until the client is dropped.
async fn report_loop(client: Weak<Shared>, wm: Weak<Watermarks>) {
    let mut tick = tokio::time::interval(REPORT_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let (Some(client), Some(wm)) = (Client::upgrade(&client), wm.upgrade()) else { return };
        if !wm.paused.load(Ordering::Relaxed) {
            report_round(&client).await;
        }
    }
}

/// One round: the client's marks to every Kairos shard it used, concurrently, each answer
/// folded into `wm_view`; returns after every answer or [`ROUND_TIMEOUT`].
pub(crate) async fn report_round(client: &Client) {
    let shared = client.txns();
    let Ok(lease) = shared.lease().await else { return };
    let lease_id = lease.client_id;
    let wm = shared.watermarks().clone();
    let marks = client.kairos_clock().marks(lease_id, &wm, || cache_fts(client));
    let mut tasks = JoinSet::new();
    for (table, shard) in wm.shards() {
        let Ok(mut t) = client.txn_table(&table).await else { continue };
        let wm = wm.clone();
        let id = (table.clone(), shard);
        let req = Request::KairosReport {
            table,
            shard,
            client: lease_id,
            seq: marks.seq,
            local_wm: marks.local_wm,
            c_freshness: marks.c_freshness,
        };
        tasks.spawn(async move {
            if let Ok(Response::KairosWatermarks { wm: w, ts_gc }) =
                t.leader_call_with(shard, || None, req).await
            {
                wm.on_answer(id, w, ts_gc);
            }
        });
    }
    let _ =
        tokio::time::timeout(ROUND_TIMEOUT, async { while tasks.join_next().await.is_some() {} })
            .await;
}
