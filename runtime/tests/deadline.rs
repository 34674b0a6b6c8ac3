//! Deadline scopes: one deadline around a whole call.

mod common;

use common::rt;
use spindle::sync::{Condvar, CountdownEvent, Mutex};
use spindle::{Butex, JoinError, Runtime, SleepError, WaitError};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn soon(ms: u64) -> Instant {
    Instant::now() + Duration::from_millis(ms)
}

/// A mutex that a task of `rt` holds for 300 ms from when this returns;
/// the task's handle.
fn mutex_held_by_a_task(rt: &Runtime) -> (Arc<Mutex<()>>, spindle::JoinHandle<()>) {
    let m = Arc::new(Mutex::new(()));
    let (m2, gate) = (m.clone(), Arc::new(CountdownEvent::new(1)));
    let g2 = gate.clone();
    let holder = rt.spawn(move || {
        let _g = m2.lock().unwrap();
        g2.signal(1);
        spindle::sleep(Duration::from_millis(300)).unwrap();
    });
    gate.wait().unwrap();
    (m, holder)
}

#[test]
fn every_blocking_call_inside_a_scope_fails_after_its_deadline() {
    let rt = rt(2);
    rt.block_on(|| {
        spindle::with_deadline(soon(20), || {
            assert_eq!(
                spindle::sleep(Duration::from_secs(10)),
                Err(SleepError::DeadlineExceeded)
            );
            // The deadline has passed: everything else fails at once.
            let b = Butex::new(0);
            assert_eq!(b.wait(0, None), Err(WaitError::DeadlineExceeded));
            let ev = CountdownEvent::new(1);
            assert_eq!(ev.wait(), Err(WaitError::DeadlineExceeded));
        });
        // Outside the scope, waits are unbounded again.
        spindle::sleep(Duration::from_millis(1)).unwrap();
    });
}

#[test]
fn a_call_that_began_before_the_deadline_is_cut_short() {
    let rt = rt(2);
    rt.block_on(|| {
        let (m, holder) = mutex_held_by_a_task(&rt);
        let t = Instant::now();
        let r = spindle::with_deadline(soon(20), || m.lock().map(|_| ()));
        assert_eq!(r, Err(WaitError::DeadlineExceeded));
        assert!(t.elapsed() < Duration::from_millis(250));
        let slow = spindle::spawn(|| spindle::sleep(Duration::from_millis(300)));
        let r = spindle::with_deadline(soon(10), || slow.join());
        assert!(matches!(r, Err(JoinError::DeadlineExceeded)));
        let cv = Condvar::new();
        let m3 = Mutex::new(());
        let r = spindle::with_deadline(soon(10), || cv.wait(m3.lock().unwrap()).map(|_| ()));
        assert_eq!(r, Err(WaitError::DeadlineExceeded));
        let ev = CountdownEvent::new(1);
        let r = spindle::with_deadline(soon(10), || ev.wait());
        assert_eq!(r, Err(WaitError::DeadlineExceeded));
        holder.join().unwrap();
    });
}

#[test]
fn scopes_nest_and_the_earliest_wins() {
    let rt = rt(1);
    rt.block_on(|| {
        let t = Instant::now();
        let r = spindle::with_deadline(soon(2_000), || {
            spindle::with_deadline(soon(20), || spindle::sleep(Duration::from_secs(10)))
        });
        assert_eq!(r, Err(SleepError::DeadlineExceeded));
        assert!(t.elapsed() < Duration::from_millis(1_500));
        // An inner, later deadline does not extend the outer one.
        let t = Instant::now();
        let r = spindle::with_deadline(soon(20), || {
            spindle::with_deadline(soon(5_000), || spindle::sleep(Duration::from_secs(10)))
        });
        assert_eq!(r, Err(SleepError::DeadlineExceeded));
        assert!(
            t.elapsed() < Duration::from_millis(2_500),
            "the inner deadline won"
        );
        // A wait's own earlier deadline is a plain timeout.
        let b = Butex::new(0);
        let r = spindle::with_deadline(soon(5_000), || b.wait(0, Some(soon(5))));
        assert_eq!(r, Err(WaitError::TimedOut));
    });
}

/// `current_deadline` is the earliest of the enclosing scopes, `None`
/// outside them and after them, in a task and on a plain thread; a task
/// spawned inside a scope does not inherit it.
#[test]
fn current_deadline_is_the_innermost_scopes() {
    let check = || {
        assert_eq!(spindle::current_deadline(), None);
        let (outer, inner) = (soon(5_000), soon(1_000));
        spindle::with_deadline(outer, || {
            assert_eq!(spindle::current_deadline(), Some(outer));
            spindle::with_deadline(inner, || {
                assert_eq!(spindle::current_deadline(), Some(inner));
            });
            // A later inner deadline does not extend the outer one.
            spindle::with_deadline(soon(60_000), || {
                assert_eq!(spindle::current_deadline(), Some(outer));
            });
            let child = spindle::spawn(spindle::current_deadline);
            assert_eq!(
                child.join().unwrap(),
                None,
                "a spawned task has its own scope"
            );
        });
        assert_eq!(spindle::current_deadline(), None);
    };
    let rt = rt(2);
    rt.spawn(check).join().unwrap();
    check(); // a plain thread (its spawn goes to the global runtime)
}

#[test]
fn scopes_work_on_plain_threads_too() {
    let b = Butex::new(0);
    let r = spindle::with_deadline(soon(10), || b.wait(0, None));
    assert_eq!(r, Err(WaitError::DeadlineExceeded));
    let r = spindle::with_deadline(soon(10), || spindle::sleep(Duration::from_secs(10)));
    assert_eq!(r, Err(SleepError::DeadlineExceeded));
    assert_eq!(b.wait(1, None), Err(WaitError::WouldBlock));
    // A mutex held by a task, and a task's join.
    let rt = rt(1);
    let (m, holder) = mutex_held_by_a_task(&rt);
    let t = Instant::now();
    let r = spindle::with_deadline(soon(10), || m.lock().map(|_| ()));
    assert_eq!(r, Err(WaitError::DeadlineExceeded));
    let r = spindle::with_deadline(soon(10), || holder.join());
    assert!(matches!(r, Err(JoinError::DeadlineExceeded)));
    assert!(t.elapsed() < Duration::from_millis(250));
    // The holder, detached by the failed join, ends before the runtime.
    drop(m.lock().unwrap());
}

#[test]
fn a_scope_ends_with_its_closure_even_on_panic() {
    let rt = rt(1);
    rt.block_on(|| {
        let r = std::panic::catch_unwind(|| {
            spindle::with_deadline(Instant::now(), || panic!("inside"));
        });
        assert!(r.is_err());
        spindle::sleep(Duration::from_millis(1)).unwrap();
    });
}

#[test]
fn block_on_carries_the_callers_scope_into_its_task() {
    let rt = rt(1);
    let t = Instant::now();
    let r = spindle::with_deadline(soon(20), || {
        rt.block_on(|| {
            let first = spindle::sleep(Duration::from_secs(10));
            // block_on returns only when the task ends, deadline or not.
            (first, spindle::sleep(Duration::from_millis(30)))
        })
    });
    assert_eq!(
        r,
        (
            Err(SleepError::DeadlineExceeded),
            Err(SleepError::DeadlineExceeded)
        )
    );
    assert!(t.elapsed() < Duration::from_secs(5));
}

/// Once a scope's deadline has passed, a sleep to an even earlier instant
/// fails with `DeadlineExceeded` on a plain thread as in a task. (Guards
/// against the plain thread's sleep returning `Ok`.)
#[test]
fn a_past_sleep_in_an_expired_scope_fails_on_a_thread_as_in_a_task() {
    let past_sleep_in_expired_scope = || {
        let now = Instant::now();
        let scope = now - Duration::from_millis(1);
        let sleep = now - Duration::from_millis(2);
        spindle::with_deadline(scope, || spindle::sleep_until(sleep))
    };
    assert_eq!(
        past_sleep_in_expired_scope(),
        Err(SleepError::DeadlineExceeded),
        "on a plain thread"
    );
    let rt = rt(1);
    assert_eq!(
        rt.block_on(past_sleep_in_expired_scope),
        Err(SleepError::DeadlineExceeded),
        "in a task"
    );
}
