//! Transactions at the client edge of a node (rifl.md §4.3, §5.8): a client's `TxnPrepare` and
//! `TxnDecide` are checked like any client input (issue #17: a transaction request is no more
//! trusted than a write) and routed to the participant shard's replica, whose leader turns
//! them into log entries (`strata_log`'s `txn.rs`).

use strata_core::Route;
use strata_log::LogRequest;
use strata_wire::client::{
    shard_of, validators_table, ClientResponse, ErrorCode, Response, TableTxn, TableValidation,
};
use strata_wire::rifl::WINDOW;
use strata_wire::txn::{
    Decision, KairosPrepare, KairosRole, Prepare, TxnAction, TxnId, TxnObject, TxnOp,
};
use strata_wire::{Instant, Rifl};

use crate::catalog::SYSTEM_PREFIX;
use crate::effects::{HostEffects, ShardKey};
use crate::shards::Shards;

/// Why a transaction request is refused: the error code and message of its `Response::Error`.
type Refusal = (ErrorCode, String);

fn refuse(route: Route, corr: u64, (code, message): Refusal, out: &mut HostEffects) {
    out.reply.push((route, ClientResponse { corr, body: Response::Error { code, message } }));
}

/// What a transaction request names, checked.
struct Checked {
    sk: ShardKey,
    rifl: Rifl,
}

/// The body of a client's `TxnPrepare`.
pub struct PrepareReq {
    pub read_only: bool,
    pub all: Vec<TxnObject>,
    pub ops: Vec<TxnOp>,
    pub kairos: Option<KairosPrepare>,
}

impl Shards {
    /// A client's `TxnPrepare`; the reply comes through `out` (now or later).
    #[allow(clippy::too_many_arguments)]
    pub fn on_txn_prepare(
        &mut self,
        now: Instant,
        route: Route,
        corr: u64,
        rifl: Option<Rifl>,
        table: &str,
        shard: u32,
        req: PrepareReq,
        out: &mut HostEffects,
    ) {
        let PrepareReq { read_only, all, ops, kairos } = req;
        let checked = self
            .check_txn_request(rifl, table, shard)
            .and_then(|c| self.check_prepare(table, shard, &c.rifl, &all, &ops).map(|()| c))
            .and_then(|c| self.check_kairos(table, &ops, kairos.as_ref()).map(|()| c));
        let c = match checked {
            Ok(c) => c,
            Err(r) => return refuse(route, corr, r, out),
        };
        let txn = TxnId { client_id: c.rifl.rpc.client_id, base: c.rifl.rpc.seq };
        let whole = ops.len() == all.len();
        let prepare = Prepare { txn, all, ops, whole, kairos };
        let token = self.take_token();
        let req = LogRequest::Prepare { token, rifl: c.rifl, prepare, read_only };
        self.request(now, c.sk, route, corr, req, out);
    }

    /// A client's `TxnDecide`.
    #[allow(clippy::too_many_arguments)]
    pub fn on_txn_decide(
        &mut self,
        now: Instant,
        route: Route,
        corr: u64,
        rifl: Option<Rifl>,
        table: &str,
        shard: u32,
        decision: Decision,
        seqs: Vec<u64>,
        out: &mut HostEffects,
    ) {
        let c = match self.check_txn_request(rifl, table, shard) {
            Ok(c) => c,
            Err(r) => return refuse(route, corr, r, out),
        };
        let base = c.rifl.rpc.seq;
        if seqs.is_empty() || seqs.iter().any(|&s| s <= base || s - base >= WINDOW) {
            let r = invalid("a decision names objects of its transaction's block");
            return refuse(route, corr, r, out);
        }
        let txn = TxnId { client_id: c.rifl.rpc.client_id, base };
        let token = self.take_token();
        self.request(
            now,
            c.sk,
            route,
            corr,
            LogRequest::Decide { token, txn, decision, seqs },
            out,
        );
    }

    fn check_txn_request(
        &self,
        rifl: Option<Rifl>,
        table: &str,
        shard: u32,
    ) -> Result<Checked, Refusal> {
        let Some(rifl) = rifl else {
            let why = "a transaction request needs RIFL's envelope (its client and block)";
            return Err((ErrorCode::BadEnvelope, why.to_string()));
        };
        if table.starts_with(SYSTEM_PREFIX) {
            return Err(invalid(format!("table {table:?} is a system table")));
        }
        let Some(t) = self.tables.get(table) else {
            return Err(invalid(format!("no table named {table:?} on this node")));
        };
        if t.def.txn == TableTxn::None {
            return Err(invalid(format!(
                "table {table:?} does not take transactions (create it with --txn rifl or --txn kairos)"
            )));
        }
        if shard >= t.def.shards {
            return Err(invalid(format!("table {table:?} has no shard {shard}")));
        }
        Ok(Checked { sk: (t.id, shard), rifl })
    }

    /// §4.3: `all` names every object once, in `(table, key)` order, each under its own id of
    /// the block after the envelope's; every op is one of them, in this shard.
    fn check_prepare(
        &self,
        table: &str,
        shard: u32,
        rifl: &Rifl,
        all: &[TxnObject],
        ops: &[TxnOp],
    ) -> Result<(), Refusal> {
        let base = rifl.rpc.seq;
        let shards = self.tables.get(table).map_or(1, |t| t.def.shards);
        if all.is_empty() || ops.is_empty() || all.len() >= WINDOW as usize {
            return Err(invalid(format!(
                "a transaction has 1 to {} objects and a prepare at least one",
                WINDOW - 1
            )));
        }
        let ordered = all.windows(2).all(|w| (&w[0].table, &w[0].key) < (&w[1].table, &w[1].key));
        let ids = all.iter().enumerate().all(|(i, o)| o.seq == base + 1 + i as u64);
        if !ordered || !ids {
            return Err(invalid(
                "the objects must be sorted by (table, key), distinct, and numbered base+1, base+2, ...",
            ));
        }
        for op in ops {
            self.limits.check_key(&op.key).map_err(|e| invalid(format!("table {table}: {e}")))?;
            if let TxnAction::Write(v) = &op.action {
                self.limits.check_value(v).map_err(|e| invalid(format!("table {table}: {e}")))?;
            }
            let listed = all.iter().any(|o| o.table == table && o.key == op.key && o.seq == op.seq);
            if !listed || shard_of(&op.key, shards) != shard {
                return Err(invalid(
                    "every prepared object is listed among all objects, in the prepare's shard",
                ));
            }
        }
        Ok(())
    }
}

impl Shards {
    /// A Kairos table's prepare carries its timestamps and one read version slot per op
    /// (kairos.md §4 `PrepareReq`); a RIFL table's carries none. Its role is the table's: a
    /// server-side table validates and holds values (`Full`), a sharded table's validator
    /// table validates (`Validate`, §4 `ValidateReq`), its data table only replicates writes
    /// (`Replicate`, §4 `ReplicateReq`: no reads, no read versions). Any other role would
    /// skip validation, or validate where nothing decides the keys' versions.
    fn check_kairos(
        &self,
        table: &str,
        ops: &[TxnOp],
        kairos: Option<&KairosPrepare>,
    ) -> Result<(), Refusal> {
        let def = self.tables.get(table).map(|t| &t.def);
        let is_kairos = def.is_some_and(|d| d.txn == TableTxn::Kairos);
        let role = match def.map(|d| d.validation) {
            Some(TableValidation::Sharded(_)) => KairosRole::Replicate,
            Some(TableValidation::Validators) => KairosRole::Validate,
            _ => KairosRole::Full,
        };
        match kairos {
            None if is_kairos => Err(invalid(format!(
                "table {table:?} is a kairos table: a prepare carries the transaction's commit timestamp and the versions read (update the client)"
            ))),
            Some(_) if !is_kairos => Err(invalid(format!(
                "table {table:?} is not a kairos table: a prepare carries no timestamps"
            ))),
            Some(k) if k.read_vts.len() != ops.len() => {
                Err(invalid("a kairos prepare names one read version slot per op"))
            }
            Some(k) if k.role != role => Err(invalid(format!(
                "table {table:?} takes {role:?} kairos prepares, not {:?}",
                k.role
            ))),
            Some(k)
                if role == KairosRole::Replicate
                    && (k.read_vts.iter().any(Option::is_some)
                        || ops.iter().any(|o| o.action == TxnAction::Read)) =>
            {
                Err(invalid(format!(
                    "table {table:?} validates in {}: its prepares carry writes only",
                    validators_table(table)
                )))
            }
            _ => Ok(()),
        }
    }
}

fn invalid(message: impl Into<String>) -> Refusal {
    (ErrorCode::InvalidArgument, message.into())
}
