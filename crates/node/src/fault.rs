//! The fault layer of one outbound peer link: partition, random loss, added delay with jitter.
//!
//! The kernel on this project's machines has no netem, so wide-area latency and cut or lossy
//! links between real processes come from here. It sits in the per-peer sender, before the
//! socket, so a fault survives reconnects. A delayed link stays FIFO, as TCP is: a message's
//! due time is never earlier than the previous message's.

use std::time::Duration;

use strata_core::Prng;
use strata_wire::client::LinkFault;

/// What happens to one message offered to the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict<T> {
    /// Lost (partition or random loss).
    Drop,
    /// Send at (not before) this time.
    SendAt(T),
}

/// Per-link fault state: the seeded randomness and the FIFO watermark.
#[derive(Debug)]
pub struct FaultLayer<T> {
    prng: Prng,
    /// Due time of the last admitted message.
    last_due: Option<T>,
}

impl<T> FaultLayer<T>
where
    T: Copy + Ord + std::ops::Add<Duration, Output = T>,
{
    pub fn new(seed: u64) -> Self {
        FaultLayer { prng: Prng::new(seed), last_due: None }
    }

    /// Decides the fate of a message enqueued at `enqueued` under `fault`.
    pub fn admit(&mut self, fault: &LinkFault, enqueued: T) -> Verdict<T> {
        if fault.partitioned {
            return Verdict::Drop;
        }
        if fault.loss_ppm > 0 && self.prng.range(0, 1_000_000) < u64::from(fault.loss_ppm) {
            return Verdict::Drop;
        }
        let jitter = if fault.jitter_us > 0 {
            self.prng.range(0, fault.jitter_us.saturating_add(1))
        } else {
            0
        };
        let mut due = enqueued + Duration::from_micros(fault.delay_us.saturating_add(jitter));
        if let Some(last) = self.last_due {
            due = due.max(last);
        }
        self.last_due = Some(due);
        Verdict::SendAt(due)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny clock for the tests: microseconds.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
    struct T(u64);
    impl std::ops::Add<Duration> for T {
        type Output = T;
        fn add(self, d: Duration) -> T {
            T(self.0 + d.as_micros() as u64)
        }
    }

    #[test]
    fn clear_link_sends_at_once() {
        let mut f = FaultLayer::new(1);
        for t in 0..100 {
            assert_eq!(f.admit(&LinkFault::default(), T(t)), Verdict::SendAt(T(t)));
        }
    }

    #[test]
    fn partition_drops_everything() {
        let mut f = FaultLayer::new(1);
        let p = LinkFault { partitioned: true, ..LinkFault::default() };
        assert!((0..100).all(|t| f.admit(&p, T(t)) == Verdict::Drop));
    }

    #[test]
    fn loss_drops_about_the_given_fraction() {
        let mut f = FaultLayer::new(7);
        let l = LinkFault { loss_ppm: 250_000, ..LinkFault::default() };
        let dropped = (0..10_000).filter(|&t| f.admit(&l, T(t)) == Verdict::Drop).count();
        assert!((2_000..3_000).contains(&dropped), "{dropped}");
        let all = LinkFault { loss_ppm: 1_000_000, ..LinkFault::default() };
        assert!((0..100).all(|t| f.admit(&all, T(t)) == Verdict::Drop));
    }

    #[test]
    fn delay_with_jitter_stays_fifo_and_in_range() {
        let mut f = FaultLayer::new(3);
        let d = LinkFault { delay_us: 1_000, jitter_us: 500, ..LinkFault::default() };
        let mut last = T(0);
        for t in 0..1_000 {
            let Verdict::SendAt(due) = f.admit(&d, T(t)) else { panic!("no loss configured") };
            assert!(due >= last, "FIFO");
            assert!(due.0 >= t + 1_000 && due.0 <= t + 1_500, "{due:?} for {t}");
            last = due;
        }
    }
}
