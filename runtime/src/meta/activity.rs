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

/// What a task's wait is for (the dump's `WaitKind`, plus sleeps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitOn {
    /// `sleep`, `sleep_until`, `usleep`.
    Sleep,
    /// `Butex::wait`.
    Butex,
    /// `sync::Mutex`.
    Mutex,
    /// `sync::Condvar`.
    Condvar,
    /// `sync::RwLock`.
    RwLock,
    /// `sync::Semaphore`.
    Semaphore,
    /// `sync::Barrier`, `CountdownEvent`.
    Barrier,
    /// `sync::OnceCell`.
    OnceCell,
    /// The channels (`mpsc`, `oneshot`, `watch`) and `Select` over them.
    Channel,
    /// A `JoinHandle`, a `JoinSet`, the end of a scope or of `block_on`.
    Join,
    /// The readiness of an fd: `read` for reading, else writing (`both`
    /// for either).
    Fd {
        /// The fd.
        fd: RawFd,
        /// Whether the wait is for reading.
        read: bool,
        /// Whether either direction ends the wait.
        both: bool,
    },
    /// The result of work on the blocking pool.
    Blocking,
    /// `block_on_future`.
    Future,
}

/// Word value: not in a wait (queued, running, or never run).
const NONE: u64 = 0;
/// Word value: a wait with a deadline is being recorded.
const BUSY: u64 = 1;
/// The low byte holds the kind; then flags; the fd in the high half.
const KIND_MASK: u64 = 0xff;
const READ: u64 = 1 << 8;
const BOTH: u64 = 1 << 9;
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
        match self {
            WaitOn::Sleep => 2,
            WaitOn::Butex => 3,
            WaitOn::Mutex => 4,
            WaitOn::Condvar => 5,
            WaitOn::RwLock => 6,
            WaitOn::Semaphore => 7,
            WaitOn::Barrier => 8,
            WaitOn::OnceCell => 9,
            WaitOn::Channel => 10,
            WaitOn::Join => 11,
            WaitOn::Fd { fd, read, both } => {
                12 | if read { READ } else { 0 }
                    | if both { BOTH } else { 0 }
                    | ((fd as u32 as u64) << 32)
            }
            WaitOn::Blocking => 13,
            WaitOn::Future => 14,
        }
    }

    fn decode(word: u64) -> Option<WaitOn> {
        Some(match word & KIND_MASK {
            2 => WaitOn::Sleep,
            3 => WaitOn::Butex,
            4 => WaitOn::Mutex,
            5 => WaitOn::Condvar,
            6 => WaitOn::RwLock,
            7 => WaitOn::Semaphore,
            8 => WaitOn::Barrier,
            9 => WaitOn::OnceCell,
            10 => WaitOn::Channel,
            11 => WaitOn::Join,
            12 => WaitOn::Fd {
                fd: (word >> 32) as u32 as RawFd,
                read: word & READ != 0,
                both: word & BOTH != 0,
            },
            13 => WaitOn::Blocking,
            14 => WaitOn::Future,
            _ => return None,
        })
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
        for on in [
            WaitOn::Sleep,
            WaitOn::Butex,
            WaitOn::Mutex,
            WaitOn::Condvar,
            WaitOn::RwLock,
            WaitOn::Semaphore,
            WaitOn::Barrier,
            WaitOn::OnceCell,
            WaitOn::Channel,
            WaitOn::Join,
            WaitOn::Fd {
                fd: 1_000_000,
                read: true,
                both: false,
            },
            WaitOn::Fd {
                fd: 0,
                read: false,
                both: true,
            },
            WaitOn::Blocking,
            WaitOn::Future,
        ] {
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
