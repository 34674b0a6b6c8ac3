//! Loom models of the watch channel: the real send, `changed`, borrows and
//! drops, with loom threads as the waiters (they park in the real butex
//! wait, as plain threads do). A deadline is one that has already passed,
//! as in `loom_mpsc`: the wait gives up at whatever point the race has
//! reached.

use super::{channel, Receiver};
use crate::sync::mpsc::{RecvError, RecvTimeoutError};
use loom::thread;
use std::time::Instant;

fn loom_model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// A send racing a receiver's `changed()` (before its look at the
/// version, between that look and its wait, or while it waits): the
/// change is never lost (loom reports a receiver asleep for good), and
/// the value borrowed after it is the one sent. The sender's drop then
/// ends the next `changed()` with `Disconnected`.
#[test]
fn loom_watch_send_racing_changed_never_loses_the_change() {
    loom_model(|| {
        let (tx, mut rx) = channel(0u32);
        let t = thread::spawn(move || {
            tx.send(1).unwrap();
            drop(tx);
        });
        assert_eq!(rx.changed(), Ok(()));
        assert_eq!(*rx.borrow(), 1);
        assert!(!rx.borrow().has_changed(), "changed() marked it seen");
        assert_eq!(rx.changed(), Err(RecvError::Disconnected));
        t.join().unwrap();
    });
}

/// One send wakes every receiver that waits for it: two receivers, on
/// two threads, both see the change. (They only wait, and the main
/// thread only sends: loom 0.7 aborts a model when a wake-up's unpark,
/// which the butex delivers after the waiter may already have seen its
/// outcome and gone on, lands on a thread blocked in `join` or on a
/// mutex, loom issue #249; on std that unpark is harmless.)
#[test]
fn loom_watch_one_send_wakes_every_receiver() {
    loom_model(|| {
        let (tx, rx) = channel(0u32);
        let waiter = |mut rx: Receiver<u32>| thread::spawn(move || (rx.changed(), rx));
        let (a, b) = (waiter(rx.clone()), waiter(rx));
        tx.send(7).unwrap();
        for h in [a, b] {
            let (r, rx) = h.join().unwrap();
            assert_eq!(r, Ok(()));
            assert_eq!(*rx.borrow(), 7);
            assert!(!rx.borrow().has_changed());
        }
    });
}

/// A `changed_deadline` whose deadline passes races a send: the change
/// is seen by it, or stays for the next `changed()`, which returns for
/// it.
#[test]
fn loom_watch_deadline_racing_send_loses_nothing() {
    loom_model(|| {
        let (tx, mut rx) = channel(0u32);
        let t = thread::spawn(move || tx.send(3).unwrap());
        match rx.changed_deadline(Instant::now()) {
            Ok(()) => {}
            Err(e) => {
                assert_eq!(e, RecvTimeoutError::Timeout);
                assert_eq!(rx.changed(), Ok(()));
            }
        }
        assert_eq!(*rx.borrow(), 3);
        t.join().unwrap();
    });
}
