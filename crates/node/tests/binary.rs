//! The `strata-node` binary: exit codes, signals, structured logs.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_strata-node");

fn data_dir(tag: &str) -> String {
    std::env::temp_dir()
        .join(format!("strata-node-bin-{}-{tag}", std::process::id()))
        .display()
        .to_string()
}

/// Collects stderr lines on a thread; returns a receiver of lines.
fn lines(child: &mut Child) -> mpsc::Receiver<String> {
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn wait_for_line(rx: &mpsc::Receiver<String>, needle: &str, seen: &mut Vec<String>) -> String {
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("no {needle:?} in {seen:#?}"));
        seen.push(line.clone());
        if line.contains(needle) {
            return line;
        }
    }
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    for _ in 0..1000 {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    panic!("strata-node did not exit");
}

fn signal(child: &Child, sig: &str) {
    let ok =
        Command::new("kill").arg(format!("-{sig}")).arg(child.id().to_string()).status().unwrap();
    assert!(ok.success());
}

/// A TLS directory like `strata up`'s (CA, nodes 0-2, an admin client).
fn tls_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::path::PathBuf::from(data_dir(tag)).join("tls");
    strata_tls::gen::init_dir(&dir, &[0, 1, 2].map(strata_wire::NodeId)).unwrap();
    dir
}

#[test]
fn sigterm_stops_the_node_cleanly_with_json_logs() {
    let tls = tls_dir("term-tls");
    let mut child = Command::new(BIN)
        .args(["--node-id", "0", "--client-addr", "127.0.0.1:0", "--peer-addr", "127.0.0.1:0"])
        .args(["--peer", "1=127.0.0.1:1", "--log-format", "json", "--data-dir", &data_dir("term")])
        .arg("--tls-ca")
        .arg(tls.join("ca.pem"))
        .arg("--tls-cert")
        .arg(tls.join("node-0.pem"))
        .arg("--tls-key")
        .arg(tls.join("node-0.key"))
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = lines(&mut child);
    let mut seen = Vec::new();
    let started = wait_for_line(&rx, "node started", &mut seen);
    let v: serde_json::Value = serde_json::from_str(&started).expect("a JSON log line");
    assert_eq!(v["level"], "INFO");
    assert_eq!(v["node"], 0);
    assert!(v["client"].as_str().unwrap().starts_with("127.0.0.1:"), "{v}");
    assert_eq!(v["peers"], "1=127.0.0.1:1");
    assert_eq!(v["tls"], true, "{v}");
    signal(&child, "TERM");
    wait_for_line(&rx, "node stopped", &mut seen);
    let st = wait_exit(&mut child);
    assert!(st.success(), "{st:?}: {seen:#?}");
    assert!(seen.iter().any(|l| l.contains("SIGTERM")), "{seen:#?}");
}

#[test]
fn sigint_stops_the_node_cleanly() {
    let mut child = Command::new(BIN)
        .args(["--node-id", "3", "--client-addr", "127.0.0.1:0", "--peer-addr", "127.0.0.1:0"])
        .args(["--data-dir", &data_dir("int"), "--insecure-plaintext"])
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = lines(&mut child);
    let mut seen = Vec::new();
    wait_for_line(&rx, "node started", &mut seen);
    signal(&child, "INT");
    let st = wait_exit(&mut child);
    assert!(st.success(), "{st:?}");
}

#[test]
fn a_config_error_exits_with_2_and_says_what_to_fix() {
    let out = Command::new(BIN)
        .args(["--client-addr", "127.0.0.1:0", "--peer-addr", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("missing node id") && err.contains("--node-id"), "{err}");

    let out = Command::new(BIN)
        .args([
            "--node-id",
            "1",
            "--client-addr",
            "127.0.0.1:0",
            "--peer-addr",
            "127.0.0.1:0",
            "--peer",
            "1=127.0.0.1:9",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("own id 1"));
}

#[test]
fn a_node_without_tls_credentials_or_an_explicit_plaintext_does_not_start() {
    let base = ["--node-id", "0", "--client-addr", "127.0.0.1:0", "--peer-addr", "127.0.0.1:0"];
    let out = Command::new(BIN).args(base).args(["--data-dir", &data_dir("notls")]).output();
    let out = out.unwrap();
    assert_eq!(out.status.code(), Some(2), "TLS is the default: no silent plaintext");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--tls-ca") && err.contains("--insecure-plaintext"), "{err}");
    // Node 0 with node 1's certificate: it would be accepted by its peers as node 1.
    let tls = tls_dir("wrong-cert");
    let out = Command::new(BIN)
        .args(base)
        .args(["--data-dir", &data_dir("wrong-cert")])
        .arg("--tls-ca")
        .arg(tls.join("ca.pem"))
        .arg("--tls-cert")
        .arg(tls.join("node-1.pem"))
        .arg("--tls-key")
        .arg(tls.join("node-1.key"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("does not name node-0"), "{err}");
}

#[test]
fn a_busy_port_exits_with_1() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = Command::new(BIN)
        .args([
            "--node-id",
            "0",
            "--client-addr",
            &addr,
            "--peer-addr",
            "127.0.0.1:0",
            "--data-dir",
            &data_dir("busy"),
            "--insecure-plaintext",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("address in use") && err.contains(&addr), "{err}");
}
