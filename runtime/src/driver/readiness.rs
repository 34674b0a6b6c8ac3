//! The readiness of registered fds: a sequence per direction, bumped by
//! each event, and the tasks waiting for the next one.
//!
//! Each registered fd has an [`IoReadiness`] in a process-wide table whose
//! memory is never freed, only reused. Its two [`WaitQueue`]s hold the
//! read and write sequences as their values. A task that wants to read
//! first loads the read sequence, then tries the syscall; on `EAGAIN` it
//! waits on the read queue *for that sequence* (a `Butex` wait), so an
//! event that lands between the syscall and the wait has already moved the
//! value and the wait returns at once: no edge is lost (bthread's
//! `fd_wait`, Go's `pollDesc`). A poller that sees an event bumps the
//! sequence, then wakes every waiter of that direction.
//!
//! A registration is named in the poller by its *token*: the slot's index
//! and its generation. Freeing a slot bumps the generation, so an event
//! for an fd that has since been deregistered (late in a batch of events,
//! or for a number that was closed and reused) is ignored; and since slots
//! are never unmapped, reading a stale one is always safe. At worst a
//! reused slot gets a spurious wake-up, which its waiters survive (they
//! retry the syscall).

use crate::loom::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use crate::loom::sync::Mutex;
use crate::meta::wait_queue::WaitQueue;
use crate::meta::TaskRef;
use std::sync::OnceLock;

/// A direction of readiness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    Read,
    Write,
}

/// One registered fd's readiness; see the module docs.
#[derive(Debug)]
pub(crate) struct IoReadiness {
    /// Bumped each time the slot is freed.
    generation: AtomicU32,
    /// Set for a wait on both directions: every event wakes the read
    /// waiters (`io::wait_fd` with `Interest::ReadWrite`).
    either: AtomicBool,
    /// Sticky: the fd reported an error or a hang-up of a direction
    /// (`CLOSED_READ`, `CLOSED_WRITE`). No further event may come, so a
    /// waiter must never skip its syscall on the strength of a past one
    /// (see `IoSource::do_stream_io`).
    closed: AtomicU32,
    read: WaitQueue,
    write: WaitQueue,
}

impl IoReadiness {
    pub(crate) fn new() -> Self {
        IoReadiness {
            generation: AtomicU32::new(0),
            either: AtomicBool::new(false),
            closed: AtomicU32::new(0),
            read: WaitQueue::new(0),
            write: WaitQueue::new(0),
        }
    }

    /// The queue of `dir`: its value is the direction's sequence.
    pub(crate) fn queue(&self, dir: Direction) -> &WaitQueue {
        match dir {
            Direction::Read => &self.read,
            Direction::Write => &self.write,
        }
    }

    /// The sequence of `dir`, to load before the syscall whose `EAGAIN`
    /// the caller may then wait out.
    pub(crate) fn sequence(&self, dir: Direction) -> u32 {
        // Acquire: what the event's bump published (the poller's view of
        // the fd) happens before the retry of the syscall.
        self.queue(dir).value().load(Ordering::Acquire)
    }

    /// Readies the slot for a new registration: whether an event of
    /// either direction wakes the read waiters, and no hang-up seen yet.
    /// Before the fd is registered.
    pub(crate) fn reset(&self, either: bool) {
        self.either.store(either, Ordering::Relaxed);
        self.closed.store(0, Ordering::Relaxed);
    }

    /// Whether the fd has reported an error or a hang-up of `dir`.
    pub(crate) fn is_closed(&self, dir: Direction) -> bool {
        let bit = match dir {
            Direction::Read => CLOSED_READ,
            Direction::Write => CLOSED_WRITE,
        };
        self.closed.load(Ordering::Acquire) & bit != 0
    }

    /// An event: records the hang-ups in `closed` (`CLOSED_*` bits), bumps
    /// the sequences of the ready directions, then wakes their waiters
    /// through `ready`.
    pub(crate) fn deliver(
        &self,
        readable: bool,
        writable: bool,
        closed: u32,
        ready: impl Fn(TaskRef),
    ) {
        if closed != 0 {
            // Before the bumps: a waiter that sees a bumped sequence sees
            // the hang-up too.
            self.closed.fetch_or(closed, Ordering::Release);
        }
        let readable = readable || (writable && self.either.load(Ordering::Relaxed));
        for (yes, q) in [(readable, &self.read), (writable, &self.write)] {
            if yes {
                // The bump comes before the wake: a waiter checks the value
                // under the queue's lock, which the wake takes.
                q.value().fetch_add(1, Ordering::Release);
                q.wake_all(&ready);
            }
        }
    }
}

/// `IoReadiness::closed`: the read side hung up (or an error).
pub(crate) const CLOSED_READ: u32 = 1;
/// `IoReadiness::closed`: the write side hung up (or an error).
pub(crate) const CLOSED_WRITE: u32 = 2;

/// Slots per page of the table.
const PAGE: usize = 1024;
/// Pages at most: 4 Mi registrations at once.
const PAGES: usize = 4096;

/// The process-wide table of [`IoReadiness`] slots.
struct ReadinessTable {
    pages: Box<[OnceLock<Box<[IoReadiness]>>]>,
    /// Freed slots, and how many were ever handed out.
    free: Mutex<(Vec<u32>, u32)>,
}

fn table() -> &'static ReadinessTable {
    static TABLE: OnceLock<ReadinessTable> = OnceLock::new();
    TABLE.get_or_init(|| ReadinessTable {
        pages: (0..PAGES).map(|_| OnceLock::new()).collect(),
        free: Mutex::new((Vec::new(), 0)),
    })
}

/// A slot of the table, held by one registration: its index and the
/// generation its token carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlotKey {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl SlotKey {
    /// The poller token that names this registration.
    pub(crate) fn token(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.index)
    }

    /// The key a token names.
    pub(crate) fn from_token(token: u64) -> SlotKey {
        SlotKey {
            index: token as u32,
            generation: (token >> 32) as u32,
        }
    }
}

/// Takes a free slot. `None` when the table is full.
pub(crate) fn allocate() -> Option<(SlotKey, &'static IoReadiness)> {
    let t = table();
    let index = {
        let mut free = crate::loom::lock(&t.free);
        match free.0.pop() {
            Some(i) => i,
            None => {
                let i = free.1;
                if i as usize >= PAGE * PAGES {
                    return None;
                }
                free.1 += 1;
                i
            }
        }
    };
    let slot = slot(index)?;
    let generation = slot.generation.load(Ordering::Acquire);
    Some((SlotKey { index, generation }, slot))
}

/// The slot `key` names, if it still names it (a late event for a freed
/// slot finds `None`).
pub(crate) fn lookup(key: SlotKey) -> Option<&'static IoReadiness> {
    let page = table().pages.get(key.index as usize / PAGE)?.get()?;
    let slot = &page[key.index as usize % PAGE];
    (slot.generation.load(Ordering::Acquire) == key.generation).then_some(slot)
}

/// The slot at `index`, its page made if need be.
fn slot(index: u32) -> Option<&'static IoReadiness> {
    let page = table()
        .pages
        .get(index as usize / PAGE)?
        .get_or_init(|| (0..PAGE).map(|_| IoReadiness::new()).collect());
    Some(&page[index as usize % PAGE])
}

/// Gives back the slot of `key`, whose fd is no longer registered: later
/// events naming it are ignored.
pub(crate) fn free(key: SlotKey) {
    if let Some(slot) = slot(key.index) {
        slot.generation.fetch_add(1, Ordering::AcqRel);
    }
    crate::loom::lock(&table().free).0.push(key.index);
}
