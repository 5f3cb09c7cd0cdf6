//! What clients observed of one key, and the checks over it: cross-client monotonic reads
//! (orca.md §7 invariant 1) and the freshness classes of the paper's case studies (§8.2).
//!
//! Versions are the writer's numbers: every key has one writer that writes versions 1, 2, 3,
//! ... one at a time, each only after the previous one returned. So version order is the order
//! of the writes in the shard's log (a later write is appended after an earlier one returned),
//! and a read that returns version `v` observed a state containing writes `1..=v` that
//! survived. Version 0 is "absent". A write whose call failed has an unknown outcome: it may
//! or may not be in the log; reads of it are left out of the comparisons (never a false
//! alarm, possibly a missed one).

use std::collections::BTreeSet;
use std::fmt;
use std::time::Instant;

/// One completed read of the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    pub version: u64,
    pub invoked: Instant,
    pub completed: Instant,
    /// The node the read was sent to.
    pub node: usize,
    /// The harness's state (cluster configuration) the read was made in.
    pub state: usize,
    /// Made at the state's lagging node.
    pub lagging: bool,
}

/// Two reads where the later one (invoked after the earlier one completed) returned an older
/// version: a non-monotonic read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NonMonotonic {
    pub earlier: Observed,
    pub later: Observed,
}

impl fmt::Display for NonMonotonic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (a, b) = (&self.earlier, &self.later);
        let lag = |o: &Observed| if o.lagging { " (lagging)" } else { "" };
        write!(
            f,
            "state {}: node {}{} returned version {}; later, state {}: node {}{} returned version {}",
            a.state,
            a.node,
            lag(a),
            a.version,
            b.state,
            b.node,
            lag(b),
            b.version
        )
    }
}

/// The first pair of reads (by the later read's invocation) that breaks cross-client monotonic
/// reads: `earlier.completed < later.invoked` and `later.version < earlier.version`, neither
/// version of unknown outcome.
pub fn first_non_monotonic(reads: &[Observed], unknown: &BTreeSet<u64>) -> Option<NonMonotonic> {
    let known = |o: &&Observed| !unknown.contains(&o.version);
    let mut by_invocation: Vec<&Observed> = reads.iter().filter(known).collect();
    by_invocation.sort_by_key(|o| o.invoked);
    by_invocation.iter().find_map(|later| {
        reads
            .iter()
            .filter(known)
            .filter(|earlier| earlier.completed < later.invoked && earlier.version > later.version)
            .max_by_key(|earlier| earlier.version)
            .map(|earlier| NonMonotonic { earlier: earlier.clone(), later: (*later).clone() })
    })
}

/// How fresh one read was (the paper's case studies, §8.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Freshness {
    /// Older than what some read that completed before it had already returned.
    Inconsistent,
    /// Monotonic, but older than the newest write acknowledged before the read was invoked.
    ConsistentOld,
    /// At least the newest write acknowledged before the read was invoked.
    Latest,
}

/// Classifies a read of `version` given the newest version any earlier-completed read had
/// returned and the newest version acknowledged to the writer before the read was invoked.
pub fn classify(version: u64, seen_before: u64, acked_before: u64) -> Freshness {
    if version < seen_before {
        Freshness::Inconsistent
    } else if version < acked_before {
        Freshness::ConsistentOld
    } else {
        Freshness::Latest
    }
}

/// Counts of reads per [`Freshness`] class, in class order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct FreshnessCounts {
    pub inconsistent: u64,
    pub consistent_old: u64,
    pub latest: u64,
}

impl FreshnessCounts {
    pub fn add(&mut self, f: Freshness) {
        match f {
            Freshness::Inconsistent => self.inconsistent += 1,
            Freshness::ConsistentOld => self.consistent_old += 1,
            Freshness::Latest => self.latest += 1,
        }
    }

    pub fn merge(&mut self, other: &FreshnessCounts) {
        self.inconsistent += other.inconsistent;
        self.consistent_old += other.consistent_old;
        self.latest += other.latest;
    }

    pub fn total(&self) -> u64 {
        self.inconsistent + self.consistent_old + self.latest
    }
}

/// Classifies every read of one key whose version has a known outcome. `acked` holds
/// `(acknowledged at, version)` of the writer's acknowledged writes.
pub fn freshness(
    reads: &[Observed],
    acked: &[(Instant, u64)],
    unknown: &BTreeSet<u64>,
) -> FreshnessCounts {
    let mut counts = FreshnessCounts::default();
    for r in reads.iter().filter(|r| !unknown.contains(&r.version)) {
        let seen_before = reads
            .iter()
            .filter(|e| e.completed < r.invoked && !unknown.contains(&e.version))
            .map(|e| e.version)
            .max()
            .unwrap_or(0);
        let acked_before =
            acked.iter().filter(|(at, _)| *at < r.invoked).map(|(_, v)| *v).max().unwrap_or(0);
        counts.add(classify(r.version, seen_before, acked_before));
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A read of `version` over `[at, at + 1]` milliseconds after `t0`.
    fn read(t0: Instant, at: u64, version: u64) -> Observed {
        Observed {
            version,
            invoked: t0 + Duration::from_millis(at),
            completed: t0 + Duration::from_millis(at + 1),
            node: at as usize,
            state: 0,
            lagging: false,
        }
    }

    #[test]
    fn a_later_read_of_an_older_version_is_flagged() {
        let t0 = Instant::now();
        let reads = [read(t0, 0, 1), read(t0, 10, 2), read(t0, 20, 2), read(t0, 30, 1)];
        let v = first_non_monotonic(&reads, &BTreeSet::new())
            .expect("the canary history is non-monotonic");
        assert_eq!((v.earlier.version, v.later.version), (2, 1));
        assert_eq!(v.later.invoked, reads[3].invoked);
    }

    #[test]
    fn absent_after_present_is_flagged() {
        let t0 = Instant::now();
        let reads = [read(t0, 0, 3), read(t0, 10, 0)];
        assert!(first_non_monotonic(&reads, &BTreeSet::new()).is_some());
    }

    #[test]
    fn monotonic_and_overlapping_reads_pass() {
        let t0 = Instant::now();
        let mut overlapping = read(t0, 5, 1);
        overlapping.invoked = t0; // overlaps the read of version 2 below: either order is fine
        let reads = [read(t0, 0, 0), read(t0, 1, 2), overlapping, read(t0, 10, 2), read(t0, 20, 5)];
        assert_eq!(first_non_monotonic(&reads, &BTreeSet::new()), None);
    }

    #[test]
    fn versions_of_unknown_outcome_are_not_compared() {
        let t0 = Instant::now();
        let reads = [read(t0, 0, 2), read(t0, 10, 1)];
        assert_eq!(first_non_monotonic(&reads, &BTreeSet::from([2])), None);
        assert!(first_non_monotonic(&reads, &BTreeSet::from([3])).is_some());
    }

    #[test]
    fn freshness_of_a_history() {
        let t0 = Instant::now();
        let acked = [(t0 + Duration::from_millis(5), 1), (t0 + Duration::from_millis(15), 2)];
        // Before any ack: latest. After ack 1, a read of 0 is old (the read of 1 completed
        // only as it was invoked: not before it). After a read of 2, a read of 1 is
        // inconsistent.
        let reads =
            [read(t0, 0, 0), read(t0, 10, 1), read(t0, 11, 0), read(t0, 20, 2), read(t0, 30, 1)];
        let c = freshness(&reads, &acked, &BTreeSet::new());
        assert_eq!(c, FreshnessCounts { inconsistent: 1, consistent_old: 1, latest: 3 }, "{c:?}");
        let c = freshness(&reads, &acked, &BTreeSet::from([1]));
        assert_eq!(c, FreshnessCounts { inconsistent: 0, consistent_old: 1, latest: 2 }, "{c:?}");
    }

    #[test]
    fn freshness_classes() {
        assert_eq!(classify(3, 4, 4), Freshness::Inconsistent);
        assert_eq!(classify(4, 4, 5), Freshness::ConsistentOld);
        assert_eq!(classify(5, 4, 5), Freshness::Latest);
        assert_eq!(classify(6, 4, 5), Freshness::Latest, "a write acknowledged during the read");
    }
}
