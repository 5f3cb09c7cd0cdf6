//! Reads for update (departure, docs/design.md "Reads for update"): a transaction's read of a
//! key it means to write (`ReadIntent::TxnForUpdate`, `SELECT … FOR UPDATE`) reserves the key
//! at the shard leader until a prepare naming the key arrives or `LogConfig::txn_read_hold`
//! passes. Another for-update read of the key waits meanwhile, and is then answered with what
//! that prepare will leave (`foresight.rs`) instead of the value it would replace — so on a
//! hot key, read-modify-write transactions queue at the leader instead of reading the same
//! version, all but one aborting, and starting again after a back-off.
//!
//! A transaction that read keys for update and will send no prepare (its body failed, the
//! application dropped it) releases them (`Request::ReleaseReservations`); a reservation
//! remembers its reader's `reserver` so that a late release never frees a key that another
//! transaction has reserved since.
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
    /// Key -> the hold's end and the reserving transaction (0: a reader that cannot release).
    until: HashMap<Bytes, (Instant, u64)>,
    /// Every reservation in the order made, to forget the lapsed ones.
    made: VecDeque<(Instant, Bytes)>,
}

impl Reservations {
    /// Until when `key` is reserved, if it is at `now`.
    pub fn held_until(&self, key: &[u8], now: Instant) -> Option<Instant> {
        self.until.get(key).map(|&(until, _)| until).filter(|&until| until > now)
    }

    /// A for-update read of `key` by `reserver` was answered: later ones wait until `until`.
    pub fn reserve(&mut self, key: Bytes, until: Instant, reserver: u64) {
        self.until.insert(key.clone(), (until, reserver));
        self.made.push_back((until, key));
    }

    /// A prepare naming `key` arrived, whoever's: the reads waiting for it go on.
    pub fn release(&mut self, key: &[u8]) {
        self.until.remove(key);
    }

    /// `reserver` will send no prepare: its reservation of `key`, if it still holds one, ends.
    /// True if it did.
    pub fn release_by(&mut self, key: &[u8], reserver: u64) -> bool {
        let held = self.until.get(key).is_some_and(|&(_, r)| r == reserver);
        held && reserver != 0 && self.until.remove(key).is_some()
    }

    /// Forgets the reservations lapsed at `now` (holds are equal, so `made` is in expiry
    /// order up to the clock's monotonicity; a straggler is only forgotten later).
    pub fn forget_lapsed(&mut self, now: Instant) {
        while let Some((until, _)) = self.made.front() {
            if *until > now {
                break;
            }
            let (until, key) = self.made.pop_front().expect("front");
            if self.until.get(&key).is_some_and(|&(u, _)| u == until) {
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
        r.reserve(Bytes::from("k"), at(2), 7);
        r.reserve(Bytes::from("j"), at(3), 8);
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
        r.reserve(Bytes::from("k"), at(2), 7);
        r.release(b"k");
        r.reserve(Bytes::from("k"), at(4), 8);
        r.forget_lapsed(at(2));
        assert_eq!(r.held_until(b"k", at(3)), Some(at(4)), "the first one's lapse keeps it");
    }

    #[test]
    fn only_the_reserver_releases_its_reservation() {
        let mut r = Reservations::default();
        r.reserve(Bytes::from("k"), at(4), 7);
        assert!(!r.release_by(b"k", 8));
        assert_eq!(r.held_until(b"k", at(1)), Some(at(4)), "another transaction's release");
        assert!(r.release_by(b"k", 7));
        assert_eq!(r.held_until(b"k", at(1)), None, "its own");
        r.reserve(Bytes::from("j"), at(4), 0);
        assert!(!r.release_by(b"j", 0));
        assert_eq!(r.held_until(b"j", at(1)), Some(at(4)), "a reader without a name");
    }
}
