//! Arming, cancelling and firing allocate nothing in steady state for
//! callbacks of up to three words; larger callbacks cost exactly one box.
//!
//! A counting global allocator counts, per thread, the allocations that
//! thread makes. Tests here run one at a time (a lock) so that warm-up of one
//! does not overlap the measurement of another.
#![cfg(not(loom))]

mod common;

use common::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    // `try_with`: allocations during TLS teardown are not counted.
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

// SAFETY: every method forwards to `System` with the caller's arguments; the
// counter is a const-initialized thread-local without a destructor, so
// touching it never allocates or recurses.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded contract.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: forwarded contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

static SERIAL: Mutex<()> = Mutex::new(());

/// `rounds` arm+cancel pairs of the closure `make` builds; returns the
/// allocations this thread made.
fn arm_cancel<F>(
    timer: &spindle_timer::TimerThread,
    rounds: usize,
    make: impl Fn(usize) -> F,
) -> u64
where
    F: FnOnce() + Send + 'static,
{
    let before = allocs();
    for i in 0..rounds {
        let id = timer.schedule(Instant::now() + ms(100), make(i)).unwrap();
        assert_eq!(timer.unschedule(id), spindle_timer::Unschedule::Removed);
    }
    allocs() - before
}

/// Brings a scheduling thread to steady state: its thread-locals exist, its
/// slot cache is filled, and both `Vec`s its bucket alternates between (the
/// timer thread swaps them at each collection) have grown past the point
/// where compaction keeps an arm+cancel loop.
fn warm_up(timer: &spindle_timer::TimerThread) {
    for _ in 0..2 {
        let far = Instant::now() + Duration::from_secs(3600);
        let ids: Vec<_> = (0..4096)
            .map(|_| timer.schedule(far, || {}).unwrap())
            .collect();
        for id in ids {
            timer.unschedule(id);
        }
        // The timer thread collects (and swaps) the bucket before the
        // sentinel fires.
        sentinel(timer, Instant::now());
    }
}

#[test]
fn arm_and_cancel_of_a_three_word_callback_allocate_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let timer = timer();
    let hits = Arc::new(AtomicUsize::new(0));
    let make = |i: usize| {
        let (h, a, b) = (hits.clone(), i, i as u64);
        move || {
            h.fetch_add(a + b as usize, SeqCst);
        }
    };
    warm_up(&timer);
    arm_cancel(&timer, 1000, make);
    let n = arm_cancel(&timer, 50_000, make);
    assert_eq!(n, 0, "{n} allocations for 50 000 arm+cancel pairs");
    assert_eq!(hits.load(SeqCst), 0);
}

#[test]
fn a_larger_callback_costs_one_box() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let timer = timer();
    let make = |i: usize| {
        let big = [i as u64; 4];
        move || {
            std::hint::black_box(big);
        }
    };
    warm_up(&timer);
    arm_cancel(&timer, 1000, make);
    let n = arm_cancel(&timer, 10_000, make);
    assert_eq!(n, 10_000);
}

/// The timer thread's own allocations, read by the callbacks that run on it:
/// once its heap has held a big batch, later (smaller) batches of fired
/// timers allocate nothing.
#[test]
fn firing_allocates_nothing_in_steady_state() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let timer = timer();
    let seen = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let schedule_batch = |n: usize| {
        let start = Instant::now() + ms(2);
        for i in 0..n {
            let (seen, done) = (seen.clone(), done.clone());
            let deadline = start + Duration::from_micros(i as u64 % 1000);
            timer
                .schedule(deadline, move || {
                    seen.store(allocs(), SeqCst);
                    done.fetch_add(1, SeqCst);
                })
                .unwrap();
        }
    };
    // Warm-up: hold the timer thread while a batch twice the size of the
    // measured ones queues up, so that its heap and buckets reach their
    // peak capacity now.
    let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
    timer
        .schedule(Instant::now(), move || {
            let _ = gate_rx.recv();
        })
        .unwrap();
    let batch = 2000;
    schedule_batch(2 * batch);
    drop(gate_tx);
    let mut target = 2 * batch;
    wait_for("the warm-up batch", || done.load(SeqCst) >= target);
    let mut at_end_of_batch = vec![seen.load(SeqCst)];
    for _ in 0..2 {
        schedule_batch(batch);
        target += batch;
        wait_for("the batch", || done.load(SeqCst) >= target);
        at_end_of_batch.push(seen.load(SeqCst));
    }
    let steady = at_end_of_batch[2] - at_end_of_batch[0];
    assert_eq!(
        steady, 0,
        "the timer thread allocated {steady} times: {at_end_of_batch:?}"
    );
}
