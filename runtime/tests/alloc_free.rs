//! The hot paths allocate nothing in steady state: spawn + join from a task,
//! yield, wake + wait on a Butex, and a timed wait whose timer is armed and
//! cancelled. Counted by a global allocator, in a binary of its own.

use spindle::{Butex, Runtime};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Counting;
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Runs `round` many times to warm every cache up, then counts what further
/// rounds allocate.
fn allocations_in_steady_state(round: impl Fn()) -> usize {
    for _ in 0..50_000 {
        round();
    }
    let before = ALLOCS.load(Ordering::SeqCst);
    for _ in 0..100_000 {
        round();
    }
    ALLOCS.load(Ordering::SeqCst) - before
}

#[test]
fn hot_paths_allocate_nothing() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let (spawn_join, yields, butex, timed) = rt.block_on(|| {
        let spawn_join = allocations_in_steady_state(|| {
            spindle::spawn(|| 1u64).join().unwrap();
        });
        let yields = allocations_in_steady_state(spindle::yield_now);
        // A ping-pong through a butex: the partner task waits, we wake.
        let b = Arc::new(Butex::new(0));
        let b2 = b.clone();
        let partner = spindle::spawn(move || loop {
            let v = b2.value().load(Ordering::Acquire);
            if v == u32::MAX {
                return;
            }
            let _ = b2.wait(v, None);
        });
        let butex = allocations_in_steady_state(|| {
            b.value().fetch_add(1, Ordering::Release);
            b.wake_one();
            spindle::yield_now();
        });
        b.value().store(u32::MAX, Ordering::Release);
        b.wake_all();
        partner.join().unwrap();
        // A timed wait that is woken first: a timer armed and cancelled.
        let t = Arc::new(Butex::new(0));
        let t2 = t.clone();
        let waker = spindle::spawn(move || loop {
            let v = t2.value().load(Ordering::Acquire);
            if v == u32::MAX {
                return;
            }
            t2.value().store(v + 1, Ordering::Release);
            t2.wake_one();
            spindle::yield_now();
        });
        let timed = allocations_in_steady_state(|| {
            let v = t.value().load(Ordering::Acquire);
            let _ = t.wait(v, Some(Instant::now() + Duration::from_secs(10)));
        });
        t.value().store(u32::MAX, Ordering::Release);
        waker.join().unwrap();
        (spawn_join, yields, butex, timed)
    });
    assert_eq!(spawn_join, 0, "spawn + join allocated");
    assert_eq!(yields, 0, "yield allocated");
    assert_eq!(butex, 0, "butex wake/wait allocated");
    assert_eq!(timed, 0, "a timed wait (timer arm + cancel) allocated");
}
