//! Proptest strategies shared by the wire tests: the state a moved shard carries.

#![allow(dead_code)]

use bytes::Bytes;
use proptest::prelude::*;
use strata_wire::log::{
    ClientRecords, Completion, Expect, LogIndex, ShardMove, Snapshot, WriteOutcome,
};
use strata_wire::txn::{
    AbortReason, Decision, DecisionRecord, KairosKey, KairosPrepare, KairosRole, Lock, Prepare,
    Timestamp, TxnAction, TxnId, TxnObject, TxnOp, Vote,
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
        vote().prop_map(WriteOutcome::Voted),
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
        prop::collection::vec(lock(), 0..3),
        prop::collection::vec(decision_record(), 0..2),
        prop::collection::vec(kairos_key(), 0..3),
    )
        .prop_map(|(last_included, items, clients, expired, locks, decisions, kairos)| {
            Snapshot { last_included, items, clients, expired, locks, decisions, kairos }
        })
}

pub fn timestamp() -> impl Strategy<Value = Timestamp> {
    (any::<u64>(), any::<u32>()).prop_map(|(nanos, node)| Timestamp { nanos, node })
}

pub fn kairos_key() -> impl Strategy<Value = KairosKey> {
    (bytes(), timestamp(), timestamp(), proptest::option::of((txn_id(), timestamp()))).prop_map(
        |(key, latest_read, latest_committed, prepared_write)| KairosKey {
            key,
            latest_read,
            latest_committed,
            prepared_write,
        },
    )
}

pub fn kairos_prepare() -> impl Strategy<Value = KairosPrepare> {
    (
        timestamp(),
        proptest::option::of(timestamp()),
        any::<bool>(),
        prop::collection::vec(proptest::option::of(timestamp()), 0..3),
        prop_oneof![
            Just(KairosRole::Full),
            Just(KairosRole::Validate),
            Just(KairosRole::Replicate)
        ],
    )
        .prop_map(|(commit_ts, freshness, read_only, read_vts, role)| KairosPrepare {
            commit_ts,
            freshness,
            read_only,
            read_vts,
            role,
        })
}

pub fn txn_id() -> impl Strategy<Value = TxnId> {
    (any::<u64>(), any::<u64>()).prop_map(|(client_id, base)| TxnId { client_id, base })
}

pub fn objects() -> impl Strategy<Value = Vec<TxnObject>> {
    prop::collection::vec(
        ("[a-z]{1,6}", bytes(), any::<u64>()).prop_map(|(table, key, seq)| TxnObject {
            table,
            key,
            seq,
        }),
        0..3,
    )
}

pub fn action() -> impl Strategy<Value = TxnAction> {
    prop_oneof![Just(TxnAction::Read), bytes().prop_map(TxnAction::Write), Just(TxnAction::Delete)]
}

pub fn txn_ops() -> impl Strategy<Value = Vec<TxnOp>> {
    prop::collection::vec(
        (bytes(), any::<u64>(), proptest::option::of(expect()), action())
            .prop_map(|(key, seq, expect, action)| TxnOp { key, seq, expect, action }),
        0..3,
    )
}

pub fn vote() -> impl Strategy<Value = Vote> {
    prop_oneof![
        Just(Vote::Prepared),
        Just(Vote::Abort(AbortReason::Locked)),
        Just(Vote::Abort(AbortReason::Conflict)),
        Just(Vote::Abort(AbortReason::Recovered)),
        Just(Vote::Abort(AbortReason::Stale)),
        Just(Vote::Abort(AbortReason::PreparedConflict)),
        Just(Vote::Abort(AbortReason::ReadWriteConflict)),
        Just(Vote::Abort(AbortReason::WriteWriteConflict)),
        Just(Vote::Abort(AbortReason::TimestampOrder)),
        Just(Vote::Abort(AbortReason::TooOld)),
        Just(Vote::Abort(AbortReason::Refused)),
    ]
}

pub fn decision() -> impl Strategy<Value = Decision> {
    prop_oneof![Just(Decision::Commit), Just(Decision::Abort)]
}

pub fn lock() -> impl Strategy<Value = Lock> {
    (txn_id(), any::<u64>(), bytes(), action(), objects(), index())
        .prop_map(|(txn, seq, key, action, all, since)| Lock { txn, seq, key, action, all, since })
}

pub fn decision_record() -> impl Strategy<Value = DecisionRecord> {
    (txn_id(), objects(), decision()).prop_map(|(txn, all, decision)| DecisionRecord {
        txn,
        all,
        decision,
    })
}

pub fn prepare() -> impl Strategy<Value = Prepare> {
    (txn_id(), objects(), txn_ops(), any::<bool>(), proptest::option::of(kairos_prepare()))
        .prop_map(|(txn, all, ops, whole, kairos)| Prepare { txn, all, ops, whole, kairos })
}
