//! Lesson: deadlines. `with_deadline(t, f)` runs `f` so that every
//! blocking call inside it (a sleep, a lock, a channel's receive, a
//! socket's read, a join) fails with `DeadlineExceeded` once `t` passes.
//! Scopes nest, and the earlier deadline wins: a step cannot outlive the
//! request it is part of. No timeout is threaded through the functions.
//!
//! `cargo run --release --example deadline`

use spindle::SleepError;
use std::time::{Duration, Instant};

const MS: Duration = Duration::from_millis(1);

/// A step of some work that takes `ms`, under a deadline of its own.
fn step(name: &str, ms: u32, own: u32, start: Instant) -> Result<(), SleepError> {
    let r = spindle::with_deadline(Instant::now() + own * MS, || spindle::sleep(ms * MS));
    let verdict = match r {
        Ok(()) => "done".to_string(),
        Err(SleepError::DeadlineExceeded) => "cut short: DeadlineExceeded".to_string(),
        Err(e) => format!("{e}"),
    };
    println!(
        "  {name} ({ms} ms, own deadline {own} ms): {verdict} at {:.0?}",
        start.elapsed()
    );
    r
}

fn main() {
    spindle_examples::init_tracing();
    let rt = spindle::Runtime::new().expect("start the runtime");
    rt.block_on(|| {
        let start = Instant::now();
        println!("a request with 50 ms to live:");
        spindle::with_deadline(start + 50 * MS, || {
            // Its own deadline is the earlier: it wins.
            let parsed = step("parse", 20, 10, start);
            assert_eq!(parsed, Err(SleepError::DeadlineExceeded));
            // What is left of the request's time: what a call to a server
            // would carry in its request (`rpc` sends it so).
            let deadline = spindle::current_deadline().expect("inside a scope");
            let left = deadline.saturating_duration_since(Instant::now());
            println!("  time left for the request: {left:.0?}");
            // The request's is the earlier: the step ends at 50 ms.
            let fetched = step("fetch", 100, 200, start);
            assert_eq!(fetched, Err(SleepError::DeadlineExceeded));
        });

        // A task spawned through a JoinSet (or a scope) is the request's
        // child: it runs under the request's deadline. A plain spawn is
        // detached: it does not.
        let start = Instant::now();
        println!("a request with 30 ms to live starts two tasks that sleep 60 ms:");
        let mut children = spindle::JoinSet::new();
        let detached = spindle::with_deadline(start + 30 * MS, || {
            children.spawn(|| spindle::sleep(60 * MS));
            spindle::spawn(|| spindle::sleep(60 * MS))
        });
        let (_, child) = children.join_next().unwrap().unwrap();
        let child = child.unwrap();
        println!("  its JoinSet child: {child:?} at {:.0?}", start.elapsed());
        let alone = detached.join().unwrap();
        println!("  the detached task: {alone:?} at {:.0?}", start.elapsed());
        assert_eq!(child, Err(SleepError::DeadlineExceeded));
        assert_eq!(alone, Ok(()));
        println!(
            "after the request: current_deadline() = {:?}",
            spindle::current_deadline()
        );
        assert_eq!(spindle::current_deadline(), None);
    });
}
