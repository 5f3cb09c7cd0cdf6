//! Michael-Scott queue (Michael & Scott, PODC 1996: counted pointers, a dummy node, a tail that
//! may lag one step behind and is helped forward), as ported by the Kite paper §8.3.
//!
//! Keys: `{root}/q/{name}/head` and `{root}/q/{name}/tail` (each a [`Ptr`] with its ABA counter),
//! plus the objects. The queue is created lazily by the first operation that needs it (a strong
//! CAS installs the first dummy in `head`, then in `tail`); an absent `head` is an empty queue.
//! The object `head` points to is the dummy; the elements are the objects after it.
//!
//! # Memory orderings
//!
//! **enqueue(v)**
//! 1. allocate; *relaxed* puts of the N fields and of `next = null` (owner: its tag), pipelined
//!    with a *relaxed* get of `tail` — only a guess, validated by the CAS below;
//! 2. *relaxed* get of `t.next`. If it is not null or not of `t`'s incarnation (a stale guess, a
//!    recycled `t`, or a lagging tail), read it again with *acquire* (linearizable); if `t` was
//!    recycled, *acquire* `tail` and start over;
//! 3. `t.next` not null: the tail lags. **Help**: *CAS* `tail: t -> (t.next, count+1)`, weak,
//!    then retry. The pointer written to `tail` was obtained by an acquire (or an RMW), so the
//!    enqueue that linked it happens-before whoever later acquires `tail` and follows it;
//! 4. `t.next` null: *CAS* `t.next: null -> (obj, count+1)`, **weak**. This RMW is the
//!    linearization point and it *publishes* the object (RMWs are ordered after all earlier
//!    accesses, so the fields and `next` are acknowledged before any replica holds the link).
//!    A CAS succeeding on `t.next` (owner = `t`'s tag, count included) proves `t` was still the
//!    last object of this queue; failures retry from 2;
//! 5. *CAS* `tail: t -> (obj, count+1)`, weak, result ignored (someone helps if it fails).
//!
//! **dequeue()**
//! 1. *relaxed* get of `head` (a guess; a CAS that failed at the quorum gives the next one);
//! 2. *acquire* `h.next`: this read is dereferenced (we read the next object's fields) so it
//!    must synchronize with the enqueue's linking CAS. Not `h`'s incarnation: `h` was dequeued
//!    and recycled, *acquire* `head` and retry. Null (and of `h`'s incarnation): the queue is
//!    empty at the moment of this linearizable read — `h` was the head when we read it, and the
//!    head cannot move past an object whose `next` is null;
//! 3. *acquire* `tail`: if it still points at `h`, the tail lags: help swing it to `h.next`
//!    (weak CAS) and retry. This keeps the head from ever passing the tail, so the dummy we free
//!    below is never referenced by `tail`. It must be linearizable (a stale relaxed `tail`
//!    could hide a lagging tail);
//! 4. *relaxed* gets of the N fields of `h.next`, pipelined with *CAS*
//!    `head: h -> (h.next, count+1)`, **weak**. The gets are ordered before the RMW, as the
//!    fields must be read before the object becomes the dummy (after that, another dequeuer may
//!    free and recycle it). If the CAS succeeds, `head` was `h` from step 1 to the CAS, so the
//!    next object was not yet dequeued or recycled when its fields were read, and they are the
//!    element. The old dummy `h` goes to our free list.

use std::sync::Arc;

use bytes::Bytes;
use strata_client::{Op, Session};

use crate::error::DsError;
use crate::heap::{check_root, encode_field, Ctx, Keys, Layout};
use crate::io::{self, Cas};
use crate::ptr::{Ptr, Seen};
use crate::stack::read_fields;

/// A handle on one Michael-Scott queue (cheap to clone; holds only key names).
#[derive(Clone, Debug)]
pub struct Queue {
    keys: Keys,
    head: Bytes,
    tail: Bytes,
    layout: Layout,
}

impl Queue {
    /// The queue `name` under `root`, with objects of `layout`.
    pub fn new(root: &str, name: &str, layout: Layout) -> Result<Queue, DsError> {
        check_root(root)?;
        layout.check()?;
        let keys = Keys { root: Arc::from(root) };
        let head = keys.structure("q", name, "head");
        let tail = keys.structure("q", name, "tail");
        Ok(Queue { keys, head, tail, layout })
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Appends `value`.
    pub async fn enqueue(
        &self,
        s: &mut Session,
        cx: &mut Ctx,
        value: &[u8],
    ) -> Result<(), DsError> {
        self.enqueue_inner(s, cx, value, true).await
    }

    /// Test hook: links the object but leaves the tail behind, as an enqueuer that stops between
    /// steps 4 and 5 would; the next operations must help the tail forward.
    #[doc(hidden)]
    pub async fn enqueue_leaving_tail_behind(
        &self,
        s: &mut Session,
        cx: &mut Ctx,
        value: &[u8],
    ) -> Result<(), DsError> {
        self.enqueue_inner(s, cx, value, false).await
    }

    async fn enqueue_inner(
        &self,
        s: &mut Session,
        cx: &mut Ctx,
        value: &[u8],
        swing: bool,
    ) -> Result<(), DsError> {
        cx.check(&self.keys.root, s)?;
        let node = cx.alloc()?;
        let mut batch: Vec<Op> = (0..self.layout.fields)
            .map(|i| {
                Op::put(
                    self.keys.field(node.obj, i),
                    encode_field(self.layout, node.tag, i, if i == 0 { value } else { &[] }),
                )
            })
            .collect();
        let null = Ptr { owner: node.tag, ..Ptr::NULL };
        batch.push(Op::put(self.keys.next(node.obj), null.encode()));
        batch.push(io::get_op(&self.tail));
        let mut out = io::run(s, cx, batch).await?;
        let mut t =
            io::seen(&self.tail, io::value(&self.tail, out.pop().expect("the get"))?.value)?;
        let mut local_fails = 0;
        loop {
            if t.raw.is_none() {
                self.init(s, cx).await?;
                t = io::read_ptr(s, cx, &self.tail, true).await?;
                if t.raw.is_none() {
                    return Err(DsError::corrupt(&self.tail, "still absent after initialisation"));
                }
                continue;
            }
            let tp = t.ptr;
            let next_key = self.keys.next(tp.obj);
            let mut n = io::read_ptr(s, cx, &next_key, false).await?;
            if n.ptr.owner != tp.tag || !n.ptr.is_null() {
                n = io::read_ptr(s, cx, &next_key, true).await?;
                if n.ptr.owner != tp.tag {
                    cx.stats.stale_reads += 1;
                    t = io::read_ptr(s, cx, &self.tail, true).await?;
                    continue;
                }
            }
            if !n.ptr.is_null() {
                // Step 3: the tail lags; `n` is acquire-grade.
                cx.stats.helps += 1;
                let new = Ptr {
                    obj: n.ptr.obj,
                    tag: n.ptr.tag,
                    count: tp.count.wrapping_add(1),
                    owner: 0,
                    mark: false,
                };
                let weak = cx.weak(local_fails);
                match io::cas(s, cx, &self.tail, &t, new, weak).await? {
                    Cas::Swapped(now) | Cas::Synced(now) => t = now,
                    Cas::Local(_) => {
                        local_fails += 1;
                        t = io::read_ptr(s, cx, &self.tail, true).await?;
                    }
                }
                continue;
            }
            // Step 4: link.
            let link = Ptr {
                obj: node.obj,
                tag: node.tag,
                count: n.ptr.count.wrapping_add(1),
                owner: tp.tag,
                mark: false,
            };
            let weak = cx.weak(local_fails);
            match io::cas(s, cx, &next_key, &n, link, weak).await? {
                Cas::Swapped(_) => {
                    if swing {
                        let new = Ptr {
                            obj: node.obj,
                            tag: node.tag,
                            count: tp.count.wrapping_add(1),
                            owner: 0,
                            mark: false,
                        };
                        io::cas(s, cx, &self.tail, &t, new, true).await?;
                    }
                    cx.stats.ops += 1;
                    return Ok(());
                }
                // Someone linked first; the local replica now shows it, step 2 finds it.
                Cas::Synced(_) => {}
                Cas::Local(_) => local_fails += 1,
            }
        }
    }

    /// Removes the oldest element; `None` if the queue is empty.
    pub async fn dequeue(&self, s: &mut Session, cx: &mut Ctx) -> Result<Option<Bytes>, DsError> {
        cx.check(&self.keys.root, s)?;
        let mut h = io::read_ptr(s, cx, &self.head, false).await?;
        let mut local_fails = 0;
        loop {
            if h.raw.is_none() {
                h = io::read_ptr(s, cx, &self.head, true).await?;
                if h.raw.is_none() {
                    cx.stats.ops += 1;
                    return Ok(None); // never initialised
                }
            }
            let hp = h.ptr;
            let n = io::read_ptr(s, cx, &self.keys.next(hp.obj), true).await?;
            if n.ptr.owner != hp.tag {
                cx.stats.stale_reads += 1;
                h = io::read_ptr(s, cx, &self.head, true).await?;
                continue;
            }
            if n.ptr.is_null() {
                cx.stats.ops += 1;
                return Ok(None);
            }
            let np = n.ptr;
            let t = io::read_ptr(s, cx, &self.tail, true).await?;
            if t.raw.is_none() {
                return Err(DsError::corrupt(&self.tail, "absent although the queue has elements"));
            }
            if t.ptr.same_target(&hp) {
                // Step 3: the tail lags; help it past the dummy before moving the head.
                cx.stats.helps += 1;
                let new = Ptr {
                    obj: np.obj,
                    tag: np.tag,
                    count: t.ptr.count.wrapping_add(1),
                    owner: 0,
                    mark: false,
                };
                let weak = cx.weak(local_fails);
                if let Cas::Local(_) = io::cas(s, cx, &self.tail, &t, new, weak).await? {
                    local_fails += 1;
                }
                continue;
            }
            let new = Ptr {
                obj: np.obj,
                tag: np.tag,
                count: hp.count.wrapping_add(1),
                owner: 0,
                mark: false,
            };
            let mut batch: Vec<Op> =
                (0..self.layout.fields).map(|i| io::get_op(&self.keys.field(np.obj, i))).collect();
            batch.push(io::cas_op(&self.head, &h, &new, cx.weak(local_fails)));
            let mut out = io::run(s, cx, batch).await?;
            let cas = out.pop().expect("the cas");
            match io::cas_result(cx, &self.head, cas, &new)? {
                Cas::Swapped(_) => {
                    let value = read_fields(&self.keys, np, out.into_iter())?;
                    cx.free(hp.obj);
                    cx.stats.ops += 1;
                    return Ok(Some(value));
                }
                Cas::Synced(now) => h = now,
                Cas::Local(now) => {
                    local_fails += 1;
                    h = now;
                }
            }
        }
    }

    /// Installs the first dummy in `head` (if absent) and then in `tail` (if absent). Strong
    /// CAS: it runs once per queue, and the value a failed CAS returns is used as the winner's.
    async fn init(&self, s: &mut Session, cx: &mut Ctx) -> Result<(), DsError> {
        let mut h = io::read_ptr(s, cx, &self.head, true).await?;
        if h.raw.is_none() {
            let d = cx.alloc()?;
            let null = Ptr { owner: d.tag, ..Ptr::NULL };
            let new = Ptr { obj: d.obj, tag: d.tag, count: 0, owner: 0, mark: false };
            let batch = vec![
                Op::put(self.keys.next(d.obj), null.encode()),
                io::cas_op(&self.head, &h, &new, false),
            ];
            let mut out = io::run(s, cx, batch).await?;
            h = match io::cas_result(cx, &self.head, out.pop().expect("the cas"), &new)? {
                Cas::Swapped(now) => now,
                Cas::Synced(now) | Cas::Local(now) => {
                    cx.free(d.obj);
                    now
                }
            };
        }
        // While `tail` is absent nothing was enqueued, so `head` still holds the first dummy;
        // if `tail` is present this CAS just fails.
        let first = Ptr { obj: h.ptr.obj, tag: h.ptr.tag, count: 0, owner: 0, mark: false };
        io::cas(s, cx, &self.tail, &Seen { raw: None, ptr: Ptr::NULL }, first, false).await?;
        Ok(())
    }
}
