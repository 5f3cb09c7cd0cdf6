//! [`Wal`]: the write-ahead log — numbered records, group commit, truncation, snapshots.
//!
//! * **Append buffers, flush persists** (ORCA §9.6, §5.4). [`Wal::append`] only copies the
//!   record into a user-space buffer; [`Wal::flush`] writes everything buffered with one write
//!   per segment touched, syncs each such segment once (and the directory if it created one),
//!   and only then reports the records as persisted. A process kill loses the buffer just like
//!   a power failure, so crash tests with real processes mean something.
//! * **Records are numbered 1, 2, 3, …** Callers map their own indexes (ORCA's `(epoch,
//!   counter)`) onto record numbers; the WAL stores opaque bytes.
//! * **Segments** rotate at [`WalConfig::segment_bytes`] and are named after their first record
//!   (see [`segment`](crate::segment)), so old ones can be deleted whole after a snapshot.
//! * **Truncation** ([`Wal::truncate_after`], ORCA §5.10: a follower adopting a new leader's
//!   log) removes records from the buffer and from disk, durably, newest segment first, so a
//!   crash in the middle leaves a prefix of the old log — never a gap.
//! * **Snapshots** ([`Wal::install_snapshot`], ORCA §3.1) are written atomically; then every
//!   segment whose records the snapshot includes is deleted.
//! * **Recovery** on [`Wal::open`] follows the rules in [`recovery`](crate::recovery).
//! * **Failures poison.** After a failed write or sync the kernel may have dropped the dirty
//!   pages (retrying `fsync` can succeed without the data being on disk), so the WAL stops and
//!   every later call fails until it is reopened and recovery decides from what is durable.

use std::io;

use crate::backend::{StorageBackend, StorageFile};
use crate::error::{AppendError, FlushError, OpenError, SnapshotError, TruncateError};
use crate::pending::Pending;
use crate::recovery::{last_record_of, recover, Recovered};
use crate::segment::{Segment, SegmentScan};
use crate::snapshot::{snapshot_name, write_snapshot, MAX_SNAPSHOT_BYTES};

/// Tunables of a [`Wal`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalConfig {
    /// A segment stops taking records once the next one would make it longer than this; a
    /// record longer than this gets a segment of its own. Default 64 MiB.
    pub segment_bytes: u64,
    /// Appends of larger payloads are refused ([`AppendError::TooLarge`]). Recovery accepts
    /// any valid record, so lowering the limit never makes an existing log unreadable.
    /// Default 16 MiB.
    pub max_record_bytes: usize,
    /// When a flush needs room past the end of the segment's file, the same write extends
    /// the file with zeros to the next multiple of this (at most to `segment_bytes`), so the
    /// flushes after it only overwrite and their syncs change no file size
    /// ([preallocation](crate::segment#preallocation)). 0 turns it off. Default 256 KiB.
    pub preallocate_bytes: u64,
}

impl Default for WalConfig {
    fn default() -> Self {
        Self { segment_bytes: 64 << 20, max_record_bytes: 16 << 20, preallocate_bytes: 256 << 10 }
    }
}

impl WalConfig {
    fn validate(&self) -> Result<(), OpenError> {
        if self.segment_bytes == 0 {
            return Err(OpenError::InvalidConfig("segment_bytes must be positive"));
        }
        if self.max_record_bytes
            > crate::record::MAX_PAYLOAD_BYTES - crate::segment::RECORD_META_BYTES
        {
            return Err(OpenError::InvalidConfig("max_record_bytes must fit in a u32 length"));
        }
        Ok(())
    }
}

/// A segmented, checksummed write-ahead log with group commit (module docs: [`crate::wal`]).
///
/// Dropping a `Wal` does not flush: records appended since the last [`flush`](Wal::flush) are
/// gone, as in a crash. Call `flush` before a graceful shutdown if they matter.
#[derive(Debug)]
pub struct Wal<B: StorageBackend> {
    backend: B,
    config: WalConfig,
    /// On-disk segments, oldest first, each continuing the one before. The last one ends at
    /// `log_end` if it exists.
    segments: Vec<Segment>,
    /// An open handle on the last segment, opened lazily.
    tail: Option<B::File>,
    /// The record after which the next flushed record goes: the last record on disk, or the
    /// snapshot's last included record if no later record is on disk.
    log_end: u64,
    /// Records `log_end + 1 ..= last_record()`, not yet handed to the OS.
    pending: Pending,
    /// 0 without a snapshot.
    snapshot_last_included: u64,
    poisoned: bool,
    #[cfg(test)]
    pub(crate) planted_bug: Option<PlantedBug>,
}

/// Bugs the crash tests plant to show they would catch them (every checker has a canary).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PlantedBug {
    /// `flush` writes but never syncs the segment.
    SkipFileSync,
    /// The WAL never syncs the directory after creating or removing a segment.
    SkipDirSync,
}

impl<B: StorageBackend> Wal<B> {
    /// Opens the log in `backend`'s directory (creating nothing until the first flush), runs
    /// recovery, and returns the WAL together with the snapshot and records that survived.
    pub fn open(backend: B, config: WalConfig) -> Result<(Self, Recovered), OpenError> {
        config.validate()?;
        let (layout, recovered) = recover(&backend)?;
        let wal = Self {
            backend,
            config,
            segments: layout.segments,
            tail: None,
            log_end: layout.log_end,
            pending: Pending::default(),
            snapshot_last_included: layout.snapshot_last_included,
            poisoned: false,
            #[cfg(test)]
            planted_bug: None,
        };
        wal.check_invariants();
        Ok((wal, recovered))
    }

    /// Buffers a record in memory and returns its number. Nothing reaches the OS until
    /// [`flush`](Self::flush).
    pub fn append(&mut self, payload: &[u8]) -> Result<u64, AppendError> {
        if self.poisoned {
            return Err(AppendError::Poisoned);
        }
        if payload.len() > self.config.max_record_bytes {
            return Err(AppendError::TooLarge {
                record_bytes: payload.len(),
                max_record_bytes: self.config.max_record_bytes,
            });
        }
        self.pending.push(payload);
        Ok(self.last_record())
    }

    /// Writes every buffered record and makes it durable (group commit: one write and one sync
    /// per segment touched). Returns [`persisted_record`](Self::persisted_record).
    pub fn flush(&mut self) -> Result<u64, FlushError> {
        if self.poisoned {
            return Err(FlushError::Poisoned);
        }
        let result = self.write_pending();
        self.poison_on_error(result)?;
        self.check_invariants();
        Ok(self.persisted_record())
    }

    /// Removes every record after `record`, buffered or on disk; durable when it returns. A
    /// `record` at or beyond [`last_record`](Self::last_record) changes nothing.
    pub fn truncate_after(&mut self, record: u64) -> Result<(), TruncateError> {
        if self.poisoned {
            return Err(TruncateError::Poisoned);
        }
        if record < self.snapshot_last_included {
            return Err(TruncateError::BelowSnapshot {
                record,
                snapshot_last_included: self.snapshot_last_included,
            });
        }
        if record >= self.log_end {
            self.pending.truncate(self.pending.len().min((record - self.log_end) as usize));
            return Ok(());
        }
        self.pending.clear();
        let result = self.truncate_disk_after(record);
        self.poison_on_error(result)?;
        self.check_invariants();
        Ok(())
    }

    /// Durably installs a snapshot of the state after record `last_included`, then deletes the
    /// previous snapshot and every segment the new one covers.
    ///
    /// If `last_included` is at or beyond [`last_record`](Self::last_record) (a follower
    /// receiving a leader's snapshot) the whole log is superseded, buffered records included,
    /// and the next record appended is `last_included + 1`. Otherwise the records after
    /// `last_included` stay (buffered ones stay buffered, except those the snapshot includes,
    /// which are dropped unwritten); a caller whose log disagrees with the snapshot truncates
    /// first. When this returns, [`persisted_record`](Self::persisted_record) is at least
    /// `last_included`.
    pub fn install_snapshot(
        &mut self,
        last_included: u64,
        data: &[u8],
    ) -> Result<(), SnapshotError> {
        if self.poisoned {
            return Err(SnapshotError::Poisoned);
        }
        if last_included <= self.snapshot_last_included {
            return Err(SnapshotError::Stale {
                last_included,
                current_last_included: self.snapshot_last_included,
            });
        }
        if data.len() > MAX_SNAPSHOT_BYTES {
            return Err(SnapshotError::TooLarge { data_bytes: data.len() });
        }
        let result = self.install_snapshot_and_compact(last_included, data);
        self.poison_on_error(result)?;
        self.check_invariants();
        Ok(())
    }

    /// The number of the last record appended (buffered or not); 0 for an empty log.
    pub fn last_record(&self) -> u64 {
        self.log_end + self.pending.len() as u64
    }

    /// The number of the last record that survives a crash (ORCA's persisted-index): flushed,
    /// or included in the snapshot.
    pub fn persisted_record(&self) -> u64 {
        self.log_end.max(self.snapshot_last_included)
    }

    /// The last record the installed snapshot includes, if there is a snapshot.
    pub fn snapshot_last_included(&self) -> Option<u64> {
        (self.snapshot_last_included > 0).then_some(self.snapshot_last_included)
    }

    fn write_pending(&mut self) -> io::Result<()> {
        let flush_first = self.log_end + 1;
        let mut created_segment = false;
        let mut frames = Vec::new();
        let mut next = 0;
        while next < self.pending.len() {
            if self.must_start_segment(self.pending.frames_bytes(next..next + 1)) {
                let segment =
                    Segment { first_record: flush_first + next as u64, bytes: 0, file_bytes: 0 };
                self.tail = Some(self.backend.create(&segment.name())?);
                self.segments.push(segment);
                created_segment = true;
            }
            let offset = self.segments.last().expect("a segment to write to").bytes;
            let room = self.config.segment_bytes.saturating_sub(offset);
            // The first record always goes in (a fresh segment takes even an oversized one).
            let mut end = next + 1;
            while end < self.pending.len() && self.pending.frames_bytes(next..end + 1) <= room {
                end += 1;
            }
            frames.clear();
            self.pending.encode(next..end, flush_first + next as u64, flush_first, &mut frames);
            let records_bytes = frames.len() as u64;
            let segment = self.segments.last().expect("a segment to write to");
            frames.resize(self.preallocated_write_len(segment, records_bytes) as usize, 0);
            let skip_sync = self.planted(PlantedBug::SkipFileSync);
            let file = Self::tail_file(&self.backend, &mut self.tail, &self.segments)?;
            // One write and one sync per segment: group commit (ORCA §5.4). The segment is
            // synced before the next one is created, so only the last segment a flush touches
            // can hold its torn bytes after a crash (recovery relies on that).
            file.write_at(offset, &frames)?;
            if !skip_sync {
                file.sync()?;
            }
            let segment = self.segments.last_mut().expect("just written");
            segment.bytes += records_bytes;
            segment.file_bytes = segment.file_bytes.max(offset + frames.len() as u64);
            next = end;
        }
        // New segment names are durable before the flush reports their records persisted.
        if created_segment {
            self.sync_dir()?;
        }
        self.log_end += self.pending.len() as u64;
        self.pending.clear();
        Ok(())
    }

    /// How many bytes to write at the end of `segment` for `records_bytes` of records: just
    /// them while the file has room, else them and zeros up to the next multiple of
    /// `preallocate_bytes` (at most `segment_bytes`, never less than the records).
    fn preallocated_write_len(&self, segment: &Segment, records_bytes: u64) -> u64 {
        let chunk = self.config.preallocate_bytes;
        let end = segment.bytes + records_bytes;
        if chunk == 0 || end <= segment.file_bytes {
            return records_bytes;
        }
        let extended = end.div_ceil(chunk).saturating_mul(chunk).min(self.config.segment_bytes);
        extended.max(end) - segment.bytes
    }

    /// Whether a record of `frame_bytes` must go to a new segment.
    fn must_start_segment(&self, frame_bytes: u64) -> bool {
        // An empty last segment (a fresh one, or one a torn crash left empty) takes any record.
        match self.segments.last() {
            None => true,
            Some(last) => last.bytes > 0 && last.bytes + frame_bytes > self.config.segment_bytes,
        }
    }

    fn truncate_disk_after(&mut self, record: u64) -> io::Result<()> {
        self.tail = None;
        // Newest first, each removal durable before the next: a crash in between leaves a
        // prefix of the old log, never a gap (covered by `crash_tests`).
        while let Some(last) = self.segments.last().filter(|last| last.first_record > record) {
            self.backend.remove(&last.name())?;
            self.sync_dir()?;
            self.segments.pop();
        }
        if let Some(last) = self.segments.last_mut() {
            let mut file = self.backend.open(&last.name())?;
            let bytes = file.read_all()?;
            let kept_records = (record + 1 - last.first_record) as usize;
            let kept_bytes = SegmentScan::scan(&bytes, last.first_record)
                .records
                .get(kept_records - 1)
                .map(|payload| payload.end as u64)
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("segment {} lost records while open", last.name()),
                    )
                })?;
            file.set_len(kept_bytes)?;
            file.sync()?;
            last.bytes = kept_bytes;
            last.file_bytes = kept_bytes;
            self.tail = Some(file);
        }
        self.log_end = record;
        Ok(())
    }

    fn install_snapshot_and_compact(&mut self, last_included: u64, data: &[u8]) -> io::Result<()> {
        write_snapshot(&self.backend, last_included, data)?;
        let previous = std::mem::replace(&mut self.snapshot_last_included, last_included);
        // From here on a crash recovers the new snapshot; the rest is cleanup that recovery
        // would also do (rules 2, 3 and 6).
        if previous > 0 {
            self.backend.remove(&snapshot_name(previous))?;
        }
        let covered = (0..self.segments.len())
            .take_while(|&i| last_record_of(&self.segments, i, self.log_end) <= last_included)
            .count();
        for segment in self.segments.drain(..covered) {
            self.backend.remove(&segment.name())?;
        }
        if self.segments.is_empty() {
            self.tail = None;
        }
        if previous > 0 || covered > 0 {
            self.sync_dir()?;
        }
        if last_included > self.log_end {
            // Buffered records the snapshot includes need never be written (all of them, for
            // a snapshot beyond the log); the log continues after the snapshot.
            let included = (last_included - self.log_end).min(self.pending.len() as u64);
            self.pending.drain_front(included as usize);
            self.log_end = last_included;
        }
        Ok(())
    }

    /// The open handle of the last segment (a function of the fields it needs, so the
    /// pending buffer can be borrowed alongside).
    fn tail_file<'a>(
        backend: &B,
        tail: &'a mut Option<B::File>,
        segments: &[Segment],
    ) -> io::Result<&'a mut B::File> {
        if tail.is_none() {
            let last = segments.last().expect("a tail segment");
            *tail = Some(backend.open(&last.name())?);
        }
        Ok(tail.as_mut().expect("just opened"))
    }

    fn sync_dir(&self) -> io::Result<()> {
        if self.planted(PlantedBug::SkipDirSync) {
            return Ok(());
        }
        self.backend.sync_dir()
    }

    fn poison_on_error<T>(&mut self, result: io::Result<T>) -> io::Result<T> {
        if result.is_err() {
            self.poisoned = true;
            self.tail = None;
        }
        result
    }

    #[cfg(test)]
    fn planted(&self, bug: PlantedBug) -> bool {
        self.planted_bug == Some(bug)
    }

    #[cfg(not(test))]
    fn planted(&self, _bug: PlantedBug) -> bool {
        false
    }

    fn check_invariants(&self) {
        assert!(
            self.segments
                .windows(2)
                .all(|pair| pair[0].first_record < pair[1].first_record && pair[0].bytes > 0),
            "segments ascend and only the last may be empty: {:?}",
            self.segments
        );
        assert!(
            self.segments.iter().all(|segment| segment.bytes <= segment.file_bytes),
            "a segment's records fit in its file: {:?}",
            self.segments
        );
        if let Some(first) = self.segments.first() {
            assert!(first.first_record <= self.log_end + 1, "segments end at log_end");
        }
        assert!(self.persisted_record() <= self.last_record());
    }
}
