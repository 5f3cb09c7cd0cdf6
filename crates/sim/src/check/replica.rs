//! Per-replica properties, from the states sampled after every input (Kite §7 inv. 12, G1).

use std::collections::BTreeMap;

use bytes::Bytes;
use strata_wire::{Carstamp, Instant, NodeId};

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
                Some(format!(
                    "changed value at version {} from {} to {}",
                    ch.cs,
                    fmt_value(&prev.value),
                    fmt_value(&ch.value)
                ))
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

/// Kite §7 inv. 12, the Paxos part: a replica's last committed slot `lc` never decreases; its
/// version is either plain or that of slot `lc` (`cs.pno` is 0 or `lc`); and it is at least
/// the version committed in slot `lc` (looked up in the global commit log), so a replica that
/// advanced `lc` by catch-up holds at least that slot's effect. A replica cannot know a slot
/// decided before some node sent its first real commit.
pub fn replica_commit_floor(h: &History) -> Vec<Violation> {
    let mut slot_version: BTreeMap<(&Bytes, u32), (Carstamp, Instant)> = BTreeMap::new();
    for c in h.commits.iter().filter(|c| c.is_real()) {
        slot_version.entry((&c.key, c.slot)).or_insert((c.cs, c.at));
    }
    let mut out = Vec::new();
    let mut lc: BTreeMap<(NodeId, &Bytes), u32> = BTreeMap::new();
    for ch in &h.replica_changes {
        let prev = lc.insert((ch.node, &ch.key), ch.lc).unwrap_or(0);
        let problem = if ch.lc < prev {
            Some(format!("last committed slot went back from {prev} to {}", ch.lc))
        } else if ch.cs.pno != 0 && ch.cs.pno != ch.lc {
            Some(format!("holds {} although its last committed slot is {}", ch.cs, ch.lc))
        } else if ch.lc == 0 {
            None
        } else {
            match slot_version.get(&(&ch.key, ch.lc)) {
                None => {
                    Some(format!("knows slot {} decided, but no node ever committed it", ch.lc))
                }
                Some((_, at)) if *at > ch.at => {
                    Some(format!("knows slot {} decided before anyone committed it", ch.lc))
                }
                Some((v, _)) if ch.cs < *v => Some(format!(
                    "holds {} below {}, the version of its last committed slot {}",
                    ch.cs, v, ch.lc
                )),
                Some(_) => None,
            }
        };
        if let Some(problem) = problem {
            out.push(Violation {
                checker: "commit-floor",
                at: Some(ch.at),
                detail: format!("{}'s replica of {} {problem}", ch.node, fmt_key(&ch.key)),
            });
        }
    }
    out
}
