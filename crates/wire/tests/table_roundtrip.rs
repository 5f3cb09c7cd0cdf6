//! Log-table messages: client requests and responses for log tables and the catalog, shard
//! status in `NodeStatus`, and `PeerMessage::Shard` survive encode → frame → decode; their tags
//! are the documented constants; bad enum codes are rejected, never a panic; messages of the
//! first version (without the trailing extensions: timer presets, shard read counters,
//! connection counters, shard lock counts) still decode, with defaults.

mod common;

use bytes::{Bytes, BytesMut};
use common::{shard_move, snapshot};
use proptest::prelude::*;
use strata_wire::client::{
    push_topic, request_tag, response_tag, shard_of, table_id, ClientRequest, ClientResponse,
    ConnectionStats, KairosInvalidate, LogFailure, LogWriteOp, NodeStatus, Request, Response,
    ShardRole, ShardStatus, TableDef, TableDurability, TableEngine, TableReads, TableReplication,
    TableTimers, TableTxn, TableValidation,
};
use strata_wire::log::{LogIndex, LogMessage};
use strata_wire::peer::{peer_tag, PeerMessage};
use strata_wire::txn::{KairosRole, ReadIntent};
use strata_wire::{
    decode_frame, decode_message, encode_frame, ClusterId, DecodeError, Encode, NodeId,
};

const CLUSTER: ClusterId = ClusterId(0x7ab);
const MAX_FRAME: usize = 1 << 20;

/// Bytes of `Status` extension 2: a u32 count and eight u64 connection counters.
const CONNECTIONS_EXT: usize = 4 + 8 * 8;

/// Bytes of `Status` extension 4 for `shards` shards: a u32 count and two u64 each (the
/// explicit-invalidation counters).
fn kairos_ext(shards: usize) -> usize {
    4 + 16 * shards
}

/// Bytes of `Status` extension 3 for `shards` shards: a u32 count and one u64 lock count each.
fn locks_ext(shards: usize) -> usize {
    4 + 8 * shards
}

/// Bytes of `Status` extension 5: a u32 count and three u64 per shard (transaction reads).
fn txn_ext(shards: usize) -> usize {
    4 + 24 * shards
}

fn bytes() -> impl Strategy<Value = Bytes> {
    prop::collection::vec(any::<u8>(), 0..24).prop_map(Bytes::from)
}

fn name() -> impl Strategy<Value = String> {
    "[a-z0-9_-]{1,12}"
}

fn read_intent() -> impl Strategy<Value = ReadIntent> {
    prop_oneof![
        Just(ReadIntent::Plain),
        Just(ReadIntent::Txn),
        Just(ReadIntent::TxnForUpdate { reserver: 0 }),
        any::<u64>().prop_map(|reserver| ReadIntent::TxnForUpdate { reserver }),
    ]
}

fn index() -> impl Strategy<Value = LogIndex> {
    (any::<u32>(), any::<u32>()).prop_map(|(epoch, counter)| LogIndex { epoch, counter })
}

fn node() -> impl Strategy<Value = NodeId> {
    any::<u32>().prop_map(NodeId)
}

fn table_def() -> impl Strategy<Value = TableDef> {
    let durability = prop_oneof![
        Just(TableDurability::Sync),
        Just(TableDurability::Async),
        Just(TableDurability::Cad)
    ];
    let replication = prop_oneof![Just(TableReplication::Sync), Just(TableReplication::Async)];
    let reads =
        prop_oneof![Just(TableReads::Leader), Just(TableReads::ActiveSet), Just(TableReads::Any)];
    let timers = prop_oneof![Just(TableTimers::Default), Just(TableTimers::Geo)];
    let leaders = prop::collection::vec(any::<u32>().prop_map(NodeId), 0..4);
    let validation = prop_oneof![
        Just(TableValidation::Server),
        any::<u32>().prop_map(TableValidation::Sharded),
        Just(TableValidation::Validators)
    ];
    // (Only a Kairos table is validated anywhere but in its shards.)
    let txn = prop_oneof![
        Just((TableTxn::None, TableValidation::Server)),
        Just((TableTxn::Rifl, TableValidation::Server)),
        validation.prop_map(|v| (TableTxn::Kairos, v))
    ];
    (name(), durability, replication, reads, any::<u32>(), timers, leaders, txn).prop_map(
        |(name, durability, replication, reads, shards, timers, leaders, (txn, validation))| {
            TableDef {
                name,
                engine: TableEngine::Log,
                durability,
                replication,
                reads,
                shards,
                timers,
                leaders,
                txn,
                validation,
            }
        },
    )
}

fn request() -> impl Strategy<Value = ClientRequest> {
    let op = prop_oneof![
        bytes().prop_map(LogWriteOp::Put),
        Just(LogWriteOp::Delete),
        (common::expect(), proptest::option::of(bytes()))
            .prop_map(|(expect, put)| LogWriteOp::Cond { expect, put }),
        any::<i64>().prop_map(LogWriteOp::Add),
    ];
    let body = prop_oneof![
        (name(), bytes(), op, any::<bool>()).prop_map(|(table, key, op, immediate)| {
            Request::LogWrite { table, key, op, immediate }
        }),
        (name(), bytes(), proptest::option::of(index()), any::<bool>(), read_intent()).prop_map(
            |(table, key, min_index, sharer, intent)| Request::LogRead {
                table,
                key,
                min_index,
                sharer,
                intent,
            }
        ),
        (
            name(),
            prop::collection::vec(bytes(), 0..4),
            proptest::option::of(index()),
            read_intent()
        )
            .prop_map(|(table, keys, min_index, intent)| Request::LogReadMany {
                table,
                keys,
                min_index,
                intent,
            }),
        (name(), prop::collection::vec(bytes(), 0..4), any::<u64>()).prop_map(
            |(table, keys, reserver)| Request::ReleaseReservations { table, keys, reserver }
        ),
        table_def().prop_map(|def| Request::CreateTable { def }),
        Just(Request::ListTables),
        any::<u64>().prop_map(|lease_id| Request::RenewLease { lease_id }),
        any::<u64>().prop_map(|lease_id| Request::LeaseInfo { lease_id }),
        (name(), any::<u32>(), prop::collection::vec(node(), 0..4))
            .prop_map(|(table, shard, replicas)| Request::FreezeShard { table, shard, replicas }),
        (name(), any::<u32>(), shard_move(), proptest::option::of(snapshot())).prop_map(
            |(table, shard, placement, snapshot)| {
                Request::AdoptShard { table, shard, placement, snapshot }
            }
        ),
        (
            name(),
            any::<u32>(),
            any::<bool>(),
            common::objects(),
            common::txn_ops(),
            proptest::option::of(common::kairos_prepare())
        )
            .prop_map(|(table, shard, read_only, all, ops, kairos)| {
                Request::TxnPrepare { table, shard, read_only, all, ops, kairos }
            }),
        (name(), any::<u32>(), common::decision(), prop::collection::vec(any::<u64>(), 0..4))
            .prop_map(|(table, shard, decision, seqs)| Request::TxnDecide {
                table,
                shard,
                decision,
                seqs
            }),
        (
            name(),
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            common::timestamp(),
            common::timestamp()
        )
            .prop_map(|(table, shard, client, seq, local_wm, c_freshness)| {
                Request::KairosReport { table, shard, client, seq, local_wm, c_freshness }
            }),
    ];
    (any::<u64>(), body).prop_map(|(corr, body)| ClientRequest::new(corr, body))
}

fn failure() -> impl Strategy<Value = LogFailure> {
    prop_oneof![
        proptest::option::of(node()).prop_map(|hint| LogFailure::NotLeader { hint }),
        Just(LogFailure::NotInActiveSet),
        Just(LogFailure::Timeout),
        Just(LogFailure::Unavailable),
        "[ -~]{0,20}".prop_map(LogFailure::Invalid),
        prop::collection::vec(node(), 0..4).prop_map(|replicas| LogFailure::Moved { replicas }),
        Just(LogFailure::Locked),
    ]
}

fn shard_status() -> impl Strategy<Value = ShardStatus> {
    let role =
        prop_oneof![Just(ShardRole::Follower), Just(ShardRole::Candidate), Just(ShardRole::Leader)];
    (
        name(),
        any::<u32>(),
        role,
        proptest::option::of(node()),
        any::<u32>(),
        [index(), index(), index(), index()],
        prop::collection::vec(node(), 0..4),
        any::<bool>(),
        any::<[u64; 8]>(),
    )
        .prop_map(|(table, shard, role, leader, epoch, ix, active_set, serving, counts)| {
            ShardStatus {
                table,
                shard,
                role,
                leader,
                epoch,
                last_index: ix[0],
                persisted_index: ix[1],
                applied_index: ix[2],
                durable_index: ix[3],
                active_set,
                serving,
                reads_served: counts[0],
                reads_made_durable: counts[1],
                locks: counts[2],
                kairos_sharers: counts[3],
                kairos_invalidations: counts[4],
                txn_reads_foreseen: counts[5],
                txn_prepares_foreseen_aborted: counts[6],
                txn_reads_held: counts[7],
            }
        })
}

fn response() -> impl Strategy<Value = ClientResponse> {
    let body = prop_oneof![
        (index(), common::outcome())
            .prop_map(|(index, outcome)| Response::LogWritten { index, outcome }),
        (
            proptest::option::of(bytes()),
            index(),
            node(),
            any::<u32>(),
            proptest::option::of(common::timestamp()),
            proptest::option::of(any::<u64>())
        )
            .prop_map(|(value, update_index, served_by, epoch, vts, w)| {
                // `W` travels after `vts`: a node sends it only with a version.
                let w_mean_ns = vts.and(w);
                Response::LogValue { value, update_index, served_by, epoch, vts, w_mean_ns }
            }),
        (
            prop::collection::vec((proptest::option::of(bytes()), index()), 0..4),
            node(),
            any::<u32>()
        )
            .prop_map(|(values, served_by, epoch)| Response::LogValues {
                values,
                served_by,
                epoch
            }),
        failure().prop_map(Response::LogRejected),
        any::<bool>().prop_map(|created| Response::TableCreated { created }),
        prop::collection::vec(table_def(), 0..3).prop_map(Response::Tables),
        (shard_move(), proptest::option::of(snapshot()))
            .prop_map(|(placement, snapshot)| Response::ShardFrozen { placement, snapshot }),
        any::<bool>().prop_map(|started| Response::ShardAdopted { started }),
        (prop::collection::vec((any::<u64>(), common::vote()), 0..4), any::<bool>())
            .prop_map(|(votes, decided)| Response::TxnVotes { votes, decided }),
        Just(Response::TxnDecided),
        (common::timestamp(), common::timestamp())
            .prop_map(|(wm, ts_gc)| Response::KairosWatermarks { wm, ts_gc }),
        (any::<u32>(), prop::collection::vec(any::<u8>(), 0..16))
            .prop_map(|(topic, body)| Response::Push { topic, body: Bytes::from(body) }),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(lease_id, e, t)| Response::Lease(
            strata_wire::LeaseStatus {
                lease_id,
                expiration: strata_wire::ClusterTime(e),
                cluster_time: strata_wire::ClusterTime(t)
            }
        )),
        prop::collection::vec(shard_status(), 0..3)
            .prop_map(|shards| Response::Status(NodeStatus { shards, ..NodeStatus::default() })),
    ];
    (any::<u64>(), body).prop_map(|(corr, body)| ClientResponse { corr, body })
}

fn round_trip<M: Encode + strata_wire::Decode + PartialEq + std::fmt::Debug>(msg: M) {
    let mut buf = BytesMut::new();
    encode_frame(&mut buf, CLUSTER, &msg);
    let payload = decode_frame(&mut buf, CLUSTER, MAX_FRAME).unwrap().expect("a whole frame");
    assert!(buf.is_empty());
    assert_eq!(decode_message::<M>(payload).unwrap(), msg);
}

proptest! {
    #[test]
    fn log_table_requests_round_trip(msg in request()) { round_trip(msg) }

    #[test]
    fn log_table_responses_round_trip(msg in response()) { round_trip(msg) }

    #[test]
    fn shard_peer_messages_round_trip(table in any::<u32>(), shard in any::<u32>(), generation in any::<u32>(), epoch in any::<u32>(), last in index()) {
        round_trip(PeerMessage::Shard { table, shard, generation, msg: LogMessage::RequestVote { epoch, last_index: last } });
        round_trip(PeerMessage::Shard { table, shard, generation, msg: LogMessage::VoteResp { epoch, granted: true } });
    }

    /// Truncated payloads are errors, never panics — except a `CreateTable`, a Kairos prepare
    /// or a sharer's `LogRead` cut exactly before one of its trailing extensions, which is a
    /// valid request of an older version.
    #[test]
    fn truncated_requests_are_rejected(msg in request(), cut in 0usize..64) {
        let mut b = BytesMut::new();
        msg.encode(&mut b);
        let older_version = match &msg.body {
            Request::CreateTable { def } => {
                let ext4 = ext4(std::slice::from_ref(def));
                let ext3 = ext4 + if def.txn == TableTxn::None { 0 } else { 5 };
                let ext2 = 8 + 4 * def.leaders.len();
                [ext4, ext3, ext3 + ext2, ext3 + ext2 + 5].iter().any(|e| cut + e == b.len())
            }
            // A RIFL prepare is a Kairos prepare without its trailing extension, and a
            // server-side Kairos prepare one without its role's byte.
            Request::TxnPrepare { kairos: Some(k), .. } => {
                let mut kb = BytesMut::new();
                k.encode(&mut kb);
                cut + kb.len() == b.len() || (k.role != KairosRole::Full && cut + 1 == b.len())
            }
            // A read without the sharer flag (kairos.md §5.14.2) is one of before it, and one
            // without the intent byte one of before that.
            Request::LogRead { intent, .. } if intent.foresees() => {
                cut + 1 == b.len() || cut + 2 == b.len()
            }
            Request::LogRead { sharer: true, .. } => cut + 1 == b.len(),
            _ => false,
        };
        if cut < b.len() && !older_version {
            prop_assert!(decode_message::<ClientRequest>(Bytes::copy_from_slice(&b[..cut])).is_err());
        }
    }
}

#[test]
fn tags_are_the_documented_constants() {
    let tag = |r: Request| {
        let mut b = BytesMut::new();
        ClientRequest { corr: 0, rifl: None, body: r }.encode(&mut b);
        b[0]
    };
    assert_eq!(request_tag::LOG_WRITE, 0x20);
    assert_eq!(request_tag::LOG_READ, 0x21);
    assert_eq!(request_tag::LOG_READ_MANY, 0x29);
    assert_eq!(response_tag::LOG_VALUES, 0x69);
    assert_eq!(request_tag::CREATE_TABLE, 0x32);
    assert_eq!(request_tag::LIST_TABLES, 0x33);
    assert_eq!(tag(Request::ListTables), 0x33);
    assert_eq!(request_tag::PING, 0x34);
    assert_eq!(tag(Request::Ping), 0x34);
    assert_eq!(response_tag::PONG, 0x65);
    assert_eq!(response_tag::LOG_WRITTEN, 0x53);
    assert_eq!(response_tag::LOG_VALUE, 0x54);
    assert_eq!(response_tag::LOG_REJECTED, 0x55);
    assert_eq!(response_tag::TABLE_CREATED, 0x62);
    assert_eq!(response_tag::TABLES, 0x63);
    assert_eq!(peer_tag::SHARD, 0xa0);
    let mut b = BytesMut::new();
    PeerMessage::Shard {
        table: 1,
        shard: 2,
        generation: 0,
        msg: LogMessage::VoteResp { epoch: 3, granted: false },
    }
    .encode(&mut b);
    assert_eq!(b[0], 0xa0);
    assert_eq!(b[13], 0x95, "the log message keeps its own tag after table, shard and generation");
    assert_eq!(request_tag::KAIROS_REPORT, 0x28);
    let report = Request::KairosReport {
        table: "t".into(),
        shard: 0,
        client: 1,
        seq: 1,
        local_wm: strata_wire::txn::Timestamp::ZERO,
        c_freshness: strata_wire::txn::Timestamp::ZERO,
    };
    assert_eq!(tag(report), 0x28);
    assert_eq!(response_tag::KAIROS_WATERMARKS, 0x68);
}

/// A one-shard cad table named `t`.
fn cad_table(timers: TableTimers) -> TableDef {
    TableDef {
        name: "t".into(),
        engine: TableEngine::Log,
        durability: TableDurability::Cad,
        replication: TableReplication::Async,
        reads: TableReads::ActiveSet,
        shards: 1,
        timers,
        leaders: vec![],
        txn: Default::default(),
        validation: Default::default(),
    }
}

#[test]
fn bad_enum_codes_are_rejected() {
    let def = cad_table(TableTimers::Default);
    let mut b = BytesMut::new();
    ClientRequest::new(5, Request::CreateTable { def }).encode(&mut b);
    // tag (1) + corr (8) + no RIFL envelope (1) + name (4 + 1), then the engine code.
    b[15] = 9;
    let e = decode_message::<ClientRequest>(b.freeze()).unwrap_err();
    assert!(matches!(e, DecodeError::Invalid { what: "table engine", value: 9 }), "{e:?}");
}

#[test]
fn shard_and_table_ids_are_stable() {
    // Changing these moves keys between shards or breaks mixed-version clusters.
    assert_eq!(shard_of(b"", 1), 0);
    assert_eq!(shard_of(b"a", 7), crc32c_of(b"a") % 7);
    assert_eq!(table_id("t"), crc32c_of(b"t"));
    assert!(
        (0..100)
            .map(|i| shard_of(format!("k{i}").as_bytes(), 4))
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            == 4
    );
}

/// CRC32C (Castagnoli), bitwise, as an independent reference.
fn crc32c_of(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0x82f6_3b78 } else { crc >> 1 };
        }
    }
    !crc
}

/// A message's payload with its last `cut` bytes removed: what an encoder of the first
/// version (before the trailing extension) sent.
/// The size of `CreateTable`'s or `Tables`'s extension 4 (where Kairos tables validate): only
/// when some table is not validated server-side, a u32 count, then per definition a byte and,
/// for `Sharded`, a u32.
fn ext4(defs: &[TableDef]) -> usize {
    if defs.iter().all(|d| d.validation == TableValidation::Server) {
        return 0;
    }
    let each =
        |d: &TableDef| if matches!(d.validation, TableValidation::Sharded(_)) { 5 } else { 1 };
    4 + defs.iter().map(each).sum::<usize>()
}

fn without_extension<M: Encode>(msg: &M, cut: usize) -> Bytes {
    let mut b = BytesMut::new();
    msg.encode(&mut b);
    b.truncate(b.len() - cut);
    b.freeze()
}

proptest! {
    /// A prepare from a client before Kairos (no trailing extension) decodes as a RIFL
    /// prepare, and a `LogValue` from a node before Kairos decodes without a `vts`.
    #[test]
    fn prepares_and_log_values_before_kairos_decode(
        ops in common::txn_ops(),
        all in common::objects(),
        k in common::kairos_prepare(),
        vts in common::timestamp(),
    ) {
        let mut kb = BytesMut::new();
        k.encode(&mut kb);
        let body = Request::TxnPrepare { table: "t".into(), shard: 1, read_only: false, all, ops, kairos: Some(k) };
        let msg = ClientRequest::new(3, body.clone());
        let old = decode_message::<ClientRequest>(without_extension(&msg, kb.len())).unwrap();
        let Request::TxnPrepare { kairos: None, ops: o, .. } = old.body else { panic!("a rifl prepare") };
        let Request::TxnPrepare { ops, .. } = body else { unreachable!() };
        prop_assert_eq!(o, ops);
        let value = |vts| ClientResponse { corr: 1, body: Response::LogValue { value: None, update_index: LogIndex::ZERO, served_by: NodeId(2), epoch: 3, vts, w_mean_ns: None } };
        let old = decode_message::<ClientResponse>(without_extension(&value(Some(vts)), 12)).unwrap();
        prop_assert_eq!(old, value(None));
    }

    /// The Kairos cache's fields (kairos.md §4, §5.14.2): a `LogRead` of a client before
    /// them decodes without the sharer flag, a `LogValue` of a node before them without `W`;
    /// the invalidation push's body round-trips.
    #[test]
    fn kairos_cache_fields_decode_without_their_extensions(
        key in bytes(),
        vts in common::timestamp(),
        w in any::<u64>(),
        shard in any::<u32>(),
    ) {
        let read = |sharer, intent| ClientRequest::new(2, Request::LogRead { table: "t".into(), key: key.clone(), min_index: None, sharer, intent });
        let old = decode_message::<ClientRequest>(without_extension(&read(true, ReadIntent::Plain), 1)).unwrap();
        prop_assert_eq!(old, read(false, ReadIntent::Plain));
        // A reader that knows `sharer` but not the intent drops the second extension.
        for intent in [ReadIntent::Txn, ReadIntent::TxnForUpdate { reserver: 0 }, ReadIntent::TxnForUpdate { reserver: shard as u64 + 1 }] {
            let mut encoded = BytesMut::new();
            intent.encode(&mut encoded);
            let old = decode_message::<ClientRequest>(without_extension(&read(false, intent), encoded.len())).unwrap();
            prop_assert_eq!(old, read(false, ReadIntent::Plain));
        }
        let value = |w_mean_ns| ClientResponse { corr: 1, body: Response::LogValue { value: None, update_index: LogIndex::ZERO, served_by: NodeId(2), epoch: 3, vts: Some(vts), w_mean_ns } };
        let old = decode_message::<ClientResponse>(without_extension(&value(Some(w)), 8)).unwrap();
        prop_assert_eq!(old, value(None));
        let push = KairosInvalidate { table: "t".into(), shard, key, new_vts: vts };
        round_trip(push.clone());
        let mut b = BytesMut::new();
        push.encode(&mut b);
        let body = Response::Push { topic: push_topic::KAIROS_INVALIDATE, body: b.freeze() };
        round_trip(ClientResponse { corr: strata_wire::client::PUSH_CORR, body });
    }

    /// A `Status` from an older node (no read counters) decodes with the counters at 0.
    #[test]
    fn status_without_read_counters_decodes(shards in prop::collection::vec(shard_status(), 0..3)) {
        let msg = ClientResponse { corr: 7, body: Response::Status(NodeStatus { shards: shards.clone(), ..NodeStatus::default() }) };
        // Extension 1: a u32 count, then two u64 per shard; extension 2 (connection
        // counters): a u32 count and eight u64; extension 3: a u32 count and a u64 per shard.
        let old = without_extension(&msg, txn_ext(shards.len()) + kairos_ext(shards.len()) + locks_ext(shards.len()) + CONNECTIONS_EXT + 4 + 16 * shards.len());
        let Response::Status(s) = decode_message::<ClientResponse>(old).unwrap().body else { panic!("a status") };
        let expected: Vec<ShardStatus> =
            shards.into_iter().map(|s| ShardStatus { reads_served: 0, reads_made_durable: 0, locks: 0, kairos_sharers: 0, kairos_invalidations: 0, txn_reads_foreseen: 0, txn_prepares_foreseen_aborted: 0, txn_reads_held: 0, ..s }).collect();
        prop_assert_eq!(s.shards, expected);
    }

    /// A `Status` from a node without connection counters decodes with them at 0.
    #[test]
    fn status_without_connection_counters_decodes(shards in prop::collection::vec(shard_status(), 0..3), c in any::<[u64; 8]>()) {
        let connections = ConnectionStats { open: c[0], refused: c[1], buffered_bytes: c[2], paused: c[3], closed_idle: c[4], closed_slow_frame: c[5], forbidden: c[6], invalid_envelopes: c[7] };
        let n = shards.len();
        let status = NodeStatus { shards, connections, ..NodeStatus::default() };
        let msg = ClientResponse { corr: 8, body: Response::Status(status.clone()) };
        let mut b = BytesMut::new();
        msg.encode(&mut b);
        prop_assert_eq!(decode_message::<ClientResponse>(b.freeze()).unwrap().body, Response::Status(status.clone()));
        let old = without_extension(&msg, txn_ext(n) + kairos_ext(n) + locks_ext(n) + CONNECTIONS_EXT);
        let Response::Status(s) = decode_message::<ClientResponse>(old).unwrap().body else { panic!("a status") };
        let no_locks: Vec<ShardStatus> =
            status.shards.iter().cloned().map(|s| ShardStatus { locks: 0, kairos_sharers: 0, kairos_invalidations: 0, txn_reads_foreseen: 0, txn_prepares_foreseen_aborted: 0, txn_reads_held: 0, ..s }).collect();
        prop_assert_eq!(s, NodeStatus { connections: ConnectionStats::default(), shards: no_locks, ..status });
    }

    /// A `Status` from a node without lock counts (before transactions) decodes with them at
    /// 0 and every earlier field intact; the full message round-trips the counts.
    #[test]
    fn status_without_lock_counts_decodes(shards in prop::collection::vec(shard_status(), 0..3), open in any::<u64>()) {
        let n = shards.len();
        let connections = ConnectionStats { open, ..ConnectionStats::default() };
        let status = NodeStatus { shards, connections, ..NodeStatus::default() };
        let msg = ClientResponse { corr: 9, body: Response::Status(status.clone()) };
        let mut b = BytesMut::new();
        msg.encode(&mut b);
        prop_assert_eq!(decode_message::<ClientResponse>(b.freeze()).unwrap().body, Response::Status(status.clone()));
        let old = without_extension(&msg, txn_ext(n) + kairos_ext(n) + locks_ext(n));
        let Response::Status(s) = decode_message::<ClientResponse>(old).unwrap().body else { panic!("a status") };
        let no_locks: Vec<ShardStatus> =
            status.shards.iter().cloned().map(|s| ShardStatus { locks: 0, kairos_sharers: 0, kairos_invalidations: 0, txn_reads_foreseen: 0, txn_prepares_foreseen_aborted: 0, txn_reads_held: 0, ..s }).collect();
        prop_assert_eq!(s, NodeStatus { shards: no_locks, ..status.clone() });
        // Without extension 4 only (a node before the Kairos cache): its counters are 0.
        let old = without_extension(&msg, txn_ext(n) + kairos_ext(n));
        let Response::Status(s) = decode_message::<ClientResponse>(old).unwrap().body else { panic!("a status") };
        let no_ei: Vec<ShardStatus> =
            status.shards.iter().cloned().map(|s| ShardStatus { kairos_sharers: 0, kairos_invalidations: 0, txn_reads_foreseen: 0, txn_prepares_foreseen_aborted: 0, txn_reads_held: 0, ..s }).collect();
        prop_assert_eq!(s, NodeStatus { shards: no_ei, ..status.clone() });
        // Without extension 5 only (a node before reads for update): its counters are 0.
        let old = without_extension(&msg, txn_ext(n));
        let Response::Status(s) = decode_message::<ClientResponse>(old).unwrap().body else { panic!("a status") };
        let no_txn: Vec<ShardStatus> =
            status.shards.iter().cloned().map(|s| ShardStatus { txn_reads_foreseen: 0, txn_prepares_foreseen_aborted: 0, txn_reads_held: 0, ..s }).collect();
        prop_assert_eq!(s, NodeStatus { shards: no_txn, ..status });
    }

    /// Table definitions from an older client or node decode: without every extension (no
    /// timer preset, no preferred leaders, no transactions) as `Default` and none, without the
    /// later ones with what the earlier carry.
    #[test]
    fn table_defs_from_before_the_extensions_decode(defs in prop::collection::vec(table_def(), 1..3)) {
        let no_validation = |d: TableDef| TableDef { validation: TableValidation::Server, ..d };
        let no_txn = |d: TableDef| TableDef { txn: TableTxn::None, ..no_validation(d) };
        let no_leaders = |d: TableDef| TableDef { leaders: vec![], ..no_txn(d) };
        let oldest = |d: TableDef| TableDef { timers: TableTimers::Default, ..no_leaders(d) };
        // Extension 1: a u32 count, then one byte per definition; extension 2: a u32 count,
        // then per definition a u32 count and 4 bytes per leader; extension 3 (only when a
        // table takes transactions): a u32 count and a byte per definition; extension 4 (only
        // when a table is not validated server-side) after it.
        let ext3 = |ds: &[TableDef]| if ds.iter().any(|d| d.txn != TableTxn::None) { 4 + ds.len() + ext4(ds) } else { 0 };
        let ext2 = |ds: &[TableDef]| 4 + ds.iter().map(|d| 4 + 4 * d.leaders.len()).sum::<usize>();
        let create = ClientRequest { corr: 1, rifl: None, body: Request::CreateTable { def: defs[0].clone() } };
        let one = &defs[..1];
        let body = decode_message::<ClientRequest>(without_extension(&create, ext4(one))).unwrap().body;
        prop_assert_eq!(body, Request::CreateTable { def: no_validation(defs[0].clone()) });
        let body = decode_message::<ClientRequest>(without_extension(&create, ext3(one))).unwrap().body;
        prop_assert_eq!(body, Request::CreateTable { def: no_txn(defs[0].clone()) });
        let body = decode_message::<ClientRequest>(without_extension(&create, ext3(one) + ext2(one))).unwrap().body;
        prop_assert_eq!(body, Request::CreateTable { def: no_leaders(defs[0].clone()) });
        let body = decode_message::<ClientRequest>(without_extension(&create, ext3(one) + ext2(one) + 5)).unwrap().body;
        prop_assert_eq!(body, Request::CreateTable { def: oldest(defs[0].clone()) });
        let list = ClientResponse { corr: 2, body: Response::Tables(defs.clone()) };
        let body = decode_message::<ClientResponse>(without_extension(&list, ext3(&defs) + ext2(&defs))).unwrap().body;
        prop_assert_eq!(body, Response::Tables(defs.iter().cloned().map(no_leaders).collect()));
        let cut = ext3(&defs) + ext2(&defs) + 4 + defs.len();
        let body = decode_message::<ClientResponse>(without_extension(&list, cut)).unwrap().body;
        prop_assert_eq!(body, Response::Tables(defs.into_iter().map(oldest).collect()));
    }
}

#[test]
fn an_extension_must_match_its_sequence() {
    let shard = ShardStatus { table: "t".into(), ..ShardStatus::default() };
    let msg = ClientResponse {
        corr: 3,
        body: Response::Status(NodeStatus { shards: vec![shard], ..NodeStatus::default() }),
    };
    let mut b = BytesMut::new();
    msg.encode(&mut b);
    let encoded = b.clone();
    // The extension's count (one shard) sits 16 bytes before extension 2; claim two.
    let at = b.len() - txn_ext(1) - kairos_ext(1) - locks_ext(1) - CONNECTIONS_EXT - 20;
    b[at] = 2;
    let e = decode_message::<ClientResponse>(b.freeze()).unwrap_err();
    assert!(matches!(e, DecodeError::Invalid { what: "extension count", value: 2 }), "{e:?}");
    // So must extension 3 (the lock counts): its count sits right after extension 2.
    let mut b = encoded.clone();
    let at = b.len() - txn_ext(1) - kairos_ext(1) - locks_ext(1);
    b[at] = 2;
    let e = decode_message::<ClientResponse>(b.freeze()).unwrap_err();
    assert!(matches!(e, DecodeError::Invalid { what: "extension count", value: 2 }), "{e:?}");
    // And extension 5 (the transaction-read counters), the last one.
    let mut b = encoded;
    let at = b.len() - txn_ext(1);
    b[at] = 2;
    let e = decode_message::<ClientResponse>(b.freeze()).unwrap_err();
    assert!(matches!(e, DecodeError::Invalid { what: "extension count", value: 2 }), "{e:?}");
    // An unknown timer code is refused like any bad enum code.
    let mut b = BytesMut::new();
    ClientRequest {
        corr: 4,
        rifl: None,
        body: Request::CreateTable { def: cad_table(TableTimers::Geo) },
    }
    .encode(&mut b);
    // The timer byte precedes extension 2 (a count and one empty leader list: 8 bytes).
    let timer = b.len() - 9;
    b[timer] = 9;
    let e = decode_message::<ClientRequest>(b.freeze()).unwrap_err();
    assert!(matches!(e, DecodeError::Invalid { what: "table timers", value: 9 }), "{e:?}");
}
