//! Spawning tasks and joining them.
//!
//! Spawn is allocation-free in steady state: the task's slot comes from its
//! worker's cache of free slots, its stack from the worker's cache of stacks,
//! and its closure waits inline in its meta (see `PendingBody`) until its
//! first run builds the coroutine (`meta::bind`); a closure too large
//! for that is written onto its stack by corosensei at once. Its result is
//! stored inline in the slot when it fits (see `ResultSlot`). From a worker
//! of the same runtime the new task takes the worker's LIFO slot (the task
//! it displaces goes on the worker's deque; others may steal either until it
//! first runs); from a plain thread it goes in the inbox of the worker that
//! thread spawns onto (`TaskControl::push_outside`).
//!
//! # Spans
//!
//! A `tracing` span entered inside a task belongs to that task. `tracing`
//! keeps the current span per OS thread, and a worker thread runs many
//! tasks: so when a task waits, the runtime exits the spans it entered,
//! and when it resumes, enters them again in the same order. Another task
//! never runs inside them, and the task's events carry its own spans after
//! any wait. [`Builder::span`] runs a whole task inside a span.
//!
//! This needs a subscriber that tracks the current span, as
//! tracing-subscriber's `Registry` (and so `tracing_subscriber::fmt()`)
//! does; with one that does not, tasks get no spans of their own. It must
//! be the global default (`tracing::subscriber::set_global_default`, or
//! `init()`): a default set with `tracing::subscriber::with_default` is
//! per OS thread, so every task of the worker it is set on would see it.
//! A task that enters no span pays next to nothing: with no subscriber
//! set, a load and a test per switch; with one, one `current_span` call.
//! A task in spans pays an exit and an enter per span and switch.

pub use crate::future::{block_on_future, JoinFuture};

use crate::error::{JoinError, NoSuchTask};
use crate::io::blocking;
use crate::loom::sync::atomic::Ordering;
use crate::meta::activity::WaitKind;
use crate::meta::family;
use crate::meta::locals::LocalValues;
use crate::meta::seam::Suspend;
use crate::meta::slots::PendingBody;
use crate::meta::wait_queue::WaitPolicy;
use crate::meta::{self, EndState, ResultState, TaskId, TaskRef};
use crate::runtime::Handle;
use crate::sched::{self, GroupStats, OutsideSpawn, TaskControl};
use crate::stack::{self, TaskStack};
use crate::wait::deadline;
use crate::wait::{self, Signal};
use crate::WaitError;
use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::panic;
use std::ptr;
use std::time::Instant;

/// Builds a task with a name, a stack size, a deadline scope, a `tracing`
/// span or a runtime of its own.
///
/// ```
/// use spindle::{task, SleepError};
/// use std::time::{Duration, Instant};
///
/// let rt = spindle::Runtime::builder().workers(1).build().unwrap();
/// rt.block_on(|| {
///     let named = task::Builder::new()
///         .name("fetch-user")
///         .stack_size(128 * 1024)
///         .spawn(task::current_name)
///         .unwrap();
///     assert_eq!(named.join().unwrap().as_deref(), Some("fetch-user"));
///
///     // A task under a deadline: its waits fail once it passes.
///     let bounded = task::Builder::new()
///         .deadline(Some(Instant::now() + Duration::from_millis(10)))
///         .spawn(|| spindle::sleep(Duration::from_secs(60)))
///         .unwrap();
///     assert_eq!(bounded.join().unwrap(), Err(SleepError::DeadlineExceeded));
/// });
/// ```
#[derive(Debug, Default, Clone)]
pub struct Builder {
    name: Option<String>,
    stack_size: Option<usize>,
    /// `worker`: the worker the task must first run on (benchmarks).
    worker: Option<usize>,
    /// The deadline scope the task runs in, besides an inherited one.
    deadline: Option<Instant>,
    /// Spawned through a `Scope` or a `JoinSet`: the spawning task's child
    /// (its deadline scope, and its stop; see `meta::family`).
    structured: bool,
    /// The span the task runs inside, from its first run to its end.
    span: Option<tracing::Span>,
}

/// What a spawn into a runtime that is stopping (or has stopped) does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WhenStopping {
    /// Hands back a handle whose join is `JoinError::Cancelled`, as the
    /// stop would have done to a task spawned a moment earlier (spawns
    /// that cannot fail: `spindle::spawn`, `Handle::spawn`; and a task's
    /// destructors that spawn while the stop unwinds it).
    Cancel,
    /// Fails (`task::Builder`'s spawns, which return a `Result`), except
    /// from a task of that runtime, which gets `Cancel`'s handle.
    Refuse,
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

    /// The task's stack size in bytes. Below
    /// [`MIN_STACK_SIZE`](crate::MIN_STACK_SIZE) (16 KiB) or over 1 TiB,
    /// `spawn` fails with `InvalidInput`; a size that cannot be mapped fails
    /// it with the mapping's error. Sizes are rounded up to whole pages (and
    /// to 64 KiB in a debug build of spindle); stacks of the runtime's
    /// default size (after rounding) are pooled, others are mapped for this
    /// task and unmapped when it ends.
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = Some(bytes);
        self
    }

    /// Runs the task inside a deadline scope, as if its body were wrapped
    /// in [`with_deadline`](crate::with_deadline): every wait in it fails
    /// with `DeadlineExceeded` once `deadline` passes. A task spawned
    /// through a [`Scope`](crate::Scope) or a [`JoinSet`](crate::JoinSet)
    /// also inherits its spawner's scope; the earlier of the two wins.
    /// `None` (the default) adds no scope.
    pub fn deadline(mut self, deadline: Option<Instant>) -> Self {
        self.deadline = deadline;
        self
    }

    /// Runs the task inside `span`, from its first run to its end: its
    /// body, and a panic's unwind out of it, run with `span` entered. As
    /// with any span a task enters, the task takes it off its worker
    /// whenever it waits and enters it again when it resumes (see the
    /// [module docs](crate::task#spans)). Spans made inside the task are
    /// its children. `span` is dropped when the task ends, or with its
    /// body if the task never runs.
    ///
    /// Pass `tracing::Span::current()` to run a task inside the span its
    /// spawner is in.
    ///
    /// ```
    /// use tracing::{info, info_span};
    ///
    /// let rt = spindle::Runtime::builder().workers(1).build().unwrap();
    /// let h = spindle::task::Builder::new()
    ///     .span(info_span!("request", id = 7))
    ///     .spawn_on(&rt.handle(), || {
    ///         info!("started"); // inside `request{id=7}`
    ///         spindle::sleep(std::time::Duration::from_millis(1)).unwrap();
    ///         info!("done"); // still inside it, after the wait
    ///     })
    ///     .unwrap();
    /// h.join().unwrap();
    /// ```
    pub fn span(mut self, span: tracing::Span) -> Self {
        self.span = Some(span);
        self
    }

    /// Places the task on worker `index` of its runtime: it runs there, and
    /// no other worker may steal it before its first run. For benchmarks
    /// that measure a placement (two tasks on one worker, or on two);
    /// `spawn` fails with `InvalidInput` if the runtime has no such worker.
    #[doc(hidden)]
    pub fn worker(mut self, index: usize) -> Self {
        self.worker = Some(index);
        self
    }

    /// Makes the task a child of the spawning task (`Scope`, `JoinSet`).
    pub(crate) fn structured(mut self) -> Self {
        self.structured = true;
        self
    }

    /// Spawns `f` on the current task's runtime; on a plain thread, on the
    /// runtime it has entered ([`Runtime::enter`](crate::Runtime::enter)),
    /// else the global one. Fails if no stack can be had (the mapping
    /// failed, or the size is over 1 TiB), if the task table is full, or
    /// if the runtime entered has shut down. From a task of a runtime that
    /// is shutting down, the task is cancelled at once: `f` is dropped and
    /// the join returns `JoinError::Cancelled`.
    pub fn spawn<F, T>(self, f: F) -> io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        with_spawn_target(|control| {
            self.spawn_into(control, f, RunOrder::Queued, WhenStopping::Refuse)
        })
    }

    /// Spawns `f` on the runtime of `handle`, from anywhere. Fails as
    /// [`spawn`](Self::spawn) does, and if that runtime has shut down.
    pub fn spawn_on<F, T>(self, handle: &Handle, f: F) -> io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.spawn_into(handle.control(), f, RunOrder::Queued, WhenStopping::Refuse)
    }

    /// Spawns `f` into `control`, started as `order` says; into a runtime
    /// that stops, as `when_stopping` says.
    fn spawn_into<F, T>(
        self,
        control: &TaskControl,
        f: F,
        order: RunOrder,
        when_stopping: WhenStopping,
    ) -> io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let Some(admitted) = admit(control, when_stopping)? else {
            return cancelled_at_once(f);
        };
        let worker = placed_worker(control, self.worker)?;
        let deadline = self.inherited_deadline();
        let structured = self.structured;
        let body = move |t| run_body(t, f);
        let t = match self.span {
            None => prepare(control, self.stack_size, self.name, body)?,
            Some(span) => prepare(control, self.stack_size, self.name, in_span(span, body))?,
        };
        adopt(t, deadline, structured);
        // The handle first: an urgent start switches to the child, and if
        // the runtime stops before this task runs again, this task is
        // unwound from inside `start`. The handle then detaches the child as
        // it unwinds; made after `start`, it would never exist, and the
        // child's slot would wait for it for good.
        let handle = JoinHandle::new(t);
        start_placed(control, t, worker, order);
        drop(admitted);
        Ok(handle)
    }

    /// The deadline scope of the task to spawn: its own, and, spawned
    /// through a `Scope` or a `JoinSet`, its spawner's; the earlier.
    fn inherited_deadline(&self) -> Option<Instant> {
        let inherited = if self.structured {
            deadline::scope_deadline()
        } else {
            None
        };
        match (self.deadline, inherited) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Gives `t`, prepared and not yet started, its deadline scope, and, if
/// `structured`, makes it a child of the spawning task.
fn adopt(t: TaskRef, deadline: Option<Instant>, structured: bool) {
    if deadline.is_some() {
        // SAFETY: `t` has not started, and nobody else sees it yet: we
        // stand in for the task itself.
        unsafe { t.set_scope_deadline(deadline) };
    }
    if structured {
        if let Some(parent) = sched::current_task() {
            family::adopt(parent, t);
        }
    }
}

/// A spawn into `control` may go on: `Ok(Some(_))`, held until the task is
/// queued (a spawn from outside the runtime holds off its workers' final
/// drain meanwhile: `TaskControl::begin_outside_spawn`). `Ok(None)`: the
/// runtime stops and the task is to be cancelled at once; `Err`: it stops
/// and the spawn is refused.
fn admit(
    control: &TaskControl,
    when_stopping: WhenStopping,
) -> io::Result<Option<Option<OutsideSpawn<'_>>>> {
    if sched::worker_of(control).is_some() {
        // A task of this runtime: its worker drains its own queues only
        // once the task has suspended, so a spawn that got past this check
        // is cancelled there.
        return Ok((!control.stopping.load(Ordering::Acquire)).then_some(None));
    }
    match control.begin_outside_spawn() {
        Some(spawn) => Ok(Some(Some(spawn))),
        None if when_stopping == WhenStopping::Cancel => Ok(None),
        None => Err(shut_down()),
    }
}

/// The error of a spawn refused by a runtime that has shut down.
pub(crate) fn shut_down() -> io::Error {
    io::Error::other("the runtime has shut down")
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
    meta::drop_cancelled(t, f);
    t.publish_end(EndState::Cancelled, sched::make_ready);
    // The task's own reference: it never runs. The handle keeps the other.
    table.release(t, None);
    Ok(JoinHandle::new(t))
}

/// `body`, run inside `span` (`Builder::span`). Only a task given a span
/// carries one: the others' bodies stay as small as they were.
fn in_span<B: FnOnce(TaskRef)>(span: tracing::Span, body: B) -> impl FnOnce(TaskRef) {
    move |t| span.in_scope(|| body(t))
}

/// The body every task runs: run `f`, store its result.
fn run_body<F, T>(t: TaskRef, f: F)
where
    F: FnOnce() -> T,
{
    finish_body(t, panic::catch_unwind(panic::AssertUnwindSafe(f)));
}

/// Stores what a task's body came to, for its handle (or drops it, if the
/// handle is gone).
fn finish_body<T>(t: TaskRef, result: std::thread::Result<T>) {
    if let Err(p) = &result {
        // SAFETY: the task is alive (it runs this).
        let name = unsafe { t.name() }.unwrap_or("<unnamed>");
        if sched::unwinding_cancelled() {
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
    // `Stored` below (or, detached, for good); the joiner reads it only
    // after its worker publishes `EndState::Finished`, which comes after.
    unsafe { t.result_mut().put::<std::thread::Result<T>>(result) };
    // Release: a handle that finds `Stored` finds the result.
    if t.swap_result_state(ResultState::Open, ResultState::Stored)
        .is_err()
    {
        // Detached: nobody will read it. Drop it here, as this task.
        // SAFETY: stored just above, and no handle reads a detached result.
        let result = unsafe { t.result_mut().take::<std::thread::Result<T>>() };
        drop_unread(t, result);
    }
}

/// Spawns a body that may borrow (a scoped task's), as `builder` says:
/// `body` runs `f` under its own `catch_unwind` and returns what it came
/// to, with a token `M` that is dropped once the result is stored (or
/// dropped, detached). The body is dropped unrun if the spawn fails, or
/// the task is cancelled before it runs.
///
/// # Safety
/// What `body` borrows must stay valid until its token has dropped.
pub(crate) unsafe fn spawn_unchecked<B, T, M>(
    builder: Builder,
    when_stopping: WhenStopping,
    body: B,
) -> io::Result<JoinHandle<T>>
where
    B: FnOnce() -> (std::thread::Result<T>, M) + Send,
{
    let task_body = move |t: TaskRef| {
        let (result, token) = body();
        finish_body(t, result);
        drop(token);
    };
    with_spawn_target(|control| {
        let Some(admitted) = admit(control, when_stopping)? else {
            return cancelled_at_once(task_body);
        };
        let worker = placed_worker(control, builder.worker)?;
        let deadline = builder.inherited_deadline();
        let (size, name) = (builder.stack_size, builder.name);
        // SAFETY: the caller's promise covers what the body borrows: the
        // task uses none of it once the token has dropped.
        let t = unsafe {
            match builder.span {
                None => prepare_unchecked(control, size, name, task_body)?,
                Some(span) => prepare_unchecked(control, size, name, in_span(span, task_body))?,
            }
        };
        adopt(t, deadline, builder.structured);
        let handle = JoinHandle::new(t);
        start_placed(control, t, worker, RunOrder::Queued);
        drop(admitted);
        Ok(handle)
    })
}

/// The worker a `Builder::worker` placement names, checked: an error if
/// the runtime has no such worker.
fn placed_worker(control: &TaskControl, worker: Option<usize>) -> io::Result<Option<usize>> {
    match worker {
        Some(w) if control.group(w).is_none() => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("the runtime has no worker {w}"),
        )),
        w => Ok(w),
    }
}

/// Starts a prepared task: on the worker it was placed on, if any, else
/// as [`start`] does.
fn start_placed(control: &TaskControl, t: TaskRef, worker: Option<usize>, order: RunOrder) {
    match worker {
        Some(w) => control.push_placed(t, w),
        None => start(control, t, order),
    }
}

/// Drops a detached task's result, as the task. A `Drop` that panics is
/// reported, not propagated: the body is over, and the panic has nowhere to
/// go. (A `Drop` that waits may also meet the runtime's stop: the task is
/// then unwound from inside it, which is no panic of the user's.)
fn drop_unread<T>(t: TaskRef, result: std::thread::Result<T>) {
    meta::drop_contained(
        t,
        "a detached task's result",
        sched::unwinding_cancelled,
        result,
    );
}

/// Allocates a slot and reserves a stack; keeps the body for the first run
/// (or builds the coroutine now, for a body too large to keep).
pub(crate) fn prepare<B>(
    control: &TaskControl,
    stack_size: Option<usize>,
    name: Option<String>,
    body: B,
) -> io::Result<TaskRef>
where
    B: FnOnce(TaskRef) + Send + 'static,
{
    // SAFETY: a 'static body borrows nothing.
    unsafe { prepare_unchecked(control, stack_size, name, body) }
}

/// [`prepare`] for a body that may borrow.
///
/// # Safety
/// Everything `body` borrows must stay valid until the task has finished
/// (its join queue says `EndState::Finished` or `Cancelled`).
pub(crate) unsafe fn prepare_unchecked<B>(
    control: &TaskControl,
    stack_size: Option<usize>,
    name: Option<String>,
    body: B,
) -> io::Result<TaskRef>
where
    B: FnOnce(TaskRef) + Send,
{
    let size = match stack_size {
        Some(s) => stack::check_size(s)?,
        None => control.stacks.default_size(),
    };
    let g = sched::worker_of(control);
    let table = meta::table();
    let t = match g {
        Some(g) => table.alloc(Some(&mut g.slots.borrow_mut())),
        None => meta::with_thread_slots(|c| table.alloc(c)),
    }
    .ok_or_else(|| io::Error::new(io::ErrorKind::OutOfMemory, "the task table is full"))?;
    let stack = match g {
        Some(g) => control.stacks.take(size, Some(&mut g.stacks.borrow_mut())),
        None => control.stacks.take_for_thread(size),
    };
    // The common case: keep the body in the meta and the stack reserved but
    // untouched (not even guarded); the first run binds them
    // (`TaskGroup::bind`), on the stack its worker's last task just gave
    // back. (A `Builder::stack_size` that rounds to the default size also
    // comes here: the stack is the same.) Otherwise the coroutine is built
    // now, on a guarded stack.
    let pending = size == control.stacks.default_size() && PendingBody::fits::<B>();
    let stack = match stack {
        Ok(s) if pending => s,
        Ok(s) => match guarded(s) {
            Ok(s) => s,
            Err(e) => return Err(no_stack(table, t, e)),
        },
        Err(e) => return Err(no_stack(table, t, e)),
    };
    // SAFETY: the slot is freshly allocated: nobody else sees it yet.
    // The runtime is stored type-erased; `sched` reads it back as a
    // `TaskControl`.
    unsafe { t.init(ptr::from_ref(control).cast(), size, name) };
    if pending {
        // SAFETY: nobody else sees the slot yet. The caller's promise about
        // what `body` borrows covers its stay in the meta.
        unsafe {
            t.body_mut().put(body);
            *t.reserved_mut() = Some(stack);
        }
    } else {
        // SAFETY: nobody else sees the slot yet, and the caller promises
        // that what `body` borrows outlives the task.
        unsafe { meta::install_coroutine(t, stack, body) };
    }
    match g {
        Some(g) => GroupStats::bump(&g.remote().stats.spawned),
        None => {
            control.spawned_outside.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(t)
}

/// `stack`, with its guard installed.
#[cold]
fn guarded(mut stack: TaskStack) -> io::Result<TaskStack> {
    stack.guard().map(|()| stack)
}

/// A spawn that got no stack: gives the slot `t` back (both its owners,
/// task and handle, are gone) and returns the error.
#[cold]
fn no_stack(table: &meta::TaskTable, t: TaskRef, e: io::Error) -> io::Error {
    table.release(t, None);
    table.release(t, None);
    tracing::warn!(error = %e, "spawn failed: no stack");
    e
}

/// When a started task runs, relative to the task that starts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RunOrder {
    /// Queued: in its worker's LIFO slot (from a worker of its runtime), or
    /// in the inbox of the worker a plain thread spawns onto.
    Queued,
    /// Run at once on this worker, the starting task queued behind it
    /// (`spawn_urgent`); treated as `Queued` unless the starter is a task
    /// of this runtime that may suspend (not a plain thread, a task of
    /// another runtime, or a task that unwinds).
    Urgent,
}

/// Queues a prepared task (or, `RunOrder::Urgent`, runs it at once on this
/// worker).
pub(crate) fn start(control: &TaskControl, t: TaskRef, order: RunOrder) {
    match sched::worker_of(control) {
        Some(g) => match (order, sched::suspendable_task()) {
            // SAFETY: `me` is the running task, and `t` was just prepared
            // and is in no queue.
            (RunOrder::Urgent, Some(me)) => unsafe { sched::suspend(me, Suspend::Urgent(t)) },
            _ => g.push_fresh(t),
        },
        None => control.push_outside(t),
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

    /// Interrupts the task: [`interrupt`](crate::interrupt) by handle.
    ///
    /// # Errors
    /// `NoSuchTask` once the task has ended.
    pub fn interrupt(&self) -> Result<(), NoSuchTask> {
        wait::signal(self.id, Signal::Interrupt)
    }

    /// Stops the task: [`stop`](crate::stop) by handle.
    ///
    /// # Errors
    /// `NoSuchTask` once the task has ended.
    pub fn stop(&self) -> Result<(), NoSuchTask> {
        wait::signal(self.id, Signal::Stop)
    }

    /// Whether the task has ended: its result is ready, it panicked, or it
    /// was cancelled when its runtime stopped.
    pub fn is_finished(&self) -> bool {
        self.task.end_state() != EndState::Running
    }

    /// Waits for the task and returns its value. Suspends the current task,
    /// or blocks a plain thread. The deadline of an enclosing
    /// `with_deadline` scope ends the wait (`JoinError::DeadlineExceeded`),
    /// and so does a [`stop`](crate::stop) of the joining task
    /// (`JoinError::Stopped`); an interrupt does not (it stays pending for
    /// the task's next interruptible wait). A task its runtime's stop
    /// cancelled (see [`Runtime::shutdown`](crate::Runtime::shutdown)) is
    /// `JoinError::Cancelled`; a task that joins its own handle gets
    /// `JoinError::SelfJoin` (that wait could never end).
    ///
    /// ```
    /// use spindle::JoinError;
    /// use std::time::{Duration, Instant};
    ///
    /// let rt = spindle::Runtime::builder().workers(2).build().unwrap();
    /// rt.block_on(|| {
    ///     let sum = spindle::spawn(|| 2 + 2);
    ///     assert_eq!(sum.join().unwrap(), 4);
    ///
    ///     // A panic is caught and handed to the join; the runtime goes on.
    ///     let bad = spindle::spawn(|| -> u32 { panic!("no such user") });
    ///     match bad.join() {
    ///         Err(JoinError::Panicked(p)) => assert_eq!(p.message(), Some("no such user")),
    ///         other => panic!("unexpected: {other:?}"),
    ///     }
    ///
    ///     // A deadline scope ends the join (the task itself goes on).
    ///     let slow = spindle::spawn(|| spindle::sleep(Duration::from_secs(60)));
    ///     let id = slow.id();
    ///     let soon = Instant::now() + Duration::from_millis(10);
    ///     let r = spindle::with_deadline(soon, || slow.join());
    ///     assert!(matches!(r, Err(JoinError::DeadlineExceeded)));
    ///     spindle::stop(id).unwrap();
    /// });
    /// ```
    pub fn join(self) -> Result<T, JoinError> {
        let mut first_wait = true;
        loop {
            if let Some(r) = self.try_take() {
                return r;
            }
            // Asked once: who joins does not change between wake-ups.
            if std::mem::take(&mut first_wait) && sched::current_task() == Some(self.task) {
                return Err(JoinError::SelfJoin);
            }
            match wait::wait(
                self.task.join_queue(),
                EndState::Running.word(),
                None,
                WaitPolicy::Stoppable,
                WaitKind::Join,
            ) {
                Err(WaitError::DeadlineExceeded) => return Err(JoinError::DeadlineExceeded),
                Err(WaitError::Stopped) => return Err(JoinError::Stopped),
                _ => {}
            }
        }
    }

    /// The task's result if it has ended (taken: the handle is spent).
    pub(crate) fn try_take(&self) -> Option<Result<T, JoinError>> {
        match self.task.end_state() {
            EndState::Running => None,
            EndState::Finished => {
                // SAFETY: `Finished` was published after the task stored a
                // `thread::Result<T>`; we own the handle, so we are the
                // only reader, and callers take it once.
                let r = unsafe { self.task.result_mut().take::<std::thread::Result<T>>() };
                self.task.result_taken();
                Some(r.map_err(|p| JoinError::Panicked(crate::error::PanicPayload::new(p))))
            }
            EndState::Cancelled => Some(Err(JoinError::Cancelled)),
        }
    }

    /// Waits until the task has ended, as [`join`](Self::join) waits,
    /// without taking its result: the handle stays whole if the wait ends
    /// early.
    pub(crate) fn wait_end(&self) -> Result<(), WaitError> {
        while self.task.end_state() == EndState::Running {
            if sched::current_task() == Some(self.task) {
                return Err(WaitError::WouldBlock);
            }
            match wait::wait(
                self.task.join_queue(),
                EndState::Running.word(),
                None,
                WaitPolicy::Stoppable,
                WaitKind::Join,
            ) {
                Ok(()) | Err(WaitError::WouldBlock) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The queue a join waits on, and the value it holds while the task
    /// runs (for `Select`).
    pub(crate) fn join_wait(&self) -> (&crate::meta::wait_queue::WaitQueue, u32) {
        (self.task.join_queue(), EndState::Running.word())
    }
}

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        // Detach. If the task has stored its result, nobody will read it:
        // drop it here, on the handle owner's thread (after the release, so
        // that a `Drop` that panics leaks nothing); else the task drops it
        // itself (see `ResultState`).
        let unread = match self
            .task
            .swap_result_state(ResultState::Open, ResultState::Detached)
        {
            Err(ResultState::Stored) => {
                // SAFETY: `Stored` was published after the task wrote a
                // `thread::Result<T>`, which it no longer touches; this
                // handle is its only reader, and `join` (which would have
                // taken it) marks it `Taken`.
                let r = unsafe { self.task.result_mut().take::<std::thread::Result<T>>() };
                Some(r)
            }
            _ => None,
        };
        release_from_here(self.task);
        drop(unread);
    }
}

/// Spawns `f` as a new task (bthread_start_background): on the current
/// task's runtime; from a plain thread, on the runtime it has entered
/// ([`Runtime::enter`](crate::Runtime::enter), or a thread of the blocking
/// pool), else on the global runtime.
///
/// # Panics
/// If the task cannot be made: no stack can be had, or the task table is
/// full. [`Builder::spawn`] returns that error instead. Into a runtime that
/// is shutting down or has shut down, the task is cancelled at once: `f`
/// is dropped, and the join returns `JoinError::Cancelled`.
///
/// ```
/// let rt = spindle::Runtime::builder().workers(2).build().unwrap();
/// let squares: Vec<u64> = rt.block_on(|| {
///     let tasks: Vec<_> = (1..=4u64).map(|i| spindle::spawn(move || i * i)).collect();
///     tasks.into_iter().map(|t| t.join().unwrap()).collect()
/// });
/// assert_eq!(squares, [1, 4, 9, 16]);
/// ```
pub fn spawn<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    with_spawn_target(|control| {
        Builder::new().spawn_into(control, f, RunOrder::Queued, WhenStopping::Cancel)
    })
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
    with_spawn_target(|control| {
        let order = if sched::worker_of(control).is_some() {
            RunOrder::Urgent
        } else {
            RunOrder::Queued
        };
        Builder::new().spawn_into(control, f, order, WhenStopping::Cancel)
    })
    .unwrap_or_else(|e| panic!("spindle::spawn_urgent failed: {e}"))
}

/// Spawns `f` on `control` (`Runtime::spawn`, `Handle::spawn`): a runtime
/// that has shut down cancels it at once.
pub(crate) fn spawn_on_control<F, T>(control: &TaskControl, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    Builder::new().spawn_into(control, f, RunOrder::Queued, WhenStopping::Cancel)
}

/// Runs `f` on the blocking pool, a bounded set of plain threads, for
/// what would stop a worker: blocking syscalls, file I/O, FFI, libraries
/// built on std locks. The handle is a task's: `join` suspends only a
/// joining task, and honours its deadline scope; `f` itself runs to its
/// end whatever happens to the handle. A panic in `f` is the join's
/// `JoinError::Panicked`.
///
/// At most 512 pool threads run at once; later calls queue. An idle pool
/// thread exits after 10 s.
///
/// # Panics
/// As [`spawn`] (the handle's task is spawned as by `spawn`).
///
/// ```
/// let path = std::env::temp_dir().join(format!("spindle-doc-{}.conf", std::process::id()));
/// std::fs::write(&path, "threads = 4\n").unwrap();
///
/// let rt = spindle::Runtime::builder().workers(1).build().unwrap();
/// let text = rt.block_on(|| {
///     // File I/O blocks its thread: it runs on the pool, not on the worker...
///     let p = path.clone();
///     let read = spindle::task::spawn_blocking(move || std::fs::read_to_string(p));
///     // ...which runs other tasks meanwhile.
///     assert_eq!(spindle::spawn(|| 1 + 1).join().unwrap(), 2);
///     read.join().unwrap()
/// });
/// assert_eq!(text.unwrap(), "threads = 4\n");
/// std::fs::remove_file(&path).unwrap();
/// ```
pub fn spawn_blocking<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let pending = blocking::start(f);
    spawn(
        move || match pending.wait(WaitPolicy::Uninterruptible, None) {
            Ok(Ok(value)) => value,
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            Err(e) => unreachable!("an uninterruptible wait with no deadline ended: {e}"),
        },
    )
}

/// The name the running task was given (`task::Builder::name`); `None`
/// for a task spawned without one, and on a plain thread. A child does
/// not inherit its parent's name.
pub fn current_name() -> Option<String> {
    let t = sched::current_task()?;
    // SAFETY: we are the task itself, so it has not ended; the reference
    // is dropped before we return.
    unsafe { t.name() }.map(str::to_owned)
}

/// A key to per-task storage, made by [`task_local!`](crate::task_local)
/// (bthread's `bthread_key`).
///
/// Each task has its own value for a key, made by the key's initializer
/// the first time the task uses it, and dropped when the task ends (as a
/// `thread_local!` value drops when its thread ends): on the task's own
/// stack, before a `join` of it returns. A child task starts with none of
/// its parent's values. On a plain thread (outside any task) the values are
/// that thread's, dropped when it exits.
///
/// `std`'s `thread_local!` is per *worker thread*: every task that runs on
/// that worker shares its value, one after another. Use it for caches that
/// any task may use; use `task_local!` for what belongs to one task (a
/// request's context, say).
pub struct LocalKey<T: 'static> {
    init: fn() -> T,
}

impl<T: 'static> fmt::Debug for LocalKey<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalKey").finish_non_exhaustive()
    }
}

std::thread_local! {
    /// The task-local values of a plain thread (code outside any task).
    static THREAD_LOCAL_VALUES: std::cell::UnsafeCell<LocalValues> =
        const { std::cell::UnsafeCell::new(LocalValues::new()) };
}

impl<T: 'static> LocalKey<T> {
    #[doc(hidden)]
    pub const fn new(init: fn() -> T) -> Self {
        LocalKey { init }
    }

    /// Calls `f` with the current task's value, made first if the task has
    /// none yet. The value is shared, as a `thread_local!`'s: mutate it
    /// through a `Cell` or a `RefCell`.
    pub fn with<F, R>(&'static self, f: F) -> R
    where
        F: FnOnce(&T) -> R,
    {
        let key = ptr::from_ref(self) as usize;
        let value = match sched::current_task() {
            // SAFETY: we are the task itself; references into its values
            // reach only their (boxed) contents, and values stay until the
            // task ends, after this call.
            Some(t) => unsafe { LocalValues::get_or_init(t.locals_ptr(), key, self.init) },
            None => match THREAD_LOCAL_VALUES.try_with(|v| {
                // SAFETY: this thread's storage, used by this thread alone;
                // its values stay until the thread exits.
                unsafe { LocalValues::get_or_init(v.get(), key, self.init) }
            }) {
                Ok(value) => value,
                // The thread is exiting and its values are being dropped
                // (a value's `Drop` uses a key): a value made now is
                // dropped at once, after `f`.
                Err(_) => return f(&(self.init)()),
            },
        };
        // SAFETY: `get_or_init` returns a value that stays valid until the
        // task (or thread) ends, which is not before `f` returns.
        f(unsafe { &*value })
    }
}

/// The id of the running task, `None` on a plain thread.
pub fn current() -> Option<TaskId> {
    sched::current_task().map(|t| t.id())
}

/// Lets the other ready tasks of this worker run, then continues. On a
/// plain thread, yields the OS thread.
// Inline: a yield is a switch and little else, and a call around it costs
// about a tenth of it (callgrind; the span check in `suspend` had tipped
// it out of line).
#[inline]
pub fn yield_now() {
    match sched::current_task() {
        // SAFETY: `t` is the running task, and it may suspend.
        Some(t) if sched::can_suspend() => unsafe { sched::suspend(t, Suspend::Yield) },
        Some(_) => {}
        None => std::thread::yield_now(),
    }
}

/// Runs `f` with the runtime a spawn from this thread goes to: the current
/// task's, else the one this thread has entered, else the global one
/// (started here if need be).
fn with_spawn_target<R>(f: impl FnOnce(&TaskControl) -> R) -> R {
    sched::with_current_runtime(|current| match current {
        Some((control, _)) => f(control),
        None => f(&crate::runtime::global().control),
    })
}

/// Drops a handle's hold on `t`, giving the slot, if that was the last
/// hold, to this worker's cache or this thread's.
fn release_from_here(t: TaskRef) {
    match sched::current_group() {
        Some(g) => meta::table().release(t, Some(&mut g.slots.borrow_mut())),
        None => meta::with_thread_slots(|c| meta::table().release(t, c)),
    }
}
