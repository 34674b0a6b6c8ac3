//! Deadline scopes: a per-task (or, on a plain thread, per-thread) earliest
//! deadline that every blocking call folds into its own.
//!
//! A task keeps its scope in its meta, a plain thread in a thread-local.
//! `with_deadline` (the public API, `time.rs`) sets it around a closure,
//! and every wait of this layer ends with `DeadlineExceeded` once it
//! passes ([`effective_deadline`]).

use crate::sched;
use std::cell::Cell;
use std::time::Instant;

thread_local! {
    /// The deadline scope of a plain thread (tasks keep theirs in their meta).
    static THREAD_DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// The earliest deadline of the enclosing scopes, for the current task or
/// thread.
pub(crate) fn scope_deadline() -> Option<Instant> {
    match sched::current_task() {
        // SAFETY: we are the task itself.
        Some(t) => unsafe { t.scope_deadline() },
        None => THREAD_DEADLINE.with(|d| d.get()),
    }
}

fn set_scope_deadline(d: Option<Instant>) {
    match sched::current_task() {
        // SAFETY: we are the task itself.
        Some(t) => unsafe { t.set_scope_deadline(d) },
        None => THREAD_DEADLINE.with(|c| c.set(d)),
    }
}

/// Runs `f` with the scope deadline set to `d`, restoring the enclosing one
/// when `f` returns or panics.
pub(crate) fn scoped<R>(d: Option<Instant>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Instant>);
    impl Drop for Restore {
        fn drop(&mut self) {
            set_scope_deadline(self.0);
        }
    }
    let _restore = Restore(scope_deadline());
    set_scope_deadline(d);
    f()
}

/// A wait's own deadline folded with the enclosing scope's: the earlier one,
/// and whether it is the scope's (the wait then fails with
/// `DeadlineExceeded` rather than a plain timeout).
pub(crate) fn effective_deadline(own: Option<Instant>) -> (Option<Instant>, bool) {
    match (own, scope_deadline()) {
        (Some(d), Some(s)) if s < d => (Some(s), true),
        (None, Some(s)) => (Some(s), true),
        (d, _) => (d, false),
    }
}

/// Runs `f` outside every deadline scope (for waits that must not be cut
/// short, such as `block_on`'s).
pub(crate) fn without_scope<R>(f: impl FnOnce() -> R) -> R {
    scoped(None, f)
}
