//! The synchronization primitives protocol code uses: `std`'s, or loom's
//! under `--cfg loom`.
//!
//! Atomics, mutexes, threads and the futex come from
//! [`spindle_parking::loom`] (one shim for all of spindle). This module adds
//! the one thing that shim lacks, an [`UnsafeCell`] with loom's closure API,
//! so that loom also checks every access to a slot's payload for data races.

pub(crate) use spindle_parking::loom::hint::spin_loop;
pub(crate) use spindle_parking::loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
pub(crate) use spindle_parking::loom::sync::{Mutex, MutexGuard};
pub(crate) use spindle_parking::loom::thread;
pub(crate) use spindle_parking::Futex;

#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

/// `std::cell::UnsafeCell` behind loom's closure API (`with_mut`), so that
/// the same code compiles against both.
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    /// Runs `f` with a raw pointer to the contents. Dereferencing it is the
    /// caller's responsibility, exactly as with `std::cell::UnsafeCell::get`.
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// Locks `m`, ignoring poisoning.
///
/// No mutex in this crate is held while user code runs (callbacks and their
/// destructors run outside every lock), so a poisoned lock can only mean a
/// panic in our own bookkeeping, which leaves the protected data consistent
/// (every critical section either completes or changes nothing).
#[inline]
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}
