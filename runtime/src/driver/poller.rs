//! One I/O poller per worker: where fd readiness becomes woken tasks.
//!
//! A [`Poller`] is a `mio::Poll` (edge-triggered epoll) and a `mio::Waker`.
//! Its owner (a worker) makes it when one of its tasks first waits for an
//! fd. The fd is registered there once, for both directions, with a token
//! naming its readiness slot (`readiness.rs`), and stays there until its
//! handle drops (an [`IoRegistration`], which deregisters before the fd is
//! closed).
//!
//! The owner polls, with a [`PollWait`]: without blocking (`NoWait`), or
//! blocking until an event, the waker or an instant (`Park`), which is
//! how a worker with fds registered parks (`park.rs`). An event bumps the
//! readiness sequences and hands each task it wakes to the function the
//! caller of the poll passes (the scheduler's `make_ready`): the poller
//! knows nothing of where tasks are queued.

use super::park::PollWaker;
use super::readiness::{self, IoReadiness, SlotKey, CLOSED_READ, CLOSED_WRITE};
use crate::loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use crate::loom::sync::Mutex;
use crate::meta::TaskRef;
use std::cell::RefCell;
use std::collections::HashSet;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token, Waker};

/// The token of the worker's waker (no slot has it: indices are 32 bits).
const WAKER_TOKEN: Token = Token(usize::MAX);
/// Events taken per poll.
const EVENTS: usize = 256;
/// Below this, a blocking poll waits with `ppoll` on the epoll fd (ns
/// resolution) instead of `epoll_wait` (whole ms), then takes the events
/// without blocking: an idle worker parks until just before its tasks'
/// next sleep ends, and must not oversleep it by up to a millisecond.
const FINE_TIMEOUT: Duration = Duration::from_millis(2);

/// How long a poll may block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PollWait {
    /// Not at all: take the events there are.
    NoWait,
    /// Until an event, the poller's waker, or the instant if any: the
    /// poller's owner parks in it.
    Park(Option<Instant>),
}

/// The part of a poller that registrations hold: they may be dropped on
/// any thread, after the worker is gone.
#[derive(Debug)]
pub(crate) struct PollerShared {
    registry: Registry,
    /// Fds registered now.
    registered: AtomicUsize,
    /// Set when the worker stops: nobody polls this poller any more.
    closed: AtomicBool,
    /// The slots of the fds registered here (for the stop: see
    /// [`Poller::close`]).
    slots: Mutex<HashSet<u64>>,
}

impl PollerShared {
    /// How many fds are registered in the poller now.
    #[inline]
    pub(crate) fn registered(&self) -> usize {
        self.registered.load(Relaxed)
    }
}

/// A worker's poller; see the module docs. Used by its worker only.
#[derive(Debug)]
pub(crate) struct Poller {
    poll: RefCell<Poll>,
    events: RefCell<Events>,
    shared: Arc<PollerShared>,
}

impl PollWaker for Waker {
    fn wake(&self) {
        if let Err(error) = Waker::wake(self) {
            tracing::error!(%error, "could not wake a worker parked in its poller");
        }
    }
}

impl Poller {
    /// A new poller and the waker that interrupts its blocking polls.
    pub(crate) fn new() -> io::Result<(Poller, Waker)> {
        let poll = Poll::new()?;
        let waker = Waker::new(poll.registry(), WAKER_TOKEN)?;
        let registry = poll.registry().try_clone()?;
        let poller = Poller {
            poll: RefCell::new(poll),
            events: RefCell::new(Events::with_capacity(EVENTS)),
            shared: Arc::new(PollerShared {
                registry,
                registered: AtomicUsize::new(0),
                closed: AtomicBool::new(false),
                slots: Mutex::new(HashSet::new()),
            }),
        };
        Ok((poller, waker))
    }

    /// What its registrations share (for the count of its fds).
    pub(crate) fn shared(&self) -> &Arc<PollerShared> {
        &self.shared
    }

    /// The worker stops: its registrations must move (see
    /// [`IoRegistration::is_live`]). The tasks waiting on them are handed
    /// to `wake`.
    pub(crate) fn close(&self, wake: impl Fn(TaskRef)) {
        self.shared.closed.store(true, SeqCst);
        // Tasks of other runtimes may wait on fds registered here: wake
        // them to register elsewhere. (A waiter that checked `is_live`
        // before the store above loaded its sequence before it too, and
        // the bump below moves it.)
        let slots: Vec<u64> = crate::loom::lock(&self.shared.slots)
            .iter()
            .copied()
            .collect();
        for token in slots {
            if let Some(slot) = readiness::lookup(SlotKey::from_token(token)) {
                slot.deliver(true, true, 0, &wake);
            }
        }
    }

    /// Whether any fd is registered here.
    pub(crate) fn has_registrations(&self) -> bool {
        self.shared.registered.load(Relaxed) > 0
    }

    /// Polls once, blocking as `wait` says. Delivers every event to its
    /// readiness slot, and hands each task it wakes to `wake`.
    pub(crate) fn poll(&self, wait: PollWait, wake: impl Fn(TaskRef)) {
        let mut poll = self.poll.borrow_mut();
        let mut events = self.events.borrow_mut();
        let timeout = match wait {
            PollWait::NoWait => Some(Duration::ZERO),
            PollWait::Park(None) => None,
            PollWait::Park(Some(until)) => {
                let left = until.saturating_duration_since(Instant::now());
                if left < FINE_TIMEOUT {
                    wait_readable(poll.as_raw_fd(), left);
                    Some(Duration::ZERO)
                } else {
                    // mio rounds up to whole ms: round down instead and
                    // wake early (the worker then parks for the rest).
                    Some(Duration::from_millis(left.as_millis() as u64))
                }
            }
        };
        if let Err(error) = poll.poll(&mut events, timeout) {
            if error.kind() != io::ErrorKind::Interrupted {
                tracing::error!(%error, "a worker's poll failed");
            }
            return;
        }
        for event in events.iter() {
            if event.token() == WAKER_TOKEN {
                continue;
            }
            let Some(slot) = readiness::lookup(SlotKey::from_token(event.token().0 as u64)) else {
                continue; // deregistered since: see readiness.rs
            };
            let error = event.is_error();
            let read_closed = event.is_read_closed() || error;
            let write_closed = event.is_write_closed() || error;
            let closed = if read_closed { CLOSED_READ } else { 0 }
                | if write_closed { CLOSED_WRITE } else { 0 };
            slot.deliver(
                event.is_readable() || read_closed,
                event.is_writable() || write_closed,
                closed,
                &wake,
            );
        }
    }
}

/// Waits up to `timeout` for the epoll fd `epfd` to have events, without
/// taking them (`ppoll`, ns resolution).
fn wait_readable(epfd: RawFd, timeout: Duration) {
    let mut pfd = libc::pollfd {
        fd: epfd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: `pfd` and `ts` are valid for the call; one fd; no sigmask.
    unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
}

/// An fd registered in a worker's poller; dropping it deregisters the fd,
/// which must still be open then.
#[derive(Debug)]
pub(crate) struct IoRegistration {
    fd: RawFd,
    key: SlotKey,
    readiness: &'static IoReadiness,
    poller: Arc<PollerShared>,
}

impl Poller {
    /// Registers `fd` here. With `either`, an event of either direction
    /// wakes the read waiters (for one wait on both).
    pub(crate) fn register(&self, fd: RawFd, either: bool) -> io::Result<IoRegistration> {
        let shared = &self.shared;
        let (key, readiness) = readiness::allocate().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                "too many fds registered with spindle's pollers",
            )
        })?;
        readiness.reset(either);
        let token = Token(key.token() as usize);
        let interest = Interest::READABLE | Interest::WRITABLE;
        if let Err(e) = shared
            .registry
            .register(&mut SourceFd(&fd), token, interest)
        {
            readiness::free(key);
            return Err(e);
        }
        shared.registered.fetch_add(1, Relaxed);
        crate::loom::lock(&shared.slots).insert(key.token());
        Ok(IoRegistration {
            fd,
            key,
            readiness,
            poller: Arc::clone(shared),
        })
    }
}

impl IoRegistration {
    /// The fd's readiness sequences and waiters.
    pub(crate) fn readiness(&self) -> &'static IoReadiness {
        self.readiness
    }

    /// Whether its poller is still polled: false once its worker has
    /// stopped (its runtime shut down while the fd lived on). The owner
    /// then registers the fd afresh, with the worker now waiting.
    pub(crate) fn is_live(&self) -> bool {
        !self.poller.closed.load(SeqCst)
    }

    /// Takes the fd out of its poller now (dropping does it too).
    pub(crate) fn deregister(&self) {
        // Fails only if it is out already, or the fd was closed (a
        // caller's bug: the kernel then dropped the registration itself).
        let _ = self.poller.registry.deregister(&mut SourceFd(&self.fd));
    }
}

impl Drop for IoRegistration {
    fn drop(&mut self) {
        self.deregister();
        crate::loom::lock(&self.poller.slots).remove(&self.key.token());
        readiness::free(self.key);
        self.poller.registered.fetch_sub(1, Relaxed);
    }
}
