//! Synchronization primitives from `std`, or from `loom` under `--cfg loom`.
//!
//! Protocol code in spindle imports its atomics, mutexes and threads from
//! here, never from `std` directly, so that the same source is what loom
//! model-checks. This module is public so that the crates above (timer,
//! runtime) share one shim instead of writing their own.

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
