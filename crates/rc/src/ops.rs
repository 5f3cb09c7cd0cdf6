//! Operations in flight at a node: one state machine per operation kind, each advanced by its
//! `step_*` function (in `abd.rs` and `paxos.rs`) whenever something it waits for changed.

use bytes::Bytes;
use strata_wire::{AcquireId, Rifl, SessionId};

use crate::abd::{Acquire, Release, SlowRead, SlowWrite};
use crate::barrier::Barrier;
use crate::paxos::Rmw;

#[derive(Debug)]
pub(crate) struct Op {
    /// Index of the session at this node (the session may close while the op runs).
    pub session: u32,
    pub sid: SessionId,
    /// Position in session order.
    pub seq: u64,
    pub corr: u64,
    pub key: Bytes,
    pub kind: OpKind,
    /// RIFL's envelope: the operation creates its completion record with the version it
    /// writes (rifl.md §5.3 S6), and is in `RcReplica::rifl_running` until it completes.
    pub rifl: Option<Rifl>,
}

#[derive(Debug)]
pub(crate) enum OpKind {
    SlowRead(SlowRead),
    SlowWrite(SlowWrite),
    Release(Release),
    Acquire(Acquire),
    Rmw(Box<Rmw>),
}

impl OpKind {
    pub fn slow_read(e_start: u64) -> OpKind {
        OpKind::SlowRead(SlowRead { e_start, req: None })
    }
    pub fn slow_write(e_start: u64, value: Option<Bytes>) -> OpKind {
        OpKind::SlowWrite(SlowWrite { e_start, value, req: None })
    }
    pub fn release(value: Bytes) -> OpKind {
        OpKind::Release(Release::new(value))
    }
    pub fn acquire(acq: AcquireId) -> OpKind {
        OpKind::Acquire(Acquire::new(acq))
    }
    /// The barrier of a release or RMW, and whether the operation's value has left the node
    /// (the release's value round, the RMW's own accept): Kite §7 inv. 14's local part.
    pub fn barrier_state(&self) -> Option<(&Barrier, bool)> {
        match self {
            OpKind::Release(r) => Some((&r.barrier, r.write.is_some())),
            OpKind::Rmw(r) => Some(r.barrier_state()),
            OpKind::SlowRead(_) | OpKind::SlowWrite(_) | OpKind::Acquire(_) => None,
        }
    }
}
