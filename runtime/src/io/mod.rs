//! Waiting for file descriptors: the I/O layer under `net`.
//!
//! [`wait_fd`] is bthread's `fd_wait`/`fd_timedwait` for a caller's own
//! non-blocking fd; the sockets of [`net`](crate::net) are built on
//! `IoSource` (`source.rs`), which waits the same way; `blocking.rs` is
//! the pool of plain threads behind `task::spawn_blocking` and name
//! lookups. Each wait suspends only the calling task, and ends with the
//! task's deadline scope, `interrupt` and `stop`; on a plain thread it
//! blocks the thread.
//!
//! # Interrupts and std's retry loops
//!
//! An interrupt ends the current wait with an error of kind
//! `ErrorKind::Interrupted`, whose inner error is `WaitError::Interrupted`.
//! std's `read_exact`, `write_all`, `read_to_end` and `read_to_string`
//! retry on that kind; spindle's sockets override those four, and their
//! loops end on an interrupt of a wait (they still retry a syscall's
//! `EINTR`). A wrapper with a loop of its own that calls `read` (such as
//! `BufReader::read_exact` on a long read) still retries: to end such a
//! call, `stop` the task (sticky: every later wait fails with an error of
//! kind `Other`) or give it a deadline scope.
//!
//! # Telling the task's ends of a wait from the socket's errors
//!
//! Every `io::Error` that spindle makes for a wait's end carries the
//! [`WaitError`] as its inner error; [`wait_error`] reads it, and answers
//! only for the ends that come from the task's side (its deadline scope,
//! `interrupt`, `stop`), so that a caller can tell "this request was cut
//! short" from "the socket failed or timed out".

pub(crate) mod blocking;
#[cfg(all(test, loom))]
mod loom_io;
pub(crate) mod source;

use crate::driver::Direction;
use crate::error::{JoinError, WaitError};
use crate::sched;
use source::{is_wait_interrupt, poll_thread, register, wait_readiness};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::time::Instant;

pub use crate::meta::activity::Interest;

/// Waits until `fd` is ready for `interest`, or `deadline`
/// (bthread's `fd_timedwait`): the calling task only, or the calling
/// thread outside a task.
///
/// The fd must be non-blocking for the caller's next syscall not to block
/// the worker; `wait_fd` itself works with any fd that `poll(2)` takes.
/// Readiness counts hang-ups and errors: a read end whose writer has
/// closed is ready at once.
///
/// # Errors
///
/// - `deadline` passed: `ErrorKind::TimedOut` (inner `WaitError::TimedOut`);
///   the task's deadline scope passed: `TimedOut` with
///   `WaitError::DeadlineExceeded` inside;
/// - `interrupt`: `ErrorKind::Interrupted`; `stop`: `ErrorKind::Other`
///   (see the module docs);
/// - a closed fd: `EBADF`; an fd epoll refuses (a regular file) is ready.
///
/// Like `poll(2)` it may return before the fd is ready (rarely): the
/// caller's syscall then fails with `EAGAIN` again, and it waits again.
///
/// A task yields to its worker's other tasks once every 128 calls that
/// complete without waiting (`wait_fd` on an fd that is ready, a socket
/// call, an unbounded channel send: `docs/io.md`, "The cooperative
/// budget"), so that a loop over an fd that is always ready does not hold
/// its worker.
pub fn wait_fd(
    fd: BorrowedFd<'_>,
    interest: Interest,
    deadline: Option<Instant>,
) -> io::Result<()> {
    let r = wait_fd_inner(fd, interest, deadline);
    // Every call spends the cooperative budget, as a socket call does
    // (`source.rs`).
    sched::coop::spend();
    r
}

/// [`wait_fd`], without the cooperative budget.
fn wait_fd_inner(
    fd: BorrowedFd<'_>,
    interest: Interest,
    deadline: Option<Instant>,
) -> io::Result<()> {
    let raw = fd.as_raw_fd();
    if ready_now(raw, interest)? {
        return Ok(());
    }
    if sched::suspendable_task().is_none() {
        return poll_thread(raw, interest, deadline);
    }
    // Registered for this wait only, as a duplicate of the fd: the
    // caller's fd may be closed or handed elsewhere as soon as we return,
    // and may be one of our sockets, registered already (a second
    // registration of the same number would fail, and could make that
    // socket's own first registration fail).
    // SAFETY: `fd` is open for the caller's borrow; the duplicate is a
    // new fd that we own.
    let dup = unsafe { BorrowedFd::borrow_raw(raw) }.try_clone_to_owned()?;
    let registration = match register(dup.as_raw_fd(), interest == Interest::ReadWrite) {
        Ok(Some(r)) => r,
        Ok(None) => return Err(io::Error::other("only a task registers an fd")),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => return Ok(()),
        Err(e) => return Err(e),
    };
    let dir = match interest {
        Interest::Writable => Direction::Write,
        Interest::Readable | Interest::ReadWrite => Direction::Read,
    };
    // Readiness at registration comes as an event (edge-triggered epoll
    // reports the current state on add), delivered once we switch out.
    let seq = registration.readiness().sequence(dir);
    let result = wait_readiness(&registration, dir, seq, deadline, (raw, interest));
    // Deregistered while the fd (or its duplicate) is open, then closed.
    drop(registration);
    drop(dup);
    result
}

/// A select's registration of a caller's fd (`sync::Select::readable`):
/// a duplicate of it, registered in the task's poller for the select's
/// wait, and the readiness sequence seen before the last look. Dropped, it
/// deregisters the duplicate, then closes it.
pub(crate) struct SelectRegistration {
    // Field order: deregistered before the duplicate closes.
    registration: crate::driver::IoRegistration,
    _dup: std::os::fd::OwnedFd,
    dir: Direction,
    seq: u32,
}

impl SelectRegistration {
    /// The queue the readiness of the select's direction is woken through.
    pub(crate) fn queue(&self) -> &crate::meta::wait_queue::WaitQueue {
        self.registration.readiness().queue(self.dir)
    }

    /// The sequence to wait while (its value when the fd was not ready).
    pub(crate) fn sequence(&self) -> u32 {
        self.seq
    }
}

/// Registers `fd` for a select's wait in this task's poller (as
/// [`wait_fd`] does for its own): `Ok(None)` if it is ready (or cannot be
/// polled: its operation reports that), else the registration.
pub(crate) fn register_for_select(
    fd: BorrowedFd<'_>,
    interest: Interest,
) -> io::Result<Option<SelectRegistration>> {
    let dup = fd.try_clone_to_owned()?;
    let registration = match register(dup.as_raw_fd(), interest == Interest::ReadWrite) {
        Ok(Some(r)) => r,
        Ok(None) => return Err(io::Error::other("only a task registers an fd")),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => return Ok(None),
        Err(e) => return Err(e),
    };
    let dir = match interest {
        Interest::Writable => Direction::Write,
        Interest::Readable | Interest::ReadWrite => Direction::Read,
    };
    // The sequence, then the look: readiness that comes after the look
    // moves the sequence, which the registration's link checks.
    let seq = registration.readiness().sequence(dir);
    if ready_now(fd.as_raw_fd(), interest)? {
        return Ok(None);
    }
    Ok(Some(SelectRegistration {
        registration,
        _dup: dup,
        dir,
        seq,
    }))
}

/// What ended the wait behind `e`, when the task's side ended it: the
/// deadline of an enclosing [`with_deadline`](crate::with_deadline) scope
/// (`DeadlineExceeded`), [`interrupt`](crate::interrupt) (`Interrupted`)
/// or [`stop`](crate::stop) (`Stopped`). `None` for everything else: the
/// socket's own errors, and the operation's own timeout (a socket's
/// `set_read_timeout`, `wait_fd`'s deadline, `recv_timeout`: kind
/// `TimedOut`, which the caller chose and may retry).
///
/// It works on every `io::Error` that spindle makes for a wait's end,
/// from `net`, [`wait_fd`], and the conversions of spindle's errors
/// (`WaitError`, `SleepError`, `JoinError`, the channels' receive
/// errors), whose inner error (`get_ref()`) is the `WaitError` (a
/// `JoinError::DeadlineExceeded` for a join).
///
/// ```
/// use std::time::{Duration, Instant};
///
/// let (_tx, mut rx) = spindle::sync::watch::channel(0u32);
/// let soon = Instant::now() + Duration::from_millis(5);
/// let r: std::io::Result<()> = spindle::with_deadline(soon, || Ok(rx.changed()?));
/// let e = r.unwrap_err();
/// assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
/// assert_eq!(spindle::io::wait_error(&e), Some(spindle::WaitError::DeadlineExceeded));
///
/// let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
/// assert_eq!(spindle::io::wait_error(&refused), None);
/// ```
pub fn wait_error(e: &io::Error) -> Option<WaitError> {
    let inner = e.get_ref()?;
    let ended = match (
        inner.downcast_ref::<WaitError>(),
        inner.downcast_ref::<JoinError>(),
    ) {
        (Some(w), _) => *w,
        (None, Some(JoinError::DeadlineExceeded)) => WaitError::DeadlineExceeded,
        _ => return None,
    };
    match ended {
        WaitError::DeadlineExceeded | WaitError::Interrupted | WaitError::Stopped => Some(ended),
        // The operation's own timeout, and a wait that never began.
        WaitError::TimedOut | WaitError::WouldBlock => None,
    }
}

/// Whether `fd` is ready now (`ppoll` without waiting).
pub(crate) fn ready_now(fd: RawFd, interest: Interest) -> io::Result<bool> {
    let events = match interest {
        Interest::Readable => libc::POLLIN,
        Interest::Writable => libc::POLLOUT,
        Interest::ReadWrite => libc::POLLIN | libc::POLLOUT,
    };
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    let zero = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    loop {
        // SAFETY: `pfd` and `zero` are valid for the call; one fd.
        let n = unsafe { libc::ppoll(&mut pfd, 1, &zero, std::ptr::null()) };
        if n >= 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    if pfd.revents & libc::POLLNVAL != 0 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    Ok(pfd.revents != 0)
}

/// `read_exact` that ends on an interrupt of its wait (module docs).
pub(crate) fn read_exact(
    mut read: impl FnMut(&mut [u8]) -> io::Result<usize>,
    mut buf: &mut [u8],
) -> io::Result<()> {
    while !buf.is_empty() {
        match read(buf) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "failed to fill whole buffer",
                ))
            }
            Ok(n) => buf = &mut buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted && !is_wait_interrupt(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `write_all` that ends on an interrupt of its wait (module docs).
pub(crate) fn write_all(
    mut write: impl FnMut(&[u8]) -> io::Result<usize>,
    mut buf: &[u8],
) -> io::Result<()> {
    while !buf.is_empty() {
        match write(buf) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "failed to write whole buffer",
                ))
            }
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted && !is_wait_interrupt(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `read_to_end` that ends on an interrupt of its wait (module docs).
pub(crate) fn read_to_end(
    mut read: impl FnMut(&mut [u8]) -> io::Result<usize>,
    out: &mut Vec<u8>,
) -> io::Result<usize> {
    let start = out.len();
    let mut chunk = [0u8; 8192];
    loop {
        match read(&mut chunk) {
            Ok(0) => return Ok(out.len() - start),
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted && !is_wait_interrupt(&e) => {}
            Err(e) => return Err(e),
        }
    }
}

/// `read_to_string` that ends on an interrupt of its wait (module docs).
/// On invalid UTF-8 nothing is appended, as std.
pub(crate) fn read_to_string(
    read: impl FnMut(&mut [u8]) -> io::Result<usize>,
    out: &mut String,
) -> io::Result<usize> {
    let mut bytes = Vec::new();
    // The read's own error first, as std.
    let n = read_to_end(read, &mut bytes)?;
    let s = String::from_utf8(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        )
    })?;
    out.push_str(&s);
    Ok(n)
}
