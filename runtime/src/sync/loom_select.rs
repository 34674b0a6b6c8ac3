//! Loom models of `Select` (`select.rs`): the real announce, registration
//! on several queues through one relay, wait and withdrawal, with loom
//! threads as the selector and the senders (the selector parks in the real
//! butex wait as a plain thread does), over the model queue of
//! `loom_mpsc`. A deadline is one that has already passed, as there.

use super::Select;
use crate::error::WaitError;
use crate::sync::mpsc::{channel, sync_channel, TryRecvError};
use loom::thread;
use std::time::Instant;

fn loom_model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// A send on the second of two channels races the selector's registration
/// on both: the select wakes, chooses it, and its receive gets the value.
#[test]
fn loom_a_send_racing_the_registration_wakes_the_select() {
    loom_model(|| {
        let (_tx1, rx1) = channel::<u32>();
        let (tx2, rx2) = channel::<u32>();
        let t = thread::spawn(move || tx2.send(7).unwrap());
        let mut sel = Select::new();
        sel.recv(&rx1);
        let b = sel.recv(&rx2);
        let op = sel.select().unwrap();
        assert_eq!(op.index(), b);
        assert_eq!(op.recv(&rx2), Ok(7));
        t.join().unwrap();
    });
}

/// Sends on both channels (one sender thread: two would make the model
/// too large to explore) race one select: whichever it chooses, the other
/// message stays queued (nothing taken by the registration that lost), and
/// the relay's deliveries are over before the select's frame goes.
#[test]
fn loom_the_losing_receive_keeps_its_message() {
    loom_model(|| {
        let (tx1, rx1) = channel::<u32>();
        let (tx2, rx2) = sync_channel::<u32>(1);
        let t1 = thread::spawn(move || {
            tx1.send(1).unwrap();
            tx2.send(2).unwrap();
        });
        let got = {
            let mut sel = Select::new();
            let a = sel.recv(&rx1);
            sel.recv(&rx2);
            let op = sel.select().unwrap();
            if op.index() == a {
                op.recv(&rx1).unwrap()
            } else {
                op.recv(&rx2).unwrap()
            }
        };
        t1.join().unwrap();
        let other = if got == 1 { rx2.recv() } else { rx1.recv() };
        assert_eq!(got + other.unwrap(), 3);
    });
}

/// A select whose deadline has passed gives up at whatever point of the
/// registration the race with a send has reached: the message is then
/// received by the next receive, which is woken for it if it waits.
#[test]
fn loom_a_select_giving_up_loses_no_message() {
    loom_model(|| {
        let (_tx1, rx1) = channel::<u32>();
        let (tx2, rx2) = channel::<u32>();
        let t = thread::spawn(move || tx2.send(5).unwrap());
        let chosen = {
            let mut sel = Select::new();
            sel.recv(&rx1);
            let b = sel.recv(&rx2);
            match sel.select_deadline(Instant::now()) {
                Ok(op) => {
                    assert_eq!(op.index(), b);
                    Some(op.recv(&rx2).unwrap())
                }
                Err(e) => {
                    assert_eq!(e, WaitError::TimedOut);
                    None
                }
            }
        };
        let v = chosen.map_or_else(|| rx2.recv().unwrap(), |v| v);
        assert_eq!(v, 5);
        t.join().unwrap();
        assert_eq!(rx2.try_recv(), Err(TryRecvError::Disconnected));
    });
}
