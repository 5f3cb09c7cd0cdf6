//! What a WAL flush costs on this disk, with and without preallocated segments
//! (`WalConfig::preallocate_bytes`, the `segment` module's docs): every flush appends one
//! record and syncs it, as a log replica does under a light load.
//!
//! ```text
//! cargo run --release -p strata-storage --example wal_sync -- [--dir DIR] [--flushes N]
//!     [--record-bytes B] [--files F] [--rounds R]
//! ```
//!
//! `--files F` flushes F logs at once, one thread each (a node's shard replicas). The two
//! settings alternate round by round in fresh directories under `--dir` (default: the system's
//! temporary directory, which must be on the disk to measure); the table gives the medians
//! over rounds of the wall time per flush and of the machine's CPU time per flush (every
//! process and kernel thread, from `/proc/stat`, since a journal commit runs in `jbd2`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use strata_storage::{OsBackend, Wal, WalConfig};

struct Options {
    dir: PathBuf,
    flushes: usize,
    record_bytes: usize,
    files: usize,
    rounds: usize,
}

fn parse() -> Options {
    let mut o = Options {
        dir: std::env::temp_dir(),
        flushes: 2000,
        record_bytes: 300,
        files: 1,
        rounds: 5,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let value = pair.get(1).unwrap_or_else(|| usage(&format!("{} needs a value", pair[0])));
        let number = || value.parse().unwrap_or_else(|_| usage(&format!("{value}: not a number")));
        match pair[0].as_str() {
            "--dir" => o.dir = PathBuf::from(value),
            "--flushes" => o.flushes = number(),
            "--record-bytes" => o.record_bytes = number(),
            "--files" => o.files = number().max(1),
            "--rounds" => o.rounds = number().max(1),
            other => usage(&format!("unknown option {other}")),
        }
    }
    o
}

fn usage(why: &str) -> ! {
    eprintln!("wal_sync: {why}\nusage: wal_sync [--dir DIR] [--flushes N] [--record-bytes B] [--files F] [--rounds R]");
    std::process::exit(2)
}

/// The machine's busy CPU time so far, in seconds (every CPU; idle and iowait excluded).
fn machine_busy_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|t| t.parse().ok())
        .collect();
    let busy: u64 =
        ticks.iter().sum::<u64>() - ticks.get(3).unwrap_or(&0) - ticks.get(4).unwrap_or(&0);
    busy as f64 / 100.0 // USER_HZ
}

/// One log in `dir`: `flushes` flushes of one record each.
fn flush_one_log(dir: &Path, config: WalConfig, flushes: usize, record: &[u8]) {
    let backend = OsBackend::open(dir).expect("open the directory");
    let (mut wal, _) = Wal::open(backend, config).expect("open the log");
    for _ in 0..flushes {
        wal.append(record).expect("append");
        wal.flush().expect("flush");
    }
}

/// (wall µs per flush, machine CPU µs per flush) of one round.
fn round(o: &Options, preallocate_bytes: u64, round: usize) -> (f64, f64) {
    let config = WalConfig { preallocate_bytes, ..WalConfig::default() };
    let base =
        o.dir.join(format!("strata-wal-sync-{}-{preallocate_bytes}-{round}", std::process::id()));
    let record = vec![0x5a; o.record_bytes];
    let (cpu, start) = (machine_busy_s(), Instant::now());
    std::thread::scope(|s| {
        for f in 0..o.files {
            let (dir, config, record) = (base.join(f.to_string()), config.clone(), &record);
            s.spawn(move || flush_one_log(&dir, config, o.flushes, record));
        }
    });
    let flushes = (o.flushes * o.files) as f64;
    let result = (
        start.elapsed().as_secs_f64() * 1e6 / o.flushes as f64,
        (machine_busy_s() - cpu) * 1e6 / flushes,
    );
    let _ = std::fs::remove_dir_all(&base);
    result
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let o = parse();
    let settings = [0, WalConfig::default().preallocate_bytes];
    let mut results = vec![(Vec::new(), Vec::new()); settings.len()];
    for r in 0..o.rounds {
        for (i, &p) in settings.iter().enumerate() {
            let (wall, cpu) = round(&o, p, r);
            eprintln!("round {}: preallocate {p}: {wall:.0} µs per flush, {cpu:.0} µs CPU", r + 1);
            results[i].0.push(wall);
            results[i].1.push(cpu);
        }
    }
    println!(
        "{} flushes of one {}-byte record, {} log(s) at once, in {}; medians of {} rounds",
        o.flushes,
        o.record_bytes,
        o.files,
        o.dir.display(),
        o.rounds
    );
    println!("| preallocate_bytes | wall µs per flush (per log) | machine CPU µs per flush |");
    println!("|---:|---:|---:|");
    for (p, (wall, cpu)) in settings.iter().zip(results) {
        println!("| {p} | {:.0} | {:.0} |", median(wall), median(cpu));
    }
}
