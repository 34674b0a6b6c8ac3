//! Scoped tasks: [`scope`], in `std::thread::scope`'s shape.
//!
//! Tasks spawned in a scope may borrow from the caller's frame, because
//! `scope` does not return before every one of them has ended. A scope
//! counts its live tasks in a [`Butex`]: a spawn counts one up before the
//! task is made, and the task counts it down when its body is over, or
//! when its body is dropped unrun (a spawn that fails, a task the runtime's
//! stop cancels), so no path leaves the count up. The count lives in an
//! `Arc` that each task holds, so the last task's wake-up never touches
//! the caller's frame. The end of the scope waits for the count to reach
//! zero, and nothing cuts that wait short: not an interrupt, a `stop`, nor
//! a deadline scope, since the tasks may still borrow from the frame.
//!
//! A scope's tasks are the spawning task's children (`meta::family`): they
//! run in its deadline scope, and a stop of it stops them, so that a
//! stopped owner's scope ends soon.

use crate::error::JoinError;
use crate::error::NoSuchTask;
use crate::id::TaskId;
use crate::loom::sync::atomic::{AtomicUsize, Ordering};
use crate::meta::activity::WaitKind;
use crate::meta::wait_queue::WaitPolicy;
use crate::sched;
use crate::task::{self, JoinHandle};
use crate::wait::{self, deadline, Butex};
use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs `f` with a [`Scope`] to spawn tasks that borrow from the caller,
/// and returns once every task spawned in it has ended (std's
/// `thread::scope`). From a task it suspends only that task; on a plain
/// thread it blocks the thread.
///
/// The tasks a scope does not join itself are joined at its end. If one of
/// them panicked (and no `join` took the panic), `scope` panics once they
/// have all ended; if `f` panics, `scope` re-raises that panic, also after
/// they have all ended.
///
/// ```
/// let mut counts = [0u32; 4];
/// let rt = spindle::Runtime::builder().workers(2).build().unwrap();
/// rt.block_on(|| {
///     spindle::scope(|s| {
///         for (i, c) in counts.iter_mut().enumerate() {
///             s.spawn(move || *c = i as u32 * 10);
///         }
///     });
/// });
/// assert_eq!(counts, [0, 10, 20, 30]);
/// ```
pub fn scope<'env, F, T>(f: F) -> T
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> T,
{
    let scope = Scope {
        data: Arc::new(ScopeData {
            live: Butex::new(0),
            unjoined_panics: AtomicUsize::new(0),
        }),
        scope: PhantomData,
        env: PhantomData,
    };
    let result = panic::catch_unwind(AssertUnwindSafe(|| f(&scope)));
    scope.data.wait_all();
    match result {
        Err(p) => panic::resume_unwind(p),
        Ok(_) if scope.data.unjoined_panics.load(Ordering::Acquire) > 0 => {
            panic!("a task spawned in a spindle::scope panicked")
        }
        Ok(value) => value,
    }
}

/// A scope to spawn tasks in; see [`scope`].
pub struct Scope<'scope, 'env: 'scope> {
    data: Arc<ScopeData>,
    /// Invariant over 'scope and 'env, as std's: tasks may neither outlive
    /// the scope nor borrow less than the environment.
    scope: PhantomData<&'scope mut &'scope ()>,
    env: PhantomData<&'env mut &'env ()>,
}

impl fmt::Debug for Scope<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scope")
            .field(
                "live_tasks",
                &self.data.live.value().load(Ordering::Relaxed),
            )
            .finish_non_exhaustive()
    }
}

struct ScopeData {
    /// Tasks spawned in the scope that have not ended.
    live: Butex,
    /// Tasks that panicked, less the panics that a `join` returned.
    unjoined_panics: AtomicUsize,
}

impl ScopeData {
    fn wait_all(&self) {
        if sched::unwinding_cancelled() {
            return self.wait_all_at_stop();
        }
        deadline::without_scope(|| loop {
            let live = self.live.value().load(Ordering::Acquire);
            if live == 0 {
                return;
            }
            // Only the count reaching zero ends this wait (see the module
            // docs); a spurious return re-checks.
            let _ = wait::wait(
                self.live.queue(),
                live,
                None,
                WaitPolicy::Uncancellable,
                WaitKind::Join,
            );
        });
    }
}

impl ScopeData {
    /// The end of a scope whose owner the runtime's stop is unwinding (its
    /// closure was in a wait the stop ended): the owner cannot suspend any
    /// more (a suspend would only resume the unwind), and must not let its
    /// frame go while the scope's tasks may borrow from it. So its worker
    /// cancels its other tasks now, the scope's among them, and this thread
    /// waits for those on other workers, which their own workers' stops
    /// cancel.
    #[cold]
    fn wait_all_at_stop(&self) {
        sched::cancel_rest_at_stop();
        let since = Instant::now();
        let mut warned = false;
        while self.live.value().load(Ordering::Acquire) != 0 {
            std::thread::sleep(Duration::from_micros(100));
            if !warned && since.elapsed() >= sched::HELD_UP_WARNING {
                warned = true;
                tracing::warn!(
                    live = self.live.value().load(Ordering::Relaxed),
                    "the stop unwinds a scope's owner, which waits for the scope's tasks \
                     on other workers to end"
                );
            }
        }
    }
}

/// A scoped task's share of its scope: counts the task out when dropped,
/// after the body it holds (which may borrow from the scope's caller).
struct ScopeMember<F> {
    body: Option<F>,
    data: Arc<ScopeData>,
}

impl<F> Drop for ScopeMember<F> {
    fn drop(&mut self) {
        drop(self.body.take());
        // Release: what the task wrote through its borrows happens before
        // the scope's caller sees the count at zero.
        if self.data.live.value().fetch_sub(1, Ordering::Release) == 1 {
            self.data.live.wake_all();
        }
    }
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// Spawns `f` as a task that may borrow what outlives the scope.
    ///
    /// # Panics
    /// If the task cannot be made, as [`spawn`](crate::spawn);
    /// [`task::Builder::spawn_scoped`] returns that error instead.
    pub fn spawn<F, T>(&'scope self, f: F) -> ScopedJoinHandle<'scope, T>
    where
        F: FnOnce() -> T + Send + 'scope,
        T: Send + 'scope,
    {
        task::Builder::new()
            .spawn_scoped(self, f)
            .unwrap_or_else(|e| panic!("spindle::Scope::spawn failed: {e}"))
    }
}

impl task::Builder {
    /// Spawns `f` in `scope`, with this builder's name, stack size and
    /// span (as [`Scope::spawn`], returning the error of a spawn that
    /// fails).
    pub fn spawn_scoped<'scope, 'env, F, T>(
        self,
        scope: &'scope Scope<'scope, 'env>,
        f: F,
    ) -> io::Result<ScopedJoinHandle<'scope, T>>
    where
        F: FnOnce() -> T + Send + 'scope,
        T: Send + 'scope,
    {
        let data = scope.data.clone();
        // Counted in before the task exists; `member` counts it out on
        // every path from here, the failed spawn included.
        data.live.value().fetch_add(1, Ordering::Relaxed);
        let member = ScopeMember {
            body: Some(f),
            data: data.clone(),
        };
        let body = move || {
            let mut member = member;
            let f = member.body.take().expect("a scoped body runs once");
            let r = panic::catch_unwind(AssertUnwindSafe(f));
            if r.is_err() && !sched::unwinding_cancelled() {
                member.data.unjoined_panics.fetch_add(1, Ordering::Relaxed);
            }
            // The result is stored (or dropped, detached) by the caller of
            // this closure, before `member` goes with the closure's end:
            // so a result that borrows is gone or handed over before the
            // scope can end.
            (r, member)
        };
        // SAFETY: what `f` borrows outlives 'scope, and `scope` does not
        // return before the task's `ScopeMember` has dropped, which is the
        // last thing the task does with anything of 'scope (see
        // `task::spawn_unchecked`).
        let handle =
            unsafe { task::spawn_unchecked(self.structured(), task::WhenStopping::Refuse, body)? };
        Ok(ScopedJoinHandle {
            handle,
            data,
            scope: PhantomData,
        })
    }
}

/// An owned permission to join a scoped task; see [`JoinHandle`].
/// Dropping it leaves the task to the scope's end.
pub struct ScopedJoinHandle<'scope, T> {
    handle: JoinHandle<T>,
    data: Arc<ScopeData>,
    scope: PhantomData<&'scope ()>,
}

impl<T> fmt::Debug for ScopedJoinHandle<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScopedJoinHandle")
            .field("id", &self.handle.id())
            .finish()
    }
}

impl<T> ScopedJoinHandle<'_, T> {
    /// The task's id.
    pub fn id(&self) -> TaskId {
        self.handle.id()
    }

    /// Interrupts the task; see [`JoinHandle::interrupt`].
    pub fn interrupt(&self) -> Result<(), NoSuchTask> {
        self.handle.interrupt()
    }

    /// Stops the task; see [`JoinHandle::stop`].
    pub fn stop(&self) -> Result<(), NoSuchTask> {
        self.handle.stop()
    }

    /// Whether the task has ended.
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    /// Waits for the task and returns its value, as [`JoinHandle::join`].
    /// A panic it returns is the caller's to handle: the scope's end does
    /// not panic for it.
    pub fn join(self) -> Result<T, JoinError> {
        let r = self.handle.join();
        if let Err(JoinError::Panicked(_)) = &r {
            self.data.unjoined_panics.fetch_sub(1, Ordering::Relaxed);
        }
        r
    }
}

/// Loom model of a scope's end: members counted out on other threads (one
/// by running its body, one by dropping it unrun) race the caller's wait,
/// which must return only once both are gone, and must return then.
#[cfg(all(test, loom))]
mod loom_scope {
    use super::{ScopeData, ScopeMember};
    use crate::loom::sync::atomic::{AtomicUsize, Ordering};
    use crate::wait::Butex;
    use loom::thread;
    use std::sync::Arc;

    #[test]
    fn loom_a_scope_ends_after_its_last_member() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let data = Arc::new(ScopeData {
                live: Butex::new(2),
                unjoined_panics: AtomicUsize::new(0),
            });
            let done = Arc::new(AtomicUsize::new(0));
            let racers: Vec<_> = (0..2)
                .map(|i| {
                    let member = ScopeMember {
                        body: Some(done.clone()),
                        data: data.clone(),
                    };
                    thread::spawn(move || {
                        let mut member = member;
                        if i == 0 {
                            // Ran: its effect is published by the count-out.
                            let done = member.body.take().expect("a body");
                            done.fetch_add(1, Ordering::Relaxed);
                        } else {
                            // Dropped unrun: the drop counts it out.
                            let body = member.body.as_ref().expect("a body");
                            body.fetch_add(1, Ordering::Relaxed);
                        }
                        drop(member);
                    })
                })
                .collect();
            data.wait_all();
            assert_eq!(data.live.value().load(Ordering::Relaxed), 0);
            assert_eq!(
                done.load(Ordering::Relaxed),
                2,
                "every member's effect is seen"
            );
            for r in racers {
                r.join().unwrap();
            }
        });
    }
}
