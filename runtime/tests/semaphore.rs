//! `Semaphore`, shared by tasks and plain threads: holders never exceed
//! the permits, counts are exact, waits that deadlines, interrupts or stops
//! end take no permit and lose no wake-up for the others.

mod common;

use common::rt;
use spindle::sync::{Semaphore, TryAcquireError};
use spindle::WaitError;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Long enough that a wait this long means a bug, not a slow machine.
const LONG: Duration = Duration::from_secs(30);

#[test]
fn semaphore_basics() {
    static GLOBAL: Semaphore = Semaphore::new(1);
    drop(GLOBAL.acquire().unwrap());
    let sem = Semaphore::new(3);
    let a = sem.acquire().unwrap();
    let b = sem.acquire_many(2).unwrap();
    assert_eq!((a.num_permits(), b.num_permits()), (1, 2));
    assert_eq!(sem.available_permits(), 0);
    let e = sem.try_acquire().unwrap_err();
    assert_eq!(e, TryAcquireError::NoPermits);
    assert_eq!(e.to_string(), "not enough permits available");
    drop(b);
    assert_eq!(sem.available_permits(), 2);
    assert!(sem.try_acquire_many(3).is_err(), "all or none");
    sem.try_acquire().unwrap().forget();
    drop(a);
    assert_eq!(sem.available_permits(), 2, "a forgotten permit stays out");
    sem.add_permits(5);
    assert_eq!(sem.available_permits(), 7);
    assert_eq!(sem.acquire_many(0).unwrap().num_permits(), 0);
    let soon = Some(Instant::now() + Duration::from_millis(10));
    assert_eq!(
        sem.acquire_many_until(8, soon).unwrap_err(),
        WaitError::TimedOut
    );
    assert_eq!(sem.available_permits(), 7, "a failed wait takes nothing");
    assert!(format!("{sem:?}").contains("permits: 7"));
}

/// 4 permits, 300 tasks and 6 threads taking 1 or 2 at a time, with
/// sleeps while holding some: never more than 4 held at once, every
/// acquire served, all permits back at the end.
#[test]
fn holders_never_exceed_the_permits() {
    let rt = rt(2);
    let sem = Arc::new(Semaphore::new(4));
    let held = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    let served = Arc::new(AtomicUsize::new(0));
    let body = |i: usize, rounds: usize| {
        let (sem, held, max, served) = (sem.clone(), held.clone(), max.clone(), served.clone());
        move || {
            for r in 0..rounds {
                let n = 1 + (i + r) % 2;
                let p = sem.acquire_many(n).unwrap();
                let now = held.fetch_add(n, Ordering::SeqCst) + n;
                max.fetch_max(now, Ordering::SeqCst);
                assert!(now <= 4, "{now} permits held at once");
                if (i + r) % 16 == 0 {
                    spindle::usleep(50).unwrap();
                }
                held.fetch_sub(n, Ordering::SeqCst);
                drop(p);
                served.fetch_add(1, Ordering::Relaxed);
            }
        }
    };
    let tasks: Vec<_> = (0..300).map(|i| rt.spawn(body(i, 50))).collect();
    let threads: Vec<_> = (0..6).map(|i| std::thread::spawn(body(i, 2000))).collect();
    for h in tasks {
        h.join().unwrap();
    }
    for h in threads {
        h.join().unwrap();
    }
    assert_eq!(served.load(Ordering::Relaxed), 300 * 50 + 6 * 2000);
    assert!(max.load(Ordering::SeqCst) >= 2, "the permits were shared");
    assert_eq!(sem.available_permits(), 4);
}

/// Waiters that give up at their deadlines (scopes and their own) mixed
/// with patient ones, while permits trickle in one by one: every patient
/// waiter gets a permit (none was lost with a wait that failed), and no
/// failed wait took one.
#[test]
fn waits_that_give_up_lose_no_wake_up() {
    let rt = rt(2);
    const PATIENT: usize = 100;
    let sem = Arc::new(Semaphore::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let mut patient = Vec::new();
    let mut impatient = Vec::new();
    for i in 0..PATIENT {
        let s = sem.clone();
        patient.push(rt.spawn(move || {
            spindle::with_deadline(Instant::now() + LONG, || s.acquire().map(|p| p.forget()))
        }));
        let (sem, failed) = (sem.clone(), failed.clone());
        impatient.push(rt.spawn(move || {
            for r in 0..20u64 {
                let d = Instant::now() + Duration::from_micros(20 + (i as u64 * 13 + r * 7) % 300);
                let got = if r % 2 == 0 {
                    spindle::with_deadline(d, || sem.acquire())
                } else {
                    sem.acquire_until(Some(d))
                };
                // A permit it got goes straight back: only the patient
                // keep theirs.
                match got {
                    Ok(p) => drop(p),
                    Err(WaitError::DeadlineExceeded | WaitError::TimedOut) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }));
    }
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let sem = sem.clone();
            std::thread::spawn(move || {
                sem.acquire_until(Some(Instant::now() + LONG))
                    .map(|p| p.forget())
            })
        })
        .collect();
    for _ in 0..PATIENT + 4 {
        sem.add_permits(1);
        std::thread::sleep(Duration::from_micros(200));
    }
    for h in patient {
        h.join().unwrap().unwrap();
    }
    for h in threads {
        h.join().unwrap().unwrap();
    }
    for h in impatient {
        h.join().unwrap();
    }
    assert!(failed.load(Ordering::Relaxed) > 0, "some waits gave up");
    assert_eq!(
        sem.available_permits(),
        0,
        "every permit went to a patient waiter"
    );
}

/// Waiters that want many do not hold back those behind them that want
/// few: one permit reaches the waiter that wants one.
#[test]
fn a_big_waiter_does_not_block_a_small_one() {
    let rt = rt(2);
    let sem = Arc::new(Semaphore::new(0));
    let big = {
        let sem = sem.clone();
        rt.spawn(move || sem.acquire_many(3).map(|p| p.forget()))
    };
    std::thread::sleep(Duration::from_millis(10));
    let small = {
        let sem = sem.clone();
        rt.spawn(move || {
            sem.acquire_until(Some(Instant::now() + LONG))
                .map(|p| p.forget())
        })
    };
    std::thread::sleep(Duration::from_millis(10));
    sem.add_permits(1);
    small.join().unwrap().unwrap();
    assert!(!big.is_finished());
    sem.add_permits(3);
    big.join().unwrap().unwrap();
    assert_eq!(sem.available_permits(), 0);
}

/// An acquire is interruptible: `interrupt` ends it with `Interrupted`,
/// `stop` with `Stopped` (and a stopped task's later waits fail at once,
/// while one that finds a permit free takes it). Neither takes a permit,
/// and a waiter behind them still gets the next one.
#[test]
fn interrupt_and_stop_end_an_acquire() {
    let rt = rt(2);
    let sem = Arc::new(Semaphore::new(0));
    let interrupted = {
        let sem = sem.clone();
        rt.spawn(move || sem.acquire().map(|_| ()))
    };
    let stopped = {
        let sem = sem.clone();
        rt.spawn(move || {
            let first = sem.acquire().map(|_| ());
            let second = sem.acquire().map(|_| ());
            (first, second)
        })
    };
    let patient = {
        let sem = sem.clone();
        rt.spawn(move || sem.acquire().map(|p| p.forget()))
    };
    std::thread::sleep(Duration::from_millis(20));
    interrupted.interrupt().unwrap();
    stopped.stop().unwrap();
    assert_eq!(interrupted.join().unwrap(), Err(WaitError::Interrupted));
    assert_eq!(
        stopped.join().unwrap(),
        (Err(WaitError::Stopped), Err(WaitError::Stopped))
    );
    assert_eq!(sem.available_permits(), 0);
    sem.add_permits(1);
    patient.join().unwrap().unwrap();
    // A stopped task still takes a free permit.
    sem.add_permits(1);
    let h = rt.spawn({
        let sem = sem.clone();
        move || {
            spindle::stop(spindle::current().unwrap()).unwrap();
            sem.acquire().map(|p| p.num_permits())
        }
    });
    assert_eq!(h.join().unwrap(), Ok(1));
}

/// The std-mutex-deadlock shape with a semaphore of one permit, on one
/// worker: A holds the permit across a sleep while B waits for it; B only
/// suspends, and both complete.
#[test]
fn a_permit_held_across_a_sleep_on_one_worker_completes() {
    let rt = rt(1);
    let sem = Arc::new(Semaphore::new(1));
    let a = {
        let sem = sem.clone();
        rt.spawn(move || {
            let _p = sem.acquire().unwrap();
            spindle::sleep(Duration::from_millis(20)).unwrap();
        })
    };
    let b = {
        let sem = sem.clone();
        rt.spawn(move || {
            spindle::yield_now();
            sem.acquire().map(|_| ())
        })
    };
    a.join().unwrap();
    b.join().unwrap().unwrap();
    assert_eq!(sem.available_permits(), 1);
}

/// Owned permits: taken through the `Arc`, all or none, counted, given
/// back on drop (a forgotten one stays out), and `Send + Sync`.
#[test]
fn owned_permits_basics() {
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<spindle::sync::OwnedSemaphorePermit>();
    let sem = Arc::new(Semaphore::new(3));
    let a = sem.acquire_owned().unwrap();
    let b = sem.acquire_many_owned(2).unwrap();
    assert_eq!((a.num_permits(), b.num_permits()), (1, 2));
    assert!(Arc::ptr_eq(a.semaphore(), &sem));
    assert_eq!(sem.available_permits(), 0);
    assert_eq!(
        sem.try_acquire_owned().unwrap_err(),
        TryAcquireError::NoPermits
    );
    assert_eq!(format!("{b:?}"), "OwnedSemaphorePermit { permits: 2 }");
    drop(b);
    assert_eq!(sem.available_permits(), 2);
    assert!(sem.try_acquire_many_owned(3).is_err(), "all or none");
    sem.try_acquire_owned().unwrap().forget();
    assert_eq!(sem.available_permits(), 1, "a forgotten permit stays out");
    assert_eq!(
        Arc::strong_count(&sem),
        2,
        "a forgotten permit lets go of the Arc"
    );
    drop(a);
    assert_eq!(sem.available_permits(), 2);
    assert_eq!(Arc::strong_count(&sem), 1);
}

/// An owned permit taken on one side, moved into another task (by a
/// spawn, and through a channel) and dropped there: its drop lets in a
/// waiter that had been waiting for it.
#[test]
fn an_owned_permit_moved_into_another_task_lets_a_waiter_in() {
    let rt = rt(2);
    let sem = Arc::new(Semaphore::new(1));
    let waiter = |sem: &Arc<Semaphore>| {
        let sem = sem.clone();
        rt.spawn(move || spindle::with_deadline(Instant::now() + LONG, || sem.acquire_owned()))
    };

    // Taken on this thread, dropped in a task.
    let permit = sem.acquire_owned().unwrap();
    let w = waiter(&sem);
    std::thread::sleep(Duration::from_millis(20));
    assert!(
        !w.is_finished(),
        "the waiter got in while the permit was held"
    );
    rt.spawn(move || {
        spindle::sleep(Duration::from_millis(5)).unwrap();
        drop(permit);
    })
    .join()
    .unwrap();
    let permit = w.join().unwrap().unwrap();

    // Taken by a task (the waiter's, above), sent to another task over a
    // channel, dropped there.
    let (tx, rx) = spindle::sync::mpsc::channel();
    let holder = rt.spawn(move || {
        let permit: spindle::sync::OwnedSemaphorePermit = rx.recv().unwrap();
        spindle::sleep(Duration::from_millis(5)).unwrap();
        drop(permit);
    });
    let w = waiter(&sem);
    std::thread::sleep(Duration::from_millis(20));
    assert!(
        !w.is_finished(),
        "the waiter got in while the permit was held"
    );
    tx.send(permit).unwrap();
    holder.join().unwrap();
    drop(w.join().unwrap().unwrap());
    assert_eq!(sem.available_permits(), 1);
}
