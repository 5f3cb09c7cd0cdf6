//! End-to-end runs of the load generator: against an in-process 3-node Strata cluster
//! (`strata_node::testing::local_cluster`), and against a minimal in-process RESP2 server
//! standing in for Redis.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::{Buf, Bytes, BytesMut};
use strata_bench::resp::{self, Reply};
use strata_bench::{
    BenchArgs, BenchReport, ConnArgs, Distribution, OutputArgs, RiflArgs, RunArgs, SyncArgs,
    Target, WorkloadArgs,
};
use strata_client::{
    Client, ClientOptions, TableDef, TableDurability, TableEngine, TableReads, TableReplication,
    TableTimers,
};
use strata_node::testing::local_cluster;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn bind() -> std::net::TcpListener {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap()
}

fn short_run(target: Target, json: std::path::PathBuf) -> BenchArgs {
    BenchArgs {
        conn: ConnArgs { target, clients: 3, sessions: 2, pipeline: 4, ..ConnArgs::default() },
        workload: WorkloadArgs {
            keys: Some(2_000),
            key_size: 12,
            value_size: 32,
            dist: Some(Distribution::Zipfian),
            write_ratio: Some(20.0),
            ..WorkloadArgs::default()
        },
        run: RunArgs { duration: 1.0, warmup: 0.2, ..RunArgs::default() },
        output: OutputArgs {
            json: Some(json),
            quiet: true,
            label: Some(format!("{target} e2e test")),
            ..OutputArgs::default()
        },
        ..BenchArgs::default()
    }
}

fn check_report(report: &BenchReport, json: &std::path::Path) {
    assert!(report.ops > 0, "{report}");
    assert_eq!(report.errors, 0, "{report}");
    assert_eq!(report.ops, report.reads + report.writes);
    assert!(report.reads > 0 && report.writes > 0, "{report}");
    assert_eq!(report.latency_us.all.count, report.ops);
    assert!(
        report.latency_us.all.p50_us > 0.0
            && report.latency_us.all.p50_us <= report.latency_us.all.p99_us
    );
    assert!((report.duration_s - 1.0).abs() < 1e-6, "time mode measures the configured window");
    assert!(report.throughput_ops_s > 0.0);
    assert_eq!(report.preloaded_keys, 2_000);
    let parsed: BenchReport =
        serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    assert_eq!(&parsed, report, "the JSON report parses back to the same report");
    let table = report.to_string();
    assert!(table.contains("ops/s") && table.contains("p99"), "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_run_against_a_three_node_cluster() {
    let nodes = local_cluster(3).await;
    let endpoints: Vec<SocketAddr> = nodes.iter().map(|n| n.client_addr()).collect();
    let json = std::env::temp_dir().join(format!("strata-bench-e2e-{}.json", std::process::id()));
    let args = short_run(Target::Strata, json.clone());
    let report = strata_bench::run(&args, endpoints.clone()).await.unwrap();
    check_report(&report, &json);
    assert_eq!(report.endpoints, endpoints);
    // Ops mode: exactly that many operations are measured.
    let args = BenchArgs {
        run: RunArgs { ops: Some(3_000), ..args.run },
        output: OutputArgs { json: None, ..args.output },
        ..args
    };
    let report = strata_bench::run(&args, endpoints).await.unwrap();
    assert_eq!((report.ops, report.errors), (3_000, 0), "{report}");
    let _ = std::fs::remove_file(json);
    for n in nodes {
        n.shutdown().await;
    }
}

/// Just enough of Redis for the benchmark: GET, SET, DEL on one shared map.
async fn mini_redis() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let map: Arc<Mutex<HashMap<Bytes, Bytes>>> = Arc::default();
    tokio::spawn(async move {
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            let map = map.clone();
            tokio::spawn(async move {
                let mut buf = BytesMut::new();
                loop {
                    let mut out = BytesMut::new();
                    while let Some((cmd, n)) = resp::parse(&buf).unwrap() {
                        buf.advance(n);
                        let Reply::Array(Some(args)) = cmd else {
                            panic!("not a command: {cmd:?}")
                        };
                        let args: Vec<Bytes> = args
                            .into_iter()
                            .map(|a| if let Reply::Bulk(Some(b)) = a { b } else { panic!() })
                            .collect();
                        let mut m = map.lock().unwrap();
                        match &args[0][..] {
                            b"GET" => match m.get(&args[1]) {
                                Some(v) => {
                                    out.extend_from_slice(format!("${}\r\n", v.len()).as_bytes());
                                    out.extend_from_slice(v);
                                    out.extend_from_slice(b"\r\n");
                                }
                                None => out.extend_from_slice(b"$-1\r\n"),
                            },
                            b"SET" => {
                                m.insert(args[1].clone(), args[2].clone());
                                out.extend_from_slice(b"+OK\r\n");
                            }
                            b"DEL" => {
                                let n = m.remove(&args[1]).is_some() as u8;
                                out.extend_from_slice(format!(":{n}\r\n").as_bytes());
                            }
                            _ => out.extend_from_slice(b"-ERR unknown command\r\n"),
                        }
                    }
                    if !out.is_empty() && sock.write_all(&out).await.is_err() {
                        return;
                    }
                    match sock.read_buf(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_run_against_a_resp_server() {
    let addr = mini_redis().await;
    let json =
        std::env::temp_dir().join(format!("strata-bench-e2e-redis-{}.json", std::process::id()));
    let mut args = short_run(Target::Redis, json.clone());
    args.conn.endpoints = Some(vec![addr]);
    let report = strata_bench::run(&args, Vec::new()).await.unwrap();
    check_report(&report, &json);
    assert_eq!(report.read_misses, 0, "every key was preloaded into the one map");
    assert_eq!(report.endpoints, vec![addr], "--endpoints is used when the caller passes none");
    let _ = std::fs::remove_file(json);
}

#[tokio::test]
async fn nothing_listening_is_a_connect_error() {
    let addr = bind().local_addr().unwrap(); // bound then dropped: nobody listens
    let args = BenchArgs {
        output: OutputArgs { quiet: true, ..OutputArgs::default() },
        ..BenchArgs::default()
    };
    let err = strata_bench::run(&args, vec![addr]).await.unwrap_err();
    assert!(matches!(err, strata_bench::BenchError::Connect { .. }), "{err}");
    let err = strata_bench::run(&args, vec![]).await.unwrap_err();
    assert!(matches!(err, strata_bench::BenchError::NoEndpoints), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_modes_timeline_and_ds_workloads_against_a_three_node_cluster() {
    use strata_bench::{Mode, RmwKind, WorkloadKind};
    let nodes = local_cluster(3).await;
    let endpoints: Vec<SocketAddr> = nodes.iter().map(|n| n.client_addr()).collect();
    let dir = std::env::temp_dir().join(format!("strata-bench-modes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = BenchArgs {
        conn: ConnArgs { clients: 3, sessions: 1, pipeline: 4, ..ConnArgs::default() },
        workload: WorkloadArgs {
            keys: Some(500),
            key_size: 12,
            value_size: 32,
            write_ratio: Some(50.0),
            ..WorkloadArgs::default()
        },
        run: RunArgs { duration: 0.5, warmup: 0.1, ..RunArgs::default() },
        output: OutputArgs { quiet: true, ..OutputArgs::default() },
        ..BenchArgs::default()
    };
    // ABD: every read an acquire, every write a release; with a timeline.
    let args = BenchArgs {
        sync: SyncArgs { mode: Mode::Abd, ..base.sync.clone() },
        output: OutputArgs { timeline: Some(dir.join("t.csv")), ..base.output.clone() },
        ..base.clone()
    };
    let r = strata_bench::run(&args, endpoints.clone()).await.unwrap();
    assert_eq!(r.errors, 0, "{r}");
    let c = &r.class_latency_us;
    assert!(c.acquire.count > 0 && c.release.count > 0, "{r}");
    assert_eq!((c.relaxed_read.count, c.relaxed_write.count, c.rmw.count), (0, 0, 0), "{r}");
    assert_eq!(c.acquire.count + c.release.count, r.ops);
    assert!(r.to_string().contains("acq"), "{r}");
    let csv = std::fs::read_to_string(dir.join("t.csv")).unwrap();
    assert!(csv.starts_with("t_ms,node0,node1,node2,total\n"), "{csv}");
    assert_eq!(csv.lines().count(), 1 + 50, "0.5 s in 10 ms buckets");
    assert!(dir.join("t.png").exists());
    // Paxos with CAS: acquires and RMWs only.
    let args = BenchArgs {
        sync: SyncArgs { mode: Mode::Paxos, rmw: RmwKind::Cas, ..base.sync.clone() },
        ..base.clone()
    };
    let r = strata_bench::run(&args, endpoints.clone()).await.unwrap();
    assert_eq!(r.errors, 0, "{r}");
    assert!(r.class_latency_us.rmw.count > 0 && r.class_latency_us.acquire.count > 0, "{r}");
    assert_eq!(r.class_latency_us.relaxed_write.count + r.class_latency_us.release.count, 0);
    // Kite 5%: mostly relaxed, some of each sync class, FAA RMWs on top.
    let args = BenchArgs {
        sync: SyncArgs { mode: Mode::Kite, rmw_pct: Some(5.0), ..base.sync.clone() },
        run: RunArgs { duration: 1.0, ..base.run.clone() },
        ..base.clone()
    };
    let r = strata_bench::run(&args, endpoints.clone()).await.unwrap();
    assert_eq!(r.errors, 0, "{r}");
    let c = &r.class_latency_us;
    assert!(c.relaxed_read.count > c.acquire.count && c.acquire.count > 0, "{r}");
    assert!(
        c.relaxed_write.count > c.release.count && c.release.count > 0 && c.rmw.count > 0,
        "{r}"
    );
    // A data-structure workload.
    for workload in [WorkloadKind::Ts, WorkloadKind::Hml] {
        let args = BenchArgs {
            workload: WorkloadArgs { kind: workload, structures: 20, ..base.workload.clone() },
            run: RunArgs { duration: 0.5, ..base.run.clone() },
            ..base.clone()
        };
        let r = strata_bench::run(&args, endpoints.clone()).await.unwrap();
        assert_eq!(r.errors, 0, "{r}");
        let d = r.ds.as_ref().unwrap();
        assert!(
            d.pairs > 0 && d.requests > d.pairs && d.sync_share > 0.0 && d.sync_share < 1.0,
            "{r}"
        );
        assert_eq!(r.ops, d.requests);
        assert!(r.to_string().contains("pairs/s"), "{r}");
    }
    let _ = std::fs::remove_dir_all(dir);
    for n in nodes {
        n.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ycsb_workloads_against_a_three_node_cluster() {
    use strata_bench::Ycsb;
    let nodes = local_cluster(3).await;
    let endpoints: Vec<SocketAddr> = nodes.iter().map(|n| n.client_addr()).collect();
    let base = BenchArgs {
        conn: ConnArgs { clients: 3, sessions: 2, pipeline: 2, ..ConnArgs::default() },
        workload: WorkloadArgs {
            keys: Some(500),
            key_size: 12,
            value_size: 32,
            ..WorkloadArgs::default()
        },
        run: RunArgs { duration: 0.5, warmup: 0.1, ..RunArgs::default() },
        output: OutputArgs { quiet: true, ..OutputArgs::default() },
        ..BenchArgs::default()
    };
    // D: reads and inserts; the inserted keys are read back (latest), so nothing misses.
    let r = strata_bench::run(
        &BenchArgs {
            workload: WorkloadArgs { ycsb: Some(Ycsb::D), ..base.workload.clone() },
            ..base.clone()
        },
        endpoints.clone(),
    )
    .await
    .unwrap();
    assert_eq!(r.errors, 0, "{r}");
    let y = r.ycsb.as_ref().expect("a YCSB report");
    assert!(y.read.count > 0 && y.insert.count > 0 && y.inserted_keys >= y.insert.count, "{r}");
    assert_eq!((y.update.count, y.rmw.count), (0, 0), "{r}");
    assert_eq!(r.ops, y.read.count + y.insert.count);
    assert_eq!(r.writes, y.insert.count);
    // Reads choose only acknowledged inserts, but a relaxed put is acknowledged before every
    // replica has it, so a read at another node may still miss a very new key, rarely.
    assert!(r.read_misses * 20 < y.read.count, "latest reads acknowledged inserts: {r}");
    let table = r.to_string();
    assert!(table.contains("YCSB D") && table.contains("insert"), "{table}");
    // F: an RMW is one operation (its read and write are not counted apart), slower than a read.
    let r = strata_bench::run(
        &BenchArgs {
            workload: WorkloadArgs { ycsb: Some(Ycsb::F), ..base.workload.clone() },
            run: RunArgs { ops: Some(2_000), ..base.run.clone() },
            ..base.clone()
        },
        endpoints.clone(),
    )
    .await
    .unwrap();
    assert_eq!(r.errors, 0, "{r}");
    let y = r.ycsb.as_ref().unwrap();
    assert_eq!(r.ops, 2_000);
    assert_eq!(y.read.count + y.rmw.count, 2_000, "{r}");
    assert!(y.rmw.count > 700 && y.read.count > 700, "{r}");
    assert!(y.rmw.p50_us > y.read.p50_us, "an RMW is two round trips: {r}");
    // The JSON names the classes.
    let json = serde_json::to_value(&r).unwrap();
    for class in ["read", "update", "insert", "rmw"] {
        assert!(json["ycsb"][class]["count"].is_u64(), "{json}");
    }
}

/// Creates a one-shard log table on every node (the catalog is per node: docs/design.md, "Log
/// tables in the node").
async fn create_table(
    endpoints: &[SocketAddr],
    name: &str,
    durability: TableDurability,
    reads: TableReads,
) {
    for node in endpoints {
        let c = Client::connect(&[*node], ClientOptions::default()).await.unwrap();
        let def = TableDef {
            name: name.into(),
            engine: TableEngine::Log,
            durability,
            replication: TableReplication::Async,
            reads,
            shards: 2,
            timers: TableTimers::Default,
            leaders: Vec::new(),
            txn: Default::default(),
            validation: Default::default(),
        };
        c.create_table(def).await.unwrap();
    }
}

/// The share of reads that triggered durability, checked for range and returned.
fn read_durability_pct(r: &BenchReport) -> f64 {
    let d = r.read_durability.as_ref().unwrap_or_else(|| panic!("--table reports it: {r}"));
    assert!(d.reads_served > 0 && d.reads_made_durable <= d.reads_served, "{d:?}");
    let pct = d.pct.unwrap();
    assert!((0.0..=100.0).contains(&pct), "{d:?}");
    assert!(r.to_string().contains("reads that triggered durability"), "{r}");
    pct
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_run_against_a_log_table() {
    let nodes = local_cluster(3).await;
    let endpoints: Vec<SocketAddr> = nodes.iter().map(|n| n.client_addr()).collect();
    create_table(&endpoints, "bench", TableDurability::Cad, TableReads::ActiveSet).await;
    let args = BenchArgs {
        conn: ConnArgs {
            table: Some("bench".into()),
            clients: 3,
            sessions: 2,
            pipeline: 1,
            ..ConnArgs::default()
        },
        workload: WorkloadArgs {
            keys: Some(300),
            key_size: 12,
            value_size: 32,
            write_ratio: Some(20.0),
            ..WorkloadArgs::default()
        },
        run: RunArgs { duration: 1.0, warmup: 0.2, ..RunArgs::default() },
        output: OutputArgs { quiet: true, ..OutputArgs::default() },
        ..BenchArgs::default()
    };
    let r = strata_bench::run(&args, endpoints.clone()).await.unwrap();
    assert_eq!(r.errors, 0, "{r}");
    assert!(r.reads > 0 && r.writes > 0, "{r}");
    // Every key was preloaded through the leader and reads return only durable data, which
    // includes the preload once a read made it durable: nothing misses.
    assert_eq!(r.read_misses, 0, "{r}");
    read_durability_pct(&r);
    // A pipelined run is refused with the flag to change.
    let err = strata_bench::run(
        &BenchArgs { conn: ConnArgs { pipeline: 4, ..args.conn.clone() }, ..args.clone() },
        endpoints.clone(),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("--pipeline 1"), "{err}");

    // CAD with leader reads and a write-heavy mix on a few hot keys: reads keep finding the
    // newest write not yet durable at the leader, so some of them trigger durability (ORCA
    // §5.5.1); a sync table never needs to (every applied entry is durable).
    let hot = BenchArgs {
        workload: WorkloadArgs {
            keys: Some(50),
            write_ratio: Some(80.0),
            dist: Some(Distribution::Zipfian),
            ..args.workload.clone()
        },
        ..args.clone()
    };
    create_table(&endpoints, "cad", TableDurability::Cad, TableReads::Leader).await;
    let r = strata_bench::run(
        &BenchArgs {
            conn: ConnArgs { table: Some("cad".into()), ..hot.conn.clone() },
            ..hot.clone()
        },
        endpoints.clone(),
    )
    .await
    .unwrap();
    assert_eq!(r.errors, 0, "{r}");
    assert!(read_durability_pct(&r) > 0.0, "{r}");
    create_table(&endpoints, "sync", TableDurability::Sync, TableReads::Leader).await;
    let r = strata_bench::run(
        &BenchArgs {
            conn: ConnArgs { table: Some("sync".into()), ..hot.conn.clone() },
            ..hot.clone()
        },
        endpoints.clone(),
    )
    .await
    .unwrap();
    assert_eq!(r.errors, 0, "{r}");
    assert_eq!(read_durability_pct(&r), 0.0, "{r}");

    // --client-delay-ms: every request crosses a relay holding it 5 ms each way.
    let far = BenchArgs {
        conn: ConnArgs { client_delay_ms: Some(vec![5.0]), ..hot.conn },
        run: RunArgs { duration: 0.5, ..hot.run },
        ..hot
    };
    let r = strata_bench::run(
        &BenchArgs { conn: ConnArgs { table: Some("cad".into()), ..far.conn }, ..far },
        endpoints.clone(),
    )
    .await
    .unwrap();
    assert_eq!(r.errors, 0, "{r}");
    assert!(r.latency_us.all.min_us >= 10_000.0, "two 5 ms legs: {r}");
    assert_eq!(r.endpoints, endpoints, "the report names the nodes, not the relays");
    for n in nodes {
        n.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_renewals_and_creations_against_a_three_node_cluster() {
    let nodes = local_cluster(3).await;
    let endpoints: Vec<SocketAddr> = nodes.iter().map(|n| n.client_addr()).collect();
    let json = std::env::temp_dir().join(format!("strata-bench-lease-{}.json", std::process::id()));
    let args = BenchArgs {
        rifl: RiflArgs { lease_renewals: true, ..RiflArgs::default() },
        conn: ConnArgs { clients: 3, sessions: 2, pipeline: 4, ..ConnArgs::default() },
        run: RunArgs { duration: 0.5, warmup: 0.2, ..RunArgs::default() },
        output: OutputArgs { quiet: true, json: Some(json.clone()), ..OutputArgs::default() },
        ..BenchArgs::default()
    };
    // Round-robin over the nodes: the two that do not lead `__leases` forward to the one that
    // does (the bench waits for the service's leader before measuring).
    let r = strata_bench::run(&args, endpoints.clone()).await.unwrap();
    assert_eq!(r.errors, 0, "{r}");
    assert!(r.ops > 0 && r.throughput_ops_s > 0.0 && r.latency_us.all.count == r.ops, "{r}");
    let l = r.lease.as_ref().expect("a lease report");
    assert_eq!((l.kind.as_str(), l.leases, l.new_ids), ("renewals", 6, 0), "{r}");
    let leader = l.service_leader.expect("one node leads __leases");
    assert!(endpoints.contains(&leader));
    assert_eq!(l.forwarded_clients, 2, "{r}");
    assert!(r.to_string().contains("renewals/s"), "{r}");
    let parsed: BenchReport =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(parsed, r, "the JSON report parses back to the same report");
    // Creations at the leader: every request writes a log entry.
    let args = BenchArgs {
        rifl: RiflArgs { lease_renewals: false, lease_creations: true, ..args.rifl },
        output: OutputArgs { json: None, ..args.output },
        ..args
    };
    let r = strata_bench::run(&args, vec![leader]).await.unwrap();
    assert_eq!(r.errors, 0, "{r}");
    let l = r.lease.as_ref().unwrap();
    assert!(r.ops > 0 && l.kind == "creations" && l.forwarded_clients == 0, "{r}");
    // Lease runs take no key-value mix.
    let err = strata_bench::run(
        &BenchArgs { run: RunArgs { ops: Some(10), ..args.run }, ..args },
        endpoints,
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("--lease-renewals"), "{err}");
    let _ = std::fs::remove_file(json);
    for n in nodes {
        n.shutdown().await;
    }
}

/// `--workload txn` (issue #18 item 6) on a `--txn rifl` table: transactions commit, with the
/// objects in distinct shards when asked; every committed increment lands (the counters' sum
/// is at least the transactions committed in the window times their objects).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_against_a_three_node_cluster() {
    let nodes = local_cluster(3).await;
    let endpoints: Vec<SocketAddr> = nodes.iter().map(|n| n.client_addr()).collect();
    create_txn_table(&endpoints, "bank", 3, strata_client::TableTxn::Rifl).await;
    let args = BenchArgs {
        conn: ConnArgs {
            table: Some("bank".into()),
            clients: 2,
            sessions: 2,
            pipeline: 1,
            ..ConnArgs::default()
        },
        workload: WorkloadArgs {
            keys: Some(60),
            kind: strata_bench::args::WorkloadKind::Txn,
            txn_objects: 3,
            txn_spread: true,
            ..WorkloadArgs::default()
        },
        run: RunArgs { duration: 1.0, warmup: 0.2, ..RunArgs::default() },
        output: OutputArgs { quiet: true, ..OutputArgs::default() },
        ..BenchArgs::default()
    };
    let r = strata_bench::run(&args, endpoints.clone()).await.unwrap();
    assert_eq!(r.errors, 0, "{r}");
    let t = r.txn.as_ref().expect("a transaction report");
    assert!(t.committed > 0 && t.commit_us.count == t.committed, "{r}");
    assert!(r.to_string().contains("committed/s"), "{r}");
    let client = Client::connect(&endpoints, ClientOptions::default()).await.unwrap();
    let mut table = client.table("bank").await.unwrap();
    let mut sum = 0u64;
    for i in 0..60 {
        let v = table.get(format!("txk{i}")).await.unwrap().value.unwrap();
        sum += std::str::from_utf8(&v).unwrap().parse::<u64>().unwrap();
    }
    assert!(sum >= t.committed * 3, "{sum} increments for {} transactions of 3", t.committed);
    // More objects than shards cannot spread.
    let too_many = BenchArgs {
        workload: WorkloadArgs { txn_objects: 4, ..args.workload.clone() },
        ..args.clone()
    };
    let e = strata_bench::run(&too_many, endpoints.clone()).await.unwrap_err();
    assert!(e.to_string().contains("--txn-spread"), "{e}");
}

/// Creates a transactional log table (`sync`, leader reads) of `shards` shards at every node.
async fn create_txn_table(
    endpoints: &[SocketAddr],
    name: &str,
    shards: u32,
    txn: strata_client::TableTxn,
) {
    for node in endpoints {
        let c = Client::connect(&[*node], ClientOptions::default()).await.unwrap();
        let def = TableDef {
            name: name.into(),
            engine: TableEngine::Log,
            durability: TableDurability::Sync,
            replication: TableReplication::Sync,
            reads: TableReads::Leader,
            shards,
            timers: TableTimers::Default,
            leaders: Vec::new(),
            txn,
            validation: Default::default(),
        };
        c.create_table(def).await.unwrap();
    }
}

/// `--workload kairos` (kairos.md §8.1) on a `--txn kairos` table: the preload writes every
/// key through transactions, read-only and read-write transactions commit, and every
/// committed read-write transaction's increments land (each key's counter counts the
/// read-write transactions that wrote it, so their sum is at least four per commit in the
/// window). A second run on the same table skips the preload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kairos_transactions_against_a_three_node_cluster() {
    let nodes = local_cluster(3).await;
    let endpoints: Vec<SocketAddr> = nodes.iter().map(|n| n.client_addr()).collect();
    create_txn_table(&endpoints, "social", 3, strata_client::TableTxn::Kairos).await;
    let keys = 300u64;
    let args = BenchArgs {
        conn: ConnArgs {
            table: Some("social".into()),
            clients: 2,
            sessions: 2,
            ..ConnArgs::default()
        },
        workload: WorkloadArgs {
            keys: Some(keys),
            value_size: 40,
            kind: strata_bench::args::WorkloadKind::Kairos,
            ..WorkloadArgs::default()
        },
        kairos: strata_bench::args::KairosArgs { ro_pct: 50.0, ..Default::default() },
        run: RunArgs { duration: 1.0, warmup: 0.2, ..RunArgs::default() },
        output: OutputArgs { quiet: true, ..OutputArgs::default() },
        ..BenchArgs::default()
    };
    let r = strata_bench::run(&args, endpoints.clone()).await.unwrap();
    assert_eq!(r.errors, 0, "{r}");
    assert_eq!(r.preloaded_keys, keys);
    let t = r.txn.as_ref().expect("a transaction report");
    let k = r.kairos.as_ref().expect("a kairos report");
    assert!(k.ro_committed > 0 && k.rw_committed > 0, "{r}");
    assert_eq!(k.ro_committed + k.rw_committed, t.committed);
    assert_eq!((k.cacheable_keys, k.cache_capacity, k.cache_stats), (3, 1, None));
    assert!(r.to_string().contains("read-only"), "{r}");
    let client = Client::connect(&endpoints, ClientOptions::default()).await.unwrap();
    let sum = |client: Client| async move {
        let mut tx = client.transaction();
        let mut sum = 0u64;
        for i in 0..keys {
            let v = tx.read("social", strata_bench::keys::key(i, 16)).await.unwrap().unwrap();
            assert_eq!(v.len(), 40, "every key preloaded at --value-size");
            let digits: String =
                v.iter().take_while(|b| b.is_ascii_digit()).map(|&b| b as char).collect();
            sum += digits.parse::<u64>().unwrap();
        }
        sum
    };
    let first = sum(client.clone()).await;
    assert!(
        first >= 4 * k.rw_committed,
        "{first} increments for {} commits of 4 keys",
        k.rw_committed
    );
    // Again without the preload: the counters keep growing from where they were.
    let again = BenchArgs {
        kairos: strata_bench::args::KairosArgs { skip_preload: true, ..args.kairos.clone() },
        ..args.clone()
    };
    let r2 = strata_bench::run(&again, endpoints.clone()).await.unwrap();
    assert_eq!((r2.errors, r2.preloaded_keys), (0, 0), "{r2}");
    let k2 = r2.kairos.as_ref().unwrap();
    assert!(sum(client).await >= first + 4 * k2.rw_committed);
    // With a cache of the hottest keys (10 % cacheable, 5 % capacity): reads hit it under a
    // long fixed lease, as under Algorithm 1's leases and explicit invalidation, and stale
    // hits are caught by validation (never more than the aborted attempts).
    let mut hits_by_policy = Vec::new();
    for policy in ["fixed:10000", "ideal", "ei"] {
        let cached = BenchArgs {
            kairos: strata_bench::args::KairosArgs {
                cache: policy.parse().unwrap(),
                cacheable_pct: 10.0,
                cache_pct: 5.0,
                ..again.kairos.clone()
            },
            ..again.clone()
        };
        let r = strata_bench::run(&cached, endpoints.clone()).await.unwrap();
        assert_eq!(r.errors, 0, "{policy}: {r}");
        let k = r.kairos.as_ref().unwrap();
        let s = k.cache_stats.expect("cache counters with a cache");
        assert_eq!((k.cacheable_keys, k.cache_capacity), (30, 15));
        assert!(s.misses > 0, "{policy}: {r}");
        assert!(s.stale_hits <= r.txn.as_ref().unwrap().aborted_attempts, "{policy}: {r}");
        assert!(r.to_string().contains("hit rate"), "{r}");
        hits_by_policy.push((policy, s.hits));
    }
    assert!(hits_by_policy[0].1 > 0, "a 10 s lease serves hits: {hits_by_policy:?}");
    for n in nodes {
        n.shutdown().await;
    }
}
