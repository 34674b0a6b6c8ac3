//! Loom models of `Mutex`, driving the real lock with loom threads as
//! waiters (plain threads: their waits park on the same butex protocol as
//! tasks'). The guarded value lives in the loom shim's cell, so each model
//! also checks that the lock orders every access to it: a guard's access
//! that raced another's would be a data race loom reports. A deadline
//! already past when a wait would block stands in for a timeout.

use super::Mutex;
use crate::error::WaitError;
use loom::sync::Arc;
use loom::thread;
use std::time::Instant;

fn loom_model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// Two holders in turn, one of which may wait for the other: each sees
/// the other's write (the unlock's release, the lock's acquire), nobody
/// sleeps for good, and the count is whole.
#[test]
fn loom_mutex_orders_the_data_it_guards() {
    loom_model(|| {
        let m = Arc::new(Mutex::new(0u32));
        let other = {
            let m = m.clone();
            thread::spawn(move || {
                let mut g = m.lock().unwrap();
                *g += 1;
                *g
            })
        };
        let mine = {
            let mut g = m.lock().unwrap();
            *g += 1;
            *g
        };
        let theirs = other.join().unwrap();
        assert!(matches!((mine, theirs), (1, 2) | (2, 1)));
        assert_eq!(*m.try_lock().expect("the lock is free"), 2);
    });
}

/// A waiter that gives up while another holds the lock takes nothing: the
/// holder's write is what the next holder sees, and the lock is free.
#[test]
fn loom_mutex_a_waiter_that_times_out_leaves_no_trace() {
    loom_model(|| {
        let m = Arc::new(Mutex::new(0u32));
        let held = m.lock().unwrap();
        let waiter = {
            let m = m.clone();
            thread::spawn(move || m.lock_until(Some(Instant::now())).map(|g| *g))
        };
        let r = waiter.join().unwrap();
        assert_eq!(r, Err(WaitError::TimedOut));
        drop(held);
        *m.lock().unwrap() = 7;
        let reader = {
            let m = m.clone();
            thread::spawn(move || *m.lock().unwrap())
        };
        assert_eq!(reader.join().unwrap(), 7);
        assert!(m.try_lock().is_some(), "no mark left behind");
    });
}
