//! The structures with one slow, lossy replica: its local copy lags behind, so relaxed reads
//! there return stale pointers, weak CAS fails locally more often, and releases/RMWs elsewhere
//! may time out waiting for its acknowledgements (Kite's slow path). Correctness must not
//! depend on any of that.

mod common;

use std::sync::Arc;
use std::time::Instant;

use common::{cluster, elem, multiset};
use strata_client::{LinkFault, NodeId};
use strata_ds::{run_workload, Budget, DsKind, Layout, List, Queue, Stack, Stats, Workload};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structures_stay_correct_when_one_replica_is_slow_and_lossy() {
    let c = cluster().await;
    // Links into node 2 are slow, jittery and lossy; its own outbound links lose messages too.
    let slow_in =
        LinkFault { delay_us: 2_000, jitter_us: 4_000, loss_ppm: 20_000, partitioned: false };
    c.clients[0].set_fault(Some(NodeId(2)), slow_in).await.unwrap();
    c.clients[1].set_fault(Some(NodeId(2)), slow_in).await.unwrap();
    c.clients[2]
        .set_fault(None, LinkFault { loss_ppm: 20_000, ..LinkFault::default() })
        .await
        .unwrap();

    // The paper's pairs, every kind, sessions on all three nodes, two structures each.
    for kind in DsKind::ALL {
        let root = format!("f-{kind}");
        let w = Arc::new(Workload::new(kind, &root, 2, Layout::FOUR).unwrap());
        let start = Instant::now();
        let mut tasks = Vec::new();
        for (i, (mut s, mut cx)) in c.workers(2, &root).await.into_iter().enumerate() {
            let w = w.clone();
            tasks.push(tokio::spawn(async move {
                let r = run_workload(&w, &mut s, &mut cx, 7 + i as u64, &Budget::pairs(15))
                    .await
                    .unwrap();
                (r, s, cx)
            }));
        }
        let mut stats = Stats::default();
        let mut left = Vec::new();
        for t in tasks {
            let (r, s, cx) = t.await.unwrap();
            assert_eq!(r.pairs, 15);
            stats.add(&r.stats);
            left.push((s, cx));
        }
        eprintln!("{kind}: 90 pairs with a slow replica in {:?}; {stats:?}", start.elapsed());
        // Checked from the slow node's session (worker 2 is on node 2).
        let (s, cx) = &mut left[2];
        for i in 0..2 {
            let name = i.to_string();
            match kind {
                DsKind::Stack => assert_eq!(
                    Stack::new(&root, &name, Layout::FOUR).unwrap().pop(s, cx).await.unwrap(),
                    None
                ),
                DsKind::Queue => assert_eq!(
                    Queue::new(&root, &name, Layout::FOUR).unwrap().dequeue(s, cx).await.unwrap(),
                    None
                ),
                DsKind::List => assert_eq!(
                    List::new(&root, &name, Layout::FOUR).unwrap().scan(s, cx).await.unwrap(),
                    vec![]
                ),
            }
        }
    }

    // Exactly-once delivery through a stack and a queue shared by all nodes.
    let st = Stack::new("f-once", "s", Layout::FOUR).unwrap();
    let q = Queue::new("f-once", "q", Layout::FOUR).unwrap();
    let mut tasks = Vec::new();
    for (w, (mut s, mut cx)) in c.workers(2, "f-once").await.into_iter().enumerate() {
        let (st, q) = (st.clone(), q.clone());
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for i in 0..10 {
                st.push(&mut s, &mut cx, &elem(w, i)).await.unwrap();
                q.enqueue(&mut s, &mut cx, &elem(w, i)).await.unwrap();
                got.push(
                    st.pop(&mut s, &mut cx)
                        .await
                        .unwrap()
                        .expect("stack empty after own push")
                        .to_vec(),
                );
                got.push(
                    q.dequeue(&mut s, &mut cx)
                        .await
                        .unwrap()
                        .expect("queue empty after own enqueue")
                        .to_vec(),
                );
            }
            got
        }));
    }
    let mut got = Vec::new();
    for t in tasks {
        got.extend(t.await.unwrap());
    }
    let sent: Vec<Vec<u8>> =
        (0..6).flat_map(|w| (0..10).flat_map(move |i| [elem(w, i), elem(w, i)])).collect();
    assert_eq!(multiset(got), multiset(sent), "each element came out once from each structure");

    for cl in &c.clients {
        cl.set_fault(None, LinkFault::default()).await.unwrap();
    }
    c.shutdown().await;
}
