//! What goes in and out of an rc replica core.

use bytes::Bytes;
use strata_wire::client::{ClientRequest, ClientResponse};
use strata_wire::{AcquireId, Ballot, Carstamp, NodeId, RmwId, SessionId};

use crate::node_set::NodeSet;

pub use strata_core::Route;

/// An input from a client connection.
#[derive(Clone, Debug)]
// Boxing the request would allocate once per client request on the hot path; the enum is
// moved, not stored in bulk.
#[allow(clippy::large_enum_variant)]
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

/// Observable facts for tests and tracing (Kite §2.5, test hook), so that a simulator can check
/// the state invariants of Kite §7 (inv. 14 - 17) from outside.
///
/// Cost: only `VersionCreated` is emitted on the relaxed-write path, and it allocates nothing
/// (its `Bytes` are reference-counted, the effects buffer is reused). Every other event comes
/// from a synchronisation path (barrier, delinquency bits, `acquire_finish`, Paxos) and only when
/// the state it reports actually changed; `BarrierPassed` and a reset's `DbitChange::Up` carry a
/// `Vec` (one allocation per barrier or reset), the rest are fixed-size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RcEvent {
    /// This replica created version `cs` of `key` (a local write).
    VersionCreated { session: SessionId, key: Bytes, cs: Carstamp, value: Option<Bytes> },
    /// Kite §7 inv. 14: the first value-carrying message of a release or RMW of `session` on
    /// `key` leaves in this step (§5.9 O1: L4's `WRITE`, or M6's first own `ACCEPT`). `prior` is
    /// what the barrier covered — the session's writes and acquire obligations it resolved
    /// (§5.1.6 `P`, the highest version per key; entries every peer had acknowledged may have
    /// been pruned already) — and `path` how it passed.
    BarrierPassed {
        session: SessionId,
        key: Bytes,
        round: ValueRound,
        prior: Vec<(Bytes, Carstamp)>,
        path: BarrierPath,
    },
    /// Kite §7 inv. 15: this node's delinquency bit for `peer` (§3.1 `dbit[m]`) changed.
    DbitChanged { peer: NodeId, change: DbitChange },
    /// Kite §7 inv. 16: this node's `self_delinquent` flag changed (K-D3).
    SelfDelinquent { change: SelfDelinquentChange },
    /// Kite §5.1.5, §5.8 E1: acquire (or RMW) `acq` incremented the machine epoch to `epoch`,
    /// in the same step in which it sends `RESET_BIT { acq }` (E5).
    EpochBumped { acq: AcquireId, epoch: u64 },
    /// Kite §7 inv. 17: `rmw_registry[id.session]` went from `prev` to `id.seq` (§5.1.2).
    Registered { id: RmwId, prev: u64 },
    /// Kite §7 inv. 17: this node, as an acceptor, acknowledged (`Ack` or `AlreadyAccepted`) a
    /// proposal for slot `slot` of `key` at `ballot` (§5.7.6; the proposer's local step too).
    Promised { key: Bytes, slot: u32, ballot: Ballot },
}

/// What a barrier let out of the node (Kite §5.9 O1): a release's value round, which carries
/// version `cs`, or an RMW's own `ACCEPT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueRound {
    Write { cs: Carstamp },
    Accept { rmw_id: RmwId },
}

/// How a barrier passed (Kite §5.1.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BarrierPath {
    /// B3: every prior write was acknowledged by every peer.
    Fast,
    /// B4: this node's `SLOW_RELEASE` round `req` published the DM-set `dm` (B4.b), once every
    /// prior write had a quorum of acks (B4.a, K-F1), and `acked` (at least `Q - 1` peers)
    /// acknowledged it (B4.d).
    Slow { req: u64, dm: NodeSet, acked: NodeSet },
}

/// One change of a delinquency bit (Kite §3.1 `Up | Down | Transient { owners }`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DbitChange {
    /// Set to `Down`, owners discarded, by `SLOW_RELEASE` round `req` of node `from` (§5.7.4),
    /// or — `from` is this node — by this node's own barrier (§5.1.6 B4.c).
    Down { from: NodeId, req: u64 },
    /// An acquire-type request of the peer observed the bit (§5.1.4 `dcheck`): `acq` is now the
    /// owner for its session, and the bit is `Transient`.
    Owner { acq: AcquireId },
    /// `RESET_BIT { acq }` from the peer matched a recorded owner (§5.7.5): the bit is `Up`.
    /// `owners` is what the bit held just before, sorted.
    Up { acq: AcquireId, owners: Vec<AcquireId> },
}

/// One change of `self_delinquent` (Kite §3.1, K-D3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SelfDelinquentChange {
    /// `SLOW_RELEASE` round `req` of node `from` named this node (§5.7.4).
    Set { from: NodeId, req: u64 },
    /// Consumed by acquire (or RMW) `acq` in `acquire_finish` (§5.1.5).
    Cleared { acq: AcquireId },
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
    /// RIFL: retries answered from a completion record instead of executing again (R-G2).
    pub rifl_duplicates: u64,
    /// RIFL: requests refused as `Stale` (the client had acknowledged them).
    pub rifl_stale: u64,
    /// RIFL: clients whose records were collected because their lease expired (§5.6).
    pub rifl_clients_expired: u64,
    /// RIFL: exactly-once mutations refused as `Busy` because their key's records were at
    /// their bound (`records::budget`).
    pub rifl_busy: u64,
    /// The `T_REL` a barrier starting now would wait, microseconds (adaptive: 10 smoothed ack
    /// round trips within the configured bounds, `RcReplica::release_timeout`). A gauge, not a
    /// counter.
    pub release_timeout_us: u64,
}
