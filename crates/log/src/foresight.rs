//! The leader's foresight (departure, docs/design.md "Transactions read what the leader's
//! pending single-participant transactions leave"): what its appended, not yet applied
//! entries will do to each key, where that is known. Entries apply in log order and a
//! single-participant (`whole`) RIFL prepare is decided by its own apply (R-D17), so the
//! leader can evaluate one against the state its earlier entries leave, the way every replica
//! will when it applies it. Two things use it:
//!
//! * a transaction's read (`LogRequest::Read` with a transaction's `ReadIntent`) is answered with the value
//!   and version a pending transaction will leave, instead of the applied one its prepare
//!   would find changed: the window in which a hot key's reader conflicts shrinks from
//!   "read until applied" to "read until appended";
//! * a single-participant prepare that is foreseen to vote `Abort` is answered at once,
//!   without an entry (nothing is locked or recorded; the client starts a new attempt).
//!
//! A pending `Commit` decision of a transaction over several shards is foreseen too
//! (`txn.rs`, `foresee_decide`): it writes each locked value at its own index, so a read of a
//! locked key is answered once the decision is appended rather than once it is applied.
//!
//! Neither is trusted for safety. A prepare's votes are still decided when it applies, by
//! its version checks; versions are log indexes, unique across terms, so a read of a value
//! whose entry a later leader drops can never validate. An abort needs no proof: answering
//! `Abort` for an attempt that left no entry is always allowed (its ids are not reused).
//! Soft state of one term: a new leader starts with none (`LeaderState`).

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use strata_wire::log::LogIndex;

/// What the pending entries will leave at a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Foreseen {
    /// A pending prepare foreseen to commit, or a pending `Commit` decision, leaves this value
    /// (`None`: deleted) at `version`, its own index.
    Known { value: Option<Bytes>, version: LogIndex },
    /// A pending entry (a plain write, a participant's prepare, an unforeseeable one) changes
    /// the key or locks it; known once `until` is applied.
    Unknown { until: LogIndex },
}

impl Foreseen {
    /// The entry that decides this.
    pub fn index(&self) -> LogIndex {
        match self {
            Foreseen::Known { version, .. } => *version,
            Foreseen::Unknown { until } => *until,
        }
    }
}

/// Per key, the latest pending entry's effect; entries at or below the applied index are
/// forgotten (the applied state holds them).
#[derive(Clone, Debug, Default)]
pub(crate) struct Foresight {
    keys: HashMap<Bytes, Foreseen>,
    /// The keys each pending entry set, to forget them once it is applied.
    by_index: BTreeMap<LogIndex, Vec<Bytes>>,
}

impl Foresight {
    /// What the entries after `applied` leave at `key`, if any of them touches it.
    pub fn get(&self, key: &[u8], applied: LogIndex) -> Option<&Foreseen> {
        self.keys.get(key).filter(|f| f.index() > applied)
    }

    /// The entry at `f.index()` (the latest appended) leaves `f` at `key`.
    pub fn note(&mut self, key: Bytes, f: Foreseen) {
        self.by_index.entry(f.index()).or_default().push(key.clone());
        self.keys.insert(key, f);
    }

    /// Drops what the entries up to `applied` foresaw (a later entry's note stays).
    pub fn forget_applied(&mut self, applied: LogIndex) {
        while let Some(entry) = self.by_index.first_entry() {
            if *entry.key() > applied {
                break;
            }
            let (index, keys) = entry.remove_entry();
            for k in keys {
                if self.keys.get(&k).is_some_and(|f| f.index() == index) {
                    self.keys.remove(&k);
                }
            }
        }
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(v: &'static str, counter: u32) -> Foreseen {
        Foreseen::Known { value: Some(Bytes::from(v)), version: LogIndex::new(1, counter) }
    }

    #[test]
    fn the_latest_entry_wins_and_is_forgotten_only_once_applied() {
        let mut f = Foresight::default();
        f.note(Bytes::from("k"), known("a", 3));
        f.note(Bytes::from("k"), known("b", 5));
        f.note(Bytes::from("j"), Foreseen::Unknown { until: LogIndex::new(1, 4) });
        assert_eq!(f.get(b"k", LogIndex::new(1, 2)), Some(&known("b", 5)));
        // Applying entry 4 forgets `j` but not `k`, whose latest note is entry 5's.
        f.forget_applied(LogIndex::new(1, 4));
        assert_eq!(f.get(b"j", LogIndex::new(1, 4)), None);
        assert_eq!(f.get(b"k", LogIndex::new(1, 4)), Some(&known("b", 5)));
        f.forget_applied(LogIndex::new(1, 5));
        assert!(f.is_empty());
    }

    #[test]
    fn a_note_at_or_below_the_applied_index_is_not_foreseen() {
        let mut f = Foresight::default();
        f.note(Bytes::from("k"), known("a", 3));
        assert_eq!(f.get(b"k", LogIndex::new(1, 3)), None, "the applied state holds it");
    }
}
