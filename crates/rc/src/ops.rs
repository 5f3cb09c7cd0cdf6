//! Operations in flight at a node: one state machine per operation kind, each advanced by its
//! `step_*` function (in `abd.rs` and `paxos.rs`) whenever something it waits for changed.

use bytes::Bytes;
use strata_wire::{AcquireId, SessionId};

use crate::abd::{Acquire, Release, SlowRead, SlowWrite};
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
}
