//! Pipelined batches of operations on one session, and the reading of pointer results.

use bytes::Bytes;
use strata_client::{Op, Outcome, RmwOutcome, Session, Versioned};

use crate::error::DsError;
use crate::heap::Ctx;
use crate::ptr::{Ptr, Seen};

/// Submits `ops` back to back and returns every outcome, in order. The session executes them
/// with the orderings of RC_Lin (a CAS waits for the relaxed puts before it, relaxed gets after
/// an acquire or RMW run after it), so a batch costs one client round trip.
pub(crate) async fn run(
    s: &mut Session,
    cx: &mut Ctx,
    ops: Vec<Op>,
) -> Result<Vec<Outcome>, DsError> {
    let n = ops.len();
    for op in &ops {
        match op {
            Op::Get { .. } => cx.stats.relaxed_reads += 1,
            Op::Put { .. } | Op::Delete { .. } => cx.stats.relaxed_writes += 1,
            Op::Acquire { .. } => cx.stats.acquires += 1,
            Op::Release { .. } => cx.stats.releases += 1,
            // Counted when classified (`cas_result`).
            Op::Cas { .. } | Op::Faa { .. } => {}
        }
    }
    let mut submitted = 0;
    let mut err = None;
    for op in ops {
        match s.submit(op) {
            Ok(_) => submitted += 1,
            Err(e) => {
                err = Some(DsError::from(e));
                break;
            }
        }
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..submitted {
        match s.next().await {
            Some((_, Ok(o))) => out.push(o),
            Some((_, Err(e))) => {
                if e.outcome_unknown() {
                    // Timed out or connection lost: the rest cannot be drained reliably.
                    return Err(e.into());
                }
                err.get_or_insert(e.into());
            }
            None => break,
        }
    }
    match err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

pub(crate) fn value(key: &[u8], o: Outcome) -> Result<Versioned, DsError> {
    match o {
        Outcome::Value(v) => Ok(v),
        other => Err(DsError::corrupt(key, format!("a read answered {other:?}"))),
    }
}

pub(crate) fn rmw(key: &[u8], o: Outcome) -> Result<RmwOutcome, DsError> {
    match o {
        Outcome::Rmw(r) => Ok(r),
        other => Err(DsError::corrupt(key, format!("a CAS answered {other:?}"))),
    }
}

pub(crate) fn seen(key: &[u8], raw: Option<Bytes>) -> Result<Seen, DsError> {
    match Ptr::decode(raw.as_deref()) {
        Some(ptr) => Ok(Seen { raw, ptr }),
        None => Err(DsError::corrupt(key, format!("not a pointer value: {raw:?}"))),
    }
}

/// Relaxed read (`get`) or acquire of a pointer key.
pub(crate) async fn read_ptr(
    s: &mut Session,
    cx: &mut Ctx,
    key: &Bytes,
    acquire: bool,
) -> Result<Seen, DsError> {
    let v = if acquire {
        cx.stats.acquires += 1;
        s.acquire(key.clone()).await?
    } else {
        cx.stats.relaxed_reads += 1;
        s.get(key.clone()).await?
    };
    seen(key, v.value)
}

pub(crate) fn get_op(key: &Bytes) -> strata_client::Op {
    Op::get(key.clone())
}

/// What a CAS on a pointer key did.
#[derive(Clone, Debug)]
pub(crate) enum Cas {
    /// Installed the new value; the location now holds it.
    Swapped(Seen),
    /// Failed after a quorum round: `Seen` is the location's linearizable current value, read
    /// with acquire semantics (an RMW orders every later access of the session after it).
    Synced(Seen),
    /// A weak CAS that failed on the local replica: `Seen` is a relaxed read (possibly stale,
    /// no ordering). Never use it to dereference.
    Local(Seen),
}

pub(crate) fn cas_op(key: &Bytes, expected: &Seen, new: &Ptr, weak: bool) -> Op {
    Op::cas(key.clone(), expected.raw.clone(), new.encode(), weak)
}

/// Classifies a CAS outcome and counts it.
pub(crate) fn cas_result(cx: &mut Ctx, key: &[u8], o: Outcome, new: &Ptr) -> Result<Cas, DsError> {
    let r = rmw(key, o)?;
    cx.stats.cas += 1;
    if r.swapped {
        return Ok(Cas::Swapped(Seen::written(*new)));
    }
    let s = seen(key, r.observed.value)?;
    if r.written.is_some() {
        cx.stats.cas_quorum_fail += 1;
        Ok(Cas::Synced(s))
    } else {
        cx.stats.cas_local_fail += 1;
        Ok(Cas::Local(s))
    }
}

/// One CAS on its own.
pub(crate) async fn cas(
    s: &mut Session,
    cx: &mut Ctx,
    key: &Bytes,
    expected: &Seen,
    new: Ptr,
    weak: bool,
) -> Result<Cas, DsError> {
    let o = s.call(cas_op(key, expected, &new, weak)).await?;
    cas_result(cx, key, o, &new)
}
