//! `Butex`: the one wait primitive of spindle, for tasks and plain threads.
//!
//! A butex is a 32-bit value plus a FIFO list of waiters. `wait(expected,
//! deadline)` returns at once if the value is not `expected`; otherwise a task
//! switches out and a plain thread parks. Join, sleep, mutex, condvar,
//! countdown events and deadline scopes are all built on it.
//!
//! # The waiter protocol
//!
//! A waiter is a [`WaitNode`]: in the task's meta for a task (a task waits
//! on one butex at a time, and the meta is where wakers and the timer thread
//! find everything else they touch), on its own stack for a plain thread.
//! Five parties may end
//! a wait: a waker (`wake_one`/`wake_all`), the wait's timer, an
//! `interrupt`/`stop`, the value check, and the runtime's stop at shutdown
//! (`end_wait_at_stop`). Every one of them decides **under
//! the butex's lock**: whoever finds the node still linked unlinks it and
//! writes the outcome; the others find it unlinked and do nothing. So each
//! wait has exactly one outcome, and no wake-up is delivered twice.
//!
//! For a task, the steps are (the worker does 2-4 after the switch, so that
//! nothing can resume the task's stack while it still runs):
//!
//! 1. the task builds the node in its meta (`TaskMeta::begin_wait`) and
//!    suspends with `Suspend::Wait`;
//! 2. under the task's interrupt lock: a pending interrupt or stop ends the
//!    wait at once; otherwise, under the butex lock, the value is checked and
//!    the node linked, and the task records that it waits on this node;
//! 3. the worker arms the deadline timer (its callback only takes the butex
//!    lock, unlinks the node if still linked, and queues the task); for a
//!    sleep, the worker notes it, and if it is idle when the sleep is due it
//!    cancels the timer itself and, if that wins, runs the callback itself
//!    ([`end_sleep_early`]);
//! 4. the winner of the race queues the task on its home worker;
//! 5. the task resumes, clears its interrupt record and its worker's note,
//!    and cancels the timer, unless the timer itself ended the wait (it is
//!    spent). If the callback is running, it waits for it to finish
//!    touching the node. So a timer never outlives its wait: a cancelled
//!    timer can never end a later, unrelated wait with a false
//!    `TimedOut`. (Step 5 is a drop guard: it also runs when a woken task is
//!    cancelled at shutdown before it resumed.)
//!
//! Lock order: a task's interrupt lock, then a butex lock. Wakers and timers
//! take only the butex lock.

use crate::error::WaitError;
use crate::group::{self, Suspend, TaskGroup};
use crate::meta::{InterruptState, TaskRef};
use spindle_timer::{TimerId, TimerThread, Unschedule};
use std::cell::{Cell, UnsafeCell};
use std::fmt;
use std::ptr;
// From loom under `--cfg loom`, so that `tests::loom_*` check this code.
use spindle_parking::loom::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use spindle_parking::loom::sync::{Mutex, MutexGuard};
use spindle_parking::loom::thread::{self as os_thread, Thread};
use std::time::Instant;

// Outcomes of a wait, stored in `WaitNode::outcome`.
const WAITING: u32 = 0;
const WOKEN: u32 = 1;
const WOULD_BLOCK: u32 = 2;
const TIMED_OUT: u32 = 3;
const INTERRUPTED: u32 = 4;

/// A 32-bit value that tasks and threads can wait on; see the module docs.
pub struct Butex {
    value: AtomicU32,
    waiters: Mutex<WaitList>,
}

impl fmt::Debug for Butex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Butex")
            .field("value", &self.value.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Default for Butex {
    fn default() -> Self {
        Butex::new(0)
    }
}

/// Who waits in a node, and how to wake them.
pub(crate) enum Waiter {
    Task(TaskRef),
    Thread(Thread),
}

/// What may end a task's wait besides a wake-up and its deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitKind {
    /// `interrupt` and `stop` too (sleeps, `Butex::wait`).
    Interruptible,
    /// Not those (join, the waits of `sync`); its runtime's stop does.
    Uninterruptible,
    /// Nothing else at all: `block_on`'s wait for a task that borrows from
    /// the waiting frame, which must outlive that task, so not even the
    /// stop of the waiter's own runtime cancels the waiter before the task
    /// has ended (`end_wait_at_stop`).
    Borrowed,
}

impl WaitKind {
    fn interruptible(self) -> bool {
        self == WaitKind::Interruptible
    }
}

/// One wait: in the task's meta, or on a plain thread's stack; see the
/// module docs.
pub(crate) struct WaitNode {
    // Links and `linked`: under the butex lock.
    prev: Cell<*const WaitNode>,
    next: Cell<*const WaitNode>,
    linked: Cell<bool>,
    /// Its place in the butex's order of arrival (`WaitList::pushed` when
    /// it was linked), so that `wake_all` can tell the waiters it found
    /// from those that queued after it began.
    ticket: Cell<u64>,
    pub(crate) butex: *const Butex,
    expected: u32,
    waiter: Waiter,
    /// What may end this wait besides a wake-up and its deadline.
    kind: WaitKind,
    deadline: Option<Instant>,
    /// One of the outcome constants; written under the butex lock (or the
    /// task's interrupt lock, before the node is linked).
    outcome: AtomicU32,
    /// The deadline timer, if one was armed (written by the worker in step 3,
    /// read by the task after it resumes: both on the home worker's thread).
    timer: UnsafeCell<Option<TimerId>>,
    /// Set by the timer callback as its last touch of the node.
    timer_done: AtomicBool,
    /// Under loom, the memory a plain thread's node lives in (its stack
    /// frame): see [`WaitNode::read_for_claim`].
    #[cfg(loom)]
    frame: loom::cell::UnsafeCell<()>,
}

impl WaitNode {
    fn new(
        butex: &Butex,
        expected: u32,
        waiter: Waiter,
        kind: WaitKind,
        deadline: Option<Instant>,
    ) -> Self {
        WaitNode {
            prev: Cell::new(ptr::null()),
            next: Cell::new(ptr::null()),
            linked: Cell::new(false),
            ticket: Cell::new(0),
            butex,
            expected,
            waiter,
            kind,
            deadline,
            outcome: AtomicU32::new(WAITING),
            timer: UnsafeCell::new(None),
            timer_done: AtomicBool::new(false),
            #[cfg(loom)]
            frame: loom::cell::UnsafeCell::new(()),
        }
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
    fn freed_by_waiter(&self) {
        #[cfg(loom)]
        self.frame.with_mut(|_| ());
    }
}

struct WaitList {
    head: *const WaitNode,
    tail: *const WaitNode,
    /// Nodes ever linked: the next node's ticket. (64 bits: a billion
    /// waits a second would take 584 years to wrap it.)
    pushed: u64,
}

// SAFETY: the list holds pointers to nodes that stay alive while linked
// (their waiters cannot return before being unlinked); it is only touched
// under the butex's mutex.
unsafe impl Send for WaitList {}

impl WaitList {
    const EMPTY: WaitList = WaitList {
        head: ptr::null(),
        tail: ptr::null(),
        pushed: 0,
    };

    /// # Safety
    /// Under the butex lock; `n` is alive and not linked.
    unsafe fn push_back(&mut self, n: &WaitNode) {
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
    /// Under the butex lock; `n` is linked in this list.
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

    fn front(&self) -> Option<&WaitNode> {
        // SAFETY: a linked node is alive while it is linked, and we are
        // under the butex lock (the list is borrowed from its guard).
        unsafe { self.head.as_ref() }
    }
}

/// What a winner must do after dropping the butex lock.
enum Wake {
    Task(TaskRef),
    Thread(Thread),
}

impl Wake {
    fn deliver(self) {
        match self {
            Wake::Task(t) => make_ready(t),
            Wake::Thread(th) => th.unpark(),
        }
    }
}

/// Ends a wait of `node` with `outcome` if it is still linked. Returns the
/// wake-up to deliver after the lock is dropped.
///
/// # Safety
/// Under the butex lock; `node` is alive.
unsafe fn claim(list: &mut WaitList, node: &WaitNode, outcome: u32) -> Option<Wake> {
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
    });
    node.outcome.store(outcome, Ordering::Release);
    Some(wake)
}

/// At stop: ends the wait `t` is blocked in and queues it on its worker
/// (the caller), which then unwinds it instead of resuming it, so the
/// outcome is never seen. Returns `false` if somebody else ended the wait
/// first: the task is then on its way to the worker's remote queue.
///
/// # Safety
/// `t` is a started task of the calling worker that has not run since it
/// suspended in a wait (it may be in no queue, or in the remote queue if
/// its wait was ended elsewhere): the wait has not been left, so its node
/// is alive, and so is the node's butex, which the wait borrows.
pub(crate) unsafe fn end_wait_at_stop(t: TaskRef) -> bool {
    // SAFETY: the caller's contract.
    let node = unsafe { t.current_wait() };
    // SAFETY: as above.
    unsafe { claim_for_stop(node) }.map(Wake::deliver).is_some()
}

/// The claim of [`end_wait_at_stop`]: ends the wait of `node` unless it has
/// ended, or is `block_on`'s (whose task borrows from the waiter's frame, so
/// the waiter is unwound only once that task has ended, which wakes it).
///
/// # Safety
/// `node` is alive, and so is its butex.
unsafe fn claim_for_stop(node: &WaitNode) -> Option<Wake> {
    if node.kind == WaitKind::Borrowed {
        return None;
    }
    // SAFETY: the caller's contract.
    let butex = unsafe { &*node.butex };
    let mut list = butex.lock();
    // SAFETY: under the lock; `node` is alive.
    unsafe { claim(&mut list, node, INTERRUPTED) }
}

/// For a wait left without being acted on (its task unwound by its
/// runtime's stop): if a wake-up ended it, that wake-up goes to the next
/// waiter, as a waiter that acted on it would have let go of what it was
/// for; a plain thread queued behind it on a mutex must not sleep beside a
/// free lock. (At worst a spurious wake-up.)
///
/// # Safety
/// `node`'s butex is alive.
unsafe fn pass_on_unseen_wake(node: &WaitNode) {
    if node.outcome.load(Ordering::Acquire) == WOKEN {
        // SAFETY: the caller's contract.
        unsafe { &*node.butex }.wake_one();
    }
}

/// Queues a started task that was blocked: on this worker's ready list if
/// this is its home worker, else on its home's remote queue.
pub(crate) fn make_ready(t: TaskRef) {
    if let Some(g) = group::current_group() {
        if g.index == t.home() && ptr::eq(&*g.shared, shared_of(t)) {
            g.push_ready(t);
            return;
        }
    }
    shared_of(t).push_remote(t);
}

fn shared_of(t: TaskRef) -> &'static crate::control::Shared {
    // SAFETY: set at spawn, read-only while the task lives. The runtime's
    // shared state outlives its blocked tasks: workers hold an Arc while
    // they run, and one that stops cancels its blocked tasks before it
    // exits (`TaskGroup::cancel_blocked`), waiting for those whose wait was
    // ended elsewhere. Our caller won `t`'s wait, so `t` is blocked until it
    // is queued, and its worker waits for it; from the push on,
    // `push_remote` keeps the state alive.
    unsafe { &**t.shared.get() }
}

impl Butex {
    /// A butex holding `value`, with no waiters.
    #[cfg(not(loom))]
    pub const fn new(value: u32) -> Self {
        Butex {
            value: AtomicU32::new(value),
            waiters: Mutex::new(WaitList::EMPTY),
        }
    }

    /// A butex holding `value`, with no waiters (loom's types are not const).
    #[cfg(loom)]
    pub fn new(value: u32) -> Self {
        Butex {
            value: AtomicU32::new(value),
            waiters: Mutex::new(WaitList::EMPTY),
        }
    }

    /// The value. Change it, then wake: a waiter checks it under the lock
    /// that `wake_*` takes, so a change followed by a wake is never missed.
    pub fn value(&self) -> &AtomicU32 {
        &self.value
    }

    fn lock(&self) -> MutexGuard<'_, WaitList> {
        // The list is consistent at every unlock; poisoning carries nothing.
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits while the value is `expected`, until woken, `deadline`, an
    /// interrupt, or the deadline of an enclosing `with_deadline` scope.
    ///
    /// - `Ok(())`: woken by `wake_one`/`wake_all` (callers re-check the value);
    /// - `WouldBlock`: the value was not `expected`;
    /// - `TimedOut`: `deadline` passed;
    /// - `Interrupted` / `Stopped`: see [`interrupt`](crate::interrupt) and
    ///   [`stop`](crate::stop) (tasks only). A stopped task's waits are
    ///   `Stopped`, also one that an interrupt ended. A pending interrupt
    ///   ends the first wait that would block: a `WouldBlock`, or a
    ///   `deadline` that has already passed, leaves it pending;
    /// - `DeadlineExceeded`: the enclosing scope's deadline passed.
    pub fn wait(&self, expected: u32, deadline: Option<Instant>) -> Result<(), WaitError> {
        wait(self, expected, deadline, WaitKind::Interruptible)
    }

    /// Wakes the longest waiter; returns how many were woken (0 or 1).
    pub fn wake_one(&self) -> usize {
        let wake = {
            let mut list = self.lock();
            match list.front() {
                None => None,
                Some(n) => {
                    let n: *const WaitNode = n;
                    // SAFETY: under the lock; `n` is the linked head.
                    unsafe { claim(&mut list, &*n, WOKEN) }
                }
            }
        };
        match wake {
            Some(w) => {
                w.deliver();
                1
            }
            None => 0,
        }
    }

    /// Wakes every waiter queued when it is called; returns how many were
    /// woken. Waiters that queue while it runs (a woken one that waits
    /// again, say) are left queued: otherwise waiters that re-queue as fast
    /// as it wakes them would keep it going for good.
    pub fn wake_all(&self) -> usize {
        /// Waiters unlinked per lock hold: wake-ups are delivered after the
        /// lock is dropped, from a batch on the stack (no allocation).
        const BATCH: usize = 32;
        let mut n = 0;
        let mut end = None;
        loop {
            let mut batch: [Option<Wake>; BATCH] = std::array::from_fn(|_| None);
            let mut len = 0;
            {
                let mut list = self.lock();
                // Waiters are linked in ticket order: those before `end`
                // were queued when this call began.
                let end = *end.get_or_insert(list.pushed);
                while len < BATCH {
                    let Some(node) = list.front().filter(|f| f.ticket.get() < end) else {
                        break;
                    };
                    let node: *const WaitNode = node;
                    // SAFETY: under the lock; `node` is the linked head.
                    batch[len] = unsafe { claim(&mut list, &*node, WOKEN) };
                    len += 1;
                }
            }
            for w in batch.iter_mut().take(len).filter_map(Option::take) {
                w.deliver();
            }
            n += len;
            if len < BATCH {
                return n;
            }
        }
    }
}

/// The shared body of every wait.
pub(crate) fn wait(
    butex: &Butex,
    expected: u32,
    deadline: Option<Instant>,
    kind: WaitKind,
) -> Result<(), WaitError> {
    let running = group::current_task();
    let task = running.filter(|_| group::can_suspend());
    if kind.interruptible() {
        if let Some(t) = task {
            if t.stopped.load(Ordering::Acquire) {
                return Err(WaitError::Stopped);
            }
        }
    }
    if butex.value.load(Ordering::Acquire) != expected {
        return Err(WaitError::WouldBlock);
    }
    let (deadline, by_scope) = crate::time::effective_deadline(deadline);
    let timed_out = if by_scope {
        WaitError::DeadlineExceeded
    } else {
        WaitError::TimedOut
    };
    if deadline.is_some_and(|d| d <= Instant::now()) {
        return Err(timed_out);
    }
    let outcome = match task {
        Some(t) => {
            let node = WaitNode::new(butex, expected, Waiter::Task(t), kind, deadline);
            // SAFETY: `t` is the running task, and not in a wait: its last
            // wait's `Leave` has run.
            let node = unsafe { t.begin_wait(node) };
            wait_task(t, node)
        }
        None => {
            let me = Waiter::Thread(os_thread::current());
            let node = WaitNode::new(butex, expected, me, WaitKind::Uninterruptible, deadline);
            // A task here cannot suspend (it unwinds): it blocks its worker.
            wait_thread(butex, &node, running)
        }
    };
    match outcome {
        WOKEN => Ok(()),
        WOULD_BLOCK => Err(WaitError::WouldBlock),
        TIMED_OUT => Err(timed_out),
        INTERRUPTED => match task {
            Some(t) if t.stopped.load(Ordering::Acquire) => Err(WaitError::Stopped),
            _ => Err(WaitError::Interrupted),
        },
        other => unreachable!("wait ended with outcome {other}"),
    }
}

fn wait_task(t: TaskRef, node: &WaitNode) -> u32 {
    let leave = Leave { t, node };
    group::suspend(t, Suspend::Wait(node));
    // Step 5 of the module docs: we run again, so somebody ended the wait.
    drop(leave);
    node.outcome.load(Ordering::Acquire)
}

/// Step 5 of the module docs: once a task's wait has ended, nothing may
/// point at its node any more. A guard, because a task whose wait ended but
/// which never resumed (a queued task cancelled at shutdown) is unwound from
/// `suspend`, and its meta is then freed for another task: its timer, its
/// interrupt record and its worker's `DueSleep` must let go of the node
/// first. (The task's next wait reuses the node, which is safe for the same
/// reason.)
struct Leave<'a> {
    t: TaskRef,
    node: &'a WaitNode,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        let (t, node) = (self.t, self.node);
        // Our worker (a task's wait is left on its home worker's thread).
        let g = group::current_group();
        if let Some(g) = g {
            g.forget_sleep(node);
        }
        if node.kind.interruptible() {
            t.lock_interrupts().waiting = ptr::null();
        }
        // SAFETY: written by our worker in `block` before we could resume
        // (or be cancelled); we run on that worker's thread.
        if let Some(id) = unsafe { *node.timer.get() } {
            // Timed out: the callback ended the wait (`on_timeout`, run by
            // the timer thread or by our worker after its own cancel won),
            // so the timer cannot fire again and its slot is freed by
            // whoever ran it. Skip the cancel, whose read of the timer's
            // slot is a cache miss per sleep in a burst; the callback sets
            // `timer_done` before it queues us, so the loop below only
            // checks it. (Relaxed: our resumption came after the queue
            // push that follows the claim. A stale value would only take
            // the cancel path, which is safe too.)
            let timed_out = node.outcome.load(Ordering::Relaxed) == TIMED_OUT;
            if timed_out || timer().unschedule(id) == Unschedule::Running {
                // The callback holds a pointer to `node`: let it finish. It
                // is a few instructions from done, unless the timer thread
                // was preempted there: then give it the CPU (on a machine
                // of few cores, it may be waiting for ours).
                let mut spins = 0u32;
                while !node.timer_done.load(Ordering::Acquire) {
                    if spins < 100 {
                        spins += 1;
                        std::hint::spin_loop();
                    } else {
                        os_thread::yield_now();
                    }
                }
            }
        }
        if g.is_some_and(TaskGroup::is_unwinding_cancelled) {
            // SAFETY: the wait borrows the butex until it returns, and
            // this guard is part of it.
            unsafe { pass_on_unseen_wake(node) };
        }
        t.woken_by_timer.store(false, Ordering::Relaxed);
        t.end_wait();
    }
}

/// A plain thread's wait, or that of `unwinding`, a task that cannot suspend
/// and so blocks its worker thread here.
fn wait_thread(butex: &Butex, node: &WaitNode, unwinding: Option<TaskRef>) -> u32 {
    {
        let mut list = butex.lock();
        if butex.value.load(Ordering::Acquire) != node.expected {
            return WOULD_BLOCK;
        }
        // SAFETY: under the lock; `node` lives until we return, and we
        // unlink it (or somebody else does, under the lock) before that.
        unsafe { list.push_back(node) };
    }
    // A task that cannot suspend (it unwinds) blocks its worker thread here:
    // if what it waits for needs that worker, the wait never ends. Say so.
    let mut blocked_task = unwinding.map(|t| (t, Instant::now()));
    loop {
        let o = node.outcome.load(Ordering::Acquire);
        if o != WAITING {
            node.freed_by_waiter();
            return o;
        }
        if node.deadline.is_none() && blocked_task.is_none() {
            os_thread::park();
            continue;
        }
        let now = Instant::now();
        if node.deadline.is_some_and(|d| now >= d) {
            let mut list = butex.lock();
            // SAFETY: under the lock; `node` is alive.
            if unsafe { claim(&mut list, node, TIMED_OUT) }.is_some() {
                return TIMED_OUT;
            }
            // Somebody won the race under the lock: take their outcome.
            continue;
        }
        let mut nap = node.deadline.map(|d| d - now);
        if let Some((t, since)) = blocked_task {
            let waited = now - since;
            if waited >= group::HELD_UP_WARNING {
                tracing::warn!(
                    task = %t.id(),
                    ?waited,
                    "a task waits while it unwinds, which blocks its worker thread: \
                     if what it waits for needs this worker, the wait never ends"
                );
                blocked_task = None;
            } else {
                let warn_in = group::HELD_UP_WARNING - waited;
                nap = Some(nap.map_or(warn_in, |n| n.min(warn_in)));
            }
        }
        match nap {
            None => os_thread::park(),
            Some(nap) => park_timeout(nap),
        }
    }
}

/// The timer thread that wakes timed waits.
#[cfg(not(loom))]
fn timer() -> &'static TimerThread {
    TimerThread::global()
}

/// Under loom there is no global timer thread; the models of this module
/// drive `on_timeout` themselves.
#[cfg(loom)]
fn timer() -> &'static TimerThread {
    unreachable!("the loom models arm no real timers")
}

#[cfg(not(loom))]
fn park_timeout(d: std::time::Duration) {
    os_thread::park_timeout(d)
}

/// Loom has no clock: a timed park is a park (models end waits otherwise).
#[cfg(loom)]
fn park_timeout(_: std::time::Duration) {
    os_thread::park()
}

/// Step 2 of the module docs: links `node` into `butex`, unless the wait
/// is refused: an interrupt is pending or the task is stopped (`st`, the
/// task's interrupt state, locked, for an interruptible wait; the outcome is
/// then `INTERRUPTED`, and the interrupt consumed), or the value is no longer
/// the expected one (`WOULD_BLOCK`). Returns whether it linked. Under the
/// interrupt lock, so that an interrupter either finds the node linked or
/// leaves its interrupt pending for this check.
///
/// # Safety
/// `node` stays alive, and its waiter does not resume, until it is
/// unlinked.
unsafe fn link_or_refuse(
    mut st: Option<&mut InterruptState>,
    stopped: impl FnOnce() -> bool,
    butex: &Butex,
    node: &WaitNode,
) -> bool {
    if let Some(st) = st.as_deref_mut() {
        if st.pending || stopped() {
            st.pending = false;
            node.outcome.store(INTERRUPTED, Ordering::Relaxed);
            return false;
        }
    }
    let mut list = butex.lock();
    if butex.value.load(Ordering::Acquire) != node.expected {
        node.outcome.store(WOULD_BLOCK, Ordering::Relaxed);
        return false;
    }
    // SAFETY: under the lock; the caller keeps the node alive.
    unsafe { list.push_back(node) };
    if let Some(st) = st {
        st.waiting = node;
    }
    true
}

/// Steps 2-3 of the module docs, run by `t`'s worker after `t` switched out.
pub(crate) fn block(g: &TaskGroup, t: TaskRef, node: &WaitNode) {
    // SAFETY: the butex outlives the wait: its waiter holds a reference.
    let butex = unsafe { &*node.butex };
    let linked = {
        let mut st = node.kind.interruptible().then(|| t.lock_interrupts());
        let stopped = || t.stopped.load(Ordering::Acquire);
        // SAFETY: the node is `t`'s until `t` resumes, which needs it
        // unlinked first.
        unsafe { link_or_refuse(st.as_deref_mut(), stopped, butex, node) }
    };
    if !linked {
        g.push_ready(t);
        return;
    }
    if let Some(deadline) = node.deadline {
        let node_ptr = NodePtr(node);
        let (lines, len) = t.wake_lines();
        let armed = timer().schedule_prefetching(deadline, lines, len, move || {
            let np = node_ptr;
            on_timeout(np.0)
        });
        match armed {
            Ok(id) => {
                // SAFETY: `t` cannot run before this worker returns to its
                // loop, so nothing reads `timer` concurrently.
                unsafe { *node.timer.get() = Some(id) };
                if ptr::eq(butex, &t.sleep) {
                    // A sleep: its worker may end it itself (group.rs).
                    g.note_sleep(deadline, node);
                }
            }
            // The timer thread is gone (process teardown, or someone
            // stopped the global one), or no timer slot can be had
            // (billions armed at once): time out now rather than sleep
            // forever, and say so once.
            Err(error) => {
                static SAID: std::sync::atomic::AtomicBool =
                    std::sync::atomic::AtomicBool::new(false);
                if !SAID.swap(true, Ordering::Relaxed) {
                    // We run on the worker's own stack, where a panic (a
                    // subscriber's) would abort the process: contain it.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        tracing::error!(
                            %error,
                            "the timer thread refused a wait's deadline: \
                             such waits end at once, as timed out"
                        )
                    }));
                }
                on_timeout(node)
            }
        }
    }
}

/// Ends a task's sleep at its deadline on behalf of its timer, when the
/// sleeping task's own worker, idle, gets there first (see `DueSleep` in
/// group.rs). Cancels the timer; if that wins, does what its callback would
/// have done. Otherwise the callback runs, or ran, and delivers.
///
/// # Safety
/// `node` is the node of a wait whose task has not resumed, and this runs on
/// that task's worker (so it cannot resume meanwhile).
pub(crate) unsafe fn end_sleep_early(node: &WaitNode) {
    // SAFETY: written in `block` before the node was noted, on this thread.
    let Some(id) = (unsafe { *node.timer.get() }) else {
        return;
    };
    if timer().unschedule(id) == Unschedule::Removed {
        on_timeout(node);
    }
}

/// A node pointer that may travel to the timer thread.
#[derive(Clone, Copy)]
struct NodePtr(*const WaitNode);
// SAFETY: the node outlives its timer: the waiting task cancels the timer,
// or waits for its callback to finish, before the node goes away.
unsafe impl Send for NodePtr {}

/// The timer callback of a timed wait.
fn on_timeout(node: *const WaitNode) {
    // SAFETY: see `NodePtr`: the node and its butex are alive until we set
    // `timer_done`. The timer thread calls us only if the task's own
    // unschedule did not return Removed; `end_sleep_early` calls us on the
    // task's worker before the task can resume.
    let n = unsafe { &*node };
    // SAFETY: as above.
    let butex = unsafe { &*n.butex };
    let wake = {
        let mut list = butex.lock();
        // SAFETY: under the lock; `n` is alive.
        unsafe { claim(&mut list, n, TIMED_OUT) }
    };
    // Last touch of the node, before the wake-up: delivering it touches
    // neither node nor butex, and the task, once woken, waits for this flag
    // (a wake-up syscall later would be spun through).
    n.timer_done.store(true, Ordering::Release);
    if let Some(w) = wake {
        if let Wake::Task(t) = w {
            // Published by the queue push that follows.
            t.woken_by_timer.store(true, Ordering::Relaxed);
        }
        w.deliver();
    }
}

/// Ends `t`'s current interruptible wait with `Interrupted`, or remembers
/// the interrupt for its next wait. Called with `t`'s interrupt lock held.
pub(crate) fn interrupt_locked(st: &mut InterruptState) -> Option<TaskRef> {
    st.pending = true;
    // SAFETY: `waiting` is set while the task is blocked on that node and
    // cleared (under this lock, which we hold) before the node goes away.
    let node = unsafe { st.waiting.as_ref() }?;
    // SAFETY: `waiting` is non-null only while the waiter is inside
    // `wait`, which borrows the butex; it clears `waiting` under this lock
    // before it returns, so the butex is alive while we hold the lock.
    let butex = unsafe { &*node.butex };
    let mut list = butex.lock();
    // SAFETY: under the lock; `node` is alive (see above).
    match unsafe { claim(&mut list, node, INTERRUPTED) } {
        Some(Wake::Task(t)) => {
            st.pending = false;
            Some(t)
        }
        Some(Wake::Thread(th)) => {
            st.pending = false;
            th.unpark();
            None
        }
        None => None,
    }
}

/// Loom models of the waiter protocol: the real `wake_one`, `on_timeout`
/// and `interrupt_locked` race over one wait whose waiter is a plain thread
/// handle (a task's worker-side steps are the same code under the same
/// lock). The timer is modelled by the version CAS of spindle-timer: the
/// timer thread moves ARMED to RUNNING before calling back; the waiter's
/// cancel moves ARMED to CANCELLED, and on seeing RUNNING waits for
/// `timer_done`; a waiter its timer ended skips the cancel and only waits
/// for `timer_done` (`tests::leave`, as `Leave` does).
#[cfg(all(test, loom))]
mod tests {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    const ARMED: u32 = 0;
    const RUNNING: u32 = 1;
    const CANCELLED: u32 = 2;

    /// One wait's node and its timer's state, shared with the racers.
    struct Model {
        butex: Arc<Butex>,
        node: WaitNode,
        timer: AtomicU32,
    }
    // SAFETY (test only): the node's cells are touched under the butex lock,
    // and the node outlives every racer (the model joins them first).
    unsafe impl Send for Model {}
    // SAFETY (test only): as above.
    unsafe impl Sync for Model {}

    fn model(butex: &Arc<Butex>, waiter: Thread) -> Arc<Model> {
        Arc::new(Model {
            butex: butex.clone(),
            node: WaitNode {
                prev: Cell::new(ptr::null()),
                next: Cell::new(ptr::null()),
                linked: Cell::new(false),
                ticket: Cell::new(0),
                butex: &**butex,
                expected: 0,
                waiter: Waiter::Thread(waiter),
                kind: WaitKind::Interruptible,
                deadline: None,
                outcome: AtomicU32::new(WAITING),
                timer: UnsafeCell::new(None),
                timer_done: AtomicBool::new(false),
                frame: loom::cell::UnsafeCell::new(()),
            },
            timer: AtomicU32::new(ARMED),
        })
    }

    /// Links the node with `block`'s own step (the timer is armed after
    /// this; wakes and interrupts before it are caught by the value check
    /// and the pending-interrupt check), for a wait nothing has refused.
    fn link(m: &Model) {
        // SAFETY: the node lives in `m`, which outlives every racer.
        let linked = unsafe { link_or_refuse(None, || false, &m.butex, &m.node) };
        assert!(linked, "nothing refuses this wait");
    }

    /// The waiter sleeps until somebody ends the wait, then cancels its
    /// timer or waits for the running callback, as `wait_task` does.
    fn wait(m: &Model) -> u32 {
        let outcome = loop {
            match m.node.outcome.load(Ordering::Acquire) {
                WAITING => thread::park(),
                o => break o,
            }
        };
        leave(m, outcome);
        outcome
    }

    /// The timer half of `Leave`, for a wait that ended with `outcome`:
    /// timed out, the timer is spent (never to fire again: the skipped
    /// cancel could not have found it armed) and only the callback's
    /// `timer_done` is awaited; else unschedule: Removed (ARMED ->
    /// CANCELLED), Running (wait for the callback to let go of the node),
    /// or nothing armed.
    fn leave(m: &Model, outcome: u32) {
        let timed_out = outcome == TIMED_OUT;
        if timed_out {
            assert_ne!(m.timer.load(Ordering::Acquire), ARMED, "a spent timer");
        }
        if timed_out || cancel_timer(m) == Err(RUNNING) {
            while !m.node.timer_done.load(Ordering::Acquire) {
                thread::yield_now();
            }
        }
    }

    /// The timer's cancel (`unschedule`): `Ok` if it was still armed.
    fn cancel_timer(m: &Model) -> Result<u32, u32> {
        m.timer
            .compare_exchange(ARMED, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
    }

    /// The timer thread, firing the timer if it is still armed.
    fn spawn_timer(m: &Arc<Model>) -> thread::JoinHandle<()> {
        let m = m.clone();
        thread::spawn(move || fire_timer(&m))
    }

    /// An interrupter of the wait; its thread returns whether the interrupt
    /// stayed pending (it lost the race).
    fn spawn_interrupter(m: &Arc<Model>) -> thread::JoinHandle<bool> {
        let m = m.clone();
        thread::spawn(move || {
            let mut st = InterruptState {
                pending: false,
                waiting: &m.node,
            };
            assert!(
                interrupt_locked(&mut st).is_none(),
                "a thread waiter is unparked, not queued"
            );
            st.pending
        })
    }

    fn fire_timer(m: &Model) {
        if m.timer
            .compare_exchange(ARMED, RUNNING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            on_timeout(&m.node);
        }
    }

    fn loom_model<F: Fn() + Sync + Send + 'static>(f: F) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(f);
    }

    /// Waker, timer and interrupter race: exactly one of them ends the wait,
    /// the others see it ended, and the list is left empty.
    #[test]
    fn loom_wake_timeout_interrupt_have_one_winner() {
        loom_model(|| {
            let butex = Arc::new(Butex::new(0));
            let m = model(&butex, thread::current());
            link(&m);
            let waker = {
                let b = butex.clone();
                thread::spawn(move || b.wake_one())
            };
            let timer = spawn_timer(&m);
            let interrupter = spawn_interrupter(&m);
            let outcome = wait(&m);
            let woke = waker.join().unwrap();
            timer.join().unwrap();
            let interrupt_pending = interrupter.join().unwrap();
            assert_eq!(woke == 1, outcome == WOKEN, "wake_one counted iff it won");
            assert_eq!(
                !interrupt_pending,
                outcome == INTERRUPTED,
                "an interrupt that lost is remembered"
            );
            assert!(matches!(outcome, WOKEN | TIMED_OUT | INTERRUPTED));
            assert!(butex.lock().front().is_none(), "the node left the list");
        });
    }

    /// A stale timer never ends a later wait: the first wait's timer fires
    /// late, after a wake ended that wait; the waiter reuses the node's
    /// memory for a second wait only after the callback is done with it, so
    /// the second wait is ended by its own wake, never by a TimedOut.
    #[test]
    fn loom_a_cancelled_timer_never_ends_a_later_wait() {
        loom_model(|| {
            let butex = Arc::new(Butex::new(0));
            let m = model(&butex, thread::current());
            let waker = |b: &Arc<Butex>| {
                let b = b.clone();
                thread::spawn(move || b.wake_one())
            };
            link(&m);
            let timer = spawn_timer(&m);
            let first_waker = waker(&butex);
            let first = wait(&m);
            assert!(matches!(first, WOKEN | TIMED_OUT));
            // Reuse the node for a second wait with no timer of its own, as
            // a task's next wait reuses its meta's node.
            m.node.outcome.store(WAITING, Ordering::Release);
            m.node.timer_done.store(false, Ordering::Release);
            m.timer.store(CANCELLED, Ordering::Release);
            link(&m);
            let second_waker = waker(&butex);
            let second = wait(&m);
            assert_eq!(second, WOKEN, "a stale timer ended a later wait");
            timer.join().unwrap();
            let wakes = first_waker.join().unwrap() + second_waker.join().unwrap();
            assert_eq!(wakes, if first == WOKEN { 2 } else { 1 });
        });
    }

    /// A task's interrupt state behind a loom mutex (the task's own is a
    /// std mutex, invisible to loom).
    struct Locked(loom::sync::Mutex<InterruptState>);
    // SAFETY (test only): the raw node pointer inside is only followed
    // under the lock, while the node is alive.
    unsafe impl Send for Locked {}
    // SAFETY (test only): as above.
    unsafe impl Sync for Locked {}

    /// An interrupt racing the start of a wait (brpc PR #3551) is never
    /// lost: the worker links under the task's interrupt lock after checking
    /// for a pending interrupt, and the interrupter records the interrupt and
    /// looks for the node under the same lock.
    #[test]
    fn loom_an_interrupt_racing_the_start_of_a_wait_is_not_lost() {
        loom_model(|| {
            let butex = Arc::new(Butex::new(0));
            let m = model(&butex, thread::current());
            let st = Arc::new(Locked(loom::sync::Mutex::new(InterruptState {
                pending: false,
                waiting: ptr::null(),
            })));
            let interrupter = {
                let st = st.clone();
                thread::spawn(move || {
                    let mut st = st.0.lock().unwrap();
                    interrupt_locked(&mut st)
                })
            };
            // The worker's step 2 of `block`, for an interruptible wait.
            let linked = {
                let mut g = st.0.lock().unwrap();
                // SAFETY: the node lives in `m`, which outlives every racer.
                unsafe { link_or_refuse(Some(&mut g), || false, &m.butex, &m.node) }
            };
            m.timer.store(CANCELLED, Ordering::Release); // no timer here
            let outcome = if linked { wait(&m) } else { INTERRUPTED };
            st.0.lock().unwrap().waiting = ptr::null();
            assert!(interrupter.join().unwrap().is_none());
            assert_eq!(outcome, INTERRUPTED, "the interrupt ended this wait");
            assert!(!st.0.lock().unwrap().pending, "and was consumed once");
        });
    }

    /// `stop` (the flag and an interrupt, under the interrupt lock, as
    /// `time::signal` does) racing the start of a wait ends that wait, and
    /// refuses the next one too, although the interrupt was consumed.
    #[test]
    fn loom_a_stop_racing_the_start_of_a_wait_refuses_every_wait() {
        loom_model(|| {
            let butex = Arc::new(Butex::new(0));
            let stopped = Arc::new(AtomicBool::new(false));
            let st = Arc::new(Locked(loom::sync::Mutex::new(InterruptState {
                pending: false,
                waiting: ptr::null(),
            })));
            let mut stopper = Some({
                let (st, stopped) = (st.clone(), stopped.clone());
                thread::spawn(move || {
                    let mut st = st.0.lock().unwrap();
                    stopped.store(true, Ordering::Release);
                    interrupt_locked(&mut st)
                })
            });
            let is_stopped = || stopped.load(Ordering::Acquire);
            for wait_number in 1..=2 {
                let m = model(&butex, thread::current());
                let linked = {
                    let mut g = st.0.lock().unwrap();
                    // SAFETY: the node lives in `m`, which outlives the
                    // stopper (joined below, or before the second wait).
                    unsafe { link_or_refuse(Some(&mut g), is_stopped, &m.butex, &m.node) }
                };
                m.timer.store(CANCELLED, Ordering::Release); // no timer here
                let outcome = if linked { wait(&m) } else { INTERRUPTED };
                st.0.lock().unwrap().waiting = ptr::null();
                assert_eq!(outcome, INTERRUPTED, "wait {wait_number} ended by the stop");
                if wait_number == 1 {
                    // The second wait begins after the stop has landed.
                    let stopper = stopper.take().expect("joined once");
                    assert!(stopper.join().unwrap().is_none());
                }
            }
        });
    }

    /// The stop claims a blocked task's wait (`claim_for_stop`) while a
    /// waker's one `wake_one` and the timer race it, with a second waiter
    /// queued behind: whichever wins, the wake-up is not lost. If the waker
    /// reached the task first, the task, unwound instead of resumed, passes
    /// it on (`pass_on_unseen_wake`); if the stop did, the waker finds the
    /// second waiter itself.
    #[test]
    fn loom_the_stop_claiming_a_wait_loses_no_wake_up() {
        loom_model(|| {
            let butex = Arc::new(Butex::new(0));
            // The second waiter is a thread of its own, and so are all the
            // racers: this thread only joins them. (Loom's `unpark` would
            // also end a `join` it landed in.) The first waiter, a task,
            // has its wake-ups go through its worker, which polls; they
            // are addressed to the second waiter's thread, as a spurious
            // wake-up it re-checks.
            let published = Arc::new(AtomicBool::new(false));
            let slot = Arc::new(std::sync::OnceLock::<Arc<Model>>::new());
            let second_waiter = {
                let (published, slot) = (published.clone(), slot.clone());
                thread::spawn(move || {
                    while !published.load(Ordering::Acquire) {
                        thread::yield_now();
                    }
                    wait(slot.get().expect("published"))
                })
            };
            let first = model(&butex, second_waiter.thread().clone());
            let second = model(&butex, second_waiter.thread().clone());
            second.timer.store(CANCELLED, Ordering::Release); // untimed
            link(&first);
            link(&second);
            let _ = slot.set(second.clone());
            published.store(true, Ordering::Release);
            let waker = {
                let b = butex.clone();
                thread::spawn(move || b.wake_one())
            };
            let timer = spawn_timer(&first);
            let worker = {
                let first = first.clone();
                thread::spawn(move || {
                    // The stopping worker: claim, or find the wait ended.
                    // SAFETY (of the model): the nodes and butex are alive.
                    let claimed = unsafe { claim_for_stop(&first.node) }.is_some();
                    let outcome = loop {
                        match first.node.outcome.load(Ordering::Acquire) {
                            WAITING => thread::yield_now(),
                            o => break o,
                        }
                    };
                    leave(&first, outcome);
                    // The task unwinds: its guard passes an unseen wake-up on.
                    // SAFETY (of the model): as above.
                    unsafe { pass_on_unseen_wake(&first.node) };
                    (claimed, outcome)
                })
            };
            let second_outcome = second_waiter.join().unwrap();
            let (claimed, outcome) = worker.join().unwrap();
            assert_eq!(claimed, outcome == INTERRUPTED);
            assert_eq!(
                waker.join().unwrap(),
                1,
                "a waiter was always there to wake"
            );
            timer.join().unwrap();
            assert_eq!(
                second_outcome, WOKEN,
                "the wake-up reached the second waiter"
            );
            assert!(butex.lock().front().is_none(), "both nodes left the list");
        });
    }

    /// The sleeper's own worker ends a due sleep (`end_sleep_early`: cancel
    /// the timer, and if that wins, run its callback) while the timer thread
    /// fires and an interrupter strikes: still exactly one outcome, the
    /// callback runs at most once, and a losing interrupt is remembered.
    #[test]
    fn loom_a_worker_ending_a_due_sleep_races_its_timer() {
        loom_model(|| {
            let butex = Arc::new(Butex::new(0));
            let m = model(&butex, thread::current());
            link(&m);
            let timer = spawn_timer(&m);
            let interrupter = spawn_interrupter(&m);
            // The worker, on the sleeper's thread before it resumes: the
            // cancel half of `end_sleep_early`, then the callback if it won.
            if cancel_timer(&m).is_ok() {
                on_timeout(&m.node);
            }
            let outcome = wait(&m);
            timer.join().unwrap();
            let interrupt_pending = interrupter.join().unwrap();
            assert!(matches!(outcome, TIMED_OUT | INTERRUPTED));
            assert_eq!(!interrupt_pending, outcome == INTERRUPTED);
            assert!(m.node.timer_done.load(Ordering::Acquire) || outcome == INTERRUPTED);
            assert!(butex.lock().front().is_none(), "the node left the list");
        });
    }

    /// The real `Butex::wait` of a plain thread against a change of the
    /// value and a `wake_one` (a gate opening): the wait returns, `Ok` if
    /// and only if the wake counted it, and its node is unlinked. Its waiter
    /// frees the node once it sees the outcome, so a claim that read the
    /// node after publishing the outcome is reported (`read_for_claim`).
    #[test]
    fn loom_a_thread_wait_racing_a_change_and_a_wake_returns() {
        loom_model(|| {
            let butex = Arc::new(Butex::new(0));
            let opener = {
                let b = butex.clone();
                thread::spawn(move || {
                    b.value().store(1, Ordering::Release);
                    b.wake_one()
                })
            };
            let r = butex.wait(0, None);
            let woke = opener.join().unwrap();
            assert!(matches!(r, Ok(()) | Err(WaitError::WouldBlock)), "{r:?}");
            assert_eq!(
                woke == 1,
                r.is_ok(),
                "wake_one counted iff it ended the wait"
            );
            assert!(butex.lock().front().is_none(), "the node left the list");
        });
    }

    /// Two plain threads pass a gate, each waiting for it in a loop with
    /// the real `Butex::wait`, while it opens with one `wake_all`: neither
    /// sleeps for good (loom reports a deadlock if one does).
    #[test]
    fn loom_wake_all_lets_every_thread_through_a_gate() {
        loom_model(|| {
            let butex = Arc::new(Butex::new(0));
            let passer = |b: Arc<Butex>| {
                thread::spawn(move || {
                    while b.value().load(Ordering::Acquire) == 0 {
                        let _ = b.wait(0, None);
                    }
                })
            };
            let (a, b) = (passer(butex.clone()), passer(butex.clone()));
            butex.value().store(1, Ordering::Release);
            butex.wake_all();
            a.join().unwrap();
            b.join().unwrap();
            assert!(butex.lock().front().is_none(), "no node is left linked");
        });
    }
}
