//! Node <-> node messages. Tags 0x80..=0xff, explicit and never reused.
//!
//! A peer connection starts with `Hello` naming the dialing node; every later frame on it is
//! a protocol message from that node. Messages may be lost, duplicated, delayed or reordered
//! (across reconnects): every handler is idempotent (Kite §4).

use bytes::{BufMut, Bytes, BytesMut};

use crate::codec::{get_value, put_bool, put_bytes, put_option, put_value, Decode, DecodeError, Encode, Reader};
use crate::ids::{AcquireId, Carstamp, NodeId, RmwId};

pub mod peer_tag {
    pub const HELLO: u8 = 0x80;
    pub const WRITE: u8 = 0x81;
    pub const WRITE_ACK: u8 = 0x82;
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerMessage {
    Hello { from: NodeId },
    Write(Write),
    WriteAck(WriteAck),
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
}

/// Reply to `Write`. Echoes the key and version as well as `req`, so the sender can credit the
/// ack to its pending-write record without remembering every request it sent (Kite §5.1.7:
/// an ack for a version `>= cs` of the key counts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteAck {
    pub req: u64,
    pub key: Bytes,
    pub cs: Carstamp,
    pub delinquent: bool,
}

impl Encode for PeerMessage {
    fn encode(&self, out: &mut BytesMut) {
        match self {
            PeerMessage::Hello { from } => {
                out.put_u8(peer_tag::HELLO);
                from.encode(out);
            }
            PeerMessage::Write(w) => {
                out.put_u8(peer_tag::WRITE);
                out.put_u64_le(w.req);
                put_bytes(out, &w.key);
                put_value(out, &w.value);
                w.cs.encode(out);
                put_option(out, &w.rmw_id, |o, id| id.encode(o));
                put_option(out, &w.acq, |o, id| id.encode(o));
            }
            PeerMessage::WriteAck(a) => {
                out.put_u8(peer_tag::WRITE_ACK);
                out.put_u64_le(a.req);
                put_bytes(out, &a.key);
                a.cs.encode(out);
                put_bool(out, a.delinquent);
            }
        }
    }
}

impl Decode for PeerMessage {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        match r.u8()? {
            peer_tag::HELLO => Ok(PeerMessage::Hello { from: NodeId::decode(r)? }),
            peer_tag::WRITE => Ok(PeerMessage::Write(Write {
                req: r.u64()?,
                key: r.bytes()?,
                value: get_value(r)?,
                cs: Carstamp::decode(r)?,
                rmw_id: r.option(RmwId::decode)?,
                acq: r.option(AcquireId::decode)?,
            })),
            peer_tag::WRITE_ACK => Ok(PeerMessage::WriteAck(WriteAck {
                req: r.u64()?,
                key: r.bytes()?,
                cs: Carstamp::decode(r)?,
                delinquent: r.bool()?,
            })),
            tag => Err(DecodeError::UnknownTag { tag }),
        }
    }
}
