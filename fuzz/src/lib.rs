//! Shared set-up for the fuzz targets: a host core (the whole server's decision logic, the
//! type `strata-node` pumps) of node 0 in a 3-node cluster, with its `__leases` shard open,
//! and the loop that executes its effects the way a driver would (storage answered at once).

use std::time::Duration;

use strata_host::{Host, HostConfig, HostEffects, Storage};
use strata_rc::RcConfig;
use strata_wire::{Instant, NodeId};

/// A fresh host of node 0 of 3, its lease table open and empty.
pub fn host() -> (Host, HostEffects) {
    let ids: Vec<NodeId> = (0..3).map(NodeId).collect();
    let cfg = HostConfig {
        rc: RcConfig::new(NodeId(0), ids),
        rifl: strata_host::rifl_config(Duration::from_secs(10)),
        seed: 7,
        shard_rate_limit: None,
        audit: false,
    };
    let mut host = Host::new(cfg, b"").expect("a host starts without a catalog");
    let mut fx = HostEffects::default();
    settle(&mut host, &mut fx, Instant::from_millis(1));
    (host, fx)
}

/// Executes the host's effects until none are left, answering storage at once, and checks
/// its invariants: what a driver does after every input.
pub fn settle(host: &mut Host, fx: &mut HostEffects, now: Instant) {
    for _ in 0..64 {
        host.poll_effects(fx);
        if fx.is_empty() {
            break;
        }
        fx.send.clear();
        fx.reply.clear();
        fx.fault.clear();
        for request in std::mem::take(&mut fx.storage) {
            match request {
                Storage::Open { shard, .. } => {
                    let _ = host.on_shard_opened(now, shard, Ok(Default::default()));
                }
                Storage::Catalog { token, .. } => host.on_catalog_saved(now, token, Ok(())),
                Storage::Log { .. } | Storage::Close { .. } => {}
            }
        }
    }
    host.check_invariants();
}
