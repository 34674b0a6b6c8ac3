//! Async interop, both directions: a task waits for a future
//! ([`block_on_future`]), and an async program awaits a task (`JoinHandle`
//! is `IntoFuture`).
//!
//! **A future in a task.** `block_on_future` polls the future on the task's
//! own stack. While it is pending, the task waits on a butex whose value is
//! an epoch that every wake-up bumps: the epoch is read before each poll,
//! and the wait is for it to move, so a wake-up that lands during the poll
//! (or before the wait is linked) is never lost: the butex's check under
//! its lock sees the bump. The waker handed to the first poll lives on the
//! caller's stack and allocates nothing; only a clone (a future that keeps
//! its waker to wake it later, as every real one does) makes the shared
//! epoch, once per call, and each wake-up is a bump and a butex wake: no
//! allocation. An epoch no waker refers to any more is kept for the
//! thread's next call, so a future waited on in a loop allocates nothing
//! after its first round. A wake-up through the borrowed waker itself, during
//! a poll, sets a flag and the future is polled again (after a yield, in a
//! task). Deadline scopes, `interrupt` and `stop` end the wait as any
//! interruptible wait; the future is then dropped, once, by the caller's
//! frame as it returns.
//!
//! **A task in an async program.** Awaiting a `JoinHandle` registers a
//! node on the task's join queue whose waiter is the future's waker (the
//! way a `Select` registers its relay): the task's end claims it under the
//! queue's lock and wakes the waker. No thread blocks. A finished task's
//! result is taken at the first poll, without registering.

use crate::error::{JoinError, WaitError};
use crate::loom::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use crate::meta::activity::WaitKind;
use crate::meta::wait_queue::{WaitNode, WaitPolicy, Waiter};
use crate::sched;
use crate::task::JoinHandle;
use crate::wait::{self, Butex};
use std::future::{Future, IntoFuture};
use std::pin::{pin, Pin};
use std::ptr;
use std::sync::Arc;
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Wake, Waker};

/// What the clones of a `block_on_future` waker share: the epoch its wait
/// waits on.
struct Epoch {
    butex: Butex,
}

impl Epoch {
    fn bump(&self) {
        self.butex.value().fetch_add(1, Ordering::Release);
        // One waiter at most: the task (or thread) in `block_on_future`.
        self.butex.wake_one();
    }
}

impl Wake for Epoch {
    fn wake(self: Arc<Self>) {
        self.bump();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.bump();
    }
}

/// The waker of the polls themselves, on the caller's stack: a clone of it
/// makes (once) and hands out the shared [`Epoch`].
struct Local {
    /// The shared epoch, made by the first clone: an `Arc::into_raw`, or
    /// null. (An atomic, not a `Cell`: a future may hand its borrowed
    /// waker to a scoped thread during its poll.)
    epoch: AtomicPtr<Epoch>,
    /// Woken through the borrowed waker (during a poll): poll again.
    woken: AtomicBool,
}

impl Local {
    /// The shared epoch, if a clone has made it.
    fn get(&self) -> Option<&Epoch> {
        // SAFETY: non-null, it is an `Arc::into_raw` this `Local` owns a
        // count of until it drops.
        unsafe { self.epoch.load(Ordering::Acquire).as_ref() }
    }

    /// The shared epoch, made if need be; a new count of it.
    fn clone_epoch(&self) -> Arc<Epoch> {
        let mut p = self.epoch.load(Ordering::Acquire);
        if p.is_null() {
            let made = Arc::into_raw(spare_epoch::take().unwrap_or_else(|| {
                Arc::new(Epoch {
                    butex: Butex::new(0),
                })
            }))
            .cast_mut();
            p = match self.epoch.compare_exchange(
                ptr::null_mut(),
                made,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => made,
                Err(theirs) => {
                    // SAFETY: ours, never shared: made just above.
                    drop(unsafe { Arc::from_raw(made) });
                    theirs
                }
            };
        }
        // SAFETY: an `Arc::into_raw` whose count this `Local` holds.
        unsafe {
            Arc::increment_strong_count(p);
            Arc::from_raw(p)
        }
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        let p = self.epoch.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: the count this `Local` held (see `clone_epoch`).
            let mut epoch = unsafe { Arc::from_raw(p) };
            // No waker of it left anywhere (the only handle: a bump in
            // flight holds a count, so none is): the next call on this
            // thread may have it.
            if Arc::get_mut(&mut epoch).is_some() {
                spare_epoch::keep(epoch);
            }
        }
    }
}

/// One epoch kept per thread for the next `block_on_future` that needs
/// one: a future waited on in a loop (a `Notify` each round, say) then
/// allocates nothing per wait. Kept only once no waker of it is left, so a
/// late wake-up can never reach the next call. None under loom, whose
/// models must not carry state from one run to the next.
mod spare_epoch {
    use super::Epoch;
    use std::sync::Arc;

    #[cfg(not(loom))]
    thread_local! {
        static SPARE: std::cell::Cell<Option<Arc<Epoch>>> = const { std::cell::Cell::new(None) };
    }

    /// The thread's spare epoch, if it has one.
    pub(super) fn take() -> Option<Arc<Epoch>> {
        #[cfg(not(loom))]
        return SPARE.try_with(|s| s.take()).ok().flatten();
        #[cfg(loom)]
        None
    }

    /// Keeps `epoch`, which nothing else refers to, for the thread's next
    /// call (dropped if the thread is being torn down, or under loom).
    pub(super) fn keep(epoch: Arc<Epoch>) {
        #[cfg(not(loom))]
        let _ = SPARE.try_with(|s| s.set(Some(epoch)));
        #[cfg(loom)]
        drop(epoch);
    }
}

static LOCAL_WAKER: RawWakerVTable =
    RawWakerVTable::new(local_clone, local_wake, local_wake, local_drop);

/// A clone outlives the poll: it is a waker of the shared epoch.
unsafe fn local_clone(data: *const ()) -> RawWaker {
    // SAFETY: `data` is the `Local` of a `block_on_future` whose poll is
    // under way (a borrowed waker is used only during its poll).
    let local = unsafe { &*data.cast::<Local>() };
    let waker = std::mem::ManuallyDrop::new(Waker::from(local.clone_epoch()));
    RawWaker::new(waker.data(), waker.vtable())
}

unsafe fn local_wake(data: *const ()) {
    // SAFETY: as in `local_clone`.
    let local = unsafe { &*data.cast::<Local>() };
    local.woken.store(true, Ordering::Release);
    if let Some(e) = local.get() {
        e.bump();
    }
}

unsafe fn local_drop(_: *const ()) {}

/// Runs `future` to completion inside the current task, suspending only
/// the task while it is pending (its waker wakes the task, from any thread,
/// any number of times, before or after the task waits); on a plain thread
/// it blocks the thread.
///
/// The future must not block the thread itself (a std lock held long, a
/// blocking syscall): it runs on the worker's thread, as the task does.
///
/// ```
/// use std::time::{Duration, Instant};
///
/// let rt = spindle::Runtime::builder().workers(1).build().unwrap();
/// let v = rt.block_on(|| spindle::task::block_on_future(async { 6 * 7 }));
/// assert_eq!(v, Ok(42));
///
/// // A future that never ends is ended by the deadline scope around it.
/// let soon = Instant::now() + Duration::from_millis(5);
/// let r = rt.block_on(|| {
///     spindle::with_deadline(soon, || {
///         spindle::task::block_on_future(std::future::pending::<()>())
///     })
/// });
/// assert_eq!(r, Err(spindle::WaitError::DeadlineExceeded));
/// ```
///
/// # Errors
/// The deadline of an enclosing [`with_deadline`](crate::with_deadline)
/// scope (`DeadlineExceeded`), an [`interrupt`](crate::interrupt)
/// (`Interrupted`) or a [`stop`](crate::stop) (`Stopped`) of the task
/// ends the wait; the future is then dropped, unfinished.
pub fn block_on_future<F: Future>(future: F) -> Result<F::Output, WaitError> {
    let mut future = pin!(future);
    let local = Local {
        epoch: AtomicPtr::new(ptr::null_mut()),
        woken: AtomicBool::new(false),
    };
    // SAFETY: the vtable's functions keep the waker's contract: `local`
    // outlives every use of this borrowed waker (the polls below), and a
    // clone is an `Arc` waker that owns what it uses.
    let waker = unsafe {
        Waker::from_raw(RawWaker::new(
            std::ptr::from_ref(&local).cast(),
            &LOCAL_WAKER,
        ))
    };
    let mut cx = Context::from_waker(&waker);
    // What a task waits on when the future kept no waker: nothing will
    // wake it but its deadline scope, an interrupt or a stop.
    let forgotten = Butex::new(0);
    loop {
        let seen = local.get().map(|e| e.butex.value().load(Ordering::Acquire));
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return Ok(v);
        }
        // A load first: the flag is almost never set, and the swap is a
        // locked instruction.
        if local.woken.load(Ordering::Relaxed) && local.woken.swap(false, Ordering::AcqRel) {
            // Woken during its own poll: poll again, after the worker's
            // other tasks have had a turn.
            if sched::suspendable_task().is_some() {
                crate::task::yield_now();
            }
            continue;
        }
        let (queue, expected) = match local.get() {
            // An epoch made during this poll started at 0.
            Some(e) => (e.butex.queue(), seen.unwrap_or(0)),
            None => (forgotten.queue(), 0),
        };
        match wait::wait(
            queue,
            expected,
            None,
            WaitPolicy::Interruptible,
            WaitKind::Future,
        ) {
            Ok(()) | Err(WaitError::WouldBlock) => {}
            Err(e) => return Err(e),
        }
    }
}

/// The future of an awaited [`JoinHandle`]: the task's value, or why there
/// is none.
pub struct JoinFuture<T> {
    handle: Option<JoinHandle<T>>,
    /// The registration on the task's join queue, whose waiter is the last
    /// poll's waker (boxed: it must not move while linked).
    node: Option<Box<WaitNode>>,
}

impl<T> std::fmt::Debug for JoinFuture<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinFuture")
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}

// SAFETY: the node is touched by the task's end only under its queue's
// lock, as this future's unlinking is; its waker is `Send + Sync`. The
// handle is `Send` for every `T` (it holds none), and the future yields a
// `T` only as its output, which the caller's own bounds govern.
unsafe impl<T> Send for JoinFuture<T> {}

/// An async program awaits a task: `handle.await` is its value, or a
/// `JoinError` (`Panicked` for its panic), without blocking a thread.
impl<T> IntoFuture for JoinHandle<T> {
    type Output = Result<T, JoinError>;
    type IntoFuture = JoinFuture<T>;

    fn into_future(self) -> JoinFuture<T> {
        JoinFuture {
            handle: Some(self),
            node: None,
        }
    }
}

impl<T> JoinFuture<T> {
    /// Takes back the registration, if any.
    fn unregister(&mut self) {
        if let (Some(node), Some(h)) = (self.node.take(), &self.handle) {
            // SAFETY: the node is ours and alive; its queue is the join
            // queue of the task our handle holds.
            unsafe { h.join_wait().0.unlink_registration(&node) };
        }
    }
}

impl<T> Future for JoinFuture<T> {
    type Output = Result<T, JoinError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let Some(h) = &this.handle else {
            panic!("a JoinFuture polled after it completed");
        };
        if let Some(r) = h.try_take() {
            this.unregister();
            this.handle = None;
            return Poll::Ready(r);
        }
        // (Re-)register with this poll's waker.
        this.unregister();
        let h = this.handle.as_ref().expect("checked above");
        let (queue, running) = h.join_wait();
        let node = Box::new(WaitNode::new(
            queue,
            running,
            Waiter::Waker(cx.waker().clone()),
            WaitPolicy::Uninterruptible,
            None,
        ));
        // SAFETY: the node is boxed, so it does not move while linked, and
        // `unregister` (here or in drop) unlinks it before it goes.
        if unsafe { queue.link_registration(&node) } {
            this.node = Some(node);
            return Poll::Pending;
        }
        // The task ended meanwhile.
        let r = h.try_take().expect("the task has ended");
        this.handle = None;
        Poll::Ready(r)
    }
}

impl<T> Drop for JoinFuture<T> {
    fn drop(&mut self) {
        self.unregister();
    }
}

impl<T> Unpin for JoinFuture<T> {}

#[cfg(all(test, loom))]
mod loom_future;
