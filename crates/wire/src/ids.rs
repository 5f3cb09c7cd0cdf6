//! Identifiers that travel on the wire.

use std::fmt;

/// A replica process. Ids are dense, `0..N`, fixed for the life of a cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct NodeId(pub u32);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}

/// Names one Strata cluster. Every frame carries it, so a process that dials the wrong
/// cluster (a stale endpoint file, a port reused by another deployment) is refused at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct ClusterId(pub u64);

impl fmt::Display for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// A session: an ordered stream of client requests bound to one node.
/// Kite §2.1 [DECISION]: `SessionId = (node, index)`, unique cluster-wide; the node allocates it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SessionId {
    pub node: NodeId,
    pub index: u32,
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/s{}", self.node, self.index)
    }
}

/// Lamport logical clock, Kite §0: ordered by `ver`, ties broken by `node`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Llc {
    pub ver: u64,
    pub node: NodeId,
}

impl Llc {
    pub const ZERO: Llc = Llc { ver: 0, node: NodeId(0) };
}

/// Version of one key, Kite §0: `(llc, pno)` ordered lexicographically. A plain write creates
/// `(L, 0)`; the RMW decided in Paxos slot `n` on base `L` creates `(L, n)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Carstamp {
    pub llc: Llc,
    pub pno: u32,
}

impl Carstamp {
    pub const ZERO: Carstamp = Carstamp { llc: Llc::ZERO, pno: 0 };

    /// The version a plain write by `node` creates over a replica whose highest known clock is `over`.
    pub fn next_write(over: Llc, node: NodeId) -> Carstamp {
        Carstamp { llc: Llc { ver: over.ver + 1, node }, pno: 0 }
    }
}

impl fmt::Display for Carstamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.llc.ver, self.llc.node.0, self.pno)
    }
}

/// A Paxos ballot, Kite §0: `(round, node)` ordered lexicographically. Unique per attempt
/// because at most one local RMW proposes on a key at a time (Kite §5.6 rule M-1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Ballot {
    pub round: u32,
    pub node: NodeId,
}

impl Ballot {
    pub const ZERO: Ballot = Ballot { round: 0, node: NodeId(0) };
}

/// Identifies one RMW, Kite §3.2: `seq` increases by one per RMW of the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RmwId {
    pub session: SessionId,
    pub seq: u64,
}

/// Identifies one acquire-type operation (acquire or RMW), Kite §3.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AcquireId {
    pub session: SessionId,
    pub seq: u64,
}
