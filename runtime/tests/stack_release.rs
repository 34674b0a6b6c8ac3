//! Idle stacks beyond the pool's limit are unmapped once a burst is over.
//!
//! In a binary of its own: the limit is shared by every runtime of the
//! process, and this test fills the pools past it.

mod common;

use common::Gate;
use spindle::Runtime;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The stack pools of a process aim to keep a quarter of its map limit.
fn pool_limit() -> usize {
    common::max_map_count() / 4
}

/// A burst of tasks, all alive at once, that leaves more idle stacks than
/// the pool keeps: the end of the burst unmaps nothing, and then, with the
/// runtime idle, its workers unmap the surplus on their own.
#[test]
fn idle_workers_unmap_the_surplus_of_a_burst() {
    let limit = pool_limit();
    let burst = limit + 2_000;
    let rt = Runtime::builder()
        .workers(2)
        .stack_size(16 * 1024)
        .build()
        .unwrap();
    let gate = Arc::new(Gate::new());
    rt.block_on(|| {
        let hs: Vec<_> = (0..burst)
            .map(|_| {
                let gate = gate.clone();
                spindle::spawn(move || gate.pass())
            })
            .collect();
        gate.open();
        for h in hs {
            h.join().unwrap();
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut pooled = rt.stats().pooled_stacks;
    while pooled > limit {
        assert!(
            Instant::now() < deadline,
            "{pooled} idle stacks a minute after the burst; the pool keeps {limit}"
        );
        std::thread::sleep(Duration::from_millis(50));
        pooled = rt.stats().pooled_stacks;
    }
    // Down to the limit, not to nothing: the next burst maps only the rest.
    assert_eq!(pooled, limit, "the pool kept too few");
}
