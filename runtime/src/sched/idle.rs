//! The idle-worker protocol: when to park, and when a producer must wake.
//!
//! Wake-ups are futex syscalls (3-5 µs on a VM), so they are made only when
//! they are needed. Two counters describe the idle workers: `searching`
//! (awake, looking for work: they will find new work on their own) and
//! `parked` (on a lot, or about to be). Each worker also has a park state:
//! `AWAKE`, `PARKED`, or `NOTIFIED` (parked, and picked by a producer to go
//! and search). Work comes in two kinds:
//!
//! - *Stealable* work (a new task): after pushing it, a producer calls
//!   [`Idle::notify_work`], which wakes a worker only if none is searching and
//!   some is parked. It picks one `PARKED` worker, moves it to `NOTIFIED`,
//!   counts it as searching *on its behalf*, then signals it on its lot. So the
//!   spawns that follow while the woken worker is still on its way (tens of
//!   µs on a VM) see a searcher and make no syscall: one wake-up per burst,
//!   not one per spawn (tokio's "notified worker is searching" rule). The
//!   worker, leaving its park, finds `NOTIFIED` and takes over that count.
//! - *Pinned* work (a started task woken by another thread; it may only run
//!   on its home worker, see `docs/safety.md`): after pushing it on the home
//!   worker's remote queue, [`Idle::notify_worker`] wakes that worker only if
//!   it is not awake.
//!
//! A lot may be shared by several workers (worker `i` parks on lot `i % 4`),
//! but every wake-up is meant for one worker, so each waits with a bit of its
//! own (`1 << (i / 4 % 32)`, a futex bitset) and a signal wakes that worker
//! only, not every waiter of its lot (beyond 128 workers, two may share a
//! bit). The signal still moves the lot's state, so another worker of the
//! lot on its way to park returns at once and looks for work again.
//!
//! Both are store-buffering handshakes with a parking worker ([`Idle::park`]):
//! it reads its lot's state, publishes `PARKED` and `parked`, then looks for
//! work one last time; a producer publishes the work, then reads the flags.
//! Each side has a `SeqCst` fence between its write and its read, so either
//! the last look finds the work, or the producer sees the worker and signals
//! it on its lot, whose state moved since the worker read it: the futex wait
//! then returns at once. `tests::loom_*` model-check this code.

use crate::loom::sync::atomic::{
    fence, AtomicIsize, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst,
};
use spindle_parking::ParkingLot;

/// The number of ParkingLots (bthread's `PARKING_LOT_NUM`). One under loom,
/// so that the models' two workers share their lot.
pub(crate) const LOTS: usize = if cfg!(loom) { 1 } else { 4 };
/// At most this many workers are woken by one notification: more are wasted
/// wake-ups (bthread's `signal_task` cap).
const MAX_SIGNAL: usize = 2;

// A worker's park state.
const AWAKE: u8 = 0;
const PARKED: u8 = 1;
const NOTIFIED: u8 = 2;

/// The idle state of one runtime; see the module docs.
#[derive(Debug)]
pub(crate) struct Idle {
    pub(crate) lots: [ParkingLot; LOTS],
    /// Per worker: `AWAKE`, `PARKED` or `NOTIFIED`.
    states: Box<[AtomicU8]>,
    /// Workers registered so far (`states[..workers]` are in use).
    workers: AtomicUsize,
    /// Workers looking for work, counting notified ones still on their way.
    /// Signed: a notified worker may take its count over a moment before the
    /// notifier adds it; a negative reading only makes producers wake more.
    searching: AtomicIsize,
    parked: AtomicUsize,
    /// Threads woken by signals, for stats.
    pub(crate) wakeups: AtomicU64,
}

impl Idle {
    /// The idle state of a runtime of at most `max_workers` workers.
    pub(crate) fn new(max_workers: usize) -> Self {
        Idle {
            lots: Default::default(),
            states: (0..max_workers).map(|_| AtomicU8::new(AWAKE)).collect(),
            workers: AtomicUsize::new(0),
            searching: AtomicIsize::new(0),
            parked: AtomicUsize::new(0),
            wakeups: AtomicU64::new(0),
        }
    }

    /// Registers worker `workers()`; call before it starts.
    pub(crate) fn add_worker(&self) {
        self.workers.fetch_add(1, SeqCst);
    }

    /// The lot worker `w` parks on.
    pub(crate) fn lot_of(w: usize) -> usize {
        w % LOTS
    }

    /// The mask worker `w` waits on its lot with: a bit none of the lot's
    /// next 31 workers has.
    fn mask_of(w: usize) -> u32 {
        1 << ((w / LOTS) % 32)
    }

    /// A worker starts looking for work.
    pub(crate) fn start_searching(&self) {
        self.searching.fetch_add(1, SeqCst);
    }

    /// A searching worker found work. If it was the last searcher and
    /// `more` says stealable work is still in sight, it wakes another, so
    /// that a burst of spawns, whose producers skipped the wake-up because
    /// somebody was searching, is still spread. (Without `more`, every wake
    /// of a parked worker for one pinned task would wake a second worker
    /// for nothing.)
    pub(crate) fn found_work(&self, me: usize, more: impl FnOnce() -> bool) {
        let last = self.searching.fetch_sub(1, SeqCst) == 1;
        self.after_last_searcher(me, last, more);
    }

    /// Once the last searcher has stopped searching: `more` looks for
    /// stealable work, and if it sees some, a parked worker is woken. The
    /// look comes after the decrement and a fence, the other half of a
    /// producer's push, fence, read of `searching`: a producer that skipped
    /// its wake-up because it saw a searcher pushed before `more` looks.
    fn after_last_searcher(&self, me: usize, last: bool, more: impl FnOnce() -> bool) {
        if last {
            fence(SeqCst);
            if more() {
                self.notify_work(me);
            }
        }
    }

    /// A searching worker leaves for good (runtime stop).
    pub(crate) fn stop_searching(&self) {
        self.searching.fetch_sub(1, SeqCst);
    }

    /// Called after pushing stealable work; `from` is the pushing worker
    /// (any index from a plain thread), where the search for a parked
    /// worker starts.
    #[inline]
    pub(crate) fn notify_work(&self, from: usize) {
        fence(SeqCst);
        if self.searching.load(Relaxed) > 0 || self.parked.load(Relaxed) == 0 {
            return;
        }
        self.signal_task(1, from);
    }

    /// Wakes up to `n` (at most [`MAX_SIGNAL`]) parked workers, each made a
    /// searcher; see the module docs.
    pub(crate) fn signal_task(&self, n: usize, from: usize) {
        let n = n.min(MAX_SIGNAL);
        let workers = self.workers.load(Relaxed);
        let mut picked = 0;
        for i in 1..=workers {
            if picked == n {
                break;
            }
            let w = (from + i) % workers;
            let state = &self.states[w];
            if state.load(Relaxed) == PARKED
                && state
                    .compare_exchange(PARKED, NOTIFIED, SeqCst, Relaxed)
                    .is_ok()
            {
                self.searching.fetch_add(1, SeqCst);
                self.signal_worker(w);
                picked += 1;
            }
        }
    }

    /// Wakes worker `w` if it waits on its lot, and moves the lot's state
    /// so that a worker on its way to wait there does not sleep through
    /// this.
    fn signal_worker(&self, w: usize) {
        let woken = self.lots[Self::lot_of(w)].signal_masked(u32::MAX, Self::mask_of(w));
        if woken > 0 {
            self.wakeups.fetch_add(woken as u64, Relaxed);
        }
    }

    /// Called after pushing work pinned to worker `w`.
    #[inline]
    pub(crate) fn notify_worker(&self, w: usize) {
        fence(SeqCst);
        if self.states[w].load(Relaxed) != AWAKE {
            self.signal_worker(w);
        }
    }

    /// Parks worker `me` on its lot unless `last_look` finds work (which is
    /// then returned) or `stopping` says the runtime stops; `until` bounds
    /// the sleep. `more` is `found_work`'s, for when the last look finds
    /// work. `searching` says whether the worker is a searcher; the
    /// worker gives that up to park, and comes back a searcher if a producer
    /// picked it (see the module docs). Returns whether the worker actually
    /// slept, and the work found.
    pub(crate) fn park<T>(
        &self,
        me: usize,
        searching: &mut bool,
        stopping: impl Fn() -> bool,
        last_look: impl FnOnce() -> Option<T>,
        more: impl FnOnce() -> bool,
        until: Option<std::time::Instant>,
    ) -> (bool, Option<T>) {
        let lot = &self.lots[Self::lot_of(me)];
        // The state is read BEFORE the last look (see ParkingLot's docs).
        let lot_state = lot.state();
        self.states[me].store(PARKED, Relaxed);
        self.parked.fetch_add(1, SeqCst);
        let mut last = false;
        if *searching {
            *searching = false;
            last = self.searching.fetch_sub(1, SeqCst) == 1;
        }
        fence(SeqCst);
        let found = last_look();
        let slept = found.is_none() && !stopping();
        if slept {
            lot.wait_until_masked(lot_state, until, Self::mask_of(me));
        }
        if self.states[me].swap(AWAKE, SeqCst) == NOTIFIED {
            // A producer counted us as searching: take the count over.
            *searching = true;
        }
        self.parked.fetch_sub(1, SeqCst);
        if found.is_some() {
            // Leaving with work as the last searcher: as in `found_work`
            // (once awake, so that the wake-up is not for ourselves).
            self.after_last_searcher(me, last, more);
        }
        (slept, found)
    }

    /// Stops every lot, waking all parked workers for good.
    pub(crate) fn stop(&self) {
        for lot in &self.lots {
            lot.stop();
        }
    }
}

#[cfg(all(test, loom))]
mod tests {
    use super::*;
    use loom::sync::atomic::AtomicBool;
    use loom::sync::Arc;
    use loom::thread;

    /// Explores every interleaving with up to two preemptions (three, for
    /// the models with two producers, ran for over five minutes).
    fn model<F: Fn() + Sync + Send + 'static>(f: F) {
        model_bounded(2, f)
    }

    fn model_bounded<F: Fn() + Sync + Send + 'static>(preemptions: usize, f: F) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(preemptions);
        b.check(f);
    }

    /// A one-task queue with the orderings of the remote queue (a release
    /// RMW to push, an acquire swap to take). Not a mutex: a mutex would
    /// synchronize both ways and hide a missing fence. (The push must be an
    /// RMW, as the real one is: loom 0.7 lets a later swap miss a plain
    /// store that happens-before it, a false deadlock.)
    struct Slot(loom::sync::atomic::AtomicU32);

    impl Slot {
        fn new() -> Self {
            Slot(loom::sync::atomic::AtomicU32::new(0))
        }
        fn push(&self, t: u32) {
            self.0.swap(t, loom::sync::atomic::Ordering::Release);
        }
        fn is_empty(&self) -> bool {
            self.0.load(loom::sync::atomic::Ordering::Relaxed) == 0
        }
        fn pop(&self) -> Option<u32> {
            match self.0.swap(0, loom::sync::atomic::Ordering::Acquire) {
                0 => None,
                t => Some(t),
            }
        }
    }

    /// A plain stand-in for a worker: its pinned queue.
    struct W {
        pinned: Slot,
    }

    struct Rt {
        idle: Idle,
        stealable: Slot,
        /// A second stealable queue, for the two-producer model.
        stealable2: Slot,
        workers: [W; 2],
        done: AtomicUsize,
        stopping: AtomicBool,
        /// Whether a task other than [`LONG`] has run.
        other_ran: (loom::sync::Mutex<bool>, loom::sync::Condvar),
    }

    /// A task that runs until another task has run: its worker is busy
    /// while the other waits to be picked up by a parked worker.
    const LONG: u32 = 100;

    /// The worker loop of `TaskGroup::run`, with task handles for tasks and
    /// no spinning: look, else park.
    fn worker(rt: &Rt, me: usize, total: usize) -> Vec<u32> {
        let mut ran = Vec::new();
        let look = || {
            rt.workers[me]
                .pinned
                .pop()
                .or_else(|| rt.stealable.pop())
                .or_else(|| rt.stealable2.pop())
        };
        rt.idle.start_searching();
        let mut searching = true;
        loop {
            if rt.stopping.load(SeqCst) {
                break;
            }
            let more = || !rt.stealable.is_empty() || !rt.stealable2.is_empty();
            let task = look().or_else(|| {
                rt.idle
                    .park(
                        me,
                        &mut searching,
                        || rt.stopping.load(SeqCst),
                        look,
                        more,
                        None,
                    )
                    .1
            });
            match task {
                Some(t) => {
                    if searching {
                        searching = false;
                        rt.idle.found_work(me, more);
                    }
                    if t == LONG {
                        // Runs until the other task has run.
                        let (m, cv) = &rt.other_ran;
                        let mut ran = m.lock().unwrap();
                        while !*ran {
                            ran = cv.wait(ran).unwrap();
                        }
                    } else {
                        *rt.other_ran.0.lock().unwrap() = true;
                        rt.other_ran.1.notify_all();
                    }
                    ran.push(t);
                    if rt.done.fetch_add(1, SeqCst) + 1 == total {
                        rt.stopping.store(true, SeqCst);
                        rt.idle.stop();
                    }
                }
                None if !searching => {
                    searching = true;
                    rt.idle.start_searching();
                }
                None => {}
            }
        }
        if searching {
            rt.idle.stop_searching();
        }
        ran
    }

    fn runtime() -> Arc<Rt> {
        let idle = Idle::new(2);
        idle.add_worker();
        idle.add_worker();
        Arc::new(Rt {
            idle,
            stealable: Slot::new(),
            stealable2: Slot::new(),
            workers: [
                W {
                    pinned: Slot::new(),
                },
                W {
                    pinned: Slot::new(),
                },
            ],
            done: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
            other_ran: Default::default(),
        })
    }

    /// Starts both workers, to run `total` tasks between them.
    fn start_workers(rt: &Arc<Rt>, total: usize) -> Vec<thread::JoinHandle<Vec<u32>>> {
        (0..2)
            .map(|i| {
                let rt = rt.clone();
                thread::spawn(move || worker(&rt, i, total))
            })
            .collect()
    }

    /// Runs `produce` on a thread of its own: a second producer.
    fn producer(rt: &Arc<Rt>, produce: fn(&Rt)) -> thread::JoinHandle<()> {
        let rt = rt.clone();
        thread::spawn(move || produce(&rt))
    }

    /// New, stealable work is always picked up: no worker sleeps through it.
    #[test]
    fn loom_stealable_work_is_never_lost() {
        // One task and one producer: three preemptions explore in seconds.
        model_bounded(3, || {
            let rt = runtime();
            let ws = start_workers(&rt, 1);
            rt.stealable.push(7);
            rt.idle.notify_work(0);
            let ran: Vec<u32> = ws.into_iter().flat_map(|w| w.join().unwrap()).collect();
            assert_eq!(ran, [7]);
        });
    }

    /// Work pinned to worker 1 wakes worker 1, and only worker 1 runs it.
    #[test]
    fn loom_pinned_work_wakes_its_worker() {
        model_bounded(3, || {
            let rt = runtime();
            let ws = start_workers(&rt, 1);
            rt.workers[1].pinned.push(9);
            rt.idle.notify_worker(1);
            let ran: Vec<Vec<u32>> = ws.into_iter().map(|w| w.join().unwrap()).collect();
            assert_eq!(ran, [vec![], vec![9]]);
        });
    }

    /// Two producers, each pushing a task and notifying, racing the workers'
    /// parking: both tasks run. (This model caught a lost wake-up in an
    /// attempt to skip wake-ups while a signalled worker is on its way, see
    /// docs/benchmarks.md; keep it when trying again.)
    #[test]
    fn loom_two_producers_never_lose_a_task() {
        model(|| assert_eq!(two_producers(7), [7, 8]));
    }

    /// Two workers; this thread pushes `first` (and notifies), a second
    /// producer pushes task 8: returns the tasks that ran, sorted.
    fn two_producers(first: u32) -> Vec<u32> {
        let rt = runtime();
        let ws = start_workers(&rt, 2);
        let other = producer(&rt, |rt| {
            rt.stealable2.push(8);
            rt.idle.notify_work(1);
        });
        rt.stealable.push(first);
        rt.idle.notify_work(0);
        other.join().unwrap();
        let mut ran: Vec<u32> = ws.into_iter().flat_map(|w| w.join().unwrap()).collect();
        ran.sort();
        ran
    }

    /// A searcher takes a task that runs until a second one has run, while
    /// the second one's producer skips its wake-up because it sees that
    /// searcher: the searcher, the last one, sees the second task once it
    /// stops searching and wakes the parked worker for it. (Found by
    /// review: it looked for more work before it stopped searching, and
    /// the second task waited on the busy worker's queue.)
    #[test]
    fn loom_the_last_searcher_wakes_a_worker_for_work_left_behind() {
        model(|| assert_eq!(two_producers(LONG), [8, LONG]));
    }

    /// A pinned wake-up (which wakes its worker without making it a
    /// searcher) racing a notification of stealable work (which picks a
    /// parked worker and makes it one): both tasks run, the pinned one on
    /// its own worker, and no searcher count is left behind.
    #[test]
    fn loom_pinned_and_stealable_wakes_race() {
        model(|| {
            let rt = runtime();
            let ws = start_workers(&rt, 2);
            let other = producer(&rt, |rt| {
                rt.workers[0].pinned.push(9);
                rt.idle.notify_worker(0);
            });
            rt.stealable.push(7);
            rt.idle.notify_work(1);
            other.join().unwrap();
            let ran: Vec<Vec<u32>> = ws.into_iter().map(|w| w.join().unwrap()).collect();
            assert!(ran[0].contains(&9), "the pinned task ran on its worker");
            let mut all: Vec<u32> = ran.concat();
            all.sort();
            assert_eq!(all, [7, 9]);
            assert_eq!(rt.idle.searching.load(SeqCst), 0, "no searcher left over");
        });
    }
}
