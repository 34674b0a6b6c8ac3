//! Buckets: where `schedule` puts new entries for the timer thread to collect.
//!
//! Scheduling threads never touch the timer thread's heap. Each thread pushes
//! onto one of `num_buckets` buckets (13 by default, as in bthread), chosen
//! once per thread, so that threads rarely contend on a lock. A bucket is a
//! mutex around an unordered `Vec<Entry>` and the bucket's
//! `nearest_run_time`: the earliest deadline pushed since the timer thread
//! last emptied it. A push reports whether it lowered that value; only then
//! does the scheduler go on to compare with the global nearest time (see
//! [`crate::thread`]). In the RPC pattern (one timeout, rising deadlines)
//! almost no push lowers its bucket's nearest time, so almost no push touches
//! anything shared beyond its bucket.
//!
//! The timer thread empties a bucket by swapping its `Vec` with an empty one
//! it keeps for that bucket ([`Bucket::take`]), so capacity is recycled and
//! the steady state allocates nothing.
//!
//! Entries are values, and cancelling a timer does not remove its entry. To
//! keep cancelled entries from piling up while the timer thread sleeps (the
//! small form of brpc #3383), a push that would make a large `Vec` reallocate
//! first drops the stale entries in place; if that frees less than half the
//! capacity, the `Vec` grows as usual. Each compaction pass is paid for by at
//! least half a capacity of pushes: amortized O(1), and a bucket holds
//! O(live timers) entries, never O(cancelled timers).

use crate::clock::NEVER;
use crate::loom::{lock, AtomicU64, Mutex, Ordering};
use crate::slot::{Entry, SlotTable};

/// A bucket is compacted only when it holds at least this many entries:
/// below that, a reallocation is cheaper than a pass over the slots. Both of
/// a bucket's `Vec`s start with this capacity ([`new_entries`]), so that a
/// full one is always compacted before it grows: otherwise a bucket whose
/// timer thread collected it often while it was young keeps a small `Vec`,
/// and an arm+cancel loop allocates each time a slow collection lets it fill.
#[cfg(not(loom))]
pub(crate) const COMPACT_MIN: usize = 256;
#[cfg(loom)]
pub(crate) const COMPACT_MIN: usize = 2;

/// An empty entry list with room for [`COMPACT_MIN`] entries.
pub(crate) fn new_entries() -> Vec<Entry> {
    Vec::with_capacity(COMPACT_MIN)
}

/// The timer thread is stopping: nothing may be pushed any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stopped;

/// One bucket; padded to two cache lines so neighbours never share one (the
/// adjacent-line prefetcher pairs lines).
#[derive(Debug)]
#[repr(align(128))]
pub(crate) struct Bucket {
    inner: Mutex<Inner>,
    /// Timers scheduled through this bucket. Written only under `inner`'s
    /// lock (a plain load and store, no read-modify-write), read by `stats`.
    scheduled: AtomicU64,
    /// `Removed` answers of `unschedule` calls from threads that use this
    /// bucket.
    pub(crate) unscheduled: AtomicU64,
}

/// What a bucket's mutex protects.
#[derive(Debug)]
struct Inner {
    /// Entries pushed since the timer thread last took them; unordered.
    entries: Vec<Entry>,
    /// The earliest deadline in `entries` (or of a compacted-away entry):
    /// never later than any entry's deadline. `NEVER` after a take.
    nearest_run_time: u64,
    /// Set once by `stop`, under the lock, so that a push either sees it or
    /// lands before the timer thread's final drain.
    stopped: bool,
}

impl Bucket {
    pub(crate) fn new() -> Self {
        Bucket {
            inner: Mutex::new(Inner {
                entries: new_entries(),
                nearest_run_time: NEVER,
                stopped: false,
            }),
            scheduled: AtomicU64::new(0),
            unscheduled: AtomicU64::new(0),
        }
    }

    /// Pushes `entry`. Returns whether its deadline is now the bucket's
    /// earliest (the caller must then tell the timer thread). `new_timer`
    /// counts it as scheduled.
    #[inline]
    pub(crate) fn push(
        &self,
        entry: Entry,
        new_timer: bool,
        table: &SlotTable,
    ) -> Result<bool, Stopped> {
        let mut inner = lock(&self.inner);
        if inner.stopped {
            return Err(Stopped);
        }
        let entries = &mut inner.entries;
        if entries.len() == entries.capacity() && entries.len() >= COMPACT_MIN {
            compact(entries, table);
        }
        entries.push(entry);
        let earlier = entry.deadline < inner.nearest_run_time;
        if earlier {
            inner.nearest_run_time = entry.deadline;
        }
        if new_timer {
            // Only this lock's holder writes the counter.
            self.scheduled.store(
                self.scheduled.load(Ordering::Relaxed) + 1,
                Ordering::Relaxed,
            );
        }
        Ok(earlier)
    }

    /// Timer thread: takes every entry, leaving `spare` (which must be empty)
    /// in its place, and resets the bucket's nearest time.
    #[inline]
    pub(crate) fn take(&self, spare: &mut Vec<Entry>) {
        debug_assert!(spare.is_empty());
        let mut inner = lock(&self.inner);
        std::mem::swap(&mut inner.entries, spare);
        inner.nearest_run_time = NEVER;
    }

    /// Refuses all later pushes.
    pub(crate) fn stop(&self) {
        lock(&self.inner).stopped = true;
    }

    /// Number of entries waiting.
    pub(crate) fn len(&self) -> usize {
        lock(&self.inner).entries.len()
    }

    /// Timers scheduled through this bucket.
    pub(crate) fn scheduled(&self) -> u64 {
        self.scheduled.load(Ordering::Relaxed)
    }
}

/// `a % d` for a divisor fixed at construction, without a division
/// instruction (Lemire, Kaser and Kurz, "Faster remainder by direct
/// computation", 2019): exact for every 32-bit `a` and `d`. Picking a bucket
/// happens on every `schedule` and every successful `unschedule`, and a
/// 64-bit `div` costs tens of cycles.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FastMod {
    d: u64,
    /// `ceil(2^64 / d)`, wrapping to 0 for `d == 1` (then every remainder is 0).
    m: u64,
}

impl FastMod {
    pub(crate) fn new(d: u32) -> Self {
        assert!(d > 0, "modulo by zero");
        FastMod {
            d: u64::from(d),
            m: (u64::MAX / u64::from(d)).wrapping_add(1),
        }
    }

    #[inline]
    pub(crate) fn rem(self, a: u32) -> usize {
        let low = self.m.wrapping_mul(u64::from(a));
        ((u128::from(low) * u128::from(self.d)) >> 64) as usize
    }
}

/// Drops stale entries in place; makes room for at least as many pushes as
/// there are live entries, so that the next pass is as far away.
#[cold]
fn compact(entries: &mut Vec<Entry>, table: &SlotTable) {
    entries.retain(|e| table.is_live(e));
    let capacity = entries.capacity();
    if entries.len() > capacity / 2 {
        entries.reserve(capacity);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::callback::Callback;
    use crate::slot::PrefetchHint;

    #[test]
    fn push_reports_a_new_earliest_deadline() {
        let table = SlotTable::new();
        let b = Bucket::new();
        let e = |deadline| Entry {
            deadline,
            slot: 0,
            stamp: 0,
        };
        assert_eq!(b.push(e(50), true, &table), Ok(true));
        assert_eq!(b.push(e(60), true, &table), Ok(false));
        assert_eq!(
            b.push(e(50), true, &table),
            Ok(false),
            "not strictly earlier"
        );
        assert_eq!(b.push(e(40), false, &table), Ok(true));
        assert_eq!(b.scheduled(), 3);
        let mut spare = Vec::new();
        b.take(&mut spare);
        assert_eq!(spare.len(), 4);
        assert_eq!(b.len(), 0);
        // Emptied: any deadline is the earliest again, even a late one.
        assert_eq!(b.push(e(1000), true, &table), Ok(true));
        b.stop();
        assert_eq!(b.push(e(1), true, &table), Err(Stopped));
    }

    #[test]
    fn fast_mod_is_exact() {
        for d in (1..=1024u32).chain([4095, 65_537, u32::MAX - 1, u32::MAX]) {
            let f = FastMod::new(d);
            for a in (0..2000u32).chain([u32::MAX - 1, u32::MAX, 1 << 31, 0x9e37_79b9]) {
                assert_eq!(f.rem(a), (a % d) as usize, "{a} % {d}");
            }
        }
    }

    #[test]
    fn stale_entries_are_compacted_instead_of_piling_up() {
        let table = SlotTable::new();
        table.grow(0);
        let slot = table.get(1).unwrap();
        let b = Bucket::new();
        // One live timer rescheduled 100 000 times: each reschedule leaves
        // the previous entry stale.
        let (v, mut stamp) = slot.arm(0, Callback::once(|| {}), PrefetchHint::NONE);
        for i in 0..100_000u64 {
            b.push(
                Entry {
                    deadline: i,
                    slot: 1,
                    stamp,
                },
                false,
                &table,
            )
            .unwrap();
            stamp = slot.restamp(v).unwrap();
        }
        let len = b.len();
        assert!(
            len < 2 * COMPACT_MIN,
            "{len} entries kept for one live timer"
        );
    }
}
