//! The systems the load generator can drive, behind one pipelined-session interface.
//!
//! Both sides have the same shape, so the generator cannot tell them apart: a [`Connection`]
//! is one TCP connection; a [`BenchSession`] opened on it submits requests without blocking
//! and yields their completions in submission order.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use strata_client::{Client, ClientOptions, Outcome};
use tokio::sync::oneshot;

use crate::args::Target;
use crate::etcd::{EtcdConn, EtcdSession};
use crate::peer_tls::PeerTls;
use crate::resp::{self, RedisConn, RedisError, Reply};
use crate::zookeeper::{ZkConn, ZkSession};

/// How long connecting may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// One benchmark operation.
#[derive(Clone, Debug)]
pub enum BenchOp {
    Read {
        key: Bytes,
    },
    Write {
        key: Bytes,
        value: Bytes,
    },
    /// A write of a key that does not exist yet (preload, YCSB inserts): a put everywhere but
    /// ZooKeeper, where it is a create.
    Insert {
        key: Bytes,
        value: Bytes,
    },
    /// Strata only (the arguments refuse sync mixes for Redis).
    Acquire {
        key: Bytes,
    },
    Release {
        key: Bytes,
        value: Bytes,
    },
    /// Fetch-and-add of 1.
    Faa {
        key: Bytes,
    },
    /// Strong CAS expecting `value` and writing it back (every write carries the same value).
    Cas {
        key: Bytes,
        value: Bytes,
    },
}

/// A completed operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Done {
    /// A read that found a value.
    Hit,
    /// A read that found nothing (the key was never written, or not replicated here yet).
    Miss,
    /// A write.
    Written,
    /// A read-modify-write.
    Rmw,
}

/// One connection to the system under test.
pub enum Connection {
    Strata(Client),
    /// A client of every node, whose sessions are handles on one log table; `home` is the
    /// endpoint its sessions read at.
    StrataTable {
        client: Client,
        table: String,
        home: usize,
    },
    Redis(Arc<RedisConn>),
    Etcd(EtcdConn),
    Zookeeper(ZkConn),
}

impl Connection {
    /// Connects to `addr` (exactly that node, no failover: a benchmark must know where its
    /// load goes). `run_id` names the run (ZooKeeper: its znodes' parent). Strata's TLS is in
    /// `strata`; `peer_tls` is Redis' and etcd's.
    pub async fn connect(
        target: Target,
        addr: SocketAddr,
        strata: &ClientOptions,
        peer_tls: Option<&PeerTls>,
        run_id: &str,
        exactly_once: bool,
    ) -> Result<Connection, String> {
        match target {
            Target::Strata => {
                // No request timeout in the client: the generator applies its own to both targets.
                let opts = ClientOptions {
                    connect_timeout: CONNECT_TIMEOUT,
                    request_timeout: None,
                    exactly_once,
                    ..strata.clone()
                };
                Client::connect_node(addr, opts)
                    .await
                    .map(Connection::Strata)
                    .map_err(|e| e.to_string())
            }
            Target::Redis => RedisConn::connect(addr, CONNECT_TIMEOUT, peer_tls)
                .await
                .map(Connection::Redis)
                .map_err(|e| format!("cannot connect to redis at {addr}: {e}")),
            Target::Etcd => EtcdConn::connect(addr, peer_tls).await.map(Connection::Etcd),
            Target::Zookeeper => ZkConn::connect(addr, run_id).await.map(Connection::Zookeeper),
        }
    }

    /// Connects to every node for the log table `table`; sessions read at `endpoints[home]`.
    pub async fn connect_table(
        endpoints: &[SocketAddr],
        home: usize,
        strata: &ClientOptions,
        table: &str,
    ) -> Result<Connection, String> {
        let opts = ClientOptions {
            connect_timeout: CONNECT_TIMEOUT,
            request_timeout: None,
            ..strata.clone()
        };
        let client = Client::connect(endpoints, opts).await.map_err(|e| e.to_string())?;
        Ok(Connection::StrataTable { client, table: table.to_string(), home })
    }

    /// Opens a session: at the node for Strata (Kite §2.1); for Redis a local FIFO of replies
    /// on the shared connection (Redis has no sessions; a connection answers in order).
    pub async fn open_session(&self) -> Result<BenchSession, String> {
        match self {
            Connection::Strata(c) => {
                c.open_session().await.map(BenchSession::Strata).map_err(|e| e.to_string())
            }
            Connection::StrataTable { client, table, home } => {
                let table = client.table(table).await.map_err(|e| e.to_string())?;
                Ok(BenchSession::Table(TableSession {
                    table,
                    home: *home,
                    queued: VecDeque::new(),
                }))
            }
            Connection::Redis(c) => Ok(BenchSession::Redis(RedisSession {
                conn: c.clone(),
                in_flight: VecDeque::new(),
            })),
            Connection::Etcd(c) => Ok(BenchSession::Etcd(c.open_session())),
            Connection::Zookeeper(c) => Ok(BenchSession::Zookeeper(c.open_session())),
        }
    }

    pub fn close(&self) {
        if let Connection::Redis(c) = self {
            c.close();
        }
        // A Strata client closes its connection when dropped.
    }
}

/// A pipelined stream of requests whose completions come back in order.
pub enum BenchSession {
    Strata(strata_client::Session),
    Virtual(VirtualClients),
    Table(TableSession),
    Redis(RedisSession),
    Etcd(EtcdSession),
    Zookeeper(ZkSession),
}

/// A session on a log table: a `Table` handle runs one call at a time, so submitted
/// operations wait here and run, in order, as their completions are asked for.
pub struct TableSession {
    table: strata_client::Table,
    home: usize,
    queued: VecDeque<BenchOp>,
}

/// A Strata session whose writes come from simulated RIFL clients (`--virtual-clients`,
/// RIFL §8.3 Q3): session `j` of `S` drives clients `first + j`, `first + j + S`, ..., each with
/// its own sequence numbers; with one request in flight per session, each simulated client
/// has at most one, so `first_incomplete = seq` is exact.
pub struct VirtualClients {
    session: strata_client::Session,
    first: u64,
    stride: u64,
    offset: u64,
    seqs: Vec<u64>,
    rng: u64,
}

impl VirtualClients {
    /// Session `j` of `total`, out of `clients` simulated clients whose ids start at `first`.
    pub fn new(
        session: strata_client::Session,
        first: u64,
        j: usize,
        total: usize,
        clients: u64,
    ) -> VirtualClients {
        let (j, total) = (j as u64, total as u64);
        let mine = clients.saturating_sub(j).div_ceil(total).max(1);
        VirtualClients {
            session,
            first,
            stride: total,
            offset: j,
            seqs: vec![0; mine as usize],
            rng: first ^ (j + 1),
        }
    }

    fn submit_write(&mut self, key: Bytes, value: Bytes) -> Result<(), String> {
        // xorshift64: which simulated client writes next.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let k = (self.rng % self.seqs.len() as u64) as usize;
        self.seqs[k] += 1;
        let (seq, client_id) =
            (self.seqs[k], self.first.wrapping_add(self.offset + k as u64 * self.stride).max(1));
        let rifl = strata_wire::Rifl {
            rpc: strata_wire::RpcId { client_id, seq },
            first_incomplete: seq,
            lease: strata_wire::LeaseInfo {
                client_id,
                expiration: strata_wire::ClusterTime(u64::MAX),
                timestamp: strata_wire::ClusterTime::ZERO,
            },
        };
        self.session
            .submit_as(strata_client::Op::Put { key, value }, rifl)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// A session on a Redis connection: the replies it waits for, oldest first.
pub struct RedisSession {
    conn: Arc<RedisConn>,
    in_flight: VecDeque<oneshot::Receiver<Result<Reply, RedisError>>>,
}

impl BenchSession {
    /// The Strata session inside, for the data-structure workloads.
    pub fn into_strata(self) -> Option<strata_client::Session> {
        match self {
            BenchSession::Strata(s) => Some(s),
            BenchSession::Virtual(_)
            | BenchSession::Table(_)
            | BenchSession::Redis(_)
            | BenchSession::Etcd(_)
            | BenchSession::Zookeeper(_) => None,
        }
    }

    /// Queues `op` without blocking. An error means the session is unusable.
    pub fn submit(&mut self, op: BenchOp) -> Result<(), String> {
        match self {
            BenchSession::Strata(s) => {
                let op = match op {
                    BenchOp::Read { key } => strata_client::Op::Get { key },
                    BenchOp::Write { key, value } | BenchOp::Insert { key, value } => {
                        strata_client::Op::Put { key, value }
                    }
                    BenchOp::Acquire { key } => strata_client::Op::Acquire { key },
                    BenchOp::Release { key, value } => strata_client::Op::Release { key, value },
                    BenchOp::Faa { key } => strata_client::Op::Faa { key, delta: 1 },
                    BenchOp::Cas { key, value } => strata_client::Op::Cas {
                        key,
                        expected: Some(value.clone()),
                        new: value,
                        weak: false,
                    },
                };
                s.submit(op).map(|_| ()).map_err(|e| e.to_string())
            }
            BenchSession::Virtual(v) => match op {
                BenchOp::Read { key } => v
                    .session
                    .submit(strata_client::Op::Get { key })
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
                BenchOp::Write { key, value } | BenchOp::Insert { key, value } => {
                    v.submit_write(key, value)
                }
                _ => Err("--virtual-clients takes relaxed reads and writes only".to_string()),
            },
            BenchSession::Table(s) => match op {
                BenchOp::Read { .. } | BenchOp::Write { .. } | BenchOp::Insert { .. } => {
                    s.queued.push_back(op);
                    Ok(())
                }
                _ => Err("log tables take reads and writes only".to_string()),
            },
            BenchSession::Redis(s) => {
                let slot = match &op {
                    BenchOp::Read { key } => s.conn.send(&[b"GET", key]),
                    BenchOp::Write { key, value } | BenchOp::Insert { key, value } => {
                        s.conn.send(&[b"SET", key, value])
                    }
                    _ => return Err("redis has no releases, acquires or RMWs".to_string()),
                };
                s.in_flight.push_back(slot.map_err(|e| e.to_string())?);
                Ok(())
            }
            BenchSession::Etcd(s) => s.submit(op),
            BenchSession::Zookeeper(s) => s.submit(op),
        }
    }

    /// The oldest outstanding request's completion; `None` if nothing is outstanding.
    pub async fn next(&mut self) -> Option<Result<Done, String>> {
        match self {
            BenchSession::Strata(s) | BenchSession::Virtual(VirtualClients { session: s, .. }) => {
                let (_, r) = s.next().await?;
                Some(match r {
                    Ok(Outcome::Value(v)) if v.value.is_some() => Ok(Done::Hit),
                    Ok(Outcome::Value(_)) => Ok(Done::Miss),
                    Ok(Outcome::Written(_)) => Ok(Done::Written),
                    Ok(Outcome::Rmw(_)) => Ok(Done::Rmw),
                    Err(e) => Err(e.to_string()),
                })
            }
            BenchSession::Table(s) => {
                let r = match s.queued.pop_front()? {
                    BenchOp::Read { key } => {
                        // Leader-only tables: straight to the believed leader (a read sent
                        // elsewhere would come back `NotLeader` and cost a retry).
                        let read = if s.table.def().reads == strata_client::TableReads::Leader {
                            s.table.get(key).await
                        } else {
                            s.table.get_at(key, s.home).await
                        };
                        read.map(|r| if r.value.is_some() { Done::Hit } else { Done::Miss })
                    }
                    BenchOp::Write { key, value } | BenchOp::Insert { key, value } => {
                        s.table.put(key, value).await.map(|_| Done::Written)
                    }
                    _ => unreachable!("submit queues reads and writes only"),
                };
                Some(r.map_err(|e| e.to_string()))
            }
            BenchSession::Redis(s) => {
                let slot = s.in_flight.pop_front()?;
                Some(match resp::await_reply(slot, s.conn.addr()).await {
                    Ok(Reply::Bulk(Some(_))) => Ok(Done::Hit),
                    Ok(Reply::Bulk(None)) => Ok(Done::Miss),
                    Ok(Reply::Simple(_)) | Ok(Reply::Integer(_)) => Ok(Done::Written),
                    Ok(other) => Err(RedisError::Unexpected(format!("{other:?}")).to_string()),
                    Err(e) => Err(e.to_string()),
                })
            }
            BenchSession::Etcd(s) => s.next().await,
            BenchSession::Zookeeper(s) => s.next().await,
        }
    }
}
