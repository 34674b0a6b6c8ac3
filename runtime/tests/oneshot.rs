//! `sync::oneshot`: one value between tasks and plain threads; drops,
//! disconnection, and waits ended by deadlines, interrupts and stops that
//! leave the receiver usable.

mod common;

use common::{rt, wait_for};
use spindle::sync::mpsc::{RecvError, RecvTimeoutError, TryRecvError};
use spindle::sync::oneshot;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn basics() {
    let (tx, mut rx) = oneshot::channel();
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    assert!(!tx.is_closed() && !rx.is_closed());
    tx.send(5).unwrap();
    assert!(!rx.is_closed());
    assert_eq!(rx.try_recv(), Ok(5));
    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    assert_eq!(rx.recv(), Err(RecvError::Disconnected));

    let (tx, mut rx) = oneshot::channel::<u8>();
    drop(tx);
    assert!(rx.is_closed());
    assert_eq!(rx.recv(), Err(RecvError::Disconnected));

    let (tx, rx) = oneshot::channel::<String>();
    drop(rx);
    assert!(tx.is_closed());
    assert_eq!(tx.send("back".into()), Err("back".to_string()));
}

/// Tasks and threads on either side, the receiver waiting first or not.
#[test]
fn tasks_and_threads() {
    let rt = rt(2);
    for round in 0..2000u32 {
        let (tx, rx) = oneshot::channel();
        let (send_task, recv_task) = (round % 2 == 0, round % 4 < 2);
        let sender = move || tx.send(round).unwrap();
        let receiver = move || {
            let mut rx = rx;
            rx.recv()
        };
        let s = if send_task {
            (Some(rt.spawn(sender)), None)
        } else {
            (None, Some(std::thread::spawn(sender)))
        };
        let got = if recv_task {
            rt.spawn(receiver).join().unwrap()
        } else {
            receiver()
        };
        assert_eq!(got, Ok(round));
        match s {
            (Some(h), _) => h.join().unwrap(),
            (_, Some(h)) => h.join().unwrap(),
            _ => unreachable!(),
        }
    }
}

/// The sender's drop wakes a waiting receiver (task and thread).
#[test]
fn sender_drop_wakes_receiver() {
    let rt = rt(2);
    let (tx1, mut rx1) = oneshot::channel::<u32>();
    let (tx2, mut rx2) = oneshot::channel::<u32>();
    let task = rt.spawn(move || rx1.recv());
    let thread = std::thread::spawn(move || rx2.recv());
    std::thread::sleep(Duration::from_millis(30));
    drop(tx1);
    drop(tx2);
    assert_eq!(task.join().unwrap(), Err(RecvError::Disconnected));
    assert_eq!(thread.join().unwrap(), Err(RecvError::Disconnected));
}

struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// The value is dropped exactly once: received, sent and never received,
/// handed back, or racing the receiver's drop.
#[test]
fn the_value_is_dropped_exactly_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (tx, mut rx) = oneshot::channel();
    tx.send(Counted(drops.clone())).ok().unwrap();
    drop(rx.recv().unwrap());
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    drop(rx);
    assert_eq!(drops.load(Ordering::SeqCst), 1);

    let (tx, rx) = oneshot::channel();
    tx.send(Counted(drops.clone())).ok().unwrap();
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    drop(rx);
    assert_eq!(drops.load(Ordering::SeqCst), 2);

    let (tx, rx) = oneshot::channel();
    drop(rx);
    let back = tx.send(Counted(drops.clone())).err().unwrap();
    assert_eq!(drops.load(Ordering::SeqCst), 2);
    drop(back);
    assert_eq!(drops.load(Ordering::SeqCst), 3);

    for i in 0..2000 {
        let (tx, rx) = oneshot::channel();
        let c = Counted(drops.clone());
        let h = std::thread::spawn(move || drop(tx.send(c)));
        if i % 2 == 0 {
            std::thread::yield_now();
        }
        drop(rx);
        h.join().unwrap();
    }
    assert_eq!(drops.load(Ordering::SeqCst), 3 + 2000);
}

/// A deadline scope ends a receive; the receiver stays usable and gets the
/// value sent after.
#[test]
fn a_deadline_leaves_the_receiver_usable() {
    let rt = rt(2);
    let (tx, mut rx) = oneshot::channel::<u32>();
    let mut rx = rt
        .spawn(move || {
            let t0 = Instant::now();
            let d = t0 + Duration::from_millis(20);
            let r = spindle::with_deadline(d, || rx.recv());
            assert_eq!(r, Err(RecvError::DeadlineExceeded));
            assert!(r.unwrap_err().is_deadline_exceeded());
            assert!(t0.elapsed() >= Duration::from_millis(19));
            let t0 = Instant::now();
            let r = rx.recv_timeout(Duration::from_millis(20));
            assert_eq!(r, Err(RecvTimeoutError::Timeout));
            assert!(t0.elapsed() >= Duration::from_millis(20));
            rx
        })
        .join()
        .unwrap();
    let d = Instant::now() + Duration::from_millis(10);
    assert_eq!(
        spindle::with_deadline(d, || rx.recv()),
        Err(RecvError::DeadlineExceeded)
    );
    let h = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(10));
        tx.send(8).unwrap();
    });
    assert_eq!(rx.recv(), Ok(8));
    h.join().unwrap();
}

/// Deadlines racing sends: every value arrives, by the receive that timed
/// out or the next one.
#[test]
fn deadlines_racing_sends_lose_nothing() {
    let rt = rt(2);
    let mut hs = Vec::new();
    for i in 0..2000u64 {
        let (tx, mut rx) = oneshot::channel::<u64>();
        let s = rt.spawn(move || tx.send(i).unwrap());
        let r = rt.spawn(move || {
            let d = Instant::now() + Duration::from_micros(i % 30);
            match spindle::with_deadline(d, || rx.recv()) {
                Ok(v) => v,
                Err(RecvError::DeadlineExceeded) => rx.recv().unwrap(),
                Err(e) => panic!("{e}"),
            }
        });
        hs.push((i, s, r));
    }
    for (i, s, r) in hs {
        s.join().unwrap();
        assert_eq!(r.join().unwrap(), i);
    }
}

/// `interrupt` and `stop` end a task's receive; the receiver stays usable.
#[test]
fn interrupt_and_stop_end_a_receive() {
    let rt = rt(2);
    let (tx, mut rx) = oneshot::channel::<u32>();
    let waiting = Arc::new(AtomicBool::new(false));
    let h = {
        let waiting = waiting.clone();
        rt.spawn(move || {
            waiting.store(true, Ordering::SeqCst);
            (rx.recv(), rx)
        })
    };
    wait_for("the receiver to start", || waiting.load(Ordering::SeqCst));
    std::thread::sleep(Duration::from_millis(10));
    h.interrupt().unwrap();
    let (r, rx) = h.join().unwrap();
    assert_eq!(r, Err(RecvError::Interrupted));
    assert!(r.unwrap_err().is_interrupted());
    let h = rt.spawn(move || {
        let mut rx = rx;
        spindle::stop(spindle::current().unwrap()).unwrap();
        (
            rx.recv_deadline(Instant::now() + Duration::from_secs(10)),
            rx,
        )
    });
    let (r, mut rx) = h.join().unwrap();
    assert_eq!(r, Err(RecvTimeoutError::Stopped));
    tx.send(1).unwrap();
    assert_eq!(rx.recv(), Ok(1));
}
