//! Everything at once. Tasks and plain threads share a mutex, a condvar
//! queue, butexes and countdown events, with deadlines of their own and of
//! enclosing scopes; families of tasks panic on purpose; a driver
//! interrupts and stops tasks at random; the runtime grows meanwhile.
//!
//! Each feature has tests of its own. This one looks for what goes wrong
//! where they meet, and asserts only what must hold whatever the
//! interleaving: money moved under the mutex is conserved; every item
//! queued is taken exactly once; no timed wait ends before its deadline;
//! a task nobody interrupts never sees an interrupt; every panic reaches
//! its joiner with its payload; every task ends; and the global timer is
//! left with nothing pending.
//!
//! In a binary of its own: it checks the global timer's pending count and
//! sets the panic hook, which other tests would share.

mod common;

use spindle::sync::{Condvar, CountdownEvent, Mutex};
use spindle::{Butex, JoinError, JoinHandle, Runtime, SleepError, TaskId, WaitError};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The scale of the run: every actor's number of steps. Debug builds are
/// several times slower and run fewer.
const STEPS: u64 = if cfg!(debug_assertions) { 500 } else { 4_000 };
const ACCOUNTS: usize = 8;
const OPENING_BALANCE: i64 = 1_000;
const BELLS: usize = 4;
/// The payload of every planned panic; the hook keeps them quiet.
const PLANNED: &str = "chaos: a planned panic";

/// A small xorshift generator: each actor has its own, seeded by its index,
/// so a run's choices differ by actor but need no shared state.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }

    fn micros(&mut self, max: u64) -> Duration {
        Duration::from_micros(self.below(max + 1))
    }
}

/// What the actors share, and the tallies they keep.
struct World {
    bank: Mutex<[i64; ACCOUNTS]>,
    queue: Mutex<VecDeque<Item>>,
    queued: Condvar,
    bells: [Butex; BELLS],
    produced: AtomicU64,
    produced_sum: AtomicU64,
    consumed: AtomicU64,
    consumed_sum: AtomicU64,
    /// Tasks not yet dropped: each task's closure holds a [`Live`].
    live: AtomicUsize,
    /// Set just before the runtime is shut down under the actors' feet:
    /// from then on a join may be `Cancelled` and a target may be gone.
    shutting_down: AtomicBool,
    tally: Tally,
}

#[derive(Clone, Copy)]
enum Item {
    Work(u64),
    /// Tells one consumer to leave.
    Leave,
}

/// Counts of the outcomes seen, printed at the end: they show what the run
/// exercised.
#[derive(Default, Debug)]
struct Tally {
    transfers: AtomicUsize,
    lock_timeouts: AtomicUsize,
    scope_expiries: AtomicUsize,
    bell_wakes: AtomicUsize,
    bell_timeouts: AtomicUsize,
    bell_moved: AtomicUsize,
    interrupted: AtomicUsize,
    panics_joined: AtomicUsize,
    joins_cut_short: AtomicUsize,
    condvar_timeouts: AtomicUsize,
}

fn bump(c: &AtomicUsize) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl World {
    fn new() -> Self {
        World {
            bank: Mutex::new([OPENING_BALANCE; ACCOUNTS]),
            queue: Mutex::new(VecDeque::new()),
            queued: Condvar::new(),
            bells: std::array::from_fn(|_| Butex::new(0)),
            produced: AtomicU64::new(0),
            produced_sum: AtomicU64::new(0),
            consumed: AtomicU64::new(0),
            consumed_sum: AtomicU64::new(0),
            live: AtomicUsize::new(0),
            shutting_down: AtomicBool::new(false),
            tally: Tally::default(),
        }
    }
}

/// Counts a task as live until its closure is dropped: when it returns,
/// when it unwinds, or unrun when the runtime stops.
struct Live(Arc<World>);

impl Live {
    fn new(w: &Arc<World>) -> Self {
        w.live.fetch_add(1, Ordering::Relaxed);
        Live(w.clone())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::Release);
    }
}

/// Whether this actor is a task (it may sleep on the runtime) or a thread.
fn on_task() -> bool {
    spindle::current().is_some()
}

/// A pause: a task's sleep or a thread's. A task's is cut short by the
/// deadline of an enclosing scope, and by nothing else.
fn nap(d: Duration) {
    if on_task() {
        match spindle::sleep(d) {
            Ok(()) => {}
            Err(SleepError::DeadlineExceeded) => {
                let scope = spindle::current_deadline().expect("only in a scope");
                not_early("a sleep in a scope", scope);
            }
            Err(e) => panic!("a sleep of a task nobody interrupts: {e}"),
        }
    } else {
        std::thread::sleep(d);
    }
}

/// Checks that a wait that gave up did so no earlier than its deadline.
fn not_early(what: &str, deadline: Instant) {
    let now = Instant::now();
    assert!(now >= deadline, "{what} ended {:?} early", deadline - now);
}

/// Moves money between accounts under the bank's lock, sometimes with a
/// deadline of the lock's own, sometimes inside a deadline scope, sometimes
/// pausing while it holds the lock.
fn teller(w: &World, rng: &mut Rng) {
    for _ in 0..STEPS {
        let (from, to) = (rng.below(ACCOUNTS as u64), rng.below(ACCOUNTS as u64));
        let amount = rng.below(50) as i64;
        let pause = rng.chance(8).then(|| rng.micros(100));
        // The pause comes after the transfer: a task the runtime's stop
        // unwinds from it has moved all of its money or none.
        let transfer = |bank: &mut [i64; ACCOUNTS]| {
            bank[from as usize] -= amount;
            bank[to as usize] += amount;
            bump(&w.tally.transfers);
            if let Some(d) = pause {
                nap(d);
            }
        };
        match rng.below(3) {
            0 => transfer(&mut w.bank.lock().expect("no scope here")),
            1 => {
                let deadline = Instant::now() + rng.micros(300);
                match w.bank.lock_until(Some(deadline)) {
                    Ok(mut g) => transfer(&mut g),
                    Err(WaitError::TimedOut) => {
                        not_early("a lock_until", deadline);
                        bump(&w.tally.lock_timeouts);
                    }
                    Err(e) => panic!("lock_until: {e}"),
                }
            }
            _ => {
                let deadline = Instant::now() + rng.micros(300);
                spindle::with_deadline(deadline, || match w.bank.lock() {
                    Ok(mut g) => transfer(&mut g),
                    Err(WaitError::DeadlineExceeded) => {
                        not_early("a lock in a scope", deadline);
                        bump(&w.tally.scope_expiries);
                    }
                    Err(e) => panic!("lock in a scope: {e}"),
                });
            }
        }
    }
}

/// Puts random items on the queue and notifies, one or all.
fn producer(w: &World, rng: &mut Rng) {
    for _ in 0..STEPS {
        let n = rng.next() >> 16;
        w.queue
            .lock()
            .expect("no scope here")
            .push_back(Item::Work(n));
        w.produced.fetch_add(1, Ordering::Relaxed);
        w.produced_sum.fetch_add(n, Ordering::Relaxed);
        if rng.chance(4) {
            w.queued.notify_all();
        } else {
            w.queued.notify_one();
        }
        if rng.chance(16) {
            nap(rng.micros(200));
        }
    }
}

/// Takes items until told to leave, waiting on the condvar in three ways.
fn consumer(w: &World, rng: &mut Rng) {
    loop {
        let mut q = w.queue.lock().expect("no scope here");
        let item = match rng.below(3) {
            0 => {
                q = w
                    .queued
                    .wait_while(q, |q| q.is_empty())
                    .expect("no scope here");
                q.pop_front()
            }
            1 => {
                let deadline = Instant::now() + rng.micros(500);
                while q.is_empty() {
                    match w.queued.wait_until(q, deadline) {
                        Ok(g) => q = g,
                        Err(WaitError::TimedOut) => {
                            not_early("a condvar wait_until", deadline);
                            bump(&w.tally.condvar_timeouts);
                            // The mutex is unlocked: take it again.
                            q = w.queue.lock().expect("no scope here");
                            if q.is_empty() {
                                break;
                            }
                        }
                        Err(e) => panic!("condvar wait_until: {e}"),
                    }
                }
                q.pop_front()
            }
            _ => {
                drop(q);
                let deadline = Instant::now() + rng.micros(500);
                spindle::with_deadline(deadline, || {
                    let q = w.queue.lock()?;
                    let mut q = w.queued.wait_while(q, |q| q.is_empty())?;
                    Ok(q.pop_front())
                })
                .unwrap_or_else(|e: WaitError| {
                    assert_eq!(e, WaitError::DeadlineExceeded);
                    not_early("a condvar wait in a scope", deadline);
                    bump(&w.tally.scope_expiries);
                    None
                })
            }
        };
        match item {
            Some(Item::Work(n)) => {
                w.consumed.fetch_add(1, Ordering::Relaxed);
                w.consumed_sum.fetch_add(n, Ordering::Relaxed);
            }
            Some(Item::Leave) => return,
            None => {}
        }
    }
}

/// Waits on the bells with deadlines; on a task it may be interrupted only
/// if it is a target.
fn listener(w: &World, rng: &mut Rng, target: bool) {
    for _ in 0..STEPS {
        let bell = &w.bells[rng.below(BELLS as u64) as usize];
        let seen = bell.value().load(Ordering::Acquire);
        let deadline = Instant::now() + rng.micros(400);
        match bell.wait(seen, Some(deadline)) {
            Ok(()) => bump(&w.tally.bell_wakes),
            Err(WaitError::WouldBlock) => bump(&w.tally.bell_moved),
            Err(WaitError::TimedOut) => {
                not_early("a butex wait", deadline);
                bump(&w.tally.bell_timeouts);
            }
            Err(WaitError::Interrupted) if target => bump(&w.tally.interrupted),
            Err(WaitError::Stopped) if target => return,
            Err(e) => panic!("a butex wait of a task nobody interrupts: {e}"),
        }
    }
}

/// Rings the bells: moves a bell's value and wakes one or all.
fn ringer(w: &World, rng: &mut Rng) {
    for _ in 0..STEPS {
        let bell = &w.bells[rng.below(BELLS as u64) as usize];
        bell.value().fetch_add(1, Ordering::Release);
        if rng.chance(2) {
            bell.wake_all();
        } else {
            bell.wake_one();
        }
        nap(rng.micros(100));
    }
}

/// A target of the driver: sleeps and listens until stopped, and takes its
/// interrupts in stride.
fn target(w: &World, rng: &mut Rng) {
    loop {
        let r = if rng.chance(2) {
            spindle::sleep(rng.micros(2_000))
        } else {
            listener(w, rng, true);
            if spindle::is_stopped() {
                Err(SleepError::Stopped)
            } else {
                Ok(())
            }
        };
        match r {
            Ok(()) => {}
            Err(SleepError::Interrupted) => bump(&w.tally.interrupted),
            Err(SleepError::Stopped) => {
                assert!(spindle::is_stopped());
                // Every later sleep fails at once.
                assert_eq!(
                    spindle::sleep(Duration::from_secs(3600)),
                    Err(SleepError::Stopped)
                );
                return;
            }
            Err(e) => panic!("a target's sleep: {e}"),
        }
    }
}

/// A parent task: spawns children, some of which panic, waits for them all
/// on a countdown event, and joins them, some under a scope too short for
/// the join. Returns how many children it spawned.
fn family(w: &Arc<World>, rng: &mut Rng) -> u64 {
    let kids = 1 + rng.below(6);
    let done = Arc::new(CountdownEvent::new(kids as u32));
    let children: Vec<_> = (0..kids)
        .map(|k| {
            let done = done.clone();
            let panics = rng.chance(3);
            let pause = rng.micros(300);
            let spawn = if rng.chance(2) {
                spindle::spawn::<_, u64>
            } else {
                spindle::spawn_urgent::<_, u64>
            };
            let live = Live::new(w);
            let child = spawn(move || {
                let _live = live;
                /// Signals the parent however the child ends.
                struct Signal(Arc<CountdownEvent>);
                impl Drop for Signal {
                    fn drop(&mut self) {
                        self.0.signal(1);
                    }
                }
                let _signal = Signal(done);
                spindle::sleep(pause).expect("nobody interrupts a child");
                if panics {
                    std::panic::panic_any(PLANNED);
                }
                k * k
            });
            (k, panics, child)
        })
        .collect();
    // Half the time, first wait for them all on the event.
    if rng.chance(2) {
        let deadline = Instant::now() + rng.micros(200);
        match done.wait_until(deadline) {
            Ok(()) => assert_eq!(done.count(), 0),
            Err(WaitError::TimedOut) => not_early("a countdown wait", deadline),
            Err(e) => panic!("a countdown wait: {e}"),
        }
        done.wait().expect("no scope here");
    }
    for (k, panics, child) in children {
        let short = rng.chance(5).then(|| Instant::now() + rng.micros(100));
        let r = match short {
            Some(deadline) => spindle::with_deadline(deadline, || child.join()),
            None => child.join(),
        };
        match r {
            Ok(v) => assert!(!panics && v == k * k, "child {k} returned {v}"),
            Err(JoinError::Panicked(p)) => {
                assert!(panics, "child {k} panicked but was not meant to");
                assert_eq!(p.downcast_ref::<&str>(), Some(&PLANNED));
                bump(&w.tally.panics_joined);
            }
            Err(JoinError::DeadlineExceeded) => {
                not_early("a join in a scope", short.expect("only in a scope"));
                bump(&w.tally.joins_cut_short);
            }
            Err(JoinError::Cancelled) if w.shutting_down.load(Ordering::Acquire) => {}
            Err(e) => panic!("joining child {k}: {e}"),
        }
    }
    kids
}

/// Interrupts random targets until told it is enough, then stops them all.
/// Once the runtime is shutting down, the targets may be gone.
fn driver(w: &World, targets: &[TaskId], enough: &AtomicBool) {
    let alive = |r: Result<(), spindle::NoSuchTask>| {
        if r.is_err() {
            assert!(
                w.shutting_down.load(Ordering::Acquire),
                "targets live until stopped"
            );
        }
    };
    let mut rng = Rng::new(0xd1);
    while !enough.load(Ordering::Acquire) {
        let t = targets[rng.below(targets.len() as u64) as usize];
        alive(spindle::interrupt(t));
        std::thread::sleep(rng.micros(50));
    }
    for &t in targets {
        alive(spindle::stop(t));
    }
}

const CONSUMERS: u64 = 6;

/// Everybody, started: the tasks' handles and the threads'.
struct Cast {
    targets: Vec<JoinHandle<()>>,
    consumers: Vec<JoinHandle<()>>,
    /// Tellers, listeners, producers and ringers.
    tasks: Vec<JoinHandle<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// Each returns how many children it had.
    families: Vec<JoinHandle<u64>>,
    driver: std::thread::JoinHandle<()>,
    enough: Arc<AtomicBool>,
}

impl Cast {
    fn start(rt: &Runtime, w: &Arc<World>) -> Cast {
        let task = |i: u64, f: fn(&World, &mut Rng)| {
            let (w, live) = (w.clone(), Live::new(w));
            rt.spawn(move || {
                let _live = live;
                f(&w, &mut Rng::new(i))
            })
        };
        let thread = |i: u64, f: fn(&World, &mut Rng)| {
            let w = w.clone();
            std::thread::spawn(move || f(&w, &mut Rng::new(i)))
        };
        // Targets first, so that the driver has someone to interrupt.
        let targets: Vec<_> = (0..8).map(|i| task(100 + i, target)).collect();
        let target_ids: Vec<_> = targets.iter().map(|h| h.id()).collect();
        let enough = Arc::new(AtomicBool::new(false));
        let driver = {
            let (w, enough) = (w.clone(), enough.clone());
            std::thread::spawn(move || driver(&w, &target_ids, &enough))
        };
        let consumers = (0..CONSUMERS).map(|i| task(200 + i, consumer)).collect();
        let mut tasks = Vec::new();
        let mut threads = Vec::new();
        for i in 0..6 {
            tasks.push(task(300 + i, teller));
            tasks.push(task(400 + i, |w, r| listener(w, r, false)));
        }
        for i in 0..4 {
            tasks.push(task(500 + i, producer));
            tasks.push(task(600 + i, ringer));
        }
        for i in 0..2 {
            threads.push(thread(700 + i, teller));
            threads.push(thread(800 + i, |w, r| listener(w, r, false)));
            threads.push(thread(900 + i, producer));
            threads.push(thread(1000 + i, ringer));
        }
        let families = (0..8)
            .map(|i| {
                let (w, live) = (w.clone(), Live::new(w));
                rt.spawn(move || {
                    let _live = live;
                    let mut rng = Rng::new(1100 + i);
                    (0..STEPS / 10).map(|_| family(&w, &mut rng)).sum()
                })
            })
            .collect();
        Cast {
            targets,
            consumers,
            tasks,
            threads,
            families,
            driver,
            enough,
        }
    }
}

/// What holds however a run ends: money is conserved, and every item
/// produced was consumed or is still queued.
fn check_books(w: &World) {
    let bank = *w.bank.lock().expect("no scope here");
    assert_eq!(
        bank.iter().sum::<i64>(),
        OPENING_BALANCE * ACCOUNTS as i64,
        "money moved under the mutex is conserved: {bank:?}"
    );
    let (mut count, mut sum) = (0, 0u64);
    for item in w.queue.lock().expect("no scope here").iter() {
        if let Item::Work(n) = item {
            count += 1;
            sum = sum.wrapping_add(*n);
        }
    }
    assert_eq!(
        w.consumed.load(Ordering::Relaxed) + count,
        w.produced.load(Ordering::Relaxed),
        "every item is taken once, or still queued"
    );
    assert_eq!(
        w.consumed_sum.load(Ordering::Relaxed).wrapping_add(sum),
        w.produced_sum.load(Ordering::Relaxed),
        "every item is taken once, or still queued"
    );
}

/// Sets up what both tests need, once, and runs one at a time (both check
/// the global timer). Planned panics stay quiet; any other is reported as
/// usual. A test that hangs says so and fails, instead of waiting for CI's
/// limit.
fn scene(name: &'static str, test: impl FnOnce(&Arc<World>)) {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let default_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<&str>() != Some(&PLANNED) {
                default_hook(info);
            }
        }));
    });
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let w = Arc::new(World::new());
    let finished = Arc::new(AtomicBool::new(false));
    let hang_watch = {
        let (w, finished) = (w.clone(), finished.clone());
        std::thread::spawn(move || {
            let start = Instant::now();
            while !finished.load(Ordering::Acquire) {
                if start.elapsed() > Duration::from_secs(300) {
                    eprintln!("{name}: no end after 300 s; tallies: {:?}", w.tally);
                    std::process::exit(101);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    test(&w);
    assert_eq!(w.live.load(Ordering::Acquire), 0, "every task was dropped");
    check_books(&w);
    let stats = spindle_timer::TimerThread::global().stats();
    assert_eq!(stats.pending, 0, "no timer left behind: {stats:?}");
    eprintln!("{name}: {:?}", w.tally);
    finished.store(true, Ordering::Release);
    hang_watch.join().expect("the watch does not panic");
}

/// The whole cast plays to the end, while the runtime grows.
#[test]
fn everything_at_once_keeps_every_invariant() {
    scene("chaos to the end", |w| {
        let rt = common::rt(2);
        let cast = Cast::start(&rt, w);
        std::thread::sleep(Duration::from_millis(20));
        rt.set_workers(3).expect("grow to 3");
        std::thread::sleep(Duration::from_millis(20));
        rt.set_workers(4).expect("grow to 4");

        for h in cast.tasks {
            h.join().expect("no actor task panics");
        }
        for h in cast.threads {
            h.join().expect("no actor thread panics");
        }
        let children: u64 = cast
            .families
            .into_iter()
            .map(|h| h.join().expect("no parent panics"))
            .sum();
        assert!(children > 0);
        // Every producer is done: one leave per consumer ends them.
        {
            let mut q = w.queue.lock().expect("no scope here");
            q.extend((0..CONSUMERS).map(|_| Item::Leave));
        }
        w.queued.notify_all();
        for h in cast.consumers {
            h.join().expect("no consumer panics");
        }
        cast.enough.store(true, Ordering::Release);
        cast.driver.join().expect("the driver does not panic");
        for h in cast.targets {
            h.join().expect("a stopped target returns");
        }
        assert!(w.queue.lock().expect("no scope here").is_empty());
        assert!(w.tally.transfers.load(Ordering::Relaxed) > 0);
        // Children whose join was cut short were detached: they end anyway.
        common::wait_for("every detached child to finish", || {
            let s = rt.stats();
            s.spawned == s.finished
        });
        // The runtime's stall watchdog is a periodic timer: shut down
        // before the timer is checked.
        rt.shutdown();
    });
}

/// The runtime shuts down at a random moment under the whole cast: the
/// shutdown returns, every task is dropped (run to its end, unwound, or
/// never run), every join returns, and the plain threads that share the
/// primitives with the cancelled tasks carry on to their ends.
#[test]
fn a_shutdown_in_the_middle_of_everything_loses_nothing() {
    scene("chaos cut short", |w| {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.subsec_nanos() as u64);
        let after = Rng::new(seed).micros(if cfg!(debug_assertions) {
            100_000
        } else {
            40_000
        });
        eprintln!("chaos cut short: after {after:?}");
        // Not the defaults, to cover other paths: workers that poll rather
        // than park while their tasks sleep, a watchdog sampling every
        // quarter of a millisecond, and small stacks.
        let rt = spindle::Runtime::builder()
            .workers(3)
            .sleep_spin(Duration::MAX)
            .stall_threshold(Duration::from_millis(1))
            .stack_size(128 * 1024)
            .build()
            .expect("build the runtime");
        let cast = Cast::start(&rt, w);
        std::thread::sleep(after);
        w.shutting_down.store(true, Ordering::Release);
        rt.shutdown();

        let ended = |r: Result<(), JoinError>| match r {
            Ok(()) | Err(JoinError::Cancelled) => {}
            Err(e) => panic!("a task of the cast: {e}"),
        };
        cast.tasks.into_iter().for_each(|h| ended(h.join()));
        cast.consumers.into_iter().for_each(|h| ended(h.join()));
        cast.families
            .into_iter()
            .for_each(|h| ended(h.join().map(drop)));
        cast.targets.into_iter().for_each(|h| ended(h.join()));
        cast.enough.store(true, Ordering::Release);
        cast.driver.join().expect("the driver does not panic");
        for h in cast.threads {
            h.join().expect("no actor thread panics");
        }
    });
}
