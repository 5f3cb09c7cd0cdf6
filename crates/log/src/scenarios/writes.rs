//! §5.1 write paths: sync, SyncRepl (§9.9 apply rule), immediate durability (G6).

use super::*;

#[test]
fn sync_mode_acks_only_after_a_majority_fsynced() {
    let mut c = Cluster::new(5, LogConfig::strong_zk());
    let l = c.elect();
    let t = c.write(l, "k", "v");
    while c.write_result(t).is_none() {
        c.run_for(Duration::from_micros(100));
    }
    let idx = c.write_result(t).unwrap().unwrap().index;
    assert!(
        c.durable_on(idx) >= 3,
        "acked with {} copies on disk",
        c.durable_on(idx)
    );
}

#[test]
fn syncrepl_acks_after_a_majority_holds_it_in_memory() {
    let mut c = Cluster::new(5, lazy(LogConfig::orca(Replication::SyncRepl)));
    let l = c.elect();
    let t = c.write(l, "k", "v");
    c.run_for(Duration::from_micros(600));
    assert!(c.write_result(t).is_none(), "not before a majority acked");
    c.run_ms(3);
    let idx = c.write_result(t).unwrap().unwrap().index;
    assert_eq!(c.durable_on(idx), 0, "SyncRepl persists lazily");
    let holders = (0..5)
        .filter(|&i| c.node(i).entries().iter().any(|e| e.index == idx))
        .count();
    assert!(holders >= 3);
}

#[test]
fn immediate_durability_write_is_durable_on_a_majority_when_acked() {
    let mut c = Cluster::new(5, lazy(orca()));
    let l = c.elect();
    let t = c.write_with(l, "k", WriteOp::Put(Bytes::from_static(b"v")), true);
    while c.write_result(t).is_none() {
        c.run_for(Duration::from_micros(100));
    }
    let idx = c.write_result(t).unwrap().unwrap().index;
    assert!(
        c.durable_on(idx) >= 4,
        "durable on every active-set member (G6)"
    );
}

#[test]
fn syncrepl_followers_apply_only_committed_or_flush_authorised_entries() {
    // §9.9: in SyncRepl mode a follower applies up to max(commit, flush_upto) it received.
    let mut c = Cluster::new(5, lazy(LogConfig::orca(Replication::SyncRepl)));
    let l = c.elect();
    let f = follower_in_as(&c, l);
    let t = c.write(l, "k", "v");
    c.run_for(Duration::from_micros(600)); // the entry reached the followers, no commit yet
    let idx = c.node(l).last_index();
    assert!(c.node(f).entries().iter().any(|e| e.index == idx));
    assert!(c.node(f).applied_index() < idx, "not applied before commit");
    c.run_ms(5);
    assert!(c.write_result(t).unwrap().is_ok());
    c.run_ms(60);
    assert_eq!(
        c.node(f).applied_index(),
        idx,
        "applied once the commit index arrived"
    );
    assert_clean(&c);
}
