//! Per-key replica state shared by every rc protocol (Kite §3.2): the Eventual Store and ABD
//! use the value and version, per-key Paxos the slot and acceptor fields, the slow path the
//! key epoch.

use bytes::Bytes;
use strata_wire::peer::{KeyRecords, Tuple, Version};
use strata_wire::{Ballot, Carstamp, RmwId};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyState {
    /// Current value of this replica; `None` = absent (never written, or deleted).
    pub value: Option<Bytes>,
    /// Version of `value`; never decreases (Kite G1, §7 inv. 12).
    pub cs: Carstamp,
    /// The RMW that created `cs`, iff `cs.pno > 0`.
    pub rmw_id: Option<RmwId>,
    /// Key epoch (Kite §5.8): the key is in-epoch iff `epoch == machine_epoch`.
    pub epoch: u64,
    /// Last committed Paxos slot known here; `cs.pno <= lc` (§7 inv. 12).
    pub lc: u32,
    /// The RMW committed in slot `lc`.
    pub lc_rmw: Option<RmwId>,
    /// Highest ballot promised for slot `lc + 1`.
    pub promised: Ballot,
    /// The tuple accepted for slot `lc + 1`, with its ballot.
    pub accepted: Option<(Ballot, Tuple)>,
    /// RIFL completion records of the linearizable RPCs that mutated the key, and per-client
    /// ack floors (`crate::records`; rifl.md R-D23).
    pub records: KeyRecords,
    /// The key is in `RcReplica::rifl_keys`, the set the records' sweep visits.
    pub swept: bool,
}

impl KeyState {
    /// The replica's current version, as carried by replies.
    pub fn version(&self) -> Version {
        Version {
            value: self.value.clone(),
            cs: self.cs,
            rmw_id: self.rmw_id,
            records: self.records.clone(),
        }
    }

    /// Kite §5.1.1 `apply_version`, the value part: install `(value, cs)` only if it is newer.
    /// Returns whether it was installed. (Learning the slot is the replica's job: it also
    /// registers the RMW, see `RcReplica::apply`.)
    pub fn apply_version(
        &mut self,
        value: Option<Bytes>,
        cs: Carstamp,
        rmw_id: Option<RmwId>,
    ) -> bool {
        if cs > self.cs {
            // Stored in its own allocation: a value decoded from the network is a slice of a
            // read buffer, which a long-lived replica value would otherwise pin whole.
            self.value = value.map(|v| Bytes::copy_from_slice(&v));
            self.cs = cs;
            self.rmw_id = if cs.pno > 0 { rmw_id } else { None };
            true
        } else {
            false
        }
    }

    /// Kite §5.1.2, the key part of `learn_committed`: slot `slot` was decided with `rmw_id`.
    /// Acceptor state belongs to slot `lc + 1` only, so it resets when `lc` advances.
    pub fn learn_slot(&mut self, slot: u32, rmw_id: RmwId) {
        if slot > self.lc {
            self.lc = slot;
            self.lc_rmw = Some(rmw_id);
            self.promised = Ballot::ZERO;
            self.accepted = None;
        }
    }
}
