//! Property tests of the codec: every message survives encode → frame → decode unchanged,
//! and hostile bytes are rejected with an error, never a panic.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use strata_wire::client::{
    ClientRequest, ClientResponse, ConnectionStats, ErrorCode, LinkFault, NodeStatus, PeerStatus,
    Request, Response,
};
use strata_wire::peer::{
    Accept, Commit, Completion, KeyRecords, PaxosOutcome, PaxosReply, PeerMessage, Propose,
    RcResult, Read, ReadReply, Tuple, Version, Write, WriteAck,
};
use strata_wire::{
    decode_frame, decode_message, encode_frame, AcquireId, Ballot, Carstamp, ClusterId,
    ClusterTime, FrameError, LeaseInfo, Llc, NodeId, Rifl, RmwId, RpcId, SessionId,
};

const CLUSTER: ClusterId = ClusterId(0x5eed);
const MAX_FRAME: usize = 1 << 20;

fn bytes() -> impl Strategy<Value = Bytes> {
    prop::collection::vec(any::<u8>(), 0..64).prop_map(Bytes::from)
}

fn session() -> impl Strategy<Value = SessionId> {
    (any::<u32>(), any::<u32>()).prop_map(|(n, i)| SessionId { node: NodeId(n), index: i })
}

fn carstamp() -> impl Strategy<Value = Carstamp> {
    (any::<u64>(), any::<u32>(), any::<u32>())
        .prop_map(|(v, n, p)| Carstamp { llc: Llc { ver: v, node: NodeId(n) }, pno: p })
}

fn fault() -> impl Strategy<Value = LinkFault> {
    (any::<u64>(), any::<u64>(), 0..=1_000_000u32, any::<bool>()).prop_map(|(d, j, l, p)| {
        LinkFault { delay_us: d, jitter_us: j, loss_ppm: l, partitioned: p }
    })
}

/// RIFL's envelope, valid or not: the codec carries any values (`Rifl::check` judges them).
fn rifl() -> impl Strategy<Value = Rifl> {
    (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()).prop_map(
        |(client_id, seq, fi, exp, ts)| Rifl {
            rpc: RpcId { client_id, seq },
            first_incomplete: fi,
            lease: LeaseInfo {
                client_id,
                expiration: ClusterTime(exp),
                timestamp: ClusterTime(ts),
            },
        },
    )
}

fn completion() -> impl Strategy<Value = Completion> {
    let result = prop_oneof![
        carstamp().prop_map(|cs| RcResult::Written { cs }),
        (
            proptest::option::of(bytes()),
            carstamp(),
            proptest::option::of(carstamp()),
            any::<bool>()
        )
            .prop_map(|(observed, observed_cs, written, swapped)| RcResult::Rmw {
                observed,
                observed_cs,
                written,
                swapped
            }),
    ];
    (any::<u64>(), any::<u64>(), any::<u64>(), result).prop_map(|(client_id, seq, ack, result)| {
        Completion { rpc: RpcId { client_id, seq }, ack, result }
    })
}

fn records() -> impl Strategy<Value = KeyRecords> {
    (
        prop::collection::vec((any::<u64>(), any::<u64>()), 0..3),
        prop::collection::vec(completion(), 0..3),
    )
        .prop_map(|(floors, done)| KeyRecords { floors, done })
}

fn request() -> impl Strategy<Value = ClientRequest> {
    let body = prop_oneof![
        Just(Request::OpenSession),
        session().prop_map(|session| Request::CloseSession { session }),
        (session(), bytes()).prop_map(|(session, key)| Request::Get { session, key }),
        (session(), bytes(), bytes()).prop_map(|(session, key, value)| Request::Put {
            session,
            key,
            value
        }),
        (session(), bytes()).prop_map(|(session, key)| Request::Delete { session, key }),
        (session(), bytes(), bytes()).prop_map(|(session, key, value)| Request::Release {
            session,
            key,
            value
        }),
        (session(), bytes()).prop_map(|(session, key)| Request::Acquire { session, key }),
        (session(), bytes(), any::<u64>()).prop_map(|(session, key, delta)| Request::Faa {
            session,
            key,
            delta
        }),
        (session(), bytes(), proptest::option::of(bytes()), bytes(), any::<bool>()).prop_map(
            |(session, key, expected, new, weak)| Request::Cas {
                session,
                key,
                expected,
                new,
                weak
            }
        ),
        Just(Request::Status),
        Just(Request::Ping),
        (proptest::option::of(any::<u32>().prop_map(NodeId)), fault())
            .prop_map(|(peer, fault)| Request::SetFault { peer, fault }),
    ];
    (any::<u64>(), proptest::option::of(rifl()), body)
        .prop_map(|(corr, rifl, body)| ClientRequest { corr, rifl, body })
}

fn response() -> impl Strategy<Value = ClientResponse> {
    let peer =
        (any::<u32>(), "[a-z0-9.:]{0,20}", any::<bool>(), fault(), any::<u64>(), any::<u64>())
            .prop_map(|(n, addr, connected, fault, messages_sent, messages_dropped_by_fault)| {
                PeerStatus {
                    node: NodeId(n),
                    addr,
                    connected,
                    fault,
                    messages_sent,
                    messages_dropped_by_fault,
                }
            });
    let status =
        (any::<[u64; 10]>(), any::<u32>(), prop::collection::vec(peer, 0..4), any::<[u64; 8]>())
            .prop_map(|(c, n, peers, k)| NodeStatus {
                node: NodeId(n),
                uptime_ms: c[0],
                keys: c[1],
                sessions: c[2],
                pending_writes: c[3],
                bad_client_frames: c[4],
                bad_peer_frames: c[5],
                machine_epoch: c[6],
                barriers_fast: c[7],
                barriers_slow: c[8],
                slow_path_accesses: c[9],
                peers,
                shards: Vec::new(),
                connections: ConnectionStats {
                    open: k[0],
                    refused: k[1],
                    buffered_bytes: k[2],
                    paused: k[3],
                    closed_idle: k[4],
                    closed_slow_frame: k[5],
                    forbidden: k[6],
                    invalid_envelopes: k[7],
                },
            });
    let body = prop_oneof![
        session().prop_map(|session| Response::SessionOpened { session }),
        Just(Response::SessionClosed),
        (proptest::option::of(bytes()), carstamp())
            .prop_map(|(value, cs)| Response::Value { value, cs }),
        carstamp().prop_map(|cs| Response::Written { cs }),
        (
            proptest::option::of(bytes()),
            carstamp(),
            proptest::option::of(carstamp()),
            any::<bool>()
        )
            .prop_map(|(observed, observed_cs, written, swapped)| Response::Rmw {
                observed,
                observed_cs,
                written,
                swapped
            }),
        status.prop_map(Response::Status),
        Just(Response::FaultSet),
        Just(Response::Pong),
        Just(Response::ReservationsReleased),
        (1..=16u16, ".{0,30}")
            .prop_map(|(c, message)| Response::Error { code: ErrorCode::from_u16(c), message }),
    ];
    (any::<u64>(), body).prop_map(|(corr, body)| ClientResponse { corr, body })
}

fn peer_message() -> impl Strategy<Value = PeerMessage> {
    let id = || (session(), any::<u64>());
    prop_oneof![
        any::<u32>().prop_map(|n| PeerMessage::Hello { from: NodeId(n) }),
        (
            any::<u64>(),
            bytes(),
            proptest::option::of(bytes()),
            carstamp(),
            proptest::option::of(id()),
            proptest::option::of(id()),
            records()
        )
            .prop_map(|(req, key, value, cs, rmw, acq, records)| PeerMessage::Write(
                Write {
                    req,
                    key,
                    value,
                    cs,
                    rmw_id: rmw.map(|(session, seq)| RmwId { session, seq }),
                    acq: acq.map(|(session, seq)| AcquireId { session, seq }),
                    records,
                }
            )),
        (any::<u64>(), bytes(), carstamp(), any::<bool>()).prop_map(
            |(req, key, cs, delinquent)| PeerMessage::WriteAck(WriteAck {
                req,
                key,
                cs,
                delinquent
            })
        ),
        kite_message(),
        any::<u64>().prop_map(|client_id| PeerMessage::LeaseQuery { client_id }),
        (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()).prop_map(
            |(client_id, lease_id, e, t)| PeerMessage::LeaseAnswer {
                client_id,
                status: strata_wire::LeaseStatus {
                    lease_id,
                    expiration: strata_wire::ClusterTime(e),
                    cluster_time: strata_wire::ClusterTime(t)
                },
            }
        ),
        (any::<u64>(), any::<u64>())
            .prop_map(|(req, lease_id)| PeerMessage::LeaseRenew { req, lease_id }),
        (any::<u64>(), any::<u32>(), any::<u32>(), any::<u16>(), bytes()).prop_map(
            |(id, table, shard, service, body)| PeerMessage::ToLeader {
                id,
                table,
                shard,
                service,
                body
            }
        ),
        (any::<u64>(), leader_answer())
            .prop_map(|(id, answer)| PeerMessage::LeaderAnswer { id, answer }),
        (any::<u64>(), proptest::option::of((any::<u64>(), any::<u64>()))).prop_map(|(req, g)| {
            PeerMessage::LeaseRenewed {
                req,
                grant: g.map(|(lease_id, e)| strata_wire::LeaseStatus {
                    lease_id,
                    expiration: strata_wire::ClusterTime(e),
                    cluster_time: strata_wire::ClusterTime(e / 2),
                }),
            }
        }),
    ]
}

fn leader_answer() -> impl Strategy<Value = strata_wire::peer::LeaderAnswer> {
    use strata_wire::peer::LeaderAnswer;
    prop_oneof![
        (any::<u32>(), any::<u32>(), bytes())
            .prop_map(|(by, epoch, body)| LeaderAnswer::Delivered { by: NodeId(by), epoch, body }),
        proptest::option::of(any::<u32>())
            .prop_map(|h| LeaderAnswer::NotLeader { hint: h.map(NodeId) }),
        proptest::collection::vec(any::<u32>(), 0..5)
            .prop_map(|r| LeaderAnswer::Moved { replicas: r.into_iter().map(NodeId).collect() }),
        Just(LeaderAnswer::Unknown),
    ]
}

fn rmw_id() -> impl Strategy<Value = RmwId> {
    (session(), any::<u64>()).prop_map(|(session, seq)| RmwId { session, seq })
}

fn acq_id() -> impl Strategy<Value = AcquireId> {
    (session(), any::<u64>()).prop_map(|(session, seq)| AcquireId { session, seq })
}

fn ballot() -> impl Strategy<Value = Ballot> {
    (any::<u32>(), any::<u32>()).prop_map(|(round, n)| Ballot { round, node: NodeId(n) })
}

fn version() -> impl Strategy<Value = Version> {
    (proptest::option::of(bytes()), carstamp(), proptest::option::of(rmw_id()), records())
        .prop_map(|(value, cs, rmw_id, records)| Version { value, cs, rmw_id, records })
}

fn tuple() -> impl Strategy<Value = Tuple> {
    (rmw_id(), carstamp(), proptest::option::of(bytes()), proptest::option::of(completion()))
        .prop_map(|(rmw_id, c, value, record)| Tuple { rmw_id, base: c.llc, value, record })
}

fn paxos_reply() -> impl Strategy<Value = PaxosReply> {
    let outcome = prop_oneof![
        Just(PaxosOutcome::Ack),
        (ballot(), tuple())
            .prop_map(|(ballot, tuple)| PaxosOutcome::AlreadyAccepted { ballot, tuple }),
        ballot().prop_map(|promised| PaxosOutcome::Nack { promised }),
        Just(PaxosOutcome::RmwCommitted),
        (any::<u32>(), proptest::option::of(rmw_id()))
            .prop_map(|(lc, lc_rmw)| PaxosOutcome::SlotTooSmall { lc, lc_rmw }),
        any::<u32>().prop_map(|lc| PaxosOutcome::SlotTooHigh { lc }),
    ];
    (any::<u64>(), bytes(), outcome, proptest::option::of(version()), any::<bool>()).prop_map(
        |(req, key, outcome, current, delinquent)| PaxosReply {
            req,
            key,
            outcome,
            current,
            delinquent,
        },
    )
}

/// The synchronisation messages of Kite §4 (ABD rounds, barriers, per-key Paxos).
fn kite_message() -> impl Strategy<Value = PeerMessage> {
    prop_oneof![
        (any::<u64>(), bytes()).prop_map(|(req, key)| PeerMessage::ReadTs { req, key }),
        (any::<u64>(), bytes(), carstamp(), records())
            .prop_map(|(req, key, cs, records)| PeerMessage::ReadTsReply { req, key, cs, records }),
        (any::<u64>(), bytes(), carstamp(), proptest::option::of(acq_id())).prop_map(
            |(req, key, known_cs, acq)| PeerMessage::Read(Read { req, key, known_cs, acq })
        ),
        (any::<u64>(), bytes(), carstamp(), proptest::option::of(version()), any::<bool>())
            .prop_map(|(req, key, cs, newer, delinquent)| PeerMessage::ReadReply(ReadReply {
                req,
                key,
                cs,
                newer,
                delinquent
            })),
        (any::<u64>(), any::<u64>()).prop_map(|(req, dm)| PeerMessage::SlowRelease { req, dm }),
        any::<u64>().prop_map(|req| PeerMessage::SlowReleaseAck { req }),
        acq_id().prop_map(|acq| PeerMessage::ResetBit { acq }),
        (any::<u64>(), bytes(), any::<u32>(), ballot(), rmw_id(), carstamp(), acq_id()).prop_map(
            |(req, key, slot, ballot, rmw_id, known_cs, acq)| PeerMessage::Propose(Propose {
                req,
                key,
                slot,
                ballot,
                rmw_id,
                known_cs,
                acq
            })
        ),
        paxos_reply().prop_map(PeerMessage::ProposeReply),
        (any::<u64>(), bytes(), any::<u32>(), ballot(), tuple(), acq_id()).prop_map(
            |(req, key, slot, ballot, tuple, acq)| PeerMessage::Accept(Accept {
                req,
                key,
                slot,
                ballot,
                tuple,
                acq
            })
        ),
        paxos_reply().prop_map(PeerMessage::AcceptReply),
        (
            any::<u64>(),
            bytes(),
            any::<u32>(),
            rmw_id(),
            proptest::option::of(bytes()),
            carstamp(),
            records()
        )
            .prop_map(|(req, key, slot, rmw_id, value, cs, records)| PeerMessage::Commit(
                Commit { req, key, slot, rmw_id, value, cs, records }
            )),
        (any::<u64>(), bytes(), carstamp()).prop_map(|(req, key, cs)| PeerMessage::CommitAck {
            req,
            key,
            cs
        }),
    ]
}

fn framed<M: strata_wire::Encode>(msg: &M) -> BytesMut {
    let mut buf = BytesMut::new();
    encode_frame(&mut buf, CLUSTER, msg);
    buf
}

fn round_trip<M: strata_wire::Encode + strata_wire::Decode + PartialEq + std::fmt::Debug>(msg: M) {
    let mut buf = framed(&msg);
    let payload = decode_frame(&mut buf, CLUSTER, MAX_FRAME).unwrap().expect("a whole frame");
    assert!(buf.is_empty(), "the frame is consumed exactly");
    assert_eq!(decode_message::<M>(payload).unwrap(), msg);
}

proptest! {
    #[test]
    fn client_requests_round_trip(msg in request()) { round_trip(msg) }

    #[test]
    fn client_responses_round_trip(msg in response()) { round_trip(msg) }

    #[test]
    fn peer_messages_round_trip(msg in peer_message()) { round_trip(msg) }

    /// The rc replica bounds a key's records by this size (docs/design.md, "Limits and
    /// bounds"): it must be the encoding's exact length, and no record's fixed part beyond
    /// `Completion::FIXED_BYTES`.
    #[test]
    fn records_know_their_encoded_length(rs in records()) {
        let mut buf = BytesMut::new();
        strata_wire::Encode::encode(&rs, &mut buf);
        prop_assert_eq!(rs.encoded_len(), buf.len());
        for c in &rs.done {
            let observed = match &c.result { RcResult::Rmw { observed: Some(v), .. } => v.len(), _ => 0 };
            prop_assert!(c.encoded_len() <= Completion::FIXED_BYTES + observed);
        }
    }

    /// Frames arrive split at any point: the decoder waits for the rest, then yields each in order.
    #[test]
    fn frames_reassemble_from_any_split(a in request(), b in request(), cut in 0usize..200) {
        let mut all = framed(&a);
        all.extend_from_slice(&framed(&b));
        let cut = cut.min(all.len());
        let mut buf = BytesMut::from(&all[..cut]);
        let mut got = Vec::new();
        while let Some(p) = decode_frame(&mut buf, CLUSTER, MAX_FRAME).unwrap() { got.push(p); }
        buf.extend_from_slice(&all[cut..]);
        while let Some(p) = decode_frame(&mut buf, CLUSTER, MAX_FRAME).unwrap() { got.push(p); }
        let got: Vec<ClientRequest> = got.into_iter().map(|p| decode_message(p).unwrap()).collect();
        prop_assert_eq!(got, vec![a, b]);
    }

    /// Any single flipped bit inside a frame is caught (by the length check, the checksum or
    /// the cluster id), never decoded into a different message.
    #[test]
    fn corruption_is_detected(msg in peer_message(), pos in any::<prop::sample::Index>(), bit in 0u8..8) {
        let mut buf = framed(&msg);
        let i = pos.index(buf.len());
        buf[i] ^= 1 << bit;
        if let Ok(Some(p)) = decode_frame(&mut buf, CLUSTER, MAX_FRAME) {
            prop_assert!(false, "corrupted frame decoded: {:?}", decode_message::<PeerMessage>(p));
        }
    }

    /// Arbitrary bytes never panic the decoders.
    #[test]
    fn garbage_never_panics(data in prop::collection::vec(any::<u8>(), 0..256)) {
        let mut buf = BytesMut::from(&data[..]);
        while let Ok(Some(p)) = decode_frame(&mut buf, CLUSTER, MAX_FRAME) {
            let _ = decode_message::<ClientRequest>(p.clone());
            let _ = decode_message::<PeerMessage>(p);
        }
        let _ = decode_message::<ClientRequest>(Bytes::from(data.clone()));
        let _ = decode_message::<ClientResponse>(Bytes::from(data.clone()));
        let _ = decode_message::<PeerMessage>(Bytes::from(data));
    }
}

#[test]
fn oversized_and_undersized_lengths_are_fatal() {
    let mut buf = BytesMut::from(&((MAX_FRAME as u32) + 1).to_le_bytes()[..]);
    let err = decode_frame(&mut buf, CLUSTER, MAX_FRAME).unwrap_err();
    assert!(err.is_fatal(), "{err}");
    let mut buf = BytesMut::from(&3u32.to_le_bytes()[..]);
    assert!(decode_frame(&mut buf, CLUSTER, MAX_FRAME).unwrap_err().is_fatal());
}

#[test]
fn wrong_cluster_is_reported_and_the_frame_consumed() {
    let mut buf = BytesMut::new();
    encode_frame(&mut buf, ClusterId(7), &PeerMessage::Hello { from: NodeId(1) });
    encode_frame(&mut buf, CLUSTER, &PeerMessage::Hello { from: NodeId(2) });
    let err = decode_frame(&mut buf, CLUSTER, MAX_FRAME).unwrap_err();
    assert_eq!(err, FrameError::WrongCluster { expected: CLUSTER, got: ClusterId(7) });
    assert!(!err.is_fatal());
    let next = decode_frame(&mut buf, CLUSTER, MAX_FRAME).unwrap().unwrap();
    assert_eq!(
        decode_message::<PeerMessage>(next).unwrap(),
        PeerMessage::Hello { from: NodeId(2) }
    );
}

#[test]
fn unknown_tags_and_trailing_bytes_are_errors() {
    use strata_wire::DecodeError;
    assert_eq!(
        decode_message::<PeerMessage>(Bytes::from_static(&[0x7e])),
        Err(DecodeError::UnknownTag { tag: 0x7e })
    );
    let mut buf = BytesMut::new();
    strata_wire::Encode::encode(&PeerMessage::Hello { from: NodeId(1) }, &mut buf);
    buf.extend_from_slice(b"x");
    assert_eq!(
        decode_message::<PeerMessage>(buf.freeze()),
        Err(DecodeError::Trailing { trailing: 1 })
    );
}

#[test]
fn hostile_sequence_count_does_not_allocate() {
    // A status response claiming 4 billion shards in a tiny frame must fail fast. The shards'
    // count is followed by the (empty) read-counter extension's count, the connection
    // counters (extension 2: a count and eight u64) and the (empty) lock-count,
    // explicit-invalidation and transaction-read extensions' counts: the last 80 bytes.
    let mut buf = BytesMut::new();
    strata_wire::Encode::encode(
        &ClientResponse { corr: 1, body: Response::Status(NodeStatus::default()) },
        &mut buf,
    );
    let n = buf.len() - 80;
    buf[n - 8..n - 4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        decode_message::<ClientResponse>(buf.freeze()),
        Err(strata_wire::DecodeError::Truncated { .. })
    ));
}
