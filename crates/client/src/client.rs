//! The entry point: a handle on a cluster that opens sessions at one of its nodes.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strata_wire::client::{LinkFault, NodeStatus, Request, Response, TableDef};
use strata_wire::{ClusterId, NodeId};

use crate::conn::{Conn, ConnHandle};
use crate::error::ClientError;
use crate::session::{unexpected, Session};
use crate::table::Table;

/// How a client connects and how long it waits.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// The cluster the endpoints belong to; a node of another cluster is refused.
    pub cluster: ClusterId,
    /// How long one connection attempt may take before the next endpoint is tried.
    pub connect_timeout: Duration,
    /// How long a request may wait for its reply; `None` waits forever (Kite §2.4: operations
    /// wait until the protocol can make progress). A timed-out request may still take effect.
    pub request_timeout: Option<Duration>,
    /// Requests one session may have outstanding before `submit` fails with `QueueFull`.
    pub max_in_flight: usize,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            cluster: ClusterId(1),
            connect_timeout: Duration::from_secs(2),
            request_timeout: None,
            max_in_flight: 4096,
        }
    }
}

/// A handle on a cluster. Cheap to share (`Arc<Client>`); sessions it opens are bound to the
/// node it is connected to, and keep the connection open after the client is dropped. If the
/// connection breaks, the next `open_session` reconnects — to the next reachable endpoint if
/// the node is down.
pub struct Client {
    endpoints: Vec<SocketAddr>,
    opts: ClientOptions,
    conn: Mutex<Option<Arc<ConnHandle>>>,
    /// Where the next connection attempt starts in `endpoints`.
    cursor: AtomicUsize,
}

impl Client {
    /// Connects to one of `endpoints` (any node serves every operation), trying them in turn
    /// from a starting point that differs between clients, so that clients spread over nodes.
    pub async fn connect(endpoints: &[SocketAddr], opts: ClientOptions) -> Result<Client, ClientError> {
        if endpoints.is_empty() {
            return Err(ClientError::NoEndpoints);
        }
        static SPREAD: AtomicUsize = AtomicUsize::new(0);
        let start = (std::process::id() as usize).wrapping_add(SPREAD.fetch_add(1, Ordering::Relaxed));
        let client = Client {
            endpoints: endpoints.to_vec(),
            opts,
            conn: Mutex::new(None),
            cursor: AtomicUsize::new(start % endpoints.len()),
        };
        client.connection().await?;
        Ok(client)
    }

    /// Connects to exactly this node.
    pub async fn connect_node(addr: SocketAddr, opts: ClientOptions) -> Result<Client, ClientError> {
        let client = Client { endpoints: vec![addr], opts, conn: Mutex::new(None), cursor: AtomicUsize::new(0) };
        client.connection().await?;
        Ok(client)
    }

    pub fn options(&self) -> &ClientOptions {
        &self.opts
    }

    /// The node this client is (or was last) connected to.
    pub fn node_addr(&self) -> Option<SocketAddr> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|c| c.addr)
    }

    /// The current connection, or a new one to the first reachable endpoint.
    async fn connection(&self) -> Result<Arc<ConnHandle>, ClientError> {
        if let Some(c) = self.conn.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            if c.is_usable() {
                return Ok(c.clone());
            }
        }
        let n = self.endpoints.len();
        let start = self.cursor.load(Ordering::Relaxed);
        let mut last = String::new();
        for i in 0..n {
            let addr = self.endpoints[(start + i) % n];
            match Conn::open(addr, self.opts.cluster, self.opts.connect_timeout).await {
                Ok(conn) => {
                    self.cursor.store((start + i) % n, Ordering::Relaxed);
                    let mut slot = self.conn.lock().unwrap_or_else(|e| e.into_inner());
                    // Another task may have reconnected meanwhile; keep one connection.
                    if let Some(c) = slot.as_ref().filter(|c| c.is_usable()) {
                        return Ok(c.clone()); // dropping `conn` closes it
                    }
                    *slot = Some(conn.clone());
                    return Ok(conn);
                }
                Err(e) => last = format!("{addr}: {e}"),
            }
        }
        let tried: Vec<String> = self.endpoints.iter().map(|a| a.to_string()).collect();
        Err(ClientError::Unreachable { tried: tried.join(", "), last })
    }

    /// Opens a new session at the connected node.
    pub async fn open_session(&self) -> Result<Session, ClientError> {
        let conn = self.connection().await?;
        match conn.call(Request::OpenSession, self.opts.request_timeout).await? {
            Response::SessionOpened { session } => {
                Ok(Session::new(conn, session, self.opts.request_timeout, self.opts.max_in_flight))
            }
            other => Err(unexpected(other)),
        }
    }

    /// The connected node's view of itself: keys, sessions, peers, counters.
    pub async fn status(&self) -> Result<NodeStatus, ClientError> {
        let conn = self.connection().await?;
        match conn.call(Request::Status, self.opts.request_timeout).await? {
            Response::Status(s) => Ok(s),
            other => Err(unexpected(other)),
        }
    }

    /// Admin: sets the fault layer of the connected node's outbound link to `peer` (every
    /// peer if `None`). `LinkFault::default()` clears it.
    pub async fn set_fault(&self, peer: Option<NodeId>, fault: LinkFault) -> Result<(), ClientError> {
        let conn = self.connection().await?;
        match conn.call(Request::SetFault { peer, fault }, self.opts.request_timeout).await? {
            Response::FaultSet => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Adds a table to the connected node's catalog. `Ok(false)`: an identical definition
    /// existed already. Every node must be told (the CLI's `strata table create` does that):
    /// the catalog is not replicated yet.
    pub async fn create_table(&self, def: TableDef) -> Result<bool, ClientError> {
        let conn = self.connection().await?;
        match conn.call(Request::CreateTable { def }, self.opts.request_timeout).await? {
            Response::TableCreated { created } => Ok(created),
            other => Err(unexpected(other)),
        }
    }

    /// The connected node's table catalog.
    pub async fn list_tables(&self) -> Result<Vec<TableDef>, ClientError> {
        let conn = self.connection().await?;
        match conn.call(Request::ListTables, self.opts.request_timeout).await? {
            Response::Tables(defs) => Ok(defs),
            other => Err(unexpected(other)),
        }
    }

    /// A handle on the log table `name` (its definition is read from the connected node). The
    /// handle talks to every endpoint of this client: writes to the key's shard leader, reads
    /// where they are sent ([`Table`]).
    pub async fn table(&self, name: &str) -> Result<Table, ClientError> {
        let def = self
            .list_tables()
            .await?
            .into_iter()
            .find(|d| d.name == name)
            .ok_or_else(|| ClientError::NoSuchTable(name.to_string()))?;
        Ok(Table::new(def, &self.endpoints, self.opts.clone()))
    }
}
