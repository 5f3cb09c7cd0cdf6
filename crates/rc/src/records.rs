//! RIFL completion records kept with the key they mutated (`specs/rifl.md` §3.4, R-D23).
//!
//! In an rc table there is no owner of a key: every replica serves it. So the completion
//! record of a linearizable RPC lives in the key's replicated metadata and travels with the
//! key's versions — as a one-record delta in the broadcast of the version the RPC created, and
//! as the key's whole set in retransmissions, write-backs, Paxos commits and catch-ups. A
//! replica merges every set it receives, whatever the order; merging is a union, so replicas
//! converge (`merge` is commutative, associative and idempotent: `tests` below).
//!
//! Per client, a *floor* is the ack watermark (`first_incomplete - 1`) carried by its latest
//! record on this key: records at or below it are collected (§5.4 `process_ack`), and a retry
//! at or below it is `Stale`, never executed again (R-D8's ack record, kept with the key).
//!
//! Why this is enough for RMWs (the case with a real race: two nodes may both be executing
//! the same RPC after a client fail-over): a proposer computes its own tuple for slot `s` only
//! after a quorum acknowledged `s`, so it has learned every slot below `s`; every way of
//! learning a slot (own commit, `COMMIT`, catch-up `current`) brings the sender's whole record
//! set, which by induction holds the records of every slot up to it. So the second execution
//! finds the first one's record before it computes, and answers with its result.

use std::cmp::Ordering;

use strata_wire::client::Response;
use strata_wire::peer::{Completion, KeyRecords, RcResult};
use strata_wire::RpcId;

/// The most bytes of completion records a key may hold at a replica before it refuses another
/// exactly-once mutation of the key (`Busy`; docs/design.md, "Limits and bounds"). Every
/// message that carries a key's whole set (a `COMMIT`, a write-back, a catch-up) carries at
/// most the key, two values (the version's, and an RMW record's observed value) and headers
/// beside it, so the set may take what the frame leaves of that. Each replica admits against
/// its own view and the sets meet in a union: the room is split among the replicas, plus one
/// share for what another replica admits while the views differ.
pub(crate) fn budget(limits: &strata_wire::Limits, replicas: usize) -> usize {
    let room = limits
        .max_frame_bytes
        .saturating_sub(strata_wire::FRAME_SLACK_BYTES + 2 * limits.max_value_bytes);
    room / (replicas + 1)
}

/// The record bytes an exactly-once mutation may add: a write's record is fixed-size; an
/// RMW's holds the value it observes, up to the value limit.
pub(crate) fn reserve(limits: &strata_wire::Limits, rmw: bool) -> usize {
    Completion::FIXED_BYTES + if rmw { limits.max_value_bytes } else { 0 }
}

/// What a key's records say about an RPC.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lookup<'a> {
    /// It completed here: answer with this result (R-G2).
    Done(&'a RcResult),
    /// The client acknowledged it (seq at or below the floor): reply `Stale` (R-G4).
    Stale,
    /// Nothing recorded: it may execute.
    Unknown,
}

pub(crate) fn floor(rs: &KeyRecords, client_id: u64) -> u64 {
    match rs.floors.binary_search_by_key(&client_id, |&(c, _)| c) {
        Ok(i) => rs.floors[i].1,
        Err(_) => 0,
    }
}

pub(crate) fn lookup(rs: &KeyRecords, rpc: RpcId) -> Lookup<'_> {
    if rpc.seq <= floor(rs, rpc.client_id) {
        return Lookup::Stale;
    }
    match rs.done.binary_search_by(|c| c.rpc.cmp(&rpc)) {
        Ok(i) => Lookup::Done(&rs.done[i].result),
        Err(_) => Lookup::Unknown,
    }
}

/// Raises `client_id`'s floor to `ack` and collects its records at or below it.
fn raise_floor(rs: &mut KeyRecords, client_id: u64, ack: u64) {
    if ack == 0 {
        return;
    }
    match rs.floors.binary_search_by_key(&client_id, |&(c, _)| c) {
        Ok(i) if rs.floors[i].1 >= ack => return,
        Ok(i) => rs.floors[i].1 = ack,
        Err(i) => rs.floors.insert(i, (client_id, ack)),
    }
    rs.done.retain(|c| c.rpc.client_id != client_id || c.rpc.seq > ack);
}

/// The record of the RPC that wrote plain version `cs`, if it is still live (as a one-record
/// set, what the version's first broadcast carried).
pub(crate) fn of_version(rs: &KeyRecords, cs: strata_wire::Carstamp) -> KeyRecords {
    let own = rs.done.iter().find(|c| matches!(c.result, RcResult::Written { cs: w } if w == cs));
    KeyRecords { floors: Vec::new(), done: own.cloned().into_iter().collect() }
}

/// Drops every floor and record of `clients` (their leases expired, rifl.md §5.6).
pub(crate) fn forget_clients(rs: &mut KeyRecords, clients: &std::collections::HashSet<u64>) {
    rs.floors.retain(|(c, _)| !clients.contains(c));
    rs.done.retain(|c| !clients.contains(&c.rpc.client_id));
}

/// The sweep (`RcReplica::sweep_records`): drops every record its client has acknowledged and
/// every floor, once the node's own watermark of the client (`ack_of`) covers them. From then
/// on the node answers a late duplicate `Stale` from that watermark, so the key keeps nothing
/// for a client without an unacknowledged RPC on it: per key, state and the sets sent to peers
/// stay bounded by the clients with work in flight, not by every client that ever wrote it.
pub(crate) fn collect_acked(rs: &mut KeyRecords, ack_of: impl Fn(u64) -> u64) {
    rs.done.retain(|c| c.rpc.seq > ack_of(c.rpc.client_id));
    rs.floors.retain(|&(client, floor)| floor > ack_of(client));
}

/// Adds one completion record (and the acknowledgement it carries). A second record for the
/// same RPC keeps the first: one execution, one result (R-G2).
pub(crate) fn add(rs: &mut KeyRecords, c: &Completion) {
    raise_floor(rs, c.rpc.client_id, c.ack);
    if c.rpc.seq <= floor(rs, c.rpc.client_id) {
        return;
    }
    if let Err(i) = rs.done.binary_search_by(|d| d.rpc.cmp(&c.rpc)) {
        rs.done.insert(i, owned(c));
    }
}

/// A copy of `c` in allocations of its own: a record decoded from the network holds slices of
/// the read buffer, which a long-lived record would otherwise pin whole.
fn owned(c: &Completion) -> Completion {
    let result = match &c.result {
        RcResult::Rmw { observed: Some(v), observed_cs, written, swapped } => RcResult::Rmw {
            observed: Some(bytes::Bytes::copy_from_slice(v)),
            observed_cs: *observed_cs,
            written: *written,
            swapped: *swapped,
        },
        other => other.clone(),
    };
    Completion { rpc: c.rpc, ack: c.ack, result }
}

/// Merges another replica's set into `rs` (a union: floors by maximum, records above them).
pub(crate) fn merge(rs: &mut KeyRecords, from: &KeyRecords) {
    for &(client, ack) in &from.floors {
        raise_floor(rs, client, ack);
    }
    for c in &from.done {
        add(rs, c);
    }
}

/// The reply a retry gets from a record.
pub(crate) fn response(r: &RcResult) -> Response {
    match r {
        RcResult::Written { cs } => Response::Written { cs: *cs },
        RcResult::Rmw { observed, observed_cs, written, swapped } => Response::Rmw {
            observed: observed.clone(),
            observed_cs: *observed_cs,
            written: *written,
            swapped: *swapped,
        },
    }
}

/// The set's own invariants: both lists sorted and unique, no record at or below its floor.
pub(crate) fn check(rs: &KeyRecords) -> Result<(), String> {
    if rs.floors.windows(2).any(|w| w[0].0.cmp(&w[1].0) != Ordering::Less) {
        return Err("floors not sorted by client".into());
    }
    if rs.done.windows(2).any(|w| w[0].rpc.cmp(&w[1].rpc) != Ordering::Less) {
        return Err("records not sorted by rpc id".into());
    }
    if let Some(c) = rs.done.iter().find(|c| c.rpc.seq <= floor(rs, c.rpc.client_id)) {
        return Err(format!("record {} at or below its client's floor", c.rpc));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use strata_wire::{Carstamp, Llc, NodeId};

    fn rec(client_id: u64, seq: u64, ack: u64) -> Completion {
        let cs = Carstamp { llc: Llc { ver: seq, node: NodeId(client_id as u32) }, pno: 0 };
        Completion { rpc: RpcId { client_id, seq }, ack, result: RcResult::Written { cs } }
    }

    #[test]
    fn a_record_answers_its_retries_until_a_later_ack_makes_them_stale() {
        let mut rs = KeyRecords::default();
        let a = rec(7, 3, 2);
        add(&mut rs, &a);
        assert_eq!(lookup(&rs, a.rpc), Lookup::Done(&a.result));
        assert_eq!(
            lookup(&rs, RpcId { client_id: 7, seq: 2 }),
            Lookup::Stale,
            "at or below the ack it carried"
        );
        assert_eq!(lookup(&rs, RpcId { client_id: 7, seq: 4 }), Lookup::Unknown);
        assert_eq!(lookup(&rs, RpcId { client_id: 8, seq: 3 }), Lookup::Unknown, "another client");
        // The client's next write here acknowledges seq 3: its record is collected.
        add(&mut rs, &rec(7, 9, 5));
        assert_eq!(lookup(&rs, a.rpc), Lookup::Stale);
        assert_eq!(rs.done.len(), 1);
        check(&rs).unwrap();
    }

    #[test]
    fn forgetting_an_expired_client_drops_its_floor_and_records_and_keeps_the_others() {
        let mut rs = KeyRecords::default();
        add(&mut rs, &rec(7, 3, 2));
        add(&mut rs, &rec(8, 4, 1));
        forget_clients(&mut rs, &[7].into_iter().collect());
        assert_eq!(lookup(&rs, RpcId { client_id: 7, seq: 3 }), Lookup::Unknown, "record gone");
        assert_eq!(lookup(&rs, RpcId { client_id: 7, seq: 2 }), Lookup::Unknown, "floor gone");
        assert!(
            matches!(lookup(&rs, RpcId { client_id: 8, seq: 4 }), Lookup::Done(_)),
            "other clients keep theirs"
        );
        check(&rs).unwrap();
    }

    #[test]
    fn the_first_record_of_an_rpc_wins() {
        let mut rs = KeyRecords::default();
        let first = rec(1, 5, 0);
        let mut second = rec(1, 5, 0);
        second.result = RcResult::Written { cs: Carstamp::ZERO };
        add(&mut rs, &first);
        add(&mut rs, &second);
        assert_eq!(lookup(&rs, first.rpc), Lookup::Done(&first.result));
    }

    #[test]
    fn check_flags_a_record_below_its_floor() {
        let rs = KeyRecords { floors: vec![(1, 5)], done: vec![rec(1, 4, 0)] };
        assert!(check(&rs).is_err());
    }

    /// Records of real executions: one per RPC, so its ack is a function of the RPC.
    fn records() -> impl Strategy<Value = Vec<Completion>> {
        prop::collection::vec((1u64..4, 1u64..12), 0..12)
            .prop_map(|v| v.into_iter().map(|(c, s)| rec(c, s, (s * 7 + c) % s)).collect())
    }

    fn set_of(v: &[Completion]) -> KeyRecords {
        let mut rs = KeyRecords::default();
        for c in v {
            add(&mut rs, c);
        }
        rs
    }

    proptest! {
        /// Replicas that received the same records in any order, or as merged sets, agree.
        #[test]
        fn merge_is_a_union_whatever_the_order(a in records(), b in records(), c in records()) {
            let (sa, sb, sc) = (set_of(&a), set_of(&b), set_of(&c));
            let mut ab_c = sa.clone();
            merge(&mut ab_c, &sb);
            merge(&mut ab_c, &sc);
            let mut c_ba = sc.clone();
            merge(&mut c_ba, &sb);
            merge(&mut c_ba, &sa);
            prop_assert_eq!(&ab_c, &c_ba);
            let mut again = ab_c.clone();
            merge(&mut again, &sa);
            prop_assert_eq!(&again, &ab_c, "idempotent");
            let all: Vec<Completion> = a.iter().chain(&b).chain(&c).cloned().collect();
            let mut one_by_one = KeyRecords::default();
            for r in all.iter().rev() {
                add(&mut one_by_one, r);
            }
            prop_assert_eq!(&one_by_one.floors, &ab_c.floors);
            check(&ab_c).map_err(TestCaseError::fail)?;
        }
    }
}
