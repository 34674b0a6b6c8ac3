//! Intrusive task queues: no allocation, one link per task.
//!
//! A task is in at most one queue at a time (the scheduling protocol
//! guarantees it), so each `TaskMeta` carries a single `next` link used by
//! whichever queue holds it.
//!
//! - [`RemoteQueue`]: many producers (other workers, the timer thread, plain
//!   threads) push; the owning worker takes everything at once. Push is a CAS
//!   onto a Treiber stack; the consumer swaps the head out and reverses the
//!   chain to restore FIFO order. Since the consumer never pops single nodes,
//!   there is no ABA problem.
//! - [`LocalQueue`]: a FIFO list touched by its owner thread only.
//!
//! The remote queue keeps a length that other threads may read for
//! `Runtime::stats` (a worker's `ready` figure): a snapshot, not a promise,
//! so the counter is a std atomic (`loom::stats`) that loom does not model:
//! one relaxed add per push, on the cache line of the head the push is
//! about to swing, and one subtraction per [`RemoteQueue::take_all`] that
//! took something. The local queue's length is a plain counter; its worker
//! publishes it now and then (`GroupStats::ready` says when).

use crate::loom::stats::{AtomicUsize as StatCount, Ordering as StatOrdering};
use crate::loom::sync::atomic::{AtomicPtr, Ordering};
use crate::meta::{TaskMeta, TaskRef};
use crossbeam_utils::CachePadded;
use std::cell::Cell;
use std::ptr;
use std::sync::Arc;

/// A length that its owner thread keeps and any thread may read (for
/// stats), shared between a list and its worker's `GroupStats`, on cache
/// lines of its own: the workers' counters are allocated one after the
/// other, and two of them on one line would bounce it between the two
/// workers' cores.
pub(crate) type SharedLen = Arc<CachePadded<StatCount>>;

/// A multi-producer, single-consumer queue of tasks; see the module docs.
#[derive(Debug)]
pub(crate) struct RemoteQueue {
    head: AtomicPtr<TaskMeta>,
    /// Tasks pushed and not yet taken, for stats only (see
    /// [`len`](Self::len)).
    len: StatCount,
}

impl RemoteQueue {
    pub(crate) fn new() -> Self {
        RemoteQueue {
            head: AtomicPtr::new(ptr::null_mut()),
            len: StatCount::new(0),
        }
    }

    /// Pushes `task`, which must be in no other queue.
    pub(crate) fn push(&self, task: TaskRef) {
        // Counted before the push: the push (Release) and the take that
        // sees it (Acquire) order this add before the take's subtraction,
        // so the count never dips below zero.
        self.len.fetch_add(1, StatOrdering::Relaxed);
        let node = task.as_ptr();
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            task.queue_link().store(head, Ordering::Relaxed);
            // Release: the consumer that takes the chain sees `next` and
            // everything the pusher wrote to the task before.
            match self
                .head
                .compare_exchange_weak(head, node, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    /// Whether the queue looked empty (a hint: a push may land right after).
    pub(crate) fn is_empty(&self) -> bool {
        self.head.load(Ordering::Relaxed).is_null()
    }

    /// How many tasks wait in the queue, as a snapshot from any thread
    /// (a push under way may already count). For stats.
    pub(crate) fn len(&self) -> usize {
        self.len.load(StatOrdering::Relaxed)
    }

    /// Takes every queued task and appends them, oldest first, to `out`.
    /// Returns how many were taken.
    pub(crate) fn take_all(&self, out: &LocalQueue) -> usize {
        if self.is_empty() {
            return 0;
        }
        let mut node = self.head.swap(ptr::null_mut(), Ordering::Acquire);
        // Reverse the LIFO chain into FIFO order.
        let mut reversed: *mut TaskMeta = ptr::null_mut();
        let mut n = 0;
        while !node.is_null() {
            // SAFETY: every node in the chain is a live task pushed by `push`;
            // we own the whole chain after the swap.
            let task = unsafe { TaskRef::from_ptr(node) };
            let next = task.queue_link().load(Ordering::Relaxed);
            task.queue_link().store(reversed, Ordering::Relaxed);
            reversed = node;
            node = next;
            n += 1;
        }
        self.len.fetch_sub(n, StatOrdering::Relaxed);
        out.append_chain(reversed);
        n
    }
}

/// A FIFO list of tasks used by its owner thread only.
#[derive(Debug)]
pub(crate) struct LocalQueue {
    head: Cell<*mut TaskMeta>,
    tail: Cell<*mut TaskMeta>,
    len: Cell<usize>,
}

impl LocalQueue {
    pub(crate) fn new() -> Self {
        LocalQueue {
            head: Cell::new(ptr::null_mut()),
            tail: Cell::new(ptr::null_mut()),
            len: Cell::new(0),
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len.get()
    }

    pub(crate) fn push_back(&self, task: TaskRef) {
        task.queue_link().store(ptr::null_mut(), Ordering::Relaxed);
        let node = task.as_ptr();
        let tail = self.tail.get();
        if tail.is_null() {
            self.head.set(node);
        } else {
            // SAFETY: `tail` is a live task in this queue.
            unsafe { TaskRef::from_ptr(tail) }
                .queue_link()
                .store(node, Ordering::Relaxed);
        }
        self.tail.set(node);
        self.len.set(self.len.get() + 1);
    }

    /// The task `pop_front` would take, left in place.
    pub(crate) fn front(&self) -> Option<TaskRef> {
        let head = self.head.get();
        // SAFETY: `head` is a live task in this queue.
        (!head.is_null()).then(|| unsafe { TaskRef::from_ptr(head) })
    }

    pub(crate) fn pop_front(&self) -> Option<TaskRef> {
        let head = self.head.get();
        if head.is_null() {
            return None;
        }
        // SAFETY: `head` is a live task in this queue.
        let task = unsafe { TaskRef::from_ptr(head) };
        let next = task.queue_link().load(Ordering::Relaxed);
        self.head.set(next);
        if next.is_null() {
            self.tail.set(ptr::null_mut());
        }
        self.len.set(self.len.get() - 1);
        Some(task)
    }

    /// Appends a null-terminated chain of tasks linked through `next`.
    fn append_chain(&self, first: *mut TaskMeta) {
        let mut node = first;
        while !node.is_null() {
            // SAFETY: the chain holds live tasks owned by the caller.
            let task = unsafe { TaskRef::from_ptr(node) };
            node = task.queue_link().load(Ordering::Relaxed);
            self.push_back(task);
        }
    }
}
