//! Lesson: interrupt and stop. `interrupt` ends the task's current wait
//! (a sleep, a channel's receive, a socket's read…) with `Interrupted`; the
//! task carries on and decides what that means. `stop` is for good: the
//! current wait and every later one fail at once with `Stopped`, so the
//! task winds down; and it reaches the tasks it spawned through a
//! `JoinSet` or a scope, its children.
//!
//! `cargo run --release --example interrupt`

use spindle::sync::mpsc;
use spindle::{JoinSet, SleepError, WaitError};
use std::time::{Duration, Instant};

const MS: Duration = Duration::from_millis(1);

fn main() {
    spindle_examples::init_tracing();
    let rt = spindle::Runtime::new().expect("start the runtime");
    rt.block_on(|| {
        let start = Instant::now();
        // A task that sleeps between rounds of work; an interrupt wakes it
        // early to look again; a stop ends it.
        let sleeper = spindle::spawn(move || {
            let mut woken = 0;
            loop {
                match spindle::sleep(Duration::from_secs(60)) {
                    Err(SleepError::Interrupted) => {
                        woken += 1;
                        println!(
                            "  {:>6.1?}  sleeper: woken early, looks for work",
                            start.elapsed()
                        );
                    }
                    Err(SleepError::Stopped) => return woken,
                    other => panic!("unexpected: {other:?}"),
                }
            }
        });
        for _ in 0..3 {
            spindle::sleep(5 * MS).unwrap();
            sleeper.interrupt().unwrap();
        }
        spindle::sleep(5 * MS).unwrap();
        sleeper.stop().unwrap();
        let woken = sleeper.join().unwrap();
        assert_eq!(woken, 3);
        println!(
            "the sleeper was woken {woken} times, then stopped, at {:.1?}",
            start.elapsed()
        );

        // A stop reaches children: a request with three children, each
        // reporting how its sleep ended on a channel.
        let (tx, results) = mpsc::channel();
        let request = spindle::spawn(move || {
            let mut children = JoinSet::new();
            for i in 0..3 {
                let tx = tx.clone();
                children.spawn(move || {
                    tx.send((i, spindle::sleep(Duration::from_secs(60))))
                        .unwrap()
                });
            }
            // Fails with Stopped when the request is stopped.
            children.join_next().map(|_| ())
        });
        spindle::sleep(5 * MS).unwrap();
        request.stop().unwrap();
        let stopped = request.join().unwrap();
        println!("the request, stopped: {stopped:?}");
        assert_eq!(stopped, Err(WaitError::Stopped));
        // Ends when every sender (each child's, the request's) has gone.
        let mut children = 0;
        for (i, how) in results.iter() {
            println!("  child {i}: its sleep ended {how:?}");
            assert_eq!(how, Err(SleepError::Stopped));
            children += 1;
        }
        assert_eq!(children, 3);
        println!("all ended at {:.1?}", start.elapsed());
    });
}
