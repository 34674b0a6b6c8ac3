//! A channel for one value, for tasks and plain threads alike.
//!
//! # Design
//!
//! One allocation: an `Arc` holding the value's cell and a butex whose
//! value is the channel's state, a word of flags. The sender writes the
//! value, then sets `VALUE` with a CAS that fails if the receiver has gone
//! (`RX_GONE`; the sender then takes its value back). The receiver, to
//! wait, sets `PARKED` with a CAS on the state it read and waits while the
//! state is that word; the sender's CAS (or the sender's drop, which sets
//! `TX_GONE`) changes the word, and wakes the butex only if `PARKED` was
//! set. All of it is one word changed by read-modify-writes, so no fence
//! is needed: a change either comes before the receiver's CAS (which then
//! fails, and the receiver looks again) or after it (and sees `PARKED`).
//!
//! A receive whose wait ends early (a deadline, an interrupt, a stop)
//! clears `PARKED` and leaves the channel as it was: the receiver can try
//! again, and a value sent meanwhile waits for it. The value is moved out
//! by whoever owns it last: the receiver (`TAKEN`), the sender taking it
//! back, or the drop of the shared state when the receiver went without
//! taking it.

use super::mpsc::{RecvError, RecvTimeoutError, TryRecvError};
use super::select_source::SelectSource;
use crate::error::WaitError;
use crate::loom::sync::atomic::Ordering;
use crate::loom::UnsafeCell;
use crate::meta::activity::WaitKind;
use crate::meta::wait_queue::{WaitPolicy, WaitQueue};
use crate::wait::{self, Butex};
use std::fmt;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The value is written and published.
const VALUE: u32 = 1;
/// The sender went without sending.
const TX_GONE: u32 = 2;
/// The receiver has been dropped.
const RX_GONE: u32 = 4;
/// The receiver waits, or is about to: a change must wake it.
const PARKED: u32 = 8;
/// The receiver has moved the value out.
const TAKEN: u32 = 16;

struct Inner<T> {
    state: Butex,
    value: UnsafeCell<MaybeUninit<T>>,
}

impl<T> Drop for Inner<T> {
    fn drop(&mut self) {
        if self.state.value().load(Ordering::Acquire) & (VALUE | TAKEN) == VALUE {
            // SAFETY: `VALUE` without `TAKEN`: the value was written and
            // nobody moved it out; we are the last owner.
            self.value.with_mut(|p| unsafe { (*p).assume_init_drop() });
        }
    }
}

/// Creates a channel for one value.
///
/// ```
/// use spindle::sync::{mpsc, oneshot};
///
/// let rt = spindle::Runtime::builder().workers(2).build().unwrap();
/// rt.block_on(|| {
///     // Each request carries the sender of its reply.
///     let (requests, inbox) = mpsc::channel::<(u32, oneshot::Sender<u32>)>();
///     let server = spindle::spawn(move || {
///         for (n, reply) in inbox.iter() {
///             let _ = reply.send(n * 2);
///         }
///     });
///     let (reply, mut response) = oneshot::channel();
///     requests.send((21, reply)).unwrap();
///     assert_eq!(response.recv(), Ok(42));
///     drop(requests);
///     server.join().unwrap();
///
///     // A sender dropped without sending: the receive says so.
///     let (tx, mut rx) = oneshot::channel::<u32>();
///     drop(tx);
///     assert_eq!(rx.recv(), Err(mpsc::RecvError::Disconnected));
/// });
/// ```
pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let inner = Arc::new(Inner {
        state: Butex::new(0),
        value: UnsafeCell::new(MaybeUninit::uninit()),
    });
    (
        Sender {
            inner: ManuallyDrop::new(inner.clone()),
        },
        Receiver { inner },
    )
}

/// The sending half of a [`channel`]: sends one value.
pub struct Sender<T> {
    /// Dropped by hand: by `send`, or by `Drop`, which also marks the
    /// sender gone.
    inner: ManuallyDrop<Arc<Inner<T>>>,
}

/// The receiving half of a [`channel`].
pub struct Receiver<T> {
    inner: Arc<Inner<T>>,
}

// SAFETY: the channel moves one `T` from the sender's thread to the
// receiver's, and does nothing else with it.
unsafe impl<T: Send> Send for Sender<T> {}
// SAFETY: a `&Sender` can do nothing (`send` takes the sender by value).
unsafe impl<T: Send> Sync for Sender<T> {}
// SAFETY: as for `Sender`.
unsafe impl<T: Send> Send for Receiver<T> {}
// SAFETY: every method that touches the value takes `&mut self`.
unsafe impl<T: Send> Sync for Receiver<T> {}

impl<T> Sender<T> {
    /// Sends `value`; never waits. Fails, handing the value back, if the
    /// receiver has been dropped.
    pub fn send(self, value: T) -> Result<(), T> {
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped, so the `Arc` is moved out once.
        let inner = ManuallyDrop::into_inner(unsafe { ptr::read(&this.inner) });
        // SAFETY: until `VALUE` is set only the sender touches the cell,
        // and there is one sender.
        inner.value.with_mut(|p| unsafe { (*p).write(value) });
        let published =
            inner
                .state
                .value()
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                    (s & RX_GONE == 0).then_some(s | VALUE)
                });
        match published {
            Ok(prev) => {
                if prev & PARKED != 0 {
                    inner.state.wake_one();
                }
                Ok(())
            }
            // SAFETY: `VALUE` was not set: the value is still ours alone.
            Err(_) => Err(inner.value.with(|p| unsafe { (*p).assume_init_read() })),
        }
    }

    /// Whether the receiver has been dropped (a send would fail).
    pub fn is_closed(&self) -> bool {
        self.inner.state.value().load(Ordering::Relaxed) & RX_GONE != 0
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        // SAFETY: dropped once, here (`send` forgets the sender).
        let inner = unsafe { ManuallyDrop::take(&mut self.inner) };
        let prev = inner.state.value().fetch_or(TX_GONE, Ordering::AcqRel);
        if prev & PARKED != 0 {
            inner.state.wake_one();
        }
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender").finish_non_exhaustive()
    }
}

impl<T> Receiver<T> {
    /// Receives the value, waiting for it. `Disconnected` if the sender
    /// went without sending (or the value was already received). The wait
    /// also ends at the deadline of an enclosing
    /// [`with_deadline`](crate::with_deadline) scope, or when the task is
    /// [`interrupt`](crate::interrupt)ed or [`stop`](crate::stop)ped; the
    /// receiver is then as it was, and may receive again.
    pub fn recv(&mut self) -> Result<T, RecvError> {
        self.recv_inner(None).map_err(RecvError::from_timeout)
    }

    /// Like [`recv`](Self::recv), giving up at `deadline` with
    /// [`RecvTimeoutError::Timeout`].
    pub fn recv_deadline(&mut self, deadline: Instant) -> Result<T, RecvTimeoutError> {
        self.recv_inner(Some(deadline))
    }

    /// Like [`recv`](Self::recv), giving up after `timeout`.
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        self.recv_inner(Instant::now().checked_add(timeout))
    }

    /// Receives the value if it has been sent, without waiting.
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        let s = self.inner.state.value().load(Ordering::Acquire);
        self.take(s)
    }

    /// The value, if state `s` (read with `Acquire`) says it is there.
    /// Called only from methods that take `&mut self`.
    fn take(&self, s: u32) -> Result<T, TryRecvError> {
        if s & TAKEN != 0 {
            return Err(TryRecvError::Disconnected);
        }
        if s & VALUE != 0 {
            // SAFETY: `VALUE` (acquired) says the value is written, and
            // the sender touches it no more; `TAKEN` was not set, and
            // our callers' `&mut self` makes this the only receive running:
            // we move it out once.
            let v = self
                .inner
                .value
                .with(|p| unsafe { (*p).assume_init_read() });
            // Only the receiver changes the state once `VALUE` is set
            // (the sender is gone), so a plain RMW with no ordering.
            self.inner.state.value().fetch_or(TAKEN, Ordering::Relaxed);
            return Ok(v);
        }
        if s & TX_GONE != 0 {
            return Err(TryRecvError::Disconnected);
        }
        Err(TryRecvError::Empty)
    }

    fn recv_inner(&mut self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        let st = self.inner.state.value();
        let mut s = st.load(Ordering::Acquire);
        loop {
            match self.take(s) {
                Err(TryRecvError::Empty) => {}
                r => return r.map_err(RecvTimeoutError::from),
            }
            if s & PARKED == 0 {
                if let Err(now) =
                    st.compare_exchange(s, s | PARKED, Ordering::Acquire, Ordering::Acquire)
                {
                    s = now;
                    continue;
                }
                s |= PARKED;
            }
            let ended = wait::wait(
                self.inner.state.queue(),
                s,
                deadline,
                WaitPolicy::Interruptible,
                WaitKind::Channel,
            );
            if let Err(
                e @ (WaitError::TimedOut
                | WaitError::DeadlineExceeded
                | WaitError::Interrupted
                | WaitError::Stopped),
            ) = ended
            {
                // Leave the channel as it was; a wake-up meant for this
                // wait finds nobody.
                st.fetch_and(!PARKED, Ordering::Relaxed);
                return Err(match e {
                    WaitError::TimedOut => RecvTimeoutError::Timeout,
                    WaitError::Interrupted => RecvTimeoutError::Interrupted,
                    WaitError::Stopped => RecvTimeoutError::Stopped,
                    _ => RecvTimeoutError::DeadlineExceeded,
                });
            }
            s = st.load(Ordering::Acquire);
        }
    }

    /// Whether the sender has gone without sending; a value sent and not
    /// yet received still counts as open.
    pub fn is_closed(&self) -> bool {
        self.inner.state.value().load(Ordering::Relaxed) & (VALUE | TX_GONE) == TX_GONE
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        // A value sent and not taken is dropped with the shared state,
        // by whichever handle goes last.
        self.inner.state.value().fetch_or(RX_GONE, Ordering::AcqRel);
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receiver").finish_non_exhaustive()
    }
}

#[cfg(all(test, loom))]
#[path = "loom_oneshot.rs"]
mod loom_oneshot;

/// A receive in a `Select`: announced as `recv` parks (`PARKED` set with a
/// CAS on the state read), so that the send or the sender's drop wakes the
/// select's registration. See `select.rs`.
impl<T> SelectSource for Receiver<T> {
    fn is_ready(&self) -> bool {
        self.inner.state.value().load(Ordering::Acquire) & (VALUE | TX_GONE | TAKEN) != 0
    }

    fn announce(&self) -> Option<(&WaitQueue, u32)> {
        let st = self.inner.state.value();
        let mut s = st.load(Ordering::Acquire);
        loop {
            if s & (VALUE | TX_GONE | TAKEN) != 0 {
                return None;
            }
            if s & PARKED != 0 {
                return Some((self.inner.state.queue(), s));
            }
            match st.compare_exchange(s, s | PARKED, Ordering::Acquire, Ordering::Acquire) {
                Ok(_) => return Some((self.inner.state.queue(), s | PARKED)),
                Err(now) => s = now,
            }
        }
    }

    fn withdraw(&self) {
        self.inner
            .state
            .value()
            .fetch_and(!PARKED, Ordering::Relaxed);
    }
}
