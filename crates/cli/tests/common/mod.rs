//! Helpers for tests that run the real `strata` binary: a supervised local cluster in a
//! temporary directory on ports that are free.

#![allow(dead_code)]

pub mod bank;
pub mod proxy;
pub mod stopped_txn;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const STRATA: &str = env!("CARGO_BIN_EXE_strata");

/// The flag that runs a cluster (and talks to one) without TLS. The tests that drive the
/// client library directly, or start `strata node` themselves, run their clusters plain: TLS
/// is `strata up`'s default and has tests of its own (`tls.rs`, `cli.rs`).
pub const PLAIN: &str = "--insecure-plaintext";

pub fn temp_dir(tag: &str) -> PathBuf {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let dir = std::env::temp_dir().join(format!("strata-cli-{tag}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A base port whose client and peer ranges look free right now (`strata up` re-checks and
/// fails clearly if another process takes one meanwhile): the chaos harness's probe, below the
/// ephemeral range.
pub fn free_base_port(nodes: u16) -> u16 {
    strata_chaos::procs::free_base_port(nodes).expect("no free port range found")
}

/// A running `strata up`. Dropping it kills the supervisor (its nodes die with it).
pub struct Up {
    pub child: Child,
    pub data_dir: PathBuf,
    pub endpoints: Vec<SocketAddr>,
    pub pids: Vec<i32>,
    stdout: mpsc::Receiver<String>,
    /// How it was started, for `crash_and_restart`.
    args: Vec<String>,
    /// `cluster.json` as it wrote it, for `outlive_supervisor`.
    cluster_file: String,
}

impl Up {
    pub fn start(nodes: u16) -> Up {
        Up::start_with(nodes, &[])
    }

    /// `strata up` with extra flags (e.g. `--lease-term-ms`).
    pub fn start_with(nodes: u16, extra: &[&str]) -> Up {
        // A range probed free can still be taken before the nodes bind it (another test's
        // cluster): `strata up` then exits at once, and the cluster starts again elsewhere.
        for _ in 0..4 {
            if let Some(up) = Up::try_start(nodes, extra) {
                return up;
            }
        }
        panic!("`strata up` failed to start 4 times");
    }

    fn try_start(nodes: u16, extra: &[&str]) -> Option<Up> {
        let data_dir = temp_dir("up");
        let base = free_base_port(nodes);
        let mut args: Vec<String> = vec![
            "up".into(),
            "--nodes".into(),
            nodes.to_string(),
            "--base-port".into(),
            base.to_string(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        Up::spawn(data_dir, args)
    }

    /// SIGKILLs every node and the supervisor (a power cut for the whole cluster), then starts
    /// `strata up` again on the same data directory and ports.
    pub fn crash_and_restart(&mut self) {
        for &pid in &self.pids {
            // SAFETY: the node processes this test started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        for &pid in &self.pids {
            let deadline = Instant::now() + Duration::from_secs(10);
            while alive(pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        // The restart binds the same ports: wait until the dead nodes' listeners are gone.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.ports_free() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let data_dir = self.data_dir.clone();
        let mut restarted = Up::spawn(data_dir, self.args.clone())
            .expect("`strata up` restarts on its data directory");
        std::mem::swap(self, &mut restarted);
        restarted.pids.clear(); // the old processes are dead; dropping it kills nothing
        restarted.data_dir = std::env::temp_dir().join("strata-cli-nothing-to-remove");
    }

    /// Whether every node's client and peer port can be bound (no listener left on them).
    fn ports_free(&self) -> bool {
        self.endpoints.iter().all(|a| {
            let peer = SocketAddr::new(a.ip(), a.port() + 100); // `strata up`'s peer offset
            std::net::TcpListener::bind(a).is_ok() && std::net::TcpListener::bind(peer).is_ok()
        })
    }

    fn spawn(data_dir: PathBuf, args: Vec<String>) -> Option<Up> {
        let mut child = Command::new(STRATA)
            .args(&args)
            .arg("--data-dir")
            .arg(&data_dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let (tx, stdout) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut up = Up {
            child,
            data_dir,
            endpoints: Vec::new(),
            pids: Vec::new(),
            stdout,
            args,
            cluster_file: String::new(),
        };
        let line = up.try_wait_for_line("endpoints: ", Duration::from_secs(30))?;
        up.endpoints = line["endpoints: ".len()..].split(',').map(|a| a.parse().unwrap()).collect();
        up.cluster_file = std::fs::read_to_string(up.data_dir.join("cluster.json")).unwrap();
        let file: serde_json::Value = serde_json::from_str(&up.cluster_file).unwrap();
        up.pids = file["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["pid"].as_i64().unwrap() as i32)
            .collect();
        Some(up)
    }

    pub fn wait_for_line(&self, prefix: &str, within: Duration) -> String {
        self.try_wait_for_line(prefix, within).unwrap_or_else(|| {
            panic!("`strata up` printed no line starting with {prefix:?} within {within:?}")
        })
    }

    /// The first line starting with `prefix`; `None` if `strata up` exited or `within` passed.
    fn try_wait_for_line(&self, prefix: &str, within: Duration) -> Option<String> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stdout.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => return Some(line),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }

    /// Once every node `strata up` started has exited (each killed and restarted by the test),
    /// the supervisor stops and removes `cluster.json`: waits for that, then writes the file
    /// back, so that `strata` commands and `restart_node` still find the cluster that the
    /// restarted nodes serve. Does nothing while one of its nodes runs.
    pub fn outlive_supervisor(&self) {
        if self.pids.iter().any(|&p| alive(p)) {
            return;
        }
        eventually("`strata up` to stop", Duration::from_secs(15), || {
            !alive(self.child.id() as i32)
        });
        std::fs::write(self.data_dir.join("cluster.json"), &self.cluster_file).unwrap();
    }

    /// Runs a `strata` command against this cluster.
    pub fn strata(&self, args: &[&str]) -> Output {
        strata_in(&self.data_dir, args)
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: signalling the supervisor we spawned.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, sig) }, 0);
    }

    /// Waits for the supervisor to exit; panics after `within`.
    pub fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(Instant::now() < deadline, "`strata up` did not exit within {within:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for &pid in &self.pids {
            // SAFETY: the node processes this test started (they also die with the supervisor).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        // STRATA_KEEP_TEST_DIRS=1 keeps the nodes' data and logs for a post-mortem.
        if std::env::var_os("STRATA_KEEP_TEST_DIRS").is_none() {
            let _ = std::fs::remove_dir_all(&self.data_dir);
        } else {
            eprintln!("kept {}", self.data_dir.display());
        }
    }
}

/// Starts node `i` again as `strata up` started it (same id, addresses, data directory, cluster
/// id, peers), from `cluster.json`, in plaintext (`PLAIN`); its output is appended to its log.
pub fn restart_node(data_dir: &Path, i: usize) -> Child {
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data_dir.join("cluster.json")).unwrap())
            .unwrap();
    let nodes = file["nodes"].as_array().unwrap();
    let me = nodes.iter().find(|n| n["id"].as_u64() == Some(i as u64)).unwrap();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(me["log"].as_str().unwrap())
        .unwrap();
    let mut cmd = Command::new(STRATA);
    cmd.arg("node")
        .args(["--node-id", &i.to_string()])
        .args(["--cluster-id", &file["cluster_id"].as_u64().unwrap().to_string()])
        .args(["--client-addr", me["client_addr"].as_str().unwrap()])
        .args(["--peer-addr", me["peer_addr"].as_str().unwrap()])
        .arg("--data-dir")
        .arg(data_dir.join(format!("n{i}")))
        .arg(PLAIN);
    for p in nodes.iter().filter(|n| n["id"].as_u64() != Some(i as u64)) {
        cmd.args(["--peer", &format!("{}={}", p["id"], p["peer_addr"].as_str().unwrap())]);
    }
    cmd.stdin(Stdio::null()).stdout(log.try_clone().unwrap()).stderr(log).spawn().unwrap()
}

/// Node processes this test started itself; killed and reaped when the test ends (before the
/// `Up` guard removes the data directory).
pub struct Restarted(pub Vec<Child>);

impl Drop for Restarted {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn strata_in(data_dir: &Path, args: &[&str]) -> Output {
    Command::new(STRATA).args(args).arg("--data-dir").arg(data_dir).output().unwrap()
}

/// Runs `cmd` (a `strata` command with its arguments) with `input` on its standard input.
pub fn with_stdin(mut cmd: Command, input: &[u8]) -> Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child =
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

/// Whether a process exists and is not a zombie (orphaned nodes are reparented to whatever
/// reaps orphans here, which may be slow to do so; a zombie has stopped running).
/// Whether process `pid` still runs. A zombie whose other threads are still exiting counts
/// as running: SIGKILL makes the thread-group leader a zombie before the other threads are
/// done (a disk thread inside `fdatasync` can take a while), and the process's files and
/// sockets close only with the last of them. (CI once saw a cluster restarted on its ports
/// refused one of them, a node's killed a moment before; `Up::crash_and_restart` now also
/// waits until the ports bind.)
pub fn alive(pid: i32) -> bool {
    let zombie = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the parenthesised command name.
        Ok(stat) => {
            stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        }
        Err(_) => return false,
    };
    !zombie || std::fs::read_dir(format!("/proc/{pid}/task")).is_ok_and(|d| d.count() > 1)
}

/// Polls `cond` every 20 ms until it holds; panics with `what` after `within`.
pub fn eventually(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out after {within:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
