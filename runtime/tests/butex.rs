//! Butex: the wait primitive, from tasks and plain threads.

mod common;

use common::rt;
use spindle::{Butex, WaitError};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn a_past_deadline_times_out_from_a_task_and_a_thread() {
    let b = Arc::new(Butex::new(0));
    let past = Instant::now() - Duration::from_millis(1);
    assert_eq!(b.wait(0, Some(past)), Err(WaitError::TimedOut));
    let rt = rt(1);
    let b2 = b.clone();
    assert_eq!(
        rt.block_on(move || b2.wait(0, Some(past))),
        Err(WaitError::TimedOut)
    );
}

#[test]
fn a_value_mismatch_is_would_block() {
    let b = Arc::new(Butex::new(3));
    assert_eq!(b.wait(2, None), Err(WaitError::WouldBlock));
    let rt = rt(1);
    let b2 = b.clone();
    assert_eq!(
        rt.block_on(move || b2.wait(2, None)),
        Err(WaitError::WouldBlock)
    );
}

#[test]
fn a_timed_wait_times_out_from_a_task_and_a_thread() {
    let rt = rt(1);
    let b = Arc::new(Butex::new(0));
    let t = Instant::now();
    let d = Some(Instant::now() + Duration::from_millis(20));
    assert_eq!(b.wait(0, d), Err(WaitError::TimedOut));
    let b2 = b.clone();
    assert_eq!(
        rt.block_on(move || b2.wait(0, Some(Instant::now() + Duration::from_millis(20)))),
        Err(WaitError::TimedOut)
    );
    assert!(t.elapsed() >= Duration::from_millis(40));
}

/// Waiters are woken in the order they started waiting. (Not spawn order:
/// the scheduler may start tasks out of spawn order, e.g. a fairness tick
/// taking a newer task from the inbox. With one worker, a task records
/// itself and links its wait in the same run slice, so the record order is
/// the wait order.)
#[test]
fn wake_one_is_fifo() {
    let rt = rt(1);
    let b = Arc::new(Butex::new(0));
    let entered = Arc::new(std::sync::Mutex::new(Vec::new()));
    let woken = Arc::new(std::sync::Mutex::new(Vec::new()));
    let hs: Vec<_> = (0..5)
        .map(|i| {
            let (b, entered, woken) = (b.clone(), entered.clone(), woken.clone());
            rt.spawn(move || {
                entered.lock().unwrap().push(i);
                b.wait(0, None).unwrap();
                woken.lock().unwrap().push(i);
            })
        })
        .collect();
    while entered.lock().unwrap().len() < 5 {
        std::thread::sleep(Duration::from_millis(1));
    }
    for _ in 0..5 {
        // Each wake finds a waiter once the last one has linked.
        while b.wake_one() == 0 {
            std::thread::yield_now();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(*woken.lock().unwrap(), *entered.lock().unwrap());
}

/// bthread: 20 waiters (10 tasks, 10 threads), half with 1 s deadlines:
/// each times out or is woken exactly once, and a timed-out waiter leaves
/// the queue (a later wake goes to somebody still waiting).
#[test]
fn mixed_waiters_time_out_or_wake_exactly_once() {
    let rt = rt(2);
    let b = Arc::new(Butex::new(0));
    let (woken, timed_out) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let waiter = |i: usize| {
        let (b, woken, timed_out) = (b.clone(), woken.clone(), timed_out.clone());
        move || {
            let deadline = (i % 2 == 0).then(|| Instant::now() + Duration::from_secs(1));
            match b.wait(0, deadline) {
                Ok(()) => woken.fetch_add(1, Ordering::SeqCst),
                Err(WaitError::TimedOut) => timed_out.fetch_add(1, Ordering::SeqCst),
                Err(e) => panic!("unexpected {e:?}"),
            };
        }
    };
    let tasks: Vec<_> = (0..10).map(|i| rt.spawn(waiter(i))).collect();
    let threads: Vec<_> = (0..10).map(|i| std::thread::spawn(waiter(i))).collect();
    // After the timed waiters have left, wake the others one by one.
    while timed_out.load(Ordering::SeqCst) < 10 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut wakes = 0;
    let t = Instant::now();
    while woken.load(Ordering::SeqCst) < 10 {
        wakes += b.wake_one();
        assert!(t.elapsed() < Duration::from_secs(30), "a waiter was lost");
        std::thread::sleep(Duration::from_millis(1));
    }
    for h in tasks {
        h.join().unwrap();
    }
    for h in threads {
        h.join().unwrap();
    }
    assert_eq!(wakes, 10, "each wake went to a live waiter");
    assert_eq!(timed_out.load(Ordering::SeqCst), 10);
    assert_eq!(b.wake_all(), 0, "the queue is empty");
}

#[test]
fn a_waiter_is_interrupted_and_stopped_promptly() {
    let rt = rt(2);
    let b = Arc::new(Butex::new(0));
    let b2 = b.clone();
    let t = Instant::now();
    let h = rt.spawn(move || {
        // Deadlines far beyond the test: a lost signal fails, not hangs.
        let far = || Some(Instant::now() + Duration::from_secs(30));
        let first = b2.wait(0, far());
        let second = b2.wait(0, far());
        (first, second)
    });
    std::thread::sleep(Duration::from_millis(10));
    spindle::interrupt(h.id()).unwrap();
    std::thread::sleep(Duration::from_millis(10));
    spindle::stop(h.id()).unwrap();
    assert_eq!(
        h.join().unwrap(),
        (Err(WaitError::Interrupted), Err(WaitError::Stopped))
    );
    assert!(t.elapsed() < Duration::from_secs(20));
}

/// Wake and timeout racing: every wait has exactly one outcome, and a
/// cancelled timer never ends a later wait (no false TimedOut). A strict
/// ping-pong: each round, the timed side waits until the other side hands it
/// the turn, on a reused butex. Every other wait has a deadline a few dozen
/// µs away, so that its timer races the wake-up and, when the wake wins, is
/// cancelled shortly before it would fire; the waits between have 10 s
/// deadlines. A stale timer firing into a later wait shows as a `TimedOut`
/// before that wait's own deadline.
#[test]
fn a_reused_butex_never_sees_a_false_timeout() {
    let rt = rt(2);
    let rounds: u32 = common::scaled(2_000_000, 200_000);
    let turn = Arc::new(Butex::new(0)); // even: the timed side's turn to wait
    let waited = Arc::new(AtomicUsize::new(0));
    let (t2, w2) = (turn.clone(), waited.clone());
    let timed = rt.spawn(move || {
        let (mut false_timeouts, mut timeouts) = (0, 0);
        let mut waits = 0u64;
        for r in 0..rounds {
            let mine = 2 * r + 1;
            loop {
                let cur = t2.value().load(Ordering::Acquire);
                if cur == mine {
                    break;
                }
                w2.fetch_add(1, Ordering::Relaxed);
                waits += 1;
                let ahead = if waits % 2 == 0 {
                    Duration::from_micros(10 + waits % 64)
                } else {
                    Duration::from_secs(10)
                };
                let deadline = Instant::now() + ahead;
                match t2.wait(cur, Some(deadline)) {
                    Ok(()) | Err(WaitError::WouldBlock) => {}
                    Err(WaitError::TimedOut) if Instant::now() < deadline => false_timeouts += 1,
                    Err(WaitError::TimedOut) => timeouts += 1,
                    Err(e) => panic!("{e:?}"),
                }
            }
            t2.value().store(mine + 1, Ordering::Release);
            t2.wake_one();
        }
        (false_timeouts, timeouts)
    });
    let t3 = turn.clone();
    let plain = rt.spawn(move || {
        for r in 0..rounds {
            loop {
                let cur = t3.value().load(Ordering::Acquire);
                if cur == 2 * r {
                    break;
                }
                let _ = t3.wait(cur, None);
            }
            t3.value().store(2 * r + 1, Ordering::Release);
            t3.wake_one();
        }
    });
    plain.join().unwrap();
    let (false_timeouts, timeouts) = timed.join().unwrap();
    assert_eq!(false_timeouts, 0, "a wait was ended by a stale timer");
    // Most rounds really waited (and so armed a timer), and the short
    // deadlines really raced their wake-ups: some won (which cancelled a
    // timer about to fire), some lost.
    let waited = waited.load(Ordering::Relaxed);
    assert!(waited > rounds as usize / 2);
    assert!(
        timeouts > 0 && timeouts < waited / 2,
        "{timeouts} of {waited} waits timed out"
    );
}

/// `wake_all` wakes the waiters queued when it is called, not those that
/// queue again while it runs: waiters that re-wait as fast as they are
/// woken must not keep it going. (Guards against a `wake_all` that goes on
/// as long as its batches of 32 come back full.)
#[test]
fn wake_all_leaves_waiters_that_queue_after_it_began() {
    const WAITERS: usize = 96;
    let rt = rt(2);
    let b = Arc::new(Butex::new(0));
    let waiting = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..WAITERS)
        .map(|_| {
            let (b, waiting) = (b.clone(), waiting.clone());
            rt.spawn(move || {
                // Wait again at once after every wake, until the value moves.
                while b.value().load(Ordering::Acquire) == 0 {
                    waiting.fetch_add(1, Ordering::SeqCst);
                    let _ = b.wait(0, None);
                }
            })
        })
        .collect();
    // Waits begun so far: each woken waiter begins another.
    let mut begun = WAITERS;
    for round in 0..20 {
        while waiting.load(Ordering::SeqCst) < begun {
            std::thread::yield_now();
        }
        std::thread::sleep(Duration::from_millis(2)); // let the last ones queue
        let woken = b.wake_all();
        assert!(
            woken <= WAITERS,
            "round {round}: {woken} wakes for {WAITERS} waiters"
        );
        begun += woken;
    }
    b.value().store(1, Ordering::Release);
    b.wake_all();
    for t in tasks {
        t.join().unwrap();
    }
}
