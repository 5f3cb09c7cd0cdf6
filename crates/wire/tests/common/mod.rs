//! Proptest strategies shared by the wire tests: the state a moved shard carries.

#![allow(dead_code)]

use bytes::Bytes;
use proptest::prelude::*;
use strata_wire::log::{ClientRecords, LogIndex, ShardMove, Snapshot};
use strata_wire::NodeId;

fn bytes() -> impl Strategy<Value = Bytes> {
    prop::collection::vec(any::<u8>(), 0..24).prop_map(Bytes::from)
}

fn index() -> impl Strategy<Value = LogIndex> {
    (any::<u32>(), any::<u32>()).prop_map(|(epoch, counter)| LogIndex { epoch, counter })
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
    let client = (any::<u64>(), any::<u64>(), prop::collection::vec((any::<u64>(), index()), 0..3))
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
