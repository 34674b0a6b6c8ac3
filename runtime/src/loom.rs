//! The crate's one loom shim: what protocol code synchronizes with.
//!
//! Atomics, mutexes and threads come from `std`, or from loom under
//! `--cfg loom` (through [`spindle_parking::loom`], the shim the three
//! crates share), and so does [`UnsafeCell`], whose closure API
//! (`with`/`with_mut`, as loom's) lets loom check each access to a cell
//! for data races (where an accessor hands out a reference, loom sees the
//! moment it is made). Protocol code imports these from here, so the code
//! loom checks is the code that runs; `tests/layers.rs` holds that no other
//! module takes its atomics from `std`.
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

/// std's flag, under loom too, for what a signal handler sets: a handler
/// runs outside any loom model, and signal-hook's `flag::register` takes
/// std's type. Nothing else uses it.
pub(crate) mod signal_handler {
    pub(crate) use std::sync::atomic::{AtomicBool, Ordering};
}

pub(crate) use spindle_parking::loom::thread;

pub(crate) use spindle_parking::loom::cell::UnsafeCell;
pub(crate) use spindle_parking::loom::lock;
