//! Which runtime a thread's spawns go to: the runtime it has *entered*.
//!
//! A worker thread is in its own runtime for good (its `TaskGroup` says
//! which). Any other thread enters one for a while: `Runtime::enter` and
//! `Handle::enter` hold an [`Entered`] guard, `block_on` enters its caller,
//! and a job of the blocking pool runs entered in the runtime that
//! submitted it. The entered runtime is a thread-local `Arc`, so a guard
//! that is forgotten keeps its runtime's shared state alive rather than
//! dangling; guards nest, each putting back the one it replaced.
//!
//! A thread that has entered none spawns onto the global runtime (the
//! public layer starts it); asking which runtime is entered never starts
//! it.

use super::{current_group, TaskControl};
use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::Arc;

thread_local! {
    /// The runtime this plain thread has entered, if any.
    static ENTERED: RefCell<Option<Arc<TaskControl>>> = const { RefCell::new(None) };
}

/// This thread's runtime: the worker's own, else the one it has entered.
/// `None` on a thread that has entered none (or is being torn down).
pub(crate) fn current_runtime() -> Option<Arc<TaskControl>> {
    if let Some(g) = current_group() {
        return Some(g.control.clone());
    }
    ENTERED.try_with(|e| e.borrow().clone()).ok().flatten()
}

/// Runs `f` with this thread's runtime (as [`current_runtime`], without
/// taking a reference count) and whether this thread is one of its workers;
/// `f` gets `None` where no runtime is entered.
pub(crate) fn with_current_runtime<R>(f: impl FnOnce(Option<(&TaskControl, bool)>) -> R) -> R {
    if let Some(g) = current_group() {
        return f(Some((&g.control, true)));
    }
    let mut f = Some(f);
    let r = ENTERED.try_with(|e| match &*e.borrow() {
        Some(control) => f.take().map(|f| f(Some((control, false)))),
        None => None,
    });
    match (r, f) {
        (Ok(Some(r)), _) => r,
        (_, Some(f)) => f(None),
        (_, None) => unreachable!("f ran but returned nothing"),
    }
}

/// This thread is in `control` until the guard drops (then in whatever it
/// was in before). Not `Send`: it puts back this thread's state.
pub(crate) struct Entered {
    /// What to put back: `Some(None)` for "no runtime"; `None` for a guard
    /// made on a worker thread, which changed nothing.
    previous: Option<Option<Arc<TaskControl>>>,
    _not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for Entered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entered").finish_non_exhaustive()
    }
}

/// Enters `control` on this thread (see [`Entered`]). On a worker thread
/// it does nothing: a task spawns onto its own runtime, and the thread's
/// state is shared by every task of the worker, so one task's guard must
/// not change another's spawns.
pub(crate) fn enter(control: Arc<TaskControl>) -> Entered {
    let previous = match current_group() {
        Some(_) => None,
        // `None` also if the thread is being torn down: nothing changed.
        None => ENTERED.try_with(|e| e.borrow_mut().replace(control)).ok(),
    };
    Entered {
        previous,
        _not_send: PhantomData,
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        // `None`: made on a worker, nothing to put back.
        let Some(previous) = self.previous.take() else {
            return;
        };
        // Dropped outside the borrow: the runtime it lets go of may be the
        // last reference, whose drop must not find the cell borrowed.
        let replaced = ENTERED
            .try_with(|e| std::mem::replace(&mut *e.borrow_mut(), previous))
            .ok()
            .flatten();
        drop(replaced);
    }
}
