//! The fault-injection harness of orca.md §7, seeded: a random sequence of cluster states over
//! 5 nodes. Each state crashes or restarts nodes (at most a minority down at once, sometimes
//! all crash and restart), marks one node as lagging (0.2 - 2 s of extra link delay, or a
//! stalled disk), sometimes partitions another node away or cuts one link one way, inserts
//! items through the leader, reads them at the other nodes (several clients at once, some with
//! session tokens), then at the lagging node. The network loses, duplicates and reorders
//! messages as drawn from the seed; clocks are skewed and drift. Then everything heals (§7.14
//! liveness), the final leader's log is made fully durable and becomes `H`, and every checker
//! of §7 runs.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use bytes::Bytes;
use strata_core::Prng;
use strata_log::{Expect, LogEvent, LogIndex, LogReply, PlantedBug, WriteOp};

use super::check::{check_all, MONOTONIC_READS};
use super::cluster::OrcaCluster;
use super::history::{Anomaly, OrcaHistory};
use super::{canary_name, Mode};
use crate::check::Violation;
use crate::net::NetKnobs;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HarnessOptions {
    /// Cluster states per run.
    pub states: usize,
    /// Plant this bug of `strata-log` in every replica.
    pub canary: Option<PlantedBug>,
}

impl Default for HarnessOptions {
    fn default() -> HarnessOptions {
        HarnessOptions { states: 12, canary: None }
    }
}

const N: usize = 5;
const KEYS: u64 = 4;
/// Counter keys `c0`, `c1`, changed only by adds (rifl.md §2.1 `increment`).
const COUNTERS: u64 = 2;
const CLIENTS: u64 = 4;

/// A write of the workload: mostly puts of fresh values to `k*`, some adds (negative ones too,
/// which can be refused as out of range) to `c*`, and conditional writes to `k*` expecting a
/// recent value or absence. Evaluated when applied; the checkers replay them on `H`
/// (`OrcaHistory::evaluations`) for the values reads must see and the results `Ok`s carry.
fn draw_write(ops: &mut Prng, item: u64) -> (String, WriteOp) {
    let put = || Bytes::from(format!("v{item}"));
    let key = format!("k{}", item % KEYS);
    match ops.range(0, 10) {
        0..=5 => (key, WriteOp::Put(put())),
        6 | 7 => (format!("c{}", item % COUNTERS), WriteOp::Add(ops.range(0, 8) as i64 - 2)),
        _ => {
            let expect = if ops.chance(0.3) {
                Expect::Absent
            } else {
                Expect::Value(Bytes::from(format!("v{}", item.saturating_sub(ops.range(1, 8)))))
            };
            let put = ops.chance(0.8).then(put);
            (key, WriteOp::Cond { expect, put })
        }
    }
}

/// One run's result.
#[derive(Debug)]
pub struct OrcaReport {
    pub mode: Mode,
    pub seed: u64,
    pub opts: HarnessOptions,
    pub net: NetKnobs,
    pub history: OrcaHistory,
    /// Earliest first.
    pub violations: Vec<Violation>,
    /// Read errors by kind (retried by the clients).
    pub read_errors: BTreeMap<String, usize>,
}

/// Runs one seeded §7 harness sequence in `mode` and checks it.
pub fn run_orca(mode: Mode, seed: u64, opts: &HarnessOptions) -> OrcaReport {
    let mut cfg = mode.config();
    cfg.planted_bug = opts.canary;
    let mut rng = Prng::new(seed ^ 0x0dca_5eed);
    // The operations' own draws, apart from the fault schedule's (so adding operation kinds
    // kept every seed's schedule).
    let mut ops = Prng::new(seed ^ 0x0b5_c0de);
    let net = draw_net(&mut rng);
    let mut c = OrcaCluster::with_net(N, cfg, net.clone(), rng.fork());
    c.skew_clocks(&mut rng, Duration::from_secs(3), 200);
    if rng.chance(0.5) {
        // A loaded runtime: timers fire late while inputs keep arriving on time.
        c.tick_lateness = Duration::from_millis(rng.range(1, 30));
    }
    // Lost write replies make clients retry RPCs that already executed (rifl.md §6).
    c.write_reply_loss = 0.05 + rng.unit() * 0.25;
    // The latest token of every write, retried until answered (rifl.md §7 inv. 3).
    let mut sent: Vec<u64> = Vec::new();
    let mut down: Vec<usize> = Vec::new();
    let mut tokens = [None::<LogIndex>; CLIENTS as usize + 1];
    let mut item = 0u32;
    c.try_elect(10_000);
    for _ in 0..opts.states {
        c.heal();
        for i in 0..N {
            c.unstall_disk(i);
        }
        if rng.chance(0.1) {
            // Every node crashes (losing what it had not fsynced) and restarts.
            for i in 0..N {
                c.crash(i);
            }
            c.run_ms(5);
            for i in 0..N {
                c.restart(i);
            }
            down.clear();
        } else {
            for i in std::mem::take(&mut down) {
                c.restart(i);
            }
            if rng.chance(0.5) {
                let i = rng.range(0, N as u64) as usize;
                c.crash(i);
                down.push(i);
                let j = rng.range(0, N as u64) as usize;
                if rng.chance(0.3) && j != i {
                    c.crash(j);
                    down.push(j);
                }
            }
        }
        let up: Vec<usize> = (0..N).filter(|i| !down.contains(i)).collect();
        let lagging = up[rng.range(0, up.len() as u64) as usize];
        if rng.chance(0.5) {
            c.lag(lagging, Duration::from_millis(rng.range(200, 2001)));
        } else {
            c.stall_disk(lagging);
        }
        if down.len() < 2 && rng.chance(0.15) {
            // A partition: one more node (maybe the leader) is cut off for this state.
            let p = up[rng.range(0, up.len() as u64) as usize];
            if p != lagging {
                c.isolate(p);
            }
        }
        if rng.chance(0.1) {
            // A one-way partition (§6): one directed link between two nodes drops everything.
            let (a, b) = (rng.range(0, N as u64) as usize, rng.range(0, N as u64) as usize);
            if a != b {
                c.cut(a, b);
            }
        }
        c.run_ms(rng.range(0, 300));
        let Some(l) = (0..30).find_map(|_| {
            c.run_ms(100);
            c.leader()
        }) else {
            continue;
        };
        let mut writes = Vec::new();
        for _ in 0..rng.range(1, 4) {
            item += 1;
            let client = rng.range(1, CLIENTS + 1);
            let (key, op) = draw_write(&mut ops, u64::from(item));
            let t = c.write_as(client, l, &key, op, rng.chance(0.2));
            writes.push((client, t));
        }
        c.run_ms(rng.range(1, 30));
        for (client, mut t) in writes {
            // RIFL's client: a write without an answer (lost reply, timeout, not the leader, the
            // leader not ready, or still waiting) is sent again with the same RPC id.
            for _ in 0..3 {
                let rpc = c.write_rpc(t).expect("a write");
                if !c.unanswered(rpc) {
                    break;
                }
                match c.leader() {
                    Some(l) => {
                        t = c.retry_write(t, l);
                        c.run_ms(rng.range(1, 30));
                    }
                    None => c.run_ms(50),
                }
            }
            sent.push(t);
            if let Some(Ok(ack)) = c.write_result(t) {
                let tok = &mut tokens[client as usize];
                *tok = Some(tok.map_or(ack.index, |m| m.max(ack.index)));
            }
        }
        // Reads at the non-lagging nodes, concurrently, by different clients.
        let mut pending = Vec::new();
        for &i in up.iter().filter(|&&i| i != lagging) {
            let client = rng.range(1, CLIENTS + 1);
            let token = if rng.chance(0.3) { tokens[client as usize] } else { None };
            pending.push(c.read_as(client, i, &format!("k{}", rng.range(0, KEYS)), token));
        }
        for t in pending {
            c.wait_reply(t);
        }
        // Then at the lagging node.
        for k in 0..KEYS {
            let t = c.read_as(rng.range(1, CLIENTS + 1), lagging, &format!("k{k}"), None);
            c.wait_reply(t);
        }
        for k in 0..COUNTERS {
            let up = up.iter().filter(|&&i| i != lagging).copied().collect::<Vec<_>>();
            let at = up[ops.range(0, up.len() as u64) as usize];
            let t = c.read_as(ops.range(1, CLIENTS + 1), at, &format!("c{k}"), None);
            c.wait_reply(t);
        }
    }
    finish(&mut c, &mut down, &sent);
    let violations = check_all(&c.history);
    let mut read_errors = BTreeMap::new();
    for (_, r) in c.replies.values() {
        if let LogReply::Read { result: Err(e), .. } = r {
            *read_errors.entry(format!("{e:?}")).or_insert(0) += 1;
        }
    }
    OrcaReport { mode, seed, opts: *opts, net, history: c.history, violations, read_errors }
}

fn draw_net(rng: &mut Prng) -> NetKnobs {
    let delay_min_us = rng.range(200, 600);
    let faulty = rng.chance(0.7);
    NetKnobs {
        delay_min_us,
        delay_max_us: delay_min_us + rng.range(0, 1500),
        loss: if faulty { rng.unit() * 0.03 } else { 0.0 },
        dup: if faulty { rng.unit() * 0.03 } else { 0.0 },
        reorder: if faulty { rng.unit() * 0.2 } else { 0.0 },
        reorder_extra_max_us: 2000,
    }
}

/// §7.14 and the end of the run: heal everything, require a leader, a write and reads to
/// complete and the active set to fill up again; force full durability with an
/// immediate-durability write; take `H` from the final leader.
fn finish(c: &mut OrcaCluster, down: &mut Vec<usize>, sent: &[u64]) {
    c.heal();
    c.hc.calm();
    c.write_reply_loss = 0.0;
    for i in 0..N {
        c.unstall_disk(i);
    }
    for i in down.drain(..) {
        c.restart(i);
    }
    let healed_at = c.now;
    let fail = |c: &mut OrcaCluster, what: String| {
        let at = c.now;
        c.history.liveness.push(Anomaly { at, node: None, what });
    };
    c.run_ms(1000);
    // Election time after healing: ET is at most 2 ET_min, plus a few split votes.
    let Some(mut l) = c.try_elect(8_000) else {
        fail(c, format!("no leader within 8 s of healing at {healed_at:?}"));
        c.finish(None);
        return;
    };
    let t = c.write_as(99, l, "final", WriteOp::Put(Bytes::from_static(b"x")), true);
    c.wait_reply(t);
    match c.write_result(t) {
        Some(Ok(_)) => {}
        other => fail(c, format!("final immediate write at the leader: {other:?}")),
    }
    let t = c.read_as(99, l, "final", None);
    c.wait_reply(t);
    match c.read_result(t) {
        Some(Ok(v)) if v.value.as_deref() == Some(b"x") => {}
        other => fail(c, format!("final read at the leader: {other:?}")),
    }
    // rifl.md §7 inv. 3: once the cluster is healthy every write ends with `Ok`, retried with
    // its RPC id (replies may still be lost): the first execution's record answers, or the
    // write executes now if its entry was lost.
    for &t in sent {
        let rpc = c.write_rpc(t).expect("a write");
        let mut t = t;
        for _ in 0..20 {
            if !c.unanswered(rpc) {
                break;
            }
            t = c.retry_write(t, c.leader().unwrap_or(l));
            for _ in 0..100 {
                if c.write_result(t).is_some() {
                    break;
                }
                c.run_ms(5); // a lost reply is never waited for long
            }
        }
        match c.write_answer(rpc) {
            Some(Ok(_)) => {}
            None => fail(
                c,
                format!("write {rpc} not answered after healing: last {:?}", c.write_result(t)),
            ),
            Some(other) => fail(c, format!("write {rpc} ended with {other:?}, not Ok")),
        }
    }
    // A recovered, connected follower is re-added within 5 rt.
    c.run_for(c.cfg.removal_timeout * 5);
    l = c.leader().unwrap_or(l);
    if c.history.promises.active_set {
        let set = c.node(l).active_set();
        if set.len() < N - 1 {
            fail(c, format!("active set {set:?} not refilled within 5 rt of healing"));
        }
        // Clients retry `NotInActiveSet` after 10 ms (§2.1): a member whose lease lapsed
        // between two heartbeats serves again at the next grant.
        for m in set.into_iter().filter(|m| m.0 as usize != l) {
            let mut last = None;
            for _ in 0..50 {
                let t = c.read_as(99, m.0 as usize, "final", None);
                c.wait_reply(t);
                last = c.read_result(t);
                if matches!(last, Some(Ok(_))) {
                    break;
                }
                c.run_ms(10);
            }
            if !matches!(last, Some(Ok(_))) {
                fail(
                    c,
                    format!("reads at active-set member {m} kept failing for 500 ms: {last:?}"),
                );
            }
        }
    }
    // Full durability of everything the final leader holds, then H.
    let t = c.write_as(99, l, "final", WriteOp::Put(Bytes::from_static(b"y")), true);
    c.wait_reply(t);
    c.run_ms(500);
    let l = c.leader().unwrap_or(l);
    c.finish(Some(l));
}

impl OrcaReport {
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }

    /// Violations of invariant 1 (cross-client monotonic reads).
    pub fn monotonic_violations(&self) -> usize {
        self.violations.iter().filter(|v| v.checker == MONOTONIC_READS).count()
    }

    pub fn violations_by_checker(&self) -> BTreeMap<&'static str, usize> {
        let mut by = BTreeMap::new();
        for v in &self.violations {
            *by.entry(v.checker).or_insert(0) += 1;
        }
        by
    }

    pub fn repro(&self) -> String {
        let mut cmd = format!(
            "cargo run -p strata-sim -- --engine log --mode {} --seed {}",
            self.mode, self.seed
        );
        if self.opts.states != HarnessOptions::default().states {
            cmd += &format!(" --states {}", self.opts.states);
        }
        if let Some(b) = self.opts.canary {
            cmd += &format!(" --log-canary {}", canary_name(b));
        }
        cmd
    }

    fn count(&self, f: impl Fn(&LogEvent) -> bool) -> usize {
        self.history.events.iter().filter(|s| f(&s.event)).count()
    }

    pub fn one_line(&self) -> String {
        let verdict = if self.passed() {
            "ok".to_string()
        } else {
            format!(
                "FAIL ({} violations, {} of inv. 1)",
                self.violations.len(),
                self.monotonic_violations()
            )
        };
        format!(
            "{} seed {:>6}: {verdict:<32} {} reads, {} serves, {} leaders, {} truncations",
            self.mode,
            self.seed,
            self.history.reads.len(),
            self.history.serves.len(),
            self.count(|e| matches!(e, LogEvent::BecameLeader { .. })),
            self.history.truncations.len()
        )
    }

    pub fn render(&self, max_violations: usize) -> String {
        let h = &self.history;
        let mut s = format!(
            "log engine, mode {}, seed {}, {} states\n",
            self.mode, self.seed, self.opts.states
        );
        if let Some(b) = self.opts.canary {
            let _ = writeln!(s, "  canary      {b:?}");
        }
        let n = &self.net;
        let _ = writeln!(
            s,
            "  network     delay {}-{} µs, loss {:.3}, dup {:.3}, reorder {:.2}",
            n.delay_min_us, n.delay_max_us, n.loss, n.dup, n.reorder
        );
        let _ = writeln!(
            s,
            "  reads       {} answered ({} served, {} forwarded-or-local), errors {:?}",
            h.reads.len(),
            h.serves.len(),
            h.reads.iter().filter(|r| r.value.served_by != r.asked).count(),
            self.read_errors
        );
        let _ = writeln!(
            s,
            "  protocol    {} leaders, {} durability rounds, {} revokes, {} removals, {} additions, {} truncations, {} acked writes",
            self.count(|e| matches!(e, LogEvent::BecameLeader { .. })),
            self.count(|e| matches!(e, LogEvent::DurabilityRound { .. })),
            self.count(|e| matches!(e, LogEvent::AsRevoked { .. })),
            h.removals.len(),
            h.additions.len(),
            h.truncations.len(),
            self.count(|e| matches!(e, LogEvent::WriteAcked { .. }))
        );
        let _ = writeln!(s, "  H           {} entries from {:?}", h.h.len(), h.h_leader);
        if self.passed() {
            let _ = write!(s, "result: ok, no violations");
        } else {
            let by: Vec<String> =
                self.violations_by_checker().iter().map(|(c, n)| format!("{c} {n}")).collect();
            let _ = writeln!(s, "result: {} VIOLATIONS ({})", self.violations.len(), by.join(", "));
            for v in self.violations.iter().take(max_violations) {
                let _ = writeln!(s, "  {v}");
            }
            let _ = write!(s, "reproduce: {}", self.repro());
        }
        s
    }
}
