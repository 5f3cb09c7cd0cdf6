//! The host driver: N [`Host`] cores — the whole server's decision logic, the same type
//! `strata-node` pumps — on a simulated network with a per-link delay matrix, loss and cuts,
//! per-node clocks, and disks that lose unsynced data on a crash: every shard replica's log is
//! a `strata-logstore` [`ShardStore`] over a [`SimBackend`], the adapter the server runs over
//! its real disk. Effects are executed in one place, [`HostCluster::execute`], as the node's
//! driver does: storage opens and catalog saves answered at once, log records flushed and
//! reported after the disk's latency, one timer per node.
//!
//! Simulated clients ([`super::client`]) reach the nodes through the same event queue.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use strata_core::{Prng, Route};
use strata_host::{Host, HostConfig, HostEffects, ShardId, ShardKey, Storage};
use strata_logstore::ShardStore;
use strata_rc::RcConfig;
use strata_storage::{SimBackend, WalConfig};
use strata_wire::client::{ClientRequest, ClientResponse};
use strata_wire::peer::PeerMessage;
use strata_wire::{Instant, NodeId};

use crate::guard::guarded;

/// What became of a node-level message (`strata_host::courier`).
pub type MailOutcome = Result<strata_host::courier::Delivered, strata_host::courier::MailError>;

/// What the network between nodes does.
#[derive(Clone, Debug)]
pub struct HostNet {
    /// One-way delay from node `i` to node `j` is `delay_us[i][j]` plus up to `jitter_us`
    /// (a geo deployment sets a matrix; a LAN one the same value everywhere).
    pub delay_us: Vec<Vec<u64>>,
    pub jitter_us: u64,
    /// Probability that a peer message is lost.
    pub loss: f64,
    /// One-way delay between a client and a node.
    pub client_delay_us: u64,
    /// Probability that a client request or reply is lost.
    pub client_loss: f64,
    /// Every write acknowledgement (`LogWritten`) is lost in this window, so writes executed
    /// just before a shard move's freeze are retried after it.
    pub reply_blackout: Option<(Instant, Instant)>,
}

impl HostNet {
    /// The same delay on every link, no loss.
    pub fn uniform(n: usize, delay_us: u64) -> HostNet {
        HostNet {
            delay_us: vec![vec![delay_us; n]; n],
            jitter_us: delay_us / 5,
            loss: 0.0,
            client_delay_us: delay_us,
            client_loss: 0.0,
            reply_blackout: None,
        }
    }
}

/// An event on the simulator's queue.
enum Ev {
    Peer { from: usize, to: usize, msg: PeerMessage },
    Request { client: usize, node: usize, req: ClientRequest },
    Reply { client: usize, resp: ClientResponse },
    Disk { node: usize, incarnation: u64, shard: ShardId, token: u64 },
    Tick { node: usize },
    Client { client: usize },
}

/// One shard replica's disk at one node: survives crashes (what it synced).
struct SimShardDisk {
    id: ShardId,
    backend: SimBackend,
    /// Open while the replica runs.
    store: Option<ShardStore<SimBackend>>,
}

/// One node: its host (none while crashed) and its disks.
pub struct SimHostNode {
    pub host: Option<Host>,
    incarnation: u64,
    clock_offset: Duration,
    /// The stored catalog (saves are atomic: the whole file or the old one).
    catalog: Vec<u8>,
    disks: BTreeMap<(String, ShardKey, u32), SimShardDisk>,
    armed: Option<Instant>,
    /// The host panicked (an invariant broke): the message.
    pub failure: Option<String>,
}

/// N hosts, their clients and the network (module docs).
pub struct HostCluster {
    pub now: Instant,
    pub nodes: Vec<SimHostNode>,
    pub ids: Vec<NodeId>,
    pub net: HostNet,
    cut: BTreeSet<(usize, usize)>,
    queue: BTreeMap<(Instant, u64), Ev>,
    seq: u64,
    prng: Prng,
    pub disk_latency: Duration,
    pub lease_term: Duration,
    /// Every host's `shard_rate_limit` (set before nodes restart to take effect).
    pub shard_rate_limit: Option<u32>,
    effects: HostEffects,
    /// Replies for clients, taken by the client driver.
    pub(crate) client_inbox: Vec<(usize, ClientResponse)>,
    /// Clients whose timer fired.
    pub(crate) client_wakes: Vec<usize>,
    /// Every failure to start or open a shard replica, for the report.
    pub open_failures: Vec<String>,
}

impl HostCluster {
    pub fn new(
        n: usize,
        net: HostNet,
        lease_term: Duration,
        seed: u64,
        shard_rate_limit: Option<u32>,
    ) -> HostCluster {
        let mut prng = Prng::new(seed);
        let ids: Vec<NodeId> = (0..n as u32).map(NodeId).collect();
        let nodes = (0..n)
            .map(|_| SimHostNode {
                host: None,
                incarnation: 0,
                // Clocks are skewed by up to 50 ms; each keeps increasing across restarts.
                clock_offset: Duration::from_micros(prng.range(0, 50_000)),
                catalog: Vec::new(),
                disks: BTreeMap::new(),
                armed: None,
                failure: None,
            })
            .collect();
        let mut c = HostCluster {
            now: Instant(1_000_000_000),
            nodes,
            ids,
            net,
            cut: BTreeSet::new(),
            queue: BTreeMap::new(),
            seq: 0,
            prng,
            disk_latency: Duration::from_micros(500),
            lease_term,
            shard_rate_limit,
            effects: HostEffects::default(),
            client_inbox: Vec::new(),
            client_wakes: Vec::new(),
            open_failures: Vec::new(),
        };
        for i in 0..n {
            c.start(i);
        }
        c
    }

    fn node_now(&self, i: usize) -> Instant {
        self.now + self.nodes[i].clock_offset
    }

    fn config(&mut self, i: usize) -> HostConfig {
        let inc = self.nodes[i].incarnation;
        let mut rc = RcConfig::new(self.ids[i], self.ids.clone());
        // A fresh session-id range per incarnation (Kite §6, restart).
        rc.session_index_base = (inc as u32) << 16;
        rc.seed = self.prng.next_u64();
        HostConfig {
            rc,
            rifl: strata_host::rifl_config(self.lease_term),
            seed: self.prng.next_u64(),
            shard_rate_limit: self.shard_rate_limit,
        }
    }

    /// Starts (or restarts) node `i` from its disks.
    pub fn start(&mut self, i: usize) {
        self.nodes[i].incarnation += 1;
        let cfg = self.config(i);
        let host =
            Host::new(cfg, &self.nodes[i].catalog).expect("a host starts from its own catalog");
        self.nodes[i].host = Some(host);
        self.nodes[i].armed = None;
        self.execute(i);
    }

    /// Power failure at node `i`: the host is gone and every unsynced write with it.
    pub fn crash(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        node.host = None;
        for d in node.disks.values_mut() {
            d.store = None;
            d.backend.crash();
        }
    }

    pub fn is_up(&self, i: usize) -> bool {
        self.nodes[i].host.is_some()
    }

    /// Cuts the links between `a` and `b` both ways.
    pub fn partition(&mut self, a: usize, b: usize) {
        self.cut.insert((a, b));
        self.cut.insert((b, a));
    }

    pub fn heal(&mut self) {
        self.cut.clear();
    }

    fn push(&mut self, at: Instant, ev: Ev) {
        self.seq += 1;
        self.queue.insert((at, self.seq), ev);
    }

    /// A client request to node `node`, arriving after the client link's delay (or lost).
    pub fn send_request(&mut self, client: usize, node: usize, req: ClientRequest) {
        if self.prng.chance(self.net.client_loss) {
            return;
        }
        let at = self.now + Duration::from_micros(self.net.client_delay_us);
        self.push(at, Ev::Request { client, node, req });
    }

    /// Wakes client `client` at `at`.
    pub fn wake_client_at(&mut self, client: usize, at: Instant) {
        self.push(at.max(self.now), Ev::Client { client });
    }

    /// Runs one event; `false` when the queue is empty or the next event is after `until`.
    pub fn step(&mut self, until: Instant) -> bool {
        let Some((&(at, seq), _)) = self.queue.first_key_value() else { return false };
        if at > until {
            return false;
        }
        let ev = self.queue.remove(&(at, seq)).expect("first");
        self.now = self.now.max(at);
        match ev {
            Ev::Peer { from, to, msg } => {
                if self.cut.contains(&(from, to)) {
                    return true;
                }
                let now = self.node_now(to);
                let from_id = self.ids[from];
                self.input(to, |h| h.on_peer_message(now, from_id, msg));
            }
            Ev::Request { client, node, req } => {
                let now = self.node_now(node);
                // The simulated clients are operators: they hold the admin role (who may do
                // what is `strata_host::auth`'s, tested there and on real nodes).
                self.input(node, |h| {
                    h.on_connected(client as Route, Some(strata_wire::Role::Admin));
                    h.on_client_request(now, client as Route, req)
                });
            }
            Ev::Reply { client, resp } => self.client_inbox.push((client, resp)),
            Ev::Disk { node, incarnation, shard, token } => {
                if self.nodes[node].incarnation == incarnation {
                    let now = self.node_now(node);
                    self.input(node, |h| h.on_shard_persisted(now, shard, token));
                }
            }
            Ev::Tick { node } => {
                self.nodes[node].armed = None;
                let now = self.node_now(node);
                self.input(node, |h| h.on_tick(now));
            }
            Ev::Client { client } => self.client_wakes.push(client),
        }
        true
    }

    /// Runs `f` on node `i`'s host (if it is up), checks its invariants, executes its effects.
    fn input(&mut self, i: usize, f: impl FnOnce(&mut Host)) {
        let Some(host) = self.nodes[i].host.as_mut() else { return };
        let outcome = guarded(|| {
            f(host);
            host.check_invariants();
        });
        if let Err(e) = outcome {
            self.nodes[i].failure.get_or_insert(e);
            self.crash(i);
            return;
        }
        self.execute(i);
    }

    /// Executes node `i`'s effects: the one place the simulator does (as `Driver::execute` in
    /// the node). Opens and catalog saves are answered at once; log records are flushed now
    /// and reported after the disk latency.
    fn execute(&mut self, i: usize) {
        loop {
            let Some(host) = self.nodes[i].host.as_mut() else { return };
            host.poll_effects(&mut self.effects);
            if self.effects.is_empty() {
                break;
            }
            let sends: Vec<_> = self.effects.send.drain(..).collect();
            for (to, msg) in sends {
                let j = to.0 as usize;
                if self.prng.chance(self.net.loss) {
                    continue;
                }
                let base = self.net.delay_us[i][j];
                let jitter = self.prng.range(0, self.net.jitter_us + 1);
                let at = self.now + Duration::from_micros(base + jitter);
                self.push(at, Ev::Peer { from: i, to: j, msg });
            }
            let replies: Vec<_> = self.effects.reply.drain(..).collect();
            let blackout =
                self.net.reply_blackout.is_some_and(|(a, b)| a <= self.now && self.now < b);
            for (route, resp) in replies {
                let ack = matches!(resp.body, strata_wire::client::Response::LogWritten { .. });
                if (blackout && ack) || self.prng.chance(self.net.client_loss) {
                    continue;
                }
                let at = self.now + Duration::from_micros(self.net.client_delay_us);
                self.push(at, Ev::Reply { client: route as usize, resp });
            }
            self.effects.fault.clear(); // link faults are the simulator's own knobs
            let storage = std::mem::take(&mut self.effects.storage);
            for request in storage {
                self.storage(i, request);
            }
        }
        let now = self.node_now(i);
        let Some(host) = self.nodes[i].host.as_ref() else { return };
        if let Some(t) = host.poll_timeout() {
            if self.nodes[i].armed.is_none_or(|a| t < a) {
                self.nodes[i].armed = Some(t);
                // The node's deadline, in global time.
                let at = self.now + Duration::from_nanos(t.0.saturating_sub(now.0));
                self.push(at, Ev::Tick { node: i });
            }
        }
    }

    fn storage(&mut self, i: usize, request: Storage) {
        let now = self.node_now(i);
        let node = &mut self.nodes[i];
        match request {
            Storage::Log { shard, records } => {
                let Some(d) = node.disks.values_mut().find(|d| d.id == shard) else { return };
                let Some(store) = d.store.as_mut() else { return };
                match store.execute(records) {
                    Ok(Some(token)) => {
                        let at = self.now + self.disk_latency;
                        let incarnation = node.incarnation;
                        self.push(at, Ev::Disk { node: i, incarnation, shard, token });
                    }
                    Ok(None) => {}
                    Err(e) => {
                        let e = e.to_string();
                        if let Some(h) = node.host.as_mut() {
                            h.on_shard_failed(shard, &e);
                        }
                    }
                }
            }
            Storage::Open { shard, table, install } => {
                let key = (table.clone(), shard.key(), shard.generation);
                if install.is_some() {
                    node.disks.remove(&key); // a fresh directory
                }
                let d = node.disks.entry(key).or_insert_with(|| SimShardDisk {
                    id: shard,
                    backend: SimBackend::new(),
                    store: None,
                });
                let result = (|| {
                    if let Some(snapshot) = install {
                        ShardStore::install_moved_in(
                            d.backend.clone(),
                            d.backend.clone(),
                            WalConfig::default(),
                            *snapshot,
                        )
                        .map_err(|e| e.to_string())?;
                    }
                    let (store, opened) = ShardStore::open(
                        d.backend.clone(),
                        d.backend.clone(),
                        WalConfig::default(),
                    )
                    .map_err(|e| e.to_string())?;
                    d.store = Some(store);
                    Ok(opened.state)
                })();
                let host = node.host.as_mut().expect("effects come from a running host");
                if let Err(e) = host.on_shard_opened(now, shard, result) {
                    self.open_failures.push(format!("n{i}: {e}"));
                }
            }
            Storage::Close { shard, table, remove } => {
                let key = (table, shard.key(), shard.generation);
                if remove {
                    node.disks.remove(&key);
                } else if let Some(d) = node.disks.get_mut(&key) {
                    d.store = None;
                }
            }
            Storage::Catalog { token, bytes } => {
                node.catalog = bytes;
                let host = node.host.as_mut().expect("effects come from a running host");
                host.on_catalog_saved(now, token, Ok(()));
            }
        }
    }

    /// Runs events until `until` (or the queue empties).
    pub fn run_until(&mut self, until: Instant) {
        while self.step(until) {}
        self.now = self.now.max(until);
    }

    /// Node `i` sends an echo message to the leader of `table`'s `shard` (the host's courier):
    /// its id and the node's incarnation, or `None` when the node is down.
    pub fn mail(
        &mut self,
        i: usize,
        table: &str,
        shard: u32,
        body: bytes::Bytes,
    ) -> Option<(u64, u64)> {
        let now = self.node_now(i);
        let host = self.nodes[i].host.as_mut()?;
        let id = host
            .send_to_leader(now, table, shard, strata_host::courier::SERVICE_ECHO, body)
            .ok()?;
        self.execute(i);
        Some((id, self.nodes[i].incarnation))
    }

    /// The outcomes of node `i`'s messages since the last call, with its incarnation.
    pub fn take_mail_results(&mut self, i: usize) -> Vec<(u64, u64, MailOutcome)> {
        let incarnation = self.nodes[i].incarnation;
        let Some(host) = self.nodes[i].host.as_mut() else { return Vec::new() };
        host.take_mail_results().into_iter().map(|(id, r)| (id, incarnation, r)).collect()
    }

    pub fn incarnation(&self, i: usize) -> u64 {
        self.nodes[i].incarnation
    }

    /// Node `i`'s shard replicas on disk right now (table, shard, generation).
    pub fn hosted(&self, i: usize) -> Vec<(String, u32, u32)> {
        self.nodes[i].disks.keys().map(|(t, k, g)| (t.clone(), k.1, *g)).collect()
    }
}
