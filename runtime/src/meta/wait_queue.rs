//! The data of a wait: a [`WaitQueue`] (a 32-bit value and the FIFO of
//! [`WaitNode`]s waiting on it), the claim that ends one wait, and the
//! [`Outcome`] it ends with.
//!
//! Every task holds two queues (its join and its sleep) and the node of the
//! wait it is in, so these types live with the task state. What a wait
//! *does* (suspend, arm a timer, deliver a wake-up through the scheduler)
//! is the wait layer's (`wait::butex`); here is only what both sides of a
//! wait agree on:
//!
//! - every party that may end a wait decides **under the queue's lock**:
//!   whoever finds the node still linked unlinks it and writes the outcome
//!   ([`claim`]); the others find it unlinked and do nothing. So a wait has
//!   exactly one outcome, and no wake-up is delivered twice;
//! - a claim reads everything it needs of the node before it publishes the
//!   outcome: a plain thread polls its outcome without the lock and, once it
//!   sees it, frees the node (its stack frame).
//!
//! Waking hands the claimed task to a `ready` function (the scheduler's
//! `make_ready`), so this module knows nothing of workers.

use super::TaskRef;
use crate::loom::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use crate::loom::sync::{Mutex, MutexGuard};
use crate::loom::thread::Thread;
use crate::loom::UnsafeCell;
use spindle_timer::TimerId;
use std::cell::Cell;
use std::fmt;
use std::ptr;
use std::time::Instant;

/// How a wait ended, stored in `WaitNode::outcome` (one word, written once
/// by whoever ends the wait: see [`claim`]).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Not ended yet.
    Waiting = 0,
    /// A waker (`wake_one`, `wake_all`) ended it.
    Woken = 1,
    /// Refused before it was linked: the value was no longer the expected
    /// one.
    WouldBlock = 2,
    /// Its deadline (its own or its scope's) passed.
    TimedOut = 3,
    /// An `interrupt` or a `stop` ended it (or refused it: one was pending),
    /// or the runtime's stop did (`Blocker::end_at_stop`).
    Interrupted = 4,
}

impl Outcome {
    /// The outcome as `WaitNode::outcome` holds it.
    #[inline]
    const fn word(self) -> u32 {
        self as u32
    }

    /// The outcome stored as `word`; panics on a word no outcome has.
    #[inline]
    fn from_word(word: u32) -> Self {
        match word {
            0 => Outcome::Waiting,
            1 => Outcome::Woken,
            2 => Outcome::WouldBlock,
            3 => Outcome::TimedOut,
            4 => Outcome::Interrupted,
            _ => unreachable!("no wait outcome is {word}"),
        }
    }
}

/// A 32-bit value and the waiters on it: the data of a `Butex`.
pub(crate) struct WaitQueue {
    value: AtomicU32,
    waiters: Mutex<WaitList>,
}

impl fmt::Debug for WaitQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitQueue")
            .field("value", &self.value.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Who waits in a node, and how to wake them.
pub(crate) enum Waiter {
    Task(TaskRef),
    Thread(Thread),
    /// A `Select`'s registration: the wake-up goes on to the relay, on
    /// whose queue the selecting task or thread waits (see [`Relay`]).
    Relay(*const Relay),
    /// An async program's future awaiting this queue (a `JoinHandle`
    /// awaited): its waker is woken.
    Waker(std::task::Waker),
}

/// Where the registrations of one `Select` hand their wake-ups: a queue
/// whose value turns from 0 to 1 at the first, and on which the selector
/// waits as on any butex. A selector waits on one queue while registered
/// on several, each registration a node of its own whose waiter is the
/// relay, linked into a source's queue like any waiter, so a source's
/// wakers need not know about selects.
///
/// The relay lives on the selector's stack. A claim of a registration
/// (under its source's lock) counts itself in `in_flight` before it
/// publishes, and its delivery counts itself out as its last touch; the
/// selector, once it has unlinked every registration (under each source's
/// lock), waits for `in_flight` to reach 0 before its frame goes.
pub(crate) struct Relay {
    queue: WaitQueue,
    in_flight: AtomicU32,
}

impl Relay {
    pub(crate) fn new() -> Self {
        Relay {
            queue: WaitQueue::new(0),
            in_flight: AtomicU32::new(0),
        }
    }

    /// What the selector waits on (while its value is 0).
    pub(crate) fn queue(&self) -> &WaitQueue {
        &self.queue
    }

    /// Waits until no claim of a registration is still delivering to the
    /// relay (a few instructions, unless the waker's thread was preempted
    /// there).
    pub(crate) fn wait_for_deliveries(&self) {
        crate::loom::spin_until(|| self.in_flight.load(Ordering::Acquire) == 0);
    }
}

/// What may end a task's wait besides a wake-up and its deadline. Every
/// kind honours the deadline of an enclosing `with_deadline` scope, unless
/// its caller steps out of the scope first (`block_on`, the end of a
/// `scope`, `OnceCell`'s untimed wait). A plain thread's wait is always
/// `Uninterruptible` (`interrupt` and `stop` name tasks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitPolicy {
    /// `interrupt` and `stop` too, and its runtime's stop: sleeps,
    /// `Butex::wait`, `Semaphore`, the channels (`mpsc`, `oneshot`,
    /// `watch`), I/O readiness and the blocking-pool waits of `net`.
    Interruptible,
    /// `stop` and its runtime's stop, not `interrupt` (an interrupt stays
    /// pending for the next interruptible wait): joins (`JoinHandle`,
    /// `JoinSet`), whose waiter a stop must free, while an interrupt means
    /// "look up from what you wait for", which a join has no answer to.
    Stoppable,
    /// Not `interrupt` nor `stop` (an interrupt stays pending for the next
    /// interruptible wait); its runtime's stop does: the locks (`Mutex`,
    /// `Condvar`, `RwLock`, `OnceCell`), `Barrier`, `CountdownEvent`,
    /// `spawn_blocking`'s wait for its work.
    Uninterruptible,
    /// Nothing else at all, not even the stop of the waiter's own runtime:
    /// `block_on`'s wait for a task that borrows from the waiting frame,
    /// which must outlive that task, so the waiter is unwound only once the
    /// task has ended (`Blocker::end_at_stop` declines it).
    Uncancellable,
}

impl WaitPolicy {
    /// Whether `interrupt` ends the wait.
    pub(crate) fn interruptible(self) -> bool {
        self == WaitPolicy::Interruptible
    }

    /// Whether `stop` ends the wait (every interruptible wait, and
    /// `Stoppable` ones): such a wait is recorded in the task's interrupt
    /// state, where a stop finds it.
    pub(crate) fn stoppable(self) -> bool {
        matches!(self, WaitPolicy::Interruptible | WaitPolicy::Stoppable)
    }
}

/// One wait: in the task's meta, or on a plain thread's stack; see the
/// module docs.
pub(crate) struct WaitNode {
    // Links and `linked`: under the queue's lock.
    prev: Cell<*const WaitNode>,
    next: Cell<*const WaitNode>,
    linked: Cell<bool>,
    /// Its place in the queue's order of arrival (`WaitList::pushed` when
    /// it was linked), so that `wake_all` can tell the waiters it found
    /// from those that queued after it began.
    ticket: Cell<u64>,
    queue: *const WaitQueue,
    expected: u32,
    waiter: Waiter,
    /// What may end this wait besides a wake-up and its deadline.
    kind: WaitPolicy,
    deadline: Option<Instant>,
    /// An [`Outcome`]; written under the queue's lock (or the
    /// task's interrupt lock, before the node is linked).
    outcome: AtomicU32,
    /// The deadline timer, if one was armed (written by the worker after
    /// the switch, read by the task after it resumes: both on the home
    /// worker's thread).
    timer: UnsafeCell<Option<TimerId>>,
    /// Set by the timer callback as its last touch of the node.
    timer_done: AtomicBool,
    /// Under loom, the memory a plain thread's node lives in (its stack
    /// frame): see [`WaitNode::read_for_claim`].
    #[cfg(loom)]
    frame: loom::cell::UnsafeCell<()>,
}

impl WaitNode {
    pub(crate) fn new(
        queue: &WaitQueue,
        expected: u32,
        waiter: Waiter,
        kind: WaitPolicy,
        deadline: Option<Instant>,
    ) -> Self {
        WaitNode {
            prev: Cell::new(ptr::null()),
            next: Cell::new(ptr::null()),
            linked: Cell::new(false),
            ticket: Cell::new(0),
            queue,
            expected,
            waiter,
            kind,
            deadline,
            outcome: AtomicU32::new(Outcome::Waiting.word()),
            timer: UnsafeCell::new(None),
            timer_done: AtomicBool::new(false),
            #[cfg(loom)]
            frame: loom::cell::UnsafeCell::new(()),
        }
    }

    /// The queue waited on.
    ///
    /// # Safety
    /// The wait has not returned: its waiter borrows the queue until then.
    pub(crate) unsafe fn queue(&self) -> &WaitQueue {
        // SAFETY: the caller's contract.
        unsafe { &*self.queue }
    }

    pub(crate) fn expected(&self) -> u32 {
        self.expected
    }

    pub(crate) fn kind(&self) -> WaitPolicy {
        self.kind
    }

    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// How the wait ended (`Waiting` until it has).
    pub(crate) fn outcome(&self, order: Ordering) -> Outcome {
        Outcome::from_word(self.outcome.load(order))
    }

    /// Sets the outcome of a wait that no party can claim: refused before
    /// it was linked, or being reused for a next wait (models).
    pub(crate) fn set_outcome(&self, outcome: Outcome, order: Ordering) {
        self.outcome.store(outcome.word(), order)
    }

    /// The armed deadline timer.
    ///
    /// # Safety
    /// On the waiting task's home worker thread (see the field's docs).
    pub(crate) unsafe fn timer(&self) -> Option<TimerId> {
        // SAFETY: the caller's contract: one thread touches the cell.
        self.timer.with(|p| unsafe { *p })
    }

    /// Records the armed deadline timer.
    ///
    /// # Safety
    /// As [`timer`](Self::timer), before the task can resume.
    pub(crate) unsafe fn set_timer(&self, id: Option<TimerId>) {
        // SAFETY: the caller's contract: one thread touches the cell.
        self.timer.with_mut(|p| unsafe { *p = id })
    }

    /// Whether the timer callback is done with the node.
    pub(crate) fn timer_done(&self) -> bool {
        self.timer_done.load(Ordering::Acquire)
    }

    /// The timer callback's last touch of the node.
    pub(crate) fn set_timer_done(&self, done: bool) {
        self.timer_done.store(done, Ordering::Release)
    }

    /// Runs `f`, a read of the node by a thread that ends the wait. A plain
    /// thread's node is freed once its waiter sees the outcome
    /// ([`WaitNode::freed_by_waiter`]), so every such read must come before
    /// the outcome's store. Under loom both are accesses to `frame`, and a
    /// read moved after the store is a data race that loom reports.
    #[inline(always)]
    fn read_for_claim<R>(&self, f: impl FnOnce() -> R) -> R {
        #[cfg(loom)]
        return self.frame.with(|_| f());
        #[cfg(not(loom))]
        f()
    }

    /// The waiter has seen the outcome: under loom, stands for the reuse of
    /// the node's memory (see [`WaitNode::read_for_claim`]).
    #[inline(always)]
    pub(crate) fn freed_by_waiter(&self) {
        #[cfg(loom)]
        self.frame.with_mut(|_| ());
    }
}

/// The FIFO of nodes waiting on a queue, linked through the nodes.
pub(crate) struct WaitList {
    head: *const WaitNode,
    tail: *const WaitNode,
    /// Nodes ever linked: the next node's ticket. (64 bits: a billion
    /// waits a second would take 584 years to wrap it.)
    pushed: u64,
}

// SAFETY: the list holds pointers to nodes that stay alive while linked
// (their waiters cannot return before being unlinked); it is only touched
// under its queue's mutex.
unsafe impl Send for WaitList {}

impl WaitList {
    const EMPTY: WaitList = WaitList {
        head: ptr::null(),
        tail: ptr::null(),
        pushed: 0,
    };

    /// Links `n` last.
    ///
    /// # Safety
    /// Under the queue's lock; `n` is alive and not linked, and stays alive
    /// until it is unlinked.
    pub(crate) unsafe fn push_back(&mut self, n: &WaitNode) {
        n.prev.set(self.tail);
        n.next.set(ptr::null());
        n.ticket.set(self.pushed);
        self.pushed += 1;
        if self.tail.is_null() {
            self.head = n;
        } else {
            // SAFETY: `tail` is a linked, hence live, node.
            unsafe { (*self.tail).next.set(n) };
        }
        self.tail = n;
        n.linked.set(true);
    }

    /// # Safety
    /// Under the queue's lock; `n` is linked in this list.
    unsafe fn unlink(&mut self, n: &WaitNode) {
        let (prev, next) = (n.prev.get(), n.next.get());
        if prev.is_null() {
            self.head = next;
        } else {
            // SAFETY: linked neighbours are live.
            unsafe { (*prev).next.set(next) };
        }
        if next.is_null() {
            self.tail = prev;
        } else {
            // SAFETY: linked neighbours are live.
            unsafe { (*next).prev.set(prev) };
        }
        n.linked.set(false);
    }

    /// The longest waiter.
    pub(crate) fn front(&self) -> Option<&WaitNode> {
        // SAFETY: a linked node is alive while it is linked, and we are
        // under the lock (the list is borrowed from its guard).
        unsafe { self.head.as_ref() }
    }
}

/// What a winner must do after dropping the queue's lock.
pub(crate) enum Wake {
    Task(TaskRef),
    Thread(Thread),
    /// Counted in the relay's `in_flight` by the claim.
    Relay(*const Relay),
    /// A clone of a future's waker, taken by the claim.
    Waker(std::task::Waker),
}

impl Wake {
    /// Delivers the wake-up: a task goes to `ready`, a thread is unparked,
    /// a relay passes it on to its selector.
    pub(crate) fn deliver(self, ready: impl FnOnce(TaskRef)) {
        match self {
            Wake::Task(t) => ready(t),
            Wake::Thread(th) => th.unpark(),
            Wake::Relay(r) => {
                // SAFETY: the claim counted this delivery in `in_flight`,
                // and the selector keeps the relay until that is 0 again.
                let r = unsafe { &*r };
                r.queue.value.store(1, Ordering::Release);
                r.queue.wake_one(ready);
                // Last touch of the relay.
                r.in_flight.fetch_sub(1, Ordering::Release);
            }
            Wake::Waker(w) => w.wake(),
        }
    }
}

/// Ends the wait of `node` with `outcome` if it is still linked. Returns
/// the wake-up to deliver after the lock is dropped.
///
/// # Safety
/// Under the queue's lock (`list` is its guard's); `node` is alive.
pub(crate) unsafe fn claim(list: &mut WaitList, node: &WaitNode, outcome: Outcome) -> Option<Wake> {
    if !node.linked.get() {
        return None;
    }
    // SAFETY: the caller holds the lock and `node` is linked.
    unsafe { list.unlink(node) };
    // Read the waiter before the outcome is published: a plain thread polls
    // its outcome without the lock and, once it sees it, returns and frees
    // the node (its stack frame), so the outcome store is the last touch.
    let wake = node.read_for_claim(|| match &node.waiter {
        Waiter::Task(t) => Wake::Task(*t),
        Waiter::Thread(th) => Wake::Thread(th.clone()),
        Waiter::Relay(r) => {
            // SAFETY: a linked registration's relay is alive: its selector
            // unlinks every registration (under this lock) before it lets
            // the relay go.
            unsafe { &**r }.in_flight.fetch_add(1, Ordering::Relaxed);
            Wake::Relay(*r)
        }
        Waiter::Waker(w) => Wake::Waker(w.clone()),
    });
    node.outcome.store(outcome.word(), Ordering::Release);
    Some(wake)
}

impl WaitQueue {
    /// A queue holding `value`, with no waiters.
    #[cfg(not(loom))]
    pub(crate) const fn new(value: u32) -> Self {
        WaitQueue {
            value: AtomicU32::new(value),
            waiters: Mutex::new(WaitList::EMPTY),
        }
    }

    /// A queue holding `value`, with no waiters (loom's types are not const).
    #[cfg(loom)]
    pub(crate) fn new(value: u32) -> Self {
        WaitQueue {
            value: AtomicU32::new(value),
            waiters: Mutex::new(WaitList::EMPTY),
        }
    }

    /// The value. Change it, then wake: a waiter checks it under the lock
    /// that waking takes, so a change followed by a wake is never missed.
    pub(crate) fn value(&self) -> &AtomicU32 {
        &self.value
    }

    /// The waiter list, locked.
    pub(crate) fn lock(&self) -> MutexGuard<'_, WaitList> {
        crate::loom::lock(&self.waiters)
    }

    /// Links `node`, a `Select`'s registration, if the value is still
    /// `node.expected()`; returns whether it did.
    ///
    /// # Safety
    /// `node` is alive and not linked, and stays alive until it is unlinked
    /// ([`unlink_registration`](Self::unlink_registration) or a claim).
    pub(crate) unsafe fn link_registration(&self, node: &WaitNode) -> bool {
        let mut list = self.lock();
        if self.value.load(Ordering::Acquire) != node.expected() {
            return false;
        }
        // SAFETY: under the lock; the caller's contract.
        unsafe { list.push_back(node) };
        true
    }

    /// Unlinks `node`, a `Select`'s registration, if no claim has (the
    /// selector taking its registrations back).
    ///
    /// # Safety
    /// `node` is alive.
    pub(crate) unsafe fn unlink_registration(&self, node: &WaitNode) {
        let mut list = self.lock();
        if node.linked.get() {
            // SAFETY: under the lock, and `node` is linked here.
            unsafe { list.unlink(node) };
        }
    }

    /// Wakes the longest waiter, handing a task to `ready`; returns how
    /// many were woken (0 or 1).
    pub(crate) fn wake_one(&self, ready: impl FnOnce(TaskRef)) -> usize {
        let wake = {
            let mut list = self.lock();
            match list.front() {
                None => None,
                Some(n) => {
                    let n: *const WaitNode = n;
                    // SAFETY: under the lock; `n` is the linked head.
                    unsafe { claim(&mut list, &*n, Outcome::Woken) }
                }
            }
        };
        match wake {
            Some(w) => {
                w.deliver(ready);
                1
            }
            None => 0,
        }
    }

    /// Wakes every waiter queued when it is called, handing tasks to
    /// `ready`; returns how many were woken. Waiters that queue while it
    /// runs (a woken one that waits again, say) are left queued: otherwise
    /// waiters that re-queue as fast as it wakes them would keep it going
    /// for good.
    pub(crate) fn wake_all(&self, ready: impl Fn(TaskRef)) -> usize {
        /// Waiters unlinked per lock hold: wake-ups are delivered after the
        /// lock is dropped, from a batch on the stack (no allocation).
        const BATCH: usize = 32;
        let mut n = 0;
        let mut end = None;
        loop {
            let mut len = 0;
            let mut list = self.lock();
            // Waiters are linked in ticket order: those before `end` were
            // queued when this call began.
            let end = *end.get_or_insert(list.pushed);
            let due = |list: &WaitList| list.front().is_some_and(|f| f.ticket.get() < end);
            if !due(&list) {
                // Most queues woken so have nobody (a task's end without a
                // joiner): no batch to make.
                return n;
            }
            let mut batch: [Option<Wake>; BATCH] = std::array::from_fn(|_| None);
            while len < BATCH && due(&list) {
                let node: *const WaitNode = list.front().expect("due");
                // SAFETY: under the lock; `node` is the linked head.
                batch[len] = unsafe { claim(&mut list, &*node, Outcome::Woken) };
                len += 1;
            }
            drop(list);
            for w in batch.iter_mut().take(len).filter_map(Option::take) {
                w.deliver(&ready);
            }
            n += len;
            if len < BATCH {
                return n;
            }
        }
    }
}
