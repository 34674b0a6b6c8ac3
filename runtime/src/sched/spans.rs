//! Spans that belong to tasks.
//!
//! `tracing` keeps the current span per OS thread (a subscriber's span
//! stack, such as tracing-subscriber's `Registry`'s, is thread-local). A
//! task that entered a span and switched out would leave it current on its
//! worker, and every task run there until it resumed would log inside it.
//! So a task takes its spans with it: when a dispatcher exists,
//! [`suspend`](super::suspend) switches through [`switch_in_spans`], which
//! exits the spans the task entered, innermost first, keeps their ids in
//! the task's meta, switches, and as the task resumes re-enters them,
//! outermost first. Another task never runs inside them, and the task's
//! own events carry them after any wait.
//!
//! Which spans are the task's: those current above the worker's *base*,
//! the span that was current on the thread when its worker loop began
//! ([`note_worker_base`]; none unless code run on the thread before the
//! loop left one entered). Between tasks the worker's current span is its
//! base: the runtime enters no span on a worker outside tasks, and a task
//! takes its own off when it switches out. (A task that ends with a span
//! still entered, its guard forgotten, leaves it on the worker, as a
//! thread would until it exits.)
//!
//! What the subscriber must do: say which span is current on this thread
//! (`Subscriber::current_span`), as tracing-subscriber's `Registry` does.
//! One that does not (the trait's default: unknown) sees nothing exited or
//! re-entered, and gets no task attribution. One whose current span does
//! not change when exited would loop: [`MAX_TASK_SPANS`] bounds the exits.
//! The dispatcher must be the global default: a scoped one
//! (`tracing::subscriber::with_default`) is per OS thread, so it is seen by
//! every task of the worker it was set on while it is set.
//!
//! The `Registry`'s books, span by span:
//! - reference counts: a `Registry` before 0.3.21 took a reference to a span
//!   on its first enter on a thread and dropped it on the matching exit
//!   (later ones take none). The exit here and the re-enter on resume pair
//!   up, so the count is what it was before the switch; and it never
//!   reaches zero meanwhile, because the task's guard holds the span (an
//!   `Entered` borrows its `Span`, an `EnteredSpan` owns it). When the guard
//!   exits the span later, the span is entered again, as the guard left it;
//! - a span entered twice (its second entry a *duplicate*, which the
//!   `Registry` skips as current) is exited and re-entered twice: the first
//!   re-entry counts, the second is again a duplicate. Its place among the
//!   spans entered between the two entries may change (the exits follow the
//!   `Registry`'s current span, which skips duplicates), which changes
//!   nothing the `Registry` reports: the current span and its scope are the
//!   same;
//! - a task that the runtime's stop cancels while it is switched out is
//!   unwound from inside its switch, never returning to re-enter its
//!   spans: so its worker re-enters them just before it unwinds the task
//!   (`TaskGroup::cancel`, on the thread they were exited on), and the
//!   task's guards exit them as the unwind reaches them. Every enter has
//!   its exit, nothing is exited twice, and what its destructors log
//!   carries its spans. Its `Span`s drop in the unwind and close as usual;
//! - a subscriber that panics in `exit` leaves the spans exited before the
//!   panic off the worker, and the task unwinds: its guards' exits of
//!   spans no longer entered are no-ops for the `Registry`.
//!
//! Cost (callgrind, `benches/src/bin/instructions.rs`): with no dispatcher
//! ever set, a switch pays one relaxed load and a branch
//! ([`may_be_entered`]) and nothing else: the rest is out of line, and
//! cold, so that it does not weigh on the code it is inlined into. With
//! one set, a switch asks the subscriber for its current span once (none:
//! done, and on the way back one test of the saved list); a task in spans
//! exits and re-enters each of them, and allocates its list once per task
//! slot (the capacity stays).

use crate::meta::seam::{Suspend, TaskYielder};
use crate::meta::TaskRef;
use std::cell::Cell;
use std::num::NonZeroU64;
use tracing::dispatcher::{self, Dispatch};
use tracing::span::Id;

/// The most spans a task takes off its worker as it switches out: deeper
/// than any task's nesting of spans, and the bound on a subscriber whose
/// current span does not change when it is exited (it would loop). A task
/// nested deeper leaves its outer spans on the worker.
const MAX_TASK_SPANS: usize = 64;

thread_local! {
    /// The span that was current on this worker thread when its loop
    /// began (see the module docs), as its id's number.
    static BASE: Cell<Option<NonZeroU64>> = const { Cell::new(None) };
}

/// Notes the span current on this thread, as its worker loop begins: the
/// worker's base, below the spans its tasks enter.
pub(super) fn note_worker_base() {
    let base = if dispatcher::has_been_set() {
        dispatcher::get_default(|d| current(d).map(|id| id.into_non_zero_u64()))
    } else {
        None
    };
    BASE.with(|b| b.set(base));
}

/// Whether a task may be inside spans: whether a dispatcher was ever set
/// (one relaxed load). If not, a task switches out as if spans did not
/// exist, and [`switch_in_spans`] is not called.
#[inline(always)]
pub(super) fn may_be_entered() -> bool {
    dispatcher::has_been_set()
}

/// Switches task `t` out through `y` with `reason`, taking the spans it
/// entered with it: exits them, switches, and re-enters them as it
/// resumes. Out of line and cold, though it is every switch's path once a
/// dispatcher is set: so the switch of a program with none carries
/// nothing of it (`cold` keeps the callers' loops from keeping values in
/// registers for it, which the switch would then reload each time: a few
/// instructions on a yield of about 200).
///
/// # Safety
/// `t` is the running task and the caller is its code (`super::suspend`'s
/// contract), and `y` its yielder.
#[cold]
#[inline(never)]
pub(super) unsafe fn switch_in_spans(t: TaskRef, y: &TaskYielder, reason: Suspend) {
    // SAFETY: the caller's contract.
    unsafe { exit_spans(t) };
    y.suspend(reason);
    // SAFETY: as above, resumed on its worker. (If the runtime's stop
    // unwinds the task from the switch instead, its worker has re-entered
    // them: `TaskGroup::cancel`.)
    unsafe { reenter(t) };
}

/// Re-enters the spans task `t` saved as it switched out, if any.
///
/// # Safety
/// The caller is `t`'s code, just resumed on its worker; or `t`'s worker,
/// about to unwind `t` from its switch (`TaskGroup::cancel`).
#[inline]
pub(super) unsafe fn reenter(t: TaskRef) {
    // SAFETY: the caller's contract.
    if unsafe { t.has_saved_spans() } {
        // SAFETY: as above.
        unsafe { reenter_spans(t) };
    }
}

/// The span current on this thread, for `d`'s subscriber.
#[inline]
fn current(d: &Dispatch) -> Option<Id> {
    d.current_span().into_inner().map(|(id, _)| id)
}

/// Exits the spans above the worker's base, innermost first, into `t`'s
/// saved list.
///
/// # Safety
/// As [`switch_in_spans`].
#[inline]
unsafe fn exit_spans(t: TaskRef) {
    dispatcher::get_default(|d| {
        // The floor of a switch with a subscriber set: one question.
        let Some(mut id) = current(d) else {
            return;
        };
        let base = BASE.with(Cell::get);
        // Moved out, not borrowed, while the subscriber runs (see
        // `TaskMeta::swap_saved_spans`).
        // SAFETY: the caller's contract: we are the task.
        let mut saved = unsafe { t.swap_saved_spans(Vec::new()) };
        debug_assert!(saved.is_empty(), "a running task has saved spans");
        loop {
            if Some(id.into_non_zero_u64()) == base {
                break;
            }
            if saved.len() == MAX_TASK_SPANS {
                tracing::trace!(
                    task = %t.id(),
                    "{MAX_TASK_SPANS} spans exited and one is still current: \
                     the rest stay on the worker"
                );
                break;
            }
            d.exit(&id);
            saved.push(id);
            match current(d) {
                Some(next) => id = next,
                None => break,
            }
        }
        // SAFETY: as above. What comes back is the empty list put there
        // (or one that a switch inside the subscriber emptied).
        drop(unsafe { t.swap_saved_spans(saved) });
    });
}

/// Re-enters `t`'s saved spans, outermost first, and empties the list
/// (keeping its capacity).
///
/// # Safety
/// As [`reenter`].
#[inline(never)]
unsafe fn reenter_spans(t: TaskRef) {
    // SAFETY: the caller's contract.
    let mut saved = unsafe { t.swap_saved_spans(Vec::new()) };
    dispatcher::get_default(|d| {
        for id in saved.iter().rev() {
            d.enter(id);
        }
    });
    saved.clear();
    // SAFETY: as above.
    drop(unsafe { t.swap_saved_spans(saved) });
}
