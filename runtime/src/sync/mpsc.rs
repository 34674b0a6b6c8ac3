//! Multi-producer, single-consumer channels with `std::sync::mpsc`'s shapes,
//! for tasks and plain threads alike.
//!
//! # Design
//!
//! A channel is one `Arc` holding a lock-free queue and two butexes. The
//! queue is crossbeam's: a [`SegQueue`] (unbounded, [`channel`]), an
//! [`ArrayQueue`] (bounded, [`sync_channel`] with a bound of 1 or more
//! whose ring takes at most `RING_MAX_BYTES`), a `SegQueue` with a count
//! of its messages (a larger bound: `Counted`, below), or, for a bound of
//! 0, a one-value rendezvous slot (`Slot`, below). A send
//! or a receive that does not have to wait is the queue's push or pop plus
//! a fence and a load: no lock, no allocation beyond the queue's own
//! blocks, no syscall. Only a side that has recorded itself as waiting is
//! ever woken, through a butex, so waits cost nothing while nobody waits.
//!
//! **The receiver** (there is one: [`Receiver`] is `Send` but not `Sync`)
//! first looks again for a moment (a task yields once, so that a producer
//! ready on its own worker can deliver without a wait and a wake-up; then
//! it, or a thread, spins on the queue's emptiness check), then parks: it stores `PARKED` in the
//! `rx` butex, fences, pops once more, and waits while the value is still
//! `PARKED`. A sender pushes, fences, and loads the flag; only if it reads
//! `PARKED` does it swap it to `IDLE` and wake the receiver (the swap lets
//! one sender of many do the wake). This is a store-buffering handshake:
//! the two `SeqCst` fences order "push, then read the flag" against "set
//! the flag, then pop", so at least one side sees the other: the receiver
//! finds the message, or the sender finds the flag. A wake that comes
//! before the receiver is linked changes the butex's value, which the wait
//! checks under the butex's lock, so the receiver does not sleep. The
//! last sender to go runs the same handshake (its decrement of the sender
//! count is the "push"), so a parked receiver learns of the disconnection.
//!
//! **Senders of a full bounded channel** (or waiting for a rendezvous slot)
//! count themselves in `tx_waiting`, fence, read the `room` butex's epoch
//! (`Acquire`), look for room once more, and wait while the epoch is
//! unchanged. The receiver, after each pop from a bounded queue, fences and
//! loads `tx_waiting`; if it is not zero it bumps the epoch (`Release`) and
//! wakes one sender. Same handshake: either the sender sees the room, or
//! the receiver sees the count and bumps. The epoch is read after the
//! fence, and acquires the bump it may read, so a sender that reads a bump
//! also sees the pop that preceded it.
//!
//! **A large bound** is not a ring: an `ArrayQueue` allocates its whole
//! ring at creation, so a bound of a billion would take gigabytes at once,
//! and one near `usize::MAX` cannot be allocated at all (std's and
//! crossbeam's bounded channels panic or abort there). Past
//! `RING_MAX_BYTES` of ring the queue is `Counted`: a `SegQueue`, which
//! grows and shrinks with what is queued, and a count of the slots taken.
//! A send takes a slot by raising the count while it is below the bound
//! (a CAS loop), then pushes; a receive pops, then lowers the count. So
//! "full" is the count at the bound, and the handshake with a waiting
//! sender is the ring's: the receiver lowers the count before its fence,
//! the sender counts itself waiting before its fence and reads the count
//! after it.
//!
//! **A rendezvous** (bound 0): a sender takes the slot (`Empty` to
//! `Writing`), writes its value, publishes it (`Full`), wakes the receiver
//! as above, and waits on the slot's butex until the receiver has taken it
//! (`Taking`, then `Taken`), then frees the slot and wakes the next sender.
//! A sender whose wait ends early takes its value back with a CAS from
//! `Full`: exactly one of it and the receiver gets the value.
//!
//! The slot's states (`SlotState`, the value of its butex) and their
//! transitions:
//!
//! ```text
//!              (1)               (2)            (7)
//!   Empty ------------> Writing -------> Full ----------> Abandoned
//!   ^ ^ ^                | | ^            | |                 |
//!   | | |      (9)       | | |    (8)     | |       (8)       |
//!   | | +----------------+ | +------------+-|-----------------+
//!   | |                 (3)|                |(4)
//!   | |                    v                v
//!   | |                 Detached --(4)--> Taking ----(5)----> Taken
//!   | |                                    |                    |
//!   | +--------------(5')------------------+                    |
//!   +-------------------------(6)-------------------------------+
//! ```
//!
//! - (1) a sender (`send`, or `try_send` while the receiver is parked)
//!   takes the free slot (CAS);
//! - (2) `send` has written its value: publishes it, wakes the receiver,
//!   and waits on the slot's butex;
//! - (3) `try_send` has written its value: publishes it, wakes the
//!   receiver, and returns without waiting;
//! - (4) the receiver claims the value (CAS; from `Full`, it races (8))
//!   and reads it;
//! - (5) the receiver hands over a `Full` value: wakes its sender;
//! - (5') the receiver took a `Detached` value: frees the slot itself, and
//!   wakes a sender waiting for room, if any;
//! - (6) the sender sees its value taken: frees the slot, and wakes a
//!   sender waiting for room, if any;
//! - (7) the receiver's drop finds a `Full` value: wakes its sender (a
//!   `Detached` one it takes and drops, by (4) and (5'));
//! - (8) a sender whose wait ended early (deadline, interrupt, stop), or
//!   whose receiver went, takes its value back (CAS; if the receiver's (4)
//!   came first, the send has succeeded, and the sender waits for (5));
//! - (9) that sender frees the slot, and wakes a sender waiting for room,
//!   if any; its value goes back in its error.
//!
//! A `Detached` value still there when the channel's last handle goes is
//! dropped with the channel.
//!
//! **Waits that end early.** Every wait here is interruptible: the deadline
//! of an enclosing [`with_deadline`](crate::with_deadline) scope, a
//! [`recv_timeout`](Receiver::recv_timeout), [`interrupt`](crate::interrupt)
//! and [`stop`](crate::stop) end it with an error that says so. Such a wait
//! leaves no trace: the butex gives each wait one outcome, so a wait that
//! ended with an error consumed no wake-up (the waker woke the next waiter,
//! or the epoch it bumped sends a sender about to wait back to look at the
//! queue); messages stay in the queue until received; a value not sent is
//! handed back in the error.
//!
//! **Closing.** When the last sender goes, the receiver drains what is
//! queued and then gets `Disconnected`. When the receiver goes, sends fail
//! with their value back, waiting senders are woken, and the queued values
//! are dropped (those of a send racing the drop go with the channel's last
//! handle).
//!
//! Under `--cfg loom` the crossbeam queues are replaced by a mutex around a
//! `VecDeque` with the same methods. That queue orders no more than
//! acquire/release, so the models check that the fences above, not the
//! queue's own `SeqCst` operations, make the handshakes hold.

use super::select_source::SelectSource;
use crate::error::WaitError;
use crate::loom::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use crate::loom::UnsafeCell;
use crate::meta::activity::WaitKind;
use crate::meta::wait_queue::{WaitPolicy, WaitQueue};
use crate::sched;
use crate::wait::{self, Butex};
use crossbeam_utils::CachePadded;
use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[cfg(not(loom))]
use crossbeam_queue::{ArrayQueue, SegQueue};
#[cfg(loom)]
use model_queue::{ArrayQueue, SegQueue};

/// The receiver's flag in the `rx` butex: not waiting.
const IDLE: u32 = 0;
/// The receiver's flag: parked, or about to park; a sender must wake it.
const PARKED: u32 = 1;

/// How many times a receiver on a plain thread looks at an empty queue
/// (a few loads, no fence) before it parks. A park and its wake-up cost
/// microseconds; a producer on another core often delivers within that
/// time. (A task yields once instead; see `Chan::recv`.)
#[cfg(not(loom))]
const SPINS: u32 = 12;
/// No spinning in the models: it only multiplies their interleavings.
#[cfg(loom)]
const SPINS: u32 = 0;

/// The states of a rendezvous slot: the value of its butex. See the
/// module docs for the transitions.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotState {
    /// No value; a sender may take the slot.
    Empty = 0,
    /// A sender owns the slot and is writing (or taking back) its value.
    Writing = 1,
    /// A value whose sender waits for the receiver to take it.
    Full = 2,
    /// A value from `try_send`, whose sender does not wait.
    Detached = 3,
    /// The receiver is reading the value.
    Taking = 4,
    /// The receiver has the value; its sender frees the slot.
    Taken = 5,
    /// The receiver went while the value was `Full`; its sender takes it
    /// back.
    Abandoned = 6,
}

impl SlotState {
    /// The state as the slot's butex holds it.
    #[inline]
    const fn word(self) -> u32 {
        self as u32
    }

    /// The state stored as `word`; panics on a word no state has.
    #[inline]
    fn from_word(word: u32) -> Self {
        match word {
            0 => SlotState::Empty,
            1 => SlotState::Writing,
            2 => SlotState::Full,
            3 => SlotState::Detached,
            4 => SlotState::Taking,
            5 => SlotState::Taken,
            6 => SlotState::Abandoned,
            _ => unreachable!("no rendezvous slot state is {word}"),
        }
    }
}

/// The state shared by a channel's handles.
struct Chan<T> {
    flavor: Flavor<T>,
    /// The receiver's flag (`IDLE`/`PARKED`) and its wait.
    rx: CachePadded<Butex>,
    /// Senders waiting for room, and the epoch they wait on.
    tx: CachePadded<TxWait>,
    /// Live `Sender`s and `SyncSender`s; 0 means disconnected.
    senders: AtomicUsize,
    /// The receiver has been dropped.
    rx_gone: AtomicBool,
}

struct TxWait {
    /// Senders registered to wait (counted before they look for room the
    /// last time, uncounted after their wait).
    waiting: AtomicUsize,
    /// Its value is an epoch, bumped when room is made while senders wait.
    room: Butex,
}

// Sizes differ by a few cache lines (each queue pads its ends apart), but
// a flavor is made once per channel, inside its `Arc`, and never moved:
// a box would only add a pointer to chase on every send and receive.
#[allow(clippy::large_enum_variant)]
enum Flavor<T> {
    List(SegQueue<T>),
    Array(Bounded<T>),
    Zero(Slot<T>),
}

/// The most bytes a bounded channel's ring may take (the bound times a
/// ring slot, the message and a stamp word): 256 KiB, a bound of 16 384
/// for a `u64`. A larger bound is `Counted` (see the module docs).
const RING_MAX_BYTES: usize = 256 * 1024;

/// The queue of a channel with a bound of 1 or more, in the shape of
/// `ArrayQueue` (a push fails when the bound is reached).
enum Bounded<T> {
    /// A ring allocated whole at creation.
    Ring(ArrayQueue<T>),
    /// A growing queue and a count (see the module docs).
    Counted(Counted<T>),
}

/// A `SegQueue` holding at most `bound` messages: `len` counts the slots
/// taken, raised by a send before its push, lowered by the receive after
/// its pop.
struct Counted<T> {
    queue: SegQueue<T>,
    /// Touched by every send and receive, as the queue's own ends are (on
    /// lines of their own): not padded apart from `bound`, which is only
    /// read.
    len: AtomicUsize,
    bound: usize,
}

impl<T> Bounded<T> {
    /// A ring if its ring takes at most `RING_MAX_BYTES`, else a counted
    /// queue.
    fn new(bound: usize) -> Self {
        let slot = std::mem::size_of::<T>() + std::mem::size_of::<usize>();
        if bound.saturating_mul(slot) <= RING_MAX_BYTES {
            Bounded::Ring(ArrayQueue::new(bound))
        } else {
            Bounded::counted(bound)
        }
    }

    fn counted(bound: usize) -> Self {
        Bounded::Counted(Counted {
            queue: SegQueue::new(),
            len: AtomicUsize::new(0),
            bound,
        })
    }

    /// Queues `value` if the bound allows; else gives it back.
    #[inline]
    fn push(&self, value: T) -> Result<(), T> {
        match self {
            Bounded::Ring(q) => q.push(value),
            Bounded::Counted(c) => {
                // Relaxed: the count decides only whether there is room;
                // the message itself is published by the queue, and the
                // waiting senders' handshake by fences (`notify_tx`,
                // `wait_for_room`).
                let taken = c
                    .len
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                        (n < c.bound).then_some(n + 1)
                    });
                match taken {
                    Ok(_) => {
                        c.queue.push(value);
                        Ok(())
                    }
                    Err(_) => Err(value),
                }
            }
        }
    }

    /// The next message, if one is queued.
    #[inline]
    fn pop(&self) -> Option<T> {
        match self {
            Bounded::Ring(q) => q.pop(),
            Bounded::Counted(c) => {
                let v = c.queue.pop()?;
                c.len.fetch_sub(1, Ordering::Relaxed);
                Some(v)
            }
        }
    }

    #[inline]
    fn is_empty(&self) -> bool {
        match self {
            Bounded::Ring(q) => q.is_empty(),
            Bounded::Counted(c) => c.queue.is_empty(),
        }
    }

    /// Whether a push would fail now.
    #[inline]
    fn is_full(&self) -> bool {
        match self {
            Bounded::Ring(q) => q.is_full(),
            Bounded::Counted(c) => c.len.load(Ordering::Relaxed) >= c.bound,
        }
    }
}

/// A rendezvous channel's one value; see the module docs.
struct Slot<T> {
    /// A [`SlotState`]; the sender of a `Full` value waits on it.
    state: Butex,
    value: UnsafeCell<MaybeUninit<T>>,
}

/// Why a wait on a channel ended without a wake-up.
fn ended(e: WaitError) -> SendErrorKind {
    match e {
        WaitError::TimedOut => SendErrorKind::Timeout,
        WaitError::Interrupted => SendErrorKind::Interrupted,
        WaitError::Stopped => SendErrorKind::Stopped,
        // `WouldBlock` is handled by every caller; a deadline is the
        // only other way a wait ends.
        WaitError::DeadlineExceeded | WaitError::WouldBlock => SendErrorKind::DeadlineExceeded,
    }
}

impl<T> Chan<T> {
    fn new(flavor: Flavor<T>) -> Arc<Self> {
        Arc::new(Chan {
            flavor,
            rx: CachePadded::new(Butex::new(IDLE)),
            tx: CachePadded::new(TxWait {
                waiting: AtomicUsize::new(0),
                room: Butex::new(0),
            }),
            senders: AtomicUsize::new(1),
            rx_gone: AtomicBool::new(false),
        })
    }

    /// After a message was published (or the last sender left): wakes the
    /// receiver if it has said it parks. See the module docs.
    #[inline]
    fn notify_rx(&self) {
        fence(Ordering::SeqCst);
        let flag = self.rx.value();
        if flag.load(Ordering::Relaxed) == PARKED && flag.swap(IDLE, Ordering::AcqRel) == PARKED {
            self.rx.wake_one();
        }
    }

    /// After room was made in a bounded channel: wakes one waiting sender,
    /// if any says it waits. See the module docs.
    #[inline]
    fn notify_tx(&self) {
        fence(Ordering::SeqCst);
        if self.tx.waiting.load(Ordering::Relaxed) != 0 {
            self.tx.room.value().fetch_add(1, Ordering::Release);
            self.tx.room.wake_one();
        }
    }

    /// Sends every waiting sender back to look (the receiver is gone).
    fn wake_all_tx(&self) {
        self.tx.room.value().fetch_add(1, Ordering::Release);
        self.tx.room.wake_all();
    }

    /// Waits until `room()` may hold, the receiver has gone, or the wait
    /// is ended (the error). See the module docs.
    fn wait_for_room(
        &self,
        deadline: Option<Instant>,
        room: impl Fn() -> bool,
    ) -> Result<(), SendErrorKind> {
        self.tx.waiting.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let epoch = self.tx.room.value().load(Ordering::Acquire);
        let r = if room() || self.rx_gone.load(Ordering::Relaxed) {
            Ok(())
        } else {
            match wait::wait(
                self.tx.room.queue(),
                epoch,
                deadline,
                WaitPolicy::Interruptible,
                WaitKind::Channel,
            ) {
                Ok(()) | Err(WaitError::WouldBlock) => Ok(()),
                Err(e) => Err(ended(e)),
            }
        };
        self.tx.waiting.fetch_sub(1, Ordering::Relaxed);
        r
    }

    /// Whether a receive would complete now: a message is there, or every
    /// sender has gone.
    fn ready_to_recv(&self) -> bool {
        let queued = match &self.flavor {
            Flavor::List(q) => !q.is_empty(),
            Flavor::Array(q) => !q.is_empty(),
            Flavor::Zero(s) => matches!(
                s.load_state(Ordering::Acquire),
                SlotState::Full | SlotState::Detached
            ),
        };
        queued || self.senders.load(Ordering::Acquire) == 0
    }

    /// The receiver's pop: the next message, if one is there.
    #[inline]
    fn pop(&self) -> Option<T> {
        match &self.flavor {
            // `is_empty` first: a pop of an empty queue fences, and a
            // receiver often looks at an empty queue. (Its loads come after
            // our park handshake's fence, which is what the handshake needs.)
            Flavor::List(q) if q.is_empty() => None,
            Flavor::List(q) => q.pop(),
            Flavor::Array(q) if q.is_empty() => None,
            Flavor::Array(q) => {
                let v = q.pop()?;
                self.notify_tx();
                Some(v)
            }
            Flavor::Zero(s) => s.take(self),
        }
    }

    #[inline]
    fn try_recv(&self) -> Result<T, TryRecvError> {
        if let Some(v) = self.pop() {
            return Ok(v);
        }
        // Every send came before its sender's decrement (`AcqRel`, a
        // release sequence): seeing 0, the last pop below sees them all.
        if self.senders.load(Ordering::Acquire) == 0 {
            return self.pop().ok_or(TryRecvError::Disconnected);
        }
        Err(TryRecvError::Empty)
    }

    // `SPINS` is 0 under loom.
    #[cfg_attr(loom, allow(clippy::reversed_empty_ranges))]
    fn recv(&self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        match self.try_recv() {
            Err(TryRecvError::Empty) => {}
            r => return r.map_err(RecvTimeoutError::from),
        }
        // Before parking: a task yields once, which lets a producer
        // ready on its worker (a ping-pong partner, say) deliver without
        // a wait and a wake-up, and costs little when none is (spinning
        // would only delay such a producer). A plain thread spins for a
        // moment. A rendezvous receiver parks at once: its sender waits
        // for it, and `try_send` hands over only to a parked receiver.
        if !matches!(self.flavor, Flavor::Zero(_)) {
            if sched::suspendable_task().is_some() {
                crate::task::yield_now();
                if let Some(v) = self.pop() {
                    return Ok(v);
                }
            } else {
                // Looks spaced out, each gap twice the last (up to 64
                // pauses): a receiver that polls the queue's tail without
                // a break would pull its line away from the producer at
                // every push. (Not a task: its spin would hold its worker
                // from every other task there, some 10 µs a receive.)
                for step in 0..SPINS {
                    for _ in 0..1u32 << step.min(6) {
                        std::hint::spin_loop();
                    }
                    if let Some(v) = self.pop() {
                        return Ok(v);
                    }
                }
            }
        }
        let flag = self.rx.value();
        loop {
            flag.store(PARKED, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            match self.try_recv() {
                Err(TryRecvError::Empty) => {}
                r => {
                    flag.store(IDLE, Ordering::Relaxed);
                    return r.map_err(RecvTimeoutError::from);
                }
            }
            match wait::wait(
                self.rx.queue(),
                PARKED,
                deadline,
                WaitPolicy::Interruptible,
                WaitKind::Channel,
            ) {
                Ok(()) | Err(WaitError::WouldBlock) => {}
                Err(e) => {
                    // Messages that came meanwhile stay queued for the
                    // next receive; a sender that saw the flag wakes
                    // nobody, or our next wait spuriously.
                    flag.store(IDLE, Ordering::Relaxed);
                    return Err(RecvTimeoutError::from(ended(e)));
                }
            }
            match self.try_recv() {
                Err(TryRecvError::Empty) => {}
                r => {
                    flag.store(IDLE, Ordering::Relaxed);
                    return r.map_err(RecvTimeoutError::from);
                }
            }
        }
    }

    fn send(&self, value: T, deadline: Option<Instant>) -> Result<(), SendError<T>> {
        if self.rx_gone.load(Ordering::Relaxed) {
            return Err(SendError::new(value, SendErrorKind::Disconnected));
        }
        match &self.flavor {
            Flavor::List(q) => {
                q.push(value);
                self.notify_rx();
                // It never waits: the cooperative budget (`sched/coop.rs`).
                sched::coop::spend();
                Ok(())
            }
            Flavor::Array(q) => self.send_array(q, value, deadline),
            Flavor::Zero(s) => s.send(self, value, deadline),
        }
    }

    fn send_array(
        &self,
        q: &Bounded<T>,
        mut value: T,
        deadline: Option<Instant>,
    ) -> Result<(), SendError<T>> {
        loop {
            match q.push(value) {
                Ok(()) => {
                    self.notify_rx();
                    return Ok(());
                }
                Err(v) => value = v,
            }
            if let Err(kind) = self.wait_for_room(deadline, || !q.is_full()) {
                return Err(SendError::new(value, kind));
            }
            if self.rx_gone.load(Ordering::Relaxed) {
                return Err(SendError::new(value, SendErrorKind::Disconnected));
            }
        }
    }

    fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
        if self.rx_gone.load(Ordering::Relaxed) {
            return Err(TrySendError::Disconnected(value));
        }
        match &self.flavor {
            Flavor::List(q) => {
                q.push(value);
                self.notify_rx();
                Ok(())
            }
            Flavor::Array(q) => match q.push(value) {
                Ok(()) => {
                    self.notify_rx();
                    Ok(())
                }
                Err(v) => Err(TrySendError::Full(v)),
            },
            Flavor::Zero(s) => s.try_send(self, value),
        }
    }

    /// The receiver's drop: refuses further sends, sends waiting senders
    /// back with their values, and drops what is queued.
    fn close_rx(&self) {
        self.rx_gone.store(true, Ordering::Relaxed);
        // Pairs with the fence of a rendezvous sender's `notify_rx`: it
        // sees `rx_gone`, or we see its `Full` (`Slot::abandon`).
        fence(Ordering::SeqCst);
        if let Flavor::Zero(s) = &self.flavor {
            s.abandon(self);
        }
        self.wake_all_tx();
        match &self.flavor {
            Flavor::List(q) => while q.pop().is_some() {},
            Flavor::Array(q) => while q.pop().is_some() {},
            Flavor::Zero(_) => {}
        }
    }
}

impl<T> Drop for Chan<T> {
    fn drop(&mut self) {
        if let Flavor::Zero(s) = &self.flavor {
            // A `try_send`'s value nobody took (a waiting sender's value
            // goes back with its send, before it lets go of the channel).
            if s.load_state(Ordering::Acquire) == SlotState::Detached {
                // SAFETY: `Detached` means the slot holds an initialized
                // value that no sender will touch again; we are the last
                // handle.
                s.value.with_mut(|p| unsafe { (*p).assume_init_drop() });
            }
        }
    }
}

impl<T> Slot<T> {
    fn new() -> Self {
        Slot {
            state: Butex::new(SlotState::Empty.word()),
            value: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    fn load_state(&self, order: Ordering) -> SlotState {
        SlotState::from_word(self.state.value().load(order))
    }

    fn store_state(&self, new: SlotState, order: Ordering) {
        self.state.value().store(new.word(), order)
    }

    /// Moves the slot from `current` to `new` (a CAS with `success`
    /// ordering, relaxed on failure); whether it did.
    fn move_state(&self, current: SlotState, new: SlotState, success: Ordering) -> bool {
        self.state
            .value()
            .compare_exchange(current.word(), new.word(), success, Ordering::Relaxed)
            .is_ok()
    }

    /// The receiver's take: the value, if one is published and its sender
    /// has not taken it back.
    fn take(&self, chan: &Chan<T>) -> Option<T> {
        let s = self.load_state(Ordering::Relaxed);
        if s != SlotState::Full && s != SlotState::Detached {
            return None;
        }
        // Fails only if the sender took its value back (`Full` to `Writing`).
        if !self.move_state(s, SlotState::Taking, Ordering::Acquire) {
            return None;
        }
        // SAFETY: `Full`/`Detached` said the value is written (our CAS
        // acquired the sender's `Release` store), and `Taking` keeps the
        // sender from taking it back: the value is ours to move out.
        let v = self.value.with(|p| unsafe { (*p).assume_init_read() });
        if s == SlotState::Full {
            self.store_state(SlotState::Taken, Ordering::Release);
            self.state.wake_one();
        } else {
            self.store_state(SlotState::Empty, Ordering::Release);
            chan.notify_tx();
        }
        Some(v)
    }

    fn send(
        &self,
        chan: &Chan<T>,
        value: T,
        deadline: Option<Instant>,
    ) -> Result<(), SendError<T>> {
        // Take the slot.
        loop {
            if chan.rx_gone.load(Ordering::Relaxed) {
                return Err(SendError::new(value, SendErrorKind::Disconnected));
            }
            if self.move_state(SlotState::Empty, SlotState::Writing, Ordering::Acquire) {
                break;
            }
            if let Err(kind) = chan.wait_for_room(deadline, || {
                self.load_state(Ordering::Relaxed) == SlotState::Empty
            }) {
                return Err(SendError::new(value, kind));
            }
        }
        // SAFETY: `Writing` is ours: nobody else reads or writes the value.
        self.value.with_mut(|p| unsafe { (*p).write(value) });
        self.store_state(SlotState::Full, Ordering::Release);
        chan.notify_rx();
        // Wait for the receiver to take it.
        loop {
            let kind = match self.load_state(Ordering::Acquire) {
                SlotState::Taken => {
                    self.store_state(SlotState::Empty, Ordering::Release);
                    chan.notify_tx();
                    return Ok(());
                }
                SlotState::Taking => {
                    // The receiver is between two stores, not waiting.
                    std::hint::spin_loop();
                    crate::loom::thread::yield_now();
                    continue;
                }
                SlotState::Full if !chan.rx_gone.load(Ordering::Relaxed) => {
                    let full = SlotState::Full.word();
                    match wait::wait(
                        self.state.queue(),
                        full,
                        deadline,
                        WaitPolicy::Interruptible,
                        WaitKind::Channel,
                    ) {
                        Ok(()) | Err(WaitError::WouldBlock) => continue,
                        Err(e) => ended(e),
                    }
                }
                // `Abandoned`, or `Full` with the receiver gone.
                _ => SendErrorKind::Disconnected,
            };
            // Take the value back, unless the receiver has begun to take it
            // (then the send has succeeded: loop to see it through).
            let s = self.load_state(Ordering::Relaxed);
            if (s == SlotState::Full || s == SlotState::Abandoned)
                && self.move_state(s, SlotState::Writing, Ordering::Acquire)
            {
                // SAFETY: our CAS from `Full`/`Abandoned` ended the
                // receiver's claim to the value we wrote.
                let v = self.value.with(|p| unsafe { (*p).assume_init_read() });
                self.store_state(SlotState::Empty, Ordering::Release);
                chan.notify_tx();
                return Err(SendError::new(v, kind));
            }
        }
    }

    /// `try_send` at bound 0: hands the value over if the receiver is
    /// parked in a receive and the slot is free, without waiting for it to
    /// be taken.
    fn try_send(&self, chan: &Chan<T>, value: T) -> Result<(), TrySendError<T>> {
        if chan.rx.value().load(Ordering::Relaxed) != PARKED
            || !self.move_state(SlotState::Empty, SlotState::Writing, Ordering::Acquire)
        {
            return Err(TrySendError::Full(value));
        }
        // SAFETY: `Writing` is ours.
        self.value.with_mut(|p| unsafe { (*p).write(value) });
        self.store_state(SlotState::Detached, Ordering::Release);
        chan.notify_rx();
        Ok(())
    }

    /// The receiver's drop: a waiting sender's value goes back to it
    /// (`Abandoned`), a `try_send`'s value is dropped.
    fn abandon(&self, chan: &Chan<T>) {
        loop {
            match self.load_state(Ordering::Acquire) {
                SlotState::Full => {
                    if self.move_state(SlotState::Full, SlotState::Abandoned, Ordering::Relaxed) {
                        self.state.wake_all();
                        return;
                    }
                }
                SlotState::Detached => {
                    drop(self.take(chan));
                    return;
                }
                _ => return,
            }
        }
    }
}

/// Creates an unbounded channel: sends never wait.
///
/// ```
/// use spindle::sync::mpsc;
/// use std::time::Duration;
///
/// let rt = spindle::Runtime::builder().workers(2).build().unwrap();
/// rt.block_on(|| {
///     let (tx, rx) = mpsc::channel();
///     for worker in 0..3u32 {
///         let tx = tx.clone();
///         spindle::spawn(move || tx.send(worker * 10).unwrap());
///     }
///     drop(tx); // the channel closes once every sender is gone
///     let mut got: Vec<u32> = rx.iter().collect();
///     got.sort();
///     assert_eq!(got, [0, 10, 20]);
///
///     // A receive can give up: on its own timeout, or with a deadline scope.
///     let (_tx, rx) = mpsc::channel::<u32>();
///     let r = rx.recv_timeout(Duration::from_millis(5));
///     assert_eq!(r, Err(mpsc::RecvTimeoutError::Timeout));
/// });
/// ```
pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let chan = Chan::new(Flavor::List(SegQueue::new()));
    (
        Sender { chan: chan.clone() },
        Receiver {
            chan,
            _not_sync: PhantomData,
        },
    )
}

/// Creates a bounded channel holding up to `bound` messages; a send to a
/// full channel waits for room. With a `bound` of 0 it is a rendezvous
/// channel: a send returns once the receiver has taken the value.
///
/// Any bound is taken, up to `usize::MAX`: a small one is a ring allocated
/// at once (256 KiB at most), a larger one a queue that grows and shrinks
/// with the messages queued, so that a bound costs nothing until it is
/// used (std's `sync_channel` allocates its whole bound at creation).
/// `docs/errors.md`, "Bad input".
///
/// ```
/// use spindle::sync::mpsc::{self, TrySendError};
///
/// let rt = spindle::Runtime::builder().workers(1).build().unwrap();
/// rt.block_on(|| {
///     let (tx, rx) = mpsc::sync_channel(2);
///     tx.send(1).unwrap();
///     tx.send(2).unwrap();
///     // Full: `send` would wait for room; `try_send` hands the value back.
///     assert!(matches!(tx.try_send(3), Err(TrySendError::Full(3))));
///     assert_eq!(rx.recv(), Ok(1));
///     tx.try_send(3).unwrap();
///     assert_eq!(rx.try_iter().collect::<Vec<_>>(), [2, 3]);
/// });
/// ```
pub fn sync_channel<T>(bound: usize) -> (SyncSender<T>, Receiver<T>) {
    let flavor = if bound == 0 {
        Flavor::Zero(Slot::new())
    } else {
        Flavor::Array(Bounded::new(bound))
    };
    sync_channel_of(flavor)
}

/// A bounded channel over a `Counted` queue whatever its bound, for the
/// loom models (which otherwise see only rings).
#[cfg(all(test, loom))]
fn sync_channel_counted<T>(bound: usize) -> (SyncSender<T>, Receiver<T>) {
    sync_channel_of(Flavor::Array(Bounded::counted(bound)))
}

fn sync_channel_of<T>(flavor: Flavor<T>) -> (SyncSender<T>, Receiver<T>) {
    let chan = Chan::new(flavor);
    (
        SyncSender { chan: chan.clone() },
        Receiver {
            chan,
            _not_sync: PhantomData,
        },
    )
}

/// The sending half of an unbounded [`channel`]; clone it for more
/// producers.
pub struct Sender<T> {
    chan: Arc<Chan<T>>,
}

/// The sending half of a bounded [`sync_channel`]; clone it for more
/// producers.
pub struct SyncSender<T> {
    chan: Arc<Chan<T>>,
}

/// The receiving half of a channel. One receiver: it is `Send` but not
/// `Sync`.
pub struct Receiver<T> {
    chan: Arc<Chan<T>>,
    /// `Cell` is `Send` and not `Sync`: only one thread receives at a time.
    _not_sync: PhantomData<Cell<()>>,
}

// SAFETY: the channel moves `T`s between threads, and that is all it does
// with them: sending a handle sends the right to move `T`s.
unsafe impl<T: Send> Send for Sender<T> {}
// SAFETY: `send` takes `&self` and is safe to call from many threads.
unsafe impl<T: Send> Sync for Sender<T> {}
// SAFETY: as for `Sender`.
unsafe impl<T: Send> Send for SyncSender<T> {}
// SAFETY: as for `Sender`.
unsafe impl<T: Send> Sync for SyncSender<T> {}
// SAFETY: as for `Sender`; `_not_sync` keeps it from being shared.
unsafe impl<T: Send> Send for Receiver<T> {}

fn drop_sender<T>(chan: &Chan<T>) {
    // `AcqRel`: see `Chan::try_recv`.
    if chan.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
        chan.notify_rx();
    }
}

fn clone_sender<T>(chan: &Arc<Chan<T>>) -> Arc<Chan<T>> {
    // Relaxed, as `Arc::clone`: the clone comes from a live sender.
    chan.senders.fetch_add(1, Ordering::Relaxed);
    chan.clone()
}

impl<T> Sender<T> {
    /// Queues `value` for the receiver; never waits (though a task yields to
    /// its worker's other tasks now and then, once every 128 operations
    /// that complete without waiting, sends and socket calls alike, so that
    /// a sending loop does not hold its worker). Fails, handing the
    /// value back, only if the receiver has been dropped (the error's kind
    /// is then always [`SendErrorKind::Disconnected`]). As with std, an
    /// `Ok` does not mean the value will be received: the receiver may go
    /// first.
    pub fn send(&self, value: T) -> Result<(), SendError<T>> {
        self.chan.send(value, None)
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        Sender {
            chan: clone_sender(&self.chan),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        drop_sender(&self.chan);
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender").finish_non_exhaustive()
    }
}

impl<T> SyncSender<T> {
    /// Sends `value`, waiting while the channel is full (at bound 0: until
    /// the receiver has taken it). On error the value is handed back, with
    /// why: the receiver was dropped (`Disconnected`), the deadline of an
    /// enclosing [`with_deadline`](crate::with_deadline) scope passed
    /// (`DeadlineExceeded`), or the task was [`interrupt`](crate::interrupt)ed
    /// or [`stop`](crate::stop)ped (`Interrupted`, `Stopped`). A value handed
    /// back was not sent: the receiver never sees it.
    pub fn send(&self, value: T) -> Result<(), SendError<T>> {
        self.chan.send(value, None)
    }

    /// Like [`send`](Self::send), giving up at `deadline` with
    /// [`SendErrorKind::Timeout`] (the value handed back).
    pub fn send_deadline(&self, value: T, deadline: Instant) -> Result<(), SendError<T>> {
        self.chan.send(value, Some(deadline))
    }

    /// Like [`send`](Self::send), giving up after `timeout`.
    pub fn send_timeout(&self, value: T, timeout: Duration) -> Result<(), SendError<T>> {
        self.chan.send(value, Instant::now().checked_add(timeout))
    }

    /// Sends `value` if that needs no waiting: there is room (at bound 0:
    /// the receiver is parked in a receive and the slot is free, and then
    /// the value is handed over without waiting for the receiver to take
    /// it; should the receiver's wait end first, the value waits in the
    /// slot for its next receive).
    pub fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
        self.chan.try_send(value)
    }
}

impl<T> Clone for SyncSender<T> {
    fn clone(&self) -> Self {
        SyncSender {
            chan: clone_sender(&self.chan),
        }
    }
}

impl<T> Drop for SyncSender<T> {
    fn drop(&mut self) {
        drop_sender(&self.chan);
    }
}

impl<T> fmt::Debug for SyncSender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncSender").finish_non_exhaustive()
    }
}

impl<T> Receiver<T> {
    /// Receives the next message, waiting for one. Once every sender has
    /// gone and the queue is drained, fails with `Disconnected`. The wait
    /// also ends, with the matching error and no message lost, at the
    /// deadline of an enclosing [`with_deadline`](crate::with_deadline)
    /// scope, or when the task is [`interrupt`](crate::interrupt)ed or
    /// [`stop`](crate::stop)ped.
    pub fn recv(&self) -> Result<T, RecvError> {
        self.chan.recv(None).map_err(RecvError::from_timeout)
    }

    /// Receives a message if one is queued, without waiting.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        self.chan.try_recv()
    }

    /// Like [`recv`](Self::recv), giving up after `timeout` with
    /// [`RecvTimeoutError::Timeout`].
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        self.chan.recv(Instant::now().checked_add(timeout))
    }

    /// Like [`recv`](Self::recv), giving up at `deadline` with
    /// [`RecvTimeoutError::Timeout`].
    pub fn recv_deadline(&self, deadline: Instant) -> Result<T, RecvTimeoutError> {
        self.chan.recv(Some(deadline))
    }

    /// An iterator that receives until [`recv`](Self::recv) fails (the
    /// senders are gone, or the wait was ended).
    pub fn iter(&self) -> Iter<'_, T> {
        Iter { rx: self }
    }

    /// An iterator over the messages queued now, without waiting.
    pub fn try_iter(&self) -> TryIter<'_, T> {
        TryIter { rx: self }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        self.chan.close_rx();
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receiver").finish_non_exhaustive()
    }
}

/// Receives until [`Receiver::recv`] fails; see [`Receiver::iter`].
#[derive(Debug)]
pub struct Iter<'a, T> {
    rx: &'a Receiver<T>,
}

/// Receives what is queued; see [`Receiver::try_iter`].
#[derive(Debug)]
pub struct TryIter<'a, T> {
    rx: &'a Receiver<T>,
}

/// Receives until [`Receiver::recv`] fails, owning the receiver.
#[derive(Debug)]
pub struct IntoIter<T> {
    rx: Receiver<T>,
}

impl<T> Iterator for Iter<'_, T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.rx.recv().ok()
    }
}

impl<T> Iterator for TryIter<'_, T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.rx.try_recv().ok()
    }
}

impl<T> Iterator for IntoIter<T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.rx.recv().ok()
    }
}

impl<'a, T> IntoIterator for &'a Receiver<T> {
    type Item = T;
    type IntoIter = Iter<'a, T>;
    fn into_iter(self) -> Iter<'a, T> {
        self.iter()
    }
}

impl<T> IntoIterator for Receiver<T> {
    type Item = T;
    type IntoIter = IntoIter<T>;
    fn into_iter(self) -> IntoIter<T> {
        IntoIter { rx: self }
    }
}

// ---- Errors ----

/// Why a blocking receive returned no message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecvError {
    /// Every sender has gone and nothing is left to receive.
    Disconnected,
    /// The deadline of an enclosing [`with_deadline`](crate::with_deadline)
    /// scope passed.
    DeadlineExceeded,
    /// [`interrupt`](crate::interrupt) ended the wait.
    Interrupted,
    /// The task has been [`stop`](crate::stop)ped.
    Stopped,
}

/// Why [`Receiver::recv_timeout`] (or `recv_deadline`) returned no message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecvTimeoutError {
    /// The receive's own timeout passed.
    Timeout,
    /// Every sender has gone and nothing is left to receive.
    Disconnected,
    /// The deadline of an enclosing [`with_deadline`](crate::with_deadline)
    /// scope passed (before the receive's own).
    DeadlineExceeded,
    /// [`interrupt`](crate::interrupt) ended the wait.
    Interrupted,
    /// The task has been [`stop`](crate::stop)ped.
    Stopped,
}

/// Why [`Receiver::try_recv`] returned no message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TryRecvError {
    /// Nothing is queued now.
    Empty,
    /// Every sender has gone and nothing is left to receive.
    Disconnected,
}

/// Why a send failed; the error hands the value back
/// ([`into_inner`](Self::into_inner)), which was not sent.
#[derive(Clone, PartialEq, Eq)]
pub struct SendError<T> {
    value: T,
    kind: SendErrorKind,
}

/// What ended a send; see [`SendError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendErrorKind {
    /// The receiver has been dropped.
    Disconnected,
    /// The send's own timeout passed (`send_timeout`, `send_deadline`).
    Timeout,
    /// The deadline of an enclosing [`with_deadline`](crate::with_deadline)
    /// scope passed.
    DeadlineExceeded,
    /// [`interrupt`](crate::interrupt) ended the wait.
    Interrupted,
    /// The task has been [`stop`](crate::stop)ped.
    Stopped,
}

/// Why [`SyncSender::try_send`] failed; the value is handed back.
#[derive(Clone, PartialEq, Eq)]
pub enum TrySendError<T> {
    /// The channel is full (at bound 0: no receiver is waiting).
    Full(T),
    /// The receiver has been dropped.
    Disconnected(T),
}

/// A receive in a `Select`: announced as `recv` parks (the flag, the
/// fence, a last look), so that a sender that pushes after the look sees
/// the flag and wakes the select's registration. See `select.rs`.
impl<T> SelectSource for Receiver<T> {
    fn is_ready(&self) -> bool {
        self.chan.ready_to_recv()
    }

    fn announce(&self) -> Option<(&WaitQueue, u32)> {
        let flag = self.chan.rx.value();
        flag.store(PARKED, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if self.chan.ready_to_recv() {
            flag.store(IDLE, Ordering::Relaxed);
            return None;
        }
        Some((self.chan.rx.queue(), PARKED))
    }

    fn withdraw(&self) {
        self.chan.rx.value().store(IDLE, Ordering::Relaxed);
    }
}

impl RecvError {
    /// What a wait that ended early means for a receive (the `select!`
    /// macro's first arm gets it).
    #[doc(hidden)]
    pub fn from_wait(e: WaitError) -> RecvError {
        RecvError::from_timeout(RecvTimeoutError::from(ended(e)))
    }

    /// Whether every sender has gone.
    pub fn is_disconnected(&self) -> bool {
        *self == RecvError::Disconnected
    }

    /// Whether an enclosing scope's deadline ended the wait.
    pub fn is_deadline_exceeded(&self) -> bool {
        *self == RecvError::DeadlineExceeded
    }

    /// Whether [`interrupt`](crate::interrupt) ended the wait (not a stop:
    /// see [`is_stopped`](Self::is_stopped)), as
    /// [`WaitError::is_interrupted`].
    pub fn is_interrupted(&self) -> bool {
        *self == RecvError::Interrupted
    }

    /// Whether the task has been [`stop`](crate::stop)ped, as
    /// [`WaitError::is_stopped`].
    pub fn is_stopped(&self) -> bool {
        *self == RecvError::Stopped
    }

    /// A receive without a timeout of its own cannot time out; its wait's
    /// deadline is the enclosing scope's.
    pub(crate) fn from_timeout(e: RecvTimeoutError) -> Self {
        match e {
            RecvTimeoutError::Disconnected => RecvError::Disconnected,
            RecvTimeoutError::Interrupted => RecvError::Interrupted,
            RecvTimeoutError::Stopped => RecvError::Stopped,
            RecvTimeoutError::DeadlineExceeded | RecvTimeoutError::Timeout => {
                RecvError::DeadlineExceeded
            }
        }
    }
}

impl RecvTimeoutError {
    /// Whether the receive's own timeout passed.
    pub fn is_timeout(&self) -> bool {
        *self == RecvTimeoutError::Timeout
    }

    /// Whether every sender has gone.
    pub fn is_disconnected(&self) -> bool {
        *self == RecvTimeoutError::Disconnected
    }

    /// Whether an enclosing scope's deadline ended the wait.
    pub fn is_deadline_exceeded(&self) -> bool {
        *self == RecvTimeoutError::DeadlineExceeded
    }

    /// Whether [`interrupt`](crate::interrupt) ended the wait (not a stop:
    /// see [`is_stopped`](Self::is_stopped)), as
    /// [`WaitError::is_interrupted`].
    pub fn is_interrupted(&self) -> bool {
        *self == RecvTimeoutError::Interrupted
    }

    /// Whether the task has been [`stop`](crate::stop)ped, as
    /// [`WaitError::is_stopped`].
    pub fn is_stopped(&self) -> bool {
        *self == RecvTimeoutError::Stopped
    }
}

impl TryRecvError {
    /// Whether nothing was queued.
    pub fn is_empty(&self) -> bool {
        *self == TryRecvError::Empty
    }

    /// Whether every sender has gone.
    pub fn is_disconnected(&self) -> bool {
        *self == TryRecvError::Disconnected
    }
}

impl From<RecvError> for RecvTimeoutError {
    fn from(e: RecvError) -> Self {
        match e {
            RecvError::Disconnected => RecvTimeoutError::Disconnected,
            RecvError::DeadlineExceeded => RecvTimeoutError::DeadlineExceeded,
            RecvError::Interrupted => RecvTimeoutError::Interrupted,
            RecvError::Stopped => RecvTimeoutError::Stopped,
        }
    }
}

impl From<TryRecvError> for RecvTimeoutError {
    /// `Empty` becomes `Timeout`: a wait that ended with nothing.
    fn from(e: TryRecvError) -> Self {
        match e {
            TryRecvError::Empty => RecvTimeoutError::Timeout,
            TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
        }
    }
}

impl From<SendErrorKind> for RecvTimeoutError {
    fn from(k: SendErrorKind) -> Self {
        match k {
            SendErrorKind::Disconnected => RecvTimeoutError::Disconnected,
            SendErrorKind::Timeout => RecvTimeoutError::Timeout,
            SendErrorKind::DeadlineExceeded => RecvTimeoutError::DeadlineExceeded,
            SendErrorKind::Interrupted => RecvTimeoutError::Interrupted,
            SendErrorKind::Stopped => RecvTimeoutError::Stopped,
        }
    }
}

impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RecvError::Disconnected => "receiving on a closed channel: every sender has gone",
            RecvError::DeadlineExceeded => "receive cut short: deadline exceeded",
            RecvError::Interrupted => "receive interrupted",
            RecvError::Stopped => "receive refused: the task is stopped",
        })
    }
}

impl fmt::Display for RecvTimeoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RecvTimeoutError::Timeout => "timed out waiting on a channel",
            RecvTimeoutError::Disconnected => {
                "receiving on a closed channel: every sender has gone"
            }
            RecvTimeoutError::DeadlineExceeded => "receive cut short: deadline exceeded",
            RecvTimeoutError::Interrupted => "receive interrupted",
            RecvTimeoutError::Stopped => "receive refused: the task is stopped",
        })
    }
}

impl fmt::Display for TryRecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TryRecvError::Empty => "receiving on an empty channel",
            TryRecvError::Disconnected => "receiving on a closed channel: every sender has gone",
        })
    }
}

impl std::error::Error for RecvError {}
impl std::error::Error for RecvTimeoutError {}
impl std::error::Error for TryRecvError {}

/// A receive's error as an `io::Error`, for code that `?`s receives and
/// socket calls into one `io::Result`. A wait's end is what the I/O layer
/// reports for it (`From<WaitError>`: `TimedOut`, `Interrupted`, or
/// `Other` for a stop, never `Interrupted`, which std's retry loops would
/// swallow), with the [`WaitError`] as the inner error, so that
/// [`io::wait_error`](crate::io::wait_error) tells it apart.
/// `Disconnected` is `UnexpectedEof`, the receive's error inside: the
/// stream of messages ended where one was awaited, as a `read_exact`
/// that meets the end of a file. (Not `BrokenPipe`, which is a write's
/// error: the other end went before it could take what was sent.)
impl From<RecvError> for std::io::Error {
    fn from(e: RecvError) -> std::io::Error {
        match e {
            RecvError::Disconnected => std::io::Error::new(std::io::ErrorKind::UnexpectedEof, e),
            RecvError::DeadlineExceeded => WaitError::DeadlineExceeded.into(),
            RecvError::Interrupted => WaitError::Interrupted.into(),
            RecvError::Stopped => WaitError::Stopped.into(),
        }
    }
}

/// As `From<RecvError>`; the receive's own timeout is `TimedOut` with
/// `WaitError::TimedOut` inside, as a socket's own timeout.
impl From<RecvTimeoutError> for std::io::Error {
    fn from(e: RecvTimeoutError) -> std::io::Error {
        match e {
            RecvTimeoutError::Timeout => WaitError::TimedOut.into(),
            RecvTimeoutError::Disconnected => {
                std::io::Error::new(std::io::ErrorKind::UnexpectedEof, e)
            }
            RecvTimeoutError::DeadlineExceeded => WaitError::DeadlineExceeded.into(),
            RecvTimeoutError::Interrupted => WaitError::Interrupted.into(),
            RecvTimeoutError::Stopped => WaitError::Stopped.into(),
        }
    }
}

impl<T> SendError<T> {
    fn new(value: T, kind: SendErrorKind) -> Self {
        SendError { value, kind }
    }

    /// The value that was not sent.
    pub fn into_inner(self) -> T {
        self.value
    }

    /// What ended the send.
    pub fn kind(&self) -> SendErrorKind {
        self.kind
    }

    /// Whether the receiver has been dropped.
    pub fn is_disconnected(&self) -> bool {
        self.kind == SendErrorKind::Disconnected
    }

    /// Whether the send's own timeout passed.
    pub fn is_timeout(&self) -> bool {
        self.kind == SendErrorKind::Timeout
    }

    /// Whether an enclosing scope's deadline ended the wait.
    pub fn is_deadline_exceeded(&self) -> bool {
        self.kind == SendErrorKind::DeadlineExceeded
    }

    /// Whether [`interrupt`](crate::interrupt) ended the wait (not a stop:
    /// see [`is_stopped`](Self::is_stopped)), as
    /// [`WaitError::is_interrupted`].
    pub fn is_interrupted(&self) -> bool {
        self.kind == SendErrorKind::Interrupted
    }

    /// Whether the task has been [`stop`](crate::stop)ped, as
    /// [`WaitError::is_stopped`].
    pub fn is_stopped(&self) -> bool {
        self.kind == SendErrorKind::Stopped
    }
}

impl<T> fmt::Debug for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendError")
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for SendErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SendErrorKind::Disconnected => "sending on a closed channel: the receiver has gone",
            SendErrorKind::Timeout => "timed out waiting to send on a full channel",
            SendErrorKind::DeadlineExceeded => "send cut short: deadline exceeded",
            SendErrorKind::Interrupted => "send interrupted",
            SendErrorKind::Stopped => "send refused: the task is stopped",
        })
    }
}

impl<T> fmt::Display for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.kind, f)
    }
}

impl<T: Send> std::error::Error for SendError<T> {}

impl<T> TrySendError<T> {
    /// The value that was not sent.
    pub fn into_inner(self) -> T {
        match self {
            TrySendError::Full(v) | TrySendError::Disconnected(v) => v,
        }
    }

    /// Whether the channel was full.
    pub fn is_full(&self) -> bool {
        matches!(self, TrySendError::Full(_))
    }

    /// Whether the receiver has been dropped.
    pub fn is_disconnected(&self) -> bool {
        matches!(self, TrySendError::Disconnected(_))
    }
}

impl<T> fmt::Debug for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(_) => f.write_str("Full(..)"),
            TrySendError::Disconnected(_) => f.write_str("Disconnected(..)"),
        }
    }
}

impl<T> fmt::Display for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TrySendError::Full(_) => "sending on a full channel",
            TrySendError::Disconnected(_) => "sending on a closed channel: the receiver has gone",
        })
    }
}

impl<T: Send> std::error::Error for TrySendError<T> {}

impl<T> From<SendError<T>> for TrySendError<T> {
    /// A send that failed because the receiver went is `Disconnected`;
    /// any other ending means the channel stayed full (`Full`).
    fn from(e: SendError<T>) -> Self {
        match e.kind {
            SendErrorKind::Disconnected => TrySendError::Disconnected(e.value),
            _ => TrySendError::Full(e.value),
        }
    }
}

/// Under loom: the crossbeam queues' methods over a mutex, which loom
/// checks (see the module docs).
#[cfg(loom)]
mod model_queue {
    use crate::loom::{lock, sync::Mutex};
    use std::collections::VecDeque;

    pub(super) struct SegQueue<T>(Mutex<VecDeque<T>>);

    impl<T> SegQueue<T> {
        pub(super) fn new() -> Self {
            SegQueue(Mutex::new(VecDeque::new()))
        }
        pub(super) fn push(&self, v: T) {
            lock(&self.0).push_back(v);
        }
        pub(super) fn pop(&self) -> Option<T> {
            lock(&self.0).pop_front()
        }
        pub(super) fn is_empty(&self) -> bool {
            lock(&self.0).is_empty()
        }
    }

    pub(super) struct ArrayQueue<T> {
        q: Mutex<VecDeque<T>>,
        cap: usize,
    }

    impl<T> ArrayQueue<T> {
        pub(super) fn new(cap: usize) -> Self {
            ArrayQueue {
                q: Mutex::new(VecDeque::new()),
                cap,
            }
        }
        pub(super) fn push(&self, v: T) -> Result<(), T> {
            let mut q = lock(&self.q);
            if q.len() == self.cap {
                return Err(v);
            }
            q.push_back(v);
            Ok(())
        }
        pub(super) fn pop(&self) -> Option<T> {
            lock(&self.q).pop_front()
        }
        pub(super) fn is_full(&self) -> bool {
            lock(&self.q).len() == self.cap
        }
        pub(super) fn is_empty(&self) -> bool {
            lock(&self.q).is_empty()
        }
    }
}

#[cfg(all(test, loom))]
#[path = "loom_mpsc.rs"]
mod loom_mpsc;
