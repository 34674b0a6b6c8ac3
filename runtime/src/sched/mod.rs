//! The scheduler: who runs tasks.
//!
//! A runtime is a [`TaskControl`] (its shared state: workers and their
//! inboxes, the 4 ParkingLots, the stack pool) and one [`TaskGroup`] per
//! worker thread (its queues, its run loop, stealing, the idle protocol,
//! idle polling). The stall watchdog, the workers' CPU affinity and the
//! cooperative budget (`coop.rs`, for operations that never wait) are
//! here too.
//!
//! Each worker owns an I/O poller of the driver layer (`crate::driver`),
//! made when one of its tasks first waits for an fd: the worker polls it
//! in its loop and parks in it (`idle.rs`), and hands it [`make_ready`] to
//! deliver the tasks its events wake. [`current_poller`] says where a task
//! registers its fds.
//!
//! The scheduler never imports the wait layer. A task that waits switches
//! out with `Suspend::Block`, and its worker acts on the wait only through
//! the seam (`meta::seam::Blocker`); waits hand woken tasks back through
//! [`make_ready`]. This module's functions are what the layers above use:
//! which task runs here, how it switches out, how a woken task is queued.

mod affinity;
mod context;
mod control;
pub(crate) mod coop;
mod group;
mod idle;
mod idle_poll;
mod queue;
mod spans;
mod spin_budget;
mod watchdog;

pub(crate) use affinity::Cpus;
pub(crate) use context::{current_runtime, enter, with_current_runtime, Entered};
pub(crate) use control::{Config, GroupRemote, GroupStats, OutsideSpawn, TaskControl, MAX_WORKERS};
pub(crate) use group::{
    current_group, current_task, make_ready, worker_of, TaskGroup, DEFAULT_IDLE_POLL,
    DEFAULT_SLEEP_SPIN, HELD_UP_WARNING,
};
pub(crate) use watchdog::{start as start_watchdog, DEFAULT_STALL_THRESHOLD};

use crate::driver::Poller;
use crate::meta::seam::Suspend;
use crate::meta::TaskRef;
use std::io;

/// Switches the current task out with `reason`; its worker acts on the
/// reason after the switch. The `tracing` spans the task entered leave the
/// worker with it and are entered again as it resumes (`spans.rs`).
///
/// A task never suspends while a panic unwinds: the panic count is per OS
/// thread, and whatever ran next on this worker would inherit it
/// (coio-rs #70). Callers check [`can_suspend`] first and fall back to
/// blocking the thread.
///
/// # Safety
/// `t` is the running task and the caller is its code ([`current_task`]),
/// and [`can_suspend`] holds. For `Suspend::Block`, the wait stays alive
/// until `t` resumes; for `Suspend::Urgent`, the child is a prepared task
/// in no queue.
pub(crate) unsafe fn suspend(t: TaskRef, reason: Suspend) {
    debug_assert!(can_suspend());
    // SAFETY: the caller's contract: we are the task itself, inside its
    // body, so its yielder lives on the stack we run on.
    let y = unsafe { t.yielder() };
    // SAFETY: as above, on its home worker's thread.
    unsafe { t.set_switched_out_at(switched_out_at()) };
    if spans::may_be_entered() {
        // SAFETY: as above.
        unsafe { spans::switch_in_spans(t, y, reason) };
    } else {
        y.suspend(reason);
    }
}

/// Where a task switching out leaves its frames: the frame pointer, in
/// builds with frame pointers (the start of the chain a task dump walks,
/// `crate::dump`), else the address of a local. Either lies among the
/// frames its resumption returns through (`TaskMeta::prefetch_frames`).
#[inline(always)]
fn switched_out_at() -> usize {
    #[cfg(spindle_frame_pointers)]
    {
        let fp: usize;
        // SAFETY: reads a register; touches no memory, the stack or flags.
        unsafe {
            std::arch::asm!("mov {}, rbp", out(reg) fp, options(nomem, nostack, preserves_flags))
        };
        fp
    }
    #[cfg(not(spindle_frame_pointers))]
    {
        let here = 0u8;
        std::ptr::addr_of!(here) as usize
    }
}

/// Whether the current task may switch out now.
#[inline]
pub(crate) fn can_suspend() -> bool {
    !std::thread::panicking()
}

/// The running task, if this thread is a worker running one and it may
/// switch out now: the task that a wait on this thread suspends.
#[inline]
pub(crate) fn suspendable_task() -> Option<TaskRef> {
    current_task().filter(|_| can_suspend())
}

/// Whether the code running on this thread is a cancelled task being
/// unwound by its runtime's stop.
pub(crate) fn unwinding_cancelled() -> bool {
    current_group().is_some_and(TaskGroup::is_unwinding_cancelled)
}

/// At stop, from inside the unwind of a cancelled task whose frame other
/// tasks still borrow: cancels the rest of this worker's tasks now (see
/// `TaskGroup::cancel_rest_at_stop`). Does nothing elsewhere.
pub(crate) fn cancel_rest_at_stop() {
    if let Some(g) = current_group().filter(|g| g.is_unwinding_cancelled()) {
        g.cancel_rest_at_stop();
    }
}

/// The poller of the worker running this thread, made if need be: where a
/// task of this thread registers its fds. `Ok(None)` on a thread that is
/// not a worker.
pub(crate) fn current_poller() -> io::Result<Option<&'static Poller>> {
    match current_group() {
        Some(g) => g.poller().map(Some),
        None => Ok(None),
    }
}
