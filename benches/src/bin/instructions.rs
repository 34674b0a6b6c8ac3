//! Workloads to count instructions of, under callgrind: a measure of the
//! hot paths that a busy 2-vCPU VM does not blur. Wall-clock benchmarks on
//! such a host move by 10-30 % between runs; instruction counts of the same
//! binary and input repeat to a few parts in a million.
//!
//! ```text
//! cargo build --release -p spindle-benches --bin instructions
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/instructions yield 200000      # and again with 400000
//! ```
//!
//! Run each workload at two sizes and divide the difference of the totals
//! by the difference of the operations: start-up and shutdown cancel out.
//! Every workload runs on a 1-worker runtime, so no instructions are spent
//! spinning on an idle second worker.
//!
//! - `yield N`: two tasks yield N times each (2N switches);
//! - `pingpong N`: two tasks pass a turn N times through a `Butex` (N round
//!   trips, each two waits and two wakes);
//! - `future_pingpong N`: as `pingpong`, each wait a `block_on_future` of
//!   the least future (a flag and a stored waker): what the bridge from a
//!   future to a task's wait adds;
//! - `spawn_join N`: a task spawns and joins N tasks, 1 000 at a time;
//! - `sleep N`: N tasks sleep 20 ms at once (arm, fire, wake, join);
//! - `timer_churn N`: N timers armed and cancelled on a timer thread of
//!   their own (the RPC pattern: almost no timer fires).
//!
//! `yield` and `pingpong` also come as `yield_subscriber` and
//! `pingpong_subscriber` (a tracing-subscriber `Registry` set as the global
//! default, no span entered) and `yield_span` and `pingpong_span` (the same,
//! each task inside one span): what a switch pays for taking a task's spans
//! with it (`runtime/src/sched/spans.rs`).

use spindle::Butex;
use spindle_benches::turn::Turn;
use spindle_timer::{TimerOptions, TimerThread};
use std::hint::black_box;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(mode), Some(n)) = (args.next(), args.next().and_then(|n| n.parse::<u32>().ok()))
    else {
        eprintln!(
            "usage: instructions yield|pingpong[_subscriber|_span]|future_pingpong|spawn_join|sleep|timer_churn N"
        );
        std::process::exit(2);
    };
    if mode == "timer_churn" {
        timer_churn(n);
        return;
    }
    let (mode, spans) = if let Some(m) = mode.strip_suffix("_subscriber") {
        (m.to_owned(), Spans::Subscriber)
    } else if let Some(m) = mode.strip_suffix("_span") {
        (m.to_owned(), Spans::InSpan)
    } else {
        (mode, Spans::None)
    };
    if spans != Spans::None {
        tracing::subscriber::set_global_default(tracing_subscriber::registry())
            .expect("the global subscriber");
    }
    let rt = spindle::Runtime::builder()
        .workers(1)
        .build()
        .expect("a 1-worker runtime");
    rt.block_on(|| match mode.as_str() {
        "yield" => yields(n, spans),
        "pingpong" => pingpong(n, spans),
        "future_pingpong" => future_pingpong(n),
        "spawn_join" => spawn_join(n),
        "sleep" => sleep(n),
        other => {
            eprintln!("unknown workload {other}");
            std::process::exit(2);
        }
    });
}

/// Whether a subscriber is set, and whether the switching tasks are
/// inside a span.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Spans {
    None,
    Subscriber,
    InSpan,
}

impl Spans {
    /// Enters a span of its own if the tasks are to be in one.
    fn enter(self) -> Option<tracing::span::EnteredSpan> {
        (self == Spans::InSpan).then(|| tracing::info_span!("switching").entered())
    }
}

fn yields(n: u32, spans: Spans) {
    let tasks: Vec<_> = (0..2)
        .map(|_| {
            spindle::spawn(move || {
                let _span = spans.enter();
                for _ in 0..n {
                    spindle::yield_now();
                }
            })
        })
        .collect();
    for t in tasks {
        t.join().expect("the yielder");
    }
}

fn pingpong(n: u32, spans: Spans) {
    let turn = Arc::new(Butex::new(0));
    let players: Vec<_> = (0..2u32)
        .map(|me| {
            let turn = turn.clone();
            spindle::spawn(move || {
                let _span = spans.enter();
                for _ in 0..n {
                    while turn.value().load(Ordering::Acquire) != me {
                        let _ = turn.wait(1 - me, None);
                    }
                    turn.value().store(1 - me, Ordering::Release);
                    turn.wake_one();
                }
            })
        })
        .collect();
    for p in players {
        p.join().expect("the player");
    }
}

fn future_pingpong(n: u32) {
    let (a, b) = (Arc::new(Turn::default()), Arc::new(Turn::default()));
    let (a2, b2) = (a.clone(), b.clone());
    let pong = spindle::spawn(move || {
        for _ in 0..n {
            spindle::task::block_on_future(b2.take()).expect("wait");
            a2.give();
        }
    });
    for _ in 0..n {
        b.give();
        spindle::task::block_on_future(a.take()).expect("wait");
    }
    pong.join().expect("the other player");
}

fn spawn_join(n: u32) {
    for _ in 0..n / 1000 {
        let tasks: Vec<_> = (0..1000u32).map(|i| spindle::spawn(move || i)).collect();
        for t in tasks {
            black_box(t.join().expect("the child"));
        }
    }
}

fn sleep(n: u32) {
    let sleepers: Vec<_> = (0..n)
        .map(|_| spindle::spawn(|| spindle::sleep(Duration::from_millis(20))))
        .collect();
    for s in sleepers {
        s.join()
            .expect("the sleeper")
            .expect("an uninterrupted sleep");
    }
}

fn timer_churn(n: u32) {
    let timer = TimerThread::start(TimerOptions::default()).expect("a timer thread");
    let deadline = Instant::now() + Duration::from_secs(100);
    for v in 0..n {
        let id = timer
            .schedule(deadline, move || {
                black_box(v);
            })
            .expect("armed");
        black_box(timer.unschedule(id));
    }
}
