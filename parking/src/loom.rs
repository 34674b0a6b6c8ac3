//! Synchronization primitives from `std`, or from `loom` under `--cfg loom`.
//!
//! Protocol code in spindle imports its atomics, mutexes, threads and cells
//! from here, never from `std` directly, so that the same source is what
//! loom model-checks. This module is public so that the crates above
//! (timer, runtime) share one shim instead of writing their own: each
//! re-exports what it uses from a `loom` module of its own.

#[cfg(not(loom))]
pub use std::{hint, sync, thread};

#[cfg(loom)]
pub use loom::{hint, sync, thread};

/// Runs `f` as a loom model under `--cfg loom`, or once, plainly, otherwise.
///
/// Lets one test body serve as both a stress test and a model.
pub fn model<F>(f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    #[cfg(loom)]
    loom::model(f);
    #[cfg(not(loom))]
    f();
}

pub mod cell {
    //! [`UnsafeCell`] with loom's closure API (`with`, `with_mut`): under
    //! `--cfg loom` loom's own, which checks each access for data races;
    //! otherwise `std`'s behind the same API, at no cost.

    #[cfg(loom)]
    pub use loom::cell::UnsafeCell;

    /// `std::cell::UnsafeCell` behind loom's closure API, so that the same
    /// code compiles against both.
    #[cfg(not(loom))]
    #[derive(Debug, Default)]
    #[repr(transparent)]
    pub struct UnsafeCell<T: ?Sized>(std::cell::UnsafeCell<T>);

    #[cfg(not(loom))]
    impl<T> UnsafeCell<T> {
        /// A cell holding `value`.
        pub const fn new(value: T) -> Self {
            UnsafeCell(std::cell::UnsafeCell::new(value))
        }

        /// The value, consuming the cell.
        pub fn into_inner(self) -> T {
            self.0.into_inner()
        }
    }

    #[cfg(not(loom))]
    impl<T: ?Sized> UnsafeCell<T> {
        /// Runs `f` with a pointer for reading the contents. Dereferencing
        /// it is the caller's responsibility, as with
        /// `std::cell::UnsafeCell::get`.
        #[inline(always)]
        pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }

        /// Runs `f` with a pointer for writing the contents; as
        /// [`with`](Self::with).
        #[inline(always)]
        pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }
}

/// Locks `m`, ignoring poisoning. spindle holds no lock while user code
/// runs (user code runs on tasks and in timer callbacks, outside every
/// lock), so a poisoned lock can only mean a panic in spindle's own
/// bookkeeping, whose critical sections complete or change nothing: the
/// data is consistent.
#[inline]
pub fn lock<T: ?Sized>(m: &sync::Mutex<T>) -> sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
