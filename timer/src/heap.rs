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
//!
//! The heap is 4-ary: a node's children are four adjacent 16-byte entries
//! (one or two cache lines), so a pop walks half as many levels as in a
//! binary heap. With 100 000 sleepers due together, the binary heap's pops
//! were most of the timer thread's time, each lower level a cache miss.
//! Pushes of later and later deadlines, the common case, stop at once.

use crate::prefetch::prefetch;
use crate::slot::{Entry, SlotTable};

/// Below this many entries the heap is never compacted.
#[cfg(not(loom))]
const COMPACT_MIN: usize = 1024;
#[cfg(loom)]
const COMPACT_MIN: usize = 2;

/// Children per node.
const ARITY: usize = 4;

/// A min-heap of entries by deadline (entries with equal deadlines come out
/// in no particular order).
#[derive(Debug)]
pub(crate) struct TimerHeap {
    entries: Vec<Entry>,
    /// Compact when the heap reaches this length.
    compact_at: usize,
}

impl TimerHeap {
    pub(crate) fn new() -> Self {
        TimerHeap {
            entries: Vec::new(),
            compact_at: COMPACT_MIN,
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, entry: Entry) {
        self.entries.push(entry);
        self.sift_up(self.entries.len() - 1);
    }

    /// The entry with the earliest deadline.
    #[inline]
    pub(crate) fn peek(&self) -> Option<Entry> {
        self.entries.first().copied()
    }

    /// The top and its children: the next entry to pop, and the one after.
    #[inline]
    pub(crate) fn next_tops(&self) -> &[Entry] {
        &self.entries[..self.entries.len().min(1 + ARITY)]
    }

    #[inline]
    pub(crate) fn pop(&mut self) -> Option<Entry> {
        if self.entries.is_empty() {
            return None;
        }
        let top = self.entries.swap_remove(0);
        if !self.entries.is_empty() {
            self.sift_down(0);
        }
        Some(top)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Drops stale entries if the heap has doubled since it was last
    /// compacted.
    pub(crate) fn maybe_compact(&mut self, table: &SlotTable) {
        if self.entries.len() >= self.compact_at {
            self.entries.retain(|e| table.is_live(e));
            self.heapify();
            self.compact_at = (2 * self.entries.len()).max(COMPACT_MIN);
        }
    }

    /// Removes every entry.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = Entry> + '_ {
        self.entries.drain(..)
    }

    /// Moves the entry at `i` up to its place.
    fn sift_up(&mut self, mut i: usize) {
        let entry = self.entries[i];
        while i > 0 {
            let parent = (i - 1) / ARITY;
            if self.entries[parent].deadline <= entry.deadline {
                break;
            }
            self.entries[i] = self.entries[parent];
            i = parent;
        }
        self.entries[i] = entry;
    }

    /// Moves the entry at `i` down to its place.
    fn sift_down(&mut self, mut i: usize) {
        let entry = self.entries[i];
        let len = self.entries.len();
        loop {
            let first = ARITY * i + 1;
            if first >= len {
                break;
            }
            // The grandchildren (4 lines), one of whose groups is read next:
            // load them while this level is compared.
            let grandchildren = ARITY * first + 1;
            if grandchildren < len {
                let at = self.entries[grandchildren..].as_ptr();
                prefetch(at, ARITY * ARITY * std::mem::size_of::<Entry>());
            }
            let mut least = first;
            for c in first + 1..(first + ARITY).min(len) {
                if self.entries[c].deadline < self.entries[least].deadline {
                    least = c;
                }
            }
            if entry.deadline <= self.entries[least].deadline {
                break;
            }
            self.entries[i] = self.entries[least];
            i = least;
        }
        self.entries[i] = entry;
    }

    /// Restores the heap order of the whole vector.
    fn heapify(&mut self) {
        let len = self.entries.len();
        if len < 2 {
            return;
        }
        for i in (0..=(len - 2) / ARITY).rev() {
            self.sift_down(i);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::callback::Callback;
    use crate::slot::PrefetchHint;

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
        let (_, stamp) = live.arm(0, Callback::once(|| {}), PrefetchHint::NONE);
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

    /// Against a sorted copy, through pushes, pops and compactions in a
    /// deterministic pseudo-random order.
    #[test]
    fn matches_a_sorted_list() {
        let table = SlotTable::new();
        let mut h = TimerHeap::new();
        let mut model: Vec<u64> = Vec::new();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for step in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x % 3 == 0 && !model.is_empty() {
                model.sort_unstable();
                let least = model.remove(0);
                assert_eq!(h.pop().map(|e| e.deadline), Some(least), "step {step}");
            } else {
                let deadline = x % 1000;
                model.push(deadline);
                h.push(Entry {
                    deadline,
                    slot: 0,
                    stamp: 0,
                });
            }
            assert_eq!(h.len(), model.len());
            assert_eq!(h.peek().map(|e| e.deadline), model.iter().min().copied());
        }
        // Compaction (everything here is stale) empties it, heap intact.
        h.compact_at = 0;
        h.maybe_compact(&table);
        assert_eq!(h.len(), 0);
        assert_eq!(h.pop(), None);
    }

    #[test]
    fn heapify_after_retain_keeps_the_order() {
        let mut h = TimerHeap::new();
        for d in (0..1000u64).rev() {
            h.push(Entry {
                deadline: d * 7919 % 1000,
                slot: (d % 2) as u32,
                stamp: 0,
            });
        }
        h.entries.retain(|e| e.slot == 0);
        h.heapify();
        let out: Vec<u64> = std::iter::from_fn(|| h.pop()).map(|e| e.deadline).collect();
        assert_eq!(out.len(), 500);
        assert!(out.windows(2).all(|w| w[0] <= w[1]), "{out:?}");
    }
}
