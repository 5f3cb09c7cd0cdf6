//! Appended records not yet handed to the OS.
//!
//! ORCA §9.6: un-fsynced entries live in a user-space buffer and reach the file only as part of
//! a flush, so killing the process loses them exactly as a power failure would. The buffer
//! holds the callers' bytes back to back; they are framed at flush time, because a frame
//! records which flush wrote it (see [`segment`](crate::segment)).

use std::ops::Range;

use crate::segment::{encode_log_record, frame_bytes};

#[derive(Debug, Default)]
pub(crate) struct Pending {
    /// The data of the buffered records, back to back.
    data: Vec<u8>,
    /// `ends[i]` is where record `i`'s data ends in `data`.
    ends: Vec<usize>,
}

impl Pending {
    pub(crate) fn push(&mut self, data: &[u8]) {
        self.data.extend_from_slice(data);
        self.ends.push(self.data.len());
    }

    /// Number of buffered records.
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Bytes the frames of the buffered records `records` take in a segment.
    pub(crate) fn frames_bytes(&self, records: Range<usize>) -> u64 {
        let data_bytes = self.start(records.end) - self.start(records.start);
        data_bytes as u64 + records.len() as u64 * frame_bytes(0)
    }

    /// Appends the frames of the buffered records `records` to `out`; `records.start` is
    /// record number `first_number`, written by the flush whose first record is `flush_first`.
    pub(crate) fn encode(
        &self,
        records: Range<usize>,
        first_number: u64,
        flush_first: u64,
        out: &mut Vec<u8>,
    ) {
        for (index, number) in records.zip(first_number..) {
            encode_log_record(
                out,
                number,
                flush_first,
                &self.data[self.start(index)..self.ends[index]],
            );
        }
    }

    /// Keeps the first `records` records.
    pub(crate) fn truncate(&mut self, records: usize) {
        self.ends.truncate(records);
        self.data.truncate(self.start(records));
    }

    /// Drops the first `records` records.
    pub(crate) fn drain_front(&mut self, records: usize) {
        let bytes = self.start(records);
        self.data.drain(..bytes);
        self.ends.drain(..records);
        for end in &mut self.ends {
            *end -= bytes;
        }
    }

    pub(crate) fn clear(&mut self) {
        self.truncate(0);
    }

    /// Where record `index`'s data starts (or the end of all data, for `index == len`).
    fn start(&self, index: usize) -> usize {
        index.checked_sub(1).map_or(0, |previous| self.ends[previous])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_and_truncation() {
        let mut pending = Pending::default();
        for data in [&b"a"[..], b"bb", b"ccc"] {
            pending.push(data);
        }
        assert_eq!(pending.len(), 3);
        let mut expected = Vec::new();
        encode_log_record(&mut expected, 8, 7, b"bb");
        let mut out = Vec::new();
        pending.encode(1..2, 8, 7, &mut out);
        assert_eq!(out, expected);
        assert_eq!(pending.frames_bytes(1..2), expected.len() as u64);
        assert_eq!(pending.frames_bytes(0..3), 3 * frame_bytes(0) + 6);
        assert_eq!(pending.frames_bytes(1..1), 0);
        pending.truncate(1);
        pending.push(b"d");
        out.clear();
        pending.encode(0..2, 1, 1, &mut out);
        let mut expected = Vec::new();
        encode_log_record(&mut expected, 1, 1, b"a");
        encode_log_record(&mut expected, 2, 1, b"d");
        assert_eq!(out, expected);
        pending.push(b"eee");
        pending.drain_front(1);
        out.clear();
        pending.encode(0..2, 2, 1, &mut out);
        let mut expected = Vec::new();
        encode_log_record(&mut expected, 2, 1, b"d");
        encode_log_record(&mut expected, 3, 1, b"eee");
        assert_eq!(out, expected);
        pending.clear();
        assert_eq!(pending.len(), 0);
        assert_eq!(pending.frames_bytes(0..0), 0);
    }
}
