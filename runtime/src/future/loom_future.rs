//! Loom models of `block_on_future` (`future.rs`): the real polls, epoch
//! and wait, with loom threads as the waiting thread and the wakers.

use super::block_on_future;
use loom::sync::{Arc, Mutex};
use loom::thread;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

fn loom_model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// A future that is ready once `ready` is set, and keeps the last waker it
/// was polled with for whoever sets it.
struct Gate {
    state: Arc<Mutex<(bool, Option<Waker>)>>,
}

impl Future for Gate {
    type Output = u32;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u32> {
        let mut st = self.state.lock().unwrap();
        if st.0 {
            return Poll::Ready(7);
        }
        st.1 = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// Opens the gate and wakes its waker, if one was left.
fn open(state: &Mutex<(bool, Option<Waker>)>) {
    let w = {
        let mut st = state.lock().unwrap();
        st.0 = true;
        st.1.take()
    };
    if let Some(w) = w {
        w.wake();
    }
}

/// The waker woken from another thread at any point: before the poll
/// returns `Pending`, between that and the wait, or during the wait. The
/// wait always ends.
#[test]
fn loom_a_wake_before_or_during_the_wait_is_not_lost() {
    loom_model(|| {
        let state = Arc::new(Mutex::new((false, None)));
        let opener = {
            let state = state.clone();
            thread::spawn(move || open(&state))
        };
        let v = block_on_future(Gate { state }).unwrap();
        assert_eq!(v, 7);
        opener.join().unwrap();
    });
}

/// Two wakes from two threads, of clones of one waker, and a future that
/// needs both: each is seen.
#[test]
fn loom_two_wakes_of_one_wait_are_both_seen() {
    loom_model(|| {
        let a = Arc::new(Mutex::new((false, None)));
        let b = Arc::new(Mutex::new((false, None)));
        let ta = {
            let a = a.clone();
            thread::spawn(move || open(&a))
        };
        let tb = {
            let b = b.clone();
            thread::spawn(move || open(&b))
        };
        let (mut ga, mut gb) = (Gate { state: a }, Gate { state: b });
        let both = std::future::poll_fn(move |cx| {
            let ra = Pin::new(&mut ga).poll(cx);
            let rb = Pin::new(&mut gb).poll(cx);
            match (ra, rb) {
                (Poll::Ready(x), Poll::Ready(y)) => Poll::Ready(x + y),
                _ => Poll::Pending,
            }
        });
        assert_eq!(block_on_future(both).unwrap(), 14);
        ta.join().unwrap();
        tb.join().unwrap();
    });
}
