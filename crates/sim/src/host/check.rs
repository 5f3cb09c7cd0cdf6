//! Checkers over a host-simulator run: what the clients saw ([`ClientLog`]) against the final
//! state of every shard ([`FinalShard`], read from the replica that applied the most).
//!
//! * [`acked_writes_survive`]: every acknowledged write is in the final state, at the index it
//!   was acknowledged with — across crashes, leader changes and shard moves. Only for `sync`
//!   tables: `async` and `cad` acknowledge before a write is durable at a majority, and a crash
//!   or a deposed leader may lose it (ORCA §2.2), which is their contract;
//! * [`frozen_state_survives`]: whatever durability, every item of a shard's frozen state
//!   (which the freeze made durable at a majority) is in the final state at its update index:
//!   a move loses nothing it froze (rifl.md §5.7);
//! * [`stable_results`]: every answer to the same RPC names the same index (rifl.md §7 inv. 1
//!   and 2: a retry gets the first result, never a second execution), across moves;
//! * [`moved_items_not_executed_again`]: an item a shard move carried keeps its update index
//!   (a retry after the move is answered from the moved record, never executed again);
//! * [`no_failed_answers`]: no write was refused with an error this workload cannot cause
//!   (`Stale`, `BadEnvelope`, …);
//! * [`no_execution_after_expiry`]: rifl.md §7 inv. 9 — once an `Expire` entry (or a moved-in
//!   state's expired set) names a client, none of its later entries changes the state.
//!
//! Each has a canary: a planted bug in the move (`MovePlant`) or a known-bad history in the
//! tests below.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use strata_wire::client::shard_of;
use strata_wire::log::{LogEntry, LogIndex, LogOp};

use super::client::{ClientLog, Outcome};

/// One shard's final state and log, as its most advanced replica applied them.
#[derive(Clone, Debug, Default)]
pub struct FinalShard {
    /// Every key: its value (or tombstone) and update index.
    pub items: BTreeMap<Bytes, (Option<Bytes>, LogIndex)>,
    /// The replica group's log, from its first entry.
    pub log: Vec<LogEntry>,
}

/// The final state of a table: its shards by number.
#[derive(Clone, Debug, Default)]
pub struct FinalTable {
    pub shards: Vec<FinalShard>,
}

pub fn acked_writes_survive(log: &ClientLog, tables: &BTreeMap<String, FinalTable>) -> Vec<String> {
    let mut v = Vec::new();
    for w in &log.writes {
        let Some(index) = w.answers.iter().find_map(|a| match a {
            Outcome::Acked(i) => Some(*i),
            _ => None,
        }) else {
            continue;
        };
        let Some(t) = tables.get(&w.table) else {
            v.push(format!("table {} of acknowledged write {} is gone", w.table, w.rpc));
            continue;
        };
        let shard = shard_of(&w.key, t.shards.len() as u32) as usize;
        match t.shards[shard].items.get(&w.key) {
            Some((Some(value), at)) if *value == w.value && *at == index => {}
            found => v.push(format!(
                "acknowledged write {} ({:?} = {:?} at {index}) is not in the final state of {}/{shard}: found {found:?}",
                w.rpc, w.key, w.value, w.table
            )),
        }
    }
    v
}

pub fn frozen_state_survives(
    log: &ClientLog,
    tables: &BTreeMap<String, FinalTable>,
) -> Vec<String> {
    let mut v = Vec::new();
    for (table, shard, snapshot) in &log.frozen {
        let Some(s) = tables.get(table).and_then(|t| t.shards.get(*shard as usize)) else {
            v.push(format!("moved shard {table}/{shard} is gone"));
            continue;
        };
        for (key, value, at) in &snapshot.items {
            match s.items.get(key) {
                Some((v2, at2)) if v2 == value && at2 == at => {}
                found => v.push(format!(
                    "{table}/{shard}: {key:?} was frozen at {at} for a move but the final state has {found:?}"
                )),
            }
        }
    }
    v
}

pub fn stable_results(log: &ClientLog) -> Vec<String> {
    let mut v = Vec::new();
    for w in &log.writes {
        let indexes: BTreeSet<LogIndex> = w
            .answers
            .iter()
            .filter_map(|a| match a {
                Outcome::Acked(i) => Some(*i),
                _ => None,
            })
            .collect();
        if indexes.len() > 1 {
            v.push(format!("{} was acknowledged at different indexes: {indexes:?}", w.rpc));
        }
    }
    v
}

pub fn no_failed_answers(log: &ClientLog) -> Vec<String> {
    log.writes
        .iter()
        .flat_map(|w| {
            w.answers.iter().filter_map(move |a| match a {
                Outcome::Failed(m) => Some(format!("{} failed: {m}", w.rpc)),
                _ => None,
            })
        })
        .collect()
}

/// Exactly once across a move (rifl.md §5.7, §7 inv. 1): every item a moved-in state carried
/// keeps its update index, since each key is written by one RPC and that RPC already executed
/// (its retry after the move must be answered from the moved record, not executed again).
pub fn moved_items_not_executed_again(table: &str, shard: usize, s: &FinalShard) -> Vec<String> {
    let mut v = Vec::new();
    for e in &s.log {
        let LogOp::Install(snapshot) = &e.op else { continue };
        for (key, _, at) in &snapshot.items {
            match s.items.get(key) {
                Some((_, now)) if now == at => {}
                found => v.push(format!(
                    "{table}/{shard}: {key:?} moved in at {at} but the final state has {found:?}: its RPC executed again after the move"
                )),
            }
        }
    }
    v
}

/// The courier (`strata_host::courier`): a delivered message was handled by the shard's leader —
/// at most one node answers as the leader of a shard in one epoch (ORCA §3.1: one leader per
/// epoch) — and answered with its own body; every message of a sender still running at the end
/// has an outcome (`alive(node, incarnation)`).
pub fn mail_reached_the_leader(log: &ClientLog, alive: impl Fn(usize, u64) -> bool) -> Vec<String> {
    let mut v = Vec::new();
    let mut leaders: BTreeMap<(u32, u32), strata_wire::NodeId> = BTreeMap::new();
    for m in &log.mails {
        match &m.outcome {
            Some(Ok(d)) => {
                if d.body != m.body {
                    v.push(format!(
                        "message {} of n{} came back with {:?}, not {:?}",
                        m.id, m.from, d.body, m.body
                    ));
                }
                if let Some(other) = leaders.insert((m.shard, d.epoch), d.by).filter(|o| *o != d.by)
                {
                    v.push(format!(
                        "both {other} and {} answered as the leader of shard {} in epoch {}",
                        d.by, m.shard, d.epoch
                    ));
                }
            }
            Some(Err(_)) => {}
            None if alive(m.from, m.incarnation) => {
                v.push(format!("message {} of n{} never got an outcome", m.id, m.from));
            }
            None => {}
        }
    }
    v
}

/// rifl.md §7 inv. 9 over one shard's final log (module docs): an entry of a client that an
/// earlier `Expire` (or the installed state) named must not be the one that set its key.
pub fn no_execution_after_expiry(table: &str, shard: usize, s: &FinalShard) -> Vec<String> {
    let mut expired: BTreeSet<u64> = BTreeSet::new();
    let mut v = Vec::new();
    for e in &s.log {
        match &e.op {
            LogOp::Expire(clients) => expired.extend(clients),
            LogOp::Install(snapshot) => expired.extend(&snapshot.expired),
            // It executed if it is what set its key (keys are written by one RPC each).
            LogOp::Put(_) | LogOp::Delete
                if expired.contains(&e.client_id)
                    && s.items.get(&e.key).is_some_and(|(_, at)| *at == e.index) =>
            {
                v.push(format!(
                    "{table}/{shard}: entry {} of client {} (seq {}) executed after the client's records were collected",
                    e.index, e.client_id, e.seq
                ));
            }
            _ => {}
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use strata_wire::log::Snapshot;
    use strata_wire::rifl::RpcId;

    use super::super::client::WriteRecord;
    use super::*;

    fn entry(index: LogIndex, client_id: u64, seq: u64, op: LogOp, key: &str) -> LogEntry {
        LogEntry {
            index,
            key: Bytes::from(key.to_string()),
            op,
            client_id,
            seq,
            ack: 0,
            immediate: false,
        }
    }

    fn put(v: &str) -> LogOp {
        LogOp::Put(Bytes::from(v.to_string()))
    }

    #[test]
    fn an_entry_after_its_clients_expiry_that_set_its_key_is_flagged() {
        let i = |c| LogIndex::new(2, c);
        let mut s = FinalShard {
            log: vec![
                entry(i(1), 7, 1, put("a"), "k1"),
                entry(i(2), 0, 0, LogOp::Expire(vec![7]), ""),
                entry(i(3), 7, 2, put("b"), "k2"),
            ],
            ..FinalShard::default()
        };
        s.items.insert(Bytes::from("k1"), (Some(Bytes::from("a")), i(1)));
        // Applied as a no-op: k2 has no value from entry 3. Clean.
        assert!(no_execution_after_expiry("t", 0, &s).is_empty());
        // Known-bad: entry 3 set k2 (the NoDedup bug: the expired filter skipped).
        s.items.insert(Bytes::from("k2"), (Some(Bytes::from("b")), i(3)));
        let found = no_execution_after_expiry("t", 0, &s);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("client 7"), "{found:?}");
        // The same through a moved-in state's expired set.
        let snapshot = Snapshot { last_included: i(0), expired: vec![7], ..Snapshot::default() };
        s.log = vec![entry(i(1), 0, 0, LogOp::Install(Box::new(snapshot)), ""), s.log[2].clone()];
        assert_eq!(no_execution_after_expiry("t", 0, &s).len(), 1);
    }

    #[test]
    fn an_item_written_again_after_its_move_is_flagged() {
        let i = |c| LogIndex::new(3, c);
        let snapshot = Snapshot {
            last_included: LogIndex::new(2, 9),
            items: vec![(Bytes::from("k"), Some(Bytes::from("v")), LogIndex::new(2, 4))],
            ..Snapshot::default()
        };
        let mut s = FinalShard {
            log: vec![entry(i(1), 0, 0, LogOp::Install(Box::new(snapshot)), "")],
            ..FinalShard::default()
        };
        s.items.insert(Bytes::from("k"), (Some(Bytes::from("v")), LogIndex::new(2, 4)));
        assert!(moved_items_not_executed_again("t", 0, &s).is_empty());
        // Known-bad: the retry executed at the new group (a move without the records).
        s.log.push(entry(i(2), 5, 1, put("v"), "k"));
        s.items.insert(Bytes::from("k"), (Some(Bytes::from("v")), i(2)));
        assert_eq!(moved_items_not_executed_again("t", 0, &s).len(), 1);
    }

    #[test]
    fn two_leaders_in_one_epoch_and_a_wrong_echo_are_flagged() {
        use super::super::client::MailRecord;
        use strata_host::courier::Delivered;
        use strata_wire::NodeId;
        let mail = |id, by: u32, epoch, body: &str| MailRecord {
            from: 0,
            incarnation: 1,
            id,
            shard: 0,
            body: Bytes::from(format!("m{id}")),
            outcome: Some(Ok(Delivered {
                by: NodeId(by),
                epoch,
                body: Bytes::from(body.to_string()),
            })),
        };
        let good = ClientLog {
            mails: vec![mail(1, 1, 3, "m1"), mail(2, 1, 3, "m2"), mail(3, 2, 4, "m3")],
            ..ClientLog::default()
        };
        assert!(mail_reached_the_leader(&good, |_, _| true).is_empty());
        let two = ClientLog {
            mails: vec![mail(1, 1, 3, "m1"), mail(2, 2, 3, "m2")],
            ..ClientLog::default()
        };
        assert_eq!(mail_reached_the_leader(&two, |_, _| true).len(), 1, "two leaders in epoch 3");
        let wrong = ClientLog { mails: vec![mail(1, 1, 3, "m9")], ..ClientLog::default() };
        assert_eq!(mail_reached_the_leader(&wrong, |_, _| true).len(), 1);
        let mut lost = mail(4, 1, 3, "m4");
        lost.outcome = None;
        let pending = ClientLog { mails: vec![lost], ..ClientLog::default() };
        assert_eq!(mail_reached_the_leader(&pending, |_, _| true).len(), 1, "no outcome");
        assert!(mail_reached_the_leader(&pending, |_, _| false).is_empty(), "its sender crashed");
    }

    #[test]
    fn a_lost_acknowledged_write_and_an_unstable_result_are_flagged() {
        let rpc = RpcId { client_id: 3, seq: 1 };
        let w = |answers| WriteRecord {
            rpc,
            table: "t".into(),
            key: Bytes::from("k"),
            value: Bytes::from("v"),
            answers,
            first_sent: strata_wire::Instant::ZERO,
            attempts: 1,
            answered_at: None,
        };
        let at = LogIndex::new(1, 5);
        let log = ClientLog { writes: vec![w(vec![Outcome::Acked(at)])], ..ClientLog::default() };
        let mut t = FinalTable { shards: vec![FinalShard::default()] };
        let tables = |t: &FinalTable| BTreeMap::from([("t".to_string(), t.clone())]);
        assert_eq!(acked_writes_survive(&log, &tables(&t)).len(), 1, "missing");
        t.shards[0].items.insert(Bytes::from("k"), (Some(Bytes::from("v")), LogIndex::new(2, 1)));
        assert_eq!(acked_writes_survive(&log, &tables(&t)).len(), 1, "executed again elsewhere");
        t.shards[0].items.insert(Bytes::from("k"), (Some(Bytes::from("v")), at));
        assert!(acked_writes_survive(&log, &tables(&t)).is_empty());

        let twice = ClientLog {
            writes: vec![w(vec![Outcome::Acked(at), Outcome::Acked(LogIndex::new(2, 1))])],
            ..ClientLog::default()
        };
        assert_eq!(stable_results(&twice).len(), 1);
        assert!(stable_results(&log).is_empty());
        let failed = ClientLog {
            writes: vec![w(vec![Outcome::Failed("Stale".into())])],
            ..ClientLog::default()
        };
        assert_eq!(no_failed_answers(&failed).len(), 1);
    }
}
