//! CPU per sleep: `n` tasks each looping over sleeps of `d` for `secs`
//! seconds on a 2-worker runtime; prints the process's CPU time (user +
//! system, `getrusage`) per completed sleep, the share of one core that is,
//! and how late the sleeps ended (p50 / p99, each sample the time from the
//! sleep's deadline to the task running again).
//!
//! `sleep_cpu <spindle|spindle-nospin|tokio|may|threads> <n> <d_us> <secs>`;
//! `spindle-nospin` is spindle with `sleep_spin(0)`, `may` a coroutine per
//! task on may's 2 workers. `threads` runs one OS thread per task
//! (`std::thread::sleep`). `benches/sleep_cpu.sh` runs the
//! loads of `docs/benchmarks.md` beside Go (`peers/sleep_cpu.go`).
//!
//! `SLEEP_CPU_COALESCE_US=n` starts spindle's timer thread with
//! `TimerOptions::coalesce` of n µs instead of the default.
//!
//! Output is one line: `system=… n=… d_us=… sleeps=… cpu_us_per_sleep=…
//! cores=… late_p50_us=… late_p99_us=…`.

use spindle_benches::sleepers::process_cpu_time;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Lateness samples kept in all, shared out over the tasks: each keeps the
/// first `SAMPLES / n` (at least [`MIN_SAMPLES_PER_TASK`]) of the sleeps that
/// end in the measured span. A lone sleeper keeps every one, so its p99 is
/// one of thousands of samples, not of a few dozen.
const SAMPLES: usize = 100_000;
/// The fewest lateness samples a task keeps, however many tasks there are.
const MIN_SAMPLES_PER_TASK: usize = 64;
/// How long the load runs before it is measured: the spawns' burst and the
/// first round of sleeps are over by then.
const SETTLE: Duration = Duration::from_secs(1);
/// Sleeps completed, by every task.
static COMPLETED: AtomicU64 = AtomicU64::new(0);
/// Set once the load has settled: only sleeps that end after it are sampled
/// (not the spawns' burst and the first round).
static MEASURING: AtomicBool = AtomicBool::new(false);
/// Lateness samples each task keeps (see [`SAMPLES`]); set before a task runs.
static SAMPLES_PER_TASK: AtomicU64 = AtomicU64::new(MIN_SAMPLES_PER_TASK as u64);

/// What one task measured: lateness samples in ns.
#[derive(Default)]
struct Tally {
    late: Vec<u64>,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: sleep_cpu <spindle|spindle-nospin|tokio|may|threads> <n> <d_us> <secs>";
    if args.len() != 5 {
        eprintln!("{usage}");
        std::process::exit(2);
    }
    let parse = |s: &str| -> u64 {
        s.parse().unwrap_or_else(|_| {
            eprintln!("{usage}");
            std::process::exit(2)
        })
    };
    let (n, d, secs) = (
        parse(&args[2]),
        Duration::from_micros(parse(&args[3])),
        parse(&args[4]),
    );
    let per_task = (SAMPLES / n.max(1) as usize).max(MIN_SAMPLES_PER_TASK);
    SAMPLES_PER_TASK.store(per_task as u64, Ordering::Relaxed);
    let stop = Arc::new(AtomicBool::new(false));
    let tallies = Arc::new(Mutex::new(Vec::<Tally>::new()));
    let run = Duration::from_secs(secs);
    let (cpu, wall, sleeps) = match args[1].as_str() {
        "spindle" | "spindle-nospin" => {
            if let Some(us) = std::env::var("SLEEP_CPU_COALESCE_US")
                .ok()
                .and_then(|v| v.parse().ok())
            {
                spindle_timer::TimerThread::configure_global({
                    let mut o = spindle_timer::TimerOptions::default();
                    o.coalesce = Duration::from_micros(us);
                    o
                })
                .expect("timer options");
            }
            let mut b = spindle::Runtime::builder().workers(2);
            if args[1] == "spindle-nospin" {
                b = b.sleep_spin(Duration::ZERO);
            }
            let rt = b.build().expect("spindle runtime");
            let handles: Vec<_> = (0..n)
                .map(|_| {
                    let (stop, tallies) = (stop.clone(), tallies.clone());
                    rt.spawn(move || {
                        sleep_until_stopped(&stop, &tallies, d, |d| {
                            spindle::sleep(d).expect("sleep")
                        })
                    })
                })
                .collect();
            let m = measure(run, &stop);
            for h in handles {
                h.join().expect("join");
            }
            m
        }
        "tokio" => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("tokio runtime");
            let handles: Vec<_> = (0..n)
                .map(|_| {
                    let (stop, tallies) = (stop.clone(), tallies.clone());
                    rt.spawn(async move {
                        let mut t = Tally::default();
                        while !stop.load(Ordering::Relaxed) {
                            let deadline = Instant::now() + d;
                            tokio::time::sleep(d).await;
                            note(&mut t, deadline);
                        }
                        tallies.lock().unwrap().push(t);
                    })
                })
                .collect();
            let m = measure(run, &stop);
            rt.block_on(async {
                for h in handles {
                    h.await.expect("join");
                }
            });
            m
        }
        "may" => {
            may::config().set_workers(2);
            let handles: Vec<_> = (0..n)
                .map(|_| {
                    let (stop, tallies) = (stop.clone(), tallies.clone());
                    // SAFETY: may's spawn is unsafe because a coroutine may
                    // move between worker threads and so see another
                    // thread's thread-local storage. This loop holds none
                    // across a switch: it reads the clock and atomics, and
                    // suspends only in may's own sleep.
                    unsafe {
                        may::coroutine::spawn(move || {
                            sleep_until_stopped(&stop, &tallies, d, may::coroutine::sleep)
                        })
                    }
                })
                .collect();
            let m = measure(run, &stop);
            for h in handles {
                h.join().expect("join");
            }
            m
        }
        "threads" => {
            let handles: Vec<_> = (0..n)
                .map(|_| {
                    let (stop, tallies) = (stop.clone(), tallies.clone());
                    std::thread::Builder::new()
                        .stack_size(64 * 1024)
                        .spawn(move || sleep_until_stopped(&stop, &tallies, d, std::thread::sleep))
                        .expect("thread")
                })
                .collect();
            let m = measure(run, &stop);
            for h in handles {
                h.join().expect("join");
            }
            m
        }
        _ => {
            eprintln!("{usage}");
            std::process::exit(2)
        }
    };
    let tallies = tallies.lock().unwrap();
    let mut late: Vec<u64> = tallies
        .iter()
        .flat_map(|t| t.late.iter().copied())
        .collect();
    late.sort_unstable();
    let pct = |p: f64| {
        late.get(((late.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or(0)
    };
    println!(
        "system={} n={n} d_us={} sleeps={sleeps} cpu_us_per_sleep={:.2} cores={:.3} late_p50_us={:.1} late_p99_us={:.1}",
        args[1],
        d.as_micros(),
        cpu.as_secs_f64() * 1e6 / sleeps.max(1) as f64,
        cpu.as_secs_f64() / wall.as_secs_f64(),
        pct(0.5) as f64 / 1e3,
        pct(0.99) as f64 / 1e3,
    );
}

/// A sleeping task's or thread's loop (`sleep` is its system's sleep):
/// sleeps of `d` noted one by one until `stop`, then its tally kept.
fn sleep_until_stopped(
    stop: &AtomicBool,
    tallies: &Mutex<Vec<Tally>>,
    d: Duration,
    sleep: impl Fn(Duration),
) {
    let mut t = Tally::default();
    while !stop.load(Ordering::Relaxed) {
        let deadline = Instant::now() + d;
        sleep(d);
        note(&mut t, deadline);
    }
    tallies.lock().unwrap().push(t);
}

/// Counts a sleep that was due at `deadline` and, once the load has settled,
/// samples how late it ended.
fn note(t: &mut Tally, deadline: Instant) {
    let late = Instant::now().saturating_duration_since(deadline);
    COMPLETED.fetch_add(1, Ordering::Relaxed);
    if MEASURING.load(Ordering::Relaxed)
        && (t.late.len() as u64) < SAMPLES_PER_TASK.load(Ordering::Relaxed)
    {
        t.late.push(late.as_nanos() as u64);
    }
}

/// Lets the load run for [`SETTLE`], then measures the process's CPU time
/// and the sleeps completed over `run`; then tells the tasks to stop.
/// Returns (cpu, wall, sleeps) of the measured span.
fn measure(run: Duration, stop: &AtomicBool) -> (Duration, Duration, u64) {
    std::thread::sleep(SETTLE);
    MEASURING.store(true, Ordering::Relaxed);
    let (c0, t0, s0) = (
        process_cpu_time(),
        Instant::now(),
        COMPLETED.load(Ordering::Relaxed),
    );
    std::thread::sleep(run);
    let (c1, t1, s1) = (
        process_cpu_time(),
        Instant::now(),
        COMPLETED.load(Ordering::Relaxed),
    );
    stop.store(true, Ordering::Relaxed);
    (c1 - c0, t1 - t0, s1 - s0)
}
