//! A timer thread for spindle, in the lineage of bRPC's bthread `TimerThread`.
//!
//! One [`TimerThread`] runs callbacks at deadlines. It is built for the RPC
//! pattern, where every call arms a timeout and almost every call finishes
//! first and cancels it: arming and cancelling are the hot paths, firing is
//! the rare one.
//!
//! ```
//! use spindle_timer::{TimerOptions, TimerThread, Unschedule};
//! use std::time::{Duration, Instant};
//!
//! let timer = TimerThread::start(TimerOptions::default())?;
//! let id = timer.schedule(Instant::now() + Duration::from_secs(5), || println!("timed out"))?;
//! // ... the call finished in time:
//! assert_eq!(timer.unschedule(id), Unschedule::Removed);
//! # Ok::<(), spindle_timer::TimerError>(())
//! ```
//!
//! # Design
//!
//! ```text
//!  scheduling threads                                   timer thread
//!  ──────────────────                                   ────────────
//!  schedule(deadline, f)
//!   1. slot from thread-local cache ──► SlotTable [slot|slot|slot|...]  (version, stamp, callback)
//!   2. lock bucket[t], push Entry{deadline, slot, stamp}     ▲   │
//!        bucket 0  [e e e]  nearest                          │   │ 4. swap each bucket's Vec,
//!        bucket 1  [e]      nearest  ───────────────────────────►│    keep live entries
//!        ...  (13)                                           │   ▼
//!   3. only if earliest of its bucket:                       │  min-heap (private)
//!      lock global { nearest_run_time, sleeping }            │   │ 5. pop due entries:
//!      only if earliest of all and timer asleep:             │   │    CAS ARMED -> RUNNING, call,
//!      nsignals += 1, futex wake ──────────────────────────────► │    retire or re-arm
//!                                                            │   ▼
//!  unschedule(id): CAS on the slot's version ────────────────┘  6. futex wait on nsignals
//!   (never touches a bucket or the heap; frees the slot)           until the heap's top
//! ```
//!
//! - **Buckets** (`bucket.rs`): threads push onto
//!   one of 13 mutex-protected lists, so they rarely contend; only a deadline
//!   that is the earliest of its bucket goes on to the global mutex, and only
//!   one that is the earliest of all wakes the timer thread.
//! - **Versions** (`slot.rs`): an id is `version << 32 | slot`;
//!   `unschedule` is one compare-and-swap on the slot (`v -> v+2` removed,
//!   `v+1` means running), so it never waits for a callback; the freed
//!   slot goes to the thread's own cache (`pool.rs`), which takes the pool's
//!   lock once per 32 frees.
//! - **Value entries and early reclaim**: buckets and the heap hold 16-byte
//!   `{deadline, slot, stamp}` values, so the canceller frees the slot and
//!   drops the callback at once: cancelled timers do not hold memory until
//!   their deadline (unlike bthread, brpc #3383). Stale entries are dropped
//!   when seen, and compaction keeps their number proportional to the live
//!   timers.
//! - **No allocation** on the steady-state path for callbacks of up to three
//!   words: they are stored inline in the slot; slots come from a per-thread
//!   cache refilled 32 at a time.
//! - **Precision**: deadlines are on the monotonic clock; the timer thread's
//!   timer slack is 1 ns instead of Linux's default 50 µs, and it wakes 50 µs
//!   early and busy-waits the rest, within a budget of 5 % of one core.
//!
//! The protocols are explained where they are implemented: the slot state
//! machine in `slot.rs`, the wake-up and stop protocols in `thread.rs`, the
//! pool in `pool.rs`. docs/timer.md has the measurements.
//!
//! # Callbacks
//!
//! Callbacks run on the timer thread, one at a time: a slow callback delays
//! every other timer. Keep them short (the spindle runtime's callbacks move
//! a task to a run queue, or take a quick sample of its workers). They may
//! schedule, reschedule and cancel timers, and cancel their own (a periodic timer's callback ends it that
//! way); rescheduling their own fails with `NotPending`, since it is
//! running. A panicking callback is caught, reported with
//! `tracing` at error level and counted in [`TimerStats::panics`]; the
//! thread carries on (a panicking periodic timer is not re-armed).

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

// Other targets stop here, with one clear error, rather than deep inside
// libc (tests/linux_only.rs checks it).
#[cfg(not(target_os = "linux"))]
compile_error!(
    "spindle runs on Linux only: spindle-timer's thread waits on Linux's futex and sets its timer slack with prctl(PR_SET_TIMERSLACK)."
);

mod bucket;
mod callback;
mod clock;
mod heap;
mod loom;
mod pool;
mod prefetch;
mod slot;
mod stats;
mod thread;

#[doc(hidden)]
pub use clock::{deadline_ns, instant_of};
pub use prefetch::prefetch;
pub use slot::TimerId;
pub use stats::TimerStats;
pub use thread::{
    TimerError, TimerOptions, TimerThread, Unschedule, DEFAULT_COALESCE, MAX_BUCKETS,
};

/// `TimerThread` is shared between threads (a scheduler on every worker, a
/// callback cancelling another timer): pin `Send + Sync`.
#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<TimerThread>();
    is::<TimerId>();
    is::<TimerError>();
}
