//! The Eventual Store: relaxed reads and writes on the fast path (Kite §5.2, §5.3), and the
//! pending-write records that make every replica converge despite message loss (§5.1.7) and
//! that barriers consult (§5.1.6).

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use strata_wire::peer::{Commit, PeerMessage, RcResult, Write, WriteAck};
use strata_wire::{Carstamp, Instant, NodeId, Rifl, RmwId, SessionId};

use crate::api::RcEvent;
use crate::node_set::NodeSet;
use crate::replica::RcReplica;

/// A version this node must see acknowledged by every peer (Kite §3.3 `PendingWrite`): its own
/// writes, releases and RMW commits, and acquire obligations (K-F2).
///
/// [DECISION] (docs/design.md): records are kept per key at the node, not per session; a newer
/// version of the key replaces the older record — an ack of the newer version implies the peer
/// holds a version `>=` the older one, which is all §5.1.7 asks. Sessions remember which
/// versions they still need resolved (`Session::unresolved`).
#[derive(Debug)]
pub(crate) struct PendingWrite {
    pub(crate) value: Option<Bytes>,
    pub(crate) cs: Carstamp,
    /// The RMW that created `cs` (re-sent as `COMMIT`), iff `cs.pno > 0`.
    pub(crate) rmw_id: Option<RmwId>,
    /// Peers known to hold a version `>= cs` of the key.
    pub(crate) acked: NodeSet,
    /// Re-sends so far; each one doubles the wait, up to `retransmit_max`.
    pub(crate) resends: u32,
    /// When the version was first sent (acks of a never re-sent record sample the ack RTT).
    pub(crate) sent_at: Instant,
}

impl RcReplica {
    /// Kite §5.3 W2, fast path: a new version above the local clock, installed locally,
    /// broadcast to every peer, complete at once (no wait for acks).
    pub(crate) fn relaxed_write_fast(
        &mut self,
        now: Instant,
        session: SessionId,
        key: Bytes,
        value: Option<Bytes>,
        rifl: Option<&Rifl>,
    ) -> Carstamp {
        let node = self.cfg.node;
        self.note_value(value.as_ref());
        let k = self.key_mut(&key);
        // The clock is chosen in the same step that installs the value, from the current local
        // version, so two writes of this node never share a carstamp (§5.3, last paragraph).
        let cs = Carstamp::next_write(k.cs.llc, node);
        let installed = k.apply_version(value.clone(), cs, None);
        assert!(installed, "a fresh local version must be newer than the replica");
        self.publish_write(now, session, key, value, cs, rifl);
        cs
    }

    /// Announces a plain version this node created (relaxed write, slow write): the version
    /// event, the broadcast, the pending record, and the session's note for its next barrier.
    /// A linearizable write's completion record goes with the version, in the same message
    /// (rifl.md §5.3 S6, R-D23); a retransmission carries the key's whole set.
    pub(crate) fn publish_write(
        &mut self,
        now: Instant,
        session: SessionId,
        key: Bytes,
        value: Option<Bytes>,
        cs: Carstamp,
        rifl: Option<&Rifl>,
    ) {
        self.effects.event.push(RcEvent::VersionCreated {
            session,
            key: key.clone(),
            cs,
            value: value.clone(),
        });
        let records = self.record_completion(&key, rifl, RcResult::Written { cs });
        let req = self.next_req();
        let msg = PeerMessage::Write(Write {
            req,
            key: key.clone(),
            value: value.clone(),
            cs,
            rmw_id: None,
            acq: None,
            records,
        });
        self.broadcast(&msg);
        self.track(now, key.clone(), value, cs, None, NodeSet::EMPTY);
        self.note_unresolved(session, key, cs);
    }

    /// Starts (or merges into) the pending record of `key` at version `cs`, already acked by
    /// `acked`. A record for a newer version covers this one.
    pub(crate) fn track(
        &mut self,
        now: Instant,
        key: Bytes,
        value: Option<Bytes>,
        cs: Carstamp,
        rmw_id: Option<RmwId>,
        acked: NodeSet,
    ) {
        if self.peers.is_empty() {
            return;
        }
        match self.pending.get_mut(&key) {
            Some(p) if p.cs > cs => return,
            Some(p) if p.cs == cs => {
                p.acked = p.acked.union(acked);
            }
            _ => {
                self.pending.insert(
                    key.clone(),
                    PendingWrite { value, cs, rmw_id, acked, resends: 0, sent_at: now },
                );
                self.retransmit.push(now + self.first_resend_after(), (key.clone(), cs));
            }
        }
        if self.pending.get(&key).is_some_and(|p| p.acked.is_superset(self.peer_set)) {
            self.pending.remove(&key);
        }
        self.credits_changed = true;
    }

    /// Peers known to hold a version `>= cs` of `key` (for barriers).
    pub(crate) fn acked_for(&self, key: &[u8], cs: Carstamp) -> NodeSet {
        acked(&self.pending, self.peer_set, key, cs)
    }

    /// Kite §5.7.1 `WRITE` at a receiver: apply if newer, run the delinquency check for an
    /// acquire's write-back (after the key update, K-F3), acknowledge with the version held.
    pub(crate) fn on_write(&mut self, _now: Instant, from: NodeId, w: Write) {
        if self.planted(crate::PlantedBug::ApplyOlderWrites) {
            // CANARY: last arrival wins, whatever its version.
            self.note_value(w.value.as_ref());
            let k = self.key_mut(&w.key);
            k.value = w.value.clone();
            k.cs = w.cs;
            k.rmw_id = w.rmw_id.filter(|_| w.cs.pno > 0);
        }
        self.apply(&w.key, w.value, w.cs, w.rmw_id);
        self.merge_records(&w.key, &w.records);
        let held = self.keys.get(&w.key).map_or(Carstamp::ZERO, |k| k.cs);
        let delinquent = match w.acq {
            Some(acq) => self.dcheck(from, acq),
            None => false,
        };
        let ack = WriteAck { req: w.req, key: w.key, cs: held, delinquent };
        self.effects.send.push((from, PeerMessage::WriteAck(ack)));
    }

    /// Credits a peer's reply to the pending record of the key (§5.1.7: a version `>= cs`
    /// counts, whichever message carried it).
    pub(crate) fn credit(&mut self, now: Instant, key: &Bytes, from: NodeId, cs: Carstamp) {
        let Some(p) = self.pending.get_mut(key) else { return };
        if cs >= p.cs && !p.acked.contains(from) {
            p.acked.insert(from);
            // Karn's rule: only acks of a never re-sent version measure the round trip.
            let sample = (p.resends == 0).then(|| now.saturating_since(p.sent_at));
            if p.acked.is_superset(self.peer_set) {
                self.pending.remove(key);
            }
            self.credits_changed = true;
            if let Some(sample) = sample {
                self.ack_rtt = Some(self.ack_rtt.map_or(sample, |srtt| (srtt * 7 + sample) / 8));
            }
        }
    }

    /// The message that re-sends a pending record: `WRITE`, or `COMMIT` for an RMW's version.
    fn resend_message(
        &mut self,
        key: &Bytes,
        p_value: Option<Bytes>,
        cs: Carstamp,
        rmw_id: Option<RmwId>,
    ) -> PeerMessage {
        let req = self.next_req();
        let k = self.keys.get(key);
        match rmw_id {
            // A learner of a slot must get the records of every slot up to it (`crate::records`).
            Some(rmw_id) if cs.pno > 0 => {
                let records = k.map(|k| k.records.clone()).unwrap_or_default();
                PeerMessage::Commit(Commit {
                    req,
                    key: key.clone(),
                    slot: cs.pno,
                    rmw_id,
                    value: p_value,
                    cs,
                    records,
                })
            }
            // A plain version carries its own record, as its first broadcast did: re-sending the
            // key's whole set with every retransmission made each one grow with the number of
            // clients that wrote the key.
            _ => {
                let records =
                    k.map(|k| crate::records::of_version(&k.records, cs)).unwrap_or_default();
                PeerMessage::Write(Write {
                    req,
                    key: key.clone(),
                    value: p_value,
                    cs,
                    rmw_id: None,
                    acq: None,
                    records,
                })
            }
        }
    }

    /// Sends a pending record to `to` now (e.g. an acquire obligation to a lagging replier).
    pub(crate) fn resend_now(&mut self, key: &Bytes, to: NodeSet) {
        let Some(p) = self.pending.get(key) else { return };
        let (value, cs, rmw_id) = (p.value.clone(), p.cs, p.rmw_id);
        let msg = self.resend_message(key, value, cs, rmw_id);
        for peer in to.iter() {
            self.effects.send.push((peer, msg.clone()));
        }
    }

    /// Re-sends every due pending write to the peers that have not acknowledged it.
    pub(crate) fn retransmit_due(&mut self, now: Instant) {
        let base = self.first_resend_after();
        while let Some((key, cs)) = self.retransmit.pop_due(now) {
            let Some(p) = self.pending.get_mut(&key) else { continue };
            if p.cs != cs {
                continue; // superseded by a newer version, which has its own schedule
            }
            p.resends = p.resends.saturating_add(1);
            let backoff = backoff(base, self.cfg.retransmit_max, p.resends);
            let (value, acked, rmw_id) = (p.value.clone(), p.acked, p.rmw_id);
            let msg = self.resend_message(&key, value, cs, rmw_id);
            for &peer in &self.peers {
                if !acked.contains(peer) {
                    self.effects.send.push((peer, msg.clone()));
                    self.stats.writes_retransmitted += 1;
                }
            }
            self.retransmit.push(now + backoff, (key, cs));
        }
    }

    /// `T_RETX` for pending writes: four smoothed ack round trips, within
    /// `[retransmit_after, retransmit_max]`. A fixed interval re-sends every write whose acks are
    /// merely late when the machine is loaded, which loads it further (docs/design.md).
    pub(crate) fn first_resend_after(&self) -> Duration {
        self.ack_rtts(4, self.cfg.retransmit_after, self.cfg.retransmit_max)
    }

    /// `k` smoothed ack round trips (`ack_rtt`, sampled in `credit` under Karn's rule), within
    /// `[min, max]`; `min` before the first sample. Scales the pending-write `T_RETX` (above)
    /// and the barrier's `T_REL` (`RcReplica::release_timeout`).
    pub(crate) fn ack_rtts(&self, k: u32, min: Duration, max: Duration) -> Duration {
        let adaptive = self.ack_rtt.map_or(Duration::ZERO, |rtt| rtt.saturating_mul(k));
        adaptive.clamp(min, max)
    }

    pub(crate) fn next_req(&mut self) -> u64 {
        self.next_req += 1;
        self.next_req
    }
}

/// Peers known to hold a version `>= cs` of `key`, for a version `cs` this node created. A
/// record is only ever replaced by a newer one (`track`) and removed once every peer
/// acknowledged it (`credit`), so a record older than `cs`, like no record, means a version
/// `>= cs` was acknowledged by every peer: the older record is an RMW of this node decided
/// after that (its version loses to the newer one everywhere, but is tracked until acked).
/// Answering "nobody" there kept a barrier waiting for ever once a peer crashed (rc seed 3103:
/// the RMW's record could never be fully acknowledged again).
pub(crate) fn acked(
    pending: &HashMap<Bytes, PendingWrite>,
    peers: NodeSet,
    key: &[u8],
    cs: Carstamp,
) -> NodeSet {
    match pending.get(key) {
        Some(p) if p.cs >= cs => p.acked,
        Some(_) | None => peers,
    }
}

/// `base * 2^resends`, capped at `max`.
fn backoff(base: Duration, max: Duration, resends: u32) -> Duration {
    base.checked_mul(1u32 << resends.min(20)).unwrap_or(max).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RcConfig, RcInput, RcReply};
    use strata_core::Node;
    use strata_wire::client::{ClientRequest, Request, Response};

    fn replica(id: u32) -> RcReplica {
        let mut cfg = RcConfig::new(NodeId(id), vec![NodeId(0), NodeId(1), NodeId(2)]);
        cfg.retransmit_after = Duration::from_millis(1);
        cfg.retransmit_max = Duration::from_millis(4);
        RcReplica::new(cfg).unwrap()
    }

    fn call(r: &mut RcReplica, now: Instant, body: Request) -> Response {
        r.on_client_request(now, RcInput::Client { route: 1, req: ClientRequest::new(9, body) });
        let mut out = Default::default();
        r.poll_effects(&mut out);
        let RcReply { route, resp } = out.reply.pop().expect("a reply");
        assert_eq!((route, resp.corr), (1, 9));
        r.effects.send = out.send; // keep sends for inspection
        resp.body
    }

    fn open(r: &mut RcReplica) -> SessionId {
        match call(r, Instant(0), Request::OpenSession) {
            Response::SessionOpened { session } => session,
            other => panic!("{other:?}"),
        }
    }

    /// rc seed 3103: a plain write acknowledged by every peer, then an RMW of this node decided
    /// with an older version (its base predates the write). The RMW's record is tracked until
    /// acknowledged (a crashed peer never will); the write still counts as acknowledged by
    /// every peer, or a barrier covering it waits for ever.
    #[test]
    fn an_older_rmw_tracked_after_a_fully_acked_write_does_not_hide_that_write() {
        let mut r = replica(0);
        let key = Bytes::from_static(b"k");
        let cs =
            |ver, node, pno| Carstamp { llc: strata_wire::Llc { ver, node: NodeId(node) }, pno };
        let write = cs(45, 0, 0);
        r.track(Instant(0), key.clone(), None, write, None, NodeSet::EMPTY);
        r.credit(Instant(1), &key, NodeId(1), write);
        r.credit(Instant(1), &key, NodeId(2), write);
        assert!(r.pending.is_empty(), "fully acknowledged: no record");
        let rmw = cs(44, 0, 9);
        assert!(rmw < write);
        let rmw_id =
            strata_wire::RmwId { session: SessionId { node: NodeId(0), index: 0 }, seq: 2 };
        let mut only_1 = NodeSet::EMPTY;
        only_1.insert(NodeId(1));
        r.track(Instant(2), key.clone(), None, rmw, Some(rmw_id), only_1);
        assert_eq!(r.pending[&key].cs, rmw, "the RMW's version is tracked");
        assert_eq!(r.acked_for(&key, rmw), only_1);
        assert_eq!(r.acked_for(&key, write), r.peer_set, "the write stays acknowledged by all");
    }

    #[test]
    fn write_is_local_broadcast_and_readable_in_session() {
        let mut r = replica(0);
        let s = open(&mut r);
        let put = Request::Put {
            session: s,
            key: Bytes::from_static(b"k"),
            value: Bytes::from_static(b"v"),
        };
        let Response::Written { cs } = call(&mut r, Instant(0), put) else { panic!() };
        assert_eq!(cs, Carstamp::next_write(Carstamp::ZERO.llc, NodeId(0)));
        assert_eq!(r.effects.send.len(), 2, "one WRITE per peer");
        let get = Request::Get { session: s, key: Bytes::from_static(b"k") };
        assert_eq!(
            call(&mut r, Instant(0), get),
            Response::Value { value: Some(Bytes::from_static(b"v")), cs }
        );
        r.check_invariants();
    }

    #[test]
    fn older_write_never_replaces_newer() {
        let mut r = replica(1);
        let new = Carstamp { llc: strata_wire::Llc { ver: 5, node: NodeId(0) }, pno: 0 };
        let old = Carstamp { llc: strata_wire::Llc { ver: 4, node: NodeId(2) }, pno: 0 };
        let k = Bytes::from_static(b"k");
        for (cs, v) in [(new, "new"), (old, "old")] {
            let w = Write {
                req: 1,
                key: k.clone(),
                value: Some(Bytes::from(v)),
                cs,
                rmw_id: None,
                acq: None,
                records: Default::default(),
            };
            r.on_message(Instant(0), NodeId(0), PeerMessage::Write(w));
        }
        assert_eq!(r.local(b"k"), (Some(Bytes::from_static(b"new")), new));
        // Both acks report the version held, so the sender of the old write credits it too.
        let mut out = Default::default();
        r.poll_effects(&mut out);
        assert!(out.send.iter().all(|(_, m)| matches!(m, PeerMessage::WriteAck(a) if a.cs == new)));
    }

    #[test]
    fn unacked_write_is_resent_only_to_non_ackers_until_all_ack() {
        let mut r = replica(0);
        let s = open(&mut r);
        let put = Request::Put {
            session: s,
            key: Bytes::from_static(b"k"),
            value: Bytes::from_static(b"v"),
        };
        let Response::Written { cs } = call(&mut r, Instant(0), put) else { panic!() };
        let ack = WriteAck { req: 1, key: Bytes::from_static(b"k"), cs, delinquent: false };
        r.on_message(Instant(0), NodeId(1), PeerMessage::WriteAck(ack.clone()));
        r.effects.send.clear();
        r.on_tick(Instant::from_millis(1));
        let dests: Vec<NodeId> = r.effects.send.drain(..).map(|(d, _)| d).collect();
        assert_eq!(dests, vec![NodeId(2)]);
        r.check_invariants();
        r.on_message(Instant(0), NodeId(2), PeerMessage::WriteAck(ack));
        assert_eq!(r.stats().pending_writes, 0);
        r.on_tick(Instant::from_millis(100));
        assert!(r.effects.send.is_empty(), "nothing re-sent once everyone acked");
    }

    #[test]
    fn rejects_foreign_sessions_and_oversized_values() {
        let mut r = replica(0);
        let s = open(&mut r);
        let foreign = SessionId { node: NodeId(1), index: s.index };
        let get = Request::Get { session: foreign, key: Bytes::from_static(b"k") };
        assert!(matches!(
            call(&mut r, Instant(0), get),
            Response::Error { code: strata_wire::client::ErrorCode::InvalidSession, .. }
        ));
        let big = Bytes::from(vec![0u8; r.cfg.limits.max_value_bytes + 1]);
        let put = Request::Put { session: s, key: Bytes::from_static(b"k"), value: big };
        assert!(matches!(
            call(&mut r, Instant(0), put),
            Response::Error { code: strata_wire::client::ErrorCode::ValueTooLarge, .. }
        ));
        assert_eq!(r.local(b"k"), (None, Carstamp::ZERO), "a rejected write has no effect");
    }

    #[test]
    fn slow_acks_stretch_the_first_resend_so_late_acks_are_not_resent() {
        let mut r = RcReplica::new(RcConfig::new(NodeId(0), vec![NodeId(0), NodeId(1), NodeId(2)]))
            .unwrap();
        let s = open(&mut r);
        assert_eq!(
            r.first_resend_after(),
            Duration::from_millis(5),
            "the configured floor before any sample"
        );
        let put = |key: &'static [u8]| Request::Put {
            session: s,
            key: Bytes::from_static(key),
            value: Bytes::from_static(b"v"),
        };
        let Response::Written { cs } = call(&mut r, Instant(0), put(b"a")) else { panic!() };
        // Acks arrive after 20 ms (a loaded machine): the smoothed RTT is 20 ms.
        for peer in [1, 2] {
            let ack = WriteAck { req: 1, key: Bytes::from_static(b"a"), cs, delinquent: false };
            r.on_message(Instant::from_millis(20), NodeId(peer), PeerMessage::WriteAck(ack));
        }
        assert_eq!(r.first_resend_after(), Duration::from_millis(80));
        call(&mut r, Instant::from_millis(20), put(b"b"));
        r.effects.send.clear();
        r.on_tick(Instant::from_millis(40));
        assert!(r.effects.send.is_empty(), "not re-sent while its acks may still be on their way");
        r.on_tick(Instant::from_millis(101));
        assert_eq!(r.effects.send.len(), 2, "re-sent to both silent peers after 4 x RTT");
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let (b, m) = (Duration::from_millis(1), Duration::from_millis(5));
        assert_eq!(backoff(b, m, 1), Duration::from_millis(2));
        assert_eq!(backoff(b, m, 2), Duration::from_millis(4));
        assert_eq!(backoff(b, m, 3), m);
        assert_eq!(backoff(b, m, 99), m);
    }
}
