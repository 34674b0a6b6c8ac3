//! `sync::mpsc`: channels shared by tasks and plain threads; churn with
//! exact counts, disconnection both ways, drops, and waits ended by
//! deadlines, timeouts, interrupts and stops.

mod common;

use common::{rt, wait_for};
use spindle::sync::mpsc::{
    self, RecvError, RecvTimeoutError, SendErrorKind, TryRecvError, TrySendError,
};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A sender of either kind, so the churn runs over every flavor.
#[derive(Clone)]
enum Tx<T> {
    Unbounded(mpsc::Sender<T>),
    Bounded(mpsc::SyncSender<T>),
}

impl<T> Tx<T> {
    fn send(&self, v: T) -> Result<(), mpsc::SendError<T>> {
        match self {
            Tx::Unbounded(s) => s.send(v),
            Tx::Bounded(s) => s.send(v),
        }
    }
}

fn chan<T>(bound: Option<usize>) -> (Tx<T>, mpsc::Receiver<T>) {
    match bound {
        None => {
            let (tx, rx) = mpsc::channel();
            (Tx::Unbounded(tx), rx)
        }
        Some(b) => {
            let (tx, rx) = mpsc::sync_channel(b);
            (Tx::Bounded(tx), rx)
        }
    }
}

#[test]
fn basics() {
    let (tx, rx) = mpsc::channel();
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    tx.send(1).unwrap();
    tx.send(2).unwrap();
    let tx2 = tx.clone();
    tx2.send(3).unwrap();
    assert_eq!(rx.recv(), Ok(1));
    assert_eq!(rx.try_recv(), Ok(2));
    drop(tx);
    drop(tx2);
    // Drained first, then disconnected.
    assert_eq!(rx.recv(), Ok(3));
    assert_eq!(rx.recv(), Err(RecvError::Disconnected));
    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)),
        Err(RecvTimeoutError::Disconnected)
    );

    let (tx, rx) = mpsc::channel::<String>();
    drop(rx);
    let e = tx.send("back".to_string()).unwrap_err();
    assert!(e.is_disconnected());
    assert_eq!(e.kind(), SendErrorKind::Disconnected);
    assert_eq!(e.into_inner(), "back");

    let (tx, rx) = mpsc::sync_channel(2);
    tx.try_send(1).unwrap();
    tx.send(2).unwrap();
    assert_eq!(tx.try_send(3), Err(TrySendError::Full(3)));
    assert_eq!(rx.recv(), Ok(1));
    tx.try_send(3).unwrap();
    assert_eq!(rx.try_iter().collect::<Vec<_>>(), vec![2, 3]);
    drop(rx);
    assert_eq!(tx.try_send(4), Err(TrySendError::Disconnected(4)));
    assert!(tx.send(5).unwrap_err().is_disconnected());
}

/// Errors say what happened, are `Send + Sync + 'static` and go into a
/// boxed error with `?`; Debug does not need `T: Debug`.
#[test]
fn errors_compose() {
    struct NoDebug;
    fn boxed() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let (tx, rx) = mpsc::channel::<u8>();
        drop(tx);
        rx.recv()?;
        Ok(())
    }
    let e = boxed().unwrap_err();
    assert!(e.to_string().contains("closed"), "{e}");
    fn send_err() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(0);
        drop(rx);
        tx.send(vec![1])?;
        Ok(())
    }
    assert!(send_err().unwrap_err().to_string().contains("receiver"));
    let (tx, rx) = mpsc::channel::<NoDebug>();
    drop(rx);
    let e = tx.send(NoDebug).unwrap_err();
    assert_eq!(format!("{e:?}"), "SendError { kind: Disconnected, .. }");
    let (tx, _rx) = mpsc::sync_channel::<NoDebug>(0);
    assert_eq!(
        format!("{:?}", tx.try_send(NoDebug).unwrap_err()),
        "Full(..)"
    );
    assert_eq!(
        RecvTimeoutError::Timeout.to_string(),
        "timed out waiting on a channel"
    );
    assert!(RecvError::DeadlineExceeded.is_deadline_exceeded());
    assert!(RecvTimeoutError::Timeout.is_timeout());
}

/// 2 task producers and 2 thread producers, a task or thread consumer:
/// every value arrives once (count and sum), for every flavor.
fn churn(bound: Option<usize>, per_producer: u64, consumer_is_task: bool) {
    let per_producer = common::scaled(per_producer, per_producer / 10);
    let rt = rt(2);
    let (tx, rx) = chan::<u64>(bound);
    let mut tasks = Vec::new();
    let mut threads = Vec::new();
    for p in 0..4u64 {
        let tx = tx.clone();
        let body = move || {
            for i in 0..per_producer {
                tx.send(p * per_producer + i).unwrap();
            }
        };
        if p % 2 == 0 {
            tasks.push(rt.spawn(body));
        } else {
            threads.push(std::thread::spawn(body));
        }
    }
    drop(tx);
    let consume = move || {
        let (mut n, mut sum) = (0u64, 0u64);
        let mut last = [None::<u64>; 4];
        for v in rx.iter() {
            // Per producer, values arrive in the order sent.
            let p = (v / per_producer) as usize;
            assert!(last[p].is_none_or(|l| l < v), "out of order");
            last[p] = Some(v);
            n += 1;
            sum += v;
        }
        (n, sum)
    };
    let (n, sum) = if consumer_is_task {
        rt.spawn(consume).join().unwrap()
    } else {
        consume()
    };
    for h in tasks {
        h.join().unwrap();
    }
    for h in threads {
        h.join().unwrap();
    }
    let total = 4 * per_producer;
    assert_eq!(n, total);
    assert_eq!(sum, total * (total - 1) / 2);
}

#[test]
fn churn_unbounded() {
    churn(None, 100_000, true);
    churn(None, 100_000, false);
}

#[test]
fn churn_bounded_1() {
    churn(Some(1), 50_000, true);
    churn(Some(1), 50_000, false);
}

#[test]
fn churn_bounded_16() {
    churn(Some(16), 100_000, true);
    churn(Some(16), 100_000, false);
}

/// Bounds past the largest ring (16 384 slots of a `u64`): a counted
/// queue that grows with its messages (`sync_channel`'s docs), full now
/// and then at 20 000, never at `usize::MAX`.
#[test]
fn churn_bounded_large() {
    churn(Some(20_000), 100_000, true);
    churn(Some(usize::MAX), 100_000, false);
}

#[test]
fn churn_rendezvous() {
    churn(Some(0), 20_000, true);
    churn(Some(0), 20_000, false);
}

/// A ping-pong between two tasks through two channels: each hand-off
/// wakes a parked receiver (no lost wake-up over many rounds).
#[test]
fn ping_pong_between_tasks() {
    for bound in [None, Some(0), Some(1)] {
        let rt = rt(2);
        let (tx1, rx1) = chan::<u32>(bound);
        let (tx2, rx2) = chan::<u32>(bound);
        let a = rt.spawn(move || {
            for i in 0..20_000 {
                tx1.send(i).unwrap();
                assert_eq!(rx2.recv(), Ok(i + 1));
            }
        });
        let b = rt.spawn(move || {
            for v in rx1.iter() {
                tx2.send(v + 1).unwrap();
            }
        });
        a.join().unwrap();
        b.join().unwrap();
    }
}

struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Every value is dropped exactly once: received ones by the receiver's
/// code, queued ones when the receiver goes, failed sends' by the sender.
#[test]
fn values_are_dropped_exactly_once() {
    for bound in [None, Some(1), Some(16), Some(0)] {
        let drops = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = chan::<Counted>(bound);
        let mut made = 0;
        let queued = bound.unwrap_or(10);
        for _ in 0..queued {
            tx.send(Counted(drops.clone())).unwrap();
            made += 1;
        }
        if bound == Some(0) {
            // A rendezvous holds a `try_send`'s value handed to a parked
            // receiver whose wait then ended.
            let rx_thread = std::thread::spawn(move || {
                let r = rx.recv_timeout(Duration::from_millis(300));
                (rx, r.is_ok())
            });
            let Tx::Bounded(s) = &tx else { unreachable!() };
            let deadline = Instant::now() + Duration::from_millis(200);
            let mut handed = false;
            while Instant::now() < deadline && !handed {
                match s.try_send(Counted(drops.clone())) {
                    Ok(()) => handed = true,
                    Err(e) => drop(e.into_inner()),
                }
                made += 1;
            }
            let (rx, got) = rx_thread.join().unwrap();
            // (A value handed over may still sit in the slot, if the
            // receiver's wait ended first: the receiver's drop drops it.)
            assert!(handed || !got, "received what was never handed over");
            drop(rx);
        } else {
            drop(rx.recv().unwrap());
            drop(rx);
        }
        // After the receiver went: the value comes back and is dropped.
        drop(tx.send(Counted(drops.clone())).unwrap_err().into_inner());
        made += 1;
        assert_eq!(drops.load(Ordering::SeqCst), made, "bound {bound:?}");
        drop(tx);
        assert_eq!(drops.load(Ordering::SeqCst), made, "bound {bound:?}");
    }
    // Queued values go with the last handle when the senders outlive the
    // receiver's drop... and when the receiver outlives the senders.
    let drops = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = mpsc::channel();
    for _ in 0..100 {
        tx.send(Counted(drops.clone())).unwrap();
    }
    drop(tx);
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    drop(rx);
    assert_eq!(drops.load(Ordering::SeqCst), 100);
}

/// The receiver's drop wakes senders waiting on a full channel (tasks and
/// threads), who get their values back.
#[test]
fn receiver_drop_wakes_blocked_senders() {
    for bound in [0, 1] {
        let rt = rt(2);
        let (tx, rx) = mpsc::sync_channel::<u32>(bound);
        if bound == 1 {
            tx.send(0).unwrap();
        }
        let started = Arc::new(AtomicUsize::new(0));
        let task = {
            let (tx, started) = (tx.clone(), started.clone());
            rt.spawn(move || {
                started.fetch_add(1, Ordering::SeqCst);
                tx.send(1)
            })
        };
        let thread = {
            let (tx, started) = (tx.clone(), started.clone());
            std::thread::spawn(move || {
                started.fetch_add(1, Ordering::SeqCst);
                tx.send(2)
            })
        };
        wait_for("both senders to start", || {
            started.load(Ordering::SeqCst) == 2
        });
        std::thread::sleep(Duration::from_millis(30));
        drop(rx);
        let e = task.join().unwrap().unwrap_err();
        assert!(e.is_disconnected());
        assert_eq!(e.into_inner(), 1);
        let e = thread.join().unwrap().unwrap_err();
        assert_eq!((e.kind(), e.into_inner()), (SendErrorKind::Disconnected, 2));
    }
}

/// The last sender's drop wakes a receiver parked in `recv`.
#[test]
fn sender_drop_wakes_blocked_receiver() {
    for bound in [None, Some(0), Some(4)] {
        let rt = rt(2);
        let (tx, rx) = chan::<u32>(bound);
        let task = rt.spawn(move || rx.recv());
        let thread_rx = {
            let (tx2, rx2) = chan::<u32>(bound);
            let h = std::thread::spawn(move || rx2.recv());
            (tx2, h)
        };
        std::thread::sleep(Duration::from_millis(30));
        drop(tx);
        drop(thread_rx.0);
        assert_eq!(task.join().unwrap(), Err(RecvError::Disconnected));
        assert_eq!(thread_rx.1.join().unwrap(), Err(RecvError::Disconnected));
    }
}

/// A deadline scope ends a receive (task and thread) with
/// `DeadlineExceeded`; nothing is lost, and the channel works after.
#[test]
fn deadline_scope_ends_recv() {
    let rt = rt(2);
    for bound in [None, Some(0), Some(1)] {
        let (tx, rx) = chan::<u32>(bound);
        let rx = rt
            .spawn(move || {
                let t0 = Instant::now();
                let r = spindle::with_deadline(t0 + Duration::from_millis(20), || rx.recv());
                assert_eq!(r, Err(RecvError::DeadlineExceeded));
                assert!(t0.elapsed() >= Duration::from_millis(19));
                // The scope's deadline beats a later timeout of its own.
                let r = spindle::with_deadline(Instant::now() + Duration::from_millis(10), || {
                    rx.recv_timeout(Duration::from_secs(10))
                });
                assert_eq!(r, Err(RecvTimeoutError::DeadlineExceeded));
                rx
            })
            .join()
            .unwrap();
        let r = spindle::with_deadline(Instant::now() + Duration::from_millis(10), || rx.recv());
        assert!(r.unwrap_err().is_deadline_exceeded());
        let sender = std::thread::spawn(move || {
            tx.send(7).unwrap();
            tx
        });
        assert_eq!(rx.recv(), Ok(7));
        let tx = sender.join().unwrap();
        drop(tx);
        assert_eq!(rx.recv(), Err(RecvError::Disconnected));
    }
}

/// A deadline scope ends a send waiting on a full (or rendezvous) channel:
/// the value comes back, was not sent, and nothing queued is lost.
#[test]
fn deadline_scope_ends_bounded_send() {
    let rt = rt(2);
    for bound in [0, 1, 3] {
        let (tx, rx) = mpsc::sync_channel::<u32>(bound);
        for i in 0..bound as u32 {
            tx.send(i).unwrap();
        }
        let tx = rt
            .spawn(move || {
                let d = Instant::now() + Duration::from_millis(20);
                let e = spindle::with_deadline(d, || tx.send(100)).unwrap_err();
                assert!(e.is_deadline_exceeded(), "{e}");
                assert_eq!(e.into_inner(), 100);
                let e = tx.send_timeout(101, Duration::from_millis(10)).unwrap_err();
                assert_eq!((e.kind(), e.into_inner()), (SendErrorKind::Timeout, 101));
                tx
            })
            .join()
            .unwrap();
        // On a plain thread too.
        let d = Instant::now() + Duration::from_millis(10);
        let e = spindle::with_deadline(d, || tx.send(102)).unwrap_err();
        assert_eq!(
            (e.kind(), e.into_inner()),
            (SendErrorKind::DeadlineExceeded, 102)
        );
        let got: Vec<u32> = rx.try_iter().collect();
        assert_eq!(got, (0..bound as u32).collect::<Vec<_>>());
        // And the channel still works both ways.
        let h = std::thread::spawn(move || {
            for i in 200..210 {
                tx.send(i).unwrap();
            }
        });
        assert_eq!(
            rx.iter().collect::<Vec<_>>(),
            (200..210).collect::<Vec<_>>()
        );
        h.join().unwrap();
    }
}

/// Deadlines racing sends, many times over: every value sent is received
/// once, every value not sent comes back.
#[test]
fn deadlines_racing_sends_lose_nothing() {
    let rt = rt(2);
    for bound in [None, Some(0), Some(1)] {
        let (tx, rx) = chan::<u64>(bound);
        const N: u64 = 3_000;
        let producer = rt.spawn(move || {
            let mut sent = 0u64;
            let mut back = 0u64;
            for i in 0..N {
                let d = Instant::now() + Duration::from_micros(i % 50);
                match spindle::with_deadline(d, || tx.send(i)) {
                    Ok(()) => sent += i,
                    Err(e) => {
                        assert!(e.is_deadline_exceeded());
                        back += e.into_inner();
                    }
                }
            }
            (sent, back)
        });
        let consumer = rt.spawn(move || {
            let mut got = 0u64;
            let mut i = 0u64;
            loop {
                i += 1;
                let d = Instant::now() + Duration::from_micros(i % 40);
                match spindle::with_deadline(d, || rx.recv()) {
                    Ok(v) => got += v,
                    Err(RecvError::DeadlineExceeded) => {}
                    Err(RecvError::Disconnected) => return got,
                    Err(e) => panic!("{e}"),
                }
            }
        });
        let (sent, back) = producer.join().unwrap();
        let got = consumer.join().unwrap();
        assert_eq!(sent + back, N * (N - 1) / 2);
        assert_eq!(got, sent, "bound {bound:?}");
    }
}

/// `interrupt` and `stop` end a task's receive and bounded send; the
/// channel is intact after.
#[test]
fn interrupt_and_stop_end_waits() {
    let rt = rt(2);
    for bound in [None, Some(0), Some(1)] {
        let (tx, rx) = chan::<u32>(bound);
        let waiting = Arc::new(AtomicBool::new(false));
        let h = {
            let waiting = waiting.clone();
            rt.spawn(move || {
                waiting.store(true, Ordering::SeqCst);
                let first = rx.recv();
                (first, rx)
            })
        };
        wait_for("the receiver to start", || waiting.load(Ordering::SeqCst));
        std::thread::sleep(Duration::from_millis(10));
        h.interrupt().unwrap();
        let (first, rx) = h.join().unwrap();
        assert_eq!(first, Err(RecvError::Interrupted));

        let h = rt.spawn(move || {
            let id = spindle::current().unwrap();
            spindle::stop(id).unwrap();
            let r = rx.recv_timeout(Duration::from_secs(10));
            (r, rx)
        });
        let (r, rx) = h.join().unwrap();
        assert_eq!(r, Err(RecvTimeoutError::Stopped));
        let h = std::thread::spawn(move || tx.send(5).map(|_| tx));
        assert_eq!(rx.recv(), Ok(5));
        drop(h.join().unwrap().unwrap());
        assert_eq!(rx.recv(), Err(RecvError::Disconnected));
    }
    for bound in [0, 1] {
        let (tx, rx) = mpsc::sync_channel::<u32>(bound);
        if bound == 1 {
            tx.send(1).unwrap();
        }
        let h = rt.spawn(move || tx.send(2));
        std::thread::sleep(Duration::from_millis(20));
        h.interrupt().unwrap();
        let e = h.join().unwrap().unwrap_err();
        assert_eq!((e.kind(), e.into_inner()), (SendErrorKind::Interrupted, 2));
        if bound == 1 {
            assert_eq!(rx.recv(), Ok(1));
        }
        assert_eq!(rx.recv(), Err(RecvError::Disconnected));
    }
}

/// `recv_timeout` gives up after its timeout, not before, and a message
/// that comes well within it is received.
#[test]
fn recv_timeout_ordering() {
    let rt = rt(2);
    let (tx, rx) = mpsc::channel::<u32>();
    let t0 = Instant::now();
    assert_eq!(
        rx.recv_timeout(Duration::from_millis(30)),
        Err(RecvTimeoutError::Timeout)
    );
    assert!(t0.elapsed() >= Duration::from_millis(30));
    let rx = rt
        .spawn(move || {
            let t0 = Instant::now();
            assert_eq!(
                rx.recv_timeout(Duration::from_millis(30)),
                Err(RecvTimeoutError::Timeout)
            );
            assert!(t0.elapsed() >= Duration::from_millis(30));
            rx
        })
        .join()
        .unwrap();
    let h = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        tx.send(9).unwrap();
        tx
    });
    let t0 = Instant::now();
    assert_eq!(rx.recv_timeout(Duration::from_secs(20)), Ok(9));
    assert!(t0.elapsed() < Duration::from_secs(20));
    let _tx = h.join().unwrap();
    assert_eq!(
        rx.recv_deadline(Instant::now()),
        Err(RecvTimeoutError::Timeout)
    );
}

/// Bound 0: a send returns only once the receiver has taken the value;
/// `try_send` succeeds only when a receiver waits.
#[test]
fn rendezvous_semantics() {
    let rt = rt(2);
    let (tx, rx) = mpsc::sync_channel::<u32>(0);
    assert_eq!(tx.try_send(1), Err(TrySendError::Full(1)));
    let returned = Arc::new(AtomicBool::new(false));
    let h = {
        let (tx, returned) = (tx.clone(), returned.clone());
        rt.spawn(move || {
            tx.send(2).unwrap();
            returned.store(true, Ordering::SeqCst);
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    assert!(!returned.load(Ordering::SeqCst), "send returned untaken");
    assert_eq!(rx.recv(), Ok(2));
    h.join().unwrap();
    assert!(returned.load(Ordering::SeqCst));

    // A receiver parked in recv (a task): try_send hands over.
    let r = rt.spawn(move || (rx.recv(), rx));
    let mut v = 3;
    loop {
        match tx.try_send(v) {
            Ok(()) => break,
            Err(TrySendError::Full(back)) => {
                v = back;
                std::thread::yield_now();
            }
            Err(e) => panic!("{e}"),
        }
    }
    let (got, rx) = r.join().unwrap();
    assert_eq!(got, Ok(3));
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    assert_eq!(tx.try_send(4), Err(TrySendError::Full(4)));
}

#[test]
fn iter_ends_on_disconnect() {
    let rt = rt(2);
    let (tx, rx) = mpsc::sync_channel::<u32>(4);
    let h = rt.spawn(move || {
        for i in 0..100 {
            tx.send(i).unwrap();
        }
    });
    let all: Vec<u32> = rx.into_iter().collect();
    assert_eq!(all, (0..100).collect::<Vec<_>>());
    h.join().unwrap();

    let (tx, rx) = mpsc::channel::<u32>();
    tx.send(1).unwrap();
    tx.send(2).unwrap();
    assert_eq!(rx.try_iter().collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(rx.try_iter().count(), 0);
    drop(tx);
    assert_eq!((&rx).into_iter().count(), 0);
}
