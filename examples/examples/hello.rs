//! Lesson 1, the smallest tour: spawn tasks, sleep in them, join them.
//!
//! `cargo run --release --example hello`
//!
//! A task is a green thread with its own stack: it runs plain blocking
//! code, and a blocking call (here `spindle::sleep`) suspends only the
//! task, while its worker thread runs others. So 10 000 tasks that each
//! sleep 10 ms sleep together, on a worker per CPU: the whole run takes
//! about one sleep plus the time to spawn them, not 100 s.

use std::time::{Duration, Instant};

fn main() {
    spindle_examples::init_tracing();
    let rt = spindle::Runtime::new().expect("start the runtime");
    let start = Instant::now();
    // block_on runs the closure as a task and waits for it on this thread.
    let total = rt.block_on(|| {
        let handles: Vec<_> = (0..10_000u64)
            .map(|i| {
                spindle::spawn(move || {
                    spindle::sleep(Duration::from_millis(10)).unwrap();
                    i
                })
            })
            .collect();
        // join suspends this task until that one has ended, and gives back
        // its value.
        handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
    });
    assert_eq!(
        total,
        (0..10_000u64).sum::<u64>(),
        "every task's value came back"
    );
    let s = rt.stats();
    println!(
        "10 000 tasks slept 10 ms each and summed to {total} in {:.1?} on {} workers",
        start.elapsed(),
        rt.workers()
    );
    println!(
        "{} tasks spawned, {} switches, {} steals between workers, {} parks",
        s.spawned, s.switches, s.steals, s.parks
    );
}
