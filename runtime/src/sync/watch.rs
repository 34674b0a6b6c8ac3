//! A channel for one value that changes, watched by many receivers
//! (tokio's `watch`), for tasks and plain threads alike.
//!
//! # Design
//!
//! One `Arc` holds the current value, a count of receivers, and a butex
//! whose value is the channel's state: a version, bumped by every send,
//! above a `CLOSED` bit that the sender's drop sets. Each receiver keeps
//! the version it saw last.
//!
//! - **send**: swaps the new value in and bumps the version (together,
//!   under the value's lock), then wakes every waiter of the butex. The
//!   old value is dropped after the lock is let go.
//! - **changed**: loads the state; a version other than the one it saw
//!   is a change (it marks that version seen and returns); otherwise, if
//!   `CLOSED` is set, the channel is over (`Disconnected`); otherwise it
//!   waits on the butex *while the state is the word it loaded*. A send
//!   (or the sender's drop) between the load and the wait has changed the
//!   word, which the wait checks under the butex's lock, so the wait
//!   returns at once: no change is lost, and no fence is needed (the
//!   send's bump is a read-modify-write of the word the waiter compares,
//!   as with every butex protocol).
//!
//! **Why the value is a snapshot behind a plain mutex.** The value is
//! kept as an `Arc<T>`, and a [`Ref`] holds a clone of that `Arc`, not a
//! lock. A `Ref` that locked the value (as tokio's read guard does) would
//! make every send wait until the last `Ref` went; a receiver that holds
//! one across a wait (a sleep, or `changed()` itself) would then hold up
//! its sender for as long, and if that lock were a `std` one, a sender on
//! the same worker would block the worker thread, so the task holding the
//! `Ref` could never run again to let it go: the worker would deadlock
//! for good. A lock of [`sync`](crate::sync) would only suspend the
//! sending task, but `send` and `borrow` would then become waits that a
//! deadline scope can end, which their shapes (`borrow` cannot fail)
//! leave no room for. With snapshots, a send never waits for a reader:
//! it replaces the `Arc`, and a `Ref` still held keeps the value it was
//! made from. The lock around the `Arc` is held only to clone or swap
//! it: no user code runs under it (the old value is dropped after it is
//! let go), and no wait, so it is held for a few instructions and never
//! across a switch of tasks. A `std` mutex (through the crate's loom
//! shim) is the right lock for that: it never makes a task wait for
//! another task of its own worker. The price is one allocation per send,
//! which suits what a watch channel carries (configuration, a shutdown
//! flag, a status).
//!
//! So holding a `Ref` across a wait blocks nobody; but it pins the value
//! it was made from, which may be outdated by then: borrow again after a
//! wait to see the current value.
//!
//! **Versions.** The version is 31 bits and wraps: a receiver that looks
//! after exactly 2^31 sends (or a multiple) since its last look would take
//! the newest value for one it saw. Every other count of sends is seen as
//! a change.
//!
//! ```
//! fn send_sync<T: Send + Sync>() {}
//! send_sync::<spindle::sync::watch::Sender<String>>();
//! send_sync::<spindle::sync::watch::Receiver<String>>();
//! ```
//!
//! The value is shared by every receiver, on any thread, so it must be
//! `Send + Sync` for a handle to move to another thread:
//!
//! ```compile_fail
//! fn send<T: Send>() {}
//! send::<spindle::sync::watch::Receiver<std::cell::Cell<u8>>>();
//! ```

use super::mpsc::{RecvError, RecvTimeoutError};
use crate::error::WaitError;
use crate::loom::lock;
use crate::loom::sync::atomic::{AtomicUsize, Ordering};
use crate::loom::sync::Mutex;
use crate::meta::activity::WaitKind;
use crate::meta::wait_queue::WaitPolicy;
use crate::wait::{self, Butex};
use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The sender has gone: no value will come after the current one. The
/// state's lowest bit; the version is the rest of the word.
const CLOSED: u32 = 1;
/// What one send adds to the state: one version, above `CLOSED`.
const ONE_VERSION: u32 = 2;

/// The version held in state word `s`.
#[inline]
fn version(s: u32) -> u32 {
    s & !CLOSED
}

/// The state shared by a channel's handles.
struct Shared<T> {
    /// The version and `CLOSED`; `changed` waits on it.
    state: Butex,
    /// The current value. Locked only to clone or swap the `Arc`; the
    /// version is bumped under the same lock, so that a borrow sees a
    /// value and its version together.
    value: Mutex<Arc<T>>,
    /// Live receivers; a send with none fails.
    receivers: AtomicUsize,
}

impl<T> Shared<T> {
    /// The current value, and the version it was sent as.
    fn snapshot(&self) -> (Arc<T>, u32) {
        let value = lock(&self.value);
        let v = version(self.state.value().load(Ordering::Acquire));
        (Arc::clone(&value), v)
    }
}

/// Creates a watch channel holding `init`; the receiver has seen `init`
/// (its first [`changed`](Receiver::changed) waits for a send).
///
/// ```
/// use spindle::sync::watch;
///
/// let rt = spindle::Runtime::builder().workers(2).build().unwrap();
/// rt.block_on(|| {
///     let (shutdown, rx) = watch::channel(false);
///     let servers: Vec<_> = (0..3)
///         .map(|_| {
///             let mut rx = rx.clone();
///             spindle::spawn(move || {
///                 // ... serve, until told to stop:
///                 while !*rx.borrow() {
///                     rx.changed().unwrap();
///                 }
///                 "drained"
///             })
///         })
///         .collect();
///     shutdown.send(true).unwrap();
///     for s in servers {
///         assert_eq!(s.join().unwrap(), "drained");
///     }
/// });
/// ```
pub fn channel<T>(init: T) -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Butex::new(0),
        value: Mutex::new(Arc::new(init)),
        receivers: AtomicUsize::new(1),
    });
    let rx = Receiver {
        shared: shared.clone(),
        seen: 0,
    };
    (Sender { shared }, rx)
}

/// The sending half of a watch [`channel`]: replaces the value and tells
/// the receivers. There is one; its drop closes the channel.
pub struct Sender<T> {
    shared: Arc<Shared<T>>,
}

/// A receiving half of a watch [`channel`]: looks at the value, and waits
/// for it to change. Clone it for another receiver, which starts out
/// having seen what this one has.
pub struct Receiver<T> {
    shared: Arc<Shared<T>>,
    /// The version this receiver saw last.
    seen: u32,
}

/// A look at a watch channel's value, from [`Receiver::borrow`] (and its
/// kin) or [`Sender::borrow`].
///
/// It holds the value as it was when borrowed (a snapshot: see the module
/// docs): a send meanwhile neither waits for it nor changes what it shows.
/// Holding one across a wait is allowed, but it then shows a value that
/// may be outdated; borrow again to see the current one.
pub struct Ref<'a, T> {
    value: Arc<T>,
    has_changed: bool,
    /// Ties the look to the handle it came from, as a guard would.
    _handle: PhantomData<&'a T>,
}

/// The value of a [`Sender::send`] that no receiver was left to see.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SendError<T>(pub T);

impl<T> Sender<T> {
    /// Replaces the value and wakes every receiver waiting in
    /// [`changed`](Receiver::changed); never waits. Fails, handing the
    /// value back and changing nothing, when every receiver has been
    /// dropped.
    pub fn send(&self, value: T) -> Result<(), SendError<T>> {
        if self.shared.receivers.load(Ordering::Relaxed) == 0 {
            return Err(SendError(value));
        }
        let new = Arc::new(value);
        let old = {
            let mut current = lock(&self.shared.value);
            let old = std::mem::replace(&mut *current, new);
            // Under the lock: a borrow sees the new value with its version.
            self.shared
                .state
                .value()
                .fetch_add(ONE_VERSION, Ordering::Release);
            old
        };
        self.shared.state.wake_all();
        // The old value is dropped here, outside the lock (unless a `Ref`
        // still holds it).
        drop(old);
        Ok(())
    }

    /// A new receiver, which has seen the current value.
    pub fn subscribe(&self) -> Receiver<T> {
        self.shared.receivers.fetch_add(1, Ordering::Relaxed);
        let seen = version(self.shared.state.value().load(Ordering::Acquire));
        Receiver {
            shared: self.shared.clone(),
            seen,
        }
    }

    /// The current value (its [`Ref::has_changed`] is false).
    pub fn borrow(&self) -> Ref<'_, T> {
        let (value, _) = self.shared.snapshot();
        Ref {
            value,
            has_changed: false,
            _handle: PhantomData,
        }
    }

    /// How many receivers there are.
    pub fn receiver_count(&self) -> usize {
        self.shared.receivers.load(Ordering::Relaxed)
    }

    /// Whether every receiver has been dropped (a send would fail).
    pub fn is_closed(&self) -> bool {
        self.receiver_count() == 0
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        self.shared
            .state
            .value()
            .fetch_or(CLOSED, Ordering::Release);
        self.shared.state.wake_all();
    }
}

impl<T: fmt::Debug> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender")
            .field("value", &*self.borrow())
            .field("receivers", &self.receiver_count())
            .finish()
    }
}

impl<T> Receiver<T> {
    /// The current value, without marking it seen: a later
    /// [`changed`](Self::changed) still returns at once for it, if this
    /// receiver had not seen it. [`Ref::has_changed`] says whether it is
    /// newer than the value this receiver saw last.
    pub fn borrow(&self) -> Ref<'_, T> {
        let (value, v) = self.shared.snapshot();
        Ref {
            value,
            has_changed: v != self.seen,
            _handle: PhantomData,
        }
    }

    /// The current value, marked seen: `changed` waits for a newer one.
    pub fn borrow_and_update(&mut self) -> Ref<'_, T> {
        let (value, v) = self.shared.snapshot();
        let has_changed = v != self.seen;
        self.seen = v;
        Ref {
            value,
            has_changed,
            _handle: PhantomData,
        }
    }

    /// Whether a value newer than the one this receiver saw last has been
    /// sent, without waiting or marking it seen. `Err(Disconnected)` when
    /// the sender has gone and no newer value is left to see: just when
    /// [`changed`](Self::changed) would fail at once. (tokio's fails as
    /// soon as the sender has gone.)
    pub fn has_changed(&self) -> Result<bool, RecvError> {
        let s = self.shared.state.value().load(Ordering::Acquire);
        if version(s) != self.seen {
            Ok(true)
        } else if s & CLOSED != 0 {
            Err(RecvError::Disconnected)
        } else {
            Ok(false)
        }
    }

    /// Waits for a value newer than the one this receiver saw last, and
    /// marks the newest one seen ([`borrow`](Self::borrow) it next). A
    /// value sent before the call, and not yet seen, returns at once; so
    /// do several sends since the last look: they are one change.
    ///
    /// `Disconnected` once the sender has gone and no newer value is left
    /// to see. The wait also ends at the deadline of an enclosing
    /// [`with_deadline`](crate::with_deadline) scope
    /// (`DeadlineExceeded`), and when the task is
    /// [`interrupt`](crate::interrupt)ed or [`stop`](crate::stop)ped
    /// (`Interrupted`, `Stopped`); the receiver is then as it was, and a
    /// change that came meanwhile is still there for the next call.
    pub fn changed(&mut self) -> Result<(), RecvError> {
        self.changed_inner(None).map_err(RecvError::from_timeout)
    }

    /// Like [`changed`](Self::changed), giving up at `deadline` with
    /// [`RecvTimeoutError::Timeout`].
    pub fn changed_deadline(&mut self, deadline: Instant) -> Result<(), RecvTimeoutError> {
        self.changed_inner(Some(deadline))
    }

    /// Like [`changed`](Self::changed), giving up after `timeout`.
    pub fn changed_timeout(&mut self, timeout: Duration) -> Result<(), RecvTimeoutError> {
        self.changed_inner(Instant::now().checked_add(timeout))
    }

    fn changed_inner(&mut self, deadline: Option<Instant>) -> Result<(), RecvTimeoutError> {
        let state = &self.shared.state;
        loop {
            let s = state.value().load(Ordering::Acquire);
            if version(s) != self.seen {
                self.seen = version(s);
                return Ok(());
            }
            if s & CLOSED != 0 {
                return Err(RecvTimeoutError::Disconnected);
            }
            // Waits while the state is still `s`: a send or the sender's
            // drop since the load has changed it, and the wait returns at
            // once (see the module docs).
            match wait::wait(
                state.queue(),
                s,
                deadline,
                WaitPolicy::Interruptible,
                WaitKind::Channel,
            ) {
                Ok(()) | Err(WaitError::WouldBlock) => {}
                Err(WaitError::TimedOut) => return Err(RecvTimeoutError::Timeout),
                Err(WaitError::Interrupted) => return Err(RecvTimeoutError::Interrupted),
                Err(WaitError::Stopped) => return Err(RecvTimeoutError::Stopped),
                Err(WaitError::DeadlineExceeded) => return Err(RecvTimeoutError::DeadlineExceeded),
            }
        }
    }

    /// Whether the sender has gone (values already sent can still be
    /// borrowed, and one not yet seen still counts as a change).
    pub fn is_closed(&self) -> bool {
        self.shared.state.value().load(Ordering::Relaxed) & CLOSED != 0
    }

    /// Whether `self` and `other` watch the same channel.
    pub fn same_channel(&self, other: &Receiver<T>) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}

impl<T> Clone for Receiver<T> {
    /// Another receiver of the same channel, which has seen what this one
    /// has.
    fn clone(&self) -> Self {
        self.shared.receivers.fetch_add(1, Ordering::Relaxed);
        Receiver {
            shared: self.shared.clone(),
            seen: self.seen,
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        self.shared.receivers.fetch_sub(1, Ordering::Relaxed);
    }
}

impl<T: fmt::Debug> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receiver")
            .field("value", &*self.borrow())
            .field("has_changed", &self.has_changed())
            .finish()
    }
}

impl<T> Ref<'_, T> {
    /// Whether the value is newer than the one the receiver had seen when
    /// it was borrowed (always false for the sender's borrows).
    pub fn has_changed(&self) -> bool {
        self.has_changed
    }
}

impl<T> Deref for Ref<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: fmt::Debug> fmt::Debug for Ref<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T> SendError<T> {
    /// The value that was not sent.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> fmt::Debug for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SendError").finish_non_exhaustive()
    }
}

impl<T> fmt::Display for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("sending on a closed watch channel: every receiver has gone")
    }
}

impl<T: Send> std::error::Error for SendError<T> {}

#[cfg(all(test, loom))]
#[path = "loom_watch.rs"]
mod loom_watch;
