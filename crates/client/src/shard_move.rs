//! `Client::move_shard`: moves a log-table shard to other nodes (rifl.md §5.7), driving the
//! two idempotent steps the nodes implement (`crates/node/src/tables/moves.rs`): freeze at the
//! shard's leader, then adopt at every node. Running it again after an interruption finishes
//! the move; running it after the move finished only re-announces the placement.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use strata_wire::client::{LogFailure, Request, Response};
use strata_wire::log::{ShardMove, Snapshot};
use strata_wire::NodeId;

use crate::client::Client;
use crate::error::ClientError;
use crate::session::unexpected;

/// How long the freeze may take by default (elections, a slow majority) before giving up.
const DEFAULT_FREEZE_FOR: Duration = Duration::from_secs(30);
const RETRY_BACKOFF: Duration = Duration::from_millis(20);

/// What a finished move did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoveReport {
    /// Where the shard lives now: its generation and replicas.
    pub placement: ShardMove,
    /// `None` if the shard already lived there (nothing was frozen or installed).
    pub moved: Option<MovedState>,
}

/// Faults a test can plant in a move ([`Client::move_shard_planted`]).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MovePlant {
    /// The canary: the state travels without its completion records and watermarks
    /// (rifl.md §5.7 broken), so a retry after the move executes again.
    LoseRecords,
    /// The canary of the Kairos move tests: the state travels without its validator state
    /// (each key's `latest_read`, `latest_committed` and prepared write, and `ts_GC`), so the
    /// new group validates against keys it believes never written or read.
    LoseKairos,
    /// The move is interrupted at this node: it is not told to adopt (as if unreachable).
    SkipNode(NodeId),
}

/// The size of the state that moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MovedState {
    /// Keys, deleted ones (tombstones) included.
    pub keys: usize,
    /// Clients with a watermark or completion records in the shard.
    pub clients: usize,
    /// Completion records of unacknowledged writes (answers to retries).
    pub records: usize,
    /// Keys with Kairos validator state (`latest_read`, `latest_committed`, a prepared
    /// write): a Kairos table's shard, or one of its `T.validators`, whose keys have no value.
    pub kairos_keys: usize,
}

/// The state a new replica installs: the frozen one, less what `plant` loses.
fn planted(mut s: Snapshot, plant: Option<MovePlant>) -> Snapshot {
    match plant {
        Some(MovePlant::LoseRecords) => s.clients.clear(),
        Some(MovePlant::LoseKairos) => {
            s.kairos.clear();
            s.kairos_ts_gc = strata_wire::txn::Timestamp::ZERO;
        }
        Some(MovePlant::SkipNode(_)) | None => {}
    }
    s
}

impl MovedState {
    fn of(s: &Snapshot) -> MovedState {
        MovedState {
            keys: s.items.len(),
            clients: s.clients.len(),
            records: s.clients.iter().map(|c| c.records.len()).sum(),
            kairos_keys: s.kairos.len(),
        }
    }
}

impl Client {
    /// Moves shard `shard` of log table `table` to the nodes `replicas` (module docs). Every
    /// node of the client's endpoints must answer (each records the placement: the catalog is
    /// per node); the error names those that did not, and running the move again finishes it.
    pub async fn move_shard(
        &self,
        table: &str,
        shard: u32,
        replicas: Vec<NodeId>,
    ) -> Result<MoveReport, ClientError> {
        self.move_shard_planted(table, shard, replicas, None).await
    }

    /// A move with a planted fault, for the move tests (`crates/cli/tests/shard_move.rs`).
    /// Never use it on data you care about.
    #[doc(hidden)]
    pub async fn move_shard_planted(
        &self,
        table: &str,
        shard: u32,
        replicas: Vec<NodeId>,
        plant: Option<MovePlant>,
    ) -> Result<MoveReport, ClientError> {
        let opts = self.options().clone();
        let mut nodes: Vec<(SocketAddr, NodeId, Client)> = Vec::new();
        for &addr in self.endpoints() {
            // Every node records the placement (the catalog is per node): refuse before
            // freezing anything if one is down.
            let status = match Client::connect_node(addr, opts.clone()).await {
                Ok(c) => c.status().await.map(|s| (c, s)),
                Err(e) => Err(e),
            };
            let (c, s) = status.map_err(|e| {
                ClientError::InvalidArgument(format!(
                    "node {addr} does not answer ({e}); a shard move needs every node up"
                ))
            })?;
            nodes.push((addr, s.node, c));
        }
        let by_id = |id: NodeId| nodes.iter().position(|(_, n, _)| *n == id);
        for r in &replicas {
            if by_id(*r).is_none() {
                let known: Vec<String> = nodes.iter().map(|(_, n, _)| n.to_string()).collect();
                return Err(ClientError::InvalidArgument(format!(
                    "{r} is not a node of this cluster ({})",
                    known.join(", ")
                )));
            }
        }
        // Step 1: freeze, at the leader of the shard's current group.
        let deadline = Instant::now() + opts.request_timeout.unwrap_or(DEFAULT_FREEZE_FOR);
        let mut target = 0;
        let mut tries = 0usize;
        let (placement, snapshot) = loop {
            tries += 1;
            let req = Request::FreezeShard {
                table: table.to_string(),
                shard,
                replicas: replicas.clone(),
            };
            let conn = nodes[target].2.connection().await;
            let answer = match conn {
                Ok(c) => c.call(req, Some(Duration::from_secs(10))).await,
                Err(e) => Err(e),
            };
            let next = (target + 1) % nodes.len();
            let last = match answer {
                Ok(Response::ShardFrozen { placement, snapshot }) => break (placement, snapshot),
                Ok(Response::LogRejected(LogFailure::NotLeader { hint })) => {
                    target = hint.and_then(by_id).filter(|&h| h != target).unwrap_or(next);
                    "not the leader".to_string()
                }
                Ok(Response::LogRejected(LogFailure::Moved { replicas: at })) => {
                    target =
                        at.get(tries % at.len().max(1)).and_then(|&n| by_id(n)).unwrap_or(next);
                    format!("the shard is at {at:?}")
                }
                Ok(Response::LogRejected(LogFailure::Invalid(m))) => {
                    return Err(ClientError::InvalidArgument(m))
                }
                // A retired group's replica that lost its majority stays unavailable: any other
                // node redirects to where the shard is.
                Ok(Response::LogRejected(
                    f
                    @ (LogFailure::Unavailable | LogFailure::Timeout | LogFailure::NotInActiveSet),
                )) => {
                    if tries.is_multiple_of(3) {
                        target = next;
                    }
                    format!("{f:?}")
                }
                Ok(other) => return Err(unexpected(other)),
                Err(
                    e @ (ClientError::ConnectionLost { .. }
                    | ClientError::Unreachable { .. }
                    | ClientError::TimedOut(_)),
                ) => {
                    target = next;
                    e.to_string()
                }
                Err(e) => return Err(e),
            };
            if Instant::now() >= deadline {
                return Err(ClientError::TableUnavailable {
                    table: table.to_string(),
                    last: format!("freezing shard {shard}: {last}"),
                    waited: opts.request_timeout.unwrap_or(DEFAULT_FREEZE_FOR),
                });
            }
            tokio::time::sleep(RETRY_BACKOFF).await;
        };
        // Step 2: the new replicas install the state; only once all of them have, the other
        // nodes retire their copies (so a failed install never leaves the state nowhere).
        let call_timeout = opts.request_timeout.unwrap_or(DEFAULT_FREEZE_FOR);
        for members in [true, false] {
            let mut failed = Vec::new();
            // The nodes of a phase adopt concurrently: a large state is written and fsynced
            // at every new replica at once.
            let mut calls = tokio::task::JoinSet::new();
            for (addr, id, c) in
                nodes.iter().filter(|(_, id, _)| placement.replicas.contains(id) == members)
            {
                if plant == Some(MovePlant::SkipNode(*id)) {
                    failed.push(format!("{id} ({addr}): skipped (planted)"));
                    continue;
                }
                let req = Request::AdoptShard {
                    table: table.to_string(),
                    shard,
                    placement: placement.clone(),
                    snapshot: snapshot.clone().filter(|_| members).map(|s| planted(s, plant)),
                };
                let conn = c.connection().await;
                let (addr, id) = (*addr, *id);
                calls.spawn(async move {
                    let answer = match conn {
                        Ok(conn) => conn.call(req, Some(call_timeout)).await,
                        Err(e) => Err(e),
                    };
                    (addr, id, answer)
                });
            }
            while let Some(done) = calls.join_next().await {
                let (addr, id, answer) = done.expect("an adopt call does not panic");
                match answer {
                    Ok(Response::ShardAdopted { .. }) => {}
                    Ok(other) => failed.push(format!("{id} ({addr}): {}", unexpected(other))),
                    Err(e) => failed.push(format!("{id} ({addr}): {e}")),
                }
            }
            if !failed.is_empty() {
                let which = if members {
                    "installed at every new replica"
                } else {
                    "announced to every other node"
                };
                return Err(ClientError::Protocol {
                    code: strata_wire::client::ErrorCode::Other(101),
                    message: format!(
                        "table {table} shard {shard} is frozen for generation {} but not {which} (run the move again when they are up): {}",
                        placement.generation,
                        failed.join("; ")
                    ),
                });
            }
        }
        Ok(MoveReport { moved: snapshot.as_ref().map(MovedState::of), placement })
    }
}
