//! `strata-tls`: how Strata's processes prove who they are (`docs/design.md`, "Security
//! model").
//!
//! * **Nodes** talk to each other over mutual TLS. Every node holds a certificate of the
//!   cluster's CA that names it — the DNS name `node-<id>` in its subject alternative names —
//!   and a peer is who its certificate says, whatever its `Hello` claims ([`NodeTls`]).
//! * **Clients** reach nodes over TLS and check that the node's certificate comes from the
//!   cluster's CA (every node certificate also names [`SERVER_NAME`]). A client may present a
//!   certificate of the same CA naming its role — `role-read`, `role-write` or `role-admin` —
//!   and the node attaches that role to the connection ([`NodeTls::accept_client`]); a client
//!   without one is anonymous and may do nothing (`strata_host::auth`).
//! * [`gen`] (feature `gen`) makes a development CA and its certificates: `strata certs`,
//!   `strata up` and tests.
//!
//! Only TLS 1.3, with the `ring` provider. Everything here is runtime code (sockets, files):
//! the sans-IO crates never see a certificate, only the [`Role`] the runtime extracted.

#[cfg(feature = "gen")]
pub mod gen;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use strata_wire::{NodeId, Role};
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::{TlsAcceptor, TlsConnector};

pub use tokio_rustls::client::TlsStream as ClientTlsStream;
pub use tokio_rustls::server::TlsStream as ServerTlsStream;

/// The name every node certificate carries besides its own `node-<id>`: what a client checks,
/// since it knows a node by its address, not its id.
pub const SERVER_NAME: &str = "strata-node";

/// Node ids a certificate may name (the rc engine's replica sets hold ids `0..=63`).
const MAX_NODE_ID: u32 = 63;

/// The files of a TLS directory (`<data-dir>/tls` for `strata up`, any directory for
/// `strata certs`).
pub mod files {
    /// The cluster CA's certificate: every process trusts it.
    pub const CA_CERT: &str = "ca.pem";
    /// The CA's private key (only `strata certs` and `strata up` read it, to issue).
    pub const CA_KEY: &str = "ca.key";
    /// The certificate the CLI and the client library present by default.
    pub const CLIENT_CERT: &str = "client.pem";
    /// Its private key.
    pub const CLIENT_KEY: &str = "client.key";

    /// Node `id`'s certificate.
    pub fn node_cert(id: u32) -> String {
        format!("node-{id}.pem")
    }

    /// Node `id`'s private key.
    pub fn node_key(id: u32) -> String {
        format!("node-{id}.key")
    }
}

/// The DNS name a certificate of node `id` carries.
pub fn node_dns_name(id: NodeId) -> String {
    format!("node-{}", id.0)
}

/// The DNS name a client certificate of `role` carries.
pub fn role_dns_name(role: Role) -> String {
    format!("role-{}", role.name())
}

/// Why credentials could not be loaded or a TLS configuration built. Each says what to fix.
#[derive(Debug, Error)]
pub enum TlsError {
    /// A file could not be read: check the path (`strata certs` makes them).
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    /// A file holds no usable PEM item of the kind wanted.
    #[error("{path}: {what}")]
    Pem { path: PathBuf, what: String },
    /// The certificate does not name what it must (e.g. a node's certificate not naming
    /// `node-<id>` of the node that loads it).
    #[error("{path}: {what}")]
    Identity { path: PathBuf, what: String },
    /// rustls refused the configuration (e.g. the key does not match the certificate).
    #[error("TLS configuration: {0}")]
    Config(String),
    /// A file could not be written (certificate generation).
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    /// Certificate generation failed.
    #[error("certificate generation: {0}")]
    Generate(String),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { path: path.into(), source })
}

/// Every certificate in a PEM file (a chain: the holder's first).
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem { path: path.into(), what: e.to_string() })?;
    if certs.is_empty() {
        return Err(TlsError::Pem { path: path.into(), what: "no CERTIFICATE in the file".into() });
    }
    Ok(certs)
}

/// The private key in a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read(path)?;
    PrivateKeyDer::from_pem_slice(&bytes)
        .map_err(|e| TlsError::Pem { path: path.into(), what: format!("no private key: {e}") })
}

fn load_roots(path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(path)? {
        roots.add(cert).map_err(|e| TlsError::Pem {
            path: path.into(),
            what: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(Arc::new(roots))
}

/// Whether `cert` names `dns_name` among its subject alternative names. Only meaningful for
/// a certificate the TLS handshake verified against the cluster's CA.
fn names(cert: &CertificateDer<'_>, dns_name: &str) -> bool {
    let Ok(ee) = webpki::EndEntityCert::try_from(cert) else { return false };
    let Ok(name) = ServerName::try_from(dns_name) else { return false };
    ee.verify_is_valid_for_subject_name(&name).is_ok()
}

/// The node a (verified) certificate names: exactly one `node-<id>`, else `None`.
pub fn node_of(cert: &CertificateDer<'_>) -> Option<NodeId> {
    let mut named = (0..=MAX_NODE_ID).map(NodeId).filter(|&n| names(cert, &node_dns_name(n)));
    match (named.next(), named.next()) {
        (Some(n), None) => Some(n),
        _ => None,
    }
}

/// The role a (verified) client certificate names (`role-<role>`; the highest if several).
pub fn role_of(cert: &CertificateDer<'_>) -> Option<Role> {
    Role::ALL.into_iter().rev().find(|&r| names(cert, &role_dns_name(r)))
}

/// A node's TLS: its certificate for both listeners and for dialing peers, the cluster's CA
/// for checking everyone else's.
#[derive(Clone)]
pub struct NodeTls {
    node: NodeId,
    /// Peer connections must present a certificate of the CA (a node's).
    peer_acceptor: TlsAcceptor,
    /// Client connections may present one (its role); without, they are anonymous.
    client_acceptor: TlsAcceptor,
    /// Dials peers, presenting this node's certificate.
    connector: TlsConnector,
}

impl fmt::Debug for NodeTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeTls").field("node", &self.node).finish_non_exhaustive()
    }
}

impl NodeTls {
    /// Loads node `node`'s credentials: the CA certificate, its certificate (chain) and key.
    /// Refuses a certificate that does not name `node-<node>`.
    pub fn load(node: NodeId, ca: &Path, cert: &Path, key: &Path) -> Result<NodeTls, TlsError> {
        let roots = load_roots(ca)?;
        let chain = load_certs(cert)?;
        let key = load_key(key)?;
        if node_of(&chain[0]) != Some(node) {
            return Err(TlsError::Identity {
                path: cert.into(),
                what: format!(
                    "the certificate does not name {} (this node); issue one with `strata certs node --id {}`",
                    node_dns_name(node),
                    node.0
                ),
            });
        }
        let config = |e: rustls::Error| TlsError::Config(e.to_string());
        let server = |required: bool| -> Result<TlsAcceptor, TlsError> {
            let builder = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider());
            let builder = if required { builder } else { builder.allow_unauthenticated() };
            let verifier = builder.build().map_err(|e| TlsError::Config(e.to_string()))?;
            let mut cfg = ServerConfig::builder_with_provider(provider())
                .with_protocol_versions(&[&rustls::version::TLS13])
                .map_err(config)?
                .with_client_cert_verifier(verifier)
                .with_single_cert(chain.clone(), key.clone_key())
                .map_err(config)?;
            // Connections are long-lived: no session resumption, so no tickets to send.
            cfg.send_tls13_tickets = 0;
            Ok(TlsAcceptor::from(Arc::new(cfg)))
        };
        let client = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(config)?
            .with_root_certificates(roots.clone())
            .with_client_auth_cert(chain.clone(), key.clone_key())
            .map_err(config)?;
        Ok(NodeTls {
            node,
            peer_acceptor: server(true)?,
            client_acceptor: server(false)?,
            connector: TlsConnector::from(Arc::new(client)),
        })
    }

    /// The TLS handshake of an inbound peer connection, and the node its certificate names
    /// (`None`: a certificate of the CA that names no node, e.g. a client's — refuse it).
    /// Fails unless the peer presented a certificate of the cluster's CA.
    pub async fn accept_peer<IO>(&self, io: IO) -> io::Result<(ServerTlsStream<IO>, Option<NodeId>)>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let stream = self.peer_acceptor.accept(io).await?;
        let node = stream.get_ref().1.peer_certificates().and_then(|c| c.first()).and_then(node_of);
        Ok((stream, node))
    }

    /// The TLS handshake of a client connection, and the role its certificate names (`None`:
    /// no certificate, or one naming no role: anonymous).
    pub async fn accept_client<IO>(&self, io: IO) -> io::Result<(ServerTlsStream<IO>, Option<Role>)>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let stream = self.client_acceptor.accept(io).await?;
        let role = stream.get_ref().1.peer_certificates().and_then(|c| c.first()).and_then(role_of);
        Ok((stream, role))
    }

    /// The TLS handshake of an outbound peer connection to node `peer`: fails unless its
    /// certificate comes from the cluster's CA and names `node-<peer>`.
    pub async fn connect_peer<IO>(&self, peer: NodeId, io: IO) -> io::Result<ClientTlsStream<IO>>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let name = ServerName::try_from(node_dns_name(peer))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        self.connector.connect(name, io).await
    }
}

/// A client's TLS: the cluster's CA (to check nodes) and, optionally, the client's own
/// certificate and key (its role). Cheap to clone.
#[derive(Clone)]
pub struct ClientTls {
    connector: TlsConnector,
    role: Option<Role>,
    /// Where the credentials came from, for messages.
    source: String,
}

impl fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientTls")
            .field("role", &self.role)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl ClientTls {
    /// The CA certificate at `ca`, and the client certificate and key if given (without them
    /// the client is anonymous: nodes that require credentials refuse its requests).
    pub fn load(ca: &Path, cert_key: Option<(&Path, &Path)>) -> Result<ClientTls, TlsError> {
        let roots = load_roots(ca)?;
        let builder = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_root_certificates(roots);
        let (config, role, source) = match cert_key {
            Some((cert, key)) => {
                let chain = load_certs(cert)?;
                let role = role_of(&chain[0]);
                let cfg = builder
                    .with_client_auth_cert(chain, load_key(key)?)
                    .map_err(|e| TlsError::Config(e.to_string()))?;
                (cfg, role, cert.display().to_string())
            }
            None => (builder.with_no_client_auth(), None, ca.display().to_string()),
        };
        Ok(ClientTls { connector: TlsConnector::from(Arc::new(config)), role, source })
    }

    /// The credentials of a TLS directory (`strata up` writes `<data-dir>/tls`): the CA's
    /// certificate, and `client.pem` with `client.key` if both exist.
    pub fn from_dir(dir: &Path) -> Result<ClientTls, TlsError> {
        let cert = dir.join(files::CLIENT_CERT);
        let key = dir.join(files::CLIENT_KEY);
        let pair = (cert.exists() && key.exists()).then_some((cert.as_path(), key.as_path()));
        ClientTls::load(&dir.join(files::CA_CERT), pair)
    }

    /// The role the client certificate names (`None`: no certificate, or no role in it).
    pub fn role(&self) -> Option<Role> {
        self.role
    }

    /// Where the credentials were loaded from (the certificate's path, or the CA's).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The TLS handshake with a node: fails unless the node's certificate comes from the
    /// cluster's CA (and names [`SERVER_NAME`]).
    pub async fn connect<IO>(&self, io: IO) -> io::Result<ClientTlsStream<IO>>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        self.connect_to(SERVER_NAME, io).await
    }

    /// The TLS handshake with a server that is not a Strata node (the benchmark's Redis):
    /// fails unless its certificate comes from the CA and names `server` (a DNS name or an IP
    /// address).
    pub async fn connect_to<IO>(&self, server: &str, io: IO) -> io::Result<ClientTlsStream<IO>>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let name = ServerName::try_from(server.to_string())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{server:?}: {e}")))?;
        self.connector.connect(name, io).await
    }
}

/// If `e` is a TLS failure (a certificate refused, an alert from the other side), what it
/// says; `None` for any other IO error.
pub fn tls_failure(e: &io::Error) -> Option<String> {
    let inner = e.get_ref()?.downcast_ref::<rustls::Error>()?;
    Some(match inner {
        rustls::Error::AlertReceived(alert) => {
            format!("the other side refused the connection's credentials (TLS alert {alert:?})")
        }
        other => other.to_string(),
    })
}

/// One half of a connection, plain or TLS.
pub type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
/// The other half.
pub type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// Splits a TLS stream into halves that can live in two tasks.
pub fn split<S>(stream: S) -> (BoxRead, BoxWrite)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (rd, wr) = tokio::io::split(stream);
    (Box::new(rd), Box::new(wr))
}

/// Splits a plain TCP stream into halves (its own split: no lock between them).
pub fn split_tcp(stream: tokio::net::TcpStream) -> (BoxRead, BoxWrite) {
    let (rd, wr) = stream.into_split();
    (Box::new(rd), Box::new(wr))
}

#[cfg(all(test, feature = "gen"))]
mod tests {
    use super::*;

    struct Pki {
        dir: PathBuf,
    }

    impl Pki {
        fn new(tag: &str) -> Pki {
            let dir =
                std::env::temp_dir().join(format!("strata-tls-hs-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            gen::init_dir(&dir, &[NodeId(0), NodeId(1), NodeId(2)]).unwrap();
            Pki { dir }
        }

        fn node(&self, id: u32) -> NodeTls {
            let f = |n: String| self.dir.join(n);
            NodeTls::load(
                NodeId(id),
                &f(files::CA_CERT.into()),
                &f(files::node_cert(id)),
                &f(files::node_key(id)),
            )
            .unwrap()
        }
    }

    impl Drop for Pki {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    #[tokio::test]
    async fn peers_learn_each_others_node_from_the_certificate() {
        let pki = Pki::new("peers");
        let (n0, n1) = (pki.node(0), pki.node(1));
        let (a, b) = tokio::io::duplex(1 << 16);
        let (accepted, dialed) = tokio::join!(n0.accept_peer(a), n1.connect_peer(NodeId(0), b));
        assert_eq!(accepted.unwrap().1, Some(NodeId(1)));
        dialed.unwrap();
        // Dialing node 2's address but reaching node 0 fails: its certificate is not node-2's.
        let (a, b) = tokio::io::duplex(1 << 16);
        let (_, dialed) = tokio::join!(n0.accept_peer(a), n1.connect_peer(NodeId(2), b));
        assert!(dialed.is_err(), "the dialer checks the peer's node name");
    }

    #[tokio::test]
    async fn the_peer_port_refuses_a_connection_without_a_certificate() {
        let pki = Pki::new("anon-peer");
        let n0 = pki.node(0);
        let anonymous = ClientTls::load(&pki.dir.join(files::CA_CERT), None).unwrap();
        let (a, b) = tokio::io::duplex(1 << 16);
        let (accepted, _) = tokio::join!(n0.accept_peer(a), anonymous.connect(b));
        assert!(accepted.is_err(), "a peer must present a certificate");
    }

    #[tokio::test]
    async fn clients_get_the_role_their_certificate_names_or_none() {
        let pki = Pki::new("clients");
        let n0 = pki.node(0);
        let admin = ClientTls::from_dir(&pki.dir).unwrap();
        let anonymous = ClientTls::load(&pki.dir.join(files::CA_CERT), None).unwrap();
        for (client, role) in [(admin, Some(Role::Admin)), (anonymous, None)] {
            let (a, b) = tokio::io::duplex(1 << 16);
            let (accepted, dialed) = tokio::join!(n0.accept_client(a), client.connect(b));
            assert_eq!(accepted.unwrap().1, role);
            dialed.unwrap();
        }
        // A client of another cluster's CA does not trust this node.
        let other = Pki::new("other-ca");
        let stranger = ClientTls::from_dir(&other.dir).unwrap();
        let (a, b) = tokio::io::duplex(1 << 16);
        let (_, dialed) = tokio::join!(n0.accept_client(a), stranger.connect(b));
        assert!(dialed.is_err(), "the client checks the node's CA");
    }
}
