//! `--lease-renewals` / `--lease-creations`: the rate of RIFL's lease service (rifl.md §8.3 Q4).
//!
//! Each of `--clients` connections (round-robin over the endpoints) carries `--sessions`
//! loops. With `--lease-renewals` every loop first creates a lease (`RenewLease { 0 }`, before
//! the warmup, not measured) and then renews its own id in a closed loop with `--pipeline`
//! renewals in flight: an existing live id is renewed in memory at the `__leases` leader, and
//! any other node forwards the request to it over its peer links. With `--lease-creations`
//! every request creates a new lease: one log entry, fsynced at a majority (the durable path).
//!
//! The requests go over the bench's own small client (a frame encoder, a writer task and the
//! reply matcher below) because `strata-client` keeps its connections to itself. A request the
//! node answers `LogRejected(NotLeader | Unavailable)` (no service leader yet, a forward that
//! was not answered) is counted as `rejected` and sent again after [`RETRY`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use strata_client::{Client, ClientOptions, ClusterId, ShardRole};
use strata_wire::client::{ClientRequest, ClientResponse, LogFailure, Request, Response};
use strata_wire::{decode_frame, decode_message, encode_frame, Limits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::args::BenchArgs;
use crate::report::{BenchReport, Latencies, LatencySummary};
use crate::target::CONNECT_TIMEOUT;
use crate::{
    new_histogram, unix_ms_at, BenchError, MAX_ERROR_SAMPLES, MAX_LATENCY_NS, REQUEST_TIMEOUT,
};

/// The system table the lease service runs on.
const LEASE_TABLE: &str = "__leases";
/// A rejected request is sent again after this long.
const RETRY: Duration = Duration::from_millis(10);
/// How long the loops may take to get their first leases (the service's leader may still be
/// elected right after the cluster starts).
const CREATE_FOR: Duration = Duration::from_secs(15);

/// What a lease run did (the report's `lease`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LeaseReport {
    /// `renewals` or `creations`.
    pub kind: String,
    /// Leases the loops created before measuring (one per loop; 0 with creations).
    pub leases: u64,
    /// Answers `NotLeader` / `Unavailable` (whole run), each followed by a retry.
    pub rejected: u64,
    /// Renewals answered with another id than the one renewed (the lease had expired).
    pub new_ids: u64,
    /// The endpoint whose node led `__leases` when the run ended (`None`: not among them, or
    /// a status could not be read); requests sent elsewhere were forwarded to it.
    pub service_leader: Option<SocketAddr>,
    /// Connections whose endpoint is not the service leader (their requests are forwarded).
    pub forwarded_clients: usize,
}

/// One connection: frames are encoded into `out` and handed to a writer task; replies are
/// decoded from `buf` as they arrive.
struct LeaseConn {
    rd: strata_tls::BoxRead,
    buf: BytesMut,
    out: BytesMut,
    tx: mpsc::UnboundedSender<BytesMut>,
    cluster: ClusterId,
    next_corr: u64,
}

impl LeaseConn {
    /// A raw connection (with TLS if `strata` has it), so that the benchmark sends exactly
    /// the renewals it counts.
    async fn connect(addr: SocketAddr, strata: &ClientOptions) -> Result<LeaseConn, String> {
        let cluster = strata.cluster;
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
            .await
            .map_err(|_| format!("no answer within {CONNECT_TIMEOUT:?}"))?
            .map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let (rd, mut wr) = match &strata.tls {
            None => strata_tls::split_tcp(stream),
            Some(tls) => {
                let s = tokio::time::timeout(CONNECT_TIMEOUT, tls.connect(stream))
                    .await
                    .map_err(|_| format!("no TLS handshake within {CONNECT_TIMEOUT:?}"))?
                    .map_err(|e| format!("TLS: {e}"))?;
                strata_tls::split(s)
            }
        };
        let (tx, mut rx) = mpsc::unbounded_channel::<BytesMut>();
        tokio::spawn(async move {
            while let Some(mut batch) = rx.recv().await {
                while let Ok(more) = rx.try_recv() {
                    batch.extend_from_slice(&more);
                }
                if wr.write_all(&batch).await.is_err() || wr.flush().await.is_err() {
                    return;
                }
            }
        });
        let buf = BytesMut::with_capacity(16 << 10);
        Ok(LeaseConn { rd, buf, out: BytesMut::with_capacity(4 << 10), tx, cluster, next_corr: 1 })
    }

    /// Queues `RenewLease { lease_id }`; returns its correlation number.
    fn send(&mut self, lease_id: u64) -> u64 {
        let corr = self.next_corr;
        self.next_corr += 1;
        encode_frame(
            &mut self.out,
            self.cluster,
            &ClientRequest::new(corr, Request::RenewLease { lease_id }),
        );
        corr
    }

    fn flush(&mut self) -> Result<(), String> {
        if self.out.is_empty() {
            return Ok(());
        }
        self.tx.send(self.out.split()).map_err(|_| "connection lost (writer)".to_string())
    }

    /// The next reply. Cancel-safe: bytes read stay in `buf`.
    async fn next(&mut self) -> Result<ClientResponse, String> {
        loop {
            match decode_frame(&mut self.buf, self.cluster, Limits::default().max_frame_bytes) {
                Ok(Some(payload)) => {
                    return decode_message(payload).map_err(|e| format!("undecodable reply: {e}"))
                }
                Ok(None) => {}
                Err(e) => return Err(format!("bad reply frame: {e}")),
            }
            match self.rd.read_buf(&mut self.buf).await {
                Ok(0) => return Err("connection closed by the node".to_string()),
                Ok(_) => {}
                Err(e) => return Err(format!("connection lost: {e}")),
            }
        }
    }

    /// Creates one lease per loop, retrying rejected creations until [`CREATE_FOR`] passes.
    async fn create_leases(&mut self, loops: usize) -> Result<(Vec<u64>, u64), String> {
        let (mut ids, mut rejected) = (vec![0u64; loops], 0);
        let deadline = Instant::now() + CREATE_FOR;
        loop {
            let mut waiting: HashMap<u64, usize> =
                (0..loops).filter(|&l| ids[l] == 0).map(|l| (self.send(0), l)).collect();
            if waiting.is_empty() {
                return Ok((ids, rejected));
            }
            self.flush()?;
            while !waiting.is_empty() {
                let r = tokio::time::timeout(REQUEST_TIMEOUT, self.next())
                    .await
                    .map_err(|_| "no reply".to_string())??;
                let Some(l) = waiting.remove(&r.corr) else { continue };
                match r.body {
                    Response::Lease(s) if s.alive() => ids[l] = s.lease_id,
                    Response::LogRejected(
                        LogFailure::NotLeader { .. } | LogFailure::Unavailable,
                    ) => rejected += 1,
                    other => return Err(format!("creating a lease: unexpected answer {other:?}")),
                }
            }
            if ids.contains(&0) {
                if Instant::now() >= deadline {
                    return Err(format!(
                        "no lease granted within {CREATE_FOR:?} (is the __leases leader up?)"
                    ));
                }
                tokio::time::sleep(RETRY * 10).await;
            }
        }
    }
}

/// What one connection measured.
struct ConnStats {
    hist: Histogram<u64>,
    rejected: u64,
    new_ids: u64,
    errors: u64,
    error_samples: Vec<String>,
}

/// The window, shared by every connection.
struct Window {
    measure_start: Instant,
    end: Instant,
    completed: AtomicU64,
}

/// One connection's closed loops until the window ends.
async fn drive(
    mut c: LeaseConn,
    mut ids: Vec<u64>,
    creations: bool,
    pipeline: usize,
    w: Arc<Window>,
) -> ConnStats {
    let mut st = ConnStats {
        hist: new_histogram(),
        rejected: 0,
        new_ids: 0,
        errors: 0,
        error_samples: Vec::new(),
    };
    let loops = ids.len();
    let mut in_flight = vec![0usize; loops];
    let mut hold: Vec<Option<Instant>> = vec![None; loops];
    // corr -> (loop, submitted)
    let mut pending: HashMap<u64, (usize, Instant)> = HashMap::with_capacity(loops * pipeline);
    let fail = |st: &mut ConnStats, e: String, n: u64| {
        st.errors += n;
        if st.error_samples.len() < MAX_ERROR_SAMPLES && !st.error_samples.contains(&e) {
            st.error_samples.push(e);
        }
    };
    loop {
        let now = Instant::now();
        if now < w.end {
            for l in 0..loops {
                if hold[l].is_some_and(|t| t > now) {
                    continue;
                }
                hold[l] = None;
                while in_flight[l] < pipeline {
                    let corr = c.send(if creations { 0 } else { ids[l] });
                    pending.insert(corr, (l, Instant::now()));
                    in_flight[l] += 1;
                }
            }
            if let Err(e) = c.flush() {
                fail(&mut st, e, pending.len() as u64);
                break;
            }
        }
        if pending.is_empty() && now >= w.end {
            break;
        }
        let retry_at = hold.iter().flatten().min().copied().filter(|_| now < w.end);
        let r = tokio::select! {
            r = tokio::time::timeout(REQUEST_TIMEOUT, c.next()) => r,
            _ = tokio::time::sleep_until(retry_at.unwrap_or(now).into()), if retry_at.is_some() => continue,
        };
        let r = match r {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                fail(&mut st, e, pending.len() as u64);
                break;
            }
            Err(_) => {
                fail(&mut st, format!("no reply within {REQUEST_TIMEOUT:?}"), pending.len() as u64);
                break;
            }
        };
        let done = Instant::now();
        let Some((l, submitted)) = pending.remove(&r.corr) else { continue };
        in_flight[l] -= 1;
        match r.body {
            Response::Lease(s) if s.alive() => {
                w.completed.fetch_add(1, Ordering::Relaxed);
                if !creations && s.lease_id != ids[l] {
                    st.new_ids += 1;
                    ids[l] = s.lease_id;
                }
                if submitted >= w.measure_start && done <= w.end {
                    let ns = (done - submitted).as_nanos().min(MAX_LATENCY_NS as u128) as u64;
                    st.hist.saturating_record(ns.max(1));
                }
            }
            Response::LogRejected(LogFailure::NotLeader { .. } | LogFailure::Unavailable) => {
                st.rejected += 1;
                hold[l] = Some(done + RETRY);
            }
            other => {
                fail(&mut st, format!("unexpected answer {other:?}"), 1 + pending.len() as u64);
                break;
            }
        }
    }
    st
}

/// The endpoint whose node leads `__leases` (asked directly, not through relays).
async fn service_leader(endpoints: &[SocketAddr], strata: &ClientOptions) -> Option<SocketAddr> {
    let opts = ClientOptions {
        connect_timeout: CONNECT_TIMEOUT,
        request_timeout: Some(CONNECT_TIMEOUT),
        ..strata.clone()
    };
    for &addr in endpoints {
        let Ok(status) =
            async { Client::connect_node(addr, opts.clone()).await?.status().await }.await
        else {
            continue;
        };
        if status.shards.iter().any(|s| s.table == LEASE_TABLE && s.role == ShardRole::Leader) {
            return Some(addr);
        }
    }
    None
}

/// Runs a lease benchmark. `connect_to` are the addresses to dial (the endpoints, or their
/// `--client-delay-ms` relays), in endpoint order.
pub(crate) async fn run(
    args: &BenchArgs,
    endpoints: Vec<SocketAddr>,
    connect_to: &[SocketAddr],
    strata: &ClientOptions,
) -> Result<BenchReport, BenchError> {
    let creations = args.rifl.lease_creations;
    let mut prepared = Vec::with_capacity(args.conn.clients);
    for i in 0..args.conn.clients {
        let (home, addr) = (i % endpoints.len(), endpoints[i % endpoints.len()]);
        let connect_err = |message| BenchError::Connect { target: args.conn.target, addr, message };
        let mut c = LeaseConn::connect(connect_to[home], strata).await.map_err(connect_err)?;
        let sessions = args.conn.sessions;
        prepared.push(tokio::spawn(async move {
            let (ids, rejected) =
                if creations { (vec![0; sessions], 0) } else { c.create_leases(sessions).await? };
            Ok::<_, String>((c, ids, rejected))
        }));
    }
    let mut conns = Vec::with_capacity(args.conn.clients);
    let mut rejected = 0;
    for (i, t) in prepared.into_iter().enumerate() {
        let addr = endpoints[i % endpoints.len()];
        let (c, ids, r) =
            t.await.map_err(|e| e.to_string()).and_then(|r| r).map_err(|message| {
                BenchError::Connect { target: args.conn.target, addr, message }
            })?;
        rejected += r;
        conns.push((c, ids));
    }
    let leases = if creations { 0 } else { args.total_sessions() as u64 };

    let started = Instant::now();
    let measure_start = started + Duration::from_secs_f64(args.run.warmup);
    let w = Arc::new(Window {
        measure_start,
        end: measure_start + Duration::from_secs_f64(args.run.duration),
        completed: AtomicU64::new(0),
    });
    let progress = (!args.output.quiet).then(|| {
        let w = w.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            let mut last = 0;
            loop {
                tick.tick().await;
                let n = w.completed.load(Ordering::Relaxed);
                let phase = if Instant::now() <= w.measure_start + Duration::from_secs(1) {
                    "warmup"
                } else {
                    "measuring"
                };
                eprintln!(
                    "[{:>5.1}s] {phase:<9} {:>10} leases/s",
                    started.elapsed().as_secs_f64(),
                    n - last
                );
                last = n;
            }
        })
    });
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|(c, ids)| tokio::spawn(drive(c, ids, creations, args.conn.pipeline, w.clone())))
        .collect();
    let mut all = new_histogram();
    let (mut errors, mut error_samples, mut new_ids) = (0, Vec::<String>::new(), 0);
    for t in tasks {
        let st = match t.await {
            Ok(st) => st,
            Err(e) => ConnStats {
                hist: new_histogram(),
                rejected: 0,
                new_ids: 0,
                errors: 1,
                error_samples: vec![format!("connection task failed: {e}")],
            },
        };
        all.add(&st.hist).expect("same bounds");
        (errors, rejected, new_ids) =
            (errors + st.errors, rejected + st.rejected, new_ids + st.new_ids);
        for e in st.error_samples {
            if error_samples.len() < MAX_ERROR_SAMPLES && !error_samples.contains(&e) {
                error_samples.push(e);
            }
        }
    }
    if let Some(p) = progress {
        p.abort();
    }
    let leader = service_leader(&endpoints, strata).await;
    let forwarded_clients =
        (0..args.conn.clients).filter(|i| Some(endpoints[i % endpoints.len()]) != leader).count();

    let duration_s = args.run.duration;
    let ops = all.len();
    let summary = LatencySummary::from_histogram(&all);
    Ok(BenchReport {
        label: args.output.label.clone(),
        target: args.conn.target,
        endpoints,
        args: args.clone(),
        duration_s,
        ops,
        reads: 0,
        writes: ops,
        read_misses: 0,
        errors,
        error_samples,
        throughput_ops_s: ops as f64 / duration_s,
        latency_us: Latencies {
            all: summary.clone(),
            read: LatencySummary::default(),
            write: summary,
        },
        mix: Default::default(),
        class_latency_us: Default::default(),
        ycsb: None,
        timeline_files: Vec::new(),
        ds: None,
        read_durability: None,
        txn: None,
        kairos: None,
        lease: Some(LeaseReport {
            kind: if creations { "creations" } else { "renewals" }.to_string(),
            leases,
            rejected,
            new_ids,
            service_leader: leader,
            forwarded_clients,
        }),
        preloaded_keys: 0,
        preload_s: 0.0,
        started_at_unix_ms: unix_ms_at(measure_start),
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
    })
}
