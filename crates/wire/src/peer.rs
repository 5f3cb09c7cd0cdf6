//! Node <-> node messages (Kite §4). Tags 0x80..=0xff, explicit and never reused.
//!
//! A peer connection starts with `Hello` naming the dialing node; every later frame on it is
//! a protocol message from that node. Messages may be lost, duplicated, delayed or reordered
//! (across reconnects): every handler is idempotent (Kite §4), and every reply echoes the
//! request's `req` and `key` so that the requester can match it without other state.

use bytes::{BufMut, Bytes, BytesMut};

use crate::codec::{
    get_value, put_bool, put_bytes, put_option, put_seq, put_value, Decode, DecodeError, Encode,
    Reader,
};
use crate::ids::{AcquireId, Ballot, Carstamp, Llc, NodeId, RmwId};
use crate::log::LogMessage;
use crate::rifl::{LeaseStatus, RpcId};

pub mod peer_tag {
    pub const HELLO: u8 = 0x80;
    pub const WRITE: u8 = 0x81;
    pub const WRITE_ACK: u8 = 0x82;
    pub const READ_TS: u8 = 0x83;
    pub const READ_TS_REPLY: u8 = 0x84;
    pub const READ: u8 = 0x85;
    pub const READ_REPLY: u8 = 0x86;
    pub const SLOW_RELEASE: u8 = 0x87;
    pub const SLOW_RELEASE_ACK: u8 = 0x88;
    pub const RESET_BIT: u8 = 0x89;
    pub const PROPOSE: u8 = 0x8a;
    pub const PROPOSE_REPLY: u8 = 0x8b;
    pub const ACCEPT: u8 = 0x8c;
    pub const ACCEPT_REPLY: u8 = 0x8d;
    pub const COMMIT: u8 = 0x8e;
    pub const COMMIT_ACK: u8 = 0x8f;
    // 0x90..=0x9f: the log engine's own messages (`crate::log::log_tag`), carried inside SHARD.
    /// A log-table shard message: table id, shard, then the `LogMessage` with its own tag.
    pub const SHARD: u8 = 0xa0;
    /// RIFL: a node asks the lease service's leader about a client's lease (rifl.md §4.2
    /// `GetLeaseInfo`, §5.5.3), and gets the answer.
    pub const LEASE_QUERY: u8 = 0xa1;
    pub const LEASE_ANSWER: u8 = 0xa2;
    /// RIFL: a client's `RenewLease` that reached a node other than the service's leader,
    /// forwarded to it, and the grant on the way back.
    pub const LEASE_RENEW: u8 = 0xa3;
    pub const LEASE_RENEWED: u8 = 0xa4;
    /// A node-level message for the leader of (table, shard), and its answer (the host's
    /// courier: `strata_host::courier`).
    pub const TO_LEADER: u8 = 0xa5;
    pub const LEADER_ANSWER: u8 = 0xa6;
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerMessage {
    Hello {
        from: NodeId,
    },
    Write(Write),
    WriteAck(WriteAck),
    /// Kite §4 msg 2: the first round of a release or slow relaxed write.
    ReadTs {
        req: u64,
        key: Bytes,
    },
    /// `records`: the key's RIFL completion records, so a retried release finds an earlier
    /// attempt that reached any replica of the round's quorum (rifl.md R-D23).
    ReadTsReply {
        req: u64,
        key: Bytes,
        cs: Carstamp,
        records: KeyRecords,
    },
    Read(Read),
    ReadReply(ReadReply),
    /// Kite §4 msg 4: the DM-set of a barrier that timed out (bit `i` = node `i`).
    SlowRelease {
        req: u64,
        dm: u64,
    },
    SlowReleaseAck {
        req: u64,
    },
    /// Kite §4 msg 5: the acquire `acq` bumped its node's epoch; clear the bit it observed.
    ResetBit {
        acq: AcquireId,
    },
    Propose(Propose),
    ProposeReply(PaxosReply),
    Accept(Accept),
    AcceptReply(PaxosReply),
    Commit(Commit),
    /// Echoes the committed version, so it credits the sender's pending record (§5.1.7).
    CommitAck {
        req: u64,
        key: Bytes,
        cs: Carstamp,
    },
    /// A message between the replicas of one log-table shard (ORCA §4.2). `table` is the
    /// table's id (`client::table_id`): the same on every node. `generation` names the
    /// shard's replica group (0 at creation, +1 per move, rifl.md §5.7): a message of another
    /// generation is dropped, so a retired group can never disturb its successor.
    Shard {
        table: u32,
        shard: u32,
        generation: u32,
        msg: LogMessage,
    },
    /// rifl.md §5.5.3 / §5.6: "is `client_id`'s lease alive?", to the lease service's leader.
    LeaseQuery {
        client_id: u64,
    },
    /// The service's answer about `client_id` (`status.lease_id` 0: expired or unknown).
    LeaseAnswer {
        client_id: u64,
        status: LeaseStatus,
    },
    /// A client's `RenewLease { lease_id }` forwarded to the service's leader; `req` is the
    /// forwarding node's own number for it.
    LeaseRenew {
        req: u64,
        lease_id: u64,
    },
    /// The grant for forwarded renewal `req` (`None`: this node does not serve the service).
    LeaseRenewed {
        req: u64,
        grant: Option<LeaseStatus>,
    },
    /// A node-level message for whichever node leads `(table, shard)`: `id` is the sender's
    /// number for it, `service` the node-level core that handles it (`strata_host::courier`),
    /// `body` that service's own encoding.
    ToLeader {
        id: u64,
        table: u32,
        shard: u32,
        service: u16,
        body: Bytes,
    },
    /// The answer to `ToLeader` `id`.
    LeaderAnswer {
        id: u64,
        answer: LeaderAnswer,
    },
}

/// What became of a `ToLeader` message at the node it reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaderAnswer {
    /// Handled by `by`, the shard's ready leader in `epoch`: the service's reply.
    Delivered { by: NodeId, epoch: u32, body: Bytes },
    /// This node does not lead the shard: try `hint` (or another replica).
    NotLeader { hint: Option<NodeId> },
    /// The shard lives on these nodes now (rifl.md §5.7).
    Moved { replicas: Vec<NodeId> },
    /// No such table, shard or service here: final.
    Unknown,
}

impl Encode for LeaderAnswer {
    fn encode(&self, out: &mut BytesMut) {
        match self {
            LeaderAnswer::Delivered { by, epoch, body } => {
                out.put_u8(0);
                by.encode(out);
                out.put_u32_le(*epoch);
                put_bytes(out, body);
            }
            LeaderAnswer::NotLeader { hint } => {
                out.put_u8(1);
                put_option(out, hint, |o, n| n.encode(o));
            }
            LeaderAnswer::Moved { replicas } => {
                out.put_u8(2);
                put_seq(out, replicas, |o, n| n.encode(o));
            }
            LeaderAnswer::Unknown => out.put_u8(3),
        }
    }
}

impl Decode for LeaderAnswer {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(match r.u8()? {
            0 => LeaderAnswer::Delivered {
                by: NodeId::decode(r)?,
                epoch: r.u32()?,
                body: r.bytes()?,
            },
            1 => LeaderAnswer::NotLeader { hint: r.option(NodeId::decode)? },
            2 => LeaderAnswer::Moved { replicas: r.seq(NodeId::decode)? },
            3 => LeaderAnswer::Unknown,
            tag => return Err(DecodeError::UnknownTag { tag }),
        })
    }
}

/// Kite §4 message 1: install `value` at version `cs` of `key` (if newer than the replica's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    /// Sender-unique request number; the ack echoes it.
    pub req: u64,
    pub key: Bytes,
    /// `None` = the absent value (a delete's tombstone).
    pub value: Option<Bytes>,
    pub cs: Carstamp,
    /// Some iff `cs.pno > 0` (an RMW's version).
    pub rmw_id: Option<RmwId>,
    /// Some only for an acquire's write-back round.
    pub acq: Option<AcquireId>,
    /// RIFL completion records travelling with the version (rifl.md R-D23): the record of
    /// the linearizable RPC that created it, or, for a write-back, the key's records.
    pub records: KeyRecords,
}

/// Reply to `Write`. Echoes the key and the version the receiver now holds, so the sender can
/// credit the ack to its pending-write record without remembering every request it sent
/// (Kite §5.1.7: an ack for a version `>= cs` of the key counts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteAck {
    pub req: u64,
    pub key: Bytes,
    pub cs: Carstamp,
    pub delinquent: bool,
}

/// Kite §4 message 3: an acquire's read round (`acq` Some) or a slow relaxed read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    pub req: u64,
    pub key: Bytes,
    /// The requester's local version: the reply carries the value only if it holds a newer one.
    pub known_cs: Carstamp,
    pub acq: Option<AcquireId>,
}

/// A replica's version of a key, as carried by replies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    pub value: Option<Bytes>,
    pub cs: Carstamp,
    /// The RMW that created `cs`, iff `cs.pno > 0`.
    pub rmw_id: Option<RmwId>,
    /// The key's RIFL completion records at the replica (rifl.md R-D23).
    pub records: KeyRecords,
}

/// What a completed linearizable rc RPC returned: the result part of its completion record
/// (rifl.md §3.4), returned again to every retry (R-G2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RcResult {
    /// A put, delete or release: the version it created.
    Written { cs: Carstamp },
    /// A fetch-and-add or compare-and-swap: what it observed and did.
    Rmw { observed: Option<Bytes>, observed_cs: Carstamp, written: Option<Carstamp>, swapped: bool },
}

/// The completion record of one linearizable rc RPC (rifl.md §3.4): its id, the ack
/// watermark its request carried (`first_incomplete - 1`) and its result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    pub rpc: RpcId,
    pub ack: u64,
    pub result: RcResult,
}

/// The RIFL completion records kept with one key, replicated with its versions (rifl.md
/// R-D23: in an rc table the record lives in the key's replicated metadata). `floors` are
/// per-client ack watermarks `(client_id, ack)` below which the records were collected (the
/// durable ack records of R-D8); `done` the records above them, sorted by RPC id. Merging
/// two sets is a union (see `strata_rc::records`), so replicas converge whatever order the
/// versions arrive in. Empty on the wire costs one byte.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyRecords {
    pub floors: Vec<(u64, u64)>,
    pub done: Vec<Completion>,
}

impl KeyRecords {
    pub fn is_empty(&self) -> bool {
        self.floors.is_empty() && self.done.is_empty()
    }

    /// The exact size of this set's encoding: what it adds to every message that carries the
    /// key's whole set (a `COMMIT`, a write-back, a catch-up; docs/design.md, "Limits and
    /// bounds").
    pub fn encoded_len(&self) -> usize {
        if self.is_empty() {
            return 1;
        }
        1 + 4
            + 16 * self.floors.len()
            + 4
            + self.done.iter().map(Completion::encoded_len).sum::<usize>()
    }
}

impl Completion {
    /// The bytes of a record beside its observed value (an RPC id, the ack, the largest
    /// result without its value).
    pub const FIXED_BYTES: usize = 16 + 8 + 1 + 5 + 16 + 17 + 1;

    /// The exact size of this record's encoding.
    pub fn encoded_len(&self) -> usize {
        16 + 8
            + match &self.result {
                RcResult::Written { .. } => 1 + 16,
                RcResult::Rmw { observed, written, .. } => {
                    1 + 1
                        + observed.as_ref().map_or(0, |v| 4 + v.len())
                        + 16
                        + 1
                        + if written.is_some() { 16 } else { 0 }
                        + 1
                }
            }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadReply {
    pub req: u64,
    pub key: Bytes,
    pub cs: Carstamp,
    /// Some iff `cs > known_cs` (Kite §5.9 O4).
    pub newer: Option<Version>,
    pub delinquent: bool,
}

/// The outcome proposed for a Paxos slot (Kite §3.2): slot `n` decided with `Tuple` creates
/// version `(base, n)` holding `value`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tuple {
    pub rmw_id: RmwId,
    pub base: Llc,
    pub value: Option<Bytes>,
    /// The completion record of the linearizable RPC this RMW executes (rifl.md §5.3 S6: the
    /// record is decided in the same slot as the mutation, so whoever learns the one learns
    /// the other).
    pub record: Option<Completion>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Propose {
    pub req: u64,
    pub key: Bytes,
    pub slot: u32,
    pub ballot: Ballot,
    pub rmw_id: RmwId,
    pub known_cs: Carstamp,
    pub acq: AcquireId,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accept {
    pub req: u64,
    pub key: Bytes,
    pub slot: u32,
    pub ballot: Ballot,
    pub tuple: Tuple,
    pub acq: AcquireId,
}

/// Kite §4 messages 6-7: what an acceptor answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PaxosOutcome {
    Ack,
    /// Propose only: the acceptor already accepted `tuple` at `ballot` for this slot.
    AlreadyAccepted {
        ballot: Ballot,
        tuple: Tuple,
    },
    Nack {
        promised: Ballot,
    },
    /// The RMW is already committed (it is in the acceptor's registry).
    RmwCommitted,
    /// The slot is already decided here: `lc` is the acceptor's last committed slot.
    SlotTooSmall {
        lc: u32,
        lc_rmw: Option<RmwId>,
    },
    /// The acceptor lags: it has not learned slot `slot - 1` yet.
    SlotTooHigh {
        lc: u32,
    },
}

/// Reply to `Propose` or `Accept`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PaxosReply {
    pub req: u64,
    pub key: Bytes,
    pub outcome: PaxosOutcome,
    /// The acceptor's version when newer than the proposer's `known_cs` (always for SlotTooSmall).
    pub current: Option<Version>,
    pub delinquent: bool,
}

/// Kite §4 message 8: slot `slot` of `key` was decided with `rmw_id`; `cs` is either that
/// slot's version or (catch-up) the sender's newer current version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Commit {
    pub req: u64,
    pub key: Bytes,
    pub slot: u32,
    pub rmw_id: RmwId,
    pub value: Option<Bytes>,
    pub cs: Carstamp,
    /// The sender's completion records of the key (its own tuple's included), so a learner
    /// knows the records of every slot up to `slot` (rifl.md R-D23).
    pub records: KeyRecords,
}

// ---- encoding ----

impl Encode for RcResult {
    fn encode(&self, out: &mut BytesMut) {
        match self {
            RcResult::Written { cs } => {
                out.put_u8(0);
                cs.encode(out);
            }
            RcResult::Rmw { observed, observed_cs, written, swapped } => {
                out.put_u8(1);
                put_value(out, observed);
                observed_cs.encode(out);
                put_option(out, written, |o, cs| cs.encode(o));
                put_bool(out, *swapped);
            }
        }
    }
}
impl Decode for RcResult {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(match r.u8()? {
            0 => RcResult::Written { cs: Carstamp::decode(r)? },
            1 => RcResult::Rmw {
                observed: get_value(r)?,
                observed_cs: Carstamp::decode(r)?,
                written: r.option(Carstamp::decode)?,
                swapped: r.bool()?,
            },
            v => return Err(DecodeError::Invalid { what: "rc result", value: v as u64 }),
        })
    }
}

impl Encode for Completion {
    fn encode(&self, out: &mut BytesMut) {
        self.rpc.encode(out);
        out.put_u64_le(self.ack);
        self.result.encode(out);
    }
}
impl Decode for Completion {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Completion { rpc: RpcId::decode(r)?, ack: r.u64()?, result: RcResult::decode(r)? })
    }
}

/// Encoded as an option: one byte when empty (the common case on the hot path).
impl Encode for KeyRecords {
    fn encode(&self, out: &mut BytesMut) {
        if self.is_empty() {
            out.put_u8(0);
            return;
        }
        out.put_u8(1);
        put_seq(out, &self.floors, |o, (c, a)| {
            o.put_u64_le(*c);
            o.put_u64_le(*a);
        });
        put_seq(out, &self.done, |o, c| c.encode(o));
    }
}
impl Decode for KeyRecords {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(r.option(|r| {
            Ok(KeyRecords {
                floors: r.seq(|r| Ok((r.u64()?, r.u64()?)))?,
                done: r.seq(Completion::decode)?,
            })
        })?
        .unwrap_or_default())
    }
}

impl Encode for Version {
    fn encode(&self, out: &mut BytesMut) {
        put_value(out, &self.value);
        self.cs.encode(out);
        put_option(out, &self.rmw_id, |o, id| id.encode(o));
        self.records.encode(out);
    }
}
impl Decode for Version {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Version {
            value: get_value(r)?,
            cs: Carstamp::decode(r)?,
            rmw_id: r.option(RmwId::decode)?,
            records: KeyRecords::decode(r)?,
        })
    }
}

impl Encode for Tuple {
    fn encode(&self, out: &mut BytesMut) {
        self.rmw_id.encode(out);
        self.base.encode(out);
        put_value(out, &self.value);
        put_option(out, &self.record, |o, c| c.encode(o));
    }
}
impl Decode for Tuple {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(Tuple {
            rmw_id: RmwId::decode(r)?,
            base: Llc::decode(r)?,
            value: get_value(r)?,
            record: r.option(Completion::decode)?,
        })
    }
}

mod outcome_tag {
    pub const ACK: u8 = 0;
    pub const ALREADY_ACCEPTED: u8 = 1;
    pub const NACK: u8 = 2;
    pub const RMW_COMMITTED: u8 = 3;
    pub const SLOT_TOO_SMALL: u8 = 4;
    pub const SLOT_TOO_HIGH: u8 = 5;
}

impl Encode for PaxosOutcome {
    fn encode(&self, out: &mut BytesMut) {
        use outcome_tag::*;
        match self {
            PaxosOutcome::Ack => out.put_u8(ACK),
            PaxosOutcome::AlreadyAccepted { ballot, tuple } => {
                out.put_u8(ALREADY_ACCEPTED);
                ballot.encode(out);
                tuple.encode(out);
            }
            PaxosOutcome::Nack { promised } => {
                out.put_u8(NACK);
                promised.encode(out);
            }
            PaxosOutcome::RmwCommitted => out.put_u8(RMW_COMMITTED),
            PaxosOutcome::SlotTooSmall { lc, lc_rmw } => {
                out.put_u8(SLOT_TOO_SMALL);
                out.put_u32_le(*lc);
                put_option(out, lc_rmw, |o, id| id.encode(o));
            }
            PaxosOutcome::SlotTooHigh { lc } => {
                out.put_u8(SLOT_TOO_HIGH);
                out.put_u32_le(*lc);
            }
        }
    }
}
impl Decode for PaxosOutcome {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        use outcome_tag::*;
        Ok(match r.u8()? {
            ACK => PaxosOutcome::Ack,
            ALREADY_ACCEPTED => PaxosOutcome::AlreadyAccepted {
                ballot: Ballot::decode(r)?,
                tuple: Tuple::decode(r)?,
            },
            NACK => PaxosOutcome::Nack { promised: Ballot::decode(r)? },
            RMW_COMMITTED => PaxosOutcome::RmwCommitted,
            SLOT_TOO_SMALL => {
                PaxosOutcome::SlotTooSmall { lc: r.u32()?, lc_rmw: r.option(RmwId::decode)? }
            }
            SLOT_TOO_HIGH => PaxosOutcome::SlotTooHigh { lc: r.u32()? },
            v => return Err(DecodeError::Invalid { what: "paxos outcome", value: v as u64 }),
        })
    }
}

impl Encode for PaxosReply {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u64_le(self.req);
        put_bytes(out, &self.key);
        self.outcome.encode(out);
        put_option(out, &self.current, |o, v| v.encode(o));
        put_bool(out, self.delinquent);
    }
}
impl Decode for PaxosReply {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(PaxosReply {
            req: r.u64()?,
            key: r.bytes()?,
            outcome: PaxosOutcome::decode(r)?,
            current: r.option(Version::decode)?,
            delinquent: r.bool()?,
        })
    }
}

impl Encode for PeerMessage {
    fn encode(&self, out: &mut BytesMut) {
        use peer_tag::*;
        match self {
            PeerMessage::Hello { from } => {
                out.put_u8(HELLO);
                from.encode(out);
            }
            PeerMessage::Write(w) => {
                out.put_u8(WRITE);
                out.put_u64_le(w.req);
                put_bytes(out, &w.key);
                put_value(out, &w.value);
                w.cs.encode(out);
                put_option(out, &w.rmw_id, |o, id| id.encode(o));
                put_option(out, &w.acq, |o, id| id.encode(o));
                w.records.encode(out);
            }
            PeerMessage::WriteAck(a) => {
                out.put_u8(WRITE_ACK);
                out.put_u64_le(a.req);
                put_bytes(out, &a.key);
                a.cs.encode(out);
                put_bool(out, a.delinquent);
            }
            PeerMessage::ReadTs { req, key } => {
                out.put_u8(READ_TS);
                out.put_u64_le(*req);
                put_bytes(out, key);
            }
            PeerMessage::ReadTsReply { req, key, cs, records } => {
                out.put_u8(READ_TS_REPLY);
                out.put_u64_le(*req);
                put_bytes(out, key);
                cs.encode(out);
                records.encode(out);
            }
            PeerMessage::Read(m) => {
                out.put_u8(READ);
                out.put_u64_le(m.req);
                put_bytes(out, &m.key);
                m.known_cs.encode(out);
                put_option(out, &m.acq, |o, id| id.encode(o));
            }
            PeerMessage::ReadReply(m) => {
                out.put_u8(READ_REPLY);
                out.put_u64_le(m.req);
                put_bytes(out, &m.key);
                m.cs.encode(out);
                put_option(out, &m.newer, |o, v| v.encode(o));
                put_bool(out, m.delinquent);
            }
            PeerMessage::SlowRelease { req, dm } => {
                out.put_u8(SLOW_RELEASE);
                out.put_u64_le(*req);
                out.put_u64_le(*dm);
            }
            PeerMessage::SlowReleaseAck { req } => {
                out.put_u8(SLOW_RELEASE_ACK);
                out.put_u64_le(*req);
            }
            PeerMessage::ResetBit { acq } => {
                out.put_u8(RESET_BIT);
                acq.encode(out);
            }
            PeerMessage::Propose(m) => {
                out.put_u8(PROPOSE);
                out.put_u64_le(m.req);
                put_bytes(out, &m.key);
                out.put_u32_le(m.slot);
                m.ballot.encode(out);
                m.rmw_id.encode(out);
                m.known_cs.encode(out);
                m.acq.encode(out);
            }
            PeerMessage::ProposeReply(m) => {
                out.put_u8(PROPOSE_REPLY);
                m.encode(out);
            }
            PeerMessage::Accept(m) => {
                out.put_u8(ACCEPT);
                out.put_u64_le(m.req);
                put_bytes(out, &m.key);
                out.put_u32_le(m.slot);
                m.ballot.encode(out);
                m.tuple.encode(out);
                m.acq.encode(out);
            }
            PeerMessage::AcceptReply(m) => {
                out.put_u8(ACCEPT_REPLY);
                m.encode(out);
            }
            PeerMessage::Commit(m) => {
                out.put_u8(COMMIT);
                out.put_u64_le(m.req);
                put_bytes(out, &m.key);
                out.put_u32_le(m.slot);
                m.rmw_id.encode(out);
                put_value(out, &m.value);
                m.cs.encode(out);
                m.records.encode(out);
            }
            PeerMessage::CommitAck { req, key, cs } => {
                out.put_u8(COMMIT_ACK);
                out.put_u64_le(*req);
                put_bytes(out, key);
                cs.encode(out);
            }
            PeerMessage::Shard { table, shard, generation, msg } => {
                out.put_u8(SHARD);
                out.put_u32_le(*table);
                out.put_u32_le(*shard);
                out.put_u32_le(*generation);
                msg.encode(out);
            }
            PeerMessage::LeaseQuery { client_id } => {
                out.put_u8(LEASE_QUERY);
                out.put_u64_le(*client_id);
            }
            PeerMessage::LeaseAnswer { client_id, status } => {
                out.put_u8(LEASE_ANSWER);
                out.put_u64_le(*client_id);
                status.encode(out);
            }
            PeerMessage::LeaseRenew { req, lease_id } => {
                out.put_u8(LEASE_RENEW);
                out.put_u64_le(*req);
                out.put_u64_le(*lease_id);
            }
            PeerMessage::LeaseRenewed { req, grant } => {
                out.put_u8(LEASE_RENEWED);
                out.put_u64_le(*req);
                put_option(out, grant, |o, g| g.encode(o));
            }
            PeerMessage::ToLeader { id, table, shard, service, body } => {
                out.put_u8(TO_LEADER);
                out.put_u64_le(*id);
                out.put_u32_le(*table);
                out.put_u32_le(*shard);
                out.put_u16_le(*service);
                put_bytes(out, body);
            }
            PeerMessage::LeaderAnswer { id, answer } => {
                out.put_u8(LEADER_ANSWER);
                out.put_u64_le(*id);
                answer.encode(out);
            }
        }
    }
}

impl Decode for PeerMessage {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        use peer_tag::*;
        Ok(match r.u8()? {
            HELLO => PeerMessage::Hello { from: NodeId::decode(r)? },
            WRITE => PeerMessage::Write(Write {
                req: r.u64()?,
                key: r.bytes()?,
                value: get_value(r)?,
                cs: Carstamp::decode(r)?,
                rmw_id: r.option(RmwId::decode)?,
                acq: r.option(AcquireId::decode)?,
                records: KeyRecords::decode(r)?,
            }),
            WRITE_ACK => PeerMessage::WriteAck(WriteAck {
                req: r.u64()?,
                key: r.bytes()?,
                cs: Carstamp::decode(r)?,
                delinquent: r.bool()?,
            }),
            READ_TS => PeerMessage::ReadTs { req: r.u64()?, key: r.bytes()? },
            READ_TS_REPLY => PeerMessage::ReadTsReply {
                req: r.u64()?,
                key: r.bytes()?,
                cs: Carstamp::decode(r)?,
                records: KeyRecords::decode(r)?,
            },
            READ => PeerMessage::Read(Read {
                req: r.u64()?,
                key: r.bytes()?,
                known_cs: Carstamp::decode(r)?,
                acq: r.option(AcquireId::decode)?,
            }),
            READ_REPLY => PeerMessage::ReadReply(ReadReply {
                req: r.u64()?,
                key: r.bytes()?,
                cs: Carstamp::decode(r)?,
                newer: r.option(Version::decode)?,
                delinquent: r.bool()?,
            }),
            SLOW_RELEASE => PeerMessage::SlowRelease { req: r.u64()?, dm: r.u64()? },
            SLOW_RELEASE_ACK => PeerMessage::SlowReleaseAck { req: r.u64()? },
            RESET_BIT => PeerMessage::ResetBit { acq: AcquireId::decode(r)? },
            PROPOSE => PeerMessage::Propose(Propose {
                req: r.u64()?,
                key: r.bytes()?,
                slot: r.u32()?,
                ballot: Ballot::decode(r)?,
                rmw_id: RmwId::decode(r)?,
                known_cs: Carstamp::decode(r)?,
                acq: AcquireId::decode(r)?,
            }),
            PROPOSE_REPLY => PeerMessage::ProposeReply(PaxosReply::decode(r)?),
            ACCEPT => PeerMessage::Accept(Accept {
                req: r.u64()?,
                key: r.bytes()?,
                slot: r.u32()?,
                ballot: Ballot::decode(r)?,
                tuple: Tuple::decode(r)?,
                acq: AcquireId::decode(r)?,
            }),
            ACCEPT_REPLY => PeerMessage::AcceptReply(PaxosReply::decode(r)?),
            COMMIT => PeerMessage::Commit(Commit {
                req: r.u64()?,
                key: r.bytes()?,
                slot: r.u32()?,
                rmw_id: RmwId::decode(r)?,
                value: get_value(r)?,
                cs: Carstamp::decode(r)?,
                records: KeyRecords::decode(r)?,
            }),
            COMMIT_ACK => {
                PeerMessage::CommitAck { req: r.u64()?, key: r.bytes()?, cs: Carstamp::decode(r)? }
            }
            SHARD => PeerMessage::Shard {
                table: r.u32()?,
                shard: r.u32()?,
                generation: r.u32()?,
                msg: LogMessage::decode(r)?,
            },
            LEASE_QUERY => PeerMessage::LeaseQuery { client_id: r.u64()? },
            LEASE_ANSWER => {
                PeerMessage::LeaseAnswer { client_id: r.u64()?, status: LeaseStatus::decode(r)? }
            }
            LEASE_RENEW => PeerMessage::LeaseRenew { req: r.u64()?, lease_id: r.u64()? },
            LEASE_RENEWED => {
                PeerMessage::LeaseRenewed { req: r.u64()?, grant: r.option(LeaseStatus::decode)? }
            }
            TO_LEADER => PeerMessage::ToLeader {
                id: r.u64()?,
                table: r.u32()?,
                shard: r.u32()?,
                service: r.u16()?,
                body: r.bytes()?,
            },
            LEADER_ANSWER => {
                PeerMessage::LeaderAnswer { id: r.u64()?, answer: LeaderAnswer::decode(r)? }
            }
            tag => return Err(DecodeError::UnknownTag { tag }),
        })
    }
}
