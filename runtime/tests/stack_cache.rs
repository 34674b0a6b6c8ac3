//! Stacks go back to their pool, not to munmap, in two cases that missed it.
//!
//! A plain thread that spawns takes stacks from its runtime's shared pool a
//! batch at a time. When it then spawns into another runtime, it gives the
//! rest of the batch back to the first pool: unmapping it would make a
//! thread that alternates between runtimes unmap (and later map) a batch of
//! stacks per spawn. And a task's own stack size that rounds up to the
//! runtime's is the runtime's.
//!
//! In a binary of its own: it counts the stacks in pools.

mod common;

use common::Gate;
use spindle::Runtime;
use std::sync::Arc;

/// Ends `n` tasks at once on `rt`'s one worker: the stacks beyond the
/// worker's own cache go to the shared pool.
fn fill_pool(rt: &Runtime, n: usize) {
    let gate = Arc::new(Gate::new());
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let g = gate.clone();
            rt.spawn(move || g.pass())
        })
        .collect();
    gate.open();
    for t in tasks {
        t.join().expect("a gated task");
    }
}

#[test]
fn a_thread_spawning_into_another_runtime_gives_its_stacks_back() {
    let a = Runtime::builder().workers(1).build().unwrap();
    let b = Runtime::builder().workers(1).build().unwrap();
    fill_pool(&a, 1000);
    // Whatever this thread still holds of `a`'s stacks (the rest of a
    // freshly mapped slab) goes back to `a`'s pool when it spawns into `b`.
    b.spawn(|| ()).join().unwrap();
    let pooled = a.stats().pooled_stacks;
    assert!(pooled > 100, "the burst filled a's pool: {pooled}");
    // This thread's first spawn into `a` takes a batch; one stack of it
    // serves the task, which ends on the worker (into the worker's cache).
    a.spawn(|| ()).join().unwrap();
    let after_batch = a.stats().pooled_stacks;
    assert!(
        after_batch < pooled - 1,
        "a batch was taken: {pooled} -> {after_batch}"
    );
    // Spawning into `b` gives the rest of the batch back to `a`'s pool.
    b.spawn(|| ()).join().unwrap();
    assert_eq!(a.stats().pooled_stacks, pooled - 1);
}

/// A task's own stack size that rounds up to the runtime's (whole pages)
/// takes and gives back pooled stacks, like tasks of the default size.
#[test]
fn a_stack_size_that_rounds_to_the_default_is_pooled() {
    const SIZE: usize = 256 * 1024;
    let rt = Runtime::builder()
        .workers(1)
        .stack_size(SIZE)
        .build()
        .unwrap();
    let before = rt.stats().pooled_stacks;
    rt.block_on(|| {
        let gate = Arc::new(Gate::new());
        let tasks: Vec<_> = (0..600)
            .map(|_| {
                let g = gate.clone();
                spindle::task::Builder::new()
                    .stack_size(SIZE - 1)
                    .spawn(move || g.pass())
                    .expect("spawn")
            })
            .collect();
        gate.open();
        for t in tasks {
            t.join().expect("a gated task");
        }
    });
    // 600 stacks ended on the worker: what its cache could not keep went to
    // the pool (they were unmapped when the sizes differed).
    let after = rt.stats().pooled_stacks;
    assert!(after > before + 100, "pooled: {before} -> {after}");
}
