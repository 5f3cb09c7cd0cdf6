//! Log segments: their names, the log record format, and how a segment's bytes are read back.
//!
//! A segment is a file of back-to-back [frames](crate::record) and nothing else. Its name
//! carries the number of its first record, zero-padded so that names sort like numbers:
//! `wal-00000000000000000001.log`. Each frame's payload is a log record:
//!
//! ```text
//! +------------------+----------------------+-------------------+
//! | number: u64 LE   | flush_first: u64 LE  | the caller's data |
//! +------------------+----------------------+-------------------+
//! ```
//!
//! `number` is the record's own number (checked against its position, so a misplaced or stale
//! frame is caught) and `flush_first` the number of the first record of the flush that wrote
//! it. That second field is what lets recovery tell a torn flush from corruption: a flush's
//! bytes may reach the disk in any order until its sync completes (a real disk persists pages,
//! not prefixes), so damage followed by valid records *of the same flush* is an interrupted
//! write, while damage followed by a record of a *later* flush is damage to synced data — the
//! later flush was only issued after the earlier one was synced.
//!
//! # Preallocation
//!
//! A segment's file runs ahead of its records: the WAL writes zeros past them in chunks of
//! [`WalConfig::preallocate_bytes`](crate::WalConfig::preallocate_bytes), in the same write as
//! the records that first need the room, so that most flushes overwrite bytes the file already
//! has and `fdatasync` has no file size to make durable (on ext4, no journal commit: about a
//! quarter less latency per sync here, and less CPU when several logs sync at once;
//! docs/benchmarks.md, "WAL flushes"). Zeros are never a frame (a
//! log record's length is at least [`RECORD_META_BYTES`] and its checksum covers the length),
//! so a scan that finds only zeros after the last valid record has found the clean end of the
//! log; anything else there is damage as before.

use std::ops::Range;

use crate::record::{self, Decoded, HEADER_BYTES};

const PREFIX: &str = "wal-";
const SUFFIX: &str = ".log";
const DIGITS: usize = 20;

/// Bytes of a log record before the caller's data: `number` and `flush_first`.
pub(crate) const RECORD_META_BYTES: usize = 16;

/// Bytes a log record of `data_bytes` takes in a segment.
pub(crate) fn frame_bytes(data_bytes: usize) -> u64 {
    (HEADER_BYTES + RECORD_META_BYTES + data_bytes) as u64
}

/// Appends the frame of log record `number`, written by the flush whose first record is
/// `flush_first`.
pub(crate) fn encode_log_record(out: &mut Vec<u8>, number: u64, flush_first: u64, data: &[u8]) {
    record::encode_parts_into(out, &[&number.to_le_bytes(), &flush_first.to_le_bytes(), data]);
}

/// A segment on disk, as the WAL tracks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Segment {
    /// The number of its first record (also in its name).
    pub first_record: u64,
    /// The end of its last valid record, where the next one goes.
    pub bytes: u64,
    /// The file's length: `bytes` and the preallocated zeros after them.
    pub file_bytes: u64,
}

impl Segment {
    pub(crate) fn name(&self) -> String {
        segment_name(self.first_record)
    }
}

/// The file name of the segment whose first record is `first_record`.
pub(crate) fn segment_name(first_record: u64) -> String {
    format!("{PREFIX}{first_record:0DIGITS$}{SUFFIX}")
}

/// The first record number of the segment called `name`, if `name` is a segment name.
pub(crate) fn parse_segment_name(name: &str) -> Option<u64> {
    parse_numbered_name(name, PREFIX, SUFFIX)
}

/// Parses `<prefix><20 digits><suffix>`, the naming scheme of segments and snapshots.
pub(crate) fn parse_numbered_name(name: &str, prefix: &str, suffix: &str) -> Option<u64> {
    let digits = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
    if digits.len() != DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A segment's bytes, read back: the valid records from the start, and what stopped the scan.
#[derive(Debug)]
pub(crate) struct SegmentScan {
    /// Ranges of the caller's data of the valid records, in order. A record's frame ends where
    /// its data ends.
    pub records: Vec<Range<usize>>,
    /// Length of the valid prefix (the end of the last valid record). Only zeros (preallocated
    /// room) follow it unless there is `damage`.
    pub valid_bytes: usize,
    /// The invalid bytes after the valid prefix, if any.
    pub damage: Option<Damage>,
}

/// Bytes after the valid prefix of a segment that are not the next valid record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Damage {
    /// Offset of the first invalid byte (the start of the bad record).
    pub offset: usize,
    /// Whether a crash can explain the damage: every valid record after it was written by the
    /// same flush as the bad record (or there is none), so the damage is that flush's
    /// unfinished write. If not, a record of a later flush follows — issued only after the bad
    /// record was synced — and the damage is corruption of acknowledged data.
    pub torn_flush: bool,
}

/// A decoded log record: its number, its flush, and where its data is.
struct LogRecord {
    number: u64,
    flush_first: u64,
    data: Range<usize>,
}

/// Decodes the log record framed at the start of `bytes` (ranges relative to `bytes`).
fn decode_log_record(bytes: &[u8]) -> Option<LogRecord> {
    let Decoded::Frame { payload } = record::decode(bytes) else {
        return None;
    };
    let meta = bytes.get(payload.start..payload.start + RECORD_META_BYTES)?;
    let number = u64::from_le_bytes(meta[..8].try_into().expect("8 bytes"));
    let flush_first = u64::from_le_bytes(meta[8..].try_into().expect("8 bytes"));
    (flush_first <= number).then_some(LogRecord {
        number,
        flush_first,
        data: payload.start + RECORD_META_BYTES..payload.end,
    })
}

impl SegmentScan {
    /// Scans `bytes`, the segment whose first record is `first_record`, from the start.
    pub(crate) fn scan(bytes: &[u8], first_record: u64) -> Self {
        let mut records = Vec::new();
        let mut offset = 0;
        while offset < bytes.len() {
            let expected = first_record + records.len() as u64;
            match decode_log_record(&bytes[offset..]) {
                Some(record) if record.number == expected => {
                    records.push(offset + record.data.start..offset + record.data.end);
                    offset += record.data.end;
                }
                _ if is_preallocated(&bytes[offset..]) => break,
                _ => {
                    let damage = Damage {
                        offset,
                        torn_flush: only_same_flush_after(bytes, offset, expected),
                    };
                    return Self { records, valid_bytes: offset, damage: Some(damage) };
                }
            }
        }
        Self { records, valid_bytes: offset, damage: None }
    }
}

/// Whether `rest`, the bytes after the last valid record, are preallocated room: zeros only.
fn is_preallocated(rest: &[u8]) -> bool {
    rest.iter().all(|&b| b == 0)
}

/// The end of the bytes a damaged segment's writes reached: past its last non-zero byte (the
/// zeros after it are preallocated room, or never written). Never before `damage_offset`.
pub(crate) fn written_end(bytes: &[u8], damage_offset: usize) -> usize {
    bytes.iter().rposition(|&b| b != 0).map_or(damage_offset, |last| (last + 1).max(damage_offset))
}

/// Whether every valid log record after the bad one at `bad_offset` (which should have been
/// record `bad_number`) belongs to the flush that wrote `bad_number`: a later record whose
/// flush started at or before `bad_number`. Any other valid record — from a later flush, or out
/// of place — means the damage is not a torn flush.
///
/// A flipped length field can make a record in the middle of the log look like one that runs
/// past the end of the file, so the search tries every offset rather than trusting the bad
/// record's length, skipping over each valid record it finds. On ordinary data almost every
/// offset is rejected by its implausible length without checksumming anything. (A caller's
/// data that itself contains an encoded log record could be mistaken for one; that costs an
/// operator's attention, never data.)
fn only_same_flush_after(bytes: &[u8], bad_offset: usize, bad_number: u64) -> bool {
    let mut offset = bad_offset + 1;
    while offset + HEADER_BYTES <= bytes.len() {
        match decode_log_record(&bytes[offset..]) {
            Some(record) => {
                if record.number <= bad_number || record.flush_first > bad_number {
                    return false;
                }
                offset += record.data.end;
            }
            None => offset += 1,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A segment starting at record 1; `flushes[i]` holds the data of the i-th flush.
    fn segment(flushes: &[&[&[u8]]]) -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut number = 1;
        for flush in flushes {
            let flush_first = number;
            for data in *flush {
                encode_log_record(&mut bytes, number, flush_first, data);
                number += 1;
            }
        }
        bytes
    }

    #[test]
    fn names_sort_like_numbers_and_parse_back() {
        let names: Vec<String> = [1, 9, 10, 99, 100, u64::MAX].map(segment_name).into();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        for (name, first) in names.iter().zip([1, 9, 10, 99, 100, u64::MAX]) {
            assert_eq!(parse_segment_name(name), Some(first));
        }
        for bad in ["wal-1.log", "wal-0000000000000000000x.log", "snap-00000000000000000001.log"] {
            assert_eq!(parse_segment_name(bad), None, "{bad}");
        }
        assert_eq!(parse_segment_name(&format!("{}.tmp", segment_name(1))), None);
    }

    #[test]
    fn clean_segment() {
        let bytes = segment(&[&[b"one", b""], &[b"three"]]);
        assert_eq!(bytes.len() as u64, frame_bytes(3) + frame_bytes(0) + frame_bytes(5));
        let scan = SegmentScan::scan(&bytes, 1);
        let payloads: Vec<&[u8]> = scan.records.iter().map(|r| &bytes[r.clone()]).collect();
        assert_eq!(payloads, [&b"one"[..], b"", b"three"]);
        assert_eq!(scan.valid_bytes, bytes.len());
        assert_eq!(scan.damage, None);
    }

    #[test]
    fn records_out_of_place_are_damage() {
        let bytes = segment(&[&[b"one", b"two"]]);
        // The same bytes read as a segment starting at record 5: its first record is not 5.
        let scan = SegmentScan::scan(&bytes, 5);
        assert_eq!(scan.records.len(), 0);
        assert_eq!(scan.damage, Some(Damage { offset: 0, torn_flush: false }));
    }

    #[test]
    fn torn_tail_is_a_torn_flush() {
        let whole = segment(&[&[b"one"], &[b"two"]]);
        let first_end = frame_bytes(3) as usize;
        for cut in first_end + 1..whole.len() {
            let scan = SegmentScan::scan(&whole[..cut], 1);
            assert_eq!(scan.records.len(), 1);
            assert_eq!(scan.damage, Some(Damage { offset: first_end, torn_flush: true }));
        }
        let mut zero_filled = whole[..first_end + 5].to_vec();
        zero_filled.resize(whole.len() + 100, 0);
        let damage = SegmentScan::scan(&zero_filled, 1).damage.unwrap();
        assert!(damage.torn_flush);
    }

    /// Zeros after the last record are preallocated room: the clean end of the log. A record
    /// torn so that only a zero prefix of it survived reads the same (it was never synced).
    #[test]
    fn zeros_after_the_records_are_the_clean_end() {
        let mut bytes = segment(&[&[b"one"], &[b"two"]]);
        let end = bytes.len();
        bytes.resize(end + 4096, 0);
        let scan = SegmentScan::scan(&bytes, 1);
        assert_eq!((scan.records.len(), scan.valid_bytes, scan.damage), (2, end, None));
        bytes[end + 100] = 1;
        let scan = SegmentScan::scan(&bytes, 1);
        assert_eq!(scan.damage, Some(Damage { offset: end, torn_flush: true }));
        assert_eq!(written_end(&bytes, end), end + 101);
    }

    /// Pages of one flush reach the disk in any order until its sync: damage followed by
    /// records of the same flush is still a torn flush.
    #[test]
    fn damage_followed_by_its_own_flush_is_a_torn_flush() {
        let bytes = segment(&[&[b"one"], &[b"two", b"three", b"four"]]);
        let second_start = frame_bytes(3) as usize;
        for byte in second_start..second_start + 20 {
            let mut zeroed = bytes.clone();
            zeroed[byte] = !zeroed[byte];
            let damage = SegmentScan::scan(&zeroed, 1).damage.expect("caught");
            assert_eq!(damage, Damage { offset: second_start, torn_flush: true }, "byte {byte}");
        }
    }

    #[test]
    fn damage_followed_by_a_later_flush_is_corruption() {
        let bytes = segment(&[&[b"one"], &[b"two"], &[b"three"]]);
        let last_start = bytes.len() - frame_bytes(5) as usize;
        for byte in 0..last_start {
            let mut flipped = bytes.clone();
            flipped[byte] ^= 0x40;
            let damage = SegmentScan::scan(&flipped, 1).damage.expect("caught");
            assert!(!damage.torn_flush, "flip at byte {byte}");
        }
    }
}
