//! `ParkingLot`: where idle workers sleep without losing a wake-up.
//!
//! The state is one futex word. Bit 0 says "stopped"; every [`signal`] (of at
//! least one waiter) adds 2, so any signal changes the word (and no mix of
//! signals restores an old one). An idle worker follows one rule:
//!
//! ```text
//!   let st = lot.state();        // 1. read the state BEFORE the last look
//!   if let Some(t) = find_work() { run(t) }   // 2. look once more
//!   else { lot.wait(st) }        // 3. sleep only while the state is still `st`
//! ```
//!
//! A producer pushes work and then calls `signal`. If the signal lands
//! between 1 and 3, the word is no longer `st` and the futex wait returns at
//! once; if it lands before 1, the look in 2 sees the work. No interleaving
//! loses the wake-up.
//!
//! Wake-ups are syscalls (3-5 µs on a VM), so `signal` skips the syscall when
//! nobody is waiting. That shortcut is a store-buffering (Dekker) pattern:
//! the signaller writes the word then reads `waiters`, the waiter writes
//! `waiters` then reads the word. With weaker orderings both reads may see the
//! old values and the waiter sleeps through the signal — the lost wake-up of
//! bRPC's ParkingLot fixed in apache/brpc PR #3539. Each side puts a `SeqCst`
//! fence between its write and its read, so at least one side sees the
//! other's write. (Fences rather than `SeqCst` loads: the fence form is what
//! the C++ model guarantees for store buffering, and what loom models;
//! `tests/loom_parking.rs` checks it.)
//!
//! Threads that share a lot but are woken one at a time (the runtime's
//! workers) wait with masks of their own (futex bitsets):
//! [`ParkingLot::signal_masked`] wakes the waiters whose mask it shares,
//! and still moves the state for all.
//!
//! [`signal`]: ParkingLot::signal

use crate::futex::ANY;
use crate::loom::sync::atomic::{fence, AtomicU32, Ordering::Relaxed, Ordering::SeqCst};
use crate::Futex;

const STOPPED: u32 = 1;
const ONE_SIGNAL: u32 = 2;

/// A futex-backed lot that idle threads park on; see the module docs.
///
/// Aligned to a cache line: the runtime keeps several side by side and each
/// is written by a different set of workers.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct ParkingLot {
    /// Bit 0: stopped. Bits 1..: a counter bumped by every signal.
    state: Futex,
    /// Threads inside a wait (any mask), for the no-waiter shortcut.
    waiters: AtomicU32,
}

/// A snapshot of a lot's state, taken by [`ParkingLot::state`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParkState(u32);

impl ParkState {
    /// Whether the lot had been stopped when the snapshot was taken.
    pub fn stopped(&self) -> bool {
        self.0 & STOPPED != 0
    }
}

impl ParkingLot {
    /// A lot that is not stopped and has no waiters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the lot's state on (so that a waiter that read the old state
    /// does not sleep) and wakes up to `n` waiters; `n == 0` does neither.
    /// Returns how many threads were woken (0 without a syscall when nobody
    /// waits).
    pub fn signal(&self, n: u32) -> usize {
        self.signal_masked(n, ANY)
    }

    /// Like [`signal`](Self::signal), but wakes only waiters whose mask
    /// (see [`wait_until_masked`](Self::wait_until_masked)) shares a bit
    /// with `mask`. The state moves on all the same, so any thread on its
    /// way to wait returns at once (and looks for work again).
    pub fn signal_masked(&self, n: u32, mask: u32) -> usize {
        if n == 0 {
            return 0;
        }
        // Every signal moves the counter by exactly 2, whatever `n` is:
        // adding `2 * n` would wrap for large `n` (`signal(u32::MAX)` would
        // subtract 2), and a later `signal(1)` could then bring the word back
        // to a state a waiter read before both — an ABA that sleeps through
        // two signals. Wrapping after 2^31 signals is harmless in practice:
        // a waiter compares one state it just read, and only exactly 2^31
        // signals between that read and its futex wait (tens of seconds of
        // preemption there) would bring the word back to it.
        self.state.word().fetch_add(ONE_SIGNAL, SeqCst);
        // Pairs with the fence in `wait`: see the module docs.
        fence(SeqCst);
        if self.waiters.load(Relaxed) == 0 {
            return 0;
        }
        self.state.wake_masked(n, mask)
    }

    /// The current state, to pass to [`wait`](Self::wait) after a last look
    /// for work.
    pub fn state(&self) -> ParkState {
        ParkState(self.state.word().load(SeqCst))
    }

    /// Sleeps until the state differs from `expected` (a signal or a stop
    /// arrived since it was read). Returns at once if it already differs or
    /// the lot is stopped. May return spuriously; callers look for work again.
    pub fn wait(&self, expected: ParkState) {
        self.wait_until(expected, None)
    }

    /// Like [`wait`](Self::wait), but returns by `deadline` at the latest.
    pub fn wait_until(&self, expected: ParkState, deadline: Option<std::time::Instant>) {
        self.wait_until_masked(expected, deadline, ANY)
    }

    /// Like [`wait_until`](Self::wait_until), as a waiter with the mask
    /// `mask` (not 0): a [`signal_masked`](Self::signal_masked) wakes it
    /// only if their masks share a bit; [`signal`](Self::signal) and
    /// [`stop`](Self::stop) wake it always. Threads that share a lot but
    /// are woken one by one each wait with a bit of their own, so that a
    /// signal meant for one does not wake the others.
    pub fn wait_until_masked(
        &self,
        expected: ParkState,
        deadline: Option<std::time::Instant>,
        mask: u32,
    ) {
        if expected.stopped() {
            return;
        }
        self.waiters.fetch_add(1, SeqCst);
        // Pairs with the fence in `signal` (see the module docs); the futex
        // then re-checks the word under its own lock.
        fence(SeqCst);
        if self.state.word().load(Relaxed) == expected.0 {
            self.state.wait_until_masked(expected.0, deadline, mask);
        }
        self.waiters.fetch_sub(1, SeqCst);
    }

    /// Marks the lot stopped and wakes every waiter. Later waits return at
    /// once. Idempotent.
    pub fn stop(&self) {
        self.state.word().fetch_or(STOPPED, SeqCst);
        self.state.wake(u32::MAX);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::thread;
    use std::time::Duration;

    #[test]
    fn wait_returns_at_once_after_a_signal() {
        let lot = ParkingLot::new();
        let st = lot.state();
        assert_eq!(lot.signal(1), 0, "nobody waits: no wake");
        lot.wait(st); // must not block
        assert!(!lot.state().stopped());
    }

    #[test]
    fn signal_wakes_a_parked_thread() {
        let lot = Arc::new(ParkingLot::new());
        let work = Arc::new(AtomicBool::new(false));
        let (l2, w2) = (lot.clone(), work.clone());
        let h = thread::spawn(move || loop {
            let st = l2.state();
            if w2.load(SeqCst) {
                return;
            }
            l2.wait(st);
        });
        thread::sleep(Duration::from_millis(20));
        work.store(true, SeqCst);
        lot.signal(1);
        h.join().unwrap();
    }

    /// Two threads share a lot with masks of their own: a signal masked for
    /// one wakes it alone, though it moves the state for both; `stop`
    /// wakes every waiter.
    #[test]
    fn a_masked_signal_wakes_only_its_waiter() {
        use crate::test_support::{await_in_futex, in_futex, spawn_with_tid};
        let lot = Arc::new(ParkingLot::new());
        let st = lot.state();
        let waiter = |mask: u32| {
            let l = lot.clone();
            spawn_with_tid(move || l.wait_until_masked(st, None, mask))
        };
        let (one, one_tid) = waiter(0b01);
        let (two, two_tid) = waiter(0b10);
        await_in_futex(one_tid, lot.state.word());
        await_in_futex(two_tid, lot.state.word());
        assert_eq!(lot.signal_masked(u32::MAX, 0b10), 1);
        two.join().unwrap();
        thread::sleep(Duration::from_millis(5));
        assert!(
            in_futex(one_tid, lot.state.word()),
            "the other waiter was woken too"
        );
        assert_ne!(lot.state(), st, "the state moved for everybody");
        lot.stop();
        one.join().unwrap();
    }

    #[test]
    fn a_timed_wait_returns_by_its_deadline() {
        let lot = ParkingLot::new();
        let t = std::time::Instant::now();
        lot.wait_until(lot.state(), Some(t + Duration::from_millis(10)));
        assert!(t.elapsed() >= Duration::from_millis(10));
    }

    #[test]
    fn stop_releases_every_waiter_and_sticks() {
        let lot = Arc::new(ParkingLot::new());
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let l = lot.clone();
                thread::spawn(move || {
                    let st = l.state();
                    l.wait(st);
                })
            })
            .collect();
        thread::sleep(Duration::from_millis(20));
        lot.stop();
        for h in hs {
            h.join().unwrap();
        }
        assert!(lot.state().stopped());
        lot.wait(lot.state()); // returns at once
        lot.stop(); // idempotent
        assert!(lot.state().stopped());
    }

    /// `signal(u32::MAX)` then `signal(1)` must not bring the state back to
    /// what a waiter read before them (a lost wake-up).
    #[test]
    fn signals_never_restore_an_old_state() {
        let lot = ParkingLot::new();
        let before = lot.state();
        lot.signal(u32::MAX);
        lot.signal(1);
        assert_ne!(lot.state(), before);
        lot.wait(before); // must not block
    }

    #[test]
    fn signal_counts_do_not_touch_the_stop_bit() {
        let lot = ParkingLot::new();
        for _ in 0..1000 {
            lot.signal(u32::MAX);
        }
        assert!(!lot.state().stopped());
    }
}
