//! Cold-start benchmarks, one case per process (`benches/cold_start.sh` runs
//! them beside the Go peer, `peers/cold_start.go`).
//!
//! `cold_start <system> <case> <n>`, system `spindle` or `tokio`:
//! - `sleepers`: from the plain main thread, spawn `n` tasks on a fresh
//!   2-worker runtime, each sleeping 1 s, and join them all. Prints the wall
//!   time from the first spawn to the last join, and the growth of the
//!   resident set from before the runtime was built to the moment every
//!   task had started, per task.
//! - `spawn_join_task` / `spawn_join_thread`: spawn `n` empty tasks, from a
//!   task or from the main thread, then join them; prints ns per task.
//! - `spawn_wait_task` / `spawn_wait_thread`: the same with detached tasks
//!   that count down a shared counter, waited for by polling it every
//!   100 µs: the shape of Go's `sync.WaitGroup`, which keeps no handle (and
//!   so no task record) alive for the spawner.
//!
//! Output is one line: `case=… system=… n=… wall_ms=… ns_per_task=… kib_per_task=…`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

static STARTED: AtomicU64 = AtomicU64::new(0);
/// Tasks of a `spawn_wait` case not yet ended.
static LEFT: AtomicU64 = AtomicU64::new(0);
/// How often a `spawn_wait` spawner looks at [`LEFT`].
const POLL: Duration = Duration::from_micros(100);

/// Counts a `spawn_wait` task's end.
fn done() {
    LEFT.fetch_sub(1, Ordering::Release);
}
const NAP: Duration = Duration::from_secs(1);

fn rss() -> u64 {
    spindle_benches::sleepers::rss_bytes().expect("VmRSS")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage =
        "usage: cold_start <spindle|tokio> <sleepers|spawn_join_task|spawn_join_thread> <n>";
    if args.len() != 4 {
        eprintln!("{usage}");
        std::process::exit(2);
    }
    let n: u64 = args[3].parse().unwrap_or_else(|_| {
        eprintln!("{usage}");
        std::process::exit(2)
    });
    let base = rss();
    if std::env::var_os("COLD_START_TRACE").is_some() {
        // Progress to stderr every 250 ms: tasks started so far.
        std::thread::spawn(|| {
            let t0 = Instant::now();
            loop {
                std::thread::sleep(Duration::from_millis(250));
                eprintln!(
                    "{:>6.0} ms: {} started",
                    t0.elapsed().as_secs_f64() * 1e3,
                    STARTED.load(Ordering::Relaxed)
                );
            }
        });
    }
    let (wall, peak) = match (args[1].as_str(), args[2].as_str()) {
        ("spindle", case) => spindle_case(case, n),
        ("tokio", case) => tokio_case(case, n),
        _ => {
            eprintln!("{usage}");
            std::process::exit(2)
        }
    };
    let kib = match peak {
        Some(p) => format!("{:.2}", p.saturating_sub(base) as f64 / n as f64 / 1024.0),
        None => "-".into(),
    };
    println!(
        "case={} system={} n={n} wall_ms={:.1} ns_per_task={:.0} kib_per_task={kib}",
        args[2],
        args[1],
        wall.as_secs_f64() * 1e3,
        wall.as_nanos() as f64 / n as f64,
    );
}

/// Waits until every sleeper has started; returns the resident set then.
/// Prints when that was, and when the last spawn returned, to stderr.
fn peak_when_started(n: u64, t0: Instant, spawned: Duration) -> u64 {
    while STARTED.load(Ordering::Acquire) < n {
        std::thread::sleep(Duration::from_millis(1));
    }
    eprintln!(
        "spawned in {:.1} ms, all started at {:.1} ms",
        spawned.as_secs_f64() * 1e3,
        t0.elapsed().as_secs_f64() * 1e3
    );
    rss()
}

fn spindle_case(case: &str, n: u64) -> (Duration, Option<u64>) {
    let rt = spindle::Runtime::builder()
        .workers(2)
        .build()
        .expect("spindle runtime");
    match case {
        "sleepers" => {
            let t0 = Instant::now();
            let handles: Vec<_> = (0..n)
                .map(|_| {
                    rt.spawn(|| {
                        STARTED.fetch_add(1, Ordering::Release);
                        spindle::sleep(NAP).expect("sleep");
                    })
                })
                .collect();
            let peak = peak_when_started(n, t0, t0.elapsed());
            for h in handles {
                h.join().expect("join");
            }
            (t0.elapsed(), Some(peak))
        }
        "spawn_join_thread" => {
            let t0 = Instant::now();
            let handles: Vec<_> = (0..n)
                .map(|_| rt.spawn(|| std::hint::black_box(())))
                .collect();
            for h in handles {
                h.join().expect("join");
            }
            (t0.elapsed(), None)
        }
        "spawn_join_task" => {
            let wall = rt
                .spawn(move || {
                    let t0 = Instant::now();
                    let handles: Vec<_> = (0..n)
                        .map(|_| spindle::spawn(|| std::hint::black_box(())))
                        .collect();
                    for h in handles {
                        h.join().expect("join");
                    }
                    t0.elapsed()
                })
                .join()
                .expect("join");
            (wall, None)
        }
        "spawn_wait_thread" => {
            LEFT.store(n, Ordering::Relaxed);
            let t0 = Instant::now();
            for _ in 0..n {
                drop(rt.spawn(done));
            }
            while LEFT.load(Ordering::Acquire) > 0 {
                std::thread::sleep(POLL);
            }
            (t0.elapsed(), None)
        }
        "spawn_wait_task" => {
            LEFT.store(n, Ordering::Relaxed);
            let wall = rt
                .spawn(move || {
                    let t0 = Instant::now();
                    for _ in 0..n {
                        drop(spindle::spawn(done));
                    }
                    while LEFT.load(Ordering::Acquire) > 0 {
                        spindle::sleep(POLL).expect("sleep");
                    }
                    t0.elapsed()
                })
                .join()
                .expect("join");
            (wall, None)
        }
        other => {
            eprintln!("unknown case {other}");
            std::process::exit(2)
        }
    }
}

fn tokio_case(case: &str, n: u64) -> (Duration, Option<u64>) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    match case {
        "sleepers" => {
            let t0 = Instant::now();
            let handles: Vec<_> = (0..n)
                .map(|_| {
                    rt.spawn(async {
                        STARTED.fetch_add(1, Ordering::Release);
                        tokio::time::sleep(NAP).await;
                    })
                })
                .collect();
            let peak = peak_when_started(n, t0, t0.elapsed());
            rt.block_on(async {
                for h in handles {
                    h.await.expect("join");
                }
            });
            (t0.elapsed(), Some(peak))
        }
        "spawn_join_thread" => {
            let t0 = Instant::now();
            let handles: Vec<_> = (0..n)
                .map(|_| rt.spawn(async { std::hint::black_box(()) }))
                .collect();
            rt.block_on(async {
                for h in handles {
                    h.await.expect("join");
                }
            });
            (t0.elapsed(), None)
        }
        "spawn_join_task" => {
            let wall = rt.block_on(async move {
                tokio::spawn(async move {
                    let t0 = Instant::now();
                    let handles: Vec<_> = (0..n)
                        .map(|_| tokio::spawn(async { std::hint::black_box(()) }))
                        .collect();
                    for h in handles {
                        h.await.expect("join");
                    }
                    t0.elapsed()
                })
                .await
                .expect("join")
            });
            (wall, None)
        }
        "spawn_wait_thread" => {
            LEFT.store(n, Ordering::Relaxed);
            let t0 = Instant::now();
            for _ in 0..n {
                drop(rt.spawn(async { done() }));
            }
            while LEFT.load(Ordering::Acquire) > 0 {
                std::thread::sleep(POLL);
            }
            (t0.elapsed(), None)
        }
        "spawn_wait_task" => {
            LEFT.store(n, Ordering::Relaxed);
            let wall = rt.block_on(async move {
                tokio::spawn(async move {
                    let t0 = Instant::now();
                    for _ in 0..n {
                        drop(tokio::spawn(async { done() }));
                    }
                    while LEFT.load(Ordering::Acquire) > 0 {
                        tokio::time::sleep(POLL).await;
                    }
                    t0.elapsed()
                })
                .await
                .expect("join")
            });
            (wall, None)
        }
        other => {
            eprintln!("unknown case {other}");
            std::process::exit(2)
        }
    }
}
