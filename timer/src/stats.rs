//! Counters, and the [`TimerStats`] snapshot built from them.
//!
//! No counter is a contended read-modify-write on the hot path:
//!
//! - `scheduled` lives in each bucket and is written under the bucket's lock
//!   (a plain load and store);
//! - `unscheduled` lives in each bucket too (a relaxed `fetch_add` by the
//!   canceller on the line of its own bucket);
//! - everything the timer thread counts ([`TimerCounters`]) is written by that
//!   thread alone.
//!
//! [`TimerThread::stats`](crate::TimerThread::stats) sums them. The counters
//! are read one by one while timers keep moving, so a snapshot taken under
//! load is approximate; once the timer is quiet it is exact.

use crate::loom::{AtomicU64, Ordering};
use std::time::Duration;

/// A snapshot of a timer thread's counters; see
/// [`TimerThread::stats`](crate::TimerThread::stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TimerStats {
    /// Timers scheduled (`schedule` and `schedule_periodic` calls that
    /// succeeded).
    pub scheduled: u64,
    /// Callback invocations (a periodic timer counts once per run), including
    /// those that panicked.
    pub triggered: u64,
    /// `unschedule` calls that answered [`Removed`](crate::Unschedule::Removed).
    pub unscheduled: u64,
    /// Timers armed and not yet finished: neither fired (one-shot), nor
    /// cancelled, nor dropped at stop. Cancelled timers are not held: their
    /// slots are reclaimed at once (brpc #3383).
    pub pending: u64,
    /// Times the timer thread woke up (a timeout or a signal).
    pub wakeups: u64,
    /// Time the timer thread spent awake (collecting entries and running
    /// callbacks), as opposed to sleeping.
    pub busy: Duration,
    /// Callbacks that panicked (caught and reported with `tracing`).
    pub panics: u64,
    /// Capacity of the slot table: the memory held for timers is
    /// `slots * 64` bytes. Grows with the peak of live timers, not with the
    /// number of cancelled ones.
    pub slots: u64,
    /// Entries waiting in buckets and in the timer thread's heap, live or
    /// stale (cancelled and rescheduled timers leave stale entries until they
    /// are collected or compacted away).
    pub queued: u64,
}

/// Counters written only by the timer thread.
#[derive(Debug)]
pub(crate) struct TimerCounters {
    /// Callback invocations.
    triggered: AtomicU64,
    /// Timers retired by the timer thread: one-shots that ran, periodic
    /// timers that ended, timers dropped at stop.
    retired: AtomicU64,
    wakeups: AtomicU64,
    busy_ns: AtomicU64,
    panics: AtomicU64,
    /// Length of the heap when the thread last went to sleep.
    heap_len: AtomicU64,
}

/// Adds `n` to a counter that only the calling thread writes.
#[inline]
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

impl TimerCounters {
    pub(crate) fn new() -> Self {
        TimerCounters {
            triggered: AtomicU64::new(0),
            retired: AtomicU64::new(0),
            wakeups: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
            panics: AtomicU64::new(0),
            heap_len: AtomicU64::new(0),
        }
    }

    #[inline]
    pub(crate) fn triggered(&self) {
        bump(&self.triggered, 1);
    }
    #[inline]
    pub(crate) fn retired(&self) {
        bump(&self.retired, 1);
    }
    #[inline]
    pub(crate) fn woke(&self) {
        bump(&self.wakeups, 1);
    }
    #[inline]
    pub(crate) fn busy(&self, ns: u64) {
        bump(&self.busy_ns, ns);
    }
    #[inline]
    pub(crate) fn panicked(&self) {
        bump(&self.panics, 1);
    }
    #[inline]
    pub(crate) fn set_heap_len(&self, n: usize) {
        self.heap_len.store(n as u64, Ordering::Relaxed);
    }

    /// Fills in the timer thread's share of `stats` and returns the number of
    /// timers it retired.
    pub(crate) fn read_into(&self, stats: &mut TimerStats) -> u64 {
        stats.triggered = self.triggered.load(Ordering::Relaxed);
        stats.wakeups = self.wakeups.load(Ordering::Relaxed);
        stats.busy = Duration::from_nanos(self.busy_ns.load(Ordering::Relaxed));
        stats.panics = self.panics.load(Ordering::Relaxed);
        stats.queued += self.heap_len.load(Ordering::Relaxed);
        self.retired.load(Ordering::Relaxed)
    }
}
