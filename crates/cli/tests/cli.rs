//! The `strata` command end to end: `strata up`, then get/put/del/status/fault against it,
//! then Ctrl-C. These run the real binary and real node processes.

mod common;

use std::time::Duration;

use common::*;

#[test]
fn up_serves_put_and_get_and_ctrl_c_stops_every_node() {
    let mut up = Up::start(3);
    assert_eq!(up.endpoints.len(), 3);
    assert!(up.pids.iter().all(|&p| alive(p)));

    let put = up.strata(&["put", "a", "1"]);
    assert!(put.status.success(), "{}", stderr(&put));
    let get = up.strata(&["get", "a"]);
    assert_eq!((get.status.code(), stdout(&get).as_str()), (Some(0), "1\n"), "{}", stderr(&get));

    let missing = up.strata(&["get", "never-written"]);
    assert_eq!(missing.status.code(), Some(3), "not found is exit code 3");
    assert!(stderr(&missing).contains("not found"));

    assert!(up.strata(&["del", "a"]).status.success());
    assert_eq!(up.strata(&["get", "a"]).status.code(), Some(3), "deleted");

    let status = up.strata(&["status"]);
    assert_eq!(status.status.code(), Some(0), "{}", stderr(&status));
    let out = stdout(&status);
    assert_eq!(
        out.lines().take_while(|l| !l.is_empty()).count(),
        4,
        "a header and one row per node:\n{out}"
    );
    // Then the shards: the lease service's system table, one replica per node.
    assert_eq!(
        out.lines().filter(|l| l.starts_with("__leases")).count(),
        3,
        "the lease table's shard on every node:\n{out}"
    );

    // A second cluster on the same data dir is refused, and says why.
    let again = strata_in(&up.data_dir, &["up", "--base-port", &free_base_port(3).to_string()]);
    assert_eq!(again.status.code(), Some(1));
    assert!(stderr(&again).contains("already running"), "{}", stderr(&again));

    // Ctrl-C: the supervisor stops every node and removes the cluster file.
    up.signal(libc::SIGINT);
    let exit = up.wait_exit(Duration::from_secs(15));
    assert!(exit.success(), "{exit}");
    for &pid in &up.pids {
        eventually(&format!("node pid {pid} to exit"), Duration::from_secs(5), || !alive(pid));
    }
    assert!(!up.data_dir.join("cluster.json").exists());
    let after = up.strata(&["get", "a"]);
    assert_eq!(after.status.code(), Some(4), "nothing to reach: exit 4");
    assert!(
        stderr(&after).contains("strata up"),
        "the message says how to start one: {}",
        stderr(&after)
    );
}

#[test]
fn killing_the_supervisor_takes_its_nodes_down() {
    let mut up = Up::start(2);
    up.signal(libc::SIGKILL);
    up.wait_exit(Duration::from_secs(5));
    for &pid in &up.pids {
        eventually(&format!("orphaned node {pid} to exit"), Duration::from_secs(10), || {
            !alive(pid)
        });
    }
}

#[test]
fn a_node_that_dies_is_reported_and_the_others_keep_serving() {
    let up = Up::start(3);
    // SAFETY: a node process of this test's cluster.
    unsafe { libc::kill(up.pids[2], libc::SIGKILL) };
    eventually("node 2 to die", Duration::from_secs(5), || !alive(up.pids[2]));
    let ep = up.endpoints[0].to_string();
    let put = up.strata(&["put", "k", "v", "--endpoints", &ep]);
    assert!(put.status.success(), "{}", stderr(&put));
    let status = up.strata(&["status"]);
    assert_eq!(status.status.code(), Some(1), "some nodes down is exit 1");
    assert!(stdout(&status).contains("DOWN"), "{}", stdout(&status));
}

#[test]
fn fault_commands_validate_and_apply() {
    let up = Up::start(2);
    let bad = up.strata(&["fault", "--node", "0", "--loss", "150"]);
    assert_eq!(bad.status.code(), Some(1));
    let unknown = up.strata(&["fault", "--node", "7", "--partition"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(stderr(&unknown).contains("no node 7"), "{}", stderr(&unknown));
    let ok =
        up.strata(&["fault", "--node", "0", "--peer", "1", "--delay-ms", "5", "--loss", "1.5"]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    let status = up.strata(&["status"]);
    assert!(stdout(&status).contains("delay=5000us"), "{}", stdout(&status));
    assert!(stdout(&status).contains("loss=1.5%"), "{}", stdout(&status));
    assert!(up.strata(&["fault", "--node", "0", "--clear"]).status.success());
    assert!(!stdout(&up.strata(&["status"])).contains("faults:"));
}

#[test]
fn usage_errors_exit_2_and_unreachable_endpoints_exit_4() {
    let dir = temp_dir("usage");
    let o = strata_in(&dir, &["put", "only-a-key"]);
    assert_eq!(o.status.code(), Some(2));
    // A port nobody listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let endpoint = format!("127.0.0.1:{port}");
    let o = strata_in(&dir, &["get", "k", "--endpoints", &endpoint, PLAIN]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    // Without credentials and without --insecure-plaintext there is nothing to connect with.
    let o = strata_in(&dir, &["get", "k", "--endpoints", &endpoint]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--tls-ca") && stderr(&o).contains(PLAIN), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn release_acquire_faa_and_cas_from_the_command_line() {
    let up = Up::start(3);
    assert!(up.strata(&["put", "--release", "flag", "go"]).status.success());
    let acq = up.strata(&["get", "--acquire", "flag"]);
    assert_eq!((acq.status.code(), stdout(&acq).as_str()), (Some(0), "go\n"), "{}", stderr(&acq));
    assert_eq!(stdout(&up.strata(&["faa", "ctr", "5"])), "0\n", "faa prints the previous value");
    assert_eq!(stdout(&up.strata(&["faa", "ctr", "2"])), "5\n");
    // Counters are decimal text (issue #18): `get` prints them, and a put makes one. (Each
    // call may reach another node: the put is a release, which the FAA's quorum sees.)
    assert_eq!(stdout(&up.strata(&["get", "--acquire", "ctr"])), "7\n");
    assert!(up.strata(&["put", "--release", "n", "10"]).status.success());
    assert_eq!(stdout(&up.strata(&["faa", "n", "5"])), "10\n");
    assert_eq!(stdout(&up.strata(&["get", "--acquire", "n"])), "15\n");
    assert!(up.strata(&["put", "--release", "name", "alice"]).status.success());
    let bad = up.strata(&["faa", "name", "1"]);
    assert!(!bad.status.success() && stderr(&bad).contains("not a counter"), "{}", stderr(&bad));
    assert_eq!(stdout(&up.strata(&["get", "--acquire", "name"])), "alice\n", "unchanged");
    let first = up.strata(&["cas", "--expect-absent", "lock", "me"]);
    assert_eq!(
        (first.status.code(), stdout(&first).as_str()),
        (Some(0), "swapped\nseen: (absent)\n")
    );
    let lost = up.strata(&["cas", "lock", "other", "you"]);
    assert_eq!(
        (lost.status.code(), stdout(&lost).as_str()),
        (Some(6), "not swapped\nseen: me\n"),
        "exit 6: not swapped"
    );
    let weak = up.strata(&["cas", "--weak", "lock", "me", "you"]);
    assert!(weak.status.success(), "{}", stdout(&weak));
    assert_eq!(stdout(&up.strata(&["get", "--acquire", "lock"])), "you\n");
    assert_eq!(up.strata(&["cas", "lock"]).status.code(), Some(2), "usage");
}

/// Issue #18: `strata get` never writes binary to a terminal as it is: escaped there (unless
/// `--raw`), raw to a pipe. The terminal is a pseudo-terminal from `script` (util-linux).
#[test]
fn get_escapes_binary_values_on_a_terminal_only() {
    let up = Up::start(1);
    let binary = [0u8, 1, 2, 0xff, b'a'];
    let put = strata_with_stdin(&up, &["put", "--release", "bin", "--value-file", "-"], &binary);
    assert!(put.status.success(), "{}", stderr(&put));
    let piped = up.strata(&["get", "--acquire", "bin"]);
    assert_eq!(piped.stdout, [&binary[..], b"\n"].concat(), "a pipe gets the bytes");
    let on_terminal = |extra: &str| {
        let cmd =
            format!("{STRATA} get --acquire bin --data-dir {} {extra}", up.data_dir.display());
        let out = std::process::Command::new("script")
            .args(["-qec", &cmd, "/dev/null"])
            .output()
            .expect("script (util-linux) runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    let shown = on_terminal("");
    assert!(shown.starts_with(b"\\x00\\x01\\x02\\xffa"), "{}", String::from_utf8_lossy(&shown));
    let raw = on_terminal("--raw");
    assert!(raw.starts_with(&binary), "--raw writes the bytes: {raw:?}");
}

/// `strata ARGS` against `up`'s cluster with `input` on its standard input.
fn strata_with_stdin(up: &Up, args: &[&str], input: &[u8]) -> std::process::Output {
    let mut cmd = std::process::Command::new(STRATA);
    cmd.args(args).arg("--data-dir").arg(&up.data_dir);
    with_stdin(cmd, input)
}

/// Issue #17 item 5: `strata put` takes a large or binary value from a file or standard input
/// (`--value-file PATH`, `-` for stdin), for rc keys and log tables; a value beyond the limit
/// is refused with the node's reason (exit 1) and VALUE with --value-file is a usage error.
#[test]
fn put_takes_large_values_from_a_file_or_stdin() {
    let up = Up::start(3);
    let created = up.strata(&["table", "create", "t", "--durability", "sync", "--reads", "leader"]);
    assert!(created.status.success(), "{}", stderr(&created));
    let max: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
    let file = up.data_dir.join("value.bin");
    std::fs::write(&file, &max).unwrap();
    let path = file.to_str().unwrap();

    // rc keyspace, from a file; log table, from stdin.
    let put = up.strata(&["put", "big", "--value-file", path]);
    assert!(put.status.success(), "{}", stderr(&put));
    // A relaxed write reaches the other nodes shortly after its answer: should this get reach
    // another node than the put did (a slow connect on a loaded machine), it may find nothing
    // yet (Kite §5.3), so it asks again until the deadline.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut get = up.strata(&["get", "big"]);
    while get.status.code() == Some(3) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        get = up.strata(&["get", "big"]);
    }
    assert_eq!(get.status.code(), Some(0), "{}", stderr(&get));
    assert_eq!(&get.stdout[..get.stdout.len() - 1], &max[..], "the value, then a newline");
    let put = strata_with_stdin(&up, &["put", "--table", "t", "big", "--value-file", "-"], &max);
    assert!(put.status.success(), "{}", stderr(&put));
    let get = up.strata(&["get", "--table", "t", "big"]);
    assert_eq!(get.status.code(), Some(0), "{}", stderr(&get));
    assert_eq!(&get.stdout[..get.stdout.len() - 1], &max[..]);

    // One byte over the limit: refused with the reason, in both keyspaces.
    let mut over = max.clone();
    over.push(0);
    std::fs::write(&file, &over).unwrap();
    for args in [vec!["put", "k"], vec!["put", "--table", "t", "k"]] {
        let args: Vec<&str> = args.into_iter().chain(["--value-file", path]).collect();
        let out = up.strata(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("value too large"), "{args:?}: {}", stderr(&out));
    }
    // Usage errors: both a VALUE and a file, neither, a file that does not exist.
    assert_eq!(up.strata(&["put", "k", "v", "--value-file", path]).status.code(), Some(2));
    assert_eq!(up.strata(&["put", "k"]).status.code(), Some(2));
    let out = up.strata(&["put", "k", "--value-file", "/nonexistent/v"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("/nonexistent/v"), "{}", stderr(&out));
}
