//! Harris-Michael list against a real 3-node cluster: several clients (one per node), several
//! sessions each, running concurrently.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

use common::cluster;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use strata_ds::{Layout, List, ScanEntry, Stats};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Insert,
    Remove,
    Contains,
}

/// One completed operation on one key: what it returned and when it ran.
#[derive(Clone, Copy, Debug)]
struct Rec {
    kind: Kind,
    result: bool,
    start: Instant,
    end: Instant,
}

/// Is there a sequential order of `ops` (all on one key, starting absent) that respects real
/// time (an op that ended before another began comes first) and in which every op returns what
/// it returned? Wing & Gong's search, memoised on (ops done, present). Returns the final
/// membership of one such order.
fn linearize(ops: &[Rec]) -> Option<bool> {
    assert!(ops.len() <= 128, "too many operations on one key for the checker");
    fn go(
        ops: &[Rec],
        done: u128,
        present: bool,
        seen: &mut HashSet<(u128, bool)>,
    ) -> Option<bool> {
        if done.count_ones() as usize == ops.len() {
            return Some(present);
        }
        if !seen.insert((done, present)) {
            return None;
        }
        let pending = || (0..ops.len()).filter(move |i| done & (1u128 << i) == 0);
        // Only an op that began before every pending op ended can come next.
        let min_end = pending().map(|i| ops[i].end).min().expect("pending");
        for i in pending() {
            let op = ops[i];
            if op.start > min_end {
                continue;
            }
            let next = match (op.kind, op.result) {
                (Kind::Insert, true) if !present => true,
                (Kind::Insert, false) if present => true,
                (Kind::Remove, true) if present => false,
                (Kind::Remove, false) if !present => false,
                (Kind::Contains, r) if r == present => present,
                _ => continue,
            };
            if let Some(f) = go(ops, done | 1u128 << i, next, seen) {
                return Some(f);
            }
        }
        None
    }
    go(ops, 0, false, &mut HashSet::new())
}

/// The list's structure at quiescence: strictly increasing keys (sorted, no duplicates) and no
/// marked object still reachable.
fn check_shape(scan: &[ScanEntry]) {
    for e in scan {
        assert!(!e.marked, "a removed object is still reachable at quiescence: {scan:?}");
    }
    for w in scan.windows(2) {
        assert!(w[0].key < w[1].key, "not strictly sorted: {scan:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_session_sees_set_semantics_in_key_order() {
    let c = cluster().await;
    let mut w = c.workers(1, "l-seq").await;
    let (s, cx) = &mut w[0];
    for layout in [Layout::FOUR, Layout::THIRTY_TWO, Layout::new(1, 8)] {
        let l = List::new("l-seq", &format!("set-{}", layout.fields), layout).unwrap();
        assert!(!l.contains(s, cx, 5).await.unwrap());
        assert!(!l.remove(s, cx, 5).await.unwrap(), "removing from an empty list");
        for k in [5, 1, 9, 3, u64::MAX, 0, 7] {
            assert!(l.insert(s, cx, k).await.unwrap(), "insert {k}");
        }
        assert!(!l.insert(s, cx, 9).await.unwrap(), "duplicate insert");
        let keys: Vec<u64> = l.scan(s, cx).await.unwrap().iter().map(|e| e.key).collect();
        assert_eq!(keys, vec![0, 1, 3, 5, 7, 9, u64::MAX]);
        assert!(l.contains(s, cx, 7).await.unwrap());
        assert!(!l.contains(s, cx, 8).await.unwrap());
        for k in [0, 7, u64::MAX, 3] {
            assert!(l.remove(s, cx, k).await.unwrap(), "remove {k}");
            assert!(!l.remove(s, cx, k).await.unwrap(), "second remove {k}");
            assert!(!l.contains(s, cx, k).await.unwrap());
        }
        let scan = l.scan(s, cx).await.unwrap();
        check_shape(&scan);
        assert_eq!(scan.iter().map(|e| e.key).collect::<Vec<_>>(), vec![1, 5, 9]);
        // Re-inserting after removal works (with recycled objects).
        assert!(l.insert(s, cx, 7).await.unwrap());
        assert!(l.contains(s, cx, 7).await.unwrap());
    }
    assert!(cx.stats.alloc_reused > 0, "removed objects are recycled: {:?}", cx.stats);
    drop(w);
    c.shutdown().await;
}

/// Sessions on three nodes insert, remove and look up random keys of a small range
/// concurrently, recording each result and its real-time interval. Checks:
/// * per key, the results are linearizable (a real-time-respecting sequential order of the
///   set operations exists that explains every result) and that order's final membership is
///   what the list holds at the end;
/// * per key, successful inserts minus successful removes is 0 or 1 and equals membership;
/// * at quiescence the list is strictly sorted with no marked object reachable, and every
///   node's sessions agree on membership.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_inserts_and_removes_are_linearizable_per_key_and_leave_a_clean_sorted_list() {
    const OPS: usize = 80;
    const KEYS: u64 = 20;
    let c = cluster().await;
    let workers = c.workers(3, "l-conc").await; // 9 sessions
    let list = List::new("l-conc", "l", Layout::FOUR).unwrap();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (w, (mut s, mut cx)) in workers.into_iter().enumerate() {
        let list = list.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(1000 + w as u64);
            let mut recs = Vec::new();
            for _ in 0..OPS {
                // Key 0 and KEYS-1 bracket the range; keys spaced so some land in between.
                let k = rng.gen_range(0..KEYS) * 10;
                let kind = match rng.gen_range(0..10) {
                    0..=3 => Kind::Insert,
                    4..=7 => Kind::Remove,
                    _ => Kind::Contains,
                };
                let t0 = Instant::now();
                let result = match kind {
                    Kind::Insert => list.insert(&mut s, &mut cx, k).await,
                    Kind::Remove => list.remove(&mut s, &mut cx, k).await,
                    Kind::Contains => list.contains(&mut s, &mut cx, k).await,
                }
                .unwrap();
                recs.push((k, Rec { kind, result, start: t0, end: Instant::now() }));
            }
            (recs, cx.stats, s, cx)
        }));
    }
    let mut per_key: BTreeMap<u64, Vec<Rec>> = BTreeMap::new();
    let mut stats = Stats::default();
    let mut left = Vec::new();
    for t in tasks {
        let (recs, st, s, cx) = t.await.unwrap();
        for (k, r) in recs {
            per_key.entry(k).or_default().push(r);
        }
        stats.add(&st);
        left.push((s, cx));
    }
    eprintln!("{} ops in {:?}; {stats:?}", 9 * OPS, start.elapsed());

    let (s, cx) = &mut left[0];
    let scan = list.scan(s, cx).await.unwrap();
    check_shape(&scan);
    let present: HashSet<u64> = scan.iter().map(|e| e.key).collect();
    for (k, ops) in &per_key {
        let ins = ops.iter().filter(|r| r.kind == Kind::Insert && r.result).count() as i64;
        let rem = ops.iter().filter(|r| r.kind == Kind::Remove && r.result).count() as i64;
        assert!(
            ins - rem == 0 || ins - rem == 1,
            "key {k}: {ins} successful inserts, {rem} successful removes"
        );
        assert_eq!(
            ins - rem == 1,
            present.contains(k),
            "key {k}: membership disagrees with the counts"
        );
        match linearize(ops) {
            Some(fin) => assert_eq!(
                fin,
                present.contains(k),
                "key {k}: the linearization ends elsewhere than the list"
            ),
            None => panic!("key {k}: no linearization explains {ops:?}"),
        }
    }
    assert!(present.iter().all(|k| per_key.contains_key(k)), "a key nobody inserted is present");
    // Every node agrees (contains is a synchronizing search).
    for (s, cx) in left.iter_mut().take(3) {
        for k in 0..KEYS {
            assert_eq!(
                list.contains(s, cx, k * 10).await.unwrap(),
                present.contains(&(k * 10)),
                "key {} at {}",
                k * 10,
                s.node_addr()
            );
        }
    }
    drop(left);
    c.shutdown().await;
}

/// The checker itself rejects histories no linearization explains.
#[test]
fn the_linearizability_check_rejects_impossible_histories() {
    let t = Instant::now();
    let at = |a: u64, b: u64| {
        (t + std::time::Duration::from_millis(a), t + std::time::Duration::from_millis(b))
    };
    let rec = |kind, result, (start, end)| Rec { kind, result, start, end };
    // Sequential insert, insert: the second must fail.
    assert_eq!(
        linearize(&[rec(Kind::Insert, true, at(0, 1)), rec(Kind::Insert, true, at(2, 3))]),
        None
    );
    // Overlapping: either order is possible.
    assert_eq!(
        linearize(&[rec(Kind::Insert, true, at(0, 5)), rec(Kind::Contains, false, at(1, 2))]),
        Some(true)
    );
    // A remove that succeeds before any insert began.
    assert_eq!(
        linearize(&[rec(Kind::Remove, true, at(0, 1)), rec(Kind::Insert, true, at(2, 3))]),
        None
    );
    // Contains true after a completed remove with nothing in between.
    assert_eq!(
        linearize(&[
            rec(Kind::Insert, true, at(0, 1)),
            rec(Kind::Remove, true, at(2, 3)),
            rec(Kind::Contains, true, at(4, 5)),
        ]),
        None
    );
}
