//! Lesson: fan out and collect. Spawn N tasks into a `JoinSet`, then take
//! their results as each one ends, fastest first; the whole takes as long
//! as the slowest, not the sum.
//!
//! `cargo run --release --example fanout -- 8` (the number of tasks, default 8)
//!
//! A `JoinSet`'s tasks are children of the task that spawned them: they run
//! inside its deadline scope and are stopped with it, and dropping the set
//! stops the ones still running (see the `interrupt` and `deadline`
//! lessons). A plain `spindle::spawn` is detached instead.

use std::time::{Duration, Instant};

fn main() {
    spindle_examples::init_tracing();
    let n: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("the number of tasks"))
        .unwrap_or(8);
    let rt = spindle::Runtime::new().expect("start the runtime");
    rt.block_on(|| {
        let start = Instant::now();
        let mut set = spindle::JoinSet::new();
        for shard in 0..n {
            // Each "fetches" its shard: a few ms, longer for some.
            set.spawn(move || {
                let ms = 5 + (shard * 7) % 23;
                spindle::sleep(Duration::from_millis(ms)).unwrap();
                (shard, ms)
            });
        }
        // join_next waits for whichever task ends next; None once all have.
        let (mut sum, mut collected) = (0, 0);
        while let Some((id, result)) = set.join_next().expect("no deadline, no interrupt here") {
            let (shard, ms) = result.expect("a task panicked");
            println!(
                "  shard {shard:>2} ({id}) took {ms:>2} ms, in at {:.1?}",
                start.elapsed()
            );
            sum += ms;
            collected += 1;
        }
        assert_eq!(collected, n, "one result from every task");
        println!(
            "{n} shards, {sum} ms of sleeps in all, collected in {:.1?}",
            start.elapsed()
        );
    });
}
