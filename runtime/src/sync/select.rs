//! [`Select`]: wait for the first of several operations (receives on
//! `mpsc` and `oneshot` channels, task ends, fd readiness), for tasks and
//! plain threads alike, in crossbeam-channel's shape.
//!
//! # Protocol
//!
//! Every operation is a *source*: a queue it is woken through (a
//! channel's receiver butex, a task's join queue, an fd's readiness
//! queue) and a way to tell it is ready. `select` first looks for a ready
//! operation (a task yields once before it waits, as a receive does, so
//! that a sender on its own worker can deliver). Then it waits:
//!
//! 1. it *announces* each receive as its channel's receive would (sets the
//!    receiver's parked flag, fences, looks again), so that senders wake
//!    it; an operation found ready here ends the registration;
//! 2. it links one node per source into the source's queue, if the
//!    queue's value is still the one it announced; each node's waiter is
//!    the select's [`Relay`], which lives on the selector's stack;
//! 3. it waits on the relay's queue, an ordinary butex wait (deadline
//!    scope, `interrupt`, `stop`, and its own deadline end it);
//! 4. a waker of any source claims that source's node under the source's
//!    lock, as it would claim a receiver's, and delivers to the relay,
//!    which wakes the selector;
//! 5. the selector unlinks every node still linked (under each source's
//!    lock), withdraws its announcements, waits until no delivery to its
//!    relay is still under way, and looks again for a ready operation.
//!
//! Step 5 is a drop guard, so it also runs if the selector is unwound.
//! Nothing is taken from a source before an operation is chosen: a
//! receive that was not chosen leaves its message queued (each receiver
//! has one consumer, so the wake-up it consumed was nobody else's), and
//! [`SelectedOperation::recv`] takes the chosen one's.

use super::select_source::SelectSource;
use crate::error::WaitError;
use crate::io::{self, Interest};
use crate::meta::activity::WaitKind;
use crate::meta::wait_queue::{Relay, WaitNode, WaitPolicy, WaitQueue, Waiter};
use crate::sched;
use crate::sync::{mpsc, oneshot};
use crate::task::JoinHandle;
use crate::wait;
use std::cell::Cell;
use std::fmt;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

/// One operation of a select.
#[derive(Clone, Copy)]
enum Op<'a> {
    Source(&'a (dyn SelectSource + 'a)),
    Fd(BorrowedFd<'a>, Interest),
}

/// Waits for the first of several operations to be ready: receives on
/// [`mpsc`] and [`oneshot`] channels, the end of a task, the readiness of
/// an fd (crossbeam-channel's `Select`, for tasks and plain threads).
///
/// Add operations, then [`select`](Self::select): it returns the first
/// ready one (chosen at random among several ready at once), whose receive
/// [`SelectedOperation::recv`] then completes. A receive not chosen takes
/// nothing from its channel. The wait honours the deadline scope, an
/// [`interrupt`](crate::interrupt) and a [`stop`](crate::stop) of the
/// caller; [`select_deadline`](Self::select_deadline) adds one of its own.
///
/// ```
/// use spindle::sync::{mpsc, Select};
/// let rt = spindle::Runtime::builder().workers(1).build().unwrap();
/// rt.block_on(|| {
///     let (tx1, rx1) = mpsc::channel::<u32>();
///     let (_tx2, rx2) = mpsc::channel::<&str>();
///     spindle::spawn(move || tx1.send(7).unwrap());
///     let mut sel = Select::new();
///     let a = sel.recv(&rx1);
///     let b = sel.recv(&rx2);
///     let op = sel.select().unwrap();
///     assert_eq!(op.index(), a);
///     assert_ne!(op.index(), b);
///     assert_eq!(op.recv(&rx1).unwrap(), 7);
/// });
/// ```
///
/// The [`select!`](crate::select) macro writes this shape for receives.
/// Readiness of an fd ([`readable`](Self::readable),
/// [`writable`](Self::writable)) is waited for through the poller from a
/// task; from a plain thread it is checked every millisecond.
pub struct Select<'a> {
    ops: Ops<'a>,
}

/// The operations of a select: the first few inline, so that a select of
/// a few operations (the common case, built anew for each wait) allocates
/// nothing unless it has to wait.
struct Ops<'a> {
    inline: [Option<Op<'a>>; INLINE_OPS],
    spilled: Vec<Op<'a>>,
    len: usize,
}

const INLINE_OPS: usize = 4;

impl<'a> Ops<'a> {
    fn push(&mut self, op: Op<'a>) {
        match self.inline.get_mut(self.len) {
            Some(slot) => *slot = Some(op),
            None => self.spilled.push(op),
        }
        self.len += 1;
    }

    fn get(&self, i: usize) -> Op<'a> {
        match self.inline.get(i) {
            Some(op) => op.expect("an operation below len"),
            None => self.spilled[i - INLINE_OPS],
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn iter(&self) -> impl Iterator<Item = Op<'a>> + '_ {
        (0..self.len).map(|i| self.get(i))
    }
}

impl fmt::Debug for Select<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Select")
            .field("operations", &self.ops.len())
            .finish()
    }
}

impl Default for Select<'_> {
    fn default() -> Self {
        Self::new()
    }
}

/// The operation a [`Select`] chose: its index, and, for a receive, the
/// receive to complete.
#[must_use = "a chosen receive must be completed with `recv`"]
pub struct SelectedOperation<'a> {
    index: usize,
    op: *const (),
    _ops: std::marker::PhantomData<&'a ()>,
}

impl fmt::Debug for SelectedOperation<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SelectedOperation")
            .field("index", &self.index)
            .finish()
    }
}

impl<'a> Select<'a> {
    /// A select with no operations.
    pub fn new() -> Self {
        Select {
            ops: Ops {
                inline: [None; INLINE_OPS],
                spilled: Vec::new(),
                len: 0,
            },
        }
    }

    fn push(&mut self, op: Op<'a>) -> usize {
        self.ops.push(op);
        self.ops.len - 1
    }

    /// Adds a receive on `rx`; returns its index.
    pub fn recv<T>(&mut self, rx: &'a mpsc::Receiver<T>) -> usize {
        self.push(Op::Source(rx))
    }

    /// Adds a receive on `rx`, a oneshot receiver; returns its index. Once
    /// it is chosen, drop the select and receive with `rx.recv()` (or
    /// `try_recv`), which returns at once.
    pub fn recv_oneshot<T>(&mut self, rx: &'a mut oneshot::Receiver<T>) -> usize {
        self.push(Op::Source(&*rx))
    }

    /// Adds the end of the task of `handle` (ready once it has ended;
    /// `join` then returns at once); returns its index.
    pub fn join<T>(&mut self, handle: &'a JoinHandle<T>) -> usize {
        self.push(Op::Source(handle))
    }

    /// Adds the readability of `fd` (which must be non-blocking for the
    /// read that follows); returns its index.
    pub fn readable(&mut self, fd: BorrowedFd<'a>) -> usize {
        self.push(Op::Fd(fd, Interest::Readable))
    }

    /// Adds the writability of `fd`; returns its index.
    pub fn writable(&mut self, fd: BorrowedFd<'a>) -> usize {
        self.push(Op::Fd(fd, Interest::Writable))
    }

    /// Waits until one of the operations is ready and returns it.
    ///
    /// # Errors
    /// `DeadlineExceeded` once the enclosing deadline scope passes,
    /// `Interrupted` / `Stopped` for an [`interrupt`](crate::interrupt) /
    /// [`stop`](crate::stop) of the calling task; `WouldBlock` if there is
    /// no operation (the wait could never end). An fd whose readiness
    /// cannot be waited for (not pollable) is reported ready.
    pub fn select(&mut self) -> Result<SelectedOperation<'a>, WaitError> {
        self.select_inner(None)
    }

    /// [`select`](Self::select), ending with `TimedOut` at `deadline` if no
    /// operation is ready by then.
    pub fn select_deadline(
        &mut self,
        deadline: Instant,
    ) -> Result<SelectedOperation<'a>, WaitError> {
        self.select_inner(Some(deadline))
    }

    /// [`select_deadline`](Self::select_deadline) after `timeout`.
    pub fn select_timeout(
        &mut self,
        timeout: Duration,
    ) -> Result<SelectedOperation<'a>, WaitError> {
        self.select_inner(Instant::now().checked_add(timeout))
    }

    /// An operation ready now, if any: every one is looked at, starting at
    /// a pseudo-random one, so that a ready operation is not starved by
    /// one added before it.
    pub fn try_select(&mut self) -> Option<SelectedOperation<'a>> {
        self.ready_index().map(|i| self.selected(i))
    }

    fn selected(&self, index: usize) -> SelectedOperation<'a> {
        let op = match self.ops.get(index) {
            Op::Source(s) => (s as *const dyn SelectSource).cast::<()>(),
            Op::Fd(..) => std::ptr::null(),
        };
        SelectedOperation {
            index,
            op,
            _ops: std::marker::PhantomData,
        }
    }

    fn ready_index(&self) -> Option<usize> {
        let n = self.ops.len();
        if n == 0 {
            return None;
        }
        let start = next_start(n);
        (0..n)
            .map(|k| (start + k) % n)
            .find(|&i| match self.ops.get(i) {
                Op::Source(s) => s.is_ready(),
                Op::Fd(fd, interest) => fd_ready(fd, interest),
            })
    }

    fn select_inner(
        &mut self,
        deadline: Option<Instant>,
    ) -> Result<SelectedOperation<'a>, WaitError> {
        if self.ops.is_empty() {
            return Err(WaitError::WouldBlock);
        }
        if let Some(i) = self.ready_index() {
            return Ok(self.selected(i));
        }
        let in_task = sched::suspendable_task().is_some();
        if in_task {
            crate::task::yield_now();
            if let Some(i) = self.ready_index() {
                return Ok(self.selected(i));
            }
        }
        loop {
            let ended = self.wait_once(deadline, in_task)?;
            if let Some(i) = ended.or_else(|| self.ready_index()) {
                return Ok(self.selected(i));
            }
        }
    }

    /// Steps 1-5 of the module docs, once: `Ok(Some(i))` if operation `i`
    /// turned ready while registering, `Ok(None)` after a wake-up (the
    /// caller looks again), or the wait's error.
    fn wait_once(
        &self,
        deadline: Option<Instant>,
        in_task: bool,
    ) -> Result<Option<usize>, WaitError> {
        let relay = Relay::new();
        let mut reg = Registrations {
            nodes: Vec::with_capacity(self.ops.len()),
            announced: Vec::with_capacity(self.ops.len()),
            fds: Vec::new(),
            relay: &relay,
        };
        // From a plain thread, fds are looked at every millisecond.
        let mut polled_fds = false;
        for (i, op) in self.ops.iter().enumerate() {
            let (queue, expected) = match op {
                Op::Source(s) => match s.announce() {
                    None => return Ok(Some(i)),
                    Some(q) => {
                        reg.announced.push(s);
                        q
                    }
                },
                Op::Fd(fd, interest) if in_task => match io::register_for_select(fd, interest) {
                    Ok(Some(r)) => {
                        reg.fds.push(r);
                        let r = reg.fds.last().expect("just pushed");
                        (r.queue(), r.sequence())
                    }
                    // Ready, or nothing to wait for: report it.
                    Ok(None) | Err(_) => return Ok(Some(i)),
                },
                Op::Fd(..) => {
                    polled_fds = true;
                    continue;
                }
            };
            reg.nodes.push(WaitNode::new(
                queue,
                expected,
                Waiter::Relay(&relay),
                WaitPolicy::Interruptible,
                None,
            ));
            let node = reg.nodes.last().expect("just pushed");
            // SAFETY: the node stays in `reg.nodes`, which never grows past
            // its capacity (no move), until `reg`'s drop unlinks it.
            if !unsafe { queue.link_registration(node) } {
                return Ok(Some(i));
            }
        }
        let wait_until = match (deadline, polled_fds) {
            (d, false) => d,
            (d, true) => {
                let slice = Instant::now() + Duration::from_millis(1);
                Some(d.map_or(slice, |d| d.min(slice)))
            }
        };
        match wait::wait(
            relay.queue(),
            0,
            wait_until,
            WaitPolicy::Interruptible,
            WaitKind::Channel,
        ) {
            Ok(()) | Err(WaitError::WouldBlock) => Ok(None),
            Err(WaitError::TimedOut) if deadline.is_none_or(|d| Instant::now() < d) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// What one wait registered; its drop is step 5 of the module docs.
struct Registrations<'s, 'a> {
    nodes: Vec<WaitNode>,
    announced: Vec<&'a (dyn SelectSource + 'a)>,
    fds: Vec<io::SelectRegistration>,
    relay: &'s Relay,
}

impl Drop for Registrations<'_, '_> {
    fn drop(&mut self) {
        for node in &self.nodes {
            // SAFETY: the node is alive (ours), and so is its queue: the
            // select borrows every source, and `fds` outlives this loop.
            unsafe { node.queue().unlink_registration(node) };
        }
        for s in &self.announced {
            s.withdraw();
        }
        self.relay.wait_for_deliveries();
        // Then the nodes and the fds' registrations go, the latter after
        // their nodes (field order).
    }
}

impl<'a> SelectedOperation<'a> {
    /// The index of the operation, as returned when it was added.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Completes the chosen receive on `rx`: its message, or why there is
    /// none (`Disconnected`). In the rare case that a rendezvous sender
    /// took its value back meanwhile, it waits for the next message as
    /// [`mpsc::Receiver::recv`] does.
    ///
    /// # Panics
    /// If `rx` is not the receiver of the chosen operation.
    pub fn recv<T>(self, rx: &mpsc::Receiver<T>) -> Result<T, mpsc::RecvError> {
        self.check((rx as &dyn SelectSource as *const dyn SelectSource).cast());
        rx.recv()
    }

    fn check(&self, op: *const ()) {
        assert!(
            std::ptr::eq(self.op, op),
            "SelectedOperation: not the receiver of the chosen operation {}",
            self.index
        );
    }
}

/// Whether `fd` is ready for `interest` now (an fd that cannot be polled
/// counts as ready: its operation then reports the error).
fn fd_ready(fd: BorrowedFd<'_>, interest: Interest) -> bool {
    io::ready_now(fd.as_raw_fd(), interest).unwrap_or(true)
}

thread_local! {
    /// The state of this thread's choice of where a select looks first.
    static START: Cell<u32> = const { Cell::new(0x9e37_79b9) };
}

/// A pseudo-random index below `n` (xorshift): where a select starts to
/// look, so that ready operations are chosen fairly.
fn next_start(n: usize) -> usize {
    // Loom replays each model many times on one thread: its choices must
    // not depend on earlier runs.
    if n == 1 || cfg!(loom) {
        return 0;
    }
    START.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        s.set(x);
        x as usize % n
    })
}

impl<T> SelectSource for JoinHandle<T> {
    fn is_ready(&self) -> bool {
        self.is_finished()
    }

    fn announce(&self) -> Option<(&WaitQueue, u32)> {
        if self.is_finished() {
            return None;
        }
        Some(self.join_wait())
    }
}

/// The first arm's message when a `select!`'s wait ends early (typed by
/// its receiver).
#[doc(hidden)]
pub fn __select_ended<T>(_rx: &mpsc::Receiver<T>, e: WaitError) -> Result<T, mpsc::RecvError> {
    Err(mpsc::RecvError::from_wait(e))
}

/// `select!`: waits for the first of several receives, or a deadline, and
/// runs that arm (a macro over [`Select`](crate::sync::Select)).
///
/// ```
/// use spindle::sync::mpsc;
/// use std::time::{Duration, Instant};
/// let rt = spindle::Runtime::builder().workers(1).build().unwrap();
/// rt.block_on(|| {
///     let (tx, requests) = mpsc::channel::<u32>();
///     let (_stop_tx, shutdown) = mpsc::channel::<()>();
///     tx.send(5).unwrap();
///     let got = spindle::select! {
///         recv(requests) -> msg => msg.unwrap(),
///         recv(shutdown) -> _ => 0,
///         deadline(Instant::now() + Duration::from_secs(1)) => 1,
///     };
///     assert_eq!(got, 5);
/// });
/// ```
///
/// Each `recv(rx) -> msg => body` arm receives from `rx` (an
/// `mpsc::Receiver`, written as a place: it is named twice) and runs `body`
/// with `msg`, the receive's `Result<T, RecvError>`. A last, optional
/// `deadline(instant) => body` arm runs if no receive is ready by then. If
/// the wait itself ends early (the deadline scope passed, or the task was
/// interrupted or stopped), the first `recv` arm runs with that error.
#[macro_export]
macro_rules! select {
    (
        recv($rx1:expr) -> $msg1:pat => $body1:expr
        $(, recv($rx:expr) -> $msg:pat => $body:expr)*
        $(, deadline($deadline:expr) => $dbody:expr)?
        $(,)?
    ) => {{
        let mut __sel = $crate::sync::Select::new();
        let __first = __sel.recv(&$rx1);
        let __rest: &[usize] = &[$(__sel.recv(&$rx)),*];
        let mut __deadline: ::std::option::Option<::std::time::Instant> = None;
        $(__deadline = ::std::option::Option::Some($deadline);)?
        let __chosen = match __deadline {
            ::std::option::Option::Some(d) => __sel.select_deadline(d),
            ::std::option::Option::None => __sel.select(),
        };
        let mut __k = 0usize;
        let _ = &mut __k;
        match __chosen {
            ::std::result::Result::Ok(__op) if __op.index() == __first => {
                let $msg1 = __op.recv(&$rx1);
                $body1
            }
            $(::std::result::Result::Ok(__op) if { __k += 1; __op.index() == __rest[__k - 1] } => {
                let $msg = __op.recv(&$rx);
                $body
            })*
            $(::std::result::Result::Err($crate::WaitError::TimedOut) => $dbody,)?
            ::std::result::Result::Err(__e) => {
                let $msg1 = $crate::sync::__select_ended(&$rx1, __e);
                $body1
            }
            ::std::result::Result::Ok(_) => ::std::unreachable!("select chose no operation"),
        }
    }};
}

#[cfg(all(test, loom))]
#[path = "loom_select.rs"]
mod loom_select;
