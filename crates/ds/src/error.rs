//! Errors of the data-structure operations.

use strata_client::ClientError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum DsError {
    /// The store refused or lost a request. If [`ClientError::outcome_unknown`], the operation
    /// may have partly happened (e.g. a push linked but its caller never learned it).
    #[error(transparent)]
    Client(#[from] ClientError),
    /// A key held something the structure never writes there, or an object's fields disagree
    /// with the pointer that led to them. Under RC_Lin this cannot happen; it means a bug in the
    /// store (a visibility or atomicity violation) or a foreign writer under the same root.
    #[error("corrupt structure at {key}: {detail}")]
    Corrupt { key: String, detail: String },
    /// A workload check failed (e.g. a pop right after one's own push found the stack empty).
    #[error("invariant violated: {0}")]
    Invariant(String),
    /// The call was made wrongly (a session with requests outstanding, a context of another
    /// root, a bad layout, an exhausted context).
    #[error("invalid use: {0}")]
    Usage(String),
}

impl DsError {
    pub(crate) fn corrupt(key: &[u8], detail: impl Into<String>) -> DsError {
        DsError::Corrupt { key: String::from_utf8_lossy(key).into_owned(), detail: detail.into() }
    }
}
