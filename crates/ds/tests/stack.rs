//! Treiber stack against a real 3-node cluster: several clients (one per node), several
//! sessions each, running concurrently.

mod common;

use std::time::Instant;

use common::{cluster, elem, multiset};
use strata_ds::{Layout, Stack, Stats};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_session_sees_lifo_order_and_an_empty_stack_pops_none() {
    let c = cluster().await;
    let mut w = c.workers(1, "ts-seq").await;
    let (s, cx) = &mut w[0];
    for layout in [Layout::FOUR, Layout::THIRTY_TWO, Layout::new(1, 8)] {
        let st = Stack::new("ts-seq", &format!("lifo-{}", layout.fields), layout).unwrap();
        assert_eq!(st.pop(s, cx).await.unwrap(), None, "a never-used stack is empty");
        for i in 0..5 {
            st.push(s, cx, &elem(0, i)).await.unwrap();
        }
        for i in (0..5).rev() {
            assert_eq!(st.pop(s, cx).await.unwrap().as_deref(), Some(&elem(0, i)[..]), "LIFO");
        }
        assert_eq!(st.pop(s, cx).await.unwrap(), None, "empty again");
    }
    // Popped objects were recycled for the later pushes.
    assert!(cx.stats.alloc_reused > 0, "{:?}", cx.stats);
    // An element larger than a field still round-trips.
    let st = Stack::new("ts-seq", "big", Layout::FOUR).unwrap();
    let big = vec![7u8; 5000];
    st.push(s, cx, &big).await.unwrap();
    assert_eq!(st.pop(s, cx).await.unwrap().as_deref(), Some(&big[..]));
    drop(w);
    c.shutdown().await;
}

/// The paper's workload and check: every session repeatedly pushes a unique element and then
/// pops; a pop right after one's own push must never find the stack empty, and at the end the
/// popped elements are exactly the pushed ones (each once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_push_pop_pairs_never_find_the_stack_empty_and_pop_each_element_once() {
    const PAIRS: usize = 60;
    let c = cluster().await;
    let workers = c.workers(3, "ts-pairs").await; // 9 sessions on 3 nodes
    let stacks: Vec<Stack> =
        (0..2).map(|i| Stack::new("ts-pairs", &i.to_string(), Layout::FOUR).unwrap()).collect();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (w, (mut s, mut cx)) in workers.into_iter().enumerate() {
        let stacks = stacks.clone();
        tasks.push(tokio::spawn(async move {
            let (mut pushed, mut popped) = (Vec::new(), Vec::new());
            for i in 0..PAIRS {
                let st = &stacks[(w + i) % stacks.len()];
                st.push(&mut s, &mut cx, &elem(w, i)).await.unwrap();
                pushed.push(elem(w, i));
                match st.pop(&mut s, &mut cx).await.unwrap() {
                    Some(v) => popped.push(v.to_vec()),
                    None => {
                        panic!("worker {w}: pop {i} right after its own push found the stack empty")
                    }
                }
            }
            (pushed, popped, cx.stats, s, cx)
        }));
    }
    let (mut pushed, mut popped, mut stats) = (Vec::new(), Vec::new(), Stats::default());
    let mut left = Vec::new();
    for t in tasks {
        let (pu, po, st, s, cx) = t.await.unwrap();
        pushed.extend(pu);
        popped.extend(po);
        stats.add(&st);
        left.push((s, cx));
    }
    eprintln!("{} pairs in {:?}; {stats:?}", pushed.len(), start.elapsed());
    // Every pair pushed one and popped one, so the stacks end empty.
    let (s, cx) = &mut left[0];
    for st in &stacks {
        assert_eq!(st.pop(s, cx).await.unwrap(), None, "stack ends empty");
    }
    assert_eq!(pushed.len(), popped.len());
    assert_eq!(multiset(popped.clone()).len(), popped.len(), "no element popped twice");
    assert_eq!(multiset(popped), multiset(pushed), "popped exactly what was pushed");
    drop(left);
    c.shutdown().await;
}

/// All sessions push concurrently, then all pop concurrently until empty; then a mixed phase
/// where some sessions push while others pop. Objects of 32 fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pushes_then_concurrent_pops_return_every_element_exactly_once() {
    const PER: usize = 12;
    let c = cluster().await;
    let workers = c.workers(2, "ts-phases").await; // 6 sessions
    let st = Stack::new("ts-phases", "s", Layout::THIRTY_TWO).unwrap();

    // Phase 1: concurrent pushes.
    let mut tasks = Vec::new();
    for (w, (mut s, mut cx)) in workers.into_iter().enumerate() {
        let st = st.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..PER {
                st.push(&mut s, &mut cx, &elem(w, i)).await.unwrap();
            }
            (s, cx)
        }));
    }
    let mut workers = Vec::new();
    for t in tasks {
        workers.push(t.await.unwrap());
    }
    let pushed: Vec<Vec<u8>> =
        (0..workers.len()).flat_map(|w| (0..PER).map(move |i| elem(w, i))).collect();

    // Phase 2: concurrent pops until empty.
    let mut tasks = Vec::new();
    for (mut s, mut cx) in workers {
        let st = st.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(v) = st.pop(&mut s, &mut cx).await.unwrap() {
                got.push(v.to_vec());
            }
            (got, s, cx)
        }));
    }
    let mut popped = Vec::new();
    let mut workers = Vec::new();
    for t in tasks {
        let (got, s, cx) = t.await.unwrap();
        // Within one session, elements of one pusher come out newest first (LIFO): the pops
        // are sequential and the pushes of one session were too.
        let mut last_seen = std::collections::HashMap::new();
        for v in &got {
            let (w, i) = common::parse_elem(v);
            if let Some(prev) = last_seen.insert(w, i) {
                assert!(
                    i < prev,
                    "one session popped {w}'s element {i} after its later element {prev}"
                );
            }
        }
        popped.extend(got);
        workers.push((s, cx));
    }
    assert_eq!(popped.len(), pushed.len(), "every element popped once");
    assert_eq!(multiset(popped), multiset(pushed.clone()));

    // Phase 3: half push, half pop, concurrently; then drain.
    let mut tasks = Vec::new();
    for (w, (mut s, mut cx)) in workers.into_iter().enumerate() {
        let st = st.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for i in 0..PER {
                if w % 2 == 0 {
                    st.push(&mut s, &mut cx, &elem(100 + w, i)).await.unwrap();
                } else if let Some(v) = st.pop(&mut s, &mut cx).await.unwrap() {
                    got.push(v.to_vec());
                }
            }
            (got, s, cx)
        }));
    }
    let mut popped = Vec::new();
    let mut workers = Vec::new();
    for t in tasks {
        let (got, s, cx) = t.await.unwrap();
        popped.extend(got);
        workers.push((s, cx));
    }
    let (s, cx) = &mut workers[0];
    while let Some(v) = st.pop(s, cx).await.unwrap() {
        popped.push(v.to_vec());
    }
    let pushed: Vec<Vec<u8>> = (0..workers.len())
        .filter(|w| w % 2 == 0)
        .flat_map(|w| (0..PER).map(move |i| elem(100 + w, i)))
        .collect();
    assert_eq!(
        multiset(popped),
        multiset(pushed),
        "mixed phase: every element popped exactly once"
    );
    drop(workers);
    c.shutdown().await;
}
