//! `Semaphore`: a counting semaphore for tasks and threads.
//!
//! The permits are a plain atomic count, taken with a CAS and given back
//! with a `fetch_add`; a count of waiters tells a release whether anybody
//! may be waiting (a store-buffering handshake, with a `SeqCst` fence on
//! each side). Waiters wait on a butex whose value is a release sequence:
//! a release that finds waiters bumps it and wakes one. So an uncontended
//! acquire and release is one atomic RMW each (and a load): no lock, no
//! syscall, no timer.
//!
//! One release wakes one waiter, and wake-ups travel on from there: a woken
//! waiter that takes its permits and sees some left wakes the next waiter;
//! one that cannot use them (it wants more than there are) passes its
//! wake-up on too, once per release sequence it has looked at, so a waiter
//! that wants fewer permits behind it is not left asleep beside enough of
//! them, and two waiters that want too many do not wake each other for
//! ever. Waiters are served in the order of the butex (FIFO) as far as the
//! permits allow; a waiter that wants many does not hold back those behind
//! it that want few (no head-of-line blocking, so no strict fairness).
//!
//! A wait that an error ends took no wake-up (a wait has one outcome), so
//! it takes no permit and loses nothing for the others.
//!
//! A permit borrows its semaphore ([`SemaphorePermit`]), or, taken through
//! an `Arc` (`acquire_owned`), holds a clone of that `Arc`
//! ([`OwnedSemaphorePermit`]): it can then move into another task, or be
//! kept in a struct, and gives its permits back wherever it drops.

use crate::error::WaitError;
use crate::loom::sync::atomic::{fence, AtomicUsize, Ordering};
use crate::meta::activity::WaitKind;
use crate::meta::wait_queue::WaitPolicy;
use crate::wait::{self, Butex};
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

/// A counting semaphore whose waiters suspend (tasks) or park (threads).
///
/// Unlike the locks of [`sync`](crate::sync), its waits are interruptible:
/// [`interrupt`](crate::interrupt) ends a task's wait with `Interrupted`
/// (consuming the interrupt), and a [`stop`](crate::stop)ped task's waits
/// fail with `Stopped` (a stopped task still takes permits that are free).
/// A task waiting for permits is usually waiting for work to drain, which
/// its owner may want to cancel, as with a sleep. Waits also honour an
/// enclosing [`with_deadline`](crate::with_deadline) scope, with
/// `DeadlineExceeded`. A wait that fails takes no permit, and loses no
/// wake-up for the others.
///
/// Waiters are woken in the order they came, as far as the permits allow:
/// one that wants more permits than are free does not hold back those
/// behind it that want fewer (so `acquire_many` of many can wait while
/// small acquires keep taking permits).
///
/// ```
/// use spindle::sync::Semaphore;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let rt = spindle::Runtime::builder().workers(2).build().unwrap();
/// // At most 2 calls to the backend at a time.
/// let backend = Arc::new(Semaphore::new(2));
/// let busy = Arc::new(AtomicUsize::new(0));
/// let most = Arc::new(AtomicUsize::new(0));
/// rt.block_on(|| {
///     let calls: Vec<_> = (0..6)
///         .map(|_| {
///             let (backend, busy, most) = (backend.clone(), busy.clone(), most.clone());
///             spindle::spawn(move || {
///                 let _permit = backend.acquire().unwrap();
///                 most.fetch_max(busy.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
///                 spindle::sleep(Duration::from_millis(2)).unwrap();
///                 busy.fetch_sub(1, Ordering::SeqCst);
///             })
///         })
///         .collect();
///     for c in calls {
///         c.join().unwrap();
///     }
/// });
/// assert!(most.load(Ordering::SeqCst) <= 2);
/// assert_eq!(backend.available_permits(), 2);
/// ```
pub struct Semaphore {
    permits: AtomicUsize,
    /// Acquirers in the slow path (counted before they look for permits).
    waiters: AtomicUsize,
    /// The release sequence; waiters wait on it.
    releases: Butex,
}

/// Permits taken from a [`Semaphore`]; given back on drop.
#[must_use = "the permits are given back as soon as the permit is dropped"]
pub struct SemaphorePermit<'a> {
    sem: &'a Semaphore,
    n: usize,
}

/// Permits taken from a [`Semaphore`] in an `Arc`, holding a clone of
/// that `Arc`; given back on drop. Unlike a [`SemaphorePermit`] it
/// borrows nothing, so it can move into another task (or thread) and be
/// given back there:
///
/// ```
/// use spindle::sync::Semaphore;
/// use std::sync::Arc;
///
/// let sem = Arc::new(Semaphore::new(1));
/// let permit = sem.try_acquire_owned().unwrap();
/// let worker = spindle::spawn(move || {
///     // ... work that holds the permit ...
///     drop(permit);
/// });
/// worker.join().unwrap();
/// assert_eq!(sem.available_permits(), 1);
/// ```
#[must_use = "the permits are given back as soon as the permit is dropped"]
pub struct OwnedSemaphorePermit {
    sem: Arc<Semaphore>,
    n: usize,
}

/// Why [`Semaphore::try_acquire`] took no permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TryAcquireError {
    /// Not enough permits are available now.
    NoPermits,
}

impl fmt::Display for TryAcquireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryAcquireError::NoPermits => f.write_str("not enough permits available"),
        }
    }
}

impl std::error::Error for TryAcquireError {}

impl Semaphore {
    /// The most permits a semaphore holds. More panics.
    pub const MAX_PERMITS: usize = usize::MAX >> 1;

    /// A semaphore with `permits` permits. Panics beyond
    /// [`MAX_PERMITS`](Self::MAX_PERMITS).
    #[cfg(not(loom))]
    pub const fn new(permits: usize) -> Self {
        assert!(permits <= Self::MAX_PERMITS, "too many permits");
        Semaphore {
            permits: AtomicUsize::new(permits),
            waiters: AtomicUsize::new(0),
            releases: Butex::new(0),
        }
    }

    /// A semaphore with `permits` permits (not const under loom).
    #[cfg(loom)]
    pub fn new(permits: usize) -> Self {
        assert!(permits <= Self::MAX_PERMITS, "too many permits");
        Semaphore {
            permits: AtomicUsize::new(permits),
            waiters: AtomicUsize::new(0),
            releases: Butex::new(0),
        }
    }

    /// The permits available now.
    pub fn available_permits(&self) -> usize {
        self.permits.load(Ordering::Acquire)
    }

    /// Adds `n` permits, waking waiters that can use them. Panics if the
    /// count would pass [`MAX_PERMITS`](Self::MAX_PERMITS).
    pub fn add_permits(&self, n: usize) {
        if n == 0 {
            return;
        }
        self.permits
            .fetch_update(Ordering::Release, Ordering::Relaxed, |p| {
                p.checked_add(n).filter(|&p| p <= Self::MAX_PERMITS)
            })
            .expect("a semaphore's permits would pass MAX_PERMITS");
        self.after_release();
    }

    /// Takes a permit, suspending the task (or parking the thread) until one
    /// is free. Errors: `Interrupted` / `Stopped` (tasks only; see the type's
    /// docs) and `DeadlineExceeded` (an enclosing scope's deadline).
    pub fn acquire(&self) -> Result<SemaphorePermit<'_>, WaitError> {
        self.acquire_many_until(1, None)
    }

    /// Like [`acquire`](Self::acquire), giving up with `TimedOut` at
    /// `deadline`.
    pub fn acquire_until(
        &self,
        deadline: Option<Instant>,
    ) -> Result<SemaphorePermit<'_>, WaitError> {
        self.acquire_many_until(1, deadline)
    }

    /// Takes `n` permits at once (all or none), waiting until there are.
    /// `n == 0` returns at once. Panics if `n` passes
    /// [`MAX_PERMITS`](Self::MAX_PERMITS), which no wait could satisfy.
    pub fn acquire_many(&self, n: usize) -> Result<SemaphorePermit<'_>, WaitError> {
        self.acquire_many_until(n, None)
    }

    /// Like [`acquire_many`](Self::acquire_many), giving up with `TimedOut`
    /// at `deadline`.
    pub fn acquire_many_until(
        &self,
        n: usize,
        deadline: Option<Instant>,
    ) -> Result<SemaphorePermit<'_>, WaitError> {
        self.take_or_wait(n, deadline)?;
        Ok(SemaphorePermit { sem: self, n })
    }

    /// Like [`acquire`](Self::acquire), through the semaphore's `Arc`:
    /// the permit holds a clone of it, and can move into another task
    /// (see [`OwnedSemaphorePermit`]).
    pub fn acquire_owned(self: &Arc<Self>) -> Result<OwnedSemaphorePermit, WaitError> {
        self.acquire_many_owned(1)
    }

    /// Like [`acquire_many`](Self::acquire_many), through the semaphore's
    /// `Arc` (see [`acquire_owned`](Self::acquire_owned)).
    pub fn acquire_many_owned(
        self: &Arc<Self>,
        n: usize,
    ) -> Result<OwnedSemaphorePermit, WaitError> {
        self.take_or_wait(n, None)?;
        Ok(OwnedSemaphorePermit {
            sem: Arc::clone(self),
            n,
        })
    }

    /// Takes a permit if one is free, without waiting.
    pub fn try_acquire(&self) -> Result<SemaphorePermit<'_>, TryAcquireError> {
        self.try_acquire_many(1)
    }

    /// Takes `n` permits if that many are free, without waiting.
    pub fn try_acquire_many(&self, n: usize) -> Result<SemaphorePermit<'_>, TryAcquireError> {
        if self.try_take(n) {
            Ok(SemaphorePermit { sem: self, n })
        } else {
            Err(TryAcquireError::NoPermits)
        }
    }

    /// Like [`try_acquire`](Self::try_acquire), through the semaphore's
    /// `Arc` (see [`acquire_owned`](Self::acquire_owned)).
    pub fn try_acquire_owned(self: &Arc<Self>) -> Result<OwnedSemaphorePermit, TryAcquireError> {
        self.try_acquire_many_owned(1)
    }

    /// Like [`try_acquire_many`](Self::try_acquire_many), through the
    /// semaphore's `Arc` (see [`acquire_owned`](Self::acquire_owned)).
    pub fn try_acquire_many_owned(
        self: &Arc<Self>,
        n: usize,
    ) -> Result<OwnedSemaphorePermit, TryAcquireError> {
        if self.try_take(n) {
            Ok(OwnedSemaphorePermit {
                sem: Arc::clone(self),
                n,
            })
        } else {
            Err(TryAcquireError::NoPermits)
        }
    }

    /// Takes `n` permits, waiting until there are (the body of every
    /// acquire that waits).
    fn take_or_wait(&self, n: usize, deadline: Option<Instant>) -> Result<(), WaitError> {
        assert!(
            n <= Self::MAX_PERMITS,
            "more permits than a semaphore holds"
        );
        if self.try_take(n) {
            return Ok(());
        }
        self.acquire_slow(n, deadline)
    }

    fn try_take(&self, n: usize) -> bool {
        let mut cur = self.permits.load(Ordering::Relaxed);
        loop {
            if cur < n {
                return false;
            }
            match self.permits.compare_exchange_weak(
                cur,
                cur - n,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }

    #[cold]
    fn acquire_slow(&self, n: usize, deadline: Option<Instant>) -> Result<(), WaitError> {
        let waiting = Waiting::enter(self);
        // Whether our last wait ended by a wake-up, which we must use or
        // pass on; and the release sequence we last failed to find permits
        // at.
        let mut woken = false;
        let mut failed_at = None;
        loop {
            // The sequence before the permits: a release after this look
            // bumps it, and our wait then returns at once.
            let seq = self.releases.value().load(Ordering::Acquire);
            if self.try_take(n) {
                drop(waiting);
                if woken && self.permits.load(Ordering::Relaxed) != 0 {
                    // Some left: maybe for the next waiter.
                    self.releases.wake_one();
                }
                return Ok(());
            }
            if woken && failed_at != Some(seq) {
                // We cannot use the permits this release brought; a waiter
                // behind us that wants fewer may.
                self.releases.wake_one();
            }
            failed_at = Some(seq);
            woken = match wait::wait(
                self.releases.queue(),
                seq,
                deadline,
                WaitPolicy::Interruptible,
                WaitKind::Semaphore,
            ) {
                Ok(()) => true,
                Err(WaitError::WouldBlock) => false,
                Err(e) => return Err(e),
            };
        }
    }

    /// The releasers' side of the handshake with `Waiting::enter`: wakes
    /// one waiter if there may be any.
    fn after_release(&self) {
        // Pairs with the fence in `Waiting::enter`: either the waiter's
        // look at the permits sees ours, or we see it counted.
        fence(Ordering::SeqCst);
        if self.waiters.load(Ordering::Relaxed) != 0 {
            self.releases.value().fetch_add(1, Ordering::Release);
            self.releases.wake_one();
        }
    }

    fn release(&self, n: usize) {
        if n != 0 {
            self.permits.fetch_add(n, Ordering::Release);
            self.after_release();
        }
    }
}

/// An acquirer counted in `waiters` (uncounted on drop, also when it
/// unwinds).
struct Waiting<'a>(&'a Semaphore);

impl<'a> Waiting<'a> {
    fn enter(sem: &'a Semaphore) -> Self {
        sem.waiters.fetch_add(1, Ordering::Relaxed);
        // Pairs with the fence in `after_release`.
        fence(Ordering::SeqCst);
        Waiting(sem)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiters.fetch_sub(1, Ordering::Relaxed);
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("permits", &self.permits.load(Ordering::Relaxed))
            .field("waiters", &self.waiters.load(Ordering::Relaxed))
            .finish()
    }
}

impl SemaphorePermit<'_> {
    /// How many permits this holds.
    pub fn num_permits(&self) -> usize {
        self.n
    }

    /// Keeps the permits out of the semaphore for good: dropping the permit
    /// no longer gives them back.
    pub fn forget(self) {
        std::mem::forget(self);
    }
}

impl Drop for SemaphorePermit<'_> {
    fn drop(&mut self) {
        self.sem.release(self.n);
    }
}

impl fmt::Debug for SemaphorePermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphorePermit")
            .field("permits", &self.n)
            .finish()
    }
}

impl OwnedSemaphorePermit {
    /// How many permits this holds.
    pub fn num_permits(&self) -> usize {
        self.n
    }

    /// The semaphore the permits came from.
    pub fn semaphore(&self) -> &Arc<Semaphore> {
        &self.sem
    }

    /// Keeps the permits out of the semaphore for good: dropping the permit
    /// no longer gives them back (the semaphore's `Arc` is let go).
    pub fn forget(mut self) {
        self.n = 0;
    }
}

impl Drop for OwnedSemaphorePermit {
    fn drop(&mut self) {
        self.sem.release(self.n);
    }
}

impl fmt::Debug for OwnedSemaphorePermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedSemaphorePermit")
            .field("permits", &self.n)
            .finish()
    }
}
