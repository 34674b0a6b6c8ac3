//! [`IoSource`]: a non-blocking fd whose waits suspend only the task.
//!
//! Every socket of `net` is an `IoSource` around the std type, switched
//! to non-blocking. An operation is tried first; on `EAGAIN` the caller
//! waits for the fd's readiness and tries again:
//!
//! - a task registers the fd in its worker's poller on its first wait
//!   (once: tasks of other workers then wait on that registration), loads
//!   the direction's sequence before each try, and waits on it
//!   (`driver/readiness.rs`), honouring its deadline scope, `interrupt`, `stop`
//!   and the socket's timeout;
//! - a plain thread (or a task that cannot switch out, as while it
//!   unwinds) blocks in `ppoll` for the fd, honouring its own deadline
//!   scope and the timeout.
//!
//! Every operation spends one unit of the scheduler's cooperative budget
//! (`sched/coop.rs`), as an unbounded channel send does: a task whose
//! peer always has data ready (or room) never meets `EAGAIN`, nor does one
//! that reads on after a short read while data keeps coming (its wait
//! finds the sequence moved and returns at once), and either would
//! otherwise hold its worker for good. Every 128 operations on a worker,
//! the running task yields to the worker's other tasks. An operation that
//! did wait spends its unit too: telling a wait that switched out from one
//! that returned at once would cost more than the spare yield it saves.
//!
//! How a wait's end becomes an `io::Error` is [`wait_error`].

use super::Interest;
use crate::driver::Direction;
use crate::driver::IoRegistration;
use crate::error::WaitError;
use crate::loom::sync::atomic::{
    AtomicPtr, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use crate::loom::sync::Mutex;
use crate::meta::activity::WaitKind;
use crate::meta::wait_queue::WaitPolicy;
use crate::sched;
use crate::wait::{self, deadline::effective_deadline};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::ptr::{self, NonNull};
use std::time::{Duration, Instant};

/// An fd and its registration; see the module docs.
#[derive(Debug)]
pub(crate) struct IoSource<T: AsRawFd> {
    /// The fd's registration, null before the first wait of a task. It is
    /// replaced (under `retired`'s lock) only if its poller's worker has
    /// stopped, its runtime shut down while the socket lived on.
    registration: AtomicPtr<IoRegistration>,
    /// Registrations replaced so: kept (a task may still read one) until
    /// the source drops, and only then owned again (`Box::from_raw`). The
    /// lock also serializes registering.
    retired: Mutex<Vec<Retired>>,
    io: T,
    /// The socket's timeouts in ns, 0 for none.
    read_timeout: AtomicU64,
    write_timeout: AtomicU64,
    /// Per direction: `DRAINED | seq` after a short read or write of a
    /// stream, begun at sequence `seq` (see [`IoSource::do_stream_io`]).
    drained: [AtomicU64; 2],
}

/// A replaced registration, owned by its source (from `Box::into_raw`).
#[derive(Debug)]
struct Retired(NonNull<IoRegistration>);

// SAFETY: a `Retired` owns a boxed `IoRegistration`, which is `Send`;
// only its source's drop turns it back into the box.
unsafe impl Send for Retired {}

/// The flag of `IoSource::drained`.
const DRAINED: u64 = 1 << 32;

impl<T: AsRawFd> IoSource<T> {
    /// Wraps `io`, which the caller has made non-blocking.
    pub(crate) fn new(io: T) -> Self {
        IoSource {
            registration: AtomicPtr::new(ptr::null_mut()),
            retired: Mutex::new(Vec::new()),
            io,
            read_timeout: AtomicU64::new(0),
            write_timeout: AtomicU64::new(0),
            drained: [AtomicU64::new(0), AtomicU64::new(0)],
        }
    }

    pub(crate) fn get_ref(&self) -> &T {
        &self.io
    }

    /// Sets the timeout of one direction, as std's `set_read_timeout`:
    /// `Some(Duration::ZERO)` is an error.
    pub(crate) fn set_timeout(&self, dir: Direction, t: Option<Duration>) -> io::Result<()> {
        let ns = match t {
            None => 0,
            Some(d) if d.is_zero() => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "cannot set a 0 duration timeout",
                ))
            }
            Some(d) => u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1),
        };
        self.timeout_cell(dir).store(ns, Relaxed);
        Ok(())
    }

    /// The timeout of one direction.
    pub(crate) fn timeout(&self, dir: Direction) -> Option<Duration> {
        match self.timeout_cell(dir).load(Relaxed) {
            0 => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    fn timeout_cell(&self, dir: Direction) -> &AtomicU64 {
        match dir {
            Direction::Read => &self.read_timeout,
            Direction::Write => &self.write_timeout,
        }
    }

    /// Runs `op` until it does not fail with `WouldBlock`, waiting for
    /// `dir` readiness in between, until the socket's timeout.
    #[inline]
    pub(crate) fn do_io<R>(
        &self,
        dir: Direction,
        op: impl FnMut(&T) -> io::Result<R>,
    ) -> io::Result<R> {
        let timeout = self.timeout(dir);
        self.do_io_until(dir, timeout.map(|t| (t, None)), |_| false, op)
    }

    /// [`do_io`](Self::do_io) for a read or write of `len` bytes on a TCP
    /// stream. One that moves fewer bytes has drained the socket's receive
    /// queue (or filled its send buffer), as tokio also reasons for epoll:
    /// the next call on that direction, if no event came since, waits for
    /// one without the syscall that would fail with `EAGAIN`. An event
    /// that came during the short call has moved the sequence, which was
    /// read before it, so nothing is missed. Never after a hang-up or an
    /// error (the data and the FIN may come in one event, and no other
    /// would follow), and never for a read of 0 bytes. (Not for Unix
    /// streams, whose reads also stop short at a message carrying
    /// credentials or fds.)
    #[inline]
    pub(crate) fn do_stream_io(
        &self,
        dir: Direction,
        len: usize,
        op: impl FnMut(&T) -> io::Result<usize>,
    ) -> io::Result<usize> {
        let timeout = self.timeout(dir);
        let short = move |n: &usize| *n > 0 && *n < len;
        self.do_io_until(dir, timeout.map(|t| (t, None)), short, op)
    }

    /// [`do_io`](Self::do_io) in the shape of
    /// [`do_stream_io`](Self::do_stream_io), without its shortcut (for
    /// Unix streams).
    #[inline]
    pub(crate) fn do_len_io(
        &self,
        dir: Direction,
        _len: usize,
        op: impl FnMut(&T) -> io::Result<usize>,
    ) -> io::Result<usize> {
        self.do_io(dir, op)
    }

    /// As [`do_io`](Self::do_io), with a deadline of its own: `timeout`
    /// from the first wait (or the instant given with it); `drains` says
    /// whether a result drained the direction (see
    /// [`do_stream_io`](Self::do_stream_io)).
    ///
    /// Every call spends one unit of the cooperative budget, however it
    /// ends (see the module docs).
    pub(crate) fn do_io_until<R>(
        &self,
        dir: Direction,
        timeout: Option<(Duration, Option<Instant>)>,
        drains: impl Fn(&R) -> bool,
        op: impl FnMut(&T) -> io::Result<R>,
    ) -> io::Result<R> {
        let r = self.try_and_wait(dir, timeout, drains, op);
        sched::coop::spend();
        r
    }

    /// [`do_io_until`](Self::do_io_until)'s loop: try, and on `EAGAIN`
    /// wait for readiness.
    fn try_and_wait<R>(
        &self,
        dir: Direction,
        timeout: Option<(Duration, Option<Instant>)>,
        drains: impl Fn(&R) -> bool,
        mut op: impl FnMut(&T) -> io::Result<R>,
    ) -> io::Result<R> {
        let mut deadline = timeout.and_then(|(_, at)| at);
        let drained = &self.drained[dir as usize];
        loop {
            // The sequence is read before the try: see driver/readiness.rs.
            let registration = self.registration();
            let seq = registration.map(|r| r.readiness().sequence(dir));
            let known_empty = seq.is_some_and(|s| drained.load(Relaxed) == DRAINED | u64::from(s))
                && registration.is_some_and(|r| !r.readiness().is_closed(dir));
            if !known_empty || sched::suspendable_task().is_none() {
                match op(&self.io) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Ok(r) => {
                        if let (Some(s), true) = (seq, drains(&r)) {
                            drained.store(DRAINED | u64::from(s), Relaxed);
                        }
                        return Ok(r);
                    }
                    r => return r,
                }
            }
            if deadline.is_none() {
                deadline = timeout.map(|(t, _)| Instant::now().checked_add(t).unwrap_or(far()));
            }
            if sched::suspendable_task().is_none() {
                poll_thread(self.io.as_raw_fd(), dir.into(), deadline)?;
                continue;
            }
            match (seq, registration) {
                (Some(seq), Some(r)) if r.is_live() => {
                    wait_readiness(r, dir, seq, deadline, (self.io.as_raw_fd(), dir.into()))?
                }
                // Registered now: try again, its sequence read first.
                _ => self.register(registration)?,
            }
        }
    }

    /// The registration, if any.
    fn registration(&self) -> Option<&IoRegistration> {
        // SAFETY: a non-null pointer is a registration that lives as long
        // as `self` (replaced ones are kept in `retired`).
        unsafe { self.registration.load(Acquire).as_ref() }
    }

    /// Registers the fd in this worker's poller, if it is still
    /// registered as `seen` (none yet, or in a stopped worker's poller).
    fn register(&self, seen: Option<&IoRegistration>) -> io::Result<()> {
        let mut retired = crate::loom::lock(&self.retired);
        let now = self.registration.load(Acquire);
        if now.cast_const() != seen.map_or(ptr::null(), |r| r as *const _) {
            return Ok(()); // somebody else registered it meanwhile
        }
        if let Some(old) = seen {
            // The stopped worker's epoll instance still has the fd:
            // deregister it there before it is registered afresh.
            old.deregister();
        }
        let r = register(self.io.as_raw_fd(), false)?
            .ok_or_else(|| io::Error::other("only a task registers an fd"))?;
        // A drained mark names the old slot's sequence.
        for d in &self.drained {
            d.store(0, Relaxed);
        }
        self.registration.store(Box::into_raw(Box::new(r)), Release);
        if let Some(old) = NonNull::new(now) {
            // Tasks may still read it: kept until the source drops.
            retired.push(Retired(old));
        }
        Ok(())
    }
}

impl<T: AsRawFd> Drop for IoSource<T> {
    fn drop(&mut self) {
        // Before `io` drops: the fd is deregistered while still open.
        let p = self.registration.swap(ptr::null_mut(), Acquire);
        let retired = std::mem::take(&mut *crate::loom::lock(&self.retired));
        for r in NonNull::new(p)
            .into_iter()
            .chain(retired.into_iter().map(|r| r.0))
        {
            // SAFETY: each came from `Box::into_raw` in `register` and is
            // owned by this source alone; `&mut self` says nobody reads it
            // any more.
            drop(unsafe { Box::from_raw(r.as_ptr()) });
        }
    }
}

/// Far enough to stand for "never" where a deadline overflows.
fn far() -> Instant {
    Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600)
}

/// Registers `fd` in the poller of the worker running this thread, made
/// if need be. `Ok(None)` on a thread that is not a worker. With `either`,
/// an event of either direction wakes the read waiters (for one wait on
/// both).
pub(crate) fn register(fd: RawFd, either: bool) -> io::Result<Option<IoRegistration>> {
    match sched::current_poller()? {
        Some(poller) => poller.register(fd, either).map(Some),
        None => Ok(None),
    }
}

/// A task's wait for the readiness of `dir` to move past `seq`: on `fd`
/// for `interest`, as the caller knows them (for dumps).
pub(crate) fn wait_readiness(
    r: &IoRegistration,
    dir: Direction,
    seq: u32,
    deadline: Option<Instant>,
    (fd, interest): (RawFd, Interest),
) -> io::Result<()> {
    let queue = r.readiness().queue(dir);
    let on = WaitKind::Fd { fd, interest };
    match wait::wait(queue, seq, deadline, WaitPolicy::Interruptible, on) {
        Ok(()) | Err(WaitError::WouldBlock) => Ok(()),
        Err(e) => Err(wait_error(e)),
    }
}

/// A plain thread's wait for `fd` to be ready for `interest`: `ppoll`
/// until `deadline` or the thread's deadline scope.
pub(crate) fn poll_thread(
    fd: RawFd,
    interest: Interest,
    deadline: Option<Instant>,
) -> io::Result<()> {
    let (deadline, by_scope) = effective_deadline(deadline);
    let events = match interest {
        Interest::Readable => libc::POLLIN,
        Interest::Writable => libc::POLLOUT,
        Interest::ReadWrite => libc::POLLIN | libc::POLLOUT,
    };
    loop {
        let left = match deadline {
            None => None,
            Some(d) => {
                let now = Instant::now();
                if now >= d {
                    return Err(wait_error(if by_scope {
                        WaitError::DeadlineExceeded
                    } else {
                        WaitError::TimedOut
                    }));
                }
                Some(d - now)
            }
        };
        let ts = left.map(|l| libc::timespec {
            tv_sec: l.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: libc::c_long::from(l.subsec_nanos() as i32),
        });
        let mut pfd = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const _);
        // SAFETY: `pfd` and `ts` are valid for the call; one fd; no sigmask.
        let n = unsafe { libc::ppoll(&mut pfd, 1, ts_ptr, std::ptr::null()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n > 0 {
            if pfd.revents & libc::POLLNVAL != 0 {
                return Err(io::Error::from_raw_os_error(libc::EBADF));
            }
            return Ok(());
        }
    }
}

impl From<Direction> for Interest {
    fn from(d: Direction) -> Interest {
        match d {
            Direction::Read => Interest::Readable,
            Direction::Write => Interest::Writable,
        }
    }
}

/// How a wait's end becomes an `io::Error`, its inner error the
/// [`WaitError`]: a deadline scope's or a timeout's end is `TimedOut`, an
/// interrupt's `Interrupted`, a stop's `Other` (never `Interrupted`, which
/// std's retry loops would swallow for good).
pub(crate) fn wait_error(e: WaitError) -> io::Error {
    e.into()
}

/// Whether `e` is the end of a wait by `interrupt` (not a syscall's
/// `EINTR`, which is retried).
pub(crate) fn is_wait_interrupt(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::Interrupted
        && e.get_ref()
            .and_then(|i| i.downcast_ref::<WaitError>())
            .is_some()
}
