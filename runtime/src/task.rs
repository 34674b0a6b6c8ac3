//! Spawning tasks and joining them.
//!
//! Spawn is allocation-free in steady state: the task's slot comes from its
//! worker's cache of free slots, its stack from the worker's cache of stacks,
//! and its closure waits inline in its meta (see `PendingBody`) until its
//! first run builds the coroutine (`TaskGroup::bind`); a closure too large
//! for that is written onto its stack by corosensei at once. Its result is
//! stored inline in the slot when it fits (see `ResultSlot`). From a worker
//! of the same runtime the new task takes the worker's LIFO slot (the task
//! it displaces goes on the worker's deque; others may steal either until it
//! first runs); otherwise it goes on the runtime's injector.

use crate::butex::{self, WaitKind};
use crate::control::{GroupStats, Shared};
use crate::error::JoinError;
use crate::group::{self, Suspend};
use crate::meta::{self, Coro, PendingBody, TaskId, TaskRef, TaskYielder};
use crate::stack;
use crate::stack::TaskStack;
use corosensei::Coroutine;
use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::Ordering;

/// Join butex values.
pub(crate) const RUNNING: u32 = 0;
pub(crate) const FINISHED: u32 = 1;
pub(crate) const CANCELLED: u32 = 2;

// Who drops a task's result (`TaskMeta::result_state`). The result must be
// dropped by the task itself or by its handle's owner, never by the worker
// that frees the slot last: there a `Drop` that panics would kill the
// worker, and one that waits (a spindle `Mutex`, a join) would block it
// outside any task. The task ends its body with OPEN -> STORED; a handle
// dropped unjoined moves OPEN -> DETACHED. Whichever comes second drops the
// result, in its own context.
/// Neither the result nor a detach yet.
pub(crate) const RESULT_OPEN: u8 = 0;
/// The result is stored for the handle.
pub(crate) const RESULT_STORED: u8 = 1;
/// The handle is gone: the task drops its result itself.
pub(crate) const RESULT_DETACHED: u8 = 2;
/// `join` took the result.
pub(crate) const RESULT_TAKEN: u8 = 3;

/// Publishes the end of `t` (its result is stored, or it was cancelled) and
/// wakes its joiners.
pub(crate) fn complete(t: TaskRef, how: u32) {
    t.join.value().store(how, Ordering::Release);
    t.join.wake_all();
}

/// Builds a task with a name or a stack size of its own.
#[derive(Debug, Default, Clone)]
pub struct Builder {
    name: Option<String>,
    stack_size: Option<usize>,
}

impl Builder {
    /// A builder with the runtime's defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Names the task (shown in panic reports and logs).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The task's stack size in bytes. Smaller sizes are rounded up to 16
    /// KiB (64 KiB in a debug build of spindle); over 1 TiB, `spawn` fails
    /// with `InvalidInput`. Sizes are rounded up to whole pages; stacks of
    /// the runtime's default size (after rounding) are pooled, others are
    /// mapped for this task and unmapped when it ends.
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = Some(bytes);
        self
    }

    /// Spawns `f` on the current task's runtime, or the global one on a
    /// plain thread. Fails if no stack can be had (the mapping failed, or
    /// the size is over 1 TiB), or if the task table is full. Into a
    /// runtime that is shutting down, the task is cancelled at once: `f` is
    /// dropped and the join returns `JoinError::Cancelled`.
    pub fn spawn<F, T>(self, f: F) -> io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        match group::current_group() {
            Some(g) => self.spawn_on(&g.shared, f, false),
            None => self.spawn_on(&crate::runtime::global().shared, f, false),
        }
    }

    pub(crate) fn spawn_on<F, T>(
        self,
        shared: &Shared,
        f: F,
        urgent: bool,
    ) -> io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        // The one check of the stop (`prepare` makes none, so no spawn
        // fails for it). Only a task of this runtime can spawn while it
        // stops (every other spawn borrows the runtime, which its stop
        // consumes), onto its own worker's queues, and that worker drains
        // them only once the task has suspended: a spawn that got past the
        // check is cancelled there.
        if shared.stopping.load(Ordering::Acquire) {
            return cancelled_at_once(f);
        }
        let t = prepare(shared, self.stack_size, self.name, move |t, y| {
            run_body(t, y, f)
        })?;
        // The handle first: an urgent start switches to the child, and if
        // the runtime stops before this task runs again, this task is
        // unwound from inside `start`. The handle then detaches the child as
        // it unwinds; made after `start`, it would never exist, and the
        // child's slot would wait for it for good.
        let handle = JoinHandle::new(t);
        start(shared, t, urgent);
        Ok(handle)
    }
}

/// A task spawned into a stopping runtime: cancelled at once, as the stop
/// cancels every task that has not ended. Its closure is dropped here (a
/// panicking `Drop` is contained), and its handle's join is `Cancelled`.
/// Spawning is then no failure, so that a destructor that spawns, run
/// while the stop unwinds its task, does not panic inside that unwind.
fn cancelled_at_once<F, T>(f: F) -> io::Result<JoinHandle<T>> {
    let table = meta::table();
    let t = table
        .alloc(None)
        .ok_or_else(|| io::Error::new(io::ErrorKind::OutOfMemory, "the task table is full"))?;
    drop_cancelled(t, f);
    complete(t, CANCELLED);
    // The task's own reference: it never runs. The handle keeps the other.
    table.release(t, None);
    Ok(JoinHandle::new(t))
}

/// The body every task runs: record the yielder, run `f`, store its result.
fn run_body<F, T>(t: TaskRef, y: &TaskYielder, f: F)
where
    F: FnOnce() -> T,
{
    // SAFETY: the task owns its meta's yielder field while it runs.
    unsafe { *t.yielder.get() = y };
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    if let Err(p) = &result {
        // SAFETY: the name is written at spawn and read-only since.
        let name = unsafe { (*t.name.get()).as_deref() }.unwrap_or("<unnamed>");
        if group::unwinding_cancelled() {
            // The runtime's stop unwinding a blocked task (corosensei's
            // forced unwind, caught here like any unwind): its joiner is
            // told `Cancelled`, and the payload is dropped with the result.
            tracing::debug!(task = %t.id(), name, "task unwound by the runtime's stop");
        } else {
            let panic = crate::error::panic_message(&**p);
            tracing::debug!(task = %t.id(), name, panic, "task panicked");
        }
    }
    // SAFETY: the running task owns its result slot until it publishes
    // STORED below (or, detached, for good); the joiner reads it only after
    // `complete` publishes FINISHED, which comes after.
    unsafe { (*t.result.get()).put::<std::thread::Result<T>>(result) };
    // Release: a handle that finds STORED finds the result.
    if t.result_state
        .compare_exchange(
            RESULT_OPEN,
            RESULT_STORED,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_err()
    {
        // Detached: nobody will read it. Drop it here, as this task.
        // SAFETY: stored just above, and no handle reads a detached result.
        let result = unsafe { (*t.result.get()).take::<std::thread::Result<T>>() };
        drop_unread(t, result);
    }
}

/// Drops a detached task's result, as the task. A `Drop` that panics is
/// reported, not propagated: the body is over, and the panic has nowhere to
/// go. (A `Drop` that waits may also meet the runtime's stop: the task is
/// then unwound from inside it, which is no panic of the user's.)
fn drop_unread<T>(t: TaskRef, result: std::thread::Result<T>) {
    drop_contained(
        t,
        "a detached task's result",
        group::unwinding_cancelled,
        result,
    );
}

/// Drops `v`, which belongs to task `t`, where a panic has nowhere to go:
/// a `Drop` that panics is reported (`what` says what was dropped; at debug
/// level if `expected` says the unwind was the runtime's own), and the
/// caller goes on.
fn drop_contained<V>(t: TaskRef, what: &str, expected: impl FnOnce() -> bool, v: V) {
    if let Err(p) = panic::catch_unwind(AssertUnwindSafe(|| drop(v))) {
        let panic = crate::error::panic_message(&*p);
        if expected() {
            tracing::debug!(task = %t.id(), panic, "unwound while dropping {what}");
        } else {
            tracing::warn!(task = %t.id(), panic, "dropping {what} panicked");
        }
        // The payload's own `Drop` may panic in turn: contain that one too
        // (and leak it).
        if let Err(again) = panic::catch_unwind(AssertUnwindSafe(|| drop(p))) {
            std::mem::forget(again);
        }
    }
}

/// A task body on its way into a coroutine built at spawn. If the
/// coroutine is dropped before it ever runs (its task cancelled at
/// shutdown), corosensei drops the body under a guard that aborts the
/// process on a panic: so a `Drop` of its captures that panics is contained
/// here.
struct UnrunBody<B> {
    t: TaskRef,
    body: Option<B>,
}

impl<B: FnOnce(TaskRef, &TaskYielder)> UnrunBody<B> {
    fn run(mut self, y: &TaskYielder) {
        let body = self.body.take().expect("a body runs once");
        body(self.t, y);
    }
}

impl<B> Drop for UnrunBody<B> {
    fn drop(&mut self) {
        if let Some(body) = self.body.take() {
            drop_cancelled(self.t, body);
        }
    }
}

/// Drops what a cancelled task held (its coroutine, or its body's
/// captures). A `Drop` that panics must not take the worker down with it,
/// nor leak what the cancel does next.
pub(crate) fn drop_cancelled<V>(t: TaskRef, held: V) {
    drop_contained(t, "a cancelled task's captures", || false, held);
}

/// Allocates a slot and reserves a stack; keeps the body for the first run
/// (or builds the coroutine now, for a body too large to keep).
pub(crate) fn prepare<B>(
    shared: &Shared,
    stack_size: Option<usize>,
    name: Option<String>,
    body: B,
) -> io::Result<TaskRef>
where
    B: FnOnce(TaskRef, &TaskYielder) + Send + 'static,
{
    // SAFETY: a 'static body borrows nothing.
    unsafe { prepare_unchecked(shared, stack_size, name, body) }
}

/// [`prepare`] for a body that may borrow.
///
/// # Safety
/// Everything `body` borrows must stay valid until the task has finished
/// (its join butex says FINISHED or CANCELLED).
pub(crate) unsafe fn prepare_unchecked<B>(
    shared: &Shared,
    stack_size: Option<usize>,
    name: Option<String>,
    body: B,
) -> io::Result<TaskRef>
where
    B: FnOnce(TaskRef, &TaskYielder) + Send,
{
    let size = match stack_size {
        Some(s) => stack::check_size(s)?,
        None => shared.stacks.default_size(),
    };
    let g = group::current_group().filter(|g| std::ptr::eq(&*g.shared, shared));
    let table = meta::table();
    let t = match g {
        Some(g) => table.alloc(Some(&mut g.slots.borrow_mut())),
        None => meta::with_thread_slots(|c| table.alloc(c)),
    }
    .ok_or_else(|| io::Error::new(io::ErrorKind::OutOfMemory, "the task table is full"))?;
    let stack = match g {
        Some(g) => shared.stacks.take(size, Some(&mut g.stacks.borrow_mut())),
        None => shared.stacks.take_for_thread(size),
    };
    let stack = match stack {
        Ok(s) => s,
        Err(e) => {
            // Give the slot back: both owners (task and handle) are gone.
            table.release(t, None);
            table.release(t, None);
            tracing::warn!(error = %e, "spawn failed: no stack");
            return Err(e);
        }
    };
    // SAFETY: the slot is freshly allocated: nobody else sees it yet.
    unsafe {
        *t.shared.get() = shared;
        *t.stack_size.get() = size;
        *t.name.get() = name;
        *t.errno.get() = 0;
        *t.deadline.get() = None;
    }
    if size == shared.stacks.default_size() && PendingBody::fits::<B>() {
        // The common case: keep the body in the meta and the stack reserved
        // but untouched; the first run binds them (`TaskGroup::bind`), on
        // the stack its worker's last task just gave back.
        // SAFETY: nobody else sees the slot yet. The caller's promise about
        // what `body` borrows covers its stay in the meta.
        unsafe {
            (*t.body.get()).put(body);
            *t.reserved.get() = Some(stack);
        }
        // (A `Builder::stack_size` that rounds to the default size also
        // comes here: the stack is the same.)
    } else {
        // SAFETY: nobody else sees the slot yet, and the caller promises
        // that what `body` borrows outlives the task.
        unsafe { install_coroutine(t, stack, body) };
    }
    match g {
        Some(g) => GroupStats::bump(&g.me().stats.spawned),
        None => {
            shared.spawned_outside.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(t)
}

/// Builds `t`'s coroutine on `stack` to run `body`, and records the stack's
/// guard page as `t`'s for overflow reports.
///
/// # Safety
/// The caller owns `t` (nobody else sees it, or it is about to run it), and
/// what `body` borrows outlives the task.
unsafe fn install_coroutine<B>(t: TaskRef, stack: TaskStack, body: B)
where
    B: FnOnce(TaskRef, &TaskYielder),
{
    // corosensei's limit is the bottom of the mapping, whose first page is
    // the guard page.
    let limit = corosensei::stack::Stack::limit(&stack).get();
    let body = UnrunBody {
        t,
        body: Some(body),
    };
    let entry = move |y: &TaskYielder, ()| body.run(y);
    // SAFETY: the caller promises that what `body` borrows outlives the
    // task; corosensei needs nothing else of a non-'static closure.
    let coro: Coro = unsafe { Coroutine::with_stack_unchecked(stack, entry) };
    // SAFETY: the caller owns the task; the guard is read only while it runs.
    unsafe {
        *t.guard.get() = (limit, limit + stack::page_size());
        *t.coro.get() = Some(coro);
    }
}

/// Builds the coroutine of a never-run task whose body waits in its meta,
/// on `stack` (its reserved stack or one its worker had at hand).
///
/// # Safety
/// The caller owns `t` (it is about to run it) and `t` has a pending body.
pub(crate) unsafe fn bind(t: TaskRef, stack: TaskStack) {
    // SAFETY: the caller owns the task and its meta's body.
    let body = unsafe { (*t.body.get()).take() };
    // SAFETY: the caller owns the task; what the body borrows outlives it
    // (promised to `prepare_unchecked`).
    unsafe { install_coroutine(t, stack, move |t, y| body.run(t, y)) };
}

/// Queues a prepared task (or, `urgent`, runs it at once on this worker).
pub(crate) fn start(shared: &Shared, t: TaskRef, urgent: bool) {
    match group::current_group().filter(|g| std::ptr::eq(&*g.shared, shared)) {
        Some(g) => match (urgent, group::current_task()) {
            (true, Some(me)) if group::can_suspend() => group::suspend(me, Suspend::Urgent(t)),
            _ => g.push_fresh(t),
        },
        None => {
            t.enqueued();
            shared.injector.push(t);
            shared.idle.notify_work(0);
        }
    }
}

/// An owned permission to join a task: wait for it and take its result.
/// Dropping it detaches the task.
pub struct JoinHandle<T> {
    task: TaskRef,
    id: TaskId,
    _result: PhantomData<fn() -> T>,
}

// JoinHandle<T> is Send + Sync for every T (via fn() -> T and TaskRef);
// pinned by a doctest in lib.rs, for a T that is neither.

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle").field("id", &self.id).finish()
    }
}

impl<T> JoinHandle<T> {
    /// The handle of a task made by `prepare` (its second owner).
    pub(crate) fn new(task: TaskRef) -> Self {
        JoinHandle {
            task,
            id: task.id(),
            _result: PhantomData,
        }
    }

    /// The task's id.
    pub fn id(&self) -> TaskId {
        self.id
    }

    /// Whether the task has ended: its result is ready, it panicked, or it
    /// was cancelled when its runtime stopped.
    pub fn is_finished(&self) -> bool {
        self.task.join.value().load(Ordering::Acquire) != RUNNING
    }

    /// Waits for the task and returns its value. Suspends the current task,
    /// or blocks a plain thread. Interrupts and `stop` do not end a join; the
    /// deadline of an enclosing `with_deadline` scope does. A task its
    /// runtime's stop cancelled (see
    /// [`Runtime::shutdown`](crate::Runtime::shutdown)) is
    /// `JoinError::Cancelled`; a task that joins its own handle gets
    /// `JoinError::SelfJoin` (that wait could never end).
    pub fn join(self) -> Result<T, JoinError> {
        let mut first_wait = true;
        loop {
            match self.task.join.value().load(Ordering::Acquire) {
                RUNNING => {}
                FINISHED => {
                    // SAFETY: FINISHED was published after the task stored a
                    // `thread::Result<T>`; we own the handle, so we are the
                    // only reader.
                    let r = unsafe { (*self.task.result.get()).take::<std::thread::Result<T>>() };
                    // Only this handle touches the state after STORED.
                    self.task
                        .result_state
                        .store(RESULT_TAKEN, Ordering::Relaxed);
                    return r.map_err(JoinError::Panicked);
                }
                _ => return Err(JoinError::Cancelled),
            }
            // Asked once: who joins does not change between wake-ups.
            if std::mem::take(&mut first_wait) && group::current_task() == Some(self.task) {
                return Err(JoinError::SelfJoin);
            }
            if let Err(crate::WaitError::DeadlineExceeded) =
                butex::wait(&self.task.join, RUNNING, None, WaitKind::Uninterruptible)
            {
                return Err(JoinError::DeadlineExceeded);
            }
        }
    }
}

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        // Detach. If the task has stored its result, nobody will read it:
        // drop it here, on the handle owner's thread (after the release, so
        // that a `Drop` that panics leaks nothing); else the task drops it
        // itself (see `RESULT_OPEN`).
        let unread = match self.task.result_state.compare_exchange(
            RESULT_OPEN,
            RESULT_DETACHED,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Err(RESULT_STORED) => {
                // SAFETY: STORED was published after the task wrote a
                // `thread::Result<T>`, which it no longer touches; this
                // handle is its only reader, and `join` (which would have
                // taken it) marks TAKEN.
                let r = unsafe { (*self.task.result.get()).take::<std::thread::Result<T>>() };
                Some(r)
            }
            _ => None,
        };
        match group::current_group() {
            Some(g) => meta::table().release(self.task, Some(&mut g.slots.borrow_mut())),
            None => meta::with_thread_slots(|c| meta::table().release(self.task, c)),
        }
        drop(unread);
    }
}

/// Spawns `f` as a new task (bthread_start_background): on the current
/// task's runtime, or on the global runtime from a plain thread.
///
/// # Panics
/// If the task cannot be made: no stack can be had, or the task table is
/// full. [`Builder::spawn`] returns that error instead. Into a runtime that
/// is shutting down, the task is cancelled at once (see
/// [`Builder::spawn`]).
pub fn spawn<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    Builder::new()
        .spawn(f)
        .unwrap_or_else(|e| panic!("spindle::spawn failed: {e}"))
}

/// Spawns `f` and runs it at once on this worker, before the caller goes on
/// (bthread_start_urgent); the caller is queued behind it. From a plain
/// thread this is [`spawn`].
///
/// # Panics
/// As [`spawn`].
pub fn spawn_urgent<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let b = Builder::new();
    let r = match group::current_group() {
        Some(g) => b.spawn_on(&g.shared, f, true),
        None => b.spawn_on(&crate::runtime::global().shared, f, false),
    };
    r.unwrap_or_else(|e| panic!("spindle::spawn_urgent failed: {e}"))
}

/// The id of the running task, `None` on a plain thread.
pub fn current() -> Option<TaskId> {
    group::current_task().map(|t| t.id())
}

/// Lets the other ready tasks of this worker run, then continues. On a
/// plain thread, yields the OS thread.
pub fn yield_now() {
    match group::current_task() {
        Some(t) if group::can_suspend() => group::suspend(t, Suspend::Yield),
        Some(_) => {}
        None => std::thread::yield_now(),
    }
}
