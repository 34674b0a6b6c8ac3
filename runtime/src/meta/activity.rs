//! What a task is doing, for task dumps: [`WaitOn`], and the words of a
//! meta that record it ([`Activity`]).
//!
//! A dump reads them from any thread while the task runs on, so they are
//! atomics, written where the task's state changes anyway and never read
//! on a hot path:
//!
//! - the task itself, as it begins a wait, stores what it waits on (and the
//!   wait's deadline) — [`Activity::begin_wait`];
//! - whoever queues it (a waker, its worker after a yield, a spawn) clears
//!   the word: a queued task is ready — [`Activity::ready`];
//! - that it runs is not recorded here: its worker's `running` word says so.
//!
//! The deadline is a second word, so a wait with one is written as a small
//! seqlock: the word goes to [`BUSY`], then the deadline, then the word
//! (release). A reader that sees the same word before and after reading the
//! deadline (and not `BUSY`) has a pair that belonged together, unless two
//! waits of the very same kind and fd began and ended in between (then the
//! deadline is the newer one's). The spawn time is a coarse clock reading
//! (`CLOCK_MONOTONIC_COARSE`: a few ns, no syscall), published last of what
//! spawn writes, so a dump skips a slot whose task is still being made.

// Atomics loom does not model (`loom::stats`): these words are part of no
// protocol (nothing waits on them), and models would only explore their
// stores.
use crate::loom::stats::{fence, AtomicU64, Ordering};
use spindle_timer::{deadline_ns, instant_of};
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// What [`io::wait_fd`](crate::io::wait_fd) waits for (and a socket wait
/// in a task dump). Defined here, below the I/O layer that re-exports it,
/// so that [`WaitKind`] can name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interest {
    /// Data to read, or the end of it (the peer closed, an error).
    Readable,
    /// Room to write, or an error.
    Writable,
    /// Either.
    ReadWrite,
}

/// What a waiting task waits on (`TaskState::Waiting` in a task dump).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitKind {
    /// [`Butex::wait`](crate::Butex::wait).
    Butex,
    /// [`sync::Mutex`](crate::sync::Mutex).
    Mutex,
    /// [`sync::Condvar`](crate::sync::Condvar).
    Condvar,
    /// [`sync::RwLock`](crate::sync::RwLock).
    RwLock,
    /// [`sync::Semaphore`](crate::sync::Semaphore).
    Semaphore,
    /// [`sync::Barrier`](crate::sync::Barrier) or a `CountdownEvent`.
    Barrier,
    /// [`sync::OnceCell`](crate::sync::OnceCell).
    OnceCell,
    /// A channel: `mpsc`, `oneshot`, `watch`, or a `Select` over them.
    Channel,
    /// A [`JoinHandle`](crate::JoinHandle), a [`JoinSet`](crate::JoinSet),
    /// the end of a [`scope`](crate::scope) or of `block_on`.
    Join,
    /// The readiness of an fd: a socket's, or [`io::wait_fd`](crate::io::wait_fd)'s.
    Fd {
        /// The fd.
        fd: RawFd,
        /// What for.
        interest: Interest,
    },
    /// Work on the blocking pool (`spawn_blocking`, a name lookup).
    Blocking,
    /// A future, in [`task::block_on_future`](crate::task::block_on_future).
    Future,
}

/// What a task's wait is for: a sleep, or a [`WaitKind`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitOn {
    /// `sleep`, `sleep_until`, `usleep`.
    Sleep,
    /// Anything else.
    Wait(WaitKind),
}

impl From<WaitKind> for WaitOn {
    #[inline(always)]
    fn from(kind: WaitKind) -> Self {
        WaitOn::Wait(kind)
    }
}

/// Word value: not in a wait (queued, running, or never run).
const NONE: u64 = 0;
/// Word value: a wait with a deadline is being recorded.
const BUSY: u64 = 1;
/// The low byte holds the kind; then an fd's interest (two bits) and
/// whether there is a deadline; the fd in the high half.
const KIND_MASK: u64 = 0xff;
const INTEREST_SHIFT: u32 = 8;
const HAS_DEADLINE: u64 = 1 << 10;

/// A [`WaitOn`] as its task's activity word holds it: made where the wait
/// is called (`WaitOn::word`, folded to a constant there), so that the
/// wait itself only stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WaitWord(u64);

impl WaitOn {
    /// The word of this wait (see [`WaitWord`]).
    #[inline(always)]
    pub(crate) const fn word(self) -> WaitWord {
        WaitWord(self.encode())
    }

    #[inline(always)]
    const fn encode(self) -> u64 {
        let kind = match self {
            WaitOn::Sleep => return 2,
            WaitOn::Wait(kind) => kind,
        };
        match kind {
            WaitKind::Butex => 3,
            WaitKind::Mutex => 4,
            WaitKind::Condvar => 5,
            WaitKind::RwLock => 6,
            WaitKind::Semaphore => 7,
            WaitKind::Barrier => 8,
            WaitKind::OnceCell => 9,
            WaitKind::Channel => 10,
            WaitKind::Join => 11,
            WaitKind::Fd { fd, interest } => {
                let interest = match interest {
                    Interest::Readable => 0,
                    Interest::Writable => 1,
                    Interest::ReadWrite => 2,
                };
                12 | (interest << INTEREST_SHIFT) | ((fd as u32 as u64) << 32)
            }
            WaitKind::Blocking => 13,
            WaitKind::Future => 14,
        }
    }

    fn decode(word: u64) -> Option<WaitOn> {
        let kind = match word & KIND_MASK {
            2 => return Some(WaitOn::Sleep),
            3 => WaitKind::Butex,
            4 => WaitKind::Mutex,
            5 => WaitKind::Condvar,
            6 => WaitKind::RwLock,
            7 => WaitKind::Semaphore,
            8 => WaitKind::Barrier,
            9 => WaitKind::OnceCell,
            10 => WaitKind::Channel,
            11 => WaitKind::Join,
            12 => WaitKind::Fd {
                fd: (word >> 32) as u32 as RawFd,
                interest: match (word >> INTEREST_SHIFT) & 3 {
                    0 => Interest::Readable,
                    1 => Interest::Writable,
                    _ => Interest::ReadWrite,
                },
            },
            13 => WaitKind::Blocking,
            14 => WaitKind::Future,
            _ => return None,
        };
        Some(WaitOn::Wait(kind))
    }
}

/// The activity words of one task (a field of its meta); see the module
/// docs.
#[derive(Debug)]
pub(crate) struct Activity {
    word: AtomicU64,
    deadline: AtomicU64,
}

impl Activity {
    pub(crate) fn new() -> Self {
        Activity {
            word: AtomicU64::new(NONE),
            deadline: AtomicU64::new(0),
        }
    }

    /// The task begins a wait on `on`, ending by `deadline` at the latest.
    /// Called by the task itself.
    #[inline]
    pub(crate) fn begin_wait(&self, on: WaitWord, deadline: Option<Instant>) {
        let word = on.0;
        match deadline {
            None => self.word.store(word, Ordering::Release),
            Some(d) => {
                self.word.store(BUSY, Ordering::Relaxed);
                fence(Ordering::Release);
                self.deadline.store(deadline_ns(d), Ordering::Relaxed);
                self.word.store(word | HAS_DEADLINE, Ordering::Release);
            }
        }
    }

    /// The task is queued to run: it waits for nothing.
    #[inline]
    pub(crate) fn ready(&self) {
        self.word.store(NONE, Ordering::Relaxed);
    }

    /// What the task waits on now, and the deadline of that wait; `None`
    /// if it waits for nothing (or kept changing while read).
    pub(crate) fn read(&self) -> Option<(WaitOn, Option<Instant>)> {
        for _ in 0..16 {
            let before = self.word.load(Ordering::Acquire);
            if before == BUSY {
                std::hint::spin_loop();
                continue;
            }
            let on = WaitOn::decode(before)?;
            if before & HAS_DEADLINE == 0 {
                return Some((on, None));
            }
            let d = self.deadline.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if self.word.load(Ordering::Relaxed) == before {
                return Some((on, instant_of(d)));
            }
        }
        None
    }
}

/// When a task was spawned (a field of its meta); see the module docs.
#[derive(Debug)]
pub(crate) struct SpawnTime(AtomicU64);

impl SpawnTime {
    /// A free slot's: none.
    pub(crate) fn new() -> Self {
        SpawnTime(AtomicU64::new(0))
    }

    /// Records the spawn time: the last of what spawn writes into the meta
    /// (release: a reader that sees it sees the rest).
    pub(crate) fn set_now(&self) {
        self.0.store(coarse_now_ns().max(1), Ordering::Release);
    }

    /// The task's age, `None` while its slot is free or it is being made.
    pub(crate) fn age(&self) -> Option<Duration> {
        match self.0.load(Ordering::Acquire) {
            0 => None,
            at => Some(Duration::from_nanos(coarse_now_ns().saturating_sub(at))),
        }
    }

    /// The slot is freed.
    pub(crate) fn clear(&self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

/// `CLOCK_MONOTONIC_COARSE` in nanoseconds: the kernel's last tick, read
/// from the vDSO without a syscall.
fn coarse_now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; the clock id is valid on
    // Linux, so the call cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn every_wait_reads_back_as_written() {
        let a = Activity::new();
        assert_eq!(a.read(), None);
        let d = Instant::now() + Duration::from_secs(3);
        let waits = [
            WaitKind::Butex,
            WaitKind::Mutex,
            WaitKind::Condvar,
            WaitKind::RwLock,
            WaitKind::Semaphore,
            WaitKind::Barrier,
            WaitKind::OnceCell,
            WaitKind::Channel,
            WaitKind::Join,
            WaitKind::Fd {
                fd: 1_000_000,
                interest: Interest::Readable,
            },
            WaitKind::Fd {
                fd: 0,
                interest: Interest::ReadWrite,
            },
            WaitKind::Fd {
                fd: i32::MAX,
                interest: Interest::Writable,
            },
            WaitKind::Blocking,
            WaitKind::Future,
        ];
        for on in std::iter::once(WaitOn::Sleep).chain(waits.map(WaitOn::Wait)) {
            a.begin_wait(on.word(), None);
            assert_eq!(a.read(), Some((on, None)));
            a.begin_wait(on.word(), Some(d));
            let (got, deadline) = a.read().expect("in a wait");
            assert_eq!(got, on);
            let back = deadline.expect("a deadline");
            assert!(
                back <= d && d - back < Duration::from_micros(1),
                "{back:?} vs {d:?}"
            );
            a.ready();
            assert_eq!(a.read(), None);
        }
        let t = SpawnTime::new();
        assert_eq!(t.age(), None);
        t.set_now();
        assert!(t.age().is_some());
        t.clear();
        assert_eq!(t.age(), None);
    }
}
