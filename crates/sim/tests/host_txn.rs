//! Transactions on whole hosts in the simulator (issue #18 item 2, rifl.md §5.8.4): a client
//! that stops between its prepares and its decisions is finished by recovery — the `T_TX`
//! timers of the participants' leaders, the coordinator at the leader of the first object's
//! shard, abort requests under the prepares' own ids, a durable decision record — also when
//! the coordinator's node crashes in the middle. Clients speak the wire protocol; every
//! prepare is sent by hand, so the "crash" is simply never sending the rest.

use std::time::Duration;

use bytes::Bytes;
use strata_sim::host::{HostCluster, HostNet};
use strata_wire::client::{shard_of, LogFailure, Request, Response, ShardRole};
use strata_wire::rifl::{LeaseInfo, LeaseStatus, Rifl, RpcId};
use strata_wire::txn::{AbortReason, TxnAction, TxnObject, TxnOp, Vote};

const NODES: usize = 3;
const TABLE: &str = "bank";
const SHARDS: u32 = 2;

fn cluster(seed: u64) -> HostCluster {
    let mut c =
        HostCluster::new(NODES, HostNet::uniform(NODES, 200), Duration::from_secs(10), seed, None);
    c.run_until(c.now + Duration::from_secs(3));
    let def = strata_sim::txn::table_def(SHARDS);
    for node in 0..NODES {
        let created = call(&mut c, 0, node, None, Request::CreateTable { def: def.clone() });
        assert!(matches!(created, Some(Response::TableCreated { .. })), "{created:?}");
    }
    c.run_until(c.now + Duration::from_secs(2));
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

/// Sends `body` to every node in turn until one answers with something other than a
/// "not here" refusal (the shard's leader), for up to 10 s of simulated time (an election
/// after a crash included).
fn call_leader(c: &mut HostCluster, client: usize, rifl: Option<Rifl>, body: Request) -> Response {
    let mut last = Vec::new();
    let until = c.now + Duration::from_secs(10);
    for round in 0.. {
        if c.now >= until {
            break;
        }
        let node = round % NODES;
        match call(c, client, node, rifl, body.clone()) {
            r @ (Some(Response::LogRejected(
                LogFailure::NotLeader { .. } | LogFailure::Unavailable | LogFailure::Timeout,
            ))
            | None) => {
                last = vec![(node, r)];
                c.run_until(c.now + Duration::from_millis(20))
            }
            Some(r) => return r,
        }
    }
    panic!("no leader answered {body:?}: {last:?}");
}

fn lease(c: &mut HostCluster, client: usize) -> LeaseStatus {
    for _ in 0..20 {
        if let Some(Response::Lease(g)) =
            call(c, client, 0, None, Request::RenewLease { lease_id: 0 })
        {
            return g;
        }
        c.run_until(c.now + Duration::from_millis(100));
    }
    panic!("no lease granted");
}

fn envelope(g: &LeaseStatus, base: u64) -> Rifl {
    Rifl {
        rpc: RpcId { client_id: g.lease_id, seq: base },
        first_incomplete: base,
        lease: LeaseInfo {
            client_id: g.lease_id,
            expiration: g.expiration,
            timestamp: g.cluster_time,
        },
    }
}

/// Two keys in different shards, `a` first in `(table, key)` order.
fn keys() -> (Bytes, Bytes) {
    let a = Bytes::from_static(b"a");
    let b = (0..)
        .map(|i| Bytes::from(format!("b{i}")))
        .find(|k| shard_of(k, SHARDS) != shard_of(&a, SHARDS))
        .unwrap();
    (a, b)
}

fn prepare(
    c: &mut HostCluster,
    g: &LeaseStatus,
    base: u64,
    all: &[TxnObject],
    which: usize,
) -> Response {
    let o = &all[which];
    let req = Request::TxnPrepare {
        table: TABLE.into(),
        shard: shard_of(&o.key, SHARDS),
        read_only: false,
        all: all.to_vec(),
        ops: vec![TxnOp {
            key: o.key.clone(),
            seq: o.seq,
            expect: None,
            action: TxnAction::Write(Bytes::from(format!("v{base}"))),
        }],
        kairos: None,
    };
    call_leader(c, 0, Some(envelope(g, base)), req)
}

fn read(c: &mut HostCluster, key: &Bytes) -> Response {
    let req = Request::LogRead {
        table: TABLE.into(),
        key: key.clone(),
        min_index: None,
        sharer: false,
        intent: strata_wire::txn::ReadIntent::Plain,
    };
    call_leader(c, 1, None, req)
}

fn objects(base: u64) -> Vec<TxnObject> {
    let (a, b) = keys();
    vec![
        TxnObject { table: TABLE.into(), key: a, seq: base + 1 },
        TxnObject { table: TABLE.into(), key: b, seq: base + 2 },
    ]
}

/// What a plain read of `key` returns (waiting while the key is locked).
fn read_value(c: &mut HostCluster, key: &Bytes) -> Option<Bytes> {
    match read(c, key) {
        Response::LogValue { value, .. } => value,
        other => panic!("{key:?}: {other:?}"),
    }
}

/// Runs until `key` reads as `want` (its lock released by a decision), or panics.
fn await_value(c: &mut HostCluster, key: &Bytes, want: Option<&str>, within: Duration) {
    let until = c.now + within;
    loop {
        match read(c, key) {
            Response::LogValue { value, .. } if value.as_deref() == want.map(str::as_bytes) => {
                return
            }
            other if c.now >= until => panic!("{key:?}: {other:?}, want {want:?}"),
            _ => c.run_until(c.now + Duration::from_millis(20)),
        }
    }
}

/// The transaction locks each node's replicas of the table report in `Status`
/// (`ShardStatus::locks`): the leaders' total, and every replica's total.
fn status_locks(c: &mut HostCluster) -> (u64, u64) {
    let (mut leaders, mut all) = (0, 0);
    for node in 0..NODES {
        let Some((shards, _)) = c.operate(node, |h, now| h.status(now).1) else { continue };
        for s in shards.into_iter().filter(|s| s.table == TABLE) {
            all += s.locks;
            if s.role == ShardRole::Leader {
                leaders += s.locks;
            }
        }
    }
    (leaders, all)
}

#[test]
fn a_client_gone_after_preparing_everything_is_decided_commit_by_recovery() {
    let mut c = cluster(1);
    let g = lease(&mut c, 0);
    let all = objects(1);
    let began = c.now;
    for i in 0..2 {
        match prepare(&mut c, &g, 1, &all, i) {
            Response::TxnVotes { votes, decided } => {
                assert_eq!((votes, decided), (vec![(all[i].seq, Vote::Prepared)], false))
            }
            other => panic!("{other:?}"),
        }
    }
    // The client is gone. Its keys are locked: the leaders' status shows one lock per
    // object, and a plain read waits at the leader (§5.9) until a decision is applied. After
    // T_TX (2 objects x 50 ms) recovery decides Commit, as every object had voted Prepared
    // (RC4), and the waiting read is answered with the transaction's write.
    assert_eq!(status_locks(&mut c).0, 2);
    assert_eq!(read_value(&mut c, &all[0].key).as_deref(), Some(&b"v1"[..]));
    assert!(c.now.saturating_since(began) >= Duration::from_millis(100), "answered before T_TX");
    await_value(&mut c, &all[1].key, Some("v1"), Duration::from_secs(2));
    // Every replica applies the decisions: no lock is left anywhere.
    let until = c.now + Duration::from_secs(2);
    while status_locks(&mut c) != (0, 0) {
        assert!(c.now < until, "locks left after recovery: {:?}", status_locks(&mut c));
        c.run_until(c.now + Duration::from_millis(20));
    }
    // The client comes back and retries a prepare: the recorded vote answers, nothing
    // executes twice; its decision (redundant now) changes nothing.
    assert!(matches!(prepare(&mut c, &g, 1, &all, 1), Response::TxnVotes { .. }));
    await_value(&mut c, &all[1].key, Some("v1"), Duration::from_millis(10));
}

#[test]
fn a_client_gone_after_some_prepares_is_aborted_and_its_late_prepare_votes_abort() {
    let mut c = cluster(2);
    let g = lease(&mut c, 0);
    let all = objects(1);
    let began = c.now;
    assert!(matches!(prepare(&mut c, &g, 1, &all, 1), Response::TxnVotes { .. }));
    // Recovery asks `a` (never prepared) to abort under its prepare's id: Abort, so the
    // decision is Abort and `b`'s lock goes without a write; the read waiting on the lock
    // sees no value.
    assert_eq!(read_value(&mut c, &all[1].key), None);
    assert!(c.now.saturating_since(began) >= Duration::from_millis(100), "answered before T_TX");
    // The paused client wakes and sends its other prepare: the record recovery wrote answers.
    match prepare(&mut c, &g, 1, &all, 0) {
        Response::TxnVotes { votes, .. } => {
            assert_eq!(votes, vec![(all[0].seq, Vote::Abort(AbortReason::Recovered))])
        }
        other => panic!("{other:?}"),
    }
    await_value(&mut c, &all[0].key, None, Duration::from_millis(10));
}

#[test]
fn recovery_survives_the_crash_of_its_coordinator() {
    for seed in 0..6 {
        let mut c = cluster(100 + seed);
        let g = lease(&mut c, 0);
        let all = objects(1);
        for i in 0..2 {
            assert!(matches!(prepare(&mut c, &g, 1, &all, i), Response::TxnVotes { .. }));
        }
        // Crash the coordinator — the leader of the first object's shard — at a moment of the
        // recovery (T_TX is 100 ms; then votes, record, decisions), then bring it back. A new
        // leader resumes from the decision record, or its timers start recovery again.
        let home = shard_of(&all[0].key, SHARDS);
        let leads = |c: &mut HostCluster, i| {
            c.operate(i, |h, _| h.shard_replica(TABLE, home).is_some_and(|r| r.is_leader()))
                .is_some_and(|(l, _)| l)
        };
        let victim = (0..NODES).find(|&i| leads(&mut c, i)).expect("a leader of the home shard");
        c.run_until(c.now + Duration::from_millis(90 + 20 * seed));
        c.crash(victim);
        c.run_until(c.now + Duration::from_millis(300));
        c.start(victim);
        await_value(&mut c, &all[0].key, Some("v1"), Duration::from_secs(5));
        await_value(&mut c, &all[1].key, Some("v1"), Duration::from_secs(5));
    }
}

/// R-D14, with its canary: a client whose lease expires while it holds a lock keeps its
/// records (the lock's vote, which recovery reads); under `TxnExpireIgnoresLocks` the `Expire`
/// collects it and the replicas' invariant (§7 inv. 14) breaks.
#[test]
fn an_expired_client_holding_a_lock_keeps_its_votes_and_the_canary_is_caught() {
    use strata_host::catalog;
    use strata_log::PlantedBug;
    use strata_sim::host::ClusterOptions;
    for canary in [None, Some(PlantedBug::TxnExpireIgnoresLocks)] {
        let def = strata_sim::txn::table_def(SHARDS);
        let mut over = catalog::log_config(&def, NODES).unwrap();
        over.planted_bug = canary;
        let cat =
            catalog::encode(&[catalog::Catalogued { def: def.clone(), moved: Default::default() }]);
        let mut c = HostCluster::with(ClusterOptions {
            nodes: NODES,
            net: HostNet::uniform(NODES, 200),
            seed: 9,
            net_prng: None,
            clocks: None,
            start: strata_wire::Instant(1_000_000_000),
            lease_term: Duration::from_secs(2),
            shard_rate_limit: None,
            observe: false,
            // Recovery much slower than the lease: the lock outlives the lease.
            tune: Some(Box::new(move |_, cfg| {
                cfg.txn_timeout_per_object = Duration::from_secs(60);
                cfg.log_overrides.insert(TABLE.to_string(), over.clone());
            })),
            catalog: cat,
        });
        c.run_until(c.now + Duration::from_secs(3));
        let a = lease(&mut c, 0);
        let all = objects(1);
        assert!(matches!(prepare(&mut c, &a, 1, &all, 0), Response::TxnVotes { .. }));
        // Another client keeps renewing and writing: the nodes see the cluster clock move on,
        // past the first client's lease.
        let mut b = lease(&mut c, 1);
        for i in 0..30u64 {
            if let Some(Response::Lease(g)) =
                call(&mut c, 1, 0, None, Request::RenewLease { lease_id: b.lease_id })
            {
                b = g;
            }
            let put = Request::LogWrite {
                table: TABLE.into(),
                key: Bytes::from_static(b"other"),
                op: strata_wire::client::LogWriteOp::Put(Bytes::from(i.to_string())),
                immediate: false,
            };
            call_leader(&mut c, 1, Some(envelope(&b, i + 1)), put);
            c.run_until(c.now + Duration::from_millis(100));
        }
        // The first client comes back with its old lease, at the locked object's shard.
        let late = Request::LogWrite {
            table: TABLE.into(),
            key: all[0].key.clone(),
            op: strata_wire::client::LogWriteOp::Put(Bytes::from_static(b"late")),
            immediate: false,
        };
        let answer = call_leader(&mut c, 0, Some(envelope(&a, 10)), late);
        c.run_until(c.now + Duration::from_millis(500));
        let failures: Vec<String> = c.nodes.iter().filter_map(|n| n.failure.clone()).collect();
        match canary {
            None => {
                assert!(failures.is_empty(), "{failures:?}");
                let expired = strata_wire::client::ErrorCode::ExpiredLease;
                assert!(
                    matches!(answer, Response::Error { code, .. } if code == expired),
                    "{answer:?}"
                );
                let shard = shard_of(&all[0].key, SHARDS);
                let locks: usize = (0..NODES)
                    .filter_map(|i| {
                        c.operate(i, |h, _| {
                            h.shard_replica(TABLE, shard).map_or(0, |r| r.locks().count())
                        })
                    })
                    .map(|(n, _)| n)
                    .sum();
                assert_eq!(locks, NODES, "every replica still holds the lock, with its vote");
            }
            Some(_) => assert!(
                failures.iter().any(|f| f.contains("has no Prepared record")),
                "the canary was not caught: {failures:?} (answer {answer:?})"
            ),
        }
    }
}
