//! The task toolkit's locks and channels: spindle against tokio, two
//! workers each. Every benchmark reports the time of one operation
//! (`iter_custom`, as in `runtime.rs`):
//!
//! - `rwlock_read_uncontended`: one task takes and drops a read guard in a
//!   loop. Per read.
//! - `rwlock_read_contended`: 4 tasks on the 2 workers do the same on one
//!   shared lock (no writer: the readers contend on its state word); the
//!   wall time over all their reads. Per read.
//! - `semaphore_uncontended`: one task acquires and releases a permit of a
//!   1-permit semaphore in a loop. Per acquire + release.
//! - `semaphore_contended_1`, `semaphore_contended_2`: 4 tasks on the 2
//!   workers do the same on one semaphore of 1 or 2 permits; the wall time
//!   over all their acquisitions. Per acquire + release.
//! - `channel_pingpong_bounded1`, `channel_pingpong_unbounded`: two tasks
//!   pass a token back and forth through two channels of bound 1 (spindle
//!   `sync_channel(1)`, tokio `channel(1)`) or unbounded. Per round trip.
//!   `benches/channels.sh` compares more peers, each in a fresh process.
//!
//! spindle's side runs in the body of `block_on` (a task) and tasks it
//! spawns; tokio's in `tokio::spawn`ed tasks (the future of tokio's
//! `block_on` runs on the calling thread, not on a worker), with
//! `tokio::sync::{RwLock, Semaphore, mpsc}`. Contended batches spawn their
//! tasks anew each batch (4 spawns per 400 000 operations).

mod common;

use common::Peers;
use criterion::{Criterion, SamplingMode};
use spindle_benches::workload::{full_batches, Placement};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// Tasks in a contended case.
const TASKS: u64 = 4;
/// Operations per contended batch, over all its tasks.
const CONTENDED_BATCH: u64 = 400_000;

/// Splits `n` operations over [`TASKS`] tasks.
fn shares(n: u64) -> impl Iterator<Item = u64> {
    (0..TASKS).map(move |i| n / TASKS + u64::from(i < n % TASKS))
}

/// Where each contended batch's tasks ran: all on one worker, or spread.
static SPINDLE_SPREAD: Placement = Placement::new();
static TOKIO_SPREAD: Placement = Placement::new();

/// What a contended task reports: the thread it ended on, when its loop
/// began and when it ended.
type Run = (ThreadId, Instant, Instant);

/// The time a contended batch took, from the first loop's start to the last
/// one's end (the spawns and the gate left out); records where it ran.
fn span(p: &Placement, runs: &[Run]) -> Duration {
    let first = runs[0].0;
    let other = runs.iter().map(|r| r.0).find(|&t| t != first);
    p.record(first, other.unwrap_or(first));
    let start = runs.iter().map(|r| r.1).min().expect("a task");
    let end = runs.iter().map(|r| r.2).max().expect("a task");
    end - start
}

/// How long the first contended task waits for a second worker to start
/// one of the others.
const SPREAD_WAIT: Duration = Duration::from_millis(10);

/// The start of a contended batch's tasks: spreads them over both workers.
/// A started spindle task never moves, and a loop that never blocks runs to
/// its end where it started, so a task spawned from a task would run its
/// loop on the spawner's worker before the idle one had woken to take any.
/// Here each task counts itself in and spins (holding its worker) until
/// one has started on another thread, or [`SPREAD_WAIT`] has passed; then
/// all yield until every task has started.
#[derive(Default)]
struct Gate {
    started: AtomicU64,
    first: Mutex<Option<ThreadId>>,
    spread: AtomicBool,
}

impl Gate {
    fn arrive(&self) {
        let me = std::thread::current().id();
        let mut first = self.first.lock().expect("gate lock");
        match *first {
            None => *first = Some(me),
            Some(t) if t != me => self.spread.store(true, Ordering::Release),
            Some(_) => {}
        }
        drop(first);
        self.started.fetch_add(1, Ordering::AcqRel);
    }

    fn spread_or_late(&self, since: Instant) -> bool {
        self.spread.load(Ordering::Acquire) || since.elapsed() > SPREAD_WAIT
    }

    fn all_started(&self) -> bool {
        self.started.load(Ordering::Acquire) >= TASKS
    }
}

fn spindle_gate(gate: &Gate) {
    gate.arrive();
    let since = Instant::now();
    while !gate.spread_or_late(since) {
        std::hint::spin_loop();
    }
    while !gate.all_started() {
        spindle::yield_now();
    }
}

async fn tokio_gate(gate: &Gate) {
    gate.arrive();
    let since = Instant::now();
    while !gate.spread_or_late(since) {
        std::hint::spin_loop();
    }
    while !gate.all_started() {
        tokio::task::yield_now().await;
    }
}

/// Runs `body(share)` in [`TASKS`] spindle tasks from a task, through the
/// [`Gate`]; the batch's [`span`].
fn spindle_contended<T: Send + Sync + 'static>(
    rt: &spindle::Runtime,
    n: u64,
    shared: T,
    body: fn(&T, u64),
) -> Duration {
    rt.block_on(move || {
        let shared = Arc::new(shared);
        let gate = Arc::new(Gate::default());
        let hs: Vec<_> = shares(n)
            .map(|m| {
                let (shared, gate) = (shared.clone(), gate.clone());
                spindle::spawn(move || {
                    spindle_gate(&gate);
                    let start = Instant::now();
                    body(&shared, m);
                    (std::thread::current().id(), start, Instant::now())
                })
            })
            .collect();
        let runs: Vec<_> = hs
            .into_iter()
            .map(|h| h.join().expect("spindle task failed"))
            .collect();
        span(&SPINDLE_SPREAD, &runs)
    })
}

/// Runs `body(shared, share)` in [`TASKS`] tokio tasks, through the
/// [`Gate`]; the batch's [`span`].
fn tokio_contended<T, F, Fut>(rt: &tokio::runtime::Runtime, n: u64, shared: T, body: F) -> Duration
where
    T: Send + Sync + 'static,
    F: Fn(Arc<T>, u64) -> Fut + Copy + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    rt.block_on(async move {
        let shared = Arc::new(shared);
        let gate = Arc::new(Gate::default());
        let hs: Vec<_> = shares(n)
            .map(|m| {
                let (shared, gate) = (shared.clone(), gate.clone());
                tokio::spawn(async move {
                    tokio_gate(&gate).await;
                    let start = Instant::now();
                    body(shared, m).await;
                    (std::thread::current().id(), start, Instant::now())
                })
            })
            .collect();
        let mut runs = Vec::new();
        for h in hs {
            runs.push(h.await.expect("tokio task failed"));
        }
        span(&TOKIO_SPREAD, &runs)
    })
}

// ------------------------------------------------------------------ rwlock

fn spindle_read_loop(lock: &spindle::sync::RwLock<u64>, n: u64) {
    for _ in 0..n {
        let g = lock.read().expect("spindle read");
        black_box(*g);
    }
}

async fn tokio_read_loop(lock: &tokio::sync::RwLock<u64>, n: u64) {
    for _ in 0..n {
        let g = lock.read().await;
        black_box(*g);
    }
}

fn spindle_rwlock_uncontended(rt: &spindle::Runtime, iters: u64) -> Duration {
    rt.block_on(move || {
        let lock = spindle::sync::RwLock::new(7u64);
        let start = Instant::now();
        spindle_read_loop(&lock, iters);
        start.elapsed()
    })
}

fn tokio_rwlock_uncontended(rt: &tokio::runtime::Runtime, iters: u64) -> Duration {
    rt.block_on(async move {
        tokio::spawn(async move {
            let lock = tokio::sync::RwLock::new(7u64);
            let start = Instant::now();
            tokio_read_loop(&lock, iters).await;
            start.elapsed()
        })
        .await
        .expect("tokio task failed")
    })
}

fn spindle_rwlock_contended(rt: &spindle::Runtime, iters: u64) -> Duration {
    full_batches(iters, CONTENDED_BATCH, |n| {
        spindle_contended(rt, n, spindle::sync::RwLock::new(7u64), |l, m| {
            spindle_read_loop(l, m)
        })
    })
}

fn tokio_rwlock_contended(rt: &tokio::runtime::Runtime, iters: u64) -> Duration {
    full_batches(iters, CONTENDED_BATCH, |n| {
        tokio_contended(rt, n, tokio::sync::RwLock::new(7u64), |l, m| async move {
            tokio_read_loop(&l, m).await
        })
    })
}

// --------------------------------------------------------------- semaphore

fn spindle_acquire_loop(sem: &spindle::sync::Semaphore, n: u64) {
    for _ in 0..n {
        let p = sem.acquire().expect("spindle acquire");
        black_box(&p);
    }
}

async fn tokio_acquire_loop(sem: &tokio::sync::Semaphore, n: u64) {
    for _ in 0..n {
        let p = sem.acquire().await.expect("tokio semaphore closed");
        black_box(&p);
    }
}

fn spindle_semaphore_uncontended(rt: &spindle::Runtime, iters: u64) -> Duration {
    rt.block_on(move || {
        let sem = spindle::sync::Semaphore::new(1);
        let start = Instant::now();
        spindle_acquire_loop(&sem, iters);
        start.elapsed()
    })
}

fn tokio_semaphore_uncontended(rt: &tokio::runtime::Runtime, iters: u64) -> Duration {
    rt.block_on(async move {
        tokio::spawn(async move {
            let sem = tokio::sync::Semaphore::new(1);
            let start = Instant::now();
            tokio_acquire_loop(&sem, iters).await;
            start.elapsed()
        })
        .await
        .expect("tokio task failed")
    })
}

fn spindle_semaphore_contended(rt: &spindle::Runtime, permits: usize, iters: u64) -> Duration {
    full_batches(iters, CONTENDED_BATCH, |n| {
        spindle_contended(rt, n, spindle::sync::Semaphore::new(permits), |s, m| {
            spindle_acquire_loop(s, m)
        })
    })
}

fn tokio_semaphore_contended(rt: &tokio::runtime::Runtime, permits: usize, iters: u64) -> Duration {
    full_batches(iters, CONTENDED_BATCH, |n| {
        tokio_contended(
            rt,
            n,
            tokio::sync::Semaphore::new(permits),
            |s, m| async move { tokio_acquire_loop(&s, m).await },
        )
    })
}

// ---------------------------------------------------------------- channels

/// Ping-pong over two spindle channels made by `make`, sent on by `send`.
fn spindle_pingpong<S: Send + 'static>(
    rt: &spindle::Runtime,
    iters: u64,
    make: fn() -> (S, spindle::sync::mpsc::Receiver<u64>),
    send: fn(&S, u64),
) -> Duration {
    rt.block_on(move || {
        let recv = |r: &spindle::sync::mpsc::Receiver<u64>| {
            r.recv().unwrap_or_else(|_| panic!("spindle sender gone"))
        };
        let (to_pong, pong_rx) = make();
        let (to_ping, ping_rx) = make();
        let start = Instant::now();
        let pong = spindle::spawn(move || {
            for _ in 0..iters {
                send(&to_ping, recv(&pong_rx));
            }
        });
        let ping = spindle::spawn(move || {
            for i in 0..iters {
                send(&to_pong, i);
                assert_eq!(recv(&ping_rx), i);
            }
        });
        ping.join().expect("spindle task failed");
        pong.join().expect("spindle task failed");
        start.elapsed()
    })
}

fn spindle_pingpong_bounded1(rt: &spindle::Runtime, iters: u64) -> Duration {
    spindle_pingpong(
        rt,
        iters,
        || spindle::sync::mpsc::sync_channel(1),
        |s, v| {
            s.send(v)
                .unwrap_or_else(|_| panic!("spindle receiver gone"))
        },
    )
}

fn spindle_pingpong_unbounded(rt: &spindle::Runtime, iters: u64) -> Duration {
    spindle_pingpong(rt, iters, spindle::sync::mpsc::channel, |s, v| {
        s.send(v)
            .unwrap_or_else(|_| panic!("spindle receiver gone"))
    })
}

fn tokio_pingpong_bounded1(rt: &tokio::runtime::Runtime, iters: u64) -> Duration {
    use tokio::sync::mpsc::channel;
    rt.block_on(async move {
        let (to_pong, mut pong_rx) = channel::<u64>(1);
        let (to_ping, mut ping_rx) = channel::<u64>(1);
        let start = Instant::now();
        let pong = tokio::spawn(async move {
            for _ in 0..iters {
                let v = pong_rx.recv().await.expect("ping gone");
                to_ping.send(v).await.expect("ping gone");
            }
        });
        let ping = tokio::spawn(async move {
            for i in 0..iters {
                to_pong.send(i).await.expect("pong gone");
                assert_eq!(ping_rx.recv().await, Some(i));
            }
        });
        ping.await.expect("tokio task failed");
        pong.await.expect("tokio task failed");
        start.elapsed()
    })
}

fn tokio_pingpong_unbounded(rt: &tokio::runtime::Runtime, iters: u64) -> Duration {
    use tokio::sync::mpsc::unbounded_channel;
    rt.block_on(async move {
        let (to_pong, mut pong_rx) = unbounded_channel::<u64>();
        let (to_ping, mut ping_rx) = unbounded_channel::<u64>();
        let start = Instant::now();
        let pong = tokio::spawn(async move {
            for _ in 0..iters {
                let v = pong_rx.recv().await.expect("ping gone");
                to_ping.send(v).expect("ping gone");
            }
        });
        let ping = tokio::spawn(async move {
            for i in 0..iters {
                to_pong.send(i).expect("pong gone");
                assert_eq!(ping_rx.recv().await, Some(i));
            }
        });
        ping.await.expect("tokio task failed");
        pong.await.expect("tokio task failed");
        start.elapsed()
    })
}

// -------------------------------------------------------------------- main

fn bench_all(c: &mut Criterion, p: &Peers) {
    type Case<'a> = (&'a str, Box<dyn Fn(u64) -> Duration + 'a>);
    let benches: [(&str, [Case<'_>; 2]); 7] = [
        (
            "rwlock_read_uncontended",
            [
                (
                    "spindle",
                    Box::new(|i| spindle_rwlock_uncontended(&p.spindle, i)),
                ),
                ("tokio", Box::new(|i| tokio_rwlock_uncontended(&p.tokio, i))),
            ],
        ),
        (
            "rwlock_read_contended",
            [
                (
                    "spindle",
                    Box::new(|i| spindle_rwlock_contended(&p.spindle, i)),
                ),
                ("tokio", Box::new(|i| tokio_rwlock_contended(&p.tokio, i))),
            ],
        ),
        (
            "semaphore_uncontended",
            [
                (
                    "spindle",
                    Box::new(|i| spindle_semaphore_uncontended(&p.spindle, i)),
                ),
                (
                    "tokio",
                    Box::new(|i| tokio_semaphore_uncontended(&p.tokio, i)),
                ),
            ],
        ),
        (
            "semaphore_contended_1",
            [
                (
                    "spindle",
                    Box::new(|i| spindle_semaphore_contended(&p.spindle, 1, i)),
                ),
                (
                    "tokio",
                    Box::new(|i| tokio_semaphore_contended(&p.tokio, 1, i)),
                ),
            ],
        ),
        (
            "semaphore_contended_2",
            [
                (
                    "spindle",
                    Box::new(|i| spindle_semaphore_contended(&p.spindle, 2, i)),
                ),
                (
                    "tokio",
                    Box::new(|i| tokio_semaphore_contended(&p.tokio, 2, i)),
                ),
            ],
        ),
        (
            "channel_pingpong_bounded1",
            [
                (
                    "spindle",
                    Box::new(|i| spindle_pingpong_bounded1(&p.spindle, i)),
                ),
                ("tokio", Box::new(|i| tokio_pingpong_bounded1(&p.tokio, i))),
            ],
        ),
        (
            "channel_pingpong_unbounded",
            [
                (
                    "spindle",
                    Box::new(|i| spindle_pingpong_unbounded(&p.spindle, i)),
                ),
                ("tokio", Box::new(|i| tokio_pingpong_unbounded(&p.tokio, i))),
            ],
        ),
    ];
    for (name, cases) in benches {
        let mut g = c.benchmark_group(name);
        // Flat sampling: the contended cases run whole batches (see
        // `full_batches`), so every sample gets the same count.
        g.sampling_mode(SamplingMode::Flat);
        for (peer, f) in cases {
            let spread = match peer {
                "spindle" => &SPINDLE_SPREAD,
                _ => &TOKIO_SPREAD,
            };
            let before = spread.counts();
            g.bench_function(peer, |b| b.iter_custom(&f));
            let (one, two) = spread.counts();
            if (one, two) != before {
                eprintln!(
                    "[{name}] {peer}: {} batches on one worker, {} on two",
                    one - before.0,
                    two - before.1
                );
            }
        }
        g.finish();
    }
}

fn main() {
    Peers::run_benches(bench_all);
}
