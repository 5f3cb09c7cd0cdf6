//! Real-process crash test (DESIGN.md testing layer 5, ORCA §9.6).
//!
//! The test binary re-executes itself as a child (selected by the environment variable
//! [`CHILD_ENV`]). The child opens a [`Wal`] on the real disk ([`OsBackend`]) in a temporary
//! directory, appends and flushes `flushed` records, appends `unflushed` more without flushing,
//! prints `ready <last_record>` and sleeps. The parent reads that line, sends `SIGKILL`, reaps
//! the child, and reopens the log: exactly the flushed records must be there, with no torn
//! tail, and no byte of an unflushed record may be in any file — they never left the process,
//! so the page cache (which survives a process kill) never saw them. Then the log must continue
//! correctly after the restart.
//!
//! A kill cannot drop the page cache, so this test shows the §9.6 property (nothing unflushed
//! reaches the OS); what a power failure does to synced and unsynced data is the subject of the
//! simulated-disk crash tests in `src/crash_tests.rs`.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use strata_storage::{OsBackend, Wal, WalConfig};

/// Set in the child's environment to `<dir>|<flushed>|<unflushed>|<segment_bytes>`.
const CHILD_ENV: &str = "STRATA_STORAGE_SIGKILL_CHILD";

/// Every unflushed payload starts with this, so the parent can search the files for it.
const UNFLUSHED_MARKER: &[u8] = b"UNFLUSHED-";

fn flushed_payload(i: u64) -> Vec<u8> {
    format!("flushed-{i:05}").into_bytes() // 13 bytes: a 37-byte frame
}

fn unflushed_payload(i: u64) -> Vec<u8> {
    let mut payload = UNFLUSHED_MARKER.to_vec();
    payload.extend_from_slice(format!("{i:03}").as_bytes());
    payload
}

fn config(segment_bytes: u64) -> WalConfig {
    WalConfig { segment_bytes, ..WalConfig::default() }
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        child(&spec);
        return;
    }
    if std::env::args().any(|arg| arg == "--list") {
        return; // nothing to list for test runners: this binary is one test
    }
    // (flushed, unflushed, segment_bytes). A 37-byte frame makes 370-byte segments hold 10.
    let cases = [
        (0, 3, 64 << 20),   // nothing flushed at all
        (1, 1, 64 << 20),   // one flushed record, one lost
        (57, 25, 64 << 20), // several group commits in one segment
        (40, 15, 370),      // flushed records fill 4 segments exactly; the rest would start a 5th
        (73, 30, 370),      // flushed across 8 segments; the unflushed would cross 3 more
        (5, 200, 100),      // a lost batch that would have rotated many times
    ];
    for (flushed, unflushed, segment_bytes) in cases {
        parent(flushed, unflushed, segment_bytes);
        println!(
            "sigkill: {flushed} flushed + {unflushed} unflushed, segment_bytes {segment_bytes}: ok"
        );
    }
    println!("test result: ok. {} cases passed", cases.len());
}

fn child(spec: &str) {
    let fields: Vec<&str> = spec.split('|').collect();
    let [dir, flushed, unflushed, segment_bytes] = fields[..] else { panic!("bad spec {spec:?}") };
    let flushed: u64 = flushed.parse().unwrap();
    let unflushed: u64 = unflushed.parse().unwrap();
    let (mut wal, recovered) =
        Wal::open(OsBackend::open(dir).unwrap(), config(segment_bytes.parse().unwrap())).unwrap();
    assert!(recovered.records.is_empty() && recovered.snapshot.is_none());
    for i in 0..flushed {
        wal.append(&flushed_payload(i)).unwrap();
        if i % 7 == 6 {
            wal.flush().unwrap(); // group commits of 7
        }
    }
    assert_eq!(wal.flush().unwrap(), flushed);
    for i in 0..unflushed {
        wal.append(&unflushed_payload(i)).unwrap();
    }
    assert_eq!(wal.persisted_record(), flushed);
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "ready {}", wal.last_record()).unwrap();
    stdout.flush().unwrap();
    drop(stdout);
    std::thread::sleep(Duration::from_secs(120));
    // Never reached unless the parent failed to kill us; the parent then fails anyway.
    std::process::exit(3);
}

/// Kills the child if the parent panics before reaping it.
struct KillOnDrop(Option<Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn parent(flushed: u64, unflushed: u64, segment_bytes: u64) {
    let dir = tempfile::tempdir().unwrap();
    let wal_dir = dir.path().join("wal");
    let spec = format!("{}|{flushed}|{unflushed}|{segment_bytes}", wal_dir.display());
    let child = Command::new(std::env::current_exe().unwrap())
        .env(CHILD_ENV, spec)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut guard = KillOnDrop(Some(child));
    let child = guard.0.as_mut().unwrap();

    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim_end(), format!("ready {}", flushed + unflushed), "child said {line:?}");

    // SAFETY: `kill` has no memory-safety preconditions; the pid is our own unreaped child.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
    assert_eq!(rc, 0, "kill failed: {}", std::io::Error::last_os_error());
    let status = guard.0.take().unwrap().wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL), "child status {status:?}");

    // The unflushed records never reached the OS: no file holds a byte of them.
    let mut segments = 0;
    for entry in fs::read_dir(&wal_dir).unwrap() {
        let path = entry.unwrap().path();
        let bytes = fs::read(&path).unwrap();
        assert!(
            !bytes.windows(UNFLUSHED_MARKER.len()).any(|window| window == UNFLUSHED_MARKER),
            "{} holds unflushed data",
            path.display()
        );
        segments += 1;
    }
    let records_per_segment = (segment_bytes / 37).max(1);
    assert_eq!(
        segments,
        flushed.div_ceil(records_per_segment),
        "segment files in {}",
        wal_dir.display()
    );

    // Restart: exactly the flushed records, nothing repaired.
    let expected: Vec<Vec<u8>> = (0..flushed).map(flushed_payload).collect();
    let (mut wal, recovered) = reopen(&wal_dir, segment_bytes);
    assert_eq!(recovered.records, expected);
    assert_eq!(recovered.first_record, 1);
    assert_eq!(recovered.report, Default::default(), "a kill tears nothing");
    assert_eq!((wal.last_record(), wal.persisted_record()), (flushed, flushed));

    // The log continues where the flushed records end.
    assert_eq!(wal.append(b"after restart").unwrap(), flushed + 1);
    assert_eq!(wal.flush().unwrap(), flushed + 1);
    drop(wal);
    let (_, recovered) = reopen(&wal_dir, segment_bytes);
    assert_eq!(recovered.records.len() as u64, flushed + 1);
    assert_eq!(recovered.records[..flushed as usize], expected[..]);
    assert_eq!(recovered.records.last().unwrap(), b"after restart");
}

fn reopen(dir: &Path, segment_bytes: u64) -> (Wal<OsBackend>, strata_storage::Recovered) {
    Wal::open(OsBackend::open(dir).unwrap(), config(segment_bytes)).unwrap()
}
