//! [`TimerThread`]: the handle, the wake-up protocol and the timer thread's
//! loop.
//!
//! # Scheduling and the wake-up protocol
//!
//! `schedule(deadline, f)`:
//!
//! 1. takes a free slot from this thread's cache (no lock), writes the
//!    callback and publishes the armed version ([`crate::slot`]);
//! 2. pushes the entry onto this thread's bucket; the push says whether the
//!    deadline became the bucket's earliest ([`crate::bucket`]);
//! 3. only then takes the global mutex and compares with the global
//!    `nearest_run_time`; only if it is earlier than that too, lowers it and,
//!    if the timer thread has committed to sleep, bumps the `nsignals` futex
//!    word and wakes it.
//!
//! The timer thread's loop is bthread's `TimerThread::run`:
//!
//! ```text
//! loop {
//!     if stopped: break
//!     lock global { nearest = NEVER; sleeping = false }
//!     for each bucket: swap its Vec with our spare one; push the live entries on the heap
//!     while let Some(top) = heap.top {
//!         if top is stale (cancelled, rescheduled): pop it; continue  // never sleep until it
//!         if top is not due: break
//!         if global nearest (atomic mirror) < top: pull again        // something earlier arrived
//!         pop; run it (CAS ARMED -> RUNNING, call, retire or re-arm)
//!     }
//!     next = heap.top or NEVER
//!     lock global {
//!         if stopped: break
//!         if next > nearest: pull again                          // something earlier arrived
//!         nearest = next; sleeping = true; expected = nsignals
//!     }
//!     futex-wait on nsignals while it == expected, until next
//! }
//! drain buckets and heap, dropping (never running) what is pending
//! ```
//!
//! Why no wake-up is lost: an entry that lowered its bucket's nearest time
//! after the timer thread emptied that bucket went on to the global mutex.
//! If it got there before the timer thread's last critical section, it
//! lowered `nearest` and the check `next > nearest` sends the timer thread
//! back to collect it (or `next` is no later than it anyway). If it got there
//! after, it sees `sleeping`, bumps `nsignals` and wakes; the futex wait, which
//! compares the word with `expected` atomically with respect to the wake,
//! returns at once or is woken. An entry that did not lower its bucket's
//! nearest time sits behind one no later than itself that did. Unlike
//! bthread, a scheduler skips the `nsignals` bump and the futex syscall while
//! the timer thread is awake (`sleeping == false`): the thread will reach its
//! critical section and see the lowered `nearest` itself. `tests/loom_timer.rs`
//! checks this protocol.
//!
//! The timer thread wakes about once per distinct earliest deadline, not once
//! per timer, and checks the global nearest time (through an atomic mirror
//! written under the mutex) before each callback rather than locking the
//! mutex per callback as bthread does: a stale read of the mirror only delays
//! the "pull again" to the authoritative check before sleeping.
//!
//! # Precision
//!
//! The timer thread sets its timer slack to `TimerOptions::timer_slack` (1 ns
//! by default) with `prctl(PR_SET_TIMERSLACK)`. Linux's default slack of 50 µs
//! is what makes a futex timeout late by 50-60 µs (the figure the bthread
//! notes quote). Waking from a timed futex wait still takes tens of
//! microseconds on a VM, so the thread also wakes `TimerOptions::spin` (50 µs)
//! before a deadline and busy-waits the rest, within a budget of 5 % of one
//! core ([`SpinBudget`]); docs/timer.md has the measurements.
//!
//! # Stopping
//!
//! [`TimerThread::stop_and_join`] sets a `stopped` flag in every bucket,
//! under that bucket's lock, then the global `stopped` flag, then bumps
//! `nsignals` under the global mutex and wakes the thread. A concurrent
//! `schedule` therefore either finds its bucket stopped (and fails with
//! [`TimerError::Stopped`], dropping its callback) or pushed its entry before,
//! and the timer thread, which exits only after seeing the global flag, finds
//! it in its final drain. The timer thread checks the flag before every
//! callback and, under the global mutex, before sleeping (the lost wake-up at
//! shutdown of brpc PR #2986 cannot happen). On exit it retires every pending
//! timer (`ARMED -> IDLE`, so a racing `unschedule` answers `NotFound`) and
//! drops its callback without running it.

use crate::bucket::{self, Bucket, FastMod, Stopped};
use crate::callback::Callback;
use crate::clock::{self, NEVER};
use crate::heap::TimerHeap;
use crate::loom::{lock, thread, AtomicBool, AtomicU64, Futex, Mutex, Ordering};
use crate::pool::{self, SlotPool};
use crate::slot::{Cancel, Entry, PrefetchHint, Slot, TimerId};
use crate::stats::{TimerCounters, TimerStats};
use std::any::Any;
use std::fmt;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest accepted [`TimerOptions::num_buckets`].
pub const MAX_BUCKETS: usize = 1024;

/// Configuration of a [`TimerThread`]. Start from `Default::default()` and
/// assign the fields to change (the struct is `#[non_exhaustive]`: it may
/// grow).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TimerOptions {
    /// Number of buckets that scheduling threads spread over, `1..=1024`.
    /// Default 13 (bthread's choice): a few times the number of threads that
    /// schedule concurrently keeps them from contending.
    pub num_buckets: usize,
    /// Name of the timer thread. Must not contain a NUL byte.
    pub name: String,
    /// Timer slack of the timer thread (`prctl(PR_SET_TIMERSLACK)`): how late
    /// the kernel may make its timed sleeps to batch wake-ups. Default 1 ns,
    /// the smallest; 0 is taken as 1 ns too (the kernel would read 0 as its
    /// default, 50 µs). At most 1 s: more would let the kernel hold back
    /// every timer by that much.
    pub timer_slack: Duration,
    /// Wake up this long before a deadline and busy-wait the rest, trading
    /// CPU for precision: waking from a timed futex wait takes tens of
    /// microseconds on a VM even with 1 ns of slack (docs/timer.md has the
    /// measurements). Busy-waiting is budgeted to 5 % of one core, whatever
    /// the load; beyond that the thread simply sleeps until the deadline.
    /// Default 50 µs; 0 disables it; at most 1 ms (the budget's whole
    /// credit, which a longer spin could never be given).
    pub spin: Duration,
    /// How late a timer may fire so that it fires with others: when another
    /// timer is due within `coalesce` after the earliest one, the thread
    /// sleeps until the earliest one's deadline plus `coalesce` (without
    /// busy-waiting) and fires every timer due by then at once; a timer
    /// scheduled into that window waits for its end too, without waking
    /// the thread. A lone timer still fires at its deadline. So dense
    /// timers cost one wake-up per `coalesce`, not one each, and none fires
    /// early. Default 250 µs; 0 fires every timer at its own deadline; at
    /// most 1 s.
    pub coalesce: Duration,
}

impl Default for TimerOptions {
    fn default() -> Self {
        TimerOptions {
            num_buckets: 13,
            name: "spindle-timer".to_owned(),
            timer_slack: Duration::from_nanos(1),
            spin: Duration::from_micros(50),
            coalesce: DEFAULT_COALESCE,
        }
    }
}

impl TimerOptions {
    fn validate(&self) -> Result<(), TimerError> {
        if self.num_buckets == 0 || self.num_buckets > MAX_BUCKETS {
            return Err(TimerError::InvalidOptions(format!(
                "num_buckets must be in 1..={MAX_BUCKETS}, got {}",
                self.num_buckets
            )));
        }
        if self.timer_slack > MAX_TIMER_SLACK {
            return Err(TimerError::InvalidOptions(format!(
                "timer_slack must be at most {MAX_TIMER_SLACK:?}, got {:?}",
                self.timer_slack
            )));
        }
        if self.spin > MAX_SPIN {
            return Err(TimerError::InvalidOptions(format!(
                "spin must be at most {MAX_SPIN:?}, got {:?}",
                self.spin
            )));
        }
        if self.coalesce > MAX_COALESCE {
            return Err(TimerError::InvalidOptions(format!(
                "coalesce must be at most {MAX_COALESCE:?}, got {:?}",
                self.coalesce
            )));
        }
        if self.name.contains('\0') {
            return Err(TimerError::InvalidOptions(
                "the thread name must not contain a NUL byte".to_owned(),
            ));
        }
        Ok(())
    }
}

/// The default [`TimerOptions::coalesce`].
pub const DEFAULT_COALESCE: Duration = Duration::from_micros(250);
/// The largest [`TimerOptions::coalesce`].
const MAX_COALESCE: Duration = Duration::from_secs(1);
/// The largest [`TimerOptions::timer_slack`].
const MAX_TIMER_SLACK: Duration = Duration::from_secs(1);
/// The largest [`TimerOptions::spin`]: the spin budget's credit.
const MAX_SPIN: Duration = Duration::from_nanos(SPIN_CREDIT_MAX);

/// The answer of [`TimerThread::unschedule`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unschedule {
    /// The timer was pending and is now cancelled: its callback will never
    /// run and has been dropped.
    Removed,
    /// The callback is running right now (possibly on the calling thread: a
    /// callback may unschedule itself). A periodic timer will not run again.
    Running,
    /// No such timer: it already ran, was cancelled, or the id is stale or
    /// forged.
    NotFound,
}

/// Errors of [`TimerThread`] operations.
#[derive(Debug)]
#[non_exhaustive]
pub enum TimerError {
    /// The timer thread has been stopped: nothing can be scheduled any more.
    Stopped,
    /// `reschedule` of a timer that is not pending: it has fired, is running,
    /// was cancelled, or the id is stale or forged.
    NotPending,
    /// `schedule_periodic` with a zero period.
    InvalidPeriod,
    /// Bad [`TimerOptions`]; the message says which field and why.
    InvalidOptions(String),
    /// Every one of the 2^32 - 256 slot indices is in use.
    Exhausted,
    /// The OS refused to create the timer thread.
    Spawn(io::Error),
}

impl fmt::Display for TimerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimerError::Stopped => f.write_str("the timer thread has been stopped"),
            TimerError::NotPending => f.write_str(
                "the timer is not pending (it fired, is running, was cancelled, or the id is stale)",
            ),
            TimerError::InvalidPeriod => f.write_str("the period of a periodic timer must not be zero"),
            TimerError::InvalidOptions(why) => write!(f, "invalid timer options: {why}"),
            TimerError::Exhausted => f.write_str("too many timers: every slot index is in use"),
            TimerError::Spawn(e) => write!(f, "could not spawn the timer thread: {e}"),
        }
    }
}

impl std::error::Error for TimerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TimerError::Spawn(e) => Some(e),
            _ => None,
        }
    }
}

/// A thread that runs callbacks at deadlines; see the [crate docs](crate).
///
/// Dropping a `TimerThread` stops it ([`stop_and_join`](Self::stop_and_join)).
pub struct TimerThread {
    shared: Arc<Shared>,
    pool: Arc<SlotPool>,
    /// Taken by the first `stop_and_join`, which joins while holding the
    /// mutex, so a concurrent second call returns only after the join.
    handle: Mutex<Option<thread::JoinHandle<()>>>,
    /// To recognize a `stop_and_join` from inside a callback, which must not
    /// join its own thread.
    thread_id: thread::ThreadId,
}

/// The global mutex's data.
#[derive(Debug)]
struct Global {
    /// The earliest deadline the timer thread is known to be waiting for, or
    /// that a scheduler has announced since it last collected.
    nearest_run_time: u64,
    /// The timer thread has read `expected` and is about to wait (or waits)
    /// on `nsignals`: a scheduler that lowers `nearest_run_time` must wake it.
    sleeping: bool,
}

/// State shared by the handle, the schedulers and the timer thread.
struct Shared {
    buckets: Box<[Bucket]>,
    /// `% buckets.len()`, without a division.
    bucket_of: FastMod,
    global: Mutex<Global>,
    /// Mirror of `global.nearest_run_time`, written under the mutex, read
    /// without it by the timer thread before each callback.
    nearest: AtomicU64,
    /// Bumped to wake the timer thread; the futex word it sleeps on.
    nsignals: Futex,
    /// Set by `stop` after every bucket's flag.
    stopped: AtomicBool,
    counters: TimerCounters,
    /// Timers retired by a `reschedule` that found the timer thread stopped.
    dropped: AtomicU64,
    name: String,
    slack_ns: u64,
}

impl Shared {
    /// Tells the timer thread about a deadline that became its bucket's
    /// earliest (step 3 of the module docs).
    #[inline]
    fn signal_earlier(&self, deadline: u64) {
        let wake = {
            let mut g = lock(&self.global);
            if deadline >= g.nearest_run_time {
                return;
            }
            g.nearest_run_time = deadline;
            self.nearest.store(deadline, Ordering::Relaxed);
            let wake = g.sleeping;
            if wake {
                g.sleeping = false;
                // Under the mutex, which orders it against the timer thread's
                // read of `expected`.
                self.nsignals.word().fetch_add(1, Ordering::Relaxed);
            }
            wake
        };
        if wake {
            self.nsignals.wake(1);
        }
    }

    /// See "Stopping" in the module docs. Idempotent.
    fn stop(&self) {
        for bucket in self.buckets.iter() {
            bucket.stop();
        }
        self.stopped.store(true, Ordering::Release);
        {
            let mut g = lock(&self.global);
            g.sleeping = false;
            self.nsignals.word().fetch_add(1, Ordering::Relaxed);
        }
        self.nsignals.wake(1);
    }
}

/// Picks this thread's bucket: threads are numbered in the order they first
/// schedule, so the first `num_buckets` threads get a bucket each (a hash of
/// the thread id, as in bthread, lets two threads collide).
#[inline]
fn bucket_hint() -> u32 {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    std::thread_local! {
        static HINT: Cell<u32> = const { Cell::new(u32::MAX) };
    }
    HINT.try_with(|h| {
        let hint = h.get();
        if hint != u32::MAX {
            return hint;
        }
        // Masked so that it never equals the "unset" marker.
        let hint = NEXT.fetch_add(1, Relaxed) & (u32::MAX >> 1);
        h.set(hint);
        hint
    })
    .unwrap_or(0)
}

/// The process-wide timer thread ([`TimerThread::global`]), once started.
#[cfg(not(loom))]
static GLOBAL: std::sync::OnceLock<TimerThread> = std::sync::OnceLock::new();

impl TimerThread {
    /// Starts a timer thread. Bad options are an error, never a panic.
    pub fn start(options: TimerOptions) -> Result<TimerThread, TimerError> {
        options.validate()?;
        let shared = Arc::new(Shared {
            buckets: (0..options.num_buckets).map(|_| Bucket::new()).collect(),
            // `validate` bounds it by MAX_BUCKETS.
            bucket_of: FastMod::new(options.num_buckets as u32),
            global: Mutex::new(Global {
                nearest_run_time: NEVER,
                sleeping: false,
            }),
            nearest: AtomicU64::new(NEVER),
            nsignals: Futex::new(0),
            stopped: AtomicBool::new(false),
            counters: TimerCounters::new(),
            dropped: AtomicU64::new(0),
            name: options.name.clone(),
            slack_ns: clock::duration_ns(options.timer_slack),
        });
        let pool = Arc::new(SlotPool::new());
        let runner = Runner {
            shared: shared.clone(),
            pool: pool.clone(),
            heap: TimerHeap::new(),
            spares: (0..options.num_buckets)
                .map(|_| bucket::new_entries())
                .collect(),
            awake_since: clock::now_ns(),
            spin: SpinBudget::new(clock::duration_ns(options.spin), clock::now_ns()),
            coalesce: clock::duration_ns(options.coalesce),
        };
        let handle = thread::Builder::new()
            .name(options.name)
            .spawn(move || runner.run())
            .map_err(TimerError::Spawn)?;
        Ok(TimerThread {
            thread_id: handle.thread().id(),
            shared,
            pool,
            handle: Mutex::new(Some(handle)),
        })
    }

    /// The process-wide timer thread, started with default options on first
    /// use. It is never stopped unless someone calls
    /// [`stop_and_join`](Self::stop_and_join) on it.
    ///
    /// # Panics
    /// If the OS cannot create the thread on first use;
    /// [`try_global`](Self::try_global) returns that error instead.
    #[cfg(not(loom))]
    #[inline]
    pub fn global() -> &'static TimerThread {
        // The fast path is one load: every timed wait of the runtime asks.
        match GLOBAL.get() {
            Some(timer) => timer,
            None => Self::start_global().unwrap_or_else(|e| {
                panic!("spindle-timer: cannot start the global timer thread: {e}")
            }),
        }
    }

    /// The process-wide timer thread, as [`global`](Self::global), or the
    /// OS's refusal to create it. A failed start is not remembered: the next
    /// call tries again.
    #[cfg(not(loom))]
    #[inline]
    pub fn try_global() -> Result<&'static TimerThread, TimerError> {
        match GLOBAL.get() {
            Some(timer) => Ok(timer),
            None => Self::start_global(),
        }
    }

    /// Starts the process-wide timer thread with `options` instead of the
    /// defaults (a longer [`TimerOptions::coalesce`], say, for a server
    /// with many timers, or none for one that wants every sleep at its
    /// deadline). Call it before anything uses the global timer (the first
    /// runtime built, the first sleep): once it has started,
    /// `configure_global` fails with [`TimerError::InvalidOptions`] and
    /// changes nothing; bad options fail the same way.
    #[cfg(not(loom))]
    pub fn configure_global(options: TimerOptions) -> Result<&'static TimerThread, TimerError> {
        let (timer, started) = Self::start_global_with(options)?;
        if started {
            Ok(timer)
        } else {
            Err(TimerError::InvalidOptions(
                "the global timer thread has started already: configure it before its first use"
                    .to_owned(),
            ))
        }
    }

    /// Starts the global timer thread, unless another caller has.
    #[cfg(not(loom))]
    #[cold]
    #[inline(never)]
    fn start_global() -> Result<&'static TimerThread, TimerError> {
        Self::start_global_with(TimerOptions::default()).map(|(timer, _)| timer)
    }

    /// Starts the global timer thread with `options`, unless another caller
    /// has; says whether this call started it.
    #[cfg(not(loom))]
    fn start_global_with(
        options: TimerOptions,
    ) -> Result<(&'static TimerThread, bool), TimerError> {
        static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        // One starter at a time, so that a loser does not start (and then
        // drop) a second thread. Nothing is left poisoned: the guard is
        // only held across `start`, which returns its failures.
        let _starting = STARTING.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(timer) = GLOBAL.get() {
            return Ok((timer, false));
        }
        let timer = TimerThread::start(options)?;
        Ok((GLOBAL.get_or_init(|| timer), true))
    }

    /// Runs `f` on the timer thread at `deadline` (at once if it has passed).
    ///
    /// Allocation-free when `f` captures at most three words (with an
    /// alignment of at most 8); larger closures are boxed. `f` runs on the
    /// timer thread and delays every other timer while it runs: keep it short.
    /// A deadline too far in the future to represent (about 584 years) never
    /// comes, but the timer can still be cancelled or rescheduled.
    ///
    /// Fails with [`TimerError::Stopped`] once the thread is stopping (`f` is
    /// dropped).
    ///
    /// ```
    /// use spindle_timer::{TimerOptions, TimerThread};
    /// use std::time::{Duration, Instant};
    ///
    /// let timer = TimerThread::start(TimerOptions::default()).unwrap();
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// timer.schedule(Instant::now() + Duration::from_millis(1), move || tx.send(()).unwrap())?;
    /// rx.recv().unwrap();
    /// # Ok::<(), spindle_timer::TimerError>(())
    /// ```
    ///
    /// Callbacks cross to the timer thread, so they must be `Send`:
    ///
    /// ```compile_fail,E0277
    /// use spindle_timer::{TimerOptions, TimerThread};
    /// let timer = TimerThread::start(TimerOptions::default()).unwrap();
    /// let rc = std::rc::Rc::new(1);
    /// timer.schedule(std::time::Instant::now(), move || drop(rc));
    /// ```
    ///
    /// and may outlive the caller's stack frame, so they must be `'static`:
    ///
    /// ```compile_fail,E0373
    /// use spindle_timer::{TimerOptions, TimerThread};
    /// let timer = TimerThread::start(TimerOptions::default()).unwrap();
    /// let local = 5;
    /// timer.schedule(std::time::Instant::now(), || println!("{}", &local));
    /// ```
    #[inline]
    pub fn schedule<F>(&self, deadline: Instant, f: F) -> Result<TimerId, TimerError>
    where
        F: FnOnce() + Send + 'static,
    {
        self.arm(
            clock::deadline_ns(deadline),
            0,
            Callback::once(f),
            PrefetchHint::NONE,
        )
    }

    /// [`schedule`](Self::schedule), for a callback that starts by reading
    /// the `len` bytes at `data` (at most 63 cache lines of them count).
    /// When many timers are due together, the timer thread starts loading
    /// those bytes into its cache while the callback before this one runs,
    /// as it does for its own bookkeeping: with a hundred thousand sleeping
    /// tasks woken in a burst, the cache misses on what each callback
    /// touches were a third of the timer thread's time.
    ///
    /// `data` is only a hint: it is never read through, so any address is
    /// safe, and a wrong one costs only the prefetch.
    #[inline]
    pub fn schedule_prefetching<F>(
        &self,
        deadline: Instant,
        data: *const u8,
        len: usize,
        f: F,
    ) -> Result<TimerId, TimerError>
    where
        F: FnOnce() + Send + 'static,
    {
        self.arm(
            clock::deadline_ns(deadline),
            0,
            Callback::once(f),
            PrefetchHint::new(data, len),
        )
    }

    /// Runs `f` at `first`, then every `period` until cancelled.
    ///
    /// A run that ends late skips the periods it missed rather than running
    /// in a burst, and keeps the cadence `first + k * period`. A callback that
    /// panics ends the timer. Cancel with [`unschedule`](Self::unschedule),
    /// also from inside `f`. A zero `period` is [`TimerError::InvalidPeriod`].
    pub fn schedule_periodic<F>(
        &self,
        first: Instant,
        period: Duration,
        f: F,
    ) -> Result<TimerId, TimerError>
    where
        F: FnMut() + Send + 'static,
    {
        if period.is_zero() {
            return Err(TimerError::InvalidPeriod);
        }
        // A period beyond the encoding (584 years) saturates: every run
        // after the first is then beyond it too, and never comes.
        self.arm(
            clock::first_period_ns(first, period),
            clock::duration_ns(period),
            Callback::periodic(f),
            PrefetchHint::NONE,
        )
    }

    #[inline]
    fn arm(
        &self,
        deadline: u64,
        period: u64,
        callback: Callback,
        hint: PrefetchHint,
    ) -> Result<TimerId, TimerError> {
        // A fast refusal; the bucket's flag, read under its lock, decides.
        if self.shared.stopped.load(Ordering::Relaxed) {
            return Err(TimerError::Stopped);
        }
        let index = pool::alloc(&self.pool).map_err(|_| TimerError::Exhausted)?;
        let slot = self.slot(index);
        let (version, stamp) = slot.arm(period, callback, hint);
        let entry = Entry {
            deadline,
            slot: index,
            stamp,
        };
        match self.my_bucket().push(entry, true, &self.pool.table) {
            Ok(earlier) => {
                if earlier {
                    self.shared.signal_earlier(deadline);
                }
                Ok(TimerId::new(version, index))
            }
            Err(Stopped) => {
                // Never published; take it back (unless a forged id beat us
                // to it, in which case its canceller freed it).
                if let Cancel::Removed(callback) = slot.cancel(version) {
                    pool::free(&self.pool, index);
                    drop(callback);
                }
                Err(TimerError::Stopped)
            }
        }
    }

    /// Cancels a timer.
    ///
    /// Never waits for a running callback, so it is safe to call from inside
    /// any callback, including the timer's own; the only lock it may take is
    /// the slot pool's, briefly, once per 32 frees of a thread. `Removed`
    /// means the callback will never run and has already been dropped (on
    /// this thread); the timer's memory is reclaimed at once.
    #[inline]
    pub fn unschedule(&self, id: TimerId) -> Unschedule {
        let Some(slot) = self.pool.table.get(id.slot()) else {
            return Unschedule::NotFound;
        };
        match slot.cancel(id.version()) {
            Cancel::Removed(callback) => {
                pool::free(&self.pool, id.slot());
                self.my_bucket().unscheduled.fetch_add(1, Ordering::Relaxed);
                drop(callback);
                Unschedule::Removed
            }
            Cancel::Running => Unschedule::Running,
            Cancel::NotFound => Unschedule::NotFound,
        }
    }

    /// Moves a pending timer to a new deadline, earlier or later; the id stays
    /// valid. For a periodic timer this sets the next run; the period is kept.
    ///
    /// Linearizes at one compare-and-swap on the timer's slot (bumping its
    /// stamp): if the timer had not started by then, it will run at
    /// `deadline` and not at its old one; if it had (it is running or
    /// finished) or was cancelled, this fails with
    /// [`TimerError::NotPending`] and changes nothing. Fails with
    /// [`TimerError::Stopped`] once the thread is stopping; a timer that was
    /// being rescheduled as the thread stopped is dropped, like every other
    /// pending timer.
    pub fn reschedule(&self, id: TimerId, deadline: Instant) -> Result<(), TimerError> {
        if self.shared.stopped.load(Ordering::Relaxed) {
            return Err(TimerError::Stopped);
        }
        let deadline = clock::deadline_ns(deadline);
        let index = id.slot();
        let slot = self.pool.table.get(index).ok_or(TimerError::NotPending)?;
        let stamp = slot.restamp(id.version()).ok_or(TimerError::NotPending)?;
        let entry = Entry {
            deadline,
            slot: index,
            stamp,
        };
        match self.my_bucket().push(entry, false, &self.pool.table) {
            Ok(earlier) => {
                if earlier {
                    self.shared.signal_earlier(deadline);
                }
                Ok(())
            }
            Err(Stopped) => {
                // The old entry is stale now, so the timer thread's final
                // drain will not retire this timer: we do.
                if let Cancel::Removed(callback) = slot.cancel(id.version()) {
                    pool::free(&self.pool, index);
                    self.shared.dropped.fetch_add(1, Ordering::Relaxed);
                    drop(callback);
                }
                Err(TimerError::Stopped)
            }
        }
    }

    /// A snapshot of the counters; see [`TimerStats`].
    pub fn stats(&self) -> TimerStats {
        let mut stats = TimerStats::default();
        // Retirements first, then what they retire, so that `pending` does not
        // come out negative when read under load.
        let retired = self.shared.counters.read_into(&mut stats);
        let dropped = self.shared.dropped.load(Ordering::Relaxed);
        let unscheduled: u64 = self
            .shared
            .buckets
            .iter()
            .map(|b| b.unscheduled.load(Ordering::Relaxed))
            .sum();
        for b in self.shared.buckets.iter() {
            stats.scheduled += b.scheduled();
            stats.queued += b.len() as u64;
        }
        stats.unscheduled = unscheduled;
        stats.pending = stats
            .scheduled
            .saturating_sub(unscheduled + retired + dropped);
        stats.slots = self.pool.capacity();
        stats
    }

    /// Stops the timer thread and waits for it to exit. Pending timers are
    /// dropped without running; none runs after this returns, and later
    /// `schedule` calls fail with [`TimerError::Stopped`].
    ///
    /// Idempotent, and safe to call from several threads at once: every call
    /// returns only after the thread has exited. Called from a callback on
    /// the timer thread itself, it stops the thread (which exits once the
    /// callback returns) without waiting for it.
    pub fn stop_and_join(&self) {
        self.shared.stop();
        if thread::current().id() == self.thread_id {
            return;
        }
        let mut handle = lock(&self.handle);
        if let Some(h) = handle.take() {
            // The thread catches every panic of user code; an error here could
            // only come from our own code, and the thread is gone either way.
            let _ = h.join();
        }
    }

    #[inline]
    fn my_bucket(&self) -> &Bucket {
        &self.shared.buckets[self.shared.bucket_of.rem(bucket_hint())]
    }

    #[inline]
    fn slot(&self, index: u32) -> &Slot {
        match self.pool.table.get(index) {
            Some(slot) => slot,
            None => unreachable!("the pool handed out slot {index}, which does not exist"),
        }
    }
}

impl Drop for TimerThread {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

impl fmt::Debug for TimerThread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerThread")
            .field("name", &self.shared.name)
            .field("num_buckets", &self.shared.buckets.len())
            .field("stopped", &self.shared.stopped.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// What [`Runner::run_due`] found.
enum Due {
    /// Nothing more is due; the earliest deadline is the first (or
    /// `NEVER`), and the second says when to wake for it, if later: the
    /// end of a coalescing window ([`Runner::coalesced`]).
    Next(u64, Option<u64>),
    /// Something earlier than the heap's top arrived: collect again.
    PullAgain,
    /// The thread is stopping.
    Stop,
}

/// How many entries ahead `collect` prefetches slots.
const PREFETCH_AHEAD: usize = 8;

/// Share of the timer thread's time that busy-waiting may take: 1/20, i.e.
/// 5 % of one core, however many timers fire.
const SPIN_SHARE: u64 = 20;
/// Most busy-wait credit that can be saved up (for a burst of deadlines
/// after a quiet spell): 1 ms, twenty spins of 50 µs.
const SPIN_CREDIT_MAX: u64 = 1_000_000;

/// A token bucket of busy-wait time.
///
/// Spinning before every deadline would burn a core when timers fire more
/// often than every `spin`; without a budget the precision option would be a
/// CPU hazard. Credit accrues at `1 / SPIN_SHARE` of elapsed time, so sparse,
/// latency-sensitive timers get the spin while a dense stream of deadlines
/// costs at most 5 % of a core and otherwise falls back to plain timed waits.
#[derive(Debug)]
struct SpinBudget {
    /// How long before a deadline to wake up; 0 disables spinning.
    spin: u64,
    /// Nanoseconds of busy-waiting available.
    credit: u64,
    /// When `credit` was last brought up to date.
    at: u64,
}

impl SpinBudget {
    fn new(spin: u64, now: u64) -> Self {
        SpinBudget {
            spin,
            credit: SPIN_CREDIT_MAX,
            at: now,
        }
    }

    fn credit_at(&self, t: u64) -> u64 {
        let earned = t.saturating_sub(self.at) / SPIN_SHARE;
        self.credit.saturating_add(earned).min(SPIN_CREDIT_MAX)
    }

    /// How long before `deadline` to wake up: `spin` if the credit will
    /// cover a spin then, else 0 (sleep until the deadline itself).
    fn lead(&self, now: u64, deadline: u64) -> u64 {
        if self.spin == 0 || deadline == NEVER {
            return 0;
        }
        let wake = deadline.saturating_sub(self.spin).max(now);
        if self.credit_at(wake) >= self.spin {
            self.spin
        } else {
            0
        }
    }

    /// Whether to busy-wait the `left` nanoseconds until a deadline now;
    /// charges them if so.
    fn take(&mut self, now: u64, left: u64) -> bool {
        if left > self.spin {
            return false;
        }
        self.credit = self.credit_at(now);
        self.at = now;
        if self.credit < left {
            return false;
        }
        self.credit -= left;
        true
    }
}

/// The timer thread's own state.
struct Runner {
    shared: Arc<Shared>,
    pool: Arc<SlotPool>,
    heap: TimerHeap,
    /// One empty `Vec` per bucket, swapped with the bucket's when collecting.
    /// Per bucket, so that each bucket alternates between two `Vec`s that
    /// both keep the capacity it needs: a single spare passed from bucket to
    /// bucket would hand a busy bucket the small `Vec` of an idle one, and its
    /// schedulers would reallocate after every collection.
    spares: Vec<Vec<Entry>>,
    /// When the thread last woke up, for the busy time.
    awake_since: u64,
    spin: SpinBudget,
    /// [`TimerOptions::coalesce`], in ns.
    coalesce: u64,
}

impl Runner {
    fn run(mut self) {
        // Callbacks' panics are caught where they run, and ours would be
        // bugs; but a `tracing` subscriber may panic inside one of our
        // events. The thread must not then die while `schedule` goes on
        // answering `Ok` for timers that never fire: it stops for good
        // (`schedule` fails from then on, and timed waits end at once) and
        // drops what is pending.
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| self.serve())) {
            self.shared.stop();
            let name = &self.shared.name;
            contained(
                || tracing::error!(%name, "timer thread panicked: stopped, its timers dropped"),
            );
            std::mem::forget(payload); // its destructor may panic too
        }
        self.shutdown();
        contained(|| tracing::info!(name = %self.shared.name, "timer thread stopped"));
    }

    /// The timer thread's loop, until it is stopped.
    fn serve(&mut self) {
        set_timer_slack(self.shared.slack_ns);
        contained(|| tracing::info!(name = %self.shared.name, "timer thread started"));
        loop {
            if self.shared.stopped.load(Ordering::Acquire) {
                break;
            }
            self.collect();
            let (next, together) = match self.run_due() {
                Due::Next(next, together) => (next, together),
                Due::PullAgain => continue,
                Due::Stop => break,
            };
            if !self.sleep(next, together) {
                break;
            }
        }
    }

    /// Resets the global nearest time, then moves the live entries of every
    /// bucket to the heap.
    fn collect(&mut self) {
        {
            let mut g = lock(&self.shared.global);
            g.nearest_run_time = NEVER;
            g.sleeping = false;
            self.shared.nearest.store(NEVER, Ordering::Relaxed);
        }
        let table = &self.pool.table;
        for (bucket, spare) in self.shared.buckets.iter().zip(self.spares.iter_mut()) {
            bucket.take(spare);
            for i in 0..spare.len() {
                if let Some(ahead) = spare.get(i + PREFETCH_AHEAD) {
                    table.prefetch(ahead);
                }
                if table.is_live(&spare[i]) {
                    self.heap.push(spare[i]);
                }
            }
            spare.clear();
        }
        self.heap.maybe_compact(table);
    }

    /// Runs every due entry, in deadline order. Stale entries at the top of
    /// the heap are dropped on the way, so the deadline returned (the one the
    /// thread sleeps until) is that of a live timer.
    fn run_due(&mut self) -> Due {
        let mut now = clock::now_ns();
        while let Some(top) = self.heap.peek() {
            if !self.pool.table.is_live(&top) {
                // Cancelled or rescheduled since it was collected: drop it
                // now instead of sleeping until its deadline (bthread wakes up
                // for every cancelled timeout at its deadline; in the RPC
                // pattern that is most of them).
                self.heap.pop();
                continue;
            }
            if top.deadline > now {
                now = clock::now_ns();
                if top.deadline > now {
                    if let Some(together) = self.coalesced(top.deadline) {
                        return Due::Next(top.deadline, Some(together));
                    }
                    if !self.spin.take(now, top.deadline - now) {
                        return Due::Next(top.deadline, None);
                    }
                    if let Some(due) = self.spin_until(top.deadline) {
                        return due;
                    }
                    now = clock::now_ns();
                }
            }
            if self.shared.nearest.load(Ordering::Relaxed) < top.deadline {
                return Due::PullAgain;
            }
            // Acquire, as on every exit path: the final drain must come
            // after `stop` closed the buckets.
            if self.shared.stopped.load(Ordering::Acquire) {
                return Due::Stop;
            }
            self.heap.pop();
            // What the new top's callback reads first loads while this
            // callback runs (reading the hint loads the new top's slot, which
            // was prefetched during the callback before this one), and so do
            // the slots of its children, one of which is the top after it.
            if let Some((next, after)) = self.heap.next_tops().split_first() {
                self.pool.table.prefetch_target(next);
                for e in after {
                    self.pool.table.prefetch(e);
                }
            }
            self.run_entry(top);
        }
        Due::Next(NEVER, None)
    }

    /// When the heap's earliest timer, due at `first`, is not alone: if
    /// another is due within `coalesce` after it (the second earliest is
    /// one of the top's children), the instant to fire them together,
    /// `first + coalesce`.
    fn coalesced(&self, first: u64) -> Option<u64> {
        if self.coalesce == 0 {
            return None;
        }
        let together = first.saturating_add(self.coalesce);
        let tops = self.heap.next_tops();
        tops.get(1..)?
            .iter()
            .any(|e| e.deadline <= together && self.pool.table.is_live(e))
            .then_some(together)
    }

    /// Busy-waits until `deadline`, unless something earlier arrives or the
    /// thread is stopped (then returns what to do instead).
    fn spin_until(&self, deadline: u64) -> Option<Due> {
        loop {
            if self.shared.stopped.load(Ordering::Acquire) {
                return Some(Due::Stop);
            }
            if self.shared.nearest.load(Ordering::Relaxed) < deadline {
                return Some(Due::PullAgain);
            }
            if clock::now_ns() >= deadline {
                return None;
            }
            crate::loom::spin_loop();
        }
    }

    /// Runs the timer of a due entry, if the entry is live.
    fn run_entry(&mut self, entry: Entry) {
        let Some(slot) = self.pool.table.get(entry.slot) else {
            return;
        };
        let Some(version) = slot.start(entry.stamp) else {
            return; // stale: cancelled or rescheduled
        };
        let id = TimerId::new(version, entry.slot);
        // SAFETY: `start` moved the slot to RUNNING: we hold it.
        let (period, mut callback) = unsafe {
            slot.with_payload(|p| {
                (
                    p.period,
                    std::mem::replace(&mut p.callback, Callback::empty()),
                )
            })
        };
        self.shared.counters.triggered();
        let ok = match catch_unwind(AssertUnwindSafe(|| callback.call())) {
            Ok(()) => true,
            Err(payload) => {
                self.report_panic(id, payload);
                false
            }
        };
        if period != 0 && ok {
            let next = clock::next_period(entry.deadline, period, clock::now_ns());
            // SAFETY: still RUNNING or CANCELLING: we hold the slot.
            unsafe { slot.with_payload(|p| p.callback = callback) };
            if let Some(stamp) = slot.rearm(version, entry.stamp) {
                self.heap.push(Entry {
                    deadline: next,
                    slot: entry.slot,
                    stamp,
                });
                return;
            }
            // Cancelled while running: we still hold it (CANCELLING).
            // SAFETY: as above; `rearm` failed, so nothing was handed over.
            callback = unsafe {
                slot.with_payload(|p| std::mem::replace(&mut p.callback, Callback::empty()))
            };
        }
        // Counted before the slot is released, so that whoever sees the timer
        // gone (an `unschedule` answering `NotFound`) also sees it counted.
        self.shared.counters.retired();
        slot.finish(version, entry.stamp);
        pool::free(&self.pool, entry.slot);
        self.drop_callback(id, callback);
    }

    /// Drops a callback (a periodic closure, or one never run) on the timer
    /// thread, catching a panicking destructor.
    fn drop_callback(&self, id: TimerId, callback: Callback) {
        if callback.is_empty() {
            return;
        }
        if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(callback))) {
            self.report_panic(id, payload);
        }
    }

    #[cold]
    fn report_panic(&self, id: TimerId, payload: Box<dyn Any + Send>) {
        self.shared.counters.panicked();
        let message = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("(a panic payload that is not a string)");
        // Contained: the caller still has to release the slot.
        contained(
            || tracing::error!(timer = %id, thread = %self.shared.name, "timer callback panicked: {message}"),
        );
        // Even the payload's destructor may panic; that one is not worth a
        // second report, but it must not take the thread down.
        if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
            std::mem::forget(again);
        }
    }

    /// Sleeps until `next` (or, coalescing, until `together`, without a
    /// spin) or a signal. `next` is what schedulers compare with: only a
    /// timer due before it wakes the thread; one due within a coalescing
    /// window is collected when the window ends. Returns `false` if the
    /// thread must stop.
    fn sleep(&mut self, next: u64, together: Option<u64>) -> bool {
        let expected = {
            let mut g = lock(&self.shared.global);
            // Read under the mutex: `stop` sets the flag before bumping
            // `nsignals` under it, so either we see the flag or our `expected`
            // predates the bump and the wait returns at once.
            if self.shared.stopped.load(Ordering::Acquire) {
                return false;
            }
            if next > g.nearest_run_time {
                return true; // something earlier arrived: collect again
            }
            g.nearest_run_time = next;
            g.sleeping = true;
            self.shared.nearest.store(next, Ordering::Relaxed);
            self.shared.nsignals.word().load(Ordering::Relaxed)
        };
        self.shared.counters.set_heap_len(self.heap.len());
        let now = clock::now_ns();
        self.shared
            .counters
            .busy(now.saturating_sub(self.awake_since));
        let wake_at = clock::instant_of(match together {
            Some(together) => together,
            None => next.saturating_sub(self.spin.lead(now, next)),
        });
        self.shared.nsignals.wait_until(expected, wake_at);
        self.shared.counters.woke();
        self.awake_since = clock::now_ns();
        true
    }

    /// Retires every pending timer without running it.
    fn shutdown(&mut self) {
        let mut spares = std::mem::take(&mut self.spares);
        for (bucket, spare) in self.shared.buckets.iter().zip(spares.iter_mut()) {
            bucket.take(spare);
            for entry in spare.drain(..) {
                self.retire(entry);
            }
        }
        let mut heap = std::mem::replace(&mut self.heap, TimerHeap::new());
        for entry in heap.drain() {
            self.retire(entry);
        }
        self.shared.counters.set_heap_len(0);
    }

    fn retire(&self, entry: Entry) {
        let Some(slot) = self.pool.table.get(entry.slot) else {
            return;
        };
        if let Some((version, callback)) = slot.retire(entry.stamp) {
            pool::free(&self.pool, entry.slot);
            self.shared.counters.retired();
            self.drop_callback(TimerId::new(version, entry.slot), callback);
        }
    }
}

/// Runs `report` (a `tracing` event), containing a panic of the
/// subscriber's: the event is lost, not the timer thread (see
/// `Runner::run`).
fn contained(report: impl FnOnce()) {
    let _ = catch_unwind(AssertUnwindSafe(report));
}

/// Sets the calling thread's timer slack; a failure only costs precision.
#[cfg(not(loom))]
fn set_timer_slack(ns: u64) {
    if let Err(error) = spindle_parking::futex::set_timer_slack(ns) {
        contained(|| tracing::warn!(%error, "could not set the timer slack"));
    }
}

/// Loom has no clock: there is no slack to set.
#[cfg(loom)]
fn set_timer_slack(_ns: u64) {}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn options_are_validated() {
        for n in [0, MAX_BUCKETS + 1, usize::MAX] {
            let r = TimerThread::start(TimerOptions {
                num_buckets: n,
                ..TimerOptions::default()
            });
            assert!(
                matches!(r, Err(TimerError::InvalidOptions(_))),
                "{n} buckets"
            );
        }
        let r = TimerThread::start(TimerOptions {
            name: "a\0b".into(),
            ..TimerOptions::default()
        });
        let e = r.unwrap_err();
        assert!(e.to_string().contains("NUL"), "{e}");
    }

    #[test]
    fn busy_waiting_is_budgeted() {
        let spin = 50_000;
        let mut b = SpinBudget::new(spin, 0);
        // Far from the deadline: sleep, waking `spin` early.
        assert!(!b.take(0, spin + 1));
        assert_eq!(b.lead(0, 10 * spin), spin);
        // The saved-up credit covers a burst of spins, then runs out.
        let burst = SPIN_CREDIT_MAX / spin;
        for _ in 0..burst {
            assert!(b.take(0, spin));
        }
        assert!(!b.take(0, spin));
        assert_eq!(
            b.lead(0, spin),
            0,
            "no credit: sleep until the deadline itself"
        );
        // Credit comes back at 1/SPIN_SHARE of elapsed time.
        let t = spin * SPIN_SHARE;
        assert_eq!(b.lead(0, t + spin), spin, "earned by the time it wakes");
        assert!(b.take(t, spin));
        assert!(!b.take(t, 1));
        // Disabled, or for a deadline that never comes: never.
        assert_eq!(SpinBudget::new(0, 0).lead(0, 1_000_000), 0);
        assert!(!SpinBudget::new(0, 0).take(0, 1));
        assert_eq!(b.lead(0, NEVER), 0);
    }

    #[test]
    fn bucket_hints_are_stable_per_thread_and_distinct_across_threads() {
        let a = bucket_hint();
        assert_eq!(a, bucket_hint());
        let b = std::thread::spawn(bucket_hint).join().unwrap();
        assert_ne!(a, b);
    }
}
