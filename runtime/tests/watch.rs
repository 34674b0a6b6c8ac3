//! `sync::watch`: one value, many receivers that wait for it to change,
//! for tasks and plain threads alike; `changed()` ends with a send, the
//! sender's drop, a deadline, an interrupt or a stop, and loses no change.

mod common;

use common::{rt, wait_for};
use spindle::sync::mpsc::{RecvError, RecvTimeoutError};
use spindle::sync::watch;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Long enough that a wait this long means a bug, not a slow machine.
const LONG: Duration = Duration::from_secs(30);

/// How long a wait that must not end is given to end anyway.
const A_WHILE: Duration = Duration::from_millis(30);

#[test]
fn basics() {
    let (tx, mut rx) = watch::channel(1u32);
    assert_eq!(*rx.borrow(), 1);
    assert!(
        !rx.borrow().has_changed(),
        "the initial value counts as seen"
    );
    assert_eq!(rx.has_changed(), Ok(false));
    assert_eq!(tx.receiver_count(), 1);

    tx.send(2).unwrap();
    assert_eq!(*tx.borrow(), 2);
    assert!(!tx.borrow().has_changed());
    assert_eq!(rx.has_changed(), Ok(true));
    let r = rx.borrow();
    assert!(r.has_changed());
    assert_eq!((*r, format!("{r:?}")), (2, "2".to_string()));
    drop(r);
    assert_eq!(rx.has_changed(), Ok(true), "borrow() marks nothing seen");
    let r = rx.borrow_and_update();
    assert!(r.has_changed());
    assert_eq!(*r, 2);
    drop(r);
    assert_eq!(rx.has_changed(), Ok(false));
    assert!(!rx.borrow_and_update().has_changed());

    // A clone has seen what its original has; a subscriber, the current value.
    tx.send(3).unwrap();
    let clone = rx.clone();
    let sub = tx.subscribe();
    assert_eq!(tx.receiver_count(), 3);
    assert!(clone.same_channel(&rx) && sub.same_channel(&rx));
    assert_eq!(clone.has_changed(), Ok(true));
    assert_eq!(sub.has_changed(), Ok(false));
    assert_eq!(*sub.borrow(), 3);
    drop((clone, sub));
    assert_eq!(tx.receiver_count(), 1);
    assert!(format!("{rx:?}").contains("value: 3"), "{rx:?}");
    assert!(format!("{tx:?}").contains("receivers: 1"), "{tx:?}");

    // A change sent before the sender went is still seen; then the
    // channel is over.
    assert!(!rx.is_closed());
    drop(tx);
    assert!(rx.is_closed());
    assert_eq!(rx.has_changed(), Ok(true));
    assert_eq!(rx.changed(), Ok(()));
    assert_eq!(*rx.borrow(), 3, "the last value stays to borrow");
    assert_eq!(rx.has_changed(), Err(RecvError::Disconnected));
    assert_eq!(rx.changed(), Err(RecvError::Disconnected));
}

/// A send fails, handing its value back and changing nothing, once every
/// receiver has gone; a new subscriber opens the channel again.
#[test]
fn a_send_fails_when_every_receiver_has_gone() {
    let (tx, rx) = watch::channel(String::from("a"));
    let rx2 = rx.clone();
    drop(rx);
    tx.send("b".into()).unwrap();
    drop(rx2);
    assert!(tx.is_closed());
    assert_eq!(tx.receiver_count(), 0);
    let e = tx.send("c".into()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "sending on a closed watch channel: every receiver has gone"
    );
    assert_eq!(e.into_inner(), "c");
    assert_eq!(*tx.borrow(), "b", "a failed send changes nothing");
    let rx = tx.subscribe();
    tx.send("d".into()).unwrap();
    assert_eq!(*rx.borrow(), "d");
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(watch::SendError(1u8));
    assert!(boxed.to_string().contains("closed watch channel"));
}

/// `changed()` waits, for a task and for a plain thread, until a send:
/// not before it.
#[test]
fn changed_returns_only_after_a_send() {
    let rt = rt(2);
    let (tx, rx) = watch::channel(0u32);
    let returned = Arc::new(AtomicUsize::new(0));
    let waiter = |mut rx: watch::Receiver<u32>, returned: Arc<AtomicUsize>| {
        move || {
            // Bounded, so that a lost wake-up fails the test.
            let r = spindle::with_deadline(Instant::now() + LONG, || rx.changed());
            returned.fetch_add(1, Ordering::SeqCst);
            r.map(|()| *rx.borrow_and_update())
        }
    };
    let task = rt.spawn(waiter(rx.clone(), returned.clone()));
    let thread = std::thread::spawn(waiter(rx, returned.clone()));
    std::thread::sleep(A_WHILE);
    assert_eq!(
        returned.load(Ordering::SeqCst),
        0,
        "changed() without a send"
    );
    assert!(!task.is_finished());
    tx.send(9).unwrap();
    assert_eq!(task.join().unwrap(), Ok(9));
    assert_eq!(thread.join().unwrap(), Ok(9));
}

/// A send that came before `changed()` is seen at once (it does not wait
/// for another), and sends since the last look are one change, of the
/// newest value.
#[test]
fn a_send_before_the_wait_is_seen() {
    let rt = rt(2);
    let (tx, mut rx) = watch::channel(0u32);
    tx.send(1).unwrap();
    assert_eq!(rx.changed_deadline(Instant::now() + LONG), Ok(()));
    tx.send(2).unwrap();
    tx.send(3).unwrap();
    let (r, mut rx) = rt
        .spawn(move || {
            let r = spindle::with_deadline(Instant::now() + LONG, || rx.changed());
            (r.map(|()| *rx.borrow()), rx)
        })
        .join()
        .unwrap();
    assert_eq!(r, Ok(3));
    assert_eq!(
        rx.changed_timeout(Duration::from_millis(10)),
        Err(RecvTimeoutError::Timeout),
        "two sends are one change"
    );
}

/// Senders and receivers racing, tasks and threads on either side: every
/// receiver sees the last value, and none is left waiting (a lost change
/// would leave one asleep).
#[test]
fn racing_sends_lose_no_change() {
    let rt = rt(2);
    const LAST: u64 = 300;
    for round in 0..20u64 {
        let (tx, rx) = watch::channel(0u64);
        let follower = |mut rx: watch::Receiver<u64>| {
            move || {
                let mut seen = 0;
                while seen < LAST {
                    spindle::with_deadline(Instant::now() + LONG, || rx.changed()).unwrap();
                    let v = *rx.borrow_and_update();
                    assert!(v >= seen, "went back from {seen} to {v}");
                    seen = v;
                }
                seen
            }
        };
        let tasks: Vec<_> = (0..8).map(|_| rt.spawn(follower(rx.clone()))).collect();
        let threads: Vec<_> = (0..2)
            .map(|_| std::thread::spawn(follower(rx.clone())))
            .collect();
        drop(rx);
        let send = move || {
            for v in 1..=LAST {
                tx.send(v).unwrap();
                if v % 16 == 0 {
                    spindle::yield_now();
                }
            }
        };
        if round % 2 == 0 {
            rt.spawn(send).join().unwrap();
        } else {
            std::thread::spawn(send).join().unwrap();
        }
        for h in tasks {
            assert_eq!(h.join().unwrap(), LAST);
        }
        for h in threads {
            assert_eq!(h.join().unwrap(), LAST);
        }
    }
}

/// The sender's drop wakes every waiting receiver, task or thread, with
/// `Disconnected`.
#[test]
fn the_senders_drop_ends_every_wait_with_disconnected() {
    let rt = rt(2);
    let (tx, rx) = watch::channel(());
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let mut rx = rx.clone();
            rt.spawn(move || spindle::with_deadline(Instant::now() + LONG, || rx.changed()))
        })
        .collect();
    let thread = {
        let mut rx = rx.clone();
        std::thread::spawn(move || spindle::with_deadline(Instant::now() + LONG, || rx.changed()))
    };
    std::thread::sleep(A_WHILE);
    assert!(tasks.iter().all(|h| !h.is_finished()));
    drop(tx);
    for h in tasks {
        assert_eq!(h.join().unwrap(), Err(RecvError::Disconnected));
    }
    assert_eq!(thread.join().unwrap(), Err(RecvError::Disconnected));
    assert_eq!(rx.has_changed(), Err(RecvError::Disconnected));
}

/// A deadline scope ends `changed()` with `DeadlineExceeded`, its own
/// deadline with `Timeout`, on a task and on a plain thread, not before
/// they pass; the receiver is as it was, and sees the next send.
#[test]
fn deadlines_end_changed() {
    let rt = rt(2);
    let (tx, rx) = watch::channel(0u32);
    let rx = rt.spawn(move || wait_out_deadlines(rx)).join().unwrap();
    let mut rx = std::thread::spawn(move || wait_out_deadlines(rx))
        .join()
        .unwrap();
    tx.send(4).unwrap();
    assert_eq!(rx.changed_deadline(Instant::now() + LONG), Ok(()));
    assert_eq!(*rx.borrow(), 4);
}

/// `deadlines_end_changed`'s waits: a scope's deadline, then its own.
fn wait_out_deadlines(mut rx: watch::Receiver<u32>) -> watch::Receiver<u32> {
    let t0 = Instant::now();
    let r = spindle::with_deadline(t0 + Duration::from_millis(20), || rx.changed());
    assert_eq!(r, Err(RecvError::DeadlineExceeded));
    assert!(r.unwrap_err().is_deadline_exceeded());
    assert!(t0.elapsed() >= Duration::from_millis(19));
    let t0 = Instant::now();
    let r = rx.changed_deadline(t0 + Duration::from_millis(20));
    assert_eq!(r, Err(RecvTimeoutError::Timeout));
    assert!(t0.elapsed() >= Duration::from_millis(19));
    rx
}

/// `interrupt` ends a task's `changed()` with `Interrupted`, `stop` with
/// `Stopped`; a change sent afterwards is still seen, even by the stopped
/// task (a change already there needs no wait).
#[test]
fn interrupt_and_stop_end_changed() {
    let rt = rt(2);
    let (tx, rx) = watch::channel(0u32);
    let waiting = Arc::new(AtomicBool::new(false));
    let h = {
        let (waiting, mut rx) = (waiting.clone(), rx.clone());
        rt.spawn(move || {
            waiting.store(true, Ordering::SeqCst);
            (rx.changed(), rx)
        })
    };
    wait_for("the receiver to start", || waiting.load(Ordering::SeqCst));
    std::thread::sleep(Duration::from_millis(10));
    h.interrupt().unwrap();
    let (r, mut interrupted) = h.join().unwrap();
    assert_eq!(r, Err(RecvError::Interrupted));

    let seen = Arc::new(AtomicBool::new(false));
    let h = {
        let (seen, mut rx) = (seen.clone(), rx);
        rt.spawn(move || {
            let first = rx.changed();
            let second = rx.changed_deadline(Instant::now() + LONG);
            seen.store(true, Ordering::SeqCst);
            // Wait for the send below: a change already there is no wait.
            while rx.has_changed() == Ok(false) {
                spindle::yield_now();
            }
            (first, second, rx.changed().map(|()| *rx.borrow()))
        })
    };
    std::thread::sleep(Duration::from_millis(10));
    h.stop().unwrap();
    wait_for("the stopped receiver", || seen.load(Ordering::SeqCst));
    tx.send(6).unwrap();
    assert_eq!(
        h.join().unwrap(),
        (
            Err(RecvError::Stopped),
            Err(RecvTimeoutError::Stopped),
            Ok(6)
        )
    );
    assert_eq!(interrupted.changed_deadline(Instant::now() + LONG), Ok(()));
    assert_eq!(*interrupted.borrow(), 6);
}

/// A receiver that holds a `Ref` across a sleep and then across
/// `changed()` (a `Ref` of a clone: the borrow checker keeps a receiver's
/// own `Ref` out of its `changed()`), on the one worker its sender
/// shares, while the sender sends: the send does not wait for the `Ref`
/// (a snapshot, not a lock), so both tasks complete. Were the value
/// locked by the `Ref`, a `std` lock would block the worker for good,
/// and a task-aware one would leave the sender waiting for a receiver
/// that waits for it.
#[test]
fn a_ref_held_across_waits_on_one_worker_blocks_no_send() {
    let rt = rt(1);
    let (tx, mut rx) = watch::channel(0u32);
    let borrowed = Arc::new(common::Gate::new());
    let receiver = {
        let borrowed = borrowed.clone();
        rt.spawn(move || {
            let other = rx.clone();
            let held = other.borrow();
            borrowed.open();
            spindle::sleep(Duration::from_millis(20)).unwrap();
            let r = spindle::with_deadline(Instant::now() + LONG, || rx.changed());
            assert_eq!(*held, 0, "a Ref keeps the value it was made from");
            (r, *rx.borrow())
        })
    };
    let sender = rt.spawn(move || {
        borrowed.pass();
        tx.send(1).unwrap();
        tx
    });
    assert_eq!(receiver.join().unwrap(), (Ok(()), 1));
    drop(sender.join().unwrap());
}

/// Every value is dropped once: replaced ones as soon as no `Ref` holds
/// them, the last with the channel.
#[test]
fn values_are_dropped_exactly_once() {
    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let drops = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = watch::channel(Counted(drops.clone()));
    let held = rx.borrow();
    tx.send(Counted(drops.clone())).unwrap();
    assert_eq!(drops.load(Ordering::SeqCst), 0, "a Ref holds the first");
    drop(held);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    tx.send(Counted(drops.clone())).unwrap();
    assert_eq!(drops.load(Ordering::SeqCst), 2);
    drop(rx);
    let back = tx.send(Counted(drops.clone())).unwrap_err();
    drop(back);
    assert_eq!(drops.load(Ordering::SeqCst), 3);
    drop(tx);
    assert_eq!(drops.load(Ordering::SeqCst), 4);
}
