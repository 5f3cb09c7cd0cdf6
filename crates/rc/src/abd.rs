//! Multi-writer ABD: releases (Kite §5.4), acquires (§5.5), and the stripped-down ABD of the
//! slow path for relaxed accesses to out-of-epoch keys (§5.2 R3, §5.3 W3, §5.9 O2).

use bytes::Bytes;
use strata_wire::client::Response;
use strata_wire::peer::{KeyRecords, PeerMessage, RcResult, Read, ReadReply, Version, Write};
use strata_wire::{AcquireId, Carstamp, Instant, Llc, NodeId, Rifl, SessionId};

use crate::api::{RcEvent, ValueRound};
use crate::barrier::Barrier;
use crate::node_set::NodeSet;
use crate::replica::RcReplica;
use crate::session::OpId;

/// §5.2 R3: a quorum read with no write-back and no delinquency check.
#[derive(Debug)]
pub(crate) struct SlowRead {
    /// The machine epoch when the access started (§5.8 E2).
    pub e_start: u64,
    pub req: Option<u64>,
}

/// §5.3 W3: a `READ_TS` round, then a write above every clock it saw; no wait for acks.
#[derive(Debug)]
pub(crate) struct SlowWrite {
    pub e_start: u64,
    pub value: Option<Bytes>,
    pub req: Option<u64>,
}

#[derive(Debug)]
pub(crate) struct Release {
    pub value: Bytes,
    pub barrier: Barrier,
    /// L1, started at once (O1: it reveals nothing about the value).
    pub ts_req: Option<u64>,
    pub max_llc: Llc,
    /// L4: the value round, started only after the barrier.
    pub write: Option<(u64, Carstamp)>,
}

impl Release {
    pub fn new(value: Bytes) -> Release {
        Release {
            value,
            barrier: Barrier::default(),
            ts_req: None,
            max_llc: Llc::ZERO,
            write: None,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Acquire {
    pub acq: AcquireId,
    pub detected: bool,
    pub phase: AcquirePhase,
    /// The highest version seen, and the nodes known to hold it (or newer).
    pub best: Version,
    pub holders: NodeSet,
    /// Repliers whose reply showed an older version (they get the obligation's `WRITE`, A7).
    pub behind: NodeSet,
}

#[derive(Debug)]
pub(crate) enum AcquirePhase {
    Start,
    Reading { req: u64, c0: Carstamp },
    WritingBack { req: u64 },
}

impl Acquire {
    pub fn new(acq: AcquireId) -> Acquire {
        let best = Version {
            value: None,
            cs: Carstamp::ZERO,
            rmw_id: None,
            records: KeyRecords::default(),
        };
        Acquire {
            acq,
            detected: false,
            phase: AcquirePhase::Start,
            best,
            holders: NodeSet::EMPTY,
            behind: NodeSet::EMPTY,
        }
    }
}

/// The highest version among replies to a `READ` round, merged into `best`.
fn merge_read_replies(best: &mut Version, replies: &[(NodeId, PeerMessage)]) {
    for (_, m) in replies {
        if let PeerMessage::ReadReply(ReadReply { newer: Some(v), .. }) = m {
            if v.cs > best.cs {
                *best = v.clone();
            }
        }
    }
}

impl RcReplica {
    pub(crate) fn step_slow_read(
        &mut self,
        now: Instant,
        id: OpId,
        key: &Bytes,
        s: &mut SlowRead,
    ) -> Option<Response> {
        let Some(req) = s.req else {
            self.stats.slow_path_accesses += 1;
            let known_cs = self.local(key).1;
            let key2 = key.clone();
            s.req = Some(self.start_round(now, id, |req| {
                PeerMessage::Read(Read { req, key: key2, known_cs, acq: None })
            }));
            return self.step_slow_read(now, id, key, s);
        };
        if self.round_replies(req) < self.remote_quorum() {
            return None;
        }
        let replies = self.end_round(req);
        let k = self.key_mut(key);
        let mut best = k.version();
        merge_read_replies(&mut best, &replies);
        self.apply(key, best.value.clone(), best.cs, best.rmw_id);
        self.merge_records(key, &best.records);
        let k = self.key_mut(key);
        // §5.8 E2: restored with the epoch at the *start* of the access.
        k.epoch = k.epoch.max(s.e_start);
        Some(Response::Value { value: best.value, cs: best.cs })
    }

    pub(crate) fn step_slow_write(
        &mut self,
        now: Instant,
        id: OpId,
        sid: SessionId,
        key: &Bytes,
        s: &mut SlowWrite,
        rifl: Option<&Rifl>,
    ) -> Option<Response> {
        let Some(req) = s.req else {
            self.stats.slow_path_accesses += 1;
            let key2 = key.clone();
            s.req = Some(self.start_round(now, id, |req| PeerMessage::ReadTs { req, key: key2 }));
            return self.step_slow_write(now, id, sid, key, s, rifl);
        };
        if self.round_replies(req) < self.remote_quorum() {
            return None;
        }
        let replies = self.end_round(req);
        if let Some(done) = self.recorded_in_round(key, &replies, rifl) {
            return Some(done);
        }
        let max = max_replied_llc(&replies);
        let node = self.cfg.node;
        self.note_value(s.value.as_ref());
        let k = self.key_mut(key);
        let cs = Carstamp::next_write(max.max(k.cs.llc), node);
        assert!(
            k.apply_version(s.value.clone(), cs, None),
            "a write above every known clock is new"
        );
        k.epoch = k.epoch.max(s.e_start);
        self.publish_write(now, sid, key.clone(), s.value.take(), cs, rifl);
        Some(Response::Written { cs })
    }

    /// Kite §5.4. L1 (`READ_TS`) runs concurrently with the barrier (L2); the value round (L4)
    /// starts only after both, so no node holds the released value before the DM-set, if any,
    /// reached a quorum (the release invariant).
    pub(crate) fn step_release(
        &mut self,
        now: Instant,
        id: OpId,
        sid: SessionId,
        key: &Bytes,
        r: &mut Release,
        rifl: Option<&Rifl>,
    ) -> Option<Response> {
        if r.ts_req.is_none() {
            let key2 = key.clone();
            r.ts_req =
                Some(self.start_round(now, id, |req| PeerMessage::ReadTs { req, key: key2 }));
        }
        if let Some((req, cs)) = r.write {
            if self.round_replies(req) < self.remote_quorum() {
                return None;
            }
            // L5: the record starts with the acks received so far.
            let acked: NodeSet = self.end_round(req).iter().map(|(n, _)| *n).collect();
            let value = Some(r.value.clone());
            self.track(now, key.clone(), value, cs, None, acked);
            self.note_unresolved(sid, key.clone(), cs);
            return Some(Response::Written { cs });
        }
        let barrier_done = self.step_barrier(now, id, sid, &mut r.barrier);
        let ts_req = r.ts_req.expect("started above");
        if !barrier_done || self.round_replies(ts_req) < self.remote_quorum() {
            return None;
        }
        let replies = self.end_round(ts_req);
        if let Some(done) = self.recorded_in_round(key, &replies, rifl) {
            return Some(done);
        }
        // L3: above every clock of a quorum and of the local replica.
        r.max_llc = max_replied_llc(&replies);
        let node = self.cfg.node;
        let cs = Carstamp::next_write(r.max_llc.max(self.local(key).1.llc), node);
        let value = Some(r.value.clone());
        self.apply(key, value.clone(), cs, None);
        let records = self.record_completion(key, rifl, RcResult::Written { cs });
        self.effects.event.push(RcEvent::VersionCreated {
            session: sid,
            key: key.clone(),
            cs,
            value: value.clone(),
        });
        self.report_barrier(sid, key, ValueRound::Write { cs }, &mut r.barrier);
        let key2 = key.clone();
        let req = self.start_round(now, id, |req| {
            PeerMessage::Write(Write {
                req,
                key: key2,
                value,
                cs,
                rmw_id: None,
                acq: None,
                records,
            })
        });
        r.write = Some((req, cs));
        self.step_release(now, id, sid, key, r, rifl)
    }

    /// Kite §5.5: read a quorum, write back unless the value is known to be at a quorum, then
    /// `acquire_finish` and the K-F2 obligation.
    pub(crate) fn step_acquire(
        &mut self,
        now: Instant,
        id: OpId,
        sid: SessionId,
        key: &Bytes,
        a: &mut Acquire,
    ) -> Option<Response> {
        match a.phase {
            AcquirePhase::Start => {
                let k = self.key_mut(key);
                a.best = k.version();
                let c0 = k.cs;
                let (key2, acq) = (key.clone(), a.acq);
                let req = self.start_round(now, id, |req| {
                    PeerMessage::Read(Read { req, key: key2, known_cs: c0, acq: Some(acq) })
                });
                a.phase = AcquirePhase::Reading { req, c0 };
                self.step_acquire(now, id, sid, key, a)
            }
            AcquirePhase::Reading { req, c0 } => {
                if self.round_replies(req) < self.remote_quorum() {
                    return None;
                }
                let replies = self.end_round(req);
                merge_read_replies(&mut a.best, &replies);
                let c = a.best.cs;
                for (n, m) in &replies {
                    if let PeerMessage::ReadReply(r) = m {
                        a.detected |= r.delinquent;
                        if r.cs >= c {
                            a.holders.insert(*n);
                        } else {
                            a.behind.insert(*n);
                        }
                    }
                }
                // A4.
                if c > c0 {
                    self.apply(key, a.best.value.clone(), c, a.best.rmw_id);
                }
                self.merge_records(key, &a.best.records);
                // A5: `cnt` counts the local replica if it already held the value.
                let cnt = a.holders.len() as usize + usize::from(c0 == c);
                if cnt < self.cfg.quorum() {
                    let (key2, v, acq) = (key.clone(), a.best.clone(), a.acq);
                    let req = self.start_round(now, id, |req| {
                        PeerMessage::Write(Write {
                            req,
                            key: key2,
                            value: v.value,
                            cs: v.cs,
                            rmw_id: v.rmw_id,
                            acq: Some(acq),
                            records: v.records,
                        })
                    });
                    a.phase = AcquirePhase::WritingBack { req };
                    return self.step_acquire(now, id, sid, key, a);
                }
                Some(self.finish_acquire(now, sid, key, a))
            }
            AcquirePhase::WritingBack { req } => {
                if self.round_replies(req) < self.remote_quorum() {
                    return None;
                }
                for (n, m) in self.end_round(req) {
                    if let PeerMessage::WriteAck(ack) = m {
                        a.detected |= ack.delinquent;
                        a.holders.insert(n);
                        a.behind.remove(n);
                    }
                }
                Some(self.finish_acquire(now, sid, key, a))
            }
        }
    }

    /// RIFL for the write rounds of releases and slow writes (rifl.md R-D23): merges the key's
    /// completion records from the `READ_TS` replies; if an earlier attempt of this RPC reached
    /// any replica of the quorum, its recorded result is the answer and nothing is written.
    fn recorded_in_round(
        &mut self,
        key: &Bytes,
        replies: &[(NodeId, PeerMessage)],
        rifl: Option<&Rifl>,
    ) -> Option<Response> {
        for (_, m) in replies {
            if let PeerMessage::ReadTsReply { records, .. } = m {
                self.merge_records(key, records);
            }
        }
        self.recorded_reply(key, rifl)
    }

    fn finish_acquire(
        &mut self,
        now: Instant,
        sid: SessionId,
        key: &Bytes,
        a: &mut Acquire,
    ) -> Response {
        self.acquire_finish(a.detected, a.acq); // A6
        let v = a.best.clone();
        // A7 [FIX K-F2]: the acquired version must be acked by all nodes, or covered by the
        // DM-set at the session's next release.
        let skip = self.planted(crate::PlantedBug::NoAcquireObligation); // CANARY
        if !skip && v.cs > Carstamp::ZERO {
            self.track(now, key.clone(), v.value.clone(), v.cs, v.rmw_id, a.holders);
            self.resend_now(key, a.behind);
            self.note_unresolved(sid, key.clone(), v.cs);
        }
        Response::Value { value: v.value, cs: v.cs }
    }

    /// Kite §5.7.3 `READ` at a receiver; the delinquency check runs after the key read (K-F3).
    pub(crate) fn on_read(&mut self, from: NodeId, r: Read) {
        let v = self.keys.get(&r.key).map(|k| k.version()).unwrap_or(Version {
            value: None,
            cs: Carstamp::ZERO,
            rmw_id: None,
            records: KeyRecords::default(),
        });
        let delinquent = match r.acq {
            Some(acq) => self.dcheck(from, acq),
            None => false,
        };
        let cs = v.cs;
        let newer = (cs > r.known_cs).then_some(v);
        self.effects.send.push((
            from,
            PeerMessage::ReadReply(ReadReply { req: r.req, key: r.key, cs, newer, delinquent }),
        ));
    }
}

/// The highest clock among `READ_TS_REPLY`s.
fn max_replied_llc(replies: &[(NodeId, PeerMessage)]) -> Llc {
    replies
        .iter()
        .filter_map(|(_, m)| match m {
            PeerMessage::ReadTsReply { cs, .. } => Some(cs.llc),
            _ => None,
        })
        .max()
        .unwrap_or(Llc::ZERO)
}
