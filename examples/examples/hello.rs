//! The smallest tour: spawn tasks, sleep in them, join them.
//!
//! `cargo run --release --example hello`

use std::time::{Duration, Instant};

fn main() {
    spindle_examples::init_tracing();
    let rt = spindle::Runtime::new().expect("start the runtime");
    let start = Instant::now();
    let total = rt.block_on(|| {
        // 10 000 tasks, each sleeping 10 ms: they sleep together, on a few
        // worker threads, so this takes about 10 ms, not 100 s.
        let handles: Vec<_> = (0..10_000u64)
            .map(|i| {
                spindle::spawn(move || {
                    spindle::sleep(Duration::from_millis(10)).unwrap();
                    i
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
    });
    assert_eq!(
        total,
        (0..10_000u64).sum::<u64>(),
        "every task's value came back"
    );
    println!(
        "10 000 tasks slept 10 ms each and summed to {total} in {:?} on {} workers",
        start.elapsed(),
        rt.workers()
    );
    println!("{:?}", rt.stats());
}
