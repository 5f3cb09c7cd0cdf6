//! The lease service and its cluster clock (`specs/rifl.md` §5.5.2, R-D1, R-D2).
//!
//! The service's durable state — the set of live lease ids, the highest reserved id, the safe
//! cluster time — changes only through [`LeaseCommand`]s. The service *proposes* commands; the
//! driver makes them durable in order (in Strata: entries of the replicated `log` table that
//! holds the service) and [`LeaseService::apply`]s every committed command on every replica.
//! So the service survives crashes and leader changes: a new leader's service starts from the
//! applied [`DurableLeases`] exactly as §5.5.2's restart does (clock resumed at the persisted
//! safe time, every known lease renewed for a full term, ids from the next reserved block).
//!
//! Expiration times never touch the log: renewals are free. Only creating a lease (one
//! command, plus a reservation per `id_block` ids), dropping an expired one, and advancing the
//! safe time (one command per `safe_persist_period`) are durable.

use std::collections::{BTreeSet, HashMap};

use strata_wire::rifl::ClusterTime;
pub use strata_wire::rifl::LeaseStatus;
use strata_wire::Instant;

use crate::config::RiflConfig;

/// A durable change of the lease service's state, applied in log order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseCommand {
    /// Ids up to and including `up_to` are reserved: a restarted service never issues one.
    Reserve { up_to: u64 },
    /// Lease `id` exists (it is renewed for a full term by any new leader).
    Create { id: u64 },
    /// Lease `id` expired and is gone for good (ids are never reused).
    Drop { id: u64 },
    /// The clock may hand out times up to `t`.
    SafeTime { t: ClusterTime },
}

/// The durable part of the service (§3.2): what survives every crash.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DurableLeases {
    pub ids: BTreeSet<u64>,
    pub max_reserved: u64,
    pub safe_time: ClusterTime,
}

impl DurableLeases {
    pub fn apply(&mut self, cmd: &LeaseCommand) {
        match *cmd {
            LeaseCommand::Reserve { up_to } => self.max_reserved = self.max_reserved.max(up_to),
            LeaseCommand::Create { id } => {
                self.ids.insert(id);
            }
            LeaseCommand::Drop { id } => {
                self.ids.remove(&id);
            }
            LeaseCommand::SafeTime { t } => self.safe_time = self.safe_time.max(t),
        }
    }
}

/// What a `RenewLease` needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// Renewed (or created earlier): reply with it.
    Granted(LeaseStatus),
    /// A new lease: make these commands durable, then renew `id` again (it will be granted).
    Persist { id: u64, commands: Vec<LeaseCommand> },
    /// This replica does not serve the service (not its leader): redirect.
    NotServing,
}

/// The in-memory state of the serving replica (§3.2 `lease_map`, `expiration_order`, the
/// clock's start point).
#[derive(Clone, Debug)]
struct Serving {
    start_cluster: ClusterTime,
    start_local: Instant,
    /// Expirations of the leases created or renewed since this replica started serving.
    leases: HashMap<u64, ClusterTime>,
    expiry: BTreeSet<(ClusterTime, u64)>,
    /// Every other durable id was renewed at the start (§5.5.2 recovery) and expires at
    /// `restored_exp` — one value, not an entry per lease, so a start costs nothing per lease
    /// (a leader holding a million leases would otherwise stall its core task for a second
    /// and lose its leader lease). The cleaner sweeps the unrenewed ones after that time, a
    /// batch at a time from `restored_cursor` (`None` once swept).
    restored_exp: ClusterTime,
    restored_cursor: Option<u64>,
    last_issued: u64,
    /// The highest reservation proposed (applied or not).
    reserved_proposed: u64,
    next_persist: Instant,
    next_clean: Instant,
    /// The largest cluster time handed out (§7 inv. 9: never decreases).
    last_handed: ClusterTime,
}

/// Planted bugs for the model test's canaries (`tests/lease_model.rs`): each breaks one rule
/// the test must catch. Never set outside tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseCanary {
    /// Report a lease expired as soon as the clock passes its expiration, before its `Drop`
    /// is durable (a later leader renews the id again: a node told "expired" meets it alive).
    ExpiredBeforeDrop,
    /// A new leader starts its clock at zero instead of the persisted safe time.
    ClockFromZero,
}

/// How many unrenewed restored leases one cleaner tick drops at most (a bounded step).
const RESTORED_SWEEP_BATCH: usize = 10_000;

/// One replica's lease service: it always applies commands; while it is the leader of the
/// log holding them it also serves (`become_leader` .. `step_down`).
#[derive(Clone, Debug)]
pub struct LeaseService {
    config: RiflConfig,
    durable: DurableLeases,
    serving: Option<Serving>,
    canary: Option<LeaseCanary>,
}

impl LeaseService {
    pub fn new(config: RiflConfig) -> Self {
        LeaseService { config, durable: DurableLeases::default(), serving: None, canary: None }
    }

    /// A replica whose applied state is `durable` (rebuilt by the driver from the log that
    /// holds the commands), not serving yet.
    pub fn restore(config: RiflConfig, durable: DurableLeases) -> Self {
        LeaseService { config, durable, serving: None, canary: None }
    }

    /// Plants a bug (canary tests only).
    pub fn plant(&mut self, canary: LeaseCanary) {
        self.canary = Some(canary);
    }

    pub fn durable(&self) -> &DurableLeases {
        &self.durable
    }

    pub fn is_serving(&self) -> bool {
        self.serving.is_some()
    }

    /// A committed command, in log order (every replica, serving or not).
    pub fn apply(&mut self, cmd: &LeaseCommand, now: Instant) {
        self.durable.apply(cmd);
        let term = self.term_ns();
        match (cmd, &mut self.serving) {
            (LeaseCommand::Create { id }, Some(s)) => {
                let exp = Self::clock(s, &self.durable, now).saturating_add_nanos(term);
                Self::set_expiration(s, *id, exp);
            }
            // §5.5.2 cleaner: "remove id durably, then from lease_map". Until its `Drop` is
            // durable an expired lease still answers `GetLeaseInfo` with its (past)
            // expiration: a node may act on "expired" only once no later leader can renew
            // the id again (a new leader renews every durable id, §5.5.2 recovery).
            (LeaseCommand::Drop { id }, Some(s)) => {
                if let Some(exp) = s.leases.remove(id) {
                    s.expiry.remove(&(exp, *id));
                }
            }
            _ => {}
        }
    }

    /// §5.5.2 restart, run when this replica starts serving: the caller guarantees every
    /// committed command is applied (the leader has applied its own first entry). The clock
    /// resumes at the persisted safe time; every known lease gets a full term; new ids come
    /// from a fresh block.
    pub fn become_leader(&mut self, now: Instant) {
        let start = match self.canary {
            Some(LeaseCanary::ClockFromZero) => ClusterTime::ZERO, // CANARY
            _ => self.durable.safe_time,
        };
        let s = Serving {
            start_cluster: start,
            start_local: now,
            leases: HashMap::new(),
            expiry: BTreeSet::new(),
            restored_exp: start.saturating_add_nanos(self.term_ns()),
            restored_cursor: Some(0),
            // The log commits in order, so every durable id is reserved; the max is a guard.
            last_issued: self
                .durable
                .max_reserved
                .max(self.durable.ids.last().copied().unwrap_or(0)),
            reserved_proposed: self
                .durable
                .max_reserved
                .max(self.durable.ids.last().copied().unwrap_or(0)),
            next_persist: now,
            next_clean: now + self.config.cleaner_period,
            last_handed: start,
        };
        self.serving = Some(s);
    }

    pub fn step_down(&mut self) {
        self.serving = None;
    }

    /// §5.5.2 `now_cluster`: never beyond the persisted safe time.
    pub fn now_cluster(&mut self, now: Instant) -> Option<ClusterTime> {
        let durable = &self.durable;
        let s = self.serving.as_mut()?;
        let t = Self::clock(s, durable, now);
        s.last_handed = s.last_handed.max(t);
        Some(t)
    }

    fn clock(s: &Serving, durable: &DurableLeases, now: Instant) -> ClusterTime {
        Self::unclamped(s, now).min(durable.safe_time).max(s.start_cluster)
    }

    fn unclamped(s: &Serving, now: Instant) -> ClusterTime {
        s.start_cluster.saturating_add_nanos(now.saturating_since(s.start_local).as_nanos() as u64)
    }

    fn term_ns(&self) -> u64 {
        self.config.lease_term.as_nanos() as u64
    }

    /// `id`'s expiration at the serving replica: renewed in this term, or restored at its
    /// start; `None` if the id is not (or no longer durably) a lease.
    fn expiration(s: &Serving, durable: &DurableLeases, id: u64) -> Option<ClusterTime> {
        match s.leases.get(&id) {
            Some(&exp) => Some(exp),
            None => durable.ids.contains(&id).then_some(s.restored_exp),
        }
    }

    fn set_expiration(s: &mut Serving, id: u64, exp: ClusterTime) {
        if let Some(old) = s.leases.insert(id, exp) {
            s.expiry.remove(&(old, id));
        }
        s.expiry.insert((exp, id));
    }

    /// §5.5.2 `RenewLease(id)`; `id` 0 asks for a new lease. A lease whose expiration is not
    /// beyond the clock is dead even before the cleaner drops it: it is never revived (a
    /// server may already have collected its records), the client gets a new id.
    pub fn renew(&mut self, id: u64, now: Instant) -> Renewal {
        let term = self.term_ns();
        let block = self.config.id_block;
        let durable = &self.durable;
        let Some(s) = self.serving.as_mut() else { return Renewal::NotServing };
        let t = Self::clock(s, durable, now);
        s.last_handed = s.last_handed.max(t);
        if id != 0
            && durable.ids.contains(&id)
            && Self::expiration(s, durable, id).is_some_and(|exp| exp > t)
        {
            let exp = t.saturating_add_nanos(term);
            Self::set_expiration(s, id, exp);
            return Renewal::Granted(LeaseStatus {
                lease_id: id,
                expiration: exp,
                cluster_time: t,
            });
        }
        let mut commands = Vec::with_capacity(2);
        if s.last_issued >= s.reserved_proposed {
            s.reserved_proposed = s.last_issued + block;
            commands.push(LeaseCommand::Reserve { up_to: s.reserved_proposed });
        }
        s.last_issued += 1;
        commands.push(LeaseCommand::Create { id: s.last_issued });
        Renewal::Persist { id: s.last_issued, commands }
    }

    /// §5.5.2 `GetLeaseInfo(id)`; `None` when not serving. Expired means `lease_id` 0.
    pub fn status(&mut self, id: u64, now: Instant) -> Option<LeaseStatus> {
        let t = self.now_cluster(now)?;
        let s = self.serving.as_ref()?;
        // Alive until its `Drop` is durable (see `apply`), even past its expiration.
        let early = self.canary == Some(LeaseCanary::ExpiredBeforeDrop); // CANARY
        Some(match Self::expiration(s, &self.durable, id) {
            Some(exp) if !(early && exp <= t) => {
                LeaseStatus { lease_id: id, expiration: exp, cluster_time: t }
            }
            _ => LeaseStatus { lease_id: 0, expiration: ClusterTime::ZERO, cluster_time: t },
        })
    }

    /// Periodic work of the serving replica: advance the safe time every
    /// `safe_persist_period` (to the clock plus `safe_interval`), and every `cleaner_period`
    /// drop the leases that expired. Returns the commands to make durable.
    pub fn tick(&mut self, now: Instant) -> Vec<LeaseCommand> {
        let (period, interval, cleaner) = (
            self.config.safe_persist_period,
            self.config.safe_interval.as_nanos() as u64,
            self.config.cleaner_period,
        );
        let durable = &self.durable;
        let Some(s) = self.serving.as_mut() else { return Vec::new() };
        let mut out = Vec::new();
        if now >= s.next_persist {
            out.push(LeaseCommand::SafeTime {
                t: Self::unclamped(s, now).saturating_add_nanos(interval),
            });
            s.next_persist = now + period;
        }
        if now >= s.next_clean {
            let t = Self::clock(s, durable, now);
            // Proposed once (out of the expiry index); gone from the lease map when applied.
            while let Some(&(exp, id)) = s.expiry.first() {
                if exp > t {
                    break;
                }
                s.expiry.remove(&(exp, id));
                out.push(LeaseCommand::Drop { id });
            }
            s.next_clean = now + cleaner;
            // The restored leases nobody renewed, a bounded batch per tick (then again soon).
            if let (Some(from), true) = (s.restored_cursor, s.restored_exp <= t) {
                let mut batch = durable
                    .ids
                    .range(from..)
                    .filter(|id| !s.leases.contains_key(id))
                    .take(RESTORED_SWEEP_BATCH + 1);
                out.extend(
                    batch.by_ref().take(RESTORED_SWEEP_BATCH).map(|&id| LeaseCommand::Drop { id }),
                );
                match batch.next() {
                    Some(&next) => {
                        s.restored_cursor = Some(next);
                        s.next_clean = now; // more to sweep
                    }
                    None => s.restored_cursor = None,
                }
            }
        }
        out
    }

    /// When `tick` next has work (`None` when not serving).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.serving.as_ref().map(|s| s.next_persist.min(s.next_clean))
    }

    /// Live leases (durable ids) while serving.
    pub fn lease_count(&self) -> usize {
        self.serving.as_ref().map_or(0, |_| self.durable.ids.len())
    }

    /// §7 inv. 9 and the service's own consistency: handed-out times never beyond the safe
    /// time; issued ids reserved; the expiry index matches the lease map.
    pub fn check_invariants(&self) -> Result<(), String> {
        let Some(s) = &self.serving else { return Ok(()) };
        if s.last_handed > self.durable.safe_time.max(s.start_cluster) {
            return Err(format!(
                "handed out {} beyond the safe time {}",
                s.last_handed, self.durable.safe_time
            ));
        }
        if s.last_issued > s.reserved_proposed {
            return Err(format!(
                "issued id {} beyond the reservation {}",
                s.last_issued, s.reserved_proposed
            ));
        }
        if s.expiry.len() > s.leases.len()
            || s.expiry.iter().any(|(exp, id)| s.leases.get(id) != Some(exp))
        {
            return Err("the expiry index disagrees with the lease map".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Instant {
        Instant::from_millis(v)
    }

    /// A service whose every proposed command is applied at once (a log that commits instantly).
    fn serving(config: RiflConfig, log: &mut Vec<LeaseCommand>, now: Instant) -> LeaseService {
        let mut svc = LeaseService::new(config);
        svc.become_leader(now);
        pump(&mut svc, log, now);
        svc
    }

    fn pump(svc: &mut LeaseService, log: &mut Vec<LeaseCommand>, now: Instant) {
        for c in svc.tick(now) {
            svc.apply(&c, now);
            log.push(c);
        }
    }

    fn create(
        svc: &mut LeaseService,
        log: &mut Vec<LeaseCommand>,
        id: u64,
        now: Instant,
    ) -> LeaseStatus {
        match svc.renew(id, now) {
            Renewal::Granted(g) => g,
            Renewal::Persist { id, commands } => {
                for c in commands {
                    svc.apply(&c, now);
                    log.push(c);
                }
                match svc.renew(id, now) {
                    Renewal::Granted(g) => g,
                    other => panic!("a persisted lease was not granted: {other:?}"),
                }
            }
            Renewal::NotServing => panic!("not serving"),
        }
    }

    #[test]
    fn the_clock_stops_at_the_safe_time_until_a_new_one_is_durable() {
        let mut log = Vec::new();
        let mut svc = LeaseService::new(RiflConfig::default());
        svc.become_leader(ms(0));
        let first = svc.tick(ms(0));
        assert_eq!(first, vec![LeaseCommand::SafeTime { t: ClusterTime::from_millis(3000) }]);
        assert_eq!(
            svc.now_cluster(ms(1000)),
            Some(ClusterTime::ZERO),
            "nothing durable yet: the clock may not move"
        );
        svc.apply(&first[0], ms(1000));
        assert_eq!(svc.now_cluster(ms(1000)), Some(ClusterTime::from_millis(1000)));
        assert_eq!(
            svc.now_cluster(ms(5000)),
            Some(ClusterTime::from_millis(3000)),
            "capped at the safe time"
        );
        pump(&mut svc, &mut log, ms(5000));
        assert_eq!(svc.now_cluster(ms(5000)), Some(ClusterTime::from_millis(5000)));
        svc.check_invariants().unwrap();
    }

    #[test]
    fn ids_are_never_reissued_and_the_clock_never_goes_back_across_leader_changes() {
        let config = RiflConfig { id_block: 3, ..RiflConfig::simulation() };
        let mut log = Vec::new();
        let mut svc = serving(config.clone(), &mut log, ms(0));
        pump(&mut svc, &mut log, ms(2000));
        let a = create(&mut svc, &mut log, 0, ms(2000));
        let b = create(&mut svc, &mut log, 0, ms(2100));
        assert_eq!((a.lease_id, b.lease_id), (1, 2));
        let before = svc.now_cluster(ms(2500)).unwrap();

        // A new leader replays the log: ids resume after the reserved block, times after
        // the safe time, and both leases are alive for a full term.
        let mut next = LeaseService::new(config);
        for c in &log {
            next.apply(c, ms(0));
        }
        next.become_leader(ms(0));
        let resumed = next.now_cluster(ms(0)).unwrap();
        assert!(resumed >= before, "cluster time went back: {resumed} < {before}");
        let c = create(&mut next, &mut log, 0, ms(0));
        assert_eq!(c.lease_id, 4, "ids 1-3 were reserved by the old leader");
        assert!(next.status(1, ms(0)).unwrap().alive());
        assert_eq!(
            next.status(1, ms(0)).unwrap().expiration,
            resumed.saturating_add_nanos(10_000_000_000)
        );
        next.check_invariants().unwrap();
    }

    #[test]
    fn renewals_extend_a_lease_and_an_expired_lease_is_dropped_not_revived() {
        let config = RiflConfig::simulation(); // 10 s term, cleaner every 1 s
        let mut log = Vec::new();
        let mut svc = serving(config, &mut log, ms(0));
        let g = create(&mut svc, &mut log, 0, ms(0));
        let mut now = 0;
        while now < 30_000 {
            now += 500;
            pump(&mut svc, &mut log, ms(now));
            if now < 8000 {
                let r = svc.renew(g.lease_id, ms(now));
                assert!(matches!(r, Renewal::Granted(s) if s.lease_id == g.lease_id), "{r:?}");
            }
        }
        assert!(!svc.status(g.lease_id, ms(now)).unwrap().alive());
        assert!(log.contains(&LeaseCommand::Drop { id: g.lease_id }));
        match svc.renew(g.lease_id, ms(now)) {
            Renewal::Persist { id, .. } => assert_ne!(id, g.lease_id, "a dead lease id came back"),
            other => panic!("expected a new lease, got {other:?}"),
        }
        svc.check_invariants().unwrap();
    }

    #[test]
    fn an_expired_lease_is_reported_expired_only_once_its_drop_is_durable() {
        let config = RiflConfig::simulation(); // 10 s term, cleaner every 1 s
        let mut log = Vec::new();
        let mut svc = serving(config.clone(), &mut log, ms(0));
        let g = create(&mut svc, &mut log, 0, ms(0));
        // Keep the clock's safe time moving, but do not apply the cleaner's Drop yet.
        let mut now = 0;
        let mut drop = None;
        while drop.is_none() {
            now += 500;
            for c in svc.tick(ms(now)) {
                match c {
                    LeaseCommand::Drop { .. } => drop = Some(c),
                    c => svc.apply(&c, ms(now)),
                }
            }
        }
        assert!(now >= 10_000, "dropped before its term ran out");
        let before = svc.status(g.lease_id, ms(now)).unwrap();
        assert!(
            before.alive(),
            "the Drop is not durable: a new leader would renew the id, so it is not expired yet"
        );
        assert!(
            matches!(svc.renew(g.lease_id, ms(now)), Renewal::Persist { id, .. } if id != g.lease_id),
            "but never renewed"
        );
        svc.apply(&drop.unwrap(), ms(now));
        assert!(!svc.status(g.lease_id, ms(now)).unwrap().alive());
        // A new leader replaying the log does not revive it either.
        let mut next = LeaseService::restore(config, svc.durable().clone());
        next.become_leader(ms(0));
        assert!(!next.status(g.lease_id, ms(0)).unwrap().alive());
        svc.check_invariants().unwrap();
    }

    #[test]
    fn a_start_costs_nothing_per_lease_and_unrenewed_leases_are_swept_in_batches() {
        let config = RiflConfig::simulation(); // 10 s term
        let mut durable = DurableLeases {
            max_reserved: 30_000,
            safe_time: ClusterTime::from_millis(1000),
            ..DurableLeases::default()
        };
        durable.ids.extend(1..=25_000);
        let mut svc = LeaseService::restore(config, durable);
        svc.become_leader(ms(0));
        assert_eq!(svc.lease_count(), 25_000);
        let restored = svc.status(7, ms(0)).unwrap();
        assert_eq!(
            restored.expiration,
            ClusterTime::from_millis(11_000),
            "every known lease renewed for a full term"
        );
        // Lease 7's client renews; the others went away.
        let mut now = 0;
        let mut log = Vec::new();
        while now < 9_000 {
            now += 500;
            pump(&mut svc, &mut log, ms(now));
            assert!(matches!(svc.renew(7, ms(now)), Renewal::Granted(g) if g.lease_id == 7));
        }
        let mut batches = Vec::new();
        while now < 20_000 {
            now += 100;
            let commands = svc.tick(ms(now));
            let drops = commands.iter().filter(|c| matches!(c, LeaseCommand::Drop { .. })).count();
            if drops > 0 {
                batches.push(drops);
            }
            assert!(
                !commands.contains(&LeaseCommand::Drop { id: 7 }),
                "a renewed lease is not swept"
            );
            for c in &commands {
                svc.apply(c, ms(now));
            }
            svc.renew(7, ms(now));
        }
        assert_eq!(
            batches,
            vec![RESTORED_SWEEP_BATCH, RESTORED_SWEEP_BATCH, 4_999],
            "bounded batches"
        );
        assert_eq!(svc.lease_count(), 1);
        assert!(
            !svc.status(8, ms(now)).unwrap().alive() && svc.status(7, ms(now)).unwrap().alive()
        );
        svc.check_invariants().unwrap();
    }

    #[test]
    fn a_replica_that_does_not_serve_refuses() {
        let mut svc = LeaseService::new(RiflConfig::default());
        assert_eq!(svc.renew(0, ms(0)), Renewal::NotServing);
        assert_eq!(svc.status(1, ms(0)), None);
        assert!(svc.tick(ms(0)).is_empty());
        svc.become_leader(ms(0));
        svc.step_down();
        assert_eq!(svc.poll_timeout(), None);
    }
}
