//! Kairos's client clock in the library (kairos.md §3.1 `clock`, §9.3), strict mode (K5,
//! §1.2, §5.1, §5.5), and what a committed transaction saw ([`CommitInfo`]).
//!
//! * **The clock** is the system clock, plus an emulated offset and drift
//!   ([`KairosOptions`]): `system + offset + (system - start) * ppm / 1e6`, made monotone by
//!   `strata_kairos::timestamp::ClientClock` (§9.3; `start` is when the client was made). The
//!   pure computation is `strata_kairos::timestamp`'s; the library only reads the system clock
//!   and sleeps. All processes of one machine read the same system clock, so the options are
//!   how tests give clients the skew they would have on different machines (K4: skew costs
//!   aborts, never correctness).
//! * **Strict mode** (`strict_eps`): an RO transaction's commit timestamp is `max(max fts,
//!   now)` (§5.1), and a commit is reported only after every decision is acknowledged and the
//!   clock passed `T.commit.nanos + 2 eps` (§5.5 commit wait). Then, if the clocks' error is
//!   within `eps`, a transaction that starts after another was reported committed gets a
//!   larger commit timestamp (K5). Aborts are reported at once (docs/design.md, "Kairos:
//!   timestamps and validation").

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use strata_kairos::timestamp::{
    base_ns_until, commit_wait_until, drifted_ns, ClientClock, Timestamp,
};

use crate::kairos_wm::{Incomplete, Marks, Watermarks};

/// Kairos options of a client (kairos.md §3.1, §9.3, K5). The default is production's: the
/// system clock as it is, strict mode off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KairosOptions {
    /// Emulated clock offset added to every reading of the system clock (§9.3).
    pub clock_offset_ns: i64,
    /// Emulated drift: the clock runs this many parts per million fast (slow if negative)
    /// since the client was made (§9.3).
    pub clock_drift_ppm: i32,
    /// Strict mode (K5) with this bound on clock error; `None`: serializable only (K1).
    pub strict_eps: Option<Duration>,
}

/// What a committed Kairos transaction saw and did, for checks against a global oracle
/// (kairos.md §7 inv. 1-3, 5): its commit timestamp, each read with the version timestamp
/// it returned, and each write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitInfo {
    pub commit_ts: Timestamp,
    /// No writes: validated at `commit_ts = max fts` (strict: `max(max fts, now)`).
    pub read_only: bool,
    pub reads: Vec<ReadInfo>,
    /// Installed at `commit_ts`.
    pub writes: Vec<WriteInfo>,
}

/// One write of a transaction: `(table, key, value)`; a `None` value is a delete.
pub type WriteInfo = (String, Bytes, Option<Bytes>);

/// One read of a transaction: the value it returned and that value's version timestamp
/// (`Timestamp::ZERO`: never written).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadInfo {
    pub table: String,
    pub key: Bytes,
    pub value: Option<Bytes>,
    pub vts: Timestamp,
}

/// The client's Kairos clock (§3.1): one per client, shared by its transactions.
pub(crate) struct KairosClock {
    opts: KairosOptions,
    /// The system clock when the client was made: drift accumulates from here.
    start_ns: u64,
    /// The monotone clock of the current lease (`node` = the lease id's low 32 bits).
    clock: Mutex<Option<ClientClock>>,
}

impl KairosClock {
    pub(crate) fn new(opts: KairosOptions) -> KairosClock {
        KairosClock { opts, start_ns: system_now_ns(), clock: Mutex::default() }
    }

    pub(crate) fn strict(&self) -> bool {
        self.opts.strict_eps.is_some()
    }

    /// The clock of lease `lease_id` with this moment's physical reading (system clock plus
    /// drift; the offset is the `ClientClock`'s). `node` is the lease id's low 32 bits (lease
    /// ids are never reused; two leases 2^32 apart would share a `node`, and then only a
    /// same-nanosecond tie could repeat a timestamp).
    fn with_clock<R>(&self, lease_id: u64, f: impl FnOnce(&mut ClientClock, u64) -> R) -> R {
        let node = lease_id as u32;
        let mut clock = self.clock.lock().unwrap_or_else(|e| e.into_inner());
        let clock = match clock.as_mut() {
            Some(c) if c.client_id() == node => c,
            _ => clock.insert(ClientClock::new(node, self.opts.clock_offset_ns)),
        };
        let physical =
            drifted_ns(system_now_ns(), self.start_ns, i64::from(self.opts.clock_drift_ppm));
        f(clock, physical)
    }

    /// §5.1 RW commit timestamp: the clock, bumped above every version read and every
    /// timestamp issued before; registered as incomplete in `wm` under the clock's lock
    /// (§5.9 bullet 1, see `kairos_wm`): complete when the guard is dropped.
    pub(crate) fn rw_commit_ts(
        &self,
        lease_id: u64,
        read_vts: impl Iterator<Item = Timestamp>,
        wm: &Arc<Watermarks>,
    ) -> (Timestamp, Incomplete) {
        self.with_clock(lease_id, |c, physical| {
            let ts = c.rw_commit_ts(physical, read_vts);
            (ts, wm.register_incomplete(ts))
        })
    }

    /// §5.9: the report of lease `lease_id`, its `local_wm` read from the clock under the lock
    /// [`KairosClock::rw_commit_ts`] issues and registers under (no timestamp issued between
    /// the reading and the report's computation can fall below it).
    /// `cache_fts`: the cache's smallest `fts` (see `Watermarks::marks`).
    pub(crate) fn marks(
        &self,
        lease_id: u64,
        wm: &Watermarks,
        cache_fts: impl FnOnce() -> Option<Timestamp>,
    ) -> Marks {
        self.with_clock(lease_id, |c, physical| wm.marks(c.now(physical), cache_fts))
    }

    /// §5.1 RO commit timestamp: `max fts` (§5.2 `fts = max(vts, wm)`); strict mode
    /// `max(that, now)`.
    pub(crate) fn ro_commit_ts(
        &self,
        lease_id: u64,
        read_fts: impl Iterator<Item = Timestamp>,
    ) -> Timestamp {
        let strict = self.strict();
        self.with_clock(lease_id, |c, physical| {
            c.ro_commit_ts(read_fts, strict.then_some(physical))
        })
        .unwrap_or(Timestamp::ZERO)
    }

    /// K5 (b), §5.5: in strict mode, returns once the clock reads `T.commit.nanos + 2 eps`;
    /// at once otherwise.
    pub(crate) async fn commit_wait(&self, lease_id: u64, commit: Timestamp) {
        let Some(eps) = self.opts.strict_eps else { return };
        let until = commit_wait_until(commit, eps.as_nanos().min(u128::from(u64::MAX)) as u64);
        loop {
            let now = self.with_clock(lease_id, |c, physical| c.now(physical));
            let wait = base_ns_until(now, until, i64::from(self.opts.clock_drift_ppm));
            if wait == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_nanos(wait)).await;
        }
    }
}

/// The system clock in nanoseconds since the Unix epoch: the one physical reading of
/// Kairos's client clock (kairos.md §3.1; the library is not sans-IO, so this is its place).
fn system_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(offset_ms: i64, eps_ms: Option<u64>) -> KairosClock {
        KairosClock::new(KairosOptions {
            clock_offset_ns: offset_ms * 1_000_000,
            clock_drift_ppm: 0,
            strict_eps: eps_ms.map(Duration::from_millis),
        })
    }

    fn rw_ts(c: &KairosClock, lease_id: u64) -> Timestamp {
        c.rw_commit_ts(lease_id, std::iter::empty(), &Arc::default()).0
    }

    #[test]
    fn commit_timestamps_carry_the_offset() {
        let ahead = rw_ts(&clock(10_000, None), 7);
        let behind = rw_ts(&clock(-10_000, None), 7);
        let system = system_now_ns();
        assert!(ahead.nanos > system + 9_000_000_000, "{ahead} vs {system}");
        assert!(behind.nanos < system - 9_000_000_000, "{behind} vs {system}");
        assert_eq!(ahead.node, 7);
    }

    #[test]
    fn ro_timestamps_are_max_fts_unless_strict() {
        let read = [Timestamp::new(5, 1), Timestamp::new(9, 2)];
        assert_eq!(clock(0, None).ro_commit_ts(3, read.into_iter()), Timestamp::new(9, 2));
        assert_eq!(clock(0, None).ro_commit_ts(3, std::iter::empty()), Timestamp::ZERO);
        let strict = clock(0, Some(1)).ro_commit_ts(3, read.into_iter());
        assert!(strict.nanos >= system_now_ns() - 1_000_000_000 && strict.node == 3, "{strict}");
    }

    #[tokio::test]
    async fn the_commit_wait_lasts_two_eps_past_the_commit_timestamp() {
        let c = clock(0, Some(20));
        let commit = rw_ts(&c, 1);
        let start = std::time::Instant::now();
        c.commit_wait(1, commit).await;
        assert!(start.elapsed() >= Duration::from_millis(39), "{:?}", start.elapsed());
        assert!(system_now_ns() >= commit.nanos + 40_000_000);
        // Not strict: no wait.
        let start = std::time::Instant::now();
        clock(0, None).commit_wait(1, commit).await;
        assert!(start.elapsed() < Duration::from_millis(20));
    }
}
