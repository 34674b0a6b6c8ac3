//! Async interop against spindle's own waits and tokio's, two workers each
//! (`iter_custom`, per operation):
//!
//! - `block_on_future_ready`: `task::block_on_future` of a future ready at
//!   its first poll, in a task. Per call.
//! - `future_pingpong`: two tasks take turns, each waking the other and
//!   waiting for its turn: through `block_on_future` of a `tokio::sync::Notify`
//!   (a future woken by the other task), through `block_on_future` of the
//!   least a future can be (`spindle_benches::turn::Turn`: a flag and a stored waker, so
//!   what is measured is the bridge, not the future), and through a
//!   `Butex` each (the plain wait). Per round trip, both tasks placed on
//!   one worker (on two, the figure is where the tasks land: see
//!   `placement.sh`). The peer: two tokio tasks through a `Notify` each,
//!   on a current-thread runtime.
//! - `await_finished_join`: an async program (a tokio task) awaits the
//!   handle of a task that has already finished: spindle's `JoinHandle`
//!   and tokio's own. Per await (the spawn and the wait for the end are
//!   outside the timing).

mod common;

use common::Peers;
use criterion::Criterion;
use spindle::Butex;
use spindle_benches::turn::Turn;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn spindle_ready(rt: &spindle::Runtime, iters: u64) -> Duration {
    rt.block_on(move || {
        let start = Instant::now();
        for i in 0..iters {
            let v = spindle::task::block_on_future(std::future::ready(i)).expect("no wait");
            std::hint::black_box(v);
        }
        start.elapsed()
    })
}

/// Runs `ping` and `pong`, both placed on worker 0 (so the figure is the
/// wait's and the wake's, not where the two tasks happened to land), and
/// returns how long both took.
fn placed_pair(
    rt: &spindle::Runtime,
    ping: impl FnOnce() + Send + 'static,
    pong: impl FnOnce() + Send + 'static,
) -> Duration {
    let on_worker_0 = || spindle::task::Builder::new().worker(0);
    let start = Instant::now();
    let pong = on_worker_0().spawn_on(&rt.handle(), pong).expect("spawn");
    let ping = on_worker_0().spawn_on(&rt.handle(), ping).expect("spawn");
    ping.join().expect("ping task");
    pong.join().expect("pong task");
    start.elapsed()
}

fn spindle_future_pingpong(rt: &spindle::Runtime, iters: u64) -> Duration {
    use tokio::sync::Notify;
    let (a, b) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (a2, b2) = (a.clone(), b.clone());
    placed_pair(
        rt,
        move || {
            for _ in 0..iters {
                b.notify_one();
                spindle::task::block_on_future(a.notified()).expect("wait");
            }
        },
        move || {
            for _ in 0..iters {
                spindle::task::block_on_future(b2.notified()).expect("wait");
                a2.notify_one();
            }
        },
    )
}

fn spindle_turn_pingpong(rt: &spindle::Runtime, iters: u64) -> Duration {
    let (a, b) = (Arc::new(Turn::default()), Arc::new(Turn::default()));
    let (a2, b2) = (a.clone(), b.clone());
    placed_pair(
        rt,
        move || {
            for _ in 0..iters {
                b.give();
                spindle::task::block_on_future(a.take()).expect("wait");
            }
        },
        move || {
            for _ in 0..iters {
                spindle::task::block_on_future(b2.take()).expect("wait");
                a2.give();
            }
        },
    )
}

/// The peer: two tokio tasks taking turns through a `Notify` each, on one
/// thread (a current-thread runtime: as spindle's two tasks on one worker).
fn tokio_notify_pingpong(iters: u64) -> Duration {
    use tokio::sync::Notify;
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("tokio runtime");
    rt.block_on(async move {
        let (a, b) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let (a2, b2) = (a.clone(), b.clone());
        let start = Instant::now();
        let pong = tokio::spawn(async move {
            for _ in 0..iters {
                b2.notified().await;
                a2.notify_one();
            }
        });
        for _ in 0..iters {
            b.notify_one();
            a.notified().await;
        }
        pong.await.expect("pong task");
        start.elapsed()
    })
}

fn spindle_butex_pingpong(rt: &spindle::Runtime, iters: u64) -> Duration {
    // Each side's turn counter: the other bumps it and wakes it.
    let (a, b) = (Arc::new(Butex::new(0)), Arc::new(Butex::new(0)));
    let (a2, b2) = (a.clone(), b.clone());
    placed_pair(
        rt,
        move || {
            for i in 0..iters as u32 {
                b.value().fetch_add(1, Ordering::Release);
                b.wake_one();
                while a.value().load(Ordering::Acquire) == i {
                    let _ = a.wait(i, None);
                }
            }
        },
        move || {
            for i in 0..iters as u32 {
                while b2.value().load(Ordering::Acquire) == i {
                    let _ = b2.wait(i, None);
                }
                a2.value().fetch_add(1, Ordering::Release);
                a2.wake_one();
            }
        },
    )
}

fn await_finished_spindle(p: &Peers, iters: u64) -> Duration {
    let rt = &p.spindle;
    p.tokio.block_on(async {
        let mut total = Duration::ZERO;
        for i in 0..iters {
            let h = rt.spawn(move || i);
            while !h.is_finished() {
                std::hint::spin_loop();
            }
            let start = Instant::now();
            let v = h.await.expect("task failed");
            total += start.elapsed();
            std::hint::black_box(v);
        }
        total
    })
}

fn await_finished_tokio(p: &Peers, iters: u64) -> Duration {
    p.tokio.block_on(async {
        let mut total = Duration::ZERO;
        for i in 0..iters {
            let h = tokio::spawn(async move { i });
            while !h.is_finished() {
                std::hint::spin_loop();
            }
            let start = Instant::now();
            let v = h.await.expect("task failed");
            total += start.elapsed();
            std::hint::black_box(v);
        }
        total
    })
}

fn bench_all(c: &mut Criterion, p: &Peers) {
    let mut g = c.benchmark_group("block_on_future_ready");
    g.bench_function("spindle", |b| {
        b.iter_custom(|i| spindle_ready(&p.spindle, i))
    });
    g.finish();

    let mut g = c.benchmark_group("future_pingpong");
    g.bench_function("spindle_future", |b| {
        b.iter_custom(|i| spindle_future_pingpong(&p.spindle, i))
    });
    g.bench_function("spindle_turn_future", |b| {
        b.iter_custom(|i| spindle_turn_pingpong(&p.spindle, i))
    });
    g.bench_function("spindle_butex", |b| {
        b.iter_custom(|i| spindle_butex_pingpong(&p.spindle, i))
    });
    g.bench_function("tokio_notify", |b| b.iter_custom(tokio_notify_pingpong));
    g.finish();

    let mut g = c.benchmark_group("await_finished_join");
    g.bench_function("spindle", |b| {
        b.iter_custom(|i| await_finished_spindle(p, i))
    });
    g.bench_function("tokio", |b| b.iter_custom(|i| await_finished_tokio(p, i)));
    g.finish();
}

fn main() {
    Peers::run_benches(bench_all);
}
