//! TLS to the systems Strata is measured against (Redis, etcd).
//!
//! Strata's links are TLS 1.3 by default, so a side-by-side run that leaves Redis and etcd on
//! plain TCP compares encrypted transactions with unencrypted ones. With `--tls-ca` (and a
//! client certificate) the Redis and etcd targets connect over TLS too: Redis through the
//! same rustls client Strata's connections use, etcd through its gRPC stack's own rustls
//! (the `etcd` feature). `scripts/bench-lib.sh` issues the servers' certificates for
//! [`PEER_SERVER_NAME`].

use std::path::{Path, PathBuf};

use strata_client::ClientTls;

/// The name a Redis or etcd server's certificate must carry.
pub const PEER_SERVER_NAME: &str = "localhost";

/// The credentials of a run's Redis or etcd connections.
#[derive(Clone, Debug)]
pub struct PeerTls {
    /// The CA's certificate (PEM).
    pub ca: PathBuf,
    /// The client certificate and its key (PEM), if the servers ask for one.
    pub cert_key: Option<(PathBuf, PathBuf)>,
    /// The rustls connector of Redis connections, loaded once per run.
    pub(crate) client: ClientTls,
}

impl PeerTls {
    /// Loads the files (a missing or unreadable one fails here, before any connection).
    pub fn load(ca: &Path, cert_key: Option<(&Path, &Path)>) -> Result<PeerTls, String> {
        let client = ClientTls::load(ca, cert_key).map_err(|e| e.to_string())?;
        Ok(PeerTls {
            ca: ca.to_path_buf(),
            cert_key: cert_key.map(|(c, k)| (c.to_path_buf(), k.to_path_buf())),
            client,
        })
    }
}
