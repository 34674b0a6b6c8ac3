//! Linux private futexes, safe to call.
//!
//! [`wait`] blocks the calling thread while an [`AtomicU32`] still holds an
//! expected value; [`wake`] wakes threads blocked on it. The kernel compares
//! the value and queues the waiter atomically with respect to `wake`, which is
//! what makes the "check the value, then sleep" pattern free of lost
//! wake-ups. Both use `FUTEX_PRIVATE_FLAG`: spindle never shares futexes
//! between processes, and private futexes skip the mm-wide hash lookup.
//!
//! Timeouts are turned into an absolute `CLOCK_MONOTONIC` deadline once
//! (`FUTEX_WAIT_BITSET` takes an absolute time), so a wait interrupted by a
//! signal (`EINTR`) resumes with the same deadline: it neither returns early
//! nor drifts late.
//!
//! [`Futex`] bundles a word with its wait queue. It is what protocol code uses,
//! because under `--cfg loom` it becomes an emulation (a loom mutex and
//! condition variable that check the word under the lock, as the kernel does)
//! that loom can explore.
//!
//! Each thread counts the futex calls it makes ([`calls_on_this_thread`]):
//! tests use it to show that a path makes none.

use std::cell::Cell;
use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

thread_local! {
    /// Futex system calls made by this thread.
    static CALLS: Cell<u64> = const { Cell::new(0) };
}

/// How many futex system calls ([`wait`], [`wake`] and the like) the calling
/// thread has made so far. For tests and diagnostics: a path that must make
/// no system call in its common case can be checked with two readings.
pub fn calls_on_this_thread() -> u64 {
    CALLS.try_with(Cell::get).unwrap_or(0)
}

/// Counts one futex call (none once the thread's locals are gone).
fn count_call() {
    let _ = CALLS.try_with(|c| c.set(c.get() + 1));
}

/// Blocks while `*atom == expected`, at most `timeout` (`None`: no limit).
///
/// Returns `false` if the timeout elapsed, `true` otherwise: the value was no
/// longer `expected` on entry (`EAGAIN`), or a [`wake`] arrived. Like every
/// futex wait it may also return `true` spuriously; callers re-check their
/// condition. A signal delivered to the thread does not end the wait early.
pub fn wait(atom: &AtomicU32, expected: u32, timeout: Option<Duration>) -> bool {
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    match (timeout, deadline) {
        // A timeout too large for the clock is no timeout at all.
        (Some(_), None) | (None, _) => wait_until(atom, expected, None),
        (Some(_), Some(d)) => wait_until(atom, expected, Some(d)),
    }
}

/// Like [`wait`], with an absolute deadline. A deadline in the past does not
/// block: as the kernel's own zero timeout, it returns `true` if the value is
/// no longer `expected`, `false` (timed out) if it is.
pub fn wait_until(atom: &AtomicU32, expected: u32, deadline: Option<Instant>) -> bool {
    wait_until_masked(atom, expected, deadline, ANY)
}

/// Every bit: a mask that any [`wake_masked`] matches.
pub const ANY: u32 = u32::MAX;

/// A wait or wake mask as the kernel takes it: 0 (which it refuses) is
/// [`ANY`].
fn nonzero(mask: u32) -> u32 {
    if mask == 0 {
        ANY
    } else {
        mask
    }
}

/// Like [`wait_until`], for a waiter with the mask `mask`: only a [`wake`],
/// or a [`wake_masked`] whose mask shares a bit with it, wakes it (the
/// kernel's `FUTEX_WAIT_BITSET`). A mask of 0 is taken as [`ANY`].
pub fn wait_until_masked(
    atom: &AtomicU32,
    expected: u32,
    deadline: Option<Instant>,
    mask: u32,
) -> bool {
    let mask = nonzero(mask);
    let abs = match deadline {
        None => None,
        Some(d) => match monotonic_timespec_of(d) {
            Some(ts) => Some(ts),
            None => return atom.load(std::sync::atomic::Ordering::Acquire) != expected,
        },
    };
    let ts_ptr = abs
        .as_ref()
        .map_or(std::ptr::null(), |ts| ts as *const libc::timespec);
    loop {
        count_call();
        // SAFETY: `atom` is a valid, aligned u32 for the duration of the call
        // (we hold a reference to it); `ts_ptr` is null or points at a
        // timespec that lives on this stack frame until the call returns.
        // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time and
        // ignores uaddr2; `mask` is not 0.
        let r = unsafe {
            libc::syscall(
                libc::SYS_futex,
                atom.as_ptr(),
                libc::FUTEX_WAIT_BITSET | libc::FUTEX_PRIVATE_FLAG,
                expected,
                ts_ptr,
                std::ptr::null::<u32>(),
                mask,
            )
        };
        if r == 0 {
            return true;
        }
        match errno() {
            libc::EINTR => continue,
            libc::ETIMEDOUT => return false,
            // EAGAIN: the value had already moved on. Anything else (EFAULT,
            // EINVAL) cannot happen with a valid reference; treat it as a
            // spurious wake-up rather than blocking forever.
            _ => return true,
        }
    }
}

/// Wakes at most `n` threads blocked in [`wait`] on `atom`; returns how many
/// were woken. `n == 0` wakes none (the kernel would wake one).
pub fn wake(atom: &AtomicU32, n: u32) -> usize {
    // The kernel's FUTEX_WAKE is this, with every bit.
    wake_masked(atom, n, ANY)
}

/// Wakes at most `n` threads blocked on `atom` whose wait mask shares a bit
/// with `mask` (the kernel's `FUTEX_WAKE_BITSET`; see
/// [`wait_until_masked`]); returns how many were woken. `n == 0` wakes none;
/// a mask of 0 is taken as [`ANY`].
pub fn wake_masked(atom: &AtomicU32, n: u32, mask: u32) -> usize {
    if n == 0 {
        return 0;
    }
    let mask = nonzero(mask);
    let n = n.min(i32::MAX as u32) as libc::c_int;
    count_call();
    // SAFETY: `atom` is a valid, aligned u32; FUTEX_WAKE_BITSET reads
    // nothing else (the timeout and uaddr2 arguments are ignored).
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            atom.as_ptr(),
            libc::FUTEX_WAKE_BITSET | libc::FUTEX_PRIVATE_FLAG,
            n,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            mask,
        )
    };
    if r < 0 {
        0
    } else {
        r as usize
    }
}

fn errno() -> libc::c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The `CLOCK_MONOTONIC` time of `deadline`, or `None` if it has passed.
///
/// `Instant` is `CLOCK_MONOTONIC` on Linux but opaque, so we read both clocks
/// back to back and carry the difference over.
fn monotonic_timespec_of(deadline: Instant) -> Option<libc::timespec> {
    let now = Instant::now();
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let left = deadline.checked_duration_since(now)?;
    if left.is_zero() {
        return None;
    }
    let nsec = ts.tv_nsec as u64 + u64::from(left.subsec_nanos());
    let secs = (ts.tv_sec as u64)
        .saturating_add(left.as_secs())
        .saturating_add(nsec / 1_000_000_000);
    Some(libc::timespec {
        tv_sec: secs.min(libc::time_t::MAX as u64) as libc::time_t,
        tv_nsec: (nsec % 1_000_000_000) as _,
    })
}

pub use imp::Futex;

/// Sets the calling thread's timer slack (`prctl(PR_SET_TIMERSLACK)`) to
/// `ns` nanoseconds (at least 1: 0 would mean "the default"). Linux lets a
/// timed wait of a normal thread end up to 50 µs late by default; threads
/// whose timed waits must be punctual (the timer thread, workers parked until
/// a task's sleep is due) set it low.
pub fn set_timer_slack(ns: u64) -> std::io::Result<()> {
    let ns = libc::c_ulong::try_from(ns.max(1)).unwrap_or(libc::c_ulong::MAX);
    // SAFETY: PR_SET_TIMERSLACK reads one unsigned long argument and changes
    // only the calling thread's slack.
    match unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

#[cfg(not(loom))]
mod imp {
    use std::sync::atomic::AtomicU32;
    use std::time::{Duration, Instant};

    /// A 32-bit word that threads can sleep on.
    ///
    /// A plain futex outside loom; under `--cfg loom`, an emulation loom can
    /// explore (the word is then a loom atomic, and timeouts never elapse
    /// because loom has no clock).
    #[derive(Debug, Default)]
    pub struct Futex {
        word: AtomicU32,
    }

    impl Futex {
        /// A futex holding `value`.
        pub const fn new(value: u32) -> Self {
            Futex {
                word: AtomicU32::new(value),
            }
        }

        /// The word itself, for loads, stores and read-modify-writes.
        #[inline]
        pub fn word(&self) -> &AtomicU32 {
            &self.word
        }

        /// [`super::wait`] on this word.
        #[inline]
        pub fn wait(&self, expected: u32, timeout: Option<Duration>) -> bool {
            super::wait(&self.word, expected, timeout)
        }

        /// [`super::wait_until`] on this word.
        #[inline]
        pub fn wait_until(&self, expected: u32, deadline: Option<Instant>) -> bool {
            super::wait_until(&self.word, expected, deadline)
        }

        /// [`super::wake`] on this word.
        #[inline]
        pub fn wake(&self, n: u32) -> usize {
            super::wake(&self.word, n)
        }

        /// [`super::wait_until_masked`] on this word.
        #[inline]
        pub fn wait_until_masked(
            &self,
            expected: u32,
            deadline: Option<Instant>,
            mask: u32,
        ) -> bool {
            super::wait_until_masked(&self.word, expected, deadline, mask)
        }

        /// [`super::wake_masked`] on this word.
        #[inline]
        pub fn wake_masked(&self, n: u32, mask: u32) -> usize {
            super::wake_masked(&self.word, n, mask)
        }
    }
}

#[cfg(loom)]
mod imp {
    use loom::sync::atomic::{AtomicU32, Ordering};
    use loom::sync::{Condvar, Mutex};
    use std::time::{Duration, Instant};

    /// Loom emulation of a futex: the word is checked under a mutex that
    /// `wake` also takes, as the kernel checks it under the hash-bucket lock,
    /// so "value unchanged, then sleep" is atomic with respect to `wake`.
    /// Each waiter has a record with its mask, so that a masked wake wakes
    /// only the waiters it matches, as the kernel's does.
    #[derive(Debug)]
    pub struct Futex {
        word: AtomicU32,
        waiters: Mutex<Waiters>,
        cv: Condvar,
    }

    #[derive(Debug, Default)]
    struct Waiters {
        next_id: u64,
        /// (id, mask, woken) of each thread in a wait.
        list: Vec<(u64, u32, bool)>,
    }

    impl Default for Futex {
        fn default() -> Self {
            Futex::new(0)
        }
    }

    impl Futex {
        /// A futex word holding `value`, with no waiters.
        pub fn new(value: u32) -> Self {
            Futex {
                word: AtomicU32::new(value),
                waiters: Mutex::new(Waiters::default()),
                cv: Condvar::new(),
            }
        }

        /// The word itself.
        pub fn word(&self) -> &AtomicU32 {
            &self.word
        }

        /// Loom has no clock: a timeout never elapses, so this returns only
        /// when the value has moved or a wake arrives.
        pub fn wait(&self, expected: u32, _timeout: Option<Duration>) -> bool {
            self.wait_until_masked(expected, None, super::ANY)
        }

        /// As [`wait`](Self::wait): without a clock, the deadline never
        /// passes.
        pub fn wait_until(&self, expected: u32, _deadline: Option<Instant>) -> bool {
            self.wait_until_masked(expected, None, super::ANY)
        }

        /// Waits while the word holds `expected`, until a wake whose mask
        /// shares a bit with `mask` (0: any) picks this waiter.
        pub fn wait_until_masked(&self, expected: u32, _: Option<Instant>, mask: u32) -> bool {
            let mask = super::nonzero(mask);
            let mut waiters = self.waiters.lock().unwrap();
            if self.word.load(Ordering::SeqCst) != expected {
                return true;
            }
            let id = waiters.next_id;
            waiters.next_id += 1;
            waiters.list.push((id, mask, false));
            loop {
                waiters = self.cv.wait(waiters).unwrap();
                let at = waiters.list.iter().position(|w| w.0 == id).unwrap();
                if waiters.list[at].2 {
                    waiters.list.remove(at);
                    return true;
                }
            }
        }

        /// Wakes up to `n` waiters; returns how many.
        pub fn wake(&self, n: u32) -> usize {
            self.wake_masked(n, super::ANY)
        }

        /// Wakes up to `n` waiters whose masks share a bit with `mask`;
        /// returns how many.
        pub fn wake_masked(&self, n: u32, mask: u32) -> usize {
            let mask = super::nonzero(mask);
            let mut waiters = self.waiters.lock().unwrap();
            let mut woken = 0;
            for w in waiters.list.iter_mut() {
                if woken == n as usize {
                    break;
                }
                if !w.2 && w.1 & mask != 0 {
                    w.2 = true;
                    woken += 1;
                }
            }
            if woken > 0 {
                self.cv.notify_all();
            }
            woken
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::test_support::{await_in_futex, in_futex, spawn_with_tid};
    use std::sync::Arc;
    use std::thread;

    #[test]
    fn wait_returns_at_once_when_value_differs() {
        let a = AtomicU32::new(1);
        assert!(wait(&a, 0, Some(Duration::from_secs(10))));
    }

    #[test]
    fn wait_times_out() {
        let a = AtomicU32::new(0);
        let t = Instant::now();
        assert!(!wait(&a, 0, Some(Duration::from_millis(20))));
        assert!(t.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn past_deadline_times_out_at_once() {
        let a = AtomicU32::new(0);
        assert!(!wait_until(&a, 0, Some(Instant::now())));
        assert!(!wait(&a, 0, Some(Duration::ZERO)));
    }

    /// As the kernel's zero timeout: the value is still compared.
    #[test]
    fn past_deadline_with_a_moved_value_is_no_timeout() {
        let a = AtomicU32::new(1);
        assert!(wait_until(&a, 0, Some(Instant::now())));
        assert!(wait(&a, 0, Some(Duration::ZERO)));
    }

    #[test]
    fn huge_timeout_is_no_timeout() {
        let a = Arc::new(AtomicU32::new(0));
        let a2 = a.clone();
        let h = thread::spawn(move || wait(&a2, 0, Some(Duration::MAX)));
        while wake(&a, 1) == 0 {
            thread::sleep(Duration::from_millis(1));
        }
        assert!(h.join().unwrap());
    }

    #[test]
    fn wake_wakes_a_waiter() {
        let a = Arc::new(AtomicU32::new(0));
        let a2 = a.clone();
        let h = thread::spawn(move || {
            while a2.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                wait(&a2, 0, None);
            }
        });
        thread::sleep(Duration::from_millis(10));
        a.store(1, std::sync::atomic::Ordering::SeqCst);
        wake(&a, 1);
        h.join().unwrap();
    }

    /// `wake(0)` wakes nobody (the kernel's FUTEX_WAKE with 0 wakes one).
    #[test]
    fn wake_of_zero_wakes_none() {
        let a = Arc::new(AtomicU32::new(0));
        let a2 = a.clone();
        let (h, tid) = spawn_with_tid(move || wait(&a2, 0, None));
        await_in_futex(tid, &a);
        assert_eq!(wake(&a, 0), 0, "wake(0) woke the waiter");
        thread::sleep(Duration::from_millis(5));
        assert!(in_futex(tid, &a), "the waiter left its wait");
        assert_eq!(wake(&a, 1), 1);
        h.join().unwrap();
    }

    /// A masked wake wakes only the waiters whose mask it shares, even when
    /// asked for more; a plain wake wakes any.
    #[test]
    fn a_masked_wake_wakes_only_matching_waiters() {
        let a = Arc::new(AtomicU32::new(0));
        let waiter = |mask: u32| {
            let a = a.clone();
            spawn_with_tid(move || wait_until_masked(&a, 0, None, mask))
        };
        let (one, one_tid) = waiter(0b01);
        let (two, two_tid) = waiter(0b10);
        await_in_futex(one_tid, &a);
        await_in_futex(two_tid, &a);
        assert_eq!(
            wake_masked(&a, u32::MAX, 0b10),
            1,
            "only the second matches"
        );
        assert!(two.join().unwrap());
        thread::sleep(Duration::from_millis(5));
        assert!(in_futex(one_tid, &a), "the first waiter was woken too");
        assert_eq!(wake(&a, 1), 1, "a plain wake matches any mask");
        assert!(one.join().unwrap());
    }

    #[test]
    fn wake_without_waiters_wakes_none() {
        let a = AtomicU32::new(0);
        assert_eq!(wake(&a, 4), 0);
    }

    /// A signal that interrupts the wait (EINTR) must not end it early.
    #[test]
    fn signal_does_not_end_wait_early() {
        extern "C" fn on_usr1(_: libc::c_int) {}
        // SAFETY: installing a handler that does nothing is async-signal-safe;
        // SA_RESTART is deliberately left off so that futex sees EINTR.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_usr1 as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let h = thread::spawn(move || {
            // SAFETY: pthread_self has no preconditions.
            tx.send(unsafe { libc::pthread_self() }).unwrap();
            let a = AtomicU32::new(0);
            let t = Instant::now();
            let woke = wait(&a, 0, Some(Duration::from_millis(100)));
            (woke, t.elapsed())
        });
        let tid = rx.recv().unwrap();
        for _ in 0..5 {
            thread::sleep(Duration::from_millis(10));
            // SAFETY: the thread is alive until it has waited 100 ms, and we
            // signal it only within the first 50 ms.
            unsafe { libc::pthread_kill(tid, libc::SIGUSR1) };
        }
        let (woke, took) = h.join().unwrap();
        assert!(!woke, "the wait must end by timing out");
        assert!(
            took >= Duration::from_millis(100),
            "returned early: {took:?}"
        );
    }
}
