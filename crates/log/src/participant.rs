//! A shard's part in transactions (rifl.md §5.8.2–§5.8.4, §5.9): the locks of prepared
//! objects and the recovery coordinators' decision records, kept in the applied state of the
//! shard's log, so every replica, a replay after a restart and a new leader hold the same.
//! Votes are the prepares' completion records (`state::Kv`); this module holds what outlives
//! them until the decision.
//!
//! Pure data: `Kv::apply` decides, from applied state only, what each transaction entry does.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use strata_wire::rifl::RpcId;
use strata_wire::txn::{DecisionRecord, Lock, TxnId};

/// Locks by key, their index by prepare id, and the decision records.
#[derive(Clone, Debug, Default)]
pub(crate) struct Participant {
    locks: HashMap<Bytes, Lock>,
    by_rpc: HashMap<RpcId, Bytes>,
    /// The prepares holding locks, by client: such a client is protected from collection
    /// (R-D14), and its acknowledgements stop below them (see `ack_bound`).
    held: BTreeSet<(u64, u64)>,
    decisions: BTreeMap<TxnId, DecisionRecord>,
}

impl Participant {
    pub fn from_parts(locks: &[Lock], decisions: &[DecisionRecord]) -> Participant {
        let mut p = Participant::default();
        for l in locks {
            p.lock(l.clone());
        }
        p.decisions = decisions.iter().map(|d| (d.txn, d.clone())).collect();
        p
    }

    pub fn is_locked(&self, key: &[u8]) -> bool {
        self.locks.contains_key(key)
    }

    /// The lock on `key`, if any.
    pub fn lock_on(&self, key: &[u8]) -> Option<&Lock> {
        self.locks.get(key)
    }

    pub fn lock(&mut self, l: Lock) {
        let rpc = RpcId { client_id: l.txn.client_id, seq: l.seq };
        assert!(!self.locks.contains_key(&l.key), "one lock per object (rifl.md §7 inv. 13)");
        self.held.insert((rpc.client_id, rpc.seq));
        self.by_rpc.insert(rpc, l.key.clone());
        self.locks.insert(l.key.clone(), l);
    }

    /// The lock prepare `rpc` holds, if any.
    pub fn lock_of(&self, rpc: RpcId) -> Option<&Lock> {
        self.by_rpc.get(&rpc).and_then(|key| self.locks.get(key))
    }

    /// Releases the lock of prepare `rpc`, if it still holds one.
    pub fn unlock(&mut self, rpc: RpcId) -> Option<Lock> {
        let key = self.by_rpc.remove(&rpc)?;
        let l = self.locks.remove(&key).expect("indexed lock");
        self.held.remove(&(rpc.client_id, rpc.seq));
        Some(l)
    }

    /// Whether the client holds a lock here or a coordinator recovers one of its transactions
    /// here: then its records must not be collected when its lease expires (R-D14).
    pub fn protects(&self, client_id: u64) -> bool {
        self.held.range((client_id, 0)..=(client_id, u64::MAX)).next().is_some()
            || self.decisions.keys().any(|t| t.client_id == client_id)
    }

    /// The largest acknowledgement of `client_id` this shard may learn: below its oldest
    /// locked prepare. An honest client acknowledges a transaction's ids only after every
    /// decision (§5.8.1 T7); one that does so earlier must not make a locked object's vote
    /// vanish (§7 inv. 14), or recovery would find `Stale` and leave the lock for ever.
    pub fn ack_bound(&self, client_id: u64, ack: u64) -> u64 {
        match self.held.range((client_id, 0)..=(client_id, u64::MAX)).next() {
            Some(&(_, seq)) => ack.min(seq - 1),
            None => ack,
        }
    }

    pub fn record_decision(&mut self, d: DecisionRecord) {
        self.decisions.entry(d.txn).or_insert(d);
    }

    pub fn resolve(&mut self, txn: TxnId) {
        self.decisions.remove(&txn);
    }

    /// No lock and no decision record (O(1): the node asks after every input).
    pub fn is_empty(&self) -> bool {
        self.locks.is_empty() && self.decisions.is_empty()
    }

    pub fn locks(&self) -> impl Iterator<Item = &Lock> {
        self.locks.values()
    }

    pub fn decisions(&self) -> impl Iterator<Item = &DecisionRecord> {
        self.decisions.values()
    }

    /// Locks sorted by key, and decision records by transaction: a snapshot's form.
    pub fn to_parts(&self) -> (Vec<Lock>, Vec<DecisionRecord>) {
        let mut locks: Vec<Lock> = self.locks.values().cloned().collect();
        locks.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        (locks, self.decisions.values().cloned().collect())
    }

    /// The index is consistent with the locks, and counts match (`check_invariants`).
    pub fn check(&self) -> Result<(), String> {
        if self.by_rpc.len() != self.locks.len() {
            return Err(format!("{} locks, {} indexed", self.locks.len(), self.by_rpc.len()));
        }
        for (rpc, key) in &self.by_rpc {
            let l = self.locks.get(key).ok_or("an index entry without its lock")?;
            if (l.txn.client_id, l.seq) != (rpc.client_id, rpc.seq) {
                return Err(format!("lock of {key:?} indexed under {rpc}"));
            }
        }
        if self.held.len() != self.locks.len() {
            return Err(format!("{} locks counted for {} held", self.held.len(), self.locks.len()));
        }
        Ok(())
    }
}
