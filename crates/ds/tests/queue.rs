//! Michael-Scott queue against a real 3-node cluster: several clients (one per node), several
//! sessions each, running concurrently.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{cluster, elem, multiset, parse_elem};
use strata_ds::{Layout, Queue, Stats};

/// One completed dequeue: what it returned and when it ran (real time).
struct Deq {
    value: Vec<u8>,
    start: Instant,
    end: Instant,
}

/// FIFO per producer, against real time: if the dequeue of producer `p`'s element `j` returned
/// before the dequeue of `p`'s element `i` started, then `j` was enqueued first (`j < i`).
/// (Each producer enqueues in order from one session, so its enqueue order is `0, 1, 2, ...`.)
fn check_fifo_per_producer(deqs: &[Deq]) -> Result<(), String> {
    let mut by_producer: HashMap<usize, Vec<(usize, Instant, Instant)>> = HashMap::new();
    for d in deqs {
        let (p, i) = parse_elem(&d.value);
        by_producer.entry(p).or_default().push((i, d.start, d.end));
    }
    for (p, mut v) in by_producer {
        v.sort_by_key(|e| e.0);
        // For each element, the earliest end among the dequeues of *later* elements must not
        // precede its start.
        let mut min_end_after: Option<(usize, Instant)> = None;
        for &(i, start, end) in v.iter().rev() {
            if let Some((later, e)) = min_end_after {
                if e < start {
                    return Err(format!(
                        "producer {p}: element {later} was dequeued before the dequeue of the earlier element {i} began"
                    ));
                }
            }
            match min_end_after {
                Some((_, e)) if e <= end => {}
                _ => min_end_after = Some((i, end)),
            }
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_session_sees_fifo_order_and_an_empty_queue_dequeues_none() {
    let c = cluster().await;
    let mut w = c.workers(1, "q-seq").await;
    let (s, cx) = &mut w[0];
    for layout in [Layout::FOUR, Layout::THIRTY_TWO, Layout::new(1, 8)] {
        let q = Queue::new("q-seq", &format!("fifo-{}", layout.fields), layout).unwrap();
        assert_eq!(q.dequeue(s, cx).await.unwrap(), None, "a never-used queue is empty");
        for round in 0..2 {
            for i in 0..5 {
                q.enqueue(s, cx, &elem(round, i)).await.unwrap();
            }
            for i in 0..5 {
                assert_eq!(
                    q.dequeue(s, cx).await.unwrap().as_deref(),
                    Some(&elem(round, i)[..]),
                    "FIFO"
                );
            }
            assert_eq!(q.dequeue(s, cx).await.unwrap(), None, "empty again");
        }
    }
    assert!(cx.stats.alloc_reused > 0, "dequeued dummies are recycled: {:?}", cx.stats);
    drop(w);
    c.shutdown().await;
}

/// An enqueuer that links its object but stops before swinging the tail leaves the tail one
/// step behind; both the next enqueue (at another node) and a dequeue must help it forward.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_tail_is_helped_forward_by_enqueuers_and_dequeuers() {
    let c = cluster().await;
    let mut w = c.workers(1, "q-lag").await;
    let q = Queue::new("q-lag", "q", Layout::FOUR).unwrap();
    let (a, b) = w.split_at_mut(1);
    let ((sa, ca), (sb, cb)) = (&mut a[0], &mut b[0]);

    // Enqueue side: a lagging tail, then an enqueue elsewhere.
    q.enqueue_leaving_tail_behind(sa, ca, b"x").await.unwrap();
    q.enqueue(sb, cb, b"y").await.unwrap();
    assert!(cb.stats.helps >= 1, "the second enqueuer helped the tail: {:?}", cb.stats);
    assert_eq!(q.dequeue(sa, ca).await.unwrap().as_deref(), Some(&b"x"[..]));
    assert_eq!(q.dequeue(sb, cb).await.unwrap().as_deref(), Some(&b"y"[..]));
    assert_eq!(q.dequeue(sb, cb).await.unwrap(), None);

    // Dequeue side: the only element's enqueuer left the tail on the dummy; the dequeuer must
    // move the tail before the head, or the freed dummy would stay the tail.
    let before = cb.stats;
    q.enqueue_leaving_tail_behind(sa, ca, b"z").await.unwrap();
    assert_eq!(q.dequeue(sb, cb).await.unwrap().as_deref(), Some(&b"z"[..]));
    assert!(
        cb.stats.since(&before).helps >= 1,
        "the dequeuer helped the tail: {:?}",
        cb.stats.since(&before)
    );
    // The dequeuer recycles the old dummy in its next enqueue: had the head passed the tail,
    // the tail would now name a recycled object and the queue would wedge or lose elements.
    assert!(cb.free_objects() >= 1, "the old dummy is on top of the dequeuer's free list");
    let reuse = async {
        for i in 0..3 {
            q.enqueue(sb, cb, &elem(0, i)).await.unwrap();
            q.enqueue(sa, ca, &elem(1, i)).await.unwrap();
        }
        let mut got = Vec::new();
        while let Some(v) = q.dequeue(sa, ca).await.unwrap() {
            got.push(v.to_vec());
        }
        got
    };
    let got = tokio::time::timeout(Duration::from_secs(10), reuse).await.expect("the queue wedged");
    let want: Vec<Vec<u8>> = (0..3).flat_map(|i| [elem(0, i), elem(1, i)]).collect();
    assert_eq!(got, want);
    drop(w);
    c.shutdown().await;
}

/// The paper's workload: each session repeatedly enqueues a unique element and dequeues. A
/// dequeue right after one's own enqueue never finds the queue empty; every element is dequeued
/// exactly once; each producer's elements come out in its enqueue order (real-time check).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_enqueue_dequeue_pairs_never_find_the_queue_empty_and_keep_producer_order() {
    const PAIRS: usize = 60;
    let c = cluster().await;
    let workers = c.workers(3, "q-pairs").await; // 9 sessions
    let queues: Vec<Queue> =
        (0..2).map(|i| Queue::new("q-pairs", &i.to_string(), Layout::FOUR).unwrap()).collect();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (w, (mut s, mut cx)) in workers.into_iter().enumerate() {
        let queues = queues.clone();
        tasks.push(tokio::spawn(async move {
            let mut deqs = Vec::new();
            for i in 0..PAIRS {
                // One queue per producer keeps the per-producer FIFO check meaningful.
                let q = &queues[w % queues.len()];
                q.enqueue(&mut s, &mut cx, &elem(w, i)).await.unwrap();
                let t0 = Instant::now();
                let got = q.dequeue(&mut s, &mut cx).await.unwrap();
                let t1 = Instant::now();
                match got {
                    Some(v) => {
                        deqs.push((w % queues.len(), Deq { value: v.to_vec(), start: t0, end: t1 }))
                    }
                    None => panic!(
                        "worker {w}: dequeue {i} right after its own enqueue found the queue empty"
                    ),
                }
            }
            (deqs, cx.stats, s, cx)
        }));
    }
    let mut deqs: Vec<Vec<Deq>> = vec![Vec::new(), Vec::new()];
    let mut stats = Stats::default();
    let mut left = Vec::new();
    for t in tasks {
        let (d, st, s, cx) = t.await.unwrap();
        for (q, d) in d {
            deqs[q].push(d);
        }
        stats.add(&st);
        left.push((s, cx));
    }
    eprintln!("{} pairs in {:?}; {stats:?}", 9 * PAIRS, start.elapsed());
    let (s, cx) = &mut left[0];
    for q in &queues {
        assert_eq!(q.dequeue(s, cx).await.unwrap(), None, "queue ends empty");
    }
    let pushed: Vec<Vec<u8>> = (0..9).flat_map(|w| (0..PAIRS).map(move |i| elem(w, i))).collect();
    let popped: Vec<Vec<u8>> = deqs.iter().flatten().map(|d| d.value.clone()).collect();
    assert_eq!(multiset(popped.clone()).len(), popped.len(), "no element dequeued twice");
    assert_eq!(multiset(popped), multiset(pushed), "dequeued exactly what was enqueued");
    for (qi, d) in deqs.iter().enumerate() {
        for e in d {
            assert_eq!(parse_elem(&e.value).0 % 2, qi, "an element came out of another queue");
        }
        check_fifo_per_producer(d).unwrap();
    }
    drop(left);
    c.shutdown().await;
}

/// Separate producers and consumers on one queue (32-field objects): consumers race each
/// other and the producers; every element comes out once and in producer order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_producers_and_consumers_deliver_each_element_once_in_producer_order() {
    const PER_PRODUCER: usize = 30;
    const PRODUCERS: usize = 4;
    let c = cluster().await;
    let workers = c.workers(3, "q-pc").await; // 9 sessions: 4 producers, 5 consumers
    let q = Queue::new("q-pc", "q", Layout::THIRTY_TWO).unwrap();
    let total = PRODUCERS * PER_PRODUCER;
    let taken = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut tasks = Vec::new();
    for (w, (mut s, mut cx)) in workers.into_iter().enumerate() {
        let (q, taken) = (q.clone(), taken.clone());
        tasks.push(tokio::spawn(async move {
            let mut deqs = Vec::new();
            if w < PRODUCERS {
                for i in 0..PER_PRODUCER {
                    q.enqueue(&mut s, &mut cx, &elem(w, i)).await.unwrap();
                }
            } else {
                while taken.load(Ordering::SeqCst) < total {
                    assert!(
                        Instant::now() < deadline,
                        "consumers starved: {} of {total}",
                        taken.load(Ordering::SeqCst)
                    );
                    let t0 = Instant::now();
                    match q.dequeue(&mut s, &mut cx).await.unwrap() {
                        Some(v) => {
                            deqs.push(Deq { value: v.to_vec(), start: t0, end: Instant::now() });
                            taken.fetch_add(1, Ordering::SeqCst);
                        }
                        None => tokio::time::sleep(Duration::from_millis(1)).await,
                    }
                }
            }
            (deqs, s, cx)
        }));
    }
    let mut deqs = Vec::new();
    let mut left = Vec::new();
    for t in tasks {
        let (d, s, cx) = t.await.unwrap();
        deqs.extend(d);
        left.push((s, cx));
    }
    let (s, cx) = &mut left[0];
    assert_eq!(q.dequeue(s, cx).await.unwrap(), None, "nothing left over");
    let pushed: Vec<Vec<u8>> =
        (0..PRODUCERS).flat_map(|w| (0..PER_PRODUCER).map(move |i| elem(w, i))).collect();
    let popped: Vec<Vec<u8>> = deqs.iter().map(|d| d.value.clone()).collect();
    assert_eq!(popped.len(), total, "each element dequeued once");
    assert_eq!(multiset(popped), multiset(pushed));
    check_fifo_per_producer(&deqs).unwrap();
    drop(left);
    c.shutdown().await;
}

/// The checker itself: a history with a producer-order inversion is rejected, overlapping
/// dequeues are not.
#[test]
fn the_fifo_check_rejects_an_inversion() {
    let t = Instant::now();
    let ms = |n| t + Duration::from_millis(n);
    let inverted = [
        Deq { value: elem(1, 1), start: ms(0), end: ms(1) },
        Deq { value: elem(1, 0), start: ms(2), end: ms(3) },
    ];
    assert!(check_fifo_per_producer(&inverted).unwrap_err().contains("dequeued before"));
    let overlapping = [
        Deq { value: elem(1, 1), start: ms(0), end: ms(2) },
        Deq { value: elem(1, 0), start: ms(1), end: ms(3) },
    ];
    assert_eq!(check_fifo_per_producer(&overlapping), Ok(()));
}
