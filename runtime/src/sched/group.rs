//! `TaskGroup`: one worker thread's scheduler.
//!
//! A group owns two local queues and shares three:
//!
//! - `lifo` (in [`GroupRemote`]): the task this worker spawned last. A task
//!   that spawns a child and then joins it finds the child here, hot in its
//!   cache, instead of handing it to another core and back. Thieves take it
//!   too, but only after [`LIFO_GRACE_ROUNDS`] rounds of searching (and in
//!   their last look before parking), so the owner gets the first chance.
//! - `fresh`: a crossbeam deque of tasks that have never run. Other workers
//!   steal from it (in batches); only never-run tasks may migrate.
//! - `inbox` (in [`GroupRemote`]): never-run tasks spawned from plain
//!   threads that spawn onto this worker; stealable as `fresh` is.
//! - `ready`: a FIFO list of started tasks pinned to this worker (a task that
//!   yielded, or was woken by a task of this worker).
//! - `woken` (in [`GroupRemote`]): started tasks woken by other threads
//!   (the remote queue).
//!
//! The loop takes work in this order: `next` (the child of a
//! `spawn_urgent`), the LIFO slot (the last task spawned here, likeliest to
//! be joined next), `fresh`, the inbox, then `ready` (so a yield goes behind the tasks
//! spawned before it), with the remote queue appended to
//! `ready` just before each take from it and before a yield is queued (so a
//! woken task waits behind the started tasks that were ready before it, not
//! behind later yields); every
//! [`REMOTE_TICK`] runs one task from the inbox (spawns from plain
//! threads) and one from the drained remote queue and `ready` go first,
//! taking turns at the head, so that neither new, woken nor yielded tasks
//! starve behind local churn or a flood of spawns from plain threads.
//! After a task yields for the cooperative budget (`coop.rs`), the worker
//! polls its fds before it takes the next task, if it last polled them
//! [`BUDGET_POLL_GAP`] ago or more (it polls every 61 tasks besides,
//! `idle.rs`).
//! When nothing is local it takes from its inbox, then steals from the other
//! workers, starting at a random one and moving by a fixed stride coprime
//! with the worker count, patiently (a few new tasks are left to a worker
//! that is not held up: see `may_take_new_tasks_of`). Then it spins briefly
//! (longer with `Builder::idle_poll`, see `idle_poll.rs`) and finally parks on
//! its lot; the loop itself, with its searching and parking handshakes, is
//! `Idle::work` (`idle.rs`), which this group drives as an `IdleWorker`.
//!
//! # Switching
//!
//! A task suspends with a [`Suspend`] *reason*, and the worker acts on it only
//! after the switch, once the task's stack is no longer running: a yield is
//! queued, a wait is handed to its `Blocker` (which links it and arms its
//! timer), an urgent spawn runs the child. This is bthread's "remained" callback made explicit,
//! and it is why a waker or a timer can never resume a stack that is still
//! running: the task is not visible to them until the switch is complete.

use super::control::{GroupRemote, GroupStats, TaskControl};
use super::idle::{IdleWorker, Look};
use super::idle_poll::PollWindow;
use super::queue::{LocalQueue, SharedLen};
use super::spin_budget::SpinBudget;
use crate::driver::{PollWait, Poller};
use crate::loom::stats::Ordering::Relaxed as StatRelaxed;
use crate::loom::sync::atomic::Ordering::{AcqRel, Relaxed, Release};
use crate::meta::seam::{Blocked, Blocker, BlockerRef, Suspend};
use crate::meta::{self, TaskRef, NO_HOME};
use crate::stack::overflow;
use crate::stack::TaskStack;
use corosensei::CoroutineResult;
use crossbeam_deque::{Steal, Worker};
use std::cell::{Cell, OnceCell, RefCell};
use std::io;
use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a worker may be held up, waiting for what it cannot hurry,
/// before it says so in a warning: a stopping worker waiting for its tasks
/// in `block_on` (`TaskGroup::cancel_blocked`), or a task that waits while
/// it unwinds, blocking its worker thread (the wait layer's thread wait).
pub(crate) const HELD_UP_WARNING: Duration = Duration::from_secs(1);

/// Every this many runs, a task of the inbox and one of the ready list
/// (with the remote queue) go before the LIFO slot and `fresh`, so that a
/// worker busy with its own new tasks still gets to them (tokio checks its
/// global queue every 61 ticks).
const REMOTE_TICK: u32 = 31;
/// The default of `Builder::sleep_spin`: a worker whose own sleeping task is
/// due within this long keeps looking for work instead of parking. Waking a
/// parked thread takes tens of µs on a VM (a median of 55-60 µs measured
/// here, with a tail of milliseconds when the host is busy), which would
/// all be added to the sleep.
pub(crate) const DEFAULT_SLEEP_SPIN: Duration = Duration::from_micros(150);
/// The default of `Builder::idle_poll`: no polling beyond [`SPIN_TIME`]
/// (see `idle_poll.rs`).
pub(crate) const DEFAULT_IDLE_POLL: Duration = Duration::ZERO;
/// Within this long of such a deadline the worker polls the clock without
/// `pause`s between its looks: a round of them can last over a µs.
const SLEEP_POLL_WINDOW: Duration = Duration::from_micros(10);

/// A task's yield for the cooperative budget polls its worker's fds first
/// if they were last polled this long ago or more: so an event waits for at
/// most about this long plus one budget's worth of the yielding task's
/// work, and a worker spends well under 1 % of its time in these polls
/// (an empty `epoll_wait` took 0.14-0.15 µs here).
const BUDGET_POLL_GAP: Duration = Duration::from_micros(100);

/// The timer slack of worker threads, in ns.
const WORKER_TIMER_SLACK_NS: u64 = 1_000;

/// A thief takes another worker's new tasks at once when it has this many
/// queued (deque and inbox): more than it will get to soon.
const STEAL_AT_ONCE: usize = 8;
/// Fewer are left to their worker unless one task has held it this long
/// (`TaskGroup::may_take_new_tasks_of`): a few times a switch and a
/// steal, well under the cost of the cross-worker wake-ups a misplaced
/// task pays for its whole life.
const STEAL_GRACE: Duration = Duration::from_micros(10);
/// A worker seen awake between tasks with new tasks queued gets longer: it
/// is about to take them, unless the OS has taken its CPU. (One woken to
/// take them is left to them however long its wake-up takes: a thief would
/// only race it.)
const IDLE_STEAL_GRACE: Duration = Duration::from_micros(50);
/// The longest a thief that held back parks before it looks again.
const DECLINE_WAIT_MAX: Duration = Duration::from_millis(1);

/// Rounds of searching before a thief takes another worker's LIFO task:
/// about a microsecond, the time its owner needs to switch to it.
const LIFO_GRACE_ROUNDS: u32 = 8;

/// How long an idle worker keeps looking for work before it parks (each
/// time it looks, and longer with `Builder::idle_poll`): about the cost of
/// the futex wake-up a park would need. Bounded by time, not by
/// a count of `pause` instructions, whose length varies tenfold between CPUs
/// (64 rounds of them take 63-150 µs on an AMD EPYC guest).
const SPIN_TIME: Duration = Duration::from_micros(20);
/// The first this much of a look that finds work from elsewhere is not
/// charged to the spin budget (`TaskGroup::settle_spin`): about what
/// parking and being woken would have cost the worker's own CPU.
const PRODUCTIVE_SPIN: Duration = Duration::from_micros(5);
/// A worker prefetches the stack frames of the next task in its ready queue
/// (`TaskMeta::prefetch_frames`) when the queue is at least this long. The
/// tasks of a short queue ran a moment ago and are still in the cache (two
/// tasks yielding to each other would pay for the prefetch on every switch);
/// a long one is a burst of tasks woken together, each after a wait long
/// enough for its frames to leave the cache, and there the prefetch made
/// draining 100 000 timed-out sleeps about a fifth faster (`sleep_burst`).
const PREFETCH_QUEUE_LEN: usize = 16;
/// An idle worker releases surplus stacks only if its next sleep is due no
/// sooner than this (a chunk of releases would make it late).
const RELEASE_SLEEP_MARGIN: Duration = Duration::from_millis(2);

thread_local! {
    /// The group of the worker running on this thread, null elsewhere.
    static WORKER: Cell<*const TaskGroup> = const { Cell::new(ptr::null()) };
}

/// The current worker's group, if this thread is a worker.
///
/// Sound because started tasks never leave their worker (docs/safety.md):
/// a task reading this thread-local always reads its own worker's.
#[inline]
pub(crate) fn current_group() -> Option<&'static TaskGroup> {
    let p = WORKER.with(|w| w.get());
    // SAFETY: the pointer is set by `TaskGroup::run` for the life of the
    // worker loop and cleared before the group is dropped; only code running
    // on this thread (the loop and its tasks) can observe it.
    unsafe { p.as_ref() }
}

/// The task running on this thread, if any.
#[inline]
pub(crate) fn current_task() -> Option<TaskRef> {
    current_group().and_then(|g| g.current.get())
}

/// The worker running on this thread, if it is one of `control`'s.
#[inline]
pub(crate) fn worker_of(control: &TaskControl) -> Option<&'static TaskGroup> {
    current_group().filter(|g| ptr::eq(&*g.control, control))
}

/// The runtime of `t`.
///
/// The caller knows the runtime is alive: `t` is running on it, or it is
/// blocked in a wait that the caller has just won (a blocked task keeps its
/// runtime alive until it is queued: a stopping worker waits for its
/// blocked tasks whose waits were ended elsewhere, see
/// `TaskGroup::cancel_blocked`; from the push on, `push_remote` keeps it).
fn control_of(t: TaskRef) -> &'static TaskControl {
    // SAFETY: written at spawn as a `*const TaskControl` (`task::prepare`),
    // read-only while the task lives; alive as said above.
    unsafe { &*t.runtime().cast::<TaskControl>() }
}

/// Queues a started task that was blocked (its wait was ended by the
/// caller): on this worker's ready list if this is its home worker, else on
/// its home's remote queue. The one way a wait hands a task back.
pub(crate) fn make_ready(t: TaskRef) {
    t.note_wait_ended();
    let control = control_of(t);
    if let Some(g) = worker_of(control) {
        if g.index == t.home() {
            g.push_ready(t);
            return;
        }
    }
    control.push_remote(t);
}

/// One worker's scheduler state; see the module docs.
pub(crate) struct TaskGroup {
    pub(crate) index: usize,
    pub(crate) control: Arc<TaskControl>,
    fresh: Worker<TaskRef>,
    ready: LocalQueue,
    current: Cell<Option<TaskRef>>,
    /// Stacks of the default size, kept for the next spawns on this worker.
    pub(crate) stacks: RefCell<Vec<TaskStack>>,
    /// Free task slots, kept for the next spawns on this worker.
    pub(crate) slots: RefCell<Vec<u32>>,
    rng: Cell<u64>,
    tick: Cell<u32>,
    /// When this worker last polled its I/O poller (see
    /// [`BUDGET_POLL_GAP`]).
    io_polled_at: Cell<Instant>,
    /// A task that must run next (after `spawn_urgent`).
    next: Cell<Option<TaskRef>>,
    /// The sleep of this worker's tasks that ends first, as far as the
    /// worker knows (see [`DueSleep`]).
    next_sleep: Cell<Option<DueSleep>>,
    /// The task of `next_sleep`, apart: every switch compares it.
    sleeper: Cell<Option<TaskRef>>,
    /// Tasks that started on this worker and have not ended: those blocked
    /// in a wait when the worker stops are found here (see `run`).
    started: StartedTasks,
    /// Set while a cancelled started task is unwound at stop (`cancel`):
    /// the unwind that task's code then sees is the runtime's, not a panic.
    unwinding_cancelled: Cell<bool>,
    /// How long to look for work before parking (`idle_poll.rs`).
    poll: PollWindow,
    /// What this worker may spin by default (`spin_budget.rs`).
    spin_budget: SpinBudget,
    /// The I/O poller, made when a task here first waits for an fd.
    poller: OnceCell<Poller>,
    /// Per other worker: how long it has been seen held by one task
    /// (`may_take_new_tasks_of`).
    sightings: Box<[Cell<Option<Sighting>>]>,
    /// Set when a steal held back from another worker's new tasks: the
    /// park that follows is bounded, to look again (`next_decline_wait`).
    declined_steal: Cell<bool>,
    /// How long that park lasts next time (`next_decline_wait`).
    decline_wait: Cell<Duration>,
}

/// Another worker as a thief last saw it running: which task, its switch
/// count, and since when the thief has seen both unchanged.
#[derive(Clone, Copy)]
struct Sighting {
    task: u64,
    switches: u64,
    since: Instant,
}

/// A worker's started tasks that have not ended: an intrusive list through
/// their metas (`started_prev`, `started_next`), which only this worker
/// touches, so adding and removing a task costs a few plain stores. Its
/// length is kept beside it for stats (`GroupStats::tasks`).
struct StartedTasks {
    head: Cell<Option<TaskRef>>,
    /// The length, written by this worker only (a load and a store), read
    /// by `Runtime::stats` from any thread.
    len: SharedLen,
}

impl StartedTasks {
    fn is_empty(&self) -> bool {
        self.head.get().is_none()
    }

    /// Adds `t`, which has just started on this worker.
    fn add(&self, t: TaskRef) {
        self.len.store(self.len.load(StatRelaxed) + 1, StatRelaxed);
        let head = self.head.replace(Some(t));
        // SAFETY: this worker is `t`'s home, and the head's; the list is
        // touched by this thread only.
        unsafe { t.set_started_links(None, head) };
        if let Some(h) = head {
            // SAFETY: as above.
            unsafe { h.set_started_prev(Some(t)) };
        }
    }

    /// Removes `t`, which has ended (or been cancelled).
    fn remove(&self, t: TaskRef) {
        self.len.store(self.len.load(StatRelaxed) - 1, StatRelaxed);
        // SAFETY: the list's tasks are this worker's, and this is its thread.
        let (prev, next) = unsafe { t.set_started_links(None, None) };
        match prev {
            // SAFETY: as above.
            Some(p) => unsafe { p.set_started_next(next) },
            None => self.head.set(next),
        }
        if let Some(n) = next {
            // SAFETY: as above.
            unsafe { n.set_started_prev(prev) };
        }
    }

    /// The tasks on the list now, newest first.
    fn iter(&self) -> impl Iterator<Item = TaskRef> {
        // SAFETY: the list's tasks are this worker's, and so is this call.
        std::iter::successors(self.head.get(), |t| unsafe { t.started_next() })
    }

    /// A copy of the list, newest first, for a walk that removes from it.
    fn snapshot(&self) -> Vec<TaskRef> {
        self.iter().collect()
    }
}

/// Aborts the process if the worker loop unwinds. Tasks' panics and the
/// drops of what they leave behind are caught where they happen, so a panic
/// that gets this far is a bug of the runtime's; the tasks started on this
/// worker could never run anywhere else, and would wait for good.
struct AbortIfUnwinding(usize);

impl Drop for AbortIfUnwinding {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "spindle: worker {} panicked outside any task; the tasks pinned to it \
                 could never run again: aborting",
                self.0
            );
            std::process::abort();
        }
    }
}

/// A sleep a worker ends itself if it is idle when the sleep is due, rather
/// than wait for the timer thread's callback and a wake-up: that is what
/// makes an idle runtime's sleeps accurate to a few µs. The worker cancels
/// the sleep's timer and, if that wins (`Unschedule::Removed`), runs the
/// callback itself; if the timer thread got there first, it delivers.
///
/// The worker clears the record before it resumes or cancels the task
/// (`forget_sleep_of`), so while it is set the task has not resumed (it may
/// already be queued) and its wait is alive.
#[derive(Clone, Copy)]
struct DueSleep {
    deadline: Instant,
    blocker: BlockerRef,
}

impl std::fmt::Debug for TaskGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskGroup")
            .field("index", &self.index)
            .field("ready", &self.ready.len())
            .finish_non_exhaustive()
    }
}

impl TaskGroup {
    pub(crate) fn new(index: usize, control: Arc<TaskControl>, fresh: Worker<TaskRef>) -> Self {
        let poll = PollWindow::new(SPIN_TIME, control.config.idle_poll);
        let stats = &control
            .group(index)
            .expect("a worker is registered before it starts")
            .stats;
        let ready = LocalQueue::new();
        let started = StartedTasks {
            head: Cell::new(None),
            len: stats.tasks.clone(),
        };
        TaskGroup {
            index,
            control,
            fresh,
            ready,
            current: Cell::new(None),
            stacks: RefCell::new(Vec::new()),
            slots: RefCell::new(Vec::new()),
            rng: Cell::new(
                0x9E37_79B9_7F4A_7C15 ^ (index as u64 + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9),
            ),
            tick: Cell::new(0),
            io_polled_at: Cell::new(Instant::now()),
            next: Cell::new(None),
            next_sleep: Cell::new(None),
            sleeper: Cell::new(None),
            started,
            unwinding_cancelled: Cell::new(false),
            poll,
            spin_budget: SpinBudget::new(Instant::now()),
            poller: OnceCell::new(),
            sightings: (0..super::MAX_WORKERS).map(|_| Cell::new(None)).collect(),
            declined_steal: Cell::new(false),
            decline_wait: Cell::new(STEAL_GRACE),
        }
    }

    /// This worker's poller, made on first use: it then parks there, and
    /// is woken through the poller's waker (`driver/park.rs`).
    pub(crate) fn poller(&self) -> io::Result<&Poller> {
        if let Some(p) = self.poller.get() {
            return Ok(p);
        }
        let (poller, waker) = Poller::new()?;
        self.control.idle.set_waker(self.index, Box::new(waker));
        let _ = self.remote().io_sources.set(Arc::clone(poller.shared()));
        Ok(self.poller.get_or_init(|| poller))
    }

    /// Whether this worker is unwinding a task its runtime's stop
    /// cancelled (see [`unwinding_cancelled`]).
    pub(crate) fn is_unwinding_cancelled(&self) -> bool {
        self.unwinding_cancelled.get()
    }

    /// Notes that `task`, of this worker, sleeps in `blocker` until
    /// `deadline`, with its timer armed; see [`DueSleep`].
    fn note_sleep(&self, deadline: Instant, task: TaskRef, blocker: BlockerRef) {
        match self.next_sleep.get() {
            Some(s) if s.deadline <= deadline => {}
            _ => {
                self.next_sleep.set(Some(DueSleep { deadline, blocker }));
                self.sleeper.set(Some(task));
            }
        }
    }

    /// The worker is about to resume or cancel `t`: if it noted a sleep of
    /// `t`, that wait is over (or about to be unwound), and must not be
    /// ended again.
    #[inline(always)]
    fn forget_sleep_of(&self, t: TaskRef) {
        if self.sleeper.get() == Some(t) {
            self.sleeper.set(None);
            self.next_sleep.set(None);
        }
    }

    /// Ends the noted sleep if it is due at `now` and its timer has not
    /// fired yet: the task is then in the ready queue.
    fn end_due_sleep(&self, now: Instant) {
        let Some(s) = self.next_sleep.get() else {
            return;
        };
        if now < s.deadline {
            return;
        }
        self.next_sleep.set(None);
        self.sleeper.set(None);
        // SAFETY: see `DueSleep`: the record was set, so the task has not
        // resumed and its wait is alive; this worker runs its tasks, so it
        // cannot resume while we use the wait.
        unsafe { s.blocker.get().end_due_sleep() };
    }

    pub(crate) fn remote(&self) -> &GroupRemote {
        self.control.group(self.index).expect("own group exists")
    }

    /// Queues a never-run task on this worker (stealable) and wakes a worker
    /// to take it if none is looking.
    pub(crate) fn push_fresh(&self, t: TaskRef) {
        t.enqueued();
        // The new task takes the LIFO slot; the one it displaces joins the
        // deque. Release: a thief's acquiring swap sees the prepared task.
        let old = self.remote().lifo.swap(t.as_ptr(), AcqRel);
        if !old.is_null() {
            // SAFETY: only never-run tasks from the task table enter the slot.
            self.fresh.push(unsafe { TaskRef::from_ptr(old) });
        }
        self.control.idle.notify_work(self.index);
    }

    /// Takes a group's LIFO task, if it has one.
    fn take_lifo(g: &GroupRemote) -> Option<TaskRef> {
        if g.lifo.load(Relaxed).is_null() {
            return None;
        }
        let p = g.lifo.swap(std::ptr::null_mut(), AcqRel);
        // SAFETY: only never-run tasks from the task table enter the slot.
        (!p.is_null()).then(|| unsafe { TaskRef::from_ptr(p) })
    }

    /// Makes a started task of this worker runnable again.
    pub(crate) fn push_ready(&self, t: TaskRef) {
        t.enqueued();
        self.ready.push_back(t);
    }

    /// The worker loop. Returns when the runtime stops.
    pub(crate) fn run(&self) {
        let _abort = AbortIfUnwinding(self.index);
        overflow::install(meta::describe_for_overflow);
        // A worker parks until shortly before its tasks' sleeps are due
        // (`search`): the default 50 µs slack would make it late.
        if let Err(error) = spindle_parking::futex::set_timer_slack(WORKER_TIMER_SLACK_NS) {
            tracing::warn!(worker = self.index, %error, "could not set the timer slack");
        }
        WORKER.with(|w| w.set(self));
        // Spans left entered on this thread before the loop are not its
        // tasks' (`spans.rs`).
        super::spans::note_worker_base();
        self.remote().stats.busy.awake(Instant::now());
        // The work-stealing deques' memory reclamation (crossbeam-epoch)
        // sets itself up on first use, the process-wide collector and this
        // thread's handle, building large values on the stack. Do it here,
        // on the worker's own stack, not inside the first task whose spawn
        // grows the deque: a 16 KiB task stack overflowed on it in debug
        // builds (tests/stack_release.rs).
        drop(crossbeam_epoch::pin());
        // The loop (idle.rs): local work, else `look`, else park.
        self.control.idle.work(self);
        if let Some(p) = self.poller.get() {
            p.close(make_ready);
        }
        self.control.wait_for_outside_spawns();
        self.cancel_queued();
        self.cancel_blocked();
        // The runtime is stopping: drop our stacks and the pool's here. The
        // last reference to the shared state may go elsewhere (a watchdog
        // sample on the timer thread), where unmapping would stall every
        // timer; and a stop called from a task does not wait to trim.
        crate::stack::drop_stacks(std::mem::take(&mut *self.stacks.borrow_mut()));
        self.control.stacks.trim();
        meta::table().give_back(&mut self.slots.borrow_mut());
        self.remote().stats.busy.asleep(Instant::now());
        WORKER.with(|w| w.set(ptr::null()));
    }

    /// The running task is about to yield for the cooperative budget
    /// (`sched/coop.rs`): if this worker has fds registered and last
    /// polled them [`BUDGET_POLL_GAP`] ago or more, they are polled now,
    /// from the yielding task (what their events wake joins the ready
    /// list ahead of it, as a waker's `make_ready` from a task does).
    /// Otherwise a worker whose task yields after long slices (128 reads
    /// of 20 µs each: 2.6 ms) would poll only every 61 of them, and a
    /// reply another of its tasks waits for would wait that long: 160 ms.
    /// Here, not in the pick of the next task: no other switch pays.
    pub(crate) fn budget_spent(&self) {
        if self.polls() && self.io_polled_at.get().elapsed() >= BUDGET_POLL_GAP {
            self.poll_io(PollWait::NoWait);
        }
    }

    /// Local work, in the order of the module docs.
    fn next_local(&self) -> Option<TaskRef> {
        if let Some(t) = self.next.take() {
            return Some(t);
        }
        let tick = self.tick.get().wrapping_add(1);
        self.tick.set(tick);
        if tick % REMOTE_TICK == 0 {
            // The woken first, then the ready list's length for
            // `Runtime::stats` (see `GroupStats::ready`): here, not on
            // every switch.
            let me = self.remote();
            me.woken.take_all(&self.ready);
            me.stats.ready.store(self.ready.len(), StatRelaxed);
            // Starvation guards: a task spawned from a plain thread (the
            // inbox) and a woken or yielded one go first this time, so
            // a worker busy with local churn still gets to them. They take
            // turns at going first, and only one task comes from the
            // inbox (a batch would fill `fresh`, which goes before
            // `ready`): a flood of spawns from plain threads must not
            // starve the tasks woken here, nor their yields it.
            let inbox = || self.take_one_from_inbox();
            let ready = || self.ready.pop_front();
            let guarded = if (tick / REMOTE_TICK) % 2 == 0 {
                inbox().or_else(ready)
            } else {
                ready().or_else(inbox)
            };
            if guarded.is_some() {
                return guarded;
            }
        }
        // New tasks before yielded ones: a yield goes behind everything that
        // was runnable when it happened, as in bthread's single run queue.
        // The last spawned first: it is the likeliest to be joined next.
        let me = self.remote();
        if let Some(t) = Self::take_lifo(me) {
            return Some(t);
        }
        if let Some(t) = self.fresh.pop() {
            return Some(t);
        }
        // Then spawns from plain threads onto this worker: new tasks too,
        // so a task that yields or polls before it waits does not hold back
        // the task spawned beside it (long enough, a thief takes that one
        // away for good). An empty inbox costs two loads.
        if !me.inbox.is_empty() {
            if let Some(t) = self.take_from_inbox() {
                return Some(t);
            }
        }
        // Tasks woken from elsewhere join the ready queue as soon as they
        // are seen (an empty remote queue costs one load), so a worker busy
        // with yielding tasks runs them after those ready before them.
        self.take_woken(me);
        self.ready.pop_front()
    }

    /// Moves the tasks woken from elsewhere to the ready list; when some
    /// came, publishes the list's length for `Runtime::stats` (see
    /// `GroupStats::ready`): a change, not every switch.
    #[inline]
    fn take_woken(&self, me: &GroupRemote) {
        if me.woken.take_all(&self.ready) > 0 {
            me.stats.ready.store(self.ready.len(), StatRelaxed);
        }
    }

    /// One task spawned from a plain thread onto this worker, if any.
    fn take_one_from_inbox(&self) -> Option<TaskRef> {
        settle(|| self.remote().inbox.steal())
    }

    /// A batch of tasks spawned from plain threads onto this worker, if
    /// any (half of them: the rest stay stealable in the inbox).
    fn take_from_inbox(&self) -> Option<TaskRef> {
        settle(|| self.remote().inbox.steal_batch_and_pop(&self.fresh))
    }

    /// Work from elsewhere: this worker's inbox, then the other workers'
    /// new tasks (deque, inbox, and LIFO task if `lifo` says so) where
    /// [`may_take_new_tasks_of`](Self::may_take_new_tasks_of) allows.
    fn steal(&self, lifo: LifoSlots) -> Option<TaskRef> {
        if let Some(t) = self.take_from_inbox() {
            return Some(t);
        }
        let n = self.control.worker_count();
        if n <= 1 {
            return None;
        }
        let stride = stride_for(n);
        let mut x = self.rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        let start = (x % n as u64) as usize;
        for i in 0..n {
            let victim = (start + i * stride) % n;
            if victim == self.index {
                continue;
            }
            let Some(g) = self.control.group(victim) else {
                continue;
            };
            if self.leaves_new_tasks_to(g) {
                continue;
            }
            let queued = g.stealer.len() + g.inbox.len();
            let lifo_held = !g.lifo.load(Relaxed).is_null();
            if lifo == LifoSlots::Leave && lifo_held {
                // Left to its owner for now: a park after this look is
                // bounded, to come back for it.
                self.declined_steal.set(true);
            }
            let lifo_task = lifo == LifoSlots::Take && lifo_held;
            if queued == 0 && !lifo_task {
                continue;
            }
            if !self.may_take_new_tasks_of(victim, g, queued) {
                self.declined_steal.set(true);
                continue;
            }
            if let Some(t) = settle(|| g.stealer.steal_batch_and_pop(&self.fresh))
                .or_else(|| settle(|| g.inbox.steal_batch_and_pop(&self.fresh)))
            {
                GroupStats::bump(&self.remote().stats.steals);
                return Some(t);
            }
            if lifo == LifoSlots::Take {
                if let Some(t) = Self::take_lifo(g) {
                    GroupStats::bump(&self.remote().stats.steals);
                    return Some(t);
                }
            }
        }
        None
    }

    /// Whether this worker leaves `victim`'s new tasks to it: when this
    /// worker already serves clearly more fds than the victim will once it
    /// has run its queued tasks. A task stays on the worker it first ran
    /// on, and so do the sockets it registers: a burst of connections
    /// accepted on one worker would otherwise end up mostly on the worker
    /// that steals them while the acceptor accepts (56 of 64 in the echo
    /// benchmark), whose round trips then queue behind each other. Counting
    /// the victim's queue keeps a burst of CPU work stealable: only its
    /// last few tasks are left to it. Without fds (most workloads) it
    /// never declines.
    fn leaves_new_tasks_to(&self, victim: &GroupRemote) -> bool {
        let mine = io_load(self.remote());
        mine > IO_BALANCE_MARGIN
            && mine
                > io_load(victim) + victim.stealer.len() + victim.inbox.len() + IO_BALANCE_MARGIN
    }

    /// Whether this worker may take `victim`'s new tasks now, `queued` of
    /// them: at once if they are many ([`STEAL_AT_ONCE`]); else only if
    /// the victim has been held by one task for [`STEAL_GRACE`], or seen
    /// awake between tasks for [`IDLE_STEAL_GRACE`], with its switch count
    /// unchanged, as this worker has seen it (a victim on its way out of a
    /// park takes them itself). A victim that
    /// switches gets to its new tasks itself, and soon: a task started
    /// where it was spawned talks to its spawner and siblings through local
    /// switches, and never moves, so stealing it would make every message
    /// between them a wake-up across workers for the task's whole life
    /// (Go's thieves give a running P's `runnext` the same grace). A thief
    /// that holds back parks for a bounded time (`declined_steal`).
    fn may_take_new_tasks_of(&self, victim: usize, g: &GroupRemote, queued: usize) -> bool {
        if queued >= STEAL_AT_ONCE {
            return true;
        }
        let sighting = &self.sightings[victim];
        let running = g.running.load(Relaxed);
        let grace = if running != 0 {
            STEAL_GRACE
        } else if self.control.idle.is_awake(victim) {
            IDLE_STEAL_GRACE
        } else {
            // Parked with work queued only on its way out of the park, a
            // wake-up already made (tens of µs on a VM): it takes them.
            sighting.set(None);
            return false;
        };
        let switches = g.stats.switches.load(Relaxed);
        let now = Instant::now();
        match sighting.get() {
            Some(seen) if seen.task == running && seen.switches == switches => {
                now.saturating_duration_since(seen.since) >= grace
            }
            _ => {
                sighting.set(Some(Sighting {
                    task: running,
                    switches,
                    since: now,
                }));
                false
            }
        }
    }

    /// Whether stealable work is left for another worker: this worker's
    /// own never-run tasks (with the rest of a batch it just stole) and
    /// inbox, or any other worker's deque, inbox or LIFO slot. Looked at when
    /// the last searcher stops searching (`Idle::found_work`), so every
    /// worker's is read: a spawn on any of them may have skipped its wake-up
    /// because of this searcher. O(workers), once per search that found
    /// work.
    fn stealable_in_sight(&self) -> bool {
        !self.fresh.is_empty()
            || !self.remote().inbox.is_empty()
            || (0..self.control.worker_count())
                .filter(|&i| i != self.index)
                .filter_map(|i| self.control.group(i))
                .any(|g| {
                    !g.stealer.is_empty() || !g.inbox.is_empty() || !g.lifo.load(Relaxed).is_null()
                })
    }

    /// Looks for work elsewhere, then says whether to park and until when
    /// (`IdleWorker::look`). In steps, each its own function:
    ///
    /// 1. [`plan_spin`](Self::plan_spin): how long to look, and whether the
    ///    look is charged to the spin budget;
    /// 2. [`poll_ready_fds`](Self::poll_ready_fds): ready fds first;
    /// 3. [`spin_for_work`](Self::spin_for_work): steal, take what was
    ///    woken here, end this worker's due sleeps, until the plan's end;
    /// 4. [`wait_for_near_sleep`](Self::wait_for_near_sleep): a sleep of
    ///    ours due soon keeps the worker looking, else bounds its park;
    /// 5. [`release_surplus_stacks`](Self::release_surplus_stacks), then
    ///    park.
    ///
    /// The look's time is charged to the budget when it ends
    /// ([`settle_spin`](Self::settle_spin)), less what was productive.
    fn look_elsewhere(&self) -> Look<TaskRef> {
        let start = Instant::now();
        let mut plan = self.plan_spin(start);
        let (look, found) = match self.poll_ready_fds(&mut plan) {
            Some(t) => (Look::Found(t), FoundBy::Elsewhere),
            None => match self.spin_for_work(start, &plan) {
                SpinEnd::Found(t, by) => (Look::Found(t), by),
                SpinEnd::Again => (Look::Again, FoundBy::Nothing),
                SpinEnd::Spun => match self.wait_for_near_sleep(&mut plan) {
                    Some(Look::Found(t)) => (Look::Found(t), FoundBy::Elsewhere),
                    Some(look) => (look, FoundBy::Nothing),
                    None if self.release_surplus_stacks(Instant::now()) => {
                        (Look::Again, FoundBy::Nothing)
                    }
                    None => (Look::Park(self.park_deadline(&plan)), FoundBy::Nothing),
                },
            },
        };
        self.settle_spin(start, &plan, found);
        look
    }

    /// Step 1 of [`look_elsewhere`](Self::look_elsewhere): how long this
    /// look may spin and whether it is charged. The default spins are
    /// budgeted: out of credit, one round of looks, then park
    /// (`spin_budget.rs`). A look spent polling as the user asked
    /// (`idle_poll`) is not charged, unless it spins for a sleep of ours
    /// that is near (the sleep spin is budgeted unless the user set it).
    fn plan_spin(&self, start: Instant) -> SpinPlan {
        self.declined_steal.set(false);
        let idle_budgeted = !self.poll.adapts();
        let sleep_budgeted = self.control.config.sleep_spin_budgeted;
        let sleep_near = || {
            self.next_sleep.get().is_some_and(|s| {
                start
                    .checked_add(self.control.config.sleep_spin)
                    .is_none_or(|t| t >= s.deadline)
            })
        };
        let mut until = self.poll.look_until(start);
        if idle_budgeted && !self.spin_budget.covers(start, SPIN_TIME) {
            until = start;
        }
        SpinPlan {
            until,
            charged: idle_budgeted || (sleep_budgeted && sleep_near()),
            sleep_budgeted,
            park_until: None,
        }
    }

    /// Step 2: ready fds first: only this worker polls them, and most of
    /// the tasks they wake are its own. A worker with fds looks no longer
    /// than a round: what it waits for comes through its poller, which it
    /// blocks in.
    fn poll_ready_fds(&self, plan: &mut SpinPlan) -> Option<TaskRef> {
        if !self.polls() {
            return None;
        }
        self.poll_io(PollWait::NoWait);
        plan.until = Instant::now().min(plan.until);
        self.next_local()
    }

    /// Step 3: looks for work until `plan.until`: steals (other workers'
    /// LIFO slots only after [`LIFO_GRACE_ROUNDS`]), takes the tasks woken
    /// here meanwhile, and ends this worker's own sleeps as they fall due
    /// (polling the clock without pauses just before one). Past the spin
    /// (`idle_poll`), it gives back surplus stacks meanwhile.
    fn spin_for_work(&self, start: Instant, plan: &SpinPlan) -> SpinEnd {
        let mut round = 0u32;
        loop {
            let lifo = if round >= LIFO_GRACE_ROUNDS {
                LifoSlots::Take
            } else {
                LifoSlots::Leave
            };
            if let Some(t) = self.steal(lifo).or_else(|| self.next_local()) {
                return SpinEnd::Found(t, FoundBy::Elsewhere);
            }
            if self.control.stopping.load(Relaxed) {
                return SpinEnd::Again;
            }
            round += 1;
            let mut pause = true;
            if let Some(s) = self.next_sleep.get() {
                let now = Instant::now();
                self.end_due_sleep(now);
                if let Some(t) = self.ready.pop_front() {
                    return SpinEnd::Found(t, FoundBy::OwnSleep);
                }
                // Just before the deadline, poll the clock without pausing.
                pause = now + SLEEP_POLL_WINDOW < s.deadline;
            }
            if round % 8 == 0 {
                let now = Instant::now();
                if now >= plan.until {
                    return SpinEnd::Spun;
                }
                // Looking on past the spin (`idle_poll`): give back the
                // pool's surplus stacks meanwhile, as a worker about to park
                // does.
                if now >= start + SPIN_TIME && self.release_surplus_stacks(now) {
                    return SpinEnd::Again;
                }
            }
            if pause {
                for _ in 0..8 {
                    std::hint::spin_loop();
                }
            }
        }
    }

    /// Step 4: a sleep of ours ends soon: keep looking (and end it
    /// ourselves when it is due) rather than park through the wake-up
    /// latency: returns the look that replaces the park. If the sleep is
    /// further off, the park ends shortly before it (`plan.park_until`).
    /// By default the spin is budgeted: without the credit for it, the
    /// worker parks with no deadline, and the sleep's timer wakes it.
    fn wait_for_near_sleep(&self, plan: &mut SpinPlan) -> Option<Look<TaskRef>> {
        let s = self.next_sleep.get()?;
        let ahead = self.control.config.sleep_spin;
        let now = Instant::now();
        // A lead past the clock's range (`Duration::MAX`): always near.
        if now.checked_add(ahead).is_none_or(|t| t >= s.deadline) {
            let left = s.deadline.saturating_duration_since(now);
            if !plan.sleep_budgeted || self.spin_budget.covers(now, left) {
                // Not parking, so the last look of `park` will not come
                // either: take its place, LIFO slots included (the spin
                // may have ended before it looked at them).
                return Some(self.steal(LifoSlots::Take).map_or(Look::Again, Look::Found));
            }
        } else {
            let wake = s.deadline - ahead;
            if !plan.sleep_budgeted || self.spin_budget.covers(wake, ahead) {
                plan.park_until = Some(wake);
            }
        }
        None
    }

    /// Step 5: until when to park: shortly before a sleep of ours is due
    /// (step 4), and, if a steal held back from another worker's new
    /// tasks, no longer than it takes to look at them again
    /// ([`next_decline_wait`](Self::next_decline_wait)).
    fn park_deadline(&self, plan: &SpinPlan) -> Option<Instant> {
        if !self.declined_steal.replace(false) {
            return plan.park_until;
        }
        let again = Instant::now() + self.next_decline_wait();
        Some(plan.park_until.map_or(again, |t| t.min(again)))
    }

    /// How long a worker that held back from another worker's new tasks
    /// parks before it looks at them again: [`STEAL_GRACE`] at first,
    /// doubling with every such park up to [`DECLINE_WAIT_MAX`] until it
    /// finds work, so a busy worker that keeps getting to its new tasks
    /// itself, slowly, does not keep the idle ones waking every 10 µs.
    fn next_decline_wait(&self) -> Duration {
        let wait = self.decline_wait.get();
        self.decline_wait.set((wait * 2).min(DECLINE_WAIT_MAX));
        wait
    }

    /// The end of a look: charges its time to the spin budget if the plan
    /// says so, less the first [`PRODUCTIVE_SPIN`] of a look that found
    /// work from elsewhere: parking and being woken would
    /// have cost this worker's CPU about as much (futex wait and wake, a
    /// halted vCPU resumed), and the work far more latency. So two tasks
    /// that talk across workers keep both spinning while they talk, and
    /// only spin that finds nothing (or finds it late, or finds only a
    /// sleep of ours falling due) spends the budget: an idle runtime still
    /// costs nothing.
    fn settle_spin(&self, start: Instant, plan: &SpinPlan, found: FoundBy) {
        if !plan.charged {
            return;
        }
        let now = Instant::now();
        let mut spun = now.saturating_duration_since(start);
        if found == FoundBy::Elsewhere {
            spun = spun.saturating_sub(PRODUCTIVE_SPIN);
        }
        self.spin_budget.charge(now, spun);
    }

    /// When idle: drops a chunk of the pool's surplus stacks, if it has
    /// some (`stack/mod.rs`), and returns whether it did. A chunk takes at most
    /// ~0.2 ms, during which this worker counts as searching (so new work
    /// may wait that long); so not when a sleep of ours is due sooner than
    /// that could matter (counting the `sleep_spin` ahead of it).
    fn release_surplus_stacks(&self, now: Instant) -> bool {
        let sleep_soon = || {
            self.next_sleep.get().is_some_and(|s| {
                now.checked_add(self.control.config.sleep_spin)
                    .and_then(|t| t.checked_add(RELEASE_SLEEP_MARGIN))
                    .is_none_or(|t| t > s.deadline)
            })
        };
        self.control.stacks.has_marked() && !sleep_soon() && self.control.stacks.release_some()
    }

    /// Runs `t` until it suspends, then acts on why it did. Inlined into
    /// the one loop that calls it (`Idle::work`, through `IdleWorker::run`):
    /// the switch path.
    #[inline(always)]
    fn run_task(&self, t: TaskRef) {
        // The task after this one, in a long queue (a burst of wake-ups,
        // whose tasks slept long): its frames load while this one runs.
        if self.ready.len() >= PREFETCH_QUEUE_LEN {
            if let Some(next) = self.ready.front() {
                // SAFETY: `next` is in our ready queue.
                unsafe { next.prefetch_frames() };
            }
        }
        t.dequeued();
        if t.home() == NO_HOME {
            t.set_home(self.index);
            self.started.add(t);
            if !self.bind(t) {
                return;
            }
        }
        debug_assert_eq!(t.home(), self.index, "a started task left its worker");
        self.forget_sleep_of(t);
        self.current.set(Some(t));
        let me = self.remote();
        // Release: a watchdog sample that reads this task (Acquire) then
        // reads a switch count no older than the last run's bump.
        me.running.store(t.id().as_u64(), Release);
        // SAFETY: errno is this thread's; we run `t`, so its saved errno
        // is ours to read.
        unsafe { *libc::__errno_location() = t.errno() };
        // A fault in its guard page from now on is its overflow.
        overflow::set_running(t.as_ptr().cast_const().cast());
        // SAFETY: the running worker owns the coroutine of the task it runs:
        // the task is in no queue and no wait list while it runs.
        let coro = unsafe { t.coro_mut() }
            .as_mut()
            .expect("a queued task has a coroutine");
        let outcome = coro.resume(());
        // SAFETY: as above.
        unsafe { t.set_errno(*libc::__errno_location()) };
        overflow::set_running(ptr::null());
        self.current.set(None);
        me.running.store(0, Relaxed);
        GroupStats::bump(&me.stats.switches);
        match outcome {
            CoroutineResult::Yield(Suspend::Yield) => {
                // Tasks woken while this one ran were runnable before its
                // yield: they go first.
                self.take_woken(me);
                self.push_ready(t)
            }
            CoroutineResult::Yield(Suspend::Block(blocker)) => {
                // SAFETY: `t` suspended with this blocker and cannot resume
                // before `block` lets a waker make it runnable.
                match unsafe { blocker.get().block(t) } {
                    Blocked::Refused => self.push_ready(t),
                    Blocked::Waiting => {}
                    Blocked::Sleeping(deadline) => self.note_sleep(deadline, t, blocker),
                }
            }
            CoroutineResult::Yield(Suspend::Urgent(child)) => {
                // Like a yield (the child runs first, then the tasks ready
                // before this one's switch).
                self.take_woken(me);
                self.push_ready(t);
                child.enqueued();
                self.next.set(Some(child));
            }
            CoroutineResult::Return(()) => self.finish(t),
        }
    }

    /// Gives a never-run task whose body waits in its meta a coroutine: on
    /// the top stack of this worker's cache (the one its last finished task
    /// gave back, hot in this core's cache) if it has one, the task's
    /// reserved stack taking its place; else on the reserved stack. So
    /// children waiting in queues hold a stack each but touch none, and a
    /// burst of short tasks runs on a few hot stacks however far the runner
    /// falls behind. (Children that block keep their stacks: the next one
    /// then gets the untouched reserved stack, no worse than binding at
    /// spawn.) The stack gets its guard here if it has none yet
    /// (`TaskStack::guard`); if the kernel cannot install one (out of
    /// memory for page tables), the task is cancelled without running, and
    /// this returns false.
    fn bind(&self, t: TaskRef) -> bool {
        // SAFETY: we are about to run `t`: we own it and its meta's fields.
        let Some(reserved) = (unsafe { t.reserved_mut().take() }) else {
            return true; // bound at spawn (a large body or a stack size of its own)
        };
        let mut stack = {
            let mut cache = self.stacks.borrow_mut();
            match cache.pop() {
                Some(hot) => {
                    cache.push(reserved);
                    hot
                }
                None => reserved,
            }
        };
        if let Err(error) = stack.guard() {
            self.cancel_unguarded(t, stack, error);
            return false;
        }
        // SAFETY: as above; the reserved stack means the body is pending.
        unsafe { meta::bind(t, stack) };
        true
    }

    /// [`bind`](Self::bind) could not guard `stack` for never-run task `t`:
    /// the task is cancelled without running.
    #[cold]
    #[inline(never)]
    fn cancel_unguarded(&self, t: TaskRef, stack: TaskStack, error: std::io::Error) {
        tracing::error!(
            task = %t.id(),
            %error,
            "cannot install the guard page of a task's stack: the task is \
             cancelled without running"
        );
        self.started.remove(t);
        // SAFETY: we were about to run `t`; `cancel` gives the stack back.
        unsafe { *t.reserved_mut() = Some(stack) };
        self.cancel(t, false);
    }

    /// A task returned: recycle its stack, publish its end, drop its ref.
    fn finish(&self, t: TaskRef) {
        // SAFETY: the task has returned; its worker owns the coroutine.
        let coro = unsafe { t.coro_mut().take() }.expect("finished task has a coroutine");
        // SAFETY: written at spawn, read-only since.
        let size = unsafe { t.stack_size() };
        self.control
            .stacks
            .give(size, coro.into_stack(), Some(&mut self.stacks.borrow_mut()));
        GroupStats::bump(&self.remote().stats.finished);
        self.started.remove(t);
        t.publish_end(meta::EndState::Finished, make_ready);
        meta::table().release(t, Some(&mut self.slots.borrow_mut()));
    }

    /// At stop: drop every queued task (unwinding started ones here, on
    /// their own worker) and tell their joiners they were cancelled.
    fn cancel_queued(&self) {
        // Started tasks first: they unwind, and what they hold (locks, the
        // values a drop may wait for) is let go before the never-run tasks'
        // captures are dropped. Those drops may queue more tasks: again.
        loop {
            let mut never_run = Vec::new();
            while let Some(t) = self.take_queued() {
                t.dequeued();
                if t.home() == NO_HOME {
                    t.set_home(self.index);
                    never_run.push(t);
                } else {
                    self.started.remove(t);
                    self.cancel(t, true);
                }
            }
            if never_run.is_empty() {
                break;
            }
            for t in never_run {
                self.cancel(t, false);
            }
        }
    }

    /// At stop, after [`cancel_queued`](Self::cancel_queued): ends the
    /// waits of the tasks still blocked here, and cancels them the same way
    /// (their joins return `Cancelled`, their stacks are unwound and
    /// unmapped). A wait that somebody else ended meanwhile has its task on
    /// the way to the remote queue: it is waited for, and so is a task in
    /// `block_on`, until the task it waits for, which borrows from it, has
    /// ended (`WaitPolicy::Uncancellable`).
    fn cancel_blocked(&self) {
        if self.started.is_empty() {
            return;
        }
        tracing::debug!(
            worker = self.index,
            tasks = self.started.iter().count(),
            "cancelling the tasks blocked in a wait at stop"
        );
        let mut idle_rounds = 0u32;
        let since = Instant::now();
        let mut warned = false;
        while !self.started.is_empty() {
            let mut ended = false;
            // Oldest first: what a newer task's destructors wait for (a
            // lock, say), an older one is likelier to hold.
            for t in self.started.snapshot().into_iter().rev() {
                // SAFETY: after `cancel_queued`, a started task of this
                // worker has not run since it suspended in a wait: it is
                // blocked there, or its wait was just ended by another
                // thread, which queues it remotely (we then fail to claim
                // it).
                ended |= unsafe { t.current_wait().end_at_stop() };
            }
            self.cancel_queued();
            if ended {
                idle_rounds = 0;
                continue;
            }
            // Every wait left was ended elsewhere, and its task is a push
            // away from the remote queue; or it is `block_on`'s, whose task
            // (perhaps on another runtime) may take a while.
            idle_rounds += 1;
            if idle_rounds < 100 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_millis(1));
            }
            if !warned && since.elapsed() >= HELD_UP_WARNING {
                warned = true;
                tracing::warn!(
                    worker = self.index,
                    tasks = self.started.iter().count(),
                    "the stop has waited {HELD_UP_WARNING:?} for tasks in block_on \
                     (the tasks they wait for have not ended)"
                );
            }
        }
    }

    /// Any task queued on this worker (its inbox included), at stop.
    fn take_queued(&self) -> Option<TaskRef> {
        let me = self.remote();
        me.woken.take_all(&self.ready);
        self.next
            .take()
            .or_else(|| Self::take_lifo(me))
            .or_else(|| self.ready.pop_front())
            .or_else(|| self.fresh.pop())
            .or_else(|| self.take_one_from_inbox())
    }

    /// Drops a dequeued task at stop and tells its joiner it was cancelled.
    /// At stop, from inside the unwind of a cancelled task whose frame
    /// other tasks still borrow (a `scope`'s owner): cancels every other
    /// task of this worker now, as the stop would after this one, so that
    /// the borrowers of this worker end before the owner's frame goes.
    /// The state of the unwind in progress is restored after.
    pub(crate) fn cancel_rest_at_stop(&self) {
        let current = self.current.get();
        self.cancel_queued();
        self.cancel_blocked();
        self.current.set(current);
        self.unwinding_cancelled.set(true);
        overflow::set_running(current.map_or(ptr::null(), |t| t.as_ptr().cast_const().cast()));
    }

    fn cancel(&self, t: TaskRef, started: bool) {
        // A started task unwinds on its own stack, as itself. A never-run
        // task's body (or unstarted coroutine) is dropped here, on the
        // worker's stack, outside any task: a drop that waits then blocks
        // this thread, as on a plain thread, rather than trying to suspend a
        // task that has nothing to suspend. (A drop that waits for something
        // only a task of this stopped worker could do would wait for good.)
        self.forget_sleep_of(t);
        self.current.set(started.then_some(t));
        self.unwinding_cancelled.set(started);
        if started {
            // Its unwind runs on its stack: an overflow there is its own.
            overflow::set_running(t.as_ptr().cast_const().cast());
            // It unwinds from its switch, inside the spans it entered: they
            // are entered again first, for its guards to exit (`spans.rs`).
            // SAFETY: we are its worker, about to unwind it.
            unsafe { super::spans::reenter(t) };
        }
        // SAFETY: the worker owns the queued task's coroutine. Dropping a
        // started coroutine unwinds its stack on this, its home, thread.
        let coro = unsafe { t.coro_mut().take() };
        meta::drop_cancelled(t, coro);
        self.unwinding_cancelled.set(false);
        overflow::set_running(ptr::null());
        // A never-run task may hold a body and a reserved stack instead.
        // SAFETY: as above.
        let (body, reserved) = unsafe { (t.body_mut().take(), t.reserved_mut().take()) };
        meta::drop_cancelled(t, body);
        if let Some(stack) = reserved {
            self.control.stacks.give(
                self.control.stacks.default_size(),
                stack,
                Some(&mut self.stacks.borrow_mut()),
            );
        }
        self.current.set(None);
        t.publish_end(meta::EndState::Cancelled, make_ready);
        meta::table().release(t, Some(&mut self.slots.borrow_mut()));
    }
}

/// What a look may spin, decided when it starts
/// (`TaskGroup::plan_spin`).
struct SpinPlan {
    /// Look until this instant (the brief spin; longer with `idle_poll`).
    until: Instant,
    /// Whether the look's time is charged to the spin budget.
    charged: bool,
    /// Whether the spin ahead of this worker's own sleeps is budgeted.
    sleep_budgeted: bool,
    /// Where a park after this look ends: shortly before a sleep of ours.
    park_until: Option<Instant>,
}

/// How a look came by the task it found.
#[derive(Clone, Copy, PartialEq, Eq)]
enum FoundBy {
    /// From elsewhere: stolen, woken by another thread, made ready by I/O.
    Elsewhere,
    /// One of this worker's own sleeps fell due.
    OwnSleep,
    /// It found none.
    Nothing,
}

/// How the spin of a look ended (`TaskGroup::spin_for_work`).
enum SpinEnd {
    Found(TaskRef, FoundBy),
    /// Stop looking and start over (the runtime stops; stacks released).
    Again,
    /// The planned spin is over with nothing found.
    Spun,
}

/// Whether a steal takes other workers' LIFO tasks (their last spawned,
/// which their owners are about to run).
#[derive(Clone, Copy, PartialEq, Eq)]
enum LifoSlots {
    Leave,
    Take,
}

impl IdleWorker for TaskGroup {
    type Task = TaskRef;

    fn index(&self) -> usize {
        self.index
    }

    fn stopping(&self) -> bool {
        self.control.stopping.load(Relaxed)
    }

    #[inline(always)]
    fn next_local(&self) -> Option<TaskRef> {
        TaskGroup::next_local(self)
    }

    fn look(&self) -> Look<TaskRef> {
        self.look_elsewhere()
    }

    fn last_look(&self) -> Option<TaskRef> {
        self.declined_steal.set(false);
        TaskGroup::next_local(self).or_else(|| self.steal(LifoSlots::Take))
    }

    fn look_again_at(&self) -> Option<Instant> {
        self.declined_steal
            .replace(false)
            .then(|| Instant::now() + self.next_decline_wait())
    }

    fn stealable_in_sight(&self) -> bool {
        TaskGroup::stealable_in_sight(self)
    }

    // A park is a futex wait or a blocking poll (microseconds at least):
    // a clock read on each side of it is what the busy time costs.
    fn parking(&self) {
        let stats = &self.remote().stats;
        GroupStats::bump(&stats.parks);
        // A worker parks with nothing ready.
        stats.ready.store(0, StatRelaxed);
        stats.busy.asleep(Instant::now());
    }

    fn unparked(&self) {
        self.remote().stats.busy.awake(Instant::now());
    }

    fn search_ended(&self, t: &TaskRef) {
        self.decline_wait.set(STEAL_GRACE);
        self.poll.work_found(t.woken_by_timer());
    }

    fn polls(&self) -> bool {
        self.poller.get().is_some_and(Poller::has_registrations)
    }

    fn poll_io(&self, wait: PollWait) {
        if let Some(p) = self.poller.get() {
            GroupStats::bump_stat(&self.remote().stats.polls);
            p.poll(wait, make_ready);
            self.io_polled_at.set(Instant::now());
        }
    }

    // Inlined: this is the switch path, and the loop (`Idle::work`) calls
    // it once; a call here costs about 20 instructions a switch.
    #[inline(always)]
    fn run(&self, t: TaskRef) {
        self.run_task(t);
    }
}

/// How many more fds a thief must serve than its victim will before it
/// leaves the victim's new tasks to it (`leaves_new_tasks_to`).
const IO_BALANCE_MARGIN: usize = 4;

/// The fds registered in a worker's poller now.
fn io_load(g: &GroupRemote) -> usize {
    g.io_sources.get().map_or(0, |p| p.registered())
}

/// Retries `steal` until it settles: a task, or nothing to take.
fn settle(mut steal: impl FnMut() -> Steal<TaskRef>) -> Option<TaskRef> {
    loop {
        match steal() {
            Steal::Success(t) => return Some(t),
            Steal::Retry => continue,
            Steal::Empty => return None,
        }
    }
}

/// A stride coprime with `n`, so that `start + i * stride` visits every
/// worker once.
fn stride_for(n: usize) -> usize {
    const PRIMES: [usize; 6] = [7, 11, 13, 17, 19, 23];
    PRIMES.iter().copied().find(|p| n % p != 0).unwrap_or(1)
}
