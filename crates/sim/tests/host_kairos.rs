//! Kairos tables on whole hosts in the simulator (issue #19, kairos.md §5.16 via RIFL's
//! recovery): a Kairos client that stops between its prepares and its decisions is finished
//! by the same recovery as a RIFL client's — the `T_TX` timers of the locks its Commit votes
//! took, abort requests under the prepares' own ids, a decision record — and a committed
//! recovery installs the writes at the transaction's commit timestamp. Meanwhile reads of the
//! prepared keys do not wait (kairos.md §5.3) and validation refuses what conflicts with the
//! prepared writes. Clients speak the wire protocol by hand.

use std::time::Duration;

use bytes::Bytes;
use strata_log::PlantedBug;
use strata_sim::host::{ClusterOptions, HostCluster, HostNet};
use strata_wire::client::{
    shard_of, validators_table, LogFailure, Request, Response, TableDef, TableTxn, TableValidation,
};
use strata_wire::rifl::{LeaseInfo, LeaseStatus, Rifl, RpcId};
use strata_wire::txn::{
    AbortReason, Decision, KairosPrepare, KairosRole, Timestamp, TxnAction, TxnObject, TxnOp, Vote,
};

const NODES: usize = 3;
const TABLE: &str = "kbank";
const SHARDS: u32 = 2;

fn def() -> TableDef {
    TableDef { name: TABLE.into(), txn: TableTxn::Kairos, ..strata_sim::txn::table_def(SHARDS) }
}

/// A table with sharded validators (kairos.md §1.3 "CV"): `ksh`, its validators the
/// [`VALIDATORS`] shards of `ksh.validators`.
const SHARDED: &str = "ksh";
const VALIDATORS: u32 = 3;

fn sharded_def() -> TableDef {
    TableDef { name: SHARDED.into(), validation: TableValidation::Sharded(VALIDATORS), ..def() }
}

fn vtable() -> String {
    validators_table(SHARDED)
}

/// A table's shard count and the role of its Kairos prepares.
fn layout(table: &str) -> (u32, KairosRole) {
    match table {
        TABLE => (SHARDS, KairosRole::Full),
        SHARDED => (SHARDS, KairosRole::Replicate),
        _ => (VALIDATORS, KairosRole::Validate),
    }
}

fn cluster(seed: u64) -> HostCluster {
    cluster_of(seed, def(), None, None)
}

/// Three hosts with the table `def`; `t_tx`: the recovery timer per object, if not the
/// default; `canary`: a bug planted in the shards that validate `def` (its validator table's
/// if it has one, else its own).
fn cluster_of(
    seed: u64,
    def: TableDef,
    t_tx: Option<Duration>,
    canary: Option<PlantedBug>,
) -> HostCluster {
    let validating = def.validators_def().unwrap_or_else(|| def.clone());
    let planted = canary.map(|bug| {
        let mut cfg = strata_host::catalog::log_config(&validating, NODES).unwrap();
        cfg.planted_bug = Some(bug);
        (validating.name, cfg)
    });
    let tune: Option<strata_sim::host::Tune> =
        Some(Box::new(move |_: usize, cfg: &mut strata_host::HostConfig| {
            if let Some(t) = t_tx {
                cfg.txn_timeout_per_object = t;
            }
            if let Some((name, log)) = planted.clone() {
                cfg.log_overrides.insert(name, log);
            }
        }));
    let mut c = HostCluster::with(ClusterOptions {
        nodes: NODES,
        net: HostNet::uniform(NODES, 200),
        seed,
        net_prng: None,
        clocks: None,
        start: strata_wire::Instant(1_000_000_000),
        lease_term: Duration::from_secs(10),
        shard_rate_limit: None,
        observe: false,
        tune,
        catalog: Vec::new(),
    });
    c.run_until(c.now + Duration::from_secs(3));
    for node in 0..NODES {
        let created = c.call(0, node, None, Request::CreateTable { def: def.clone() }, SECOND);
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
    let (shards, role) = layout(&o.table);
    // A data shard of a sharded table is sent the write only (§4 `ReplicateReq`).
    let read = read.filter(|_| role != KairosRole::Replicate);
    // (A read-only transaction's one object: kairos.md §5.4.)
    let read_only = action == TxnAction::Read;
    let req = Request::TxnPrepare {
        table: o.table.clone(),
        shard: shard_of(&o.key, shards),
        read_only,
        all: all.to_vec(),
        ops: vec![TxnOp { key: o.key.clone(), seq: o.seq, expect: None, action }],
        kairos: Some(KairosPrepare {
            commit_ts,
            freshness: read,
            read_only,
            read_vts: vec![read],
            role,
            ts_gc: Timestamp::ZERO,
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
    read_in(c, TABLE, key)
}

/// [`read`] in `table`.
fn read_in(c: &mut HostCluster, table: &str, key: &Bytes) -> (Option<Bytes>, Timestamp) {
    let req = Request::LogRead {
        table: table.into(),
        key: key.clone(),
        min_index: None,
        sharer: false,
        intent: strata_wire::txn::ReadIntent::Plain,
    };
    match call_leader(c, 2, None, req) {
        Response::LogValue { value, vts, .. } => (value, vts.unwrap_or_default()),
        other => panic!("{key:?}: {other:?}"),
    }
}

fn await_read(c: &mut HostCluster, key: &Bytes, want: (Option<&str>, Timestamp)) {
    await_read_in(c, TABLE, key, want)
}

fn await_read_in(c: &mut HostCluster, table: &str, key: &Bytes, want: (Option<&str>, Timestamp)) {
    let until = c.now + Duration::from_secs(5);
    loop {
        let (v, vts) = read_in(c, table, key);
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

// ---- sharded validators (`--validation sharded:V`) ----

/// The objects `(table, key)` of a transaction `base`, in `(table, key)` order, numbered
/// `base + 1, ...` (rifl.md §5.8.1 T1).
fn numbered(base: u64, objects: &[(&str, &Bytes)]) -> Vec<TxnObject> {
    let mut all: Vec<(String, Bytes)> =
        objects.iter().map(|(t, k)| (t.to_string(), (*k).clone())).collect();
    all.sort();
    all.into_iter()
        .enumerate()
        .map(|(i, (table, key))| TxnObject { table, key, seq: base + 1 + i as u64 })
        .collect()
}

/// Two keys in different data shards and different validators, `a` first in key order.
fn sharded_keys() -> (Bytes, Bytes) {
    let a = Bytes::from_static(b"a");
    let apart = |k: &Bytes, n| shard_of(k, n) != shard_of(&a, n);
    let b = (0..)
        .map(|i| Bytes::from(format!("b{i}")))
        .find(|k| apart(k, SHARDS) && apart(k, VALIDATORS))
        .unwrap();
    (a, b)
}

/// A sharded transaction writing `keys`: a data object and a validator object per key.
fn sharded_writes(base: u64, keys: &[&Bytes]) -> Vec<TxnObject> {
    let vt = vtable();
    let objects: Vec<(&str, &Bytes)> =
        keys.iter().flat_map(|k| [(SHARDED, *k), (vt.as_str(), *k)]).collect();
    numbered(base, &objects)
}

/// What a sharded write prepares at `o`: the value at its data shard, Algorithm 3's
/// "will write" flag (no value) at its validator.
fn sharded_action(o: &TxnObject, value: &'static str) -> TxnAction {
    if o.table == SHARDED {
        write(value)
    } else {
        TxnAction::Delete
    }
}

/// The client's decision for object `o` of transaction `base`, at its shard's leader.
fn decide(c: &mut HostCluster, g: &LeaseStatus, base: u64, o: &TxnObject, decision: Decision) {
    let (shards, _) = layout(&o.table);
    let shard = shard_of(&o.key, shards);
    let req = Request::TxnDecide { table: o.table.clone(), shard, decision, seqs: vec![o.seq] };
    match call_leader(c, 0, Some(envelope(g, base)), req) {
        Response::TxnDecided => {}
        other => panic!("{other:?}"),
    }
}

/// The node leading `table`'s shard of `key` (the simulator's view).
fn leader_of(c: &mut HostCluster, table: &str, key: &Bytes) -> usize {
    let shard = shard_of(key, layout(table).0);
    (0..NODES)
        .find(|&i| {
            c.operate(i, |h, _| h.shard_replica(table, shard).is_some_and(|r| r.is_leader()))
                .is_some_and(|(l, _)| l)
        })
        .expect("a leader")
}

/// kairos.md §5.16 as RIFL's recovery, with sharded validators: a client gone after its
/// prepares is finished by recovery over every object — validator objects and data objects
/// alike. All four voted `Prepared`: Commit, the values at the data shards and the
/// validators' `latest_committed` at its timestamp. One object never prepared: Abort,
/// nothing installed, the late prepare finds `Abort(Recovered)` and the keys are free again.
#[test]
fn a_sharded_kairos_client_gone_mid_transaction_is_resolved_by_recovery() {
    let mut c = cluster_of(3, sharded_def(), None, None);
    let vt = vtable();
    let (a, b) = sharded_keys();
    let g = lease(&mut c, 0);
    let all = sharded_writes(1, &[&a, &b]);
    assert_eq!(all.iter().filter(|o| o.table == vt).count(), 2, "{all:?}");
    let ts = Timestamp::new(1_000, g.lease_id as u32);
    for (i, o) in all.iter().enumerate() {
        let vote = prepare(&mut c, 0, &g, 1, &all, i, sharded_action(o, "v1"), None, ts);
        assert_eq!(vote, Vote::Prepared, "{o:?}");
    }
    // Gone. Reads do not wait (§5.3): the initial version, at the data shard.
    assert_eq!(read_in(&mut c, SHARDED, &a), (None, Timestamp::ZERO));
    for k in [&a, &b] {
        await_read_in(&mut c, SHARDED, k, (Some("v1"), ts));
        await_read_in(&mut c, &vt, k, (None, ts));
    }
    // A second transaction prepares three of its four objects (not `b`'s validator).
    let g2 = lease(&mut c, 1);
    let ts2 = Timestamp::new(2_000, g2.lease_id as u32);
    let all2 = sharded_writes(10, &[&a, &b]);
    let skipped = all2.iter().position(|o| o.table == vt && o.key == b).unwrap();
    for (i, o) in all2.iter().enumerate().filter(|(i, _)| *i != skipped) {
        let vote = prepare(&mut c, 1, &g2, 10, &all2, i, sharded_action(o, "v2"), Some(ts), ts2);
        assert_eq!(vote, Vote::Prepared, "{o:?}");
    }
    c.run_until(c.now + Duration::from_millis(800));
    let o = &all2[skipped];
    let late = prepare(&mut c, 1, &g2, 10, &all2, skipped, sharded_action(o, "v2"), Some(ts), ts2);
    assert_eq!(late, Vote::Abort(AbortReason::Recovered));
    for k in [&a, &b] {
        await_read_in(&mut c, SHARDED, k, (Some("v1"), ts));
        await_read_in(&mut c, &vt, k, (None, ts));
    }
    // Released everywhere: a new writer of `a` prepares at its validator and data shard.
    let g3 = lease(&mut c, 2);
    let ts3 = Timestamp::new(3_000, g3.lease_id as u32);
    let all3 = sharded_writes(20, &[&a]);
    for (i, o) in all3.iter().enumerate() {
        let vote = prepare(&mut c, 2, &g3, 20, &all3, i, sharded_action(o, "v3"), Some(ts), ts3);
        assert_eq!(vote, Vote::Prepared, "{o:?}");
    }
}

/// K2 (kairos.md §1.2, §6.4) across a validator leader's crash while the two decisions of a
/// write apply at different times (design.md, "sharded validators"): the validator's state is
/// its shard's replicated log, so the next leader has it. A write decided at its validator
/// only: a read of the old value (at the data shard, not decided yet) validates `Stale` at the
/// new leader. A write decided at its data shard only: a read of the new value validates
/// `PreparedConflict` (the prepared write survived). Once both apply, the new value validates.
/// Canary: with `KairosValidatorSoftState` (a new leader forgets the validator's state, §6.4
/// without its rebuild) the stale read validates, and the scenario says so.
#[test]
fn a_validator_leader_crash_mid_transaction_keeps_k2() {
    for seed in 0..3 {
        k2_across_validator_crashes(30 + seed, None).unwrap();
        let caught =
            k2_across_validator_crashes(30 + seed, Some(PlantedBug::KairosValidatorSoftState));
        assert!(caught.is_err_and(|e| e.contains("K2")), "seed {seed}: the canary was not caught");
    }
}

/// Checks `want == got`, else says `what` went wrong.
fn expect<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: {got:?}, want {want:?}"))
    }
}

/// The scenario of [`a_validator_leader_crash_mid_transaction_keeps_k2`], with `canary`
/// planted in the validators; the first expectation not met, if any.
fn k2_across_validator_crashes(seed: u64, canary: Option<PlantedBug>) -> Result<(), String> {
    // (Recovery slower than the test: the client decides each object itself.)
    let mut c = cluster_of(seed, sharded_def(), Some(Duration::from_secs(60)), canary);
    let vt = vtable();
    let (a, _) = keys();
    let gw = lease(&mut c, 0);
    let gr = lease(&mut c, 1);
    // A read-only reader of `a` having read version `v`: its one validator object.
    let mut reader_base = 100;
    let mut validate_read = |c: &mut HostCluster, v: Timestamp| {
        reader_base += 10;
        let r = numbered(reader_base, &[(vt.as_str(), &a)]);
        prepare(c, 1, &gr, reader_base, &r, 0, TxnAction::Read, Some(v), v)
    };
    // W1 prepares `a` at both; its decision reaches the validator only.
    let ts1 = Timestamp::new(1_000, gw.lease_id as u32);
    let w1 = sharded_writes(1, &[&a]);
    for (i, o) in w1.iter().enumerate() {
        let vote = prepare(&mut c, 0, &gw, 1, &w1, i, sharded_action(o, "v1"), None, ts1);
        expect("W1's prepare", vote, Vote::Prepared)?;
    }
    let seen = read_in(&mut c, SHARDED, &a);
    expect("the initial version", seen.clone(), (None, Timestamp::ZERO))?;
    let (data, validator) = (&w1[0], &w1[1]);
    assert_eq!((data.table.as_str(), validator.table.as_str()), (SHARDED, vt.as_str()));
    decide(&mut c, &gw, 1, validator, Decision::Commit);
    let victim = leader_of(&mut c, &vt, &a);
    c.run_until(c.now + Duration::from_millis(5 * (seed % 4)));
    c.crash(victim);
    let vote = validate_read(&mut c, seen.1);
    expect("K2: a read of the old value", vote, Vote::Abort(AbortReason::Stale))?;
    expect("the data shard, not decided yet", read_in(&mut c, SHARDED, &a), seen)?;
    decide(&mut c, &gw, 1, data, Decision::Commit);
    await_read_in(&mut c, SHARDED, &a, (Some("v1"), ts1));
    expect("a read of W1's value", validate_read(&mut c, ts1), Vote::Prepared)?;
    c.start(victim);
    c.run_until(c.now + Duration::from_secs(1));
    // W2: its decision reaches the data shard only; the validator's leader crashes.
    let ts2 = Timestamp::new(2_000, gw.lease_id as u32);
    let w2 = sharded_writes(10, &[&a]);
    for (i, o) in w2.iter().enumerate() {
        let vote = prepare(&mut c, 0, &gw, 10, &w2, i, sharded_action(o, "v2"), Some(ts1), ts2);
        expect("W2's prepare", vote, Vote::Prepared)?;
    }
    decide(&mut c, &gw, 10, &w2[0], Decision::Commit);
    await_read_in(&mut c, SHARDED, &a, (Some("v2"), ts2));
    let victim = leader_of(&mut c, &vt, &a);
    c.crash(victim);
    let vote = validate_read(&mut c, ts2);
    expect(
        "K2: a read of W2's value before its validator's decision",
        vote,
        Vote::Abort(AbortReason::PreparedConflict),
    )?;
    decide(&mut c, &gw, 10, &w2[1], Decision::Commit);
    expect("a read of W2's value", validate_read(&mut c, ts2), Vote::Prepared)?;
    expect(
        "K2: a read of W1's value",
        validate_read(&mut c, ts1),
        Vote::Abort(AbortReason::Stale),
    )?;
    c.start(victim);
    Ok(())
}

// ---- watermarks, ts_GC and TooOld (kairos.md §5.9, §6.5) ----

/// Client `g`'s watermark report to the leader of `table`'s shard of `key`: the shard's
/// `(WM, ts_GC)`.
fn report(
    c: &mut HostCluster,
    table: &str,
    (client, g): (usize, &LeaseStatus),
    seq: u64,
    key: &Bytes,
    marks: (u64, u64),
) -> (Timestamp, Timestamp) {
    let req = Request::KairosReport {
        table: table.into(),
        shard: shard_of(key, layout(table).0),
        client: g.lease_id,
        seq,
        local_wm: Timestamp::new(marks.0, u32::MAX),
        c_freshness: Timestamp::new(marks.1, 0),
    };
    match call_leader(c, client, None, req) {
        Response::KairosWatermarks { wm, ts_gc } => (wm, ts_gc),
        other => panic!("{other:?}"),
    }
}

/// A read-write transaction of one object of `table` (where it is validated: `TABLE`'s
/// shard, or a validator of `SHARDED`), `key` read at `ZERO` with freshness `fresh_ns` (an
/// `fts` above its `vts`, as a watermark gives): its vote.
fn prepare_with_freshness(
    c: &mut HostCluster,
    table: &str,
    (client, g): (usize, &LeaseStatus),
    base: u64,
    key: &Bytes,
    fresh_ns: u64,
) -> Vote {
    let (shards, role) = layout(table);
    let o = TxnObject { table: table.into(), key: key.clone(), seq: base + 1 };
    let action = if role == KairosRole::Validate { TxnAction::Delete } else { write("w") };
    let req = Request::TxnPrepare {
        table: table.into(),
        shard: shard_of(key, shards),
        read_only: false,
        all: vec![o],
        ops: vec![TxnOp { key: key.clone(), seq: base + 1, expect: None, action }],
        kairos: Some(KairosPrepare {
            commit_ts: Timestamp::new(1_000_000 + base, g.lease_id as u32),
            freshness: Some(Timestamp::new(fresh_ns, 0)),
            read_only: false,
            read_vts: vec![Some(Timestamp::ZERO)],
            role,
            ts_gc: Timestamp::ZERO,
        }),
    };
    match call_leader(c, client, Some(envelope(g, base)), req) {
        Response::TxnVotes { votes, .. } if votes.len() == 1 => votes[0].1,
        other => panic!("{other:?}"),
    }
}

/// The scenario of §6.5 on whole hosts, at the shards of `table` that decide `TooOld`: a
/// client whose reports stop holds `ts_GC` back until its report expires; then the other
/// client's freshness moves `ts_GC`, and the silent client's prepare with older reads votes
/// `TooOld` — at every replica, since the vote comes from the leader's stamp in the entry.
/// Returns what went wrong, if anything.
fn silent_client_scenario(mut c: HostCluster, table: &str) -> Result<(), String> {
    let (silent, live) = (lease(&mut c, 0), lease(&mut c, 1));
    let (silent, live) = ((0, &silent), (1, &live));
    let shards = layout(table).0;
    let key = Bytes::from_static(b"a");
    let shard = shard_of(&key, shards);
    assert_eq!(report(&mut c, table, silent, 1, &key, (10_000, 100)).1, Timestamp::new(100, 0));
    let (wm, gc) = report(&mut c, table, live, 1, &key, (9_000, 5_000));
    assert_eq!((wm, gc), (Timestamp::new(9_000, u32::MAX), Timestamp::new(100, 0)));
    // While the silent client's report is live, its reads at 200 are fresh enough.
    let first = prepare_with_freshness(&mut c, table, silent, 10, &key, 200);
    if first != Vote::Prepared {
        return Err(format!("a prepare above ts_GC voted {first:?}"));
    }
    // The live client keeps reporting; the silent one's report expires (1 s).
    let mut last = (wm, gc);
    for seq in 2..=8 {
        c.run_until(c.now + Duration::from_millis(200));
        last = report(&mut c, table, live, seq, &key, (9_000 + seq, 5_000 + seq));
    }
    assert_eq!(last, (Timestamp::new(9_008, u32::MAX), Timestamp::new(5_008, 0)), "only one");
    // Another key of the shard (never written, so only step 1 can refuse the read).
    let other =
        (0..).map(|i| Bytes::from(format!("c{i}"))).find(|k| shard_of(k, shards) == shard).unwrap();
    let second = prepare_with_freshness(&mut c, table, silent, 20, &other, 200);
    c.run_until(c.now + Duration::from_millis(200)); // every replica applies it
    let rpc = RpcId { client_id: silent.1.lease_id, seq: 21 };
    for node in 0..NODES {
        let host = c.nodes[node].host.as_ref().expect("up");
        let r = host.shard_replica(table, shard).expect("a replica");
        let gc = r.applied_snapshot().kairos_ts_gc;
        let vote = match r.write_record(rpc) {
            strata_log::Verdict::Completed(rec) => Some(rec.outcome),
            _ => None,
        };
        let want = Some(strata_wire::log::WriteOutcome::Voted(Vote::Abort(AbortReason::TooOld)));
        if vote != want || gc < Timestamp::new(5_000, 0) {
            return Err(format!("node {node}: vote {vote:?}, ts_GC {gc} (leader's: {second:?})"));
        }
    }
    Ok(())
}

#[test]
fn a_silent_clients_old_reads_vote_too_old_at_every_replica_once_its_report_expires() {
    silent_client_scenario(cluster(4), TABLE).unwrap();
}

/// With sharded validators `TooOld` is the validators' to decide (kairos.md §5.6): the same
/// scenario at a shard of `ksh.validators`, whose stamped prepares carry a role too (log
/// tag 19).
#[test]
fn sharded_validators_vote_too_old_once_a_silent_clients_report_expires() {
    let c = cluster_of(5, sharded_def(), None, None);
    silent_client_scenario(c, &vtable()).unwrap();
}

/// Canary: leaders that fold the reports but do not stamp `ts_GC` into the entries leave the
/// replicated `ts_GC` at `ZERO`, and `TooOld` never fires; the scenario must say so, with
/// validation in the table's shards and in sharded validators alike.
#[test]
fn canary_unstamped_ts_gc_is_caught() {
    let bug = Some(PlantedBug::KairosUnstampedTsGc);
    for (c, table) in [
        (cluster_of(4, def(), None, bug), TABLE.to_string()),
        (cluster_of(5, sharded_def(), None, bug), vtable()),
    ] {
        let e = silent_client_scenario(c, &table).unwrap_err();
        assert!(e.contains("Prepared") && e.contains("ts_GC 0@0"), "{table}: {e}");
    }
}
