//! The slot pool: free slot indices, cached per thread.
//!
//! Arming a timer takes a free slot and cancelling or firing one gives it
//! back, millions of times a second across threads, so the pool must not put
//! a shared lock on that path. Each thread keeps a small FIFO cache of free
//! indices (up to `2 * BATCH`) for one pool at a time. It refills `BATCH`
//! indices at once from the pool's global free list when empty and flushes
//! `BATCH` back when full: the global mutex is taken at most once per `BATCH`
//! operations of a thread. The timer thread frees fired slots into its own
//! cache the same way (flushing a batch at a time, as it never allocates
//! unless a callback schedules), and so does a thread that only cancels.
//! When the global list is empty too, the pool grows the [`SlotTable`] by one
//! segment under the same mutex.
//!
//! A cache remembers which pool it holds indices of (a unique id, plus a
//! `Weak` to give them back). A thread that switches to another pool first
//! returns its cached indices to their owner, if it is still alive; so does a
//! thread that exits (the cache's destructor). A free adopts the pool if the
//! cache holds none, or only a dead pool's; frees for a live pool other than
//! the cached one go straight to that pool's global list.
//!
//! The cache is handed out FIFO rather than LIFO: over up to 64 slots, still
//! cache-hot, a slot is reused less often, which stretches the version
//! wrap-around window of ids (see [`crate::slot`]) by the same factor.
//!
//! Under `--cfg loom` there is no per-thread cache: every operation goes to
//! the global list, which is what loom can see.

use crate::loom::{lock, AtomicU64, Mutex, Ordering};
use crate::slot::{SlotTable, NUM_SEGMENTS};
use std::sync::atomic::AtomicU64 as StdAtomicU64;
#[cfg(not(loom))]
use std::sync::{Arc, Weak};

/// Indices moved between a thread's cache and the global list at once.
#[cfg(not(loom))]
const BATCH: usize = 32;
/// Capacity of a thread's cache.
#[cfg(not(loom))]
const CACHE_CAP: usize = 2 * BATCH;

/// The pool ran out of slot indices (2^32 - 256 timers are armed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Exhausted;

/// Free slots of one timer thread: its slot table and global free list.
#[derive(Debug)]
pub(crate) struct SlotPool {
    /// Unique among all pools of the process; names the owner of a cache.
    #[cfg_attr(loom, allow(dead_code))]
    id: u64,
    pub(crate) table: SlotTable,
    global: Mutex<FreeList>,
    /// Slots in allocated segments, for [`crate::TimerStats::slots`].
    capacity: AtomicU64,
}

#[derive(Debug)]
struct FreeList {
    /// Free indices; popped from the end.
    free: Vec<u32>,
    /// Segments allocated so far.
    segments: usize,
}

impl SlotPool {
    pub(crate) fn new() -> Self {
        static NEXT_ID: StdAtomicU64 = StdAtomicU64::new(1);
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        SlotPool {
            id,
            table: SlotTable::numbered(id),
            global: Mutex::new(FreeList {
                free: Vec::new(),
                segments: 0,
            }),
            capacity: AtomicU64::new(0),
        }
    }

    /// Number of slots allocated so far.
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity.load(Ordering::Relaxed)
    }

    /// Moves up to `out.len()` free indices into `out`, growing the table if
    /// none is free. Returns how many were moved (at least one).
    fn take_batch(&self, out: &mut [u32]) -> Result<usize, Exhausted> {
        let mut list = lock(&self.global);
        if list.free.is_empty() {
            let k = list.segments;
            if k == NUM_SEGMENTS {
                return Err(Exhausted);
            }
            let range = self.table.grow(k);
            list.segments = k + 1;
            self.capacity.store(range.end, Ordering::Relaxed);
            // Reversed, so that pops hand out ascending indices.
            list.free.extend(range.rev().map(|i| i as u32));
        }
        let n = out.len().min(list.free.len());
        let from = list.free.len() - n;
        out[..n].copy_from_slice(&list.free[from..]);
        list.free.truncate(from);
        Ok(n)
    }

    /// Returns free indices to the global list.
    fn give_back(&self, indices: &[u32]) {
        if !indices.is_empty() {
            lock(&self.global).free.extend_from_slice(indices);
        }
    }

    /// Takes one free index from the global list.
    fn alloc_global(&self) -> Result<u32, Exhausted> {
        let mut one = [0u32];
        self.take_batch(&mut one)?;
        Ok(one[0])
    }
}

/// Takes a free slot index of `pool`, from this thread's cache if possible.
#[cfg(not(loom))]
#[inline]
pub(crate) fn alloc(pool: &Arc<SlotPool>) -> Result<u32, Exhausted> {
    // `try_with`: the cache is gone while this thread's TLS is torn down;
    // `try_borrow_mut`: a callback or destructor run from inside the cache
    // code (through a dropped `Arc`) re-entered it. Both fall back to the
    // global list.
    match CACHE.try_with(|c| c.try_borrow_mut().map(|mut c| c.alloc(pool))) {
        Ok(Ok(r)) => r,
        _ => pool.alloc_global(),
    }
}

/// Gives slot `index` (idle, callback empty) back to `pool`.
#[cfg(not(loom))]
#[inline]
pub(crate) fn free(pool: &Arc<SlotPool>, index: u32) {
    let cached = CACHE
        .try_with(|c| c.try_borrow_mut().map(|mut c| c.free(pool, index)))
        .is_ok_and(|r| r.is_ok_and(|done| done));
    if !cached {
        pool.give_back(&[index]);
    }
}

#[cfg(loom)]
pub(crate) fn alloc(pool: &std::sync::Arc<SlotPool>) -> Result<u32, Exhausted> {
    pool.alloc_global()
}

#[cfg(loom)]
pub(crate) fn free(pool: &std::sync::Arc<SlotPool>, index: u32) {
    pool.give_back(&[index]);
}

#[cfg(not(loom))]
thread_local! {
    static CACHE: std::cell::RefCell<LocalCache> = const {
        std::cell::RefCell::new(LocalCache::EMPTY)
    };
}

/// A thread's cache of free indices of one pool: a FIFO ring.
#[cfg(not(loom))]
struct LocalCache {
    /// Id of the pool the indices belong to; 0 for none.
    owner: u64,
    /// That pool, to give the indices back.
    pool: Weak<SlotPool>,
    /// Ring of `len` indices starting at `head`.
    ring: [u32; CACHE_CAP],
    head: usize,
    len: usize,
}

#[cfg(not(loom))]
impl LocalCache {
    const EMPTY: LocalCache = LocalCache {
        owner: 0,
        pool: Weak::new(),
        ring: [0; CACHE_CAP],
        head: 0,
        len: 0,
    };

    #[inline]
    fn alloc(&mut self, pool: &Arc<SlotPool>) -> Result<u32, Exhausted> {
        if self.owner != pool.id {
            self.adopt(pool);
        }
        if self.len == 0 {
            let mut batch = [0u32; BATCH];
            let n = pool.take_batch(&mut batch)?;
            for &i in &batch[..n] {
                self.push(i);
            }
        }
        Ok(self.pop())
    }

    /// Caches `index` if this cache holds `pool`'s indices, or holds none
    /// (a thread that only frees: the timer thread, a thread that only
    /// cancels) or only those of a pool that is gone; `false` if it holds
    /// another live pool's.
    #[inline]
    fn free(&mut self, pool: &Arc<SlotPool>, index: u32) -> bool {
        if self.owner != pool.id {
            if self.owner != 0 && self.pool.strong_count() > 0 {
                return false;
            }
            self.adopt(pool);
        }
        if self.len == CACHE_CAP {
            let mut batch = [0u32; BATCH];
            for b in batch.iter_mut() {
                *b = self.pop();
            }
            pool.give_back(&batch);
        }
        self.push(index);
        true
    }

    /// Returns the cached indices to their owner and starts caching for
    /// `pool`.
    #[cold]
    fn adopt(&mut self, pool: &Arc<SlotPool>) {
        self.give_back_all();
        self.owner = pool.id;
        self.pool = Arc::downgrade(pool);
    }

    fn give_back_all(&mut self) {
        if self.len > 0 {
            if let Some(owner) = self.pool.upgrade() {
                let mut all = [0u32; CACHE_CAP];
                let n = self.len;
                for a in all[..n].iter_mut() {
                    *a = self.pop();
                }
                owner.give_back(&all[..n]);
            }
        }
        self.head = 0;
        self.len = 0;
    }

    #[inline]
    fn push(&mut self, index: u32) {
        debug_assert!(self.len < CACHE_CAP);
        self.ring[(self.head + self.len) % CACHE_CAP] = index;
        self.len += 1;
    }

    #[inline]
    fn pop(&mut self) -> u32 {
        debug_assert!(self.len > 0);
        let index = self.ring[self.head];
        self.head = (self.head + 1) % CACHE_CAP;
        self.len -= 1;
        index
    }
}

#[cfg(not(loom))]
impl Drop for LocalCache {
    fn drop(&mut self) {
        self.give_back_all();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn allocation_grows_the_table_and_reuses_freed_slots() {
        let pool = Arc::new(SlotPool::new());
        assert_eq!(pool.capacity(), 0);
        let a = alloc(&pool).unwrap();
        assert_eq!(pool.capacity(), 256);
        assert!(pool.table.get(a).is_some());
        free(&pool, a);
        // FIFO: the freed slot comes back after the other cached ones.
        let mut seen = Vec::new();
        for _ in 0..BATCH {
            seen.push(alloc(&pool).unwrap());
        }
        assert!(seen.contains(&a));
        for &i in &seen {
            free(&pool, i);
        }
        assert_eq!(pool.capacity(), 256);
    }

    #[test]
    fn indices_are_unique_while_held() {
        let pool = Arc::new(SlotPool::new());
        let mut held: Vec<u32> = (0..1000).map(|_| alloc(&pool).unwrap()).collect();
        held.sort_unstable();
        held.dedup();
        assert_eq!(held.len(), 1000);
        assert!(pool.capacity() >= 1000);
        for i in held {
            free(&pool, i);
        }
    }

    #[test]
    fn a_thread_that_switches_pools_or_exits_gives_its_slots_back() {
        let p1 = Arc::new(SlotPool::new());
        let p2 = Arc::new(SlotPool::new());
        let p1c = p1.clone();
        let p2c = p2.clone();
        std::thread::spawn(move || {
            let a = alloc(&p1c).unwrap();
            free(&p1c, a);
            // Switching to p2 returns p1's cached indices to p1.
            let b = alloc(&p2c).unwrap();
            free(&p2c, b);
            // A free for a pool that is not cached goes to its global list.
            let c = p1c.alloc_global().unwrap();
            free(&p1c, c);
        })
        .join()
        .unwrap();
        // Every index went back to its pool: the global lists hold whole
        // segments again.
        assert_eq!(lock(&p1.global).free.len(), 256);
        assert_eq!(lock(&p2.global).free.len(), 256);
    }

    /// A thread that only frees (the timer thread, a thread that only
    /// cancels) caches what it frees instead of taking the global lock for
    /// each, and gives it back when it exits, so that fired timers do not
    /// each take the pool's mutex.
    #[test]
    fn a_thread_that_only_frees_caches_its_frees() {
        let pool = Arc::new(SlotPool::new());
        let taken: Vec<u32> = (0..10).map(|_| pool.alloc_global().unwrap()).collect();
        let p = pool.clone();
        std::thread::spawn(move || {
            for i in taken {
                free(&p, i);
            }
            assert_eq!(
                lock(&p.global).free.len(),
                256 - 10,
                "cached, not given back"
            );
        })
        .join()
        .unwrap();
        assert_eq!(lock(&pool.global).free.len(), 256);
    }
}
