//! The blocking pool: plain threads for what would stop a worker
//! (blocking syscalls, file I/O, FFI, name lookups, libraries built on
//! std locks).
//!
//! A job runs entered in the runtime of the thread that submitted it, so
//! that what it spawns goes there (`sched::enter`).
//!
//! One pool per process, of at most [`MAX_THREADS`] threads, made on
//! demand; a thread idle for [`KEEP_ALIVE`] exits. Jobs wait in a FIFO
//! when every thread is busy. A job's caller waits for its result on a
//! `WaitQueue` whose value turns 1 when the result is in: a task suspends,
//! a plain thread blocks. The job owns what it runs, so a caller whose
//! wait ends early (an interrupt, a deadline) leaves it to run to its end
//! and drop its result.

use crate::error::WaitError;
use crate::loom::sync::atomic::{AtomicUsize, Ordering};
use crate::loom::sync::Mutex;
use crate::meta::activity::WaitKind;
use crate::meta::wait_queue::{WaitPolicy, WaitQueue};
use crate::sched::{self, make_ready};
use crate::wait;
use std::collections::VecDeque;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Condvar, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

/// The most threads the pool runs at once (tokio's default too).
pub(crate) const MAX_THREADS: usize = 512;
/// An idle pool thread exits after this long without a job.
const KEEP_ALIVE: Duration = Duration::from_secs(10);
/// Pool threads' stacks.
const STACK_SIZE: usize = 2 << 20;

type Job = Box<dyn FnOnce() + Send>;

struct Pool {
    state: std::sync::Mutex<PoolState>,
    job_ready: Condvar,
    /// Threads alive (for stats).
    threads: AtomicUsize,
}

struct PoolState {
    queue: VecDeque<Job>,
    /// Threads alive; those of them waiting for a job and not yet picked;
    /// and the picks not yet taken (a submit picks an idle thread and
    /// counts it out of `idle` at once, so that a burst of submits starts
    /// threads rather than pile its jobs on one idle thread).
    threads: usize,
    idle: usize,
    picked: usize,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool {
        state: std::sync::Mutex::new(PoolState {
            queue: VecDeque::new(),
            threads: 0,
            idle: 0,
            picked: 0,
        }),
        job_ready: Condvar::new(),
        threads: AtomicUsize::new(0),
    })
}

fn lock_state(p: &Pool) -> std::sync::MutexGuard<'_, PoolState> {
    // No code panics under this lock (jobs run outside it).
    p.state.lock().unwrap_or_else(|e| e.into_inner())
}

/// Threads of the pool alive now.
pub(crate) fn threads() -> usize {
    pool().threads.load(Ordering::Relaxed)
}

/// Queues `job` on the pool: an idle thread takes it, or a new thread
/// if the pool is below its bound; else it waits for a busy thread.
fn submit(job: Job) {
    let p = pool();
    let mut st = lock_state(p);
    st.queue.push_back(job);
    if st.idle > 0 {
        st.idle -= 1;
        st.picked += 1;
        drop(st);
        p.job_ready.notify_one();
        return;
    }
    if st.threads >= MAX_THREADS {
        return; // a busy thread takes it when done
    }
    st.threads += 1;
    p.threads.fetch_add(1, Ordering::Relaxed);
    drop(st);
    let started = thread::Builder::new()
        .name("spindle-blocking".into())
        .stack_size(STACK_SIZE)
        .spawn(work);
    if let Err(error) = started {
        tracing::warn!(%error, "could not start a thread of the blocking pool");
        let mut st = lock_state(p);
        st.threads -= 1;
        p.threads.fetch_sub(1, Ordering::Relaxed);
        if st.threads == 0 {
            // No thread will ever take the queue: run it here, on the
            // caller's thread, rather than lose it.
            let jobs = std::mem::take(&mut st.queue);
            drop(st);
            jobs.into_iter().for_each(run);
        }
    }
}

/// Runs a job. A job catches its closure's panic; a panic left is one of
/// dropping what the closure returned, which must not take the thread
/// (and its count) with it.
fn run(job: Job) {
    let _ = panic::catch_unwind(AssertUnwindSafe(job));
}

/// A pool thread: runs jobs until idle for [`KEEP_ALIVE`].
fn work() {
    let p = pool();
    let mut st = lock_state(p);
    loop {
        if let Some(job) = st.queue.pop_front() {
            drop(st);
            run(job);
            st = lock_state(p);
            continue;
        }
        st.idle += 1;
        let since = Instant::now();
        loop {
            let left = KEEP_ALIVE.saturating_sub(since.elapsed());
            let (guard, _) = p
                .job_ready
                .wait_timeout(st, left)
                .unwrap_or_else(|e| e.into_inner());
            st = guard;
            if st.picked > 0 {
                // Picked by a submit, which counted us out of `idle`.
                st.picked -= 1;
                break;
            }
            if since.elapsed() >= KEEP_ALIVE {
                st.idle -= 1;
                if st.queue.is_empty() {
                    st.threads -= 1;
                    p.threads.fetch_sub(1, Ordering::Relaxed);
                    return;
                }
                break;
            }
        }
    }
}

/// Where a job's result lands: the queue's value turns 1 when it is in.
struct Completion<T> {
    done: WaitQueue,
    result: Mutex<Option<thread::Result<T>>>,
}

/// Runs `f` on the pool; returns a handle to wait for its result.
pub(crate) fn start<F, T>(f: F) -> Pending<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let c = Arc::new(Completion {
        done: WaitQueue::new(0),
        result: Mutex::new(None),
    });
    let theirs = Arc::clone(&c);
    // The job runs in the runtime that submitted it: a spawn from `f` goes
    // there, not to the global runtime.
    let runtime = sched::current_runtime();
    submit(Box::new(move || {
        let _entered = runtime.map(sched::enter);
        let r = panic::catch_unwind(AssertUnwindSafe(f));
        *crate::loom::lock(&theirs.result) = Some(r);
        theirs.done.value().store(1, Ordering::Release);
        theirs.done.wake_all(make_ready);
    }));
    Pending(c)
}

/// A job under way on the pool.
pub(crate) struct Pending<T>(Arc<Completion<T>>);

impl<T> Pending<T> {
    /// Waits for the job's result (its panic as `Err`), as a wait of
    /// `kind` until `deadline`.
    pub(crate) fn wait(
        self,
        kind: WaitPolicy,
        deadline: Option<Instant>,
    ) -> Result<thread::Result<T>, WaitError> {
        let c = &self.0;
        loop {
            if c.done.value().load(Ordering::Acquire) == 1 {
                let r = crate::loom::lock(&c.result).take();
                return Ok(r.expect("a finished job leaves its result"));
            }
            match wait::wait(&c.done, 0, deadline, kind, WaitKind::Blocking) {
                Ok(()) | Err(WaitError::WouldBlock) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

impl<T> std::fmt::Debug for Pending<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending").finish_non_exhaustive()
    }
}
