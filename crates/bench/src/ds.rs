//! `--workload ts|msq|hml`: the Kite paper's data-structure benchmark (§8.3, spec B5) through
//! [`strata_ds::run_workload`]. Every session runs push-then-pop pairs on structures picked at
//! random until the window ends (warmup pairs are run and not counted); the report gives
//! pairs/s, requests/s (the report's ops) and the share of synchronizing requests.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_ds::{run_workload, Budget, Ctx, DsKind, Layout, Stats, Workload};

use crate::args::{BenchArgs, WorkloadKind};
use crate::report::{BenchReport, DsReport, Latencies};
use crate::target::BenchSession;
use crate::{session_seed, unix_ms_at, BenchError, MAX_ERROR_SAMPLES};

pub(crate) async fn run(
    args: &BenchArgs,
    sessions: Vec<BenchSession>,
    endpoints: Vec<SocketAddr>,
) -> Result<BenchReport, BenchError> {
    let kind = match args.workload.kind {
        WorkloadKind::Ts => DsKind::Stack,
        WorkloadKind::Msq => DsKind::Queue,
        WorkloadKind::Hml => DsKind::List,
        WorkloadKind::Kv | WorkloadKind::Txn | WorkloadKind::Kairos => {
            unreachable!("kv, txn and kairos run elsewhere")
        }
    };
    let layout = if args.workload.fields == 32 { Layout::THIRTY_TWO } else { Layout::FOUR };
    // One root per kind and layout, so objects of another shape from an earlier run never meet.
    let root = format!("bench-{}-{}", kind.short(), args.workload.fields);
    let w = Arc::new(
        Workload::new(kind, &root, args.workload.structures, layout)
            .map_err(|e| BenchError::InvalidArgs(e.to_string()))?,
    );
    let started = Instant::now();
    let measure_start = started + Duration::from_secs_f64(args.run.warmup);
    let end = measure_start + Duration::from_secs_f64(args.run.duration);
    let mut tasks = Vec::new();
    for (i, s) in sessions.into_iter().enumerate() {
        let mut s = s
            .into_strata()
            .ok_or_else(|| BenchError::InvalidArgs("--workload needs --target strata".into()))?;
        let (w, root, seed) = (w.clone(), root.clone(), session_seed(args.run.seed, i));
        tasks.push(tokio::spawn(async move {
            let mut cx = Ctx::new(&mut s, &root).await?;
            run_workload(&w, &mut s, &mut cx, seed ^ 0xA5A5, &Budget::until(measure_start)).await?;
            let r = run_workload(&w, &mut s, &mut cx, seed, &Budget::until(end)).await?;
            Ok::<_, strata_ds::DsError>((r, Instant::now()))
        }));
    }
    let (mut pairs, mut stats, mut last) = (0u64, Stats::default(), measure_start);
    let (mut errors, mut error_samples) = (0u64, Vec::<String>::new());
    for t in tasks {
        let e = match t.await {
            Ok(Ok((r, done))) => {
                pairs += r.pairs;
                stats.add(&r.stats);
                last = last.max(done);
                continue;
            }
            Ok(Err(e)) => e.to_string(),
            Err(e) => format!("session task failed: {e}"),
        };
        errors += 1;
        if error_samples.len() < MAX_ERROR_SAMPLES && !error_samples.contains(&e) {
            error_samples.push(e);
        }
    }
    // Pairs are checked against the deadline between pairs: the window ends with the last one.
    let duration_s = (last - measure_start).as_secs_f64().max(args.run.duration);
    let requests = stats.requests();
    let per_s = |n: u64| if duration_s > 0.0 { n as f64 / duration_s } else { 0.0 };
    Ok(BenchReport {
        label: args.output.label.clone(),
        target: args.conn.target,
        endpoints,
        args: args.clone(),
        duration_s,
        ops: requests,
        reads: stats.relaxed_reads + stats.acquires,
        writes: stats.relaxed_writes + stats.releases + stats.cas,
        read_misses: 0,
        errors,
        error_samples,
        throughput_ops_s: per_s(requests),
        latency_us: Latencies::default(),
        mix: Default::default(),
        class_latency_us: Default::default(),
        ycsb: None,
        timeline_files: Vec::new(),
        ds: Some(DsReport {
            kind: kind.short().to_string(),
            fields: args.workload.fields,
            structures: args.workload.structures,
            pairs,
            pairs_s: per_s(pairs),
            structure_ops: 2 * pairs,
            requests,
            relaxed_reads: stats.relaxed_reads,
            relaxed_writes: stats.relaxed_writes,
            acquires: stats.acquires,
            releases: stats.releases,
            cas: stats.cas,
            cas_local_fail: stats.cas_local_fail,
            cas_quorum_fail: stats.cas_quorum_fail,
            helps: stats.helps,
            sync_share: stats.sync_share(),
            requests_per_pair: if pairs > 0 { requests as f64 / pairs as f64 } else { 0.0 },
        }),
        read_durability: None,
        lease: None,
        txn: None,
        kairos: None,
        preloaded_keys: 0,
        preload_s: 0.0,
        started_at_unix_ms: unix_ms_at(measure_start),
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
    })
}
