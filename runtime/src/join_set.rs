//! [`JoinSet`]: a set of tasks joined in the order they end (tokio's
//! shape, in spindle's blocking style).
//!
//! Each task of the set is spawned with a *member token* that it drops
//! once its result is stored (or, if its body never runs, with the body):
//! the token sends the task's key on the set's own channel. So the set
//! learns of every end, a panic and a cancellation included, in the order
//! they come, and `join_next` is a receive on that channel (suspending the
//! task, deadline-aware, interruptible) followed by a join of the task it
//! names, which has ended or is a few instructions from it. Keys are the
//! set's own sequence numbers, not task ids: a token must carry its key
//! before its task exists. A key that names no member any more (detached)
//! is skipped.
//!
//! The tasks are the spawning task's children (`meta::family`): they run
//! in its deadline scope and are stopped with it. Dropping the set stops
//! the tasks still running, without waiting for them.

use crate::error::{JoinError, WaitError};
use crate::id::TaskId;
use crate::sync::mpsc::{self, RecvError, TryRecvError};
use crate::task::{self, JoinHandle, WhenStopping};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::panic::{self, AssertUnwindSafe};

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
    members: HashMap<u64, JoinHandle<T>, BuildHasherDefault<KeyHasher>>,
    next_key: u64,
    /// Keys whose tasks have said they ended, read off the channel but not
    /// yet joined (a `join_next` whose wait for the end was cut short).
    ended: VecDeque<u64>,
    ended_tx: mpsc::Sender<u64>,
    ended_rx: mpsc::Receiver<u64>,
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
    ended: mpsc::Sender<u64>,
}

impl Drop for Member {
    fn drop(&mut self) {
        // The set may be gone: nobody to tell.
        let _ = self.ended.send(self.key);
    }
}

impl<T: Send + 'static> JoinSet<T> {
    /// An empty set.
    pub fn new() -> Self {
        let (ended_tx, ended_rx) = mpsc::channel();
        JoinSet {
            members: HashMap::default(),
            next_key: 0,
            ended: VecDeque::new(),
            ended_tx,
            ended_rx,
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

    /// Spawns `f` into the set with `builder`'s name, stack size and
    /// deadline. Fails as [`task::Builder::spawn`](crate::task::Builder::spawn)
    /// does.
    pub fn spawn_with<F>(&mut self, builder: task::Builder, f: F) -> std::io::Result<TaskId>
    where
        F: FnOnce() -> T + Send + 'static,
    {
        let key = self.next_key;
        self.next_key += 1;
        let member = Member {
            key,
            ended: self.ended_tx.clone(),
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
                None => self.ended_rx.recv().map_err(wait_error_of)?,
            };
            if let Some(r) = self.join_ended(key)? {
                return Ok(Some(r));
            }
        }
    }

    /// The next task of the set that has ended, if any, without waiting.
    pub fn try_join_next(&mut self) -> Option<JoinNext<T>> {
        // Keys of tasks a moment from their end are kept for later.
        let mut not_yet = Vec::new();
        let found = loop {
            let key = match self.ended.pop_front() {
                Some(key) => key,
                None => match self.ended_rx.try_recv() {
                    Ok(key) => key,
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break None,
                },
            };
            match self.members.get(&key) {
                None => {}
                Some(h) if h.is_finished() => break self.take(key),
                Some(_) => not_yet.push(key),
            }
        };
        self.ended.extend(not_yet);
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
        let Some(h) = self.members.get(&key) else {
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
        let h = self.members.remove(&key)?;
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

/// What ended a receive on the set's channel, as the wait's error (the set
/// holds a sender: the channel never disconnects).
fn wait_error_of(e: RecvError) -> WaitError {
    match e {
        RecvError::DeadlineExceeded => WaitError::DeadlineExceeded,
        RecvError::Interrupted => WaitError::Interrupted,
        RecvError::Stopped => WaitError::Stopped,
        _ => unreachable!("the set's own channel disconnected: {e:?}"),
    }
}

/// Hashes the set's keys, sequence numbers, by a multiply: SipHash's
/// resistance to chosen keys buys nothing here.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }

    fn write_u64(&mut self, key: u64) {
        self.0 = key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}
