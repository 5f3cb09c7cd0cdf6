//! Log-table messages: client requests and responses for log tables and the catalog, shard
//! status in `NodeStatus`, and `PeerMessage::Shard` survive encode → frame → decode; their tags
//! are the documented constants; bad enum codes are rejected, never a panic.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use strata_wire::client::{
    request_tag, response_tag, shard_of, table_id, ClientRequest, ClientResponse, LogFailure,
    LogWriteOp, NodeStatus, Request, Response, ShardRole, ShardStatus, TableDef, TableDurability,
    TableEngine, TableReads, TableReplication,
};
use strata_wire::log::{LogIndex, LogMessage};
use strata_wire::peer::{peer_tag, PeerMessage};
use strata_wire::{
    decode_frame, decode_message, encode_frame, ClusterId, DecodeError, Encode, NodeId,
};

const CLUSTER: ClusterId = ClusterId(0x7ab);
const MAX_FRAME: usize = 1 << 20;

fn bytes() -> impl Strategy<Value = Bytes> {
    prop::collection::vec(any::<u8>(), 0..24).prop_map(Bytes::from)
}

fn name() -> impl Strategy<Value = String> {
    "[a-z0-9_-]{1,12}"
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
    let reads = prop_oneof![
        Just(TableReads::Leader),
        Just(TableReads::ActiveSet),
        Just(TableReads::Any)
    ];
    (name(), durability, replication, reads, any::<u32>()).prop_map(
        |(name, durability, replication, reads, shards)| TableDef {
            name,
            engine: TableEngine::Log,
            durability,
            replication,
            reads,
            shards,
        },
    )
}

fn request() -> impl Strategy<Value = ClientRequest> {
    let op = prop_oneof![bytes().prop_map(LogWriteOp::Put), Just(LogWriteOp::Delete)];
    let body = prop_oneof![
        (
            name(),
            bytes(),
            op,
            any::<u64>(),
            any::<u64>(),
            any::<bool>()
        )
            .prop_map(
                |(table, key, op, client_id, seq, immediate)| Request::LogWrite {
                    table,
                    key,
                    op,
                    client_id,
                    seq,
                    immediate
                }
            ),
        (name(), bytes(), proptest::option::of(index())).prop_map(|(table, key, min_index)| {
            Request::LogRead {
                table,
                key,
                min_index,
            }
        }),
        table_def().prop_map(|def| Request::CreateTable { def }),
        Just(Request::ListTables),
    ];
    (any::<u64>(), body).prop_map(|(corr, body)| ClientRequest { corr, body })
}

fn failure() -> impl Strategy<Value = LogFailure> {
    prop_oneof![
        proptest::option::of(node()).prop_map(|hint| LogFailure::NotLeader { hint }),
        Just(LogFailure::NotInActiveSet),
        Just(LogFailure::Timeout),
        Just(LogFailure::Unavailable),
        "[ -~]{0,20}".prop_map(LogFailure::Invalid),
    ]
}

fn shard_status() -> impl Strategy<Value = ShardStatus> {
    let role = prop_oneof![
        Just(ShardRole::Follower),
        Just(ShardRole::Candidate),
        Just(ShardRole::Leader)
    ];
    (
        name(),
        any::<u32>(),
        role,
        proptest::option::of(node()),
        any::<u32>(),
        [index(), index(), index(), index()],
        prop::collection::vec(node(), 0..4),
        any::<bool>(),
    )
        .prop_map(
            |(table, shard, role, leader, epoch, ix, active_set, serving)| ShardStatus {
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
            },
        )
}

fn response() -> impl Strategy<Value = ClientResponse> {
    let body = prop_oneof![
        index().prop_map(|index| Response::LogWritten { index }),
        (proptest::option::of(bytes()), index(), node(), any::<u32>()).prop_map(
            |(value, update_index, served_by, epoch)| Response::LogValue {
                value,
                update_index,
                served_by,
                epoch
            }
        ),
        failure().prop_map(Response::LogRejected),
        any::<bool>().prop_map(|created| Response::TableCreated { created }),
        prop::collection::vec(table_def(), 0..3).prop_map(Response::Tables),
        prop::collection::vec(shard_status(), 0..3).prop_map(|shards| Response::Status(
            NodeStatus {
                shards,
                ..NodeStatus::default()
            }
        )),
    ];
    (any::<u64>(), body).prop_map(|(corr, body)| ClientResponse { corr, body })
}

fn round_trip<M: Encode + strata_wire::Decode + PartialEq + std::fmt::Debug>(msg: M) {
    let mut buf = BytesMut::new();
    encode_frame(&mut buf, CLUSTER, &msg);
    let payload = decode_frame(&mut buf, CLUSTER, MAX_FRAME)
        .unwrap()
        .expect("a whole frame");
    assert!(buf.is_empty());
    assert_eq!(decode_message::<M>(payload).unwrap(), msg);
}

proptest! {
    #[test]
    fn log_table_requests_round_trip(msg in request()) { round_trip(msg) }

    #[test]
    fn log_table_responses_round_trip(msg in response()) { round_trip(msg) }

    #[test]
    fn shard_peer_messages_round_trip(table in any::<u32>(), shard in any::<u32>(), epoch in any::<u32>(), last in index()) {
        round_trip(PeerMessage::Shard { table, shard, msg: LogMessage::RequestVote { epoch, last_index: last } });
        round_trip(PeerMessage::Shard { table, shard, msg: LogMessage::VoteResp { epoch, granted: true } });
    }

    /// Truncated payloads are errors, never panics.
    #[test]
    fn truncated_requests_are_rejected(msg in request(), cut in 0usize..64) {
        let mut b = BytesMut::new();
        msg.encode(&mut b);
        if cut < b.len() {
            prop_assert!(decode_message::<ClientRequest>(Bytes::copy_from_slice(&b[..cut])).is_err());
        }
    }
}

#[test]
fn tags_are_the_documented_constants() {
    let tag = |r: Request| {
        let mut b = BytesMut::new();
        ClientRequest { corr: 0, body: r }.encode(&mut b);
        b[0]
    };
    assert_eq!(request_tag::LOG_WRITE, 0x20);
    assert_eq!(request_tag::LOG_READ, 0x21);
    assert_eq!(request_tag::CREATE_TABLE, 0x32);
    assert_eq!(request_tag::LIST_TABLES, 0x33);
    assert_eq!(tag(Request::ListTables), 0x33);
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
        msg: LogMessage::VoteResp {
            epoch: 3,
            granted: false,
        },
    }
    .encode(&mut b);
    assert_eq!(b[0], 0xa0);
    assert_eq!(
        b[9], 0x95,
        "the log message keeps its own tag after table and shard"
    );
}

#[test]
fn bad_enum_codes_are_rejected() {
    let def = TableDef {
        name: "t".into(),
        engine: TableEngine::Log,
        durability: TableDurability::Cad,
        replication: TableReplication::Async,
        reads: TableReads::ActiveSet,
        shards: 1,
    };
    let mut b = BytesMut::new();
    ClientRequest {
        corr: 5,
        body: Request::CreateTable { def },
    }
    .encode(&mut b);
    // tag (1) + corr (8) + name (4 + 1), then the engine code.
    b[14] = 9;
    let e = decode_message::<ClientRequest>(b.freeze()).unwrap_err();
    assert!(
        matches!(
            e,
            DecodeError::Invalid {
                what: "table engine",
                value: 9
            }
        ),
        "{e:?}"
    );
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
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
