//! Loom models of the oneshot channel: the real send, receive and drops,
//! with loom threads as the waiters (they park in the real butex wait).
//! A deadline is one that has already passed, as in `loom_mpsc`.

use super::channel;
use crate::loom::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::mpsc::{RecvError, RecvTimeoutError};
use loom::sync::Arc;
use loom::thread;
use std::time::Instant;

fn loom_model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// A send against a parking receive: it is woken with the value.
#[test]
fn loom_oneshot_send_wakes_receiver() {
    loom_model(|| {
        let (tx, mut rx) = channel::<u32>();
        let t = thread::spawn(move || tx.send(7).unwrap());
        assert_eq!(rx.recv(), Ok(7));
        assert_eq!(rx.recv(), Err(RecvError::Disconnected));
        t.join().unwrap();
    });
}

/// The sender's drop against a parking receive: `Disconnected`.
#[test]
fn loom_oneshot_sender_drop_wakes_receiver() {
    loom_model(|| {
        let (tx, mut rx) = channel::<u32>();
        let t = thread::spawn(move || drop(tx));
        assert_eq!(rx.recv(), Err(RecvError::Disconnected));
        t.join().unwrap();
    });
}

struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// A send against the receiver's drop: the value is handed back or
/// dropped with the channel, exactly once either way.
#[test]
fn loom_oneshot_send_vs_receiver_drop_drops_once() {
    loom_model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = channel::<Counted>();
        let d = drops.clone();
        let t = thread::spawn(move || tx.send(Counted(d)).is_ok());
        drop(rx);
        let _sent = t.join().unwrap();
        assert_eq!(drops.load(Ordering::Relaxed), 1);
    });
}

/// A receive whose deadline passes races the send: the value is received
/// then or by the next receive.
#[test]
fn loom_oneshot_deadline_racing_send_loses_nothing() {
    loom_model(|| {
        let (tx, mut rx) = channel::<u32>();
        let t = thread::spawn(move || tx.send(3).unwrap());
        match rx.recv_deadline(Instant::now()) {
            Ok(v) => assert_eq!(v, 3),
            Err(e) => {
                assert_eq!(e, RecvTimeoutError::Timeout);
                assert_eq!(rx.recv(), Ok(3));
            }
        }
        t.join().unwrap();
    });
}
