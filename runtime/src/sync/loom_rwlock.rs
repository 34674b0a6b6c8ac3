//! Loom models of `RwLock`, driving the real lock with loom threads as
//! waiters (plain threads: their waits park on the same butex protocol as
//! tasks'). A deadline already past when a wait would block stands in for a
//! timeout: `wait` then fails with `TimedOut` without linking, which is
//! what a timer firing first looks like to the lock.

use super::RwLock;
use crate::error::WaitError;
use loom::sync::Arc;
use loom::thread;
use std::time::Instant;

fn loom_model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// A writer waits for a reader to leave while a second reader comes (and
/// waits behind the writer's claim, or gets in first): the last reader's
/// unlock wakes the writer, the writer's unlock wakes the reader, and
/// nobody sleeps for good (loom reports a deadlock if one does).
#[test]
fn loom_rwlock_reader_and_writer_wake_each_other() {
    loom_model(|| {
        let lock = Arc::new(RwLock::new(0u32));
        let held = lock.read().unwrap();
        let writer = {
            let lock = lock.clone();
            thread::spawn(move || *lock.write().unwrap() += 1)
        };
        let reader = {
            let lock = lock.clone();
            thread::spawn(move || *lock.read().unwrap())
        };
        drop(held);
        writer.join().unwrap();
        let seen = reader.join().unwrap();
        assert!(seen <= 1);
        assert_eq!(*lock.try_read().expect("the lock is free"), 1);
        assert!(lock.try_write().is_some(), "no mark left behind");
    });
}

/// brpc PR #3286: a writer that gives up while a reader holds the lock
/// withdraws its claim and wakes the reader it held back; afterwards
/// readers and writers get the lock as if it had never come.
#[test]
fn loom_rwlock_a_writer_that_times_out_leaves_no_trace() {
    loom_model(|| {
        let lock = Arc::new(RwLock::new(0u32));
        let held = lock.read().unwrap();
        let writer = {
            let lock = lock.clone();
            thread::spawn(move || lock.write_until(Some(Instant::now())).map(|_| ()))
        };
        let reader = {
            let lock = lock.clone();
            // Held back by the claim, or in first: never for good.
            thread::spawn(move || lock.read().map(|g| *g))
        };
        assert_eq!(writer.join().unwrap(), Err(WaitError::TimedOut));
        assert_eq!(reader.join().unwrap(), Ok(0));
        assert!(lock.try_read().is_some(), "readers get in at once");
        drop(held);
        assert!(lock.try_write().is_some(), "and so does a writer");
    });
}
