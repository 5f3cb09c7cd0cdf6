//! The CLI's exit codes. Documented in `strata --help` and the README; never renumber.

use strata_client::ClientError;

/// The command did what was asked.
pub const OK: i32 = 0;
/// The command failed: the node refused the request, or something went wrong locally.
pub const FAILED: i32 = 1;
/// Bad usage: unknown flag, missing argument (clap's own code).
pub const USAGE: i32 = 2;
/// `strata get`: the key has no value (never written, or deleted).
pub const NOT_FOUND: i32 = 3;
/// No node of the cluster could be reached (is `strata up` running? right `--endpoints`?).
pub const UNREACHABLE: i32 = 4;
/// The request was sent but no answer came back: it may or may not have taken effect.
pub const OUTCOME_UNKNOWN: i32 = 5;
/// `strata cas`: the value was not the expected one; nothing was swapped.
pub const NOT_SWAPPED: i32 = 6;
/// The credentials were refused: no client certificate, a role that does not allow the
/// command, or TLS certificates of another cluster. Nothing was done.
pub const DENIED: i32 = 7;
/// `strata txn`: the transaction aborted (a conflict, a lock, a failed `check`); nothing of it
/// took effect. (Issue #18 asked for 7, which `DENIED` has had since issue #17: a departure
/// recorded in `docs/design.md`.)
pub const ABORTED: i32 = 8;

pub const HELP: &str = "\
Exit codes:
  0  success
  1  the operation failed (the message says why)
  2  bad usage
  3  get: the key has no value
  4  no node of the cluster could be reached
  5  no answer: the request may or may not have taken effect
  6  cas: the value differed from the expected one; nothing swapped
  7  the credentials were refused (no client certificate, a role that does not allow
     the command, or TLS certificates of another cluster); nothing was done
  8  txn: the transaction aborted; nothing of it took effect";

/// A failed command: what to print and which code to exit with.
#[derive(Debug)]
pub struct Failure {
    pub code: i32,
    pub message: String,
}

impl Failure {
    pub fn new(code: i32, message: impl Into<String>) -> Failure {
        Failure { code, message: message.into() }
    }
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Failure {
        Failure::from_ref(&e)
    }
}

impl Failure {
    /// The failure of a client error: its exit code, and its message with a hint.
    pub fn from_ref(e: &ClientError) -> Failure {
        let code = match e {
            ClientError::Unreachable { .. } | ClientError::NoEndpoints => UNREACHABLE,
            ClientError::Unauthenticated(_)
            | ClientError::Forbidden(_)
            | ClientError::Tls { .. } => DENIED,
            e if e.outcome_unknown() => OUTCOME_UNKNOWN,
            _ => FAILED,
        };
        let hint = match e {
            ClientError::Unreachable { .. } => {
                "\nhint: start a local cluster with `strata up`, or pass --endpoints"
            }
            ClientError::WrongCluster { .. } => "\nhint: pass the cluster's id with --cluster-id",
            ClientError::Unauthenticated(_) => {
                "\nhint: pass a client certificate (--tls-cert/--tls-key; `strata certs client`), or use the data directory of the `strata up` that runs the cluster"
            }
            ClientError::Forbidden(_) => {
                "\nhint: use a certificate with the role named (`strata certs client --role ...`)"
            }
            ClientError::Tls { .. } => {
                "\nhint: the CA and client certificate must be the cluster's (--tls-ca, --tls-cert, --tls-key, or <data-dir>/tls); --insecure-plaintext for a cluster started with it"
            }
            _ => "",
        };
        Failure::new(code, format!("{e}{hint}"))
    }
}
