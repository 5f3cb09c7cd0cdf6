//! Kairos (`specs/kairos.md`): inter-transaction caching with self-invalidating leases and
//! sharded OCC validation, as sans-IO building blocks.
//!
//! The lease model (issue #19 item 4), in [`lease`]:
//!
//! * [`AccessStats`] (§5.10): the sliding-window mean of the gaps between a key's accesses,
//!   `R` at a client (reads) and `W` at a primary (committed writes);
//! * [`LeaseModel`] (§5.11): Equations 1–5, the fresh / stale / miss rates of a lease `d`;
//! * [`find_ideal_lease_duration`] (§5.12, Algorithm 1) and the [`LeasePolicy`]s of §5.14
//!   (ideal, static `P(x)`, mean, fixed, and the naive and explicit-invalidation baselines);
//! * [`monte_carlo::simulate`] (§5.13): the simulator that checks the model.
//!
//! Timestamps and validation (issue #19 item 1, the validator half of items 2 and 3):
//!
//! * [`timestamp`] (§5.1, §3.1, §9.3): [`Timestamp`], the monotone [`ClientClock`] (physical
//!   time is an input), RW commit timestamps with the bump, RO timestamps, [`freshness`];
//! * [`validator`] (§3.2, §5.6, §5.16, §6.4): [`Validator`], Algorithm 3 as a deterministic
//!   state machine (`Clone`, `BTreeMap` only, no clock) that a shard's replicated state can
//!   embed: `validate`, `decide`, termination queries, reports and pruning, rebuilding after
//!   a restart;
//! * [`watermark`] (§5.9): a client's `local_wm` and `c_freshness`, and [`Watermarks`]
//!   (`client_reports`, `WM`, monotone `ts_GC`) for every process that hears reports;
//! * [`primary`] (§3.3, §5.7): a reference storage primary (latest versions, prepared write
//!   sets, decisions with the version-order assertion, `W`, and the sharers and
//!   invalidations of explicit invalidation, off unless asked for);
//! * [`placement`] (§4): FNV-1a key placement;
//! * [`sim`] (§7): a deterministic simulation of clients with skewed clocks and caches
//!   (leases, naive, explicit invalidation) over validators and primaries, with strict
//!   mode's commit wait (K5), and the checkers of §7 ([`sim::check`]), each with a canary
//!   ([`PlantedBug`]).
//!
//! Nothing here does IO, reads a clock or draws from a thread RNG: event times are arguments
//! (`strata_wire::Instant`, or clock readings in nanoseconds), randomness a seeded
//! `strata_core::Prng`.
//!
//! The client cache is in [`cache`] (§5.2 step 4, §5.5, §5.10, §5.14): entries with `vts`,
//! `lts` and `fts`, LRU eviction, self-invalidation at `lts`, leases from the policies above,
//! the abort and commit drop rules, and explicit invalidation for the EI baseline. The client
//! library drives it (Algorithm 2: `strata-client`'s `kairos_cache` module); a shard's log
//! embeds the validator and keeps `W` (`strata-log`).

pub mod cache;
pub mod lease;
pub mod placement;
pub mod planted;
pub mod primary;
pub mod sim;
pub mod timestamp;
pub mod validator;
pub mod watermark;

pub use lease::monte_carlo;
pub use lease::{
    find_ideal_lease_duration, AccessStats, HitRates, IdealLease, LeaseDuration, LeaseLimits,
    LeaseModel, LeasePolicy, ModelError, MAX_HITS_PER_LEASE, MAX_LEASE, STATS_WINDOW,
};
pub use planted::PlantedBug;
pub use primary::Primary;
pub use timestamp::{freshness, ClientClock, Timestamp};
pub use validator::{AbortReason, Key, ValidateReq, Validator, Vote};
pub use watermark::{Report, Watermarks};
