//! What a switch pays for spans that belong to tasks
//! (`runtime/src/sched/spans.rs`): yields and butex ping-pongs of two tasks
//! on a 1-worker runtime (every switch a local one, nothing stolen or woken
//! across threads, so the differences are the switch's own):
//!
//! - `no_subscriber`: no dispatcher was ever set (these run first: a global
//!   default cannot be unset);
//! - `subscriber`: a tracing-subscriber `Registry` is the global default,
//!   and the tasks enter no span;
//! - `one_span`: the same, each task inside one span for its whole loop.
//!
//! `span_yield/*` report one yield (one switch); `span_pingpong/*` one
//! round trip (two waits, two wakes: two switches). The instruction counts
//! of the same workloads: `src/bin/instructions.rs`.

mod common;

use common::Peers;
use criterion::{Criterion, SamplingMode};
use spindle::Butex;
use spindle_benches::workload::{full_batches, YIELD_BATCH};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Enters a span of its own if `in_span`.
fn enter(in_span: bool) -> Option<tracing::span::EnteredSpan> {
    in_span.then(|| tracing::info_span!("switching").entered())
}

/// Two tasks yield `YIELD_BATCH` times between them per batch, as in
/// `runtime.rs`. Per yield.
fn yields(rt: &spindle::Runtime, iters: u64, in_span: bool) -> Duration {
    full_batches(iters, YIELD_BATCH, |n| {
        rt.block_on(move || {
            let start = Instant::now();
            let hs = [n / 2, n - n / 2].map(|m| {
                spindle::spawn(move || {
                    let _span = enter(in_span);
                    for _ in 0..m {
                        spindle::yield_now();
                    }
                })
            });
            for h in hs {
                h.join().expect("the yielder");
            }
            start.elapsed()
        })
    })
}

/// Waits on `b` until its value is `me`.
fn wait_turn(b: &Butex, me: u32) {
    loop {
        let v = b.value().load(Ordering::Acquire);
        if v == me {
            return;
        }
        let _ = b.wait(v, None);
    }
}

/// Two tasks hand a turn back and forth `iters` times through a butex, as
/// in `runtime.rs`. Per round trip.
fn pingpong(rt: &spindle::Runtime, iters: u64, in_span: bool) -> Duration {
    rt.block_on(|| {
        let butex = Arc::new(Butex::new(0));
        let start = Instant::now();
        let players = [0, 1].map(|me| {
            let b = butex.clone();
            spindle::spawn(move || {
                let _span = enter(in_span);
                for _ in 0..iters {
                    wait_turn(&b, me);
                    b.value().store(1 - me, Ordering::Release);
                    b.wake_one();
                }
            })
        });
        for p in players {
            p.join().expect("the player");
        }
        start.elapsed()
    })
}

/// Runs the `cases` (name, whether the tasks are in a span) of both
/// workloads.
fn bench_cases(c: &mut Criterion, rt: &spindle::Runtime, cases: &[(&str, bool)]) {
    let mut g = c.benchmark_group("span_yield");
    // Whole batches per sample, as `runtime.rs` does.
    g.sampling_mode(SamplingMode::Flat);
    for &(name, in_span) in cases {
        g.bench_function(name, |b| b.iter_custom(|i| yields(rt, i, in_span)));
    }
    g.finish();
    let mut g = c.benchmark_group("span_pingpong");
    for &(name, in_span) in cases {
        g.bench_function(name, |b| b.iter_custom(|i| pingpong(rt, i, in_span)));
    }
    g.finish();
}

fn bench_all(c: &mut Criterion, _: &Peers) {
    let rt = spindle::Runtime::builder()
        .workers(1)
        .build()
        .expect("a 1-worker runtime");
    bench_cases(c, &rt, &[("no_subscriber", false)]);
    tracing::subscriber::set_global_default(tracing_subscriber::registry())
        .expect("no global subscriber before");
    bench_cases(c, &rt, &[("subscriber", false), ("one_span", true)]);
    rt.shutdown();
}

fn main() {
    Peers::run_benches(bench_all);
}
