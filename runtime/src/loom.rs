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

/// std's atomics, under loom too, for counters kept only to be read by
/// `Runtime::stats` (the per-worker figures) and for the words only a task
/// dump reads (what a task waits on, `meta/activity.rs`; how long a dump's
/// walk held a worker): no protocol decides anything on them, so loom has
/// nothing to check there, and modelling them would only multiply the
/// states of the models whose paths bump them (a queue push, a ready-list
/// pop, the start of a wait). Nothing that synchronizes may use them.
pub(crate) mod stats {
    pub(crate) use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
}

pub(crate) use spindle_parking::loom::thread;

pub(crate) use spindle_parking::loom::cell::UnsafeCell;
pub(crate) use spindle_parking::loom::lock;

/// Waits until `done()`, for a hand-off a few instructions from its end
/// on another thread (a timer callback's last touch, a delivery still in
/// flight, a spawn between its check and its push): spins a hundred times,
/// then yields the CPU, which the other thread may be waiting for on a
/// machine of few cores. Under loom it yields at once, so that the model's
/// other threads run.
pub(crate) fn spin_until(mut done: impl FnMut() -> bool) {
    let mut spins = 0u32;
    while !done() {
        if spins < 100 && !cfg!(loom) {
            spins += 1;
            std::hint::spin_loop();
        } else {
            thread::yield_now();
        }
    }
}
