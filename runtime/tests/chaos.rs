//! Everything at once. Tasks and plain threads share a mutex, a condvar
//! queue, butexes and countdown events, with deadlines of their own and of
//! enclosing scopes; families of tasks panic on purpose; a driver
//! interrupts and stops tasks at random; the runtime grows meanwhile.
//!
//! Each feature has tests of its own. This one looks for what goes wrong
//! where they meet, and asserts only what must hold whatever the
//! interleaving: one holder of the mutex at a time, and the money moved
//! under it conserved; every item queued taken exactly once; no timed wait
//! ended before the deadline that applied to it, nor by the wrong one; a
//! task nobody interrupts never sees an interrupt, and the waits of `sync`
//! never do; every panic reaches its joiner with its payload; no task
//! inherits a scope; every task ends and is dropped; and the global timer
//! is left with nothing pending.
//!
//! Each actor draws its choices from a generator seeded by the run's seed
//! and its own number: a failing run prints the seed, and `CHAOS_SEED=<n>`
//! replays its choices (not its interleaving).
//!
//! In a binary of its own: it checks the global timer's pending count and
//! sets the panic hook, which other tests would share.

mod common;

use spindle::sync::{Condvar, CountdownEvent, Mutex, MutexGuard};
use spindle::{Butex, JoinError, JoinHandle, Runtime, SleepError, TaskId, WaitError};
use spindle_testkit::Rng;
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
/// The cast: how many of each actor.
const TARGETS: u64 = 8;
const TASK_CONSUMERS: u64 = 6;
const THREAD_CONSUMERS: u64 = 2;
const FAMILIES: u64 = 8;
/// Of each of tellers and listeners (and half as many producers and
/// ringers) as tasks, and as plain threads.
const TASK_ACTORS: u64 = 6;
const THREAD_ACTORS: u64 = 2;
/// The payload of every planned panic; the hook keeps them quiet.
const PLANNED: &str = "chaos: a planned panic";

/// What the actors share, and the tallies they keep.
struct World {
    seed: u64,
    bank: Mutex<[i64; ACCOUNTS]>,
    /// Set while somebody holds `bank`: a second holder finds it set.
    bank_held: AtomicBool,
    queue: Mutex<Queue>,
    not_empty: Condvar,
    bells: [Butex; BELLS],
    /// Tasks not yet dropped: each task's closure holds a [`Live`].
    live: AtomicUsize,
    /// Children that began to run.
    children_ran: AtomicU64,
    /// Whether the runtime may be shut down under the actors' feet: then a
    /// join may be `Cancelled`.
    cut_short: bool,
    tally: Tally,
}

/// The queue and its books, kept under its lock, so that at every hold of
/// the lock `produced == consumed + queued`.
#[derive(Default)]
struct Queue {
    items: VecDeque<Item>,
    produced: u64,
    produced_sum: u64,
    consumed: u64,
    consumed_sum: u64,
}

#[derive(Clone, Copy)]
enum Item {
    Work(u64),
    /// Tells one consumer to leave.
    Leave,
}

impl Queue {
    fn push(&mut self, n: u64) {
        self.items.push_back(Item::Work(n));
        self.produced += 1;
        self.produced_sum = self.produced_sum.wrapping_add(n);
    }

    fn take(&mut self) -> Option<Item> {
        let item = self.items.pop_front();
        if let Some(Item::Work(n)) = item {
            self.consumed += 1;
            self.consumed_sum = self.consumed_sum.wrapping_add(n);
        }
        item
    }
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
    sync_waits_of_targets: AtomicUsize,
    panics_joined: AtomicUsize,
    joins_cut_short: AtomicUsize,
    condvar_timeouts: AtomicUsize,
}

fn bump(c: &AtomicUsize) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl World {
    fn new(seed: u64, cut_short: bool) -> Self {
        World {
            seed,
            bank: Mutex::new([OPENING_BALANCE; ACCOUNTS]),
            bank_held: AtomicBool::new(false),
            queue: Mutex::new(Queue::default()),
            not_empty: Condvar::new(),
            bells: std::array::from_fn(|_| Butex::new(0)),
            live: AtomicUsize::new(0),
            children_ran: AtomicU64::new(0),
            cut_short,
            tally: Tally::default(),
        }
    }

    fn rng(&self, actor: u64) -> Rng {
        Rng::new(self.seed, actor)
    }

    /// The queue's lock, outside any deadline scope.
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().expect("outside any scope")
    }
}

/// Marks the bank held for as long as it lives; dropped before the guard
/// it comes with (declared after it), and by an unwind too.
struct BankHeld<'a>(&'a AtomicBool);

impl<'a> BankHeld<'a> {
    fn enter(flag: &'a AtomicBool) -> Self {
        assert!(
            !flag.swap(true, Ordering::Acquire),
            "two holders of the mutex at once"
        );
        BankHeld(flag)
    }
}

impl Drop for BankHeld<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
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

/// A pause: `spindle::sleep`, which on a plain thread is the OS's. It is
/// cut short by the deadline of an enclosing scope, and by nothing else.
fn nap(d: Duration) {
    match spindle::sleep(d) {
        Ok(()) => {}
        Err(SleepError::DeadlineExceeded) => {
            let scope = spindle::current_deadline().expect("only in a scope");
            not_early("a sleep in a scope", scope);
        }
        Err(e) => panic!("a sleep of an actor nobody interrupts: {e}"),
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
        let pause = rng.one_in(8).then(|| rng.micros(0, 100));
        // The pause comes after the transfer: a task the runtime's stop
        // unwinds from it has moved all of its money or none.
        let transfer = |bank: &mut MutexGuard<'_, [i64; ACCOUNTS]>| {
            let _held = BankHeld::enter(&w.bank_held);
            bank[from as usize] -= amount;
            bank[to as usize] += amount;
            bump(&w.tally.transfers);
            if let Some(d) = pause {
                nap(d);
            }
        };
        match rng.below(3) {
            0 => transfer(&mut w.bank.lock().expect("outside any scope")),
            1 => {
                let deadline = Instant::now() + rng.micros(0, 300);
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
                let deadline = Instant::now() + rng.micros(0, 300);
                spindle::with_deadline(deadline, || match w.bank.lock() {
                    Ok(mut g) => transfer(&mut g),
                    Err(WaitError::DeadlineExceeded) => {
                        not_early("a lock in a scope", deadline);
                        bump(&w.tally.scope_expiries);
                    }
                    Err(e) => panic!("lock in a scope: {e}"),
                });
                assert_eq!(spindle::current_deadline(), None, "the scope ended");
            }
        }
    }
}

/// Puts random items on the queue and notifies, one or all.
fn producer(w: &World, rng: &mut Rng) {
    for _ in 0..STEPS {
        w.queue().push(rng.next_u64() >> 16);
        if rng.one_in(4) {
            w.not_empty.notify_all();
        } else {
            w.not_empty.notify_one();
        }
        if rng.one_in(16) {
            nap(rng.micros(0, 200));
        }
    }
}

/// Takes items until told to leave, waiting on the condvar in three ways.
fn consumer(w: &World, rng: &mut Rng) {
    loop {
        let mut q = w.queue();
        let item = match rng.below(3) {
            0 => {
                q = w
                    .not_empty
                    .wait_while(q, |q| q.items.is_empty())
                    .expect("outside any scope");
                q.take()
            }
            1 => {
                let deadline = Instant::now() + rng.micros(0, 500);
                while q.items.is_empty() {
                    match w.not_empty.wait_until(q, deadline) {
                        Ok(g) => q = g,
                        Err(WaitError::TimedOut) => {
                            not_early("a condvar wait_until", deadline);
                            bump(&w.tally.condvar_timeouts);
                            // The mutex is unlocked: take it again.
                            q = w.queue();
                            if q.items.is_empty() {
                                break;
                            }
                        }
                        Err(e) => panic!("condvar wait_until: {e}"),
                    }
                }
                q.take()
            }
            _ => {
                drop(q);
                let deadline = Instant::now() + rng.micros(0, 500);
                let taken = spindle::with_deadline(deadline, || {
                    let q = w.queue.lock()?;
                    let mut q = w.not_empty.wait_while(q, |q| q.items.is_empty())?;
                    Ok(q.take())
                });
                assert_eq!(spindle::current_deadline(), None, "the scope ended");
                taken.unwrap_or_else(|e: WaitError| {
                    assert_eq!(e, WaitError::DeadlineExceeded);
                    not_early("a condvar wait in a scope", deadline);
                    bump(&w.tally.scope_expiries);
                    None
                })
            }
        };
        if let Some(Item::Leave) = item {
            return;
        }
    }
}

/// Who may interrupt or stop a listener.
#[derive(Clone, Copy, PartialEq)]
enum Listener {
    /// Nobody: an interrupt would be a phantom.
    Untouchable,
    /// The driver (the listener is a target).
    Target,
}

/// Waits on the bells with deadlines of its own, and now and then inside a
/// scope, earlier or later than its own deadline. Returns whether it was
/// stopped.
fn listen(w: &World, rng: &mut Rng, who: Listener) -> bool {
    for _ in 0..STEPS {
        let bell = &w.bells[rng.below(BELLS as u64) as usize];
        let seen = bell.value().load(Ordering::Acquire);
        let now = Instant::now();
        let own = now + rng.micros(0, 400);
        let scope = rng.one_in(3).then(|| now + rng.micros(0, 400));
        let r = match scope {
            Some(s) => spindle::with_deadline(s, || bell.wait(seen, Some(own))),
            None => bell.wait(seen, Some(own)),
        };
        match r {
            Ok(()) => bump(&w.tally.bell_wakes),
            Err(WaitError::WouldBlock) => bump(&w.tally.bell_moved),
            Err(WaitError::TimedOut) => {
                assert!(
                    scope.is_none_or(|s| own <= s),
                    "a wait timed out by its own deadline though its scope's was earlier"
                );
                not_early("a butex wait", own);
                bump(&w.tally.bell_timeouts);
            }
            Err(WaitError::DeadlineExceeded) => {
                let s = scope.expect("DeadlineExceeded outside any scope");
                assert!(
                    s < own,
                    "a wait cut short by a scope later than its own deadline"
                );
                not_early("a butex wait in a scope", s);
                bump(&w.tally.scope_expiries);
            }
            Err(WaitError::Interrupted) if who == Listener::Target => bump(&w.tally.interrupted),
            Err(WaitError::Stopped) if who == Listener::Target => return true,
            Err(e) => panic!("a butex wait of a listener nobody interrupts: {e}"),
        }
    }
    false
}

/// A listener nobody interrupts.
fn untouchable_listener(w: &World, rng: &mut Rng) {
    listen(w, rng, Listener::Untouchable);
}

/// Rings the bells: moves a bell's value and wakes one or all.
fn ringer(w: &World, rng: &mut Rng) {
    for _ in 0..STEPS {
        let bell = &w.bells[rng.below(BELLS as u64) as usize];
        bell.value().fetch_add(1, Ordering::Release);
        if rng.one_in(2) {
            bell.wake_all();
        } else {
            bell.wake_one();
        }
        nap(rng.micros(0, 100));
    }
}

/// A target of the driver: sleeps, listens and waits on `sync` until
/// stopped, and takes its interrupts in stride. The waits of `sync` must
/// never see the interrupts and the stop.
fn target(w: &World, rng: &mut Rng) {
    let never_set = CountdownEvent::new(1);
    loop {
        let stopped = match rng.below(4) {
            0 => match spindle::sleep(rng.micros(0, 2_000)) {
                Ok(()) => false,
                Err(SleepError::Interrupted) => {
                    bump(&w.tally.interrupted);
                    false
                }
                Err(SleepError::Stopped) => true,
                Err(e) => panic!("a target's sleep: {e}"),
            },
            1 => listen(w, rng, Listener::Target),
            2 => {
                let deadline = Instant::now() + rng.micros(0, 300);
                match w.bank.lock_until(Some(deadline)) {
                    Ok(g) => drop((BankHeld::enter(&w.bank_held), g)),
                    Err(WaitError::TimedOut) => not_early("a target's lock_until", deadline),
                    Err(e) => panic!("a target's lock_until: {e}"),
                }
                bump(&w.tally.sync_waits_of_targets);
                false
            }
            _ => {
                let deadline = Instant::now() + rng.micros(0, 300);
                assert_eq!(
                    never_set.wait_until(deadline),
                    Err(WaitError::TimedOut),
                    "a target's countdown wait"
                );
                not_early("a target's countdown wait", deadline);
                bump(&w.tally.sync_waits_of_targets);
                false
            }
        };
        if stopped {
            break;
        }
    }
    assert!(spindle::is_stopped());
    // Every later sleep and butex wait fails at once; the mutex still locks.
    assert_eq!(
        spindle::sleep(Duration::from_secs(3600)),
        Err(SleepError::Stopped)
    );
    let bell = &w.bells[0];
    assert_eq!(
        bell.wait(bell.value().load(Ordering::Acquire), None),
        Err(WaitError::Stopped)
    );
    drop(w.bank.lock().expect("outside any scope"));
}

/// A parent task: spawns children, some inside a scope (which they must
/// not inherit), some of which panic; waits for them all on a countdown
/// event; and joins them, some under a scope too short for the join.
/// Returns how many children it spawned.
fn family(w: &Arc<World>, rng: &mut Rng) -> u64 {
    let kids = 1 + rng.below(6);
    let done = Arc::new(CountdownEvent::new(kids as u32));
    let children: Vec<_> = (0..kids)
        .map(|k| {
            /// Signals the parent however the child ends, even unrun.
            struct Signal(Arc<CountdownEvent>);
            impl Drop for Signal {
                fn drop(&mut self) {
                    self.0.signal(1);
                }
            }
            let (signal, live, w2) = (Signal(done.clone()), Live::new(w), w.clone());
            let panics = rng.one_in(3);
            let pause = rng.micros(0, 300);
            let body = move || {
                let (_signal, _live) = (signal, live);
                w2.children_ran.fetch_add(1, Ordering::Relaxed);
                assert_eq!(
                    spindle::current_deadline(),
                    None,
                    "a child inherited a scope"
                );
                spindle::sleep(pause).expect("nobody interrupts a child");
                if panics {
                    std::panic::panic_any(PLANNED);
                }
                k * k
            };
            let urgent = rng.one_in(2);
            let spawn = || {
                if urgent {
                    spindle::spawn_urgent(body)
                } else {
                    spindle::spawn(body)
                }
            };
            let child = if rng.one_in(2) {
                spindle::with_deadline(Instant::now() + Duration::from_secs(60), spawn)
            } else {
                spawn()
            };
            (k, panics, child)
        })
        .collect();
    // Half the time, first wait for them all on the event.
    if rng.one_in(2) {
        let deadline = Instant::now() + rng.micros(0, 200);
        match done.wait_until(deadline) {
            Ok(()) => assert_eq!(done.count(), 0),
            Err(WaitError::TimedOut) => not_early("a countdown wait", deadline),
            Err(e) => panic!("a countdown wait: {e}"),
        }
        done.wait().expect("outside any scope");
    }
    for (k, panics, child) in children {
        let join_deadline = rng.one_in(5).then(|| Instant::now() + rng.micros(0, 100));
        let r = match join_deadline {
            Some(deadline) => spindle::with_deadline(deadline, || child.join()),
            None => child.join(),
        };
        match r {
            Ok(v) => {
                assert!(!panics, "child {k} was meant to panic");
                assert_eq!(v, k * k, "child {k}'s value");
            }
            Err(JoinError::Panicked(p)) => {
                assert!(panics, "child {k} panicked but was not meant to");
                assert_eq!(p.downcast_ref::<&str>(), Some(&PLANNED));
                bump(&w.tally.panics_joined);
            }
            Err(JoinError::DeadlineExceeded) => {
                not_early("a join in a scope", join_deadline.expect("only in a scope"));
                bump(&w.tally.joins_cut_short);
            }
            Err(JoinError::Cancelled) if w.cut_short => {}
            Err(e) => panic!("joining child {k}: {e}"),
        }
    }
    kids
}

/// Interrupts random targets until told it is enough, then stops them all.
/// Returns how many of its calls found their target gone.
fn driver(w: &World, targets: &[TaskId], enough: &AtomicBool) -> usize {
    let mut rng = w.rng(0xd1);
    let mut gone = 0;
    while !enough.load(Ordering::Acquire) {
        let t = targets[rng.below(targets.len() as u64) as usize];
        gone += spindle::interrupt(t).is_err() as usize;
        std::thread::sleep(rng.micros(0, 50));
    }
    for &t in targets {
        gone += spindle::stop(t).is_err() as usize;
    }
    gone
}

/// Everybody, started: the tasks' handles and the threads'.
struct Cast {
    targets: Vec<JoinHandle<()>>,
    task_consumers: Vec<JoinHandle<()>>,
    thread_consumers: Vec<std::thread::JoinHandle<()>>,
    /// Tellers, listeners, producers and ringers.
    other_tasks: Vec<JoinHandle<()>>,
    other_threads: Vec<std::thread::JoinHandle<()>>,
    /// Each returns how many children it had.
    families: Vec<JoinHandle<u64>>,
    driver: std::thread::JoinHandle<usize>,
    enough: Arc<AtomicBool>,
}

impl Cast {
    /// Starts the cast, its tasks spread over `rts` in turn.
    fn start(rts: &[&Runtime], w: &Arc<World>) -> Cast {
        // Each actor's number seeds its generator (and picks its runtime).
        let mut actor = 0;
        let mut next_actor = || {
            actor += 1;
            actor
        };
        let runtime_of = |actor: u64| rts[actor as usize % rts.len()];
        let mut task = |f: fn(&World, &mut Rng)| {
            let actor = next_actor();
            let (w, live, mut rng) = (w.clone(), Live::new(w), w.rng(actor));
            runtime_of(actor).spawn(move || {
                let _live = live;
                f(&w, &mut rng)
            })
        };
        // Targets first, so that the driver has someone to interrupt.
        let targets: Vec<_> = (0..TARGETS).map(|_| task(target)).collect();
        let task_consumers = (0..TASK_CONSUMERS).map(|_| task(consumer)).collect();
        let mut other_tasks = Vec::new();
        for i in 0..TASK_ACTORS {
            other_tasks.push(task(teller));
            other_tasks.push(task(untouchable_listener));
            if i % 2 == 0 {
                other_tasks.push(task(producer));
                other_tasks.push(task(ringer));
            }
        }
        let mut thread = |f: fn(&World, &mut Rng)| {
            let (w, mut rng) = (w.clone(), w.rng(next_actor()));
            std::thread::spawn(move || f(&w, &mut rng))
        };
        let thread_consumers = (0..THREAD_CONSUMERS).map(|_| thread(consumer)).collect();
        let mut other_threads = Vec::new();
        for _ in 0..THREAD_ACTORS {
            other_threads.push(thread(teller));
            other_threads.push(thread(untouchable_listener));
            other_threads.push(thread(producer));
            other_threads.push(thread(ringer));
        }
        let families = (0..FAMILIES)
            .map(|_| {
                let actor = next_actor();
                let (w, live, mut rng) = (w.clone(), Live::new(w), w.rng(actor));
                runtime_of(actor).spawn(move || {
                    let _live = live;
                    (0..STEPS / 10).map(|_| family(&w, &mut rng)).sum()
                })
            })
            .collect();
        let target_ids: Vec<_> = targets.iter().map(|h| h.id()).collect();
        let enough = Arc::new(AtomicBool::new(false));
        let driver = {
            let (w, enough) = (w.clone(), enough.clone());
            std::thread::spawn(move || driver(&w, &target_ids, &enough))
        };
        Cast {
            targets,
            task_consumers,
            thread_consumers,
            other_tasks,
            other_threads,
            families,
            driver,
            enough,
        }
    }
}

/// Tells `n` consumers to leave.
fn send_away(w: &World, n: u64) {
    w.queue().items.extend((0..n).map(|_| Item::Leave));
    w.not_empty.notify_all();
}

/// What holds however a run ends: money is conserved, and every item
/// produced was consumed or is still queued.
fn check_books(w: &World) {
    let bank = *w.bank.lock().expect("outside any scope");
    assert_eq!(
        bank.iter().sum::<i64>(),
        OPENING_BALANCE * ACCOUNTS as i64,
        "money moved under the mutex is conserved: {bank:?}"
    );
    let q = w.queue();
    let (mut queued, mut queued_sum) = (0, 0u64);
    for item in &q.items {
        if let Item::Work(n) = item {
            queued += 1;
            queued_sum = queued_sum.wrapping_add(*n);
        }
    }
    assert_eq!(
        (q.consumed + queued, q.consumed_sum.wrapping_add(queued_sum)),
        (q.produced, q.produced_sum),
        "every item is taken once, or still queued"
    );
}

/// Fails the test if it has not ended after `limit`, instead of letting it
/// wait for CI's own limit; disarmed when dropped, however the test ends.
struct HangWatch {
    done: Arc<AtomicBool>,
}

impl HangWatch {
    fn arm(name: &'static str, limit: Duration, w: &Arc<World>) -> Self {
        let done = Arc::new(AtomicBool::new(false));
        let (finished, w) = (done.clone(), w.clone());
        std::thread::spawn(move || {
            let start = Instant::now();
            while !finished.load(Ordering::Acquire) {
                if start.elapsed() > limit {
                    eprintln!(
                        "{name} (seed {}): no end after {limit:?}; {} tasks live; {:?}",
                        w.seed,
                        w.live.load(Ordering::Relaxed),
                        w.tally
                    );
                    std::process::exit(101);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        HangWatch { done }
    }
}

impl Drop for HangWatch {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
    }
}

/// The run's seed: `CHAOS_SEED`, or the clock's nanoseconds.
fn seed() -> u64 {
    match std::env::var("CHAOS_SEED") {
        Ok(s) => s.parse().expect("CHAOS_SEED is a number"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
    }
}

/// Sets up what both tests need and runs one at a time (both check the
/// global timer), then checks what must hold however the run ended.
/// Planned panics stay quiet; any other is reported as usual.
fn scene(name: &'static str, cut_short: bool, play: impl FnOnce(&Arc<World>)) {
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
    let w = Arc::new(World::new(seed(), cut_short));
    eprintln!("{name}: seed {}", w.seed);
    let _watch = HangWatch::arm(name, Duration::from_secs(300), &w);
    play(&w);
    assert_eq!(w.live.load(Ordering::Acquire), 0, "every task was dropped");
    check_books(&w);
    common::wait_for_no_pending_timer();
    eprintln!("{name}: {:?}", w.tally);
}

/// The whole cast plays to the end, while the runtime grows.
#[test]
fn everything_at_once_keeps_every_invariant() {
    scene("chaos to the end", false, |w| {
        let rt = common::rt(2);
        let cast = Cast::start(&[&rt], w);
        std::thread::sleep(Duration::from_millis(20));
        rt.set_workers(3).expect("grow to 3");
        std::thread::sleep(Duration::from_millis(20));
        rt.set_workers(4).expect("grow to 4");

        for h in cast.other_tasks {
            h.join().expect("no actor task panics");
        }
        for h in cast.other_threads {
            h.join().expect("no actor thread panics");
        }
        let children: u64 = cast
            .families
            .into_iter()
            .map(|h| h.join().expect("no parent panics"))
            .sum();
        // Every producer is done: one leave per consumer ends them.
        send_away(w, TASK_CONSUMERS + THREAD_CONSUMERS);
        for h in cast.task_consumers {
            h.join().expect("no consumer task panics");
        }
        for h in cast.thread_consumers {
            h.join().expect("no consumer thread panics");
        }
        cast.enough.store(true, Ordering::Release);
        let gone = cast.driver.join().expect("the driver does not panic");
        for h in cast.targets {
            h.join().expect("a stopped target returns");
        }
        assert_eq!(gone, 0, "targets live until stopped");
        assert!(w.queue().items.is_empty());
        // Children whose join was cut short were detached: they end anyway.
        common::wait_for("every detached child to finish", || {
            let s = rt.stats();
            s.spawned == s.finished
        });
        assert_eq!(w.children_ran.load(Ordering::Relaxed), children);
        // What a run this long cannot miss.
        let t = &w.tally;
        for (what, n) in [
            ("interrupts", &t.interrupted),
            ("sync waits of targets", &t.sync_waits_of_targets),
            ("panics joined", &t.panics_joined),
            ("butex timeouts", &t.bell_timeouts),
            ("scope expiries", &t.scope_expiries),
            ("condvar timeouts", &t.condvar_timeouts),
        ] {
            assert!(n.load(Ordering::Relaxed) > 0, "no {what} in the whole run");
        }
        rt.shutdown();
    });
}

/// When to cut a scene short: a random moment in its first 40 ms (100 ms
/// in a debug build), while the cast is at full play.
fn random_moment(w: &World) -> Duration {
    w.rng(0).micros(
        0,
        if cfg!(debug_assertions) {
            100_000
        } else {
            40_000
        },
    )
}

/// The runtime shuts down at a random moment under the whole cast: the
/// shutdown returns, every task is dropped (run to its end, unwound, or
/// never run), every join returns, and the plain threads that share the
/// primitives with the cancelled tasks carry on to their ends.
#[test]
fn a_shutdown_in_the_middle_of_everything_loses_nothing() {
    scene("chaos cut short", true, |w| {
        let after = random_moment(w);
        eprintln!("chaos cut short: after {after:?}");
        // Not the defaults, to cover other paths: workers that poll rather
        // than park while their tasks sleep, and for a while when idle, a
        // watchdog sampling every quarter of a millisecond, and small stacks.
        let rt = spindle::Runtime::builder()
            .workers(3)
            .sleep_spin(Duration::MAX)
            .idle_poll(Duration::from_micros(300))
            .stall_threshold(Duration::from_millis(1))
            .stack_size(128 * 1024)
            .build()
            .expect("build the runtime");
        let cast = Cast::start(&[&rt], w);
        std::thread::sleep(after);
        rt.shutdown();

        // Nothing of the runtime runs any more.
        let ended = |finished: bool, r: Result<(), JoinError>, cancelled_only: bool| {
            assert!(finished, "a task outlived its runtime's shutdown");
            match r {
                Err(JoinError::Cancelled) => {}
                Ok(()) if !cancelled_only => {}
                r => panic!("a task of the cast: {r:?}"),
            }
        };
        // Targets and consumers cannot end on their own before the stops
        // and the leaves, which come only now.
        for h in cast.targets.iter() {
            assert!(h.is_finished());
            assert!(
                spindle::interrupt(h.id()).is_err(),
                "a target outlived the runtime"
            );
        }
        for h in cast.targets.into_iter().chain(cast.task_consumers) {
            ended(h.is_finished(), h.join(), true);
        }
        for h in cast.other_tasks {
            ended(h.is_finished(), h.join(), false);
        }
        for h in cast.families {
            ended(h.is_finished(), h.join().map(drop), false);
        }
        cast.enough.store(true, Ordering::Release);
        cast.driver.join().expect("the driver does not panic");
        send_away(w, THREAD_CONSUMERS);
        for h in cast.thread_consumers.into_iter().chain(cast.other_threads) {
            h.join().expect("no actor thread panics");
        }
    });
}

/// Handles of one runtime's tasks, handed to joiners on another.
type Relay = (Mutex<VecDeque<Option<JoinHandle<u64>>>>, Condvar);

/// Joins the handles `relay` hands it until it gets `None`: each is a task
/// of the other runtime, which returns 7 unless that runtime has shut down
/// under it. Returns how many it joined.
fn relay_joiner(relay: &Relay) -> u64 {
    let (queue, more) = relay;
    let mut joined = 0;
    loop {
        let q = queue.lock().expect("outside any scope");
        let mut q = more
            .wait_while(q, |q| q.is_empty())
            .expect("outside any scope");
        let Some(handle) = q.pop_front().expect("not empty") else {
            return joined;
        };
        drop(q);
        match handle.join() {
            Ok(v) => assert_eq!(v, 7),
            Err(JoinError::Cancelled) => {}
            Err(e) => panic!("a task of the other runtime: {e}"),
        }
        joined += 1;
    }
}

/// Two runtimes share the cast, and tasks of the second join tasks of the
/// first; the first shuts down at a random moment under it all, and the
/// second plays on: its joiners see `Cancelled` or a value, its actors go
/// on with the primitives the cancelled tasks shared, and everything is
/// dropped in the end.
#[test]
fn one_of_two_runtimes_shuts_down_under_the_other() {
    scene("chaos across runtimes", true, |w| {
        let after = random_moment(w);
        eprintln!("chaos across runtimes: the first stops after {after:?}");
        let first = common::rt(2);
        let second = Runtime::builder()
            .workers(2)
            .idle_poll(Duration::from_micros(300))
            .build()
            .expect("build the second runtime");
        let cast = Cast::start(&[&first, &second], w);
        let relay: Arc<Relay> = Arc::default();
        const JOINERS: usize = 4;
        let joiners: Vec<_> = (0..JOINERS)
            .map(|_| {
                let (relay, live) = (relay.clone(), Live::new(w));
                second.spawn(move || {
                    let _live = live;
                    relay_joiner(&relay)
                })
            })
            .collect();
        // Feed the joiners tasks of the first runtime until it stops.
        // Its own numbers: the actors' are 1 up.
        let mut rng = w.rng(0xfeed);
        let (mut fed, start) = (0u64, Instant::now());
        while start.elapsed() < after {
            let (live, pause) = (Live::new(w), rng.micros(0, 200));
            let task = first.spawn(move || {
                let _live = live;
                spindle::sleep(pause).expect("nobody interrupts these");
                7
            });
            relay
                .0
                .lock()
                .expect("outside any scope")
                .push_back(Some(task));
            relay.1.notify_one();
            fed += 1;
            std::thread::sleep(Duration::from_micros(50));
        }
        first.shutdown();
        {
            let mut q = relay.0.lock().expect("outside any scope");
            q.extend((0..JOINERS).map(|_| None));
        }
        relay.1.notify_all();
        let joined: u64 = joiners
            .into_iter()
            .map(|h| h.join().expect("a joiner returns"))
            .sum();
        assert_eq!(joined, fed, "every handle was joined");

        // The rest of the cast: the first runtime's tasks were cancelled,
        // the second's play on; stop the targets and send the consumers away.
        cast.enough.store(true, Ordering::Release);
        cast.driver.join().expect("the driver does not panic");
        send_away(w, TASK_CONSUMERS + THREAD_CONSUMERS);
        let ended = |r: Result<(), JoinError>| match r {
            Ok(()) | Err(JoinError::Cancelled) => {}
            Err(e) => panic!("a task of the cast: {e}"),
        };
        for h in cast
            .targets
            .into_iter()
            .chain(cast.task_consumers)
            .chain(cast.other_tasks)
        {
            ended(h.join());
        }
        for h in cast.families {
            ended(h.join().map(drop));
        }
        for h in cast.thread_consumers.into_iter().chain(cast.other_threads) {
            h.join().expect("no actor thread panics");
        }
        second.shutdown();
    });
}
