//! Log tables with real node processes and the `strata` CLI: `table create` on every node
//! (idempotent, conflicts and invalid combinations refused), `table list`, put/get/del with
//! `--table` and `--immediate`, `status --json` showing the shards, and SIGKILL of every node
//! followed by a restart from disk: no acknowledged sync (or immediate) write is lost.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::*;

struct Nodes {
    dir: PathBuf,
    base: u16,
    children: Vec<Option<Child>>,
}

impl Nodes {
    fn client(&self, i: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.base + i))
    }

    fn endpoints(&self) -> String {
        (0..3).map(|i| self.client(i).to_string()).collect::<Vec<_>>().join(",")
    }

    fn start(&mut self, i: u16) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("n{i}.log")))
            .unwrap();
        let mut cmd = Command::new(STRATA);
        cmd.args(["node", "--node-id", &i.to_string()])
            .args(["--client-addr", &self.client(i).to_string()])
            .args(["--peer-addr", &format!("127.0.0.1:{}", self.base + 100 + i)])
            .arg("--data-dir")
            .arg(self.dir.join(format!("n{i}")))
            .arg(PLAIN);
        for j in (0..3).filter(|&j| j != i) {
            cmd.args(["--peer", &format!("{j}=127.0.0.1:{}", self.base + 100 + j)]);
        }
        let child = cmd.stdout(Stdio::null()).stderr(Stdio::from(log)).spawn().unwrap();
        self.children[i as usize] = Some(child);
        let addr = self.client(i);
        eventually("the node to listen", Duration::from_secs(10), || {
            std::net::TcpStream::connect(addr).is_ok()
        });
    }

    fn kill_all(&mut self) {
        for c in self.children.iter_mut().flatten() {
            // SAFETY: a node process this test started.
            unsafe { libc::kill(c.id() as i32, libc::SIGKILL) };
            let _ = c.wait();
        }
        self.children.iter_mut().for_each(|c| *c = None);
    }

    fn strata(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(STRATA);
        cmd.args(args).args(["--endpoints", &self.endpoints(), "--timeout", "20", PLAIN]);
        cmd
    }

    /// Waits until each of `table`'s `shards` shards has a leader (`strata status --json`). A
    /// table's first transaction otherwise may find a shard still electing: its other
    /// participants' locks outlive `T_TX` meanwhile and recovery aborts it `Recovered`
    /// (correct, but not what this test checks).
    fn await_leaders(&self, table: &str, shards: u64) {
        eventually(
            &format!("a leader for every shard of {table}"),
            Duration::from_secs(20),
            || {
                let Ok(status) = serde_json::from_str::<serde_json::Value>(&text(
                    &self.strata(&["status", "--json"]).stdout,
                )) else {
                    return false;
                };
                let led: std::collections::BTreeSet<u64> = status
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|n| n["shards"].as_array().into_iter().flatten())
                    .filter(|s| s["table"] == table && s["role"] == "leader")
                    .filter_map(|s| s["shard"].as_u64())
                    .collect();
                led.len() as u64 == shards
            },
        );
    }

    /// `strata ARGS` with `input` on its standard input.
    fn strata_stdin(&self, args: &[&str], input: &str) -> Output {
        with_stdin(self.command(args), input.as_bytes())
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        self.kill_all();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[track_caller]
fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

#[test]
fn log_tables_through_the_cli_survive_sigkill_of_every_node() {
    let mut nodes =
        Nodes { dir: temp_dir("log"), base: free_base_port(3), children: vec![None, None, None] };
    for i in 0..3 {
        nodes.start(i);
    }

    // Invalid definitions are refused before any node is asked.
    let out = nodes.strata(&["table", "create", "bad", "--durability", "async"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("active-set reads need the durability check"),
        "{}",
        text(&out.stderr)
    );
    let out = nodes.strata(&["put", "--immediate", "k", "v"]);
    assert_eq!(out.status.code(), Some(2), "--immediate needs --table");

    // A sync table with leader reads, and a default (cad, active-set) one.
    let created =
        ok(&nodes.strata(&["table", "create", "t", "--durability", "sync", "--reads", "leader"]));
    assert_eq!(created.matches(": created").count(), 3, "{created}");
    let again =
        ok(&nodes.strata(&["table", "create", "t", "--durability", "sync", "--reads", "leader"]));
    assert_eq!(again.matches("already exists").count(), 3, "idempotent: {again}");
    let out = nodes.strata(&["table", "create", "t", "--durability", "cad", "--shards", "2"]);
    assert_eq!(out.status.code(), Some(1), "a conflicting definition fails");
    assert!(
        text(&out.stderr).contains("failed on:")
            && text(&out.stderr).contains(&nodes.client(0).to_string())
    );
    ok(&nodes.strata(&["table", "create", "c"]));
    let list = ok(&nodes.strata(&["table", "list"]));
    assert!(
        list.lines().any(|l| l.starts_with('t') && l.contains("sync") && l.contains("leader")),
        "{list}"
    );
    assert!(
        list.lines().any(|l| l.starts_with('c') && l.contains("cad") && l.contains("active-set")),
        "{list}"
    );

    // Writes and reads through the CLI.
    let out = ok(&nodes.strata(&["put", "--table", "t", "--show-version", "k", "v1"]));
    assert!(out.is_empty());
    assert_eq!(ok(&nodes.strata(&["get", "--table", "t", "k"])), "v1\n");
    ok(&nodes.strata(&["put", "--table", "t", "gone", "x"]));
    ok(&nodes.strata(&["del", "--table", "t", "gone"]));
    assert_eq!(
        nodes.strata(&["get", "--table", "t", "gone"]).status.code(),
        Some(3),
        "deleted: not found"
    );
    let out = nodes.strata(&["put", "--table", "c", "--immediate", "--show-version", "ck", "cv"]);
    assert!(text(&out.stderr).starts_with("index ("), "{}", text(&out.stderr));
    ok(&out);
    assert_eq!(ok(&nodes.strata(&["get", "--table", "c", "ck"])), "cv\n");
    // Log commands with results (issue #18 item 1): fetch-and-add on decimal counters,
    // compare-and-swap, and writes conditional on absence, a value or a version.
    let faa = |delta: &str| nodes.strata(&["faa", "--table", "t", "n", delta]);
    assert_eq!(ok(&faa("5")), "0\n");
    assert_eq!(ok(&faa("-2")), "5\n");
    assert_eq!(ok(&nodes.strata(&["get", "--table", "t", "n"])), "3\n");
    let out = faa("-4");
    assert_eq!(out.status.code(), Some(2), "below zero is refused");
    assert!(text(&out.stderr).contains("out of 0..="), "{}", text(&out.stderr));
    let out = nodes.strata(&["faa", "--table", "t", "k", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("not a counter"), "{}", text(&out.stderr));
    assert_eq!(ok(&nodes.strata(&["get", "--table", "t", "k"])), "v1\n", "left unchanged");
    let out = ok(&nodes.strata(&["faa", "--table", "t", "n", "1", "--repeat", "3"]));
    assert_eq!(out, "3\n4\n5\n");
    assert_eq!(ok(&nodes.strata(&["cas", "--table", "t", "k", "v1", "v2"])), "swapped\n");
    let out = nodes.strata(&["cas", "--table", "t", "k", "v1", "v3"]);
    assert_eq!(out.status.code(), Some(6));
    assert!(text(&out.stdout).starts_with("not swapped\nversion: ("), "{}", text(&out.stdout));
    let out = nodes.strata(&["cas", "--table", "t", "--expect-absent", "k", "v3"]);
    assert_eq!(out.status.code(), Some(6), "k exists");
    ok(&nodes.strata(&["cas", "--table", "t", "--expect-absent", "fresh", "f1"]));
    let out = nodes.strata(&["put", "--table", "t", "--if-absent", "fresh", "f2"]);
    assert_eq!(out.status.code(), Some(6));
    assert!(text(&out.stdout).starts_with("rejected: the key is at version ("));
    // A version read with --show-version guards the next write; a stale one is rejected.
    let read = nodes.strata(&["get", "--table", "t", "--show-version", "fresh"]);
    let version = text(&read.stderr).split_whitespace().nth(2).unwrap().to_string();
    ok(&nodes.strata(&["put", "--table", "t", "--if-version", &version, "fresh", "f3"]));
    let out = nodes.strata(&["put", "--table", "t", "--if-version", &version, "fresh", "f4"]);
    assert_eq!(out.status.code(), Some(6), "the version moved on");
    ok(&nodes.strata(&["del", "--table", "t", "--if-value", "f3", "fresh"]));
    assert_eq!(nodes.strata(&["get", "--table", "t", "fresh"]).status.code(), Some(3));
    let out = nodes.strata(&["put", "--if-absent", "k", "v"]);
    assert_eq!(out.status.code(), Some(2), "conditions are for log tables");
    // Transactions (issue #18 items 2-3): a table opts in; `strata txn` reads the operations
    // from standard input.
    let out = nodes.strata(&["table", "create", "bank", "--txn", "rifl", "--durability", "cad"]);
    assert_eq!(out.status.code(), Some(2), "cad cannot keep votes: {}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--durability sync"), "{}", text(&out.stderr));
    ok(&nodes.strata(&["table", "create", "bank", "--txn", "rifl", "--shards", "2"]));
    assert!(ok(&nodes.strata(&["table", "list"]))
        .lines()
        .any(|l| l.starts_with("bank") && l.contains("rifl")));
    nodes.await_leaders("bank", 2);
    let txn = |input: &str, extra: &[&str]| {
        let mut args = vec!["txn", "--table", "bank"];
        args.extend_from_slice(extra);
        nodes.strata_stdin(&args, input)
    };
    assert_eq!(ok(&txn("put alice 100\nput bob 5\n", &[])), "committed\n");
    let transfer = "# move 30 from alice to bob\ncheck alice 100\nadd alice -30\nadd bob 30\nget alice\nget bob\nget carol\n";
    assert_eq!(ok(&txn(transfer, &[])), "70\n35\n(absent)\ncommitted\n");
    let out = txn(transfer, &[]);
    assert_eq!(out.status.code(), Some(8), "the check fails now");
    assert!(
        text(&out.stdout).starts_with("aborted: check bank:alice failed"),
        "{}",
        text(&out.stdout)
    );
    let out = txn("add alice -71\n", &[]);
    assert_eq!(out.status.code(), Some(2), "below zero: {}", text(&out.stderr));
    assert_eq!(ok(&txn("get bank:alice\nget bob\ndel bob\n", &[])), "70\n35\ncommitted\n");
    assert_eq!(nodes.strata(&["get", "--table", "bank", "bob"]).status.code(), Some(3));
    let out = nodes.strata_stdin(&["txn"], "get alice\n");
    assert_eq!(out.status.code(), Some(2), "no table: {}", text(&out.stderr));
    let out = txn("put t:k v\n", &[]);
    assert!(text(&out.stderr).contains("does not take transactions"), "{}", text(&out.stderr));
    // Kairos tables (issue #19): the same `strata txn`, validated in the shards' logs; plain
    // writes refused.
    let kairos = ["table", "create", "kb", "--txn", "kairos", "--validation", "server"];
    ok(&nodes.strata(&[&kairos[..], &["--shards", "2"]].concat()));
    assert!(ok(&nodes.strata(&["table", "list"]))
        .lines()
        .any(|l| l.starts_with("kb") && l.contains("kairos")));
    nodes.await_leaders("kb", 2);
    let ktxn = |input: &str| nodes.strata_stdin(&["txn", "--table", "kb"], input);
    assert_eq!(ok(&ktxn("put alice 100\nput bob 5\n")), "committed\n");
    assert_eq!(ok(&ktxn(transfer)), "70\n35\n(absent)\ncommitted\n");
    assert_eq!(ktxn(transfer).status.code(), Some(8), "the check fails now");
    let out = nodes.strata(&["put", "--table", "kb", "alice", "1"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("kairos table"), "{}", text(&out.stderr));
    assert!(ok(&nodes.strata(&["get", "--table", "kb", "alice"])).contains("70"));
    // Sharded validators (kairos.md §1.3 "CV"): V in 1..=64, in a companion table made with
    // the table; `strata txn` unchanged.
    for bad in ["sharded:0", "sharded:65", "sharded", "validators"] {
        let out = nodes.strata(&["table", "create", "ks", "--txn", "kairos", "--validation", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", text(&out.stderr));
    }
    let sharded = ["table", "create", "ks", "--txn", "kairos", "--validation", "sharded:3"];
    let created = ok(&nodes.strata(&[&sharded[..], &["--shards", "2"]].concat()));
    assert!(created.contains("3 validator(s), the shards of ks.validators"), "{created}");
    let list = ok(&nodes.strata(&["table", "list"]));
    let row = |name: &str| list.lines().find(|l| l.split_whitespace().next() == Some(name));
    assert!(row("ks").is_some_and(|l| l.contains("kairos") && l.contains("sharded:3")), "{list}");
    assert!(row("kb").is_some_and(|l| l.contains("server")), "{list}");
    let v = row("ks.validators").unwrap_or_else(|| panic!("{list}"));
    assert_eq!(v.split_whitespace().nth(5), Some("3"), "3 shards: {list}");
    assert!(v.contains("validators"), "{list}");
    nodes.await_leaders("ks", 2);
    nodes.await_leaders("ks.validators", 3);
    let stxn = |input: &str| nodes.strata_stdin(&["txn", "--table", "ks"], input);
    assert_eq!(ok(&stxn("put alice 100\nput bob 5\n")), "committed\n");
    assert_eq!(ok(&stxn(transfer)), "70\n35\n(absent)\ncommitted\n");
    assert_eq!(stxn(transfer).status.code(), Some(8), "the check fails now");
    assert!(!nodes.strata(&["put", "--table", "ks", "alice", "1"]).status.success());

    let out = nodes.strata(&["get", "--table", "nope", "k"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no table named"), "{}", text(&out.stderr));

    // Status shows every shard replica: one leader per table, its DI and active set.
    let status: serde_json::Value =
        serde_json::from_str(&ok(&nodes.strata(&["status", "--json"]))).unwrap();
    let shards: Vec<&serde_json::Value> = status
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|n| n["shards"].as_array().unwrap().iter())
        .collect();
    assert_eq!(
        shards.len(),
        36,
        "two tables of one shard, three of two and one of three (ks.validators) on three nodes, and the lease service's __leases"
    );
    assert_eq!(
        shards.iter().filter(|s| s["table"] == "__leases" && s["role"] == "leader").count(),
        1,
        "one lease service"
    );
    let c_leader = shards
        .iter()
        .find(|s| s["table"] == "c" && s["role"] == "leader")
        .expect("table c has a leader");
    assert!(c_leader["active_set"].as_array().unwrap().len() >= 2, "{c_leader}");
    assert_ne!(c_leader["durable_index"], "(0,0)", "{c_leader}");
    let text_status = ok(&nodes.strata(&["status"]));
    assert!(text_status.contains("active_set") && text_status.contains("leader"), "{text_status}");
    // Every replica counts the reads it served and, of those, the reads that waited for
    // MakeDurable (§5.5.1): the sync table's leader served the gets above.
    let t_leader = shards
        .iter()
        .find(|s| s["table"] == "t" && s["role"] == "leader")
        .expect("table t has a leader");
    assert!(t_leader["reads_served"].as_u64().unwrap() >= 1, "{t_leader}");
    assert_eq!(t_leader["reads_made_durable"], 0, "sync tables never wait: {t_leader}");
    assert!(text_status.contains("made_dur"), "{text_status}");

    // A table with the geo timer preset (§3.4); the catalog keeps it across the restart below.
    let created = ok(&nodes.strata(&["table", "create", "g", "--timers", "geo"]));
    assert!(created.contains("timers geo"), "{created}");

    // A table whose shard prefers node 2 as its leader: node 2 leads it once elected.
    let created = ok(&nodes.strata(&["table", "create", "p", "--leaders", "2"]));
    assert!(created.contains("preferred leaders 2"), "{created}");
    let leader_of_p = || -> Option<u64> {
        let status: serde_json::Value =
            serde_json::from_str(&ok(&nodes.strata(&["status", "--json"]))).ok()?;
        status
            .as_array()?
            .iter()
            .flat_map(|n| n["shards"].as_array().into_iter().flatten())
            .find_map(|s| {
                (s["table"] == "p" && s["role"] == "leader").then(|| s["leader"].as_u64()).flatten()
            })
    };
    let waited = std::time::Instant::now();
    while leader_of_p().is_none() && waited.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(leader_of_p(), Some(2), "the preferred node leads table p");

    // SIGKILL every node, restart them all: the acknowledged sync writes (the swap and the
    // counter's adds among them) and the immediate write are still there (the catalog too).
    nodes.kill_all();
    for i in 0..3 {
        nodes.start(i);
    }
    assert_eq!(ok(&nodes.strata(&["get", "--table", "t", "k"])), "v2\n", "swapped before");
    assert_eq!(ok(&nodes.strata(&["get", "--table", "t", "n"])), "6\n", "the counter too");
    assert_eq!(ok(&nodes.strata(&["get", "--table", "c", "ck"])), "cv\n");
    // The Kairos table's values, versions and validator state are replayed from the log: a
    // transaction over them validates and commits after the restart.
    assert_eq!(ok(&nodes.strata(&["get", "--table", "kb", "alice"])), "70\n");
    let transfer = "check alice 70\nadd alice -10\nadd bob 10\nget bob\n";
    assert_eq!(ok(&nodes.strata_stdin(&["txn", "--table", "kb"], transfer)), "45\ncommitted\n");
    // So is a sharded table's validator state (the companion table's log): a transaction
    // that read the values at their versions validates there and commits — with the
    // validators' `latest_committed` lost it would abort as stale.
    assert_eq!(ok(&nodes.strata(&["get", "--table", "ks", "alice"])), "70\n");
    assert_eq!(ok(&nodes.strata_stdin(&["txn", "--table", "ks"], transfer)), "45\ncommitted\n");
    assert_eq!(ok(&nodes.strata(&["get", "--table", "ks", "alice"])), "60\n");
    ok(&nodes.strata(&["put", "--table", "t", "k", "v2"]));
    assert_eq!(ok(&nodes.strata(&["get", "--table", "t", "k"])), "v2\n");
    let list = ok(&nodes.strata(&["table", "list"]));
    assert!(list.lines().any(|l| l.starts_with('g') && l.contains("geo")), "{list}");
    assert!(list.lines().any(|l| l.starts_with('p') && l.trim_end().ends_with(" 2")), "{list}");
    ok(&nodes.strata(&["put", "--table", "g", "gk", "gv"]));
    assert_eq!(ok(&nodes.strata(&["get", "--table", "g", "gk"])), "gv\n");
}
