//! Runtime core: spawning, joining, yielding, stealing, pinning, panics.
//! Several are ports of bthread's own tests (bthread_unittest.cpp).

mod common;

use common::rt;
use spindle::{JoinHandle, Runtime, TaskId};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The OS thread a piece of code runs on.
fn os_thread() -> std::thread::ThreadId {
    std::thread::current().id()
}

#[test]
fn spawn_and_join_from_a_plain_thread() {
    let rt = rt(2);
    let h = rt.spawn(|| 6 * 7);
    assert_eq!(h.join().unwrap(), 42);
}

#[test]
fn spawn_and_join_from_a_task() {
    let rt = rt(2);
    let v = rt.block_on(|| {
        let h = spindle::spawn(|| String::from("inner"));
        h.join().unwrap()
    });
    assert_eq!(v, "inner");
}

/// A task that joins its own handle gets an error: that wait could never
/// end (std panics, bthread returns EINVAL).
#[test]
fn a_task_joining_itself_is_an_error() {
    let rt = rt(1);
    let own: Arc<Mutex<Option<JoinHandle<bool>>>> = Arc::new(Mutex::new(None));
    let (tx, rx) = std::sync::mpsc::channel();
    let mine = own.clone();
    let h = rt.spawn(move || {
        let h = loop {
            if let Some(h) = mine.lock().unwrap().take() {
                break h;
            }
            spindle::yield_now();
        };
        tx.send(h.join().map(|_| ())).unwrap();
        true
    });
    let id = h.id();
    *own.lock().unwrap() = Some(h);
    let r = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the self-join returned");
    assert!(matches!(r, Err(spindle::JoinError::SelfJoin)), "{r:?}");
    // The task went on to its end: its id names no live task any more.
    common::wait_for("the task to end", || spindle::interrupt(id).is_err());
}

/// Calls `block_on` on its runtime when dropped, and says what it returned.
struct BlocksOnWhenDropped(Arc<Runtime>, std::sync::mpsc::Sender<u32>);

impl Drop for BlocksOnWhenDropped {
    fn drop(&mut self) {
        let _ = self.1.send(self.0.block_on(|| 5));
    }
}

/// A task that unwinds cannot suspend. Its destructor's `block_on` on its
/// own one-worker runtime must not wait for that worker (it would wait
/// for good): it runs the closure at once.
#[test]
fn block_on_from_an_unwinding_task_of_a_one_worker_runtime_returns() {
    let rt = Arc::new(rt(1));
    let (tx, rx) = std::sync::mpsc::channel();
    let guard = BlocksOnWhenDropped(rt.clone(), tx);
    let h = rt.spawn(move || {
        let _guard = guard;
        panic!("unwinds through the guard");
    });
    let r = rx.recv_timeout(Duration::from_secs(60));
    assert_eq!(r, Ok(5), "block_on returned what the closure did");
    assert!(h.join().is_err(), "the task panicked");
}

#[test]
fn join_returns_large_values() {
    let rt = rt(2);
    let v = rt.spawn(|| [7u64; 64]).join().unwrap();
    assert_eq!(v, [7u64; 64]);
}

#[test]
fn many_small_tasks_from_a_plain_thread() {
    let rt = rt(2);
    let tasks = common::scaled(100_000, 10_000);
    let counter = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let c = counter.clone();
            rt.spawn(move || {
                c.fetch_add(1, Ordering::Relaxed);
                spindle::current().unwrap()
            })
        })
        .collect();
    let mut ids = HashSet::new();
    for h in handles {
        let id = h.id();
        assert_eq!(h.join().unwrap(), id, "a task sees its own id");
        // Ids of live tasks are unique; a finished task's slot may be
        // reused, but then with another version, so ids never repeat.
        assert!(ids.insert(id), "duplicate id {id}");
    }
    assert_eq!(counter.load(Ordering::Relaxed), tasks);
}

#[test]
fn yield_with_nothing_else_to_run_returns() {
    let rt = rt(1);
    rt.block_on(|| {
        for _ in 0..1000 {
            spindle::yield_now();
        }
    });
}

#[test]
fn two_tasks_on_one_worker_alternate_when_they_yield() {
    let rt = rt(1);
    let log = Arc::new(Mutex::new(Vec::new()));
    rt.block_on(|| {
        let hs: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|name| {
                let log = log.clone();
                spindle::spawn(move || {
                    for _ in 0..5 {
                        log.lock().unwrap().push(name);
                        spindle::yield_now();
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    });
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 10);
    for pair in log.windows(2) {
        assert_ne!(pair[0], pair[1], "tasks must alternate: {log:?}");
    }
}

#[test]
fn spawn_urgent_runs_the_child_first_on_the_same_worker() {
    let rt = rt(2);
    rt.block_on(|| {
        let parent_thread = os_thread();
        let ran = Arc::new(AtomicBool::new(false));
        let r2 = ran.clone();
        let h = spindle::spawn_urgent(move || {
            r2.store(true, Ordering::SeqCst);
            os_thread()
        });
        assert!(
            ran.load(Ordering::SeqCst),
            "the child ran before the parent continued"
        );
        assert_eq!(h.join().unwrap(), parent_thread);
    });
}

/// Tasks spawned on one worker are stolen by the other. Each task stays
/// busy until tasks have run on two threads (or 10 s have passed), so the
/// other worker has all the time it needs to be scheduled and steal, even
/// on a host that stalls a vCPU for tens of milliseconds; without stealing,
/// every task spins to the 10 s limit on the one worker and the assertion
/// fails. (40 ms of busy tasks is not enough: a stress run has seen a
/// vCPU stalled longer.)
#[test]
fn tasks_spawned_on_one_worker_also_run_on_the_other() {
    let rt = rt(2);
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let give_up = std::time::Instant::now() + Duration::from_secs(10);
    let threads = rt.block_on(|| {
        let hs: Vec<_> = (0..200)
            .map(|_| {
                let seen = seen.clone();
                spindle::spawn(move || {
                    seen.lock().unwrap().insert(os_thread());
                    while seen.lock().unwrap().len() < 2 && std::time::Instant::now() < give_up {
                        std::hint::spin_loop();
                    }
                    os_thread()
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .collect::<HashSet<_>>()
    });
    assert_eq!(threads.len(), 2, "both workers ran tasks");
    assert!(rt.stats().steals > 0);
}

#[test]
fn a_started_task_never_changes_worker() {
    let rt = rt(2);
    let moved = Arc::new(AtomicUsize::new(0));
    let hs: Vec<_> = (0..64)
        .map(|_| {
            let moved = moved.clone();
            rt.spawn(move || {
                let first = os_thread();
                for i in 0..200 {
                    if i % 3 == 0 {
                        spindle::yield_now();
                    } else {
                        let h = spindle::spawn(|| ());
                        h.join().unwrap();
                    }
                    if os_thread() != first {
                        moved.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(moved.load(Ordering::Relaxed), 0);
}

#[test]
fn a_panic_reaches_join_and_the_runtime_keeps_working() {
    let rt = rt(2);
    let h = rt.spawn(|| -> u32 { panic!("boom") });
    let err = h.join().unwrap_err();
    assert!(err.is_panic());
    let payload = err.into_panic().unwrap();
    assert_eq!(*payload.downcast_ref::<&str>().unwrap(), "boom");
    // The workers live on.
    let sum: u32 = (0..100)
        .map(|i| rt.spawn(move || i))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .sum();
    assert_eq!(sum, 4950);
}

#[test]
fn block_on_reraises_the_panic() {
    let rt = rt(1);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(|| panic!("from block_on"))
    }));
    let p = r.unwrap_err();
    assert_eq!(*p.downcast_ref::<&str>().unwrap(), "from block_on");
    assert_eq!(rt.block_on(|| 5), 5);
}

#[test]
fn block_on_may_borrow() {
    let rt = rt(2);
    let mut v = vec![1, 2, 3];
    rt.block_on(|| v.push(4));
    assert_eq!(v, [1, 2, 3, 4]);
}

#[test]
fn current_is_none_outside_tasks() {
    assert_eq!(spindle::current(), None);
    let rt = rt(1);
    let id: Option<TaskId> = rt.block_on(spindle::current);
    assert!(id.is_some());
}

#[test]
fn set_workers_grows_and_rejects_shrinking_or_absurd_values() {
    let rt = rt(1);
    assert_eq!(rt.workers(), 1);
    rt.set_workers(2).unwrap();
    assert_eq!(rt.workers(), 2);
    assert!(matches!(
        rt.set_workers(1),
        Err(spindle::SetWorkersError::Shrink {
            current: 2,
            requested: 1
        })
    ));
    assert!(matches!(
        rt.set_workers(100_000),
        Err(spindle::SetWorkersError::TooMany { .. })
    ));
    assert_eq!(rt.workers(), 2);
    // The new worker runs tasks.
    let threads: HashSet<_> = (0..200)
        .map(|_| {
            rt.spawn(|| {
                std::thread::sleep(Duration::from_micros(100));
                os_thread()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    assert_eq!(threads.len(), 2);
}

#[test]
fn a_runtime_debugs_as_a_summary() {
    let rt = rt(2);
    let text = format!("{rt:?}");
    assert!(text.starts_with("Runtime {"), "{text}");
    assert!(text.contains("workers: 2"), "{text}");
    assert!(text.contains("stopping: false"), "{text}");
}

/// A task woken from a plain thread wakes its own worker, and only it,
/// though its worker shares a ParkingLot with another (8 workers on 4
/// lots): each parked worker waits with a bit of its own.
#[test]
fn a_remote_wake_wakes_only_the_tasks_worker() {
    let rt = rt(8);
    const ROUNDS: u64 = 50;
    let (tx, rx) = std::sync::mpsc::channel();
    let sleeper = rt.spawn(move || {
        for _ in 0..ROUNDS {
            tx.send(()).unwrap();
            let r = spindle::sleep(Duration::from_secs(3600));
            assert_eq!(r, Err(spindle::SleepError::Interrupted));
        }
    });
    let id = sleeper.id();
    let mut woken = 0;
    for _ in 0..ROUNDS {
        // The sleeper is about to sleep; let its worker park (the other
        // seven have nothing to do).
        rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(2));
        let before = rt.stats().wakeups;
        spindle::interrupt(id).unwrap();
        // Counted by the interrupter, before `interrupt` returns.
        woken += rt.stats().wakeups - before;
    }
    sleeper.join().unwrap();
    assert!(woken > 0, "the interrupts never woke a parked worker");
    // Waking the lot woke both of its workers: about 2 per round.
    assert!(
        woken < ROUNDS * 3 / 2,
        "{woken} threads woken in {ROUNDS} rounds"
    );
}

#[test]
fn bad_builder_values_are_errors() {
    assert!(Runtime::builder().workers(0).build().is_err());
    assert!(Runtime::builder().workers(1 << 20).build().is_err());
    assert!(Runtime::builder().stack_size(usize::MAX).build().is_err());
    // Too small a stack is refused, not rounded up.
    for size in [0, 1, spindle::MIN_STACK_SIZE - 1] {
        let e = Runtime::builder().stack_size(size).build().err();
        assert_eq!(
            e.map(|e| e.kind()),
            Some(std::io::ErrorKind::InvalidInput),
            "stack_size({size})"
        );
    }
    assert!(Runtime::builder()
        .workers(1)
        .stack_size(spindle::MIN_STACK_SIZE)
        .build()
        .is_ok());
    // std's thread builder would panic on it.
    let e = Runtime::builder()
        .thread_name("bad\0name")
        .build()
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn errno_of_one_task_is_not_seen_by_the_next() {
    let rt = rt(1);
    rt.block_on(|| {
        let a = spindle::spawn(|| {
            // SAFETY: errno is this thread's (this task's) own.
            unsafe { *libc_errno() = 1234 };
            spindle::yield_now();
            // SAFETY: as above.
            unsafe { *libc_errno() }
        });
        let b = spindle::spawn(|| {
            // SAFETY: as above.
            let seen = unsafe { *libc_errno() };
            // SAFETY: as above.
            unsafe { *libc_errno() = 99 };
            spindle::yield_now();
            seen
        });
        assert_eq!(
            a.join().unwrap(),
            1234,
            "a task keeps its errno across a switch"
        );
        assert_ne!(
            b.join().unwrap(),
            1234,
            "errno does not leak to the next task"
        );
    });
}

fn libc_errno() -> *mut i32 {
    extern "C" {
        fn __errno_location() -> *mut i32;
    }
    // SAFETY: always valid on Linux.
    unsafe { __errno_location() }
}

#[test]
fn the_global_runtime_starts_on_first_use() {
    let h = spindle::spawn(|| spindle::current().is_some());
    assert!(h.join().unwrap());
    assert!(spindle::global_runtime().workers() >= 1);
}

#[test]
fn a_stack_that_cannot_be_had_is_an_error_not_a_crash() {
    let rt = rt(1);
    rt.block_on(|| {
        // Far more than this machine's memory: mprotect refuses it.
        let r = spindle::task::Builder::new()
            .stack_size(1 << 40)
            .spawn(|| ());
        assert!(r.is_err());
        // Out of the supported range: refused before any mapping.
        let r = spindle::task::Builder::new()
            .stack_size(usize::MAX)
            .spawn(|| ());
        assert_eq!(r.unwrap_err().kind(), std::io::ErrorKind::InvalidInput);
        // Too small: refused, not rounded up.
        for size in [0, spindle::MIN_STACK_SIZE - 1] {
            let r = spindle::task::Builder::new().stack_size(size).spawn(|| ());
            assert_eq!(r.unwrap_err().kind(), std::io::ErrorKind::InvalidInput);
        }
        let r = spindle::task::Builder::new()
            .stack_size(spindle::MIN_STACK_SIZE)
            .spawn(|| 7);
        assert_eq!(r.unwrap().join().unwrap(), 7);
        // The runtime is fine afterwards.
        assert_eq!(spindle::spawn(|| 1).join().unwrap(), 1);
    });
}

#[test]
fn named_tasks_with_their_own_stack_size() {
    let rt = rt(1);
    let v = rt.block_on(|| {
        spindle::task::Builder::new()
            .name("big")
            .stack_size(4 << 20)
            .spawn(|| {
                // Use a good part of the stack.
                let buf = [1u8; 1 << 20];
                std::hint::black_box(&buf)
                    .iter()
                    .map(|&b| b as u32)
                    .sum::<u32>()
            })
            .unwrap()
            .join()
            .unwrap()
    });
    assert_eq!(v, 1 << 20);
}

#[test]
fn dropping_a_handle_detaches_the_task() {
    let rt = rt(2);
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    drop(rt.spawn(move || d.store(true, Ordering::SeqCst)));
    let t = std::time::Instant::now();
    while !done.load(Ordering::SeqCst) {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "detached task never ran"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Where a task's result was dropped: in which task, if any, and on which
/// OS thread.
type DroppedIn = (Option<TaskId>, std::thread::ThreadId);

/// A result that reports where it is dropped, after a wait (a sleep: a
/// suspension inside a task, an OS sleep outside), and may then panic.
struct ReportsDrop {
    to: std::sync::mpsc::Sender<DroppedIn>,
    panics: bool,
}

impl Drop for ReportsDrop {
    fn drop(&mut self) {
        spindle::sleep(Duration::from_millis(1)).expect("nothing interrupts it");
        let _ = self.to.send((spindle::current(), os_thread()));
        if self.panics {
            panic!("a result that panics when dropped");
        }
    }
}

/// A task whose handle is gone drops its own result, as itself: never the
/// worker, outside any task, where a `Drop` that panics would kill the
/// worker and one that waits would block its thread. (Guards against the
/// worker that frees the slot dropping it.)
#[test]
fn a_detached_task_drops_its_own_result_even_one_that_panics() {
    let rt = rt(1);
    let (tx, rx) = std::sync::mpsc::channel();
    for panics in [false, true] {
        let gate = Arc::new(common::Gate::new());
        let (g, to) = (gate.clone(), tx.clone());
        let h = rt.spawn(move || {
            g.pass();
            ReportsDrop { to, panics }
        });
        let id = h.id();
        drop(h); // detached before it ends
        gate.open();
        let (task, _) = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the result is dropped");
        assert_eq!(task, Some(id), "dropped by the task itself");
    }
    // The worker outlived the panicking drop: it still runs tasks.
    let (tx, rx) = std::sync::mpsc::channel();
    drop(rt.spawn(move || tx.send(()).unwrap()));
    let alive = rx.recv_timeout(Duration::from_secs(30)).is_ok();
    if !alive {
        std::mem::forget(rt); // its worker is gone: dropping would hang
    }
    assert!(alive, "the worker died with the result's panic");
}

/// A finished task's unread result is dropped by whoever drops its handle,
/// on that thread; and racing the two ends drops each result exactly once,
/// never on a worker outside a task.
#[test]
fn an_unread_result_is_dropped_once_by_the_task_or_the_handle_owner() {
    let rt = rt(2);
    let (tx, rx) = std::sync::mpsc::channel();
    let to = tx.clone();
    let h = rt.spawn(move || ReportsDrop { to, panics: false });
    while !h.is_finished() {
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(h);
    assert_eq!(
        rx.try_recv(),
        Ok((None, os_thread())),
        "dropped with the handle"
    );

    let main = os_thread();
    let n = if cfg!(debug_assertions) { 300 } else { 2000 };
    for i in 0..n {
        let to = tx.clone();
        let h = rt.spawn(move || ReportsDrop { to, panics: false });
        // Drop the handle at varying points of the task's run.
        for _ in 0..(i % 50) * 20 {
            std::hint::spin_loop();
        }
        drop(h);
    }
    for _ in 0..n {
        let (task, thread) = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("every result is dropped");
        assert!(
            task.is_some() || thread == main,
            "a result was dropped on a worker outside any task"
        );
    }
    rt.shutdown();
    drop(tx);
    assert!(rx.recv().is_err(), "no result dropped twice");
}

#[test]
fn is_finished_reports_the_end() {
    let rt = rt(1);
    let gate = Arc::new(common::Gate::new());
    let g = gate.clone();
    let h = rt.spawn(move || g.pass());
    assert!(!h.is_finished());
    gate.open();
    while !h.is_finished() {
        std::thread::yield_now();
    }
    h.join().unwrap();
}

#[test]
fn shutdown_cancels_queued_tasks_and_returns() {
    let rt = rt(1);
    // A task that never finishes on its own: it is in the ready queue at
    // every scheduling point, so shutdown finds it queued and cancels it.
    let started = Arc::new(AtomicBool::new(false));
    let s = started.clone();
    let forever = rt.spawn(move || loop {
        s.store(true, Ordering::SeqCst);
        spindle::yield_now();
    });
    while !started.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    rt.shutdown();
    assert!(matches!(forever.join(), Err(spindle::JoinError::Cancelled)));
}

/// Tasks blocked in a wait when their runtime stops are cancelled, timers
/// and all: a sleep's timer that was due after the shutdown and an
/// interrupt sent after it find nothing, and other runtimes work on. (When
/// blocked tasks were left in place, their waits could still end after the
/// shutdown and queue them on the stopped runtime's state; under valgrind
/// this test showed invalid reads of it until stopped workers kept it
/// alive.)
#[test]
fn waits_that_would_end_after_shutdown_are_cancelled_with_it() {
    let rt = rt(2);
    let asleep = Arc::new(AtomicUsize::new(0));
    let (a1, a2) = (asleep.clone(), asleep.clone());
    let sleeper = rt.spawn(move || {
        a1.fetch_add(1, Ordering::SeqCst);
        let _ = spindle::sleep(Duration::from_millis(30));
    });
    let waiter = rt.spawn(move || {
        a2.fetch_add(1, Ordering::SeqCst);
        let _ = spindle::sleep(Duration::from_secs(3600));
    });
    while asleep.load(Ordering::SeqCst) < 2 {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(5));
    let waiter_id = waiter.id();
    rt.shutdown();
    assert!(waiter.is_finished(), "the stop ended the waiter");
    // The 30 ms timer would fire now, and the interrupt finds no task.
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(spindle::interrupt(waiter_id), Err(spindle::NoSuchTask));
    assert!(matches!(waiter.join(), Err(spindle::JoinError::Cancelled)));
    // The sleeper was cancelled too, unless it ended before the stop.
    assert!(matches!(
        sleeper.join(),
        Ok(()) | Err(spindle::JoinError::Cancelled)
    ));
    // Other runtimes work on.
    let rt2 = self::rt(2);
    assert_eq!(rt2.spawn(|| 5).join().unwrap(), 5);
}

/// A task occupying a worker without ever yielding, until released.
struct Hog {
    task: JoinHandle<()>,
    release: Arc<AtomicBool>,
}

/// Starts a [`Hog`] on `rt` and returns once it runs.
fn hog(rt: &Runtime) -> Hog {
    let (busy, release) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let (b, r) = (busy.clone(), release.clone());
    let task = rt.spawn(move || {
        b.store(true, Ordering::SeqCst);
        while !r.load(Ordering::SeqCst) {
            std::hint::spin_loop();
        }
    });
    while !busy.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(1));
    }
    Hog { task, release }
}

/// Shuts `rt` down while `hog` still holds its worker: the hog is released
/// 20 ms later, so the worker meets the stop with its queues as they were.
fn shutdown_while_hogged(rt: Runtime, hog: Hog) {
    let release = hog.release;
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        release.store(true, Ordering::SeqCst);
    });
    rt.shutdown();
    releaser.join().unwrap();
    hog.task.join().unwrap();
}

/// A task whose timed wait has ended but which has not resumed yet (it is
/// queued) when its runtime stops is cancelled: its stack is unwound and
/// unmapped. Its wait's timer must be cancelled first, or it fires into the
/// unmapped stack and crashes the timer thread.
#[test]
fn a_woken_task_cancelled_at_shutdown_leaves_no_timer_behind() {
    let rt = rt(1);
    let asleep = Arc::new(AtomicBool::new(false));
    let a = asleep.clone();
    let sleeper = rt.spawn(move || {
        a.store(true, Ordering::SeqCst);
        spindle::sleep(Duration::from_millis(150))
    });
    while !asleep.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(5));
    // Occupy the only worker without yielding, so the sleeper, once woken,
    // stays queued until the runtime stops.
    let hog = hog(&rt);
    spindle::interrupt(sleeper.id()).unwrap();
    shutdown_while_hogged(rt, hog);
    assert!(matches!(sleeper.join(), Err(spindle::JoinError::Cancelled)));
    // Past the sleep's deadline: had its timer been left armed, it would
    // have fired into the unmapped stack by now (a crash of this process).
    std::thread::sleep(Duration::from_millis(250));
    let again = self::rt(1);
    assert_eq!(again.spawn(|| 1).join().unwrap(), 1);
}

/// A task that runs past the stall threshold without suspending is reported
/// once; workers that are idle, or switching, are not.
#[test]
fn the_watchdog_reports_a_task_that_hogs_its_worker() {
    let rt = Runtime::builder()
        .workers(2)
        .stall_threshold(Duration::from_millis(40))
        .build()
        .unwrap();
    // Idle workers for many thresholds: nothing to report.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(rt.stats().stalls, 0);
    let hog = rt.spawn(|| {
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_millis(600) {
            std::hint::spin_loop();
        }
    });
    hog.join().unwrap();
    assert_eq!(rt.stats().stalls, 1, "one report per episode");
}

/// Tasks that never ran keep their body in their meta until their first
/// run; cancelled at shutdown, they drop it (and what it captured).
#[test]
fn never_run_tasks_cancelled_at_shutdown_drop_their_captures() {
    let rt = rt(1);
    let hog = hog(&rt);
    let captured = Arc::new(7u64);
    let waiting: Vec<_> = (0..100)
        .map(|_| {
            let c = captured.clone();
            rt.spawn(move || *c)
        })
        .collect();
    assert_eq!(Arc::strong_count(&captured), 101);
    shutdown_while_hogged(rt, hog);
    for h in waiting {
        // Each either ran before the stop reached its worker, or was
        // cancelled; either way its capture is gone.
        match h.join() {
            Ok(v) => assert_eq!(v, 7),
            Err(e) => assert!(matches!(e, spindle::JoinError::Cancelled)),
        }
    }
    assert_eq!(Arc::strong_count(&captured), 1, "every body was dropped");
}

/// A capture whose `Drop` panics, dropped when its never-run task is
/// cancelled at shutdown, neither kills the worker (nor aborts the process)
/// nor stops the shutdown: the tasks queued after it are cancelled too and
/// their captures dropped.
#[test]
fn a_cancelled_task_whose_capture_panics_in_drop_does_not_stop_the_shutdown() {
    struct PanicsOnDrop;
    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            panic!("a capture that panics when dropped");
        }
    }
    let rt = rt(1);
    let hog = hog(&rt);
    let captured = Arc::new(7u64);
    let mut waiting = Vec::new();
    for _ in 0..10 {
        let p = PanicsOnDrop;
        waiting.push(rt.spawn(move || drop(p)));
        // A body too large to wait in the meta: its coroutine is built at
        // spawn, and corosensei drops an unrun coroutine's body under a
        // guard that aborts on a panic.
        let large = (PanicsOnDrop, [0u64; 32]);
        waiting.push(rt.spawn(move || drop(large)));
        let c = captured.clone();
        waiting.push(rt.spawn(move || drop(c)));
    }
    shutdown_while_hogged(rt, hog);
    for h in waiting {
        assert!(matches!(h.join(), Err(spindle::JoinError::Cancelled)));
    }
    assert_eq!(Arc::strong_count(&captured), 1, "every body was dropped");
}

/// A never-run task's captures are dropped at shutdown on its worker's own
/// stack, outside any task: a drop that blocks (here, a sleep) blocks the
/// worker thread, as on a plain thread. (It must not try to suspend the
/// never-run task, through a yielder it never had.)
#[test]
fn a_never_run_task_whose_capture_blocks_in_drop_is_cancelled_cleanly() {
    struct SleepsOnDrop(Arc<AtomicUsize>);
    impl Drop for SleepsOnDrop {
        fn drop(&mut self) {
            spindle::sleep(Duration::from_millis(1)).expect("a plain sleep");
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let rt = rt(1);
    let dropped = Arc::new(AtomicUsize::new(0));
    // The hog spawns tasks with a stack size of their own (a builder spawns
    // from a task) before it holds the worker, so they wait behind it.
    let (busy, release) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let task = {
        let (b, r, d) = (busy.clone(), release.clone(), dropped.clone());
        rt.spawn(move || {
            for _ in 0..10 {
                let sized = SleepsOnDrop(d.clone());
                let builder = spindle::task::Builder::new().stack_size(64 * 1024);
                tx.send(builder.spawn(move || drop(sized)).unwrap())
                    .unwrap();
            }
            b.store(true, Ordering::SeqCst);
            while !r.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
        })
    };
    while !busy.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut waiting: Vec<JoinHandle<()>> = rx.iter().take(10).collect();
    for _ in 0..10 {
        // Two more kinds: a small body waiting in its meta, and a large one
        // bound to its stack at spawn.
        let small = SleepsOnDrop(dropped.clone());
        waiting.push(rt.spawn(move || drop(small)));
        let large = (SleepsOnDrop(dropped.clone()), [0u64; 32]);
        waiting.push(rt.spawn(move || drop(large)));
    }
    shutdown_while_hogged(rt, Hog { task, release });
    for h in waiting {
        // The hog holds the only worker until after the stop: none ran.
        assert!(matches!(h.join(), Err(spindle::JoinError::Cancelled)));
    }
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        30,
        "every capture dropped once"
    );
}

/// A body too large to wait in the task's meta is bound to its stack at
/// spawn instead; both kinds run and return their values.
#[test]
fn small_and_large_bodies_both_run() {
    let rt = rt(2);
    let big = [3u64; 32];
    let small = 5u64;
    let hs_big: Vec<_> = (0..100)
        .map(|i| rt.spawn(move || big[i % 32] + i as u64))
        .collect();
    let hs_small: Vec<_> = (0..100)
        .map(|i| rt.spawn(move || small + i as u64))
        .collect();
    for (i, h) in hs_big.into_iter().enumerate() {
        assert_eq!(h.join().unwrap(), 3 + i as u64);
    }
    for (i, h) in hs_small.into_iter().enumerate() {
        assert_eq!(h.join().unwrap(), 5 + i as u64);
    }
}

/// Tasks spawned from a plain thread run even while the workers have local
/// work: run only when a worker had nothing local, they would be starved
/// forever by tasks that yield in a loop.
#[test]
fn spawns_from_outside_are_not_starved_by_busy_workers() {
    let rt = rt(2);
    let stop = Arc::new(AtomicBool::new(false));
    let spinners: Vec<_> = (0..4)
        .map(|_| {
            let s = stop.clone();
            rt.spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    spindle::yield_now();
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(10));
    for i in 0..100 {
        assert_eq!(rt.spawn(move || i).join().unwrap(), i);
    }
    assert_eq!(rt.block_on(|| 5), 5);
    stop.store(true, Ordering::Relaxed);
    for h in spinners {
        h.join().unwrap();
    }
}

/// A steady flood of spawns from a plain thread, enough to keep the
/// worker's inbox from ever running dry, does not starve a task that is
/// woken again and again (here by its sleeps' timers) on the same worker.
/// (It would be starved if every starvation guard tick ran a task from the
/// inbox and refilled `fresh` with a batch, and `fresh` always went before
/// the woken.)
#[test]
fn a_flood_of_spawns_from_a_thread_does_not_starve_woken_tasks() {
    const IN_FLIGHT: usize = 1_000;
    // 0.2 s of naps; starved, each would take some 0.1 s.
    let naps_wanted = common::scaled(1_000, 100);
    let rt = rt(1);
    let done = Arc::new(AtomicBool::new(false));
    let naps = Arc::new(AtomicUsize::new(0));
    let sleeper = {
        let (done, naps) = (done.clone(), naps.clone());
        rt.spawn(move || {
            for _ in 0..naps_wanted {
                spindle::sleep(Duration::from_micros(200)).unwrap();
                naps.fetch_add(1, Ordering::SeqCst);
            }
            done.store(true, Ordering::SeqCst);
        })
    };
    let in_flight = Arc::new(AtomicUsize::new(0));
    let limit = std::time::Instant::now() + Duration::from_secs(10);
    while !done.load(Ordering::SeqCst) && std::time::Instant::now() < limit {
        if in_flight.load(Ordering::SeqCst) >= IN_FLIGHT {
            std::hint::spin_loop();
            continue;
        }
        in_flight.fetch_add(1, Ordering::SeqCst);
        let in_flight = in_flight.clone();
        drop(rt.spawn(move || {
            let t = std::time::Instant::now();
            while t.elapsed() < Duration::from_micros(2) {}
            in_flight.fetch_sub(1, Ordering::SeqCst);
        }));
    }
    assert!(
        done.load(Ordering::SeqCst),
        "the sleeper woke {} times of {naps_wanted} in 10 s of flood",
        naps.load(Ordering::SeqCst)
    );
    sleeper.join().unwrap();
}

/// The parks of a one-worker runtime built with `idle_poll(max)` while a
/// plain thread wakes a task of it `gaps.len()` times, pausing for each gap
/// first, counted from wake-up `from` on.
fn parks_while_waking(max: Duration, gaps: &[Duration], from: usize) -> u64 {
    let rt = Runtime::builder()
        .workers(1)
        .idle_poll(max)
        .build()
        .unwrap();
    let rounds = gaps.len() as u32;
    let bell = Arc::new(spindle::Butex::new(0));
    let listener = {
        let bell = bell.clone();
        rt.spawn(move || {
            for seen in 0..rounds {
                while bell.value().load(Ordering::Acquire) == seen {
                    let _ = bell.wait(seen, None);
                }
            }
        })
    };
    let mut parks_before = 0;
    for (i, gap) in gaps.iter().enumerate() {
        std::thread::sleep(*gap);
        if i == from {
            parks_before = rt.stats().parks;
        }
        bell.value().store(i as u32 + 1, Ordering::Release);
        bell.wake_one();
    }
    listener.join().unwrap();
    let parks = rt.stats().parks - parks_before;
    rt.shutdown();
    parks
}

/// `Builder::idle_poll`: a worker whose work keeps coming soon after it
/// went idle learns to look for it instead of parking. A task woken from a
/// plain thread every millisecond has its worker park for nearly every
/// wake-up by default, and hardly ever with a bound far above that gap.
#[test]
fn idle_polling_replaces_parks_when_work_keeps_coming_soon() {
    let gaps = [Duration::from_millis(1); 100];
    let measured: u64 = 80;
    let parking = parks_while_waking(Duration::ZERO, &gaps, 100 - measured as usize);
    let polling = parks_while_waking(Duration::from_millis(100), &gaps, 100 - measured as usize);
    assert!(
        parking >= measured / 2,
        "{parking} parks for {measured} wake-ups without idle polling"
    );
    assert!(
        polling < measured / 2,
        "{polling} parks for {measured} wake-ups with idle polling"
    );
}

/// The bound holds: gaps longer than it are waited out parked, however
/// short the gaps before them were.
#[test]
fn idle_polling_parks_through_gaps_longer_than_its_bound() {
    let mut gaps = vec![Duration::from_millis(1); 20];
    gaps.extend([Duration::from_millis(20); 20]);
    let parks = parks_while_waking(Duration::from_millis(5), &gaps, 20);
    // One per long gap counted (19, and the park after the last), though a
    // few may be missed if the worker loses its CPU for most of a gap
    // while it looks.
    assert!(
        parks >= 15,
        "{parks} parks in the last 19 gaps of 20 ms, bound 5 ms"
    );
}

/// A task woken by its own timer is not work that came: tasks that sleep
/// 2 ms over and over, their sleeps ended by their worker or by the timer
/// thread, leave a worker with a far longer bound parking through the
/// sleeps, instead of learning to poll through them all.
#[test]
fn idle_polling_does_not_learn_from_timers() {
    // `sleep_spin`: the worker wakes ahead of each sleep's end and ends it
    // itself, or (zero) parks until the end, which the timer thread and
    // the worker's own timed wake-up race to.
    for sleep_spin in [Duration::from_micros(500), Duration::ZERO] {
        let rt = Runtime::builder()
            .workers(1)
            .idle_poll(Duration::from_millis(100))
            .sleep_spin(sleep_spin)
            .build()
            .unwrap();
        // Two sleepers, a millisecond apart: only one of them is the
        // worker's next sleep at a time.
        let sleepers: Vec<_> = (0..2)
            .map(|i| {
                rt.spawn(move || {
                    spindle::sleep(Duration::from_millis(i)).unwrap();
                    for _ in 0..25 {
                        spindle::sleep(Duration::from_millis(2)).unwrap();
                    }
                })
            })
            .collect();
        for s in sleepers {
            s.join().unwrap();
        }
        // At least one park for each pair of sleeps, even if the two
        // drift into step; without this rule, 5 in all.
        let parks = rt.stats().parks;
        assert!(
            parks >= 20,
            "{parks} parks through 50 sleeps of 2 ms (sleep_spin {sleep_spin:?})"
        );
        rt.shutdown();
    }
}
