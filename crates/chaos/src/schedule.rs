//! The random cluster states of orca.md §7's fault-injection harness, over real processes.
//!
//! Entering a state first restarts the nodes the previous state crashed and clears all link
//! faults; then, with probability 0.1, every node is SIGKILLed and restarted (all lose what
//! they had not fsynced); otherwise with probability 0.5 one node is SIGKILLed, and with
//! probability 0.3 a second one (at most 2 down at once: a minority of 5). Finally one running
//! node is made *lagging*: extra delay, drawn in `lag_ms`, on every link into and out of it.

use std::time::Duration;

use serde::Serialize;
use strata_core::Prng;

use crate::procs::ProcessCluster;

/// What the schedule did to the cluster so far.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct FaultTotals {
    pub states: u64,
    /// SIGKILLs, counting each node of a whole-cluster crash.
    pub kills: u64,
    pub whole_cluster_crashes: u64,
}

impl FaultTotals {
    pub fn plus(self, o: &FaultTotals) -> FaultTotals {
        FaultTotals {
            states: self.states + o.states,
            kills: self.kills + o.kills,
            whole_cluster_crashes: self.whole_cluster_crashes + o.whole_cluster_crashes,
        }
    }
}

/// The state just entered.
#[derive(Clone, Debug)]
pub struct State {
    /// Running, non-lagging nodes in a random order.
    pub others: Vec<usize>,
    pub lagging: Option<usize>,
}

pub struct Schedule {
    rng: Prng,
    lag_ms: (u64, u64),
    pub totals: FaultTotals,
}

impl Schedule {
    pub fn new(seed: u64, lag_ms: (u64, u64)) -> Schedule {
        Schedule { rng: Prng::new(seed), lag_ms, totals: FaultTotals::default() }
    }

    /// The schedule's generator, for the harness's own seeded choices.
    pub fn rng(&mut self) -> &mut Prng {
        &mut self.rng
    }

    /// Moves the cluster into the next random state.
    pub async fn next(&mut self, cluster: &mut ProcessCluster) -> Result<State, String> {
        self.totals.states += 1;
        heal(cluster).await?;
        let n = cluster.len();
        if self.rng.chance(0.1) {
            cluster.kill_all();
            self.totals.kills += n as u64;
            self.totals.whole_cluster_crashes += 1;
            restart_down(cluster).await?;
        } else if self.rng.chance(0.5) {
            cluster.kill(self.rng.range(0, n as u64) as usize);
            self.totals.kills += 1;
            if self.rng.chance(0.3) {
                let second = self.rng.range(0, n as u64) as usize;
                if cluster.is_up(second) {
                    cluster.kill(second);
                    self.totals.kills += 1;
                }
            }
        }
        let mut others = cluster.up();
        shuffle(&mut others, &mut self.rng);
        let lagging = others.pop();
        if let Some(l) = lagging {
            let delay = Duration::from_millis(self.rng.range(self.lag_ms.0, self.lag_ms.1 + 1));
            // A node that cannot be reached to set a fault simply is not slowed.
            let _ = cluster.lag(l, delay).await;
        }
        Ok(State { others, lagging })
    }

    /// Every node running, no faults; returns every node in a random order.
    pub async fn healed(&mut self, cluster: &mut ProcessCluster) -> Result<Vec<usize>, String> {
        heal(cluster).await?;
        let mut all: Vec<usize> = (0..cluster.len()).collect();
        shuffle(&mut all, &mut self.rng);
        Ok(all)
    }
}

/// Restarts the nodes that are down and clears every link fault.
async fn heal(cluster: &mut ProcessCluster) -> Result<(), String> {
    restart_down(cluster).await?;
    // A node that does not answer keeps its faults until the next heal; it is running (just
    // restarted), so that is at most a slow start.
    let _ = cluster.heal().await;
    Ok(())
}

async fn restart_down(cluster: &mut ProcessCluster) -> Result<(), String> {
    for i in cluster.down() {
        cluster.spawn(i).await.map_err(|e| format!("cannot restart node {i}: {e}"))?;
    }
    Ok(())
}

/// Fisher–Yates with the schedule's seeded generator.
pub fn shuffle<T>(items: &mut [T], rng: &mut Prng) {
    for i in (1..items.len()).rev() {
        let j = rng.range(0, i as u64 + 1) as usize;
        items.swap(i, j);
    }
}
