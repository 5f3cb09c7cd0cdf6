//! Kairos (`specs/kairos.md`): inter-transaction caching with self-invalidating leases and
//! sharded OCC validation, as sans-IO building blocks.
//!
//! So far the lease model (issue #19 item 4), in [`lease`]:
//!
//! * [`AccessStats`] (§5.10): the sliding-window mean of the gaps between a key's accesses,
//!   `R` at a client (reads) and `W` at a primary (committed writes);
//! * [`LeaseModel`] (§5.11): Equations 1–5, the fresh / stale / miss rates of a lease `d`;
//! * [`find_ideal_lease_duration`] (§5.12, Algorithm 1) and the [`LeasePolicy`]s of §5.14
//!   (ideal, static `P(x)`, mean, fixed, and the naive and explicit-invalidation baselines);
//! * [`monte_carlo::simulate`] (§5.13): the simulator that checks the model.
//!
//! Nothing here does IO, reads a clock or draws from a thread RNG: event times are arguments
//! (`strata_wire::Instant`), randomness a seeded `strata_core::Prng`. The validators and the
//! client cache come later, as modules beside `lease`.

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
