//! Where the commands find their TLS credentials: the way they find the endpoints — the data
//! directory of the `strata up` that runs the cluster — unless flags say otherwise.
//!
//! 1. `--insecure-plaintext`: plain TCP (a cluster started with that flag).
//! 2. `--tls-ca FILE`: TLS with that CA, and the client certificate of `--tls-cert` and
//!    `--tls-key` if given (else none: anonymous).
//! 3. `<data-dir>/cluster.json` says the cluster is plain: plain TCP.
//! 4. `<data-dir>/tls/ca.pem` exists: TLS with it and `<data-dir>/tls/client.pem` / `.key`
//!    (the admin certificate `strata up` made), or `--tls-cert` / `--tls-key`.
//! 5. Otherwise the command stops and says which flag is missing.

use std::path::{Path, PathBuf};

use strata_client::ClientTls;
use strata_tls::files;

use crate::cluster_file::ClusterFile;
use crate::exit::{Failure, FAILED, USAGE};

/// The TLS flags of every command that talks to a cluster.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// The cluster CA's certificate (PEM). Default: `<data-dir>/tls/ca.pem`, made by `strata up`.
    #[arg(long, global = true, env = "STRATA_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// This client's certificate (PEM), issued by the cluster's CA: its role (read, write or
    /// admin) decides what the commands may do. Default: `<data-dir>/tls/client.pem` (admin).
    #[arg(long, global = true, env = "STRATA_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM). Default: `<data-dir>/tls/client.key`.
    #[arg(long, global = true, env = "STRATA_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Plain TCP, no TLS: for a cluster started with `strata up --insecure-plaintext`.
    #[arg(long, global = true)]
    pub insecure_plaintext: bool,
}

/// The credential files a client uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsPaths {
    pub ca: PathBuf,
    pub cert_key: Option<(PathBuf, PathBuf)>,
}

impl TlsPaths {
    pub fn load(&self) -> Result<ClientTls, Failure> {
        let pair = self.cert_key.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
        ClientTls::load(&self.ca, pair).map_err(|e| Failure::new(FAILED, e.to_string()))
    }
}

impl TlsArgs {
    /// The credentials to use with the cluster of `data_dir` (`None`: plain TCP).
    pub fn resolve(&self, data_dir: &Path) -> Result<Option<TlsPaths>, Failure> {
        let cert_key = match (&self.tls_cert, &self.tls_key) {
            (Some(c), Some(k)) => Some((c.clone(), k.clone())),
            (None, None) => None,
            _ => return Err(Failure::new(USAGE, "--tls-cert and --tls-key go together")),
        };
        if self.insecure_plaintext {
            if self.tls_ca.is_some() || cert_key.is_some() {
                return Err(Failure::new(USAGE, "--insecure-plaintext takes no --tls-* flag"));
            }
            return Ok(None);
        }
        if let Some(ca) = &self.tls_ca {
            return Ok(Some(TlsPaths { ca: ca.clone(), cert_key }));
        }
        if let Ok(file) = ClusterFile::read(data_dir) {
            if !file.tls {
                return Ok(None); // started with --insecure-plaintext (or by a build without TLS)
            }
        }
        let dir = data_dir.join("tls");
        let ca = dir.join(files::CA_CERT);
        if !ca.exists() {
            return Err(Failure::new(
                USAGE,
                format!(
                    "no TLS credentials: {} does not exist\nhint: use the --data-dir of the `strata up` that runs the cluster, pass --tls-ca (with --tls-cert and --tls-key), or --insecure-plaintext for a cluster started with it",
                    ca.display()
                ),
            ));
        }
        let cert_key = cert_key.or_else(|| {
            let (c, k) = (dir.join(files::CLIENT_CERT), dir.join(files::CLIENT_KEY));
            (c.exists() && k.exists()).then_some((c, k))
        });
        Ok(Some(TlsPaths { ca, cert_key }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("strata-cli-cred-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn credentials_come_from_the_data_dir_unless_flags_say_otherwise() {
        let dir = temp("resolve");
        let none = TlsArgs::default();
        let err = none.resolve(&dir).unwrap_err();
        assert!(err.message.contains("--insecure-plaintext"), "{}", err.message);
        strata_tls::gen::init_dir(&dir.join("tls"), &[strata_wire::NodeId(0)]).unwrap();
        let paths = none.resolve(&dir).unwrap().unwrap();
        assert_eq!(paths.ca, dir.join("tls/ca.pem"));
        assert_eq!(paths.cert_key, Some((dir.join("tls/client.pem"), dir.join("tls/client.key"))));
        paths.load().unwrap();
        let plain = TlsArgs { insecure_plaintext: true, ..TlsArgs::default() };
        assert_eq!(plain.resolve(&dir).unwrap(), None);
        let reader = TlsArgs {
            tls_cert: Some("r.pem".into()),
            tls_key: Some("r.key".into()),
            ..TlsArgs::default()
        };
        let paths = reader.resolve(&dir).unwrap().unwrap();
        assert_eq!(paths.cert_key, Some(("r.pem".into(), "r.key".into())), "flags win");
        // A cluster file of a plain cluster.
        let file = ClusterFile { cluster_id: 1, supervisor_pid: 1, nodes: Vec::new(), tls: false };
        file.write(&dir).unwrap();
        assert_eq!(none.resolve(&dir).unwrap(), None);
        let _ = std::fs::remove_dir_all(dir);
    }
}
