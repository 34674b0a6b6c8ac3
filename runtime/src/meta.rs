//! Task metadata and the process-wide task table.
//!
//! Every task has a [`TaskMeta`] in one slot of a table that only grows: slots
//! are allocated in segments that are never freed, so a pointer to a meta is
//! valid for the life of the process and a stale [`TaskId`] can be *detected*
//! (its version no longer matches) but never dangles. This is bRPC's
//! `ResourcePool` + versioned `bthread_t`, made explicit.
//!
//! ```text
//!   TaskId = version << 24 | slot          version bumps each time the slot is freed
//!   refs   = 2 at spawn: the task itself + its JoinHandle; the slot is freed at 0
//! ```
//!
//! Versions are 40 bits, and a slot whose version runs out is retired, never
//! reused: so no id is ever handed out twice, and a stale id can never name a
//! later task. (A 32-bit version, as bthread's, wraps after 2^32 reuses: 13
//! minutes of spawn + join in a loop here, the free list being LIFO.)
//!
//! Ownership of a meta's fields follows the task: whoever holds the task (the
//! queue it sits in, the worker running it, the waiter list it sleeps in)
//! owns the scheduling fields; `lock` guards the interrupt state; the result
//! slot is written once by the finishing task and read once by the joiner,
//! ordered by the join butex. The exception is the `started_` links, which
//! belong to the task's home worker from its first run to its end.

use crate::butex::{Butex, WaitNode};
use crate::control::Shared;
use crate::group::Suspend;
use crate::stack::TaskStack;
use corosensei::{Coroutine, Yielder};
use std::cell::{Cell, UnsafeCell};
use std::fmt;
use std::mem::{self, MaybeUninit};
use std::ptr::{self, NonNull};
use std::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
use std::sync::Mutex;

/// A task's coroutine: resumed with `()`, suspends with a [`Suspend`] reason.
pub(crate) type Coro = Coroutine<(), Suspend, (), TaskStack>;
pub(crate) type TaskYielder = Yielder<(), Suspend>;

/// The id of a task: unique among live tasks, and never confused with a
/// task that has ended (its version differs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(u64);

/// Bits of a [`TaskId`] that hold the slot; the rest hold the version.
const SLOT_BITS: u32 = 24;
/// The version a slot is retired at (see the module docs).
const VERSION_LIMIT: u64 = 1 << (64 - SLOT_BITS);

impl TaskId {
    pub(crate) fn new(slot: u32, version: u64) -> Self {
        debug_assert!(slot < 1 << SLOT_BITS && version < VERSION_LIMIT);
        TaskId(version << SLOT_BITS | u64::from(slot))
    }
    /// The raw value, e.g. for logs.
    pub fn as_u64(self) -> u64 {
        self.0
    }
    /// An id from a raw value. A forged value names no task: calls that take
    /// it answer [`NoSuchTask`](crate::NoSuchTask).
    pub fn from_u64(raw: u64) -> Self {
        TaskId(raw)
    }
    pub(crate) fn slot(self) -> u32 {
        (self.0 & ((1 << SLOT_BITS) - 1)) as u32
    }
    pub(crate) fn version(self) -> u64 {
        self.0 >> SLOT_BITS
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "task#{}.{}", self.slot(), self.version())
    }
}

/// A value whose type only its owner knows, kept inline in `N` words; it
/// remembers how to drop itself. Both of a task's type-erased slots (its
/// pending body and its result) are one of these.
pub(crate) struct Inline<const N: usize> {
    buf: MaybeUninit<[usize; N]>,
    /// How to drop the value held; `None` when empty.
    drop: Option<unsafe fn(*mut u8)>,
}

impl<const N: usize> Inline<N> {
    pub(crate) const EMPTY: Self = Inline {
        buf: MaybeUninit::uninit(),
        drop: None,
    };

    /// Whether a `V` fits.
    pub(crate) fn fits<V>() -> bool {
        mem::size_of::<V>() <= mem::size_of::<[usize; N]>()
            && mem::align_of::<V>() <= mem::align_of::<usize>()
    }

    /// Whether a value is held.
    pub(crate) fn is_some(&self) -> bool {
        self.drop.is_some()
    }

    /// Stores `value`, which must fit, in an empty slot.
    pub(crate) fn put<V>(&mut self, value: V) {
        assert!(Self::fits::<V>());
        debug_assert!(self.drop.is_none());
        unsafe fn drop_value<V>(p: *mut u8) {
            // SAFETY: `p` holds a `V` written by `put` and not taken.
            unsafe { ptr::drop_in_place(p.cast::<V>()) }
        }
        // SAFETY: `V` fits the buffer's size and alignment (asserted).
        unsafe { self.buf.as_mut_ptr().cast::<V>().write(value) };
        self.drop = Some(drop_value::<V>);
    }

    /// Takes the value out, leaving the slot empty.
    ///
    /// # Safety
    /// The slot must hold a value stored by `put::<V>` with this very `V`.
    pub(crate) unsafe fn take<V>(&mut self) -> V {
        debug_assert!(self.drop.is_some());
        self.drop = None;
        // SAFETY: the caller promises a `V` is stored; `drop` is cleared, so
        // it is read out only once.
        unsafe { self.buf.as_mut_ptr().cast::<V>().read() }
    }

    /// Drops whatever the slot holds.
    pub(crate) fn clear(&mut self) {
        if let Some(drop) = self.drop.take() {
            // SAFETY: `drop` was chosen by `put` for the value in `buf`.
            unsafe { drop(self.buf.as_mut_ptr().cast::<u8>()) }
        }
    }
}

impl<const N: usize> Drop for Inline<N> {
    fn drop(&mut self) {
        self.clear();
    }
}

/// Where a finished task leaves its result until the joiner takes it:
/// `std::thread::Result<T>` inline when it fits in four words, boxed
/// otherwise.
pub(crate) struct ResultSlot(Inline<4>);

impl ResultSlot {
    const fn empty() -> Self {
        ResultSlot(Inline::EMPTY)
    }

    /// Stores `value`. The slot must be empty.
    pub(crate) fn put<R>(&mut self, value: R) {
        if Inline::<4>::fits::<R>() {
            self.0.put(value);
        } else {
            self.0.put(Box::new(value));
        }
    }

    /// Takes the value out.
    ///
    /// # Safety
    /// The slot must hold a value stored by `put::<R>` with this very `R`.
    pub(crate) unsafe fn take<R>(&mut self) -> R {
        // SAFETY: the caller promises `put::<R>` stored it, inline or boxed
        // as `fits` decides, the same way here.
        unsafe {
            if Inline::<4>::fits::<R>() {
                self.0.take::<R>()
            } else {
                *self.0.take::<Box<R>>()
            }
        }
    }

    /// Whether a value is held.
    fn is_some(&self) -> bool {
        self.0.is_some()
    }

    /// Drops whatever the slot holds.
    fn clear(&mut self) {
        self.0.clear();
    }
}

/// A task's body while it waits for its first run, stored inline in its
/// meta: a never-run task holds a reserved stack but has not touched it, and
/// its first run builds the coroutine on whichever stack is hottest (see
/// `TaskGroup::bind`). Bodies that do not fit (over [`BODY_WORDS`] words, or
/// aligned above a word) are written onto their stack at spawn instead.
pub(crate) struct PendingBody {
    body: Inline<BODY_WORDS>,
    /// Takes the body out of `body` and runs it; `None` when empty.
    run: Option<unsafe fn(&mut Inline<BODY_WORDS>, TaskRef, &TaskYielder)>,
}

/// The largest body kept inline: a closure capturing up to 6 words.
pub(crate) const BODY_WORDS: usize = 6;

impl PendingBody {
    const EMPTY: PendingBody = PendingBody {
        body: Inline::EMPTY,
        run: None,
    };

    /// Whether a body of type `B` fits inline.
    pub(crate) fn fits<B>() -> bool {
        Inline::<BODY_WORDS>::fits::<B>()
    }

    /// Stores `body`, which must fit (see [`fits`](Self::fits)), in an
    /// empty slot. The slot erases `B`'s type, lifetime and thread bounds.
    ///
    /// # Safety
    /// Everything `body` borrows must outlive the slot's `take`, `run` or
    /// drop of it (for a task: until it has finished or been cancelled).
    pub(crate) unsafe fn put<B>(&mut self, body: B)
    where
        B: FnOnce(TaskRef, &TaskYielder) + Send,
    {
        unsafe fn run<B: FnOnce(TaskRef, &TaskYielder)>(
            body: &mut Inline<BODY_WORDS>,
            t: TaskRef,
            y: &TaskYielder,
        ) {
            // SAFETY: `put::<B>` stored a `B`; `take` empties the slot, so it
            // runs once.
            let body = unsafe { body.take::<B>() };
            body(t, y)
        }
        self.body.put(body);
        self.run = Some(run::<B>);
    }

    /// Whether a body is waiting.
    pub(crate) fn is_some(&self) -> bool {
        self.body.is_some()
    }

    /// Moves the waiting body out, leaving the slot empty.
    pub(crate) fn take(&mut self) -> PendingBody {
        mem::replace(self, Self::EMPTY)
    }

    /// Runs the body. The slot must hold one.
    pub(crate) fn run(mut self, t: TaskRef, y: &TaskYielder) {
        let run = self.run.take().expect("a pending body");
        // SAFETY: `run` was made by `put` for the body in `self.body`.
        unsafe { run(&mut self.body, t, y) }
    }
}

/// The interrupt state of a task, under `TaskMeta::lock`.
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
/// ending a wait touches (the wait node, the sleep butex, and the queue link,
/// home and runtime the wake-up needs) come first, in three lines that the
/// timer thread prefetches before it runs a timed-out wait's callback
/// ([`wake_lines`](Self::wake_lines)). A burst of a hundred thousand sleeps
/// ending together otherwise costs a cache miss on each of them per task.
#[repr(C, align(64))]
pub(crate) struct TaskMeta {
    /// The link of whichever queue holds the task.
    next: AtomicPtr<TaskMeta>,
    /// The worker the task is pinned to once it has run (`NO_HOME` before).
    home: AtomicUsize,
    /// Whether the task's current wait was ended by its own timer (set
    /// before the task is queued, cleared when it leaves the wait): its
    /// worker's idle polling does not learn from such wake-ups (`poll.rs`).
    pub(crate) woken_by_timer: AtomicBool,
    /// The runtime the task belongs to.
    pub(crate) shared: UnsafeCell<*const Shared>,
    /// What `sleep` waits on: nobody wakes it but the timer and interrupts.
    pub(crate) sleep: Butex,
    /// The node of the task's current wait (a task waits on one butex at a
    /// time); see [`begin_wait`](Self::begin_wait).
    wait_node: UnsafeCell<MaybeUninit<WaitNode>>,
    // End of the wake lines.
    slot: u32,
    /// Bumped each time the slot is freed; the high bits of [`TaskId`].
    version: AtomicU64,
    /// Owners still holding the slot: the task and its JoinHandle.
    refs: AtomicU32,
    /// The task's `errno`, saved while it is switched out.
    pub(crate) errno: UnsafeCell<i32>,
    pub(crate) coro: UnsafeCell<Option<Coro>>,
    /// A never-run task's body, when it is bound to a stack at first run.
    pub(crate) body: UnsafeCell<PendingBody>,
    /// The stack reserved for that first run.
    pub(crate) reserved: UnsafeCell<Option<TaskStack>>,
    pub(crate) yielder: UnsafeCell<*const TaskYielder>,
    /// About where the task's stack pointer was when it last switched out
    /// (0 before its first switch): the frames it resumes through lie
    /// around it ([`prefetch_frames`](Self::prefetch_frames)).
    pub(crate) switched_out_at: UnsafeCell<usize>,
    pub(crate) stack_size: UnsafeCell<usize>,
    /// The guard page below the task's stack, `[lo, hi)`, for overflow reports.
    pub(crate) guard: UnsafeCell<(usize, usize)>,
    pub(crate) name: UnsafeCell<Option<String>>,
    pub(crate) result: UnsafeCell<ResultSlot>,
    /// Who drops the result: `task::RESULT_*`.
    pub(crate) result_state: AtomicU8,
    /// 0 while the task runs, 1 once its result is stored.
    pub(crate) join: Butex,
    pub(crate) lock: Mutex<InterruptState>,
    /// The earliest deadline of the enclosing `with_deadline` scopes.
    pub(crate) deadline: UnsafeCell<Option<std::time::Instant>>,
    /// Set by `stop`; never cleared while the task lives.
    pub(crate) stopped: AtomicBool,
    /// The previous and next task in its home worker's list of started
    /// tasks (`TaskGroup`'s `started`), which only that worker touches.
    pub(crate) started_prev: Cell<Option<TaskRef>>,
    pub(crate) started_next: Cell<Option<TaskRef>>,
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
// mutex are Sync; each UnsafeCell field is accessed by one owner at a time as
// the module docs and the scheduling protocol describe (the worker running
// the task, or the thread holding it in a queue), with hand-offs ordered by
// the queues' release/acquire operations and the join butex; the `Cell`
// links of the started list only ever by the task's home worker.
unsafe impl Sync for TaskMeta {}
// SAFETY: as above; the coroutine it holds is moved between threads only
// before it has started (see docs/safety.md), and a pending body is `Send`
// (`PendingBody::put` requires it).
unsafe impl Send for TaskMeta {}

pub(crate) const NO_HOME: usize = usize::MAX;

/// What [`TaskMeta::prefetch_frames`] loads below the point the task
/// switched out at (the registers the switch saved, the switch's frames)
/// and above it (the frames of the wait and its callers). Measured: a task
/// asleep in `sleep` is 0.6 KiB below its body's frame; 1.5 KiB above was
/// no better than this.
const FRAMES_BELOW: usize = 256;
const FRAMES_ABOVE: usize = 768;

impl TaskMeta {
    fn new(slot: u32) -> Self {
        TaskMeta {
            slot,
            version: AtomicU64::new(1),
            refs: AtomicU32::new(0),
            next: AtomicPtr::new(ptr::null_mut()),
            home: AtomicUsize::new(NO_HOME),
            started_prev: Cell::new(None),
            started_next: Cell::new(None),
            shared: UnsafeCell::new(ptr::null()),
            coro: UnsafeCell::new(None),
            body: UnsafeCell::new(PendingBody::EMPTY),
            reserved: UnsafeCell::new(None),
            yielder: UnsafeCell::new(ptr::null()),
            switched_out_at: UnsafeCell::new(0),
            stack_size: UnsafeCell::new(0),
            guard: UnsafeCell::new((0, 0)),
            name: UnsafeCell::new(None),
            result: UnsafeCell::new(ResultSlot::empty()),
            result_state: AtomicU8::new(crate::task::RESULT_OPEN),
            join: Butex::new(0),
            sleep: Butex::new(0),
            wait_node: UnsafeCell::new(MaybeUninit::uninit()),
            stopped: AtomicBool::new(false),
            woken_by_timer: AtomicBool::new(false),
            lock: Mutex::new(InterruptState {
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

    /// Starts loading the stack frames the task resumes through: the
    /// registers its switch saved and the frames of the calls it returns
    /// from (for a sleep: the switch, the wait, the sleep and their caller).
    /// Those of a task that waited long are cold, and they are most of the
    /// cache misses of its resumption; its worker asks for them while it
    /// runs the task queued before (a hint: it reads nothing).
    ///
    /// Called by the worker that holds the task in its ready queue.
    #[inline]
    pub(crate) fn prefetch_frames(&self) {
        // SAFETY: written by the task in `group::suspend` on this worker's
        // thread, before it was queued here; it does not run meanwhile.
        let at = unsafe { *self.switched_out_at.get() };
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

    /// Makes `node` the task's wait node and returns it. It lives in the
    /// meta, not on the task's stack, so that the timer thread and wakers
    /// ending the wait touch the meta's lines only (one cold page, not
    /// two: with 100 000 sleepers the timer thread spent most of each
    /// callback waiting for the stack page).
    ///
    /// # Safety
    /// Called by the task itself, not inside another wait: the previous
    /// wait's step 5 (`butex::Leave`, which ends with
    /// [`end_wait`](Self::end_wait)) has run, so nothing else refers to the
    /// node. That holds because nothing between the two can wait: a task
    /// waits only from its own code, `Leave` takes no wait of its own, and
    /// waits during unwinding block the thread instead. `node`'s waiter is
    /// this task (nothing to drop when the next wait overwrites it).
    pub(crate) unsafe fn begin_wait(&self, node: WaitNode) -> &WaitNode {
        #[cfg(debug_assertions)]
        assert!(
            !self.in_wait.swap(true, Ordering::Relaxed),
            "{} began a wait inside another",
            self.id()
        );
        // SAFETY: the caller's contract: no reference to the old node is
        // left, and only this task's own wait uses the new one.
        unsafe { (*self.wait_node.get()).write(node) }
    }

    /// The node of the task's current wait.
    ///
    /// # Safety
    /// The task is in a wait: it began one with
    /// [`begin_wait`](Self::begin_wait), and has not left it (its wait's
    /// guard has not run), so the node is written and alive.
    pub(crate) unsafe fn current_wait(&self) -> &WaitNode {
        #[cfg(debug_assertions)]
        assert!(
            self.in_wait.load(Ordering::Relaxed),
            "{} is in no wait",
            self.id()
        );
        // SAFETY: the caller's contract.
        unsafe { (*self.wait_node.get()).assume_init_ref() }
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

    pub(crate) fn id(&self) -> TaskId {
        TaskId::new(self.slot, self.version.load(Ordering::Relaxed))
    }

    pub(crate) fn home(&self) -> usize {
        self.home.load(Ordering::Relaxed)
    }

    pub(crate) fn set_home(&self, worker: usize) {
        self.home.store(worker, Ordering::Relaxed)
    }

    pub(crate) fn lock_interrupts(&self) -> std::sync::MutexGuard<'_, InterruptState> {
        self.lock.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl fmt::Debug for TaskMeta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskMeta").field("id", &self.id()).finish()
    }
}

/// A pointer to a task's meta. Copy, Send: metas live forever (see the
/// module docs), so the pointer never dangles.
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
    pub(crate) fn next(&self) -> &'static AtomicPtr<TaskMeta> {
        &self.meta().next
    }
}

impl std::ops::Deref for TaskRef {
    type Target = TaskMeta;
    fn deref(&self) -> &TaskMeta {
        self.meta()
    }
}

// The wake lines are three cache lines (see `TaskMeta`): a field added
// before `slot` must not push them into a fourth. (Not under loom, whose
// atomics and locks are larger and model, not measure.)
#[cfg(not(loom))]
const _: () = assert!(std::mem::offset_of!(TaskMeta, slot) <= 3 * 64);

const SEGMENT: usize = 256;
const MAX_SEGMENTS: usize = 1 << 16; // 16 M tasks alive at once
const _: () = assert!(SEGMENT * MAX_SEGMENTS <= 1 << SLOT_BITS);

/// The process-wide table of task metas; see the module docs.
pub(crate) struct TaskTable {
    segments: Box<[AtomicPtr<TaskMeta>]>,
    /// Segments allocated so far; grown under this lock.
    grown: Mutex<usize>,
    /// Free slots not held in any worker's cache.
    free: Mutex<Vec<u32>>,
}

/// Free slots a plain thread (not a worker of the spawned-into runtime)
/// keeps for its next spawns and handle drops: without it, each spawn and
/// each drop from such a thread takes the table's lock.
struct ThreadSlots(Vec<u32>);

impl Drop for ThreadSlots {
    fn drop(&mut self) {
        table().give_back(&mut self.0);
    }
}

thread_local! {
    static THREAD_SLOTS: std::cell::RefCell<ThreadSlots> =
        const { std::cell::RefCell::new(ThreadSlots(Vec::new())) };
}

/// Runs `f` with this thread's slot cache, or with none while the thread is
/// being torn down.
pub(crate) fn with_thread_slots<R>(f: impl FnOnce(Option<&mut Vec<u32>>) -> R) -> R {
    let mut f = Some(f);
    let cached = THREAD_SLOTS.try_with(|c| {
        let mut c = c.try_borrow_mut().ok()?;
        f.take().map(|f| f(Some(&mut c.0)))
    });
    match (cached, f) {
        (Ok(Some(r)), _) => r,
        (_, Some(f)) => f(None),
        (_, None) => unreachable!("f ran but returned nothing"),
    }
}

/// Free slots a worker keeps before giving a batch back.
pub(crate) const SLOT_CACHE: usize = 128;
const SLOT_BATCH: usize = 64;

pub(crate) fn table() -> &'static TaskTable {
    static TABLE: std::sync::OnceLock<TaskTable> = std::sync::OnceLock::new();
    TABLE.get_or_init(TaskTable::new)
}

impl TaskTable {
    /// An empty table (the process has one, [`table`]).
    fn new() -> Self {
        TaskTable {
            segments: (0..MAX_SEGMENTS)
                .map(|_| AtomicPtr::new(ptr::null_mut()))
                .collect(),
            grown: Mutex::new(0),
            free: Mutex::new(Vec::new()),
        }
    }

    /// The meta in `slot`, if that slot exists.
    fn get(&self, slot: u32) -> Option<TaskRef> {
        let (seg, off) = (slot as usize / SEGMENT, slot as usize % SEGMENT);
        let base = self.segments.get(seg)?.load(Ordering::Acquire);
        if base.is_null() {
            return None;
        }
        // SAFETY: a published segment holds SEGMENT metas, never freed.
        Some(unsafe { TaskRef::from_ptr(base.add(off)) })
    }

    /// The live task named by `id`, if any. The answer may be stale the
    /// moment it is returned; callers re-check the version under the task's
    /// lock before acting.
    pub(crate) fn lookup(&self, id: TaskId) -> Option<TaskRef> {
        let t = self.get(id.slot())?;
        (t.version.load(Ordering::Acquire) == id.version() && t.refs.load(Ordering::Acquire) > 0)
            .then_some(t)
    }

    /// Whether `id` still names `t` (call under `t.lock`).
    pub(crate) fn is_current(t: &TaskMeta, id: TaskId) -> bool {
        t.version.load(Ordering::Acquire) == id.version()
    }

    /// A free slot, from `cache` (a worker's) or the shared list; grows the
    /// table when both are empty. `None` only when the table is full.
    pub(crate) fn alloc(&self, cache: Option<&mut Vec<u32>>) -> Option<TaskRef> {
        let slot = match cache {
            Some(c) => match c.pop() {
                Some(s) => s,
                None => {
                    self.refill(c);
                    c.pop()?
                }
            },
            None => {
                let mut free = self.lock_free();
                match free.pop() {
                    Some(s) => s,
                    None => {
                        drop(free);
                        let mut c = Vec::new();
                        self.refill(&mut c);
                        let s = c.pop()?;
                        self.lock_free().extend(c);
                        s
                    }
                }
            }
        };
        let t = self.get(slot).expect("a free slot exists");
        t.refs.store(2, Ordering::Relaxed);
        Some(t)
    }

    /// Drops one owner of `t`; the last one frees the slot.
    pub(crate) fn release(&self, t: TaskRef, cache: Option<&mut Vec<u32>>) {
        if t.refs.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        // SAFETY: refs reached 0: nobody else holds the task any more.
        unsafe {
            // The task or its handle's owner has dropped the result
            // (`task::RESULT_OPEN`); the clear is only a backstop.
            debug_assert!(
                !(*t.result.get()).is_some(),
                "a result outlived its task and handle"
            );
            (*t.result.get()).clear();
            *t.name.get() = None;
            *t.shared.get() = ptr::null();
            *t.deadline.get() = None;
            // The next task of this slot sets its own when it first runs;
            // none before (a stale one would point into a freed stack).
            *t.yielder.get() = ptr::null();
            *t.switched_out_at.get() = 0;
            debug_assert!((*t.coro.get()).is_none());
            #[cfg(debug_assertions)]
            debug_assert!(!t.in_wait.load(Ordering::Relaxed), "released inside a wait");
            debug_assert!(!(*t.body.get()).is_some() && (*t.reserved.get()).is_none());
        }
        let version = {
            let mut st = t.lock_interrupts();
            st.pending = false;
            st.waiting = ptr::null();
            // Bump the version under the lock: `interrupt` re-checks it there.
            t.version.fetch_add(1, Ordering::Release) + 1
        };
        if version == VERSION_LIMIT {
            // Every id of this slot has been used: retire it, so that none
            // is ever used again (a meta, once in 2^40 tasks of this slot).
            tracing::debug!(slot = t.slot, "task slot retired: its versions ran out");
            return;
        }
        t.stopped.store(false, Ordering::Relaxed);
        t.result_state
            .store(crate::task::RESULT_OPEN, Ordering::Relaxed);
        t.join.value().store(0, Ordering::Relaxed);
        t.home.store(NO_HOME, Ordering::Relaxed);
        match cache {
            Some(c) => {
                c.push(t.slot);
                if c.len() > SLOT_CACHE {
                    let at = c.len() - SLOT_BATCH;
                    self.lock_free().extend(c.drain(at..));
                }
            }
            None => self.lock_free().push(t.slot),
        }
    }

    /// Gives a worker's cache back (worker exit).
    pub(crate) fn give_back(&self, cache: &mut Vec<u32>) {
        self.lock_free().append(cache);
    }

    fn refill(&self, cache: &mut Vec<u32>) {
        {
            let mut free = self.lock_free();
            let at = free.len().saturating_sub(SLOT_BATCH);
            cache.extend(free.drain(at..));
        }
        if cache.is_empty() {
            self.grow(cache);
        }
    }

    fn grow(&self, cache: &mut Vec<u32>) {
        let mut grown = self.grown.lock().unwrap_or_else(|e| e.into_inner());
        if *grown == MAX_SEGMENTS {
            return;
        }
        let first = (*grown * SEGMENT) as u32;
        let seg: Box<[TaskMeta]> = (0..SEGMENT as u32)
            .map(|i| TaskMeta::new(first + i))
            .collect();
        let base = Box::into_raw(seg) as *mut TaskMeta;
        self.segments[*grown].store(base, Ordering::Release);
        *grown += 1;
        cache.extend((first..first + SEGMENT as u32).rev());
    }

    fn lock_free(&self) -> std::sync::MutexGuard<'_, Vec<u32>> {
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Slots handed out so far (the table's size), for leak tests.
    pub(crate) fn capacity(&self) -> usize {
        *self.grown.lock().unwrap_or_else(|e| e.into_inner()) * SEGMENT
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn an_id_carries_its_slot_and_version() {
        let id = TaskId::new((1 << SLOT_BITS) - 1, VERSION_LIMIT - 1);
        assert_eq!(
            (id.slot(), id.version()),
            ((1 << SLOT_BITS) - 1, VERSION_LIMIT - 1)
        );
        assert_eq!(TaskId::new(0, 1).as_u64(), 1 << SLOT_BITS);
    }

    /// A slot whose last version is freed is never handed out again, and
    /// its last id names nothing. (A table of its own: the process's must
    /// not lose a slot to a test.)
    #[test]
    fn a_slot_whose_versions_run_out_is_retired() {
        let table = &TaskTable::new();
        let t = table.alloc(None).expect("a free slot");
        t.version.store(VERSION_LIMIT - 1, Ordering::Relaxed);
        let last = t.id();
        assert!(table.lookup(last).is_some());
        table.release(t, None); // the task
        table.release(t, None); // its handle
        assert!(table.lookup(last).is_none());
        assert_eq!(t.version.load(Ordering::Relaxed), VERSION_LIMIT);
        assert!(
            !table.lock_free().contains(&t.slot),
            "a retired slot is not free"
        );
    }
}
