//! The flagship use of spindle: an RPC client whose every call runs under a
//! deadline that almost never fires.
//!
//! Client tasks call a simulated server: a pool of server tasks that take
//! requests from one bounded channel (`sync::mpsc::sync_channel`, shared
//! through a `sync::Mutex`) and answer each on its own
//! `sync::oneshot`. Each call is wrapped in `with_deadline`: everything it
//! blocks on inside (a full request queue, the wait for the reply) fails
//! with `DeadlineExceeded` once the deadline passes, without a timeout
//! being threaded through each function. Most calls answer in about
//! 100 µs and cancel their deadline timer; a few hit a slow server and time
//! out. The call carries its deadline in the request (`current_deadline`),
//! so that a server drops the calls whose callers have given up instead of
//! serving them for nobody. The tasks run in a `spindle::scope`, so they
//! borrow the channel and the counters instead of sharing them through
//! `Arc`s, and the servers end when the last request sender goes.
//!
//! `cargo run --release --example rpc_client` (add `-- --quick` for a short run)

use spindle::sync::mpsc::{self, Receiver, SyncSender};
use spindle::sync::{oneshot, Mutex};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The deadline of every call.
const DEADLINE: Duration = Duration::from_millis(5);

/// One call on its way to a server.
struct Request {
    request: u64,
    /// The caller's deadline: past it, nobody waits for the answer.
    expires: Option<Instant>,
    reply: oneshot::Sender<u64>,
}

/// Why a call got no answer.
#[derive(Debug)]
enum CallError {
    /// The caller's deadline passed first.
    DeadlineExceeded,
    /// The servers are gone.
    Disconnected,
}

/// Serves requests until every sender is gone. Servers take turns at the
/// channel's one receiver: the mutex suspends the others, and the one
/// holding it suspends in `recv`.
fn serve(requests: &Mutex<Receiver<Request>>, dropped: &AtomicU32, rng: &mut u64) {
    loop {
        let next = requests.lock().expect("no deadline in servers").recv();
        let Ok(call) = next else {
            return; // every sender is gone: the run is over
        };
        if call.expires.is_some_and(|e| Instant::now() >= e) {
            dropped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        // Most requests take ~100 µs; one in 200 hits a slow path.
        let micros = if next_random(rng) % 200 == 0 {
            20_000
        } else {
            50 + next_random(rng) % 100
        };
        if spindle::usleep(micros).is_err() {
            return; // interrupted or stopped: this server is told to go
        }
        // The caller may have given up meanwhile: then nobody reads it.
        let _ = call.reply.send(call.request * 2);
    }
}

/// One RPC: queue the request, then wait for the answer. No timeout here:
/// the caller's deadline scope bounds every wait.
fn call(requests: &SyncSender<Request>, request: u64) -> Result<u64, CallError> {
    let (reply, mut answer) = oneshot::channel();
    let sent = requests.send(Request {
        request,
        expires: spindle::current_deadline(),
        reply,
    });
    match sent {
        Ok(()) => {}
        Err(e) if e.is_deadline_exceeded() => return Err(CallError::DeadlineExceeded),
        Err(_) => return Err(CallError::Disconnected),
    }
    answer.recv().map_err(|e| {
        if e.is_deadline_exceeded() {
            CallError::DeadlineExceeded
        } else {
            CallError::Disconnected
        }
    })
}

fn next_random(x: &mut u64) -> u64 {
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
    let ok = AtomicU32::new(0);
    let late = AtomicU32::new(0);
    let dropped = AtomicU32::new(0);
    let start = Instant::now();

    let latencies = rt.block_on(|| {
        let (requests, incoming) = mpsc::sync_channel::<Request>(servers);
        let incoming = Mutex::new(incoming);
        let (ok, late, dropped, incoming) = (&ok, &late, &dropped, &incoming);
        let mut all: Vec<Duration> = spindle::scope(|s| {
            for i in 0..servers {
                s.spawn(move || serve(incoming, dropped, &mut (0x9E37_79B9 + i as u64)));
            }
            let client_tasks: Vec<_> = (0..clients)
                .map(|c| {
                    let requests = requests.clone();
                    s.spawn(move || {
                        let mut lat = Vec::with_capacity(calls_per_client);
                        for i in 0..calls_per_client {
                            let req = (c * calls_per_client + i) as u64;
                            let t = Instant::now();
                            match spindle::with_deadline(t + DEADLINE, || call(&requests, req)) {
                                Ok(v) => {
                                    assert_eq!(v, req * 2);
                                    ok.fetch_add(1, Ordering::Relaxed);
                                    lat.push(t.elapsed());
                                }
                                Err(CallError::DeadlineExceeded) => {
                                    late.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(e) => panic!("call failed: {e:?}"),
                            }
                        }
                        lat
                    })
                })
                .collect();
            // The clients hold their own senders: once they are done, the
            // servers see the channel close and end with the scope.
            drop(requests);
            client_tasks
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
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
        dropped.load(Ordering::Relaxed)
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
