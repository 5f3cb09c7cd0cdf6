//! Opening a WAL directory: what survived, and what must not be trusted.
//!
//! ORCA §5.10: a restarting node loads its snapshot and its log — only fsynced data — and
//! replays them. The rules, in order:
//!
//! 1. Leftover temporary files (a snapshot install interrupted before its rename) are removed.
//! 2. The newest snapshot file wins; it must pass its checksum ([`OpenError::CorruptSnapshot`]).
//!    Older snapshot files (an install interrupted before its cleanup) are removed.
//! 3. A segment whose successor starts at or before `snapshot + 1` holds only records the
//!    snapshot includes (a compaction interrupted before its removals became durable): removed
//!    unread.
//! 4. The remaining segments must continue each other: each starts right after the last record
//!    of the one before ([`OpenError::SegmentOutOfSequence`]), and the first starts at or
//!    before `snapshot + 1` ([`OpenError::MissingRecordsAfterSnapshot`]).
//! 5. Every record is checked (checksum, and its number against its position). A bad record
//!    in the last segment followed by no valid record, or only by records of the same flush
//!    (a flush's pages reach the disk in any order until its sync), is a torn tail — the
//!    unsynced end of an interrupted flush, never acknowledged. It is cut off from the bad
//!    record on, durably (`set_len` + sync, so a later append cannot land behind garbage), and
//!    reported as [`TornTail`]. Any other bad record — in an earlier segment, or followed by a
//!    record of a later flush, which was only issued after the bad one was synced — is
//!    [`OpenError::CorruptRecord`], and nothing is cut: the WAL does not silently drop
//!    acknowledged data. (Damage inside the *last* flush cannot be told apart from a torn write,
//!    so it is cut like one and reported; see [`segment`](crate::segment).) Zeros after the
//!    last valid record are not damage: they are the segment's preallocated room.
//! 6. Segments whose records the snapshot all includes are removed, and the log continues after
//!    the later of the last record and the snapshot.

use crate::backend::{temp_name, StorageBackend, StorageFile};
use crate::error::OpenError;
use crate::segment::{parse_segment_name, segment_name, written_end, Segment, SegmentScan};
use crate::snapshot::{parse_snapshot_name, read_snapshot, snapshot_name, Snapshot};

/// What [`Wal::open`](crate::Wal::open) found: the state to rebuild from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// The newest snapshot, if any.
    pub snapshot: Option<Snapshot>,
    /// The number of `records[0]`: one past the snapshot's last included record (1 without a
    /// snapshot), whether or not any record follows.
    pub first_record: u64,
    /// Every durable record after the snapshot, in order.
    pub records: Vec<Vec<u8>>,
    /// What recovery repaired or cleaned up.
    pub report: RecoveryReport,
}

impl Recovered {
    /// The number of the last recovered record (the snapshot's last one if no record follows).
    pub fn last_record(&self) -> u64 {
        self.first_record + self.records.len() as u64 - 1
    }
}

/// What recovery changed on disk. Worth logging: a torn tail is normal after a crash, leftover
/// files after an interrupted snapshot install or compaction.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The torn end of the last segment that was cut off, if there was one.
    pub torn_tail: Option<TornTail>,
    /// Files removed: temporaries, superseded snapshots, segments the snapshot covers.
    pub removed_files: Vec<String>,
}

/// Bytes cut off the end of the log: the unsynced tail of a flush a crash interrupted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The segment that was shortened (always the last one).
    pub segment: String,
    /// Where the first bad record started; the segment's new length.
    pub offset: u64,
    /// How many written bytes were dropped (up to the last non-zero one; preallocated zeros
    /// after it are not counted).
    pub dropped_bytes: u64,
}

/// The on-disk layout the WAL continues from.
#[derive(Debug)]
pub(crate) struct Layout {
    pub segments: Vec<Segment>,
    /// The last record on disk, or the snapshot's last included record if later.
    pub log_end: u64,
    /// 0 without a snapshot.
    pub snapshot_last_included: u64,
}

/// Runs the recovery rules of the module documentation.
pub(crate) fn recover<B: StorageBackend>(backend: &B) -> Result<(Layout, Recovered), OpenError> {
    let mut cleanup = Cleanup { backend, removed: Vec::new() };
    let mut segment_firsts = Vec::new();
    let mut snapshots = Vec::new();
    for name in backend.list()? {
        if let Some(first) = parse_segment_name(&name) {
            segment_firsts.push(first);
        } else if let Some(last_included) = parse_snapshot_name(&name) {
            snapshots.push(last_included);
        } else if is_temporary(&name) {
            cleanup.remove(name)?;
        }
    }
    segment_firsts.sort_unstable();
    snapshots.sort_unstable();

    let snapshot = match snapshots.pop() {
        Some(last_included) => Some(
            read_snapshot(backend, last_included)?
                .ok_or_else(|| OpenError::CorruptSnapshot { name: snapshot_name(last_included) })?,
        ),
        None => None,
    };
    for older in snapshots {
        cleanup.remove(snapshot_name(older))?;
    }
    let snapshot_last_included = snapshot.as_ref().map_or(0, |snapshot| snapshot.last_included);

    let covered =
        segment_firsts.windows(2).take_while(|pair| pair[1] <= snapshot_last_included + 1).count();
    for &first in &segment_firsts[..covered] {
        cleanup.remove(segment_name(first))?;
    }

    let log = read_segments(backend, &segment_firsts[covered..], snapshot_last_included)?;
    let mut segments = log.segments;
    let wholly_covered = (0..segments.len())
        .take_while(|&i| last_record_of(&segments, i, log.last_record) <= snapshot_last_included)
        .count();
    for segment in segments.drain(..wholly_covered) {
        cleanup.remove(segment.name())?;
    }
    if !cleanup.removed.is_empty() {
        backend.sync_dir()?;
    }

    let layout = Layout {
        segments,
        log_end: log.last_record.max(snapshot_last_included),
        snapshot_last_included,
    };
    let recovered = Recovered {
        snapshot,
        first_record: snapshot_last_included + 1,
        records: log.records_after_snapshot,
        report: RecoveryReport { torn_tail: log.torn_tail, removed_files: cleanup.removed },
    };
    Ok((layout, recovered))
}

/// The segments of the log, read and checked (rules 4 and 5).
struct LogRead {
    segments: Vec<Segment>,
    /// The last record on disk (0 without segments).
    last_record: u64,
    records_after_snapshot: Vec<Vec<u8>>,
    torn_tail: Option<TornTail>,
}

fn read_segments<B: StorageBackend>(
    backend: &B,
    segment_firsts: &[u64],
    snapshot_last_included: u64,
) -> Result<LogRead, OpenError> {
    let mut log = LogRead {
        segments: Vec::new(),
        last_record: 0,
        records_after_snapshot: Vec::new(),
        torn_tail: None,
    };
    let Some(&first_record) = segment_firsts.first() else {
        return Ok(log);
    };
    if first_record > snapshot_last_included + 1 {
        return Err(OpenError::MissingRecordsAfterSnapshot {
            snapshot_last_included,
            first_record,
        });
    }
    let mut next_record = first_record.max(1);
    for (i, &first_record) in segment_firsts.iter().enumerate() {
        let name = segment_name(first_record);
        if first_record != next_record {
            return Err(OpenError::SegmentOutOfSequence {
                segment: name,
                expected_first_record: next_record,
            });
        }
        let mut file = backend.open(&name)?;
        let bytes = file.read_all()?;
        let scan = SegmentScan::scan(&bytes, first_record);
        let mut file_bytes = bytes.len() as u64;
        if let Some(damage) = scan.damage {
            let is_last_segment = i + 1 == segment_firsts.len();
            if !is_last_segment || !damage.torn_flush {
                return Err(OpenError::CorruptRecord {
                    segment: name,
                    offset: damage.offset as u64,
                });
            }
            file.set_len(damage.offset as u64)?;
            file.sync()?;
            file_bytes = damage.offset as u64;
            log.torn_tail = Some(TornTail {
                segment: name,
                offset: damage.offset as u64,
                dropped_bytes: (written_end(&bytes, damage.offset) - damage.offset) as u64,
            });
        }
        for (number, payload) in (first_record..).zip(&scan.records) {
            if number > snapshot_last_included {
                log.records_after_snapshot.push(bytes[payload.clone()].to_vec());
            }
        }
        log.segments.push(Segment { first_record, bytes: scan.valid_bytes as u64, file_bytes });
        next_record = first_record + scan.records.len() as u64;
    }
    log.last_record = next_record - 1;
    Ok(log)
}

/// The last record of `segments[i]` (one before its first if it is empty).
pub(crate) fn last_record_of(segments: &[Segment], i: usize, log_last_record: u64) -> u64 {
    segments.get(i + 1).map_or(log_last_record, |next| next.first_record - 1)
}

/// Removes files and remembers their names for the report.
struct Cleanup<'a, B> {
    backend: &'a B,
    removed: Vec<String>,
}

impl<B: StorageBackend> Cleanup<'_, B> {
    fn remove(&mut self, name: String) -> std::io::Result<()> {
        self.backend.remove(&name)?;
        self.removed.push(name);
        Ok(())
    }
}

fn is_temporary(name: &str) -> bool {
    name.strip_suffix(".tmp").is_some_and(|base| {
        temp_name(base) == name
            && (parse_snapshot_name(base).is_some() || parse_segment_name(base).is_some())
    })
}
