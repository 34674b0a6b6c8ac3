//! Task stacks: mapped a slab at a time, guarded when first run on, reused.
//!
//! A stack is a [`TaskStack`]: a range of a [`Slab`], one anonymous mapping
//! of [`BATCH`] stacks side by side, whose lowest page is a guard, so an
//! overflow faults instead of corrupting its neighbour. A new stack costs
//! no syscall of its own: a slab is one `mmap` for a batch, nothing in it is
//! touched, and a stack's guard (a guard region where the kernel has them,
//! else a `PROT_NONE` page; see [`TaskStack`]) is installed by the worker
//! that first runs a task on it, which then takes its first page fault. So
//! a stack that a spawn reserves but that never runs (its task ran on a
//! stack its worker had at hand) costs address space and nothing else.
//!
//! Finished tasks give their stack back for reuse: to their worker's
//! private cache (no lock), which trades with a shared pool in batches of
//! [`BATCH`] (one lock per batch). Spawn takes in the same order and maps
//! a slab only when both are empty. So after a burst of tasks, the next
//! burst of the same size maps nothing. A pooled stack keeps the pages its
//! last task touched (usually one or two), as bthread's do.
//!
//! The shared pools of all runtimes aim to keep at most a quarter of
//! `vm.max_map_count` idle stacks (16 382 with the kernel's default; where
//! each stack is two mappings, half the process's mappings). Above that
//! limit, what stayed idle through a whole [`RELEASE_PERIOD`] (so for one
//! to two periods) is surplus: the runtime's periodic housekeeping
//! (`sched/watchdog.rs`) marks it, and workers with nothing to run drop it,
//! [`release_chunk`] stacks at a time, looking for work between chunks.
//! Past a ceiling (twice the limit with guard regions, the limit itself
//! without), a batch given back makes its pool drop as many of its coldest
//! stacks at once, so the pools stay bounded even if no worker ever idles.
//! With guard regions, dropping stacks never unmaps one stack: their pages go back with one
//! `MADV_DONTNEED` call per batch (`process_madvise`), and a slab is
//! unmapped whole when its last stack is dropped. The limits are
//! process-wide counts read under each pool's own lock, so concurrent pools
//! may overshoot them by a batch. A mapping that fails for want of memory
//! or mappings makes its runtime's pool drop its idle stacks, and is tried
//! once more.
//!
//! A failed mapping is an error returned by spawn; a task never runs on a
//! worker's own stack (brpc #1648). Sizes are rounded up to whole pages;
//! stacks of the runtime's default size are pooled, and a task that asks
//! for another size gets a mapping of its own, guarded at spawn and
//! unmapped when it ends.

pub(crate) mod overflow;

use crate::loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use crate::loom::sync::{Mutex, MutexGuard};
use corosensei::stack::valgrind::ValgrindStackRegistration;
use corosensei::stack::{Stack, StackPointer};
use std::collections::VecDeque;
use std::io;
use std::mem::ManuallyDrop;
use std::ptr;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Stacks a worker keeps for itself before handing a batch to the shared pool.
pub(crate) const LOCAL_CACHE: usize = 256;
/// Stacks moved between a worker's cache and the shared pool at once.
pub(crate) const BATCH: usize = 64;
/// The shared pools of all runtimes together aim to keep at most this
/// fraction of the process's memory-map limit (`vm.max_map_count`) in idle
/// stacks: with two mappings each (no guard regions), half of the mappings,
/// so that idle stacks do not sit on the ones that everything else in the
/// process needs. With the kernel's default of 65 530 that is 16 382
/// stacks, and up to a few hundred MiB of the pages their tasks touched.
/// (bthread keeps every stack it ever made.)
#[cfg_attr(loom, allow(dead_code))]
const POOL_SHARE_OF_MAP_COUNT: usize = 4;
/// Idle stacks beyond the limit that no spawn needed for this long are
/// dropped.
#[cfg_attr(loom, allow(dead_code))]
pub(crate) const RELEASE_PERIOD: Duration = Duration::from_secs(1);
/// Stacks an idle worker drops before it looks for work again: one
/// `process_madvise` call (about 1 µs per stack that holds pages) where the
/// kernel takes it for the calling process (Linux 6.15)...
const RELEASE_CHUNK_VECTORED: usize = 64;
/// ... else one `madvise` each, a TLB shoot-down apiece when another thread
/// runs (25 µs): at most about 0.2 ms.
const RELEASE_CHUNK_EACH: usize = 8;

/// Stacks an idle worker drops before it looks for work again.
fn release_chunk() -> usize {
    if vectored_advice() {
        RELEASE_CHUNK_VECTORED
    } else {
        RELEASE_CHUNK_EACH
    }
}

/// What the stacks of all runtimes amount to, counted process-wide.
struct PoolCounts {
    /// Idle stacks in the shared pools.
    pooled: AtomicUsize,
    /// Of those, the ones marked for release.
    marked: AtomicUsize,
    /// Slabs whose address range could not be unmapped (see `Slab`'s
    /// `Drop`).
    unmap_failures: AtomicUsize,
    /// Pools made so far: the next one's id, less one.
    pools: AtomicU64,
}

/// The process-wide [`PoolCounts`].
fn counts() -> &'static PoolCounts {
    static COUNTS: std::sync::OnceLock<PoolCounts> = std::sync::OnceLock::new();
    COUNTS.get_or_init(|| PoolCounts {
        pooled: AtomicUsize::new(0),
        marked: AtomicUsize::new(0),
        unmap_failures: AtomicUsize::new(0),
        pools: AtomicU64::new(0),
    })
}

/// The most idle stacks the shared pools aim to keep.
fn shared_pool_limit() -> usize {
    static LIMIT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        let max_map_count = std::fs::read_to_string("/proc/sys/vm/max_map_count")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .unwrap_or(65_530);
        max_map_count / POOL_SHARE_OF_MAP_COUNT
    })
}

/// The most idle stacks the shared pools ever hold: beyond this, stacks
/// given back make as many of the coldest ones drop at once. With guard regions
/// twice the limit, which leaves room for a burst's surplus to wait for its
/// release; without, the limit itself, because each idle stack then holds
/// two of the process's mappings.
fn shared_pool_ceiling() -> usize {
    if stack_guard_regions() {
        2 * shared_pool_limit()
    } else {
        shared_pool_limit()
    }
}

/// The smallest stack size a task may ask for, in bytes: enough for
/// formatting and a panic. A smaller `stack_size` is an error.
pub const MIN_STACK_SIZE: usize = 16 * 1024;
/// The smallest stack mapped: [`MIN_STACK_SIZE`].
#[cfg(not(debug_assertions))]
pub(crate) const SMALLEST_MAPPED: usize = MIN_STACK_SIZE;
/// The smallest stack mapped in a debug build of spindle, whose frames are
/// far larger (no inlining; every temporary on the stack): 16 KiB did not
/// hold a task that spawned while the work-stealing deque grew (crossbeam
/// moves a 2 KiB garbage bag through several frames then;
/// tests/stack_release.rs). Smaller sizes asked for are rounded up to it.
#[cfg(debug_assertions)]
pub(crate) const SMALLEST_MAPPED: usize = 64 * 1024;
/// The most address space one slab takes: stacks of more than a
/// sixty-fourth of it (512 KiB) come fewer to a slab, down to one, so that
/// a large default stack size does not make one mapping too large to be had.
const SLAB_BYTES: usize = 32 << 20;
/// The largest we accept: beyond this a size is a mistake, not a request.
pub(crate) const MAX_STACK_SIZE: usize = 1 << 40;

/// Stacks a plain thread keeps for its next spawns into one runtime (whose
/// pool is `pool`, its shelf `owner`): taken from the shared pool a batch at
/// a time, so that a thread spawning many tasks takes the pool's lock once
/// per batch. Plain threads never give stacks back (tasks end on workers),
/// so this holds at most one batch. When the thread spawns into another
/// runtime, the batch goes back to its pool's shelf (it is dropped if that
/// runtime is gone); when the thread ends, it is dropped.
struct ThreadStacks {
    pool: u64,
    owner: Weak<Mutex<Shelf>>,
    stacks: Vec<TaskStack>,
}

thread_local! {
    static THREAD_STACKS: std::cell::RefCell<ThreadStacks> = const {
        std::cell::RefCell::new(ThreadStacks { pool: 0, owner: Weak::new(), stacks: Vec::new() })
    };
}

/// The shared part of the stack pool.
pub(crate) struct StackPool {
    /// Unique per pool (never 0), to tell whose stacks a thread caches.
    id: u64,
    /// The size of pooled stacks (the runtime's default stack size).
    size: usize,
    /// Shared with the thread caches that hold a batch of its stacks (as a
    /// `Weak`, to give the batch back).
    shared: Arc<Mutex<Shelf>>,
}

/// The idle stacks of a pool, and what is to become of them.
#[derive(Default)]
struct Shelf {
    /// Taken from and given to at the back: the front holds the stacks that
    /// have been idle longest.
    stacks: VecDeque<TaskStack>,
    /// The fewest stacks on the shelf since the last [`StackPool::tick`]:
    /// that many have been idle the whole time.
    low_water: usize,
    /// How many of the front stacks are marked for release (counted in
    /// `PoolCounts::marked` too). Always at most `low_water`, which is at most the
    /// number of stacks.
    release: usize,
    /// When the last release period began (`None` before the first tick).
    #[cfg_attr(loom, allow(dead_code))]
    period_start: Option<Instant>,
}

/// A shelf outlives its pool only in a thread cache's brief upgrade of its
/// `Weak` (`take_for_thread`): whatever that put on it is dropped here, and
/// uncounted.
impl Drop for Shelf {
    fn drop(&mut self) {
        let idle: Vec<TaskStack> = self.pop_front(usize::MAX).collect();
        drop_stacks(idle);
    }
}

impl Shelf {
    fn set_release(&mut self, n: usize) {
        if n >= self.release {
            counts().marked.fetch_add(n - self.release, Relaxed);
        } else {
            counts().marked.fetch_sub(self.release - n, Relaxed);
        }
        self.release = n;
    }

    /// Takes up to `n` of the most recently given stacks (a spawn's).
    fn pop_back(&mut self, n: usize) -> std::collections::vec_deque::Drain<'_, TaskStack> {
        let at = self.stacks.len().saturating_sub(n);
        // Unmark before uncounting, so that others never see fewer unmarked
        // stacks than there are.
        self.set_release(self.release.min(at));
        counts().pooled.fetch_sub(self.stacks.len() - at, Relaxed);
        self.low_water = self.low_water.min(at);
        self.stacks.drain(at..)
    }

    /// Takes up to `n` of the stacks idle longest (to drop them).
    fn pop_front(&mut self, n: usize) -> std::collections::vec_deque::Drain<'_, TaskStack> {
        let n = n.min(self.stacks.len());
        self.set_release(self.release.saturating_sub(n));
        counts().pooled.fetch_sub(n, Relaxed);
        self.low_water = self.low_water.saturating_sub(n);
        self.stacks.drain(..n)
    }

    fn push_back(&mut self, stacks: impl IntoIterator<Item = TaskStack>) {
        let before = self.stacks.len();
        self.stacks.extend(stacks);
        counts()
            .pooled
            .fetch_add(self.stacks.len() - before, Relaxed);
    }

    /// See [`StackPool::tick`]. At the end of a period, marks the stacks
    /// that stayed on the shelf all period, as far as the pools hold more
    /// than `limit` not yet marked (reserved in `PoolCounts::marked`, so that two
    /// pools do not both release the same surplus).
    #[cfg_attr(loom, allow(dead_code))]
    fn tick(&mut self, now: Instant, limit: usize) -> bool {
        match self.period_start {
            Some(start) if now.saturating_duration_since(start) < RELEASE_PERIOD => {}
            first_or_ended => {
                if first_or_ended.is_some() {
                    let idle_all_period = self.low_water - self.release;
                    let mut marked = counts().marked.load(Relaxed);
                    loop {
                        let unmarked_surplus = counts()
                            .pooled
                            .load(Relaxed)
                            .saturating_sub(limit)
                            .saturating_sub(marked);
                        let k = idle_all_period.min(unmarked_surplus);
                        if k == 0 {
                            break;
                        }
                        match counts().marked.compare_exchange_weak(
                            marked,
                            marked + k,
                            Relaxed,
                            Relaxed,
                        ) {
                            Ok(_) => {
                                // Reserved in `marked` already.
                                self.release += k;
                                break;
                            }
                            Err(m) => marked = m,
                        }
                    }
                }
                self.low_water = self.stacks.len();
                self.period_start = Some(now);
            }
        }
        self.release > 0
    }
}

impl std::fmt::Debug for StackPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StackPool")
            .field("size", &self.size)
            .field("pooled", &self.pooled())
            .finish()
    }
}

impl StackPool {
    pub(crate) fn new(size: usize) -> Self {
        // Read the process-wide limits now, on the thread that builds the
        // runtime: the first read opens /proc and maps a scratch page, which
        // has no place in the timer thread's first tick or a worker's loop.
        let _ = shared_pool_ceiling();
        StackPool {
            id: counts().pools.fetch_add(1, Relaxed) + 1,
            size,
            shared: Arc::new(Mutex::new(Shelf::default())),
        }
    }

    pub(crate) fn default_size(&self) -> usize {
        self.size
    }

    /// A stack of `size` bytes: from `local` (refilled from the shared pool
    /// a batch at a time), or a new mapping.
    pub(crate) fn take(
        &self,
        size: usize,
        local: Option<&mut Vec<TaskStack>>,
    ) -> io::Result<TaskStack> {
        if size != self.size {
            return self.retry_out_of_memory(|| map(size));
        }
        match local {
            Some(l) => {
                if l.is_empty() {
                    l.extend(self.lock().pop_back(BATCH));
                }
                if l.is_empty() {
                    self.retry_out_of_memory(|| map_slab(size, BATCH, false, l))?;
                }
                Ok(l.pop().expect("a refilled cache"))
            }
            None => {
                if let Some(s) = self.lock().pop_back(1).next() {
                    return Ok(s);
                }
                let mut slab = Vec::with_capacity(BATCH);
                self.retry_out_of_memory(|| map_slab(size, BATCH, false, &mut slab))?;
                let s = slab.pop().expect("a slab of stacks");
                self.shelve(slab);
                Ok(s)
            }
        }
    }

    /// Runs `map`; if it fails for want of mappings (or memory), gives back
    /// our idle stacks and tries once more before failing the spawn.
    fn retry_out_of_memory<T>(&self, mut map: impl FnMut() -> io::Result<T>) -> io::Result<T> {
        match map() {
            Err(e) if e.kind() == io::ErrorKind::OutOfMemory && self.trim() > 0 => map(),
            r => r,
        }
    }

    /// [`take`](Self::take) for a thread that is not one of this pool's
    /// workers: through the thread's own small cache (see `ThreadStacks`).
    pub(crate) fn take_for_thread(&self, size: usize) -> io::Result<TaskStack> {
        if size != self.size {
            return self.take(size, None);
        }
        THREAD_STACKS
            .try_with(|c| match c.try_borrow_mut() {
                Ok(mut c) => {
                    if c.pool != self.id {
                        let theirs = std::mem::take(&mut c.stacks);
                        if let Some(owner) = c.owner.upgrade() {
                            shelve(&owner, theirs);
                        }
                        c.pool = self.id;
                        c.owner = Arc::downgrade(&self.shared);
                    }
                    self.take(size, Some(&mut c.stacks))
                }
                Err(_) => self.take(size, None),
            })
            .unwrap_or_else(|_| self.take(size, None))
    }

    /// Maps one stack of the default size onto the shelf: a size the OS can
    /// never map (more than the memory it will commit) fails here, once,
    /// instead of at every spawn.
    pub(crate) fn prime(&self) -> io::Result<()> {
        let stack = map(self.size)?;
        self.shelve([stack]);
        Ok(())
    }

    /// Drops every idle stack of the shared pool; returns how many.
    pub(crate) fn trim(&self) -> usize {
        let idle = self.lock().pop_back(usize::MAX).collect::<Vec<_>>();
        let n = idle.len();
        drop_stacks(idle);
        n
    }

    /// Gives back a stack of `size` bytes.
    pub(crate) fn give(&self, size: usize, stack: TaskStack, local: Option<&mut Vec<TaskStack>>) {
        if size != self.size {
            return; // dropped: its slab of one is unmapped
        }
        match local {
            Some(l) => {
                l.push(stack);
                if l.len() > LOCAL_CACHE {
                    let at = l.len() - BATCH;
                    self.shelve(l.drain(at..));
                }
            }
            None => self.shelve([stack]),
        }
    }

    /// Puts `stacks` on the shelf; drops the coldest ones beyond the
    /// ceiling.
    fn shelve(&self, stacks: impl IntoIterator<Item = TaskStack>) {
        shelve(&self.shared, stacks)
    }

    /// Housekeeping, called periodically (more often than
    /// [`RELEASE_PERIOD`]). At the end of each period, marks for release
    /// the idle stacks beyond the limit that no spawn needed during it.
    /// Returns whether some are marked: idle workers drop them
    /// ([`release_some`](Self::release_some)).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn tick(&self, now: Instant) -> bool {
        self.lock().tick(now, shared_pool_limit())
    }

    /// Whether any pool has stacks marked for release: one load, so that a
    /// worker about to park takes no lock in the common case.
    pub(crate) fn has_marked(&self) -> bool {
        counts().marked.load(Relaxed) > 0
    }

    /// Drops up to [`release_chunk`] of the stacks marked for release, and
    /// never so many that the pools fall below their limit (other pools may
    /// have been drawn from since the marking); returns whether it dropped
    /// any.
    pub(crate) fn release_some(&self) -> bool {
        self.release_above(shared_pool_limit())
    }

    /// [`release_some`](Self::release_some), keeping `limit` idle stacks.
    fn release_above(&self, limit: usize) -> bool {
        let chunk: Vec<TaskStack> = {
            let mut shelf = self.lock();
            if shelf.release == 0 {
                return false;
            }
            let surplus = counts().pooled.load(Relaxed).saturating_sub(limit);
            let n = shelf.release.min(release_chunk()).min(surplus);
            if n == 0 {
                shelf.set_release(0);
                return false;
            }
            shelf.pop_front(n).collect()
        };
        drop_stacks(chunk); // outside the lock
        true
    }

    /// Stacks in the shared pool now.
    pub(crate) fn pooled(&self) -> usize {
        self.lock().stacks.len()
    }

    fn lock(&self) -> MutexGuard<'_, Shelf> {
        crate::loom::lock(&self.shared)
    }
}

/// Puts `stacks` on `shelf`; drops the coldest ones beyond the ceiling.
fn shelve(shelf: &Mutex<Shelf>, stacks: impl IntoIterator<Item = TaskStack>) {
    let over: Vec<TaskStack> = {
        let mut shelf = crate::loom::lock(shelf);
        shelf.push_back(stacks);
        let over = counts()
            .pooled
            .load(Relaxed)
            .saturating_sub(shared_pool_ceiling());
        shelf.pop_front(over).collect()
    };
    drop_stacks(over); // outside the lock
}

impl Drop for StackPool {
    fn drop(&mut self) {
        self.trim();
    }
}

/// The page size (the size of a stack's guard page).
pub(crate) fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PAGE.get_or_init(|| unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize)
}

/// Checks a requested stack size: `InvalidInput` outside
/// [`MIN_STACK_SIZE`]`..=`[`MAX_STACK_SIZE`]. Returns the size stacks are
/// made with: rounded up to whole pages (so that sizes that make the same
/// stack compare equal, and share a pool), and to [`SMALLEST_MAPPED`].
pub(crate) fn check_size(size: usize) -> io::Result<usize> {
    if size < MIN_STACK_SIZE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("stack size {size} is smaller than the smallest, {MIN_STACK_SIZE} bytes"),
        ));
    }
    if size > MAX_STACK_SIZE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("stack size {size} is larger than the supported {MAX_STACK_SIZE} bytes"),
        ));
    }
    let page = page_size();
    // No overflow: size <= MAX_STACK_SIZE, far below usize::MAX.
    Ok(size.max(SMALLEST_MAPPED).next_multiple_of(page))
}

/// One anonymous mapping that holds [`BATCH`] stacks of one size (or one
/// stack of a size of its own), side by side. Mapping stacks a batch at a
/// time costs one `mmap` per batch instead of one per stack, and the kernel
/// merges slabs made one after another into one mapping. A slab is
/// unmapped whole, when its last stack is dropped; a stack dropped before
/// that gives its pages back with `MADV_DONTNEED` (see `TaskStack`'s
/// `Drop` and [`drop_stacks`]), so what a slab keeps is address space, not
/// memory.
struct Slab {
    start: usize,
    len: usize,
    /// The length of each of its stacks' ranges, guard included.
    stack_len: usize,
}

impl Drop for Slab {
    fn drop(&mut self) {
        let start = self.start as *mut libc::c_void;
        // SAFETY: `[start, start + len)` is our mapping, and every stack in
        // it is gone (each held the `Arc` this is the last of).
        if unsafe { libc::munmap(start, self.len) } == 0 {
            return;
        }
        // Unmapping a slab in the middle of a merged mapping splits it,
        // which fails at the process's mapping limit. Give the memory back
        // and leave the address range (and its guards) mapped: a leak of
        // address space, not of memory.
        let error = io::Error::last_os_error();
        // SAFETY: as above; the pages are dropped, the mapping stays ours.
        unsafe { libc::madvise(start, self.len, libc::MADV_DONTNEED) };
        if counts().unmap_failures.fetch_add(1, Relaxed) == 0 {
            tracing::warn!(
                %error,
                "could not unmap task stacks (their memory is given back, their \
                 address range is kept); further failures are not logged"
            );
        }
    }
}

/// A task stack: a range of a [`Slab`] whose lowest page is a guard. The
/// guard is a *guard region* (`MADV_GUARD_INSTALL`, Linux 6.13): a marker in
/// the page tables that makes any access fault, without a mapping of its
/// own. So a slab of stacks is one mapping, merged with its neighbours: a
/// million stacks take at most one mapping per slab of the process's
/// `vm.max_map_count`. Guard regions are installed one stack at a time, by
/// the worker that first runs a task on it ([`TaskStack::guard`]). Where
/// they are missing (older kernels, some sandboxes) or refused for one
/// mapping (a locked one, under `mlockall`), the guard is a `PROT_NONE`
/// page (`mprotect`), as in corosensei's `DefaultStack`: two mappings per
/// stack, made with the slab.
///
/// Slabs are mapped with `MAP_STACK`, which (since Linux 6.7) keeps
/// transparent huge pages of every size off them: merged, they would
/// otherwise be candidates for 2 MiB pages. Nothing is touched when a slab
/// is made: a stack's first page fault happens on the worker that first
/// runs a task on it. The guard page is part of the writable mapping, so it
/// counts against the commit limit (one page per stack more than
/// `DefaultStack`, which only matters under `vm.overcommit_memory = 2`).
///
/// Three words: stacks move between caches, pools and task metas on every
/// spawn.
pub(crate) struct TaskStack {
    /// The top of the stack (the end of its range, page-aligned), and
    /// [`GUARDED`] in its lowest bit.
    top: usize,
    /// The mapping the range belongs to.
    slab: Arc<Slab>,
    valgrind: ManuallyDrop<ValgrindStackRegistration>,
}

/// The bit of `TaskStack::top` that says the guard is in place
/// ([`TaskStack::guard`]); an unguarded stack has never been run on, so it
/// has no pages.
const GUARDED: usize = 1;

// SAFETY: `top` is page-aligned (so aligned to STACK_ALIGNMENT), `limit` is
// the start of the range and so includes the guard page, which faults on
// any access (a coroutine is only built on a guarded stack); between them
// are at least MIN_STACK_SIZE (16 KiB) writable bytes (`map_slab` gives
// each stack `size.max(SMALLEST_MAPPED)`), more than corosensei's minimum.
// The slab (the mapping) lives as long as the stack, which holds an `Arc`
// to it.
unsafe impl Stack for TaskStack {
    #[inline]
    fn base(&self) -> StackPointer {
        StackPointer::new(self.top & !GUARDED).expect("a mapping does not end at 0")
    }

    #[inline]
    fn limit(&self) -> StackPointer {
        StackPointer::new(self.start() as usize).expect("a mapping does not start at 0")
    }
}

impl TaskStack {
    /// The bottom of the range: its guard page.
    fn start(&self) -> *mut libc::c_void {
        ((self.top & !GUARDED) - self.slab.stack_len) as *mut libc::c_void
    }

    /// Whether the guard is in place: anything may run on the stack.
    pub(crate) fn is_guarded(&self) -> bool {
        self.top & GUARDED != 0
    }

    /// Drops the stack without giving its pages back: they are given back
    /// already, or go with the slab, of which this is the last stack.
    fn drop_quietly(self) {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: registered in `map_slab`; `Drop` never runs for `this`,
        // so this is the one deregistration.
        unsafe { ManuallyDrop::drop(&mut this.valgrind) };
        // SAFETY: `this` is not used again and its `Drop` never runs: the
        // `Arc` is dropped once, here.
        unsafe { ptr::drop_in_place(&mut this.slab) };
    }
}

impl Drop for TaskStack {
    fn drop(&mut self) {
        // SAFETY: registered in `map_slab`, dropped once, here.
        unsafe { ManuallyDrop::drop(&mut self.valgrind) };
        // No pages (never run on), or the last stack of its slab: the
        // slab's own drop unmaps it all.
        if !self.is_guarded() || Arc::strong_count(&self.slab) == 1 {
            return;
        }
        // SAFETY: the range is ours and nothing runs on it any more (a
        // stack is dropped only with its coroutine finished or unwound, or
        // unused); the advice drops its pages, the guard stays.
        unsafe { libc::madvise(self.start(), self.slab.stack_len, libc::MADV_DONTNEED) };
    }
}

/// Drops `stacks`, giving back their pages with one `process_madvise` call
/// per [`IOV_BATCH`] instead of one `madvise` each: so one TLB flush per
/// batch, not per stack. Slabs left with no stack are unmapped whole; their
/// stacks' pages are not advised first.
pub(crate) fn drop_stacks(stacks: impl IntoIterator<Item = TaskStack>) {
    let mut stacks = stacks.into_iter().peekable();
    while stacks.peek().is_some() {
        let mut batch: Vec<TaskStack> = stacks.by_ref().take(IOV_BATCH).collect();
        // Grouped by slab: a group that holds every stack left of its slab
        // goes with the slab's unmapping.
        batch.sort_unstable_by_key(|s| s.slab.start);
        let mut whole_slab = vec![false; batch.len()];
        let mut ranges = Vec::with_capacity(batch.len());
        let mut at = 0;
        for group in batch.chunk_by(|a, b| Arc::ptr_eq(&a.slab, &b.slab)) {
            if Arc::strong_count(&group[0].slab) == group.len() {
                whole_slab[at..at + group.len()].fill(true);
            } else {
                ranges.extend(
                    group
                        .iter()
                        .filter(|s| s.is_guarded())
                        .map(|s| libc::iovec {
                            iov_base: s.start(),
                            iov_len: s.slab.stack_len,
                        }),
                );
            }
            at += group.len();
        }
        // SAFETY: the ranges are ours and unused (see `TaskStack`'s `Drop`).
        let given_back = unsafe { advise_all(&ranges, libc::MADV_DONTNEED) };
        for (s, whole_slab) in batch.into_iter().zip(whole_slab) {
            if given_back || whole_slab {
                s.drop_quietly();
            } else {
                drop(s); // one madvise of its own
            }
        }
    }
}

/// The most ranges given to one `process_madvise` call (the kernel's
/// `IOV_MAX`, 1024, allows more).
const IOV_BATCH: usize = 256;

impl std::fmt::Debug for TaskStack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskStack")
            .field("top", &format_args!("{:#x}", self.top & !GUARDED))
            .field("len", &self.slab.stack_len)
            .field("guarded", &self.is_guarded())
            .finish()
    }
}

/// `madvise` advice that installs a guard region (Linux 6.13; not in libc
/// yet).
const MADV_GUARD_INSTALL: libc::c_int = 102;
/// The pidfd that names the calling process (Linux 6.15; not in libc yet).
const PIDFD_SELF: libc::c_int = -10_000;

/// Whether task stacks get their guard page as a guard region
/// (`MADV_GUARD_INSTALL`, Linux 6.13): then a slab of stacks is one memory
/// mapping, merged with its neighbours, and many tasks do not need a raised
/// `vm.max_map_count`; else each stack is two mappings. Tried once, on a
/// scratch page: anything but success means no (EINVAL from an older
/// kernel, EPERM or ENOSYS from a sandbox, ...).
pub fn stack_guard_regions() -> bool {
    static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        // SAFETY: the page is ours, fresh and unused.
        on_scratch_page(|p, page| unsafe { libc::madvise(p, page, MADV_GUARD_INSTALL) == 0 })
    })
}

/// Whether `process_madvise` on the calling process takes any advice
/// (Linux 6.13, with `PIDFD_SELF` from 6.15): then the pages of a batch of
/// dropped stacks go back in one call. Tried once.
fn vectored_advice() -> bool {
    static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        on_scratch_page(|p, page| {
            let range = libc::iovec {
                iov_base: p,
                iov_len: page,
            };
            // SAFETY: the page is ours, fresh and unused; the kernel reads
            // one iovec.
            let advised = unsafe {
                libc::syscall(
                    libc::SYS_process_madvise,
                    PIDFD_SELF,
                    &range,
                    1usize,
                    libc::MADV_DONTNEED,
                    0u32,
                )
            };
            advised == page as libc::c_long
        })
    })
}

/// Maps a private page, asks `probe` about it (its address and length),
/// and unmaps it; false if no page can be mapped.
fn on_scratch_page(probe: impl FnOnce(*mut libc::c_void, usize) -> bool) -> bool {
    let page = page_size();
    // SAFETY: a fresh anonymous mapping at an address of the kernel's choice.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return false;
    }
    let answer = probe(p, page);
    // SAFETY: our mapping, which nothing uses any more.
    unsafe { libc::munmap(p, page) };
    answer
}

/// Gives `advice` for every range, with `process_madvise` where the kernel
/// takes it there, else one `madvise` each; returns whether every range
/// took it.
///
/// # Safety
/// The ranges are page-aligned parts of mappings of ours that the advice
/// may act on (nothing runs on them; their pages may be dropped).
unsafe fn advise_all(ranges: &[libc::iovec], advice: libc::c_int) -> bool {
    if ranges.is_empty() {
        return true;
    }
    if vectored_advice() {
        return ranges.chunks(IOV_BATCH).all(|chunk| {
            let total: usize = chunk.iter().map(|r| r.iov_len).sum();
            // SAFETY: the caller's promise, for each range; the kernel reads
            // `chunk.len()` iovecs from the slice.
            let advised = unsafe {
                libc::syscall(
                    libc::SYS_process_madvise,
                    PIDFD_SELF,
                    chunk.as_ptr(),
                    chunk.len(),
                    advice,
                    0u32,
                )
            };
            // Refused part-way: one range at a time, for the error.
            // SAFETY: the caller's promise; advising twice is harmless.
            advised == total as libc::c_long || unsafe { advise_each(chunk, advice) }
        });
    }
    // SAFETY: the caller's promise.
    unsafe { advise_each(ranges, advice) }
}

/// [`advise_all`] with one `madvise` per range.
///
/// # Safety
/// As for [`advise_all`].
unsafe fn advise_each(ranges: &[libc::iovec], advice: libc::c_int) -> bool {
    ranges.iter().all(|r| {
        // SAFETY: the caller's promise.
        unsafe { libc::madvise(r.iov_base, r.iov_len, advice) == 0 }
    })
}

/// Makes the page at `page` fault on any access.
///
/// # Safety
/// `page` is the first page of a stack's range that nothing uses yet.
unsafe fn install_guard(page: *mut libc::c_void) -> io::Result<()> {
    if stack_guard_regions() {
        // SAFETY: the caller's range; the advice touches only its page
        // tables.
        if unsafe { libc::madvise(page, page_size(), MADV_GUARD_INSTALL) } == 0 {
            return Ok(());
        }
        // EINVAL: refused for this mapping (a locked one); anything else
        // (out of memory for page tables) is an error.
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(e);
        }
    }
    // SAFETY: as above; the page becomes inaccessible (its own mapping).
    if unsafe { libc::mprotect(page, page_size(), libc::PROT_NONE) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl TaskStack {
    /// Installs the stack's guard if it has none yet; a stack is guarded
    /// before anything runs on it. A slab's stacks get their guards when
    /// they are first needed where the kernel has guard regions (so a
    /// stack reserved by a spawn but never run costs no syscall), and when
    /// the stack is mapped otherwise (where the guard is a mapping of its
    /// own, which can run out: spawn reports that).
    #[inline]
    pub(crate) fn guard(&mut self) -> io::Result<()> {
        if self.is_guarded() {
            return Ok(());
        }
        self.install_guard()
    }

    #[cold]
    #[inline(never)]
    fn install_guard(&mut self) -> io::Result<()> {
        // SAFETY: the first page of our range, on which nothing runs yet.
        unsafe { install_guard(self.start()) }?;
        self.top |= GUARDED;
        Ok(())
    }
}

/// Maps a slab of `count` stacks (fewer if they would take more than
/// [`SLAB_BYTES`], one where guards are mappings or a whole slab cannot be
/// had) with at least `size` usable bytes each, into `out`; guarded at once if `guard_now` or where the kernel has no
/// guard regions, else when first needed ([`TaskStack::guard`]).
fn map_slab(
    size: usize,
    count: usize,
    guard_now: bool,
    out: &mut impl Extend<TaskStack>,
) -> io::Result<()> {
    debug_assert!(
        (SMALLEST_MAPPED..=MAX_STACK_SIZE).contains(&size) && count > 0,
        "stack sizes go through check_size"
    );
    let size = size.max(SMALLEST_MAPPED);
    let page = page_size();
    let annotate = |e: io::Error| {
        io::Error::new(
            e.kind(),
            format!("cannot map a task stack of {size} bytes: {e}"),
        )
    };
    // Each stack's usable part rounded up to pages, plus its guard page.
    let len = size
        .checked_add(2 * page - 1)
        .map(|l| l & !(page - 1))
        .ok_or_else(|| annotate(io::ErrorKind::InvalidInput.into()))?;
    // Without guard regions each stack's guard is a mapping of its own, and
    // a slab's mappings would stay until all its stacks went: one stack to
    // a slab there, so that each stack dropped gives its mappings back.
    let count = if stack_guard_regions() {
        count.min((SLAB_BYTES / len).max(1))
    } else {
        1
    };
    let total = len
        .checked_mul(count)
        .ok_or_else(|| annotate(io::ErrorKind::InvalidInput.into()))?;
    // SAFETY: a fresh anonymous mapping at an address of the kernel's choice.
    let start = unsafe {
        libc::mmap(
            ptr::null_mut(),
            total,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if start == libc::MAP_FAILED {
        let e = io::Error::last_os_error();
        // A whole slab may not be had where one stack may (a commit limit,
        // `RLIMIT_AS`): one stack, then.
        if count > 1 && e.kind() == io::ErrorKind::OutOfMemory {
            return map_slab(size, 1, guard_now, out);
        }
        return Err(annotate(e));
    }
    // From here on, dropping `slab` unmaps it.
    let slab = Arc::new(Slab {
        start: start as usize,
        len: total,
        stack_len: len,
    });
    let mut stacks = (0..count).map(|i| {
        let lo = slab.start + i * len;
        TaskStack {
            top: lo + len,
            slab: Arc::clone(&slab),
            valgrind: ManuallyDrop::new(ValgrindStackRegistration::new(lo as *mut u8, len)),
        }
    });
    if guard_now || !stack_guard_regions() {
        let guarded = stacks
            .map(|mut s| s.guard().map(|()| s))
            .collect::<io::Result<Vec<_>>>()
            .map_err(annotate)?;
        out.extend(guarded);
    } else {
        out.extend(stacks.by_ref());
    }
    Ok(())
}

/// Maps one guarded stack with at least `size` usable bytes (a slab of
/// one).
fn map(size: usize) -> io::Result<TaskStack> {
    let mut one = Vec::with_capacity(1);
    map_slab(size, 1, true, &mut one)?;
    Ok(one.pop().expect("a slab of one"))
}

#[cfg(all(test, not(loom)))]
mod tests {
    //! The shelf's bookkeeping, with a limit of 0 (every idle stack is
    //! beyond it). Other tests' pools share the process-wide counters, but
    //! can only add to the surplus these see.
    use super::*;

    fn pool_with(n: usize) -> StackPool {
        let pool = StackPool::new(SMALLEST_MAPPED);
        for _ in 0..n {
            pool.give(SMALLEST_MAPPED, map(SMALLEST_MAPPED).unwrap(), None);
        }
        pool
    }

    fn take(pool: &StackPool, n: usize) {
        for _ in 0..n {
            pool.take(SMALLEST_MAPPED, None).unwrap();
        }
    }

    fn tick(pool: &StackPool, at: Instant) -> bool {
        pool.lock().tick(at, 0)
    }

    fn release_all(pool: &StackPool) -> usize {
        let before = pool.pooled();
        while pool.release_above(0) {}
        before - pool.pooled()
    }

    #[test]
    fn surplus_is_what_stayed_idle_a_whole_period() {
        let pool = pool_with(10);
        let t0 = Instant::now();
        assert!(!tick(&pool, t0), "the first tick only starts a period");
        take(&pool, 3); // 7 left, idle all period
        assert!(!tick(&pool, t0 + RELEASE_PERIOD / 2), "mid-period");
        assert_eq!(release_all(&pool), 0);
        assert!(tick(&pool, t0 + RELEASE_PERIOD));
        assert_eq!(release_all(&pool), 7);
        assert!(!tick(&pool, t0 + 2 * RELEASE_PERIOD), "nothing left");
    }

    #[test]
    fn stacks_given_back_during_a_period_wait_for_the_next() {
        let pool = pool_with(0);
        let t0 = Instant::now();
        assert!(!tick(&pool, t0));
        pool.give(SMALLEST_MAPPED, map(SMALLEST_MAPPED).unwrap(), None);
        pool.give(SMALLEST_MAPPED, map(SMALLEST_MAPPED).unwrap(), None);
        assert!(!tick(&pool, t0 + RELEASE_PERIOD), "not idle all period");
        assert!(tick(&pool, t0 + 2 * RELEASE_PERIOD));
        assert_eq!(release_all(&pool), 2);
    }

    #[test]
    fn a_burst_takes_back_stacks_marked_for_release() {
        let pool = pool_with(10);
        let t0 = Instant::now();
        tick(&pool, t0);
        assert!(tick(&pool, t0 + RELEASE_PERIOD));
        take(&pool, 8); // a burst: only 2 remain to release
        assert_eq!(release_all(&pool), 2);
        assert_eq!(pool.pooled(), 0);
        // Given back again: idle from now on, so surplus a period later.
        pool.give(SMALLEST_MAPPED, map(SMALLEST_MAPPED).unwrap(), None);
        assert!(!tick(&pool, t0 + 2 * RELEASE_PERIOD));
        assert!(tick(&pool, t0 + 3 * RELEASE_PERIOD));
        assert_eq!(release_all(&pool), 1);
    }

    #[test]
    fn releases_come_in_chunks_and_unmark_what_they_release() {
        let pool = pool_with(release_chunk() + 1);
        let t0 = Instant::now();
        tick(&pool, t0);
        assert!(tick(&pool, t0 + RELEASE_PERIOD));
        assert_eq!(pool.lock().release, release_chunk() + 1);
        assert!(pool.release_above(0));
        assert_eq!(pool.pooled(), 1);
        assert!(pool.release_above(0));
        assert!(!pool.release_above(0));
        assert_eq!(pool.lock().release, 0);
    }

    #[test]
    fn a_release_stops_at_the_limit() {
        let pool = pool_with(5);
        let t0 = Instant::now();
        tick(&pool, t0);
        assert!(tick(&pool, t0 + RELEASE_PERIOD));
        // However many other pools hold, keeping them all leaves nothing
        // to release: the marks are dropped.
        assert!(!pool.release_above(usize::MAX));
        assert_eq!(pool.pooled(), 5);
        assert_eq!(pool.lock().release, 0);
    }

    #[test]
    fn a_marked_pool_given_no_new_marks_for_the_same_stacks() {
        let pool = pool_with(4);
        let t0 = Instant::now();
        tick(&pool, t0);
        assert!(tick(&pool, t0 + RELEASE_PERIOD));
        assert!(tick(&pool, t0 + 2 * RELEASE_PERIOD));
        assert_eq!(pool.lock().release, 4, "marked once, not twice");
        assert_eq!(release_all(&pool), 4);
    }
}
