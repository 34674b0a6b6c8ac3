//! Slots: where a timer lives, and the version protocol that guards it.
//!
//! A timer is a [`Slot`] in a [`SlotTable`]. Its id is `version << 32 | slot`.
//! The slot's *state word* packs `version` (high 32 bits) with a `stamp`
//! (low 32 bits), and every transition is one atomic operation on that word.
//!
//! # Versions
//!
//! One use of a slot (a *generation*) owns four consecutive versions, starting
//! at a multiple of 4. With `v` the generation's first version:
//!
//! ```text
//!                 arm (owner)                 unschedule: CAS v -> v+2
//!   IDLE (v-2) ───────────────► ARMED (v) ───────────────────────────► IDLE (v+2)
//!                                 │    ▲                                canceller drops
//!              timer: CAS v -> v+1│    │periodic re-arm: CAS v+1 -> v   and frees the slot
//!                                 ▼    │
//!                              RUNNING (v+1) ── callback done ───────► IDLE (v+2)
//!                                 │                                     timer frees
//!         unschedule: CAS v+1 -> v+3
//!                                 ▼
//!                             CANCELLING (v+3) ── callback done ─────► IDLE (v+2)
//! ```
//!
//! This is bthread's protocol (v -> v+1 running -> v+2 done, v -> v+2
//! cancelled) with two additions:
//!
//! - An idle slot's version is `v+2`, never equal to an armed version: arming
//!   moves it on to `v+4`. In bthread a free slot and the next timer in it
//!   share a version, which is harmless there because only the timer thread
//!   frees; here the *canceller* frees the slot at once (the early-reclaim
//!   answer to brpc #3383), so a forged or stale id must never be able to
//!   "cancel" a free slot and free it twice. Ids whose version is not a
//!   multiple of 4 are rejected outright.
//! - `CANCELLING` (`v+3`): an unschedule that finds the callback running
//!   records its request in the same word, atomically with the version, so a
//!   periodic timer is not re-armed. A separate flag word could be set late,
//!   on the *next* generation of the slot, and cancel an unrelated timer.
//!
//! Versions are 32 bits: an id aliases a later timer in the same slot only
//! after 2^30 reuses of that slot while the id is held (bthread has the same
//! limit at 2^31). The per-thread slot cache hands slots out first-in
//! first-out over up to 64 slots, which spreads reuse and makes that window
//! correspondingly longer.
//!
//! # Stamps and entries
//!
//! Buckets and the heap hold [`Entry`] *values* `{ deadline, slot, stamp }`,
//! never pointers, which is what lets a canceller free a slot without touching
//! any bucket or the heap. The stamp is a per-slot counter bumped by every
//! arm, every `reschedule` and every periodic re-arm, and each of those pushes
//! exactly one entry carrying the new stamp. So at any time a slot has at most
//! one *live* entry: the one whose stamp equals the slot's and whose slot is
//! `ARMED`. Every other entry is stale and is dropped when seen.
//!
//! Why a stamp rather than "the entry's deadline equals the slot's deadline"
//! (or a version) for `reschedule`: rescheduling must change *which entry is
//! live* only if the timer is still the same armed generation. With the
//! version and a deadline in separate words, a reschedule that checked the
//! version and then stored the deadline could store it into a slot that had
//! meanwhile fired, been freed and been re-armed by someone else, silently
//! killing that other timer. Packing version and stamp into one word makes
//! "still armed, same generation, and now only the new entry counts" a single
//! compare-and-swap, and keeps entries at 16 bytes. Like versions, stamps
//! wrap: a stale entry could be mistaken for live only if its slot's stamp
//! advanced by exactly 2^32 (four billion reschedules or re-arms of that slot)
//! while the entry survived, i.e. without the timer thread collecting the
//! bucket that holds it and without that bucket or the heap being compacted
//! meanwhile. We accept that bound, as bthread accepts its version bound.
//!
//! # Memory ordering
//!
//! The payload (callback and period) has one holder at a time: the owner
//! while arming, the timer thread while `RUNNING`/`CANCELLING` or when it
//! retires a timer, the canceller after its successful CAS. Hand-overs are
//! release/acquire on the state word: arming stores `ARMED` with `Release`;
//! the timer thread's `ARMED -> RUNNING` and the canceller's `ARMED -> IDLE`
//! CASes `Acquire` (a `reschedule` in between is an `AcqRel` read-modify-write,
//! which continues the release sequence); a periodic re-arm `RUNNING -> ARMED`
//! is `Release`, so a canceller that then wins the timer also sees what the
//! last call did to the closure's state; ending a run swaps `IDLE` in (a
//! read-modify-write, so that it is ordered after a racing canceller's
//! `RUNNING -> CANCELLING`; see `Slot::finish`). A slot returns to the pool
//! only after its `IDLE` store, and the pool's own synchronization orders that
//! before the next owner's writes.

use crate::callback::Callback;
use crate::loom::{AtomicPtr, AtomicU64, Ordering, UnsafeCell};
use std::fmt;

/// Phases of a version (`version % 4`), which are also the offsets from a
/// generation's first version. Pending: the callback has not run.
const ARMED: u32 = 0;
/// The timer thread is running the callback.
const RUNNING: u32 = 1;
/// Free (in the pool) or being armed by the owner that took it from the pool.
const IDLE: u32 = 2;
/// Running, and an `unschedule` asked that it not be re-armed.
const CANCELLING: u32 = 3;

/// The lowest idle version: where the never-used slots of
/// [`SlotTable::new`] start (their first timer gets version 4). The tables
/// of timer threads start further on (`SlotTable::numbered`).
const FIRST_IDLE_VERSION: u32 = IDLE;

/// log2 of the number of slots in segment 0; segment `k` has twice as many
/// as segment `k - 1`.
#[cfg(not(loom))]
const BASE_SHIFT: u32 = 8;
#[cfg(loom)]
const BASE_SHIFT: u32 = 2;

/// Number of segments. 24 segments starting at 256 slots hold
/// 256 * (2^24 - 1) = 2^32 - 256 slots, every index a `u32` can name.
#[cfg(not(loom))]
pub(crate) const NUM_SEGMENTS: usize = 24;
#[cfg(loom)]
pub(crate) const NUM_SEGMENTS: usize = 3;

/// The identity of a scheduled timer: `version << 32 | slot`.
///
/// Ids are only meaningful to the [`TimerThread`](crate::TimerThread) that
/// issued them. An id that is stale (the timer fired or was cancelled) or
/// forged is answered with
/// [`Unschedule::NotFound`](crate::Unschedule::NotFound) and never touches
/// another timer, except in the one case no scheme can exclude: a forged id
/// that happens to equal the id of a live timer *is* that timer's id. An id
/// taken to another `TimerThread` is such a forged id; each thread starts
/// its slots' versions far apart from the others' (`SlotTable::numbered`),
/// so that it matches none of that thread's timers unless one of the two
/// threads reused that slot tens of thousands of times more than the
/// other. Keep ids with their thread all the same (the spindle runtime uses
/// the global one only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerId(u64);

impl TimerId {
    #[inline]
    pub(crate) const fn new(version: u32, slot: u32) -> Self {
        TimerId((version as u64) << 32 | slot as u64)
    }

    /// The raw value, e.g. to store the id in an atomic.
    #[inline]
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// An id from a value returned by [`as_u64`](Self::as_u64). Any `u64` is
    /// accepted: a value that names no timer is simply not found.
    #[inline]
    pub const fn from_u64(raw: u64) -> Self {
        TimerId(raw)
    }

    #[inline]
    pub(crate) const fn slot(self) -> u32 {
        self.0 as u32
    }

    #[inline]
    pub(crate) const fn version(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

impl fmt::Display for TimerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "timer {}v{}", self.slot(), self.version())
    }
}

/// A slot's state word: `version << 32 | stamp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct State(u64);

impl State {
    #[inline]
    const fn new(version: u32, stamp: u32) -> Self {
        State((version as u64) << 32 | stamp as u64)
    }
    #[inline]
    const fn version(self) -> u32 {
        (self.0 >> 32) as u32
    }
    #[inline]
    const fn stamp(self) -> u32 {
        self.0 as u32
    }
    #[inline]
    const fn phase(self) -> u32 {
        self.version() & 3
    }
}

/// An entry in a bucket or in the timer thread's heap: "slot `slot` is due at
/// `deadline`, if its stamp is still `stamp`". 16 bytes, ordered by deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Entry {
    pub(crate) deadline: u64,
    pub(crate) slot: u32,
    pub(crate) stamp: u32,
}

/// What a slot carries besides its state: touched only by its holder (see
/// the module docs).
#[derive(Debug)]
pub(crate) struct Payload {
    /// 0 for a one-shot timer, else the period in nanoseconds.
    pub(crate) period: u64,
    pub(crate) callback: Callback,
}

/// The outcome of [`Slot::cancel`].
#[derive(Debug)]
pub(crate) enum Cancel {
    /// The timer was armed and is now cancelled; the caller must drop the
    /// callback and free the slot.
    Removed(Callback),
    /// The callback is running (it will not be re-armed).
    Running,
    /// Nothing with that id is armed or running.
    NotFound,
}

/// One timer's storage. A cache line each, so that timers armed by different
/// threads never share one.
#[derive(Debug)]
#[repr(align(64))]
pub(crate) struct Slot {
    /// `version << 32 | stamp`; see the module docs.
    state: AtomicU64,
    payload: UnsafeCell<Payload>,
    /// What the callback reads first, as a [`PrefetchHint`]: the timer thread
    /// loads it while the callback before this one runs. Read outside the
    /// state protocol (a stale hint only prefetches the wrong lines), so a
    /// plain std atomic, which loom need not model.
    hint: std::sync::atomic::AtomicUsize,
}

/// Cache lines a callback reads first, packed in one word: the address of
/// the first line, with the number of lines (1 to 63) in the low six bits
/// that a line's address leaves zero. 0 means none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PrefetchHint(usize);

impl PrefetchHint {
    pub(crate) const NONE: PrefetchHint = PrefetchHint(0);

    /// The lines that hold the `len` bytes at `data` (at most 63 lines).
    pub(crate) fn new(data: *const u8, len: usize) -> Self {
        let addr = data as usize;
        if addr == 0 || len == 0 {
            return Self::NONE;
        }
        let first = addr & !63;
        let lines = (addr - first).saturating_add(len).div_ceil(64).min(63);
        PrefetchHint(first | lines)
    }

    /// Starts loading the lines.
    #[inline]
    pub(crate) fn prefetch(self) {
        if self.0 != 0 {
            crate::prefetch::prefetch((self.0 & !63) as *const u8, (self.0 & 63) * 64);
        }
    }
}

// SAFETY: the payload is accessed only by its current holder, as the state
// protocol (module docs) hands it over with release/acquire transitions; the
// callback inside is `Send`. So shared references to a slot never lead to
// concurrent access to the payload.
unsafe impl Sync for Slot {}

impl Slot {
    fn new(first_version: u32) -> Self {
        debug_assert_eq!(first_version % 4, IDLE, "a new slot is idle");
        Slot {
            state: AtomicU64::new(State::new(first_version, 0).0),
            payload: UnsafeCell::new(Payload {
                period: 0,
                callback: Callback::empty(),
            }),
            hint: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Arms an idle slot that the caller took from the pool: stores the
    /// payload, then publishes the next generation. Returns its version and
    /// the stamp of the entry the caller must push.
    #[inline]
    pub(crate) fn arm(&self, period: u64, callback: Callback, hint: PrefetchHint) -> (u32, u32) {
        // The slot came from the pool, whose synchronization ordered its last
        // `IDLE` store before this load.
        let s = State(self.state.load(Ordering::Relaxed));
        assert!(
            s.phase() == IDLE || !cfg!(any(debug_assertions, loom)),
            "armed a slot that is not idle: {s:?}"
        );
        self.payload.with_mut(|p| {
            // SAFETY: an idle slot taken from the pool has no other holder:
            // no id names it (its version is not armed) and no entry is live.
            let p = unsafe { &mut *p };
            p.period = period;
            debug_assert!(p.callback.is_empty());
            p.callback = callback;
        });
        self.hint
            .store(hint.0, std::sync::atomic::Ordering::Relaxed);
        // IDLE (v - 2) -> ARMED (v): the next generation.
        let armed = State::new(s.version().wrapping_add(2), s.stamp().wrapping_add(1));
        // Release: whoever wins the slot next (timer thread or canceller)
        // acquires the payload written above.
        self.state.store(armed.0, Ordering::Release);
        (armed.version(), armed.stamp())
    }

    /// `unschedule`: cancels generation `version` if it is armed (the caller
    /// then owns the callback and must free the slot), or records the request
    /// if its callback is running.
    pub(crate) fn cancel(&self, version: u32) -> Cancel {
        if version & 3 != ARMED {
            return Cancel::NotFound;
        }
        let mut s = State(self.state.load(Ordering::Acquire));
        loop {
            let (next, found) = if s.version() == version {
                // Armed: take it. Acquire pairs with the arm's (or the
                // periodic re-arm's) Release: the payload is ours to read.
                (State::new(version.wrapping_add(IDLE), s.stamp()), true)
            } else if s.version() == version.wrapping_add(RUNNING) {
                // Running: ask that it not be re-armed.
                (
                    State::new(version.wrapping_add(CANCELLING), s.stamp()),
                    false,
                )
            } else if s.version() == version.wrapping_add(CANCELLING) {
                return Cancel::Running;
            } else {
                return Cancel::NotFound;
            };
            match self
                .state
                .compare_exchange(s.0, next.0, Ordering::Acquire, Ordering::Acquire)
            {
                Ok(_) if found => {
                    let callback = self.payload.with_mut(|p| {
                        // SAFETY: the CAS moved the slot from ARMED to IDLE;
                        // that makes us its only holder (nobody else can leave
                        // IDLE; the slot is not in the pool yet).
                        std::mem::replace(unsafe { &mut (*p).callback }, Callback::empty())
                    });
                    return Cancel::Removed(callback);
                }
                Ok(_) => return Cancel::Running,
                // A reschedule bumped the stamp, the timer started, a
                // periodic timer was re-armed...: look again.
                Err(actual) => s = State(actual),
            }
        }
    }

    /// `reschedule`: if generation `version` is armed, bumps the stamp so that
    /// only an entry carrying the returned stamp is live. `None` if it is not
    /// armed (fired, running, cancelled, or the id is stale).
    pub(crate) fn restamp(&self, version: u32) -> Option<u32> {
        if version & 3 != ARMED {
            return None;
        }
        let mut s = State(self.state.load(Ordering::Relaxed));
        loop {
            if s.version() != version {
                return None;
            }
            let next = State::new(version, s.stamp().wrapping_add(1));
            // AcqRel keeps this read-modify-write in the release sequence of
            // the arm, so the timer thread's acquire still sees the payload.
            match self
                .state
                .compare_exchange_weak(s.0, next.0, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Some(next.stamp()),
                Err(actual) => s = State(actual),
            }
        }
    }

    /// Whether an entry with `stamp` is live (see the module docs).
    #[inline]
    pub(crate) fn is_live(&self, stamp: u32) -> bool {
        let s = State(self.state.load(Ordering::Relaxed));
        s.phase() == ARMED && s.stamp() == stamp
    }

    /// Timer thread: claims the timer of a due entry (`ARMED -> RUNNING`).
    /// Returns its version, or `None` if the entry is stale.
    #[inline]
    pub(crate) fn start(&self, stamp: u32) -> Option<u32> {
        self.claim(stamp, RUNNING)
    }

    /// Timer thread, at shutdown: retires the timer of a live entry without
    /// running it (`ARMED -> IDLE`) and hands back its version and callback.
    /// `None` if the entry is stale.
    pub(crate) fn retire(&self, stamp: u32) -> Option<(u32, Callback)> {
        let version = self.claim(stamp, IDLE)?;
        let callback = self.payload.with_mut(|p| {
            // SAFETY: the CAS in `claim` moved the slot from ARMED to IDLE:
            // we are its only holder until we free it.
            std::mem::replace(unsafe { &mut (*p).callback }, Callback::empty())
        });
        Some((version, callback))
    }

    /// `ARMED (v, stamp) -> (v + phase, stamp)`, acquiring the payload.
    #[inline]
    fn claim(&self, stamp: u32, phase: u32) -> Option<u32> {
        let mut s = State(self.state.load(Ordering::Relaxed));
        loop {
            if s.phase() != ARMED || s.stamp() != stamp {
                return None;
            }
            let next = State::new(s.version().wrapping_add(phase), stamp);
            match self.state.compare_exchange_weak(
                s.0,
                next.0,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(s.version()),
                Err(actual) => s = State(actual),
            }
        }
    }

    /// Timer thread, `RUNNING`/`CANCELLING`: runs `f` on the payload.
    ///
    /// # Safety
    /// The caller must hold the slot: it claimed it with [`start`](Self::start)
    /// and has not yet called [`finish`](Self::finish) or had
    /// [`rearm`](Self::rearm) succeed.
    #[inline]
    pub(crate) unsafe fn with_payload<R>(&self, f: impl FnOnce(&mut Payload) -> R) -> R {
        // SAFETY: the caller holds the slot (RUNNING or CANCELLING, which only
        // the timer thread leaves), so no one else touches the payload.
        self.payload.with_mut(|p| f(unsafe { &mut *p }))
    }

    /// Timer thread: ends generation `version` after its callback ran
    /// (`RUNNING`/`CANCELLING -> IDLE`). The caller must have emptied the
    /// callback and then frees the slot.
    #[inline]
    pub(crate) fn finish(&self, version: u32, stamp: u32) {
        // Only the timer thread leaves RUNNING or CANCELLING, so no CAS is
        // needed; but it must be a read-modify-write. A canceller's
        // RUNNING -> CANCELLING CAS may race with it, and IDLE must come last
        // in the word's modification order. The C++ model gives that for a
        // plain store too (an RMW's write directly follows the value it read),
        // but loom's modification order does not, and with a plain store loom
        // finds executions where the next owner of the slot reads CANCELLING.
        // A swap states the order explicitly; it costs nothing measurable on
        // the firing path. Release publishes the callback's effects to an
        // unschedule that then reads IDLE, as in bthread.
        let previous = State(self.state.swap(
            State::new(version.wrapping_add(IDLE), stamp).0,
            Ordering::Release,
        ));
        debug_assert!(
            previous == State::new(version.wrapping_add(RUNNING), stamp)
                || previous == State::new(version.wrapping_add(CANCELLING), stamp),
            "finished a timer that was not running: {previous:?}"
        );
    }

    /// Timer thread: re-arms a periodic timer after its callback ran
    /// (`RUNNING (v) -> ARMED (v, stamp + 1)`). Returns the stamp of the entry
    /// to push, or `None` if an unschedule asked for cancellation meanwhile
    /// (`CANCELLING`): then the caller still holds the slot and must retire it
    /// with [`finish`](Self::finish).
    #[inline]
    pub(crate) fn rearm(&self, version: u32, stamp: u32) -> Option<u32> {
        let running = State::new(version.wrapping_add(RUNNING), stamp);
        let armed = State::new(version, stamp.wrapping_add(1));
        // Release: a canceller that wins the re-armed timer sees the closure
        // state left by this call.
        self.state
            .compare_exchange(running.0, armed.0, Ordering::Release, Ordering::Relaxed)
            .ok()
            .map(|_| armed.stamp())
    }
}

/// Segment `k` holds `BASE << k` slots; slot indices run through the segments
/// in order.
#[inline]
pub(crate) const fn segment_len(k: usize) -> usize {
    1usize << (BASE_SHIFT as usize + k)
}

/// Segment and offset of slot `index`, or `None` past the last segment.
#[inline]
fn locate(index: u32) -> Option<(usize, usize)> {
    let i = u64::from(index) + (1u64 << BASE_SHIFT);
    // Segment k covers i in [BASE << k, BASE << (k + 1)).
    let k = (63 - i.leading_zeros() - BASE_SHIFT) as usize;
    if k >= NUM_SEGMENTS {
        return None;
    }
    Some((k, (i - (1u64 << (BASE_SHIFT as usize + k))) as usize))
}

/// First slot index of segment `k`.
#[inline]
pub(crate) const fn segment_start(k: usize) -> u64 {
    (1u64 << (BASE_SHIFT as usize + k)) - (1u64 << BASE_SHIFT)
}

/// All slots of one timer thread, in segments that never move.
///
/// Segment `k` is allocated (by [`grow`](Self::grow), under the pool's lock)
/// the first time the pool runs out of free slots; segments are freed only
/// when the table is dropped. Lookups are lock-free: an index is split into
/// (segment, offset) with one `leading_zeros`, and segment pointers are
/// published with `Release` and read with `Acquire`. Doubling segments keep
/// the table itself small (24 pointers) while covering every `u32` index.
#[derive(Debug)]
pub(crate) struct SlotTable {
    segments: [AtomicPtr<Slot>; NUM_SEGMENTS],
    /// The version every slot of this table starts idle at.
    first_version: u32,
}

impl SlotTable {
    /// A table whose slots start at the lowest idle version (for tests of
    /// the table itself).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn new() -> Self {
        Self::numbered(0)
    }

    /// The table of timer thread (pool) number `n`. Its slots start at a
    /// version of their own, spread over the 2^30 generations by the golden
    /// ratio, so that an id carried to another timer thread (which numbers
    /// its slots from 0 too) names none of its timers: slot `i` of two
    /// tables has the same version only once one of them has reused it far
    /// more often than the other (any two of the first 10 000 pools start
    /// over 66 000 generations apart; pools 1 and 2, 400 million).
    pub(crate) fn numbered(n: u64) -> Self {
        // 2^30 / phi, made odd: distinct tables for the first 2^30 pools.
        const GOLDEN_30: u64 = 0x278D_DE6F;
        let generation = (n.wrapping_mul(GOLDEN_30) & ((1 << 30) - 1)) as u32;
        SlotTable {
            segments: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
            first_version: FIRST_IDLE_VERSION.wrapping_add(generation << 2),
        }
    }

    /// The slot at `index`, if that index exists.
    #[inline]
    pub(crate) fn get(&self, index: u32) -> Option<&Slot> {
        let (k, offset) = locate(index)?;
        let segment = self.segments[k].load(Ordering::Acquire);
        if segment.is_null() {
            return None;
        }
        // SAFETY: a non-null segment pointer was published (Release, pairs
        // with our Acquire) after its `segment_len(k)` slots were initialized;
        // it stays valid until the table is dropped, which `&self` excludes;
        // `offset < segment_len(k)` by construction of `locate`.
        Some(unsafe { &*segment.add(offset) })
    }

    /// Starts loading the slot of `entry` into the cache, for a look at it
    /// a little later: the timer thread reads slots in deadline order, all
    /// over the table, and with many timers each read was a cache miss.
    #[inline]
    pub(crate) fn prefetch(&self, entry: &Entry) {
        if let Some(slot) = self.get(entry.slot) {
            crate::prefetch::prefetch(slot, 1);
        }
    }

    /// Starts loading what the callback of `entry`'s slot reads first (its
    /// [`PrefetchHint`]). The slot itself should be in cache already.
    #[inline]
    pub(crate) fn prefetch_target(&self, entry: &Entry) {
        if let Some(slot) = self.get(entry.slot) {
            PrefetchHint(slot.hint.load(std::sync::atomic::Ordering::Relaxed)).prefetch();
        }
    }

    /// Whether `entry` is its slot's live entry.
    #[inline]
    pub(crate) fn is_live(&self, entry: &Entry) -> bool {
        self.get(entry.slot).is_some_and(|s| s.is_live(entry.stamp))
    }

    /// Allocates segment `k` (the caller serializes calls and passes each `k`
    /// once, in order) and returns the range of slot indices it adds.
    pub(crate) fn grow(&self, k: usize) -> std::ops::Range<u64> {
        assert!(k < NUM_SEGMENTS, "segment index out of range");
        let segment: Box<[Slot]> = (0..segment_len(k))
            .map(|_| Slot::new(self.first_version))
            .collect();
        let ptr = Box::into_raw(segment).cast::<Slot>();
        let previous = self.segments[k].swap(ptr, Ordering::Release);
        debug_assert!(previous.is_null(), "segment allocated twice");
        segment_start(k)..segment_start(k + 1)
    }
}

impl Drop for SlotTable {
    fn drop(&mut self) {
        for (k, segment) in self.segments.iter().enumerate() {
            let ptr = segment.load(Ordering::Acquire);
            if ptr.is_null() {
                continue;
            }
            // SAFETY: `ptr` came from `Box::into_raw` of a boxed slice of
            // `segment_len(k)` slots in `grow`, and is reclaimed only here,
            // once, with `&mut self`. Dropping the slots drops any callback a
            // slot still holds (none when the timer thread shut down cleanly).
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, segment_len(k))) });
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_prefetch_hint_names_the_lines_of_its_bytes() {
        let hint = |addr: usize, len| PrefetchHint::new(addr as *const u8, len).0;
        assert_eq!(hint(0x1000, 144), 0x1000 | 3);
        assert_eq!(hint(0x1000, 1), 0x1000 | 1);
        assert_eq!(hint(0x1010, 64), 0x1000 | 2, "straddles two lines");
        assert_eq!(hint(0x103f, 1), 0x1000 | 1);
        assert_eq!(hint(0x1000, usize::MAX), 0x1000 | 63, "at most 63 lines");
        assert_eq!(PrefetchHint::new(std::ptr::null(), 64), PrefetchHint::NONE);
        assert_eq!(hint(0x1000, 0), PrefetchHint::NONE.0);
        // Prefetching any of them reads nothing and cannot fault.
        for h in [hint(0x1000, 144), hint(8, usize::MAX), 0] {
            PrefetchHint(h).prefetch();
        }
    }

    #[test]
    fn entries_are_16_bytes_and_slots_a_cache_line() {
        assert_eq!(std::mem::size_of::<Entry>(), 16);
        assert_eq!(std::mem::size_of::<Slot>(), 64);
    }

    #[test]
    fn indices_map_onto_doubling_segments() {
        assert_eq!(locate(0), Some((0, 0)));
        assert_eq!(locate(255), Some((0, 255)));
        assert_eq!(locate(256), Some((1, 0)));
        assert_eq!(locate(767), Some((1, 511)));
        assert_eq!(locate(768), Some((2, 0)));
        assert_eq!(locate(u32::MAX - 255), None);
        assert_eq!(locate(u32::MAX), None);
        let last = (segment_start(NUM_SEGMENTS) - 1) as u32;
        assert_eq!(
            locate(last),
            Some((NUM_SEGMENTS - 1, segment_len(NUM_SEGMENTS - 1) - 1))
        );
        for k in 0..6 {
            let start = segment_start(k) as u32;
            assert_eq!(locate(start), Some((k, 0)));
            assert_eq!(
                locate(start + segment_len(k) as u32 - 1),
                Some((k, segment_len(k) - 1))
            );
        }
    }

    #[test]
    fn only_allocated_indices_exist() {
        let t = SlotTable::new();
        assert!(t.get(0).is_none());
        assert_eq!(t.grow(0), 0..256);
        assert!(t.get(0).is_some() && t.get(255).is_some());
        assert!(t.get(256).is_none());
        assert_eq!(t.grow(1), 256..768);
        assert!(t.get(767).is_some() && t.get(768).is_none());
    }

    #[test]
    fn the_version_protocol() {
        let t = SlotTable::new();
        t.grow(0);
        let slot = t.get(3).unwrap();
        let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));

        // arm -> cancel: Removed once, then NotFound.
        let (v, stamp) = slot.arm(0, Callback::once(|| {}), PrefetchHint::NONE);
        assert_eq!((v, stamp), (4, 1));
        assert!(slot.is_live(stamp));
        assert!(matches!(slot.cancel(v), Cancel::Removed(_)));
        assert!(!slot.is_live(stamp));
        assert!(matches!(slot.cancel(v), Cancel::NotFound));
        // The idle slot refuses ids of every phase.
        for forged in [v + 2, v + 4, v + 1, v + 3] {
            assert!(matches!(slot.cancel(forged), Cancel::NotFound));
        }

        // arm -> run: the entry is claimed once; cancel while running asks
        // for cancellation and reports Running.
        let h = hits.clone();
        let (v, stamp) = slot.arm(
            0,
            Callback::once(move || {
                h.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }),
            PrefetchHint::NONE,
        );
        assert_eq!(v, 8);
        assert_eq!(slot.start(stamp), Some(v));
        assert_eq!(slot.start(stamp), None);
        assert!(matches!(slot.cancel(v), Cancel::Running));
        assert!(matches!(slot.cancel(v), Cancel::Running));
        // SAFETY: we claimed the slot with `start`.
        unsafe { slot.with_payload(|p| p.callback.call()) };
        assert_eq!(slot.rearm(v, stamp), None, "cancel requested: not re-armed");
        slot.finish(v, stamp);
        assert!(matches!(slot.cancel(v), Cancel::NotFound));
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);

        // reschedule: the old entry dies, the new one lives.
        let (v, stamp) = slot.arm(5, Callback::periodic(|| {}), PrefetchHint::NONE);
        let stamp2 = slot.restamp(v).unwrap();
        assert!(!slot.is_live(stamp) && slot.is_live(stamp2));
        assert_eq!(slot.start(stamp), None);
        // periodic re-arm keeps the version and bumps the stamp.
        assert_eq!(slot.start(stamp2), Some(v));
        assert_eq!(
            slot.restamp(v),
            None,
            "running timers cannot be rescheduled"
        );
        let stamp3 = slot.rearm(v, stamp2).unwrap();
        assert!(slot.is_live(stamp3));
        // shutdown retires it without running.
        let (version, cb) = slot.retire(stamp3).unwrap();
        assert_eq!(version, v);
        assert!(!cb.is_empty());
        assert!(matches!(slot.cancel(v), Cancel::NotFound));
    }
}
