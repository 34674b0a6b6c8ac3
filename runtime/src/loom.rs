//! The crate's one loom shim: what protocol code synchronizes with.
//!
//! Atomics, mutexes and threads come from `std`, or from loom under
//! `--cfg loom` (through [`spindle_parking::loom`], the shim the three
//! crates share), and so does [`UnsafeCell`], whose closure API
//! (`with`/`with_mut`, as loom's) lets loom check every access to a cell for
//! data races. Protocol code imports these from here, never from `std`
//! (`tests/layers.rs` holds that), so the code loom checks is the code that
//! runs.
//!
//! A loom type may only be touched inside a loom model: under `--cfg loom`
//! only the `loom_*` models run, and nothing builds a runtime.

pub(crate) mod sync {
    pub(crate) use spindle_parking::loom::sync::{Mutex, MutexGuard};

    pub(crate) mod atomic {
        pub(crate) use spindle_parking::loom::sync::atomic::{
            fence, AtomicBool, AtomicIsize, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
            Ordering,
        };
    }
}

pub(crate) use spindle_parking::loom::thread;

/// Locks `m`, ignoring poisoning. No lock of the runtime is held while user
/// code runs (user code runs on tasks, and every critical section is the
/// runtime's own bookkeeping, which completes or changes nothing), so a
/// poisoned lock carries no broken invariant.
#[inline]
pub(crate) fn lock<T: ?Sized>(m: &sync::Mutex<T>) -> sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

/// `std::cell::UnsafeCell` behind loom's closure API, so that the same code
/// compiles against both and loom sees every access.
#[cfg(not(loom))]
#[derive(Debug, Default)]
#[repr(transparent)]
pub(crate) struct UnsafeCell<T: ?Sized>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }
}

#[cfg(not(loom))]
impl<T: ?Sized> UnsafeCell<T> {
    /// Runs `f` with a pointer for reading the contents. Dereferencing it is
    /// the caller's responsibility, as with `std::cell::UnsafeCell::get`.
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Runs `f` with a pointer for writing the contents; as [`with`](Self::with).
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}
