//! Scenario tests, one or more per mechanism of ORCA (§5), on the deterministic
//! [`testkit`](crate::testkit) cluster. Each asserts the global checks of the testkit (G2, G3,
//! R2) found nothing; the canary tests plant bugs and assert the same scenarios catch them.

use std::time::Duration;

use bytes::Bytes;
use strata_core::{Effects, Node};
use strata_wire::log::{LogEntry, LogIndex, LogMessage, LogOp};
use strata_wire::{Instant, NodeId};

use crate::api::{
    HardState, LogEvent, LogReply, LogRequest, Persist, ReadError, RecoveredState, RevokeReason,
    StepDownReason, VoteRefusal, WriteOp,
};
use crate::config::{LogConfig, Replication};
use crate::replica::{LogEffects, LogReplica, Role};
use crate::testkit::Cluster;

fn orca() -> LogConfig {
    LogConfig::orca(Replication::Async)
}

/// No background flush during the test: durability comes only from reads, rounds, the sync
/// phase or immediate writes.
fn lazy(mut cfg: LogConfig) -> LogConfig {
    cfg.flush_interval = Duration::from_secs(30);
    cfg
}

fn assert_clean(c: &Cluster) {
    assert!(c.violations.is_empty(), "violations: {:#?}", c.violations);
}

fn follower_in_as(c: &Cluster, l: usize) -> usize {
    let set = c.node(l).active_set();
    set.iter()
        .map(|n| n.0 as usize)
        .find(|&f| f != l)
        .expect("a follower in the active set")
}

fn follower_outside_as(c: &Cluster, l: usize) -> Option<usize> {
    let set = c.node(l).active_set();
    (0..c.n()).find(|&f| f != l && !set.contains(&NodeId(f as u32)))
}

fn entry(epoch: u32, counter: u32) -> LogEntry {
    LogEntry {
        index: LogIndex::new(epoch, counter),
        key: Bytes::from_static(b"k"),
        op: LogOp::Put(Bytes::from_static(b"v")),
        client_id: 1,
        seq: counter as u64,
        immediate: false,
    }
}

fn recovered(entries: Vec<LogEntry>, epoch: u32) -> LogReplica {
    let ids = [NodeId(0), NodeId(1), NodeId(2)];
    let state = RecoveredState {
        hard_state: HardState {
            epoch,
            voted_for: None,
        },
        snapshot: None,
        entries,
    };
    LogReplica::recover(orca(), NodeId(0), &ids, state, Instant::from_millis(1), 5).unwrap()
}

mod active_set;
#[cfg(feature = "canaries")]
mod canaries;
mod elections;
mod reads;
mod recovery;
mod replication;
mod swarm;
mod writes;
