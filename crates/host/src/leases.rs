//! RIFL's leases in the node (`specs/rifl.md` §5.5, §5.6, R-D1): the lease service, run by the
//! leader of the system log table `__leases`, and the lease check every linearizable RPC
//! passes before an engine sees it.
//!
//! # The service on the store's own consensus (R-D1)
//!
//! The service's durable state (the live lease ids, the reserved-id mark, the safe cluster
//! time) is the applied state of `__leases`: each [`LeaseCommand`] is a write to it (a key per
//! lease id, `r` for the reservation, `s` for the safe time), proposed by the serving node and
//! applied by the service only once the log acknowledges it — a `Sync` table, so fsynced at a
//! majority. The node whose `__leases` replica is the ready leader (sync phase done, every
//! committed entry applied, leader lease held) serves: it rebuilds [`DurableLeases`] from the
//! applied keys and starts the service as §5.5.2's restart says (clock from the persisted safe
//! time, every known lease renewed for a full term, ids from a fresh block). When it loses the
//! leadership it stops serving and tells waiting clients where the leader is.
//!
//! The service's own writes need RIFL envelopes like any log write: the client id is
//! `SERVICE_CLIENT - (epoch << 20) - start` — fresh for every start of the service (client
//! lease ids count up from 1 and never get near) — and the seq counts from 1 within the start,
//! each write acknowledging the ones before it. An id per epoch is not enough: a leader whose
//! lease lapses for a moment stops and starts the service again in the same epoch, and its
//! seqs from 1 would be filtered as duplicates of the first start's writes.
//!
//! # The lease check (§5.5.3)
//!
//! [`LeaseValidator`] decides: alive by the observed cluster clock (the RPC runs, carrying the
//! best expiration known, so an engine's own check agrees), ask the service (the RPC is held
//! here, by client, and the question goes to the `__leases` leader as a peer message, or is
//! answered in place if this node serves), or expired on the service's word (`ExpiredLease`).
//! An answer "expired" also makes the node collect the client's completion records (§5.6):
//! the host hands those ids to the rc engine and the shards.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use bytes::Bytes;
use strata_log::{WriteAck, WriteError, WriteOp};
use strata_rifl::{
    DurableLeases, LeaseCheck, LeaseCommand, LeaseService, LeaseValidator, Renewal, RequestTracker,
    RiflConfig, WINDOW,
};
use strata_wire::client::{
    ClientRequest, ClientResponse, ErrorCode, LogFailure, Request, Response,
};
use strata_wire::peer::PeerMessage;
use strata_wire::rifl::{ClusterTime, LeaseInfo, LeaseStatus, Rifl, RpcId};
use strata_wire::{Instant, NodeId};
use tracing::{info, warn};

use strata_core::Route;

use crate::catalog::LEASE_TABLE;
use crate::effects::HostEffects;
use crate::shards::Shards;

/// The service's own RIFL client id in epoch `e` of `__leases`, start `k` of the service in
/// that epoch, is `SERVICE_CLIENT - (e << 20) - k` (module docs).
const SERVICE_CLIENT: u64 = u64::MAX;
/// A question to the service unanswered this long is asked again (the leader may have moved).
const QUERY_RETRY: Duration = Duration::from_millis(200);
/// A forwarded renewal unanswered this long is answered `Unavailable` (the client retries).
const FORWARD_TIMEOUT: Duration = Duration::from_secs(1);

/// RIFL's parameters for a cluster whose leases last `term` (§3.5 defaults scaled to the
/// term: renew at half the term, stop new RPCs in the last tenth (at most one minute),
/// cleaners every tenth).
pub fn rifl_config(term: Duration) -> RiflConfig {
    RiflConfig {
        lease_term: term,
        renew_before: term / 2,
        danger: (term / 10).min(Duration::from_secs(60)),
        cleaner_period: term / 10,
        ..RiflConfig::default()
    }
}

/// What the driver must do after the lease layer heard something.
#[derive(Default)]
pub(crate) struct Released {
    /// Held RPCs to dispatch again (they are checked again on the way in).
    pub requests: Vec<(Route, ClientRequest)>,
    /// Clients the service confirmed expired: collect their completion records (§5.6).
    pub expired: Vec<u64>,
}

/// Who waits for a renewal's grant.
enum Waiter {
    Client(Route, u64),
    /// A node that forwarded its client's renewal, with its number for it.
    Peer(NodeId, u64),
}

impl Waiter {
    /// The grant, or `None`: not granted here (the client tries again, at the leader).
    fn answer(self, grant: Option<LeaseStatus>, out: &mut HostEffects) {
        match self {
            Waiter::Client(route, corr) => {
                let body =
                    grant.map_or(Response::LogRejected(LogFailure::Unavailable), Response::Lease);
                out.reply.push((route, ClientResponse { corr, body }));
            }
            Waiter::Peer(node, req) => {
                out.send.push((node, PeerMessage::LeaseRenewed { req, grant }))
            }
        }
    }
}

struct Term {
    epoch: u32,
    /// The service's RIFL client id for this start, and its tracker: `first_incomplete` must
    /// not pass a write whose answer has not come back (the log would then answer it `Stale`).
    client_id: u64,
    tracker: RequestTracker,
    /// Commands waiting for room in the tracker's window.
    queued: VecDeque<LeaseCommand>,
}

pub(crate) struct Leases {
    me: NodeId,
    config: RiflConfig,
    service: LeaseService,
    /// Set while this node serves the service (its `__leases` replica is the ready leader).
    term: Option<Term>,
    validator: LeaseValidator,
    /// RPCs waiting for an answer about their client's lease.
    held: BTreeMap<u64, Vec<(Route, ClientRequest)>>,
    /// Commands proposed to `__leases`, by write token, with their seq.
    proposed: BTreeMap<u64, (u64, LeaseCommand)>,
    /// Renewals waiting for their new lease's `Create` to be durable: lease id -> requesters.
    creating: BTreeMap<u64, Vec<Waiter>>,
    /// Renewals this node forwarded to the service's leader: number -> client, and when.
    forwarded: BTreeMap<u64, (Route, u64, Instant)>,
    next_forward: u64,
    /// Answers of the service at this node to this node's own questions.
    local_answers: Vec<(u64, LeaseStatus)>,
    next_tick: Instant,
    /// Starts of the service in the current epoch of `__leases`.
    starts: (u32, u64),
    /// RPCs refused because their lease fields were impossible (`LeaseCheck::Invalid`).
    pub invalid_envelopes: u64,
}

impl Leases {
    pub fn new(me: NodeId, config: RiflConfig) -> Leases {
        Leases {
            me,
            service: LeaseService::new(config.clone()),
            validator: LeaseValidator::new(&config, QUERY_RETRY),
            config,
            term: None,
            held: BTreeMap::new(),
            proposed: BTreeMap::new(),
            creating: BTreeMap::new(),
            forwarded: BTreeMap::new(),
            next_forward: 0,
            local_answers: Vec::new(),
            next_tick: Instant::ZERO,
            starts: (0, 0),
            invalid_envelopes: 0,
        }
    }

    // ---- the lease check ----

    /// §5.5.3 for an arriving linearizable RPC: `Some` to run it now (its envelope carries the
    /// best known expiration), `None` if it was held or answered `ExpiredLease`.
    pub fn admit(
        &mut self,
        now: Instant,
        route: Route,
        mut req: ClientRequest,
        shards: &Shards,
        out: &mut HostEffects,
    ) -> Option<ClientRequest> {
        let Some(env) = req.rifl.as_mut().filter(|e| e.check().is_ok()) else {
            return Some(req); // no envelope, or a bad one: the engine answers it
        };
        let client = env.rpc.client_id;
        match self.validator.check(&env.lease, now) {
            LeaseCheck::Alive { expiration } => {
                env.lease.expiration = expiration;
                Some(req)
            }
            LeaseCheck::Expired => {
                let body = Response::Error {
                    code: ErrorCode::ExpiredLease,
                    message: format!("{}: the client's lease expired (confirmed by the lease service); outcome of its unfinished requests unknown", env.rpc),
                };
                out.reply.push((route, ClientResponse { corr: req.corr, body }));
                None
            }
            LeaseCheck::Invalid(why) => {
                self.invalid_envelopes += 1;
                warn!(client, why, "refused an RPC whose lease no grant produces");
                let body = Response::Error {
                    code: ErrorCode::BadEnvelope,
                    message: format!("{}: {why}", env.rpc),
                };
                out.reply.push((route, ClientResponse { corr: req.corr, body }));
                None
            }
            LeaseCheck::Ask => {
                self.held.entry(client).or_default().push((route, req));
                self.ask(now, client, shards, out);
                None
            }
        }
    }

    /// Sends a question about `client` to the service (or answers it here) unless one is in
    /// flight.
    fn ask(&mut self, now: Instant, client: u64, shards: &Shards, out: &mut HostEffects) {
        if !self.validator.should_ask(client, now) {
            return;
        }
        if self.term.is_some() {
            // This node serves: the answer is local (taken by the driver, `take_local`).
            if let Some(status) = self.service.status(client, now) {
                self.local_answers.push((client, status));
            }
            return;
        }
        match shards.leader_of(LEASE_TABLE) {
            Some(leader) if leader != self.me => {
                out.send.push((leader, PeerMessage::LeaseQuery { client_id: client }))
            }
            _ => {} // no leader known: asked again after QUERY_RETRY
        }
    }

    /// Answers to questions this node put to itself (it serves the service): hand each to
    /// [`Leases::on_answer`].
    pub fn take_local(&mut self) -> Vec<(u64, LeaseStatus)> {
        std::mem::take(&mut self.local_answers)
    }

    /// The service's answer about `client`.
    pub fn on_answer(&mut self, now: Instant, client: u64, status: &LeaseStatus) -> Released {
        let mut r = Released::default();
        if self.validator.on_status(client, status, now) {
            info!(client, cluster_time = %status.cluster_time, "lease service: client lease expired; collecting its records");
            r.expired.push(client);
        }
        r.requests = self.held.remove(&client).unwrap_or_default();
        r
    }

    /// A peer's question: answered if this node serves the service (else the peer asks
    /// again, by then at the new leader).
    pub fn on_query(&mut self, now: Instant, from: NodeId, client: u64, out: &mut HostEffects) {
        if self.term.is_none() {
            return;
        }
        if let Some(status) = self.service.status(client, now) {
            out.send.push((from, PeerMessage::LeaseAnswer { client_id: client, status }));
        }
    }

    // ---- the service ----

    /// `RenewLease` / `LeaseInfo` from a client. A renewal reaching a node that does not
    /// serve the service is forwarded to the `__leases` leader (a client may know only one
    /// node); `LeaseInfo` is answered only by the leader.
    #[allow(clippy::too_many_arguments)]
    pub fn on_request(
        &mut self,
        now: Instant,
        route: Route,
        corr: u64,
        body: &Request,
        shards: &mut Shards,
        out: &mut HostEffects,
    ) {
        match *body {
            Request::RenewLease { lease_id } => {
                if self.term.is_some() {
                    return self.renew(now, lease_id, Waiter::Client(route, corr), shards, out);
                }
                match shards.leader_of(LEASE_TABLE).filter(|&n| n != self.me) {
                    Some(leader) => {
                        self.next_forward += 1;
                        self.forwarded.insert(self.next_forward, (route, corr, now));
                        out.send.push((
                            leader,
                            PeerMessage::LeaseRenew { req: self.next_forward, lease_id },
                        ));
                    }
                    // No leader known yet (an election): the client tries again shortly.
                    None => Waiter::Client(route, corr).answer(None, out),
                }
            }
            Request::LeaseInfo { lease_id } => {
                let body = match self.service.status(lease_id, now) {
                    Some(status) => Response::Lease(status),
                    None => Response::LogRejected(LogFailure::NotLeader {
                        hint: shards.leader_of(LEASE_TABLE).filter(|&n| n != self.me),
                    }),
                };
                out.reply.push((route, ClientResponse { corr, body }));
            }
            _ => unreachable!("only lease requests come here"),
        }
    }

    /// A renewal forwarded by `from`.
    #[allow(clippy::too_many_arguments)]
    pub fn on_forwarded(
        &mut self,
        now: Instant,
        from: NodeId,
        req: u64,
        lease_id: u64,
        shards: &mut Shards,
        out: &mut HostEffects,
    ) {
        if self.term.is_none() {
            return out.send.push((from, PeerMessage::LeaseRenewed { req, grant: None }));
        }
        self.renew(now, lease_id, Waiter::Peer(from, req), shards, out);
    }

    /// The leader's grant for a renewal this node forwarded.
    pub fn on_renewed(&mut self, req: u64, grant: Option<LeaseStatus>, out: &mut HostEffects) {
        if let Some((route, corr, _)) = self.forwarded.remove(&req) {
            Waiter::Client(route, corr).answer(grant, out);
        }
    }

    /// §5.5.2 `RenewLease` at the serving node.
    fn renew(
        &mut self,
        now: Instant,
        lease_id: u64,
        waiter: Waiter,
        shards: &mut Shards,
        out: &mut HostEffects,
    ) {
        match self.service.renew(lease_id, now) {
            Renewal::Granted(g) => waiter.answer(Some(g), out),
            Renewal::Persist { id, commands } => {
                self.creating.entry(id).or_default().push(waiter);
                for cmd in commands {
                    self.propose(now, cmd, shards, out);
                }
            }
            Renewal::NotServing => waiter.answer(None, out),
        }
    }

    /// Writes `cmd` to `__leases`, or queues it while RIFL's window of 512 unanswered writes
    /// is full (a burst of new clients): it goes out as answers come back, in order.
    fn propose(
        &mut self,
        now: Instant,
        cmd: LeaseCommand,
        shards: &mut Shards,
        out: &mut HostEffects,
    ) {
        let Some(term) = self.term.as_mut() else { return }; // stopped meanwhile
        if !term.queued.is_empty() {
            return term.queued.push_back(cmd);
        }
        if let Err(cmd) = self.send(now, cmd, shards, out) {
            if let Some(term) = self.term.as_mut() {
                term.queued.push_back(cmd);
            }
        }
    }

    /// Sends queued commands while the window has room.
    fn send_queued(&mut self, now: Instant, shards: &mut Shards, out: &mut HostEffects) {
        while let Some(cmd) = self.term.as_mut().and_then(|t| t.queued.pop_front()) {
            if let Err(cmd) = self.send(now, cmd, shards, out) {
                if let Some(term) = self.term.as_mut() {
                    term.queued.push_front(cmd);
                }
                return;
            }
        }
    }

    /// One write of the service, if the window has room (else the command comes back).
    fn send(
        &mut self,
        now: Instant,
        cmd: LeaseCommand,
        shards: &mut Shards,
        out: &mut HostEffects,
    ) -> Result<(), LeaseCommand> {
        let Some(term) = self.term.as_mut() else { return Ok(()) }; // stopped: dropped
        let Ok(seq) = term.tracker.new_sequence_num() else { return Err(cmd) };
        let client_id = term.client_id;
        let rifl = Rifl {
            rpc: RpcId { client_id, seq },
            first_incomplete: term.tracker.first_incomplete(),
            lease: LeaseInfo {
                client_id,
                expiration: ClusterTime(u64::MAX),
                timestamp: ClusterTime::ZERO,
            },
        };
        let (key, op) = command_write(&cmd);
        let token = shards.write_internal(now, LEASE_TABLE, rifl, key, op, out);
        self.proposed.insert(token, (seq, cmd));
        Ok(())
    }

    /// The log's answer to one of the service's writes.
    pub fn on_written(
        &mut self,
        now: Instant,
        token: u64,
        result: Result<WriteAck, WriteError>,
        shards: &mut Shards,
        out: &mut HostEffects,
    ) {
        let Some((seq, cmd)) = self.proposed.remove(&token) else { return };
        if let Some(t) = self.term.as_mut() {
            t.tracker.rpc_completed(seq);
        }
        if let Err(e) = result {
            // Not known durable: the service cannot go on from a state it does not know.
            // It restarts from the applied state when this node (or another) leads again.
            warn!(error = %e, ?cmd, "lease service: a command was not made durable; stopping the service");
            return self.stop(out);
        }
        self.service.apply(&cmd, now);
        if let LeaseCommand::Create { id } = cmd {
            for waiter in self.creating.remove(&id).unwrap_or_default() {
                let grant = match self.service.renew(id, now) {
                    Renewal::Granted(g) => Some(g),
                    _ => None,
                };
                waiter.answer(grant, out);
            }
        }
        self.send_queued(now, shards, out);
    }

    fn stop(&mut self, out: &mut HostEffects) {
        self.term = None;
        self.service.step_down();
        self.proposed.clear();
        for waiter in std::mem::take(&mut self.creating).into_values().flatten() {
            waiter.answer(None, out);
        }
    }

    /// Periodic work: follow the `__leases` leadership, run the service's clock and cleaner,
    /// the node's cleaner (§5.6), and ask again about held clients.
    pub fn tick(&mut self, now: Instant, shards: &mut Shards, out: &mut HostEffects) {
        self.next_tick = now + QUERY_RETRY;
        let leads = shards.leads(now, LEASE_TABLE);
        match (&self.term, leads) {
            (Some(t), Some(e)) if t.epoch == e => {}
            (None, None) => {}
            (_, leads) => {
                if self.term.is_some() {
                    info!("lease service: no longer the __leases leader; stopped serving");
                    self.stop(out);
                }
                if let Some(epoch) = leads {
                    let mut durable = DurableState::default();
                    shards.scan(LEASE_TABLE, |k, v| durable.add(k, v));
                    let durable = durable.build();
                    info!(epoch, leases = durable.ids.len(), safe_time = %durable.safe_time, "lease service: serving at the __leases leader");
                    self.service = LeaseService::restore(self.config.clone(), durable);
                    self.service.become_leader(now);
                    let k = if self.starts.0 == epoch { self.starts.1 + 1 } else { 0 };
                    self.starts = (epoch, k);
                    let client_id = SERVICE_CLIENT - (u64::from(epoch) << 20) - (k & 0xf_ffff);
                    self.term = Some(Term {
                        epoch,
                        client_id,
                        tracker: RequestTracker::new(WINDOW),
                        queued: VecDeque::new(),
                    });
                }
            }
        }
        if self.term.is_some() {
            for cmd in self.service.tick(now) {
                self.propose(now, cmd, shards, out);
            }
        }
        for client in self.validator.cleaner(now) {
            self.ask(now, client, shards, out);
        }
        // A forwarded renewal unanswered for a while (leader gone): the client tries again.
        let stale: Vec<u64> = self
            .forwarded
            .iter()
            .filter(|(_, &(_, _, sent))| now.saturating_since(sent) >= FORWARD_TIMEOUT)
            .map(|(&r, _)| r)
            .collect();
        for req in stale {
            self.on_renewed(req, None, out);
        }
        let held: Vec<u64> = self.held.keys().copied().collect();
        for client in held {
            self.ask(now, client, shards, out);
        }
    }

    /// When `tick` next has work.
    pub fn deadline(&self) -> Instant {
        let mut t = self.validator.next_clean();
        if let Some(s) = self.service.poll_timeout() {
            t = t.min(s);
        }
        // Follow the `__leases` leadership and re-ask held questions at the retry pace.
        t.min(self.next_tick)
    }
}

// ---- the service's state as keys of `__leases` ----

const KEY_RESERVED: &[u8] = b"r";
const KEY_SAFE_TIME: &[u8] = b"s";
const LEASE_KEY_PREFIX: u8 = b'l';

fn lease_key(id: u64) -> Bytes {
    let mut k = Vec::with_capacity(9);
    k.push(LEASE_KEY_PREFIX);
    k.extend_from_slice(&id.to_be_bytes());
    Bytes::from(k)
}

fn command_write(cmd: &LeaseCommand) -> (Bytes, WriteOp) {
    let value = |v: u64| WriteOp::Put(Bytes::copy_from_slice(&v.to_le_bytes()));
    match *cmd {
        LeaseCommand::Reserve { up_to } => (Bytes::from_static(KEY_RESERVED), value(up_to)),
        LeaseCommand::SafeTime { t } => (Bytes::from_static(KEY_SAFE_TIME), value(t.as_nanos())),
        LeaseCommand::Create { id } => (lease_key(id), WriteOp::Put(Bytes::new())),
        LeaseCommand::Drop { id } => (lease_key(id), WriteOp::Delete),
    }
}

/// The service's durable state read back from the keys of `__leases`.
#[derive(Default)]
struct DurableState {
    d: DurableLeases,
    ids: Vec<u64>,
}

impl DurableState {
    fn add(&mut self, k: &[u8], v: &[u8]) {
        let u64_of = |v: &[u8]| v.try_into().map(u64::from_le_bytes).unwrap_or(0);
        match k {
            KEY_RESERVED => self.d.max_reserved = u64_of(v),
            KEY_SAFE_TIME => self.d.safe_time = ClusterTime(u64_of(v)),
            [LEASE_KEY_PREFIX, id @ ..] if id.len() == 8 => {
                self.ids.push(u64::from_be_bytes(id.try_into().expect("8 bytes")))
            }
            _ => warn!(key = ?k, "lease table: unknown key ignored"),
        }
    }

    /// Built in bulk from a sorted vector: a start with a million leases stays well under the
    /// 300 ms leader lease (the core task runs it).
    fn build(mut self) -> DurableLeases {
        self.ids.sort_unstable();
        self.d.ids = self.ids.into_iter().collect();
        self.d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_written_as_keys_read_back_as_the_durable_state() {
        let cmds = [
            LeaseCommand::Reserve { up_to: 1000 },
            LeaseCommand::Create { id: 1 },
            LeaseCommand::Create { id: 2 },
            LeaseCommand::Create { id: 300 },
            LeaseCommand::Drop { id: 2 },
            LeaseCommand::SafeTime { t: ClusterTime(7_000_000_000) },
        ];
        // A KV with the writes applied in order (deletes remove the key).
        let mut kv: BTreeMap<Bytes, Bytes> = BTreeMap::new();
        let mut expected = DurableLeases::default();
        for c in &cmds {
            expected.apply(c);
            match command_write(c) {
                (k, WriteOp::Put(v)) => {
                    kv.insert(k, v);
                }
                (k, WriteOp::Delete) => {
                    kv.remove(&k);
                }
                (_, op) => panic!("the lease service writes only puts and deletes: {op:?}"),
            }
        }
        let mut read = DurableState::default();
        for (k, v) in &kv {
            read.add(k, v);
        }
        assert_eq!(read.build(), expected);
        assert_eq!(expected.ids.iter().copied().collect::<Vec<_>>(), vec![1, 300]);
    }

    #[test]
    fn the_lease_config_scales_with_the_term_and_is_valid() {
        for ms in [500, 2000, 30 * 60 * 1000] {
            let c = rifl_config(Duration::from_millis(ms));
            c.validate().unwrap();
            assert_eq!(c.renew_before, c.lease_term / 2);
        }
        assert_eq!(rifl_config(Duration::from_secs(1800)).danger, Duration::from_secs(60));
    }
}
