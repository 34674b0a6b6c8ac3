//! Loom models of `Semaphore`, driving the real semaphore with loom
//! threads as waiters: releases race acquirers that are about to wait
//! (the store-buffering handshake on the waiter count), and wake-ups are
//! passed on from waiter to waiter.

use super::Semaphore;
use loom::sync::Arc;
use loom::thread;

fn loom_model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

fn acquirer(sem: &Arc<Semaphore>, n: usize) -> thread::JoinHandle<()> {
    let sem = sem.clone();
    thread::spawn(move || sem.acquire_many(n).unwrap().forget())
}

/// Two acquirers, then two permits added at once: one release wakes one
/// waiter, which takes its permit and wakes the next for the other.
#[test]
fn loom_semaphore_a_release_reaches_every_parked_acquirer() {
    loom_model(|| {
        let sem = Arc::new(Semaphore::new(0));
        let (a, b) = (acquirer(&sem, 1), acquirer(&sem, 1));
        sem.add_permits(2);
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(sem.available_permits(), 0);
    });
}

/// A waiter that wants 2 and one that wants 1; one permit comes: the
/// small waiter gets it, even if the release woke the big one first (it
/// passes the wake-up on). Then two more come, for the big one.
#[test]
fn loom_semaphore_a_wake_up_that_cannot_be_used_is_passed_on() {
    loom_model(|| {
        let sem = Arc::new(Semaphore::new(0));
        let big = acquirer(&sem, 2);
        let small = acquirer(&sem, 1);
        sem.add_permits(1);
        small.join().unwrap();
        sem.add_permits(2);
        big.join().unwrap();
        assert_eq!(sem.available_permits(), 0);
    });
}
