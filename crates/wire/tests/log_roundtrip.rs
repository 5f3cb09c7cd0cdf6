//! Property tests of the log engine's messages (`strata_wire::log`): every message survives
//! encode → frame → decode unchanged, and hostile bytes are rejected with an error, never a panic.

mod common;

use bytes::{Bytes, BytesMut};
use common::{decision, decision_record, expect, nodes, prepare, shard_move, snapshot, txn_id};
use proptest::prelude::*;
use strata_wire::log::{
    AppendAck, AppendEntries, ForwardRead, Grant, LogEntry, LogIndex, LogMessage, LogOp, ReadError,
    ReadRelay, ReadValue, Snapshot, APPEND_ENTRIES_OVERHEAD_BYTES,
};
use strata_wire::peer::PeerMessage;
use strata_wire::{
    decode_frame, decode_message, encode_frame, ClusterId, DecodeError, NodeId, Reader,
};

const CLUSTER: ClusterId = ClusterId(0x10c);
const MAX_FRAME: usize = 1 << 20;

fn bytes() -> impl Strategy<Value = Bytes> {
    prop::collection::vec(any::<u8>(), 0..32).prop_map(Bytes::from)
}

fn index() -> impl Strategy<Value = LogIndex> {
    (any::<u32>(), any::<u32>()).prop_map(|(epoch, counter)| LogIndex { epoch, counter })
}

fn entry() -> impl Strategy<Value = LogEntry> {
    let op = prop_oneof![
        bytes().prop_map(LogOp::Put),
        Just(LogOp::Delete),
        Just(LogOp::NoOp),
        prop::collection::vec(any::<u64>(), 0..4).prop_map(LogOp::Expire),
        shard_move().prop_map(LogOp::Freeze),
        snapshot().prop_map(|s| LogOp::Install(Box::new(s))),
        (expect(), proptest::option::of(bytes()))
            .prop_map(|(expect, put)| LogOp::Cond { expect, put }),
        any::<i64>().prop_map(LogOp::Add),
        prepare().prop_map(|p| LogOp::Prepare(Box::new(p))),
        (txn_id(), decision(), prop::collection::vec(any::<u64>(), 0..3))
            .prop_map(|(txn, decision, seqs)| LogOp::Decide { txn, decision, seqs }),
        (txn_id(), prop::collection::vec(any::<u64>(), 0..3))
            .prop_map(|(txn, seqs)| LogOp::RequestAbort { txn, seqs }),
        decision_record().prop_map(|d| LogOp::Decided(Box::new(d))),
        txn_id().prop_map(LogOp::Resolved),
    ];
    (index(), bytes(), op, any::<u64>(), any::<u64>(), any::<u64>(), any::<bool>()).prop_map(
        |(index, key, op, client_id, seq, ack, immediate)| LogEntry {
            index,
            key,
            op,
            client_id,
            seq,
            ack,
            immediate,
        },
    )
}

fn grant() -> impl Strategy<Value = Grant> {
    (any::<bool>(), proptest::option::of(any::<u64>()), proptest::option::of(any::<u64>()))
        .prop_map(|(member, echo_ts, revoke_echo)| Grant { member, echo_ts, revoke_echo })
}

fn read_result() -> impl Strategy<Value = Result<ReadValue, ReadError>> {
    prop_oneof![
        (
            proptest::option::of(bytes()),
            index(),
            any::<u32>(),
            any::<u32>(),
            common::timestamp(),
            proptest::option::of(any::<u64>())
        )
            .prop_map(|(value, update_index, n, epoch, vts, w_mean_ns)| Ok(ReadValue {
                value,
                update_index,
                served_by: NodeId(n),
                epoch,
                vts,
                w_mean_ns
            })),
        proptest::option::of(any::<u32>().prop_map(NodeId))
            .prop_map(|hint| Err(ReadError::NotLeader { hint })),
        Just(Err(ReadError::NotInActiveSet)),
        Just(Err(ReadError::Timeout)),
        Just(Err(ReadError::Unavailable)),
        nodes().prop_map(|replicas| Err(ReadError::Moved { replicas })),
    ]
}

fn append_entries() -> impl Strategy<Value = LogMessage> {
    (
        any::<u32>(),
        index(),
        prop::collection::vec(entry(), 0..4),
        (index(), index(), proptest::option::of(index())),
        proptest::option::of(any::<u64>()),
        any::<u64>(),
        grant(),
    )
        .prop_map(
            |(
                epoch,
                prev_index,
                entries,
                (commit_index, durable_index, flush_upto),
                round_id,
                hb_round,
                grant,
            )| {
                LogMessage::AppendEntries(AppendEntries {
                    epoch,
                    prev_index,
                    entries,
                    commit_index,
                    durable_index,
                    flush_upto,
                    round_id,
                    hb_round,
                    grant,
                })
            },
        )
}

fn append_ack() -> impl Strategy<Value = LogMessage> {
    (
        any::<u32>(),
        any::<bool>(),
        (index(), index(), index(), index()),
        any::<u64>(),
        proptest::option::of(any::<u64>()),
        any::<u64>(),
        any::<bool>(),
        proptest::option::of(any::<u64>()),
    )
        .prop_map(
            |(
                epoch,
                success,
                (last_index, match_index, persisted_index, applied_index),
                hb_round,
                round_id,
                f_ts,
                serving,
                revoke_ack,
            )| {
                LogMessage::AppendAck(AppendAck {
                    epoch,
                    success,
                    last_index,
                    match_index,
                    persisted_index,
                    applied_index,
                    hb_round,
                    round_id,
                    f_ts,
                    serving,
                    revoke_ack,
                })
            },
        )
}

fn log_message() -> impl Strategy<Value = LogMessage> {
    prop_oneof![
        append_entries(),
        append_ack(),
        (any::<u32>(), any::<u64>(), bytes(), proptest::option::of(index())).prop_map(
            |(epoch, fwd_id, key, min_index)| LogMessage::ForwardRead(ForwardRead {
                epoch,
                fwd_id,
                key,
                min_index
            })
        ),
        (any::<u32>(), any::<u64>(), read_result()).prop_map(|(epoch, fwd_id, result)| {
            LogMessage::ReadRelay(ReadRelay { epoch, fwd_id, result })
        }),
        (any::<u32>(), index())
            .prop_map(|(epoch, last_index)| LogMessage::RequestVote { epoch, last_index }),
        (any::<u32>(), any::<bool>())
            .prop_map(|(epoch, granted)| LogMessage::VoteResp { epoch, granted }),
    ]
}

proptest! {
    #[test]
    fn log_messages_round_trip(msg in log_message()) {
        let mut buf = BytesMut::new();
        encode_frame(&mut buf, CLUSTER, &msg);
        let payload = decode_frame(&mut buf, CLUSTER, MAX_FRAME).unwrap().expect("a whole frame");
        prop_assert!(buf.is_empty());
        prop_assert_eq!(decode_message::<LogMessage>(payload).unwrap(), msg);
    }

    /// A log entry is also what a driver writes to its log file: it round-trips on its own.
    #[test]
    fn log_entries_round_trip(e in entry()) {
        let mut buf = BytesMut::new();
        strata_wire::Encode::encode(&e, &mut buf);
        prop_assert_eq!(e.encoded_len(), buf.len(), "encoded_len is exact");
        prop_assert_eq!(decode_message::<LogEntry>(buf.freeze()).unwrap(), e);
    }

    /// An `Install` entry written before completion records carried outcomes (tag 5, no
    /// outcome section) still decodes, every record `Done`: a log written by an older node
    /// replays.
    #[test]
    fn an_install_entry_of_the_older_format_decodes_with_done_outcomes(s in snapshot(), key in bytes()) {
        use strata_wire::log::{Completion, WriteOutcome};
        let s = Snapshot { kairos: Vec::new(), ..s }; // older than Kairos too
        let e = LogEntry { index: LogIndex::new(1, 1), key, op: LogOp::Install(Box::new(s.clone())), client_id: 0, seq: 0, ack: 0, immediate: true };
        let mut buf = BytesMut::new();
        strata_wire::Encode::encode(&e, &mut buf);
        // Rewrite it as the older format: tag 5 and no outcome section.
        let tag_at = 8 + 4 + e.key.len();
        let txn_len = {
            let mut b = BytesMut::new();
            strata_wire::codec::put_seq(&mut b, &s.locks, |o, l| strata_wire::Encode::encode(l, o));
            strata_wire::codec::put_seq(&mut b, &s.decisions, |o, d| strata_wire::Encode::encode(d, o));
            b.len()
        };
        let sections: usize = 4 + s.clients.iter().map(|c| 4 + c.records.iter().map(|(_, r)| r.outcome.encoded_len()).sum::<usize>()).sum::<usize>() + txn_len;
        let fixed_tail = 8 + 8 + 8 + 1;
        let mut old = buf.to_vec();
        old[tag_at] = 5;
        old.drain(old.len() - fixed_tail - sections..old.len() - fixed_tail);
        let back = decode_message::<LogEntry>(Bytes::from(old)).unwrap();
        let mut done = s;
        done.clients.iter_mut().flat_map(|c| c.records.iter_mut()).for_each(|(_, r)| *r = Completion { index: r.index, outcome: WriteOutcome::Done });
        done.locks.clear();
        done.decisions.clear();
        prop_assert_eq!(back.op, LogOp::Install(Box::new(done)));
    }

    /// A leader sizes its batches with `encoded_len` and `APPEND_ENTRIES_OVERHEAD_BYTES`: the
    /// whole peer frame (header, shard envelope, message) never exceeds their sum.
    #[test]
    fn append_entries_overhead_bounds_the_frame(msg in append_entries()) {
        let LogMessage::AppendEntries(m) = &msg else { unreachable!() };
        let entries: usize = m.entries.iter().map(LogEntry::encoded_len).sum();
        let peer = PeerMessage::Shard { table: u32::MAX, shard: u32::MAX, generation: u32::MAX, msg: msg.clone() };
        let mut buf = BytesMut::new();
        encode_frame(&mut buf, CLUSTER, &peer);
        prop_assert!(buf.len() <= entries + APPEND_ENTRIES_OVERHEAD_BYTES, "{} > {} + overhead", buf.len(), entries);
    }

    /// Any byte string either decodes or is rejected with an error; truncating a valid message
    /// is always an error — except a `ReadRelay` cut exactly before its value's trailing
    /// `vts` or `w_mean_ns`, which is the message of a node before Kairos or its cache.
    #[test]
    fn hostile_bytes_never_panic(raw in prop::collection::vec(any::<u8>(), 0..128), msg in log_message(), cut in 0usize..64) {
        let _ = decode_message::<LogMessage>(Bytes::from(raw));
        let mut buf = BytesMut::new();
        strata_wire::Encode::encode(&msg, &mut buf);
        let cut = cut.min(buf.len().saturating_sub(1));
        // Trailing extensions of a relayed value: `vts` (12 bytes, sent if non-zero or with a
        // `W`), then `w_mean_ns` (8 bytes). A cut before either is an older node's message.
        let older_version = match &msg {
            LogMessage::ReadRelay(ReadRelay { result: Ok(v), .. }) => {
                let w = if v.w_mean_ns.is_some() { 8 } else { 0 };
                let vts_sent = v.vts != strata_wire::txn::Timestamp::ZERO || w > 0;
                let removed = buf.len() - cut;
                (w > 0 && removed == w) || (vts_sent && removed == 12 + w)
            }
            _ => false,
        };
        if !older_version {
            prop_assert!(decode_message::<LogMessage>(buf.freeze().slice(..cut)).is_err());
        }
    }
}

#[test]
fn tags_are_the_documented_ones_and_index_orders_by_epoch_first() {
    let mut buf = BytesMut::new();
    strata_wire::Encode::encode(&LogMessage::VoteResp { epoch: 1, granted: true }, &mut buf);
    assert_eq!(buf[0], 0x95);
    assert!(LogIndex::new(2, 1) > LogIndex::new(1, 900));
    assert!(LogIndex::new(2, 2) > LogIndex::new(2, 1));
    let mut r = Reader::new(Bytes::from_static(&[0x9f]));
    assert_eq!(
        <LogMessage as strata_wire::Decode>::decode(&mut r),
        Err(DecodeError::UnknownTag { tag: 0x9f })
    );
}

/// Entries and snapshots of RIFL and plain tables keep their encodings (tags 9 and 8, no
/// Kairos section): a log written before Kairos replays, and its bytes are unchanged.
#[test]
fn rifl_prepares_and_snapshots_without_kairos_keep_their_old_tags() {
    use strata_wire::txn::{KairosKey, KairosPrepare, KairosRole, Prepare, Timestamp, TxnId};
    use strata_wire::{Decode, Encode};
    let txn = TxnId { client_id: 1, base: 2 };
    let prepare = Prepare { txn, all: vec![], ops: vec![], whole: true, kairos: None };
    let entry = |op| LogEntry {
        index: LogIndex::new(1, 1),
        key: Bytes::new(),
        op,
        client_id: 1,
        seq: 0,
        ack: 0,
        immediate: false,
    };
    let tag_of = |e: &LogEntry| {
        let mut b = BytesMut::new();
        e.encode(&mut b);
        let decoded = LogEntry::decode(&mut Reader::new(b.clone().freeze()));
        assert_eq!(decoded.unwrap(), *e);
        b[8 + 4] // after the index and the empty key's length
    };
    assert_eq!(tag_of(&entry(LogOp::Prepare(Box::new(prepare.clone())))), 9);
    let kairos = KairosPrepare {
        commit_ts: Timestamp::new(5, 1),
        freshness: None,
        read_only: false,
        read_vts: vec![],
        role: KairosRole::Full,
    };
    let kp = Prepare { kairos: Some(kairos.clone()), ..prepare.clone() };
    assert_eq!(tag_of(&entry(LogOp::Prepare(Box::new(kp)))), 14);
    // A sharded table's prepares (validator, data shard) carry their role: tag 16.
    for role in [KairosRole::Validate, KairosRole::Replicate] {
        let k = KairosPrepare { role, ..kairos.clone() };
        let kp = Prepare { kairos: Some(k), ..prepare.clone() };
        assert_eq!(tag_of(&entry(LogOp::Prepare(Box::new(kp)))), 16);
    }
    let snap = Snapshot::default();
    assert_eq!(tag_of(&entry(LogOp::Install(Box::new(snap.clone())))), 8);
    let key = KairosKey {
        key: Bytes::from_static(b"k"),
        latest_read: Timestamp::new(3, 1),
        latest_committed: Timestamp::new(2, 1),
        prepared_write: Some((txn, Timestamp::new(4, 1))),
    };
    let ksnap = Snapshot { kairos: vec![key], ..snap };
    assert_eq!(tag_of(&entry(LogOp::Install(Box::new(ksnap)))), 15);
}
