//! Channel benchmarks, one case per process (`benches/channels.sh` runs them
//! beside the Go peer, `peers/channels.go`).
//!
//! `channels <system> <case> <n> [budget_ms]`, system one of:
//! - `spindle`: tasks on a 2-worker runtime, `spindle::sync::mpsc`;
//! - `tokio`: tasks on a multi-thread runtime with 2 workers,
//!   `tokio::sync::mpsc`;
//! - `may`: coroutines on 2 workers, `may::sync::mpsc` (unbounded only);
//! - `crossbeam`: `crossbeam-channel` between std threads;
//! - `std`: `std::sync::mpsc` between std threads.
//!
//! The runtimes' tasks are spawned from a task (spindle: the body of
//! `block_on`; tokio: a `tokio::spawn`ed task, since the future of tokio's
//! `block_on` runs on the calling thread; may: a coroutine), the threads'
//! from the main thread.
//!
//! Cases:
//! - `pingpong_bounded1`, `pingpong_bounded0`, `pingpong_unbounded`: two
//!   tasks (threads) pass a token back and forth through two channels of
//!   that kind (bound 1, bound 0 = rendezvous, unbounded), `n` round trips
//!   or `budget_ms` (default 3000) of them, whichever ends first; prints ns
//!   per round trip. The clock runs in the pinging task.
//! - `oneway_1p`, `oneway_4p`: 1 or 4 producers send `n` `u64`s in all
//!   (`n / producers` each) through one unbounded channel to one consumer,
//!   which sums them (the sum is checked); prints millions of messages per
//!   second, from before the first spawn to the consumer's last receive.
//!
//! Output is one line: `case=… system=… n=… value=… unit=… split=…`, `unit`
//! `ns/rt` or `M/s`; `split` says whether the two sides of a ping-pong
//! ended on two threads (1) or one (0), `-` where it does not apply. A case
//! the system has no channel for prints `value=-` (tokio and may have no
//! rendezvous channel, may no bounded one).

use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// How often the pinging side looks at the clock, in round trips.
const CLOCK_EVERY: u64 = 256;

#[derive(Clone, Copy)]
enum Kind {
    Bounded1,
    Bounded0,
    Unbounded,
}

#[derive(Clone, Copy)]
enum Case {
    PingPong(Kind),
    /// Two tasks hand a turn back and forth through one butex-like word
    /// (spindle: `Butex`; tokio: a pair of `Notify`; the floor: one atomic
    /// both threads spin on).
    ButexPingPong,
    OneWay {
        producers: u64,
    },
}

/// What a case measured.
enum Outcome {
    /// Round trips done, the time they took, and whether the two sides
    /// ended on two threads (`None`: not known).
    RoundTrips(u64, Duration, Option<bool>),
    /// Messages received and the time they took.
    Messages(u64, Duration),
    /// The system has no channel of this kind.
    Unsupported,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: channels \
                 <spindle|spindle_thread|spindle_same|spindle_split|tokio|may|crossbeam|std|floor> \
                 <pingpong_bounded1|pingpong_bounded0|pingpong_unbounded|pingpong_butex|oneway_1p|oneway_4p> \
                 <n> [budget_ms]";
    let fail = || -> ! {
        eprintln!("{usage}");
        std::process::exit(2)
    };
    if !(4..=5).contains(&args.len()) {
        fail();
    }
    let case = match args[2].as_str() {
        "pingpong_bounded1" => Case::PingPong(Kind::Bounded1),
        "pingpong_bounded0" => Case::PingPong(Kind::Bounded0),
        "pingpong_unbounded" => Case::PingPong(Kind::Unbounded),
        "pingpong_butex" => Case::ButexPingPong,
        "oneway_1p" => Case::OneWay { producers: 1 },
        "oneway_4p" => Case::OneWay { producers: 4 },
        _ => fail(),
    };
    let n: u64 = args[3].parse().unwrap_or_else(|_| fail());
    let budget = match args.get(4) {
        Some(ms) => Duration::from_millis(ms.parse().unwrap_or_else(|_| fail())),
        None => Duration::from_secs(3),
    };
    if n == 0 {
        fail();
    }
    let outcome = match args[1].as_str() {
        "spindle" => spindle_arm::run(spindle_arm::From::Task, case, n, budget),
        "spindle_thread" => spindle_arm::run(spindle_arm::From::Thread, case, n, budget),
        "spindle_same" => spindle_arm::run(spindle_arm::From::Worker0, case, n, budget),
        "spindle_split" => spindle_arm::run(spindle_arm::From::Split, case, n, budget),
        "floor" => floor_arm::run(case, n, budget),
        "tokio" => tokio_arm::run(case, n, budget),
        "may" => may_arm::run(case, n, budget),
        "crossbeam" => crossbeam_arm::run(case, n, budget),
        "std" => std_arm::run(case, n, budget),
        _ => fail(),
    };
    let (n, value, unit, split) = match outcome {
        Outcome::RoundTrips(done, t, split) => (
            done,
            format!("{:.1}", t.as_nanos() as f64 / done as f64),
            "ns/rt",
            split.map_or("-", |s| if s { "1" } else { "0" }),
        ),
        Outcome::Messages(done, t) => (
            done,
            format!("{:.2}", done as f64 / t.as_secs_f64() / 1e6),
            "M/s",
            "-",
        ),
        Outcome::Unsupported => (n, "-".into(), "-", "-"),
    };
    // spindle's parks and wake-ups per operation (round trip or message):
    // a cross-worker hand-off that finds its worker parked pays a futex
    // wake, which is most of its cost.
    let idle = match spindle_arm::IDLE.get() {
        Some(&(parks, wakeups)) if n > 0 => format!(
            " parks_per_op={:.4} wakeups_per_op={:.4}",
            parks as f64 / n as f64,
            wakeups as f64 / n as f64
        ),
        _ => String::new(),
    };
    println!(
        "case={} system={} n={n} value={value} unit={unit} split={split}{idle}",
        args[2], args[1]
    );
}

// ------------------------------------------------------------------ shapes
//
// The blocking systems (spindle, may, threads) share one shape for each
// case, generic over how a channel is made, how a value is sent and
// received, and how a task is spawned and joined: the closures are
// monomorphised, so each system runs its own straight-line loop.

/// Starts `f` as a task (coroutine, thread) and returns how to join it.
trait Spawn {
    fn go<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Box<dyn FnOnce() -> T>;
}

/// The pinging side: sends `1, 2, …` and expects each back, for `n` round
/// trips or until `budget` has passed; then sends 0 (the end).
fn ping<S, R>(
    n: u64,
    budget: Duration,
    tx: &S,
    rx: &R,
    send: impl Fn(&S, u64),
    recv: impl Fn(&R) -> u64,
) -> (u64, Duration) {
    let t0 = Instant::now();
    let mut done = 0;
    while done < n {
        done += 1;
        send(tx, done);
        let back = recv(rx);
        assert_eq!(back, done, "the token came back changed");
        if done % CLOCK_EVERY == 0 && t0.elapsed() > budget {
            break;
        }
    }
    let t = t0.elapsed();
    send(tx, 0);
    (done, t)
}

/// The ponging side: returns every token until the 0.
fn pong<S, R>(tx: &S, rx: &R, send: impl Fn(&S, u64), recv: impl Fn(&R) -> u64) {
    loop {
        let v = recv(rx);
        if v == 0 {
            return;
        }
        send(tx, v);
    }
}

fn here() -> ThreadId {
    std::thread::current().id()
}

fn pingpong<S, R>(
    sys: &impl Spawn,
    n: u64,
    budget: Duration,
    make: impl Fn() -> (S, R),
    send: impl Fn(&S, u64) + Copy + Send + 'static,
    recv: impl Fn(&R) -> u64 + Copy + Send + 'static,
) -> Outcome
where
    S: Send + 'static,
    R: Send + 'static,
{
    let (to_pong, pong_rx) = make();
    let (to_ping, ping_rx) = make();
    let ponger = sys.go(move || {
        pong(&to_ping, &pong_rx, send, recv);
        here()
    });
    let pinger = sys.go(move || (ping(n, budget, &to_pong, &ping_rx, send, recv), here()));
    let ((done, t), a) = pinger();
    let b = ponger();
    Outcome::RoundTrips(done, t, Some(a != b))
}

/// The sum of `0..k`, which each producer sends.
fn range_sum(k: u64) -> u64 {
    k * k.saturating_sub(1) / 2
}

fn oneway<S, R>(
    sys: &impl Spawn,
    n: u64,
    producers: u64,
    make: impl FnOnce() -> (S, R),
    send: impl Fn(&S, u64) + Copy + Send + 'static,
    recv: impl Fn(&R) -> u64 + Copy + Send + 'static,
) -> Outcome
where
    S: Clone + Send + 'static,
    R: Send + 'static,
{
    let each = n / producers;
    let n = each * producers;
    let (tx, rx) = make();
    let t0 = Instant::now();
    let consumer = sys.go(move || {
        let mut sum = 0u64;
        for _ in 0..n {
            sum = sum.wrapping_add(recv(&rx));
        }
        (sum, t0.elapsed())
    });
    let senders: Vec<_> = (0..producers)
        .map(|_| {
            let tx = tx.clone();
            sys.go(move || {
                for i in 0..each {
                    send(&tx, i);
                }
            })
        })
        .collect();
    drop(tx);
    let (sum, t) = consumer();
    for s in senders {
        s();
    }
    assert_eq!(
        sum,
        range_sum(each).wrapping_mul(producers),
        "messages lost"
    );
    Outcome::Messages(n, t)
}

/// Std threads, for the crossbeam and std arms.
struct Threads;

impl Spawn for Threads {
    fn go<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Box<dyn FnOnce() -> T> {
        let h = std::thread::spawn(f);
        Box::new(move || h.join().expect("thread panicked"))
    }
}

// ----------------------------------------------------------------- spindle

mod spindle_arm {
    use super::*;
    use spindle::sync::mpsc;
    use std::cell::Cell;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    /// Where the case's tasks are spawned from, and so where they run.
    #[derive(Clone, Copy, PartialEq)]
    pub(crate) enum From {
        /// From a task (the body of `block_on`): onto its worker.
        Task,
        /// From the plain main thread (`Runtime::spawn`), as users do.
        Thread,
        /// Placed: every task on worker 0 (`task::Builder::worker`).
        Worker0,
        /// Placed: the first task (the ponger, the consumer) on worker 0,
        /// the others on worker 1.
        Split,
    }

    /// Spawns onto `rt` as `from` says.
    struct Spawner<'a> {
        rt: &'a spindle::Runtime,
        from: From,
        spawned: Cell<usize>,
    }

    impl Spawn for Spawner<'_> {
        fn go<T: Send + 'static>(
            &self,
            f: impl FnOnce() -> T + Send + 'static,
        ) -> Box<dyn FnOnce() -> T> {
            let nth = self.spawned.replace(self.spawned.get() + 1);
            let h = match self.from {
                From::Task => spindle::spawn(f),
                From::Thread => self.rt.spawn(f),
                From::Worker0 => place(0, f),
                From::Split => place(usize::from(nth > 0), f),
            };
            Box::new(move || h.join().expect("spindle task failed"))
        }
    }

    fn place<T: Send + 'static>(
        worker: usize,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> spindle::JoinHandle<T> {
        spindle::task::Builder::new()
            .worker(worker)
            .spawn(f)
            .expect("spindle spawn")
    }

    /// The runtime's parks and wake-ups during the case.
    pub(crate) static IDLE: std::sync::OnceLock<(u64, u64)> = std::sync::OnceLock::new();

    pub(crate) fn run(from: From, case: Case, n: u64, budget: Duration) -> Outcome {
        let rt = spindle::Runtime::builder()
            .workers(2)
            .build()
            .expect("spindle runtime");
        let before = rt.stats();
        let out = if from == From::Thread {
            run_case(&rt, from, case, n, budget)
        } else {
            // Placed spawns name a worker of the spawning task's runtime.
            rt.block_on(|| run_case(&rt, from, case, n, budget))
        };
        let after = rt.stats();
        let _ = IDLE.set((after.parks - before.parks, after.wakeups - before.wakeups));
        rt.shutdown();
        out
    }

    fn run_case(
        rt: &spindle::Runtime,
        from: From,
        case: Case,
        n: u64,
        budget: Duration,
    ) -> Outcome {
        let sys = Spawner {
            rt,
            from,
            spawned: Cell::new(0),
        };
        // The errors carry the value back: no Debug bound wanted on them.
        let recv =
            |r: &mpsc::Receiver<u64>| r.recv().unwrap_or_else(|_| panic!("spindle sender gone"));
        let send = |s: &mpsc::Sender<u64>, v| {
            s.send(v)
                .unwrap_or_else(|_| panic!("spindle receiver gone"))
        };
        let sync_send = |s: &mpsc::SyncSender<u64>, v| {
            s.send(v)
                .unwrap_or_else(|_| panic!("spindle receiver gone"))
        };
        match case {
            Case::PingPong(Kind::Bounded1) => {
                pingpong(&sys, n, budget, || mpsc::sync_channel(1), sync_send, recv)
            }
            Case::PingPong(Kind::Bounded0) => {
                pingpong(&sys, n, budget, || mpsc::sync_channel(0), sync_send, recv)
            }
            Case::PingPong(Kind::Unbounded) => pingpong(&sys, n, budget, mpsc::channel, send, recv),
            Case::ButexPingPong => butex_pingpong(&sys, n, budget),
            Case::OneWay { producers } => oneway(&sys, n, producers, mpsc::channel, send, recv),
        }
    }

    /// Two players hand the turn back and forth through one `Butex` (whose
    /// value is the player whose turn it is; `STOP` ends the game).
    fn butex_pingpong(sys: &Spawner<'_>, n: u64, budget: Duration) -> Outcome {
        const STOP: u32 = 2;
        let turn = Arc::new(spindle::Butex::new(0));
        let wait_turn = |b: &spindle::Butex, me: u32| -> bool {
            loop {
                let v = b.value().load(Ordering::Acquire);
                if v == me || v == STOP {
                    return v == me;
                }
                // Woken, or the value moved on: look again.
                let _ = b.wait(v, None);
            }
        };
        let give = |b: &spindle::Butex, v: u32| {
            b.value().store(v, Ordering::Release);
            b.wake_one();
        };
        let b = turn.clone();
        let ponger = sys.go(move || {
            while wait_turn(&b, 1) {
                give(&b, 0);
            }
            here()
        });
        let b = turn;
        let pinger = sys.go(move || {
            let t0 = Instant::now();
            let mut done = 0;
            while done < n {
                done += 1;
                give(&b, 1);
                assert!(wait_turn(&b, 0), "the game stopped early");
                if done % CLOCK_EVERY == 0 && t0.elapsed() > budget {
                    break;
                }
            }
            let t = t0.elapsed();
            give(&b, STOP);
            ((done, t), here())
        });
        let ((done, t), a) = pinger();
        let b = ponger();
        Outcome::RoundTrips(done, t, Some(a != b))
    }
}

// ------------------------------------------------------------------- floor

/// The floor of a cross-CPU round trip on this machine: two plain threads,
/// pinned to the first two CPUs, bounce a value through one atomic, each
/// spinning until it is its turn. No runtime can hand a message across
/// CPUs faster; spindle's cross-worker ping-pongs are compared with it.
mod floor_arm {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    pub(super) fn run(case: Case, n: u64, budget: Duration) -> Outcome {
        if !matches!(case, Case::PingPong(_) | Case::ButexPingPong) {
            return Outcome::Unsupported;
        }
        let cpus = core_affinity::get_core_ids().unwrap_or_default();
        let pin = move |i: usize| {
            if let Some(c) = cpus.get(i % cpus.len().max(1)) {
                core_affinity::set_for_current(*c);
            }
        };
        // Odd values are the ponger's turn, even ones the pinger's;
        // `u64::MAX` ends the game.
        let word = Arc::new(AtomicU64::new(0));
        let w = word.clone();
        let pin1 = pin.clone();
        let ponger = std::thread::spawn(move || {
            pin1(1);
            let mut expect = 1;
            loop {
                let v = w.load(Ordering::Acquire);
                if v == u64::MAX {
                    return;
                }
                if v == expect {
                    w.store(v + 1, Ordering::Release);
                    expect += 2;
                } else {
                    std::hint::spin_loop();
                }
            }
        });
        pin(0);
        let t0 = Instant::now();
        let mut done = 0;
        while done < n {
            done += 1;
            let sent = 2 * done - 1;
            word.store(sent, Ordering::Release);
            while word.load(Ordering::Acquire) != sent + 1 {
                std::hint::spin_loop();
            }
            if done % CLOCK_EVERY == 0 && t0.elapsed() > budget {
                break;
            }
        }
        let t = t0.elapsed();
        word.store(u64::MAX, Ordering::Release);
        ponger.join().expect("floor thread panicked");
        Outcome::RoundTrips(done, t, Some(true))
    }
}

// ------------------------------------------------------------------- tokio

mod tokio_arm {
    use super::*;
    use tokio::sync::mpsc;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .expect("tokio runtime")
    }

    pub(super) fn run(case: Case, n: u64, budget: Duration) -> Outcome {
        let rt = runtime();
        // From a task: the future of `block_on` runs on the calling
        // thread, not on a worker.
        let out = rt.block_on(async move {
            tokio::spawn(async move {
                match case {
                    Case::PingPong(Kind::Bounded1) => pingpong_bounded(n, budget).await,
                    Case::PingPong(Kind::Bounded0) => Outcome::Unsupported,
                    Case::PingPong(Kind::Unbounded) => pingpong_unbounded(n, budget).await,
                    Case::ButexPingPong => pingpong_notify(n, budget).await,
                    Case::OneWay { producers } => oneway(n, producers).await,
                }
            })
            .await
            .expect("tokio task failed")
        });
        rt.shutdown_timeout(Duration::from_secs(5));
        out
    }

    /// Ping-pong through two `mpsc::channel(1)`s; see the blocking [`ping`].
    async fn pingpong_bounded(n: u64, budget: Duration) -> Outcome {
        let (to_pong, mut pong_rx) = mpsc::channel::<u64>(1);
        let (to_ping, mut ping_rx) = mpsc::channel::<u64>(1);
        let ponger = tokio::spawn(async move {
            while let Some(v) = pong_rx.recv().await {
                if v == 0 {
                    break;
                }
                to_ping.send(v).await.expect("pinger gone");
            }
            here()
        });
        let pinger = tokio::spawn(async move {
            let t0 = Instant::now();
            let mut done = 0;
            while done < n {
                done += 1;
                to_pong.send(done).await.expect("ponger gone");
                let back = ping_rx.recv().await.expect("ponger gone");
                assert_eq!(back, done, "the token came back changed");
                if done % CLOCK_EVERY == 0 && t0.elapsed() > budget {
                    break;
                }
            }
            let t = t0.elapsed();
            to_pong.send(0).await.expect("ponger gone");
            (done, t, here())
        });
        let (done, t, a) = pinger.await.expect("tokio task failed");
        let b = ponger.await.expect("tokio task failed");
        Outcome::RoundTrips(done, t, Some(a != b))
    }

    /// Ping-pong through a pair of `Notify`s: tokio's closest to a butex
    /// turn (about as fast as a oneshot per round, faster than `mpsc(1)`).
    async fn pingpong_notify(n: u64, budget: Duration) -> Outcome {
        use std::sync::Arc;
        use tokio::sync::Notify;
        let (to_ping, to_pong) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let (me, other) = (to_pong.clone(), to_ping.clone());
        let ponger = tokio::spawn(async move {
            for _ in 0..n {
                me.notified().await;
                other.notify_one();
            }
            here()
        });
        let pinger = tokio::spawn(async move {
            let t0 = Instant::now();
            // The ponger plays `n` turns: the pinger plays them all too,
            // reading the clock only to report the budget's share.
            let mut done = 0;
            let mut t = None;
            while done < n {
                done += 1;
                to_pong.notify_one();
                to_ping.notified().await;
                if t.is_none() && done % CLOCK_EVERY == 0 && t0.elapsed() > budget {
                    t = Some((done, t0.elapsed()));
                }
            }
            let (done, t) = t.unwrap_or((done, t0.elapsed()));
            (done, t, here())
        });
        let (done, t, a) = pinger.await.expect("tokio task failed");
        let b = ponger.await.expect("tokio task failed");
        Outcome::RoundTrips(done, t, Some(a != b))
    }

    /// Ping-pong through two `mpsc::unbounded_channel`s.
    async fn pingpong_unbounded(n: u64, budget: Duration) -> Outcome {
        let (to_pong, mut pong_rx) = mpsc::unbounded_channel::<u64>();
        let (to_ping, mut ping_rx) = mpsc::unbounded_channel::<u64>();
        let ponger = tokio::spawn(async move {
            while let Some(v) = pong_rx.recv().await {
                if v == 0 {
                    break;
                }
                to_ping.send(v).expect("pinger gone");
            }
            here()
        });
        let pinger = tokio::spawn(async move {
            let t0 = Instant::now();
            let mut done = 0;
            while done < n {
                done += 1;
                to_pong.send(done).expect("ponger gone");
                let back = ping_rx.recv().await.expect("ponger gone");
                assert_eq!(back, done, "the token came back changed");
                if done % CLOCK_EVERY == 0 && t0.elapsed() > budget {
                    break;
                }
            }
            let t = t0.elapsed();
            to_pong.send(0).expect("ponger gone");
            (done, t, here())
        });
        let (done, t, a) = pinger.await.expect("tokio task failed");
        let b = ponger.await.expect("tokio task failed");
        Outcome::RoundTrips(done, t, Some(a != b))
    }

    async fn oneway(n: u64, producers: u64) -> Outcome {
        let each = n / producers;
        let n = each * producers;
        let (tx, mut rx) = mpsc::unbounded_channel::<u64>();
        let t0 = Instant::now();
        let consumer = tokio::spawn(async move {
            let mut sum = 0u64;
            for _ in 0..n {
                sum = sum.wrapping_add(rx.recv().await.expect("producers gone"));
            }
            (sum, t0.elapsed())
        });
        let senders: Vec<_> = (0..producers)
            .map(|_| {
                let tx = tx.clone();
                tokio::spawn(async move {
                    for i in 0..each {
                        tx.send(i).expect("consumer gone");
                    }
                })
            })
            .collect();
        drop(tx);
        let (sum, t) = consumer.await.expect("tokio task failed");
        for s in senders {
            s.await.expect("tokio task failed");
        }
        assert_eq!(
            sum,
            range_sum(each).wrapping_mul(producers),
            "messages lost"
        );
        Outcome::Messages(n, t)
    }
}

// --------------------------------------------------------------------- may

mod may_arm {
    use super::*;
    use may::sync::mpsc;

    /// Spawns coroutines (from a coroutine: see [`run`]).
    struct Coroutines;

    impl Spawn for Coroutines {
        fn go<T: Send + 'static>(
            &self,
            f: impl FnOnce() -> T + Send + 'static,
        ) -> Box<dyn FnOnce() -> T> {
            // SAFETY: may's spawn is unsafe because a coroutine may migrate
            // between worker threads and so see another thread's
            // thread-local storage (or a TLS address cached across a
            // switch). These coroutines hold no thread-local storage across
            // a switch: they send, receive and add `u64`s, read the clock,
            // and block only in may's own channels.
            let h = unsafe { may::coroutine::spawn(f) };
            Box::new(move || h.join().expect("may coroutine failed"))
        }
    }

    pub(super) fn run(case: Case, n: u64, budget: Duration) -> Outcome {
        may::config().set_workers(2);
        let send = |s: &mpsc::Sender<u64>, v| s.send(v).expect("may receiver gone");
        let recv = |r: &mpsc::Receiver<u64>| r.recv().expect("may sender gone");
        // From a coroutine, as the others spawn from a task.
        Coroutines.go(move || match case {
            Case::PingPong(Kind::Bounded1 | Kind::Bounded0) | Case::ButexPingPong => {
                Outcome::Unsupported
            }
            Case::PingPong(Kind::Unbounded) => {
                pingpong(&Coroutines, n, budget, mpsc::channel, send, recv)
            }
            Case::OneWay { producers } => {
                oneway(&Coroutines, n, producers, mpsc::channel, send, recv)
            }
        })()
    }
}

// --------------------------------------------------------------- crossbeam

mod crossbeam_arm {
    use super::*;
    use crossbeam_channel as cb;

    pub(super) fn run(case: Case, n: u64, budget: Duration) -> Outcome {
        let send = |s: &cb::Sender<u64>, v| s.send(v).expect("receiver gone");
        let recv = |r: &cb::Receiver<u64>| r.recv().expect("sender gone");
        match case {
            Case::PingPong(Kind::Bounded1) => {
                pingpong(&Threads, n, budget, || cb::bounded(1), send, recv)
            }
            Case::PingPong(Kind::Bounded0) => {
                pingpong(&Threads, n, budget, || cb::bounded(0), send, recv)
            }
            Case::PingPong(Kind::Unbounded) => {
                pingpong(&Threads, n, budget, cb::unbounded, send, recv)
            }
            Case::ButexPingPong => Outcome::Unsupported,
            Case::OneWay { producers } => oneway(&Threads, n, producers, cb::unbounded, send, recv),
        }
    }
}

// --------------------------------------------------------------------- std

mod std_arm {
    use super::*;
    use std::sync::mpsc;

    pub(super) fn run(case: Case, n: u64, budget: Duration) -> Outcome {
        let recv = |r: &mpsc::Receiver<u64>| r.recv().expect("sender gone");
        let sync_send = |s: &mpsc::SyncSender<u64>, v| s.send(v).expect("receiver gone");
        match case {
            Case::PingPong(Kind::Bounded1) => pingpong(
                &Threads,
                n,
                budget,
                || mpsc::sync_channel(1),
                sync_send,
                recv,
            ),
            Case::PingPong(Kind::Bounded0) => pingpong(
                &Threads,
                n,
                budget,
                || mpsc::sync_channel(0),
                sync_send,
                recv,
            ),
            Case::PingPong(Kind::Unbounded) => pingpong(
                &Threads,
                n,
                budget,
                mpsc::channel,
                |s: &mpsc::Sender<u64>, v| s.send(v).expect("receiver gone"),
                recv,
            ),
            Case::ButexPingPong => Outcome::Unsupported,
            Case::OneWay { producers } => oneway(
                &Threads,
                n,
                producers,
                mpsc::channel,
                |s: &mpsc::Sender<u64>, v| s.send(v).expect("receiver gone"),
                recv,
            ),
        }
    }
}
