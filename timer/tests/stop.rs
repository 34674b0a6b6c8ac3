//! Stopping: pending timers are dropped, never run; stop is idempotent,
//! prompt, safe from callbacks and from several threads; drop stops.
#![cfg(not(loom))]

mod common;

use common::*;
use spindle_timer::{TimerError, TimerId, TimerOptions, TimerThread, Unschedule};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Barrier};
use std::time::{Duration, Instant};

#[test]
fn stop_drops_pending_timers_without_running_them() {
    let timer = timer();
    let ran = Arc::new(AtomicUsize::new(0));
    let drops = Arc::new(AtomicUsize::new(0));
    let n = 1000;
    let ids: Vec<TimerId> = (0..n)
        .map(|i| {
            let (r, d) = (ran.clone(), DropCount(drops.clone()));
            // One periodic, the rest one-shots, spread over the next minute.
            let deadline = Instant::now() + Duration::from_secs(1 + i as u64 % 60);
            if i == 0 {
                timer.schedule_periodic(deadline, ms(1), move || {
                    let _d = &d;
                    r.fetch_add(1, SeqCst);
                })
            } else {
                timer.schedule(deadline, move || {
                    let _d = d;
                    r.fetch_add(1, SeqCst);
                })
            }
            .unwrap()
        })
        .collect();
    let started = Instant::now();
    timer.stop_and_join();
    let took = started.elapsed();
    // Promptness is shown by the benchmarks; this bound only catches a hang
    // or a sleep through the stop signal.
    assert!(took < Duration::from_secs(10), "stop took {took:?}");
    assert_eq!(ran.load(SeqCst), 0);
    assert_eq!(
        drops.load(SeqCst),
        n,
        "every pending callback is dropped once"
    );
    assert_eq!(timer.stats().pending, 0);
    for id in ids {
        assert_eq!(timer.unschedule(id), Unschedule::NotFound);
        assert!(matches!(
            timer.reschedule(id, Instant::now()),
            Err(TimerError::Stopped)
        ));
    }
}

#[test]
fn schedule_after_stop_fails_and_drops_the_callback() {
    let timer = timer();
    timer.stop_and_join();
    let drops = Arc::new(AtomicUsize::new(0));
    let d = DropCount(drops.clone());
    let r = timer.schedule(Instant::now(), move || drop(d));
    assert!(matches!(r, Err(TimerError::Stopped)));
    assert_eq!(
        r.unwrap_err().to_string(),
        "the timer thread has been stopped"
    );
    assert_eq!(drops.load(SeqCst), 1);
    let r = timer.schedule_periodic(Instant::now(), ms(1), || {});
    assert!(matches!(r, Err(TimerError::Stopped)));
    // Idempotent.
    timer.stop_and_join();
    timer.stop_and_join();
}

/// Timers due at the moment of the stop: each one either ran before the stop
/// completed or was dropped without running; none is lost, none runs twice,
/// none runs after `stop_and_join` returns.
#[test]
fn due_timers_at_stop_run_or_are_dropped_exactly_once() {
    let timer = timer();
    let ran = Arc::new(AtomicUsize::new(0));
    let drops = Arc::new(AtomicUsize::new(0));
    let n = 20_000;
    for i in 0..n {
        let (r, d) = (ran.clone(), DropCount(drops.clone()));
        let deadline = Instant::now() + Duration::from_micros(i as u64 % 1000);
        timer
            .schedule(deadline, move || {
                let _d = d;
                r.fetch_add(1, SeqCst);
            })
            .unwrap();
    }
    timer.stop_and_join();
    let ran_at_stop = ran.load(SeqCst);
    assert_eq!(drops.load(SeqCst), n, "each callback dropped exactly once");
    assert!(ran_at_stop <= n);
    std::thread::sleep(ms(5));
    assert_eq!(
        ran.load(SeqCst),
        ran_at_stop,
        "a callback ran after stop_and_join returned"
    );
}

/// Schedulers racing with the stop: every closure is dropped exactly once,
/// whether its `schedule` failed, or it ran, or it was pending and dropped.
#[test]
fn schedulers_racing_with_stop_lose_no_callback() {
    let timer = Arc::new(timer());
    let drops = Arc::new(AtomicUsize::new(0));
    let threads = 3;
    let barrier = Arc::new(Barrier::new(threads + 1));
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let (timer, drops, barrier) = (timer.clone(), drops.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let mut attempts = 0usize;
                loop {
                    attempts += 1;
                    let d = DropCount(drops.clone());
                    let deadline =
                        Instant::now() + Duration::from_micros((attempts % 3) as u64 * 500);
                    match timer.schedule(deadline, move || drop(d)) {
                        Ok(id) => {
                            // Exercise reschedule and unschedule in the race too.
                            match attempts % 3 {
                                0 => drop(timer.unschedule(id)),
                                1 => drop(timer.reschedule(id, Instant::now() + ms(1))),
                                _ => {}
                            }
                        }
                        Err(TimerError::Stopped) => break,
                        Err(e) => panic!("{e}"),
                    }
                    if t == 0 && attempts % 64 == 0 {
                        std::thread::yield_now();
                    }
                }
                attempts
            })
        })
        .collect();
    barrier.wait();
    std::thread::sleep(ms(20));
    timer.stop_and_join();
    let attempts: usize = hs.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(
        drops.load(SeqCst),
        attempts,
        "a callback was lost or dropped twice"
    );
    assert_eq!(timer.stats().pending, 0);
}

#[test]
fn dropping_a_timer_thread_stops_it() {
    let timer = timer();
    let ran = Arc::new(AtomicBool::new(false));
    let drops = Arc::new(AtomicUsize::new(0));
    let (r, d) = (ran.clone(), DropCount(drops.clone()));
    timer
        .schedule(Instant::now() + ms(50), move || {
            let _d = d;
            r.store(true, SeqCst);
        })
        .unwrap();
    drop(timer);
    assert_eq!(
        drops.load(SeqCst),
        1,
        "the pending callback was dropped by the drop"
    );
    assert!(!ran.load(SeqCst));
}

#[test]
fn stop_from_inside_a_callback_does_not_deadlock() {
    let timer = Arc::new(timer());
    let drops = Arc::new(AtomicUsize::new(0));
    let pending = DropCount(drops.clone());
    timer
        .schedule(Instant::now() + Duration::from_secs(3600), move || {
            drop(pending)
        })
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let t = timer.clone();
    timer
        .schedule(Instant::now(), move || {
            t.stop_and_join();
            tx.send(t.schedule(Instant::now(), || {}).is_err()).unwrap();
        })
        .unwrap();
    assert!(
        rx.recv_timeout(LONG).unwrap(),
        "schedule after stop must fail"
    );
    timer.stop_and_join();
    assert_eq!(drops.load(SeqCst), 1);
}

/// The last handle dropped by a callback on the timer thread itself: the
/// thread stops and exits on its own, dropping what is pending.
#[test]
fn the_last_handle_dropped_on_the_timer_thread() {
    let timer = Arc::new(timer());
    let drops = Arc::new(AtomicUsize::new(0));
    let pending = DropCount(drops.clone());
    timer
        .schedule(Instant::now() + Duration::from_secs(3600), move || {
            drop(pending)
        })
        .unwrap();
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let t = timer.clone();
    timer
        .schedule(Instant::now(), move || {
            gate_rx.recv().unwrap();
            drop(t);
        })
        .unwrap();
    drop(timer); // the callback now holds the last handle
    gate_tx.send(()).unwrap();
    wait_for("the pending timer to be dropped", || {
        drops.load(SeqCst) == 1
    });
}

#[test]
fn concurrent_stops_all_wait_for_the_thread() {
    let timer = Arc::new(timer());
    let drops = Arc::new(AtomicUsize::new(0));
    let n = 10_000;
    for _ in 0..n {
        let d = DropCount(drops.clone());
        timer
            .schedule(Instant::now() + Duration::from_secs(3600), move || drop(d))
            .unwrap();
    }
    let barrier = Arc::new(Barrier::new(3));
    let hs: Vec<_> = (0..3)
        .map(|_| {
            let (timer, drops, barrier) = (timer.clone(), drops.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                timer.stop_and_join();
                // Whoever returns first or last, the thread has finished
                // dropping every pending timer.
                drops.load(SeqCst)
            })
        })
        .collect();
    for h in hs {
        assert_eq!(h.join().unwrap(), n);
    }
}

#[test]
fn bad_options_are_errors_not_panics() {
    for num_buckets in [0, 1025, usize::MAX] {
        let r = TimerThread::start({
            let mut o = TimerOptions::default();
            o.num_buckets = num_buckets;
            o
        });
        let e = r.unwrap_err();
        assert!(matches!(e, TimerError::InvalidOptions(_)));
        assert!(e.to_string().contains("num_buckets"), "{e}");
    }
    for timer_slack in [Duration::from_millis(1001), Duration::MAX] {
        let e = TimerThread::start({
            let mut o = TimerOptions::default();
            o.timer_slack = timer_slack;
            o
        })
        .unwrap_err();
        assert!(e.to_string().contains("timer_slack"), "{e}");
    }
    // A spin longer than the spin budget's credit could never be given.
    for spin in [Duration::from_micros(1001), Duration::MAX] {
        let e = TimerThread::start({
            let mut o = TimerOptions::default();
            o.spin = spin;
            o
        })
        .unwrap_err();
        assert!(e.to_string().contains("spin"), "{e}");
    }
    for coalesce in [Duration::from_millis(1001), Duration::MAX] {
        let e = TimerThread::start({
            let mut o = TimerOptions::default();
            o.coalesce = coalesce;
            o
        })
        .unwrap_err();
        assert!(e.to_string().contains("coalesce"), "{e}");
    }
    let timer = TimerThread::start({
        let mut o = TimerOptions::default();
        o.spin = Duration::from_millis(1);
        o
    })
    .unwrap();
    sentinel(&timer, Instant::now() + Duration::from_millis(2));
    for num_buckets in [1, 1024] {
        let timer = TimerThread::start({
            let mut o = TimerOptions::default();
            o.num_buckets = num_buckets;
            o
        })
        .unwrap();
        sentinel(&timer, Instant::now());
    }
    // Zero slack means "the kernel default" to prctl; it is raised to 1 ns.
    let timer = TimerThread::start({
        let mut o = TimerOptions::default();
        o.timer_slack = Duration::ZERO;
        o.name = String::new();
        o
    })
    .unwrap();
    sentinel(&timer, Instant::now());
}
