//! Crash-consistency tests of the [`Wal`] on the [`SimBackend`].
//!
//! The main property test drives random sequences of append / flush / truncate / snapshot
//! (with compaction) on tiny segments, so that flushes rotate segments all the time and
//! truncations and compactions cross segment boundaries. It cuts the power inside operations
//! (after a random number of disk operations) and crashes between them — clean, or tearing the
//! unsynced writes (prefixes, or sectors persisted out of order) — sometimes cutting the power
//! again inside recovery; then it reopens and checks the recovered log against a model:
//!
//! * every record flushed before the crash is there, intact, in order;
//! * nothing beyond what the interrupted operation could have written survives, and nothing
//!   that was only appended does (it never left the process);
//! * the snapshot is one of the two the interrupted operation could leave, and matches the log;
//! * recovery's repairs are durable (a second open finds nothing to repair, a crash right
//!   after recovery changes nothing) and the log continues correctly after it.
//!
//! Every checker has a canary: the `planted_*` tests plant a missing file sync and a missing
//! directory sync in the WAL and require the checker to flag them.

use proptest::prelude::*;

use crate::wal::PlantedBug;
use crate::{
    OpenError, Recovered, SimBackend, SnapshotError, StorageBackend, StorageFile, TruncateError,
    Wal, WalConfig,
};

/// One step of a random run.
#[derive(Debug, Clone)]
enum Op {
    /// Buffer records of these payload lengths (plus an 8-byte unique id each).
    Append(Vec<usize>),
    Flush,
    /// `truncate_after(last_record - back)`; below the snapshot it must be refused.
    Truncate {
        back: u64,
    },
    /// `install_snapshot(last_record + ahead - back)`; a point that is not newer than the
    /// installed snapshot must be refused.
    Snapshot {
        back: u64,
        ahead: u64,
    },
    /// Crash between operations; `torn` tears unsynced writes with that seed;
    /// `open_power` additionally cuts the power inside the first recovery attempt.
    Crash {
        torn: Option<u64>,
        open_power: Option<u64>,
    },
    /// Cut the power after this many disk operations of `during` (a flush, truncate or
    /// snapshot), then crash (tearing with `torn`) whether or not it completed.
    CutPower {
        after_ops: u64,
        torn: Option<u64>,
        during: Box<Op>,
    },
}

/// What a crash must leave: the log up to `records.len()` and the snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Durable {
    /// Records 1..=end (those inside the snapshot included, as the model knows them).
    records: Vec<Vec<u8>>,
    snapshot: Option<u64>,
}

/// The log as the WAL should present it.
#[derive(Debug, Clone, Default)]
struct Model {
    /// Every record, 1-based by position, buffered ones included. Records a snapshot jumped
    /// over (installed beyond the log) are fillers the model invents.
    records: Vec<Vec<u8>>,
    /// `persisted_record()`.
    durable_end: u64,
    snapshot: Option<u64>,
}

impl Model {
    fn last_record(&self) -> u64 {
        self.records.len() as u64
    }

    fn durable(&self) -> Durable {
        Durable {
            records: self.records[..self.durable_end as usize].to_vec(),
            snapshot: self.snapshot,
        }
    }

    fn flush(&mut self) {
        self.durable_end = self.last_record();
    }

    fn truncate_after(&mut self, record: u64) {
        self.records.truncate(record as usize);
        self.durable_end = self.durable_end.min(record);
    }

    fn install_snapshot(&mut self, last_included: u64) {
        if last_included >= self.last_record() {
            for number in self.last_record() + 1..=last_included {
                self.records.push(format!("filler {number}").into_bytes());
            }
            self.durable_end = last_included;
        } else {
            self.durable_end = self.durable_end.max(last_included);
        }
        self.snapshot = Some(last_included);
    }
}

/// The snapshot data for the log prefix `records`: its length and a digest of every record,
/// so a snapshot that does not match its log is caught.
fn snapshot_data(records: &[Vec<u8>]) -> Vec<u8> {
    let digest = records.iter().fold(0u32, |crc, record| {
        crc32c::crc32c_append(
            crc32c::crc32c_append(crc, &(record.len() as u64).to_le_bytes()),
            record,
        )
    });
    format!("{} records, digest {digest:08x}", records.len()).into_bytes()
}

/// A unique payload: a serial number and `len` bytes derived from it.
fn payload(serial: u64, len: usize) -> Vec<u8> {
    let mut bytes = serial.to_le_bytes().to_vec();
    bytes.extend((0..len).map(|i| (serial as usize * 31 + i * 7) as u8));
    bytes
}

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

/// Checks `recovered` against the states a crash may leave: it must be a prefix of `before`
/// or of `after`, at least as long as the shorter one (with `exact`, equal to `after`).
/// Returns the state the log now has.
fn check_recovered(
    recovered: &Recovered,
    before: &Durable,
    after: &Durable,
    exact: bool,
) -> Result<Model, String> {
    let snapshot = recovered.snapshot.as_ref().map(|snapshot| snapshot.last_included);
    let end = recovered.last_record();
    let low = before.records.len().min(after.records.len()) as u64;
    let candidates: &[&Durable] = if exact { &[after] } else { &[before, after] };
    let mut mismatches = Vec::new();
    for candidate in candidates {
        let why = (|| {
            ensure!(
                snapshot == candidate.snapshot,
                "snapshot {snapshot:?}, expected {:?}",
                candidate.snapshot
            );
            if let Some(recovered_snapshot) = &recovered.snapshot {
                let last = recovered_snapshot.last_included as usize;
                ensure!(last <= candidate.records.len(), "snapshot beyond the log");
                ensure!(
                    recovered_snapshot.data == snapshot_data(&candidate.records[..last]),
                    "snapshot data does not match the log"
                );
            }
            ensure!(
                recovered.first_record == snapshot.unwrap_or(0) + 1,
                "first_record {}",
                recovered.first_record
            );
            if exact {
                ensure!(
                    end == candidate.records.len() as u64,
                    "recovered up to {end}, expected exactly {}",
                    candidate.records.len()
                );
            }
            ensure!(end >= low, "recovered up to {end}: flushed records up to {low} are lost");
            ensure!(
                end <= candidate.records.len() as u64,
                "recovered up to {end}: beyond the {} records that could be on disk",
                candidate.records.len()
            );
            for (number, record) in (recovered.first_record..).zip(&recovered.records) {
                ensure!(
                    *record == candidate.records[number as usize - 1],
                    "record {number} is {record:?}, expected {:?}",
                    candidate.records[number as usize - 1]
                );
            }
            Ok(Model {
                records: candidate.records[..end as usize].to_vec(),
                durable_end: end,
                snapshot,
            })
        })();
        match why {
            Ok(model) => return Ok(model),
            Err(why) => mismatches.push(why),
        }
    }
    Err(format!(
        "recovered log matches no allowed state: {mismatches:?}; report {:?}",
        recovered.report
    ))
}

/// Counters a run reports, so tests can show their cases reach the interesting states.
#[derive(Debug, Default, Clone, Copy)]
struct RunStats {
    crashes: u64,
    torn_tails: u64,
    interrupted_ops: u64,
}

/// A [`Wal`] on a crashable disk, its model, and the checks.
struct Harness {
    disk: SimBackend,
    config: WalConfig,
    planted: Option<PlantedBug>,
    wal: Option<Wal<SimBackend>>,
    model: Model,
    serial: u64,
    stats: RunStats,
}

impl Harness {
    fn new(config: WalConfig, planted: Option<PlantedBug>) -> Result<Self, String> {
        let mut harness = Self {
            disk: SimBackend::new(),
            config,
            planted,
            wal: None,
            model: Model::default(),
            serial: 0,
            stats: RunStats::default(),
        };
        let recovered = harness.open()?;
        ensure!(
            recovered.records.is_empty() && recovered.snapshot.is_none(),
            "a fresh disk is empty"
        );
        Ok(harness)
    }

    fn open(&mut self) -> Result<Recovered, String> {
        let (mut wal, recovered) = Wal::open(self.disk.clone(), self.config.clone())
            .map_err(|error| format!("open failed: {error}"))?;
        wal.planted_bug = self.planted;
        self.wal = Some(wal);
        Ok(recovered)
    }

    fn wal(&mut self) -> &mut Wal<SimBackend> {
        self.wal.as_mut().expect("open")
    }

    fn check_positions(&mut self) -> Result<(), String> {
        let (last, persisted, snapshot) = {
            let wal = self.wal();
            (wal.last_record(), wal.persisted_record(), wal.snapshot_last_included())
        };
        ensure!(
            last == self.model.last_record(),
            "last_record {last}, model {}",
            self.model.last_record()
        );
        ensure!(
            persisted == self.model.durable_end,
            "persisted_record {persisted}, model {}",
            self.model.durable_end
        );
        ensure!(
            snapshot == self.model.snapshot,
            "snapshot {snapshot:?}, model {:?}",
            self.model.snapshot
        );
        Ok(())
    }

    fn append(&mut self, len: usize) -> Result<(), String> {
        let record = payload(self.serial, len);
        self.serial += 1;
        let number =
            self.wal().append(&record).map_err(|error| format!("append failed: {error}"))?;
        self.model.records.push(record);
        ensure!(number == self.model.last_record(), "append returned {number}");
        Ok(())
    }

    /// Runs a disk operation. `Ok(true)` if it completed, `Ok(false)` if it failed with an I/O
    /// error (only allowed while the power is being cut).
    fn run_disk_op(&mut self, op: &Op, after: &mut Model) -> Result<bool, String> {
        let last = self.model.last_record();
        let snapshot = self.model.snapshot.unwrap_or(0);
        match *op {
            Op::Flush => {
                after.flush();
                match self.wal().flush() {
                    Ok(persisted) => {
                        ensure!(persisted == after.durable_end, "flush returned {persisted}");
                        Ok(true)
                    }
                    Err(crate::FlushError::Io(_)) => Ok(false),
                    Err(error) => Err(format!("flush: {error}")),
                }
            }
            Op::Truncate { back } => {
                let record = last.saturating_sub(back);
                let refused = record < snapshot;
                if !refused {
                    after.truncate_after(record);
                }
                match self.wal().truncate_after(record) {
                    Ok(()) => {
                        ensure!(
                            !refused,
                            "truncate_after({record}) below snapshot {snapshot} accepted"
                        );
                        Ok(true)
                    }
                    Err(TruncateError::BelowSnapshot { .. }) => {
                        ensure!(refused, "truncate_after({record}) refused");
                        Ok(true)
                    }
                    Err(TruncateError::Io(_)) => Ok(false),
                    Err(error) => Err(format!("truncate: {error}")),
                }
            }
            Op::Snapshot { back, ahead } => {
                let last_included = (last + ahead).saturating_sub(back);
                let stale = last_included <= snapshot;
                if !stale {
                    after.install_snapshot(last_included);
                }
                let data = snapshot_data(
                    &after.records[..(last_included as usize).min(after.records.len())],
                );
                match self.wal().install_snapshot(last_included, &data) {
                    Ok(()) => {
                        ensure!(!stale, "stale snapshot {last_included} accepted");
                        Ok(true)
                    }
                    Err(SnapshotError::Stale { .. }) => {
                        ensure!(stale, "snapshot {last_included} refused as stale");
                        Ok(true)
                    }
                    Err(SnapshotError::Io(_)) => Ok(false),
                    Err(error) => Err(format!("snapshot: {error}")),
                }
            }
            _ => unreachable!("not a disk operation"),
        }
    }

    /// Crashes, recovers (optionally through a recovery attempt the power cuts short) and
    /// checks the result against `before` / `after`.
    fn crash_and_check(
        &mut self,
        torn: Option<u64>,
        open_power: Option<u64>,
        before: &Durable,
        after: &Durable,
        exact: bool,
    ) -> Result<(), String> {
        self.wal = None;
        self.stats.crashes += 1;
        let crash = |disk: &SimBackend, salt: u64| match torn {
            Some(seed) => disk.crash_torn(seed.wrapping_add(salt)),
            None => disk.crash(),
        };
        crash(&self.disk, 0);
        if let Some(ops) = open_power {
            self.disk.fail_after(ops);
            match Wal::open(self.disk.clone(), self.config.clone()) {
                Ok(_) | Err(OpenError::Io(_)) => {}
                Err(error) => return Err(format!("interrupted recovery: {error}")),
            }
            crash(&self.disk, 1);
        }
        let recovered = self.open()?;
        if let Some(tail) = &recovered.report.torn_tail {
            ensure!(torn.is_some(), "a clean crash left a torn tail: {tail:?}");
            self.stats.torn_tails += 1;
            let len = self.disk.live_contents(&tail.segment).map(|bytes| bytes.len() as u64);
            // Cut, or removed (cut down to records the snapshot includes, or to nothing).
            let removed = recovered.report.removed_files.contains(&tail.segment);
            ensure!(
                len == Some(tail.offset) || (len.is_none() && removed),
                "torn tail {tail:?} not cut: length {len:?}"
            );
        }
        self.model = check_recovered(&recovered, before, after, exact)?;
        self.check_positions()?;

        // Recovery's repairs are durable: neither a reopen nor a crash right now finds
        // anything left to repair or changes what is recovered.
        self.wal = None;
        self.disk.crash();
        let again = self.open()?;
        ensure!(
            again.report == Default::default(),
            "second recovery repaired again: {:?}",
            again.report
        );
        ensure!(
            again.records == recovered.records && again.snapshot == recovered.snapshot,
            "second recovery differs"
        );
        self.check_positions()
    }

    /// Runs a flush, truncate or snapshot; with `power_cut`, the power is being cut (see
    /// [`Op::CutPower`]) and a crash tearing with that seed follows.
    fn disk_op(&mut self, op: &Op, power_cut: Option<Option<u64>>) -> Result<(), String> {
        let before = self.model.durable();
        let mut after = self.model.clone();
        let completed = self.run_disk_op(op, &mut after)?;
        match power_cut {
            None => {
                ensure!(completed, "{op:?} failed with the power on");
                self.model = after;
                self.check_positions()
            }
            Some(torn) if completed => {
                self.model = after;
                self.check_positions()?;
                let durable = self.model.durable();
                self.crash_and_check(torn, None, &durable, &durable, true)
            }
            Some(torn) => {
                self.stats.interrupted_ops += 1;
                let after = after.durable();
                self.crash_and_check(torn, None, &before, &after, false)
            }
        }
    }

    fn run(&mut self, ops: &[Op]) -> Result<(), String> {
        for op in ops {
            match op {
                Op::Append(lens) => {
                    for &len in lens {
                        self.append(len)?;
                    }
                }
                Op::Crash { torn, open_power } => {
                    let durable = self.model.durable();
                    self.crash_and_check(*torn, *open_power, &durable, &durable, true)?;
                }
                Op::CutPower { after_ops, torn, during } => {
                    self.disk.fail_after(*after_ops);
                    self.disk_op(during, Some(*torn))?;
                }
                Op::Flush | Op::Truncate { .. } | Op::Snapshot { .. } => self.disk_op(op, None)?,
            }
        }
        // The log continues correctly after everything above.
        for len in [0, 5, 50] {
            self.append(len)?;
        }
        let persisted =
            self.wal().flush().map_err(|error| format!("flush after recovery: {error}"))?;
        self.model.flush();
        ensure!(persisted == self.model.durable_end, "flush returned {persisted}");
        self.check_positions()?;
        let durable = self.model.durable();
        self.crash_and_check(None, None, &durable, &durable, true)
    }
}

fn run(config: WalConfig, ops: &[Op], planted: Option<PlantedBug>) -> Result<RunStats, String> {
    let mut harness = Harness::new(config, planted)?;
    harness.run(ops)?;
    Ok(harness.stats)
}

fn config(segment_bytes: u64) -> WalConfig {
    WalConfig { segment_bytes, ..WalConfig::default() }
}

fn disk_op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Flush),
        1 => (0u64..12).prop_map(|back| Op::Truncate { back }),
        1 => (0u64..10, 0u64..4).prop_map(|(back, ahead)| Op::Snapshot { back, ahead }),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let torn = prop_oneof![Just(None), any::<u64>().prop_map(Some)];
    prop_oneof![
        6 => prop::collection::vec(0usize..40, 1..6).prop_map(Op::Append),
        1 => prop::collection::vec(0usize..40, 10..30).prop_map(Op::Append),
        4 => Just(Op::Flush),
        1 => (0u64..12).prop_map(|back| Op::Truncate { back }),
        1 => (0u64..10, 0u64..4).prop_map(|(back, ahead)| Op::Snapshot { back, ahead }),
        1 => (torn, prop::option::of(0u64..4))
            .prop_map(|(torn, open_power)| Op::Crash { torn, open_power }),
        // A flush's write-then-sync usually sits at disk operations 0-2, so most cuts land
        // there, and most tear: that is where torn tails come from.
        4 => (
            prop_oneof![4 => 0u64..3, 1 => 3u64..12],
            prop_oneof![1 => Just(None), 3 => any::<u64>().prop_map(Some)],
            disk_op_strategy(),
        )
            .prop_map(|(after_ops, torn, during)| Op::CutPower { after_ops, torn, during: Box::new(during) }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// The main crash-consistency property (module docs).
    #[test]
    fn random_operations_and_crashes_keep_the_log_consistent(
        segment_bytes in prop_oneof![Just(24u64), Just(64), Just(160), Just(1 << 20)],
        preallocate_bytes in prop_oneof![Just(0u64), Just(40), Just(1 << 20)],
        ops in prop::collection::vec(op_strategy(), 1..50),
    ) {
        let config = WalConfig { preallocate_bytes, ..config(segment_bytes) };
        if let Err(why) = run(config, &ops, None) {
            return Err(TestCaseError::fail(why));
        }
    }
}

/// A run that exercises every kind of operation and crash, for the canaries and the
/// reachability check.
fn scripted_ops() -> Vec<Op> {
    vec![
        Op::Append(vec![10, 20, 30]),
        Op::Flush,
        Op::Append(vec![5; 12]),
        Op::Flush,
        Op::Crash { torn: None, open_power: None },
        Op::Append(vec![7; 4]),
        Op::Flush,
        Op::Truncate { back: 9 },
        Op::Crash { torn: Some(7), open_power: None },
        Op::Snapshot { back: 3, ahead: 0 },
        Op::Append(vec![3; 6]),
        Op::Flush,
        Op::Crash { torn: Some(9), open_power: Some(1) },
    ]
}

#[test]
fn scripted_run_passes() {
    for segment_bytes in [24, 64, 160, 1 << 20] {
        run(config(segment_bytes), &scripted_ops(), None).unwrap();
    }
}

/// Canary: a flush that never syncs its segment loses acknowledged records in a crash.
#[test]
fn planted_missing_file_sync_is_caught() {
    let error = run(config(1 << 20), &scripted_ops(), Some(PlantedBug::SkipFileSync)).unwrap_err();
    assert!(error.contains("lost") || error.contains("matches no allowed state"), "{error}");
}

/// Canary: a segment created (or removed) without a directory sync loses its name in a crash:
/// new records vanish, or truncated ones come back.
#[test]
fn planted_missing_dir_sync_is_caught() {
    for segment_bytes in [24, 64] {
        let error =
            run(config(segment_bytes), &scripted_ops(), Some(PlantedBug::SkipDirSync)).unwrap_err();
        assert!(error.contains("matches no allowed state"), "{error}");
    }
}

/// Power cuts at every step of a flush that spans three segments, over many tearing seeds:
/// every outcome recovers, and the sweep does reach torn tails (so the property test's torn-tail
/// checks are not vacuous).
#[test]
fn power_cuts_inside_operations_reach_torn_tails() {
    let mut total = RunStats::default();
    for seed in 0..64u64 {
        for after_ops in 0..6 {
            let ops = vec![
                Op::Append(vec![30; 5]),
                Op::Flush,
                Op::Append(vec![30; 5]),
                Op::CutPower { after_ops, torn: Some(seed), during: Box::new(Op::Flush) },
            ];
            let stats =
                run(config(100), &ops, None).unwrap_or_else(|why| panic!("seed {seed}: {why}"));
            total.crashes += stats.crashes;
            total.torn_tails += stats.torn_tails;
            total.interrupted_ops += stats.interrupted_ops;
        }
    }
    assert!(total.interrupted_ops > 100, "{total:?}");
    assert!(total.torn_tails > 10, "{total:?}");
}

// ---------------------------------------------------------------------------------------------
// Deterministic scenarios.

/// Opens a WAL on `disk` and appends and flushes `payloads`, one flush per record (so that
/// every record but the last is followed by a record of a later flush).
fn write_log(disk: &SimBackend, config: WalConfig, payloads: &[Vec<u8>]) -> Wal<SimBackend> {
    let (mut wal, _) = Wal::open(disk.clone(), config).unwrap();
    for record in payloads {
        wal.append(record).unwrap();
        wal.flush().unwrap();
    }
    wal
}

fn payloads(count: u64, len: usize) -> Vec<Vec<u8>> {
    (0..count).map(|serial| payload(serial, len)).collect()
}

fn segment_names(disk: &SimBackend) -> Vec<String> {
    let mut names: Vec<String> =
        disk.list().unwrap().into_iter().filter(|name| name.starts_with("wal-")).collect();
    names.sort();
    names
}

/// Flips one bit of file `name`, durably.
fn flip(disk: &SimBackend, name: &str, offset: u64, mask: u8) {
    let mut file = disk.open(name).unwrap();
    let mut byte = [0];
    file.read_at(offset, &mut byte).unwrap();
    file.write_at(offset, &[byte[0] ^ mask]).unwrap();
    file.sync().unwrap();
}

const RECORD_BYTES: u64 = 8 + 16 + 8 + 20; // frame header + record meta + serial + 20 bytes

#[test]
fn append_touches_no_disk_and_flush_is_one_write_and_sync_per_segment() {
    let disk = SimBackend::new();
    let (mut wal, _) = Wal::open(disk.clone(), config(1 << 20)).unwrap();
    for record in payloads(100, 20) {
        wal.append(&record).unwrap();
    }
    assert_eq!(disk.stats(), Default::default(), "append only buffers");
    assert!(disk.list().unwrap().is_empty());
    assert_eq!(wal.flush().unwrap(), 100);
    let stats = disk.stats();
    assert_eq!(
        (stats.writes, stats.file_syncs, stats.dir_syncs),
        (1, 1, 1),
        "new segment: one dir sync"
    );
    for record in payloads(50, 20) {
        wal.append(&record).unwrap();
    }
    assert_eq!(wal.flush().unwrap(), 150);
    let stats = disk.stats();
    assert_eq!((stats.writes, stats.file_syncs, stats.dir_syncs), (2, 2, 1));
    assert_eq!(wal.flush().unwrap(), 150, "an empty flush");
    assert_eq!(disk.stats(), stats, "an empty flush does no I/O");

    // A batch spanning three segments: one write and one sync each, one directory sync.
    let disk = SimBackend::new();
    let (mut wal, _) = Wal::open(disk.clone(), config(10 * RECORD_BYTES)).unwrap();
    for record in payloads(25, 20) {
        wal.append(&record).unwrap();
    }
    wal.flush().unwrap();
    let stats = disk.stats();
    assert_eq!((stats.writes, stats.file_syncs, stats.dir_syncs), (3, 3, 1));
    assert_eq!(segment_names(&disk).len(), 3);
}

/// Preallocation (`segment` module docs): the first flush into a segment writes zeros up to a
/// chunk boundary with its records, the flushes after it overwrite them without growing the
/// file until they cross the boundary, and a reopen finds the zeros to be the clean end of the
/// log, not a torn tail.
#[test]
fn flushes_overwrite_preallocated_zeros_and_a_reopen_finds_a_clean_end() {
    let chunk = 4 * RECORD_BYTES + 10;
    let chunked = WalConfig { preallocate_bytes: chunk, ..config(1 << 20) };
    let disk = SimBackend::new();
    let mut wal = write_log(&disk, chunked.clone(), &payloads(1, 20));
    let name = segment_names(&disk).remove(0);
    let file_len = || disk.live_contents(&name).unwrap().len() as u64;
    assert_eq!(file_len(), chunk, "the first flush preallocates a chunk");
    let writes = disk.stats().writes;
    for record in payloads(4, 20).into_iter().skip(1) {
        wal.append(&record).unwrap();
        wal.flush().unwrap();
        assert_eq!(file_len(), chunk, "records 2..=4 fit in the chunk");
    }
    assert_eq!(disk.stats().writes, writes + 3, "one write per flush, zeros included");
    wal.append(&payload(4, 20)).unwrap();
    wal.flush().unwrap();
    assert_eq!(file_len(), 2 * chunk, "the fifth record crosses into a second chunk");
    drop(wal);
    disk.crash();

    let (mut wal, recovered) = Wal::open(disk.clone(), chunked.clone()).unwrap();
    assert_eq!(recovered.records, payloads(5, 20));
    assert_eq!(recovered.report, Default::default(), "zeros after the log are not damage");
    assert_eq!(file_len(), 2 * chunk, "and stay in place");
    wal.append(&payload(5, 20)).unwrap();
    wal.flush().unwrap();
    assert_eq!(file_len(), 2 * chunk, "the reopened log writes into its room");
    drop(wal);
    disk.crash();
    let (_, recovered) = Wal::open(disk.clone(), chunked).unwrap();
    assert_eq!(recovered.records, payloads(6, 20));

    // Without preallocation the file ends at its last record.
    let disk = SimBackend::new();
    drop(write_log(&disk, WalConfig { preallocate_bytes: 0, ..config(1 << 20) }, &payloads(3, 20)));
    let name = segment_names(&disk).remove(0);
    assert_eq!(disk.live_contents(&name).unwrap().len() as u64, 3 * RECORD_BYTES);
}

/// A torn write into preallocated room is cut like any torn tail, and the report counts the
/// bytes that were written, not the zeros after them.
#[test]
fn a_torn_tail_in_preallocated_room_is_cut_and_counts_only_written_bytes() {
    let disk = SimBackend::new();
    drop(write_log(&disk, config(1 << 20), &payloads(3, 20)));
    let name = segment_names(&disk).remove(0);
    assert_eq!(disk.live_contents(&name).unwrap().len() as u64, 256 << 10, "default chunk");
    let torn = crate::record::encode(b"a record that was being written");
    let mut file = disk.open(&name).unwrap();
    file.write_at(3 * RECORD_BYTES, &torn[..20]).unwrap();
    file.sync().unwrap();
    drop(file);
    let (_, recovered) = Wal::open(disk.clone(), config(1 << 20)).unwrap();
    assert_eq!(recovered.records, payloads(3, 20));
    let tail = recovered.report.torn_tail.expect("reported");
    assert_eq!((tail.offset, tail.dropped_bytes), (3 * RECORD_BYTES, 20));
}

#[test]
fn rotation_fills_segments_exactly_and_gives_an_oversized_record_its_own() {
    let disk = SimBackend::new();
    let mut wal = write_log(&disk, config(3 * RECORD_BYTES), &payloads(7, 20));
    let names = segment_names(&disk);
    assert_eq!(
        names,
        [
            "wal-00000000000000000001.log",
            "wal-00000000000000000004.log",
            "wal-00000000000000000007.log"
        ]
    );
    assert_eq!(disk.live_contents(&names[0]).unwrap().len() as u64, 3 * RECORD_BYTES);
    // A record larger than a segment goes alone into a fresh one; the next starts another.
    wal.append(&payload(100, 500)).unwrap();
    wal.append(&payload(101, 20)).unwrap();
    wal.flush().unwrap();
    assert_eq!(
        segment_names(&disk)[3..],
        ["wal-00000000000000000008.log", "wal-00000000000000000009.log"]
    );
    drop(wal);
    disk.crash();
    let (_, recovered) = Wal::open(disk.clone(), config(3 * RECORD_BYTES)).unwrap();
    assert_eq!(recovered.records.len(), 9);
    assert_eq!(recovered.records[7], payload(100, 500));
}

#[test]
fn unflushed_records_are_lost_in_a_crash_and_numbering_continues() {
    let disk = SimBackend::new();
    let mut wal = write_log(&disk, config(1 << 20), &payloads(3, 20));
    wal.append(b"never flushed").unwrap();
    assert_eq!(wal.last_record(), 4);
    assert_eq!(wal.persisted_record(), 3);
    drop(wal);
    disk.crash();
    let (mut wal, recovered) = Wal::open(disk.clone(), config(1 << 20)).unwrap();
    assert_eq!(recovered.records, payloads(3, 20));
    assert_eq!(recovered.report, Default::default());
    assert_eq!(wal.append(b"next").unwrap(), 4);
}

#[test]
fn torn_tail_is_cut_durably_reported_and_the_log_continues() {
    let disk = SimBackend::new();
    let records = payloads(5, 20);
    drop(write_log(&disk, config(1 << 20), &records));
    let name = segment_names(&disk).remove(0);
    // Half a record at the end, as a torn write leaves it.
    let torn = crate::record::encode(b"a record that was being written");
    let mut file = disk.open(&name).unwrap();
    file.write_at(5 * RECORD_BYTES, &torn[..20]).unwrap();
    file.sync().unwrap();
    drop(file);

    let (mut wal, recovered) = Wal::open(disk.clone(), config(1 << 20)).unwrap();
    assert_eq!(recovered.records, records);
    let tail = recovered.report.torn_tail.clone().expect("reported");
    assert_eq!(
        (tail.segment.as_str(), tail.offset, tail.dropped_bytes),
        (name.as_str(), 5 * RECORD_BYTES, 20)
    );
    assert_eq!(disk.live_contents(&name).unwrap().len() as u64, 5 * RECORD_BYTES);
    assert_eq!(wal.append(b"six").unwrap(), 6);
    wal.flush().unwrap();
    drop(wal);
    disk.crash();
    let (_, recovered) = Wal::open(disk.clone(), config(1 << 20)).unwrap();
    assert_eq!(recovered.records.len(), 6);
    assert_eq!(recovered.records[5], b"six");
    assert_eq!(recovered.report.torn_tail, None);
}

/// A damaged last record cannot be told apart from a torn write, so it is cut like one (and
/// reported): a crash tears only the end of what it interrupted.
#[test]
fn damaged_last_record_is_treated_as_a_torn_tail() {
    let disk = SimBackend::new();
    drop(write_log(&disk, config(1 << 20), &payloads(5, 20)));
    let name = segment_names(&disk).remove(0);
    flip(&disk, &name, 4 * RECORD_BYTES + 12, 0x01);
    let (_, recovered) = Wal::open(disk.clone(), config(1 << 20)).unwrap();
    assert_eq!(recovered.records, payloads(4, 20));
    assert_eq!(recovered.report.torn_tail.unwrap().offset, 4 * RECORD_BYTES);
}

/// A flush's sectors reach the disk in any order until its sync, so damage followed only by
/// records of the same (last) flush is a torn flush: cut from the damage on and reported, not
/// an error. (The flip side, pinned here: damage inside the last flush is treated the same.)
#[test]
fn damage_inside_the_last_flush_is_a_torn_flush() {
    for damage in ["missing sector", "flipped bit"] {
        let disk = SimBackend::new();
        let mut wal = write_log(&disk, config(1 << 20), &payloads(3, 20));
        for record in &payloads(8, 20)[3..] {
            wal.append(record).unwrap(); // records 4-8: one flush
        }
        wal.flush().unwrap();
        drop(wal);
        let name = segment_names(&disk).remove(0);
        let record_5 = 4 * RECORD_BYTES;
        match damage {
            "missing sector" => {
                let mut file = disk.open(&name).unwrap();
                file.write_at(record_5 + 16, &[0; 16]).unwrap();
                file.sync().unwrap();
            }
            _ => flip(&disk, &name, record_5 + 30, 0x08),
        }
        let (mut wal, recovered) = Wal::open(disk.clone(), config(1 << 20)).unwrap();
        assert_eq!(recovered.records, payloads(4, 20), "{damage}");
        let tail = recovered.report.torn_tail.unwrap();
        assert_eq!((tail.offset, tail.dropped_bytes), (record_5, 4 * RECORD_BYTES), "{damage}");
        assert_eq!(wal.append(b"five").unwrap(), 5);
    }
}

fn assert_open_fails_with_corrupt_record(
    disk: &SimBackend,
    config: WalConfig,
    segment: &str,
    offset: u64,
) {
    let before: Vec<_> = segment_names(disk).iter().map(|name| disk.live_contents(name)).collect();
    for _ in 0..2 {
        match Wal::open(disk.clone(), config.clone()) {
            Err(OpenError::CorruptRecord { segment: bad, offset: at }) => {
                assert_eq!((bad.as_str(), at), (segment, offset));
            }
            other => panic!("expected CorruptRecord, got {other:?}"),
        }
        let after: Vec<_> =
            segment_names(disk).iter().map(|name| disk.live_contents(name)).collect();
        assert_eq!(before, after, "a failed open must not cut anything");
    }
}

#[test]
fn corrupt_payload_in_the_middle_of_the_log_fails_open() {
    let disk = SimBackend::new();
    drop(write_log(&disk, config(1 << 20), &payloads(20, 20)));
    let name = segment_names(&disk).remove(0);
    flip(&disk, &name, 7 * RECORD_BYTES + 20, 0x10);
    assert_open_fails_with_corrupt_record(&disk, config(1 << 20), &name, 7 * RECORD_BYTES);
    let message = Wal::open(disk.clone(), config(1 << 20)).unwrap_err().to_string();
    assert!(message.contains(&name) && message.contains("acknowledged"), "{message}");
}

/// A flipped length makes a middle record look like one running past the end of the file —
/// the shape of a torn tail — but valid records after it give it away.
#[test]
fn corrupt_length_in_the_middle_of_the_log_fails_open() {
    let disk = SimBackend::new();
    drop(write_log(&disk, config(1 << 20), &payloads(20, 20)));
    let name = segment_names(&disk).remove(0);
    flip(&disk, &name, 7 * RECORD_BYTES + 3, 0x40);
    assert_open_fails_with_corrupt_record(&disk, config(1 << 20), &name, 7 * RECORD_BYTES);
}

/// Damage at the end of a segment that is not the last one is not a torn tail: its successor
/// was created only after it was synced.
#[test]
fn corrupt_last_record_of_an_earlier_segment_fails_open() {
    let disk = SimBackend::new();
    drop(write_log(&disk, config(4 * RECORD_BYTES), &payloads(12, 20)));
    let names = segment_names(&disk);
    assert_eq!(names.len(), 3);
    flip(&disk, &names[1], 3 * RECORD_BYTES + 9, 0x02);
    assert_open_fails_with_corrupt_record(
        &disk,
        config(4 * RECORD_BYTES),
        &names[1],
        3 * RECORD_BYTES,
    );
    // Cut short instead of flipped: the same.
    let disk = SimBackend::new();
    drop(write_log(&disk, config(4 * RECORD_BYTES), &payloads(12, 20)));
    disk.open(&names[0]).unwrap().set_len(4 * RECORD_BYTES - 3).unwrap();
    assert_open_fails_with_corrupt_record(
        &disk,
        config(4 * RECORD_BYTES),
        &names[0],
        3 * RECORD_BYTES,
    );
}

#[test]
fn missing_segment_and_corrupt_snapshot_fail_open() {
    let disk = SimBackend::new();
    drop(write_log(&disk, config(4 * RECORD_BYTES), &payloads(12, 20)));
    let names = segment_names(&disk);
    disk.remove(&names[1]).unwrap();
    match Wal::open(disk.clone(), config(4 * RECORD_BYTES)) {
        Err(OpenError::SegmentOutOfSequence { segment, expected_first_record: 5 }) => {
            assert_eq!(segment, names[2])
        }
        other => panic!("expected SegmentOutOfSequence, got {other:?}"),
    }
    disk.remove(&names[0]).unwrap();
    assert!(matches!(
        Wal::open(disk.clone(), config(4 * RECORD_BYTES)),
        Err(OpenError::MissingRecordsAfterSnapshot { snapshot_last_included: 0, first_record: 9 })
    ));

    let disk = SimBackend::new();
    let mut wal = write_log(&disk, config(4 * RECORD_BYTES), &payloads(12, 20));
    wal.install_snapshot(6, b"state").unwrap();
    drop(wal);
    let name = crate::snapshot::snapshot_name(6);
    flip(&disk, &name, 12, 0x01);
    match Wal::open(disk.clone(), config(4 * RECORD_BYTES)) {
        Err(OpenError::CorruptSnapshot { name: bad }) => assert_eq!(bad, name),
        other => panic!("expected CorruptSnapshot, got {other:?}"),
    }
}

#[test]
fn truncation_across_segments_survives_a_crash_and_appends_continue() {
    let disk = SimBackend::new();
    let mut wal = write_log(&disk, config(3 * RECORD_BYTES), &payloads(10, 20));
    wal.append(b"pending").unwrap();
    wal.truncate_after(4).unwrap();
    assert_eq!((wal.last_record(), wal.persisted_record()), (4, 4));
    assert_eq!(
        segment_names(&disk),
        ["wal-00000000000000000001.log", "wal-00000000000000000004.log"]
    );
    assert_eq!(wal.append(b"new five").unwrap(), 5);
    wal.flush().unwrap();
    drop(wal);
    disk.crash();
    let (_, recovered) = Wal::open(disk.clone(), config(3 * RECORD_BYTES)).unwrap();
    let mut expected = payloads(4, 20);
    expected.push(b"new five".to_vec());
    assert_eq!(recovered.records, expected);
}

#[test]
fn snapshot_compacts_covered_segments_and_one_beyond_the_log_supersedes_it() {
    let disk = SimBackend::new();
    let mut wal = write_log(&disk, config(3 * RECORD_BYTES), &payloads(10, 20));
    wal.install_snapshot(7, b"state 7").unwrap();
    // Segments 1-3 and 4-6 are covered; 7-9 still holds record 8 and 9.
    assert_eq!(
        segment_names(&disk),
        ["wal-00000000000000000007.log", "wal-00000000000000000010.log"]
    );
    assert!(matches!(wal.truncate_after(6), Err(TruncateError::BelowSnapshot { .. })));
    assert!(matches!(wal.install_snapshot(7, b"again"), Err(SnapshotError::Stale { .. })));
    wal.append(b"pending").unwrap();
    wal.install_snapshot(20, b"leader's state").unwrap();
    assert_eq!((wal.last_record(), wal.persisted_record()), (20, 20));
    assert!(segment_names(&disk).is_empty());
    assert_eq!(wal.append(b"twenty-one").unwrap(), 21);
    wal.flush().unwrap();
    drop(wal);
    disk.crash();
    let (wal, recovered) = Wal::open(disk.clone(), config(3 * RECORD_BYTES)).unwrap();
    assert_eq!(recovered.snapshot.unwrap().data, b"leader's state");
    assert_eq!(
        (recovered.first_record, recovered.records.clone()),
        (21, vec![b"twenty-one".to_vec()])
    );
    assert_eq!(wal.snapshot_last_included(), Some(20));
    assert_eq!(disk.list().unwrap().iter().filter(|name| name.starts_with("snap-")).count(), 1);
}

/// Every prefix of a snapshot install's disk operations, crashed with tearing, recovers either
/// the old snapshot with the whole log or the new one with the log after it.
#[test]
fn a_crash_at_every_step_of_a_snapshot_install_recovers() {
    for ops in 0..16 {
        for seed in 0..8 {
            let disk = SimBackend::new();
            let mut wal = write_log(&disk, config(3 * RECORD_BYTES), &payloads(10, 20));
            wal.install_snapshot(2, b"old").unwrap();
            disk.fail_after(ops);
            let installed = wal.install_snapshot(7, b"new").is_ok();
            drop(wal);
            disk.crash_torn(seed);
            let (_, recovered) = Wal::open(disk.clone(), config(3 * RECORD_BYTES)).unwrap();
            let snapshot = recovered.snapshot.clone().unwrap();
            match snapshot.last_included {
                2 => {
                    assert!(!installed, "ops {ops} seed {seed}");
                    assert_eq!(snapshot.data, b"old");
                    assert_eq!(recovered.records, payloads(10, 20)[2..]);
                }
                7 => {
                    assert_eq!(snapshot.data, b"new");
                    assert_eq!(recovered.records, payloads(10, 20)[7..]);
                }
                other => panic!("snapshot {other}"),
            }
        }
    }
}

/// Every prefix of a truncation across segments, crashed with tearing, recovers a prefix of the
/// old log at least as long as the truncation point — never a gap — and exactly the truncation
/// point once `truncate_after` returned.
#[test]
fn a_crash_at_every_step_of_a_truncation_recovers_a_prefix() {
    let records = payloads(10, 20);
    for ops in 0..12 {
        for seed in 0..8 {
            let disk = SimBackend::new();
            let mut wal = write_log(&disk, config(3 * RECORD_BYTES), &records);
            disk.fail_after(ops);
            let truncated = wal.truncate_after(2).is_ok();
            drop(wal);
            disk.crash_torn(seed);
            let (_, recovered) = Wal::open(disk.clone(), config(3 * RECORD_BYTES)).unwrap();
            let kept = recovered.records.len();
            assert!((2..=10).contains(&kept), "ops {ops} seed {seed}: {kept} records");
            assert_eq!(recovered.records, records[..kept], "ops {ops} seed {seed}");
            if truncated {
                assert_eq!(kept, 2, "ops {ops} seed {seed}");
            }
        }
    }
}
