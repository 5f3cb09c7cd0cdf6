//! Shared set-up for the fuzz targets: a host core (the whole server's decision logic, the
//! type `strata-node` pumps) of node 0 in a 3-node cluster, with its `__leases` shard open,
//! and the loop that executes its effects the way a driver would (storage answered at once).

use std::time::Duration;

use strata_host::{Host, HostConfig, HostEffects, Storage};
use strata_rc::RcConfig;
use strata_wire::{decode_message, Decode, Instant, NodeId};

/// A fresh host of node 0 of 3, its lease table open and empty.
pub fn host() -> (Host, HostEffects) {
    let ids: Vec<NodeId> = (0..3).map(NodeId).collect();
    let cfg = HostConfig {
        rc: RcConfig::new(NodeId(0), ids),
        rifl: strata_host::rifl_config(Duration::from_secs(10)),
        seed: 7,
        shard_rate_limit: None,
        audit: false,
        log_overrides: Default::default(),
        txn_timeout_per_object: strata_host::TXN_TIMEOUT_PER_OBJECT,
        txn_read_hold: strata_host::TXN_READ_HOLD,
    };
    let mut host = Host::new(cfg, b"").expect("a host starts without a catalog");
    // Connection 1 may do everything, so requests reach the validators behind the role check.
    host.on_connected(1, Some(strata_wire::Role::Admin));
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

/// Runs one fuzz input against a fresh host: several messages, each a length byte then that
/// many bytes, decoded as `M` and handed to `deliver` (with the length byte); after each, the
/// host ticks `len * tick_ms` later. Effects are executed and invariants checked after every
/// input.
pub fn run_messages<M: Decode>(
    data: &[u8],
    tick_ms: u64,
    mut deliver: impl FnMut(&mut Host, Instant, u8, M),
) {
    let (mut host, mut fx) = host();
    let mut now = Instant::from_millis(10);
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let (msg, tail) = tail.split_at((len as usize).min(tail.len()));
        rest = tail;
        if let Ok(m) = decode_message::<M>(bytes::Bytes::copy_from_slice(msg)) {
            deliver(&mut host, now, len, m);
            settle(&mut host, &mut fx, now);
        }
        now += Duration::from_millis(u64::from(len) * tick_ms);
        host.on_tick(now);
        settle(&mut host, &mut fx, now);
    }
}
