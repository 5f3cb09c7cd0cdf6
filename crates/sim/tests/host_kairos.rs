//! Kairos tables on whole hosts in the simulator (issue #19, kairos.md §5.16 via RIFL's
//! recovery): a Kairos client that stops between its prepares and its decisions is finished
//! by the same recovery as a RIFL client's — the `T_TX` timers of the locks its Commit votes
//! took, abort requests under the prepares' own ids, a decision record — and a committed
//! recovery installs the writes at the transaction's commit timestamp. Meanwhile reads of the
//! prepared keys do not wait (kairos.md §5.3) and validation refuses what conflicts with the
//! prepared writes. Clients speak the wire protocol by hand.

use std::time::Duration;

use bytes::Bytes;
use strata_sim::host::{HostCluster, HostNet};
use strata_wire::client::{shard_of, LogFailure, Request, Response, TableDef, TableTxn};
use strata_wire::rifl::{LeaseInfo, LeaseStatus, Rifl, RpcId};
use strata_wire::txn::{AbortReason, KairosPrepare, Timestamp, TxnAction, TxnObject, TxnOp, Vote};

const NODES: usize = 3;
const TABLE: &str = "kbank";
const SHARDS: u32 = 2;

fn def() -> TableDef {
    TableDef { name: TABLE.into(), txn: TableTxn::Kairos, ..strata_sim::txn::table_def(SHARDS) }
}

fn cluster(seed: u64) -> HostCluster {
    let mut c =
        HostCluster::new(NODES, HostNet::uniform(NODES, 200), Duration::from_secs(10), seed, None);
    c.run_until(c.now + Duration::from_secs(3));
    for node in 0..NODES {
        let created = c.call(0, node, None, Request::CreateTable { def: def() }, SECOND);
        assert!(matches!(created, Some(Response::TableCreated { .. })), "{created:?}");
    }
    c.run_until(c.now + Duration::from_secs(2));
    c
}

const SECOND: Duration = Duration::from_secs(1);

/// Sends `body` to every node in turn until the shard's leader answers (10 s at most).
fn call_leader(c: &mut HostCluster, client: usize, rifl: Option<Rifl>, body: Request) -> Response {
    let until = c.now + Duration::from_secs(10);
    for round in 0.. {
        assert!(c.now < until, "no leader answered {body:?}");
        match c.call(client, round % NODES, rifl, body.clone(), SECOND) {
            Some(Response::LogRejected(
                LogFailure::NotLeader { .. } | LogFailure::Unavailable | LogFailure::Timeout,
            ))
            | None => c.run_until(c.now + Duration::from_millis(20)),
            Some(r) => return r,
        }
    }
    unreachable!()
}

fn lease(c: &mut HostCluster, client: usize) -> LeaseStatus {
    for _ in 0..20 {
        if let Some(Response::Lease(g)) =
            c.call(client, 0, None, Request::RenewLease { lease_id: 0 }, SECOND)
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

/// Two keys in different shards, `a` first in key order.
fn keys() -> (Bytes, Bytes) {
    let a = Bytes::from_static(b"a");
    let b = (0..)
        .map(|i| Bytes::from(format!("b{i}")))
        .find(|k| shard_of(k, SHARDS) != shard_of(&a, SHARDS))
        .unwrap();
    (a, b)
}

fn objects(base: u64) -> Vec<TxnObject> {
    let (a, b) = keys();
    vec![
        TxnObject { table: TABLE.into(), key: a, seq: base + 1 },
        TxnObject { table: TABLE.into(), key: b, seq: base + 2 },
    ]
}

/// Prepares object `which` of `all` (client `client`'s transaction `base`): `action`, having
/// read version `read` of it (`None`: a blind write), at `commit_ts`.
#[allow(clippy::too_many_arguments)]
fn prepare(
    c: &mut HostCluster,
    client: usize,
    g: &LeaseStatus,
    base: u64,
    all: &[TxnObject],
    which: usize,
    action: TxnAction,
    read: Option<Timestamp>,
    commit_ts: Timestamp,
) -> Vote {
    let o = &all[which];
    let req = Request::TxnPrepare {
        table: TABLE.into(),
        shard: shard_of(&o.key, SHARDS),
        read_only: false,
        all: all.to_vec(),
        ops: vec![TxnOp { key: o.key.clone(), seq: o.seq, expect: None, action }],
        kairos: Some(KairosPrepare {
            commit_ts,
            freshness: read,
            read_only: false,
            read_vts: vec![read],
        }),
    };
    match call_leader(c, client, Some(envelope(g, base)), req) {
        // (`decided`: a one-object transaction commits with its prepare, R-D17.)
        Response::TxnVotes { votes, .. } if votes.len() == 1 => votes[0].1,
        other => panic!("{other:?}"),
    }
}

/// A plain read at the leader: the value and its version timestamp.
fn read(c: &mut HostCluster, key: &Bytes) -> (Option<Bytes>, Timestamp) {
    let req =
        Request::LogRead { table: TABLE.into(), key: key.clone(), min_index: None, sharer: false };
    match call_leader(c, 2, None, req) {
        Response::LogValue { value, vts, .. } => (value, vts.unwrap_or_default()),
        other => panic!("{key:?}: {other:?}"),
    }
}

fn await_read(c: &mut HostCluster, key: &Bytes, want: (Option<&str>, Timestamp)) {
    let until = c.now + Duration::from_secs(2);
    loop {
        let (v, vts) = read(c, key);
        if (v.as_deref(), vts) == (want.0.map(str::as_bytes), want.1) {
            return;
        }
        assert!(c.now < until, "{key:?}: {v:?} at {vts}, want {want:?}");
        c.run_until(c.now + Duration::from_millis(20));
    }
}

fn write(v: &'static str) -> TxnAction {
    TxnAction::Write(Bytes::from_static(v.as_bytes()))
}

#[test]
fn a_kairos_client_gone_after_preparing_everything_is_committed_by_recovery_at_its_timestamp() {
    let mut c = cluster(1);
    let g = lease(&mut c, 0);
    let all = objects(1);
    let ts = Timestamp::new(1_000, g.lease_id as u32);
    let began = c.now;
    for i in 0..2 {
        assert_eq!(prepare(&mut c, 0, &g, 1, &all, i, write("v1"), None, ts), Vote::Prepared);
    }
    // The client is gone. A read of a prepared key does not wait (§5.3): the initial value.
    assert_eq!(read(&mut c, &all[0].key), (None, Timestamp::ZERO));
    assert!(c.now.saturating_since(began) < Duration::from_millis(100), "it waited for T_TX");
    // Another transaction that read that version conflicts with the prepared write.
    let g2 = lease(&mut c, 1);
    let other = vec![TxnObject { table: TABLE.into(), key: all[0].key.clone(), seq: 11 }];
    let ts2 = Timestamp::new(2_000, g2.lease_id as u32);
    let vote = prepare(&mut c, 1, &g2, 10, &other, 0, write("x"), Some(Timestamp::ZERO), ts2);
    assert_eq!(vote, Vote::Abort(AbortReason::PreparedConflict));
    // After T_TX, recovery decides Commit (every object voted Prepared) and both writes take
    // the transaction's commit timestamp as their version.
    for o in &all {
        await_read(&mut c, &o.key, (Some("v1"), ts));
    }
    // A blind write above it commits at once (one object); then a transaction that read the
    // initial version is stale.
    let vote = prepare(&mut c, 1, &g2, 20, &other_at(&all, 20), 0, write("y"), None, ts2);
    assert_eq!(vote, Vote::Prepared);
    let g3 = lease(&mut c, 2);
    let ts3 = Timestamp::new(3_000, g3.lease_id as u32);
    let stale =
        prepare(&mut c, 2, &g3, 30, &other_at(&all, 30), 0, write("z"), Some(Timestamp::ZERO), ts3);
    assert_eq!(stale, Vote::Abort(AbortReason::Stale), "a version superseded since");
}

/// Transaction `base`'s one object: `a`.
fn other_at(all: &[TxnObject], base: u64) -> Vec<TxnObject> {
    vec![TxnObject { table: TABLE.into(), key: all[0].key.clone(), seq: base + 1 }]
}

#[test]
fn a_kairos_client_gone_after_some_prepares_is_aborted_and_installs_nothing() {
    let mut c = cluster(2);
    let g = lease(&mut c, 0);
    let all = objects(1);
    let ts = Timestamp::new(1_000, g.lease_id as u32);
    assert_eq!(prepare(&mut c, 0, &g, 1, &all, 0, write("v1"), None, ts), Vote::Prepared);
    // Gone before preparing `b`. Recovery's abort request records `Abort(Recovered)` for
    // `b` and decides Abort: `a`'s prepared write is released, nothing installed.
    c.run_until(c.now + Duration::from_millis(500));
    assert_eq!(read(&mut c, &all[0].key), (None, Timestamp::ZERO));
    // The paused client's late prepare of `b` finds the record: nothing validated.
    let late = prepare(&mut c, 0, &g, 1, &all, 1, write("v1"), None, ts);
    assert_eq!(late, Vote::Abort(AbortReason::Recovered));
    // `a` is free again: a new writer prepares it.
    let g2 = lease(&mut c, 1);
    let ts2 = Timestamp::new(2_000, g2.lease_id as u32);
    let vote = prepare(&mut c, 1, &g2, 10, &other_at(&all, 10), 0, write("x"), None, ts2);
    assert_eq!(vote, Vote::Prepared);
}
