//! Task stacks: mmap'd once, with a guard page, then reused.
//!
//! A stack is a corosensei `DefaultStack` (an mmap'd region whose lowest page
//! is `PROT_NONE`, so an overflow faults instead of corrupting memory). On
//! this VM a new stack costs about 8 µs (mmap, mprotect and the first page
//! fault) and unmapping one 7 µs, 25 µs when another thread of the process
//! runs (a TLB shoot-down), so finished tasks give their stack back for
//! reuse: to their worker's private cache (no lock), which trades with a
//! shared pool in batches of [`BATCH`] (one lock per batch). Spawn takes in
//! the same order and maps a new stack only when both are empty. So after a
//! burst of tasks, the next burst of the same size maps nothing. A pooled
//! stack keeps the pages its last task touched (usually one or two), as
//! bthread's do.
//!
//! Nothing is unmapped on the way: the end of a burst costs no syscalls. The
//! shared pools of all runtimes aim to keep at most a quarter of
//! `vm.max_map_count` idle stacks (two mappings each, so half the mappings).
//! Above that, what stayed idle for a whole [`RELEASE_PERIOD`] is surplus:
//! the runtime's periodic housekeeping (`watchdog.rs`) marks it, and workers
//! with nothing to run unmap it, [`RELEASE_CHUNK`] stacks at a time, looking
//! for work between chunks (Go's background scavenger does the same for its
//! heap). Idle stacks never raise the peak number of mappings, which their
//! tasks reached a moment before; and a mapping that fails for want of
//! memory or mappings first makes the pool unmap its idle stacks, and is
//! tried once more.
//!
//! A failed mapping is an error returned by spawn; a task never runs on a
//! worker's own stack (brpc #1648). Stacks of the runtime's default size are
//! pooled; a task that asks for another size gets a fresh mapping, unmapped
//! when it ends.

use corosensei::stack::DefaultStack;
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Stacks a worker keeps for itself before handing a batch to the shared pool.
pub(crate) const LOCAL_CACHE: usize = 256;
/// Stacks moved between a worker's cache and the shared pool at once.
pub(crate) const BATCH: usize = 64;
/// The shared pools of all runtimes together aim to keep at most this
/// fraction of the process's memory-map limit (`vm.max_map_count`) in idle
/// stacks, two mappings each: half of the mappings, so that idle stacks do
/// not sit on the ones that everything else in the process needs. With the
/// kernel's default of 65 530 that is 16 382 stacks. (bthread keeps every
/// stack it ever made.)
#[cfg_attr(loom, allow(dead_code))]
const POOL_SHARE_OF_MAP_COUNT: usize = 4;
/// Idle stacks beyond the limit that no spawn needed for this long are
/// unmapped.
#[cfg_attr(loom, allow(dead_code))]
pub(crate) const RELEASE_PERIOD: Duration = Duration::from_secs(1);
/// Stacks an idle worker unmaps before it looks for work again: about
/// 0.2 ms of munmaps.
pub(crate) const RELEASE_CHUNK: usize = 32;

/// Idle stacks in the shared pools of all runtimes.
static POOLED: AtomicUsize = AtomicUsize::new(0);

/// The most idle stacks the shared pools aim to keep.
#[cfg_attr(loom, allow(dead_code))]
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

/// The smallest stack we hand out: enough for formatting and a panic.
pub(crate) const MIN_STACK_SIZE: usize = 16 * 1024;
/// The largest we accept: beyond this a size is a mistake, not a request.
pub(crate) const MAX_STACK_SIZE: usize = 1 << 40;

/// Stacks a plain thread keeps for its next spawns into one runtime (whose
/// pool is `pool`): taken from the shared pool a batch at a time, so that a
/// thread spawning many tasks takes the pool's lock once per batch. Plain
/// threads never give stacks back (tasks end on workers), so this holds at
/// most one batch; it is unmapped when the thread ends or spawns into
/// another runtime.
struct ThreadStacks {
    pool: u64,
    stacks: Vec<DefaultStack>,
}

thread_local! {
    static THREAD_STACKS: std::cell::RefCell<ThreadStacks> =
        const { std::cell::RefCell::new(ThreadStacks { pool: 0, stacks: Vec::new() }) };
}

/// The shared part of the stack pool.
pub(crate) struct StackPool {
    /// Unique per pool (never 0), to tell whose stacks a thread caches.
    id: u64,
    /// The size of pooled stacks (the runtime's default stack size).
    size: usize,
    shared: Mutex<Shelf>,
}

/// The idle stacks of a pool, and what is to become of them.
#[derive(Default)]
struct Shelf {
    /// Taken from and given to at the back: the front holds the stacks that
    /// have been idle longest.
    stacks: VecDeque<DefaultStack>,
    /// The fewest stacks on the shelf since the last [`StackPool::tick`]:
    /// that many have been idle the whole time.
    low_water: usize,
    /// How many of the front stacks idle workers are to unmap.
    release: usize,
    /// When the last release period began (`None` before the first tick).
    #[cfg_attr(loom, allow(dead_code))]
    period_start: Option<Instant>,
}

impl Shelf {
    fn pop_back(&mut self, n: usize) -> std::collections::vec_deque::Drain<'_, DefaultStack> {
        let at = self.stacks.len().saturating_sub(n);
        POOLED.fetch_sub(self.stacks.len() - at, Relaxed);
        self.low_water = self.low_water.min(at);
        self.release = self.release.min(at);
        self.stacks.drain(at..)
    }

    fn push_back(&mut self, stacks: impl IntoIterator<Item = DefaultStack>) {
        let before = self.stacks.len();
        self.stacks.extend(stacks);
        POOLED.fetch_add(self.stacks.len() - before, Relaxed);
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
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        StackPool {
            id: NEXT_ID.fetch_add(1, Relaxed),
            size,
            shared: Mutex::new(Shelf::default()),
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
        local: Option<&mut Vec<DefaultStack>>,
    ) -> io::Result<DefaultStack> {
        if size == self.size {
            match local {
                Some(l) => {
                    if l.is_empty() {
                        l.extend(self.lock().pop_back(BATCH));
                    }
                    if let Some(s) = l.pop() {
                        return Ok(s);
                    }
                }
                None => {
                    if let Some(s) = self.lock().pop_back(1).next() {
                        return Ok(s);
                    }
                }
            }
        }
        match map(size) {
            // Out of mappings (or memory): give back our idle stacks and try
            // once more before failing the spawn.
            Err(e) if e.kind() == io::ErrorKind::OutOfMemory && self.trim() > 0 => map(size),
            r => r,
        }
    }

    /// [`take`](Self::take) for a thread that is not one of this pool's
    /// workers: through the thread's own small cache (see `ThreadStacks`).
    pub(crate) fn take_for_thread(&self, size: usize) -> io::Result<DefaultStack> {
        if size != self.size {
            return self.take(size, None);
        }
        THREAD_STACKS
            .try_with(|c| match c.try_borrow_mut() {
                Ok(mut c) => {
                    if c.pool != self.id {
                        c.stacks.clear();
                        c.pool = self.id;
                    }
                    self.take(size, Some(&mut c.stacks))
                }
                Err(_) => self.take(size, None),
            })
            .unwrap_or_else(|_| self.take(size, None))
    }

    /// Unmaps every idle stack of the shared pool; returns how many.
    pub(crate) fn trim(&self) -> usize {
        let idle = self.lock().pop_back(usize::MAX).collect::<Vec<_>>();
        idle.len()
    }

    /// Gives back a stack of `size` bytes.
    pub(crate) fn give(
        &self,
        size: usize,
        stack: DefaultStack,
        local: Option<&mut Vec<DefaultStack>>,
    ) {
        if size != self.size {
            return; // dropped: unmapped
        }
        match local {
            Some(l) => {
                l.push(stack);
                if l.len() > LOCAL_CACHE {
                    let at = l.len() - BATCH;
                    self.lock().push_back(l.drain(at..));
                }
            }
            None => self.lock().push_back([stack]),
        }
    }

    /// Hands a worker's private cache back to the shared pool (worker exit).
    pub(crate) fn give_all(&self, local: &mut Vec<DefaultStack>) {
        self.lock().push_back(local.drain(..));
    }

    /// Housekeeping, called periodically (more often than
    /// [`RELEASE_PERIOD`]). At the end of each period, marks for release
    /// the idle stacks beyond the limit that no spawn needed during it.
    /// Returns whether some are marked: idle workers unmap them
    /// ([`release_some`](Self::release_some)).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn tick(&self, now: Instant) -> bool {
        self.lock()
            .tick(now, POOLED.load(Relaxed), shared_pool_limit())
    }

    /// Unmaps up to [`RELEASE_CHUNK`] of the stacks marked for release;
    /// returns whether it unmapped any.
    pub(crate) fn release_some(&self) -> bool {
        let chunk: Vec<DefaultStack> = {
            let mut shelf = self.lock();
            let n = shelf.release.min(RELEASE_CHUNK);
            if n == 0 {
                return false;
            }
            shelf.release -= n;
            shelf.low_water -= n;
            POOLED.fetch_sub(n, Relaxed);
            shelf.stacks.drain(..n).collect()
        };
        drop(chunk); // unmapped, outside the lock
        true
    }

    /// Stacks in the shared pool now.
    pub(crate) fn pooled(&self) -> usize {
        self.lock().stacks.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shelf> {
        // The pool holds plain values; a panic elsewhere cannot leave it torn.
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Shelf {
    /// See [`StackPool::tick`]; `pooled` is the number of idle stacks in all
    /// pools, `limit` the most they aim to keep.
    #[cfg_attr(loom, allow(dead_code))]
    fn tick(&mut self, now: Instant, pooled: usize, limit: usize) -> bool {
        match self.period_start {
            Some(start) if now.saturating_duration_since(start) < RELEASE_PERIOD => {}
            _ => {
                // Idle all period long, and beyond the limit.
                let surplus = if self.period_start.is_some() {
                    self.low_water.min(pooled.saturating_sub(limit))
                } else {
                    0
                };
                self.release = self.release.max(surplus);
                self.low_water = self.stacks.len();
                self.period_start = Some(now);
            }
        }
        self.release > 0
    }
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

/// Checks a requested stack size: `InvalidInput` outside the supported range.
pub(crate) fn check_size(size: usize) -> io::Result<usize> {
    if size > MAX_STACK_SIZE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("stack size {size} is larger than the supported {MAX_STACK_SIZE} bytes"),
        ));
    }
    Ok(size.max(MIN_STACK_SIZE))
}

fn map(size: usize) -> io::Result<DefaultStack> {
    let stack = DefaultStack::new(size).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot map a task stack of {size} bytes: {e}"),
        )
    })?;
    // Fault the top page in now, on the thread that mapped it. Its first
    // run may be on another worker (tasks bind to a stack at first run), and
    // a page fault there would contend with this thread's next mappings for
    // the process's memory-map lock.
    let top = corosensei::stack::Stack::base(&stack).get() as *mut u8;
    // SAFETY: `base` is the (exclusive) top of the writable part of a fresh
    // mapping of at least MIN_STACK_SIZE bytes; the byte below it is ours
    // and nothing else uses this stack yet.
    unsafe { top.sub(1).write_volatile(0) };
    Ok(stack)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn pool_with(n: usize) -> StackPool {
        let pool = StackPool::new(MIN_STACK_SIZE);
        for _ in 0..n {
            pool.give(MIN_STACK_SIZE, map(MIN_STACK_SIZE).unwrap(), None);
        }
        pool
    }

    fn take(pool: &StackPool, n: usize) {
        for _ in 0..n {
            pool.take(MIN_STACK_SIZE, None).unwrap();
        }
    }

    fn tick(pool: &StackPool, at: Instant, limit: usize) -> bool {
        let pooled = pool.pooled();
        pool.lock().tick(at, pooled, limit)
    }

    fn release_all(pool: &StackPool) -> usize {
        let before = pool.pooled();
        while pool.release_some() {}
        before - pool.pooled()
    }

    #[test]
    fn surplus_is_what_stayed_idle_a_whole_period_beyond_the_limit() {
        let pool = pool_with(10);
        let t0 = Instant::now();
        assert!(!tick(&pool, t0, 4), "the first tick only starts a period");
        take(&pool, 3); // 7 left, idle all period
        assert!(!tick(&pool, t0 + RELEASE_PERIOD / 2, 4), "mid-period");
        assert_eq!(release_all(&pool), 0);
        assert!(tick(&pool, t0 + RELEASE_PERIOD, 4));
        assert_eq!(release_all(&pool), 3, "down to the limit");
        assert_eq!(pool.pooled(), 4);
        assert!(
            !tick(&pool, t0 + 2 * RELEASE_PERIOD, 4),
            "nothing beyond the limit"
        );
    }

    #[test]
    fn stacks_given_back_during_a_period_wait_for_the_next() {
        let pool = pool_with(0);
        let t0 = Instant::now();
        assert!(!tick(&pool, t0, 0));
        pool.give(MIN_STACK_SIZE, map(MIN_STACK_SIZE).unwrap(), None);
        pool.give(MIN_STACK_SIZE, map(MIN_STACK_SIZE).unwrap(), None);
        assert!(!tick(&pool, t0 + RELEASE_PERIOD, 0), "not idle all period");
        assert!(tick(&pool, t0 + 2 * RELEASE_PERIOD, 0));
        assert_eq!(release_all(&pool), 2);
    }

    #[test]
    fn a_burst_takes_back_stacks_marked_for_release() {
        let pool = pool_with(10);
        let t0 = Instant::now();
        tick(&pool, t0, 0);
        assert!(tick(&pool, t0 + RELEASE_PERIOD, 0));
        take(&pool, 8); // a burst: only 2 remain to release
        assert_eq!(release_all(&pool), 2);
        assert_eq!(pool.pooled(), 0);
        // Given back again: idle from now on, so surplus a period later.
        pool.give(MIN_STACK_SIZE, map(MIN_STACK_SIZE).unwrap(), None);
        assert!(!tick(&pool, t0 + 2 * RELEASE_PERIOD, 0));
        assert!(tick(&pool, t0 + 3 * RELEASE_PERIOD, 0));
        assert_eq!(release_all(&pool), 1);
    }

    #[test]
    fn releases_come_in_chunks() {
        let pool = pool_with(RELEASE_CHUNK + 1);
        let t0 = Instant::now();
        tick(&pool, t0, 0);
        assert!(tick(&pool, t0 + RELEASE_PERIOD, 0));
        assert!(pool.release_some());
        assert_eq!(pool.pooled(), 1);
        assert!(pool.release_some());
        assert!(!pool.release_some());
    }
}
