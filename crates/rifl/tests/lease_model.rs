//! A model of RIFL's leases end to end (`specs/rifl.md` §5.5, §5.6, §7 inv. 9): the lease
//! service on a log that loses uncommitted commands at every leader change, clients that renew
//! (and sometimes pause for up to three terms), and storage nodes that check every RPC with a
//! `LeaseValidator`. Time, delays and faults come from a seeded generator, so a failing seed
//! replays exactly.
//!
//! Checked on every seed (§7 inv. 9):
//! * a lease id is never granted to two clients;
//! * cluster times handed out never decrease, across leader changes;
//! * once the service has told a node that a client's lease expired (the node then collects
//!   the client's records), that node never runs an RPC of the client again, and the service
//!   never reports the client alive again, to any node.
//!
//! The log commits in order: at a leader change a prefix of the uncommitted commands commits
//! and the rest is lost.
//!
//! The canaries plant the two ways of getting this wrong that the code guards against (an
//! expiry reported before its `Drop` is durable; a new leader's clock restarting from zero):
//! each must be caught on some seeds, while the correct service passes every seed.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use strata_rifl::{
    ClientLease, LeaseCanary, LeaseCheck, LeaseCommand, LeaseService, LeaseValidator, Renewal,
    RiflConfig,
};
use strata_wire::rifl::ClusterTime;
use strata_wire::Instant;

/// xorshift64*: enough randomness for a model, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

const STEP_MS: u64 = 50;
const NODES: usize = 2;
const CLIENTS: usize = 4;

struct Client {
    lease: ClientLease,
    /// A renewal waiting for its new lease's `Create` to commit.
    creating: Option<u64>,
    paused_until: u64,
}

fn ms(v: u64) -> Instant {
    Instant::from_millis(v)
}

/// Runs one seed; `Err` names the first violated rule.
fn run(seed: u64, canary: Option<LeaseCanary>, leader_change_per_mille: u64) -> Result<(), String> {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let config = RiflConfig {
        lease_term: Duration::from_secs(2),
        renew_before: Duration::from_secs(1),
        danger: Duration::from_millis(200),
        cleaner_period: Duration::from_millis(200),
        id_block: 5,
        ..RiflConfig::default()
    };
    let mut committed: Vec<LeaseCommand> = Vec::new();
    // Proposed, not committed: (commit time, command).
    let mut pending: Vec<(u64, LeaseCommand)> = Vec::new();
    let new_leader = |committed: &[LeaseCommand], now: u64| {
        let mut svc = LeaseService::new(config.clone());
        for c in committed {
            svc.apply(c, ms(now));
        }
        if let Some(c) = canary {
            svc.plant(c);
        }
        svc.become_leader(ms(now));
        svc
    };
    let mut svc = new_leader(&committed, 0);
    let mut nodes: Vec<LeaseValidator> =
        (0..NODES).map(|_| LeaseValidator::new(&config, Duration::from_millis(100))).collect();
    let mut clients: Vec<Client> = (0..CLIENTS)
        .map(|_| Client {
            lease: ClientLease::new(config.clone()),
            creating: None,
            paused_until: 0,
        })
        .collect();
    let mut granted: HashMap<u64, usize> = HashMap::new();
    let mut last_time = ClusterTime::ZERO;
    // Per node, the clients it was told are expired (their records there may be gone); and
    // every client any node was told about.
    let mut collected: Vec<BTreeSet<u64>> = vec![BTreeSet::new(); NODES];
    let mut expired_anywhere: BTreeSet<u64> = BTreeSet::new();
    let mut leader_changes = 0;

    for step in 0..1200u64 {
        let now = step * STEP_MS;
        // Leader change: uncommitted commands are lost, or committed by the old leader first.
        if step > 0 && rng.chance(leader_change_per_mille) {
            leader_changes += 1;
            let keep = rng.below(pending.len() as u64 + 1) as usize;
            committed.extend(pending.drain(..).take(keep).map(|(_, c)| c));
            svc = new_leader(&committed, now);
            for c in &mut clients {
                c.creating = None;
            }
        }
        // Commits, in log order.
        while pending.first().is_some_and(|(t, _)| *t <= now) {
            let (_, c) = pending.remove(0);
            committed.push(c);
            svc.apply(&c, ms(now));
        }
        for c in svc.tick(ms(now)) {
            propose(&mut pending, now + rng.below(300), c);
        }
        // Clients: renew when due, send RPCs with the lease they hold.
        for (ci, c) in clients.iter_mut().enumerate() {
            if now < c.paused_until {
                continue;
            }
            if rng.chance(4) {
                c.paused_until = now + rng.below(3 * 2000);
                continue;
            }
            let renewal = match c.creating {
                Some(id) if committed.contains(&LeaseCommand::Create { id }) => Some(id),
                Some(_) => None,
                None => c.lease.renewal_due(ms(now)).then(|| c.lease.client_id().unwrap_or(0)),
            };
            if let Some(asked) = renewal {
                match svc.renew(asked, ms(now)) {
                    Renewal::Granted(g) => {
                        if *granted.entry(g.lease_id).or_insert(ci) != ci {
                            return Err(format!(
                                "step {step}: lease id {} granted to two clients",
                                g.lease_id
                            ));
                        }
                        c.lease.on_grant(ms(now), g);
                        c.creating = None;
                    }
                    Renewal::Persist { id, commands } => {
                        for cmd in commands {
                            propose(&mut pending, now + rng.below(300), cmd);
                        }
                        c.creating = Some(id);
                    }
                    Renewal::NotServing => unreachable!("the model's leader serves"),
                }
            }
            // The lease the client holds (a paused client's last one: its in-flight retry).
            let Some(id) = c.lease.client_id() else { continue };
            let info = c.lease.usable(ms(now)).or(c.lease.last_grant()).expect("granted");
            let node = (ci + step as usize) % NODES;
            let v = &mut nodes[node];
            let mut verdict = v.check(&info, ms(now));
            if verdict == LeaseCheck::Ask {
                ask(&mut svc, v, id, now, &mut collected[node], &mut expired_anywhere)
                    .map_err(|e| format!("step {step}: {e}"))?;
                verdict = v.check(&info, ms(now));
            }
            if let LeaseCheck::Alive { .. } = verdict {
                if collected[node].contains(&id) {
                    return Err(format!("step {step}: node {node} runs an RPC of client {id}, whose expiry the service confirmed (records may be gone)"));
                }
            }
        }
        // The nodes' cleaners (§5.6).
        for (node, v) in nodes.iter_mut().enumerate() {
            for id in v.cleaner(ms(now)) {
                if v.should_ask(id, ms(now)) {
                    ask(&mut svc, v, id, now, &mut collected[node], &mut expired_anywhere)
                        .map_err(|e| format!("step {step}: {e}"))?;
                }
            }
        }
        // Cluster time handed out never goes back (inv. 9).
        let t = svc.now_cluster(ms(now)).expect("serving");
        if t < last_time {
            return Err(format!("step {step}: cluster time went back from {last_time} to {t} (leader change {leader_changes})"));
        }
        last_time = t;
        svc.check_invariants().map_err(|e| format!("step {step}: {e}"))?;
    }
    Ok(())
}

/// A node asks the service about `id` and takes the answer; the service must never call a
/// client alive again once it told any node the client expired.
fn ask(
    svc: &mut LeaseService,
    node: &mut LeaseValidator,
    id: u64,
    now: u64,
    collected: &mut BTreeSet<u64>,
    expired_anywhere: &mut BTreeSet<u64>,
) -> Result<(), String> {
    let status = svc.status(id, ms(now)).expect("serving");
    if status.alive() && expired_anywhere.contains(&id) {
        return Err(format!(
            "the service reports client {id} alive after a node was told it expired"
        ));
    }
    if node.on_status(id, &status, ms(now)) {
        collected.insert(id);
        expired_anywhere.insert(id);
    }
    Ok(())
}

/// Appends to the uncommitted tail; commit times never go back (the log commits in order).
fn propose(pending: &mut Vec<(u64, LeaseCommand)>, at: u64, cmd: LeaseCommand) {
    let at = pending.last().map_or(at, |&(t, _)| t.max(at));
    pending.push((at, cmd));
}

/// Seeds per run: 200, or `LEASE_MODEL_SEEDS` (a soak: `LEASE_MODEL_SEEDS=20000 cargo test
/// --release -p strata-rifl --test lease_model`).
fn seeds() -> u64 {
    std::env::var("LEASE_MODEL_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(200)
}

#[test]
fn leases_hold_inv_9_on_every_seed_with_leader_changes_and_pauses() {
    let mut failures = HashMap::new();
    let n = seeds();
    for seed in 0..n {
        if let Err(e) = run(seed, None, 10) {
            failures.insert(seed, e);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {n} seeds fail: {:?}",
        failures.len(),
        failures.iter().take(3).collect::<Vec<_>>()
    );
}

#[test]
fn canary_an_expiry_reported_before_its_drop_is_durable_is_caught() {
    let errors: Vec<String> = (0..200)
        .filter_map(|seed| run(seed, Some(LeaseCanary::ExpiredBeforeDrop), 30).err())
        .collect();
    println!(
        "expired-before-drop: caught on {} of 200 seeds, e.g. {:?}",
        errors.len(),
        errors.first()
    );
    assert!(errors.len() >= 5, "caught on {} of 200 seeds", errors.len());
    assert!(
        errors.iter().all(|e| e.contains("alive after") || e.contains("whose expiry")),
        "{errors:?}"
    );
}

#[test]
fn canary_a_leader_clock_restarting_from_zero_is_caught() {
    let errors: Vec<String> =
        (0..200).filter_map(|seed| run(seed, Some(LeaseCanary::ClockFromZero), 10).err()).collect();
    println!("clock-from-zero: caught on {} of 200 seeds, e.g. {:?}", errors.len(), errors.first());
    assert!(errors.len() >= 100, "caught on {} of 200 seeds", errors.len());
}
