//! The in-memory log (`mem_log`) and the applied key-value state with its duplicate filter
//! (ORCA §3.1). Pure data structures: no protocol decisions here.

use std::collections::HashMap;

use bytes::Bytes;
use strata_wire::log::{LogEntry, LogIndex, LogOp};

use crate::api::Snapshot;

/// The log after an optional snapshot. Indexes strictly increase but are not contiguous across
/// epochs, so positions are found by binary search.
#[derive(Clone, Debug, Default)]
pub(crate) struct Log {
    /// The snapshot's last index (`ZERO` without one): the log "contains" it.
    base: LogIndex,
    entries: Vec<LogEntry>,
}

impl Log {
    pub fn new(base: LogIndex, entries: Vec<LogEntry>) -> Log {
        Log { base, entries }
    }

    pub fn last_index(&self) -> LogIndex {
        self.entries.last().map_or(self.base, |e| e.index)
    }

    pub fn base(&self) -> LogIndex {
        self.base
    }

    pub fn entries(&self) -> &[LogEntry] {
        &self.entries
    }

    fn position(&self, idx: LogIndex) -> Result<usize, usize> {
        self.entries.binary_search_by_key(&idx, |e| e.index)
    }

    /// Whether the log holds an entry at `idx` (the snapshot base and `ZERO` count).
    pub fn contains(&self, idx: LogIndex) -> bool {
        idx == LogIndex::ZERO || idx == self.base || self.position(idx).is_ok()
    }

    /// The largest index held that is `<= idx` (the base if none): where a leader backs up to.
    pub fn at_or_below(&self, idx: LogIndex) -> LogIndex {
        match self.position(idx) {
            Ok(p) => self.entries[p].index,
            Err(0) => self.base.min(idx),
            Err(p) => self.entries[p - 1].index,
        }
    }

    /// Entries with index in `(after, ..]`.
    pub fn after(&self, after: LogIndex) -> &[LogEntry] {
        let start = match self.position(after) {
            Ok(p) => p + 1,
            Err(p) => p,
        };
        &self.entries[start..]
    }

    /// Entries with index in `(after, upto]`.
    pub fn range(&self, after: LogIndex, upto: LogIndex) -> impl Iterator<Item = &LogEntry> {
        self.after(after)
            .iter()
            .take_while(move |e| e.index <= upto)
    }

    pub fn append(&mut self, e: LogEntry) {
        assert!(
            e.index > self.last_index(),
            "log indexes strictly increase: {} after {}",
            e.index,
            self.last_index()
        );
        self.entries.push(e);
    }

    /// Removes every entry after `after`; returns the last removed index, if any.
    pub fn truncate_after(&mut self, after: LogIndex) -> Option<LogIndex> {
        assert!(after >= self.base, "cannot truncate into the snapshot");
        let removed = self.entries.last().map(|e| e.index).filter(|&l| l > after);
        let keep = self.after(LogIndex::ZERO).len() - self.after(after).len();
        self.entries.truncate(keep);
        removed
    }
}

/// One key's applied state. A delete leaves a tombstone carrying its index (§3.1 [DECISION],
/// §9.10: never collected).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Item {
    pub value: Option<Bytes>,
    pub update_index: LogIndex,
}

/// The applied state: items, the duplicate filter, and the applied index.
#[derive(Clone, Debug, Default)]
pub(crate) struct Kv {
    items: HashMap<Bytes, Item>,
    /// ORCA §2.1 [DECISION]: client -> (last applied seq, its index). Replicated state.
    dedup: HashMap<u64, (u64, LogIndex)>,
    applied: LogIndex,
}

impl Kv {
    pub fn from_snapshot(s: Option<&Snapshot>) -> Kv {
        let Some(s) = s else { return Kv::default() };
        Kv {
            items: s
                .items
                .iter()
                .map(|(k, v, u)| {
                    (
                        k.clone(),
                        Item {
                            value: v.clone(),
                            update_index: *u,
                        },
                    )
                })
                .collect(),
            dedup: s
                .dedup
                .iter()
                .map(|&(c, seq, idx)| (c, (seq, idx)))
                .collect(),
            applied: s.last_included,
        }
    }

    pub fn applied(&self) -> LogIndex {
        self.applied
    }

    /// ORCA §5.2: applying sets the key's value and update-index, the dedup record, and the
    /// applied index. `NoOp` moves only the applied index.
    pub fn apply(&mut self, e: &LogEntry) {
        assert!(
            e.index > self.applied,
            "entries apply in log order: {} after {}",
            e.index,
            self.applied
        );
        let value = match &e.op {
            LogOp::Put(v) => Some(v.clone()),
            LogOp::Delete => None,
            LogOp::NoOp => {
                self.applied = e.index;
                return;
            }
        };
        // A duplicate of an applied `(client_id, seq)` (a retry appended twice across a leader
        // change) changes nothing (§2.1 duplicate filter).
        if self
            .dedup
            .get(&e.client_id)
            .is_some_and(|&(s, _)| e.seq <= s)
        {
            self.applied = e.index;
            return;
        }
        // Own allocation: entry bytes may be slices of a large network buffer.
        let key = Bytes::copy_from_slice(&e.key);
        self.items.insert(
            key,
            Item {
                value,
                update_index: e.index,
            },
        );
        self.dedup.insert(e.client_id, (e.seq, e.index));
        self.applied = e.index;
    }

    /// `(value, update_index)`; an absent key has `(None, ZERO)` (§5.5.1 step 3).
    pub fn get(&self, key: &[u8]) -> (Option<Bytes>, LogIndex) {
        self.items.get(key).map_or((None, LogIndex::ZERO), |i| {
            (i.value.clone(), i.update_index)
        })
    }

    /// The last applied `(seq, index)` of `client`.
    pub fn dedup(&self, client: u64) -> Option<(u64, LogIndex)> {
        self.dedup.get(&client).copied()
    }
}

/// A test entry: `k = v` at `(epoch, counter)`, from client 1 with `seq = counter`.
#[cfg(test)]
pub(crate) fn test_entry(epoch: u32, counter: u32) -> LogEntry {
    LogEntry {
        index: LogIndex::new(epoch, counter),
        key: Bytes::from_static(b"k"),
        op: LogOp::Put(Bytes::from_static(b"v")),
        client_id: 1,
        seq: counter as u64,
        immediate: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use test_entry as e;

    #[test]
    fn positions_back_up_and_truncate_across_epochs() {
        let mut log = Log::new(LogIndex::ZERO, vec![e(1, 1), e(1, 2), e(2, 1), e(3, 1)]);
        assert!(
            log.contains(LogIndex::new(2, 1))
                && !log.contains(LogIndex::new(2, 2))
                && log.contains(LogIndex::ZERO)
        );
        assert_eq!(log.at_or_below(LogIndex::new(2, 7)), LogIndex::new(2, 1));
        assert_eq!(log.at_or_below(LogIndex::new(0, 5)), LogIndex::ZERO);
        assert_eq!(log.after(LogIndex::new(1, 2)).len(), 2);
        assert_eq!(
            log.after(LogIndex::new(1, 3)).len(),
            2,
            "an index between entries"
        );
        assert_eq!(log.range(LogIndex::ZERO, LogIndex::new(2, 1)).count(), 3);
        assert_eq!(
            log.truncate_after(LogIndex::new(1, 2)),
            Some(LogIndex::new(3, 1))
        );
        assert_eq!(log.last_index(), LogIndex::new(1, 2));
        assert_eq!(log.truncate_after(LogIndex::new(1, 2)), None);
    }

    #[test]
    fn deletes_leave_tombstones_and_dedup_keeps_the_latest_seq() {
        let mut kv = Kv::default();
        kv.apply(&e(1, 1));
        kv.apply(&LogEntry {
            op: LogOp::Delete,
            ..e(1, 2)
        });
        assert_eq!(kv.get(b"k"), (None, LogIndex::new(1, 2)));
        assert_eq!(kv.get(b"absent"), (None, LogIndex::ZERO));
        assert_eq!(kv.dedup(1), Some((2, LogIndex::new(1, 2))));
        kv.apply(&LogEntry {
            op: LogOp::NoOp,
            ..e(2, 1)
        });
        assert_eq!(kv.applied(), LogIndex::new(2, 1));
        assert_eq!(kv.get(b"k").1, LogIndex::new(1, 2));
    }
}
