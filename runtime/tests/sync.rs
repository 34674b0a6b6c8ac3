//! Mutex, Condvar and CountdownEvent, shared by tasks and plain threads.

mod common;

use common::rt;
use spindle::sync::{Condvar, CountdownEvent, Mutex};
use spindle::WaitError;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn mutex_basics() {
    let m = Mutex::new(1);
    {
        let mut g = m.lock().unwrap();
        *g += 1;
        assert!(m.try_lock().is_none());
    }
    assert_eq!(*m.try_lock().unwrap(), 2);
    assert_eq!(m.into_inner(), 2);
}

/// bthread: a mutex with a sleep inside its critical section, shared by
/// 1000 tasks and 8 threads, completes with an exact count.
#[test]
fn a_mutex_shared_by_tasks_and_threads_completes() {
    let rt = rt(2);
    let m = Arc::new(Mutex::new(0u64));
    let tasks: Vec<_> = (0..1000)
        .map(|_| {
            let m = m.clone();
            rt.spawn(move || {
                for _ in 0..3 {
                    let mut g = m.lock().unwrap();
                    *g += 1;
                    if *g % 50 == 0 {
                        spindle::usleep(100).unwrap();
                    }
                }
            })
        })
        .collect();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let m = m.clone();
            std::thread::spawn(move || {
                for _ in 0..300 {
                    let mut g = m.lock().unwrap();
                    *g += 1;
                    if *g % 50 == 0 {
                        spindle::usleep(100).unwrap();
                    }
                }
            })
        })
        .collect();
    for h in tasks {
        h.join().unwrap();
    }
    for h in threads {
        h.join().unwrap();
    }
    assert_eq!(*m.lock().unwrap(), 3000 + 2400);
}

/// bthread: 8 waiters woken one at a time, every 10 ms: FIFO notify_one
/// wakes each in turn (counts within 1 of the mean).
#[test]
fn condvar_notify_one_is_fair() {
    let rt = rt(2);
    let pair = Arc::new((Mutex::new(()), Condvar::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let counts: Arc<Vec<AtomicUsize>> = Arc::new((0..8).map(|_| AtomicUsize::new(0)).collect());
    let waiting = Arc::new(AtomicUsize::new(0));
    let hs: Vec<_> = (0..8)
        .map(|i| {
            let (pair, stop, counts, waiting) =
                (pair.clone(), stop.clone(), counts.clone(), waiting.clone());
            rt.spawn(move || {
                let (m, cv) = &*pair;
                let mut g = m.lock().unwrap();
                loop {
                    waiting.fetch_add(1, Ordering::SeqCst);
                    g = cv.wait(g).unwrap();
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    counts[i].fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    while waiting.load(Ordering::SeqCst) < 8 {
        std::thread::sleep(Duration::from_millis(1));
    }
    const ROUNDS: usize = 80;
    for r in 1..=ROUNDS {
        // Each round, wait until the woken waiter is back in the queue.
        while waiting.load(Ordering::SeqCst) < 8 + r - 1 {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(10));
        let _g = pair.0.lock().unwrap();
        pair.1.notify_one();
    }
    while waiting.load(Ordering::SeqCst) < 8 + ROUNDS {
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::SeqCst);
    {
        let _g = pair.0.lock().unwrap();
        pair.1.notify_all();
    }
    for h in hs {
        h.join().unwrap();
    }
    let counts: Vec<_> = counts.iter().map(|c| c.load(Ordering::SeqCst)).collect();
    let mean = ROUNDS / 8;
    for c in &counts {
        assert!(c.abs_diff(mean) <= 1, "unfair wake-ups: {counts:?}");
    }
}

/// bthread: notify_all over many rounds with 10 tasks + 10 threads loses
/// no waiter.
#[test]
fn condvar_notify_all_loses_no_waiter() {
    let rt = rt(2);
    let rounds: u64 = common::scaled(30_000, 3_000);
    const WAITERS: u64 = 20;
    struct State {
        round: u64,
        arrived: u64,
    }
    let pair = Arc::new((
        Mutex::new(State {
            round: 0,
            arrived: 0,
        }),
        Condvar::new(),
    ));
    // A barrier on the condvar: the last to arrive in a round starts the next
    // one and notifies everybody. A lost waiter hangs the test.
    let body = |pair: Arc<(Mutex<State>, Condvar)>| {
        move || {
            let (m, cv) = &*pair;
            let mut g = m.lock().unwrap();
            while g.round < rounds {
                let round = g.round;
                g.arrived += 1;
                if g.arrived == WAITERS {
                    g.arrived = 0;
                    g.round += 1;
                    cv.notify_all();
                } else {
                    g = cv.wait_while(g, |s| s.round == round).unwrap();
                }
            }
        }
    };
    let tasks: Vec<_> = (0..10).map(|_| rt.spawn(body(pair.clone()))).collect();
    let threads: Vec<_> = (0..10)
        .map(|_| std::thread::spawn(body(pair.clone())))
        .collect();
    for h in tasks {
        h.join().unwrap();
    }
    for h in threads {
        h.join().unwrap();
    }
    assert_eq!(pair.0.lock().unwrap().round, rounds);
}

#[test]
fn condvar_wait_until_times_out() {
    let rt = rt(1);
    rt.block_on(|| {
        let m = Mutex::new(());
        let cv = Condvar::new();
        let g = m.lock().unwrap();
        let r = cv.wait_until(g, Instant::now() + Duration::from_millis(10));
        assert_eq!(r.unwrap_err(), WaitError::TimedOut);
        assert!(
            m.try_lock().is_some(),
            "the mutex is left unlocked on error"
        );
    });
}

#[test]
fn countdown_event() {
    let rt = rt(2);
    let ev = Arc::new(CountdownEvent::new(3));
    assert_eq!(CountdownEvent::default().count(), 1);
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            let ev = ev.clone();
            rt.spawn(move || ev.wait())
        })
        .collect();
    let thread_waiter = {
        let ev = ev.clone();
        std::thread::spawn(move || ev.wait())
    };
    ev.add_count(1).unwrap();
    for _ in 0..3 {
        ev.signal(1);
    }
    std::thread::sleep(Duration::from_millis(10));
    assert!(waiters.iter().all(|h| !h.is_finished()));
    ev.signal(5); // saturates at zero
    assert_eq!(ev.count(), 0);
    for h in waiters {
        assert_eq!(h.join().unwrap(), Ok(()));
    }
    assert_eq!(thread_waiter.join().unwrap(), Ok(()));
    let ev = CountdownEvent::new(1);
    assert_eq!(
        ev.wait_until(Instant::now() + Duration::from_millis(5)),
        Err(WaitError::TimedOut)
    );
    // Signalled before its deadline, a timed wait succeeds.
    let ev = Arc::new(CountdownEvent::new(1));
    let timed = {
        let ev = ev.clone();
        rt.spawn(move || ev.wait_until(Instant::now() + Duration::from_secs(30)))
    };
    std::thread::sleep(Duration::from_millis(5));
    ev.signal(1);
    assert_eq!(timed.join().unwrap(), Ok(()));
}

/// `Condvar::wait_until` notified before its deadline returns the guard.
#[test]
fn condvar_wait_until_notified_in_time() {
    let rt = rt(2);
    let pair = Arc::new((Mutex::new(false), Condvar::new()));
    let p2 = pair.clone();
    let waiter = rt.spawn(move || {
        let (m, cv) = &*p2;
        let mut ready = m.lock().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !*ready {
            ready = cv.wait_until(ready, deadline)?;
        }
        Ok::<_, WaitError>(Instant::now() < deadline)
    });
    std::thread::sleep(Duration::from_millis(5));
    *pair.0.lock().unwrap() = true;
    pair.1.notify_all();
    assert_eq!(waiter.join().unwrap(), Ok(true));
}

#[test]
fn add_count_past_u32_max_is_an_error_that_changes_nothing() {
    let ev = CountdownEvent::new(2);
    let err = ev.add_count(u32::MAX - 1).unwrap_err();
    assert_eq!((err.count, err.added), (2, u32::MAX - 1));
    assert_eq!(ev.count(), 2, "the count is left as it was");
    ev.add_count(u32::MAX - 2).unwrap();
    assert_eq!(ev.count(), u32::MAX);
    ev.signal(u32::MAX);
    assert_eq!(ev.wait(), Ok(()));
}

/// A waiter that `notify_one` woke, but whose deadline scope ends before it
/// gets the mutex back, passes the notification on: the next waiter is not
/// left asleep beside the work it was meant for. (The notification must
/// not be lost with the scope's error.)
#[test]
fn a_notification_taken_by_a_waiter_whose_deadline_passes_is_passed_on() {
    let pair = Arc::new((Mutex::new(0u32), Condvar::new()));
    let start = Instant::now();
    let waiter = |deadline: Option<Instant>, own: Instant| {
        let pair = pair.clone();
        std::thread::spawn(move || {
            let (m, cv) = &*pair;
            // Counted outside the scope: however late this thread starts,
            // the count moves and the main thread goes on.
            let mut g = m.lock().unwrap();
            *g += 1; // queued (or about to be)
            let wait = || cv.wait_until(g, own).map(|_| ());
            match deadline {
                Some(d) => spindle::with_deadline(d, wait),
                None => wait(),
            }
        })
    };
    let (m, cv) = &*pair;
    // First in line: it takes the notification, then its scope ends while
    // the notifier still holds the mutex.
    let first = waiter(
        Some(start + Duration::from_millis(300)),
        start + Duration::from_secs(60),
    );
    while *m.lock().unwrap() < 1 {
        std::thread::yield_now();
    }
    std::thread::sleep(Duration::from_millis(50)); // let it queue
                                                   // Second: no scope; it gives up by itself after 20 s.
    let second = waiter(None, start + Duration::from_secs(20));
    while *m.lock().unwrap() < 2 {
        std::thread::yield_now();
    }
    std::thread::sleep(Duration::from_millis(50));
    let g = m.lock().unwrap();
    cv.notify_one();
    // Hold the mutex past the first waiter's deadline.
    while Instant::now() < start + Duration::from_millis(600) {
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(g);
    assert_eq!(first.join().unwrap(), Err(WaitError::DeadlineExceeded));
    assert_eq!(
        second.join().unwrap(),
        Ok(()),
        "the second waiter was woken in the first one's place"
    );
}

/// Guards the shape that deadlocks a worker with `std::sync::Mutex`: on
/// one worker, a task holds the lock across a sleep while another task
/// contends for it. With std's lock the contender would block the worker
/// thread, and the holder could never resume to unlock; spindle's suspends
/// the contender, so both finish.
#[test]
fn the_std_mutex_deadlock_shape_completes() {
    let rt = spindle::Runtime::builder().workers(1).build().unwrap();
    let m = Arc::new(Mutex::new(0u32));
    let m2 = m.clone();
    let contenders = rt.block_on(move || {
        let mut g = m2.lock().unwrap();
        // Contenders on the same (only) worker, queued while we hold it.
        let contenders: Vec<_> = (0..4)
            .map(|_| {
                let m = m2.clone();
                spindle::spawn(move || *m.lock().unwrap() += 10)
            })
            .collect();
        spindle::sleep(Duration::from_millis(20)).unwrap();
        *g += 1;
        contenders
    });
    for c in contenders {
        c.join().unwrap();
    }
    assert_eq!(*m.lock().unwrap(), 41);
}
