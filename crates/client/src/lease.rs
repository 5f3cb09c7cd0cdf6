//! The client's RIFL lease (`specs/rifl.md` §5.5.1, R-D21): created on first use, renewed in
//! the background at half its term, and withheld from new requests in its danger zone.
//!
//! A [`LeaseKeeper`] belongs to one RIFL client (a [`crate::Session`] or a [`crate::Table`]
//! handle: each has its own RequestTracker, so each needs its own id). `renew` asks the lease
//! service — served by the leader of the cluster's `__leases` log table — trying the endpoints
//! in turn from the last one that answered, since any other node answers `NotLeader`.
//!
//! The renewer task holds only a weak reference: it ends when its keeper is dropped. It waits
//! for the renewal time computed from the *send* time of the last renewal (§5.5.1), so a slow
//! reply makes the client renew early, never late. If the lease expired anyway (the process was
//! paused, or cut off for a whole term), the service answers a renewal with a new id; the
//! keeper's owner then starts a fresh RequestTracker, and its unfinished requests of the old id
//! end as `ExpiredLease` ("outcome unknown") or with the result a surviving record holds.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use strata_rifl::ClientLease;
use strata_wire::client::{LogFailure, Request, Response};
use strata_wire::{Instant, LeaseInfo};
use tokio::sync::Mutex as AsyncMutex;
use tracing::{debug, warn};

use crate::client::ClientOptions;
use crate::conn::{Conn, ConnHandle};
use crate::error::ClientError;
use crate::session::unexpected;

/// A renewal that failed is tried again after this long.
const RENEW_RETRY: Duration = Duration::from_millis(100);
/// The least time `acquire` keeps trying to get a lease.
const ACQUIRE_FOR: Duration = Duration::from_secs(10);

/// Local monotonic time as RIFL's `Instant` (since the first call in this process).
pub(crate) fn local_now() -> Instant {
    static ORIGIN: OnceLock<std::time::Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(std::time::Instant::now);
    Instant(origin.elapsed().as_nanos() as u64)
}

pub(crate) struct LeaseKeeper {
    endpoints: Vec<SocketAddr>,
    opts: ClientOptions,
    lease: Mutex<ClientLease>,
    /// One renewal at a time; it owns the connection to the service.
    renewing: AsyncMutex<Renewer>,
    /// Set once the background renewer runs.
    started: std::sync::atomic::AtomicBool,
}

struct Renewer {
    conn: Option<Arc<ConnHandle>>,
    /// The endpoint that answered last.
    at: usize,
}

impl LeaseKeeper {
    pub(crate) fn new(endpoints: Vec<SocketAddr>, opts: ClientOptions) -> Arc<LeaseKeeper> {
        // The client learns the term from each grant; only `danger` caps come from the config.
        let config = strata_rifl::RiflConfig::default();
        Arc::new(LeaseKeeper {
            endpoints,
            opts,
            lease: Mutex::new(ClientLease::new(config)),
            renewing: AsyncMutex::new(Renewer { conn: None, at: 0 }),
            started: std::sync::atomic::AtomicBool::new(false),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ClientLease> {
        self.lease.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lease to carry now, if one is held outside its danger zone.
    pub(crate) fn usable(&self) -> Option<LeaseInfo> {
        self.state().usable(local_now())
    }

    /// The lease to carry, renewing first if none is usable (§5.5.1: `get_client_id` blocks
    /// until a renewal succeeds); gives up after `retry_for`. Starts the background renewer.
    pub(crate) async fn acquire(self: &Arc<Self>) -> Result<LeaseInfo, ClientError> {
        // At least ACQUIRE_FOR: right after a cluster starts, the lease service waits for the
        // election of the `__leases` leader.
        let deadline = tokio::time::Instant::now() + self.opts.retry_for.max(ACQUIRE_FOR);
        loop {
            if let Some(l) = self.usable() {
                self.start_renewer();
                return Ok(l);
            }
            match self.renew().await {
                Ok(()) => continue,
                // The credentials do not allow a lease (a read-only or anonymous client):
                // asking again cannot help.
                Err(e) if e.is_denied() => return Err(e),
                Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
                Err(e) => {
                    debug!(error = %e, "lease renewal failed; retrying");
                    tokio::time::sleep(RENEW_RETRY).await;
                }
            }
        }
    }

    fn start_renewer(self: &Arc<Self>) {
        if self.started.swap(true, std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let weak = Arc::downgrade(self);
        tokio::spawn(renew_in_background(weak));
    }

    /// One renewal (or creation) with the service, trying every endpoint once.
    async fn renew(&self) -> Result<(), ClientError> {
        let mut r = self.renewing.lock().await;
        if !self.state().renewal_due(local_now()) {
            return Ok(()); // another caller renewed meanwhile
        }
        let lease_id = self.state().client_id().unwrap_or(0);
        let n = self.endpoints.len();
        let mut last = ClientError::NoEndpoints;
        for step in 0..n {
            let i = (r.at + step) % n;
            let conn = match r.conn.as_ref().filter(|c| c.is_usable() && step == 0) {
                Some(c) => c.clone(),
                None => match Conn::open(self.endpoints[i], &self.opts).await {
                    Ok(c) => c,
                    Err(e) => {
                        last = e.into_client_error(self.endpoints[i]);
                        continue;
                    }
                },
            };
            let sent = local_now();
            match conn.call(Request::RenewLease { lease_id }, Some(self.opts.connect_timeout)).await
            {
                Ok(Response::Lease(grant)) if grant.alive() => {
                    let changed = self.state().on_grant(sent, grant);
                    if changed && lease_id != 0 {
                        warn!(old = lease_id, new = grant.lease_id, "the client's lease had expired; the service granted a new one (unfinished requests of the old one end as outcome unknown)");
                    }
                    r.conn = Some(conn);
                    r.at = i;
                    return Ok(());
                }
                Ok(Response::LogRejected(
                    f @ (LogFailure::NotLeader { .. } | LogFailure::Unavailable),
                )) => {
                    last = ClientError::TableUnavailable {
                        table: "__leases".into(),
                        last: format!("{f:?}"),
                        waited: Duration::ZERO,
                    };
                }
                Ok(other) => last = unexpected(other),
                Err(e) => last = e,
            }
            if last.is_denied() {
                break; // every node would say the same
            }
        }
        r.conn = None;
        r.at = (r.at + 1) % n.max(1);
        Err(last)
    }
}

/// Renews at the time the last grant set, while the keeper lives.
async fn renew_in_background(keeper: Weak<LeaseKeeper>) {
    loop {
        let wait = {
            let Some(k) = keeper.upgrade() else { return };
            let at = k.state().renew_at();
            Duration::from_nanos(at.0.saturating_sub(local_now().0))
        };
        tokio::time::sleep(wait).await;
        let Some(k) = keeper.upgrade() else { return };
        if let Err(e) = k.renew().await {
            debug!(error = %e, "background lease renewal failed; retrying");
            drop(k);
            tokio::time::sleep(RENEW_RETRY).await;
        }
    }
}
