//! Per-worker stats (`RuntimeStats::workers`, `WorkerStats`) and the worker
//! thread hooks (`Builder::on_thread_start`, `on_thread_stop`).
//!
//! Every check waits for a state (`wait_for`, with its generous hang
//! limit) and asserts orderings and sums, never how fast something went:
//! these run on a busy 2-core machine. The one bound on time is that a
//! worker's busy time fits in the wall time since the runtime was built,
//! which holds whatever the machine does.

mod common;

use common::{rt, wait_for, Gate};
use spindle::task::Builder as TaskBuilder;
use spindle::{Runtime, RuntimeStats, WorkerStats};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a task spinning for a flag spins at most: a test that fails
/// must not hang (`wait_for`'s own limit ends the test first).
const GIVE_UP: Duration = Duration::from_secs(30);

/// Spins until `flag` is set, or [`GIVE_UP`] has passed.
fn spin_until(flag: &AtomicBool) {
    let give_up = Instant::now() + GIVE_UP;
    while !flag.load(Ordering::Acquire) && Instant::now() < give_up {
        std::hint::spin_loop();
    }
}

/// Spawns `f` placed on worker `w` of `rt`.
fn on_worker<T: Send + 'static>(
    rt: &Runtime,
    w: usize,
    f: impl FnOnce() -> T + Send + 'static,
) -> spindle::JoinHandle<T> {
    TaskBuilder::new()
        .worker(w)
        .spawn_on(&rt.handle(), f)
        .expect("the worker exists")
}

/// Holds that every per-worker figure of `s` sums to its total.
fn assert_sums(s: &RuntimeStats) {
    let w = s.workers();
    assert_eq!(w.len(), s.workers, "one entry per worker: {s:?}");
    let sum = |f: fn(&WorkerStats) -> u64| w.iter().map(f).sum::<u64>();
    let sum_usize = |f: fn(&WorkerStats) -> usize| w.iter().map(f).sum::<usize>();
    assert_eq!(sum(|w| w.switches), s.switches, "switches: {s:?}");
    assert_eq!(sum(|w| w.steals), s.steals, "steals: {s:?}");
    assert_eq!(sum(|w| w.parks), s.parks, "parks: {s:?}");
    assert_eq!(sum(|w| w.polls), s.polls, "polls: {s:?}");
    assert_eq!(sum_usize(|w| w.ready), s.ready, "ready: {s:?}");
    assert_eq!(sum_usize(|w| w.tasks), s.tasks, "tasks: {s:?}");
    assert_eq!(
        w.iter().map(|w| w.busy).sum::<Duration>(),
        s.busy,
        "busy: {s:?}"
    );
}

#[test]
fn per_worker_figures_sum_to_the_totals() {
    let rt = rt(3);
    assert_sums(&rt.stats());
    assert_eq!(rt.stats().workers().len(), 3);
    // Some of everything: spawns, yields, sleeps, a socket wait.
    rt.block_on(|| {
        let hs: Vec<_> = (0..50)
            .map(|i| {
                spindle::spawn(move || {
                    for _ in 0..10 {
                        spindle::yield_now();
                    }
                    spindle::sleep(Duration::from_millis(i % 3)).unwrap();
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let a = spindle::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = spindle::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        b.send_to(b"x", a.local_addr().unwrap()).unwrap();
        a.recv_from(&mut [0; 8]).unwrap();
    });
    // Sums hold in every snapshot, taken while the workers work too.
    let busy = Arc::new(AtomicBool::new(true));
    let churn = {
        let busy = busy.clone();
        rt.spawn(move || {
            while busy.load(Ordering::Relaxed) {
                spindle::spawn(spindle::yield_now).join().unwrap();
            }
        })
    };
    for _ in 0..200 {
        assert_sums(&rt.stats());
    }
    busy.store(false, Ordering::Relaxed);
    churn.join().unwrap();
    let s = rt.stats();
    assert_sums(&s);
    assert!(s.switches > 0 && s.workers().iter().any(|w| w.switches > 0));
    // A clone is equal; the handle's stats have the same shape.
    assert_eq!(s.clone(), s);
    assert_eq!(rt.handle().stats().workers().len(), 3);
    // Grown by set_workers: one more entry.
    rt.set_workers(4).unwrap();
    let s = rt.stats();
    assert_eq!(s.workers().len(), 4);
    assert_sums(&s);
}

/// A worker's own figures move with its own work (the sums above hold by
/// construction; these would catch figures filed under the wrong worker).
#[test]
fn a_workers_switches_count_the_switches_of_its_tasks() {
    const YIELDS: u64 = 100;
    let rt = rt(2);
    let before = rt.stats();
    on_worker(&rt, 1, || {
        for _ in 0..YIELDS {
            spindle::yield_now();
        }
    })
    .join()
    .unwrap();
    let after = rt.stats();
    let grown = after.workers()[1].switches - before.workers()[1].switches;
    assert!(
        grown >= YIELDS,
        "worker 1 switched {grown} times: {after:?}"
    );
    assert!(after.switches >= before.switches + YIELDS, "{after:?}");
    assert!(
        after.workers()[1].busy > before.workers()[1].busy,
        "{after:?}"
    );
}

#[test]
fn a_placed_task_counts_in_its_workers_tasks_while_it_sleeps() {
    let rt = rt(2);
    let asleep = Arc::new(AtomicBool::new(false));
    let h = {
        let asleep = asleep.clone();
        on_worker(&rt, 1, move || {
            asleep.store(true, Ordering::Release);
            // Until interrupted.
            spindle::sleep(Duration::from_secs(3600)).unwrap_err();
        })
    };
    wait_for("the task to sleep", || {
        asleep.load(Ordering::Acquire) && rt.stats().workers()[1].tasks == 1
    });
    let s = rt.stats();
    assert_eq!(s.workers()[1].tasks, 1, "{s:?}");
    assert_eq!(s.workers()[0].tasks, 0, "{s:?}");
    assert_eq!(s.tasks, 1, "{s:?}");
    assert_sums(&s);
    h.interrupt().unwrap();
    h.join().unwrap();
    // Its end is published after it leaves the worker's list.
    let s = rt.stats();
    assert_eq!(s.workers()[1].tasks, 0, "{s:?}");
    assert_eq!(s.tasks, 0, "{s:?}");
}

/// A task holds worker 1, spinning; tasks placed on worker 1 meanwhile
/// wait in its remote queue, and once the holder yields, in its ready
/// list behind the first of them (which spins in turn): `ready` shows
/// them both times.
#[test]
fn ready_shows_the_tasks_queued_behind_a_spinning_task() {
    const QUEUED: usize = 5;
    let rt = rt(2);
    let holding = Arc::new(AtomicBool::new(false));
    let yield_now = Arc::new(AtomicBool::new(false));
    let release = Arc::new(AtomicBool::new(false));
    let running = Arc::new(AtomicUsize::new(0));
    let holder = {
        let (holding, yield_now) = (holding.clone(), yield_now.clone());
        on_worker(&rt, 1, move || {
            holding.store(true, Ordering::Release);
            spin_until(&yield_now);
            spindle::yield_now();
        })
    };
    wait_for("the holder to run", || holding.load(Ordering::Acquire));
    let queued: Vec<_> = (0..QUEUED)
        .map(|_| {
            let (release, running) = (release.clone(), running.clone());
            on_worker(&rt, 1, move || {
                running.fetch_add(1, Ordering::AcqRel);
                spin_until(&release);
            })
        })
        .collect();
    // In worker 1's remote queue: the holder does not let it take them.
    let s = rt.stats();
    assert!(s.workers()[1].ready >= QUEUED, "{s:?}");
    assert!(s.ready >= QUEUED, "{s:?}");
    assert_sums(&s);
    // The holder yields: the queued tasks go to the ready list, the holder
    // behind them, and the first of them runs (and spins).
    yield_now.store(true, Ordering::Release);
    wait_for("a queued task to run", || {
        running.load(Ordering::Acquire) >= 1
    });
    assert_eq!(running.load(Ordering::Acquire), 1, "worker 1 is held");
    let s = rt.stats();
    assert!(
        s.workers()[1].ready >= QUEUED,
        "{} queued tasks and the holder wait in the ready list: {s:?}",
        QUEUED - 1
    );
    assert_sums(&s);
    release.store(true, Ordering::Release);
    holder.join().unwrap();
    for h in queued {
        h.join().unwrap();
    }
    wait_for("the queues to drain", || rt.stats().ready == 0);
    assert!(rt.stats().workers().iter().all(|w| w.ready == 0));
}

/// Worker 0 spawns tasks while it holds on, until they have all run: only
/// worker 1 can run them, by stealing, and the steals count on worker 1.
#[test]
fn steals_are_counted_on_the_thief() {
    const CHILDREN: usize = 64;
    let rt = rt(2);
    let handle = rt.handle();
    let (steals_0_before, steals_0_after, ran_on) = on_worker(&rt, 0, move || {
        let steals_0 = || handle.stats().workers()[0].steals;
        let before = steals_0();
        let done = Arc::new(AtomicUsize::new(0));
        let all_done = Arc::new(AtomicBool::new(false));
        let hs: Vec<_> = (0..CHILDREN)
            .map(|_| {
                let (done, all_done) = (done.clone(), all_done.clone());
                spindle::spawn(move || {
                    if done.fetch_add(1, Ordering::AcqRel) + 1 == CHILDREN {
                        all_done.store(true, Ordering::Release);
                    }
                    std::thread::current().name().map(String::from)
                })
            })
            .collect();
        // Hold worker 0 until every child has run (elsewhere).
        spin_until(&all_done);
        let after = steals_0();
        let ran_on: BTreeSet<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        (before, after, ran_on)
    })
    .join()
    .unwrap();
    let s = rt.stats();
    assert_eq!(
        ran_on,
        BTreeSet::from([Some("spindle-worker-1".to_string())]),
        "worker 0 was held: {s:?}"
    );
    assert_eq!(
        steals_0_after, steals_0_before,
        "worker 0 stole nothing while it was held"
    );
    assert!(s.workers()[1].steals >= 1, "the thief counts: {s:?}");
    assert_sums(&s);
}

#[test]
fn busy_grows_while_tasks_run_and_fits_in_the_wall_time() {
    const SPIN: Duration = Duration::from_millis(50);
    let built = Instant::now();
    let rt = rt(2);
    let before = rt.stats();
    // A task that keeps its worker busy for SPIN of wall time.
    on_worker(&rt, 1, || {
        let start = Instant::now();
        while start.elapsed() < SPIN {
            std::hint::spin_loop();
        }
    })
    .join()
    .unwrap();
    let after = rt.stats();
    let elapsed = built.elapsed();
    assert!(
        after.workers()[1].busy >= before.workers()[1].busy + SPIN,
        "a worker running a task is busy for that time: {before:?} then {after:?}"
    );
    assert!(after.busy > before.busy);
    for w in after.workers() {
        assert!(
            w.busy <= elapsed,
            "busy {:?} within the {elapsed:?} since the build",
            w.busy
        );
    }
    assert!(after.busy <= elapsed * after.workers as u32);
    assert_sums(&after);
    // Once the workers have exited, busy stops.
    let handle = rt.handle();
    rt.shutdown();
    let stopped = handle.stats();
    let elapsed = built.elapsed();
    assert!(stopped.busy >= after.busy && stopped.busy <= elapsed * 2);
    assert_eq!(handle.stats().busy, stopped.busy, "no worker runs");
}

#[test]
fn polls_grow_once_a_task_waits_on_a_socket() {
    let rt = rt(1);
    assert_eq!(rt.stats().polls, 0, "no poller before a socket wait");
    let socket = rt
        .block_on(|| spindle::net::UdpSocket::bind("127.0.0.1:0"))
        .unwrap();
    let addr = socket.local_addr().unwrap();
    // The task gives the socket back, so that it stays registered.
    let waiter = rt.spawn(move || {
        let mut buf = [0; 8];
        let n = socket.recv_from(&mut buf).unwrap().0;
        (n, socket)
    });
    // The worker polls its poller once it has nothing else to do, and
    // parks there.
    wait_for("the worker to poll its poller", || rt.stats().polls > 0);
    let before = rt.stats();
    assert_eq!(before.workers()[0].polls, before.polls);
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .send_to(b"ping", addr)
        .unwrap();
    let (n, _socket) = waiter.join().unwrap();
    assert_eq!(n, 4);
    // Idle again with a socket registered: it polls again.
    wait_for("the worker to poll again", || {
        rt.stats().polls > before.polls
    });
    assert_sums(&rt.stats());
}

/// What the hooks saw: the names of the threads they ran on.
#[derive(Default)]
struct HookLog {
    starts: Mutex<Vec<String>>,
    stops: Mutex<Vec<String>>,
}

fn thread_name() -> String {
    std::thread::current().name().unwrap_or("?").to_string()
}

fn hooked(log: &Arc<HookLog>, name: &str, workers: usize) -> Runtime {
    let (on_start, on_stop) = (log.clone(), log.clone());
    Runtime::builder()
        .workers(workers)
        .thread_name(name)
        .on_thread_start(move || on_start.starts.lock().unwrap().push(thread_name()))
        .on_thread_stop(move || on_stop.stops.lock().unwrap().push(thread_name()))
        .build()
        .unwrap()
}

fn sorted(v: &Mutex<Vec<String>>) -> Vec<String> {
    let mut v = v.lock().unwrap().clone();
    v.sort();
    v
}

#[test]
fn thread_hooks_run_once_on_each_worker_thread() {
    let log = Arc::new(HookLog::default());
    let rt = hooked(&log, "hooked", 2);
    let builder_debug = format!(
        "{:?}",
        Runtime::builder()
            .on_thread_start(|| ())
            .on_thread_stop(|| ())
    );
    assert!(builder_debug.contains("start: Some("), "{builder_debug}");
    // A task on each worker runs after that worker's start hook.
    for w in 0..2 {
        let log = log.clone();
        let seen = on_worker(&rt, w, move || {
            let me = thread_name();
            log.starts.lock().unwrap().contains(&me).then_some(me)
        })
        .join()
        .unwrap();
        assert_eq!(seen, Some(format!("hooked-{w}")));
    }
    // A worker added later runs it too.
    rt.set_workers(3).unwrap();
    let log2 = log.clone();
    let seen = on_worker(&rt, 2, move || {
        log2.starts.lock().unwrap().contains(&thread_name())
    })
    .join()
    .unwrap();
    assert!(seen, "the added worker ran its start hook first");
    assert!(log.stops.lock().unwrap().is_empty(), "nothing stopped yet");
    drop(rt);
    // Every stop hook has run once the drop returns; each hook once per
    // worker, on that worker's thread.
    let names: Vec<String> = (0..3).map(|i| format!("hooked-{i}")).collect();
    assert_eq!(sorted(&log.starts), names);
    assert_eq!(sorted(&log.stops), names);
}

#[test]
fn stop_hooks_have_run_when_shutdown_returns() {
    let log = Arc::new(HookLog::default());
    let rt = hooked(&log, "shut", 2);
    let gate = Arc::new(Gate::new());
    // A task still blocked at the shutdown: cancelled before the stop hook.
    let blocked = {
        let gate = gate.clone();
        rt.spawn(move || gate.pass())
    };
    rt.block_on(|| spindle::sleep(Duration::from_millis(1)).unwrap());
    rt.shutdown();
    assert_eq!(
        sorted(&log.stops),
        ["shut-0".to_string(), "shut-1".to_string()]
    );
    assert_eq!(sorted(&log.starts).len(), 2);
    assert!(blocked.join().is_err(), "cancelled by the shutdown");
}

#[test]
fn a_panicking_hook_does_not_break_the_runtime() {
    // Records the runtime's errors (this binary's only use of a
    // subscriber), before its workers start.
    let errors = spindle_testkit::recorded(tracing::Level::ERROR);
    let starts = Arc::new(AtomicUsize::new(0));
    let stops = Arc::new(AtomicUsize::new(0));
    let rt = {
        let (starts, stops) = (starts.clone(), stops.clone());
        Runtime::builder()
            .workers(2)
            .on_thread_start(move || {
                starts.fetch_add(1, Ordering::AcqRel);
                panic!("a start hook panics");
            })
            .on_thread_stop(move || {
                stops.fetch_add(1, Ordering::AcqRel);
                panic!("a stop hook panics");
            })
            .build()
            .unwrap()
    };
    // Both workers run tasks.
    for w in 0..2 {
        assert_eq!(on_worker(&rt, w, move || w * 10).join().unwrap(), w * 10);
    }
    let sum = rt.block_on(|| {
        let hs: Vec<_> = (0..20u64).map(|i| spindle::spawn(move || i)).collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
    });
    assert_eq!(sum, 190);
    assert_eq!(starts.load(Ordering::Acquire), 2);
    drop(rt);
    assert_eq!(stops.load(Ordering::Acquire), 2, "every stop hook ran");
    // Each panic reported once, naming its hook and its message.
    let errors = errors.lock().unwrap().clone();
    let reports = |hook: &str, panic: &str| {
        errors
            .iter()
            .filter(|e| e.contains(hook) && e.contains(panic))
            .count()
    };
    assert_eq!(
        reports("on_thread_start", "a start hook panics"),
        2,
        "{errors:?}"
    );
    assert_eq!(
        reports("on_thread_stop", "a stop hook panics"),
        2,
        "{errors:?}"
    );
}
