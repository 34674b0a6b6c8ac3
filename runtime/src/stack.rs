//! Task stacks: mmap'd once, with a guard page, then reused.
//!
//! A stack is a corosensei `DefaultStack` (an mmap'd region whose lowest page
//! is `PROT_NONE`, so an overflow faults instead of corrupting memory). Mapping
//! and unmapping cost three syscalls and a TLB shoot-down, several
//! microseconds, so finished tasks give their stack back for reuse: to their
//! worker's private cache (no lock), which trades with a shared pool in
//! batches of [`BATCH`] (one lock per batch). Spawn takes in the same order and
//! maps a new stack only when both are empty. So after a burst of tasks, the
//! next burst of the same size maps nothing. The shared pools of all
//! runtimes keep at most a quarter of `vm.max_map_count` stacks (two
//! mappings each, so half the mappings); past that they are unmapped, and a
//! mapping that fails for want of memory or mappings first makes the pool
//! unmap its idle stacks and is tried once more. A pooled stack keeps the
//! pages its last task touched (usually one or two), as bthread's do.
//!
//! A failed mapping is an error returned by spawn; a task never runs on a
//! worker's own stack (brpc #1648). Stacks of the runtime's default size are
//! pooled; a task that asks for another size gets a fresh mapping, unmapped
//! when it ends.

use corosensei::stack::DefaultStack;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

/// Stacks a worker keeps for itself before handing a batch to the shared pool.
pub(crate) const LOCAL_CACHE: usize = 256;
/// Stacks moved between a worker's cache and the shared pool at once.
pub(crate) const BATCH: usize = 64;
/// The shared pools of all runtimes together keep at most this fraction of
/// the process's memory-map limit (`vm.max_map_count`) in idle stacks, two
/// mappings each: half of the mappings at most, so that idle stacks can
/// never use up the ones that everything else in the process needs. With
/// the kernel's default of 65 530 that is 16 382 stacks. Keeping them is
/// what makes the next burst cheap: on this VM a new stack costs about
/// 10 µs (mmap + mprotect + the first page fault), a pooled one nothing.
/// (bthread keeps every stack it ever made.)
const POOL_SHARE_OF_MAP_COUNT: usize = 4;

/// Idle stacks in the shared pools of all runtimes.
static POOLED: AtomicUsize = AtomicUsize::new(0);

/// The most idle stacks the shared pools keep before unmapping the rest.
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

/// Reserves room for up to `n` more idle stacks; returns how many fit.
fn reserve_pooled(n: usize) -> usize {
    let limit = shared_pool_limit();
    let mut cur = POOLED.load(Relaxed);
    loop {
        let k = n.min(limit.saturating_sub(cur));
        if k == 0 {
            return 0;
        }
        match POOLED.compare_exchange_weak(cur, cur + k, Relaxed, Relaxed) {
            Ok(_) => return k,
            Err(c) => cur = c,
        }
    }
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
    shared: Mutex<Vec<DefaultStack>>,
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
            shared: Mutex::new(Vec::new()),
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
                        let mut shared = self.lock();
                        let at = shared.len().saturating_sub(BATCH);
                        POOLED.fetch_sub(shared.len() - at, Relaxed);
                        l.extend(shared.drain(at..));
                    }
                    if let Some(s) = l.pop() {
                        return Ok(s);
                    }
                }
                None => {
                    if let Some(s) = self.lock().pop() {
                        POOLED.fetch_sub(1, Relaxed);
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
        let idle = std::mem::take(&mut *self.lock());
        POOLED.fetch_sub(idle.len(), Relaxed);
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
                    let room = reserve_pooled(BATCH);
                    // What does not fit stays in the drain, which drops
                    // (unmaps) it.
                    self.lock().extend(l.drain(at..).take(room));
                }
            }
            None => {
                if reserve_pooled(1) == 1 {
                    self.lock().push(stack);
                }
            }
        }
    }

    /// Hands a worker's private cache back to the shared pool (worker exit).
    pub(crate) fn give_all(&self, local: &mut Vec<DefaultStack>) {
        let room = reserve_pooled(local.len());
        self.lock().extend(local.drain(..).take(room));
    }

    /// Stacks in the shared pool now.
    pub(crate) fn pooled(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<DefaultStack>> {
        // The pool holds plain values; a panic elsewhere cannot leave it torn.
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
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
