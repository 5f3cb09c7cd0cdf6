//! What goes in and out of an rc replica core.

use bytes::Bytes;
use strata_wire::client::{ClientRequest, ClientResponse};
use strata_wire::{Carstamp, SessionId};

/// Opaque number by which the driver routes replies back to a client connection.
pub type Route = u64;

/// An input from a client connection.
#[derive(Clone, Debug)]
pub enum RcInput {
    /// A decoded client request arriving on connection `route`.
    Client { route: Route, req: ClientRequest },
    /// Connection `route` is gone: its sessions are closed (Kite §6, client crash).
    Disconnected { route: Route },
}

/// A response to send on connection `route`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RcReply {
    pub route: Route,
    pub resp: ClientResponse,
}

/// Observable facts for tests and tracing (Kite §2.5, test hook).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RcEvent {
    /// This replica created version `cs` of `key` (a local write).
    VersionCreated { session: SessionId, key: Bytes, cs: Carstamp, value: Option<Bytes> },
}

/// Counters a replica keeps about itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RcStats {
    pub keys: u64,
    pub sessions: u64,
    pub pending_writes: u64,
    /// Peer messages dropped as hostile or malformed (unknown sender, oversized value, ...).
    pub bad_peer_messages: u64,
    pub writes_retransmitted: u64,
    /// Requests of protocol rounds re-sent to silent peers (Kite §5.1.3).
    pub rounds_retransmitted: u64,
    /// Kite §5.8: the machine epoch (bumped by each acquire/RMW that detected delinquency).
    pub machine_epoch: u64,
    pub ops_in_flight: u64,
    /// Barriers that completed on the fast path (every prior write acked by all).
    pub barriers_fast: u64,
    /// Barriers that took the slow path (`SLOW_RELEASE` of a DM-set, Kite §5.1.6 B4).
    pub barriers_slow: u64,
    /// Relaxed accesses served through the slow path (out-of-epoch keys, §5.2 R3, §5.3 W3).
    pub slow_path_accesses: u64,
    /// Paxos attempts that were Nacked and backed off.
    pub paxos_nacks: u64,
}
