//! TLS to the systems Strata is measured against (Redis, etcd).
//!
//! Strata's links are TLS 1.3 by default, so a side-by-side run that leaves Redis and etcd on
//! plain TCP compares encrypted transactions with unencrypted ones. With `--tls-ca` (and a
//! client certificate) the Redis and etcd targets connect over TLS too: Redis through the
//! same rustls client Strata's connections use, etcd through its gRPC stack's own rustls
//! (the `etcd` feature). `scripts/bench-lib.sh` issues the servers' certificates for
//! [`PEER_SERVER_NAME`].

use std::path::Path;

use strata_client::ClientTls;

/// The name a Redis or etcd server's certificate must carry.
pub const PEER_SERVER_NAME: &str = "localhost";

/// The credentials of a run's Redis or etcd connections, read once per run.
#[derive(Clone, Debug)]
pub struct PeerTls {
    /// The CA's certificate (PEM), for etcd's gRPC stack.
    pub ca_pem: Vec<u8>,
    /// The client certificate and its key (PEM), if the servers ask for one, for etcd's.
    pub identity_pem: Option<(Vec<u8>, Vec<u8>)>,
    /// The rustls connector of Redis connections.
    pub(crate) client: ClientTls,
}

impl PeerTls {
    /// Loads the files (a missing or unreadable one fails here, before any connection).
    pub fn load(ca: &Path, cert_key: Option<(&Path, &Path)>) -> Result<PeerTls, String> {
        let client = ClientTls::load(ca, cert_key).map_err(|e| e.to_string())?;
        let read = |p: &Path| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
        let identity_pem = match cert_key {
            Some((cert, key)) => Some((read(cert)?, read(key)?)),
            None => None,
        };
        Ok(PeerTls { ca_pem: read(ca)?, identity_pem, client })
    }
}
