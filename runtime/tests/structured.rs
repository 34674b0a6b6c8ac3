//! Structured concurrency: `JoinSet`, and the rule that a task spawned
//! through a `Scope` or a `JoinSet` inherits its spawner's deadline scope
//! and is stopped with it, while a detached `spawn` inherits neither; and
//! `stop` ending a join.

mod common;

use common::{rt, wait_for};
use spindle::sync::mpsc;
use spindle::{JoinError, JoinSet, SleepError, TaskState, WaitError, WaitKind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the tasks here would sleep if nothing ended their sleeps.
const LONG: Duration = Duration::from_secs(30);

/// Guards `join_next`: every task's result comes back once, in the order
/// the tasks end, then `Ok(None)`; `len` counts what is left.
#[test]
fn join_next_returns_each_result_as_its_task_ends() {
    let rt = rt(2);
    let order = rt.block_on(|| {
        let mut set = JoinSet::new();
        let slow = set.spawn(|| {
            spindle::sleep(Duration::from_millis(100)).unwrap();
            "slow"
        });
        let fast = set.spawn(|| "fast");
        assert_eq!(set.len(), 2);
        let mut order = Vec::new();
        while let Some((id, r)) = set.join_next().unwrap() {
            order.push((id, r.unwrap()));
        }
        assert!(set.is_empty());
        assert!(set.join_next().unwrap().is_none());
        assert_eq!(order, vec![(fast, "fast"), (slow, "slow")]);
        order.len()
    });
    assert_eq!(order, 2);
}

/// Guards a panic's path: it comes back as `JoinError::Panicked` with its
/// payload, and the other tasks' results still come.
#[test]
fn a_panic_in_a_set_comes_back_as_join_error() {
    let rt = rt(1);
    let (panics, oks) = rt.block_on(|| {
        let mut set = JoinSet::new();
        set.spawn(|| panic!("boom"));
        set.spawn(|| 1);
        let (mut panics, mut oks) = (0, 0);
        while let Some((_, r)) = set.join_next().unwrap() {
            match r {
                Ok(1) => oks += 1,
                Err(JoinError::Panicked(p)) => {
                    assert_eq!(p.message(), Some("boom"));
                    panics += 1;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        (panics, oks)
    });
    assert_eq!((panics, oks), (1, 1));
}

/// Guards `try_join_next` (no wait) and the set on a plain thread.
#[test]
fn try_join_next_does_not_wait_and_sets_work_on_plain_threads() {
    let rt = rt(1);
    let _g = rt.enter();
    let mut set = JoinSet::new();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    set.spawn(move || go_rx.recv().unwrap());
    assert!(set.try_join_next().is_none());
    go_tx.send(()).unwrap();
    wait_for("the task to end", || {
        set.try_join_next().map(|(_, r)| r.unwrap()).is_some()
    });
    assert!(set.is_empty());
}

/// Guards Drop: the tasks still running are stopped (their sleeps end with
/// `Stopped`), and the drop does not wait for them.
#[test]
fn dropping_a_set_stops_its_running_tasks() {
    let rt = rt(1);
    let (tx, rx) = mpsc::channel();
    rt.block_on(|| {
        let mut set = JoinSet::new();
        for _ in 0..3 {
            let tx = tx.clone();
            set.spawn(move || tx.send(spindle::sleep(LONG)).unwrap());
        }
        spindle::sleep(Duration::from_millis(20)).unwrap();
        drop(set);
    });
    for _ in 0..3 {
        assert_eq!(rx.recv().unwrap(), Err(SleepError::Stopped));
    }
}

/// Guards `detach_all`: the tasks leave the set and run on after it goes.
#[test]
fn detached_tasks_outlive_their_set() {
    let rt = rt(1);
    let (tx, rx) = mpsc::channel();
    rt.block_on(|| {
        let mut set = JoinSet::new();
        set.spawn(move || tx.send(spindle::sleep(Duration::from_millis(30))).unwrap());
        set.detach_all();
        assert!(set.is_empty());
        assert!(set.join_next().unwrap().is_none());
    });
    assert_eq!(rx.recv().unwrap(), Ok(()));
}

/// Guards a cut-short `join_next`: a deadline scope ends the wait with
/// `DeadlineExceeded`, the task stays in the set, and a later `join_next`
/// gets it.
#[test]
fn a_deadline_ends_join_next_and_the_task_stays() {
    let rt = rt(1);
    rt.block_on(|| {
        let mut set = JoinSet::new();
        // Spawned outside the deadline scope: it does not inherit it.
        set.spawn(|| spindle::sleep(Duration::from_millis(100)).map(|_| 5));
        let soon = Instant::now() + Duration::from_millis(10);
        let r = spindle::with_deadline(soon, || set.join_next().map(|_| ()));
        assert_eq!(r, Err(WaitError::DeadlineExceeded));
        assert_eq!(set.len(), 1);
        let (_, r) = set.join_next().unwrap().unwrap();
        assert_eq!(r.unwrap(), Ok(5));
    });
}

/// Guards deadline inheritance: a set's task and a scope's task run inside
/// the spawner's deadline scope (their own sleeps fail with
/// `DeadlineExceeded`); a detached `spawn` does not.
#[test]
fn structured_children_inherit_the_deadline_scope_and_detached_do_not() {
    let rt = rt(2);
    rt.block_on(|| {
        let d = Instant::now() + Duration::from_millis(50);
        // Spawned inside the scope, joined outside it (a join inside would
        // end at the same deadline as the children's sleeps).
        let mut set = JoinSet::new();
        let mut scoped = None;
        let detached = spindle::with_deadline(d, || {
            set.spawn(move || (spindle::current_deadline(), spindle::sleep(LONG)));
            spindle::scope(|s| {
                s.spawn(|| scoped = Some((spindle::current_deadline(), spindle::sleep(LONG))));
            });
            spindle::spawn(spindle::current_deadline)
        });
        let (_, r) = set.join_next().unwrap().unwrap();
        assert_eq!(r.unwrap(), (Some(d), Err(SleepError::DeadlineExceeded)));
        assert_eq!(scoped, Some((Some(d), Err(SleepError::DeadlineExceeded))));
        assert_eq!(detached.join().unwrap(), None);
    });
}

/// Guards stop inheritance: stopping a task stops its set's tasks, its
/// scope's tasks and their children in turn, but not a task it spawned
/// detached.
#[test]
fn stopping_a_spawner_stops_its_children_and_grandchildren() {
    let rt = rt(2);
    let (tx, rx) = mpsc::channel::<(&'static str, Result<(), SleepError>)>();
    let started = Arc::new(AtomicUsize::new(0));
    let (tx2, started2) = (tx.clone(), started.clone());
    let parent = rt.spawn(move || {
        let mut set = JoinSet::new();
        let (t, s) = (tx2.clone(), started2.clone());
        set.spawn(move || {
            // A grandchild, through a set of the child's own.
            let mut inner = JoinSet::new();
            let (t2, s2) = (t.clone(), s.clone());
            inner.spawn(move || {
                s2.fetch_add(1, Ordering::SeqCst);
                t2.send(("grandchild", spindle::sleep(LONG))).unwrap();
            });
            s.fetch_add(1, Ordering::SeqCst);
            t.send(("child", spindle::sleep(LONG))).unwrap();
            while inner.join_next().is_ok_and(|r| r.is_some()) {}
        });
        let (t, s) = (tx2.clone(), started2.clone());
        let detached = spindle::spawn(move || {
            s.fetch_add(1, Ordering::SeqCst);
            t.send(("detached", spindle::sleep(Duration::from_millis(300))))
                .unwrap();
        });
        spindle::scope(|sc| {
            let (t, s) = (tx2.clone(), started2.clone());
            sc.spawn(move || {
                s.fetch_add(1, Ordering::SeqCst);
                t.send(("scoped", spindle::sleep(LONG))).unwrap();
            });
        });
        let joined = set.join_next().map(|_| ());
        drop(detached);
        joined
    });
    wait_for("every task to be asleep", || {
        started.load(Ordering::SeqCst) == 4
    });
    std::thread::sleep(Duration::from_millis(20));
    parent.stop().unwrap();
    let mut seen: Vec<_> = (0..4).map(|_| rx.recv().unwrap()).collect();
    seen.sort_by_key(|(who, _)| *who);
    assert_eq!(
        seen,
        vec![
            ("child", Err(SleepError::Stopped)),
            ("detached", Ok(())),
            ("grandchild", Err(SleepError::Stopped)),
            ("scoped", Err(SleepError::Stopped)),
        ]
    );
    // The parent itself ends: its scope's task was stopped, so the scope
    // ended; its join_next gets the child (if it has ended by then) or
    // fails at once, stopped.
    let r = parent.join().unwrap();
    assert!(matches!(r, Ok(()) | Err(WaitError::Stopped)), "{r:?}");
}

/// Guards the order of a stop: a task stopped while it waits in
/// `join_next` gets `Stopped`, not the result of a child that the same
/// stop ended (the children, stopped, end at once on either worker and
/// tell the set; the stop claims the parent's wait first). The stops come
/// from a task just woken by the timer, so that the other worker is often
/// awake to run a stopped child at once: a stop that stopped the children
/// before it claimed the parent's wait lost this race in about a third of
/// the rounds.
#[test]
fn a_stopped_join_next_fails_even_as_the_stopped_children_end() {
    let rt = rt(2);
    let rounds = common::scaled(300, 30);
    let outcomes = rt.block_on(move || {
        let handle = spindle::Handle::current();
        (0..rounds)
            .map(|_| {
                let request = spindle::spawn(|| {
                    let mut children = JoinSet::new();
                    for _ in 0..3 {
                        children.spawn(|| spindle::sleep(LONG));
                    }
                    children.join_next().map(|next| next.is_some())
                });
                // Stopped only once it waits: a stop before join_next
                // begins lets the stopped children end first, and a
                // join_next that finds a result ready returns it without
                // waiting.
                // And its children asleep, as a request's would be.
                loop {
                    let dump = handle.dump();
                    let joining = matches!(
                        dump.get(request.id()).map(|t| &t.state),
                        Some(TaskState::Waiting {
                            on: WaitKind::Join,
                            ..
                        })
                    );
                    let asleep = dump
                        .iter()
                        .filter(|t| matches!(t.state, TaskState::Sleeping { .. }))
                        .count();
                    if joining && asleep == 3 {
                        break;
                    }
                    spindle::yield_now();
                }
                // Woken by the timer just before the stop, as a request's
                // supervisor would be: the other worker is then often
                // awake too, looking for work.
                spindle::sleep(Duration::from_millis(1)).unwrap();
                request.stop().unwrap();
                request.join().unwrap()
            })
            .collect::<Vec<_>>()
    });
    let wrong: Vec<_> = outcomes
        .iter()
        .enumerate()
        .filter(|(_, r)| **r != Err(WaitError::Stopped))
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {rounds} stopped join_next calls did not fail with Stopped; the first: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
}

/// Guards the race of an adoption with a stop: a child spawned by a task
/// that is already stopped is born stopped.
#[test]
fn a_child_spawned_after_its_spawner_was_stopped_is_born_stopped() {
    let rt = rt(1);
    let h = rt.spawn(|| {
        while !spindle::is_stopped() {
            spindle::yield_now();
        }
        let mut set = JoinSet::new();
        set.spawn(|| (spindle::is_stopped(), spindle::sleep(LONG)));
        // (Not joined by hand: the stopped parent's join would fail at
        // once; the scope's end waits for its task whatever happens.)
        let mut scoped = false;
        spindle::scope(|s| {
            s.spawn(|| scoped = spindle::is_stopped());
        });
        let detached = spindle::spawn(spindle::is_stopped);
        // The stopped parent's own join_next fails at once: drain by polling.
        let from_set = loop {
            if let Some((_, r)) = set.try_join_next() {
                break r.unwrap();
            }
            spindle::yield_now();
        };
        let detached = loop {
            if detached.is_finished() {
                break detached.join();
            }
            spindle::yield_now();
        };
        (from_set, scoped, detached.unwrap())
    });
    std::thread::sleep(Duration::from_millis(10));
    h.stop().unwrap();
    assert_eq!(
        h.join().unwrap(),
        ((true, Err(SleepError::Stopped)), true, false)
    );
}

/// Guards "stop ends a join": a task joining a long task is stopped; its
/// join returns `JoinError::Stopped` (the joined task runs on).
#[test]
fn stop_ends_a_join() {
    let rt = rt(1);
    let (tx, rx) = mpsc::channel::<()>();
    let long = rt.spawn(move || {
        let _ = rx.recv();
    });
    let joiner = rt.spawn(move || long.join());
    std::thread::sleep(Duration::from_millis(20));
    assert!(!joiner.is_finished());
    joiner.stop().unwrap();
    assert!(matches!(joiner.join().unwrap(), Err(JoinError::Stopped)));
    drop(tx);
}

/// Guards "an interrupt does not end a join": it stays pending, and ends
/// the joiner's next interruptible wait instead.
#[test]
fn an_interrupt_leaves_a_join_and_ends_the_next_sleep() {
    let rt = rt(1);
    let (tx, rx) = mpsc::channel::<()>();
    let long = rt.spawn(move || rx.recv().unwrap());
    let joiner = rt.spawn(move || (long.join().is_ok(), spindle::sleep(LONG)));
    std::thread::sleep(Duration::from_millis(20));
    joiner.interrupt().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert!(!joiner.is_finished());
    tx.send(()).unwrap();
    assert_eq!(joiner.join().unwrap(), (true, Err(SleepError::Interrupted)));
}

/// Stress: tasks on both workers end while the set's owner waits, looks
/// and waits again; every result comes back exactly once.
#[test]
fn every_task_of_a_busy_set_is_joined_once() {
    let rt = rt(2);
    let seen = rt.block_on(|| {
        let mut set = JoinSet::new();
        let mut seen = vec![false; 4000];
        for round in 0..4u64 {
            for i in 0..1000u64 {
                let n = round * 1000 + i;
                set.spawn(move || {
                    if n % 3 == 0 {
                        spindle::yield_now();
                    }
                    n
                });
            }
            // Join half now, the rest with the next rounds.
            for _ in 0..500 {
                let (_, r) = set.join_next().unwrap().unwrap();
                let n = r.unwrap() as usize;
                assert!(!seen[n], "task {n} joined twice");
                seen[n] = true;
            }
        }
        while let Some((_, r)) = set.join_next().unwrap() {
            let n = r.unwrap() as usize;
            assert!(!seen[n], "task {n} joined twice");
            seen[n] = true;
        }
        seen
    });
    assert!(seen.iter().all(|&s| s));
}
