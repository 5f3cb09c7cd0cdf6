//! The fast/slow-path mechanism (Kite §5.1.4 - §5.1.6, §5.7.4, §5.7.5, §5.8): barriers of
//! releases and RMWs, delinquency bits, the machine epoch.

use std::collections::HashMap;

use strata_wire::peer::PeerMessage;
use strata_wire::{AcquireId, Instant, NodeId, SessionId};

use crate::node_set::NodeSet;
use crate::replica::RcReplica;
use crate::session::OpId;

/// One delinquency bit (Kite §3.1 `dbit[m]`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum DBit {
    #[default]
    Up,
    Down,
    /// The paper's state `T`: acquires of node `m` observed the bit; `owners` holds, per session
    /// of `m`, the newest such acquire (K-D4: bounded by sessions).
    Transient { owners: HashMap<SessionId, u64> },
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
    Done,
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

    fn resolve(&mut self, sid: SessionId) {
        if let Some(s) = self.sessions.get_mut(&sid.index) {
            s.unresolved.clear();
        }
    }

    /// Advances a barrier; true once it has returned (B3 or B4.f). B1 holds by construction:
    /// a release or RMW starts only when every earlier operation of its session has completed.
    pub(crate) fn step_barrier(&mut self, now: Instant, id: OpId, sid: SessionId, b: &mut Barrier) -> bool {
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
                        let deadline = now + self.cfg.release_timeout;
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
                    if !c.quorum_everywhere {
                        self.barrier_waiters.insert(id);
                        return false; // [FIX K-F1]: the DM-set leaves only after a quorum holds every prior write
                    }
                    #[cfg(feature = "canaries")]
                    if self.cfg.planted_bug == Some(crate::PlantedBug::SkipSlowRelease) {
                        // CANARY: proceed after the time-out without publishing the DM-set.
                        self.resolve(sid);
                        *b = Barrier::Done;
                        continue;
                    }
                    // B4.b - d.
                    let dm = c.missing;
                    for m in dm.iter() {
                        self.dbits.insert(m, DBit::Down);
                    }
                    let req = self.start_round(now, id, |req| PeerMessage::SlowRelease { req, dm: dm.bits() });
                    *b = Barrier::SlowRelease { req, dm };
                }
                Barrier::SlowRelease { req, dm } => {
                    if self.round_replies(req) < self.remote_quorum() {
                        return false;
                    }
                    self.end_round(req);
                    self.resolve(sid); // B4.e
                    self.suspected = self.suspected.union(dm);
                    self.stats.barriers_slow += 1;
                    *b = Barrier::Done;
                }
                Barrier::Done => {
                    self.barrier_waiters.remove(&id);
                    return true;
                }
            }
        }
    }

    fn barrier_fast(&mut self, sid: SessionId) -> Barrier {
        self.resolve(sid); // B3
        self.stats.barriers_fast += 1;
        Barrier::Done
    }

    /// Kite §5.1.4 `dcheck`: run when an acquire-type request of node `m` reads or updates a
    /// key here, after that read (K-F3).
    pub(crate) fn dcheck(&mut self, m: NodeId, acq: AcquireId) -> bool {
        let bit = self.dbits.entry(m).or_default();
        match bit {
            DBit::Up => false,
            DBit::Down => {
                *bit = DBit::Transient { owners: HashMap::from([(acq.session, acq.seq)]) };
                true
            }
            DBit::Transient { owners } => {
                owners.insert(acq.session, acq.seq);
                true
            }
        }
    }

    /// Kite §5.7.4: the bits are set before the ack leaves.
    pub(crate) fn on_slow_release(&mut self, from: NodeId, req: u64, dm: u64) {
        for n in NodeSet::from_bits(dm).iter() {
            if n == self.cfg.node {
                self.self_delinquent = true;
            } else {
                self.dbits.insert(n, DBit::Down);
            }
        }
        self.effects.send.push((from, PeerMessage::SlowReleaseAck { req }));
    }

    /// Kite §5.7.5: the atomic reset — only if no `SLOW_RELEASE` naming `m` came in between.
    pub(crate) fn on_reset_bit(&mut self, from: NodeId, acq: AcquireId) {
        if acq.session.node != from {
            return;
        }
        if let Some(DBit::Transient { owners }) = self.dbits.get(&from) {
            if owners.get(&acq.session) == Some(&acq.seq) {
                self.dbits.insert(from, DBit::Up);
            }
        }
    }

    /// Kite §5.1.5, at the end of every acquire and RMW: an unconditional epoch increment
    /// [FIX K-F4] if delinquency was detected, and `RESET_BIT` strictly after it (E5).
    pub(crate) fn acquire_finish(&mut self, mut detected: bool, acq: AcquireId) {
        if self.self_delinquent {
            detected = true;
            self.self_delinquent = false;
        }
        if detected {
            self.machine_epoch += 1;
            self.broadcast(&PeerMessage::ResetBit { acq });
        }
    }
}
