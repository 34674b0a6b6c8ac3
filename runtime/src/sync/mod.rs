//! Blocking primitives for tasks and plain threads, built on [`Butex`].
//!
//! They block only the calling task (a plain thread blocks itself) and can be
//! shared by tasks and threads at once. Their waits honour the deadline of an
//! enclosing [`with_deadline`](crate::with_deadline) scope (they return
//! `DeadlineExceeded`). The waits of the locks (`Mutex`, `Condvar`,
//! `RwLock`, `OnceCell`), of `Barrier` and of `CountdownEvent` are not
//! ended by `interrupt` or `stop`: an interrupt stays pending for the next
//! interruptible wait, as with bthread's mutex. Those of the [`Semaphore`]
//! and the channels are ended by them.
//!
//! - [`Mutex`]: the three-state futex mutex (Drepper, "Futexes are tricky"):
//!   0 unlocked, 1 locked, 2 locked with waiters. Lock and unlock without
//!   contention are one atomic instruction each: no syscall, no timer. An
//!   unlock wakes the longest waiter but does not hand it the lock: it
//!   competes with newcomers, as with std's and bthread's mutexes, so a
//!   task that relocks in a tight loop can keep it waiting.
//! - [`Condvar`]: a sequence number in a butex. A waiter reads it, unlocks,
//!   and waits for it to move; a notifier bumps it and wakes. The butex's
//!   FIFO order makes `notify_one` fair: it wakes the longest waiter. (A
//!   waiter that read the number before the bump but had not yet begun to
//!   wait returns too, a spurious wake-up, which condvars allow.)
//! - [`CountdownEvent`]: a count in a butex; waiters wait for it to reach 0.
//! - [`RwLock`]: a reader count and a writer bit in a butex, writers queued
//!   on an inner [`Mutex`]; writer-preferring (a writer that waits for the
//!   readers inside stops new ones), and a writer that gives up leaves no
//!   trace.
//! - [`Semaphore`]: an atomic count of permits, and a butex of releases
//!   that waiters wait on; its waits, unlike the others here, are
//!   interruptible. A permit taken through the semaphore's `Arc`
//!   ([`OwnedSemaphorePermit`]) can move into another task.
//! - [`Barrier`]: std's reusable barrier, a generation and a count in one
//!   word; a waiter that gives up withdraws its arrival.
//! - [`OnceCell`]: std's `OnceLock` whose waiters wait as tasks; a failed
//!   or panicking initializer hands over to a waiter.
//! - [`mpsc`] and [`oneshot`]: channels. Like the semaphore's, their
//!   waits *are* ended by `interrupt` and `stop` (with `Interrupted` and
//!   `Stopped`), since a receive may wait for good; each module's docs
//!   give its protocol.
//! - [`watch`]: one value that changes, and many receivers that wait for
//!   a change (a version in a butex, bumped by each send); its waits are
//!   ended by `interrupt` and `stop` too, as the channels'.
//!
//! The data the locks and the once-cell guard (`Mutex`, `RwLock`,
//! `OnceCell`) lives in the loom shim's `UnsafeCell`: under `--cfg loom`
//! loom's, so the models (`loom_mutex.rs`, `loom_rwlock.rs`,
//! `loom_once_cell.rs`) check that each lock orders every access to its
//! data, not only that its waiters wake.
//!
//! A task that waits while it unwinds (in a `Drop` run by a panic, or by the
//! runtime's stop) cannot switch out mid-unwind: the wait blocks its worker
//! thread, as on a plain thread. If only a task of that same worker can end
//! the wait, it never ends; and `interrupt` does not reach such a wait.

mod barrier;
#[cfg(all(test, loom))]
mod loom_barrier;
#[cfg(all(test, loom))]
mod loom_mutex;
#[cfg(all(test, loom))]
mod loom_once_cell;
#[cfg(all(test, loom))]
mod loom_rwlock;
#[cfg(all(test, loom))]
mod loom_semaphore;
pub mod mpsc;
mod once_cell;
pub mod oneshot;
mod rwlock;
mod select;
mod select_source;
mod semaphore;
pub mod watch;

pub use barrier::{Barrier, BarrierWaitResult};
pub use once_cell::OnceCell;
pub use rwlock::{RwLock, RwLockReadGuard, RwLockWriteGuard};
#[doc(hidden)]
pub use select::__select_ended;
pub use select::{Select, SelectedOperation};
pub use semaphore::{OwnedSemaphorePermit, Semaphore, SemaphorePermit, TryAcquireError};

use crate::error::WaitError;
use crate::loom::sync::atomic::Ordering;
use crate::loom::UnsafeCell;
use crate::meta::activity::WaitKind;
use crate::meta::wait_queue::WaitPolicy;
use crate::wait::{self, Butex};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::time::Instant;

const UNLOCKED: u32 = 0;
const LOCKED: u32 = 1;
const CONTENDED: u32 = 2;

/// A mutual-exclusion lock whose waiters suspend (tasks) or park (threads).
///
/// Unlike `std::sync::Mutex` it has no poisoning: a task that panics while
/// holding it unlocks it as its guard drops. Like std's, it is not
/// reentrant: a task that locks it again while it holds it waits for
/// itself for good.
///
/// ```
/// use spindle::sync::Mutex;
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let rt = spindle::Runtime::builder().workers(2).build().unwrap();
/// let hits = Arc::new(Mutex::new(0u32));
/// rt.block_on(|| {
///     let tasks: Vec<_> = (0..8)
///         .map(|_| {
///             let hits = hits.clone();
///             spindle::spawn(move || {
///                 let mut n = hits.lock().unwrap();
///                 // Holding it across a wait is fine: the tasks that want
///                 // it suspend, and their workers run others.
///                 spindle::sleep(Duration::from_millis(1)).unwrap();
///                 *n += 1;
///             })
///         })
///         .collect();
///     for t in tasks {
///         t.join().unwrap();
///     }
/// });
/// assert_eq!(*hits.lock().unwrap(), 8);
/// ```
pub struct Mutex<T: ?Sized> {
    state: Butex,
    /// The guarded value, in the loom shim's cell: a loom model sees each
    /// access a guard makes.
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands out access to `value` to one holder at a time, so
// sharing the mutex shares `T` only by moving access between threads.
unsafe impl<T: ?Sized + Send> Send for Mutex<T> {}
// SAFETY: as above: `&Mutex<T>` gives `&mut T` to one thread at a time.
unsafe impl<T: ?Sized + Send> Sync for Mutex<T> {}

/// Access to a locked [`Mutex`]'s value; unlocks on drop.
#[must_use = "the mutex unlocks as soon as the guard is dropped"]
pub struct MutexGuard<'a, T: ?Sized> {
    mutex: &'a Mutex<T>,
}

// SAFETY: a guard gives `&T` through `&MutexGuard`, so it is Sync when T is.
unsafe impl<T: ?Sized + Sync> Sync for MutexGuard<'_, T> {}

impl<T> Mutex<T> {
    /// An unlocked mutex holding `value`.
    #[cfg(not(loom))]
    pub const fn new(value: T) -> Self {
        Mutex {
            state: Butex::new(UNLOCKED),
            value: UnsafeCell::new(value),
        }
    }

    /// An unlocked mutex holding `value` (not const under loom).
    #[cfg(loom)]
    pub fn new(value: T) -> Self {
        Mutex {
            state: Butex::new(UNLOCKED),
            value: UnsafeCell::new(value),
        }
    }

    /// The value, consuming the mutex.
    pub fn into_inner(self) -> T {
        self.value.into_inner()
    }
}

impl<T: Default> Default for Mutex<T> {
    fn default() -> Self {
        Mutex::new(T::default())
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Locks, suspending the task (or parking the thread) while another holds
    /// the lock. Fails only with `DeadlineExceeded`, when the deadline of an
    /// enclosing `with_deadline` scope passes first.
    pub fn lock(&self) -> Result<MutexGuard<'_, T>, WaitError> {
        self.lock_until(None)
    }

    /// Like [`lock`](Self::lock), giving up with `TimedOut` at `deadline`.
    pub fn lock_until(&self, deadline: Option<Instant>) -> Result<MutexGuard<'_, T>, WaitError> {
        let st = self.state.value();
        if st
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return Ok(MutexGuard { mutex: self });
        }
        loop {
            // Mark the lock contended; if it was free, we now hold it (as
            // CONTENDED, which costs one spare wake at unlock, never a lost one).
            if st.swap(CONTENDED, Ordering::Acquire) == UNLOCKED {
                return Ok(MutexGuard { mutex: self });
            }
            match wait::wait(
                self.state.queue(),
                CONTENDED,
                deadline,
                WaitPolicy::Uninterruptible,
                WaitKind::Mutex,
            ) {
                Ok(()) | Err(WaitError::WouldBlock) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Locks if nobody holds the lock, without waiting.
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.state
            .value()
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| MutexGuard { mutex: self })
    }

    /// The value, through a unique borrow (no locking needed).
    pub fn get_mut(&mut self) -> &mut T {
        // SAFETY: `&mut self` is unique: no guard exists, nor any other
        // access to the value.
        self.value.with_mut(|v| unsafe { &mut *v })
    }

    fn unlock(&self) {
        if self.state.value().swap(UNLOCKED, Ordering::Release) == CONTENDED {
            self.state.wake_one();
        }
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.try_lock() {
            Some(g) => f.debug_struct("Mutex").field("value", &&*g).finish(),
            None => f.debug_struct("Mutex").field("value", &"<locked>").finish(),
        }
    }
}

impl<T: ?Sized> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard proves we hold the lock.
        self.mutex.value.with(|v| unsafe { &*v })
    }
}

impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard proves we hold the lock, and `&mut self` that
        // this is the only access through it.
        self.mutex.value.with_mut(|v| unsafe { &mut *v })
    }
}

impl<T: ?Sized> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        self.mutex.unlock();
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// Passes a condition variable's notification on to another waiter when
/// dropped: the waiter that took it did not get to act on it.
struct PassOnIfUnseen<'a>(&'a Butex);

impl Drop for PassOnIfUnseen<'_> {
    fn drop(&mut self) {
        self.0.wake_one();
    }
}

/// A condition variable for [`Mutex`]; see the module docs.
///
/// ```
/// use spindle::sync::{Condvar, Mutex};
/// use std::sync::Arc;
///
/// let rt = spindle::Runtime::builder().workers(2).build().unwrap();
/// let queue = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
/// rt.block_on(|| {
///     let producer = {
///         let queue = queue.clone();
///         spindle::spawn(move || {
///             let (jobs, ready) = &*queue;
///             for job in 1..=3 {
///                 jobs.lock().unwrap().push(job);
///                 ready.notify_one();
///             }
///         })
///     };
///     let (jobs, ready) = &*queue;
///     let jobs = ready.wait_while(jobs.lock().unwrap(), |j| j.len() < 3).unwrap();
///     assert_eq!(*jobs, [1, 2, 3]);
///     drop(jobs);
///     producer.join().unwrap();
/// });
/// ```
#[derive(Debug)]
pub struct Condvar {
    seq: Butex,
}

impl Default for Condvar {
    fn default() -> Self {
        Condvar::new()
    }
}

impl Condvar {
    /// A condition variable with no waiters.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Condvar { seq: Butex::new(0) }
    }

    /// A condition variable with no waiters (not const under loom).
    #[cfg(loom)]
    pub fn new() -> Self {
        Condvar { seq: Butex::new(0) }
    }

    /// Unlocks `guard`'s mutex, waits for a notification, and locks again.
    /// May wake spuriously: wait in a loop, or use [`wait_while`](Self::wait_while).
    /// On error (`DeadlineExceeded` from an enclosing scope, while waiting
    /// or while locking again) the guard is gone and the mutex is left
    /// unlocked; a notification this wait had taken is passed on to the
    /// next waiter, so that none is lost with the error.
    pub fn wait<'a, T: ?Sized>(
        &self,
        guard: MutexGuard<'a, T>,
    ) -> Result<MutexGuard<'a, T>, WaitError> {
        self.wait_inner(guard, None)
    }

    /// Like [`wait`](Self::wait), giving up with `TimedOut` at `deadline`.
    /// As for every error here, the mutex is then left unlocked: lock it
    /// again to look at the condition.
    pub fn wait_until<'a, T: ?Sized>(
        &self,
        guard: MutexGuard<'a, T>,
        deadline: Instant,
    ) -> Result<MutexGuard<'a, T>, WaitError> {
        self.wait_inner(guard, Some(deadline))
    }

    /// Waits while `condition` holds, re-checking it after every wake-up.
    pub fn wait_while<'a, T: ?Sized, F>(
        &self,
        mut guard: MutexGuard<'a, T>,
        mut condition: F,
    ) -> Result<MutexGuard<'a, T>, WaitError>
    where
        F: FnMut(&mut T) -> bool,
    {
        while condition(&mut *guard) {
            guard = self.wait(guard)?;
        }
        Ok(guard)
    }

    fn wait_inner<'a, T: ?Sized>(
        &self,
        guard: MutexGuard<'a, T>,
        deadline: Option<Instant>,
    ) -> Result<MutexGuard<'a, T>, WaitError> {
        let mutex = guard.mutex;
        // Read the sequence while holding the lock: a notify after we unlock
        // moves it, and our wait then returns at once.
        let seq = self.seq.value().load(Ordering::Acquire);
        drop(guard);
        match wait::wait(
            self.seq.queue(),
            seq,
            deadline,
            WaitPolicy::Uninterruptible,
            WaitKind::Condvar,
        ) {
            Ok(()) | Err(WaitError::WouldBlock) => {}
            Err(e) => return Err(e),
        }
        // We were notified (or a notification came as we queued). If the
        // caller never sees it, because a deadline scope ends the relock
        // below or the runtime's stop unwinds this task in it, another
        // waiter must have it, in case it was a `notify_one`. At worst that
        // wakes one waiter for nothing, which waiters allow for.
        let pass_on = PassOnIfUnseen(&self.seq);
        // Waiters woken together race for the lock; the losers mark it
        // CONTENDED, so each unlock wakes the next of them.
        let relocked = mutex.lock();
        if relocked.is_ok() {
            std::mem::forget(pass_on);
        }
        relocked
    }

    /// Wakes the longest-waiting task or thread, if any.
    pub fn notify_one(&self) {
        self.seq.value().fetch_add(1, Ordering::Release);
        self.seq.wake_one();
    }

    /// Wakes every waiter.
    pub fn notify_all(&self) {
        self.seq.value().fetch_add(1, Ordering::Release);
        self.seq.wake_all();
    }
}

/// [`CountdownEvent::add_count`] would have taken the count past `u32::MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CountOverflow {
    /// The count when the events were to be added.
    pub count: u32,
    /// The events to add.
    pub added: u32,
}

impl fmt::Display for CountOverflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot add {} events to a count of {}: it would pass u32::MAX",
            self.added, self.count
        )
    }
}

impl std::error::Error for CountOverflow {}

/// Waits for a count of events to reach zero (bthread's `CountdownEvent`).
///
/// ```
/// use spindle::sync::CountdownEvent;
/// use std::sync::Arc;
///
/// let rt = spindle::Runtime::builder().workers(2).build().unwrap();
/// rt.block_on(|| {
///     let parts = Arc::new(CountdownEvent::new(3));
///     for _ in 0..3 {
///         let parts = parts.clone();
///         spindle::spawn(move || {
///             // ... one part of the work ...
///             parts.signal(1);
///         });
///     }
///     parts.wait().unwrap(); // until all three have signalled
///     assert_eq!(parts.count(), 0);
/// });
/// ```
#[derive(Debug)]
pub struct CountdownEvent {
    count: Butex,
}

impl Default for CountdownEvent {
    /// A count of 1.
    fn default() -> Self {
        CountdownEvent::new(1)
    }
}

impl CountdownEvent {
    /// An event that is set once `signal` has been called `n` times.
    pub fn new(n: u32) -> Self {
        CountdownEvent {
            count: Butex::new(n),
        }
    }

    /// The count still to go.
    pub fn count(&self) -> u32 {
        self.count.value().load(Ordering::Acquire)
    }

    /// Counts `k` events down (not below zero); wakes the waiters when the
    /// count reaches zero.
    pub fn signal(&self, k: u32) {
        let c = self.count.value();
        let mut cur = c.load(Ordering::Relaxed);
        loop {
            let next = cur.saturating_sub(k);
            match c.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => {
                    if next == 0 && cur != 0 {
                        self.count.wake_all();
                    }
                    return;
                }
                Err(v) => cur = v,
            }
        }
    }

    /// Adds `k` events to wait for. A count that would pass `u32::MAX` is
    /// an error, and the count is left as it was.
    pub fn add_count(&self, k: u32) -> Result<(), CountOverflow> {
        self.count
            .value()
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |c| c.checked_add(k))
            .map(|_| ())
            .map_err(|count| CountOverflow { count, added: k })
    }

    /// Waits until the count is zero.
    pub fn wait(&self) -> Result<(), WaitError> {
        self.wait_inner(None)
    }

    /// Waits until the count is zero, giving up with `TimedOut` at `deadline`.
    pub fn wait_until(&self, deadline: Instant) -> Result<(), WaitError> {
        self.wait_inner(Some(deadline))
    }

    fn wait_inner(&self, deadline: Option<Instant>) -> Result<(), WaitError> {
        loop {
            let cur = self.count.value().load(Ordering::Acquire);
            if cur == 0 {
                return Ok(());
            }
            match wait::wait(
                self.count.queue(),
                cur,
                deadline,
                WaitPolicy::Uninterruptible,
                WaitKind::Barrier,
            ) {
                Ok(()) | Err(WaitError::WouldBlock) => {}
                Err(e) => return Err(e),
            }
        }
    }
}
