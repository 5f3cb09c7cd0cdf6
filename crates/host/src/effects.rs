//! What the host core asks its runtime to do, drained after every input.

use strata_core::Route;
use strata_log::{LogEvent, Persist};
use strata_rc::RcEvent;
use strata_wire::client::{ClientResponse, LinkFault};
use strata_wire::log::Snapshot;
use strata_wire::peer::PeerMessage;
use strata_wire::NodeId;

/// One replica of one shard: `generation` tells the replica groups of a moved shard apart
/// (rifl.md §5.7), so a retired replica's late disk report never reaches its successor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShardId {
    /// The table's id (`TableDef::id`, a hash of its name).
    pub table: u32,
    pub shard: u32,
    pub generation: u32,
}

impl ShardId {
    /// The shard regardless of its replica group.
    pub fn key(self) -> ShardKey {
        (self.table, self.shard)
    }
}

/// A shard regardless of its replica group: `(table id, shard)`.
pub type ShardKey = (u32, u32);

/// A storage request, tagged by its owner (a shard replica's log, or the catalog). The rc
/// engine keeps no durable state (Kite §6), so it has none. Each request is answered by an
/// input, in the order the runtime completes it.
#[derive(Debug)]
pub enum Storage {
    /// Open the replica's storage and read it back: answer [`crate::Host::on_shard_opened`].
    /// With `install`, first replace whatever is there with a fresh log whose first entry is
    /// the moved-in state (`strata_log::RecoveredState::moved_in`), fsynced (rifl.md §5.7
    /// step 3). `table` names the directory.
    Open { shard: ShardId, table: String, install: Option<Box<Snapshot>> },
    /// The replica's `Persist` records, in token order (ORCA §9.6: appends stay buffered until
    /// a `Sync`): answer [`crate::Host::on_shard_persisted`] with the highest `Sync` or
    /// `HardState` token made durable, or [`crate::Host::on_shard_failed`].
    Log { shard: ShardId, records: Vec<(u64, Persist)> },
    /// Close the replica's storage (unsynced appends are dropped, as in a crash); with
    /// `remove`, delete it: a retired generation after a move. No answer.
    Close { shard: ShardId, table: String, remove: bool },
    /// Replace the stored catalog durably and atomically (a crash leaves the old one or the
    /// new one): answer [`crate::Host::on_catalog_saved`] with `token`.
    Catalog { token: u64, bytes: Vec<u8> },
}

/// Everything the host wants done (`DESIGN.md`, "The sans-IO contract"), in one type: the
/// runtime and the simulator each execute it in exactly one place.
#[derive(Debug, Default)]
pub struct HostEffects {
    /// Peer messages, in order per destination.
    pub send: Vec<(NodeId, PeerMessage)>,
    /// Replies to client connections, in the order they must be written per connection.
    pub reply: Vec<(Route, ClientResponse)>,
    pub storage: Vec<Storage>,
    /// Link faults to set on the transport (`strata fault`): `None` means every peer.
    pub fault: Vec<(Option<NodeId>, LinkFault)>,
    /// The parts' audit events, in the order they happened, for the simulator's checkers;
    /// only with `HostConfig::audit` (a server leaves it off and pays nothing).
    pub audit: Vec<Audit>,
}

/// An audit event, tagged by the part that emitted it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Audit {
    /// The rc replica's (Kite §7 inv. 14 - 17 and version creations).
    Rc(RcEvent),
    /// A log-shard replica's (ORCA §7's audit log), tagged with its table and shard; the
    /// simulator's ORCA harness judges them with the §7 checkers.
    Log { table: String, shard: u32, event: LogEvent },
}

impl HostEffects {
    pub fn is_empty(&self) -> bool {
        self.send.is_empty()
            && self.reply.is_empty()
            && self.storage.is_empty()
            && self.fault.is_empty()
            && self.audit.is_empty()
    }

    /// Moves everything into `out`, keeping this buffer's capacity for reuse.
    pub fn move_into(&mut self, out: &mut HostEffects) {
        out.send.append(&mut self.send);
        out.reply.append(&mut self.reply);
        out.storage.append(&mut self.storage);
        out.fault.append(&mut self.fault);
        out.audit.append(&mut self.audit);
    }
}
