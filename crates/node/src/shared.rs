//! What the runtime's tasks share: the core task's input type, counters, the task set.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use strata_core::Route;
use strata_wire::client::{ClientRequest, ClientResponse};
use strata_wire::peer::PeerMessage;
use strata_wire::{ClusterId, NodeId, Role};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

/// An input of the core task, the single owner of the protocol core.
#[derive(Debug)]
pub(crate) enum CoreInput {
    /// A client connection opened; replies for `route` go to `tx`. `role`: what its verified
    /// credentials allow (`None`: none; `handshake`).
    Connected { route: Route, tx: mpsc::UnboundedSender<WriterMsg>, role: Option<Role> },
    /// Everything one read produced on a client connection, in arrival order.
    Client { route: Route, items: Vec<ClientItem> },
    /// The client connection is gone: its sessions close.
    Disconnected { route: Route },
    /// Everything one read produced on an inbound peer connection, in arrival order.
    Peer { from: NodeId, msgs: Vec<PeerMessage> },
}

/// One entry of a client connection's input, kept in arrival order so that replies are too.
#[derive(Debug)]
pub(crate) enum ClientItem {
    /// A well-formed request.
    Req(ClientRequest),
    /// An error the reader decided on (undecodable frame); sent in order with the others.
    Reply(ClientResponse),
    /// [`ClientItem::Reply`] in a frame of another cluster id: the answer to a frame of a
    /// foreign cluster carries that cluster's id, so it reveals nothing of this one's.
    ReplyAs(ClusterId, ClientResponse),
    /// The stream cannot be trusted any more: flush what is queued and close the connection.
    Close,
}

/// What a client connection's writer task receives.
#[derive(Debug)]
pub(crate) enum WriterMsg {
    Resp(ClientResponse),
    /// A response framed with another cluster id (`ClientItem::ReplyAs`).
    RespAs(ClusterId, ClientResponse),
    /// Write what came before, then close the connection.
    Close,
}

/// Transport counters reported by `Status`.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub bad_client_frames: AtomicU64,
    pub bad_peer_frames: AtomicU64,
}

impl Counters {
    pub fn bad_client(&self) -> u64 {
        self.bad_client_frames.fetch_add(1, Ordering::Relaxed) + 1
    }
    pub fn bad_peer(&self) -> u64 {
        self.bad_peer_frames.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// Settings every connection task needs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WireSettings {
    pub node: NodeId,
    pub cluster: ClusterId,
    pub max_frame_bytes: usize,
}

/// Every task of a running node except the core task, so shutdown can wait for them (and abort
/// the ones that do not finish in time).
#[derive(Debug, Default)]
pub(crate) struct Tasks {
    inner: Mutex<TasksInner>,
}

#[derive(Debug, Default)]
struct TasksInner {
    set: JoinSet<()>,
    closed: bool,
}

impl Tasks {
    /// Spawns `fut` on the current runtime, unless shutdown has begun.
    pub fn spawn<F: Future<Output = ()> + Send + 'static>(&self, fut: F) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if g.closed {
            return;
        }
        // Reap finished connection tasks so the set does not grow with every connection ever made.
        while g.set.try_join_next().is_some() {}
        g.set.spawn(fut);
    }

    /// Refuses new tasks and waits up to `grace` for the running ones; aborts the rest.
    /// Returns how many had to be aborted.
    pub async fn close_and_join(&self, grace: Duration) -> usize {
        let mut set = {
            let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            g.closed = true;
            std::mem::take(&mut g.set)
        };
        let joined =
            tokio::time::timeout(grace, async { while set.join_next().await.is_some() {} }).await;
        if joined.is_ok() {
            return 0;
        }
        let left = set.len();
        set.shutdown().await;
        left
    }
}
