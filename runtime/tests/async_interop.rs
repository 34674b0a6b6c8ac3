//! Async interop: `task::block_on_future` (a future in a task, woken from
//! a plain thread, another task or a tokio runtime, while the worker runs
//! other tasks) and `JoinHandle` awaited by async programs (a minimal
//! hand-written executor and tokio).

mod common;

use common::rt;
use spindle::task::block_on_future;
use spindle::{JoinError, WaitError};
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// A future ready once opened; keeps the last waker for the opener.
#[derive(Clone, Default)]
struct Gate(Arc<Mutex<(bool, Option<Waker>)>>);

impl Gate {
    fn open(&self) {
        let w = {
            let mut st = self.0.lock().unwrap();
            st.0 = true;
            st.1.take()
        };
        if let Some(w) = w {
            w.wake();
        }
    }
}

impl Future for Gate {
    type Output = &'static str;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<&'static str> {
        let mut st = self.0.lock().unwrap();
        if st.0 {
            return Poll::Ready("open");
        }
        st.1 = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// Counts its drops (a future dropped exactly once).
struct Dropped<F>(F, Arc<AtomicUsize>);

impl<F: Future + Unpin> Future for Dropped<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<F> Drop for Dropped<F> {
    fn drop(&mut self) {
        self.1.fetch_add(1, Ordering::SeqCst);
    }
}

/// Guards the ready path: a ready future's value comes back without the
/// task suspending (a task queued behind it has not run yet).
#[test]
fn a_ready_future_completes_without_suspending() {
    let rt = rt(1);
    rt.block_on(|| {
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        let other = spindle::spawn(move || r.store(true, Ordering::SeqCst));
        assert_eq!(block_on_future(async { 5 }), Ok(5));
        assert!(!ran.load(Ordering::SeqCst), "the task suspended");
        other.join().unwrap();
    });
}

/// Guards the wake paths: a pending future woken from a plain thread and
/// from another task completes, and another task of the one-worker runtime
/// runs while it waits.
#[test]
fn a_pending_future_woken_from_a_thread_or_a_task_completes() {
    let rt = rt(1);
    for from_thread in [true, false] {
        let got = rt.block_on(|| {
            let gate = Gate::default();
            let opener = gate.clone();
            let meanwhile = Arc::new(AtomicUsize::new(0));
            let m = meanwhile.clone();
            let busy = spindle::spawn(move || {
                for _ in 0..10 {
                    m.fetch_add(1, Ordering::SeqCst);
                    spindle::sleep(Duration::from_millis(1)).unwrap();
                }
            });
            if from_thread {
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(30));
                    opener.open();
                });
            } else {
                spindle::spawn(move || {
                    spindle::sleep(Duration::from_millis(30)).unwrap();
                    opener.open();
                });
            }
            let v = block_on_future(gate).unwrap();
            assert!(
                meanwhile.load(Ordering::SeqCst) > 0,
                "nothing else ran while the future was pending"
            );
            busy.join().unwrap();
            v
        });
        assert_eq!(got, "open");
    }
}

/// Guards a tokio future in a task: a tokio oneshot sent from a task of a
/// tokio runtime, and tokio's own `TcpStream` talking to a spindle
/// `TcpListener` (its futures polled inside the tokio runtime's context).
#[test]
fn tokio_futures_complete_inside_a_task() {
    use std::io::{Read, Write};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let tokio_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let handle = tokio_rt.handle().clone();
    let rt = rt(1);
    rt.block_on(|| {
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        handle.spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            tx.send(3).unwrap();
        });
        assert_eq!(block_on_future(rx).unwrap(), Ok(3));

        let listener = spindle::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = spindle::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 5];
            (&s).read_exact(&mut buf).unwrap();
            (&s).write_all(&buf).unwrap();
        });
        let h = handle.clone();
        let echoed = block_on_future(InTokio(h, async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(b"hello").await.unwrap();
            let mut buf = [0u8; 5];
            s.read_exact(&mut buf).await.unwrap();
            buf
        }))
        .unwrap();
        assert_eq!(&echoed, b"hello");
        server.join().unwrap();
    });
}

/// Polls a future inside a tokio runtime's context (for futures that make
/// tokio resources): entered around each poll only, so the context never
/// stays on the worker while the task is suspended.
struct InTokio<F>(tokio::runtime::Handle, F);

impl<F: Future> Future for InTokio<F> {
    type Output = F::Output;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: structural pinning of the future; the handle is not
        // pinned and never moved out.
        let this = unsafe { self.get_unchecked_mut() };
        let _entered = this.0.enter();
        // SAFETY: as above.
        unsafe { Pin::new_unchecked(&mut this.1) }.poll(cx)
    }
}

/// Guards the early ends: a deadline scope, an interrupt and a stop end
/// the wait with their error, and the future is dropped exactly once.
#[test]
fn deadline_interrupt_and_stop_end_the_wait_and_drop_the_future_once() {
    let rt = rt(1);
    let drops = Arc::new(AtomicUsize::new(0));
    let d = drops.clone();
    let r = rt.block_on(move || {
        spindle::with_deadline(Instant::now() + Duration::from_millis(10), || {
            block_on_future(Dropped(Gate::default(), d))
        })
    });
    assert_eq!(r, Err(WaitError::DeadlineExceeded));
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    // Each run reports its wait's end and how often its future was dropped
    // by the time the wait returned.
    let ended = common::end_by_interrupt_and_stop(&rt, || {
        let drops = Arc::new(AtomicUsize::new(0));
        let r = block_on_future(Dropped(Gate::default(), drops.clone()));
        (r, drops.load(Ordering::SeqCst))
    });
    assert_eq!(
        ended,
        (
            (Err(WaitError::Interrupted), 1),
            (Err(WaitError::Stopped), 1)
        )
    );
}

/// A minimal executor: polls on this thread, parks between wake-ups.
fn minimal_block_on<F: Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

/// Guards `JoinHandle: IntoFuture`: a hand-written executor and tokio await
/// a task (running, then finished), and a panic arrives as `Panicked`.
#[test]
fn async_programs_await_join_handles() {
    let rt = rt(1);
    let h = rt.spawn(|| {
        spindle::sleep(Duration::from_millis(20)).unwrap();
        11
    });
    assert_eq!(minimal_block_on(async { h.await }).unwrap(), 11);
    let done = rt.spawn(|| 12);
    while !done.is_finished() {
        std::thread::yield_now();
    }
    assert_eq!(minimal_block_on(done.into_future()).unwrap(), 12);

    let tokio_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let h = rt.spawn(|| {
        spindle::sleep(Duration::from_millis(20)).unwrap();
        13
    });
    let panics = rt.spawn(|| -> u32 { panic!("in the task") });
    let (a, b) = tokio_rt.block_on(async move {
        let a = tokio::spawn(async move { h.await }).await.unwrap();
        (a, panics.await)
    });
    assert_eq!(a.unwrap(), 13);
    // An await given up (a timeout drops the future while it is
    // registered): the task's end later finds no registration left.
    let (tx, rx) = spindle::sync::mpsc::channel::<()>();
    let long = rt.spawn(move || rx.recv().is_ok());
    let r = tokio_rt.block_on(async move {
        tokio::time::timeout(Duration::from_millis(10), long.into_future()).await
    });
    assert!(r.is_err(), "the timeout fired");
    tx.send(()).unwrap();
    match b {
        Err(JoinError::Panicked(p)) => assert_eq!(p.message(), Some("in the task")),
        other => panic!("expected a panic, got {other:?}"),
    }
}
