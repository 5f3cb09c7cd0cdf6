//! A blocking wrapper for code without an async runtime. It owns a small tokio runtime; every
//! call blocks the calling thread until its result is in. Do not call it from inside an async
//! task (it would block the executor): use the async API there.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use strata_wire::client::{LinkFault, NodeStatus};
use strata_wire::{Carstamp, NodeId};

use crate::{ClientError, ClientOptions, Op, Outcome, ReqId, RmwOutcome, Versioned};

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
