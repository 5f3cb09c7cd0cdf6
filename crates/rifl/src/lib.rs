//! RIFL: exactly-once RPCs (`specs/rifl.md`), as sans-IO state machines.
//!
//! * [`RequestTracker`] (client, §5.2): sequence numbers, `first_incomplete`, the window of
//!   512 RPCs whose records cannot be collected;
//! * [`ResultTracker`] (server, §5.4): per client the ack watermark and the completion records
//!   of unacknowledged RPCs; answers every arrival with NEW / COMPLETED / IN_PROGRESS / STALE,
//!   validates leases from the cluster clock (§5.5.3) and collects records by acknowledgement
//!   and by confirmed lease expiry (§5.6);
//! * [`LeaseService`] (§5.5.2): the lease table and the cluster clock, whose durable state
//!   (the set of lease ids, the reserved-id mark, the safe cluster time) changes only through
//!   [`LeaseCommand`]s the driver makes durable — in Strata, entries of a `log` table, so the
//!   service survives crashes and leader changes (R-D1);
//! * [`LeaseValidator`] (§5.5.3, §5.6): a storage node's lease check in front of its engines
//!   (alive by the observed cluster clock, else ask the service; expired only on its word) and
//!   the cleaner that finds clients whose records may be collected;
//! * [`ClientLease`] (§5.5.1): the client's view of its lease: when to renew, when to stop
//!   issuing RPCs (the danger zone), what to attach to requests.
//!
//! Nothing here does IO or reads a clock: local time is an argument (`strata_wire::Instant`),
//! cluster time travels in messages.

pub mod client_lease;
pub mod config;
pub mod lease_service;
pub mod request_tracker;
pub mod result_tracker;
pub mod validator;

pub use client_lease::ClientLease;
pub use config::{ConfigError, RiflConfig};
pub use lease_service::{
    DurableLeases, LeaseCanary, LeaseCommand, LeaseService, LeaseStatus, Renewal,
};
pub use request_tracker::{RequestTracker, SequenceError};
pub use result_tracker::{ClientExport, ResultTracker, TrackerStats, Verdict};
pub use strata_wire::rifl::{ClusterTime, LeaseInfo, Rifl, RpcId, WINDOW};
pub use validator::{LeaseCheck, LeaseValidator};
