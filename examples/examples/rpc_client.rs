//! The flagship use of spindle: an RPC client whose every call runs under a
//! deadline that almost never fires.
//!
//! Client tasks call a simulated server (a pool of server tasks behind a
//! queue). Each call is wrapped in `with_deadline`: everything it blocks on
//! inside — the queue's mutex, the wait for the reply — fails with
//! `DeadlineExceeded` once the deadline passes, without a timeout being
//! threaded through each function. Most calls answer in about 100 µs and
//! cancel their deadline timer; a few hit a slow server and time out. The
//! call carries its deadline in the request (`current_deadline`), so that a
//! server drops the calls whose callers have given up instead of serving
//! them for nobody.
//!
//! `cargo run --release --example rpc_client` (add `-- --quick` for a short run)

use spindle::sync::{Condvar, Mutex};
use spindle::{Butex, WaitError};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The deadline of every call.
const DEADLINE: Duration = Duration::from_millis(5);

/// One pending call: the server stores the answer and wakes the caller.
struct Call {
    request: u64,
    /// The caller's deadline: past it, nobody waits for the answer.
    expires: Option<Instant>,
    answer: AtomicU64,
    /// 0 while pending, 1 once answered.
    done: Butex,
}

/// The simulated server: a queue and the tasks that serve it.
struct Server {
    queue: Mutex<VecDeque<Arc<Call>>>,
    ready: Condvar,
    /// Calls dropped unserved: their callers' deadlines had passed.
    dropped: AtomicU32,
}

impl Server {
    fn serve(&self, rng: &mut u64) {
        loop {
            let call = {
                let q = self.queue.lock().expect("no deadline in servers");
                let mut q = self
                    .ready
                    .wait_while(q, |q| q.is_empty())
                    .expect("no deadline in servers");
                q.pop_front().expect("not empty")
            };
            if call.request == u64::MAX {
                return; // shutdown
            }
            if call.expires.is_some_and(|e| Instant::now() >= e) {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            // Most requests take ~100 µs; one in 200 hits a slow path.
            let micros = if next(rng) % 200 == 0 {
                20_000
            } else {
                50 + next(rng) % 100
            };
            if spindle::usleep(micros).is_err() {
                return; // interrupted or stopped: this server is told to go
            }
            call.answer.store(call.request * 2, Ordering::Relaxed);
            call.done.value().store(1, Ordering::Release);
            call.done.wake_all();
        }
    }

    /// One RPC: enqueue, then wait for the answer. No timeout here: the
    /// caller's deadline scope bounds every wait.
    fn call(&self, request: u64) -> Result<u64, WaitError> {
        let call = Arc::new(Call {
            request,
            expires: spindle::current_deadline(),
            answer: AtomicU64::new(0),
            done: Butex::new(0),
        });
        self.queue.lock()?.push_back(call.clone());
        self.ready.notify_one();
        while call.done.value().load(Ordering::Acquire) == 0 {
            match call.done.wait(0, None) {
                Ok(()) | Err(WaitError::WouldBlock) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(call.answer.load(Ordering::Relaxed))
    }
}

fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn main() {
    spindle_examples::init_tracing();
    let quick = std::env::args().any(|a| a == "--quick");
    let (clients, calls_per_client, servers) = if quick {
        (64, 50, 64)
    } else {
        (200, 1000, 256)
    };

    let rt = spindle::Runtime::new().expect("start the runtime");
    let timer_before = spindle_timer::TimerThread::global().stats();
    let server = Arc::new(Server {
        queue: Mutex::new(VecDeque::new()),
        ready: Condvar::new(),
        dropped: AtomicU32::new(0),
    });
    let ok = Arc::new(AtomicU32::new(0));
    let late = Arc::new(AtomicU32::new(0));
    let start = Instant::now();

    let latencies = rt.block_on(|| {
        let server_tasks: Vec<_> = (0..servers)
            .map(|i| {
                let s = server.clone();
                spindle::spawn(move || s.serve(&mut (0x9E37_79B9 + i as u64)))
            })
            .collect();
        let client_tasks: Vec<_> = (0..clients)
            .map(|c| {
                let (s, ok, late) = (server.clone(), ok.clone(), late.clone());
                spindle::spawn(move || {
                    let mut lat = Vec::with_capacity(calls_per_client);
                    for i in 0..calls_per_client {
                        let req = (c * calls_per_client + i) as u64;
                        let t = Instant::now();
                        let r = spindle::with_deadline(t + DEADLINE, || s.call(req));
                        match r {
                            Ok(v) => {
                                assert_eq!(v, req * 2);
                                ok.fetch_add(1, Ordering::Relaxed);
                                lat.push(t.elapsed());
                            }
                            Err(WaitError::DeadlineExceeded) => {
                                late.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => panic!("call failed: {e}"),
                        }
                    }
                    lat
                })
            })
            .collect();
        let mut all: Vec<Duration> = client_tasks
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        // Stop the servers: one poison pill each.
        for _ in 0..servers {
            server.queue.lock().unwrap().push_back(Arc::new(Call {
                request: u64::MAX,
                expires: None,
                answer: AtomicU64::new(0),
                done: Butex::new(0),
            }));
            server.ready.notify_one();
        }
        for h in server_tasks {
            h.join().unwrap();
        }
        all.sort();
        all
    });

    let elapsed = start.elapsed();
    let total = clients * calls_per_client;
    assert!(!latencies.is_empty(), "no call was answered in time");
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    let timer = spindle_timer::TimerThread::global().stats();
    println!("spindle rpc_client: {clients} clients x {calls_per_client} calls, {servers} server tasks, {} workers", rt.workers());
    println!(
        "  {total} calls in {elapsed:.2?} ({:.0} calls/s): {} answered, {} past the {DEADLINE:?} deadline ({} of them dropped unserved)",
        total as f64 / elapsed.as_secs_f64(),
        ok.load(Ordering::Relaxed),
        late.load(Ordering::Relaxed),
        server.dropped.load(Ordering::Relaxed)
    );
    // An answer stored just as the deadline passes still counts (the
    // caller sees it before its wait can time out), and the latency includes
    // the caller's wait for its worker: the max may exceed the deadline.
    println!(
        "  latency of answered calls: p50 {:.1?}  p99 {:.1?}  max {:.1?}",
        pct(0.50),
        pct(0.99),
        latencies.last().copied().unwrap_or_default()
    );
    // Process-wide counts of the global timer: they include the watchdog's
    // periodic timer, and server sleeps that an idle worker ended itself
    // (it unschedules the timer and runs the task at the deadline).
    println!(
        "  global timer (call deadlines, server sleeps, housekeeping): {} armed, {} unscheduled, {} fired",
        timer.scheduled - timer_before.scheduled,
        timer.unscheduled - timer_before.unscheduled,
        timer.triggered - timer_before.triggered
    );
    let s = rt.stats();
    println!(
        "  runtime: {} tasks, {} switches, {} steals, {} parks, {} wake-ups",
        s.spawned, s.switches, s.steals, s.parks, s.wakeups
    );
    assert_eq!(
        ok.load(Ordering::Relaxed) + late.load(Ordering::Relaxed),
        total as u32
    );
}
