//! `OnceCell`, shared by tasks and plain threads: the initializer runs
//! once, waiters wait as tasks (not blocking their worker), a failed or
//! panicking initializer hands over to a waiter, and deadline scopes,
//! interrupt and stop do what the type's docs say.

mod common;

use common::{rt, wait_for};
use spindle::sync::OnceCell;
use spindle::{SleepError, WaitError};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Long enough that a wait this long means a bug, not a slow machine.
const LONG: Duration = Duration::from_secs(30);

#[test]
fn once_cell_basics() {
    static GLOBAL: OnceCell<u32> = OnceCell::new();
    assert_eq!(*GLOBAL.get_or_init(|| 1), 1);
    assert_eq!(*GLOBAL.get_or_init(|| 2), 1);
    let mut cell = OnceCell::new();
    assert_eq!(cell.get(), None);
    assert_eq!(format!("{cell:?}"), "OnceCell(<unset>)");
    assert_eq!(cell.set(5), Ok(()));
    assert_eq!(cell.set(6), Err(6));
    assert_eq!(cell.get(), Some(&5));
    assert_eq!(cell.wait(), Ok(&5));
    assert_eq!(format!("{cell:?}"), "OnceCell(5)");
    *cell.get_mut().unwrap() += 1;
    assert_eq!(cell.take(), Some(6));
    assert_eq!(cell.get(), None);
    assert_eq!(cell.get_or_try_init(|| Err::<u32, _>("no")), Err("no"));
    assert_eq!(cell.get(), None, "a failed initializer leaves it empty");
    assert_eq!(cell.get_or_try_init(|| Ok::<_, ()>(7)), Ok(&7));
    assert_eq!(cell.into_inner(), Some(7));
    assert_eq!(OnceCell::from(3).into_inner(), Some(3));
    assert_eq!(
        OnceCell::<u32>::new()
            .wait_until(Instant::now() + Duration::from_millis(10))
            .unwrap_err(),
        WaitError::TimedOut
    );
    // The value is dropped with the cell, once.
    let v = Arc::new(());
    let cell = OnceCell::from(v.clone());
    assert_eq!(Arc::strong_count(&v), 2);
    drop(cell);
    assert_eq!(Arc::strong_count(&v), 1);
}

/// 500 tasks and 8 threads call `get_or_init` on each of 50 cells, whose
/// initializers sleep: each runs exactly once, and everybody sees its
/// value.
#[test]
fn init_runs_exactly_once_across_tasks_and_threads() {
    let rt = rt(2);
    const CELLS: usize = 50;
    let cells: Arc<Vec<OnceCell<usize>>> = Arc::new((0..CELLS).map(|_| OnceCell::new()).collect());
    let runs: Arc<Vec<AtomicUsize>> = Arc::new((0..CELLS).map(|_| AtomicUsize::new(0)).collect());
    let body = |i: usize| {
        let (cells, runs) = (cells.clone(), runs.clone());
        move || {
            for k in 0..CELLS {
                let c = (k + i) % CELLS;
                let v = *cells[c].get_or_init(|| {
                    runs[c].fetch_add(1, Ordering::SeqCst);
                    spindle::usleep(200).unwrap();
                    c * 10
                });
                assert_eq!(v, c * 10);
            }
        }
    };
    let tasks: Vec<_> = (0..500).map(|i| rt.spawn(body(i))).collect();
    let threads: Vec<_> = (0..8).map(|i| std::thread::spawn(body(i * 7))).collect();
    wait_for("every caller to finish", || {
        tasks.iter().all(|h| h.is_finished()) && threads.iter().all(|h| h.is_finished())
    });
    for h in tasks {
        h.join().unwrap();
    }
    for h in threads {
        h.join().unwrap();
    }
    for (c, r) in runs.iter().enumerate() {
        assert_eq!(r.load(Ordering::SeqCst), 1, "cell {c}'s initializer runs");
    }
}

/// On one worker, a task whose initializer sleeps and a task that waits
/// for it both complete: the waiter suspends instead of blocking the
/// worker thread (where the sleeper would never wake).
#[test]
fn a_waiter_waits_as_a_task_on_one_worker() {
    let rt = rt(1);
    let cell = Arc::new(OnceCell::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let hs: Vec<_> = (0..10)
        .map(|i| {
            let (cell, runs) = (cell.clone(), runs.clone());
            rt.spawn(move || {
                if i > 0 {
                    spindle::yield_now();
                }
                *cell.get_or_init(|| {
                    runs.fetch_add(1, Ordering::SeqCst);
                    spindle::sleep(Duration::from_millis(20)).unwrap();
                    i
                })
            })
        })
        .collect();
    for h in hs {
        assert_eq!(h.join().unwrap(), 0);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// Initializers that panic (or fail) while others wait: each time, one
/// waiter takes over with its own initializer, until one succeeds; every
/// caller that did not fail sees that value, and exactly one initializer
/// succeeded.
#[test]
fn a_failing_initializer_hands_over_to_a_waiter() {
    let rt = rt(2);
    let cell = Arc::new(OnceCell::new());
    let attempts = Arc::new(AtomicUsize::new(0));
    let succeeded = Arc::new(AtomicUsize::new(0));
    // The first 6 attempts fail: even ones panic, odd ones return Err.
    let body = |cell: Arc<OnceCell<usize>>, attempts: Arc<AtomicUsize>, ok: Arc<AtomicUsize>| {
        move || {
            let r = cell.get_or_try_init(|| {
                let a = attempts.fetch_add(1, Ordering::SeqCst);
                spindle::usleep(2000).unwrap();
                match a {
                    0..6 if a % 2 == 0 => panic!("initializer {a} panics"),
                    0..6 => Err(a),
                    _ => {
                        ok.fetch_add(1, Ordering::SeqCst);
                        Ok(a)
                    }
                }
            });
            r.copied()
        }
    };
    let tasks: Vec<_> = (0..40)
        .map(|_| rt.spawn(body(cell.clone(), attempts.clone(), succeeded.clone())))
        .collect();
    let threads: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(body(cell.clone(), attempts.clone(), succeeded.clone())))
        .collect();
    // A lost wake-up fails here rather than hanging the join.
    wait_for("every caller to finish", || {
        tasks.iter().all(|h| h.is_finished()) && threads.iter().all(|h| h.is_finished())
    });
    let mut panicked = 0;
    let mut failed = 0;
    let mut values = Vec::new();
    for r in tasks
        .into_iter()
        .map(|h| h.join().map_err(|_| ()))
        .chain(threads.into_iter().map(|h| h.join().map_err(|_| ())))
    {
        match r {
            Err(()) => panicked += 1,
            Ok(Err(_)) => failed += 1,
            Ok(Ok(v)) => values.push(v),
        }
    }
    let v = *cell.get().expect("the cell is set");
    assert_eq!((panicked, failed), (3, 3));
    assert_eq!(v, 6, "the first initializer that did not fail set it");
    assert!(values.iter().all(|&x| x == v));
    assert_eq!(values.len(), 44 - 6);
    assert_eq!(succeeded.load(Ordering::SeqCst), 1);
    assert_eq!(attempts.load(Ordering::SeqCst), 7, "one attempt at a time");
}

/// Deadline scopes: `get_or_init_until` and `wait` give up at the scope's
/// deadline (without running the initializer, leaving the cell as it
/// was); `get_or_init` waits for the running initializer anyway, and
/// `set` too.
#[test]
fn deadline_scopes_end_only_the_fallible_waits() {
    let rt = rt(2);
    let cell = Arc::new(OnceCell::new());
    let runner = {
        let cell = cell.clone();
        rt.spawn(move || {
            *cell.get_or_init(|| {
                spindle::sleep(Duration::from_millis(100)).unwrap();
                1
            })
        })
    };
    std::thread::sleep(Duration::from_millis(10));
    let waiters: Vec<_> = (0..5)
        .map(|k| {
            let cell = cell.clone();
            rt.spawn(move || {
                spindle::with_deadline(Instant::now() + Duration::from_millis(10), || match k {
                    0 => cell.get_or_init_until(|| 2, None).copied(),
                    1 => cell
                        .get_or_init_until(|| 2, Some(Instant::now() + LONG))
                        .copied(),
                    2 => cell.wait().copied(),
                    3 => Ok(*cell.get_or_init(|| 2)),
                    _ => cell.set(2).map(|()| 2).or(Ok(0)),
                })
            })
        })
        .collect();
    let results: Vec<_> = waiters.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(
        results,
        [
            Err(WaitError::DeadlineExceeded),
            Err(WaitError::DeadlineExceeded),
            Err(WaitError::DeadlineExceeded),
            Ok(1),
            Ok(0),
        ]
    );
    assert_eq!(runner.join().unwrap(), 1);
    let own = cell.get_or_init_until(|| 3, Some(Instant::now() + Duration::from_millis(1)));
    assert_eq!(own, Ok(&1), "a set cell answers at once");
}

/// `interrupt` and `stop` do not end a wait for another's initializer:
/// the waiter gets the value, and the interrupt stays pending.
#[test]
fn interrupt_and_stop_do_not_end_a_wait_for_the_initializer() {
    let rt = rt(2);
    for stop in [false, true] {
        let cell = Arc::new(OnceCell::new());
        let gate = Arc::new(spindle::Butex::new(0));
        let runner = {
            let (cell, gate) = (cell.clone(), gate.clone());
            std::thread::spawn(move || {
                *cell.get_or_init(|| {
                    while gate.value().load(Ordering::SeqCst) == 0 {
                        let _ = gate.wait(0, None);
                    }
                    1
                })
            })
        };
        std::thread::sleep(Duration::from_millis(10));
        let waiters: Vec<_> = (0..2)
            .map(|k| {
                let cell = cell.clone();
                rt.spawn(move || {
                    let v = if k == 0 {
                        cell.get_or_init(|| 2).to_owned()
                    } else {
                        *cell.wait().unwrap()
                    };
                    (v, spindle::sleep(LONG))
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20));
        for h in &waiters {
            if stop {
                h.stop().unwrap();
            } else {
                h.interrupt().unwrap();
            }
        }
        std::thread::sleep(Duration::from_millis(20));
        assert!(waiters.iter().all(|h| !h.is_finished()), "a wait ended");
        gate.value().store(1, Ordering::SeqCst);
        gate.wake_all();
        assert_eq!(runner.join().unwrap(), 1);
        let expected = if stop {
            SleepError::Stopped
        } else {
            SleepError::Interrupted
        };
        for h in waiters {
            assert_eq!(h.join().unwrap(), (1, Err(expected)));
        }
    }
}
