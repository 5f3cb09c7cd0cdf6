//! The objects of a Kairos transaction over a table with sharded validators
//! (`--validation sharded:V`, kairos.md §1.3 "CV", §4, §5.4 – §5.7): Algorithm 2's commit
//! sends one `ValidateReq` per validator and one `ReplicateReq` per primary of a written key.
//! In Strata both are RIFL objects of the one transaction — same block of ids, same parallel
//! round of prepares, `Commit` iff every vote is `Prepared`, same decisions and recovery:
//!
//! * one **validator object** per key read or written, in the table's companion validator
//!   table (`T.validators`, whose shard of a key is `hash(key) mod V`): `Read` for a key only
//!   read, `Delete` as Algorithm 3's "will write" flag for a written one (the validator keeps
//!   no values, so the object carries none); its prepare carries the `vts` read;
//! * one **data object** per key written, in the table itself: the write, replicated and
//!   locked by the key's shard without validation.
//!
//! A read-only transaction therefore touches only validators.

use std::collections::BTreeMap;

use bytes::Bytes;
use strata_wire::client::{validated_table, validators_table, TableDef, TableValidation};
use strata_wire::log::Expect;
use strata_wire::txn::{KairosRole, Timestamp, TxnAction};

use crate::client::Client;
use crate::error::ClientError;

/// A transaction's objects by `(table, key)`: the action and the version expected.
pub(crate) type Objects = BTreeMap<(String, Bytes), (TxnAction, Option<Expect>)>;

/// The objects of a Kairos transaction: those of tables validated in their shards as they
/// are, those of sharded tables replaced by their validator and data objects (module doc).
pub(crate) async fn kairos_objects(
    client: &Client,
    objects: Objects,
) -> Result<Objects, ClientError> {
    let mut out = Objects::new();
    for ((table, key), (action, _)) in objects {
        let def = client.txn_def(&table).await?;
        if !matches!(def.validation, TableValidation::Sharded(_)) {
            out.insert((table, key), (action, None));
            continue;
        }
        let will_write = action != TxnAction::Read;
        let flag = if will_write { TxnAction::Delete } else { TxnAction::Read };
        out.insert((validators_table(&table), key.clone()), (flag, None));
        if will_write {
            out.insert((table, key), (action, None));
        }
    }
    Ok(out)
}

/// A participant's role in a Kairos prepare (its table's) and the table whose reads its
/// ops' read versions come from (`None`: it carries none).
pub(crate) fn part_role(def: &TableDef) -> (KairosRole, Option<&str>) {
    match def.validation {
        TableValidation::Server => (KairosRole::Full, Some(def.name.as_str())),
        TableValidation::Validators => (KairosRole::Validate, validated_table(&def.name)),
        TableValidation::Sharded(_) => (KairosRole::Replicate, None),
    }
}

/// The read version slots of a part's ops (kairos.md §4 `ValidateReq.reads`): the `vts`
/// each key was read at in `reads_from`, `None` for a key not read there (a blind write).
pub(crate) fn read_vts<'a>(
    keys: impl Iterator<Item = &'a Bytes>,
    reads_from: Option<&str>,
    vts_of: impl Fn(&str, &Bytes) -> Option<Timestamp>,
) -> Vec<Option<Timestamp>> {
    keys.map(|k| reads_from.and_then(|t| vts_of(t, k))).collect()
}
