//! [`JoinSet`]: a set of tasks joined in the order they end (tokio's
//! shape, in spindle's blocking style).
//!
//! Each task of the set is spawned with a *member token* that it drops
//! once its result is stored (or, if its body never runs, with the body):
//! the token tells the set its key (`Told`: a push under a short lock,
//! then an epoch bump and a wake-up of the butex the set waits on). So
//! the set learns of every end, a panic and a cancellation included, in
//! the order they come, and `join_next` is a wait for the epoch to move
//! (suspending the task at once, which lets the set's tasks on its worker
//! run; deadline-aware, interruptible), followed by a join of the task a
//! key names, which has ended or is a few instructions from it. Keys are
//! the set's own (a slot and its generation), not task ids: a token must
//! carry its key before its task exists. A key that names no member any
//! more (detached) is skipped.
//!
//! The tasks are the spawning task's children (`meta::family`): they run
//! in its deadline scope and are stopped with it. Dropping the set stops
//! the tasks still running, without waiting for them.

use crate::error::{JoinError, WaitError};
use crate::id::TaskId;
use crate::loom::lock;
use crate::loom::sync::atomic::Ordering;
use crate::loom::sync::Mutex;
use crate::meta::activity::WaitKind;
use crate::meta::wait_queue::WaitPolicy;
use crate::task::{self, JoinHandle, WhenStopping};
use crate::wait::{self, Butex};
use std::collections::VecDeque;
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;

/// A set of tasks that returns their results as they end: spawn into it,
/// then [`join_next`](Self::join_next) until it is empty.
///
/// ```
/// let rt = spindle::Runtime::builder().workers(2).build().unwrap();
/// let total = rt.block_on(|| {
///     let mut set = spindle::JoinSet::new();
///     for i in 1..=4u64 {
///         set.spawn(move || i * 10);
///     }
///     let mut total = 0;
///     while let Some((_id, r)) = set.join_next().unwrap() {
///         total += r.unwrap();
///     }
///     total
/// });
/// assert_eq!(total, 100);
/// ```
///
/// Its tasks are children of the task that spawns them: they run inside
/// its [`with_deadline`](crate::with_deadline) scope, and a
/// [`stop`](crate::stop) of it stops them. Dropping the set stops the tasks
/// still running (it does not wait for them); [`detach_all`](Self::detach_all)
/// lets them run on instead.
pub struct JoinSet<T> {
    members: Members<T>,
    /// Keys whose tasks have said they ended, read off the channel but not
    /// yet joined (a `join_next` whose wait for the end was cut short).
    ended: VecDeque<u64>,
    /// Where the tasks say they ended.
    told: Arc<Told>,
}

/// Where a set's tasks say they ended: their keys, under a lock held for
/// a push or a swap, and an epoch in a butex that each end bumps (after
/// its push) and wakes. The set reads the epoch, then looks at the keys,
/// and waits while the epoch is unchanged: an end that its look missed
/// bumps the epoch after, which the wait's check under the butex's lock
/// sees, or wakes the wait once it is linked. No fence is needed: the
/// lock orders the push and the look.
struct Told {
    keys: Mutex<Vec<u64>>,
    epoch: Butex,
}

impl<T> fmt::Debug for JoinSet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinSet")
            .field("len", &self.members.len())
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static> Default for JoinSet<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// One task's end as a set returns it: its id, and its value or why it has
/// none.
pub type JoinNext<T> = (TaskId, Result<T, JoinError>);

/// Sends its task's key on the set's channel when dropped: after the
/// task's result is stored, or with its body if that never runs.
struct Member {
    key: u64,
    told: Arc<Told>,
}

impl Drop for Member {
    fn drop(&mut self) {
        // The set may be gone: then nobody reads it.
        lock(&self.told.keys).push(self.key);
        self.told.epoch.value().fetch_add(1, Ordering::Release);
        self.told.epoch.wake_one();
    }
}

impl<T: Send + 'static> JoinSet<T> {
    /// An empty set.
    pub fn new() -> Self {
        JoinSet {
            members: Members::new(),
            ended: VecDeque::new(),
            told: Arc::new(Told {
                keys: Mutex::new(Vec::new()),
                epoch: Butex::new(0),
            }),
        }
    }

    /// Spawns `f` into the set, on the current runtime (as
    /// [`spawn`](crate::spawn)); returns its id. The task is a child of the
    /// spawning task (see the type's docs).
    ///
    /// # Panics
    /// As [`spawn`](crate::spawn); [`spawn_with`](Self::spawn_with) returns
    /// the error instead.
    pub fn spawn<F>(&mut self, f: F) -> TaskId
    where
        F: FnOnce() -> T + Send + 'static,
    {
        self.spawn_with(task::Builder::new(), f)
            .unwrap_or_else(|e| panic!("JoinSet::spawn failed: {e}"))
    }

    /// Spawns `f` into the set with `builder`'s name, stack size, deadline
    /// and span. Fails as [`task::Builder::spawn`](crate::task::Builder::spawn)
    /// does.
    pub fn spawn_with<F>(&mut self, builder: task::Builder, f: F) -> std::io::Result<TaskId>
    where
        F: FnOnce() -> T + Send + 'static,
    {
        let key = self.members.next_key();
        let member = Member {
            key,
            told: self.told.clone(),
        };
        let body = move || {
            let member = member;
            (panic::catch_unwind(AssertUnwindSafe(f)), member)
        };
        // SAFETY: the body is 'static: it borrows nothing.
        let handle =
            unsafe { task::spawn_unchecked(builder.structured(), WhenStopping::Cancel, body)? };
        let id = handle.id();
        self.members.insert(key, handle);
        Ok(id)
    }

    /// Waits for the next task of the set to end and returns its id and
    /// how it ended; `Ok(None)` at once if the set is empty. Suspends the
    /// calling task (a plain thread blocks). The deadline of an enclosing
    /// [`with_deadline`](crate::with_deadline) scope, an
    /// [`interrupt`](crate::interrupt) or a [`stop`](crate::stop) of the
    /// caller ends the wait with that error; the tasks stay in the set.
    pub fn join_next(&mut self) -> Result<Option<JoinNext<T>>, WaitError> {
        loop {
            if self.members.is_empty() {
                return Ok(None);
            }
            let key = match self.ended.pop_front() {
                Some(key) => key,
                None => {
                    let epoch = self.told.epoch.value().load(Ordering::Acquire);
                    if self.take_told() {
                        continue;
                    }
                    match wait::wait(
                        self.told.epoch.queue(),
                        epoch,
                        None,
                        WaitPolicy::Interruptible,
                        WaitKind::Join,
                    ) {
                        Ok(()) | Err(WaitError::WouldBlock) => continue,
                        Err(e) => return Err(e),
                    }
                }
            };
            if let Some(r) = self.join_ended(key)? {
                return Ok(Some(r));
            }
        }
    }

    /// Moves the keys the tasks have told into `ended`; whether there were
    /// any.
    fn take_told(&mut self) -> bool {
        let mut keys = lock(&self.told.keys);
        if keys.is_empty() {
            return false;
        }
        self.ended.extend(keys.drain(..));
        true
    }

    /// The next task of the set that has ended, if any, without waiting.
    pub fn try_join_next(&mut self) -> Option<JoinNext<T>> {
        self.take_told();
        // Keys of tasks a moment from their end are kept for later.
        let mut not_yet = Vec::new();
        let mut found = None;
        while let Some(key) = self.ended.pop_front() {
            match self.members.get(key) {
                None => {}
                Some(h) if h.is_finished() => {
                    found = self.take(key);
                    break;
                }
                Some(_) => not_yet.push(key),
            }
        }
        for key in not_yet.into_iter().rev() {
            self.ended.push_front(key);
        }
        found
    }

    /// The tasks in the set (running, or ended and not yet joined).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the set holds no task.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Stops every task of the set still running ([`stop`](crate::stop));
    /// they stay in the set, to be joined.
    pub fn stop_all(&self) {
        for h in self.members.values() {
            // An ended task is no error here.
            let _ = h.stop();
        }
    }

    /// Empties the set, leaving its tasks to run on, detached.
    pub fn detach_all(&mut self) {
        self.members.clear();
        self.ended.clear();
    }

    /// Joins the task of `key`, which has said it ended: `None` if `key`
    /// names no member (detached). Its end may be a moment behind its
    /// word: the wait for it may be cut short (the key is then kept).
    fn join_ended(&mut self, key: u64) -> Result<Option<JoinNext<T>>, WaitError> {
        let Some(h) = self.members.get(key) else {
            return Ok(None);
        };
        if let Err(e) = h.wait_end() {
            self.ended.push_front(key);
            return Err(e);
        }
        Ok(self.take(key))
    }

    /// Removes the ended task of `key` and takes its result.
    fn take(&mut self, key: u64) -> Option<JoinNext<T>> {
        let h = self.members.remove(key)?;
        let r = h.try_take().expect("the task has ended");
        Some((h.id(), r))
    }
}

impl<T> Drop for JoinSet<T> {
    fn drop(&mut self) {
        for h in self.members.values() {
            let _ = h.stop();
        }
    }
}

/// The set's tasks, by key: a slab of handles whose keys are the slot's
/// index and its generation (bumped each time the slot is filled), so a
/// key of a task that has left the set never names a later one.
struct Members<T> {
    slots: Vec<(u32, Option<JoinHandle<T>>)>,
    free: Vec<u32>,
    len: usize,
}

impl<T> Members<T> {
    fn new() -> Self {
        Members {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }

    /// The key the next [`insert`](Self::insert) takes (made first: a
    /// task's token carries it before the task exists).
    fn next_key(&mut self) -> u64 {
        let index = match self.free.last() {
            Some(&i) => i,
            None => {
                let i = u32::try_from(self.slots.len()).expect("fewer than 2^32 tasks in a set");
                self.slots.push((0, None));
                self.free.push(i);
                i
            }
        };
        let generation = self.slots[index as usize].0.wrapping_add(1);
        u64::from(generation) << 32 | u64::from(index)
    }

    fn insert(&mut self, key: u64, handle: JoinHandle<T>) {
        let index = self.free.pop().expect("next_key reserved a slot");
        debug_assert_eq!(u64::from(index), key & u64::from(u32::MAX));
        let slot = &mut self.slots[index as usize];
        *slot = ((key >> 32) as u32, Some(handle));
        self.len += 1;
    }

    fn get(&self, key: u64) -> Option<&JoinHandle<T>> {
        match self.slots.get((key & u64::from(u32::MAX)) as usize)? {
            (generation, Some(h)) if u64::from(*generation) == key >> 32 => Some(h),
            _ => None,
        }
    }

    fn remove(&mut self, key: u64) -> Option<JoinHandle<T>> {
        self.get(key)?;
        let index = (key & u64::from(u32::MAX)) as u32;
        let h = self.slots[index as usize].1.take();
        self.free.push(index);
        self.len -= 1;
        h
    }

    fn values(&self) -> impl Iterator<Item = &JoinHandle<T>> {
        self.slots.iter().filter_map(|(_, h)| h.as_ref())
    }

    fn clear(&mut self) {
        for (i, (_, h)) in self.slots.iter_mut().enumerate() {
            if h.take().is_some() {
                self.free.push(i as u32);
            }
        }
        self.len = 0;
    }

    fn len(&self) -> usize {
        self.len
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }
}
