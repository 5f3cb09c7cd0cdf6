//! The Kairos client cache (kairos.md §5.2 Algorithm 2, §5.5, §5.10, §5.12, §5.14): a
//! client's transactions read cacheable keys of Kairos tables from one cache they share,
//! `strata_kairos::cache::Cache`, under the leases its [`LeasePolicy`] gives. This module is
//! the glue between that sans-IO cache and the network; every decision is the cache's.
//!
//! * **Read** (§5.2 steps 3–4): a transaction's first read of a cacheable key records a read
//!   (`R`, §5.10), looks the cache up on the client's monotonic clock, and on a miss or an
//!   expired lease fetches `(value, vts, W)` from the shard's leader and inserts it with the
//!   lease the policy gives for `(R, W)` (Algorithm 1 for `Ideal`), with `fts = max(vts,
//!   wm)`, `wm` the client's `wm_view` read before the `Get` (§5.2, `kairos_wm`). The read set
//!   gets `(value, vts, fts)`: a hit's `fts` is the entry's, from its fetch.
//! * **After the decision** (§5.5 \[DECISION\]s): an abort drops the keys whose objects voted
//!   `Stale` or `PreparedConflict` and those without a vote (a participant's answer stops at
//!   its first abort, so the stale key may be unvoted; a validator object of a table with
//!   sharded validators names the table's key); a commit drops the keys it wrote. `TooOld`
//!   drops the entries with `fts < ts_GC` ([`KairosCache::drop_below`], after the report
//!   round that learns `ts_GC`, `kairos_wm`).
//! * **Watermarks** (§5.9): the entries' smallest `fts` ([`KairosCache::min_fts`]) bounds the
//!   client's reported `c_freshness`, so `ts_GC` stays at or below every cached `fts`.
//! * **Explicit invalidation** (§5.14.2, `LeasePolicy::ExplicitInvalidation`): fetches ask the
//!   leader to register the connection as a sharer; its `KAIROS_INVALIDATE` pushes drop an
//!   entry older than the new version (`Cache::invalidate`), and `KAIROS_SHARERS_DROPPED` (the
//!   leader stepped down), a broken connection to the leader, or a fetch through another
//!   connection drop every entry of that shard: nobody would invalidate them any more. The
//!   lease policies never set the flag, so the servers keep no sharer state (§7 inv. 12).
//!
//! Safety never depends on the cache: a stale hit is caught by validation (§5.15).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use strata_kairos::cache::{dropped_after_abort, AbortHint, Cache, CacheEntry, CacheStats, Lookup};
use strata_kairos::{LeaseLimits, LeasePolicy};
use strata_wire::client::{push_topic, shard_of, validated_table, KairosInvalidate};
use strata_wire::log::LogIndex;
use strata_wire::txn::{AbortReason, Decision, Timestamp, TxnObject, Vote};
use strata_wire::{decode_message, Instant};
use tokio::sync::broadcast;

use crate::conn::{ConnHandle, Push};
use crate::error::ClientError;
use crate::table::Table;

/// Pushes the cache may fall behind by before it drops everything (a lagged receiver).
const PUSH_BACKLOG: usize = 1024;

/// Which keys may be cached: `(table, key) -> bool`.
pub type Cacheable = Arc<dyn Fn(&str, &[u8]) -> bool + Send + Sync>;

/// How a client caches the keys of Kairos tables (`ClientOptions::kairos_cache`).
#[derive(Clone)]
pub struct KairosCacheOptions {
    /// How long an entry is served (§5.12, §5.14): `Ideal` (Algorithm 1), `StaticP(x)`,
    /// `Mean`, `Fixed(d)`, `Naive`, or `ExplicitInvalidation` (the servers push
    /// invalidations).
    pub policy: LeasePolicy,
    /// Entries at most, least recently used out first (§3.5: 0.1 % of the data).
    pub capacity: usize,
    /// Which keys may be cached (§3.5: the top 1 % by popularity).
    pub cacheable: Cacheable,
}

impl KairosCacheOptions {
    /// A cache of `capacity` entries under `policy` for every key of every Kairos table.
    pub fn new(policy: LeasePolicy, capacity: usize) -> KairosCacheOptions {
        KairosCacheOptions { policy, capacity, cacheable: Arc::new(|_, _| true) }
    }

    /// The same options caching only `(table, key)` pairs of `keys`.
    pub fn only(mut self, keys: impl IntoIterator<Item = (String, Bytes)>) -> KairosCacheOptions {
        let keys: BTreeSet<(String, Bytes)> = keys.into_iter().collect();
        self.cacheable =
            Arc::new(move |t, k| keys.contains(&(t.to_string(), Bytes::copy_from_slice(k))));
        self
    }

    fn explicit(&self) -> bool {
        self.policy == LeasePolicy::ExplicitInvalidation
    }
}

impl std::fmt::Debug for KairosCacheOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KairosCacheOptions")
            .field("policy", &self.policy)
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

/// What a client's cache did (`Client::kairos_cache_stats`), for benchmarks and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KairosCacheStats {
    /// Lookups, hits, misses (expired leases included), evictions and drops, as the
    /// sans-IO cache counts them.
    pub cache: CacheStats,
    /// Transactions that aborted `Stale` or `PreparedConflict` with a cache hit among the
    /// keys the abort drops (the aborting participants' voted or unvoted objects): stale
    /// hits caught by validation (§5.15), at most one per aborted attempt.
    pub stale_hits: u64,
    /// `KAIROS_INVALIDATE` pushes received (explicit invalidation).
    pub invalidations: u64,
    /// Entries dropped because nobody would invalidate them any more (explicit
    /// invalidation: the leader stepped down, or the connection to it broke).
    pub orphaned: u64,
}

/// A read through the cache.
pub(crate) struct CachedRead {
    pub value: Option<Bytes>,
    /// The fetch's log index (`ZERO` for a hit: Kairos validates timestamps, not indexes).
    pub update_index: LogIndex,
    pub vts: Timestamp,
    /// §5.2 `fts = max(vts, wm)`, `wm` the view read before the fetch (a hit's: its fetch's).
    pub fts: Timestamp,
    pub hit: bool,
}

impl CachedRead {
    /// A read fetched from the leader, `wm` the view read before it was sent (§5.2).
    pub fn fetched(r: crate::table::LogRead, wm: Timestamp) -> CachedRead {
        let fts = r.vts.max(wm);
        CachedRead { value: r.value, update_index: r.update_index, vts: r.vts, fts, hit: false }
    }
}

/// A client's cache (module docs), shared by its transactions.
pub(crate) struct KairosCache {
    opts: KairosCacheOptions,
    state: Arc<Mutex<State>>,
    /// Explicit invalidation: the sender the Kairos tables' connections push into.
    pushes: Option<broadcast::Sender<Push>>,
}

struct State {
    cache: Cache<Timestamp>,
    /// Explicit invalidation, per `(table, shard)`: the connection the fetches registered
    /// through and the cached keys that rely on it.
    sharing: BTreeMap<(String, u32), (Weak<ConnHandle>, BTreeSet<Bytes>)>,
    stats: KairosCacheStats,
}

impl KairosCache {
    /// A cache from `opts`; with explicit invalidation, a task applies the nodes' pushes
    /// (it ends with the last table handle holding the sender).
    pub fn new(opts: KairosCacheOptions) -> KairosCache {
        let cache = Cache::new(opts.policy, LeaseLimits::default(), opts.capacity);
        let state = Arc::new(Mutex::new(State {
            cache,
            sharing: BTreeMap::new(),
            stats: KairosCacheStats::default(),
        }));
        let runtime = tokio::runtime::Handle::try_current().ok();
        let pushes = runtime.filter(|_| opts.explicit()).map(|rt| {
            let (tx, rx) = broadcast::channel(PUSH_BACKLOG);
            rt.spawn(apply_pushes(Arc::downgrade(&state), rx));
            tx
        });
        KairosCache { opts, state, pushes }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// A Kairos table's handle for transactions: its connections deliver the pushes.
    pub fn attach(&self, t: &mut Table) {
        if let Some(tx) = &self.pushes {
            t.set_pushes(tx.clone());
        }
    }

    /// §5.2 steps 3–4 for `key` of `t`'s table (a Kairos table); `wm`: the client's
    /// `wm_view`, read before this call.
    pub async fn read(
        &self,
        t: &mut Table,
        key: Bytes,
        wm: Timestamp,
    ) -> Result<CachedRead, ClientError> {
        let table = t.def().name.clone();
        if !(self.opts.cacheable)(&table, &key) {
            return Ok(CachedRead::fetched(t.get(key).await?, wm));
        }
        let ck = cache_key(&table, &key);
        let shard = shard_of(&key, t.def().shards);
        if let Some(e) = self.lookup(&ck, (&table, shard)) {
            let (value, vts, fts) = (e.value, e.vts, e.fts);
            return Ok(CachedRead { value, update_index: LogIndex::ZERO, vts, fts, hit: true });
        }
        let explicit = self.opts.explicit();
        let r = if explicit { t.get_sharing(key).await? } else { t.get(key).await? };
        let w = r.w_mean_ns.map(Duration::from_nanos);
        let mut s = self.lock();
        let e = s.cache.on_fetch(ck.clone(), r.value.clone(), r.vts, wm, w, now());
        if explicit {
            s.shared_through(&table, shard, t.leader_conn(shard), ck);
        }
        let (value, vts, fts) = (e.value, e.vts, e.fts);
        Ok(CachedRead { value, update_index: r.update_index, vts, fts, hit: false })
    }

    /// Records the read and looks `ck` up; an explicit-invalidation entry counts only while
    /// its shard's connection is up.
    fn lookup(&self, ck: &Bytes, shard: (&str, u32)) -> Option<CacheEntry<Timestamp>> {
        let mut s = self.lock();
        let now = now();
        s.cache.record_read(ck, now);
        if self.opts.explicit() && !s.connection_up(shard) {
            s.orphan((shard.0.to_string(), shard.1));
        }
        match s.cache.lookup(ck, now) {
            Lookup::Hit(e) => Some(e),
            Lookup::Miss => None,
        }
    }

    /// §5.5 after the decision: what the votes and the writes say about the cache.
    /// `objects` are the transaction's objects with their prepare ids, `hits` the
    /// `(table, key)`s it read from the cache.
    pub fn after_decision<'a>(
        &self,
        decision: Decision,
        objects: &[TxnObject],
        votes: &BTreeMap<u64, Vote>,
        written: impl Iterator<Item = &'a (String, Bytes)>,
        hits: &BTreeSet<(String, Bytes)>,
    ) {
        let mut s = self.lock();
        if decision == Decision::Commit {
            let keys: Vec<Bytes> = written.map(|(t, k)| cache_key(t, k)).collect();
            s.cache.on_commit(keys.iter().map(|k| &k[..]));
            return;
        }
        // Objects without a vote go too (`dropped_after_abort`): dropping the voted object
        // alone left the stale entry in place, and its transaction aborted on every retry
        // until the lease ended (a 10 s lease in `strata bench --workload kairos` committed 3
        // transactions a second).
        let mut stale = Vec::new();
        let mut stale_hit = false;
        for o in objects {
            // With sharded validators a read's object is in the companion table
            // (`T.validators`): the cached key is `(T, key)`.
            let table = validated_table(&o.table).unwrap_or(&o.table);
            // (`TooOld` drops by `fts` instead, after the report round: `drop_below`.)
            if dropped_after_abort(votes.get(&o.seq)) {
                stale_hit |= hits.contains(&(table.to_string(), o.key.clone()));
                stale.push(cache_key(table, &o.key));
            }
        }
        let validated = votes
            .values()
            .any(|v| matches!(v, Vote::Abort(AbortReason::Stale | AbortReason::PreparedConflict)));
        s.stats.stale_hits += u64::from(validated && stale_hit);
        s.cache.on_abort(stale.iter().map(|k| AbortHint::Stale(&k[..])));
    }

    /// §5.5 \[DECISION\] after `TooOld`: drops the entries with `fts < ts_gc` (reading them
    /// again would abort again).
    pub fn drop_below(&self, ts_gc: Timestamp) {
        self.lock().cache.on_abort([AbortHint::TooOld(ts_gc)]);
    }

    /// §5.9 `min fts over cache entries` (`None`: empty), a bound of `c_freshness`.
    pub fn min_fts(&self) -> Option<Timestamp> {
        self.lock().cache.min_fts()
    }

    pub fn stats(&self) -> KairosCacheStats {
        let s = self.lock();
        KairosCacheStats { cache: s.cache.stats(), ..s.stats }
    }
}

impl State {
    /// Explicit invalidation: `ck` of `(table, shard)` was fetched through `conn`; entries
    /// registered through another connection are dropped first (that one's leader will
    /// not invalidate them any more, or not for long).
    fn shared_through(
        &mut self,
        table: &str,
        shard: u32,
        conn: Option<Arc<ConnHandle>>,
        ck: Bytes,
    ) {
        let id = (table.to_string(), shard);
        let Some(conn) = conn else {
            // Nobody registered it for us: it must not stay cached.
            self.cache.invalidate(&ck, Timestamp::MAX);
            return;
        };
        let same = self
            .sharing
            .get(&id)
            .is_some_and(|(c, _)| std::ptr::eq(c.as_ptr(), Arc::as_ptr(&conn)));
        if !same {
            self.orphan(id.clone());
            self.sharing.insert(id.clone(), (Arc::downgrade(&conn), BTreeSet::new()));
        }
        self.sharing.get_mut(&id).expect("inserted").1.insert(ck);
    }

    /// Whether the connection `shard`'s entries were registered through is still usable.
    fn connection_up(&self, (table, shard): (&str, u32)) -> bool {
        self.sharing
            .get(&(table.to_string(), shard))
            .is_none_or(|(c, _)| c.upgrade().is_some_and(|c| c.is_usable()))
    }

    /// Drops every entry of `id` registered at its leader (nobody invalidates them now).
    fn orphan(&mut self, id: (String, u32)) {
        let Some((_, keys)) = self.sharing.remove(&id) else { return };
        for k in keys {
            let before = self.cache.len();
            self.cache.invalidate(&k, Timestamp::MAX);
            self.stats.orphaned += (before - self.cache.len()) as u64;
        }
    }

    /// A node's push (explicit invalidation).
    fn on_push(&mut self, p: &Push) {
        let Ok(m) = decode_message::<KairosInvalidate>(p.body.clone()) else { return };
        match p.topic {
            push_topic::KAIROS_INVALIDATE => {
                self.stats.invalidations += 1;
                let ck = cache_key(&m.table, &m.key);
                self.cache.invalidate(&ck, m.new_vts);
            }
            push_topic::KAIROS_SHARERS_DROPPED => self.orphan((m.table, m.shard)),
            _ => {}
        }
    }

    /// Pushes were lost (the receiver lagged): nothing cached under explicit invalidation
    /// can be trusted to be invalidated.
    fn orphan_all(&mut self) {
        let ids: Vec<(String, u32)> = self.sharing.keys().cloned().collect();
        for id in ids {
            self.orphan(id);
        }
    }
}

/// Applies the nodes' pushes to the cache until every sender is gone (or the cache is).
async fn apply_pushes(state: Weak<Mutex<State>>, mut rx: broadcast::Receiver<Push>) {
    loop {
        let push = rx.recv().await;
        let Some(state) = state.upgrade() else { return };
        let mut s = lock(&state);
        match push {
            Ok(p) => s.on_push(&p),
            Err(broadcast::error::RecvError::Lagged(_)) => s.orphan_all(),
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// One cache for every table: the key is the table's name (length-prefixed) and the key.
fn cache_key(table: &str, key: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(4 + table.len() + key.len());
    b.put_u32_le(table.len() as u32);
    b.put_slice(table.as_bytes());
    b.put_slice(key);
    b.freeze()
}

/// The client's clock for leases and read statistics (kairos.md §3.1): monotonic, from the
/// first use in this process. The library is not sans-IO; this is its one reading for the
/// cache.
fn now() -> Instant {
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    let start = *START.get_or_init(std::time::Instant::now);
    Instant::from_nanos(start.elapsed().as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_keys_of_different_tables_never_collide() {
        assert_ne!(cache_key("ab", b"c"), cache_key("a", b"bc"));
        assert_eq!(cache_key("t", b"k"), cache_key("t", b"k"));
    }

    #[test]
    fn only_the_listed_keys_are_cacheable() {
        let o =
            KairosCacheOptions::new(LeasePolicy::Naive, 4).only([("t".into(), Bytes::from("k"))]);
        assert!((o.cacheable)("t", b"k"));
        assert!(!(o.cacheable)("t", b"j") && !(o.cacheable)("u", b"k"));
    }

    /// §5.5: an abort drops the keys its participants voted stale on and those without a
    /// vote (a participant's answer stops at its first abort), and counts a stale hit if a
    /// hit is among them; a commit drops the keys it wrote; a push newer than the entry drops
    /// it, an older one does not; a dropped sharer set orphans the shard's entries.
    #[test]
    fn decisions_and_pushes_drop_what_they_say_is_old() {
        let c = KairosCache::new(KairosCacheOptions::new(LeasePolicy::Naive, 8));
        let ts = |n| Timestamp::new(n, 1);
        {
            let mut s = c.lock();
            for k in ["a", "b", "c"] {
                s.cache.on_fetch(
                    cache_key("t", k.as_bytes()),
                    None,
                    ts(5),
                    Timestamp::ZERO,
                    None,
                    now(),
                );
            }
        }
        let obj = |k: &str, seq| TxnObject {
            table: "t".into(),
            key: Bytes::copy_from_slice(k.as_bytes()),
            seq,
        };
        let objects = [obj("a", 1), obj("b", 2), obj("c", 3)];
        // "a" voted stale, "b" a write conflict; "c" has no vote (its participant stopped
        // at "b"'s abort): "a" and "c" go, "b" stays.
        let votes = BTreeMap::from([
            (1, Vote::Abort(AbortReason::Stale)),
            (2, Vote::Abort(AbortReason::ReadWriteConflict)),
        ]);
        let hits = BTreeSet::from([("t".to_string(), Bytes::from("a"))]);
        c.after_decision(Decision::Abort, &objects, &votes, std::iter::empty(), &hits);
        let len = c.lock().cache.len();
        assert_eq!((len, c.stats().stale_hits), (1, 1));
        {
            let mut s = c.lock();
            for k in ["a", "c"] {
                s.cache.on_fetch(
                    cache_key("t", k.as_bytes()),
                    None,
                    ts(6),
                    Timestamp::ZERO,
                    None,
                    now(),
                );
            }
        }
        // The stale hit "c" behind the participant's first object "a", which carries the
        // vote: both go, one stale hit.
        let votes = BTreeMap::from([(1, Vote::Abort(AbortReason::Stale))]);
        let hits = BTreeSet::from([("t".to_string(), Bytes::from("c"))]);
        c.after_decision(Decision::Abort, &objects[0..1], &votes, std::iter::empty(), &hits);
        assert_eq!(c.lock().cache.len(), 2, "a goes");
        c.after_decision(
            Decision::Abort,
            &[obj("a", 1), obj("c", 3)],
            &votes,
            std::iter::empty(),
            &hits,
        );
        let len = c.lock().cache.len();
        assert_eq!((len, c.stats().stale_hits), (1, 2), "c goes too");
        // A sharded table's validator object (`t.validators`) names the cached `(t, c)`.
        c.lock().cache.on_fetch(cache_key("t", b"c"), None, ts(7), Timestamp::ZERO, None, now());
        let v = TxnObject { table: "t.validators".into(), key: Bytes::from("c"), seq: 9 };
        let votes = BTreeMap::from([(9, Vote::Abort(AbortReason::Stale))]);
        c.after_decision(Decision::Abort, &[v], &votes, std::iter::empty(), &hits);
        let len = c.lock().cache.len();
        assert_eq!((len, c.stats().stale_hits), (1, 3), "c goes, a stale hit");
        let written = [("t".to_string(), Bytes::from("b"))];
        c.after_decision(Decision::Commit, &objects, &BTreeMap::new(), written.iter(), &hits);
        assert_eq!(c.lock().cache.len(), 0);
        c.lock().cache.on_fetch(cache_key("t", b"c"), None, ts(5), Timestamp::ZERO, None, now());
        let push = |topic, key: &str, n| {
            let m = KairosInvalidate {
                table: "t".into(),
                shard: 0,
                key: Bytes::copy_from_slice(key.as_bytes()),
                new_vts: ts(n),
            };
            let mut b = BytesMut::new();
            strata_wire::Encode::encode(&m, &mut b);
            Push { node: "127.0.0.1:1".parse().unwrap(), topic, body: b.freeze() }
        };
        c.lock().on_push(&push(push_topic::KAIROS_INVALIDATE, "c", 5));
        assert_eq!(c.lock().cache.len(), 1, "not newer than the entry");
        c.lock().on_push(&push(push_topic::KAIROS_INVALIDATE, "c", 6));
        let len = c.lock().cache.len();
        assert_eq!((len, c.stats().invalidations), (0, 2));
        // Entries registered through a connection: orphaned when its leader says it forgot
        // them, or when the connection is gone.
        for (k, shard) in [("d", 0), ("e", 1)] {
            let mut s = c.lock();
            let ck = cache_key("t", k.as_bytes());
            s.cache.on_fetch(ck.clone(), None, ts(5), Timestamp::ZERO, None, now());
            s.sharing.insert(("t".into(), shard), (Weak::new(), BTreeSet::from([ck])));
        }
        c.lock().on_push(&push(push_topic::KAIROS_SHARERS_DROPPED, "", 0));
        let len = c.lock().cache.len();
        assert_eq!((len, c.stats().orphaned), (1, 1));
        assert!(!c.lock().connection_up(("t", 1)), "its connection is gone");
        // A lookup orphans a shard whose connection is gone under explicit invalidation
        // only (the lease policies do not depend on the connection).
        assert!(c.lookup(&cache_key("t", b"e"), ("t", 1)).is_some(), "naive: still served");
        let ei = KairosCache::new(KairosCacheOptions::new(LeasePolicy::ExplicitInvalidation, 8));
        {
            let mut s = ei.lock();
            let ck = cache_key("t", b"e");
            s.cache.on_fetch(ck.clone(), None, ts(5), Timestamp::ZERO, None, now());
            s.sharing.insert(("t".into(), 1), (Weak::new(), BTreeSet::from([ck])));
        }
        assert_eq!(ei.lookup(&cache_key("t", b"e"), ("t", 1)), None);
        let len = ei.lock().cache.len();
        assert_eq!((len, ei.stats().orphaned), (0, 1));
    }
}
