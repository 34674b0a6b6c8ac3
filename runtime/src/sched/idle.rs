//! The idle-worker protocol: when to park, and when a producer must wake.
//!
//! Wake-ups are futex syscalls (3-5 µs on a VM), so they are made only when
//! they are needed. Two counters describe the idle workers: `searching`
//! (awake, looking for work: they will find new work on their own) and
//! `parked` (on a lot, or about to be). Each worker also has a park state:
//! `Awake`, `Parked`, or `Notified` (parked, and picked by a producer to go
//! and search). Work comes in three kinds:
//!
//! - *Stealable* work (a new task): after pushing it, a producer calls
//!   [`Idle::notify_work`], which wakes a worker only if none is searching and
//!   some is parked. It picks one `Parked` worker, moves it to `Notified`,
//!   counts it as searching *on its behalf*, then signals it on its lot. So the
//!   spawns that follow while the woken worker is still on its way (tens of
//!   µs on a VM) see a searcher and make no syscall: one wake-up per burst,
//!   not one per spawn (tokio's "notified worker is searching" rule). The
//!   worker, leaving its park, finds `Notified` and takes over that count.
//! - *Pinned* work (a started task woken by another thread; it may only run
//!   on its home worker, see `docs/safety.md`): after pushing it on the home
//!   worker's remote queue, [`Idle::notify_worker`] wakes that worker only if
//!   it is not awake.
//! - *Placed* new work (a task a plain thread spawned into the inbox of the
//!   worker it spawns onto): [`Idle::notify_inbox`] picks that worker if it
//!   is parked, as `notify_work` picks one (`Notified`, counted as a
//!   searcher); if it is awake, it makes sure of a searcher as
//!   `notify_work` does, which takes the task only if that worker is held
//!   up (`TaskGroup::may_take_new_tasks_of`).
//!
//! A lot may be shared by several workers (worker `i` parks on lot `i % 4`),
//! but every wake-up is meant for one worker, so each waits with a bit of its
//! own (`1 << (i / 4 % 32)`, a futex bitset) and a signal wakes that worker
//! only, not every waiter of its lot (beyond 128 workers, two may share a
//! bit). The signal still moves the lot's state, so another worker of the
//! lot on its way to park returns at once and looks for work again.
//!
//! Both are store-buffering handshakes with a parking worker ([`Idle::park`]):
//! it reads its lot's state, publishes `Parked` and `parked`, then looks for
//! work one last time; a producer publishes the work, then reads the flags.
//! Each side has a `SeqCst` fence between its write and its read, so either
//! the last look finds the work, or the producer sees the worker and signals
//! it on its lot, whose state moved since the worker read it: the futex wait
//! then returns at once.
//!
//! A worker with fds registered parks in its I/O poller instead of its lot
//! (the driver's `Poller` and `PollParking`), with the same handshake: it reads its lot's state, and
//! after its last look sets its `in_poll` flag, fences, and blocks in the
//! poller only if the lot's state has not moved since. A producer signals
//! the lot (which moves its state), fences, and wakes the poller's waker
//! if it sees the flag. So either the worker sees the signal and does not
//! block, or the producer sees the flag and wakes it: no wake-up is lost,
//! and the waker's syscall is made only for a worker actually there.
//!
//! The worker loop itself is here too ([`Idle::work`]), generic over
//! [`IdleWorker`]: `TaskGroup` implements it with its queues, and the loom
//! models (`loom_idle.rs`) with queues of numbers, so that they check the
//! very loop the workers run, with the real handshakes.

use crate::driver::{PollParking, PollWait, PollWaker};
use crate::loom::sync::atomic::{
    fence, AtomicIsize, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst,
};
use spindle_parking::ParkingLot;
use std::time::Instant;

/// The number of ParkingLots (bthread's `PARKING_LOT_NUM`). One under loom,
/// so that the models' two workers share their lot.
pub(crate) const LOTS: usize = if cfg!(loom) { 1 } else { 4 };
/// At most this many workers are woken by one notification: more are wasted
/// wake-ups (bthread's `signal_task` cap).
const MAX_SIGNAL: usize = 2;

/// A busy worker with fds registered polls them (without blocking) every
/// this many tasks it runs, as tokio's workers do every 61.
const POLL_EVERY: u32 = 61;

/// A worker's park state (one `AtomicU8` per worker, see [`ParkStates`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum ParkState {
    /// Running, or looking for work.
    Awake = 0,
    /// On its lot or in its poller, or about to be.
    Parked = 1,
    /// Parked, and picked by a producer to go and search: counted as a
    /// searcher on its behalf.
    Notified = 2,
}

impl ParkState {
    fn from_word(w: u8) -> Self {
        match w {
            0 => ParkState::Awake,
            1 => ParkState::Parked,
            2 => ParkState::Notified,
            _ => unreachable!("a park state is 0, 1 or 2, not {w}"),
        }
    }
}

/// Every worker's [`ParkState`], each one atomic byte.
#[derive(Debug)]
struct ParkStates(Box<[AtomicU8]>);

impl ParkStates {
    fn new(workers: usize) -> Self {
        ParkStates(
            (0..workers)
                .map(|_| AtomicU8::new(ParkState::Awake as u8))
                .collect(),
        )
    }

    fn load(&self, w: usize) -> ParkState {
        ParkState::from_word(self.0[w].load(Relaxed))
    }

    fn store(&self, w: usize, s: ParkState) {
        self.0[w].store(s as u8, Relaxed);
    }

    /// Moves `w` from `Parked` to `Notified`; whether this call did.
    fn notify(&self, w: usize) -> bool {
        self.0[w]
            .compare_exchange(
                ParkState::Parked as u8,
                ParkState::Notified as u8,
                SeqCst,
                Relaxed,
            )
            .is_ok()
    }

    /// Sets `w` `Awake` (SeqCst) and returns its state before.
    fn wake(&self, w: usize) -> ParkState {
        ParkState::from_word(self.0[w].swap(ParkState::Awake as u8, SeqCst))
    }
}

/// A worker as the idle protocol sees it: where its work comes from, and
/// how it runs what it found. See [`Idle::work`].
pub(crate) trait IdleWorker {
    type Task;
    /// The worker's index in its runtime.
    fn index(&self) -> usize;
    /// Whether its runtime is stopping.
    fn stopping(&self) -> bool;
    /// Work of its own, if any (no stealing).
    fn next_local(&self) -> Option<Self::Task>;
    /// Nothing local: looks elsewhere (steals, spins, ends its own due
    /// sleeps), and says what next.
    fn look(&self) -> Look<Self::Task>;
    /// The last look of a worker about to park (after it published that it
    /// parks: see the module docs).
    fn last_look(&self) -> Option<Self::Task>;
    /// After a fruitless last look: when to look again even if nothing
    /// wakes the worker (its look held back from work it may need to take
    /// later), if ever.
    fn look_again_at(&self) -> Option<Instant>;
    /// Whether stealable work is in sight for another worker.
    fn stealable_in_sight(&self) -> bool;
    /// The worker is about to sleep on its lot or in its poller (for
    /// stats: it counts a park and stops its busy clock).
    fn parking(&self);
    /// The worker is back from that sleep (for stats: it restarts its
    /// busy clock).
    fn unparked(&self);
    /// A search ended: it found `t` (before the worker stops searching).
    fn search_ended(&self, t: &Self::Task);
    /// Runs a task it found.
    fn run(&self, t: Self::Task);
    /// Whether it has fds registered in its poller (then it parks there).
    fn polls(&self) -> bool;
    /// Polls its fds, queuing the tasks their events wake, blocking as
    /// `wait` says (until an event, its waker, or the instant, to park).
    fn poll_io(&self, wait: PollWait);
}

/// What a worker's [`IdleWorker::look`] found.
#[derive(Debug)]
pub(crate) enum Look<T> {
    /// A task to run.
    Found(T),
    /// Nothing yet, but no park now: look again from the top of the loop.
    Again,
    /// Nothing: park, until this instant if any.
    Park(Option<Instant>),
}

/// The idle state of one runtime; see the module docs.
#[derive(Debug)]
pub(crate) struct Idle {
    pub(crate) lots: [ParkingLot; LOTS],
    /// Per worker: `Awake`, `Parked` or `Notified`.
    states: ParkStates,
    /// Workers registered so far (`states[..workers]` are in use).
    workers: AtomicUsize,
    /// Workers looking for work, counting notified ones still on their way.
    /// Signed: a notified worker may take its count over a moment before the
    /// notifier adds it; a negative reading only makes producers wake more.
    searching: AtomicIsize,
    parked: AtomicUsize,
    /// Per worker: whether it parks in its poller, and its waker.
    pollers: PollParking,
    /// Threads woken by signals, for stats.
    pub(crate) wakeups: AtomicU64,
}

impl Idle {
    /// The idle state of a runtime of at most `max_workers` workers.
    pub(crate) fn new(max_workers: usize) -> Self {
        Idle {
            lots: Default::default(),
            states: ParkStates::new(max_workers),
            workers: AtomicUsize::new(0),
            searching: AtomicIsize::new(0),
            parked: AtomicUsize::new(0),
            pollers: PollParking::new(max_workers),
            wakeups: AtomicU64::new(0),
        }
    }

    /// Gives worker `w` a poller, woken by `waker`; before any of its fds
    /// is registered.
    pub(crate) fn set_waker(&self, w: usize, waker: Box<dyn PollWaker>) {
        self.pollers.set_waker(w, waker);
    }

    /// Registers worker `workers()`; call before it starts.
    pub(crate) fn add_worker(&self) {
        self.workers.fetch_add(1, SeqCst);
    }

    /// The lot worker `w` parks on.
    fn lot_of(w: usize) -> usize {
        w % LOTS
    }

    /// The mask worker `w` waits on its lot with: a bit none of the lot's
    /// next 31 workers has.
    fn mask_of(w: usize) -> u32 {
        1 << ((w / LOTS) % 32)
    }

    /// A worker starts looking for work.
    fn start_searching(&self) {
        self.searching.fetch_add(1, SeqCst);
    }

    /// A searching worker found work. If it was the last searcher and
    /// `more` says stealable work is still in sight, it wakes another, so
    /// that a burst of spawns, whose producers skipped the wake-up because
    /// somebody was searching, is still spread. (Without `more`, every wake
    /// of a parked worker for one pinned task would wake a second worker
    /// for nothing.)
    fn found_work(&self, me: usize, more: impl FnOnce() -> bool) {
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
    fn stop_searching(&self) {
        self.searching.fetch_sub(1, SeqCst);
    }

    /// Called after pushing stealable work; `from` is the pushing worker
    /// (any index from a plain thread), where the search for a parked
    /// worker starts.
    #[inline]
    pub(crate) fn notify_work(&self, from: usize) {
        fence(SeqCst);
        self.notify_work_fenced(from);
    }

    /// [`notify_work`](Self::notify_work) after its fence.
    #[inline]
    fn notify_work_fenced(&self, from: usize) {
        if self.searching.load(Relaxed) > 0 || self.parked.load(Relaxed) == 0 {
            return;
        }
        self.signal_task(1, from);
    }

    /// Wakes up to `n` (at most [`MAX_SIGNAL`]) parked workers, each made a
    /// searcher; see the module docs.
    fn signal_task(&self, n: usize, from: usize) {
        let n = n.min(MAX_SIGNAL);
        let workers = self.workers.load(Relaxed);
        let mut picked = 0;
        for i in 1..=workers {
            if picked == n {
                break;
            }
            let w = (from + i) % workers;
            if self.states.load(w) == ParkState::Parked && self.states.notify(w) {
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
        let mut woken = self.lots[Self::lot_of(w)].signal_masked(u32::MAX, Self::mask_of(w));
        // The lot's state moved (a SeqCst RMW): now look for the worker in
        // its poller (the module docs' handshake).
        if self.pollers.unpark(w) {
            woken += 1;
        }
        if woken > 0 {
            self.wakeups.fetch_add(woken as u64, Relaxed);
        }
    }

    /// Called after pushing a new task into worker `w`'s inbox. A parked
    /// `w` is picked as [`signal_task`](Self::signal_task) picks a worker
    /// (`Notified`, counted as searching on its behalf), so the spawns that
    /// follow while it wakes up make no syscall; a `w` already notified is
    /// on its way. For an awake `w`, a searcher is made sure of, as for any
    /// new task ([`notify_work`](Self::notify_work)): `w` may be about to
    /// start a long task, and the searcher takes the new one if that run
    /// holds `w` long (`TaskGroup::steal`'s patience).
    #[inline]
    pub(crate) fn notify_inbox(&self, w: usize) {
        fence(SeqCst);
        match self.states.load(w) {
            ParkState::Parked => {
                if self.states.notify(w) {
                    self.searching.fetch_add(1, SeqCst);
                    self.signal_worker(w);
                }
            }
            ParkState::Notified => {}
            ParkState::Awake => self.notify_work_fenced(w),
        }
    }

    /// Whether worker `w` is awake (not parked, nor picked and on its way
    /// out of a park).
    pub(crate) fn is_awake(&self, w: usize) -> bool {
        self.states.load(w) == ParkState::Awake
    }

    /// Called after pushing work pinned to worker `w`.
    #[inline]
    pub(crate) fn notify_worker(&self, w: usize) {
        fence(SeqCst);
        if self.states.load(w) != ParkState::Awake {
            self.signal_worker(w);
        }
    }

    /// The worker loop: runs `w`'s work until its runtime stops, searching
    /// and parking as the module docs say. A worker starts as a searcher;
    /// it stops being one when it finds work (`found_work`) or parks, and
    /// becomes one again when it runs out.
    pub(crate) fn work<W: IdleWorker>(&self, w: &W) {
        self.start_searching();
        let mut searching = true;
        // Set from a fruitless look until a task is found: that task is
        // the first after a search.
        let mut idle = false;
        let mut until_poll = POLL_EVERY;
        loop {
            if w.stopping() {
                break;
            }
            until_poll -= 1;
            if until_poll == 0 {
                until_poll = POLL_EVERY;
                if w.polls() {
                    w.poll_io(PollWait::NoWait);
                }
            }
            let task = match w.next_local() {
                Some(t) => Some(t),
                None => {
                    idle = true;
                    self.search(w, &mut searching)
                }
            };
            if let Some(t) = task {
                if idle {
                    idle = false;
                    w.search_ended(&t);
                }
                if searching {
                    searching = false;
                    self.found_work(w.index(), || w.stealable_in_sight());
                }
                w.run(t);
            } else if !searching {
                searching = true;
                self.start_searching();
            }
        }
        if searching {
            self.stop_searching();
        }
    }

    /// One search of [`work`](Self::work): `w`'s look, then a park if it
    /// says so.
    fn search<W: IdleWorker>(&self, w: &W, searching: &mut bool) -> Option<W::Task> {
        match w.look() {
            Look::Found(t) => Some(t),
            Look::Again => None,
            Look::Park(until) => self.park(w, searching, until),
        }
    }

    /// Parks worker `w` on its lot unless its last look finds work (which
    /// is then returned) or its runtime stops; `until` bounds the sleep.
    /// `searching` says whether the worker is a searcher; the worker gives
    /// that up to park, and comes back a searcher if a producer picked it
    /// (see the module docs). Returns the work found. Around the sleep
    /// itself, and only there, `w` is told ([`IdleWorker::parking`],
    /// [`IdleWorker::unparked`]): its stats read the clock there.
    fn park<W: IdleWorker>(
        &self,
        w: &W,
        searching: &mut bool,
        until: Option<Instant>,
    ) -> Option<W::Task> {
        let me = w.index();
        let lot = &self.lots[Self::lot_of(me)];
        // The state is read BEFORE the last look (see ParkingLot's docs).
        let lot_state = lot.state();
        self.states.store(me, ParkState::Parked);
        self.parked.fetch_add(1, SeqCst);
        let mut last = false;
        if *searching {
            *searching = false;
            last = self.searching.fetch_sub(1, SeqCst) == 1;
        }
        fence(SeqCst);
        let found = w.last_look();
        let slept = found.is_none() && !w.stopping();
        let until = match (until, found.is_none().then(|| w.look_again_at()).flatten()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if slept {
            w.parking();
            if w.polls() {
                // Blocks in the poller only if the lot's state has not
                // moved since it was read (the module docs' handshake).
                self.pollers.park(
                    me,
                    || lot.state() == lot_state,
                    || w.poll_io(PollWait::Park(until)),
                );
            } else {
                lot.wait_until_masked(lot_state, until, Self::mask_of(me));
            }
            w.unparked();
        }
        if self.states.wake(me) == ParkState::Notified {
            // A producer counted us as searching: take the count over.
            *searching = true;
        }
        self.parked.fetch_sub(1, SeqCst);
        if found.is_some() {
            // Leaving with work as the last searcher: as in `found_work`
            // (once awake, so that the wake-up is not for ourselves).
            self.after_last_searcher(me, last, || w.stealable_in_sight());
        }
        found
    }

    /// Stops every lot, waking all parked workers for good.
    pub(crate) fn stop(&self) {
        for lot in &self.lots {
            lot.stop();
        }
        self.pollers.unpark_all();
    }
}

#[cfg(all(test, loom))]
#[path = "loom_idle.rs"]
mod loom_idle;
