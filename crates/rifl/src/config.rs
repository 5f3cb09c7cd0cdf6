//! RIFL's parameters (`specs/rifl.md` §3.5) and their validation.

use std::time::Duration;

use thiserror::Error;

/// Timing and size parameters of RIFL. [`RiflConfig::default`] is for production
/// (RAMCloud's values); [`RiflConfig::simulation`] scales the lease down (§3.5's
/// "simulation suggestion") so tests see expiries in seconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RiflConfig {
    /// How many RPCs of one client may be outstanding or uncollectable (§5.2; 512).
    pub window: u64,
    /// `LEASE_TERM`: a grant is valid this long in cluster time (30 min).
    pub lease_term: Duration,
    /// Renew when less than this remains (half the term).
    pub renew_before: Duration,
    /// `DANGER`: stop issuing new RPCs when less than this remains (1 min).
    pub danger: Duration,
    /// The cluster clock never hands out a time more than this beyond its last persisted safe
    /// time (3 s); the service persists a new safe time every `safe_persist_period` (1.5 s).
    pub safe_interval: Duration,
    pub safe_persist_period: Duration,
    /// Lease ids are reserved durably in blocks of this size (1000), so a restarted service
    /// never reissues one.
    pub id_block: u64,
    /// Servers ask the lease service about a lease whose expiration is not beyond their
    /// observed cluster time plus this margin (R-D3: 0).
    pub validation_margin: Duration,
    /// The servers' and the service's cleaners run every `lease_term / 10`.
    pub cleaner_period: Duration,
}

impl Default for RiflConfig {
    fn default() -> Self {
        RiflConfig {
            window: strata_wire::rifl::WINDOW,
            lease_term: Duration::from_secs(30 * 60),
            renew_before: Duration::from_secs(15 * 60),
            danger: Duration::from_secs(60),
            safe_interval: Duration::from_secs(3),
            safe_persist_period: Duration::from_millis(1500),
            id_block: 1000,
            validation_margin: Duration::ZERO,
            cleaner_period: Duration::from_secs(3 * 60),
        }
    }
}

impl RiflConfig {
    /// §3.5's simulation column: a 10 s term renewed at 5 s, a 1 s danger zone, blocks of 10 ids.
    pub fn simulation() -> Self {
        RiflConfig {
            lease_term: Duration::from_secs(10),
            renew_before: Duration::from_secs(5),
            danger: Duration::from_secs(1),
            id_block: 10,
            cleaner_period: Duration::from_secs(1),
            ..RiflConfig::default()
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.window == 0 || self.window > strata_wire::rifl::WINDOW {
            return Err(ConfigError(
                "window must be in 1..=512 (servers reject requests beyond 512)",
            ));
        }
        if self.lease_term.is_zero()
            || self.danger >= self.renew_before
            || self.renew_before >= self.lease_term
        {
            return Err(ConfigError("need 0 < danger < renew_before < lease_term"));
        }
        if self.safe_persist_period.is_zero() || self.safe_persist_period >= self.safe_interval {
            return Err(ConfigError("need 0 < safe_persist_period < safe_interval"));
        }
        if self.id_block == 0 {
            return Err(ConfigError("id_block must be at least 1"));
        }
        if self.cleaner_period.is_zero() {
            return Err(ConfigError("cleaner_period must be positive"));
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("invalid RIFL configuration: {0}")]
pub struct ConfigError(pub &'static str);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_presets_are_valid_and_bad_timings_are_refused() {
        RiflConfig::default().validate().unwrap();
        RiflConfig::simulation().validate().unwrap();
        let bad = RiflConfig { danger: Duration::from_secs(20 * 60), ..RiflConfig::default() };
        assert!(bad.validate().is_err());
        let bad = RiflConfig { window: 513, ..RiflConfig::default() };
        assert!(bad.validate().is_err());
        let bad =
            RiflConfig { safe_persist_period: Duration::from_secs(3), ..RiflConfig::default() };
        assert!(bad.validate().is_err());
    }
}
