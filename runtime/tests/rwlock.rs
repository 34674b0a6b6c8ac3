//! `RwLock`, shared by tasks and plain threads: counts, writer preference,
//! deadlines that leave no trace (brpc PR #3286), interrupt and stop (which
//! do not end its waits), and the runtime's stop unwinding a waiting writer.

mod common;

use common::{rt, wait_for};
use spindle::sync::RwLock;
use spindle::{SleepError, WaitError};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Long enough that a wait this long means a bug, not a slow machine.
const LONG: Duration = Duration::from_secs(30);

#[test]
fn rwlock_basics() {
    let mut lock = RwLock::new(1);
    {
        let a = lock.read().unwrap();
        let b = lock.try_read().expect("readers share the lock");
        assert_eq!(*a + *b, 2);
        assert!(lock.try_write().is_none(), "no writer beside readers");
        assert_eq!(format!("{lock:?}"), "RwLock { value: 1 }");
    }
    {
        let mut w = lock.write().unwrap();
        *w += 1;
        assert!(lock.try_read().is_none(), "no reader beside a writer");
        assert!(lock.try_write().is_none(), "no second writer");
        assert_eq!(format!("{lock:?}"), "RwLock { value: \"<locked>\" }");
    }
    *lock.try_write().unwrap() += 1;
    *lock.get_mut() += 1;
    assert_eq!(*lock.read_until(None).unwrap(), 4);
    assert_eq!(lock.into_inner(), 4);
    static GLOBAL: RwLock<u32> = RwLock::new(0);
    *GLOBAL.write().unwrap() += 1;
    assert_eq!(*GLOBAL.read().unwrap(), 1);
    let unsized_lock: &RwLock<[u8]> = &RwLock::new([1, 2, 3]);
    assert_eq!(unsized_lock.read().unwrap().len(), 3);
}

/// Writers move two counters together under the lock; readers check they
/// are never seen apart. 400 tasks and 8 threads, with sleeps inside the
/// lock now and then so that waits happen; the final count is exact.
#[test]
fn writers_and_readers_of_tasks_and_threads_keep_the_invariant() {
    let rt = rt(2);
    let lock = Arc::new(RwLock::new((0u64, 0u64)));
    let reads = Arc::new(AtomicUsize::new(0));
    let body = |lock: Arc<RwLock<(u64, u64)>>, reads: Arc<AtomicUsize>, i: usize, rounds: usize| {
        move || {
            for r in 0..rounds {
                if (i + r) % 4 == 0 {
                    let mut g = lock.write().unwrap();
                    g.0 += 1;
                    if g.0 % 64 == 0 {
                        spindle::usleep(100).unwrap();
                    }
                    g.1 += 1;
                } else {
                    let g = lock.read().unwrap();
                    assert_eq!(g.0, g.1, "a reader saw a write half done");
                    if (i + r) % 97 == 0 {
                        spindle::usleep(50).unwrap();
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    };
    let tasks: Vec<_> = (0..400)
        .map(|i| rt.spawn(body(lock.clone(), reads.clone(), i, 40)))
        .collect();
    let threads: Vec<_> = (0..8)
        .map(|i| std::thread::spawn(body(lock.clone(), reads.clone(), i, 2000)))
        .collect();
    for h in tasks {
        h.join().unwrap();
    }
    for h in threads {
        h.join().unwrap();
    }
    let writes = 400 * 40 / 4 + 8 * 2000 / 4;
    assert_eq!(*lock.read().unwrap(), (writes as u64, writes as u64));
    assert_eq!(reads.load(Ordering::Relaxed), 400 * 40 + 8 * 2000 - writes);
}

/// A writer that waits for a reader to leave stops new readers (so a
/// stream of readers cannot starve it), and gets the lock once the reader
/// leaves; the reader that queued behind it gets in after it.
#[test]
fn a_waiting_writer_stops_new_readers() {
    let rt = rt(2);
    let lock = Arc::new(RwLock::new(0));
    let held = lock.read().unwrap();
    let writer = {
        let lock = lock.clone();
        rt.spawn(move || *lock.write().unwrap() += 1)
    };
    wait_for("the writer to claim the lock", || lock.try_read().is_none());
    let reader = {
        let lock = lock.clone();
        rt.spawn(move || *lock.read().unwrap())
    };
    std::thread::sleep(Duration::from_millis(20));
    assert!(!reader.is_finished(), "a reader went past a waiting writer");
    drop(held);
    writer.join().unwrap();
    assert_eq!(
        reader.join().unwrap(),
        1,
        "the reader came after the writer"
    );
}

/// brpc PR #3286: a writer waiting behind a reader gives up at its
/// `with_deadline` scope's deadline; it leaves no trace: the reader it held
/// back gets in, new readers get the lock at once, and a later writer
/// gets it too.
#[test]
fn a_writer_that_gives_up_leaves_no_trace() {
    let rt = rt(2);
    let lock = Arc::new(RwLock::new(0));
    let held = lock.read().unwrap();
    let claimed = Arc::new(AtomicBool::new(false));
    let writer = {
        let (lock, claimed) = (lock.clone(), claimed.clone());
        rt.spawn(move || {
            spindle::with_deadline(Instant::now() + Duration::from_millis(100), || {
                claimed.store(true, Ordering::SeqCst);
                lock.write().map(|_| ())
            })
        })
    };
    wait_for("the writer to claim the lock", || {
        claimed.load(Ordering::SeqCst) && lock.try_read().is_none()
    });
    // Held back by the writer's claim, from a task and from a thread.
    let task_reader = {
        let lock = lock.clone();
        rt.spawn(move || spindle::with_deadline(Instant::now() + LONG, || lock.read().map(|g| *g)))
    };
    let thread_reader = {
        let lock = lock.clone();
        std::thread::spawn(move || lock.read_until(Some(Instant::now() + LONG)).map(|g| *g))
    };
    assert_eq!(writer.join().unwrap(), Err(WaitError::DeadlineExceeded));
    assert_eq!(task_reader.join().unwrap(), Ok(0));
    assert_eq!(thread_reader.join().unwrap(), Ok(0));
    assert!(lock.try_read().is_some(), "a new reader gets in at once");
    drop(held);
    let later = {
        let lock = lock.clone();
        rt.spawn(move || {
            *lock.write_until(Some(Instant::now() + LONG)).unwrap() += 1;
        })
    };
    later.join().unwrap();
    assert_eq!(*lock.try_read().unwrap(), 1);
}

/// Many writers give up at their deadlines while readers come and go and
/// writers without deadlines go on: every patient writer gets the lock,
/// every reader too, and the lock ends free.
#[test]
fn writers_giving_up_in_a_crowd_lose_nobody_a_wake_up() {
    let rt = rt(2);
    let lock = Arc::new(RwLock::new(0u64));
    let gave_up = Arc::new(AtomicUsize::new(0));
    let mut hs = Vec::new();
    for i in 0..300u64 {
        let (lock, gave_up) = (lock.clone(), gave_up.clone());
        hs.push(rt.spawn(move || {
            for r in 0..20u64 {
                match (i + r) % 3 {
                    0 => {
                        let d = Instant::now() + Duration::from_micros(50 + (i * 7 + r) % 200);
                        match spindle::with_deadline(d, || lock.write().map(|mut g| *g += 1)) {
                            Ok(()) => {}
                            Err(WaitError::DeadlineExceeded) => {
                                gave_up.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                    1 => {
                        let g = lock.read().unwrap();
                        if r % 5 == 0 {
                            spindle::usleep(100).unwrap();
                        }
                        drop(g);
                    }
                    _ => *lock.write().unwrap() += 1,
                }
            }
        }));
    }
    for h in hs {
        h.join().unwrap();
    }
    let timed = (0..300u64)
        .flat_map(|i| (0..20u64).map(move |r| (i + r) % 3))
        .filter(|&k| k == 0)
        .count();
    let patient = (0..300u64)
        .flat_map(|i| (0..20u64).map(move |r| (i + r) % 3))
        .filter(|&k| k == 2)
        .count();
    let writes = *lock.try_read().expect("the lock ends free");
    assert_eq!(
        writes as usize + gave_up.load(Ordering::Relaxed),
        timed + patient
    );
    assert!(lock.try_write().is_some(), "no claim left behind");
}

#[test]
fn timed_waits_time_out_on_a_plain_thread() {
    let lock = RwLock::new(());
    let w = lock.write().unwrap();
    let soon = || Some(Instant::now() + Duration::from_millis(10));
    assert_eq!(lock.read_until(soon()).unwrap_err(), WaitError::TimedOut);
    assert_eq!(lock.write_until(soon()).unwrap_err(), WaitError::TimedOut);
    drop(w);
    let r = lock.read().unwrap();
    assert_eq!(lock.write_until(soon()).unwrap_err(), WaitError::TimedOut);
    assert!(lock.try_read().is_some(), "the writer withdrew its claim");
    drop(r);
    assert!(lock.try_write().is_some());
}

/// `interrupt` and `stop` do not end a wait for the lock (as with
/// `Mutex`): the task gets the lock once it is free, and the interrupt
/// stays pending for its next sleep (a stop, for all of them).
#[test]
fn interrupt_and_stop_do_not_end_a_wait_for_the_lock() {
    let rt = rt(2);
    for stop in [false, true] {
        let lock = Arc::new(RwLock::new(0));
        let held = lock.write().unwrap();
        let waiters: Vec<_> = (0..2)
            .map(|i| {
                let lock = lock.clone();
                rt.spawn(move || {
                    let got = if i == 0 {
                        lock.write().map(|g| *g)
                    } else {
                        lock.read().map(|g| *g)
                    };
                    (got, spindle::sleep(LONG))
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20));
        for h in &waiters {
            if stop {
                h.stop().unwrap();
            } else {
                spindle::interrupt(h.id()).unwrap();
            }
        }
        std::thread::sleep(Duration::from_millis(20));
        assert!(waiters.iter().all(|h| !h.is_finished()), "a wait ended");
        drop(held);
        let expected = if stop {
            SleepError::Stopped
        } else {
            SleepError::Interrupted
        };
        for h in waiters {
            assert_eq!(h.join().unwrap(), (Ok(0), Err(expected)));
        }
    }
}

/// The shape that deadlocks with `std::sync::RwLock` on one worker: task A
/// holds the lock across a sleep while task B waits for it. With std's
/// lock B blocks the only worker thread and A never wakes; here B only
/// suspends, A finishes its sleep, and both complete.
#[test]
fn a_lock_held_across_a_sleep_on_one_worker_completes() {
    let rt = rt(1);
    for b_writes in [true, false] {
        let lock = Arc::new(RwLock::new(0));
        let a = {
            let lock = lock.clone();
            rt.spawn(move || {
                let mut g = lock.write().unwrap();
                spindle::sleep(Duration::from_millis(20)).unwrap();
                *g += 1;
            })
        };
        let b = {
            let lock = lock.clone();
            rt.spawn(move || {
                spindle::yield_now();
                if b_writes {
                    let mut g = lock.write().unwrap();
                    *g += 1;
                    *g
                } else {
                    *lock.read().unwrap()
                }
            })
        };
        a.join().unwrap();
        assert_eq!(b.join().unwrap(), if b_writes { 2 } else { 1 });
    }
}

/// The runtime's stop unwinds a writer that waits for a reader: its claim
/// is withdrawn on the way out, so readers get in afterwards.
#[test]
fn a_writer_unwound_at_shutdown_withdraws_its_claim() {
    let rt = rt(1);
    let lock = Arc::new(RwLock::new(0));
    let held = lock.read().unwrap();
    let writer = {
        let lock = lock.clone();
        rt.spawn(move || {
            *lock.write().unwrap() += 1;
        })
    };
    wait_for("the writer to claim the lock", || lock.try_read().is_none());
    rt.shutdown();
    assert!(writer.join().is_err(), "the writer was cancelled");
    assert!(lock.try_read().is_some(), "the claim was withdrawn");
    drop(held);
    assert_eq!(*lock.try_write().expect("the lock is free"), 0);
}
