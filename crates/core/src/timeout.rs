use std::cmp::Reverse;
use std::collections::BinaryHeap;

use strata_wire::Instant;

/// One optional deadline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timeout {
    deadline: Option<Instant>,
}

impl Timeout {
    pub fn arm(&mut self, at: Instant) {
        self.deadline = Some(at);
    }

    pub fn clear(&mut self) {
        self.deadline = None;
    }

    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// True (once) if the deadline has passed; clears it.
    pub fn fire(&mut self, now: Instant) -> bool {
        match self.deadline {
            Some(d) if d <= now => {
                self.deadline = None;
                true
            }
            _ => false,
        }
    }
}

/// Items due at instants; pops them in deadline order. Ties pop in insertion order, which
/// keeps runs deterministic.
#[derive(Debug)]
pub struct DeadlineQueue<T> {
    heap: BinaryHeap<Reverse<(Instant, u64, Slot<T>)>>,
    next_seq: u64,
}

/// Wrapper that orders by nothing, so `T` need not be `Ord`.
#[derive(Debug)]
struct Slot<T>(T);
impl<T> PartialEq for Slot<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl<T> Eq for Slot<T> {}
impl<T> PartialOrd for Slot<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Slot<T> {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

impl<T> Default for DeadlineQueue<T> {
    fn default() -> Self {
        DeadlineQueue { heap: BinaryHeap::new(), next_seq: 0 }
    }
}

impl<T> DeadlineQueue<T> {
    pub fn push(&mut self, at: Instant, item: T) {
        self.heap.push(Reverse((at, self.next_seq, Slot(item))));
        self.next_seq += 1;
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Pops the earliest item if it is due at `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<T> {
        if self.next_deadline()? <= now {
            self.heap.pop().map(|Reverse((_, _, Slot(item)))| item)
        } else {
            None
        }
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_deadline_then_insertion_order() {
        let mut q = DeadlineQueue::default();
        q.push(Instant(5), "b");
        q.push(Instant(1), "a");
        q.push(Instant(5), "c");
        assert_eq!(q.pop_due(Instant(0)), None);
        assert_eq!(q.pop_due(Instant(9)), Some("a"));
        assert_eq!(q.pop_due(Instant(9)), Some("b"));
        assert_eq!(q.pop_due(Instant(9)), Some("c"));
        assert!(q.is_empty());
    }

    #[test]
    fn timeout_fires_once() {
        let mut t = Timeout::default();
        t.arm(Instant(3));
        assert!(!t.fire(Instant(2)));
        assert!(t.fire(Instant(3)));
        assert!(!t.fire(Instant(4)));
    }
}
