//! Task dumps: every live task of a runtime, with what it does and, where
//! the build allows, the stack it is suspended on ([`Runtime::dump`]).
//!
//! A dump never stops the world. It reads the task table from the calling
//! thread, holding each live task's slot for the moment it copies the
//! task's name and reads its state: the words a task writes as it begins a
//! wait and its queuer clears (`meta::activity`), and the running task of
//! each worker. So each task's entry is consistent on its own, not the
//! dump as a whole (a task may end, or start, while it is taken).
//!
//! The backtrace of a suspended task is its own stack's frame chain, which
//! only its home worker may read (the task runs nowhere else, so while its
//! worker runs something else its frames hold still). So the dump places
//! one short-lived task on each worker that has tasks to walk; it walks
//! them in slices of at most [`SLICE`] and yields between slices, so no
//! worker is held longer (a dump of 100 000 tasks holds each worker a few
//! tens of slices). A worker that does not get to its walker within
//! [`WALK_TIMEOUT`] (one task holds it: the very hang a dump is taken to
//! see) leaves its tasks without backtraces. Walking needs frame pointers:
//! a build with `-C force-frame-pointers=yes` has them (the build script
//! sets `spindle_frame_pointers`); other builds' dumps have no backtraces.
//! Return addresses are named with the `backtrace` crate, once per address
//! and once per distinct stack in a dump.
//!
//! [`Runtime::dump`]: crate::Runtime::dump

use crate::id::TaskId;
use crate::io::Interest;
use crate::loom::stats::Ordering;
use crate::meta::activity::WaitOn;
use crate::meta::{table, EndState, TaskRef, NO_HOME};
use crate::sched::TaskControl;
use crate::signal::Signals;
use libc::c_int;
use std::fmt;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// The longest a walker holds its worker before it yields.
#[cfg_attr(not(spindle_frame_pointers), allow(dead_code))]
const SLICE: Duration = Duration::from_micros(500);

/// How long a dump waits for the workers to walk their tasks' stacks.
#[cfg_attr(not(spindle_frame_pointers), allow(dead_code))]
const WALK_TIMEOUT: Duration = Duration::from_millis(500);

/// The most frames a backtrace lists.
#[cfg_attr(not(spindle_frame_pointers), allow(dead_code))]
const MAX_FRAMES: usize = 64;

pub use crate::meta::activity::WaitKind;

/// What a task is doing ([`TaskInfo::state`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TaskState {
    /// Queued to run (or never run yet).
    Ready,
    /// Running on its worker.
    Running,
    /// In `sleep`, until then (or earlier, if its deadline scope ends first).
    Sleeping {
        /// When the sleep ends.
        until: Instant,
    },
    /// Waiting.
    Waiting {
        /// What for.
        on: WaitKind,
        /// When the wait ends by itself: the earliest of the wait's own
        /// deadline and its task's deadline scope.
        deadline: Option<Instant>,
    },
}

/// One live task in a [`TaskDump`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TaskInfo {
    /// The task.
    pub id: TaskId,
    /// Its name, if it was given one (`task::Builder::name`).
    pub name: Option<String>,
    /// The worker it runs on (an index into
    /// [`RuntimeStats::workers`](crate::RuntimeStats::workers)); `None` before its
    /// first run.
    pub worker: Option<usize>,
    /// What it is doing.
    pub state: TaskState,
    /// Time since it was spawned (to a few milliseconds).
    pub age: Duration,
    /// The suspended task's own stack, innermost frame first, one function
    /// per line; `None` for a task that is running or has never run, and
    /// in builds without frame pointers (see `docs/observing.md`).
    pub backtrace: Option<String>,
}

/// Every live task of a runtime at one moment, each consistent on its own
/// ([`Runtime::dump`](crate::Runtime::dump)); `Display` renders it for
/// people.
#[derive(Debug, Clone)]
pub struct TaskDump {
    tasks: Vec<TaskInfo>,
    workers: usize,
    taken_in: Duration,
    longest_hold: Duration,
    backtraces: Backtraces,
}

/// Whether a dump's backtraces were taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(dead_code)] // `NotBuilt`, or the others, as the build has frame pointers or not
enum Backtraces {
    /// The build has no frame pointers.
    NotBuilt,
    /// Every worker walked its tasks.
    Taken,
    /// Some workers did not walk theirs in time: held by a task, or the
    /// runtime is shutting down.
    Partial,
}

impl TaskDump {
    /// The tasks, oldest first.
    pub fn iter(&self) -> std::slice::Iter<'_, TaskInfo> {
        self.tasks.iter()
    }

    /// How many tasks it lists.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether it lists none.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// The task `id`, if it is listed.
    pub fn get(&self, id: TaskId) -> Option<&TaskInfo> {
        self.tasks.iter().find(|t| t.id == id)
    }

    /// Whether the suspended tasks' backtraces were taken: the build has
    /// frame pointers (`-C force-frame-pointers=yes`) and every worker
    /// walked its tasks in time.
    pub fn has_backtraces(&self) -> bool {
        self.backtraces == Backtraces::Taken
    }

    /// How long the dump took.
    pub fn taken_in(&self) -> Duration {
        self.taken_in
    }

    /// The longest a worker was held from its own tasks to walk their
    /// stacks (zero without backtraces).
    pub fn longest_hold(&self) -> Duration {
        self.longest_hold
    }
}

impl<'a> IntoIterator for &'a TaskDump {
    type Item = &'a TaskInfo;
    type IntoIter = std::slice::Iter<'a, TaskInfo>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl fmt::Display for TaskDump {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = |p: fn(&TaskState) -> bool| self.tasks.iter().filter(|t| p(&t.state)).count();
        writeln!(
            f,
            "spindle task dump: {} tasks on {} workers ({} running, {} ready, {} sleeping, {} waiting), taken in {:.1?}",
            self.tasks.len(),
            self.workers,
            count(|s| matches!(s, TaskState::Running)),
            count(|s| matches!(s, TaskState::Ready)),
            count(|s| matches!(s, TaskState::Sleeping { .. })),
            count(|s| matches!(s, TaskState::Waiting { .. })),
            self.taken_in,
        )?;
        match self.backtraces {
            Backtraces::NotBuilt => writeln!(
                f,
                "(no backtraces: build with RUSTFLAGS=\"-C force-frame-pointers=yes\")"
            )?,
            Backtraces::Partial => writeln!(
                f,
                "(some backtraces missing: a worker did not get to them within {WALK_TIMEOUT:?})"
            )?,
            Backtraces::Taken => {}
        }
        let now = Instant::now();
        for t in &self.tasks {
            writeln!(f)?;
            write!(f, "{}", t.id)?;
            if let Some(name) = &t.name {
                write!(f, " {name:?}")?;
            }
            match t.worker {
                Some(w) => write!(f, " on worker {w}")?,
                None => write!(f, " (not started)")?,
            }
            write!(f, ", ")?;
            match &t.state {
                TaskState::Ready => write!(f, "ready")?,
                TaskState::Running => write!(f, "running")?,
                TaskState::Sleeping { until } => {
                    write!(f, "sleeping, {}", In(until.saturating_duration_since(now)))?
                }
                TaskState::Waiting { on, deadline } => {
                    write!(f, "waiting on ")?;
                    match on {
                        WaitKind::Fd { fd, interest } => {
                            write!(f, "fd {fd} ({})", interest_name(*interest))?
                        }
                        other => write!(f, "{other:?}")?,
                    }
                    if let Some(d) = deadline {
                        write!(f, ", deadline {}", In(d.saturating_duration_since(now)))?;
                    }
                }
            }
            writeln!(f, ", age {:.1?}", t.age)?;
            if let Some(bt) = &t.backtrace {
                for line in bt.lines() {
                    writeln!(f, "    {line}")?;
                }
            }
        }
        Ok(())
    }
}

/// "in 1.2s", or "due" for a time that has come.
struct In(Duration);

impl fmt::Display for In {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_zero() {
            write!(f, "due")
        } else {
            write!(f, "in {:.1?}", self.0)
        }
    }
}

fn interest_name(i: Interest) -> &'static str {
    match i {
        Interest::Readable => "readable",
        Interest::Writable => "writable",
        Interest::ReadWrite => "readable or writable",
    }
}

/// A live task found by the scan whose stack its worker is to walk: one of
/// its refs, given back on drop (by the walker, once it has walked it, or
/// wherever the walk is given up), so its slot stays its own until then.
#[cfg_attr(not(spindle_frame_pointers), allow(dead_code))]
struct Held {
    t: TaskRef,
    /// Its index in the dump's list.
    index: usize,
}

impl Drop for Held {
    fn drop(&mut self) {
        table().release(self.t, None);
    }
}

/// Runs a function as a task placed on a worker (index), detached; false
/// if it cannot (the runtime has shut down). Given by the runtime, which
/// knows how to spawn (this module does not import the task layer).
pub(crate) type PlaceOnWorker<'a> = &'a dyn Fn(usize, Box<dyn FnOnce() + Send>) -> bool;

/// Takes a dump of the runtime `control`, placing its walkers with
/// `place`; see the module docs.
pub(crate) fn take(control: &TaskControl, place: PlaceOnWorker<'_>) -> TaskDump {
    let started = Instant::now();
    let workers = control.worker_count();
    let runtime: *const () = std::ptr::from_ref(control).cast();
    let running: Vec<u64> = (0..workers)
        .map(|i| {
            control
                .group(i)
                .map_or(0, |g| g.running.load(Ordering::Acquire))
        })
        .collect();
    let table = table();
    let mut tasks = Vec::new();
    // Per worker, its started tasks to walk.
    let mut to_walk: Vec<Vec<Held>> = (0..workers).map(|_| Vec::new()).collect();
    table.for_each_slot(|t| {
        let Some(t) = table.acquire(t.id()) else {
            return;
        };
        let id = t.id();
        // A task still being made has no spawn time yet (it is published
        // last, with release): skip it, as one spawned a moment later
        // would be. One that has it has its runtime and name written.
        // A task that has ended (its joiners may know it) is not live,
        // though its slot may not be freed yet.
        let (Some(age), EndState::Running) = (t.age(), t.end_state()) else {
            table.release(t, None);
            return;
        };
        // SAFETY: we hold the task, so its slot and what spawn wrote into
        // it stay until we release it, and that writing is over (above).
        if unsafe { t.runtime() } != runtime {
            table.release(t, None);
            return;
        }
        // SAFETY: as above.
        let name = unsafe { t.name() }.map(str::to_owned);
        let home = t.home();
        let worker = (home != NO_HOME).then_some(home);
        let state = if worker.is_some_and(|w| running.get(w) == Some(&id.as_u64())) {
            TaskState::Running
        } else {
            match t.activity().read() {
                None => TaskState::Ready,
                Some((WaitOn::Sleep, until)) => TaskState::Sleeping {
                    until: until.unwrap_or_else(|| started + Duration::from_secs(86_400 * 365)),
                },
                Some((WaitOn::Wait(on), deadline)) => TaskState::Waiting { on, deadline },
            }
        };
        let index = tasks.len();
        let walk = matches!(
            state,
            TaskState::Sleeping { .. } | TaskState::Waiting { .. } | TaskState::Ready
        );
        tasks.push(TaskInfo {
            id,
            name,
            worker,
            state,
            age,
            backtrace: None,
        });
        match worker {
            Some(w) if walk && w < workers && cfg!(spindle_frame_pointers) => {
                to_walk[w].push(Held { t, index })
            }
            _ => table.release(t, None),
        }
    });
    let (backtraces, longest_hold) = backtraces(place, to_walk, &mut tasks);
    // Oldest first; the id breaks ties (ages are coarse).
    tasks.sort_by(|a, b| b.age.cmp(&a.age).then(a.id.as_u64().cmp(&b.id.as_u64())));
    TaskDump {
        tasks,
        workers,
        taken_in: started.elapsed(),
        longest_hold,
        backtraces,
    }
}

/// The thread of `Builder::dump_on_signal`: it prints a dump to stderr on
/// each delivery of its signal. A thread of its own, not a task: a dump is
/// most wanted when every worker is held, and it answers then too. It
/// waits in `poll(2)` on the signal's wake-up fd and on a socket whose
/// other end this owns: dropping it (with the runtime) closes that end,
/// and the thread exits; the drop joins it.
#[derive(Debug)]
pub(crate) struct DumpOnSignal {
    stop: Option<UnixStream>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DumpOnSignal {
    /// Registers for `sig` (an error for a signal that cannot be waited
    /// for, as `Signals::new`) and starts the thread; `dump` takes a dump,
    /// or says the runtime is gone.
    pub(crate) fn start(
        sig: c_int,
        dump: impl Fn() -> Option<TaskDump> + Send + 'static,
    ) -> io::Result<DumpOnSignal> {
        let signals = Signals::new(&[sig])?;
        let (stop_rx, stop_tx) = UnixStream::pair()?;
        let thread = std::thread::Builder::new()
            .name("spindle-dump".into())
            .spawn(move || loop {
                let mut fds = [
                    libc::pollfd {
                        fd: signals.wake_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    },
                    libc::pollfd {
                        fd: stop_rx.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    },
                ];
                // SAFETY: `fds` is a valid array of two pollfds.
                let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
                if n < 0 {
                    let error = io::Error::last_os_error();
                    if error.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    tracing::error!(%error, "dump on signal: poll failed; no more dumps");
                    return;
                }
                if fds[1].revents != 0 {
                    return;
                }
                match signals.take_after_wake() {
                    Ok(Some(_)) => match dump() {
                        Some(d) => eprintln!("{d}"),
                        None => return,
                    },
                    Ok(None) => {}
                    Err(error) => {
                        tracing::error!(%error, "dump on signal: cannot read the signal; no more dumps");
                        return;
                    }
                }
            })?;
        Ok(DumpOnSignal {
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }
}

impl Drop for DumpOnSignal {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            // From a task (a runtime dropped inside another's task), the
            // thread is left to end on its own: a dump under way would
            // hold that worker for its walk's timeout.
            if crate::sched::current_group().is_none() && t.join().is_err() {
                tracing::error!("the dump-on-signal thread panicked");
            }
        }
    }
}

/// Builds without frame pointers have no backtraces (and no tasks to walk).
#[cfg(not(spindle_frame_pointers))]
fn backtraces(
    _: PlaceOnWorker<'_>,
    _: Vec<Vec<Held>>,
    _: &mut [TaskInfo],
) -> (Backtraces, Duration) {
    (Backtraces::NotBuilt, Duration::ZERO)
}

#[cfg(spindle_frame_pointers)]
use walk::backtraces;

/// Walking the suspended tasks' stacks on their workers, and naming the
/// return addresses found.
#[cfg(spindle_frame_pointers)]
mod walk {
    use super::*;
    use crate::error::WaitError;
    use crate::loom::stats::AtomicU64;
    use crate::meta::seam::Suspend;
    use crate::meta::wait_queue::WaitPolicy;
    use crate::sched;
    use crate::wait::{self, Butex};
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::sync::Mutex;

    /// What the walkers of one dump share with it.
    struct Walks {
        /// Per worker, each walked task's index in the dump and its return
        /// addresses.
        frames: Mutex<Vec<(usize, Vec<usize>)>>,
        /// Walkers done; the dump waits on it.
        done: Butex,
        /// The longest slice a walker held its worker, in ns.
        longest_hold: AtomicU64,
    }

    pub(super) fn backtraces(
        place: PlaceOnWorker<'_>,
        to_walk: Vec<Vec<Held>>,
        tasks: &mut [TaskInfo],
    ) -> (Backtraces, Duration) {
        let walks = Arc::new(Walks {
            frames: Mutex::new(Vec::new()),
            done: Butex::new(0),
            longest_hold: AtomicU64::new(0),
        });
        let mut walkers = 0u32;
        let mut all_started = true;
        for (w, list) in to_walk.into_iter().enumerate() {
            if list.is_empty() {
                continue;
            }
            let shared = Arc::clone(&walks);
            // The walker owns the tasks' refs: a walk that runs after the
            // dump gave up on it still finds their slots their own.
            if place(w, Box::new(move || walk_worker(w, list, &shared))) {
                walkers += 1;
            } else {
                all_started = false;
            }
        }
        let deadline = Instant::now() + WALK_TIMEOUT;
        let mut complete = all_started;
        loop {
            let done = walks.done.value().load(Ordering::Acquire);
            if done >= walkers {
                break;
            }
            // Not interruptible: an interrupt pending for the caller stays
            // pending for its own next wait. A walker that ends between
            // the load and the wait makes it `WouldBlock`: look again.
            match wait::wait(
                walks.done.queue(),
                done,
                Some(deadline),
                WaitPolicy::Uninterruptible,
                WaitKind::Join,
            ) {
                Ok(()) | Err(WaitError::WouldBlock) => {}
                // Timed out (or the caller's deadline scope passed): what
                // was walked is kept, the rest goes without.
                Err(_) => {
                    complete = false;
                    break;
                }
            }
        }
        let frames = std::mem::take(&mut *walks.frames.lock().unwrap_or_else(|e| e.into_inner()));
        let mut names = Names::default();
        for (index, addrs) in frames {
            tasks[index].backtrace = Some(names.backtrace(&addrs));
        }
        let hold = Duration::from_nanos(walks.longest_hold.load(Ordering::Relaxed));
        let state = if complete {
            Backtraces::Taken
        } else {
            Backtraces::Partial
        };
        (state, hold)
    }

    /// On worker `w`: the frames of each of `jobs` (tasks homed here,
    /// held), in slices of at most [`SLICE`]; each task's ref is given
    /// back as it is walked.
    fn walk_worker(w: usize, jobs: Vec<Held>, walks: &Walks) {
        let mut out = Vec::with_capacity(jobs.len());
        let mut slice = Instant::now();
        for (n, job) in jobs.into_iter().enumerate() {
            if n % 8 == 7 {
                let held = slice.elapsed();
                if held >= SLICE {
                    note_hold(walks, held);
                    yield_now();
                    slice = Instant::now();
                }
            }
            // The held slot is still this task's; it ran here before the
            // scan (its home never changes), and may have ended since (its
            // stack given back): then there is nothing to walk.
            let t = job.t;
            debug_assert_eq!(t.home(), w, "a started task left its worker");
            if t.end_state() != EndState::Running {
                continue;
            }
            // SAFETY: we hold `t` (its slot is not freed nor reused), and we
            // run on its home worker, so it is not running (it runs only
            // here, and we do): its saved frame pointer and stack bounds
            // hold still, and so do the frames they point at.
            let frames = unsafe { frames_of(t) };
            if !frames.is_empty() {
                out.push((job.index, frames));
            }
        }
        note_hold(walks, slice.elapsed());
        walks
            .frames
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(out);
        walks.done.value().fetch_add(1, Ordering::Release);
        walks.done.wake_all();
    }

    /// Lets the worker's other tasks run (the walker is a task: it runs
    /// on a worker, not unwinding).
    fn yield_now() {
        if let Some(t) = sched::suspendable_task() {
            // SAFETY: `t` is the running task and this is its code.
            unsafe { sched::suspend(t, Suspend::Yield) };
        }
    }

    fn note_hold(walks: &Walks, held: Duration) {
        let ns = u64::try_from(held.as_nanos()).unwrap_or(u64::MAX);
        walks.longest_hold.fetch_max(ns, Ordering::Relaxed);
    }

    /// The return addresses of `t`'s frame chain, innermost first.
    ///
    /// # Safety
    /// `t` is a live task that is not running and cannot start running
    /// while this runs (the caller runs on its home worker).
    unsafe fn frames_of(t: TaskRef) -> Vec<usize> {
        // SAFETY: the caller's contract.
        let (mut fp, lo, hi) = unsafe { t.saved_frames() };
        let mut frames = Vec::new();
        // Each frame: [fp] the caller's frame pointer, [fp + 8] the return
        // address. Every read stays inside the task's stack, and the chain
        // must climb, so a broken chain ends the walk, never a fault.
        while frames.len() < MAX_FRAMES && fp >= lo && fp % 16 == 0 && fp + 16 <= hi {
            // SAFETY: `[fp, fp + 16)` lies inside the task's mapped stack,
            // which holds still (the caller's contract).
            let (next, ret) = unsafe {
                (
                    std::ptr::read(fp as *const usize),
                    std::ptr::read((fp + 8) as *const usize),
                )
            };
            if ret == 0 {
                break;
            }
            frames.push(ret);
            if next <= fp {
                break;
            }
            fp = next;
        }
        frames
    }

    /// Names of return addresses, and whole backtraces, made once each.
    #[derive(Default)]
    struct Names {
        functions: HashMap<usize, String>,
        stacks: HashMap<Vec<usize>, String>,
    }

    impl Names {
        fn backtrace(&mut self, addrs: &[usize]) -> String {
            if let Some(s) = self.stacks.get(addrs) {
                return s.clone();
            }
            let mut lines: Vec<&str> = Vec::new();
            for &a in addrs {
                self.functions.entry(a).or_insert_with(|| name_of(a));
            }
            for a in addrs {
                lines.extend(self.functions[a].lines());
            }
            // The frames every task starts from (spindle's, std's unwind
            // guards, corosensei's trampoline) say nothing of this one.
            let own = lines.iter().rposition(|l| !is_startup_frame(l));
            let keep = own.map_or(lines.len(), |i| i + 1);
            let mut s = lines[..keep].join("\n");
            s.push('\n');
            self.stacks.insert(addrs.to_vec(), s.clone());
            s
        }
    }

    /// `name` without its generic arguments (`do_io<TcpStream, ...>` is
    /// `do_io`): a line per frame, not a paragraph. A qualified path
    /// (`<Foo as Drop>::drop`) stays.
    fn without_generics(name: &str) -> String {
        let mut out = String::with_capacity(name.len());
        // Depth inside generic arguments being dropped.
        let mut dropping = 0usize;
        for c in name.chars() {
            if dropping > 0 {
                match c {
                    '<' => dropping += 1,
                    '>' => dropping -= 1,
                    _ => {}
                }
            } else if c == '<'
                && out
                    .chars()
                    .last()
                    .is_some_and(|p| p.is_alphanumeric() || p == '_' || p == '}')
            {
                dropping = 1;
            } else {
                out.push(c);
            }
        }
        out
    }

    #[cfg(test)]
    #[test]
    fn generic_arguments_go_qualified_paths_stay() {
        assert_eq!(without_generics("do_io<a::B, c::D<E>>"), "do_io");
        assert_eq!(without_generics("{closure#0}<F>"), "{closure#0}");
        assert_eq!(
            without_generics("<spindle::X<u8> as core::ops::Drop>::drop"),
            "<spindle::X as core::ops::Drop>::drop"
        );
    }

    /// Whether a backtrace line is in the runtime's own code, std or core,
    /// or corosensei, or has no source file (a trampoline).
    fn is_startup_frame(line: &str) -> bool {
        let Some((_, file)) = line.rsplit_once(" at ") else {
            return true;
        };
        file.starts_with(concat!(env!("CARGO_MANIFEST_DIR"), "/src/"))
            || file.starts_with("/rustc/")
            || file.contains("/corosensei-")
    }

    /// The functions a return address is in (the call just before it: the
    /// function inlined there first, then those it was inlined into), one
    /// per line, with file and line where the build has line tables.
    fn name_of(ret: usize) -> String {
        let mut out: Vec<String> = Vec::new();
        // The call instruction ends at `ret`: look up the byte before it.
        backtrace::resolve((ret - 1) as *mut std::ffi::c_void, |sym| {
            let name = sym.name().map_or_else(
                || format!("{ret:#x}"),
                |n| without_generics(&format!("{n:#}")),
            );
            out.push(match (sym.filename(), sym.lineno()) {
                (Some(file), Some(line)) => format!("{name} at {}:{line}", file.display()),
                _ => name,
            });
        });
        if out.is_empty() {
            return format!("{ret:#x}");
        }
        out.join("\n")
    }
}
