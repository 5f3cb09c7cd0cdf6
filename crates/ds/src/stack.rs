//! Treiber stack (Treiber 1986; the counted-pointer version of Scott, *Shared-Memory
//! Synchronization*, 2013, as ported by the Kite paper §8.3).
//!
//! Keys: `{root}/s/{name}/top` (a [`Ptr`]: the top object, ABA counter), plus the objects.
//! An absent `top` is the empty stack: nothing needs creating.
//!
//! # Memory orderings
//!
//! **push(v)**
//! 1. allocate an object (locally, no coordination);
//! 2. *relaxed* puts of its N data fields and of its `next` (= the top it saw);
//! 3. *CAS* `top: seen -> (obj, count+1)`, **weak**.
//!
//! The CAS is an RMW, which RC_Lin orders after every earlier access of the session: no replica
//! can hold the new `top` before the fields and `next` are acknowledged, so the CAS *publishes*
//! the object (no separate release is needed). The first `top` is read *relaxed*: it is only a
//! guess for the CAS expectation, which the CAS itself validates against a quorum; a failed CAS
//! returns the value to retry with. A weak CAS may fail locally when the local replica already
//! differs, which is exactly a conflict (or a stale guess): harmless, we retry with the value it
//! returns, and fall back to a strong CAS after a few local failures within the operation.
//!
//! **pop()**
//! 1. *acquire* `top` (it is dereferenced next, so it must be a synchronizing read: the
//!    acquire returns the version of a CAS, and every CAS on `top` read the version of the CAS
//!    before it, so the push that published the object happens-before the acquire and every
//!    later relaxed read of this session sees its fields and `next`);
//! 2. null: the stack is empty (the acquire is linearizable, so this is a real "empty");
//! 3. *relaxed* get of `top.next` (visible by 1; its owner tag must be top's incarnation,
//!    otherwise the object was recycled meanwhile and we re-acquire);
//! 4. *CAS* `top: seen -> (next, count+1)`, **weak**, pipelined with *relaxed* gets of the N
//!    fields (the RMW orders them after it). On success the object is ours: the fields were
//!    read after the CAS, which read the publishing version, and nobody rewrites them until we
//!    recycle the object. A CAS that failed at the quorum returns the current `top` with acquire
//!    semantics and we retry from 2 with it; a local failure is only a relaxed read, so we
//!    re-acquire.
//!
//! The ABA counter in `top` and the incarnation tags make the CAS in 4 fail whenever `top` was
//! popped and re-pushed in between, even with the same (recycled) object.

use std::sync::Arc;

use bytes::Bytes;
use strata_client::{Op, Session};

use crate::error::DsError;
use crate::heap::{check_root, decode_field, encode_field, Ctx, Keys, Layout};
use crate::io::{self, Cas};
use crate::ptr::Ptr;

/// A handle on one Treiber stack (cheap to clone; holds only key names).
#[derive(Clone, Debug)]
pub struct Stack {
    keys: Keys,
    top: Bytes,
    layout: Layout,
}

impl Stack {
    /// The stack `name` under `root`, with objects of `layout`.
    pub fn new(root: &str, name: &str, layout: Layout) -> Result<Stack, DsError> {
        check_root(root)?;
        layout.check()?;
        let keys = Keys { root: Arc::from(root) };
        let top = keys.structure("s", name, "top");
        Ok(Stack { keys, top, layout })
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Pushes `value` (any bytes up to the store's value limit minus 16).
    pub async fn push(&self, s: &mut Session, cx: &mut Ctx, value: &[u8]) -> Result<(), DsError> {
        cx.check(&self.keys.root, s)?;
        let node = cx.alloc()?;
        let next_key = self.keys.next(node.obj);
        let mut batch: Vec<Op> = (0..self.layout.fields)
            .map(|i| {
                Op::put(
                    self.keys.field(node.obj, i),
                    encode_field(self.layout, node.tag, i, if i == 0 { value } else { &[] }),
                )
            })
            .collect();
        // The fields and a relaxed guess of the top travel in one batch.
        batch.push(io::get_op(&self.top));
        let mut out = io::run(s, cx, batch).await?;
        let mut top =
            io::seen(&self.top, io::value(&self.top, out.pop().expect("the get"))?.value)?;
        let mut local_fails = 0;
        loop {
            let next =
                Ptr { obj: top.ptr.obj, tag: top.ptr.tag, count: 0, owner: node.tag, mark: false };
            let new = Ptr {
                obj: node.obj,
                tag: node.tag,
                count: top.ptr.count.wrapping_add(1),
                owner: 0,
                mark: false,
            };
            let weak = cx.weak(local_fails);
            let mut out = io::run(
                s,
                cx,
                vec![
                    Op::put(next_key.clone(), next.encode()),
                    io::cas_op(&self.top, &top, &new, weak),
                ],
            )
            .await?;
            match io::cas_result(cx, &self.top, out.pop().expect("the cas"), &new)? {
                Cas::Swapped(_) => break,
                Cas::Synced(now) => top = now,
                Cas::Local(now) => {
                    local_fails += 1;
                    top = now;
                }
            }
        }
        cx.stats.ops += 1;
        Ok(())
    }

    /// Pops the top element; `None` if the stack is empty.
    pub async fn pop(&self, s: &mut Session, cx: &mut Ctx) -> Result<Option<Bytes>, DsError> {
        cx.check(&self.keys.root, s)?;
        let mut top = io::read_ptr(s, cx, &self.top, true).await?;
        let mut local_fails = 0;
        loop {
            // `top` is acquire-grade here (an acquire, or a CAS that failed at the quorum).
            if top.ptr.is_null() {
                cx.stats.ops += 1;
                return Ok(None);
            }
            let t = top.ptr;
            let next_key = self.keys.next(t.obj);
            let next = io::read_ptr(s, cx, &next_key, false).await?;
            if next.ptr.owner != t.tag {
                // The object was popped and recycled since we read `top`.
                cx.stats.stale_reads += 1;
                top = io::read_ptr(s, cx, &self.top, true).await?;
                continue;
            }
            let new = Ptr {
                obj: next.ptr.obj,
                tag: next.ptr.tag,
                count: t.count.wrapping_add(1),
                owner: 0,
                mark: false,
            };
            let weak = cx.weak(local_fails);
            let mut batch = vec![io::cas_op(&self.top, &top, &new, weak)];
            batch.extend((0..self.layout.fields).map(|i| io::get_op(&self.keys.field(t.obj, i))));
            let mut out = io::run(s, cx, batch).await?.into_iter();
            match io::cas_result(cx, &self.top, out.next().expect("the cas"), &new)? {
                Cas::Swapped(_) => {
                    let value = read_fields(&self.keys, t, out)?;
                    cx.free(t.obj);
                    cx.stats.ops += 1;
                    return Ok(Some(value));
                }
                Cas::Synced(now) => top = now,
                Cas::Local(_) => {
                    local_fails += 1;
                    top = io::read_ptr(s, cx, &self.top, true).await?;
                }
            }
        }
    }
}

/// Checks the fields read for the object `t` points to and returns field 0's payload.
pub(crate) fn read_fields(
    keys: &Keys,
    t: Ptr,
    outcomes: impl Iterator<Item = strata_client::Outcome>,
) -> Result<Bytes, DsError> {
    let mut payload = None;
    for (i, o) in outcomes.enumerate() {
        let key = keys.field(t.obj, i);
        let v = io::value(&key, o)?;
        let p = decode_field(&key, v.value.as_ref(), t.tag, i)?;
        if i == 0 {
            payload = Some(p);
        }
    }
    payload.ok_or_else(|| DsError::Usage("an object has at least one field".into()))
}
