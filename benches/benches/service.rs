//! Running a service: the cost of `JoinSet`, `Select` and signal waits,
//! against spindle's own plain forms and tokio's, two workers each
//! (`iter_custom`, per operation):
//!
//! - `joinset_spawn_join`: a task spawns one task and waits for it, in a
//!   loop: through a `JoinSet` (`spawn` + `join_next`) and plainly
//!   (`spawn` + `join`); tokio the same with its `JoinSet` and its
//!   `JoinHandle`. Per spawn + join.
//! - `select_pingpong`: two tasks pass a token back and forth over
//!   unbounded channels; each receive waits on two channels, the token's
//!   and one nothing is ever sent on (spindle `select!`, tokio
//!   `tokio::select!`); beside it the same ping-pong with plain receives.
//!   Per round trip.
//! - `signal_delivery`: a task waits in `Signals::recv` for SIGUSR1; the
//!   bench's thread raises it and spins until the task has recorded its
//!   wake-up. Per signal, from the raise to the task running.

mod common;

use common::Peers;
use criterion::Criterion;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

// ----------------------------------------------------------- spawn + join

fn spindle_spawn_join(rt: &spindle::Runtime, iters: u64) -> Duration {
    rt.block_on(move || {
        let start = Instant::now();
        for i in 0..iters {
            let h = spindle::spawn(move || i);
            assert_eq!(h.join().expect("task failed"), i);
        }
        start.elapsed()
    })
}

fn spindle_joinset_spawn_join(rt: &spindle::Runtime, iters: u64) -> Duration {
    rt.block_on(move || {
        let mut set = spindle::JoinSet::new();
        let start = Instant::now();
        for i in 0..iters {
            set.spawn(move || i);
            let (_, r) = set.join_next().expect("wait ended").expect("a task");
            assert_eq!(r.expect("task failed"), i);
        }
        start.elapsed()
    })
}

fn tokio_spawn_join(rt: &tokio::runtime::Runtime, iters: u64) -> Duration {
    rt.block_on(async move {
        tokio::spawn(async move {
            let start = Instant::now();
            for i in 0..iters {
                let h = tokio::spawn(async move { i });
                assert_eq!(h.await.expect("task failed"), i);
            }
            start.elapsed()
        })
        .await
        .expect("tokio task failed")
    })
}

fn tokio_joinset_spawn_join(rt: &tokio::runtime::Runtime, iters: u64) -> Duration {
    rt.block_on(async move {
        tokio::spawn(async move {
            let mut set = tokio::task::JoinSet::new();
            let start = Instant::now();
            for i in 0..iters {
                set.spawn(async move { i });
                let r = set.join_next().await.expect("a task");
                assert_eq!(r.expect("task failed"), i);
            }
            start.elapsed()
        })
        .await
        .expect("tokio task failed")
    })
}

// ---------------------------------------------------------- select ping-pong

/// Ping-pong over unbounded channels; with `select`, each receive also
/// waits on a channel that stays silent.
fn spindle_pingpong(rt: &spindle::Runtime, iters: u64, select: bool) -> Duration {
    use spindle::sync::mpsc::{channel, Receiver};
    fn recv(rx: &Receiver<u64>, idle: &Receiver<u64>, select: bool) -> u64 {
        if !select {
            return rx.recv().expect("sender gone");
        }
        spindle::select! {
            recv(rx) -> msg => msg.expect("sender gone"),
            recv(idle) -> _ => unreachable!("nothing is sent on the idle channel"),
        }
    }
    rt.block_on(move || {
        let (to_pong, pong_rx) = channel::<u64>();
        let (to_ping, ping_rx) = channel::<u64>();
        let (idle_tx, idle_a) = channel::<u64>();
        let (idle_tx2, idle_b) = channel::<u64>();
        let start = Instant::now();
        let pong = spindle::spawn(move || {
            for _ in 0..iters {
                to_ping
                    .send(recv(&pong_rx, &idle_a, select))
                    .expect("ping gone");
            }
        });
        let ping = spindle::spawn(move || {
            for i in 0..iters {
                to_pong.send(i).expect("pong gone");
                assert_eq!(recv(&ping_rx, &idle_b, select), i);
            }
        });
        ping.join().expect("spindle task failed");
        pong.join().expect("spindle task failed");
        drop((idle_tx, idle_tx2));
        start.elapsed()
    })
}

fn tokio_pingpong(rt: &tokio::runtime::Runtime, iters: u64, select: bool) -> Duration {
    use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
    async fn recv(
        rx: &mut UnboundedReceiver<u64>,
        idle: &mut UnboundedReceiver<u64>,
        select: bool,
    ) -> u64 {
        if !select {
            return rx.recv().await.expect("sender gone");
        }
        tokio::select! {
            msg = rx.recv() => msg.expect("sender gone"),
            _ = idle.recv() => unreachable!("nothing is sent on the idle channel"),
        }
    }
    rt.block_on(async move {
        let (to_pong, mut pong_rx) = unbounded_channel::<u64>();
        let (to_ping, mut ping_rx) = unbounded_channel::<u64>();
        let (idle_tx, mut idle_a) = unbounded_channel::<u64>();
        let (idle_tx2, mut idle_b) = unbounded_channel::<u64>();
        let start = Instant::now();
        let pong = tokio::spawn(async move {
            for _ in 0..iters {
                let v = recv(&mut pong_rx, &mut idle_a, select).await;
                to_ping.send(v).expect("ping gone");
            }
        });
        let ping = tokio::spawn(async move {
            for i in 0..iters {
                to_pong.send(i).expect("pong gone");
                assert_eq!(recv(&mut ping_rx, &mut idle_b, select).await, i);
            }
        });
        ping.await.expect("tokio task failed");
        pong.await.expect("tokio task failed");
        drop((idle_tx, idle_tx2));
        start.elapsed()
    })
}

// --------------------------------------------------------- signal delivery

/// The sum of `iters` delivery times of SIGUSR1 to a task waiting for it.
fn spindle_signal_delivery(rt: &spindle::Runtime, iters: u64) -> Duration {
    let base = Instant::now();
    let woke = Arc::new(AtomicU64::new(0));
    let seen = woke.clone();
    let signals = spindle::signal::Signals::new(&[libc::SIGUSR1]).expect("signal registration");
    let waiter = rt.spawn(move || {
        for _ in 0..iters {
            assert_eq!(signals.recv().expect("signal wait"), libc::SIGUSR1);
            seen.store(base.elapsed().as_nanos() as u64, Ordering::Release);
        }
    });
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        // Give the task time to be back in its wait (and the worker to
        // park, as a service idle between signals would).
        std::thread::sleep(Duration::from_micros(200));
        let before = woke.load(Ordering::Acquire);
        let raised = base.elapsed().as_nanos() as u64;
        // SAFETY: raising a signal this process handles (the
        // registration above) is a plain syscall.
        unsafe { libc::kill(libc::getpid(), libc::SIGUSR1) };
        let at = loop {
            let now = woke.load(Ordering::Acquire);
            if now != before {
                break now;
            }
            std::hint::spin_loop();
        };
        total += Duration::from_nanos(at.saturating_sub(raised));
    }
    waiter.join().expect("signal task failed");
    total
}

// -------------------------------------------------------------------- main

fn bench_all(c: &mut Criterion, p: &Peers) {
    let mut g = c.benchmark_group("joinset_spawn_join");
    g.bench_function("spindle_joinset", |b| {
        b.iter_custom(|i| spindle_joinset_spawn_join(&p.spindle, i))
    });
    g.bench_function("spindle_spawn_join", |b| {
        b.iter_custom(|i| spindle_spawn_join(&p.spindle, i))
    });
    g.bench_function("tokio_joinset", |b| {
        b.iter_custom(|i| tokio_joinset_spawn_join(&p.tokio, i))
    });
    g.bench_function("tokio_spawn_join", |b| {
        b.iter_custom(|i| tokio_spawn_join(&p.tokio, i))
    });
    g.finish();

    let mut g = c.benchmark_group("select_pingpong");
    g.bench_function("spindle_select", |b| {
        b.iter_custom(|i| spindle_pingpong(&p.spindle, i, true))
    });
    g.bench_function("spindle_recv", |b| {
        b.iter_custom(|i| spindle_pingpong(&p.spindle, i, false))
    });
    g.bench_function("tokio_select", |b| {
        b.iter_custom(|i| tokio_pingpong(&p.tokio, i, true))
    });
    g.bench_function("tokio_recv", |b| {
        b.iter_custom(|i| tokio_pingpong(&p.tokio, i, false))
    });
    g.finish();

    let mut g = c.benchmark_group("signal_delivery");
    g.sample_size(10);
    g.bench_function("spindle", |b| {
        b.iter_custom(|i| spindle_signal_delivery(&p.spindle, i))
    });
    g.finish();
}

fn main() {
    Peers::run_benches(bench_all);
}
