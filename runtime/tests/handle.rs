//! Runtime context: `Runtime::handle`, `Runtime::enter`, `Handle`, and
//! where a spawn lands: a thread that entered a runtime, a job of the
//! blocking pool and a task all spawn onto their runtime, never onto the
//! global one; a spawn onto a runtime that has shut down is an error (or a
//! cancelled handle), never a hang.
//!
//! No test here uses the global runtime: one of them checks that asking
//! for the current runtime does not start it (its workers would show in
//! this process's threads).

mod common;

use spindle::{Handle, JoinError, Runtime};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A runtime whose worker threads are named `name-i`.
fn named_rt(name: &str, workers: usize) -> Runtime {
    Runtime::builder()
        .workers(workers)
        .thread_name(name)
        .build()
        .unwrap()
}

/// Threads of this process whose name starts with `prefix`.
fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.starts_with(prefix))
        .count()
}

/// Guards "asking starts nothing": on a thread that entered no runtime,
/// `try_current` is `None` and the global runtime (threads named
/// `spindle-worker`) is not started by the question.
#[test]
fn try_current_on_a_fresh_thread_is_none_and_starts_nothing() {
    std::thread::spawn(|| {
        assert!(Handle::try_current().is_none());
        assert!(spindle::current().is_none());
    })
    .join()
    .unwrap();
    assert_eq!(threads_named("spindle-worker"), 0);
}

/// Guards `enter`: a plain thread's spawns go to the runtime it entered
/// (its `stats()` counts them, and the task sees that runtime as current),
/// and back to nothing once the guard drops.
#[test]
fn a_thread_that_entered_a_runtime_spawns_onto_it() {
    let rt = named_rt("entered", 1);
    let before = rt.stats().spawned;
    let handle = rt.handle();
    {
        let _g = rt.enter();
        assert!(Handle::try_current().unwrap().same_runtime(&handle));
        let h = spindle::spawn(Handle::current);
        assert!(h.join().unwrap().same_runtime(&handle));
        let h = spindle::task::Builder::new().spawn(|| 7).unwrap();
        assert_eq!(h.join().unwrap(), 7);
    }
    assert_eq!(rt.stats().spawned, before + 2);
    assert!(Handle::try_current().is_none());
}

/// Guards nesting: an inner guard's runtime wins until it drops, then the
/// outer one's is back.
#[test]
fn enter_guards_nest() {
    let (a, b) = (named_rt("nest-a", 1), named_rt("nest-b", 1));
    let _ga = a.enter();
    {
        let _gb = b.handle().enter();
        assert!(Handle::current().same_runtime(&b.handle()));
    }
    assert!(Handle::current().same_runtime(&a.handle()));
}

/// Guards the blocking pool's context: a spawn from a `spawn_blocking`
/// closure lands on the runtime that submitted the job.
#[test]
fn a_spawn_from_a_blocking_job_lands_on_the_submitting_runtime() {
    let rt = named_rt("blocking-ctx", 1);
    let handle = rt.handle();
    let before = rt.stats().spawned;
    let same = rt.block_on(|| {
        spindle::task::spawn_blocking(|| {
            let inner = spindle::spawn(Handle::current);
            inner.join().unwrap()
        })
        .join()
        .unwrap()
    });
    assert!(same.same_runtime(&handle));
    // block_on's task, spawn_blocking's task and the inner one.
    assert_eq!(rt.stats().spawned, before + 3);
}

/// Guards a task's context: its spawns go to its own runtime, even while
/// a thread elsewhere has entered another; a task may spawn onto another
/// runtime through its handle.
#[test]
fn a_task_spawns_onto_its_runtime_and_onto_others_by_handle() {
    let (a, b) = (named_rt("task-a", 1), named_rt("task-b", 1));
    let (ha, hb) = (a.handle(), b.handle());
    let (on_a, on_b) = a.block_on(|| {
        let mine = spindle::spawn(Handle::current).join().unwrap();
        let theirs = hb.spawn(Handle::current).join().unwrap();
        (mine, theirs)
    });
    assert!(on_a.same_runtime(&ha));
    assert!(on_b.same_runtime(&hb));
    let by_builder = a.block_on(|| {
        spindle::task::Builder::new()
            .spawn_on(&hb, Handle::current)
            .unwrap()
            .join()
            .unwrap()
    });
    assert!(by_builder.same_runtime(&hb));
}

/// Guards `Handle::block_on` from a plain thread and from a task of another
/// runtime.
#[test]
fn handle_block_on_runs_on_its_runtime() {
    let (a, b) = (named_rt("block-a", 1), named_rt("block-b", 1));
    let hb = b.handle();
    assert!(hb.block_on(Handle::current).same_runtime(&hb));
    let hb2 = hb.clone();
    let from_a = a.block_on(move || hb2.block_on(Handle::current));
    assert!(from_a.same_runtime(&hb));
}

/// Guards "after shutdown, an error, never a hang": a handle's spawn is
/// cancelled at once, `Builder::spawn_on` fails, `block_on` panics, a
/// thread still entered gets the same, and `stats()` still answers.
#[test]
fn a_spawn_after_shutdown_is_an_error_not_a_hang() {
    let rt = named_rt("after-stop", 1);
    let handle = rt.handle();
    let entered = handle.clone();
    let _g = entered.enter();
    rt.shutdown();
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    let h = handle.spawn(move || r.store(true, Ordering::SeqCst));
    assert!(matches!(h.join(), Err(JoinError::Cancelled)));
    assert!(!ran.load(Ordering::SeqCst));
    let e = spindle::task::Builder::new()
        .spawn_on(&handle, || ())
        .unwrap_err();
    assert!(e.to_string().contains("shut down"), "{e}");
    let e = spindle::task::Builder::new().spawn(|| ()).unwrap_err();
    assert!(e.to_string().contains("shut down"), "{e}");
    assert!(matches!(
        spindle::spawn(|| ()).join(),
        Err(JoinError::Cancelled)
    ));
    let panicked = std::panic::catch_unwind(|| handle.block_on(|| ()));
    assert!(panicked.is_err());
    assert_eq!(handle.stats().workers, 1);
}

/// Guards the race of spawns from other threads with the shutdown: every
/// spawn's join returns (its value, or `Cancelled`), none hangs, and every
/// task that ran was counted.
#[test]
fn spawns_racing_a_shutdown_all_end() {
    for round in 0..20 {
        let rt = named_rt("race-stop", 2);
        let handle = rt.handle();
        let ran = Arc::new(AtomicUsize::new(0));
        let spawners: Vec<_> = (0..2)
            .map(|_| {
                let (handle, ran) = (handle.clone(), ran.clone());
                std::thread::spawn(move || {
                    let mut joined = 0;
                    for _ in 0..500 {
                        let ran = ran.clone();
                        let h = handle.spawn(move || {
                            ran.fetch_add(1, Ordering::SeqCst);
                        });
                        match h.join() {
                            Ok(()) => joined += 1,
                            Err(JoinError::Cancelled) => {}
                            Err(e) => panic!("round {round}: {e}"),
                        }
                    }
                    joined
                })
            })
            .collect();
        std::thread::sleep(Duration::from_micros(200 * round));
        rt.shutdown();
        let joined: usize = spawners.into_iter().map(|s| s.join().unwrap()).sum();
        assert_eq!(joined, ran.load(Ordering::SeqCst), "round {round}");
    }
}

/// Guards `task::Builder::deadline`: the task runs inside that deadline
/// scope from its first instruction.
#[test]
fn a_builder_deadline_scopes_the_task() {
    let rt = named_rt("builder-deadline", 1);
    let d = Instant::now() + Duration::from_millis(50);
    let h = rt.block_on(|| {
        spindle::task::Builder::new()
            .deadline(Some(d))
            .spawn(move || {
                (
                    spindle::current_deadline(),
                    spindle::sleep(Duration::from_secs(30)),
                )
            })
            .unwrap()
    });
    let (seen, slept) = h.join().unwrap();
    assert_eq!(seen, Some(d));
    assert_eq!(slept, Err(spindle::SleepError::DeadlineExceeded));
}
