//! Proptest strategies shared by the wire tests: the state a moved shard carries.

#![allow(dead_code)]

use bytes::Bytes;
use proptest::prelude::*;
use strata_wire::log::{
    ClientRecords, Completion, Expect, LogIndex, ShardMove, Snapshot, WriteOutcome,
};
use strata_wire::NodeId;

fn bytes() -> impl Strategy<Value = Bytes> {
    prop::collection::vec(any::<u8>(), 0..24).prop_map(Bytes::from)
}

fn index() -> impl Strategy<Value = LogIndex> {
    (any::<u32>(), any::<u32>()).prop_map(|(epoch, counter)| LogIndex { epoch, counter })
}

pub fn expect() -> impl Strategy<Value = Expect> {
    prop_oneof![
        Just(Expect::Absent),
        bytes().prop_map(Expect::Value),
        index().prop_map(Expect::Version)
    ]
}

pub fn outcome() -> impl Strategy<Value = WriteOutcome> {
    prop_oneof![
        Just(WriteOutcome::Done),
        index().prop_map(|current| WriteOutcome::Rejected { current }),
        any::<u64>().prop_map(|old| WriteOutcome::Added { old }),
        Just(WriteOutcome::NotCounter),
        Just(WriteOutcome::OutOfRange),
    ]
}

pub fn nodes() -> impl Strategy<Value = Vec<NodeId>> {
    prop::collection::vec(any::<u32>().prop_map(NodeId), 0..4)
}

pub fn shard_move() -> impl Strategy<Value = ShardMove> {
    (any::<u32>(), nodes()).prop_map(|(generation, replicas)| ShardMove { generation, replicas })
}

/// A shard's state as a moved shard carries it: items (tombstones too), records, watermarks.
pub fn snapshot() -> impl Strategy<Value = Snapshot> {
    let item = (bytes(), proptest::option::of(bytes()), index());
    let record = (index(), outcome()).prop_map(|(index, outcome)| Completion { index, outcome });
    let client = (any::<u64>(), any::<u64>(), prop::collection::vec((any::<u64>(), record), 0..3))
        .prop_map(|(client_id, ack, records)| ClientRecords { client_id, ack, records });
    (
        index(),
        prop::collection::vec(item, 0..3),
        prop::collection::vec(client, 0..3),
        prop::collection::vec(any::<u64>(), 0..3),
    )
        .prop_map(|(last_included, items, clients, expired)| Snapshot {
            last_included,
            items,
            clients,
            expired,
        })
}
