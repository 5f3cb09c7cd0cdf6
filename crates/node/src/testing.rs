//! Helpers for tests in any crate that need real nodes in-process: a cluster on loopback with
//! every listener bound (port 0) before any node starts, so peer lists hold real addresses.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{NodeConfig, PeerConfig, RunningNode};

/// A fresh directory under the system temp dir, unique per process and call.
pub fn temp_dir(tag: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "strata-test-{}-{tag}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A node config for tests: loopback, port 0, a temp data dir; `peers` filled by the caller.
/// Plaintext, so tests can speak raw frames: a test of TLS sets [`NodeConfig::tls`] (see
/// [`use_tls`]).
pub fn test_config(id: u32, peers: Vec<PeerConfig>) -> NodeConfig {
    NodeConfig {
        node_id: id,
        client_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        peer_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        peers,
        data_dir: temp_dir(&format!("n{id}")),
        insecure_plaintext: true,
        ..NodeConfig::default()
    }
}

/// Switches `cfg` to TLS with the credentials of a directory laid out like `strata up`'s
/// `<data-dir>/tls` (`ca.pem`, `node-<id>.pem`, `node-<id>.key`; `strata_tls::gen::init_dir`
/// makes one).
pub fn use_tls(cfg: &mut NodeConfig, dir: &std::path::Path) {
    let id = cfg.node_id;
    cfg.tls = Some(crate::TlsFiles {
        ca: dir.join("ca.pem"),
        cert: dir.join(format!("node-{id}.pem")),
        key: dir.join(format!("node-{id}.key")),
    });
    cfg.insecure_plaintext = false;
}

/// Starts `n` nodes that know each other, each configured by `tune`.
pub async fn local_cluster_with(n: u32, tune: impl Fn(&mut NodeConfig)) -> Vec<RunningNode> {
    local_cluster_configs(n, tune).await.1
}

/// [`local_cluster_with`], also returning each node's config with the addresses it listens
/// on, so a test can restart a node where it was.
pub async fn local_cluster_configs(
    n: u32,
    tune: impl Fn(&mut NodeConfig),
) -> (Vec<NodeConfig>, Vec<RunningNode>) {
    let bind = || std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let listeners: Vec<_> = (0..n).map(|_| (bind(), bind())).collect();
    let peer_addrs: Vec<SocketAddr> =
        listeners.iter().map(|(_, p)| p.local_addr().expect("bound")).collect();
    let (mut cfgs, mut nodes) = (Vec::new(), Vec::new());
    for (id, (c, p)) in listeners.into_iter().enumerate() {
        let id = id as u32;
        let peers = (0..n)
            .filter(|&j| j != id)
            .map(|j| PeerConfig { id: j, addr: peer_addrs[j as usize] })
            .collect();
        let mut cfg = test_config(id, peers);
        cfg.client_addr = c.local_addr().expect("bound");
        cfg.peer_addr = p.local_addr().expect("bound");
        tune(&mut cfg);
        cfgs.push(cfg.clone());
        nodes.push(crate::start_with_listeners(cfg, c, p).await.expect("test node starts"));
    }
    (cfgs, nodes)
}

/// Starts `n` nodes with the default configuration.
pub async fn local_cluster(n: u32) -> Vec<RunningNode> {
    local_cluster_with(n, |_| {}).await
}
