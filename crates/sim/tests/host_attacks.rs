//! Issue 17's attacks on the protocol cores, replayed against the whole server in the
//! simulator (the same `strata-host` code the node runs): forged fields from a client and
//! from an authenticated-but-buggy peer. Each test checks that the cluster keeps serving and
//! that nothing of the forged input was kept; each fails when its guard is removed
//! (`LeaseValidator::check`'s bounds, `LogReplica`'s epoch bounds).

use std::time::Duration;

use strata_host::catalog::LEASE_TABLE;
use strata_sim::host::{HostCluster, HostNet};
use strata_wire::client::{table_id, ErrorCode, Request, Response};
use strata_wire::log::LogMessage;
use strata_wire::peer::PeerMessage;
use strata_wire::rifl::{ClusterTime, LeaseInfo, LeaseStatus, Rifl, RpcId};
use strata_wire::SessionId;

const NODES: usize = 3;

fn cluster(seed: u64) -> HostCluster {
    let mut c =
        HostCluster::new(NODES, HostNet::uniform(NODES, 200), Duration::from_secs(10), seed, None);
    // The `__leases` group elects its leader.
    c.run_until(c.now + Duration::from_secs(3));
    c
}

/// Sends `body` from `client` to `node` and runs until its answer (`None`: none within 2 s).
fn call(
    c: &mut HostCluster,
    client: usize,
    node: usize,
    rifl: Option<Rifl>,
    body: Request,
) -> Option<Response> {
    c.call(client, node, rifl, body, Duration::from_secs(2))
}

fn grant(c: &mut HostCluster, client: usize) -> LeaseStatus {
    for _ in 0..20 {
        if let Some(Response::Lease(g)) =
            call(c, client, 0, None, Request::RenewLease { lease_id: 0 })
        {
            return g;
        }
        let later = c.now + Duration::from_millis(100);
        c.run_until(later);
    }
    panic!("no lease granted");
}

fn session(c: &mut HostCluster, client: usize, node: usize) -> SessionId {
    match call(c, client, node, None, Request::OpenSession) {
        Some(Response::SessionOpened { session }) => session,
        other => panic!("{other:?}"),
    }
}

fn put(session: SessionId, v: &str) -> Request {
    Request::Put { session, key: "k".into(), value: v.to_string().into() }
}

/// Issue 17: "One request whose RIFL lease carried `timestamp = u64::MAX − 1` was executed;
/// afterwards writes at that node hung for 30 s, two nodes exchanged lease queries forever,
/// and the node running the lease service aborted with a stack overflow."
#[test]
fn host_attack_a_lease_timestamp_at_the_clocks_end_is_refused_and_costs_one_question() {
    let mut c = cluster(11);
    let g = grant(&mut c, 0);
    let good = session(&mut c, 0, 0);
    let genuine = |seq| Rifl {
        rpc: RpcId { client_id: g.lease_id, seq },
        first_incomplete: seq,
        lease: LeaseInfo {
            client_id: g.lease_id,
            expiration: g.expiration,
            timestamp: g.cluster_time,
        },
    };
    assert!(matches!(
        call(&mut c, 0, 0, Some(genuine(1)), put(good, "a")),
        Some(Response::Written { .. })
    ));
    // The background traffic of a quiet second, for comparison.
    let before = c.peer_messages();
    let quiet_end = c.now + Duration::from_secs(1);
    c.run_until(quiet_end);
    let quiet = c.peer_messages() - before;

    let forged = Rifl {
        rpc: RpcId { client_id: 4242, seq: 1 },
        first_incomplete: 1,
        lease: LeaseInfo {
            client_id: 4242,
            expiration: ClusterTime(u64::MAX),
            timestamp: ClusterTime(u64::MAX - 1),
        },
    };
    for node in 0..NODES {
        let evil = session(&mut c, 1, node);
        match call(&mut c, 1, node, Some(forged), put(evil, "evil")) {
            Some(Response::Error { code: ErrorCode::BadEnvelope, .. }) => {}
            other => panic!("node {node} answered the forged lease with {other:?}"),
        }
    }
    // The nodes' clocks did not move: the genuine client is served at once, everywhere.
    for (node, seq) in (0..NODES).zip(2..) {
        let s = session(&mut c, 0, node);
        let at = c.now;
        let answer = call(&mut c, 0, node, Some(genuine(seq)), put(s, "b"));
        assert!(matches!(answer, Some(Response::Written { .. })), "node {node}: {answer:?}");
        assert!(
            c.now.saturating_since(at) < Duration::from_millis(50),
            "node {node} held a genuine write"
        );
    }
    // No storm of lease questions: the next second looks like a quiet one.
    let before = c.peer_messages();
    let end = c.now + Duration::from_secs(1);
    c.run_until(end);
    let after = c.peer_messages() - before;
    assert!(after <= quiet * 2 + 20, "{after} peer messages in a second, {quiet} when quiet");
    assert!((0..NODES).all(|i| c.is_up(i) && c.nodes[i].failure.is_none()));
}

/// Issue 17: "One forged 25-byte vote response carrying epoch `u32::MAX` for `__leases` made
/// every node persist that epoch: no leader, all writes failing cluster-wide."
#[test]
fn host_attack_a_vote_at_the_last_epoch_is_dropped_and_the_lease_service_keeps_serving() {
    let mut c = cluster(12);
    let epochs = |c: &HostCluster| {
        (0..NODES)
            .map(|i| {
                c.nodes[i].host.as_ref().unwrap().shard_replica(LEASE_TABLE, 0).unwrap().epoch()
            })
            .collect::<Vec<_>>()
    };
    let before = epochs(&c);
    for to in 0..NODES {
        let from = (to + 1) % NODES;
        for epoch in [u32::MAX, u32::MAX / 2] {
            let msg = PeerMessage::Shard {
                table: table_id(LEASE_TABLE),
                shard: 0,
                generation: 0,
                msg: LogMessage::VoteResp { epoch, granted: true },
            };
            c.inject_peer(from, to, msg);
        }
    }
    let end = c.now + Duration::from_secs(2);
    c.run_until(end);
    assert_eq!(epochs(&c), before, "no epoch adopted");
    // The lease service (a `__leases` leader) still grants.
    grant(&mut c, 0);
    assert!((0..NODES).all(|i| c.is_up(i) && c.nodes[i].failure.is_none()));
}
