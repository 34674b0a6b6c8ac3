//! The process-wide task table.
//!
//! Every task has a [`TaskMeta`] in one slot of a table that only grows:
//! slots are allocated in segments that are never freed, so a pointer to a
//! meta is valid for the life of the process and a stale
//! [`TaskId`](crate::id::TaskId) can be *detected* (its version no longer
//! matches) but never dangles. This is bRPC's `ResourcePool` + versioned
//! `bthread_t`, made explicit.
//!
//! ```text
//!   TaskId = version << 24 | slot          version bumps each time the slot is freed
//!   refs   = 2 at spawn: the task itself + its JoinHandle; the slot is freed at 0
//! ```
//!
//! Versions are 40 bits, and a slot whose version runs out is retired, never
//! reused: so no id is ever handed out twice, and a stale id can never name a
//! later task. (A 32-bit version, as bthread's, wraps after 2^32 reuses: 13
//! minutes of spawn + join in a loop on a 2-vCPU VM, the free list being
//! LIFO.) Free slots are cached per worker and per plain thread, so spawn
//! and join take the table's lock once per batch.

use super::{EndState, ResultState, TaskMeta, TaskRef, NO_HOME};
use crate::id::{TaskId, SLOT_BITS, VERSION_LIMIT};
use crate::loom::lock;
use crate::loom::sync::atomic::{AtomicPtr, Ordering};
use crate::loom::sync::{Mutex, MutexGuard};
use std::ptr;

const SEGMENT: usize = 256;
const MAX_SEGMENTS: usize = 1 << 16; // 16 M tasks alive at once
const _: () = assert!(SEGMENT * MAX_SEGMENTS <= 1 << SLOT_BITS);

/// The process-wide table of task metas; see the module docs.
pub(crate) struct TaskTable {
    segments: Box<[AtomicPtr<TaskMeta>]>,
    /// Segments allocated so far; grown under this lock.
    grown: Mutex<usize>,
    /// Free slots not held in any worker's cache.
    free: Mutex<Vec<u32>>,
}

/// Free slots a plain thread (not a worker of the spawned-into runtime)
/// keeps for its next spawns and handle drops: without it, each spawn and
/// each drop from such a thread takes the table's lock.
struct ThreadSlots(Vec<u32>);

impl Drop for ThreadSlots {
    fn drop(&mut self) {
        table().give_back(&mut self.0);
    }
}

thread_local! {
    static THREAD_SLOTS: std::cell::RefCell<ThreadSlots> =
        const { std::cell::RefCell::new(ThreadSlots(Vec::new())) };
}

/// Runs `f` with this thread's slot cache, or with none while the thread is
/// being torn down.
pub(crate) fn with_thread_slots<R>(f: impl FnOnce(Option<&mut Vec<u32>>) -> R) -> R {
    let mut f = Some(f);
    let cached = THREAD_SLOTS.try_with(|c| {
        let mut c = c.try_borrow_mut().ok()?;
        f.take().map(|f| f(Some(&mut c.0)))
    });
    match (cached, f) {
        (Ok(Some(r)), _) => r,
        (_, Some(f)) => f(None),
        (_, None) => unreachable!("f ran but returned nothing"),
    }
}

/// Free slots a worker keeps before giving a batch back.
const SLOT_CACHE: usize = 128;
const SLOT_BATCH: usize = 64;

pub(crate) fn table() -> &'static TaskTable {
    static TABLE: std::sync::OnceLock<TaskTable> = std::sync::OnceLock::new();
    TABLE.get_or_init(TaskTable::new)
}

impl TaskTable {
    /// An empty table (the process has one, [`table`]).
    fn new() -> Self {
        TaskTable {
            segments: (0..MAX_SEGMENTS)
                .map(|_| AtomicPtr::new(ptr::null_mut()))
                .collect(),
            grown: Mutex::new(0),
            free: Mutex::new(Vec::new()),
        }
    }

    /// The meta in `slot`, if that slot exists.
    fn get(&self, slot: u32) -> Option<TaskRef> {
        let (seg, off) = (slot as usize / SEGMENT, slot as usize % SEGMENT);
        let base = self.segments.get(seg)?.load(Ordering::Acquire);
        if base.is_null() {
            return None;
        }
        // SAFETY: a published segment holds SEGMENT metas, never freed.
        Some(unsafe { TaskRef::from_ptr(base.add(off)) })
    }

    /// The live task named by `id`, if any. The answer may be stale the
    /// moment it is returned; callers re-check the version under the task's
    /// lock before acting.
    pub(crate) fn lookup(&self, id: TaskId) -> Option<TaskRef> {
        let t = self.get(id.slot())?;
        (t.version.load(Ordering::Acquire) == id.version() && t.refs.load(Ordering::Acquire) > 0)
            .then_some(t)
    }

    /// The live task named by `id`, held: the caller owns one of its refs
    /// (and drops it with [`release`](Self::release)), so the slot and what
    /// was written into it at spawn (its name) stay until then.
    pub(crate) fn acquire(&self, id: TaskId) -> Option<TaskRef> {
        let t = self.get(id.slot())?;
        let mut refs = t.refs.load(Ordering::Acquire);
        loop {
            // A free slot's refs are 0, and only `alloc` raises them from 0.
            if refs == 0 {
                return None;
            }
            match t
                .refs
                .compare_exchange_weak(refs, refs + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now) => refs = now,
            }
        }
        // Held now; but the slot may have been freed and taken by a later
        // task between the load and the increment.
        if t.version.load(Ordering::Acquire) != id.version() {
            self.release(t, None);
            return None;
        }
        Some(t)
    }

    /// Whether `id` still names `t` (call under `t`'s interrupt lock, `lock_interrupts`).
    pub(crate) fn is_current(t: &TaskMeta, id: TaskId) -> bool {
        t.version.load(Ordering::Acquire) == id.version()
    }

    /// A free slot, from `cache` (a worker's) or the shared list; grows the
    /// table when both are empty. `None` only when the table is full.
    pub(crate) fn alloc(&self, cache: Option<&mut Vec<u32>>) -> Option<TaskRef> {
        let slot = match cache {
            Some(c) => match c.pop() {
                Some(s) => s,
                None => {
                    self.refill(c);
                    c.pop()?
                }
            },
            None => {
                let mut free = self.lock_free();
                match free.pop() {
                    Some(s) => s,
                    None => {
                        drop(free);
                        let mut c = Vec::new();
                        self.refill(&mut c);
                        let s = c.pop()?;
                        self.lock_free().extend(c);
                        s
                    }
                }
            }
        };
        let t = self.get(slot).expect("a free slot exists");
        // Release: an `acquire` that reads these refs reads the version
        // bumped before them too.
        t.refs.store(2, Ordering::Release);
        Some(t)
    }

    /// Drops one owner of `t`; the last one frees the slot.
    pub(crate) fn release(&self, t: TaskRef, cache: Option<&mut Vec<u32>>) {
        if t.refs.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        // SAFETY: refs reached 0: nobody else holds the task any more.
        unsafe { t.clear_for_reuse() };
        let version = {
            let mut st = t.lock_interrupts();
            st.pending = false;
            st.waiting = ptr::null();
            // Bump the version under the lock: `interrupt` re-checks it there.
            t.version.fetch_add(1, Ordering::Release) + 1
        };
        if version == VERSION_LIMIT {
            // Every id of this slot has been used: retire it, so that none
            // is ever used again (a meta, once in 2^40 tasks of this slot).
            tracing::debug!(slot = t.slot, "task slot retired: its versions ran out");
            return;
        }
        t.stopped.store(false, Ordering::Relaxed);
        t.result_state
            .store(ResultState::Open.word(), Ordering::Relaxed);
        t.join
            .value()
            .store(EndState::Running.word(), Ordering::Relaxed);
        t.home.store(NO_HOME, Ordering::Relaxed);
        match cache {
            Some(c) => {
                c.push(t.slot);
                if c.len() > SLOT_CACHE {
                    let at = c.len() - SLOT_BATCH;
                    self.lock_free().extend(c.drain(at..));
                }
            }
            None => self.lock_free().push(t.slot),
        }
    }

    /// Gives a worker's cache back (worker exit).
    pub(crate) fn give_back(&self, cache: &mut Vec<u32>) {
        self.lock_free().append(cache);
    }

    fn refill(&self, cache: &mut Vec<u32>) {
        {
            let mut free = self.lock_free();
            let at = free.len().saturating_sub(SLOT_BATCH);
            cache.extend(free.drain(at..));
        }
        if cache.is_empty() {
            self.grow(cache);
        }
    }

    fn grow(&self, cache: &mut Vec<u32>) {
        let mut grown = lock(&self.grown);
        if *grown == MAX_SEGMENTS {
            return;
        }
        let first = (*grown * SEGMENT) as u32;
        let seg: Box<[TaskMeta]> = (0..SEGMENT as u32)
            .map(|i| TaskMeta::new(first + i))
            .collect();
        let base = Box::into_raw(seg) as *mut TaskMeta;
        self.segments[*grown].store(base, Ordering::Release);
        *grown += 1;
        cache.extend((first..first + SEGMENT as u32).rev());
    }

    fn lock_free(&self) -> MutexGuard<'_, Vec<u32>> {
        lock(&self.free)
    }

    /// Calls `f` with every slot made so far, free or not (task dumps; the
    /// caller holds a task with [`acquire`](Self::acquire) before it reads
    /// more than its atomics).
    pub(crate) fn for_each_slot(&self, mut f: impl FnMut(TaskRef)) {
        let grown = *lock(&self.grown);
        for seg in 0..grown {
            for off in 0..SEGMENT {
                if let Some(t) = self.get((seg * SEGMENT + off) as u32) {
                    f(t);
                }
            }
        }
    }

    /// Slots handed out so far (the table's size), for leak tests.
    pub(crate) fn capacity(&self) -> usize {
        *lock(&self.grown) * SEGMENT
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A slot whose last version is freed is never handed out again, and
    /// its last id names nothing. (A table of its own: the process's must
    /// not lose a slot to a test.)
    #[test]
    fn a_slot_whose_versions_run_out_is_retired() {
        let table = &TaskTable::new();
        let t = table.alloc(None).expect("a free slot");
        t.version.store(VERSION_LIMIT - 1, Ordering::Relaxed);
        let last = t.id();
        assert!(table.lookup(last).is_some());
        table.release(t, None); // the task
        table.release(t, None); // its handle
        assert!(table.lookup(last).is_none());
        assert_eq!(t.version.load(Ordering::Relaxed), VERSION_LIMIT);
        assert!(
            !table.lock_free().contains(&t.slot),
            "a retired slot is not free"
        );
    }
}
