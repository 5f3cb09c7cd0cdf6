//! Explicit invalidation's sharers (kairos.md §5.14.2, the EI baseline of §1.3): a shard
//! leader remembers which client connections read a key of a Kairos table asking to be told
//! of its next version (`LogRead { sharer: true }`), and when a Commit decision installs a
//! newer `vts` of that key it pushes `Invalidate{table, key, new_vts}` to each of them
//! (`Response::Push`, `push_topic::KAIROS_INVALIDATE`) and forgets them (§5.7: "send
//! Invalidate to every client in sharers[k]; clear sharers[k]").
//!
//! * **Only asked-for keys.** Nothing is kept for a read without the flag: a client in a
//!   lease mode never sets it, so the server keeps no sharer state and sends nothing
//!   (kairos.md §7 inv. 12).
//! * **Per sharer, the version it read.** The host sees a read's reply and the decisions
//!   applied in one step of a replica in an order of its own (replies, then events); a
//!   sharer is pushed only a version newer than the one it read, so a read served after a
//!   decision in the same step is not invalidated by it (and keeps its registration).
//! * **Leader soft state.** Sharers live at the leader that served the reads. When the
//!   replica stops leading, its shard moves away, or the connection closes, they are
//!   forgotten; a replica that stops leading or retires first pushes
//!   `KAIROS_SHARERS_DROPPED` for the shard to each of its sharers' connections, so a client
//!   knows its entries of that shard will not be invalidated any more (a crashed leader's
//!   connections break, which the client sees).
//!   Safety never depends on it: validation aborts a transaction that read a stale value
//!   (§5.15).

use std::collections::BTreeMap;

use bytes::{Bytes, BytesMut};
use strata_core::Route;
use strata_wire::client::{push_topic, ClientResponse, KairosInvalidate, Response, PUSH_CORR};
use strata_wire::txn::Timestamp;
use strata_wire::Encode;

use crate::effects::{HostEffects, ShardKey};

/// The sharer sets of every shard this node leads (module docs).
#[derive(Debug, Default)]
pub(crate) struct Sharers {
    /// `(shard, key)` -> sharer connection -> the version it read.
    sets: BTreeMap<(ShardKey, Bytes), BTreeMap<Route, Timestamp>>,
    /// Reads asking to register, by the token their reply comes back with: the
    /// connection and the key.
    pending: BTreeMap<u64, (Route, Bytes)>,
    /// Invalidations pushed per shard since the node started (§7 inv. 12: zero in lease
    /// mode).
    sent: BTreeMap<ShardKey, u64>,
}

impl Sharers {
    /// A read of `key` with the sharer flag went to the replica under `token`.
    pub fn expect(&mut self, token: u64, route: Route, key: Bytes) {
        self.pending.insert(token, (route, key));
    }

    /// The reply to read `token` of shard `sk` came back: a value served by this node as the
    /// leader (`Some(vts)`) registers `route`; a refusal (`None`) registers nothing.
    pub fn on_read_reply(
        &mut self,
        token: u64,
        sk: ShardKey,
        route: Route,
        vts: Option<Timestamp>,
    ) {
        let Some((_, key)) = self.pending.remove(&token) else { return };
        if let Some(vts) = vts {
            self.sets.entry((sk, key)).or_default().insert(route, vts);
        }
    }

    /// kairos.md §5.7: a Commit decision installed `new_vts` as `key`'s version in shard `sk`
    /// of `table`: every sharer that read an older version is pushed an invalidation and
    /// forgotten. Returns how many were pushed.
    pub fn on_installed(
        &mut self,
        table: &str,
        sk: ShardKey,
        key: &Bytes,
        new_vts: Timestamp,
        out: &mut HostEffects,
    ) -> usize {
        let id = (sk, key.clone());
        let Some(set) = self.sets.get_mut(&id) else { return 0 };
        let older: Vec<Route> =
            set.iter().filter(|(_, v)| **v < new_vts).map(|(r, _)| *r).collect();
        if older.is_empty() {
            return 0;
        }
        let msg =
            KairosInvalidate { table: table.to_string(), shard: sk.1, key: key.clone(), new_vts };
        let body = encode(&msg);
        for &route in &older {
            set.remove(&route);
            push(out, route, push_topic::KAIROS_INVALIDATE, body.clone());
            *self.sent.entry(sk).or_default() += 1;
        }
        if set.is_empty() {
            self.sets.remove(&id);
        }
        older.len()
    }

    /// This node's replica of shard `sk` of `table` stopped leading: its sharers are
    /// forgotten, and each connection that had some is told once.
    pub fn drop_shard(&mut self, table: &str, sk: ShardKey, out: &mut HostEffects) {
        let keys: Vec<(ShardKey, Bytes)> = self
            .sets
            .range((sk, Bytes::new())..)
            .take_while(|((s, _), _)| *s == sk)
            .map(|(k, _)| k.clone())
            .collect();
        let mut routes = std::collections::BTreeSet::new();
        for k in keys {
            routes.extend(self.sets.remove(&k).into_iter().flat_map(|set| set.into_keys()));
        }
        let msg = KairosInvalidate {
            table: table.to_string(),
            shard: sk.1,
            key: Bytes::new(),
            new_vts: Timestamp::ZERO,
        };
        let body = encode(&msg);
        for route in routes {
            push(out, route, push_topic::KAIROS_SHARERS_DROPPED, body.clone());
        }
    }

    /// Whether shard `sk` has sharers.
    pub fn has_shard(&self, sk: ShardKey) -> bool {
        self.sets.range((sk, Bytes::new())..).next().is_some_and(|((s, _), _)| *s == sk)
    }

    /// Connection `route` closed: it is no sharer any more.
    pub fn on_disconnected(&mut self, route: Route) {
        self.pending.retain(|_, (r, _)| *r != route);
        self.sets.retain(|_, set| {
            set.remove(&route);
            !set.is_empty()
        });
    }

    /// Invalidations pushed for shard `sk` since the node started.
    pub fn invalidations_sent(&self, sk: ShardKey) -> u64 {
        self.sent.get(&sk).copied().unwrap_or(0)
    }

    /// Sharer registrations of shard `sk` (a key and a connection each).
    pub fn count(&self, sk: ShardKey) -> u64 {
        self.sets
            .range((sk, Bytes::new())..)
            .take_while(|((s, _), _)| *s == sk)
            .map(|(_, set)| set.len() as u64)
            .sum()
    }
}

fn encode(msg: &KairosInvalidate) -> Bytes {
    let mut b = BytesMut::new();
    msg.encode(&mut b);
    b.freeze()
}

fn push(out: &mut HostEffects, route: Route, topic: u32, body: Bytes) {
    let body = Response::Push { topic, body };
    out.reply.push((route, ClientResponse { corr: PUSH_CORR, body }));
}

#[cfg(test)]
mod tests {
    use strata_wire::decode_message;

    use super::*;

    const SK: ShardKey = (3, 0);

    fn ts(n: u64) -> Timestamp {
        Timestamp::new(n, 1)
    }

    fn key(k: &str) -> Bytes {
        Bytes::copy_from_slice(k.as_bytes())
    }

    /// The pushes in `out`: (route, topic, message).
    fn pushes(out: &mut HostEffects) -> Vec<(Route, u32, KairosInvalidate)> {
        out.reply
            .drain(..)
            .map(|(route, r)| match r {
                ClientResponse { corr: PUSH_CORR, body: Response::Push { topic, body } } => {
                    (route, topic, decode_message::<KairosInvalidate>(body).unwrap())
                }
                other => panic!("not a push: {other:?}"),
            })
            .collect()
    }

    /// Registers `route` as a sharer of `k` having read `vts` (read token `token`).
    fn read(s: &mut Sharers, token: u64, route: Route, k: &str, vts: u64) {
        s.expect(token, route, key(k));
        s.on_read_reply(token, SK, route, Some(ts(vts)));
    }

    #[test]
    fn a_new_version_invalidates_each_older_reader_once_and_clears_them() {
        let (mut s, mut out) = (Sharers::default(), HostEffects::default());
        read(&mut s, 1, 10, "a", 5);
        read(&mut s, 2, 11, "a", 5);
        read(&mut s, 3, 10, "b", 5);
        assert_eq!(s.count(SK), 3);
        s.on_installed("t", SK, &key("a"), ts(9), &mut out);
        let got = pushes(&mut out);
        assert_eq!(got.len(), 2, "{got:?}");
        for (route, topic, m) in &got {
            assert!([10, 11].contains(route));
            assert_eq!(*topic, push_topic::KAIROS_INVALIDATE);
            assert_eq!(
                (m.table.as_str(), m.shard, &m.key[..], m.new_vts),
                ("t", 0, &b"a"[..], ts(9))
            );
        }
        assert_eq!((s.count(SK), s.invalidations_sent(SK)), (1, 2));
        // §5.7 "clear sharers[k]": the next version pushes nothing until someone reads again.
        s.on_installed("t", SK, &key("a"), ts(12), &mut out);
        assert!(out.reply.is_empty());
    }

    #[test]
    fn a_reader_of_the_installed_version_or_a_newer_one_stays_registered() {
        let (mut s, mut out) = (Sharers::default(), HostEffects::default());
        read(&mut s, 1, 10, "a", 9); // served after the decision, in the same step
        s.on_installed("t", SK, &key("a"), ts(9), &mut out);
        assert!(out.reply.is_empty());
        assert_eq!(s.count(SK), 1);
        s.on_installed("t", SK, &key("a"), ts(10), &mut out);
        assert_eq!(pushes(&mut out).len(), 1);
    }

    #[test]
    fn only_reads_that_asked_and_were_served_register() {
        let (mut s, mut out) = (Sharers::default(), HostEffects::default());
        s.on_read_reply(1, SK, 10, Some(ts(1))); // no flag: never expected
        s.expect(2, 10, key("a"));
        s.on_read_reply(2, SK, 10, None); // refused (not the leader, moved, ...)
        s.on_installed("t", SK, &key("a"), ts(9), &mut out);
        assert!(out.reply.is_empty());
        assert_eq!((s.count(SK), s.invalidations_sent(SK)), (0, 0));
    }

    #[test]
    fn a_leader_that_steps_down_tells_each_sharer_once_and_forgets_the_shard() {
        let (mut s, mut out) = (Sharers::default(), HostEffects::default());
        read(&mut s, 1, 10, "a", 1);
        read(&mut s, 2, 10, "b", 1);
        read(&mut s, 3, 11, "b", 1);
        s.expect(4, 12, key("c"));
        s.on_read_reply(4, (3, 1), 12, Some(ts(1))); // another shard
        assert!(s.has_shard(SK));
        s.drop_shard("t", SK, &mut out);
        let got = pushes(&mut out);
        let routes: Vec<Route> = got.iter().map(|p| p.0).collect();
        assert_eq!(routes, vec![10, 11]);
        assert!(got
            .iter()
            .all(|(_, t, m)| *t == push_topic::KAIROS_SHARERS_DROPPED && m.shard == 0));
        assert!(!s.has_shard(SK));
        assert_eq!(s.count((3, 1)), 1, "other shards keep theirs");
    }

    #[test]
    fn a_closed_connection_is_no_sharer() {
        let (mut s, mut out) = (Sharers::default(), HostEffects::default());
        read(&mut s, 1, 10, "a", 1);
        read(&mut s, 2, 11, "a", 1);
        s.on_disconnected(10);
        s.on_installed("t", SK, &key("a"), ts(2), &mut out);
        let got = pushes(&mut out);
        assert_eq!(got.iter().map(|p| p.0).collect::<Vec<_>>(), vec![11]);
    }
}
