//! History checkers (Kite §7). Each is a pure function of a [`History`], so it can be tested on
//! hand-made histories — including known-bad ones it must flag (`DESIGN.md`: every checker has
//! a canary; see `tests/checkers.rs`).

pub mod barrier;
pub mod completion;
pub mod convergence;
pub mod delinquency;
pub mod hb;
mod index;
pub mod linearizability;
pub mod paxos;
pub mod registry;
pub mod replica;
pub mod rifl;
pub mod rmw;
pub mod session;
pub mod txn;
pub mod versions;

use std::collections::HashMap;
use std::fmt;

use strata_wire::{Carstamp, Instant, NodeId};

use crate::history::{fmt_ms, fmt_value, Creation, History, Value};

/// One broken property, with what the checker saw.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Violation {
    pub checker: &'static str,
    /// When the offending event happened (global virtual time), if one instant is to blame.
    pub at: Option<Instant>,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.at {
            Some(at) => write!(f, "[{}] at {}: {}", self.checker, fmt_ms(at.0), self.detail),
            None => write!(f, "[{}] {}", self.checker, self.detail),
        }
    }
}

pub type Checker = fn(&History) -> Vec<Violation>;

/// Every checker a swarm run applies.
pub const CHECKERS: &[Checker] = &[
    driver_anomalies,
    versions::version_uniqueness,
    versions::no_thin_air,
    session::session_order,
    session::replies_in_session_order,
    replica::replica_monotonic,
    replica::replica_holds_created_versions,
    replica::replica_commit_floor,
    linearizability::sync_linearizability,
    hb::hb_visibility,
    rmw::rmw_atomicity,
    rmw::faa_counters,
    rifl::exactly_once,
    paxos::paxos_agreement,
    paxos::paxos_quorum,
    barrier::barrier_invariant,
    delinquency::reset_safety,
    delinquency::self_delinquency,
    registry::registry_monotonic,
    registry::registry_quorum,
    convergence::convergence,
    completion::completion,
    completion::quiescence,
];

/// Findings the Eventual Store does not promise to avoid (Kite §1.2, "Not guaranteed"), shown
/// in the summary; `--strict-convergence` turns them into violations.
pub const NOTES: &[Checker] = &[convergence::orphaned_divergence];

/// Exactly-once of plain writes, deletes and releases, which the rc engine does not keep yet
/// (`check::rifl::exactly_once_plain`): notes, violations with `--strict-rifl`.
pub const RIFL_GAPS: &[Checker] = &[rifl::exactly_once_plain];

/// Runs `checkers`, earliest violation first (those without a time last).
pub fn run_checkers(h: &History, checkers: &[Checker]) -> Vec<Violation> {
    let mut all: Vec<Violation> = checkers.iter().flat_map(|c| c(h)).collect();
    all.sort_by_key(|v| v.at.unwrap_or(Instant::MAX));
    all
}

/// What the driver itself saw go wrong: a core panicked in an input handler or in
/// `check_invariants` (run after every input, `DESIGN.md` "The sans-IO contract"), a reply
/// nobody asked for, a timer that does not advance.
pub fn driver_anomalies(h: &History) -> Vec<Violation> {
    h.anomalies
        .iter()
        .map(|a| Violation {
            checker: "driver",
            at: Some(a.at),
            detail: match a.node {
                Some(n) => format!("{n}: {}", a.what),
                None => a.what.clone(),
            },
        })
        .collect()
}

/// The created versions of a history by `(key, carstamp)`: the set `V_k` of Kite §7.
pub(crate) struct Created<'h> {
    by_version: HashMap<(&'h [u8], Carstamp), &'h Creation>,
}

impl<'h> Created<'h> {
    pub(crate) fn new(h: &'h History) -> Created<'h> {
        // On a duplicate the first creation wins; `version_uniqueness` reports the clash.
        let mut by_version = HashMap::new();
        for c in &h.creations {
            by_version.entry((&c.key[..], c.cs)).or_insert(c);
        }
        Created { by_version }
    }

    pub(crate) fn get(&self, key: &[u8], cs: Carstamp) -> Option<&'h Creation> {
        self.by_version.get(&(key, cs)).copied()
    }

    /// Why `(value, cs)` of `key` is not a real version — not created, or created with another
    /// value — or `None` if it is one. `ZERO` is the initial, absent version (`docs/design.md`).
    pub(crate) fn thin_air(&self, key: &[u8], value: &Value, cs: Carstamp) -> Option<String> {
        if cs == Carstamp::ZERO {
            return value
                .as_ref()
                .map(|_| format!("value {} at the initial version {cs}", fmt_value(value)));
        }
        match self.get(key, cs) {
            None => Some(format!("version {cs} of {} was never created", fmt_key(key))),
            Some(c) if c.value != *value => Some(format!(
                "version {cs} of {} has value {} but was created with {} by {}",
                fmt_key(key),
                fmt_value(value),
                fmt_value(&c.value),
                c.session
            )),
            Some(_) => None,
        }
    }
}

pub(crate) fn fmt_key(key: &[u8]) -> String {
    format!("key {:?}", String::from_utf8_lossy(key))
}

/// `[n1, n3]`, for reports.
pub(crate) fn fmt_nodes(nodes: &[NodeId]) -> String {
    let names: Vec<String> = nodes.iter().map(NodeId::to_string).collect();
    format!("[{}]", names.join(", "))
}
