use strata_wire::NodeId;

/// A set of node ids below 64 (Kite allows 3 to 9 replicas), as a bit mask.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NodeSet(u64);

impl NodeSet {
    pub const MAX_NODES: u32 = 64;

    pub const EMPTY: NodeSet = NodeSet(0);

    pub fn insert(&mut self, n: NodeId) {
        debug_assert!(n.0 < Self::MAX_NODES);
        self.0 |= 1 << n.0;
    }

    pub fn remove(&mut self, n: NodeId) {
        if n.0 < Self::MAX_NODES {
            self.0 &= !(1 << n.0);
        }
    }

    pub fn intersection(self, other: NodeSet) -> NodeSet {
        NodeSet(self.0 & other.0)
    }

    pub fn union(self, other: NodeSet) -> NodeSet {
        NodeSet(self.0 | other.0)
    }

    /// The members as a bit mask (bit `i` = node `i`), as `SLOW_RELEASE` carries them.
    pub fn bits(self) -> u64 {
        self.0
    }

    pub fn from_bits(bits: u64) -> NodeSet {
        NodeSet(bits)
    }

    pub fn contains(&self, n: NodeId) -> bool {
        n.0 < Self::MAX_NODES && self.0 & (1 << n.0) != 0
    }

    pub fn len(&self) -> u32 {
        self.0.count_ones()
    }

    pub fn is_empty(&self) -> bool {
        self.0 == 0
    }

    /// Whether every member of `other` is in `self`.
    pub fn is_superset(&self, other: NodeSet) -> bool {
        self.0 & other.0 == other.0
    }

    pub fn iter(&self) -> impl Iterator<Item = NodeId> + '_ {
        (0..Self::MAX_NODES).filter(|i| self.0 & (1 << i) != 0).map(NodeId)
    }
}

impl FromIterator<NodeId> for NodeSet {
    fn from_iter<I: IntoIterator<Item = NodeId>>(iter: I) -> Self {
        let mut s = NodeSet::EMPTY;
        for n in iter {
            s.insert(n);
        }
        s
    }
}
