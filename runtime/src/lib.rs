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
//! # What blocks a worker
//!
//! A started task stays on its worker thread, so whatever blocks the
//! *thread* stops every task of that worker until it returns: std's locks
//! and channels (and libraries built on them), `std::thread::sleep`, and
//! blocking syscalls (std's sockets and files, DNS lookups, blocking FFI).
//! A `std::sync::Mutex` held across a [`sleep`] and wanted by another task
//! of the same worker deadlocks that worker for good. Use [`sync`]'s locks
//! and channels, [`sleep`], [`net`] and [`io::wait_fd`] instead, and run
//! the rest on the blocking pool with [`task::spawn_blocking`]. The stall
//! watchdog's warning (a `tracing` event) names a task that holds its
//! worker too long and says a blocking call is the likely cause.
//! `thread_local!` is per worker thread, shared by its tasks; use
//! [`task_local!`] for a value per task.
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
#![warn(missing_docs)]

// Other targets stop here, with one clear error, rather than deep inside
// libc (tests/linux_only.rs checks it).
#[cfg(not(target_os = "linux"))]
compile_error!(
    "spindle runs on Linux only: its workers park on futexes, its sockets wait in epoll, and its task stacks are mmap'd with guard pages through Linux's own calls."
);

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
// Driver: the I/O pollers, fd readiness, parking a worker in its poller.
mod driver;
// Scheduler: `TaskControl`, `TaskGroup`, idle protocol, watchdog.
mod sched;
// Wait: `Butex`, deadline scopes, interrupts.
mod wait;
// I/O: fd readiness waits, the blocking pool (its public part is `io`).
pub mod io;
// Public layers.
mod dump;
mod future;
mod join_set;
pub mod net;
mod runtime;
mod scope;
pub mod signal;
pub mod sync;
pub mod task;
mod time;

pub use dump::{TaskDump, TaskInfo, TaskState, WaitKind};
pub use error::{JoinError, NoSuchTask, PanicPayload, SetWorkersError, SleepError, WaitError};
pub use id::TaskId;
pub use join_set::{JoinNext, JoinSet};
pub use runtime::{
    global_runtime, Builder, EnterGuard, Handle, Runtime, RuntimeStats, WorkerStats,
    DEFAULT_STACK_SIZE,
};
pub use scope::{scope, Scope, ScopedJoinHandle};
pub use stack::{stack_guard_regions, MIN_STACK_SIZE};
pub use task::{current, spawn, spawn_urgent, yield_now, JoinHandle};
pub use time::{
    current_deadline, interrupt, is_stopped, sleep, sleep_until, stop, usleep, with_deadline,
};
pub use wait::Butex;

/// Declares per-task storage: keys of type [`task::LocalKey`], one value
/// per task, in `thread_local!`'s shape.
///
/// ```
/// use std::cell::Cell;
/// spindle::task_local! {
///     static REQUEST_ID: Cell<u64> = Cell::new(0);
/// }
/// let rt = spindle::Runtime::builder().workers(1).build().unwrap();
/// rt.block_on(|| {
///     REQUEST_ID.with(|id| id.set(7));
///     let child = spindle::spawn(|| REQUEST_ID.with(|id| id.get()));
///     assert_eq!(child.join().unwrap(), 0); // a child starts afresh
///     assert_eq!(REQUEST_ID.with(|id| id.get()), 7);
/// });
/// ```
#[macro_export]
macro_rules! task_local {
    () => {};
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = $init:expr; $($rest:tt)*) => {
        $(#[$attr])*
        $vis static $name: $crate::task::LocalKey<$t> = $crate::task::LocalKey::new({
            fn init() -> $t {
                $init
            }
            init
        });
        $crate::task_local!($($rest)*);
    };
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = $init:expr) => {
        $crate::task_local!($(#[$attr])* $vis static $name: $t = $init;);
    };
}

/// The README's code blocks, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// `docs/getting-started.md`'s code blocks, compiled as doctests (and run,
/// those that end).
#[cfg(doctest)]
#[doc = include_str!("../../docs/getting-started.md")]
pub struct GettingStartedDoctests;
