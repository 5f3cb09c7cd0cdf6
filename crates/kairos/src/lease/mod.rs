//! Self-invalidating leases (kairos.md §5.10 – §5.14): how long a client may serve a cached
//! value without asking anyone, sized by a model of the key's read and write rates.
//!
//! Units: the model ([`model`], [`policy::find_ideal_lease_duration`], [`monte_carlo`]) is plain
//! `f64` **seconds** throughout (`r_s`, `w_s`, `d_s`; `lambda_per_s = 1 / w_s`); the edges that a
//! cache will call — [`AccessStats`] and [`LeasePolicy::lease_duration`] — take event times as
//! `strata_wire::Instant` and means and leases as `std::time::Duration`.

use std::time::Duration;

pub mod model;
pub mod monte_carlo;
pub mod policy;
pub mod stats;

pub use model::{HitRates, LeaseModel, ModelError};
pub use policy::{find_ideal_lease_duration, IdealLease, LeaseDuration, LeasePolicy};
pub use stats::AccessStats;

/// Gaps averaged by [`AccessStats`] (kairos.md §3.5, §5.10 **\[DECISION\]**: the paper does not
/// say how its means are computed; a sliding window of the last 64 follows a key whose
/// popularity drifts while smoothing single bursts).
pub const STATS_WINDOW: usize = 64;

/// Algorithm 1 stops after this many hits per lease (kairos.md §3.5, §9.9 **\[DECISION\]**):
/// with `lambda = 0` (a key never written) the fresh-hit rate grows for ever.
pub const MAX_HITS_PER_LEASE: u32 = 10_000;

/// No lease is longer (kairos.md §3.5 **\[DECISION\]**: the largest lease the paper observed).
pub const MAX_LEASE: Duration = Duration::from_secs(5);

/// The guards of Algorithm 1 and the cap on every lease a policy computes from statistics.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LeaseLimits {
    /// Largest `k` (expected hits per lease) Algorithm 1 tries.
    pub max_hits_per_lease: u32,
    /// Longest lease.
    pub max_lease: Duration,
}

impl Default for LeaseLimits {
    fn default() -> LeaseLimits {
        LeaseLimits { max_hits_per_lease: MAX_HITS_PER_LEASE, max_lease: MAX_LEASE }
    }
}
