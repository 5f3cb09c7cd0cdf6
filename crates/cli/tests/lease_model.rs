//! `strata txn lease-model`: the real binary, no cluster. Kairos's §5.12 line (R 1 ms, W 19 ms:
//! ideal lease 6 ms, 6 hits per lease, fresh-hit rate 0.7350), the simulator beside the model,
//! Fig. 5's CSV, bad input, and `strata txn` itself still reading a transaction.

use std::process::{Command, Output, Stdio};

const STRATA: &str = env!("CARGO_BIN_EXE_strata");

fn strata(args: &[&str]) -> Output {
    // No cluster is involved: standard input is closed so that nothing could wait on it.
    Command::new(STRATA).args(args).stdin(Stdio::null()).output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn lease_model_prints_the_ideal_lease_of_5_12() {
    let out = strata(&["txn", "lease-model", "--r-ms", "1", "--w-ms", "19"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("R 1 ms, W 19 ms: ideal lease 6 ms, 6 hits per lease, fresh-hit rate 0.7350"),
        "{text}"
    );
    // The table around the optimum: §5.12's FreshHitRate and stale rates at 1, 2, 3, 5, 6 ms.
    let rows: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| l.split_whitespace().collect())
        .collect();
    let row = |d: &str| rows.iter().find(|r| r[0] == d).unwrap_or_else(|| panic!("d {d}: {text}"));
    for (d, fresh, stale) in [
        ("1", "0.4871", "0.0129"),
        ("2", "0.6328", "0.0339"),
        ("3", "0.6938", "0.0562"),
        ("5", "0.7327", "0.1006"),
        ("6", "0.7350", "0.1221"),
    ] {
        assert_eq!((row(d)[2], row(d)[3]), (fresh, stale), "d = {d} ms:\n{text}");
    }
    assert!(text.contains("0.7350  0.1221  0.1429  <- ideal"), "{text}");

    // --json: the same numbers for a machine.
    let out = strata(&["txn", "lease-model", "--r-ms", "1", "--w-ms", "19", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ideal"]["hits_per_lease"], 6);
    assert!((v["ideal"]["lease_ms"].as_f64().unwrap() - 6.0).abs() < 1e-9, "{v}");
    assert!((v["ideal"]["fresh_hit_rate"].as_f64().unwrap() - 0.7350).abs() < 1e-4, "{v}");
    assert_eq!(v["rows"].as_array().unwrap().len(), 8, "{v}");
}

#[test]
fn lease_model_simulates_beside_the_model_and_sweeps_fig_5() {
    let args = ["txn", "lease-model", "--r-ms", "1", "--w-ms", "19", "--monte-carlo", "200000"];
    let out = strata(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("sim fresh"), "{text}");
    let largest: f64 = text
        .lines()
        .find_map(|l| l.split("largest |model - simulated|: ").nth(1))
        .unwrap_or_else(|| panic!("no summary: {text}"))
        .parse()
        .unwrap();
    assert!(largest < 0.02, "{text}");
    assert_eq!(stdout(&strata(&args)), text, "a seed reproduces the simulation");

    // --sweep: Fig. 5's data, d = R .. 20R, model and simulation side by side.
    let out = strata(&[
        "txn",
        "lease-model",
        "--r-ms",
        "1",
        "--w-ms",
        "19",
        "--sweep",
        "--monte-carlo",
        "100000",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let csv = stdout(&out);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "d_ms,hits_per_lease,model_fresh,model_stale,model_miss,mc_fresh,mc_stale,mc_miss"
    );
    assert_eq!(lines.len(), 21, "{csv}");
    let six: Vec<f64> = lines[6].split(',').map(|x| x.parse().unwrap()).collect();
    assert_eq!((six[0], six[1]), (6.0, 6.0));
    assert!((six[2] - 0.7350).abs() < 1e-4 && (six[5] - six[2]).abs() < 0.02, "{csv}");
}

#[test]
fn lease_model_refuses_bad_input_and_txn_still_reads_a_transaction() {
    for (args, says) in [
        (&["--r-ms", "0", "--w-ms", "19"][..], "R must be a positive"),
        (&["--r-ms", "-1", "--w-ms", "19"][..], "R must be a positive"),
        (&["--r-ms", "1", "--w-ms", "0"][..], "W must be a positive"),
        (&["--r-ms", "1", "--w-ms", "-19"][..], "W must be a positive"),
        (&["--r-ms", "x", "--w-ms", "19"][..], "R must be a positive"),
        (&["--r-ms", "1"][..], "--w-ms"),
    ] {
        let out = strata(&[&["txn", "lease-model"][..], args].concat());
        assert_eq!(out.status.code(), Some(2), "{args:?}: usage error");
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
    // A transaction's flags and the subcommand exclude each other...
    let out = strata(&["txn", "--table", "t", "lease-model", "--r-ms", "1", "--w-ms", "19"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("cannot be used with"), "{}", stderr(&out));
    // ... and `strata txn` without the subcommand is the transaction command it was: it reads
    // operations from standard input (here none, which it refuses before connecting).
    for args in [&["txn", "--table", "t"][..], &["txn"][..]] {
        let out = strata(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(stderr(&out).contains("no operation on standard input"), "{}", stderr(&out));
    }
}
