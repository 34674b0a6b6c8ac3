//! Parking a worker in its poller, and waking it there.
//!
//! A worker with fds registered parks by blocking in its poller
//! (`Poller::poll` with [`PollWait::Park`](super::PollWait::Park)) instead
//! of on its ParkingLot, and a producer that must wake it calls its
//! [`PollWaker`] (a `mio::Waker`, an eventfd; an emulation in the loom
//! models). [`PollParking`] holds, per worker, the flag that says it is
//! parked there and its waker, so that the waker's syscall is made only
//! for a worker actually in its poller.
//!
//! The two halves are a store-buffering handshake, whose other side is the
//! caller's: the worker sets its flag, fences, then blocks only if the
//! caller's `still_idle` check (its lot's state has not moved) holds; a
//! producer moves that state (a `SeqCst` RMW), then, in [`unpark`], fences
//! and wakes the worker if it sees the flag. Either the worker sees the
//! move, or the producer sees the flag (`sched/idle.rs` describes the whole
//! protocol; `sched/loom_idle.rs` checks it, through this code).
//!
//! [`unpark`]: PollParking::unpark

use crate::loom::sync::atomic::{fence, AtomicBool, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::OnceLock;

/// What wakes a worker parked in its poller: its `mio::Waker` (an
/// emulation in the loom models).
pub(crate) trait PollWaker: Send + Sync + std::fmt::Debug {
    fn wake(&self);
}

/// Per worker of a runtime: whether it is parked in its poller, and the
/// waker that ends that park; see the module docs.
#[derive(Debug)]
pub(crate) struct PollParking {
    /// Per worker: set while it parks in its poller.
    in_poll: Box<[AtomicBool]>,
    /// Per worker: its poller's waker, once it has a poller.
    wakers: Box<[OnceLock<Box<dyn PollWaker>>]>,
}

impl PollParking {
    /// The slots of at most `max_workers` workers, none with a poller.
    pub(crate) fn new(max_workers: usize) -> Self {
        PollParking {
            in_poll: (0..max_workers).map(|_| AtomicBool::new(false)).collect(),
            wakers: (0..max_workers).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Gives worker `w` a poller, woken by `waker`; before any of its fds
    /// is registered.
    pub(crate) fn set_waker(&self, w: usize, waker: Box<dyn PollWaker>) {
        let _ = self.wakers[w].set(waker);
    }

    /// Worker `w` parks in its poller: publishes that it is there, fences,
    /// and runs `poll` (a blocking poll) only if `still_idle` (read after
    /// the fence) says that no producer has moved on since the worker's
    /// last look for work.
    #[inline]
    pub(crate) fn park(&self, w: usize, still_idle: impl FnOnce() -> bool, poll: impl FnOnce()) {
        self.in_poll[w].store(true, Relaxed);
        fence(SeqCst);
        if still_idle() {
            poll();
        }
        self.in_poll[w].store(false, Relaxed);
    }

    /// After a producer's `SeqCst` RMW that a parking worker's `still_idle`
    /// reads: wakes worker `w` through its waker if it is parked in its
    /// poller. Returns whether it made the wake-up.
    #[inline]
    pub(crate) fn unpark(&self, w: usize) -> bool {
        fence(SeqCst);
        if self.in_poll[w].load(Relaxed) {
            if let Some(waker) = self.wakers[w].get() {
                waker.wake();
                return true;
            }
        }
        false
    }

    /// As [`unpark`](Self::unpark), for every worker parked in its poller
    /// (the runtime stops).
    pub(crate) fn unpark_all(&self) {
        fence(SeqCst);
        for (flag, waker) in self.in_poll.iter().zip(self.wakers.iter()) {
            if let (true, Some(waker)) = (flag.load(Relaxed), waker.get()) {
                waker.wake();
            }
        }
    }
}
