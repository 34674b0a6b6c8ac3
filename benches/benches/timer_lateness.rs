//! Lateness of 1 ms and 100 µs timers: how long after its deadline a
//! callback starts.
//!
//! One timer at a time: arm it `delay` ahead, wait until it has fired, and
//! record `now - deadline` taken first thing in the callback (for tokio:
//! right after the sleep completes inside a `block_on`). With `iter_custom`
//! the "time" criterion reports is the *mean lateness* per timer; the p50 and
//! p99 over every sample (warm-up included) are printed to stderr.
//!
//! Peers: `spindle` (`TimerThread` with default options: 1 ns timer slack,
//! wakes 50 µs early and busy-waits within a 5 % CPU budget),
//! `spindle_nospin` (the same with `spin: 0`: timed futex waits alone),
//! `naive_heap` (`Mutex<BinaryHeap>` + `Condvar::wait_timeout`, the thread's
//! default 50 µs slack) and `tokio` (`sleep_until` in a 2-worker runtime;
//! tokio's wheel has a resolution of 1 ms).
//!
//! Run: `cargo bench -p spindle-benches --bench timer_lateness` (about 20 s).

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use spindle_benches::naive_timer::NaiveTimer;
use spindle_benches::sleepers::process_cpu_time;
use spindle_timer::{TimerOptions, TimerThread};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const DELAYS: [(&str, Duration); 2] = [
    ("1ms", Duration::from_millis(1)),
    ("100us", Duration::from_micros(100)),
];

/// Benchmarks `one` (which arms one timer, waits for it and returns its
/// lateness) and prints the percentiles of all samples, and the process's
/// CPU time per timer.
fn bench(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, mut one: impl FnMut() -> Duration) {
    let mut samples = Vec::new();
    let mut cpu = Duration::ZERO;
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let cpu0 = process_cpu_time();
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let late = one();
                samples.push(late);
                total += late;
            }
            cpu += process_cpu_time() - cpu0;
            total
        })
    });
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    eprintln!(
        "timer_lateness/{name}: p50 {:?}, p99 {:?} over {} timers, {:.1} µs of CPU per timer",
        at(0.50),
        at(0.99),
        samples.len(),
        cpu.as_secs_f64() * 1e6 / samples.len().max(1) as f64
    );
}

fn lateness(c: &mut Criterion) {
    let mut g = c.benchmark_group("timer_lateness");

    let timer = TimerThread::start(TimerOptions::default()).unwrap();
    let nospin = TimerThread::start({
        let mut o = TimerOptions::default();
        o.spin = Duration::ZERO;
        o
    })
    .unwrap();
    let naive = NaiveTimer::new();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let (tx, rx) = mpsc::channel::<Duration>();

    for (label, delay) in DELAYS {
        for (name, timer) in [("spindle", &timer), ("spindle_nospin", &nospin)] {
            bench(&mut g, &format!("{name}/{label}"), || {
                let deadline = Instant::now() + delay;
                let tx = tx.clone();
                timer
                    .schedule(deadline, move || {
                        let late = Instant::now().saturating_duration_since(deadline);
                        tx.send(late).unwrap();
                    })
                    .unwrap();
                rx.recv().unwrap()
            });
        }

        bench(&mut g, &format!("naive_heap/{label}"), || {
            let deadline = Instant::now() + delay;
            let tx = tx.clone();
            naive.schedule(deadline, move || {
                let late = Instant::now().saturating_duration_since(deadline);
                tx.send(late).unwrap();
            });
            rx.recv().unwrap()
        });

        bench(&mut g, &format!("tokio/{label}"), || {
            rt.block_on(async {
                let deadline = Instant::now() + delay;
                tokio::time::sleep_until(deadline.into()).await;
                Instant::now().saturating_duration_since(deadline)
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(400))
        .measurement_time(Duration::from_millis(1200))
        .sample_size(10);
    targets = lateness
}
criterion_main!(benches);
