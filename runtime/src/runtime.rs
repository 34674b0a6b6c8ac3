//! `Runtime` and its `Builder`; the lazily started global runtime.
//!
//! A runtime is a `TaskControl` (its shared state) plus its worker threads. Workers
//! are added by [`Runtime::set_workers`] (never removed, like
//! `bthread_setconcurrency`) and stopped by [`Runtime::shutdown`] or drop:
//! each worker then cancels the tasks still queued on it (unwinding started
//! ones on their own thread), then ends the waits of those blocked in one
//! and cancels them the same way, and exits. So no task outlives its
//! runtime, and no stack is kept for one. (The one wait it does not cut
//! short is `block_on`'s from a task, whose task borrows from the waiter:
//! the worker waits for that task to end first.)
//!
//! [`Runtime::stats`] reads counters that each worker keeps for itself (in
//! its `GroupRemote`, written by that worker only, so a bump is a plain
//! load and store) and sums them, per worker and in total, from one read
//! of each. A worker's thread hooks ([`Builder::on_thread_start`],
//! [`Builder::on_thread_stop`]) run on its thread around its run loop,
//! outside any task, with their panics caught.

use crate::error::{panic_message, JoinError, SetWorkersError};
use crate::loom::lock;
use crate::loom::stats::Ordering::Relaxed as StatRelaxed;
use crate::loom::sync::atomic::Ordering;
use crate::meta::activity::WaitKind;
use crate::meta::wait_queue::WaitPolicy;
use crate::meta::{EndState, TaskRef};
use crate::sched::{
    self, Config, Cpus, GroupRemote, TaskControl, TaskGroup, DEFAULT_IDLE_POLL, DEFAULT_SLEEP_SPIN,
    DEFAULT_STALL_THRESHOLD, MAX_WORKERS,
};
use crate::stack;
use crate::task::{self, JoinHandle, RunOrder};
use crate::wait::{self, deadline};
use crossbeam_deque::Worker;
use std::io;
use std::marker::PhantomData;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The default stack size of tasks: 256 KiB of address space, of which only
/// the pages a task touches are resident.
pub const DEFAULT_STACK_SIZE: usize = 256 * 1024;

/// An M:N runtime: worker threads running tasks. See the crate docs.
///
/// ```
/// use std::time::Duration;
///
/// let rt = spindle::Runtime::new()?;
/// let reply = rt.block_on(|| {
///     // A task per call: each may sleep or wait without holding up its
///     // worker, which runs the others meanwhile.
///     let call = spindle::spawn(|| {
///         spindle::sleep(Duration::from_millis(5)).unwrap();
///         "pong"
///     });
///     call.join().unwrap()
/// });
/// assert_eq!(reply, "pong");
/// rt.shutdown(); // also on drop
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Runtime {
    pub(crate) control: Arc<TaskControl>,
    /// The thread of [`Builder::dump_on_signal`], stopped with the runtime.
    dump_on_signal: Option<crate::dump::DumpOnSignal>,
    /// Run on each worker thread, those `set_workers` adds included.
    hooks: ThreadHooks,
}

/// What a reader of a log wants: not every worker's queues (and no lock).
impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("workers", &self.control.worker_count())
            .field("stack_size", &self.control.stacks.default_size())
            .field("stopping", &self.control.stopping.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// A function run on each worker thread (`Builder::on_thread_start`,
/// `on_thread_stop`). Its `Debug` says that one is set, not what it is.
#[derive(Clone)]
struct ThreadHook(Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for ThreadHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fn()")
    }
}

/// A runtime's thread hooks, each optional.
#[derive(Debug, Clone, Default)]
struct ThreadHooks {
    start: Option<ThreadHook>,
    stop: Option<ThreadHook>,
}

impl ThreadHooks {
    /// Runs `hook` (named `which`, for the log) on this thread, worker
    /// `worker` of `control`, entered in that runtime (so
    /// `Handle::current` is it): a panic is caught and logged, and the
    /// worker goes on.
    fn run(hook: &Option<ThreadHook>, which: &str, worker: usize, control: &Arc<TaskControl>) {
        let Some(ThreadHook(f)) = hook else {
            return;
        };
        let _entered = sched::enter(control.clone());
        if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f())) {
            tracing::error!(
                worker,
                hook = which,
                panic = panic_message(&*p),
                "a worker thread hook panicked: the panic is ignored, the worker goes on"
            );
        }
    }
}

/// Configures a [`Runtime`].
///
/// ```
/// let rt = spindle::Runtime::builder()
///     .workers(2)
///     .stack_size(64 * 1024)
///     .thread_name("rpc")
///     .build()?;
/// assert_eq!(rt.workers(), 2);
/// // Tasks run on the worker threads, `rpc-0` and `rpc-1`.
/// let thread = rt.block_on(|| std::thread::current().name().map(str::to_owned));
/// assert!(thread.unwrap().starts_with("rpc-"));
///
/// // Bad values are errors, not panics.
/// let err = spindle::Runtime::builder().workers(0).build().unwrap_err();
/// assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Builder {
    workers: Option<usize>,
    stack_size: usize,
    pin_workers: bool,
    thread_name: String,
    stall_threshold: Duration,
    /// `None`: the default, budgeted.
    sleep_spin: Option<Duration>,
    idle_poll: Duration,
    /// The signal that prints a task dump, if any.
    dump_on_signal: Option<libc::c_int>,
    hooks: ThreadHooks,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            workers: None,
            stack_size: DEFAULT_STACK_SIZE,
            pin_workers: false,
            thread_name: "spindle-worker".into(),
            stall_threshold: DEFAULT_STALL_THRESHOLD,
            sleep_spin: None,
            idle_poll: DEFAULT_IDLE_POLL,
            dump_on_signal: None,
            hooks: ThreadHooks::default(),
        }
    }
}

impl Builder {
    /// A builder with the defaults: one worker per CPU, 256 KiB stacks.
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of worker threads (1 to 256).
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = Some(n);
        self
    }

    /// The default stack size of this runtime's tasks, in bytes, rounded up
    /// to whole pages. Below [`MIN_STACK_SIZE`](crate::MIN_STACK_SIZE)
    /// (16 KiB) or over 1 TiB, `build` fails with `InvalidInput`, and a size
    /// that cannot be mapped fails it too. A debug build of spindle, whose
    /// frames are larger, rounds sizes below 64 KiB up to 64 KiB.
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = bytes;
        self
    }

    /// Pins worker `i` to the `i % n`-th of the `n` CPUs the runtime may use
    /// (those of the thread that builds it; see [`build`](Self::build)).
    pub fn pin_workers(mut self, yes: bool) -> Self {
        self.pin_workers = yes;
        self
    }

    /// The name prefix of worker threads (`name-0`, `name-1`, …).
    pub fn thread_name(mut self, name: impl Into<String>) -> Self {
        self.thread_name = name.into();
        self
    }

    /// How long a task may run without suspending before the watchdog
    /// reports it (a `warn!` and [`RuntimeStats::stalls`]): its worker's
    /// other tasks wait meanwhile. Default 1 s; at least 1 ms. Never before
    /// the threshold; at most about half a threshold after it (the
    /// watchdog samples four times per threshold), or about 1 ms under a
    /// 4 ms threshold (samples are at least 1 ms apart).
    pub fn stall_threshold(mut self, d: Duration) -> Self {
        self.stall_threshold = d.max(Duration::from_millis(1));
        self
    }

    /// How long before one of its tasks' sleeps is due an idle worker stops
    /// parking and polls the clock instead (it still runs any work that
    /// comes meanwhile). Default 150 µs, within a budget: by default a
    /// worker spins at most 2 % of the time (its spins before parking
    /// included), and out of credit it parks and is woken by the timer
    /// thread: later by the OS's wake-up (tens of µs on a VM), and, among
    /// dense timers, by up to the timer's coalescing window (250 µs). Set
    /// explicitly, the spin has no budget: any length is allowed, and every
    /// sleep gets it.
    ///
    /// This trades CPU for precision. Waking a parked thread takes tens of
    /// µs on a VM, and milliseconds now and then when the host is busy: a
    /// sleep that ends while its worker is parked is late by that much. A
    /// worker that polls instead is late by about a microsecond, but it
    /// keeps a core busy for the whole spin. A `sleep_spin` longer than the
    /// sleeps themselves (say 1.1 ms for 1 ms sleeps, or `Duration::MAX`
    /// for any sleep) keeps a worker with sleeping tasks from ever parking:
    /// microsecond precision at the cost of a core per such worker. Such a
    /// worker also needs no OS wake-up when one of its sleeping tasks is
    /// interrupted or woken from another thread (about 1 µs instead of
    /// 7-10 µs on a VM). A worker with no sleeping task parks as usual
    /// (unless [`idle_poll`](Self::idle_poll) keeps it looking).
    /// `docs/tuning.md` measures both.
    pub fn sleep_spin(mut self, d: Duration) -> Self {
        self.sleep_spin = Some(d);
        self
    }

    /// How long a worker that has run out of work may keep looking for
    /// more before it parks, at most: adaptive idle polling, as KVM does
    /// for halted vCPUs. Default zero: only the brief spin (20 µs) every
    /// idle worker does each time it looks (any `max` up to that is the
    /// same); a bound over an hour is an hour.
    ///
    /// Work that reaches a worker still looking (a task woken from another
    /// thread, such as the reply an RPC waits for, or a task spawned from
    /// one) runs within about a microsecond; a parked worker needs an OS
    /// wake-up, 5-10 µs on a VM and milliseconds now and then when the
    /// host is busy. Each worker adapts how long it looks to how soon its
    /// work has been coming: the window stays put while work comes within
    /// it, doubles (up to `max`) each time work comes after it ends but
    /// within `max` of the worker going idle, and halves, down to the brief
    /// spin, each time work comes after more than `max`. Tasks woken by
    /// their own timers (sleeps, timed-out waits) are not work that came:
    /// their times are known ahead, and [`sleep_spin`](Self::sleep_spin)
    /// covers sleeps.
    ///
    /// The cost is CPU, per worker: a worker serving requests spaced under
    /// `max` keeps its core busy through the gaps (it shows as fully busy,
    /// and under a CPU quota it spends the quota), looking at the other
    /// workers' queues as it goes and taking their new tasks. Once traffic
    /// stops, each worker looks for one more window after its last work,
    /// then parks. While it looks it also gives back surplus stacks, as a
    /// worker about to park does, which may hold up work that comes
    /// meanwhile by up to ~0.2 ms. Set `max` a little above the gaps worth
    /// catching (an RPC's round trip, say). `docs/tuning.md`
    /// measures both sides.
    pub fn idle_poll(mut self, max: Duration) -> Self {
        self.idle_poll = max;
        self
    }

    /// Prints a task dump ([`Runtime::dump`]) to stderr each time the
    /// process receives `signal`, as Go does on `SIGQUIT`:
    /// `.dump_on_signal(libc::SIGQUIT)`, then `kill -QUIT <pid>` (or
    /// Ctrl-\\ in a terminal). The signal's default action (for `SIGQUIT`,
    /// ending the process with a core dump) no longer happens, for the life
    /// of the process (see [`signal`](crate::signal), "What a program
    /// sees"). A thread of its own waits for the signal, so a dump
    /// comes even when every worker is held by a task. Off by default.
    /// `build` fails with `InvalidInput` for a signal that cannot be
    /// waited for (see [`signal::Signals::new`](crate::signal::Signals::new)).
    pub fn dump_on_signal(mut self, signal: libc::c_int) -> Self {
        self.dump_on_signal = Some(signal);
        self
    }

    /// Runs `f` on each worker thread once, when it starts, before it runs
    /// any task: on the workers `build` starts and on those
    /// [`Runtime::set_workers`] adds later. A later call replaces the
    /// hook.
    ///
    /// `f` runs outside any task, with the runtime entered
    /// ([`Handle::current`] is this runtime), while the worker's queued
    /// tasks wait (or are taken by other workers). A panic in `f` is
    /// caught and reported (a `tracing::error!`); the worker starts
    /// anyway. `f` must not wait for tasks of this runtime: on a runtime
    /// of one worker, that worker is the one running `f`.
    pub fn on_thread_start<F>(mut self, f: F) -> Self
    where
        F: Fn() + Send + Sync + 'static,
    {
        self.hooks.start = Some(ThreadHook(Arc::new(f)));
        self
    }

    /// Runs `f` on each worker thread once, when it stops (at the
    /// runtime's shutdown or drop), after its last task has ended or been
    /// cancelled. [`Runtime::shutdown`] and the drop of a `Runtime` return
    /// once every worker's `f` has returned, except when called from a
    /// task (they do not wait for the workers then). A later call
    /// replaces the hook.
    ///
    /// As [`on_thread_start`](Self::on_thread_start)'s, `f` runs outside
    /// any task with the runtime entered (a spawn there is cancelled at
    /// once: the runtime is stopping), and a panic in it is caught and
    /// reported.
    pub fn on_thread_stop<F>(mut self, f: F) -> Self
    where
        F: Fn() + Send + Sync + 'static,
    {
        self.hooks.stop = Some(ThreadHook(Arc::new(f)));
        self
    }

    /// Starts the runtime. Bad values (0 or more than 256 workers, a stack
    /// size over 1 TiB, a thread name with a NUL byte) are `InvalidInput`
    /// errors; a stack size the OS cannot map (more memory than it will
    /// commit) is its error; a worker thread (or the shared timer thread, on
    /// first use) that the OS refuses is its error. Without
    /// [`workers`](Self::workers), one worker per CPU the building thread
    /// may use, at most 256 (built from a task, the CPUs of the task's
    /// runtime: its worker may be pinned to one).
    pub fn build(self) -> io::Result<Runtime> {
        let cpus = match sched::current_group() {
            Some(g) => g.control.config.cpus.clone(),
            None => Cpus::of_this_thread(),
        };
        let workers = match self.workers {
            Some(n) => n,
            None => cpus.parallelism().min(MAX_WORKERS),
        };
        if self.thread_name.contains('\0') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the thread name must not contain a NUL byte",
            ));
        }
        if workers == 0 || workers > MAX_WORKERS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{workers} workers requested: must be between 1 and {MAX_WORKERS}"),
            ));
        }
        let stack_size = stack::check_size(self.stack_size)?;
        start_timer()?;
        let mut rt = Runtime {
            dump_on_signal: None,
            control: Arc::new(TaskControl::new(Config {
                stack_size,
                thread_name: self.thread_name,
                pin_workers: self.pin_workers,
                sleep_spin: self.sleep_spin.unwrap_or(DEFAULT_SLEEP_SPIN),
                sleep_spin_budgeted: self.sleep_spin.is_none(),
                idle_poll: self.idle_poll,
                cpus,
            })),
            hooks: self.hooks,
        };
        rt.control.stacks.prime()?;
        rt.add_workers(workers)?;
        if let Some(id) = sched::start_watchdog(Arc::downgrade(&rt.control), self.stall_threshold) {
            let _ = rt.control.watchdog.set(id);
        }
        if let Some(sig) = self.dump_on_signal {
            let control = Arc::downgrade(&rt.control);
            rt.dump_on_signal = Some(crate::dump::DumpOnSignal::start(sig, move || {
                control.upgrade().map(|c| dump(&c))
            })?);
        }
        Ok(rt)
    }
}

/// Counters of a runtime, summed over its workers, and each worker's own
/// ([`workers()`](Self::workers)), all from one read (`#[non_exhaustive]`:
/// counters may be added). Not `Copy`: it holds the per-worker list.
///
/// Each per-worker figure of [`WorkerStats`] sums to the field of the same
/// name here, within one `RuntimeStats`: `switches`, `steals`, `parks`,
/// `polls`, `ready`, `tasks` and `busy`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct RuntimeStats {
    /// The number of workers (the length of [`workers()`](Self::workers)).
    pub workers: usize,
    /// Tasks spawned onto this runtime.
    pub spawned: u64,
    /// Tasks that ran to their end (cancelled ones are not counted).
    pub finished: u64,
    /// Task switches: each resume that returned to the worker.
    pub switches: u64,
    /// Steals of new tasks from other workers (see
    /// [`WorkerStats::steals`]).
    pub steals: u64,
    /// Times a worker parked on its lot or in its I/O poller.
    pub parks: u64,
    /// Times a worker polled its I/O poller (between tasks, while idle,
    /// and parked in it).
    pub polls: u64,
    /// Tasks queued to run now, a snapshot (see [`WorkerStats::ready`]).
    pub ready: usize,
    /// Started tasks that have not ended (see [`WorkerStats::tasks`]).
    pub tasks: usize,
    /// Time the workers were not parked, summed over them: running tasks
    /// and looking for work (see [`WorkerStats::busy`]).
    pub busy: Duration,
    /// Parked workers woken by a signal.
    pub wakeups: u64,
    /// Stacks in the shared pool (workers keep up to 256 more each).
    pub pooled_stacks: usize,
    /// Size of the process-wide task table (it never shrinks).
    pub task_slots: usize,
    /// Tasks reported for running past the stall threshold without
    /// suspending (see `Builder::stall_threshold`).
    pub stalls: u64,
    /// Fds registered in this runtime's pollers now (each socket a task
    /// has waited on, until it is dropped).
    pub io_sources: usize,
    /// Threads of the process's blocking pool now
    /// (`task::spawn_blocking`, name lookups).
    pub blocking_threads: usize,
    /// One entry per worker, by index.
    per_worker: Vec<WorkerStats>,
}

impl RuntimeStats {
    /// Each worker's counters, indexed by the worker's number (worker `i`
    /// is the thread named `name-i`, see [`Builder::thread_name`]): one
    /// entry per worker, [`workers`](Self#structfield.workers) of them.
    pub fn workers(&self) -> &[WorkerStats] {
        &self.per_worker
    }
}

/// One worker's counters, in [`RuntimeStats::workers`]
/// (`#[non_exhaustive]`: counters may be added). Each sums over the
/// workers to the [`RuntimeStats`] field of the same name.
///
/// The worker writes them and a reader on another thread takes each as it
/// finds it, without a lock: `ready` and `tasks` are snapshots that may be
/// a moment old, and the figures are not taken at one instant together.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerStats {
    /// Tasks queued on this worker now, waiting to run: its ready list,
    /// its remote queue (tasks woken by other threads, tasks placed on
    /// it), its never-run tasks (its deque, its LIFO slot and its inbox of
    /// spawns from plain threads; other workers may steal those). A task
    /// being moved (a steal, the worker taking its remote queue) may be
    /// missed or counted twice for a moment.
    pub ready: usize,
    /// Started tasks homed on this worker that have not ended: running,
    /// queued or blocked in a wait. A task is homed on the worker it first
    /// runs on, and never leaves it.
    pub tasks: usize,
    /// How long the worker has not been parked since it started: running
    /// tasks, and looking for work before it parks (which
    /// `Builder::idle_poll` and `Builder::sleep_spin` make longer). It
    /// stops growing when the worker exits.
    pub busy: Duration,
    /// Times the worker parked: slept on its lot or blocked in its I/O
    /// poller.
    pub parks: u64,
    /// Steals this worker made: each a batch of another worker's new
    /// tasks, or the task in its LIFO slot.
    pub steals: u64,
    /// Times the worker polled its I/O poller: every 61 tasks while busy,
    /// when it runs out of work, and each park in the poller. Zero until
    /// one of its tasks first waits on an fd.
    pub polls: u64,
    /// Task switches on this worker: each resume that returned to it.
    pub switches: u64,
}

impl Runtime {
    /// A runtime with the default configuration.
    pub fn new() -> io::Result<Runtime> {
        Builder::new().build()
    }

    /// A [`Builder`].
    pub fn builder() -> Builder {
        Builder::new()
    }

    /// Spawns `f` on this runtime.
    ///
    /// # Panics
    /// If the task cannot be made (no stack can be had, or the task table is
    /// full); [`task::Builder`](crate::task::Builder) returns the error
    /// instead.
    pub fn spawn<F, T>(&self, f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        task::spawn_on_control(&self.control, f)
            .unwrap_or_else(|e| panic!("Runtime::spawn failed: {e}"))
    }

    /// Runs `f` as a task of this runtime and blocks this OS thread (or,
    /// from a task, suspends that task) until it returns; re-raises its
    /// panic. `f` may borrow from the caller, and runs under the caller's
    /// `with_deadline` scope, if any. Nothing cuts the wait short, not
    /// interrupts, deadline scopes, nor the stop of the calling task's own
    /// runtime (which waits for `f` before it unwinds the caller). From a
    /// task of this runtime that is unwinding (a destructor during a panic
    /// or a stop), `f` runs at once on the caller's stack, as that task:
    /// such a task cannot suspend, and its wait would hold the worker `f`
    /// may need. `f` cannot suspend there either (its waits block the
    /// worker thread). A plain thread is in this runtime while it waits
    /// (see [`enter`](Self::enter)).
    ///
    /// # Panics
    /// With `f`'s panic, and if the task cannot be made (as
    /// [`spawn`](Self::spawn)). (This runtime cannot stop meanwhile: it is
    /// borrowed.)
    pub fn block_on<F, T>(&self, f: F) -> T
    where
        F: FnOnce() -> T + Send,
        T: Send,
    {
        block_on(&self.control, f)
    }

    /// A handle to this runtime: spawns onto it from anywhere, and outlives
    /// it harmlessly (a spawn after the shutdown is cancelled at once).
    pub fn handle(&self) -> Handle {
        Handle {
            control: self.control.clone(),
        }
    }

    /// Enters this runtime on this thread: until the guard drops, this
    /// thread's spawns ([`spawn`](crate::spawn), `task::Builder::spawn`,
    /// [`Handle::current`]) go to this runtime. Guards nest; each puts back
    /// what was entered before it. Inside a task it changes nothing: a
    /// task's spawns go to its own runtime.
    pub fn enter(&self) -> EnterGuard<'_> {
        EnterGuard::new(&self.control)
    }

    /// The number of workers.
    pub fn workers(&self) -> usize {
        self.control.worker_count()
    }

    /// Grows the runtime to `n` workers. Shrinking, 0 or more than 256 are
    /// errors (like bthread_setconcurrency, workers are never removed), and
    /// so is a runtime shutting down. If the OS refuses a thread, the
    /// workers started before it stay and the error says why.
    pub fn set_workers(&self, n: usize) -> Result<(), SetWorkersError> {
        let current = self.workers();
        if n > MAX_WORKERS {
            return Err(SetWorkersError::TooMany {
                requested: n,
                max: MAX_WORKERS,
            });
        }
        if n < current {
            return Err(SetWorkersError::Shrink {
                current,
                requested: n,
            });
        }
        if self.control.stopping.load(Ordering::Acquire) {
            return Err(SetWorkersError::ShuttingDown);
        }
        self.add_workers(n).map_err(|e| {
            tracing::error!(error = %e, "cannot start a worker thread");
            SetWorkersError::Spawn {
                kind: e.kind(),
                os_error: e.raw_os_error(),
            }
        })
    }

    fn add_workers(&self, n: usize) -> io::Result<()> {
        let control = &self.control;
        let mut threads = lock(&control.threads);
        let cpus = &control.config.cpus;
        let from_a_worker = sched::current_group().is_some();
        for i in control.worker_count()..n {
            let fresh = Worker::new_fifo();
            let gs = GroupRemote::new(fresh.stealer());
            let worker_control = control.clone();
            let hooks = self.hooks.clone();
            let bind = cpus.bind_for(i, control.config.pin_workers, from_a_worker);
            // The worker is registered only once its thread exists, so that
            // a failed spawn leaves nothing half-made for the next call; the
            // thread waits for that before it starts.
            let (registered, wait_registered) = std::sync::mpsc::channel::<()>();
            let h = std::thread::Builder::new()
                .name(format!("{}-{i}", control.config.thread_name))
                .spawn(move || {
                    if wait_registered.recv().is_err() {
                        return; // never registered
                    }
                    if let Err(error) = worker_control.config.cpus.bind_current(bind) {
                        tracing::warn!(worker = i, ?bind, %error, "cannot set the worker's CPUs");
                    }
                    tracing::info!(worker = i, "worker started");
                    ThreadHooks::run(&hooks.start, "on_thread_start", i, &worker_control);
                    let g = TaskGroup::new(i, worker_control.clone(), fresh);
                    g.run();
                    drop(g);
                    ThreadHooks::run(&hooks.stop, "on_thread_stop", i, &worker_control);
                    tracing::info!(worker = i, "worker stopped");
                })?;
            if control.groups[i].set(gs).is_err() {
                unreachable!("worker {i} registered twice");
            }
            control.idle.add_worker();
            // Counted before it starts: the others' steals and last looks
            // cover workers below the count, and the new worker's first
            // task may spawn children there at once.
            control.workers.store(i + 1, Ordering::SeqCst);
            registered.send(()).expect("the new worker waits for this");
            threads.push(h);
        }
        Ok(())
    }

    /// Counters summed over the workers.
    pub fn stats(&self) -> RuntimeStats {
        stats(&self.control)
    }

    /// Every live task of the runtime, with what it is doing and, in
    /// builds with frame pointers, the stack it is suspended on
    /// (`docs/observing.md`). The world does not stop: each task's entry is
    /// consistent on its own, and no worker is held from its tasks for
    /// more than about half a millisecond at a time. Callable from
    /// anywhere, a task of this runtime included.
    ///
    /// ```
    /// use spindle::{Runtime, TaskState};
    /// use std::time::Duration;
    ///
    /// let rt = Runtime::builder().workers(1).build().unwrap();
    /// let sleeper = rt.spawn(|| spindle::sleep(Duration::from_secs(60)));
    /// while !rt.dump().iter().any(|t| matches!(t.state, TaskState::Sleeping { .. })) {
    ///     std::thread::yield_now();
    /// }
    /// println!("{}", rt.dump());
    /// sleeper.stop().unwrap();
    /// ```
    pub fn dump(&self) -> crate::TaskDump {
        dump(&self.control)
    }

    /// Stops the workers and waits for them to exit (from a task, of this
    /// runtime or another, it returns at once instead: the workers exit on
    /// their own, and waiting could deadlock). Also on drop.
    ///
    /// Every task that has not ended is cancelled, whether queued or
    /// blocked in a wait (any wait: sleep, `Butex`, join, `sync`): a started
    /// one is unwound on its worker, from where it was suspended, so its
    /// destructors run; a never-run one has its closure dropped. Their joins
    /// return `JoinError::Cancelled`. A destructor that waits meanwhile
    /// blocks its worker thread (a task cannot suspend while it unwinds),
    /// so one that waits for another task of the same worker to let go of
    /// something holds up the shutdown for good; after a second of such a
    /// wait, a warning names the task. To end tasks on your own
    /// terms, stop them (a sleep or a `Butex` wait then fails) and join them
    /// before the runtime goes.
    pub fn shutdown(self) {
        drop(self)
    }

    fn stop(&self) {
        let control = &self.control;
        control.stopping.store(true, Ordering::SeqCst);
        control.idle.stop();
        if let Some(&id) = control.watchdog.get() {
            stop_watchdog(id);
        }
        // A worker of this runtime cannot wait for itself, and a worker of
        // another must not wait either: our workers may wait for its tasks
        // (a task of ours in `block_on` on that runtime), which need it.
        let on_a_worker = sched::current_group().is_some();
        let threads = std::mem::take(&mut *lock(&control.threads));
        if on_a_worker {
            return;
        }
        for h in threads {
            if h.join().is_err() {
                tracing::error!("a worker thread panicked");
            }
        }
        // The workers unmapped the idle stacks as they exited; this takes
        // what plain threads gave back since (see `ThreadStacks`), here
        // rather than wherever the shared state is dropped.
        control.stacks.trim();
    }
}

/// Starts the shared timer thread if it has not started yet, so that a
/// runtime that cannot have timers fails to build, instead of panicking in
/// its first timed wait.
#[cfg(not(loom))]
fn start_timer() -> io::Result<()> {
    match spindle_timer::TimerThread::try_global() {
        Ok(_) => Ok(()),
        Err(spindle_timer::TimerError::Spawn(e)) => Err(e),
        Err(e) => Err(io::Error::other(format!(
            "cannot start the timer thread: {e}"
        ))),
    }
}

#[cfg(loom)]
fn start_timer() -> io::Result<()> {
    Ok(())
}

#[cfg(not(loom))]
fn stop_watchdog(id: spindle_timer::TimerId) {
    spindle_timer::TimerThread::global().unschedule(id);
}

#[cfg(loom)]
fn stop_watchdog(_: spindle_timer::TimerId) {}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Counters of the runtime `control`: each worker's, read once, and their
/// sums.
fn stats(control: &TaskControl) -> RuntimeStats {
    let workers = control.worker_count();
    let per_worker: Vec<WorkerStats> = (0..workers)
        .map(|i| control.group(i).map(worker_stats).unwrap_or_default())
        .collect();
    let mut s = RuntimeStats {
        workers,
        spawned: control.spawned_outside.load(Ordering::Relaxed),
        wakeups: control.idle.wakeups.load(Ordering::Relaxed),
        stalls: control.stalls.load(Ordering::Relaxed),
        io_sources: control.io_sources(),
        blocking_threads: crate::io::blocking::threads(),
        pooled_stacks: control.stacks.pooled(),
        task_slots: crate::meta::table().capacity(),
        ..Default::default()
    };
    for g in (0..workers).filter_map(|i| control.group(i)) {
        s.spawned += g.stats.spawned.load(Ordering::Relaxed);
        s.finished += g.stats.finished.load(Ordering::Relaxed);
    }
    for w in &per_worker {
        s.switches += w.switches;
        s.steals += w.steals;
        s.parks += w.parks;
        s.polls += w.polls;
        s.ready += w.ready;
        s.tasks += w.tasks;
        s.busy += w.busy;
    }
    s.per_worker = per_worker;
    s
}

/// `Runtime::dump` and `Handle::dump`: the dump's walkers are tasks placed
/// on each worker (`dump.rs`).
fn dump(control: &Arc<TaskControl>) -> crate::TaskDump {
    let handle = Handle {
        control: control.clone(),
    };
    crate::dump::take(control, &|w, walk| {
        task::Builder::new()
            .name("spindle-dump")
            .worker(w)
            .spawn_on(&handle, walk)
            .is_ok()
    })
}

/// One worker's counters, each read once (see [`WorkerStats`]).
fn worker_stats(g: &GroupRemote) -> WorkerStats {
    let st = &g.stats;
    let lifo = usize::from(!g.lifo.load(Ordering::Relaxed).is_null());
    WorkerStats {
        ready: st.ready.load(StatRelaxed) + g.woken.len() + g.stealer.len() + g.inbox.len() + lifo,
        tasks: st.tasks.load(StatRelaxed),
        busy: st.busy.read(),
        parks: st.parks.load(Ordering::Relaxed),
        steals: st.steals.load(Ordering::Relaxed),
        polls: st.polls.load(StatRelaxed),
        switches: st.switches.load(Ordering::Relaxed),
    }
}

/// `Runtime::block_on` and `Handle::block_on` (see the former).
///
/// # Panics
/// As `Runtime::block_on`, and if the runtime has shut down.
fn block_on<F, T>(control: &Arc<TaskControl>, f: F) -> T
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    if !sched::can_suspend() && sched::worker_of(control).is_some() {
        // A task that unwinds cannot suspend: its wait would block this
        // worker, which may be the only one that could run `f`.
        return f();
    }
    let _entered = sched::enter(control.clone());
    let mut out: Option<std::thread::Result<T>> = None;
    let slot = SendPtr(&mut out);
    // `f` runs on the caller's behalf: it inherits the caller's deadline
    // scope (block_on itself then waits for it to end, deadline or not).
    let scope = deadline::scope_deadline();
    let body = move |t: TaskRef| {
        // SAFETY: we are the task itself.
        unsafe { t.set_scope_deadline(scope) };
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let slot = slot;
        // SAFETY: `out` outlives the task: block_on waits below for the
        // task to finish before `out` goes out of scope.
        unsafe { *slot.0 = Some(r) };
    };
    // From outside the runtime, the spawn holds off its stop until the task
    // is queued, where the stop finds it (or fails here: no worker would
    // run it).
    let admitted = match sched::worker_of(control) {
        Some(_) => None,
        None => Some(
            control
                .begin_outside_spawn()
                .unwrap_or_else(|| panic!("block_on: {}", task::shut_down())),
        ),
    };
    // SAFETY: everything `body` borrows (`f`'s captures and `out`) lives
    // on this frame, and we do not leave it before the task has ended:
    // the join below cannot be interrupted, and we wait through deadline
    // scopes too.
    let t = unsafe { task::prepare_unchecked(control, None, None, body) }
        .unwrap_or_else(|e| panic!("block_on failed to spawn: {e}"));
    task::start(control, t, RunOrder::Queued);
    drop(admitted);
    let handle: JoinHandle<()> = JoinHandle::new(t);
    deadline::without_scope(|| {
        while t.end_state() == EndState::Running {
            let _ = wait::wait(
                t.join_queue(),
                EndState::Running.word(),
                None,
                WaitPolicy::Uncancellable,
                WaitKind::Join,
            );
        }
    });
    drop(handle);
    match out {
        Some(Ok(v)) => v,
        Some(Err(p)) => std::panic::resume_unwind(p),
        None => panic!("{}", JoinError::Cancelled),
    }
}

/// A handle to a runtime: spawns onto it, runs `block_on` on it, enters
/// it, from any thread. Cheap to clone. It keeps the runtime's shared
/// state, not the runtime: once the runtime has shut down, a spawn through
/// the handle is cancelled at once (its join is `JoinError::Cancelled`;
/// [`task::Builder::spawn_on`](crate::task::Builder::spawn_on) returns an
/// error), never left to hang.
///
/// ```
/// let rt = spindle::Runtime::builder().workers(1).build()?;
/// let handle = rt.handle();
///
/// // A plain thread hands work to the runtime through a clone of its handle.
/// let h = handle.clone();
/// let thread = std::thread::spawn(move || h.spawn(|| 6 * 7).join().unwrap());
/// assert_eq!(thread.join().unwrap(), 42);
///
/// // Inside a task, `Handle::current()` is the task's own runtime.
/// assert!(rt.block_on(|| spindle::Handle::current().same_runtime(&handle)));
///
/// // Once the runtime is gone, a spawn through the handle is cancelled.
/// rt.shutdown();
/// assert!(matches!(handle.spawn(|| ()).join(), Err(spindle::JoinError::Cancelled)));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct Handle {
    control: Arc<TaskControl>,
}

// A panic caught around a use of the runtime leaves nothing half-done that
// safe code could see: its shared state is kept consistent by its own locks
// and atomics, whatever unwinds through a call.
impl std::panic::UnwindSafe for Handle {}
impl std::panic::RefUnwindSafe for Handle {}
impl std::panic::UnwindSafe for Runtime {}
impl std::panic::RefUnwindSafe for Runtime {}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("workers", &self.control.worker_count())
            .field("stopping", &self.control.stopping.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Handle {
    /// The handle of this thread's runtime: the current task's, else the
    /// one this thread has entered, else the global runtime's (started if
    /// need be).
    ///
    /// # Panics
    /// If the global runtime is needed and cannot start.
    pub fn current() -> Handle {
        Handle::try_current().unwrap_or_else(|| global().handle())
    }

    /// The handle of this thread's runtime: the current task's, or the one
    /// this thread has entered; `None` on a thread that has entered none
    /// (the global runtime is not started by asking).
    pub fn try_current() -> Option<Handle> {
        sched::current_runtime().map(|control| Handle { control })
    }

    /// Spawns `f` on this runtime (see [`Runtime::spawn`]); after the
    /// runtime's shutdown, the task is cancelled at once.
    ///
    /// # Panics
    /// As [`Runtime::spawn`].
    pub fn spawn<F, T>(&self, f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        task::spawn_on_control(&self.control, f)
            .unwrap_or_else(|e| panic!("Handle::spawn failed: {e}"))
    }

    /// [`Runtime::block_on`] on this runtime.
    ///
    /// # Panics
    /// As [`Runtime::block_on`], and if the runtime has shut down (nothing
    /// would run `f`).
    pub fn block_on<F, T>(&self, f: F) -> T
    where
        F: FnOnce() -> T + Send,
        T: Send,
    {
        block_on(&self.control, f)
    }

    /// Enters this runtime on this thread (see [`Runtime::enter`]).
    pub fn enter(&self) -> EnterGuard<'_> {
        EnterGuard::new(&self.control)
    }

    /// The runtime's counters (see [`Runtime::stats`]).
    pub fn stats(&self) -> RuntimeStats {
        stats(&self.control)
    }

    /// The runtime's live tasks (see [`Runtime::dump`]).
    pub fn dump(&self) -> crate::TaskDump {
        dump(&self.control)
    }

    /// Whether `other` is a handle to the same runtime.
    pub fn same_runtime(&self, other: &Handle) -> bool {
        Arc::ptr_eq(&self.control, &other.control)
    }

    pub(crate) fn control(&self) -> &TaskControl {
        &self.control
    }
}

/// This thread is in a runtime until the guard drops
/// ([`Runtime::enter`], [`Handle::enter`]). Not `Send`: it puts back the
/// thread's own state.
#[derive(Debug)]
pub struct EnterGuard<'a> {
    _entered: sched::Entered,
    _runtime: PhantomData<&'a ()>,
}

impl EnterGuard<'_> {
    fn new(control: &Arc<TaskControl>) -> Self {
        EnterGuard {
            _entered: sched::enter(control.clone()),
            _runtime: PhantomData,
        }
    }
}

struct SendPtr<T>(*mut T);
// SAFETY: used only by block_on, whose caller waits for the task; the
// pointee (Option<thread::Result<T>>, T: Send) may be written from the task.
unsafe impl<T: Send> Send for SendPtr<T> {}
impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}

/// The global runtime, started on first use with one worker per CPU.
pub(crate) fn global() -> &'static Runtime {
    static GLOBAL: OnceLock<Runtime> = OnceLock::new();
    GLOBAL.get_or_init(|| {
        Runtime::new().unwrap_or_else(|e| panic!("cannot start spindle's global runtime: {e}"))
    })
}

/// The global runtime (started on first use).
///
/// # Panics
/// If the global runtime cannot start (the OS refuses its threads).
pub fn global_runtime() -> &'static Runtime {
    global()
}
