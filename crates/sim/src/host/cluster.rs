//! The simulator's one cluster loop: N [`Host`] cores — the whole server's decision logic, the
//! same type `strata-node` pumps — on the simulated [`Network`] (per-link base delays for geo,
//! random delay, loss, duplication, reordering, directed cuts), with per-node [`NodeClock`]s
//! (offset and drift), pauses, crashes that lose unsynced data and restarts: each node's shard
//! replicas share one log, a `strata-logstore` [`NodeStore`] over a [`SimBackend`], the adapter
//! the server runs over its real disk. Effects are executed in one place,
//! [`HostCluster::execute`], as the node's driver does: storage opens and catalog saves
//! answered at once; log records wait for the disk's latency (a crash loses them, orca.md
//! §9.6), then run through the store and are reported; one timer per node. Scenario controls:
//! per-node disk stalls, extra delay per directed link (a lagging node) and late timers (a
//! loaded runtime).
//!
//! Three harnesses drive it. The host harness ([`super::client`]) talks to the nodes as
//! remote clients through the event queue (requests and replies cross a client link with its
//! own delay and loss). The rc harness ([`crate::cluster`]) and the ORCA harness
//! ([`crate::orca`]) observe every step: with `observe` on, each input to a node yields a
//! [`Step`] — the node's audit events, the peer messages it sent, the log records it handed
//! to storage and the replies it produced, all in order — that the harness records before the
//! next event runs; their clients sit beside the nodes (`client_input`, replies handed over
//! at once), and the rc harness's own events ride the same queue ([`Stepped::Harness`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use strata_core::{Prng, Route};
use strata_host::{Audit, Host, HostConfig, HostEffects, ShardId, ShardKey, Storage};
use strata_log::{HardState, LogEntry, Persist, RecoveredState};
use strata_logstore::{NodeStore, ShardTag, StoreBug};
use strata_rc::RcConfig;
use strata_storage::{SimBackend, WalConfig};
use strata_wire::client::{ClientRequest, ClientResponse};
use strata_wire::peer::PeerMessage;
use strata_wire::{Instant, NodeId};

use crate::clock::NodeClock;
use crate::guard::guarded;
use crate::net::{NetKnobs, Network};

/// What became of a node-level message (`strata_host::courier`).
pub type MailOutcome = Result<strata_host::courier::Delivered, strata_host::courier::MailError>;

/// What the network between nodes, and between clients and nodes, does.
#[derive(Clone, Debug)]
pub struct HostNet {
    /// One-way base delay from node `i` to node `j` (a geo deployment sets a matrix; a LAN
    /// one the same value everywhere), to which `links` adds its random delay.
    pub delay_us: Vec<Vec<u64>>,
    /// Random delay, loss, duplication and reordering on every peer link.
    pub links: NetKnobs,
    /// One-way delay between a client and a node.
    pub client_delay_us: u64,
    /// Probability that a client request or reply is lost.
    pub client_loss: f64,
    /// Every write acknowledgement (`LogWritten`) is lost in this window, so writes executed
    /// just before a shard move's freeze are retried after it.
    pub reply_blackout: Option<(Instant, Instant)>,
}

impl HostNet {
    /// The same delay on every link (plus up to a fifth of it), no loss.
    pub fn uniform(n: usize, delay_us: u64) -> HostNet {
        HostNet::matrix(vec![vec![delay_us; n]; n], delay_us / 5, 0.0, delay_us, 0.0)
    }

    /// Base delays `delay_us`, plus up to `jitter_us`, loss `loss`; no duplication or
    /// reordering beyond the jitter.
    pub fn matrix(
        delay_us: Vec<Vec<u64>>,
        jitter_us: u64,
        loss: f64,
        client_delay_us: u64,
        client_loss: f64,
    ) -> HostNet {
        HostNet {
            delay_us,
            links: NetKnobs {
                delay_min_us: 0,
                delay_max_us: jitter_us,
                loss,
                dup: 0.0,
                reorder: 0.0,
                reorder_extra_max_us: 0,
            },
            client_delay_us,
            client_loss,
            reply_blackout: None,
        }
    }
}

/// Adjusts node `i`'s host configuration (see [`ClusterOptions::tune`]).
pub type Tune = Box<dyn Fn(usize, &mut HostConfig)>;

/// How a cluster is built (the host harness uses [`HostCluster::new`]'s defaults).
pub struct ClusterOptions {
    pub nodes: usize,
    pub net: HostNet,
    /// Seeds the network (unless `net_prng` is given), the clocks and every host.
    pub seed: u64,
    pub net_prng: Option<Prng>,
    /// Each node's clock; `None`: offsets of up to 50 ms drawn from the seed, no drift.
    pub clocks: Option<Vec<NodeClock>>,
    /// The global instant the run starts at.
    pub start: Instant,
    pub lease_term: Duration,
    pub shard_rate_limit: Option<u32>,
    /// Record every step for an observing harness ([`Step`]); the hosts emit audit events.
    pub observe: bool,
    /// Adjusts node `i`'s configuration at every start (the rc harness's timing knobs and
    /// canaries, the ORCA harness's log configuration).
    pub tune: Option<Tune>,
    /// The catalog every node has stored at the start (`strata_host::catalog::encode`;
    /// empty: none), so a scenario's tables exist from the first instant.
    pub catalog: Vec<u8>,
}

/// An event on the simulator's queue.
enum Ev {
    Peer {
        from: usize,
        to: usize,
        msg: PeerMessage,
    },
    Request {
        client: usize,
        node: usize,
        req: ClientRequest,
    },
    Reply {
        client: usize,
        resp: ClientResponse,
    },
    Disk {
        node: usize,
        incarnation: u64,
        shard: ShardId,
        token: u64,
    },
    /// Node `node`'s tick armed for `at` (stale unless it is still the armed one).
    Tick {
        node: usize,
        at: Instant,
    },
    Client {
        client: usize,
    },
    Harness {
        token: u64,
    },
}

/// An input as the loop queues it for a paused node.
enum Input {
    Peer { from: NodeId, msg: PeerMessage },
    Client { route: Route, req: ClientRequest },
    Disconnected { route: Route },
    Disk { incarnation: u64, shard: ShardId, token: u64 },
    Tick,
}

/// A scripted scenario's rule: every message `drops(from, to, msg)` selects is lost until
/// `until` (counted in `NetStats::dropped_rule`).
pub type DropRule = (Instant, fn(NodeId, NodeId, &PeerMessage) -> bool);

/// The inputs a paused node queued, handed back by [`HostCluster::resume`].
pub struct Backlog {
    node: usize,
    inputs: VecDeque<Input>,
}

/// What one input to one node did (with `observe`): the harness records it before the next
/// event runs.
#[derive(Debug, Default)]
pub struct Step {
    pub node: usize,
    /// The host's audit events, in the order it emitted them.
    pub audit: Vec<Audit>,
    /// The peer messages it sent (before the network decided their fate).
    pub sends: Vec<(NodeId, PeerMessage)>,
    /// Its client replies, in order.
    pub replies: Vec<(Route, ClientResponse)>,
    /// The log records it handed to storage, per shard replica, in order.
    pub persists: Vec<(ShardId, Vec<(u64, Persist)>)>,
}

/// What [`HostCluster::next`] ran.
pub enum Stepped {
    /// An event with nothing for the harness (a lost message, a stale tick, a disk report
    /// without `observe`).
    Quiet,
    /// An input ran at a node (with `observe`).
    Node(Step),
    /// The harness's own event, with its token.
    Harness(u64),
}

/// One shard replica's part of its node's disk: survives crashes (what it synced). Records
/// wait in `pending` for the disk's latency, then go through the node's store in a flush
/// round ([`flush_round`]: the barrier's replica, and every other replica's waiting records
/// with it); `synced` mirrors what the store has synced of this replica (for the checkers'
/// look-ups), and every reopen checks that the store's recovery reads back exactly that.
struct SimShardDisk {
    id: ShardId,
    tag: ShardTag,
    /// While the replica runs.
    open: bool,
    pending: Vec<(u64, Persist)>,
    synced: Vec<LogEntry>,
    hard: HardState,
}

impl SimShardDisk {
    fn new(id: ShardId, table: &str) -> SimShardDisk {
        SimShardDisk {
            id,
            tag: ShardTag::new(table, id.shard, id.generation),
            open: false,
            pending: Vec::new(),
            synced: Vec::new(),
            hard: HardState::default(),
        }
    }

    /// Hands the pending records with a token `<= upto` to the store's buffer, as the node's
    /// disk thread stages a replica's queued batches; the mirror follows (the caller flushes
    /// before anything else happens, so staged is as good as synced).
    fn stage(&mut self, store: &mut NodeStore<SimBackend>, upto: u64) -> Result<(), String> {
        let (staged, rest): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.pending).into_iter().partition(|(t, _)| *t <= upto);
        self.pending = rest;
        if staged.is_empty() {
            return Ok(()); // an earlier flush took them
        }
        if !self.open {
            return Err("the shard's store is closed".into());
        }
        for (_, p) in &staged {
            match p {
                Persist::Append(es) => self.synced.extend(es.iter().cloned()),
                Persist::Truncate { after } => self.synced.retain(|e| e.index <= *after),
                Persist::HardState(h) => self.hard = *h,
                Persist::Sync => {}
            }
        }
        store.stage(&self.tag, staged).map(|_| ()).map_err(|e| e.to_string())
    }
}

/// The node's disk finished a flush for `shard`'s barrier `token`: the records up to it, and —
/// as the runtime's disk thread stages whatever is queued before it flushes — every other
/// open replica's records waiting for the disk, durable with one flush (earlier than those
/// replicas asked; each still learns at its own barrier's completion).
fn flush_round(
    store: Option<&mut NodeStore<SimBackend>>,
    disks: &mut BTreeMap<(String, ShardKey, u32), SimShardDisk>,
    shard: ShardId,
    token: u64,
) -> Result<(), String> {
    let store = store.ok_or("the node's store is closed")?;
    let Some(d) = disks.values_mut().find(|d| d.id == shard) else {
        return Ok(()); // a removed replica's last batch
    };
    d.stage(store, token)?;
    for other in disks.values_mut().filter(|o| o.open && o.id != shard) {
        other.stage(store, u64::MAX)?;
    }
    store.flush().map_err(|e| e.to_string())
}

/// Whether a node processes its inputs.
enum Run {
    Up,
    /// Inputs wait here, in arrival order, until the node resumes.
    Paused(VecDeque<Input>),
}

/// One node: its host (none while crashed) and its disk.
pub struct SimHostNode {
    pub host: Option<Host>,
    incarnation: u64,
    clock: NodeClock,
    /// The last `now` given to the host, so its clock never runs backwards.
    last_local: Instant,
    run: Run,
    /// The stored catalog (saves are atomic: the whole file or the old one).
    catalog: Vec<u8>,
    /// The node's disk, and the log store over it (opened by the first replica, closed by a
    /// crash).
    backend: SimBackend,
    store: Option<NodeStore<SimBackend>>,
    disks: BTreeMap<(String, ShardKey, u32), SimShardDisk>,
    armed: Option<Instant>,
    /// With `tick_lateness`: the global deadline last armed and the drawn instant it fires.
    late_tick: Option<(Instant, Instant)>,
    /// Storage completions are held (`stall_disk`): the shard and token of each.
    disk_stalled: bool,
    stalled: Vec<(ShardId, u64)>,
    /// The host panicked, or an invariant broke: the first message.
    pub failure: Option<String>,
}

/// N hosts, their clients and the network (module docs).
pub struct HostCluster {
    pub now: Instant,
    pub nodes: Vec<SimHostNode>,
    pub ids: Vec<NodeId>,
    pub net: Network,
    delay_us: Vec<Vec<u64>>,
    pub client_delay_us: u64,
    pub client_loss: f64,
    pub reply_blackout: Option<(Instant, Instant)>,
    queue: BTreeMap<(Instant, u64), Ev>,
    seq: u64,
    prng: Prng,
    pub disk_latency: Duration,
    pub lease_term: Duration,
    /// Every host's `shard_rate_limit` (set before nodes restart to take effect).
    pub shard_rate_limit: Option<u32>,
    observe: bool,
    tune: Option<Tune>,
    effects: HostEffects,
    /// The step under way (with `observe`).
    step: Step,
    /// Replies for remote clients, taken by the host harness.
    pub client_inbox: Vec<(usize, ClientResponse)>,
    /// Clients whose timer fired.
    pub(crate) client_wakes: Vec<usize>,
    /// Every failure to start or open a shard replica, for the report.
    pub open_failures: Vec<String>,
    /// A bug planted in every node's log store (a canary of the reopen check).
    pub store_bug: Option<StoreBug>,
    /// Nodes whose `poll_timeout` did not move past a tick at its deadline: `(node, at)`.
    pub stuck: Vec<(usize, Instant)>,
    /// Inputs given to the hosts (one input is one atomic step).
    pub inputs: u64,
    pub drop_rule: Option<DropRule>,
    /// Extra one-way delay per directed link `(from, to)` (a lagging node; `lag`).
    extra_delay: HashMap<(usize, usize), Duration>,
    /// Timers fire up to this late (uniform, drawn once per deadline), while messages and
    /// disk completions keep arriving on time: a loaded runtime whose core task takes queued
    /// inputs before it ticks (the node's does). Zero: every timer fires at its deadline.
    pub tick_lateness: Duration,
    tick_rng: Prng,
}

impl HostCluster {
    /// The host harness's cluster: clocks skewed by up to 50 ms, starting at 1 s.
    pub fn new(
        n: usize,
        net: HostNet,
        lease_term: Duration,
        seed: u64,
        shard_rate_limit: Option<u32>,
    ) -> HostCluster {
        HostCluster::with(ClusterOptions {
            nodes: n,
            net,
            seed,
            net_prng: None,
            clocks: None,
            start: Instant(1_000_000_000),
            lease_term,
            shard_rate_limit,
            observe: false,
            tune: None,
            catalog: Vec::new(),
        })
    }

    pub fn with(o: ClusterOptions) -> HostCluster {
        let mut prng = Prng::new(o.seed);
        let ids: Vec<NodeId> = (0..o.nodes as u32).map(NodeId).collect();
        let clocks = o.clocks.unwrap_or_else(|| {
            // Each keeps increasing across restarts.
            (0..o.nodes)
                .map(|_| NodeClock { offset_ns: prng.range(0, 50_000) * 1_000, drift_ppm: 0 })
                .collect()
        });
        let nodes = clocks
            .into_iter()
            .map(|clock| SimHostNode {
                host: None,
                incarnation: 0,
                clock,
                last_local: Instant::ZERO,
                run: Run::Up,
                catalog: o.catalog.clone(),
                backend: SimBackend::new(),
                store: None,
                disks: BTreeMap::new(),
                armed: None,
                late_tick: None,
                disk_stalled: false,
                stalled: Vec::new(),
                failure: None,
            })
            .collect();
        // The rc harness passes the network stream of its knobs.
        let net_prng = o.net_prng.unwrap_or_else(|| prng.fork());
        let mut c = HostCluster {
            now: o.start,
            nodes,
            ids,
            net: Network::new(o.net.links.clone(), net_prng),
            delay_us: o.net.delay_us,
            client_delay_us: o.net.client_delay_us,
            client_loss: o.net.client_loss,
            reply_blackout: o.net.reply_blackout,
            queue: BTreeMap::new(),
            seq: 0,
            prng,
            disk_latency: Duration::from_micros(500),
            lease_term: o.lease_term,
            shard_rate_limit: o.shard_rate_limit,
            observe: o.observe,
            tune: o.tune,
            effects: HostEffects::default(),
            step: Step::default(),
            client_inbox: Vec::new(),
            client_wakes: Vec::new(),
            open_failures: Vec::new(),
            store_bug: None,
            stuck: Vec::new(),
            inputs: 0,
            drop_rule: None,
            extra_delay: HashMap::new(),
            tick_lateness: Duration::ZERO,
            // Its own stream: the draws of the others stay as they were.
            tick_rng: Prng::new(o.seed ^ 0x7469_636b),
        };
        for i in 0..o.nodes {
            c.start(i);
            c.step = Step::default(); // a start is not an input
        }
        c
    }

    fn node_now(&mut self, i: usize) -> Instant {
        let n = &mut self.nodes[i];
        n.last_local = n.clock.local(self.now).max(n.last_local);
        n.last_local
    }

    fn config(&mut self, i: usize) -> HostConfig {
        let inc = self.nodes[i].incarnation;
        let mut rc = RcConfig::new(self.ids[i], self.ids.clone());
        // A fresh session-id range per incarnation (Kite §6, restart).
        rc.session_index_base = ((inc - 1) as u32) << 16;
        rc.seed = self.prng.next_u64();
        let mut cfg = HostConfig {
            rc,
            rifl: strata_host::rifl_config(self.lease_term),
            seed: self.prng.next_u64(),
            shard_rate_limit: self.shard_rate_limit,
            audit: self.observe,
            log_overrides: Default::default(),
            txn_timeout_per_object: strata_host::TXN_TIMEOUT_PER_OBJECT,
            txn_read_hold: strata_host::TXN_READ_HOLD,
        };
        if let Some(tune) = &self.tune {
            tune(i, &mut cfg);
        }
        cfg
    }

    /// Starts (or restarts) node `i` from its disks: what the start did (with `observe`;
    /// it is not an input).
    pub fn start(&mut self, i: usize) -> Option<Step> {
        self.nodes[i].incarnation += 1;
        let cfg = self.config(i);
        let host =
            Host::new(cfg, &self.nodes[i].catalog).expect("a host starts from its own catalog");
        let n = &mut self.nodes[i];
        n.host = Some(host);
        n.armed = None;
        n.late_tick = None;
        n.run = Run::Up;
        self.step = Step { node: i, ..Step::default() };
        self.execute(i);
        self.rearm(i, false);
        let step = std::mem::take(&mut self.step);
        self.observe.then_some(step)
    }

    /// Power failure at node `i`: the host is gone and every unsynced write with it (the
    /// records still waiting for the disk, orca.md §9.6).
    pub fn crash(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        node.host = None;
        node.armed = None;
        node.late_tick = None;
        node.run = Run::Up;
        node.stalled.clear();
        node.store = None;
        node.backend.crash();
        for d in node.disks.values_mut() {
            d.open = false;
            d.pending.clear();
        }
    }

    /// Holds every storage completion of node `i` (its disk hangs) until
    /// [`HostCluster::unstall_disk`]; a crash loses what was held.
    pub fn stall_disk(&mut self, i: usize) {
        self.nodes[i].disk_stalled = true;
    }

    /// Node `i`'s disk works again: the held completions arrive after the disk's latency.
    pub fn unstall_disk(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        n.disk_stalled = false;
        let (held, incarnation) = (std::mem::take(&mut n.stalled), n.incarnation);
        let at = self.now + self.disk_latency;
        for (shard, token) in held {
            self.push(at, Ev::Disk { node: i, incarnation, shard, token });
        }
    }

    /// Adds `d` of one-way delay on every link to and from node `i` (a lagging node), until
    /// [`HostCluster::heal`].
    pub fn lag(&mut self, i: usize, d: Duration) {
        for j in (0..self.nodes.len()).filter(|&j| j != i) {
            self.extra_delay.insert((i, j), d);
            self.extra_delay.insert((j, i), d);
        }
    }

    /// Node `i`'s clock now (what its host would be given).
    pub fn local(&self, i: usize) -> Instant {
        let n = &self.nodes[i];
        n.clock.local(self.now).max(n.last_local)
    }

    /// What node `i`'s replica of shard `shard` of the table with id `table` has synced: its
    /// entries and hard state (the current generation's; `None` if the node never had it).
    pub fn synced_log(&self, i: usize, table: u32, shard: u32) -> Option<(&[LogEntry], HardState)> {
        let d = self.nodes[i]
            .disks
            .values()
            .filter(|d| d.id.table == table && d.id.shard == shard)
            .max_by_key(|d| d.id.generation)?;
        Some((&d.synced, d.hard))
    }

    pub fn is_up(&self, i: usize) -> bool {
        self.nodes[i].host.is_some()
    }

    /// Node `i` stops processing: its inputs (messages, requests, disk reports) queue up and
    /// its timer waits, until [`HostCluster::resume`].
    pub fn pause(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        if n.host.is_some() && matches!(n.run, Run::Up) {
            n.run = Run::Paused(VecDeque::new());
            n.armed = None;
        }
    }

    pub fn is_paused(&self, i: usize) -> bool {
        matches!(self.nodes[i].run, Run::Paused(_))
    }

    /// A paused node runs again: what queued up while it was paused is handed back, to be
    /// processed in arrival order with [`HostCluster::replay`] (Kite §6, wake-up step 3); new
    /// inputs run at once meanwhile, as at a node that just woke up.
    pub fn resume(&mut self, i: usize) -> Backlog {
        let inputs = match std::mem::replace(&mut self.nodes[i].run, Run::Up) {
            Run::Paused(inbox) => inbox,
            Run::Up => VecDeque::new(),
        };
        self.rearm(i, false);
        Backlog { node: i, inputs }
    }

    /// The next input of `backlog`: `None` once it is empty, else the step it ran (with
    /// `observe`; none if the node went down meanwhile).
    pub fn replay(&mut self, backlog: &mut Backlog) -> Option<Option<Step>> {
        let input = backlog.inputs.pop_front()?;
        Some(self.input(backlog.node, input))
    }

    /// Cuts the links between `a` and `b` both ways.
    pub fn partition(&mut self, a: usize, b: usize) {
        self.net.cut_links(&[(self.ids[a], self.ids[b]), (self.ids[b], self.ids[a])]);
    }

    /// Heals every partition and removes every injected link delay.
    pub fn heal(&mut self) {
        self.net.heal_all();
        self.extra_delay.clear();
    }

    /// Every link healed, no more loss (peer or client), duplication or extra reordering.
    pub fn calm(&mut self) {
        self.net.calm();
        self.client_loss = 0.0;
    }

    fn push(&mut self, at: Instant, ev: Ev) {
        self.seq += 1;
        self.queue.insert((at, self.seq), ev);
    }

    /// A remote client's request to node `node`, arriving after the client link's delay (or
    /// lost).
    pub fn send_request(&mut self, client: usize, node: usize, req: ClientRequest) {
        if self.prng.chance(self.client_loss) {
            return;
        }
        let at = self.now + Duration::from_micros(self.client_delay_us);
        self.push(at, Ev::Request { client, node, req });
    }

    /// A request from a client beside node `node` (on connection `route`), handled now: the
    /// step it ran (with `observe`), or `None` if the node is paused (it waits) or down.
    pub fn client_input(&mut self, node: usize, route: Route, req: ClientRequest) -> Option<Step> {
        self.input(node, Input::Client { route, req })
    }

    /// Connection `route` of a client beside node `node` is gone (its sessions close).
    pub fn disconnect(&mut self, node: usize, route: Route) -> Option<Step> {
        self.input(node, Input::Disconnected { route })
    }

    /// A peer message from `from` to `to` that no host sent (a forged frame from a peer that
    /// passed authentication, for the attack tests), arriving after the link's base delay.
    pub fn inject_peer(&mut self, from: usize, to: usize, msg: PeerMessage) {
        let at = self.now + Duration::from_micros(self.delay_us[from][to]);
        self.push(at, Ev::Peer { from, to, msg });
    }

    /// Sends `body` from remote client `client` to node `node` and runs until its answer, for
    /// up to `within` (`None`: no answer). For scripted tests of a cluster that does not
    /// observe its steps (replies go to `client_inbox`).
    pub fn call(
        &mut self,
        client: usize,
        node: usize,
        rifl: Option<strata_wire::rifl::Rifl>,
        body: strata_wire::client::Request,
        within: Duration,
    ) -> Option<strata_wire::client::Response> {
        let corr = self.inputs | (1 << 61);
        self.send_request(client, node, ClientRequest { corr, rifl, body });
        let until = self.now + within;
        while self.now < until {
            if let Some(i) =
                self.client_inbox.iter().position(|(cl, r)| *cl == client && r.corr == corr)
            {
                return Some(self.client_inbox.remove(i).1.body);
            }
            let step_to = self.now + Duration::from_millis(1);
            self.run_until(step_to);
        }
        None
    }

    /// Wakes client `client` at `at`.
    pub fn wake_client_at(&mut self, client: usize, at: Instant) {
        self.push(at.max(self.now), Ev::Client { client });
    }

    /// Puts the harness's event `token` on the queue at `at`.
    pub fn schedule(&mut self, at: Instant, token: u64) {
        self.push(at.max(self.now), Ev::Harness { token });
    }

    /// The instant of the next event, if any.
    pub fn next_at(&self) -> Option<Instant> {
        self.queue.first_key_value().map(|(&(at, _), _)| at)
    }

    /// Runs the next event if it is due by `until`: what it did, or `None` (queue empty, or
    /// the next event is later).
    pub fn next(&mut self, until: Instant) -> Option<Stepped> {
        let (&(at, seq), _) = self.queue.first_key_value()?;
        if at > until {
            return None;
        }
        let ev = self.queue.remove(&(at, seq)).expect("first");
        self.now = self.now.max(at);
        let step = match ev {
            Ev::Peer { from, to, msg } => {
                if self.nodes[to].host.is_none() {
                    self.net.stats.dropped_dead += 1;
                    return Some(Stepped::Quiet);
                }
                if !self.net.admits(self.ids[from], self.ids[to]) {
                    return Some(Stepped::Quiet);
                }
                self.net.stats.delivered += 1;
                self.input(to, Input::Peer { from: self.ids[from], msg })
            }
            Ev::Request { client, node, req } => {
                self.input(node, Input::Client { route: client as Route, req })
            }
            Ev::Reply { client, resp } => {
                self.client_inbox.push((client, resp));
                None
            }
            Ev::Disk { node, incarnation, shard, token } => {
                let n = &mut self.nodes[node];
                if n.incarnation != incarnation || n.host.is_none() {
                    return Some(Stepped::Quiet); // the records were lost with the crash
                }
                // The disk finishes on time even if the node is paused: it learns later.
                let done = flush_round(n.store.as_mut(), &mut n.disks, shard, token);
                if let Err(e) = done {
                    if let Some(h) = n.host.as_mut() {
                        h.on_shard_failed(shard, &e);
                    }
                    return Some(Stepped::Quiet);
                }
                self.input(node, Input::Disk { incarnation, shard, token })
            }
            Ev::Tick { node, at } => {
                if self.nodes[node].armed != Some(at) {
                    return Some(Stepped::Quiet);
                }
                self.nodes[node].armed = None;
                self.input(node, Input::Tick)
            }
            Ev::Client { client } => {
                self.client_wakes.push(client);
                None
            }
            Ev::Harness { token } => return Some(Stepped::Harness(token)),
        };
        Some(step.map_or(Stepped::Quiet, Stepped::Node))
    }

    /// Runs one event; `false` when the queue is empty or the next event is after `until`.
    pub fn step(&mut self, until: Instant) -> bool {
        self.next(until).is_some()
    }

    /// Hands `input` to node `i`: run now if it is up, queued if paused, lost if down.
    fn input(&mut self, i: usize, input: Input) -> Option<Step> {
        let n = &mut self.nodes[i];
        n.host.as_ref()?;
        if let Run::Paused(inbox) = &mut n.run {
            inbox.push_back(input);
            return None;
        }
        if let Input::Disk { incarnation, .. } = input {
            if incarnation != n.incarnation {
                return None; // a report from before a crash
            }
        }
        let now = self.node_now(i);
        self.inputs += 1;
        let is_tick = matches!(input, Input::Tick);
        let host = self.nodes[i].host.as_mut()?;
        let handled = guarded(|| match input {
            Input::Peer { from, msg } => host.on_peer_message(now, from, msg),
            Input::Client { route, req } => {
                // The simulated clients are operators: they hold the admin role (who may do
                // what is `strata_host::auth`'s, tested there and on real nodes).
                host.on_connected(route, Some(strata_wire::Role::Admin));
                host.on_client_request(now, route, req)
            }
            Input::Disconnected { route } => host.on_disconnected(now, route),
            Input::Disk { shard, token, .. } => host.on_shard_persisted(now, shard, token),
            Input::Tick => host.on_tick(now),
        });
        self.step.node = i;
        if let Err(e) = handled {
            // A panicking input handler leaves the host torn: a crash, loudly.
            self.nodes[i].failure.get_or_insert(format!("panicked on an input: {e}"));
            self.crash(i);
            let step = std::mem::take(&mut self.step);
            return self.observe.then_some(step);
        }
        if self.nodes[i].failure.is_none() {
            let host = self.nodes[i].host.as_ref().expect("up");
            if let Err(e) = guarded(|| host.check_invariants()) {
                // Reported once; the node keeps running so the checkers see the consequences.
                self.nodes[i].failure = Some(format!("check_invariants failed: {e}"));
            }
        }
        self.execute(i);
        self.rearm(i, is_tick);
        let step = std::mem::take(&mut self.step);
        self.observe.then_some(step)
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
            self.step.audit.append(&mut self.effects.audit);
            let sends: Vec<_> = self.effects.send.drain(..).collect();
            for (to, msg) in sends {
                if self.observe {
                    self.step.sends.push((to, msg.clone()));
                }
                let j = to.0 as usize;
                if let Some((until, drops)) = self.drop_rule {
                    if self.now < until && drops(self.ids[i], to, &msg) {
                        self.net.stats.dropped_rule += 1;
                        continue;
                    }
                }
                let base = Duration::from_micros(self.delay_us[i][j])
                    + self.extra_delay.get(&(i, j)).copied().unwrap_or_default();
                for at in self.net.transmit(self.now, self.ids[i], to) {
                    self.push(at + base, Ev::Peer { from: i, to: j, msg: msg.clone() });
                }
            }
            let replies: Vec<_> = self.effects.reply.drain(..).collect();
            if self.observe {
                self.step.replies.extend(replies);
            } else {
                self.send_replies(replies);
            }
            self.effects.fault.clear(); // link faults are the simulator's own knobs
            let storage = std::mem::take(&mut self.effects.storage);
            for request in storage {
                self.storage(i, request);
            }
        }
    }

    /// Replies to remote clients cross the client link (and the blackout window). An observing
    /// harness whose clients are remote hands a step's replies back here.
    pub fn send_replies(&mut self, replies: Vec<(Route, ClientResponse)>) {
        let blackout = self.reply_blackout.is_some_and(|(a, b)| a <= self.now && self.now < b);
        for (route, resp) in replies {
            let ack = matches!(resp.body, strata_wire::client::Response::LogWritten { .. });
            if (blackout && ack) || self.prng.chance(self.client_loss) {
                continue;
            }
            let at = self.now + Duration::from_micros(self.client_delay_us);
            self.push(at, Ev::Reply { client: route as usize, resp });
        }
    }

    /// Arms node `i`'s single timer at its host's `poll_timeout`, mapped through its clock.
    /// After a tick, a deadline that did not move is reported ([`HostCluster::stuck`]) and
    /// retried a millisecond later, so a run never spins at one instant.
    fn rearm(&mut self, i: usize, after_tick: bool) {
        let now = self.now;
        let n = &mut self.nodes[i];
        if !matches!(n.run, Run::Up) {
            return;
        }
        let Some(deadline) = n.host.as_ref().and_then(|h| h.poll_timeout()) else { return };
        let mut at = n.clock.global_at(deadline);
        if !self.tick_lateness.is_zero() {
            at = match n.late_tick {
                Some((seen, late)) if seen == at => late,
                _ => {
                    let max = self.tick_lateness.as_nanos() as u64;
                    let late = at + Duration::from_nanos(self.tick_rng.range(0, max + 1));
                    n.late_tick = Some((at, late));
                    late
                }
            };
        }
        let mut at = at.max(now);
        if after_tick && at <= now {
            self.stuck.push((i, now));
            at = now + Duration::from_millis(1);
        }
        if self.nodes[i].armed.is_none_or(|a| at < a || a < now) {
            self.nodes[i].armed = Some(at);
            self.push(at, Ev::Tick { node: i, at });
        }
    }

    fn storage(&mut self, i: usize, request: Storage) {
        let now = self.node_now(i);
        let node = &mut self.nodes[i];
        match request {
            Storage::Log { shard, records } => {
                if self.observe {
                    self.step.persists.push((shard, records.clone()));
                }
                let Some(d) = node.disks.values_mut().find(|d| d.id == shard) else { return };
                if !d.open {
                    return;
                }
                // The disk syncs at barriers: the last one's completion covers the batch.
                let barrier = records
                    .iter()
                    .filter(|(_, p)| matches!(p, Persist::Sync | Persist::HardState(_)))
                    .map(|(t, _)| *t)
                    .next_back();
                d.pending.extend(records);
                if let Some(token) = barrier {
                    if node.disk_stalled {
                        node.stalled.push((shard, token));
                    } else {
                        let at = self.now + self.disk_latency;
                        let incarnation = node.incarnation;
                        self.push(at, Ev::Disk { node: i, incarnation, shard, token });
                    }
                }
            }
            Storage::Open { shard, table, install } => {
                let key = (table.clone(), shard.key(), shard.generation);
                if install.is_some() {
                    node.disks.remove(&key); // a fresh log
                }
                let d = node.disks.entry(key).or_insert_with(|| SimShardDisk::new(shard, &table));
                let fresh = install.is_some();
                let result = (|| {
                    if node.store.is_none() {
                        let (store, _) = NodeStore::open_planted(
                            node.backend.clone(),
                            sim_wal_config(),
                            self.store_bug,
                        )
                        .map_err(|e| e.to_string())?;
                        node.store = Some(store);
                    }
                    let store = node.store.as_mut().expect("just opened");
                    let state = match install {
                        Some(snapshot) => {
                            store.install_shard(&d.tag, RecoveredState::moved_in(*snapshot))
                        }
                        None => store.open_shard(&d.tag),
                    }
                    .map_err(|e| e.to_string())?;
                    d.open = true;
                    // What the store recovers is exactly what it synced (orca.md §9.6).
                    if !fresh && (state.entries != d.synced || state.hard_state != d.hard) {
                        return Err(format!(
                            "the log store recovered {} entries and {:?}, but {} entries and {:?} were synced",
                            state.entries.len(),
                            state.hard_state,
                            d.synced.len(),
                            d.hard
                        ));
                    }
                    d.synced = state.entries.clone();
                    d.hard = state.hard_state;
                    Ok(state)
                })();
                let host = node.host.as_mut().expect("effects come from a running host");
                if let Err(e) = host.on_shard_opened(now, shard, result) {
                    self.open_failures.push(format!("n{i}: {e}"));
                }
            }
            Storage::Close { shard, table, remove } => {
                let key = (table, shard.key(), shard.generation);
                if remove {
                    if let Some(d) = node.disks.remove(&key) {
                        let removed = node.store.as_mut().map(|s| s.remove_shard(&d.tag));
                        if let Some(Err(e)) = removed {
                            self.open_failures.push(format!("n{i}: removing {shard:?}: {e}"));
                        }
                    }
                } else if let Some(d) = node.disks.get_mut(&key) {
                    // A runtime closes a store after its disk thread finished the batches it
                    // was given: up to the last barrier (the rest was never going to be
                    // synced by this replica, which is retired).
                    let last = d
                        .pending
                        .iter()
                        .filter(|(_, p)| matches!(p, Persist::Sync | Persist::HardState(_)))
                        .map(|(t, _)| *t)
                        .next_back();
                    if let Some(token) = last {
                        let staged = node.store.as_mut().ok_or("the node's store is closed".into());
                        let done = staged.and_then(|store| {
                            d.stage(store, token)?;
                            store.flush().map_err(|e| e.to_string())
                        });
                        if let Err(e) = done {
                            self.open_failures.push(format!("n{i}: closing {shard:?}: {e}"));
                        }
                    }
                    d.pending.clear();
                    d.open = false;
                    if let Some(store) = node.store.as_mut() {
                        store.close_shard(&d.tag);
                    }
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
        self.rearm(i, false);
        self.step = Step::default();
        Some((id, self.nodes[i].incarnation))
    }

    /// An operator's action `f` on node `i`'s host (not a client request; e.g.
    /// `Host::revoke_shard_member`), its effects executed: what `f` returned and the step it
    /// made (with `observe`), or `None` when the node is down or paused.
    pub fn operate<R>(
        &mut self,
        i: usize,
        f: impl FnOnce(&mut Host, Instant) -> R,
    ) -> Option<(R, Option<Step>)> {
        if !matches!(self.nodes[i].run, Run::Up) {
            return None;
        }
        let now = self.node_now(i);
        let host = self.nodes[i].host.as_mut()?;
        let r = f(host, now);
        self.step = Step { node: i, ..Step::default() };
        self.execute(i);
        self.rearm(i, false);
        let step = std::mem::take(&mut self.step);
        Some((r, self.observe.then_some(step)))
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

    /// Peer messages sent so far (lost ones included).
    pub fn peer_messages(&self) -> u64 {
        self.net.stats.sent
    }

    /// Node `i`'s clock.
    pub fn clock(&self, i: usize) -> NodeClock {
        self.nodes[i].clock
    }
}

/// The simulated disks' WAL settings: production's, with a smaller preallocation chunk, so
/// that runs cross chunk boundaries (and the in-memory disks stay small).
fn sim_wal_config() -> WalConfig {
    WalConfig { preallocate_bytes: 16 << 10, ..WalConfig::default() }
}
