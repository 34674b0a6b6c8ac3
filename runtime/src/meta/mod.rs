//! Task state: what a task is.
//!
//! Every task has a [`TaskMeta`] in the process-wide task table
//! ([`table`]); a [`TaskRef`] points at it, and a [`TaskId`] names it. A meta
//! holds the task's coroutine (on its stack), its body while it waits for
//! its first run and its result once it ends ([`slots`]), its join and
//! sleep queues and the node of the wait it is in ([`wait_queue`]), and the
//! seam through which it tells its worker what to do after it switches out
//! ([`seam`]), its place in a structured family ([`family`]), and what it
//! is doing, for task dumps ([`activity`]). This
//! layer imports nothing above it: the scheduler, the waits and the public
//! API are built on it.
//!
//! Every field is private and reached through methods. Ownership of the
//! fields follows the task, and each method's `# Safety` says which owner
//! may call it:
//!
//! - *the holder*: whoever holds the task — the queue it sits in, the
//!   worker running it, the wait list it sleeps in — owns its scheduling
//!   fields (coroutine, body, reserved stack, errno).
//!   Hand-offs are ordered by the queues' release/acquire operations;
//! - *the task itself* owns its yielder, its deadline scope, its
//!   task-local values ([`locals`]) and the `tracing` spans it took off its
//!   worker as it switched out (`sched/spans.rs`; the worker re-enters
//!   those itself when it cancels the task, which then never resumes);
//! - *its home worker* owns the links of its list of started tasks;
//! - fields written at spawn, before the task is published, are read-only
//!   afterwards (its runtime, stack size, name);
//! - the interrupt state is under the meta's own lock, and the result slot
//!   is written once by the finishing task and read once by the joiner,
//!   ordered by the join queue ([`EndState`]) and `result_state`
//!   ([`ResultState`]).

pub(crate) mod activity;
mod coro;
pub(crate) mod family;
pub(crate) mod locals;
pub(crate) mod seam;
pub(crate) mod slots;
mod table;
mod task_meta;
pub(crate) mod wait_queue;

pub(crate) use crate::id::TaskId;
pub(crate) use coro::{bind, drop_cancelled, drop_contained, install_coroutine};
pub(crate) use table::{table, with_thread_slots, TaskTable};
#[cfg(all(test, loom))]
pub(crate) use task_meta::leak_for_model;
pub(crate) use task_meta::{
    describe_for_overflow, EndState, InterruptState, ResultState, TaskMeta, TaskRef, NO_HOME,
};
