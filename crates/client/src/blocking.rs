//! A blocking wrapper for code without an async runtime. It owns a small tokio runtime; every
//! call blocks the calling thread until its result is in. Do not call it from inside an async
//! task (it would block the executor): use the async API there.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use strata_wire::client::{LinkFault, NodeStatus};
use strata_wire::{Carstamp, NodeId};

use crate::{
    ClientError, ClientOptions, CommitInfo, Op, Outcome, ReqId, RetryPolicy, RmwOutcome,
    TxnOutcome, Versioned,
};

fn runtime() -> Result<Arc<tokio::runtime::Runtime>, ClientError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("strata-client")
        .enable_all()
        .build()
        .map(Arc::new)
        .map_err(|e| ClientError::Unreachable {
            tried: "-".into(),
            last: format!("cannot start the client runtime: {e}"),
        })
}

/// Blocking counterpart of [`crate::Client`].
pub struct Client {
    // Field order matters: the client (and its connection) drop before the runtime.
    inner: crate::Client,
    rt: Arc<tokio::runtime::Runtime>,
}

impl Client {
    pub fn connect(endpoints: &[SocketAddr], opts: ClientOptions) -> Result<Client, ClientError> {
        let rt = runtime()?;
        let inner = rt.block_on(crate::Client::connect(endpoints, opts))?;
        Ok(Client { inner, rt })
    }

    pub fn open_session(&self) -> Result<Session, ClientError> {
        let inner = self.rt.block_on(self.inner.open_session())?;
        Ok(Session { inner, rt: self.rt.clone() })
    }

    pub fn status(&self) -> Result<NodeStatus, ClientError> {
        self.rt.block_on(self.inner.status())
    }

    pub fn set_fault(&self, peer: Option<NodeId>, fault: LinkFault) -> Result<(), ClientError> {
        self.rt.block_on(self.inner.set_fault(peer, fault))
    }

    pub fn node_addr(&self) -> Option<SocketAddr> {
        self.inner.node_addr()
    }

    /// Starts a transaction over the cluster's transactional log tables; see
    /// [`crate::Transaction`]. Its decisions travel on this client's runtime after `commit`
    /// returns: keep the client until they are applied, or use `commit_and_sync`.
    pub fn transaction(&self) -> Transaction {
        let inner = self.inner.transaction().on_runtime(self.rt.handle().clone());
        Transaction { inner, rt: self.rt.clone() }
    }

    /// Runs `body` in a transaction and commits it, again after [`RetryPolicy::pause_before`]
    /// while it aborts, as [`crate::Client::run_txn`] does; returns the body's value from the
    /// attempt that committed, or `TxnAborted` with the last reason.
    pub fn run_txn<T>(
        &self,
        policy: RetryPolicy,
        body: impl FnMut(&mut Transaction) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        Ok(self.run_txn_detailed(policy, body)?.0)
    }

    /// [`Client::run_txn`], also returning what the committed attempt saw (Kairos tables:
    /// [`Transaction::commit_detailed`]), as [`crate::Client::run_txn_detailed`] does.
    pub fn run_txn_detailed<T>(
        &self,
        policy: RetryPolicy,
        mut body: impl FnMut(&mut Transaction) -> Result<T, ClientError>,
    ) -> Result<(T, Option<CommitInfo>), ClientError> {
        let mut last = crate::AbortReason::Conflict;
        for attempt in 0..policy.attempts.max(1) {
            std::thread::sleep(policy.pause_before(attempt));
            let mut tx = self.transaction();
            let value = body(&mut tx)?;
            match tx.commit_detailed()? {
                (TxnOutcome::Committed, info) => return Ok((value, info)),
                (TxnOutcome::Aborted { reason }, _) => last = reason,
            }
        }
        Err(ClientError::TxnAborted { attempts: policy.attempts.max(1), reason: last })
    }
}

/// Blocking counterpart of [`crate::Transaction`].
pub struct Transaction {
    inner: crate::Transaction,
    rt: Arc<tokio::runtime::Runtime>,
}

impl Transaction {
    /// See [`crate::Transaction::read`].
    pub fn read(
        &mut self,
        table: &str,
        key: impl Into<Bytes>,
    ) -> Result<Option<Bytes>, ClientError> {
        self.rt.block_on(self.inner.read(table, key))
    }

    /// See [`crate::Transaction::read_for_update`].
    pub fn read_for_update(
        &mut self,
        table: &str,
        key: impl Into<Bytes>,
    ) -> Result<Option<Bytes>, ClientError> {
        self.rt.block_on(self.inner.read_for_update(table, key))
    }

    /// See [`crate::Transaction::read_many`].
    pub fn read_many<K: Into<Bytes>>(
        &mut self,
        table: &str,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<Vec<Option<Bytes>>, ClientError> {
        self.rt.block_on(self.inner.read_many(table, keys))
    }

    /// See [`crate::Transaction::read_many_for_update`].
    pub fn read_many_for_update<K: Into<Bytes>>(
        &mut self,
        table: &str,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<Vec<Option<Bytes>>, ClientError> {
        self.rt.block_on(self.inner.read_many_for_update(table, keys))
    }

    /// Buffers a write of `key`; nothing is sent before `commit`.
    pub fn write(&mut self, table: &str, key: impl Into<Bytes>, value: impl Into<Bytes>) {
        self.inner.write(table, key, value)
    }

    /// Buffers a delete of `key`.
    pub fn delete(&mut self, table: &str, key: impl Into<Bytes>) {
        self.inner.delete(table, key)
    }

    /// See [`crate::Transaction::commit`].
    pub fn commit(self) -> Result<TxnOutcome, ClientError> {
        self.rt.block_on(self.inner.commit())
    }

    /// See [`crate::Transaction::commit_detailed`]: the outcome and, for a committed
    /// transaction over Kairos tables, its commit timestamp, reads (with their version
    /// timestamps) and writes.
    pub fn commit_detailed(self) -> Result<(TxnOutcome, Option<CommitInfo>), ClientError> {
        self.rt.block_on(self.inner.commit_detailed())
    }

    /// See [`crate::Transaction::rollback`].
    pub fn rollback(self) {
        self.rt.block_on(self.inner.rollback())
    }

    /// See [`crate::Transaction::commit_and_sync`].
    pub fn commit_and_sync(self) -> Result<TxnOutcome, ClientError> {
        self.rt.block_on(self.inner.commit_and_sync())
    }
}

/// Blocking counterpart of [`crate::Session`].
pub struct Session {
    inner: crate::Session,
    rt: Arc<tokio::runtime::Runtime>,
}

impl Session {
    pub fn submit(&mut self, op: Op) -> Result<ReqId, ClientError> {
        let _guard = self.rt.enter();
        self.inner.submit(op)
    }
    pub fn wait(&mut self, req: ReqId) -> Result<Outcome, ClientError> {
        self.rt.block_on(self.inner.wait(req))
    }
    /// The oldest unconsumed completion, waiting for it; `None` when nothing is in flight.
    /// Named like the async `Session::next` on purpose; not an `Iterator`, since a session also
    /// takes new requests between calls.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<(ReqId, Result<Outcome, ClientError>)> {
        self.rt.block_on(self.inner.next())
    }
    pub fn call(&mut self, op: Op) -> Result<Outcome, ClientError> {
        self.rt.block_on(self.inner.call(op))
    }
    pub fn get(&mut self, key: impl Into<Bytes>) -> Result<Versioned, ClientError> {
        self.rt.block_on(self.inner.get(key))
    }
    pub fn put(
        &mut self,
        key: impl Into<Bytes>,
        value: impl Into<Bytes>,
    ) -> Result<Carstamp, ClientError> {
        self.rt.block_on(self.inner.put(key, value))
    }
    pub fn delete(&mut self, key: impl Into<Bytes>) -> Result<Carstamp, ClientError> {
        self.rt.block_on(self.inner.delete(key))
    }
    pub fn acquire(&mut self, key: impl Into<Bytes>) -> Result<Versioned, ClientError> {
        self.rt.block_on(self.inner.acquire(key))
    }
    pub fn release(
        &mut self,
        key: impl Into<Bytes>,
        value: impl Into<Bytes>,
    ) -> Result<Carstamp, ClientError> {
        self.rt.block_on(self.inner.release(key, value))
    }
    pub fn faa(&mut self, key: impl Into<Bytes>, delta: u64) -> Result<u64, ClientError> {
        self.rt.block_on(self.inner.faa(key, delta))
    }
    pub fn cas(
        &mut self,
        key: impl Into<Bytes>,
        expected: Option<Bytes>,
        new: impl Into<Bytes>,
        weak: bool,
    ) -> Result<RmwOutcome, ClientError> {
        self.rt.block_on(self.inner.cas(key, expected, new, weak))
    }
    pub fn close(self) -> Result<(), ClientError> {
        self.rt.block_on(self.inner.close())
    }
}
