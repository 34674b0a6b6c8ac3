//! The coroutine a task runs on, and dropping what a task leaves behind.
//!
//! A task's coroutine is built on its stack when it first runs (or at
//! spawn, for a body too large to keep in its meta): [`bind`] takes the
//! pending body out of the meta, [`install_coroutine`] builds the coroutine
//! and records the stack's guard page for overflow reports. A coroutine is
//! resumed with `()` and suspends with a [`Suspend`](super::seam::Suspend) reason; its entry
//! records the yielder it suspends through in the meta, before the body
//! runs.

use super::seam::{Coro, TaskYielder};
use super::TaskRef;
use crate::stack::{self, TaskStack};
use corosensei::Coroutine;
use std::panic::{self, AssertUnwindSafe};

/// A task body on its way into a coroutine built at spawn. If the
/// coroutine is dropped before it ever runs (its task cancelled at
/// shutdown), corosensei drops the body under a guard that aborts the
/// process on a panic: so a `Drop` of its captures that panics is contained
/// here.
struct UnrunBody<B> {
    t: TaskRef,
    body: Option<B>,
}

impl<B: FnOnce(TaskRef)> UnrunBody<B> {
    fn run(mut self, y: &TaskYielder) {
        // SAFETY: we are the task, entering its body: the yielder lives on
        // our stack for as long as the body runs.
        unsafe { self.t.set_yielder(y) };
        let body = self.body.take().expect("a body runs once");
        body(self.t);
        // Its task-locals drop as the task ends, as a thread's do.
        drop_locals(self.t);
    }
}

impl<B> Drop for UnrunBody<B> {
    fn drop(&mut self) {
        if let Some(body) = self.body.take() {
            drop_cancelled(self.t, body);
        }
    }
}

/// Builds `t`'s coroutine on `stack` to run `body`, and records the stack's
/// guard page as `t`'s for overflow reports.
///
/// # Safety
/// The caller owns `t` (nobody else sees it, or it is about to run it), and
/// what `body` borrows outlives the task.
pub(crate) unsafe fn install_coroutine<B>(t: TaskRef, stack: TaskStack, body: B)
where
    B: FnOnce(TaskRef),
{
    // One bit: the soundness of the stack's `Stack` impl rests on it.
    assert!(stack.is_guarded(), "a task runs on a guarded stack");
    // corosensei's limit is the bottom of the mapping, whose first page is
    // the guard page.
    let limit = corosensei::stack::Stack::limit(&stack).get();
    let top = corosensei::stack::Stack::base(&stack).get();
    let body = UnrunBody {
        t,
        body: Some(body),
    };
    let entry = move |y: &TaskYielder, ()| body.run(y);
    // SAFETY: the caller promises that what `body` borrows outlives the
    // task; corosensei needs nothing else of a non-'static closure.
    let coro: Coro = unsafe { Coroutine::with_stack_unchecked(stack, entry) };
    // SAFETY: the caller owns the task; the guard is read only while it runs.
    unsafe {
        t.guard
            .with_mut(|p| *p = (limit, limit + stack::page_size(), top));
        *t.coro_mut() = Some(coro);
    }
}

/// Builds the coroutine of a never-run task whose body waits in its meta,
/// on `stack` (its reserved stack or one its worker had at hand).
///
/// # Safety
/// The caller owns `t` (it is about to run it) and `t` has a pending body.
pub(crate) unsafe fn bind(t: TaskRef, stack: TaskStack) {
    // SAFETY: the caller owns the task and its meta's body.
    let body = unsafe { t.body_mut().take() };
    // SAFETY: the caller owns the task; what the body borrows outlives it
    // (promised when the body was stored).
    unsafe { install_coroutine(t, stack, move |t| body.run(t)) };
}

/// Drops `v`, which belongs to task `t`, where a panic has nowhere to go:
/// a `Drop` that panics is reported (`what` says what was dropped; at debug
/// level if `expected` says the unwind was the runtime's own), and the
/// caller goes on.
pub(crate) fn drop_contained<V>(t: TaskRef, what: &str, expected: impl FnOnce() -> bool, v: V) {
    if let Err(p) = panic::catch_unwind(AssertUnwindSafe(|| drop(v))) {
        let panic = crate::error::panic_message(&*p);
        if expected() {
            tracing::debug!(task = %t.id(), panic, "unwound while dropping {what}");
        } else {
            tracing::warn!(task = %t.id(), panic, "dropping {what} panicked");
        }
        // The payload's own `Drop` may panic in turn: contain that one too
        // (and leak it).
        if let Err(again) = panic::catch_unwind(AssertUnwindSafe(|| drop(p))) {
            std::mem::forget(again);
        }
    }
}

/// Drops what a cancelled task held (its coroutine, or its body's
/// captures). A `Drop` that panics must not take the worker down with it,
/// nor leak what the cancel does next.
pub(crate) fn drop_cancelled<V>(t: TaskRef, held: V) {
    drop_contained(t, "a cancelled task's captures", || false, held);
}

/// Rounds of drops that may each leave new values behind (a `Drop` that
/// uses a key) before the rest is leaked, as `thread_local!` gives up on
/// keys used from destructors.
const DROP_ROUNDS: usize = 4;

/// Drops `t`'s task-local values, as the task, when its body has returned.
/// Values a `Drop` makes again are dropped in turn, for a few rounds; a
/// `Drop` that panics is contained and reported.
pub(crate) fn drop_locals(t: TaskRef) {
    for _ in 0..DROP_ROUNDS {
        // SAFETY: we are the task itself, past its body: nothing borrows
        // its values any more.
        let values = unsafe { (*t.locals_ptr()).take() };
        if values.is_empty() {
            return;
        }
        drop_contained(t, "a task-local value", || false, values);
    }
    // SAFETY: as above.
    let left = unsafe { (*t.locals_ptr()).take() };
    if !left.is_empty() {
        tracing::warn!(task = %t.id(), "task-local destructors keep making values; leaking them");
        std::mem::forget(left);
    }
}
