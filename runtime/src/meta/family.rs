//! Structured families: the running children of a task, so that stopping
//! the task stops them.
//!
//! A task spawned through a `Scope` or a `JoinSet` from inside a task is
//! that task's *child* ([`adopt`]); a detached `spawn` is nobody's. Each
//! task keeps its running children in an intrusive list (`first_child`,
//! then the children's `prev`/`next`), and each child points at its parent
//! (`parent`). Every link of a family — the parent's list and its
//! children's `parent`, `prev` and `next` — is written only under the
//! **parent's** interrupt lock, the lock `stop` takes, so:
//!
//! - a stop of the parent (which marks it stopped and then walks its list,
//!   under that lock) and an adoption (which checks the mark and links the
//!   child, under the same lock) are ordered: the child is either in the
//!   list the stop walks or born stopped;
//! - a child that ends unlinks itself ([`leave_family`]): it reads its
//!   `parent`, takes that task's lock, and unlinks only if `parent` still
//!   names it. Metas are never freed (the table only grows), so the lock is
//!   there to take even if the parent has ended and its slot is reused; a
//!   parent that ends clears its children's `parent` first, under its lock.
//!
//! Only the parent itself adopts (it is the running task that spawns), so
//! a parent that is ending can read its list's head without the lock: no
//! child can be added any more. A task with no family pays two loads at its
//! end.

use super::task_meta::{TaskMeta, TaskRef};
use super::InterruptState;
use crate::loom::sync::atomic::{AtomicPtr, Ordering};
use crate::loom::sync::MutexGuard;
use std::cell::Cell;
use std::ptr;

/// A task's place in its family; see the module docs. Every field is
/// written under the parent's interrupt lock (`first_child`: under the
/// task's own, as the parent of its children).
pub(crate) struct FamilyLinks {
    /// The parent whose list holds this task (null: none).
    parent: AtomicPtr<TaskMeta>,
    /// The first of this task's running children (null: none).
    first_child: AtomicPtr<TaskMeta>,
    /// This task's neighbours in its parent's list.
    prev: Cell<*const TaskMeta>,
    next: Cell<*const TaskMeta>,
}

impl FamilyLinks {
    pub(super) fn new() -> Self {
        FamilyLinks {
            parent: AtomicPtr::new(ptr::null_mut()),
            first_child: AtomicPtr::new(ptr::null_mut()),
            prev: Cell::new(ptr::null()),
            next: Cell::new(ptr::null()),
        }
    }
}

/// Makes `child`, a task just prepared and not yet started, a child of
/// `parent`, the running task that spawns it: linked into `parent`'s list,
/// or, if `parent` has been stopped, born stopped (a stopped request's
/// children stop too, whenever they are spawned).
pub(crate) fn adopt(parent: TaskRef, child: TaskRef) {
    let _st = parent.lock_interrupts();
    if parent.is_stopped() {
        child.mark_stopped();
        return;
    }
    let (p, c) = (parent.meta(), child.meta());
    let head = p.family().first_child.load(Ordering::Relaxed);
    let cf = c.family();
    cf.prev.set(ptr::null());
    cf.next.set(head);
    // SAFETY: a linked child is alive (it unlinks itself before it ends),
    // and its links are ours under the parent's lock, which we hold.
    if let Some(h) = unsafe { head.as_ref() } {
        h.family().prev.set(c);
    }
    p.family()
        .first_child
        .store(ptr::from_ref(c).cast_mut(), Ordering::Relaxed);
    cf.parent
        .store(ptr::from_ref(p).cast_mut(), Ordering::Release);
}

/// Calls `f` with each running child of the task whose interrupt lock `st`
/// is (stop walks them with the lock held: lock order parent, then child).
pub(crate) fn for_each_child(
    t: TaskRef,
    _st: &MutexGuard<'_, InterruptState>,
    mut f: impl FnMut(TaskRef),
) {
    let mut c = t.meta().family().first_child.load(Ordering::Relaxed);
    // SAFETY: linked children are alive (each unlinks itself, under this
    // lock, before it ends), and the lock keeps the list still.
    while let Some(child) = unsafe { c.as_ref() } {
        c = child.family().next.get().cast_mut();
        // SAFETY: a live meta of the table (metas are never freed).
        f(unsafe { TaskRef::from_ptr(ptr::from_ref(child).cast_mut()) });
    }
}

/// At the end of task `me` (before its end is published): unlinks it from
/// its parent's list, and lets go of its own children (they run on, as
/// nobody's). Nothing to do, and no lock taken, for a task of no family.
pub(crate) fn leave_family(me: &TaskMeta) {
    let f = me.family();
    let parent = f.parent.load(Ordering::Acquire);
    // SAFETY: metas are never freed: the parent's lock is there to take,
    // whatever became of the parent.
    if let Some(p) = unsafe { parent.as_ref() } {
        let _st = p.lock_interrupts();
        // Still its child? A parent that ended cleared this under its lock.
        if f.parent.load(Ordering::Relaxed) == parent {
            let (prev, next) = (f.prev.get(), f.next.get());
            // SAFETY: linked neighbours are alive; their links are ours
            // under the parent's lock.
            match unsafe { prev.as_ref() } {
                Some(prev) => prev.family().next.set(next),
                None => p
                    .family()
                    .first_child
                    .store(next.cast_mut(), Ordering::Relaxed),
            }
            // SAFETY: as above.
            if let Some(next) = unsafe { next.as_ref() } {
                next.family().prev.set(prev);
            }
            f.prev.set(ptr::null());
            f.next.set(ptr::null());
            f.parent.store(ptr::null_mut(), Ordering::Relaxed);
        }
    }
    // Our own children: only we adopt, and we are ending, so the list can
    // only shrink; an empty one needs no lock.
    if f.first_child.load(Ordering::Acquire).is_null() {
        return;
    }
    let _st = me.lock_interrupts();
    let mut c = f.first_child.swap(ptr::null_mut(), Ordering::Relaxed);
    // SAFETY: as in `for_each_child`.
    while let Some(child) = unsafe { c.as_ref() } {
        let cf = child.family();
        c = cf.next.get().cast_mut();
        cf.prev.set(ptr::null());
        cf.next.set(ptr::null());
        cf.parent.store(ptr::null_mut(), Ordering::Relaxed);
    }
}

/// Whether `t` has no parent and no running child (for the models).
#[cfg(all(test, loom))]
pub(crate) fn is_alone(t: TaskRef) -> bool {
    let f = t.meta().family();
    f.parent.load(Ordering::Acquire).is_null() && f.first_child.load(Ordering::Acquire).is_null()
}
