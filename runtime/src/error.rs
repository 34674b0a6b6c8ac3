//! The errors of spindle's public API.
//!
//! Enums without payload derive `Debug, Clone, Copy, PartialEq, Eq`; every
//! error implements `std::error::Error + Send + 'static` and says what went
//! wrong in its `Display`, and all but [`JoinError`] are `Sync` too.
//! `JoinError::Panicked` holds the panic payload as `std::thread` gives it,
//! a `Box<dyn Any + Send>`, which is not `Sync` (a payload may be a `Cell`),
//! and hands it out by reference: so `JoinError` cannot be `Sync` either.
//! To put it in a `Box<dyn Error + Send + Sync>`, take the payload out
//! ([`JoinError::into_panic`]) or convert it to its message first.

use std::any::Any;
use std::fmt;

/// Why [`JoinHandle::join`](crate::JoinHandle::join) returned no value.
pub enum JoinError {
    /// The task panicked; the payload is what it panicked with.
    Panicked(Box<dyn Any + Send + 'static>),
    /// The join waited inside a [`with_deadline`](crate::with_deadline)
    /// scope whose deadline passed. The task goes on running; the handle is
    /// consumed, so the task is detached.
    DeadlineExceeded,
    /// The runtime shut down before the task finished.
    Cancelled,
    /// A task called `join` on its own handle, which could never return.
    /// The handle is consumed, so the task is detached.
    SelfJoin,
}

impl JoinError {
    /// Whether the task panicked.
    pub fn is_panic(&self) -> bool {
        matches!(self, JoinError::Panicked(_))
    }

    /// The panic payload, if the task panicked.
    pub fn into_panic(self) -> Option<Box<dyn Any + Send + 'static>> {
        match self {
            JoinError::Panicked(p) => Some(p),
            JoinError::DeadlineExceeded | JoinError::Cancelled | JoinError::SelfJoin => None,
        }
    }
}

/// The text of a panic payload, when it is a string.
pub(crate) fn panic_message(p: &(dyn Any + Send)) -> &str {
    if let Some(s) = p.downcast_ref::<&'static str>() {
        s
    } else if let Some(s) = p.downcast_ref::<String>() {
        s
    } else {
        "<non-string panic payload>"
    }
}

impl fmt::Debug for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinError::Panicked(p) => f
                .debug_tuple("Panicked")
                .field(&panic_message(&**p))
                .finish(),
            JoinError::DeadlineExceeded => f.write_str("DeadlineExceeded"),
            JoinError::Cancelled => f.write_str("Cancelled"),
            JoinError::SelfJoin => f.write_str("SelfJoin"),
        }
    }
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinError::Panicked(p) => write!(f, "task panicked: {}", panic_message(&**p)),
            JoinError::DeadlineExceeded => f.write_str("deadline exceeded while joining a task"),
            JoinError::Cancelled => f.write_str("the runtime shut down before the task finished"),
            JoinError::SelfJoin => f.write_str("a task cannot join itself"),
        }
    }
}

impl std::error::Error for JoinError {}

/// The task id passed to [`interrupt`](crate::interrupt) or
/// [`stop`](crate::stop) names no live task: it finished, or never existed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoSuchTask;

impl fmt::Display for NoSuchTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("no such task: it has finished or never existed")
    }
}

impl std::error::Error for NoSuchTask {}

/// Why a sleep ended before its time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SleepError {
    /// [`interrupt`](crate::interrupt) woke the task.
    Interrupted,
    /// The task has been [`stop`](crate::stop)ped.
    Stopped,
    /// The deadline of an enclosing [`with_deadline`](crate::with_deadline)
    /// scope passed.
    DeadlineExceeded,
}

impl fmt::Display for SleepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SleepError::Interrupted => "sleep interrupted",
            SleepError::Stopped => "sleep refused: the task is stopped",
            SleepError::DeadlineExceeded => "sleep cut short: deadline exceeded",
        })
    }
}

impl std::error::Error for SleepError {}

/// Why [`Butex::wait`](crate::Butex::wait) (and the sync primitives built on
/// it) returned without being woken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitError {
    /// The value was not the expected one: nothing to wait for.
    WouldBlock,
    /// The wait's own deadline passed.
    TimedOut,
    /// [`interrupt`](crate::interrupt) woke the task.
    Interrupted,
    /// The task has been [`stop`](crate::stop)ped.
    Stopped,
    /// The deadline of an enclosing [`with_deadline`](crate::with_deadline)
    /// scope passed.
    DeadlineExceeded,
}

impl fmt::Display for WaitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WaitError::WouldBlock => "the value was not the expected one",
            WaitError::TimedOut => "wait timed out",
            WaitError::Interrupted => "wait interrupted",
            WaitError::Stopped => "wait refused: the task is stopped",
            WaitError::DeadlineExceeded => "wait cut short: deadline exceeded",
        })
    }
}

impl std::error::Error for WaitError {}

/// Why [`Runtime::set_workers`](crate::Runtime::set_workers) failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetWorkersError {
    /// Workers can only be added, never removed (as `bthread_setconcurrency`).
    Shrink { current: usize, requested: usize },
    /// More workers than a runtime supports.
    TooMany { requested: usize, max: usize },
    /// The runtime is shutting down.
    ShuttingDown,
    /// The OS refused a new worker thread (the workers started before it
    /// stay: [`Runtime::workers`](crate::Runtime::workers) says how many).
    Spawn {
        kind: std::io::ErrorKind,
        /// The OS's error number, when it gave one.
        os_error: Option<i32>,
    },
}

impl fmt::Display for SetWorkersError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetWorkersError::Shrink { current, requested } => write!(
                f,
                "cannot shrink the runtime from {current} to {requested} workers: workers can only be added"
            ),
            SetWorkersError::TooMany { requested, max } => {
                write!(f, "{requested} workers requested, at most {max} are supported")
            }
            SetWorkersError::ShuttingDown => f.write_str("the runtime is shutting down"),
            SetWorkersError::Spawn { kind, os_error } => match os_error {
                Some(code) => write!(
                    f,
                    "cannot start a worker thread: {}",
                    std::io::Error::from_raw_os_error(*code)
                ),
                None => write!(f, "cannot start a worker thread: {kind}"),
            },
        }
    }
}

impl std::error::Error for SetWorkersError {}
