//! The paper's two case studies (ORCA §5.4; orca.md §8.3 E6) over real processes, under the
//! fault schedule of [`crate::schedule`]: what share of an application's reads is
//! inconsistent (non-monotonic), consistent but old, or the latest, per table configuration.
//!
//! * **Location tracking**: a writer moves `users` users (each key `loc-<u>` gets versions 1,
//!   2, 3, ...); readers look up a random user's location at a random node each time, as
//!   clients that reconnect between reads.
//! * **Retwis-like timeline**: users follow the next three users; a post writes the post
//!   (`post-<id>`) and then appends its id to every follower's timeline (`tl-<u>`, value
//!   `version|id,id,...`, the 10 newest); reading a timeline reads the timeline key at a
//!   random node, then the three newest posts it names at random nodes. A timeline naming a
//!   post that reads as absent is counted too: under weak reads the post may not have reached
//!   the node yet; under async or cad durability the post may have been lost — an
//!   acknowledged write nobody read is allowed to be lost (ORCA G5) while the timeline written
//!   after it, in a later epoch, survives. Only sync durability rules it out. A missing post
//!   written in the same epoch as the timeline version read cannot be such a loss: for the
//!   configurations that promise monotonic reads it is a broken promise.
//!
//! Every configuration runs its own copy of the application, on its own table, at the same
//! time, so all see the same faults. Each key has one writer writing one version at a time,
//! so reads classify as in [`crate::check`]. Reads go through the client library's own
//! routing and retries, as an application's would ([`strata_client::Table::get_at`]).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;
use strata_client::{Client, ClientOptions, LogIndex, LogRead, Table};
use strata_core::Prng;

use crate::check::{freshness, FreshnessCounts, Observed};
use crate::configs::TableConfig;
use crate::procs::ProcessCluster;
use crate::schedule::{FaultTotals, Schedule};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum App {
    Location,
    Retwis,
}

/// Users a Retwis user follows: the next `FOLLOWS` users.
const FOLLOWS: u64 = 3;
/// Newest post ids kept in a timeline value, and read per timeline read.
const TIMELINE_LEN: usize = 10;
const POSTS_READ: usize = 3;

#[derive(Clone, Debug)]
pub struct CaseOptions {
    pub app: App,
    /// Cluster states; each lasts `state` (then a final healed state).
    pub states: usize,
    pub state: Duration,
    pub seed: u64,
    pub configs: Vec<TableConfig>,
    pub lag_ms: (u64, u64),
    pub users: u64,
    /// Concurrent reading clients per configuration (one writer each).
    pub readers: usize,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct CaseResult {
    pub name: String,
    pub about: String,
    /// Application-level operations: location updates or posts.
    pub app_writes: u64,
    /// Location reads or timeline reads.
    pub app_reads: u64,
    pub store_writes: u64,
    pub store_reads: u64,
    pub writes_unknown: u64,
    /// Store reads that failed after the client's retries.
    pub reads_failed: u64,
    /// Location or timeline reads, classified.
    pub freshness: FreshnessCounts,
    /// Retwis: timeline reads that named a post which then read as absent.
    pub missing_posts: u64,
    /// Of those, posts written in the same epoch as the timeline version read: a leader
    /// change cannot have lost them while keeping the timeline (a leader's entries of its own
    /// epoch survive as a prefix), so in a configuration that makes read data durable this is
    /// a broken promise.
    pub missing_same_epoch: u64,
    /// The first of those, for the record.
    pub first_missing: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CaseReport {
    pub app: App,
    pub states: usize,
    pub state_ms: u64,
    pub seed: u64,
    pub nodes: usize,
    pub elapsed_s: f64,
    pub faults: FaultTotals,
    pub configs: Vec<CaseResult>,
}

/// What the clients of one configuration observed, shared by its tasks (one thread).
#[derive(Default)]
struct Observations {
    /// Per classified key (locations, timelines): its reads.
    reads: BTreeMap<Bytes, Vec<Observed>>,
    acked: BTreeMap<Bytes, Vec<(Instant, u64)>>,
    unknown: BTreeMap<Bytes, BTreeSet<u64>>,
    /// Retwis: where each acknowledged post was written.
    post_index: BTreeMap<u64, LogIndex>,
    result: CaseResult,
}

/// The writer's state: versions per key, posts so far, timelines.
struct Writer {
    table: Table,
    rng: Prng,
    versions: BTreeMap<Bytes, u64>,
    next_post: u64,
    timelines: BTreeMap<u64, Vec<u64>>,
}

struct Reader {
    table: Table,
    rng: Prng,
}

struct ConfigApp {
    writer: Writer,
    readers: Vec<Reader>,
    seen: RefCell<Observations>,
}

fn location_key(u: u64) -> Bytes {
    Bytes::from(format!("loc-{u}"))
}

fn timeline_key(u: u64) -> Bytes {
    Bytes::from(format!("tl-{u}"))
}

fn post_key(id: u64) -> Bytes {
    Bytes::from(format!("post-{id}"))
}

/// `version|payload` or `version`: the version.
fn version_of(value: Option<&[u8]>) -> u64 {
    value
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|s| s.split('|').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// The post ids a timeline value names, newest last.
fn posts_of(value: Option<&[u8]>) -> Vec<u64> {
    value
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|s| s.split_once('|'))
        .map(|(_, ids)| ids.split(',').filter_map(|i| i.parse().ok()).collect())
        .unwrap_or_default()
}

impl Writer {
    /// Writes the next version of `key` with `payload`; records the ack or the unknown outcome.
    async fn write(&mut self, seen: &RefCell<Observations>, key: Bytes, payload: Option<String>) {
        let v = {
            let v = self.versions.entry(key.clone()).or_default();
            *v += 1;
            *v
        };
        let value = match payload {
            Some(p) => format!("{v}|{p}"),
            None => v.to_string(),
        };
        let ok = self.table.put(key.clone(), value).await.is_ok();
        let mut seen = seen.borrow_mut();
        seen.result.store_writes += 1;
        if ok {
            seen.acked.entry(key).or_default().push((Instant::now(), v));
        } else {
            seen.result.writes_unknown += 1;
            seen.unknown.entry(key).or_default().insert(v);
        }
    }

    async fn step(&mut self, app: App, users: u64, seen: &RefCell<Observations>) {
        let u = self.rng.range(0, users);
        match app {
            App::Location => self.write(seen, location_key(u), None).await,
            App::Retwis => {
                self.next_post += 1;
                let id = self.next_post;
                // The post first, then the timelines that name it.
                let written = self.table.put(post_key(id), id.to_string()).await;
                if !record_post(&mut seen.borrow_mut(), id, written.ok()) {
                    return;
                }
                for f in (1..=FOLLOWS).map(|d| (u + users - d) % users) {
                    let tl = self.timelines.entry(f).or_default();
                    tl.push(id);
                    let from = tl.len().saturating_sub(TIMELINE_LEN);
                    let ids: Vec<String> = tl[from..].iter().map(u64::to_string).collect();
                    self.write(seen, timeline_key(f), Some(ids.join(","))).await;
                }
            }
        }
        seen.borrow_mut().result.app_writes += 1;
    }
}

/// Records a post write; `false` if it failed (its outcome is unknown).
fn record_post(seen: &mut Observations, id: u64, written: Option<LogIndex>) -> bool {
    seen.result.store_writes += 1;
    match written {
        Some(index) => {
            seen.post_index.insert(id, index);
            true
        }
        None => {
            seen.result.writes_unknown += 1;
            false
        }
    }
}

impl Reader {
    /// Reads `key` starting at a random node; `None` if the read failed. `classify`: record it
    /// for the freshness classes.
    async fn read(
        &mut self,
        seen: &RefCell<Observations>,
        key: Bytes,
        n: usize,
        classify: bool,
    ) -> Option<LogRead> {
        let node = self.rng.range(0, n as u64) as usize;
        let invoked = Instant::now();
        let r = self.table.get_at(key.clone(), node).await;
        let completed = Instant::now();
        let mut seen = seen.borrow_mut();
        seen.result.store_reads += 1;
        match r {
            Ok(read) => {
                if classify {
                    let version = version_of(read.value.as_deref());
                    let o =
                        Observed { version, invoked, completed, node, state: 0, lagging: false };
                    seen.reads.entry(key).or_default().push(o);
                }
                Some(read)
            }
            Err(_) => {
                seen.result.reads_failed += 1;
                None
            }
        }
    }

    async fn step(&mut self, app: App, users: u64, n: usize, seen: &RefCell<Observations>) {
        let u = self.rng.range(0, users);
        match app {
            App::Location => {
                self.read(seen, location_key(u), n, true).await;
            }
            App::Retwis => {
                let Some(timeline) = self.read(seen, timeline_key(u), n, true).await else {
                    return;
                };
                let posts = posts_of(timeline.value.as_deref());
                for id in posts.iter().rev().take(POSTS_READ) {
                    // Posts are written once, so not classified; an absent one is a post the
                    // timeline named and the store lost or has not got.
                    match self.read(seen, post_key(*id), n, false).await {
                        Some(post) if post.value.is_none() => {
                            let mut seen = seen.borrow_mut();
                            seen.result.missing_posts += 1;
                            let written = seen.post_index.get(id).copied();
                            let same_epoch =
                                written.is_some_and(|w| w.epoch == timeline.update_index.epoch);
                            seen.result.missing_same_epoch += u64::from(same_epoch);
                            let what = || {
                                format!("timeline {u} {timeline:?} named post {id} (written at {written:?}); then {post:?}")
                            };
                            seen.result.first_missing.get_or_insert_with(what);
                        }
                        _ => {}
                    }
                }
            }
        }
        seen.borrow_mut().result.app_reads += 1;
    }
}

impl ConfigApp {
    /// Runs the writer and the readers until `until`.
    async fn run_until(&mut self, app: App, users: u64, n: usize, until: Instant) {
        let seen = &self.seen;
        let writer = async {
            while Instant::now() < until {
                self.writer.step(app, users, seen).await;
            }
        };
        let readers = futures::future::join_all(self.readers.iter_mut().map(|r| async move {
            while Instant::now() < until {
                r.step(app, users, n, seen).await;
            }
        }));
        futures::join!(writer, readers);
    }

    fn result(self) -> CaseResult {
        let mut o = self.seen.into_inner();
        for (key, reads) in &o.reads {
            let acked = o.acked.get(key).map_or(&[][..], Vec::as_slice);
            let unknown = o.unknown.get(key).cloned().unwrap_or_default();
            o.result.freshness.merge(&freshness(reads, acked, &unknown));
        }
        o.result
    }
}

async fn open_apps(
    cluster: &ProcessCluster,
    opts: &CaseOptions,
) -> Result<Vec<ConfigApp>, strata_client::ClientError> {
    let endpoints = cluster.endpoints();
    let client_opts =
        ClientOptions { request_timeout: Some(Duration::from_secs(5)), ..ClientOptions::default() };
    let prefix = format!(
        "{}{}_",
        match opts.app {
            App::Location => "loc",
            App::Retwis => "twis",
        },
        opts.seed
    );
    let mut rng = Prng::new(opts.seed ^ 0xca5e);
    let mut apps = Vec::new();
    for cfg in &opts.configs {
        let def = cfg.table(&prefix);
        for &addr in &endpoints {
            Client::connect_node(addr, client_opts.clone())
                .await?
                .create_table(def.clone())
                .await?;
        }
        let client = Client::connect(&endpoints, client_opts.clone()).await?;
        let writer = Writer {
            table: client.table(&def.name).await?,
            rng: rng.fork(),
            versions: BTreeMap::new(),
            next_post: 0,
            timelines: BTreeMap::new(),
        };
        let mut readers = Vec::new();
        for _ in 0..opts.readers {
            readers.push(Reader { table: client.table(&def.name).await?, rng: rng.fork() });
        }
        let seen = Observations {
            result: CaseResult {
                name: cfg.name.into(),
                about: cfg.about.into(),
                ..CaseResult::default()
            },
            ..Observations::default()
        };
        apps.push(ConfigApp { writer, readers, seen: RefCell::new(seen) });
    }
    Ok(apps)
}

/// Runs one case study on `cluster`, calling `progress(states done, states)` after each state.
pub async fn run(
    cluster: &mut ProcessCluster,
    opts: &CaseOptions,
    mut progress: impl FnMut(usize, usize),
) -> Result<CaseReport, String> {
    let started = Instant::now();
    let mut apps =
        open_apps(cluster, opts).await.map_err(|e| format!("cannot create the tables: {e}"))?;
    let mut schedule = Schedule::new(opts.seed, opts.lag_ms);
    let n = cluster.len();
    for state in 0..=opts.states {
        if state < opts.states {
            schedule.next(cluster).await?;
        } else {
            schedule.healed(cluster).await?;
        }
        let until = Instant::now() + opts.state;
        futures::future::join_all(
            apps.iter_mut().map(|a| a.run_until(opts.app, opts.users, n, until)),
        )
        .await;
        progress(state + 1, opts.states + 1);
    }
    Ok(CaseReport {
        app: opts.app,
        states: opts.states,
        state_ms: opts.state.as_millis() as u64,
        seed: opts.seed,
        nodes: n,
        elapsed_s: started.elapsed().as_secs_f64(),
        faults: schedule.totals,
        configs: apps.into_iter().map(ConfigApp::result).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_carry_their_version_and_posts() {
        assert_eq!(version_of(Some(b"7")), 7);
        assert_eq!(version_of(Some(b"12|3,4,9")), 12);
        assert_eq!(version_of(None), 0);
        assert_eq!(posts_of(Some(b"12|3,4,9")), vec![3, 4, 9]);
        assert!(posts_of(Some(b"7")).is_empty());
    }
}
