//! The seam between the scheduler and what waits.
//!
//! A task switches out with a [`Suspend`] reason, and its worker acts on it
//! only once the task's stack is no longer running (bthread's "remained"
//! callback, tokio's `Schedule`, may's `EventSource::subscribe`). A task
//! that waits names a [`Blocker`]: the worker calls [`Blocker::block`]
//! after the switch, and that is where the wait becomes visible to wakers
//! and timers, so nothing can resume a stack that still runs. The worker
//! knows nothing else of waits: the wait layer implements `Blocker` (for
//! the wait node every wait uses), and the scheduler calls into waits only
//! through it (waits hand tasks back through `sched::make_ready`). A sleep's
//! deadline and the runtime's stop reach the worker through it too
//! (`Blocked::Sleeping`, `end_due_sleep`, `end_at_stop`). Every wait of a
//! task — butexes, sleeps, joins, the ends of scopes and `block_on`,
//! the `sync` primitives and channels, I/O readiness, the blocking pool's
//! results — is a wait on a `WaitQueue`; they differ in what they do, not
//! in their type, so the worker calls the seam without dynamic dispatch.

use super::TaskRef;
use std::time::Instant;

// The types a task switches out with live beside the meta that holds the
// coroutine (`task_meta.rs`): a meta holds its coroutine, which suspends
// with a `Suspend`, which may name the `WaitNode` of a wait, whose waiter
// is a `TaskRef` into a meta. With them here, three files would import
// each other in a ring.
pub(crate) use super::task_meta::{BlockerRef, Coro, Suspend, TaskYielder};

/// What a worker does after [`Blocker::block`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Blocked {
    /// The wait was refused (its value moved, an interrupt was pending):
    /// the task runs again at once.
    Refused,
    /// The task waits; a waker or a timer will make it ready.
    Waiting,
    /// The task sleeps until this instant, with its timer armed: if its
    /// worker is idle then, it ends the sleep itself
    /// ([`Blocker::end_due_sleep`]) instead of waiting for the timer
    /// thread's wake-up (which is what makes sleeps accurate).
    Sleeping(Instant),
}

/// A wait a task is blocked in, seen from its worker; see the module docs.
///
/// # Safety
/// Implementors promise what the worker relies on: after `block` returns
/// anything but `Refused`, the task is made ready (through `make_ready`)
/// exactly once, by whoever ends the wait; `end_due_sleep` and
/// `end_at_stop` end the wait that way or not at all.
pub(crate) unsafe trait Blocker {
    /// Makes the wait visible: links it where wakers find it, arms its
    /// timer. Called once, by the task's worker, after the switch.
    ///
    /// # Safety
    /// `t` is the task that suspended with this blocker, and has not
    /// resumed.
    unsafe fn block(&self, t: TaskRef) -> Blocked;

    /// The worker, idle, found a sleep it noted (`Blocked::Sleeping`) due:
    /// end it now, unless its timer already has.
    ///
    /// # Safety
    /// The task has not resumed, and this runs on its worker (so it cannot
    /// resume meanwhile).
    unsafe fn end_due_sleep(&self);

    /// The runtime stops: end the wait so that the task is queued on its
    /// worker, which then unwinds it. Returns `false` if the wait had
    /// ended already (the task is on its way to its worker), or may not be
    /// cut short (`WaitPolicy::Uncancellable`).
    ///
    /// # Safety
    /// As [`end_due_sleep`](Self::end_due_sleep).
    unsafe fn end_at_stop(&self) -> bool;
}
