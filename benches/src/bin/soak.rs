//! The soak: a mixed load under injected faults, run for a given time, that
//! checks as it goes that no task is lost or finished twice and that
//! nothing leaks.
//!
//! ```text
//! soak [--secs N] [--seed S] [--workers N] [--in-flight N]
//!      [--quiesce-every N] [--progress-every N]
//! ```
//!
//! A driver (the main thread) launches *scenarios*, each a task of the
//! runtime under test, up to `--in-flight` at once. A scenario exercises one
//! part of the runtime with choices drawn from a generator seeded by the
//! run's seed and the scenario's number (so the seed, printed at the start,
//! replays every decision; the interleaving is the machine's). The kinds:
//! spawn trees (`spawn`, `spawn_urgent`, named tasks, tasks with stacks of
//! their own), sleeps, interrupts, stops, `Butex`, each sync primitive
//! (`Mutex` and `Condvar`, `RwLock`, `Semaphore`, `Barrier`, `OnceCell`,
//! `CountdownEvent`), each channel (`mpsc` unbounded, bounded and
//! rendezvous, `oneshot`, `watch`), `Select` and `select!`, `JoinSet`,
//! `scope`, deadline scopes, timers armed, rescheduled and cancelled on a
//! `TimerThread`, TCP connections to an echo server of the runtime
//! (opened, used, closed, half-closed or reset), UDP exchanges, and
//! `spawn_blocking`. Faults are injected at random: tasks that panic,
//! servers that reset a connection while its client reads, clients that
//! reset while the server reads, deadlines, interrupts, stops and socket
//! timeouts that end reads, refused connects, receivers dropped under
//! their senders, once-cell initializers that panic, join sets dropped
//! with tasks running, and second runtimes, loaded with tasks of every
//! kind, shut down while busy (now and then by one of their own tasks).
//!
//! Every `--quiesce-every` seconds the driver stops launching, joins every
//! scenario and compares the process with its baseline (taken at the first
//! quiesce, once everything that starts once has started):
//!
//! - every task spawned started once and ended once, and every handle
//!   gave exactly one result (or was detached, which is counted); a join
//!   never returned before its task had ended;
//! - the runtime's counters balance: tasks spawned and finished equal the
//!   soak's own counts, and no task is left alive but the server's;
//! - the soak's timer holds no entry and ran each callback it was asked
//!   to run exactly once; the global timer holds what it held at the
//!   baseline;
//! - the pollers hold the baseline's registrations (`stats().io_sources`),
//!   and the open fds (`/proc/self/fd`) are the baseline's: sockets, pipes
//!   and others exactly; epoll and eventfd descriptors at most one poller
//!   per worker more (a worker makes its poller when one of its tasks
//!   first waits for an fd);
//! - stacks: no task holds one (above), the shared pools hold at most
//!   their ceiling, and the process's mappings and address space stay
//!   within stated margins of their warm-up values;
//! - resident memory (`VmRSS`) after warm-up stays within
//!   [`RSS_MARGIN`] of its value at the end of warm-up.
//!
//! A scenario that does not finish within [`SCENARIO_LIMIT`] is a hang: the
//! soak prints a task dump and exits. Any broken invariant is printed when
//! it is seen, and makes the exit code 1; the summary lists them.

use socket2::SockRef;
use spindle::net::{TcpListener, TcpStream, UdpSocket};
use spindle::sync::{
    mpsc, oneshot, watch, Barrier, Condvar, CountdownEvent, Mutex, OnceCell, RwLock, Select,
    Semaphore,
};
use spindle::{
    Butex, JoinError, JoinHandle, JoinNext, JoinSet, Runtime, SleepError, TaskId, WaitError,
};
use spindle_testkit::{pattern, Rng};
use spindle_timer::{TimerOptions, TimerThread, Unschedule};
use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// Bounds and limits
// ---------------------------------------------------------------------------

/// How much resident memory may grow after warm-up. The load is bounded
/// (at most `--in-flight` scenarios of at most a few hundred tasks each),
/// so after warm-up the stacks, task slots, timer slots and allocator
/// arenas it needs have been made; what is left to grow is the stacks'
/// pages touched by a deeper call than before and the allocator's
/// fragmentation. A leak of one stack page per scenario would pass this in
/// a few minutes of a 30-minute run.
const RSS_MARGIN: u64 = 64 << 20;
/// How many more memory mappings than at warm-up the process may have at
/// a quiesce: threads of the blocking pool that have not yet retired
/// (two mappings each), slabs of stacks for a new peak of live tasks.
const MAPPINGS_MARGIN: usize = 4096;
/// How much more address space (`VmSize`) than at warm-up the process may
/// have at a quiesce: a new peak of live tasks pools more stacks (256 KiB
/// of address space each, pooled up to a quarter of `vm.max_map_count`).
const VMSIZE_MARGIN: u64 = 2 << 30;
/// How many task slots the table may gain after warm-up (it grows by the
/// peak of live tasks, process-wide, in segments of 256).
const TASK_SLOTS_MARGIN: usize = 8192;
/// How many slots the global timer's table may gain after warm-up (it
/// grows with the peak of live timers: one per timed wait of a task).
const TIMER_SLOTS_MARGIN: u64 = 8192;
/// The most timers a timer scenario has live at once (one-shots and a
/// periodic one): the soak's timer holds at most this many per scenario in
/// flight, twice over (its table grows by doubling).
const TIMERS_PER_SCENARIO: u64 = 41;
/// A wait that something else is meant to end (a wake, an interrupt, a
/// stop, a deadline) carries this as its own deadline or socket timeout:
/// if it fires, the soak reports the wait that nothing ended instead of
/// hanging.
const BACKSTOP: Duration = Duration::from_secs(60);
/// A scenario running longer than this is a hang.
const SCENARIO_LIMIT: Duration = Duration::from_secs(180);
/// How long a quiesce waits for the counts to settle (tasks detached by a
/// deadline or a dropped join set end on their own).
const SETTLE_LIMIT: Duration = Duration::from_secs(60);
/// The payload every planned panic starts with: the panic hook keeps them
/// quiet, and a join that gets another payload is a broken invariant.
const PLANNED: &str = "soak: a planned panic";

// ---------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------

struct Args {
    secs: u64,
    seed: u64,
    workers: usize,
    in_flight: usize,
    quiesce_every: u64,
    progress_every: u64,
    /// Run only this kind of scenario (to reproduce a failure).
    only: Option<Kind>,
}

const USAGE: &str = "usage: soak [--secs N (60)] [--seed S (from the clock)] \
[--workers N (CPUs, at least 2)] [--in-flight N (24)] [--quiesce-every SECS (10)] \
[--progress-every SECS (5)] [--only SCENARIO]";

fn parse_args() -> Result<Args, String> {
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut a = Args {
        secs: 60,
        seed: clock_seed(),
        workers: cpus.max(2),
        in_flight: 24,
        quiesce_every: 10,
        progress_every: 5,
        only: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || -> Result<u64, String> {
            let v = it.next().ok_or_else(|| format!("{arg} needs a value"))?;
            parse_number(&v).ok_or_else(|| format!("{arg}: not a number: {v}"))
        };
        match arg.as_str() {
            "--secs" => a.secs = value()?,
            "--seed" => a.seed = value()?,
            "--workers" => a.workers = value()? as usize,
            "--in-flight" => a.in_flight = value()? as usize,
            "--quiesce-every" => a.quiesce_every = value()?,
            "--progress-every" => a.progress_every = value()?,
            "--only" => {
                let name = it.next().ok_or("--only needs a scenario name")?;
                let kind = Kind::ALL.iter().find(|k| k.name() == name);
                a.only = Some(*kind.ok_or_else(|| {
                    let names: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
                    format!("--only: no scenario {name}; there are {}", names.join(", "))
                })?);
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {arg}\n{USAGE}")),
        }
    }
    if a.workers == 0 || a.in_flight == 0 || a.quiesce_every == 0 || a.progress_every == 0 {
        return Err(format!(
            "--workers, --in-flight and the periods must be positive\n{USAGE}"
        ));
    }
    Ok(a)
}

/// A decimal or `0x` hexadecimal number.
fn parse_number(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

fn clock_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    Rng::new(nanos, u64::from(std::process::id())).next_u64()
}

// ---------------------------------------------------------------------------
// Broken invariants
// ---------------------------------------------------------------------------

static BROKEN: AtomicBool = AtomicBool::new(false);
static VIOLATIONS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
static VIOLATION_COUNT: AtomicU64 = AtomicU64::new(0);

/// Records a broken invariant (with the scenario it was seen in, when a
/// scenario's own task sees it) and prints it at once.
fn violation(msg: String) {
    let within = spindle::task::current_name()
        .map(|n| format!(" [in {n}]"))
        .unwrap_or_default();
    let msg = format!("{msg}{within}");
    eprintln!("soak: INVARIANT BROKEN: {msg}");
    BROKEN.store(true, SeqCst);
    VIOLATION_COUNT.fetch_add(1, Relaxed);
    let mut v = VIOLATIONS.lock().unwrap_or_else(|e| e.into_inner());
    if v.len() < 50 {
        v.push(msg);
    }
}

/// Records a broken invariant unless `$cond` holds.
macro_rules! check {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            violation(format!($($arg)+));
        }
    };
}

/// Keeps planned panics quiet; reports any other as a broken invariant
/// (after the default hook has printed it).
fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        if msg.starts_with(PLANNED) {
            return;
        }
        default(info);
        violation(format!("an unplanned panic: {msg}"));
    }));
}

fn planned_panic(what: &str) -> ! {
    Fault::Panic.add(1);
    panic!("{PLANNED}: {what}")
}

// ---------------------------------------------------------------------------
// Counters
// ---------------------------------------------------------------------------

/// Defines an enum of counters, its names and a static array of them.
macro_rules! counters {
    ($ty:ident, $array:ident, $( $name:ident => $text:literal ),+ $(,)?) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        enum $ty { $($name),+ }
        impl $ty {
            const ALL: &'static [$ty] = &[$($ty::$name),+];
            fn text(self) -> &'static str {
                match self { $($ty::$name => $text),+ }
            }
            fn add(self, n: u64) {
                $array[self as usize].fetch_add(n, Relaxed);
            }
            fn get(self) -> u64 {
                $array[self as usize].load(Relaxed)
            }
        }
        static $array: [AtomicU64; $ty::ALL.len()] = [const { AtomicU64::new(0) }; $ty::ALL.len()];
    };
}

counters! {
    Fault, FAULTS,
    Panic => "tasks that panicked on purpose",
    PeerResetMidRead => "client reads ended by the server's reset",
    ClientReset => "server reads ended by the client's reset",
    DeadlineMidRead => "reads ended by a deadline scope",
    InterruptMidRead => "reads ended by an interrupt",
    StopMidRead => "reads ended by a stop",
    SocketTimeout => "reads ended by a socket timeout",
    RefusedConnect => "connects refused",
    Interrupt => "waits ended by an interrupt",
    Stop => "tasks stopped",
    DeadlineScope => "waits ended by a deadline scope",
    JoinDeadline => "joins ended by a deadline (task detached)",
    TimerCancelled => "timers cancelled before they fired",
    JoinSetDropped => "join sets dropped with tasks running",
    BlockingDeadline => "spawn_blocking joins ended by a deadline",
    ReceiverDropped => "sends refused by a dropped receiver",
    OnceInitPanic => "once-cell initializers that panicked",
    RuntimeShutdown => "second runtimes shut down under load",
    ShutdownFromTask => "of them, dropped by one of their own tasks",
    ShutdownCancelled => "tasks cancelled by those shutdowns",
}

counters! {
    Stat, STATS,
    Connections => "TCP connections opened",
    BytesEchoed => "bytes echoed over TCP",
    Datagrams => "UDP datagrams echoed",
    Messages => "channel messages received",
    TimersArmed => "timers armed",
    TimersFired => "timer callbacks run",
    BlockingJobs => "spawn_blocking jobs",
    SecondRuntimes => "second runtimes built",
    SecondRuntimeTasks => "tasks spawned on them",
}

/// What became of the tasks spawned through the soak's helpers on one
/// runtime.
#[derive(Debug, Default)]
struct Tally {
    spawned: AtomicU64,
    started: AtomicU64,
    ended: AtomicU64,
    /// Handles that gave a result: a value, a panic, or `Cancelled`.
    joined: AtomicU64,
    /// Handles dropped, consumed by a join that gave up (a deadline, a
    /// stop), or left in a join set that was dropped or detached.
    detached: AtomicU64,
    panicked: AtomicU64,
    cancelled: AtomicU64,
}

impl Tally {
    fn get(&self, c: &AtomicU64) -> u64 {
        c.load(SeqCst)
    }
}

/// The tally of the runtime under test.
fn main_tally() -> &'static Arc<Tally> {
    static MAIN: OnceLock<Arc<Tally>> = OnceLock::new();
    MAIN.get_or_init(Arc::default)
}

/// `spawn_blocking` calls on the runtime under test (each spawns a task
/// the soak does not wrap).
static BLOCKING_SPAWNED: AtomicU64 = AtomicU64::new(0);

/// Scenarios by kind: launched and finished.
static SCENARIOS: [AtomicU64; Kind::ALL.len()] = [const { AtomicU64::new(0) }; Kind::ALL.len()];

// ---------------------------------------------------------------------------
// Tasks that count their life
// ---------------------------------------------------------------------------

const SPAWNED: u8 = 0;
const STARTED: u8 = 1;
const ENDED: u8 = 2;

/// Marks its task started when made and ended when dropped (by the body's
/// return, its panic's unwinding, or the runtime's unwinding at shutdown).
struct Life {
    state: Arc<AtomicU8>,
    tally: Arc<Tally>,
}

impl Life {
    fn begin(state: Arc<AtomicU8>, tally: Arc<Tally>) -> Life {
        let was = state.swap(STARTED, SeqCst);
        check!(was == SPAWNED, "a task started twice (state {was})");
        tally.started.fetch_add(1, SeqCst);
        Life { state, tally }
    }
}

impl Drop for Life {
    fn drop(&mut self) {
        let was = self.state.swap(ENDED, SeqCst);
        check!(was == STARTED, "a task ended twice (state {was})");
        self.tally.ended.fetch_add(1, SeqCst);
    }
}

/// Wraps `f` so that its task counts its start and end in `tally`.
fn counted<'a, T>(
    tally: &Arc<Tally>,
    f: impl FnOnce() -> T + Send + 'a,
) -> (impl FnOnce() -> T + Send + 'a, Arc<AtomicU8>) {
    tally.spawned.fetch_add(1, SeqCst);
    let state = Arc::new(AtomicU8::new(SPAWNED));
    let (s, t) = (state.clone(), tally.clone());
    (
        move || {
            let _life = Life::begin(s, t);
            f()
        },
        state,
    )
}

/// Counts what a join gave, and checks it against the task's life.
fn record_join<T>(tally: &Tally, state: &AtomicU8, r: &Result<T, JoinError>) {
    let st = state.load(SeqCst);
    match r {
        Ok(_) => {
            tally.joined.fetch_add(1, SeqCst);
            check!(
                st == ENDED,
                "a join gave a value before its task ended (state {st})"
            );
        }
        Err(JoinError::Panicked(p)) => {
            tally.joined.fetch_add(1, SeqCst);
            tally.panicked.fetch_add(1, SeqCst);
            check!(
                st == ENDED,
                "a join gave a panic before its task ended (state {st})"
            );
            let msg = p.message().unwrap_or("<not a string>");
            check!(msg.starts_with(PLANNED), "a task panicked: {msg}");
        }
        Err(JoinError::Cancelled) => {
            tally.joined.fetch_add(1, SeqCst);
            tally.cancelled.fetch_add(1, SeqCst);
            check!(
                st != STARTED,
                "a join said Cancelled while its task still ran"
            );
        }
        // The handle is consumed and the task detached: it ends on its own.
        Err(_) => {
            tally.detached.fetch_add(1, SeqCst);
        }
    }
}

/// A task's handle with the task's life beside it.
struct Tracked<T> {
    handle: Option<JoinHandle<T>>,
    state: Arc<AtomicU8>,
    tally: Arc<Tally>,
    /// The join gave its result and it was counted. A handle dropped
    /// without one, or whose join was unwound (a second runtime's stop),
    /// counts as detached.
    counted: bool,
}

impl<T> Tracked<T> {
    fn new(handle: JoinHandle<T>, state: Arc<AtomicU8>, tally: &Arc<Tally>) -> Tracked<T> {
        Tracked {
            handle: Some(handle),
            state,
            tally: tally.clone(),
            counted: false,
        }
    }

    fn handle(&self) -> &JoinHandle<T> {
        self.handle
            .as_ref()
            .expect("a tracked handle is joined once")
    }

    fn id(&self) -> TaskId {
        self.handle().id()
    }

    fn join(mut self) -> Result<T, JoinError> {
        let r = self.handle.take().expect("joined once").join();
        record_join(&self.tally, &self.state, &r);
        self.counted = true;
        r
    }

    /// Joins, expecting a value: anything else is a broken invariant.
    fn value(self, what: &str) -> Option<T> {
        match self.join() {
            Ok(v) => Some(v),
            Err(JoinError::Panicked(_)) => None, // checked by record_join
            Err(e) => {
                violation(format!("{what}: the join failed: {e:?}"));
                None
            }
        }
    }
}

impl<T> Drop for Tracked<T> {
    fn drop(&mut self) {
        if !self.counted {
            self.tally.detached.fetch_add(1, SeqCst);
        }
    }
}

/// How a task is spawned.
#[derive(Debug, Clone, Copy)]
enum How {
    Spawn,
    Urgent,
    /// `task::Builder` with a name.
    Named,
    /// `task::Builder` with a stack size of its own (a mapping of its own,
    /// unmapped when the task ends).
    OwnStack,
}

impl How {
    fn pick(rng: &mut Rng) -> How {
        match rng.below(16) {
            0..=8 => How::Spawn,
            9..=13 => How::Urgent,
            14 => How::Named,
            _ => How::OwnStack,
        }
    }
}

/// Spawns `f` on the current runtime (as `how` says), counted in `tally`.
fn spawn_how<T: Send + 'static>(
    tally: &Arc<Tally>,
    how: How,
    f: impl FnOnce() -> T + Send + 'static,
) -> Tracked<T> {
    let (body, state) = counted(tally, f);
    // `spawn_urgent` runs the child first: a stop of the runtime then may
    // unwind this task inside it, and the handle is never given back.
    struct Unreturned<'a>(&'a Tally);
    impl Drop for Unreturned<'_> {
        fn drop(&mut self) {
            self.0.detached.fetch_add(1, SeqCst);
        }
    }
    let unreturned = Unreturned(tally);
    let handle = match how {
        How::Spawn => spindle::spawn(body),
        How::Urgent => spindle::spawn_urgent(body),
        How::Named => spindle::task::Builder::new()
            .name("soak-named")
            .spawn(body)
            .expect("task::Builder::spawn"),
        How::OwnStack => spindle::task::Builder::new()
            .stack_size(96 * 1024)
            .spawn(body)
            .expect("task::Builder::spawn with a stack size"),
    };
    std::mem::forget(unreturned);
    Tracked::new(handle, state, tally)
}

/// Spawns `f`, counted in the runtime under test's tally, the way `rng`
/// picks.
fn spawn_t<T: Send + 'static>(rng: &mut Rng, f: impl FnOnce() -> T + Send + 'static) -> Tracked<T> {
    spawn_how(main_tally(), How::pick(rng), f)
}

/// Joins each, expecting values.
fn values<T>(handles: Vec<Tracked<T>>, what: &str) -> Vec<T> {
    handles.into_iter().filter_map(|h| h.value(what)).collect()
}

/// A `JoinSet` whose tasks count their lives.
struct Set<T> {
    set: JoinSet<T>,
    states: HashMap<TaskId, Arc<AtomicU8>>,
    tally: Arc<Tally>,
}

impl<T: Send + 'static> Set<T> {
    fn new() -> Set<T> {
        Set {
            set: JoinSet::new(),
            states: HashMap::new(),
            tally: main_tally().clone(),
        }
    }

    fn spawn(&mut self, f: impl FnOnce() -> T + Send + 'static) -> TaskId {
        let (body, state) = counted(&self.tally, f);
        let id = self.set.spawn(body);
        self.states.insert(id, state);
        id
    }

    fn record(&mut self, id: TaskId, r: &Result<T, JoinError>) {
        match self.states.remove(&id) {
            Some(state) => record_join(&self.tally, &state, r),
            None => violation(format!(
                "a join set gave a task it never had, or twice: {id}"
            )),
        }
    }

    fn join_next(&mut self) -> Result<Option<JoinNext<T>>, WaitError> {
        let r = self.set.join_next();
        if let Ok(Some((id, res))) = &r {
            self.record(*id, res);
        }
        r
    }

    fn try_join_next(&mut self) -> Option<JoinNext<T>> {
        let r = self.set.try_join_next();
        if let Some((id, res)) = &r {
            self.record(*id, res);
        }
        r
    }

    fn len(&self) -> usize {
        check!(
            self.set.len() == self.states.len(),
            "a join set holds {} tasks, the soak counts {}",
            self.set.len(),
            self.states.len()
        );
        self.set.len()
    }

    fn detach_all(&mut self) {
        self.tally
            .detached
            .fetch_add(self.states.len() as u64, SeqCst);
        self.states.clear();
        self.set.detach_all();
    }
}

impl<T> Drop for Set<T> {
    fn drop(&mut self) {
        // The set itself drops after this: it stops what still runs.
        self.tally
            .detached
            .fetch_add(self.states.len() as u64, SeqCst);
    }
}

// ---------------------------------------------------------------------------
// What the scenarios share
// ---------------------------------------------------------------------------

struct Shared {
    /// The echo server, a task of the runtime under test.
    echo: SocketAddr,
    /// A loopback port nobody listens on (bound once, then closed).
    closed: SocketAddr,
    /// The timer the timer scenarios arm and cancel.
    timer: TimerThread,
}

static SHARED: OnceLock<Shared> = OnceLock::new();

fn shared() -> &'static Shared {
    SHARED.get().expect("set up before the first scenario")
}

/// Opens a connection to the echo server and asks it for `mode`.
fn connect(mode: u8, n: u32) -> io::Result<TcpStream> {
    let s = TcpStream::connect(shared().echo)?;
    Stat::Connections.add(1);
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(BACKSTOP))?;
    s.set_write_timeout(Some(BACKSTOP))?;
    let mut hdr = [mode, 0, 0, 0, 0];
    hdr[1..].copy_from_slice(&n.to_le_bytes());
    (&s).write_all(&hdr)?;
    Ok(s)
}

/// Closes `s` with a reset (SO_LINGER 0): the peer's pending read fails
/// with `ConnectionReset`.
fn reset(s: TcpStream) {
    if let Err(e) = SockRef::from(&s).set_linger(Some(Duration::ZERO)) {
        violation(format!("SO_LINGER 0: {e}"));
    }
    drop(s);
}

/// The inner `WaitError` of an I/O error that a wait of the task ended.
fn wait_error(e: &io::Error) -> Option<WaitError> {
    spindle::io::wait_error(e)
}

// ---------------------------------------------------------------------------
// The echo server
// ---------------------------------------------------------------------------

/// Echo modes, the first byte a client sends (then a u32, little-endian):
/// echo until EOF; read that many bytes and reset; read and discard until
/// EOF, never answering.
const ECHO: u8 = b'E';
const RESET_AFTER: u8 = b'R';
const SILENT: u8 = b'S';

fn accept_loop(listener: TcpListener) {
    let mut backoff = Duration::from_millis(1);
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                backoff = Duration::from_millis(1);
                // Detached: the handler ends with its connection.
                drop(spawn_how(main_tally(), How::Spawn, move || serve(s)));
            }
            Err(e) if wait_error(&e) == Some(WaitError::Stopped) => return,
            Err(e) => {
                violation(format!("accept: {e}"));
                let _ = spindle::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// An error a server read may end with when its client resets or
/// vanishes: counted, not a broken invariant.
fn client_gone(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe | io::ErrorKind::UnexpectedEof
    )
}

fn serve(s: TcpStream) {
    let setup = s
        .set_read_timeout(Some(BACKSTOP))
        .and_then(|()| s.set_write_timeout(Some(BACKSTOP)))
        .and_then(|()| s.set_nodelay(true));
    if let Err(e) = setup {
        violation(format!("server: socket options: {e}"));
        return;
    }
    let mut hdr = [0u8; 5];
    if let Err(e) = (&s).read_exact(&mut hdr) {
        // A client of a second runtime unwound before it spoke.
        if e.kind() == io::ErrorKind::ConnectionReset {
            Fault::ClientReset.add(1);
        }
        check!(client_gone(&e), "server: reading a request: {e}");
        return;
    }
    let n = u32::from_le_bytes([hdr[1], hdr[2], hdr[3], hdr[4]]) as usize;
    let mut buf = vec![0u8; 16 * 1024];
    let r = match hdr[0] {
        ECHO => loop {
            match (&s).read(&mut buf) {
                Ok(0) => break Ok(()),
                Ok(k) => {
                    if let Err(e) = (&s).write_all(&buf[..k]) {
                        break Err(e);
                    }
                }
                Err(e) => break Err(e),
            }
        },
        RESET_AFTER => {
            let mut got = vec![0u8; n];
            match (&s).read_exact(&mut got) {
                Ok(()) => {
                    reset(s);
                    return;
                }
                Err(e) => Err(e),
            }
        }
        SILENT => loop {
            match (&s).read(&mut buf) {
                Ok(0) => break Ok(()),
                Ok(_) => {}
                Err(e) => break Err(e),
            }
        },
        m => {
            violation(format!("server: unknown mode {m}"));
            Ok(())
        }
    };
    if let Err(e) = r {
        if e.kind() == io::ErrorKind::ConnectionReset {
            Fault::ClientReset.add(1);
        }
        check!(client_gone(&e), "server: {e} (mode {})", hdr[0] as char);
    }
}

// ---------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------

macro_rules! kinds {
    ($( $name:ident => $f:ident, $weight:literal ),+ $(,)?) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        enum Kind { $($name),+ }
        impl Kind {
            const ALL: &'static [Kind] = &[$(Kind::$name),+];
            const WEIGHTS: &'static [u64] = &[$($weight),+];
            fn run(self, rng: &mut Rng) {
                match self { $(Kind::$name => $f(rng)),+ }
            }
            fn name(self) -> &'static str {
                match self { $(Kind::$name => stringify!($f)),+ }
            }
            fn pick(rng: &mut Rng) -> Kind {
                let total: u64 = Kind::WEIGHTS.iter().sum();
                let mut x = rng.below(total);
                for (k, w) in Kind::ALL.iter().zip(Kind::WEIGHTS) {
                    if x < *w {
                        return *k;
                    }
                    x -= w;
                }
                unreachable!()
            }
        }
    };
}

kinds! {
    SpawnTree => spawn_tree, 6,
    Sleep => sleeps, 4,
    Interrupt => interrupts, 4,
    Stop => stops, 4,
    Butex => butexes, 4,
    MutexCondvar => mutex_condvar, 4,
    RwLock => rwlock, 3,
    Semaphore => semaphore, 3,
    Barrier => barrier, 3,
    OnceCell => once_cell, 3,
    Countdown => countdown, 3,
    Mpsc => channels, 5,
    Oneshot => oneshots, 3,
    Watch => watches, 3,
    Select => selects, 4,
    JoinSet => join_sets, 4,
    Scope => scopes, 2,
    Deadline => deadlines, 5,
    Timer => timers, 4,
    TcpEcho => tcp_echo, 6,
    TcpFault => tcp_faults, 6,
    Udp => udp, 2,
    Blocking => blocking, 3,
    Panic => panics, 3,
    Shutdown => shutdown_under_load, 1,
}

/// A tree of tasks, each spawning children and joining them: the count of
/// nodes joined must be the count made.
fn spawn_tree(rng: &mut Rng) {
    let made = Arc::new(AtomicU64::new(0));
    let depth = rng.range(1, 4) as u32;
    let fan = rng.range(1, 4);
    let joined = tree_node(rng.next_u64(), depth, fan, made.clone());
    let made = made.load(SeqCst);
    check!(
        joined == made,
        "spawn tree: {joined} nodes joined, {made} made"
    );
}

fn tree_node(seed: u64, depth: u32, fan: u64, made: Arc<AtomicU64>) -> u64 {
    made.fetch_add(1, SeqCst);
    let mut rng = Rng::new(seed, u64::from(depth));
    if rng.one_in(3) {
        spindle::yield_now();
    }
    if depth == 0 {
        return 1;
    }
    let kids: Vec<Tracked<u64>> = (0..rng.range(0, fan))
        .map(|_| {
            let (s, m) = (rng.next_u64(), made.clone());
            spawn_t(&mut rng, move || tree_node(s, depth - 1, fan, m))
        })
        .collect();
    1 + values(kids, "spawn tree").into_iter().sum::<u64>()
}

/// Sleeps of every form: none ends before its time, none fails.
fn sleeps(rng: &mut Rng) {
    let hs: Vec<Tracked<()>> = (0..rng.range(1, 16))
        .map(|_| {
            let d = rng.micros(0, 3000);
            let form = rng.below(3);
            spawn_t(rng, move || {
                let t = Instant::now();
                let r = match form {
                    0 => spindle::sleep(d),
                    1 => spindle::usleep(d.as_micros() as u64),
                    _ => spindle::sleep_until(t + d),
                };
                check!(r.is_ok(), "a sleep of {d:?} failed: {r:?}");
                let took = t.elapsed();
                check!(took >= d, "a sleep of {d:?} ended after {took:?}");
            })
        })
        .collect();
    values(hs, "sleep");
}

/// Interrupts of tasks in a sleep, a butex wait, a receive, and in a lock
/// (not interruptible: the interrupt stays pending for the next sleep).
fn interrupts(rng: &mut Rng) {
    for _ in 0..rng.range(1, 5) {
        let form = rng.below(4);
        let butex = Arc::new(Butex::new(0));
        let lock = Arc::new(Mutex::new(()));
        let (tx, rx) = mpsc::channel::<u8>();
        let (b, l) = (butex.clone(), lock.clone());
        let held = if form == 3 {
            Some(lock.lock().expect("an uncontended lock"))
        } else {
            None
        };
        let target = spawn_t(rng, move || match form {
            0 => spindle::sleep(BACKSTOP) == Err(SleepError::Interrupted),
            1 => b.wait(0, Some(Instant::now() + BACKSTOP)) == Err(WaitError::Interrupted),
            2 => rx.recv_timeout(BACKSTOP) == Err(mpsc::RecvTimeoutError::Interrupted),
            _ => {
                let g = l.lock();
                let locked = g.is_ok();
                drop(g);
                locked && spindle::sleep(BACKSTOP) == Err(SleepError::Interrupted)
            }
        });
        let _ = spindle::sleep(rng.micros(0, 1500));
        let sent = if rng.one_in(2) {
            target.handle().interrupt()
        } else {
            spindle::interrupt(target.id())
        };
        check!(sent.is_ok(), "interrupt of a waiting task: {sent:?}");
        if form == 3 {
            let _ = spindle::sleep(rng.micros(0, 500));
        }
        drop(held);
        let id = target.id();
        let ended_right = target.value("interrupted task");
        check!(
            ended_right != Some(false),
            "an interrupted wait (form {form}) did not end with Interrupted"
        );
        Fault::Interrupt.add(1);
        check!(
            spindle::interrupt(id).is_err(),
            "an interrupt found a task that had ended and been joined"
        );
        drop(tx);
    }
}

/// Stops: a task in a loop of waits, a parent whose join set's children a
/// stop reaches, a joiner stopped in its join. A stop is sticky.
fn stops(rng: &mut Rng) {
    match rng.below(3) {
        0 => {
            let (tx, rx) = mpsc::channel::<u8>();
            let target = spawn_t(rng, move || {
                let b = Butex::new(0);
                let mut waits = 0u32;
                loop {
                    waits += 1;
                    let r = match waits % 3 {
                        0 => spindle::sleep(Duration::from_millis(1)).map_err(WaitError::from),
                        1 => b.wait(0, Some(Instant::now() + Duration::from_millis(1))),
                        _ => match rx.recv_timeout(Duration::from_millis(1)) {
                            Err(mpsc::RecvTimeoutError::Stopped) => Err(WaitError::Stopped),
                            _ => Ok(()),
                        },
                    };
                    if r == Err(WaitError::Stopped) {
                        break;
                    }
                    if waits > 100_000 {
                        return false;
                    }
                }
                // Sticky: every later wait fails at once.
                spindle::is_stopped()
                    && spindle::sleep(BACKSTOP) == Err(SleepError::Stopped)
                    && b.wait(0, Some(Instant::now() + BACKSTOP)) == Err(WaitError::Stopped)
            });
            let _ = spindle::sleep(rng.micros(0, 3000));
            check!(target.handle().stop().is_ok(), "stop of a live task failed");
            Fault::Stop.add(1);
            check!(
                target.value("stopped task") != Some(false),
                "a stopped task's waits did not all fail with Stopped"
            );
            drop(tx);
        }
        1 => {
            let kids = rng.range(1, 6) as usize;
            let parent = spawn_t(rng, move || {
                let mut set = Set::new();
                for _ in 0..kids {
                    set.spawn(|| spindle::sleep(BACKSTOP) == Err(SleepError::Stopped));
                }
                // A child the stop ended may be joined before the parent's
                // wait sees the stop; once it does, the stop is sticky:
                // collect without waiting.
                let mut ok = true;
                let t = Instant::now();
                while set.len() > 0 && t.elapsed() < BACKSTOP {
                    match set.join_next() {
                        Ok(Some((_, r))) => ok &= matches!(r, Ok(true)),
                        Ok(None) => break,
                        Err(WaitError::Stopped) => match set.try_join_next() {
                            Some((_, r)) => ok &= matches!(r, Ok(true)),
                            None => spindle::yield_now(),
                        },
                        Err(e) => {
                            violation(format!("stopped parent: join_next gave {e:?}"));
                            return false;
                        }
                    }
                }
                ok && set.len() == 0
            });
            let _ = spindle::sleep(rng.micros(100, 3000));
            check!(parent.handle().stop().is_ok(), "stop of a parent failed");
            Fault::Stop.add(1);
            check!(
                parent.value("stopped parent") != Some(false),
                "a stop did not reach a parent's join set children"
            );
        }
        _ => {
            let (release, mut released) = oneshot::channel::<()>();
            let joiner = spawn_t(rng, move || {
                // A task spawned with `spawn` is nobody's child: the stop
                // ends the join (detaching it), not the child's wait.
                let child = spawn_how(main_tally(), How::Spawn, move || {
                    released.recv_deadline(Instant::now() + BACKSTOP).is_ok()
                });
                matches!(child.join(), Err(JoinError::Stopped))
            });
            let _ = spindle::sleep(rng.micros(0, 500));
            check!(joiner.handle().stop().is_ok(), "stop of a joiner failed");
            Fault::Stop.add(1);
            check!(
                joiner.value("stopped joiner") != Some(false),
                "a stopped join did not end with JoinError::Stopped"
            );
            let _ = release.send(());
        }
    }
}

/// Two tasks hand a counter back and forth through a butex; a timed wait
/// times out no earlier than its deadline; a stale value is refused.
fn butexes(rng: &mut Rng) {
    let rounds = rng.range(1, 300) as u32;
    let b = Arc::new(Butex::new(0));
    let side = |parity: u32| {
        let b = b.clone();
        move || {
            for i in 0..rounds {
                let want = 2 * i + parity;
                loop {
                    let v = b.value().load(Acquire);
                    if v == want {
                        break;
                    }
                    if v > want {
                        return false;
                    }
                    match b.wait(v, Some(Instant::now() + BACKSTOP)) {
                        Ok(()) | Err(WaitError::WouldBlock) => {}
                        Err(_) => return false,
                    }
                }
                b.value().store(want + 1, Release);
                b.wake_all();
            }
            true
        }
    };
    let (a, c) = (spawn_t(rng, side(0)), spawn_t(rng, side(1)));
    let ok = values(vec![a, c], "butex ping-pong");
    check!(ok == [true, true], "butex ping-pong: a side failed");
    check!(
        b.value().load(SeqCst) == 2 * rounds,
        "butex ping-pong: the count is off"
    );
    let d = rng.micros(0, 2000);
    let t = Instant::now();
    let r = Butex::new(7).wait(7, Some(t + d));
    check!(
        r == Err(WaitError::TimedOut),
        "a timed butex wait gave {r:?}"
    );
    check!(
        t.elapsed() >= d,
        "a butex wait of {d:?} timed out after {:?}",
        t.elapsed()
    );
    let r = Butex::new(1).wait(0, None);
    check!(
        r == Err(WaitError::WouldBlock),
        "a stale butex wait gave {r:?}"
    );
}

/// Increments under a mutex (some while yielding with the lock held), and
/// a queue handed over through a condvar.
fn mutex_condvar(rng: &mut Rng) {
    let m = Arc::new(Mutex::new(0u64));
    let (k, per) = (rng.range(1, 8), rng.range(1, 100));
    let hs: Vec<Tracked<()>> = (0..k)
        .map(|_| {
            let m = m.clone();
            let mut r = rng.fork();
            spawn_t(rng, move || {
                for _ in 0..per {
                    let g = match r.below(3) {
                        0 => m.lock().ok(),
                        1 => m.lock_until(Some(Instant::now() + BACKSTOP)).ok(),
                        _ => loop {
                            if let Some(g) = m.try_lock() {
                                break Some(g);
                            }
                            spindle::yield_now();
                        },
                    };
                    let Some(mut g) = g else {
                        violation("a mutex lock failed".into());
                        return;
                    };
                    *g += 1;
                    if r.one_in(8) {
                        spindle::yield_now();
                    }
                }
            })
        })
        .collect();
    values(hs, "mutex increments");
    let total = *m.lock().expect("an uncontended lock");
    check!(
        total == k * per,
        "mutex: {total} increments counted, {} made",
        k * per
    );

    // A queue: one producer, several consumers, a closed flag.
    type Queue = (Mutex<(VecDeque<u64>, bool)>, Condvar);
    let q: Arc<Queue> = Arc::new((Mutex::new((VecDeque::new(), false)), Condvar::new()));
    let n = rng.range(0, 300);
    let consumers: Vec<Tracked<(u64, u64)>> = (0..rng.range(1, 4))
        .map(|_| {
            let q = q.clone();
            let timed = rng.one_in(2);
            spawn_t(rng, move || {
                let (mut count, mut sum) = (0, 0);
                loop {
                    let Ok(mut g) = q.0.lock() else {
                        violation("condvar queue: lock failed".into());
                        return (count, sum);
                    };
                    while g.0.is_empty() && !g.1 {
                        let r = if timed {
                            q.1.wait_until(g, Instant::now() + BACKSTOP)
                        } else {
                            q.1.wait(g)
                        };
                        match r {
                            Ok(again) => g = again,
                            Err(e) => {
                                violation(format!("condvar wait: {e:?}"));
                                return (count, sum);
                            }
                        }
                    }
                    match g.0.pop_front() {
                        Some(v) => {
                            count += 1;
                            sum += v;
                        }
                        None => return (count, sum),
                    }
                }
            })
        })
        .collect();
    let all = rng.one_in(2);
    for i in 0..n {
        let mut g = q.0.lock().expect("queue lock");
        g.0.push_back(i);
        drop(g);
        if all {
            q.1.notify_all();
        } else {
            q.1.notify_one();
        }
        if rng.one_in(16) {
            spindle::yield_now();
        }
    }
    q.0.lock().expect("queue lock").1 = true;
    q.1.notify_all();
    let got = values(consumers, "condvar consumers");
    let (count, sum) = got.iter().fold((0, 0), |(c, s), (c1, s1)| (c + c1, s + s1));
    Stat::Messages.add(count);
    check!(
        count == n && sum == n * n.saturating_sub(1) / 2,
        "condvar queue: {count} items (sum {sum}) taken of {n}"
    );
}

/// Writers keep a pair equal (yielding between the halves); readers never
/// see it unequal.
fn rwlock(rng: &mut Rng) {
    let l = Arc::new(RwLock::new((0u64, 0u64)));
    let (writers, iters) = (rng.range(1, 4), rng.range(1, 60));
    let mut hs = Vec::new();
    for _ in 0..writers {
        let l = l.clone();
        let mut r = rng.fork();
        hs.push(spawn_t(rng, move || {
            for _ in 0..iters {
                let g = if r.one_in(2) {
                    l.write().ok()
                } else {
                    l.write_until(Some(Instant::now() + BACKSTOP)).ok()
                };
                let Some(mut g) = g else {
                    violation("rwlock: a write lock failed".into());
                    return;
                };
                g.0 += 1;
                if r.one_in(4) {
                    spindle::yield_now();
                }
                g.1 += 1;
            }
        }));
    }
    for _ in 0..rng.range(1, 6) {
        let l = l.clone();
        let mut r = rng.fork();
        hs.push(spawn_t(rng, move || {
            for _ in 0..iters {
                let g = if r.one_in(3) {
                    l.try_read()
                } else {
                    l.read().ok()
                };
                if let Some(g) = g {
                    check!(
                        g.0 == g.1,
                        "rwlock: a reader saw a half-written pair {:?}",
                        *g
                    );
                    if r.one_in(8) {
                        spindle::yield_now();
                    }
                }
            }
        }));
    }
    values(hs, "rwlock");
    let g = l.read().expect("an uncontended read");
    check!(
        *g == (writers * iters, writers * iters),
        "rwlock: the pair is {:?}, {} writes made",
        *g,
        writers * iters
    );
}

/// Never more holders than permits, every way of acquiring.
fn semaphore(rng: &mut Rng) {
    let permits = rng.range(1, 4) as usize;
    let sem = Arc::new(Semaphore::new(permits));
    let in_use = Arc::new(AtomicUsize::new(0));
    let iters = rng.range(1, 50);
    let hs: Vec<Tracked<()>> = (0..rng.range(1, 8))
        .map(|_| {
            let (sem, in_use) = (sem.clone(), in_use.clone());
            let mut r = rng.fork();
            spawn_t(rng, move || {
                for _ in 0..iters {
                    let form = r.below(4);
                    let (p1, p2) = match form {
                        0 => (sem.acquire().ok(), None),
                        1 => (None, sem.acquire_owned().ok()),
                        2 => (
                            sem.acquire_until(Some(Instant::now() + BACKSTOP)).ok(),
                            None,
                        ),
                        _ => loop {
                            if let Ok(p) = sem.try_acquire() {
                                break (Some(p), None);
                            }
                            spindle::yield_now();
                        },
                    };
                    if p1.is_none() && p2.is_none() {
                        violation(format!("semaphore: acquire (form {form}) failed"));
                        return;
                    }
                    let now = in_use.fetch_add(1, SeqCst) + 1;
                    check!(
                        now <= permits,
                        "semaphore: {now} holders of {permits} permits"
                    );
                    if r.one_in(3) {
                        spindle::yield_now();
                    }
                    in_use.fetch_sub(1, SeqCst);
                    drop((p1, p2));
                }
            })
        })
        .collect();
    values(hs, "semaphore");
    check!(
        sem.available_permits() == permits,
        "semaphore: {} permits left of {permits}",
        sem.available_permits()
    );
}

/// One leader per generation.
fn barrier(rng: &mut Rng) {
    let (n, rounds) = (rng.range(1, 6), rng.range(1, 10));
    let b = Arc::new(Barrier::new(n as usize));
    let leaders = Arc::new(AtomicU64::new(0));
    let hs: Vec<Tracked<()>> = (0..n)
        .map(|_| {
            let (b, leaders) = (b.clone(), leaders.clone());
            let mut r = rng.fork();
            spawn_t(rng, move || {
                for _ in 0..rounds {
                    if r.one_in(3) {
                        let _ = spindle::sleep(r.micros(0, 300));
                    }
                    match b.wait() {
                        Ok(w) if w.is_leader() => {
                            leaders.fetch_add(1, SeqCst);
                        }
                        Ok(_) => {}
                        Err(e) => violation(format!("barrier wait: {e:?}")),
                    }
                }
            })
        })
        .collect();
    values(hs, "barrier");
    let l = leaders.load(SeqCst);
    check!(l == rounds, "barrier: {l} leaders in {rounds} generations");
}

/// One initialization, seen by all; an initializer that panics hands over
/// to the next caller.
fn once_cell(rng: &mut Rng) {
    let cell = Arc::new(OnceCell::new());
    let inits = Arc::new(AtomicU32::new(0));
    let first_panics = rng.one_in(3);
    let k = rng.range(1, 8);
    let hs: Vec<Tracked<u64>> = (0..k)
        .map(|_| {
            let (cell, inits) = (cell.clone(), inits.clone());
            let pause = rng.micros(0, 800);
            spawn_t(rng, move || {
                *cell.get_or_init(|| {
                    let n = inits.fetch_add(1, SeqCst) + 1;
                    let _ = spindle::sleep(pause);
                    if first_panics && n == 1 {
                        Fault::OnceInitPanic.add(1);
                        planned_panic("a once-cell initializer");
                    }
                    42
                })
            })
        })
        .collect();
    let mut panicked = 0;
    for h in hs {
        match h.join() {
            Ok(v) => check!(v == 42, "once cell: a caller saw {v}"),
            Err(JoinError::Panicked(_)) => panicked += 1,
            Err(e) => violation(format!("once cell: join: {e:?}")),
        }
    }
    let expected_inits = if first_panics && k > 1 { 2 } else { 1 };
    let n = inits.load(SeqCst);
    check!(
        n == expected_inits,
        "once cell: {n} initializations, {expected_inits} expected"
    );
    check!(
        panicked == u32::from(first_panics),
        "once cell: {panicked} callers panicked"
    );
    // Only a lone caller whose initializer panicked leaves the cell empty.
    let want = if first_panics && k == 1 {
        None
    } else {
        Some(42)
    };
    let set = cell.get().copied();
    check!(
        set == want,
        "once cell: holds {set:?} at the end, {want:?} expected"
    );
}

/// Signals from several tasks release the waiters; a wait with a deadline
/// too early times out.
fn countdown(rng: &mut Rng) {
    let n = rng.range(1, 8) as u32;
    let ev = Arc::new(CountdownEvent::new(n));
    let extra = rng.one_in(3);
    if extra {
        check!(ev.add_count(1).is_ok(), "countdown: add_count failed");
    }
    let waiters: Vec<Tracked<bool>> = (0..rng.range(1, 3))
        .map(|_| {
            let ev = ev.clone();
            spawn_t(rng, move || ev.wait().is_ok())
        })
        .collect();
    let early = ev.wait_until(Instant::now() + rng.micros(0, 100));
    check!(
        early == Err(WaitError::TimedOut),
        "countdown: an early wait gave {early:?}"
    );
    let signals: Vec<Tracked<()>> = (0..n + u32::from(extra))
        .map(|_| {
            let ev = ev.clone();
            let pause = rng.micros(0, 1000);
            spawn_t(rng, move || {
                let _ = spindle::sleep(pause);
                ev.signal(1);
            })
        })
        .collect();
    values(signals, "countdown signals");
    let ok = values(waiters, "countdown waiters");
    check!(ok.iter().all(|&o| o), "countdown: a wait failed");
    check!(ev.count() == 0, "countdown: {} left", ev.count());
}

/// Producers send numbered messages through an unbounded, bounded or
/// rendezvous channel: each arrives once and in its producer's order.
/// Sometimes the receiver goes early, and the sends give their values back.
fn channels(rng: &mut Rng) {
    let bounded = rng.one_in(2);
    let bound = rng.range(0, 4) as usize;
    let (producers, per) = (rng.range(1, 4), rng.range(1, 200));
    let drop_early = rng.one_in(6).then(|| rng.range(0, producers * per));
    enum Tx {
        Unbounded(mpsc::Sender<u64>),
        Bounded(mpsc::SyncSender<u64>),
    }
    let (tx, rx) = if bounded {
        let (tx, rx) = mpsc::sync_channel(bound);
        (Tx::Bounded(tx), rx)
    } else {
        let (tx, rx) = mpsc::channel();
        (Tx::Unbounded(tx), rx)
    };
    let hs: Vec<Tracked<u64>> = (0..producers)
        .map(|p| {
            let tx = match &tx {
                Tx::Unbounded(t) => Tx::Unbounded(t.clone()),
                Tx::Bounded(t) => Tx::Bounded(t.clone()),
            };
            let mut r = rng.fork();
            spawn_t(rng, move || {
                for i in 0..per {
                    let v = p << 32 | i;
                    let mut polls = 0;
                    let back = match &tx {
                        Tx::Unbounded(t) => t.send(v).err().map(|e| e.into_inner()),
                        Tx::Bounded(t) => match r.below(3) {
                            0 => t.send(v).err().map(|e| e.into_inner()),
                            1 => t.send_timeout(v, BACKSTOP).err().map(|e| e.into_inner()),
                            // A rendezvous with a receiver that polls too
                            // would never meet: after a while, send.
                            _ => loop {
                                match t.try_send(v) {
                                    Ok(()) => break None,
                                    Err(mpsc::TrySendError::Full(_)) if polls < 64 => {
                                        polls += 1;
                                        spindle::yield_now()
                                    }
                                    Err(mpsc::TrySendError::Full(v)) => {
                                        break t.send(v).err().map(|e| e.into_inner())
                                    }
                                    Err(mpsc::TrySendError::Disconnected(back)) => {
                                        break Some(back)
                                    }
                                    // Non-exhaustive: nothing else is documented.
                                    #[allow(unreachable_patterns)]
                                    Err(_) => {
                                        violation("try_send: an unknown error".into());
                                        break None;
                                    }
                                }
                            },
                        },
                    };
                    if let Some(back) = back {
                        check!(back == v, "a refused send gave back {back}, not {v}");
                        if drop_early.is_none() {
                            violation("a send failed with its receiver alive".into());
                        }
                        Fault::ReceiverDropped.add(1);
                        return i;
                    }
                    if r.one_in(32) {
                        spindle::yield_now();
                    }
                }
                per
            })
        })
        .collect();
    drop(tx);
    let mut next = vec![0u64; producers as usize];
    let mut got = 0u64;
    let form = rng.below(4);
    loop {
        if Some(got) == drop_early {
            drop(rx);
            break;
        }
        let r = match form {
            0 => rx.recv().map_err(|e| format!("{e:?}")),
            1 => rx.recv_timeout(BACKSTOP).map_err(|e| format!("{e:?}")),
            2 => {
                let mut polls = 0;
                loop {
                    match rx.try_recv() {
                        Ok(v) => break Ok(v),
                        Err(mpsc::TryRecvError::Empty) if polls < 64 => {
                            polls += 1;
                            spindle::yield_now()
                        }
                        Err(mpsc::TryRecvError::Empty) => {
                            break rx.recv().map_err(|e| format!("{e:?}"))
                        }
                        Err(e) => break Err(format!("{e:?}")),
                    }
                }
            }
            _ => rx.iter().next().ok_or_else(|| "Disconnected".to_string()),
        };
        match r {
            Ok(v) => {
                let (p, i) = ((v >> 32) as usize, v & 0xffff_ffff);
                check!(
                    p < next.len() && next[p] == i,
                    "mpsc: message {i} of producer {p} out of order"
                );
                if p < next.len() {
                    next[p] = i + 1;
                }
                got += 1;
            }
            Err(e) => {
                check!(e == "Disconnected", "mpsc: a receive failed: {e}");
                break;
            }
        }
    }
    Stat::Messages.add(got);
    let sent: u64 = values(hs, "mpsc producers").iter().sum();
    if drop_early.is_none() {
        check!(
            got == producers * per,
            "mpsc: {got} of {} received",
            producers * per
        );
    } else {
        // A value in the queue when the receiver went was sent, not received.
        check!(got <= sent, "mpsc: {got} received, only {sent} sent");
    }
}

/// Values sent, senders dropped, receivers dropped, receives timed out.
fn oneshots(rng: &mut Rng) {
    for _ in 0..rng.range(1, 8) {
        let (tx, mut rx) = oneshot::channel::<u64>();
        let v = rng.next_u64();
        let pause = rng.micros(0, 1000);
        match rng.below(4) {
            0 => {
                let h = spawn_t(rng, move || {
                    let _ = spindle::sleep(pause);
                    tx.send(v).is_ok()
                });
                let r = rx.recv();
                check!(r == Ok(v), "oneshot: received {r:?}");
                check!(
                    h.value("oneshot sender") == Some(true),
                    "oneshot: send failed"
                );
            }
            1 => {
                let h = spawn_t(rng, move || {
                    let _ = spindle::sleep(pause);
                    drop(tx);
                });
                let r = rx.recv();
                check!(
                    r == Err(mpsc::RecvError::Disconnected),
                    "oneshot without a send: {r:?}"
                );
                h.value("oneshot dropper");
            }
            2 => {
                let h = spawn_t(rng, move || {
                    let _ = spindle::sleep(pause);
                    tx.send(v).is_ok()
                });
                let r = rx.recv_timeout(Duration::from_micros(300));
                let got = match r {
                    Ok(x) => x,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        rx.recv_deadline(Instant::now() + BACKSTOP).unwrap_or(0)
                    }
                    Err(_) => 0,
                };
                check!(got == v, "oneshot after a timeout: {got} for {v}");
                h.value("oneshot sender");
            }
            _ => {
                drop(rx);
                let r = tx.send(v);
                check!(r == Err(v), "oneshot send to a dropped receiver: {r:?}");
                Fault::ReceiverDropped.add(1);
            }
        }
    }
}

/// Receivers follow a sender's values: in order, ending with the last.
fn watches(rng: &mut Rng) {
    let n = rng.range(1, 60);
    let (tx, rx) = watch::channel(0u64);
    let hs: Vec<Tracked<u64>> = (0..rng.range(1, 4))
        .map(|i| {
            let mut rx = if i % 2 == 0 {
                rx.clone()
            } else {
                tx.subscribe()
            };
            spawn_t(rng, move || {
                let mut last = *rx.borrow_and_update();
                loop {
                    match rx.changed() {
                        Ok(()) => {
                            let v = *rx.borrow_and_update();
                            check!(v >= last, "watch: {v} after {last}");
                            last = v;
                        }
                        Err(mpsc::RecvError::Disconnected) => break,
                        Err(e) => {
                            violation(format!("watch: changed: {e:?}"));
                            break;
                        }
                    }
                }
                *rx.borrow()
            })
        })
        .collect();
    drop(rx);
    for v in 1..=n {
        check!(
            tx.send(v).is_ok(),
            "watch: send with receivers alive failed"
        );
        if rng.one_in(4) {
            spindle::yield_now();
        }
    }
    drop(tx);
    for last in values(hs, "watch receivers") {
        check!(last == n, "watch: a receiver ended with {last}, not {n}");
    }
}

/// One task selects over two channels, a oneshot and a task's end until
/// all are done; each message arrives once. Then `select!` with a
/// deadline.
fn selects(rng: &mut Rng) {
    let (a, b) = (rng.range(0, 50), rng.range(0, 50));
    let (tx1, rx1) = mpsc::channel::<u64>();
    let (tx2, rx2) = mpsc::sync_channel::<u64>(rng.range(0, 2) as usize);
    let (otx, mut orx) = oneshot::channel::<u64>();
    let pause = rng.micros(0, 2000);
    let job = spawn_t(rng, move || {
        let _ = spindle::sleep(pause);
        7u64
    });
    let mut r1 = rng.fork();
    let p1 = spawn_t(rng, move || {
        for i in 0..a {
            let _ = tx1.send(i);
            if r1.one_in(8) {
                spindle::yield_now();
            }
        }
    });
    let p2 = spawn_t(rng, move || {
        for i in 0..b {
            let _ = tx2.send(i);
        }
    });
    let po = spawn_t(rng, move || {
        let _ = spindle::sleep(pause / 2);
        let _ = otx.send(99);
    });
    enum Got {
        One(Result<u64, mpsc::RecvError>),
        Two(Result<u64, mpsc::RecvError>),
        Oneshot,
        Job,
    }
    let (mut open1, mut open2, mut oneshot_open, mut job_open) = (true, true, true, true);
    let (mut got1, mut got2, mut got_o) = (0u64, 0u64, None);
    let mut job = Some(job);
    let mut job_value = None;
    while open1 || open2 || oneshot_open || job_open {
        let got = {
            let mut sel = Select::new();
            let i1 = open1.then(|| sel.recv(&rx1));
            let i2 = open2.then(|| sel.recv(&rx2));
            let io = oneshot_open.then(|| sel.recv_oneshot(&mut orx));
            let ij = match (&job, job_open) {
                (Some(j), true) => Some(sel.join(j.handle())),
                _ => None,
            };
            let op = match sel.select_deadline(Instant::now() + BACKSTOP) {
                Ok(op) => op,
                Err(e) => {
                    violation(format!("select: {e:?} with operations pending"));
                    break;
                }
            };
            let i = Some(op.index());
            if i == i1 {
                Got::One(op.recv(&rx1))
            } else if i == i2 {
                Got::Two(op.recv(&rx2))
            } else if i == io {
                Got::Oneshot
            } else if i == ij {
                Got::Job
            } else {
                violation("select: an index that no operation has".into());
                break;
            }
        };
        match got {
            Got::One(Ok(v)) => {
                check!(v == got1, "select: {v} where {got1} was next on channel 1");
                got1 += 1;
            }
            Got::Two(Ok(v)) => {
                check!(v == got2, "select: {v} where {got2} was next on channel 2");
                got2 += 1;
            }
            Got::One(Err(e)) | Got::Two(Err(e)) => {
                check!(
                    e == mpsc::RecvError::Disconnected,
                    "select: a receive gave {e:?}"
                );
                if matches!(got, Got::One(_)) {
                    open1 = false;
                } else {
                    open2 = false;
                }
            }
            Got::Oneshot => {
                oneshot_open = false;
                got_o = orx.try_recv().ok();
            }
            Got::Job => {
                job_open = false;
                job_value = job.take().and_then(|j| j.value("select's job"));
            }
        }
    }
    check!(
        got1 == a && got2 == b && got_o == Some(99) && job_value == Some(7),
        "select: got {got1}/{a}, {got2}/{b}, oneshot {got_o:?}, job {job_value:?}"
    );
    Stat::Messages.add(got1 + got2 + 1);
    values(vec![p1, p2, po], "select producers");

    // select! over a channel nobody sends on: the deadline arm runs, no
    // earlier than its deadline.
    let (_quiet_tx, quiet) = mpsc::channel::<u64>();
    let d = rng.micros(0, 1000);
    let t = Instant::now();
    let deadline = t + d;
    let timed_out = spindle::select! {
        recv(quiet) -> _msg => false,
        deadline(deadline) => true,
    };
    check!(
        timed_out && t.elapsed() >= d,
        "select!: the deadline arm did not run on time"
    );
}

/// Join sets: joined whole (panics and all), emptied without waiting, a
/// join cut by a deadline and the rest stopped, dropped with tasks
/// running (which the drop stops), detached.
fn join_sets(rng: &mut Rng) {
    let mut set: Set<u64> = Set::new();
    let n = rng.range(1, 20);
    let mut planned = 0;
    let ending = rng.below(5);
    let long = ending >= 2;
    for i in 0..n {
        let panics = rng.one_in(6);
        planned += u64::from(panics);
        let pause = rng.micros(0, 2000);
        set.spawn(move || {
            if panics {
                planned_panic("a join set task");
            }
            if long {
                // Ended by the stop (set.stop_all, the set's drop) or
                // detached to its end.
                let r = spindle::sleep(pause * 20);
                check!(
                    matches!(r, Ok(()) | Err(SleepError::Stopped)),
                    "join set task: sleep gave {r:?}"
                );
            } else {
                let _ = spindle::sleep(pause);
            }
            i
        });
    }
    match ending {
        0 => {
            let (mut sum, mut panics) = (0, 0);
            loop {
                match set.join_next() {
                    Ok(Some((_, Ok(v)))) => sum += v,
                    Ok(Some((_, Err(JoinError::Panicked(_))))) => panics += 1,
                    Ok(Some((_, Err(e)))) => violation(format!("join set: {e:?}")),
                    Ok(None) => break,
                    Err(e) => {
                        violation(format!("join set: join_next: {e:?}"));
                        break;
                    }
                }
            }
            check!(panics == planned, "join set: {panics} panics of {planned}");
            let _ = sum;
        }
        1 => {
            let t = Instant::now();
            while set.len() > 0 && t.elapsed() < BACKSTOP {
                if set.try_join_next().is_none() {
                    spindle::yield_now();
                }
            }
            check!(set.len() == 0, "join set: tasks left after {BACKSTOP:?}");
        }
        2 => {
            let d = rng.micros(0, 500);
            let r = spindle::with_deadline(Instant::now() + d, || set.join_next());
            if r.is_err() {
                check!(
                    matches!(r, Err(WaitError::DeadlineExceeded)),
                    "join set: join_next in a deadline scope gave {r:?}"
                );
                Fault::DeadlineScope.add(1);
            }
            set.set.stop_all();
            Fault::Stop.add(1);
            while let Ok(Some(_)) = set.join_next() {}
            check!(set.len() == 0, "join set: tasks left after stop_all");
        }
        3 => {
            let _ = spindle::sleep(rng.micros(0, 500));
            if set.len() > 0 {
                Fault::JoinSetDropped.add(1);
            }
            drop(set);
        }
        _ => set.detach_all(),
    }
}

/// Scoped tasks borrowing the caller's data; all have ended when the
/// scope returns.
fn scopes(rng: &mut Rng) {
    let data: Vec<u64> = (0..rng.range(1, 2000)).collect();
    let total = AtomicU64::new(0);
    let chunk = rng.range(1, 500) as usize;
    let mut states = Vec::new();
    spindle::scope(|s| {
        for c in data.chunks(chunk) {
            let total = &total;
            let pause = rng.one_in(3).then(|| rng.micros(0, 300));
            let (body, state) = counted(main_tally(), move || {
                if let Some(p) = pause {
                    let _ = spindle::sleep(p);
                }
                total.fetch_add(c.iter().sum(), SeqCst);
            });
            states.push(state);
            s.spawn(body);
        }
    });
    for st in &states {
        check!(
            st.load(SeqCst) == ENDED,
            "scope returned before one of its tasks ended"
        );
    }
    main_tally().joined.fetch_add(states.len() as u64, SeqCst);
    let want: u64 = data.iter().sum();
    check!(total.load(SeqCst) == want, "scope: the sum is off");
}

/// Deadline scopes around every kind of wait: each ends with
/// `DeadlineExceeded`, never before the deadline.
fn deadlines(rng: &mut Rng) {
    let d = rng.micros(100, 3000);
    let form = rng.below(12);
    let t = Instant::now();
    let dl = t + d;
    let ok = match form {
        0 => {
            spindle::with_deadline(dl, || spindle::sleep(BACKSTOP))
                == Err(SleepError::DeadlineExceeded)
        }
        1 => {
            let b = Butex::new(0);
            spindle::with_deadline(dl, || b.wait(0, Some(t + BACKSTOP)))
                == Err(WaitError::DeadlineExceeded)
        }
        2 => {
            // The holder lets go only once the lock has given up.
            let m = Arc::new(Mutex::new(()));
            let (tx, mut rx) = oneshot::channel::<()>();
            let (release, mut released) = oneshot::channel::<()>();
            let m2 = m.clone();
            let holder = spawn_t(rng, move || {
                let _g = m2.lock();
                let _ = tx.send(());
                let _ = released.recv_deadline(Instant::now() + BACKSTOP);
            });
            let _ = rx.recv();
            let t = Instant::now();
            let r = spindle::with_deadline(t + d, || m.lock().map(drop));
            let _ = release.send(());
            holder.value("mutex holder");
            return deadline_checked(form, r == Err(WaitError::DeadlineExceeded), t, d);
        }
        3 => {
            let (_tx, rx) = mpsc::channel::<u8>();
            spindle::with_deadline(dl, || rx.recv()) == Err(mpsc::RecvError::DeadlineExceeded)
        }
        4 => {
            // The task ends only once the join has given up (detaching it).
            let (release, mut released) = oneshot::channel::<()>();
            let h = spawn_t(rng, move || {
                let _ = released.recv_deadline(Instant::now() + BACKSTOP);
            });
            let r = spindle::with_deadline(dl, || h.join());
            let _ = release.send(());
            let ok = matches!(r, Err(JoinError::DeadlineExceeded));
            if ok {
                Fault::JoinDeadline.add(1);
            }
            ok
        }
        5 => {
            // Nested: the earlier deadline wins, whichever encloses which.
            let (outer, inner) = if rng.one_in(2) {
                (dl, t + 10 * d)
            } else {
                (t + 10 * d, dl)
            };
            spindle::with_deadline(outer, || {
                spindle::with_deadline(inner, || {
                    spindle::current_deadline() == Some(dl)
                        && spindle::sleep(BACKSTOP) == Err(SleepError::DeadlineExceeded)
                })
            })
        }
        6 => {
            let (body, state) = counted(main_tally(), || {
                spindle::sleep(BACKSTOP) == Err(SleepError::DeadlineExceeded)
            });
            let h = spindle::task::Builder::new()
                .deadline(Some(dl))
                .spawn(body)
                .expect("task::Builder::spawn with a deadline");
            Tracked::new(h, state, main_tally()).value("task with a deadline") == Some(true)
        }
        7 => {
            let m = Mutex::new(());
            let cv = Condvar::new();
            let g = m.lock().expect("an uncontended lock");
            spindle::with_deadline(dl, || cv.wait(g).map(drop)) == Err(WaitError::DeadlineExceeded)
        }
        8 => {
            let sem = Semaphore::new(0);
            spindle::with_deadline(dl, || sem.acquire().map(drop))
                == Err(WaitError::DeadlineExceeded)
        }
        9 => {
            let b = Barrier::new(2);
            spindle::with_deadline(dl, || b.wait().map(drop)) == Err(WaitError::DeadlineExceeded)
        }
        10 => {
            let ev = CountdownEvent::new(1);
            spindle::with_deadline(dl, || ev.wait()) == Err(WaitError::DeadlineExceeded)
        }
        _ => {
            let (_tx, mut rx) = watch::channel(0u8);
            spindle::with_deadline(dl, || rx.changed()) == Err(mpsc::RecvError::DeadlineExceeded)
        }
    };
    deadline_checked(form, ok, t, d);
}

fn deadline_checked(form: u64, ok: bool, t: Instant, d: Duration) {
    let took = t.elapsed();
    check!(
        ok,
        "deadline scope (form {form}): the wait did not end with DeadlineExceeded"
    );
    check!(
        took >= d,
        "deadline scope (form {form}): ended after {took:?} of {d:?}"
    );
    check!(
        spindle::current_deadline().is_none(),
        "a deadline scope outlived its closure"
    );
    Fault::DeadlineScope.add(1);
}

/// Timers armed on the soak's timer thread, some rescheduled, some
/// cancelled, periodic ones stopped: each one-shot runs exactly once
/// unless its cancel said `Removed`, and then never.
fn timers(rng: &mut Rng) {
    let timer = &shared().timer;
    let k = rng.range(1, TIMERS_PER_SCENARIO - 1);
    let mut armed = Vec::new();
    for _ in 0..k {
        let runs = Arc::new(AtomicU32::new(0));
        let r = runs.clone();
        let at = Instant::now() + rng.micros(0, 20_000);
        match timer.schedule(at, move || {
            r.fetch_add(1, SeqCst);
            Stat::TimersFired.add(1);
        }) {
            Ok(id) => {
                Stat::TimersArmed.add(1);
                armed.push((id, runs, false));
            }
            Err(e) => violation(format!("timer: schedule: {e}")),
        }
    }
    for (id, _, _) in armed.iter() {
        if rng.one_in(5) {
            // Err(NotPending) if it ran meanwhile.
            let _ = timer.reschedule(*id, Instant::now() + rng.micros(0, 5000));
        }
    }
    let _ = spindle::sleep(rng.micros(0, 5000));
    for (id, _, removed) in armed.iter_mut() {
        if rng.one_in(2) {
            match timer.unschedule(*id) {
                Unschedule::Removed => {
                    *removed = true;
                    Fault::TimerCancelled.add(1);
                }
                Unschedule::Running | Unschedule::NotFound => {}
            }
        }
    }
    // A periodic timer, stopped after a few runs.
    if rng.one_in(2) {
        let runs = Arc::new(AtomicU32::new(0));
        let r = runs.clone();
        let period = rng.micros(500, 3000);
        match timer.schedule_periodic(Instant::now(), period, move || {
            r.fetch_add(1, SeqCst);
            Stat::TimersFired.add(1);
        }) {
            Ok(id) => {
                Stat::TimersArmed.add(1);
                let _ = spindle::sleep(period * 3);
                let answer = timer.unschedule(id);
                check!(
                    matches!(answer, Unschedule::Removed | Unschedule::Running),
                    "a periodic timer's cancel found it gone: {answer:?}"
                );
                let at_cancel = runs.load(SeqCst);
                let _ = spindle::sleep(period * 3);
                let after = runs.load(SeqCst);
                check!(
                    after <= at_cancel + 1,
                    "a cancelled periodic timer ran on: {at_cancel} runs, then {after}"
                );
            }
            Err(e) => violation(format!("timer: schedule_periodic: {e}")),
        }
    }
    let t = Instant::now();
    while armed
        .iter()
        .any(|(_, runs, removed)| !removed && runs.load(SeqCst) == 0)
        && t.elapsed() < BACKSTOP
    {
        let _ = spindle::sleep(Duration::from_millis(1));
    }
    for (id, runs, removed) in &armed {
        let n = runs.load(SeqCst);
        let want = u32::from(!removed);
        check!(
            n == want,
            "timer {id:?}: ran {n} times, {want} expected (removed: {removed})"
        );
        // `Running` if its callback has counted itself and not returned yet.
        let again = timer.unschedule(*id);
        check!(
            again != Unschedule::Removed,
            "timer {id:?}: still pending after it ran or was removed"
        );
    }
}

/// Echoed connections: messages of up to 64 KiB, some written by a task
/// beside the reader; closed, half-closed or reset (sometimes with data
/// in flight, while the server reads).
fn tcp_echo(rng: &mut Rng) {
    let hs: Vec<Tracked<()>> = (0..rng.range(1, 4))
        .map(|_| {
            let mut r = rng.fork();
            spawn_t(rng, move || echo_client(&mut r))
        })
        .collect();
    values(hs, "echo clients");
}

fn echo_client(r: &mut Rng) {
    let s = match connect(ECHO, 0) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            violation(format!("echo: connect: {e}"));
            return;
        }
    };
    for _ in 0..r.range(1, 6) {
        let len = if r.one_in(4) {
            r.range(1, 64 * 1024)
        } else {
            r.range(1, 2048)
        } as usize;
        let data = pattern(r.next_u64(), len);
        let writer = if len > 16 * 1024 || r.one_in(4) {
            let (s, data) = (s.clone(), data.clone());
            Some(spawn_t(r, move || {
                (&*s).write_all(&data).map_err(|e| e.to_string())
            }))
        } else {
            if let Err(e) = (&*s).write_all(&data) {
                violation(format!("echo: write: {e}"));
                return;
            }
            None
        };
        let mut back = vec![0u8; len];
        let read = (&*s).read_exact(&mut back);
        if let Some(w) = writer {
            if let Some(Err(e)) = w.value("echo writer") {
                violation(format!("echo: write: {e}"));
            }
        }
        match read {
            Ok(()) => {
                check!(back == data, "echo: {len} bytes came back changed");
                Stat::BytesEchoed.add(len as u64);
            }
            Err(e) => {
                violation(format!("echo: read: {e}"));
                return;
            }
        }
    }
    let Ok(s) = Arc::try_unwrap(s) else {
        violation("echo: a writer kept the stream".into());
        return;
    };
    match r.below(4) {
        0 => drop(s),
        1 => {
            let eof = s
                .shutdown(Shutdown::Write)
                .and_then(|()| (&s).read(&mut [0u8; 8]));
            check!(
                matches!(eof, Ok(0)),
                "echo: after a half-close, read gave {eof:?}"
            );
        }
        2 => reset(s),
        _ => {
            // Data in flight: the server may be reading or writing it.
            let _ = (&s).write_all(&pattern(r.next_u64(), r.range(1, 8192) as usize));
            reset(s);
        }
    }
}

/// Faults on connections: the server resets while the client reads; a
/// deadline, an interrupt, a stop or a socket timeout ends a read; a
/// connect is refused.
fn tcp_faults(rng: &mut Rng) {
    let form = rng.below(7);
    let res = tcp_fault(rng, form);
    if let Err(e) = res {
        violation(format!("tcp fault {form}: {e}"));
    }
}

fn tcp_fault(rng: &mut Rng, form: u64) -> io::Result<()> {
    let silent_read = |s: &TcpStream, exact: bool| -> io::Result<usize> {
        let mut buf = [0u8; 64];
        if exact {
            (&*s).read_exact(&mut buf).map(|()| buf.len())
        } else {
            (&*s).read(&mut buf)
        }
    };
    match form {
        0 => {
            let n = rng.range(0, 4096) as u32;
            let s = connect(RESET_AFTER, n)?;
            (&s).write_all(&pattern(rng.next_u64(), n as usize))?;
            let r = (&s).read(&mut [0u8; 64]);
            match r {
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                    Fault::PeerResetMidRead.add(1)
                }
                other => violation(format!("a read from a peer that reset gave {other:?}")),
            }
        }
        1 => {
            let s = connect(SILENT, 0)?;
            let d = rng.micros(0, 5000);
            let exact = rng.one_in(2);
            let t = Instant::now();
            let r = spindle::with_deadline(t + d, || silent_read(&s, exact));
            match r {
                Err(e)
                    if e.kind() == io::ErrorKind::TimedOut
                        && wait_error(&e) == Some(WaitError::DeadlineExceeded) =>
                {
                    check!(t.elapsed() >= d, "a read's deadline fired early");
                    Fault::DeadlineMidRead.add(1);
                }
                other => violation(format!("a read past its deadline scope gave {other:?}")),
            }
        }
        2 | 3 => {
            let s = connect(SILENT, 0)?;
            let exact = rng.one_in(2);
            let stop = form == 3;
            let reader = spawn_t(rng, move || {
                let first = silent_read(&s, exact);
                let again = stop.then(|| silent_read(&s, false));
                (
                    first.map_err(|e| (e.kind(), wait_error(&e))),
                    again.map(|r| r.map_err(|e| wait_error(&e))),
                )
            });
            let _ = spindle::sleep(rng.micros(0, 2000));
            let sent = if stop {
                reader.handle().stop()
            } else {
                reader.handle().interrupt()
            };
            check!(sent.is_ok(), "signal to a reader failed");
            if let Some((first, again)) = reader.value("signalled reader") {
                if stop {
                    check!(
                        first == Err((io::ErrorKind::Other, Some(WaitError::Stopped)))
                            && again == Some(Err(Some(WaitError::Stopped))),
                        "a stopped read gave {first:?}, then {again:?}"
                    );
                    Fault::StopMidRead.add(1);
                } else {
                    check!(
                        first == Err((io::ErrorKind::Interrupted, Some(WaitError::Interrupted))),
                        "an interrupted read gave {first:?}"
                    );
                    Fault::InterruptMidRead.add(1);
                }
            }
        }
        4 => {
            let s = connect(SILENT, 0)?;
            let d = rng.micros(1000, 5000);
            s.set_read_timeout(Some(d))?;
            let t = Instant::now();
            match silent_read(&s, false) {
                Err(e) if e.kind() == io::ErrorKind::TimedOut && wait_error(&e).is_none() => {
                    check!(t.elapsed() >= d, "a socket timeout fired early");
                    Fault::SocketTimeout.add(1);
                }
                other => violation(format!("a read past its socket timeout gave {other:?}")),
            }
        }
        5 => match TcpStream::connect(shared().closed) {
            Err(e) => {
                check!(
                    e.kind() == io::ErrorKind::ConnectionRefused,
                    "a connect to a closed port gave {e}"
                );
                Fault::RefusedConnect.add(1);
            }
            Ok(_) => violation("a connect to a closed port succeeded".into()),
        },
        _ => {
            let s = TcpStream::connect_timeout(&shared().echo, BACKSTOP)?;
            Stat::Connections.add(1);
            s.set_read_timeout(Some(BACKSTOP))?;
            (&s).write_all(&[ECHO, 0, 0, 0, 0, 1, 2, 3])?;
            let mut back = [0u8; 3];
            (&s).read_exact(&mut back)?;
            check!(back == [1, 2, 3], "connect_timeout echo gave {back:?}");
        }
    }
    Ok(())
}

/// Datagrams echoed between two sockets, retransmitted if one is lost;
/// the echoing task is stopped in its receive at the end.
fn udp(rng: &mut Rng) {
    let mut run = || -> io::Result<()> {
        let a = UdpSocket::bind("127.0.0.1:0")?;
        let b = UdpSocket::bind("127.0.0.1:0")?;
        let b_addr = b.local_addr()?;
        let connected = rng.one_in(2);
        let echo = spawn_t(rng, move || -> io::Result<()> {
            b.set_read_timeout(Some(BACKSTOP))?;
            let mut buf = [0u8; 1500];
            loop {
                match b.recv_from(&mut buf) {
                    Ok((n, from)) => {
                        b.send_to(&buf[..n], from)?;
                    }
                    Err(e) if wait_error(&e) == Some(WaitError::Stopped) => return Ok(()),
                    Err(e) => return Err(e),
                }
            }
        });
        if connected {
            a.connect(b_addr)?;
        }
        a.set_read_timeout(Some(Duration::from_millis(50)))?;
        for i in 0..rng.range(1, 30) {
            let msg = pattern(i, rng.range(1, 1400) as usize);
            let mut tries = 0;
            loop {
                tries += 1;
                if connected {
                    a.send(&msg)?;
                } else {
                    a.send_to(&msg, b_addr)?;
                }
                let mut buf = [0u8; 1500];
                let r = if connected {
                    a.recv(&mut buf)
                } else {
                    a.recv_from(&mut buf).map(|(n, _)| n)
                };
                match r {
                    // A late echo of an earlier datagram: wait again.
                    Ok(n) if buf[..n] == msg[..] => break,
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::TimedOut && tries < 100 => {}
                    Err(e) => return Err(e),
                }
            }
            Stat::Datagrams.add(1);
        }
        check!(
            echo.handle().stop().is_ok(),
            "udp: stop of the echo task failed"
        );
        if let Some(Err(e)) = echo.value("udp echo") {
            violation(format!("udp echo: {e}"));
        }
        Ok(())
    };
    if let Err(e) = run() {
        violation(format!("udp: {e}"));
    }
}

/// Jobs on the blocking pool: values, a panic, a join cut by a deadline
/// (the job runs on to its end), a spawn from inside a job (into the
/// runtime that submitted it).
fn blocking(rng: &mut Rng) {
    let spawn_blocking = |f: Box<dyn FnOnce() -> u64 + Send>| {
        BLOCKING_SPAWNED.fetch_add(1, SeqCst);
        Stat::BlockingJobs.add(1);
        spindle::task::spawn_blocking(f)
    };
    for _ in 0..rng.range(1, 5) {
        let pause = rng.micros(0, 2000);
        let x = rng.below(1000);
        match rng.below(4) {
            0 => {
                let h = spawn_blocking(Box::new(move || {
                    std::thread::sleep(pause);
                    (0..=x).sum()
                }));
                let r = h.join();
                check!(
                    matches!(r, Ok(v) if v == x * (x + 1) / 2),
                    "spawn_blocking gave {r:?}"
                );
            }
            1 => {
                let h = spawn_blocking(Box::new(move || planned_panic("a blocking job")));
                let r = h.join();
                check!(
                    matches!(&r, Err(JoinError::Panicked(p)) if p.message().is_some_and(|m| m.starts_with(PLANNED))),
                    "a panicking blocking job's join gave {r:?}"
                );
            }
            2 => {
                // The job ends only once the join has given up.
                let done = Arc::new(AtomicBool::new(false));
                let d2 = done.clone();
                let (release, released) = std::sync::mpsc::channel::<()>();
                let h = spawn_blocking(Box::new(move || {
                    let _ = released.recv_timeout(BACKSTOP);
                    d2.store(true, SeqCst);
                    0
                }));
                let r = spindle::with_deadline(Instant::now() + pause, || h.join());
                let _ = release.send(());
                match r {
                    Err(JoinError::DeadlineExceeded) => Fault::BlockingDeadline.add(1),
                    other => violation(format!("a blocking join past its deadline gave {other:?}")),
                }
                let t = Instant::now();
                while !done.load(SeqCst) && t.elapsed() < BACKSTOP {
                    let _ = spindle::sleep(Duration::from_millis(1));
                }
                check!(
                    done.load(SeqCst),
                    "a blocking job whose join gave up never finished"
                );
            }
            _ => {
                let h = spawn_blocking(Box::new(move || {
                    // A plain thread entered in the soak's runtime: the
                    // spawn goes there, and the join blocks the thread.
                    let (body, state) = counted(main_tally(), move || x + 1);
                    let t = Tracked::new(spindle::spawn(body), state, main_tally());
                    t.value("a task spawned from a blocking job").unwrap_or(0)
                }));
                let r = h.join();
                check!(
                    matches!(r, Ok(v) if v == x + 1),
                    "spawn from a blocking job: {r:?}"
                );
            }
        }
    }
}

/// Tasks that panic at once, after a wait, holding a lock (which the
/// unwinding lets go), or after their child panicked.
fn panics(rng: &mut Rng) {
    let lock = Arc::new(Mutex::new(0u64));
    let mut hs = Vec::new();
    for _ in 0..rng.range(1, 5) {
        let pause = rng.micros(0, 1000);
        let l = lock.clone();
        let form = rng.below(4);
        hs.push(spawn_t(rng, move || -> () {
            match form {
                0 => planned_panic("at once"),
                1 => {
                    let _ = spindle::sleep(pause);
                    planned_panic("after a sleep")
                }
                2 => {
                    let mut g = l.lock().expect("lock");
                    *g += 1;
                    planned_panic("holding a lock")
                }
                _ => {
                    let (body, state) = counted(main_tally(), || planned_panic("a child"));
                    let child = Tracked::new(spindle::spawn(body), state, main_tally());
                    match child.join() {
                        Err(JoinError::Panicked(p)) => std::panic::resume_unwind(p.into_inner()),
                        other => violation(format!("a panicking child's join gave {other:?}")),
                    }
                }
            }
        }));
    }
    for h in hs {
        let r = h.join();
        check!(
            matches!(r, Err(JoinError::Panicked(_))),
            "a panicking task's join gave {r:?}"
        );
    }
    let g = lock.lock();
    check!(
        g.is_ok(),
        "a lock held by a task that panicked stayed locked"
    );
}

/// A second runtime, loaded with tasks of every kind, shut down while
/// busy: each of its handles gives one result (a value, a planned panic,
/// or `Cancelled`), every task that started has ended, and a spawn after
/// the shutdown is cancelled. Runs on the blocking pool (a runtime's
/// shutdown blocks its caller's thread).
fn shutdown_under_load(rng: &mut Rng) {
    let seed = rng.next_u64();
    BLOCKING_SPAWNED.fetch_add(1, SeqCst);
    Stat::BlockingJobs.add(1);
    let h = spindle::task::spawn_blocking(move || second_runtime(seed));
    if let Err(e) = h.join() {
        violation(format!("second runtime: the blocking job failed: {e:?}"));
    }
}

fn second_runtime(seed: u64) {
    let mut rng = Rng::new(seed, 2);
    let rt = match Runtime::builder()
        .workers(rng.range(1, 2) as usize)
        .thread_name("soak-rt2")
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            violation(format!("second runtime: build: {e}"));
            return;
        }
    };
    Stat::SecondRuntimes.add(1);
    let handle = rt.handle();
    let tally = Arc::new(Tally::default());
    let never = Arc::new(Butex::new(0));
    let lock = Arc::new(Mutex::new(0u64));
    let mut hs = Vec::new();
    for _ in 0..rng.range(10, 150) {
        let kind = rng.below(9);
        let seed = rng.next_u64();
        let (tally2, never, lock) = (tally.clone(), never.clone(), lock.clone());
        let (body, state) = counted(&tally, move || load(kind, seed, tally2, never, lock));
        hs.push(Tracked::new(handle.spawn(body), state, &tally));
    }
    std::thread::sleep(rng.micros(0, 20_000));
    let from_task = rng.one_in(5);
    let t = Instant::now();
    if from_task {
        // One of its own tasks drops it: nobody waits for its workers.
        let holder = Arc::new(std::sync::Mutex::new(Some(rt)));
        let h2 = holder.clone();
        let (body, state) = counted(&tally, move || {
            let rt = h2.lock().expect("holder").take();
            drop(rt);
        });
        let dropper = Tracked::new(handle.spawn(body), state, &tally);
        let r = dropper.join();
        check!(
            matches!(r, Ok(()) | Err(JoinError::Cancelled)),
            "second runtime: the dropping task's join gave {r:?}"
        );
        // Had it been cancelled before it ran, the runtime is still here.
        drop(holder.lock().expect("holder").take());
        Fault::ShutdownFromTask.add(1);
    } else {
        drop(rt);
    }
    let took = t.elapsed();
    check!(
        took < Duration::from_secs(30),
        "second runtime: the shutdown took {took:?}"
    );
    for h in hs {
        let _ = h.join();
    }
    // A spawn after the shutdown is cancelled, or refused.
    let late = handle.spawn(|| ());
    check!(
        matches!(late.join(), Err(JoinError::Cancelled)),
        "second runtime: a spawn after the shutdown was not cancelled"
    );
    check!(
        spindle::task::Builder::new()
            .spawn_on(&handle, || ())
            .is_err(),
        "second runtime: spawn_on after the shutdown succeeded"
    );
    // Every task that started has ended (the stop unwinds them); from a
    // runtime dropped by its own task, the last worker may be on its way out.
    let t = Instant::now();
    while tally.get(&tally.started) != tally.get(&tally.ended) && t.elapsed() < SETTLE_LIMIT {
        std::thread::sleep(Duration::from_millis(1));
    }
    let (spawned, started, ended) = (
        tally.get(&tally.spawned),
        tally.get(&tally.started),
        tally.get(&tally.ended),
    );
    let (joined, detached) = (tally.get(&tally.joined), tally.get(&tally.detached));
    check!(
        started == ended,
        "second runtime: {started} tasks started, {ended} ended"
    );
    check!(
        spawned == joined + detached,
        "second runtime: {spawned} spawned, {joined} joined, {detached} detached ({tally:?})"
    );
    Fault::RuntimeShutdown.add(1);
    Fault::ShutdownCancelled.add(tally.get(&tally.cancelled));
    Stat::SecondRuntimeTasks.add(spawned);
}

/// One task of a second runtime's load.
fn load(kind: u64, seed: u64, tally: Arc<Tally>, never: Arc<Butex>, lock: Arc<Mutex<u64>>) {
    let mut rng = Rng::new(seed, 3);
    match kind {
        0 => {
            for _ in 0..rng.range(1, 100) {
                let r = spindle::sleep(rng.micros(0, 5000));
                check!(r.is_ok(), "second runtime: a sleep gave {r:?}");
            }
        }
        1 => {
            let _ = never.wait(0, None);
        }
        2 => {
            let (_tx, rx) = mpsc::channel::<u8>();
            let r = rx.recv();
            violation(format!(
                "second runtime: a receive nobody sends to gave {r:?}"
            ));
        }
        3 => {
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(200) {
                spindle::yield_now();
            }
        }
        4 => {
            let mut run = || -> io::Result<()> {
                let s = connect(ECHO, 0)?;
                for _ in 0..rng.range(1, 20) {
                    let data = pattern(rng.next_u64(), rng.range(1, 4096) as usize);
                    (&s).write_all(&data)?;
                    let mut back = vec![0u8; data.len()];
                    (&s).read_exact(&mut back)?;
                    check!(back == data, "second runtime: an echo came back changed");
                    let _ = spindle::sleep(rng.micros(0, 3000));
                }
                Ok(())
            };
            if let Err(e) = run() {
                violation(format!("second runtime: echo: {e}"));
            }
        }
        5 => {
            let kids: Vec<Tracked<()>> = (0..rng.range(1, 8))
                .map(|_| {
                    let pause = rng.micros(0, 10_000);
                    spawn_how(&tally, How::pick(&mut rng), move || {
                        let _ = spindle::sleep(pause);
                    })
                })
                .collect();
            for k in kids {
                let _ = k.join();
            }
        }
        6 => planned_panic("a task of a second runtime"),
        7 => {
            for _ in 0..rng.range(1, 20) {
                if let Ok(mut g) = lock.lock() {
                    *g += 1;
                    let _ = spindle::sleep(rng.micros(0, 500));
                }
            }
        }
        _ => {
            let mut set = JoinSet::new();
            for _ in 0..rng.range(1, 6) {
                let pause = rng.micros(0, 50_000);
                let (body, _state) = counted(&tally, move || {
                    let _ = spindle::sleep(pause);
                });
                // Counted as detached: the shutdown may drop the set before
                // it is joined.
                tally.detached.fetch_add(1, SeqCst);
                set.spawn(body);
            }
            while let Ok(Some(_)) = set.join_next() {}
        }
    }
}

// ---------------------------------------------------------------------------
// Looking at the process
// ---------------------------------------------------------------------------

/// A field of `/proc/self/status`, in bytes.
fn status_bytes(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().strip_suffix("kB"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}

fn rss() -> u64 {
    status_bytes("VmRSS:")
}

fn mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps").map_or(0, |s| s.lines().count())
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

/// The process's open fds by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Fds {
    sockets: usize,
    pipes: usize,
    epoll: usize,
    eventfd: usize,
    other: usize,
    listing: Vec<String>,
}

impl Fds {
    fn now() -> Fds {
        let mut f = Fds::default();
        let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
            return f;
        };
        for e in dir.flatten() {
            let target = std::fs::read_link(e.path())
                .map(|t| t.display().to_string())
                .unwrap_or_else(|_| "(closed meanwhile)".into());
            if target.starts_with("socket:") {
                f.sockets += 1;
            } else if target.starts_with("pipe:") {
                f.pipes += 1;
            } else if target == "anon_inode:[eventpoll]" {
                f.epoll += 1;
            } else if target == "anon_inode:[eventfd]" {
                f.eventfd += 1;
            } else {
                f.other += 1;
            }
            f.listing
                .push(format!("{} -> {target}", e.file_name().to_string_lossy()));
        }
        f.listing.sort();
        f
    }

    fn total(&self) -> usize {
        self.sockets + self.pipes + self.epoll + self.eventfd + self.other
    }

    /// What differs from the baseline beyond what is allowed: exact for
    /// sockets, pipes and others; pollers may be `workers` more.
    fn differs(&self, base: &Fds, workers: usize) -> Option<String> {
        let ok = self.sockets == base.sockets
            && self.pipes == base.pipes
            && self.other == base.other
            && self.epoll <= base.epoll + workers
            && self.eventfd <= base.eventfd + workers;
        (!ok).then(|| {
            format!(
                "open fds: sockets {} (baseline {}), pipes {} ({}), epoll {} ({}), \
                 eventfd {} ({}), other {} ({})",
                self.sockets,
                base.sockets,
                self.pipes,
                base.pipes,
                self.epoll,
                base.epoll,
                self.eventfd,
                base.eventfd,
                self.other,
                base.other
            )
        })
    }
}

// ---------------------------------------------------------------------------
// The driver
// ---------------------------------------------------------------------------

/// What the process holds at the first quiesce, when everything that is
/// made once has been made.
struct Baseline {
    fds: Fds,
    io_sources: usize,
    global_pending: u64,
    tasks: usize,
    at: Duration,
}

/// The process at the end of warm-up.
struct Warm {
    rss: u64,
    mappings: usize,
    vm_size: u64,
    task_slots: usize,
    global_timer_slots: u64,
    at: Duration,
}

struct Driver {
    args: Args,
    rt: Runtime,
    start: Instant,
    launched: u64,
    in_flight: HashMap<u64, (Kind, Instant, Tracked<()>)>,
    done_rx: std::sync::mpsc::Receiver<u64>,
    done_tx: std::sync::mpsc::Sender<u64>,
    next_progress: Instant,
    base: Option<Baseline>,
    warm: Option<Warm>,
    warmup: Duration,
    quiesces: u32,
    rss_start: u64,
    rss_peak_quiesce: u64,
}

/// Tells the driver a scenario is done, however its body ended.
struct Done(u64, std::sync::mpsc::Sender<u64>);

impl Drop for Done {
    fn drop(&mut self) {
        let _ = self.1.send(self.0);
    }
}

impl Driver {
    fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    fn launch(&mut self, rng: &mut Rng) {
        let idx = self.launched;
        self.launched += 1;
        let kind = Kind::pick(rng);
        let kind = self.args.only.unwrap_or(kind);
        let seed = self.args.seed;
        let done = Done(idx, self.done_tx.clone());
        let (body, state) = counted(main_tally(), move || {
            let _done = done;
            let mut rng = Rng::new(seed, idx + 1);
            kind.run(&mut rng);
        });
        let h = spindle::task::Builder::new()
            .name(format!("{}#{idx}", kind.name()))
            .spawn_on(&self.rt.handle(), body)
            .expect("spawn a scenario");
        SCENARIOS[kind as usize].fetch_add(1, Relaxed);
        self.in_flight.insert(
            idx,
            (kind, Instant::now(), Tracked::new(h, state, main_tally())),
        );
    }

    /// Waits a while for a scenario to end and joins those that did;
    /// reports a hang.
    fn reap(&mut self, wait: Duration) {
        if let Ok(idx) = self.done_rx.recv_timeout(wait) {
            self.join(idx);
            while let Ok(idx) = self.done_rx.try_recv() {
                self.join(idx);
            }
        }
        let oldest = self
            .in_flight
            .iter()
            .max_by_key(|(_, (_, t, _))| t.elapsed())
            .map(|(i, (k, t, _))| (*i, *k, t.elapsed()));
        if let Some((idx, kind, age)) = oldest {
            if age > SCENARIO_LIMIT {
                violation(format!(
                    "hang: scenario {}#{idx} has run for {age:?} (seed {})",
                    kind.name(),
                    self.args.seed
                ));
                eprintln!("{}", self.rt.dump());
                self.finish(false);
            }
        }
        if Instant::now() >= self.next_progress {
            self.progress("");
            self.next_progress += Duration::from_secs(self.args.progress_every);
        }
    }

    fn join(&mut self, idx: u64) {
        let Some((kind, _, h)) = self.in_flight.remove(&idx) else {
            violation(format!("scenario #{idx} said it was done twice"));
            return;
        };
        if let Err(e) = h.join() {
            // A planned panic never escapes a scenario.
            violation(format!("scenario {}#{idx} ended with {e:?}", kind.name()));
        }
    }

    fn progress(&self, note: &str) {
        let m = main_tally();
        let faults: u64 = Fault::ALL.iter().map(|f| f.get()).sum();
        let s = self.rt.stats();
        println!(
            "[{:6.1}s] scenarios {} (in flight {}) tasks {} conns {} faults {} rss {} \
             fds {} io {} blocking threads {}{note}",
            self.elapsed().as_secs_f64(),
            self.launched,
            self.in_flight.len(),
            m.get(&m.spawned) + Stat::SecondRuntimeTasks.get(),
            Stat::Connections.get(),
            faults,
            mib(rss()),
            Fds::now().total(),
            s.io_sources,
            s.blocking_threads,
        );
    }

    /// Launches scenarios until `until`, then joins them all.
    fn load(&mut self, rng: &mut Rng, until: Instant) {
        while Instant::now() < until && !BROKEN.load(SeqCst) {
            while self.in_flight.len() < self.args.in_flight {
                self.launch(rng);
            }
            self.reap(
                until
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(100)),
            );
        }
        let draining = Instant::now();
        while !self.in_flight.is_empty() {
            self.reap(Duration::from_millis(100));
            // Once something broke, a scenario that does not end soon is
            // shown rather than waited for.
            if BROKEN.load(SeqCst) && draining.elapsed() > Duration::from_secs(20) {
                let left: Vec<String> = self
                    .in_flight
                    .iter()
                    .map(|(i, (k, _, _))| format!("{}#{i}", k.name()))
                    .collect();
                violation(format!("scenarios still running: {}", left.join(", ")));
                eprintln!("{}", self.rt.dump());
                self.finish(false);
            }
        }
    }

    /// Stops new work (the caller has joined every scenario), lets what
    /// was detached end, and compares the process with the baseline.
    fn quiesce(&mut self) {
        self.quiesces += 1;
        let m = main_tally();
        let timer = &shared().timer;
        let workers = self.args.workers;
        let base_tasks = self.base.as_ref().map_or(1, |b| b.tasks);
        // Everything that must come back, as (what, ok, detail).
        let look = |base: Option<&Baseline>| -> Vec<(&'static str, bool, String)> {
            let s = self.rt.stats();
            let ts = timer.stats();
            let gs = TimerThread::global().stats();
            let (spawned, started, ended) = (m.get(&m.spawned), m.get(&m.started), m.get(&m.ended));
            let (joined, detached) = (m.get(&m.joined), m.get(&m.detached));
            let blocking = BLOCKING_SPAWNED.load(SeqCst);
            let mut v = vec![
                (
                    // The acceptor runs on.
                    "tasks",
                    spawned == started && started == ended + 1,
                    format!("{spawned} spawned, {started} started, {ended} ended, 1 running"),
                ),
                (
                    "handles",
                    // The acceptor's handle is held by the driver.
                    spawned == joined + detached + 1,
                    format!("{spawned} spawned, {joined} joined, {detached} detached, 1 held"),
                ),
                (
                    "runtime counters",
                    // The tasks the soak counts, one per blocking job, and
                    // the body of the `block_on` that started the server.
                    s.spawned == spawned + blocking + 1 && s.finished == ended + blocking + 1,
                    format!(
                        "the runtime counts {} spawned and {} finished; the soak {spawned} \
                         spawned and {ended} ended, {blocking} blocking jobs, 1 block_on",
                        s.spawned, s.finished
                    ),
                ),
                (
                    "live tasks",
                    s.tasks == base_tasks,
                    format!("{} started tasks not ended, {base_tasks} expected", s.tasks),
                ),
                (
                    "soak timer",
                    ts.pending == 0 && ts.triggered == Stat::TimersFired.get(),
                    format!(
                        "{} pending, {} callbacks run, {} counted by their callbacks",
                        ts.pending,
                        ts.triggered,
                        Stat::TimersFired.get()
                    ),
                ),
            ];
            if let Some(b) = base {
                v.push((
                    "global timer",
                    gs.pending == b.global_pending,
                    format!(
                        "{} pending, {} at the baseline",
                        gs.pending, b.global_pending
                    ),
                ));
                v.push((
                    "poller registrations",
                    s.io_sources == b.io_sources,
                    format!(
                        "{} registered, {} at the baseline",
                        s.io_sources, b.io_sources
                    ),
                ));
                let fds = Fds::now();
                let d = fds.differs(&b.fds, workers);
                v.push(("fds", d.is_none(), d.unwrap_or_default()));
            }
            v
        };
        let t = Instant::now();
        let mut state = look(self.base.as_ref());
        while state.iter().any(|(_, ok, _)| !ok) && t.elapsed() < SETTLE_LIMIT {
            std::thread::sleep(Duration::from_millis(10));
            state = look(self.base.as_ref());
        }
        for (what, ok, detail) in &state {
            check!(*ok, "after quiesce {}: {what}: {detail}", self.quiesces);
        }
        if let (Some(b), Some((_, false, _))) = (
            self.base.as_ref(),
            state.iter().find(|(w, _, _)| *w == "fds"),
        ) {
            eprintln!("fds at the baseline:\n  {}", b.fds.listing.join("\n  "));
            eprintln!("fds now:\n  {}", Fds::now().listing.join("\n  "));
        }

        let s = self.rt.stats();
        // Stacks: no task holds one (live tasks above); the pools stay
        // under their ceiling.
        let max_map_count = std::fs::read_to_string("/proc/sys/vm/max_map_count")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(65_530);
        check!(
            s.pooled_stacks <= max_map_count / 2,
            "after quiesce {}: {} stacks pooled, over the pools' ceiling",
            self.quiesces,
            s.pooled_stacks
        );
        let soak_slots = timer.stats().slots;
        let slot_bound = 2 * TIMERS_PER_SCENARIO * self.args.in_flight as u64;
        check!(
            soak_slots <= slot_bound.max(64),
            "after quiesce {}: the soak's timer has {soak_slots} slots for at most {} live \
             timers",
            self.quiesces,
            slot_bound / 2
        );
        let rss_now = rss();
        let elapsed = self.elapsed();
        match (&self.base, &self.warm) {
            (None, _) => {
                self.base = Some(Baseline {
                    fds: Fds::now(),
                    io_sources: s.io_sources,
                    global_pending: TimerThread::global().stats().pending,
                    tasks: s.tasks,
                    at: elapsed,
                });
            }
            (Some(_), None) if elapsed >= self.warmup => {
                self.warm = Some(Warm {
                    rss: rss_now,
                    mappings: mappings(),
                    vm_size: status_bytes("VmSize:"),
                    task_slots: s.task_slots,
                    global_timer_slots: TimerThread::global().stats().slots,
                    at: elapsed,
                });
            }
            (Some(_), Some(w)) => {
                self.rss_peak_quiesce = self.rss_peak_quiesce.max(rss_now);
                check!(
                    rss_now <= w.rss + RSS_MARGIN,
                    "after quiesce {}: resident memory {} is over the bound {} (warm-up {} \
                     + {})",
                    self.quiesces,
                    mib(rss_now),
                    mib(w.rss + RSS_MARGIN),
                    mib(w.rss),
                    mib(RSS_MARGIN)
                );
                let maps = mappings();
                check!(
                    maps <= w.mappings + MAPPINGS_MARGIN,
                    "after quiesce {}: {maps} mappings, {} at warm-up",
                    self.quiesces,
                    w.mappings
                );
                let vm = status_bytes("VmSize:");
                check!(
                    vm <= w.vm_size + VMSIZE_MARGIN,
                    "after quiesce {}: address space {}, {} at warm-up",
                    self.quiesces,
                    mib(vm),
                    mib(w.vm_size)
                );
                let global_slots = TimerThread::global().stats().slots;
                check!(
                    global_slots <= w.global_timer_slots + TIMER_SLOTS_MARGIN,
                    "after quiesce {}: the global timer has {global_slots} slots, {} at warm-up",
                    self.quiesces,
                    w.global_timer_slots
                );
                check!(
                    s.task_slots <= w.task_slots + TASK_SLOTS_MARGIN,
                    "after quiesce {}: {} task slots, {} at warm-up",
                    self.quiesces,
                    s.task_slots,
                    w.task_slots
                );
            }
            _ => {}
        }
        self.progress(&format!(
            " | quiesce {} in {:.0?}: {} task slots, {} pooled stacks, {} mappings",
            self.quiesces,
            t.elapsed(),
            s.task_slots,
            s.pooled_stacks,
            mappings()
        ));
    }

    /// Prints the summary and exits: 0 if no invariant broke.
    fn finish(&mut self, stopped_cleanly: bool) -> ! {
        let m = main_tally();
        let s = self.rt.stats();
        let rss_end = rss();
        if stopped_cleanly && !BROKEN.load(SeqCst) {
            if let Some(w) = &self.warm {
                check!(
                    rss_end <= w.rss + RSS_MARGIN,
                    "resident memory at the end {} is over the bound {} (warm-up {} + {})",
                    mib(rss_end),
                    mib(w.rss + RSS_MARGIN),
                    mib(w.rss),
                    mib(RSS_MARGIN)
                );
            } else {
                check!(
                    self.args.secs < 2 * self.args.quiesce_every,
                    "the run ended before warm-up did"
                );
            }
        }
        let a = &self.args;
        println!("\nsoak summary");
        println!(
            "  command      soak --secs {} --seed {} --workers {} --in-flight {} \
             --quiesce-every {}",
            a.secs, a.seed, a.workers, a.in_flight, a.quiesce_every
        );
        println!(
            "  elapsed      {:.1} s, {} quiesces",
            self.elapsed().as_secs_f64(),
            self.quiesces
        );
        println!("  scenarios    {} launched", self.launched);
        let per_kind: Vec<String> = Kind::ALL
            .iter()
            .map(|k| format!("{} {}", k.name(), SCENARIOS[*k as usize].load(Relaxed)))
            .collect();
        for line in per_kind.chunks(6) {
            println!("               {}", line.join(", "));
        }
        println!(
            "  tasks        {} on the soak's runtime ({} started, {} ended, {} joined, \
             {} detached, {} panicked); {} on {} second runtimes; {} blocking jobs",
            m.get(&m.spawned),
            m.get(&m.started),
            m.get(&m.ended),
            m.get(&m.joined),
            m.get(&m.detached),
            m.get(&m.panicked),
            Stat::SecondRuntimeTasks.get(),
            Stat::SecondRuntimes.get(),
            Stat::BlockingJobs.get(),
        );
        for st in Stat::ALL {
            println!("  {:<12} {} {}", "", st.get(), st.text());
        }
        println!(
            "  faults       {} in all",
            Fault::ALL.iter().map(|f| f.get()).sum::<u64>()
        );
        for f in Fault::ALL {
            println!("  {:<12} {} {}", "", f.get(), f.text());
        }
        let warm = self.warm.as_ref().map_or("-".into(), |w| {
            format!("{} (at {:.0} s)", mib(w.rss), w.at.as_secs_f64())
        });
        println!(
            "  rss          start {}, warm {warm}, highest at a later quiesce {}, end {}; \
             bound: warm + {}",
            mib(self.rss_start),
            mib(self.rss_peak_quiesce),
            mib(rss_end),
            mib(RSS_MARGIN)
        );
        if let Some(b) = &self.base {
            println!(
                "  baseline     at {:.0} s: {} fds, {} poller registrations, {} global timers",
                b.at.as_secs_f64(),
                b.fds.total(),
                b.io_sources,
                b.global_pending
            );
        }
        println!(
            "  runtime      {} workers: {} spawned, {} finished, {} switches, {} steals, \
             {} parks, {} task slots, {} pooled stacks",
            s.workers,
            s.spawned,
            s.finished,
            s.switches,
            s.steals,
            s.parks,
            s.task_slots,
            s.pooled_stacks
        );
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        println!(
            "  machine      {} CPUs, Linux {}",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            kernel.trim()
        );
        println!("  seed         {}", a.seed);
        let n = VIOLATION_COUNT.load(SeqCst);
        if n == 0 {
            println!("  result       PASS");
            std::process::exit(0);
        }
        println!("  result       FAIL: {n} broken invariants");
        for v in VIOLATIONS.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            println!("    - {v}");
        }
        std::process::exit(1);
    }
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("soak: {e}");
            std::process::exit(2);
        }
    };
    install_panic_hook();
    let rss_start = rss();
    println!(
        "soak: seed {} for {} s, {} workers, {} scenarios in flight, a quiesce every {} s \
         (replay: soak --secs {} --seed {})",
        args.seed,
        args.secs,
        args.workers,
        args.in_flight,
        args.quiesce_every,
        args.secs,
        args.seed
    );
    let rt = Runtime::builder()
        .workers(args.workers)
        .thread_name("soak")
        .build()
        .expect("build the soak's runtime");
    let mut options = TimerOptions::default();
    options.name = "soak-timer".into();
    let timer = TimerThread::start(options).expect("start the soak's timer");
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a loopback port");
    let (echo, acceptor) = rt.block_on(|| {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the echo server");
        let addr = listener.local_addr().expect("the echo server's address");
        (
            addr,
            spawn_how(main_tally(), How::Spawn, move || accept_loop(listener)),
        )
    });
    let _ = SHARED.set(Shared {
        echo,
        closed,
        timer,
    });
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let secs = Duration::from_secs(args.secs);
    // Warm-up: a fifth of the run, at most two minutes, at least one
    // quiesce past the baseline.
    let warmup = (secs / 5).min(Duration::from_secs(120));
    let start = Instant::now();
    let mut d = Driver {
        next_progress: start + Duration::from_secs(args.progress_every),
        args,
        rt,
        start,
        launched: 0,
        in_flight: HashMap::new(),
        done_rx,
        done_tx,
        base: None,
        warm: None,
        warmup,
        quiesces: 0,
        rss_start,
        rss_peak_quiesce: 0,
    };
    let mut rng = Rng::new(d.args.seed, 0);
    let end = start + secs;
    let every = Duration::from_secs(d.args.quiesce_every);
    loop {
        let until = (Instant::now() + every).min(end);
        d.load(&mut rng, until);
        d.quiesce();
        if Instant::now() >= end || BROKEN.load(SeqCst) {
            break;
        }
    }
    // The server's acceptor is stopped in its accept.
    check!(
        acceptor.handle().stop().is_ok(),
        "stop of the acceptor failed"
    );
    let r = acceptor.join();
    check!(r.is_ok(), "the acceptor's join gave {r:?}");
    d.finish(true);
}
