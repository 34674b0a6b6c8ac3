//! A task's meta and the pointer to it: [`TaskMeta`], [`TaskRef`], how a
//! task ended ([`EndState`]) and who drops its result ([`ResultState`]).
//!
//! The parent module's docs say who owns which field. The meta holds the
//! coroutine (its type, and the `Suspend` it switches out with, are here
//! too: the seam re-exports them), the slots, the wait queues and the
//! task-local values, and most of those name a task by its `TaskRef`: so
//! the meta is a file of its own that they import, and `meta/mod.rs` only
//! re-exports (tests/layers.rs keeps the import circles small). The fields
//! the task table reads and writes as it hands out and frees slots are
//! `pub(super)`, visible to `meta` as they were while the meta was its
//! `mod.rs`.

use super::activity::{Activity, SpawnTime, WaitWord};
use super::family::{leave_family, FamilyLinks};
use super::locals::LocalValues;
use super::slots::{PendingBody, ResultSlot};
use super::wait_queue::{WaitNode, WaitQueue};
use crate::id::TaskId;
use crate::loom::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
use crate::loom::sync::{Mutex, MutexGuard};
use crate::loom::UnsafeCell;
use crate::stack::TaskStack;
use corosensei::{Coroutine, Yielder};
use std::cell::Cell;
use std::fmt;
use std::mem::MaybeUninit;
use std::ptr::{self, NonNull};
use std::time::Instant;

/// How a task ended: the value of its join queue (one `u32`, as a butex
/// word: joiners wait while it is `Running`). Moved once, from `Running`,
/// by [`TaskMeta::publish_end`] (for `Finished`, after the result is
/// stored).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EndState {
    /// The task has not ended.
    Running = 0,
    /// The task returned (or panicked): its result is stored.
    Finished = 1,
    /// The task was cancelled by its runtime's stop (or spawned into a
    /// stopping runtime): it has no result.
    Cancelled = 2,
}

impl EndState {
    /// The state as its join queue holds it (what a joiner waits on).
    #[inline]
    pub(crate) const fn word(self) -> u32 {
        self as u32
    }

    /// The state stored as `word`; panics on a word no state has.
    #[inline]
    fn from_word(word: u32) -> Self {
        match word {
            0 => EndState::Running,
            1 => EndState::Finished,
            2 => EndState::Cancelled,
            _ => unreachable!("no task end state is {word}"),
        }
    }
}

/// Who drops a task's result (`TaskMeta::result_state`, one `u8`). The
/// result must be dropped by the task itself or by its handle's owner, never
/// by the worker that frees the slot last: there a `Drop` that panics would
/// kill the worker, and one that waits (a spindle `Mutex`, a join) would
/// block it outside any task. The task ends its body with `Open -> Stored`;
/// a handle dropped unjoined moves `Open -> Detached`. Whichever comes
/// second drops the result, in its own context.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ResultState {
    /// Neither the result nor a detach yet.
    Open = 0,
    /// The result is stored for the handle.
    Stored = 1,
    /// The handle is gone: the task drops its result itself.
    Detached = 2,
    /// `join` took the result.
    Taken = 3,
}

impl ResultState {
    /// The state as `TaskMeta::result_state` holds it.
    #[inline]
    pub(crate) const fn word(self) -> u8 {
        self as u8
    }

    /// The state stored as `word`; panics on a word no state has.
    #[inline]
    fn from_word(word: u8) -> Self {
        match word {
            0 => ResultState::Open,
            1 => ResultState::Stored,
            2 => ResultState::Detached,
            3 => ResultState::Taken,
            _ => unreachable!("no result state is {word}"),
        }
    }
}

/// A task's home before its first run: it may still be stolen.
pub(crate) const NO_HOME: usize = usize::MAX;

/// The interrupt state of a task, under its meta's lock
/// ([`TaskMeta::lock_interrupts`]).
#[derive(Debug)]
pub(crate) struct InterruptState {
    /// An interrupt that no wait has consumed yet.
    pub(crate) pending: bool,
    /// The wait the task is blocked in, if any (its meta's wait node).
    pub(crate) waiting: *const WaitNode,
}

/// Everything the runtime knows about one task. See the module docs for who
/// owns which field.
///
/// Laid out by hand (`repr(C)`, on its own cache lines): the fields that
/// ending a wait touches (the wait node, the sleep queue, and the queue
/// link, home and runtime the wake-up needs) come first, in three lines that
/// the timer thread prefetches before it runs a timed-out wait's callback
/// ([`wake_lines`](Self::wake_lines)). A burst of a hundred thousand sleeps
/// ending together otherwise costs a cache miss on each of them per task.
#[repr(C, align(64))]
pub(crate) struct TaskMeta {
    /// The link of whichever run queue holds the task.
    next: AtomicPtr<TaskMeta>,
    /// The worker the task is pinned to once it has run (`NO_HOME` before).
    pub(super) home: AtomicUsize,
    /// Whether the task's current wait was ended by its own timer (set
    /// before the task is queued, cleared when it leaves the wait): its
    /// worker's idle polling does not learn from such wake-ups.
    woken_by_timer: AtomicBool,
    /// The runtime the task belongs to (its scheduler's `TaskControl`,
    /// type-erased: this layer does not know it). Written at spawn.
    runtime: UnsafeCell<*const ()>,
    /// What `sleep` waits on: nobody wakes it but the timer and interrupts.
    sleep: WaitQueue,
    /// The node of the task's current wait (a task waits on one queue at a
    /// time); see [`begin_wait`](Self::begin_wait).
    wait_node: UnsafeCell<MaybeUninit<WaitNode>>,
    /// What the task waits on, for dumps (`activity.rs`): written as it
    /// begins a wait and cleared as it is queued, so in the wake lines.
    activity: Activity,
    // End of the wake lines.
    pub(super) slot: u32,
    /// When the task was spawned, for dumps (`activity.rs`).
    spawned_at: SpawnTime,
    /// Bumped each time the slot is freed; the high bits of [`TaskId`].
    pub(super) version: AtomicU64,
    /// Owners still holding the slot: the task and its JoinHandle.
    pub(super) refs: AtomicU32,
    /// The task's `errno`, saved while it is switched out.
    errno: UnsafeCell<i32>,
    coro: UnsafeCell<Option<Coro>>,
    /// A never-run task's body, when it is bound to a stack at first run.
    body: UnsafeCell<PendingBody>,
    /// The stack reserved for that first run.
    reserved: UnsafeCell<Option<TaskStack>>,
    yielder: UnsafeCell<*const TaskYielder>,
    /// About where the task's stack pointer was when it last switched out
    /// (0 before its first switch): the frames it resumes through lie
    /// around it ([`prefetch_frames`](Self::prefetch_frames)).
    switched_out_at: UnsafeCell<usize>,
    stack_size: UnsafeCell<usize>,
    /// The guard page below the task's stack, `[lo, hi)`, for overflow
    /// reports, and the top of the stack, for dumps' backtraces.
    pub(super) guard: UnsafeCell<(usize, usize, usize)>,
    name: UnsafeCell<Option<String>>,
    /// The task's `task_local!` values; only the task itself touches them.
    locals: UnsafeCell<LocalValues>,
    /// The `tracing` spans the task exited as it last switched out,
    /// innermost first, to re-enter as it resumes (`sched/spans.rs`);
    /// empty while it runs. Only the task itself touches it, and its
    /// worker as it cancels the task (which then never resumes). Its
    /// capacity stays across switches and across the slot's tasks, so a
    /// task in spans does not allocate per switch.
    spans: UnsafeCell<Vec<tracing::span::Id>>,
    result: UnsafeCell<ResultSlot>,
    /// Who drops the result: a [`ResultState`].
    pub(super) result_state: AtomicU8,
    /// Its value is an [`EndState`]: `Running` while the task runs, then
    /// `Finished` or `Cancelled`.
    pub(super) join: WaitQueue,
    interrupts: Mutex<InterruptState>,
    /// The earliest deadline of the enclosing `with_deadline` scopes.
    deadline: UnsafeCell<Option<Instant>>,
    /// Set by `stop`; never cleared while the task lives.
    pub(super) stopped: AtomicBool,
    /// Its parent and its running children (`family.rs`).
    family: FamilyLinks,
    /// The previous and next task in its home worker's list of started
    /// tasks, which only that worker touches.
    started_prev: Cell<Option<TaskRef>>,
    started_next: Cell<Option<TaskRef>>,
    /// Debug builds check that a task is queued at most once at a time, so
    /// that a double wake-up (which would resume a stack twice) fails loudly
    /// where it happens.
    #[cfg(debug_assertions)]
    queued: AtomicBool,
    /// Debug builds check that a task's waits never overlap (the contract of
    /// [`begin_wait`](Self::begin_wait)).
    #[cfg(debug_assertions)]
    in_wait: AtomicBool,
}

// SAFETY: a TaskMeta is shared between threads by design. Its atomics and
// mutex are Sync; each cell is accessed by one owner at a time as the module
// docs say (each accessor's `# Safety` names the owner), with hand-offs
// ordered by the queues' release/acquire operations and the join queue; the
// `Cell` links of the started list only ever by the task's home worker.
unsafe impl Sync for TaskMeta {}
// SAFETY: as above; the coroutine it holds is moved between threads only
// before it has started (see docs/safety.md), and a pending body is `Send`
// (`PendingBody::put` requires it).
unsafe impl Send for TaskMeta {}

/// What [`TaskMeta::prefetch_frames`] loads below the point the task
/// switched out at (the registers the switch saved, the switch's frames)
/// and above it (the frames of the wait and its callers). Measured: a task
/// asleep in `sleep` is 0.6 KiB below its body's frame; 1.5 KiB above was
/// no better than this.
const FRAMES_BELOW: usize = 256;
const FRAMES_ABOVE: usize = 768;

impl TaskMeta {
    pub(super) fn new(slot: u32) -> Self {
        TaskMeta {
            slot,
            version: AtomicU64::new(1),
            refs: AtomicU32::new(0),
            next: AtomicPtr::new(ptr::null_mut()),
            home: AtomicUsize::new(NO_HOME),
            started_prev: Cell::new(None),
            started_next: Cell::new(None),
            runtime: UnsafeCell::new(ptr::null()),
            coro: UnsafeCell::new(None),
            body: UnsafeCell::new(PendingBody::EMPTY),
            reserved: UnsafeCell::new(None),
            yielder: UnsafeCell::new(ptr::null()),
            switched_out_at: UnsafeCell::new(0),
            stack_size: UnsafeCell::new(0),
            guard: UnsafeCell::new((0, 0, 0)),
            name: UnsafeCell::new(None),
            locals: UnsafeCell::new(LocalValues::new()),
            spans: UnsafeCell::new(Vec::new()),
            result: UnsafeCell::new(ResultSlot::empty()),
            result_state: AtomicU8::new(ResultState::Open.word()),
            join: WaitQueue::new(EndState::Running.word()),
            sleep: WaitQueue::new(0),
            wait_node: UnsafeCell::new(MaybeUninit::uninit()),
            activity: Activity::new(),
            spawned_at: SpawnTime::new(),
            stopped: AtomicBool::new(false),
            family: FamilyLinks::new(),
            woken_by_timer: AtomicBool::new(false),
            interrupts: Mutex::new(InterruptState {
                pending: false,
                waiting: ptr::null(),
            }),
            errno: UnsafeCell::new(0),
            deadline: UnsafeCell::new(None),
            #[cfg(debug_assertions)]
            queued: AtomicBool::new(false),
            #[cfg(debug_assertions)]
            in_wait: AtomicBool::new(false),
        }
    }

    /// Drops what the ended task left in its cells, for the slot's next
    /// task.
    ///
    /// # Safety
    /// The task's references are gone (its `refs` reached 0): nobody else
    /// holds it.
    pub(super) unsafe fn clear_for_reuse(&self) {
        // SAFETY: the caller's contract: we are the only owner of every cell
        // below.
        unsafe {
            // The task or its handle's owner has dropped the result
            // (see `ResultState`); the clear is only a backstop.
            self.result.with_mut(|r| {
                debug_assert!(!(*r).is_some(), "a result outlived its task and handle");
                (*r).clear();
            });
            self.name.with_mut(|p| *p = None);
            // The task dropped its values as it ended (`drop_locals`); a
            // value left here belongs to a task that never reached its end,
            // whose thread this may not be: it is leaked, not dropped.
            self.locals.with_mut(|l| {
                let left = (*l).take();
                debug_assert!(left.is_empty(), "task-local values outlived their task");
                std::mem::forget(left);
            });
            self.spawned_at.clear();
            self.activity.ready();
            // A task re-enters its saved spans as it resumes, and its
            // worker does before the runtime's stop unwinds it from its
            // switch: none are left.
            // The capacity stays, for the slot's next task.
            self.spans.with_mut(|v| {
                debug_assert!((*v).is_empty(), "saved spans outlived their task");
                (*v).clear();
            });
            self.runtime.with_mut(|p| *p = ptr::null());
            self.deadline.with_mut(|p| *p = None);
            // The next task of this slot sets its own when it first runs;
            // none before (a stale one would point into a freed stack).
            self.yielder.with_mut(|p| *p = ptr::null());
            self.switched_out_at.with_mut(|p| *p = 0);
            debug_assert!(self.coro.with(|p| (*p).is_none()));
            debug_assert!(self.body.with(|p| !(*p).is_some()));
            debug_assert!(self.reserved.with(|p| (*p).is_none()));
        }
        #[cfg(debug_assertions)]
        debug_assert!(
            !self.in_wait.load(Ordering::Relaxed),
            "released inside a wait"
        );
    }

    // ------------------------------------------------------------ identity

    pub(crate) fn id(&self) -> TaskId {
        TaskId::new(self.slot, self.version.load(Ordering::Relaxed))
    }

    /// The worker the task is pinned to, `NO_HOME` before its first run.
    pub(crate) fn home(&self) -> usize {
        self.home.load(Ordering::Relaxed)
    }

    /// Pins the task to `worker` (its first run), or frees it for the next
    /// task of the slot.
    pub(crate) fn set_home(&self, worker: usize) {
        self.home.store(worker, Ordering::Relaxed)
    }

    /// The link of whichever run queue holds the task (`sched::queue`).
    pub(crate) fn queue_link(&self) -> &AtomicPtr<TaskMeta> {
        &self.next
    }

    /// The task's runtime, type-erased (see the field).
    ///
    /// # Safety
    /// The task is alive (it holds its slot): the pointer was written at
    /// spawn, before the task was published, and is read-only since.
    pub(crate) unsafe fn runtime(&self) -> *const () {
        // SAFETY: the caller's contract: no writer meanwhile.
        self.runtime.with(|p| unsafe { *p })
    }

    // ----------------------------------------------- written at spawn only

    /// Records what spawn decided: the runtime, the stack size and the name.
    ///
    /// # Safety
    /// The slot was just allocated: nobody else sees the task yet.
    pub(crate) unsafe fn init(&self, runtime: *const (), stack_size: usize, name: Option<String>) {
        // SAFETY: the caller's contract: we are the only owner.
        unsafe {
            self.runtime.with_mut(|p| *p = runtime);
            self.stack_size.with_mut(|p| *p = stack_size);
            self.name.with_mut(|p| *p = name);
            self.errno.with_mut(|p| *p = 0);
            self.deadline.with_mut(|p| *p = None);
        }
        // Last: a dump that sees the spawn time sees what is above. (The
        // activity word is clear: a slot is cleared as it is freed.)
        self.spawned_at.set_now();
    }

    /// The task's stack size.
    ///
    /// # Safety
    /// The task is alive: written at spawn, read-only since.
    pub(crate) unsafe fn stack_size(&self) -> usize {
        // SAFETY: the caller's contract.
        self.stack_size.with(|p| unsafe { *p })
    }

    /// The name given at spawn.
    ///
    /// # Safety
    /// As [`stack_size`](Self::stack_size), and the reference is dropped
    /// before the task ends, or the caller holds one of the task's refs
    /// until it drops the reference (the name is cleared only when the
    /// slot is freed).
    pub(crate) unsafe fn name(&self) -> Option<&str> {
        // SAFETY: the caller's contract.
        self.name.with(|p| unsafe { (*p).as_deref() })
    }

    /// The task's `task_local!` values, as a raw pointer: the task's nested
    /// `with` calls each reach the values through it, so none may hold a
    /// `&mut` across another's (a value's initializer may use other keys).
    /// Only the task itself (running it, or ending it) may use it.
    pub(crate) fn locals_ptr(&self) -> *mut LocalValues {
        self.locals.with_mut(|p| p)
    }

    // ------------------------------------------------------------- holder

    /// The coroutine, to resume, drop or take.
    ///
    /// # Safety
    /// The caller holds the task (it runs it, or cancels it): nobody else
    /// touches the coroutine meanwhile, and the reference does not outlive
    /// that.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn coro_mut(&self) -> &mut Option<Coro> {
        // SAFETY: the caller's contract.
        self.coro.with_mut(|p| unsafe { &mut *p })
    }

    /// The pending body of a never-run task.
    ///
    /// # Safety
    /// As [`coro_mut`](Self::coro_mut).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn body_mut(&self) -> &mut PendingBody {
        // SAFETY: the caller's contract.
        self.body.with_mut(|p| unsafe { &mut *p })
    }

    /// The stack reserved for a never-run task's first run.
    ///
    /// # Safety
    /// As [`coro_mut`](Self::coro_mut).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn reserved_mut(&self) -> &mut Option<TaskStack> {
        // SAFETY: the caller's contract.
        self.reserved.with_mut(|p| unsafe { &mut *p })
    }

    /// The task's saved `errno`.
    ///
    /// # Safety
    /// The caller is the worker running the task.
    pub(crate) unsafe fn errno(&self) -> i32 {
        // SAFETY: the caller's contract.
        self.errno.with(|p| unsafe { *p })
    }

    /// Saves the task's `errno`.
    ///
    /// # Safety
    /// As [`errno`](Self::errno).
    pub(crate) unsafe fn set_errno(&self, errno: i32) {
        // SAFETY: the caller's contract.
        self.errno.with_mut(|p| unsafe { *p = errno })
    }

    // ------------------------------------------------------- the task itself

    /// Records the yielder the task switches out through.
    ///
    /// # Safety
    /// Called by the task itself, with the yielder of its own coroutine.
    pub(crate) unsafe fn set_yielder(&self, y: *const TaskYielder) {
        // SAFETY: the caller's contract.
        self.yielder.with_mut(|p| unsafe { *p = y })
    }

    /// The yielder of the running task.
    ///
    /// # Safety
    /// Called by the task itself, inside its body (after
    /// [`set_yielder`](Self::set_yielder)): the yielder lives on the stack
    /// the caller runs on.
    pub(crate) unsafe fn yielder(&self) -> &TaskYielder {
        // SAFETY: the caller's contract.
        let y = self.yielder.with(|p| unsafe { *p });
        debug_assert!(!y.is_null(), "{} suspends outside its body", self.id());
        // SAFETY: the caller's contract.
        unsafe { &*y }
    }

    /// Notes where the task's stack pointer is as it switches out.
    ///
    /// # Safety
    /// Called by the task itself, on its home worker's thread.
    pub(crate) unsafe fn set_switched_out_at(&self, sp: usize) {
        // SAFETY: the caller's contract.
        self.switched_out_at.with_mut(|p| unsafe { *p = sp })
    }

    /// Whether the task has spans saved to re-enter (see the field).
    ///
    /// # Safety
    /// Called by the task itself, or by the worker that holds it switched
    /// out to cancel it.
    #[inline]
    pub(crate) unsafe fn has_saved_spans(&self) -> bool {
        // SAFETY: the caller's contract: only the task touches the list.
        self.spans.with(|v| unsafe { !(*v).is_empty() })
    }

    /// Puts `spans` in place of the task's saved spans and returns those.
    /// The list is moved out while a subscriber runs, never borrowed: a
    /// subscriber whose callback waits would switch the task out again
    /// from inside it.
    ///
    /// # Safety
    /// As [`has_saved_spans`](Self::has_saved_spans).
    pub(crate) unsafe fn swap_saved_spans(
        &self,
        spans: Vec<tracing::span::Id>,
    ) -> Vec<tracing::span::Id> {
        // SAFETY: the caller's contract; the borrow ends here.
        self.spans
            .with_mut(|v| unsafe { std::mem::replace(&mut *v, spans) })
    }

    /// The task's deadline scope.
    ///
    /// # Safety
    /// Called by the task itself.
    pub(crate) unsafe fn scope_deadline(&self) -> Option<Instant> {
        // SAFETY: the caller's contract.
        self.deadline.with(|p| unsafe { *p })
    }

    /// Sets the task's deadline scope.
    ///
    /// # Safety
    /// As [`scope_deadline`](Self::scope_deadline).
    pub(crate) unsafe fn set_scope_deadline(&self, d: Option<Instant>) {
        // SAFETY: the caller's contract.
        self.deadline.with_mut(|p| unsafe { *p = d })
    }

    // ---------------------------------------------------------------- result

    /// The result slot.
    ///
    /// # Safety
    /// The caller owns the result: the task, until it publishes
    /// `ResultState::Stored` (or for good, detached); then the handle, once
    /// it has seen `EndState::Finished` or `ResultState::Stored`.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn result_mut(&self) -> &mut ResultSlot {
        // SAFETY: the caller's contract.
        self.result.with_mut(|p| unsafe { &mut *p })
    }

    /// Who drops the result: moves it from `current` to `new`, or says
    /// what it is.
    pub(crate) fn swap_result_state(
        &self,
        current: ResultState,
        new: ResultState,
    ) -> Result<ResultState, ResultState> {
        self.result_state
            .compare_exchange(
                current.word(),
                new.word(),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .map(ResultState::from_word)
            .map_err(ResultState::from_word)
    }

    /// Notes that the handle took the result (only the handle touches the
    /// state after `ResultState::Stored`).
    pub(crate) fn result_taken(&self) {
        self.result_state
            .store(ResultState::Taken.word(), Ordering::Relaxed);
    }

    // ------------------------------------------------------------ the queues

    /// The join queue, whose value is an [`EndState`].
    pub(crate) fn join_queue(&self) -> &WaitQueue {
        &self.join
    }

    /// How the task ended so far (`Running` until it has).
    pub(crate) fn end_state(&self) -> EndState {
        EndState::from_word(self.join.value().load(Ordering::Acquire))
    }

    /// What the task's sleeps wait on.
    pub(crate) fn sleep_queue(&self) -> &WaitQueue {
        &self.sleep
    }

    /// Publishes the end of the task (its result is stored, or it was
    /// cancelled: `how`) and wakes its joiners, handing tasks to `ready`.
    pub(crate) fn publish_end(&self, how: EndState, ready: impl Fn(TaskRef)) {
        debug_assert_ne!(how, EndState::Running, "a task's end is not running");
        leave_family(self);
        self.join.value().store(how.word(), Ordering::Release);
        self.join.wake_all(ready);
    }

    // -------------------------------------------------- interrupts and stop

    /// The interrupt state, locked.
    pub(crate) fn lock_interrupts(&self) -> MutexGuard<'_, InterruptState> {
        crate::loom::lock(&self.interrupts)
    }

    /// Whether `stop` has been called on the task.
    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Its place in its family (see `family.rs`).
    pub(super) fn family(&self) -> &FamilyLinks {
        &self.family
    }

    /// Marks the task stopped (under its interrupt lock, by `stop`, or
    /// under its parent's, born stopped).
    pub(crate) fn mark_stopped(&self) {
        self.stopped.store(true, Ordering::Release)
    }

    /// Whether the task's current wait was ended by its own timer.
    pub(crate) fn woken_by_timer(&self) -> bool {
        self.woken_by_timer.load(Ordering::Relaxed)
    }

    /// Sets [`woken_by_timer`](Self::woken_by_timer) (published by the
    /// queue push that follows, or cleared as the task leaves the wait).
    pub(crate) fn set_woken_by_timer(&self, yes: bool) {
        self.woken_by_timer.store(yes, Ordering::Relaxed)
    }

    // --------------------------------------------------- the started list

    /// The next task in the home worker's list of started tasks.
    ///
    /// # Safety
    /// The caller is the task's home worker.
    pub(crate) unsafe fn started_next(&self) -> Option<TaskRef> {
        self.started_next.get()
    }

    /// Links the task into its home worker's list of started tasks between
    /// `prev` and `next`, or unlinks it: returns the old links.
    ///
    /// # Safety
    /// As [`started_next`](Self::started_next).
    pub(crate) unsafe fn set_started_links(
        &self,
        prev: Option<TaskRef>,
        next: Option<TaskRef>,
    ) -> (Option<TaskRef>, Option<TaskRef>) {
        (
            self.started_prev.replace(prev),
            self.started_next.replace(next),
        )
    }

    /// Sets only the previous link.
    ///
    /// # Safety
    /// As [`started_next`](Self::started_next).
    pub(crate) unsafe fn set_started_prev(&self, prev: Option<TaskRef>) {
        self.started_prev.set(prev)
    }

    /// Sets only the next link.
    ///
    /// # Safety
    /// As [`started_next`](Self::started_next).
    pub(crate) unsafe fn set_started_next(&self, next: Option<TaskRef>) {
        self.started_next.set(next)
    }

    // ----------------------------------------------------- cache behaviour

    /// Starts loading the stack frames the task resumes through: the
    /// registers its switch saved and the frames of the calls it returns
    /// from (for a sleep: the switch, the wait, the sleep and their caller).
    /// Those of a task that waited long are cold, and they are most of the
    /// cache misses of its resumption; its worker asks for them while it
    /// runs the task queued before (a hint: it reads nothing).
    ///
    /// # Safety
    /// The caller is the worker that holds the task in its ready queue: the
    /// task does not run meanwhile, and wrote the field on this thread.
    #[inline]
    pub(crate) unsafe fn prefetch_frames(&self) {
        // SAFETY: the caller's contract: no writer meanwhile.
        let at = self.switched_out_at.with(|p| unsafe { *p });
        if at != 0 {
            spindle_timer::prefetch(
                (at as *const u8).wrapping_sub(FRAMES_BELOW),
                FRAMES_BELOW + FRAMES_ABOVE,
            );
        }
    }

    /// The bytes that ending this task's wait touches first: the fields
    /// before `slot` (see the type's docs). A hint for the timer thread.
    pub(crate) fn wake_lines(&self) -> (*const u8, usize) {
        (
            (self as *const TaskMeta).cast(),
            std::mem::offset_of!(TaskMeta, slot),
        )
    }

    // ---------------------------------------------------------------- dumps

    /// Notes, for dumps, that the task begins a wait on `on` that ends by
    /// `deadline` at the latest. Called by the task itself.
    #[inline]
    pub(crate) fn note_wait(&self, on: WaitWord, deadline: Option<Instant>) {
        self.activity.begin_wait(on, deadline)
    }

    /// Notes, for dumps, that the task's wait has ended: it is on its way
    /// to a run queue. Called by whoever makes it ready (`make_ready`, or
    /// the wait that refuses to block); a yield or a spawn leaves the word
    /// as it is, clear.
    #[inline]
    pub(crate) fn note_wait_ended(&self) {
        self.activity.ready();
    }

    /// What the task is doing, as a dump sees it (`activity.rs`).
    pub(crate) fn activity(&self) -> &Activity {
        &self.activity
    }

    /// How long ago the task was spawned; `None` while its slot is free or
    /// its task is being made.
    pub(crate) fn age(&self) -> Option<std::time::Duration> {
        self.spawned_at.age()
    }

    /// Where the task's saved frames are, for a dump's backtrace: where it
    /// last switched out (0 before its first switch; its frame pointer in
    /// builds with frame pointers, see `sched::suspend`), the bottom of its
    /// stack above the guard page and the top of its stack (both 0 before
    /// its first run).
    ///
    /// # Safety
    /// The caller runs on the task's home worker's thread, and the task is
    /// not running (so neither word is being written).
    #[cfg_attr(not(spindle_frame_pointers), allow(dead_code))]
    pub(crate) unsafe fn saved_frames(&self) -> (usize, usize, usize) {
        // SAFETY: the caller's contract.
        unsafe {
            let (_, lo, hi) = self.guard.with(|p| *p);
            (self.switched_out_at.with(|p| *p), lo, hi)
        }
    }

    // --------------------------------------------------------------- waits

    /// Makes `node` the task's wait node and returns it. It lives in the
    /// meta, not on the task's stack, so that the timer thread and wakers
    /// ending the wait touch the meta's lines only (one cold page, not
    /// two: with 100 000 sleepers the timer thread spent most of each
    /// callback waiting for the stack page).
    ///
    /// # Safety
    /// Called by the task itself, not inside another wait: the previous
    /// wait's last step (which ends with [`end_wait`](Self::end_wait)) has
    /// run, so nothing else refers to the node. That holds because nothing
    /// between the two can wait: a task waits only from its own code, the
    /// last step takes no wait of its own, and waits during unwinding block
    /// the thread instead. `node`'s waiter is this task (nothing to drop
    /// when the next wait overwrites it).
    pub(crate) unsafe fn begin_wait(&self, node: WaitNode) -> &WaitNode {
        #[cfg(debug_assertions)]
        assert!(
            !self.in_wait.swap(true, Ordering::Relaxed),
            "{} began a wait inside another",
            self.id()
        );
        // SAFETY: the caller's contract: no reference to the old node is
        // left, and only this task's own wait uses the new one.
        self.wait_node.with_mut(|p| unsafe { (*p).write(node) })
    }

    /// The node of the task's current wait.
    ///
    /// # Safety
    /// The task is in a wait: it began one with
    /// [`begin_wait`](Self::begin_wait), and has not left it (the wait's
    /// last step has not run), so the node is written and alive.
    pub(crate) unsafe fn current_wait(&self) -> &WaitNode {
        #[cfg(debug_assertions)]
        assert!(
            self.in_wait.load(Ordering::Relaxed),
            "{} is in no wait",
            self.id()
        );
        // SAFETY: the caller's contract.
        self.wait_node.with(|p| unsafe { (*p).assume_init_ref() })
    }

    /// Notes that the wait begun by [`begin_wait`](Self::begin_wait) is
    /// over and nothing refers to its node any more.
    #[inline]
    pub(crate) fn end_wait(&self) {
        #[cfg(debug_assertions)]
        self.in_wait.store(false, Ordering::Relaxed);
    }

    /// Notes that the task enters a run queue (debug builds: it must be in
    /// none).
    #[inline]
    pub(crate) fn enqueued(&self) {
        #[cfg(debug_assertions)]
        assert!(
            !self.queued.swap(true, Ordering::AcqRel),
            "{} made runnable twice",
            self.id()
        );
    }

    /// Notes that the task left its run queue to run (or to be cancelled).
    #[inline]
    pub(crate) fn dequeued(&self) {
        #[cfg(debug_assertions)]
        assert!(
            self.queued.swap(false, Ordering::AcqRel),
            "{} run without being runnable",
            self.id()
        );
    }
}

impl fmt::Debug for TaskMeta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskMeta").field("id", &self.id()).finish()
    }
}

/// A pointer to a task's meta. Copy, Send: metas live forever (see
/// [`table`]), so the pointer never dangles.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct TaskRef(NonNull<TaskMeta>);

// SAFETY: TaskMeta is Sync and never freed; the pointer may travel freely.
unsafe impl Send for TaskRef {}
// SAFETY: as above.
unsafe impl Sync for TaskRef {}

impl fmt::Debug for TaskRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.meta().fmt(f)
    }
}

impl TaskRef {
    /// # Safety
    /// `p` must point at a `TaskMeta` in the task table.
    pub(crate) unsafe fn from_ptr(p: *mut TaskMeta) -> Self {
        // SAFETY: the caller promises a valid, hence non-null, pointer.
        TaskRef(unsafe { NonNull::new_unchecked(p) })
    }
    pub(crate) fn as_ptr(self) -> *mut TaskMeta {
        self.0.as_ptr()
    }
    pub(crate) fn meta(&self) -> &'static TaskMeta {
        // SAFETY: metas are never freed (segments live for the process).
        unsafe { &*self.0.as_ptr() }
    }
}

impl std::ops::Deref for TaskRef {
    type Target = TaskMeta;
    fn deref(&self) -> &TaskMeta {
        self.meta()
    }
}

/// Describes the task at `task` for the overflow handler
/// (`stack::overflow::Describe`): its guard page, id, stack size and name.
///
/// # Safety
/// `task` points at the meta of the task the calling thread runs or
/// unwinds: its guard, size and name were written before it ran and do not
/// change while it does. It only reads memory (the handler calls it).
pub(crate) unsafe fn describe_for_overflow(task: *const ()) -> crate::stack::overflow::Running {
    // SAFETY: the caller's contract: a live meta, whose fields below are
    // not written while its task runs.
    let t = unsafe { &*task.cast::<TaskMeta>() };
    // SAFETY: as above.
    let (guard, stack_size) = (
        t.guard.with(|p| unsafe { *p }),
        t.stack_size.with(|p| unsafe { *p }),
    );
    // SAFETY: as above.
    let name = t
        .name
        .with(|p| unsafe { (*p).as_deref().map(|n| (n.as_ptr(), n.len())) });
    crate::stack::overflow::Running {
        guard_lo: guard.0,
        guard_hi: guard.1,
        id: t.id(),
        stack_size,
        name,
    }
}

/// A task meta of its own for a loom model (never freed: models are
/// tests), built inside the model as its loom types must be.
#[cfg(all(test, loom))]
pub(crate) fn leak_for_model() -> TaskRef {
    TaskRef(NonNull::from(Box::leak(Box::new(TaskMeta::new(0)))))
}

// The wake lines are three cache lines (see `TaskMeta`): a field added
// before `slot` must not push them into a fourth. (Not under loom, whose
// atomics and locks are larger and model, not measure.)
#[cfg(not(loom))]
const _: () = assert!(std::mem::offset_of!(TaskMeta, slot) <= 3 * 64);

// ----------------------------------------------- how a task switches out
//
// The seam's types that a meta holds (`seam.rs` re-exports them): they
// live here so that the meta, the seam and the wait queue do not import
// each other in a ring.

/// A task's coroutine: resumed with `()`, suspends with a [`Suspend`] reason.
pub(crate) type Coro = Coroutine<(), Suspend, (), TaskStack>;
/// What a task switches out through.
pub(crate) type TaskYielder = Yielder<(), Suspend>;

/// Why a task switched out; acted upon by its worker after the switch.
#[derive(Debug)]
pub(crate) enum Suspend {
    /// Queue me behind the other ready tasks.
    Yield,
    /// Block me in this wait; it is mine (alive) until I resume.
    Block(BlockerRef),
    /// Run this never-run child now, then me.
    Urgent(TaskRef),
}

/// A pointer to the [`Blocker`](super::seam::Blocker) a task waits in: the node of its wait, in
/// its meta. Every wait of a task is a wait on a `WaitQueue` (see the
/// module docs), so the seam has one implementor, and the worker calls it
/// without dynamic dispatch; what differs between waits is what they do in
/// `block`, not their type. The node lives as long as the wait: until the
/// task resumes (see [`Suspend::Block`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockerRef(NonNull<WaitNode>);

impl BlockerRef {
    /// A pointer to `node`, which its task's wait keeps alive until the
    /// task resumes.
    pub(crate) fn new(node: &WaitNode) -> Self {
        BlockerRef(NonNull::from(node))
    }

    /// The blocker.
    ///
    /// # Safety
    /// Its task has not resumed since it suspended with this blocker.
    pub(crate) unsafe fn get(&self) -> &WaitNode {
        // SAFETY: the caller's contract: the wait is alive.
        unsafe { self.0.as_ref() }
    }
}
