//! The baseline timer for the timer benchmarks: what one writes first.
//!
//! One `Mutex` around a `BinaryHeap` of `(deadline, id)` and a `HashMap` from
//! id to boxed callback, one `Condvar`, one thread. `cancel` removes the
//! callback from the map; the heap entry stays until its deadline and is
//! skipped then (lazy deletion, as a `BinaryHeap` cannot remove an arbitrary
//! element). Every `schedule` and `cancel` takes the one lock.
//!
//! This is a fair baseline, not a straw man: it is correct, it wakes its
//! thread only when a new deadline is the earliest, and it runs callbacks
//! outside the lock.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

type Callback = Box<dyn FnOnce() + Send>;

/// A timer thread built from a mutex-protected binary heap and a condvar.
pub struct NaiveTimer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    cv: Condvar,
}

struct State {
    /// Min-heap of deadlines; entries of cancelled timers stay until popped.
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    /// Callbacks of pending timers.
    callbacks: HashMap<u64, Callback>,
    next_id: u64,
    stopped: bool,
}

impl std::fmt::Debug for NaiveTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NaiveTimer").finish_non_exhaustive()
    }
}

impl Default for NaiveTimer {
    fn default() -> Self {
        Self::new()
    }
}

impl NaiveTimer {
    /// Starts the timer thread.
    pub fn new() -> Self {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                heap: BinaryHeap::new(),
                callbacks: HashMap::new(),
                next_id: 0,
                stopped: false,
            }),
            cv: Condvar::new(),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("naive-timer".into())
            .spawn(move || s.run())
            .expect("spawn the naive timer thread");
        NaiveTimer {
            shared,
            thread: Some(thread),
        }
    }

    /// Runs `f` on the timer thread at `deadline`; returns an id for
    /// [`cancel`](Self::cancel).
    pub fn schedule(&self, deadline: Instant, f: impl FnOnce() + Send + 'static) -> u64 {
        let mut st = self.shared.lock();
        let id = st.next_id;
        st.next_id += 1;
        st.callbacks.insert(id, Box::new(f));
        let earliest = st.heap.peek().is_none_or(|top| deadline < top.0 .0);
        st.heap.push(Reverse((deadline, id)));
        drop(st);
        if earliest {
            self.shared.cv.notify_one();
        }
        id
    }

    /// Cancels a pending timer; `true` if it had not run yet.
    pub fn cancel(&self, id: u64) -> bool {
        let removed = self.shared.lock().callbacks.remove(&id);
        removed.is_some()
    }
}

impl Drop for NaiveTimer {
    fn drop(&mut self) {
        self.shared.lock().stopped = true;
        self.shared.cv.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn run(&self) {
        let mut st = self.lock();
        while !st.stopped {
            let now = Instant::now();
            match st.heap.peek().map(|e| e.0) {
                Some((deadline, id)) if deadline <= now => {
                    st.heap.pop();
                    if let Some(f) = st.callbacks.remove(&id) {
                        drop(st);
                        f();
                        st = self.lock();
                    }
                }
                Some((deadline, _)) => {
                    st = self
                        .cv
                        .wait_timeout(st, deadline - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                None => st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn fires_and_cancels() {
        let t = NaiveTimer::new();
        let (tx, rx) = mpsc::channel();
        let tx2 = tx.clone();
        let late = t.schedule(Instant::now() + Duration::from_secs(3600), move || {
            tx2.send(0).unwrap()
        });
        t.schedule(Instant::now(), move || tx.send(1).unwrap());
        assert_eq!(rx.recv().unwrap(), 1);
        assert!(t.cancel(late));
        assert!(!t.cancel(late));
    }
}
