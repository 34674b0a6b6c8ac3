//! Sleep, interrupt and stop (bthread's bthread_unittest sleep/stop tests
//! among them). Time tolerances are wide: these assert what happens and in
//! what order, never how fast.

mod common;

use common::rt;
use spindle::{Runtime, SleepError};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn sleep_in_a_task_sleeps_and_lets_others_run() {
    let rt = rt(1);
    rt.block_on(|| {
        let t = Instant::now();
        let sleeper = spindle::spawn(|| spindle::sleep(Duration::from_millis(30)));
        // The only worker is free while the other task sleeps.
        let other = spindle::spawn(|| 7);
        assert_eq!(other.join().unwrap(), 7);
        assert!(!sleeper.is_finished(), "the sleeper woke early");
        assert_eq!(sleeper.join().unwrap(), Ok(()));
        assert!(t.elapsed() >= Duration::from_millis(30));
    });
}

/// A worker polling ahead of its task's sleep (a `sleep_spin` as long as
/// the sleep itself) ends each sleep no earlier than its deadline, still
/// runs the work that comes meanwhile, and an interrupt still ends a sleep.
#[test]
fn a_worker_spinning_ahead_of_a_sleep_runs_other_work_and_never_wakes_it_early() {
    let spin = Duration::from_millis(10);
    let rt = Runtime::builder()
        .workers(1)
        .sleep_spin(spin)
        .build()
        .unwrap();
    rt.block_on(|| {
        for _ in 0..20 {
            let t = Instant::now();
            spindle::sleep(Duration::from_millis(1)).unwrap();
            assert!(t.elapsed() >= Duration::from_millis(1), "woke early");
        }
    });
    // A task spawned from a plain thread while the only worker polls for a
    // sleeper runs before the sleep ends (at least once in a few tries: a
    // busy machine may hold the spawning thread back for the whole sleep).
    let mut ran_during_the_sleep = 0;
    for _ in 0..5 {
        let asleep = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (a, d) = (asleep.clone(), done.clone());
        let sleeper = rt.spawn(move || {
            a.store(true, Ordering::SeqCst);
            let t = Instant::now();
            spindle::sleep(spin).unwrap();
            d.store(true, Ordering::SeqCst);
            t.elapsed()
        });
        while !asleep.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        let d = done.clone();
        let sleeper_was_done = rt.spawn(move || d.load(Ordering::SeqCst)).join();
        if !sleeper_was_done.unwrap() {
            ran_during_the_sleep += 1;
        }
        assert!(sleeper.join().unwrap() >= spin, "woke early");
    }
    assert!(
        ran_during_the_sleep > 0,
        "the polling worker ran no other work"
    );
    rt.block_on(|| {
        let sleeper = spindle::spawn(|| spindle::sleep(Duration::from_secs(60)));
        spindle::sleep(Duration::from_millis(2)).unwrap();
        spindle::interrupt(sleeper.id()).unwrap();
        assert_eq!(sleeper.join().unwrap(), Err(SleepError::Interrupted));
    });
}

/// `sleep_spin(Duration::MAX)`: workers poll through every sleep of their
/// tasks, however long (no overflow, no park), and those sleeps still end
/// on time or by interrupt.
#[test]
fn a_sleep_spin_of_any_length_polls_through_long_sleeps() {
    let rt = Runtime::builder()
        .workers(2)
        .sleep_spin(Duration::MAX)
        .build()
        .unwrap();
    rt.block_on(|| {
        let t = Instant::now();
        spindle::sleep(Duration::from_millis(2)).unwrap();
        assert!(t.elapsed() >= Duration::from_millis(2), "woke early");
        let sleeper = spindle::spawn(|| spindle::sleep(Duration::from_secs(60)));
        spindle::sleep(Duration::from_millis(5)).unwrap();
        spindle::interrupt(sleeper.id()).unwrap();
        assert_eq!(sleeper.join().unwrap(), Err(SleepError::Interrupted));
        let forever = spindle::spawn(|| spindle::sleep(Duration::MAX));
        spindle::sleep(Duration::from_millis(5)).unwrap();
        spindle::stop(forever.id()).unwrap();
        assert_eq!(forever.join().unwrap(), Err(SleepError::Stopped));
    });
}

#[test]
fn sleep_on_a_plain_thread_is_an_os_sleep() {
    let t = Instant::now();
    spindle::sleep(Duration::from_millis(5)).unwrap();
    assert!(t.elapsed() >= Duration::from_millis(5));
    spindle::usleep(100).unwrap();
}

/// A zero sleep, a past deadline and `usleep(0)` each yield: another task
/// that was runnable runs before they return, and none of them sleeps.
#[test]
fn zero_and_past_deadlines_yield_and_return() {
    let rt = rt(1);
    rt.block_on(|| {
        let ran = Arc::new(AtomicUsize::new(0));
        type ZeroSleep = fn() -> Result<(), SleepError>;
        let zero_sleeps: [(&str, ZeroSleep); 3] = [
            ("sleep(ZERO)", || spindle::sleep(Duration::ZERO)),
            ("a past sleep_until", || {
                spindle::sleep_until(Instant::now() - Duration::from_millis(1))
            }),
            ("usleep(0)", || spindle::usleep(0)),
        ];
        for (i, (what, zero_sleep)) in zero_sleeps.into_iter().enumerate() {
            let r = ran.clone();
            let other = spindle::spawn(move || r.fetch_add(1, Ordering::SeqCst));
            let t = Instant::now();
            assert_eq!(zero_sleep(), Ok(()), "{what}");
            assert!(t.elapsed() < Duration::from_secs(1), "{what} slept");
            assert_eq!(ran.load(Ordering::SeqCst), i + 1, "{what} did not yield");
            other.join().unwrap();
        }
    });
}

#[test]
fn sleeps_wake_in_deadline_order() {
    let rt = rt(2);
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let hs: Vec<_> = [40u64, 10, 30, 20]
        .into_iter()
        .map(|ms| {
            let order = order.clone();
            rt.spawn(move || {
                spindle::sleep(Duration::from_millis(ms * 5)).unwrap();
                order.lock().unwrap().push(ms);
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), [10, 20, 30, 40]);
}

#[test]
fn a_sleep_of_duration_max_is_forever_and_interruptible() {
    let rt = rt(1);
    let h = rt.spawn(|| spindle::sleep(Duration::MAX));
    std::thread::sleep(Duration::from_millis(20));
    assert!(!h.is_finished());
    spindle::interrupt(h.id()).unwrap();
    assert_eq!(h.join().unwrap(), Err(SleepError::Interrupted));
    // A deadline beyond the clock's range, likewise.
    let h = rt.spawn(|| {
        let far = Instant::now() + Duration::from_secs(u64::MAX / 4);
        spindle::sleep_until(far)
    });
    std::thread::sleep(Duration::from_millis(20));
    spindle::stop(h.id()).unwrap();
    assert_eq!(h.join().unwrap(), Err(SleepError::Stopped));
}

/// bthread: a task sleeping 1 s is stopped after 10 ms and ends promptly:
/// after the stop, not at the end of its sleep.
#[test]
fn a_long_sleep_is_stopped_promptly() {
    let rt = rt(2);
    let t = Instant::now();
    let h = rt.spawn(|| {
        let r = spindle::sleep(Duration::from_secs(1));
        (r, spindle::is_stopped(), Instant::now())
    });
    std::thread::sleep(Duration::from_millis(10));
    let stopped_at = Instant::now();
    spindle::stop(h.id()).unwrap();
    let (r, is_stopped, ended_at) = h.join().unwrap();
    assert_eq!((r, is_stopped), (Err(SleepError::Stopped), true));
    assert!(ended_at >= stopped_at, "the sleep ended before the stop");
    let took = ended_at - t;
    assert!(
        took < Duration::from_millis(900),
        "stop did not end the sleep: {took:?}"
    );
}

/// Every sleep of a stopped task fails at once, every time.
#[test]
fn a_stopped_task_cannot_sleep_again() {
    let rt = rt(1);
    let h = rt.spawn(|| {
        let me = spindle::current().unwrap();
        spindle::stop(me).unwrap();
        let t = Instant::now();
        let rs: Vec<_> = (0..3)
            .map(|_| spindle::sleep(Duration::from_secs(10)))
            .collect();
        (rs, t.elapsed())
    });
    let (rs, took) = h.join().unwrap();
    assert_eq!(rs, vec![Err(SleepError::Stopped); 3]);
    assert!(took < Duration::from_secs(5));
}

/// stop racing a task that is just entering its sleep never lets it sleep
/// the full time (brpc #721).
#[test]
fn stop_racing_the_start_of_a_sleep_is_never_lost() {
    let rt = rt(2);
    let t = Instant::now();
    for i in 0..2000u32 {
        let h = rt.spawn(move || {
            // Vary where the stop lands: before, during or after entry.
            for _ in 0..(i % 7) {
                std::hint::spin_loop();
            }
            spindle::sleep(Duration::from_secs(30))
        });
        if i % 3 == 0 {
            std::thread::yield_now();
        }
        spindle::stop(h.id()).unwrap();
        assert_eq!(h.join().unwrap(), Err(SleepError::Stopped));
    }
    assert!(t.elapsed() < Duration::from_secs(25), "a stop was lost");
}

/// What a task signalled before its first run saw.
struct FirstRun {
    /// Whether it saw itself stopped from its start.
    stopped_at_start: bool,
    /// Its first sleep (10 s), and how long that took.
    first: Result<(), SleepError>,
    took: Duration,
    /// A second sleep (20 ms).
    second: Result<(), SleepError>,
}

/// Runs `signal` on a task before it first runs (the only worker is held
/// by a task that spins), then lets it run.
fn signalled_before_the_first_run(
    signal: fn(spindle::TaskId) -> Result<(), spindle::NoSuchTask>,
) -> FirstRun {
    let rt = rt(1);
    let hold = Arc::new(AtomicUsize::new(1));
    let (held, h2) = (Arc::new(AtomicUsize::new(0)), hold.clone());
    let h3 = held.clone();
    // Holds the only worker without ever suspending.
    let holder = rt.spawn(move || {
        h3.store(1, Ordering::SeqCst);
        while h2.load(Ordering::SeqCst) == 1 {
            std::hint::spin_loop();
        }
    });
    while held.load(Ordering::SeqCst) == 0 {
        std::thread::yield_now();
    }
    let h = rt.spawn(|| {
        let stopped_at_start = spindle::is_stopped();
        let t = Instant::now();
        let first = spindle::sleep(Duration::from_secs(10));
        let took = t.elapsed();
        let second = spindle::sleep(Duration::from_millis(20));
        FirstRun {
            stopped_at_start,
            first,
            took,
            second,
        }
    });
    signal(h.id()).unwrap();
    hold.store(0, Ordering::SeqCst);
    holder.join().unwrap();
    h.join().unwrap()
}

#[test]
fn stop_before_the_first_run_fails_the_first_sleep_at_once() {
    let r = signalled_before_the_first_run(spindle::stop);
    assert!(r.stopped_at_start, "the stop was seen from the first run");
    assert_eq!(r.first, Err(SleepError::Stopped));
    assert!(r.took < Duration::from_secs(5));
    assert_eq!(r.second, Err(SleepError::Stopped), "a stop is for good");
}

#[test]
fn an_interrupt_before_the_first_run_ends_the_first_wait_only() {
    let r = signalled_before_the_first_run(spindle::interrupt);
    assert!(!r.stopped_at_start);
    assert_eq!(r.first, Err(SleepError::Interrupted));
    assert!(r.took < Duration::from_secs(5));
    assert_eq!(r.second, Ok(()), "an interrupt is delivered once");
}

#[test]
fn an_interrupt_while_running_ends_the_next_wait_only() {
    let rt = rt(1);
    let h = rt.spawn(|| {
        let me = spindle::current().unwrap();
        spindle::interrupt(me).unwrap();
        let first = spindle::sleep(Duration::from_secs(10));
        let t = Instant::now();
        let second = spindle::sleep(Duration::from_millis(20));
        (first, second, t.elapsed())
    });
    let (first, second, took) = h.join().unwrap();
    assert_eq!(first, Err(SleepError::Interrupted));
    assert_eq!(second, Ok(()), "an interrupt is delivered once");
    assert!(took >= Duration::from_millis(20));
}

#[test]
fn finished_or_unknown_ids_are_no_such_task() {
    let rt = rt(1);
    let h = rt.spawn(|| ());
    let id = h.id();
    h.join().unwrap();
    assert_eq!(spindle::interrupt(id), Err(spindle::NoSuchTask));
    assert_eq!(spindle::stop(id), Err(spindle::NoSuchTask));
    let forged = spindle::TaskId::from_u64(0xdead_beef_0000_0001);
    assert_eq!(spindle::interrupt(forged), Err(spindle::NoSuchTask));
}

#[test]
fn join_survives_interrupts_of_the_joiner() {
    let rt = rt(2);
    let joiner = rt.spawn(|| {
        let child = spindle::spawn(|| {
            spindle::sleep(Duration::from_millis(50)).unwrap();
            5
        });
        child.join().unwrap()
    });
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(2));
        let _ = spindle::interrupt(joiner.id());
    }
    assert_eq!(joiner.join().unwrap(), 5);
}

/// `join` is ended by a stop of the joiner (`JoinError::Stopped`), which
/// sees itself stopped; the child, detached, runs on to its end.
#[test]
fn a_stop_of_the_joiner_ends_its_join() {
    let rt = rt(2);
    let joining = Arc::new(AtomicUsize::new(0));
    let j2 = joining.clone();
    let joiner = rt.spawn(move || {
        let child = spindle::spawn(|| {
            spindle::sleep(Duration::from_millis(50)).unwrap();
            5
        });
        j2.store(1, Ordering::SeqCst);
        (
            child.join().unwrap_err().is_stopped(),
            spindle::is_stopped(),
        )
    });
    while joining.load(Ordering::SeqCst) == 0 {
        std::thread::yield_now();
    }
    std::thread::sleep(Duration::from_millis(5));
    spindle::stop(joiner.id()).unwrap();
    assert_eq!(joiner.join().unwrap(), (true, true));
}
