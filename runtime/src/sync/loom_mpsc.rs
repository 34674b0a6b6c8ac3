//! Loom models of the channel handshakes: the real `send`, `recv`,
//! `recv_deadline`, `send_deadline` and drops, with loom threads as the
//! waiters (they park in the real butex wait as plain threads do), over
//! the model queue (see the module docs). A deadline is modelled by one
//! that has already passed: the wait gives up at once, at whatever point
//! of the handshake the race has reached (the butex models check that a
//! wait timed out after it linked consumed no wake-up, so from the
//! channel's side it is the same).

use super::{
    channel, sync_channel, sync_channel_counted, Receiver, RecvError, RecvTimeoutError,
    SendErrorKind, SyncSender, TryRecvError,
};
use loom::thread;
use std::time::Instant;

fn loom_model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// A send (and then the last sender's drop) against a receiver parking:
/// the receiver is woken for the message, then for the disconnection.
#[test]
fn loom_unbounded_send_wakes_parked_receiver() {
    loom_model(|| {
        let (tx, rx) = channel::<u32>();
        let t = thread::spawn(move || {
            tx.send(1).unwrap();
            drop(tx);
        });
        assert_eq!(rx.recv(), Ok(1));
        assert_eq!(rx.recv(), Err(RecvError::Disconnected));
        t.join().unwrap();
    });
}

/// A sender parks on a full bounded channel; the receiver's pop wakes it.
#[test]
fn loom_bounded_full_sender_is_woken() {
    loom_model(|| bounded_full_sender_is_woken(sync_channel::<u32>(1)));
}

/// The same over a counted queue (a large bound's): the receiver lowers
/// the count before its fence, the sender reads it after its own.
#[test]
fn loom_counted_full_sender_is_woken() {
    loom_model(|| bounded_full_sender_is_woken(sync_channel_counted::<u32>(1)));
}

fn bounded_full_sender_is_woken((tx, rx): (SyncSender<u32>, Receiver<u32>)) {
    let t = thread::spawn(move || {
        tx.send(1).unwrap();
        tx.send(2).unwrap();
    });
    assert_eq!(rx.recv(), Ok(1));
    assert_eq!(rx.recv(), Ok(2));
    t.join().unwrap();
}

/// A receive whose deadline passes races a send: the message is received
/// by it or stays queued for the next receive, which is woken for it.
#[test]
fn loom_recv_deadline_racing_send_loses_nothing() {
    loom_model(|| {
        let (tx, rx) = channel::<u32>();
        let t = thread::spawn(move || tx.send(1).unwrap());
        match rx.recv_deadline(Instant::now()) {
            Ok(v) => assert_eq!(v, 1),
            Err(e) => {
                assert_eq!(e, RecvTimeoutError::Timeout);
                assert_eq!(rx.recv(), Ok(1));
            }
        }
        t.join().unwrap();
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    });
}

/// On a full channel, a send whose deadline passes races the receive that
/// makes room, beside a second sender that waits: the timed-out value
/// comes back unsent, and the waiting sender is not left asleep (the
/// wake-up the pop made is not lost to the sender that gave up).
#[test]
fn loom_send_deadline_racing_recv_loses_no_wakeup() {
    loom_model(|| send_deadline_racing_recv_loses_no_wakeup(sync_channel::<u32>(1)));
}

/// The same over a counted queue.
#[test]
fn loom_counted_send_deadline_racing_recv_loses_no_wakeup() {
    loom_model(|| send_deadline_racing_recv_loses_no_wakeup(sync_channel_counted::<u32>(1)));
}

fn send_deadline_racing_recv_loses_no_wakeup((tx, rx): (SyncSender<u32>, Receiver<u32>)) {
    tx.send(0).unwrap();
    let tx2 = tx.clone();
    let timed = thread::spawn(move || match tx.send_deadline(1, Instant::now()) {
        Ok(()) => true,
        Err(e) => {
            assert_eq!((e.kind(), e.into_inner()), (SendErrorKind::Timeout, 1));
            false
        }
    });
    let waiting = thread::spawn(move || tx2.send(2).unwrap());
    assert_eq!(rx.recv(), Ok(0));
    let sent = timed.join().unwrap();
    let mut got: Vec<u32> = vec![rx.recv().unwrap()];
    if sent {
        got.push(rx.recv().unwrap());
    }
    got.sort_unstable();
    assert_eq!(got, if sent { vec![1, 2] } else { vec![2] });
    waiting.join().unwrap();
    assert_eq!(rx.recv(), Err(RecvError::Disconnected));
}

/// Rendezvous: a blocking send returns once the receiver took the value.
#[test]
fn loom_rendezvous_send_waits_for_the_taker() {
    loom_model(|| {
        let (tx, rx) = sync_channel::<u32>(0);
        let t = thread::spawn(move || tx.send(1).unwrap());
        assert_eq!(rx.recv(), Ok(1));
        t.join().unwrap();
    });
}

/// Rendezvous with deadlines on both sides: the value is received if and
/// only if the send succeeded; otherwise it comes back to the sender.
#[test]
fn loom_rendezvous_deadlines_hand_over_exactly_once() {
    loom_model(|| {
        let (tx, rx) = sync_channel::<u32>(0);
        let t = thread::spawn(move || match tx.send_deadline(1, Instant::now()) {
            Ok(()) => true,
            Err(e) => {
                assert_eq!(e.into_inner(), 1);
                false
            }
        });
        let got = rx.recv_deadline(Instant::now()).ok();
        let sent = t.join().unwrap();
        let got = got.or_else(|| rx.try_recv().ok());
        assert_eq!(got.is_some(), sent);
    });
}
