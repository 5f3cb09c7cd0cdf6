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
//!    them have — at every other node. At a node of the new group, three storage steps in
//!    order, each waiting for the one before:
//!    1. `Storage::Open` with the state to install: the runtime writes it as the first entry
//!       `(E, 1)` of a fresh log (`RecoveredState::moved_in`, fsynced) and reads it back;
//!    2. `Storage::Catalog` with the new placement: from here on, a restart runs the new
//!       generation (a crash before leaves an unused directory, rewritten when the move is
//!       run again);
//!    3. the old replica retires (pending requests are answered `Moved`; `Storage::Close`
//!       removes its directory) and the new one starts.
//!
//!    Every other node saves the placement and retires its old replica. So the old group's
//!    copies are removed only after every new replica holds the state durably. Nodes answer
//!    requests for a shard they do not host with `Moved { replicas }`, and clients retry there
//!    with the same RPC ids.
//!
//! Generations keep the groups apart: peer messages carry theirs and a replica accepts only
//! its own, so a retired group can never disturb its successor even on a shared node.

use std::collections::BTreeSet;

use strata_core::{Node, Route};
use strata_log::{LogRequest, RecoveredState};
use strata_wire::client::{ClientResponse, ErrorCode, LogFailure, Response};
use strata_wire::log::{ShardMove, Snapshot};
use strata_wire::{Instant, NodeId};
use tracing::info;

use crate::catalog::{log_config, SYSTEM_PREFIX};
use crate::effects::{HostEffects, ShardId, Storage};
use crate::shards::{Opening, Shards};

fn invalid(message: String) -> Response {
    Response::Error { code: ErrorCode::InvalidArgument, message }
}

/// An adoption under way at this node (module docs, step 2).
pub(crate) struct Adoption {
    pub table: String,
    /// The new replica group's id of the shard.
    pub new: ShardId,
    pub placement: ShardMove,
    /// This node is in the new group.
    pub member: bool,
    /// The state was installed (not a member re-adopting without it).
    pub installed: bool,
    /// The new replica's storage, read back (members, once opened).
    pub state: Option<RecoveredState>,
    pub route: Route,
    pub corr: u64,
}

impl Shards {
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
            replicas.iter().filter(|n| !self.nodes.contains(n)).map(|n| n.to_string()).collect();
        if replicas.is_empty() || distinct.len() != replicas.len() || !unknown.is_empty() {
            let all: Vec<String> = self.nodes.iter().map(|n| n.to_string()).collect();
            return Err(invalid(format!(
                "a shard moves to one or more distinct nodes of the cluster ({}); got {replicas:?}",
                all.join(", ")
            )));
        }
        log_config(&t.def, replicas.len())
            .map_err(|e| invalid(format!("table {table} on {} node(s): {e}", replicas.len())))?;
        Ok((t.id, t.placement(shard, &self.nodes)))
    }

    /// `FreezeShard` (module docs, step 1). The answer comes through `out`.
    #[allow(clippy::too_many_arguments)]
    pub fn freeze(
        &mut self,
        now: Instant,
        route: Route,
        corr: u64,
        table: &str,
        shard: u32,
        mut replicas: Vec<NodeId>,
        out: &mut HostEffects,
    ) {
        replicas.sort();
        let reply =
            |out: &mut HostEffects, body| out.reply.push((route, ClientResponse { corr, body }));
        let (id, now_at) = match self.check_move(table, shard, &replicas) {
            Ok(x) => x,
            Err(body) => return reply(out, body),
        };
        let key = (id, shard);
        let token = self.take_token();
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
        let to = ShardMove { generation: s.id.generation + 1, replicas };
        s.waiting.insert(token, (route, corr));
        s.replica.on_client_request(now, LogRequest::Freeze { token, to });
        self.drain(key, out);
    }

    /// `AdoptShard` (module docs, step 2): `Ok(reply)` when answered at once, `Err(adoption)`
    /// when storage steps follow (the caller tracks it: at most one catalog change at a time).
    #[allow(clippy::too_many_arguments, clippy::result_large_err)]
    pub fn adopt(
        &mut self,
        route: Route,
        corr: u64,
        table: &str,
        shard: u32,
        mut placement: ShardMove,
        snapshot: Option<Snapshot>,
        out: &mut HostEffects,
    ) -> Result<Response, Adoption> {
        placement.replicas.sort();
        let (id, current) = match self.check_move(table, shard, &placement.replicas) {
            Ok(x) => x,
            Err(body) => return Ok(body),
        };
        let member = placement.replicas.contains(&self.me);
        if placement.generation == current.generation && placement.replicas == current.replicas {
            return Ok(Response::ShardAdopted { started: member });
        }
        if placement.generation <= current.generation {
            return Ok(invalid(format!(
                "table {table} shard {shard} is at generation {} on {:?}; generation {} is not newer",
                current.generation, current.replicas, placement.generation
            )));
        }
        let new = ShardId { table: id, shard, generation: placement.generation };
        // A member adopting without the state (the move was run again after the new group had
        // started without it) starts from an empty log: its leader sends it the `Install`
        // entry, and it cannot win an election before it has it (its log is the shortest).
        let install = snapshot.filter(|_| member).map(Box::new);
        let adoption = Adoption {
            table: table.to_string(),
            new,
            placement,
            member,
            installed: install.is_some(),
            state: None,
            route,
            corr,
        };
        if member {
            self.open(new, table, install, Opening::Adopt, out);
        }
        Err(adoption)
    }

    /// Step 2.3, once the catalog names the new placement: retire the old replica, start the
    /// new one. Returns the answer to the `AdoptShard`.
    pub fn finish_adopt(&mut self, now: Instant, a: Adoption, out: &mut HostEffects) -> Response {
        let key = a.new.key();
        self.tables
            .get_mut(&a.table)
            .expect("a table does not go away")
            .moved
            .insert(key.1, a.placement.clone());
        if let Some(mut old) = self.shards.remove(&key) {
            for (route, corr) in std::mem::take(&mut old.waiting).into_values() {
                let body = Response::LogRejected(LogFailure::Moved {
                    replicas: a.placement.replicas.clone(),
                });
                out.reply.push((route, ClientResponse { corr, body }));
            }
            out.storage.push(Storage::Close {
                shard: old.id,
                table: a.table.clone(),
                remove: true,
            });
            // The retired replica's EI sharers (kairos.md §5.14.2) hear that no invalidation
            // of their entries will come from here any more, as when a leader steps down.
            self.sharers.drop_shard(&a.table, key, out);
        }
        info!(table = %a.table, shard = key.1, generation = a.new.generation, replicas = ?a.placement.replicas, member = a.member, "shard moved (adopted)");
        if let Some(state) = a.state {
            if let Err(e) = self.start_replica(now, a.new, &a.placement, state, false, out) {
                return Response::Error { code: ErrorCode::Other(100), message: e };
            }
            if a.installed {
                let s = self.shards.get_mut(&key).expect("just started");
                s.replica.start_new_group(now, a.placement.replicas.first() == Some(&self.me));
                self.drain(key, out);
            }
        }
        Response::ShardAdopted { started: a.member }
    }
}
