//! `TaskControl`: the workers of one runtime and how idle ones are woken.
//!
//! [`Shared`] is what every worker and every spawner of a runtime sees: one
//! [`GroupShared`] per worker (its remote queue and the thief end of its
//! deque), the injector for spawns from plain threads, the 4 `ParkingLot`s
//! idle workers sleep on (worker `i` on lot `i % 4`, which spreads wake-up
//! traffic), the stack pool and the counters.
//!
//! # Waking idle workers
//!
//! Wake-ups are futex syscalls (3-5 µs on a VM), so they are made only when
//! they are needed. Two counters describe the idle workers: `searching`
//! (awake, looking for work: they will find new work on their own) and
//! `parked` (on a lot, or about to be). Work comes in two kinds:
//!
//! - *Stealable* work (a new task): after pushing it, [`Shared::notify_work`]
//!   wakes a worker only if none is searching and some is parked, and then at
//!   most 2 (`signal_task`), starting at the caller's lot.
//! - *Pinned* work (a started task woken by another thread; it may only run
//!   on its home worker, see `docs/safety.md`): after pushing it on the home
//!   worker's remote queue, [`Shared::notify_worker`] wakes that worker only
//!   if its `sleeping` flag is set. The lot may be shared with other workers,
//!   so the wake goes to every waiter of that lot (at most `workers / 4`).
//!
//! Both checks are store-buffering handshakes with the parking worker (it
//! publishes `parked`/`sleeping`, then looks for work one last time; the
//! producer publishes the work, then reads the flags), so each side has a
//! `SeqCst` fence between its write and its read: either the worker's last
//! look finds the work, or the producer sees the worker and signals its lot,
//! whose state the worker read before its last look. `tests/loom_idle.rs`
//! models this protocol.

use crate::meta::TaskRef;
use crate::queue::RemoteQueue;
use crate::stack::StackPool;
use crossbeam_deque::{Injector, Stealer};
use spindle_parking::loom::sync::atomic::{
    fence, AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst,
};
use spindle_parking::ParkingLot;
use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;

/// The number of ParkingLots (bthread's `PARKING_LOT_NUM`).
pub(crate) const LOTS: usize = 4;
/// The most workers one runtime may have.
pub(crate) const MAX_WORKERS: usize = 256;
/// At most this many workers are woken by one notification: more are wasted
/// wake-ups (bthread's `signal_task` cap).
const MAX_SIGNAL: usize = 2;

/// What a runtime's workers were built with.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) stack_size: usize,
    pub(crate) thread_name: String,
    pub(crate) pin_workers: bool,
}

/// Counters a worker writes and anyone reads. Only the owning worker writes
/// them, so an increment is a plain load and store (no locked instruction).
#[derive(Debug, Default)]
pub(crate) struct GroupStats {
    pub(crate) spawned: AtomicU64,
    pub(crate) finished: AtomicU64,
    pub(crate) switches: AtomicU64,
    pub(crate) steals: AtomicU64,
    pub(crate) parks: AtomicU64,
}

impl GroupStats {
    #[inline]
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.store(counter.load(Relaxed) + 1, Relaxed);
    }
}

/// The part of a worker (`TaskGroup`) that other threads touch.
#[derive(Debug)]
pub(crate) struct GroupShared {
    /// Tasks pushed by other threads: wake-ups of tasks pinned here.
    pub(crate) remote: RemoteQueue,
    /// The thief end of the worker's deque of never-run tasks.
    pub(crate) stealer: Stealer<TaskRef>,
    /// Set while the worker is parked or about to park.
    pub(crate) sleeping: AtomicBool,
    /// The lot this worker parks on.
    pub(crate) lot: usize,
    pub(crate) stats: GroupStats,
}

/// A runtime's shared state; see the module docs.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) groups: Box<[OnceLock<GroupShared>]>,
    /// Workers started so far (groups `0..workers` exist).
    pub(crate) workers: AtomicUsize,
    pub(crate) lots: [ParkingLot; LOTS],
    pub(crate) searching: AtomicUsize,
    pub(crate) parked: AtomicUsize,
    /// Tasks spawned from plain threads, stealable by every worker.
    pub(crate) injector: Injector<TaskRef>,
    pub(crate) stacks: StackPool,
    pub(crate) stopping: AtomicBool,
    pub(crate) config: Config,
    /// Tasks spawned from plain threads (workers count their own).
    pub(crate) spawned_outside: AtomicU64,
    /// Threads woken by signals.
    pub(crate) wakeups: AtomicU64,
    pub(crate) threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Shared {
    pub(crate) fn new(config: Config) -> Self {
        Shared {
            groups: (0..MAX_WORKERS).map(|_| OnceLock::new()).collect(),
            workers: AtomicUsize::new(0),
            lots: Default::default(),
            searching: AtomicUsize::new(0),
            parked: AtomicUsize::new(0),
            injector: Injector::new(),
            stacks: StackPool::new(config.stack_size),
            stopping: AtomicBool::new(false),
            config,
            spawned_outside: AtomicU64::new(0),
            wakeups: AtomicU64::new(0),
            threads: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn group(&self, i: usize) -> Option<&GroupShared> {
        self.groups.get(i)?.get()
    }

    pub(crate) fn worker_count(&self) -> usize {
        self.workers.load(SeqCst)
    }

    /// Called after pushing stealable work; see the module docs.
    #[inline]
    pub(crate) fn notify_work(&self, from_lot: usize) {
        fence(SeqCst);
        if self.searching.load(Relaxed) > 0 || self.parked.load(Relaxed) == 0 {
            return;
        }
        self.signal_task(1, from_lot);
    }

    /// Wakes up to `n` (at most [`MAX_SIGNAL`]) parked workers, trying the
    /// lots in turn from `from_lot`. Every lot's state moves, so a worker on
    /// its way to park on any of them will not sleep through this.
    pub(crate) fn signal_task(&self, n: usize, from_lot: usize) {
        let n = n.min(MAX_SIGNAL);
        let mut woken = 0;
        for i in 0..LOTS {
            woken += self.lots[(from_lot + i) % LOTS].signal((n - woken) as u32);
            if woken >= n {
                break;
            }
        }
        if woken > 0 {
            self.wakeups.fetch_add(woken as u64, Relaxed);
        }
    }

    /// Pushes a started task onto its home worker's remote queue and wakes
    /// that worker if it sleeps.
    pub(crate) fn push_remote(&self, task: TaskRef) {
        let home = task.home();
        let g = self
            .group(home)
            .expect("a started task's home worker exists");
        g.remote.push(task);
        self.notify_worker(g);
    }

    #[inline]
    fn notify_worker(&self, g: &GroupShared) {
        fence(SeqCst);
        if g.sleeping.load(Relaxed) {
            let woken = self.lots[g.lot].signal(u32::MAX);
            if woken > 0 {
                self.wakeups.fetch_add(woken as u64, Relaxed);
            }
        }
    }

    /// Stops every lot, waking all parked workers for good.
    pub(crate) fn stop_lots(&self) {
        for lot in &self.lots {
            lot.stop();
        }
    }
}
