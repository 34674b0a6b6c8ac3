//! Arm+cancel churn: the RPC pattern, where every call arms a timeout and
//! almost every call finishes first and cancels it.
//!
//! Two threads each arm a timer 100 ms ahead and cancel it, in a loop. The
//! reported time is per arm+cancel pair *per thread* (each thread does
//! `iters` pairs; the slower thread's time is reported).
//!
//! The deadline is read from the clock once every [`REFRESH`] pairs, not for
//! every pair: on this kind of VM `Instant::now()` alone costs 30-50 ns,
//! which would swamp what is measured here (callers such as an RPC layer
//! compute the deadline anyway). All three peers take the precomputed
//! deadline (tokio through `sleep_until`), so none of them reads the clock
//! in the loop. Peers:
//!
//! - `spindle`: `TimerThread::schedule` + `unschedule`, the callback
//!   capturing two words (as the runtime's sleep callback does);
//! - `naive_heap`: a `Mutex<BinaryHeap>` + `Condvar` timer thread
//!   (`spindle_benches::naive_timer`);
//! - `tokio`: a `tokio::time::sleep_until` 100 ms ahead, polled once (which
//!   registers it in the timer wheel) and dropped (which deregisters it), on
//!   threads that have entered a 2-worker runtime.
//!
//! Each peer's line on stderr also gives the process's CPU time per pair
//! (all threads, the timer's own included).
//!
//! Run: `cargo bench -p spindle-benches --bench timer_churn`.

use criterion::{criterion_group, criterion_main, Criterion};
use spindle_benches::naive_timer::NaiveTimer;
use spindle_benches::sleepers::process_cpu_time;
use spindle_timer::{TimerOptions, TimerThread, Unschedule};
use std::future::Future;
use std::hint::black_box;
use std::sync::{Barrier, Mutex};
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

const THREADS: usize = 2;
const TIMEOUT: Duration = Duration::from_millis(100);
/// Pairs between two reads of the clock.
const REFRESH: u64 = 1024;

/// The process's CPU time and the pairs done, over the runs since the last
/// [`report_cpu`].
static CPU: Mutex<(Duration, u64)> = Mutex::new((Duration::ZERO, 0));

/// Prints the CPU time per pair of `peer`'s runs, and starts afresh.
fn report_cpu(peer: &str) {
    let (cpu, pairs) = std::mem::take(&mut *CPU.lock().unwrap());
    eprintln!(
        "timer_churn/{peer}: {:.1} ns of CPU per arm+cancel",
        cpu.as_nanos() as f64 / pairs.max(1) as f64
    );
}

/// Runs `pairs(iters)` on `THREADS` threads at once; returns the slowest
/// thread's time.
fn on_threads(iters: u64, pairs: impl Fn(u64) -> Duration + Sync) -> Duration {
    let barrier = Barrier::new(THREADS);
    let cpu0 = process_cpu_time();
    let slowest = std::thread::scope(|s| {
        let hs: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    pairs(iters)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).max().unwrap()
    });
    let mut cpu = CPU.lock().unwrap();
    cpu.0 += process_cpu_time() - cpu0;
    cpu.1 += THREADS as u64 * iters;
    slowest
}

fn churn(c: &mut Criterion) {
    let mut g = c.benchmark_group("timer_churn");

    let timer = TimerThread::start(TimerOptions::default()).unwrap();
    g.bench_function("spindle", |b| {
        b.iter_custom(|iters| {
            on_threads(iters, |n| {
                let task = &timer as *const TimerThread as usize;
                let start = Instant::now();
                let mut deadline = start + TIMEOUT;
                for version in 0..n {
                    if version % REFRESH == 0 {
                        deadline = Instant::now() + TIMEOUT;
                    }
                    let id = timer
                        .schedule(deadline, move || {
                            black_box((task, version));
                        })
                        .unwrap();
                    let r = timer.unschedule(id);
                    debug_assert_eq!(r, Unschedule::Removed);
                    black_box(r);
                }
                start.elapsed()
            })
        })
    });
    report_cpu("spindle");
    let stats = timer.stats();
    eprintln!(
        "spindle: {} scheduled, {} wake-ups of the timer thread, busy {:?}, {} slots, {} entries queued",
        stats.scheduled, stats.wakeups, stats.busy, stats.slots, stats.queued
    );
    drop(timer);

    let naive = NaiveTimer::new();
    g.bench_function("naive_heap", |b| {
        b.iter_custom(|iters| {
            on_threads(iters, |n| {
                let task = &naive as *const NaiveTimer as usize;
                let start = Instant::now();
                let mut deadline = start + TIMEOUT;
                for version in 0..n {
                    if version % REFRESH == 0 {
                        deadline = Instant::now() + TIMEOUT;
                    }
                    let id = naive.schedule(deadline, move || {
                        black_box((task, version));
                    });
                    black_box(naive.cancel(id));
                }
                start.elapsed()
            })
        })
    });
    report_cpu("naive_heap");
    drop(naive);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    g.bench_function("tokio", |b| {
        b.iter_custom(|iters| {
            on_threads(iters, |n| {
                let _ctx = rt.enter();
                let mut cx = Context::from_waker(Waker::noop());
                let start = Instant::now();
                let mut deadline = start + TIMEOUT;
                for i in 0..n {
                    if i % REFRESH == 0 {
                        deadline = Instant::now() + TIMEOUT;
                    }
                    let mut sleep = std::pin::pin!(tokio::time::sleep_until(deadline.into()));
                    // The first poll registers the timer; the drop at the end
                    // of the iteration deregisters it.
                    black_box(sleep.as_mut().poll(&mut cx).is_pending());
                }
                start.elapsed()
            })
        })
    });
    report_cpu("tokio");
    drop(rt);
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(10);
    targets = churn
}
criterion_main!(benches);
