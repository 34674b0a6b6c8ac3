//! spindle: an M:N runtime of stackful tasks with an integrated timer.
//!
//! Many tasks (green threads with their own stacks) run on a few worker
//! threads. Inside a task you write ordinary blocking code — [`sleep`],
//! [`JoinHandle::join`], [`Butex::wait`], locking a [`sync::Mutex`] — and only
//! the task blocks; its worker runs others meanwhile. The design follows
//! bRPC's bthread (see `docs/design.md`):
//!
//! - [`Runtime`] is a `TaskControl`: worker threads, each a `TaskGroup` with
//!   a work-stealing deque, a remote queue and a parking lot slot;
//! - tasks are corosensei coroutines on pooled, guard-paged stacks;
//! - one shared `spindle_timer::TimerThread` wakes sleeping tasks by putting
//!   them back on their worker's remote queue (an idle worker ends its own
//!   tasks' sleeps itself, which is what makes them accurate);
//! - [`Butex`] is the one wait primitive; everything that blocks is built on it.
//!
//! ```
//! let rt = spindle::Runtime::builder().workers(2).build().unwrap();
//! let sum = rt.block_on(|| {
//!     let hs: Vec<_> = (0..10u64).map(|i| spindle::spawn(move || i * i)).collect();
//!     hs.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
//! });
//! assert_eq!(sum, 285);
//! ```
//!
//! # Safety model
//!
//! `spawn` is safe, so spindle must be sound for any safe code: a task that
//! has started runs on the same worker thread for the rest of its life (only
//! never-run tasks are stolen), so its thread-local storage never changes
//! under it. See `docs/safety.md`. The auto traits are promised as follows:
//!
//! ```
//! fn send_sync<T: Send + Sync>() {}
//! send_sync::<spindle::Runtime>();
//! send_sync::<spindle::JoinHandle<u32>>();
//! // For every T, even one that is neither Send nor Sync: the handle holds
//! // no T, and spawn makes one only for a T that is Send.
//! send_sync::<spindle::JoinHandle<std::rc::Rc<u8>>>();
//! send_sync::<spindle::Butex>();
//! send_sync::<spindle::TaskId>();
//! ```
//!
//! A closure that is not `Send` cannot be spawned (it may start on another
//! worker):
//!
//! ```compile_fail
//! let rc = std::rc::Rc::new(1);
//! spindle::spawn(move || drop(rc));
//! ```
//!
//! nor can one return a value that is not `Send`:
//!
//! ```compile_fail
//! spindle::spawn(|| std::rc::Rc::new(1));
//! ```
//!
//! and a [`sync::Mutex`] shares its value between threads only if the value
//! may move between them:
//!
//! ```compile_fail
//! fn sync<T: Sync>() {}
//! sync::<spindle::sync::Mutex<std::rc::Rc<u8>>>();
//! ```
#![deny(unsafe_op_in_unsafe_fn)]

// The layers, bottom to top (see docs/design.md and tests/layers.rs, which
// holds the direction): each uses only its own layer and those listed
// before it.
//
// Base: the loom shim, errors and task ids.
mod error;
mod id;
mod loom;
// Stacks: `TaskStack`, the pools, overflow reporting.
mod stack;
// Task state: `TaskMeta`, the task table, the seam.
mod meta;
// Scheduler: `TaskControl`, `TaskGroup`, idle protocol, watchdog.
mod sched;
// Wait: `Butex`, deadline scopes, interrupts.
mod wait;
// I/O: fd readiness waits, the blocking pool (its public part is `io`).
pub mod io;
// Public layers.
pub mod net;
mod runtime;
pub mod sync;
pub mod task;
mod time;

pub use error::{JoinError, NoSuchTask, SetWorkersError, SleepError, WaitError};
pub use id::TaskId;
pub use runtime::{global_runtime, Builder, Runtime, RuntimeStats, DEFAULT_STACK_SIZE};
pub use stack::{stack_guard_regions, MIN_STACK_SIZE};
pub use task::{current, spawn, spawn_urgent, yield_now, JoinHandle};
pub use time::{
    current_deadline, interrupt, is_stopped, sleep, sleep_until, stop, usleep, with_deadline,
};
pub use wait::Butex;
