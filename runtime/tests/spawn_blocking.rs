//! `spindle::task::spawn_blocking`: blocking work runs on a pool of plain
//! threads while the worker goes on running tasks; its `JoinHandle` gives
//! the value back, reports a panic, honours a deadline scope (the work
//! itself runs on to its end), and works from plain threads too.

mod common;
mod net_common;

use common::{rt, wait_for};
use net_common::Ticker;
use spindle::task::spawn_blocking;
use spindle::JoinError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long blocking work waits for a test to let it go before it gives
/// up: a failure instead of a hang if the work held the only worker.
const GIVE_UP: Duration = Duration::from_secs(30);

/// Guards the worker's freedom: while blocking work sleeps 300 ms, the other task of a 1-worker runtime keeps running; the join returns its value.
#[test]
fn blocking_work_leaves_the_worker_to_other_tasks() {
    let rt = rt(1);
    rt.block_on(|| {
        let ticker = Ticker::start();
        spindle::sleep(Duration::from_millis(5)).unwrap();
        let t = Instant::now();
        let job = spawn_blocking(|| {
            std::thread::sleep(Duration::from_millis(300));
            42
        });
        let before = ticker.ticks();
        assert_eq!(job.join().unwrap(), 42);
        let during = ticker.ticks() - before;
        assert!(t.elapsed() >= Duration::from_millis(300));
        // About 300 ticks on an idle machine; a worker held by the sleep
        // would allow at most one, after it.
        assert!(
            during >= 10,
            "the other task ticked {during} times in 300 ms"
        );
        ticker.finish();
    });
}

/// Guards the same deterministically: blocking work held until the test lets it go leaves a 1-worker runtime running 50 tasks meanwhile.
#[test]
fn tasks_run_to_their_end_while_blocking_work_waits() {
    let rt = rt(1);
    rt.block_on(|| {
        let (let_go, wait) = mpsc::channel::<u32>();
        let job = spawn_blocking(move || wait.recv_timeout(GIVE_UP).ok());
        let tasks: Vec<_> = (0..50u32)
            .map(|i| {
                spindle::spawn(move || {
                    spindle::sleep(Duration::from_millis(1)).unwrap();
                    i
                })
            })
            .collect();
        let sum: u32 = tasks.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(sum, (0..50u32).sum::<u32>());
        assert!(
            !job.is_finished(),
            "the blocking work ended before it was let go"
        );
        assert!(
            rt.stats().blocking_threads >= 1,
            "no blocking thread while blocking work runs"
        );
        let_go.send(7).unwrap();
        assert_eq!(job.join().unwrap(), Some(7), "the work gave up waiting");
    });
}

/// Guards where the work runs: on a thread other than the caller's, from a task and from a plain thread; many jobs at once all finish.
#[test]
fn blocking_work_runs_on_other_threads() {
    let check = || {
        let me = std::thread::current().id();
        let there = spawn_blocking(|| std::thread::current().id())
            .join()
            .unwrap();
        assert_ne!(me, there, "the blocking work ran on the caller's thread");
        let jobs: Vec<_> = (0..64u64)
            .map(|i| {
                spawn_blocking(move || {
                    std::thread::sleep(Duration::from_millis(10));
                    i
                })
            })
            .collect();
        let sum: u64 = jobs.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(sum, (0..64u64).sum::<u64>());
    };
    rt(2).block_on(check);
    check();
}

/// Guards panics: a panic in blocking work is JoinError::Panicked with its payload, in a task and on a plain thread.
#[test]
fn a_panic_in_blocking_work_is_a_join_error() {
    let check = || {
        let r = spawn_blocking(|| -> u32 { panic!("boom in blocking work") }).join();
        match r {
            Err(JoinError::Panicked(payload)) => {
                assert_eq!(
                    payload.downcast_ref::<&str>(),
                    Some(&"boom in blocking work")
                );
            }
            other => panic!("expected Panicked, got {:?}", other.map(|_| ())),
        }
        // The pool survives it.
        assert_eq!(spawn_blocking(|| 3).join().unwrap(), 3);
    };
    rt(1).block_on(check);
    check();
}

/// Guards deadline scopes on the join: it fails with DeadlineExceeded while the work is held, and the work still runs to its end.
#[test]
fn a_join_in_a_deadline_scope_gives_up_but_the_work_runs_on() {
    let rt = rt(1);
    let done = Arc::new(AtomicBool::new(false));
    let (let_go, wait) = mpsc::channel::<()>();
    let d = done.clone();
    rt.block_on(move || {
        let job = spawn_blocking(move || {
            let r = wait.recv_timeout(GIVE_UP);
            d.store(true, Ordering::SeqCst);
            r.is_ok()
        });
        let t = Instant::now();
        let r = spindle::with_deadline(t + Duration::from_millis(20), || job.join());
        assert!(
            matches!(r, Err(JoinError::DeadlineExceeded)),
            "{:?}",
            r.map(|_| ())
        );
        assert!(t.elapsed() < Duration::from_secs(5));
    });
    assert!(
        !done.load(Ordering::SeqCst),
        "the work ended before it was let go"
    );
    let_go.send(()).unwrap();
    wait_for("the blocking work to run to its end", || {
        done.load(Ordering::SeqCst)
    });
}

/// Guards the pool's growth: a burst of jobs submitted while one thread is idle
/// starts threads for them, rather than queue them all behind that one (a job
/// that waits for the next one would wait for good).
#[test]
fn a_burst_of_jobs_does_not_queue_behind_one_idle_thread() {
    let rt = rt(1);
    rt.block_on(|| {
        // One thread made, and idle again.
        spawn_blocking(|| ()).join().unwrap();
        for _ in 0..5 {
            let (tx, rx) = mpsc::channel::<()>();
            let waits = spawn_blocking(move || rx.recv_timeout(Duration::from_secs(30)));
            let sends = spawn_blocking(move || tx.send(()));
            let t = Instant::now();
            assert_eq!(
                waits.join().unwrap(),
                Ok(()),
                "the first job saw the second"
            );
            sends.join().unwrap().unwrap();
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "the second job ran at once"
            );
        }
    });
}
