//! Rust client for Strata.
//!
//! ```no_run
//! # async fn demo() -> Result<(), strata_client::ClientError> {
//! use strata_client::{Client, ClientOptions, Op};
//!
//! let endpoints = ["127.0.0.1:7000".parse().unwrap()];
//! let client = Client::connect(&endpoints, ClientOptions::default()).await?;
//! let mut s = client.open_session().await?;
//! s.put("greeting", "hello").await?;
//! assert_eq!(s.get("greeting").await?.value.as_deref(), Some(&b"hello"[..]));
//!
//! // Pipelining: submit a batch, then wait for the last request — its completion implies
//! // that every earlier request of the session has completed (Kite §2.3).
//! let mut last = 0;
//! for i in 0..100u32 {
//!     last = s.submit(Op::put(format!("k{i}"), i.to_string()))?;
//! }
//! s.wait(last).await?;
//! # Ok(()) }
//! ```
//!
//! * A [`Client`] connects to any node of the cluster; a [`Session`] is an ordered stream of
//!   requests bound to that node (Kite §2.1). Sessions are cheap: open many for concurrency.
//! * Requests of a session are pipelined and complete in session order.
//! * Errors are typed ([`ClientError`]); each variant says what to do, and
//!   [`ClientError::outcome_unknown`] tells whether a failed write may still have happened.
//! * [`blocking`] wraps the same API for code without an async runtime: sessions, and
//!   transactions (`blocking::Client::{transaction, run_txn, run_txn_detailed}`).

pub mod blocking;
mod client;
mod conn;
mod error;
mod kairos;
mod kairos_cache;
mod kairos_wm;
mod lease;
mod session;
mod shard_move;
mod table;
mod txn;
mod txn_sharded;

pub use client::{Client, ClientOptions};
pub use conn::Push;
pub use error::ClientError;
pub use kairos::{CommitInfo, KairosOptions, ReadInfo, WriteInfo};
pub use kairos_cache::{Cacheable, KairosCacheOptions, KairosCacheStats};
pub use session::{Op, Outcome, ReqId, RmwOutcome, Session, Versioned};
pub use shard_move::{MovePlant, MoveReport, MovedState};
pub use strata_kairos::cache::CacheStats;
pub use strata_kairos::{LeaseDuration, LeasePolicy};
pub use strata_tls::{ClientTls, TlsError};
pub use strata_wire::client::LogWriteOp;
pub use strata_wire::client::TableTxn;
pub use strata_wire::client::{
    push_topic, LinkFault, LogFailure, NodeStatus, PeerStatus, ShardRole, ShardStatus, TableDef,
    TableDurability, TableEngine, TableReads, TableReplication, TableTimers, TableValidation,
};
pub use strata_wire::log::{Expect, LogIndex, ShardMove, WriteOutcome};
pub use strata_wire::txn::{AbortReason, Decision, Timestamp, Vote};
pub use strata_wire::Role;
pub use strata_wire::{Carstamp, ClusterId, NodeId, SessionId};
pub use table::{Conditional, LogRead, Table, WriteOpts, Written};
pub use txn::{RetryPolicy, Transaction, TxnBody, TxnOutcome};

/// The README's Rust example, compiled by `cargo test` so that it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeExample;
