//! Shapes shared by the runtime benchmarks (`benches/runtime.rs`).
//!
//! Criterion's `iter_custom` hands a benchmark a number of *operations* to
//! time (one spawned task, one yield, one round trip). The runtimes are
//! driven in whole batches of a fixed size so that, whatever the count, the
//! workload keeps its shape: 200 000 tasks alive at once, two tasks yielding
//! 1 000 000 times each. Reporting per operation makes spindle and its peers
//! comparable at a glance.

use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::ThreadId;
use std::time::Duration;

/// Tasks spawned before they are all joined, in `spawn_join*`.
pub const SPAWN_BATCH: u64 = 200_000;
/// may's batch in `spawn_join` (from inside a coroutine). A may coroutine
/// spawned there does not run before its spawner blocks, and each one holds
/// an mmap'd stack with a guard page: two memory mappings. 200 000 of them
/// exceed `vm.max_map_count` (65 530 by default, 262 144 on the bench VM)
/// and may panics with "failed to alloc sys stack: ENOMEM"; 20 000 fit.
pub const MAY_SPAWN_BATCH: u64 = 20_000;
/// Yields per task and per batch, in `yield`.
pub const YIELD_BATCH: u64 = 1_000_000;

/// Times `iters` operations in whole batches of `batch`: runs
/// `ceil(iters / batch)` batches (at least one) through `run`, which returns
/// the time a batch of the given size took, and scales the total to `iters`.
///
/// A batch is the shape of the workload (e.g. 200 000 tasks alive at once),
/// so it must not shrink when criterion asks for fewer operations than a
/// batch holds; the per-operation time is the same either way.
///
/// ```
/// use spindle_benches::workload::full_batches;
/// use std::time::Duration;
/// let t = full_batches(3, 10, |n| Duration::from_nanos(2 * n));
/// assert_eq!(t, Duration::from_nanos(6));
/// ```
pub fn full_batches(iters: u64, batch: u64, mut run: impl FnMut(u64) -> Duration) -> Duration {
    assert!(batch > 0, "a batch holds at least one operation");
    let runs = iters.div_ceil(batch).max(1);
    let mut total = Duration::ZERO;
    for _ in 0..runs {
        total += run(batch);
    }
    let done = u128::from(runs * batch);
    let nanos = total.as_nanos() * u128::from(iters) / done;
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// Counts, over a benchmark's runs, whether two cooperating tasks ran on
/// the same OS thread. A runtime that never migrates a started task (spindle)
/// or runs it where it was woken can land a ping-pong pair on one worker
/// (every hand-off a local switch) or on two (every hand-off a cross-thread
/// wake-up); the two placements cost very different amounts, so the split
/// is printed next to the timing.
#[derive(Debug, Default)]
pub struct Placement {
    same: AtomicU64,
    split: AtomicU64,
}

impl Placement {
    /// A counter with no runs recorded.
    pub const fn new() -> Self {
        Placement {
            same: AtomicU64::new(0),
            split: AtomicU64::new(0),
        }
    }

    /// Records one run whose two tasks ran on threads `a` and `b`.
    pub fn record(&self, a: ThreadId, b: ThreadId) {
        let c = if a == b { &self.same } else { &self.split };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// `(runs on one thread, runs on two threads)` so far.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.same.load(Ordering::Relaxed),
            self.split.load(Ordering::Relaxed),
        )
    }
}

/// Asserts that a batch's tasks all ran: `counter` moved from `before` by
/// exactly `n`. A benchmark that loses tasks must fail, not report a time.
pub fn check_count(counter: &AtomicU64, before: u64, n: u64, what: &str) {
    let now = counter.load(Ordering::SeqCst);
    assert_eq!(
        now - before,
        n,
        "{what}: {n} tasks joined but {} bumped the counter",
        now - before
    );
}
