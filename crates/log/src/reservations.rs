//! Reads for update (departure, docs/design.md "Reads for update"): a transaction's read of a
//! key it means to write (`ReadIntent::TxnForUpdate`, `SELECT … FOR UPDATE`) reserves the key
//! at the shard leader until a prepare naming the key arrives or `LogConfig::txn_read_hold`
//! passes. Another for-update read of the key waits meanwhile, and is then answered with what
//! that prepare will leave (`foresight.rs`) instead of the value it would replace — so on a
//! hot key, read-modify-write transactions queue at the leader instead of reading the same
//! version, all but one aborting, and starting again after a back-off.
//!
//! A scheduling hint, never a lock: nothing is replicated or recorded, a new leader starts
//! with none (`LeaderState`), plain reads and transactions' plain reads ignore it, and
//! prepares are decided by their version checks as before. Two transactions that each hold
//! a key the other reads for update wait for the hold to pass, then race as without it.

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;
use strata_wire::Instant;

/// The reserved keys of one leader term.
#[derive(Clone, Debug, Default)]
pub(crate) struct Reservations {
    until: HashMap<Bytes, Instant>,
    /// Every reservation in the order made, to forget the lapsed ones.
    made: VecDeque<(Instant, Bytes)>,
}

impl Reservations {
    /// Until when `key` is reserved, if it is at `now`.
    pub fn held_until(&self, key: &[u8], now: Instant) -> Option<Instant> {
        self.until.get(key).copied().filter(|&until| until > now)
    }

    /// A for-update read of `key` was answered: later ones wait until `until`.
    pub fn reserve(&mut self, key: Bytes, until: Instant) {
        self.until.insert(key.clone(), until);
        self.made.push_back((until, key));
    }

    /// A prepare naming `key` arrived: the reads waiting for it go on.
    pub fn release(&mut self, key: &[u8]) {
        self.until.remove(key);
    }

    /// Forgets the reservations lapsed at `now` (holds are equal, so `made` is in expiry
    /// order up to the clock's monotonicity; a straggler is only forgotten later).
    pub fn forget_lapsed(&mut self, now: Instant) {
        while let Some((until, _)) = self.made.front() {
            if *until > now {
                break;
            }
            let (until, key) = self.made.pop_front().expect("front");
            if self.until.get(&key) == Some(&until) {
                self.until.remove(&key);
            }
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.until.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    #[test]
    fn a_reservation_holds_until_released_or_lapsed() {
        let mut r = Reservations::default();
        r.reserve(Bytes::from("k"), at(2));
        r.reserve(Bytes::from("j"), at(3));
        assert_eq!(r.held_until(b"k", at(1)), Some(at(2)));
        assert_eq!(r.held_until(b"k", at(2)), None, "lapsed at its instant");
        r.release(b"j");
        assert_eq!(r.held_until(b"j", at(1)), None);
        r.forget_lapsed(at(5));
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn a_renewed_reservation_outlives_the_lapse_of_the_first() {
        let mut r = Reservations::default();
        r.reserve(Bytes::from("k"), at(2));
        r.release(b"k");
        r.reserve(Bytes::from("k"), at(4));
        r.forget_lapsed(at(2));
        assert_eq!(r.held_until(b"k", at(3)), Some(at(4)), "the first one's lapse keeps it");
    }
}
