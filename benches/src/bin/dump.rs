//! How long a task dump takes, and the longest it holds a worker from its
//! own tasks: `N` tasks asleep on a 2-worker runtime, dumped `K` times.
//!
//! ```text
//! cargo build --release -p spindle-benches --bin dump
//! target/release/dump 100000 5
//! # with backtraces (each worker walks its tasks' stacks):
//! RUSTFLAGS="-C force-frame-pointers=yes" cargo build --release \
//!     -p spindle-benches --bin dump --target-dir target/fp
//! target/fp/release/dump 100000 5
//! ```
//!
//! Prints one line per dump (its time, the longest worker hold, whether it
//! has backtraces) and the median and worst of each. The first dump also
//! loads the binary's symbols for backtraces; the lines after it are the
//! steady cost.

use spindle::{Runtime, TaskState};
use std::time::{Duration, Instant};

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let k: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let rt = Runtime::builder().workers(2).build().expect("a runtime");
    let handles: Vec<_> = (0..n)
        .map(|_| {
            rt.spawn(|| {
                let _ = spindle::sleep(Duration::from_secs(3600));
            })
        })
        .collect();
    // Until every task has gone to sleep.
    let give_up = Instant::now() + Duration::from_secs(120);
    while rt
        .dump()
        .iter()
        .filter(|t| matches!(t.state, TaskState::Sleeping { .. }))
        .count()
        < n
    {
        assert!(Instant::now() < give_up, "the tasks never all slept");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut taken = Vec::new();
    let mut holds = Vec::new();
    for i in 0..k {
        let t0 = Instant::now();
        let d = rt.dump();
        let took = t0.elapsed();
        assert_eq!(d.len(), n, "every sleeper listed");
        println!(
            "dump {i}: {n} tasks in {took:.1?}, longest worker hold {:.1?}, backtraces: {}",
            d.longest_hold(),
            d.has_backtraces()
        );
        if i > 0 || k == 1 {
            taken.push(took);
            holds.push(d.longest_hold());
        }
    }
    taken.sort();
    holds.sort();
    println!(
        "steady: dump median {:.1?} worst {:.1?}; longest hold median {:.1?} worst {:.1?}",
        taken[taken.len() / 2],
        taken[taken.len() - 1],
        holds[holds.len() / 2],
        holds[holds.len() - 1]
    );
    drop(handles);
}
