//! Per-replica properties, from the states sampled after every input (Kite §7 inv. 12, G1).

use std::collections::BTreeMap;

use bytes::Bytes;
use strata_wire::NodeId;

use super::{fmt_key, Created, Violation};
use crate::history::{fmt_value, History, ReplicaChange};

/// G1 (Kite §1.2) and §7 inv. 12: a replica never replaces a value by a lower-carstamp value —
/// a key's carstamp never decreases at a node — and one carstamp always comes with one value.
pub fn replica_monotonic(h: &History) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut held: BTreeMap<(NodeId, &Bytes), &ReplicaChange> = BTreeMap::new();
    for ch in &h.replica_changes {
        if let Some(prev) = held.insert((ch.node, &ch.key), ch) {
            let problem = if ch.cs < prev.cs {
                Some(format!("went back from {} to {}", prev.cs, ch.cs))
            } else if ch.cs == prev.cs && ch.value != prev.value {
                Some(format!("changed value at version {} from {} to {}", ch.cs, fmt_value(&prev.value), fmt_value(&ch.value)))
            } else {
                None
            };
            if let Some(problem) = problem {
                out.push(Violation {
                    checker: "replica-monotonic",
                    at: Some(ch.at),
                    detail: format!("{}'s replica of {} {problem}", ch.node, fmt_key(&ch.key)),
                });
            }
        }
    }
    out
}

/// A replica only ever holds created versions, each with the value it was created with
/// (Kite §7 prop 2, applied to replica states rather than reads).
pub fn replica_holds_created_versions(h: &History) -> Vec<Violation> {
    let created = Created::new(h);
    h.replica_changes
        .iter()
        .filter_map(|ch| {
            created.thin_air(&ch.key, &ch.value, ch.cs).map(|problem| Violation {
                checker: "replica-thin-air",
                at: Some(ch.at),
                detail: format!("{}'s replica: {problem}", ch.node),
            })
        })
        .collect()
}
