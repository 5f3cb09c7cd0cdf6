//! The simulated network between replicas.
//!
//! Kite §4 and §6: any message may be lost, duplicated, delayed arbitrarily or reordered, and
//! links may be cut (partitions). This module decides each message's fate; the cluster puts the
//! surviving copies on its event queue. Links are directed, so one-way partitions exist too.

use std::collections::BTreeMap;
use std::time::Duration;

use strata_core::Prng;
use strata_wire::{Instant, NodeId};

/// The seed-drawn behaviour of the network during the safety phase.
#[derive(Clone, Debug, PartialEq)]
pub struct NetKnobs {
    /// One-way delay, uniform in `[delay_min_us, delay_max_us]`.
    pub delay_min_us: u64,
    pub delay_max_us: u64,
    /// Probability that a message is lost.
    pub loss: f64,
    /// Probability that a message is delivered twice (the copy has its own delay).
    pub dup: f64,
    /// Probability that a message is held back by up to `reorder_extra_max_us` more, so that it
    /// overtakes nothing but is overtaken by later messages.
    pub reorder: f64,
    pub reorder_extra_max_us: u64,
}

impl NetKnobs {
    /// The longest time a message can spend in flight.
    pub fn max_flight(&self) -> Duration {
        Duration::from_micros(self.delay_max_us + self.reorder_extra_max_us)
    }
}

/// Counters for the run's summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NetStats {
    pub sent: u64,
    pub delivered: u64,
    pub dropped_loss: u64,
    pub dropped_cut: u64,
    /// Sent to, or arriving at, a crashed node.
    pub dropped_dead: u64,
    pub duplicated: u64,
    pub reordered: u64,
    /// Lost on purpose by a scripted scenario's drop rule.
    pub dropped_rule: u64,
}

#[derive(Debug)]
pub struct Network {
    knobs: NetKnobs,
    /// Cut directed links `(from, to)`, counted: overlapping partitions heal independently.
    cut: BTreeMap<(NodeId, NodeId), u32>,
    prng: Prng,
    pub stats: NetStats,
}

impl Network {
    pub fn new(knobs: NetKnobs, prng: Prng) -> Network {
        Network { knobs, cut: BTreeMap::new(), prng, stats: NetStats::default() }
    }

    pub fn knobs(&self) -> &NetKnobs {
        &self.knobs
    }

    /// Sends one message at `now`: the instants at which copies arrive (none if it is lost or
    /// the link is cut, two if it is duplicated).
    pub fn transmit(&mut self, now: Instant, from: NodeId, to: NodeId) -> Vec<Instant> {
        self.stats.sent += 1;
        if self.is_cut(from, to) {
            self.stats.dropped_cut += 1;
            return Vec::new();
        }
        if self.prng.chance(self.knobs.loss) {
            self.stats.dropped_loss += 1;
            return Vec::new();
        }
        let mut arrivals = vec![now + self.delay()];
        if self.prng.chance(self.knobs.dup) {
            self.stats.duplicated += 1;
            arrivals.push(now + self.delay());
        }
        arrivals
    }

    fn delay(&mut self) -> Duration {
        let k = &self.knobs;
        let mut us = self.prng.range(k.delay_min_us, k.delay_max_us + 1);
        if self.prng.chance(k.reorder) {
            self.stats.reordered += 1;
            us += self.prng.range(0, k.reorder_extra_max_us + 1);
        }
        Duration::from_micros(us)
    }

    /// Whether a copy arriving now still gets through: a link cut while the message was in
    /// flight loses it, as a real partition would.
    pub fn admits(&mut self, from: NodeId, to: NodeId) -> bool {
        if self.is_cut(from, to) {
            self.stats.dropped_cut += 1;
            false
        } else {
            true
        }
    }

    pub fn is_cut(&self, from: NodeId, to: NodeId) -> bool {
        self.cut.contains_key(&(from, to))
    }

    pub fn cut_links(&mut self, links: &[(NodeId, NodeId)]) {
        for &l in links {
            *self.cut.entry(l).or_insert(0) += 1;
        }
    }

    pub fn heal_links(&mut self, links: &[(NodeId, NodeId)]) {
        for l in links {
            if let Some(n) = self.cut.get_mut(l) {
                *n -= 1;
                if *n == 0 {
                    self.cut.remove(l);
                }
            }
        }
    }

    /// Heals every cut link (loss, duplication and reordering stay as drawn).
    pub fn heal_all(&mut self) {
        self.cut.clear();
    }

    /// The liveness phase (Kite §7 prop 9): every link healed, no more loss, duplication or
    /// extra reordering; delays stay within the drawn range, so they are bounded.
    pub fn calm(&mut self) {
        self.cut.clear();
        self.knobs.loss = 0.0;
        self.knobs.dup = 0.0;
        self.knobs.reorder = 0.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn knobs(loss: f64, dup: f64) -> NetKnobs {
        NetKnobs {
            delay_min_us: 10,
            delay_max_us: 20,
            loss,
            dup,
            reorder: 0.5,
            reorder_extra_max_us: 100,
        }
    }

    #[test]
    fn cut_links_drop_and_heal_counts_overlaps() {
        let (a, b) = (NodeId(0), NodeId(1));
        let mut n = Network::new(knobs(0.0, 0.0), Prng::new(1));
        n.cut_links(&[(a, b)]);
        n.cut_links(&[(a, b)]);
        assert!(n.transmit(Instant(0), a, b).is_empty());
        assert_eq!(n.transmit(Instant(0), b, a).len(), 1, "links are directed");
        n.heal_links(&[(a, b)]);
        assert!(n.is_cut(a, b), "the second partition still cuts it");
        n.heal_links(&[(a, b)]);
        let t = n.transmit(Instant(0), a, b);
        assert!(t.len() == 1 && t[0] >= Instant(10_000) && t[0] <= Instant(120_000));
    }

    #[test]
    fn loss_and_duplication_happen_and_calm_stops_them() {
        let (a, b) = (NodeId(0), NodeId(1));
        let mut n = Network::new(knobs(0.3, 0.3), Prng::new(2));
        let copies: usize = (0..1000).map(|_| n.transmit(Instant(0), a, b).len()).sum();
        assert!(n.stats.dropped_loss > 200 && n.stats.duplicated > 100, "{:?}", n.stats);
        assert_eq!(copies as u64, 1000 - n.stats.dropped_loss + n.stats.duplicated);
        n.cut_links(&[(a, b)]);
        n.calm();
        assert!((0..100).all(|_| n.transmit(Instant(0), a, b).len() == 1));
    }
}
