//! RIFL's identifiers and the envelope of a linearizable RPC (`specs/rifl.md` §0, §4.1).
//!
//! Every mutating request that must take effect exactly once carries a [`Rifl`] envelope: the
//! RPC id every retry reuses, the client's `first_incomplete` (the acknowledgement that lets
//! servers collect completion records, §5.6) and the lease information servers validate from
//! the cluster clock (§5.5.3).

use std::fmt;

use bytes::{BufMut, BytesMut};

use crate::codec::{Decode, DecodeError, Encode, Reader};

/// The most RPCs of one client whose completion records cannot be collected (rifl.md §3.5,
/// R-G6): `first_incomplete <= seq < first_incomplete + WINDOW` for every request.
pub const WINDOW: u64 = 512;

/// A time of the cluster clock (rifl.md §0, §5.5.2): nanoseconds issued by the lease service,
/// never decreasing, also across its restarts and leader changes. Unrelated to any node's
/// local clock; servers only compare cluster times with cluster times.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ClusterTime(pub u64);

impl ClusterTime {
    pub const ZERO: ClusterTime = ClusterTime(0);

    pub const fn from_millis(ms: u64) -> ClusterTime {
        ClusterTime(ms * 1_000_000)
    }

    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    pub const fn saturating_add_nanos(self, ns: u64) -> ClusterTime {
        ClusterTime(self.0.saturating_add(ns))
    }
}

impl fmt::Display for ClusterTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:03}s", self.0 / 1_000_000_000, (self.0 / 1_000_000) % 1000)
    }
}

/// Names one linearizable RPC (rifl.md §0): the client's lease id and a sequence number the
/// client allocates from 1, increasing by 1. Every retry of the RPC carries the same id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct RpcId {
    pub client_id: u64,
    pub seq: u64,
}

impl fmt::Display for RpcId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "c{}#{}", self.client_id, self.seq)
    }
}

/// The client's latest lease grant (rifl.md §4.1 `lease_info`): its id, when it expires and
/// the cluster time of the grant. Servers raise their observed cluster time to `timestamp`
/// and ask the lease service only when `expiration` is not beyond it (§5.5.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct LeaseInfo {
    pub client_id: u64,
    pub expiration: ClusterTime,
    pub timestamp: ClusterTime,
}

/// The lease service's answer to `RenewLease` and `GetLeaseInfo` (rifl.md §4.2): `lease_id` 0
/// means expired or unknown. `cluster_time` is the service's clock when it answered; the grant
/// runs `expiration - cluster_time` from then.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LeaseStatus {
    pub lease_id: u64,
    pub expiration: ClusterTime,
    pub cluster_time: ClusterTime,
}

impl LeaseStatus {
    pub fn alive(&self) -> bool {
        self.lease_id != 0
    }
}

impl Encode for LeaseStatus {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u64_le(self.lease_id);
        self.expiration.encode(out);
        self.cluster_time.encode(out);
    }
}
impl Decode for LeaseStatus {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(LeaseStatus {
            lease_id: r.u64()?,
            expiration: ClusterTime::decode(r)?,
            cluster_time: ClusterTime::decode(r)?,
        })
    }
}

/// The envelope of a linearizable RPC (rifl.md §4.1): `rpc.client_id == lease.client_id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Rifl {
    pub rpc: RpcId,
    pub first_incomplete: u64,
    pub lease: LeaseInfo,
}

impl Rifl {
    /// rifl.md §5.3 S3 and R-D7: the client invariant `first_incomplete <= seq <
    /// first_incomplete + WINDOW`, a non-zero id, and a lease naming the same client. A request
    /// breaking it is a protocol error: it is neither executed nor used as an acknowledgement.
    pub fn check(&self) -> Result<(), &'static str> {
        if self.rpc.client_id == 0 || self.rpc.seq == 0 {
            return Err("client id 0 or seq 0");
        }
        if self.lease.client_id != self.rpc.client_id {
            return Err("the lease names another client");
        }
        if self.first_incomplete == 0 || self.first_incomplete > self.rpc.seq {
            return Err("first_incomplete is 0 or above seq");
        }
        if self.rpc.seq - self.first_incomplete >= WINDOW {
            return Err("seq is beyond the window of first_incomplete");
        }
        Ok(())
    }
}

impl Encode for ClusterTime {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u64_le(self.0);
    }
}
impl Decode for ClusterTime {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(ClusterTime(r.u64()?))
    }
}

impl Encode for RpcId {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u64_le(self.client_id);
        out.put_u64_le(self.seq);
    }
}
impl Decode for RpcId {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(RpcId { client_id: r.u64()?, seq: r.u64()? })
    }
}

impl Encode for LeaseInfo {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u64_le(self.client_id);
        self.expiration.encode(out);
        self.timestamp.encode(out);
    }
}
impl Decode for LeaseInfo {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(LeaseInfo {
            client_id: r.u64()?,
            expiration: ClusterTime::decode(r)?,
            timestamp: ClusterTime::decode(r)?,
        })
    }
}

impl Encode for Rifl {
    fn encode(&self, out: &mut BytesMut) {
        // The lease's client id is the RPC's: sent once.
        self.rpc.encode(out);
        out.put_u64_le(self.first_incomplete);
        self.lease.expiration.encode(out);
        self.lease.timestamp.encode(out);
    }
}
impl Decode for Rifl {
    fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        let rpc = RpcId::decode(r)?;
        let first_incomplete = r.u64()?;
        let expiration = ClusterTime::decode(r)?;
        let timestamp = ClusterTime::decode(r)?;
        Ok(Rifl {
            rpc,
            first_incomplete,
            lease: LeaseInfo { client_id: rpc.client_id, expiration, timestamp },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn envelope(seq: u64, first_incomplete: u64) -> Rifl {
        Rifl {
            rpc: RpcId { client_id: 7, seq },
            first_incomplete,
            lease: LeaseInfo {
                client_id: 7,
                expiration: ClusterTime(10),
                timestamp: ClusterTime(3),
            },
        }
    }

    #[test]
    fn the_envelope_round_trips() {
        let e = envelope(600, 100);
        let mut out = BytesMut::new();
        e.encode(&mut out);
        assert_eq!(out.len(), 40);
        let mut r = Reader::new(Bytes::from(out.to_vec()));
        assert_eq!(Rifl::decode(&mut r).unwrap(), e);
        r.finish().unwrap();
    }

    #[test]
    fn check_enforces_the_window_and_the_ids() {
        assert!(envelope(1, 1).check().is_ok());
        assert!(envelope(512, 1).check().is_ok());
        assert!(
            envelope(513, 1).check().is_err(),
            "seq = first_incomplete + 512 is out of the window"
        );
        assert!(envelope(5, 6).check().is_err(), "first_incomplete above seq");
        assert!(envelope(5, 0).check().is_err());
        assert!(envelope(0, 0).check().is_err());
        let mut other = envelope(3, 1);
        other.lease.client_id = 8;
        assert!(other.check().is_err());
    }
}
