//! Shard moves (rifl.md §5.7, `strata shard move`): a log-table shard's replica group is
//! replaced by a new one on other nodes, and its objects travel with their completion records,
//! watermarks and collected clients, so a retry sent after the move finds its record.
//!
//! A move is driven from outside (the client library's `Client::move_shard`, behind
//! `strata shard move`), in two steps, each idempotent so an interrupted move is finished by
//! running it again:
//!
//! 1. **Freeze** (steps 1-2), at the shard's leader: a `Freeze` entry naming the next
//!    generation and its replicas is appended and, once committed, durable at a majority and
//!    applied, the final state is returned. From that entry on the old group executes nothing
//!    and serves no read: writes and reads get `Moved { replicas }`, and a write a deposed
//!    leader appended after it applies as a no-op (`Kv::apply`). Writes in progress before it
//!    are finished by the log itself: their entries precede the freeze, so their effects and
//!    records are in the state.
//! 2. **Adopt** (steps 3-4), first at every node of the new group, then — only once all of
//!    them have — at every other node: a replica of the new group writes the state as the
//!    first entry `(E, 1)` of a fresh log (`RecoveredState::moved_in`, fsynced), records the
//!    placement in its catalog and starts the replica; every other node records the
//!    placement, retires its old replica (pending requests are answered `Moved`) and removes
//!    the old generation's directory. So the old group's copies are removed only after every
//!    new replica holds the state durably. Nodes answer requests for a shard they do not host with
//!    `Moved { replicas }`, and clients retry there with the same RPC ids.
//!
//! Generations keep the groups apart: peer messages carry theirs and a replica accepts only
//! its own, so a retired group can never disturb its successor even on a shared node.

use std::collections::BTreeSet;

use strata_core::Node;
use strata_log::{LogRequest, Persist, RecoveredState};
use strata_logstore::ShardStore;
use strata_rc::Route;
use strata_storage::{OsBackend, WalConfig};
use strata_wire::client::{ClientResponse, ErrorCode, LogFailure, Response};
use strata_wire::log::{ShardMove, Snapshot};
use strata_wire::NodeId;
use tokio::time::Instant as TokioInstant;
use tracing::{info, warn};

use super::{log_config, Outbox, Tables, SYSTEM_PREFIX};

fn invalid(message: String) -> Response {
    Response::Error { code: ErrorCode::InvalidArgument, message }
}

impl Tables {
    /// Checks a move's target: `(table id, the shard's placement now)` or the error to answer.
    #[allow(clippy::result_large_err)] // built once per admin request
    fn check_move(
        &self,
        table: &str,
        shard: u32,
        replicas: &[NodeId],
    ) -> Result<(u32, ShardMove), Response> {
        let t = self
            .tables
            .get(table)
            .ok_or_else(|| invalid(format!("no table named {table:?} on this node")))?;
        if table.starts_with(SYSTEM_PREFIX) {
            return Err(invalid(format!(
                "table {table:?} is a system table; its shards do not move"
            )));
        }
        if shard >= t.def.shards {
            return Err(invalid(format!(
                "table {table} has shards 0 to {}, not {shard}",
                t.def.shards - 1
            )));
        }
        let distinct: BTreeSet<NodeId> = replicas.iter().copied().collect();
        let unknown: Vec<String> =
            replicas.iter().filter(|n| !self.replicas.contains(n)).map(|n| n.to_string()).collect();
        if replicas.is_empty() || distinct.len() != replicas.len() || !unknown.is_empty() {
            let all: Vec<String> = self.replicas.iter().map(|n| n.to_string()).collect();
            return Err(invalid(format!(
                "a shard moves to one or more distinct nodes of the cluster ({}); got {replicas:?}",
                all.join(", ")
            )));
        }
        log_config(&t.def, replicas.len())
            .map_err(|e| invalid(format!("table {table} on {} node(s): {e}", replicas.len())))?;
        Ok((t.id, t.placement(shard, &self.replicas)))
    }

    /// `FreezeShard` (module docs, step 1). The answer comes through the outbox.
    #[allow(clippy::too_many_arguments)]
    pub fn freeze(
        &mut self,
        at: TokioInstant,
        route: Route,
        corr: u64,
        table: &str,
        shard: u32,
        mut replicas: Vec<NodeId>,
        out: &mut Outbox,
    ) {
        replicas.sort();
        let reply =
            |out: &mut Outbox, body| out.replies.push((route, ClientResponse { corr, body }));
        let (id, now_at) = match self.check_move(table, shard, &replicas) {
            Ok(x) => x,
            Err(body) => return reply(out, body),
        };
        let key = (id, shard);
        let Some(s) = self.shards.get_mut(&key) else {
            return reply(
                out,
                Response::LogRejected(LogFailure::Moved { replicas: now_at.replicas }),
            );
        };
        // Already there (a move run again after it finished): nothing to freeze or install.
        if now_at.replicas == replicas && s.replica.moved_to().is_none() {
            return reply(out, Response::ShardFrozen { placement: now_at, snapshot: None });
        }
        let to = ShardMove { generation: s.generation + 1, replicas };
        self.next_token += 1;
        let token = self.next_token;
        s.waiting.insert(token, (route, corr));
        let now = self.clock.now(at);
        s.replica.on_client_request(now, LogRequest::Freeze { token, to });
        self.drain(key, out);
    }

    /// `AdoptShard` (module docs, step 2). Synchronous file IO in the core task, as table
    /// creation: a move is a rare admin operation.
    pub fn adopt(
        &mut self,
        table: &str,
        shard: u32,
        mut placement: ShardMove,
        snapshot: Option<Snapshot>,
        out: &mut Outbox,
    ) -> Response {
        placement.replicas.sort();
        let (id, current) = match self.check_move(table, shard, &placement.replicas) {
            Ok(x) => x,
            Err(body) => return body,
        };
        let member = placement.replicas.contains(&self.me);
        if placement.generation == current.generation && placement.replicas == current.replicas {
            return Response::ShardAdopted { started: member };
        }
        if placement.generation <= current.generation {
            return invalid(format!(
                "table {table} shard {shard} is at generation {} on {:?}; generation {} is not newer",
                current.generation, current.replicas, placement.generation
            ));
        }
        let key = (id, shard);
        let t = self.tables.get(table).expect("checked");
        let def = t.def.clone();
        // 1. The new group's log, before the catalog names it (a crash in between leaves an
        //    unused directory, rewritten when the move is run again). A member adopting
        //    without the state (the move was run again after the new group had started
        //    without it) starts from an empty log: its leader sends it the `Install` entry,
        //    and it cannot win an election before it has it (its log is the shortest).
        let installed = snapshot.is_some() && member;
        if let Some(snapshot) = snapshot.filter(|_| member) {
            let dir = self.shard_dir(table, shard, placement.generation);
            if let Err(e) = write_moved_in(&dir, snapshot) {
                return Response::Error {
                    code: ErrorCode::Other(100),
                    message: format!("cannot write {}: {e}", dir.display()),
                };
            }
        }
        // 2. The catalog: from here on, a restart runs the new generation.
        let mut entry = t.catalogued();
        entry.moved.insert(shard, placement.clone());
        if let Err(e) = self.save_catalog_with(Some(&entry)) {
            return Response::Error {
                code: ErrorCode::Other(100),
                message: format!("cannot save the catalog: {e}"),
            };
        }
        self.tables.get_mut(table).expect("checked").moved.insert(shard, placement.clone());
        // 3. Retire the old replica: its waiting requests go to the new group.
        if let Some(mut old) = self.shards.remove(&key) {
            old.disk = None;
            if let Some(thread) = old.thread.take() {
                let _ = thread.join();
            }
            for (_, (route, corr)) in old.waiting.drain() {
                let body = Response::LogRejected(LogFailure::Moved {
                    replicas: placement.replicas.clone(),
                });
                out.replies.push((route, ClientResponse { corr, body }));
            }
            let dir = self.shard_dir(table, shard, old.generation);
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                warn!(table, shard, dir = %dir.display(), %e, "cannot remove a retired shard directory");
            }
        }
        info!(table, shard, generation = placement.generation, replicas = ?placement.replicas, member, "shard moved (adopted)");
        // 4. Start the new replica.
        if member {
            if let Err(e) = self.start_shard(&def, shard, &placement) {
                return Response::Error { code: ErrorCode::Other(100), message: e };
            }
            if installed {
                let now = self.clock.now(TokioInstant::now());
                let s = self.shards.get_mut(&key).expect("just started");
                s.replica.start_new_group(now, placement.replicas.first() == Some(&self.me));
                self.drain(key, out);
            }
        }
        Response::ShardAdopted { started: member }
    }
}

/// Writes a new group's first log entry into a fresh shard directory, fsynced.
fn write_moved_in(dir: &std::path::Path, snapshot: Snapshot) -> Result<(), String> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.to_string()),
    }
    let backend = OsBackend::open(dir).map_err(|e| e.to_string())?;
    let (mut store, _) = ShardStore::open(backend.clone(), backend, WalConfig::default())
        .map_err(|e| e.to_string())?;
    let state = RecoveredState::moved_in(snapshot);
    let batch = vec![
        (1, Persist::HardState(state.hard_state)),
        (2, Persist::Append(state.entries)),
        (3, Persist::Sync),
    ];
    match store.execute(batch).map_err(|e| e.to_string())? {
        Some(3) => Ok(()),
        other => Err(format!("the store did not confirm the install (token {other:?})")),
    }
}
