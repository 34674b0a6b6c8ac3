//! The cooperative budget: operations that complete without waiting
//! make the running task yield now and then.
//!
//! A task switches out only when it waits, yields or ends. Some operations
//! usually complete without waiting: an unbounded channel send never
//! waits, and a socket whose peer always has data ready (or always has
//! room) never returns `EAGAIN`. A task that runs such operations in a loop
//! would never switch out, and the other tasks of its worker would wait
//! for the loop's end: for good, if it has none. So each such operation
//! [`spend`]s one unit of a per-thread budget, and every
//! [`OPS_BEFORE_YIELD`]th the running task yields: the worker's other
//! ready tasks run, and it carries on after them (tokio's cooperative
//! budget does the same; its budget is 128 operations too).
//!
//! A yield for the budget also brings the worker's I/O poll forward: a
//! worker polls its fds every 61 tasks it runs, and 61 slices of a task
//! that works long between its calls could be a long time for the events
//! its other tasks wait for. So, if the worker's fds were last polled
//! 100 µs ago or more, they are polled before the next task runs
//! (`TaskGroup::budget_spent`): a reply another task waits for then waits
//! at most about that, plus one slice.
//!
//! The budget is one counter per thread, shared by every kind of
//! operation and every task of the worker: a task that completes
//! `OPS_BEFORE_YIELD` operations in a row without waiting yields at least
//! once among them, and a task that waits between operations yields now
//! and then for nothing (a yield costs about 50 ns). The count is not reset
//! when a task switches out: that would put a store on every switch to
//! save those spare yields. A task that cannot switch out (a plain thread,
//! a task while it unwinds) counts and does not yield.
//!
//! Per thread, touched only by it: one `Cell`. No allocation, no lock.

use super::{can_suspend, current_group, current_task, suspend};
use crate::meta::seam::Suspend;
use std::cell::Cell;

/// Every this many operations that complete without waiting on a worker
/// thread, the running task yields. 128 unbounded sends take 3-5 µs here,
/// well within the grace a thief gives a worker held by one task before it
/// takes that worker's new tasks (`group.rs`, `STEAL_GRACE`, 10 µs: the
/// two are tied by that measurement, not by code): so a producer in a loop
/// does not look like a worker held up, and the tasks spawned with it
/// start beside it, where the messages cost a local switch. A yield is
/// about 50 ns, under 0.4 ns an operation. Measured
/// (`benches/placement.sh`), 4 producers and a receiver spawned from a
/// plain thread went from 21-26 M messages/s, with the consumer stolen in
/// some runs, to 33-34 in every run (every 4096 sends, a producer held its
/// worker 60-120 µs; every 256, 5-10 µs, and the consumer was still stolen
/// now and then). A socket call that does not wait is a syscall (a
/// 16-byte read or write over loopback took 1.1-1.6 µs here), so 128 of
/// them hold a worker for about 0.2 ms.
pub(crate) const OPS_BEFORE_YIELD: u32 = 128;

std::thread_local! {
    /// Operations completed without waiting on this thread (see
    /// `OPS_BEFORE_YIELD`).
    static SPENT: Cell<u32> = const { Cell::new(0) };
}

/// After an operation that completed without waiting: lets the worker's
/// other tasks run, once every [`OPS_BEFORE_YIELD`] operations (a task
/// only, and one that may switch out).
#[inline]
pub(crate) fn spend() {
    let due = SPENT.with(|c| {
        let n = c.get().wrapping_add(1);
        c.set(n);
        n % OPS_BEFORE_YIELD == 0
    });
    if due {
        yield_task();
    }
}

/// Yields the running task, if there is one that may switch out; its
/// worker polls its fds first if they are due (`TaskGroup::budget_spent`).
#[cold]
fn yield_task() {
    if let Some(t) = current_task().filter(|_| can_suspend()) {
        if let Some(g) = current_group() {
            g.budget_spent();
        }
        // SAFETY: `t` is the running task, we run its code, and it may
        // switch out now (`can_suspend`).
        unsafe { suspend(t, Suspend::Yield) };
    }
}
