//! Runtime benchmarks: spindle against tokio and may, two workers each.
//!
//! Every benchmark reports the time of one *operation*: criterion's
//! `iter_custom` is given a count of operations and returns the wall time
//! they took (batched workloads run whole batches and scale, see
//! `spindle_benches::workload::full_batches`). So `spawn_join/spindle` and
//! `spawn_join/tokio` read as ns per task directly:
//!
//! - `spawn_join`: from inside a task, spawn a batch of 200 000 tasks that
//!   each bump an atomic counter, then join them all. Per task.
//! - `spawn_join_outside`: the same from the plain bench thread.
//! - `yield`: two tasks yield 1 000 000 times each; the wall time over the
//!   yields of both. Per yield.
//! - `pingpong`: two tasks hand a turn back and forth. Per round trip.
//!
//! Peers: a spindle `Runtime` with 2 workers, a tokio multi-thread runtime
//! with 2 worker threads, may with `set_workers(2)` (and its default of
//! pinned workers). "Inside a task" means on a worker: for spindle the body
//! of `block_on` (which runs as a task), for tokio a `tokio::spawn`ed task
//! (the future of tokio's `block_on` runs on the calling thread, not on a
//! worker), for may a coroutine. Results and how to read them:
//! `docs/benchmarks.md`.

mod common;

use common::Peers;
use criterion::{Criterion, SamplingMode};
use spindle_benches::workload::{
    check_count, full_batches, Placement, MAY_SPAWN_BATCH, SPAWN_BATCH, YIELD_BATCH,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// Bumped once by every spawned task; checked after each batch.
static COUNTER: AtomicU64 = AtomicU64::new(0);

fn bump() {
    COUNTER.fetch_add(1, Ordering::Relaxed);
}

/// Spawns `f` as a may coroutine.
fn may_go<F, T>(f: F) -> may::coroutine::JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    // SAFETY: may's spawn is unsafe because a coroutine may migrate between
    // worker threads and so see another thread's thread-local storage (or a
    // TLS address cached across a switch). The closures of these benchmarks
    // hold no thread-local storage across a switch: they bump a static
    // atomic, read the clock, allocate (the allocator's per-thread caches
    // are used within one call, never across a yield), and block or yield
    // only through may's own join, yield_now and channels.
    unsafe { may::coroutine::spawn(f) }
}

// ---------------------------------------------------------------- spawn_join

fn spindle_spawn_join(rt: &spindle::Runtime, iters: u64) -> Duration {
    full_batches(iters, SPAWN_BATCH, |n| {
        let before = COUNTER.load(Ordering::SeqCst);
        let t = rt.block_on(move || {
            let start = Instant::now();
            let hs: Vec<_> = (0..n).map(|_| spindle::spawn(bump)).collect();
            for h in hs {
                h.join().expect("spindle task failed");
            }
            start.elapsed()
        });
        check_count(&COUNTER, before, n, "spawn_join/spindle");
        t
    })
}

fn tokio_spawn_join(rt: &tokio::runtime::Runtime, iters: u64) -> Duration {
    full_batches(iters, SPAWN_BATCH, |n| {
        let before = COUNTER.load(Ordering::SeqCst);
        let t = rt.block_on(async move {
            tokio::spawn(async move {
                let start = Instant::now();
                let hs: Vec<_> = (0..n).map(|_| tokio::spawn(async { bump() })).collect();
                for h in hs {
                    h.await.expect("tokio task failed");
                }
                start.elapsed()
            })
            .await
            .expect("tokio task failed")
        });
        check_count(&COUNTER, before, n, "spawn_join/tokio");
        t
    })
}

fn may_spawn_join(iters: u64) -> Duration {
    // Not SPAWN_BATCH: see MAY_SPAWN_BATCH.
    full_batches(iters, MAY_SPAWN_BATCH, |n| {
        let before = COUNTER.load(Ordering::SeqCst);
        let t = may_go(move || {
            let start = Instant::now();
            let hs: Vec<_> = (0..n).map(|_| may_go(bump)).collect();
            for h in hs {
                h.join().expect("may coroutine failed");
            }
            start.elapsed()
        })
        .join()
        .expect("may coroutine failed");
        check_count(&COUNTER, before, n, "spawn_join/may");
        t
    })
}

// ------------------------------------------------------- spawn_join_outside

fn spindle_spawn_join_outside(rt: &spindle::Runtime, iters: u64) -> Duration {
    full_batches(iters, SPAWN_BATCH, |n| {
        let before = COUNTER.load(Ordering::SeqCst);
        let start = Instant::now();
        let hs: Vec<_> = (0..n).map(|_| rt.spawn(bump)).collect();
        for h in hs {
            h.join().expect("spindle task failed");
        }
        let t = start.elapsed();
        check_count(&COUNTER, before, n, "spawn_join_outside/spindle");
        t
    })
}

fn tokio_spawn_join_outside(rt: &tokio::runtime::Runtime, iters: u64) -> Duration {
    full_batches(iters, SPAWN_BATCH, |n| {
        let before = COUNTER.load(Ordering::SeqCst);
        let start = Instant::now();
        let hs: Vec<_> = (0..n).map(|_| rt.spawn(async { bump() })).collect();
        // A tokio JoinHandle is a future: awaiting it from a plain thread
        // needs an executor, and block_on is the one tokio offers.
        rt.block_on(async {
            for h in hs {
                h.await.expect("tokio task failed");
            }
        });
        let t = start.elapsed();
        check_count(&COUNTER, before, n, "spawn_join_outside/tokio");
        t
    })
}

fn may_spawn_join_outside(iters: u64) -> Duration {
    full_batches(iters, SPAWN_BATCH, |n| {
        let before = COUNTER.load(Ordering::SeqCst);
        let start = Instant::now();
        let hs: Vec<_> = (0..n).map(|_| may_go(bump)).collect();
        for h in hs {
            h.join().expect("may coroutine failed");
        }
        let t = start.elapsed();
        check_count(&COUNTER, before, n, "spawn_join_outside/may");
        t
    })
}

// --------------------------------------------------------------------- yield

// Each batch is `2 * YIELD_BATCH` yields: two tasks yield `YIELD_BATCH`
// times each; the time per yield is the batch's wall time over both tasks'.

fn spindle_yield(rt: &spindle::Runtime, iters: u64) -> Duration {
    full_batches(iters, 2 * YIELD_BATCH, |n| {
        rt.block_on(move || {
            let start = Instant::now();
            let hs = [n / 2, n - n / 2].map(|m| {
                spindle::spawn(move || {
                    for _ in 0..m {
                        spindle::yield_now();
                    }
                })
            });
            for h in hs {
                h.join().expect("spindle task failed");
            }
            start.elapsed()
        })
    })
}

fn tokio_yield(rt: &tokio::runtime::Runtime, iters: u64) -> Duration {
    full_batches(iters, 2 * YIELD_BATCH, |n| {
        rt.block_on(async move {
            let start = Instant::now();
            let hs = [n / 2, n - n / 2].map(|m| {
                tokio::spawn(async move {
                    for _ in 0..m {
                        tokio::task::yield_now().await;
                    }
                })
            });
            for h in hs {
                h.await.expect("tokio task failed");
            }
            start.elapsed()
        })
    })
}

fn may_yield(iters: u64) -> Duration {
    full_batches(iters, 2 * YIELD_BATCH, |n| {
        let start = Instant::now();
        let hs = [n / 2, n - n / 2].map(|m| {
            may_go(move || {
                for _ in 0..m {
                    may::coroutine::yield_now();
                }
            })
        });
        for h in hs {
            h.join().expect("may coroutine failed");
        }
        start.elapsed()
    })
}

// ------------------------------------------------------------------ pingpong

/// Where spindle's ping-pong pairs ran (see [`Placement`]).
static SPINDLE_PAIRS: Placement = Placement::new();

/// Waits on `b` until its value is `me` (whose turn it is).
fn spindle_wait_turn(b: &spindle::Butex, me: u32) {
    loop {
        let v = b.value().load(Ordering::Acquire);
        if v == me {
            return;
        }
        // Ok (woken), WouldBlock (the value moved on): look again. Nothing
        // interrupts these tasks and they set no deadline.
        let _ = b.wait(v, None);
    }
}

/// Plays `rounds` turns as player `me` (0 or 1) of a two-player butex.
fn spindle_player(b: &spindle::Butex, me: u32, rounds: u64) -> ThreadId {
    for _ in 0..rounds {
        spindle_wait_turn(b, me);
        b.value().store(1 - me, Ordering::Release);
        b.wake_one();
    }
    // A started spindle task never leaves its worker: this is where it ran.
    std::thread::current().id()
}

fn spindle_pingpong(rt: &spindle::Runtime, iters: u64) -> Duration {
    rt.block_on(|| {
        let butex = Arc::new(spindle::Butex::new(0));
        let start = Instant::now();
        let [ping, pong] = [0, 1].map(|me| {
            let b = butex.clone();
            spindle::spawn(move || spindle_player(&b, me, iters))
        });
        let a = ping.join().expect("spindle task failed");
        let b = pong.join().expect("spindle task failed");
        let t = start.elapsed();
        SPINDLE_PAIRS.record(a, b);
        t
    })
}

fn tokio_pingpong(rt: &tokio::runtime::Runtime, iters: u64) -> Duration {
    use tokio::sync::Notify;
    rt.block_on(async move {
        let (to_ping, to_pong) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let start = Instant::now();
        let ping = {
            let (me, other) = (to_ping.clone(), to_pong.clone());
            tokio::spawn(async move {
                for _ in 0..iters {
                    other.notify_one();
                    me.notified().await;
                }
            })
        };
        let pong = tokio::spawn(async move {
            for _ in 0..iters {
                to_pong.notified().await;
                to_ping.notify_one();
            }
        });
        ping.await.expect("tokio task failed");
        pong.await.expect("tokio task failed");
        start.elapsed()
    })
}

fn may_pingpong(iters: u64) -> Duration {
    // may's single-producer channels: on a 2-vCPU VM about 175 ns per round
    // trip against about 300 for `may::sync::mpsc` (and tokio's Notify pair
    // above is on par with a oneshot per round, and faster than mpsc(1)).
    use may::sync::spsc::channel;
    let (to_pong, pong_rx) = channel::<()>();
    let (to_ping, ping_rx) = channel::<()>();
    let start = Instant::now();
    let ping = may_go(move || {
        for _ in 0..iters {
            to_pong.send(()).expect("pong is alive");
            ping_rx.recv().expect("pong is alive");
        }
    });
    let pong = may_go(move || {
        for _ in 0..iters {
            pong_rx.recv().expect("ping is alive");
            to_ping.send(()).expect("ping is alive");
        }
    });
    ping.join().expect("may coroutine failed");
    pong.join().expect("may coroutine failed");
    start.elapsed()
}

// --------------------------------------------------------------------- main

fn report_spindle(rt: &spindle::Runtime, bench: &str, before: spindle::RuntimeStats) {
    let s = rt.stats();
    eprintln!(
        "[{bench}] spindle: spawned {} switches {} steals {} parks {} wakeups {}",
        s.spawned - before.spawned,
        s.switches - before.switches,
        s.steals - before.steals,
        s.parks - before.parks,
        s.wakeups - before.wakeups,
    );
}

fn bench_all(c: &mut Criterion, p: &Peers) {
    type Case<'a> = (&'a str, Box<dyn Fn(u64) -> Duration + 'a>);
    let benches: [(&str, [Case<'_>; 3]); 4] = [
        (
            "spawn_join",
            [
                ("spindle", Box::new(|i| spindle_spawn_join(&p.spindle, i))),
                ("tokio", Box::new(|i| tokio_spawn_join(&p.tokio, i))),
                ("may", Box::new(may_spawn_join)),
            ],
        ),
        (
            "spawn_join_outside",
            [
                (
                    "spindle",
                    Box::new(|i| spindle_spawn_join_outside(&p.spindle, i)),
                ),
                ("tokio", Box::new(|i| tokio_spawn_join_outside(&p.tokio, i))),
                ("may", Box::new(may_spawn_join_outside)),
            ],
        ),
        (
            "yield",
            [
                ("spindle", Box::new(|i| spindle_yield(&p.spindle, i))),
                ("tokio", Box::new(|i| tokio_yield(&p.tokio, i))),
                ("may", Box::new(may_yield)),
            ],
        ),
        (
            "pingpong",
            [
                ("spindle", Box::new(|i| spindle_pingpong(&p.spindle, i))),
                ("tokio", Box::new(|i| tokio_pingpong(&p.tokio, i))),
                ("may", Box::new(may_pingpong)),
            ],
        ),
    ];
    for (name, cases) in benches {
        let mut g = c.benchmark_group(name);
        // Flat sampling: every sample gets the same iteration count, so each
        // runs the same number of whole batches (at least one: 200 000 tasks
        // or 2 000 000 yields, see `full_batches`). Criterion's warm-up
        // times whole batches for small counts, so it overestimates the cost
        // of an operation and plans fewer iterations than 3 s would hold:
        // the spawn benchmarks measure about ten batches, not 3 s.
        g.sampling_mode(SamplingMode::Flat);
        for (peer, f) in cases {
            let before = p.spindle.stats();
            g.bench_function(peer, |b| b.iter_custom(&f));
            if peer == "spindle" {
                report_spindle(&p.spindle, name, before);
            }
        }
        g.finish();
    }
    let (same, split) = SPINDLE_PAIRS.counts();
    eprintln!("[pingpong] spindle pairs: {same} runs on one worker, {split} on two");
}

fn main() {
    Peers::run_benches(bench_all);
}
