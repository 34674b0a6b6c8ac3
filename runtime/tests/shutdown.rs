//! A runtime's stop cancels every task that has not ended, blocked in a
//! wait or not.

mod common;

use common::rt;
use spindle::sync::{Condvar, CountdownEvent, Mutex};
use spindle::{Butex, JoinError, JoinHandle};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Waits (a plain thread) until `count` reaches `n`.
fn await_at_least(count: &AtomicUsize, n: usize) {
    common::wait_for(&format!("{n} to be counted"), || {
        count.load(Ordering::SeqCst) >= n
    });
}

/// Counts its drops: shows that a cancelled task was unwound.
struct Unwound(Arc<AtomicUsize>);

impl Drop for Unwound {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Tasks blocked in every kind of wait when the runtime stops are unwound
/// (their destructors run) and their joins say `Cancelled`, not left
/// blocked for good with their joins never returning and their stacks and
/// captures never given back.
#[test]
fn tasks_blocked_in_any_wait_are_cancelled_at_shutdown() {
    let rt = rt(2);
    let unwound = Arc::new(AtomicUsize::new(0));
    let blocked = Arc::new(AtomicUsize::new(0));
    // A mutex a plain thread holds through the shutdown.
    let mutex = Arc::new(Mutex::new(()));
    let held = mutex.lock().unwrap();
    let butex = Arc::new(Butex::new(0));
    let pair = Arc::new((Mutex::new(false), Condvar::new()));
    let event = Arc::new(CountdownEvent::new(1));
    type Wait = Box<dyn FnOnce() + Send>;
    let mut waits: Vec<(&str, Wait)> = vec![
        (
            "sleep",
            Box::new(|| {
                let _ = spindle::sleep(Duration::from_secs(600));
            }),
        ),
        ("butex", {
            let b = butex.clone();
            Box::new(move || {
                let _ = b.wait(0, None);
            })
        }),
        ("mutex", {
            let m = mutex.clone();
            Box::new(move || drop(m.lock()))
        }),
        ("condvar", {
            let p = pair.clone();
            Box::new(move || {
                let (m, cv) = &*p;
                let mut g = m.lock().unwrap();
                while !*g {
                    g = cv.wait(g).unwrap();
                }
            })
        }),
        ("countdown", {
            let e = event.clone();
            Box::new(move || {
                let _ = e.wait();
            })
        }),
    ];
    // And a join of a task that sleeps too.
    waits.push((
        "join",
        Box::new(|| {
            let child = spindle::spawn(|| spindle::sleep(Duration::from_secs(600)));
            drop(child.join());
        }),
    ));
    let n = waits.len() + 1; // the joined child is a blocked task too
    let handles: Vec<(&str, JoinHandle<()>)> = waits
        .into_iter()
        .map(|(what, wait)| {
            let (unwound, blocked) = (unwound.clone(), blocked.clone());
            let h = rt.spawn(move || {
                let _guard = Unwound(unwound);
                blocked.fetch_add(1, Ordering::SeqCst);
                wait();
                unreachable!("nothing ends this wait");
            });
            (what, h)
        })
        .collect();
    await_at_least(&blocked, n - 1);
    std::thread::sleep(Duration::from_millis(20)); // into their waits
    let t = Instant::now();
    rt.shutdown();
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "shutdown took {:?}",
        t.elapsed()
    );
    for (what, h) in handles {
        // Bounded: on failure, a join that never returns.
        let r = spindle::with_deadline(Instant::now() + Duration::from_secs(30), || h.join());
        assert!(
            matches!(r, Err(JoinError::Cancelled)),
            "the task blocked in {what}: {r:?}"
        );
    }
    assert_eq!(unwound.load(Ordering::SeqCst), n - 1, "every task unwound");
    drop(held);
}

/// Wake-ups, timeouts and interrupts racing the stop: every task ends,
/// either woken (it then finishes or is cancelled before it runs) or
/// cancelled in its wait, and the stop never hangs.
#[test]
fn wake_ups_racing_the_stop_lose_no_task() {
    for round in 0..200u64 {
        let rt = rt(2);
        let butex = Arc::new(Butex::new(0));
        let unwound = Arc::new(AtomicUsize::new(0));
        let finished = Arc::new(AtomicUsize::new(0));
        let started = Arc::new(AtomicUsize::new(0));
        const TASKS: usize = 16;
        let handles: Vec<JoinHandle<()>> = (0..TASKS)
            .map(|i| {
                let (b, u, f) = (butex.clone(), unwound.clone(), finished.clone());
                let s = started.clone();
                rt.spawn(move || {
                    let _guard = Unwound(u);
                    s.fetch_add(1, Ordering::SeqCst);
                    match i % 3 {
                        0 => drop(b.wait(0, None)),
                        // Timers that fire around the stop.
                        1 => drop(
                            b.wait(0, Some(Instant::now() + Duration::from_micros(round % 50))),
                        ),
                        _ => drop(spindle::sleep(Duration::from_micros(round % 70))),
                    }
                    f.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect();
        let ids: Vec<_> = handles.iter().map(|h| h.id()).collect();
        let waker = {
            let b = butex.clone();
            std::thread::spawn(move || {
                for k in 0..200 {
                    b.wake_all();
                    if k % 7 == 0 {
                        for &id in &ids {
                            let _ = spindle::interrupt(id);
                        }
                    }
                    std::hint::spin_loop();
                }
            })
        };
        std::thread::sleep(Duration::from_micros(round % 100));
        rt.shutdown();
        waker.join().unwrap();
        let (mut ok, mut cancelled) = (0, 0);
        for h in handles {
            let r = spindle::with_deadline(Instant::now() + Duration::from_secs(30), || h.join());
            match r {
                Ok(()) => ok += 1,
                Err(JoinError::Cancelled) => cancelled += 1,
                Err(e) => panic!("{e:?}"),
            }
        }
        assert_eq!(ok + cancelled, TASKS);
        assert_eq!(ok, finished.load(Ordering::SeqCst));
        // Every started task's guard went: at its end, or as it was
        // cancelled (a never-run task has none).
        assert_eq!(
            unwound.load(Ordering::SeqCst),
            started.load(Ordering::SeqCst)
        );
    }
}

/// Sends, as it is dropped, what a task spawned then gives.
struct SpawnsOnDrop(std::sync::mpsc::Sender<Result<(), JoinError>>);

impl Drop for SpawnsOnDrop {
    fn drop(&mut self) {
        let child = spindle::spawn(|| ());
        let _ = self.0.send(child.join());
    }
}

/// A destructor that spawns, run while the stop unwinds its task, gets a
/// task cancelled at once: spawning into a stopping runtime is no failure.
/// (A panic there, inside the unwind, would abort the process.)
#[test]
fn a_destructor_that_spawns_during_the_stop_gets_a_cancelled_task() {
    let rt = rt(1);
    let (tx, rx) = std::sync::mpsc::channel();
    let blocked = Arc::new(AtomicUsize::new(0));
    let b = blocked.clone();
    let h = rt.spawn(move || {
        let _guard = SpawnsOnDrop(tx);
        b.store(1, Ordering::SeqCst);
        let _ = spindle::sleep(Duration::from_secs(600));
    });
    await_at_least(&blocked, 1);
    rt.shutdown();
    assert!(matches!(rx.recv().unwrap(), Err(JoinError::Cancelled)));
    assert!(matches!(h.join(), Err(JoinError::Cancelled)));
}

/// A task in `block_on` on another runtime is not unwound by its own
/// runtime's stop before the task it waits for, which borrows from its
/// frame, has ended. (Unwinding it then would unmap the stack that task is
/// still writing to.)
#[test]
fn the_stop_waits_for_a_block_on_whose_task_borrows_from_the_stopped_task() {
    let outer = rt(1);
    let inner = Arc::new(rt(1));
    let entered = Arc::new(AtomicUsize::new(0));
    let (e, i) = (entered.clone(), inner.clone());
    let caller = outer.spawn(move || {
        let mut written = vec![0u64; 64];
        i.block_on(|| {
            e.store(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(100));
            // Writes into the caller's frame, on the caller's stack.
            for (k, w) in written.iter_mut().enumerate() {
                *w = k as u64;
            }
            e.store(2, Ordering::SeqCst);
        });
        written.iter().sum::<u64>()
    });
    await_at_least(&entered, 1);
    outer.shutdown();
    assert_eq!(entered.load(Ordering::SeqCst), 2, "the stop waited");
    // Woken by the task's end, the caller was unwound by the stop, or ran
    // on before it.
    assert!(matches!(
        caller.join(),
        Ok(2016) | Err(JoinError::Cancelled)
    ));
}

/// A wake-up taken by a task that the stop then cancels is passed on to
/// the next waiter: a plain thread queued behind it on a mutex does not
/// sleep beside the free lock.
#[test]
fn a_wake_up_taken_by_a_cancelled_task_is_passed_on() {
    let rt = rt(1);
    let mutex = Arc::new(Mutex::new(0u32));
    let held = mutex.lock().unwrap();
    // The task queues on the mutex first...
    let queued = Arc::new(AtomicUsize::new(0));
    let (m, q) = (mutex.clone(), queued.clone());
    let _task = rt.spawn(move || {
        q.store(1, Ordering::SeqCst);
        *m.lock().unwrap() += 1;
    });
    await_at_least(&queued, 1);
    std::thread::sleep(Duration::from_millis(20));
    // ...then a plain thread.
    let m = mutex.clone();
    let thread = std::thread::spawn(move || {
        spindle::with_deadline(Instant::now() + Duration::from_secs(30), || {
            m.lock().map(|mut g| *g += 10)
        })
    });
    std::thread::sleep(Duration::from_millis(20));
    // The only worker is held by a task that spins until the stop has
    // begun (a spawn into a stopping runtime is cancelled at once), so the
    // woken task cannot run before the stop cancels it.
    // (Never suspending: its probes stay queued, and a real one is not
    // finished.)
    let hog = rt.spawn(|| loop {
        if spindle::spawn(|| ()).is_finished() {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    });
    std::thread::sleep(Duration::from_millis(20));
    drop(held); // wakes the task, the first waiter
    rt.shutdown();
    drop(hog);
    assert_eq!(thread.join().unwrap(), Ok(()), "the thread got the lock");
}

/// A runtime dropped from a task of another runtime does not wait there for
/// its workers: they may be waiting for that other runtime's tasks (here a
/// task of the dropped runtime is in `block_on` on the other one, with one
/// worker, which the wait would hold). (A drop that joins the workers from
/// the other runtime's only worker leaves nothing able to move again.)
#[test]
fn a_runtime_dropped_from_another_runtimes_task_does_not_deadlock_it() {
    let a = rt(1);
    let b = Arc::new(rt(1));
    let stage = Arc::new(AtomicUsize::new(0));
    let (s, b2) = (stage.clone(), b.clone());
    let caller = a.spawn(move || {
        b2.block_on(|| {
            s.store(1, Ordering::SeqCst);
            // Suspends, so that the dropping task gets B's worker.
            spindle::sleep(Duration::from_millis(50)).unwrap();
            s.store(2, Ordering::SeqCst);
        })
    });
    await_at_least(&stage, 1);
    let dropper = b.spawn(move || drop(a));
    let deadline = Instant::now() + Duration::from_secs(30);
    if spindle::with_deadline(deadline, || dropper.join()).is_err() {
        // Deadlocked: dropping B would wait for its stuck worker.
        std::mem::forget(b);
        panic!("the drop of A never returned on B's worker");
    }
    while stage.load(Ordering::SeqCst) != 2 {
        assert!(Instant::now() < deadline, "the borrowing task never ended");
        std::thread::sleep(Duration::from_millis(1));
    }
    let r = spindle::with_deadline(deadline, || caller.join());
    assert!(matches!(r, Ok(()) | Err(JoinError::Cancelled)), "{r:?}");
}

/// A condvar notification taken by a task that the stop then unwinds, while
/// it waits to lock the mutex again, is passed on to the next waiter, as
/// the mutex's wake-up is.
#[test]
fn a_notification_taken_by_a_task_the_stop_unwinds_is_passed_on() {
    let rt = rt(1);
    let pair = Arc::new((Mutex::new(()), Condvar::new()));
    let queued = Arc::new(AtomicUsize::new(0));
    let (p, q) = (pair.clone(), queued.clone());
    let _task = rt.spawn(move || {
        let (m, cv) = &*p;
        let g = m.lock().unwrap();
        q.store(1, Ordering::SeqCst);
        drop(cv.wait(g));
    });
    await_at_least(&queued, 1);
    std::thread::sleep(Duration::from_millis(20));
    // A plain thread waits behind it.
    let p = pair.clone();
    let thread = std::thread::spawn(move || {
        let (m, cv) = &*p;
        let g = m.lock().unwrap();
        spindle::with_deadline(Instant::now() + Duration::from_secs(30), || {
            cv.wait(g).map(drop)
        })
    });
    std::thread::sleep(Duration::from_millis(20));
    // The task takes the notification and blocks relocking the mutex,
    // which this thread holds through the stop.
    let held = pair.0.lock().unwrap();
    pair.1.notify_one();
    std::thread::sleep(Duration::from_millis(20));
    rt.shutdown();
    drop(held);
    assert_eq!(thread.join().unwrap(), Ok(()), "the thread was notified");
}
