use std::collections::BTreeMap;

use bytes::Bytes;
use proptest::prelude::*;
use strata_log::{HardState, LogEntry, LogIndex, LogOp, Persist, RecoveredState};
use strata_storage::{MetaStore, SimBackend, Wal, WalConfig};
use strata_wire::{Encode, NodeId};

use crate::legacy::read_replica_dir;
use crate::record::encode_hard_state;
use crate::{NodeStore, ShardTag, StoreError};

fn entry(epoch: u32, counter: u32, v: &str) -> LogEntry {
    LogEntry {
        index: LogIndex::new(epoch, counter),
        key: Bytes::from_static(b"k"),
        op: LogOp::Put(Bytes::copy_from_slice(v.as_bytes())),
        client_id: 1,
        seq: u64::from(counter),
        ack: 0,
        immediate: false,
    }
}

fn open(disk: &SimBackend) -> NodeStore<SimBackend> {
    NodeStore::open(disk.clone(), WalConfig::default()).expect("open").0
}

fn indexes(state: &RecoveredState) -> Vec<LogIndex> {
    state.entries.iter().map(|e| e.index).collect()
}

fn tag(shard: u32) -> ShardTag {
    ShardTag::new("t", shard, 0)
}

#[test]
fn synced_entries_and_hard_state_of_every_replica_survive_a_crash_and_unsynced_ones_do_not() {
    let disk = SimBackend::new();
    let mut s = open(&disk);
    let (a, b) = (tag(0), tag(1));
    assert_eq!(s.open_shard(&a).unwrap(), RecoveredState::default());
    assert_eq!(s.open_shard(&b).unwrap(), RecoveredState::default());
    let hs = HardState { epoch: 2, voted_for: Some(NodeId(1)) };
    assert_eq!(s.execute(&a, [(1, Persist::HardState(hs))]).unwrap(), Some(1));
    let appended = [(2, Persist::Append(vec![entry(2, 1, "a"), entry(2, 2, "b")]))];
    assert_eq!(s.execute(&a, appended).unwrap(), None);
    assert_eq!(
        s.execute(&a, [(3, Persist::Sync), (4, Persist::Append(vec![entry(2, 3, "c")]))]).unwrap(),
        Some(3)
    );
    s.execute(&b, [(1, Persist::Append(vec![entry(1, 1, "b-lost")]))]).unwrap();
    drop(s);
    disk.crash();
    let mut s = open(&disk);
    let got = s.open_shard(&a).unwrap();
    assert_eq!(got.hard_state, hs);
    assert_eq!(indexes(&got), [LogIndex::new(2, 1), LogIndex::new(2, 2), LogIndex::new(2, 3)]);
    assert_eq!(got.entries[1], entry(2, 2, "b"));
    assert_eq!(s.open_shard(&b).unwrap(), RecoveredState::default(), "b never synced");
}

#[test]
fn one_flush_persists_every_replicas_staged_batch_with_one_sync() {
    let disk = SimBackend::new();
    let mut s = open(&disk);
    let tags: Vec<_> = (0..5).map(tag).collect();
    for t in &tags {
        s.open_shard(t).unwrap();
    }
    let before = disk.stats();
    for (i, t) in tags.iter().enumerate() {
        let batch = [(7, Persist::Append(vec![entry(1, 1, &format!("v{i}"))])), (8, Persist::Sync)];
        assert_eq!(s.stage(t, batch).unwrap(), Some(8));
    }
    assert_eq!(disk.stats(), before, "staging does no IO");
    s.flush().unwrap();
    let after = disk.stats();
    assert_eq!(after.file_syncs - before.file_syncs, 1, "one sync for five replicas");
    drop(s);
    disk.crash();
    let mut s = open(&disk);
    for (i, t) in tags.iter().enumerate() {
        assert_eq!(s.open_shard(t).unwrap().entries, [entry(1, 1, &format!("v{i}"))]);
    }
}

#[test]
fn truncation_is_a_record_that_survives_restarts_across_epochs() {
    let disk = SimBackend::new();
    let mut s = open(&disk);
    let (a, b) = (tag(0), tag(1));
    s.open_shard(&a).unwrap();
    s.open_shard(&b).unwrap();
    let es = vec![entry(1, 1, "a"), entry(1, 2, "b"), entry(1, 3, "c")];
    s.execute(&a, [(1, Persist::Append(es.clone())), (2, Persist::Sync)]).unwrap();
    s.execute(&b, [(1, Persist::Append(es)), (2, Persist::Sync)]).unwrap();
    // a's new leader diverges after (1,1): drop (1,2), (1,3) and continue in epoch 3.
    s.execute(
        &a,
        [
            (3, Persist::Truncate { after: LogIndex::new(1, 1) }),
            (4, Persist::Append(vec![entry(3, 1, "x")])),
            (5, Persist::Sync),
        ],
    )
    .unwrap();
    drop(s);
    disk.crash();
    let mut s = open(&disk);
    assert_eq!(indexes(&s.open_shard(&a).unwrap()), [LogIndex::new(1, 1), LogIndex::new(3, 1)]);
    assert_eq!(indexes(&s.open_shard(&b).unwrap()).len(), 3, "b's log is its own");
    // Truncating after a restart, of entries written before and after it.
    s.execute(&a, [(1, Persist::Append(vec![entry(3, 2, "y"), entry(3, 3, "z")]))]).unwrap();
    s.execute(&a, [(2, Persist::Truncate { after: LogIndex::new(3, 2) }), (3, Persist::Sync)])
        .unwrap();
    drop(s);
    let mut s = open(&disk);
    let got = s.open_shard(&a).unwrap();
    assert_eq!(indexes(&got), [LogIndex::new(1, 1), LogIndex::new(3, 1), LogIndex::new(3, 2)]);
}

#[test]
fn a_removed_replica_comes_back_empty_and_an_installed_one_replaces_what_was_there() {
    let disk = SimBackend::new();
    let mut s = open(&disk);
    let (a, b) = (tag(0), tag(1));
    for t in [&a, &b] {
        s.open_shard(t).unwrap();
        let batch = [(1, Persist::Append(vec![entry(1, 1, "old")])), (2, Persist::Sync)];
        s.execute(t, batch).unwrap();
    }
    s.remove_shard(&a).unwrap();
    let installed = RecoveredState {
        hard_state: HardState { epoch: 4, voted_for: None },
        snapshot: None,
        entries: vec![entry(4, 1, "install")],
    };
    assert_eq!(s.install_shard(&b, installed.clone()).unwrap(), installed);
    // The installed replica continues after its first entry.
    s.execute(&b, [(3, Persist::Append(vec![entry(4, 2, "next")])), (4, Persist::Sync)]).unwrap();
    drop(s);
    disk.crash();
    let mut s = open(&disk);
    assert_eq!(s.unopened().count(), 1, "only b is left");
    assert_eq!(s.open_shard(&a).unwrap(), RecoveredState::default());
    let got = s.open_shard(&b).unwrap();
    assert_eq!(got.hard_state, installed.hard_state);
    assert_eq!(indexes(&got), [LogIndex::new(4, 1), LogIndex::new(4, 2)]);
}

#[test]
fn a_replica_closed_and_reopened_in_the_same_run_gets_what_it_wrote_since_the_log_was_read() {
    let disk = SimBackend::new();
    let mut s = open(&disk);
    let (a, b) = (tag(0), tag(1));
    s.open_shard(&a).unwrap();
    s.open_shard(&b).unwrap();
    s.execute(&a, [(1, Persist::Append(vec![entry(1, 1, "a")])), (2, Persist::Sync)]).unwrap();
    s.stage(&a, [(3, Persist::Append(vec![entry(1, 2, "staged")]))]).unwrap();
    s.close_shard(&a);
    assert!(matches!(s.stage(&a, [(4, Persist::Sync)]), Err(StoreError::NotOpen(_))));
    s.execute(&b, [(1, Persist::Append(vec![entry(1, 1, "b")])), (2, Persist::Sync)]).unwrap();
    let got = s.open_shard(&a).unwrap();
    assert_eq!(indexes(&got), [LogIndex::new(1, 1), LogIndex::new(1, 2)], "staged, then flushed");
    // b stays open and keeps writing through the reread log.
    s.execute(&b, [(3, Persist::Append(vec![entry(1, 2, "b2")])), (4, Persist::Sync)]).unwrap();
    drop(s);
    let mut s = open(&disk);
    assert_eq!(indexes(&s.open_shard(&b).unwrap()), [LogIndex::new(1, 1), LogIndex::new(1, 2)]);
}

#[test]
fn an_entry_that_does_not_follow_its_replicas_log_is_corruption() {
    let disk = SimBackend::new();
    let mut s = open(&disk);
    let a = tag(0);
    s.open_shard(&a).unwrap();
    s.execute(&a, [(1, Persist::Append(vec![entry(2, 1, "a")])), (2, Persist::Sync)]).unwrap();
    drop(s);
    // Another writer (not this store, which asserts) puts an older entry after it.
    let (mut wal, _) = Wal::open(disk.clone(), WalConfig::default()).unwrap();
    let mut out = bytes::BytesMut::new();
    crate::Record::Entry(entry(1, 5, "older")).encode(&a, &mut out);
    wal.append(&out).unwrap();
    wal.flush().unwrap();
    drop(wal);
    let err = NodeStore::open(disk.clone(), WalConfig::default()).err().expect("refused");
    assert!(err.to_string().contains("follows entry"), "{err}");
}

#[test]
fn a_replica_directory_of_an_earlier_version_is_read_back_for_import() {
    let old = SimBackend::new();
    let (mut wal, _) = Wal::open(old.clone(), WalConfig::default()).unwrap();
    let mut buf = bytes::BytesMut::new();
    for e in [entry(1, 1, "a"), entry(1, 2, "b")] {
        buf.clear();
        e.encode(&mut buf);
        wal.append(&buf).unwrap();
    }
    wal.flush().unwrap();
    let hs = HardState { epoch: 1, voted_for: Some(NodeId(3)) };
    MetaStore::new(old.clone()).store(&encode_hard_state(hs)).unwrap();
    let (state, _) = read_replica_dir(old).unwrap();
    assert_eq!(state.hard_state, hs);
    assert_eq!(state.entries, [entry(1, 1, "a"), entry(1, 2, "b")]);
    let disk = SimBackend::new();
    let mut s = open(&disk);
    s.install_shard(&tag(0), state.clone()).unwrap();
    drop(s);
    disk.crash();
    assert_eq!(open(&disk).open_shard(&tag(0)).unwrap(), state);
}

/// One step of the model test: a replica's batch, a flush, or a crash.
#[derive(Clone, Debug)]
enum Step {
    Append { shard: u32, count: u32 },
    Truncate { shard: u32, back: u32 },
    Vote { shard: u32 },
    Sync { shard: u32 },
    FlushAll,
    Remove { shard: u32 },
    Crash { torn: Option<u64> },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..3u32, 1..4u32).prop_map(|(shard, count)| Step::Append { shard, count }),
        1 => (0..3u32, 0..4u32).prop_map(|(shard, back)| Step::Truncate { shard, back }),
        1 => (0..3u32).prop_map(|shard| Step::Vote { shard }),
        3 => (0..3u32).prop_map(|shard| Step::Sync { shard }),
        1 => Just(Step::FlushAll),
        1 => (0..3u32).prop_map(|shard| Step::Remove { shard }),
        1 => proptest::option::of(any::<u64>()).prop_map(|torn| Step::Crash { torn }),
    ]
}

/// A replica as the model sees it: what it holds, and the prefix of it that must be durable.
#[derive(Clone, Default)]
struct Model {
    held: RecoveredState,
    durable: RecoveredState,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Random batches of three replicas, flushes, removals and crashes (torn or not): after
    /// every crash each replica recovers exactly what the last flush made durable of it (its
    /// staged records never reached the disk), hard state included.
    #[test]
    fn every_replica_recovers_what_was_flushed(steps in proptest::collection::vec(step(), 1..60)) {
        let disk = SimBackend::new();
        let config = WalConfig { segment_bytes: 512, preallocate_bytes: 128, ..WalConfig::default() };
        let mut store = NodeStore::open(disk.clone(), config.clone()).unwrap().0;
        let mut models: BTreeMap<u32, Model> = BTreeMap::new();
        for shard in 0..3 {
            store.open_shard(&tag(shard)).unwrap();
            models.insert(shard, Model::default());
        }
        let mut epoch = 1;
        for step in steps {
            match step {
                Step::Append { shard, count } => {
                    let m = models.get_mut(&shard).unwrap();
                    let last = m.held.entries.last().map_or(LogIndex::new(epoch, 0), |e| e.index);
                    let start = if last.epoch == epoch { last.counter } else { 0 };
                    let es: Vec<_> = (1..=count).map(|c| entry(epoch, start + c, "v")).collect();
                    m.held.entries.extend(es.iter().cloned());
                    store.stage(&tag(shard), [(0, Persist::Append(es))]).unwrap();
                }
                Step::Truncate { shard, back } => {
                    let m = models.get_mut(&shard).unwrap();
                    let keep = m.held.entries.len().saturating_sub(back as usize);
                    let after = keep.checked_sub(1).map_or(LogIndex::ZERO, |i| m.held.entries[i].index);
                    m.held.entries.truncate(keep);
                    // A new leader's entries come in a later epoch.
                    epoch += 1;
                    store.stage(&tag(shard), [(0, Persist::Truncate { after })]).unwrap();
                }
                Step::Vote { shard } => {
                    epoch += 1;
                    let hs = HardState { epoch, voted_for: Some(NodeId(shard)) };
                    models.get_mut(&shard).unwrap().held.hard_state = hs;
                    let barrier = store.execute(&tag(shard), [(1, Persist::HardState(hs))]).unwrap();
                    prop_assert_eq!(barrier, Some(1));
                    for m in models.values_mut() {
                        m.durable = m.held.clone();
                    }
                }
                Step::Sync { shard } => {
                    store.execute(&tag(shard), [(1, Persist::Sync)]).unwrap();
                    for m in models.values_mut() {
                        m.durable = m.held.clone();
                    }
                }
                Step::FlushAll => {
                    store.flush().unwrap();
                    for m in models.values_mut() {
                        m.durable = m.held.clone();
                    }
                }
                Step::Remove { shard } => {
                    store.remove_shard(&tag(shard)).unwrap();
                    for m in models.values_mut() {
                        m.durable = m.held.clone();
                    }
                    *models.get_mut(&shard).unwrap() = Model::default();
                    store.open_shard(&tag(shard)).unwrap();
                }
                Step::Crash { torn } => {
                    drop(store);
                    match torn {
                        Some(seed) => disk.crash_torn(seed),
                        None => disk.crash(),
                    }
                    store = NodeStore::open(disk.clone(), config.clone()).unwrap().0;
                    for (shard, m) in models.iter_mut() {
                        let got = store.open_shard(&tag(*shard)).unwrap();
                        prop_assert_eq!(got.hard_state, m.durable.hard_state);
                        prop_assert_eq!(&got.entries, &m.durable.entries, "shard {}", shard);
                        m.held = got;
                    }
                }
            }
        }
    }
}
