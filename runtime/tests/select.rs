//! `sync::Select` and `select!`: the first of several receives, task ends
//! and fd readinesses, for tasks and plain threads; what ends its wait;
//! and a stress test that counts every message through selects that win
//! and lose races.

mod common;

use common::rt;
use spindle::net::UnixStream;
use spindle::sync::{mpsc, oneshot, Select};
use spindle::WaitError;
use std::io::Write;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(30);

/// Guards the ready path: a queued message is chosen without waiting, and
/// `recv` on the chosen operation takes it.
#[test]
fn a_ready_receive_is_chosen_at_once() {
    let (tx1, rx1) = mpsc::channel::<u32>();
    let (_tx2, rx2) = mpsc::channel::<u32>();
    tx1.send(3).unwrap();
    let mut sel = Select::new();
    let a = sel.recv(&rx1);
    sel.recv(&rx2);
    let op = sel.select().unwrap();
    assert_eq!(op.index(), a);
    assert_eq!(op.recv(&rx1), Ok(3));
}

/// Guards the wait: a select in a task of a one-worker runtime suspends
/// (the sending task runs meanwhile) and wakes on the send, from a task
/// and from a plain thread.
#[test]
fn a_select_waits_for_a_send_from_a_task_or_a_thread() {
    let rt = rt(1);
    for from_thread in [false, true] {
        let got = rt.block_on(|| {
            let (tx1, rx1) = mpsc::channel::<&str>();
            let (tx2, rx2) = mpsc::channel::<&str>();
            let sender = move || {
                std::thread::sleep(Duration::from_millis(5));
                tx2.send("two").unwrap();
                drop(tx1);
            };
            let _h = if from_thread {
                std::thread::spawn(sender);
                None
            } else {
                Some(spindle::spawn(move || {
                    spindle::sleep(Duration::from_millis(5)).unwrap();
                    sender()
                }))
            };
            let mut sel = Select::new();
            sel.recv(&rx1);
            let b = sel.recv(&rx2);
            let op = sel.select().unwrap();
            // The other channel may be disconnected by now, and so ready
            // too: whichever is chosen, the message is not lost.
            if op.index() == b {
                op.recv(&rx2).unwrap()
            } else {
                assert!(op.recv(&rx1).is_err());
                rx2.recv().unwrap()
            }
        });
        assert_eq!(got, "two");
    }
}

/// Guards disconnection: a channel whose senders have all gone is ready,
/// and its receive says `Disconnected`.
#[test]
fn a_disconnected_channel_is_ready() {
    let (tx, rx) = mpsc::channel::<u8>();
    let (_keep, other) = mpsc::channel::<u8>();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(10));
        drop(tx);
    });
    let mut sel = Select::new();
    let a = sel.recv(&rx);
    sel.recv(&other);
    let op = sel.select().unwrap();
    assert_eq!(op.index(), a);
    assert!(op.recv(&rx).unwrap_err().is_disconnected());
}

/// Guards what ends the wait: its own deadline (`TimedOut`), the deadline
/// scope (`DeadlineExceeded`), an interrupt and a stop; and an empty
/// select, which could never end (`WouldBlock`).
#[test]
fn deadlines_interrupts_and_stops_end_a_select() {
    let rt = rt(1);
    let (_tx, rx) = mpsc::channel::<u8>();
    let mut sel = Select::new();
    sel.recv(&rx);
    let soon = Instant::now() + Duration::from_millis(10);
    assert_eq!(sel.select_deadline(soon).unwrap_err(), WaitError::TimedOut);
    let r = spindle::with_deadline(Instant::now() + Duration::from_millis(10), || {
        sel.select().map(|op| op.index())
    });
    assert_eq!(r, Err(WaitError::DeadlineExceeded));
    assert_eq!(Select::new().select().unwrap_err(), WaitError::WouldBlock);
    let ended = common::end_by_interrupt_and_stop(&rt, || {
        let (_tx, rx) = mpsc::channel::<u8>();
        let mut sel = Select::new();
        sel.recv(&rx);
        sel.select().map(|op| op.index())
    });
    assert_eq!(
        ended,
        (Err(WaitError::Interrupted), Err(WaitError::Stopped))
    );
}

/// Guards the other kinds of operation: a task's end, a oneshot's value,
/// and an fd's readability (from a task, through the poller; from a plain
/// thread, polled).
#[test]
fn joins_oneshots_and_fds_are_selectable() {
    let rt = rt(1);
    rt.block_on(|| {
        let (_tx, never) = mpsc::channel::<u8>();
        let h = spindle::spawn(|| spindle::sleep(Duration::from_millis(10)));
        let mut sel = Select::new();
        sel.recv(&never);
        let j = sel.join(&h);
        assert_eq!(sel.select().unwrap().index(), j);
        drop(sel);
        assert!(h.join().unwrap().is_ok());

        let (otx, mut orx) = oneshot::channel::<u32>();
        spindle::spawn(move || {
            spindle::sleep(Duration::from_millis(10)).unwrap();
            otx.send(9).unwrap();
        });
        let mut sel = Select::new();
        sel.recv(&never);
        let o = sel.recv_oneshot(&mut orx);
        assert_eq!(sel.select().unwrap().index(), o);
        drop(sel);
        assert_eq!(orx.recv(), Ok(9));

        let (a, b) = UnixStream::pair().unwrap();
        let writer = spindle::spawn(move || {
            spindle::sleep(Duration::from_millis(10)).unwrap();
            (&b).write_all(b"x").unwrap();
            b
        });
        let mut sel = Select::new();
        sel.recv(&never);
        let r = sel.readable(a.as_fd());
        assert_eq!(sel.select().unwrap().index(), r);
        drop(writer.join());
    });
    // A plain thread waits for an fd by looking every millisecond.
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    let (_tx, never) = mpsc::channel::<u8>();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(10));
        (&b).write_all(b"x").unwrap();
        std::thread::sleep(Duration::from_millis(100));
    });
    let mut sel = Select::new();
    sel.recv(&never);
    let r = sel.readable(a.as_fd());
    assert_eq!(sel.select_timeout(LONG).unwrap().index(), r);
}

/// Guards a rendezvous channel in a select: the blocked sender's value is
/// chosen and handed over.
#[test]
fn a_rendezvous_send_is_selectable() {
    let rt = rt(1);
    rt.block_on(|| {
        let (tx, rx) = mpsc::sync_channel::<u32>(0);
        let (_keep, never) = mpsc::channel::<u32>();
        let sender = spindle::spawn(move || tx.send(11));
        let mut sel = Select::new();
        sel.recv(&never);
        let a = sel.recv(&rx);
        let op = sel.select().unwrap();
        assert_eq!(op.index(), a);
        assert_eq!(op.recv(&rx), Ok(11));
        assert_eq!(sender.join().unwrap(), Ok(()));
    });
}

/// Guards the macro: the ready arm runs with its message; the deadline arm
/// runs when nothing comes; a stop runs the first arm with the error.
#[test]
fn the_select_macro_runs_the_chosen_arm() {
    let (tx, a) = mpsc::channel::<u32>();
    let (_tb, b) = mpsc::channel::<&str>();
    tx.send(4).unwrap();
    let r = spindle::select! {
        recv(b) -> _ => 0,
        recv(a) -> msg => msg.unwrap(),
    };
    assert_eq!(r, 4);
    let r = spindle::select! {
        recv(a) -> _ => "a",
        recv(b) -> _ => "b",
        deadline(Instant::now() + Duration::from_millis(5)) => "deadline",
    };
    assert_eq!(r, "deadline");
    let rt = rt(1);
    let h = rt.spawn(|| {
        let (_t, a) = mpsc::channel::<u32>();
        spindle::select! {
            recv(a) -> msg => msg.map_err(|e| e.is_stopped() && !e.is_interrupted()),
        }
    });
    std::thread::sleep(Duration::from_millis(20));
    h.stop().unwrap();
    assert_eq!(h.join().unwrap(), Err(true));
}

/// Guards that a chosen operation's `recv` refuses another receiver.
#[test]
#[should_panic(expected = "not the receiver of the chosen operation")]
fn recv_on_the_wrong_receiver_panics() {
    let (tx, a) = mpsc::channel::<u32>();
    let (_tb, b) = mpsc::channel::<u32>();
    tx.send(1).unwrap();
    let mut sel = Select::new();
    sel.recv(&a);
    sel.recv(&b);
    let op = sel.select().unwrap();
    let _ = op.recv(&b);
}

/// The stress test: producers on two channels (tasks and a plain thread)
/// race a consumer whose selects often give up (short deadlines) and
/// often lose to the other channel. Every message is received once, in
/// each producer's order.
#[test]
fn no_message_is_lost_or_doubled_through_selects() {
    const PER_PRODUCER: u64 = 20_000;
    let rt = rt(2);
    let done = Arc::new(AtomicBool::new(false));
    let total = rt.block_on(|| {
        let (tx1, rx1) = mpsc::channel::<(u64, u64)>();
        let (tx2, rx2) = mpsc::sync_channel::<(u64, u64)>(4);
        let mut producers = Vec::new();
        for p in 0..2u64 {
            let tx = tx1.clone();
            producers.push(spindle::spawn(move || {
                for i in 0..PER_PRODUCER {
                    tx.send((p, i)).unwrap();
                    if i % 64 == 0 {
                        spindle::yield_now();
                    }
                }
            }));
        }
        drop(tx1);
        let thread_tx = tx2.clone();
        let thread = std::thread::spawn(move || {
            for i in 0..PER_PRODUCER {
                thread_tx.send((2, i)).unwrap();
            }
        });
        let tx = tx2;
        producers.push(spindle::spawn(move || {
            for i in 0..PER_PRODUCER {
                tx.send((3, i)).unwrap();
            }
        }));
        let mut next = [0u64; 4];
        let (mut open1, mut open2) = (true, true);
        let mut received = 0u64;
        while open1 || open2 {
            let mut sel = Select::new();
            let (i1, i2) = (open1.then(|| sel.recv(&rx1)), open2.then(|| sel.recv(&rx2)));
            let op = match sel.select_timeout(Duration::from_micros(50)) {
                Ok(op) => op,
                Err(WaitError::TimedOut) => continue,
                Err(e) => panic!("{e:?}"),
            };
            let chosen = op.index();
            let r = if Some(chosen) == i1 {
                op.recv(&rx1)
            } else {
                assert_eq!(Some(chosen), i2);
                op.recv(&rx2)
            };
            match r {
                Ok((p, i)) => {
                    assert_eq!(i, next[p as usize], "producer {p} out of order");
                    next[p as usize] += 1;
                    received += 1;
                }
                Err(e) if e.is_disconnected() => {
                    if Some(chosen) == i1 {
                        open1 = false;
                    } else {
                        open2 = false;
                    }
                }
                Err(e) => panic!("{e:?}"),
            }
        }
        for p in producers {
            p.join().unwrap();
        }
        thread.join().unwrap();
        done.store(true, Ordering::SeqCst);
        assert_eq!(next, [PER_PRODUCER; 4]);
        received
    });
    assert!(done.load(Ordering::SeqCst));
    assert_eq!(total, 4 * PER_PRODUCER);
}
