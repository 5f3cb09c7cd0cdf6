//! The fast/slow-path mechanism (Kite §5.1.4 - §5.1.6, §5.7.4, §5.7.5, §5.8): barriers of
//! releases and RMWs, delinquency bits, the machine epoch.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use strata_wire::peer::PeerMessage;
use strata_wire::{AcquireId, Carstamp, Instant, NodeId, SessionId};

use crate::api::{BarrierPath, DbitChange, RcEvent, SelfDelinquentChange, ValueRound};
use crate::node_set::NodeSet;
use crate::replica::RcReplica;
use crate::session::OpId;

/// `T_REL` in smoothed ack round trips (K-D1: 10-20 x RTT; see `RcReplica::release_timeout`).
pub const RELEASE_TIMEOUT_RTTS: u32 = 10;

/// One delinquency bit (Kite §3.1 `dbit[m]`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum DBit {
    #[default]
    Up,
    Down,
    /// The paper's state `T`: acquires of node `m` observed the bit; `owners` holds, per session
    /// of `m`, the newest such acquire (K-D4: bounded by sessions).
    Transient {
        owners: HashMap<SessionId, u64>,
    },
}

/// Progress of one barrier (Kite §5.1.6).
#[derive(Debug, Default)]
pub(crate) enum Barrier {
    #[default]
    Start,
    /// B2: waiting for every prior write to be acked by all nodes, until `deadline` (`T_REL`).
    Waiting { deadline: Instant },
    /// B4.a: waiting (no time-out) until every prior write is acked by a quorum.
    QuorumWait,
    /// B4.d: the DM-set is being published.
    SlowRelease { req: u64, dm: NodeSet },
    /// Returned. `report` is what the barrier covered, until the operation's first value-carrying
    /// message takes it (Kite §7 inv. 14, `RcEvent::BarrierPassed`).
    Done { report: Option<BarrierReport> },
}

impl Barrier {
    pub(crate) fn passed(&self) -> bool {
        matches!(self, Barrier::Done { .. })
    }
}

/// What a barrier resolved and how (Kite §5.1.6), kept for `RcEvent::BarrierPassed`.
#[derive(Debug)]
pub(crate) struct BarrierReport {
    prior: Vec<(Bytes, Carstamp)>,
    path: BarrierPath,
}

/// Whether the session's prior writes are acked by all nodes, and which nodes are missing.
struct Coverage {
    missing: NodeSet,
    quorum_everywhere: bool,
}

impl RcReplica {
    fn coverage(&self, sid: SessionId) -> Coverage {
        let mut missing = NodeSet::EMPTY;
        let mut quorum_everywhere = true;
        let need = self.remote_quorum() as u32;
        if let Some(s) = self.sessions.get(&sid.index) {
            for (key, &cs) in &s.unresolved {
                let acked = self.acked_for(key, cs);
                for p in &self.peers {
                    if !acked.contains(*p) {
                        missing.insert(*p);
                    }
                }
                quorum_everywhere &= acked.intersection(self.peer_set).len() >= need;
            }
        }
        Coverage { missing, quorum_everywhere }
    }

    /// B3 / B4.e: marks every prior write of the session resolved; the barrier has returned.
    /// The resolved set is copied out for the report: one allocation per barrier, on the sync
    /// path only (the session keeps its map's capacity for the relaxed writes to come). It is
    /// sorted, so that the report does not depend on the map's iteration order.
    fn pass(&mut self, sid: SessionId, path: BarrierPath) -> Barrier {
        let mut prior: Vec<(Bytes, Carstamp)> = match self.sessions.get_mut(&sid.index) {
            Some(s) => s.unresolved.drain().collect(),
            None => Vec::new(),
        };
        prior.sort_unstable();
        Barrier::Done { report: Some(BarrierReport { prior, path }) }
    }

    /// Kite §7 inv. 14: reports the barrier as the operation's first value-carrying message
    /// (`round`) is about to leave. Later value rounds of the operation (an RMW's own accepts in
    /// later slots) find the report taken and report nothing.
    pub(crate) fn report_barrier(
        &mut self,
        session: SessionId,
        key: &Bytes,
        round: ValueRound,
        b: &mut Barrier,
    ) {
        let Barrier::Done { report } = b else {
            unreachable!("a value round leaves only after its barrier (§5.4 L4, §5.6 M5)")
        };
        if let Some(BarrierReport { prior, path }) = report.take() {
            self.effects.event.push(RcEvent::BarrierPassed {
                session,
                key: key.clone(),
                round,
                prior,
                path,
            });
        }
    }

    /// Advances a barrier; true once it has returned (B3 or B4.f). B1 holds by construction:
    /// a release or RMW starts only when every earlier operation of its session has completed.
    pub(crate) fn step_barrier(
        &mut self,
        now: Instant,
        id: OpId,
        sid: SessionId,
        b: &mut Barrier,
    ) -> bool {
        loop {
            match *b {
                Barrier::Start => {
                    let c = self.coverage(sid);
                    if c.missing.is_empty() {
                        *b = self.barrier_fast(sid);
                    } else if self.suspected.is_superset(c.missing) {
                        // O3: nobody worth waiting for.
                        *b = Barrier::QuorumWait;
                    } else {
                        let deadline = now + self.release_timeout();
                        self.op_timers.push(deadline, id);
                        self.barrier_waiters.insert(id);
                        *b = Barrier::Waiting { deadline };
                        return false;
                    }
                }
                Barrier::Waiting { deadline } => {
                    if self.coverage(sid).missing.is_empty() {
                        *b = self.barrier_fast(sid);
                    } else if now >= deadline {
                        *b = Barrier::QuorumWait;
                    } else {
                        return false;
                    }
                }
                Barrier::QuorumWait => {
                    let c = self.coverage(sid);
                    if c.missing.is_empty() {
                        *b = self.barrier_fast(sid);
                        continue;
                    }
                    if !c.quorum_everywhere
                        && !self.planted(crate::PlantedBug::SlowReleaseBeforeQuorum)
                    {
                        self.barrier_waiters.insert(id);
                        return false; // [FIX K-F1]: the DM-set leaves only after a quorum holds every prior write
                    }
                    if self.planted(crate::PlantedBug::SkipSlowRelease) {
                        // CANARY: proceed after the time-out as if every write had been acked,
                        // without publishing the DM-set.
                        *b = self.pass(sid, BarrierPath::Fast);
                        continue;
                    }
                    // B4.b, B4.d, and B4.c: the local bits are set in the same atomic step as the
                    // broadcast, so before any other node can see the DM-set.
                    let dm = c.missing;
                    let req = self.start_round(now, id, |req| PeerMessage::SlowRelease {
                        req,
                        dm: dm.bits(),
                    });
                    self.learn_dm_set(self.cfg.node, req, dm);
                    *b = Barrier::SlowRelease { req, dm };
                }
                Barrier::SlowRelease { req, dm } => {
                    if self.round_replies(req) < self.remote_quorum() {
                        return false;
                    }
                    let acked = self.end_round(req).iter().map(|(n, _)| *n).collect();
                    *b = self.pass(sid, BarrierPath::Slow { req, dm, acked }); // B4.e
                    self.suspected = self.suspected.union(dm);
                    self.stats.barriers_slow += 1;
                }
                Barrier::Done { .. } => {
                    self.barrier_waiters.remove(&id);
                    return true;
                }
            }
        }
    }

    /// `T_REL` (Kite §3.4) for a barrier starting to wait now: `RELEASE_TIMEOUT_RTTS` smoothed ack
    /// round trips, within `[release_timeout, release_timeout_max]`.
    ///
    /// [DECISION] K-D1 sizes `T_REL` at 10-20 x the round trip; a fixed value cannot be both.
    /// Under load on a 2-core machine a relaxed write's acks take several ms (p50 latencies of
    /// 7-14 ms at 16 sessions x 16 pipelined requests), so the fixed 5 ms fired with every node
    /// healthy: healthy nodes landed in DM-sets and bumped their epochs, and every later key
    /// access took the slow path (node 0's machine epoch at 177 after one `bench-kite.sh`
    /// sweep, ~40,000 slow relaxed accesses per node). The estimate is the one the pending-write
    /// `T_RETX` uses (`ack_rtts`, Karn's rule); k = 10 is the low end of K-D1. The configured
    /// `release_timeout` stays the floor (and the value before any sample); `release_timeout_max`
    /// bounds what one slow peer's inflated acks can cost a release.
    ///
    /// Liveness only: safety never depends on `T_REL` (Kite §6, "Clocks"). A barrier that times
    /// out still waits for quorum acks (K-F1) and publishes its DM-set before it returns; a
    /// shorter `T_REL` only means more slow paths, a longer one longer stalls on a failed node.
    pub fn release_timeout(&self) -> Duration {
        self.ack_rtts(RELEASE_TIMEOUT_RTTS, self.cfg.release_timeout, self.cfg.release_timeout_max)
    }

    fn barrier_fast(&mut self, sid: SessionId) -> Barrier {
        self.stats.barriers_fast += 1;
        self.pass(sid, BarrierPath::Fast) // B3
    }

    /// Kite §7 inv. 14, local part (run by `check_invariants`): no release or RMW has let its
    /// value out before its barrier returned, and a session whose blocking operation passed its
    /// barrier has nothing unresolved — the barrier covered every prior write, and nothing joins
    /// `P` before the operation ends (the session is blocked, §5.1.8 rule 2).
    pub(crate) fn check_barriers(&self) {
        for op in self.ops.values() {
            let Some((barrier, value_out)) = op.kind.barrier_state() else { continue };
            assert!(
                !value_out || barrier.passed(),
                "{}'s release or RMW on {:?} let its value out before its barrier",
                op.sid,
                op.key
            );
            let unresolved = self.sessions.get(&op.session).map_or(0, |s| s.unresolved.len());
            assert!(
                !barrier.passed() || unresolved == 0,
                "{} passed its barrier with {unresolved} write(s) left unresolved",
                op.sid
            );
        }
    }

    /// Kite §7 inv. 15, local part: this node has no bit for itself (its own delinquency is
    /// `self_delinquent`, K-D3), and a `Transient` bit has an owner — only an acquire that
    /// observed the bit makes it transient (§5.1.4).
    pub(crate) fn check_dbits(&self) {
        assert!(
            !self.dbits.contains_key(&self.cfg.node),
            "{} keeps a delinquency bit for itself",
            self.cfg.node
        );
        for (m, bit) in &self.dbits {
            assert!(
                !matches!(bit, DBit::Transient { owners } if owners.is_empty()),
                "dbit[{m}] is transient with no owner"
            );
        }
    }

    /// Kite §5.1.4 `dcheck`: run when an acquire-type request of node `m` reads or updates a
    /// key here, after that read (K-F3).
    pub(crate) fn dcheck(&mut self, m: NodeId, acq: AcquireId) -> bool {
        let bit = self.dbits.entry(m).or_default();
        let recorded = match bit {
            DBit::Up => return false,
            DBit::Down => {
                *bit = DBit::Transient { owners: HashMap::from([(acq.session, acq.seq)]) };
                true
            }
            // A retransmitted request of the same acquire changes nothing.
            DBit::Transient { owners } => owners.insert(acq.session, acq.seq) != Some(acq.seq),
        };
        if recorded {
            self.effects
                .event
                .push(RcEvent::DbitChanged { peer: m, change: DbitChange::Owner { acq } });
        }
        true
    }

    /// Kite §5.7.4: the bits are set before the ack leaves.
    pub(crate) fn on_slow_release(&mut self, from: NodeId, req: u64, dm: u64) {
        self.learn_dm_set(from, req, NodeSet::from_bits(dm));
        self.effects.send.push((from, PeerMessage::SlowReleaseAck { req }));
    }

    /// A DM-set published by `SLOW_RELEASE` round `req` of `from` (this node's own, B4.c, or a
    /// peer's, §5.7.4): every named peer's bit goes `Down`, owners discarded; this node, if
    /// named, learns it is delinquent (K-D3).
    fn learn_dm_set(&mut self, from: NodeId, req: u64, dm: NodeSet) {
        for n in dm.iter() {
            if n == self.cfg.node {
                self.set_self_delinquent(from, req);
            } else if self.dbits.insert(n, DBit::Down) != Some(DBit::Down) {
                self.effects
                    .event
                    .push(RcEvent::DbitChanged { peer: n, change: DbitChange::Down { from, req } });
            }
        }
    }

    fn set_self_delinquent(&mut self, from: NodeId, req: u64) {
        if !std::mem::replace(&mut self.self_delinquent, true) {
            let change = SelfDelinquentChange::Set { from, req };
            self.effects.event.push(RcEvent::SelfDelinquent { change });
        }
    }

    /// Kite §5.7.5: the atomic reset — only if no `SLOW_RELEASE` naming `m` came in between.
    pub(crate) fn on_reset_bit(&mut self, from: NodeId, acq: AcquireId) {
        if acq.session.node != from {
            return;
        }
        let owner = |owners: &HashMap<SessionId, u64>| owners.get(&acq.session) == Some(&acq.seq);
        let matches = match self.dbits.get(&from) {
            Some(DBit::Transient { owners }) => owner(owners),
            Some(DBit::Down) => false,
            Some(DBit::Up) | None => return,
        };
        // CANARY (ResetWithoutOwner): any bit that is not up goes up, recorded owner or not.
        if !matches && !self.planted(crate::PlantedBug::ResetWithoutOwner) {
            return;
        }
        let mut owners: Vec<AcquireId> = match self.dbits.insert(from, DBit::Up) {
            Some(DBit::Transient { owners }) => {
                owners.into_iter().map(|(session, seq)| AcquireId { session, seq }).collect()
            }
            _ => Vec::new(),
        };
        owners.sort_unstable();
        self.effects
            .event
            .push(RcEvent::DbitChanged { peer: from, change: DbitChange::Up { acq, owners } });
    }

    /// Kite §5.1.5, at the end of every acquire and RMW: an unconditional epoch increment
    /// [FIX K-F4] if delinquency was detected, and `RESET_BIT` strictly after it (E5). Consuming
    /// `self_delinquent` counts as a detection, so the flag is only ever cleared in the step
    /// that increments the epoch (§7 inv. 16).
    pub(crate) fn acquire_finish(&mut self, mut detected: bool, acq: AcquireId) {
        if std::mem::take(&mut self.self_delinquent) {
            // CANARY (ClearSelfDelinquentWithoutBump): the flag is consumed but not counted.
            detected |= !self.planted(crate::PlantedBug::ClearSelfDelinquentWithoutBump);
            let change = SelfDelinquentChange::Cleared { acq };
            self.effects.event.push(RcEvent::SelfDelinquent { change });
        }
        if detected {
            self.machine_epoch += 1;
            self.effects.event.push(RcEvent::EpochBumped { acq, epoch: self.machine_epoch });
            self.broadcast(&PeerMessage::ResetBit { acq });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use strata_core::Node;
    use strata_wire::client::{ClientRequest, Request, Response};
    use strata_wire::peer::{PeerMessage, WriteAck};
    use strata_wire::{Instant, NodeId};

    use crate::{RcConfig, RcEffects, RcInput, RcReplica, RELEASE_TIMEOUT_RTTS};

    const MS: u64 = 1_000_000;

    fn submit(r: &mut RcReplica, now: u64, body: Request) -> RcEffects {
        r.on_client_request(
            Instant(now),
            RcInput::Client { route: 1, req: ClientRequest::new(1, body) },
        );
        effects(r)
    }

    fn effects(r: &mut RcReplica) -> RcEffects {
        let mut out = RcEffects::default();
        r.poll_effects(&mut out);
        r.check_invariants();
        out
    }

    fn ack(r: &mut RcReplica, now: u64, peer: u32, key: &'static str, w: &RcEffects) {
        let cs = w.send.iter().find_map(|(_, m)| match m {
            PeerMessage::Write(w) if w.key == key => Some(w.cs),
            _ => None,
        });
        let ack = WriteAck {
            req: 1,
            key: Bytes::from_static(key.as_bytes()),
            cs: cs.expect("the write was sent"),
            delinquent: false,
        };
        r.on_message(Instant(now), NodeId(peer), PeerMessage::WriteAck(ack));
    }

    fn slow_release_sent(out: &RcEffects) -> bool {
        out.send.iter().any(|(_, m)| matches!(m, PeerMessage::SlowRelease { .. }))
    }

    /// `T_REL` follows the smoothed ack round trip (x 10, K-D1), never below `release_timeout`
    /// nor above `release_timeout_max`, and a barrier waits exactly that long before it goes slow.
    #[test]
    fn release_timeout_follows_the_ack_rtt_within_its_bounds() {
        let mut r = RcReplica::new(RcConfig::new(NodeId(0), vec![NodeId(0), NodeId(1), NodeId(2)]))
            .unwrap();
        let (floor, cap) = (Duration::from_millis(5), Duration::from_millis(100));
        assert_eq!(
            (r.cfg.release_timeout, r.cfg.release_timeout_max),
            (floor, cap),
            "the defaults"
        );
        assert_eq!(r.release_timeout(), floor, "the floor before any ack was sampled");
        assert_eq!(r.stats().release_timeout_us, 5_000);
        let Response::SessionOpened { session: s } =
            submit(&mut r, 0, Request::OpenSession).reply.pop().unwrap().resp.body
        else {
            panic!()
        };
        let put = |key: &'static str| Request::Put {
            session: s,
            key: Bytes::from_static(key.as_bytes()),
            value: Bytes::from_static(b"v"),
        };

        // Acks after 2 ms (a loaded machine): T_REL = 10 x 2 ms, above the floor.
        let w = submit(&mut r, 0, put("a"));
        ack(&mut r, 2 * MS, 1, "a", &w);
        ack(&mut r, 2 * MS, 2, "a", &w);
        assert_eq!(r.ack_rtt, Some(Duration::from_millis(2)));
        assert_eq!(r.release_timeout(), Duration::from_millis(2) * RELEASE_TIMEOUT_RTTS);
        assert_eq!(r.stats().release_timeout_us, 20_000);

        // A release whose prior write n2 never acks: no slow path until T_REL = 20 ms has
        // passed, although the fixed floor (5 ms) has; then SLOW_RELEASE (the quorum holds the
        // write, K-F1).
        let t0 = 10 * MS;
        let w = submit(&mut r, t0, put("b"));
        ack(&mut r, t0 + 2 * MS, 1, "b", &w); // a 2 ms sample: the estimate stays 2 ms
        let release = Request::Release {
            session: s,
            key: Bytes::from_static(b"f"),
            value: Bytes::from_static(b"1"),
        };
        let out = submit(&mut r, t0 + 2 * MS, release);
        assert!(!slow_release_sent(&out) && out.reply.is_empty(), "the barrier waits");
        r.on_tick(Instant(t0 + 2 * MS + 6 * MS));
        assert!(
            !slow_release_sent(&effects(&mut r)),
            "5 ms (the floor) is not the time-out any more"
        );
        r.on_tick(Instant(t0 + 2 * MS + 20 * MS - 1));
        assert!(!slow_release_sent(&effects(&mut r)), "still within T_REL");
        r.on_tick(Instant(t0 + 2 * MS + 20 * MS));
        assert!(slow_release_sent(&effects(&mut r)), "T_REL expired: the slow path");

        // The bounds: a fast network falls back to the floor, a very slow one stops at the cap.
        r.ack_rtt = Some(Duration::from_micros(100));
        assert_eq!(r.release_timeout(), floor);
        r.ack_rtt = Some(Duration::from_millis(40));
        assert_eq!(r.release_timeout(), cap);
        assert_eq!(r.stats().release_timeout_us, 100_000);
        // Cap = floor: a fixed T_REL whatever the estimate (the simulator's tiny-T_REL seeds).
        let mut cfg = RcConfig::new(NodeId(0), vec![NodeId(0), NodeId(1), NodeId(2)]);
        cfg.release_timeout = Duration::from_micros(50);
        cfg.release_timeout_max = cfg.release_timeout;
        let mut fixed = RcReplica::new(cfg).unwrap();
        fixed.ack_rtt = Some(Duration::from_millis(3));
        assert_eq!(fixed.release_timeout(), Duration::from_micros(50));
    }

    #[test]
    fn a_cap_below_the_floor_is_refused() {
        let mut cfg = RcConfig::new(NodeId(0), vec![NodeId(0), NodeId(1)]);
        cfg.release_timeout_max = cfg.release_timeout - Duration::from_micros(1);
        assert!(matches!(
            RcReplica::new(cfg).err(),
            Some(crate::ConfigError::ReleaseTimeoutMaxBelowMin { .. })
        ));
    }
}
