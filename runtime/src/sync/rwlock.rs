//! `RwLock`: a writer-preferring reader-writer lock for tasks and threads.
//!
//! One word, in a butex, holds the count of active readers, a `WRITER` bit
//! (a writer holds the lock, or has claimed it and waits for the readers in
//! it to leave) and a `READERS_WAITING` bit (readers wait on that butex).
//! Writers first queue among themselves on an inner [`Mutex`]: its holder
//! is the one writer that may set `WRITER`. A reader enters with one CAS
//! that adds 1 while `WRITER` is clear, and leaves with one `fetch_sub`; the
//! reader that leaves last while `WRITER` is set bumps a second butex,
//! `drained`, on which that writer waits. So an uncontended read lock and
//! unlock is one atomic RMW each: no lock, no syscall, no timer.
//!
//! Policy: writer-preferring. Once a writer has set `WRITER`, no new reader
//! enters, so a stream of readers cannot starve writers. A writer's unlock
//! clears the bit and wakes the readers it held back, but hands them
//! nothing: they race the next writer (woken from the inner mutex, or a
//! newcomer) for the word, as a mutex's woken waiter races newcomers. So a
//! steady stream of writers can keep readers waiting (Go's `RWMutex` hands
//! the lock to the waiting readers instead). A reader that locks again
//! while it holds a read lock may deadlock, if a writer came in between.
//!
//! A writer that gives up (its deadline, the enclosing scope's, or an
//! unwind at the runtime's stop) clears `WRITER` and wakes the readers it
//! was holding back, leaving no trace (bthread's rwlock kept the mark,
//! which locked readers out for good: brpc PR #3286).

use super::{Mutex, MutexGuard};
use crate::error::WaitError;
use crate::loom::sync::atomic::Ordering;
use crate::loom::UnsafeCell;
use crate::meta::activity::WaitKind;
use crate::meta::wait_queue::WaitPolicy;
use crate::wait::{self, Butex};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::time::Instant;

/// The count of active readers, in the low bits of the state.
const READERS: u32 = (1 << 30) - 1;
/// A writer holds the lock, or has claimed it and waits for readers to leave.
const WRITER: u32 = 1 << 30;
/// Readers may be waiting on the state's butex for `WRITER` to clear.
const READERS_WAITING: u32 = 1 << 31;

/// A reader-writer lock whose waiters suspend (tasks) or park (threads).
///
/// Writer-preferring: writers queue among themselves, and the first in
/// line, while it waits for the readers inside to leave, stops new
/// readers, so a stream of readers cannot starve writers. A writer's
/// unlock wakes the readers it held back, which then race the next writer
/// for the lock (no hand-off, as with [`Mutex`]): a steady stream of
/// writers can keep readers waiting. A task that read-locks again while it
/// holds a read lock may deadlock, if a writer came in between.
///
/// Like [`Mutex`], it has no poisoning, and its waits honour an enclosing
/// [`with_deadline`](crate::with_deadline) scope (`DeadlineExceeded`) but
/// are not ended by `interrupt` (which stays pending for the next
/// interruptible wait). A writer that gives up leaves no trace: the
/// readers it held back go in at once.
///
/// ```
/// use spindle::sync::RwLock;
/// use std::sync::Arc;
///
/// let rt = spindle::Runtime::builder().workers(2).build().unwrap();
/// let routes = Arc::new(RwLock::new(vec!["/users"]));
/// rt.block_on(|| {
///     // Many readers at once...
///     let readers: Vec<_> = (0..4)
///         .map(|_| {
///             let routes = routes.clone();
///             spindle::spawn(move || routes.read().unwrap().len())
///         })
///         .collect();
///     for r in readers {
///         assert_eq!(r.join().unwrap(), 1);
///     }
///     // ...or one writer.
///     let mut table = routes.write().unwrap();
///     table.push("/orders");
///     assert!(routes.try_read().is_none());
///     drop(table);
///     assert_eq!(*routes.read().unwrap(), ["/users", "/orders"]);
/// });
/// ```
pub struct RwLock<T: ?Sized> {
    /// Readers, `WRITER`, `READERS_WAITING`; blocked readers wait here.
    state: Butex,
    /// Bumped when the last reader leaves while `WRITER` is set; the
    /// writer that set it waits here.
    drained: Butex,
    /// Queues writers: its holder is the only one that sets `WRITER`.
    writers: Mutex<()>,
    /// The guarded value, in the loom shim's cell: a loom model sees each
    /// access a guard makes.
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands out `&mut T` to one holder at a time, which may
// be on another thread: T must be Send.
unsafe impl<T: ?Sized + Send> Send for RwLock<T> {}
// SAFETY: readers on several threads share `&T` (T: Sync), and a writer
// gets `&mut T` on any thread (T: Send), never both at once.
unsafe impl<T: ?Sized + Send + Sync> Sync for RwLock<T> {}

/// Shared access to a read-locked [`RwLock`]'s value; unlocks on drop.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct RwLockReadGuard<'a, T: ?Sized> {
    lock: &'a RwLock<T>,
}

/// Unique access to a write-locked [`RwLock`]'s value; unlocks on drop.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct RwLockWriteGuard<'a, T: ?Sized> {
    lock: &'a RwLock<T>,
    // Dropped after `Drop::drop` has cleared `WRITER`: the next writer
    // must find the bit clear.
    _writers: MutexGuard<'a, ()>,
}

impl<T> RwLock<T> {
    /// An unlocked lock holding `value`.
    #[cfg(not(loom))]
    pub const fn new(value: T) -> Self {
        RwLock {
            state: Butex::new(0),
            drained: Butex::new(0),
            writers: Mutex::new(()),
            value: UnsafeCell::new(value),
        }
    }

    /// An unlocked lock holding `value` (not const under loom).
    #[cfg(loom)]
    pub fn new(value: T) -> Self {
        RwLock {
            state: Butex::new(0),
            drained: Butex::new(0),
            writers: Mutex::new(()),
            value: UnsafeCell::new(value),
        }
    }

    /// The value, consuming the lock.
    pub fn into_inner(self) -> T {
        self.value.into_inner()
    }
}

impl<T: Default> Default for RwLock<T> {
    fn default() -> Self {
        RwLock::new(T::default())
    }
}

impl<T: ?Sized> RwLock<T> {
    /// Locks for reading, suspending the task (or parking the thread) while
    /// a writer holds the lock or waits for it. Fails only with
    /// `DeadlineExceeded`, when the deadline of an enclosing `with_deadline`
    /// scope passes first.
    pub fn read(&self) -> Result<RwLockReadGuard<'_, T>, WaitError> {
        self.read_until(None)
    }

    /// Like [`read`](Self::read), giving up with `TimedOut` at `deadline`.
    pub fn read_until(
        &self,
        deadline: Option<Instant>,
    ) -> Result<RwLockReadGuard<'_, T>, WaitError> {
        let st = self.state.value();
        let s = st.load(Ordering::Relaxed);
        if s & (WRITER | READERS) < READERS
            && st
                .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            return Ok(RwLockReadGuard { lock: self });
        }
        self.read_slow(deadline)
    }

    #[cold]
    fn read_slow(&self, deadline: Option<Instant>) -> Result<RwLockReadGuard<'_, T>, WaitError> {
        let st = self.state.value();
        let mut s = st.load(Ordering::Relaxed);
        loop {
            if s & WRITER == 0 {
                assert!(s & READERS != READERS, "too many readers of an RwLock");
                match st.compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed) {
                    Ok(_) => return Ok(RwLockReadGuard { lock: self }),
                    Err(now) => s = now,
                }
                continue;
            }
            // Say that we wait, so that the writer's unlock wakes us. (A
            // reader whose wait fails leaves the bit: a spare wake-up.)
            if s & READERS_WAITING == 0 {
                let with = s | READERS_WAITING;
                if let Err(now) =
                    st.compare_exchange_weak(s, with, Ordering::Relaxed, Ordering::Relaxed)
                {
                    s = now;
                    continue;
                }
                s = with;
            }
            // Readers leaving change the count while we queue: then the
            // wait returns `WouldBlock` and we look again.
            match wait::wait(
                self.state.queue(),
                s,
                deadline,
                WaitPolicy::Uninterruptible,
                WaitKind::RwLock,
            ) {
                Ok(()) | Err(WaitError::WouldBlock) => {}
                Err(e) => return Err(e),
            }
            s = st.load(Ordering::Relaxed);
        }
    }

    /// Locks for writing, suspending the task (or parking the thread) while
    /// other writers or readers hold the lock. Fails only with
    /// `DeadlineExceeded`, when the deadline of an enclosing `with_deadline`
    /// scope passes first; a writer that fails leaves no trace (the readers
    /// it held back go in).
    pub fn write(&self) -> Result<RwLockWriteGuard<'_, T>, WaitError> {
        self.write_until(None)
    }

    /// Like [`write`](Self::write), giving up with `TimedOut` at `deadline`.
    pub fn write_until(
        &self,
        deadline: Option<Instant>,
    ) -> Result<RwLockWriteGuard<'_, T>, WaitError> {
        let writers = self.writers.lock_until(deadline)?;
        let st = self.state.value();
        // We are the one writer that may claim the lock: no new reader
        // enters from here on.
        let prev = st.fetch_or(WRITER, Ordering::Acquire);
        debug_assert_eq!(prev & WRITER, 0, "two writers claimed an RwLock");
        if prev & READERS == 0 {
            return Ok(RwLockWriteGuard {
                lock: self,
                _writers: writers,
            });
        }
        // Readers are inside: wait for the last one to leave. If we give
        // up, or unwind, the claim is withdrawn (and dropped before
        // `writers`, which lets the next writer in only after that).
        let claim = WriterClaim(self);
        loop {
            // Read the sequence before the count: a last reader that
            // leaves after our look at the count bumps it after.
            let seq = self.drained.value().load(Ordering::Acquire);
            if st.load(Ordering::Acquire) & READERS == 0 {
                std::mem::forget(claim);
                return Ok(RwLockWriteGuard {
                    lock: self,
                    _writers: writers,
                });
            }
            match wait::wait(
                self.drained.queue(),
                seq,
                deadline,
                WaitPolicy::Uninterruptible,
                WaitKind::RwLock,
            ) {
                Ok(()) | Err(WaitError::WouldBlock) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Locks for reading if no writer holds the lock or waits for it,
    /// without waiting.
    pub fn try_read(&self) -> Option<RwLockReadGuard<'_, T>> {
        let st = self.state.value();
        let mut s = st.load(Ordering::Relaxed);
        loop {
            if s & WRITER != 0 {
                return None;
            }
            assert!(s & READERS != READERS, "too many readers of an RwLock");
            match st.compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Some(RwLockReadGuard { lock: self }),
                Err(now) => s = now,
            }
        }
    }

    /// Locks for writing if nobody holds the lock, without waiting.
    pub fn try_write(&self) -> Option<RwLockWriteGuard<'_, T>> {
        let writers = self.writers.try_lock()?;
        // `WRITER` is clear, since we hold `writers`, and so is
        // `READERS_WAITING`, which is only set with it.
        self.state
            .value()
            .compare_exchange(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| RwLockWriteGuard {
                lock: self,
                _writers: writers,
            })
    }

    /// The value, through a unique borrow (no locking needed).
    pub fn get_mut(&mut self) -> &mut T {
        // SAFETY: `&mut self` is unique: no guard exists, nor any other
        // access to the value.
        self.value.with_mut(|v| unsafe { &mut *v })
    }

    fn read_unlock(&self) {
        let prev = self.state.value().fetch_sub(1, Ordering::Release);
        if prev & WRITER != 0 && prev & READERS == 1 {
            // The last reader out, with a writer waiting for it.
            self.drained.value().fetch_add(1, Ordering::Release);
            self.drained.wake_one();
        }
    }

    /// Clears `WRITER` (at a write unlock, or when a claiming writer gives
    /// up) and wakes the readers it held back.
    fn clear_writer(&self) {
        let prev = self
            .state
            .value()
            .fetch_and(!(WRITER | READERS_WAITING), Ordering::Release);
        if prev & READERS_WAITING != 0 {
            self.state.wake_all();
        }
    }
}

/// A writer's claim on the lock while it waits for readers to leave;
/// withdrawn on drop.
struct WriterClaim<'a, T: ?Sized>(&'a RwLock<T>);

impl<T: ?Sized> Drop for WriterClaim<'_, T> {
    fn drop(&mut self) {
        self.0.clear_writer();
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for RwLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.try_read() {
            Some(g) => f.debug_struct("RwLock").field("value", &&*g).finish(),
            None => f
                .debug_struct("RwLock")
                .field("value", &"<locked>")
                .finish(),
        }
    }
}

impl<T: ?Sized> Deref for RwLockReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard proves a read lock: no writer has `&mut T`.
        self.lock.value.with(|v| unsafe { &*v })
    }
}

impl<T: ?Sized> Drop for RwLockReadGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.read_unlock();
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for RwLockReadGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized> Deref for RwLockWriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard proves the write lock: nobody else has access.
        self.lock.value.with(|v| unsafe { &*v })
    }
}

impl<T: ?Sized> DerefMut for RwLockWriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard proves the write lock, and `&mut self` that
        // this is the only access through it.
        self.lock.value.with_mut(|v| unsafe { &mut *v })
    }
}

impl<T: ?Sized> Drop for RwLockWriteGuard<'_, T> {
    fn drop(&mut self) {
        // The readers go first; then `_writers` drops, and lets the next
        // writer claim the lock.
        self.lock.clear_writer();
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for RwLockWriteGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}
