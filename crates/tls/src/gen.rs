//! A development CA and the certificates it issues (`strata certs`, `strata up`, tests).
//!
//! | certificate | subject alternative names (DNS) | extended key usage |
//! |---|---|---|
//! | CA | — (CN `Strata cluster CA`) | — (a CA: signs certificates) |
//! | node `id` | `node-<id>`, [`SERVER_NAME`] | server and client (it also dials its peers) |
//! | client of role `r` | `role-<r>` (CN: the client's name) | client only: it cannot act as a node |
//!
//! Private keys (ECDSA P-256, PKCS#8 PEM) are written with mode 0600, certificates 0644.
//! The CA is rebuilt for issuing from its key and its fixed name ([`CA_NAME`]): a CA made by
//! another tool can be trusted by Strata, but `strata certs` issues only from its own.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use strata_wire::{NodeId, Role};
use time::{Duration, OffsetDateTime};

use crate::{files, node_dns_name, role_dns_name, TlsError, SERVER_NAME};

/// The CA's common name. [`Ca::load`] rebuilds the issuer from it and the CA key.
pub const CA_NAME: &str = "Strata cluster CA";
/// Default validity of a CA, days.
pub const DEFAULT_CA_DAYS: u32 = 3650;
/// Default validity of a node or client certificate, days.
pub const DEFAULT_CERT_DAYS: u32 = 825;

fn gen_err(e: rcgen::Error) -> TlsError {
    TlsError::Generate(e.to_string())
}

/// Not before an hour ago (clocks of a cluster differ a little), for `days` days.
fn validity(params: &mut CertificateParams, days: u32) {
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::hours(1);
    params.not_after = now + Duration::days(i64::from(days.max(1)));
}

fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, CA_NAME);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params
}

/// A certificate and its private key, PEM.
#[derive(Clone, Debug)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Issued {
    /// Writes `<dir>/<stem>.pem` (0644) and `<dir>/<stem>.key` (0600); returns their paths.
    pub fn write(&self, dir: &Path, stem: &str) -> Result<(PathBuf, PathBuf), TlsError> {
        let cert = dir.join(format!("{stem}.pem"));
        let key = dir.join(format!("{stem}.key"));
        write_file(&cert, self.cert_pem.as_bytes(), 0o644)?;
        write_file(&key, self.key_pem.as_bytes(), 0o600)?;
        Ok((cert, key))
    }
}

/// Writes `path` with `mode` (also when it existed with another mode), creating `path`'s
/// directory (0700) if needed.
pub fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), TlsError> {
    use std::os::unix::fs::PermissionsExt;
    let err = |source| TlsError::Write { path: path.into(), source };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(err)?;
    }
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(err)?;
    // `mode` applies only to a new file: set it on an existing one too, before writing.
    f.set_permissions(std::fs::Permissions::from_mode(mode)).map_err(err)?;
    f.write_all(bytes).map_err(err)?;
    f.sync_all().map_err(err)
}

/// A certificate authority: issues node and client certificates.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

impl Ca {
    /// A new CA, valid for `days` days.
    pub fn new(days: u32) -> Result<Ca, TlsError> {
        let key = KeyPair::generate().map_err(gen_err)?;
        let mut params = ca_params();
        validity(&mut params, days);
        let cert = params.self_signed(&key).map_err(gen_err)?;
        Ok(Ca { issuer: Issuer::new(params, key), cert_pem: cert.pem() })
    }

    /// The CA of a TLS directory (`ca.pem` and `ca.key`), to issue more certificates. Checks
    /// that the key belongs to the certificate.
    pub fn load(dir: &Path) -> Result<Ca, TlsError> {
        let cert_path = dir.join(files::CA_CERT);
        let key_path = dir.join(files::CA_KEY);
        let cert_pem = std::fs::read_to_string(&cert_path)
            .map_err(|source| TlsError::Read { path: cert_path.clone(), source })?;
        let key_pem = std::fs::read_to_string(&key_path)
            .map_err(|source| TlsError::Read { path: key_path.clone(), source })?;
        let key = KeyPair::from_pem(&key_pem).map_err(|e| TlsError::Pem {
            path: key_path.clone(),
            what: format!("not a CA key: {e}"),
        })?;
        let ca = Ca { issuer: Issuer::new(ca_params(), key), cert_pem };
        // A certificate it issues must verify against the CA certificate on disk.
        let probe = ca.issue_client(Role::Read, "probe", 1)?;
        let chain = crate::load_certs(&cert_path)?;
        if !verifies(&chain, &probe)? {
            return Err(TlsError::Identity {
                path: key_path,
                what: format!(
                    "this key does not belong to {} (or that CA was not made by `strata certs`)",
                    cert_path.display()
                ),
            });
        }
        Ok(ca)
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Writes `ca.pem` (0644) and `ca.key` (0600) into `dir`.
    pub fn write(&self, dir: &Path) -> Result<(), TlsError> {
        write_file(&dir.join(files::CA_CERT), self.cert_pem.as_bytes(), 0o644)?;
        write_file(&dir.join(files::CA_KEY), self.issuer.key().serialize_pem().as_bytes(), 0o600)
    }

    fn issue(
        &self,
        common_name: &str,
        names: Vec<String>,
        usages: Vec<ExtendedKeyUsagePurpose>,
        days: u32,
    ) -> Result<Issued, TlsError> {
        let key = KeyPair::generate().map_err(gen_err)?;
        let mut params = CertificateParams::new(names).map_err(gen_err)?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, common_name);
        params.distinguished_name = dn;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = usages;
        params.use_authority_key_identifier_extension = true;
        validity(&mut params, days);
        let cert = params.signed_by(&key, &self.issuer).map_err(gen_err)?;
        Ok(Issued { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }

    /// Node `id`'s certificate: names `node-<id>` and [`SERVER_NAME`]; serves and dials.
    pub fn issue_node(&self, id: NodeId, days: u32) -> Result<Issued, TlsError> {
        self.issue(
            &node_dns_name(id),
            vec![node_dns_name(id), SERVER_NAME.to_string()],
            vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth],
            days,
        )
    }

    /// A client certificate of `role` for `name` (its common name, for people reading it).
    pub fn issue_client(&self, role: Role, name: &str, days: u32) -> Result<Issued, TlsError> {
        self.issue(name, vec![role_dns_name(role)], vec![ExtendedKeyUsagePurpose::ClientAuth], days)
    }
}

/// Whether `issued` verifies as a client certificate against `ca_chain`.
fn verifies(
    ca_chain: &[rustls_pki_types::CertificateDer<'static>],
    issued: &Issued,
) -> Result<bool, TlsError> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in ca_chain {
        if roots.add(c.clone()).is_err() {
            return Ok(false);
        }
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        std::sync::Arc::new(roots),
        crate::provider(),
    )
    .build()
    .map_err(|e| TlsError::Config(e.to_string()))?;
    let leaf = rustls_pki_types::CertificateDer::from_pem_slice(issued.cert_pem.as_bytes())
        .map_err(|e| TlsError::Generate(e.to_string()))?;
    Ok(verifier.verify_client_cert(&leaf, &[], rustls_pki_types::UnixTime::now()).is_ok())
}

/// What [`init_dir`] did.
#[derive(Debug, Default)]
pub struct InitReport {
    /// Files it created (existing ones are kept).
    pub created: Vec<PathBuf>,
}

/// Makes a TLS directory ready for a cluster of `nodes`: a CA (`ca.pem`, `ca.key`) unless
/// there is one, each node's certificate unless there is one, and an `admin` client
/// certificate as `client.pem` / `client.key` (what the CLI presents by default) unless there
/// is one. Existing files are kept, so a restart reuses them and certificates issued by hand
/// (`strata certs`) stay.
pub fn init_dir(dir: &Path, nodes: &[NodeId]) -> Result<InitReport, TlsError> {
    let mut report = InitReport::default();
    let ca_cert = dir.join(files::CA_CERT);
    let ca = if ca_cert.exists() {
        Ca::load(dir)?
    } else {
        let ca = Ca::new(DEFAULT_CA_DAYS)?;
        ca.write(dir)?;
        report.created.push(ca_cert);
        ca
    };
    for &id in nodes {
        let cert = dir.join(files::node_cert(id.0));
        if !cert.exists() || !dir.join(files::node_key(id.0)).exists() {
            ca.issue_node(id, DEFAULT_CERT_DAYS)?.write(dir, &format!("node-{}", id.0))?;
            report.created.push(cert);
        }
    }
    let client = dir.join(files::CLIENT_CERT);
    if !client.exists() || !dir.join(files::CLIENT_KEY).exists() {
        ca.issue_client(Role::Admin, "strata-cli", DEFAULT_CERT_DAYS)?.write(dir, "client")?;
        report.created.push(client);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;

    fn der(issued: &Issued) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(issued.cert_pem.as_bytes()).unwrap()
    }

    fn temp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("strata-tls-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn certificates_name_their_node_or_role_and_nothing_else() {
        let ca = Ca::new(1).unwrap();
        let node = der(&ca.issue_node(NodeId(2), 1).unwrap());
        assert_eq!(crate::node_of(&node), Some(NodeId(2)));
        assert_eq!(crate::role_of(&node), None, "a node certificate grants no client role");
        for role in Role::ALL {
            let client = der(&ca.issue_client(role, "alice", 1).unwrap());
            assert_eq!(crate::role_of(&client), Some(role));
            assert_eq!(crate::node_of(&client), None, "a client certificate names no node");
        }
    }

    #[test]
    fn init_dir_makes_a_ca_nodes_and_an_admin_client_with_private_keys() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp("init");
        let report = init_dir(&dir, &[NodeId(0), NodeId(1)]).unwrap();
        assert_eq!(report.created.len(), 4, "{report:?}");
        for key in ["ca.key", "node-0.key", "node-1.key", "client.key"] {
            let mode = std::fs::metadata(dir.join(key)).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{key}");
        }
        let again = init_dir(&dir, &[NodeId(0), NodeId(1), NodeId(2)]).unwrap();
        assert_eq!(again.created, vec![dir.join("node-2.pem")], "existing files are kept");
        let client = crate::ClientTls::from_dir(&dir).unwrap();
        assert_eq!(client.role(), Some(Role::Admin));
        crate::NodeTls::load(
            NodeId(2),
            &dir.join("ca.pem"),
            &dir.join("node-2.pem"),
            &dir.join("node-2.key"),
        )
        .unwrap();
        let wrong = crate::NodeTls::load(
            NodeId(1),
            &dir.join("ca.pem"),
            &dir.join("node-2.pem"),
            &dir.join("node-2.key"),
        );
        assert!(matches!(wrong, Err(TlsError::Identity { .. })), "{wrong:?}");
        // Another CA's key does not issue for this CA.
        let other = temp("other");
        Ca::new(1).unwrap().write(&other).unwrap();
        std::fs::copy(other.join("ca.key"), dir.join("ca.key")).unwrap();
        assert!(matches!(Ca::load(&dir), Err(TlsError::Identity { .. })));
        let _ = std::fs::remove_dir_all(dir);
        let _ = std::fs::remove_dir_all(other);
    }
}
