//! `Butex`: the one wait primitive of spindle, for tasks and plain threads.
//!
//! A butex is a 32-bit value plus a FIFO list of waiters (a
//! [`WaitQueue`], whose data and claim rule live with the task state).
//! `wait(expected, deadline)` returns at once if the value is not
//! `expected`; otherwise a task switches out and a plain thread parks.
//! Join, sleep, mutex, condvar, countdown events and deadline scopes are
//! all built on it.
//!
//! # The waiter protocol
//!
//! A waiter is a [`WaitNode`]: in the task's meta for a task (a task waits
//! on one butex at a time, and the meta is where wakers and the timer
//! thread find everything else they touch), on its own stack for a plain
//! thread. Five parties may end a wait: a waker (`wake_one`/`wake_all`),
//! the wait's timer, an `interrupt`/`stop`, the value check, and the
//! runtime's stop at shutdown (`Blocker::end_at_stop`). Every one of them
//! decides under the butex's lock (`meta::wait_queue::claim`), so each wait
//! has exactly one outcome, and no wake-up is delivered twice.
//!
//! For a task, the steps are (the worker does 2-4 after the switch, through
//! the seam, so that nothing can resume the task's stack while it still
//! runs):
//!
//! 1. the task builds the node in its meta (`TaskMeta::begin_wait`) and
//!    suspends with `Suspend::Block`, the node as its [`Blocker`];
//! 2. its worker calls [`Blocker::block`]: under the task's interrupt lock,
//!    a pending interrupt or stop ends the wait at once; otherwise, under
//!    the butex lock, the value is checked and the node linked, and the
//!    task records that it waits on this node;
//! 3. `block` arms the deadline timer (its callback only takes the butex
//!    lock, unlinks the node if still linked, and queues the task); for a
//!    sleep, it answers `Blocked::Sleeping`, and if the worker is idle when
//!    the sleep is due it cancels the timer itself and, if that wins, runs
//!    the callback itself ([`Blocker::end_due_sleep`]);
//! 4. the winner of the race queues the task on its home worker
//!    (`sched::make_ready`);
//! 5. the task resumes, clears its interrupt record and its worker's note,
//!    and cancels the timer, unless the timer itself ended the wait (it is
//!    spent). If the callback is running, it waits for it to finish
//!    touching the node. So a timer never outlives its wait: a cancelled
//!    timer can never end a later, unrelated wait with a false
//!    `TimedOut`. (Step 5 is a drop guard: it also runs when a woken task
//!    is cancelled at shutdown before it resumed.)
//!
//! Lock order: a task's interrupt lock, then a butex lock. Wakers and
//! timers take only the butex lock.

use super::deadline::effective_deadline;
use crate::error::{NoSuchTask, WaitError};
use crate::loom::sync::atomic::{AtomicU32, Ordering};
use crate::loom::sync::MutexGuard;
use crate::loom::thread as os_thread;
use crate::meta::activity::{WaitKind, WaitOn, WaitWord};
use crate::meta::family::for_each_child;
use crate::meta::seam::{Blocked, Blocker, BlockerRef, Suspend};
use crate::meta::wait_queue::{claim, Outcome, WaitNode, WaitPolicy, WaitQueue, Waiter, Wake};
use crate::meta::{table, EndState, InterruptState, TaskId, TaskRef, TaskTable};
use crate::sched::{self, make_ready, TaskGroup};
use spindle_timer::{TimerThread, Unschedule};
use std::fmt;
use std::ptr;
use std::time::Instant;

/// A 32-bit value that tasks and threads can wait on; see the module docs.
///
/// ```
/// use spindle::{Butex, WaitError};
/// use std::sync::atomic::Ordering;
/// use std::sync::Arc;
/// use std::time::{Duration, Instant};
///
/// let rt = spindle::Runtime::builder().workers(2).build().unwrap();
/// rt.block_on(|| {
///     // 0 until a value is published; then the value.
///     let slot = Arc::new(Butex::new(0));
///     let reader = {
///         let slot = slot.clone();
///         spindle::spawn(move || loop {
///             match slot.value().load(Ordering::Acquire) {
///                 // Returns at once if the value is no longer 0.
///                 0 => drop(slot.wait(0, None)),
///                 v => return v,
///             }
///         })
///     };
///     slot.value().store(7, Ordering::Release); // change, then wake
///     slot.wake_all();
///     assert_eq!(reader.join().unwrap(), 7);
///
///     // A wait with a deadline of its own.
///     let idle = Butex::new(0);
///     let r = idle.wait(0, Some(Instant::now() + Duration::from_millis(5)));
///     assert_eq!(r, Err(WaitError::TimedOut));
/// });
/// ```
pub struct Butex {
    queue: WaitQueue,
}

impl fmt::Debug for Butex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Butex")
            .field("value", &self.queue.value().load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Default for Butex {
    fn default() -> Self {
        Butex::new(0)
    }
}

impl Butex {
    /// A butex holding `value`, with no waiters.
    #[cfg(not(loom))]
    pub const fn new(value: u32) -> Self {
        Butex {
            queue: WaitQueue::new(value),
        }
    }

    /// A butex holding `value`, with no waiters (loom's types are not const).
    #[cfg(loom)]
    pub fn new(value: u32) -> Self {
        Butex {
            queue: WaitQueue::new(value),
        }
    }

    /// The value. Change it, then wake: a waiter checks it under the lock
    /// that `wake_*` takes, so a change followed by a wake is never missed.
    pub fn value(&self) -> &AtomicU32 {
        self.queue.value()
    }

    /// The queue underneath, for the protocol's own waits.
    pub(crate) fn queue(&self) -> &WaitQueue {
        &self.queue
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
        wait(
            &self.queue,
            expected,
            deadline,
            WaitPolicy::Interruptible,
            WaitKind::Butex,
        )
    }

    /// Wakes the longest waiter; returns how many were woken (0 or 1).
    pub fn wake_one(&self) -> usize {
        self.queue.wake_one(make_ready)
    }

    /// Wakes every waiter queued when it is called; returns how many were
    /// woken. Waiters that queue while it runs (a woken one that waits
    /// again, say) are left queued: otherwise waiters that re-queue as fast
    /// as it wakes them would keep it going for good.
    pub fn wake_all(&self) -> usize {
        self.queue.wake_all(make_ready)
    }
}

/// The shared body of every wait: on `queue` while its value is
/// `expected`, ended as `kind` says; `on` says what for (task dumps).
/// Inlined, so that `on`'s word is a constant where the call names one.
#[inline(always)]
pub(crate) fn wait(
    queue: &WaitQueue,
    expected: u32,
    deadline: Option<Instant>,
    kind: WaitPolicy,
    on: impl Into<WaitOn>,
) -> Result<(), WaitError> {
    wait_as(queue, expected, deadline, kind, on.into().word())
}

/// [`wait`], with what it waits on encoded.
fn wait_as(
    queue: &WaitQueue,
    expected: u32,
    deadline: Option<Instant>,
    kind: WaitPolicy,
    on: WaitWord,
) -> Result<(), WaitError> {
    let running = sched::current_task();
    let task = running.filter(|_| sched::can_suspend());
    if kind.stoppable() && task.is_some_and(|t| t.is_stopped()) {
        return Err(WaitError::Stopped);
    }
    if queue.value().load(Ordering::Acquire) != expected {
        return Err(WaitError::WouldBlock);
    }
    let (deadline, by_scope) = effective_deadline(deadline);
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
            // Before the node is made: between the two, the store would
            // keep the node from being built in place in the meta.
            t.note_wait(on, deadline);
            let node = WaitNode::new(queue, expected, Waiter::Task(t), kind, deadline);
            // SAFETY: `t` is the running task, and not in a wait: its last
            // wait's `Leave` has run.
            let node = unsafe { t.begin_wait(node) };
            wait_task(t, node)
        }
        None => {
            let me = Waiter::Thread(os_thread::current());
            let node = WaitNode::new(queue, expected, me, WaitPolicy::Uninterruptible, deadline);
            // A task here cannot suspend (it unwinds): it blocks its worker.
            wait_thread(queue, &node, running)
        }
    };
    match outcome {
        Outcome::Woken => Ok(()),
        Outcome::WouldBlock => Err(WaitError::WouldBlock),
        Outcome::TimedOut => Err(timed_out),
        Outcome::Interrupted => match task {
            Some(t) if t.is_stopped() => Err(WaitError::Stopped),
            _ => Err(WaitError::Interrupted),
        },
        Outcome::Waiting => unreachable!("a wait returned before it ended"),
    }
}

fn wait_task(t: TaskRef, node: &WaitNode) -> Outcome {
    let leave = Leave { t, node };
    // SAFETY: `t` is the running task (`wait` found it suspendable), and
    // the node lives in its meta, in use until `Leave` below.
    unsafe { sched::suspend(t, Suspend::Block(BlockerRef::new(node))) };
    // Step 5 of the module docs: we run again, so somebody ended the wait.
    drop(leave);
    node.outcome(Ordering::Acquire)
}

/// Step 5 of the module docs: once a task's wait has ended, nothing may
/// point at its node any more. A guard, because a task whose wait ended but
/// which never resumed (a queued task cancelled at shutdown) is unwound from
/// `suspend`, and its meta is then freed for another task: its timer and
/// its interrupt record must let go of the node first (its worker forgets
/// a sleep it noted before it resumes or cancels the task). (The task's next wait reuses the node, which is safe for the same
/// reason.)
struct Leave<'a> {
    t: TaskRef,
    node: &'a WaitNode,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        let (t, node) = (self.t, self.node);
        // Our worker (a task's wait is left on its home worker's thread).
        let g = sched::current_group();
        if node.kind().stoppable() {
            t.lock_interrupts().waiting = ptr::null();
        }
        // SAFETY: written by our worker in `block` before we could resume
        // (or be cancelled); we run on that worker's thread.
        if let Some(id) = unsafe { node.timer() } {
            // Timed out: the callback ended the wait (`on_timeout`, run by
            // the timer thread or by our worker after its own cancel won),
            // so the timer cannot fire again and its slot is freed by
            // whoever ran it. Skip the cancel, whose read of the timer's
            // slot is a cache miss per sleep in a burst; the callback sets
            // `timer_done` before it queues us, so the loop below only
            // checks it. (Relaxed: our resumption came after the queue
            // push that follows the claim. A stale value would only take
            // the cancel path, which is safe too.)
            let timed_out = node.outcome(Ordering::Relaxed) == Outcome::TimedOut;
            if timed_out || timer().unschedule(id) == Unschedule::Running {
                // The callback holds a pointer to `node`: let it finish. It
                // is a few instructions from done, unless the timer thread
                // was preempted there: then give it the CPU (on a machine
                // of few cores, it may be waiting for ours).
                crate::loom::spin_until(|| node.timer_done());
            }
        }
        if g.is_some_and(TaskGroup::is_unwinding_cancelled) {
            // SAFETY: the wait borrows the butex until it returns, and
            // this guard is part of it.
            unsafe { pass_on_unseen_wake(node) };
        }
        t.set_woken_by_timer(false);
        t.end_wait();
    }
}

/// A plain thread's wait, or that of `unwinding`, a task that cannot suspend
/// and so blocks its worker thread here.
fn wait_thread(queue: &WaitQueue, node: &WaitNode, unwinding: Option<TaskRef>) -> Outcome {
    {
        let mut list = queue.lock();
        if queue.value().load(Ordering::Acquire) != node.expected() {
            return Outcome::WouldBlock;
        }
        // SAFETY: under the lock; `node` lives until we return, and we
        // unlink it (or somebody else does, under the lock) before that.
        unsafe { list.push_back(node) };
    }
    // A task that cannot suspend (it unwinds) blocks its worker thread here:
    // if what it waits for needs that worker, the wait never ends. Say so.
    let mut blocked_task = unwinding.map(|t| (t, Instant::now()));
    loop {
        let o = node.outcome(Ordering::Acquire);
        if o != Outcome::Waiting {
            node.freed_by_waiter();
            return o;
        }
        if node.deadline().is_none() && blocked_task.is_none() {
            os_thread::park();
            continue;
        }
        let now = Instant::now();
        if node.deadline().is_some_and(|d| now >= d) {
            let mut list = queue.lock();
            // SAFETY: under the lock; `node` is alive.
            if unsafe { claim(&mut list, node, Outcome::TimedOut) }.is_some() {
                return Outcome::TimedOut;
            }
            // Somebody won the race under the lock: take their outcome.
            continue;
        }
        let mut nap = node.deadline().map(|d| d - now);
        if let Some((t, since)) = blocked_task {
            let waited = now - since;
            if waited >= sched::HELD_UP_WARNING {
                tracing::warn!(
                    task = %t.id(),
                    ?waited,
                    "a task waits while it unwinds, which blocks its worker thread: \
                     if what it waits for needs this worker, the wait never ends"
                );
                blocked_task = None;
            } else {
                let warn_in = sched::HELD_UP_WARNING - waited;
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

/// Under loom there is no global timer thread; the models of this layer
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

/// Step 2 of the module docs: links `node` into `queue`, unless the wait
/// is refused: the task is stopped, or an interrupt is pending and the wait
/// is interruptible (`st`, the task's interrupt state, locked, for a
/// stoppable wait; the outcome is then `Interrupted`, and an interrupt
/// consumed), or the value is no longer
/// the expected one (`WouldBlock`). Returns whether it linked. Under the
/// interrupt lock, so that an interrupter either finds the node linked or
/// leaves its interrupt pending for this check.
///
/// # Safety
/// `node` stays alive, and its waiter does not resume, until it is
/// unlinked.
pub(super) unsafe fn link_or_refuse(
    mut st: Option<&mut InterruptState>,
    stopped: impl FnOnce() -> bool,
    queue: &WaitQueue,
    node: &WaitNode,
) -> bool {
    if let Some(st) = st.as_deref_mut() {
        // A stoppable wait that is not interruptible (a join) leaves a
        // pending interrupt for the next interruptible wait.
        let interrupted = st.pending && node.kind().interruptible();
        if interrupted || stopped() {
            if interrupted {
                st.pending = false;
            }
            node.set_outcome(Outcome::Interrupted, Ordering::Relaxed);
            return false;
        }
    }
    let mut list = queue.lock();
    if queue.value().load(Ordering::Acquire) != node.expected() {
        node.set_outcome(Outcome::WouldBlock, Ordering::Relaxed);
        return false;
    }
    // SAFETY: under the lock; the caller keeps the node alive.
    unsafe { list.push_back(node) };
    if let Some(st) = st {
        st.waiting = node;
    }
    true
}

// SAFETY: `block` links the node where only claims (under the queue's lock)
// end it, and every claim's winner makes the task ready once
// (`Wake::deliver` with `make_ready`); `end_due_sleep` and `end_at_stop`
// are such claims.
unsafe impl Blocker for WaitNode {
    /// Steps 2-3 of the module docs. Inlined into the worker's switch
    /// path, its one caller.
    #[inline(always)]
    unsafe fn block(&self, t: TaskRef) -> Blocked {
        let node = self;
        // SAFETY: the queue outlives the wait: its waiter holds a reference.
        let queue = unsafe { node.queue() };
        let linked = {
            let mut st = node.kind().stoppable().then(|| t.lock_interrupts());
            // SAFETY: the node is `t`'s until `t` resumes, which needs it
            // unlinked first.
            unsafe { link_or_refuse(st.as_deref_mut(), || t.is_stopped(), queue, node) }
        };
        if !linked {
            // Not waiting after all: as `make_ready` would (the worker
            // queues the task itself).
            t.note_wait_ended();
            return Blocked::Refused;
        }
        let Some(deadline) = node.deadline() else {
            return Blocked::Waiting;
        };
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
                unsafe { node.set_timer(Some(id)) };
                if ptr::eq(queue, t.sleep_queue()) {
                    // A sleep: its worker may end it itself.
                    return Blocked::Sleeping(deadline);
                }
            }
            // The timer thread is gone (process teardown, or someone
            // stopped the global one), or no timer slot can be had
            // (billions armed at once): time out now rather than sleep
            // forever, and say so once.
            Err(error) => {
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    // We run on the worker's own stack, where a panic (a
                    // subscriber's) would abort the process: contain it.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        tracing::error!(
                            %error,
                            "the timer thread refused a wait's deadline: \
                             such waits end at once, as timed out"
                        )
                    }));
                });
                on_timeout(node)
            }
        }
        Blocked::Waiting
    }

    /// Ends a task's sleep at its deadline on behalf of its timer, when the
    /// sleeping task's own worker, idle, gets there first. Cancels the
    /// timer; if that wins, does what its callback would have done.
    /// Otherwise the callback runs, or ran, and delivers.
    unsafe fn end_due_sleep(&self) {
        // SAFETY: written in `block` before the sleep was noted, on this
        // thread.
        let Some(id) = (unsafe { self.timer() }) else {
            return;
        };
        if timer().unschedule(id) == Unschedule::Removed {
            on_timeout(self);
        }
    }

    /// At stop: ends the wait and queues the task on its worker (the
    /// caller), which then unwinds it instead of resuming it, so the
    /// outcome is never seen.
    unsafe fn end_at_stop(&self) -> bool {
        // SAFETY: the caller's contract: the task has not resumed, so the
        // wait is alive, and so is its queue, which the wait borrows.
        unsafe { claim_for_stop(self) }
            .map(|w| w.deliver(make_ready))
            .is_some()
    }
}

/// The claim of `end_at_stop`: ends the wait of `node` unless it has ended,
/// or is `block_on`'s (whose task borrows from the waiter's frame, so the
/// waiter is unwound only once that task has ended, which wakes it).
///
/// # Safety
/// `node` is alive, and so is its queue.
pub(super) unsafe fn claim_for_stop(node: &WaitNode) -> Option<Wake> {
    if node.kind() == WaitPolicy::Uncancellable {
        return None;
    }
    // SAFETY: the caller's contract.
    let mut list = unsafe { node.queue() }.lock();
    // SAFETY: under the lock; `node` is alive.
    unsafe { claim(&mut list, node, Outcome::Interrupted) }
}

/// For a wait left without being acted on (its task unwound by its
/// runtime's stop): if a wake-up ended it, that wake-up goes to the next
/// waiter, as a waiter that acted on it would have let go of what it was
/// for; a plain thread queued behind it on a mutex must not sleep beside a
/// free lock. (At worst a spurious wake-up.)
///
/// # Safety
/// `node`'s queue is alive.
pub(super) unsafe fn pass_on_unseen_wake(node: &WaitNode) {
    if node.outcome(Ordering::Acquire) == Outcome::Woken {
        // SAFETY: the caller's contract.
        unsafe { node.queue() }.wake_one(make_ready);
    }
}

/// A node pointer that may travel to the timer thread.
#[derive(Clone, Copy)]
struct NodePtr(*const WaitNode);
// SAFETY: the node outlives its timer: the waiting task cancels the timer,
// or waits for its callback to finish, before the node goes away.
unsafe impl Send for NodePtr {}

/// The timer callback of a timed wait.
pub(super) fn on_timeout(node: *const WaitNode) {
    // SAFETY: see `NodePtr`: the node and its queue are alive until we set
    // `timer_done`. The timer thread calls us only if the task's own
    // unschedule did not return Removed; `end_due_sleep` calls us on the
    // task's worker before the task can resume.
    let n = unsafe { &*node };
    let wake = {
        // SAFETY: as above.
        let mut list = unsafe { n.queue() }.lock();
        // SAFETY: under the lock; `n` is alive.
        unsafe { claim(&mut list, n, Outcome::TimedOut) }
    };
    // Last touch of the node, before the wake-up: delivering it touches
    // neither node nor queue, and the task, once woken, waits for this flag
    // (a wake-up syscall later would be spun through).
    n.set_timer_done(true);
    if let Some(w) = wake {
        if let Wake::Task(t) = w {
            // Published by the queue push that follows.
            t.set_woken_by_timer(true);
        }
        w.deliver(make_ready);
    }
}

/// Ends `t`'s current interruptible wait with `Interrupted` (or, for a
/// stop, its current stoppable wait), or remembers the interrupt for its
/// next wait. Called with `t`'s interrupt lock held (`st`), after a stop
/// has marked the task stopped.
pub(super) fn interrupt_locked(st: &mut InterruptState, how: Signal) -> Option<TaskRef> {
    st.pending = true;
    // SAFETY: `waiting` is set while the task is blocked on that node and
    // cleared (under this lock, which we hold) before the node goes away.
    let node = unsafe { st.waiting.as_ref() }?;
    if how == Signal::Interrupt && !node.kind().interruptible() {
        // A join: the interrupt stays pending for the next interruptible
        // wait.
        return None;
    }
    // SAFETY: `waiting` is non-null only while the waiter is inside
    // `wait`, which borrows the queue; it clears `waiting` under this lock
    // before it returns, so the queue is alive while we hold the lock.
    let mut list = unsafe { node.queue() }.lock();
    // SAFETY: under the lock; `node` is alive (see above).
    match unsafe { claim(&mut list, node, Outcome::Interrupted) } {
        Some(Wake::Task(t)) => {
            st.pending = false;
            Some(t)
        }
        Some(Wake::Thread(th)) => {
            st.pending = false;
            th.unpark();
            None
        }
        Some(w @ (Wake::Relay(_) | Wake::Waker(_))) => {
            // A task's own wait is never a registration; handled all the
            // same.
            st.pending = false;
            w.deliver(make_ready);
            None
        }
        None => None,
    }
}

/// What [`signal`] does to a task besides interrupting it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Signal {
    /// Only interrupt it (`interrupt`).
    Interrupt,
    /// Mark it stopped first (`stop`): its interruptible waits fail with
    /// `Stopped` from then on.
    Stop,
}

/// Interrupts task `id` (and, for `Signal::Stop`, marks it stopped first):
/// ends its current interruptible wait, or leaves the interrupt pending for
/// its next one. `NoSuchTask` if `id` names no live task.
pub(crate) fn signal(id: TaskId, how: Signal) -> Result<(), NoSuchTask> {
    let t = table().lookup(id).ok_or(NoSuchTask)?;
    let woken = {
        let mut st = t.lock_interrupts();
        // Re-check under the lock: the slot is freed (and its version
        // bumped) under this same lock.
        if !TaskTable::is_current(&t, id) || t.end_state() != EndState::Running {
            return Err(NoSuchTask);
        }
        match how {
            Signal::Stop => stop_locked(t, &mut st),
            Signal::Interrupt => interrupt_locked(&mut st, how),
        }
    };
    if let Some(t) = woken {
        make_ready(t);
    }
    Ok(())
}

/// Stops `t`, whose interrupt lock `st` is: marks it stopped, ends its
/// current stoppable wait, then stops its running children and theirs in
/// turn (`meta::family`: a request's children end with it; each child's
/// lock is taken under its parent's), returning the task to make ready
/// once the lock is dropped.
///
/// The wait is claimed before the children are stopped: a stopped child
/// may end at once on another worker and tell its parent (a `JoinSet`'s
/// `join_next`), and that wake-up, which the stop itself caused, must not
/// end the parent's wait with a result before the stop ends it with
/// `Stopped`.
pub(super) fn stop_locked(t: TaskRef, st: &mut MutexGuard<'_, InterruptState>) -> Option<TaskRef> {
    t.mark_stopped();
    let woken = interrupt_locked(st, Signal::Stop);
    for_each_child(t, st, |child| {
        let child_woken = {
            let mut cst = child.lock_interrupts();
            // Linked, so not ended: a child unlinks itself, under the lock
            // we hold, before its end is published. One stopped already
            // has had its children stopped, or they were born stopped.
            if child.is_stopped() {
                return;
            }
            stop_locked(child, &mut cst)
        };
        if let Some(w) = child_woken {
            make_ready(w);
        }
    });
    woken
}
