//! `TaskControl`: the workers of one runtime and how idle ones are woken.
//!
//! [`TaskControl`] is what every worker and every spawner of a runtime sees: one
//! [`GroupRemote`] per worker (its remote queue, its inbox of spawns from
//! plain threads and the thief end of its deque), the 4 `ParkingLot`s
//! idle workers sleep on (worker `i` on lot `i % 4`, which spreads wake-up
//! traffic), the stack pool and the counters.
//!
//! How idle workers are parked and woken is the protocol of `idle.rs`.
//!
//! Each worker's counters ([`GroupStats`]) live here too, in its
//! `GroupRemote`, where `Runtime::stats` reads them from any thread. Only
//! their worker writes them, with plain loads and stores (no locked
//! instruction): the switch count once per switch, the ready list's
//! length as it always kept it (now where other threads see it), the rest
//! at task starts and ends, steals, parks and polls. Its busy time is one
//! word written at its parks and unparks only ([`BusyClock`]).

use super::affinity::Cpus;
use super::idle::Idle;
use super::queue::{RemoteQueue, SharedLen};
use crate::driver::PollerShared;
use crate::loom::stats::{
    AtomicU64 as StatU64, AtomicUsize as StatCount, Ordering::Relaxed as StatRelaxed,
};
use crate::loom::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering::Acquire, Ordering::Relaxed,
    Ordering::Release, Ordering::SeqCst,
};
use crate::loom::sync::Mutex;
use crate::meta::{TaskMeta, TaskRef};
use crate::stack::StackPool;
use crossbeam_deque::{Injector, Stealer};

use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The most workers one runtime may have.
pub(crate) const MAX_WORKERS: usize = 256;

/// What a runtime's workers were built with.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) stack_size: usize,
    pub(crate) thread_name: String,
    pub(crate) pin_workers: bool,
    /// `Builder::sleep_spin`.
    pub(crate) sleep_spin: std::time::Duration,
    /// Whether that spin is the default's, and so budgeted
    /// (`spin_budget.rs`), rather than the user's.
    pub(crate) sleep_spin_budgeted: bool,
    /// `Builder::idle_poll`.
    pub(crate) idle_poll: std::time::Duration,
    /// The CPUs the workers may use (see `affinity.rs`).
    pub(crate) cpus: Cpus,
}

/// Counters a worker writes and anyone reads. Only the owning worker writes
/// them, so an increment is a plain load and store (no locked instruction).
///
/// The first five are loom's atomics (thieves read `switches` to decide
/// whether a worker is held up); the rest serve `Runtime::stats` only, and
/// are std's (`loom::stats`).
#[derive(Debug, Default)]
pub(crate) struct GroupStats {
    /// Tasks this worker spawned.
    pub(crate) spawned: AtomicU64,
    /// Tasks that ended here (their home).
    pub(crate) finished: AtomicU64,
    /// Task switches: each resume that returned to the worker.
    pub(crate) switches: AtomicU64,
    /// Batches of new tasks this worker stole (counted by the thief).
    pub(crate) steals: AtomicU64,
    /// Times this worker slept on its lot or in its poller.
    pub(crate) parks: AtomicU64,
    /// Times this worker polled its I/O poller: polls between tasks, idle
    /// polls and parks in the poller.
    pub(crate) polls: StatU64,
    /// The length of this worker's started list (`TaskGroup::started`):
    /// started tasks homed here that have not ended. Shared with that list.
    pub(crate) tasks: SharedLen,
    /// The length of this worker's ready list (`TaskGroup::ready`) as of
    /// a recent switch: the worker stores it every `REMOTE_TICK` picks of
    /// local work (where it looks at its other queues anyway) and as it
    /// parks (0), not on every switch, which would cost every switch a
    /// store. A reader sees the list as it was a few dozen tasks ago.
    pub(crate) ready: StatCount,
    /// How long this worker has not been parked.
    pub(crate) busy: BusyClock,
}

impl GroupStats {
    #[inline]
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.store(counter.load(Relaxed) + 1, Relaxed);
    }

    /// [`bump`](Self::bump) for a stats-only counter.
    #[inline]
    pub(crate) fn bump_stat(counter: &StatU64) {
        counter.store(counter.load(StatRelaxed) + 1, StatRelaxed);
    }
}

/// A worker's busy time: how long it has not been parked since it started,
/// readable from any thread, in one word that only the worker writes, at
/// its parks and unparks (a clock read each, never one per switch). So a
/// reader never sees half an update, and sees the time of a stretch still
/// under way. The word, in ns since `epoch`, shifted left once:
///
/// - low bit 0: parked (or not started yet, or exited): the busy time so
///   far;
/// - low bit 1: awake since `since`, having been busy `b` before: `since −
///   b`, so that the busy time at `now` is `now − word`.
///
/// `since − b` never goes below zero: `b` is made of stretches between
/// `epoch` and `since`. 63 bits of ns are 292 years.
#[derive(Debug)]
pub(crate) struct BusyClock {
    epoch: Instant,
    word: StatU64,
}

impl Default for BusyClock {
    fn default() -> Self {
        BusyClock {
            epoch: Instant::now(),
            word: StatU64::new(0),
        }
    }
}

impl BusyClock {
    /// The low bit of the word: the worker is awake.
    const AWAKE: u64 = 1;

    fn nanos(&self, t: Instant) -> u64 {
        let ns = t.saturating_duration_since(self.epoch).as_nanos();
        u64::try_from(ns).unwrap_or(u64::MAX).min(u64::MAX >> 1)
    }

    /// The worker starts, or is back from a park, at `now`. By the worker
    /// only.
    pub(crate) fn awake(&self, now: Instant) {
        let w = self.word.load(StatRelaxed);
        if w & Self::AWAKE == 0 {
            let base = self.nanos(now).saturating_sub(w >> 1);
            self.word.store(base << 1 | Self::AWAKE, StatRelaxed);
        }
    }

    /// The worker parks, or exits, at `now`. By the worker only.
    pub(crate) fn asleep(&self, now: Instant) {
        let w = self.word.load(StatRelaxed);
        if w & Self::AWAKE != 0 {
            let busy = self.nanos(now).saturating_sub(w >> 1);
            self.word.store(busy << 1, StatRelaxed);
        }
    }

    /// The busy time now, from any thread.
    pub(crate) fn read(&self) -> Duration {
        let w = self.word.load(StatRelaxed);
        let ns = if w & Self::AWAKE != 0 {
            // Read after the word: not before the stretch it says began.
            self.nanos(Instant::now()).saturating_sub(w >> 1)
        } else {
            w >> 1
        };
        Duration::from_nanos(ns)
    }
}

/// The part of a worker (`TaskGroup`) that other threads touch.
#[derive(Debug)]
pub(crate) struct GroupRemote {
    /// Tasks pushed by other threads: wake-ups of tasks pinned here, and
    /// never-run tasks placed here (`push_placed`), which first run here.
    pub(crate) woken: RemoteQueue,
    /// Calls of [`TaskControl::push_remote`] to this worker still under way.
    pub(crate) wakers: AtomicUsize,
    /// The thief end of the worker's deque of never-run tasks.
    pub(crate) stealer: Stealer<TaskRef>,
    /// Never-run tasks spawned from plain threads that spawn onto this
    /// worker (`TaskControl::push_outside`); stealable as `stealer` is.
    pub(crate) inbox: Injector<TaskRef>,
    /// The task this worker spawned last (never run; see `group.rs`).
    pub(crate) lifo: AtomicPtr<TaskMeta>,
    pub(crate) stats: GroupStats,
    /// The id of the task the worker is running, 0 between tasks (read by
    /// the stall watchdog, and by thieves deciding whether this worker is
    /// held up: `TaskGroup::may_take_new_tasks_of`).
    pub(crate) running: AtomicU64,
    /// The worker's poller, once it has one (for its count of fds).
    pub(crate) io_sources: OnceLock<Arc<PollerShared>>,
}

impl GroupRemote {
    /// Queues `task`, a started task of this worker woken by another
    /// thread, then runs `notify` (the wake-up of the worker). The call is
    /// counted in `wakers` from before the push to after `notify`, its last
    /// touch of the runtime: see [`TaskControl::push_remote`].
    pub(crate) fn push_woken(&self, task: TaskRef, notify: impl FnOnce()) {
        // Relaxed: the push below releases it to whoever takes the task, and
        // so to the drop that follows (through the worker's exit and join).
        self.wakers.fetch_add(1, Relaxed);
        task.enqueued();
        self.woken.push(task);
        notify();
        // Release: the drop that reads 0 comes after our last touch of it.
        self.wakers.fetch_sub(1, Release);
    }

    /// Waits until no [`push_woken`](Self::push_woken) is under way (a few
    /// instructions from done, unless its thread was preempted there).
    fn wait_for_wakers(&self) {
        while self.wakers.load(Acquire) != 0 {
            crate::loom::thread::yield_now();
        }
    }

    /// The remote part of a new worker whose deque's thief end is `stealer`.
    pub(crate) fn new(stealer: Stealer<TaskRef>) -> Self {
        GroupRemote {
            woken: RemoteQueue::new(),
            wakers: AtomicUsize::new(0),
            stealer,
            inbox: Injector::new(),
            lifo: AtomicPtr::new(std::ptr::null_mut()),
            stats: GroupStats::default(),
            running: AtomicU64::new(0),
            io_sources: OnceLock::new(),
        }
    }
}

/// A runtime's shared state; see the module docs.
#[derive(Debug)]
pub(crate) struct TaskControl {
    pub(crate) groups: Box<[OnceLock<GroupRemote>]>,
    /// Workers started so far (groups `0..workers` exist).
    pub(crate) workers: AtomicUsize,
    pub(crate) idle: Idle,
    /// The worker the next plain thread to spawn here spawns onto
    /// (`push_outside`), modulo the worker count.
    next_outside: AtomicUsize,
    pub(crate) stacks: StackPool,
    pub(crate) stopping: AtomicBool,
    /// Spawns from outside the runtime (plain threads, other runtimes'
    /// workers) between their check of `stopping` and their push: a
    /// stopping worker waits for them before it cancels its queues (see
    /// [`OutsideSpawn`]).
    outside_spawns: OutsideSpawns,
    pub(crate) config: Config,
    /// Tasks spawned from plain threads (workers count their own).
    pub(crate) spawned_outside: AtomicU64,
    pub(crate) threads: Mutex<Vec<JoinHandle<()>>>,
    /// Stalls reported by the watchdog (`watchdog.rs`).
    pub(crate) stalls: AtomicU64,
    /// The watchdog's periodic timer, cancelled at shutdown.
    pub(crate) watchdog: OnceLock<spindle_timer::TimerId>,
}

impl TaskControl {
    pub(crate) fn new(config: Config) -> Self {
        TaskControl {
            groups: (0..MAX_WORKERS).map(|_| OnceLock::new()).collect(),
            workers: AtomicUsize::new(0),
            idle: Idle::new(MAX_WORKERS),
            next_outside: AtomicUsize::new(0),
            stacks: StackPool::new(config.stack_size),
            stopping: AtomicBool::new(false),
            outside_spawns: OutsideSpawns::new(),
            config,
            spawned_outside: AtomicU64::new(0),
            threads: Mutex::new(Vec::new()),
            stalls: AtomicU64::new(0),
            watchdog: OnceLock::new(),
        }
    }

    /// Begins a spawn from outside the runtime: `None` if it is stopping
    /// (the spawn must not queue: no worker would run or cancel it).
    pub(crate) fn begin_outside_spawn(&self) -> Option<OutsideSpawn<'_>> {
        self.outside_spawns.begin(&self.stopping)
    }

    /// At stop, before a worker cancels what is queued on it: waits until
    /// no spawn from outside is between its check and its push.
    pub(crate) fn wait_for_outside_spawns(&self) {
        self.outside_spawns.wait(&self.stopping)
    }

    pub(crate) fn group(&self, i: usize) -> Option<&GroupRemote> {
        self.groups.get(i)?.get()
    }

    /// Fds registered in this runtime's pollers now.
    pub(crate) fn io_sources(&self) -> usize {
        self.groups
            .iter()
            .filter_map(OnceLock::get)
            .filter_map(|g| g.io_sources.get())
            .map(|p| p.registered())
            .sum()
    }

    pub(crate) fn worker_count(&self) -> usize {
        self.workers.load(SeqCst)
    }

    /// Pushes a started task onto its home worker's remote queue and wakes
    /// that worker if it sleeps.
    ///
    /// The caller need not hold the runtime (the timer thread, a plain
    /// thread unlocking a mutex): the blocked task keeps it alive until the
    /// push (a stopping worker waits for its blocked tasks whose waits were
    /// ended elsewhere, see `TaskGroup::cancel_blocked`), but from
    /// the push on, the task may run, end, and the runtime be dropped while
    /// this call still has the wake-up to make. So `wakers` counts the call
    /// from before the push to its last touch of `self`, and dropping
    /// `TaskControl` waits until no call is under way.
    pub(crate) fn push_remote(&self, task: TaskRef) {
        let home = task.home();
        let g = self
            .group(home)
            .expect("a started task's home worker exists");
        g.push_woken(task, || self.idle.notify_worker(home));
    }

    /// Queues a never-run task spawned from a plain thread: in the inbox of
    /// the worker that thread spawns onto (see [`outside_worker`]), as a
    /// task spawns onto its own worker, so that the tasks a thread spawns
    /// together start together and talk through local switches; idle
    /// workers steal them as they steal any new task (`TaskGroup::steal`).
    /// Wakes that worker if it is parked; if it is awake, makes sure a
    /// worker is searching, to take them should a task hold it long.
    pub(crate) fn push_outside(&self, task: TaskRef) {
        let w = outside_worker(self);
        let g = self
            .group(w)
            .expect("the workers are started before any spawn");
        task.enqueued();
        g.inbox.push(task);
        self.idle.notify_inbox(w);
    }

    /// Queues a never-run task on worker `w`'s remote queue, which only `w`
    /// takes from: the task first runs there (`task::Builder::worker`).
    pub(crate) fn push_placed(&self, task: TaskRef, w: usize) {
        let g = self.group(w).expect("the caller checked the worker exists");
        g.push_woken(task, || self.idle.notify_worker(w));
    }
}

/// Spawns from outside a runtime (plain threads, other runtimes' workers)
/// between their check of the stop flag and their push: a stopping worker
/// waits for them before it drains its queues for the last time.
///
/// A store-buffering handshake: a spawn counts itself in, then reads the
/// flag; the stop stores the flag, then each worker reads the count (all
/// `SeqCst`). Either the spawn sees the stop and queues nothing, or the
/// worker sees the spawn and waits for its push, then drains it.
#[derive(Debug)]
pub(crate) struct OutsideSpawns(AtomicUsize);

impl OutsideSpawns {
    pub(crate) fn new() -> Self {
        OutsideSpawns(AtomicUsize::new(0))
    }

    /// Begins a spawn: `None` if `stopping` is set.
    pub(crate) fn begin<'a>(&'a self, stopping: &AtomicBool) -> Option<OutsideSpawn<'a>> {
        self.0.fetch_add(1, SeqCst);
        // The handshake's fence (as the channels'): it orders the count's
        // store before the flag's load against the stop's side.
        fence(SeqCst);
        if stopping.load(SeqCst) {
            self.0.fetch_sub(1, SeqCst);
            return None;
        }
        Some(OutsideSpawn(self))
    }

    /// Waits until no spawn is under way (a few instructions, unless its
    /// thread was preempted between its check and its push). For a worker
    /// that has seen `stopping` set.
    pub(crate) fn wait(&self, stopping: &AtomicBool) {
        // The flag was seen set; the fence orders that before the count's
        // read, against the spawn's side.
        let stopping = stopping.load(SeqCst);
        debug_assert!(stopping, "only a stopping worker waits for spawns");
        fence(SeqCst);
        crate::loom::spin_until(|| self.0.load(SeqCst) == 0);
    }
}

/// A spawn from outside the runtime under way: the runtime was not
/// stopping when it began, and its workers will not drain their queues
/// before it is dropped (after the push).
pub(crate) struct OutsideSpawn<'a>(&'a OutsideSpawns);

impl Drop for OutsideSpawn<'_> {
    fn drop(&mut self) {
        (self.0).0.fetch_sub(1, SeqCst);
    }
}

thread_local! {
    /// The runtime a plain thread last spawned into (its address) and the
    /// worker it spawns onto there.
    static OUTSIDE_WORKER: std::cell::Cell<(usize, usize)> =
        const { std::cell::Cell::new((0, 0)) };
}

/// The worker this plain thread spawns onto in `control`: chosen in turn
/// among the workers when the thread first spawns there, then kept (a
/// thread that spawns into several runtimes in turn chooses again).
fn outside_worker(control: &TaskControl) -> usize {
    let key = control as *const TaskControl as usize;
    let n = control.worker_count().max(1);
    OUTSIDE_WORKER.with(|c| {
        let (runtime, w) = c.get();
        if runtime == key && w < n {
            return w;
        }
        let w = control.next_outside.fetch_add(1, Relaxed) % n;
        c.set((key, w));
        w
    })
}

impl Drop for TaskControl {
    fn drop(&mut self) {
        // A wake-up may still be on its way out of `push_remote` after the
        // task it queued has run and ended: let it finish (a few
        // instructions, unless its thread was preempted there).
        for g in self.groups.iter().filter_map(OnceLock::get) {
            g.wait_for_wakers();
        }
    }
}

#[cfg(all(test, loom))]
#[path = "loom_control.rs"]
mod loom_control;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_busy_clock_counts_the_stretches_between_parks() {
        let c = BusyClock::default();
        let e = c.epoch;
        assert_eq!(c.read(), Duration::ZERO, "not started: nothing yet");
        c.awake(e + ms(1));
        c.asleep(e + ms(4));
        assert_eq!(c.read(), ms(3));
        // A second unpark or park in a row changes nothing.
        c.asleep(e + ms(5));
        assert_eq!(c.read(), ms(3));
        c.awake(e + ms(10));
        c.awake(e + ms(11));
        c.asleep(e + ms(12));
        assert_eq!(c.read(), ms(5));
    }

    #[test]
    fn the_busy_clock_reads_a_stretch_under_way() {
        let c = BusyClock::default();
        let start = Instant::now();
        c.awake(start);
        std::thread::sleep(ms(2));
        let busy = c.read();
        assert!(busy >= ms(2), "{busy:?}");
        assert!(busy <= start.elapsed() + start.duration_since(c.epoch));
    }
}
