//! Sessions at their node (Kite §3.3) and their execution rules (§5.1.8):
//!
//! 1. operations start in session order;
//! 2. a release, an acquire or an RMW blocks the session: it starts only once every earlier
//!    operation has completed, and nothing later starts until it completes;
//! 3. relaxed operations pipeline, except that no operation on key `k` starts while an earlier
//!    one of the session on `k` is in flight;
//! 5. completions are reported in session order.

use std::collections::{BTreeMap, HashMap, VecDeque};

use bytes::Bytes;
use strata_wire::client::{ClientResponse, Request};
use strata_wire::{Carstamp, Rifl, SessionId};

use crate::api::Route;

/// A session's unresolved map is first pruned of fully acknowledged entries at this size.
pub(crate) const PRUNE_MIN: usize = 256;

/// Identifies an operation in flight at this node.
pub(crate) type OpId = u64;

/// A request accepted into a session, not started yet.
#[derive(Debug)]
pub(crate) struct Queued {
    pub seq: u64,
    pub corr: u64,
    pub req: Request,
    /// RIFL's envelope of a mutating request (checked on arrival).
    pub rifl: Option<Rifl>,
}

/// An operation of the session that has started and not completed.
#[derive(Debug)]
pub(crate) struct Running {
    pub op: OpId,
    pub key: Bytes,
    pub blocking: bool,
}

#[derive(Debug)]
pub(crate) struct Session {
    pub id: SessionId,
    pub route: Route,
    pub queue: VecDeque<Queued>,
    pub running: BTreeMap<u64, Running>,
    /// Completed, waiting for earlier operations to complete (rule 5).
    pub done: BTreeMap<u64, ClientResponse>,
    pub next_seq: u64,
    pub next_report: u64,
    /// The session's writes and acquire obligations not yet resolved by a barrier (Kite
    /// §5.1.6 `P`, §5.1.7): the highest version per key — an acknowledgement of a newer version
    /// of a key implies the older one is held too.
    pub unresolved: HashMap<Bytes, Carstamp>,
    /// Size of `unresolved` at which it is next pruned (amortized: twice what survived).
    pub prune_at: usize,
    /// `AcquireId` counter, shared by acquires and RMWs (Kite §3.2 [DECISION]).
    pub acq_seq: u64,
    pub rmw_seq: u64,
}

impl Session {
    pub fn new(id: SessionId, route: Route) -> Session {
        Session {
            id,
            route,
            queue: VecDeque::new(),
            running: BTreeMap::new(),
            done: BTreeMap::new(),
            next_seq: 0,
            next_report: 0,
            unresolved: HashMap::new(),
            prune_at: PRUNE_MIN,
            acq_seq: 0,
            rmw_seq: 0,
        }
    }

    /// Whether `req` may start now (rules 2 and 3).
    pub fn may_start(&self, req: &Request) -> bool {
        if self.running.values().any(|r| r.blocking) {
            return false;
        }
        if is_blocking(req) {
            return self.running.is_empty();
        }
        let key = request_key(req);
        !self.running.values().any(|r| Some(&r.key) == key)
    }

    /// Records a session write or obligation for the next barrier.
    pub fn note_unresolved(&mut self, key: Bytes, cs: Carstamp) {
        let e = self.unresolved.entry(key).or_default();
        *e = (*e).max(cs);
    }

    /// Responses that can now be sent, in session order.
    pub fn take_reportable(&mut self, out: &mut Vec<ClientResponse>) {
        while let Some(resp) = self.done.remove(&self.next_report) {
            out.push(resp);
            self.next_report += 1;
        }
    }
}

/// Releases, acquires and RMWs block their session (rule 2). A weak CAS blocks too unless it
/// fails locally, which is decided when it starts.
pub(crate) fn is_blocking(req: &Request) -> bool {
    matches!(
        req,
        Request::Release { .. }
            | Request::Acquire { .. }
            | Request::Faa { .. }
            | Request::Cas { .. }
    )
}

pub(crate) fn request_key(req: &Request) -> Option<&Bytes> {
    match req {
        Request::Get { key, .. }
        | Request::Put { key, .. }
        | Request::Delete { key, .. }
        | Request::Release { key, .. }
        | Request::Acquire { key, .. }
        | Request::Faa { key, .. }
        | Request::Cas { key, .. } => Some(key),
        _ => None,
    }
}
