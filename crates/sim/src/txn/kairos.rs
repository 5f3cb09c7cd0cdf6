//! What a client of a Kairos table adds to the RIFL client's rounds (kairos.md), as
//! `strata_client`'s `txn`, `kairos`, `kairos_wm` and `txn_sharded` do:
//!
//! * **its clock** (§3.1, §9.3): `strata_kairos::ClientClock` read at the global time with an
//!   emulated drift, plus the clock's emulated offset ([`Skew`]: offsets from {0, ±400 µs,
//!   ±10 ms, ±1 s} and drifts up to ±1000 ppm, §7 inv. 1), so K1–K4 are judged under skew;
//! * **timestamps** (§5.1, §5.2): a read's `fts = max(vts, wm)` with `wm` the view read before
//!   the read was sent; RW `T.commit` bumped above every version read and the last issued
//!   (the `KairosNoTimestampBump` canary takes `now()` instead), RO `max fts`, `T.freshness =
//!   min fts`;
//! * **objects and roles** (§5.4, §9.12, `--validation sharded:V`): server-side, one object per
//!   key in the table (`Full`); with sharded validators one validator object per key read or
//!   written in `T.validators` (`Read`, or `Delete` as the "will write" flag, with the `vts`
//!   read) and one data object per key written in `T` (`Replicate`, no read versions);
//! * **watermark reports** (§5.9): every [`REPORT_EVERY`] a `KairosReport { local_wm,
//!   c_freshness }` to the leader of every shard of the run's tables (`local_wm` counts the
//!   RW transaction until its decisions are applied, `c_freshness` its read set until it is
//!   decided, as the library's does); each answer raises
//!   `wm_view` to `max(wm_view, WM, ts_GC)`. Reports start with the client; answers count, and
//!   transactions start, once every client had an answer from every shard (or waited
//!   [`REGISTER_PATIENCE`]): the spec's static membership (§5.9: a client that has not
//!   reported holds `WM` at its registration value), where Strata's leaders count only the
//!   clients they heard — answers heard earlier could carry a `WM` or `ts_GC` above a
//!   client that had not reported yet, and §7 inv. 6 would fail at the start. A client
//!   reports at once after a `TooOld` vote. A client that crashed or is paused (a process
//!   stopped) sends none, so leaders drop its report after their 1 s timeout (§6.5).
//! * **a cache** (§5.2 step 4, §5.5, `TxnSimOptions::cache`): with a lease policy, a
//!   transaction's reads look `strata_kairos::cache::Cache` up first on the client's clock,
//!   as the library's `kairos_cache` glue does: a hit is read with the entry's `(vts, fts)`,
//!   a miss fetches and inserts with the lease the policy gives for the key's `R` and the
//!   server's `W`; an abort drops what its votes name (`dropped_after_abort`), a commit the
//!   keys it wrote, a `TooOld` the entries below the next `ts_GC` heard; `c_freshness`
//!   counts the entries' `min fts`. Safety never rests on it: validation must catch every
//!   stale hit (the checkers' `kairos-k2-stale-read`, `kairos-self-invalidation`).
//! * **strict mode** (K5, §5.1, §5.5, `TxnSimOptions::strict_eps`): an RO transaction's
//!   `T.commit` is `max(max fts, now)`, and a commit is reported only after its decisions are
//!   acknowledged and the client's clock passed `T.commit + 2 eps`
//!   (`strata_kairos::timestamp::commit_wait_until`), as the library's `strict_eps` does; the
//!   `NoCommitWait` client bug reports at once.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use strata_core::Prng;
use strata_kairos::cache::{dropped_after_abort, AbortHint, Cache, CacheEntry, Lookup};
use strata_kairos::timestamp::{commit_wait_until, drifted_ns, ClientClock};
use strata_kairos::watermark::{c_freshness, local_wm};
use strata_kairos::PlantedBug;
use strata_kairos::{LeaseLimits, LeasePolicy};
use strata_wire::client::Request;
use strata_wire::txn::{KairosPrepare, Timestamp, TxnAction, Vote};
use strata_wire::Instant;

use super::{Layout, Part};

/// How often a client reports (kairos.md §3.5 says every 10 ms; 20 ms keeps the simulation
/// light and is far inside the leaders' 1 s report timeout).
pub const REPORT_EVERY: Duration = Duration::from_millis(20);
/// How long a new client waits for every shard's first answer before it reads.
pub const REGISTER_PATIENCE: Duration = Duration::from_millis(300);

/// A client clock's emulated error (kairos.md §9.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Skew {
    pub offset_ns: i64,
    pub drift_ppm: i64,
}

impl Skew {
    pub const NONE: Skew = Skew { offset_ns: 0, drift_ppm: 0 };

    /// kairos.md §7 inv. 1: an offset from {0, ±400 µs, ±10 ms, ±1 s}, a drift uniform in
    /// ±1000 ppm.
    pub fn draw(rng: &mut Prng) -> Skew {
        const OFFSETS: [i64; 7] =
            [0, 400_000, -400_000, 10_000_000, -10_000_000, 1_000_000_000, -1_000_000_000];
        let offset_ns = OFFSETS[rng.range(0, OFFSETS.len() as u64) as usize];
        let drift_ppm = rng.range(0, 2_001) as i64 - 1_000;
        Skew { offset_ns, drift_ppm }
    }

    /// Clock errors that stay within `eps` of each other (offsets 0, ±eps/2, eps/5; no
    /// drift), so that strict mode's real-time order holds and is judged (K5).
    pub fn within(eps: Duration) -> Vec<Skew> {
        let eps = eps.as_nanos() as i64;
        [0, eps / 2, -eps / 2, eps / 5].map(|offset_ns| Skew { offset_ns, drift_ppm: 0 }).into()
    }
}

/// A client's Kairos state (module docs).
pub struct KairosSide {
    clock: ClientClock,
    drift_ppm: i64,
    start_ns: u64,
    /// A planted client bug (`strata_kairos::PlantedBug`: `NoTimestampBump` and
    /// `ClientSkipsTimestampBump` take `T.commit = now()`, §5.1 without the bump; others
    /// are not the client's).
    bug: Option<PlantedBug>,
    wm_view: Timestamp,
    /// The RW transaction issued and not complete (a client waits for its decisions before
    /// the next transaction, so there is at most one).
    incomplete: Option<Timestamp>,
    /// The live read set's floor: `wm_view` at the transaction's first read (§5.9, Strata's
    /// reads in flight), until the transaction is decided.
    floor: Option<Timestamp>,
    /// Every shard reported to, with its table's name.
    targets: Vec<(Part, String)>,
    seq: u64,
    next_round: Instant,
    /// Reports in flight by correlation id, with the node each went to (answers to an older
    /// round are still welcome).
    in_flight: BTreeMap<u64, (Part, usize)>,
    answered: BTreeSet<Part>,
    register_by: Instant,
    /// Whether answers raise `wm_view` yet: not before every client registered (module docs).
    listening: bool,
    /// The cache, with a lease policy (module docs); its entries are keyed by data-table key.
    cache: Option<Cache<Timestamp>>,
    /// A `TooOld` vote came: the next `ts_GC` heard drops the entries below it.
    drop_below_next_ts_gc: bool,
    /// Strict mode's `eps` in nanoseconds (module docs).
    strict_eps_ns: Option<u64>,
}

impl KairosSide {
    /// A client whose timestamps carry `node`, with clock error `skew` from `now` on, and
    /// `bug` planted.
    pub fn new(
        node: u32,
        skew: Skew,
        now: Instant,
        layout: &Layout,
        bug: Option<PlantedBug>,
        cache: Option<(LeasePolicy, usize)>,
        strict_eps: Option<Duration>,
    ) -> Self {
        let targets = layout.parts().into_iter().map(|p| (p, layout.name(p.0).to_string()));
        KairosSide {
            clock: ClientClock::new(node, skew.offset_ns),
            drift_ppm: skew.drift_ppm,
            start_ns: now.as_nanos(),
            bug,
            wm_view: Timestamp::ZERO,
            incomplete: None,
            floor: None,
            targets: targets.collect(),
            seq: 0,
            next_round: now,
            in_flight: BTreeMap::new(),
            answered: BTreeSet::new(),
            register_by: now + REGISTER_PATIENCE,
            listening: false,
            cache: cache.map(|(policy, capacity)| {
                Cache::new(policy, LeaseLimits::default(), capacity).with_planted(bug)
            }),
            drop_below_next_ts_gc: false,
            strict_eps_ns: strict_eps.map(|eps| eps.as_nanos() as u64),
        }
    }

    /// K5's commit wait (§5.5): whether a commit at `commit` must not be reported yet, the
    /// client's clock being below `commit + 2 eps`. Never outside strict mode (nor with the
    /// `NoCommitWait` bug).
    pub fn commit_wait(&mut self, now: Instant, commit: Timestamp) -> bool {
        let Some(eps) = self.strict_eps_ns.filter(|_| self.bug != Some(PlantedBug::NoCommitWait))
        else {
            return false;
        };
        self.now_ns(now) < commit_wait_until(commit, eps)
    }

    /// The client's clock at global time `now`, as the cache's time (leases end on it).
    fn cache_now(&mut self, now: Instant) -> Instant {
        Instant(self.now_ns(now))
    }

    /// §5.2 step 4, a transaction's first read of `key`: records the read (§5.10) and looks
    /// the cache up. A hit comes with the client clock's reading (for the self-invalidation
    /// checker); `None` without a cache or on a miss.
    pub fn cached(
        &mut self,
        key: &Bytes,
        now: Instant,
    ) -> Option<(CacheEntry<Timestamp>, Instant)> {
        let at = self.cache_now(now);
        let cache = self.cache.as_mut()?;
        cache.record_read(key, at);
        let Lookup::Hit(e) = cache.lookup(key, at) else { return None };
        // The read set's floor covers the hit until the decision (§5.9), though its entry may
        // be evicted meanwhile.
        self.floor = Some(self.floor.map_or(e.fts, |f| f.min(e.fts)));
        Some((e, at))
    }

    /// §5.2 step 4 after a fetch sent with view `wm`: caches the value under the policy's
    /// lease. Returns the read's `fts` (`max(vts, wm)`, with or without a cache).
    pub fn fetched(
        &mut self,
        key: Bytes,
        value: Option<Bytes>,
        vts: Timestamp,
        wm: Timestamp,
        w_mean_ns: Option<u64>,
        now: Instant,
    ) -> Timestamp {
        let at = self.cache_now(now);
        match self.cache.as_mut() {
            Some(cache) => {
                let w = w_mean_ns.map(Duration::from_nanos);
                cache.on_fetch(key, value, vts, wm, w, at).fts
            }
            None => vts.max(wm),
        }
    }

    /// §5.5 after the decision: a commit drops the keys it wrote; an abort drops the keys of
    /// the objects its votes name (`objects`: `(seq, data-table key)`), and after a `TooOld`
    /// the next `ts_GC` heard drops the entries below it.
    pub fn after_decision<'a>(
        &mut self,
        committed: bool,
        objects: impl Iterator<Item = (u64, &'a Bytes)>,
        votes: &BTreeMap<u64, Vote>,
        written: impl Iterator<Item = &'a Bytes>,
    ) {
        let Some(cache) = self.cache.as_mut() else { return };
        if committed {
            return cache.on_commit(written.map(|k| &k[..]));
        }
        let stale = objects.filter(|(seq, _)| dropped_after_abort(votes.get(seq)));
        cache.on_abort(stale.map(|(_, k)| AbortHint::Stale(&k[..])));
        let too_old = |v: &Vote| *v == Vote::Abort(strata_wire::txn::AbortReason::TooOld);
        self.drop_below_next_ts_gc |= votes.values().any(too_old);
    }

    /// A reading of the client's clock at global time `now` (§9.3: drift, then the offset,
    /// made monotone).
    fn now_ns(&mut self, now: Instant) -> u64 {
        self.clock.now(drifted_ns(now.as_nanos(), self.start_ns, self.drift_ppm))
    }

    /// §5.2: the `wm` a read is sent with.
    pub fn wm_view(&self) -> Timestamp {
        self.wm_view
    }

    /// A transaction's first read: its floor is the view of that moment.
    pub fn begin_reads(&mut self) {
        self.floor.get_or_insert(self.wm_view);
    }

    /// §5.1: `(T.commit, T.freshness)` of a transaction with these reads `(vts, fts)`; an RW
    /// transaction is incomplete (§5.9) until [`KairosSide::complete`].
    pub fn stamp(
        &mut self,
        now: Instant,
        read_only: bool,
        reads: &[(Timestamp, Timestamp)],
    ) -> (Timestamp, Option<Timestamp>) {
        let freshness = strata_kairos::freshness(reads.iter().map(|r| r.1));
        let physical = drifted_ns(now.as_nanos(), self.start_ns, self.drift_ppm);
        if read_only {
            // §5.1: `max fts`; strict mode `max(max fts, now)`.
            let strict = self.strict_eps_ns.map(|_| physical);
            let commit = self.clock.ro_commit_ts(reads.iter().map(|r| r.1), strict);
            return (commit.unwrap_or(Timestamp::ZERO), freshness);
        }
        let unbumped = matches!(
            self.bug,
            Some(PlantedBug::NoTimestampBump | PlantedBug::ClientSkipsTimestampBump)
        );
        let commit = match unbumped {
            true => self.clock.rw_commit_ts_unbumped(physical),
            false => self.clock.rw_commit_ts(physical, reads.iter().map(|r| r.0)),
        };
        self.incomplete = Some(commit);
        (commit, freshness)
    }

    /// The transaction is decided: its read set will not be validated again (every vote is
    /// in, and a prepare retried after that finds its record), so its floor goes, as the
    /// library's read set goes when `commit` returns. It stays incomplete until
    /// [`KairosSide::complete`].
    pub fn end_reads(&mut self) {
        self.floor = None;
    }

    /// The transaction ended (its decisions applied, or it was read-only or abandoned).
    pub fn complete(&mut self) {
        self.incomplete = None;
        self.floor = None;
    }

    /// Whether every shard answered a report, or the client waited long enough.
    pub fn registered(&self, now: Instant) -> bool {
        now >= self.register_by || self.answered.len() == self.targets.len()
    }

    /// After a `TooOld` vote: report at the next poll (the library's report round).
    pub fn report_soon(&mut self, now: Instant) {
        self.next_round = now;
    }

    /// A round of reports if one is due: `(part, request)` for each shard; the caller sends
    /// them and hands their correlation ids to [`KairosSide::sent`].
    pub fn due_reports(&mut self, now: Instant, lease_id: u64) -> Vec<(Part, Request)> {
        if now < self.next_round {
            return Vec::new();
        }
        self.next_round = now + REPORT_EVERY;
        self.seq += 1;
        let clock = self.now_ns(now);
        let local_wm = local_wm(clock, self.incomplete);
        let cached = self.cache.as_ref().and_then(Cache::min_fts);
        let c_freshness = c_freshness(self.wm_view, cached, self.floor);
        let (seq, client) = (self.seq, lease_id);
        let report = |(part, table): &(Part, String)| {
            let (table, shard) = (table.clone(), part.1);
            (*part, Request::KairosReport { table, shard, client, seq, local_wm, c_freshness })
        };
        self.targets.iter().map(report).collect()
    }

    pub fn sent(&mut self, corr: u64, part: Part, node: usize) {
        self.in_flight.insert(corr, (part, node));
    }

    /// The shard a report in flight went to, and the node.
    pub fn report_target(&self, corr: u64) -> Option<(Part, usize)> {
        self.in_flight.get(&corr).copied()
    }

    /// Every client registered: answers count from now on.
    pub fn listen(&mut self) {
        self.listening = true;
    }

    /// A leader's answer to report `corr`: `WM` and `ts_GC` raise the view (kairos_wm docs:
    /// `ts_GC` is as sound a watermark as `WM`) once the client listens.
    pub fn on_watermarks(&mut self, corr: u64, wm: Timestamp, ts_gc: Timestamp) {
        if let Some((part, _)) = self.in_flight.remove(&corr) {
            self.answered.insert(part);
        }
        if self.listening {
            self.wm_view = self.wm_view.max(wm).max(ts_gc);
        }
        if std::mem::take(&mut self.drop_below_next_ts_gc) {
            if let Some(cache) = self.cache.as_mut() {
                cache.on_abort([AbortHint::TooOld(ts_gc)]);
            }
        }
    }

    /// A report refused (not the leader, moved): forgotten; the next round goes again.
    pub fn on_refused(&mut self, corr: u64) {
        self.in_flight.remove(&corr);
    }
}

/// One object of a Kairos transaction: its table (index in the run's [`Layout`]), key,
/// action, and the version read that its participant validates (`None`: none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KObject {
    pub table: usize,
    pub key: Bytes,
    pub action: TxnAction,
    pub read_vts: Option<Timestamp>,
}

/// kairos.md §5.4 (`strata_client::txn_sharded::kairos_objects`): the objects of a
/// transaction whose keys have these actions and were read at these versions (`None`: a
/// blind write), in `(table, key)` order — the data table's name is a prefix of its
/// validators', so table index order is name order (rifl.md §5.8.1 T1).
pub fn objects(
    layout: &Layout,
    actions: &BTreeMap<Bytes, (TxnAction, Option<Timestamp>)>,
) -> Vec<KObject> {
    let mut out = Vec::new();
    for (key, (action, vts)) in actions {
        let object = |table, action: &TxnAction, read_vts| KObject {
            table,
            key: key.clone(),
            action: action.clone(),
            read_vts,
        };
        if !layout.sharded() {
            out.push(object(0, action, *vts));
            continue;
        }
        // A validator keeps no values: a written key's object is the "will write" flag.
        let flag = if *action == TxnAction::Read { TxnAction::Read } else { TxnAction::Delete };
        out.push(object(1, &flag, *vts));
        if *action != TxnAction::Read {
            out.push(object(0, action, None)); // §4 `ReplicateReq`: no read versions
        }
    }
    out.sort_by(|a, b| (a.table, &a.key).cmp(&(b.table, &b.key)));
    out
}

/// The Kairos fields of a prepare at a participant of table `table` whose ops' read versions
/// are `read_vts` (the leader stamps `ts_gc`).
pub fn prepare_fields(
    layout: &Layout,
    table: usize,
    (commit_ts, freshness): (Timestamp, Option<Timestamp>),
    read_only: bool,
    read_vts: Vec<Option<Timestamp>>,
) -> KairosPrepare {
    KairosPrepare {
        commit_ts,
        freshness,
        read_only,
        read_vts,
        role: layout.role(table),
        ts_gc: Timestamp::ZERO,
    }
}
