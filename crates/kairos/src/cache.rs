//! The client cache (kairos.md §3.1, §5.2 step 4, §5.5, §5.10, §5.14): values of cacheable
//! keys kept between transactions under self-invalidating leases.
//!
//! * **Entries** hold the value, its version `vts`, the lease end `lts` on the client's own
//!   clock and the freshness `fts = max(vts, wm_view)` at the fetch (§5.2). A lookup past
//!   `lts` is a miss and drops the entry: the client invalidates by itself, no server
//!   keeps sharers or sends anything (the lease mode's point, §1.1; §7 inv. 10).
//! * **Leases** come from the client's [`LeasePolicy`] on every fetch, from the key's read
//!   statistics `R` (kept here, §5.10: once per key per transaction, for cacheable keys) and
//!   the `W` the server sent with the value. The baselines keep entries until evicted or
//!   invalidated: `Naive` (dropped only by the abort rules) and explicit invalidation
//!   ([`Cache::invalidate`], the server's push).
//! * **Capacity** is in entries, least recently used first out (§1.3: 0.1 % of the data).
//! * **Drop rules** (§5.5 \[DECISION\]s): after an abort, the keys its votes named stale or
//!   conflicting, and on `TooOld{ts_gc}` every entry with `fts < ts_gc`; after a commit, the
//!   keys it wrote.
//! * [`Cache::min_fts`] is the cache's part of the client's freshness report (§5.9).
//!
//! Versions are generic (`V: Ord + Copy`): the cache only compares them. Time is an input.

use std::collections::BTreeMap;

use bytes::Bytes;
use strata_wire::Instant;

use crate::lease::{AccessStats, LeaseLimits, LeasePolicy};
use crate::planted::PlantedBug;

/// A cached value (§3.1 `CacheEntry`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheEntry<V> {
    pub value: Option<Bytes>,
    pub vts: V,
    /// The lease's end on the client's clock (`Instant::MAX`: no expiry).
    pub lts: Instant,
    pub fts: V,
}

/// What a lookup found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup<V> {
    /// A live entry: serve it (validation catches it if it is stale, §5.15).
    Hit(CacheEntry<V>),
    /// No entry, or one whose lease ended (now dropped): fetch from the primary.
    Miss,
}

/// What the cache did, for reports and the checkers (hits are never known to be fresh here:
/// only validation or a global oracle can tell).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    /// Lookups that found an entry past its lease (counted in `misses` too).
    pub expired: u64,
    pub evicted: u64,
    /// Entries dropped by the abort and commit rules or by an invalidation.
    pub dropped: u64,
}

/// What an aborted transaction's votes tell the cache (the §2 reasons it acts on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AbortHint<'a, V> {
    /// `Stale{k}` or `PreparedConflict{k}`: the cached value of `k` is (about to be) old.
    Stale(&'a [u8]),
    /// `TooOld{ts_gc}`: every entry whose `fts` is below `ts_gc` goes (the validators no
    /// longer keep what validating it needs).
    TooOld(V),
}

/// §5.5 \[DECISION\] after an abort: whether the cached value of an object whose vote was
/// `vote` goes ([`AbortHint::Stale`]). It goes if it voted `Stale` or `PreparedConflict`, and
/// also if it has no vote: a participant's answer stops at its first abort, so the object
/// carrying the vote is the participant's first, not necessarily the stale one (refetching a
/// fresh value only costs a read; keeping a stale one aborts every retry until its lease
/// ends).
pub fn dropped_after_abort(vote: Option<&strata_wire::txn::Vote>) -> bool {
    use strata_wire::txn::{AbortReason, Vote};
    matches!(vote, Some(Vote::Abort(AbortReason::Stale | AbortReason::PreparedConflict)) | None)
}

/// The client cache of one client.
#[derive(Clone, Debug)]
pub struct Cache<V> {
    policy: LeasePolicy,
    limits: LeaseLimits,
    capacity: usize,
    entries: BTreeMap<Bytes, (CacheEntry<V>, u64)>,
    /// LRU order: use tick -> key (the smallest tick is the least recently used).
    order: BTreeMap<u64, Bytes>,
    tick: u64,
    /// `R` per cacheable key (§5.10).
    reads: BTreeMap<Bytes, AccessStats>,
    stats: CacheStats,
    planted: Option<PlantedBug>,
}

impl<V: Ord + Copy> Cache<V> {
    /// A cache of at most `capacity` entries whose leases come from `policy`.
    pub fn new(policy: LeasePolicy, limits: LeaseLimits, capacity: usize) -> Cache<V> {
        Cache {
            policy,
            limits,
            capacity,
            entries: BTreeMap::new(),
            order: BTreeMap::new(),
            tick: 0,
            reads: BTreeMap::new(),
            stats: CacheStats::default(),
            planted: None,
        }
    }

    /// The same cache with a planted bug (canaries only; [`PlantedBug::CacheServesPastLease`]
    /// is the one the cache has).
    pub fn with_planted(mut self, bug: Option<PlantedBug>) -> Cache<V> {
        self.planted = bug;
        self
    }

    /// §5.10: a transaction reads cacheable `key` for the first time (its own writes and
    /// earlier reads do not count).
    pub fn record_read(&mut self, key: &Bytes, now: Instant) {
        self.reads.entry(key.clone()).or_default().on_access(now);
    }

    /// `R` of `key`: the mean gap between its reads, once there are two.
    pub fn mean_read_gap(&self, key: &[u8]) -> Option<std::time::Duration> {
        self.reads.get(key).and_then(AccessStats::mean)
    }

    /// §5.2 step 4: the entry of `key` if its lease is still running at `now`.
    pub fn lookup(&mut self, key: &[u8], now: Instant) -> Lookup<V> {
        let Some((entry, tick)) = self.entries.get(key) else {
            self.stats.misses += 1;
            return Lookup::Miss;
        };
        if entry.lts < now && self.planted != Some(PlantedBug::CacheServesPastLease) {
            // Self-invalidation (§5.2 step 4: `e.lts < now()`): never a hit past `lts`.
            let tick = *tick;
            self.remove_at(key, tick);
            self.stats.expired += 1;
            self.stats.misses += 1;
            return Lookup::Miss;
        }
        let (entry, old) = (entry.clone(), *tick);
        self.touch(key, old);
        self.stats.hits += 1;
        Lookup::Hit(entry)
    }

    /// §5.2 step 4, after a fetch at `now`: caches `(value, vts)` with `fts = max(vts, wm)`
    /// (`wm` is the watermark view read *before* the `Get` was sent) and the lease the policy
    /// gives for the key's `R` and the server's `w`; returns the entry the transaction reads
    /// (cached or not — a lease of 0 means "do not cache").
    pub fn on_fetch(
        &mut self,
        key: Bytes,
        value: Option<Bytes>,
        vts: V,
        wm: V,
        w: Option<std::time::Duration>,
        now: Instant,
    ) -> CacheEntry<V> {
        let fts = vts.max(wm);
        let lease = self.policy.lease_duration(self.mean_read_gap(&key), w, &self.limits);
        let Some(lts) = lease.lease_end(now) else {
            return CacheEntry { value, vts, lts: now, fts };
        };
        let entry = CacheEntry { value, vts, lts, fts };
        if self.capacity == 0 {
            return entry;
        }
        if let Some((_, tick)) = self.entries.get(&key) {
            let tick = *tick;
            self.order.remove(&tick);
        } else if self.entries.len() >= self.capacity {
            if let Some((_, lru)) = self.order.pop_first() {
                self.entries.remove(&lru);
                self.stats.evicted += 1;
            }
        }
        self.tick += 1;
        self.order.insert(self.tick, key.clone());
        self.entries.insert(key, (entry.clone(), self.tick));
        entry
    }

    /// §5.5 after an abort: drops what the votes said is old.
    pub fn on_abort<'a>(&mut self, hints: impl IntoIterator<Item = AbortHint<'a, V>>) {
        for hint in hints {
            match hint {
                AbortHint::Stale(key) => self.drop_key(key),
                AbortHint::TooOld(ts_gc) => {
                    let old: Vec<Bytes> = self
                        .entries
                        .iter()
                        .filter(|(_, (e, _))| e.fts < ts_gc)
                        .map(|(k, _)| k.clone())
                        .collect();
                    for k in old {
                        self.drop_key(&k);
                    }
                }
            }
        }
    }

    /// §5.5 after a commit: the keys it wrote have new versions.
    pub fn on_commit<'a>(&mut self, written: impl IntoIterator<Item = &'a [u8]>) {
        for key in written {
            self.drop_key(key);
        }
    }

    /// §5.14.2 (explicit invalidation): the primary says `key` has version `new_vts`.
    pub fn invalidate(&mut self, key: &[u8], new_vts: V) {
        if self.entries.get(key).is_some_and(|(e, _)| e.vts < new_vts) {
            self.drop_key(key);
        }
    }

    /// The oldest freshness among the entries (§5.9 `c_freshness`), if any.
    pub fn min_fts(&self) -> Option<V> {
        self.entries.values().map(|(e, _)| e.fts).min()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    fn drop_key(&mut self, key: &[u8]) {
        if let Some((_, tick)) = self.entries.get(key) {
            let tick = *tick;
            self.remove_at(key, tick);
            self.stats.dropped += 1;
        }
    }

    fn remove_at(&mut self, key: &[u8], tick: u64) {
        self.entries.remove(key);
        self.order.remove(&tick);
    }

    fn touch(&mut self, key: &[u8], old: u64) {
        let Some(k) = self.order.remove(&old) else { return };
        self.tick += 1;
        self.order.insert(self.tick, k);
        if let Some((_, tick)) = self.entries.get_mut(key) {
            *tick = self.tick;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    fn key(k: &str) -> Bytes {
        Bytes::copy_from_slice(k.as_bytes())
    }

    fn fixed(ms: u64, capacity: usize) -> Cache<u64> {
        Cache::new(LeasePolicy::Fixed(Duration::from_millis(ms)), LeaseLimits::default(), capacity)
    }

    #[test]
    fn a_hit_is_served_until_its_lease_ends_and_never_after_it() {
        let mut c = fixed(5, 10);
        assert_eq!(c.lookup(b"a", at(0)), Lookup::Miss);
        let e = c.on_fetch(key("a"), Some(key("1")), 7, 3, None, at(0));
        assert_eq!((e.vts, e.fts, e.lts), (7, 7, at(5)));
        assert!(matches!(c.lookup(b"a", at(5)), Lookup::Hit(h) if h.value == Some(key("1"))));
        // §7: no hit past lts (self-invalidation); the entry is gone.
        assert_eq!(c.lookup(b"a", at(6)), Lookup::Miss);
        assert!(c.is_empty());
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.expired), (1, 2, 1));
    }

    #[test]
    fn freshness_is_the_newer_of_the_version_and_the_watermark_read_before_the_fetch() {
        let mut c = fixed(5, 10);
        let e = c.on_fetch(key("a"), None, 3, 9, None, at(0));
        assert_eq!(e.fts, 9);
        c.on_fetch(key("b"), None, 12, 9, None, at(0));
        assert_eq!(c.min_fts(), Some(9));
    }

    #[test]
    fn the_least_recently_used_entry_goes_first() {
        let mut c = fixed(1000, 2);
        c.on_fetch(key("a"), None, 1, 0, None, at(0));
        c.on_fetch(key("b"), None, 1, 0, None, at(0));
        assert!(matches!(c.lookup(b"a", at(1)), Lookup::Hit(_))); // b is now the oldest
        c.on_fetch(key("c"), None, 1, 0, None, at(2));
        assert_eq!(c.lookup(b"b", at(3)), Lookup::Miss);
        assert!(matches!(c.lookup(b"a", at(3)), Lookup::Hit(_)));
        assert!(matches!(c.lookup(b"c", at(3)), Lookup::Hit(_)));
        assert_eq!(c.stats().evicted, 1);
        // Fetching a cached key again replaces it without evicting anything.
        c.on_fetch(key("a"), None, 2, 0, None, at(4));
        assert_eq!(c.len(), 2);
        assert!(matches!(c.lookup(b"a", at(5)), Lookup::Hit(e) if e.vts == 2));
    }

    #[test]
    fn ideal_leases_wait_for_read_statistics_and_then_follow_the_model() {
        let mut c: Cache<u64> = Cache::new(LeasePolicy::Ideal, LeaseLimits::default(), 10);
        // No R yet: not cached (§5.12 [DECISION]).
        let e = c.on_fetch(key("a"), None, 1, 0, Some(Duration::from_millis(19)), at(0));
        assert_eq!(e.lts, at(0));
        assert!(c.is_empty());
        // Reads 1 ms apart: R = 1 ms; with W = 19 ms the ideal lease is 6 ms (§5.12).
        for ms in 0..5 {
            c.record_read(&key("a"), at(ms));
        }
        assert_eq!(c.mean_read_gap(b"a"), Some(Duration::from_millis(1)));
        let e = c.on_fetch(key("a"), None, 1, 0, Some(Duration::from_millis(19)), at(10));
        assert_eq!(e.lts, at(16));
    }

    #[test]
    fn baselines_never_expire_and_are_dropped_by_invalidations_and_the_abort_and_commit_rules() {
        let mut c: Cache<u64> = Cache::new(LeasePolicy::Naive, LeaseLimits::default(), 10);
        for (k, fts) in [("a", 5), ("b", 6), ("c", 9), ("d", 9)] {
            c.on_fetch(key(k), None, fts, 0, None, at(0));
        }
        assert!(matches!(c.lookup(b"a", at(1_000_000_000)), Lookup::Hit(_)));
        // EI: an older invalidation changes nothing, a newer one drops the entry.
        c.invalidate(b"c", 9);
        assert_eq!(c.len(), 4);
        c.invalidate(b"c", 10);
        assert_eq!(c.lookup(b"c", at(1)), Lookup::Miss);
        // An abort naming `d`, then a TooOld below 6: `a` (fts 5) goes, `b` (6) stays.
        c.on_abort([AbortHint::Stale(b"d"), AbortHint::TooOld(6)]);
        assert_eq!(c.lookup(b"a", at(1)), Lookup::Miss);
        assert!(matches!(c.lookup(b"b", at(1)), Lookup::Hit(_)));
        // A commit that wrote `b`.
        c.on_commit([&b"b"[..]]);
        assert!(c.is_empty());
        assert_eq!(c.stats().dropped, 4);
    }

    #[test]
    fn a_zero_capacity_cache_keeps_nothing() {
        let mut c = fixed(5, 0);
        c.on_fetch(key("a"), None, 1, 0, None, at(0));
        assert_eq!(c.lookup(b"a", at(1)), Lookup::Miss);
    }
}
