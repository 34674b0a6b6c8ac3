//! Timer benchmarks: sleeping, interrupting and deadline waits, spindle
//! against tokio, may and plain threads, two workers each.
//!
//! - `sleep_lateness/{1ms,100us}`: one sleeper at a time on an otherwise
//!   idle runtime; per sleep, how late it woke (actual - requested). The
//!   `spin (floor)` case never sleeps: it reads the clock in a loop until
//!   the deadline, so its lateness is only the time the machine took the
//!   CPU away (on a VM, the host descheduling the vCPU). No sleep can beat
//!   it on the same machine in the same run. `spindle (polling)` is
//!   spindle with workers that poll through their tasks' sleeps instead of
//!   parking (`Builder::sleep_spin(Duration::MAX)`): a core for precision.
//! - `sleep_lateness_paired/{1ms,100us}`: spindle (default and polling)
//!   and std sleeps taken in short blocks, each between two runs of the spin floor. A block is
//!   quiet if the host neither took a spinning CPU away (no spin late by
//!   more than 20 µs) nor was slow to wake a sleeping thread (no std sleep
//!   late by more than 200 µs: its 50 µs timer slack plus a VM's wake-up).
//!   The percentiles are printed over all blocks and over the quiet ones,
//!   so that a tail the host caused can be told from one spindle caused.
//! - `interrupt_latency`: a task sleeping 10 s is woken from a plain thread;
//!   from just before the wake call to the sleeper running again. For
//!   spindle also with the sleeper's worker kept busy by a yielding task,
//!   and with the polling runtime, so that no thread has to be woken. The
//!   wake comes long after the sleeper's worker went idle: it has parked.
//!   The `(task waker)` cases wake it from a task of the same runtime
//!   instead, the shape of Go's benchmark (a goroutine wakes a goroutine):
//!   tokio, like Go, runs the woken task on the waker's worker, while a
//!   started spindle task stays on its own, which must be woken.
//!   `benches/peers/interrupt_latency.go` measures Go both ways.
//! - `interrupt_latency_soon`: the same, with the wake 100-250 µs after the
//!   sleep began (an RPC's reply); also spindle with adaptive idle polling
//!   (`Builder::idle_poll`), whose worker is then still looking for work.
//!   Every latency benchmark prints the CPU the process burned meanwhile.
//! - `pingpong_butex`: two spindle tasks hand a turn back and forth through
//!   one `spindle::Butex`; per round trip.
//! - `deadline_churn`: the same turn-taking, per hand-off, with and without a
//!   100 ms deadline on every wait (each blocked wait arms a timer and
//!   cancels it); tokio's analog is `timeout(100 ms, notify.notified())`.
//! - `many_sleepers`: 100 000 tasks each sleeping 1 s; wall time from the
//!   first spawn to the last join, and resident memory per task (VmRSS
//!   growth once all have started, per task still asleep and per task).
//! - `sleep_burst`: 100 000 tasks asleep until one instant; per task, the
//!   time from it to the last of them running (a timeout storm).
//!
//! Criterion plans its iteration counts from the wall time of `iter_custom`
//! calls, while the latency benchmarks return only the summed latency: so
//! their wall time is bounded by the configured times whatever the latency,
//! and criterion's "time" is the *mean* latency. The percentiles, which are
//! what a timer is judged by, are printed to stderr after each benchmark
//! (`[group/peer] n=… p50=… p99=…`), over every sample taken, warm-up
//! included. Results: `docs/benchmarks.md`.
//!
//! "Inside a task" means on a worker: for spindle the body of `block_on` or a
//! spawned task, for tokio a `tokio::spawn`ed task, for may a coroutine.

mod common;

use common::Peers;
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, SamplingMode};
use spindle_benches::sleepers::{
    self, lateness, process_cpu_time, release_free_heap, rss_bytes, signed_nanos, total, Latencies,
};
use spindle_benches::workload::{full_batches, Placement};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// Spawns `f` as a may coroutine.
fn may_go<F, T>(f: F) -> may::coroutine::JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    // SAFETY: may's spawn is unsafe because a coroutine may migrate between
    // worker threads and so observe another thread's thread-local storage.
    // These closures keep no thread-local across a suspension: they suspend
    // only in may's own sleep and park, and between those they read the
    // clock and send on std channels (an unbounded send never blocks, so it
    // never suspends while touching the channel's thread-locals).
    unsafe { may::coroutine::spawn(f) }
}

/// A benchmark body: given criterion's count, returns one sample per
/// operation (signed ns).
type Sampler<'a> = Box<dyn FnMut(u64) -> Vec<i64> + 'a>;

/// Runs one latency benchmark: criterion gets the summed latency, stderr
/// gets the percentiles of every sample, and the CPU the process burned
/// meanwhile, in cores (CPU time over wall time: 1.0 is one core busy
/// throughout) and per operation (per sample).
fn latency_case(g: &mut BenchmarkGroup<'_, WallTime>, group: &str, peer: &str, mut f: Sampler) {
    let mut all = Latencies::new();
    let (mut cpu, mut wall) = (Duration::ZERO, Duration::ZERO);
    g.bench_function(peer, |b| {
        b.iter_custom(|iters| {
            let (cpu0, wall0) = (process_cpu_time(), Instant::now());
            let s = f(iters);
            wall += wall0.elapsed();
            cpu += process_cpu_time() - cpu0;
            all.extend(&s);
            total(&s)
        })
    });
    if let Some(s) = all.summary() {
        let cores = cpu.as_secs_f64() / wall.as_secs_f64();
        let per_op = cpu.as_secs_f64() * 1e6 / all.len() as f64;
        eprintln!("[{group}/{peer}] {s} cpu={cores:.2} cores, {per_op:.2} µs per operation");
    }
}

/// Runs `cases` as one group of latency benchmarks, 1.5 s each.
fn latency_cases(c: &mut Criterion, name: &str, cases: Vec<(&str, Sampler)>) {
    let mut g = flat_group(c, name, LATENCY_WARM_UP, Duration::from_millis(1500));
    for (peer, f) in cases {
        latency_case(&mut g, name, peer, f);
    }
    g.finish();
}

// ------------------------------------------------------------ sleep_lateness

fn spindle_lateness(rt: &spindle::Runtime, d: Duration, n: u64) -> Vec<i64> {
    rt.block_on(|| {
        (0..n)
            .map(|_| {
                let start = Instant::now();
                spindle::sleep(d).expect("nothing interrupts this sleep");
                lateness(start, Instant::now(), d)
            })
            .collect()
    })
}

fn tokio_lateness(rt: &tokio::runtime::Runtime, d: Duration, n: u64) -> Vec<i64> {
    rt.block_on(async move {
        tokio::spawn(async move {
            let mut out = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let start = Instant::now();
                tokio::time::sleep(d).await;
                out.push(lateness(start, Instant::now(), d));
            }
            out
        })
        .await
        .expect("tokio task failed")
    })
}

fn may_lateness(d: Duration, n: u64) -> Vec<i64> {
    may_go(move || {
        (0..n)
            .map(|_| {
                let start = Instant::now();
                may::coroutine::sleep(d);
                lateness(start, Instant::now(), d)
            })
            .collect()
    })
    .join()
    .expect("may coroutine failed")
}

fn std_lateness(d: Duration, n: u64) -> Vec<i64> {
    (0..n)
        .map(|_| {
            let start = Instant::now();
            std::thread::sleep(d);
            lateness(start, Instant::now(), d)
        })
        .collect()
}

/// `Builder::sleep_spin` of the polling spindle cases: longer than any
/// sleep, so that a worker with a sleeping task never parks.
const POLL_THROUGH: Duration = Duration::MAX;

/// The floor of `sleep_lateness`: a plain thread that spins on the clock
/// until the deadline instead of sleeping.
fn spin_lateness(d: Duration, n: u64) -> Vec<i64> {
    (0..n)
        .map(|_| {
            let start = Instant::now();
            let deadline = start + d;
            let mut now = start;
            while now < deadline {
                std::hint::spin_loop();
                now = Instant::now();
            }
            lateness(start, now, d)
        })
        .collect()
}

/// The sleep lengths `sleep_lateness` and `sleep_lateness_paired` measure.
const SLEEPS: [(&str, Duration); 2] = [
    ("1ms", Duration::from_millis(1)),
    ("100us", Duration::from_micros(100)),
];

/// A spindle runtime whose workers poll through their tasks' sleeps instead
/// of parking (`Builder::sleep_spin` longer than any sleep): CPU traded for
/// precision, to set beside the floor.
fn polling_runtime() -> spindle::Runtime {
    spindle::Runtime::builder()
        .workers(2)
        .sleep_spin(POLL_THROUGH)
        .build()
        .expect("a polling spindle runtime")
}

/// The warm-up of the latency groups.
const LATENCY_WARM_UP: Duration = Duration::from_millis(200);
/// The warm-up of a group whose iteration is one long run: criterion's
/// shortest, one run.
const ONE_RUN: Duration = Duration::from_millis(1);

/// A group of ten flat samples over `measurement`, after `warm_up` (see
/// the module docs for what criterion times). Latency groups warm up for
/// [`LATENCY_WARM_UP`]; groups whose one run is a long batch, for a run.
fn flat_group<'a>(
    c: &'a mut Criterion,
    name: &str,
    warm_up: Duration,
    measurement: Duration,
) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(name);
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(warm_up)
        .measurement_time(measurement);
    g
}

fn sleep_lateness(c: &mut Criterion, p: &Peers, polling: &spindle::Runtime) {
    for (label, d) in SLEEPS {
        let name = format!("sleep_lateness/{label}");
        let cases: Vec<(&str, Sampler)> = vec![
            ("spindle", Box::new(|n| spindle_lateness(&p.spindle, d, n))),
            (
                "spindle (polling)",
                Box::new(|n| spindle_lateness(polling, d, n)),
            ),
            ("tokio", Box::new(|n| tokio_lateness(&p.tokio, d, n))),
            ("may", Box::new(move |n| may_lateness(d, n))),
            ("std", Box::new(move |n| std_lateness(d, n))),
            ("spin (floor)", Box::new(move |n| spin_lateness(d, n))),
        ];
        latency_cases(c, &name, cases);
    }
}

// ----------------------------------------------------- sleep_lateness_paired

/// Sleeps of each peer in one block of `sleep_lateness_paired` (and spins in
/// each of its two floor brackets).
const BLOCK: u64 = 25;
/// A block is quiet if no spin of its floor brackets was later than this...
const QUIET_SPIN: Duration = Duration::from_micros(20);
/// ...and no std sleep in it was later than this.
const QUIET_SLEEP: Duration = Duration::from_micros(200);

/// One block: the spindle (default and polling) and std sleeps, and the
/// spin floor around them.
struct Block {
    floor: Vec<i64>,
    spindle: Vec<i64>,
    polling: Vec<i64>,
    std: Vec<i64>,
}

impl Block {
    fn take(rt: &spindle::Runtime, polling_rt: &spindle::Runtime, d: Duration) -> Block {
        let mut floor = spin_lateness(d, BLOCK);
        let spindle = spindle_lateness(rt, d, BLOCK);
        let polling = spindle_lateness(polling_rt, d, BLOCK);
        let std = std_lateness(d, BLOCK);
        floor.extend(spin_lateness(d, BLOCK));
        Block {
            floor,
            spindle,
            polling,
            std,
        }
    }

    /// Whether the host left the CPUs alone around this block, and woke
    /// sleeping threads on time in it.
    fn quiet(&self) -> bool {
        let at_most = |l: &[i64], d: Duration| {
            let d = i64::try_from(d.as_nanos()).expect("a few µs fit");
            l.iter().all(|&l| l <= d)
        };
        at_most(&self.floor, QUIET_SPIN) && at_most(&self.std, QUIET_SLEEP)
    }
}

/// The samples of `sleep_lateness_paired`, over all blocks and over the
/// quiet ones.
#[derive(Default)]
struct Paired {
    blocks: usize,
    quiet_blocks: usize,
    floor: Latencies,
    spindle: Latencies,
    polling: Latencies,
    std: Latencies,
    quiet_spindle: Latencies,
    quiet_polling: Latencies,
    quiet_std: Latencies,
}

impl Paired {
    fn add(&mut self, b: &Block) {
        self.blocks += 1;
        self.floor.extend(&b.floor);
        self.spindle.extend(&b.spindle);
        self.polling.extend(&b.polling);
        self.std.extend(&b.std);
        if b.quiet() {
            self.quiet_blocks += 1;
            self.quiet_spindle.extend(&b.spindle);
            self.quiet_polling.extend(&b.polling);
            self.quiet_std.extend(&b.std);
        }
    }

    fn print(&self, group: &str) {
        if self.blocks == 0 {
            return; // filtered out
        }
        eprintln!(
            "[{group}] {} blocks of {BLOCK} sleeps each, {} quiet \
             (no floor spin > {QUIET_SPIN:?}, no std sleep > {QUIET_SLEEP:?})",
            self.blocks, self.quiet_blocks
        );
        let rows = [
            ("floor, all", &self.floor),
            ("spindle, all", &self.spindle),
            ("spindle polling, all", &self.polling),
            ("std, all", &self.std),
            ("spindle, quiet", &self.quiet_spindle),
            ("spindle polling, quiet", &self.quiet_polling),
            ("std, quiet", &self.quiet_std),
        ];
        for (what, l) in rows {
            if let Some(s) = l.summary() {
                eprintln!("[{group}/{what}] {s}");
            }
        }
    }
}

fn sleep_lateness_paired(c: &mut Criterion, p: &Peers, polling: &spindle::Runtime) {
    for (label, d) in SLEEPS {
        let name = format!("sleep_lateness_paired/{label}");
        let mut g = flat_group(c, &name, LATENCY_WARM_UP, Duration::from_secs(8));
        let mut all = Paired::default();
        // An iteration is a block; criterion gets the spindle sleeps' mean
        // lateness per iteration (their sum over `BLOCK`), so that its
        // "time" reads as in `latency_case`.
        g.bench_function("spindle vs std", |b| {
            b.iter_custom(|blocks| {
                let mut spindle = Vec::new();
                for _ in 0..blocks {
                    let block = Block::take(&p.spindle, polling, d);
                    all.add(&block);
                    spindle.extend(block.spindle);
                }
                total(&spindle) / BLOCK as u32
            })
        });
        all.print(&name);
        g.finish();
    }
}

// --------------------------------------------------------- interrupt_latency

/// How long the interrupted sleepers would sleep: far beyond any run.
const LONG_SLEEP: Duration = Duration::from_secs(10);
/// How long the driver waits, after the sleeper said it is about to sleep,
/// before it wakes it, in `interrupt_latency`: enough for the sleep to
/// begin and for the sleeper's worker to go idle and park. So every sample
/// wakes a blocked sleeper on an idle runtime (not a pending interrupt,
/// not a spinning worker).
const SETTLE_PARKED: Duration = Duration::from_micros(500);
/// The same wait in `interrupt_latency_soon`: the wake comes soon after the
/// sleeper's worker went idle, as an RPC's reply does (100-250 µs in all,
/// with the driver's 50 µs timer slack and its own wake-up).
const SETTLE_SOON: Duration = Duration::from_micros(50);
/// The `Builder::idle_poll` bound of the idle-polling runtime in
/// `interrupt_latency_soon`: above those gaps.
const IDLE_POLL: Duration = Duration::from_micros(500);

/// Drives `n` rounds with a sleeper that sends, on `rx`, the instant just
/// before each sleep and the instant it ran again after being woken; `wake`
/// wakes it, `settle` after the sleeper's first message. Returns the
/// latency of each wake: from just before `wake` to the sleeper running.
fn drive_wakes(
    n: u64,
    settle: Duration,
    rx: &Receiver<Instant>,
    mut wake: impl FnMut(),
) -> Vec<i64> {
    let gone = "the sleeper is gone (it panicked: see above)";
    (0..n)
        .map(|_| {
            let entered = rx.recv().expect(gone);
            std::thread::sleep(settle);
            let start = Instant::now();
            wake();
            let woke = rx.recv().expect(gone);
            assert!(
                entered < start && woke >= start,
                "the sleeper woke before it was woken"
            );
            signed_nanos(woke, start)
        })
        .collect()
}

/// A spindle task sleeping 10 s, `n` times over, each time woken by
/// `interrupt` from the driver. With `busy_worker`, the sleeper's worker is
/// kept awake by a task that yields in a loop (a busy server): the interrupt
/// then needs no wake-up, only a turn on the worker, so that case measures
/// the runtime's own share of the latency.
fn spindle_interrupt(
    rt: &spindle::Runtime,
    n: u64,
    settle: Duration,
    busy_worker: bool,
) -> Vec<i64> {
    spindle_interrupt_parked(rt, n, settle, busy_worker, false)
}

/// [`spindle_interrupt`]; with `in_poller`, the sleeper first waits on a
/// socket, so its worker has an fd registered and parks in its I/O poller
/// (woken through the poller's waker) instead of its ParkingLot.
fn spindle_interrupt_parked(
    rt: &spindle::Runtime,
    n: u64,
    settle: Duration,
    busy_worker: bool,
    in_poller: bool,
) -> Vec<i64> {
    let (tx, rx) = channel();
    let h = rt.spawn(move || {
        let _socket = in_poller.then(|| {
            let s = spindle::net::UdpSocket::bind("127.0.0.1:0").expect("bind a UDP socket");
            s.set_read_timeout(Some(Duration::from_millis(1)))
                .expect("set a read timeout");
            let timed_out = s.recv(&mut [0u8; 1]);
            assert!(timed_out.is_err(), "nobody sends to this socket");
            s
        });
        let spinner = busy_worker.then(|| {
            let busy = Arc::new(std::sync::atomic::AtomicBool::new(true));
            let flag = busy.clone();
            // Started at once on this worker, and so pinned to it.
            let task = spindle::spawn_urgent(move || {
                while flag.load(Ordering::Relaxed) {
                    spindle::yield_now();
                }
            });
            // Stops the spinner however this task ends (a failed assert must
            // not leave a worker of the shared runtime spinning for good).
            (StopOnDrop(busy), task)
        });
        for _ in 0..n {
            tx.send(Instant::now()).expect("driver alive");
            let r = spindle::sleep(LONG_SLEEP);
            let woke = Instant::now();
            assert_eq!(r, Err(spindle::SleepError::Interrupted), "lost interrupt");
            tx.send(woke).expect("driver alive");
        }
        if let Some((stop, task)) = spinner {
            drop(stop);
            task.join().expect("the spinner does not panic");
        }
    });
    let id = h.id();
    let out = drive_wakes(n, settle, &rx, || {
        spindle::interrupt(id).expect("the sleeper is alive");
    });
    h.join().expect("spindle sleeper failed");
    out
}

/// A spindle task sleeping 10 s, `n` times over, each time woken by
/// `interrupt` from another *task* of the same runtime, one on the other
/// worker: the shape of Go's `interrupt_latency`, where a goroutine wakes a
/// goroutine (and Go runs the woken one on the waker's own P; spindle's
/// sleeper stays on its worker, `docs/safety.md`, which must be woken). The
/// waker waits for the sleeper's stamps on a `Butex`, so its worker goes
/// idle through spindle's own path, as a goroutine blocked on a channel
/// leaves its P idle.
fn spindle_interrupt_from_task(rt: &spindle::Runtime, n: u64, settle: Duration) -> Vec<i64> {
    /// The sleeper's instants for the waker, in ns since `base`: stamp `k`
    /// (from 1) goes to `at[k % 2]`, so that the "about to sleep" stamp
    /// of the next round, which the sleeper posts right after its "ran
    /// again", cannot overwrite that one before the waker has read it.
    struct Stamps {
        base: Instant,
        /// The number of stamps posted so far (two per round).
        posted: spindle::Butex,
        at: [AtomicI64; 2],
    }
    impl Stamps {
        fn now(&self) -> i64 {
            signed_nanos(Instant::now(), self.base)
        }
        fn post(&self) {
            let k = self.posted.value().load(Ordering::SeqCst) + 1;
            self.at[k as usize % 2].store(self.now(), Ordering::SeqCst);
            self.posted.value().store(k, Ordering::SeqCst);
            self.posted.wake_one();
        }
        /// Waits for stamp number `k` (from 1) and returns it.
        fn take(&self, k: u32) -> i64 {
            loop {
                let posted = self.posted.value().load(Ordering::SeqCst);
                if posted >= k {
                    return self.at[k as usize % 2].load(Ordering::SeqCst);
                }
                // WouldBlock when a stamp came meanwhile: look again.
                let _ = self.posted.wait(posted, None);
            }
        }
    }
    let stamps = Arc::new(Stamps {
        base: Instant::now(),
        posted: spindle::Butex::new(0),
        at: [AtomicI64::new(0), AtomicI64::new(0)],
    });
    let sleeper_thread = Arc::new(OnceLock::new());
    rt.block_on(|| {
        let (st, thread) = (stamps.clone(), sleeper_thread.clone());
        let sleeper = spindle::spawn(move || {
            thread.get_or_init(|| std::thread::current().id());
            for _ in 0..n {
                st.post();
                let r = spindle::sleep(LONG_SLEEP);
                assert_eq!(r, Err(spindle::SleepError::Interrupted), "lost interrupt");
                st.post();
            }
        });
        // The waker does not suspend before the sleeper has started, so the
        // sleeper starts on the other worker, where it then stays.
        while sleeper_thread.get().is_none() {
            std::hint::spin_loop();
        }
        assert_ne!(sleeper_thread.get(), Some(&std::thread::current().id()));
        let out = (0..n as u32)
            .map(|round| {
                stamps.take(2 * round + 1);
                spindle::sleep(settle).expect("nothing interrupts the waker");
                let start = stamps.now();
                spindle::interrupt(sleeper.id()).expect("the sleeper is alive");
                stamps.take(2 * round + 2) - start
            })
            .collect();
        sleeper.join().expect("spindle sleeper failed");
        out
    })
}

/// Clears its flag when dropped.
struct StopOnDrop(Arc<std::sync::atomic::AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// The tokio sleeper of `interrupt_latency`, `n` times over: posts the
/// instant just before it sleeps 10 s, then the instant it ran again after
/// `notify` woke it.
async fn tokio_sleeper(n: u64, notify: Arc<tokio::sync::Notify>, post: impl Fn(Instant)) {
    for _ in 0..n {
        post(Instant::now());
        let woke = tokio::select! {
            _ = tokio::time::sleep(LONG_SLEEP) => panic!("lost notification"),
            _ = notify.notified() => Instant::now(),
        };
        post(woke);
    }
}

fn tokio_interrupt(rt: &tokio::runtime::Runtime, n: u64, settle: Duration) -> Vec<i64> {
    let (tx, rx) = channel();
    let notify = Arc::new(tokio::sync::Notify::new());
    let h = rt.spawn(tokio_sleeper(n, notify.clone(), move |t| {
        tx.send(t).expect("driver alive")
    }));
    let out = drive_wakes(n, settle, &rx, || notify.notify_one());
    rt.block_on(h).expect("tokio sleeper failed");
    out
}

/// `tokio_interrupt` with a tokio task as the waker, as in
/// `spindle_interrupt_from_task`. tokio runs a task woken from a worker on
/// that worker (its LIFO slot), as Go does.
fn tokio_interrupt_from_task(rt: &tokio::runtime::Runtime, n: u64, settle: Duration) -> Vec<i64> {
    rt.block_on(async move {
        tokio::spawn(async move {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            let notify = Arc::new(tokio::sync::Notify::new());
            let sleeper = tokio::spawn(tokio_sleeper(n, notify.clone(), move |t| {
                tx.send(t).expect("waker alive")
            }));
            let gone = "the sleeper is gone (it panicked: see above)";
            let mut out = Vec::with_capacity(n as usize);
            for _ in 0..n {
                rx.recv().await.expect(gone);
                tokio::time::sleep(settle).await;
                let start = Instant::now();
                notify.notify_one();
                out.push(signed_nanos(rx.recv().await.expect(gone), start));
            }
            sleeper.await.expect("tokio sleeper failed");
            out
        })
        .await
        .expect("tokio waker failed")
    })
}

fn may_interrupt(n: u64, settle: Duration) -> Vec<i64> {
    let (tx, rx) = channel();
    let h = may_go(move || {
        for _ in 0..n {
            let entered = Instant::now();
            tx.send(entered).expect("driver alive");
            may::coroutine::park_timeout(LONG_SLEEP);
            let woke = Instant::now();
            // park_timeout does not say why it returned: by the clock.
            assert!(woke - entered < LONG_SLEEP, "lost unpark");
            tx.send(woke).expect("driver alive");
        }
    });
    let co = h.coroutine().clone();
    let out = drive_wakes(n, settle, &rx, || co.unpark());
    h.join().expect("may sleeper failed");
    out
}

fn std_interrupt(n: u64, settle: Duration) -> Vec<i64> {
    let (tx, rx) = channel();
    let flag = Arc::new((Mutex::new(false), Condvar::new()));
    let h = {
        let flag = flag.clone();
        std::thread::spawn(move || {
            let (m, cv) = &*flag;
            for _ in 0..n {
                tx.send(Instant::now()).expect("driver alive");
                let mut woken = m.lock().expect("no panics under this lock");
                while !*woken {
                    let (g, r) = cv
                        .wait_timeout(woken, LONG_SLEEP)
                        .expect("no panics under this lock");
                    woken = g;
                    assert!(*woken || !r.timed_out(), "lost notification");
                }
                let woke = Instant::now();
                *woken = false;
                drop(woken);
                tx.send(woke).expect("driver alive");
            }
        })
    };
    let out = drive_wakes(n, settle, &rx, || {
        let (m, cv) = &*flag;
        *m.lock().expect("no panics under this lock") = true;
        cv.notify_one();
    });
    h.join().expect("std sleeper failed");
    out
}

fn interrupt_latency(c: &mut Criterion, p: &Peers, polling: &spindle::Runtime) {
    let settle = SETTLE_PARKED;
    let cases: Vec<(&str, Sampler)> = vec![
        (
            "spindle",
            Box::new(|n| spindle_interrupt(&p.spindle, n, settle, false)),
        ),
        (
            "spindle (worker busy)",
            Box::new(|n| spindle_interrupt(&p.spindle, n, settle, true)),
        ),
        (
            "spindle (polling)",
            Box::new(|n| spindle_interrupt(polling, n, settle, false)),
        ),
        (
            "spindle (parked in its poller)",
            Box::new(|n| spindle_interrupt_parked(&p.spindle, n, settle, false, true)),
        ),
        (
            "spindle (task waker)",
            Box::new(|n| spindle_interrupt_from_task(&p.spindle, n, settle)),
        ),
        ("tokio", Box::new(|n| tokio_interrupt(&p.tokio, n, settle))),
        (
            "tokio (task waker)",
            Box::new(|n| tokio_interrupt_from_task(&p.tokio, n, settle)),
        ),
        ("may", Box::new(|n| may_interrupt(n, settle))),
        ("std", Box::new(|n| std_interrupt(n, settle))),
    ];
    latency_cases(c, "interrupt_latency", cases);
}

/// `interrupt_latency` with the wake coming soon after the sleeper's worker
/// went idle. Also spindle with idle polling (`Builder::idle_poll`), whose
/// worker, having seen such gaps before, is still looking for work when the
/// wake comes: the difference from the default is what the polling buys,
/// and the `cpu=` of the two what it costs.
fn interrupt_latency_soon(c: &mut Criterion, p: &Peers) {
    let idle_polling = spindle::Runtime::builder()
        .workers(2)
        .idle_poll(IDLE_POLL)
        .build()
        .expect("spindle runtime with idle polling");
    let settle = SETTLE_SOON;
    let cases: Vec<(&str, Sampler)> = vec![
        (
            "spindle",
            Box::new(|n| spindle_interrupt(&p.spindle, n, settle, false)),
        ),
        (
            "spindle (idle_poll 500µs)",
            Box::new(|n| spindle_interrupt(&idle_polling, n, settle, false)),
        ),
        ("tokio", Box::new(|n| tokio_interrupt(&p.tokio, n, settle))),
        ("may", Box::new(|n| may_interrupt(n, settle))),
        ("std", Box::new(|n| std_interrupt(n, settle))),
    ];
    latency_cases(c, "interrupt_latency_soon", cases);
    idle_polling.shutdown();
}

// ------------------------------------------- pingpong_butex, deadline_churn

/// What the waits of a spindle turn-taking run returned.
#[derive(Debug, Default, Clone, Copy)]
struct Waits {
    /// `Ok`: the wait blocked and was woken (with a deadline: a timer was
    /// armed and cancelled).
    blocked: u64,
    /// `WouldBlock`: the turn had already come; nothing was armed.
    would_block: u64,
    /// `TimedOut`: a 100 ms deadline passed first (a stall).
    timed_out: u64,
}

impl Waits {
    fn add(&mut self, o: Waits) {
        self.blocked += o.blocked;
        self.would_block += o.would_block;
        self.timed_out += o.timed_out;
    }
}

/// Waits on `b` until its value is `me`; each wait with a deadline of
/// `timeout` from now, if given.
fn wait_turn(b: &spindle::Butex, me: u32, timeout: Option<Duration>, waits: &mut Waits) {
    loop {
        let v = b.value().load(Ordering::Acquire);
        if v == me {
            return;
        }
        match b.wait(v, timeout.map(|t| Instant::now() + t)) {
            Ok(()) => waits.blocked += 1,
            Err(spindle::WaitError::WouldBlock) => waits.would_block += 1,
            Err(spindle::WaitError::TimedOut) => waits.timed_out += 1,
            Err(e) => panic!("unexpected butex wait error: {e}"),
        }
    }
}

/// Takes `turns` turns as player `me` (0 or 1) of a two-player butex.
fn player(b: &spindle::Butex, me: u32, turns: u64, timeout: Option<Duration>) -> (ThreadId, Waits) {
    let mut waits = Waits::default();
    for _ in 0..turns {
        wait_turn(b, me, timeout, &mut waits);
        b.value().store(1 - me, Ordering::Release);
        b.wake_one();
    }
    // A started spindle task never leaves its worker: this is where it ran.
    (std::thread::current().id(), waits)
}

/// Two tasks take `turns[0]` and `turns[1]` alternating turns through one
/// butex (player 0 first). Returns the wall time from spawning the first to
/// joining both.
fn spindle_turns(
    rt: &spindle::Runtime,
    turns: [u64; 2],
    timeout: Option<Duration>,
    pairs: &Placement,
    waits: &mut Waits,
) -> Duration {
    let (t, w) = rt.block_on(|| {
        let butex = Arc::new(spindle::Butex::new(0));
        let start = Instant::now();
        let [a, b] = [0, 1].map(|me| {
            let b = butex.clone();
            spindle::spawn(move || player(&b, me, turns[me as usize], timeout))
        });
        let (ta, wa) = a.join().expect("spindle player failed");
        let (tb, wb) = b.join().expect("spindle player failed");
        let t = start.elapsed();
        pairs.record(ta, tb);
        let mut w = wa;
        w.add(wb);
        (t, w)
    });
    waits.add(w);
    t
}

/// tokio's turn-taking: a turn counter and one `Notify` per player; each wait
/// is `notified()`, or `timeout(t, notified())` if `timeout` is given.
fn tokio_turns(
    rt: &tokio::runtime::Runtime,
    turns: [u64; 2],
    timeout: Option<Duration>,
    timed_out: &AtomicU64,
) -> Duration {
    use tokio::sync::Notify;
    let turn = Arc::new(AtomicU32::new(0));
    let notify = [Arc::new(Notify::new()), Arc::new(Notify::new())];
    let t = rt.block_on(async {
        let start = Instant::now();
        let hs = [0u32, 1].map(|me| {
            let turn = turn.clone();
            let mine = notify[me as usize].clone();
            let other = notify[1 - me as usize].clone();
            let n = turns[me as usize];
            tokio::spawn(async move {
                let mut late = 0;
                for _ in 0..n {
                    while turn.load(Ordering::Acquire) != me {
                        match timeout {
                            None => mine.notified().await,
                            Some(t) => {
                                if tokio::time::timeout(t, mine.notified()).await.is_err() {
                                    late += 1;
                                }
                            }
                        }
                    }
                    turn.store(1 - me, Ordering::Release);
                    other.notify_one();
                }
                late
            })
        });
        let mut late = 0;
        for h in hs {
            late += h.await.expect("tokio player failed");
        }
        timed_out.fetch_add(late, Ordering::Relaxed);
        start.elapsed()
    });
    t
}

/// `n` hand-offs split between two players, player 0 taking the extra one.
fn handoffs(n: u64) -> [u64; 2] {
    [n.div_ceil(2), n / 2]
}

fn report_turns(bench: &str, pairs: &Placement, waits: Waits) {
    let (same, split) = pairs.counts();
    eprintln!(
        "[{bench}] runs on one worker {same}, on two {split}; waits: blocked {} \
         would-block {} timed-out {}",
        waits.blocked, waits.would_block, waits.timed_out
    );
}

fn pingpong_butex(c: &mut Criterion, p: &Peers) {
    let mut g = c.benchmark_group("pingpong_butex");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let pairs = Placement::new();
    let mut waits = Waits::default();
    // Per round trip: each player takes `iters` turns.
    g.bench_function("spindle", |b| {
        b.iter_custom(|iters| spindle_turns(&p.spindle, [iters, iters], None, &pairs, &mut waits))
    });
    if pairs.counts() != (0, 0) {
        report_turns("pingpong_butex/spindle", &pairs, waits);
    }
    g.finish();
}

/// The deadline of every wait in `deadline_churn`: never reached.
const CHURN_TIMEOUT: Duration = Duration::from_millis(100);

fn deadline_churn(c: &mut Criterion, p: &Peers) {
    let mut g = c.benchmark_group("deadline_churn");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    // Per hand-off (one wait): `iters` turns in all.
    for (peer, timeout) in [
        ("spindle_no_deadline", None),
        ("spindle_deadline", Some(CHURN_TIMEOUT)),
    ] {
        let pairs = Placement::new();
        let mut waits = Waits::default();
        g.bench_function(peer, |b| {
            b.iter_custom(|iters| {
                spindle_turns(&p.spindle, handoffs(iters), timeout, &pairs, &mut waits)
            })
        });
        if pairs.counts() != (0, 0) {
            report_turns(&format!("deadline_churn/{peer}"), &pairs, waits);
        }
    }
    for (peer, timeout) in [
        ("tokio_no_timeout", None),
        ("tokio_timeout", Some(CHURN_TIMEOUT)),
    ] {
        let timed_out = AtomicU64::new(0);
        g.bench_function(peer, |b| {
            b.iter_custom(|iters| tokio_turns(&p.tokio, handoffs(iters), timeout, &timed_out))
        });
        let late = timed_out.load(Ordering::Relaxed);
        if late > 0 {
            eprintln!("[deadline_churn/{peer}] {late} waits timed out");
        }
    }
    g.finish();
}

// ------------------------------------------------------------- many_sleepers

/// Tasks alive at once in `many_sleepers`.
const SLEEPERS: u64 = 100_000;
/// How long each of them sleeps.
const SLEEPER_NAP: Duration = Duration::from_secs(1);
/// The stack size of the many_sleepers spindle runtime (its minimum).
const SMALL_STACK: usize = 16 * 1024;
/// `vm.max_map_count` needed for 100 000 spindle stacks on a kernel without
/// guard regions (two mappings each).
const MAP_COUNT_NEEDED: u64 = 262_144;

/// Bumped by every sleeper as it starts; read to know that all started.
static STARTED: AtomicU64 = AtomicU64::new(0);
/// Bumped by every sleeper as its sleep ends. A runtime whose spawns take
/// longer than the nap never has all of them asleep at once: the memory is
/// divided by the sleepers alive when it is read, `STARTED - WOKEN`.
static WOKEN: AtomicU64 = AtomicU64::new(0);

/// The spindle runtime of the groups with 100 000 tasks at once: two
/// workers, the smallest stacks.
fn small_stack_runtime() -> spindle::Runtime {
    spindle::Runtime::builder()
        .workers(2)
        .stack_size(SMALL_STACK)
        .build()
        .expect("spindle runtime with small stacks")
}

/// What one many_sleepers run measured.
#[derive(Debug, Clone, Copy)]
struct Run {
    /// From the first spawn to the last join.
    wall: Duration,
    /// Resident bytes once every sleeper has started.
    peak: u64,
    /// Sleepers still asleep at that moment.
    alive: u64,
}

/// The many_sleepers runs of one peer.
///
/// Memory is charged against one baseline, the resident size just before
/// the peer's first run: a runtime that keeps stacks (or task memory) from
/// one run for the next has them resident before the next run starts, and
/// they must still count as what the sleeping tasks cost. The allocator's
/// free memory is handed back before every run, so that what the allocator
/// (not the runtime) keeps from one run does not count against the next.
///
/// The growth is divided two ways: by the tasks asleep when it is read
/// (what a sleeping task costs, if the tasks that already finished gave
/// everything back) and by all the tasks of the run (if they kept it, as
/// stacks parked in a pool do). When every task is asleep at once the two
/// agree.
#[derive(Debug, Default)]
struct RunLog {
    /// VmRSS before the first spawn of the first run.
    base: Option<u64>,
    runs: Vec<Run>,
}

impl RunLog {
    /// The baseline, taken now if this is the first run (after handing the
    /// allocator's free memory back, so earlier benchmarks' garbage does not
    /// make room for this one's tasks).
    fn base(&mut self) -> u64 {
        release_free_heap();
        *self.base.get_or_insert_with(rss)
    }

    /// KiB per task asleep at the peak.
    fn kib_per_task(&self, r: &Run) -> f64 {
        sleepers::per_task(self.base.unwrap_or(0), r.peak, r.alive) / 1024.0
    }

    /// KiB per task of the run.
    fn kib_per_spawned(&self, r: &Run) -> f64 {
        sleepers::per_task(self.base.unwrap_or(0), r.peak, SLEEPERS) / 1024.0
    }

    fn report(&self, bench: &str) {
        let Some(first) = self.runs.first() else {
            return;
        };
        let mut per: Vec<f64> = self.runs.iter().map(|r| self.kib_per_task(r)).collect();
        per.sort_by(f64::total_cmp);
        let mut walls: Vec<Duration> = self.runs.iter().map(|r| r.wall).collect();
        walls.sort();
        let min_alive = self.runs.iter().map(|r| r.alive).min().unwrap_or(0);
        let mut per_spawned: Vec<f64> = self.runs.iter().map(|r| self.kib_per_spawned(r)).collect();
        per_spawned.sort_by(f64::total_cmp);
        eprintln!(
            "[{bench}] {} runs. wall: first {:.3?}, median {:.3?}, max {:.3?}. \
             Fewest asleep at once: {min_alive} of {SLEEPERS}. Resident growth: first run \
             {} MiB with {} asleep. Per task asleep: first {:.2} KiB, median {:.2}, max {:.2}. \
             Per task of the run: first {:.2} KiB, median {:.2}, max {:.2}",
            self.runs.len(),
            first.wall,
            walls[walls.len() / 2],
            walls[walls.len() - 1],
            first.peak.saturating_sub(self.base.unwrap_or(0)) >> 20,
            first.alive,
            self.kib_per_task(first),
            per[per.len() / 2],
            per[per.len() - 1],
            self.kib_per_spawned(first),
            per_spawned[per_spawned.len() / 2],
            per_spawned[per_spawned.len() - 1],
        );
    }
}

/// Resets the sleeper counters for a new run.
fn reset_counters() {
    STARTED.store(0, Ordering::SeqCst);
    WOKEN.store(0, Ordering::SeqCst);
}

/// The sleepers asleep now.
fn alive() -> u64 {
    STARTED.load(Ordering::SeqCst) - WOKEN.load(Ordering::SeqCst)
}

fn rss() -> u64 {
    rss_bytes().expect("read VmRSS from /proc/self/status")
}

/// One many_sleepers run on spindle: returns the wall time and logs the run.
fn spindle_many(rt: &spindle::Runtime, log: &mut RunLog) -> Duration {
    let run = rt.block_on(|| {
        reset_counters();
        let _ = log.base();
        let start = Instant::now();
        let hs: Vec<_> = (0..SLEEPERS)
            .map(|_| {
                spindle::spawn(|| {
                    STARTED.fetch_add(1, Ordering::Relaxed);
                    spindle::sleep(SLEEPER_NAP).expect("nothing interrupts the sleepers");
                    WOKEN.fetch_add(1, Ordering::Relaxed);
                })
            })
            .collect();
        while STARTED.load(Ordering::Relaxed) < SLEEPERS {
            spindle::sleep(Duration::from_millis(1)).expect("nothing interrupts the spawner");
        }
        let (peak, alive) = (rss(), alive());
        for h in hs {
            h.join().expect("spindle sleeper failed");
        }
        let wall = start.elapsed();
        Run { wall, peak, alive }
    });
    log.runs.push(run);
    run.wall
}

/// One many_sleepers run on tokio.
fn tokio_many(rt: &tokio::runtime::Runtime, log: &mut RunLog) -> Duration {
    let _ = log.base();
    let run = rt.block_on(async {
        tokio::spawn(async move {
            reset_counters();
            let start = Instant::now();
            let hs: Vec<_> = (0..SLEEPERS)
                .map(|_| {
                    tokio::spawn(async {
                        STARTED.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(SLEEPER_NAP).await;
                        WOKEN.fetch_add(1, Ordering::Relaxed);
                    })
                })
                .collect();
            while STARTED.load(Ordering::Relaxed) < SLEEPERS {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let (peak, alive) = (rss(), alive());
            for h in hs {
                h.await.expect("tokio sleeper failed");
            }
            let wall = start.elapsed();
            Run { wall, peak, alive }
        })
        .await
        .expect("tokio spawner failed")
    });
    log.runs.push(run);
    run.wall
}

fn many_sleepers(c: &mut Criterion, p: &Peers) {
    // One run is one iteration (~1.1 s).
    let mut g = flat_group(c, "many_sleepers", ONE_RUN, Duration::from_secs(10));
    match sleepers::max_map_count() {
        Ok(n) if n >= MAP_COUNT_NEEDED || spindle::stack_guard_regions() => {
            let rt = small_stack_runtime();
            let mut log = RunLog::default();
            g.bench_function("spindle", |b| {
                b.iter_custom(|iters| full_batches(iters, 1, |_| spindle_many(&rt, &mut log)))
            });
            log.report("many_sleepers/spindle (16 KiB stacks)");
            rt.shutdown();
        }
        found => eprintln!(
            "[many_sleepers/spindle] SKIPPED: {SLEEPERS} tasks need vm.max_map_count >= \
             {MAP_COUNT_NEEDED} on a kernel without guard regions (each stack is two \
             mappings), found {found:?}; raise it with \
             `sudo sysctl -w vm.max_map_count={MAP_COUNT_NEEDED}`"
        ),
    }
    let mut log = RunLog::default();
    g.bench_function("tokio", |b| {
        b.iter_custom(|iters| full_batches(iters, 1, |_| tokio_many(&p.tokio, &mut log)))
    });
    log.report("many_sleepers/tokio");
    // may is left out: its coroutines cannot reach 100 000 on a stock
    // kernel (see docs/benchmarks.md).
    g.finish();
}

// --------------------------------------------------------------- sleep_burst

/// Tasks asleep until one shared deadline in `sleep_burst`.
const BURST: u64 = 100_000;
/// How far ahead of the first spawn that deadline is, at first: time enough
/// for every task to have started and gone to sleep once spindle's stacks
/// are mapped (see `sleep_burst`). A run whose spawns outlast it is not
/// measured, and the lead doubles (`with_lead`).
const BURST_LEAD: Duration = Duration::from_millis(300);
/// The longest lead tried before the group gives up.
const BURST_MAX_LEAD: Duration = Duration::from_secs(20);
/// The lead of the unmeasured first run, which maps spindle's stacks.
const BURST_WARM_UP_LEAD: Duration = Duration::from_secs(3);

/// The time from the deadline to the last task running, if every task of
/// the burst was asleep before the deadline (else the run measured spawns,
/// not a burst of wake-ups).
fn burst_drain(due: Instant, asleep_at: Instant, last: Instant) -> Option<Duration> {
    (asleep_at < due).then(|| last.saturating_duration_since(due))
}

/// Runs `burst` with the lead in `lead`, doubling it after a run whose
/// spawns outlasted it (that run is not measured): a host that maps stacks
/// slowly, or a pool trimmed between runs (`vm.max_map_count` bounds the
/// idle stacks kept), needs longer than `BURST_LEAD`.
fn with_lead(
    lead: &Cell<Duration>,
    mut burst: impl FnMut(Duration) -> Option<Duration>,
) -> Duration {
    loop {
        if let Some(drain) = burst(lead.get()) {
            return drain;
        }
        let longer = lead.get() * 2;
        assert!(
            longer <= BURST_MAX_LEAD,
            "sleep_burst: 100 000 spawns outlasted a {:?} lead",
            lead.get()
        );
        eprintln!(
            "[sleep_burst] the spawns outlasted a {:?} lead: {longer:?} from now on",
            lead.get()
        );
        lead.set(longer);
    }
}

/// One `sleep_burst` run on spindle: `BURST` tasks sleep until one
/// deadline; returns the time from it to the last of them running.
fn spindle_burst(rt: &spindle::Runtime, lead: Duration) -> Option<Duration> {
    rt.block_on(|| {
        STARTED.store(0, Ordering::SeqCst);
        let due = Instant::now() + lead;
        let hs: Vec<_> = (0..BURST)
            .map(|_| {
                spindle::spawn(move || {
                    STARTED.fetch_add(1, Ordering::Relaxed);
                    spindle::sleep_until(due).expect("nothing interrupts the sleepers");
                    Instant::now()
                })
            })
            .collect();
        while STARTED.load(Ordering::Relaxed) < BURST {
            spindle::sleep(Duration::from_millis(1)).expect("nothing interrupts the spawner");
        }
        let asleep_at = Instant::now();
        let last = hs
            .into_iter()
            .map(|h| h.join().expect("sleeper failed"))
            .max();
        burst_drain(due, asleep_at, last.expect("a burst has tasks"))
    })
}

/// One `sleep_burst` run on tokio.
fn tokio_burst(rt: &tokio::runtime::Runtime, lead: Duration) -> Option<Duration> {
    rt.block_on(async {
        tokio::spawn(async move {
            STARTED.store(0, Ordering::SeqCst);
            let due = Instant::now() + lead;
            let hs: Vec<_> = (0..BURST)
                .map(|_| {
                    tokio::spawn(async move {
                        STARTED.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep_until(due.into()).await;
                        Instant::now()
                    })
                })
                .collect();
            while STARTED.load(Ordering::Relaxed) < BURST {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let asleep_at = Instant::now();
            let mut last = None;
            for h in hs {
                last = last.max(Some(h.await.expect("sleeper failed")));
            }
            burst_drain(due, asleep_at, last.expect("a burst has tasks"))
        })
        .await
        .expect("tokio spawner failed")
    })
}

/// `sleep_burst`: 100 000 tasks asleep until the same instant (a timeout
/// storm: every call to a backend that died, timing out together). Per
/// task, the time from the deadline to the last of them running: how fast a
/// runtime drains a burst of timer wake-ups. tokio's timer wheel fires at
/// millisecond ticks, which adds up to 1 ms to its time (10 ns per task).
fn sleep_burst(c: &mut Criterion, p: &Peers) {
    // One run is one batch (~0.4 s).
    let mut g = flat_group(c, "sleep_burst", ONE_RUN, Duration::from_secs(4));
    // A runtime of its own, shut down at the end: the stacks its pool keeps
    // count against the process-wide limit of idle stacks (stack.rs), and
    // would crowd many_sleepers' out of theirs.
    let rt = small_stack_runtime();
    // Unmeasured first runs: spindle maps its tasks' stacks in its first
    // (then reuses them, as a server would), and tokio allocates its tasks.
    let warm_up = Cell::new(BURST_WARM_UP_LEAD);
    with_lead(&warm_up, |lead| spindle_burst(&rt, lead));
    with_lead(&warm_up, |lead| tokio_burst(&p.tokio, lead));
    let (spindle_lead, tokio_lead) = (Cell::new(BURST_LEAD), Cell::new(BURST_LEAD));
    g.bench_function("spindle", |b| {
        b.iter_custom(|iters| {
            full_batches(iters, BURST, |_| {
                with_lead(&spindle_lead, |lead| spindle_burst(&rt, lead))
            })
        })
    });
    g.bench_function("tokio", |b| {
        b.iter_custom(|iters| {
            full_batches(iters, BURST, |_| {
                with_lead(&tokio_lead, |lead| tokio_burst(&p.tokio, lead))
            })
        })
    });
    g.finish();
    rt.shutdown();
}

// ---------------------------------------------------------------------- main

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let peers = Peers::new(true);
    let polling = polling_runtime();
    sleep_lateness(&mut c, &peers, &polling);
    sleep_lateness_paired(&mut c, &peers, &polling);
    interrupt_latency(&mut c, &peers, &polling);
    interrupt_latency_soon(&mut c, &peers);
    pingpong_butex(&mut c, &peers);
    deadline_churn(&mut c, &peers);
    many_sleepers(&mut c, &peers);
    // After many_sleepers, whose memory per task would otherwise miss the
    // task metas this group leaves in the process-wide table (never freed).
    sleep_burst(&mut c, &peers);
    c.final_summary();
    // Shutting the runtimes down is part of the run: a hang here is a bug.
    let Peers { spindle, tokio } = peers;
    spindle.shutdown();
    polling.shutdown();
    tokio.shutdown_timeout(Duration::from_secs(5));
}
