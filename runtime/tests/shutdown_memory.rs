//! What a runtime stopped with tasks blocked in a wait gives back: their
//! stacks, its pool's, and their task slots. In a binary of its own: it
//! measures the process's address space and the process-wide task table.

mod common;

use common::Gate;
use spindle::{Butex, JoinHandle, Runtime};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// The stack size of the test's runtimes: large, so that the stacks a
/// worker caches stand out in the address space.
const STACK: usize = 1024 * 1024;
/// Stacks the second worker caches: fewer than a worker's private cache
/// holds, so none reach the shared pool before the stop.
const CACHED: usize = 200;

/// The process's address space, in bytes (`VmSize`).
fn vm_size() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let kib: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .expect("VmSize in kB");
    kib * 1024
}

/// One round: a task blocked for good on one worker; on the other, a task
/// that leaves `CACHED` stacks in its worker's cache, drops the runtime
/// (it is one of its own tasks, so nobody waits for the workers), and then
/// holds its worker until the first one has exited. Returns when the
/// dropping task has ended.
fn round() {
    let rt = Runtime::builder()
        .workers(2)
        .stack_size(STACK)
        .build()
        .unwrap();
    // A wait that nothing ends, on worker 0: the runtime stops with this
    // task blocked. The dropping task goes on worker 1, which then takes
    // the runtime (both placed with the hidden `task::Builder::worker`,
    // from a task of the runtime, so that they name its workers).
    let never = Arc::new(Butex::new(0));
    let holder: Arc<Mutex<Option<Runtime>>> = Arc::default();
    let (tx, rx) = std::sync::mpsc::channel::<ThreadId>();
    let (tx2, rx2) = std::sync::mpsc::channel::<ThreadId>();
    let dropper = rt.block_on(|| {
        let never = never.clone();
        spindle::task::Builder::new()
            .worker(0)
            .spawn(move || {
                tx.send(std::thread::current().id()).unwrap();
                loop {
                    let _ = never.wait(0, None);
                }
            })
            .expect("worker 0");
        let holder = holder.clone();
        spindle::task::Builder::new()
            .worker(1)
            .spawn(move || {
                tx2.send(std::thread::current().id()).unwrap();
                drop_runtime_from_here(&holder);
            })
            .expect("worker 1")
    });
    assert_ne!(rx.recv().unwrap(), rx2.recv().unwrap(), "two workers");
    *holder.lock().unwrap() = Some(rt);
    dropper.join().expect("the dropping task ends normally");
    drop(never);
}

/// Leaves `CACHED` stacks in this worker's cache, drops the runtime in
/// `holder`, and holds the worker until the other one has exited.
fn drop_runtime_from_here(holder: &Mutex<Option<Runtime>>) {
    // CACHED tasks alive at once, started here (and so pinned here), ending
    // here: their stacks go to this worker's cache.
    let gate = Arc::new(Gate::new());
    let children: Vec<JoinHandle<()>> = (0..CACHED)
        .map(|_| {
            let gate = gate.clone();
            spindle::spawn_urgent(move || gate.pass())
        })
        .collect();
    gate.open();
    for c in children {
        c.join().unwrap();
    }
    let rt = loop {
        if let Some(rt) = holder.lock().unwrap().take() {
            break rt;
        }
        spindle::yield_now(); // until the runtime is in there
    };
    drop(rt);
    // The other worker, woken by the stop, exits before this one: it finds
    // its blocked task and cancels it first.
    std::thread::sleep(Duration::from_millis(200));
}

/// A runtime dropped from one of its own tasks while a task of another
/// worker is blocked for good gives everything back: the blocked task is
/// cancelled, and the stacks the dropping task's worker cached go back to
/// the pool, which is unmapped. (A runtime whose state were kept for good,
/// with the blocked task's stack and the other worker's cached stacks,
/// would hold 674 MiB over three rounds.)
#[test]
fn a_runtime_stopped_with_blocked_tasks_gives_back_stacks_and_slots() {
    // A first round sets up what stays for the process's life: the malloc
    // arenas of the worker threads, the timer thread, the task table.
    round();
    let before = vm_size();
    let slots = || {
        Runtime::builder()
            .workers(1)
            .build()
            .unwrap()
            .stats()
            .task_slots
    };
    let slots_before = slots();
    const ROUNDS: usize = 3;
    for _ in 0..ROUNDS {
        round();
    }
    // The second worker may still be on its way out.
    let cached = ROUNDS * CACHED * STACK;
    let limit = Instant::now() + Duration::from_secs(20);
    loop {
        let grown = vm_size().saturating_sub(before);
        if grown < cached / 4 {
            break;
        }
        assert!(
            Instant::now() < limit,
            "the address space grew by {} MiB in {ROUNDS} rounds: the stacks of \
             {} cached ones are {} MiB",
            grown >> 20,
            ROUNDS * CACHED,
            cached >> 20
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Each round's tasks (201 at once) fit in the slots of the first.
    assert!(
        slots() <= slots_before + 256,
        "the task table grew from {slots_before} to {} slots",
        slots()
    );
}
