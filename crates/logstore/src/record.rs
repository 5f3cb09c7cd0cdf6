//! The node WAL's records: which shard replica a record belongs to ([`ShardTag`]) and what it
//! says ([`Record`]).
//!
//! # Layout (one WAL record)
//!
//! ```text
//! kind u8 | table length u16 LE | table (UTF-8) | shard u32 LE | generation u32 LE | body
//! ```
//!
//! | kind | record      | body                                                        |
//! |------|-------------|-------------------------------------------------------------|
//! | 1    | `Entry`     | the log entry in the wire codec (`strata-wire`)             |
//! | 2    | `Truncate`  | `epoch u32 LE`, `counter u32 LE`: drop the entries after it |
//! | 3    | `HardState` | `epoch u32 LE`, then `0`, or `1` + voted-for node `u32 LE`  |
//! | 4    | `Reset`     | empty: forget everything before it (a removed or reinstalled replica) |
//!
//! The WAL frames and checksums each record (`strata_storage::record`); this layer only has to
//! reject what the WAL cannot: a record written by a different program (`Corrupt`).

use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};
use strata_log::{HardState, LogEntry, LogIndex};
use strata_wire::{decode_message, Encode, NodeId};

use crate::StoreError;

const ENTRY: u8 = 1;
const TRUNCATE: u8 = 2;
const HARD_STATE: u8 = 3;
const RESET: u8 = 4;

/// A shard replica on this node: the table's name, the shard and the generation (a moved
/// shard's new group is a new generation, with a log of its own).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShardTag {
    pub table: String,
    pub shard: u32,
    pub generation: u32,
}

impl ShardTag {
    pub fn new(table: &str, shard: u32, generation: u32) -> ShardTag {
        ShardTag { table: table.to_string(), shard, generation }
    }

    fn encode(&self, out: &mut BytesMut) {
        let table = self.table.as_bytes();
        let len = u16::try_from(table.len()).expect("table names are shorter than 64 KiB");
        out.put_u16_le(len);
        out.put_slice(table);
        out.put_u32_le(self.shard);
        out.put_u32_le(self.generation);
    }
}

impl fmt::Display for ShardTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} shard {} generation {}", self.table, self.shard, self.generation)
    }
}

/// What one node-WAL record says about its replica's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// The next entry of the log.
    Entry(LogEntry),
    /// Every entry after this index is gone (ORCA §5.10: a follower adopting a leader's log).
    Truncate(LogIndex),
    /// The election state from here on (ORCA §3.1).
    HardState(HardState),
    /// The replica's log and hard state so far are void: it was removed, or is reinstalled
    /// from scratch (a moved-in shard, a log imported from an earlier version's layout).
    Reset,
}

impl Record {
    /// Appends the record, tagged, to `out`.
    pub fn encode(&self, tag: &ShardTag, out: &mut BytesMut) {
        out.put_u8(match self {
            Record::Entry(_) => ENTRY,
            Record::Truncate(_) => TRUNCATE,
            Record::HardState(_) => HARD_STATE,
            Record::Reset => RESET,
        });
        tag.encode(out);
        match self {
            Record::Entry(e) => e.encode(out),
            Record::Truncate(i) => {
                out.put_u32_le(i.epoch);
                out.put_u32_le(i.counter);
            }
            Record::HardState(h) => out.put_slice(&encode_hard_state(*h)),
            Record::Reset => {}
        }
    }

    /// Reads a record back; `number` names it in errors.
    pub fn decode(bytes: Bytes, number: u64) -> Result<(ShardTag, Record), StoreError> {
        let corrupt = |detail: String| StoreError::Corrupt {
            what: "node log record",
            detail: format!("record {number}: {detail}"),
        };
        let short = || corrupt(format!("{} bytes, too short", bytes.len()));
        let kind = *bytes.first().ok_or_else(short)?;
        let len = u16::from_le_bytes(bytes.get(1..3).ok_or_else(short)?.try_into().expect("2"));
        let table_end = 3 + usize::from(len);
        let table = bytes.get(3..table_end).ok_or_else(short)?;
        let table = std::str::from_utf8(table)
            .map_err(|_| corrupt("the table name is not UTF-8".into()))?
            .to_string();
        let numbers = bytes.get(table_end..table_end + 8).ok_or_else(short)?;
        let tag = ShardTag {
            table,
            shard: u32::from_le_bytes(numbers[0..4].try_into().expect("4 bytes")),
            generation: u32::from_le_bytes(numbers[4..8].try_into().expect("4 bytes")),
        };
        let body = bytes.slice(table_end + 8..);
        let record = match kind {
            ENTRY => Record::Entry(
                decode_message(body).map_err(|e| corrupt(format!("a log entry of {tag}: {e}")))?,
            ),
            TRUNCATE if body.len() == 8 => Record::Truncate(LogIndex::new(
                u32::from_le_bytes(body[0..4].try_into().expect("4 bytes")),
                u32::from_le_bytes(body[4..8].try_into().expect("4 bytes")),
            )),
            HARD_STATE => Record::HardState(decode_hard_state(&body)?),
            RESET if body.is_empty() => Record::Reset,
            _ => return Err(corrupt(format!("kind {kind} with a {}-byte body", body.len()))),
        };
        Ok((tag, record))
    }
}

/// `epoch u32 LE`, then `voted_for` as `0` or `1` + node id `u32 LE` (also the layout of an
/// earlier version's `hard-state` file, `crate::legacy`).
pub(crate) fn encode_hard_state(h: HardState) -> Vec<u8> {
    let mut v = h.epoch.to_le_bytes().to_vec();
    match h.voted_for {
        Some(n) => {
            v.push(1);
            v.extend_from_slice(&n.0.to_le_bytes());
        }
        None => v.push(0),
    }
    v
}

pub(crate) fn decode_hard_state(b: &[u8]) -> Result<HardState, StoreError> {
    let bad = || StoreError::Corrupt {
        what: "hard state",
        detail: format!("{} bytes: {b:02x?}", b.len()),
    };
    let epoch = u32::from_le_bytes(b.get(0..4).ok_or_else(bad)?.try_into().expect("4 bytes"));
    let voted_for = match (b.get(4), b.len()) {
        (Some(0), 5) => None,
        (Some(1), 9) => Some(NodeId(u32::from_le_bytes(b[5..9].try_into().expect("4 bytes")))),
        _ => return Err(bad()),
    };
    Ok(HardState { epoch, voted_for })
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_log::LogOp;

    #[test]
    fn every_record_round_trips_with_its_tag() {
        let tag = ShardTag::new("accounts", 3, 2);
        let entry = LogEntry {
            index: LogIndex::new(4, 9),
            key: Bytes::from_static(b"k"),
            op: LogOp::Put(Bytes::from_static(b"v")),
            client_id: 7,
            seq: 8,
            ack: 1,
            immediate: true,
        };
        for record in [
            Record::Entry(entry),
            Record::Truncate(LogIndex::new(4, 2)),
            Record::HardState(HardState { epoch: 5, voted_for: Some(NodeId(2)) }),
            Record::HardState(HardState::default()),
            Record::Reset,
        ] {
            let mut out = BytesMut::new();
            record.encode(&tag, &mut out);
            assert_eq!(Record::decode(out.freeze(), 1).unwrap(), (tag.clone(), record));
        }
    }

    #[test]
    fn foreign_and_cut_records_are_corrupt_not_a_panic() {
        let mut out = BytesMut::new();
        Record::Truncate(LogIndex::new(1, 1)).encode(&ShardTag::new("t", 0, 0), &mut out);
        let whole = out.freeze();
        for cut in 0..whole.len() {
            assert!(Record::decode(whole.slice(..cut), 1).is_err(), "cut at {cut}");
        }
        let mut foreign = whole.to_vec();
        foreign[0] = 9;
        assert!(Record::decode(Bytes::from(foreign), 1).is_err());
    }

    #[test]
    fn hard_state_encoding_round_trips_and_rejects_garbage() {
        for h in [HardState::default(), HardState { epoch: 7, voted_for: Some(NodeId(4)) }] {
            assert_eq!(decode_hard_state(&encode_hard_state(h)).unwrap(), h);
        }
        assert!(decode_hard_state(&[1, 2]).is_err());
        assert!(decode_hard_state(&[1, 0, 0, 0, 2]).is_err());
    }
}
