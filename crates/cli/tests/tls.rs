//! Issue #17 from the command line: `strata up` runs TLS by default with the certificates it
//! makes in its data directory, the README's commands work unchanged, `strata certs` issues
//! certificates of each role, and a command its credentials do not allow exits 7 and says why.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::*;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn up_runs_tls_by_default_and_each_command_needs_its_role() {
    let up = Up::start(3);
    let tls = up.data_dir.join("tls");

    // The README's commands, unchanged: the CLI finds the admin certificate `up` made.
    let put = up.strata(&["put", "a", "1"]);
    assert!(put.status.success(), "{}", stderr(&put));
    let get = up.strata(&["get", "a"]);
    assert_eq!((get.status.code(), stdout(&get).as_str()), (Some(0), "1\n"), "{}", stderr(&get));
    for key in ["ca.key", "node-0.key", "node-1.key", "node-2.key", "client.key"] {
        assert_eq!(mode(&tls.join(key)), 0o600, "{key} is private");
    }
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(up.data_dir.join("cluster.json")).unwrap())
            .unwrap();
    assert_eq!(file["tls"], true);

    // A reader's certificate: it reads, and nothing else.
    let made = up.strata(&["certs", "client", "--role", "read", "--name", "reader"]);
    assert!(made.status.success(), "{}", stderr(&made));
    assert_eq!(mode(&tls.join("reader.key")), 0o600);
    let (cert, key) = (tls.join("reader.pem"), tls.join("reader.key"));
    let as_reader = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--tls-cert", cert.to_str().unwrap(), "--tls-key", key.to_str().unwrap()]);
        up.strata(&all)
    };
    let read = as_reader(&["get", "a"]);
    assert_eq!((read.status.code(), stdout(&read).as_str()), (Some(0), "1\n"));
    assert_eq!(as_reader(&["status"]).status.code(), Some(0), "a reader may see status");
    for (what, args) in [
        ("put", &["put", "a", "2"][..]),
        ("faa", &["faa", "n", "1"][..]),
        ("fault", &["fault", "--node", "0", "--partition"][..]),
        ("table create", &["table", "create", "t"][..]),
    ] {
        let o = as_reader(args);
        assert_eq!(o.status.code(), Some(7), "a reader's {what}: {}", stderr(&o));
        assert!(stderr(&o).contains("forbidden"), "a reader's {what}: {}", stderr(&o));
    }

    // Without a client certificate, and without TLS at all: refused, and told why.
    let ca = tls.join("ca.pem");
    let anonymous = up.strata(&["put", "a", "3", "--tls-ca", ca.to_str().unwrap()]);
    assert_eq!(anonymous.status.code(), Some(7), "{}", stderr(&anonymous));
    assert!(stderr(&anonymous).contains("client certificate"), "{}", stderr(&anonymous));
    let plain = up.strata(&["put", "a", "3", "--insecure-plaintext"]);
    assert_eq!(plain.status.code(), Some(7), "{}", stderr(&plain));
    assert!(stderr(&plain).contains("requires TLS"), "{}", stderr(&plain));

    // Nothing they sent took effect; the admin still does everything.
    let get = up.strata(&["get", "a"]);
    assert_eq!(stdout(&get), "1\n", "the value is the admin's");
    let status = up.strata(&["status"]);
    assert!(!stdout(&status).contains("faults:"), "no fault was set: {}", stdout(&status));
    assert_eq!(up.strata(&["fault", "--node", "0", "--clear"]).status.code(), Some(0));
}

#[test]
fn up_with_insecure_plaintext_serves_plain_clients() {
    let up = Up::start_with(1, &["--insecure-plaintext"]);
    assert!(!up.data_dir.join("tls").exists(), "no certificates are made");
    let put = up.strata(&["put", "a", "1"]);
    assert!(put.status.success(), "{}", stderr(&put));
    assert_eq!(stdout(&up.strata(&["get", "a"])), "1\n");
}

#[test]
fn certs_makes_a_ca_and_node_and_client_certificates_with_private_keys() {
    let dir = temp_dir("certs");
    let d = dir.to_str().unwrap();
    let init = strata_in(&dir, &["certs", "--dir", d, "init", "--nodes", "2"]);
    assert!(init.status.success(), "{}", stderr(&init));
    for f in ["ca.pem", "node-0.pem", "node-1.pem", "client.pem"] {
        assert_eq!(mode(&dir.join(f)), 0o644, "{f}");
    }
    let again = strata_in(&dir, &["certs", "--dir", d, "ca"]);
    assert_eq!(again.status.code(), Some(2), "an existing CA is kept unless --force");
    let node = strata_in(&dir, &["certs", "--dir", d, "node", "--id", "5", "--days", "30"]);
    assert!(node.status.success(), "{}", stderr(&node));
    let client =
        strata_in(&dir, &["certs", "--dir", d, "client", "--role", "write", "--name", "ops"]);
    assert!(client.status.success(), "{}", stderr(&client));
    for key in ["ca.key", "node-0.key", "node-1.key", "node-5.key", "client.key", "ops.key"] {
        assert_eq!(mode(&dir.join(key)), 0o600, "{key} is private");
    }
    let bad = strata_in(&dir, &["certs", "--dir", d, "client", "--role", "root"]);
    assert_eq!(bad.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(dir);
}
