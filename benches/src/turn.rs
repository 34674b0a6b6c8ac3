//! [`Turn`]: the least a future woken by another party can be, so that a
//! benchmark of `block_on_future` measures the bridge, not the future
//! (`benches/async_interop.rs`, `src/bin/instructions.rs`).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::task::{Poll, Waker};

/// A flag one side gives and the other takes, and the waker of the poll
/// that found it unset.
#[derive(Debug, Default)]
pub struct Turn {
    given: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Turn {
    /// Gives the turn, waking the poll that waits for it, if any.
    pub fn give(&self) {
        self.given.store(true, Ordering::Release);
        if let Some(w) = self.waker.lock().unwrap().take() {
            w.wake();
        }
    }

    /// A future that is ready once the turn is given, and takes it.
    pub fn take(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            if self.given.swap(false, Ordering::AcqRel) {
                return Poll::Ready(());
            }
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            // Given between the check and the store: its wake found no waker.
            if self.given.swap(false, Ordering::AcqRel) {
                return Poll::Ready(());
            }
            Poll::Pending
        })
    }
}
