//! The synchronization primitives protocol code uses: `std`'s, or loom's
//! under `--cfg loom`.
//!
//! Atomics, mutexes, threads, the futex and an [`UnsafeCell`] with loom's
//! closure API (so that loom also checks the accesses to a slot's payload)
//! come from [`spindle_parking::loom`], the one shim for all of spindle;
//! this module re-exports what the timer uses.

pub(crate) use spindle_parking::loom::hint::spin_loop;
pub(crate) use spindle_parking::loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
pub(crate) use spindle_parking::loom::sync::Mutex;
pub(crate) use spindle_parking::loom::thread;
pub(crate) use spindle_parking::Futex;

pub(crate) use spindle_parking::loom::cell::UnsafeCell;
pub(crate) use spindle_parking::loom::lock;
