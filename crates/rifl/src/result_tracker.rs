//! The server's ResultTracker (`specs/rifl.md` §2.3, §5.4, §5.5.3, §5.6).
//!
//! Per client: the ack watermark (`ack = first_incomplete - 1` of the largest
//! `first_incomplete` learned), and one slot per unacknowledged RPC that is executing
//! (`InProgress`) or finished (`Completed(result)`). The completion record itself is durable
//! elsewhere — in the same log entry as the mutation, or in the object's replicated metadata —
//! and is fed back here by [`ResultTracker::recover_record`] when a replica replays or learns
//! it, so every replica that may become the object's server knows every record.
//!
//! The result type `R` is whatever the operation returns (a version, an observed value); it is
//! cloned into every duplicate's reply, so it should be cheap to clone (`Bytes`, small structs).

use std::collections::HashMap;
use std::mem::size_of;

use strata_wire::rifl::{ClusterTime, LeaseInfo, RpcId};

use crate::config::RiflConfig;
use crate::lease_service::LeaseStatus;

/// What to do with an arriving linearizable RPC (§5.4 `check_duplicate`, §5.3 S4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict<R> {
    /// First arrival: it is now in progress. Execute it, make the mutation and its completion
    /// record durable together, then [`ResultTracker::record_completion`] (or
    /// [`ResultTracker::abort_in_progress`] if it stopped without effect).
    New,
    /// Already executed: reply with this result, do not execute again (R-G2).
    Completed(R),
    /// Another arrival of it is executing: reply `Retry(InProgress)` (R-D5).
    InProgress,
    /// The client acknowledged it already (a very late duplicate): reply `Stale` (R-G4).
    Stale,
    /// Its lease may have expired by this server's cluster clock: ask the lease service
    /// (`GetLeaseInfo`), hand the answer to [`ResultTracker::on_lease_status`], then check
    /// again. Nothing was recorded.
    ValidateLease,
    /// The lease service confirmed the client's lease expired: reply `ExpiredLease`; the
    /// outcome of its earlier unfinished RPCs is unknown to it (R-G4).
    Expired,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Slot<R> {
    InProgress,
    Completed(R),
}

impl<R> Slot<R> {
    fn running(&self) -> bool {
        matches!(self, Slot::InProgress)
    }
}

/// §3.3 `ClientRecord`. Slots are a vector sorted by seq: usually it holds one or two, and at
/// most the window (512), so a vector is smaller than any map (R-G6: server state per client
/// should stay near the paper's 116 B).
#[derive(Clone, Debug)]
struct ClientRecord<R> {
    ack: u64,
    max_seen: u64,
    lease_hint: ClusterTime,
    in_progress: u32,
    /// Positive while this server holds locks or coordinates a recovery for the client
    /// (§5.6): the record is then never collected by lease expiry.
    protect: u32,
    /// The lease service said the lease is gone. Lease ids are never reused, so no new RPC of
    /// this client will ever execute here again.
    expired: bool,
    slots: Vec<(u64, Slot<R>)>,
}

impl<R> ClientRecord<R> {
    fn new() -> Self {
        ClientRecord {
            ack: 0,
            max_seen: 0,
            lease_hint: ClusterTime::ZERO,
            in_progress: 0,
            protect: 0,
            expired: false,
            slots: Vec::new(),
        }
    }

    fn find(&self, seq: u64) -> Result<usize, usize> {
        self.slots.binary_search_by_key(&seq, |(s, _)| *s)
    }

    fn collectable(&self) -> bool {
        self.in_progress == 0 && self.protect == 0
    }
}

/// One client in [`ResultTracker::completed_records`]: `(client id, ack watermark, [(seq,
/// result)])`, records sorted by seq.
pub type ClientExport<R> = (u64, u64, Vec<(u64, R)>);

/// Counts for status output and the memory benchmark.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrackerStats {
    pub clients: usize,
    pub completed: usize,
    pub in_progress: usize,
    /// Bytes of the tracker's own structures (the client map's table, the records, their slot
    /// vectors), not counting heap memory a result `R` points to.
    pub approx_bytes: usize,
}

/// One server's (in Strata: one shard replica's) ResultTracker.
#[derive(Clone, Debug)]
pub struct ResultTracker<R> {
    clients: HashMap<u64, ClientRecord<R>>,
    /// §3.3 `observed_cluster_time`: the largest cluster time seen; a lower bound of the lease
    /// service's clock.
    observed: ClusterTime,
    margin_ns: u64,
    window: u64,
}

impl<R: Clone> ResultTracker<R> {
    pub fn new(config: &RiflConfig) -> Self {
        ResultTracker {
            clients: HashMap::new(),
            observed: ClusterTime::ZERO,
            margin_ns: config.validation_margin.as_nanos() as u64,
            window: config.window,
        }
    }

    /// The largest cluster time this server has seen.
    pub fn observed_cluster_time(&self) -> ClusterTime {
        self.observed
    }

    /// Raises the observed cluster time (client RPCs, lease-service replies, migrations, the
    /// clock fetch a recovering server makes before serving: R-D9).
    pub fn observe(&mut self, t: ClusterTime) {
        self.observed = self.observed.max(t);
    }

    /// §5.4 `check_duplicate` with §5.5.3's lease check for a new RPC. The caller has checked
    /// the envelope (`Rifl::check`) and calls [`ResultTracker::process_ack`] afterwards unless
    /// the verdict is `Expired` or `ValidateLease`.
    pub fn check_duplicate(&mut self, rpc: RpcId, lease: &LeaseInfo) -> Verdict<R> {
        self.observe(lease.timestamp);
        let observed = self.observed;
        let margin = self.margin_ns;
        let r = self.clients.entry(rpc.client_id).or_insert_with(ClientRecord::new);
        if rpc.seq <= r.ack {
            return Verdict::Stale;
        }
        let at = match r.find(rpc.seq) {
            Ok(i) => {
                return match &r.slots[i].1 {
                    Slot::InProgress => Verdict::InProgress,
                    Slot::Completed(result) => Verdict::Completed(result.clone()),
                }
            }
            Err(at) => at,
        };
        if r.expired {
            return Verdict::Expired;
        }
        let expiration = lease.expiration.max(r.lease_hint);
        if expiration <= observed.saturating_add_nanos(margin) {
            return Verdict::ValidateLease;
        }
        r.lease_hint = expiration;
        r.slots.insert(at, (rpc.seq, Slot::InProgress));
        r.in_progress += 1;
        r.max_seen = r.max_seen.max(rpc.seq);
        Verdict::New
    }

    /// The lease service's answer about `client_id` (after `ValidateLease`, or for the
    /// cleaner). The observed clock rises to the service's time first (§5.5.3: before any
    /// state of the client is deleted).
    pub fn on_lease_status(&mut self, client_id: u64, status: &LeaseStatus) {
        self.observe(status.cluster_time);
        let r = self.clients.entry(client_id).or_insert_with(ClientRecord::new);
        if status.alive() {
            r.lease_hint = r.lease_hint.max(status.expiration);
        } else {
            r.expired = true;
        }
    }

    /// §5.4 `record_completion`: the execution of `rpc` is durable with this result.
    pub fn record_completion(&mut self, rpc: RpcId, result: R) {
        let Some(r) = self.clients.get_mut(&rpc.client_id) else {
            debug_assert!(false, "record_completion for {rpc} without check_duplicate");
            return;
        };
        match r.find(rpc.seq) {
            Ok(i) => {
                if r.slots[i].1.running() {
                    r.in_progress -= 1;
                }
                if rpc.seq > r.ack {
                    r.slots[i].1 = Slot::Completed(result);
                } else {
                    r.slots.remove(i); // acknowledged while it executed
                }
            }
            Err(at) if rpc.seq > r.ack => r.slots.insert(at, (rpc.seq, Slot::Completed(result))),
            Err(_) => {}
        }
    }

    /// R-D6 `abort_in_progress`: the execution stopped without effect (object locked, not the
    /// owner any more); a retry may execute it.
    pub fn abort_in_progress(&mut self, rpc: RpcId) {
        if let Some(r) = self.clients.get_mut(&rpc.client_id) {
            if let Ok(i) = r.find(rpc.seq) {
                if r.slots[i].1.running() {
                    r.slots.remove(i);
                    r.in_progress -= 1;
                }
            }
        }
    }

    /// §5.4 `process_ack`: every seq below `first_incomplete` is acknowledged; their records
    /// are dropped (executions still running are dropped when they complete). Returns how many
    /// completion records were freed.
    pub fn process_ack(&mut self, client_id: u64, first_incomplete: u64) -> usize {
        match self.clients.get_mut(&client_id) {
            Some(r) => Self::ack(r, first_incomplete.saturating_sub(1)),
            None => 0,
        }
    }

    fn ack(r: &mut ClientRecord<R>, ack: u64) -> usize {
        if ack <= r.ack {
            return 0;
        }
        let before = r.slots.len();
        r.slots.retain(|(seq, slot)| *seq > ack || slot.running());
        r.ack = ack;
        before - r.slots.len()
    }

    /// §5.4 `recover_record`: a completion record found in the log (replay, a follower
    /// applying the leader's entries, a migration). `ack_at_exec` is the watermark the
    /// executing RPC carried. Duplicates of a record are kept once.
    pub fn recover_record(&mut self, rpc: RpcId, ack_at_exec: u64, result: R) {
        let r = self.clients.entry(rpc.client_id).or_insert_with(ClientRecord::new);
        Self::ack(r, ack_at_exec);
        if rpc.seq <= r.ack {
            return;
        }
        r.max_seen = r.max_seen.max(rpc.seq);
        match r.find(rpc.seq) {
            Ok(i) => {
                if r.slots[i].1.running() {
                    r.in_progress -= 1;
                    r.slots[i].1 = Slot::Completed(result);
                }
            }
            Err(at) => r.slots.insert(at, (rpc.seq, Slot::Completed(result))),
        }
    }

    /// A durable ack record `(client, ack)` (R-D8), replayed or migrated: the watermark without
    /// a completion record.
    pub fn recover_ack(&mut self, client_id: u64, ack: u64) {
        let r = self.clients.entry(client_id).or_insert_with(ClientRecord::new);
        Self::ack(r, ack);
    }

    /// §5.4 `check_duplicate` without its effects: what an arrival of `rpc` would find, with
    /// nothing recorded, no lease checked and no clock raised. `New` means "no record and not
    /// acknowledged". For state that must stay a function of durable records only (a log
    /// table's applied state, rebuilt identically at every replica), where "in progress" lives
    /// elsewhere (the leader's in-flight appends).
    pub fn peek(&self, rpc: RpcId) -> Verdict<R> {
        let Some(r) = self.clients.get(&rpc.client_id) else { return Verdict::New };
        if rpc.seq <= r.ack {
            return Verdict::Stale;
        }
        match r.find(rpc.seq) {
            Ok(i) => match &r.slots[i].1 {
                Slot::InProgress => Verdict::InProgress,
                Slot::Completed(result) => Verdict::Completed(result.clone()),
            },
            Err(_) => Verdict::New,
        }
    }

    /// Every client's watermark and completed records, by client id then seq: what a snapshot
    /// must carry so that replaying it with [`ResultTracker::recover_ack`] and
    /// [`ResultTracker::recover_record`] rebuilds the same answers (R-D8: the watermark
    /// outlives the records). In-progress slots are not records and are left out.
    pub fn completed_records(&self) -> Vec<ClientExport<R>> {
        let mut out: Vec<ClientExport<R>> = self
            .clients
            .iter()
            .map(|(&id, r)| {
                let done = r.slots.iter().filter_map(|(seq, s)| match s {
                    Slot::Completed(result) => Some((*seq, result.clone())),
                    Slot::InProgress => None,
                });
                (id, r.ack, done.collect())
            })
            .collect();
        out.sort_unstable_by_key(|(id, _, _)| *id);
        out
    }

    /// Whether the tracker holds anything of `client_id` (a watermark or a record).
    pub fn knows(&self, client_id: u64) -> bool {
        self.clients.contains_key(&client_id)
    }

    /// Forgets `client_id` entirely (§5.6 collection by client death, decided by the caller:
    /// the lease service confirmed the expiry). Returns whether it was known.
    pub fn remove_client(&mut self, client_id: u64) -> bool {
        self.clients.remove(&client_id).is_some()
    }

    /// The acknowledgement watermark of a client (0 if unknown): what a durable ack record
    /// would hold.
    pub fn ack_of(&self, client_id: u64) -> u64 {
        self.clients.get(&client_id).map_or(0, |r| r.ack)
    }

    /// §5.6 protection: while > 0 the client's record is never collected by lease expiry.
    pub fn protect(&mut self, client_id: u64) {
        self.clients.entry(client_id).or_insert_with(ClientRecord::new).protect += 1;
    }

    pub fn unprotect(&mut self, client_id: u64) {
        if let Some(r) = self.clients.get_mut(&client_id) {
            r.protect = r.protect.saturating_sub(1);
        }
    }

    /// §5.6 cleaner, step 1: clients whose lease looks expired by the observed clock and whose
    /// records may be collected. Ask the lease service about each and hand every answer to
    /// [`ResultTracker::on_lease_status`], then [`ResultTracker::collect_expired`]. Sorted, so
    /// the simulator is deterministic.
    pub fn expiry_candidates(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .clients
            .iter()
            .filter(|(_, r)| !r.expired && r.lease_hint <= self.observed && r.collectable())
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// §5.6 cleaner, step 2: drops every record whose lease the service confirmed expired and
    /// that nothing protects or executes. Returns the clients removed.
    pub fn collect_expired(&mut self) -> Vec<u64> {
        let mut gone: Vec<u64> = self
            .clients
            .iter()
            .filter(|(_, r)| r.expired && r.collectable())
            .map(|(&id, _)| id)
            .collect();
        gone.sort_unstable();
        for id in &gone {
            self.clients.remove(id);
        }
        gone
    }

    pub fn stats(&self) -> TrackerStats {
        let mut s = TrackerStats { clients: self.clients.len(), ..TrackerStats::default() };
        // hashbrown: one control byte per bucket plus the bucket itself.
        s.approx_bytes = self.clients.capacity() * (size_of::<(u64, ClientRecord<R>)>() + 1);
        for r in self.clients.values() {
            s.in_progress += r.in_progress as usize;
            s.completed += r.slots.len() - r.in_progress as usize;
            s.approx_bytes += r.slots.capacity() * size_of::<(u64, Slot<R>)>();
        }
        s
    }

    /// The tracker's state invariants (§7 inv. 7, 8): slots sorted and unique; a completed
    /// record is above the watermark; at most `window` records per client; the in-progress
    /// count matches.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (id, r) in &self.clients {
            if r.slots.windows(2).any(|w| w[0].0 >= w[1].0) {
                return Err(format!("client {id}: slots not sorted and unique"));
            }
            let running = r.slots.iter().filter(|(_, s)| s.running()).count();
            if running != r.in_progress as usize {
                return Err(format!(
                    "client {id}: {running} slots in progress, counted {}",
                    r.in_progress
                ));
            }
            if let Some((seq, _)) = r.slots.iter().find(|(seq, s)| *seq <= r.ack && !s.running()) {
                return Err(format!(
                    "client {id}: completed record {seq} at or below the ack watermark {}",
                    r.ack
                ));
            }
            if r.slots.iter().any(|(seq, _)| *seq > r.max_seen) {
                return Err(format!("client {id}: a slot above max_seen {}", r.max_seen));
            }
            if r.slots.len() as u64 > self.window {
                return Err(format!(
                    "client {id}: {} records, more than the window {}",
                    r.slots.len(),
                    self.window
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const C: u64 = 9;

    fn tracker() -> ResultTracker<u64> {
        ResultTracker::new(&RiflConfig::default())
    }

    fn lease(expiration: u64, now: u64) -> LeaseInfo {
        LeaseInfo { client_id: C, expiration: ClusterTime(expiration), timestamp: ClusterTime(now) }
    }

    fn rpc(seq: u64) -> RpcId {
        RpcId { client_id: C, seq }
    }

    fn status(alive: bool, expiration: u64, now: u64) -> LeaseStatus {
        LeaseStatus {
            lease_id: if alive { C } else { 0 },
            expiration: ClusterTime(expiration),
            cluster_time: ClusterTime(now),
        }
    }

    #[test]
    fn a_retry_gets_the_first_result_and_never_executes_again() {
        let mut t = tracker();
        assert_eq!(t.check_duplicate(rpc(1), &lease(100, 1)), Verdict::New);
        assert_eq!(t.check_duplicate(rpc(1), &lease(100, 2)), Verdict::InProgress);
        t.record_completion(rpc(1), 41);
        assert_eq!(t.check_duplicate(rpc(1), &lease(100, 3)), Verdict::Completed(41));
        t.check_invariants().unwrap();
    }

    #[test]
    fn acknowledged_rpcs_are_stale_and_their_records_freed() {
        let mut t = tracker();
        for seq in 1..=3 {
            assert_eq!(t.check_duplicate(rpc(seq), &lease(100, 1)), Verdict::New);
            t.record_completion(rpc(seq), seq * 10);
        }
        assert_eq!(t.process_ack(C, 3), 2, "records 1 and 2 are acknowledged");
        assert_eq!(t.check_duplicate(rpc(2), &lease(100, 1)), Verdict::Stale);
        assert_eq!(t.check_duplicate(rpc(3), &lease(100, 1)), Verdict::Completed(30));
        assert_eq!(t.stats().completed, 1);
    }

    #[test]
    fn an_rpc_acknowledged_while_it_executes_leaves_no_record() {
        let mut t = tracker();
        assert_eq!(t.check_duplicate(rpc(1), &lease(100, 1)), Verdict::New);
        assert_eq!(t.process_ack(C, 2), 0);
        t.check_invariants().unwrap();
        t.record_completion(rpc(1), 5);
        assert_eq!(t.stats().completed, 0);
        assert_eq!(t.check_duplicate(rpc(1), &lease(100, 1)), Verdict::Stale);
        t.check_invariants().unwrap();
    }

    #[test]
    fn an_aborted_execution_may_run_again() {
        let mut t = tracker();
        assert_eq!(t.check_duplicate(rpc(4), &lease(100, 1)), Verdict::New);
        t.abort_in_progress(rpc(4));
        assert_eq!(t.check_duplicate(rpc(4), &lease(100, 1)), Verdict::New);
    }

    #[test]
    fn a_lease_that_looks_expired_is_validated_and_only_a_confirmed_expiry_refuses() {
        let mut t = tracker();
        // expiration 50 is not beyond the RPC's own cluster time 60
        assert_eq!(t.check_duplicate(rpc(1), &lease(50, 60)), Verdict::ValidateLease);
        t.on_lease_status(C, &status(true, 200, 70));
        assert_eq!(
            t.check_duplicate(rpc(1), &lease(50, 60)),
            Verdict::New,
            "the service renewed it"
        );
        t.record_completion(rpc(1), 1);
        assert_eq!(t.check_duplicate(rpc(2), &lease(50, 250)), Verdict::ValidateLease);
        t.on_lease_status(C, &status(false, 0, 260));
        assert_eq!(t.check_duplicate(rpc(2), &lease(50, 250)), Verdict::Expired);
        // a retry of what completed before the expiry still gets its result (§5.1)
        assert_eq!(t.check_duplicate(rpc(1), &lease(50, 250)), Verdict::Completed(1));
        assert_eq!(t.observed_cluster_time(), ClusterTime(260));
    }

    #[test]
    fn the_cleaner_collects_only_confirmed_unprotected_idle_clients() {
        let mut t = tracker();
        assert_eq!(t.check_duplicate(rpc(1), &lease(100, 1)), Verdict::New);
        t.record_completion(rpc(1), 1);
        t.observe(ClusterTime(150));
        assert_eq!(t.expiry_candidates(), vec![C]);
        t.protect(C);
        assert!(t.expiry_candidates().is_empty(), "a protected record is not a candidate");
        t.on_lease_status(C, &status(false, 0, 160));
        assert!(t.collect_expired().is_empty(), "protected");
        t.unprotect(C);
        assert_eq!(t.collect_expired(), vec![C]);
        assert_eq!(t.stats().clients, 0);
    }

    #[test]
    fn replayed_records_rebuild_results_and_watermarks() {
        let mut t = tracker();
        t.recover_record(rpc(5), 3, 50);
        t.recover_record(rpc(5), 3, 50); // a duplicate copy after a migration
        t.recover_record(rpc(2), 1, 20); // older than the watermark the later record carried
        assert_eq!(t.check_duplicate(rpc(5), &lease(100, 1)), Verdict::Completed(50));
        assert_eq!(t.check_duplicate(rpc(2), &lease(100, 1)), Verdict::Stale);
        assert_eq!(t.check_duplicate(rpc(4), &lease(100, 1)), Verdict::New);
        t.recover_record(rpc(4), 3, 40); // the leader's own entry, applied
        assert_eq!(t.check_duplicate(rpc(4), &lease(100, 1)), Verdict::Completed(40));
        t.check_invariants().unwrap();
    }

    #[test]
    fn peek_answers_like_check_duplicate_without_recording_anything() {
        let mut t = tracker();
        assert_eq!(t.peek(rpc(1)), Verdict::New);
        assert_eq!(t.stats().clients, 0, "peek creates no record");
        t.recover_record(rpc(2), 0, 20);
        t.recover_record(rpc(4), 2, 40); // acknowledges 1 and 2
        assert_eq!(t.peek(rpc(2)), Verdict::Stale);
        assert_eq!(t.peek(rpc(3)), Verdict::New);
        assert_eq!(t.peek(rpc(4)), Verdict::Completed(40));
        assert_eq!(t.check_duplicate(rpc(3), &lease(100, 1)), Verdict::New);
        assert_eq!(t.peek(rpc(3)), Verdict::InProgress);
        assert_eq!(t.peek(rpc(3)), Verdict::InProgress, "and again: nothing changed");
        assert_eq!(
            t.completed_records(),
            vec![(C, 2, vec![(4, 40)])],
            "the in-progress slot is no record"
        );
        // Replaying the export rebuilds the same answers.
        let mut u = tracker();
        for (c, ack, records) in t.completed_records() {
            u.recover_ack(c, ack);
            for (seq, r) in records {
                u.recover_record(RpcId { client_id: c, seq }, ack, r);
            }
        }
        assert_eq!(
            (u.peek(rpc(2)), u.peek(rpc(4)), u.ack_of(C)),
            (Verdict::Stale, Verdict::Completed(40), 2)
        );
    }

    /// A model of one client's RPCs against the tracker: whatever the order of arrivals,
    /// completions, aborts, acks and replays, no RPC id gets two `New`s without an abort in
    /// between (R-G1), every `Completed` carries the recorded result (R-G2) and an RPC at or
    /// below an acknowledged watermark is never `New` (§7 inv. 5).
    #[derive(Clone, Debug)]
    enum Step {
        Arrive(u64),
        Complete(u64),
        Abort(u64),
        Ack(u64),
        Replay(u64),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (1u64..12).prop_map(Step::Arrive),
            (1u64..12).prop_map(Step::Complete),
            (1u64..12).prop_map(Step::Abort),
            (1u64..12).prop_map(Step::Ack),
            (1u64..12).prop_map(Step::Replay),
        ]
    }

    proptest! {
        #[test]
        fn no_rpc_executes_twice_and_every_duplicate_gets_the_first_result(steps in proptest::collection::vec(step(), 0..120)) {
            let mut t = tracker();
            let mut running = std::collections::BTreeSet::new();
            let mut done = std::collections::BTreeMap::new();
            let mut acked = 0u64;
            for s in steps {
                match s {
                    Step::Arrive(seq) => match t.check_duplicate(rpc(seq), &lease(u64::MAX, 1)) {
                        Verdict::New => {
                            prop_assert!(seq > acked, "an acknowledged RPC executed");
                            prop_assert!(!running.contains(&seq) && !done.contains_key(&seq), "RPC {} executed twice", seq);
                            running.insert(seq);
                        }
                        Verdict::Completed(r) => prop_assert_eq!(Some(&r), done.get(&seq)),
                        Verdict::InProgress => prop_assert!(running.contains(&seq)),
                        Verdict::Stale => prop_assert!(seq <= acked),
                        v => prop_assert!(false, "unexpected {:?}", v),
                    },
                    Step::Complete(seq) => {
                        if running.remove(&seq) {
                            t.record_completion(rpc(seq), seq * 100);
                            done.insert(seq, seq * 100);
                        }
                    }
                    Step::Abort(seq) => {
                        if running.remove(&seq) {
                            t.abort_in_progress(rpc(seq));
                        }
                    }
                    Step::Ack(fi) => {
                        // a client acknowledges only what completed, contiguously
                        let fi = (acked + 1..=fi).take_while(|s| done.contains_key(s)).last().map_or(acked + 1, |s| s + 1);
                        t.process_ack(C, fi);
                        acked = acked.max(fi - 1);
                    }
                    Step::Replay(seq) => {
                        if let Some(&r) = done.get(&seq) {
                            t.recover_record(rpc(seq), 0, r);
                        }
                    }
                }
                prop_assert!(t.check_invariants().is_ok(), "{:?}", t.check_invariants());
            }
        }
    }
}
