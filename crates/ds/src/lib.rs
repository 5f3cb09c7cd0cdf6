//! Lock-free data structures over Strata's release-consistent (RC_Lin) API — the Kite paper's
//! §8.3 ports (issue #3 item 6): a [Treiber stack](Stack), a [Michael-Scott queue](Queue) and a
//! [Harris-Michael ordered set](List), plus the paper's benchmark loop ([`run_workload`]).
//!
//! ```no_run
//! # async fn demo(s: &mut strata_client::Session) -> Result<(), strata_ds::DsError> {
//! use strata_ds::{Ctx, Layout, Stack};
//! let mut cx = Ctx::new(s, "ds").await?;             // per session: allocator, free list, stats
//! let stack = Stack::new("ds", "jobs", Layout::FOUR)?; // a handle: key names only
//! stack.push(s, &mut cx, b"job-1").await?;
//! assert_eq!(stack.pop(s, &mut cx).await?.as_deref(), Some(&b"job-1"[..]));
//! # Ok(()) }
//! ```
//!
//! # The idea (Kite §8.3)
//!
//! Shared-memory lock-free algorithms port to Kite almost line by line, because Kite offers the
//! programming model they were written for: relaxed loads and stores, release stores, acquire
//! loads and atomic read-modify-writes (FAA, CAS), with RC_Lin's orderings (Kite spec §1.2):
//! an RMW is ordered after *every* earlier access of the session and before every later one;
//! an acquire is ordered before every later access; a release after every earlier one; relaxed
//! accesses are ordered only with same-key accesses. Sync operations (releases, acquires, RMWs)
//! are linearizable. The bulk of every operation — the N fields of an object — is written and
//! read with cheap relaxed accesses (local reads, broadcast writes); only the few pointer
//! accesses that order them are synchronizing.
//!
//! # Key layout
//!
//! Everything lives under a caller-chosen `root` prefix (e.g. `ds`); keys are UTF-8.
//!
//! | key | holds | written by |
//! |---|---|---|
//! | `{root}/alloc` | allocator counter (u64) | FAA, once per [`Ctx`] |
//! | `{root}/o/{id:016x}/{i}` | data field `i` of object `id`, `i < N` | relaxed put |
//! | `{root}/o/{id:016x}/n` | the object's `next` pointer | relaxed put (init), CAS |
//! | `{root}/s/{name}/top` | stack top pointer | CAS |
//! | `{root}/q/{name}/head`, `.../tail` | queue head and tail pointers | CAS |
//! | `{root}/l/{name}/head` | list head pointer | CAS |
//!
//! A pointer value ([`Ptr`], 33 bytes) packs the target object id, the target's incarnation
//! tag, the ABA counter of the location (incremented by every CAS that changes it), the
//! incarnation tag of the object that owns the location, and the list's deletion mark. Absent
//! keys read as null pointers, so structures need no set-up: the stack and the list are empty
//! while absent, and the queue installs its dummy with a strong CAS on first use.
//!
//! Objects have N data fields ([`Layout`]: the paper's 4 or 32 fields of 32 bytes); field 0
//! carries the element (list: the key). Object ids are allocated without coordination
//! (`allocator << 32 | counter`, the allocator number coming from one FAA per [`Ctx`]) and
//! *recycled*: whoever unlinks an object puts it on its free list and reuses its keys under a
//! fresh incarnation tag. Recycling is what makes ABA possible, and the counters plus tags are
//! what make it harmless — the same reason the paper keeps the ABA counters. It also keeps the
//! number of keys bounded in long benchmark runs.
//!
//! # Orderings, in one table
//!
//! | access | class | why that is enough |
//! |---|---|---|
//! | object fields, `next` initialisation | relaxed put | published by the CAS that links the object: an RMW is ordered after all earlier accesses |
//! | linking / unlinking / marking / head, tail, top swings | CAS (weak, see below) | the linearization points; the ABA counter makes success mean "unchanged since read" |
//! | a pointer that will be dereferenced (stack top in pop, `h.next` in dequeue, every pointer a list search follows) | acquire, or the value returned by a CAS that failed after a quorum round | synchronizes with the CAS that published the target, so the target's relaxed fields are visible to the relaxed reads that follow |
//! | a pointer used only as a CAS expectation or a hint (stack top in push, queue tail in enqueue, queue head in dequeue — what dequeue dereferences is `head.next`, read with acquire) | relaxed get | the CAS validates it against a quorum; a stale guess only costs a retry |
//! | queue `tail` in dequeue | acquire | must be linearizable: the head may only pass a tail it knows is ahead |
//! | fields of the element being taken | relaxed get, pipelined before (queue, list) or after (stack) the CAS | ordered with respect to the RMW, see each module |
//!
//! No release or acquire is needed to publish anything: every publication is a CAS, and an RMW
//! both releases (all earlier → RMW) and acquires (RMW → all later). Releases would only be
//! needed to publish with a plain write, which none of these algorithms do.
//!
//! # Weak or strong CAS
//!
//! A weak CAS compares against the local replica first and, if that differs, fails at once
//! without a round trip, behaving as a relaxed read; otherwise it is exactly a strong CAS. Every
//! CAS in these algorithms sits in a retry loop whose failure path re-reads, so a spurious local
//! failure is harmless: all of them are weak by default ([`Ctx::weak_cas`]), as in the paper,
//! which saves the quorum round on conflicts the local replica already shows. Two rules keep this
//! safe and live:
//!
//! * the value returned by a *local* failure is treated as a relaxed read and never
//!   dereferenced (the stack's pop and the queue re-acquire instead); only a failure that went
//!   to the quorum (the outcome has a `written` version) yields an acquire-grade value;
//! * after a few (4) local failures within one operation it switches to strong CAS, so a
//!   replica that lags cannot make an operation spin on local failures. (In practice a local
//!   failure means the local replica already holds a *newer* value, because every expectation
//!   comes from a read of that same replica, an acquire or a quorum CAS, which all refresh it.)
//!
//! Strong CAS is used where the answer itself is relied upon: installing a queue's first dummy
//! in `head` and `tail` (the value a losing CAS returns is taken as the winner's dummy).
//!
//! # Modules
//!
//! * [`stack`]: Treiber stack — push, pop (`None` when empty);
//! * [`queue`]: Michael-Scott queue — enqueue, dequeue, with the lagging-tail help step;
//! * [`list`]: Harris-Michael list — insert, remove (mark, then unlink), contains;
//! * [`workload`]: the paper's loop of push-then-pop pairs on random structures;
//! * [`ptr`], [`heap`]: pointer encoding, objects, the allocator context.
//!
//! Every operation takes an idle [`strata_client::Session`] (no requests outstanding) and the
//! session's [`Ctx`]. Errors from the store are passed through ([`DsError::Client`]); a value that
//! contradicts the structure's invariants (a field of the wrong incarnation after a successful
//! CAS, a malformed pointer) is [`DsError::Corrupt`] — under RC_Lin it cannot happen, so the
//! tests treat it as a store bug.

pub mod error;
pub mod heap;
mod io;
pub mod list;
pub mod ptr;
pub mod queue;
pub mod stack;
pub mod workload;

pub use error::DsError;
pub use heap::{Ctx, Layout, Stats};
pub use list::{List, ScanEntry};
pub use ptr::Ptr;
pub use queue::Queue;
pub use stack::Stack;
pub use workload::{run_workload, Budget, DsKind, Workload, WorkloadReport};
