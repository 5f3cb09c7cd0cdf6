//! Per-key replica state shared by every rc protocol (Kite §3.2). The Eventual Store uses the
//! value and version; ABD and per-key Paxos (issue 3) add their fields here, beside them.

use bytes::Bytes;
use strata_wire::Carstamp;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyState {
    /// Current value of this replica; `None` = absent (never written, or deleted).
    pub value: Option<Bytes>,
    /// Version of `value`; never decreases (Kite G1, §7 inv. 12).
    pub cs: Carstamp,
}

impl KeyState {
    /// Kite §5.1.1 `apply_version`: install `(value, cs)` only if it is newer.
    /// Returns whether it was installed.
    pub fn apply_version(&mut self, value: Option<Bytes>, cs: Carstamp) -> bool {
        if cs > self.cs {
            self.value = value;
            self.cs = cs;
            true
        } else {
            false
        }
    }
}
