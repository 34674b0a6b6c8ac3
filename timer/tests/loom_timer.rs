//! Loom models of the timer's protocols. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p spindle-timer --release --target-dir target/loom --test loom_timer`.
//!
//! Each model runs a real `TimerThread` (its timer thread is a loom thread)
//! with one bucket. Under loom the clock stands still at a time later than
//! any deadline built from `Instant::now()`, so such timers are due at once,
//! and a deadline beyond the clock's range is never due; futex waits never
//! time out, so a lost wake-up shows up as a thread that never finishes.
//!
//! The exploration is bounded to 3 preemptions per execution (override with
//! `LOOM_MAX_PREEMPTIONS`): loom's authors report that bugs practically
//! always need fewer, and it keeps the whole file within a few minutes.
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use loom::sync::Arc;
use loom::thread;
use spindle_timer::{TimerError, TimerOptions, TimerThread, Unschedule};
use std::time::{Duration, Instant};

fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(f);
}

fn timer() -> TimerThread {
    TimerThread::start({
        let mut o = TimerOptions::default();
        o.num_buckets = 1;
        o
    })
    .unwrap()
}

/// A deadline the timer encodes as "never".
fn never() -> Instant {
    Instant::now() + Duration::from_secs(1 << 40)
}

/// Counts drops of the closure that owns it.
struct DropCount(Arc<AtomicUsize>);

impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// The version CAS: `unschedule` racing with the timer thread running the
/// same due timer. Exactly one of {ran, Removed}; `Running` and `NotFound`
/// mean it ran, and `NotFound` that it has finished. Then the slot is reused when it is back in the pool (always
/// after `Removed`: the canceller frees it at once; after a run, in the
/// interleavings where the timer thread has freed it): the stale id neither
/// cancels nor disturbs the new timer.
#[test]
fn unschedule_vs_run_vs_reuse() {
    model(|| {
        let timer = Arc::new(timer());
        let ran = Arc::new(AtomicUsize::new(0));
        let (r, r2) = (ran.clone(), ran.clone());
        let id = timer
            .schedule(Instant::now(), move || {
                r.fetch_add(1, SeqCst);
            })
            .unwrap();
        let t = timer.clone();
        let answer = thread::spawn(move || {
            let answer = t.unschedule(id);
            if answer == Unschedule::NotFound {
                // A waiter that reuses what the callback touches relies on
                // this (spindle's butex `Leave`): no longer pending means
                // the callback has finished, and its effects are visible.
                assert_eq!(r2.load(SeqCst), 1, "NotFound before the callback was done");
            }
            answer
        })
        .join()
        .unwrap();

        let drops = Arc::new(AtomicUsize::new(0));
        let d = DropCount(drops.clone());
        let next = timer.schedule(never(), move || drop(d)).unwrap();
        assert_ne!(next, id);
        if answer == Unschedule::Removed {
            // Loom has no per-thread cache and the global free list is LIFO.
            assert_eq!(
                next.as_u64() as u32,
                id.as_u64() as u32,
                "the slot is reused"
            );
        }
        let stale = timer.unschedule(id);
        assert_ne!(stale, Unschedule::Removed, "a stale id cancelled something");
        assert_eq!(timer.unschedule(next), Unschedule::Removed);
        assert_eq!(drops.load(SeqCst), 1);

        timer.stop_and_join();
        let ran = ran.load(SeqCst);
        match answer {
            Unschedule::Removed => assert_eq!(ran, 0, "a removed timer ran"),
            Unschedule::Running | Unschedule::NotFound => assert_eq!(ran, 1, "{answer:?}"),
        }
    });
}

/// The wake-up protocol: the timer thread heads for sleep with an empty heap
/// while a due timer is scheduled. Whatever the interleaving of the bucket
/// push, the global `nearest_run_time`, `sleeping` and `nsignals`, the timer
/// runs (no lost wake-up); then stop ends the thread.
#[test]
fn a_due_timer_always_wakes_the_timer_thread() {
    model(|| {
        let timer = timer();
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        timer
            .schedule(Instant::now(), move || r.store(true, SeqCst))
            .unwrap();
        while !ran.load(SeqCst) {
            thread::yield_now();
        }
        timer.stop_and_join();
    });
}

/// Two threads scheduling due timers at once while the timer thread heads
/// for sleep: both announcements go through the global mutex, the second
/// may find the first's lower `nearest_run_time`; neither timer is lost.
#[test]
fn concurrent_announcements_are_not_lost() {
    model(|| {
        let timer = Arc::new(timer());
        let ran = Arc::new(AtomicUsize::new(0));
        let (t, r) = (timer.clone(), ran.clone());
        let h = thread::spawn(move || {
            t.schedule(Instant::now(), move || {
                r.fetch_add(1, SeqCst);
            })
            .unwrap();
        });
        let r = ran.clone();
        timer
            .schedule(Instant::now(), move || {
                r.fetch_add(1, SeqCst);
            })
            .unwrap();
        h.join().unwrap();
        while ran.load(SeqCst) < 2 {
            thread::yield_now();
        }
        timer.stop_and_join();
    });
}

/// `schedule` racing with `stop_and_join` (brpc PR #2986 hung here): the stop
/// always ends the thread, and the closure is dropped exactly once, whether
/// it was refused, run, or dropped as pending.
#[test]
fn schedule_vs_stop() {
    model(|| {
        let timer = Arc::new(timer());
        let drops = Arc::new(AtomicUsize::new(0));
        let (t, d) = (timer.clone(), DropCount(drops.clone()));
        let h = thread::spawn(move || match t.schedule(Instant::now(), move || drop(d)) {
            Ok(_) => true,
            Err(TimerError::Stopped) => false,
            Err(e) => panic!("{e}"),
        });
        timer.stop_and_join();
        h.join().unwrap();
        assert_eq!(drops.load(SeqCst), 1);
        assert_eq!(timer.stats().pending, 0);
    });
}

/// `reschedule` racing with the timer thread running the timer: either the
/// reschedule linearized first (the timer does not run at its old deadline)
/// or it fails with `NotPending` because the timer had started.
#[test]
fn reschedule_vs_run() {
    model(|| {
        let timer = Arc::new(timer());
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        let id = timer
            .schedule(Instant::now(), move || {
                r.fetch_add(1, SeqCst);
            })
            .unwrap();
        let t = timer.clone();
        let moved = thread::spawn(move || t.reschedule(id, never()))
            .join()
            .unwrap();
        timer.stop_and_join();
        match moved {
            Ok(()) => assert_eq!(ran.load(SeqCst), 0, "ran at its old deadline"),
            Err(TimerError::NotPending) => assert_eq!(ran.load(SeqCst), 1),
            Err(e) => panic!("{e}"),
        }
    });
}

/// A periodic timer's re-arm after its run (`RUNNING -> ARMED`) racing
/// `unschedule` (`ARMED -> IDLE`, or `RUNNING -> CANCELLING` mid-run). The
/// first run is due and the next never is (its period is beyond the clock's
/// range). Whatever the order: a periodic timer is never `NotFound` while
/// it lives; once `unschedule` has answered `Removed`, the timer does not
/// run again; it runs at most once; and its closure is dropped exactly
/// once.
#[test]
fn periodic_rearm_vs_unschedule() {
    model(|| {
        let timer = Arc::new(timer());
        let ran = Arc::new(AtomicUsize::new(0));
        let drops = Arc::new(AtomicUsize::new(0));
        let (r, r2) = (ran.clone(), ran.clone());
        let owned = DropCount(drops.clone());
        let id = timer
            .schedule_periodic(Instant::now(), Duration::from_secs(1 << 40), move || {
                let _owned = &owned;
                r.fetch_add(1, SeqCst);
            })
            .unwrap();
        let t = timer.clone();
        let (answer, ran_then) = thread::spawn(move || {
            let answer = t.unschedule(id);
            (answer, r2.load(SeqCst))
        })
        .join()
        .unwrap();
        assert_ne!(
            answer,
            Unschedule::NotFound,
            "a live periodic timer was lost"
        );
        timer.stop_and_join();
        let ran = ran.load(SeqCst);
        assert!(ran <= 1, "ran {ran} times");
        if answer == Unschedule::Removed {
            assert_eq!(ran, ran_then, "ran after it was removed");
        } else {
            assert_eq!(ran, 1, "{answer:?}");
        }
        assert_eq!(drops.load(SeqCst), 1, "the closure is dropped once");
    });
}
