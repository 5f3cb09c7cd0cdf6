//! The client's RequestTracker (`specs/rifl.md` §2.3, §5.2): allocates sequence numbers and
//! knows `first_incomplete`, the acknowledgement every request carries.
//!
//! Sans-IO: where the spec says "blocks", [`RequestTracker::new_sequence_num`] returns
//! [`SequenceError::WindowFull`] and the caller waits for a completion (the async client
//! parks on a notification; the simulator retries after the next response).

use std::collections::BTreeMap;

use thiserror::Error;

#[derive(Clone, Copy, Debug, Error, PartialEq, Eq)]
pub enum SequenceError {
    /// `window` RPCs are outstanding from `first_incomplete` on: wait for the oldest.
    #[error("{window} requests are outstanding; wait for the oldest to complete")]
    WindowFull { window: u64 },
    /// A block larger than the window can never be allocated (R-D22 `TransactionTooLarge`).
    #[error("a block of {requested} ids exceeds the window of {window}")]
    TooLarge { requested: u64, window: u64 },
}

/// Sequence numbers of one client id: from 1, increasing by 1; outstanding RPCs (or blocks of
/// them, for transactions) until `rpc_completed`.
#[derive(Clone, Debug)]
pub struct RequestTracker {
    window: u64,
    next_seq: u64,
    /// Outstanding blocks: first seq -> length (1 for a single RPC). Ordered, so the first key
    /// is `first_incomplete`.
    outstanding: BTreeMap<u64, u64>,
}

impl RequestTracker {
    pub fn new(window: u64) -> Self {
        assert!(window > 0, "a window of 0 admits no request");
        RequestTracker { window, next_seq: 1, outstanding: BTreeMap::new() }
    }

    /// §5.2 `new_sequence_num`: the next id, or `WindowFull` while `next_seq - first_incomplete
    /// >= window`.
    pub fn new_sequence_num(&mut self) -> Result<u64, SequenceError> {
        self.new_sequence_block(1)
    }

    /// R-D22 `new_sequence_block(n)`: `n` consecutive ids completed as a unit.
    pub fn new_sequence_block(&mut self, n: u64) -> Result<u64, SequenceError> {
        if n == 0 || n > self.window {
            return Err(SequenceError::TooLarge { requested: n, window: self.window });
        }
        if self.next_seq + n - self.first_incomplete() > self.window {
            return Err(SequenceError::WindowFull { window: self.window });
        }
        let first = self.next_seq;
        self.next_seq += n;
        self.outstanding.insert(first, n);
        Ok(first)
    }

    /// §5.2 `first_incomplete`: the smallest seq not yet completed (`next_seq` if none).
    pub fn first_incomplete(&self) -> u64 {
        self.outstanding.keys().next().copied().unwrap_or(self.next_seq)
    }

    /// §5.2 `rpc_completed`: the response for `seq` arrived (for a block: any id of it
    /// completes the block). Completing an id twice, or one never allocated, does nothing.
    pub fn rpc_completed(&mut self, seq: u64) {
        if let Some((&first, &len)) = self.outstanding.range(..=seq).next_back() {
            if seq < first + len {
                self.outstanding.remove(&first);
            }
        }
    }

    /// RPCs (blocks counted by their ids) not yet completed.
    pub fn outstanding(&self) -> u64 {
        self.outstanding.values().sum()
    }

    /// The id the next `new_sequence_num` returns.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ids_start_at_one_and_first_incomplete_follows_the_oldest() {
        let mut t = RequestTracker::new(512);
        assert_eq!(t.first_incomplete(), 1);
        let a = t.new_sequence_num().unwrap();
        let b = t.new_sequence_num().unwrap();
        assert_eq!((a, b), (1, 2));
        t.rpc_completed(b);
        assert_eq!(t.first_incomplete(), 1, "the oldest is still outstanding");
        t.rpc_completed(a);
        assert_eq!(t.first_incomplete(), 3);
    }

    #[test]
    fn the_window_holds_back_the_513th_request_until_the_oldest_completes() {
        let mut t = RequestTracker::new(512);
        for _ in 0..512 {
            t.new_sequence_num().unwrap();
        }
        assert_eq!(t.new_sequence_num(), Err(SequenceError::WindowFull { window: 512 }));
        t.rpc_completed(2); // not the oldest: the window does not move
        assert!(t.new_sequence_num().is_err());
        t.rpc_completed(1);
        assert_eq!(t.new_sequence_num(), Ok(513));
    }

    #[test]
    fn a_block_completes_as_a_unit_and_too_large_blocks_are_refused() {
        let mut t = RequestTracker::new(4);
        assert_eq!(
            t.new_sequence_block(5),
            Err(SequenceError::TooLarge { requested: 5, window: 4 })
        );
        assert_eq!(t.new_sequence_block(3), Ok(1));
        assert_eq!(t.new_sequence_block(2), Err(SequenceError::WindowFull { window: 4 }));
        assert_eq!(t.new_sequence_num(), Ok(4));
        t.rpc_completed(2);
        assert_eq!(t.first_incomplete(), 4);
        assert_eq!(t.outstanding(), 1);
    }

    proptest! {
        /// rifl.md §7 inv. 8: `next_seq - first_incomplete <= window` at all times, and every
        /// allocated id is within the window of the `first_incomplete` sent with it.
        #[test]
        fn the_window_invariant_holds_under_any_completion_order(
            window in 1u64..16,
            steps in proptest::collection::vec((any::<bool>(), any::<u16>()), 0..200),
        ) {
            let mut t = RequestTracker::new(window);
            let mut live: Vec<u64> = Vec::new();
            for (allocate, pick) in steps {
                if allocate || live.is_empty() {
                    if let Ok(seq) = t.new_sequence_num() {
                        let fi = t.first_incomplete();
                        prop_assert!(fi <= seq && seq < fi + window);
                        live.push(seq);
                    }
                } else {
                    let seq = live.swap_remove(pick as usize % live.len());
                    t.rpc_completed(seq);
                }
                prop_assert!(t.next_seq() - t.first_incomplete() <= window);
                prop_assert_eq!(t.first_incomplete(), live.iter().copied().min().unwrap_or(t.next_seq()));
            }
        }
    }
}
