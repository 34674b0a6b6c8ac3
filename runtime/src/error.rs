//! The errors of spindle's public API.
//!
//! One policy across spindle's crates: every error enum, and every public
//! stats or options struct that may grow, is `#[non_exhaustive]`, so that
//! a new variant or field is no breaking change (match with a `_` arm;
//! change options by assigning fields of `Default::default()`). Enums
//! without payload derive `Debug, Clone, Copy, PartialEq, Eq`. Every error
//! implements `std::error::Error + Send + Sync + 'static` and says what went
//! wrong in its `Display`, so that one function can `?` a sleep, a lock
//! and a join into a `Box<dyn Error + Send + Sync>`:
//! [`JoinError::Panicked`] wraps the panic payload ([`PanicPayload`]) to
//! that end, as tokio's `JoinError` does. The errors of waits convert into
//! one another where nothing is lost ([`SleepError`] into [`WaitError`])
//! and into `std::io::Error` (the kinds the I/O layer uses for the same
//! outcomes, the spindle error inside), and say what ended them through
//! helpers such as `is_deadline_exceeded()`.

use std::any::Any;
use std::fmt;

/// What a task panicked with, as [`JoinError::Panicked`] holds it.
///
/// The payload is a `Box<dyn Any + Send>`, which need not be `Sync`; this
/// wrapper is, because through a shared reference it hands out only its
/// message and values of `Sync` types. Take the payload itself with
/// [`into_inner`](Self::into_inner) (to `resume_unwind` it, say).
pub struct PanicPayload(Box<dyn Any + Send + 'static>);

// SAFETY: no method taking `&self` exposes the payload but as `&T` for a
// `T: Sync` (`downcast_ref`) or as `&str` (`message`, through the same);
// the payload itself moves out only by value.
unsafe impl Sync for PanicPayload {}

impl PanicPayload {
    /// Wraps what `catch_unwind` caught.
    pub fn new(payload: Box<dyn Any + Send + 'static>) -> Self {
        PanicPayload(payload)
    }

    /// The panic's message: the payload when it is a `&str` or a `String`
    /// (what `panic!` makes).
    pub fn message(&self) -> Option<&str> {
        if let Some(s) = self.downcast_ref::<&'static str>() {
            Some(s)
        } else {
            self.downcast_ref::<String>().map(String::as_str)
        }
    }

    /// The payload, if it is a `T`.
    pub fn downcast_ref<T: Any + Sync>(&self) -> Option<&T> {
        self.0.downcast_ref::<T>()
    }

    /// The payload, unwrapped.
    pub fn into_inner(self) -> Box<dyn Any + Send + 'static> {
        self.0
    }
}

impl fmt::Debug for PanicPayload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.message().unwrap_or("<non-string panic payload>"), f)
    }
}

/// Why [`JoinHandle::join`](crate::JoinHandle::join) returned no value.
#[non_exhaustive]
pub enum JoinError {
    /// The task panicked; the payload is what it panicked with.
    Panicked(PanicPayload),
    /// The join waited inside a [`with_deadline`](crate::with_deadline)
    /// scope whose deadline passed. The task goes on running; the handle is
    /// consumed, so the task is detached.
    DeadlineExceeded,
    /// The task was cancelled before it finished: the runtime shut down,
    /// or (rarely, and logged) the guard region of its stack could not be
    /// installed at its first run, so it never ran.
    Cancelled,
    /// A task called `join` on its own handle, which could never return.
    /// The handle is consumed, so the task is detached.
    SelfJoin,
    /// The joining task was stopped ([`stop`](crate::stop)) while it
    /// waited, or before. The task joined goes on running (unless it is a
    /// child the stop reached too); the handle is consumed, so it is
    /// detached.
    Stopped,
}

impl JoinError {
    /// Whether the task panicked.
    pub fn is_panic(&self) -> bool {
        matches!(self, JoinError::Panicked(_))
    }

    /// Whether the join waited in a `with_deadline` scope whose deadline
    /// passed (the task goes on, detached).
    pub fn is_deadline_exceeded(&self) -> bool {
        matches!(self, JoinError::DeadlineExceeded)
    }

    /// Whether the task was cancelled before it finished.
    pub fn is_cancelled(&self) -> bool {
        matches!(self, JoinError::Cancelled)
    }

    /// Whether the join ended because the joining task was stopped.
    pub fn is_stopped(&self) -> bool {
        matches!(self, JoinError::Stopped)
    }

    /// The panic payload, if the task panicked.
    pub fn into_panic(self) -> Option<Box<dyn Any + Send + 'static>> {
        match self {
            JoinError::Panicked(p) => Some(p.into_inner()),
            JoinError::DeadlineExceeded
            | JoinError::Cancelled
            | JoinError::SelfJoin
            | JoinError::Stopped => None,
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
            JoinError::Panicked(p) => f.debug_tuple("Panicked").field(p).finish(),
            JoinError::DeadlineExceeded => f.write_str("DeadlineExceeded"),
            JoinError::Cancelled => f.write_str("Cancelled"),
            JoinError::SelfJoin => f.write_str("SelfJoin"),
            JoinError::Stopped => f.write_str("Stopped"),
        }
    }
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinError::Panicked(p) => write!(
                f,
                "task panicked: {}",
                p.message().unwrap_or("<non-string panic payload>")
            ),
            JoinError::DeadlineExceeded => f.write_str("deadline exceeded while joining a task"),
            JoinError::Cancelled => f.write_str("the runtime shut down before the task finished"),
            JoinError::SelfJoin => f.write_str("a task cannot join itself"),
            JoinError::Stopped => f.write_str("the joining task was stopped"),
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
#[non_exhaustive]
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

impl SleepError {
    /// Whether an enclosing `with_deadline` scope's deadline ended the sleep.
    pub fn is_deadline_exceeded(&self) -> bool {
        matches!(self, SleepError::DeadlineExceeded)
    }

    /// Whether [`interrupt`](crate::interrupt) ended the sleep.
    pub fn is_interrupted(&self) -> bool {
        matches!(self, SleepError::Interrupted)
    }

    /// Whether the task has been [`stop`](crate::stop)ped.
    pub fn is_stopped(&self) -> bool {
        matches!(self, SleepError::Stopped)
    }
}

/// Every way a sleep ends early is a way a wait ends early.
impl From<SleepError> for WaitError {
    fn from(e: SleepError) -> WaitError {
        match e {
            SleepError::Interrupted => WaitError::Interrupted,
            SleepError::Stopped => WaitError::Stopped,
            SleepError::DeadlineExceeded => WaitError::DeadlineExceeded,
        }
    }
}

/// As the I/O layer reports the same ends of a wait (see
/// `From<WaitError>`); the inner error is the [`WaitError`].
impl From<SleepError> for std::io::Error {
    fn from(e: SleepError) -> std::io::Error {
        WaitError::from(e).into()
    }
}

/// Why [`Butex::wait`](crate::Butex::wait) (and the sync primitives built on
/// it) returned without being woken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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

impl WaitError {
    /// Whether an enclosing `with_deadline` scope's deadline ended the wait.
    pub fn is_deadline_exceeded(&self) -> bool {
        matches!(self, WaitError::DeadlineExceeded)
    }

    /// Whether the wait's own deadline passed.
    pub fn is_timed_out(&self) -> bool {
        matches!(self, WaitError::TimedOut)
    }

    /// Whether [`interrupt`](crate::interrupt) ended the wait (a stop is
    /// [`is_stopped`](Self::is_stopped), never this: the same in every
    /// error type that has both).
    pub fn is_interrupted(&self) -> bool {
        matches!(self, WaitError::Interrupted)
    }

    /// Whether the task has been [`stop`](crate::stop)ped.
    pub fn is_stopped(&self) -> bool {
        matches!(self, WaitError::Stopped)
    }
}

/// What the I/O layer reports for the same outcomes: `TimedOut` for
/// either deadline, `Interrupted` for an interrupt, `Other` for a stop
/// (never `Interrupted`, which std's retry loops would swallow for good);
/// the wait's error is the inner error (`get_ref()` downcasts to it).
impl From<WaitError> for std::io::Error {
    fn from(e: WaitError) -> std::io::Error {
        let kind = match e {
            WaitError::DeadlineExceeded | WaitError::TimedOut => std::io::ErrorKind::TimedOut,
            WaitError::Interrupted => std::io::ErrorKind::Interrupted,
            WaitError::Stopped | WaitError::WouldBlock => std::io::ErrorKind::Other,
        };
        std::io::Error::new(kind, e)
    }
}

/// A deadline is `TimedOut`, anything else `Other`; the join's error is
/// the inner error.
impl From<JoinError> for std::io::Error {
    fn from(e: JoinError) -> std::io::Error {
        let kind = match e {
            JoinError::DeadlineExceeded => std::io::ErrorKind::TimedOut,
            JoinError::Panicked(_)
            | JoinError::Cancelled
            | JoinError::SelfJoin
            | JoinError::Stopped => std::io::ErrorKind::Other,
        };
        std::io::Error::new(kind, e)
    }
}

/// Why [`Runtime::set_workers`](crate::Runtime::set_workers) failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SetWorkersError {
    /// Workers can only be added, never removed (as `bthread_setconcurrency`).
    Shrink {
        /// The runtime's number of workers.
        current: usize,
        /// The smaller number asked for.
        requested: usize,
    },
    /// More workers than a runtime supports.
    TooMany {
        /// The number asked for.
        requested: usize,
        /// The most a runtime can have (256).
        max: usize,
    },
    /// The runtime is shutting down.
    ShuttingDown,
    /// The OS refused a new worker thread (the workers started before it
    /// stay: [`Runtime::workers`](crate::Runtime::workers) says how many).
    Spawn {
        /// The kind of the OS's error.
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
