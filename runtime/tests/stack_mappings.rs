//! How many memory mappings task stacks take. In a binary of its own: it
//! counts the process's mappings.

mod common;

use common::Gate;
use spindle::Runtime;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// With guard regions, the stacks of many live tasks share a few mappings
/// (one per slab of stacks at most, merged with their neighbours); without,
/// each takes two. Either way every task runs, and an overflow is still caught
/// (`tests/overflow.rs`).
#[test]
fn live_tasks_take_few_mappings_with_guard_regions() {
    const TASKS: usize = 20_000;
    let rt = Runtime::builder().workers(2).build().unwrap();
    let gate = Arc::new(Gate::new());
    let started = Arc::new(AtomicUsize::new(0));
    let before = common::mappings();
    let (during, ran) = rt.block_on(|| {
        let hs: Vec<_> = (0..TASKS)
            .map(|i| {
                let (gate, started) = (gate.clone(), started.clone());
                spindle::spawn(move || {
                    started.fetch_add(1, Ordering::Relaxed);
                    gate.pass();
                    i
                })
            })
            .collect();
        // Every task holds its stack (and has touched it) while counted.
        while started.load(Ordering::Relaxed) < TASKS {
            spindle::yield_now();
        }
        let during = common::mappings();
        gate.open();
        let ran: usize = hs.into_iter().map(|h| h.join().unwrap()).sum();
        (during, ran)
    });
    assert_eq!(ran, TASKS * (TASKS - 1) / 2, "every task ran once");
    let grew = during.saturating_sub(before);
    if spindle::stack_guard_regions() {
        // At most one mapping per slab of 64 stacks (slabs merge, and only
        // an unmapped slab between two live ones splits them): so the
        // kernel's default `vm.max_map_count`, 65 530, holds a million live
        // tasks (15 625 slabs) with room to spare.
        eprintln!("{TASKS} live tasks added {grew} mappings");
        assert!(
            grew <= TASKS / 64 + 16,
            "{TASKS} live tasks added {grew} mappings; guard regions should merge them"
        );
    } else {
        assert!(
            grew >= TASKS,
            "{TASKS} live tasks with PROT_NONE guard pages added only {grew} mappings"
        );
    }
}
