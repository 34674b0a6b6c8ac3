//! The timer thread's private min-heap of entries.
//!
//! Only the timer thread touches it, so it needs no lock. It holds the live
//! entries collected from the buckets, plus entries that went stale after
//! they were collected (their timer was cancelled or rescheduled); those are
//! skipped when popped. So that stale entries cannot accumulate while their
//! far-away deadlines approach, the heap is compacted (stale entries
//! dropped, heap rebuilt: O(n)) whenever it has doubled since the last
//! compaction, and never below [`COMPACT_MIN`] entries. That is amortized
//! O(1) per push and keeps the heap at most about twice its live entries.

use crate::slot::{Entry, SlotTable};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Below this many entries the heap is never compacted.
#[cfg(not(loom))]
const COMPACT_MIN: usize = 1024;
#[cfg(loom)]
const COMPACT_MIN: usize = 2;

/// A min-heap of entries by deadline.
#[derive(Debug)]
pub(crate) struct TimerHeap {
    heap: BinaryHeap<Reverse<Entry>>,
    /// Compact when the heap reaches this length.
    compact_at: usize,
}

impl TimerHeap {
    pub(crate) fn new() -> Self {
        TimerHeap {
            heap: BinaryHeap::new(),
            compact_at: COMPACT_MIN,
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, entry: Entry) {
        self.heap.push(Reverse(entry));
    }

    /// The entry with the earliest deadline.
    #[inline]
    pub(crate) fn peek(&self) -> Option<Entry> {
        self.heap.peek().map(|e| e.0)
    }

    #[inline]
    pub(crate) fn pop(&mut self) -> Option<Entry> {
        self.heap.pop().map(|e| e.0)
    }

    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    /// Drops stale entries if the heap has doubled since it was last
    /// compacted.
    pub(crate) fn maybe_compact(&mut self, table: &SlotTable) {
        if self.heap.len() >= self.compact_at {
            self.heap.retain(|e| table.is_live(&e.0));
            self.compact_at = (2 * self.heap.len()).max(COMPACT_MIN);
        }
    }

    /// Removes every entry.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = Entry> + '_ {
        self.heap.drain().map(|e| e.0)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::callback::Callback;

    #[test]
    fn pops_in_deadline_order() {
        let mut h = TimerHeap::new();
        for d in [5u64, 1, 9, 3, 7, 3] {
            h.push(Entry {
                deadline: d,
                slot: d as u32,
                stamp: 0,
            });
        }
        let order: Vec<u64> = std::iter::from_fn(|| h.pop()).map(|e| e.deadline).collect();
        assert_eq!(order, [1, 3, 3, 5, 7, 9]);
    }

    #[test]
    fn compaction_keeps_live_entries_only() {
        let table = SlotTable::new();
        table.grow(0);
        let live = table.get(7).unwrap();
        let (_, stamp) = live.arm(0, Callback::once(|| {}));
        let mut h = TimerHeap::new();
        h.push(Entry {
            deadline: 10,
            slot: 7,
            stamp,
        });
        for i in 0..(COMPACT_MIN as u64 * 3) {
            h.push(Entry {
                deadline: i,
                slot: 8,
                stamp: 1,
            }); // slot 8 is idle: stale
            h.maybe_compact(&table);
        }
        assert!(h.len() <= COMPACT_MIN);
        h.maybe_compact(&table);
        let left: Vec<Entry> = h.drain().filter(|e| table.is_live(e)).collect();
        assert_eq!(
            left,
            [Entry {
                deadline: 10,
                slot: 7,
                stamp
            }]
        );
    }
}
