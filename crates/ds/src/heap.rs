//! Objects: ids, incarnation tags, the per-session allocator with its free list ([`Ctx`]),
//! object layout ([`Layout`]) and the encoding of data fields.
//!
//! An object `o` (a stack/queue/list node) is the keys
//!
//! ```text
//! {root}/o/{o:016x}/0 .. {root}/o/{o:016x}/{N-1}   N data fields (relaxed puts and gets)
//! {root}/o/{o:016x}/n                              its `next` pointer (see crate::ptr)
//! ```
//!
//! Ids are allocated without coordination: a [`Ctx`] takes a unique allocator number once
//! (FAA on `{root}/alloc`) and then numbers objects and incarnations locally as
//! `allocator << 32 | counter`. Objects are recycled: whoever unlinks an object (a successful
//! pop, dequeue or list unlink) puts it on its own free list, and its next allocation reuses the
//! keys under a fresh incarnation tag. Keys therefore stay bounded by the number of live
//! elements plus the free lists, which is what lets a benchmark run for long.
//!
//! Data field `i` holds `[tag u64][i u32][len u32][payload][padding]`, padded to
//! `field_bytes`. Field 0 carries the element (the payload); the others carry filler. A reader
//! checks tag and index of every field it reads against the pointer that led it there; a
//! mismatch after a successful CAS is reported as [`DsError::Corrupt`] (the paper's "per-object
//! metadata check").

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use strata_client::Session;

use crate::error::DsError;

/// Shape of every object of a structure: `fields` data fields of at least `field_bytes` bytes
/// each (field 0 grows to fit a larger element). The paper evaluates 4 and 32 fields of 32 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub fields: usize,
    pub field_bytes: usize,
}

impl Layout {
    /// 4 fields of 32 bytes (the paper's TS-4, MSQ-4, HML-4).
    pub const FOUR: Layout = Layout { fields: 4, field_bytes: 32 };
    /// 32 fields of 32 bytes (the paper's TS-32, MSQ-32, HML-32).
    pub const THIRTY_TWO: Layout = Layout { fields: 32, field_bytes: 32 };

    pub fn new(fields: usize, field_bytes: usize) -> Layout {
        Layout { fields, field_bytes }
    }

    pub(crate) fn check(&self) -> Result<(), DsError> {
        if self.fields == 0 || self.fields > 4096 {
            return Err(DsError::Usage(format!(
                "an object needs 1..=4096 fields, not {}",
                self.fields
            )));
        }
        Ok(())
    }
}

impl Default for Layout {
    fn default() -> Self {
        Layout::FOUR
    }
}

/// Counters of what the operations of one [`Ctx`] did; the difference between two snapshots
/// tells what happened in between.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Completed structure operations (push, pop, enqueue, dequeue, insert, remove, contains).
    pub ops: u64,
    /// Requests issued, by class (every attempt counts, failed ones included): relaxed gets,
    /// relaxed puts, acquires, releases (none of these algorithms needs one), and CAS (weak and
    /// strong; `cas` below). `sync_share` is the paper's "sync-per".
    pub relaxed_reads: u64,
    pub relaxed_writes: u64,
    pub acquires: u64,
    pub releases: u64,
    /// CAS attempts, weak and strong.
    pub cas: u64,
    /// Weak CAS that failed at once on the local replica (relaxed-read semantics, no round trip).
    pub cas_local_fail: u64,
    /// CAS that failed after a quorum round (a real conflict, or a stale local replica).
    pub cas_quorum_fail: u64,
    /// Reads that found a pointer target recycled, or a stale hint, and had to read again.
    pub stale_reads: u64,
    /// Help steps: swinging a lagging queue tail, unlinking another session's marked list node.
    pub helps: u64,
    /// Objects allocated fresh / taken from the free list.
    pub alloc_fresh: u64,
    pub alloc_reused: u64,
}

impl Stats {
    /// Field-wise `self - earlier` (saturating).
    pub fn since(&self, earlier: &Stats) -> Stats {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        Stats {
            ops: d(self.ops, earlier.ops),
            relaxed_reads: d(self.relaxed_reads, earlier.relaxed_reads),
            relaxed_writes: d(self.relaxed_writes, earlier.relaxed_writes),
            acquires: d(self.acquires, earlier.acquires),
            releases: d(self.releases, earlier.releases),
            cas: d(self.cas, earlier.cas),
            cas_local_fail: d(self.cas_local_fail, earlier.cas_local_fail),
            cas_quorum_fail: d(self.cas_quorum_fail, earlier.cas_quorum_fail),
            stale_reads: d(self.stale_reads, earlier.stale_reads),
            helps: d(self.helps, earlier.helps),
            alloc_fresh: d(self.alloc_fresh, earlier.alloc_fresh),
            alloc_reused: d(self.alloc_reused, earlier.alloc_reused),
        }
    }

    /// Every request issued to the store.
    pub fn requests(&self) -> u64 {
        self.relaxed_reads + self.relaxed_writes + self.acquires + self.releases + self.cas
    }

    /// Fraction of requests that synchronize (acquires, releases, CAS; a weak CAS that failed
    /// locally is counted here too although it behaved as a relaxed read).
    pub fn sync_share(&self) -> f64 {
        let r = self.requests();
        if r == 0 {
            0.0
        } else {
            (self.acquires + self.releases + self.cas) as f64 / r as f64
        }
    }

    /// Field-wise sum.
    pub fn add(&mut self, o: &Stats) {
        self.ops += o.ops;
        self.relaxed_reads += o.relaxed_reads;
        self.relaxed_writes += o.relaxed_writes;
        self.acquires += o.acquires;
        self.releases += o.releases;
        self.cas += o.cas;
        self.cas_local_fail += o.cas_local_fail;
        self.cas_quorum_fail += o.cas_quorum_fail;
        self.stale_reads += o.stale_reads;
        self.helps += o.helps;
        self.alloc_fresh += o.alloc_fresh;
        self.alloc_reused += o.alloc_reused;
    }
}

/// One object incarnation: its id and the tag of this incarnation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Obj {
    pub obj: u64,
    pub tag: u64,
}

/// How many freed objects a context keeps for reuse; beyond that they are abandoned.
const FREE_LIST_MAX: usize = 4096;
/// After this many consecutive local failures of a weak CAS within one operation, the
/// operation switches to strong CAS (belt and braces: see the crate doc on weak CAS).
pub(crate) const MAX_LOCAL_FAILS: u32 = 4;

/// Client-side context of one session's data-structure operations: the object allocator and
/// its free list, the CAS policy and the counters. Not shared: give each session its own.
///
/// Every structure it is used with must live under the same `root`.
#[derive(Debug)]
pub struct Ctx {
    root: Arc<str>,
    id: u64,
    next_obj: u32,
    next_tag: u32,
    next_unique: u32,
    free: Vec<u64>,
    /// Use weak CAS where a spurious local failure is harmless (default `true`, as the paper
    /// does); `false` makes every CAS strong (for comparisons).
    pub weak_cas: bool,
    pub stats: Stats,
}

impl Ctx {
    /// Takes a unique allocator number with one FAA on `{root}/alloc`.
    pub async fn new(session: &mut Session, root: &str) -> Result<Ctx, DsError> {
        check_root(root)?;
        let id = session.faa(format!("{root}/alloc"), 1).await? + 1;
        if id > u64::from(u32::MAX) {
            return Err(DsError::Usage(format!("allocator numbers under {root:?} are exhausted")));
        }
        Ok(Ctx {
            root: root.into(),
            id,
            next_obj: 1,
            next_tag: 1,
            next_unique: 0,
            free: Vec::new(),
            weak_cas: true,
            stats: Stats::default(),
        })
    }

    /// This context's allocator number (unique under its root).
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn root(&self) -> &str {
        &self.root
    }

    /// A number no other context under this root returns (`id << 32 | counter`; the counter
    /// wraps after 2^32 calls). Workloads use it for element values and list keys.
    pub fn unique(&mut self) -> u64 {
        self.next_unique = self.next_unique.wrapping_add(1);
        self.id << 32 | u64::from(self.next_unique)
    }

    /// Objects on the free list.
    pub fn free_objects(&self) -> usize {
        self.free.len()
    }

    /// A new incarnation: a recycled object if there is one, else a fresh id.
    pub(crate) fn alloc(&mut self) -> Result<Obj, DsError> {
        if self.next_tag == u32::MAX {
            return Err(DsError::Usage(
                "this context allocated 2^32 objects; open a new Ctx".into(),
            ));
        }
        let tag = self.id << 32 | u64::from(self.next_tag);
        self.next_tag += 1;
        let obj = match self.free.pop() {
            Some(o) => {
                self.stats.alloc_reused += 1;
                o
            }
            None => {
                if self.next_obj == u32::MAX {
                    return Err(DsError::Usage(
                        "this context allocated 2^32 objects; open a new Ctx".into(),
                    ));
                }
                let o = self.id << 32 | u64::from(self.next_obj);
                self.next_obj += 1;
                self.stats.alloc_fresh += 1;
                o
            }
        };
        Ok(Obj { obj, tag })
    }

    /// Hands an object that no structure references any more back for reuse.
    pub(crate) fn free(&mut self, obj: u64) {
        if self.free.len() < FREE_LIST_MAX {
            self.free.push(obj);
        }
    }

    pub(crate) fn weak(&self, local_fails: u32) -> bool {
        self.weak_cas && local_fails < MAX_LOCAL_FAILS
    }

    pub(crate) fn check(&self, root: &Arc<str>, session: &Session) -> Result<(), DsError> {
        if *self.root != **root {
            return Err(DsError::Usage(format!(
                "a context of root {:?} used with a structure of root {:?}",
                self.root, root
            )));
        }
        if session.outstanding() != 0 {
            return Err(DsError::Usage(format!(
                "session {} has {} requests outstanding; data-structure operations need it idle",
                session.id(),
                session.outstanding()
            )));
        }
        Ok(())
    }
}

pub(crate) fn check_root(root: &str) -> Result<(), DsError> {
    if root.is_empty() {
        return Err(DsError::Usage("the root prefix must not be empty".into()));
    }
    Ok(())
}

/// Key names under one root.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    pub root: Arc<str>,
}

impl Keys {
    pub fn field(&self, obj: u64, i: usize) -> Bytes {
        Bytes::from(format!("{}/o/{obj:016x}/{i}", self.root))
    }
    pub fn next(&self, obj: u64) -> Bytes {
        Bytes::from(format!("{}/o/{obj:016x}/n", self.root))
    }
    pub fn structure(&self, kind: &str, name: &str, what: &str) -> Bytes {
        Bytes::from(format!("{}/{kind}/{name}/{what}", self.root))
    }
}

const FIELD_HEADER: usize = 16;

/// The value of data field `i` of incarnation `tag`.
pub(crate) fn encode_field(layout: Layout, tag: u64, i: usize, payload: &[u8]) -> Bytes {
    let len = (FIELD_HEADER + payload.len()).max(layout.field_bytes);
    let mut b = BytesMut::with_capacity(len);
    b.put_u64_le(tag);
    b.put_u32_le(i as u32);
    b.put_u32_le(payload.len() as u32);
    b.put_slice(payload);
    // Filler that differs per incarnation and field, so a stale field cannot pass for a fresh one.
    let mut x = tag ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    while b.len() < len {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        b.put_u8((x >> 56) as u8);
    }
    b.freeze()
}

/// The payload of data field `i`, if the value is field `i` of incarnation `tag`.
pub(crate) fn decode_field(
    key: &[u8],
    v: Option<&Bytes>,
    tag: u64,
    i: usize,
) -> Result<Bytes, DsError> {
    let Some(v) = v else {
        return Err(DsError::corrupt(key, format!("field {i} of incarnation {tag:#x} is absent")));
    };
    if v.len() < FIELD_HEADER {
        return Err(DsError::corrupt(key, format!("field value of {} bytes", v.len())));
    }
    let got_tag = u64::from_le_bytes(v[0..8].try_into().expect("8"));
    let got_i = u32::from_le_bytes(v[8..12].try_into().expect("4")) as usize;
    let len = u32::from_le_bytes(v[12..16].try_into().expect("4")) as usize;
    if got_tag != tag || got_i != i || FIELD_HEADER + len > v.len() {
        return Err(DsError::corrupt(
            key,
            format!("expected field {i} of incarnation {tag:#x}, found field {got_i} of incarnation {got_tag:#x}"),
        ));
    }
    Ok(v.slice(FIELD_HEADER..FIELD_HEADER + len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_reject_other_incarnations() {
        let l = Layout::FOUR;
        let f0 = encode_field(l, 5, 0, b"hello");
        assert_eq!(f0.len(), 32);
        assert_eq!(decode_field(b"k", Some(&f0), 5, 0).unwrap(), Bytes::from_static(b"hello"));
        assert!(decode_field(b"k", Some(&f0), 6, 0).is_err());
        assert!(decode_field(b"k", Some(&f0), 5, 1).is_err());
        assert!(decode_field(b"k", None, 5, 0).is_err());
        let big = encode_field(l, 5, 0, &[1u8; 100]);
        assert_eq!(decode_field(b"k", Some(&big), 5, 0).unwrap().len(), 100);
        assert_ne!(encode_field(l, 5, 1, b""), encode_field(l, 6, 1, b"")[..]);
    }
}
