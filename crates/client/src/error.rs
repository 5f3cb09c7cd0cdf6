//! What can go wrong, and what the caller should do about it.

use std::net::SocketAddr;
use std::time::Duration;

use strata_wire::client::ErrorCode;
use strata_wire::ClusterId;
use thiserror::Error;

/// One error type for every client call. Each variant says what to do.
#[derive(Debug, Error)]
pub enum ClientError {
    /// No endpoint accepted a connection. Is the cluster running (`strata up`)? Are the
    /// endpoints right (`--endpoints`, or the data dir `strata up` wrote them to)?
    #[error("cannot reach any Strata node (tried {tried}): {last}")]
    Unreachable { tried: String, last: String },
    /// The client was given no endpoint to connect to.
    #[error("no endpoints given")]
    NoEndpoints,
    /// The connection to `node` broke and could not be restored in time. Requests that were in
    /// flight may or may not have taken effect (outcome unknown). An exactly-once session
    /// (the default) reconnects and re-sends by itself for `ClientOptions::retry_for` first;
    /// this error means it gave up. Open a new session when the cluster is reachable again.
    /// `reason`: what the node said before it closed the connection, if it said anything
    /// (too many connections, idle, a frame too slow: `docs/design.md`, "Limits and bounds").
    #[error(
        "connection to {node} lost{}; the outcome of in-flight requests is unknown",
        .reason.as_ref().map(|r| format!(" ({r})")).unwrap_or_default()
    )]
    ConnectionLost { node: SocketAddr, reason: Option<String> },
    /// No reply within the configured request timeout. The request may still take effect
    /// (outcome unknown); it stays in flight and a later wait may still return its result.
    #[error("no reply within {0:?}; the request may still take effect")]
    TimedOut(Duration),
    /// The node belongs to another cluster: the endpoints point at the wrong deployment.
    #[error(
        "the node belongs to another cluster (this client speaks to cluster {expected}): {message}"
    )]
    WrongCluster { expected: ClusterId, message: String },
    /// The value exceeds the cluster's value limit: split or shrink it.
    #[error("value too large: {0}")]
    ValueTooLarge(String),
    /// The key exceeds the cluster's key limit, or is empty.
    #[error("invalid key: {0}")]
    InvalidKey(String),
    /// The session is not open at that node (closed, or opened on another connection).
    /// Open a new session.
    #[error("invalid session: {0}")]
    InvalidSession(String),
    /// Too many requests in flight on the session: wait for completions first.
    #[error("session queue full: {0}")]
    QueueFull(String),
    /// The key holds as many unacknowledged exactly-once results as the cluster can
    /// replicate with it (many clients' compare-and-swaps on one large value). Nothing was
    /// done: retry after a short back-off.
    #[error("busy: {0}")]
    Busy(String),
    /// The node is shutting down. Open a session at another node and retry.
    #[error("node shutting down: {0}")]
    ShuttingDown(String),
    /// The node did not understand the request: client and node versions differ, or the
    /// client is broken. Upgrade one of them.
    #[error("the node refused the request as {code:?}: {message}")]
    Protocol { code: ErrorCode, message: String },
    /// An argument was refused by the node (for admin requests, e.g. an unknown peer).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// No table of that name exists at the node. Create it (`strata table create`) or check
    /// the name.
    #[error("no table named {0:?}")]
    NoSuchTable(String),
    /// A log table's shard did not serve the request in time: no leader (election under way,
    /// no majority reachable) or no node able to serve the read. A write's outcome is unknown:
    /// retrying it later (same handle) is safe.
    #[error("table {table}: not served within {waited:?} (last answer: {last})")]
    TableUnavailable { table: String, last: String, waited: Duration },
    /// RIFL `Stale` (rifl.md R-G4): the node refused a request this client had already
    /// acknowledged — a retry that came too late. A client bug; nothing was executed.
    #[error("stale request: {0}")]
    Stale(String),
    /// RIFL `ExpiredLease` (R-G4): the client's lease expired while the request was
    /// outstanding; whether an earlier attempt took effect is unknown.
    #[error("the client's lease expired; the outcome is unknown: {0}")]
    ExpiredLease(String),
    /// `Client::run_txn` gave up: every attempt aborted (conflicts with other transactions,
    /// or keys they held). Nothing of the last attempt took effect.
    #[error("the transaction aborted {attempts} times; last: {reason}")]
    TxnAborted { attempts: u32, reason: strata_wire::txn::AbortReason },
    /// The node answered with something this client does not expect for the request.
    #[error("unexpected reply from the node: {0}")]
    UnexpectedReply(String),
    /// The node requires credentials and this client presented none (no client certificate,
    /// or a plain connection to a node that requires TLS). Connect with a client certificate
    /// of the cluster's CA (`ClientOptions::tls`; `strata certs client` issues one).
    #[error("{0}")]
    Unauthenticated(String),
    /// The client's role does not allow the request (a `read` client writing, a `write`
    /// client running an admin command). Nothing was done; use credentials with the role the
    /// message names.
    #[error("{0}")]
    Forbidden(String),
    /// TLS with `node` failed: its certificate is not from this client's CA, it refused this
    /// client's certificate, or it does not speak TLS. Check that the CA certificate is the
    /// cluster's and that the client certificate was issued by it. Nothing was done.
    #[error("TLS with {node} failed: {message}")]
    Tls { node: SocketAddr, message: String },
    /// The TLS credentials could not be loaded (a file missing, unreadable or not PEM): the
    /// message names the file.
    #[error("TLS credentials: {0}")]
    Credentials(String),
}

impl From<strata_tls::TlsError> for ClientError {
    fn from(e: strata_tls::TlsError) -> ClientError {
        ClientError::Credentials(e.to_string())
    }
}

impl ClientError {
    /// Maps a node's error reply.
    pub(crate) fn from_code(code: ErrorCode, message: String, cluster: ClusterId) -> ClientError {
        match code {
            ErrorCode::ValueTooLarge => ClientError::ValueTooLarge(message),
            ErrorCode::KeyTooLarge => ClientError::InvalidKey(message),
            ErrorCode::InvalidSession => ClientError::InvalidSession(message),
            ErrorCode::QueueFull => ClientError::QueueFull(message),
            ErrorCode::Busy => ClientError::Busy(message),
            ErrorCode::ShuttingDown => ClientError::ShuttingDown(message),
            ErrorCode::WrongCluster => ClientError::WrongCluster { expected: cluster, message },
            ErrorCode::Stale => ClientError::Stale(message),
            ErrorCode::ExpiredLease => ClientError::ExpiredLease(message),
            ErrorCode::Unauthenticated => ClientError::Unauthenticated(message),
            ErrorCode::Forbidden => ClientError::Forbidden(message),
            ErrorCode::InvalidArgument if message.contains("key") => {
                ClientError::InvalidKey(message)
            }
            ErrorCode::InvalidArgument => ClientError::InvalidArgument(message),
            code => ClientError::Protocol { code, message },
        }
    }

    /// Whether the node refused the client's credentials (`Unauthenticated`, `Forbidden`,
    /// `Tls`): retrying with the same credentials cannot help, and nothing was done.
    pub fn is_denied(&self) -> bool {
        matches!(
            self,
            ClientError::Unauthenticated(_) | ClientError::Forbidden(_) | ClientError::Tls { .. }
        )
    }

    /// A copy of a denial (see [`ClientError::is_denied`]), to fail several requests with it.
    pub(crate) fn denial_copy(&self) -> Option<ClientError> {
        match self {
            ClientError::Unauthenticated(m) => Some(ClientError::Unauthenticated(m.clone())),
            ClientError::Forbidden(m) => Some(ClientError::Forbidden(m.clone())),
            ClientError::Tls { node, message } => {
                Some(ClientError::Tls { node: *node, message: message.clone() })
            }
            _ => None,
        }
    }

    /// Whether the request may have taken effect although no result came back.
    pub fn outcome_unknown(&self) -> bool {
        matches!(
            self,
            ClientError::ConnectionLost { .. }
                | ClientError::TimedOut(_)
                | ClientError::TableUnavailable { .. }
                | ClientError::ExpiredLease(_)
        )
    }
}
