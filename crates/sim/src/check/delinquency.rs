//! Delinquency bits and `self_delinquent` (Kite §7 inv. 15 and 16), from the cores' reports of
//! every change (`History::dbits`, `History::self_delinquency`), the `RESET_BIT`s on the wire,
//! and the machine epochs sampled after every step (`History::epochs`).

use std::collections::{BTreeMap, HashMap, HashSet};

use strata_wire::{AcquireId, NodeId, SessionId};

use super::Violation;
use crate::history::{
    DbitChange, DbitSeen, EpochBump, History, ResetBitSeen, SelfDelinquentChange,
};

/// Kite §7 inv. 15 (reset safety): a `dbit[m]` goes from `Down`/`Transient` to `Up` only
/// through a `RESET_BIT { acq }` from `m` whose `acq` is a recorded owner of the bit (§5.7.5:
/// no `SLOW_RELEASE` naming `m` came in between, §5.1.4), and `m` had incremented its machine
/// epoch for that acquire before sending it (§5.1.5, §5.8 E5). The bit is rebuilt from the
/// recorded changes — `Down` discards the owners, an observing acquire adds itself — rather than
/// taken from the core's own account; the increment must show in the sampled epoch.
pub fn reset_safety(h: &History) -> Vec<Violation> {
    let evidence = ResetEvidence::new(h);
    // `(node, peer)` -> the owners of a bit that is not up (`Down` has none); absent = `Up`.
    let mut bits: HashMap<(NodeId, NodeId), BTreeMap<SessionId, u64>> = HashMap::new();
    let mut out = Vec::new();
    for d in &h.dbits {
        let bit = (d.node, d.peer);
        match &d.change {
            DbitChange::Down { .. } => {
                bits.insert(bit, BTreeMap::new());
            }
            DbitChange::Owner { acq } => {
                bits.entry(bit).or_default().insert(acq.session, acq.seq);
            }
            DbitChange::Up { acq, .. } => {
                let owners = bits.remove(&bit);
                let problem = evidence.why_unsafe(d, *acq, owners.as_ref());
                out.extend(problem.map(|p| Violation {
                    checker: "reset-safety",
                    at: Some(d.at),
                    detail: format!(
                        "{} set dbit[{}] back to up for acquire {}, but {p}",
                        d.node,
                        d.peer,
                        fmt_acq(*acq)
                    ),
                }));
            }
        }
    }
    out
}

/// What makes a reset legitimate besides the bit's owners: the `RESET_BIT` on the wire, and the
/// epoch increment before it (reported by the core, and seen in the sampled epoch).
struct ResetEvidence<'h> {
    resets: HashMap<AcquireId, &'h ResetBitSeen>,
    bumps: HashMap<AcquireId, &'h EpochBump>,
    epoch_steps: HashSet<(NodeId, u64)>,
}

impl<'h> ResetEvidence<'h> {
    fn new(h: &'h History) -> ResetEvidence<'h> {
        ResetEvidence {
            resets: h.reset_bits.iter().map(|r| (r.acq, r)).collect(),
            bumps: h.epoch_bumps.iter().map(|b| (b.acq, b)).collect(),
            epoch_steps: epoch_steps(h),
        }
    }

    /// Why the reset `d` by acquire `acq` of a bit with `owners` (`None`: up) was unsafe, if it was.
    fn why_unsafe(
        &self,
        d: &DbitSeen,
        acq: AcquireId,
        owners: Option<&BTreeMap<SessionId, u64>>,
    ) -> Option<String> {
        let Some(owners) = owners else { return Some("the bit was already up".into()) };
        if owners.get(&acq.session) != Some(&acq.seq) {
            return Some(if owners.is_empty() {
                "the bit was down: no acquire had observed it since the last DM-set naming the peer (§5.7.5)".into()
            } else {
                let owners: Vec<String> = owners
                    .iter()
                    .map(|(&session, &seq)| fmt_acq(AcquireId { session, seq }))
                    .collect();
                format!("it is not a recorded owner (owners [{}]; §5.7.5)", owners.join(", "))
            });
        }
        if acq.session.node != d.peer {
            return Some(format!("the acquire is not {}'s", d.peer));
        }
        let Some(reset) = self.resets.get(&acq).filter(|r| r.from == d.peer && r.seq < d.seq)
        else {
            return Some(format!("{} never sent that RESET_BIT", d.peer));
        };
        match self.bumps.get(&acq) {
            Some(b) if b.node == d.peer && b.seq < reset.seq && self.epoch_steps.contains(&(b.node, b.step)) => None,
            Some(b) if b.node == d.peer && b.seq < reset.seq => {
                Some(format!("{} reported an epoch increment to {} its machine epoch does not show", b.node, b.epoch))
            }
            _ => Some(format!("{} sent the RESET_BIT without first incrementing its machine epoch for it (§5.8 E5)", d.peer)),
        }
    }
}

/// Kite §7 inv. 16: `self_delinquent` is cleared only in the same atomic step (one input of the
/// core) as an increment of the node's machine epoch (§5.1.5, K-D3) — the increment as sampled
/// after the step, not as the core reports it.
pub fn self_delinquency(h: &History) -> Vec<Violation> {
    let epoch_steps = epoch_steps(h);
    h.self_delinquency
        .iter()
        .filter_map(|s| match s.change {
            SelfDelinquentChange::Cleared { acq } if !epoch_steps.contains(&(s.node, s.step)) => Some(Violation {
                checker: "self-delinquency",
                at: Some(s.at),
                detail: format!(
                    "{} cleared self_delinquent for acquire {} without incrementing its machine epoch in that step",
                    s.node,
                    fmt_acq(acq)
                ),
            }),
            _ => None,
        })
        .collect()
}

/// The steps in which each node's machine epoch changed: `(node, step)`.
fn epoch_steps(h: &History) -> HashSet<(NodeId, u64)> {
    h.epochs.iter().map(|e| (e.node, e.step)).collect()
}

/// `n4/s1#2`: acquire number 2 of session `n4/s1`, for reports.
fn fmt_acq(acq: AcquireId) -> String {
    format!("{}#{}", acq.session, acq.seq)
}
