//! `OnceCell`: a value initialized once, for tasks and threads (std's
//! `OnceLock`, with waits that suspend a task rather than its worker).
//!
//! A butex holds the phase, `EMPTY`, `RUNNING` (one caller runs the
//! initializer) or `COMPLETE`, and a `WAITERS` bit. The caller whose CAS
//! moves `EMPTY` to `RUNNING` runs the initializer; the others set
//! `WAITERS` and wait on the butex. The runner writes the value, then
//! swaps in `COMPLETE` (Release; readers load it with Acquire) and wakes
//! every waiter if the bit was set. If the initializer panics, or
//! `get_or_try_init`'s fails, the phase goes back to `EMPTY` and every
//! waiter is woken: the first to move it to `RUNNING` again runs its own
//! initializer, the others wait again. A `get` of a set cell is one load.

use crate::error::WaitError;
use crate::loom::sync::atomic::Ordering;
use crate::loom::UnsafeCell;
use crate::meta::activity::WaitKind;
use crate::meta::wait_queue::WaitPolicy;
use crate::wait::deadline::without_scope;
use crate::wait::{self, Butex};
use std::convert::Infallible;
use std::fmt;
use std::mem::MaybeUninit;
use std::time::Instant;

const EMPTY: u32 = 0;
const RUNNING: u32 = 1;
const COMPLETE: u32 = 2;
const PHASE: u32 = 3;
/// Callers may be waiting on the butex for the phase to change.
const WAITERS: u32 = 4;

/// A cell written once, by the first caller of
/// [`get_or_init`](Self::get_or_init) (or [`set`](Self::set)), and read
/// by everybody after.
///
/// A caller that finds another's initializer running waits for it as a
/// task (the worker runs other tasks meanwhile), or parks as a plain
/// thread. Such waits are not ended by `interrupt`, like the other waits
/// of `sync`. As for deadlines:
///
/// - [`get_or_init`](Self::get_or_init), [`get_or_try_init`](Self::get_or_try_init)
///   and [`set`](Self::set) keep std's shapes, which cannot fail: they wait
///   for a running initializer outside any
///   [`with_deadline`](crate::with_deadline) scope (the initializer itself
///   runs inside the caller's scope). They wait only as long as that
///   initializer runs: it finishes, or fails and this caller takes over.
/// - [`get_or_init_until`](Self::get_or_init_until) honours the enclosing
///   scope and a deadline of its own: it fails with `DeadlineExceeded` or
///   `TimedOut` without running its initializer, and leaves the cell as it
///   was.
/// - [`wait`](Self::wait) and [`wait_until`](Self::wait_until) wait for
///   somebody else to set the cell, honouring the scope.
///
/// An initializer that calls `get_or_init` on its own cell waits for
/// itself for good (std's `OnceLock` deadlocks too).
///
/// ```
/// use spindle::sync::OnceCell;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::time::Duration;
///
/// static CONFIG: OnceCell<String> = OnceCell::new();
/// static LOADS: AtomicUsize = AtomicUsize::new(0);
///
/// let rt = spindle::Runtime::builder().workers(2).build().unwrap();
/// rt.block_on(|| {
///     let readers: Vec<_> = (0..4)
///         .map(|_| {
///             spindle::spawn(|| {
///                 // The first caller loads it; the others wait, as tasks.
///                 let config = CONFIG.get_or_init(|| {
///                     LOADS.fetch_add(1, Ordering::SeqCst);
///                     spindle::sleep(Duration::from_millis(5)).unwrap();
///                     "threads = 4".to_string()
///                 });
///                 config.len()
///             })
///         })
///         .collect();
///     for r in readers {
///         assert_eq!(r.join().unwrap(), 11);
///     }
/// });
/// assert_eq!(LOADS.load(Ordering::SeqCst), 1);
/// assert_eq!(CONFIG.get().map(String::as_str), Some("threads = 4"));
/// ```
pub struct OnceCell<T> {
    state: Butex,
    /// The value once written, in the loom shim's cell: a loom model sees
    /// the initializer's write and every read.
    value: UnsafeCell<MaybeUninit<T>>,
}

// SAFETY: the cell owns its T, which moves with it.
unsafe impl<T: Send> Send for OnceCell<T> {}
// SAFETY: `&OnceCell<T>` hands out `&T` on every thread (T: Sync), and
// lets any thread write the value, which another may then drop or take
// (T: Send). The write happens once, before `COMPLETE` is published.
unsafe impl<T: Send + Sync> Sync for OnceCell<T> {}

/// How a caller waits for another's initializer.
#[derive(Clone, Copy)]
enum Wait {
    /// Until it is done, outside deadline scopes.
    Unbounded,
    /// Until this deadline, or the scope's.
    Until(Option<Instant>),
}

impl<T> OnceCell<T> {
    /// An empty cell.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        OnceCell {
            state: Butex::new(EMPTY),
            value: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// An empty cell (not const under loom).
    #[cfg(loom)]
    pub fn new() -> Self {
        OnceCell {
            state: Butex::new(EMPTY),
            value: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// The value, if the cell is set. One atomic load; never waits.
    pub fn get(&self) -> Option<&T> {
        if self.is_complete() {
            // SAFETY: COMPLETE, loaded with Acquire, publishes the value,
            // which is never written again while the cell is shared.
            Some(self.value.with(|v| unsafe { (*v).assume_init_ref() }))
        } else {
            None
        }
    }

    /// The value, through a unique borrow, if the cell is set.
    pub fn get_mut(&mut self) -> Option<&mut T> {
        if self.is_complete() {
            // SAFETY: COMPLETE: the value is written; `&mut self` is unique.
            Some(self.value.with_mut(|v| unsafe { (*v).assume_init_mut() }))
        } else {
            None
        }
    }

    fn is_complete(&self) -> bool {
        self.state.value().load(Ordering::Acquire) & PHASE == COMPLETE
    }

    /// Sets the cell to `value` if it is empty; otherwise gives `value`
    /// back. If another caller's initializer is running, waits for it to
    /// end (see the type's docs), so the cell is set when this returns.
    pub fn set(&self, value: T) -> Result<(), T> {
        let mut value = Some(value);
        let set = self.initialize(Wait::Unbounded, || {
            Ok::<T, Infallible>(value.take().expect("taken once"))
        });
        match (set, value) {
            (_, Some(v)) => Err(v),
            (Ok(Ok(())), None) => Ok(()),
            (Ok(Err(never)), None) => match never {},
            (Err(e), None) => unreachable!("an unbounded wait failed: {e}"),
        }
    }

    /// The value, initializing the cell with `f` if it is empty. If
    /// another caller's initializer is running, waits for it (outside any
    /// deadline scope; see the type's docs); if that one panics, this
    /// caller (or another waiter) runs its own. If `f` panics, the panic
    /// goes on, and the cell is left empty.
    pub fn get_or_init(&self, f: impl FnOnce() -> T) -> &T {
        match self.get_or_try_init(|| Ok::<T, Infallible>(f())) {
            Ok(v) => v,
            Err(never) => match never {},
        }
    }

    /// Like [`get_or_init`](Self::get_or_init) with an initializer that
    /// may fail: its error is returned, and the cell is left empty (a
    /// waiting caller then runs its own initializer).
    pub fn get_or_try_init<E>(&self, f: impl FnOnce() -> Result<T, E>) -> Result<&T, E> {
        if let Some(v) = self.get() {
            return Ok(v);
        }
        match self.initialize(Wait::Unbounded, f) {
            Ok(Ok(())) => Ok(self.get_complete()),
            Ok(Err(e)) => Err(e),
            Err(e) => unreachable!("an unbounded wait failed: {e}"),
        }
    }

    /// Like [`get_or_init`](Self::get_or_init), but a wait for another
    /// caller's initializer gives up with `TimedOut` at `deadline`, or
    /// `DeadlineExceeded` at the enclosing scope's. `f` has then not run,
    /// and the cell is as it was.
    pub fn get_or_init_until(
        &self,
        f: impl FnOnce() -> T,
        deadline: Option<Instant>,
    ) -> Result<&T, WaitError> {
        if let Some(v) = self.get() {
            return Ok(v);
        }
        match self.initialize(Wait::Until(deadline), || Ok::<T, Infallible>(f()))? {
            Ok(()) => Ok(self.get_complete()),
            Err(never) => match never {},
        }
    }

    /// Waits until somebody sets the cell, and returns the value. Fails
    /// only with `DeadlineExceeded`, at the enclosing scope's deadline.
    pub fn wait(&self) -> Result<&T, WaitError> {
        self.wait_inner(None)
    }

    /// Like [`wait`](Self::wait), giving up with `TimedOut` at `deadline`.
    pub fn wait_until(&self, deadline: Instant) -> Result<&T, WaitError> {
        self.wait_inner(Some(deadline))
    }

    fn wait_inner(&self, deadline: Option<Instant>) -> Result<&T, WaitError> {
        let st = self.state.value();
        let mut s = st.load(Ordering::Acquire);
        loop {
            if s & PHASE == COMPLETE {
                return Ok(self.get_complete());
            }
            s = self.wait_for_change(s, Wait::Until(deadline))?;
        }
    }

    /// Takes the value out, leaving the cell empty.
    pub fn take(&mut self) -> Option<T> {
        if self.is_complete() {
            self.state.value().store(EMPTY, Ordering::Relaxed);
            // SAFETY: it was COMPLETE, so the value is written; the phase
            // is EMPTY now, so nothing reads or drops it again; `&mut self`
            // is unique.
            Some(self.value.with_mut(|v| unsafe { (*v).assume_init_read() }))
        } else {
            None
        }
    }

    /// The value, consuming the cell.
    pub fn into_inner(mut self) -> Option<T> {
        self.take()
    }

    /// The value of a cell known to be set.
    fn get_complete(&self) -> &T {
        self.get().expect("the cell is set")
    }

    /// Runs `f` if the cell is empty and nobody runs an initializer;
    /// otherwise waits for the one that runs. `Ok(Ok(()))`: the cell is
    /// set (by `f` or by another); `Ok(Err(e))`: `f` failed with `e`;
    /// `Err`: the wait failed (only for `Wait::Until`).
    fn initialize<E>(
        &self,
        how: Wait,
        f: impl FnOnce() -> Result<T, E>,
    ) -> Result<Result<(), E>, WaitError> {
        let st = self.state.value();
        let mut f = Some(f);
        let mut s = st.load(Ordering::Acquire);
        loop {
            match s & PHASE {
                COMPLETE => return Ok(Ok(())),
                EMPTY => {
                    let running = (s & WAITERS) | RUNNING;
                    if let Err(now) =
                        st.compare_exchange(s, running, Ordering::Acquire, Ordering::Acquire)
                    {
                        s = now;
                        continue;
                    }
                    let f = f.take().expect("an initializer runs once per caller");
                    return Ok(self.run(f));
                }
                _ => s = self.wait_for_change(s, how)?,
            }
        }
    }

    /// Runs the initializer `f` (the phase is RUNNING, by our CAS).
    fn run<E>(&self, f: impl FnOnce() -> Result<T, E>) -> Result<(), E> {
        // Back to EMPTY if `f` fails or panics, waking the waiters.
        let reset = Reset(self);
        let value = f()?;
        std::mem::forget(reset);
        // SAFETY: we moved the phase to RUNNING, so nobody else writes or
        // reads the value until we publish COMPLETE below.
        self.value.with_mut(|v| unsafe { (*v).write(value) });
        let prev = self.state.value().swap(COMPLETE, Ordering::Release);
        if prev & WAITERS != 0 {
            self.state.wake_all();
        }
        Ok(())
    }

    /// Waits for the state `s` (not COMPLETE) to change; returns the new
    /// state.
    fn wait_for_change(&self, s: u32, how: Wait) -> Result<u32, WaitError> {
        let st = self.state.value();
        if s & WAITERS == 0 {
            // Ask to be woken; if the state moved meanwhile, look again.
            return Ok(
                match st.compare_exchange(s, s | WAITERS, Ordering::Acquire, Ordering::Acquire) {
                    Ok(_) => s | WAITERS,
                    Err(now) => now,
                },
            );
        }
        let waited = match how {
            Wait::Unbounded => without_scope(|| {
                wait::wait(
                    self.state.queue(),
                    s,
                    None,
                    WaitPolicy::Uninterruptible,
                    WaitKind::OnceCell,
                )
            }),
            Wait::Until(d) => wait::wait(
                self.state.queue(),
                s,
                d,
                WaitPolicy::Uninterruptible,
                WaitKind::OnceCell,
            ),
        };
        match waited {
            Ok(()) | Err(WaitError::WouldBlock) => Ok(st.load(Ordering::Acquire)),
            Err(e) => Err(e),
        }
    }
}

/// Puts a cell whose initializer failed (or panicked) back to EMPTY, and
/// wakes its waiters: one of them takes over.
struct Reset<'a, T>(&'a OnceCell<T>);

impl<T> Drop for Reset<'_, T> {
    fn drop(&mut self) {
        let prev = self.0.state.value().swap(EMPTY, Ordering::Release);
        if prev & WAITERS != 0 {
            self.0.state.wake_all();
        }
    }
}

impl<T> Drop for OnceCell<T> {
    fn drop(&mut self) {
        if self.is_complete() {
            // SAFETY: COMPLETE: the value is written, and dropped only here;
            // `&mut self` is unique.
            self.value.with_mut(|v| unsafe { (*v).assume_init_drop() });
        }
    }
}

impl<T> Default for OnceCell<T> {
    fn default() -> Self {
        OnceCell::new()
    }
}

impl<T> From<T> for OnceCell<T> {
    fn from(value: T) -> Self {
        let cell = OnceCell::new();
        if cell.set(value).is_err() {
            unreachable!("a new cell is empty");
        }
        cell
    }
}

impl<T: fmt::Debug> fmt::Debug for OnceCell<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_tuple("OnceCell");
        match self.get() {
            Some(v) => d.field(v),
            None => d.field(&format_args!("<unset>")),
        };
        d.finish()
    }
}
