//! Helpers shared by the integration tests.
//!
//! Tests never assert on elapsed time (the machine may be busy): they wait
//! for behaviour with [`LONG`] as a generous limit that only a hang reaches,
//! and they prove that something did *not* happen by ordering: a sentinel
//! timer with a later deadline fires only after every earlier entry has been
//! dealt with, because the timer thread runs entries in deadline order.
#![allow(dead_code)]

use spindle_timer::{TimerOptions, TimerThread};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Limit for waits that only a bug can exhaust.
pub const LONG: Duration = Duration::from_secs(60);

pub fn timer() -> TimerThread {
    TimerThread::start(TimerOptions::default()).expect("start a timer thread")
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `Instant::now() - d`, or the earliest representable instant near it.
pub fn ago(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_sub(d).unwrap_or(now)
}

/// An instant so far ahead that it saturates the timer's deadline encoding
/// (the timer treats it as "never"), if the platform's `Instant` can hold it.
pub fn far_future() -> Option<Instant> {
    Instant::now().checked_add(Duration::from_secs(1 << 40))
}

pub use spindle_testkit::wait_for;

/// Schedules a timer at `deadline` and waits until it has run and been
/// retired: every entry with an earlier deadline has then been run or
/// skipped, and the stats count the sentinel as done.
pub fn sentinel(timer: &TimerThread, deadline: Instant) {
    let (tx, rx) = mpsc::channel();
    let id = timer
        .schedule(deadline, move || tx.send(()).unwrap())
        .expect("schedule the sentinel");
    rx.recv_timeout(LONG).expect("the sentinel fired");
    wait_for("the sentinel to be retired", || {
        timer.unschedule(id) == spindle_timer::Unschedule::NotFound
    });
}

/// Counts its drops: put one in a closure to see when the closure is dropped.
pub struct DropCount(pub Arc<AtomicUsize>);

impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// A small deterministic permutation of `0..n` (no `rand` dependency).
pub fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    let mut x = seed | 1;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

/// The id a callback's own timer will have once `schedule` has returned and
/// the test has published it in `slot` (a callback may run before that).
pub fn published_id(slot: &std::sync::OnceLock<spindle_timer::TimerId>) -> spindle_timer::TimerId {
    loop {
        if let Some(id) = slot.get() {
            return *id;
        }
        std::thread::yield_now();
    }
}
