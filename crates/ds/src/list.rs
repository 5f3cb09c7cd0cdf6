//! Harris-Michael ordered set (Harris, DISC 2001, with Michael's SPAA 2002 `Find` that unlinks
//! marked nodes as it goes, and counted pointers), as ported by the Kite paper §8.3.
//!
//! A sorted singly-linked list of `u64` keys. Keys: `{root}/l/{name}/head` (a [`Ptr`] to the
//! first object; absent = empty list), plus the objects. An object's field 0 holds its key
//! (immutable for the incarnation); its other fields are filler (the paper's N fields). The
//! logical-deletion mark lives in the object's `next` value, so marking and linking are one CAS
//! on one key, and a CAS that expects an unmarked `next` fails once the object is deleted.
//!
//! # Memory orderings
//!
//! **find(k)** (used by all three operations) walks from `head`:
//! * every pointer it follows is read with *acquire*: `head`, then each `cur.next`. The object
//!   that a pointer names was published by the CAS that linked it (an RMW, ordered after the
//!   object's relaxed puts), and every value that later names it was either written by an RMW
//!   that read it (a CAS that linked a neighbour or unlinked a predecessor, chaining
//!   synchronizes-with) or is the relaxed `next` put of an object that was itself published
//!   later by an RMW. Either way the object's fields happen-before the acquire;
//! * `cur`'s key (field 0) is a *relaxed* get pipelined after the acquire of `cur.next` (an
//!   acquire orders every later access after it). Both must belong to the incarnation the
//!   pointer named (tags), otherwise `cur` was recycled meanwhile and the walk restarts;
//! * an unmarked `cur` of that incarnation is in the list at the time of the acquire (objects
//!   leave the list only after being marked, and the walk only reached `cur` from a node that
//!   was in the list); so the walk needs no re-validation read of `prev`, unlike the
//!   shared-memory version — the tags do that job;
//! * a marked `cur` is unlinked with *CAS* `prev: cur -> cur.next` (**weak**; failure restarts
//!   the walk, as in Michael's algorithm). The session whose unlink succeeds recycles `cur`.
//!
//! **insert(k)**: find; present: false. Else *relaxed* puts of the N fields and of
//! `next = cur`, then *CAS* `prev: cur -> new` (**weak**, pipelined with the puts): the RMW
//! publishes the object and is the linearization point; it succeeds only if `prev` is still
//! unmarked and still points at `cur` (count included). Failure: find again.
//!
//! **remove(k)**: find; absent: false. *Relaxed* gets of `cur`'s fields pipelined before
//! *CAS* `cur.next: n -> marked(n)` (**weak**). The mark is the linearization point; the fields
//! were read before it, while `cur` could not yet be recycled, and are checked. Then *CAS*
//! `prev: cur -> n` (weak) to unlink; if that fails, a find(k) unlinks it (Michael). So when
//! `remove` returns, the object is no longer reachable.
//!
//! **contains(k)**: find; the answer is whether an unmarked object with key `k` was reached.

use std::sync::Arc;

use bytes::Bytes;
use strata_client::{Op, Session};

use crate::error::DsError;
use crate::heap::{check_root, decode_field, encode_field, Ctx, Keys, Layout, Obj};
use crate::io::{self, Cas};
use crate::ptr::{Ptr, Seen};
use crate::stack::read_fields;

/// A handle on one Harris-Michael list (cheap to clone; holds only key names).
#[derive(Clone, Debug)]
pub struct List {
    keys: Keys,
    head: Bytes,
    layout: Layout,
}

/// Where a search for `k` stopped: `prev` (a key holding a pointer, as read) points at `cur`,
/// the first unmarked object with key `>= k` (null at the end of the list).
struct Found {
    prev_key: Bytes,
    prev: Seen,
    cur: Ptr,
    /// `cur.next` as read (meaningless when `cur` is null).
    cur_next: Seen,
    found: bool,
}

/// One reachable object, as seen by [`List::scan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanEntry {
    pub key: u64,
    /// Logically deleted but not yet unlinked.
    pub marked: bool,
}

impl List {
    /// The list `name` under `root`, with objects of `layout`.
    pub fn new(root: &str, name: &str, layout: Layout) -> Result<List, DsError> {
        check_root(root)?;
        layout.check()?;
        let keys = Keys { root: Arc::from(root) };
        let head = keys.structure("l", name, "head");
        Ok(List { keys, head, layout })
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Adds `k`; false if it was already present.
    pub async fn insert(&self, s: &mut Session, cx: &mut Ctx, k: u64) -> Result<bool, DsError> {
        cx.check(&self.keys.root, s)?;
        let mut local_fails = 0;
        let mut node: Option<Obj> = None;
        let mut fields_written = false;
        loop {
            let f = self.find(s, cx, k, &mut local_fails).await?;
            if f.found {
                if let Some(n) = node {
                    cx.free(n.obj); // never published
                }
                cx.stats.ops += 1;
                return Ok(false);
            }
            let nd = match node {
                Some(n) => n,
                None => *node.insert(cx.alloc()?),
            };
            let mut batch = Vec::with_capacity(self.layout.fields + 2);
            if !fields_written {
                let key = k.to_le_bytes();
                batch.extend((0..self.layout.fields).map(|i| {
                    Op::put(
                        self.keys.field(nd.obj, i),
                        encode_field(self.layout, nd.tag, i, if i == 0 { &key } else { &[] }),
                    )
                }));
                fields_written = true;
            }
            let next = Ptr { obj: f.cur.obj, tag: f.cur.tag, count: 0, owner: nd.tag, mark: false };
            batch.push(Op::put(self.keys.next(nd.obj), next.encode()));
            let new = Ptr {
                obj: nd.obj,
                tag: nd.tag,
                count: f.prev.ptr.count.wrapping_add(1),
                owner: f.prev.ptr.owner,
                mark: false,
            };
            batch.push(io::cas_op(&f.prev_key, &f.prev, &new, cx.weak(local_fails)));
            let mut out = io::run(s, cx, batch).await?;
            match io::cas_result(cx, &f.prev_key, out.pop().expect("the cas"), &new)? {
                Cas::Swapped(_) => {
                    cx.stats.ops += 1;
                    return Ok(true);
                }
                Cas::Synced(_) => {}
                Cas::Local(_) => local_fails += 1,
            }
        }
    }

    /// Removes `k`; false if it was absent.
    pub async fn remove(&self, s: &mut Session, cx: &mut Ctx, k: u64) -> Result<bool, DsError> {
        cx.check(&self.keys.root, s)?;
        let mut local_fails = 0;
        loop {
            let f = self.find(s, cx, k, &mut local_fails).await?;
            if !f.found {
                cx.stats.ops += 1;
                return Ok(false);
            }
            let (cur, n) = (f.cur, f.cur_next.ptr);
            let next_key = self.keys.next(cur.obj);
            let marked = Ptr { mark: true, count: n.count.wrapping_add(1), ..n };
            let mut batch: Vec<Op> =
                (0..self.layout.fields).map(|i| io::get_op(&self.keys.field(cur.obj, i))).collect();
            batch.push(io::cas_op(&next_key, &f.cur_next, &marked, cx.weak(local_fails)));
            let mut out = io::run(s, cx, batch).await?;
            match io::cas_result(cx, &next_key, out.pop().expect("the cas"), &marked)? {
                Cas::Swapped(_) => {
                    let payload = read_fields(&self.keys, cur, out.into_iter())?;
                    if payload.as_ref() != k.to_le_bytes() {
                        return Err(DsError::corrupt(
                            &self.keys.field(cur.obj, 0),
                            format!("holds {payload:?}, not key {k}"),
                        ));
                    }
                    let unlinked = Ptr {
                        obj: n.obj,
                        tag: n.tag,
                        count: f.prev.ptr.count.wrapping_add(1),
                        owner: f.prev.ptr.owner,
                        mark: false,
                    };
                    let weak = cx.weak(local_fails);
                    match io::cas(s, cx, &f.prev_key, &f.prev, unlinked, weak).await? {
                        Cas::Swapped(_) => cx.free(cur.obj),
                        _ => {
                            // Someone changed `prev`; a search unlinks every marked object it
                            // passes, and it must pass ours to reach `k`.
                            self.find(s, cx, k, &mut local_fails).await?;
                        }
                    }
                    cx.stats.ops += 1;
                    return Ok(true);
                }
                Cas::Synced(_) => {}
                Cas::Local(_) => local_fails += 1,
            }
        }
    }

    /// Whether `k` is present.
    pub async fn contains(&self, s: &mut Session, cx: &mut Ctx, k: u64) -> Result<bool, DsError> {
        cx.check(&self.keys.root, s)?;
        let mut local_fails = 0;
        let f = self.find(s, cx, k, &mut local_fails).await?;
        cx.stats.ops += 1;
        Ok(f.found)
    }

    /// Every reachable object in list order, marked ones included, without unlinking anything.
    /// Meant for quiescent checks: fails if an object is recycled under it.
    pub async fn scan(&self, s: &mut Session, cx: &mut Ctx) -> Result<Vec<ScanEntry>, DsError> {
        cx.check(&self.keys.root, s)?;
        let mut out = Vec::new();
        let mut p = io::read_ptr(s, cx, &self.head, true).await?.ptr;
        while !p.is_null() {
            let (next, key) = self.read_node(s, cx, p).await?;
            if next.ptr.owner != p.tag {
                return Err(DsError::corrupt(
                    &self.keys.next(p.obj),
                    "recycled during a scan (is the list quiescent?)",
                ));
            }
            out.push(ScanEntry { key: key?, marked: next.ptr.mark });
            if out.len() > 10_000_000 {
                return Err(DsError::corrupt(&self.head, "more than 10^7 objects: a cycle?"));
            }
            p = next.ptr;
        }
        Ok(out)
    }

    /// Acquire of `p.next` followed by a relaxed get of `p`'s key field, in one batch.
    async fn read_node(
        &self,
        s: &mut Session,
        cx: &mut Ctx,
        p: Ptr,
    ) -> Result<(Seen, Result<u64, DsError>), DsError> {
        let next_key = self.keys.next(p.obj);
        let key_key = self.keys.field(p.obj, 0);
        let mut out = io::run(s, cx, vec![Op::acquire(next_key.clone()), io::get_op(&key_key)])
            .await?
            .into_iter();
        let next = io::seen(&next_key, io::value(&next_key, out.next().expect("acquire"))?.value)?;
        let field = io::value(&key_key, out.next().expect("get"))?;
        let key = decode_field(&key_key, field.value.as_ref(), p.tag, 0).and_then(|b| {
            <[u8; 8]>::try_from(b.as_ref())
                .map(u64::from_le_bytes)
                .map_err(|_| DsError::corrupt(&key_key, format!("a key of {} bytes", b.len())))
        });
        Ok((next, key))
    }

    /// Michael's `Find`: the position of `k`, unlinking marked objects on the way.
    async fn find(
        &self,
        s: &mut Session,
        cx: &mut Ctx,
        k: u64,
        local_fails: &mut u32,
    ) -> Result<Found, DsError> {
        'retry: loop {
            let mut prev_key = self.head.clone();
            let mut prev = io::read_ptr(s, cx, &prev_key, true).await?;
            loop {
                let cur = prev.ptr;
                if cur.is_null() {
                    return Ok(Found {
                        prev_key,
                        prev,
                        cur,
                        cur_next: Seen { raw: None, ptr: Ptr::NULL },
                        found: false,
                    });
                }
                let (cn, key) = self.read_node(s, cx, cur).await?;
                if cn.ptr.owner != cur.tag {
                    cx.stats.stale_reads += 1;
                    continue 'retry;
                }
                let ckey = match key {
                    Ok(ckey) => ckey,
                    Err(e) => {
                        // Recycled between the two reads, or a real visibility bug: the key
                        // must be visible while the incarnation is current.
                        let again = io::read_ptr(s, cx, &self.keys.next(cur.obj), true).await?;
                        if again.ptr.owner == cur.tag {
                            return Err(e);
                        }
                        cx.stats.stale_reads += 1;
                        continue 'retry;
                    }
                };
                let next_key = self.keys.next(cur.obj);
                if !cn.ptr.mark {
                    if ckey >= k {
                        return Ok(Found { prev_key, prev, cur, cur_next: cn, found: ckey == k });
                    }
                    prev_key = next_key;
                    prev = cn;
                } else {
                    let n = cn.ptr;
                    let new = Ptr {
                        obj: n.obj,
                        tag: n.tag,
                        count: prev.ptr.count.wrapping_add(1),
                        owner: prev.ptr.owner,
                        mark: false,
                    };
                    let weak = cx.weak(*local_fails);
                    match io::cas(s, cx, &prev_key, &prev, new, weak).await? {
                        Cas::Swapped(now) => {
                            cx.stats.helps += 1;
                            cx.free(cur.obj);
                            prev = now;
                        }
                        Cas::Synced(_) => continue 'retry,
                        Cas::Local(_) => {
                            *local_fails += 1;
                            continue 'retry;
                        }
                    }
                }
            }
        }
    }
}
