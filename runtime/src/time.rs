//! Sleeping, interrupting and stopping tasks, and deadline scopes.
//!
//! A task's sleep is a wait on a queue of its own that nobody wakes (see
//! `wait/butex.rs`): the timer ends it with `TimedOut` (a normal wake-up, for a
//! sleep), and `interrupt`/`stop` end it early through the same protocol as
//! any other wait. So sleeps, butex waits and interrupts share one set of
//! race rules. On a plain thread a sleep is an OS sleep.
//!
//! A deadline scope ([`with_deadline`]) is a per-task (or, on a plain thread,
//! per-thread) earliest deadline that every blocking call folds into its own
//! (`wait/deadline.rs`).

use crate::error::{NoSuchTask, SleepError, WaitError};
use crate::loom::sync::atomic::Ordering;
use crate::meta::activity::WaitOn;
use crate::meta::wait_queue::WaitPolicy;
use crate::meta::TaskId;
use crate::sched;
use crate::wait::deadline::{effective_deadline, scope_deadline, scoped};
use crate::wait::{self, signal, Signal};
use std::time::{Duration, Instant};

/// Runs `f` with a deadline: every blocking call inside it (sleep, butex
/// wait, mutex lock, condvar and countdown waits) fails with
/// `DeadlineExceeded` once `deadline` passes, including calls that began
/// before it; a join returns `JoinError::DeadlineExceeded` (the task goes
/// on, detached); `Runtime::block_on` is not cut short (its closure runs
/// under the scope instead). Scopes nest, and the earliest deadline wins;
/// the scope ends with `f`, even if `f` panics. The scope is the calling
/// task's (or thread's): tasks spawned inside it do not inherit it. To pass
/// it on, to a spawned task or in a request, read it with
/// [`current_deadline`].
///
/// ```
/// use spindle::{with_deadline, SleepError};
/// use std::time::{Duration, Instant};
///
/// let rt = spindle::Runtime::builder().workers(1).build().unwrap();
/// rt.block_on(|| {
///     // One deadline for a whole call, however many waits it makes.
///     let deadline = Instant::now() + Duration::from_millis(20);
///     let r = with_deadline(deadline, || {
///         spindle::sleep(Duration::from_millis(1))?; // in time
///         assert_eq!(spindle::current_deadline(), Some(deadline));
///         spindle::sleep(Duration::from_secs(60)) // cut short
///     });
///     assert_eq!(r, Err(SleepError::DeadlineExceeded));
///     assert_eq!(spindle::current_deadline(), None); // the scope ended with it
///
///     // Scopes nest, and the earliest deadline wins.
///     let outer = Instant::now() + Duration::from_millis(10);
///     let seen = with_deadline(outer, || {
///         with_deadline(outer + Duration::from_secs(60), spindle::current_deadline)
///     });
///     assert_eq!(seen, Some(outer));
/// });
/// ```
pub fn with_deadline<R>(deadline: Instant, f: impl FnOnce() -> R) -> R {
    let outer = scope_deadline();
    scoped(Some(outer.map_or(deadline, |o| o.min(deadline))), f)
}

/// The deadline of the innermost [`with_deadline`] scope around the caller
/// (the earliest of the enclosing ones), or `None` outside every scope: what
/// an RPC puts in its request, so that the server can drop a call whose
/// caller has given up, or a task passes on to those it spawns.
pub fn current_deadline() -> Option<Instant> {
    scope_deadline()
}

/// Sleeps for `d`; see [`sleep_until`]. `Duration::ZERO` yields.
///
/// ```
/// use std::time::{Duration, Instant};
///
/// let rt = spindle::Runtime::builder().workers(1).build().unwrap();
/// let start = Instant::now();
/// rt.block_on(|| {
///     // 100 tasks sleep 50 ms each on one worker: at once, not in turn.
///     let sleepers: Vec<_> = (0..100)
///         .map(|_| spindle::spawn(|| spindle::sleep(Duration::from_millis(50))))
///         .collect();
///     for s in sleepers {
///         s.join().unwrap().unwrap();
///     }
/// });
/// assert!(start.elapsed() >= Duration::from_millis(50));
/// assert!(start.elapsed() < Duration::from_secs(5));
/// ```
pub fn sleep(d: Duration) -> Result<(), SleepError> {
    match Instant::now().checked_add(d) {
        Some(deadline) => sleep_until(deadline),
        None => sleep_forever(),
    }
}

/// Sleeps for `micros` microseconds (bthread_usleep); see [`sleep_until`].
pub fn usleep(micros: u64) -> Result<(), SleepError> {
    sleep(Duration::from_micros(micros))
}

/// Sleeps until `deadline`. Inside a task only the task sleeps: the worker
/// runs others, and at the deadline the shared timer thread queues the task
/// again, or the worker itself runs it if it is idle by then (polling
/// through the last [`Builder::sleep_spin`](crate::Builder::sleep_spin)
/// before it). On a plain thread this is an OS sleep.
///
/// A deadline in the past yields (as bthread's `usleep(0)`: it neither
/// fails with nor consumes a pending interrupt, which ends the next sleep
/// that blocks). Errors: `Stopped` at once, every time, once the task is
/// stopped; `Interrupted` if interrupted while asleep (or an interrupt was
/// pending when it began); `DeadlineExceeded` when an enclosing scope's
/// deadline comes first.
pub fn sleep_until(deadline: Instant) -> Result<(), SleepError> {
    sleep_inner(Some(deadline))
}

fn sleep_forever() -> Result<(), SleepError> {
    sleep_inner(None)
}

fn sleep_inner(deadline: Option<Instant>) -> Result<(), SleepError> {
    let task = sched::current_task();
    if task.is_some_and(|t| t.is_stopped()) {
        return Err(SleepError::Stopped);
    }
    // A past deadline, in a task or on a thread: a yield, then the scope's
    // verdict.
    if deadline.is_some_and(|d| d <= Instant::now()) {
        crate::yield_now();
        return match scope_deadline() {
            Some(s) if s <= Instant::now() => Err(SleepError::DeadlineExceeded),
            _ => Ok(()),
        };
    }
    let Some(t) = task else {
        return sleep_thread(deadline);
    };
    let sleep = t.sleep_queue();
    let expected = sleep.value().load(Ordering::Relaxed);
    match wait::wait(
        sleep,
        expected,
        deadline,
        WaitPolicy::Interruptible,
        WaitOn::Sleep,
    ) {
        // Nobody wakes the sleep queue: a wake-up is spurious; treat it as a
        // short sleep rather than loop (callers of sleep tolerate early wakes
        // no better than late ones, and none happen).
        Ok(()) | Err(WaitError::TimedOut) | Err(WaitError::WouldBlock) => Ok(()),
        Err(WaitError::Interrupted) => Err(SleepError::Interrupted),
        Err(WaitError::Stopped) => Err(SleepError::Stopped),
        Err(WaitError::DeadlineExceeded) => Err(SleepError::DeadlineExceeded),
    }
}

fn sleep_thread(deadline: Option<Instant>) -> Result<(), SleepError> {
    let (until, by_scope) = effective_deadline(deadline);
    match until {
        None => loop {
            std::thread::park();
        },
        Some(u) => {
            let now = Instant::now();
            if u > now {
                std::thread::sleep(u - now);
            }
        }
    }
    if by_scope {
        Err(SleepError::DeadlineExceeded)
    } else {
        Ok(())
    }
}

/// Wakes task `id` out of its interruptible wait with `Interrupted`: a
/// sleep, a [`Butex::wait`](crate::Butex::wait), a socket or fd wait, a
/// channel's send or receive ([`sync::mpsc`](crate::sync::mpsc),
/// [`sync::oneshot`](crate::sync::oneshot)) or a
/// [`Semaphore`](crate::sync::Semaphore) acquire. If it is not in one, the
/// interrupt is remembered and ends its next interruptible wait that
/// blocks, at once. Interrupts are not counted: several that land before
/// that wait end it alone (as in bthread), and an interrupt that finds the
/// wait already ended (woken, timed out) waits for the next one. Joins, the
/// end of a [`scope`](crate::scope), and the waits of the locks and
/// [`Barrier`](crate::sync::Barrier) (mutex, condvar, rwlock, once-cell,
/// countdown) are never interrupted: an interrupt that finds the task in
/// one stays pending for the next interruptible wait. A finished or
/// unknown id is `NoSuchTask`.
///
/// ```
/// use spindle::SleepError;
/// use std::time::Duration;
///
/// let rt = spindle::Runtime::builder().workers(1).build().unwrap();
/// rt.block_on(|| {
///     let sleeper = spindle::spawn(|| spindle::sleep(Duration::from_secs(60)));
///     let id = sleeper.id();
///     // Ends the sleep at once (had the task not begun it yet, the
///     // interrupt would end it as soon as it did).
///     spindle::interrupt(id).unwrap();
///     assert_eq!(sleeper.join().unwrap(), Err(SleepError::Interrupted));
///     // The task has ended: nothing is left to interrupt.
///     assert!(spindle::interrupt(id).is_err());
/// });
/// ```
pub fn interrupt(id: TaskId) -> Result<(), NoSuchTask> {
    signal(id, Signal::Interrupt)
}

/// Marks task `id` stopped and interrupts it. From then on its
/// interruptible waits (see [`interrupt`]) and its joins (of a
/// `JoinHandle`, a [`JoinSet`](crate::JoinSet)) fail with `Stopped` at
/// once, and [`is_stopped`] is true in it. The waits of the locks and of
/// `Barrier` are not ended (they are short, and what they guard must stay
/// whole), nor is the end of a [`scope`](crate::scope), whose tasks borrow
/// from the waiter.
///
/// The stop reaches the task's children too, and theirs: the tasks it
/// spawned through a [`Scope`](crate::Scope) or a
/// [`JoinSet`](crate::JoinSet) that are still running, and any it spawns
/// so from then on (born stopped). A task spawned with
/// [`spawn`](crate::spawn) is nobody's child.
///
/// ```
/// use std::time::Duration;
///
/// let rt = spindle::Runtime::builder().workers(1).build().unwrap();
/// rt.block_on(|| {
///     let poller = spindle::spawn(|| {
///         // Every wait of a stopped task fails at once, so the loop ends.
///         while spindle::sleep(Duration::from_millis(1)).is_ok() {}
///         spindle::is_stopped()
///     });
///     spindle::sleep(Duration::from_millis(10)).unwrap();
///     spindle::stop(poller.id()).unwrap();
///     assert!(poller.join().unwrap());
/// });
/// ```
pub fn stop(id: TaskId) -> Result<(), NoSuchTask> {
    signal(id, Signal::Stop)
}

/// Whether the current task has been stopped (false on a plain thread).
pub fn is_stopped() -> bool {
    sched::current_task().is_some_and(|t| t.is_stopped())
}
